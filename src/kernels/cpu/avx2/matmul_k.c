/*
 * matmul_k.c (avx2) - matmuls of every quantized weight type with AVX2
 * (vpmaddubsw + vpmaddwd): Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, MXFP4
 * against Q8A activations, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8K. The specification is
 * cpu/ref/matmul.c; the kernels are bit-exact with it.
 *
 * Units. A weight row is a sequence of units: the 32-element block of the
 * Q8A types, the 256-element super-block of the Q8K types. Every shape
 * below computes, per (row, token) and unit, the reference's exact integer
 * sums (for the K types S1 = sum_j sc_j * isum_j and S2 = sum_j c_j * bsum_j:
 * mins, or the -32 / -4 offsets times the scale; for the Q8A types the
 * block's plain sum), by whatever route is cheapest, then the reference's
 * float step, operation for operation (fstep below):
 *   Q4_K, Q5_K, Q2_K: acc + ((d * da) * S1 - (dmin * da) * S2)
 *   Q6_K, Q3_K, IQ4_XS: acc + (d * da) * (S1 - S2)
 *   Q4_0: acc + d * (da * S1 - 8 * sa)     Q5_0: acc + d * (da * S1 - 16 * sa)
 *   Q4_1, Q5_1: acc + ((d * da) * S1 + m * sa)
 *   Q8_0, IQ4_NL: acc + (d * da) * S1     MXFP4: acc + (h * da) * S1,
 *   h the E8M0 byte's half scale (kn_e8m0_half; gathered for 8 rows by
 *   building the same bits in vector lanes)
 * Integer sums are exact in any order (bounds in cpu/ref/matmul.c), and
 * the float step of each (row, token) runs unit by unit in row order with
 * separate mul/add intrinsics (no FMA: these files are built with -std=c11,
 * so GCC does not contract). Hence y(t, r) equals the reference bit for
 * bit in every shape, whatever n_tokens, r0 and r1 are (batch invariance,
 * kernels/ops.h).
 *
 * Shapes:
 *   - matvec (few tokens: fewer than tiled_min(), up to MV_TOKENS = 4 per
 *     pass over the weights): 8 rows in lockstep, each its own
 *     memory stream with a software prefetch (lane s walks the s-th eighth
 *     of the row range, see matvec()). A row's unit is decoded 32
 *     elements at a time straight into a register (mv_w32), once for all
 *     the pass's tokens, and dotted with each token's activations
 *     horizontally: one vpmaddubsw per 32 elements, the sub-block scales per
 *     int16 lane through vpmaddwd, S2 as one vpmaddwd of the 16 coefficients
 *     with the activation's 16 bsums. Each row's sums are reduced to
 *     scalars (K types, one token per pass: cheaper than a tree of 16
 *     partial vectors) or the 8 rows' partial vectors by an unpack tree
 *     (Q8A types; K types with several tokens, whose per-row horizontal
 *     reductions would cost more than the trees' spills), and the float step runs on the 8 rows at once, lane =
 *     row (the Q8A types' scales gathered for the 8 rows in one go), for
 *     each token in turn.
 *   - tiled (more tokens): the token rows are transposed into tiles of 8
 *     tokens (dword lane t = 4 consecutive activations of token t), a group
 *     of GR rows is decoded one unit at a time into bytes (tl_decode), and
 *     each 4-byte group of a decoded row is broadcast against GT tiles: one
 *     vpmaddubsw = 8 tokens x 4 elements, every decoded weight serves all
 *     the tokens of the chunk, no horizontal sums. int16 partial sums are
 *     accumulated over KF groups (KF = the most that cannot overflow) before
 *     one vpmaddwd applies the sub-block scale. The float step runs with
 *     lane = token; the Q8A types decode 8 blocks per row at a time and
 *     run their per-block float steps with the sums in registers. Three
 *     operand forms, by type:
 *       unsigned weights x signed activations (Q4_K, Q5_K, Q2_K, Q4_0,
 *         Q4_1, Q5_0, Q5_1): 2 * KF * 127 * max w <= 32767; S2 from the
 *         activation sums (4 or 8 vpmaddwd per unit; none for the Q8A
 *         types, whose sa terms are in the float step);
 *       signed weights, the sign trick |w| * sign(a, w) (Q8_0, IQ4_NL,
 *         IQ4_XS: KF = 1; MXFP4, |w| <= 12: KF = 8); no S2. (Q8_0 cannot take the biased form: a
 *         pair of 255 * |-128| products overflows int16 even at KF = 1);
 *       biased activations a + 128 (unsigned) x signed weights q - 32
 *         (Q6_K) or q - 4 * !h (Q3_K): 2 * KF * 255 * max|w| <= 32767,
 *         and the bias is removed with a weight-only term, 128 * sum_j sc_j
 *         * sum(w over j), once per row and unit: S2 needs no activation
 *         sums at all.
 *
 * Tiles hold 32 tokens at most; a long row is done in passes over kc
 * elements (the float sums continue from y between passes: the same
 * values, so the same result), so the scratch is bounded whatever n is:
 * about 90 KB of stack (XQ_BYTES of transposed activations plus their
 * scales and sums).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/avx2/avx2.h"

enum { T_Q4_0, T_Q4_1, T_Q8_0, T_Q5_0, T_Q5_1, T_IQ4_NL, T_MXFP4, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K, T_IQ4_XS };

enum {
    GR = 3,              /* rows per register tile (tiled) */
    GT = 2,              /* token tiles of 8 per register tile (tiled) */
    MV_ROWS = 8,         /* rows in lockstep (matvec) */
    MV_TOKENS = 4,       /* tokens per weight pass (matvec) */
    MAX_TILES = 4,       /* token tiles per chunk */
    XQ_BYTES = 64 << 10, /* transposed activation bytes per pass */
    PF_DIST = 4096,      /* software prefetch distance of the weight streams */
};

static inline int is_k(int t) { return t >= T_Q2_K; }
static inline int unit_len(int t) { return is_k(t) ? QK_K : QK; }
static inline int unit_bytes(int t) {
    static const int b[] = {18, 20, 34, 22, 24, 18, 17, 84, 110, 144, 176, 210, 136};
    return b[t];
}
/* operand forms of the tiled shape (see the header) */
static inline int sign_trick(int t) {
    return t == T_Q8_0 || t == T_IQ4_NL || t == T_IQ4_XS || t == T_MXFP4;
}
/* Q8A types with a min term m * sa (Q4_1, Q5_1) */
static inline int has_m(int t) { return t == T_Q4_1 || t == T_Q5_1; }
static inline int biased(int t) { return t == T_Q6_K || t == T_Q3_K; }
/* S2 of the tiled shape from activation sums: over 32 (Q4_K, Q5_K) or 16
 * (Q2_K) elements */
