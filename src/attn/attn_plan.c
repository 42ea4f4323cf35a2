/*
 * attn_plan.c - the attention driver over the paged cache: turns one layer's
 * batch (decode rows and prefill chunks of many sequences) into kernel
 * tasks (attn.h), spreads them over threads by estimated cost, and
 * runs split-K decode as a chunk pass, a barrier and a reduction.
 *
 * Work items, in entry order, each for one kv head h:
 *   decode row, not split:  (h)            the whole context, one attn call
 *   decode row, split:      (h, chunk c)   one partial record each
 *   prefill rows:           (h, tile)      up to KN_ATTN_MAXQ/group rows
 * Thread t takes a contiguous run of items whose cost midpoints fall in
 * [t, t+1) * total / nth. Split plans then reduce every (decode row, h)
 * after a pool barrier, in chunk order.
 *
 * Numerics never depend on the plan (attn.h: fixed chunk positions, fixed
 * fold order), so the policy is free to pick whatever is fastest.
 *
 * The cost model and the split policy live in attn_policy.c; this file
 * only applies them. The plan reads the cache through kv_cache.h alone
 * (block tables, capacities, the tile layout) and keeps its own
 * workspace, hung on the cache (kv_attn_plan_init).
 *
 * Other kinds of attention share the plan: HP1 gated attention
 * (hp1/hp1_plan.c) has the same task, the same chunk grid and the same
 * partial/reduce split; only the kernel table, the record size (HP1: acc
 * alone, summed rather than folded) and its layer parameters differ, so
 * the plan is kind-blind and call() hands a task to the kind's kernels
 * (job->kind_call). Another kind's cost is taken to be the softmax's at
 * the same shape (HP1: no exp, but a gate pass; sparse PV makes it
 * cheaper, by an amount the plan cannot know), which keeps the split
 * decisions the same.
 */
#include <math.h>
#include <string.h>

#include "attn/attn_plan_int.h"
#include "attn/attn_policy.h"
#include "core/core.h"
#include "core/pool.h"

/* ---------------------------------------------------------------------- */
/* workspace */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* n * size into *acc, aligned to 64; false on overflow */
static bool grow(size_t *acc, size_t n, size_t size, size_t *at) {
    if (size && n > (SIZE_MAX - 64 - *acc) / size) return false;
    *at = align64(*acc);
    *acc = *at + n * size;
    return true;
}

static void plan_free(void *p) {
    struct kv_attn_job *job = p;
    if (job) core_free(job->mem);
}

anvil_status kv_attn_plan_init(struct kv_cache *kv, char *err, size_t err_cap) {
    if (kv_ext(kv)) return ANVIL_OK;
    const struct kv_params *p = kv_params_of(kv);
    int32_t group = p->n_head / p->n_head_kv;
    if (group > KN_ATTN_MAXQ) {
        errmsg_set(err, err_cap, "kv: GQA group %d > %d", group, KN_ATTN_MAXQ);
        return ANVIL_ERR_UNSUPPORTED;
    }
    size_t nseq = (size_t)p->n_seq_max, nth = (size_t)p->n_threads;
    size_t part_recs = (size_t)kn_attn_n_chunks(p->n_ctx);
    size_t rec_cap = 64 * nth < 8192 ? 8192 : 64 * nth;
    bool ok = nseq * (size_t)p->n_head_kv <= SIZE_MAX / (part_recs ? part_recs : 1);
    part_recs *= nseq * (size_t)p->n_head_kv;
    if (part_recs > rec_cap) part_recs = rec_cap;
    size_t rec = kn_attn_rec_floats(group, p->head_dim);
    size_t off = 0, o_ent, o_ioff, o_th, o_red, o_nkv, o_mark, o_part;
    ok = ok && grow(&off, 1, sizeof(struct kv_attn_job), &(size_t){0}) &&
         grow(&off, nseq, sizeof(struct kv_attn_ent), &o_ent) &&
         grow(&off, nseq + 1, sizeof(int32_t), &o_ioff) &&
         grow(&off, nth + 1, sizeof(int32_t), &o_th) &&
         grow(&off, nseq, sizeof(int32_t), &o_red) &&
         grow(&off, nseq, sizeof(int32_t), &o_nkv) &&
         grow(&off, nseq, sizeof(uint8_t), &o_mark) &&
         part_recs <= SIZE_MAX / sizeof(float) / rec &&
         grow(&off, part_recs * rec, sizeof(float), &o_part) && off <= SIZE_MAX - 64;
    if (!ok) {
        errmsg_set(err, err_cap, "kv: size overflow");
        return ANVIL_ERR_INVALID;
    }
    uint8_t *mem = core_malloc(off + 64);
    if (!mem) {
        errmsg_set(err, err_cap, "kv: cannot allocate %zu bytes", off + 64);
        return ANVIL_ERR_NOMEM;
    }
    uint8_t *base = mem + (64 - (uintptr_t)mem % 64) % 64;
    memset(base, 0, o_part);
    struct kv_attn_job *job = (struct kv_attn_job *)base;
    job->mem = mem;
    job->kv = kv;
    job->ent = (struct kv_attn_ent *)(base + o_ent);
    job->item_off = (int32_t *)(base + o_ioff);
    job->th_start = (int32_t *)(base + o_th);
    job->red = (int32_t *)(base + o_red);
    job->nkv = (int32_t *)(base + o_nkv);
    job->mark = base + o_mark;
    job->part = (float *)(base + o_part);
    job->part_recs = part_recs;
    kv_set_ext(kv, job, plan_free);
    return ANVIL_OK;
}

