/*
 * llama.c - the Llama forward pass over a batch of rows (token, position,
 * sequence) that may span several sequences, and the context that holds
 * the KV cache, scratch and thread pool.
 *
 * One anvil_decode is one pool_run: every thread walks the same list of
 * phases, separated by pool_barrier, and takes its share of each phase
 * (tokens for per-row ops, weight rows for matmuls, (token, head) pairs for
 * attention). Per layer:
 *
 *   act  = rmsnorm(x) * attn_norm  -> activation format   (fused; for l > 0
 *          also x += previous down-projection, in the same pass)
 *   qkv  = Wqkv act                 (one matmul over the stacked Q, K, V)
 *   RoPE on q, k; k, v -> cache (F16)
 *   attn = softmax(q k^T / sqrt(d)) v over the row's own sequence, causal
 *   x   += Wo attn ; act = rmsnorm(x) * ffn_norm -> activation format
 *   gu   = Wgu act                  (one matmul over stacked gate, up)
 *   act  = silu(gate) * up -> activation format
 *   d    = Wdown act
 *
 * then, for the rows that asked for logits only, x += d, the output norm,
 * and lm_head. No allocation happens in anvil_decode: every buffer is sized
 * in anvil_ctx_init from the model and n_batch.
 *
 * K/V live in the paged cache (src/kv): each step reserves the blocks its
 * rows need up front (all or nothing, so ANVIL_ERR_KV_FULL leaves the
 * cache untouched), writes K/V per layer, runs the batched decode /
 * split-K / tiled prefill attention driver over the block tables, and
 * commits the positions at the end.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/pool.h"
#include "kv/kv_cache.h"
#include "model/ctx.h"
#include "model/model.h"

struct anvil_ctx {
    struct anvil_model *m;
    struct pool *pool;
    int n_ctx, n_seq_max, n_batch, n_outputs, n_threads;
    int q_dim, kv_dim, qkv_dim, max_dim;

    struct kv_cache *kv;
    const struct kn_attn_ops *attn_ops;
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

    const struct anvil_batch *b; /* the batch being decoded */
    char errmsg[256];
};

/* lm_head rows computed per tile: the tile stays in L1 while its argmax is
 * taken, and full-logits rows are copied out of it. */
#define LM_TILE 256

struct anvil_ctx_params anvil_ctx_default_params(void) {
    struct anvil_ctx_params p = {0};
    return p;
}

const char *anvil_ctx_errmsg(const struct anvil_ctx *c) { return c ? c->errmsg : "no context"; }
int32_t anvil_ctx_n_ctx(const struct anvil_ctx *c) { return c->n_ctx; }

/* ---------------------------------------------------------------------- */
/* init / free */

void anvil_ctx_free(struct anvil_ctx *c) {
    if (!c) return;
    pool_free(c->pool);
    kv_free(c->kv);
    anvil_free(c->seq_next);
    anvil_free(c->run_seq);
    anvil_free(c->run_n);
    anvil_free(c->run_row0);
    anvil_free(c->run_pos0);
    anvil_free(c->run_attn);
    anvil_free_aligned(c->x);
    anvil_free_aligned(c->qkv);
    anvil_free_aligned(c->attn);
    anvil_free_aligned(c->tmp);
    anvil_free_aligned(c->gu);
    anvil_free_aligned(c->nrm);
    anvil_free_aligned(c->act);
    anvil_free_aligned(c->logits);
    anvil_free(c->out_row);
    anvil_free(c->out_full);
    anvil_free_aligned(c->tile);
    anvil_free(c->best_v);
    anvil_free(c->best_i);
    anvil_free(c->argmax);
    anvil_free(c);
}

/* Allocate count*elem bytes, 64-aligned, failing on overflow. */
static void *alloc_array(size_t count, size_t elem) {
    size_t n;
    if (!size_mul(count, elem, &n)) return NULL;
    return anvil_malloc_aligned(n);
}

