/*
 * moe.c - the mixture-of-experts FFN (model/moe.h): routing, the reference
 * row-by-row layer and the expert-grouped path, and the context's scratch.
 *
 * The grouped path, per layer (four barriers: a barrier costs a scheduler
 * time slice when the machine is oversubscribed, so phases that can run on
 * private copies do):
 *   0. rows, in the forward pass's FFN-norm phase (moe_prepare_row): h ->
 *      the router's, the experts' and the shared expert's activation
 *      formats; the shared gate's dot product
 *   1. router logits (one matmul over the batch, threads split the
 *      n_expert rows) and the shared expert's gate/up            | barrier
 *   2. thread 0: top-k and weights of every row (moe_route), then a
 *      counting sort of the (row, choice) pairs by expert: slot s holds
 *      row slot_row[s], expert e owns slots [off[e], off[e+1]); the
 *      others: the shared expert's SiLU*up of their rows          | barrier
 *   3. per expert, one matmul of its gate/up over its slots; threads take
 *      (expert, 64-row tile) units, split by cost (its number of slots),
 *      each gathering the rows of the experts it has units of into a
 *      private buffer                                             | barrier
 *   4. down over each expert's slots (units as in 3), each thread making
 *      SiLU(gate)*up of the experts it has units of privately; the shared
 *      expert's down                                              | barrier
 *   5. rows: out = sum_j w_j down_j (in the order of sel) + g * shared
 *      (the rows the forward pass's split gives this thread: no barrier)
 * Every value a row gets depends on that row only (batch-invariant
 * kernels, fixed summation order), so the grouped and the reference path
 * give the same bits, and a row's output does not depend on its batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ctx_int.h"
#include "model/moe.h"

/* ---------------------------------------------------------------------- */
/* routing */

/* MODEL_GATING_SOFTMAX_WEIGHT (gpt-oss): the k largest logits (equal
 * logits: the lowest index first; NaN never wins, taken ones are marked
 * NaN), then the softmax over those k, largest first. */
static void route_top_logits(const struct model_hparams *hp, const float *logits, float *p,
                             int32_t *sel, float *w) {
    int ne = hp->n_expert, k = hp->n_expert_used;
    memcpy(p, logits, (size_t)ne * sizeof(float));
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < ne; e++)
            if (!isnan(p[e]) && (best < 0 || p[e] > p[best])) best = e;
        if (best < 0) /* NaN everywhere: the lowest untaken */
            for (int e = 0; e < ne && best < 0; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++) taken |= sel[i] == e;
                if (!taken) best = e;
            }
        sel[j] = best;
        w[j] = logits[best];
        p[best] = NAN;
    }
    float mx = w[0], sum = 0.0f;
    for (int j = 1; j < k; j++) mx = w[j] > mx ? w[j] : mx;
    for (int j = 0; j < k; j++) sum += (w[j] = expf(w[j] - mx));
    float inv = 1.0f / sum;
    for (int j = 0; j < k; j++) w[j] *= inv;
    if (hp->moe_w_scale != 1.0f && hp->moe_w_scale != 0.0f)
        for (int j = 0; j < k; j++) w[j] *= hp->moe_w_scale;
}

void moe_route(const struct model_hparams *hp, const float *logits, float *p, int32_t *sel,
               float *w) {
    int ne = hp->n_expert, k = hp->n_expert_used;
    if (hp->moe_gating == MODEL_GATING_SOFTMAX_WEIGHT) {
        route_top_logits(hp, logits, p, sel, w);
        return;
    }
    if (hp->moe_gating == MODEL_GATING_SIGMOID) {
        for (int e = 0; e < ne; e++) p[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        float mx = -INFINITY;
        for (int e = 0; e < ne; e++)
            if (logits[e] > mx) mx = logits[e];
        float sum = 0.0f;
        for (int e = 0; e < ne; e++) sum += (p[e] = expf(logits[e] - mx));
        float inv = 1.0f / sum;
        for (int e = 0; e < ne; e++) p[e] *= inv;
    }
    /* k passes of a strict > scan: equal p go to the lowest index first;
     * NaN never wins (a row of NaN picks experts 0..k-1). A chosen
     * expert's p is set to -1 (below every probability) once its weight
     * is taken. */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < ne; e++)
            if (p[e] >= 0.0f && (best < 0 || p[e] > p[best])) best = e;
        if (best < 0) /* NaN everywhere: the lowest untaken */
            for (int e = 0; e < ne && best < 0; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++) taken |= sel[i] == e;
                if (!taken) best = e;
            }
        sel[j] = best;
        w[j] = p[best];
        p[best] = -1.0f;
    }
    if (hp->moe_norm_w) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++) sum += w[j];
        if (!(sum >= 6.103515625e-5f)) sum = 6.103515625e-5f;
        for (int j = 0; j < k; j++) w[j] /= sum;
    }
    if (hp->moe_w_scale != 1.0f && hp->moe_w_scale != 0.0f)
        for (int j = 0; j < k; j++) w[j] *= hp->moe_w_scale;
}