static inline int mins32(int t) { return t == T_Q4_K || t == T_Q5_K; }
static inline int mins16(int t) { return t == T_Q2_K; }
/* Fewest tokens for the tiled shape, by operand form: below, the matvec
 * (MV_TOKENS tokens per pass) is faster. The tiled shape pays for a whole
 * 8-token tile and a decode through memory whatever the token count, the
 * sign trick (KF = 1) most. The crossovers (single-threaded on Zen 3,
 * SmolLM2 gate_up / down shapes, hot weights; commit 5db2d78): Q4_K,
 * Q4_1, Q4_0 between 4 and 5 tokens; Q6_K 5 and 6; Q8_0 8 and 9. */
static inline int tiled_min(int t) {
    if (sign_trick(t)) return 9;
    if (biased(t)) return 6;
    return 5;
}
/* 4-element groups per int16 flush */
static inline int kflush(int t) {
    switch (t) {
    case T_Q4_0:
    case T_Q4_1:
    case T_Q4_K: return 8;  /* 2 * 8 * 127 * 15 = 30480 */
    case T_MXFP4: return 8; /* 2 * 8 * 12 * 127 = 24384 */
    case T_Q6_K: return 2;  /* 2 * 2 * 255 * 32 = 32640 */
    case T_Q8_0:             /* 2 * 128 * 127 = 32512 (|-128| = 128) */
    case T_IQ4_NL:
    case T_IQ4_XS: return 1; /* 2 * 127 * 127 = 32258 */
    default: return 4;      /* Q5: 2 * 4 * 127 * 31 = 31496; Q3_K, Q2_K: their 16-element sub-blocks */
    }
}

/* The activation-sum operand of the float step: the reference's 8 * sa
 * (Q4_0) or 16 * sa (Q5_0), computed once per token and block; sa itself
 * for the types that use it bare. */
static inline float sa_scaled(int t, float sa) {
    return t == T_Q4_0 ? 8.0f * sa : t == T_Q5_0 ? 16.0f * sa : sa;
}

/* ---------------------------------------------------------------------- */
/* decoding */

static inline __m256i nib_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
static inline __m256i nib_hi(__m256i v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}
/* 16 bytes of nibbles -> 32 bytes: the 16 low nibbles, then the 16 high */
static inline __m256i nib_split(const uint8_t *p) {
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}
/* byte k = 0x10 where bit k of the 32 bits at p is set, else 0 */
static inline __m256i bits_to_16(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u),
                                    _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                                       0x0303030303030303ll));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}
/* v >> 2s per 16-bit lane, s < 4: a switch, so that the shift count is an
 * immediate whether or not the caller's s folds to a constant (-O1) */
static inline __m256i srl2s(__m256i v, int s) {
    switch (s) {
    case 0: return v;
    case 1: return _mm256_srli_epi16(v, 2);
    case 2: return _mm256_srli_epi16(v, 4);
    default: return _mm256_srli_epi16(v, 6);
    }
}
/* sc's 128-bit half h (0, 1) in both halves */
static inline __m256i half2(__m256i sc, int h) {
    return h ? _mm256_permute2x128_si256(sc, sc, 0x11) : _mm256_permute2x128_si256(sc, sc, 0x00);
}

/* byte l = val where bit b of byte l of v is set, else 0 */
static inline __m256i bit_of(__m256i v, int b, int val) {
    const __m256i m = _mm256_set1_epi8((char)(1 << b));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m), m), _mm256_set1_epi8((char)val));
}
static inline __m256i kv_lookup(__m256i idx) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kn_iq4nl_values));
    return _mm256_shuffle_epi8(tab, idx);
}
static inline __m256i mx_lookup(__m256i idx) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kn_mxfp4_values));
    return _mm256_shuffle_epi8(tab, idx);
}
/* f16 -> f32 with F16C: exact, as kn_f16_to_f32 is */
static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
/* a Q8A type's block scale d from the block's first bytes */
static inline float q8a_d(int t, const uint8_t *b) { return t == T_MXFP4 ? kn_e8m0_half(b[0]) : h2f(b); }
/* kn_e8m0_half of the low byte of each dword lane */
static inline __m256 e8m0_half8(__m256i v) {
    __m256i e = _mm256_and_si256(v, _mm256_set1_epi32(0xff));
    __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e); /* e < 2 */
    __m256i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(nrm, sub, small));
}
static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
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

static inline int32_t hsum8i(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
    return _mm_cvtsi128_si32(h);
}

/* 8 bytes -> 16 int16, each twice: lanes 2i, 2i+1 = b[i] */
static inline __m256i dup8_epi16(__m128i b8, int sign) {
    __m128i v = sign ? _mm_cvtepi8_epi16(b8) : _mm_cvtepu8_epi16(b8);
    return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}

/* Scales (sc, as a vector of 16 int16, one per 16 elements) and S2
 * coefficients (c, likewise) of a K-type super-block, and its float scales,
 * in the reference's form (blocks.h, cpu/ref/matmul.c). */
static inline __attribute__((always_inline)) void k_scales(int t, const uint8_t *b, __m256i *sc,
                                                           __m256i *c, float *d1, float *d2) {
    switch (t) {
    case T_Q4_K:
    case T_Q5_K: {
        /* 8 6-bit scales and mins from 12 bytes, four at a time */
        uint32_t u0 = rd32(b + 4), u1 = rd32(b + 8), u2 = rd32(b + 12);
        uint32_t sl = u0 & 0x3f3f3f3fu, ml = u1 & 0x3f3f3f3fu;
        uint32_t sh = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
        uint32_t mh = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
        *sc = dup8_epi16(_mm_cvtsi64_si128((long long)((uint64_t)sh << 32 | sl)), 0);
        *c = dup8_epi16(_mm_cvtsi64_si128((long long)((uint64_t)mh << 32 | ml)), 0);
        *d1 = h2f(b);
        *d2 = h2f(b + 2);
        break;
    }
    case T_Q6_K: {
        const struct blk_q6_k *x = (const struct blk_q6_k *)b;
        *sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
        *c = _mm256_slli_epi16(*sc, 5);
        *d1 = h2f((const uint8_t *)&x->d);
        *d2 = 0.0f;
        break;
    }
    case T_Q3_K: {
        const struct blk_q3_k *x = (const struct blk_q3_k *)b;
        uint64_t l8;
        memcpy(&l8, x->scales, 8);
        uint32_t h = rd32(x->scales + 8);
        const uint32_t m3 = 0x03030303u;
        __m128i lo = _mm_set_epi64x((long long)((l8 >> 4) & 0x0f0f0f0f0f0f0f0full),
                                    (long long)(l8 & 0x0f0f0f0f0f0f0f0full));
        __m128i hi = _mm_set_epi32((int)((h >> 6) & m3), (int)((h >> 4) & m3), (int)((h >> 2) & m3), (int)(h & m3));
        __m128i v = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
        *sc = _mm256_cvtepi8_epi16(v);
        *c = _mm256_slli_epi16(*sc, 2);
        *d1 = h2f((const uint8_t *)&x->d);
        *d2 = 0.0f;
        break;
    }
    case T_Q2_K: {
        const struct blk_q2_k *x = (const struct blk_q2_k *)b;
        __m128i v = _mm_loadu_si128((const __m128i *)x->scales);
        *sc = _mm256_cvtepu8_epi16(_mm_and_si128(v, _mm_set1_epi8(0x0f)));
        *c = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f)));
        *d1 = h2f((const uint8_t *)&x->d);
        *d2 = h2f((const uint8_t *)&x->dmin);
        break;
    }
    default: { /* T_IQ4_XS */
        const struct blk_iq4_xs *x = (const struct blk_iq4_xs *)b;
        uint32_t l = rd32(x->scales_l), hbits = x->scales_h;
        uint64_t ls = 0;
        for (int j = 0; j < 8; j++) {
            uint64_t v = ((l >> (4 * j)) & 0x0f) | ((hbits >> (2 * j)) & 3) << 4;
            ls |= v << (8 * j);
        }
        *sc = _mm256_sub_epi16(dup8_epi16(_mm_cvtsi64_si128((long long)ls), 0), _mm256_set1_epi16(32));
        *c = _mm256_setzero_si256();
        *d1 = h2f((const uint8_t *)&x->d);
        *d2 = 0.0f;
        break;
    }
    }
}

