/*
 * matmul_k.c (avx2) - matmuls of the 5-bit, K-quant and IQ4 types with
 * AVX2 (vpmaddubsw + vpmaddwd): Q5_0, Q5_1, IQ4_NL against Q8A activations,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8K. The specification is
 * cpu/ref/matmul.c; the kernels are bit-exact with it.
 *
 * Units. A weight row is a sequence of units: the 32-element block of the
 * Q8A types, the 256-element super-block of the Q8K types. Each unit is
 * first decoded (decode_unit) into
 *   w[]    one byte per element: the quant as vpmaddubsw's unsigned
 *          operand (Q5: 0..31, Q4_K: 0..15, Q6_K: 0..63, Q3_K: q + 4h in
 *          0..7, Q2_K: 0..3), or for the IQ4 types the signed table value
 *          kv (then |kv| * sign(qa, kv), the usual sign trick);
 *   sc[16] (K types) the integer scale of each 16 elements;
 *   c[16]  (K types) the integer coefficient of each 16-element activation
 *          sum bsum (mins for Q4_K/Q5_K/Q2_K, 32 sc for Q6_K, 4 sc for Q3_K);
 *   d1, d2 the float scales (d, dmin or m).
 * so that one code path serves every type: the unit's exact integer sums
 *   S1 = sum_j sc_j * sum(w * qa over sub-block j),  S2 = sum_g c_g * bsum_g
 * (for the Q8A types S1 = the block's plain sum, S2 unused), then the
 * reference's float step, operation for operation (fstep below):
 *   Q4_K, Q5_K, Q2_K: acc + ((d * da) * S1 - (dmin * da) * S2)
 *   Q6_K, Q3_K, IQ4_XS: acc + (d * da) * (S1 - S2)
 *   Q5_0: acc + d * (da * S1 - 16 * sa)    Q5_1: acc + ((d * da) * S1 + m * sa)
 *   IQ4_NL: acc + (d * da) * S1
 * Integer sums are exact in any order, and the float step of each (row,
 * token) runs unit by unit in row order, separate mul/add intrinsics (no
 * FMA: these files are built with -std=c11, so GCC does not contract).
 * Hence y(t, r) equals the reference bit for bit, in every shape below,
 * whatever n_tokens, r0 and r1 are (batch invariance, kernels/ops.h).
 *
 * Shapes:
 *   - matvec (one token at a time, n_tokens < TILED_MIN or n too long for
 *     the scratch): 8 rows in lockstep, each its own memory stream with a
 *     software prefetch; a row's unit is dotted horizontally (32 elements
 *     per vpmaddubsw, scales per int16 lane through vpmaddwd), the 8 rows'
 *     partial vectors are summed by an unpack tree so that lane i holds row
 *     i, and the float step runs with lane = row.
 *   - tiled (several tokens): the token rows are transposed into tiles of
 *     8 tokens (dword lane t = 4 consecutive activations of token t), a
 *     group of GR rows is decoded one unit at a time, and each 4-byte
 *     group of a decoded row is broadcast against GT tiles: one vpmaddubsw
 *     = 8 tokens x 4 elements, every decoded weight serves all the tokens
 *     of the chunk, and no horizontal sums are needed. int16 partial sums
 *     are accumulated over KF groups (KF = the most that cannot overflow:
 *     2 * KF * 127 * max|w| <= 32767) before one vpmaddwd applies the
 *     sub-block scale. The float step runs with lane = token.
 *
 * Tiles hold 32 tokens at most; a long row is done in passes over
 * kc elements (the float sums continue from y between passes: the same
 * values, so the same result), so the scratch is bounded whatever n is:
 * about 90 KB of stack (XQ_BYTES of transposed activations plus their
 * scales and sums).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/avx2/avx2.h"

enum { T_Q5_0, T_Q5_1, T_IQ4_NL, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K, T_IQ4_XS };

enum {
    GR = 3,             /* rows per register tile (tiled) */
    GT = 2,             /* token tiles of 8 per register tile (tiled) */
    MV_ROWS = 8,        /* rows in lockstep (matvec) */
    TILED_MIN = 2,      /* fewest tokens for the tiled shape */
    MAX_TILES = 4,      /* token tiles per chunk */
    XQ_BYTES = 64 << 10, /* transposed activation bytes per pass */
    PF_DIST = 4096,     /* software prefetch distance of the weight streams */
};