anvil_status anvil_ctx_init(struct anvil_model *m, const struct anvil_ctx_params *p,
                            struct anvil_ctx **out) {
    if (!m || !out) return ANVIL_ERR_INVALID;
    struct anvil_ctx_params d = anvil_ctx_default_params();
    if (!p) p = &d;
    if (p->n_ctx < 0 || p->n_seq_max < 0 || p->n_batch < 0 || p->n_threads < 0 ||
        p->n_outputs < 0 || p->n_seq_max > 4096 || p->n_threads > 256)
        return ANVIL_ERR_INVALID;
    const struct llama_hparams *hp = &m->hp;
    struct anvil_ctx *c = anvil_calloc(1, sizeof(*c));
    if (!c) return ANVIL_ERR_NOMEM;
    c->m = m;
    c->n_ctx = p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    c->n_seq_max = p->n_seq_max ? p->n_seq_max : 1;
    c->n_batch = p->n_batch ? p->n_batch : 512;
    c->n_threads = p->n_threads ? p->n_threads : cpu_count_online();
    c->n_outputs = p->n_outputs ? p->n_outputs : c->n_seq_max;
    if (c->n_outputs > c->n_batch) c->n_outputs = c->n_batch;
    c->q_dim = hp->n_head * hp->head_dim;
    c->kv_dim = hp->n_head_kv * hp->head_dim;
    c->qkv_dim = c->q_dim + 2 * c->kv_dim;
    c->max_dim = hp->n_embd;
    if (c->q_dim > c->max_dim) c->max_dim = c->q_dim;
    if (hp->n_ff > c->max_dim) c->max_dim = hp->n_ff;

    anvil_status st = ANVIL_ERR_NOMEM;
    if (p->kv_type != 0 && p->kv_type != ANVIL_TYPE_F16 && p->kv_type != ANVIL_TYPE_Q8_0) {
        st = ANVIL_ERR_INVALID;
        snprintf(c->errmsg, sizeof(c->errmsg), "ctx: KV type must be F16 or Q8_0");
        goto fail;
    }
    c->attn_ops = kn_attn_select(m->ops->name);
    if (!c->attn_ops) {
        st = ANVIL_ERR_UNSUPPORTED;
        goto fail;
    }
    struct kv_params kp = {
        .n_layer = hp->n_layer,
        .n_head = hp->n_head,
        .n_head_kv = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .type = p->kv_type ? p->kv_type : ANVIL_TYPE_F16,
        .n_seq_max = c->n_seq_max,
        .n_ctx = c->n_ctx,
        .n_threads = c->n_threads,
        .prefix_cache = p->prefix_cache,
    };
    if (p->kv_mem > 0) {
        kp.mem_bytes = (size_t)p->kv_mem;
    } else {
        /* room for every sequence at full length */
        int32_t bs = 16;
        int64_t blocks = (int64_t)c->n_seq_max * ((c->n_ctx + bs - 1) / bs);
        if (blocks > INT32_MAX / 2) {
            st = ANVIL_ERR_INVALID;
            goto fail;
        }
        kp.n_blocks = (int32_t)blocks;
    }
    if ((st = kv_init(&kp, &c->kv, c->errmsg, sizeof(c->errmsg))) != ANVIL_OK) goto fail;
    st = ANVIL_ERR_NOMEM;
    size_t nb = (size_t)c->n_batch, ns = (size_t)c->n_seq_max;
    c->act_stride = kn_act_row_size(KN_ACT_F32, c->max_dim); /* the widest format */
    if (!(c->seq_next = anvil_calloc(ns, sizeof(int32_t)))) goto fail;
    if (!(c->run_seq = anvil_calloc(ns, sizeof(int32_t)))) goto fail;
    if (!(c->run_n = anvil_calloc(ns, sizeof(int32_t)))) goto fail;
    if (!(c->run_row0 = anvil_calloc(ns, sizeof(int32_t)))) goto fail;
    if (!(c->run_pos0 = anvil_calloc(ns, sizeof(int32_t)))) goto fail;
    if (!(c->run_attn = anvil_calloc(ns, sizeof(*c->run_attn)))) goto fail;
    if (!(c->x = alloc_array(nb * hp->n_embd, sizeof(float)))) goto fail;
    if (!(c->qkv = alloc_array(nb * c->qkv_dim, sizeof(float)))) goto fail;
    if (!(c->attn = alloc_array(nb * c->q_dim, sizeof(float)))) goto fail;
    if (!(c->tmp = alloc_array(nb * hp->n_embd, sizeof(float)))) goto fail;
    if (!(c->gu = alloc_array(nb * 2 * (size_t)hp->n_ff, sizeof(float)))) goto fail;
    if (!(c->nrm = alloc_array((size_t)c->n_threads * c->max_dim, sizeof(float)))) goto fail;
    if (!(c->act = alloc_array(nb, c->act_stride))) goto fail;
    if (!(c->logits = alloc_array((size_t)c->n_outputs * hp->n_vocab, sizeof(float)))) goto fail;
    size_t no = (size_t)c->n_outputs, nt = (size_t)c->n_threads;
    if (!(c->out_row = anvil_calloc(no, sizeof(int32_t)))) goto fail;
    if (!(c->out_full = anvil_calloc(no, sizeof(int8_t)))) goto fail;
    if (!(c->tile = alloc_array(nt * no * LM_TILE, sizeof(float)))) goto fail;
    if (!(c->best_v = anvil_calloc(nt * no, sizeof(float)))) goto fail;
    if (!(c->best_i = anvil_calloc(nt * no, sizeof(int32_t)))) goto fail;
    if (!(c->argmax = anvil_calloc(no, sizeof(anvil_token)))) goto fail;
    if ((st = pool_create(c->n_threads, &c->pool)) != ANVIL_OK) goto fail;
    *out = c;
    return ANVIL_OK;
fail:
    anvil_ctx_free(c);
    return st;
}

