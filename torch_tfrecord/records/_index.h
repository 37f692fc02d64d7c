/* The offset index's text, the records layer of torch_tfrecord.support._native: parse_index,
 * which answers a row count or INDEX_NOT_CANONICAL (exported to Python under that name). */
#ifndef TORCH_TFRECORD_RECORDS_INDEX_H
#define TORCH_TFRECORD_RECORDS_INDEX_H

#include "../support/_native.h"

/* Not the canonical text: the caller's strict parser reads it and names the line. */
#define INDEX_NOT_CANONICAL (-1)

TT_HIDDEN int index_init(PyObject *module);

#endif
