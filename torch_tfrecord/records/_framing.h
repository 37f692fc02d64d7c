/* The record framing's C part of torch_tfrecord.support._native (records layer): CRC32C, and the
 * plain record reader's framing loop (frame) and masked_crc32c for Python. */
#ifndef TORCH_TFRECORD_RECORDS_FRAMING_H
#define TORCH_TFRECORD_RECORDS_FRAMING_H

#include "../support/_native.h"

/* A TFRecord's masked CRC32C of n bytes: ((c >> 15) | (c << 17)) + 0xA282EAD8. */
TT_HIDDEN uint32_t masked_crc(const uint8_t *p, size_t n);

/* Builds the CRC tables, picks the SSE4.2 instruction where the CPU has it (and
 * TORCH_TFRECORD_NO_HW_CRC is unset), adds frame, masked_crc32c and HW_CRC to the module. */
TT_HIDDEN int framing_init(PyObject *module);

#endif
