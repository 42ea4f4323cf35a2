/*
 * ctx.c - the context: KV cache groups, scratch and thread pool sized once
 * from the model and the parameters; batch validation; the public decode
 * call and the sequence calls; KV accounting for the scheduler.
 *
 * An encoder's context (m->enc) has no KV groups (n_kv 0) and no logits
 * scratch: its batches hold whole sequences and read keys and values from
 * their own rows (encoder.c); its sequences are always empty.
 *
 * The forward pass itself is forward.c. Nothing here allocates after
 * anvil_ctx_init: anvil_decode validates the whole batch first (so a
 * rejected batch leaves every cache exactly as it was), reserves the KV
 * blocks of every group all or nothing, runs the pass and commits.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "model/ctx_int.h"
#include "model/moe.h"

struct anvil_ctx_params anvil_ctx_default_params(void) {
    struct anvil_ctx_params p = {0};
    return p;
}

const char *anvil_ctx_errmsg(const struct anvil_ctx *c) { return c ? c->errmsg : "no context"; }
int32_t anvil_ctx_n_ctx(const struct anvil_ctx *c) { return c->n_ctx; }

/* ---------------------------------------------------------------------- */
/* KV groups */

/* KV bytes of one position of one layer. */
static int64_t layer_pos_bytes(const struct model_hparams *hp, int kv_type) {
    int64_t per = 2 * (int64_t)hp->n_head_kv * hp->head_dim;
    return kv_type == ANVIL_TYPE_Q8_0 ? per * 34 / 32 : per * 2;
}

/* Positions a windowed layer keeps per sequence at most when it grows by
 * up to `step` positions at a time (kv_cache.h: window + slack + the step,
 * a block of misalignment at each end), and never more than n_ctx. */
static int64_t window_positions(int window, int64_t step, int64_t n_ctx, int block) {
    int64_t w = ((int64_t)window + KV_WINDOW_SLACK + step + block - 1) / block * block + 2 * block;
    return w < n_ctx ? w : n_ctx;
}

int64_t ctx_model_kv_bytes(const struct anvil_model *m, int kv_type, int64_t n_ctx, int64_t n_seq,
                           int64_t step) {
    const struct model_hparams *hp = &m->hp;
    int64_t per = layer_pos_bytes(hp, kv_type), total = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int w = m->layers[l].n_swa;
        total += per * (w > 0 ? window_positions(w, step, n_ctx, 16) : n_ctx);
    }
    return total * n_seq;
}

double ctx_model_row_cost(const struct anvil_model *m, int32_t pos) {
    const struct model_hparams *hp = &m->hp;
    double w = 0.0, a = 0.0;
    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *ly = &m->layers[l];
        w += (double)ly->wqkv.n_in * ly->wqkv.n_out + (double)ly->wo.n_in * ly->wo.n_out +
             (double)ly->wgu.n_in * ly->wgu.n_out + (double)ly->wdown.n_in * ly->wdown.n_out;
        if (ly->moe) /* the chosen experts, the router and the shared expert */
            w += (double)hp->n_expert_used * 3.0 * hp->n_ff_exp * hp->n_embd +
                 (double)hp->n_expert * hp->n_embd + 3.0 * hp->n_ff_shexp * hp->n_embd;
        int32_t keys = ly->n_swa > 0 && ly->n_swa < pos + 1 ? ly->n_swa : pos + 1;
        a += 2.0 * keys * hp->n_head * hp->head_dim;
    }
    return w + 2.0 * a;
}

int64_t anvil_model_kv_bytes(const struct anvil_model *m, int kv_type, int32_t n_ctx, bool windowed) {
    if (!m || n_ctx < 0) return 0;
    if (kv_type != ANVIL_TYPE_Q8_0) kv_type = ANVIL_TYPE_F16;
    if (windowed) return ctx_model_kv_bytes(m, kv_type, n_ctx, 1, 0);
    return (int64_t)m->hp.n_layer * layer_pos_bytes(&m->hp, kv_type) * n_ctx;
}

