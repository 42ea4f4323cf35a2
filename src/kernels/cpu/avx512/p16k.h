/*
 * p16k.h - the P16K packed layout of the super-block types (Q2_K..Q6_K,
 * IQ4_XS; described in matmul_pk.c): type codes, offsets in a tile, the
 * decode of scales and weight chunks, the activations' scratch, and the
 * decoded windows of Q2_K/Q3_K. Shared by matmul_pk.c (AVX-512 VNNI) and
 * cpu/amx/matmul_pk_amx.c, both built with the AVX-512 flags.
 */
#ifndef ANVIL_KN_P16K_H
#define ANVIL_KN_P16K_H

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/avx512/tile16.h"
#include "kernels/blocks.h"

/* Q2_K, Q3_K: super-blocks per decoded window (32 KB of bytes: 8 and 4
 * read the same, 16 is 7% slower at 8192 wide; commit 5f4949b) */
enum { DWIN = 8 };

enum { T_Q4_K, T_Q5_K, T_Q6_K, T_IQ4_XS, T_Q2_K, T_Q3_K };

static inline int ptype(int type) {
    switch (type) {
    case ANVIL_TYPE_Q4_K: return T_Q4_K;
    case ANVIL_TYPE_Q5_K: return T_Q5_K;
    case ANVIL_TYPE_Q6_K: return T_Q6_K;
    case ANVIL_TYPE_IQ4_XS: return T_IQ4_XS;
    case ANVIL_TYPE_Q2_K: return T_Q2_K;
    case ANVIL_TYPE_Q3_K: return T_Q3_K;
    default: return -1;
    }
}

/* geometry of a super-block body (bytes), see the header */
enum {
    Q4K_BODY = 2304, Q4K_SC = 0, Q4K_D = 192, Q4K_DMIN = 224, Q4K_Q = 256,
    Q5K_BODY = 2816, Q5K_SC = 0, Q5K_D = 192, Q5K_DMIN = 224, Q5K_QH = 256, Q5K_Q = 768,
    Q6K_BODY = 3328, Q6K_SC = 0, Q6K_Q = 256,
    IQ4XS_BODY = 2176, IQ4XS_SL = 0, IQ4XS_SH = 64, IQ4XS_Q = 128,
    Q2K_BODY = 1344, Q2K_SC = 0, Q2K_D = 256, Q2K_DMIN = 288, Q2K_Q = 320,
    Q3K_BODY = 1728, Q3K_SC = 0, Q3K_Q = 192,
};
/* Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins */
static inline int is_q45(int pt) { return pt == T_Q4_K || pt == T_Q5_K; }
/* d and dmin in the body, S1 and S2 (Q4_K, Q5_K, Q2_K); the others have
 * one d per super-block, in an array at the front of the tile */
static inline int has_min(int pt) { return is_q45(pt) || pt == T_Q2_K; }
/* 8 sub-blocks of 32 (Q4_K, Q5_K, IQ4_XS), else 16 of 16 */
static inline int sub32(int pt) { return pt == T_Q4_K || pt == T_Q5_K || pt == T_IQ4_XS; }
static inline size_t body_size(int pt) {
    switch (pt) {
    case T_Q4_K: return Q4K_BODY;
    case T_Q5_K: return Q5K_BODY;
    case T_Q6_K: return Q6K_BODY;
    case T_Q2_K: return Q2K_BODY;
    case T_Q3_K: return Q3K_BODY;
    default: return IQ4XS_BODY;
    }
}
static inline size_t sc_off(int pt) {
    return pt == T_Q4_K ? Q4K_SC : pt == T_Q5_K ? Q5K_SC : pt == T_Q2_K ? Q2K_SC : pt == T_Q3_K ? Q3K_SC : Q6K_SC;
}
/* has_min types */
static inline size_t d_off(int pt) { return pt == T_Q4_K ? Q4K_D : pt == T_Q5_K ? Q5K_D : Q2K_D; }
static inline size_t dmin_off(int pt) { return pt == T_Q4_K ? Q4K_DMIN : pt == T_Q5_K ? Q5K_DMIN : Q2K_DMIN; }
static inline int nsub(int pt) { return sub32(pt) ? 8 : 16; }     /* sub-blocks */
static inline int npairs(int pt) { return sub32(pt) ? 4 : 8; }    /* vpdpwssd per S2 */
/* int32 per super-block of a token's scratch (struct pk_act p): the S2
 * pairs of the types with mins, else each sub-block's correction */
