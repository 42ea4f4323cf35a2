/*
 * kv_attn.c - the attention driver over the paged cache: turns one layer's
 * batch (decode rows and prefill chunks of many sequences) into kernel
 * tasks (kernels/attn.h), spreads them over threads by estimated cost, and
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
 * Cost model (key*vector units: one key against one query vector at
 * head_dim 64 is 1): a kv task over K keys costs K * (COST_LOAD + group);
 * a kernel call adds COST_CALL; a split adds COST_SPLIT once (barrier and
 * reduction). Calibrated with bench_attention --cpu-time --threads 1 on
 * the development machine (Sapphire Rapids, avx512, F16, caches warm):
 *     smollm2  (G 3, hd 64)   21.5 ns per key and kv head
 *     llama3-8b (G 4, hd 128) 56 ns            (-> 28 per 64 dims)
 *     mqa      (G 8, hd 128)  96 ns            (-> 48 per 64 dims)
 * i.e. about 6.5 ns per unit with COST_LOAD under 1 unit per key; a
 * barrier plus the reduction of a batch-1 step is 1-2 us, ~300 units.
 * At batch 1, ctx 512, smollm2 shape, 2 threads, split measured 15%
 * faster than no split (35 vs 41 us), which these constants reproduce.
 *
 * Split-K speedup measured (bench_attention --cpu-time, 2 threads, F16,
 * ctx 8192; a call costs the slowest thread's CPU time, because the
 * shared machine's descheduling swamps the wall clock), three runs each:
 *     mqa 8/1 heads (1 task),  batch 1: 1.69x 1.86x 1.89x   -> split
 *     smollm2 9/3 (3 tasks),   batch 1: 1.05x 1.07x 1.10x   -> split
 *     llama3-8b 32/8 (8 tasks),batch 1: 0.95x 0.96x 0.97x   -> no split
 *     any shape,               batch 4: 0.92x .. 0.99x      -> no split
 * Wall clock in a quiet spell (after the spread-prefetch kernel, measured
 * read bandwidth 11.0 GB/s on 1 thread, 22.6 on 2), smollm2 shape, batch
 * 1, split off -> on: ctx 512 1.26x, 1024 1.35x, 2048 1.37x, 8192 1.21x;
 * batch 4..64 within 0.87x..1.15x of no split (noise), and the policy
 * kept those unsplit.
 * With one task per kv head, a batch-1 step already has n_head_kv tasks;
 * splitting helps by the imbalance of n_head_kv over the threads (at most
 * 4/3 for 3 heads on 2 threads), and the full factor only when there are
 * fewer tasks than threads. The policy's choices match every row.
 */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/pool.h"
#include "kv/kv_internal.h"

#define COST_LOAD 1.0    /* per key: read and convert K and V once per task */
#define COST_CALL 32.0   /* per kernel call: setup, state init, record write */
#define COST_SPLIT 300.0 /* per split call: the barrier and the reduction */
#define MAX_SIM_THREADS 256

/* ---------------------------------------------------------------------- */
/* policy */

static double task_cost(int64_t keys, int32_t group, double hd_f) {
    return (double)keys * (COST_LOAD + group) * hd_f + COST_CALL;
}

/* Contiguous partition of decode work (plus `other`, taken as evenly
 * divisible) over nth threads by cost midpoints; returns the makespan. */
static double sim_makespan(int32_t n_decode, const int32_t *n_kv, int32_t n_head_kv,
                           int32_t group, double hd_f, double other, int nth, bool split) {
    double load[MAX_SIM_THREADS] = {0};
    double w = 0.0;
    for (int32_t i = 0; i < n_decode; i++) {
        if (split) {
            int32_t nc = kn_attn_n_chunks(n_kv[i]);
            w += n_head_kv * ((double)n_kv[i] * (COST_LOAD + group) * hd_f + nc * COST_CALL);
        } else {
            w += n_head_kv * task_cost(n_kv[i], group, hd_f);
        }
    }
    if (w <= 0.0) return other / nth;
    double acc = 0.0;
    for (int32_t i = 0; i < n_decode; i++) {
        int32_t nc = split ? kn_attn_n_chunks(n_kv[i]) : 1;
        for (int32_t h = 0; h < n_head_kv; h++) {
            for (int32_t c = 0; c < nc; c++) {
                int32_t keys = split ? (c + 1 < nc ? KN_ATTN_CHUNK : n_kv[i] - c * KN_ATTN_CHUNK)
                                     : n_kv[i];
                double cost = task_cost(keys, group, hd_f);
                int t = (int)((acc + 0.5 * cost) * nth / w);
                if (t >= nth) t = nth - 1;
                load[t] += cost;
                acc += cost;
            }
        }
    }
    double mx = 0.0;
    for (int t = 0; t < nth; t++) mx = load[t] > mx ? load[t] : mx;
    return mx + other / nth + (split ? COST_SPLIT : 0.0);
}

