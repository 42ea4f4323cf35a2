/*
 * ops.c (avx2) - element-wise and row ops (activation conversions,
 * RMSNorm plain / with the residual add / fused with the activation
 * conversion, SiLU*mul plain / fused, RoPE) and the avx2 kernel table.
 * The specification is cpu/ref/ops.c; the AVX-512 twin is cpu/avx512/ops.c
 * and the numerics are the same as there:
 *   - Q8A, Q8K and BF16 conversions are bit-exact with the reference,
 *     NaN, infinite and subnormal-scale blocks included;
 *   - RMSNorm sums squares in double (another order than the reference),
 *     then y = (x * scale) * w as the reference does;
 *   - silu uses its own exp (~2 ulp), RoPE its own sin/cos (~1e-7 abs.).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/avx2/avx2.h"
#include "kernels/cpu/ref/ref.h"

/* lanes [0, left) of 8 */
static inline __m256i lane_mask(int left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m256 load_tail(const float *p, int left) {
    return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(left));
}
static inline void store_tail(float *p, int left, __m256 v) {
    if (left >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, lane_mask(left), v);
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
static inline int hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm_cvtsi128_si32(s);
}

/* ---------------------------------------------------------------------- */
/* activation conversions */

/* round-to-even(clamp(v, -127, 127)), NaN lanes 0: the reference's q8_round.
 * Without the clamp, a subnormal amax (id = inf) or an infinite input
 * converts to INT_MIN and packs to -128, which the Q8_0 sign trick
 * (|w| * sign(a, w)) then multiplies with the wrong sign. */
static inline __m256i q8_round8(__m256 v) {
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> +0 */
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    return _mm256_cvtps_epi32(v);
}

/* One block of 32 floats v[0..3] -> Q8A qs[32], *d, *s (blocks.h). */
static inline void q8a_block(const __m256 v[4], int8_t *qs, float *d, float *s) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    /* the running max second: vmaxps returns it when the new value is NaN,
     * so NaN lanes are skipped as fmaxf skips them */
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_setzero_ps());
    for (int k = 1; k < 4; k++) m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);
    float amax = hmax8(m);
    float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
    __m256 vid = _mm256_set1_ps(id);
    __m256i q0 = q8_round8(_mm256_mul_ps(v[0], vid));
    __m256i q1 = q8_round8(_mm256_mul_ps(v[1], vid));
    __m256i q2 = q8_round8(_mm256_mul_ps(v[2], vid));
    __m256i q3 = q8_round8(_mm256_mul_ps(v[3], vid));
    __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3));
    /* |q| <= 127: the saturating packs are exact; fix their lane order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
    *d = db;
    *s = db * (float)hsum8i(sum);
}

void kn_act_q8a_avx2(void *restrict dst, const float *restrict x, int n) {
    int nb = n / QK;
    int8_t *qs = dst;
    float *d = (float *)((uint8_t *)dst + n), *s = d + nb;
    for (int b = 0; b < nb; b++) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + b * QK + 8 * k);
        q8a_block(v, qs + b * QK, d + b, s + b);
    }
}

/* One Q8K super-block: 256 floats at x -> qs[256], *d, bs[16] (blocks.h).
 * Same operations as kn_act_block_ref: amax ignores NaN lanes (fmaxf does:
 * vmaxps returns its second operand when either is NaN, so the running max
 * goes second), q = round-to-even(clamp(x * id)) with NaN lanes 0. */
static void q8k_block(const float *x, int8_t *qs, float *d, int16_t *bs) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), m);
    float amax = hmax8(m);
    float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    for (int k = 0; k < QK_K; k += 32) {
        __m256i q[4];
        for (int j = 0; j < 4; j++) q[j] = q8_round8(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vid));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + k), p);
        /* sums of 8 bytes per 64-bit lane of (q + 128), then of 16 */
        __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(p, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
        int64_t l[4];
        _mm256_storeu_si256((__m256i *)l, sad);
        bs[k / 16] = (int16_t)(l[0] + l[1] - 16 * 128);
        bs[k / 16 + 1] = (int16_t)(l[2] + l[3] - 16 * 128);
    }
    *d = db;
}

