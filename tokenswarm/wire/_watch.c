/* The arrival watcher: dating events that arrive while the event loop is stalled.
 *
 * One read has one kernel stamp, its newest segment's, and TCP merges segments that queue up
 * unread (the merged segment keeps the newest stamp). So when the event loop is held -- a
 * burst of request starts and ends, a slow callback -- every event that queued meanwhile on
 * a stream is dated by the last, and the gaps between them read as zero. Nothing the loop
 * does afterwards can recover those times: they are gone from the kernel.
 *
 * This thread does not need the GIL. Each sweep of the loop tells it when the next is due
 * (``alive(period_s)``); when the loop is STALL_NS past that, the thread takes the watched
 * sockets that received data since its last look (edge-triggered epoll) and notes, per
 * socket, how many bytes the connection has received in total (TCP_INFO's
 * tcpi_bytes_received) and the kernel stamp of the newest queued segment (a MSG_PEEK|MSG_TRUNC
 * read: nothing is copied or consumed). A
 * note says "the first rx bytes had all arrived by this stamp". When the loop reads again,
 * read_events cuts the read at its chunk boundaries and dates each chunk by the first note
 * that covers its last byte (never later than the read's own stamp).
 *
 * The note is taken with TCP_INFO first and the peek second: a segment arriving in between
 * makes the stamp later than the bytes it vouches for, never earlier.
 *
 * While the loop keeps up (the usual case) the thread does not run at all: it blocks on a
 * timerfd that every sweep re-arms (``alive()``: one timerfd_settime, no context switch), so it
 * expires only when the loop is STALL_NS late for a sweep. The thread used to wake when the loop
 * would count as stalled, compare two clocks and sleep again: five hundred to a thousand
 * wake-ups a second for a loop sweeping every millisecond, each a pair of context switches on
 * the loop's core (measured: 9.6 % of the process's CPU at 12 streams of 5 ms chunks, where
 * the loop itself is light). When the loop has not swept for a while and nothing has arrived
 * since the thread's last look (a quiet loop: every stream waiting for its server), the thread
 * blocks until something does, on a second epoll set that holds the first (readable when the first has
 * events, which it leaves pending): an idle process does not pay two thousand sweeps a second
 * (measured: 4.6 % of a core with 96 streams waiting), and an arrival during a stall is noted
 * at once.
 */
#include "_watch.h"

#ifdef __linux__

#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define NOTE_MAX 64               /* notes kept per socket; when full the newest is overwritten */
#define STALL_NS 1000000LL        /* the loop counts as stalled this long after its next sweep was due */
#define NAP_PAST_NS 50000L        /* while the loop keeps up: look this long after it would count as stalled */
#define NAP_MIN_NS 50000L         /* the shortest nap */
#define NAP_STALLED_NS 500000L    /* and while it is stalled: the notes' resolution */
#define PEEK_SPAN (64L << 20)     /* longer than any receive queue: the peek reaches the newest segment */
#define EVENTS_PER_WAIT 256
#define IDLE_WAIT_MS 100          /* a quiet thread's longest block before it looks at its set again */

typedef struct {
    unsigned int gen; /* registration number (epoll data carries it: a reused fd is not confused) */
    int active;
    unsigned long long pos; /* rx offset of the next byte the reader will consume */
    int n;
    watch_note notes[NOTE_MAX];
} watch_slot;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static watch_slot *slots;
static int n_slots;
static int n_watched;
static unsigned int next_gen = 1;
static int epfd = -1;
static int outer_epfd = -1; /* holds epfd alone: readable while epfd has pending events */
static int stall_tfd = -1;   /* timerfd: every sweep re-arms it to expire NAP_PAST_NS after stall_at_ns */
static pid_t owner_pid;
/* Shared between the interpreter's thread and the watcher's: atomics (relaxed order is
 * enough -- each is one independent number; the slots are guarded by ``lock``). */
/* CLOCK_MONOTONIC after which the loop counts as stalled: its latest sweep, plus the period to its
 * next (the loop says it: alive(period)), plus STALL_NS */
static atomic_llong stall_at_ns;
static atomic_ullong n_notes_total, n_stalled_sweeps, n_wakeups;
static atomic_ullong n_notes_dropped;  /* a socket's notes were full: the newest was overwritten */
static atomic_ullong n_notes_over_cap; /* a read covered more notes than read_events takes: the rest unused */
static char *peek_area; /* PEEK_SPAN of reserved, never-touched memory (MSG_TRUNC copies nothing) */

/* getpid() is a system call each time (glibc stopped caching it), and the ownership checks
 * below run on every watched read: measured 4.7 getpid calls per request. The pid is read once
 * and again in a forked child (pthread_atfork), so a child still starts its own thread. */
static pid_t cached_pid;
static int atfork_registered;

