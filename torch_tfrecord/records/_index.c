/*
 * The offset index's text (records layer of torch_tfrecord.support._native); its Python caller
 * is records/index.py.
 */
#include "_index.h"

/* parse_index(data, out) -> rows: an index file's text in the canonical form, one
 * "<offset> <framed_size>\n" line per record (decimal digits, one space, the last newline
 * optional), into `out` (int64, two per row; the caller sizes it from the newlines). Returns
 * the number of rows, or INDEX_NOT_CANONICAL for anything else (the caller's strict parser
 * names the line): other whitespace, signs, an empty line, a number of more than 18 digits,
 * more rows than `out` holds. */
static PyObject *py_parse_index(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out_obj;
    Py_buffer data, out;
    if (!PyArg_ParseTuple(args, "y*O:parse_index", &data, &out_obj)) return NULL;
    if (!get_int64_array(out_obj, &out, "out")) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (out.readonly) {
        release_views((Py_buffer *[]){&data, &out}, 2);
        PyErr_SetString(PyExc_ValueError, "parse_index: out must be writable");
        return NULL;
    }
    const Py_ssize_t room = out.len / 16;
    const unsigned char *p = data.buf, *end = p + data.len;
    int64_t *row = out.buf;
    Py_ssize_t rows = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        int64_t value[2];
        for (int k = 0; k < 2; k++) {
            const unsigned char *start = p;
            uint64_t v = 0; /* 19 digits at most: no overflow (they are refused below) */
            while (p < end && *p >= '0' && *p <= '9' && p - start < 19) v = v * 10 + (uint64_t)(*p++ - '0');
            if (p == start || p - start > 18) {
                rows = INDEX_NOT_CANONICAL;
                goto parsed;
            }
            value[k] = (int64_t)v;
            if (k == 0) {
                if (p == end || *p != ' ') {
                    rows = INDEX_NOT_CANONICAL;
                    goto parsed;
                }
                p++;
            }
        }
        if (p < end) {
            if (*p != '\n') {
                rows = INDEX_NOT_CANONICAL;
                goto parsed;
            }
            p++;
        }
        if (rows == room) {
            rows = INDEX_NOT_CANONICAL;
            goto parsed;
        }
        row[2 * rows] = value[0];
        row[2 * rows + 1] = value[1];
        rows++;
    }
parsed:;
    Py_END_ALLOW_THREADS
    release_views((Py_buffer *[]){&data, &out}, 2);
    return PyLong_FromSsize_t(rows);
}

static PyMethodDef index_methods[] = {
    {"parse_index", py_parse_index, METH_VARARGS,
     "parse_index(data, out) -> rows: a canonical index text into out (int64 rows), or INDEX_NOT_CANONICAL"},
    {NULL, NULL, 0, NULL},
};

static const NativeConstant index_constants[] = {{"INDEX_NOT_CANONICAL", INDEX_NOT_CANONICAL}, {NULL, 0}};

int index_init(PyObject *module) {
    if (PyModule_AddFunctions(module, index_methods) < 0) return -1;
    return add_constants(module, index_constants);
}
