/*
 * matmul_pk.c (avx512) - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights repacked at load time into
 * 16-row tiles, times Q8K activations, with AVX-512 VNNI. The
 * specification is cpu/ref/matmul.c; the GGUF-layout kernels
 * (cpu/avx2/matmul_k.c) serve matrices that are not packed. The 32-element
 * types' tiles are in matmul_p.c; this file follows the same plan.
 *
 * Layout ("P16K"). Rows are grouped in tiles of KN_PACK_ROWS = 16; the
 * last tile is padded with zero rows. In a tile, zmm dword lane l is row l,
 * and a 64-byte chunk holds 4 bytes of each of the 16 rows (lane l = bytes
 * 4c..4c+3 of that row's field, c the chunk's index in the field). A tile
 * is the super-blocks 0..nsb-1 of its 16 rows one after the other ("body"),
 * each body the GGUF block fields transposed into chunks, the fields a
 * super-block needs first (scales, d) at its front, the quants after them
 * in the order the kernel first touches them. So a tile is read strictly
 * forward, one line after the other: on AMD (Zen 4) the hardware
 * prefetchers stop at a backward step, and with the scales at the end of
 * the body (read first) one core streamed Q4_K at ~20 GB/s and Q6_K at
 * 10-16; read forward, both at 25-31 GB/s without software prefetch.
 *   Q4_K (2304 bytes = 16 x 144): the 12 scale bytes in 3 chunks (still
 *     6-bit packed: decoded per tile and super-block, once for all the
 *     tokens of a register tile), d (16 f16) and dmin (16 f16), then qs
 *     in 32 chunks (chunk c: nibble h of byte i is element
 *     64(c/8) + 32h + 4(c%8) + i);
 *   Q5_K (2816 bytes = 16 x 176): as Q4_K with the 32 qh bytes in 8
 *     chunks before qs (chunk c: bit j of byte i is bit 4 of element
 *     32j + 4c + i; the kernel reads qh chunk c beside qs chunk c);
 *   Q6_K (3328 bytes): the 16 int8 scales in 4 chunks, then the 6-bit
 *     quants regrouped (same 192 bytes per row): group g = 8h + c (h < 2,
 *     c < 8) is 3 chunks B0, B1, B2, byte i of lane l of B_s holding
 *     q(128h + 32s + 4c + i) in bits 0..5 and bits 2s, 2s+1 of
 *     q(128h + 96 + 4c + i) in bits 6..7; chunk B_s of group 8h + c sits
 *     at 64 (24h + 8s + c) after the scales (first-touch order). Three of
 *     four quants are then one AND, the fourth (s = 3) comes out as 4q
 *     with two shifts (GGUF's ql/qh split would take five shifts per four
 *     chunks, and shifts share port 0 with vpdpbusd); its sub-blocks'
 *     partial sums are 4x, so the other sub-blocks' scales are taken 4x
 *     too and S1 is shifted back by 2 at the end (exact: every term is a
 *     multiple of 4; |4 S1| < 2^31). The d of all super-blocks (16 f16
 *     each) come first in the tile, rounded up to 64 bytes, so that every
 *     body stays 64-byte aligned; the kernel copies them to the stack
 *     before the first body (up to DLOC super-blocks), so that it never
 *     steps back to them;
 *   IQ4_XS (2176 bytes = 16 x 136): the d of all super-blocks first, as
 *     Q6_K's; the body is scales_l (4 bytes) and scales_h (2 bytes, 2
 *     zero) in a chunk each, then the nibbles in Q4_K's arrangement
 *     (regrouped at pack time from IQ4_XS's 16-byte sub-block halves:
 *     nibble h of byte i of chunk c is element 64(c/8) + 32h + 4(c%8) + i);
 *   Q2_K (1344 bytes = 16 x 84): the 16 scale bytes in 4 chunks, d and
 *     dmin (16 f16 each), then qs regrouped in 16 chunks, chunk g = 4h +
 *     k: bits 2s, 2s+1 of byte i are q(16(4h + s) + 4k + i), so one AND
 *     gives 4^s q (no shift: field s of sub-block j = 4h + s);
 *   Q3_K (1728 bytes + d): the 12 scale bytes in 3 chunks, then the 3-bit
 *     qw = q + 4 hbit regrouped (same 96 bytes per row): group g = 4h + k
 *     (h < 2, k < 4) is 3 chunks B0..B2, slot m < 8 = element
 *     16(8h + m) + 4k + i in byte i: B_s holds slot 2s in bits 0..2 and
 *     2s+1 in bits 3..5 (one AND: qw, 8 qw); bits 6..7 hold slot 6 (bits
 *     0, 1 in B0, bit 2 in B1 bit 6) and slot 7 (bit 0 in B1 bit 7, bits
 *     1, 2 in B2), 16 qw and 32 qw with one shift, one AND and one
 *     vpternlogd each (no 3-bit field can sit at bits 2 or 5 of a byte
 *     next to two full ones, so two of eight need a shift: 1 shift per 4
 *     chunks, Q6_K has 2); d as Q6_K's, at the front of the tile.
 * So the packed matrix is the GGUF bytes plus at most 32 bytes per tile
 * (and the padding rows of the last tile).
 *
 * Why: one vpdpbusd takes a chunk of unsigned weights (16 rows x 4
 * elements, decoded from nibbles and 2-bit fields with a few logic ops)
 * against 4 activation bytes of one token broadcast to every lane, so the
 * 16 lanes are 16 independent output rows: no horizontal sums, and a
 * decoded chunk serves GM tokens from registers.
 *
 * Numerics, per lane (row r, token t) and super-block in order: the
 * reference's exact integer sums, then its float step, operation for
 * operation with separate mul/add/sub (no FMA; -std=c11 keeps GCC from
 * contracting), so y(t, r) equals the reference bit for bit in every shape
 * and whatever n_tokens, r0 and r1 are (batch invariance, kernels/ops.h):
 *   isum_j = sum(q * qa) over sub-block j (vpdpbusd, q unsigned: Q4_K
 *     0..15, Q5_K 0..31, Q6_K 0..63; |isum_j| <= 16 * 63 * 128 at most);
 *     the types without mins start it at the sub-block's offset term
 *     (-32 bsum16_j for Q6_K, from the token's scratch: a broadcast load)
 *     so that S1 is the reference's S directly;
 *   S1 = sum_j sc_j * isum_j (vpmulld by the lane's decoded scale, per
 *     sub-block: on Zen 4 one vpmulld per 32 elements costs less than
 *     Q4_K's former vpdpwssd per 16, each taking a vpdpbusd slot);
 *   Q4_K, Q5_K: S2 = sum_j m_j * bsum32_j, by vpdpwssd of (m_2p, m_2p+1) int16
 *     pairs against the token's (bsum32_2p, bsum32_2p+1) (bsum32 = sum of
 *     32 qa, |.| <= 4064, fits int16), then
 *     acc + ((d * da) * S1 - (dmin * da) * S2);
 *     S2 is computed before the super-block's dots (its vpdpwssd chain
 *     then overlaps them);
 *   Q6_K: isum_j starts at -32 bsum16_j (x4 in the slots whose weights
 *     come 4x, see wchunk), so S1 = sum_j sc_j * (isum_j - 32 * bsum16_j),
 *     the reference's S exactly, and acc + (d * da) * S1;
 *   IQ4_XS: the nibbles index the 16 values + 128 (one vpshufb: unsigned,
 *     |isum_j| <= 32 * 241 * 128), sc_j = ls_j in -32..31, isum_j starts
 *     at -128 bsum32_j, and acc + (d * da) * S1, S1 being the reference's
 *     sum_j ls_j * isum_j exactly;
 *   Q2_K: weights 4^s q (<= 192) and scales 4^(3-s) sc, so every term is
 *     64 sc_j isum_j: S1' = 64 S1, |S1'| <= 64 * 16 * 15 * 16 * 3 * 128 <
 *     1e8; S2 = sum_j m_j * bsum16_j by vpdpwssd (pairs (m_4v, m_4v+2),
 *     (m_4v+1, m_4v+3), as Q6_K's), then Q4_K's float step with S1 = S1'
 *     >> 6 (exact);
 *   Q3_K: weights f qw (f = 1, 8, 16, 32 by slot, <= 224) and scales (32 /
 *     f) sc_j (sc_j in -32..31), isum_j starting at -4 f bsum16_j: S1' =
 *     32 S, |S1'| <= 32 * 16 * 32 * 16 * 11 * 128 < 3.7e8, and acc + (d *
 *     da) * (S1' >> 5), the reference's S exactly.
 * All bounded well inside int32 (cpu/ref/matmul.c: |S| < 4e8).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/amx/amx.h"
#include "kernels/cpu/avx512/avx512.h"
#include "kernels/cpu/avx512/p16k.h"


enum {
    /* several tokens: register tiles of GT tiles x GM tokens. 1 x 6, not
     * 1 x 8: is and s1 (and s2) then stay in registers (1 x 8 spilled a
     * third of them); 2-8% faster on Zen 4 for every type. 2 x 4 halves
     * the broadcasts but decodes each chunk for 4 tokens: 4-12% slower */
    GT = 1, GM = 6,
    MT = GM,           /* most tokens per register tile */
    NT = 4,            /* tiles in lockstep for one token (memory streams) */
    PF_DIST = 4096,    /* software prefetch distance (see matmul_q.c) */
    /* int32 bsum pairs per call chunk (128 KB of stack): the weights are
     * streamed once per chunk, and at 8192 wide a 32 KB scratch held
     * Q6_K to 16 tokens a chunk (64 now: Q6_K +12%, Q3_K +37% there) */
    SCR_MAX = 32768,
    TOK_CHUNK = 256,   /* tokens per call chunk */
    DLOC = 64,         /* super-blocks of d copied to the stack (n <= 16384) */
    /* Q2_K, Q3_K with many tokens: the fewest tokens of a call chunk
     * that take the decoded windows (p16k.h: DWIN; the decode pays for
     * itself from about 16 tokens for Q2_K, 20 for Q3_K) */
    DEC_MIN = 24,
    /* tokens from which AMX runs (when kn_amx_active): every type here
     * beats its VNNI kernel from one token tile (IQ4_XS with its two-pass
     * decode: 1.13-1.21x at 16 tokens, 1.6-1.7x at 32, one thread, hot;
     * commit 6faf8a1) */
    AMX_MIN = 16,
};