/* int16 lanes 0..7 = lane 2k of sc, lanes 8..15 = lane 2k + 1, from
 * sch = sc's 128-bit half that holds them, in both halves */
static inline __m256i scale_pair(__m256i sch, int k) {
    const char a = (char)(4 * (k % 4)), b = (char)(4 * (k % 4) + 2);
    return _mm256_shuffle_epi8(sch, _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a,
                                                     a + 1, a, a + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b,
                                                     b + 1, b, b + 1, b, b + 1, b, b + 1));
}

/* Elements 32k..32k+31 of a unit, in the reference's form: the unsigned
 * quant (Q6_K 0..63, Q3_K q + 4h, ...) or, for IQ4, the signed kv. */
static inline __attribute__((always_inline)) __m256i mv_w32(int t, const uint8_t *b, int k) {
    switch (t) {
    case T_Q4_0: return nib_split(b + 2);
    case T_Q4_1: return nib_split(b + 4);
    case T_Q8_0: return _mm256_loadu_si256((const __m256i *)(b + 2));
    case T_Q5_0: return _mm256_or_si256(nib_split(b + 6), bits_to_16(b + 2));
    case T_Q5_1: return _mm256_or_si256(nib_split(b + 8), bits_to_16(b + 4));
    case T_IQ4_NL: return kv_lookup(nib_split(b + 2));
    case T_MXFP4: return mx_lookup(nib_split(b + 1));
    case T_Q2_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * (k / 4)));
        return _mm256_and_si256(srl2s(q, k % 4), _mm256_set1_epi8(3));
    }
    case T_Q3_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * (k / 4)));
        __m256i lo = _mm256_and_si256(srl2s(q, k % 4), _mm256_set1_epi8(3));
        return _mm256_or_si256(lo, bit_of(_mm256_loadu_si256((const __m256i *)b), k, 4));
    }
    case T_Q4_K:
    case T_Q5_K: {
        const uint8_t *qs = b + (t == T_Q4_K ? 16 : 48);
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * (k / 2)));
        __m256i v = k % 2 ? nib_hi(q) : nib_lo(q);
        if (t == T_Q5_K) v = _mm256_or_si256(v, bit_of(_mm256_loadu_si256((const __m256i *)(b + 16)), k, 16));
        return v;
    }
    case T_Q6_K: {
        const int h = k / 4, sq = k % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (sq % 2)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        __m256i hb = sq == 0   ? _mm256_slli_epi16(qh, 4)
                     : sq == 1 ? _mm256_slli_epi16(qh, 2)
                     : sq == 2 ? qh
                               : _mm256_srli_epi16(qh, 2);
        return _mm256_or_si256(sq < 2 ? nib_lo(l) : nib_hi(l), _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
    }
    default: /* T_IQ4_XS */
        return kv_lookup(nib_split(b + 8 + 16 * k));
    }
}

/* A unit decoded for the tiled shape: one byte per element in the type's
 * operand form, the scale of each 16 elements, the S2 coefficient pairs
 * (int16 c_2i | c_2i+1 << 16, against the tiles' bsum pairs), the
 * weight-only term of the biased form, the float scales. The Q8A types
 * decode QB blocks at a time into one dunit (a 32-element unit alone would
 * leave the register tile too little work per decode and per load and
 * store of its float sums); d1[j], d2[j] are block j's scales. */
enum { QB = QK_K / QK };
struct dunit {
    _Alignas(32) uint8_t w[QK_K];
    _Alignas(32) int16_t sc[16];
    int32_t cp[8];
    int32_t corr;
    float d1[QB], d2[QB];
};

/* Q8A types: nb <= QB consecutive blocks from b */
static inline __attribute__((always_inline)) void tl_decode_q8a(int t, const uint8_t *b, int nb,
                                                                struct dunit *u) {
    const int ub = unit_bytes(t);
    for (int j = 0; j < nb; j++) {
        const uint8_t *bj = b + (size_t)j * ub;
        _mm256_store_si256((__m256i *)(u->w + 32 * j), mv_w32(t, bj, 0));
        u->d1[j] = q8a_d(t, bj);
        u->d2[j] = has_m(t) ? h2f(bj + 2) : 0.0f;
    }
}

/* K types: one super-block */
static inline __attribute__((always_inline)) void tl_decode(int t, const uint8_t *b, struct dunit *u) {
    const int nk = unit_len(t) / 32;
    __m256i sc = _mm256_set1_epi16(1), c = _mm256_setzero_si256();
    k_scales(t, b, &sc, &c, &u->d1[0], &u->d2[0]);
    _mm256_store_si256((__m256i *)u->sc, sc);
    __m256i wsum = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < nk; k++) {
        __m256i w = mv_w32(t, b, k);
        if (biased(t)) {
            /* the signed form: Q6_K q - 32, Q3_K (q + 4h) - 4 */
            w = _mm256_sub_epi8(w, _mm256_set1_epi8(t == T_Q6_K ? 32 : 4));
            __m256i sp = scale_pair(half2(sc, k >= 4), k);
            wsum = _mm256_add_epi32(wsum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), w), sp));
        }
        _mm256_store_si256((__m256i *)(u->w + 32 * k), w);
    }
    if (biased(t)) {
        u->corr = 128 * hsum8i(wsum);
    } else if (mins32(t)) {
        /* (m_2i, m_2i+1): the even int16 lanes of c, packed */
        __m256i p = _mm256_shuffle_epi8(c, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                                            0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
        p = _mm256_permute4x64_epi64(p, 0x08);
        _mm_storeu_si128((__m128i *)u->cp, _mm256_castsi256_si128(p));
    } else if (mins16(t)) {
        _mm256_storeu_si256((__m256i *)u->cp, c);
    }
}

