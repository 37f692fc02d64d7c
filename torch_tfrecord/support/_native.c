/*
 * torch_tfrecord.support._native: the compiled decoder, and the plain record reader's inner loop.
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
 * One file, in sections (each under a banner): CRC32C; growable memory; columns; the wire
 * format; Example messages; the Python entry points for decoding; batch reads of file regions
 * (pread or a copy from a mapping, guarded against SIGBUS); the offset index's text; the
 * shuffles' Feistel permutation; the plain reader's framing loop. Their Python callers:
 * codec/native.py (decoding), records/gather.py and records/compressed/shard.py (batch reads),
 * records/index.py (the index text), data/permutation.py (the permutation), records/scan.py
 * (the framing loop).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* CRC32C (Castagnoli): SSE4.2 instruction where the CPU has it, slicing-by-8 tables otherwise */

static uint32_t crc_table[8][256];

static void crc_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_update_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc; /* little-endian hosts only: checked at module init */
        crc = crc_table[7][word & 0xFF] ^ crc_table[6][(word >> 8) & 0xFF] ^
              crc_table[5][(word >> 16) & 0xFF] ^ crc_table[4][(word >> 24) & 0xFF] ^
              crc_table[3][(word >> 32) & 0xFF] ^ crc_table[2][(word >> 40) & 0xFF] ^
              crc_table[1][(word >> 48) & 0xFF] ^ crc_table[0][word >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW_CRC 1
/* Three streams at once: the instruction's latency is three times its throughput. Each
 * stream's register is carried past the zeros that the later streams' bytes stand for by
 * GF(2) operators made at init (Mark Adler's method for CRC-32C, crc32c.c, zlib licence). */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_long[4][256], crc_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends `len` (a power of two) zero bytes to a raw CRC-32C register. */
static void crc_zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32], row = 1;
    odd[0] = 0x82F63B78u; /* one zero bit */
    for (int n = 1; n < 32; n++, row <<= 1) odd[n] = row;
    gf2_square(even, odd); /* two bits */
    gf2_square(odd, even); /* four bits */
    do {
        gf2_square(even, odd); /* one byte first, then doubling */
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof(odd));
}

static void crc_zeros(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    crc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++) zeros[k][n] = gf2_times(op, n << (8 * k));
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint64_t crc_streams(uint64_t c0, const uint8_t **pp, size_t *n, size_t block,
                                                              uint32_t zeros[4][256]) {
    const uint8_t *p = *pp;
    while (*n >= 3 * block) {
        uint64_t c1 = 0, c2 = 0;
        for (const uint8_t *end = p + block; p < end; p += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + block, 8);
            memcpy(&w2, p + 2 * block, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c0 = crc_shift(zeros, (uint32_t)c0) ^ c1;
        c0 = crc_shift(zeros, (uint32_t)c0) ^ c2;
        p += 2 * block;
        *n -= 3 * block;
    }
    *pp = p;
    return c0;
}

__attribute__((target("sse4.2"))) static uint32_t crc_update_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    c = crc_streams(c, &p, &n, CRC_LONG, crc_long);
    c = crc_streams(c, &p, &n, CRC_SHORT, crc_short);
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

static int use_hw_crc = 0;

static uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t crc;
#ifdef HAVE_HW_CRC
    if (use_hw_crc)
        crc = ~crc_update_hw(0xFFFFFFFFu, p, n);
    else
#endif
        crc = ~crc_update_sw(0xFFFFFFFFu, p, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* ------------------------------------------------------------------------------------------ */
/* Growable memory, and the Python object that owns it once parsing is done */

typedef struct {
    char *data;
    size_t len; /* bytes used */
    size_t cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return 1;
    size_t want = b->cap ? b->cap : 256;
    while (want - b->len < extra) {
        if (want > SIZE_MAX / 2) return 0;
        want *= 2;
    }
    char *data = realloc(b->data, want);
    if (!data) return 0;
    b->data = data;
    b->cap = want;
    return 1;
}

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    Py_ssize_t exports;
} NativeBuffer;

static int nb_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    NativeBuffer *nb = (NativeBuffer *)self;
    if (PyBuffer_FillInfo(view, self, nb->data, nb->len, 0, flags) < 0) return -1;
    nb->exports++;
    return 0;
}

static void nb_releasebuffer(PyObject *self, Py_buffer *view) {
    (void)view;
    ((NativeBuffer *)self)->exports--;
}

static void nb_dealloc(PyObject *self) {
    free(((NativeBuffer *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *nb_len_get(PyObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(((NativeBuffer *)self)->len);
}

static PyBufferProcs nb_as_buffer = {nb_getbuffer, nb_releasebuffer};
static PyGetSetDef nb_getset[] = {{"nbytes", nb_len_get, NULL, "size in bytes", NULL}, {NULL}};

static PyTypeObject NativeBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torch_tfrecord.support._native.NativeBuffer",
    .tp_basicsize = sizeof(NativeBuffer),
    .tp_dealloc = nb_dealloc,
    .tp_as_buffer = &nb_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory filled by the native decoder; expose it with numpy.frombuffer.",
    .tp_getset = nb_getset,
};

/* Takes ownership of b's memory (even on failure). */
static PyObject *nb_from_buf(Buf *b) {
    NativeBuffer *nb = PyObject_New(NativeBuffer, &NativeBufferType);
    if (!nb) {
        free(b->data);
        b->data = NULL;
        return NULL;
    }
    if (!b->data) b->data = malloc(1); /* a valid pointer for empty buffers */
    nb->data = b->data;
    nb->len = (Py_ssize_t)b->len;
    nb->exports = 0;
    b->data = NULL;
    b->len = b->cap = 0;
    if (!nb->data) {
        Py_DECREF(nb);
        return PyErr_NoMemory();
    }
    return (PyObject *)nb;
}

/* ------------------------------------------------------------------------------------------ */
/* Columns: what the spec asks for, and what the parse fills */

enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };

enum {
    MODE_VAR = 0,   /* any number of values; missing = none */
    MODE_FIXED = 1, /* exactly numel values; missing = default, or an error without one */
    MODE_MULT = 2,  /* a multiple of numel values; missing = none, or an error if required */
    MODE_ONE = 3,   /* exactly one value; missing is an error */
};

enum {
    ERR_NONE = 0,
    ERR_MEMORY = 1,
    ERR_PARSE = 2,   /* not a valid serialized message */
    ERR_TYPE = 3,    /* a feature holds another kind of list */
    ERR_COUNT = 4,   /* a feature holds the wrong number of values */
    ERR_MISSING = 5, /* a required feature is missing */
    ERR_FRAME = 6,   /* framing: bounds, or length field disagrees with the entry */
    ERR_CRC = 7,     /* framing: a CRC does not match */
};

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
        if (!read_tag(&p, end, &field, &wire)) return ERR_PARSE;
        if (field == 1 && kind == KIND_INT64 && (wire == 0 || wire == 2)) {
            const uint8_t *stop = end;
            int single = wire == 0;
            if (!single && !read_len(&p, end, &stop)) return ERR_PARSE;
            while (single || p < stop) {
                uint64_t v;
                if (!read_varint(&p, stop, &v)) return ERR_PARSE;
                if (out) {
                    if (!buf_reserve(out, 8)) return ERR_MEMORY;
                    memcpy(out->data + out->len, &v, 8);
                    out->len += 8;
                }
                if (single) break;
            }
        } else if (field == 1 && kind == KIND_FLOAT && wire == 5) {
            if (end - p < 4) return ERR_PARSE;
            if (out) {
                if (!buf_reserve(out, 4)) return ERR_MEMORY;
                memcpy(out->data + out->len, p, 4);
                out->len += 4;
            }
            p += 4;
        } else if (field == 1 && kind == KIND_FLOAT && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
            size_t n = (size_t)(stop - p);
            if (n % 4) return ERR_PARSE;
            if (out && n) {
                if (!buf_reserve(out, n)) return ERR_MEMORY;
                memcpy(out->data + out->len, p, n);
                out->len += n;
            }
            p = stop;
        } else if (field == 1 && kind == KIND_BYTES && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
            if (out) {
                int64_t span[2] = {(int64_t)(p - ctx->base), (int64_t)(stop - p)};
                if (!buf_reserve(out, 16)) return ERR_MEMORY;
                memcpy(out->data + out->len, span, 16);
                out->len += 16;
            }
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return ERR_PARSE;
        }
    }
    return ERR_NONE;
}

