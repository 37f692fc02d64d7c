/*
 * The Example wire decoder (codec layer of torch_tfrecord.support._native).
 *
 * Takes one contiguous buffer of records (framed TFRecord records or bare payloads) and a
 * compiled spec, checks the framing and CRCs, walks the protobuf wire format of Example /
 * SequenceExample and fills one growable column per spec key: values (int64, float32, or
 * (start, length) spans of bytes in the input buffer) and row offsets. The GIL is released
 * while parsing; column memory is handed to Python as NativeBuffer objects (no copy).
 *
 * Safety: the input is untrusted. Every read is bounds-checked against the end of its
 * enclosing message; no allocation is sized from a length field, only from bytes actually
 * present (a column grows as values are appended, and values come from input bytes).
 * Everything the protobuf runtime (upb) rejects is rejected here too: malformed varints,
 * lengths past the end or of more than 5 bytes, bad wire types, field number 0, unterminated
 * or mismatched groups, packed float payloads that are not a multiple of 4, invalid UTF-8 in
 * map keys. Unknown fields and known fields with an unexpected wire type are skipped, as upb
 * keeps them as unknown fields. The Python layer turns a rejection into the reference
 * decoder's exact error.
 *
 * In sections: columns; the wire format; Example messages; the Python entry points (decode,
 * bytes_rows, bytes_pack). Their Python callers: codec/native.py, and data/transport/byte_ring.py (bytes_rows).
 */
#include "_wire.h"

#include <stdlib.h>

#include "../records/_framing.h"

/* ------------------------------------------------------------------------------------------ */
/* Columns: what the spec asks for, and what the parse fills */

typedef struct {
    const char *key;
    Py_ssize_t key_len;
    int kind;
    int mode;
    int required;  /* MODE_MULT / sequences: missing is an error */
    int sequence;  /* a feature list of a SequenceExample */
    int64_t numel; /* values per row (FIXED), per step (sequence FIXED) or the multiple (MULT) */
    const char *def;
    int64_t def_count;
    /* outputs */
    Buf values;
    Buf steps;     /* sequences: int64 value offset at the end of each step */
    int64_t *rows; /* n + 1: value (or step) offset of each record */
    uint8_t *status; /* n: 0 missing, 1 present */
    /* per record */
    size_t rec_values; /* values.len at the start of the record */
    size_t rec_steps;
    int seen;
    int which; /* the list kind the feature holds (last entry wins) */
    int bad_step; /* sequences: a step held another kind */
} Column;

static inline size_t elem_size(int kind) { return kind == KIND_BYTES ? 16 : kind == KIND_FLOAT ? 4 : 8; }

typedef struct {
    const uint8_t *base;
    Column *cols;
    int ncols;
    int err;
    int err_col;
} Ctx;

#define DEPTH_LIMIT 100

/* ------------------------------------------------------------------------------------------ */
/* Wire format */

static inline int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return 0;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            *pp = p;
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* A tag: at most 5 bytes, fits 32 bits, wire type 0..5, field number > 0 (upb lets 0 pass
 * inside an unknown group only: read_group_tag). */
static inline int read_any_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wire, int zero_ok) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    int i;
    for (i = 0; i < 5; i++) {
        if (p >= end) return 0;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) break;
    }
    if (i == 5 || v > 0xFFFFFFFFu) return 0;
    *field = (uint32_t)(v >> 3);
    *wire = (int)(v & 7);
    if ((*field == 0 && !zero_ok) || *wire > 5) return 0;
    *pp = p;
    return 1;
}

static inline int read_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wire) {
    return read_any_tag(pp, end, field, wire, 0);
}

/* A length-delimited payload: [*pp, *pp + len) inside end. The length is a varint of at most
 * 5 bytes, as upb and the C++ runtime read it (a longer, zero-padded one is malformed there). */
static inline int read_len(const uint8_t **pp, const uint8_t *end, const uint8_t **sub_end) {
    uint64_t len;
    const uint8_t *start = *pp;
    if (!read_varint(pp, end, &len)) return 0;
    if (*pp - start > 5 || len > 0x7FFFFFFFu || len > (uint64_t)(end - *pp)) return 0;
    *sub_end = *pp + len;
    return 1;
}