size_t kn_pack_size_pk_avx512(int type, int rows, int n) {
    int pt = ptype(type);
    if (pt < 0 || rows <= 0 || n <= 0 || n % QK_K || n / QK_K * nscr(pt) > SCR_MAX) return 0;
    return (size_t)((rows + R - 1) / R) * tile_size(pt, n / QK_K);
}

/* Q4_K, Q5_K: a whole tile (16 rows of src) at once, every 4-byte field
 * gathered from the 16 rows into one 64-byte chunk: the bytes the row loop
 * below writes 4 at a time. */
static void pack_tile_q45(int pt, uint8_t *tile, int nsb, const uint8_t *src, size_t src_stride) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)src_stride));
    const size_t bb = pt == T_Q4_K ? sizeof(struct blk_q4_k) : sizeof(struct blk_q5_k);
    for (int b = 0; b < nsb; b++) {
        const uint8_t *blk = src + (size_t)b * bb;
        uint8_t *body = tile + (size_t)b * body_size(pt);
        /* d and dmin: the first dword of each block */
        __m512i dd = _mm512_i32gather_epi32(idx, blk, 1);
        _mm256_store_si256((__m256i *)(body + d_off(pt)), _mm512_cvtepi32_epi16(dd));
        _mm256_store_si256((__m256i *)(body + dmin_off(pt)), _mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
        for (int c = 0; c < 3; c++)
            _mm512_store_si512(body + sc_off(pt) + 64 * c, _mm512_i32gather_epi32(idx, blk + 4 + 4 * c, 1));
        const size_t qo = pt == T_Q4_K ? offsetof(struct blk_q4_k, qs) : offsetof(struct blk_q5_k, qs);
        const size_t bq = pt == T_Q4_K ? Q4K_Q : Q5K_Q;
        for (int c = 0; c < 32; c++)
            _mm512_store_si512(body + bq + 64 * c, _mm512_i32gather_epi32(idx, blk + qo + 4 * c, 1));
        if (pt == T_Q5_K)
            for (int c = 0; c < 8; c++)
                _mm512_store_si512(body + Q5K_QH + 64 * c,
                                   _mm512_i32gather_epi32(idx, blk + offsetof(struct blk_q5_k, qh) + 4 * c, 1));
    }
}

