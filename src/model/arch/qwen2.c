/*
 * qwen2.c - Qwen 2 and 2.5: Llama's block with biases on Q, K and V
 * (required), RoPE on NeoX pairs. Output tied or separate.
 */
#include "model/arch.h"

const struct arch_desc arch_qwen2 = {
    .name = "qwen2",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_QKV_BIAS,
    .hparams = NULL,
};
