/* Antialiased bilinear resizing of uint8 images, byte for byte torch's
 * F.interpolate(uint8, mode="bilinear", antialias=True, align_corners=False) on the CPU. */
#ifndef TORCH_TFRECORD_RESIZE_H
#define TORCH_TFRECORD_RESIZE_H

#include <stdint.h>

/* One axis's weights: output i weighs the inputs first[i] ... first[i] + stride - 1 by
 * weights[i * stride ...]; its own taps[i] taps start skip[i] in, the other weights are zero. */
typedef struct {
    long in_size, out_size;
    long stride;   /* weights per output, a multiple of 4; windows moved left so they fit the image */
    int precision; /* weights are in units of 2^-precision */
    long *first;
    long *skip;
    long *taps;
    int16_t *weights;
} ResizeAxis;

/* What one thread reuses from image to image: the last axes (a batch's images often share them)
 * and the scratch rows. */
typedef struct {
    ResizeAxis horizontal, vertical;
    uint8_t *between; /* the horizontal pass's uint8 rows, before the vertical pass */
    long between_size;
    uint8_t *row; /* one output row, interleaved */
    long row_size;
} ResizeScratch;

/* in: height x width x channels (rows of width * channels bytes); out: channels planes of
 * out_height x out_width. Returns 0, or -1 out of memory. */
int resize_to_planes(const uint8_t *in, long height, long width, int channels, uint8_t *out, long out_height,
                     long out_width, ResizeScratch *scratch);

void resize_scratch_free(ResizeScratch *scratch);

/* only = 1: the portable loops even where the CPU has AVX2 (what other CPUs run; for tests),
 * 0: the fastest the CPU has, -1: unchanged. Returns the setting before. */
int resize_portable(int only);

/* Whether the resize runs its SIMD loops here (AVX2 on x86-64, not switched off): where it does
 * not, torch's own resize is the faster one. */
int resize_simd(void);

#endif
