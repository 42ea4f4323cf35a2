/*
 * matmul_pk_amx.c - the P16K packed matmul of Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K
 * and Q3_K weights times Q8K activations, 16 tokens and more, with the integer dot
 * products on AMX and the float steps of the AVX-512 kernel (matmul_pk.c).
 *
 * Why not one tile product per sub-block, as the 32-element types do
 * (matmul_p_amx.c)? Their float scale per block forces a C tile out of
 * the unit per 32 elements, and storing it costs as much as the product.
 * Here the sub-block scales are small integers, so they can go into the
 * weight bytes, and one C tile accumulates a whole super-block (256
 * elements, four TDPBSUD of 64):
 *   Q4_K, Q5_K: sc_j (6 bits) = 8 hi_j + lo_j, hi and lo < 8, and q * lo,
 *     q * hi <= 31 * 7 fit a byte: two passes, C_lo = sum_j lo_j isum_j,
 *     C_hi likewise, and S1 = sum_j sc_j isum_j = 8 C_hi + C_lo exactly
 *     (|C| <= 256 * 217 * 128 < 2^23). S2 (the mins) as matmul_pk.c:
 *     vpdpwssd of the tile's (m_2p, m_2p+1) pairs against the token's
 *     bsum pairs;
 *   Q6_K, IQ4_XS: the product P = v * sc of each weight and its
 *     sub-block scale - Q6_K v = q - 32 (-32..31) and sc (-128..127),
 *     IQ4_XS v its table value (-127..113) and ls (-32..31) - lies in
 *     -4064..4096, so it is 256 h + l with l its low byte (0..255) and h
 *     its high one (-16..16): two passes, TDPBSUD of l and TDPBSSD of h,
 *     and S = 256 C_h + C_l exactly (|C_l| < 2^23, |256 C_h| < 2^28).
 *     (Before: Q6_K's scale in three balanced base-7 digits and IQ4_XS's
 *     in four balanced ternary ones, one pass per digit, since a digit
 *     times v had to fit a byte: a third and a half more tile products,
 *     B loads and C stores);
 *   Q2_K, Q3_K: the decoded windows of matmul_pk.c (p16k.h: dec_window),
 *     whose bytes already carry the scales: one pass is the whole S1 (Q2_K)
 *     or S less its bsum correction (Q3_K, added by vpdpwssd as there).
 * Weights are unsigned bytes, activations signed: TDPBSUD (Q6_K's and
 * IQ4_XS's high bytes signed: TDPBSSD). The integers
 * are matmul_pk.c's exactly, and the float step per (token, row,
 * super-block) is its own, in order, so y is bit-identical to the AVX-512
 * kernel (unit_kquant: amx_same_bits, batch_invariance).
 *
 * How, per 16-row weight tile and window of DWIN super-blocks: decode the
 * window once (the bytes laid out as AMX's B operand: 64-byte chunk c is
 * elements 4c..4c+3 of the 16 rows, so elements 64g..64g+63 are 16
 * consecutive chunks, one B tile); then for every 16 tokens of the call
 * chunk, super-block by super-block: the tile products into C (two C
 * tiles per pass, alternating by super-block), C stored to a ring of
 * buffers, and the float steps of the super-block LAG steps behind (a
 * vector load of a tile store's bytes waits for the store to retire; see
 * matmul_p_amx.c). acc is carried across windows through y.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/amx/amx.h"
#include "kernels/cpu/avx512/p16k.h"

enum {
    TM = 16,  /* tokens per activation tile */
    LAG = 1,  /* super-blocks between a C tile's store and its float steps */
    NCB = 4,  /* C buffer ring (> LAG + 1) */
    NPMAX = 8 /* token scratch int32 per super-block, at most */
};
#define XCH_BYTES ((size_t)1 << 20) /* activation bytes per token chunk (L2) */

/* Q6_K, IQ4_XS: products split into their two bytes (mul_split) */
static inline int is_split(int pt) { return pt == T_Q6_K || pt == T_IQ4_XS; }

/* Q4_K, Q5_K, Q6_K, IQ4_XS: a window decoded into two passes (Q4_K, Q5_K:
 * lo, hi; Q6_K, IQ4_XS: the products' low bytes, high bytes); cp, dw, dm
 * laid out as struct pk_dec's */
