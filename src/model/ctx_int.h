/*
 * ctx_int.h - the context's private state, shared by ctx.c (init, batch
 * validation, KV accounting, the public calls) and forward.c (the forward
 * pass). Not for use outside src/model.
 *
 * KV groups. Layers with a sliding window keep far less KV than global
 * layers, so they get a cache of their own (kv_params.window): group 0
 * holds the global layers, group 1 (when the model has both kinds) the
 * windowed ones, and a model whose every layer is windowed (Mistral) has
 * one windowed group. Every group holds every sequence at the same length;
 * ctx.c keeps them in step (reserve all or nothing, commit, truncate,
 * prefix reuse at the shortest common match).
 */
#ifndef ANVIL_CTX_INT_H
#define ANVIL_CTX_INT_H

#include "core/pool.h"
#include "attn/attn_plan.h"
#include "attn/hp1/hp1_plan.h"
#include "kv/kv_cache.h"
#include "model/ctx.h"
#include "model/model.h"

#define CTX_MAX_KV_GROUPS 2

/* Categories the forward pass times itself: ANVIL_PROF_MATMUL, _ATTN, _NORM
 * and a mixture of experts' _ROUTER, _EXPERTS, _SCATTER (the first six of
 * anvil_prof_cat). */
#define CTX_PROF_FWD 6

/* lm_head rows computed per tile: the tile stays in L1 while its argmax is
 * taken, and full-logits rows are copied out of it. */
#define LM_TILE 256

/* query rows per tile of a bidirectional model's attention */
#define BIDIR_TQ 32

struct anvil_ctx {
    struct anvil_model *m;
    struct pool *pool;
    int n_ctx, n_seq_max, n_batch, n_outputs, n_threads;
    int q_dim, kv_dim, qkv_dim, max_dim;

    int n_kv;                               /* KV groups */
    struct kv_cache *kv[CTX_MAX_KV_GROUPS];
    const struct kn_attn_ops *attn_ops[CTX_MAX_KV_GROUPS];
    const struct kn_hp1_ops *hp1_ops;       /* HP1 kernels, when a layer has HP1 attention */
    int8_t *layer_kv;                       /* (n_layer) group of each layer */
    int32_t *layer_idx;                     /* (n_layer) its layer index in the group */
    int32_t *seq_next;         /* (n_seq_max) validation scratch */
    /* the batch's runs: one per sequence, rows [run_row0, run_row0 + run_n) */
    int32_t n_runs;
    int32_t *run_seq, *run_n, *run_row0, *run_pos0; /* (n_seq_max) */
    struct kv_attn_seq *run_attn;                   /* (n_seq_max) */
    struct kv_attn_job *job;   /* this layer's attention plan */

    float *x;        /* (n_batch, n_embd) residual stream */
    float *qkv;      /* (n_batch, qkv_dim) */
    float *attn;     /* (n_batch, q_dim) */
    float *tmp;      /* (n_batch, n_embd) output of Wo / Wdown */
    float *gu;       /* (n_batch, 2*n_ff) gate then up */
    float *nrm;      /* (n_threads, max_dim) per-thread row */
    /* a bidirectional model's attention (forward.c bidir_attention): per
     * thread, the scores of BIDIR_TQ query rows over n_batch keys, then
     * V^T (head_dim, n_batch); NULL for causal models */
    float *bidir_s;
    uint8_t *act;    /* (n_batch, act_stride) activation rows */
    size_t act_stride;
    float *logits;   /* (n_outputs, n_vocab) */
    int32_t *out_row; /* (n_outputs) batch row of each output row */
    int8_t *out_full; /* (n_outputs) 1 when the full logits row is wanted */
    float *tile;      /* (n_threads, n_outputs, LM_TILE) lm_head tiles */
    float *best_v;    /* (n_threads, n_outputs) per-thread running max */
    int32_t *best_i;  /* (n_threads, n_outputs) its index */
    anvil_token *argmax; /* (n_outputs) */
    int n_logits;
    float *embd;     /* (n_outputs, n_embd) ANVIL_OUT_EMBD rows: hidden states after the output norm */
    bool out_embd;   /* this batch's output rows are embeddings: no lm_head */

    /* profiling (anvil.h anvil_ctx_set_profile): per-thread seconds of the
     * forward pass's categories, one cache line per thread */
    bool prof_on;
    struct ctx_prof_th {
        double s[CTX_PROF_FWD];
        uint64_t n_reads;                    /* clock reads */
    } __attribute__((aligned(64))) *prof_th; /* (n_threads) */
    double prof_decode_s;                    /* wall of the profiled decodes */
    uint64_t prof_n_decode;

    struct moe_scratch *moe; /* MoE buffers (model/moe.c), or NULL for a dense model */

    const struct anvil_batch *b; /* the batch being decoded */
    char errmsg[256];
};

/* Profiling: the time since *t goes to category k of this thread's
 * counters, and *t moves on to now. */
static inline void ctx_prof_mark(struct ctx_prof_th *th, int k, double *t) {
    double now = time_now_s();
    th->s[k] += now - *t;
    th->n_reads++;
    *t = now;
}

/* The forward pass of the validated batch c->b (forward.c): one pool_run. */
void forward_run(struct anvil_ctx *c);

#endif
