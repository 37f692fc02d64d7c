/*
 * A batch's bytes values copied into a worker's shared-memory ring slot (data layer of
 * torch_tfrecord.support._native); its Python caller is data/transport/byte_ring.py, which cuts them out
 * again with bytes_rows (codec/_wire.c).
 */
#include "_byte_ring.h"

/* join_into(values, out, cuts) -> total: copies the bytes values of the list `values` into `out`
 * back to back, without the GIL, and writes into the int64 buffer `cuts` (3 n + 1 entries) each
 * value's (start, length) span then the rows 0..n (bytes_rows' arguments for cutting them out
 * again). JOIN_NOT_BYTES when an item is not exactly bytes, JOIN_NO_ROOM when they do not fit in
 * `out` or `cuts`. */
static PyObject *py_join_into(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values, *out_obj, *cuts_obj;
    if (!PyArg_ParseTuple(args, "O!OO:join_into", &PyList_Type, &values, &out_obj, &cuts_obj)) return NULL;
    Py_buffer out = {0}, cuts = {0};
    PyObject *result = NULL, **held = NULL;
    Py_ssize_t n = PyList_GET_SIZE(values), total = 0, taken = 0;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(cuts_obj, &cuts, PyBUF_WRITABLE) < 0) goto done;
    if (cuts.len / 8 < 3 * n + 1) {
        result = PyLong_FromLong(JOIN_NO_ROOM);
        goto done;
    }
    held = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    if (!held) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *span = (int64_t *)cuts.buf, *row = span + 2 * n;
    for (; taken < n; taken++) {
        PyObject *item = PyList_GET_ITEM(values, taken);
        if (!PyBytes_CheckExact(item)) break;
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        if (len > out.len - total) {
            result = PyLong_FromLong(JOIN_NO_ROOM);
            goto done;
        }
        Py_INCREF(item);  /* the list may change while the GIL is released below */
        held[taken] = item;
        span[2 * taken] = total;
        span[2 * taken + 1] = len;
        row[taken] = taken;
        total += len;
    }
    if (taken < n) {
        result = PyLong_FromLong(JOIN_NOT_BYTES);
        goto done;
    }
    row[n] = n;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        memcpy((char *)out.buf + span[2 * i], PyBytes_AS_STRING(held[i]), (size_t)span[2 * i + 1]);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(total);
done:
    for (Py_ssize_t i = 0; i < taken; i++) Py_DECREF(held[i]);
    PyMem_Free(held);
    PyBuffer_Release(&out);
    if (cuts.obj) PyBuffer_Release(&cuts);
    return result;
}

static PyMethodDef byte_ring_methods[] = {
    {"join_into", py_join_into, METH_VARARGS,
     "join_into(values, out, cuts) -> total: bytes values into out, their spans and rows into cuts"},
    {NULL, NULL, 0, NULL},
};

static const NativeConstant byte_ring_constants[] = {
    {"JOIN_NOT_BYTES", JOIN_NOT_BYTES},
    {"JOIN_NO_ROOM", JOIN_NO_ROOM},
    {NULL, 0},
};

int byte_ring_init(PyObject *module) {
    if (PyModule_AddFunctions(module, byte_ring_methods) < 0) return -1;
    return add_constants(module, byte_ring_constants);
}