/* The content of a Feature. `*which` is the oneof member set so far (merging continues it);
 * values of `col->kind` go to `col->values`, which is cut back to `reset` (bytes) whenever
 * the oneof switches member. */
static int parse_feature(Ctx *ctx, const uint8_t *p, const uint8_t *end, int *which, Column *col, size_t reset,
                         int depth) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return ERR_PARSE;
        if (field >= 1 && field <= 3 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
            if ((int)field != *which) {
                *which = (int)field;
                if (col) col->values.len = reset;
            }
            int err = parse_list(ctx, p, stop, (int)field, col && col->kind == (int)field ? &col->values : NULL,
                                 depth + 1);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return ERR_PARSE;
        }
    }
    return ERR_NONE;
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
        if (!read_tag(&p, end, &field, &wire)) return ERR_PARSE;
        if (field == 1 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
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
                if (!start_steps(col)) return ERR_MEMORY;
                int64_t value_end = (int64_t)(col->values.len / elem_size(col->kind));
                memcpy(col->steps.data + col->steps.len, &value_end, 8);
                col->steps.len += 8;
            }
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return ERR_PARSE;
        }
    }
    return ERR_NONE;
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
        if (!read_tag(&q, end, &field, &wire)) return ERR_PARSE;
        if (field == 1 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&q, end, &stop) || !valid_utf8(q, stop)) return ERR_PARSE;
            key = q;
            key_end = stop;
            q = stop;
        } else {
            unknown |= !(field == 2 && wire == 2);
            if (!skip_field(&q, end, field, wire, depth)) return ERR_PARSE;
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
        if (!read_tag(&p, end, &field, &wire)) return ERR_PARSE;
        if (field == 2 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
            int err = sequence ? parse_feature_list(ctx, p, stop, col, depth + 1)
                               : parse_feature(ctx, p, stop, col ? &col->which : &(int){0}, col,
                                               col ? col->rec_values : 0, depth + 1);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return ERR_PARSE;
        }
    }
    return ERR_NONE;
}

/* The content of Features (sequence 0) or FeatureLists (1). */
static int parse_map(Ctx *ctx, const uint8_t *p, const uint8_t *end, int sequence, int depth) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return ERR_PARSE;
        if (field == 1 && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
            int err = parse_entry(ctx, p, stop, sequence, depth + 1);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, depth)) {
            return ERR_PARSE;
        }
    }
    return ERR_NONE;
}

/* An Example (sequence_example 0) or SequenceExample (1). */
static int parse_message(Ctx *ctx, const uint8_t *p, const uint8_t *end, int sequence_example) {
    while (p < end) {
        uint32_t field;
        int wire;
        if (!read_tag(&p, end, &field, &wire)) return ERR_PARSE;
        if ((field == 1 || (field == 2 && sequence_example)) && wire == 2) {
            const uint8_t *stop;
            if (!read_len(&p, end, &stop)) return ERR_PARSE;
            int err = parse_map(ctx, p, stop, field == 2, 2);
            if (err) return err;
            p = stop;
        } else if (!skip_field(&p, end, field, wire, 1)) {
            return ERR_PARSE;
        }
    }
    return ERR_NONE;
}