void moe_free(struct model_moe *moe) {
    if (!moe) return;
    core_free(moe->gu);
    core_free(moe->down);
    core_free(moe->sh_gate);
    core_free(moe->router_b);
    core_free(moe->gu_b);
    core_free(moe->down_b);
    core_free(moe);
}

/* ---------------------------------------------------------------------- */
/* scratch */

struct moe_scratch {
    float *h;                     /* (nb, n_embd) normalized input rows */
    uint8_t *xact, *ract, *sact;  /* (nb, act_stride) experts', router's, shared formats */
    float *rlog;                  /* (nb, n_expert) */
    float *p;                     /* (nth, n_expert) */
    int32_t *sel;                 /* (nb, k) */
    float *selw;                  /* (nb, k) */
    int32_t *cnt, *off;           /* (n_expert + 1) */
    int32_t *slot_row, *slot_of;  /* (nb * k) */
    uint8_t *gact;                /* (nth, nb, act_stride): private gathered rows */
    float *egu;                   /* (nb * k, 2 * n_ff_exp) */
    float *edown;                 /* (nb * k, n_embd) */
    float *sgu;                   /* (nb, 2 * n_ff_shexp) */
    float *sdown;                 /* (nb, n_embd) */
    float *sgate;                 /* (nb) */
    /* the reference path, per thread */
    float *rgu;                   /* (nth, 2 * max(n_ff_exp, n_ff_shexp)) */
    uint8_t *ra, *rb;             /* (nth, act_stride) */
    float *ry;                    /* (nth, n_embd) */
    float *rl;                    /* (nth, n_expert) */
    float *ea;                    /* (nth, 2 * n_ff_exp): an expert's biased gate/up, or its
                                   * activation, before the conversion to the down's format */
    int rgu_dim;
    bool ref;
    /* routing statistics (anvil_ctx_get_route_stats), counted only while
     * profiling, by one thread per layer and step */
    struct anvil_route_stats *rstat; /* (n_layer) */
    uint64_t *rcount;                /* (n_layer, n_expert) rows per expert */
};

static void *zalloc(size_t count, size_t elem) {
    size_t n = count * elem;
    void *p = core_malloc_aligned(n ? n : 64);
    if (p) memset(p, 0, n ? n : 64);
    return p;
}

