/*
 * model.h - internal model representation: hyperparameters read from GGUF
 * metadata, weights bound by name, the tokenizer and the kernel table.
 *
 * One representation serves every architecture anvil runs (model/arch.h):
 * the differences between Llama, Qwen 2/3, Gemma 3 and Phi-3 are data
 * here - which norms a layer has, the activation, the RoPE layout and
 * bases, a sliding window per layer, biases, embedding and attention
 * scales - read by one forward pass (model/forward.c).
 *
 * Q/K/V and gate/up are "concatenated" at load time as multi-part
 * matrices (struct wmat): one matmul call spans all rows of the parts, so
 * they share one activation quantization and one thread split. When the
 * kernel table has a packed layout for the weight type (AVX-512: 16-row
 * interleaved tiles), every matrix is copied once into it at load time,
 * parts stacked (parts of different types: each part packed on its own, if
 * its type can be), and the mapping's pages are released; otherwise the
 * parts are used in place in the read-only mapping.
 */
#ifndef ANVIL_MODEL_H
#define ANVIL_MODEL_H

#include "anvil.h"
#include "core/core.h"
#include "gguf/gguf.h"
#include "attn/hp1/attn_hp1.h"
#include "kernels/ops.h"
#include "tok/tok.h"

#define WMAT_MAX_PARTS 3

/* A weight matrix of n_out rows of n_in elements, possibly made of parts
 * stacked by rows. Every part has the same n_in; their activation formats
 * merge into one (kn_act_merge: Q8A and Q8K parts share a Q8A_Q8K row). */
struct wmat {
    int n_in, n_out;
    int act;                 /* activation format the matmuls are given */
    int n_parts;
    struct {
        const uint8_t *data; /* (rows, n_in) in `type` blocks, row-major */
        int type;
        int rows;
        size_t row_bytes;
        size_t act_off;      /* this part's format inside an `act` row */
        uint8_t *packed;     /* parts of different types: this part's packed
                                copy, or NULL (then data in place) */
        size_t packed_tile;
    } part[WMAT_MAX_PARTS];
    /* The kernels' packed copy of all parts (kernels/ops.h pack_size) when
     * they have one type, or NULL: then the parts are used in place, or
     * packed one by one (a Q4_K_M file's Q/K/V mixes types). Carved from
     * the model's one packed buffer (anvil_model.packed). */
    uint8_t *packed;
    int packed_type;
    size_t packed_tile; /* bytes per KN_PACK_ROWS rows */
};

enum model_act {
    MODEL_ACT_SILU = 0,  /* SwiGLU: silu(gate) * up */
    MODEL_ACT_GELU_TANH, /* GeGLU: gelu_tanh(gate) * up */
    MODEL_ACT_SWIGLU_OAI, /* gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit),
                           * g * sigmoid(alpha * g) * (u + 1) (hp.swiglu_*) */
};

/* A layer's attention (docs/attention.md): the softmax, or HP1 gated
 * attention (attn/hp1/attn_hp1.h: ReLU, a causal FIR over the key positions,
 * a clamp, no normalisation). */
enum model_attn {
    MODEL_ATTN_SOFTMAX = 0,
    MODEL_ATTN_HP1,
};

/* How router logits become expert weights (llama.cpp's expert_gating_func
 * values, which the file's <arch>.expert_gating_func uses). */
enum model_gating {
    MODEL_GATING_SOFTMAX = 1, /* softmax over all experts, then top-k */
    MODEL_GATING_SIGMOID = 2, /* sigmoid of each logit, then top-k */
    MODEL_GATING_SOFTMAX_WEIGHT = 3, /* top-k of the logits, softmax over those k (gpt-oss) */
};

enum model_rope {
    MODEL_ROPE_NORM = 0, /* pairs (2i, 2i+1): Llama */
    MODEL_ROPE_NEOX,     /* pairs (i, i + n_rot/2): Qwen, Gemma, Phi-3 */
};

