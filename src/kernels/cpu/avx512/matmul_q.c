/*
 * matmul_q.c (avx512) - Q4_0, Q4_1 and Q8_0 weights times Q8A activations
 * with AVX-512 VNNI (vpdpbusd). The specification is cpu/ref/matmul.c.
 *
 * Numerics. The integer dot of one block, isum = sum(qw * qa) over 32
 * elements, is exact in int32 whatever the summation order. Blocks are then
 * combined in float 16 at a time ("group": one zmm lane per block, lanes in
 * the order PI below), and the 16 lanes are summed once at the end of the
 * row with a fixed tree. That float stage is the one function fstage(), fed
 * the same inputs by every shape of the kernel, so y(t, r) is bit-identical
 * whatever n_tokens, r0 and r1 are (batch invariance, kernels/ops.h), even
 * though the shapes compute isum differently:
 *   - matvec, one token at a time: weights are read in their GGUF layout;
 *     the qs of 4 blocks are permuted into one zmm (one block per 128-bit
 *     lane, "H layout"), dotted against the activation arranged the same way,
 *     and the 4 partial dwords of each block are summed by an unpack tree.
 *   - tiled, several tokens: a tile of up to 4 weight rows is expanded once
 *     into stack scratch in transposed form (dword k of lane l = elements
 *     4k..4k+3 of block PI[l]), the token rows likewise, so 8 vpdpbusd per
 *     (token, row, group) give the 16 block sums with no reduction, and each
 *     expanded weight row serves every token of the chunk.
 *   - a last group of at most 4 blocks (n = 576 has 16 + 2) stays in the H
 *     layout in both shapes: 2 vpdpbusd and an in-lane sum instead of 8.
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
 *
 * Scratch lives on the stack (about 90 KB per call, see matmul_q()): the
 * kernels allocate nothing, and pool threads have the default stack.
 */
#include <immintrin.h>

#include "kernels/cpu/avx512/avx512.h"
#include "kernels/cpu/ref/ref.h"

/* Lane l of a group holds block PI(l): lane 4L+m <-> block 4m+L. It is the
 * order tree4() and transpose4() produce for free; an involution. */
#define PI_(l) (4 * ((l) % 4) + (l) / 4)
#define L16(F) {F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8), F(9), F(10), F(11), \
                F(12), F(13), F(14), F(15)}
static const int32_t PI[16] = L16(PI_);

/* vpermt2d/w indices that pull the qs of blocks 4m..4m+3 out of the group's
 * raw bytes, one block per 128-bit lane (see load_group). Q4_1 blocks are 5
 * dwords (d, m, 4 dwords of qs); Q4_0 9 words (d, 8 words of qs); Q8_0 17
 * words (d, 16 words of qs). */
#define Q41I(m, j) (5 * (4 * (m) + (j) / 4) + 1 + (j) % 4 - 16 * (m))
#define Q41I0(j) Q41I(0, j)
#define Q41I1(j) Q41I(1, j)
#define Q41I2(j) Q41I(2, j)
#define Q41I3(j) Q41I(3, j)
static const int32_t IDX_Q4_1[4][16] = {L16(Q41I0), L16(Q41I1), L16(Q41I2), L16(Q41I3)};

#define L32(F) {F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8), F(9), F(10), F(11), \
                F(12), F(13), F(14), F(15), F(16), F(17), F(18), F(19), F(20), F(21), F(22), \
                F(23), F(24), F(25), F(26), F(27), F(28), F(29), F(30), F(31)}
#define Q40I(m, p) (9 * (4 * (m) + (p) / 8) + 1 + (p) % 8 - 32 * (m))
#define Q40I0(p) Q40I(0, p)
#define Q40I1(p) Q40I(1, p)
#define Q40I2(p) Q40I(2, p)
#define Q40I3(p) Q40I(3, p)
static const int16_t IDX_Q4_0[4][32] = {L32(Q40I0), L32(Q40I1), L32(Q40I2), L32(Q40I3)};

