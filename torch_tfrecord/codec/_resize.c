/* Antialiased bilinear resizing of uint8 images into planes, byte for byte torch's uint8
 * F.interpolate(mode="bilinear", antialias=True, align_corners=False) on a channels-last image.
 *
 * Torch (aten/src/ATen/native/cpu/UpSampleKernel.cpp, after Pillow-SIMD) resizes in separable
 * passes: horizontal into uint8 rows, then vertical; a side that keeps its size skips its pass.
 * Each axis's weights are computed in double (a triangle filter widened by the downscale factor,
 * normalised per output), then scaled to int16 with the largest precision that keeps the largest
 * weight under 2^15; a pass sums weight * pixel in int32 from half a unit, shifts and clamps.
 * The same integers here give the same bytes; only the order of the work differs: the horizontal
 * pass does two rows at a time with AVX2 where the CPU has it, the vertical pass whole rows
 * (vectorised by the compiler), and the last step writes each channel's plane.
 */
#include "_resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../support/_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RESIZE_AVX2 1
#endif

static void axis_free(ResizeAxis *axis) {
    free(axis->first);
    free(axis->skip);
    free(axis->taps);
    free(axis->weights);
    memset(axis, 0, sizeof(*axis));
}

/* torch's HelperInterpLinear::aa_filter. */
static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The taps of one axis, as torch's _compute_index_ranges_int16_weights (antialias, no scale given). */
static int axis_prepare(ResizeAxis *axis, long in_size, long out_size) {
    if (axis->weights != NULL && axis->in_size == in_size && axis->out_size == out_size) return 0;
    axis_free(axis);
    double scale = (double)in_size / (double)out_size;
    double support = scale >= 1.0 ? scale : 1.0;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    long max_taps = (long)ceil(support) * 2 + 1;
    double *real = calloc((size_t)(out_size * max_taps), sizeof(double));
    axis->first = malloc((size_t)out_size * sizeof(long));
    axis->skip = malloc((size_t)out_size * sizeof(long));
    axis->taps = malloc((size_t)out_size * sizeof(long));
    if (real == NULL || axis->first == NULL || axis->skip == NULL || axis->taps == NULL) {
        free(real);
        axis_free(axis);
        return -1;
    }
    double largest = 0.0;
    long widest = 1;
    for (long i = 0; i < out_size; i++) {
        double center = scale * ((double)i + 0.5), total = 0.0, *w = real + i * max_taps;
        long lo = (long)(center - support + 0.5), hi = (long)(center + support + 0.5);
        lo = lo > 0 ? lo : 0;
        long taps = (hi < in_size ? hi : in_size) - lo;
        taps = taps < 0 ? 0 : taps > max_taps ? max_taps : taps;
        for (long j = 0; j < taps; j++) {
            w[j] = triangle(((double)(j + lo) - center + 0.5) * invscale);
            total += w[j];
        }
        for (long j = 0; total != 0.0 && j < taps; j++) {
            w[j] /= total;
            largest = w[j] > largest ? w[j] : largest;
        }
        axis->first[i] = lo;
        axis->taps[i] = taps;
        widest = taps > widest ? taps : widest;
    }
    int precision;
    for (precision = 0; precision < 22; precision++) {
        if ((int)(0.5 + largest * (1 << (precision + 1))) >= (1 << 15)) break;
    }
    /* Each output gets a window of `stride` inputs (four at a time for the SIMD loop), moved left
     * where it would pass the image's end; the weights outside its own taps are zero. */
    long stride = (widest + 3) / 4 * 4;
    axis->weights = calloc((size_t)(out_size * stride), sizeof(int16_t));
    if (axis->weights == NULL) {
        free(real);
        axis_free(axis);
        return -1;
    }
    for (long i = 0; i < out_size; i++) {
        long lo = axis->first[i], first = lo + stride > in_size ? in_size - stride : lo;
        first = first > 0 ? first : 0;
        axis->first[i] = first;
        axis->skip[i] = lo - first;
        for (long j = 0; j < axis->taps[i]; j++) {
            double v = real[i * max_taps + j] * (1 << precision);
            axis->weights[i * stride + lo - first + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
        }
    }
    free(real);
    axis->in_size = in_size;
    axis->out_size = out_size;
    axis->stride = stride;
    axis->precision = precision;
    return 0;
}

static uint8_t clamped(int32_t sum, int precision) {
    sum >>= precision;
    return (uint8_t)(sum < 0 ? 0 : sum > 255 ? 255 : sum);
}

static int32_t half(int precision) { return precision > 0 ? 1 << (precision - 1) : 0; }

/* Outputs from..out_size of one row, any number of channels. */
static void horizontal_row(const uint8_t *in, uint8_t *out, int channels, const ResizeAxis *axis, long from) {
    int32_t start = half(axis->precision);
    if (channels == 1 && axis->stride <= axis->in_size) {
        /* Grey: every window is `stride` inputs inside the row, four taps at a time. */
        for (long x = from; x < axis->out_size; x++) {
            const int16_t *k = axis->weights + x * axis->stride;
            const uint8_t *pixels = in + axis->first[x];
            int32_t sum = start;
            for (long t = 0; t < axis->stride; t += 4)
                sum += k[t] * pixels[t] + k[t + 1] * pixels[t + 1] + k[t + 2] * pixels[t + 2] + k[t + 3] * pixels[t + 3];
            out[x] = clamped(sum, axis->precision);
        }
        return;
    }
    for (long x = from; x < axis->out_size; x++) {
        const int16_t *k = axis->weights + x * axis->stride + axis->skip[x];
        const uint8_t *pixels = in + (axis->first[x] + axis->skip[x]) * channels;
        for (int c = 0; c < channels; c++) {
            int32_t sum = start;
            for (long t = 0; t < axis->taps[x]; t++) sum += k[t] * pixels[t * channels + c];
            out[x * channels + c] = clamped(sum, axis->precision);
        }
    }
}

static int portable_only = 0;

int resize_portable(int only) {
    int before = portable_only;
    if (only >= 0) portable_only = only != 0;
    return before;
}

#ifndef RESIZE_AVX2
int resize_simd(void) { return 0; }
#endif

#ifdef RESIZE_AVX2
static int has_avx2(void) {
    static int known = -1; /* a benign race: every thread computes the same answer */
    if (known < 0) {
        known = cpu_has_avx2();
    }
    return known && !portable_only;
}

int resize_simd(void) { return has_avx2(); }

/* The outputs whose 16-byte loads stay inside `available` bytes from a row's start. */
static long loads_fit(const ResizeAxis *axis, long available) {
    long reach = 3 * axis->stride + 4; /* the last load: 16 bytes at 3 * (first + stride - 4) */
    long x = axis->out_size;
    while (x > 0 && 3 * axis->first[x - 1] + reach > available) x--;
    return x;
}

/* Two RGB rows at once, one in each 128-bit lane: per output pixel, four taps a load, pixel pairs
 * spread to int16 (R0 R1, G0 G1, B0 B1) and multiplied by weight pairs (madd) into int32 R, G, B. */
__attribute__((target("avx2"))) static void horizontal_rgb_pairs(const uint8_t *in, long rows, long row_bytes,
                                                                 uint8_t *out, long out_stride,
                                                                 const ResizeAxis *axis) {
    const __m256i pairs01 = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 0, -1, 3,
                                             -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i pairs23 = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1, 6, -1, 9,
                                             -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    const __m256i start = _mm256_set1_epi32(half(axis->precision));
    const __m128i shift = _mm_cvtsi32_si128(axis->precision);
    long total = rows * row_bytes, y = 0;
    for (; y + 1 < rows; y += 2) {
        const uint8_t *a = in + y * row_bytes, *b = a + row_bytes;
        uint8_t *out_a = out + y * out_stride, *out_b = out_a + out_stride;
        long fit = loads_fit(axis, total - (y + 1) * row_bytes);
        for (long x = 0; x < fit; x++) {
            const int16_t *k = axis->weights + x * axis->stride;
            long at = 3 * axis->first[x];
            __m256i sum = start;
            for (long t = 0; t < axis->stride; t += 4, at += 12) {
                __m256i pixels = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + at))),
                    _mm_loadu_si128((const __m128i *)(b + at)), 1);
                int32_t k01, k23;
                memcpy(&k01, k + t, sizeof(k01));
                memcpy(&k23, k + t + 2, sizeof(k23));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pairs01),
                                                              _mm256_set1_epi32(k01)));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pairs23),
                                                              _mm256_set1_epi32(k23)));
            }
            sum = _mm256_sra_epi32(sum, shift);
            sum = _mm256_packus_epi16(_mm256_packs_epi32(sum, sum), sum);
            uint32_t rgb_a = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(sum));
            uint32_t rgb_b = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(sum, 1));
            memcpy(out_a + 3 * x, &rgb_a, 4); /* the 4th byte: the next pixel's, or the row's padding */
            memcpy(out_b + 3 * x, &rgb_b, 4);
        }
        horizontal_row(a, out_a, 3, axis, fit);
        horizontal_row(b, out_b, 3, axis, fit);
    }
    for (; y < rows; y++) horizontal_row(in + y * row_bytes, out + y * out_stride, 3, axis, 0);
}

