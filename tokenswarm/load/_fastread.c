/* The hub reader's fast path in C: one read of a stream socket, its kernel receive
 * timestamp, and -- when the bytes are the common framing (whole HTTP chunks, each holding
 * whole "data: <payload>\n\n" SSE events) -- the list of event payloads.
 *
 * Why C: per SSE event the Python version of this work (recvmsg's result tuples, the
 * timestamp conversion, de-chunking, SSE splitting) cost more than the JSON parse itself.
 * Anything unusual (a chunk split across reads, CR line ends, comments, "event:" lines,
 * the last chunk, EOF) is handed back untouched and the Python parsers take it: the fast
 * path either understands a read completely or not at all, so both paths give the same
 * events (tests/load/test_fastread.py checks this on generated framings).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define READ_BYTES 65536

/* One read at a time under the GIL: a static buffer saves an allocation per read. */
static char read_buf[READ_BYTES];

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

/* Whole non-empty chunks ("<hex>\r\n<data>\r\n", no extensions), each of whole events. */
static int split_chunks(const char *p, const char *end, PyObject *out)
{
    while (p < end) {
        size_t size = 0;
        int digits = 0, v;
        while (p < end && digits < 15 && (v = hex_value(*p)) >= 0) {
            size = size * 16 + (size_t)v;
            p++;
            digits++;
        }
        if (digits == 0 || end - p < 2 || p[0] != '\r' || p[1] != '\n' || size == 0)
            return 0; /* extensions, the last chunk, a partial size line: the Python decoder */
        p += 2;
        if ((size_t)(end - p) < size + 2 || p[size] != '\r' || p[size + 1] != '\n')
            return 0; /* the chunk continues in a later read */
        int rc = split_events(p, p + size, out);
        if (rc != 1)
            return rc;
        p += size + 2;
    }
    return 1;
}

/* read_events(fd, chunked, stamped, real_minus_mono_s, now_s, max_age_s)
 *     -> (arrival_s, events | None, data | None)
 *
 * One recvmsg on the non-blocking socket ``fd``. ``arrival_s`` is the kernel's receive
 * stamp moved onto the monotonic timeline (stamp - real_minus_mono_s) when ``stamped`` and
 * plausible (within max_age_s before now_s), else ``now_s``. ``events`` is the list of
 * (None, payload) tuples when the read was the simple framing; otherwise ``data`` holds the
 * bytes read (b"" at EOF) for the general parsers. Errors raise OSError (BlockingIOError
 * when nothing was there).
 */
static PyObject *read_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "read_events takes 6 arguments");
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
    if (chunked < 0 || stamped < 0 || PyErr_Occurred())
        return NULL;

    struct iovec iov = {read_buf, READ_BYTES};
    union {
        char bytes[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (stamped) {
        msg.msg_control = control.bytes;
        msg.msg_controllen = sizeof control.bytes;
    }
    ssize_t n;
    for (;;) {
        n = recvmsg((int)fd, &msg, 0);
        if (n >= 0 || errno != EINTR)
            break;
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
    if (n < 0)
        return PyErr_SetFromErrno(PyExc_OSError); /* EAGAIN becomes BlockingIOError */

    double arrival = now;
#ifdef SCM_TIMESTAMPNS
    if (stamped) {
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof ts);
                /* subtract before adding the nanoseconds: epoch seconds as a double keep µs */
                double t = ((double)ts.tv_sec - offset) + (double)ts.tv_nsec * 1e-9;
                if (now - max_age < t && t < now)
                    arrival = t;
                break;
            }
        }
    }
#endif

    if (n > 0 && chunked) {
        PyObject *events = PyList_New(0);
        if (events == NULL)
            return NULL;
        int rc = split_chunks(read_buf, read_buf + n, events);
        if (rc < 0) {
            Py_DECREF(events);
            return NULL;
        }
        if (rc == 1)
            return Py_BuildValue("(dNO)", arrival, events, Py_None);
        Py_DECREF(events);
    }
    return Py_BuildValue("(dOy#)", arrival, Py_None, read_buf, (Py_ssize_t)n);
}

/* split(data, chunked) -> events | None: the parsing half of read_events, for tests. */
static PyObject *split(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int chunked;
    if (!PyArg_ParseTuple(args, "y*p", &view, &chunked))
        return NULL;
    PyObject *events = PyList_New(0);
    if (events == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *p = view.buf;
    int rc = chunked ? split_chunks(p, p + view.len, events) : split_events(p, p + view.len, events);
    PyBuffer_Release(&view);
    if (rc < 0) {
        Py_DECREF(events);
        return NULL;
    }
    if (rc == 0 || view.len == 0) {
        Py_DECREF(events);
        Py_RETURN_NONE;
    }
    return events;
}

static PyMethodDef methods[] = {
    {"read_events", (PyCFunction)(void (*)(void))read_events, METH_FASTCALL,
     "read_events(fd, chunked, stamped, real_minus_mono_s, now_s, max_age_s) -> (arrival_s, events|None, data|None)"},
    {"split", split, METH_VARARGS, "split(data, chunked) -> list of (None, payload) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastread", NULL, -1, methods};

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