/* ---------------------------------------------------------------------- */
/* the float step (vectors: lanes are rows in matvec, tokens when tiled) */

static inline __attribute__((always_inline)) __m256 fstep(int t, __m256 acc, __m256i s1, __m256i s2,
                                                          __m256 d1, __m256 d2, __m256 da,
                                                          __m256 sa) {
    switch (t) {
    case T_Q4_K:
    case T_Q5_K:
    case T_Q2_K: {
        __m256 a = _mm256_mul_ps(_mm256_mul_ps(d1, da), _mm256_cvtepi32_ps(s1));
        __m256 b = _mm256_mul_ps(_mm256_mul_ps(d2, da), _mm256_cvtepi32_ps(s2));
        return _mm256_add_ps(acc, _mm256_sub_ps(a, b));
    }
    case T_Q6_K:
    case T_Q3_K:
    case T_IQ4_XS:
        return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d1, da),
                                                _mm256_cvtepi32_ps(_mm256_sub_epi32(s1, s2))));
    case T_Q4_0: /* sa holds 8 * sa here, Q5_0 16 * sa: the reference's product */
    case T_Q5_0:
        return _mm256_add_ps(acc, _mm256_mul_ps(d1, _mm256_sub_ps(_mm256_mul_ps(da, _mm256_cvtepi32_ps(s1)), sa)));
    case T_Q4_1:
    case T_Q5_1:
        return _mm256_add_ps(acc, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(d1, da), _mm256_cvtepi32_ps(s1)),
                                                _mm256_mul_ps(d2, sa)));
    default: /* T_Q8_0, T_IQ4_NL, T_MXFP4 */
        return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d1, da), _mm256_cvtepi32_ps(s1)));
    }
}

/* ---------------------------------------------------------------------- */
/* matvec: 8 rows in lockstep, one token */

/* w (unsigned, or for IQ4 signed by the sign trick) x a: 16 int16 sums of
 * adjacent pairs */
static inline __attribute__((always_inline)) __m256i mul_pairs(int t, __m256i w, __m256i a) {
    if (sign_trick(t)) return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_maddubs_epi16(w, a);
}

/* S1, S2 partial dwords of one weight unit b against the units of NT
 * tokens (qa[j]: token j's int8 values, bs[j]: its 16 bsums for K types);
 * d1, d2 the unit's scales (K types only). The weights are decoded once
 * and serve every token. */
static inline __attribute__((always_inline)) void mv_unit(int t, int nt, const uint8_t *b,
                                                          const int8_t *const qa[MV_TOKENS],
                                                          const int16_t *const bs[MV_TOKENS],
                                                          __m256i s1[MV_TOKENS], __m256i s2[MV_TOKENS],
                                                          float *d1, float *d2) {
    if (!is_k(t)) {
        __m256i w = mv_w32(t, b, 0);
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            __m256i p = mul_pairs(t, w, _mm256_loadu_si256((const __m256i *)qa[j]));
            s1[j] = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
            s2[j] = _mm256_setzero_si256();
        }
        return; /* d1, d2: matvec gathers the 8 rows' at once */
    }
    __m256i sc, c;
    k_scales(t, b, &sc, &c, d1, d2);
    const __m256i lo = _mm256_permute2x128_si256(sc, sc, 0x00), hi = _mm256_permute2x128_si256(sc, sc, 0x11);
    __m256i acc[MV_TOKENS];
    #pragma GCC unroll 4
    for (int j = 0; j < nt; j++) acc[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < QK_K / 32; k++) {
        __m256i w = mv_w32(t, b, k), sp = scale_pair(k < 4 ? lo : hi, k);
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            __m256i p = mul_pairs(t, w, _mm256_loadu_si256((const __m256i *)(qa[j] + 32 * k)));
            acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(p, sp));
        }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        s1[j] = acc[j];
        s2[j] = _mm256_madd_epi16(c, _mm256_loadu_si256((const __m256i *)bs[j]));
    }
}

/* The 8 rows row[0..8) (row[i] - row[0] = offs lane i, in bytes) against
 * nt <= MV_TOKENS activation rows xa + j * xs: out[j][i] = row i's dot
 * with token j, lane = row. Each (row, token) runs the one-token float
 * step, so nt changes nothing in the result. */