/* After a record: checks each column against its mode, fills defaults, closes the row. */
static int finish_record(Ctx *ctx, int64_t record) {
    for (int i = 0; i < ctx->ncols; i++) {
        Column *c = &ctx->cols[i];
        size_t es = elem_size(c->kind);
        int err = ERR_NONE;
        /* A Feature with no list set (TFX writes one for an empty CSV cell) counts as missing,
         * as TensorFlow's parser has it: the default, or an error for a required feature. */
        if (!c->sequence && c->which == KIND_NONE) c->seen = 0;
        c->status[record] = (uint8_t)c->seen;
        if (c->sequence) {
            if (!c->seen && c->required) err = ERR_MISSING;
            else if (c->bad_step) err = ERR_TYPE;
            else if (c->mode == MODE_FIXED) {
                const int64_t *ends = (const int64_t *)(c->steps.data);
                int64_t previous = (int64_t)(c->rec_values / es);
                for (size_t s = c->rec_steps / 8; s < c->steps.len / 8; s++) {
                    if (ends[s] - previous != c->numel) {
                        err = ERR_COUNT;
                        break;
                    }
                    previous = ends[s];
                }
            }
            c->rows[record + 1] = (int64_t)(c->steps.len / 8);
        } else {
            if (c->seen && c->which != KIND_NONE && c->which != c->kind) err = ERR_TYPE;
            int64_t count = (int64_t)((c->values.len - c->rec_values) / es);
            if (!err) {
                if (!c->seen) {
                    if (c->mode == MODE_FIXED && c->def) {
                        size_t n = (size_t)c->def_count * es;
                        if (!buf_reserve(&c->values, n)) return ERR_MEMORY;
                        memcpy(c->values.data + c->values.len, c->def, n);
                        c->values.len += n;
                    } else if (c->mode == MODE_FIXED || c->mode == MODE_ONE || c->required) {
                        err = ERR_MISSING;
                    }
                } else if (c->mode == MODE_FIXED || c->mode == MODE_ONE) {
                    if (count != (c->mode == MODE_ONE ? 1 : c->numel)) err = ERR_COUNT;
                } else if (c->mode == MODE_MULT) {
                    if (c->numel ? count % c->numel : count) err = ERR_COUNT;
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
    return ERR_NONE;
}

/* Frames (when `framed`) and parses every record; returns the index of the failing one in
 * *failed, with ctx->err set. */
static void parse_all(Ctx *ctx, const uint8_t *buffer, size_t size, const int64_t *starts, const int64_t *lengths,
                      int64_t n, int framed, int verify_crc, int sequence_example, int64_t *failed) {
    for (int64_t r = 0; r < n; r++) {
        int64_t start = starts[r], length = lengths[r];
        int err = ERR_NONE;
        if (start < 0 || length < 0 || (uint64_t)start > size || (uint64_t)length > size - (uint64_t)start) {
            err = ERR_FRAME;
        } else {
            const uint8_t *p = buffer + start, *end = p + length;
            if (framed) {
                if (length < 16 || load_u64(p) != (uint64_t)(length - 16)) {
                    err = ERR_FRAME;
                } else if (verify_crc &&
                           (masked_crc(p, 8) != load_u32(p + 8) || masked_crc(p + 12, (size_t)length - 16) != load_u32(end - 4))) {
                    err = ERR_CRC;
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

static int get_int64_array(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return 0;
    if (view->itemsize != 8 || !view->format || (strcmp(view->format, "q") && strcmp(view->format, "l") &&
                                                  strcmp(view->format, "<q") && strcmp(view->format, "=q") &&
                                                  strcmp(view->format, "<l") && strcmp(view->format, "=l"))) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous int64 array", what);
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* Releases the views that were acquired (a view never acquired is all zeros: obj NULL). */
static void release_views(Py_buffer *const *views, size_t n) {
    for (size_t v = 0; v < n; v++)
        if (views[v]->obj) PyBuffer_Release(views[v]);
}

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
 * the tuple and its bytes objects outlive the parse (the caller holds them). */
static Column *make_columns(PyObject *spec, int64_t n, int *ncols) {
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
            /* the exact size when every record is well formed: no growth on the hot path */
            size_t per = (size_t)(c->mode == MODE_ONE ? 1 : c->numel) * elem_size(c->kind);
            if (per && (size_t)n > SIZE_MAX / per) {
                PyErr_NoMemory();
                goto fail;
            }
            if (per && !buf_reserve(&c->values, per * (size_t)n)) {
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
    cols = make_columns(columns, n, &ncols);
    if (!cols) goto done;
    Ctx ctx = {(const uint8_t *)buffer.buf, cols, ncols, ERR_NONE, -1};
    int64_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    parse_all(&ctx, (const uint8_t *)buffer.buf, (size_t)buffer.len, (const int64_t *)starts.buf,
              (const int64_t *)lengths.buf, n, framed, verify_crc, sequence, &failed);
    Py_END_ALLOW_THREADS
    if (ctx.err == ERR_MEMORY) {
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
 * only value), cut from buffer at the (start, length) spans. */
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
    const int64_t *span = (const int64_t *)spans.buf, *row = (const int64_t *)rows.buf;
    Py_ssize_t nrows = rows.len / 8 - 1, nspans = spans.len / 16;
    if (nrows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows must hold at least one offset");
        goto done;
    }
    out = PyList_New(nrows);
    if (!out) goto done;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        int64_t a = row[r], b = row[r + 1];
        if (a < 0 || b < a || b > nspans || (scalar && b - a != 1)) {
            PyErr_SetString(PyExc_ValueError, "rows do not fit the spans");
            Py_CLEAR(out);
            goto done;
        }
        PyObject *item;
        if (scalar) {
            item = NULL;
        } else {
            item = PyList_New((Py_ssize_t)(b - a));
            if (!item) {
                Py_CLEAR(out);
                goto done;
            }
        }
        for (int64_t k = a; k < b; k++) {
            int64_t start = span[2 * k], len = span[2 * k + 1];
            if (start < 0 || len < 0 || start > buffer.len || len > buffer.len - start) {
                PyErr_SetString(PyExc_ValueError, "a span lies outside the buffer");
                Py_XDECREF(item);
                Py_CLEAR(out);
                goto done;
            }
            PyObject *value = PyBytes_FromStringAndSize((const char *)buffer.buf + start, (Py_ssize_t)len);
            if (!value) {
                Py_XDECREF(item);
                Py_CLEAR(out);
                goto done;
            }
            if (scalar)
                item = value;
            else
                PyList_SET_ITEM(item, (Py_ssize_t)(k - a), value);
        }
        PyList_SET_ITEM(out, r, item);
    }
done:
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&spans);
    PyBuffer_Release(&rows);
    return out;
}

/* join_into(values, out, cuts) -> total: copies the bytes values of the list `values` into `out`
 * back to back, without the GIL, and writes into the int64 buffer `cuts` (3 n + 1 entries) each
 * value's (start, length) span then the rows 0..n (bytes_rows' arguments for cutting them out
 * again). -1 when an item is not exactly bytes, -2 when they do not fit in `out` or `cuts`. */
static PyObject *py_join_into(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values, *out_obj, *cuts_obj;
    if (!PyArg_ParseTuple(args, "O!OO:join_into", &PyList_Type, &values, &out_obj, &cuts_obj)) return NULL;
    Py_buffer out = {0}, cuts = {0};
    PyObject *result = NULL, **held = NULL;
    Py_ssize_t n = PyList_GET_SIZE(values), total = 0, taken = 0;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(cuts_obj, &cuts, PyBUF_WRITABLE) < 0) goto done;
    if (cuts.len / 8 < 3 * n + 1) {
        result = PyLong_FromLong(-2);
        goto done;
    }
    held = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    if (!held) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *span = (int64_t *)cuts.buf, *row = span + 2 * n;
    for (; taken < n; taken++) {
        PyObject *item = PyList_GET_ITEM(values, taken);
        if (!PyBytes_CheckExact(item)) break;
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        if (len > out.len - total) {
            result = PyLong_FromLong(-2);
            goto done;
        }
        Py_INCREF(item);  /* the list may change while the GIL is released below */
        held[taken] = item;
        span[2 * taken] = total;
        span[2 * taken + 1] = len;
        row[taken] = taken;
        total += len;
    }
    if (taken < n) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    row[n] = n;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        memcpy((char *)out.buf + span[2 * i], PyBytes_AS_STRING(held[i]), (size_t)span[2 * i + 1]);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(total);
done:
    for (Py_ssize_t i = 0; i < taken; i++) Py_DECREF(held[i]);
    PyMem_Free(held);
    PyBuffer_Release(&out);
    if (cuts.obj) PyBuffer_Release(&cuts);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* Batch reads: file regions into one buffer (read_into, copy_ranges, gather) */

/* read_into(fd, offsets, sizes, out, out_start): reads each (offset, size) region of the file
 * into `out` back to back from out_start, with one pread per run of regions that follow each
 * other in the file, without the GIL. Returns the number of regions read in full. */
static PyObject *py_read_into(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    PyObject *offsets_obj, *sizes_obj, *out_obj;
    Py_ssize_t out_start;
    if (!PyArg_ParseTuple(args, "iOOOn:read_into", &fd, &offsets_obj, &sizes_obj, &out_obj, &out_start)) return NULL;
    Py_buffer offsets, sizes, out;
    if (!get_int64_array(offsets_obj, &offsets, "offsets")) return NULL;
    if (!get_int64_array(sizes_obj, &sizes, "sizes")) {
        PyBuffer_Release(&offsets);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&offsets);
        PyBuffer_Release(&sizes);
        return NULL;
    }
    PyObject *result = NULL;
    const int64_t *off = (const int64_t *)offsets.buf, *sz = (const int64_t *)sizes.buf;
    Py_ssize_t n = offsets.len / 8;
    if (sizes.len != offsets.len || out_start < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets and sizes differ in length, or out_start < 0");
        goto done;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off[i] < 0 || sz[i] < 0 || sz[i] > INT64_MAX - total) {
            PyErr_SetString(PyExc_ValueError, "negative offset or size");
            goto done;
        }
        total += sz[i];
    }
    if (total > out.len - out_start) {
        PyErr_SetString(PyExc_ValueError, "out is too small for the regions");
        goto done;
    }
    Py_ssize_t complete = 0;
    int saved_errno = 0;
    Py_BEGIN_ALLOW_THREADS
    char *dst = (char *)out.buf + out_start;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i + 1;
        int64_t run = sz[i];
        while (j < n && off[j] == off[j - 1] + sz[j - 1]) run += sz[j++];
        int64_t got = 0;
        while (got < run) {
            ssize_t r = pread(fd, dst + got, (size_t)(run - got), (off_t)(off[i] + got));
            if (r < 0) {
                if (errno == EINTR) continue;
                saved_errno = errno;
                break;
            }
            if (r == 0) break;
            got += r;
        }
        if (got < run) { /* count the regions that did arrive whole */
            for (int64_t have = 0; i < j && have + sz[i] <= got; i++) have += sz[i];
            break;
        }
        dst += run;
        i = j;
    }
    complete = i;
    Py_END_ALLOW_THREADS
    if (saved_errno) {
        errno = saved_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t(complete);
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&out);
    return result;
}

/* copy_ranges(source, starts, sizes, out, targets): copies source[starts[i] : starts[i] + sizes[i]]
 * to out[targets[i] : targets[i] + sizes[i]] for each i, without the GIL (a compressed shard's
 * records out of an inflated segment). Every range must lie inside source and out. */
static PyObject *py_copy_ranges(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *source_obj, *starts_obj, *sizes_obj, *out_obj, *targets_obj;
    if (!PyArg_ParseTuple(args, "OOOOO:copy_ranges", &source_obj, &starts_obj, &sizes_obj, &out_obj, &targets_obj))
        return NULL;
    Py_buffer source = {0}, starts = {0}, sizes = {0}, targets = {0}, out = {0};
    PyObject *result = NULL;
    if (PyObject_GetBuffer(source_obj, &source, PyBUF_SIMPLE) < 0 || !get_int64_array(starts_obj, &starts, "starts") ||
        !get_int64_array(sizes_obj, &sizes, "sizes") || !get_int64_array(targets_obj, &targets, "targets") ||
        PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0)
        goto done;
    const int64_t *st = (const int64_t *)starts.buf, *sz = (const int64_t *)sizes.buf;
    const int64_t *tg = (const int64_t *)targets.buf;
    Py_ssize_t n = starts.len / 8;
    if (sizes.len != starts.len || targets.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts, sizes and targets differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || sz[i] < 0 || tg[i] < 0 || st[i] > (int64_t)source.len - sz[i] ||
            tg[i] > (int64_t)out.len - sz[i]) {
            PyErr_Format(PyExc_ValueError, "range %zd lies outside the source or the output", i);
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) memcpy((char *)out.buf + tg[i], (const char *)source.buf + st[i], (size_t)sz[i]);
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    release_views((Py_buffer *[]){&source, &starts, &sizes, &targets, &out}, 5);
    return result;
}

/* gather(ids, shard_starts, tables, fds, file_sizes, maps, out, starts_out, sizes_out, gap) -> (status, value):
 * the dataset's batch read in one call. Record ids count through the shards (shard s holds ids
 * shard_starts[s] .. shard_starts[s + 1] - 1, its (offset, framed_size) index table is tables[s],
 * its descriptor fds[s], -1 when not open here, and maps[s] a read-only mapping of the file
 * (an object with the buffer protocol) or None). Locates every record, reads them in id order
 * (which is file order) into `out` back to back, without the GIL, and writes record i's place
 * in `out` and framed size to starts_out[i] and sizes_out[i]. Status: 0 done (value: bytes
 * used), 1 shard `value` must be opened first, 2 `out` must hold `value` bytes, 3 a record lies
 * past its file's size (or its mapping's) or a read fails or comes short (the caller's
 * per-record path says which and why), 4 an id out of range.
 * A run of records is read with one pread (records at most `gap` bytes apart, the bytes between
 * included: a syscall costs about as much as copying several kilobytes). When the batch makes
 * more than MAPPED_MIN_RUNS such runs, or runs more than twice the size of its records (a
 * shuffled batch: its records lie apart), each record of a mapped file is copied from the
 * mapping instead, its runs shorter than MAPPED_RUN at least: a copy costs far less than a
 * syscall per record, or than reading the bytes between records. A file cut shorter while
 * mapped raises SIGBUS on the copy: a handler turns it into status 3 (see bus_guard). */
typedef struct {
    int64_t offset, size, shard, place;
    const char *map; /* the file's mapping, or NULL */
} Region;

#define MAPPED_RUN (64 * 1024)
#define MAPPED_MIN_RUNS 8

/* SIGBUS while copying from a mapping (the file was truncated, or an I/O error behind the
 * page): the copying thread jumps back to gather, which answers status 3. The handler is
 * installed (with the GIL held) when gather is about to copy from a mapping, and again whenever
 * another took its place (faulthandler.enable, signal.signal). Any other fault goes to the
 * handler installed before: restored, it meets the fault again as the faulting access repeats.
 * A SIGBUS sent by kill or raise gets the default action (the handler before may be one that
 * passes it back here: faulthandler enabled after this one). The jump slot is per thread, in
 * static TLS (initial-exec: reading it in the handler allocates nothing), and volatile (only
 * the handler reads it). */
static _Thread_local sigjmp_buf *volatile bus_jump __attribute__((tls_model("initial-exec"))) = NULL;
static struct sigaction bus_previous;

static void on_bus(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (info->si_code > 0) { /* a fault */
        sigjmp_buf *jump = bus_jump;
        if (jump) {
            bus_jump = NULL;
            siglongjmp(*jump, 1);
        }
        sigaction(SIGBUS, &bus_previous, NULL);
        return;
    }
    struct sigaction fallback;
    memset(&fallback, 0, sizeof(fallback));
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGBUS, &fallback, NULL);
    raise(sig);
}

static int bus_guard(void) {
    struct sigaction current;
    if (sigaction(SIGBUS, NULL, &current) < 0) return 0;
    if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_bus) return 1;
    struct sigaction mine;
    memset(&mine, 0, sizeof(mine));
    mine.sa_sigaction = on_bus;
    mine.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    return sigaction(SIGBUS, &mine, &bus_previous) == 0;
}

/* A record id and its place in the batch, sorted by id then place (ids repeat in padding). */
typedef struct {
    int64_t id, place;
} IdPlace;

static inline int id_place_less(IdPlace a, IdPlace b) {
    return a.id < b.id || (a.id == b.id && a.place < b.place);
}

/* Quicksort (median of three, the smaller side recursed) ending in insertion sort. */
static void sort_id_places(IdPlace *a, Py_ssize_t n) {
    while (n > 16) {
        Py_ssize_t mid = n / 2, last = n - 1;
        if (id_place_less(a[mid], a[0])) { IdPlace t = a[mid]; a[mid] = a[0]; a[0] = t; }
        if (id_place_less(a[last], a[0])) { IdPlace t = a[last]; a[last] = a[0]; a[0] = t; }
        if (id_place_less(a[last], a[mid])) { IdPlace t = a[last]; a[last] = a[mid]; a[mid] = t; }
        IdPlace pivot = a[mid];
        Py_ssize_t i = 0, j = last;
        for (;;) {
            while (id_place_less(a[i], pivot)) i++;
            while (id_place_less(pivot, a[j])) j--;
            if (i >= j) break;
            IdPlace t = a[i]; a[i] = a[j]; a[j] = t;
            i++;
            j--;
        }
        /* a[0..j] <= pivot <= a[j+1..n-1] */
        if (j + 1 < n - j - 1) {
            sort_id_places(a, j + 1);
            a += j + 1;
            n -= j + 1;
        } else {
            sort_id_places(a + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        IdPlace x = a[i];
        Py_ssize_t j = i;
        for (; j > 0 && id_place_less(x, a[j - 1]); j--) a[j] = a[j - 1];
        a[j] = x;
    }
}

/* Region b follows region a in the same file, at most `gap` bytes after a's end. */
static inline int near(const Region *a, const Region *b, int64_t gap) {
    int64_t end = a->offset + a->size;
    return a->shard == b->shard && b->offset >= end && b->offset - end <= gap;
}

/* Regions a and b are read as one run: near for a pread, right after it for a copy from the
 * mapping (which takes only the records). */
static inline int joins(const Region *a, const Region *b, int64_t gap) {
    return near(a, b, a->map ? 0 : gap);
}

/* Copies the located regions into `base` back to back, one pread or one copy from the mapping
 * per run; writes each record's place and size. Returns 1 when a read fails or comes short. */
static __attribute__((noinline)) int copy_regions(const Region *regions, Py_ssize_t n, const int64_t *fd,
                                                  char *base, int64_t *place, int64_t *size, int64_t gap,
                                                  const int64_t *dest) {
    if (dest) { /* every record from a mapping, each to its place in batch order */
        for (Py_ssize_t k = 0; k < n; k++) {
            int64_t at = dest[regions[k].place];
            memcpy(base + at, regions[k].map + regions[k].offset, (size_t)regions[k].size);
            place[regions[k].place] = at;
            size[regions[k].place] = regions[k].size;
        }
        return 0;
    }
    int64_t position = 0;
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i + 1;
        while (j < n && joins(&regions[j - 1], &regions[j], gap)) j++;
        int64_t run = regions[j - 1].offset + regions[j - 1].size - regions[i].offset;
        if (regions[i].map && run < MAPPED_RUN) {
            memcpy(base + position, regions[i].map + regions[i].offset, (size_t)run);
        } else {
            int64_t got = 0;
            while (got < run) {
                ssize_t r = pread((int)fd[regions[i].shard], base + position + got, (size_t)(run - got),
                                  (off_t)(regions[i].offset + got));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) break;
                got += r;
            }
            if (got < run) return 1;
        }
        for (int64_t first = regions[i].offset; i < j; i++) {
            place[regions[i].place] = position + regions[i].offset - first;
            size[regions[i].place] = regions[i].size;
        }
        position += run;
    }
    return 0;
}

/* copy_regions, with a SIGBUS on a mapped page (the file shrank, or its storage failed) turned
 * into a failed read. Runs without the GIL. */
static int copy_guarded(const Region *regions, Py_ssize_t n, const int64_t *fd, char *base, int64_t *place,
                        int64_t *size, int64_t gap, const int64_t *dest) {
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0)) return 1;
    bus_jump = &jump;
    int failed = copy_regions(regions, n, fd, base, place, size, gap, dest);
    bus_jump = NULL;
    return failed;
}

static PyObject *py_gather(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ids_obj, *starts_obj, *tables, *fds_obj, *sizes_obj, *maps, *out_obj, *starts_out_obj, *sizes_out_obj;
    long long gap;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOL:gather", &ids_obj, &starts_obj, &tables, &fds_obj, &sizes_obj, &maps,
                          &out_obj, &starts_out_obj, &sizes_out_obj, &gap))
        return NULL;
    Py_buffer ids = {0}, bounds = {0}, fds = {0}, file_sizes = {0}, out = {0}, starts_out = {0}, sizes_out = {0};
    Py_buffer table = {0};
    Py_buffer *mapped = NULL; /* the mappings of the shards this batch reads, held until the end */
    Py_ssize_t nmapped = 0;
    Region *regions = NULL;
    int64_t *dest = NULL; /* each record's place in `out` when all are copied from mappings */
    PyObject *result = NULL;
    int status = 0;
    int64_t value = 0;
    if (!get_int64_array(ids_obj, &ids, "ids") || !get_int64_array(starts_obj, &bounds, "shard_starts") ||
        !get_int64_array(fds_obj, &fds, "fds") || !get_int64_array(sizes_obj, &file_sizes, "file_sizes") ||
        !get_int64_array(starts_out_obj, &starts_out, "starts_out") ||
        !get_int64_array(sizes_out_obj, &sizes_out, "sizes_out"))
        goto done;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0) goto done;
    if (!PyList_Check(tables) || !PyList_Check(maps)) {
        PyErr_SetString(PyExc_TypeError, "tables and maps must be lists");
        goto done;
    }
    Py_ssize_t n = ids.len / 8, nshards = bounds.len / 8 - 1;
    if (nshards < 0 || PyList_GET_SIZE(tables) != nshards || PyList_GET_SIZE(maps) != nshards ||
        fds.len / 8 != nshards || file_sizes.len / 8 != nshards || starts_out.len / 8 < n || sizes_out.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "gather: the shard arrays or the outputs do not fit");
        goto done;
    }
    const int64_t *id = ids.buf, *bound = bounds.buf, *fd = fds.buf, *file_size = file_sizes.buf;
    regions = malloc((n ? (size_t)n : 1) * sizeof(Region));
    mapped = calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    if (!regions || !mapped) {
        PyErr_NoMemory();
        goto done;
    }
    int sorted = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (id[i] < 0 || id[i] >= bound[nshards]) {
            status = 4;
            goto answer;
        }
        regions[i].shard = id[i];
        regions[i].place = i;
        if (i && id[i] < id[i - 1]) sorted = 0;
    }
    if (!sorted) {
        /* (id, place) pairs sorted in place of qsort over the 40-byte regions through a
         * comparison callback, which took ~14 us of a shuffled batch of 256 */
        IdPlace *keys = malloc((size_t)n * sizeof(IdPlace));
        if (!keys) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) keys[i] = (IdPlace){id[i], i};
        sort_id_places(keys, n);
        for (Py_ssize_t i = 0; i < n; i++) {
            regions[i].shard = keys[i].id;
            regions[i].place = keys[i].place;
        }
        free(keys);
    }
    /* ids -> (shard, offset, size), in id order: the shard only moves forward */
    Py_ssize_t shard = -1;
    int64_t total = 0, limit = 0; /* total: the bytes of the preads' layout, more than copies take */
    int64_t needed = 0;           /* the records' own bytes */
    Py_ssize_t runs = 0;
    const char *map = NULL;
    int any_mapped = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t record = regions[k].shard;
        if (shard < 0 || record >= bound[shard + 1]) {
            Py_ssize_t lo = shard < 0 ? 0 : shard, hi = nshards - 1; /* last shard starting <= record */
            while (lo < hi) {
                Py_ssize_t mid = lo + (hi - lo + 1) / 2;
                if (bound[mid] <= record) lo = mid;
                else hi = mid - 1;
            }
            shard = lo;
            if (fd[shard] < 0) {
                status = 1;
                value = shard;
                goto answer;
            }
            if (table.obj) PyBuffer_Release(&table);
            if (!get_int64_array(PyList_GET_ITEM(tables, shard), &table, "tables[i]")) goto done;
            if (table.len / 16 != bound[shard + 1] - bound[shard]) {
                PyErr_SetString(PyExc_ValueError, "gather: an index table does not match its shard's count");
                goto done;
            }
            map = NULL;
            limit = file_size[shard];
            PyObject *mapping = PyList_GET_ITEM(maps, shard);
            if (mapping != Py_None) {
                if (PyObject_GetBuffer(mapping, &mapped[nmapped], PyBUF_SIMPLE) < 0) goto done;
                map = mapped[nmapped].buf;
                if (mapped[nmapped].len < limit) limit = mapped[nmapped].len;
                nmapped++;
                any_mapped = 1;
                /* A file cut shorter: its last page still maps, zeros past the end (no SIGBUS
                 * there), so the records past its size now are refused, as a pread would. */
                struct stat now;
                if (fstat((int)fd[shard], &now) == 0 && now.st_size < limit) limit = now.st_size;
            }
        }
        const int64_t *entry = (const int64_t *)table.buf + 2 * (record - bound[shard]);
        if (entry[0] < 0 || entry[1] < 0 || entry[1] > limit || entry[0] > limit - entry[1]) {
            status = 3;
            goto answer;
        }
        regions[k].offset = entry[0];
        regions[k].size = entry[1];
        regions[k].shard = shard;
        regions[k].map = map;
        total += entry[1];
        needed += entry[1];
        if (k && near(&regions[k - 1], &regions[k], gap)) total += entry[0] - regions[k - 1].offset - regions[k - 1].size;
        else runs++;
    }
    if (total > out.len) {
        status = 2;
        value = total;
        goto answer;
    }
    /* A few runs that hold little but records (file order): a pread each, as cheap, and no page
     * of the files mapped here. Many runs, or runs mostly of bytes between the records (a
     * shuffled batch): copies from the mappings. Without a SIGBUS handler: preads. */
    if (any_mapped && ((runs <= MAPPED_MIN_RUNS && total <= 2 * needed) || !bus_guard())) {
        for (Py_ssize_t k = 0; k < n; k++) regions[k].map = NULL;
        any_mapped = 0;
    }
    /* Every record copied from a mapping: laid out in batch order (the decoder then walks the
     * buffer front to back, ~1/4 faster on a shuffled batch than in file order's layout). */
    int all_mapped = any_mapped;
    for (Py_ssize_t k = 0; k < n && all_mapped; k++) all_mapped = regions[k].map != NULL;
    if (all_mapped) {
        dest = malloc((n ? (size_t)n : 1) * sizeof(int64_t));
        if (!dest) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < n; k++) dest[regions[k].place] = regions[k].size;
        int64_t at = 0;
        for (Py_ssize_t p = 0; p < n; p++) {
            int64_t record = dest[p];
            dest[p] = at;
            at += record;
        }
        total = at; /* needed <= the pread layout's total, which out holds */
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = copy_guarded(regions, n, fd, (char *)out.buf, starts_out.buf, sizes_out.buf, gap, dest);
    Py_END_ALLOW_THREADS
    status = failed ? 3 : 0;
    value = failed ? 0 : total;
