/*
 * matmul_f.c (avx2) - F32, F16 and BF16 weights (F32 activations for F32
 * and F16 weights, BF16 activations for BF16 weights, widened to f32 with
 * shifts). The specification is cpu/ref/matmul.c.
 *
 * Each (token, row) dot has one ymm accumulator: lane i sums elements
 * i, i+8, i+16, ... in order (the last partial chunk zero padded), then the
 * 8 lanes are summed with a fixed tree. Tiles of up to 4 tokens x 4 rows
 * (8 rows for one token) run that same sequence per dot: the result does
 * not depend on n_tokens, r0 or r1 (batch invariance, kernels/ops.h).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/avx2/avx2.h"

/* Prefetch distance along each weight row in the one-token path: 8 rows
 * are read in parallel, so a shorter distance than matmul_k.c's. */
enum { PF_DIST = 1024 };

enum { F_F32, F_F16, F_BF16 };

/* 8 values from element i of row p (weights of `type`, or activations of
 * the type's activation format); tail: elements >= n read as 0 */
static inline __attribute__((always_inline)) __m256 load8(int fmt, const uint8_t *p, int i, int n,
                                                          int tail) {
    if (fmt == F_F32) {
        if (!tail) return _mm256_loadu_ps((const float *)p + i);
        __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - i), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        return _mm256_maskload_ps((const float *)p + i, k);
    }
    __m128i h;
    if (!tail) {
        h = _mm_loadu_si128((const __m128i *)(p + 2 * (size_t)i));
    } else {
        uint16_t buf[8] = {0};
        memcpy(buf, p + 2 * (size_t)i, 2 * (size_t)(n - i));
        h = _mm_loadu_si128((const __m128i *)buf);
    }
    if (fmt == F_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) void
tile(int type, int mt, int nr, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int n,
     float *y, size_t ldy) {
    const int xfmt = type == F_BF16 ? F_BF16 : F_F32;
    const int nfull = n / 8 * 8;
    const int ebytes = type == F_F32 ? 4 : 2;
    __m256 acc[4][8];
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) acc[t][r] = _mm256_setzero_ps();
    for (int i = 0; i < nfull; i += 8) {
        __m256 wv[8];
        if (mt == 1 && i % 16 == 0) /* decode: weights stream from memory */
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++)
                _mm_prefetch((const char *)w + r * ws + (size_t)i * ebytes + PF_DIST, _MM_HINT_T0);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) wv[r] = load8(type, w + r * ws, i, n, 0);
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            __m256 xv = load8(xfmt, x + t * xs, i, n, 0);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) acc[t][r] = _mm256_fmadd_ps(wv[r], xv, acc[t][r]);
        }
    }
    if (nfull < n) {
        __m256 wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) wv[r] = load8(type, w + r * ws, nfull, n, 1);
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            __m256 xv = load8(xfmt, x + t * xs, nfull, n, 1);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) acc[t][r] = _mm256_fmadd_ps(wv[r], xv, acc[t][r]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) y[(size_t)t * ldy + r] = hsum8(acc[t][r]);
}

#define TILE_CASE(MT, NR) \
    case (MT) * 16 + (NR): tile(type, MT, NR, w, ws, x, xs, n, y, ldy); break;

static inline __attribute__((always_inline)) void
tile_any(int type, int mt, int nr, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int n,
         float *y, size_t ldy) {
    switch (mt * 16 + nr) {
        TILE_CASE(1, 8) TILE_CASE(1, 7) TILE_CASE(1, 6) TILE_CASE(1, 5)
        TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
        TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
        TILE_CASE(3, 4) TILE_CASE(3, 3) TILE_CASE(3, 2) TILE_CASE(3, 1)
        TILE_CASE(4, 4) TILE_CASE(4, 3) TILE_CASE(4, 2) TILE_CASE(4, 1)
    default: break;
    }
}

static inline __attribute__((always_inline)) void
matmul_f(int type, float *restrict y, size_t ldy, const void *restrict w, size_t ws,
         const void *restrict x, size_t xs, int n, int n_tokens, int r0, int r1) {
    const uint8_t *wb = w, *xb = x;
    const int rt_max = n_tokens == 1 ? 8 : 4;
    for (int r = r0; r < r1; r += rt_max) {
        int nr = r1 - r < rt_max ? r1 - r : rt_max;
        for (int t = 0; t < n_tokens; t += 4) {
            int mt = n_tokens - t < 4 ? n_tokens - t : 4;
            tile_any(type, mt, nr, wb + (size_t)r * ws, ws, xb + (size_t)t * xs, xs, n,
                     y + (size_t)t * ldy + r, ldy);
        }
    }
}

#define DEFINE_MATMUL_F(NAME, TYPE) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        matmul_f(TYPE, y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1); \
    }

DEFINE_MATMUL_F(kn_matmul_f32_avx2, F_F32)
DEFINE_MATMUL_F(kn_matmul_f16_avx2, F_F16)
DEFINE_MATMUL_F(kn_matmul_bf16_avx2, F_BF16)