/* ---------------------------------------------------------------------- */
/* init / free */

void anvil_ctx_free(struct anvil_ctx *c) {
    if (!c) return;
    pool_free(c->pool);
    for (int g = 0; g < CTX_MAX_KV_GROUPS; g++) kv_free(c->kv[g]);
    core_free(c->layer_kv);
    core_free(c->layer_idx);
    core_free(c->seq_next);
    core_free(c->run_seq);
    core_free(c->run_n);
    core_free(c->run_row0);
    core_free(c->run_pos0);
    core_free(c->run_attn);
    core_free_aligned(c->x);
    core_free_aligned(c->qkv);
    core_free_aligned(c->attn);
    core_free_aligned(c->tmp);
    core_free_aligned(c->gu);
    moe_ctx_free(c);
    core_free_aligned(c->nrm);
    core_free_aligned(c->bidir_s);
    core_free_aligned(c->act);
    core_free_aligned(c->logits);
    core_free(c->out_row);
    core_free(c->out_full);
    core_free_aligned(c->embd);
    core_free_aligned(c->tile);
    core_free(c->best_v);
    core_free(c->best_i);
    core_free(c->argmax);
    core_free_aligned(c->prof_th);
    core_free(c);
}

/* Allocate count*elem bytes, 64-aligned, failing on overflow. */
static void *alloc_array(size_t count, size_t elem) {
    size_t n;
    if (!size_mul(count, elem, &n)) return NULL;
    return core_malloc_aligned(n);
}

/* Split the layers into KV groups (ctx_int.h) and create the caches. The
 * pool budget kv_mem (0: every sequence at full length) is shared between
 * the groups in proportion to what a full-length sequence needs in each. */
static anvil_status init_kv(struct anvil_ctx *c, const struct anvil_ctx_params *p) {
    const struct anvil_model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    int kv_type = p->kv_type ? p->kv_type : ANVIL_TYPE_F16;
    int n_layers[CTX_MAX_KV_GROUPS] = {0, 0}, window[CTX_MAX_KV_GROUPS] = {0, 0};
    bool has_global = false, has_local = false;
    for (int l = 0; l < hp->n_layer; l++) {
        if (m->layers[l].n_swa > 0) has_local = true;
        else has_global = true;
    }
    c->n_kv = has_global && has_local ? 2 : 1;
    for (int l = 0; l < hp->n_layer; l++) {
        int g = has_global && m->layers[l].n_swa > 0 ? 1 : 0;
        c->layer_kv[l] = (int8_t)g;
        c->layer_idx[l] = n_layers[g]++;
        window[g] = m->layers[l].n_swa;
    }
    const int32_t bs = 16;
    double need[CTX_MAX_KV_GROUPS], need_total = 0.0;
    for (int g = 0; g < c->n_kv; g++) {
        int64_t pos = window[g] > 0 ? window_positions(window[g], c->n_batch, c->n_ctx, bs) : c->n_ctx;
        need[g] = (double)n_layers[g] * (double)layer_pos_bytes(hp, kv_type) * (double)pos;
        need_total += need[g];
    }
    for (int g = 0; g < c->n_kv; g++) {
        struct kv_params kp = {
            .n_layer = n_layers[g],
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .head_dim = hp->head_dim,
            .type = kv_type,
            .block_size = bs,
            .n_seq_max = c->n_seq_max,
            .n_ctx = c->n_ctx,
            .n_threads = c->n_threads,
            .prefix_cache = p->prefix_cache,
            .f16_row = m->ops->f16_row,
            .window = window[g] < c->n_ctx ? window[g] : 0, /* a window past n_ctx is none */
        };
        if (p->kv_mem > 0) {
            kp.mem_bytes = (size_t)((double)p->kv_mem * need[g] / need_total);
            if (kp.mem_bytes < kv_block_bytes(&kp)) kp.mem_bytes = kv_block_bytes(&kp);
        } else {
            /* room for every sequence at full length (the window's worth
             * for a windowed group, plus one step of n_batch new rows:
             * blocks are trimmed after the step that wrote them) */
            int64_t per_seq = (c->n_ctx + bs - 1) / bs;
            int64_t extra = 0;
            if (kp.window > 0) {
                per_seq = window_positions(kp.window, 0, c->n_ctx, bs) / bs + 1;
                extra = (c->n_batch + bs - 1) / bs;
            }
            int64_t blocks = (int64_t)c->n_seq_max * per_seq + extra;
            if (blocks > INT32_MAX / 2) {
                snprintf(c->errmsg, sizeof(c->errmsg),
                         "ctx: %d sequences of %d positions need more than %d KV blocks",
                         c->n_seq_max, c->n_ctx, INT32_MAX / 2);
                return ANVIL_ERR_INVALID;
            }
            kp.n_blocks = (int32_t)blocks;
        }
        anvil_status st = kv_init(&kp, &c->kv[g], c->errmsg, sizeof(c->errmsg));
        if (st != ANVIL_OK) return st;
        /* the attention plan now, so that no decode step allocates */
        st = kv_attn_plan_init(c->kv[g], c->errmsg, sizeof(c->errmsg));
        if (st != ANVIL_OK) return st;
        c->attn_ops[g] = kn_attn_select(m->ops->name);
        if (c->attn_ops[g] && kp.window > 0 && !c->attn_ops[g]->window)
            c->attn_ops[g] = &kn_attn_ops_avx2; /* every AVX-512 CPU runs it */
        if (!c->attn_ops[g]) {
            snprintf(c->errmsg, sizeof(c->errmsg), "ctx: no attention kernels for family %s",
                     m->ops->name);
            return ANVIL_ERR_UNSUPPORTED;
        }
    }
    return ANVIL_OK;
}

