/*
 * What every part of the extension torch_tfrecord.support._native shares (the foundation layer):
 * int64 arrays and other buffers from Python, growable memory and the NativeBuffer object that
 * hands it to Python without a copy, little-endian loads, and how a part joins the module.
 *
 * The module is one shared object compiled from one C file per concern, each beside the Python
 * layer that calls it: records/_framing.c (CRC32C, the plain reader's framing loop),
 * records/_index.c (the offset index's text), records/_gather.c (batch reads of file regions),
 * codec/_wire.c (the Example wire decoder), data/order/_permutation.c (the shuffles' permutation),
 * data/transport/_byte_ring.c (bytes values into a worker's ring slot), data/grouping/_packing.c (token sequences
 * packed into rows), data/select/_id_lookup.c (a selection's places to record ids). A part includes headers of its own
 * layer and the layers below only (tests/test_layout.py checks it, as for the Python modules);
 * torch_tfrecord/_native_module.c, above every layer, joins them: it calls each part's
 * `<part>_init(module)`, which adds the part's functions and named constants (the status codes
 * that Python reads, with the names the C code uses).
 */
#ifndef TORCH_TFRECORD_SUPPORT_NATIVE_H
#define TORCH_TFRECORD_SUPPORT_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The parts' functions are for each other, not for the process: hidden from the dynamic symbol
 * table (only PyInit__native is exported), whatever the build's -fvisibility. */
#if defined(__GNUC__) || defined(__clang__)
#define TT_HIDDEN __attribute__((visibility("hidden")))
#else
#define TT_HIDDEN
#endif

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Growable memory; handed to Python as a NativeBuffer once filled. */
typedef struct {
    char *data;
    size_t len; /* bytes used */
    size_t cap;
} Buf;

/* Room for `extra` more bytes: 1, or 0 when out of memory. */
TT_HIDDEN int buf_reserve(Buf *b, size_t extra);

/* A NativeBuffer owning b's memory (taken even on failure: b is left empty). */
TT_HIDDEN PyObject *nb_from_buf(Buf *b);

/* A C-contiguous int64 view of obj (1), or a TypeError naming `what` (0). */
TT_HIDDEN int get_int64_array(PyObject *obj, Py_buffer *view, const char *what);

/* Releases the views that were acquired (a view never acquired is all zeros: obj NULL). */
TT_HIDDEN void release_views(Py_buffer *const *views, size_t n);

/* Adds NativeBuffer to the module; 0, or -1 with an exception set. */
TT_HIDDEN int buffers_init(PyObject *module);

/* Adds each NULL-terminated {name, value} constant to the module; 0, or -1 with an exception. */
typedef struct {
    const char *name;
    long value;
} NativeConstant;

TT_HIDDEN int add_constants(PyObject *module, const NativeConstant *constants);

#endif
