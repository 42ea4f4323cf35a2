/*
 * llama.c - the Llama architecture (Llama 2/3.x, SmolLM2, Mistral and
 * every GGUF whose general.architecture is "llama"; Mixtral when the file
 * has llama.expert_count, top-k softmax weights renormalized): RMSNorm before
 * attention and FFN, SwiGLU, RoPE on adjacent pairs, optional Q/K/V
 * biases, optional rope_freqs (Llama 3.1 frequency factors, read by
 * model.c for every architecture).
 *
 * Sliding window: Mistral 7B v0.1 attends to the last 4096 positions on
 * every layer. When a file carries llama.attention.sliding_window, every
 * layer is windowed. (llama.cpp ignores the key for this architecture, so
 * the two agree only while a sequence is shorter than the window; the
 * tests check windowed layers against anvil's numpy forward pass.)
 */
#include "model/arch.h"

static anvil_status llama_hparams(struct model_loader *L, struct model_hparams *hp, bool *swa) {
    uint32_t w = 0;
    if (loader_u32(L, "attention.sliding_window", &w, false) && w > 0) {
        hp->n_swa = (int)w;
        for (int l = 0; l < hp->n_layer; l++) swa[l] = true;
    }
    return ANVIL_OK;
}

const struct arch_desc arch_llama = {
    .name = "llama",
    .rope = MODEL_ROPE_NORM,
    .act = MODEL_ACT_SILU,
    .flags = ARCH_MOE_NORM_W, /* Mixtral: llama with llama.expert_count */
    .hparams = llama_hparams,
};