anvil_status anvil_ctx_init(struct anvil_model *m, const struct anvil_ctx_params *p,
                            struct anvil_ctx **out, char *err, size_t err_cap) {
    if (err && err_cap) err[0] = '\0';
    if (!m || !out) {
        errmsg_set(err, err_cap, "ctx: model and out are required");
        return ANVIL_ERR_INVALID;
    }
    struct anvil_ctx_params d = anvil_ctx_default_params();
    if (!p) p = &d;
    if (p->n_ctx < 0 || p->n_seq_max < 0 || p->n_batch < 0 || p->n_threads < 0 ||
        p->n_outputs < 0 || p->n_seq_max > 4096 || p->n_threads > 256 || p->kv_mem < 0) {
        errmsg_set(err, err_cap,
                   "ctx: parameters out of range (n_ctx %d, n_seq_max %d (<= 4096), n_batch %d, "
                   "n_threads %d (<= 256), n_outputs %d, kv_mem %lld)",
                   p->n_ctx, p->n_seq_max, p->n_batch, p->n_threads, p->n_outputs,
                   (long long)p->kv_mem);
        return ANVIL_ERR_INVALID;
    }
    if (!m->layers) {
        errmsg_set(err, err_cap, "ctx: the model is a vocabulary only (anvil_model_load_vocab)");
        return ANVIL_ERR_INVALID;
    }
    const struct model_hparams *hp = &m->hp;
    struct anvil_ctx *c = core_calloc(1, sizeof(*c));
    if (!c) {
        errmsg_set(err, err_cap, "ctx: out of memory (the context struct)");
        return ANVIL_ERR_NOMEM;
    }
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
    if (hp->n_ff_exp > c->max_dim) c->max_dim = hp->n_ff_exp;
    if (hp->n_ff_shexp > c->max_dim) c->max_dim = hp->n_ff_shexp;

    anvil_status st = ANVIL_ERR_NOMEM;
    const char *what = "";
    if (p->kv_type != 0 && p->kv_type != ANVIL_TYPE_F16 && p->kv_type != ANVIL_TYPE_Q8_0) {
        st = ANVIL_ERR_INVALID;
        snprintf(c->errmsg, sizeof(c->errmsg), "ctx: KV type must be F16 or Q8_0");
        goto fail;
    }
    size_t nb = (size_t)c->n_batch, ns = (size_t)c->n_seq_max, nl = (size_t)hp->n_layer;
#define ALLOC(ptr, expr, name) \
    do { \
        if (!((ptr) = (expr))) { \
            what = name; \
            goto nomem; \
        } \
    } while (0)
    ALLOC(c->layer_kv, core_calloc(nl, sizeof(int8_t)), "layer table");
    ALLOC(c->layer_idx, core_calloc(nl, sizeof(int32_t)), "layer table");
    /* an encoder (model/encoder.c) reads keys and values from its batch's
     * own qkv rows and has no lm_head: no KV groups, no logits scratch */
    bool enc = m->enc != NULL;
    if (!enc && (st = init_kv(c, p)) != ANVIL_OK) goto fail;
    if (!enc && m->n_hp1 > 0 && !(c->hp1_ops = kn_hp1_select(m->ops->name))) {
        st = ANVIL_ERR_UNSUPPORTED;
        snprintf(c->errmsg, sizeof(c->errmsg), "ctx: no HP1 attention kernels for family %s",
                 m->ops->name);
        goto fail;
    }
    st = ANVIL_ERR_NOMEM;
    c->act_stride = kn_act_row_size(KN_ACT_F32, c->max_dim); /* the widest format */
    ALLOC(c->seq_next, core_calloc(ns, sizeof(int32_t)), "sequence tables");
    ALLOC(c->run_seq, core_calloc(ns, sizeof(int32_t)), "sequence tables");
    ALLOC(c->run_n, core_calloc(ns, sizeof(int32_t)), "sequence tables");
    ALLOC(c->run_row0, core_calloc(ns, sizeof(int32_t)), "sequence tables");
    ALLOC(c->run_pos0, core_calloc(ns, sizeof(int32_t)), "sequence tables");
    ALLOC(c->run_attn, core_calloc(ns, sizeof(*c->run_attn)), "sequence tables");
    ALLOC(c->x, alloc_array(nb * hp->n_embd, sizeof(float)), "activations");
    ALLOC(c->qkv, alloc_array(nb * c->qkv_dim, sizeof(float)), "activations");
    ALLOC(c->attn, alloc_array(nb * c->q_dim, sizeof(float)), "activations");
    ALLOC(c->tmp, alloc_array(nb * hp->n_embd, sizeof(float)), "activations");
    size_t gu_w = enc && hp->act != MODEL_ACT_SILU ? 1 : 2; /* BERT's FFN: up only */
    ALLOC(c->gu, alloc_array(nb * gu_w * (size_t)hp->n_ff, sizeof(float)), "activations");
    ALLOC(c->nrm, alloc_array((size_t)c->n_threads * c->max_dim, sizeof(float)), "activations");
    if (hp->bidir)
        ALLOC(c->bidir_s, alloc_array((size_t)c->n_threads * ((size_t)BIDIR_TQ + hp->head_dim) * nb,
                                      sizeof(float)), "attention scratch");
    ALLOC(c->act, alloc_array(nb, c->act_stride), "activations");
    size_t no = (size_t)c->n_outputs, nt = (size_t)c->n_threads;
    if (!enc) {
        ALLOC(c->logits, alloc_array(no * hp->n_vocab, sizeof(float)), "logits");
        ALLOC(c->out_row, core_calloc(no, sizeof(int32_t)), "output tables");
        ALLOC(c->out_full, core_calloc(no, sizeof(int8_t)), "output tables");
        ALLOC(c->tile, alloc_array(nt * no * LM_TILE, sizeof(float)), "lm_head tiles");
        ALLOC(c->best_v, core_calloc(nt * no, sizeof(float)), "output tables");
        ALLOC(c->best_i, core_calloc(nt * no, sizeof(int32_t)), "output tables");
        ALLOC(c->argmax, core_calloc(no, sizeof(anvil_token)), "output tables");
    }
    ALLOC(c->embd, alloc_array(no * hp->n_embd, sizeof(float)), "embeddings");
    ALLOC(c->prof_th, alloc_array(nt, sizeof(*c->prof_th)), "profile counters");
    memset(c->prof_th, 0, nt * sizeof(*c->prof_th));
#undef ALLOC
    if ((st = moe_ctx_init(c)) != ANVIL_OK) goto fail;
    if ((st = pool_create(c->n_threads, &c->pool)) != ANVIL_OK) {
        snprintf(c->errmsg, sizeof(c->errmsg), "ctx: cannot start %d threads", c->n_threads);
        goto fail;
    }
    *out = c;
    return ANVIL_OK;
nomem:
    snprintf(c->errmsg, sizeof(c->errmsg),
             "ctx: out of memory allocating the %s (n_batch %d, n_seq_max %d, n_outputs %d, "
             "n_vocab %d)",
             what, c->n_batch, c->n_seq_max, c->n_outputs, hp->n_vocab);
fail:
    errmsg_set(err, err_cap, "%s", c->errmsg[0] ? c->errmsg : anvil_status_str(st));
    anvil_ctx_free(c);
    return st;
}