struct kv_attn_job *kv_attn_job_of(struct kv_cache *kv, anvil_status *st) {
    *st = kv_attn_plan_init(kv, NULL, 0);
    return *st == ANVIL_OK ? kv_ext(kv) : NULL;
}

/* ---------------------------------------------------------------------- */
/* plan */

/* Keys of chunk c (absolute index) of a decode entry that its row sees. */
static int32_t chunk_keys(const struct kv_attn_ent *e, int32_t c, int32_t window) {
    int32_t k0 = c * KN_ATTN_CHUNK, k1 = k0 + KN_ATTN_CHUNK < e->n_kv ? k0 + KN_ATTN_CHUNK : e->n_kv;
    int32_t lo = window > 0 && e->n_kv - window > 0 ? e->n_kv - window : 0;
    if (k0 < lo) k0 = lo;
    return k1 > k0 ? k1 - k0 : 0;
}

/* Cost of item u (unit index within one kv head) of an entry. */
static double item_cost(const struct kv_attn_job *job, const struct kv_attn_ent *e, int32_t u,
                        int32_t hd) {
    int32_t G = job->group;
    if (e->decode) {
        int32_t keys = e->n_kv;
        if (job->window > 0 && keys > job->window) keys = job->window;
        if (!job->split) return kn_attn_cost_decode(keys, G, hd);
        return kn_attn_cost_decode(chunk_keys(e, e->c_lo + u, job->window), G, hd);
    }
    int32_t r0 = u * e->rows, r1 = r0 + e->rows < e->s.n_tokens ? r0 + e->rows : e->s.n_tokens;
    return kn_attn_cost_prefill(e->s.pos, r0, r1, G, hd, job->window);
}