static inline __attribute__((always_inline)) void
mv_rows(int t, int nt, const uint8_t *const row[MV_ROWS], __m256i offs, bool gather,
        const uint8_t *restrict xa, size_t xs, int n, float out[MV_TOKENS][MV_ROWS]) {
    const int ul = unit_len(t), ub = unit_bytes(t), nu = n / ul;
    const int8_t *qa[MV_TOKENS];
    /* Q8A: d[n/32] then s[n/32]; Q8K: d[n/256] then bsums[n/16] */
    const float *da[MV_TOKENS], *sa[MV_TOKENS];
    const int16_t *bs[MV_TOKENS];
    __m256 acc[MV_TOKENS];
    #pragma GCC unroll 4
    for (int j = 0; j < nt; j++) {
        qa[j] = (const int8_t *)(xa + (size_t)j * xs);
        da[j] = (const float *)(xa + (size_t)j * xs + n);
        sa[j] = da[j] + nu;
        bs[j] = is_k(t) ? (const int16_t *)(da[j] + nu) : NULL;
        acc[j] = _mm256_setzero_ps();
    }
    for (int k = 0; k < nu; k++) {
        _Alignas(32) int32_t i1[MV_TOKENS][MV_ROWS], i2[MV_TOKENS][MV_ROWS];
        _Alignas(32) float d1[MV_ROWS], d2[MV_ROWS];
        __m256i p1[MV_TOKENS][MV_ROWS], p2[MV_TOKENS][MV_ROWS];
        const int8_t *qk[MV_TOKENS];
        const int16_t *bk[MV_TOKENS];
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            qk[j] = qa[j] + (size_t)k * ul;
            bk[j] = is_k(t) ? bs[j] + (size_t)k * 16 : NULL;
        }
#pragma GCC unroll 8
        for (int i = 0; i < MV_ROWS; i++) {
            const uint8_t *b = row[i] + (size_t)k * ub;
            _mm_prefetch((const char *)b + PF_DIST, _MM_HINT_T0);
            if (ub > 64) _mm_prefetch((const char *)b + PF_DIST + 64, _MM_HINT_T0);
            if (ub > 128) _mm_prefetch((const char *)b + PF_DIST + 128, _MM_HINT_T0);
            __m256i q1[MV_TOKENS], q2[MV_TOKENS];
            mv_unit(t, nt, b, qk, bk, q1, q2, &d1[i], &d2[i]);
            #pragma GCC unroll 4
            for (int j = 0; j < nt; j++) {
                if (is_k(t) && nt > 1) {
                    /* several tokens: the partial vectors summed by trees */
                    p1[j][i] = q1[j];
                    p2[j][i] = q2[j];
                } else if (is_k(t)) {
                    /* each row's two sums reduced at once ([S1, S2, S1, S2]):
                     * 16 partial vectors kept for a tree would spill */
                    __m256i h = _mm256_hadd_epi32(q1[j], q2[j]);
                    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                    q = _mm_hadd_epi32(q, q);
                    i1[j][i] = _mm_cvtsi128_si32(q);
                    i2[j][i] = _mm_extract_epi32(q, 1);
                } else {
                    p1[j][i] = q1[j];
                }
            }
        }
        __m256 vd1, vd2;
        if (is_k(t)) {
            vd1 = _mm256_load_ps(d1);
            vd2 = _mm256_load_ps(d2);
        } else if (!gather) {
            for (int i = 0; i < MV_ROWS; i++) {
                d1[i] = q8a_d(t, row[i] + (size_t)k * ub);
                d2[i] = has_m(t) ? h2f(row[i] + (size_t)k * ub + 2) : 0.0f;
            }
            vd1 = _mm256_load_ps(d1);
            vd2 = _mm256_load_ps(d2);
        } else {
            /* the 8 rows' d (and m) in one gather of the 4 bytes at each
             * block's start (8 scalar conversions stored and reloaded as a
             * vector would stall store forwarding) */
            __m256i dm = _mm256_i32gather_epi32((const int *)(row[0] + (size_t)k * ub), offs, 1);
            __m128i lo = _mm256_castsi256_si128(dm), hi = _mm256_extracti128_si256(dm, 1);
            const __m128i m16 = _mm_set1_epi32(0xffff);
            vd1 = t == T_MXFP4 ? e8m0_half8(dm) : _mm256_cvtph_ps(_mm_packus_epi32(_mm_and_si128(lo, m16), _mm_and_si128(hi, m16)));
            vd2 = has_m(t) ? _mm256_cvtph_ps(_mm_packus_epi32(_mm_srli_epi32(lo, 16), _mm_srli_epi32(hi, 16)))
                           : _mm256_setzero_ps();
        }
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++) {
            /* Q8A types: one partial vector per row, summed by a tree */
            __m256i s1 = is_k(t) && nt == 1 ? _mm256_load_si256((const __m256i *)i1[j]) : tree8(p1[j]);
            __m256i s2 = !is_k(t)  ? _mm256_setzero_si256()
                         : nt == 1 ? _mm256_load_si256((const __m256i *)i2[j])
                                   : tree8(p2[j]);
            __m256 vs = is_k(t) ? _mm256_setzero_ps() : _mm256_set1_ps(sa_scaled(t, sa[j][k]));
            acc[j] = fstep(t, acc[j], s1, s2, vd1, vd2, _mm256_set1_ps(da[j][k]), vs);
        }
    }
    #pragma GCC unroll 4
    for (int j = 0; j < nt; j++) _mm256_store_ps(out[j], acc[j]);
}

/* Rows [r0, r1) against nt <= MV_TOKENS activation rows (xa + j * xs into
 * y + j * ldy). The 8 lanes take 8 contiguous
 * segments of the range, each walked row after row: 8 long sequential
 * streams, so the prefetch PF_DIST ahead lands on rows about to be read
 * whatever the row length (8 adjacent rows at a time would make short rows'
 * prefetches fall on rows of the same group). Lane s starts s rows into its
 * segment (and wraps): segments of a power-of-two row count are often a
 * multiple of 4 KB apart, and 8 streams at the same address mod 4 KB
 * would fight over one L1 set. The last r % 8 rows form one short group. */
static inline __attribute__((always_inline)) void
matvec(int t, int nt, float *restrict y, size_t ldy, const uint8_t *restrict w, size_t ws,
       const uint8_t *restrict xa, size_t xs, int n, int r0, int r1) {
    /* gather offsets (Q8A types) must fit int32: rows of < 2^28 bytes */
    const bool gather = ws <= (size_t)INT32_MAX / (size_t)(r1 - r0);
    const int q = (r1 - r0) / MV_ROWS;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _Alignas(32) float out[MV_TOKENS][MV_ROWS];
    const uint8_t *row[MV_ROWS];
    if (q > 0) {
        for (int i = 0; i < q; i++) {
            int ro[MV_ROWS];
            for (int s = 0; s < MV_ROWS; s++) {
                ro[s] = r0 + s * q + (i + s) % q;
                row[s] = w + (size_t)ro[s] * ws;
            }
            __m256i offs = gather ? _mm256_mullo_epi32(_mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)ro),
                                                                        _mm256_set1_epi32(ro[0])),
                                                       _mm256_set1_epi32((int)ws))
                                  : _mm256_setzero_si256();
            mv_rows(t, nt, row, offs, gather, xa, xs, n, out);
            #pragma GCC unroll 4
            for (int j = 0; j < nt; j++)
                for (int s = 0; s < MV_ROWS; s++) y[(size_t)j * ldy + ro[s]] = out[j][s];
        }
    }
    const int ra = r0 + MV_ROWS * q, nr = r1 - ra;
    if (nr > 0) {
        /* missing rows recompute row ra, never stored */
        for (int i = 0; i < MV_ROWS; i++) row[i] = w + (size_t)(ra + (i < nr ? i : 0)) * ws;
        __m256i offs = gather ? _mm256_mullo_epi32(_mm256_and_si256(lane, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane)),
                                                   _mm256_set1_epi32((int)ws))
                              : _mm256_setzero_si256();
        mv_rows(t, nt, row, offs, gather, xa, xs, n, out);
        #pragma GCC unroll 4
        for (int j = 0; j < nt; j++)
            for (int i = 0; i < nr; i++) y[(size_t)j * ldy + ra + i] = out[j][i];
    }
}

/* matvec with nt a constant in each instance (1..MV_TOKENS) */
static inline __attribute__((always_inline)) void
matvec_n(int t, int nt, float *restrict y, size_t ldy, const uint8_t *restrict w, size_t ws,
         const uint8_t *restrict xa, size_t xs, int n, int r0, int r1) {
    switch (nt) {
    case 1: matvec(t, 1, y, ldy, w, ws, xa, xs, n, r0, r1); break;
    case 2: matvec(t, 2 < MV_TOKENS ? 2 : MV_TOKENS, y, ldy, w, ws, xa, xs, n, r0, r1); break;
    case 3: matvec(t, 3 < MV_TOKENS ? 3 : MV_TOKENS, y, ldy, w, ws, xa, xs, n, r0, r1); break;
    default: matvec(t, 4 < MV_TOKENS ? 4 : MV_TOKENS, y, ldy, w, ws, xa, xs, n, r0, r1); break;
    }
}

/* ---------------------------------------------------------------------- */
/* tiled: tokens transposed into tiles of 8 */

/* One chunk of token rows, elements [k0, k0 + kn) of them, transposed
 * (see the header). Unit indices below are local to the chunk. */
