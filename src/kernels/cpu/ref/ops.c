/*
 * ops.c (ref) - element-wise and row ops: RMSNorm (plain, fused with the
 * residual add, fused with activation quantization), SiLU*mul, RoPE.
 * Norms accumulate in double for clarity; variants use float and are
 * checked against these within tolerance.
 */
#include <math.h>

#include "kernels/cpu/ref/ref.h"

void kn_rmsnorm_ref(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

void kn_add_rmsnorm_ref(float *restrict res, const float *restrict delta, float *restrict y,
                        const float *restrict w, int n, float eps) {
    for (int i = 0; i < n; i++) res[i] += delta[i];
    kn_rmsnorm_ref(y, res, w, n, eps);
}

/* rmsnorm then the activation conversion, block by block: element for
 * element the same arithmetic as kn_rmsnorm_ref followed by kn_act_*_ref,
 * with no row-sized temporary (any n). */
void kn_rmsnorm_act_ref(void *restrict dst, const float *restrict x, const float *restrict w,
                        int n, float eps, int act) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    float blk[QK_K];
    int L = kn_act_block_len(act);
    for (int b = 0; b * L < n; b++) {
        int k = n - b * L < L ? n - b * L : L;
        for (int j = 0; j < k; j++) blk[j] = x[b * L + j] * scale * w[b * L + j];
        kn_act_block_ref(dst, blk, n, b, k, act);
    }
}

void kn_silu_mul_ref(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

/* silu_mul then the activation conversion, block by block (any n). */
void kn_silu_mul_act_ref(void *restrict dst, const float *restrict g, const float *restrict u,
                         int n, int act) {
    float blk[QK_K];
    int L = kn_act_block_len(act);
    for (int b = 0; b * L < n; b++) {
        int k = n - b * L < L ? n - b * L : L;
        kn_silu_mul_ref(blk, g + (size_t)b * L, u + (size_t)b * L, k);
        kn_act_block_ref(dst, blk, n, b, k, act);
    }
}

void kn_rope_ref(float *x, int n_head, int head_dim, int pos, const float *inv_freq) {
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < head_dim / 2; i++) {
            float theta = (float)pos * inv_freq[i];
            float c = cosf(theta), s = sinf(theta);
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
        }
    }
}

void kn_rope_ext_ref(float *x, int n_head, int head_dim, int n_rot, int pos,
                     const float *inv_freq, int neox) {
    int half = n_rot / 2;
    for (int h = 0; h < n_head; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float theta = (float)pos * inv_freq[i];
            float c = cosf(theta), s = sinf(theta);
            int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            float a = v[i0], b = v[i1];
            v[i0] = a * c - b * s;
            v[i1] = a * s + b * c;
        }
    }
}

/* 2z of the tanh approximation, z = sqrt(2/pi) * (g + 0.044715 g^3) */
static inline float gelu_2z(float g) { return 1.5957691216057308f * (g + 0.044715f * g * g * g); }

void kn_gelu_mul_ref(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-gelu_2z(v))) * u[i];
    }
}

/* gelu_mul then the activation conversion, block by block (any n). */
void kn_gelu_mul_act_ref(void *restrict dst, const float *restrict g, const float *restrict u,
                         int n, int act) {
    float blk[QK_K];
    int L = kn_act_block_len(act);
    for (int b = 0; b * L < n; b++) {
        int k = n - b * L < L ? n - b * L : L;
        kn_gelu_mul_ref(blk, g + (size_t)b * L, u + (size_t)b * L, k);
        kn_act_block_ref(dst, blk, n, b, k, act);
    }
}

const struct kn_ops kn_ops_ref = {
    .name = "ref",
    .matmul =
        {
            [ANVIL_TYPE_F32] = kn_matmul_f32_ref,
            [ANVIL_TYPE_F16] = kn_matmul_f16_ref,
            [ANVIL_TYPE_BF16] = kn_matmul_bf16_ref,
            [ANVIL_TYPE_Q8_0] = kn_matmul_q8_0_ref,
            [ANVIL_TYPE_Q4_0] = kn_matmul_q4_0_ref,
            [ANVIL_TYPE_Q4_1] = kn_matmul_q4_1_ref,
            [ANVIL_TYPE_Q5_0] = kn_matmul_q5_0_ref,
            [ANVIL_TYPE_Q5_1] = kn_matmul_q5_1_ref,
            [ANVIL_TYPE_IQ4_NL] = kn_matmul_iq4_nl_ref,
            [ANVIL_TYPE_MXFP4] = kn_matmul_mxfp4_ref,
            [ANVIL_TYPE_Q2_K] = kn_matmul_q2_k_ref,
            [ANVIL_TYPE_Q3_K] = kn_matmul_q3_k_ref,
            [ANVIL_TYPE_Q4_K] = kn_matmul_q4_k_ref,
            [ANVIL_TYPE_Q5_K] = kn_matmul_q5_k_ref,
            [ANVIL_TYPE_Q6_K] = kn_matmul_q6_k_ref,
            [ANVIL_TYPE_IQ4_XS] = kn_matmul_iq4_xs_ref,
        },
    .act =
        {
            [KN_ACT_F32] = kn_act_f32_ref,
            [KN_ACT_BF16] = kn_act_bf16_ref,
            [KN_ACT_Q8A] = kn_act_q8a_ref,
            [KN_ACT_Q8K] = kn_act_q8k_ref,
            [KN_ACT_Q8A_Q8K] = kn_act_q8a_q8k_ref,
        },
    .rmsnorm = kn_rmsnorm_ref,
    .add_rmsnorm = kn_add_rmsnorm_ref,
    .rmsnorm_act = kn_rmsnorm_act_ref,
    .silu_mul = kn_silu_mul_ref,
    .silu_mul_act = kn_silu_mul_act_ref,
    .rope = kn_rope_ref,
    .rope_ext = kn_rope_ext_ref,
    .gelu_mul = kn_gelu_mul_ref,
    .gelu_mul_act = kn_gelu_mul_act_ref,
    .layernorm = kn_layernorm_ref,
    .gelu_erf = kn_gelu_erf_ref,
    .f16_row = kn_f16_row_ref,
};

void kn_f16_row_ref(kn_f16 *dst, size_t stride, const float *x, int n) {
    for (int i = 0; i < n; i++) dst[(size_t)i * stride] = kn_f32_to_f16(x[i]);
}
