/*
 * arch.h - an architecture is data plus one file.
 *
 * Each src/model/arch/<name>.c fills one struct arch_desc: the GGUF name
 * (general.architecture), the per-layer choices the forward pass reads
 * (norm placement, per-head Q/K norms, biases, activation, RoPE layout,
 * embedding scale, fused tensors), and an optional hook for metadata that
 * only this architecture has (Gemma 3's sliding-window pattern and RoPE
 * bases, for example). The common keys <arch>.block_count,
 * .embedding_length, .feed_forward_length, .attention.head_count(_kv),
 * .attention.key_length, .rope.* and .context_length are read by model.c
 * for every architecture.
 *
 * What the forward pass does with the flags (model/forward.c):
 *   ARCH_QK_NORM        q and k get a per-head RMSNorm (attn_q_norm,
 *                       attn_k_norm, head_dim weights) before RoPE;
 *   ARCH_POST_NORMS     Wo's and Wdown's outputs get an RMSNorm
 *                       (post_attention_norm, post_ffw_norm) before they
 *                       join the residual;
 *   ARCH_QKV_BIAS       attn_q/k/v.bias are required (they are always
 *                       used when present);
 *   ARCH_EMBD_SCALE     token embeddings are multiplied by sqrt(n_embd);
 *   ARCH_FUSED_QKV      attn_qkv.weight may stand for attn_q/k/v;
 *   ARCH_FUSED_GATE_UP  ffn_up.weight holds gate then up (2*n_ff rows) and
 *                       there is no ffn_gate.
 *   ARCH_MOE            every layer's FFN is a mixture of experts (model/moe.h);
 *                       any architecture becomes one when the file has
 *                       <arch>.expert_count > 0 (Mixtral is `llama`);
 *   ARCH_MOE_NORM_W     the top-k weights are renormalized unless the file's
 *                       <arch>.expert_weights_norm says otherwise;
 *   ARCH_QK_NORM_FULL   attn_q_norm / attn_k_norm are (q_dim) / (kv_dim) vectors
 *                       applied to the whole q and k (OLMoE), not per head.
 *   ARCH_FFN_NORM_POST_ATTN  the FFN's pre-norm is named post_attention_norm
 *                       (gpt-oss), not ffn_norm;
 *   ARCH_ATTN_SINKS     attn_sinks.weight (n_head sink logits) and
 *                       attn_output.bias are required (model_attn.c);
 *   ARCH_MOE_GATING_SW  the default gating is softmax over the top-k logits
 *                       (MODEL_GATING_SOFTMAX_WEIGHT), and the router and
 *                       experts have biases (ffn_gate_inp.bias,
 *                       ffn_{gate,up,down}_exps.bias), required.
 *   ARCH_ENCODER        a BERT-style bidirectional encoder: model/encoder.c
 *                       binds its tensors and runs it (anvil_embed only);
 *                       forward.c never sees it. Its act MODEL_ACT_SILU
 *                       means the gated SiLU FFN (ffn_gate, ffn_up: nomic-bert),
 *                       any other the erf GELU of ffn_up alone (BERT);
 *   ARCH_ENC_ROPE       an encoder rotates q and k (the descriptor's rope
 *                       layout, rope.freq_base) instead of adding learned
 *                       positions (position_embd).
 *
 * Reference: llama.cpp src/models/<arch>.cpp and its convert_hf_to_gguf.py
 * (tensor names, which metadata each architecture writes).
 */
#ifndef ANVIL_MODEL_ARCH_H
#define ANVIL_MODEL_ARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model.h"

enum {
    ARCH_QK_NORM = 1u << 0,
    ARCH_POST_NORMS = 1u << 1,
    ARCH_QKV_BIAS = 1u << 2,
    ARCH_EMBD_SCALE = 1u << 3,
    ARCH_FUSED_QKV = 1u << 4,
    ARCH_FUSED_GATE_UP = 1u << 5,
    ARCH_MOE = 1u << 6,          /* <arch>.expert_count is required: every FFN is a MoE */
    ARCH_MOE_NORM_W = 1u << 7,   /* default of expert_weights_norm: renormalize top-k */
    ARCH_QK_NORM_FULL = 1u << 8, /* with ARCH_QK_NORM: one norm over all of q and of k */
    ARCH_FFN_NORM_POST_ATTN = 1u << 9, /* the FFN norm is blk.N.post_attention_norm */
    ARCH_ATTN_SINKS = 1u << 10,  /* attn_sinks and attn_output.bias (gpt-oss) */
    ARCH_MOE_GATING_SW = 1u << 11, /* softmax over the top-k logits; router/expert biases */
    ARCH_ENCODER = 1u << 12,     /* bidirectional encoder (model/encoder.c): embeds, no logits */
    ARCH_ENC_ROPE = 1u << 13,    /* with ARCH_ENCODER: RoPE on q and k, no position_embd */
    ARCH_BIDIR = 1u << 14,       /* a decoder's layers, attention over the whole sequence:
                                  * embeds, no generation (gemma-embedding) */
};

struct model_loader;

struct arch_desc {
    const char *name; /* general.architecture */
    enum model_rope rope;
    enum model_act act;
    unsigned flags;
    /* Architecture-only metadata, after the common keys: may set n_swa,
     * the per-layer windows (swa[l] true for windowed layers), the RoPE
     * bases and scales, attn_scale. NULL when there is none. */
    anvil_status (*hparams)(struct model_loader *L, struct model_hparams *hp, bool *swa);
};

/* The descriptor named name (len bytes, not NUL-terminated), or NULL. */
const struct arch_desc *arch_find(const char *name, size_t len);
/* "llama, qwen2, ...": the architectures anvil runs, for error messages. */
const char *arch_names(void);

/* ---------------------------------------------------------------------- */
/* loader helpers for the hooks (model.c) */

/* Read <arch>.<suffix>. When required and missing or of the wrong type,
 * the loader's error says which key; optional keys leave *out alone. */
bool loader_u32(struct model_loader *L, const char *suffix, uint32_t *out, bool required);
bool loader_f32(struct model_loader *L, const char *suffix, float *out);
/* <arch>.<suffix> as an array of n bools or integers (0 = false). Returns
 * false when missing; sets the loader's error and returns false when it
 * exists with another length or type (check loader_failed). */
bool loader_bool_array(struct model_loader *L, const char *suffix, bool *out, int n);
bool loader_failed(const struct model_loader *L);
/* Record an error message for the user (printf-style). */
void loader_error(struct model_loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

extern const struct arch_desc arch_llama;
extern const struct arch_desc arch_qwen2;
extern const struct arch_desc arch_qwen3;
extern const struct arch_desc arch_gemma3;
extern const struct arch_desc arch_gemma_embedding;
extern const struct arch_desc arch_phi3;
extern const struct arch_desc arch_qwen2moe;
extern const struct arch_desc arch_qwen3moe;
extern const struct arch_desc arch_olmoe;
extern const struct arch_desc arch_granitemoe;
extern const struct arch_desc arch_gptoss;
extern const struct arch_desc arch_bert;
extern const struct arch_desc arch_nomic_bert;

#endif
