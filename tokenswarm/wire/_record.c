/* A request's record assembled in C: the ~50 slots of a RequestRecord set straight from the
 * fields the stream state measured and the request's identity.
 *
 * Why C: tokenswarm.record.build_record set each slot through its descriptor from Python
 * (~6 us a record, more with the identity's fields copied into a dict first); this sets them
 * by offset. It only ever builds a complete, valid record: a missing required field or an
 * unknown key makes it return None, and the Python builder then raises its own TypeError.
 */
#include "_record.h"

#include <string.h>

#include "structmember.h"

static PyTypeObject *record_type, *identity_type;
static Py_ssize_t n_fields;
static PyObject *names;    /* tuple of the record's field names, in slot order */
static PyObject *defaults; /* tuple: each field's default, or the ``required`` marker */
static PyObject *required;
static Py_ssize_t *record_offset;   /* per field: its slot's offset in a record */
static Py_ssize_t *identity_offset; /* per field: its slot's offset in an identity, or -1 */

/* The slot offset of ``name`` in ``cls``, or -1 when it is not a plain object slot. */
static Py_ssize_t slot_of(PyObject *cls, PyObject *name)
{
    PyObject *d = PyObject_GetAttr(cls, name);
    if (d == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX)
        off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return off;
}

/* bind_record(record_cls, names, defaults, required, identity_cls, identity_names) -> bool */
PyObject *record_bind(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rcls, *nm, *df, *req, *icls, *inames;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!O!", &PyType_Type, &rcls, &PyTuple_Type, &nm, &PyTuple_Type, &df, &req,
                          &PyType_Type, &icls, &PyTuple_Type, &inames))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(nm);
    if (PyTuple_GET_SIZE(df) != n)
        return PyErr_Format(PyExc_ValueError, "bind_record: %zd names but %zd defaults", n, PyTuple_GET_SIZE(df));
    Py_ssize_t *roff = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    Py_ssize_t *ioff = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    if (roff == NULL || ioff == NULL) {
        PyMem_Free(roff);
        PyMem_Free(ioff);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(nm, i);
        roff[i] = slot_of(rcls, name);
        int in_identity = PySequence_Contains(inames, name);
        if (in_identity < 0 || roff[i] < 0) {
            PyErr_Clear();
            PyMem_Free(roff);
            PyMem_Free(ioff);
            Py_RETURN_FALSE; /* not a slots class as expected: the Python builder does all */
        }
        ioff[i] = in_identity ? slot_of(icls, name) : -1;
        if (in_identity && ioff[i] < 0) {
            PyMem_Free(roff);
            PyMem_Free(ioff);
            Py_RETURN_FALSE;
        }
    }
    PyMem_Free(record_offset);
    PyMem_Free(identity_offset);
    record_offset = roff;
    identity_offset = ioff;
    n_fields = n;
    Py_INCREF(rcls);
    Py_XSETREF(record_type, (PyTypeObject *)rcls);
    Py_INCREF(icls);
    Py_XSETREF(identity_type, (PyTypeObject *)icls);
    Py_INCREF(nm);
    Py_XSETREF(names, nm);
    Py_INCREF(df);
    Py_XSETREF(defaults, df);
    Py_INCREF(req);
    Py_XSETREF(required, req);
    Py_RETURN_TRUE;
}

/* build_record(fields, identity) -> record, or None when it is not a complete, valid record
 * (then tokenswarm.record.build_record says why). ``fields`` wins over ``identity``, and both
 * over the defaults; ``fields`` is not changed. */
PyObject *record_build(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "build_record(fields, identity)");
    PyObject *fields = args[0], *identity = args[1];
    if (record_type == NULL || !PyDict_CheckExact(fields))
        Py_RETURN_NONE;
    int with_identity = identity != Py_None;
    if (with_identity && !Py_IS_TYPE(identity, identity_type))
        Py_RETURN_NONE;
    PyObject *rec = record_type->tp_alloc(record_type, 0);
    if (rec == NULL)
        return NULL;
    Py_ssize_t hits = 0;
    for (Py_ssize_t i = 0; i < n_fields; i++) {
        PyObject *v = PyDict_GetItemWithError(fields, PyTuple_GET_ITEM(names, i));
        if (v != NULL) {
            hits++;
        } else if (PyErr_Occurred()) {
            Py_DECREF(rec);
            return NULL;
        } else {
            if (with_identity && identity_offset[i] >= 0)
                v = *(PyObject **)((char *)identity + identity_offset[i]);
            if (v == NULL)
                v = PyTuple_GET_ITEM(defaults, i);
            if (v == required) {
                Py_DECREF(rec);
                Py_RETURN_NONE; /* a required field is missing */
            }
        }
        Py_INCREF(v);
        *(PyObject **)((char *)rec + record_offset[i]) = v;
    }
    if (hits != PyDict_GET_SIZE(fields)) {
        Py_DECREF(rec);
        Py_RETURN_NONE; /* a key that is no field */
    }
    return rec;
}