/* Split decode rows into chunks when that shortens the step. Without a
 * split, a (sequence, kv head) task is the unit: with few tasks (batch 1:
 * n_head_kv tasks) threads idle while one finishes a long context. With a
 * split, chunks of 256 keys balance the threads at the price of a barrier,
 * a reduction and one partial record per chunk. Both schedules are costed
 * with the model above and the cheaper one wins; at large batch the tasks
 * already balance and the split's fixed cost decides against it. */
bool kv_split_policy(int32_t n_decode, const int32_t *n_kv, int32_t n_head_kv, int32_t group,
                     int32_t head_dim, double other_cost, int n_threads) {
    if (n_threads <= 1 || n_decode <= 0) return false;
    if (n_threads > MAX_SIM_THREADS) n_threads = MAX_SIM_THREADS;
    double hd_f = head_dim / 64.0;
    double m0 = sim_makespan(n_decode, n_kv, n_head_kv, group, hd_f, other_cost, n_threads, false);
    double m1 = sim_makespan(n_decode, n_kv, n_head_kv, group, hd_f, other_cost, n_threads, true);
    return m1 < m0;
}

/* ---------------------------------------------------------------------- */
/* plan */

/* Cost of item u (unit index within one kv head) of an entry. */
static double item_cost(const struct kv_attn_job *job, const struct kv_attn_ent *e, int32_t u,
                        double hd_f) {
    int32_t G = job->group;
    if (e->decode) {
        if (!job->split) return task_cost(e->n_kv, G, hd_f);
        int32_t keys = u + 1 < e->n_chunks ? KN_ATTN_CHUNK : e->n_kv - u * KN_ATTN_CHUNK;
        return task_cost(keys, G, hd_f);
    }
    int32_t r0 = u * e->rows, r1 = r0 + e->rows < e->s.n_tokens ? r0 + e->rows : e->s.n_tokens;
    double keys = (double)e->s.pos + r1;                      /* read once per tile */
    double qk = (double)(r1 - r0) * G * (e->s.pos + 0.5 * (r0 + r1 + 1)); /* causal */
    return (keys * COST_LOAD + qk) * hd_f + COST_CALL;
}