/* Q6_K: a whole tile at once, as the row loop below regroups it: for
 * group h, c the ql dwords at 64h + 4c and 64h + 32 + 4c and the qh dword
 * at 32h + 4c of each row give q_t (t < 4) of elements 128h + 32t + 4c +
 * i, and chunk B_t (t < 3) holds q_t | (bits 2t, 2t+1 of q_3) << 6. */
static void pack_tile_q6(uint8_t *tile, int nsb, const uint8_t *src, size_t src_stride) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)src_stride));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
    for (int b = 0; b < nsb; b++) {
        const uint8_t *blk = src + (size_t)b * sizeof(struct blk_q6_k);
        uint8_t *body = tile + body0(T_Q6_K, nsb) + (size_t)b * Q6K_BODY;
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 8; c++) {
                const __m512i a0 = _mm512_i32gather_epi32(idx, blk + offsetof(struct blk_q6_k, ql) + 64 * h + 4 * c, 1);
                const __m512i a1 = _mm512_i32gather_epi32(idx, blk + offsetof(struct blk_q6_k, ql) + 64 * h + 32 + 4 * c, 1);
                const __m512i hb = _mm512_i32gather_epi32(idx, blk + offsetof(struct blk_q6_k, qh) + 32 * h + 4 * c, 1);
                __m512i q[4];
                q[0] = _mm512_or_si512(_mm512_and_si512(a0, m4), _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4));
                q[1] = _mm512_or_si512(_mm512_and_si512(a1, m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2), m2), 4));
                q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a0, 4), m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 4), m2), 4));
                q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a1, 4), m4),
                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 6), m2), 4));
                for (int t = 0; t < 3; t++) {
                    __m512i top = _mm512_and_si512(q[3], _mm512_set1_epi8((char)(3 << (2 * t))));
                    top = 2 * t < 6 ? _mm512_slli_epi16(top, 6 - 2 * t) : top; /* bits 2t, 2t+1 to 6, 7 */
                    _mm512_store_si512(body + Q6K_Q + 64 * (24 * h + 8 * t + c), _mm512_or_si512(q[t], top));
                }
            }
        for (int c = 0; c < 4; c++)
            _mm512_store_si512(body + Q6K_SC + 64 * c,
                               _mm512_i32gather_epi32(idx, blk + offsetof(struct blk_q6_k, scales) + 4 * c, 1));
        /* d: the high half of the block's last dword (inside the block) */
        const __m512i dd = _mm512_i32gather_epi32(idx, blk + offsetof(struct blk_q6_k, d) - 2, 1);
        _mm256_store_si256((__m256i *)(tile + (size_t)b * 32), _mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    }
}