/* ---------------------------------------------------------------------- */
/* batch validation */

/* Check the whole batch before touching any state, so a rejected batch
 * leaves the caches exactly as they were. */
static anvil_status validate(struct anvil_ctx *c, const struct anvil_batch *b) {
    const struct model_hparams *hp = &c->m->hp;
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
            c->seq_next[s] = kv_seq_len(c->kv[0], s);
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
        if (hp->bidir && c->run_row0[c->n_runs - 1] == i && b->pos[i] != 0) {
            /* attention over the whole sequence: all of it in this batch */
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "decode: the model attends both ways (%s): a batch holds whole sequences "
                     "from position 0 (row %d has position %d)", c->m->arch->name, i, b->pos[i]);
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
        if (out < ANVIL_OUT_NONE || out > ANVIL_OUT_EMBD) {
            snprintf(c->errmsg, sizeof(c->errmsg), "decode: row %d asks for output kind %d", i,
                     out);
            return ANVIL_ERR_INVALID;
        }
        if (hp->bidir && out != ANVIL_OUT_NONE && out != ANVIL_OUT_EMBD) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "decode: the model (%s) embeds (anvil_embed), it does not generate: row %d "
                     "asks for logits", c->m->arch->name, i);
            return ANVIL_ERR_UNSUPPORTED;
        }
        if (out != ANVIL_OUT_NONE) {
            if (n_out == c->n_outputs) {
                snprintf(c->errmsg, sizeof(c->errmsg),
                         "decode: more than %d rows ask for logits", c->n_outputs);
                return ANVIL_ERR_INVALID;
            }
            if (n_out > 0 && (out == ANVIL_OUT_EMBD) != c->out_embd) {
                snprintf(c->errmsg, sizeof(c->errmsg),
                         "decode: row %d mixes embedding and logits outputs in one batch", i);
                return ANVIL_ERR_INVALID;
            }
            c->out_embd = out == ANVIL_OUT_EMBD;
            c->out_full[n_out] = out == ANVIL_OUT_LOGITS;
            c->out_row[n_out++] = i;
        }
    }
    if (n_out == 0) c->out_embd = false;
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