anvil_status kv_attn_prepare(struct kv_cache *kv, const struct kn_attn_ops *ops, int32_t layer,
                             const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                             size_t out_stride, int n_threads, enum kv_split split,
                             struct kv_attn_job **out) {
    struct kv_attn_job *job = &kv->job;
    if (!ops || layer < 0 || layer >= kv->p.n_layer || n_seqs < 0 || n_seqs > kv->p.n_seq_max ||
        n_threads < 1 || n_threads > kv->p.n_threads)
        return ANVIL_ERR_INVALID;
    int32_t hd = kv->lay.head_dim, nkv = kv->lay.n_head_kv;
    int32_t G = kv->p.n_head / nkv;
    double hd_f = hd / 64.0;
    anvil_status st = ANVIL_OK;
    int32_t i = 0, n_decode = 0;
    double other = 0.0;
    job->ops = ops;
    job->base = kv_layer_base(kv, layer);
    job->q_stride = q_stride;
    job->out_stride = out_stride;
    job->scale = 1.0f / sqrtf((float)hd);
    job->group = G;
    job->n_threads = n_threads;
    job->n_ent = n_seqs;
    job->split = false;
    for (; i < n_seqs; i++) {
        const struct kv_attn_seq *s = &seqs[i];
        if (s->seq < 0 || s->seq >= kv->p.n_seq_max || kv->seqs[s->seq].mark || s->n_tokens < 1 ||
            s->pos < 0 || (int64_t)s->pos + s->n_tokens > (int64_t)kv->seqs[s->seq].n_blocks * kv->bs ||
            !s->q || !s->out) {
            st = ANVIL_ERR_INVALID;
            break;
        }
        kv->seqs[s->seq].mark = 1;
        struct kv_attn_ent *e = &job->ent[i];
        e->s = *s;
        e->blocks = kv_seq_blocks(kv, s->seq);
        e->n_kv = s->pos + s->n_tokens;
        e->decode = s->n_tokens == 1;
        e->n_chunks = kn_attn_n_chunks(e->n_kv);
        e->rows = KN_ATTN_MAXQ / G;
        if (e->decode) {
            job->nkv[n_decode++] = e->n_kv;
        } else {
            e->units = (s->n_tokens + e->rows - 1) / e->rows;
            for (int32_t u = 0; u < e->units; u++) other += nkv * item_cost(job, e, u, hd_f);
        }
    }
    for (int32_t j = 0; j < i; j++) kv->seqs[seqs[j].seq].mark = 0;
    if (st != ANVIL_OK) return st;

    if (split == KV_SPLIT_ON) job->split = n_decode > 0;
    else if (split == KV_SPLIT_AUTO)
        job->split = kv_split_policy(n_decode, job->nkv, nkv, G, hd, other, n_threads);
    if (job->split) {
        /* records must fit the scratch (kv_init caps it); else run unsplit */
        int64_t need = 0;
        for (i = 0; i < n_decode; i++) need += (int64_t)nkv * kn_attn_n_chunks(job->nkv[i]);
        if ((uint64_t)need > kv->part_recs) job->split = false;
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
    ANVIL_ASSERT((uint64_t)recs <= kv->part_recs);

    /* contiguous partition by cost midpoints */
    double total = 0.0;
    for (i = 0; i < n_seqs; i++)
        for (int32_t u = 0; u < job->ent[i].units; u++)
            total += nkv * item_cost(job, &job->ent[i], u, hd_f);
    int t = 0;
    job->th_start[0] = 0;
    double acc = 0.0;
    int32_t it = 0;
    for (i = 0; i < n_seqs; i++) {
        const struct kv_attn_ent *e = &job->ent[i];
        for (int32_t h = 0; h < nkv; h++) {
            for (int32_t u = 0; u < e->units; u++, it++) {
                double c = item_cost(job, e, u, hd_f);
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

bool kv_attn_job_split(const struct kv_attn_job *job) { return job->split; }

/* ---------------------------------------------------------------------- */
/* run */

static void task_init(const struct kv_attn_job *job, const struct kv_attn_ent *e, int32_t h,
                      struct kn_attn_task *t) {
    const struct kv_cache *kv = job->kv;
    int32_t hd = kv->lay.head_dim;
    memset(t, 0, sizeof(*t));
    t->kv = &kv->lay;
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
}

static float *rec_ptr(const struct kv_attn_job *job, const struct kv_attn_ent *e, int32_t h,
                      int32_t c) {
    size_t rec = kn_attn_rec_floats(job->group, job->kv->lay.head_dim);
    return job->part + ((size_t)e->part_off + (size_t)h * e->n_chunks + (size_t)c) * rec;
}

void kv_attn_work(const struct kv_attn_job *job, struct pool *pool, int ith, int nth) {
    ANVIL_ASSERT(nth == job->n_threads && ith >= 0 && ith < nth && (pool || nth == 1));
    int32_t nkv = job->kv->lay.n_head_kv;
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
            t.c0 = u;
            t.c1 = c1;
            t.part = rec_ptr(job, e, h, u);
            job->ops->partial(&t);
            i += c1 - u;
        } else if (e->decode) {
            job->ops->attn(&t);
            i++;
        } else {
            int32_t r0 = u * e->rows;
            t.n_rows = e->s.n_tokens - r0 < e->rows ? e->s.n_tokens - r0 : e->rows;
            t.pos = e->s.pos + r0;
            t.q += (size_t)r0 * job->q_stride;
            t.out += (size_t)r0 * job->out_stride;
            job->ops->attn(&t);
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
        t.c0 = 0;
        t.c1 = e->n_chunks;
        t.part = rec_ptr(job, e, h, 0);
        job->ops->reduce(&t);
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