static inline int is_k(int t) { return t >= T_Q2_K; }
static inline int unit_len(int t) { return is_k(t) ? QK_K : QK; }
static inline int unit_bytes(int t) {
    static const int b[] = {22, 24, 18, 84, 110, 144, 176, 210, 136};
    return b[t];
}
static inline int signed_w(int t) { return t == T_IQ4_NL || t == T_IQ4_XS; }
/* 4-element groups per int16 flush (see the header) */
static inline int kflush(int t) {
    switch (t) {
    case T_Q4_K: return 8;
    case T_Q6_K: return 2;
    case T_IQ4_NL:
    case T_IQ4_XS: return 1;
    default: return 4; /* Q5_0, Q5_1, Q5_K (max 31); Q3_K, Q2_K (16-element sub-blocks) */
    }
}
/* elements per scale: the int16 flushes never straddle two scales */
static inline int sub_len(int t) { return t == T_Q2_K || t == T_Q3_K || t == T_Q6_K ? 16 : 32; }

/* ---------------------------------------------------------------------- */
/* decoding one unit */

struct dunit {
    _Alignas(32) uint8_t w[QK_K];
    int16_t sc[16], c[16];
    float d1, d2;
};

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
/* byte l = val where bit b of byte l of v is set */
static inline __m256i bit_of(__m256i v, int b, int val) {
    const __m256i m = _mm256_set1_epi8((char)(1 << b));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, m), m), _mm256_set1_epi8((char)val));
}
static inline __m256i kv_lookup(__m256i idx) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kn_iq4nl_values));
    return _mm256_shuffle_epi8(tab, idx);
}
static inline float h2f(const uint8_t *p) {
    kn_f16 h;
    memcpy(&h, p, 2);
    return kn_f16_to_f32(h);
}