answer:
    result = Py_BuildValue("(iL)", status, (long long)value);
done:
    free(regions);
    free(dest);
    for (Py_ssize_t m = 0; m < nmapped; m++) PyBuffer_Release(&mapped[m]);
    free(mapped);
    release_views((Py_buffer *[]){&ids, &bounds, &fds, &file_sizes, &out, &starts_out, &sizes_out, &table}, 8);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The offset index's text (parse_index) */

/* parse_index(data, out) -> rows: an index file's text in the canonical form, one
 * "<offset> <framed_size>\n" line per record (decimal digits, one space, the last newline
 * optional), into `out` (int64, two per row; the caller sizes it from the newlines). Returns
 * the number of rows, or -1 for anything else (the caller's strict parser names the line):
 * other whitespace, signs, an empty line, a number of more than 18 digits, more rows than
 * `out` holds. */
static PyObject *py_parse_index(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *out_obj;
    Py_buffer data, out;
    if (!PyArg_ParseTuple(args, "y*O:parse_index", &data, &out_obj)) return NULL;
    if (!get_int64_array(out_obj, &out, "out")) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (out.readonly) {
        release_views((Py_buffer *[]){&data, &out}, 2);
        PyErr_SetString(PyExc_ValueError, "parse_index: out must be writable");
        return NULL;
    }
    const Py_ssize_t room = out.len / 16;
    const unsigned char *p = data.buf, *end = p + data.len;
    int64_t *row = out.buf;
    Py_ssize_t rows = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        int64_t value[2];
        for (int k = 0; k < 2; k++) {
            const unsigned char *start = p;
            uint64_t v = 0; /* 19 digits at most: no overflow (they are refused below) */
            while (p < end && *p >= '0' && *p <= '9' && p - start < 19) v = v * 10 + (uint64_t)(*p++ - '0');
            if (p == start || p - start > 18) {
                rows = -1;
                goto parsed;
            }
            value[k] = (int64_t)v;
            if (k == 0) {
                if (p == end || *p != ' ') {
                    rows = -1;
                    goto parsed;
                }
                p++;
            }
        }
        if (p < end) {
            if (*p != '\n') {
                rows = -1;
                goto parsed;
            }
            p++;
        }
        if (rows == room) {
            rows = -1;
            goto parsed;
        }
        row[2 * rows] = value[0];
        row[2 * rows + 1] = value[1];
        rows++;
    }