anvil_status kv_attn_plan(struct kv_cache *kv, struct kv_attn_job *job, int32_t layer,
                          const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                          size_t out_stride, int n_threads, enum kv_split split, float scale,
                          struct kv_attn_job **out) {
    const struct kv_params *p = kv_params_of(kv);
    if (layer < 0 || layer >= p->n_layer || n_seqs < 0 || n_seqs > p->n_seq_max ||
        n_threads < 1 || n_threads > p->n_threads)
        return ANVIL_ERR_INVALID;
    const struct kn_kv_layout *lay = kv_layout(kv);
    int32_t hd = lay->head_dim, nkv = lay->n_head_kv;
    int32_t G = p->n_head / nkv;
    anvil_status st = ANVIL_OK;
    int32_t i = 0, n_decode = 0;
    double other = 0.0;
    job->base = kv_layer_base(kv, layer);
    job->q_stride = q_stride;
    job->out_stride = out_stride;
    job->scale = scale;
    job->sinks = NULL;
    job->window = p->window;
    job->group = G;
    job->n_threads = n_threads;
    job->n_ent = n_seqs;
    job->split = false;
    for (; i < n_seqs; i++) {
        const struct kv_attn_seq *s = &seqs[i];
        if (s->seq < 0 || s->seq >= p->n_seq_max || job->mark[s->seq] || s->n_tokens < 1 ||
            s->pos < 0 || (int64_t)s->pos + s->n_tokens > kv_seq_capacity(kv, s->seq) ||
            !s->q || !s->out) {
            st = ANVIL_ERR_INVALID;
            break;
        }
        job->mark[s->seq] = 1;
        struct kv_attn_ent *e = &job->ent[i];
        e->s = *s;
        e->blocks = kv_seq_blocks(kv, s->seq);
        e->n_kv = s->pos + s->n_tokens;
        e->decode = s->n_tokens == 1;
        /* decode: the chunks that hold keys of its window */
        int32_t lo = job->window > 0 && e->n_kv - job->window > 0 ? e->n_kv - job->window : 0;
        e->c_lo = lo / KN_ATTN_CHUNK;
        e->n_chunks = kn_attn_n_chunks(e->n_kv) - e->c_lo;
        e->rows = KN_ATTN_MAXQ / G;
        if (e->decode) {
            job->nkv[n_decode++] = e->n_kv - lo;
        } else {
            e->units = (s->n_tokens + e->rows - 1) / e->rows;
            for (int32_t u = 0; u < e->units; u++) other += nkv * item_cost(job, e, u, hd);
        }
    }
    for (int32_t j = 0; j < i; j++) job->mark[seqs[j].seq] = 0;
    if (st != ANVIL_OK) return st;

    if (split == KV_SPLIT_ON) job->split = n_decode > 0;
    else if (split == KV_SPLIT_AUTO)
        job->split = kn_attn_split_policy(n_decode, job->nkv, nkv, G, hd, other, n_threads);
    if (job->split) {
        /* records must fit the scratch (kv_attn_plan_init caps it); else
         * run unsplit */
        int64_t need = 0;
        for (i = 0; i < n_seqs; i++)
            if (job->ent[i].decode) need += (int64_t)nkv * job->ent[i].n_chunks;
        if ((uint64_t)need > job->part_recs) job->split = false;
    }

    /* items and split records */
    int64_t items = 0, recs = 0;
    job->n_red = 0;
    for (i = 0; i < n_seqs; i++) {
        struct kv_attn_ent *e = &job->ent[i];
        if (e->decode) {
            e->units = job->split ? e->n_chunks : 1;
            if (job->split) {
                e->part_off = recs;
                recs += (int64_t)nkv * e->n_chunks;
                job->red[job->n_red++] = i;
            }
        }
        job->item_off[i] = (int32_t)items;
        items += (int64_t)nkv * e->units;
        ANVIL_ASSERT(items < INT32_MAX);
    }
    job->item_off[n_seqs] = (int32_t)items;
    ANVIL_ASSERT((uint64_t)recs <= job->part_recs);

    /* contiguous partition by cost midpoints */
    double total = 0.0;
    for (i = 0; i < n_seqs; i++)
        for (int32_t u = 0; u < job->ent[i].units; u++)
            total += nkv * item_cost(job, &job->ent[i], u, hd);
    int t = 0;
    job->th_start[0] = 0;
    double acc = 0.0;
    int32_t it = 0;
    for (i = 0; i < n_seqs; i++) {
        const struct kv_attn_ent *e = &job->ent[i];
        for (int32_t h = 0; h < nkv; h++) {
            for (int32_t u = 0; u < e->units; u++, it++) {
                double c = item_cost(job, e, u, hd);
                int tt = total > 0.0 ? (int)((acc + 0.5 * c) * n_threads / total) : 0;
                if (tt >= n_threads) tt = n_threads - 1;
                while (t < tt) job->th_start[++t] = it;
                acc += c;
            }
        }
    }
    while (t < n_threads) job->th_start[++t] = it;
    *out = job;
    return ANVIL_OK;
}

anvil_status kv_attn_prepare(struct kv_cache *kv, const struct kn_attn_ops *ops, int32_t layer,
                             const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                             size_t out_stride, int n_threads, enum kv_split split, float scale,
                             struct kv_attn_job **out) {
    if (!ops || (kv_params_of(kv)->window > 0 && !ops->window)) return ANVIL_ERR_INVALID;
    anvil_status st;
    struct kv_attn_job *job = kv_attn_job_of(kv, &st);
    if (!job) return st;
    job->ops = ops;
    job->kind_call = NULL;
    job->rec = kn_attn_rec_floats(kv_params_of(kv)->n_head / kv_layout(kv)->n_head_kv,
                                  kv_layout(kv)->head_dim);
    return kv_attn_plan(kv, job, layer, seqs, n_seqs, q_stride, out_stride, n_threads, split,
                        scale, out);
}

bool kv_attn_job_split(const struct kv_attn_job *job) { return job->split; }

void kv_attn_job_set_sinks(struct kv_attn_job *job, const float *sinks) { job->sinks = sinks; }

/* ---------------------------------------------------------------------- */
/* run */