/* Reserve the batch's positions in every group, all or nothing. */
static anvil_status reserve(struct anvil_ctx *c) {
    for (int g = 0; g < c->n_kv; g++) {
        anvil_status st = kv_reserve(c->kv[g], c->n_runs, c->run_seq, c->run_n);
        if (st == ANVIL_OK) continue;
        /* give back what the earlier groups reserved */
        for (int h = 0; h < g; h++)
            for (int r = 0; r < c->n_runs; r++)
                (void)kv_seq_truncate(c->kv[h], c->run_seq[r], kv_seq_len(c->kv[h], c->run_seq[r]));
        snprintf(c->errmsg, sizeof(c->errmsg), "decode: %s",
                 st == ANVIL_ERR_KV_FULL ? "the KV cache has no free blocks left"
                                         : "a sequence would pass the context length");
        return st == ANVIL_ERR_INVALID ? ANVIL_ERR_KV_FULL : st;
    }
    return ANVIL_OK;
}

static anvil_status decode(struct anvil_ctx *c, const struct anvil_batch *b) {
    c->n_logits = 0;
    anvil_status st = validate(c, b);
    if (st != ANVIL_OK) {
        c->n_logits = 0;
        return st;
    }
    if ((st = reserve(c)) != ANVIL_OK) {
        c->n_logits = 0;
        return st;
    }
    c->b = b;
    forward_run(c);
    c->b = NULL;
    for (int g = 0; g < c->n_kv; g++)
        for (int r = 0; r < c->n_runs; r++) {
            st = kv_seq_commit(c->kv[g], c->run_seq[r], c->run_n[r], b->token + c->run_row0[r]);
            ANVIL_ASSERT(st == ANVIL_OK);
        }
    c->errmsg[0] = '\0';
    return ANVIL_OK;
}

