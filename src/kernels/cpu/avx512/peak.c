/*
 * peak.c (avx512) - the int8 multiply-accumulate peak of the AVX-512 VNNI
 * kernels: a register-only loop of vpdpbusd (64 u8 x s8 products summed
 * in fours into int32, one instruction), 12 independent chains, no memory
 * traffic. Benchmarks report kernel GOP/s as a share of it.
 */
#include <immintrin.h>
#include <time.h>

#include "kernels/cpu/avx512/avx512.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double kn_int8_peak_avx512(double seconds) {
    __m512i a = _mm512_set1_epi8(3);
    __m512i b[12], acc[12];
    for (int i = 0; i < 12; i++) {
        b[i] = _mm512_set1_epi8((char)(i + 1));
        acc[i] = _mm512_setzero_si512();
    }
    long iters = 0;
    double t0 = now_s(), el = 0.0;
    do {
        for (int r = 0; r < 1024; r++) {
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b[i]);
            __asm__ volatile("" : "+v"(a));
        }
        iters += 1024;
        el = now_s() - t0;
    } while (el < seconds);
    __m512i s = acc[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_epi32(s, acc[i]);
    volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(s));
    (void)sink;
    /* 12 chains x 64 multiply-accumulates = 2 ops each */
    return (double)iters * 12 * 64 * 2 / el / 1e9;
}