parsed:;
    Py_END_ALLOW_THREADS
    release_views((Py_buffer *[]){&data, &out}, 2);
    return PyLong_FromSsize_t(rows);
}

/* ------------------------------------------------------------------------------------------ */
/* The shuffles' permutation (feistel) */

/* feistel(values, half_bits, round_keys, limit, windows) -> None: order.py's keyed permutation,
 * in place and bit for bit (order.py keeps the numpy original for a build without this file).
 * Each value v < 4**half_bits goes through a balanced Feistel network, one round per key, again
 * and again until it lies below `limit` (cycle walking). A round: (left, right) ->
 * (right, left ^ (mix(right ^ key) & mask)), mix being splitmix64's finaliser. `windows` is None
 * (every value uses round_keys) or one uint64 per value: value i then uses mix(windows[i] ^ key)
 * for each key (the block shuffle's key of each window). All arrays hold 64-bit words; they
 * are read as unsigned. */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

#define FEISTEL_MAX_ROUNDS 16

static inline uint64_t feistel_once(uint64_t v, int half_bits, const uint64_t *keys, int rounds) {
    const uint64_t mask = (1ULL << half_bits) - 1;
    uint64_t left = v >> half_bits, right = v & mask;
    for (int r = 0; r < rounds; r++) {
        uint64_t next = left ^ (mix64(right ^ keys[r]) & mask);
        left = right;
        right = next;
    }
    return (left << half_bits) | right;
}

