/*
 * matmul_p.c (avx512) - Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and Q8_0 weights repacked at
 * load time into 16-row tiles, times Q8A activations, with AVX-512 VNNI.
 * The specification is cpu/ref/matmul.c; the GGUF-layout kernels
 * (matmul_q.c) serve matrices that are not packed.
 *
 * Layout ("P16"). Rows are grouped in tiles of KN_PACK_ROWS = 16; the last
 * tile is padded with zero rows. In a tile, zmm lane l is row l, and
 * block b (32 elements) of the 16 rows is stored as CH chunks of 64 bytes,
 * chunk c lane l holding 4 bytes of row l:
 *   Q4_0, Q4_1, IQ4_NL, MXFP4 (CH = 4): byte i of chunk c is GGUF qs byte
 *     4c+i, i.e. its low nibble is element 4c+i and its high nibble
 *     element 16+4c+i (IQ4_NL's and MXFP4's nibbles index their 16 values:
 *     one vpshufb per chunk maps them to value + 128, unsigned, as Q8_0's
 *     bias); MXFP4's E8M0 scale byte sits in the low byte of the block's
 *     16-bit d slot (the kernel builds 2^(e - 128) from its bits);
 *   Q8_0 (CH = 8): elements 4c..4c+3, biased by 128 (unsigned);
 *   Q5_0, Q5_1 (CH = 5): chunks 0..3 as Q4_0, then chunk 4 holds the
 *     high bits, lane l for row l: bit c of byte i is the high bit of
 *     element 4c + i (the low nibble of chunk c's byte i), bit 4 + c that
 *     of element 16 + 4c + i (its high nibble). For chunk c one 16-bit
 *     shift by a constant (left 4 - c, right c) brings the bit to 4 in
 *     every byte, and one vpternlogd ORs it under the nibble: shifts and
 *     logic run beside vpdpbusd on Zen 4, where loading a mask register
 *     (the layout before) took a vpdpbusd slot (+9-15% Q5_0 prefill).
 * A tile is its blocks in groups of GB = 8 (the last may be shorter),
 * each group [d of its blocks, 16 f16 each][Q4_1, Q5_1: m likewise],
 * rounded up to 64 bytes, then [qs (and qh) of its blocks]. The kernel
 * copies a group's d and m to the stack as it enters the group, so a tile
 * is read strictly forward: on AMD (Zen 4) the hardware prefetchers stop
 * at a backward step, and with all the d after all the qs one core
 * streamed 14-17 GB/s from one stream; now 22-28. Same bytes as GGUF (plus
 * at most 32 bytes of padding per tile), so packing costs no memory
 * beyond the copy itself.
 *
 * Why: one vpdpbusd takes a chunk (16 rows x 4 weights) against 4 bytes of
 * one token broadcast to every lane, so the 16 lanes are 16 independent
 * output rows. 8 of them make a block's integer dot for 16 rows; no
 * horizontal sums anywhere, and a weight chunk loaded once serves GM
 * tokens from registers, a broadcast token GT tiles.
 *
 * Numerics, per lane (row r, token t) and block b in order 0..nb-1:
 *   isum = sum(qw * qa) over the block, exact in int32; then
 *   Q4_0: isum -= 8 * sum(qa)     Q5_0: isum -= 16 * sum(qa)
 *   Q8_0, IQ4_NL, MXFP4: isum -= 128 * sum(qa)                   (exact)
 *   acc  = fma(float(isum), dw * da, acc)
 *   Q4_1, Q5_1: acc = fma(mw, sa, acc)
 * and y = acc. It differs from the reference's per-block sum by rounding
 * only (for Q5_0 the float step of the reference, unfused, took two
 * operations more per block and token: 0.8x of Q4_0's rate at 512
 * tokens; for Q5_1, 0.94x). IQ4_NL runs the reference's own float step
 * instead, unfused, so it is bit-exact with it, and so does MXFP4:
 *   IQ4_NL: acc = acc + (dw * da) * float(isum)
 *   MXFP4:  acc = acc + (h * da) * float(isum), h = 2^(e - 128) exactly
 * Every shape of the kernel (matvec over several tiles, tiles of MT
 * tokens) runs exactly these operations per lane, so y(t, r) is
 * bit-identical whatever n_tokens, r0 and r1 are (kernels/ops.h). The file
 * is built with -ffp-contract=off semantics (-std=c11): no extra fusing.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/amx/amx.h"
#include "kernels/cpu/avx512/avx512.h"
#include "kernels/cpu/avx512/p16.h"

enum {
    GT = 2, GM = 6,    /* several tokens: register tiles of GT tiles x GM tokens */
    MT = GM,           /* most tokens per register tile */
    NT = 4,            /* tiles in lockstep for one token (memory streams) */
    PF_DIST = 4096,    /* software prefetch distance (see matmul_q.c) */
    CORR_MAX = 16384,  /* int32 block corrections per call chunk (64 KB of stack; 64 tokens at 8192 wide) */
    TOK_CHUNK = 256,   /* tokens per call chunk */
};

