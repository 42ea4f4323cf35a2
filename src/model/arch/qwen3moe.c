/*
 * qwen3moe.c - Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen 3's
 * attention (per-head Q/K RMSNorm, no biases, RoPE on NeoX pairs); the FFN
 * is a mixture of experts: softmax over the router logits, top-k, the k
 * weights renormalized to sum 1. No shared expert.
 */
#include "model/arch.h"

const struct arch_desc arch_qwen3moe = {
    .name = "qwen3moe",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_QK_NORM | ARCH_MOE | ARCH_MOE_NORM_W,
    .hparams = NULL,
};
