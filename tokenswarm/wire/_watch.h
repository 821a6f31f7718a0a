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
PyObject *watch_py_alive(PyObject *self, PyObject *unused);
PyObject *watch_py_stats(PyObject *self, PyObject *unused);

#endif