struct model_hparams {
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    int n_rot;           /* dims rotated by RoPE: even, <= head_dim */
    float rope_base;     /* global layers: inv_freq_i = rope_scale * base^(-2i/n_rot) */
    float rope_scale;    /* linear RoPE scaling (1 / scaling factor); 1 = none */
    float rope_base_swa, rope_scale_swa; /* the same for sliding-window layers */
    float norm_eps;
    float attn_scale;    /* multiplies q.k: 1/sqrt(head_dim) unless the arch says */
    float embd_scale;    /* multiplies the token embeddings; 1 = none */
    int n_swa;           /* sliding window: keys per query, itself included; 0 = none */
    enum model_act act;
    enum model_rope rope;
    bool qk_norm_full;   /* q_norm/k_norm span the whole q (q_dim) and k (kv_dim): OLMoE */
    /* attention over the row's whole sequence, not causal; a windowed layer
     * keeps |i - j| <= n_swa/2 (llama.cpp's symmetric window). Batches
     * hold whole sequences; the model embeds, it does not generate. */
    bool bidir;
    float residual_scale; /* multiplies Wo's and the FFN's outputs before the residual; 1 = none */
    float logit_scale;   /* logits are divided by it; 1 = none (Granite) */
    /* mixture of experts (model/moe.h); n_expert 0 = dense FFN */
    int n_expert, n_expert_used;
    int n_ff_exp;        /* rows of each expert's gate and up */
    int n_ff_shexp;      /* rows of the shared expert's gate and up; 0 = none */
    bool moe_norm_w;     /* the chosen experts' weights are renormalized to sum 1 */
    float moe_w_scale;   /* the weights are then multiplied by it; 1 = none */
    enum model_gating moe_gating;
    /* MODEL_ACT_SWIGLU_OAI's constants (gpt-oss: 7.0 and 1.702) */
    float swiglu_limit, swiglu_alpha;
    /* YaRN RoPE scaling (rope.scaling.type "yarn"); yarn_factor 0 = none.
     * Frequencies are mixed between interpolated (1/factor) and original
     * by the ramp between the dims of beta_fast and beta_slow rotations in
     * the original context; q.k is scaled by mscale^2 (folded into
     * attn_scale), mscale = attn_factor * (1 + 0.1 ln factor). */
    float yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_attn_factor, yarn_ext_factor;
    int yarn_orig_ctx;
};

/* A layer's mixture of experts: the router, every expert's gate/up and
 * down as a matrix of its own (a slice of the file's 3-D tensor, packed at
 * load like any matrix), and the optional shared expert. */
struct model_moe {
    struct wmat router;  /* (n_expert, n_embd) */
    struct wmat *gu;     /* (n_expert) each (2*n_ff_exp, n_embd): gate rows then up rows */
    struct wmat *down;   /* (n_expert) each (n_embd, n_ff_exp) */
    struct wmat sh_gu;   /* (2*n_ff_shexp, n_embd), n_out 0 when there is no shared expert */
    struct wmat sh_down; /* (n_embd, n_ff_shexp) */
    float *sh_gate;      /* (n_embd) owned, or NULL: the shared output is scaled by
                          * sigmoid(sh_gate . h) (Qwen2-MoE), else added as is */
    /* biases (gpt-oss), owned, or NULL: router (n_expert), each expert's
     * gate then up (n_expert, 2*n_ff_exp), its down (n_expert, n_embd) */
    float *router_b, *gu_b, *down_b;
};

struct model_layer {
    const float *attn_norm;      /* (n_embd) */
    const float *ffn_norm;       /* (n_embd) */
    const float *attn_post_norm; /* (n_embd), or NULL: applied to Wo's output */
    const float *ffn_post_norm;  /* (n_embd), or NULL: applied to Wdown's output */
    const float *q_norm;         /* (head_dim), or NULL: per-head RMSNorm of q */
    const float *k_norm;         /* (head_dim), or NULL: per-head RMSNorm of k */
    float *qkv_bias;             /* (q_dim + 2*kv_dim), or NULL; owned by the model */
    struct wmat wqkv;            /* (q_dim + 2*kv_dim, n_embd), q_dim = n_head*head_dim */
    struct wmat wo;              /* (n_embd, q_dim) */
    struct wmat wgu;             /* (2*n_ff, n_embd): gate rows then up rows */
    struct wmat wdown;           /* (n_embd, n_ff) */
    struct model_moe *moe;       /* owned, or NULL: a dense FFN (wgu, wdown) */
    int n_swa;                   /* this layer's window (hp.n_swa), or 0 = global */
    const float *inv_freq;       /* (n_rot/2): this layer's RoPE frequencies */
    enum model_attn attn;        /* this layer's attention kind */
    struct kn_hp1_params hp1;    /* MODEL_ATTN_HP1: taps (n_head, n_taps) point into the
                                  * model's hp1_taps; never windowed (n_swa == 0) */
    float *attn_sinks;           /* (n_head) owned, or NULL: per-head sink logits (gpt-oss) */
    float *wo_bias;              /* (n_embd) owned, or NULL: added to Wo's output */
};

