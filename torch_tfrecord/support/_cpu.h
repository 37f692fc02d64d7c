/*
 * What the x86-64 CPU can run, asked with the CPUID instruction (foundation of the C parts:
 * records/_framing.c's CRC32 instruction, codec/_resize.c's AVX2 loops, data/order/_permutation.c's
 * AVX-512 network).
 *
 * Not __builtin_cpu_supports: its answer comes from the compiler's runtime library, and zig cc's
 * (0.17, what packaging/build_wheels.sh compiles with) answers 0 for every feature. CPUID is the
 * same for gcc, clang and zig cc, on Linux and macOS. Other CPUs: every answer is 0.
 */
#ifndef TORCH_TFRECORD_SUPPORT_CPU_H
#define TORCH_TFRECORD_SUPPORT_CPU_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* SSE4.2, whose CRC32 instruction records/_framing.c uses. */
static inline int cpu_has_sse42(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 20) & 1;
}

/* AVX2, with the YMM registers' state saved by the operating system (OSXSAVE and XCR0). */
static inline int cpu_has_avx2(void) {
    unsigned a, b, c, d, low, high;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1) || !((c >> 28) & 1)) return 0; /* OSXSAVE, AVX */
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    if ((low & 6) != 6) return 0; /* XMM and YMM state */
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 5) & 1;
}

/* AVX-512 F and DQ (64-bit lane multiplies), with the opmask and ZMM registers' state saved by
 * the operating system (XCR0 bits 5-7 beside the XMM and YMM ones). */
static inline int cpu_has_avx512dq(void) {
    unsigned a, b, c, d, low, high;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return 0; /* OSXSAVE */
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    if ((low & 0xE6) != 0xE6) return 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 16) & 1 && (b >> 17) & 1;
}
#else
static inline int cpu_has_sse42(void) { return 0; }
static inline int cpu_has_avx2(void) { return 0; }
static inline int cpu_has_avx512dq(void) { return 0; }
#endif

#endif
