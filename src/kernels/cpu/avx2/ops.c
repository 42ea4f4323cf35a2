/*
 * ops.c (avx2) - the avx2 kernel table. Entries without a avx2 version
 * point at the reference (kernels/cpu/ref), like ggml's arch-fallback.
 */
#include "kernels/cpu/ref/ref.h"

const struct kn_ops kn_ops_avx2 = {
    .name = "avx2",
    .matmul =
        {
            [ANVIL_TYPE_F32] = kn_matmul_f32_ref,
            [ANVIL_TYPE_F16] = kn_matmul_f16_ref,
            [ANVIL_TYPE_BF16] = kn_matmul_bf16_ref,
            [ANVIL_TYPE_Q8_0] = kn_matmul_q8_0_ref,
            [ANVIL_TYPE_Q4_0] = kn_matmul_q4_0_ref,
            [ANVIL_TYPE_Q4_1] = kn_matmul_q4_1_ref,
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
    .silu_mul_act = kn_silu_mul_act_ref,
    .rope = kn_rope_ref,
};