static int skip_field(const uint8_t **pp, const uint8_t *end, uint32_t field, int wire, int depth);

/* Skips to the END_GROUP of `field`. */
static int skip_group(const uint8_t **pp, const uint8_t *end, uint32_t field, int depth) {
    if (depth > DEPTH_LIMIT) return 0; /* upb: message depth + group nesting <= 101 */
    while (*pp < end) {
        uint32_t f;
        int w;
        if (!read_any_tag(pp, end, &f, &w, 1)) return 0;
        if (w == 4) return f == field;
        if (!skip_field(pp, end, f, w, depth + 1)) return 0;
    }
    return 0; /* unterminated */
}

static int skip_field(const uint8_t **pp, const uint8_t *end, uint32_t field, int wire, int depth) {
    uint64_t v;
    const uint8_t *sub_end;
    switch (wire) {
        case 0:
            return read_varint(pp, end, &v);
        case 1:
            if (end - *pp < 8) return 0;
            *pp += 8;
            return 1;
        case 2:
            if (!read_len(pp, end, &sub_end)) return 0;
            *pp = sub_end;
            return 1;
        case 3:
            return skip_group(pp, end, field, depth);
        case 5:
            if (end - *pp < 4) return 0;
            *pp += 4;
            return 1;
        default: /* END_GROUP outside a group */
            return 0;
    }
}

/* UTF-8 as upb checks it (no overlongs, no surrogates, at most U+10FFFF). */
static int valid_utf8(const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (end - p <= n) return 0;
        for (int k = 1; k <= n; k++) {
            if ((p[k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[k] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        p += n + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Example messages */

/* The content of a BytesList / FloatList / Int64List of `kind`; appends values to `out` when
 * given (`base` is where byte spans are measured from), else only checks the bytes. */
static int parse_list(Ctx *ctx, const uint8_t *p, const uint8_t *end, int kind, Buf *out, int depth) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return DECODE_PARSE;
        if (field == 1 && kind == KIND_INT64 && (wire == 0 || wire == 2)) {
            const uint8_t *stop = end;
            int single = wire == 0;
            if (!single && !read_len(&p, end, &stop)) return DECODE_PARSE;
            while (single || p < stop) {
                uint64_t v;
                if (!read_varint(&p, stop, &v)) return DECODE_PARSE;
                if (out) {
                    if (!buf_reserve(out, 8)) return DECODE_MEMORY;
                    memcpy(out->data + out->len, &v, 8);
                    out->len += 8;
                }
                if (single) break;
            }
        } else if (field == 1 && kind == KIND_FLOAT && wire == 5) {
            if (end - p < 4) return DECODE_PARSE;
            if (out) {
                if (!buf_reserve(out, 4)) return DECODE_MEMORY;
                memcpy(out->data + out->len, p, 4);
                out->len += 4;
            }
            p += 4;
        } else if (field == 1 && kind == KIND_FLOAT && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            size_t n = (size_t)(stop - p);
            if (n % 4) return DECODE_PARSE;
            if (out && n) {
                if (!buf_reserve(out, n)) return DECODE_MEMORY;
                memcpy(out->data + out->len, p, n);
                out->len += n;
            }
            p = stop;
        } else if (field == 1 && kind == KIND_BYTES && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            if (out) {
                int64_t span[2] = {(int64_t)(p - ctx->base), (int64_t)(stop - p)};
                if (!buf_reserve(out, 16)) return DECODE_MEMORY;
                memcpy(out->data + out->len, span, 16);
                out->len += 16;
            }
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return DECODE_PARSE;
        }
    }
    return DECODE_OK;
}

/* The content of a Feature. `*which` is the oneof member set so far (merging continues it);
 * values of `col->kind` go to `col->values`, which is cut back to `reset` (bytes) whenever
 * the oneof switches member. */
static int parse_feature(Ctx *ctx, const uint8_t *p, const uint8_t *end, int *which, Column *col, size_t reset,
                         int depth) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return DECODE_PARSE;
        if (field >= 1 && field <= 3 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            if ((int)field != *which) {
                *which = (int)field;
                if (col) col->values.len = reset;
            }
            int err = parse_list(ctx, p, stop, (int)field, col && col->kind == (int)field ? &col->values : NULL,
                                 depth + 1);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return DECODE_PARSE;
        }
    }
    return DECODE_OK;
}

static Column *find_column(Ctx *ctx, const uint8_t *key, size_t len, int sequence) {
    for (int i = 0; i < ctx->ncols; i++) {
        Column *c = &ctx->cols[i];
        if (c->sequence == sequence && (size_t)c->key_len == len && memcmp(c->key, key, len) == 0) return c;
    }
    return NULL;
}

static int start_steps(Column *col) {
    if (!buf_reserve(&col->steps, 8)) return 0;
    return 1;
}

/* The content of a FeatureList: each Feature is one step. */
static int parse_feature_list(Ctx *ctx, const uint8_t *p, const uint8_t *end, Column *col, int depth) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return DECODE_PARSE;
        if (field == 1 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            int which = KIND_NONE;
            size_t step_start = col ? col->values.len : 0;
            int err = parse_feature(ctx, p, stop, &which, col, step_start, depth + 1);
            if (err) return err;
            if (col) {
                if (which == KIND_NONE) {
                    col->values.len = step_start;
                } else if (which != col->kind) {
                    col->values.len = step_start;
                    col->bad_step = 1;
                }
                if (!start_steps(col)) return DECODE_MEMORY;
                int64_t value_end = (int64_t)(col->values.len / elem_size(col->kind));
                memcpy(col->steps.data + col->steps.len, &value_end, 8);
                col->steps.len += 8;
            }
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return DECODE_PARSE;
        }
    }
    return DECODE_OK;
}

