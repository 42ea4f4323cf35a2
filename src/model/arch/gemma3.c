/*
 * gemma3.c - Gemma 3 (text): token embeddings scaled by sqrt(n_embd);
 * RMSNorm before and after attention and before and after the FFN; per-head
 * RMSNorm of q and k; GeGLU (tanh GELU); RoPE on NeoX pairs; head_dim from
 * attention.key_length (256 on the 270M model, with 640 hidden and 4/1
 * heads); tied output.
 *
 * Sliding window: gemma3.attention.sliding_window (512 on the 270M) on
 * five of every six layers - layer l is global when l % 6 == 5 - or the
 * pattern the file gives (attention.sliding_window_pattern: a period, or
 * one bool per layer). Local layers use RoPE base rope.freq_base_swa
 * (default 10000) with no scaling; global layers rope.freq_base (1e6)
 * with the file's linear scaling.
 *
 * Attention scale: 1/sqrt(head_dim), except on the 27B (62 layers), which
 * was trained with 1/sqrt(n_embd/n_head) (Gemma's query_pre_attn_scalar).
 * Final-logit soft-capping is Gemma 2's; a Gemma 3 file that asks for it
 * is refused rather than run wrong.
 * Norm weights in GGUF already include Gemma's +1 (the conversion adds
 * it), so the plain RMSNorm applies.
 *
 * The same descriptor's hook reads EmbeddingGemma's keys (below).
 */
#include <math.h>

#include "model/arch.h"

static anvil_status gemma3_hparams(struct model_loader *L, struct model_hparams *hp, bool *swa) {
    float cap = 0.0f;
    if (loader_f32(L, "final_logit_softcapping", &cap) && cap != 0.0f) {
        loader_error(L, "model: gemma3.final_logit_softcapping %g is not supported", cap);
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (hp->n_layer == 62) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    uint32_t w = 0;
    if (!loader_u32(L, "attention.sliding_window", &w, false) || w == 0) return ANVIL_OK;
    hp->n_swa = (int)w;
    if (!loader_bool_array(L, "attention.sliding_window_pattern", swa, hp->n_layer)) {
        if (loader_failed(L)) return ANVIL_ERR_FORMAT;
        uint32_t period = 6;
        loader_u32(L, "attention.sliding_window_pattern", &period, false);
        for (int l = 0; l < hp->n_layer; l++)
            swa[l] = period == 0 || (uint32_t)l % period < period - 1;
    }
    hp->rope_base_swa = 10000.0f;
    loader_f32(L, "rope.freq_base_swa", &hp->rope_base_swa);
    hp->rope_scale_swa = 1.0f;
    return ANVIL_OK;
}

const struct arch_desc arch_gemma3 = {
    .name = "gemma3",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_GELU_TANH,
    .flags = ARCH_QK_NORM | ARCH_POST_NORMS | ARCH_EMBD_SCALE,
    .hparams = gemma3_hparams,
};

/* EmbeddingGemma (general.architecture "gemma-embedding"): Gemma 3's
 * layers and keys, attention over the whole sequence (bidirectional; the
 * windowed layers keep |i - j| <= sliding_window/2, llama.cpp's symmetric
 * window), mean pooling from the file, then sentence-transformers' Dense
 * layers dense_2 and dense_3 when the file has them (model/embed.c). */
const struct arch_desc arch_gemma_embedding = {
    .name = "gemma-embedding",
    .rope = MODEL_ROPE_NEOX,
    .act = MODEL_ACT_GELU_TANH,
    .flags = ARCH_QK_NORM | ARCH_POST_NORMS | ARCH_EMBD_SCALE | ARCH_BIDIR,
    .hparams = gemma3_hparams,
};
