/*
 * ops.c (avx512) - element-wise and row ops (activation conversions,
 * RMSNorm plain / with the residual add / fused with the activation
 * conversion, SiLU*mul plain / fused, RoPE) and the avx512 kernel tables.
 * The specification is cpu/ref/ops.c and cpu/ref/matmul.c.
 *
 * Numerics against the reference:
 *   - Q8A and BF16 conversions are bit-exact (same divisions, products and
 *     round-to-nearest-even; cvtps2dq rounds like nearbyintf under the
 *     default MXCSR, which the library never changes).
 *   - RMSNorm accumulates the sum of squares in double, like the reference,
 *     only in another order, then y = (x * scale) * w as the reference does:
 *     outputs are equal unless the two sums round to different scales.
 *   - silu uses its own exp (rel. error ~2 ulp); RoPE its own sin/cos (abs.
 *     error ~1e-7 after a 3-part pi/2 reduction, fine for |theta| up to 1e5).
 * Row ops work on one row and are batch-invariant by construction.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/avx2/avx2.h"
#include "kernels/cpu/avx512/avx512.h"
#include "kernels/cpu/ref/ref.h"

static inline __mmask16 tail_mask(int left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* ---------------------------------------------------------------------- */
/* activation conversions */

/* round-to-even(clamp(v, -127, 127)), NaN lanes 0: the reference's
 * q8_round (a subnormal amax makes id infinite; an infinite input must
 * still give +-127, not the INT_MIN of the bare conversion) */
static inline __m512i q8_round16(__m512 v) {
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    return _mm512_cvtps_epi32(v);
}

/* max(|v|, m) that skips NaN lanes of v as fmaxf does (vmaxps returns its
 * second operand when either is NaN, so the running max goes second) */
static inline __m512 amax_step(__m512 v, __m512 m) {
    return _mm512_max_ps(_mm512_andnot_ps(_mm512_set1_ps(-0.0f), v), m);
}

/* One block of 32 floats (a, b) -> Q8A: qs[32], *d, *s (see blocks.h). */
static inline void q8a_block(__m512 a, __m512 b, int8_t *qs, float *d, float *s) {
    float amax = _mm512_reduce_max_ps(amax_step(b, amax_step(a, _mm512_setzero_ps())));
    float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
    __m512 vid = _mm512_set1_ps(id);
    __m512i qa = q8_round16(_mm512_mul_ps(a, vid));
    __m512i qb = q8_round16(_mm512_mul_ps(b, vid));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(qb));
    *d = db;
    *s = db * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
}

/* One Q8K super-block: 256 floats at x -> qs[256], *d, bs[16] (blocks.h),
 * the operations of kn_act_block_ref, 16 lanes at a time. */
static void q8k_block(const float *x, int8_t *qs, float *d, int16_t *bs) {
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < QK_K; k += 16) m = amax_step(_mm512_loadu_ps(x + k), m);
    float amax = _mm512_reduce_max_ps(m);
    float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    for (int k = 0; k < QK_K; k += 64) {
#define Q16(j) _mm512_cvtepi32_epi8(q8_round16(_mm512_mul_ps(_mm512_loadu_ps(x + k + 16 * (j)), vid)))
        __m512i p = _mm512_castsi128_si512(Q16(0));
        p = _mm512_inserti32x4(p, Q16(1), 1);
        p = _mm512_inserti32x4(p, Q16(2), 2);
        p = _mm512_inserti32x4(p, Q16(3), 3);
#undef Q16
        _mm512_storeu_si512((void *)(qs + k), p);
        /* sums of 8 bytes per 64-bit lane of (q + 128), two per group of 16 */
        int64_t l[8];
        _mm512_storeu_si512((void *)l, _mm512_sad_epu8(_mm512_xor_si512(p, _mm512_set1_epi8((char)0x80)),
                                                       _mm512_setzero_si512()));
        for (int g = 0; g < 4; g++) bs[k / 16 + g] = (int16_t)(l[2 * g] + l[2 * g + 1] - 16 * 128);
    }
    *d = db;
}