/* One map entry of Features (`sequence` 0: string -> Feature) or FeatureLists (1: string ->
 * FeatureList). A key seen again in the same record replaces the earlier entry. Like upb, an
 * entry with any field besides key and value (or one of those with another wire type) is kept
 * as an unknown field of the map's message: checked, but not in the map. */
static int parse_entry(Ctx *ctx, const uint8_t *p, const uint8_t *end, int sequence, int depth) {
    const uint8_t *key = (const uint8_t *)"", *key_end = key;
    const uint8_t *q = p;
    int unknown = 0;
    while (q < end) { /* first the key: the last key field wins */
        uint32_t field;
        int wire;
        if (!read_tag(&q, end, &field, &wire)) return DECODE_PARSE;
        if (field == 1 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&q, end, &stop) || !valid_utf8(q, stop)) return DECODE_PARSE;
            key = q;
            key_end = stop;
            q = stop;
        } else {
            unknown |= !(field == 2 && wire == 2);
            if (!skip_field(&q, end, field, wire, depth)) return DECODE_PARSE;
        }
    }
    Column *col = unknown ? NULL : find_column(ctx, key, (size_t)(key_end - key), sequence);
    if (col) {
        col->values.len = col->rec_values;
        col->steps.len = col->rec_steps;
        col->seen = 1;
        col->which = KIND_NONE;
        col->bad_step = 0;
    }
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return DECODE_PARSE;
        if (field == 2 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            int err = sequence ? parse_feature_list(ctx, p, stop, col, depth + 1)
                               : parse_feature(ctx, p, stop, col ? &col->which : &(int){0}, col,
                                               col ? col->rec_values : 0, depth + 1);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return DECODE_PARSE;
        }
    }
    return DECODE_OK;
}

/* The content of Features (sequence 0) or FeatureLists (1). */
static int parse_map(Ctx *ctx, const uint8_t *p, const uint8_t *end, int sequence, int depth) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return DECODE_PARSE;
        if (field == 1 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            int err = parse_entry(ctx, p, stop, sequence, depth + 1);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return DECODE_PARSE;
        }
    }
    return DECODE_OK;
}

/* An Example (sequence_example 0) or SequenceExample (1). */
static int parse_message(Ctx *ctx, const uint8_t *p, const uint8_t *end, int sequence_example) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return DECODE_PARSE;
        if ((field == 1 || (field == 2 && sequence_example)) && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return DECODE_PARSE;
            int err = parse_map(ctx, p, stop, field == 2, 2);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, 1)) {
            return DECODE_PARSE;
        }
    }
    return DECODE_OK;
}