anvil_status moe_ctx_init(struct anvil_ctx *c) {
    const struct model_hparams *hp = &c->m->hp;
    if (hp->n_expert == 0) return ANVIL_OK;
    struct moe_scratch *s = core_calloc(1, sizeof(*s));
    if (!s) goto nomem;
    c->moe = s;
    size_t nb = (size_t)c->n_batch, nt = (size_t)c->n_threads, ne = (size_t)hp->n_embd;
    size_t k = (size_t)hp->n_expert_used, nx = (size_t)hp->n_expert, st = c->act_stride;
    size_t nff = (size_t)hp->n_ff_exp, nsh = (size_t)hp->n_ff_shexp;
    s->rgu_dim = (int)(2 * (nff > nsh ? nff : nsh));
    const char *env = getenv("ANVIL_MOE_REF");
    s->ref = env && env[0] == '1';
    if (!(s->h = zalloc(nb * ne, sizeof(float))) || !(s->xact = zalloc(nb, st)) ||
        !(s->ract = zalloc(nb, st)) || !(s->sact = zalloc(nb, st)) ||
        !(s->rlog = zalloc(nb * nx, sizeof(float))) || !(s->p = zalloc(nt * nx, sizeof(float))) ||
        !(s->sel = zalloc(nb * k, sizeof(int32_t))) || !(s->selw = zalloc(nb * k, sizeof(float))) ||
        !(s->cnt = zalloc(nx + 1, sizeof(int32_t))) || !(s->off = zalloc(nx + 1, sizeof(int32_t))) ||
        !(s->slot_row = zalloc(nb * k, sizeof(int32_t))) ||
        !(s->slot_of = zalloc(nb * k, sizeof(int32_t))) || !(s->gact = zalloc(nt * nb, st)) ||
        !(s->egu = zalloc(nb * k * 2 * nff, sizeof(float))) ||
        !(s->edown = zalloc(nb * k * ne, sizeof(float))) ||
        !(s->sgu = zalloc(nb * 2 * nsh, sizeof(float))) ||
        !(s->sdown = zalloc(nb * ne, sizeof(float))) || !(s->sgate = zalloc(nb, sizeof(float))) ||
        !(s->rgu = zalloc(nt * (size_t)s->rgu_dim, sizeof(float))) || !(s->ra = zalloc(nt, st)) ||
        !(s->rb = zalloc(nt, st)) || !(s->ry = zalloc(nt * ne, sizeof(float))) ||
        !(s->rl = zalloc(nt * nx, sizeof(float))) || !(s->ea = zalloc(nt * 2 * nff, sizeof(float))) ||
        !(s->rstat = zalloc((size_t)hp->n_layer, sizeof(struct anvil_route_stats))) ||
        !(s->rcount = zalloc((size_t)hp->n_layer * nx, sizeof(uint64_t))))
        goto nomem;
    return ANVIL_OK;
nomem:
    snprintf(c->errmsg, sizeof(c->errmsg),
             "ctx: out of memory allocating the expert buffers (n_batch %d, %d of %d experts)",
             c->n_batch, hp->n_expert_used, hp->n_expert);
    return ANVIL_ERR_NOMEM;
}

void moe_ctx_free(struct anvil_ctx *c) {
    struct moe_scratch *s = c->moe;
    if (!s) return;
    void *arr[] = {s->h,   s->xact,  s->ract,  s->sact, s->rlog,     s->p,       s->sel,
                   s->selw, s->cnt,  s->off,   s->slot_row, s->slot_of, s->gact, s->egu,
                   s->edown, s->sgu, s->sdown, s->sgate, s->rgu, s->ra, s->rb, s->ry, s->rl, s->ea,
                   s->rstat, s->rcount};
    for (size_t i = 0; i < sizeof(arr) / sizeof(arr[0]); i++) core_free_aligned(arr[i]);
    core_free(s);
    c->moe = NULL;
}

/* ---------------------------------------------------------------------- */
/* routing statistics */

/* MOE_ROWS_BIG: a group this large is "big" in anvil_route_stats.rows_big
 * (issue 35: an expert with 16 or more rows reaches the packed prefill
 * kernels). */
#define MOE_ROWS_BIG 16

void moe_route_reset(struct anvil_ctx *c) {
    struct moe_scratch *s = c->moe;
    if (!s) return;
    const struct model_hparams *hp = &c->m->hp;
    memset(s->rstat, 0, (size_t)hp->n_layer * sizeof(*s->rstat));
    memset(s->rcount, 0, (size_t)hp->n_layer * (size_t)hp->n_expert * sizeof(uint64_t));
}

/* Profiling: one step of layer l, n_rows rows routed, cnt (n_expert) rows
 * per expert. By one thread, once per layer and step: the per-step work is
 * n_expert additions, nothing on the path that runs unprofiled. */