static inline int nscr(int pt) { return has_min(pt) ? npairs(pt) : nsub(pt); }
/* offset of the first body in a tile: the d arrays of the types without
 * dmin come first */
static inline size_t body0(int pt, int nsb) {
    return has_min(pt) ? 0 : ((size_t)nsb * 32 + 63) & ~(size_t)63;
}
static inline size_t tile_size(int pt, int nsb) { return body0(pt, nsb) + (size_t)nsb * body_size(pt); }

/* Decoded scales of one tile's super-block: sc[j] the int32 scale of
 * sub-block j per lane; for the types with mins, pr[p] the int16 pairs S2
 * multiplies (Q4_K, Q5_K: (m_2p, m_2p+1); Q2_K: (m_4v, m_4v+2) at p = 2v
 * and (m_4v+1, m_4v+3) at p = 2v+1), matching pk_scratch(). */
struct pk_scales {
    __m512i sc[16];
    __m512i pr[8];
};

static inline __attribute__((always_inline)) void decode_scales(int pt, const uint8_t *body,
                                                                struct pk_scales *s) {
    if (is_q45(pt)) {
        const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
        __m512i d0 = _mm512_load_si512(body + sc_off(pt)), d1 = _mm512_load_si512(body + sc_off(pt) + 64),
                d2 = _mm512_load_si512(body + sc_off(pt) + 128), m[8];
        s->sc[0] = _mm512_and_si512(d0, m6);
        s->sc[1] = _mm512_and_si512(_mm512_srli_epi32(d0, 8), m6);
        s->sc[2] = _mm512_and_si512(_mm512_srli_epi32(d0, 16), m6);
        s->sc[3] = _mm512_and_si512(_mm512_srli_epi32(d0, 24), m6);
        m[0] = _mm512_and_si512(d1, m6);
        m[1] = _mm512_and_si512(_mm512_srli_epi32(d1, 8), m6);
        m[2] = _mm512_and_si512(_mm512_srli_epi32(d1, 16), m6);
        m[3] = _mm512_and_si512(_mm512_srli_epi32(d1, 24), m6);
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            __m512i hs = _mm512_and_si512(_mm512_srli_epi32(d0, 8 * b + 6), m3);
            __m512i hm = _mm512_and_si512(_mm512_srli_epi32(d1, 8 * b + 6), m3);
            s->sc[4 + b] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(d2, 8 * b), m4),
                                           _mm512_slli_epi32(hs, 4));
            m[4 + b] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(d2, 8 * b + 4), m4),
                                       _mm512_slli_epi32(hm, 4));
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) s->pr[p] = _mm512_or_si512(m[2 * p], _mm512_slli_epi32(m[2 * p + 1], 16));
    } else if (pt == T_IQ4_XS) {
        /* ls_j = (4 bits of scales_l | 2 bits of scales_h << 4) - 32 */
        const __m512i m4 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
        __m512i dl = _mm512_load_si512(body + IQ4XS_SL), dh = _mm512_load_si512(body + IQ4XS_SH);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            __m512i lo = _mm512_and_si512(_mm512_srli_epi32(dl, 4 * j), m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi32(dh, 2 * j), m3);
            s->sc[j] = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), k32);
        }
    } else if (pt == T_Q2_K) {
        /* byte b of chunk v: sc_4v+b (low nibble) taken 4^(3-b)x, as the
         * weights of field b come 4^b x (see wchunk); the mins (high
         * nibbles) of bytes (0, 2) and (1, 3) are already int16 pairs */
        const __m512i m4 = _mm512_set1_epi32(0x000f000f);
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            __m512i x = _mm512_load_si512(body + Q2K_SC + 64 * v);
            s->sc[4 * v + 0] = _mm512_and_si512(_mm512_slli_epi32(x, 6), _mm512_set1_epi32(0x3c0));
            s->sc[4 * v + 1] = _mm512_and_si512(_mm512_srli_epi32(x, 4), _mm512_set1_epi32(0xf0));
            s->sc[4 * v + 2] = _mm512_and_si512(_mm512_srli_epi32(x, 14), _mm512_set1_epi32(0x3c));
            s->sc[4 * v + 3] = _mm512_and_si512(_mm512_srli_epi32(x, 24), _mm512_set1_epi32(0x0f));
            s->pr[2 * v] = _mm512_and_si512(_mm512_srli_epi32(x, 4), m4);
            s->pr[2 * v + 1] = _mm512_and_si512(_mm512_srli_epi32(x, 12), m4);
        }
    } else if (pt == T_Q3_K) {
        /* u_j = (4 bits of byte j % 8 | 2 bits of byte 8 + j % 4 << 4) -
         * 32, as kn_q3_k_scales; sc_j = u_j taken 32/f_j x, f_j the
         * factor slot j % 8 of a group comes with (see wchunk) */
        const __m512i x0 = _mm512_load_si512(body + Q3K_SC), x1 = _mm512_load_si512(body + Q3K_SC + 64),
                      x2 = _mm512_load_si512(body + Q3K_SC + 128), k32 = _mm512_set1_epi32(32);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const int sl = 8 * (j % 4) + 4 * (j / 8), sh = 8 * (j % 4) + 2 * (j / 4) - 4;
            __m512i lo = _mm512_and_si512(_mm512_srli_epi32(j % 8 < 4 ? x0 : x1, sl), _mm512_set1_epi32(0x0f));
            __m512i hi = sh >= 0 ? _mm512_srli_epi32(x2, sh) : _mm512_slli_epi32(x2, -sh);
            const __m512i u = _mm512_sub_epi32(_mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi32(0x30), 0xF8), k32);
            const int m = j % 8, lg = m == 7 ? 0 : m == 6 ? 1 : m % 2 ? 2 : 5;
            s->sc[j] = lg ? _mm512_slli_epi32(u, lg) : u;
        }
    } else {
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            __m512i x = _mm512_load_si512(body + Q6K_SC + 64 * v);
            /* x4 except for s = 3 (j % 8 >= 6), whose weights come 4x
             * (see wchunk) */
            __m512i b0 = _mm512_srai_epi32(_mm512_slli_epi32(x, 24), 24);
            __m512i b1 = _mm512_srai_epi32(_mm512_slli_epi32(x, 16), 24);
            __m512i b2 = _mm512_srai_epi32(_mm512_slli_epi32(x, 8), 24);
            __m512i b3 = _mm512_srai_epi32(x, 24);
            s->sc[4 * v + 0] = _mm512_slli_epi32(b0, 2);
            s->sc[4 * v + 1] = _mm512_slli_epi32(b1, 2);
            s->sc[4 * v + 2] = v % 2 ? b2 : _mm512_slli_epi32(b2, 2);
            s->sc[4 * v + 3] = v % 2 ? b3 : _mm512_slli_epi32(b3, 2);
        }
    }
}