struct kdec {
    uint8_t q[DWIN][2][64][64] __attribute__((aligned(64))); /* [super-block][pass][chunk] */
    __m512i cp[DWIN][8];
    __m512 dw[DWIN], dm[DWIN];
};

/* every tile 16 x 64 bytes: 0-3 C (two per pass: even and odd
 * super-blocks), 4, 5 A (alternating 64-element groups), 6, 7 B (the two
 * passes).
 */
static const struct tile_cfg cfg = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {TM, TM, TM, TM, TM, TM, TM, TM},
};

/* Super-blocks [b0, b0 + nw) of Q4_K/Q5_K tile tp into kd. */
static inline __attribute__((always_inline)) void dec_q45(int pt, const uint8_t *tp, int b0, int nw,
                                                          struct kdec *kd) {
    const __m512i m7 = _mm512_set1_epi32(7);
    for (int bi = 0; bi < nw; bi++) {
        const uint8_t *body = tp + (size_t)(b0 + bi) * body_size(pt); /* body0 = 0: has_min */
        struct pk_scales sc;
        decode_scales(pt, body, &sc);
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) kd->cp[bi][p] = sc.pr[p];
        kd->dw[bi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(body + d_off(pt))));
        kd->dm[bi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(body + dmin_off(pt))));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512i lo = _mm512_and_si512(sc.sc[j], m7), hi = _mm512_srli_epi32(sc.sc[j], 3);
            /* wchunk's unrolled group: Q4_K pairs of sub-blocks, Q5_K all 8 */
            const int j0 = pt == T_Q5_K ? 0 : j / 2 * 2, jj = j - j0;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = wchunk(pt, body, j0, jj, k);
                _mm512_store_si512(kd->q[bi][0][8 * j + k], mul_bytes(v, lo));
                _mm512_store_si512(kd->q[bi][1][8 * j + k], mul_bytes(v, hi));
            }
        }
    }
}

/* v * s for signed bytes v (s an int32 per dword lane, |v s| < 2^15) as
 * the 16-bit product of each byte split in two: *lo its low byte, *hi its
 * high one (signed), v s = 256 hi + lo. */
static inline void mul_split(__m512i v, __m512i s, __m512i *lo, __m512i *hi) {
    const __m512i s16 = _mm512_ternarylogic_epi32(s, _mm512_slli_epi32(s, 16), _mm512_set1_epi32(0xffff), 0xEC);
    const __m512i pe = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), s16); /* even bytes */
    const __m512i po = _mm512_mullo_epi16(_mm512_srai_epi16(v, 8), s16);                        /* odd bytes */
    *lo = _mm512_ternarylogic_epi32(pe, _mm512_slli_epi16(po, 8), _mm512_set1_epi16(0xff), 0xEC); /* (A & C) | B */
    *hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(pe, 8), po, _mm512_set1_epi16((short)0xff00),
                                    0xF8); /* A | (B & C) */
}

/* Super-blocks [b0, b0 + nw) of Q6_K tile tp into kd: q - 32 times the
 * sub-block scale, low and high bytes. */
static inline __attribute__((always_inline)) void dec_q6(const uint8_t *tp, int nsb, int b0, int nw,
                                                         struct kdec *kd) {
    for (int bi = 0; bi < nw; bi++) {
        const int b = b0 + bi;
        const uint8_t *body = tp + body0(T_Q6_K, nsb) + (size_t)b * body_size(T_Q6_K);
        kd->dw[bi] =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)((const uint16_t *)tp + (size_t)b * 16)));
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            /* sc_j: byte j % 4 of scale chunk j / 4, sign-extended */
            const __m512i sc = _mm512_srai_epi32(
                _mm512_slli_epi32(_mm512_load_si512(body + Q6K_SC + 64 * (j / 4)), 24 - 8 * (j % 4)), 24);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m512i v = wchunk(T_Q6_K, body, j / 8 * 8, j % 8, k), lo, hi;
                if (j % 8 >= 6) /* slot s = 3 comes as 4q */
                    v = _mm512_and_si512(_mm512_srli_epi16(v, 2), _mm512_set1_epi8(0x3f));
                mul_split(_mm512_sub_epi8(v, _mm512_set1_epi8(32)), sc, &lo, &hi);
                _mm512_store_si512(kd->q[bi][0][4 * j + k], lo);
                _mm512_store_si512(kd->q[bi][1][4 * j + k], hi);
            }
        }
    }
}

