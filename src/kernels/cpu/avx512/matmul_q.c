/*
 * matmul_q.c (avx512) - Q4_0, Q4_1 and Q8_0 weights times Q8A activations
 * with AVX-512 VNNI (vpdpbusd). The specification is cpu/ref/matmul.c.
 *
 * Numerics. The integer dot of one block, isum = sum(qw * qa) over 32
 * elements, is exact in int32 whatever the summation order. Blocks are then
 * combined in float 16 at a time ("group": one zmm lane per block, lanes in
 * the order PI below), and the 16 lanes are summed once at the end of the
 * row with a fixed tree. That float stage is the one function fstage(), fed
 * the same inputs by both shapes of the kernel, so y(t, r) is bit-identical
 * whatever n_tokens, r0 and r1 are (batch invariance, kernels/ops.h), even
 * though the two shapes compute isum differently:
 *   - matvec, one token at a time: weights are read in their GGUF layout;
 *     the qs of 4 blocks are permuted into one zmm (one block per 128-bit
 *     lane), dotted against the activation arranged the same way, and the 4
 *     partial dwords of each block are summed by an unpack tree (tree4).
 *   - tiled, several tokens: a tile of up to 4 weight rows is expanded once
 *     into stack scratch in transposed form (dword k of lane l = elements
 *     4k..4k+3 of block PI(l)); the token rows likewise, so 8 vpdpbusd per
 *     (token, row, group) give the 16 block sums with no reduction, and each
 *     expanded weight row serves every token of the chunk.
 * Float stage, per lane (a block b of weight row r and token t):
 *   Q8_0: acc = fma(float(isum), dw*da, acc)
 *   Q4_0: acc = fma(dw, fma(da, float(isum), -8*sa), acc)
 *   Q4_1: acc = fma(mw, sa, fma(float(isum), dw*da, acc))
 * It differs from the reference's sequential per-block sum by rounding only
 * (tests/unit_kernels.c bounds it). These files are built with -std=c11,
 * so GCC does not contract the separate mul/add intrinsics into FMAs
 * (-ffp-contract=off): the code below is the reduction order.
 *
 * vpdpbusd multiplies unsigned by signed bytes. Q4 nibbles (0..15) are the
 * unsigned operand as they are. Q8_0 weights are biased by 128 (xor 0x80)
 * and the bias is removed exactly with the activation block's integer sum:
 * sum((w + 128) * a) - 128 * sum(a).
 */
#include <immintrin.h>

#include "kernels/cpu/avx512/avx512.h"
#include "kernels/cpu/ref/ref.h"

/* Lane l of a group holds block PI[l]: lane 4L+m <-> block 4m+L. It is the
 * order tree4() and transpose4() produce for free; an involution. */