/* Super-block b of a Q8K (or Q8A_Q8K) row from its 256 floats at x. */
static void act_sb(void *restrict dst, const float *restrict x, int n, int b, int act) {
    if (act == KN_ACT_Q8A_Q8K) {
        int nb = n / QK;
        int8_t *qs = dst;
        float *d = (float *)((uint8_t *)dst + n), *s = d + nb;
        for (int j = 0; j < QK_K / QK; j++) {
            int blk = b * (QK_K / QK) + j;
            q8a_block(_mm512_loadu_ps(x + j * QK), _mm512_loadu_ps(x + j * QK + 16), qs + blk * QK, d + blk,
                      s + blk);
        }
        dst = (uint8_t *)dst + kn_act_part_offset(act, KN_ACT_Q8K, n);
    }
    int8_t *qs = dst;
    float *d = (float *)((uint8_t *)dst + n);
    int16_t *bs = (int16_t *)(d + n / QK_K);
    q8k_block(x, qs + (size_t)b * QK_K, d + b, bs + b * (QK_K / 16));
}

void kn_act_q8k_avx512(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK_K; b++) act_sb(dst, x + (size_t)b * QK_K, n, b, KN_ACT_Q8K);
}

void kn_act_q8a_q8k_avx512(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK_K; b++) act_sb(dst, x + (size_t)b * QK_K, n, b, KN_ACT_Q8A_Q8K);
}

void kn_act_q8a_avx512(void *restrict dst, const float *restrict x, int n) {
    int nb = n / QK;
    int8_t *qs = dst;
    float *d = (float *)((uint8_t *)dst + n), *s = d + nb;
    for (int b = 0; b < nb; b++)
        q8a_block(_mm512_loadu_ps(x + b * QK), _mm512_loadu_ps(x + b * QK + 16), qs + b * QK, d + b,
                  s + b);
}

/* 16 floats -> 16 bf16, round to nearest even, NaN stays (quiet) NaN */
static inline __m256i to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    return _mm512_cvtepi32_epi16(r);
}

void kn_act_bf16_avx512(void *restrict dst, const float *restrict x, int n) {
    kn_bf16 *y = dst;
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        _mm256_mask_storeu_epi16(y + i, k, to_bf16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

/* Convert a row already in registers chunk by chunk: f(i) gives floats
 * i..i+15 (masked past n). Q8A needs n % 32 == 0, as the format does. */
#define ACT_ROW(dst, n, act, F) \
    do { \
        if ((act) == KN_ACT_Q8K || (act) == KN_ACT_Q8A_Q8K) { \
            /* one scale per 256: stage the super-block, then convert it \
             * (the avx2 kernels read these formats here too) */ \
            _Alignas(64) float sb_[QK_K]; \
            for (int b_ = 0; b_ < (n) / QK_K; b_++) { \
                for (int k_ = 0; k_ < QK_K; k_ += 16) { \
                    int i = b_ * QK_K + k_; \
                    _mm512_store_ps(sb_ + k_, F); \
                } \
                act_sb((dst), sb_, (n), b_, (act)); \
            } \
        } else if ((act) == KN_ACT_Q8A) { \
            int nb_ = (n) / QK; \
            int8_t *qs_ = (dst); \
            float *d_ = (float *)((uint8_t *)(dst) + (n)), *s_ = d_ + nb_; \
            for (int b_ = 0; b_ < nb_; b_++) { \
                int i = b_ * QK; \
                __m512 lo_ = F; \
                i += 16; \
                __m512 hi_ = F; \
                q8a_block(lo_, hi_, qs_ + b_ * QK, d_ + b_, s_ + b_); \
            } \
        } else if ((act) == KN_ACT_BF16) { \
            kn_bf16 *y_ = (dst); \
            for (int i = 0; i < (n); i += 16) \
                _mm256_mask_storeu_epi16(y_ + i, tail_mask((n) - i), to_bf16(F)); \
        } else { \
            float *y_ = (dst); \
            for (int i = 0; i < (n); i += 16) _mm512_mask_storeu_ps(y_ + i, tail_mask((n) - i), F); \
        } \
    } while (0)

/* ---------------------------------------------------------------------- */
/* RMSNorm */

/* sum of squares in double, as the reference (different order) */
static double sumsq(const float *x, int n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

static inline float rms_scale(double ss, int n, float eps) {
    return (float)(1.0 / sqrt(ss / n + eps));
}

void kn_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps) {
    __m512 sc = _mm512_set1_ps(rms_scale(sumsq(x, n), n, eps));
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sc),
                                 _mm512_maskz_loadu_ps(k, w + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

void kn_add_rmsnorm_avx512(float *restrict res, const float *restrict delta, float *restrict y,
                           const float *restrict w, int n, float eps) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        _mm512_mask_storeu_ps(res + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, res + i),
                                                        _mm512_maskz_loadu_ps(k, delta + i)));
    }
    kn_rmsnorm_avx512(y, res, w, n, eps);
}

