/*
 * matmul.c (ref) - the specification of every matmul and activation
 * conversion: plain loops, no intrinsics.
 *
 * Quantized weights (Q4_0, Q4_1, Q8_0) take Q8A activations; each block's
 * dot product is an exact integer sum, scaled and accumulated in float in
 * block order:
 *   Q8_0: acc += dw * da * sum(qw * qa)
 *   Q4_0: acc += dw * (da * sum(qw * qa) - 8 * sa)        qw in 0..15
 *   Q4_1: acc += dw * da * sum(qw * qa) + mw * sa          qw in 0..15
 * where sa = da * sum(qa) is stored with the activation block.
 */
#include <math.h>

#include "kernels/cpu/ref/ref.h"

/* ---------------------------------------------------------------------- */
/* activation conversion */

/* Block b (elements [32b, 32b + k), k <= 32, k == 32 for Q8A) of an
 * activation row of n elements, from the k floats at x. The whole-row
 * conversions below are this, block by block; the fused norm/SiLU ops use
 * it to convert as they go, with no row-sized temporary. */
void kn_act_block_ref(void *restrict dst, const float *restrict x, int n, int b, int k, int act) {
    if (act == KN_ACT_Q8A) {
        int nb = n / QK;
        int8_t *qs = (int8_t *)dst + (size_t)b * QK;
        float *d = (float *)((uint8_t *)dst + n);
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            /* |v| <= 127 for finite inputs, except that a subnormal amax
             * makes id infinite, and a NaN or infinite input makes v NaN:
             * converting those to int is undefined in C, so v is clamped
             * and NaN lanes quantize to 0 */
            float v = x[j] * id;
            int q = isnan(v) ? 0 : (int)nearbyintf(fminf(fmaxf(v, -127.0f), 127.0f));
            qs[j] = (int8_t)q;
            sum += q;
        }
        d[b] = db;
        d[nb + b] = db * (float)sum;
    } else if (act == KN_ACT_BF16) {
        for (int j = 0; j < k; j++) ((kn_bf16 *)dst)[(size_t)b * QK + j] = kn_f32_to_bf16(x[j]);
    } else {
        memcpy((float *)dst + (size_t)b * QK, x, (size_t)k * sizeof(float));
    }
}

void kn_act_q8a_ref(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK; b++) kn_act_block_ref(dst, x + (size_t)b * QK, n, b, QK, KN_ACT_Q8A);
}

void kn_act_bf16_ref(void *restrict dst, const float *restrict x, int n) {
    kn_bf16 *y = dst;
    for (int i = 0; i < n; i++) y[i] = kn_f32_to_bf16(x[i]);
}

void kn_act_f32_ref(void *restrict dst, const float *restrict x, int n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}

/* ---------------------------------------------------------------------- */
/* one dot product per weight type */

static float dot_q8_0(const struct blk_q8_0 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < QK; j++) isum += w[b].qs[j] * qa[b * QK + j];
        acc += kn_f16_to_f32(w[b].d) * da[b] * (float)isum;
    }
    return acc;
}

static float dot_q4_0(const struct blk_q4_0 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    const float *sa = da + nb;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < QK / 2; j++) {
            isum += (w[b].qs[j] & 0x0f) * qa[b * QK + j];
            isum += (w[b].qs[j] >> 4) * qa[b * QK + QK / 2 + j];
        }
        acc += kn_f16_to_f32(w[b].d) * (da[b] * (float)isum - 8.0f * sa[b]);
    }
    return acc;
}

static float dot_q4_1(const struct blk_q4_1 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    const float *sa = da + nb;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < QK / 2; j++) {
            isum += (w[b].qs[j] & 0x0f) * qa[b * QK + j];
            isum += (w[b].qs[j] >> 4) * qa[b * QK + QK / 2 + j];
        }
        acc += kn_f16_to_f32(w[b].d) * da[b] * (float)isum + kn_f16_to_f32(w[b].m) * sa[b];
    }
    return acc;
}

static float dot_f16(const kn_f16 *w, const float *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += kn_f16_to_f32(w[i]) * x[i];
    return acc;
}

static float dot_bf16(const kn_bf16 *w, const kn_bf16 *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += kn_bf16_to_f32(w[i]) * kn_bf16_to_f32(x[i]);
    return acc;
}

static float dot_f32(const float *w, const float *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += w[i] * x[i];
    return acc;
}

/* ---------------------------------------------------------------------- */
/* matmuls: one dot per (token, row) */

#define DEFINE_MATMUL(NAME, DOT, WT, XT) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        for (int t = 0; t < n_tokens; t++) { \
            const XT *xt = (const XT *)((const uint8_t *)x + (size_t)t * x_stride); \
            for (int r = r0; r < r1; r++) { \
                const WT *wr = (const WT *)((const uint8_t *)w + (size_t)r * w_stride); \
                y[(size_t)t * ldy + r] = DOT(wr, xt, n); \
            } \
        } \
    }

DEFINE_MATMUL(kn_matmul_q8_0_ref, dot_q8_0, struct blk_q8_0, uint8_t)
DEFINE_MATMUL(kn_matmul_q4_0_ref, dot_q4_0, struct blk_q4_0, uint8_t)
DEFINE_MATMUL(kn_matmul_q4_1_ref, dot_q4_1, struct blk_q4_1, uint8_t)
DEFINE_MATMUL(kn_matmul_f16_ref, dot_f16, kn_f16, float)
DEFINE_MATMUL(kn_matmul_bf16_ref, dot_bf16, kn_bf16, kn_bf16)
DEFINE_MATMUL(kn_matmul_f32_ref, dot_f32, float, float)