anvil_status anvil_decode(struct anvil_ctx *c, const struct anvil_batch *b) {
    if (!c) return ANVIL_ERR_INVALID;
    if (c->m->enc) { /* model/encoder.c: anvil_embed runs it */
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "decode: the model is an encoder: it embeds (anvil_embed), it does not "
                 "generate");
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (!c->prof_on) return decode(c, b);
    double t0 = time_now_s();
    anvil_status st = decode(c, b);
    c->prof_decode_s += time_now_s() - t0;
    c->prof_n_decode++;
    return st;
}

/* ---------------------------------------------------------------------- */
/* profiling */

void anvil_ctx_set_profile(struct anvil_ctx *c, bool on) {
    if (!c) return;
    if (on && !c->prof_on) {
        memset(c->prof_th, 0, (size_t)c->n_threads * sizeof(*c->prof_th));
        c->prof_decode_s = 0.0;
        c->prof_n_decode = 0;
        moe_route_reset(c);
    }
    c->prof_on = on;
}

void anvil_ctx_get_profile(const struct anvil_ctx *c, struct anvil_prof *out) {
    memset(out, 0, sizeof(*out));
    if (!c) return;
    double fwd = 0.0;
    for (int k = 0; k < CTX_PROF_FWD; k++) { /* the first CTX_PROF_FWD categories */
        double sum = 0.0;
        for (int t = 0; t < c->n_threads; t++) sum += c->prof_th[t].s[k];
        out->s[k] = sum / c->n_threads; /* every thread ran every phase */
        fwd += out->s[k];
    }
    out->s[ANVIL_PROF_DECODE] = c->prof_decode_s > fwd ? c->prof_decode_s - fwd : 0.0;
    out->total_s = c->prof_decode_s;
    out->n_calls = c->prof_n_decode;
    uint64_t reads = 0;
    for (int t = 0; t < c->n_threads; t++)
        reads = c->prof_th[t].n_reads > reads ? c->prof_th[t].n_reads : reads;
    out->n_clock_reads = reads + 2 * c->prof_n_decode; /* + anvil_decode's own two */
}

const float *anvil_get_logits(struct anvil_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits || !c->out_full[i]) return NULL;
    return c->logits + (size_t)i * c->m->hp.n_vocab;
}

const float *anvil_get_embd(struct anvil_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits || !c->out_embd) return NULL;
    return c->embd + (size_t)i * c->m->hp.n_embd;
}

anvil_token anvil_get_argmax(struct anvil_ctx *c, int32_t i) {
    if (!c || i < 0 || i >= c->n_logits || c->out_embd) return -1;
    return c->argmax[i];
}

int32_t anvil_n_logits(const struct anvil_ctx *c) { return c ? c->n_logits : 0; }

/* ---------------------------------------------------------------------- */
/* sequences */