static const int32_t PI[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* vpermt2d/w indices that pull the qs of blocks 4m..4m+3 out of the group's
 * raw bytes, one block per 128-bit lane (see load_h_*). */
#define Q41I(m, j) (5 * (4 * (m) + (j) / 4) + 1 + (j) % 4 - 16 * (m))
#define Q41ROW(m) \
    {Q41I(m, 0), Q41I(m, 1), Q41I(m, 2), Q41I(m, 3), Q41I(m, 4), Q41I(m, 5), \
     Q41I(m, 6), Q41I(m, 7), Q41I(m, 8), Q41I(m, 9), Q41I(m, 10), Q41I(m, 11), \
     Q41I(m, 12), Q41I(m, 13), Q41I(m, 14), Q41I(m, 15)}
static const int32_t IDX_Q4_1[4][16] = {Q41ROW(0), Q41ROW(1), Q41ROW(2), Q41ROW(3)};

#define Q40I(m, p) (9 * (4 * (m) + (p) / 8) + 1 + (p) % 8 - 32 * (m))
#define Q40R8(m, b) Q40I(m, b), Q40I(m, b + 1), Q40I(m, b + 2), Q40I(m, b + 3), \
                    Q40I(m, b + 4), Q40I(m, b + 5), Q40I(m, b + 6), Q40I(m, b + 7)
#define Q40ROW(m) {Q40R8(m, 0), Q40R8(m, 8), Q40R8(m, 16), Q40R8(m, 24)}
static const int16_t IDX_Q4_0[4][32] = {Q40ROW(0), Q40ROW(1), Q40ROW(2), Q40ROW(3)};

#define Q80I(p) (17 * ((p) / 8) + 1 + (p) % 8)
#define Q80R8(b) Q80I(b), Q80I(b + 1), Q80I(b + 2), Q80I(b + 3), \
                 Q80I(b + 4), Q80I(b + 5), Q80I(b + 6), Q80I(b + 7)
static const int16_t IDX_Q8_0[32] = {Q80R8(0), Q80R8(8), Q80R8(16), Q80R8(24)};

enum { GB = 16 };              /* blocks per group */
enum { T_Q8_0, T_Q4_0, T_Q4_1 };

static const int BLK_BYTES[3] = {34, 18, 20};

/* One group of 16 blocks of one activation row, prepared per call. */
struct agrp {
    __m512i q[8];  /* matvec: q[m] / q[4+m] = elements 0..15 / 16..31 of
                      blocks 4m..4m+3, one per 128-bit lane;
                      tiled: q[k] lane l = elements 4k..4k+3 of block PI[l] */
    __m512 da, sa; /* PI order; 0 past the row's last block */
    __m512i sum;   /* PI order: integer sum of the block's qa */
};

/* One group of 16 blocks of one weight row, expanded for the tiled path. */
struct wgrp {
    __m512i q[8];  /* lane l = weights (as u8) of elements 4k..4k+3 of block PI[l] */
    __m512 dw, mw; /* PI order; mw only for Q4_1 */
};

/* ---------------------------------------------------------------------- */
/* small helpers */

static inline __mmask64 bmask(int nbytes) {
    if (nbytes <= 0) return 0;
    if (nbytes >= 64) return ~(__mmask64)0;
    return ((__mmask64)1 << nbytes) - 1;
}
static inline __mmask32 wmask(int nwords) {
    if (nwords <= 0) return 0;
    if (nwords >= 32) return ~(__mmask32)0;
    return ((__mmask32)1 << nwords) - 1;
}
static inline __mmask16 dmask(int ndwords) {
    if (ndwords <= 0) return 0;
    if (ndwords >= 16) return (__mmask16)0xffff;
    return (__mmask16)((1u << ndwords) - 1);
}

/* r lane 4L+m = sum of the 4 dwords of 128-bit lane L of p[m]. */
static inline __m512i tree4(__m512i p0, __m512i p1, __m512i p2, __m512i p3) {
    __m512i q01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
    __m512i q23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p2, p3), _mm512_unpackhi_epi32(p2, p3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(q01, q23), _mm512_unpackhi_epi64(q01, q23));
}