void kn_rmsnorm_act_avx512(void *restrict dst, const float *restrict x, const float *restrict w,
                           int n, float eps, int act) {
    __m512 sc = _mm512_set1_ps(rms_scale(sumsq(x, n), n, eps));
#define RMS_AT(i) \
    _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail_mask(n - (i)), x + (i)), sc), \
                  _mm512_maskz_loadu_ps(tail_mask(n - (i)), w + (i)))
    ACT_ROW(dst, n, act, RMS_AT(i));
#undef RMS_AT
}

/* ---------------------------------------------------------------------- */
/* SiLU */

/* e^x: x = k ln2 + r, |r| <= ln2/2, degree-7 Taylor polynomial (truncation
 * < 1e-8 relative), then vscalefps, which gives inf above ~88.7 and
 * graded underflow below. */
static inline __m512 exp_ps(__m512 x) {
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860682030941723212e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, k);
}

/* g / (1 + e^-z) * u, in the reference's order: SiLU gates with z = g,
 * GELU (the sigmoid form of kernels/ops.h) with
 * z = 2 sqrt(2/pi) (g + 0.044715 g^3) */
static inline __m512 sigmoid_gate16(__m512 g, __m512 z, __m512 u) {
    __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), z));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

static inline __m512 silu_mul16(__m512 g, __m512 u) { return sigmoid_gate16(g, g, u); }

static inline __m512 gelu_mul16(__m512 g, __m512 u) {
    __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
    __m512 z2 = _mm512_mul_ps(_mm512_set1_ps(1.5957691216057308f),
                              _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(0.044715f), g3)));
    return sigmoid_gate16(g, z2, u);
}

/* kn_<name>_mul_avx512 and kn_<name>_mul_act_avx512 (ops.h) from FN16 */
#define GATED_MUL(NAME, FN16) \
    void kn_##NAME##_mul_avx512(float *y, const float *g, const float *u, int n) { \
        for (int i = 0; i < n; i += 16) { \
            __mmask16 k = tail_mask(n - i); \
            _mm512_mask_storeu_ps(y + i, k, FN16(_mm512_maskz_loadu_ps(k, g + i), \
                                                 _mm512_maskz_loadu_ps(k, u + i))); \
        } \
    } \
    void kn_##NAME##_mul_act_avx512(void *restrict dst, const float *restrict g, \
                                    const float *restrict u, int n, int act) { \
        ACT_ROW(dst, n, act, \
                FN16(_mm512_maskz_loadu_ps(tail_mask(n - (i)), g + (i)), \
                     _mm512_maskz_loadu_ps(tail_mask(n - (i)), u + (i)))); \
    }
GATED_MUL(silu, silu_mul16)
GATED_MUL(gelu, gelu_mul16)
#undef GATED_MUL

/* ---------------------------------------------------------------------- */
/* RoPE */

/* sin and cos of theta: k = round(theta * 2/pi), r = theta - k pi/2 with a
 * 3-part pi/2 (FMA), Taylor polynomials on |r| <= pi/4, quadrant from k. */