#define Q80I(p) (17 * ((p) / 8) + 1 + (p) % 8)
static const int16_t IDX_Q8_0[32] = L32(Q80I);

/* Scales of a full group, lane l = block PI(l), pulled from the raw group
 * registers in three pieces (A: first two, B: next two, C: last register)
 * and blended with the masks below (lanes whose block lies in B / C). */
#define Q41SA(l) (PI_(l) <= 6 ? 5 * PI_(l) : 0)
#define Q41SB(l) (PI_(l) >= 7 && PI_(l) <= 12 ? 5 * PI_(l) - 32 : 0)
#define Q41SC(l) (PI_(l) >= 13 ? 5 * PI_(l) - 64 : 0)
static const int32_t SIDX_Q4_1[3][16] = {L16(Q41SA), L16(Q41SB), L16(Q41SC)};
#define Q40SA(l) ((l) < 16 && PI_(l) <= 7 ? 9 * PI_(l) : 0)
#define Q40SB(l) ((l) < 16 && PI_(l) >= 8 && PI_(l) <= 14 ? 9 * PI_(l) - 64 : 0)
#define Q40SC(l) ((l) < 16 && PI_(l) >= 15 ? 9 * PI_(l) - 128 : 0)
static const int16_t SIDX_Q4_0[3][32] = {L32(Q40SA), L32(Q40SB), L32(Q40SC)};
#define LANES_WHERE(C) \
    ((C(0) << 0) | (C(1) << 1) | (C(2) << 2) | (C(3) << 3) | (C(4) << 4) | (C(5) << 5) | \
     (C(6) << 6) | (C(7) << 7) | (C(8) << 8) | (C(9) << 9) | (C(10) << 10) | (C(11) << 11) | \
     (C(12) << 12) | (C(13) << 13) | (C(14) << 14) | (C(15) << 15))
#define Q41MB(l) (PI_(l) >= 7 && PI_(l) <= 12 ? 1u : 0u)
#define Q41MC(l) (PI_(l) >= 13 ? 1u : 0u)
#define Q40MB(l) (PI_(l) >= 8 && PI_(l) <= 14 ? 1u : 0u)
#define Q40MC(l) (PI_(l) >= 15 ? 1u : 0u)

/* Q8_0: d of block 4m+L (word 17L of the window at block 4m) to lane 4L+m;
 * the four windows' results are blended by lane % 4. Tails of <= 4 blocks:
 * block b to lane 4b (= PI^-1(b)) for every type. */
#define Q80S(p) ((p) < 16 ? 17 * ((p) / 4) : 0)
static const int16_t SIDX_Q8_0[32] = L32(Q80S);
#define T4S41(l) ((l) % 4 == 0 ? 5 * ((l) / 4) : 0)
#define T4S40(p) ((p) < 16 && (p) % 4 == 0 ? 9 * ((p) / 4) : 0)
#define T4S80(p) ((p) < 16 && (p) % 4 == 0 ? 17 * ((p) / 4) : 0)
static const int32_t T4IDX_Q4_1[16] = L16(T4S41);
static const int16_t T4IDX_Q4_0[32] = L32(T4S40);
static const int16_t T4IDX_Q8_0[32] = L32(T4S80);
/* lanes 4b for the nv (<= 4) valid blocks of a tail */
static inline __mmask16 tail4_lanes(int nv) {
    return (__mmask16)(0x1111 & ((1u << (4 * nv)) - 1));
}

enum { GB = 16 }; /* blocks per group */

/* Software prefetch distance for weight rows, which are read once per call
 * as one contiguous stream. The hardware prefetcher stops at 4 KB page
 * boundaries, so the prefetch runs a page ahead: ~1.5x on cold (streamed)
 * weights, 1 thread, SmolLM2 lm_head, Q4_1 and Q8_0; of distances of 1-16
 * KB, 4 KB is best or close to it (commit 9faad9c). */
enum { PF_DIST = 4096 };