struct tiles {
    int n_tiles, kn;
    int8_t *q;        /* [tile][kn/4][8 tokens][4 bytes]; biased types: a + 128 */
    float *d;         /* [tile][unit][8]: da */
    float *s;         /* Q8A: [tile][block][8]: sa_scaled(sa) */
    int32_t *b;       /* Q2_K: [tile][unit][8 pairs][8 tokens]: bsums 2p, 2p + 1;
                         Q4_K, Q5_K: [tile][unit][4 pairs][8 tokens]: sums of 32 */
};

/* Transpose elements [k0, k0 + tl->kn) of tokens [0, nt) of x into tiles
 * (zeros past nt). */
static inline __attribute__((always_inline)) void tiles_fill(int t, struct tiles *tl, const uint8_t *x,
                                                             size_t xs, int n, int nt, int k0) {
    const int ul = unit_len(t), nu = tl->kn / ul, ng = tl->kn / 4, u0 = k0 / ul, nu_row = n / ul;
    const __m256i bias = biased(t) ? _mm256_set1_epi8((char)0x80) : _mm256_setzero_si256();
    for (int tile = 0; tile < tl->n_tiles; tile++) {
        const uint8_t *rows[8];
        int valid[8];
        for (int i = 0; i < 8; i++) {
            int tok = tile * 8 + i;
            valid[i] = tok < nt;
            rows[i] = x + (size_t)(valid[i] ? tok : 0) * xs;
        }
        int8_t *q = tl->q + (size_t)tile * ng * 32;
        for (int g = 0; g < ng; g += 8) {
            /* 8 tokens x 32 bytes -> 8 groups x (8 tokens x 4 bytes) */
            __m256i r[8];
            for (int i = 0; i < 8; i++)
                r[i] = valid[i] ? _mm256_loadu_si256((const __m256i *)(rows[i] + k0 + 4 * g))
                                : _mm256_setzero_si256();
            __m256i a0 = _mm256_unpacklo_epi32(r[0], r[1]), a1 = _mm256_unpackhi_epi32(r[0], r[1]);
            __m256i a2 = _mm256_unpacklo_epi32(r[2], r[3]), a3 = _mm256_unpackhi_epi32(r[2], r[3]);
            __m256i a4 = _mm256_unpacklo_epi32(r[4], r[5]), a5 = _mm256_unpackhi_epi32(r[4], r[5]);
            __m256i a6 = _mm256_unpacklo_epi32(r[6], r[7]), a7 = _mm256_unpackhi_epi32(r[6], r[7]);
            __m256i b0 = _mm256_unpacklo_epi64(a0, a2), b1 = _mm256_unpackhi_epi64(a0, a2);
            __m256i b2 = _mm256_unpacklo_epi64(a1, a3), b3 = _mm256_unpackhi_epi64(a1, a3);
            __m256i b4 = _mm256_unpacklo_epi64(a4, a6), b5 = _mm256_unpackhi_epi64(a4, a6);
            __m256i b6 = _mm256_unpacklo_epi64(a5, a7), b7 = _mm256_unpackhi_epi64(a5, a7);
            __m256i *o = (__m256i *)(q + (size_t)g * 32);
            _mm256_store_si256(o + 0, _mm256_xor_si256(_mm256_permute2x128_si256(b0, b4, 0x20), bias));
            _mm256_store_si256(o + 1, _mm256_xor_si256(_mm256_permute2x128_si256(b1, b5, 0x20), bias));
            _mm256_store_si256(o + 2, _mm256_xor_si256(_mm256_permute2x128_si256(b2, b6, 0x20), bias));
            _mm256_store_si256(o + 3, _mm256_xor_si256(_mm256_permute2x128_si256(b3, b7, 0x20), bias));
            _mm256_store_si256(o + 4, _mm256_xor_si256(_mm256_permute2x128_si256(b0, b4, 0x31), bias));
            _mm256_store_si256(o + 5, _mm256_xor_si256(_mm256_permute2x128_si256(b1, b5, 0x31), bias));
            _mm256_store_si256(o + 6, _mm256_xor_si256(_mm256_permute2x128_si256(b2, b6, 0x31), bias));
            _mm256_store_si256(o + 7, _mm256_xor_si256(_mm256_permute2x128_si256(b3, b7, 0x31), bias));
        }
        for (int k = 0; k < nu; k++)
            for (int i = 0; i < 8; i++) {
                const float *d = (const float *)(rows[i] + n);
                size_t at = ((size_t)tile * nu + k) * 8 + i;
                tl->d[at] = valid[i] ? d[u0 + k] : 0.0f;
                if (!is_k(t)) {
                    float sv = valid[i] ? d[nu_row + u0 + k] : 0.0f;
                    tl->s[at] = sa_scaled(t, sv);
                } else if (mins16(t) || mins32(t)) {
                    const int16_t *bs = (const int16_t *)(d + nu_row) + 16 * (u0 + k);
                    int np = mins16(t) ? 8 : 4;
                    for (int p = 0; p < np; p++) {
                        int lo = mins16(t) ? bs[2 * p] : bs[4 * p] + bs[4 * p + 1];
                        int hi = mins16(t) ? bs[2 * p + 1] : bs[4 * p + 2] + bs[4 * p + 3];
                        uint32_t v = valid[i] ? (uint16_t)lo | (uint32_t)(uint16_t)hi << 16 : 0;
                        tl->b[(((size_t)tile * nu + k) * np + p) * 8 + i] = (int32_t)v;
                    }
                }
            }
    }
}

static inline __m256i bcast32(const uint8_t *p) { return _mm256_set1_epi32((int)rd32(p)); }

/* one maddubs of the tiled shape: broadcast weights wb, a tile vector a */
static inline __attribute__((always_inline)) __m256i tl_mul(int t, __m256i wb, __m256i a) {
    if (biased(t)) return _mm256_maddubs_epi16(a, wb);
    return mul_pairs(t, wb, a);
}

/* S2 (the activation-sum terms) and the float step of row u against tile
 * lane vectors da, sa and the tile's bsum pairs bp. */
static inline __attribute__((always_inline)) __m256 tile_fstep(int t, __m256 acc, __m256i s1,
                                                               const struct dunit *u, int j, __m256 da,
                                                               __m256 sa, const int32_t *bp) {
    __m256i s2 = _mm256_setzero_si256();
    if (biased(t)) {
        s2 = _mm256_set1_epi32(u->corr);
    } else if (mins16(t) || mins32(t)) {
        const int np = mins16(t) ? 8 : 4;
#pragma GCC unroll 8
        for (int p = 0; p < np; p++)
            s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(bp + 8 * p)),
                                                        _mm256_set1_epi32(u->cp[p])));
    }
    return fstep(t, acc, s1, s2, _mm256_set1_ps(u->d1[j]), _mm256_set1_ps(u->d2[j]), da, sa);
}

