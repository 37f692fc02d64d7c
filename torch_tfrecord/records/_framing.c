/*
 * CRC32C and the plain record reader's inner loop (records layer of torch_tfrecord.support._native).
 *
 * CRC32C (Castagnoli): the SSE4.2 instruction where an x86-64 CPU has it, slicing-by-8 tables
 * otherwise (every other CPU: aarch64, and x86-64 without SSE4.2). Its Python callers:
 * records/scan.py (frame), records/entries.py (unframe), records/framing.py (masked_crc32c);
 * codec/_wire.c checks the framed records it decodes with masked_crc.
 */
#include "_framing.h"

#include <stdlib.h>

#include "../support/_cpu.h"

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
/* "crc32" as well: newer clang (zig cc 0.17's) no longer takes it as part of sse4.2. */
#define CRC_TARGET __attribute__((target("sse4.2,crc32")))
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

CRC_TARGET static uint64_t crc_streams(uint64_t c0, const uint8_t **pp, size_t *n, size_t block,
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

CRC_TARGET static uint32_t crc_update_hw(uint32_t crc, const uint8_t *p, size_t n) {
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

uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t crc;
#ifdef HAVE_HW_CRC
    if (use_hw_crc)
        crc = ~crc_update_hw(0xFFFFFFFFu, p, n);
    else
#endif
        crc = ~crc_update_sw(0xFFFFFFFFu, p, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
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

/* unframe(buffer, starts, framed_sizes, verify_crc) -> (payloads, count): the payloads of the
 * framed records at buffer[starts[i] : starts[i] + framed_sizes[i]], in that order, as new bytes
 * objects, for the records an index read gathered into one buffer (records/gather.py). It stops
 * before the first record whose length field does not say its entry's framed size, or
 * (verify_crc) whose length or data CRC does not match, and returns how many it took: the caller
 * reads from there its careful way, which names the file, offset and record and says why. The
 * checks run without the GIL. Every region must lie inside the buffer (a ValueError otherwise). */
static PyObject *py_unframe(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffer_obj, *starts_obj, *sizes_obj;
    int verify;
    if (!PyArg_ParseTuple(args, "OOOp:unframe", &buffer_obj, &starts_obj, &sizes_obj, &verify)) return NULL;
    Py_buffer view = {0}, starts = {0}, sizes = {0};
    PyObject *payloads = NULL, *result = NULL;
    if (PyObject_GetBuffer(buffer_obj, &view, PyBUF_SIMPLE) < 0 || !get_int64_array(starts_obj, &starts, "starts") ||
        !get_int64_array(sizes_obj, &sizes, "framed_sizes"))
        goto done;
    const int64_t *start = starts.buf, *framed = sizes.buf;
    Py_ssize_t n = starts.len / 8;
    if (sizes.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and framed_sizes differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (start[i] < 0 || framed[i] < 16 || start[i] > (int64_t)view.len - framed[i]) {
            PyErr_Format(PyExc_ValueError, "record %zd lies outside the buffer", i);
            goto done;
        }
    }
    const uint8_t *data = (const uint8_t *)view.buf;
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; count < n; count++) {
        const uint8_t *record = data + start[count];
        uint64_t length = (uint64_t)framed[count] - 16;
        if (load_u64(record) != length) break;
        if (verify && (masked_crc(record, 8) != load_u32(record + 8) ||
                       masked_crc(record + 12, (size_t)length) != load_u32(record + 12 + length)))
            break;
    }
    Py_END_ALLOW_THREADS
    payloads = PyList_New(count);
    if (!payloads) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *payload = PyBytes_FromStringAndSize((const char *)data + start[i] + 12, (Py_ssize_t)framed[i] - 16);
        if (!payload) goto done;
        PyList_SET_ITEM(payloads, i, payload);
    }
    result = Py_BuildValue("(On)", payloads, count);
done:
    Py_XDECREF(payloads);
    release_views((Py_buffer *[]){&view, &starts, &sizes}, 3);
    return result;
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

static PyMethodDef framing_methods[] = {
    {"frame", py_frame, METH_VARARGS,
     "frame(buffer, start, stop, verify_crc) -> (payloads, position): the intact framed records from start"},
    {"unframe", py_unframe, METH_VARARGS,
     "unframe(buffer, starts, framed_sizes, verify_crc) -> (payloads, count): the intact records at starts"},
    {"masked_crc32c", py_masked_crc32c, METH_O, "masked_crc32c(data) -> int (the TFRecord CRC)"},
    {NULL, NULL, 0, NULL},
};

int framing_init(PyObject *module) {
    crc_init_tables();
#ifdef HAVE_HW_CRC
    crc_zeros(crc_long, CRC_LONG);
    crc_zeros(crc_short, CRC_SHORT);
    use_hw_crc = cpu_has_sse42() && getenv("TORCH_TFRECORD_NO_HW_CRC") == NULL;
#endif
    if (PyModule_AddFunctions(module, framing_methods) < 0) return -1;
    return PyModule_AddIntConstant(module, "HW_CRC", use_hw_crc);
}