static inline void sincos_ps(__m512 th, __m512 *s, __m512 *c) {
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(th, _mm512_set1_ps(0.636619772367581343f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.5707963705062866211f), th);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-4.371138828673793e-08f), r);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-1.7151245100058819e-15f), r);
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 ps = _mm512_set1_ps(1.0f / 362880);
    ps = _mm512_fmadd_ps(ps, r2, _mm512_set1_ps(-1.0f / 5040));
    ps = _mm512_fmadd_ps(ps, r2, _mm512_set1_ps(1.0f / 120));
    ps = _mm512_fmadd_ps(ps, r2, _mm512_set1_ps(-1.0f / 6));
    ps = _mm512_fmadd_ps(_mm512_mul_ps(ps, r2), r, r);
    __m512 pc = _mm512_set1_ps(1.0f / 40320);
    pc = _mm512_fmadd_ps(pc, r2, _mm512_set1_ps(-1.0f / 720));
    pc = _mm512_fmadd_ps(pc, r2, _mm512_set1_ps(1.0f / 24));
    pc = _mm512_fmadd_ps(pc, r2, _mm512_set1_ps(-0.5f));
    pc = _mm512_fmadd_ps(pc, r2, _mm512_set1_ps(1.0f));
    __m512i q = _mm512_cvtps_epi32(k);
    __mmask16 swap = _mm512_test_epi32_mask(q, _mm512_set1_epi32(1));
    __mmask16 neg_s = _mm512_test_epi32_mask(q, _mm512_set1_epi32(2));
    __mmask16 neg_c = _mm512_test_epi32_mask(_mm512_add_epi32(q, _mm512_set1_epi32(1)),
                                             _mm512_set1_epi32(2));
    __m512 sv = _mm512_mask_blend_ps(swap, ps, pc), cv = _mm512_mask_blend_ps(swap, pc, ps);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    *s = _mm512_mask_xor_ps(sv, neg_s, sv, sign);
    *c = _mm512_mask_xor_ps(cv, neg_c, cv, sign);
}

enum { ROPE_MAX_HD = 1024 };

void kn_rope_avx512(float *x, int n_head, int head_dim, int pos, const float *inv_freq) {
    if (head_dim > ROPE_MAX_HD || head_dim % 2) {
        kn_rope_ref(x, n_head, head_dim, pos, inv_freq);
        return;
    }
    /* per element j of a head: cc[j] = cos(theta_{j/2}), ss[j] = -/+ sin */
    _Alignas(64) float cc[ROPE_MAX_HD], ss[ROPE_MAX_HD];
    const int half = head_dim / 2;
    const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512 alt = _mm512_setr_ps(-1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1);
    for (int i = 0; i < half; i += 16) {
        __mmask16 k = tail_mask(half - i);
        __m512 th = _mm512_mul_ps(_mm512_set1_ps((float)pos), _mm512_maskz_loadu_ps(k, inv_freq + i));
        __m512 s, c;
        sincos_ps(th, &s, &c);
        /* pairs i..i+7 then i+8..i+15, each value twice */
        __m512 c0 = _mm512_permutexvar_ps(dup, c), s0 = _mm512_permutexvar_ps(dup, s);
        __m512i dup8 = _mm512_add_epi32(dup, _mm512_set1_epi32(8));
        __m512 c1 = _mm512_permutexvar_ps(dup8, c), s1 = _mm512_permutexvar_ps(dup8, s);
        _mm512_mask_storeu_ps(cc + 2 * i, tail_mask(2 * (half - i)), c0);
        _mm512_mask_storeu_ps(ss + 2 * i, tail_mask(2 * (half - i)), _mm512_mul_ps(s0, alt));
        if (half - i > 8) {
            _mm512_mask_storeu_ps(cc + 2 * i + 16, tail_mask(2 * (half - i) - 16), c1);
            _mm512_mask_storeu_ps(ss + 2 * i + 16, tail_mask(2 * (half - i) - 16), _mm512_mul_ps(s1, alt));
        }
    }
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int j = 0; j < head_dim; j += 16) {
            __mmask16 k = tail_mask(head_dim - j);
            __m512 a = _mm512_maskz_loadu_ps(k, v + j);
            __m512 sw = _mm512_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)); /* (b, a) pairs */
            /* (a c - b s, b c + a s), as the reference: two products, one add */
            __m512 r = _mm512_add_ps(_mm512_mul_ps(a, _mm512_maskz_load_ps(k, cc + j)),
                                     _mm512_mul_ps(sw, _mm512_maskz_load_ps(k, ss + j)));
            _mm512_mask_storeu_ps(v + j, k, r);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* tables: with AVX512_BF16 (vdpbf16ps) and without; dispatch.c picks */

