/*
 * bench_hp1.c - decode attention micro-benchmark: HP1 gated attention
 * (kernels/attn_hp1.h) next to the softmax kernels (kernels/attn.h) at the
 * same shapes, over the same paged KV cache, driven the same way.
 * Standalone (its own main); `anvil bench --attention --kind hp1` is meant
 * to call into it later.
 *
 * One case = (shape, batch, ctx, split): `batch` sequences of `ctx` cached
 * tokens, one decode row each; a timed call is one layer's attention for
 * the whole batch on a thread pool. The KV of a case is spread over enough
 * layers that a timed loop touches --footprint MB, so the numbers are
 * memory numbers, not cache numbers; block tables are interleaved (one
 * block per sequence per round, plus a gap sequence).
 *
 * Both kinds use one driver (below), modelled on src/kv/kv_attn.c: tasks
 * per (sequence, kv head); with the split, items per (sequence, kv head,
 * 256-key chunk), consecutive chunks of one task in one `partial` call,
 * a pool barrier, then `reduce` per task. Items go to threads as
 * contiguous runs by cost (keys).
 *
 * Per case it times: softmax; HP1 with sparse PV (the kernel) at each
 * target sparsity; HP1 with dense PV (every position, zeros included);
 * HP1 without PV (QK and gate alone). PV time = time - time without PV,
 * so the PV speedup of sparsity is (dense - none) / (sparse - none).
 * Sparsity comes from kn_hp1_gate_keys/_queries and kn_hp1_calibrate
 * (attn_hp1.h): the keys carry gate dimensions, each target sets the
 * queries and calibrates the taps (1, -a, -a) on the scores of up to two
 * sequences; the zero share reached is reported.
 *
 * KV bytes per call (for GB/s), as bench_attn: 2 * batch * head_dim *
 * n_head_kv * ctx * element bytes (2 for F16, 34/32 for Q8_0), whatever
 * a kernel skips. Before timing, each kind's output is compared with its
 * reference kernel on sampled sequences; a disagreeing kernel gets no
 * number.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xmmintrin.h>

#include "core/core.h"
#include "core/pool.h"
#include "kernels/attn.h"
#include "kernels/attn_hp1.h"
#include "kv/kv_cache.h"

#define MAXT 64

struct shape {
    const char *name;
    int n_head, n_head_kv, head_dim;
};

static const struct shape SHAPES[] = {
    {"smollm2", 9, 3, 64},
    {"llama3-8b", 32, 8, 128},
    /* one kv head: the case split-K exists for (fewer tasks than threads) */
    {"mqa", 8, 1, 128},
};
#define N_SHAPES 3

struct opts {
    bool shape_on[N_SHAPES];
    int batch[16], n_batch;
    int ctx[16], n_ctx;
    int sparsity[8], n_sparsity; /* target % of p == 0 */
    bool split_on[2];            /* off, on */
    int threads;
    int kv_type;
    const char *kernels;
    double footprint_mb, max_mem_mb;
    int reps;
    bool json, no_bw, cpu_time, shared;
};

/* ---------------------------------------------------------------------- */
/* small utilities */

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "bench_hp1: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
    fprintf(stderr,
            "usage: bench_hp1 [--shape smollm2,llama3-8b,mqa|all] [--batch 1,16,64]\n"
            "                 [--ctx 512,...,8192] [--sparsity 0,50,70,90] [--split off,on]\n"
            "                 [--threads N] [--kv-type f16|q8_0] [--kernels auto|ref|avx2|avx512]\n"
            "                 [--footprint MB] [--max-mem MB] [-r N] [--shared] [--cpu-time]\n"
            "                 [--no-bw] [--json]\n");
    return 2;
}

