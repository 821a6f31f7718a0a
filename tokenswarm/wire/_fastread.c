/* The hub reader's fast path in C: one read of a stream socket, its kernel receive
 * timestamp, and -- when the bytes are the common framing (whole HTTP chunks, each holding
 * whole "data: <payload>\n\n" SSE events) -- the list of event payloads.
 *
 * Why C: per SSE event the Python version of this work (recvmsg's result tuples, the
 * timestamp conversion, de-chunking, SSE splitting) cost more than the JSON parse itself.
 * A chunk cut by the end of a read (common when the client is behind and reads a backlog)
 * is not a reason to give up: its bytes come back as a raw "tail" that the caller passes in
 * front of the next read, which then starts at a chunk boundary again. Anything unusual (CR
 * line ends, comments, "event:" lines, an event split across chunks, chunk extensions, the
 * last chunk with trailers or not read whole, EOF) is handed back untouched, with any tail in
 * front, and the Python parsers take it: the fast path either understands the complete chunks
 * of a read or none of them, so both paths give the same events (tests/wire/test_fastread.py
 * checks this on generated framings).
 */
#include "_chunks.h"
#include "_record.h"
#include "_sweep.h"
#include "_watch.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define READ_BYTES 65536
#define TAIL_MAX 65536 /* a longer cut chunk goes to the Python decoder */

/* One read at a time under the GIL: a static buffer saves an allocation per read. The
 * previous read's tail is copied in front of the new bytes. */
static char read_buf[TAIL_MAX + READ_BYTES];

/* Where each complete chunk of the latest split ended (buffer offset) and how many events
 * the list held after it: read_events cuts a read there when the arrival watcher noted that
 * its chunks arrived apart. A read of more than CHUNKS_MAX chunks keeps one stamp. */
#define CHUNKS_MAX 2048
static Py_ssize_t chunk_end[CHUNKS_MAX];
static Py_ssize_t chunk_events[CHUNKS_MAX];
static int n_chunks;       /* recorded (at most CHUNKS_MAX) */
static int chunks_overflow; /* the split had more: its chunks cannot all be dated */
#define NOTES_PER_READ 256

/* What the reads did (under the GIL: plain counters), for the run's timing provenance. */
static unsigned long long n_reads;            /* read_events calls that read bytes or EOF */
static unsigned long long n_general_reads;    /* bytes handed back to the Python parsers */
static unsigned long long n_dated_reads;      /* reads cut by the watcher's notes */
static unsigned long long n_chunk_cap_reads;  /* noted reads of > CHUNKS_MAX chunks: one stamp kept */
static unsigned long long n_head_reads;       /* read_head calls that read bytes or EOF */

/* Append (None, payload) for every event if [p, end) is nothing but whole "data: X\n\n"
 * events without CR; 1 = done, 0 = not the simple framing, -1 = Python error. */