size_t kn_pack_size_avx512(int type, int rows, int n) {
    int pt = ptype(type);
    if (pt < 0) return kn_pack_size_pk_avx512(type, rows, n); /* the K types: matmul_pk.c */
    if (pt < 0 || rows <= 0 || n <= 0 || n % QK || n / QK > CORR_MAX) return 0;
    return (size_t)((rows + R - 1) / R) * tile_size(pt, n / QK);
}

/* Q4_0, Q4_1, Q8_0, IQ4_NL: a whole tile (16 rows of src) at once, each
 * 4-byte field gathered from the 16 rows into its 64-byte chunk, d (and
 * m) from each block's first dword: the bytes the row loop writes. */
static void pack_tile_gather(int pt, uint8_t *tile, int nb, const uint8_t *src, size_t src_stride) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)src_stride));
    const size_t bb = pt == T_Q8_0    ? sizeof(struct blk_q8_0)
                      : pt == T_Q4_1  ? sizeof(struct blk_q4_1)
                      : pt == T_MXFP4 ? sizeof(struct blk_mxfp4)
                                      : sizeof(struct blk_q4_0);
    const size_t qo = pt == T_Q4_1    ? offsetof(struct blk_q4_1, qs)
                      : pt == T_MXFP4 ? offsetof(struct blk_mxfp4, qs)
                                      : offsetof(struct blk_q4_0, qs);
    /* MXFP4: the scale is one byte, the next three are quants */
    const __m512i dmask = _mm512_set1_epi32(pt == T_MXFP4 ? 0xff : -1);
    const __m512i flip = _mm512_set1_epi8(pt == T_Q8_0 ? (char)0x80 : 0); /* Q8_0: unsigned, + 128 */
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = src + (size_t)b * bb;
        uint8_t *q = tile + q_off(pt, nb, b);
        for (int c = 0; c < chunks(pt); c++)
            _mm512_storeu_si512(q + 64 * c, _mm512_xor_si512(_mm512_i32gather_epi32(idx, blk + qo + 4 * c, 1), flip));
        const __m512i dm = _mm512_and_si512(_mm512_i32gather_epi32(idx, blk, 1), dmask); /* d, then m or the first quants */
        _mm256_storeu_si256((__m256i *)(tile + d_off(pt, b)), _mm512_cvtepi32_epi16(dm));
        if (has_m(pt))
            _mm256_storeu_si256((__m256i *)(tile + m_off(pt, nb, b)), _mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
    }
}