static inline __attribute__((always_inline)) void prefetch_group(const uint8_t *gp, int gbytes) {
    for (int k = 0; k < gbytes; k += 64) _mm_prefetch((const char *)gp + PF_DIST + k, _MM_HINT_T0);
}
enum { T_Q8_0, T_Q4_0, T_Q4_1 };
/* how much of a group is valid: all 16 blocks, at most 4 (H layout only),
 * or anything else (masked) */
enum { G_FULL, G_TAIL4, G_TAIL };

static const int BLK_BYTES[3] = {34, 18, 20};

/* One group of 16 blocks of one activation row, prepared per call. */
struct agrp {
    __m512i q[8];  /* H layout (matvec, and a tail of <= 4 blocks): q[m] / q[4+m] =
                      elements 0..15 / 16..31 of blocks 4m..4m+3, one per 128-bit lane;
                      transposed (tiled): q[k] lane l = elements 4k..4k+3 of block PI(l) */
    __m512 da, sa; /* PI order; 0 past the row's last block */
    __m512i sum;   /* PI order: integer sum of the block's qa */
};

/* One group of 16 blocks of one weight row, expanded for the tiled path. */
struct wgrp {
    __m512i q[8];  /* as agrp.q, weights as u8 (Q4: 0..15, Q8_0: biased) */
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

/* tree4(p0, 0, 0, 0) for a tail of <= 4 blocks: lane 4L = sum of lane L's
 * 4 dwords, other lanes 0. */
static inline __m512i tree1(__m512i p0) {
    __m512i s = _mm512_add_epi32(p0, _mm512_shuffle_epi32(p0, _MM_PERM_BADC));
    s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
    return _mm512_maskz_mov_epi32(0x1111, s);
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
/* weights: raw group bytes -> H layout and scales */

/* One group of one weight row in H layout: hl[m] / hh[m], 128-bit lane L =
 * block 4m+L: Q4: hl = its 16 nibble bytes (hh unused); Q8_0: hl / hh =
 * elements 0..15 / 16..31, biased. dw, mw: scales in PI order. Invalid
 * blocks read as zero (Q8_0: as the bias). G_TAIL4 fills only m = 0. */
struct graw {
    __m512i hl[4], hh[4];
    __m512 dw, mw;
};

static inline __attribute__((always_inline)) __m512i
mload32(int mode, const uint8_t *p, int ndwords) {
    return mode == G_FULL ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(dmask(ndwords), p);
}

static inline __attribute__((always_inline)) void
scales_gather(int type, const uint8_t *g, int nv, struct graw *o) {
    const __m512i pi = _mm512_loadu_si512(PI);
    __mmask16 valid = _mm512_cmplt_epi32_mask(pi, _mm512_set1_epi32(nv));
    __m512i off = _mm512_mullo_epi32(pi, _mm512_set1_epi32(BLK_BYTES[type]));
    /* 4 bytes at each block start: d (and m for Q4_1, else the first qs) */
    __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, off, g, 1);
    o->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    o->mw = type == T_Q4_1 ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)))
                           : _mm512_setzero_ps();
}