static inline size_t bsum_stride(int t) { return mins16(t) ? 64 : mins32(t) ? 32 : 0; }

/* Three rows u[0..2] against two tiles [tile0, tile0 + 2), local unit k
 * of the chunk (j: its index in the decoded units, nonzero for the Q8A
 * types only): the register tile. Straight-line code with one variable per
 * accumulator, so that they stay in registers: 6 int16 flush sums, 2 tile
 * vectors and the broadcast weights (the 6 int32 unit sums are touched once
 * per flush). */
static inline __attribute__((always_inline)) void
tile_unit_32(int t, const struct dunit *u, const struct tiles *tl, int k, int j, int tile0,
             __m256 facc[GR][GT]) {
    const int ul = unit_len(t), ng = tl->kn / 4, kf = kflush(t), nu = tl->kn / ul;
    const int8_t *q0 = tl->q + ((size_t)tile0 * ng + (size_t)k * (ul / 4)) * 32;
    const int8_t *q1 = q0 + (size_t)ng * 32;
    const uint8_t *w0 = u[0].w + ul * j, *w1 = u[1].w + ul * j, *w2 = u[2].w + ul * j;
    __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00;
    for (int e = 0; e < ul; e += 4 * kf) {
        /* pointers at this flush's first group: constant offsets below */
        const int8_t *qa0 = q0 + (size_t)e * 8, *qa1 = q1 + (size_t)e * 8;
        const uint8_t *wp0 = w0 + e, *wp1 = w1 + e, *wp2 = w2 + e;
        __m256i c00, c01, c10, c11, c20, c21;
#pragma GCC unroll 8
        for (int f = 0; f < kf; f++) {
            __m256i a0 = _mm256_load_si256((const __m256i *)(qa0 + 32 * f));
            __m256i a1 = _mm256_load_si256((const __m256i *)(qa1 + 32 * f));
            __m256i wb0 = bcast32(wp0 + 4 * f), wb1 = bcast32(wp1 + 4 * f), wb2 = bcast32(wp2 + 4 * f);
            __m256i p00 = tl_mul(t, wb0, a0), p01 = tl_mul(t, wb0, a1);
            __m256i p10 = tl_mul(t, wb1, a0), p11 = tl_mul(t, wb1, a1);
            __m256i p20 = tl_mul(t, wb2, a0), p21 = tl_mul(t, wb2, a1);
            if (f == 0) {
                c00 = p00, c01 = p01, c10 = p10, c11 = p11, c20 = p20, c21 = p21;
            } else {
                c00 = _mm256_add_epi16(c00, p00), c01 = _mm256_add_epi16(c01, p01);
                c10 = _mm256_add_epi16(c10, p10), c11 = _mm256_add_epi16(c11, p11);
                c20 = _mm256_add_epi16(c20, p20), c21 = _mm256_add_epi16(c21, p21);
            }
            /* keep the sums running in registers: without this GCC
             * reassociates the adds into a tree and spills every product */
            __asm__("" : "+x"(c00), "+x"(c01), "+x"(c10), "+x"(c11), "+x"(c20), "+x"(c21));
        }
        /* the flush: one scale per int16 sum (4 * kf <= the scale's span) */
        __m256i sc0 = is_k(t) ? _mm256_set1_epi16(u[0].sc[e / 16]) : _mm256_set1_epi16(1);
        __m256i sc1 = is_k(t) ? _mm256_set1_epi16(u[1].sc[e / 16]) : sc0;
        __m256i sc2 = is_k(t) ? _mm256_set1_epi16(u[2].sc[e / 16]) : sc0;
        s00 = _mm256_add_epi32(s00, _mm256_madd_epi16(c00, sc0));
        s01 = _mm256_add_epi32(s01, _mm256_madd_epi16(c01, sc0));
        s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(c10, sc1));
        s11 = _mm256_add_epi32(s11, _mm256_madd_epi16(c11, sc1));
        s20 = _mm256_add_epi32(s20, _mm256_madd_epi16(c20, sc2));
        s21 = _mm256_add_epi32(s21, _mm256_madd_epi16(c21, sc2));
    }
    size_t ku0 = ((size_t)tile0 * nu + k) * 8, ku1 = ((size_t)(tile0 + 1) * nu + k) * 8;
    __m256 da0 = _mm256_load_ps(tl->d + ku0), da1 = _mm256_load_ps(tl->d + ku1);
    __m256 sa0 = is_k(t) ? _mm256_setzero_ps() : _mm256_load_ps(tl->s + ku0);
    __m256 sa1 = is_k(t) ? _mm256_setzero_ps() : _mm256_load_ps(tl->s + ku1);
    const size_t bst = bsum_stride(t);
    const int32_t *bp0 = bst ? tl->b + ku0 / 8 * bst : NULL, *bp1 = bst ? tl->b + ku1 / 8 * bst : NULL;
    facc[0][0] = tile_fstep(t, facc[0][0], s00, &u[0], j, da0, sa0, bp0);
    facc[0][1] = tile_fstep(t, facc[0][1], s01, &u[0], j, da1, sa1, bp1);
    facc[1][0] = tile_fstep(t, facc[1][0], s10, &u[1], j, da0, sa0, bp0);
    facc[1][1] = tile_fstep(t, facc[1][1], s11, &u[1], j, da1, sa1, bp1);
    facc[2][0] = tile_fstep(t, facc[2][0], s20, &u[2], j, da0, sa0, bp0);
    facc[2][1] = tile_fstep(t, facc[2][1], s21, &u[2], j, da1, sa1, bp1);
}

/* One row against one tile: the same sums, for the edges of the row and
 * tile ranges. */
static inline __attribute__((always_inline)) __m256
tile_unit_11(int t, const struct dunit *u, const struct tiles *tl, int k, int j, int tile, __m256 acc) {
    const int ul = unit_len(t), ng = tl->kn / 4, kf = kflush(t), nu = tl->kn / ul;
    const int8_t *q = tl->q + ((size_t)tile * ng + (size_t)k * (ul / 4)) * 32;
    __m256i s1 = _mm256_setzero_si256();
    for (int e = 0; e < ul; e += 4 * kf) {
        const int8_t *qa = q + (size_t)e * 8;
        const uint8_t *wp = u->w + ul * j + e;
        __m256i c = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int f = 0; f < kf; f++) {
            c = _mm256_add_epi16(c, tl_mul(t, bcast32(wp + 4 * f), _mm256_load_si256((const __m256i *)(qa + 32 * f))));
            __asm__("" : "+x"(c));
        }
        __m256i sc = is_k(t) ? _mm256_set1_epi16(u->sc[e / 16]) : _mm256_set1_epi16(1);
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(c, sc));
    }
    size_t ku = ((size_t)tile * nu + k) * 8;
    __m256 sa = is_k(t) ? _mm256_setzero_ps() : _mm256_load_ps(tl->s + ku);
    const size_t bst = bsum_stride(t);
    return tile_fstep(t, acc, s1, u, j, _mm256_load_ps(tl->d + ku), sa, bst ? tl->b + ku / 8 * bst : NULL);
}