/* Rows [row0, row0 + count) into their tiles' lanes, one by one. */
static void pack_rows(int pt, void *dst, int n, int row0, int count, const void *src, size_t src_stride) {
    int nb = n / QK;
    size_t ts = tile_size(pt, nb);
    for (int i = 0; i < count; i++) {
        int r = row0 + i, l = r % R;
        uint8_t *tile = (uint8_t *)dst + (size_t)(r / R) * ts;
        const uint8_t *row = (const uint8_t *)src + (size_t)i * src_stride;
        for (int b = 0; b < nb; b++) {
            uint8_t *q = tile + q_off(pt, nb, b) + 4 * l;
            uint8_t *d = tile + d_off(pt, b) + 2 * l;
            if (pt == T_Q8_0) {
                const struct blk_q8_0 *blk = (const struct blk_q8_0 *)row + b;
                for (int c = 0; c < 8; c++)
                    for (int k = 0; k < 4; k++) q[64 * c + k] = (uint8_t)(blk->qs[4 * c + k] ^ 0x80);
                memcpy(d, &blk->d, 2);
            } else if (pt == T_IQ4_NL) {
                const struct blk_iq4_nl *blk = (const struct blk_iq4_nl *)row + b;
                for (int c = 0; c < 4; c++) memcpy(q + 64 * c, blk->qs + 4 * c, 4);
                memcpy(d, &blk->d, 2);
            } else if (pt == T_MXFP4) {
                const struct blk_mxfp4 *blk = (const struct blk_mxfp4 *)row + b;
                for (int c = 0; c < 4; c++) memcpy(q + 64 * c, blk->qs + 4 * c, 4);
                uint16_t e = blk->e;
                memcpy(d, &e, 2);
            } else if (pt == T_Q4_0) {
                const struct blk_q4_0 *blk = (const struct blk_q4_0 *)row + b;
                for (int c = 0; c < 4; c++) memcpy(q + 64 * c, blk->qs + 4 * c, 4);
                memcpy(d, &blk->d, 2);
            } else if (pt == T_Q4_1) {
                const struct blk_q4_1 *blk = (const struct blk_q4_1 *)row + b;
                for (int c = 0; c < 4; c++) memcpy(q + 64 * c, blk->qs + 4 * c, 4);
                memcpy(d, &blk->d, 2);
                memcpy(tile + m_off(pt, nb, b) + 2 * l, &blk->m, 2);
            } else {
                /* Q5_0 and Q5_1 share the layout of qh and qs */
                const uint8_t *qh, *qs;
                if (pt == T_Q5_0) {
                    const struct blk_q5_0 *blk = (const struct blk_q5_0 *)row + b;
                    qh = blk->qh;
                    qs = blk->qs;
                    memcpy(d, &blk->d, 2);
                } else {
                    const struct blk_q5_1 *blk = (const struct blk_q5_1 *)row + b;
                    qh = blk->qh;
                    qs = blk->qs;
                    memcpy(d, &blk->d, 2);
                    memcpy(tile + m_off(pt, nb, b) + 2 * l, &blk->m, 2);
                }
                uint32_t h;
                memcpy(&h, qh, 4);
                for (int c = 0; c < 4; c++) memcpy(q + 64 * c, qs + 4 * c, 4);
                uint8_t *hb = q + 4 * 64; /* lane l of chunk 4 */
                for (int e = 0; e < 4; e++) {
                    unsigned v = 0;
                    for (int c = 0; c < 4; c++)
                        v |= ((h >> (4 * c + e)) & 1u) << c | ((h >> (16 + 4 * c + e)) & 1u) << (4 + c);
                    hb[e] = (uint8_t)v;
                }
            }
        }
    }
}