static inline __attribute__((always_inline)) void
load_group(int type, int mode, const uint8_t *g, int nv, struct graw *o) {
    const int nm = mode == G_TAIL4 ? 1 : 4;
    if (mode == G_FULL) nv = GB;
    if (type == T_Q4_1) {
        __m512i z[5];
#pragma GCC unroll 8
        for (int k = 0; k < 5; k++) z[k] = mload32(mode, g + 64 * k, 5 * nv - 16 * k);
#pragma GCC unroll 8
        for (int m = 0; m < nm; m++)
            o->hl[m] = _mm512_permutex2var_epi32(z[m], _mm512_loadu_si512(IDX_Q4_1[m]), z[m + 1]);
        if (mode == G_FULL) {
            __m512i a = _mm512_permutex2var_epi32(z[0], _mm512_loadu_si512(SIDX_Q4_1[0]), z[1]);
            __m512i b = _mm512_permutex2var_epi32(z[2], _mm512_loadu_si512(SIDX_Q4_1[1]), z[3]);
            __m512i c = _mm512_permutexvar_epi32(_mm512_loadu_si512(SIDX_Q4_1[2]), z[4]);
            a = _mm512_mask_blend_epi32((__mmask16)LANES_WHERE(Q41MB), a, b);
            a = _mm512_mask_blend_epi32((__mmask16)LANES_WHERE(Q41MC), a, c);
            o->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(a));
            o->mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(a, 16)));
        } else if (mode == G_TAIL4) {
            __m512i a = _mm512_maskz_permutexvar_epi32(tail4_lanes(nv), _mm512_loadu_si512(T4IDX_Q4_1), z[0]);
            o->dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(a));
            o->mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(a, 16)));
        } else {
            scales_gather(type, g, nv, o);
        }
    } else if (type == T_Q4_0) {
        __m512i z[5];
#pragma GCC unroll 8
        for (int k = 0; k < 5; k++) /* a group is 288 bytes: the last load is masked */
            z[k] = mode == G_FULL && k < 4 ? _mm512_loadu_si512(g + 64 * k)
                                           : _mm512_maskz_loadu_epi16(wmask(9 * nv - 32 * k), g + 64 * k);
#pragma GCC unroll 8
        for (int m = 0; m < nm; m++)
            o->hl[m] = _mm512_permutex2var_epi16(z[m], _mm512_loadu_si512(IDX_Q4_0[m]), z[m + 1]);
        if (mode == G_FULL) {
            __m512i a = _mm512_permutex2var_epi16(z[0], _mm512_loadu_si512(SIDX_Q4_0[0]), z[1]);
            __m512i b = _mm512_permutex2var_epi16(z[2], _mm512_loadu_si512(SIDX_Q4_0[1]), z[3]);
            __m512i c = _mm512_permutexvar_epi16(_mm512_loadu_si512(SIDX_Q4_0[2]), z[4]);
            a = _mm512_mask_blend_epi16((__mmask32)LANES_WHERE(Q40MB), a, b);
            a = _mm512_mask_blend_epi16((__mmask32)LANES_WHERE(Q40MC), a, c);
            o->dw = _mm512_cvtph_ps(_mm512_castsi512_si256(a));
            o->mw = _mm512_setzero_ps();
        } else if (mode == G_TAIL4) {
            __m512i a = _mm512_maskz_permutexvar_epi16(tail4_lanes(nv), _mm512_loadu_si512(T4IDX_Q4_0), z[0]);
            o->dw = _mm512_cvtph_ps(_mm512_castsi512_si256(a));
            o->mw = _mm512_setzero_ps();
        } else {
            scales_gather(type, g, nv, o);
        }
    } else {
        const __m512i idx = _mm512_loadu_si512(IDX_Q8_0);
        const __m512i sidx = _mm512_loadu_si512(mode == G_FULL ? SIDX_Q8_0 : T4IDX_Q8_0);
        const __m512i bias = _mm512_set1_epi8((char)0x80);
        const int v = 34 * nv;
        __m512i d = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int m = 0; m < nm; m++) {
            const int o0 = 136 * m;
            __m512i a0, a1, b0, b1;
            if (mode == G_FULL) { /* a group is 544 bytes: only the very last load is masked */
                a0 = _mm512_loadu_si512(g + o0);
                a1 = _mm512_loadu_si512(g + o0 + 64);
                b0 = _mm512_loadu_si512(g + o0 + 16);
                b1 = m < 3 ? _mm512_loadu_si512(g + o0 + 80)
                           : _mm512_maskz_loadu_epi8(bmask(544 - o0 - 80), g + o0 + 80);
            } else {
                a0 = _mm512_maskz_loadu_epi8(bmask(v - o0), g + o0);
                a1 = _mm512_maskz_loadu_epi8(bmask(v - o0 - 64), g + o0 + 64);
                b0 = _mm512_maskz_loadu_epi8(bmask(v - o0 - 16), g + o0 + 16);
                b1 = _mm512_maskz_loadu_epi8(bmask(v - o0 - 80), g + o0 + 80);
            }
            /* the bias also turns invalid (zero) lanes into 128: harmless,
             * the activation there is zero */
            o->hl[m] = _mm512_xor_si512(_mm512_permutex2var_epi16(a0, idx, a1), bias);
            o->hh[m] = _mm512_xor_si512(_mm512_permutex2var_epi16(b0, idx, b1), bias);
            if (mode == G_FULL) {
                __m512i dm = _mm512_permutex2var_epi16(a0, sidx, a1);
                d = m == 0 ? dm : _mm512_mask_blend_epi16((__mmask32)(0x1111u << m), d, dm);
            } else if (mode == G_TAIL4) {
                d = _mm512_maskz_permutex2var_epi16(tail4_lanes(nv), a0, sidx, a1);
            }
        }
        if (mode == G_TAIL) {
            scales_gather(type, g, nv, o);
        } else {
            o->dw = _mm512_cvtph_ps(_mm512_castsi512_si256(d));
            o->mw = _mm512_setzero_ps();
        }
    }
}