/* The weight chunk k of sub-block j = j0 + jj of a body (16 rows x 4
 * elements, as unsigned bytes). j0 is a multiple of the unrolled sub-block
 * group (2 for Q4_K, 8 for Q6_K) so that jj, which selects the decode, is
 * a compile-time constant. */
static inline __attribute__((always_inline)) __m512i wchunk(int pt, const uint8_t *body, int j0, int jj,
                                                           int k) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    if (pt == T_Q4_K) { /* chunk 8 * (j / 2) + k, nibble j % 2 */
        __m512i v = _mm512_load_si512(body + Q4K_Q + 64 * (4 * j0 + k));
        return (jj & 1) ? _mm512_and_si512(_mm512_srli_epi16(v, 4), nib) : _mm512_and_si512(v, nib);
    }
    if (pt == T_IQ4_XS) { /* as Q4_K, then the value + 128 of each nibble */
        const __m512i nl = _mm512_broadcast_i32x4(
            _mm_add_epi8(_mm_loadu_si128((const __m128i *)kn_iq4nl_values), _mm_set1_epi8((char)0x80)));
        __m512i v = _mm512_load_si512(body + IQ4XS_Q + 64 * (4 * j0 + k));
        v = (jj & 1) ? _mm512_and_si512(_mm512_srli_epi16(v, 4), nib) : _mm512_and_si512(v, nib);
        return _mm512_shuffle_epi8(nl, v);
    }
    if (pt == T_Q5_K) { /* as Q4_K, plus 16 where bit j of qh chunk k is set */
        const int j = j0 + jj; /* j0 = 0: every sub-block unrolled, the shifts constant */
        __m512i v = _mm512_load_si512(body + Q5K_Q + 64 * (8 * (j / 2) + k));
        __m512i lo = (j & 1) ? _mm512_and_si512(_mm512_srli_epi16(v, 4), nib) : _mm512_and_si512(v, nib);
        /* bit j of each byte to bit 4 by a 16-bit shift (the bits it
         * moves across bytes are masked off) and OR'ed in by vpternlogd:
         * both run beside vpdpbusd on Zen 4, a vptestmb took its slot */
        __m512i h = _mm512_load_si512(body + Q5K_QH + 64 * k);
        h = j < 4 ? _mm512_slli_epi16(h, 4 - j) : j > 4 ? _mm512_srli_epi16(h, j - 4) : h;
        return _mm512_ternarylogic_epi32(lo, h, _mm512_set1_epi8(0x10), 0xF8); /* A | (B & C) */
    }
    if (pt == T_Q2_K) { /* j = 4h + s: field s of chunk 4h + k, as 4^s q */
        const int j = j0 + jj, s = jj % 4;
        return _mm512_and_si512(_mm512_load_si512(body + Q2K_Q + 64 * (4 * (j / 4) + k)),
                                _mm512_set1_epi8((char)(3 << 2 * s)));
    }
    if (pt == T_Q3_K) {
        /* j = 8h + m: slot m of group 4h + k (chunks B0..B2), as f_m qw:
         * m < 6 one AND (f = 1 or 8), m = 6 (16x) and 7 (32x) one shift */
        const uint8_t *c = body + Q3K_Q + 192 * (4 * (j0 / 8) + k);
        if (jj < 6)
            return _mm512_and_si512(_mm512_load_si512(c + 64 * (jj / 2)), _mm512_set1_epi8(jj % 2 ? 0x38 : 0x07));
        const __m512i a = _mm512_srli_epi16(_mm512_load_si512(c + 64 * (jj - 6)), 2);
        const __m512i b = _mm512_and_si512(_mm512_load_si512(c + 64 * (jj - 5)),
                                           _mm512_set1_epi8((char)(jj == 6 ? 0x40 : 0xc0)));
        return _mm512_ternarylogic_epi32(_mm512_set1_epi8(jj == 6 ? 0x30 : 0x20), a, b, 0xCA); /* A ? B : C */
    }
    /* Q6_K: j = 8h + 2s + e holds elements 128h + 32s + 16e + 4k + i, in
     * group g = 8h + 4e + k, byte s of the group's 3 chunks B0..B2 (s < 3:
     * q in bits 0..5) or their bits 6..7 (s = 3: bits 2s' of q in B_s'),
     * which give 4q with two shifts and no more */
    const int s = jj / 2;
    const uint8_t *c = body + Q6K_Q + 64 * (3 * j0 + 4 * (jj % 2) + k); /* B0 of group j0 + 4(jj % 2) + k */
    if (s < 3) return _mm512_and_si512(_mm512_load_si512(c + 512 * s), _mm512_set1_epi8(0x3f));
    __m512i b0 = _mm512_srli_epi16(_mm512_load_si512(c), 4);        /* q bits 0,1 at 2,3 */
    __m512i b1 = _mm512_srli_epi16(_mm512_load_si512(c + 512), 2);  /* q bits 2,3 at 4,5 */
    __m512i b2 = _mm512_and_si512(_mm512_load_si512(c + 1024), _mm512_set1_epi8((char)0xc0));
    __m512i u = _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0c), b0, b1, 0xCA); /* A ? B : C */
    return _mm512_ternarylogic_epi32(u, b2, _mm512_set1_epi8(0x3c), 0xEC);     /* (A & C) | B */
}
/* offset in the super-block of the 4 activations chunk k of sub-block j meets */
static inline int act_off(int pt, int j, int k) { return (sub32(pt) ? 32 : 16) * j + 4 * k; }