static void pid_after_fork(void)
{
    cached_pid = getpid();
}

static pid_t my_pid(void)
{
    if (cached_pid == 0) {
        if (!atfork_registered && pthread_atfork(NULL, NULL, pid_after_fork) == 0)
            atfork_registered = 1;
        cached_pid = getpid();
    }
    return cached_pid;
}

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
}

/* Bytes the connection has received in total (0 = ok). */
static int tcp_rx(int fd, unsigned long long *rx)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
        return -1;
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return -1; /* a kernel older than 4.1 */
    *rx = ti.tcpi_bytes_received;
    return 0;
}

/* The kernel stamp (CLOCK_REALTIME s) of the newest queued segment; 0 if nothing is queued. */
static int peek_stamp(int fd, double *stamp)
{
    struct timespec ts;
    int stamped = 0;
    if (recv_stamped(fd, peek_area, PEEK_SPAN, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT, 1, &ts, &stamped) <= 0 || !stamped)
        return 0;
    *stamp = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return 1;
}

static void add_note(watch_slot *s, unsigned long long rx, double stamp)
{
    if (s->n > 0 && rx <= s->notes[s->n - 1].rx)
        return; /* nothing new since the last note */
    int full = s->n == NOTE_MAX;
    int i = full ? NOTE_MAX - 1 : s->n++;
    if (full) /* the newest note gives way: its bytes are dated by a later one */
        atomic_fetch_add_explicit(&n_notes_dropped, 1, memory_order_relaxed);
    s->notes[i].rx = rx;
    s->notes[i].stamp = stamp;
    atomic_fetch_add_explicit(&n_notes_total, 1, memory_order_relaxed);
}

/* Note every watched socket that received data since the last sweep; returns how many did. */
static int sweep(struct epoll_event *evs)
{
    int seen = 0;
    atomic_fetch_add_explicit(&n_stalled_sweeps, 1, memory_order_relaxed);
    for (;;) {
        int n = epoll_wait(epfd, evs, EVENTS_PER_WAIT, 0);
        if (n > 0)
            seen += n;
        for (int i = 0; i < n; i++) {
            unsigned long long u = evs[i].data.u64;
            int fd = (int)(u & 0xffffffffu);
            unsigned int gen = (unsigned int)(u >> 32);
            unsigned long long rx;
            double stamp;
            if (tcp_rx(fd, &rx) < 0 || !peek_stamp(fd, &stamp))
                continue;
            pthread_mutex_lock(&lock);
            if (fd < n_slots && slots[fd].active && slots[fd].gen == gen && rx > slots[fd].pos)
                add_note(&slots[fd], rx, stamp);
            pthread_mutex_unlock(&lock);
        }
        if (n < EVENTS_PER_WAIT)
            return seen;
    }
}