/* The network once over every value, then again over those still at or past the limit, and so
 * on: loops without a data-dependent branch (a walk per value mispredicted its exit each time),
 * whose independent values the processor overlaps. `keys`: `rounds` keys, or with `own` set
 * `rounds` keys per value (value i's at own + i * rounds). */
static void feistel_all(uint64_t *value, Py_ssize_t n, int half_bits, const uint64_t *keys, int rounds,
                        uint64_t limit, int own, Py_ssize_t *pending) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        value[i] = feistel_once(value[i], half_bits, own ? keys + i * rounds : keys, rounds);
        pending[count] = i;
        count += value[i] >= limit;
    }
    while (count) {
        Py_ssize_t left = 0;
        for (Py_ssize_t j = 0; j < count; j++) {
            Py_ssize_t i = pending[j];
            value[i] = feistel_once(value[i], half_bits, own ? keys + i * rounds : keys, rounds);
            pending[left] = i;
            left += value[i] >= limit;
        }
        count = left;
    }
}

static PyObject *py_feistel(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj, *keys_obj, *windows_obj;
    int half_bits;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "OiOKO:feistel", &values_obj, &half_bits, &keys_obj, &limit, &windows_obj)) return NULL;
    Py_buffer values = {0}, keys = {0}, windows = {0};
    Py_ssize_t *pending = NULL;
    uint64_t *own = NULL;
    PyObject *result = NULL;
    if (!get_int64_array(values_obj, &values, "values") || !get_int64_array(keys_obj, &keys, "round_keys")) goto done;
    if (windows_obj != Py_None && !get_int64_array(windows_obj, &windows, "windows")) goto done;
    Py_ssize_t n = values.len / 8;
    int rounds = (int)(keys.len / 8);
    if (values.readonly || half_bits < 1 || half_bits > 31 || rounds < 1 || rounds > FEISTEL_MAX_ROUNDS ||
        limit == 0 || limit > (1ULL << (2 * half_bits)) || (windows.obj && windows.len / 8 != n)) {
        PyErr_SetString(PyExc_ValueError, "feistel: values must be writable, 1 <= half_bits <= 31, 1 to 16 keys, "
                                          "0 < limit <= 4**half_bits, one window per value");
        goto done;
    }
    uint64_t *value = values.buf;
    const uint64_t *base = keys.buf, *window = windows.obj ? windows.buf : NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (value[i] >= limit) { /* its cycle might never come below the limit */
            PyErr_SetString(PyExc_ValueError, "feistel: a value lies outside [0, limit)");
            goto done;
        }
    pending = malloc((n ? (size_t)n : 1) * sizeof(Py_ssize_t));
    own = window ? malloc((n ? (size_t)n : 1) * (size_t)rounds * sizeof(uint64_t)) : NULL;
    if (!pending || (window && !own)) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (window)
        for (Py_ssize_t i = 0; i < n; i++)
            for (int r = 0; r < rounds; r++) own[i * rounds + r] = mix64(window[i] ^ base[r]);
    feistel_all(value, n, half_bits, window ? own : base, rounds, limit, window != NULL, pending);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(pending);
    free(own);
    release_views((Py_buffer *[]){&values, &keys, &windows}, 3);
    return result;
}

