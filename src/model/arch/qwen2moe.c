/*
 * qwen2moe.c - Qwen 1.5-MoE / Qwen2-MoE: Qwen 2's attention (Q/K/V biases,
 * RoPE on NeoX pairs); the FFN is a mixture of experts (softmax router,
 * top-k weights not renormalized) plus a shared expert whose output is
 * scaled by sigmoid(ffn_gate_inp_shexp . h). Expert sizes come from
 * qwen2moe.expert_feed_forward_length and
 * expert_shared_feed_forward_length.
 */
#include "model/arch.h"

const struct arch_desc arch_qwen2moe = {
    .name = "qwen2moe",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_QKV_BIAS | ARCH_MOE,
    .hparams = NULL,
};
