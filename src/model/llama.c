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
 * The KV cache here is contiguous per sequence: k_cache is
 * (n_layer, n_seq_max, n_ctx, n_head_kv*head_dim) F16, v_cache the same.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/pool.h"
#include "model/model.h"

struct anvil_ctx {
    struct anvil_model *m;
    struct pool *pool;
    int n_ctx, n_seq_max, n_batch, n_outputs, n_threads;
    int q_dim, kv_dim, qkv_dim, max_dim;

    kn_f16 *k_cache, *v_cache; /* (n_layer, n_seq_max, n_ctx, kv_dim) */
    int32_t *seq_len;          /* (n_seq_max) positions cached per sequence */
    int32_t *seq_next;         /* (n_seq_max) validation scratch */

    float *x;        /* (n_batch, n_embd) residual stream */
    float *qkv;      /* (n_batch, qkv_dim) */
    float *attn;     /* (n_batch, q_dim) */
    float *tmp;      /* (n_batch, n_embd) output of Wo / Wdown */
    float *gu;       /* (n_batch, 2*n_ff) gate then up */
    float *nrm;      /* (n_threads, max_dim) per-thread row */
    float *scores;   /* (n_threads, n_ctx) attention scores */
    uint8_t *act;    /* (n_batch, act_stride) activation rows */
    size_t act_stride;
    float *logits;   /* (n_outputs, n_vocab) */
    int32_t *out_row; /* (n_outputs) batch row of each logits row */
    int n_logits;

    const struct anvil_batch *b; /* the batch being decoded */
    char errmsg[256];
};

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
    anvil_free_aligned(c->k_cache);
    anvil_free_aligned(c->v_cache);
    anvil_free(c->seq_len);
    anvil_free(c->seq_next);
    anvil_free_aligned(c->x);
    anvil_free_aligned(c->qkv);
    anvil_free_aligned(c->attn);
    anvil_free_aligned(c->tmp);
    anvil_free_aligned(c->gu);
    anvil_free_aligned(c->nrm);
    anvil_free_aligned(c->scores);
    anvil_free_aligned(c->act);
    anvil_free_aligned(c->logits);
    anvil_free(c->out_row);
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
    size_t kv_elems;
    if (!size_mul((size_t)hp->n_layer * (size_t)c->n_seq_max, (size_t)c->n_ctx, &kv_elems) ||
        !size_mul(kv_elems, (size_t)c->kv_dim, &kv_elems)) {
        snprintf(c->errmsg, sizeof(c->errmsg), "ctx: KV cache size overflows");
        goto fail;
    }
    size_t nb = (size_t)c->n_batch;
    c->act_stride = kn_act_row_size(KN_ACT_F32, c->max_dim); /* the widest format */
    if (!(c->k_cache = alloc_array(kv_elems, sizeof(kn_f16)))) goto fail;
    if (!(c->v_cache = alloc_array(kv_elems, sizeof(kn_f16)))) goto fail;
    if (!(c->seq_len = anvil_calloc((size_t)c->n_seq_max, sizeof(int32_t)))) goto fail;
    if (!(c->seq_next = anvil_calloc((size_t)c->n_seq_max, sizeof(int32_t)))) goto fail;
    if (!(c->x = alloc_array(nb * hp->n_embd, sizeof(float)))) goto fail;
    if (!(c->qkv = alloc_array(nb * c->qkv_dim, sizeof(float)))) goto fail;
    if (!(c->attn = alloc_array(nb * c->q_dim, sizeof(float)))) goto fail;
    if (!(c->tmp = alloc_array(nb * hp->n_embd, sizeof(float)))) goto fail;
    if (!(c->gu = alloc_array(nb * 2 * (size_t)hp->n_ff, sizeof(float)))) goto fail;
    if (!(c->nrm = alloc_array((size_t)c->n_threads * c->max_dim, sizeof(float)))) goto fail;
    if (!(c->scores = alloc_array((size_t)c->n_threads * c->n_ctx, sizeof(float)))) goto fail;
    if (!(c->act = alloc_array(nb, c->act_stride))) goto fail;
    if (!(c->logits = alloc_array((size_t)c->n_outputs * hp->n_vocab, sizeof(float)))) goto fail;
    if (!(c->out_row = anvil_calloc((size_t)c->n_outputs, sizeof(int32_t)))) goto fail;
    if ((st = pool_create(c->n_threads, &c->pool)) != ANVIL_OK) goto fail;
    *out = c;
    return ANVIL_OK;
fail:
    anvil_ctx_free(c);
    return st;
}

/* ---------------------------------------------------------------------- */
/* attention (reference, contiguous cache) */

