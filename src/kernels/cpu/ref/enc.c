/*
 * enc.c (ref) - the row ops only encoders use (model/encoder.c): LayerNorm
 * with a bias, and the exact (erf) GELU of BERT's FFN. Plain loops; the
 * norm accumulates in double, the GELU calls libm's erff. The AVX2 and
 * AVX-512 variants (their enc.c) are checked against these in
 * tests/unit_kernels.c.
 *
 * Reference: Ba et al. 2016 (layer normalization); Hendrycks and Gimpel
 * 2016 (GELU, its erf form, as BERT's "gelu" activation computes it).
 */
#include <math.h>

#include "kernels/cpu/ref/ref.h"

void kn_layernorm_ref(float *y, const float *x, const float *w, const float *b, int n, float eps) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    double mean = s / n, ss = 0.0;
    for (int i = 0; i < n; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = (float)(((double)x[i] - mean) * inv * w[i] + b[i]);
}

void kn_gelu_erf_ref(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}
