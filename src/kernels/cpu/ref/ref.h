/*
 * ref.h - the reference kernels, named so that variants and tests can call
 * them directly (kn_<op>_ref). Signatures are those of kernels/ops.h.
 */
#ifndef ANVIL_KN_REF_H
#define ANVIL_KN_REF_H

#include "kernels/ops.h"

void kn_act_block_ref(void *restrict dst, const float *restrict x, int n, int b, int k, int act);
void kn_act_q8a_ref(void *restrict dst, const float *restrict x, int n);
void kn_act_q8k_ref(void *restrict dst, const float *restrict x, int n);
void kn_act_q8a_q8k_ref(void *restrict dst, const float *restrict x, int n);
void kn_act_bf16_ref(void *restrict dst, const float *restrict x, int n);
void kn_act_f32_ref(void *restrict dst, const float *restrict x, int n);

#define DECLARE_MATMUL(NAME) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1);
DECLARE_MATMUL(kn_matmul_q8_0_ref)
DECLARE_MATMUL(kn_matmul_q4_0_ref)
DECLARE_MATMUL(kn_matmul_q4_1_ref)
DECLARE_MATMUL(kn_matmul_q5_0_ref)
DECLARE_MATMUL(kn_matmul_q5_1_ref)
DECLARE_MATMUL(kn_matmul_iq4_nl_ref)
DECLARE_MATMUL(kn_matmul_mxfp4_ref)
DECLARE_MATMUL(kn_matmul_q2_k_ref)
DECLARE_MATMUL(kn_matmul_q3_k_ref)
DECLARE_MATMUL(kn_matmul_q4_k_ref)
DECLARE_MATMUL(kn_matmul_q5_k_ref)
DECLARE_MATMUL(kn_matmul_q6_k_ref)
DECLARE_MATMUL(kn_matmul_iq4_xs_ref)
DECLARE_MATMUL(kn_matmul_f16_ref)
DECLARE_MATMUL(kn_matmul_bf16_ref)
DECLARE_MATMUL(kn_matmul_f32_ref)

void kn_rmsnorm_ref(float *y, const float *x, const float *w, int n, float eps);
void kn_layernorm_ref(float *y, const float *x, const float *w, const float *b, int n, float eps);
void kn_gelu_erf_ref(float *y, const float *x, int n);
void kn_add_rmsnorm_ref(float *restrict res, const float *restrict delta, float *restrict y,
                        const float *restrict w, int n, float eps);
void kn_rmsnorm_act_ref(void *restrict dst, const float *restrict x, const float *restrict w,
                        int n, float eps, int act);
void kn_silu_mul_ref(float *y, const float *g, const float *u, int n);
void kn_silu_mul_act_ref(void *restrict dst, const float *restrict g, const float *restrict u,
                         int n, int act);
void kn_rope_ref(float *x, int n_head, int head_dim, int pos, const float *inv_freq);
void kn_rope_ext_ref(float *x, int n_head, int head_dim, int n_rot, int pos,
                     const float *inv_freq, int neox);
void kn_gelu_mul_ref(float *y, const float *g, const float *u, int n);
void kn_f16_row_ref(kn_f16 *dst, size_t stride, const float *x, int n);
void kn_gelu_mul_act_ref(void *restrict dst, const float *restrict g, const float *restrict u,
                         int n, int act);

#endif