void kn_pack_rows_avx512(int type, void *dst, int n, int row0, int count, const void *src,
                         size_t src_stride) {
    int pt = ptype(type), nb = n / QK;
    if (pt < 0) {
        kn_pack_rows_pk_avx512(type, dst, n, row0, count, src, src_stride);
        return;
    }
    if (is_q5(pt) || src_stride > (size_t)INT32_MAX / R) {
        pack_rows(pt, dst, n, row0, count, src, src_stride);
        return;
    }
    /* whole tiles by gathers, the rows around them one by one */
    size_t ts = tile_size(pt, nb);
    int i = 0;
    while (i < count && (row0 + i) % R) i++;
    pack_rows(pt, dst, n, row0, i, src, src_stride);
    for (; i + R <= count; i += R)
        pack_tile_gather(pt, (uint8_t *)dst + (size_t)((row0 + i) / R) * ts, nb,
                         (const uint8_t *)src + (size_t)i * src_stride, src_stride);
    pack_rows(pt, dst, n, row0 + i, count - i, (const uint8_t *)src + (size_t)i * src_stride, src_stride);
}

/* ---------------------------------------------------------------------- */
/* the tile kernel */


/* One call chunk of activation rows, as the kernel reads them. */
struct pk_act {
    const int8_t *q[TOK_CHUNK];  /* qs of each token row */
    const float *d[TOK_CHUNK];   /* da per block */
    const float *s[TOK_CHUNK];   /* sa per block */
    const int32_t *c[TOK_CHUNK]; /* minus the integer correction per block (has_corr) */
};

/* kn_e8m0_half of 16 scale bytes (each in the low byte of a 16-bit slot):
 * 2^(e - 128) from its bits, (e - 1) << 23, or the subnormal
 * 0x00200000 << e for e < 2. */
static inline __m512 e8m0_half16(const uint16_t *d) {
    const __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)d));
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i nrm = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, nrm, sub));
}

static inline __m512i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Tiles tp[0..nt) times tokens [t0, t0 + mt) of a; lane mask sm[i] of
 * which rows of tile i to store at y + t*ldy + rb[i].
 *
 * Per 64-byte weight chunk, every tile's chunk is loaded (and for Q4
 * unpacked) once, every token's 4 activation bytes are broadcast once, and
 * the nt x mt vpdpbusd run from registers. Loads, not the dot products,
 * bound this loop (2 loads per cycle): a 1 x 8 shape needs 9 loads per 8
 * vpdpbusd, 2 x 6 needs 5.3 (GT x GM), hence 2 x 6: ~285 GOP/s (Q4) and
 * ~310 (Q8_0) against ~200 for 1 x 8 and ~260 for 2 x 4, hot weights,
 * 1 thread, n 576 and 1536, 64 tokens (commit 82a1cc2). */
