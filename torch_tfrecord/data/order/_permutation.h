/* The shuffles' permutation, the data layer of torch_tfrecord.support._native: feistel. */
#ifndef TORCH_TFRECORD_DATA_PERMUTATION_H
#define TORCH_TFRECORD_DATA_PERMUTATION_H

#include "../../support/_native.h"

TT_HIDDEN int permutation_init(PyObject *module);

#endif