void kn_act_sb_avx2(void *restrict dst, const float *restrict x, int n, int b, int act) {
    if (act == KN_ACT_Q8A_Q8K) {
        int nb = n / QK;
        int8_t *qs = dst;
        float *d = (float *)((uint8_t *)dst + n), *s = d + nb;
        for (int j = 0; j < QK_K / QK; j++) {
            int blk = b * (QK_K / QK) + j;
            __m256 v[4];
            for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + j * QK + 8 * k);
            q8a_block(v, qs + blk * QK, d + blk, s + blk);
        }
        dst = (uint8_t *)dst + kn_act_part_offset(act, KN_ACT_Q8K, n);
    }
    int8_t *qs = dst;
    float *d = (float *)((uint8_t *)dst + n);
    int16_t *bs = (int16_t *)(d + n / QK_K);
    q8k_block(x, qs + (size_t)b * QK_K, d + b, bs + b * (QK_K / 16));
}

void kn_act_q8k_avx2(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK_K; b++) kn_act_sb_avx2(dst, x + (size_t)b * QK_K, n, b, KN_ACT_Q8K);
}

void kn_act_q8a_q8k_avx2(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK_K; b++) kn_act_sb_avx2(dst, x + (size_t)b * QK_K, n, b, KN_ACT_Q8A_Q8K);
}

/* 8 floats -> 8 bf16, round to nearest even, NaN stays (quiet) NaN */
static inline __m128i to_bf16(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    r = _mm256_blendv_epi8(r, qn, nan);
    r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm256_castsi256_si128(r);
}

static inline void store_bf16(kn_bf16 *y, int left, __m256 v) {
    __m128i h = to_bf16(v);
    if (left >= 8) {
        _mm_storeu_si128((__m128i *)y, h);
    } else {
        uint16_t buf[8];
        _mm_storeu_si128((__m128i *)buf, h);
        for (int j = 0; j < left; j++) y[j] = buf[j];
    }
}

void kn_act_bf16_avx2(void *restrict dst, const float *restrict x, int n) {
    kn_bf16 *y = dst;
    for (int i = 0; i < n; i += 8) store_bf16(y + i, n - i, load_tail(x + i, n - i));
}

/* Convert a row chunk by chunk: F gives floats i..i+7 (zero past n). The
 * Q8K formats stage each super-block's 256 floats first (one scale per
 * 256). */
#define ACT_ROW(dst, n, act, F) \
    do { \
        if ((act) == KN_ACT_Q8K || (act) == KN_ACT_Q8A_Q8K) { \
            _Alignas(32) float sb_[QK_K]; \
            for (int b_ = 0; b_ < (n) / QK_K; b_++) { \
                for (int k_ = 0; k_ < QK_K; k_ += 8) { \
                    int i = b_ * QK_K + k_; \
                    _mm256_store_ps(sb_ + k_, F); \
                } \
                kn_act_sb_avx2((dst), sb_, (n), b_, (act)); \
            } \
        } else if ((act) == KN_ACT_Q8A) { \
            int nb_ = (n) / QK; \
            int8_t *qs_ = (dst); \
            float *d_ = (float *)((uint8_t *)(dst) + (n)), *s_ = d_ + nb_; \
            for (int b_ = 0; b_ < nb_; b_++) { \
                __m256 v_[4]; \
                for (int k_ = 0; k_ < 4; k_++) { \
                    int i = b_ * QK + 8 * k_; \
                    v_[k_] = F; \
                } \
                q8a_block(v_, qs_ + b_ * QK, d_ + b_, s_ + b_); \
            } \
        } else if ((act) == KN_ACT_BF16) { \
            kn_bf16 *y_ = (dst); \
            for (int i = 0; i < (n); i += 8) store_bf16(y_ + i, (n) - i, F); \
        } else { \
            float *y_ = (dst); \
            for (int i = 0; i < (n); i += 8) store_tail(y_ + i, (n) - i, F); \
        } \
    } while (0)

/* ---------------------------------------------------------------------- */
/* RMSNorm */