static int parse_list(const char *s, int *out, int cap, int lo, int hi) {
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || n == cap) return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, int n, double q) {
    double pos = q * (n - 1);
    int i = (int)pos;
    double f = pos - i;
    return i + 1 < n ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double max_of(const double *x, int n) {
    double m = 0.0;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static const char *commit_id(void) {
    static char id[64] = "";
    if (id[0]) return id;
    snprintf(id, sizeof(id), "unknown");
    FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
    if (p) {
        char buf[64];
        if (fgets(buf, sizeof(buf), p)) {
            buf[strcspn(buf, "\n")] = 0;
            if (buf[0]) snprintf(id, sizeof(id), "%s", buf);
        }
        pclose(p);
    }
    return id;
}

static const char *cpu_flags(void) {
    const struct cpu_features *f = cpu_get_features();
    static char s[128];
    snprintf(s, sizeof(s), "%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
             f->avx512f ? "avx512f " : "", f->avx512vnni ? "avx512vnni" : "");
    return s;
}

static float lcg_uniform(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return (float)(*x >> 8) * 0x1p-23f - 1.0f;
}

/* ---------------------------------------------------------------------- */
/* read bandwidth: every thread sums its slice of a buffer far larger than
 * the caches; best of several passes (as bench_attn) */

struct bw_job {
    const uint64_t *buf;
    size_t n;
    uint64_t sink[MAXT];
    double cpu[MAXT];
};

static void bw_fn(void *arg, int ith, int nth) {
    struct bw_job *j = arg;
    double c0 = thread_cpu_s();
    size_t per = j->n / (size_t)nth, i0 = per * (size_t)ith, i1 = ith == nth - 1 ? j->n : i0 + per;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    const uint64_t *p = j->buf;
    size_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        _mm_prefetch((const char *)(p + i) + 4096, _MM_HINT_T0);
        a0 += p[i] + p[i + 4];
        a1 += p[i + 1] + p[i + 5];
        a2 += p[i + 2] + p[i + 6];
        a3 += p[i + 3] + p[i + 7];
    }
    for (; i < i1; i++) a0 += p[i];
    j->sink[ith % MAXT] = a0 + a1 + a2 + a3;
    j->cpu[ith % MAXT] = thread_cpu_s() - c0;
}

static double read_bandwidth(struct pool *pool, size_t bytes, bool cpu_time) {
    uint64_t *buf = anvil_malloc_aligned(bytes);
    if (!buf) return 0.0;
    struct bw_job j = {.buf = buf, .n = bytes / 8};
    for (size_t i = 0; i < j.n; i++) buf[i] = i * 0x9e3779b97f4a7c15ULL;
    double best = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = time_now_s();
        pool_run(pool, bw_fn, &j);
        double dt = time_now_s() - t0;
        if (cpu_time) dt = max_of(j.cpu, pool_size(pool) < MAXT ? pool_size(pool) : MAXT);
        double gbs = (double)bytes / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    anvil_free_aligned(buf);
    return best;
}

/* ---------------------------------------------------------------------- */
/* the driver: one layer's decode attention for a batch, either kind */

enum kind { K_SOFTMAX, K_HP1 };

struct drv {
    enum kind kind;
    const struct kn_attn_ops *sm;
    const struct kn_hp1_ops *hp1;
    enum kn_hp1_pv pv;
    struct kv_cache *kv;
    int layer, batch, ctx, n_head_kv, group, hd;
    float scale;
    const float *q; /* (batch, n_head * hd) */
    float *out;     /* same */
    size_t row;
    struct kn_hp1_params hp; /* taps (n_head, 3) */
    bool split;
    int nc;         /* chunks per sequence */
    size_t rec;     /* floats per partial record */
    float *part;    /* (batch * n_head_kv, nc, rec) */
    int th_start[MAXT + 1];
    struct pool *pool;
    double cpu[MAXT];
};

static void drv_plan(struct drv *d, int nth) {
    int n_tasks = d->batch * d->n_head_kv;
    int per = d->split ? d->nc : 1;
    int n_items = n_tasks * per;
    /* item cost: keys it covers (the last chunk of a sequence is partial) */
    double total = (double)n_tasks * d->ctx, acc = 0.0;
    int t = 0;
    d->th_start[0] = 0;
    for (int i = 0; i < n_items; i++) {
        int c = i % per;
        double cost = !d->split ? d->ctx
                                : (c + 1 < d->nc ? KN_ATTN_CHUNK : d->ctx - c * KN_ATTN_CHUNK);
        int tt = (int)((acc + 0.5 * cost) * nth / total);
        if (tt >= nth) tt = nth - 1;
        while (t < tt) d->th_start[++t] = i;
        acc += cost;
    }
    while (t < nth) d->th_start[++t] = n_items;
}

static void task_sm(const struct drv *d, int s, int h, struct kn_attn_task *t) {
    memset(t, 0, sizeof(*t));
    t->kv = kv_layout(d->kv);
    t->base = kv_layer_base(d->kv, d->layer);
    t->blocks = kv_seq_blocks(d->kv, s);
    t->kv_head = h;
    t->group = d->group;
    t->scale = d->scale;
    t->q = d->q + (size_t)s * d->row + (size_t)h * d->group * d->hd;
    t->q_stride = d->row;
    t->out = d->out + (size_t)s * d->row + (size_t)h * d->group * d->hd;
    t->out_stride = d->row;
    t->pos = d->ctx - 1;
    t->n_rows = 1;
}

static void task_hp1(const struct drv *d, int s, int h, struct kn_hp1_task *t) {
    task_sm(d, s, h, &t->at);
    t->hp = d->hp;
    t->hp.taps = d->hp.taps + (size_t)h * d->group * d->hp.n_taps;
    t->pv = d->pv;
}

static void drv_call(const struct drv *d, int task, int c0, int c1, int which) {
    int s = task / d->n_head_kv, h = task % d->n_head_kv;
    float *part = d->part + ((size_t)task * d->nc + (size_t)c0) * d->rec;
    if (d->kind == K_SOFTMAX) {
        struct kn_attn_task t;
        task_sm(d, s, h, &t);
        t.c0 = c0;
        t.c1 = c1;
        t.part = part;
        if (which == 0) d->sm->attn(&t);
        else if (which == 1) d->sm->partial(&t);
        else d->sm->reduce(&t);
    } else {
        struct kn_hp1_task t;
        task_hp1(d, s, h, &t);
        t.at.c0 = c0;
        t.at.c1 = c1;
        t.at.part = part;
        if (which == 0) d->hp1->attn(&t);
        else if (which == 1) d->hp1->partial(&t);
        else d->hp1->reduce(&t);
    }
}

static void drv_work(void *arg, int ith, int nth) {
    struct drv *d = arg;
    double c0 = thread_cpu_s();
    int i = d->th_start[ith], end = d->th_start[ith + 1];
    while (i < end) {
        if (!d->split) {
            drv_call(d, i, 0, 0, 0);
            i++;
            continue;
        }
        int task = i / d->nc, c = i % d->nc;
        int c1 = d->nc - c < end - i ? d->nc : c + (end - i);
        drv_call(d, task, c, c1, 1);
        i += c1 - c;
    }
    if (d->split) {
        if (nth > 1) pool_barrier(d->pool);
        int r0, r1;
        pool_split(d->batch * d->n_head_kv, ith, nth, 1, &r0, &r1);
        for (int r = r0; r < r1; r++) drv_call(d, r, 0, d->nc, 2);
    }
    if (ith < MAXT) d->cpu[ith] = thread_cpu_s() - c0;
}

/* ---------------------------------------------------------------------- */
/* one case */

static double elt_bytes(int type) { return type == ANVIL_TYPE_Q8_0 ? 34.0 / 32.0 : 2.0; }

/* The driver's output on layer 0 against the reference kernel of its kind
 * (unsplit) on the first and the last sequence (the reference is slow). */
static bool verify(struct drv *d, float *ref) {
    struct drv r = *d;
    r.sm = kn_attn_select("ref");
    r.hp1 = kn_hp1_select("ref");
    r.pv = KN_HP1_PV_SPARSE;
    r.out = ref;
    r.split = false;
    for (int s = 0; s < d->batch; s += d->batch > 1 ? d->batch - 1 : 1) {
        for (int h = 0; h < d->n_head_kv; h++) drv_call(&r, s * d->n_head_kv + h, 0, 0, 0);
        const float *o = d->out + (size_t)s * d->row, *w = ref + (size_t)s * d->row;
        double num = 0, den = 0, wmax = 0;
        for (size_t i = 0; i < d->row; i++) wmax = fabs(w[i]) > wmax ? fabs(w[i]) : wmax;
        bool ok = true;
        for (size_t i = 0; i < d->row; i++) {
            double e = (double)o[i] - w[i];
            num += e * e;
            den += (double)w[i] * w[i];
            ok &= fabs(e) <= 1e-5 * wmax + 1e-4 * fabs(w[i]);
        }
        if (!ok || !(num <= 1e-8 * den)) {
            fprintf(stderr, "bench_hp1: %s kernel disagrees with ref (batch %d ctx %d seq %d: nmse %.3g)\n",
                    d->kind == K_SOFTMAX ? "softmax" : "hp1", d->batch, d->ctx, s,
                    den > 0 ? num / den : num);
            return false;
        }
    }
    return true;
}

struct timing {
    double us, p10, p90;
};

/* Time one configuration of the driver over the layers; 0 or -1. */
static int time_drv(const struct opts *o, struct drv *d, int n_layer, double *t_us, struct timing *tm) {
    int warm = n_layer < 4 ? n_layer : 4;
    for (int l = 0; l < warm; l++) {
        d->layer = l;
        pool_run(d->pool, drv_work, d);
    }
    uint64_t allocs = anvil_alloc_count();
    for (int r = 0; r < o->reps; r++) {
        d->layer = (warm + r) % n_layer;
        double t0 = time_now_s();
        pool_run(d->pool, drv_work, d);
        t_us[r] = (time_now_s() - t0) * 1e6;
        if (o->cpu_time) t_us[r] = max_of(d->cpu, o->threads < MAXT ? o->threads : MAXT) * 1e6;
    }
    if (anvil_alloc_count() != allocs) {
        fprintf(stderr, "bench_hp1: the attention path allocated memory\n");
        return -1;
    }
    qsort(t_us, (size_t)o->reps, sizeof(double), cmp_double);
    tm->us = pct(t_us, o->reps, 0.5);
    tm->p10 = pct(t_us, o->reps, 0.1);
    tm->p90 = pct(t_us, o->reps, 0.9);
    d->layer = 0;
    return 0;
}

/* Write ctx tokens of every sequence (and the gap) into every layer, block
 * by block in turn; K carries gate dimensions. */
static int fill_kv(struct kv_cache *kv, const struct shape *sh, int batch, int ctx, int n_layer,
                   bool shared) {
    int bs = 16;
    size_t row = (size_t)sh->n_head_kv * sh->head_dim;
    float *k = anvil_malloc((size_t)bs * row * sizeof(float));
    float *v = anvil_malloc((size_t)bs * row * sizeof(float));
    if (!k || !v) {
        anvil_free(k);
        anvil_free(v);
        return -1;
    }
    uint32_t x = 0x5eed;
    int rc = 0;
    for (int t0 = 0; t0 < ctx && !rc; t0 += bs) {
        int n = ctx - t0 < bs ? ctx - t0 : bs;
        for (int s = 0; s <= batch && !rc; s++) {
            if (kv_seq_reserve(kv, s, n) != ANVIL_OK) {
                rc = -1;
                break;
            }
            for (int l = 0; l < n_layer; l++) {
                for (size_t i = 0; i < (size_t)n * row; i++) k[i] = lcg_uniform(&x);
                for (size_t i = 0; i < (size_t)n * row; i++) v[i] = lcg_uniform(&x);
                kn_hp1_gate_keys(k, row, n, sh->n_head_kv, sh->head_dim,
                                 sh->n_head / sh->n_head_kv, shared, x);
                kv_write(kv, l, s, t0, n, k, row, v, row);
            }
            if (kv_seq_commit(kv, s, n, NULL) != ANVIL_OK) rc = -1;
        }
    }
    anvil_free(k);
    anvil_free(v);
    return rc;
}

/* Queries for a target sparsity and taps calibrated on the scores of up
 * to two sequences (layer 0); returns the zero share reached. */
static double set_sparsity(struct drv *d, const struct shape *sh, float *q, const float *q_rand,
                           int target, float *taps, float *scores) {
    memcpy(q, q_rand, (size_t)d->batch * d->row * sizeof(float));
    double on = target == 0 ? 1.0 : 1.0 - target / 100.0 + 0.01;
    kn_hp1_gate_queries(q, d->row, d->batch, sh->n_head, sh->n_head_kv, sh->head_dim, d->scale, on);
    int n_s = d->batch < 2 ? d->batch : 2, n_vec = 0;
    for (int s = 0; s < n_s; s++)
        for (int i = 0; i < sh->n_head; i++, n_vec++)
            kn_hp1_scores_ref(kv_layout(d->kv), kv_layer_base(d->kv, 0), kv_seq_blocks(d->kv, s),
                              i / d->group, q + (size_t)s * d->row + (size_t)i * d->hd, d->scale,
                              d->ctx, scores + (size_t)n_vec * d->ctx);
    return kn_hp1_calibrate(scores, n_vec, d->ctx, target / 100.0, sh->n_head, taps, &d->hp);
}

static void print_row(const struct opts *o, const struct shape *sh, const struct drv *d, int target,
                      double zero, const struct timing *sm, const struct timing *hs,
                      const struct timing *hd, const struct timing *hn, double bytes, double bw) {
    double pv_s = hs->us - hn->us, pv_d = hd->us - hn->us;
    const char *tname = o->kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16";
    if (o->json) {
        printf("{\"bench\":\"attention_hp1\",\"commit\":\"%s\",\"cpu\":\"%s\",\"kernels\":\"%s\","
               "\"threads\":%d,\"clock\":\"%s\",\"kv_type\":\"%s\",\"shape\":\"%s\",\"n_head\":%d,"
               "\"n_head_kv\":%d,\"head_dim\":%d,\"batch\":%d,\"ctx\":%d,\"split\":\"%s\","
               "\"sparsity_target\":%.2f,\"zero_frac\":%.4f,\"shared_pattern\":%s,"
               "\"softmax_us\":%.2f,\"softmax_p10\":%.2f,\"softmax_p90\":%.2f,"
               "\"hp1_us\":%.2f,\"hp1_p10\":%.2f,\"hp1_p90\":%.2f,\"hp1_dense_us\":%.2f,"
               "\"hp1_gate_only_us\":%.2f,\"pv_sparse_us\":%.2f,\"pv_dense_us\":%.2f,"
               "\"pv_speedup\":%.3f,\"softmax_over_hp1_dense\":%.3f,\"softmax_over_hp1\":%.3f,"
               "\"kv_bytes\":%.0f,\"softmax_gbs\":%.2f,\"hp1_dense_gbs\":%.2f,\"hp1_gbs\":%.2f,"
               "\"read_bw_gbs\":%.2f}\n",
               commit_id(), cpu_flags(), d->hp1->name, o->threads, o->cpu_time ? "cpu" : "wall", tname,
               sh->name, sh->n_head, sh->n_head_kv, sh->head_dim, d->batch, d->ctx,
               d->split ? "on" : "off", target / 100.0, zero, o->shared ? "true" : "false", sm->us,
               sm->p10, sm->p90, hs->us, hs->p10, hs->p90, hd->us, hn->us, pv_s, pv_d,
               pv_s > 0 ? pv_d / pv_s : 0.0, sm->us / hd->us, sm->us / hs->us, bytes,
               bytes / (sm->us * 1e3), bytes / (hd->us * 1e3), bytes / (hs->us * 1e3), bw);
    } else {
        printf("| %-9s | %5d | %4d | %-3s | %3d%% %5.1f%% | %9.1f | %9.1f | %9.1f | %9.1f | %5.2fx | "
               "%5.2fx | %5.1f | %5.1f |\n",
               sh->name, d->batch, d->ctx, d->split ? "on" : "off", target, 100.0 * zero, sm->us, hd->us,
               hs->us, hn->us, pv_s > 0 ? pv_d / pv_s : 0.0, sm->us / hd->us, bytes / (sm->us * 1e3),
               bytes / (hs->us * 1e3));
    }
    fflush(stdout);
}

/* 0 ran, 1 skipped (memory), -1 failure */
static int run_case(const struct opts *o, const struct shape *sh, struct pool *pool, int batch, int ctx,
                    double bw) {
    const int bs = 16;
    int blocks_seq = (ctx + bs - 1) / bs;
    int n_blocks = (batch + 1) * blocks_seq;
    double layer_bytes = 2.0 * sh->head_dim * sh->n_head_kv * (double)bs * elt_bytes(o->kv_type) * n_blocks;
    int n_layer = (int)ceil(o->footprint_mb * 1048576.0 / layer_bytes);
    if (n_layer < 1) n_layer = 1;
    if (n_layer > 4096) n_layer = 4096;
    if (layer_bytes * n_layer > o->max_mem_mb * 1048576.0) {
        n_layer = (int)(o->max_mem_mb * 1048576.0 / layer_bytes);
        if (n_layer < 1) return 1;
    }
    struct kv_params p = {
        .n_layer = n_layer,
        .n_head = sh->n_head,
        .n_head_kv = sh->n_head_kv,
        .head_dim = sh->head_dim,
        .type = o->kv_type,
        .block_size = bs,
        .n_blocks = n_blocks,
        .n_seq_max = batch + 1,
        .n_ctx = ctx,
        .n_threads = o->threads,
    };
    struct kv_cache *kv = NULL;
    char err[256];
    if (kv_init(&p, &kv, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "bench_hp1: %s\n", err);
        return -1;
    }
    size_t row = (size_t)sh->n_head * sh->head_dim;
    int G = sh->n_head / sh->n_head_kv, nc = kn_attn_n_chunks(ctx);
    size_t rec = kn_attn_rec_floats(G, sh->head_dim);
    float *q_rand = anvil_malloc((size_t)batch * row * sizeof(float));
    float *q = anvil_malloc_aligned((size_t)batch * row * sizeof(float));
    float *out = anvil_malloc_aligned((size_t)batch * row * sizeof(float));
    float *ref = anvil_malloc_aligned((size_t)batch * row * sizeof(float));
    float *part = anvil_malloc_aligned((size_t)batch * sh->n_head_kv * nc * rec * sizeof(float));
    float *scores = anvil_malloc((size_t)2 * sh->n_head * ctx * sizeof(float));
    float *taps = anvil_malloc((size_t)sh->n_head * 3 * sizeof(float));
    double *t_us = anvil_malloc((size_t)o->reps * sizeof(double));
    int rc = 0;
    if (!q_rand || !q || !out || !ref || !part || !scores || !taps || !t_us ||
        fill_kv(kv, sh, batch, ctx, n_layer, o->shared)) {
        rc = -1;
        goto done;
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)batch * row; i++) q_rand[i] = lcg_uniform(&x);
    double bytes = 2.0 * batch * sh->head_dim * sh->n_head_kv * (double)ctx * elt_bytes(o->kv_type);
    struct drv d = {
        .sm = kn_attn_select(o->kernels),
        .hp1 = kn_hp1_select(o->kernels),
        .kv = kv,
        .batch = batch,
        .ctx = ctx,
        .n_head_kv = sh->n_head_kv,
        .group = G,
        .hd = sh->head_dim,
        .scale = 1.0f / sqrtf((float)sh->head_dim),
        .q = q,
        .out = out,
        .row = row,
        .nc = nc,
        .part = part,
        .pool = pool,
    };
    for (int sp = 0; sp < 2; sp++) {
        if (!o->split_on[sp]) continue;
        d.split = sp == 1;
        drv_plan(&d, o->threads);
        struct timing sm, hdn, hnone;
        /* softmax, on the target-0 queries (its time does not depend on them) */
        set_sparsity(&d, sh, q, q_rand, 0, taps, scores);
        d.kind = K_SOFTMAX;
        d.rec = kn_attn_rec_floats(G, sh->head_dim);
        pool_run(pool, drv_work, &d);
        if (!verify(&d, ref)) {
            rc = -1;
            goto done;
        }
        if (time_drv(o, &d, n_layer, t_us, &sm)) {
            rc = -1;
            goto done;
        }
        /* HP1 without PV and with dense PV: the same work at any sparsity */
        d.kind = K_HP1;
        d.rec = kn_hp1_rec_floats(G, sh->head_dim);
        d.pv = KN_HP1_PV_NONE;
        if (time_drv(o, &d, n_layer, t_us, &hnone)) {
            rc = -1;
            goto done;
        }
        d.pv = KN_HP1_PV_DENSE;
        if (time_drv(o, &d, n_layer, t_us, &hdn)) {
            rc = -1;
            goto done;
        }
        for (int si = 0; si < o->n_sparsity; si++) {
            double zero = set_sparsity(&d, sh, q, q_rand, o->sparsity[si], taps, scores);
            d.pv = KN_HP1_PV_SPARSE;
            pool_run(pool, drv_work, &d);
            struct timing hs;
            if (!verify(&d, ref) || time_drv(o, &d, n_layer, t_us, &hs)) {
                rc = -1;
                goto done;
            }
            print_row(o, sh, &d, o->sparsity[si], zero, &sm, &hs, &hdn, &hnone, bytes, bw);
        }
    }
done:
    anvil_free(q_rand);
    anvil_free_aligned(q);
    anvil_free_aligned(out);
    anvil_free_aligned(ref);
    anvil_free_aligned(part);
    anvil_free(scores);
    anvil_free(taps);
    anvil_free(t_us);
    kv_free(kv);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* entry */

static int parse(int argc, char **argv, struct opts *o) {
    static const int DEF_BATCH[] = {1, 16, 64};
    static const int DEF_CTX[] = {512, 1024, 2048, 4096, 8192};
    static const int DEF_SP[] = {0, 50, 70, 90};
    memset(o, 0, sizeof(*o));
    o->shape_on[0] = o->shape_on[1] = o->shape_on[2] = true;
    memcpy(o->batch, DEF_BATCH, sizeof(DEF_BATCH));
    o->n_batch = 3;
    memcpy(o->ctx, DEF_CTX, sizeof(DEF_CTX));
    o->n_ctx = 5;
    memcpy(o->sparsity, DEF_SP, sizeof(DEF_SP));
    o->n_sparsity = 4;
    o->split_on[0] = o->split_on[1] = true;
    o->threads = cpu_count_online();
    if (o->threads > MAXT) o->threads = MAXT;
    o->kv_type = ANVIL_TYPE_F16;
    o->kernels = "auto";
    o->footprint_mb = 512;
    o->max_mem_mb = 2048;
    o->reps = 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-bw")) o->no_bw = true;
        else if (!strcmp(a, "--cpu-time")) o->cpu_time = true;
        else if (!strcmp(a, "--shared")) o->shared = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage("help", NULL);
        else {
            if (!v) return usage("missing value for", a);
            i++;
            if (!strcmp(a, "--shape")) {
                bool any = false;
                for (int k = 0; k < N_SHAPES; k++) {
                    const char *f = strstr(v, SHAPES[k].name);
                    size_t n = strlen(SHAPES[k].name);
                    o->shape_on[k] = (f && (f == v || f[-1] == ',') && (f[n] == 0 || f[n] == ',')) ||
                                     !strcmp(v, "all");
                    any |= o->shape_on[k];
                }
                if (!any) return usage("unknown shape (smollm2, llama3-8b, mqa, all)", v);
            } else if (!strcmp(a, "--batch")) {
                if ((o->n_batch = parse_list(v, o->batch, 16, 1, 1024)) < 1) return usage("bad --batch", v);
            } else if (!strcmp(a, "--ctx")) {
                if ((o->n_ctx = parse_list(v, o->ctx, 16, 1, 1 << 20)) < 1) return usage("bad --ctx", v);
            } else if (!strcmp(a, "--sparsity")) {
                if ((o->n_sparsity = parse_list(v, o->sparsity, 8, 0, 99)) < 1)
                    return usage("bad --sparsity (percent, 0..99)", v);
            } else if (!strcmp(a, "--split")) {
                o->split_on[0] = strstr(v, "off") != NULL;
                o->split_on[1] = strstr(v, "on") != NULL;
                if (!o->split_on[0] && !o->split_on[1]) return usage("bad --split (off, on)", v);
            } else if (!strcmp(a, "--threads")) {
                if (parse_list(v, &o->threads, 1, 1, MAXT) != 1) return usage("bad --threads", v);
            } else if (!strcmp(a, "--kv-type")) {
                if (!strcmp(v, "f16") || !strcmp(v, "F16")) o->kv_type = ANVIL_TYPE_F16;
                else if (!strcmp(v, "q8_0") || !strcmp(v, "Q8_0")) o->kv_type = ANVIL_TYPE_Q8_0;
                else return usage("bad --kv-type (f16, q8_0)", v);
            } else if (!strcmp(a, "--kernels")) {
                o->kernels = v;
            } else if (!strcmp(a, "--footprint") || !strcmp(a, "--max-mem")) {
                int mb;
                if (parse_list(v, &mb, 1, 1, 1 << 20) != 1) return usage("bad value for", a);
                if (a[2] == 'f') o->footprint_mb = mb;
                else o->max_mem_mb = mb;
            } else if (!strcmp(a, "-r")) {
                if (parse_list(v, &o->reps, 1, 1, 100000) != 1) return usage("bad -r", v);
            } else {
                return usage("unknown option", a);
            }
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    if (!kn_attn_select(o.kernels) || !kn_hp1_select(o.kernels))
        return usage("kernels not available on this CPU:", o.kernels);
    struct pool *pool = NULL;
    if (pool_create(o.threads, &pool) != ANVIL_OK) {
        fprintf(stderr, "bench_hp1: cannot start threads\n");
        return 1;
    }
    double bw = o.no_bw ? 0.0 : read_bandwidth(pool, (size_t)512 << 20, o.cpu_time);
    const char *tname = o.kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16";
    if (o.json) {
        printf("{\"bench\":\"read_bw\",\"threads\":%d,\"gbs\":%.2f,\"clock\":\"%s\",\"commit\":\"%s\","
               "\"cpu\":\"%s\"}\n",
               o.threads, bw, o.cpu_time ? "cpu" : "wall", commit_id(), cpu_flags());
    } else {
        printf("decode attention, HP1 vs softmax: kernels %s/%s, KV %s, %d threads, %s clock, "
               "%s zero patterns, commit %s, cpu %s\n",
               kn_attn_select(o.kernels)->name, kn_hp1_select(o.kernels)->name, tname, o.threads,
               o.cpu_time ? "CPU" : "wall", o.shared ? "group-shared" : "per-head", commit_id(),
               cpu_flags());
        printf("measured read bandwidth: %.1f GB/s (%d threads)\n", bw, o.threads);
        printf("µs per call (median); dense = HP1 with every position in PV, gate = HP1 without PV;\n"
               "PV x = (dense - gate) / (hp1 - gate); sm/dense = softmax / HP1 dense; GB/s of KV\n\n");
        printf("| shape     | batch |  ctx | split | zeros want/got | softmax | hp1 dense | hp1 | gate | "
               "PV x | sm/dense | sm GB/s | hp1 GB/s |\n");
        printf("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    fflush(stdout);
    rc = 0;
    for (int si = 0; si < N_SHAPES; si++) {
        if (!o.shape_on[si]) continue;
        for (int bi = 0; bi < o.n_batch; bi++)
            for (int ci = 0; ci < o.n_ctx; ci++) {
                int r = run_case(&o, &SHAPES[si], pool, o.batch[bi], o.ctx[ci], bw);
                if (r == 1 && !o.json)
                    printf("| %-9s | %5d | %4d | skipped: KV over --max-mem %.0f MB |\n", SHAPES[si].name,
                           o.batch[bi], o.ctx[ci], o.max_mem_mb);
                if (r < 0) rc = 1;
            }
    }
    pool_free(pool);
    return rc;
}