static int split_events(const char *p, const char *end, PyObject *out)
{
    while (p < end) {
        if (end - p < 8 || memcmp(p, "data: ", 6) != 0)
            return 0;
        const char *q = p + 6;
        const char *nl = memchr(q, '\n', (size_t)(end - q));
        if (nl == NULL || nl + 1 >= end || nl[1] != '\n')
            return 0;
        if (memchr(q, '\r', (size_t)(nl - q)) != NULL)
            return 0;
        PyObject *payload = PyBytes_FromStringAndSize(q, nl - q);
        if (payload == NULL)
            return -1;
        PyObject *ev = PyTuple_Pack(2, Py_None, payload);
        Py_DECREF(payload);
        if (ev == NULL)
            return -1;
        int rc = PyList_Append(out, ev);
        Py_DECREF(ev);
        if (rc < 0)
            return -1;
        p = nl + 2;
    }
    return 1;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Whole non-empty chunks ("<hex>\r\n<data>\r\n", no extensions), each of whole events.
 * With ``tail`` non-NULL, a last chunk that the bytes end inside is allowed: *tail is set to
 * its first byte (else to ``end``). With ``last`` non-NULL, the bytes may end with the body's
 * terminating chunk exactly ("0\r\n\r\n": no trailers, nothing after it); *last says whether
 * they did. 1 = done, 0 = not the simple framing, -1 = error. */
static int split_chunks(const char *p, const char *end, PyObject *out, const char **tail, int *last)
{
    const char *base = p;
    n_chunks = 0;
    chunks_overflow = 0;
    if (tail != NULL)
        *tail = end;
    if (last != NULL)
        *last = 0;
    while (p < end) {
        const char *start = p;
        size_t size = 0;
        int digits = 0, v;
        while (p < end && digits < 15 && (v = hex_value(*p)) >= 0) {
            size = size * 16 + (size_t)v;
            p++;
            digits++;
        }
        if (tail != NULL && digits > 0 && (p == end || (p[0] == '\r' && p + 1 == end))) {
            *tail = start; /* the size line continues in the next read */
            return 1;
        }
        if (last != NULL && size == 0 && digits > 0 && end - p == 4 && memcmp(p, "\r\n\r\n", 4) == 0) {
            *last = 1; /* the body's end, read with its last events: one read less in Python */
            return 1;
        }
        if (digits == 0 || end - p < 2 || p[0] != '\r' || p[1] != '\n' || size == 0)
            return 0; /* extensions, trailers, a partial size line: the Python decoder */
        p += 2;
        if ((size_t)(end - p) < size + 2) {
            if (tail == NULL)
                return 0;
            *tail = start; /* the chunk continues in the next read */
            return 1;
        }
        if (p[size] != '\r' || p[size + 1] != '\n')
            return 0;
        int rc = split_events(p, p + size, out);
        if (rc != 1)
            return rc;
        p += size + 2;
        if (n_chunks < CHUNKS_MAX) {
            chunk_end[n_chunks] = p - base;
            chunk_events[n_chunks++] = PyList_GET_SIZE(out);
        } else {
            chunks_overflow = 1;
        }
    }
    return 1;
}

/* One recvmsg on the non-blocking socket ``fd`` into ``buf`` (READ_BYTES): the byte count
 * (0 at EOF), or -1 with a Python OSError set (BlockingIOError when nothing was there).
 * ``*arrival`` becomes the kernel's receive stamp moved onto the monotonic timeline (stamp -
 * offset) when ``stamped`` and plausible (not after this moment, not older than max_age: a
 * wall-clock step), else it keeps ``now``. ``watched``: the arrival watcher's notes covering
 * the read go to ``notes`` (``*k`` of them; ``*before`` is the rx offset of the read's first byte). */
static ssize_t stamped_read(int fd, char *buf, int stamped, double offset, double now, double max_age, int watched,
                            double *arrival, watch_note *notes, int *k, unsigned long long *before)
{
    struct timespec ts;
    int have_stamp = 0;
    ssize_t n;
    for (;;) {
        n = recv_stamped(fd, buf, READ_BYTES, 0, stamped, &ts, &have_stamp);
        if (n >= 0 || errno != EINTR)
            break;
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
    if (n < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    *arrival = now;
    if (have_stamp) {
        /* Plausible: not after this moment (a segment that arrived while the sweep that began
         * at ``now`` was reading other sockets is later than ``now``, and real), not older than
         * max_age (a wall-clock step). Compared on the realtime clock. */
        struct timespec real_now;
        clock_gettime(CLOCK_REALTIME, &real_now);
        double age = (double)(real_now.tv_sec - ts.tv_sec) + (double)(real_now.tv_nsec - ts.tv_nsec) * 1e-9;
        /* subtract before adding the nanoseconds: epoch seconds as a double keep µs */
        if (0.0 <= age && age < max_age)
            *arrival = ((double)ts.tv_sec - offset) + (double)ts.tv_nsec * 1e-9;
    }
    *k = 0;
    if (watched && n > 0)
        *k = watch_after_read(fd, n, before, notes, NOTES_PER_READ);
    return n;
}

/* read_events(fd, chunked, stamped, real_minus_mono_s, now_s, max_age_s, tail, watched)
 *     -> (arrival_s, events | None, data | None, tail, groups | None)
 *
 * One recvmsg on the non-blocking socket ``fd``, after the previous call's ``tail`` (raw
 * bytes of a cut chunk, b"" if none). ``arrival_s`` is the kernel's receive stamp moved onto
 * the monotonic timeline (stamp - real_minus_mono_s) when ``stamped`` and plausible (not in
 * the future, not older than max_age_s), else ``now_s``. ``events`` is the list of (None, payload) tuples
 * of the complete chunks when the bytes were the simple framing, and the returned ``tail``
 * the raw bytes of a chunk they end inside (pass it to the next call) -- or None when the
 * bytes ended with the body's terminating chunk ("0\r\n\r\n", no trailers): the body is
 * complete after these events. Otherwise ``data``
 * holds every byte (the old tail and the new read; only the old tail, or b"", at EOF) for the
 * general parsers, and ``tail`` is b"".
 *
 * ``watched``: ``fd`` is registered with the arrival watcher (_watch.c). When the watcher
 * noted that parts of this read arrived earlier than its newest segment, ``groups`` is the
 * read cut at chunk boundaries, [(arrival_s, events), ...] in order, each chunk dated by the
 * first note covering its last byte (``events`` still holds them all); when the bytes come
 * back undecoded (``data``), it is [(end offset in data, arrival_s), ...]: the bytes before
 * each offset had arrived by that time. Else None.
 * Errors raise OSError (BlockingIOError when nothing was there).
 */
static PyObject *dated_groups(PyObject *events, const Py_ssize_t *ends, const Py_ssize_t *counts, int n,
                              const watch_note *notes, int k, unsigned long long rx0, double arrival,
                              double offset, double now, double max_age);
static PyObject *dated_cuts(const watch_note *notes, int k, unsigned long long rx0, Py_ssize_t total,
                            double arrival, double offset, double now, double max_age);

static PyObject *read_events(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "read_events takes 8 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    int chunked = PyObject_IsTrue(args[1]);
    int stamped = PyObject_IsTrue(args[2]);
    double offset = PyFloat_AsDouble(args[3]);
    double now = PyFloat_AsDouble(args[4]);
    double max_age = PyFloat_AsDouble(args[5]);
    int watched = PyObject_IsTrue(args[7]);
    if (chunked < 0 || stamped < 0 || watched < 0 || PyErr_Occurred())
        return NULL;
    if (!PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "tail must be bytes");
        return NULL;
    }
    Py_ssize_t head = PyBytes_GET_SIZE(args[6]);
    if (head > TAIL_MAX) {
        PyErr_SetString(PyExc_ValueError, "tail longer than TAIL_MAX");
        return NULL;
    }
    memcpy(read_buf, PyBytes_AS_STRING(args[6]), (size_t)head);

    static watch_note notes[NOTES_PER_READ];
    int k = 0;
    unsigned long long before = 0;
    double arrival = now;
    ssize_t n = stamped_read((int)fd, read_buf + head, stamped, offset, now, max_age, watched, &arrival, notes, &k,
                             &before);
    if (n < 0)
        return NULL; /* EAGAIN became BlockingIOError; the tail stays with the caller */

    Py_ssize_t total = head + n;
    n_reads++;
    if (n > 0 && chunked) {
        PyObject *events = PyList_New(0);
        if (events == NULL)
            return NULL;
        const char *tail;
        int last;
        int rc = split_chunks(read_buf, read_buf + total, events, &tail, &last);
        if (rc < 0) {
            Py_DECREF(events);
            return NULL;
        }
        Py_ssize_t tail_len = (read_buf + total) - tail;
        if (rc == 1 && tail_len <= TAIL_MAX) {
            PyObject *groups = Py_None;
            Py_INCREF(groups);
            if (k > 0 && chunks_overflow)
                n_chunk_cap_reads++;
            if (k > 0 && n_chunks > 0 && !chunks_overflow) {
                /* buffer offset 0 is rx offset before - head (the tail came from the last read) */
                Py_DECREF(groups);
                groups = dated_groups(events, chunk_end, chunk_events, n_chunks, notes, k,
                                      before - (unsigned long long)head, arrival, offset, now, max_age);
                if (groups == NULL) {
                    Py_DECREF(events);
                    return NULL;
                }
                if (groups != Py_None)
                    n_dated_reads++;
            }
            if (last) /* tail None: the body ended after these events */
                return Py_BuildValue("(dNOON)", arrival, events, Py_None, Py_None, groups);
            return Py_BuildValue("(dNOy#N)", arrival, events, Py_None, tail, tail_len, groups);
        }
        Py_DECREF(events);
    }
    PyObject *cuts = Py_None;
    Py_INCREF(cuts);
    n_general_reads++;
    if (k > 0) {
        Py_DECREF(cuts);
        cuts = dated_cuts(notes, k, before - (unsigned long long)head, total, arrival, offset, now, max_age);
        if (cuts == NULL)
            return NULL;
        if (cuts != Py_None)
            n_dated_reads++;
    }
    return Py_BuildValue("(dOy#yN)", arrival, Py_None, read_buf, total, "", cuts);
}

/* A note's stamp on the monotonic timeline when it dates bytes earlier than the read's own
 * ``arrival`` (and is not older than max_age: a wall-clock step); else ``arrival``.
 * Subtract before adding the fraction, as for the read's own stamp. */
static double note_date(const watch_note *note, double arrival, double offset, double now, double max_age)
{
    double t = note->stamp - offset;
    return t < arrival && now - max_age < t ? t : arrival;
}

/* For bytes handed back undecoded: [(end offset in data, arrival_s), ...] where the notes say
 * the bytes up to that offset had arrived (earlier than the read's own stamp), or None. The
 * caller decodes the pieces one by one, each at its time. */
static PyObject *dated_cuts(const watch_note *notes, int k, unsigned long long rx0, Py_ssize_t total,
                            double arrival, double offset, double now, double max_age)
{
    PyObject *cuts = NULL;
    Py_ssize_t last = 0;
    for (int i = 0; i < k; i++) {
        Py_ssize_t end = (Py_ssize_t)(notes[i].rx - rx0);
        double t = note_date(&notes[i], arrival, offset, now, max_age);
        if (end <= last || end >= total || t == arrival)
            continue;
        if (cuts == NULL && (cuts = PyList_New(0)) == NULL)
            return NULL;
        PyObject *cut = Py_BuildValue("(nd)", end, t);
        if (cut == NULL || PyList_Append(cuts, cut) < 0) {
            Py_XDECREF(cut);
            Py_DECREF(cuts);
            return NULL;
        }
        Py_DECREF(cut);
        last = end;
    }
    if (cuts == NULL)
        Py_RETURN_NONE;
    return cuts;
}

/* read_head(fd, stamped, real_minus_mono_s, now_s, max_age_s, watched) -> (arrival_s, data, cuts | None)
 *
 * One read of a response's head (and whatever came with it) from the event loop: the bytes
 * undecoded, dated as read_events dates them (``arrival_s``; ``cuts`` the watcher's
 * [(end offset in data, arrival_s), ...] when parts of the read arrived earlier). b"" at EOF.
 * Errors raise OSError (BlockingIOError when nothing was there). */
static PyObject *read_head(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "read_head takes 6 arguments");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    int stamped = PyObject_IsTrue(args[1]);
    double offset = PyFloat_AsDouble(args[2]);
    double now = PyFloat_AsDouble(args[3]);
    double max_age = PyFloat_AsDouble(args[4]);
    int watched = PyObject_IsTrue(args[5]);
    if (stamped < 0 || watched < 0 || PyErr_Occurred())
        return NULL;
    static watch_note notes[NOTES_PER_READ];
    int k = 0;
    unsigned long long before = 0;
    double arrival = now;
    ssize_t n = stamped_read((int)fd, read_buf, stamped, offset, now, max_age, watched, &arrival, notes, &k, &before);
    if (n < 0)
        return NULL;
    n_head_reads++;
    PyObject *cuts = Py_None;
    Py_INCREF(cuts);
    if (k > 0) {
        Py_DECREF(cuts);
        cuts = dated_cuts(notes, k, before, (Py_ssize_t)n, arrival, offset, now, max_age);
        if (cuts == NULL)
            return NULL;
        if (cuts != Py_None)
            n_dated_reads++;
    }
    return Py_BuildValue("(dy#N)", arrival, read_buf, (Py_ssize_t)n, cuts);
}


/* The date of each of ``n`` chunks ending at buffer offsets ``ends`` (buffer offset 0 is rx
 * offset ``rx0``): the first note (sorted by rx) that covers the chunk's last byte, else the
 * read's own ``arrival``. Returns 1 when some chunk got an earlier date than ``arrival``. */
static int chunk_dates(const Py_ssize_t *ends, int n, const watch_note *notes, int k, unsigned long long rx0,
                       double arrival, double offset, double now, double max_age, double *dates)
{
    int ni = 0, distinct = 0;
    for (int c = 0; c < n; c++) {
        unsigned long long rx_end = rx0 + (unsigned long long)ends[c];
        while (ni < k && notes[ni].rx < rx_end)
            ni++;
        double t = ni < k ? note_date(&notes[ni], arrival, offset, now, max_age) : arrival;
        dates[c] = t;
        if (t != arrival)
            distinct = 1;
    }
    return distinct;
}

/* The ``n`` chunks of a split (``ends``: where each ended, ``counts``: events in the list after
 * it), dated by the notes and grouped by date: [(arrival_s, events), ...], or None when every
 * chunk gets the read's own stamp. */
static PyObject *dated_groups(PyObject *events, const Py_ssize_t *ends, const Py_ssize_t *counts, int n,
                              const watch_note *notes, int k, unsigned long long rx0, double arrival,
                              double offset, double now, double max_age)
{
    double dates[CHUNKS_MAX];
    if (!chunk_dates(ends, n, notes, k, rx0, arrival, offset, now, max_age, dates))
        Py_RETURN_NONE;
    PyObject *groups = PyList_New(0);
    if (groups == NULL)
        return NULL;
    Py_ssize_t start = 0;
    for (int c = 0; c < n; c++) {
        if (c + 1 < n && dates[c + 1] == dates[c])
            continue;
        PyObject *part = PyList_GetSlice(events, start, counts[c]);
        PyObject *group = part == NULL ? NULL : Py_BuildValue("(dN)", dates[c], part);
        if (group == NULL || PyList_Append(groups, group) < 0) {
            Py_XDECREF(group);
            Py_DECREF(groups);
            return NULL;
        }
        Py_DECREF(group);
        start = counts[c];
    }
    return groups;
}

/* --- The dating functions, exposed for table tests (tests/load/test_fastread.py) ----------- */

/* notes from a Python list of (rx, realtime stamp) tuples, sorted by rx as the watcher keeps
 * them; -1 = error (set) */
static int notes_from_list(PyObject *list, watch_note *out, int cap)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "notes must be a list of (rx, stamp) tuples");
        return -1;
    }
    Py_ssize_t k = PyList_GET_SIZE(list);
    if (k > cap) {
        PyErr_SetString(PyExc_ValueError, "too many notes");
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "Kd", &out[i].rx, &out[i].stamp))
            return -1;
    }
    return (int)k;
}