/* g[j] lane 4L+m = dword j of 128-bit lane L of h[m] (4x4 transposes). */
static inline void transpose4(const __m512i h[4], __m512i g[4]) {
    __m512i t0 = _mm512_unpacklo_epi32(h[0], h[1]), t1 = _mm512_unpackhi_epi32(h[0], h[1]);
    __m512i t2 = _mm512_unpacklo_epi32(h[2], h[3]), t3 = _mm512_unpackhi_epi32(h[2], h[3]);
    g[0] = _mm512_unpacklo_epi64(t0, t2);
    g[1] = _mm512_unpackhi_epi64(t0, t2);
    g[2] = _mm512_unpacklo_epi64(t1, t3);
    g[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The float stage: the one place blocks are combined (see the header). */
static inline __attribute__((always_inline)) __m512
fstage(int type, __m512 acc, __m512i isum, __m512 dw, __m512 mw, __m512 da, __m512 sa) {
    __m512 f = _mm512_cvtepi32_ps(isum);
    switch (type) {
    case T_Q8_0: return _mm512_fmadd_ps(f, _mm512_mul_ps(dw, da), acc);
    case T_Q4_0:
        return _mm512_fmadd_ps(dw, _mm512_fmadd_ps(da, f, _mm512_mul_ps(sa, _mm512_set1_ps(-8.0f))),
                               acc);
    default: return _mm512_fmadd_ps(mw, sa, _mm512_fmadd_ps(f, _mm512_mul_ps(dw, da), acc));
    }
}

/* ---------------------------------------------------------------------- */
/* weights: raw group bytes -> per-lane qs and scales */

/* h[m] (m = 0..3), 128-bit lane L: the 16 qs bytes of block 4m+L (Q4: the
 * nibble bytes; Q8_0: hl = elements 0..15, hh = 16..31). nv valid blocks;
 * the rest read as zero. */
static inline __attribute__((always_inline)) void
load_h(int type, const uint8_t *g, int nv, __m512i hl[4], __m512i hh[4]) {
    if (type == T_Q4_1) {
        __m512i z[5];
        for (int k = 0; k < 5; k++) z[k] = _mm512_maskz_loadu_epi32(dmask(5 * nv - 16 * k), g + 64 * k);
        for (int m = 0; m < 4; m++)
            hl[m] = _mm512_permutex2var_epi32(z[m], _mm512_loadu_si512(IDX_Q4_1[m]), z[m + 1]);
    } else if (type == T_Q4_0) {
        __m512i z[5];
        for (int k = 0; k < 5; k++) z[k] = _mm512_maskz_loadu_epi16(wmask(9 * nv - 32 * k), g + 64 * k);
        for (int m = 0; m < 4; m++)
            hl[m] = _mm512_permutex2var_epi16(z[m], _mm512_loadu_si512(IDX_Q4_0[m]), z[m + 1]);
    } else {
        const __m512i idx = _mm512_loadu_si512(IDX_Q8_0);
        const __m512i bias = _mm512_set1_epi8((char)0x80);
        int v = 34 * nv;
        for (int m = 0; m < 4; m++) {
            int o = 136 * m;
            __m512i a0 = _mm512_maskz_loadu_epi8(bmask(v - o), g + o);
            __m512i a1 = _mm512_maskz_loadu_epi8(bmask(v - o - 64), g + o + 64);
            __m512i b0 = _mm512_maskz_loadu_epi8(bmask(v - o - 16), g + o + 16);
            __m512i b1 = _mm512_maskz_loadu_epi8(bmask(v - o - 80), g + o + 80);
            /* the bias also turns invalid (zero) lanes into 128: harmless,
             * the activation there is zero */
            hl[m] = _mm512_xor_si512(_mm512_permutex2var_epi16(a0, idx, a1), bias);
            hh[m] = _mm512_xor_si512(_mm512_permutex2var_epi16(b0, idx, b1), bias);
        }
    }
}

/* Scales of the group's blocks in PI order (0 for invalid blocks). */
static inline __attribute__((always_inline)) void
load_scales(int type, const uint8_t *g, int nv, __m512 *dw, __m512 *mw) {
    const __m512i pi = _mm512_loadu_si512(PI);
    __mmask16 valid = _mm512_cmplt_epi32_mask(pi, _mm512_set1_epi32(nv));
    __m512i off = _mm512_mullo_epi32(pi, _mm512_set1_epi32(BLK_BYTES[type]));
    /* 4 bytes at each block start: d (and m for Q4_1, else the first qs) */
    __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, off, g, 1);
    *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    if (type == T_Q4_1) *mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
    else *mw = _mm512_setzero_ps();
}

/* ---------------------------------------------------------------------- */
/* activations: Q8A row -> groups */

static void act_prep(struct agrp *ag, const uint8_t *x, int n, int tiled) {
    int nb = n / QK, ng = (nb + GB - 1) / GB;
    const float *d = (const float *)(x + n), *s = d + nb;
    const __m512i pi = _mm512_loadu_si512(PI);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int g = 0; g < ng; g++) {
        int nv = nb - g * GB < GB ? nb - g * GB : GB;
        const uint8_t *q = x + (size_t)g * GB * QK;
        __m512i nat[8], lo[4], hi[4], p[4];
        for (int k = 0; k < 8; k++) nat[k] = _mm512_maskz_loadu_epi8(bmask(nv * QK - 64 * k), q + 64 * k);
        for (int m = 0; m < 4; m++) {
            lo[m] = _mm512_shuffle_i32x4(nat[2 * m], nat[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0));
            hi[m] = _mm512_shuffle_i32x4(nat[2 * m], nat[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1));
            p[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo[m]),
                                       ones, hi[m]);
        }
        ag[g].sum = tree4(p[0], p[1], p[2], p[3]);
        ag[g].da = _mm512_permutexvar_ps(pi, _mm512_maskz_loadu_ps(dmask(nv), d + g * GB));
        ag[g].sa = _mm512_permutexvar_ps(pi, _mm512_maskz_loadu_ps(dmask(nv), s + g * GB));
        if (tiled) {
            transpose4(lo, ag[g].q);
            transpose4(hi, ag[g].q + 4);
        } else {
            for (int m = 0; m < 4; m++) {
                ag[g].q[m] = lo[m];
                ag[g].q[4 + m] = hi[m];
            }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* matvec: one token, rows [r0, r1) */

static inline __attribute__((always_inline)) float
dot_mv(int type, const uint8_t *row, const struct agrp *ag, int nb) {
    __m512 acc = _mm512_setzero_ps();
    const __m512i nib = _mm512_set1_epi8(0x0f);
    int gbytes = GB * BLK_BYTES[type];
    for (int g = 0; g * GB < nb; g++) {
        int nv = nb - g * GB < GB ? nb - g * GB : GB;
        const uint8_t *gp = row + (size_t)g * gbytes;
        __m512i hl[4], hh[4], p[4];
        load_h(type, gp, nv, hl, hh);
        for (int m = 0; m < 4; m++) {
            __m512i lo, hi;
            if (type == T_Q8_0) {
                lo = hl[m];
                hi = hh[m];
            } else {
                lo = _mm512_and_si512(hl[m], nib);
                hi = _mm512_and_si512(_mm512_srli_epi16(hl[m], 4), nib);
            }
            p[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, ag[g].q[m]),
                                       hi, ag[g].q[4 + m]);
        }
        __m512i isum = tree4(p[0], p[1], p[2], p[3]);
        if (type == T_Q8_0) isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(ag[g].sum, 7));
        __m512 dw, mw;
        load_scales(type, gp, nv, &dw, &mw);
        acc = fstage(type, acc, isum, dw, mw, ag[g].da, ag[g].sa);
    }
    return _mm512_reduce_add_ps(acc);
}