/* ---------------------------------------------------------------------- */
/* forward */

static void matmul_rows(const struct anvil_ctx *c, const struct wmat *w, float *y, size_t ldy,
                        int n_tokens, int ith, int nth) {
    int r0, r1;
    pool_split(w->n_out, ith, nth, 16, &r0, &r1);
    wmat_matmul(c->m->ops, w, y, ldy, c->act, c->act_stride, n_tokens, r0, r1);
}

/* lm_head over this thread's vocabulary rows, LM_TILE rows at a time:
 * full-logits rows are copied out, and every row's running argmax is kept
 * per thread; thread 0 merges them after a barrier (lowest id wins ties, as
 * a left-to-right scan would). */
static void lm_head(struct anvil_ctx *c, int ith, int nth) {
    const struct anvil_model *m = c->m;
    int n_vocab = m->hp.n_vocab, no = c->n_logits;
    int r0, r1;
    pool_split(n_vocab, ith, nth, 16, &r0, &r1);
    float *tile = c->tile + (size_t)ith * c->n_outputs * LM_TILE;
    float *bv = c->best_v + (size_t)ith * c->n_outputs;
    int32_t *bi = c->best_i + (size_t)ith * c->n_outputs;
    for (int o = 0; o < no; o++) {
        bv[o] = -INFINITY;
        bi[o] = -1;
    }
    for (int a = r0; a < r1; a += LM_TILE) {
        int b = a + LM_TILE < r1 ? a + LM_TILE : r1;
        wmat_matmul_tile(m->ops, &m->output, tile, LM_TILE, c->act, c->act_stride, no, a, b);
        for (int o = 0; o < no; o++) {
            const float *y = tile + (size_t)o * LM_TILE;
            for (int r = 0; r < b - a; r++)
                if (y[r] > bv[o]) { /* NaN never wins */
                    bv[o] = y[r];
                    bi[o] = a + r;
                }
            if (c->out_full[o])
                memcpy(c->logits + (size_t)o * n_vocab + a, y, (size_t)(b - a) * sizeof(float));
        }
    }
    pool_barrier(c->pool);
    if (ith != 0) return;
    for (int o = 0; o < no; o++) {
        float v = -INFINITY;
        int32_t best = -1;
        for (int t = 0; t < nth; t++) {
            float tv = c->best_v[(size_t)t * c->n_outputs + o];
            int32_t ti = c->best_i[(size_t)t * c->n_outputs + o];
            if (ti >= 0 && (best < 0 || tv > v)) { /* threads hold increasing ranges */
                v = tv;
                best = ti;
            }
        }
        c->argmax[o] = best;
    }
}