/* note_date(stamp, arrival_s, real_minus_mono_s, now_s, max_age_s) -> the note's date */
static PyObject *py_note_date(PyObject *self, PyObject *args)
{
    (void)self;
    watch_note note = {0, 0.0};
    double arrival, offset, now, max_age;
    if (!PyArg_ParseTuple(args, "ddddd", &note.stamp, &arrival, &offset, &now, &max_age))
        return NULL;
    return PyFloat_FromDouble(note_date(&note, arrival, offset, now, max_age));
}

/* date_cuts(notes, rx0, total, arrival_s, real_minus_mono_s, now_s, max_age_s) -> cuts | None */
static PyObject *py_date_cuts(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *list;
    unsigned long long rx0;
    Py_ssize_t total;
    double arrival, offset, now, max_age;
    if (!PyArg_ParseTuple(args, "OKndddd", &list, &rx0, &total, &arrival, &offset, &now, &max_age))
        return NULL;
    watch_note notes[NOTES_PER_READ];
    int k = notes_from_list(list, notes, NOTES_PER_READ);
    if (k < 0)
        return NULL;
    return dated_cuts(notes, k, rx0, total, arrival, offset, now, max_age);
}

/* date_chunks(chunk_ends, notes, rx0, arrival_s, real_minus_mono_s, now_s, max_age_s) -> dates */
static PyObject *py_date_chunks(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ends_list, *list;
    unsigned long long rx0;
    double arrival, offset, now, max_age;
    if (!PyArg_ParseTuple(args, "O!O!Kdddd", &PyList_Type, &ends_list, &PyList_Type, &list, &rx0, &arrival,
                          &offset, &now, &max_age))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ends_list);
    if (n > CHUNKS_MAX) {
        PyErr_SetString(PyExc_ValueError, "more chunks than CHUNKS_MAX");
        return NULL;
    }
    Py_ssize_t ends[CHUNKS_MAX];
    for (Py_ssize_t i = 0; i < n; i++) {
        ends[i] = PyLong_AsSsize_t(PyList_GET_ITEM(ends_list, i));
        if (ends[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    watch_note notes[NOTES_PER_READ];
    int k = notes_from_list(list, notes, NOTES_PER_READ);
    if (k < 0)
        return NULL;
    double dates[CHUNKS_MAX];
    chunk_dates(ends, (int)n, notes, k, rx0, arrival, offset, now, max_age, dates);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyFloat_FromDouble(dates[i]);
        if (d == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, d);
    }
    return out;
}

/* read_stats() -> counters of read_events in this process (see n_reads...) */
static PyObject *read_stats(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K}", "reads", n_reads, "general_reads", n_general_reads,
                         "dated_reads", n_dated_reads, "chunk_cap_reads", n_chunk_cap_reads, "head_reads",
                         n_head_reads);
}