/* ---------------------------------------------------------------------- */
/* tiled: weight rows expanded once per token chunk */

static inline __attribute__((always_inline)) void
wprep(int type, struct wgrp *wg, const uint8_t *row, int nb) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    int gbytes = GB * BLK_BYTES[type];
    for (int g = 0; g * GB < nb; g++) {
        int nv = nb - g * GB < GB ? nb - g * GB : GB;
        const uint8_t *gp = row + (size_t)g * gbytes;
        __m512i hl[4], hh[4], t[4];
        load_h(type, gp, nv, hl, hh);
        if (type == T_Q8_0) {
            transpose4(hl, wg[g].q);
            transpose4(hh, wg[g].q + 4);
        } else {
            transpose4(hl, t);
            for (int j = 0; j < 4; j++) {
                wg[g].q[j] = _mm512_and_si512(t[j], nib);
                wg[g].q[4 + j] = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), nib);
            }
        }
        load_scales(type, gp, nv, &wg[g].dw, &wg[g].mw);
    }
}

/* mt tokens x nr rows; ag: mt token rows of ng groups, wg: nr weight rows. */
static inline __attribute__((always_inline)) void
tile(int type, int mt, int nr, const struct wgrp *wg, const struct agrp *ag, int ng, float *y,
     size_t ldy) {
    __m512 facc[4][4];
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) facc[t][r] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i acc[4][4];
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++)
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[t][r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i wk[4];
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) wk[r] = wg[r * ng + g].q[k];
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++) {
                __m512i a = ag[t * ng + g].q[k];
#pragma GCC unroll 4
                for (int r = 0; r < nr; r++) acc[t][r] = _mm512_dpbusd_epi32(acc[t][r], wk[r], a);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++) {
            const struct agrp *a = &ag[t * ng + g];
            __m512i corr = _mm512_slli_epi32(a->sum, 7);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                const struct wgrp *w = &wg[r * ng + g];
                __m512i isum = acc[t][r];
                if (type == T_Q8_0) isum = _mm512_sub_epi32(isum, corr);
                facc[t][r] = fstage(type, facc[t][r], isum, w->dw, w->mw, a->da, a->sa);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) y[(size_t)t * ldy + r] = _mm512_reduce_add_ps(facc[t][r]);
}