/* Rows [row0, row0 + count) of src into their tiles' lanes, one by one. */
static void pack_rows(int pt, void *dst, int n, int row0, int count, const void *src, size_t src_stride) {
    int nsb = n / QK_K;
    size_t ts = tile_size(pt, nsb);
    for (int i = 0; i < count; i++) {
        int r = row0 + i, l = r % R;
        uint8_t *tile = (uint8_t *)dst + (size_t)(r / R) * ts;
        const uint8_t *row = (const uint8_t *)src + (size_t)i * src_stride;
        for (int b = 0; b < nsb; b++) {
            uint8_t *body = tile + body0(pt, nsb) + (size_t)b * body_size(pt) + 4 * l;
            if (pt == T_Q4_K) {
                const struct blk_q4_k *blk = (const struct blk_q4_k *)row + b;
                for (int c = 0; c < 32; c++) memcpy(body + Q4K_Q + 64 * c, blk->qs + 4 * c, 4);
                for (int c = 0; c < 3; c++) memcpy(body + Q4K_SC + 64 * c, blk->scales + 4 * c, 4);
                memcpy(body - 4 * l + Q4K_D + 2 * l, &blk->d, 2);
                memcpy(body - 4 * l + Q4K_DMIN + 2 * l, &blk->dmin, 2);
            } else if (pt == T_Q5_K) {
                const struct blk_q5_k *blk = (const struct blk_q5_k *)row + b;
                for (int c = 0; c < 32; c++) memcpy(body + Q5K_Q + 64 * c, blk->qs + 4 * c, 4);
                for (int c = 0; c < 8; c++) memcpy(body + Q5K_QH + 64 * c, blk->qh + 4 * c, 4);
                for (int c = 0; c < 3; c++) memcpy(body + Q5K_SC + 64 * c, blk->scales + 4 * c, 4);
                memcpy(body - 4 * l + Q5K_D + 2 * l, &blk->d, 2);
                memcpy(body - 4 * l + Q5K_DMIN + 2 * l, &blk->dmin, 2);
            } else if (pt == T_Q6_K) {
                const struct blk_q6_k *blk = (const struct blk_q6_k *)row + b;
                /* group g = 8h + c: elements 128h + 32s + 4c + i, s < 4, i < 4 */
                for (int g = 0; g < 16; g++)
                    for (int e = 0; e < 4; e++) {
                        int h = g / 8, o = 4 * (g % 8) + e, q[4];
                        for (int t = 0; t < 4; t++)
                            q[t] = ((blk->ql[64 * h + 32 * (t % 2) + o] >> (4 * (t / 2))) & 0x0f) |
                                   ((blk->qh[32 * h + o] >> (2 * t)) & 3) << 4;
                        for (int t = 0; t < 3; t++)
                            body[Q6K_Q + 64 * (24 * h + 8 * t + g % 8) + e] = (uint8_t)(q[t] | ((q[3] >> (2 * t)) & 3) << 6);
                    }
                for (int c = 0; c < 4; c++) memcpy(body + Q6K_SC + 64 * c, blk->scales + 4 * c, 4);
                memcpy(tile + (size_t)b * 32 + 2 * l, &blk->d, 2);
            } else if (pt == T_Q2_K || pt == T_Q3_K) {
                /* both: the 2-bit q of element e sits in qs as in Q2K_Q */
                const struct blk_q2_k *b2 = (const struct blk_q2_k *)row + b;
                const struct blk_q3_k *b3 = (const struct blk_q3_k *)row + b;
                const uint8_t *qs = pt == T_Q2_K ? b2->qs : b3->qs;
#define Q2K_Q(e) ((qs[32 * ((e) / 128) + (e) % 32] >> (2 * ((e) % 128 / 32))) & 3)
                if (pt == T_Q2_K) {
                    /* chunk g = 4h + k: field s of byte ib is element
                     * 16(4h + s) + 4k + ib */
                    for (int g = 0; g < 16; g++)
                        for (int ib = 0; ib < 4; ib++) {
                            int v = 0;
                            for (int f = 0; f < 4; f++) v |= Q2K_Q(16 * (4 * (g / 4) + f) + 4 * (g % 4) + ib) << (2 * f);
                            body[Q2K_Q + 64 * g + ib] = (uint8_t)v;
                        }
                    for (int c = 0; c < 4; c++) memcpy(body + Q2K_SC + 64 * c, b2->scales + 4 * c, 4);
                    memcpy(body - 4 * l + Q2K_D + 2 * l, &b2->d, 2);
                    memcpy(body - 4 * l + Q2K_DMIN + 2 * l, &b2->dmin, 2);
                } else {
                    /* group g = 4h + k: slot m < 8 is element 16(8h + m)
                     * + 4k + ib, qw = q + 4 * hbit, 3 bits (see header) */
                    for (int g = 0; g < 8; g++)
                        for (int ib = 0; ib < 4; ib++) {
                            int v[8];
                            for (int m = 0; m < 8; m++) {
                                int e = 16 * (8 * (g / 4) + m) + 4 * (g % 4) + ib;
                                v[m] = Q2K_Q(e) | ((b3->hmask[e % 32] >> (e / 32)) & 1) << 2;
                            }
                            uint8_t *c = body + Q3K_Q + 192 * g + ib;
                            c[0] = (uint8_t)(v[0] | v[1] << 3 | (v[6] & 3) << 6);
                            c[64] = (uint8_t)(v[2] | v[3] << 3 | (v[6] >> 2) << 6 | (v[7] & 1) << 7);
                            c[128] = (uint8_t)(v[4] | v[5] << 3 | (v[7] >> 1) << 6);
                        }
                    for (int c = 0; c < 3; c++) memcpy(body + Q3K_SC + 64 * c, b3->scales + 4 * c, 4);
                    memcpy(tile + (size_t)b * 32 + 2 * l, &b3->d, 2);
                }
#undef Q2K_Q
            } else {
                const struct blk_iq4_xs *blk = (const struct blk_iq4_xs *)row + b;
                /* element e's nibble: byte 16(e/32) + e%16, half (e%32)/16 */
#define IQ4XS_NIB(e) ((blk->qs[16 * ((e) / 32) + (e) % 16] >> (4 * ((e) % 32 / 16))) & 0x0f)
                for (int c = 0; c < 32; c++)
                    for (int e = 0; e < 4; e++) {
                        int lo = 64 * (c / 8) + 4 * (c % 8) + e;
                        body[IQ4XS_Q + 64 * c + e] = (uint8_t)(IQ4XS_NIB(lo) | IQ4XS_NIB(lo + 32) << 4);
                    }
#undef IQ4XS_NIB
                memcpy(body + IQ4XS_SL, blk->scales_l, 4);
                memcpy(body + IQ4XS_SH, &blk->scales_h, 2);
                memset(body + IQ4XS_SH + 2, 0, 2);
                memcpy(tile + (size_t)b * 32 + 2 * l, &blk->d, 2);
            }
        }
    }
}