static double sumsq(const float *x, int n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    for (int i = 0; i < n; i += 8) {
        __m256 v = load_tail(x + i, n - i);
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    __m256d a = _mm256_add_pd(a0, a1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

static inline float rms_scale(double ss, int n, float eps) {
    return (float)(1.0 / sqrt(ss / n + eps));
}

void kn_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps) {
    __m256 sc = _mm256_set1_ps(rms_scale(sumsq(x, n), n, eps));
    for (int i = 0; i < n; i += 8)
        store_tail(y + i, n - i,
                   _mm256_mul_ps(_mm256_mul_ps(load_tail(x + i, n - i), sc), load_tail(w + i, n - i)));
}

void kn_add_rmsnorm_avx2(float *restrict res, const float *restrict delta, float *restrict y,
                         const float *restrict w, int n, float eps) {
    for (int i = 0; i < n; i += 8)
        store_tail(res + i, n - i, _mm256_add_ps(load_tail(res + i, n - i), load_tail(delta + i, n - i)));
    kn_rmsnorm_avx2(y, res, w, n, eps);
}

void kn_rmsnorm_act_avx2(void *restrict dst, const float *restrict x, const float *restrict w,
                         int n, float eps, int act) {
    __m256 sc = _mm256_set1_ps(rms_scale(sumsq(x, n), n, eps));
#define RMS_AT(i) _mm256_mul_ps(_mm256_mul_ps(load_tail(x + (i), n - (i)), sc), load_tail(w + (i), n - (i)))
    ACT_ROW(dst, n, act, RMS_AT(i));
#undef RMS_AT
}

/* ---------------------------------------------------------------------- */
/* SiLU */

/* 2^k for integer-valued float k in [-126, 127] */
static inline __m256 pow2i(__m256 k) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
}

/* e^x as in the avx512 twin; without vscalefps, 2^k is applied in two
 * halves so that overflow gives inf and underflow grades to 0 (x is first
 * clamped to +-170, where e^x is already inf / 0 in float). */
static inline __m256 exp_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-170.0f)), _mm256_set1_ps(170.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.42860682030941723212e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256 k1 = _mm256_round_ps(_mm256_mul_ps(k, _mm256_set1_ps(0.5f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 k2 = _mm256_sub_ps(k, k1);
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(k1)), pow2i(k2));
}

static inline __m256 silu_mul8(__m256 g, __m256 u) {
    __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void kn_silu_mul_avx2(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i += 8)
        store_tail(y + i, n - i, silu_mul8(load_tail(g + i, n - i), load_tail(u + i, n - i)));
}

void kn_silu_mul_act_avx2(void *restrict dst, const float *restrict g, const float *restrict u,
                          int n, int act) {
#define SILU_AT(i) silu_mul8(load_tail(g + (i), n - (i)), load_tail(u + (i), n - (i)))
    ACT_ROW(dst, n, act, SILU_AT(i));
#undef SILU_AT
}

/* gelu(g) * u in the sigmoid form of kernels/ops.h, the reference's order */
static inline __m256 gelu_mul8(__m256 g, __m256 u) {
    __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    __m256 z2 = _mm256_mul_ps(_mm256_set1_ps(1.5957691216057308f),
                              _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(0.044715f), g3)));
    __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), z2));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void kn_gelu_mul_avx2(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i += 8)
        store_tail(y + i, n - i, gelu_mul8(load_tail(g + i, n - i), load_tail(u + i, n - i)));
}

void kn_gelu_mul_act_avx2(void *restrict dst, const float *restrict g, const float *restrict u,
                          int n, int act) {
#define GELU_AT(i) gelu_mul8(load_tail(g + (i), n - (i)), load_tail(u + (i), n - (i)))
    ACT_ROW(dst, n, act, GELU_AT(i));
#undef GELU_AT
}

/* ---------------------------------------------------------------------- */
/* RoPE */

