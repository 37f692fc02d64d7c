/*
 * A selection's places to the files' record ids (data layer of torch_tfrecord.support._native);
 * its Python caller is data/select/selected_files.py, which keeps numpy's indexing for a build without
 * it. One call a batch, the bounds checked in the same pass: numpy's check (a reduction) and its
 * lookup cost several microseconds each in a batch's loop, a tenth of reading 256 small records.
 */
#include "_id_lookup.h"

/* take_ids(table, places, out) -> int: out[i] = table[places[i]] for each i (C-contiguous int64
 * arrays of any shape, read as flat); -1 when every place lies in [0, len(table)), else the first
 * i whose place does not (out then holds garbage). */
static PyObject *py_take_ids(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *table_obj, *places_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO:take_ids", &table_obj, &places_obj, &out_obj)) return NULL;
    Py_buffer table = {0}, places = {0}, out = {0};
    Py_buffer *const views[] = {&table, &places, &out};
    PyObject *result = NULL;
    if (!get_int64_array(table_obj, &table, "table") || !get_int64_array(places_obj, &places, "places") ||
        !get_int64_array(out_obj, &out, "out"))
        goto done;
    if (out.readonly || out.len != places.len) {
        PyErr_SetString(PyExc_ValueError, "take_ids: out must be writable and as long as places");
        goto done;
    }
    const uint64_t count = (uint64_t)(table.len / 8);
    const int64_t *from = table.buf, *place = places.buf;
    int64_t *to = out.buf;
    Py_ssize_t n = places.len / 8, bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t p = (uint64_t)place[i]; /* a negative place, as unsigned, lies past any count */
        if (p >= count) {
            bad = i;
            break;
        }
        to[i] = from[p];
    }
    result = PyLong_FromSsize_t(bad);
done:
    release_views(views, 3);
    return result;
}

static PyMethodDef id_lookup_methods[] = {
    {"take_ids", py_take_ids, METH_VARARGS,
     "take_ids(table, places, out) -> int: out = table[places], -1 or the first place out of range"},
    {NULL, NULL, 0, NULL},
};

int id_lookup_init(PyObject *module) { return PyModule_AddFunctions(module, id_lookup_methods); }