static inline __attribute__((always_inline)) void
pk_tiles(int pt, int nt, int mt, const uint8_t *const tp[NT], int nb, const struct pk_act *a,
         int t0, float *y, size_t ldy, const int rb[NT], const __mmask16 sm[NT], int pf) {
    const int ch = chunks(pt), cq = is_q5(pt) ? 4 : ch; /* chunks of quants */
    /* one token (weights streamed from memory): each group's d (and m)
     * of every tile, copied once at the group's start, so that the tile
     * is only ever read forward; several tokens read them from the tile,
     * in cache by then (the copy, a libc call per group, tile and
     * register tile, cost 1-12% at 512 tokens) */
    uint16_t dl[NT][GB][16] __attribute__((aligned(64))), ml[NT][GB][16] __attribute__((aligned(64)));
    const __m512i nib = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    /* IQ4_NL: its 16 values + 128, in every 128-bit lane (vpshufb) */
    const __m512i nl = pt == T_IQ4_NL  ? _mm512_broadcast_i32x4(_mm_add_epi8(
                                             _mm_loadu_si128((const __m128i *)kn_iq4nl_values),
                                             _mm_set1_epi8((char)0x80)))
                       : pt == T_MXFP4 ? _mm512_broadcast_i32x4(_mm_add_epi8(
                                             _mm_loadu_si128((const __m128i *)kn_mxfp4_values),
                                             _mm_set1_epi8((char)0x80)))
                                       : _mm512_setzero_si512();
    __m512 acc[NT][MT];
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) acc[i][t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i is[NT][MT];
        const uint8_t *qb[NT];
        if (b % GB == 0 && mt == 1) {
            const int gl = grp_len(nb, b);
#pragma GCC unroll 4
            for (int i = 0; i < nt; i++) {
                memcpy(dl[i], tp[i] + d_off(pt, b), (size_t)gl * 32);
                if (has_m(pt)) memcpy(ml[i], tp[i] + m_off(pt, nb, b), (size_t)gl * 32);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            qb[i] = tp[i] + q_off(pt, nb, b);
            /* the integer correction is the accumulators' start: a
             * broadcast load, no arithmetic (Q4_1, Q5_1 have none) */
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++)
                is[i][t] = has_corr(pt) ? _mm512_set1_epi32(a->c[t0 + t][b]) : _mm512_setzero_si512();
            if (pf) {
#pragma GCC unroll 8
                for (int c = 0; c < ch; c++) kn_pf(qb[i] + PF_DIST + 64 * c);
                if (b % GB == 0) /* the head of the group PF_DIST ahead */
                    for (int c = 0; c < (has_m(pt) ? 8 : 4); c++)
                        kn_pf(tp[i] + d_off(pt, b) + PF_DIST + 64 * c);
            }
        }
#pragma GCC unroll 8
        for (int c = 0; c < cq; c++) {
            if (pt == T_Q8_0) {
                __m512i w[NT];
#pragma GCC unroll 4
                for (int i = 0; i < nt; i++) w[i] = _mm512_load_si512(qb[i] + 64 * c);
#pragma GCC unroll 8
                for (int t = 0; t < mt; t++) {
                    __m512i x = bcast32(a->q[t0 + t] + b * QK + 4 * c);
#pragma GCC unroll 4
                    for (int i = 0; i < nt; i++) is[i][t] = _mm512_dpbusd_epi32(is[i][t], w[i], x);
                }
            } else {
                __m512i lo[NT], hi[NT];
#pragma GCC unroll 4
                for (int i = 0; i < nt; i++) {
                    __m512i v = _mm512_load_si512(qb[i] + 64 * c);
                    if (is_q5(pt)) { /* nibble | the high bit moved to bit 4 */
                        const __m512i hb = _mm512_load_si512(qb[i] + 4 * 64);
                        __m512i l4 = _mm512_and_si512(v, nib);
                        __m512i h4 = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                        lo[i] = _mm512_ternarylogic_epi32(l4, _mm512_slli_epi16(hb, 4 - c), b4, 0xF8); /* A | (B & C) */
                        hi[i] = _mm512_ternarylogic_epi32(h4, _mm512_srli_epi16(hb, c), b4, 0xF8);
                    } else {
                        lo[i] = _mm512_and_si512(v, nib);
                        hi[i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                        if (pt == T_IQ4_NL || pt == T_MXFP4) {
                            lo[i] = _mm512_shuffle_epi8(nl, lo[i]);
                            hi[i] = _mm512_shuffle_epi8(nl, hi[i]);
                        }
                    }
                }
#pragma GCC unroll 8
                for (int t = 0; t < mt; t++) {
                    const int8_t *xp = a->q[t0 + t] + b * QK + 4 * c;
                    __m512i xl = bcast32(xp), xh = bcast32(xp + 16);
#pragma GCC unroll 4
                    for (int i = 0; i < nt; i++) {
                        is[i][t] = _mm512_dpbusd_epi32(is[i][t], lo[i], xl);
                        is[i][t] = _mm512_dpbusd_epi32(is[i][t], hi[i], xh);
                    }
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            /* several tokens: the group's head straight from the tile
             * (in cache by now); one token: the copy (read forward) */
            const uint16_t *dsrc = mt == 1 ? dl[i][b % GB] : (const uint16_t *)(tp[i] + d_off(pt, b));
            const uint16_t *msrc = mt == 1 ? ml[i][b % GB] : (const uint16_t *)(tp[i] + m_off(pt, nb, b));
            __m512 dw = pt == T_MXFP4 ? e8m0_half16(dsrc)
                                      : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dsrc));
            __m512 mw = has_m(pt) ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)msrc))
                                  : _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                if (pt == T_IQ4_NL || pt == T_MXFP4) { /* the reference's operations, unfused */
                    __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(a->d[t0 + t][b]));
                    acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(sc, _mm512_cvtepi32_ps(is[i][t])));
                    continue;
                }
                __m512i s = is[i][t];
                __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(a->d[t0 + t][b]));
                acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[i][t]);
                if (has_m(pt)) acc[i][t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a->s[t0 + t][b]), acc[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++)
            _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * ldy + rb[i], sm[i], acc[i][t]);
}

