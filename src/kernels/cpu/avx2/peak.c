/*
 * peak.c (avx2) - the int8 multiply-accumulate peak of the AVX2 kernels: a
 * register-only loop of vpmaddubsw (32 u8 x s8 products, summed in pairs
 * to int16) accumulated with vpaddw on independent chains, every value in
 * registers, no memory traffic: the best of 6 and 8 chains (on a Cascade
 * Lake Xeon 8 read 13% more than 6; the loop's shape matters, and a peak
 * below what some loop reaches is no limit). The products are the
 * scarce resource (vpmaddubsw issues on fewer ports than the adds), so no
 * int8 kernel built on them can go faster; kernels that widen to int32
 * more often (vpmaddwd) pay for it against this figure. Benchmarks report
 * kernel GOP/s (2 ops per multiply-accumulate) as a share of it.
 */
#include <immintrin.h>
#include <time.h>

#include "kernels/cpu/avx2/avx2.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* NCH chains of vpmaddubsw + vpaddw, the second operand from 4 registers;
 * GOP/s of the loop over `seconds`. */
#define PEAK_LOOP(NAME, NCH) \
    static double NAME(double seconds) { \
        __m256i a = _mm256_set1_epi8(3), b[4], acc[NCH]; \
        for (int i = 0; i < 4; i++) b[i] = _mm256_set1_epi8((char)(i + 1)); \
        for (int i = 0; i < NCH; i++) acc[i] = _mm256_setzero_si256(); \
        long iters = 0; \
        double t0 = now_s(), el = 0.0; \
        do { \
            for (int r = 0; r < 1024; r++) { \
                _Pragma("GCC unroll 8") for (int i = 0; i < NCH; i++) acc[i] = \
                    _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(a, b[i % 4])); \
                __asm__ volatile("" : "+x"(a)); \
            } \
            iters += 1024; \
            el = now_s() - t0; \
        } while (el < seconds); \
        __m256i s = acc[0]; \
        for (int i = 1; i < NCH; i++) s = _mm256_add_epi16(s, acc[i]); \
        volatile int sink = _mm256_extract_epi32(s, 0); \
        (void)sink; \
        return (double)iters * NCH * 32 * 2 / el / 1e9; /* 32 multiply-accumulates = 2 ops each */ \
    }

PEAK_LOOP(peak_6, 6)
PEAK_LOOP(peak_8, 8)

double kn_int8_peak_avx2(double seconds) {
    double a = peak_6(seconds / 2), b = peak_8(seconds / 2);
    return a > b ? a : b;
}

/* The float multiply-add peak: NCH independent chains of vfmadd231ps on
 * ymm registers, GFLOP/s (8 lanes x 2 flops per instruction). */
#define FMA_LOOP(NAME, NCH) \
    static double NAME(double seconds) { \
        __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f), acc[NCH]; \
        for (int i = 0; i < NCH; i++) acc[i] = _mm256_set1_ps((float)i); \
        long iters = 0; \
        double t0 = now_s(), el = 0.0; \
        do { \
            for (int r = 0; r < 1024; r++) { \
                _Pragma("GCC unroll 12") for (int i = 0; i < NCH; i++) acc[i] = \
                    _mm256_fmadd_ps(acc[i], a, b); \
                __asm__ volatile("" : "+x"(a)); \
            } \
            iters += 1024; \
            el = now_s() - t0; \
        } while (el < seconds); \
        __m256 s = acc[0]; \
        for (int i = 1; i < NCH; i++) s = _mm256_add_ps(s, acc[i]); \
        volatile float sink = _mm256_cvtss_f32(s); \
        (void)sink; \
        return (double)iters * NCH * 8 * 2 / el / 1e9; \
    }

FMA_LOOP(fma_10, 10)
FMA_LOOP(fma_12, 12)

double kn_f32_peak_avx2(double seconds) {
    double a = fma_10(seconds / 2), b = fma_12(seconds / 2);
    return a > b ? a : b;
}