/* After a record: checks each column against its mode, fills defaults, closes the row. */
static int finish_record(Ctx *ctx, int64_t record) {
    for (int i = 0; i < ctx->ncols; i++) {
        Column *c = &ctx->cols[i];
        size_t es = elem_size(c->kind);
        int err = DECODE_OK;
        /* A Feature with no list set (TFX writes one for an empty CSV cell) counts as missing,
         * as TensorFlow's parser has it: the default, or an error for a required feature. */
        if (!c->sequence && c->which == KIND_NONE) c->seen = 0;
        c->status[record] = (uint8_t)c->seen;
        if (c->sequence) {
            if (!c->seen && c->required) err = DECODE_MISSING;
            else if (c->bad_step) err = DECODE_TYPE;
            else if (c->mode == MODE_FIXED) {
                const int64_t *ends = (const int64_t *)(c->steps.data);
                int64_t previous = (int64_t)(c->rec_values / es);
                for (size_t s = c->rec_steps / 8; s < c->steps.len / 8; s++) {
                    if (ends[s] - previous != c->numel) {
                        err = DECODE_COUNT;
                        break;
                    }
                    previous = ends[s];
                }
            }
            c->rows[record + 1] = (int64_t)(c->steps.len / 8);
        } else {
            if (c->seen && c->which != KIND_NONE && c->which != c->kind) err = DECODE_TYPE;
            int64_t count = (int64_t)((c->values.len - c->rec_values) / es);
            if (!err) {
                if (!c->seen) {
                    if (c->mode == MODE_FIXED && c->def) {
                        size_t n = (size_t)c->def_count * es;
                        if (!buf_reserve(&c->values, n)) return DECODE_MEMORY;
                        memcpy(c->values.data + c->values.len, c->def, n);
                        c->values.len += n;
                    } else if (c->mode == MODE_FIXED || c->mode == MODE_ONE || c->required) {
                        err = DECODE_MISSING;
                    }
                } else if (c->mode == MODE_FIXED || c->mode == MODE_ONE) {
                    if (count != (c->mode == MODE_ONE ? 1 : c->numel)) err = DECODE_COUNT;
                } else if (c->mode == MODE_MULT) {
                    if (c->numel ? count % c->numel : count) err = DECODE_COUNT;
                }
            }
            c->rows[record + 1] = (int64_t)(c->values.len / es);
        }
        if (err) {
            ctx->err_col = i;
            return err;
        }
        c->rec_values = c->values.len;
        c->rec_steps = c->steps.len;
        c->seen = 0;
        c->which = KIND_NONE;
        c->bad_step = 0;
    }
    return DECODE_OK;
}

/* Frames (when `framed`) and parses every record; returns the index of the failing one in
 * *failed, with ctx->err set. */
