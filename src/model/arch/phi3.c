/*
 * phi3.c - Phi-3 (mini/medium): Q, K, V in one fused tensor attn_qkv and
 * gate/up in one ffn_up of 2*n_ff rows (gate first), SwiGLU, RoPE on NeoX
 * pairs, partial rotary when rope.dimension_count < head_dim.
 *
 * Not supported: LongRoPE (rope_factors_long/short, the 128k-context
 * variants) is refused with a message. phi3.attention.sliding_window is
 * ignored, as llama.cpp does (its conversion writes a value the models
 * were not trained to use on every layer).
 */
#include "model/arch.h"

const struct arch_desc arch_phi3 = {
    .name = "phi3",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP,
    .hparams = NULL,
};