/* Q4 H-layout nibble bytes -> elements 0..15 (lo) and 16..31 (hi). */
static inline void nibbles(__m512i h, __m512i *lo, __m512i *hi) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    *lo = _mm512_and_si512(h, nib);
    *hi = _mm512_and_si512(_mm512_srli_epi16(h, 4), nib);
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
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) nat[k] = _mm512_maskz_loadu_epi8(bmask(nv * QK - 64 * k), q + 64 * k);
#pragma GCC unroll 8
        for (int m = 0; m < 4; m++) {
            lo[m] = _mm512_shuffle_i32x4(nat[2 * m], nat[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0));
            hi[m] = _mm512_shuffle_i32x4(nat[2 * m], nat[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1));
            p[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo[m]),
                                       ones, hi[m]);
        }
        ag[g].sum = tree4(p[0], p[1], p[2], p[3]);
        ag[g].da = _mm512_permutexvar_ps(pi, _mm512_maskz_loadu_ps(dmask(nv), d + g * GB));
        ag[g].sa = _mm512_permutexvar_ps(pi, _mm512_maskz_loadu_ps(dmask(nv), s + g * GB));
        if (tiled && nv > 4) {
            transpose4(lo, ag[g].q);
            transpose4(hi, ag[g].q + 4);
        } else {
#pragma GCC unroll 8
            for (int m = 0; m < 4; m++) {
                ag[g].q[m] = lo[m];
                ag[g].q[4 + m] = hi[m];
            }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* matvec: one token, rows [r0, r1) */

/* isum of one group in H layout (nm = 4, or 1 for a tail of <= 4 blocks) */
static inline __attribute__((always_inline)) __m512i
isum_h(int type, int nm, const struct graw *w, const struct agrp *a) {
    __m512i p[4];
#pragma GCC unroll 8
    for (int m = 0; m < nm; m++) {
        __m512i lo, hi;
        if (type == T_Q8_0) {
            lo = w->hl[m];
            hi = w->hh[m];
        } else {
            nibbles(w->hl[m], &lo, &hi);
        }
        p[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a->q[m]), hi,
                                   a->q[4 + m]);
    }
    __m512i isum = nm == 1 ? tree1(p[0]) : tree4(p[0], p[1], p[2], p[3]);
    if (type == T_Q8_0) isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(a->sum, 7));
    return isum;
}