static inline __attribute__((always_inline)) void decode_unit(int t, const uint8_t *b,
                                                              struct dunit *u) {
    switch (t) {
    case T_Q5_0:
    case T_Q5_1: {
        int o = t == T_Q5_1 ? 4 : 2;
        __m256i w = _mm256_or_si256(nib_split(b + o + 4), bits_to_16(b + o));
        _mm256_store_si256((__m256i *)u->w, w);
        u->d1 = h2f(b);
        u->d2 = t == T_Q5_1 ? h2f(b + 2) : 0.0f;
        break;
    }
    case T_IQ4_NL:
        _mm256_store_si256((__m256i *)u->w, kv_lookup(nib_split(b + 2)));
        u->d1 = h2f(b);
        u->d2 = 0.0f;
        break;
    case T_Q2_K: {
        const struct blk_q2_k *x = (const struct blk_q2_k *)b;
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int s = 0; s < 4; s++)
                _mm256_store_si256((__m256i *)(u->w + 128 * h + 32 * s),
                                   _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), _mm256_set1_epi8(3)));
        }
        for (int g = 0; g < 16; g++) {
            u->sc[g] = x->scales[g] & 0x0f;
            u->c[g] = x->scales[g] >> 4;
        }
        u->d1 = kn_f16_to_f32(x->d);
        u->d2 = kn_f16_to_f32(x->dmin);
        break;
    }
    case T_Q3_K: {
        const struct blk_q3_k *x = (const struct blk_q3_k *)b;
        __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int s = 0; s < 4; s++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), _mm256_set1_epi8(3));
                _mm256_store_si256((__m256i *)(u->w + 128 * h + 32 * s),
                                   _mm256_or_si256(lo, bit_of(hm, 4 * h + s, 4)));
            }
        }
        int sc[16];
        kn_q3_k_scales(x->scales, sc);
        for (int g = 0; g < 16; g++) {
            u->sc[g] = (int16_t)sc[g];
            u->c[g] = (int16_t)(4 * sc[g]);
        }
        u->d1 = kn_f16_to_f32(x->d);
        u->d2 = 0.0f;
        break;
    }
    case T_Q4_K:
    case T_Q5_K: {
        const struct blk_q4_k *x4 = (const struct blk_q4_k *)b;
        const struct blk_q5_k *x5 = (const struct blk_q5_k *)b;
        const uint8_t *qs = t == T_Q4_K ? x4->qs : x5->qs;
        __m256i qh = t == T_Q5_K ? _mm256_loadu_si256((const __m256i *)x5->qh) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = nib_lo(q), hi = nib_hi(q);
            if (t == T_Q5_K) {
                lo = _mm256_or_si256(lo, bit_of(qh, 2 * c, 16));
                hi = _mm256_or_si256(hi, bit_of(qh, 2 * c + 1, 16));
            }
            _mm256_store_si256((__m256i *)(u->w + 64 * c), lo);
            _mm256_store_si256((__m256i *)(u->w + 64 * c + 32), hi);
        }
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kn_k_scale_min(x4->scales, j, &sc, &m);
            u->sc[2 * j] = u->sc[2 * j + 1] = (int16_t)sc;
            u->c[2 * j] = u->c[2 * j + 1] = (int16_t)m;
        }
        u->d1 = kn_f16_to_f32(x4->d);
        u->d2 = kn_f16_to_f32(x4->dmin);
        break;
    }
    case T_Q6_K: {
        const struct blk_q6_k *x = (const struct blk_q6_k *)b;
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            const __m256i m30 = _mm256_set1_epi8(0x30);
            __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30);
            __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30);
            __m256i h2 = _mm256_and_si256(qh, m30);
            __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30);
            uint8_t *w = u->w + 128 * h;
            _mm256_store_si256((__m256i *)(w + 0), _mm256_or_si256(nib_lo(l0), h0));
            _mm256_store_si256((__m256i *)(w + 32), _mm256_or_si256(nib_lo(l1), h1));
            _mm256_store_si256((__m256i *)(w + 64), _mm256_or_si256(nib_hi(l0), h2));
            _mm256_store_si256((__m256i *)(w + 96), _mm256_or_si256(nib_hi(l1), h3));
        }
        for (int g = 0; g < 16; g++) {
            u->sc[g] = x->scales[g];
            u->c[g] = (int16_t)(32 * x->scales[g]);
        }
        u->d1 = kn_f16_to_f32(x->d);
        u->d2 = 0.0f;
        break;
    }
    default: { /* T_IQ4_XS */
        const struct blk_iq4_xs *x = (const struct blk_iq4_xs *)b;
        for (int j = 0; j < 8; j++)
            _mm256_store_si256((__m256i *)(u->w + 32 * j), kv_lookup(nib_split(x->qs + 16 * j)));
        int ls[8];
        kn_iq4_xs_scales(x, ls);
        for (int j = 0; j < 8; j++) {
            u->sc[2 * j] = u->sc[2 * j + 1] = (int16_t)ls[j];
            u->c[2 * j] = u->c[2 * j + 1] = 0;
        }
        u->d1 = kn_f16_to_f32(x->d);
        u->d2 = 0.0f;
        break;
    }
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
    case T_Q5_0: /* sa holds 16 * sa here (exact) */
        return _mm256_add_ps(acc, _mm256_mul_ps(d1, _mm256_sub_ps(_mm256_mul_ps(da, _mm256_cvtepi32_ps(s1)), sa)));
    case T_Q5_1:
        return _mm256_add_ps(acc, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(d1, da), _mm256_cvtepi32_ps(s1)),
                                                _mm256_mul_ps(d2, sa)));
    default: /* T_IQ4_NL */
        return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d1, da), _mm256_cvtepi32_ps(s1)));
    }
}

/* w (unsigned or, for the IQ4 types, signed by the sign trick) x a: 16
 * int16 sums of adjacent pairs */
static inline __attribute__((always_inline)) __m256i mul_pairs(int t, __m256i w, __m256i a) {
    if (signed_w(t)) return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_maddubs_epi16(w, a);
}

/* ---------------------------------------------------------------------- */
/* matvec: 8 rows in lockstep, one token */

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

/* int16 lanes 0..7 = s[0], lanes 8..15 = s[1] */
static inline __m256i scale_pair(const int16_t *s) {
    int32_t v;
    memcpy(&v, s, 4);
    return _mm256_shuffle_epi8(_mm256_set1_epi32(v), _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                                                      2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
}

/* Integer sums of one decoded unit against one activation unit (qa: its
 * int8 values, bs: its 16 bsums for K types): 8 partial dwords each. */
static inline __attribute__((always_inline)) void unit_dot(int t, const struct dunit *u,
                                                           const int8_t *qa, const int16_t *bs,
                                                           __m256i *s1, __m256i *s2) {
    if (!is_k(t)) {
        __m256i p = mul_pairs(t, _mm256_load_si256((const __m256i *)u->w),
                              _mm256_loadu_si256((const __m256i *)qa));
        *s1 = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
        *s2 = _mm256_setzero_si256();
        return;
    }
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < QK_K / 32; k++) {
        __m256i p = mul_pairs(t, _mm256_load_si256((const __m256i *)(u->w + 32 * k)),
                              _mm256_loadu_si256((const __m256i *)(qa + 32 * k)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale_pair(u->sc + 2 * k)));
    }
    *s1 = acc;
    *s2 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)u->c),
                            _mm256_loadu_si256((const __m256i *)bs));
}

