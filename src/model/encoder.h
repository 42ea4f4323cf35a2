/*
 * encoder.h - bidirectional encoders (BERT and the models that share its
 * block: MiniLM, BGE, E5, GTE; nomic-bert): what the model holds beside the shared
 * model_layer matrices, and the two entry points, bind at load
 * (model.c) and run a batch (embed.c). Not for use outside src/model.
 */
#ifndef ANVIL_MODEL_ENCODER_H
#define ANVIL_MODEL_ENCODER_H

#include "model/model.h"

struct model_loader;
struct anvil_ctx;

/* A layer's vectors (all owned, n_embd floats unless said; a bias the
 * file leaves out is zeros). Its matrices are the model_layer's: wqkv
 * (q, k, v stacked, with qkv_bias), wo (with wo_bias), wgu holding
 * ffn_up only (n_ff rows; with enc_model.swiglu ffn_gate then ffn_up,
 * 2 * n_ff rows), wdown. */
struct enc_layer {
    float *ln_attn_w, *ln_attn_b; /* attn_output_norm: after Wo + residual */
    float *up_b;                  /* (n_ff) */
    float *down_b;
    float *ln_out_w, *ln_out_b;   /* layer_output_norm: after the FFN + residual */
};

struct enc_model {
    bool rope;                  /* q, k rotated (ARCH_ENC_ROPE, m->inv_freq); no pos_embd */
    bool swiglu;                /* FFN silu(gate) * up (act MODEL_ACT_SILU), else gelu_erf(up) */
    const uint8_t *pos_embd;    /* (n_pos, n_embd) in pos_type, in the mapping; NULL with rope */
    int pos_type;
    size_t pos_row_bytes;
    int n_pos;                  /* positions a sequence may have (context_length with rope) */
    float *type_embd;           /* (n_types, n_embd) owned, or NULL (no token types) */
    int n_types;
    float *norm_w, *norm_b;     /* token_embd_norm: (n_embd) each, owned */
    struct enc_layer *layers;   /* (n_layer) */
};

/* Bind an encoder's tensors (llama.cpp's names for LLM_ARCH_BERT: token_embd,
 * position_embd, token_types, token_embd_norm, blk.N.attn_{q,k,v,output},
 * attn_output_norm, ffn_{up,down}, layer_output_norm, each .weight and
 * .bias; blk.N.attn_qkv.weight/.bias may stand for attn_q/k/v; with RoPE
 * no position_embd, with the gated FFN blk.N.ffn_gate.weight) into
 * m->layers, m->tok_embd, m->inv_freq (RoPE) and a new m->enc. Errors name
 * the tensor (ANVIL_ERR_FORMAT). */
anvil_status encoder_bind(struct model_loader *L, struct anvil_model *m);
void encoder_free(struct anvil_model *m);

/* Run the encoder over batch b, every sequence from position 0 and attending
 * to all of its own rows; types (n_tokens) are the token types (0, or 1 for
 * the second part of a pair), NULL for all 0. The rows whose flag is
 * ANVIL_OUT_EMBD get their final hidden state in c->embd, in row order.
 * The context's KV cache is not touched. ANVIL_ERR_INVALID (c->errmsg) for
 * a position beyond position_embd or a type beyond token_types. */
anvil_status encoder_run(struct anvil_ctx *c, const struct anvil_batch *b, const int8_t *types);

#endif