static inline void sincos_ps(__m256 th, __m256 *s, __m256 *c) {
    __m256 k = _mm256_round_ps(_mm256_mul_ps(th, _mm256_set1_ps(0.636619772367581343f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.5707963705062866f), th);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-4.371138828673793e-08f), r);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-1.7151245100058819e-15f), r);
    __m256 r2 = _mm256_mul_ps(r, r);
    __m256 ps = _mm256_set1_ps(1.0f / 362880);
    ps = _mm256_fmadd_ps(ps, r2, _mm256_set1_ps(-1.0f / 5040));
    ps = _mm256_fmadd_ps(ps, r2, _mm256_set1_ps(1.0f / 120));
    ps = _mm256_fmadd_ps(ps, r2, _mm256_set1_ps(-1.0f / 6));
    ps = _mm256_fmadd_ps(_mm256_mul_ps(ps, r2), r, r);
    __m256 pc = _mm256_set1_ps(1.0f / 40320);
    pc = _mm256_fmadd_ps(pc, r2, _mm256_set1_ps(-1.0f / 720));
    pc = _mm256_fmadd_ps(pc, r2, _mm256_set1_ps(1.0f / 24));
    pc = _mm256_fmadd_ps(pc, r2, _mm256_set1_ps(-0.5f));
    pc = _mm256_fmadd_ps(pc, r2, _mm256_set1_ps(1.0f));
    __m256i q = _mm256_cvtps_epi32(k);
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    __m256 swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(q, one), one));
    __m256i neg_s = _mm256_slli_epi32(_mm256_and_si256(q, two), 30);
    __m256i neg_c = _mm256_slli_epi32(_mm256_and_si256(_mm256_add_epi32(q, one), two), 30);
    __m256 sv = _mm256_blendv_ps(ps, pc, swap), cv = _mm256_blendv_ps(pc, ps, swap);
    *s = _mm256_xor_ps(sv, _mm256_castsi256_ps(neg_s));
    *c = _mm256_xor_ps(cv, _mm256_castsi256_ps(neg_c));
}

enum { ROPE_MAX_HD = 1024 };

void kn_rope_avx2(float *x, int n_head, int head_dim, int pos, const float *inv_freq) {
    if (head_dim > ROPE_MAX_HD || head_dim % 2) {
        kn_rope_ref(x, n_head, head_dim, pos, inv_freq);
        return;
    }
    /* per element j of a head: cc[j] = cos(theta_{j/2}), ss[j] = -/+ sin */
    _Alignas(32) float cc[ROPE_MAX_HD + 8], ss[ROPE_MAX_HD + 8];
    _Alignas(32) float c8[8], s8[8];
    const int half = head_dim / 2;
    for (int i = 0; i < half; i += 8) {
        __m256 th = _mm256_mul_ps(_mm256_set1_ps((float)pos), load_tail(inv_freq + i, half - i));
        __m256 s, c;
        sincos_ps(th, &s, &c);
        _mm256_store_ps(c8, c);
        _mm256_store_ps(s8, s);
        for (int j = 0; j < 8 && i + j < half; j++) {
            cc[2 * (i + j)] = cc[2 * (i + j) + 1] = c8[j];
            ss[2 * (i + j)] = -s8[j];
            ss[2 * (i + j) + 1] = s8[j];
        }
    }
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        int j = 0;
        for (; j + 8 <= head_dim; j += 8) {
            __m256 a = _mm256_loadu_ps(v + j);
            __m256 sw = _mm256_permute_ps(a, _MM_SHUFFLE(2, 3, 0, 1)); /* (b, a) pairs */
            __m256 r = _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(cc + j)),
                                     _mm256_mul_ps(sw, _mm256_loadu_ps(ss + j)));
            _mm256_storeu_ps(v + j, r);
        }
        for (; j < head_dim; j += 2) { /* same arithmetic, one pair */
            float a = v[j], b = v[j + 1];
            v[j] = a * cc[j] + b * ss[j];
            v[j + 1] = b * cc[j + 1] + a * ss[j + 1];
        }
    }
}

/* Partial / NeoX RoPE: the angles of 8 pairs at a time with sincos_ps, then
 * the same per-pair arithmetic as the reference (a*c - b*s, a*s + b*c). */