struct arch_desc;
struct enc_model;

struct anvil_model {
    struct gguf_file *gguf;
    struct tok_vocab *vocab;
    const struct kn_ops *ops;
    const struct arch_desc *arch;
    struct model_hparams hp;
    int wtype;                 /* dominant weight type, for display */
    const uint8_t *tok_embd;   /* (n_vocab, n_embd) in tok_embd_type */
    int tok_embd_type;
    size_t tok_embd_row_bytes;
    const float *output_norm;  /* (n_embd) */
    struct wmat output;        /* (n_vocab, n_embd): tok_embd when tied */
    struct model_layer *layers; /* (n_layer) */
    float *inv_freq;           /* (n_rot / 2): RoPE frequencies of global layers */
    float *inv_freq_swa;       /* (n_rot / 2): of windowed layers, or NULL */
    float *hp1_taps;           /* (n_layer, n_head, K): HP1 taps of every layer, or NULL
                                * when no layer is HP1 (softmax layers' rows unused) */
    int n_hp1;                 /* layers with HP1 attention */
    bool has_pooling;          /* the file has <arch>.pooling_type */
    int pooling;               /* its value (enum anvil_pooling) when has_pooling */
    /* rank pooling's classification head (model/embed.c), owned F32 copies:
     * score = cls_out . tanh(cls h + cls_b) + cls_out_b; either matrix may
     * be absent (NULL), not both */
    float *cls_w, *cls_b;         /* (n_embd, n_embd), (n_embd) */
    float *cls_out_w, *cls_out_b; /* (n_cls_out, n_cls_in), (n_cls_out) */
    int n_cls_out;
    /* sentence-transformers' Dense layers after pooling (gemma-embedding),
     * owned F32 copies, or NULL: y = dense3 (dense2 x + dense2_b) */
    float *dense2, *dense2_b, *dense3; /* (n_dense, n_embd), (n_dense), (n_embd, n_dense) */
    int n_dense;
    uint64_t n_params;
    char desc[128];
    uint8_t *packed; /* every wmat's packed copy, carved from one buffer (huge pages) */
    struct enc_model *enc; /* an encoder's own tensors (model/encoder.h), or NULL: a decoder */
};

/* Bind the rank head (cls.weight, cls.bias, cls.output.weight,
 * cls.output.bias) of a model whose pooling is rank (model/embed.c). */
anvil_status embed_bind_head(struct anvil_model *m, char *err, size_t err_cap);
void embed_free_head(struct anvil_model *m);
/* Bind sentence-transformers' Dense layers (dense_2.weight, dense_2.bias,
 * dense_3.weight) when the file has them; embed.c applies them after
 * pooling. Freed by embed_free_head. */
anvil_status embed_bind_dense(struct anvil_model *m, char *err, size_t err_cap);

/* Multiply: y[t*ldy + r] = W row r . X row t, rows [r0, r1) of the whole
 * (multi-part) matrix. x rows are in w->act format. */
void wmat_matmul(const struct kn_ops *ops, const struct wmat *w, float *y, size_t ldy,
                 const void *x, size_t x_stride, int n_tokens, int r0, int r1);

/* The same for rows [a, b) written to y[t*ldy + (r - a)]: a tile of the
 * output (the lm_head works tile by tile). */
void wmat_matmul_tile(const struct kn_ops *ops, const struct wmat *w, float *y, size_t ldy,
                      const void *x, size_t x_stride, int n_tokens, int a, int b);

#endif
