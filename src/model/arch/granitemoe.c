/*
 * granitemoe.c - Granite-MoE (granite-3.x-*-a*m): Llama's block (RoPE on
 * adjacent pairs) with Granite's four scalars, as llama.cpp reads them:
 * token embeddings times granitemoe.embedding_scale, Wo's and the FFN's
 * outputs times residual_scale before the residual add, q.k times
 * attention.scale (instead of 1/sqrt(head_dim)), logits divided by
 * logit_scale (required, as llama.cpp requires it). The FFN is a mixture
 * of experts (softmax, top-k renormalized) with an optional ungated shared
 * expert (expert_shared_feed_forward_length, Granite-MoE-Shared).
 */
#include <math.h>

#include "model/arch.h"

static anvil_status granitemoe_hparams(struct model_loader *L, struct model_hparams *hp, bool *swa) {
    (void)swa;
    float v = 0.0f;
    if (!loader_f32(L, "logit_scale", &hp->logit_scale)) {
        loader_error(L, "model: required metadata %s.logit_scale is missing", "granitemoe");
        return ANVIL_ERR_FORMAT;
    }
    if (loader_f32(L, "embedding_scale", &v) && v != 0.0f) hp->embd_scale = v;
    if (loader_f32(L, "residual_scale", &v) && v != 0.0f) hp->residual_scale = v;
    if (loader_f32(L, "attention.scale", &v) && v != 0.0f) hp->attn_scale = v;
    if (!isfinite(hp->logit_scale) || hp->logit_scale == 0.0f || !isfinite(hp->embd_scale) ||
        !isfinite(hp->residual_scale) || !isfinite(hp->attn_scale)) {
        loader_error(L, "model: granitemoe scales must be finite and logit_scale nonzero");
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

const struct arch_desc arch_granitemoe = {
    .name = "granitemoe",
    .rope = MODEL_ROPE_NORM,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_MOE | ARCH_MOE_NORM_W,
    .hparams = granitemoe_hparams,
};
