/* Batch reads of file regions, the records layer of torch_tfrecord.support._native: read_into,
 * copy_ranges and gather, whose answer is a GATHER_* status (exported to Python under these names;
 * records/gather.py's Gathered takes its values from them). */
#ifndef TORCH_TFRECORD_RECORDS_GATHER_H
#define TORCH_TFRECORD_RECORDS_GATHER_H

#include "../support/_native.h"

typedef enum {
    GATHER_DONE = 0,   /* value: the bytes of `out` used */
    GATHER_OPEN = 1,   /* value: the shard to open first */
    GATHER_GROW = 2,   /* value: the bytes `out` must hold */
    GATHER_FAILED = 3, /* a record past its file's end, or a failed or short read */
    GATHER_BAD_ID = 4, /* an id out of range */
} GatherStatus;

TT_HIDDEN int gather_init(PyObject *module);

#endif