/* Super-blocks [b0, b0 + nw) of IQ4_XS tile tp into kd: the values
 * (-127..113) times ls_j (-32..31), low and high bytes. */
static inline __attribute__((always_inline)) void dec_iq4xs(const uint8_t *tp, int nsb, int b0, int nw,
                                                            struct kdec *kd) {
    for (int bi = 0; bi < nw; bi++) {
        const int b = b0 + bi;
        const uint8_t *body = tp + body0(T_IQ4_XS, nsb) + (size_t)b * body_size(T_IQ4_XS);
        kd->dw[bi] =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)((const uint16_t *)tp + (size_t)b * 16)));
        struct pk_scales sc;
        decode_scales(T_IQ4_XS, body, &sc);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_xor_si512(wchunk(T_IQ4_XS, body, j / 2 * 2, j % 2, k),
                                                   _mm512_set1_epi8((char)0x80)); /* the value, signed */
                __m512i lo, hi;
                mul_split(v, sc.sc[j], &lo, &hi);
                _mm512_store_si512(kd->q[bi][0][8 * j + k], lo);
                _mm512_store_si512(kd->q[bi][1][8 * j + k], hi);
            }
        }
    }
}

/* Super-block S's tile products into C tiles CL (and CH): A from the
 * token tile's rows at xa (x_stride apart), B from the decoded bytes; the
 * second pass signed (TDPBSSD) when hs. */
#define KMUL(CL, CH, S)                                                                                        \
    do {                                                                                                       \
        const uint8_t *xs_ = xa + (size_t)(b0 + (S)) * QK_K;                                                   \
        const uint8_t *bq_ = qb + (size_t)(S)*sbs;                                                             \
        _tile_zero(CL);                                                                                        \
        if (two) _tile_zero(CH);                                                                               \
        _tile_loadd(4, xs_, (long)x_stride);                                                                   \
        _tile_loadd(6, bq_, 64);                                                                               \
        _tile_dpbsud(CL, 4, 6);                                                                                \
        if (two) {                                                                                             \
            _tile_loadd(7, bq_ + 4096, 64);                                                                    \
            if (hs) _tile_dpbssd(CH, 4, 7); else _tile_dpbsud(CH, 4, 7);                                       \
        }                                                                                                      \
        _tile_loadd(5, xs_ + 64, (long)x_stride);                                                              \
        _tile_loadd(6, bq_ + 1024, 64);                                                                        \
        _tile_dpbsud(CL, 5, 6);                                                                                \
        if (two) {                                                                                             \
            _tile_loadd(7, bq_ + 4096 + 1024, 64);                                                             \
            if (hs) _tile_dpbssd(CH, 5, 7); else _tile_dpbsud(CH, 5, 7);                                       \
        }                                                                                                      \
        _tile_loadd(4, xs_ + 128, (long)x_stride);                                                             \
        _tile_loadd(6, bq_ + 2048, 64);                                                                        \
        _tile_dpbsud(CL, 4, 6);                                                                                \
        if (two) {                                                                                             \
            _tile_loadd(7, bq_ + 4096 + 2048, 64);                                                             \
            if (hs) _tile_dpbssd(CH, 4, 7); else _tile_dpbsud(CH, 4, 7);                                       \
        }                                                                                                      \
        _tile_loadd(5, xs_ + 192, (long)x_stride);                                                             \
        _tile_loadd(6, bq_ + 3072, 64);                                                                        \
        _tile_dpbsud(CL, 5, 6);                                                                                \
        if (two) {                                                                                             \
            _tile_loadd(7, bq_ + 4096 + 3072, 64);                                                             \
            if (hs) _tile_dpbssd(CH, 5, 7); else _tile_dpbsud(CH, 5, 7);                                       \
        }                                                                                                      \
    } while (0)
#define KSTEP_MUL(S)                                                                                           \
    do {                                                                                                       \
        if ((S)&1)                                                                                             \
            KMUL(2, 3, S);                                                                                     \
        else                                                                                                   \
            KMUL(0, 1, S);                                                                                     \
    } while (0)
#define KSTEP_STORE(S)                                                                                         \
    do {                                                                                                       \
        if ((S)&1) {                                                                                           \
            _tile_stored(2, cb[(S) % NCB][0], 64);                                                             \
            if (two) _tile_stored(3, cb[(S) % NCB][1], 64);                                                    \
        } else {                                                                                               \
            _tile_stored(0, cb[(S) % NCB][0], 64);                                                             \
            if (two) _tile_stored(1, cb[(S) % NCB][1], 64);                                                    \
        }                                                                                                      \
    } while (0)