static void *watch_main(void *arg)
{
    (void)arg;
    struct epoll_event evs[EVENTS_PER_WAIT];
    for (;;) {
        pthread_mutex_lock(&lock);
        while (n_watched == 0)
            pthread_cond_wait(&wake, &lock);
        pthread_mutex_unlock(&lock);
        atomic_fetch_add_explicit(&n_wakeups, 1, memory_order_relaxed);
        long long now = mono_ns();
        long long stall_at = atomic_load_explicit(&stall_at_ns, memory_order_relaxed);
        int stalled = now > stall_at;
        if (stalled && sweep(evs) == 0 && outer_epfd >= 0) {
            /* Nothing arrived since the last look: wait for an arrival instead of polling. The
             * timeout only bounds how long a thread whose sockets all went away stays here. */
            struct epoll_event ready;
            epoll_wait(outer_epfd, &ready, 1, IDLE_WAIT_MS);
            continue; /* an arrival: swept at once if the loop is still not sweeping */
        }
        if (!stalled && stall_tfd >= 0) {
            /* The loop keeps up: sleep until it is STALL_NS late for a sweep (its sweeps push
             * the expiry on). A stale expiry read here costs one look, no harm. */
            unsigned long long expiries;
            if (read(stall_tfd, &expiries, sizeof expiries) >= 0 || errno == EINTR)
                continue;
        }
        /* Without the timerfd: look again just when the loop would count as stalled if it did
         * not sweep meanwhile (a loop sweeping every millisecond: one wake-up per one or two). */
        long long nap_ns = stalled ? NAP_STALLED_NS : stall_at - now + NAP_PAST_NS;
        if (nap_ns < NAP_MIN_NS)
            nap_ns = NAP_MIN_NS;
        struct timespec nap = {0, (long)nap_ns};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* Start the thread in this process (first use, or a forked child: threads do not survive fork). */
static int ensure_thread(void)
{
    pid_t pid = my_pid();
    if (owner_pid == pid)
        return 0;
    pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER; /* the parent's thread may have held it at fork */
    pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
    lock = fresh_lock;
    wake = fresh_cond;
    if (epfd >= 0)
        close(epfd);
    if (slots != NULL)
        memset(slots, 0, sizeof(watch_slot) * (size_t)n_slots);
    n_watched = 0;
    if (outer_epfd >= 0)
        close(outer_epfd);
    outer_epfd = -1;
    if (stall_tfd >= 0)
        close(stall_tfd); /* a forked child's copy of its parent's timer: re-arming it would wake the parent's thread */
    /* Optional: without it the thread wakes about once per sweep period to compare clocks. */
    stall_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        return -1;
    /* Optional: without it the thread polls while quiet, as it did before it could block. */
    outer_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (outer_epfd >= 0) {
        struct epoll_event inner;
        memset(&inner, 0, sizeof inner);
        inner.events = EPOLLIN; /* level-triggered: stays readable while epfd holds events */
        if (epoll_ctl(outer_epfd, EPOLL_CTL_ADD, epfd, &inner) < 0) {
            close(outer_epfd);
            outer_epfd = -1;
        }
    }
    if (peek_area == NULL) {
        void *area = mmap(NULL, PEEK_SPAN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (area == MAP_FAILED)
            return -1;
        peek_area = area;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* signals stay with the interpreter's thread */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, watch_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -1;
    owner_pid = pid;
    return 0;
}

/* The rx offset the next read of ``fd`` starts at: received minus still queued, taken
 * between two equal TCP_INFO readings so that no segment arrived in between. */
static int read_position(int fd, unsigned long long *pos)
{
    for (int attempt = 0; attempt < 8; attempt++) {
        unsigned long long rx1, rx2;
        int queued;
        if (tcp_rx(fd, &rx1) < 0 || ioctl(fd, FIONREAD, &queued) < 0 || tcp_rx(fd, &rx2) < 0)
            return -1;
        if (rx1 == rx2 && (unsigned long long)queued <= rx1) {
            *pos = rx1 - (unsigned long long)queued;
            return 0;
        }
    }
    return -1;
}

int watch_after_read(int fd, Py_ssize_t n, unsigned long long *before, watch_note *out, int cap)
{
    int k = 0;
    pthread_mutex_lock(&lock);
    if (owner_pid != my_pid() || fd < 0 || fd >= n_slots || !slots[fd].active) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    watch_slot *s = &slots[fd];
    unsigned long long after = s->pos + (unsigned long long)n;
    *before = s->pos;
    s->pos = after;
    if (s->n) {
        int kept = 0;
        for (int i = 0; i < s->n; i++) {
            watch_note note = s->notes[i];
            if (note.rx <= *before)
                continue; /* about bytes read before */
            if (note.rx <= after) {
                if (k < cap)
                    out[k++] = note;
                else
                    atomic_fetch_add_explicit(&n_notes_over_cap, 1, memory_order_relaxed);
            } else {
                s->notes[kept++] = note; /* about bytes still queued */
            }
        }
        s->n = kept;
    }
    pthread_mutex_unlock(&lock);
    return k;
}

/* watch(fd) -> rx offset of the next byte to be read, or None when the socket cannot be watched */
PyObject *watch_py_watch(PyObject *self, PyObject *arg)
{
    (void)self;
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    unsigned long long pos;
    if (fd < 0 || fd > 0x7fffffffL || ensure_thread() < 0 || read_position((int)fd, &pos) < 0)
        Py_RETURN_NONE;
    pthread_mutex_lock(&lock);
    if (fd >= n_slots) {
        int size = n_slots ? n_slots : 256;
        while (size <= fd)
            size *= 2;
        watch_slot *grown = realloc(slots, sizeof(watch_slot) * (size_t)size);
        if (grown == NULL) {
            pthread_mutex_unlock(&lock);
            return PyErr_NoMemory();
        }
        memset(grown + n_slots, 0, sizeof(watch_slot) * (size_t)(size - n_slots));
        slots = grown;
        n_slots = size;
    }
    watch_slot *s = &slots[fd];
    if (!s->active)
        n_watched++;
    s->active = 1;
    s->gen = next_gen++;
    if (next_gen == 0)
        next_gen = 1;
    s->pos = pos;
    s->n = 0;
    unsigned int gen = s->gen;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | EPOLLET;
    ev.data.u64 = ((unsigned long long)gen << 32) | (unsigned long long)(unsigned int)fd;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, (int)fd, &ev) < 0 &&
        (errno != EEXIST || epoll_ctl(epfd, EPOLL_CTL_MOD, (int)fd, &ev) < 0)) {
        pthread_mutex_lock(&lock);
        s->active = 0;
        n_watched--;
        pthread_mutex_unlock(&lock);
        Py_RETURN_NONE;
    }
    return PyLong_FromUnsignedLongLong(pos);
}

/* unwatch(fd): stop noting arrivals on fd (before it is closed or handed to another reader) */
PyObject *watch_py_unwatch(PyObject *self, PyObject *arg)
{
    (void)self;
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (owner_pid != my_pid() || fd < 0)
        Py_RETURN_NONE;
    epoll_ctl(epfd, EPOLL_CTL_DEL, (int)fd, NULL); /* fails harmlessly if already closed */
    pthread_mutex_lock(&lock);
    if (fd < n_slots && slots[fd].active) {
        slots[fd].active = 0;
        slots[fd].n = 0;
        n_watched--;
    }
    pthread_mutex_unlock(&lock);
    Py_RETURN_NONE;
}

/* take_notes(fd) -> [(rx, realtime stamp s), ...] noted so far (and forgets them) */
PyObject *watch_py_take_notes(PyObject *self, PyObject *arg)
{
    (void)self;
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    watch_note copy[NOTE_MAX];
    int k = 0;
    pthread_mutex_lock(&lock);
    if (owner_pid == my_pid() && fd >= 0 && fd < n_slots && slots[fd].active) {
        k = slots[fd].n;
        memcpy(copy, slots[fd].notes, sizeof(watch_note) * (size_t)k);
        slots[fd].n = 0;
    }
    pthread_mutex_unlock(&lock);
    PyObject *out = PyList_New(k);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < k; i++) {
        PyObject *item = Py_BuildValue("(Kd)", copy[i].rx, copy[i].stamp);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* alive(period_s=0.001): the event loop swept its sockets just now and sweeps again within
 * period_s (the thread stays idle while it does) */
PyObject *watch_py_alive(PyObject *self, PyObject *args)
{
    (void)self;
    double period_s = 0.001;
    if (!PyArg_ParseTuple(args, "|d:alive", &period_s))
        return NULL;
    if (!(period_s >= 0.0 && period_s <= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "alive(period_s): period_s must be within 0..1 s");
        return NULL;
    }
    long long ahead_ns = (long long)(period_s * 1e9) + STALL_NS;
    atomic_store_explicit(&stall_at_ns, mono_ns() + ahead_ns, memory_order_relaxed);
    if (stall_tfd >= 0 && owner_pid == my_pid()) { /* the thread sleeps until this loop stalls */
        long long at = ahead_ns + NAP_PAST_NS;
        struct itimerspec timer = {{0, 0}, {(time_t)(at / 1000000000LL), (long)(at % 1000000000LL)}};
        timerfd_settime(stall_tfd, 0, &timer, NULL);
    }
    Py_RETURN_NONE;
}

/* stats() -> {"watched", "notes", "stalled_sweeps", "notes_dropped", "notes_over_cap", "wakeups"}:
 * what the thread has done in this process (wakeups: times it ran, for any reason) */
PyObject *watch_py_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    pthread_mutex_lock(&lock);
    int watched = owner_pid == my_pid() ? n_watched : 0;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue("{s:i,s:K,s:K,s:K,s:K,s:K}", "watched", watched,
                         "notes", (unsigned long long)atomic_load(&n_notes_total),
                         "stalled_sweeps", (unsigned long long)atomic_load(&n_stalled_sweeps),
                         "notes_dropped", (unsigned long long)atomic_load(&n_notes_dropped),
                         "notes_over_cap", (unsigned long long)atomic_load(&n_notes_over_cap),
                         "wakeups", (unsigned long long)atomic_load(&n_wakeups));
}

#else /* not Linux: no epoll, no TCP_INFO byte counter. The reader keeps one stamp per read. */

int watch_after_read(int fd, Py_ssize_t n, unsigned long long *before, watch_note *out, int cap)
{
    (void)fd, (void)n, (void)before, (void)out, (void)cap;
    return -1;
}

PyObject *watch_py_watch(PyObject *self, PyObject *arg)
{
    (void)self, (void)arg;
    Py_RETURN_NONE;
}

PyObject *watch_py_unwatch(PyObject *self, PyObject *arg)
{
    (void)self, (void)arg;
    Py_RETURN_NONE;
}

PyObject *watch_py_take_notes(PyObject *self, PyObject *arg)
{
    (void)self, (void)arg;
    return PyList_New(0);
}

PyObject *watch_py_alive(PyObject *self, PyObject *args)
{
    (void)self, (void)args;
    Py_RETURN_NONE;
}

PyObject *watch_py_stats(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return Py_BuildValue("{s:i,s:K,s:K,s:K,s:K,s:K}", "watched", 0, "notes", 0ULL, "stalled_sweeps", 0ULL,
                         "notes_dropped", 0ULL, "notes_over_cap", 0ULL, "wakeups", 0ULL);
}

#endif