#define TILE_CASE(MT, NR) \
    case (MT) * 8 + (NR): tile(type, MT, NR, wg, ag, ng, y, ldy); break;

static inline __attribute__((always_inline)) void
tile_any(int type, int mt, int nr, const struct wgrp *wg, const struct agrp *ag, int ng, float *y,
         size_t ldy) {
    switch (mt * 8 + nr) {
        TILE_CASE(4, 4) TILE_CASE(4, 3) TILE_CASE(4, 2) TILE_CASE(4, 1)
        TILE_CASE(3, 4) TILE_CASE(3, 3) TILE_CASE(3, 2) TILE_CASE(3, 1)
        TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
        TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
    default: break;
    }
}

/* ---------------------------------------------------------------------- */
/* drivers */

enum {
    MV_MAX_GROUPS = 128,       /* matvec: n <= 65536 */
    TILE_MAX_GROUPS = 16,      /* tiled: n <= 8192, else matvec per token */
    TILE_ACT_BYTES = 48 << 10, /* activation scratch of one token chunk */
    TILE_MIN_TOKENS = 2,
};
#define TILE_MAX_ACT (TILE_ACT_BYTES / (int)sizeof(struct agrp))

static inline __attribute__((always_inline)) void
matmul_q(int type, float *restrict y, size_t ldy, const void *restrict w, size_t w_stride,
         const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) {
    int nb = n / QK, ng = (nb + GB - 1) / GB;
    const uint8_t *wb = w, *xb = x;
    if (r0 >= r1 || n_tokens <= 0) return;
    if (ng > TILE_MAX_GROUPS || n_tokens < TILE_MIN_TOKENS) {
        struct agrp ag[MV_MAX_GROUPS];
        for (int t = 0; t < n_tokens; t++) {
            float *yt = y + (size_t)t * ldy;
            act_prep(ag, xb + (size_t)t * x_stride, n, 0);
            for (int r = r0; r < r1; r++) yt[r] = dot_mv(type, wb + (size_t)r * w_stride, ag, nb);
        }
        return;
    }
    struct agrp ag[TILE_MAX_ACT];
    struct wgrp wg[4 * TILE_MAX_GROUPS];
    int tc = (TILE_MAX_ACT / ng) & ~3;
    if (tc > 64) tc = 64;
    for (int t0 = 0; t0 < n_tokens; t0 += tc) {
        int nt = n_tokens - t0 < tc ? n_tokens - t0 : tc;
        for (int t = 0; t < nt; t++) act_prep(ag + t * ng, xb + (size_t)(t0 + t) * x_stride, n, 1);
        for (int rt = r0; rt < r1; rt += 4) {
            int nr = r1 - rt < 4 ? r1 - rt : 4;
            for (int r = 0; r < nr; r++) wprep(type, wg + r * ng, wb + (size_t)(rt + r) * w_stride, nb);
            for (int t = 0; t < nt; t += 4) {
                int mt = nt - t < 4 ? nt - t : 4;
                tile_any(type, mt, nr, wg, ag + t * ng, ng, y + (size_t)(t0 + t) * ldy + rt, ldy);
            }
        }
    }
}

#define DEFINE_MATMUL_Q(NAME, TYPE, REF) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        if (n / QK > MV_MAX_GROUPS * GB) { /* beyond any model; the reference is exact too */ \
            REF(y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1); \
            return; \
        } \
        matmul_q(TYPE, y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1); \
    }

DEFINE_MATMUL_Q(kn_matmul_q8_0_avx512, T_Q8_0, kn_matmul_q8_0_ref)
DEFINE_MATMUL_Q(kn_matmul_q4_0_avx512, T_Q4_0, kn_matmul_q4_0_ref)
DEFINE_MATMUL_Q(kn_matmul_q4_1_avx512, T_Q4_1, kn_matmul_q4_1_ref)
