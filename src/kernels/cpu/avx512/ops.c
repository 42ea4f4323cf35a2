/*
 * ops.c (avx512) - the avx512 kernel table. Entries without a avx512 version
 * point at the reference (kernels/cpu/ref), like ggml's arch-fallback.
 */
#include "kernels/cpu/avx512/avx512.h"
#include "kernels/cpu/ref/ref.h"

const struct kn_ops kn_ops_avx512 = {
    .name = "avx512",
    .matmul =
        {
            [ANVIL_TYPE_F32] = kn_matmul_f32_ref,
            [ANVIL_TYPE_F16] = kn_matmul_f16_ref,
            [ANVIL_TYPE_BF16] = kn_matmul_bf16_ref,
            [ANVIL_TYPE_Q8_0] = kn_matmul_q8_0_avx512,
            [ANVIL_TYPE_Q4_0] = kn_matmul_q4_0_avx512,
            [ANVIL_TYPE_Q4_1] = kn_matmul_q4_1_avx512,
        },
    .act =
        {
            [KN_ACT_F32] = kn_act_f32_ref,
            [KN_ACT_BF16] = kn_act_bf16_ref,
            [KN_ACT_Q8A] = kn_act_q8a_ref,
        },
    .rmsnorm = kn_rmsnorm_ref,
    .add_rmsnorm = kn_add_rmsnorm_ref,
    .rmsnorm_act = kn_rmsnorm_act_ref,
    .silu_mul = kn_silu_mul_ref,
    .rope = kn_rope_ref,
};

/* Same table for CPUs with AVX-512 VNNI but without AVX512_BF16. */
const struct kn_ops kn_ops_avx512_nobf16 = {
    .name = "avx512",
    .matmul =
        {
            [ANVIL_TYPE_F32] = kn_matmul_f32_ref,
            [ANVIL_TYPE_F16] = kn_matmul_f16_ref,
            [ANVIL_TYPE_BF16] = kn_matmul_bf16_ref,
            [ANVIL_TYPE_Q8_0] = kn_matmul_q8_0_avx512,
            [ANVIL_TYPE_Q4_0] = kn_matmul_q4_0_avx512,
            [ANVIL_TYPE_Q4_1] = kn_matmul_q4_1_avx512,
        },
    .act =
        {
            [KN_ACT_F32] = kn_act_f32_ref,
            [KN_ACT_BF16] = kn_act_bf16_ref,
            [KN_ACT_Q8A] = kn_act_q8a_ref,
        },
    .rmsnorm = kn_rmsnorm_ref,
    .add_rmsnorm = kn_add_rmsnorm_ref,
    .rmsnorm_act = kn_rmsnorm_act_ref,
    .silu_mul = kn_silu_mul_ref,
    .rope = kn_rope_ref,
};
