/*
 * matmul_q.c (avx2) - Q4_0, Q4_1 and Q8_0 weights times Q8A activations
 * with AVX2 (vpmaddubsw + vpmaddwd). The specification is
 * cpu/ref/matmul.c; the AVX-512 twin is cpu/avx512/matmul_q.c.
 *
 * Numerics. Each block's integer dot isum = sum(qw * qa) is exact: one ymm
 * holds one block; vpmaddubsw pairs never saturate (Q4: 2*15*127; Q8_0
 * uses |w| times a with w's sign, at most 2*128*127 < 32767) and vpmaddwd
 * widens to int32. 8 blocks' 8-lane partials are summed by an unpack tree
 * into one ymm (lane j = block j), and fstage() combines blocks in float,
 * 8 lanes at a time, lanes summed at the end with a fixed tree:
 *   Q8_0: acc = fma(float(isum), dw*da, acc)
 *   Q4_0: acc = fma(dw, fma(da, float(isum), -8*sa), acc)
 *   Q4_1: acc = fma(mw, sa, fma(float(isum), dw*da, acc))
 * Every (token, row) goes through the same dot_row(), so the result does not
 * depend on n_tokens, r0 or r1 (batch invariance, kernels/ops.h). Several
 * tokens are handled by sweeping blocks of rows small enough to stay in L1
 * over every token, not by sharing the weight expansion (the AVX-512 path
 * does that; here it is kept simple).
 */
#include <immintrin.h>

#include "kernels/cpu/avx2/avx2.h"

enum { T_Q8_0, T_Q4_0, T_Q4_1 };

/* Prefetch distance for the weight stream (see cpu/avx512/matmul_q.c). */
enum { PF_DIST = 4096 };
static const int BLK_BYTES[3] = {34, 18, 20};

/* lane j = sum of the 8 dwords of p[j] */
static inline __m256i tree8(const __m256i p[8]) {
    __m256i t0 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
    __m256i t1 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2], p[3]), _mm256_unpackhi_epi32(p[2], p[3]));
    __m256i t2 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[4], p[5]), _mm256_unpackhi_epi32(p[4], p[5]));
    __m256i t3 = _mm256_add_epi32(_mm256_unpacklo_epi32(p[6], p[7]), _mm256_unpackhi_epi32(p[6], p[7]));
    __m256i u0 = _mm256_add_epi32(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
    __m256i u1 = _mm256_add_epi32(_mm256_unpacklo_epi64(t2, t3), _mm256_unpackhi_epi64(t2, t3));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* 8 int32 partials of one block's dot: b = block bytes, a = its 32 qa */
static inline __attribute__((always_inline)) __m256i block_dot(int type, const uint8_t *b,
                                                               const int8_t *a) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i av = _mm256_loadu_si256((const __m256i *)a);
    __m256i prod;
    if (type == T_Q8_0) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(b + 2));
        prod = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(av, w));
    } else {
        __m128i q = _mm_loadu_si128((const __m128i *)(b + (type == T_Q4_1 ? 4 : 2)));
        const __m128i nib = _mm_set1_epi8(0x0f);
        __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), nib), _mm_and_si128(q, nib));
        prod = _mm256_maddubs_epi16(w, av);
    }
    return _mm256_madd_epi16(prod, ones);
}