/* ------------------------------------------------------------------------------------------ */
/* The plain record reader's inner loop (frame), and the CRC for Python */

/* frame(buffer, start, stop, verify_crc) -> (payloads, position): the plain record reader's
 * inner loop. Walks the framed records (u64 length | u32 crc | data | u32 crc) lying back to back
 * in buffer from `start` and returns the payload of each as a new bytes object (a copy: never a
 * view of a buffer the caller reuses). It stops before the first record that begins at or after
 * `stop`, whose frame does not fit in the buffer, or (verify_crc) whose length or data CRC does
 * not match, and returns where it stopped: the caller reads that record its careful way, which
 * reports damage with the file, byte offset and record number. The walk and the CRCs run
 * without the GIL; no allocation is sized from a length field (only from records present). */
static PyObject *py_frame(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start, stop;
    int verify;
    if (!PyArg_ParseTuple(args, "y*nnp:frame", &view, &start, &stop, &verify)) return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start lies outside the buffer");
        return NULL;
    }
    if (stop > view.len) stop = view.len;
    const uint8_t *data = (const uint8_t *)view.buf;
    size_t size = (size_t)view.len, position = (size_t)start;
    size_t limit = stop > start ? (size_t)stop : position;
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    while (position < limit && size - position >= 16) {
        uint64_t length = load_u64(data + position);
        if (length > size - position - 16) break; /* does not fit: the caller reads on */
        if (verify) {
            if (masked_crc(data + position, 8) != load_u32(data + position + 8)) break;
            if (masked_crc(data + position + 12, (size_t)length) != load_u32(data + position + 12 + length)) break;
        }
        position += (size_t)length + 16;
        count++;
    }
    Py_END_ALLOW_THREADS
    PyObject *payloads = PyList_New(count);
    if (!payloads) {
        PyBuffer_Release(&view);
        return NULL;
    }
    size_t at = (size_t)start;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint64_t length = load_u64(data + at);
        PyObject *payload = PyBytes_FromStringAndSize((const char *)data + at + 12, (Py_ssize_t)length);
        if (!payload) {
            Py_DECREF(payloads);
            PyBuffer_Release(&view);
            return NULL;
        }
        PyList_SET_ITEM(payloads, i, payload);
        at += (size_t)length + 16;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", payloads, (Py_ssize_t)position);
}