/* split(data, chunked, allow_tail=False) -> events | (events, tail) | None: the parsing
 * half of read_events, for tests. With allow_tail, returns (events, tail bytes). */
static PyObject *split(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view;
    int chunked, allow_tail = 0;
    if (!PyArg_ParseTuple(args, "y*p|p", &view, &chunked, &allow_tail))
        return NULL;
    PyObject *events = PyList_New(0);
    if (events == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *p = view.buf, *end = p + view.len, *tail = end;
    int rc = chunked ? split_chunks(p, end, events, allow_tail ? &tail : NULL, NULL) : split_events(p, end, events);
    if (rc < 0 || rc == 0 || view.len == 0) {
        PyBuffer_Release(&view);
        Py_DECREF(events);
        if (rc < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out = allow_tail ? Py_BuildValue("(Ny#)", events, tail, (Py_ssize_t)(end - tail)) : events;
    PyBuffer_Release(&view);
    return out;
}

/* -- per-record numbers: what a finished stream's record and the live histograms need ------------
 * In C so that the generator needs no numpy while it runs (its import is ~0.16 s of CPU per
 * process); the numpy versions (tokenswarm.wire.stream, tokenswarm.load.livestats) remain for
 * installs without this extension and give the same values (tests/load/test_record_numbers.py). */

/* offsets_ms(times, sent_s) -> [ms, ...]: each perf_counter time (an array('d')) as ms after
 * sent_s, rounded to the microsecond the way numpy's round(3) does it (x*1000, rint, /1000). */
static PyObject *offsets_ms(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *obj;
    double sent;
    if (!PyArg_ParseTuple(args, "Od", &obj, &sent))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.itemsize != (Py_ssize_t)sizeof(double) || view.format == NULL || strcmp(view.format, "d") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "offsets_ms: times must be an array of doubles (array('d'))");
        return NULL;
    }
    Py_ssize_t n = view.len / (Py_ssize_t)sizeof(double);
    const double *t = view.buf;
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        double ms = (t[i] - sent) * 1000.0;
        PyObject *v = PyFloat_FromDouble(rint(ms * 1000.0) / 1000.0);
        if (v == NULL) {
            PyBuffer_Release(&view);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
    }
    PyBuffer_Release(&view);
    return out;
}

static int add_count(PyObject *buckets, long long key, long long n)
{
    PyObject *k = PyLong_FromLongLong(key);
    if (k == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(buckets, k);
    long long have = 0;
    if (old != NULL) {
        have = PyLong_AsLongLong(old);
        if (have == -1 && PyErr_Occurred()) {
            Py_DECREF(k);
            return -1;
        }
    } else if (PyErr_Occurred()) {
        Py_DECREF(k);
        return -1;
    }
    PyObject *v = PyLong_FromLongLong(have + n);
    int rc = v == NULL ? -1 : PyDict_SetItem(buckets, k, v);
    Py_XDECREF(v);
    Py_DECREF(k);
    return rc;
}

/* itl_buckets(offsets_ms, tokens, buckets, inv_log_base) -> (samples, total_ms, min_ms, max_ms)
 * One stream's inter-token latencies per delivery (tokenswarm.metrics.itl_samples): chunks read
 * together (equal offsets) are one delivery; a delivery of n tokens after a gap g gives n samples
 * of g / n, none for the stream's first delivery or a delivery without tokens. The samples go
 * into the live histogram's bucket counts (key -> count: trunc(log(us) * inv_log_base), -1 below
 * 1 us, as livestats.bucket_keys). min/max are None without samples. */
static PyObject *itl_buckets(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *offs, *toks, *buckets;
    double inv;
    if (!PyArg_ParseTuple(args, "OOO!d", &offs, &toks, &PyDict_Type, &buckets, &inv))
        return NULL;
    if (!PyList_Check(offs) || !PyList_Check(toks) || PyList_GET_SIZE(offs) != PyList_GET_SIZE(toks)) {
        PyErr_SetString(PyExc_TypeError, "itl_buckets: offsets and tokens must be lists of the same length");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(offs);
    long long samples = 0;
    double total = 0.0, lo = 0.0, hi = 0.0;
    Py_ssize_t i = 0;
    while (i + 1 < n) {
        double a = PyFloat_AsDouble(PyList_GET_ITEM(offs, i)), b = PyFloat_AsDouble(PyList_GET_ITEM(offs, i + 1));
        long long tk = PyLong_AsLongLong(PyList_GET_ITEM(toks, i + 1));
        if (PyErr_Occurred())
            return NULL;
        double lead = b - a;
        long long tot = tk > 0 ? tk : 0;
        Py_ssize_t j = i + 1;
        while (j + 1 < n) { /* the chunks read with chunk j (gap 0) join its delivery */
            double c = PyFloat_AsDouble(PyList_GET_ITEM(offs, j + 1));
            if (c == -1.0 && PyErr_Occurred())
                return NULL;
            if (c - b != 0.0)
                break;
            long long t2 = PyLong_AsLongLong(PyList_GET_ITEM(toks, j + 1));
            if (t2 == -1 && PyErr_Occurred())
                return NULL;
            tot += t2 > 0 ? t2 : 0;
            b = c;
            j++;
        }
        if (lead != 0.0 && tot > 0) {
            double per = lead / (double)tot, us = per * 1000.0;
            long long key = us < 1.0 ? -1 : (long long)(log(us) * inv);
            if (add_count(buckets, key, tot) < 0)
                return NULL;
            if (samples == 0) {
                lo = hi = per;
            } else {
                lo = per < lo ? per : lo;
                hi = per > hi ? per : hi;
            }
            samples += tot;
            total += per * (double)tot;
        }
        i = j;
    }
    if (samples == 0)
        return Py_BuildValue("(LdOO)", 0LL, 0.0, Py_None, Py_None);
    return Py_BuildValue("(Lddd)", samples, total, lo, hi);
}

/* redact_gates(data) -> int: which of tokenswarm.redact's byte patterns may match ``data``; bit i
 * for _PATTERNS[i]. The same tests as redact._gate_mask (its docstring says why they never miss a
 * match), in one pass: the record writer redacts every record line, and in Python the five tests
 * cost ~30 us per 1.4 KB record line (the provider-prefix regex alone ~14), 8 % of a short
 * request's CPU; here ~1 us. tests/test_redact_gates.py checks both give the same masks. */
static int redact_kept(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_' || c == ':' || c == '/' ||
           c == '@';
}

static int has(const char *hay, Py_ssize_t n, const char *needle)
{
    return memmem(hay, (size_t)n, needle, strlen(needle)) != NULL;
}

/* a provider key prefix (sk pk rk hf gsk xai ghp gho glpat; gsk ends in sk) ends right before
 * kept[j] ('-' or '_'). Record lines have a '_' in most field names: the last byte decides first. */
static int provider_prefix_before(const char *kept, Py_ssize_t j)
{
    if (j < 2)
        return 0;
    char a = kept[j - 1], b = kept[j - 2];
    switch (a) {
    case 'k':
        return b == 's' || b == 'p' || b == 'r';
    case 'f':
        return b == 'h';
    case 'i':
        return j >= 3 && b == 'a' && kept[j - 3] == 'x';
    case 'p':
    case 'o':
        return j >= 3 && b == 'h' && kept[j - 3] == 'g';
    case 't':
        return j >= 5 && memcmp(kept + j - 5, "glpat", 5) == 0;
    default:
        return 0;
    }
}

static PyObject *redact_gates(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len;
    char *kept = PyMem_Malloc((size_t)(2 * n + 1));
    if (kept == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    char *low = kept + n;
    Py_ssize_t k = 0;
    int provider = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (!redact_kept(c))
            continue;
        kept[k] = (char)c;
        low[k] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
        if (!provider && (c == '-' || c == '_'))
            provider = provider_prefix_before(kept, k);
        k++;
    }
    long mask = 0;
    if (has(low, k, "authorization"))
        mask |= 1;
    if (has(low, k, "bearer"))
        mask |= 2;
    if (has(kept, k, "://") && memchr(kept, '@', (size_t)k) != NULL)
        mask |= 4;
    if (provider)
        mask |= 8;
    static const char *const words[] = {"password", "secret", "apikey", "api_key", "api-key",
                                        "accesstoken", "access_token", "access-token"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (has(low, k, words[i])) {
            mask |= 16;
            break;
        }
    }
    PyMem_Free(kept);
    PyBuffer_Release(&view);
    return PyLong_FromLong(mask);
}

static PyMethodDef methods[] = {
    {"read_events", (PyCFunction)(void (*)(void))read_events, METH_FASTCALL,
     "read_events(fd, chunked, stamped, real_minus_mono_s, now_s, max_age_s, tail, watched) -> (arrival_s, events|None, "
     "data|None, tail, groups|None)"},
    {"read_head", (PyCFunction)(void (*)(void))read_head, METH_FASTCALL,
     "read_head(fd, stamped, real_minus_mono_s, now_s, max_age_s, watched) -> (arrival_s, data, cuts|None)"},
    {"watch", watch_py_watch, METH_O, "watch(fd) -> rx offset of the next byte, or None: note arrivals while the loop stalls"},
    {"unwatch", watch_py_unwatch, METH_O, "unwatch(fd): stop noting arrivals on fd"},
    {"take_notes", watch_py_take_notes, METH_O, "take_notes(fd) -> [(rx, realtime stamp), ...] (forgets them)"},
    {"alive", watch_py_alive, METH_VARARGS, "alive(period_s=0.001): the event loop swept its sockets just now and sweeps again within period_s"},
    {"watch_stats", watch_py_stats, METH_NOARGS, "watch_stats() -> dict of the watcher thread's counters"},
    {"split", split, METH_VARARGS, "split(data, chunked, allow_tail=False) -> events, (events, tail) or None"},
    {"note_date", py_note_date, METH_VARARGS, "note_date(stamp, arrival_s, real_minus_mono_s, now_s, max_age_s) -> date"},
    {"date_cuts", py_date_cuts, METH_VARARGS,
     "date_cuts(notes, rx0, total, arrival_s, real_minus_mono_s, now_s, max_age_s) -> [(end, date), ...] | None"},
    {"date_chunks", py_date_chunks, METH_VARARGS,
     "date_chunks(chunk_ends, notes, rx0, arrival_s, real_minus_mono_s, now_s, max_age_s) -> [date, ...]"},
    {"bind_stream_state", chunks_bind, METH_VARARGS,
     "bind_stream_state(cls, usage_cls) -> bool: where feed_chunks finds cls's slots, and the dict subclass of the "
     "usage it keeps (False: it declines every state)"},
    {"feed_chunks", (PyCFunction)(void (*)(void))chunks_feed, METH_FASTCALL,
     "feed_chunks(state, now_s, events) -> (taken, added): the leading common completion chunks into state"},
    {"chunk_stats", chunks_stats, METH_NOARGS, "chunk_stats() -> {taken, left}: events feed_chunks read / handed back"},
    {"bind_record", record_bind, METH_VARARGS,
     "bind_record(record_cls, names, defaults, required, identity_cls, identity_names) -> bool: where build_record "
     "sets each field (False: it builds nothing)"},
    {"build_record", (PyCFunction)(void (*)(void))record_build, METH_FASTCALL,
     "build_record(fields, identity) -> the record, or None when it would not be a complete, valid one"},
    {"redact_gates", redact_gates, METH_O,
     "redact_gates(data) -> int: bit i set when tokenswarm.redact's byte pattern i may match data"},
    {"read_stats", read_stats, METH_NOARGS, "read_stats() -> dict of read_events' counters in this process"},
    {"offsets_ms", offsets_ms, METH_VARARGS, "offsets_ms(times, sent_s) -> [ms after sent_s, to the microsecond]"},
    {"sweep_ready", (PyCFunction)(void (*)(void))sweep_py_ready, METH_FASTCALL,
     "sweep_ready(epfd, handlers, now_s, offset_s, max_ready) -> int: poll epfd without waiting and call "
     "handlers[fd](now_s, offset_s) for each ready fd that has one"},
    {"real_minus_mono", (PyCFunction)(void (*)(void))sweep_py_real_minus_mono, METH_FASTCALL,
     "real_minus_mono(bracket_s, attempts) -> CLOCK_REALTIME - CLOCK_MONOTONIC in s, the realtime reading bracketed by "
     "two monotonic ones (kstamp.real_minus_mono's rule)"},
    {"itl_buckets", itl_buckets, METH_VARARGS,
     "itl_buckets(offsets_ms, tokens, buckets, inv_log_base) -> (samples, total_ms, min_ms, max_ms)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastread", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastread(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
#ifdef SCM_TIMESTAMPNS
    if (PyModule_AddIntConstant(m, "SCM_TIMESTAMPNS", SCM_TIMESTAMPNS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