void kn_pack_rows_pk_avx512(int type, void *dst, int n, int row0, int count, const void *src,
                            size_t src_stride) {
    int pt = ptype(type), nsb = n / QK_K;
    size_t ts = tile_size(pt, nsb);
    if (!(is_q45(pt) || pt == T_Q6_K) || src_stride > (size_t)INT32_MAX / R) {
        pack_rows(pt, dst, n, row0, count, src, src_stride);
        return;
    }
    /* whole tiles by gathers, the rows around them one by one */
    int i = 0;
    while (i < count && (row0 + i) % R) i++;
    pack_rows(pt, dst, n, row0, i, src, src_stride);
    for (; i + R <= count; i += R) {
        uint8_t *tile = (uint8_t *)dst + (size_t)((row0 + i) / R) * ts;
        const uint8_t *rows = (const uint8_t *)src + (size_t)i * src_stride;
        if (pt == T_Q6_K) pack_tile_q6(tile, nsb, rows, src_stride);
        else pack_tile_q45(pt, tile, nsb, rows, src_stride);
    }
    pack_rows(pt, dst, n, row0 + i, count - i, (const uint8_t *)src + (size_t)i * src_stride, src_stride);
}

/* ---------------------------------------------------------------------- */
/* the tile kernel */

/* One call chunk of activation rows, as the kernel reads them. */
struct pk_act {
    const int8_t *q[TOK_CHUNK];  /* qs of each token row (Q8K) */
    const float *d[TOK_CHUNK];   /* da per super-block */
    const int32_t *p[TOK_CHUNK]; /* nscr(pt) int32 per super-block (pk_scratch) */
};

static inline __m512i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}


/* Tiles tp[0..nt) times tokens [t0, t0 + mt) of a; lane mask sm[i] of
 * which rows of tile i to store at y + t*ldy + rb[i]. Per super-block:
 * decode every tile's scales, then sub-block by sub-block the nt x mt
 * integer dots (a chunk decoded once per tile, an activation broadcast
 * once per token), scaled into S1 per sub-block; then S2 and the float
 * step per (tile, token). */
