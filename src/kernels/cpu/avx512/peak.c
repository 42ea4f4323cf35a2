/*
 * peak.c (avx512) - the int8 multiply-accumulate peak of the AVX-512 VNNI
 * kernels: loops of vpdpbusd (64 u8 x s8 products summed in fours into
 * int32, one instruction) on independent accumulator chains, no memory
 * traffic beyond L1. Benchmarks report kernel GOP/s as a share of it.
 *
 * The rate such a loop reaches depends on its shape more than one would
 * think: on a Cascade Lake Xeon, 12 chains with every operand in a
 * register read 230 GOP/s, 16 or 24 chains 280, and 24 chains taking one
 * operand from L1 (as the kernels take their broadcast activations) 300;
 * the packed kernels themselves reached 280. A peak below what a kernel
 * does is no limit, so this is the best of those shapes, each timed for a
 * share of the time asked.
 */
#include <immintrin.h>
#include <time.h>

#include "kernels/cpu/avx512/avx512.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* NCH chains; the second operand from NB registers (B_MEM 0) or from an
 * L1-resident array (B_MEM 1). GOP/s of the loop over `seconds`. */
#define PEAK_LOOP(NAME, NCH, NB, B_MEM) \
    static double NAME(double seconds) { \
        __m512i a = _mm512_set1_epi8(3), acc[NCH]; \
        static __m512i bm[NB]; \
        __m512i b[NB]; \
        for (int i = 0; i < NB; i++) bm[i] = b[i] = _mm512_set1_epi8((char)(i + 1)); \
        for (int i = 0; i < NCH; i++) acc[i] = _mm512_setzero_si512(); \
        long iters = 0; \
        double t0 = now_s(), el = 0.0; \
        do { \
            for (int r = 0; r < 1024; r++) { \
                _Pragma("GCC unroll 24") for (int i = 0; i < NCH; i++) acc[i] = \
                    _mm512_dpbusd_epi32(acc[i], a, B_MEM ? _mm512_load_si512(&bm[i % NB]) : b[i % NB]); \
                __asm__ volatile("" : "+v"(a)); \
            } \
            iters += 1024; \
            el = now_s() - t0; \
        } while (el < seconds); \
        __m512i s = acc[0]; \
        for (int i = 1; i < NCH; i++) s = _mm512_add_epi32(s, acc[i]); \
        volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(s)); \
        (void)sink; \
        return (double)iters * NCH * 64 * 2 / el / 1e9; /* 64 multiply-accumulates = 2 ops each */ \
    }

PEAK_LOOP(peak_r12, 12, 12, 0)
PEAK_LOOP(peak_r16, 16, 4, 0)
PEAK_LOOP(peak_r24, 24, 4, 0)
PEAK_LOOP(peak_m24, 24, 24, 1)

double kn_int8_peak_avx512(double seconds) {
    double (*const loops[])(double) = {peak_r12, peak_r16, peak_r24, peak_m24};
    const int n = (int)(sizeof(loops) / sizeof(loops[0]));
    double best = 0.0;
    for (int i = 0; i < n; i++) {
        double g = loops[i](seconds / n);
        if (g > best) best = g;
    }
    return best;
}

/* The float multiply-add peak: NCH independent chains of vfmadd231ps on
 * zmm registers, GFLOP/s (16 lanes x 2 flops per instruction). The
 * attention kernels, which are float FMAs, report their share of it. */
#define FMA_LOOP(NAME, NCH) \
    static double NAME(double seconds) { \
        __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f), acc[NCH]; \
        for (int i = 0; i < NCH; i++) acc[i] = _mm512_set1_ps((float)i); \
        long iters = 0; \
        double t0 = now_s(), el = 0.0; \
        do { \
            for (int r = 0; r < 1024; r++) { \
                _Pragma("GCC unroll 24") for (int i = 0; i < NCH; i++) acc[i] = \
                    _mm512_fmadd_ps(acc[i], a, b); \
                __asm__ volatile("" : "+v"(a)); \
            } \
            iters += 1024; \
            el = now_s() - t0; \
        } while (el < seconds); \
        __m512 s = acc[0]; \
        for (int i = 1; i < NCH; i++) s = _mm512_add_ps(s, acc[i]); \
        volatile float sink = _mm512_cvtss_f32(s); \
        (void)sink; \
        return (double)iters * NCH * 16 * 2 / el / 1e9; \
    }

FMA_LOOP(fma_12, 12)
FMA_LOOP(fma_24, 24)

double kn_f32_peak_avx512(double seconds) {
    double a = fma_12(seconds / 2), b = fma_24(seconds / 2);
    return a > b ? a : b;
}