/* matmul_pk.c's float step for super-block b of 16 tokens: c the C tile
 * (and c + 256 the second pass), da and pp the tokens' da and scratch by
 * token (pp[p * 16 + t]), cp, dw, dm the tile's. */
static inline __attribute__((always_inline)) void ksteps(int pt, __m512 acc[TM], const int32_t *c,
                                                         const float *da, const int32_t *pp, const __m512i *cp,
                                                         __m512 dw, __m512 dm) {
    const int np = pt == T_Q2_K || pt == T_Q3_K ? 8 : 4;
#pragma GCC unroll 16
    for (int t = 0; t < TM; t++) {
        __m512i is = _mm512_load_si512(c + 16 * t);
        const __m512 d = _mm512_set1_ps(da[t]);
        if (is_split(pt)) { /* S = 256 C_h + C_l */
            is = _mm512_add_epi32(is, _mm512_slli_epi32(_mm512_load_si512(c + 256 + 16 * t), 8));
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(dw, d), _mm512_cvtepi32_ps(is)));
            continue;
        }
        if (is_q45(pt)) is = _mm512_add_epi32(is, _mm512_slli_epi32(_mm512_load_si512(c + 256 + 16 * t), 3));
        __m512 v;
        if (pt == T_Q3_K) { /* the bsum correction, as dec_tokens */
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) is = _mm512_dpwssd_epi32(is, cp[p], _mm512_set1_epi32(pp[16 * p + t]));
            v = _mm512_mul_ps(_mm512_mul_ps(dw, d), _mm512_cvtepi32_ps(is));
        } else {
            __m512i s2 = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int p = 0; p < np; p++) s2 = _mm512_dpwssd_epi32(s2, cp[p], _mm512_set1_epi32(pp[16 * p + t]));
            v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dw, d), _mm512_cvtepi32_ps(is)),
                              _mm512_mul_ps(_mm512_mul_ps(dm, d), _mm512_cvtepi32_ps(s2)));
        }
        acc[t] = _mm512_add_ps(acc[t], v);
    }
}

