/*
 * matmul_f.c (avx512) - F32, F16 and BF16 weights (F32 activations for F32
 * and F16 weights, BF16 activations for BF16 weights). The specification is
 * cpu/ref/matmul.c.
 *
 * Each (token, row) dot has one zmm accumulator: lane i sums elements
 * i, i+16, i+32, ... in order (the last chunk masked), then the 16 lanes are
 * summed with a fixed tree. Tiles of up to 4 tokens x 4 rows (8 rows for one
 * token) run that same sequence per dot, so the result does not depend on
 * n_tokens, r0 or r1 (batch invariance, kernels/ops.h). Built with -std=c11:
 * no FMA contraction other than the explicit _mm512_fmadd_ps.
 *
 * BF16 has two variants: kn_matmul_bf16_avx512 uses AVX512_BF16 vdpbf16ps
 * (pairs of products per lane, denormals flushed, as the instruction
 * defines), kn_matmul_bf16f_avx512 widens bf16 to f32 with shifts and uses
 * FMAs, for CPUs with VNNI but no AVX512_BF16 (the dispatcher picks).
 */
#include <immintrin.h>

#include "kernels/cpu/avx512/avx512.h"

/* One token: while a tile of nr rows (contiguous in memory) is read, the
 * next tile is prefetched at the same offsets, a tile ahead. Prefetching
 * along the row instead (1 KB ahead) mostly targets the current tile with
 * 1152-byte rows: 4.5 GB/s on F16 gate_up against 10-12 GB/s a tile
 * ahead, the read bandwidth of one thread (commit 14a632b). */

enum { F_F32, F_F16, F_BF16DP, F_BF16W };

static inline __m512 widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* 16 weights (32 for F_BF16DP, as raw bf16 pairs) from element i of row p;
 * tail: only elements < n */
static inline __attribute__((always_inline)) __m512
load_w(int type, const uint8_t *p, int i, int n, int tail) {
    switch (type) {
    case F_F32:
        return tail ? _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), p + 4 * (size_t)i)
                    : _mm512_loadu_ps(p + 4 * (size_t)i);
    case F_F16: {
        __m256i h = tail ? _mm256_maskz_loadu_epi16((__mmask16)((1u << (n - i)) - 1), p + 2 * (size_t)i)
                         : _mm256_loadu_si256((const __m256i *)(p + 2 * (size_t)i));
        return _mm512_cvtph_ps(h);
    }
    case F_BF16W: {
        __m256i h = tail ? _mm256_maskz_loadu_epi16((__mmask16)((1u << (n - i)) - 1), p + 2 * (size_t)i)
                         : _mm256_loadu_si256((const __m256i *)(p + 2 * (size_t)i));
        return widen_bf16(h);
    }
    default: {
        __m512i h = tail ? _mm512_maskz_loadu_epi16((__mmask32)((1ull << (n - i)) - 1), p + 2 * (size_t)i)
                         : _mm512_loadu_si512(p + 2 * (size_t)i);
        return _mm512_castsi512_ps(h);
    }
    }
}

/* activations, element i of row p: F32 (F32, F16 weights) or BF16 */
static inline __attribute__((always_inline)) __m512
load_x(int type, const uint8_t *p, int i, int n, int tail) {
    return type == F_F16 ? load_w(F_F32, p, i, n, tail) : load_w(type, p, i, n, tail);
}

static inline __attribute__((always_inline)) __m512 step_fma(int type, __m512 acc, __m512 w, __m512 x) {
    if (type == F_BF16DP)
        return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(w), (__m512bh)_mm512_castps_si512(x));
    return _mm512_fmadd_ps(w, x, acc);
}

/* mt tokens x nr rows: y[t*ldy + r] for t < mt, r < nr */
static inline __attribute__((always_inline)) void
tile(int type, int mt, int nr, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, int n,
     float *y, size_t ldy) {
    const int step = type == F_BF16DP ? 32 : 16;
    const int nfull = n / step * step;
    const int ebytes = type == F_F32 ? 4 : 2;
    __m512 acc[4][8];
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) acc[t][r] = _mm512_setzero_ps();
    for (int i = 0; i < nfull; i += step) {
        __m512 wv[8];
        if (mt == 1) /* decode: weights stream from memory, nr rows in parallel */
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++)
                _mm_prefetch((const char *)w + (r + nr) * ws + (size_t)i * ebytes, _MM_HINT_T0);
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) wv[r] = load_w(type, w + r * ws, i, n, 0);
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            __m512 xv = load_x(type, x + t * xs, i, n, 0);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) acc[t][r] = step_fma(type, acc[t][r], wv[r], xv);
        }
    }
    if (nfull < n) {
        __m512 wv[8];
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) wv[r] = load_w(type, w + r * ws, nfull, n, 1);
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            __m512 xv = load_x(type, x + t * xs, nfull, n, 1);
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) acc[t][r] = step_fma(type, acc[t][r], wv[r], xv);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) y[(size_t)t * ldy + r] = _mm512_reduce_add_ps(acc[t][r]);
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

/* Rows outer, tokens inner: a tile of weight rows stays in L1 while every
 * token passes over it. One token: 8 rows at a time (8 FMA chains). */
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

DEFINE_MATMUL_F(kn_matmul_f32_avx512, F_F32)
DEFINE_MATMUL_F(kn_matmul_f16_avx512, F_F16)
DEFINE_MATMUL_F(kn_matmul_bf16_avx512, F_BF16DP)
DEFINE_MATMUL_F(kn_matmul_bf16f_avx512, F_BF16W)