static inline __attribute__((always_inline)) void
pk_tiles(int pt, int nt, int mt, const uint8_t *const tp[NT], int nsb, const struct pk_act *a,
         int t0, float *y, size_t ldy, const int rb[NT], const __mmask16 sm[NT], int pf) {
    /* pf: software prefetch of the weights into L1 (avx512.h) */
    /* ju: sub-blocks unrolled, so that the decode's shifts are constants */
    const int ns = nsub(pt), kc = sub32(pt) ? 8 : 4, ju = pt == T_Q5_K ? 8 : sub32(pt) ? 2 : 8, np = npairs(pt), nc = nscr(pt);
    const size_t bs = body_size(pt);
    /* the float sums stay in memory (touched once per super-block), which
     * leaves the registers to the integer ones: is and s1, 2 x GM */
    float acc[NT][MT][16] __attribute__((aligned(64)));
    /* the d array at the tile's front (types without mins), copied once:
     * then the tile is only ever read forward, which the hardware
     * prefetchers need (AMD's stop at a backward step) */
    uint16_t dloc[NT][DLOC][16] __attribute__((aligned(64)));
    const uint16_t *darr[NT];
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) _mm512_store_ps(acc[i][t], _mm512_setzero_ps());
    if (!has_min(pt))
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            darr[i] = nsb <= DLOC ? dloc[i][0] : (const uint16_t *)tp[i];
            if (nsb <= DLOC) memcpy(dloc[i], tp[i], (size_t)nsb * 32);
        }
    for (int b = 0; b < nsb; b++) {
        struct pk_scales sc[NT];
        const uint8_t *body[NT];
        __m512 dw[NT], dm[NT];
        __m512i s1[NT][MT], s2[NT][MT];
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            body[i] = tp[i] + body0(pt, nsb) + (size_t)b * bs;
            decode_scales(pt, body[i], &sc[i]);
            if (has_min(pt)) {
                dw[i] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(body[i] + d_off(pt))));
                dm[i] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(body[i] + dmin_off(pt))));
            } else {
                dw[i] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(darr[i] + (size_t)b * 16)));
                dm[i] = _mm512_setzero_ps();
            }
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                s1[i][t] = _mm512_setzero_si512();
                /* S2 first: its vpdpwssd chain overlaps the integer dots */
                s2[i][t] = _mm512_setzero_si512();
                if (has_min(pt)) {
                    const int32_t *pp = a->p[t0 + t] + (size_t)b * nc;
#pragma GCC unroll 8
                    for (int p = 0; p < np; p++)
                        s2[i][t] = _mm512_dpwssd_epi32(s2[i][t], sc[i].pr[p], _mm512_set1_epi32(pp[p]));
                }
            }
        }
        __asm__ volatile("" ::: "memory"); /* keeps acc out of the registers */
        for (int j0 = 0; j0 < ns; j0 += ju) {
#pragma GCC unroll 8
            for (int jj = 0; jj < ju; jj++) {
                const int j = j0 + jj;
                __m512i is[NT][MT];
#pragma GCC unroll 4
                for (int i = 0; i < nt; i++) {
#pragma GCC unroll 8
                    for (int t = 0; t < mt; t++)
                        /* without mins, the sub-block's correction is
                         * where its dot starts (a broadcast load) */
                        is[i][t] = has_min(pt) ? _mm512_setzero_si512()
                                               : _mm512_set1_epi32(a->p[t0 + t][(size_t)b * nc + j]);
                }
#pragma GCC unroll 8
                for (int k = 0; k < kc; k++) {
                    __m512i w[NT];
                    /* one line of the body PF_DIST ahead per chunk step
                     * (Q4_K: 64 steps, 36 lines; Q6_K: 64 steps, 52) */
                    if (pf && j * kc + k < (int)(bs / 64))
#pragma GCC unroll 4
                        for (int i = 0; i < nt; i++)
                            kn_pf(body[i] + PF_DIST + 64 * (j * kc + k));
#pragma GCC unroll 4
                    for (int i = 0; i < nt; i++) w[i] = wchunk(pt, body[i], j0, jj, k);
#pragma GCC unroll 8
                    for (int t = 0; t < mt; t++) {
                        __m512i x = bcast32(a->q[t0 + t] + (size_t)b * QK_K + act_off(pt, j, k));
#pragma GCC unroll 4
                        for (int i = 0; i < nt; i++) is[i][t] = _mm512_dpbusd_epi32(is[i][t], w[i], x);
                    }
                }
#pragma GCC unroll 4
                for (int i = 0; i < nt; i++)
#pragma GCC unroll 8
                    for (int t = 0; t < mt; t++)
                        s1[i][t] = _mm512_add_epi32(s1[i][t], _mm512_mullo_epi32(is[i][t], sc[i].sc[j]));
                /* s1 taken here: GCC would otherwise run every dot of
                 * the unrolled sub-blocks first and their products after,
                 * spilling is[] (a zmm store costs Zen 4 a vpdpbusd slot:
                 * Q6_K +15%, Q3_K +16%, Q5_K +6%) */
#pragma GCC unroll 4
                for (int i = 0; i < nt; i++)
#pragma GCC unroll 8
                    for (int t = 0; t < mt; t++) __asm__("" : "+v"(s1[i][t]));
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++) {
                __m512 da = _mm512_set1_ps(a->d[t0 + t][b]), v;
                if (has_min(pt))
                    v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dw[i], da),
                                                    _mm512_cvtepi32_ps(pt == T_Q2_K ? _mm512_srai_epi32(s1[i][t], 6)
                                                                                    : s1[i][t])),
                                      _mm512_mul_ps(_mm512_mul_ps(dm[i], da), _mm512_cvtepi32_ps(s2[i][t])));
                else /* S1' = f S: Q3_K 32, Q6_K 4, IQ4_XS 1 */
                    v = _mm512_mul_ps(_mm512_mul_ps(dw[i], da),
                                      _mm512_cvtepi32_ps(pt == T_Q3_K   ? _mm512_srai_epi32(s1[i][t], 5)
                                                         : pt == T_Q6_K ? _mm512_srai_epi32(s1[i][t], 2)
                                                                        : s1[i][t]));
                _mm512_store_ps(acc[i][t], _mm512_add_ps(_mm512_load_ps(acc[i][t]), v));
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nt; i++)
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++)
            _mm512_mask_storeu_ps(y + (size_t)(t0 + t) * ldy + rb[i], sm[i], _mm512_load_ps(acc[i][t]));
}