static PyObject *py_masked_crc32c(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = masked_crc((const uint8_t *)data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* ------------------------------------------------------------------------------------------ */
/* Packing token sequences into rows (pack_rows) */

/* data/packing_plan.py's loops, row for row the same as its numpy twin. lengths: m items x k
 * keys (row-major), none empty, each within its key's capacity but for concat. First-fit (best = 0) and
 * best-fit (best = 1) keep up to `window` open rows in the order they opened: an item goes into
 * the first open row where every key fits (best-fit: the fitting row with the most tokens, the
 * oldest of equals), else into a new row, the oldest open row closing first when `window` are
 * open; a row closes as soon as a key is full, and the open ones close in order at the end.
 * Rows are written in the order they close: offsets (rows + 1), items (pieces), starts / stops
 * (pieces x k: a whole item here). */
typedef struct {
    const int64_t *length, *capacity;
    int64_t *offsets, *items, *starts, *stops;
    int k;
    Py_ssize_t rows, pieces;
} Packing;

static void pack_piece(Packing *p, Py_ssize_t item, const int64_t *start, const int64_t *stop) {
    p->items[p->pieces] = item;
    memcpy(p->starts + p->pieces * p->k, start, (size_t)p->k * sizeof(int64_t));
    memcpy(p->stops + p->pieces * p->k, stop, (size_t)p->k * sizeof(int64_t));
    p->pieces++;
}

static void pack_row_end(Packing *p) { p->offsets[++p->rows] = p->pieces; }

static int pack_fit(Packing *p, Py_ssize_t m, int best, Py_ssize_t window) {
    const int k = p->k;
    int64_t *used = calloc((size_t)window * (size_t)k, sizeof(int64_t));
    int64_t *zero = calloc((size_t)k, sizeof(int64_t));
    Py_ssize_t *open = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *head = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *tail = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *spare = malloc((size_t)window * sizeof(Py_ssize_t));
    Py_ssize_t *next = malloc((size_t)(m ? m : 1) * sizeof(Py_ssize_t));
    int ok = used && zero && open && head && tail && spare && next;
    if (ok) {
        Py_ssize_t n_open = 0, n_spare = window;
        for (Py_ssize_t s = 0; s < window; s++) spare[s] = window - 1 - s;
#define PACK_CLOSE(at)                                                                      \
    do {                                                                                    \
        Py_ssize_t slot_ = open[(at)];                                                      \
        memmove(open + (at), open + (at) + 1, (size_t)(n_open - (at) - 1) * sizeof(Py_ssize_t)); \
        n_open--;                                                                           \
        for (Py_ssize_t i_ = head[slot_]; i_ >= 0; i_ = next[i_])                           \
            pack_piece(p, i_, zero, p->length + i_ * k);                                    \
        pack_row_end(p);                                                                    \
        memset(used + slot_ * k, 0, (size_t)k * sizeof(int64_t));                           \
        spare[n_spare++] = slot_;                                                           \
    } while (0)
        for (Py_ssize_t i = 0; i < m; i++) {
            const int64_t *need = p->length + i * k;
            Py_ssize_t placed = -1;
            int64_t top = -1;
            for (Py_ssize_t j = 0; j < n_open; j++) {
                const int64_t *u = used + open[j] * k;
                int fits = 1;
                for (int c = 0; c < k && fits; c++) fits = u[c] + need[c] <= p->capacity[c];
                if (!fits) continue;
                if (!best) {
                    placed = j;
                    break;
                }
                int64_t score = 0;
                for (int c = 0; c < k; c++) score += u[c];
                if (score > top) {
                    top = score;
                    placed = j;
                }
            }
            if (placed < 0) {
                if (n_open == window) PACK_CLOSE(0);
                Py_ssize_t slot = spare[--n_spare];
                head[slot] = -1;
                open[n_open] = slot;
                placed = n_open++;
            }
            Py_ssize_t slot = open[placed];
            int64_t *u = used + slot * k;
            int full = 0;
            for (int c = 0; c < k; c++) {
                u[c] += need[c];
                full |= u[c] >= p->capacity[c];
            }
            next[i] = -1;
            if (head[slot] < 0) head[slot] = i;
            else next[tail[slot]] = i;
            tail[slot] = i;
            if (full) PACK_CLOSE(placed);
        }
        while (n_open) PACK_CLOSE(0);
#undef PACK_CLOSE
    }
    free(used);
    free(zero);
    free(open);
    free(head);
    free(tail);
    free(spare);
    free(next);
    return ok;
}

/* Concatenate-and-cut: items fill one row after another; an item that does not fit the rest of
 * the row is cut, each key where that key's room ends, and goes on in the next row(s); a row
 * closes as soon as a key is full. */
static int pack_concat(Packing *p, Py_ssize_t m) {
    const int k = p->k;
    int64_t *used = calloc((size_t)k, sizeof(int64_t)), *start = malloc((size_t)k * sizeof(int64_t));
    int64_t *stop = malloc((size_t)k * sizeof(int64_t)), *rest = malloc((size_t)k * sizeof(int64_t));
    int ok = used && start && stop && rest;
    int open = 0;
    for (Py_ssize_t i = 0; ok && i < m; i++) {
        int left = 0;
        for (int c = 0; c < k; c++) {
            start[c] = 0;
            rest[c] = p->length[i * k + c];
        }
        do {
            int full = 0;
            left = 0;
            for (int c = 0; c < k; c++) {
                int64_t room = p->capacity[c] - used[c], take = rest[c] < room ? rest[c] : room;
                stop[c] = start[c] + take;
                used[c] += take;
                rest[c] -= take;
                full |= used[c] >= p->capacity[c];
                left |= rest[c] > 0;
            }
            pack_piece(p, i, start, stop);
            memcpy(start, stop, (size_t)k * sizeof(int64_t));
            open = 1;
            if (full) {
                pack_row_end(p);
                memset(used, 0, (size_t)k * sizeof(int64_t));
                open = 0;
            }
        } while (left);
    }
    if (ok && open) pack_row_end(p);
    free(used);
    free(start);
    free(stop);
    free(rest);
    return ok;
}

static PyObject *py_pack_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *length_obj, *capacity_obj, *offsets_obj, *items_obj, *starts_obj, *stops_obj;
    int method;
    Py_ssize_t window;
    if (!PyArg_ParseTuple(args, "OOinOOOO:pack_rows", &length_obj, &capacity_obj, &method, &window, &offsets_obj,
                          &items_obj, &starts_obj, &stops_obj))
        return NULL;
    Py_buffer length = {0}, capacity = {0}, offsets = {0}, items = {0}, starts = {0}, stops = {0};
    PyObject *result = NULL;
    if (!get_int64_array(length_obj, &length, "lengths") || !get_int64_array(capacity_obj, &capacity, "capacities") ||
        !get_int64_array(offsets_obj, &offsets, "offsets") || !get_int64_array(items_obj, &items, "items") ||
        !get_int64_array(starts_obj, &starts, "starts") || !get_int64_array(stops_obj, &stops, "stops"))
        goto done;
    Py_ssize_t k = capacity.len / 8, m = k ? length.len / 8 / k : 0;
    const int64_t *cap = capacity.buf, *len = length.buf;
    /* What the loops assume, checked: a full row per piece at worst, and room for every output. */
    int bad = k < 1 || k > 64 || length.len != m * k * 8 || method < 0 || method > 2 || window < 1 ||
              offsets.readonly || items.readonly || starts.readonly || stops.readonly;
    int64_t need_rows = 1, need_pieces = m;
    for (Py_ssize_t c = 0; !bad && c < k; c++) {
        int64_t total = 0;
        bad = cap[c] < 1;
        for (Py_ssize_t i = 0; !bad && i < m; i++) {
            bad = len[i * k + c] < 0 || (method != 2 && len[i * k + c] > cap[c]);
            total += bad ? 0 : len[i * k + c];
        }
        need_rows += total / (bad ? 1 : cap[c]);
    }
    if (method == 2) need_pieces += need_rows;
    else need_rows = m;
    if (bad || offsets.len / 8 < need_rows + 1 || items.len / 8 < need_pieces || starts.len / 8 < need_pieces * k ||
        stops.len / 8 < need_pieces * k) {
        PyErr_SetString(PyExc_ValueError, "pack_rows: lengths must be m x k in [0, capacity], capacities >= 1, "
                                          "method 0-2, window >= 1, and the outputs writable and large enough");
        goto done;
    }
    Packing p = {len, cap, offsets.buf, items.buf, starts.buf, stops.buf, (int)k, 0, 0};
    p.offsets[0] = 0;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = method == 2 ? pack_concat(&p, m) : pack_fit(&p, m, method, window);
    Py_END_ALLOW_THREADS
    if (!ok) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("nn", p.rows, p.pieces);
done:
    release_views((Py_buffer *[]){&length, &capacity, &offsets, &items, &starts, &stops}, 6);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))py_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(buffer, starts, lengths, columns, framed=False, verify_crc=True, sequence=False)\n"
     "-> list of (status, rows, values, steps) per column, or (error, record, column)."},
    {"bytes_rows", py_bytes_rows, METH_VARARGS, "bytes_rows(buffer, spans, rows, scalar) -> list"},
    {"join_into", py_join_into, METH_VARARGS,
     "join_into(values, out, cuts) -> total: bytes values into out, their spans and rows into cuts"},
    {"read_into", py_read_into, METH_VARARGS, "read_into(fd, offsets, sizes, out, out_start) -> regions read"},
    {"copy_ranges", py_copy_ranges, METH_VARARGS, "copy_ranges(source, starts, sizes, out, targets)"},
    {"gather", py_gather, METH_VARARGS,
     "gather(ids, shard_starts, tables, fds, file_sizes, maps, out, starts_out, sizes_out, gap) -> (status, value)"},
    {"frame", py_frame, METH_VARARGS,
     "frame(buffer, start, stop, verify_crc) -> (payloads, position): the intact framed records from start"},
    {"parse_index", py_parse_index, METH_VARARGS,
     "parse_index(data, out) -> rows: a canonical index text into out (int64 rows), or -1"},
    {"feistel", py_feistel, METH_VARARGS,
     "feistel(values, half_bits, round_keys, limit, windows) -> None: order.py's permutation, in place"},
    {"pack_rows", py_pack_rows, METH_VARARGS,
     "pack_rows(lengths, capacities, method, window, offsets, items, starts, stops) -> (rows, pieces)"},
    {"masked_crc32c", py_masked_crc32c, METH_O, "masked_crc32c(data) -> int (the TFRecord CRC)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_tfrecord.support._native",
                                    "The compiled TFRecord / Example decoder.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        PyErr_SetString(PyExc_ImportError, "torch_tfrecord.support._native supports little-endian hosts only");
        return NULL;
    }
    crc_init_tables();
#ifdef HAVE_HW_CRC
    __builtin_cpu_init();
    crc_zeros(crc_long, CRC_LONG);
    crc_zeros(crc_short, CRC_SHORT);
    use_hw_crc = __builtin_cpu_supports("sse4.2") && getenv("TORCH_TFRECORD_NO_HW_CRC") == NULL;
#endif
    if (PyType_Ready(&NativeBufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&NativeBufferType);
    if (PyModule_AddObject(m, "NativeBuffer", (PyObject *)&NativeBufferType) < 0) {
        Py_DECREF(&NativeBufferType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "HW_CRC", use_hw_crc);
    return m;
}
