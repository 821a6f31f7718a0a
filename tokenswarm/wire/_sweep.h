/* The stream poller's sweep in C (poll without waiting, call each ready socket's handler) and
 * the clock offset that dates its reads. See _sweep.c. */
#ifndef TOKENSWARM_SWEEP_H
#define TOKENSWARM_SWEEP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *sweep_py_ready(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *sweep_py_real_minus_mono(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