static inline __attribute__((always_inline)) float
dot_mv(int type, const uint8_t *row, const struct agrp *ag, int nb) {
    __m512 acc = _mm512_setzero_ps();
    const int gbytes = GB * BLK_BYTES[type], nfull = nb / GB, tail = nb % GB;
    struct graw w;
    for (int g = 0; g < nfull; g++) {
        const uint8_t *gp = row + (size_t)g * gbytes;
        prefetch_group(gp, gbytes);
        load_group(type, G_FULL, gp, GB, &w);
        acc = fstage(type, acc, isum_h(type, 4, &w, &ag[g]), w.dw, w.mw, ag[g].da, ag[g].sa);
    }
    if (tail) {
        const uint8_t *gp = row + (size_t)nfull * gbytes;
        const struct agrp *a = &ag[nfull];
        __m512i isum;
        if (tail <= 4) {
            load_group(type, G_TAIL4, gp, tail, &w);
            isum = isum_h(type, 1, &w, a);
        } else {
            load_group(type, G_TAIL, gp, tail, &w);
            isum = isum_h(type, 4, &w, a);
        }
        acc = fstage(type, acc, isum, w.dw, w.mw, a->da, a->sa);
    }
    return _mm512_reduce_add_ps(acc);
}

/* dot_mv() of NS rows at once, group by group: the same operations per
 * row (so the same results), but NS independent memory streams, which is
 * what this memory system rewards (one prefetched stream reached ~60% of
 * the read bandwidth, four streams ~100%; see PF_DIST). */
enum { NS = 4 };

static inline __attribute__((always_inline)) void
dot_mv_ns(int type, const uint8_t *const rows[NS], const struct agrp *ag, int nb, float out[NS]) {
    __m512 acc[NS];
    const int gbytes = GB * BLK_BYTES[type], nfull = nb / GB, tail = nb % GB;
    struct graw w;
#pragma GCC unroll 4
    for (int s = 0; s < NS; s++) acc[s] = _mm512_setzero_ps();
    for (int g = 0; g < nfull; g++) {
#pragma GCC unroll 4
        for (int s = 0; s < NS; s++) {
            const uint8_t *gp = rows[s] + (size_t)g * gbytes;
            prefetch_group(gp, gbytes);
            load_group(type, G_FULL, gp, GB, &w);
            acc[s] = fstage(type, acc[s], isum_h(type, 4, &w, &ag[g]), w.dw, w.mw, ag[g].da, ag[g].sa);
        }
    }
    if (tail) {
        const struct agrp *a = &ag[nfull];
#pragma GCC unroll 4
        for (int s = 0; s < NS; s++) {
            const uint8_t *gp = rows[s] + (size_t)nfull * gbytes;
            __m512i isum;
            if (tail <= 4) {
                load_group(type, G_TAIL4, gp, tail, &w);
                isum = isum_h(type, 1, &w, a);
            } else {
                load_group(type, G_TAIL, gp, tail, &w);
                isum = isum_h(type, 4, &w, a);
            }
            acc[s] = fstage(type, acc[s], isum, w.dw, w.mw, a->da, a->sa);
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < NS; s++) out[s] = _mm512_reduce_add_ps(acc[s]);
}

/* rows [r0, r1) of one token: NS stretches of the range in lockstep, the
 * leftover rows one by one */
static inline __attribute__((always_inline)) void
matvec(int type, float *yt, const uint8_t *wb, size_t ws, const struct agrp *ag, int nb, int r0,
       int r1) {
    const int q = (r1 - r0) / NS;
    for (int i = 0; i < q; i++) {
        const uint8_t *rows[NS];
        float out[NS];
#pragma GCC unroll 4
        for (int s = 0; s < NS; s++) rows[s] = wb + (size_t)(r0 + s * q + i) * ws;
        dot_mv_ns(type, rows, ag, nb, out);
#pragma GCC unroll 4
        for (int s = 0; s < NS; s++) yt[r0 + s * q + i] = out[s];
    }
    for (int r = r0 + NS * q; r < r1; r++) yt[r] = dot_mv(type, wb + (size_t)r * ws, ag, nb);
}

/* ---------------------------------------------------------------------- */
/* tiled: weight rows expanded once per token chunk */

static inline __attribute__((always_inline)) void
wprep_group(int type, int mode, struct wgrp *o, const uint8_t *gp, int nv) {
    struct graw w;
    load_group(type, mode, gp, nv, &w);
    o->dw = w.dw;
    o->mw = w.mw;
    if (mode == G_TAIL4) { /* stays in H layout: q[0] / q[4] */
        if (type == T_Q8_0) {
            o->q[0] = w.hl[0];
            o->q[4] = w.hh[0];
        } else {
            nibbles(w.hl[0], &o->q[0], &o->q[4]);
        }
        return;
    }
    if (type == T_Q8_0) {
        transpose4(w.hl, o->q);
        transpose4(w.hh, o->q + 4);
    } else {
        __m512i t[4];
        transpose4(w.hl, t);
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++) nibbles(t[j], &o->q[j], &o->q[4 + j]);
    }
}

