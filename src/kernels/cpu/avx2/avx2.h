/*
 * avx2.h - the avx2 kernels (kn_<op>_avx2), for the table in ops.c and the
 * tests. Signatures are those of kernels/ops.h. Only files under cpu/avx2/
 * are built with -mavx2 -mfma -mf16c; dispatch.c hands out the table only
 * when CPUID reports AVX2, FMA and F16C.
 */
#ifndef ANVIL_KN_AVX2_H
#define ANVIL_KN_AVX2_H

#include "kernels/ops.h"

#define DECLARE_MATMUL_AVX2(NAME) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1);
DECLARE_MATMUL_AVX2(kn_matmul_f16_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_f32_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_bf16_avx2)
/* matmul_k.c: the quantized types, bit-exact with the reference */
DECLARE_MATMUL_AVX2(kn_matmul_q8_0_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q4_0_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q4_1_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q5_0_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q5_1_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_iq4_nl_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_mxfp4_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q2_k_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q3_k_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q4_k_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q5_k_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_q6_k_avx2)
DECLARE_MATMUL_AVX2(kn_matmul_iq4_xs_avx2)

void kn_act_q8a_avx2(void *restrict dst, const float *restrict x, int n);
void kn_act_q8k_avx2(void *restrict dst, const float *restrict x, int n);
void kn_act_q8a_q8k_avx2(void *restrict dst, const float *restrict x, int n);
/* Super-block b (the 256 floats at x) of an activation row of n elements
 * in format act (KN_ACT_Q8K or KN_ACT_Q8A_Q8K); bit-exact with the
 * reference. The avx512 fused ops use it for these formats. */
void kn_act_sb_avx2(void *restrict dst, const float *restrict x, int n, int b, int act);
void kn_act_bf16_avx2(void *restrict dst, const float *restrict x, int n);
void kn_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps);
void kn_add_rmsnorm_avx2(float *restrict res, const float *restrict delta, float *restrict y,
                         const float *restrict w, int n, float eps);
void kn_rmsnorm_act_avx2(void *restrict dst, const float *restrict x, const float *restrict w,
                         int n, float eps, int act);
void kn_silu_mul_avx2(float *y, const float *g, const float *u, int n);
void kn_silu_mul_act_avx2(void *restrict dst, const float *restrict g, const float *restrict u,
                          int n, int act);
void kn_rope_avx2(float *x, int n_head, int head_dim, int pos, const float *inv_freq);
void kn_rope_ext_avx2(float *x, int n_head, int head_dim, int n_rot, int pos,
                      const float *inv_freq, int neox);
void kn_gelu_mul_avx2(float *y, const float *g, const float *u, int n);
/* enc.c: the encoder ops of kernels/ops.h */
void kn_layernorm_avx2(float *y, const float *x, const float *w, const float *b, int n, float eps);
void kn_gelu_erf_avx2(float *y, const float *x, int n);
void kn_f16_row_avx2(kn_f16 *dst, size_t stride, const float *x, int n);
void kn_gelu_mul_act_avx2(void *restrict dst, const float *restrict g, const float *restrict u,
                          int n, int act);

double kn_int8_peak_avx2(double seconds);
double kn_f32_peak_avx2(double seconds);

extern const struct kn_ops kn_ops_avx2;

#endif
