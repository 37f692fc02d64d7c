/*
 * The module torch_tfrecord.support._native, joined from its parts.
 *
 * Each part is one concern, in the folder of the layer that calls it (see support/_native.h):
 * the foundation (support/_native_buffers.c), the record framing and CRC32C (records/_framing.c),
 * the offset index's text (records/_index.c), batch reads (records/_gather.c), the Example wire
 * decoder (codec/_wire.c), the shuffles' permutation (data/order/_permutation.c), a worker's ring
 * slot (data/transport/_byte_ring.c), the packer of token sequences (data/grouping/_packing.c) and a selection's
 * places to record ids (data/select/_id_lookup.c). This file sits
 * above every layer, as the package's face does for the Python modules: it is the only one that
 * includes them all. One shared object keeps one import, one build and one name for Python
 * (support/extension.py loads it).
 */
#include "support/_native.h"

#include "codec/_wire.h"
#include "data/transport/_byte_ring.h"
#include "data/select/_id_lookup.h"
#include "data/grouping/_packing.h"
#include "data/order/_permutation.h"
#include "records/_framing.h"
#include "records/_gather.h"
#include "records/_index.h"

typedef int (*PartInit)(PyObject *module);

/* Bottom layer first: a part may use what a lower one set up (codec/_wire.c: the CRC tables). */
static const PartInit parts[] = {
    buffers_init,     framing_init,   index_init,   gather_init,   wire_init,
    permutation_init, byte_ring_init, packing_init, id_lookup_init,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_tfrecord.support._native",
                                    "The compiled TFRecord / Example decoder, framing, batch reads and shuffles.",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "torch_tfrecord.support._native supports little-endian hosts only");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        if (parts[i](m) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