static inline __attribute__((always_inline)) void
matvec(int t, float *restrict y, const uint8_t *restrict w, size_t ws, const uint8_t *restrict xa,
       int n, int r0, int r1) {
    const int ul = unit_len(t), ub = unit_bytes(t), nu = n / ul;
    const int8_t *qa = (const int8_t *)xa;
    /* Q8A: d[n/32] then s[n/32]; Q8K: d[n/256] then bsums[n/16] */
    const float *da = (const float *)(xa + n);
    const float *sa = da + nu;
    const int16_t *bs = is_k(t) ? (const int16_t *)(da + nu) : NULL;
    struct dunit u[MV_ROWS];
    for (int ra = r0; ra < r1; ra += MV_ROWS) {
        int nr = r1 - ra < MV_ROWS ? r1 - ra : MV_ROWS;
        const uint8_t *row[MV_ROWS];
        /* missing rows of a short group recompute row ra, never stored */
        for (int i = 0; i < MV_ROWS; i++) row[i] = w + (size_t)(ra + (i < nr ? i : 0)) * ws;
        __m256 acc = _mm256_setzero_ps();
        for (int k = 0; k < nu; k++) {
            __m256i p1[MV_ROWS], p2[MV_ROWS];
            _Alignas(32) float d1[MV_ROWS], d2[MV_ROWS];
#pragma GCC unroll 8
            for (int i = 0; i < MV_ROWS; i++) {
                const uint8_t *b = row[i] + (size_t)k * ub;
                _mm_prefetch((const char *)b + PF_DIST, _MM_HINT_T0);
                if (ub > 64) _mm_prefetch((const char *)b + PF_DIST + 64, _MM_HINT_T0);
                if (ub > 128) _mm_prefetch((const char *)b + PF_DIST + 128, _MM_HINT_T0);
                decode_unit(t, b, &u[i]);
                unit_dot(t, &u[i], qa + (size_t)k * ul, is_k(t) ? bs + (size_t)k * 16 : NULL, &p1[i], &p2[i]);
                d1[i] = u[i].d1;
                d2[i] = u[i].d2;
            }
            __m256i s1 = tree8(p1), s2 = is_k(t) ? tree8(p2) : _mm256_setzero_si256();
            __m256 vs = is_k(t) ? _mm256_setzero_ps()
                                : _mm256_set1_ps(t == T_Q5_0 ? 16.0f * sa[k] : sa[k]);
            acc = fstep(t, acc, s1, s2, _mm256_load_ps(d1), _mm256_load_ps(d2), _mm256_set1_ps(da[k]), vs);
        }
        _Alignas(32) float out[MV_ROWS];
        _mm256_store_ps(out, acc);
        for (int i = 0; i < nr; i++) y[ra + i] = out[i];
    }
}

/* ---------------------------------------------------------------------- */
/* tiled: tokens transposed into tiles of 8 */

/* One chunk of token rows, elements [k0, k0 + kn) of them, transposed
 * (see the header). Unit indices below are local to the chunk. */
struct tiles {
    int n_tiles, kn;
    int8_t *q;        /* [tile][kn/4][8 tokens][4 bytes] */
    float *d;         /* [tile][unit][8]: da */
    float *s;         /* Q8A: [tile][block][8]: sa (16 * sa for Q5_0) */
    int32_t *b;       /* Q8K: [tile][unit][8 pairs][8 tokens]: bsums 2p, 2p + 1 */
};

/* Transpose elements [k0, k0 + tl->kn) of tokens [0, nt) of x into tiles
 * (zeros past nt). */