static inline uint32_t pair16(int lo, int hi) { return (uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16; }

/* A Q8K row's scratch, nscr(pt) int32 per super-block: with mins, the
 * int16 bsum pairs S2 multiplies, in the order of pk_scales.pr; without,
 * minus each sub-block's offset times its bsum, in the units of its
 * weights (f_j, see wchunk): Q6_K -32 f_j bsum16_j (f_j = 4 in the slots
 * s = 3, else 1), Q3_K -4 f_j bsum16_j (f_j = 1, 8, 1, 8, 1, 8, 16, 32 by
 * slot j % 8), IQ4_XS -128 bsum32_j. */
static inline void pk_scratch(int pt, int32_t *p, const int16_t *bsums, int nsb) {
    static const int q3f[8] = {1, 8, 1, 8, 1, 8, 16, 32};
    for (int b = 0; b < nsb; b++, bsums += 16) {
        if (pt == T_Q6_K || pt == T_Q3_K) {
            for (int j = 0; j < 16; j++)
                p[16 * b + j] = pt == T_Q6_K ? -32 * (j % 8 >= 6 ? 4 : 1) * bsums[j] : -4 * q3f[j % 8] * bsums[j];
        } else if (pt == T_IQ4_XS) {
            for (int j = 0; j < 8; j++) p[8 * b + j] = -128 * (bsums[2 * j] + bsums[2 * j + 1]);
        } else if (sub32(pt)) {
            for (int q = 0; q < 4; q++)
                p[4 * b + q] = (int32_t)pair16(bsums[4 * q] + bsums[4 * q + 1], bsums[4 * q + 2] + bsums[4 * q + 3]);
        } else {
            for (int v = 0; v < 4; v++) {
                p[8 * b + 2 * v] = (int32_t)pair16(bsums[4 * v], bsums[4 * v + 2]);
                p[8 * b + 2 * v + 1] = (int32_t)pair16(bsums[4 * v + 1], bsums[4 * v + 3]);
            }
        }
    }
}

struct pk_dec {
    uint8_t q[DWIN][64][64] __attribute__((aligned(64))); /* [super-block][chunk] */
    __m512i cp[DWIN][8]; /* Q2_K: the min pairs (pk_scales.pr); Q3_K: (c_2p, c_2p+1) */
    __m512 dw[DWIN], dm[DWIN];
};

/* q * s per byte (the result's low 8 bits), s an int32 per dword lane */
static inline __m512i mul_bytes(__m512i q, __m512i s) {
    const __m512i s16 = _mm512_ternarylogic_epi32(s, _mm512_slli_epi32(s, 16), _mm512_set1_epi32(0xffff), 0xEC); /* (A & C) | B */
    const __m512i lo = _mm512_mullo_epi16(_mm512_and_si512(q, _mm512_set1_epi16(0xff)), s16);
    const __m512i hi = _mm512_mullo_epi16(_mm512_srli_epi16(q, 8), s16);
    return _mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(hi, 8), _mm512_set1_epi16(0xff), 0xEC); /* (A & C) | B */
}

