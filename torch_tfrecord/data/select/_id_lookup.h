/* A selection's places to the files' record ids, the data layer of torch_tfrecord.support._native:
 * take_ids. */
#ifndef TORCH_TFRECORD_DATA_ID_LOOKUP_H
#define TORCH_TFRECORD_DATA_ID_LOOKUP_H

#include "../../support/_native.h"

TT_HIDDEN int id_lookup_init(PyObject *module);

#endif