static inline __attribute__((always_inline)) void tiles_fill(int t, struct tiles *tl, const uint8_t *x,
                                                             size_t xs, int n, int nt, int k0) {
    const int ul = unit_len(t), nu = tl->kn / ul, ng = tl->kn / 4, u0 = k0 / ul, nu_row = n / ul;
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
            _mm256_store_si256(o + 0, _mm256_permute2x128_si256(b0, b4, 0x20));
            _mm256_store_si256(o + 1, _mm256_permute2x128_si256(b1, b5, 0x20));
            _mm256_store_si256(o + 2, _mm256_permute2x128_si256(b2, b6, 0x20));
            _mm256_store_si256(o + 3, _mm256_permute2x128_si256(b3, b7, 0x20));
            _mm256_store_si256(o + 4, _mm256_permute2x128_si256(b0, b4, 0x31));
            _mm256_store_si256(o + 5, _mm256_permute2x128_si256(b1, b5, 0x31));
            _mm256_store_si256(o + 6, _mm256_permute2x128_si256(b2, b6, 0x31));
            _mm256_store_si256(o + 7, _mm256_permute2x128_si256(b3, b7, 0x31));
        }
        for (int k = 0; k < nu; k++)
            for (int i = 0; i < 8; i++) {
                const float *d = (const float *)(rows[i] + n);
                size_t at = ((size_t)tile * nu + k) * 8 + i;
                tl->d[at] = valid[i] ? d[u0 + k] : 0.0f;
                if (!is_k(t)) {
                    float sv = valid[i] ? d[nu_row + u0 + k] : 0.0f;
                    tl->s[at] = t == T_Q5_0 ? 16.0f * sv : sv;
                } else {
                    const int16_t *bs = (const int16_t *)(d + nu_row) + 16 * (u0 + k);
                    for (int p = 0; p < 8; p++) {
                        uint32_t v = valid[i] ? (uint16_t)bs[2 * p] | (uint32_t)(uint16_t)bs[2 * p + 1] << 16 : 0;
                        tl->b[(((size_t)tile * nu + k) * 8 + p) * 8 + i] = (int32_t)v;
                    }
                }
            }
    }
}

static inline __m256i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Rows u[0..nr) (one decoded unit each, local unit k of the chunk) against
 * tiles [tile0, tile0 + ntl): integer sums, then the float step on
 * facc[r][i] (lane = token of tile tile0 + i). */
static inline __attribute__((always_inline)) void
tile_unit(int t, int nr, int ntl, const struct dunit *u, const struct tiles *tl, int k, int tile0,
          __m256 facc[GR][GT]) {
    const int ul = unit_len(t), ng = tl->kn / 4, kf = kflush(t), nu = tl->kn / ul;
    __m256i s1[GR][GT];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 2
        for (int i = 0; i < ntl; i++) s1[r][i] = _mm256_setzero_si256();
    const int8_t *qbase = tl->q + ((size_t)tile0 * ng + (size_t)k * (ul / 4)) * 32;
    for (int e = 0; e < ul; e += 4 * kf) {
        __m256i a16[GR][GT];
#pragma GCC unroll 8
        for (int f = 0; f < kf; f++) {
            const int g = e / 4 + f;
            __m256i a[GT];
#pragma GCC unroll 2
            for (int i = 0; i < ntl; i++)
                a[i] = _mm256_load_si256((const __m256i *)(qbase + ((size_t)i * ng + g) * 32));
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                __m256i wb = bcast32(u[r].w + 4 * g);
#pragma GCC unroll 2
                for (int i = 0; i < ntl; i++) {
                    __m256i p = mul_pairs(t, wb, a[i]);
                    a16[r][i] = f == 0 ? p : _mm256_add_epi16(a16[r][i], p);
                }
            }
        }
        /* the flush: one scale per int16 sum (4 * kf <= the scale's span) */
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m256i sc = is_k(t) ? _mm256_set1_epi16(u[r].sc[e / 16]) : _mm256_set1_epi16(1);
#pragma GCC unroll 2
            for (int i = 0; i < ntl; i++) s1[r][i] = _mm256_add_epi32(s1[r][i], _mm256_madd_epi16(a16[r][i], sc));
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < ntl; i++) {
        size_t ku = ((size_t)(tile0 + i) * nu + k) * 8;
        __m256 da = _mm256_load_ps(tl->d + ku);
        __m256 sa = is_k(t) ? _mm256_setzero_ps() : _mm256_load_ps(tl->s + ku);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            __m256i s2 = _mm256_setzero_si256();
            if (is_k(t) && t != T_IQ4_XS) {
                const int32_t *bp = tl->b + ku * 8;
                int32_t cp[8];
                memcpy(cp, u[r].c, 32);
#pragma GCC unroll 8
                for (int p = 0; p < 8; p++)
                    s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)(bp + 8 * p)),
                                                                _mm256_set1_epi32(cp[p])));
            }
            facc[r][i] = fstep(t, facc[r][i], s1[r][i], s2, _mm256_set1_ps(u[r].d1),
                               _mm256_set1_ps(u[r].d2), da, sa);
        }
    }
}

