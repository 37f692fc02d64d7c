/* The Example wire decoder, the codec layer of torch_tfrecord.support._native: decode and
 * bytes_rows. The column table's kinds and modes and decode's error codes are exported to Python
 * under these names (codec/native.py builds its columns and reads the errors with them). */
#ifndef TORCH_TFRECORD_CODEC_WIRE_H
#define TORCH_TFRECORD_CODEC_WIRE_H

#include "../support/_native.h"

/* What a column holds: the Feature's oneof member numbers. */
enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };

enum {
    MODE_VAR = 0,   /* any number of values; missing = none */
    MODE_FIXED = 1, /* exactly numel values; missing = default, or an error without one */
    MODE_MULT = 2,  /* a multiple of numel values; missing = none, or an error if required */
    MODE_ONE = 3,   /* exactly one value; missing is an error */
};

/* decode's answer for a batch it rejects: (error, record, column). */
enum {
    DECODE_OK = 0,
    DECODE_MEMORY = 1,
    DECODE_PARSE = 2,   /* not a valid serialized message */
    DECODE_TYPE = 3,    /* a feature holds another kind of list */
    DECODE_COUNT = 4,   /* a feature holds the wrong number of values */
    DECODE_MISSING = 5, /* a required feature is missing */
    DECODE_FRAME = 6,   /* framing: bounds, or length field disagrees with the entry */
    DECODE_CRC = 7,     /* framing: a CRC does not match */
};

TT_HIDDEN int wire_init(PyObject *module);

#endif
