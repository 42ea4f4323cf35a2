/*
 * enc.c (avx2) - the encoder ops of kernels/ops.h, 8 lanes, the same
 * arithmetic as the AVX-512 twin (avx512/enc.c, which explains the erf
 * approximation); a row's last n % 8 elements go through a masked load
 * and store.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/avx2/avx2.h"

static inline __m256i tail8(int left) {
    int k = left >= 8 ? 8 : left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void kn_layernorm_avx2(float *y, const float *x, const float *w, const float *b, int n, float eps) {
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) s = _mm256_add_ps(s, _mm256_maskload_ps(x + i, tail8(n - i)));
    float mean = hsum8(s) / (float)n;
    __m256 m = _mm256_set1_ps(mean), sd = _mm256_setzero_ps(), ss = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256i k = tail8(n - i);
        __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), m), _mm256_castsi256_ps(k));
        sd = _mm256_add_ps(sd, d);
        ss = _mm256_fmadd_ps(d, d, ss);
    }
    /* corrected two-pass, as avx512/enc.c */
    float c = hsum8(sd) / (float)n;
    float var = hsum8(ss) / (float)n - c * c;
    m = _mm256_set1_ps(mean + c);
    __m256 inv = _mm256_set1_ps(1.0f / sqrtf(var + eps));
    for (int i = 0; i < n; i += 8) {
        __m256i k = tail8(n - i);
        __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), m), inv);
        __m256 r = _mm256_fmadd_ps(d, _mm256_maskload_ps(w + i, k), _mm256_maskload_ps(b + i, k));
        _mm256_maskstore_ps(y + i, k, r);
    }
}

static inline __m256 gelu_erf8(__m256 x) {
    __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
    __m256 t = _mm256_min_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), z), _mm256_set1_ps(10.0f));
    __m256 p = _mm256_set1_ps(0.0000430638f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.0002765672f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.0001520143f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.0092705272f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.0422820123f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.0705230784f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.0f));
    p = _mm256_mul_ps(p, p);
    p = _mm256_mul_ps(p, p);
    p = _mm256_mul_ps(p, p);
    p = _mm256_mul_ps(p, p);
    __m256 q = _mm256_div_ps(_mm256_set1_ps(1.0f), p);
    __m256 neg = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 one_p = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), q), q, neg);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), one_p);
}

void kn_gelu_erf_avx2(float *y, const float *x, int n) {
    for (int i = 0; i < n; i += 8) {
        __m256i k = tail8(n - i);
        _mm256_maskstore_ps(y + i, k, gelu_erf8(_mm256_maskload_ps(x + i, k)));
    }
}
