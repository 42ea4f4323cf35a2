/*
 * olmoe.c - OLMoE: Llama's block with one RMSNorm over the whole q
 * (attn_q_norm of q_dim) and the whole k (attn_k_norm of kv_dim) before
 * RoPE on NeoX pairs; the FFN is a mixture of experts (softmax router,
 * top-k weights not renormalized), expert size feed_forward_length.
 */
#include "model/arch.h"

const struct arch_desc arch_olmoe = {
    .name = "olmoe",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_QK_NORM | ARCH_QK_NORM_FULL | ARCH_MOE,
    .hparams = NULL,
};