static void task_init(const struct kv_attn_job *job, const struct kv_attn_ent *e, int32_t h,
                      struct kn_attn_task *t) {
    const struct kn_kv_layout *lay = kv_layout(job->kv);
    int32_t hd = lay->head_dim;
    memset(t, 0, sizeof(*t));
    t->kv = lay;
    t->base = job->base;
    t->blocks = e->blocks;
    t->kv_head = h;
    t->group = job->group;
    t->scale = job->scale;
    t->q = e->s.q + (size_t)h * job->group * hd;
    t->q_stride = job->q_stride;
    t->out = e->s.out + (size_t)h * job->group * hd;
    t->out_stride = job->out_stride;
    t->pos = e->s.pos;
    t->n_rows = 1;
    t->window = job->window;
    t->sinks = job->sinks ? job->sinks + (size_t)h * job->group : NULL;
}

static float *rec_ptr(const struct kv_attn_job *job, const struct kv_attn_ent *e, int32_t h,
                      int32_t c) {
    return job->part + ((size_t)e->part_off + (size_t)h * e->n_chunks + (size_t)c) * job->rec;
}

/* Run task t (of kv head h) with the job's kernels: the softmax table, or
 * another kind's (HP1) through its entry point. */
static void call(const struct kv_attn_job *job, enum kv_attn_call which, int32_t h,
                 const struct kn_attn_task *t) {
    if (job->kind_call) {
        job->kind_call(job, which, h, t);
        return;
    }
    kn_attn_fn f = which == KV_ATTN_CALL_ATTN      ? job->ops->attn
                   : which == KV_ATTN_CALL_PARTIAL ? job->ops->partial
                                                   : job->ops->reduce;
    f(t);
}

void kv_attn_work(const struct kv_attn_job *job, struct pool *pool, int ith, int nth) {
    ANVIL_ASSERT(nth == job->n_threads && ith >= 0 && ith < nth && (pool || nth == 1));
    int32_t nkv = kv_layout(job->kv)->n_head_kv;
    int32_t i = job->th_start[ith], end = job->th_start[ith + 1];
    /* first entry holding item i */
    int32_t lo = 0, hi = job->n_ent;
    while (hi - lo > 1) {
        int32_t mid = (lo + hi) / 2;
        if (job->item_off[mid] <= i) lo = mid;
        else hi = mid;
    }
    int32_t e_i = lo;
    struct kn_attn_task t;
    while (i < end) {
        while (job->item_off[e_i + 1] <= i) e_i++;
        const struct kv_attn_ent *e = &job->ent[e_i];
        int32_t local = i - job->item_off[e_i];
        int32_t h = local / e->units, u = local % e->units;
        task_init(job, e, h, &t);
        if (e->decode && job->split) {
            /* consecutive chunks of one task in one call */
            int32_t c1 = e->units;
            if (c1 - u > end - i) c1 = u + (end - i);
            t.c0 = e->c_lo + u;
            t.c1 = e->c_lo + c1;
            t.part = rec_ptr(job, e, h, u);
            call(job, KV_ATTN_CALL_PARTIAL, h, &t);
            i += c1 - u;
        } else if (e->decode) {
            call(job, KV_ATTN_CALL_ATTN, h, &t);
            i++;
        } else {
            int32_t r0 = u * e->rows;
            t.n_rows = e->s.n_tokens - r0 < e->rows ? e->s.n_tokens - r0 : e->rows;
            t.pos = e->s.pos + r0;
            t.q += (size_t)r0 * job->q_stride;
            t.out += (size_t)r0 * job->out_stride;
            call(job, KV_ATTN_CALL_ATTN, h, &t);
            i++;
        }
    }
    if (!job->split) return;
    if (pool) pool_barrier(pool);
    int32_t r0, r1;
    pool_split(job->n_red * nkv, ith, nth, 1, &r0, &r1);
    for (int32_t r = r0; r < r1; r++) {
        const struct kv_attn_ent *e = &job->ent[job->red[r / nkv]];
        int32_t h = r % nkv;
        task_init(job, e, h, &t);
        t.c0 = e->c_lo;
        t.c1 = e->c_lo + e->n_chunks;
        t.part = rec_ptr(job, e, h, 0);
        call(job, KV_ATTN_CALL_REDUCE, h, &t);
    }
}

struct run_arg {
    const struct kv_attn_job *job;
    struct pool *pool;
};

static void run_fn(void *arg, int ith, int nth) {
    const struct run_arg *a = arg;
    kv_attn_work(a->job, a->pool, ith, nth);
}

void kv_attn_run(const struct kv_attn_job *job, struct pool *pool) {
    if (!pool) {
        kv_attn_work(job, NULL, 0, 1);
        return;
    }
    struct run_arg a = {job, pool};
    pool_run(pool, run_fn, &a);
}
