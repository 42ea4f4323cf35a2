/*
 * peak.c (avx2) - the machine's int8 multiply-accumulate peak for the AVX2
 * kernels: a register-only loop of the instruction sequence the quantized
 * dot products are built on (vpmaddubsw: 32 u8 x s8 products summed in
 * pairs to int16; vpmaddwd against ones: pairs summed to int32; vpaddd
 * into the accumulator), 8 independent chains so that latency hides, no
 * memory traffic. Benchmarks report kernel GOP/s as a share of it.
 */
#include <immintrin.h>
#include <time.h>

#include "kernels/cpu/avx2/avx2.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double kn_int8_peak_avx2(double seconds) {
    __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256i b[8], acc[8];
    for (int i = 0; i < 8; i++) {
        b[i] = _mm256_set1_epi8((char)(i + 1));
        acc[i] = _mm256_setzero_si256();
    }
    long iters = 0;
    double t0 = now_s(), el = 0.0;
    do {
        for (int r = 0; r < 1024; r++) {
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                __m256i p = _mm256_maddubs_epi16(a, b[i]);
                acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(p, ones));
            }
            __asm__ volatile("" : "+x"(a));
        }
        iters += 1024;
        el = now_s() - t0;
    } while (el < seconds);
    __m256i s = acc[0];
    for (int i = 1; i < 8; i++) s = _mm256_add_epi32(s, acc[i]);
    volatile int sink = _mm256_extract_epi32(s, 0);
    (void)sink;
    /* 8 chains x 32 multiply-accumulates = 2 ops each */
    return (double)iters * 8 * 32 * 2 / el / 1e9;
}
