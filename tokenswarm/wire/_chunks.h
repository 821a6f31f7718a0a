/* The stream state's common completion chunks, read in C (see _chunks.c). */
#ifndef TOKENSWARM_CHUNKS_H
#define TOKENSWARM_CHUNKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *chunks_bind(PyObject *self, PyObject *args);
PyObject *chunks_feed(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *chunks_stats(PyObject *self, PyObject *unused);

#endif