#define PK_CASE(N, M) \
    case (N) * 16 + (M): pk_tiles(pt, N, M, tp, nb, a, t0, y, ldy, rb, sm, pf); break;

static inline __attribute__((always_inline)) void
pk_tile_tokens(int pt, int nt, int mt, const uint8_t *const tp[NT], int nb, const struct pk_act *a,
               int t0, float *y, size_t ldy, const int rb[NT], const __mmask16 sm[NT], int pf) {
    switch (nt * 16 + mt) {
        PK_CASE(GT, 6) PK_CASE(GT, 5) PK_CASE(GT, 4) PK_CASE(GT, 3) PK_CASE(GT, 2) PK_CASE(GT, 1)
        PK_CASE(1, 6) PK_CASE(1, 5) PK_CASE(1, 4) PK_CASE(1, 3) PK_CASE(1, 2) PK_CASE(1, 1)
    default: break;
    }
}

/* Integer corrections of one activation row, negated (the start of the
 * block's integer dot): c[b] = -k * sum(qa of block b). */
static void block_corr(int32_t *c, const int8_t *q, int nb, int k) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int b = 0; b < nb; b++) {
        __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(q + b * QK)), bias);
        __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256()); /* sums of (q + 128) */
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
        c[b] = -k * ((int32_t)_mm_cvtsi128_si32(h) - 128 * QK);
    }
}

/* Tokens from which a call runs on AMX (when kn_amx_active): one 16-token
 * tile pays for its window's unpack where the VNNI kernel has work to
 * save, but Q8_0 (nothing to decode on VNNI) and the types with mins (an
 * extra float step per block) lost 2-24% there on rows of 2048 and more,
 * and still 2-3% at 32 tokens (bench --kernels --m 16,32, one thread). */
static inline int amx_min(int pt, int n) {
    if (pt == T_Q8_0 || pt == T_Q4_1 || pt == T_Q5_1) return n <= 1536 ? 32 : 64;
    return 16;
}