/* One output row from `taps` input rows, 32 bytes at a time: two rows' bytes interleaved to int16
 * pairs and multiplied by the two rows' weights (madd) into int32 sums; the rest as below. */
__attribute__((target("avx2"))) static long vertical_row_avx2(const uint8_t *in, long in_stride, long bytes,
                                                              const int16_t *k, long taps, int precision,
                                                              uint8_t *out) {
    const __m256i zero = _mm256_setzero_si256(), start = _mm256_set1_epi32(half(precision));
    const __m128i shift = _mm_cvtsi32_si128(precision);
    long at = 0;
    for (; at + 32 <= bytes; at += 32) {
        __m256i s0 = start, s1 = start, s2 = start, s3 = start;
        for (long t = 0; t < taps; t += 2) {
            const uint8_t *row = in + t * in_stride + at;
            int pair = t + 1 < taps;
            __m256i a = _mm256_loadu_si256((const __m256i *)row);
            __m256i b = pair ? _mm256_loadu_si256((const __m256i *)(row + in_stride)) : zero;
            uint32_t weights = (uint16_t)k[t] | (uint32_t)(uint16_t)(pair ? k[t + 1] : 0) << 16;
            __m256i w = _mm256_set1_epi32((int32_t)weights);
            __m256i low = _mm256_unpacklo_epi8(a, b), high = _mm256_unpackhi_epi8(a, b);
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_unpacklo_epi8(low, zero), w));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_unpackhi_epi8(low, zero), w));
            s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_unpacklo_epi8(high, zero), w));
            s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_unpackhi_epi8(high, zero), w));
        }
        s0 = _mm256_sra_epi32(s0, shift);
        s1 = _mm256_sra_epi32(s1, shift);
        s2 = _mm256_sra_epi32(s2, shift);
        s3 = _mm256_sra_epi32(s3, shift);
        /* packs and packus work within 128-bit lanes, undoing the unpacks' order */
        __m256i packed = _mm256_packus_epi16(_mm256_packs_epi32(s0, s1), _mm256_packs_epi32(s2, s3));
        _mm256_storeu_si256((__m256i *)(out + at), packed);
    }
    return at;
}
#endif

