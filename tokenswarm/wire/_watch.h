/* The arrival watcher: a native thread that notes, while the event loop is stalled, how many
 * bytes each watched socket had received and the kernel stamp of the newest. See _watch.c. */
#ifndef TOKENSWARM_WATCH_H
#define TOKENSWARM_WATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* The kernel receive stamp (SO_TIMESTAMPNS, CLOCK_REALTIME) in a received message's ancillary
 * data: 1 and *ts set, or 0 when there is none. Shared by the reader and the watcher. */
static inline int cmsg_stamp(struct msghdr *msg, struct timespec *ts)
{
#ifdef SCM_TIMESTAMPNS
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            memcpy(ts, CMSG_DATA(c), sizeof *ts);
            return 1;
        }
    }
#else
    (void)msg, (void)ts;
#endif
    return 0;
}

/* One recvmsg of at most ``len`` bytes into ``buf`` with ``flags``. With ``want_stamp``, *stamped
 * says whether the kernel gave the data's receive stamp, and *ts holds it. Returns recvmsg's
 * result (errno set on -1). Shared by the reader's reads and the watcher's peeks. */
static inline ssize_t recv_stamped(int fd, void *buf, size_t len, int flags, int want_stamp, struct timespec *ts,
                                   int *stamped)
{
    struct iovec iov = {buf, len};
    union {
        char bytes[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (want_stamp) {
        msg.msg_control = control.bytes;
        msg.msg_controllen = sizeof control.bytes;
    }
    ssize_t n = recvmsg(fd, &msg, flags);
    *stamped = n >= 0 && want_stamp && cmsg_stamp(&msg, ts);
    return n;
}

/* One note: the first ``rx`` bytes the connection ever received had all arrived by
 * ``stamp`` (CLOCK_REALTIME seconds, the kernel's stamp of the newest segment). */
typedef struct {
    unsigned long long rx;
    double stamp;
} watch_note;

/* Called by read_events after a read of ``n`` bytes on a watched ``fd``: advances the read
 * position and copies the notes that fall inside the read (rx in (before, after]) into
 * ``out`` (at most ``cap``); returns how many, and sets *before to the read's first rx. */
int watch_after_read(int fd, Py_ssize_t n, unsigned long long *before, watch_note *out, int cap);

PyObject *watch_py_watch(PyObject *self, PyObject *arg);
PyObject *watch_py_unwatch(PyObject *self, PyObject *arg);
PyObject *watch_py_take_notes(PyObject *self, PyObject *arg);
PyObject *watch_py_alive(PyObject *self, PyObject *args);
PyObject *watch_py_stats(PyObject *self, PyObject *unused);

#endif
