/*
 * enc.c (avx512) - the encoder ops of kernels/ops.h, 16 lanes: LayerNorm
 * with bias (the corrected two-pass variance in float: the mean, then the
 * sums of the centred row and of its squares), and the erf GELU.
 *
 * erf: Abramowitz and Stegun 7.1.28, erf(t) = 1 - (1 + a1 t + ... +
 * a6 t^6)^-16 for t >= 0, |error| <= 3e-7, odd in t. It needs no exp, so
 * the whole GELU is one polynomial, four squarings and a division; the
 * GELU's absolute error is then at most 1.5e-7 |x| (plus float rounding),
 * which tests/unit_kernels.c bounds against erff. t is clamped to 10,
 * where the power is 1e40-ish: still finite, and its inverse is 0.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/avx512/avx512.h"

static inline __mmask16 tail16(int left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

void kn_layernorm_avx512(float *y, const float *x, const float *w, const float *b, int n,
                         float eps) {
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(tail16(n - i), x + i));
    float mean = _mm512_reduce_add_ps(s) / (float)n;
    __m512 m = _mm512_set1_ps(mean), sd = _mm512_setzero_ps(), ss = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail16(n - i);
        __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + i), m);
        sd = _mm512_add_ps(sd, d);
        ss = _mm512_fmadd_ps(d, d, ss);
    }
    /* corrected two-pass: the first mean's rounding (large when the row
     * sits far from 0) is taken out of the mean and the variance */
    float c = _mm512_reduce_add_ps(sd) / (float)n;
    float var = _mm512_reduce_add_ps(ss) / (float)n - c * c;
    m = _mm512_set1_ps(mean + c);
    __m512 inv = _mm512_set1_ps(1.0f / sqrtf(var + eps));
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail16(n - i);
        __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), m), inv);
        __m512 r = _mm512_fmadd_ps(d, _mm512_maskz_loadu_ps(k, w + i), _mm512_maskz_loadu_ps(k, b + i));
        _mm512_mask_storeu_ps(y + i, k, r);
    }
}

static inline __m512 gelu_erf16(__m512 x) {
    __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
    __m512 t = _mm512_min_ps(_mm512_abs_ps(z), _mm512_set1_ps(10.0f));
    __m512 p = _mm512_set1_ps(0.0000430638f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.0002765672f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.0001520143f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.0092705272f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.0422820123f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.0705230784f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.0f));
    p = _mm512_mul_ps(p, p); /* ^2 */
    p = _mm512_mul_ps(p, p); /* ^4 */
    p = _mm512_mul_ps(p, p); /* ^8 */
    p = _mm512_mul_ps(p, p); /* ^16 */
    __m512 q = _mm512_div_ps(_mm512_set1_ps(1.0f), p); /* 1 - erf(|z|) */
    /* 1 + erf(z): 2 - q for z >= 0, q for z < 0 (no cancellation there) */
    __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 one_p = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), q), q);
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), one_p);
}

void kn_gelu_erf_avx512(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail16(n - i);
        _mm512_mask_storeu_ps(y + i, k, gelu_erf16(_mm512_maskz_loadu_ps(k, x + i)));
    }
}