static void horizontal_pass(const uint8_t *in, long rows, long width, int channels, uint8_t *out, long out_stride,
                            const ResizeAxis *axis) {
#ifdef RESIZE_AVX2
    if (channels == 3 && has_avx2()) {
        horizontal_rgb_pairs(in, rows, width * 3, out, out_stride, axis);
        return;
    }
#endif
    for (long y = 0; y < rows; y++) horizontal_row(in + y * width * channels, out + y * out_stride, channels, axis, 0);
}

enum { CHUNK = 256 };

/* One output row: `taps` input rows from `in`, `in_stride` apart, weighted; `bytes` per row. */
static void vertical_row(const uint8_t *in, long in_stride, long bytes, const int16_t *k, long taps, int precision,
                         uint8_t *out) {
    int32_t sums[CHUNK];
    int32_t start = half(precision);
    long at = 0;
#ifdef RESIZE_AVX2
    if (has_avx2()) at = vertical_row_avx2(in, in_stride, bytes, k, taps, precision, out);
#endif
    for (; at < bytes; at += CHUNK) {
        long n = bytes - at < CHUNK ? bytes - at : CHUNK;
        for (long j = 0; j < n; j++) sums[j] = start;
        for (long t = 0; t < taps; t++) {
            const uint8_t *row = in + t * in_stride + at;
            int32_t weight = k[t];
            for (long j = 0; j < n; j++) sums[j] += weight * row[j];
        }
        for (long j = 0; j < n; j++) {
            int32_t value = sums[j] >> precision;
            out[at + j] = (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value);
        }
    }
}