/* Rows rows[0..nr) (output rows r_out[]) times the chunk's tokens, over its
 * elements [k0, k0 + tl->kn): the float sums start at 0 when k0 == 0 and
 * continue from y otherwise (the same float values, so the same result). */
static inline __attribute__((always_inline)) void
tiled_rows(int t, int nr, float *restrict y, size_t ldy, const uint8_t *const rows[GR],
           const struct tiles *tl, int nt, int k0, const int r_out[GR]) {
    const int ul = unit_len(t), nu = tl->kn / ul, ub = unit_bytes(t), u0 = k0 / ul;
    const int ntiles = tl->n_tiles;
    struct dunit u[GR];
    /* float sums of every (row, tile): each decoded unit serves all tiles */
    _Alignas(32) float acc[GR][MAX_TILES][8] = {{{0}}};
    if (k0 > 0)
        for (int tok = 0; tok < nt; tok++)
            for (int r = 0; r < nr; r++) acc[r][tok / 8][tok % 8] = y[(size_t)tok * ldy + r_out[r]];
    /* units decoded at a time (see struct dunit) */
    const int step = is_k(t) ? 1 : QB;
    for (int k = 0; k < nu; k += step) {
        const int nb = nu - k < step ? nu - k : step;
        for (int r = 0; r < nr; r++) {
            const uint8_t *b = rows[r] + (size_t)(u0 + k) * ub;
            if (is_k(t))
                tl_decode(t, b, &u[r]);
            else
                tl_decode_q8a(t, b, nb, &u[r]);
        }
        int i = 0;
        if (nr == GR)
            for (; i + GT <= ntiles; i += GT) {
                __m256 f[GR][GT];
                for (int r = 0; r < GR; r++)
                    for (int g = 0; g < GT; g++) f[r][g] = _mm256_load_ps(acc[r][i + g]);
                for (int j = 0; j < nb; j++) tile_unit_32(t, u, tl, k + j, j, i, f);
                for (int r = 0; r < GR; r++)
                    for (int g = 0; g < GT; g++) _mm256_store_ps(acc[r][i + g], f[r][g]);
            }
        for (; i < ntiles; i++)
            for (int r = 0; r < nr; r++) {
                __m256 f = _mm256_load_ps(acc[r][i]);
                for (int j = 0; j < nb; j++) f = tile_unit_11(t, &u[r], tl, k + j, j, i, f);
                _mm256_store_ps(acc[r][i], f);
            }
    }
    for (int tok = 0; tok < nt; tok++)
        for (int r = 0; r < nr; r++) y[(size_t)tok * ldy + r_out[r]] = acc[r][tok / 8][tok % 8];
}

static inline __attribute__((always_inline)) void
matmul_k(int t, float *restrict y, size_t ldy, const void *restrict w, size_t ws,
         const void *restrict x, size_t xs, int n, int n_tokens, int r0, int r1) {
    const uint8_t *wb = w, *xb = x;
    if (r0 >= r1 || n_tokens <= 0) return;
    if (n_tokens < tiled_min(t)) {
        /* groups of up to MV_TOKENS tokens, each one pass over the weights */
        for (int tok = 0; tok < n_tokens;) {
            int g = n_tokens - tok < MV_TOKENS ? n_tokens - tok : MV_TOKENS;
            matvec_n(t, g, y + (size_t)tok * ldy, ldy, wb, ws, xb + (size_t)tok * xs, xs, n, r0, r1);
            tok += g;
        }
        return;
    }
    _Alignas(32) int8_t qbuf[XQ_BYTES];
    /* per 8 tokens and unit: 8 da (8 sa) per 32 elements, at most 64 bsum
     * pairs per 256: XQ_BYTES / 32 values each at most */
    _Alignas(32) float dbuf[XQ_BYTES / 32];
    _Alignas(32) float sbuf[XQ_BYTES / 32];
    _Alignas(32) int32_t bbuf[XQ_BYTES / 32];
    struct tiles tl = {0, 0, qbuf, dbuf, sbuf, bbuf};
    for (int c0 = 0; c0 < n_tokens; c0 += 8 * MAX_TILES) {
        int nt = n_tokens - c0 < 8 * MAX_TILES ? n_tokens - c0 : 8 * MAX_TILES;
        tl.n_tiles = (nt + 7) / 8;
        /* elements per pass: the transposed chunk fits XQ_BYTES */
        int kc = XQ_BYTES / (8 * tl.n_tiles) / QK_K * QK_K;
        if (kc > n) kc = n;
        float *yc = y + (size_t)c0 * ldy;
        for (int k0 = 0; k0 < n; k0 += kc) {
            tl.kn = n - k0 < kc ? n - k0 : kc;
            tiles_fill(t, &tl, xb + (size_t)c0 * xs, xs, n, nt, k0);
            int r = r0;
            for (; r + GR <= r1; r += GR) {
                const uint8_t *rows[GR];
                int ro[GR];
                for (int i = 0; i < GR; i++) {
                    rows[i] = wb + (size_t)(r + i) * ws;
                    ro[i] = r + i;
                }
                tiled_rows(t, GR, yc, ldy, rows, &tl, nt, k0, ro);
            }
            for (; r < r1; r++) {
                const uint8_t *rows[GR] = {wb + (size_t)r * ws};
                int ro[GR] = {r};
                tiled_rows(t, 1, yc, ldy, rows, &tl, nt, k0, ro);
            }
        }
    }
}

#define DEFINE_MATMUL_K(NAME, T) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        matmul_k(T, y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1); \
    }

DEFINE_MATMUL_K(kn_matmul_q4_0_avx2, T_Q4_0)
DEFINE_MATMUL_K(kn_matmul_q4_1_avx2, T_Q4_1)
DEFINE_MATMUL_K(kn_matmul_q8_0_avx2, T_Q8_0)
DEFINE_MATMUL_K(kn_matmul_q5_0_avx2, T_Q5_0)
DEFINE_MATMUL_K(kn_matmul_q5_1_avx2, T_Q5_1)
DEFINE_MATMUL_K(kn_matmul_iq4_nl_avx2, T_IQ4_NL)
DEFINE_MATMUL_K(kn_matmul_mxfp4_avx2, T_MXFP4)
DEFINE_MATMUL_K(kn_matmul_q2_k_avx2, T_Q2_K)
DEFINE_MATMUL_K(kn_matmul_q3_k_avx2, T_Q3_K)
DEFINE_MATMUL_K(kn_matmul_q4_k_avx2, T_Q4_K)
DEFINE_MATMUL_K(kn_matmul_q5_k_avx2, T_Q5_K)
DEFINE_MATMUL_K(kn_matmul_q6_k_avx2, T_Q6_K)
DEFINE_MATMUL_K(kn_matmul_iq4_xs_avx2, T_IQ4_XS)
