/*
 * qwen3.c - Qwen 3 (dense): no biases, a per-head RMSNorm on q and k
 * before RoPE (attn_q_norm, attn_k_norm), RoPE on NeoX pairs. head_dim
 * comes from attention.key_length and may differ from n_embd/n_head.
 */
#include "model/arch.h"

const struct arch_desc arch_qwen3 = {
    .name = "qwen3",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_QK_NORM,
    .hparams = NULL,
};
