/* A request's record assembled in C (see _record.c). */
#ifndef TOKENSWARM_RECORD_H
#define TOKENSWARM_RECORD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *record_bind(PyObject *self, PyObject *args);
PyObject *record_build(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