/* An interleaved row into each channel's plane: loops the compiler vectorises, built twice on
 * x86-64 (for AVX2 and for any CPU) and picked at run time (not target_clones: its resolver is an
 * ifunc, glibc only, and asks the compiler runtime's CPU model, which zig cc's leaves empty). */
static inline __attribute__((always_inline)) void planes_of(const uint8_t *row, long width, int channels,
                                                            uint8_t *out, long plane) {
    if (channels == 3) {
        uint8_t *red = out, *green = out + plane, *blue = out + 2 * plane;
        for (long x = 0; x < width; x++) {
            red[x] = row[3 * x];
            green[x] = row[3 * x + 1];
            blue[x] = row[3 * x + 2];
        }
        return;
    }
    for (int c = 0; c < channels; c++)
        for (long x = 0; x < width; x++) out[c * plane + x] = row[x * channels + c];
}

#ifdef RESIZE_AVX2
__attribute__((target("avx2"))) static void planes_avx2(const uint8_t *row, long width, int channels, uint8_t *out,
                                                        long plane) {
    planes_of(row, width, channels, out, plane);
}
#endif

static void to_planes(const uint8_t *row, long width, int channels, uint8_t *out, long plane) {
#ifdef RESIZE_AVX2
    if (has_avx2()) {
        planes_avx2(row, width, channels, out, plane);
        return;
    }
#endif
    planes_of(row, width, channels, out, plane);
}

static int grow(uint8_t **buffer, long *size, long wanted) {
    if (*size >= wanted) return 0;
    uint8_t *bigger = realloc(*buffer, (size_t)wanted);
    if (bigger == NULL) return -1;
    *buffer = bigger;
    *size = wanted;
    return 0;
}

int resize_to_planes(const uint8_t *in, long height, long width, int channels, uint8_t *out, long out_height,
                     long out_width, ResizeScratch *scratch) {
    long plane = out_height * out_width, out_bytes = out_width * channels;
    int horizontal = width != out_width, vertical = height != out_height;
    if (horizontal && axis_prepare(&scratch->horizontal, width, out_width) < 0) return -1;
    if (vertical && axis_prepare(&scratch->vertical, height, out_height) < 0) return -1;
    const uint8_t *rows = in;
    long stride = width * channels;
    if (horizontal) {
        stride = out_bytes + 4; /* room for the SIMD pass's 4-byte stores */
        if (grow(&scratch->between, &scratch->between_size, height * stride) < 0) return -1;
        horizontal_pass(in, height, width, channels, scratch->between, stride, &scratch->horizontal);
        rows = scratch->between;
    }
    if (!vertical) {
        for (long y = 0; y < out_height; y++) to_planes(rows + y * stride, out_width, channels, out + y * out_width, plane);
        return 0;
    }
    if (grow(&scratch->row, &scratch->row_size, out_bytes) < 0) return -1;
    const ResizeAxis *axis = &scratch->vertical;
    for (long y = 0; y < out_height; y++) {
        const int16_t *k = axis->weights + y * axis->stride + axis->skip[y];
        const uint8_t *first = rows + (axis->first[y] + axis->skip[y]) * stride;
        uint8_t *target = channels == 1 ? out + y * out_width : scratch->row;
        vertical_row(first, stride, out_bytes, k, axis->taps[y], axis->precision, target);
        if (channels != 1) to_planes(scratch->row, out_width, channels, out + y * out_width, plane);
    }
    return 0;
}

void resize_scratch_free(ResizeScratch *scratch) {
    axis_free(&scratch->horizontal);
    axis_free(&scratch->vertical);
    free(scratch->between);
    free(scratch->row);
    memset(scratch, 0, sizeof(*scratch));
}