static inline __attribute__((always_inline)) void
wprep(int type, struct wgrp *wg, const uint8_t *row, int nb) {
    const int gbytes = GB * BLK_BYTES[type], nfull = nb / GB, tail = nb % GB;
    for (int g = 0; g < nfull; g++) {
        prefetch_group(row + (size_t)g * gbytes, gbytes);
        wprep_group(type, G_FULL, &wg[g], row + (size_t)g * gbytes, GB);
    }
    if (tail > 4) wprep_group(type, G_TAIL, &wg[nfull], row + (size_t)nfull * gbytes, tail);
    else if (tail) wprep_group(type, G_TAIL4, &wg[nfull], row + (size_t)nfull * gbytes, tail);
}

/* mt tokens x nr rows; ag: mt token rows of ng groups, wg: nr weight rows;
 * h_last: the last group is a tail of <= 4 blocks in H layout. */
static inline __attribute__((always_inline)) void
tile(int type, int mt, int nr, const struct wgrp *wg, const struct agrp *ag, int ng, int h_last,
     float *y, size_t ldy) {
    __m512 facc[4][4];
#pragma GCC unroll 4
    for (int t = 0; t < mt; t++)
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) facc[t][r] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
        __m512i acc[4][4];
        const int h = h_last && g == ng - 1;
#pragma GCC unroll 4
        for (int t = 0; t < mt; t++)
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) acc[t][r] = _mm512_setzero_si512();
        if (!h) {
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
        } else {
#pragma GCC unroll 4
            for (int t = 0; t < mt; t++)
#pragma GCC unroll 4
                for (int r = 0; r < nr; r++) {
                    const struct wgrp *w = &wg[r * ng + g];
                    const struct agrp *a = &ag[t * ng + g];
                    acc[t][r] = tree1(_mm512_dpbusd_epi32(
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->q[0], a->q[0]), w->q[4],
                        a->q[4]));
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
    case (MT) * 8 + (NR): tile(type, MT, NR, wg, ag, ng, h_last, y, ldy); break;

static inline __attribute__((always_inline)) void
tile_any(int type, int mt, int nr, const struct wgrp *wg, const struct agrp *ag, int ng,
         int h_last, float *y, size_t ldy) {
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
    /* one stack scratch (~90 KB) serves either shape */
    union {
        struct agrp mv[MV_MAX_GROUPS];
        struct {
            struct agrp ag[TILE_MAX_ACT];
            struct wgrp wg[4 * TILE_MAX_GROUPS];
        } tl;
    } scr;
    if (ng > TILE_MAX_GROUPS || n_tokens < TILE_MIN_TOKENS) {
        struct agrp *ag = scr.mv;
        for (int t = 0; t < n_tokens; t++) {
            float *yt = y + (size_t)t * ldy;
            act_prep(ag, xb + (size_t)t * x_stride, n, 0);
            matvec(type, yt, wb, w_stride, ag, nb, r0, r1);
        }
        return;
    }
    struct agrp *ag = scr.tl.ag;
    struct wgrp *wg = scr.tl.wg;
    const int h_last = nb % GB != 0 && nb % GB <= 4;
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
                tile_any(type, mt, nr, wg, ag + t * ng, ng, h_last, y + (size_t)(t0 + t) * ldy + rt,
                         ldy);
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