static void forward_worker(void *arg, int ith, int nth) {
    struct anvil_ctx *c = arg;
    const struct anvil_model *m = c->m;
    const struct llama_hparams *hp = &m->hp;
    const struct kn_ops *ops = m->ops;
    const struct anvil_batch *b = c->b;
    int n = b->n_tokens, ne = hp->n_embd, hd = hp->head_dim;
    float eps = hp->norm_eps;
    float *nrm = c->nrm + (size_t)ith * c->max_dim;
    int t0, t1;
    pool_split(n, ith, nth, 1, &t0, &t1);

    for (int t = t0; t < t1; t++)
        kn_dequantize_row(m->tok_embd_type, m->tok_embd + (size_t)b->token[t] * m->tok_embd_row_bytes,
                          c->x + (size_t)t * ne, ne);

    for (int l = 0; l < hp->n_layer; l++) {
        const struct llama_layer *ly = &m->layers[l];
        /* attention norm (fused with the previous layer's residual add) */
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * ne;
            uint8_t *a = c->act + (size_t)t * c->act_stride;
            if (l == 0) {
                ops->rmsnorm_act(a, x, ly->attn_norm, ne, eps, ly->wqkv.act);
            } else {
                ops->add_rmsnorm(x, c->tmp + (size_t)t * ne, nrm, ly->attn_norm, ne, eps);
                ops->act[ly->wqkv.act](a, nrm, ne);
            }
        }
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wqkv, c->qkv, (size_t)c->qkv_dim, n, ith, nth);
        pool_barrier(c->pool);

        /* RoPE on this thread's rows, then their K and V into the cache */
        for (int t = t0; t < t1; t++) {
            float *q = c->qkv + (size_t)t * c->qkv_dim, *k = q + c->q_dim;
            ops->rope(q, hp->n_head, hd, b->pos[t], m->inv_freq);
            ops->rope(k, hp->n_head_kv, hd, b->pos[t], m->inv_freq);
        }
        for (int r = 0; r < c->n_runs; r++) {
            int a0 = c->run_row0[r], a1 = a0 + c->run_n[r];
            int lo = a0 > t0 ? a0 : t0, hi = a1 < t1 ? a1 : t1;
            if (lo >= hi) continue;
            const float *k = c->qkv + (size_t)lo * c->qkv_dim + c->q_dim;
            kv_write(c->kv, l, c->run_seq[r], b->pos[lo], hi - lo, k, (size_t)c->qkv_dim,
                     k + c->kv_dim, (size_t)c->qkv_dim);
        }
        /* attention: planned by thread 0 in the same phase (the plan reads
         * only block tables and positions, never the K/V being written),
         * run by all */
        if (ith == 0) {
            anvil_status ast = kv_attn_prepare(c->kv, c->attn_ops, l, c->run_attn, c->n_runs,
                                               (size_t)c->qkv_dim, (size_t)c->q_dim, nth,
                                               KV_SPLIT_AUTO, &c->job);
            ANVIL_ASSERT(ast == ANVIL_OK);
        }
        pool_barrier(c->pool);
        kv_attn_work(c->job, c->pool, ith, nth);
        pool_barrier(c->pool);

        for (int t = t0; t < t1; t++)
            ops->act[ly->wo.act](c->act + (size_t)t * c->act_stride, c->attn + (size_t)t * c->q_dim,
                                 c->q_dim);
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wo, c->tmp, (size_t)ne, n, ith, nth);
        pool_barrier(c->pool);

        /* x += attention output; FFN norm */
        for (int t = t0; t < t1; t++) {
            ops->add_rmsnorm(c->x + (size_t)t * ne, c->tmp + (size_t)t * ne, nrm, ly->ffn_norm, ne,
                             eps);
            ops->act[ly->wgu.act](c->act + (size_t)t * c->act_stride, nrm, ne);
        }
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wgu, c->gu, 2 * (size_t)hp->n_ff, n, ith, nth);
        pool_barrier(c->pool);

        for (int t = t0; t < t1; t++) {
            const float *g = c->gu + (size_t)t * 2 * hp->n_ff;
            ops->silu_mul_act(c->act + (size_t)t * c->act_stride, g, g + hp->n_ff, hp->n_ff,
                              ly->wdown.act);
        }
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wdown, c->tmp, (size_t)ne, n, ith, nth);
        pool_barrier(c->pool);
    }

    /* final residual add and output norm, for the logits rows only */
    int o0, o1;
    pool_split(c->n_logits, ith, nth, 1, &o0, &o1);
    for (int o = o0; o < o1; o++) {
        int t = c->out_row[o];
        ops->add_rmsnorm(c->x + (size_t)t * ne, c->tmp + (size_t)t * ne, nrm, m->output_norm, ne,
                         eps);
        ops->act[m->output.act](c->act + (size_t)o * c->act_stride, nrm, ne);
    }
    pool_barrier(c->pool);
    lm_head(c, ith, nth);
}