static inline __attribute__((always_inline)) int matmul_pk_amx(int pt, float *restrict y, size_t ldy,
                                                               const uint8_t *restrict w,
                                                               const uint8_t *restrict x, size_t x_stride,
                                                               int n, int n_tokens, int r0, int r1) {
    const int nsb = n / QK_K, ntk = n_tokens / TM * TM;
    /* two passes (kdec): Q4_K, Q5_K (sc = 8 hi + lo) and Q6_K, IQ4_XS (the
     * products' two bytes, the second signed: hs); Q2_K, Q3_K one */
    const int two = is_q45(pt) || is_split(pt), hs = is_split(pt);
    /* token scratch per super-block (pk_scratch, dec_scratch_q3; Q6_K and
     * IQ4_XS none) */
    const int np = is_split(pt) ? 0 : two ? 4 : 8;
    const size_t ts = tile_size(pt, nsb);
    const int k0 = r0 / R, k1 = (r1 + R - 1) / R;
    int32_t cb[NCB][2][TM * 16] __attribute__((aligned(64)));
    int32_t one[DWIN * NPMAX * 8]; /* one token's scratch, per window-sized piece */
    if (ntk == 0 || r0 >= r1) return 0;
    int tch = (int)(XCH_BYTES / (size_t)n) / TM * TM;
    if (tch < TM) tch = TM;
    if (tch > ntk) tch = ntk;
    /* scratch: the decoded window, then the chunk's da and token scratch
     * by token tile, super-block, (pair,) token */
    const size_t decb = two ? sizeof(struct kdec) : sizeof(struct pk_dec);
    uint8_t *buf = kn_amx_scratch(decb + (size_t)tch * nsb * (1 + np) * 4);
    if (!buf) return 0;
    struct kdec *kd = (struct kdec *)buf;
    struct pk_dec *pd = (struct pk_dec *)buf;
    float *dt = (float *)(buf + decb);
    int32_t *pt_ = (int32_t *)(dt + (size_t)tch * nsb);
    const uint8_t *qb = two ? &kd->q[0][0][0][0] : &pd->q[0][0][0];
    /* bytes per decoded super-block */
    const size_t sbs = two ? sizeof kd->q[0] : sizeof pd->q[0];
    const __m512i *cpb = two ? &kd->cp[0][0] : &pd->cp[0][0];
    const __m512 *dwb = two ? kd->dw : pd->dw, *dmb = two ? kd->dm : pd->dm;
    _tile_loadconfig(&cfg);
    for (int c0 = 0; c0 < ntk; c0 += tch) {
        const int c1 = ntk - c0 < tch ? ntk : c0 + tch;
        /* the chunk's da and scratch, transposed so that the float steps
         * broadcast them from one pointer */
        for (int t = c0; t < c1; t++) {
            const float *d = (const float *)(x + (size_t)t * x_stride + n);
            const int16_t *bs = (const int16_t *)(d + nsb);
            const size_t tt = (size_t)(t - c0) / TM;
            for (int b0 = 0; b0 < nsb; b0 += DWIN) {
                const int nw = nsb - b0 < DWIN ? nsb - b0 : DWIN;
                if (pt == T_Q3_K)
                    dec_scratch_q3(one, bs + 16 * b0, nw);
                else if (np)
                    pk_scratch(pt, one, bs + 16 * b0, nw);
                for (int bi = 0; bi < nw; bi++) {
                    const size_t sb = tt * nsb + b0 + bi;
                    dt[sb * TM + t % TM] = d[b0 + bi];
                    for (int p = 0; p < np; p++) pt_[(sb * np + p) * TM + t % TM] = one[bi * np + p];
                }
            }
        }
        for (int k = k0; k < k1; k++) {
            const uint8_t *tp = w + (size_t)k * ts;
            const __mmask16 sm = lanes(k, r0, r1);
            for (int b0 = 0; b0 < nsb; b0 += DWIN) {
                const int nw = nsb - b0 < DWIN ? nsb - b0 : DWIN;
                if (pt == T_Q6_K)
                    dec_q6(tp, nsb, b0, nw, kd);
                else if (pt == T_IQ4_XS)
                    dec_iq4xs(tp, nsb, b0, nw, kd);
                else if (two)
                    dec_q45(pt, tp, b0, nw, kd);
                else
                    dec_window(pt, tp, nsb, b0, nw, pd);
                for (int t0 = c0; t0 < c1; t0 += TM) {
                    const uint8_t *xa = x + (size_t)t0 * x_stride;
                    float *yt = y + (size_t)t0 * ldy + (size_t)k * R;
                    const size_t tt = (size_t)(t0 - c0) / TM;
                    __m512 acc[TM];
#pragma GCC unroll 16
                    for (int t = 0; t < TM; t++)
                        acc[t] = b0 ? _mm512_maskz_loadu_ps(sm, yt + (size_t)t * ldy) : _mm512_setzero_ps();
                    for (int s = 0; s < nw + 1 + LAG; s++) {
                        if (s < nw) KSTEP_MUL(s);
                        if (s >= 1 && s <= nw) KSTEP_STORE(s - 1);
                        const int e = s - 1 - LAG;
                        if (e >= 0) {
                            const size_t sb = tt * nsb + b0 + e;
                            ksteps(pt, acc, cb[e % NCB][0], dt + sb * TM, pt_ + sb * np * TM, cpb + 8 * e,
                                   dwb[e], dmb[e]);
                        }
                    }
#pragma GCC unroll 16
                    for (int t = 0; t < TM; t++) _mm512_mask_storeu_ps(yt + (size_t)t * ldy, sm, acc[t]);
                }
            }
        }
    }
    _tile_release();
    return ntk;
}

int kn_matmul_pk_amx(int pt, float *restrict y, size_t ldy, const void *restrict w, const void *restrict x,
                     size_t x_stride, int n, int n_tokens, int r0, int r1) {
    switch (pt) {
    case T_Q4_K:
        return matmul_pk_amx(T_Q4_K, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q5_K:
        return matmul_pk_amx(T_Q5_K, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q6_K:
        return matmul_pk_amx(T_Q6_K, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_IQ4_XS:
        return matmul_pk_amx(T_IQ4_XS, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q2_K:
        return matmul_pk_amx(T_Q2_K, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q3_K:
        return matmul_pk_amx(T_Q3_K, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    default:
        return 0;
    }
}