static inline __attribute__((always_inline)) void
matmul_p(int pt, float *restrict y, size_t ldy, const void *restrict w, const void *restrict x,
         size_t x_stride, int n, int n_tokens, int r0, int r1) {
    const int nb = n / QK;
    const size_t ts = tile_size(pt, nb);
    const uint8_t *wb = w, *xb = x;
    const int k0 = r0 / R, k1 = (r1 + R - 1) / R, one = kn_one_stream(); /* avx512.h */
    int32_t corr[CORR_MAX];
    struct pk_act a;
    if (r0 >= r1 || n_tokens <= 0) return;
    if (n_tokens >= amx_min(pt, n) && kn_amx_active()) {
        /* whole 16-token tiles on AMX, same bits (cpu/amx/matmul_p_amx.c) */
        int done = kn_matmul_p_amx(pt, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
        y += (size_t)done * ldy;
        xb += (size_t)done * x_stride;
        n_tokens -= done;
        if (n_tokens == 0) return;
    }
    int tc = CORR_MAX / nb < TOK_CHUNK ? CORR_MAX / nb : TOK_CHUNK;
    for (int c0 = 0; c0 < n_tokens; c0 += tc) {
        int nt = n_tokens - c0 < tc ? n_tokens - c0 : tc;
        for (int t = 0; t < nt; t++) {
            const uint8_t *row = xb + (size_t)(c0 + t) * x_stride;
            a.q[t] = (const int8_t *)row;
            a.d[t] = (const float *)(row + n);
            a.s[t] = a.d[t] + nb;
            a.c[t] = corr + (size_t)t * nb;
            if (has_corr(pt))
                block_corr(corr + (size_t)t * nb, a.q[t], nb,
                           pt == T_Q4_0 ? 8 : pt == T_Q5_0 ? 16 : 128);
        }
        float *yc = y + (size_t)c0 * ldy;
        if (nt == 1) {
            /* one token: on Intel, NT stretches of the tile range in
             * lockstep, each a separate memory stream, prefetched into L1;
             * on AMD the tiles in order, one stream read strictly forward,
             * left to the hardware prefetchers on Zen 4, prefetched on
             * Zen 5 (avx512.h); the leftover tiles one by one */
            const int q = one ? 0 : (k1 - k0) / NT;
            for (int j = 0; j < q; j++) {
                const uint8_t *tp[NT];
                int rb[NT];
                __mmask16 sm[NT];
#pragma GCC unroll 4
                for (int s = 0; s < NT; s++) {
                    int k = k0 + s * q + j;
                    tp[s] = wb + (size_t)k * ts;
                    rb[s] = k * R;
                    sm[s] = lanes(k, r0, r1);
                }
                pk_tiles(pt, NT, 1, tp, nb, &a, 0, yc, ldy, rb, sm, 1);
            }
            for (int k = k0 + NT * q; k < k1; k++) {
                const uint8_t *tp[NT] = {wb + (size_t)k * ts};
                int rb[NT] = {k * R};
                __mmask16 sm[NT] = {lanes(k, r0, r1)};
                pk_tiles(pt, 1, 1, tp, nb, &a, 0, yc, ldy, rb, sm, !one || kn_one_pf());
            }
            continue;
        }
        /* GT tiles x GM tokens at a time (the leftover tile alone) */
        for (int k = k0; k < k1; k += GT) {
            int ntl = k1 - k < GT ? k1 - k : GT;
            const uint8_t *tp[NT];
            int rb[NT];
            __mmask16 sm[NT];
            for (int i = 0; i < ntl; i++) {
                tp[i] = wb + (size_t)(k + i) * ts;
                rb[i] = (k + i) * R;
                sm[i] = lanes(k + i, r0, r1);
            }
            for (int t = 0; t < nt; t += GM) {
                int mt = nt - t < GM ? nt - t : GM;
                pk_tile_tokens(pt, ntl, mt, tp, nb, &a, t, yc, ldy, rb, sm, t == 0);
            }
        }
    }
}

#define DEFINE_MATMUL_P(NAME, PT) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        (void)w_stride; \
        matmul_p(PT, y, ldy, w, x, x_stride, n, n_tokens, r0, r1); \
    }

DEFINE_MATMUL_P(kn_matmul_p_q8_0_avx512, T_Q8_0)
DEFINE_MATMUL_P(kn_matmul_p_q4_0_avx512, T_Q4_0)
DEFINE_MATMUL_P(kn_matmul_p_q4_1_avx512, T_Q4_1)
DEFINE_MATMUL_P(kn_matmul_p_q5_0_avx512, T_Q5_0)
DEFINE_MATMUL_P(kn_matmul_p_q5_1_avx512, T_Q5_1)
DEFINE_MATMUL_P(kn_matmul_p_iq4_nl_avx512, T_IQ4_NL)
DEFINE_MATMUL_P(kn_matmul_p_mxfp4_avx512, T_MXFP4)