static inline __attribute__((always_inline)) __m256
fstage(int type, __m256 acc, __m256i isum, __m256 dw, __m256 mw, __m256 da, __m256 sa) {
    __m256 f = _mm256_cvtepi32_ps(isum);
    switch (type) {
    case T_Q8_0: return _mm256_fmadd_ps(f, _mm256_mul_ps(dw, da), acc);
    case T_Q4_0:
        return _mm256_fmadd_ps(dw, _mm256_fmadd_ps(da, f, _mm256_mul_ps(sa, _mm256_set1_ps(-8.0f))),
                               acc);
    default: return _mm256_fmadd_ps(mw, sa, _mm256_fmadd_ps(f, _mm256_mul_ps(dw, da), acc));
    }
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256i lanes_below(int nv) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(nv), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* One group of 8 blocks (nv valid) of one row, into the accumulator. */
static inline __attribute__((always_inline)) __m256
dot_group(int type, __m256 acc, const uint8_t *row, int g, int nv, const int8_t *qa, const float *da,
          const float *sa) {
    const int bb = BLK_BYTES[type];
    const __m256i offs = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bb));
    {
        const uint8_t *gp = row + (size_t)g * bb;
        __m256i p[8];
        for (int k = 0; k < 8 * bb; k += 64) _mm_prefetch((const char *)gp + PF_DIST + k, _MM_HINT_T0);
        if (nv == 8) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) p[j] = block_dot(type, gp + j * bb, qa + (g + j) * QK);
        } else {
            for (int j = 0; j < 8; j++)
                p[j] = j < nv ? block_dot(type, gp + j * bb, qa + (g + j) * QK) : _mm256_setzero_si256();
        }
        __m256i isum = tree8(p);
        __m256i valid = lanes_below(nv);
        /* 4 bytes at each block start: d (and m for Q4_1) */
        __m256i dm = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)gp, offs, valid, 1);
        __m128i dh = _mm_packus_epi32(_mm256_castsi256_si128(_mm256_and_si256(dm, _mm256_set1_epi32(0xffff))),
                                      _mm256_extracti128_si256(_mm256_and_si256(dm, _mm256_set1_epi32(0xffff)), 1));
        __m256 dw = _mm256_cvtph_ps(dh), mw = _mm256_setzero_ps();
        if (type == T_Q4_1) {
            __m256i mh = _mm256_srli_epi32(dm, 16);
            mw = _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(mh), _mm256_extracti128_si256(mh, 1)));
        }
        __m256 dav = _mm256_maskload_ps(da + g, valid), sav = _mm256_maskload_ps(sa + g, valid);
        acc = fstage(type, acc, isum, dw, mw, dav, sav);
    }
    return acc;
}

/* NS rows against one Q8A activation row (qa, da, sa of nb blocks), group
 * by group in lockstep: the same operations per row as one at a time, but
 * NS memory streams (see cpu/avx512/matmul_q.c: dot_mv_ns). */
enum { NS = 4 };

static inline __attribute__((always_inline)) void
dot_rows(int type, int ns, const uint8_t *const rows[NS], const int8_t *qa, const float *da,
         const float *sa, int nb, float out[NS]) {
    __m256 acc[NS];
#pragma GCC unroll 4
    for (int s = 0; s < ns; s++) acc[s] = _mm256_setzero_ps();
    for (int g = 0; g < nb; g += 8) {
        int nv = nb - g < 8 ? nb - g : 8;
#pragma GCC unroll 4
        for (int s = 0; s < ns; s++) acc[s] = dot_group(type, acc[s], rows[s], g, nv, qa, da, sa);
    }
#pragma GCC unroll 4
    for (int s = 0; s < ns; s++) out[s] = hsum8(acc[s]);
}

enum { ROW_BLOCK_BYTES = 16 << 10 }; /* rows swept over all tokens at a time */

static inline __attribute__((always_inline)) void
matmul_q(int type, float *restrict y, size_t ldy, const void *restrict w, size_t ws,
         const void *restrict x, size_t xs, int n, int n_tokens, int r0, int r1) {
    const int nb = n / QK;
    const uint8_t *wb = w, *xb = x;
    int rb = (int)(ROW_BLOCK_BYTES / (ws ? ws : 1));
    if (rb < 1) rb = 1;
    if (n_tokens == 1) rb = r1 - r0;
    for (int ra = r0; ra < r1; ra += rb) {
        int re = r1 - ra < rb ? r1 : ra + rb;
        for (int t = 0; t < n_tokens; t++) {
            const uint8_t *xt = xb + (size_t)t * xs;
            const int8_t *qa = (const int8_t *)xt;
            const float *da = (const float *)(xt + n), *sa = da + nb;
            float *yt = y + (size_t)t * ldy;
            const int q = (re - ra) / NS;
            for (int i = 0; i < q; i++) {
                const uint8_t *rows[NS];
                float out[NS];
                for (int s = 0; s < NS; s++) rows[s] = wb + (size_t)(ra + s * q + i) * ws;
                dot_rows(type, NS, rows, qa, da, sa, nb, out);
                for (int s = 0; s < NS; s++) yt[ra + s * q + i] = out[s];
            }
            for (int r = ra + NS * q; r < re; r++) {
                const uint8_t *rows[NS] = {wb + (size_t)r * ws};
                float out[NS];
                dot_rows(type, 1, rows, qa, da, sa, nb, out);
                yt[r] = out[0];
            }
        }
    }
}

#define DEFINE_MATMUL_Q(NAME, TYPE) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        matmul_q(TYPE, y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1); \
    }

DEFINE_MATMUL_Q(kn_matmul_q8_0_avx2, T_Q8_0)
DEFINE_MATMUL_Q(kn_matmul_q4_0_avx2, T_Q4_0)
DEFINE_MATMUL_Q(kn_matmul_q4_1_avx2, T_Q4_1)
