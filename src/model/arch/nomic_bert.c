/*
 * nomic_bert.c - nomic-bert encoders (nomic-embed-text v1 / v1.5;
 * general.architecture "nomic-bert"): BERT's post-norm block with three
 * changes, all run by model/encoder.c (ARCH_ENCODER):
 *
 *   - no learned positions: q and k are rotated by RoPE in the GPT-NeoX
 *     layout (pairs (i, i + n_rot/2)), base rope.freq_base (1000 in the
 *     released files), over rope.dimension_count dims (all of head_dim);
 *   - one fused Q/K/V matrix, blk.N.attn_qkv.weight (3 * n_embd rows), no
 *     biases anywhere in the attention or the FFN (a bias the file has is
 *     still used);
 *   - a gated SiLU FFN: ffn_down(silu(ffn_gate x) * ffn_up x).
 *
 * The token embeddings get token_types' row (0 for a single text) and a
 * LayerNorm with bias (token_embd_norm), as BERT's. The files pool by mean
 * (nomic-bert.pooling_type 1).
 *
 * LayerNorm eps: nomic-bert.attention.layer_norm_epsilon (1e-12 when
 * absent, as the released config).
 *
 * Reference: Nussbaum et al. 2024 (nomic-embed-text); llama.cpp
 * src/models/nomic-bert.cpp and bert.cpp for the tensor names and graph.
 */
#include "model/arch.h"

static anvil_status nomic_bert_hparams(struct model_loader *L, struct model_hparams *hp,
                                       bool *swa) {
    (void)swa;
    hp->norm_eps = 1e-12f;
    loader_f32(L, "attention.layer_norm_epsilon", &hp->norm_eps);
    if (!(hp->norm_eps > 0.0f) || !(hp->norm_eps < 1.0f)) {
        loader_error(L, "model: nomic-bert.attention.layer_norm_epsilon %g is out of range",
                     hp->norm_eps);
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

const struct arch_desc arch_nomic_bert = {
    .name = "nomic-bert",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SILU, /* for an encoder: the gated SiLU FFN (arch.h) */
    .flags = ARCH_ENCODER | ARCH_ENC_ROPE | ARCH_FUSED_QKV,
    .hparams = nomic_bert_hparams,
};