void kn_rope_ext_avx2(float *x, int n_head, int head_dim, int n_rot, int pos,
                      const float *inv_freq, int neox) {
    if (!neox && n_rot == head_dim) {
        kn_rope_avx2(x, n_head, head_dim, pos, inv_freq);
        return;
    }
    if (n_rot > ROPE_MAX_HD || n_rot % 2) {
        kn_rope_ext_ref(x, n_head, head_dim, n_rot, pos, inv_freq, neox);
        return;
    }
    const int half = n_rot / 2;
    _Alignas(32) float cs[ROPE_MAX_HD / 2 + 8], sn[ROPE_MAX_HD / 2 + 8];
    for (int i = 0; i < half; i += 8) {
        __m256 th = _mm256_mul_ps(_mm256_set1_ps((float)pos), load_tail(inv_freq + i, half - i));
        __m256 s, c;
        sincos_ps(th, &s, &c);
        _mm256_store_ps(cs + i, c);
        _mm256_store_ps(sn + i, s);
    }
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        if (neox) {
            int i = 0;
            for (; i + 8 <= half; i += 8) {
                __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
                __m256 c = _mm256_load_ps(cs + i), s = _mm256_load_ps(sn + i);
                _mm256_storeu_ps(v + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
                _mm256_storeu_ps(v + half + i, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
            }
            for (; i < half; i++) {
                float a = v[i], b = v[half + i];
                v[i] = a * cs[i] - b * sn[i];
                v[half + i] = a * sn[i] + b * cs[i];
            }
        } else {
            for (int i = 0; i < half; i++) {
                float a = v[2 * i], b = v[2 * i + 1];
                v[2 * i] = a * cs[i] - b * sn[i];
                v[2 * i + 1] = a * sn[i] + b * cs[i];
            }
        }
    }
}

/* ---------------------------------------------------------------------- */

/* F16C's conversion rounds to nearest even like kn_f32_to_f16, and turns
 * NaN into the same quiet NaN; MXCSR's FTZ/DAZ do not apply to it. */
void kn_f16_row_avx2(kn_f16 *dst, size_t stride, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (stride == 1) {
            _mm_storeu_si128((__m128i *)(dst + i), h);
        } else {
            uint16_t b[8];
            _mm_storeu_si128((__m128i *)b, h);
            for (int j = 0; j < 8; j++) dst[(size_t)(i + j) * stride] = b[j];
        }
    }
    for (; i < n; i++) dst[(size_t)i * stride] = kn_f32_to_f16(x[i]);
}

const struct kn_ops kn_ops_avx2 = {
    .name = "avx2",
    .matmul =
        {
            [ANVIL_TYPE_F32] = kn_matmul_f32_avx2,
            [ANVIL_TYPE_F16] = kn_matmul_f16_avx2,
            [ANVIL_TYPE_BF16] = kn_matmul_bf16_avx2,
            [ANVIL_TYPE_Q8_0] = kn_matmul_q8_0_avx2,
            [ANVIL_TYPE_Q4_0] = kn_matmul_q4_0_avx2,
            [ANVIL_TYPE_Q4_1] = kn_matmul_q4_1_avx2,
            [ANVIL_TYPE_Q5_0] = kn_matmul_q5_0_avx2,
            [ANVIL_TYPE_Q5_1] = kn_matmul_q5_1_avx2,
            [ANVIL_TYPE_IQ4_NL] = kn_matmul_iq4_nl_avx2,
            [ANVIL_TYPE_MXFP4] = kn_matmul_mxfp4_avx2,
            [ANVIL_TYPE_Q2_K] = kn_matmul_q2_k_avx2,
            [ANVIL_TYPE_Q3_K] = kn_matmul_q3_k_avx2,
            [ANVIL_TYPE_Q4_K] = kn_matmul_q4_k_avx2,
            [ANVIL_TYPE_Q5_K] = kn_matmul_q5_k_avx2,
            [ANVIL_TYPE_Q6_K] = kn_matmul_q6_k_avx2,
            [ANVIL_TYPE_IQ4_XS] = kn_matmul_iq4_xs_avx2,
        },
    .act =
        {
            [KN_ACT_F32] = kn_act_f32_ref,
            [KN_ACT_BF16] = kn_act_bf16_avx2,
            [KN_ACT_Q8A] = kn_act_q8a_avx2,
            [KN_ACT_Q8K] = kn_act_q8k_avx2,
            [KN_ACT_Q8A_Q8K] = kn_act_q8a_q8k_avx2,
        },
    .rmsnorm = kn_rmsnorm_avx2,
    .add_rmsnorm = kn_add_rmsnorm_avx2,
    .rmsnorm_act = kn_rmsnorm_act_avx2,
    .silu_mul = kn_silu_mul_avx2,
    .silu_mul_act = kn_silu_mul_act_avx2,
    .rope = kn_rope_avx2,
    .rope_ext = kn_rope_ext_avx2,
    .gelu_mul = kn_gelu_mul_avx2,
    .gelu_mul_act = kn_gelu_mul_act_avx2,
    .layernorm = kn_layernorm_avx2,
    .gelu_erf = kn_gelu_erf_avx2,
    .f16_row = kn_f16_row_avx2,
    .int8_peak = kn_int8_peak_avx2,
    .f32_peak = kn_f32_peak_avx2,
};