int32_t anvil_seq_len(const struct anvil_ctx *c, int32_t seq_id) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max) return -1;
    if (c->n_kv == 0) return 0; /* an encoder keeps nothing between batches */
    return kv_seq_len(c->kv[0], seq_id);
}

anvil_status anvil_seq_truncate(struct anvil_ctx *c, int32_t seq_id, int32_t pos) {
    if (!c || seq_id < 0 || seq_id >= c->n_seq_max || pos < 0) return ANVIL_ERR_INVALID;
    if (c->n_kv == 0) return ANVIL_OK;
    int32_t len = kv_seq_len(c->kv[0], seq_id);
    if (pos > len) pos = len;
    /* every group or none: a windowed group may no longer hold the window
     * of a shorter length, and then refuses before anything changes */
    anvil_status st = ANVIL_OK;
    for (int g = c->n_kv - 1; g >= 0 && st == ANVIL_OK; g--) /* windowed group first: it may refuse */
        st = kv_seq_truncate(c->kv[g], seq_id, pos);
    if (st == ANVIL_ERR_UNSUPPORTED) {
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "seq: cannot truncate sequence %d to %d: its sliding-window layers no longer "
                 "hold that window (truncate to 0 and recompute)",
                 seq_id, pos);
        return st;
    }
    for (int g = 0; g < c->n_kv; g++) kv_seq_trim(c->kv[g], seq_id);
    return st;
}

int32_t anvil_seq_reuse_prefix(struct anvil_ctx *c, int32_t seq_id, const anvil_token *tokens,
                               int32_t n) {
    if (!c || c->n_kv == 0 || seq_id < 0 || seq_id >= c->n_seq_max || !tokens || n < 2 ||
        kv_seq_len(c->kv[0], seq_id) != 0)
        return 0;
    /* every group matches on its own; the sequence keeps the shortest
     * match in all of them */
    int32_t len = INT32_MAX;
    for (int g = 0; g < c->n_kv; g++) {
        int32_t k = kv_seq_match(c->kv[g], seq_id, tokens, n - 1);
        if (k < len) len = k < 0 ? 0 : k;
    }
    for (int g = 0; g < c->n_kv; g++) {
        (void)kv_seq_truncate(c->kv[g], seq_id, len); /* keeps every matched block: no holes yet */
        kv_seq_trim(c->kv[g], seq_id);
    }
    return len;
}

/* ---------------------------------------------------------------------- */
/* KV accounting for the scheduler */

void ctx_kv_info(const struct anvil_ctx *c, struct ctx_kv_info *out) {
    memset(out, 0, sizeof(*out));
    for (int g = 0; g < c->n_kv; g++) {
        struct kv_stats st;
        kv_get_stats(c->kv[g], &st);
        out->blocks_total += st.n_blocks;
        out->blocks_used += st.n_used;
        out->block_tokens = st.block_size;
    }
}

bool ctx_kv_fits(const struct anvil_ctx *c, int64_t n, int32_t slack_blocks) {
    for (int g = 0; g < c->n_kv; g++)
        if ((int64_t)kv_blocks_for_len(c->kv[g], n, c->n_batch) + slack_blocks >
            kv_n_available(c->kv[g]))
            return false;
    return true;
}

int32_t ctx_kv_prefault(struct anvil_ctx *c, int32_t ahead) {
    for (int g = 0; g < c->n_kv; g++) {
        struct kv_stats st;
        kv_get_stats(c->kv[g], &st);
        if (kv_prefault(c->kv[g], (ahead + st.block_size - 1) / st.block_size)) return 1;
    }
    return 0;
}

int64_t ctx_kv_seq_capacity(const struct anvil_ctx *c) {
    int64_t cap = c->n_ctx;
    for (int g = 0; g < c->n_kv; g++) {
        struct kv_stats st;
        kv_get_stats(c->kv[g], &st);
        if (kv_blocks_for_len(c->kv[g], c->n_ctx, c->n_batch) > st.n_blocks) {
            int64_t held = (int64_t)st.n_blocks * st.block_size;
            if (held < cap) cap = held;
        }
    }
    return cap;
}
