/*
 * The shuffles' keyed permutation (data layer of torch_tfrecord.support._native); its Python
 * caller is data/order/permutation.py, which keeps the numpy original for a build without it.
 */
#include "_permutation.h"

#include <stdlib.h>

#include "../../support/_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FEISTEL_AVX512
#include <immintrin.h>
#endif

/* feistel(values, half_bits, round_keys, limit, windows, simd=True) -> None: order.py's keyed permutation,
 * in place and bit for bit (order.py keeps the numpy original for a build without this file).
 * Each value v < 4**half_bits goes through a balanced Feistel network, one round per key, again
 * and again until it lies below `limit` (cycle walking). A round: (left, right) ->
 * (right, left ^ (mix(right ^ key) & mask)), mix being splitmix64's finaliser. `windows` is None
 * (every value uses round_keys) or one uint64 per value: value i then uses mix(windows[i] ^ key)
 * for each key (the block shuffle's key of each window). All arrays hold 64-bit words; they
 * are read as unsigned. With one set of keys, on a CPU with AVX-512 (DQ), eight values go
 * through the network at once, unless simd is false (the scalar loop, for the tests). */
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

#ifdef FEISTEL_AVX512
static int has_avx512(void) {
    static int known = -1; /* a benign race: every thread computes the same answer */
    if (known < 0) known = cpu_has_avx512dq();
    return known;
}

/* feistel_once over value[0..n) with one set of keys, eight values at a time (AVX-512's 64-bit
 * multiplies: the network's two multiplies a round are most of its cost); the same values. */
__attribute__((target("avx512f,avx512dq"))) static void feistel_avx512(uint64_t *value, Py_ssize_t n, int half_bits,
                                                                      const uint64_t *keys, int rounds) {
    const __m512i mask = _mm512_set1_epi64((long long)((1ULL << half_bits) - 1));
    const __m512i m1 = _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ULL);
    const __m512i m2 = _mm512_set1_epi64((long long)0x94D049BB133111EBULL);
    const __m128i shift = _mm_cvtsi32_si128(half_bits);
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512i v = _mm512_loadu_si512((const void *)(value + i));
        __m512i left = _mm512_srl_epi64(v, shift), right = _mm512_and_si512(v, mask);
        for (int r = 0; r < rounds; r++) {
            __m512i x = _mm512_xor_si512(right, _mm512_set1_epi64((long long)keys[r]));
            x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 30));
            x = _mm512_mullo_epi64(x, m1);
            x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 27));
            x = _mm512_mullo_epi64(x, m2);
            x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 31));
            __m512i next = _mm512_xor_si512(left, _mm512_and_si512(x, mask));
            left = right;
            right = next;
        }
        _mm512_storeu_si512((void *)(value + i), _mm512_or_si512(_mm512_sll_epi64(left, shift), right));
    }
    for (; i < n; i++) value[i] = feistel_once(value[i], half_bits, keys, rounds);
}

/* feistel_all with one set of keys, in AVX-512: the network over every value, then over the
 * values still at or past the limit, gathered into `spare` (n words) and put back. */
static void feistel_all_avx512(uint64_t *value, Py_ssize_t n, int half_bits, const uint64_t *keys, int rounds,
                               uint64_t limit, Py_ssize_t *pending, uint64_t *spare) {
    feistel_avx512(value, n, half_bits, keys, rounds);
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        pending[count] = i;
        count += value[i] >= limit;
    }
    while (count) {
        for (Py_ssize_t j = 0; j < count; j++) spare[j] = value[pending[j]];
        feistel_avx512(spare, count, half_bits, keys, rounds);
        Py_ssize_t left = 0;
        for (Py_ssize_t j = 0; j < count; j++) {
            Py_ssize_t i = pending[j];
            value[i] = spare[j];
            pending[left] = i;
            left += spare[j] >= limit;
        }
        count = left;
    }
}
#endif

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
    int half_bits, simd = 1;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "OiOKO|p:feistel", &values_obj, &half_bits, &keys_obj, &limit, &windows_obj, &simd))
        return NULL;
    Py_buffer values = {0}, keys = {0}, windows = {0};
    Py_ssize_t *pending = NULL;
    uint64_t *own = NULL, *spare = NULL;
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
#ifdef FEISTEL_AVX512
    if (simd && !window && has_avx512()) {
        spare = malloc((n ? (size_t)n : 1) * sizeof(uint64_t));
        if (!spare) {
            PyErr_NoMemory();
            goto done;
        }
    }
#endif
    Py_BEGIN_ALLOW_THREADS
    if (window)
        for (Py_ssize_t i = 0; i < n; i++)
            for (int r = 0; r < rounds; r++) own[i * rounds + r] = mix64(window[i] ^ base[r]);
#ifdef FEISTEL_AVX512
    if (spare)
        feistel_all_avx512(value, n, half_bits, base, rounds, limit, pending, spare);
    else
#endif
        feistel_all(value, n, half_bits, window ? own : base, rounds, limit, window != NULL, pending);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(pending);
    free(own);
    free(spare);
    release_views((Py_buffer *[]){&values, &keys, &windows}, 3);
    return result;
}

static PyMethodDef permutation_methods[] = {
    {"feistel", py_feistel, METH_VARARGS,
     "feistel(values, half_bits, round_keys, limit, windows, simd=True) -> None: order.py's permutation, in "
     "place (simd=False: the scalar loop, where AVX-512 would run)"},
    {NULL, NULL, 0, NULL},
};

static const NativeConstant permutation_constants[] = {{"FEISTEL_MAX_ROUNDS", FEISTEL_MAX_ROUNDS}, {NULL, 0}};

int permutation_init(PyObject *module) {
    if (PyModule_AddFunctions(module, permutation_methods) < 0) return -1;
#ifdef FEISTEL_AVX512
    int vectorised = has_avx512();
#else
    int vectorised = 0;
#endif
    if (PyModule_AddIntConstant(module, "PERMUTATION_AVX512", vectorised) < 0) return -1;
    return add_constants(module, permutation_constants);
}
