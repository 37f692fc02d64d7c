/* Packing token sequences into rows, the data layer of torch_tfrecord.support._native: pack_rows. */
#ifndef TORCH_TFRECORD_DATA_PACKING_H
#define TORCH_TFRECORD_DATA_PACKING_H

#include "../../support/_native.h"

TT_HIDDEN int packing_init(PyObject *module);

#endif