#define KN_OPS_AVX512(BF16_MATMUL) \
    { \
        .name = "avx512", \
        .matmul = \
            { \
                [ANVIL_TYPE_F32] = kn_matmul_f32_avx512, \
                [ANVIL_TYPE_F16] = kn_matmul_f16_avx512, \
                [ANVIL_TYPE_BF16] = BF16_MATMUL, \
                [ANVIL_TYPE_Q8_0] = kn_matmul_q8_0_avx512, \
                [ANVIL_TYPE_Q4_0] = kn_matmul_q4_0_avx512, \
                [ANVIL_TYPE_Q4_1] = kn_matmul_q4_1_avx512, \
                /* the avx2 kernels: valid here, tested on AVX2 machines */ \
                [ANVIL_TYPE_Q5_0] = kn_matmul_q5_0_avx2, \
                [ANVIL_TYPE_Q5_1] = kn_matmul_q5_1_avx2, \
                [ANVIL_TYPE_IQ4_NL] = kn_matmul_iq4_nl_avx2, \
                [ANVIL_TYPE_MXFP4] = kn_matmul_mxfp4_avx2, \
                [ANVIL_TYPE_Q2_K] = kn_matmul_q2_k_avx2, \
                [ANVIL_TYPE_Q3_K] = kn_matmul_q3_k_avx2, \
                [ANVIL_TYPE_Q4_K] = kn_matmul_q4_k_avx2, \
                [ANVIL_TYPE_Q5_K] = kn_matmul_q5_k_avx2, \
                [ANVIL_TYPE_Q6_K] = kn_matmul_q6_k_avx2, \
                [ANVIL_TYPE_IQ4_XS] = kn_matmul_iq4_xs_avx2, \
            }, \
        .pack_size = kn_pack_size_avx512, \
        .pack_rows = kn_pack_rows_avx512, \
        .matmul_packed = \
            { \
                [ANVIL_TYPE_Q8_0] = kn_matmul_p_q8_0_avx512, \
                [ANVIL_TYPE_Q4_0] = kn_matmul_p_q4_0_avx512, \
                [ANVIL_TYPE_Q4_1] = kn_matmul_p_q4_1_avx512, \
                [ANVIL_TYPE_Q5_0] = kn_matmul_p_q5_0_avx512, \
                [ANVIL_TYPE_Q5_1] = kn_matmul_p_q5_1_avx512, \
                [ANVIL_TYPE_IQ4_NL] = kn_matmul_p_iq4_nl_avx512, \
                [ANVIL_TYPE_MXFP4] = kn_matmul_p_mxfp4_avx512, \
                [ANVIL_TYPE_Q4_K] = kn_matmul_p_q4_k_avx512, \
                [ANVIL_TYPE_Q5_K] = kn_matmul_p_q5_k_avx512, \
                [ANVIL_TYPE_Q6_K] = kn_matmul_p_q6_k_avx512, \
                [ANVIL_TYPE_IQ4_XS] = kn_matmul_p_iq4_xs_avx512, \
                [ANVIL_TYPE_Q2_K] = kn_matmul_p_q2_k_avx512, \
                [ANVIL_TYPE_Q3_K] = kn_matmul_p_q3_k_avx512, \
            }, \
        .act = \
            { \
                [KN_ACT_F32] = kn_act_f32_ref, \
                [KN_ACT_BF16] = kn_act_bf16_avx512, \
                [KN_ACT_Q8A] = kn_act_q8a_avx512, \
                [KN_ACT_Q8K] = kn_act_q8k_avx512, \
                [KN_ACT_Q8A_Q8K] = kn_act_q8a_q8k_avx512, \
            }, \
        .rmsnorm = kn_rmsnorm_avx512, \
        .add_rmsnorm = kn_add_rmsnorm_avx512, \
        .rmsnorm_act = kn_rmsnorm_act_avx512, \
        .silu_mul = kn_silu_mul_avx512, \
        .silu_mul_act = kn_silu_mul_act_avx512, \
        .rope = kn_rope_avx512, \
        /* the AVX2 twin: written on a machine without AVX-512, where an \
         * AVX-512 version could not be tested (every AVX-512 CPU runs \
         * AVX2 code) */ \
        .rope_ext = kn_rope_ext_avx2, \
        .gelu_mul = kn_gelu_mul_avx512, \
        .gelu_mul_act = kn_gelu_mul_act_avx512, \
        .layernorm = kn_layernorm_avx512, \
        .gelu_erf = kn_gelu_erf_avx512, \
        .f16_row = kn_f16_row_avx2, \
        .int8_peak = kn_int8_peak_avx512, \
        .f32_peak = kn_f32_peak_avx512, \
    }

const struct kn_ops kn_ops_avx512 = KN_OPS_AVX512(kn_matmul_bf16_avx512);
const struct kn_ops kn_ops_avx512_nobf16 = KN_OPS_AVX512(kn_matmul_bf16f_avx512);