/* Super-blocks [b0, b0 + nw) of tile tp into dec. */
static inline __attribute__((always_inline)) void dec_window(int pt, const uint8_t *tp, int nsb, int b0, int nw,
                                                             struct pk_dec *dec) {
    for (int bi = 0; bi < nw; bi++) {
        const int b = b0 + bi;
        const uint8_t *body = tp + body0(pt, nsb) + (size_t)b * body_size(pt);
        struct pk_scales sc;
        decode_scales(pt, body, &sc);
        __m512i u[16];
        if (pt == T_Q2_K) {
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) u[j] = _mm512_srli_epi32(sc.sc[j], 6 - 2 * (j % 4));
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) dec->cp[bi][p] = sc.pr[p];
            dec->dw[bi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(body + Q2K_D)));
            dec->dm[bi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(body + Q2K_DMIN)));
        } else {
            __m512i c[16];
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                const int m = j % 8, lg = m == 7 ? 0 : m == 6 ? 1 : m % 2 ? 2 : 5;
                u[j] = _mm512_srai_epi32(sc.sc[j], lg);
                /* -224 [u < 0] - 4 u */
                c[j] = _mm512_sub_epi32(_mm512_and_si512(_mm512_srai_epi32(u[j], 31), _mm512_set1_epi32(-224)),
                                        _mm512_slli_epi32(u[j], 2));
            }
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++)
                dec->cp[bi][p] = _mm512_ternarylogic_epi32(c[2 * p], _mm512_slli_epi32(c[2 * p + 1], 16),
                                                           _mm512_set1_epi32(0xffff), 0xEC);
            dec->dw[bi] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)((const uint16_t *)tp + (size_t)b * 16)));
            dec->dm[bi] = _mm512_setzero_ps();
        }
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const int j0 = j / 8 * 8, jj = j % 8;
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m512i v = wchunk(pt, body, pt == T_Q2_K ? j / 4 * 4 : j0, pt == T_Q2_K ? j % 4 : jj, k), w;
                if (pt == T_Q2_K) { /* 4^s q -> q */
                    const int sh = 2 * (j % 4);
                    v = sh ? _mm512_and_si512(_mm512_srli_epi16(v, sh), _mm512_set1_epi8(3)) : v;
                    w = mul_bytes(v, u[j]);
                } else { /* f qw -> qw, f = 1, 8, 1, 8, 1, 8, 16, 32 by slot */
                    const int m = j % 8, sh = m == 7 ? 5 : m == 6 ? 4 : m % 2 ? 3 : 0;
                    v = sh ? _mm512_and_si512(_mm512_srli_epi16(v, sh), _mm512_set1_epi8(7)) : v;
                    w = _mm512_add_epi8(mul_bytes(v, u[j]),
                                        _mm512_and_si512(_mm512_srai_epi32(u[j], 31), _mm512_set1_epi8((char)224)));
                }
                _mm512_store_si512(dec->q[bi][4 * j + k], w);
            }
        }
    }
}

/* Q3_K's token scratch for dec_tiles: (bsum16_2p, bsum16_2p+1) int16 pairs */
static inline void dec_scratch_q3(int32_t *p, const int16_t *bsums, int nsb) {
    for (int b = 0; b < nsb; b++, bsums += 16)
        for (int q = 0; q < 8; q++) p[8 * b + q] = (int32_t)pair16(bsums[2 * q], bsums[2 * q + 1]);
}


#endif