static void route_count(struct anvil_ctx *c, int l, const int32_t *cnt, int n_rows) {
    struct moe_scratch *s = c->moe;
    int nx = c->m->hp.n_expert;
    struct anvil_route_stats *r = &s->rstat[l];
    uint64_t *rc = s->rcount + (size_t)l * nx;
    uint64_t touched = 0, mx = 0, big = 0;
    for (int e = 0; e < nx; e++) {
        uint64_t n = (uint64_t)cnt[e];
        rc[e] += n;
        touched += n > 0;
        mx = n > mx ? n : mx;
        if (n >= MOE_ROWS_BIG) big += n;
    }
    r->n_steps++;
    r->n_rows += (uint64_t)n_rows;
    r->touched += touched;
    r->step_max += mx;
    r->rows_big += big;
}

int32_t anvil_ctx_get_route_stats(const struct anvil_ctx *c, int32_t layer,
                                  struct anvil_route_stats *out, uint64_t *counts, int32_t cap) {
    if (out) memset(out, 0, sizeof(*out));
    if (!c || layer < 0 || layer >= c->m->hp.n_layer) return 0;
    const struct moe_scratch *s = c->moe;
    int nx = c->m->hp.n_expert;
    if (!s || !c->m->layers[layer].moe) return 0;
    if (out) *out = s->rstat[layer];
    if (cap < nx) return -nx;
    if (counts) memcpy(counts, s->rcount + (size_t)layer * nx, (size_t)nx * sizeof(uint64_t));
    return nx;
}

float *moe_input_row(struct anvil_ctx *c, int t) {
    return c->moe->h + (size_t)t * c->m->hp.n_embd;
}

/* ---------------------------------------------------------------------- */
/* pieces both paths share (the same operations in the same order) */

