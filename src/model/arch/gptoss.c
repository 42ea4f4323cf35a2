/*
 * gptoss.c - gpt-oss (general.architecture "gpt-oss", llama.cpp's
 * LLM_ARCH_OPENAI_MOE; gpt-oss-20b and -120b), as llama.cpp reads it:
 *
 *   - RMSNorm before attention (attn_norm) and before the FFN, whose weight
 *     is named post_attention_norm; biases on Q, K, V and on Wo's output;
 *   - RoPE on NeoX pairs with YaRN scaling (rope.scaling.type "yarn",
 *     factor, original_context_length, yarn_beta_fast/slow: model_bind.c);
 *     the same frequencies on every layer;
 *   - attention sinks: one learned logit per query head (attn_sinks) in the
 *     softmax denominator (attn/attn.h), q.k scaled by 1/sqrt(head_dim);
 *   - a sliding window (attention.sliding_window, 128) on the even layers,
 *     full attention on the odd ones (or the file's
 *     attention.sliding_window_pattern: one bool per layer, or a period);
 *     rope.freq_base_swa, when present, is the windowed layers' base;
 *   - the FFN is a mixture of experts: the router has a bias, the k largest
 *     logits are chosen and their softmax gives the weights
 *     (MODEL_GATING_SOFTMAX_WEIGHT, unless the file's expert_gating_func
 *     says otherwise); every expert's gate, up and down have biases; the
 *     activation is the clamped SwiGLU of gpt-oss (swiglu_oai): with
 *     g = min(gate, 7), u = clamp(up, -7, 7), out = g * sigmoid(1.702 g)
 *     * (u + 1). The two constants are not in the file (llama.cpp fixes
 *     them too). Experts are MXFP4 in the published files.
 *
 * What it does not do: the harmony chat format is the file's own Jinja
 * template (src/tmpl) and the channel parsing is toolfmt.c's.
 */
#include "model/arch.h"

static anvil_status gptoss_hparams(struct model_loader *L, struct model_hparams *hp, bool *swa) {
    hp->swiglu_limit = 7.0f;
    hp->swiglu_alpha = 1.702f;
    uint32_t w = 0;
    if (!loader_u32(L, "attention.sliding_window", &w, true)) return ANVIL_ERR_FORMAT;
    if (w == 0) {
        loader_error(L, "model: gpt-oss.attention.sliding_window must be at least 1");
        return ANVIL_ERR_FORMAT;
    }
    hp->n_swa = (int)w;
    if (!loader_bool_array(L, "attention.sliding_window_pattern", swa, hp->n_layer)) {
        if (loader_failed(L)) return ANVIL_ERR_FORMAT;
        uint32_t period = 2; /* or the file's period: windowed unless l % period == period - 1 */
        loader_u32(L, "attention.sliding_window_pattern", &period, false);
        for (int l = 0; l < hp->n_layer; l++)
            swa[l] = period == 0 || (uint32_t)l % period < period - 1;
    }
    /* windowed layers: the same RoPE (YaRN included) unless the file gives
     * them a base of their own */
    loader_f32(L, "rope.freq_base_swa", &hp->rope_base_swa);
    return ANVIL_OK;
}

const struct arch_desc arch_gptoss = {
    .name = "gpt-oss",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_SWIGLU_OAI,
    .flags = ARCH_QKV_BIAS | ARCH_MOE | ARCH_FFN_NORM_POST_ATTN | ARCH_ATTN_SINKS |
             ARCH_MOE_GATING_SW,
    .hparams = gptoss_hparams,
};
