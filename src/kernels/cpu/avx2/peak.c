/*
 * peak.c (avx2) - the int8 multiply-accumulate peak of the AVX2 kernels: a
 * register-only loop of vpmaddubsw (32 u8 x s8 products, summed in pairs
 * to int16) accumulated with vpaddw, 6 independent chains so that latency
 * hides, every value in registers, no memory traffic. The products are the
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

double kn_int8_peak_avx2(double seconds) {
    __m256i a = _mm256_set1_epi8(3);
    __m256i b[6], acc[6];
    for (int i = 0; i < 6; i++) {
        b[i] = _mm256_set1_epi8((char)(i + 1));
        acc[i] = _mm256_setzero_si256();
    }
    long iters = 0;
    double t0 = now_s(), el = 0.0;
    do {
        for (int r = 0; r < 1024; r++) {
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(a, b[i]));
            __asm__ volatile("" : "+x"(a));
        }
        iters += 1024;
        el = now_s() - t0;
    } while (el < seconds);
    __m256i s = acc[0];
    for (int i = 1; i < 6; i++) s = _mm256_add_epi16(s, acc[i]);
    volatile int sink = _mm256_extract_epi32(s, 0);
    (void)sink;
    /* 6 chains x 32 multiply-accumulates = 2 ops each */
    return (double)iters * 6 * 32 * 2 / el / 1e9;
}