#define PK_CASE(N, M) \
    case (N) * 16 + (M): pk_tiles(pt, N, M, tp, nsb, a, t0, y, ldy, rb, sm, pf); break;

static inline __attribute__((always_inline)) void
pk_tile_tokens(int pt, int nt, int mt, const uint8_t *const tp[NT], int nsb, const struct pk_act *a,
               int t0, float *y, size_t ldy, const int rb[NT], const __mmask16 sm[NT], int pf) {
    switch (nt * 16 + mt) {
        PK_CASE(1, 6) PK_CASE(1, 5) PK_CASE(1, 4) PK_CASE(1, 3) PK_CASE(1, 2)
        PK_CASE(1, 1)
    default: break;
    }
}

/* ---------------------------------------------------------------------- */
/* Q2_K and Q3_K, many tokens: the tile decoded once, scales folded in */

/* With 16-element sub-blocks, the tile kernel above pays one vpmulld per
 * 4 vpdpbusd for the sub-block scales (a vpdpbusd slot each on Zen 4),
 * and Q3_K's 3-bit decode, done again for every register tile of
 * tokens, keeps the other vector pipes busier than the dots: 55-69% of
 * the int8 peak. Both scales fit in a weight byte next to their quant:
 *   Q2_K: w = q * sc (q 0..3, sc 0..15: <= 45), so the dot over the
 *     super-block is S1 itself;
 *   Q3_K: with qw = q + 4 (0..7) and u the signed 6-bit scale, w = qw * u
 *     + 224 [u < 0] (0..224), so that u * dot(qw, x) = dot(w, x) - 224
 *     [u < 0] bsum, and S = sum_j u_j dot(qw - 4, x)_j = dot(w, x) +
 *     sum_j c_j bsum16_j, c_j = -224 [u_j < 0] - 4 u_j (-220..0, int16),
 *     the sum by vpdpwssd of (c_2p, c_2p+1) against the token's
 *     (bsum16_2p, bsum16_2p+1).
 * So a window of a tile's super-blocks is decoded once per call chunk
 * (up to TOK_CHUNK tokens) into bytes laid out as a Q8_0 tile's, 64-byte
 * chunk c holding elements 4c..4c+3 of each of the 16 rows, and the
 * tokens run over it with nothing but vpdpbusd, plus 8 vpdpwssd per
 * super-block (S2, or the correction). The integers are the reference's
 * S1, S2 and S exactly (|dot| <= 256 * 224 * 128), then the same float
 * step, so the bits are those of the tile kernel. */

/* Tokens [t0, t0 + mt) over the decoded window: acc[t] (the tile's 16
 * rows of token t0 + t) += each super-block's float step. */
static inline __attribute__((always_inline)) void dec_tokens(int pt, int mt, const struct pk_dec *dec, int b0,
                                                             int nw, const struct pk_act *a, int t0, __m512 *acc) {
    for (int bi = 0; bi < nw; bi++) {
        const int b = b0 + bi;
        __m512i is[MT], s2[MT];
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) is[t] = s2[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int c = 0; c < 64; c++) {
            const __m512i w = _mm512_load_si512(dec->q[bi][c]);
#pragma GCC unroll 8
            for (int t = 0; t < mt; t++)
                is[t] = _mm512_dpbusd_epi32(is[t], w, bcast32(a->q[t0 + t] + (size_t)b * QK_K + 4 * c));
        }
#pragma GCC unroll 8
        for (int t = 0; t < mt; t++) {
            const int32_t *pp = a->p[t0 + t] + (size_t)b * 8;
#pragma GCC unroll 8
            for (int p = 0; p < 8; p++) {
                if (pt == T_Q2_K) s2[t] = _mm512_dpwssd_epi32(s2[t], dec->cp[bi][p], _mm512_set1_epi32(pp[p]));
                else is[t] = _mm512_dpwssd_epi32(is[t], dec->cp[bi][p], _mm512_set1_epi32(pp[p]));
            }
            const __m512 da = _mm512_set1_ps(a->d[t0 + t][b]);
            __m512 v;
            if (pt == T_Q2_K)
                v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dec->dw[bi], da), _mm512_cvtepi32_ps(is[t])),
                                  _mm512_mul_ps(_mm512_mul_ps(dec->dm[bi], da), _mm512_cvtepi32_ps(s2[t])));
            else
                v = _mm512_mul_ps(_mm512_mul_ps(dec->dw[bi], da), _mm512_cvtepi32_ps(is[t]));
            acc[t] = _mm512_add_ps(acc[t], v);
        }
    }
}

#define DEC_CASE(M) \
    case M: dec_tokens(pt, M, dec, b0, nw, a, t, acc + t); break;