static float dot_f32(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* out (+)= w * y: the first choice stores, the next ones add */
static void weigh(float *out, float w, const float *y, int n, bool first) {
    if (first)
        for (int i = 0; i < n; i++) out[i] = w * y[i];
    else
        for (int i = 0; i < n; i++) out[i] += w * y[i];
}

/* Expert e's activation of its gate/up outputs gu (2*n_ff_exp: gate then
 * up), biased when the layer has biases, into dst in format fmt; ea is
 * 2*n_ff_exp floats of scratch. SwiGLU, or gpt-oss's clamped one
 * (MODEL_ACT_SWIGLU_OAI, model.h). */
static void expert_act(const struct anvil_ctx *c, const struct model_moe *moe, int e,
                       const float *gu, uint8_t *dst, int fmt, float *ea) {
    const struct model_hparams *hp = &c->m->hp;
    const struct kn_ops *ops = c->m->ops;
    int nff = hp->n_ff_exp;
    const float *b = moe->gu_b ? moe->gu_b + (size_t)e * 2 * nff : NULL;
    if (hp->act == MODEL_ACT_SWIGLU_OAI) {
        float lim = hp->swiglu_limit, al = hp->swiglu_alpha;
        for (int i = 0; i < nff; i++) {
            float g = gu[i], u = gu[nff + i];
            if (b) {
                g += b[i];
                u += b[nff + i];
            }
            g = g < lim ? g : lim; /* NaN stays NaN, as std::min(NaN, lim) */
            u = u < -lim ? -lim : u > lim ? lim : u;
            ea[i] = g / (1.0f + expf(-al * g)) * (u + 1.0f);
        }
        ops->act[fmt](dst, ea, nff);
        return;
    }
    if (b) {
        for (int i = 0; i < 2 * nff; i++) ea[i] = gu[i] + b[i];
        gu = ea;
    }
    ops->silu_mul_act(dst, gu, gu + nff, nff, fmt);
}

/* y += expert e's down bias (when the layer has them) */
static void down_bias(const struct model_moe *moe, int e, float *y, int ne) {
    if (!moe->down_b) return;
    const float *b = moe->down_b + (size_t)e * ne;
    for (int i = 0; i < ne; i++) y[i] += b[i];
}

/* logits += the router's bias (when it has one) */
static void router_bias(const struct model_moe *moe, float *lg, int nx) {
    if (!moe->router_b) return;
    for (int e = 0; e < nx; e++) lg[e] += moe->router_b[e];
}

static float shared_gate(const struct model_moe *moe, const float *h, int n) {
    if (!moe->sh_gate) return 1.0f;
    return 1.0f / (1.0f + expf(-dot_f32(moe->sh_gate, h, n)));
}

/* ---------------------------------------------------------------------- */
/* the reference: row by row, expert by expert */

/* Profiling marks (moe.h): MARK(k) charges the time since the last one to
 * category k when moe_ffn was given a clock. */
#define MARK(k) \
    do { \
        if (prof_t) ctx_prof_mark(&c->prof_th[ith], (k), prof_t); \
    } while (0)

static void moe_ref(struct anvil_ctx *c, const struct model_layer *ly, int ith, int nth,
                    double *prof_t) {
    const struct model_hparams *hp = &c->m->hp;
    const struct kn_ops *ops = c->m->ops;
    const struct model_moe *moe = ly->moe;
    struct moe_scratch *s = c->moe;
    int ne = hp->n_embd, k = hp->n_expert_used, nff = hp->n_ff_exp, nsh = hp->n_ff_shexp;
    size_t st = c->act_stride;
    float *gu = s->rgu + (size_t)ith * s->rgu_dim, *y = s->ry + (size_t)ith * ne;
    float *lg = s->rl + (size_t)ith * hp->n_expert, *p = s->p + (size_t)ith * hp->n_expert;
    uint8_t *a = s->ra + (size_t)ith * st, *b = s->rb + (size_t)ith * st;
    float *ea = s->ea + (size_t)ith * 2 * nff;
    int t0, t1;
    pool_split(c->b->n_tokens, ith, nth, 1, &t0, &t1);
    for (int t = t0; t < t1; t++) {
        const float *h = s->h + (size_t)t * ne;
        float *out = c->tmp + (size_t)t * ne;
        int32_t *sel = s->sel + (size_t)t * k;
        float *w = s->selw + (size_t)t * k;
        ops->act[moe->router.act](a, h, ne);
        wmat_matmul(ops, &moe->router, lg, (size_t)hp->n_expert, a, st, 1, 0, hp->n_expert);
        router_bias(moe, lg, hp->n_expert);
        moe_route(hp, lg, p, sel, w);
        MARK(ANVIL_PROF_ROUTER);
        for (int j = 0; j < k; j++) {
            const struct wmat *g = &moe->gu[sel[j]], *d = &moe->down[sel[j]];
            ops->act[g->act](a, h, ne);
            wmat_matmul(ops, g, gu, (size_t)2 * nff, a, st, 1, 0, 2 * nff);
            expert_act(c, moe, sel[j], gu, b, d->act, ea);
            wmat_matmul(ops, d, y, (size_t)ne, b, st, 1, 0, ne);
            MARK(ANVIL_PROF_EXPERTS);
            down_bias(moe, sel[j], y, ne);
            weigh(out, w[j], y, ne, j == 0);
            MARK(ANVIL_PROF_SCATTER);
        }
        if (nsh > 0) {
            ops->act[moe->sh_gu.act](a, h, ne);
            wmat_matmul(ops, &moe->sh_gu, gu, (size_t)2 * nsh, a, st, 1, 0, 2 * nsh);
            ops->silu_mul_act(b, gu, gu + nsh, nsh, moe->sh_down.act);
            wmat_matmul(ops, &moe->sh_down, y, (size_t)ne, b, st, 1, 0, ne);
            MARK(ANVIL_PROF_EXPERTS);
            weigh(out, shared_gate(moe, h, ne), y, ne, false);
            MARK(ANVIL_PROF_SCATTER);
        }
    }
    if (prof_t) { /* routing statistics: every row's sel is written after this barrier */
        pool_barrier(c->pool);
        if (ith == 0) {
            int n = c->b->n_tokens;
            memset(s->cnt, 0, (size_t)hp->n_expert * sizeof(int32_t));
            for (int i = 0; i < n * k; i++) s->cnt[s->sel[i]]++;
            route_count(c, (int)(ly - c->m->layers), s->cnt, n);
        }
        MARK(ANVIL_PROF_ROUTER);
    }
}

/* ---------------------------------------------------------------------- */
/* the grouped path */

#define MOE_TILE 64 /* output rows per work unit (a multiple of KN_PACK_ROWS) */

/* The units of experts' matrices ws (n_out rows each) that thread ith
 * runs: units (expert, tile of MOE_TILE rows) cost the expert's slot
 * count, and a thread runs those that start in its share of the total
 * cost. For each expert it has units of, prep(e) first writes the
 * expert's input rows (cnt[e] of them) into x, this thread's private
 * buffer; y rows are the slots' (y + slot * ldy). */
struct unit_job {
    const struct anvil_ctx *c;
    const struct model_layer *ly;
    uint8_t *x; /* this thread's buffer */
    float *ea;  /* this thread's expert_act scratch */
    bool down;  /* prep: SiLU(gate)*up of egu (down) or a gather of xact (gate/up) */
};

static void prep_rows(const struct unit_job *j, int e) {
    const struct moe_scratch *s = j->c->moe;
    const struct model_hparams *hp = &j->c->m->hp;
    size_t st = j->c->act_stride;
    int o = s->off[e], n = s->cnt[e], nff = hp->n_ff_exp;
    if (j->down) {
        for (int i = 0; i < n; i++)
            expert_act(j->c, j->ly->moe, e, s->egu + (size_t)(o + i) * 2 * nff,
                       j->x + (size_t)i * st, j->ly->moe->down[e].act, j->ea);
    } else {
        size_t bytes = kn_act_row_size(j->ly->moe->gu[e].act, hp->n_embd);
        for (int i = 0; i < n; i++)
            memcpy(j->x + (size_t)i * st, s->xact + (size_t)s->slot_row[o + i] * st, bytes);
    }
}

static void expert_matmuls(const struct unit_job *j, const struct wmat *ws, int n_out, float *y,
                           size_t ldy, int ith, int nth) {
    const struct moe_scratch *s = j->c->moe;
    int nx = j->c->m->hp.n_expert, tiles = (n_out + MOE_TILE - 1) / MOE_TILE;
    size_t st = j->c->act_stride;
    int64_t total = 0;
    for (int e = 0; e < nx; e++) total += (int64_t)s->cnt[e] * tiles;
    int64_t lo = total * ith / nth, hi = total * (ith + 1) / nth, at = 0;
    for (int e = 0; e < nx && at < hi; e++) {
        int n = s->cnt[e];
        if (n == 0) continue;
        bool ready = false;
        for (int tl = 0; tl < tiles; tl++, at += n) {
            if (at < lo || at >= hi) continue;
            if (!ready) {
                prep_rows(j, e);
                ready = true;
            }
            int r0 = tl * MOE_TILE, r1 = r0 + MOE_TILE < n_out ? r0 + MOE_TILE : n_out;
            wmat_matmul(j->c->m->ops, &ws[e], y + (size_t)s->off[e] * ldy, ldy, j->x, st, n, r0,
                        r1);
        }
    }
}

static void matmul_split(const struct anvil_ctx *c, const struct wmat *w, float *y, size_t ldy,
                         const uint8_t *x, int n_tokens, int ith, int nth) {
    int r0, r1;
    pool_split(w->n_out, ith, nth, 16, &r0, &r1);
    if (r0 < r1) wmat_matmul(c->m->ops, w, y, ldy, x, c->act_stride, n_tokens, r0, r1);
}

void moe_prepare_row(struct anvil_ctx *c, const struct model_layer *ly, int t) {
    struct moe_scratch *s = c->moe;
    if (s->ref) return;
    const struct kn_ops *ops = c->m->ops;
    const struct model_moe *moe = ly->moe;
    int ne = c->m->hp.n_embd;
    size_t st = c->act_stride;
    const float *h = s->h + (size_t)t * ne;
    ops->act[moe->router.act](s->ract + (size_t)t * st, h, ne);
    ops->act[moe->gu[0].act](s->xact + (size_t)t * st, h, ne);
    if (c->m->hp.n_ff_shexp > 0) {
        ops->act[moe->sh_gu.act](s->sact + (size_t)t * st, h, ne);
        s->sgate[t] = shared_gate(moe, h, ne);
    }
}

void moe_ffn(struct anvil_ctx *c, const struct model_layer *ly, int ith, int nth, double *prof_t) {
    struct moe_scratch *s = c->moe;
    if (s->ref) {
        moe_ref(c, ly, ith, nth, prof_t);
        return;
    }
    const struct model_hparams *hp = &c->m->hp;
    const struct kn_ops *ops = c->m->ops;
    const struct model_moe *moe = ly->moe;
    int n = c->b->n_tokens, ne = hp->n_embd, k = hp->n_expert_used, nx = hp->n_expert;
    int nff = hp->n_ff_exp, nsh = hp->n_ff_shexp;
    size_t st = c->act_stride;
    int t0, t1;
    pool_split(n, ith, nth, 1, &t0, &t1);

    /* 1 */
    matmul_split(c, &moe->router, s->rlog, (size_t)nx, s->ract, n, ith, nth);
    MARK(ANVIL_PROF_ROUTER);
    if (nsh > 0) {
        matmul_split(c, &moe->sh_gu, s->sgu, (size_t)2 * nsh, s->sact, n, ith, nth);
        MARK(ANVIL_PROF_EXPERTS);
    }
    pool_barrier(c->pool);
    /* 2 (the shared expert's activations reuse sact: phase 1 is done with it) */
    if (nsh > 0)
        for (int t = t0; t < t1; t++) {
            const float *g = s->sgu + (size_t)t * 2 * nsh;
            ops->silu_mul_act(s->sact + (size_t)t * st, g, g + nsh, nsh, moe->sh_down.act);
        }
    MARK(ANVIL_PROF_EXPERTS);
    if (ith == 0) {
        for (int t = 0; t < n; t++) {
            router_bias(moe, s->rlog + (size_t)t * nx, nx);
            moe_route(hp, s->rlog + (size_t)t * nx, s->p, s->sel + (size_t)t * k,
                      s->selw + (size_t)t * k);
        }
        memset(s->cnt, 0, (size_t)(nx + 1) * sizeof(int32_t));
        for (int i = 0; i < n * k; i++) s->cnt[s->sel[i]]++;
        s->off[0] = 0;
        for (int e = 0; e < nx; e++) s->off[e + 1] = s->off[e] + s->cnt[e];
        memcpy(s->cnt, s->off, (size_t)nx * sizeof(int32_t)); /* fill cursors */
        for (int i = 0; i < n * k; i++) {
            int slot = s->cnt[s->sel[i]]++;
            s->slot_row[slot] = i / k;
            s->slot_of[i] = slot;
        }
        for (int e = 0; e < nx; e++) s->cnt[e] = s->off[e + 1] - s->off[e];
        if (prof_t) route_count(c, (int)(ly - c->m->layers), s->cnt, n);
    }
    pool_barrier(c->pool); /* the others' wait here is thread 0's routing */
    MARK(ANVIL_PROF_ROUTER);
    /* 3 */
    struct unit_job j = {.c = c, .ly = ly, .x = s->gact + (size_t)ith * c->n_batch * st,
                         .ea = s->ea + (size_t)ith * 2 * nff};
    expert_matmuls(&j, moe->gu, 2 * nff, s->egu, (size_t)2 * nff, ith, nth);
    pool_barrier(c->pool);
    /* 4 */
    j.down = true;
    expert_matmuls(&j, moe->down, ne, s->edown, (size_t)ne, ith, nth);
    if (nsh > 0) matmul_split(c, &moe->sh_down, s->sdown, (size_t)ne, s->sact, n, ith, nth);
    pool_barrier(c->pool);
    MARK(ANVIL_PROF_EXPERTS);
    /* 5 */
    for (int t = t0; t < t1; t++) {
        float *out = c->tmp + (size_t)t * ne;
        for (int jj = 0; jj < k; jj++) {
            float *y = s->edown + (size_t)s->slot_of[(size_t)t * k + jj] * ne;
            down_bias(moe, s->sel[(size_t)t * k + jj], y, ne);
            weigh(out, s->selw[(size_t)t * k + jj], y, ne, jj == 0);
        }
        if (nsh > 0) weigh(out, s->sgate[t], s->sdown + (size_t)t * ne, ne, false);
    }
}
