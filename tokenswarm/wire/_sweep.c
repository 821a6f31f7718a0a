/* The stream poller's sweep in C: poll the process's epoll set without waiting and call each
 * ready socket's handler, and the realtime-minus-monotonic offset that dates the sweep's reads.
 *
 * Why C: a busy poller sweeps 250-1,000 times a second, and in Python each sweep built a list
 * of (fd, mask) tuples, looped over it with a dict lookup per socket, and took the clock offset
 * with six clock calls through the interpreter. py-spy put those lines at ~4-5 % of a
 * ``mix.yaml`` worker's CPU (the eighteenth pass of docs/results/request-cost.md); the system
 * calls and the handlers themselves stay as they were. tokenswarm/wire/poller.py keeps the
 * Python loop for builds without the extension (or TOKENSWARM_NATIVE=0), and
 * tests/wire/test_poller_sweep.py checks that both call the same handlers with the same
 * arguments.
 */
#include "_sweep.h"

#ifdef __linux__

#include <errno.h>
#include <sys/epoll.h>
#include <time.h>

#define SWEEP_READY_MAX 1024 /* the poller's MAX_READY: more stay ready (level-triggered) */

static long long ts_ns(const struct timespec *t)
{
    return (long long)t->tv_sec * 1000000000LL + (long long)t->tv_nsec;
}

/* sweep_ready(epfd, handlers, now_s, offset_s, max_ready) -> number of ready sockets
 *
 * handlers: {fd: callable(now_s, offset_s)}; a ready fd without a handler (removed since it
 * became ready) is skipped. A handler may add or remove handlers, its own included: each one
 * is looked up when its turn comes and held while it runs. An exception from a handler stops
 * the sweep and propagates, as the Python loop's would; the sockets not reached stay ready. */
PyObject *sweep_py_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "sweep_ready(epfd, handlers, now_s, offset_s, max_ready) takes 5 arguments");
        return NULL;
    }
    long epfd = PyLong_AsLong(args[0]);
    if (epfd == -1 && PyErr_Occurred())
        return NULL;
    PyObject *handlers = args[1];
    if (!PyDict_Check(handlers)) {
        PyErr_SetString(PyExc_TypeError, "sweep_ready: handlers must be a dict of fd -> callable");
        return NULL;
    }
    long max_ready = PyLong_AsLong(args[4]);
    if (max_ready == -1 && PyErr_Occurred())
        return NULL;
    if (max_ready < 1 || max_ready > SWEEP_READY_MAX)
        max_ready = SWEEP_READY_MAX;
    if (epfd < 0 || epfd > 0x7fffffffL) {
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    /* on the stack, not static: a handler could start a sweep of its own (it never does today) */
    struct epoll_event ready[SWEEP_READY_MAX];
    int n;
    do {
        n = epoll_wait((int)epfd, ready, (int)max_ready, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PyObject *call_args[2] = {args[2], args[3]};
    for (int i = 0; i < n; i++) {
        PyObject *key = PyLong_FromLong((long)ready[i].data.fd); /* select.epoll stores the fd */
        if (key == NULL)
            return NULL;
        PyObject *h = PyDict_GetItemWithError(handlers, key);
        Py_DECREF(key);
        if (h == NULL) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        Py_INCREF(h); /* the handler may remove itself from the dict while it runs */
        PyObject *res = PyObject_Vectorcall(h, call_args, 2, NULL);
        Py_DECREF(h);
        if (res == NULL)
            return NULL;
        Py_DECREF(res);
    }
    return PyLong_FromLong(n);
}

/* real_minus_mono(bracket_s, attempts) -> CLOCK_REALTIME - CLOCK_MONOTONIC in seconds: the
 * realtime reading bracketed by two monotonic ones, taken again while the bracket is wider than
 * ``bracket_s`` (a preemption between them), at most ``attempts`` times; the narrowest bracket's
 * realtime reading paired with its midpoint. kstamp.real_minus_mono's reading, with its
 * constants passed in (kstamp.OFFSET_BRACKET_S, OFFSET_ATTEMPTS), computed in integer
 * nanoseconds and converted to seconds once: a double of epoch seconds resolves ~0.25 us either
 * way. */
PyObject *sweep_py_real_minus_mono(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "real_minus_mono(bracket_s, attempts) takes 2 arguments");
        return NULL;
    }
    double bracket_s = PyFloat_AsDouble(args[0]);
    if (bracket_s == -1.0 && PyErr_Occurred())
        return NULL;
    long attempts = PyLong_AsLong(args[1]);
    if (attempts == -1 && PyErr_Occurred())
        return NULL;
    if (attempts < 1 || !(bracket_s >= 0.0)) {
        PyErr_SetString(PyExc_ValueError, "real_minus_mono: need attempts >= 1 and bracket_s >= 0");
        return NULL;
    }
    long long bracket_ns = (long long)(bracket_s * 1e9);
    long long best_width = -1, best_ns = 0;
    for (long i = 0; i < attempts; i++) {
        struct timespec before, real, after;
        if (clock_gettime(CLOCK_MONOTONIC, &before) != 0 || clock_gettime(CLOCK_REALTIME, &real) != 0 ||
            clock_gettime(CLOCK_MONOTONIC, &after) != 0)
            return PyErr_SetFromErrno(PyExc_OSError);
        long long b = ts_ns(&before), a = ts_ns(&after);
        long long width = a - b;
        if (best_width < 0 || width < best_width) {
            best_width = width;
            best_ns = ts_ns(&real) - (b + (a - b) / 2);
        }
        if (width <= bracket_ns)
            break;
    }
    return PyFloat_FromDouble((double)best_ns * 1e-9);
}

#else /* not Linux: no epoll; the poller does not exist there (stream_poller() returns None) */

PyObject *sweep_py_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self, (void)args, (void)nargs;
    PyErr_SetString(PyExc_OSError, "sweep_ready needs epoll (Linux)");
    return NULL;
}

PyObject *sweep_py_real_minus_mono(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self, (void)args, (void)nargs;
    PyErr_SetString(PyExc_OSError, "real_minus_mono needs CLOCK_MONOTONIC (Linux)");
    return NULL;
}

#endif