static void parse_all(Ctx *ctx, const uint8_t *buffer, size_t size, const int64_t *starts, const int64_t *lengths,
                      int64_t n, int framed, int verify_crc, int sequence_example, int64_t *failed) {
    for (int64_t r = 0; r < n; r++) {
        int64_t start = starts[r], length = lengths[r];
        int err = DECODE_OK;
        if (start < 0 || length < 0 || (uint64_t)start > size || (uint64_t)length > size - (uint64_t)start) {
            err = DECODE_FRAME;
        } else {
            const uint8_t *p = buffer + start, *end = p + length;
            if (framed) {
                if (length < 16 || load_u64(p) != (uint64_t)(length - 16)) {
                    err = DECODE_FRAME;
                } else if (verify_crc &&
                           (masked_crc(p, 8) != load_u32(p + 8) || masked_crc(p + 12, (size_t)length - 16) != load_u32(end - 4))) {
                    err = DECODE_CRC;
                }
                p += 12;
                end -= 4;
            }
            if (!err) err = parse_message(ctx, p, end, sequence_example);
            if (!err) err = finish_record(ctx, r);
            else ctx->err_col = -1;
        }
        if (err) {
            ctx->err = err;
            *failed = r;
            return;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Python entry points: decoding a batch of records into columns */

static void free_columns(Column *cols, int n) {
    if (!cols) return;
    for (int i = 0; i < n; i++) {
        free(cols[i].values.data);
        free(cols[i].steps.data);
        free(cols[i].rows);
        free(cols[i].status);
    }
    free(cols);
}

/* columns: sequence of (key: bytes, kind, mode, numel, required, sequence, default: bytes|None);
 * the tuple and its bytes objects outlive the parse (the caller holds them). input: the bytes
 * of the records, which bound what a column without a default can hold. */
static Column *make_columns(PyObject *spec, int64_t n, size_t input, int *ncols) {
    PyObject *seq = PySequence_Fast(spec, "columns must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    Column *cols = calloc(count ? (size_t)count : 1, sizeof(Column));
    if (!cols) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Column *c = &cols[i];
        PyObject *key, *def;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "SiiLiiO", &key, &c->kind, &c->mode, &c->numel,
                              &c->required, &c->sequence, &def))
            goto fail;
        c->key = PyBytes_AS_STRING(key);
        c->key_len = PyBytes_GET_SIZE(key);
        if (c->kind < KIND_BYTES || c->kind > KIND_INT64 || c->mode < MODE_VAR || c->mode > MODE_ONE || c->numel < 0) {
            PyErr_Format(PyExc_ValueError, "column %zd: bad kind / mode / numel", i);
            goto fail;
        }
        if (def != Py_None) {
            if (!PyBytes_Check(def) || (size_t)PyBytes_GET_SIZE(def) != (size_t)c->numel * elem_size(c->kind)) {
                PyErr_Format(PyExc_ValueError, "column %zd: default must be numel values of the column's kind", i);
                goto fail;
            }
            c->def = PyBytes_AS_STRING(def);
            c->def_count = c->numel;
        }
        if (!c->sequence && (c->mode == MODE_FIXED || c->mode == MODE_ONE)) {
            /* the exact size when every record is well formed: no growth on the hot path. Not
             * sized from the spec alone: without a default, each value takes at least one byte
             * of the input (a bytes value two: its span is 16 bytes), so a spec's huge shape
             * reserves no more than the input can fill (the parse then fails on the first record). */
            size_t per = (size_t)(c->mode == MODE_ONE ? 1 : c->numel) * elem_size(c->kind);
            if (per && (size_t)n > SIZE_MAX / per) {
                PyErr_NoMemory();
                goto fail;
            }
            size_t reserve = per * (size_t)n;
            if (!c->def && input <= SIZE_MAX / 16 && reserve > 8 * input) reserve = 8 * input;
            if (per && !buf_reserve(&c->values, reserve)) {
                PyErr_NoMemory();
                goto fail;
            }
        }
        c->rows = calloc((size_t)n + 1, sizeof(int64_t));
        c->status = calloc((size_t)n + 1, 1);
        if (!c->rows || !c->status) {
            PyErr_NoMemory();
            goto fail;
        }
    }
    Py_DECREF(seq);
    *ncols = (int)count;
    return cols;
fail:
    Py_DECREF(seq);
    free_columns(cols, (int)count);
    return NULL;
}

static PyObject *column_result(Column *c, int64_t n) {
    Buf rows = {(char *)c->rows, (size_t)(n + 1) * 8, (size_t)(n + 1) * 8};
    c->rows = NULL;
    PyObject *status = PyBytes_FromStringAndSize((const char *)c->status, (Py_ssize_t)n);
    PyObject *rows_obj = nb_from_buf(&rows);
    PyObject *values = nb_from_buf(&c->values);
    PyObject *steps = c->sequence ? nb_from_buf(&c->steps) : (Py_INCREF(Py_None), Py_None);
    if (!status || !rows_obj || !values || !steps) {
        Py_XDECREF(status);
        Py_XDECREF(rows_obj);
        Py_XDECREF(values);
        Py_XDECREF(steps);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", status, rows_obj, values, steps);
}

static PyObject *py_decode(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffer", "starts", "lengths", "columns", "framed", "verify_crc", "sequence", NULL};
    PyObject *buffer_obj, *starts_obj, *lengths_obj, *columns;
    int framed = 0, verify_crc = 1, sequence = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|ppp:decode", keywords, &buffer_obj, &starts_obj,
                                     &lengths_obj, &columns, &framed, &verify_crc, &sequence))
        return NULL;
    Py_buffer buffer, starts, lengths;
    if (PyObject_GetBuffer(buffer_obj, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    if (!get_int64_array(starts_obj, &starts, "starts")) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    if (!get_int64_array(lengths_obj, &lengths, "lengths")) {
        PyBuffer_Release(&buffer);
        PyBuffer_Release(&starts);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t n = (int64_t)(starts.len / 8);
    int ncols = 0;
    Column *cols = NULL;
    if (lengths.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths differ in length");
        goto done;
    }
    cols = make_columns(columns, n, (size_t)buffer.len, &ncols);
    if (!cols) goto done;
    Ctx ctx = {(const uint8_t *)buffer.buf, cols, ncols, DECODE_OK, -1};
    int64_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    parse_all(&ctx, (const uint8_t *)buffer.buf, (size_t)buffer.len, (const int64_t *)starts.buf,
              (const int64_t *)lengths.buf, n, framed, verify_crc, sequence, &failed);
    Py_END_ALLOW_THREADS
    if (ctx.err == DECODE_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    if (ctx.err) {
        result = Py_BuildValue("(iLi)", ctx.err, (long long)failed, ctx.err_col);
        goto done;
    }
    result = PyList_New(ncols);
    if (!result) goto done;
    for (int i = 0; i < ncols; i++) {
        PyObject *column = column_result(&cols[i], n);
        if (!column) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, column);
    }
done:
    free_columns(cols, ncols);
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    return result;
}

/* bytes_rows(buffer, spans, rows, scalar): per row a list of bytes (or, with scalar, the row's
 * only value), cut from buffer at the (start, length) spans. The bytes objects are made empty
 * with the GIL and filled after it is released where there is much to copy (a batch of 4 KB
 * values is a megabyte: copied while holding the GIL, it kept the dataset's other loading
 * threads waiting); nothing else sees them before this returns. */
#define BYTES_ROWS_UNLOCKED (64 * 1024) /* bytes to copy from which the copy leaves the GIL */

static PyObject *py_bytes_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffer_obj, *spans_obj, *rows_obj;
    int scalar;
    if (!PyArg_ParseTuple(args, "OOOp:bytes_rows", &buffer_obj, &spans_obj, &rows_obj, &scalar)) return NULL;
    Py_buffer buffer, spans, rows;
    if (PyObject_GetBuffer(buffer_obj, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(spans_obj, &spans, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    if (PyObject_GetBuffer(rows_obj, &rows, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buffer);
        PyBuffer_Release(&spans);
        return NULL;
    }
    PyObject *out = NULL;
    char **targets = NULL; /* value k's bytes object's memory, filled at the end */
    const int64_t *span = (const int64_t *)spans.buf, *row = (const int64_t *)rows.buf;
    Py_ssize_t nrows = rows.len / 8 - 1, nspans = spans.len / 16;
    if (nrows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows must hold at least one offset");
        goto done;
    }
    targets = calloc((size_t)nspans + 1, sizeof(char *));
    if (!targets) {
        PyErr_NoMemory();
        goto done;
    }
    size_t total = 0;
    out = PyList_New(nrows);
    if (!out) goto done;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        int64_t a = row[r], b = row[r + 1];
        if (a < 0 || b < a || b > nspans || (scalar && b - a != 1)) {
            PyErr_SetString(PyExc_ValueError, "rows do not fit the spans");
            goto fail;
        }
        PyObject *item;
        if (scalar) {
            item = NULL;
        } else {
            item = PyList_New((Py_ssize_t)(b - a));
            if (!item) goto fail;
        }
        for (int64_t k = a; k < b; k++) {
            int64_t start = span[2 * k], len = span[2 * k + 1];
            if (start < 0 || len < 0 || start > buffer.len || len > buffer.len - start) {
                PyErr_SetString(PyExc_ValueError, "a span lies outside the buffer");
                Py_XDECREF(item);
                goto fail;
            }
            PyObject *value = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
            if (!value) {
                Py_XDECREF(item);
                goto fail;
            }
            targets[k] = len ? PyBytes_AS_STRING(value) : NULL; /* (length 0: the shared empty bytes) */
            total += (size_t)len;
            if (scalar)
                item = value;
            else
                PyList_SET_ITEM(item, (Py_ssize_t)(k - a), value);
        }
        PyList_SET_ITEM(out, r, item);
    }
    /* Every span was checked above; a span named by no row has no target. */
    if (total >= BYTES_ROWS_UNLOCKED) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < nspans; k++)
            if (targets[k]) memcpy(targets[k], (const char *)buffer.buf + span[2 * k], (size_t)span[2 * k + 1]);
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t k = 0; k < nspans; k++)
            if (targets[k]) memcpy(targets[k], (const char *)buffer.buf + span[2 * k], (size_t)span[2 * k + 1]);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    free(targets);
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&spans);
    PyBuffer_Release(&rows);
    return out;
}

/* bytes_pack(buffer, spans): the values cut from buffer at the (start, length) spans, packed
 * end to end as Arrow lays out a binary column: (offsets, data), offsets int64 [nspans + 1]
 * (value k is data[offsets[k]:offsets[k + 1]]), both NativeBuffers; no Python object per value. */
static PyObject *py_bytes_pack(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffer_obj, *spans_obj;
    if (!PyArg_ParseTuple(args, "OO:bytes_pack", &buffer_obj, &spans_obj)) return NULL;
    Py_buffer buffer, spans;
    if (PyObject_GetBuffer(buffer_obj, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(spans_obj, &spans, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    PyObject *out = NULL, *offsets_obj = NULL, *data_obj = NULL;
    Buf offsets = {0}, data = {0};
    const int64_t *span = (const int64_t *)spans.buf;
    Py_ssize_t nspans = spans.len / 16;
    size_t total = 0;
    for (Py_ssize_t k = 0; k < nspans; k++) {
        int64_t start = span[2 * k], len = span[2 * k + 1];
        if (start < 0 || len < 0 || start > buffer.len || len > buffer.len - start) {
            PyErr_SetString(PyExc_ValueError, "a span lies outside the buffer");
            goto done;
        }
        total += (size_t)len;
    }
    if (!buf_reserve(&offsets, (size_t)(nspans + 1) * 8) || !buf_reserve(&data, total)) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *offset = (int64_t *)offsets.data;
    offset[0] = 0;
    for (Py_ssize_t k = 0; k < nspans; k++) {
        int64_t len = span[2 * k + 1];
        if (len) memcpy(data.data + data.len, (const char *)buffer.buf + span[2 * k], (size_t)len);
        data.len += (size_t)len;
        offset[k + 1] = (int64_t)data.len;
    }
    offsets.len = (size_t)(nspans + 1) * 8;
    offsets_obj = nb_from_buf(&offsets);
    data_obj = offsets_obj ? nb_from_buf(&data) : NULL;
    if (data_obj) out = PyTuple_Pack(2, offsets_obj, data_obj);
done:
    Py_XDECREF(offsets_obj);
    Py_XDECREF(data_obj);
    free(offsets.data);
    free(data.data);
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&spans);
    return out;
}

static PyMethodDef wire_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))py_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(buffer, starts, lengths, columns, framed=False, verify_crc=True, sequence=False)\n"
     "-> list of (status, rows, values, steps) per column, or (error, record, column)."},
    {"bytes_rows", py_bytes_rows, METH_VARARGS, "bytes_rows(buffer, spans, rows, scalar) -> list"},
    {"bytes_pack", py_bytes_pack, METH_VARARGS, "bytes_pack(buffer, spans) -> (offsets, data)"},
    {NULL, NULL, 0, NULL},
};

static const NativeConstant wire_constants[] = {
    {"KIND_BYTES", KIND_BYTES},
    {"KIND_FLOAT", KIND_FLOAT},
    {"KIND_INT64", KIND_INT64},
    {"MODE_VAR", MODE_VAR},
    {"MODE_FIXED", MODE_FIXED},
    {"MODE_MULT", MODE_MULT},
    {"MODE_ONE", MODE_ONE},
    {"DECODE_OK", DECODE_OK},
    {"DECODE_MEMORY", DECODE_MEMORY},
    {"DECODE_PARSE", DECODE_PARSE},
    {"DECODE_TYPE", DECODE_TYPE},
    {"DECODE_COUNT", DECODE_COUNT},
    {"DECODE_MISSING", DECODE_MISSING},
    {"DECODE_FRAME", DECODE_FRAME},
    {"DECODE_CRC", DECODE_CRC},
    {NULL, 0},
};

int wire_init(PyObject *module) {
    if (PyModule_AddFunctions(module, wire_methods) < 0) return -1;
    return add_constants(module, wire_constants);
}