/* Check the whole batch before touching any state, so a rejected batch
 * leaves the cache exactly as it was. */
static anvil_status validate(struct anvil_ctx *c, const struct anvil_batch *b) {
    const struct llama_hparams *hp = &c->m->hp;
    if (!b || b->n_tokens < 1 || !b->token || !b->pos || !b->seq_id) {
        snprintf(c->errmsg, sizeof(c->errmsg), "decode: empty batch");
        return ANVIL_ERR_INVALID;
    }
    if (b->n_tokens > c->n_batch) {
        snprintf(c->errmsg, sizeof(c->errmsg), "decode: %d rows exceed n_batch %d", b->n_tokens,
                 c->n_batch);
        return ANVIL_ERR_INVALID;
    }
    for (int s = 0; s < c->n_seq_max; s++) c->seq_next[s] = -1; /* not seen yet */
    int n_out = 0;
    c->n_runs = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq_id[i];
        if (b->token[i] < 0 || b->token[i] >= hp->n_vocab) {
            snprintf(c->errmsg, sizeof(c->errmsg), "decode: token id %d out of range [0, %d)",
                     b->token[i], hp->n_vocab);
            return ANVIL_ERR_INVALID;
        }
        if (s < 0 || s >= c->n_seq_max) {
            snprintf(c->errmsg, sizeof(c->errmsg), "decode: sequence id %d out of range [0, %d)",
                     s, c->n_seq_max);
            return ANVIL_ERR_INVALID;
        }
        if (c->seq_next[s] < 0) {
            /* first row of this sequence: a new run */
            c->seq_next[s] = kv_seq_len(c->kv, s);
            int r = c->n_runs++;
            c->run_seq[r] = s;
            c->run_row0[r] = i;
            c->run_n[r] = 0;
            c->run_pos0[r] = b->pos[i];
        } else if (b->seq_id[i - 1] != s) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "decode: the rows of sequence %d are not consecutive in the batch", s);
            return ANVIL_ERR_INVALID;
        }
        if (b->pos[i] != c->seq_next[s]) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "decode: row %d has position %d, sequence %d continues at %d", i, b->pos[i],
                     s, c->seq_next[s]);
            return ANVIL_ERR_INVALID;
        }
        if (b->pos[i] >= c->n_ctx) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "decode: sequence %d is full (context of %d positions)", s, c->n_ctx);
            return ANVIL_ERR_KV_FULL;
        }
        c->seq_next[s]++;
        c->run_n[c->n_runs - 1]++;
        int out = b->logits ? b->logits[i] : (i == b->n_tokens - 1 ? ANVIL_OUT_LOGITS : 0);
        if (out < ANVIL_OUT_NONE || out > ANVIL_OUT_ARGMAX) {
            snprintf(c->errmsg, sizeof(c->errmsg), "decode: row %d asks for output kind %d", i,
                     out);
            return ANVIL_ERR_INVALID;
        }
        if (out != ANVIL_OUT_NONE) {
            if (n_out == c->n_outputs) {
                snprintf(c->errmsg, sizeof(c->errmsg),
                         "decode: more than %d rows ask for logits", c->n_outputs);
                return ANVIL_ERR_INVALID;
            }
            c->out_full[n_out] = out == ANVIL_OUT_LOGITS;
            c->out_row[n_out++] = i;
        }
    }
    c->n_logits = n_out;
    for (int r = 0; r < c->n_runs; r++) {
        c->run_attn[r] = (struct kv_attn_seq){
            .seq = c->run_seq[r],
            .pos = c->run_pos0[r],
            .n_tokens = c->run_n[r],
            .q = c->qkv + (size_t)c->run_row0[r] * c->qkv_dim,
            .out = c->attn + (size_t)c->run_row0[r] * c->q_dim,
        };
    }
    return ANVIL_OK;
}