/* Rows rows[0..nr) (output rows r_out[]) times the chunk's tokens, over its
 * elements [k0, k0 + tl->kn): the float sums start at 0 when k0 == 0 and
 * continue from y otherwise (the same float values, so the same result). */
static inline __attribute__((always_inline)) void
tiled_rows(int t, int nr, float *restrict y, size_t ldy, const uint8_t *const rows[GR],
           const struct tiles *tl, int nt, int k0, const int r_out[GR]) {
    const int ul = unit_len(t), nu = tl->kn / ul, ub = unit_bytes(t), u0 = k0 / ul;
    struct dunit u[GR];
    for (int tile0 = 0; tile0 < tl->n_tiles; tile0 += GT) {
        int ntl = tl->n_tiles - tile0 < GT ? tl->n_tiles - tile0 : GT;
        __m256 facc[GR][GT];
        for (int i = 0; i < GT; i++) {
            _Alignas(32) float in[GR][8] = {{0}};
            if (k0 > 0 && i < ntl)
                for (int l = 0; l < 8; l++) {
                    int tok = (tile0 + i) * 8 + l;
                    if (tok >= nt) break;
                    for (int r = 0; r < nr; r++) in[r][l] = y[(size_t)tok * ldy + r_out[r]];
                }
            for (int r = 0; r < GR; r++) facc[r][i] = _mm256_load_ps(in[r]);
        }
        for (int k = 0; k < nu; k++) {
            for (int r = 0; r < nr; r++) decode_unit(t, rows[r] + (size_t)(u0 + k) * ub, &u[r]);
            if (ntl == GT) tile_unit(t, nr, GT, u, tl, k, tile0, facc);
            else tile_unit(t, nr, 1, u, tl, k, tile0, facc);
        }
        for (int i = 0; i < ntl; i++) {
            _Alignas(32) float out[GR][8];
            for (int r = 0; r < nr; r++) _mm256_store_ps(out[r], facc[r][i]);
            for (int l = 0; l < 8; l++) {
                int tok = (tile0 + i) * 8 + l;
                if (tok >= nt) break;
                for (int r = 0; r < nr; r++) y[(size_t)tok * ldy + r_out[r]] = out[r][l];
            }
        }
    }
}

static inline __attribute__((always_inline)) void
matmul_k(int t, float *restrict y, size_t ldy, const void *restrict w, size_t ws,
         const void *restrict x, size_t xs, int n, int n_tokens, int r0, int r1) {
    const uint8_t *wb = w, *xb = x;
    if (r0 >= r1 || n_tokens <= 0) return;
    if (n_tokens < TILED_MIN) {
        for (int tok = 0; tok < n_tokens; tok++)
            matvec(t, y + (size_t)tok * ldy, wb, ws, xb + (size_t)tok * xs, n, r0, r1);
        return;
    }
    _Alignas(32) int8_t qbuf[XQ_BYTES];
    /* per 8 tokens and unit: 8 da (8 sa) per 32 elements, 64 bsum pairs
     * per 256: XQ_BYTES / 32 values each at most */
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

DEFINE_MATMUL_K(kn_matmul_q5_0_avx2, T_Q5_0)
DEFINE_MATMUL_K(kn_matmul_q5_1_avx2, T_Q5_1)
DEFINE_MATMUL_K(kn_matmul_iq4_nl_avx2, T_IQ4_NL)
DEFINE_MATMUL_K(kn_matmul_q2_k_avx2, T_Q2_K)
DEFINE_MATMUL_K(kn_matmul_q3_k_avx2, T_Q3_K)
DEFINE_MATMUL_K(kn_matmul_q4_k_avx2, T_Q4_K)
DEFINE_MATMUL_K(kn_matmul_q5_k_avx2, T_Q5_K)
DEFINE_MATMUL_K(kn_matmul_q6_k_avx2, T_Q6_K)
DEFINE_MATMUL_K(kn_matmul_iq4_xs_avx2, T_IQ4_XS)
