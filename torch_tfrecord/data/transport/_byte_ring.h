/* Bytes values into a worker's ring slot, the data layer of torch_tfrecord.support._native:
 * join_into, which answers the bytes written or a JoinStatus (exported to Python by name). */
#ifndef TORCH_TFRECORD_DATA_BYTE_RING_H
#define TORCH_TFRECORD_DATA_BYTE_RING_H

#include "../../support/_native.h"

typedef enum {
    JOIN_NOT_BYTES = -1, /* an item is not exactly bytes */
    JOIN_NO_ROOM = -2,   /* the values do not fit in `out`, or their cuts in `cuts` */
} JoinStatus;

TT_HIDDEN int byte_ring_init(PyObject *module);

#endif