/* Tiles [k0, k1) times the nt tokens of a call chunk, decoded tiles. */
static inline __attribute__((always_inline)) void
dec_tiles(int pt, const uint8_t *wb, size_t ts, int nsb, int k0, int k1, int r0, int r1, const struct pk_act *a,
          int nt, float *y, size_t ldy) {
    struct pk_dec dec_s, *dec = &dec_s;
    __m512 acc[TOK_CHUNK];
    for (int k = k0; k < k1; k++) {
        const uint8_t *tp = wb + (size_t)k * ts;
        for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
        for (int b0 = 0; b0 < nsb; b0 += DWIN) {
            const int nw = nsb - b0 < DWIN ? nsb - b0 : DWIN;
            dec_window(pt, tp, nsb, b0, nw, dec);
            for (int t = 0; t < nt; t += GM) {
                switch (nt - t < GM ? nt - t : GM) { DEC_CASE(6) DEC_CASE(5) DEC_CASE(4) DEC_CASE(3) DEC_CASE(2) DEC_CASE(1) default: break; }
            }
        }
        const __mmask16 sm = lanes(k, r0, r1);
        for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy + k * R, sm, acc[t]);
    }
}
#undef DEC_CASE

static inline __attribute__((always_inline)) void
matmul_pk(int pt, float *restrict y, size_t ldy, const void *restrict w, const void *restrict x,
          size_t x_stride, int n, int n_tokens, int r0, int r1) {
    const int nsb = n / QK_K, np = nscr(pt);
    const size_t ts = tile_size(pt, nsb);
    const uint8_t *wb = w, *xb = x;
    const int k0 = r0 / R, k1 = (r1 + R - 1) / R, one = kn_one_stream();
    int32_t scr[SCR_MAX];
    struct pk_act a;
    if (r0 >= r1 || n_tokens <= 0) return;
    if (n_tokens >= AMX_MIN && kn_amx_active()) {
        /* whole 16-token tiles on AMX where the type has a kernel there,
         * same bits (cpu/amx/matmul_pk_amx.c) */
        int done = kn_matmul_pk_amx(pt, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
        y += (size_t)done * ldy;
        xb += (size_t)done * x_stride;
        n_tokens -= done;
        if (n_tokens == 0) return;
    }
    int tc = SCR_MAX / (nsb * np) < TOK_CHUNK ? SCR_MAX / (nsb * np) : TOK_CHUNK;
    for (int c0 = 0; c0 < n_tokens; c0 += tc) {
        int nt = n_tokens - c0 < tc ? n_tokens - c0 : tc;
        /* Q2_K, Q3_K: decoded tiles (np = 8 pairs per super-block either way) */
        const int dec = (pt == T_Q2_K || pt == T_Q3_K) && nt >= DEC_MIN;
        const int npt = dec ? 8 : np;
        for (int t = 0; t < nt; t++) {
            const uint8_t *row = xb + (size_t)(c0 + t) * x_stride;
            a.q[t] = (const int8_t *)row;
            a.d[t] = (const float *)(row + n);
            a.p[t] = scr + (size_t)t * nsb * npt;
            if (dec && pt == T_Q3_K)
                dec_scratch_q3(scr + (size_t)t * nsb * npt, (const int16_t *)(a.d[t] + nsb), nsb);
            else
                pk_scratch(pt, scr + (size_t)t * nsb * npt, (const int16_t *)(a.d[t] + nsb), nsb);
        }
        float *yc = y + (size_t)c0 * ldy;
        if (dec) {
            dec_tiles(pt, wb, ts, nsb, k0, k1, r0, r1, &a, nt, yc, ldy);
            continue;
        }
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
                pk_tiles(pt, NT, 1, tp, nsb, &a, 0, yc, ldy, rb, sm, 1);
            }
            for (int k = k0 + NT * q; k < k1; k++) {
                const uint8_t *tp[NT] = {wb + (size_t)k * ts};
                int rb[NT] = {k * R};
                __mmask16 sm[NT] = {lanes(k, r0, r1)};
                pk_tiles(pt, 1, 1, tp, nsb, &a, 0, yc, ldy, rb, sm, !one || kn_one_pf());
            }
            continue;
        }
        /* GT tiles x GM tokens at a time (the leftover tiles alone) */
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
                pk_tile_tokens(pt, ntl, mt, tp, nsb, &a, t, yc, ldy, rb, sm, t == 0);
            }
        }
    }
}

#define DEFINE_MATMUL_PK(NAME, PT) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        (void)w_stride; \
        matmul_pk(PT, y, ldy, w, x, x_stride, n, n_tokens, r0, r1); \
    }

DEFINE_MATMUL_PK(kn_matmul_p_q4_k_avx512, T_Q4_K)
DEFINE_MATMUL_PK(kn_matmul_p_q5_k_avx512, T_Q5_K)
DEFINE_MATMUL_PK(kn_matmul_p_q6_k_avx512, T_Q6_K)
DEFINE_MATMUL_PK(kn_matmul_p_iq4_xs_avx512, T_IQ4_XS)
DEFINE_MATMUL_PK(kn_matmul_p_q2_k_avx512, T_Q2_K)
DEFINE_MATMUL_PK(kn_matmul_p_q3_k_avx512, T_Q3_K)
