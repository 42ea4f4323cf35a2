/*
 * bert.c - BERT encoders (BERT, MiniLM, BGE, E5, GTE; general.architecture
 * "bert"): learned absolute positions (position_embd) and token types
 * (token_types) added to the token embeddings, LayerNorm with bias after
 * the embeddings and after each sublayer (post-norm), biased Q/K/V and
 * projections, the erf GELU, bidirectional attention. The forward pass and
 * the tensor binding are model/encoder.c's (ARCH_ENCODER); the model
 * embeds (anvil_embed) and ranks, it does not generate.
 *
 * LayerNorm eps: bert.attention.layer_norm_epsilon (1e-12 when absent, as
 * BERT's config).
 */
#include "model/arch.h"

static anvil_status bert_hparams(struct model_loader *L, struct model_hparams *hp, bool *swa) {
    (void)swa;
    hp->norm_eps = 1e-12f;
    loader_f32(L, "attention.layer_norm_epsilon", &hp->norm_eps);
    if (!(hp->norm_eps > 0.0f) || !(hp->norm_eps < 1.0f)) {
        loader_error(L, "model: bert.attention.layer_norm_epsilon %g is out of range", hp->norm_eps);
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

const struct arch_desc arch_bert = {
    .name = "bert",
    .rope = MODEL_ROPE_NORM, /* unused: no RoPE */
    .act = MODEL_ACT_GELU_TANH, /* unused: encoder.c applies the erf GELU */
    .flags = ARCH_ENCODER,
    .hparams = bert_hparams,
};