anvil_status anvil_decode(struct anvil_ctx *c, const struct anvil_batch *b) {
    if (!c) return ANVIL_ERR_INVALID;
    c->n_logits = 0;
    anvil_status st = validate(c, b);
    if (st != ANVIL_OK) {
        c->n_logits = 0;
        return st;
    }
    /* all blocks for all runs, or nothing (run_pos0 as scratch for counts
     * would clash; run_n is exactly the per-sequence count) */
    st = kv_reserve(c->kv, c->n_runs, c->run_seq, c->run_n);
    if (st != ANVIL_OK) {
        c->n_logits = 0;
        snprintf(c->errmsg, sizeof(c->errmsg), "decode: %s",
                 st == ANVIL_ERR_KV_FULL ? "the KV cache has no free blocks left"
                                         : "a sequence would pass the context length");
        return st == ANVIL_ERR_INVALID ? ANVIL_ERR_KV_FULL : st;
    }
    c->b = b;
    pool_run(c->pool, forward_worker, c);
    c->b = NULL;
    for (int r = 0; r < c->n_runs; r++) {
        st = kv_seq_commit(c->kv, c->run_seq[r], c->run_n[r], b->token + c->run_row0[r]);
        ANVIL_ASSERT(st == ANVIL_OK);
    }
    c->errmsg[0] = '\0';
    return ANVIL_OK;
}

const float *anvil_get_logits(struct anvil_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits || !c->out_full[i]) return NULL;
    return c->logits + (size_t)i * c->m->hp.n_vocab;
}

anvil_token anvil_get_argmax(struct anvil_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits) return -1;
    return c->argmax[i];
}

int32_t anvil_n_logits(const struct anvil_ctx *c) { return c ? c->n_logits : 0; }

int32_t anvil_seq_len(const struct anvil_ctx *c, int32_t seq_id) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max) return -1;
    return kv_seq_len(c->kv, seq_id);
}

anvil_status anvil_seq_truncate(struct anvil_ctx *c, int32_t seq_id, int32_t pos) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max || pos < 0) return ANVIL_ERR_INVALID;
    int32_t len = kv_seq_len(c->kv, seq_id);
    return kv_seq_truncate(c->kv, seq_id, pos < len ? pos : len);
}

int32_t anvil_seq_reuse_prefix(struct anvil_ctx *c, int32_t seq_id, const anvil_token *tokens,
                               int32_t n) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max || !tokens || n < 2 ||
        kv_seq_len(c->kv, seq_id) != 0)
        return 0;
    return kv_seq_match(c->kv, seq_id, tokens, n - 1);
}

/* ---------------------------------------------------------------------- */
/* KV accounting for the scheduler */

void ctx_kv_info(const struct anvil_ctx *c, struct ctx_kv_info *out) {
    struct kv_stats st;
    kv_get_stats(c->kv, &st);
    out->blocks_total = st.n_blocks;
    out->blocks_used = st.n_used;
    out->block_tokens = st.block_size;
}

int64_t ctx_kv_pool_room(const struct anvil_ctx *c) {
    struct kv_stats st;
    kv_get_stats(c->kv, &st);
    return (int64_t)kv_n_available(c->kv) * st.block_size;
}