static void attend(const struct anvil_ctx *c, int l, int t, int h, float *scores) {
    const struct llama_hparams *hp = &c->m->hp;
    const struct anvil_batch *b = c->b;
    int hd = hp->head_dim, s = b->seq_id[t], n_kv = b->pos[t] + 1;
    int kvh = h / (hp->n_head / hp->n_head_kv);
    const float *q = c->qkv + (size_t)t * c->qkv_dim + (size_t)h * hd;
    size_t base = ((size_t)l * c->n_seq_max + (size_t)s) * c->n_ctx * c->kv_dim + (size_t)kvh * hd;
    const kn_f16 *kc = c->k_cache + base, *vc = c->v_cache + base;
    float scale = 1.0f / sqrtf((float)hd), mx = -INFINITY;
    for (int p = 0; p < n_kv; p++) {
        const kn_f16 *k = kc + (size_t)p * c->kv_dim;
        float dot = 0.0f;
        for (int i = 0; i < hd; i++) dot += q[i] * kn_f16_to_f32(k[i]);
        scores[p] = dot * scale;
        if (scores[p] > mx) mx = scores[p];
    }
    float sum = 0.0f;
    for (int p = 0; p < n_kv; p++) {
        scores[p] = expf(scores[p] - mx);
        sum += scores[p];
    }
    float *o = c->attn + (size_t)t * c->q_dim + (size_t)h * hd;
    for (int i = 0; i < hd; i++) o[i] = 0.0f;
    for (int p = 0; p < n_kv; p++) {
        const kn_f16 *v = vc + (size_t)p * c->kv_dim;
        float w = scores[p] / sum;
        for (int i = 0; i < hd; i++) o[i] += w * kn_f16_to_f32(v[i]);
    }
}

/* ---------------------------------------------------------------------- */
/* forward */

static void matmul_rows(const struct anvil_ctx *c, const struct wmat *w, float *y, size_t ldy,
                        int n_tokens, int ith, int nth) {
    int r0, r1;
    pool_split(w->n_out, ith, nth, 16, &r0, &r1);
    wmat_matmul(c->m->ops, w, y, ldy, c->act, c->act_stride, n_tokens, r0, r1);
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
    float *scores = c->scores + (size_t)ith * c->n_ctx;
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

        /* RoPE, then K and V into the cache */
        for (int t = t0; t < t1; t++) {
            float *q = c->qkv + (size_t)t * c->qkv_dim, *k = q + c->q_dim, *v = k + c->kv_dim;
            ops->rope(q, hp->n_head, hd, b->pos[t], m->inv_freq);
            ops->rope(k, hp->n_head_kv, hd, b->pos[t], m->inv_freq);
            size_t off = (((size_t)l * c->n_seq_max + (size_t)b->seq_id[t]) * c->n_ctx +
                          (size_t)b->pos[t]) * c->kv_dim;
            for (int i = 0; i < c->kv_dim; i++) {
                c->k_cache[off + i] = kn_f32_to_f16(k[i]);
                c->v_cache[off + i] = kn_f32_to_f16(v[i]);
            }
        }
        pool_barrier(c->pool);

        int p0, p1;
        pool_split(n * hp->n_head, ith, nth, 1, &p0, &p1);
        for (int i = p0; i < p1; i++) attend(c, l, i / hp->n_head, i % hp->n_head, scores);
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
            float *g = c->gu + (size_t)t * 2 * hp->n_ff;
            ops->silu_mul(g, g, g + hp->n_ff, hp->n_ff);
            ops->act[ly->wdown.act](c->act + (size_t)t * c->act_stride, g, hp->n_ff);
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
    matmul_rows(c, &m->output, c->logits, (size_t)hp->n_vocab, c->n_logits, ith, nth);
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
    memcpy(c->seq_next, c->seq_len, (size_t)c->n_seq_max * sizeof(int32_t));
    int n_out = 0;
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
        bool want = b->logits ? b->logits[i] != 0 : i == b->n_tokens - 1;
        if (want) {
            if (n_out == c->n_outputs) {
                snprintf(c->errmsg, sizeof(c->errmsg),
                         "decode: more than %d rows ask for logits", c->n_outputs);
                return ANVIL_ERR_INVALID;
            }
            c->out_row[n_out++] = i;
        }
    }
    c->n_logits = n_out;
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
    c->b = b;
    pool_run(c->pool, forward_worker, c);
    c->b = NULL;
    memcpy(c->seq_len, c->seq_next, (size_t)c->n_seq_max * sizeof(int32_t));
    c->errmsg[0] = '\0';
    return ANVIL_OK;
}

const float *anvil_get_logits(struct anvil_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits) return NULL;
    return c->logits + (size_t)i * c->m->hp.n_vocab;
}

int32_t anvil_n_logits(const struct anvil_ctx *c) { return c ? c->n_logits : 0; }

int32_t anvil_seq_len(const struct anvil_ctx *c, int32_t seq_id) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max) return -1;
    return c->seq_len[seq_id];
}

anvil_status anvil_seq_truncate(struct anvil_ctx *c, int32_t seq_id, int32_t pos) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max || pos < 0) return ANVIL_ERR_INVALID;
    if (pos < c->seq_len[seq_id]) c->seq_len[seq_id] = pos;
    return ANVIL_OK;
}

/* ---------------------------------------------------------------------- */
/* KV accounting (contiguous cache: one "block" is one sequence's slot) */

#include "model/ctx.h"

void ctx_kv_info(const struct anvil_ctx *c, struct ctx_kv_info *out) {
    out->blocks_total = c->n_seq_max;
    out->block_tokens = c->n_ctx;
    out->blocks_used = 0;
    for (int s = 0; s < c->n_seq_max; s++) out->blocks_used += c->seq_len[s] > 0;
}

int32_t ctx_kv_room(const struct anvil_ctx *c, int32_t seq_id) {
    if (seq_id < 0 || seq_id >= c->n_seq_max) return 0;
    return c->n_ctx - c->seq_len[seq_id];
}

int32_t ctx_n_seq_max(const struct anvil_ctx *c) { return c->n_seq_max; }
