/*
 * The foundation of torch_tfrecord.support._native (see _native.h): growable memory and the
 * NativeBuffer object that owns it once a part is done with it, int64 array views, constants.
 */
#include "_native.h"

#include <stdlib.h>

int buf_reserve(Buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return 1;
    size_t want = b->cap ? b->cap : 256;
    while (want - b->len < extra) {
        if (want > SIZE_MAX / 2) return 0;
        want *= 2;
    }
    char *data = realloc(b->data, want);
    if (!data) return 0;
    b->data = data;
    b->cap = want;
    return 1;
}

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    Py_ssize_t exports;
} NativeBuffer;

static int nb_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    NativeBuffer *nb = (NativeBuffer *)self;
    if (PyBuffer_FillInfo(view, self, nb->data, nb->len, 0, flags) < 0) return -1;
    nb->exports++;
    return 0;
}

static void nb_releasebuffer(PyObject *self, Py_buffer *view) {
    (void)view;
    ((NativeBuffer *)self)->exports--;
}

static void nb_dealloc(PyObject *self) {
    free(((NativeBuffer *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *nb_len_get(PyObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(((NativeBuffer *)self)->len);
}

static PyBufferProcs nb_as_buffer = {nb_getbuffer, nb_releasebuffer};
static PyGetSetDef nb_getset[] = {{"nbytes", nb_len_get, NULL, "size in bytes", NULL}, {NULL}};

static PyTypeObject NativeBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torch_tfrecord.support._native.NativeBuffer",
    .tp_basicsize = sizeof(NativeBuffer),
    .tp_dealloc = nb_dealloc,
    .tp_as_buffer = &nb_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory filled by the native decoder; expose it with numpy.frombuffer.",
    .tp_getset = nb_getset,
};

/* Takes ownership of b's memory (even on failure). */
PyObject *nb_from_buf(Buf *b) {
    NativeBuffer *nb = PyObject_New(NativeBuffer, &NativeBufferType);
    if (!nb) {
        free(b->data);
        b->data = NULL;
        return NULL;
    }
    if (!b->data) b->data = malloc(1); /* a valid pointer for empty buffers */
    nb->data = b->data;
    nb->len = (Py_ssize_t)b->len;
    nb->exports = 0;
    b->data = NULL;
    b->len = b->cap = 0;
    if (!nb->data) {
        Py_DECREF(nb);
        return PyErr_NoMemory();
    }
    return (PyObject *)nb;
}

int get_int64_array(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
    if (view->itemsize != 8 || !view->format || (strcmp(view->format, "q") && strcmp(view->format, "l") &&
                                                  strcmp(view->format, "<q") && strcmp(view->format, "=q") &&
                                                  strcmp(view->format, "<l") && strcmp(view->format, "=l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* Releases the views that were acquired (a view never acquired is all zeros: obj NULL). */
void release_views(Py_buffer *const *views, size_t n) {
    for (size_t v = 0; v < n; v++)
        if (views[v]->obj) PyBuffer_Release(views[v]);
}

int buffers_init(PyObject *module) {
    if (PyType_Ready(&NativeBufferType) < 0) return -1;
    Py_INCREF(&NativeBufferType);
    if (PyModule_AddObject(module, "NativeBuffer", (PyObject *)&NativeBufferType) < 0) {
        Py_DECREF(&NativeBufferType);
        return -1;
    }
    return 0;
}

int add_constants(PyObject *module, const NativeConstant *constants) {
    for (; constants->name; constants++)
        if (PyModule_AddIntConstant(module, constants->name, constants->value) < 0) return -1;
    return 0;
}
