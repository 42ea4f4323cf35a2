/*
 * bench_attn.c - `anvil-microbench --attention`: decode attention over the paged
 * KV cache: µs per call and
 * GB/s of KV read, split-K on and off, against the read bandwidth measured
 * on this machine (SCENARIOS.md, "Kernel micro-benchmarks"). With --kind
 * hp1, HP1 gated attention (attn/hp1/attn_hp1.h) next to the softmax at the
 * same shapes, at controlled sparsities (below).
 *
 * One case = (shape, batch, ctx): `batch` sequences of `ctx` cached tokens,
 * one decode row each, one layer's attention per timed call (kv_attn_prepare
 * + kv_attn_run, as the forward pass does). The KV of a case is spread over
 * enough layers that a timed loop touches --footprint bytes (1 GiB by
 * default), so the numbers are DRAM numbers, not cache numbers; calls cycle
 * through the layers. Block tables are interleaved (round robin over the
 * sequences plus one gap sequence), as a serving cache fragments.
 *
 * --prefill N: each sequence runs N rows instead of one (a prefill chunk at
 * the end of its ctx tokens, causal), as a chunked prefill does; reported
 * as GFLOP/s (4 * head_dim flops per query vector and key it attends to,
 * Q.K and P.V) and as a share of the float FMA peak of all threads
 * (kn_ops.f32_peak, same run): prefill attention is bound by arithmetic,
 * not by the KV read.
 *
 * KV bytes per call follow seeds/flashdecode-wormhole.md:
 *     2 * batch * head_dim * n_head_kv * ctx * element bytes
 * with 2 bytes for F16 and 34/32 for Q8_0 (a 2-byte scale per 32).
 *
 * Before timing, each case's output is compared with the reference
 * kernel's on a sample of sequences; a disagreeing kernel gets no number.
 *
 * --kind hp1. Per case and split mode it times, through the same driver
 * (kv_attn_prepare_hp1 + kv_attn_run): the softmax; HP1 with sparse PV
 * (the engine's kernel) at each target sparsity; HP1 with dense PV (every
 * position, zeros included); HP1 without PV (scores and gate alone).
 * The three HP1 modes run call after call (on successive layers), and a PV
 * time is the median of the per-call differences (time - time without
 * PV) of those triples, so the PV speedup of sparsity is median(dense -
 * none) / median(sparse - none), robust to a drift of the machine that
 * separately timed medians are not. Sparsity comes from kn_hp1_gate_keys
 * and _queries and kn_hp1_calibrate (attn_hp1.h): the keys carry gate
 * dimensions, each target sets the queries and calibrates the taps
 * (1, -a, -a) on the scores of up to two sequences; the zero share reached
 * is reported. KV bytes per call count every position, whatever a kernel
 * skips.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "bench_png.h"
#include "bench_util.h"
#include "core/core.h"
#include "core/pool.h"
#include "attn/attn.h"
#include "attn/hp1/attn_hp1.h"
#include "kernels/ops.h"
#include "attn/attn_plan.h"
#include "attn/hp1/hp1_plan.h"
#include "kv/kv_cache.h"

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
    int threads;
    int kv_type;
    int block;
    bool split_on[3]; /* off, on, auto */
    const char *kernels;
    double footprint_mb, max_mem_mb;
    int reps;
    bool json;
    bool no_bw;
    bool cpu_time; /* CPU clocks instead of the wall clock (busy machine) */
    const char *png;
    bool hp1;      /* --kind hp1 */
    int sparsity[8], n_sparsity; /* hp1: target % of p == 0 */
    bool shared;   /* hp1: one zero pattern per kv head group */
    int prefill;   /* rows per sequence; 0: decode (one row) */
};

static const char *SPLIT_NAME[3] = {"off", "on", "auto"};
static const enum kv_split SPLIT_MODE[3] = {KV_SPLIT_OFF, KV_SPLIT_ON, KV_SPLIT_AUTO};

/* ---------------------------------------------------------------------- */
/* small utilities */

#define CMD "microbench --attention"

static void help(FILE *f) {
    fprintf(f,
            "usage: anvil-microbench --attention [options]\n\n"
            "Decode attention over the paged KV cache: us per call and GB/s of KV read,\n"
            "split-K off/on/auto, against the measured read bandwidth.\n\n"
            "  --shape LIST      smollm2 (9/3 heads, dim 64), llama3-8b (32/8, 128),\n"
            "                    mqa (8/1, 128), or all (default smollm2,llama3-8b)\n"
            "  --batch LIST      sequences per step (default 1,4,16,32,64,128)\n"
            "  --ctx LIST        KV length of every sequence (default 256,512,1024,2048,8192)\n"
            "  --threads N       default: online CPUs\n"
            "  --kv-type T       f16 (default) or q8_0\n"
            "  --block N         tokens per KV block, a multiple of 16 (default 16)\n"
            "  --split LIST      schedules to time: off,on,auto (default all three)\n"
            "  --kernels K       auto (default), ref, avx2 or avx512\n"
            "  --footprint MB    KV bytes touched per timed loop, spread over layers\n"
            "                    (default 1024: bigger than the caches)\n"
            "  --max-mem MB      skip cases needing more KV memory (default 3072)\n"
            "  -r N              timed calls per case (default 30)\n"
            "  --no-bw           skip the bandwidth measurement\n"
            "  --cpu-time        per-thread CPU clocks instead of the wall clock: a call\n"
            "                    costs the slowest thread's CPU time (for a busy machine)\n"
            "  --json            one JSON object per case\n"
            "  --png FILE        chart: GB/s against ctx at the schedule auto picks, and\n"
            "                    the split-K speedup, per shape (bench/plot.py; softmax)\n"
            "  --kind K          softmax (default) or hp1: HP1 gated attention next to the\n"
            "                    softmax, dense and sparse PV, at controlled sparsities\n"
            "                    (defaults then: all shapes, batch 1,16,64, ctx\n"
            "                    512,1024,2048,4096,8192, split off,on, 20 calls)\n"
            "  --sparsity LIST   hp1: target %% of zero gate weights (default 0,50,70,90)\n"
            "  --shared          hp1: one zero pattern for all heads of a kv group\n"
            "  --prefill N       N causal rows per sequence at the end of its ctx (a prefill\n"
            "                    chunk) instead of one decode row: GFLOP/s and the share of\n"
            "                    the float FMA peak (softmax only; default split off)\n");
}

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "anvil %s: %s%s%s\n", CMD, msg, arg ? " " : "", arg ? arg : "");
    return 2;
}

/* Best of 5 passes over a 1 GiB buffer, GB/s. */
static double read_bandwidth(struct pool *pool, bool cpu_time) {
    double gbs[5];
    int n = bench_read_bw(pool, (size_t)1 << 30, 5, cpu_time, gbs);
    return bench_max(gbs, n);
}

/* ---------------------------------------------------------------------- */
/* one case */

struct case_res {
    double us[3], p10[3], p90[3], gbs[3], gflops[3];
    bool split_used[3], ran[3];
};

/* kv_attn_work on every pool thread, with each thread's CPU time: with
 * --cpu-time a call costs the slowest thread's CPU time (a busy machine's
 * descheduling is not counted; a barrier wait is spinning, so it is). */
struct timed_arg {
    const struct kv_attn_job *job;
    struct pool *pool;
    double cpu[64];
};

static void timed_fn(void *arg, int ith, int nth) {
    struct timed_arg *a = arg;
    double c0 = bench_thread_cpu_s();
    kv_attn_work(a->job, a->pool, ith, nth);
    if (ith < 64) a->cpu[ith] = bench_thread_cpu_s() - c0;
}

static double elt_bytes(int type) { return type == ANVIL_TYPE_Q8_0 ? 34.0 / 32.0 : 2.0; }

/* Compare the variant's outputs for a few sequences with the reference
 * kernel's on the same layer; false (and a message) on disagreement. */
static bool verify(struct kv_cache *kv, const struct kn_attn_ops *ops, const struct shape *sh,
                   int batch, int ctx, int rows, const float *q, float *out, float *ref) {
    const struct kn_attn_ops *r = kn_attn_select("ref");
    size_t row = (size_t)sh->n_head * sh->head_dim;
    int G = sh->n_head / sh->n_head_kv;
    for (int s = 0; s < batch; s += (batch + 2) / 3) {
        const int tile = KN_ATTN_MAXQ / G; /* rows per task */
        for (int h = 0; h < sh->n_head_kv; h++)
            for (int r0 = 0; r0 < rows; r0 += tile) {
                struct kn_attn_task t = {
                    .kv = kv_layout(kv),
                    .base = kv_layer_base(kv, 0),
                    .blocks = kv_seq_blocks(kv, s),
                    .kv_head = h,
                    .group = G,
                    .scale = 1.0f / sqrtf((float)sh->head_dim),
                    .q = q + ((size_t)s * rows + r0) * row + (size_t)h * G * sh->head_dim,
                    .q_stride = row,
                    .out = ref + (size_t)r0 * row + (size_t)h * G * sh->head_dim,
                    .out_stride = row,
                    .pos = ctx - rows + r0,
                    .n_rows = rows - r0 < tile ? rows - r0 : tile,
                };
                r->attn(&t);
            }
        const float *o = out + (size_t)s * rows * row;
        double num = 0, den = 0, worst = 0;
        for (size_t i = 0; i < (size_t)rows * row; i++) {
            double d = (double)o[i] - ref[i];
            num += d * d;
            den += (double)ref[i] * ref[i];
            double e = fabs(d) / (1e-5 + 1e-3 * fabs(ref[i]));
            if (!(e <= worst)) worst = e;
        }
        if (!(num <= 1e-8 * den) || !(worst <= 1.0)) {
            fprintf(stderr,
                    "anvil %s: %s kernel disagrees with ref (%s batch %d ctx %d seq %d: "
                    "nmse %.3g); no number reported\n",
                    CMD, ops->name, sh->name, batch, ctx, s, den > 0 ? num / den : num);
            return false;
        }
    }
    return true;
}

static int run_case(const struct opts *o, const struct shape *sh, const struct kn_attn_ops *ops,
                    struct pool *pool, int batch, int ctx, struct case_res *res) {
    memset(res, 0, sizeof(*res));
    int bs = o->block;
    int blocks_seq = (ctx + bs - 1) / bs;
    int n_blocks = (batch + 1) * blocks_seq; /* + the gap sequence */
    double layer_bytes = 2.0 * sh->head_dim * sh->n_head_kv * (double)bs * elt_bytes(o->kv_type) *
                         n_blocks;
    int n_layer = (int)ceil(o->footprint_mb * 1048576.0 / layer_bytes);
    if (n_layer < 1) n_layer = 1;
    if (n_layer > 4096) n_layer = 4096;
    if (layer_bytes * n_layer > o->max_mem_mb * 1048576.0) {
        n_layer = (int)(o->max_mem_mb * 1048576.0 / layer_bytes);
        if (n_layer < 1) return 1; /* does not fit: skipped */
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
        fprintf(stderr, "anvil %s: %s\n", CMD, err);
        return -1;
    }
    /* interleaved tables: one block per sequence per round, plus the gap */
    for (int b = 0; b < blocks_seq; b++) {
        int n = ctx - b * bs < bs ? ctx - b * bs : bs;
        for (int s = 0; s <= batch; s++) {
            if (kv_seq_reserve(kv, s, n) != ANVIL_OK || kv_seq_commit(kv, s, n, NULL) != ANVIL_OK) {
                kv_free(kv);
                return -1;
            }
        }
    }
    kv_fill_random(kv, 0x1234567ULL + (uint64_t)batch * 977 + (uint64_t)ctx);
    size_t row = (size_t)sh->n_head * sh->head_dim;
    const int rows = o->prefill > 0 ? o->prefill : 1;
    float *q = core_malloc_aligned((size_t)batch * rows * row * sizeof(float));
    float *out = core_malloc_aligned((size_t)batch * rows * row * sizeof(float));
    float *ref = core_malloc_aligned((size_t)rows * row * sizeof(float));
    struct kv_attn_seq *seqs = core_malloc((size_t)batch * sizeof(*seqs));
    double *t_us = core_malloc((size_t)o->reps * sizeof(double));
    int rc = 0;
    if (!q || !out || !ref || !seqs || !t_us) {
        rc = -1;
        goto done;
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)batch * rows * row; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = ((float)(x >> 8) * 0x1p-23f - 1.0f) * 2.0f;
    }
    for (int s = 0; s < batch; s++)
        seqs[s] = (struct kv_attn_seq){.seq = s, .pos = ctx - rows, .n_tokens = rows,
                                       .q = q + (size_t)s * rows * row,
                                       .out = out + (size_t)s * rows * row};
    double bytes = 2.0 * batch * sh->head_dim * sh->n_head_kv * (double)ctx * elt_bytes(o->kv_type);
    /* keys attended: row r of a sequence sees ctx - rows + r + 1 of them */
    double pairs = (double)batch * sh->n_head * ((double)rows * (ctx - rows) + rows * (rows + 1.0) / 2.0);
    double flops = 4.0 * sh->head_dim * pairs;
    for (int m = 0; m < 3; m++) {
        if (!o->split_on[m]) continue;
        struct kv_attn_job *job = NULL;
        /* correctness first, on layer 0 */
        if (kv_attn_prepare(kv, ops, 0, seqs, batch, row, row, o->threads, SPLIT_MODE[m], 1.0f / sqrtf((float)sh->head_dim), &job) !=
            ANVIL_OK) {
            rc = -1;
            goto done;
        }
        kv_attn_run(job, pool);
        if (!verify(kv, ops, sh, batch, ctx, rows, q, out, ref)) {
            rc = -2;
            goto done;
        }
        /* warm up one pass over the layers (bounded), then time */
        int warm = n_layer < 8 ? n_layer : 8;
        for (int l = 0; l < warm; l++) {
            kv_attn_prepare(kv, ops, l, seqs, batch, row, row, o->threads, SPLIT_MODE[m], 1.0f / sqrtf((float)sh->head_dim), &job);
            kv_attn_run(job, pool);
        }
        uint64_t allocs = core_alloc_count();
        for (int r = 0; r < o->reps; r++) {
            int l = (warm + r) % n_layer;
            double t0 = bench_wall_s(), c0 = bench_thread_cpu_s();
            kv_attn_prepare(kv, ops, l, seqs, batch, row, row, o->threads, SPLIT_MODE[m],
                            1.0f / sqrtf((float)sh->head_dim), &job);
            double prep = bench_thread_cpu_s() - c0;
            struct timed_arg ta = {.job = job, .pool = pool};
            pool_run(pool, timed_fn, &ta);
            t_us[r] = (bench_wall_s() - t0) * 1e6;
            if (o->cpu_time)
                t_us[r] = (prep + bench_max(ta.cpu, o->threads < 64 ? o->threads : 64)) * 1e6;
        }
        if (core_alloc_count() != allocs) {
            fprintf(stderr, "anvil %s: the attention path allocated memory\n", CMD);
            rc = -1;
            goto done;
        }
        res->split_used[m] = kv_attn_job_split(job);
        res->us[m] = bench_percentile(t_us, o->reps, 0.5);
        res->p10[m] = bench_percentile(t_us, o->reps, 0.1);
        res->p90[m] = bench_percentile(t_us, o->reps, 0.9);
        res->gbs[m] = bytes / (res->us[m] * 1e-6) / 1e9;
        res->gflops[m] = flops / (res->us[m] * 1e-6) / 1e9;
        res->ran[m] = true;
    }
done:
    core_free_aligned(q);
    core_free_aligned(out);
    core_free_aligned(ref);
    core_free(seqs);
    core_free(t_us);
    kv_free(kv);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* --kind hp1 */

static float lcg_uniform(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return (float)(*x >> 8) * 0x1p-23f - 1.0f;
}

/* Write ctx tokens of every sequence (and the gap) into every layer, block
 * by block in turn (interleaved tables); K carries gate dimensions. */
static int fill_gate_kv(struct kv_cache *kv, const struct shape *sh, int batch, int ctx,
                        int n_layer, int bs, bool shared) {
    size_t row = (size_t)sh->n_head_kv * sh->head_dim;
    float *k = core_malloc((size_t)bs * row * sizeof(float));
    float *v = core_malloc((size_t)bs * row * sizeof(float));
    int rc = k && v ? 0 : -1;
    uint32_t x = 0x5eed;
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
    core_free(k);
    core_free(v);
    return rc;
}

/* One HP1 case: its state, shared by the timed configurations. */
struct hp1_case {
    const struct opts *o;
    const struct shape *sh;
    struct kv_cache *kv;
    struct pool *pool;
    const struct kn_attn_ops *sm;
    const struct kn_hp1_ops *hp1;
    int batch, ctx, n_layer, group;
    float scale;
    size_t row;
    struct kv_attn_seq *seqs;
    const float *q_rand; /* (batch, row) random queries */
    float *q, *out, *ref;
    float *taps;         /* (n_head, 3) */
    float *scores;       /* (2 * n_head, ctx) calibration scores */
    struct kn_hp1_params hp;
    double *t_us;        /* (4 * reps): time_hp1 uses the first reps, time_hp1_pv all */
};

struct timing {
    double us, p10, p90;
};

/* One call on layer l (softmax when pv < 0, else HP1 with that PV mode):
 * prepare + run, as the forward pass; its time in us (the slowest
 * thread's CPU time with --cpu-time). -1 when prepare fails. */
static double call_hp1(struct hp1_case *hc, enum kv_split split, int pv, int l, bool *was_split) {
    const struct opts *o = hc->o;
    struct kv_attn_job *job = NULL;
    double t0 = bench_wall_s(), c0 = bench_thread_cpu_s();
    anvil_status st =
        pv < 0 ? kv_attn_prepare(hc->kv, hc->sm, l, hc->seqs, hc->batch, hc->row, hc->row,
                                 o->threads, split, hc->scale, &job)
               : kv_attn_prepare_hp1(hc->kv, hc->hp1, &hc->hp, (enum kn_hp1_pv)pv, l, hc->seqs,
                                     hc->batch, hc->row, hc->row, o->threads, split, hc->scale,
                                     &job);
    if (st != ANVIL_OK) return -1.0;
    double prep = bench_thread_cpu_s() - c0;
    struct timed_arg ta = {.job = job, .pool = hc->pool};
    pool_run(hc->pool, timed_fn, &ta);
    *was_split = kv_attn_job_split(job);
    if (o->cpu_time) return (prep + bench_max(ta.cpu, o->threads < 64 ? o->threads : 64)) * 1e6;
    return (bench_wall_s() - t0) * 1e6;
}

static void timing_of(double *t, int n, struct timing *tm) { /* sorts t */
    tm->us = bench_percentile(t, n, 0.5);
    tm->p10 = bench_percentile(t, n, 0.1);
    tm->p90 = bench_percentile(t, n, 0.9);
}

/* Time one schedule over the layers (softmax when pv < 0, else HP1 with
 * that PV mode). 0 or -1. */
static int time_hp1(struct hp1_case *hc, enum kv_split split, int pv, struct timing *tm,
                    bool *was_split) {
    const struct opts *o = hc->o;
    int warm = hc->n_layer < 4 ? hc->n_layer : 4;
    uint64_t allocs = 0;
    for (int r = -warm; r < o->reps; r++) {
        if (r == 0) allocs = core_alloc_count();
        double us = call_hp1(hc, split, pv, (r + warm) % hc->n_layer, was_split);
        if (us < 0) return -1;
        if (r >= 0) hc->t_us[r] = us;
    }
    if (core_alloc_count() != allocs) {
        fprintf(stderr, "anvil %s: the attention path allocated memory\n", CMD);
        return -1;
    }
    timing_of(hc->t_us, o->reps, tm);
    return 0;
}

/* HP1 without PV (gate only), with dense PV and with sparse PV, call after
 * call (each on the next layer, so on KV that is not in the caches), so
 * that a drift of the machine falls on all three alike. The PV times are the medians of the per-call differences
 * (dense - gate, sparse - gate): a difference of separately timed medians
 * is not robust to drift (at batch 16 it even came out negative). */
static int time_hp1_pv(struct hp1_case *hc, enum kv_split split, struct timing *hn,
                       struct timing *hd, struct timing *hs, double *pv_dense, double *pv_sparse,
                       bool *was_split) {
    const struct opts *o = hc->o;
    int warm = hc->n_layer < 4 ? hc->n_layer : 4, n = o->reps;
    static const int modes[3] = {KN_HP1_PV_NONE, KN_HP1_PV_DENSE, KN_HP1_PV_SPARSE};
    double *t = hc->t_us; /* gate [0, n), dense [n, 2n), sparse [2n, 3n), scratch [3n, 4n) */
    uint64_t allocs = 0;
    bool u;
    for (int r = -warm; r < n; r++) {
        if (r == 0) allocs = core_alloc_count();
        for (int k = 0; k < 3; k++) {
            int l = (3 * (r + warm) + k) % hc->n_layer; /* each call on cold KV */
            double us = call_hp1(hc, split, modes[k], l, k == 2 ? was_split : &u);
            if (us < 0) return -1;
            if (r >= 0) t[k * n + r] = us;
        }
    }
    if (core_alloc_count() != allocs) {
        fprintf(stderr, "anvil %s: the attention path allocated memory\n", CMD);
        return -1;
    }
    for (int r = 0; r < n; r++) t[3 * n + r] = t[n + r] - t[r];
    *pv_dense = bench_percentile(t + 3 * n, n, 0.5);
    for (int r = 0; r < n; r++) t[3 * n + r] = t[2 * n + r] - t[r];
    *pv_sparse = bench_percentile(t + 3 * n, n, 0.5);
    timing_of(t, n, hn);
    timing_of(t + n, n, hd);
    timing_of(t + 2 * n, n, hs);
    return 0;
}

/* The driver's HP1 output on layer 0 (sparse PV, the given split) against
 * the reference kernel, unsplit, on the first and the last sequence. */
static bool verify_hp1(struct hp1_case *hc, enum kv_split split) {
    struct kv_attn_job *job = NULL;
    if (kv_attn_prepare_hp1(hc->kv, hc->hp1, &hc->hp, KN_HP1_PV_SPARSE, 0, hc->seqs, hc->batch,
                            hc->row, hc->row, hc->o->threads, split, hc->scale, &job) != ANVIL_OK)
        return false;
    kv_attn_run(job, hc->pool);
    const struct kn_hp1_ops *r = kn_hp1_select("ref");
    int hd = hc->sh->head_dim, G = hc->group;
    for (int s = 0; s < hc->batch; s += hc->batch > 1 ? hc->batch - 1 : 1) {
        for (int h = 0; h < hc->sh->n_head_kv; h++) {
            struct kn_hp1_task t = {
                .at = {.kv = kv_layout(hc->kv), .base = kv_layer_base(hc->kv, 0),
                       .blocks = kv_seq_blocks(hc->kv, s), .kv_head = h, .group = G,
                       .scale = hc->scale, .q = hc->q + (size_t)s * hc->row + (size_t)h * G * hd,
                       .q_stride = hc->row, .out = hc->ref + (size_t)h * G * hd,
                       .out_stride = hc->row, .pos = hc->ctx - 1, .n_rows = 1},
                .hp = hc->hp,
                .pv = KN_HP1_PV_SPARSE,
            };
            t.hp.taps = hc->hp.taps + (size_t)h * G * hc->hp.n_taps;
            r->attn(&t);
        }
        const float *o = hc->out + (size_t)s * hc->row;
        double num = 0, den = 0, wmax = 0;
        for (size_t i = 0; i < hc->row; i++) wmax = fabs(hc->ref[i]) > wmax ? fabs(hc->ref[i]) : wmax;
        bool ok = true;
        for (size_t i = 0; i < hc->row; i++) {
            double e = (double)o[i] - hc->ref[i];
            num += e * e;
            den += (double)hc->ref[i] * hc->ref[i];
            ok &= fabs(e) <= 1e-5 * wmax + 1e-4 * fabs(hc->ref[i]);
        }
        if (!ok || !(num <= 1e-8 * den)) {
            fprintf(stderr, "anvil %s: %s HP1 kernel disagrees with ref (%s batch %d ctx %d seq %d: "
                    "nmse %.3g); no number reported\n", CMD, hc->hp1->name, hc->sh->name, hc->batch,
                    hc->ctx, s, den > 0 ? num / den : num);
            return false;
        }
    }
    return true;
}

/* Queries for a target sparsity and taps calibrated on the scores of up
 * to two sequences (layer 0); returns the zero share reached. */
static double set_sparsity(struct hp1_case *hc, int target) {
    const struct shape *sh = hc->sh;
    memcpy(hc->q, hc->q_rand, (size_t)hc->batch * hc->row * sizeof(float));
    double on = target == 0 ? 1.0 : 1.0 - target / 100.0 + 0.01;
    kn_hp1_gate_queries(hc->q, hc->row, hc->batch, sh->n_head, sh->n_head_kv, sh->head_dim,
                        hc->scale, on);
    int n_s = hc->batch < 2 ? hc->batch : 2, n_vec = 0;
    for (int s = 0; s < n_s; s++)
        for (int i = 0; i < sh->n_head; i++, n_vec++)
            kn_hp1_scores_ref(kv_layout(hc->kv), kv_layer_base(hc->kv, 0), kv_seq_blocks(hc->kv, s),
                              i / hc->group, hc->q + (size_t)s * hc->row + (size_t)i * sh->head_dim,
                              hc->scale, hc->ctx, hc->scores + (size_t)n_vec * hc->ctx);
    return kn_hp1_calibrate(hc->scores, n_vec, hc->ctx, target / 100.0, sh->n_head, hc->taps, &hc->hp);
}

static void print_hp1_row(const struct hp1_case *hc, int split, bool used, int target, double zero,
                          const struct timing *sm, const struct timing *hs, const struct timing *hd,
                          const struct timing *hn, double pv_d, double pv_s, double bytes,
                          double bw) {
    const struct opts *o = hc->o;
    const struct shape *sh = hc->sh;
    const char *tname = o->kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16";
    if (o->json) {
        struct bench_json j;
        bench_json_begin(&j, stdout, NULL);
        bench_json_str(&j, "bench", "attention_hp1");
        bench_json_str(&j, "commit", bench_commit());
        bench_json_str(&j, "cpu", bench_cpu_flags());
        bench_json_str(&j, "kernels", hc->hp1->name);
        bench_json_int(&j, "threads", o->threads);
        bench_json_str(&j, "clock", o->cpu_time ? "cpu" : "wall");
        bench_json_str(&j, "kv_type", tname);
        bench_json_int(&j, "block", o->block);
        bench_json_str(&j, "shape", sh->name);
        bench_json_int(&j, "n_head", sh->n_head);
        bench_json_int(&j, "n_head_kv", sh->n_head_kv);
        bench_json_int(&j, "head_dim", sh->head_dim);
        bench_json_int(&j, "batch", hc->batch);
        bench_json_int(&j, "ctx", hc->ctx);
        bench_json_str(&j, "split", SPLIT_NAME[split]);
        bench_json_bool(&j, "split_used", used);
        bench_json_num(&j, "sparsity_target", target / 100.0, 2);
        bench_json_num(&j, "zero_frac", zero, 4);
        bench_json_bool(&j, "shared_pattern", o->shared);
        bench_json_num(&j, "softmax_us", sm->us, 2);
        bench_json_num(&j, "softmax_p10", sm->p10, 2);
        bench_json_num(&j, "softmax_p90", sm->p90, 2);
        bench_json_num(&j, "hp1_us", hs->us, 2);
        bench_json_num(&j, "hp1_p10", hs->p10, 2);
        bench_json_num(&j, "hp1_p90", hs->p90, 2);
        bench_json_num(&j, "hp1_dense_us", hd->us, 2);
        bench_json_num(&j, "hp1_gate_only_us", hn->us, 2);
        bench_json_num(&j, "pv_sparse_us", pv_s, 2);
        bench_json_num(&j, "pv_dense_us", pv_d, 2);
        bench_json_num(&j, "pv_speedup", pv_s > 0 ? pv_d / pv_s : 0.0, 3);
        bench_json_num(&j, "softmax_over_hp1_dense", sm->us / hd->us, 3);
        bench_json_num(&j, "softmax_over_hp1", sm->us / hs->us, 3);
        bench_json_num(&j, "kv_bytes", bytes, 0);
        bench_json_num(&j, "softmax_gbs", bytes / (sm->us * 1e3), 2);
        bench_json_num(&j, "hp1_dense_gbs", bytes / (hd->us * 1e3), 2);
        bench_json_num(&j, "hp1_gbs", bytes / (hs->us * 1e3), 2);
        bench_json_num(&j, "read_bw_gbs", bw, 2);
        bench_json_num(&j, "hp1_bw_frac", bytes / (hs->us * 1e3) / bw, 3);
        bench_json_end(&j);
    } else {
        printf("| %-9s | %5d | %4d | %-4s%s | %3d%% %5.1f%% | %8.1f | %9.1f | %8.1f | %8.1f | %5.2fx | "
               "%5.2fx | %5.1f | %5.1f | %5.0f%% |\n",
               sh->name, hc->batch, hc->ctx, SPLIT_NAME[split], used ? "*" : " ", target, 100.0 * zero,
               sm->us, hd->us, hs->us, hn->us, pv_s > 0 ? pv_d / pv_s : 0.0, sm->us / hd->us,
               bytes / (sm->us * 1e3), bytes / (hs->us * 1e3), 100.0 * bytes / (hs->us * 1e3) / bw);
    }
    fflush(stdout);
}

/* 0 ran, 1 skipped (memory), -1 failure. */
static int run_case_hp1(const struct opts *o, const struct shape *sh, struct pool *pool, int batch,
                        int ctx, double bw) {
    int bs = o->block;
    int blocks_seq = (ctx + bs - 1) / bs;
    int n_blocks = (batch + 1) * blocks_seq; /* + the gap sequence */
    double layer_bytes = 2.0 * sh->head_dim * sh->n_head_kv * (double)bs * elt_bytes(o->kv_type) *
                         n_blocks;
    int n_layer = (int)ceil(o->footprint_mb * 1048576.0 / layer_bytes);
    if (n_layer < 1) n_layer = 1;
    if (n_layer > 4096) n_layer = 4096;
    if (layer_bytes * n_layer > o->max_mem_mb * 1048576.0) {
        n_layer = (int)(o->max_mem_mb * 1048576.0 / layer_bytes);
        if (n_layer < 1) return 1;
    }
    struct kv_params p = {.n_layer = n_layer, .n_head = sh->n_head, .n_head_kv = sh->n_head_kv,
                          .head_dim = sh->head_dim, .type = o->kv_type, .block_size = bs,
                          .n_blocks = n_blocks, .n_seq_max = batch + 1, .n_ctx = ctx,
                          .n_threads = o->threads};
    struct hp1_case hc = {.o = o, .sh = sh, .pool = pool, .sm = kn_attn_select(o->kernels),
                          .hp1 = kn_hp1_select(o->kernels), .batch = batch, .ctx = ctx,
                          .n_layer = n_layer, .group = sh->n_head / sh->n_head_kv,
                          .scale = 1.0f / sqrtf((float)sh->head_dim),
                          .row = (size_t)sh->n_head * sh->head_dim};
    char err[256];
    if (kv_init(&p, &hc.kv, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "anvil %s: %s\n", CMD, err);
        return -1;
    }
    float *q_rand = core_malloc((size_t)batch * hc.row * sizeof(float));
    hc.q_rand = q_rand;
    hc.q = core_malloc_aligned((size_t)batch * hc.row * sizeof(float));
    hc.out = core_malloc_aligned((size_t)batch * hc.row * sizeof(float));
    hc.ref = core_malloc_aligned(hc.row * sizeof(float));
    hc.scores = core_malloc((size_t)2 * sh->n_head * ctx * sizeof(float));
    hc.taps = core_malloc((size_t)sh->n_head * 3 * sizeof(float));
    hc.seqs = core_malloc((size_t)batch * sizeof(*hc.seqs));
    hc.t_us = core_malloc(4 * (size_t)o->reps * sizeof(double));
    int rc = 0;
    if (!q_rand || !hc.q || !hc.out || !hc.ref || !hc.scores || !hc.taps || !hc.seqs || !hc.t_us ||
        fill_gate_kv(hc.kv, sh, batch, ctx, n_layer, bs, o->shared)) {
        rc = -1;
        goto done;
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)batch * hc.row; i++) q_rand[i] = lcg_uniform(&x);
    for (int s = 0; s < batch; s++)
        hc.seqs[s] = (struct kv_attn_seq){.seq = s, .pos = ctx - 1, .n_tokens = 1,
                                          .q = hc.q + (size_t)s * hc.row,
                                          .out = hc.out + (size_t)s * hc.row};
    double bytes = 2.0 * batch * sh->head_dim * sh->n_head_kv * (double)ctx * elt_bytes(o->kv_type);
    for (int m = 0; m < 3; m++) {
        if (!o->split_on[m]) continue;
        struct timing sm;
        bool used = false, u2;
        /* softmax (its time does not depend on the queries); then, at each
         * sparsity, HP1 without PV, with dense PV and with sparse PV,
         * interleaved (time_hp1_pv) */
        set_sparsity(&hc, 0);
        if (!verify_hp1(&hc, SPLIT_MODE[m]) || time_hp1(&hc, SPLIT_MODE[m], -1, &sm, &u2)) {
            rc = -1;
            goto done;
        }
        for (int si = 0; si < o->n_sparsity; si++) {
            double zero = set_sparsity(&hc, o->sparsity[si]), pv_d, pv_s;
            struct timing hs, hd, hn;
            if (!verify_hp1(&hc, SPLIT_MODE[m]) ||
                time_hp1_pv(&hc, SPLIT_MODE[m], &hn, &hd, &hs, &pv_d, &pv_s, &used)) {
                rc = -1;
                goto done;
            }
            print_hp1_row(&hc, m, used, o->sparsity[si], zero, &sm, &hs, &hd, &hn, pv_d, pv_s,
                          bytes, bw);
        }
    }
done:
    core_free(q_rand);
    core_free_aligned(hc.q);
    core_free_aligned(hc.out);
    core_free_aligned(hc.ref);
    core_free(hc.scores);
    core_free(hc.taps);
    core_free(hc.seqs);
    core_free(hc.t_us);
    kv_free(hc.kv);
    return rc;
}

static int run_hp1(const struct opts *o, struct pool *pool, double bwn) {
    if (!o->json) {
        printf("µs per call (median): softmax; hp1 dense = every position in PV; hp1 = sparse PV (the\n"
               "engine's kernel); gate = scores and gate without PV; PV x = median(dense - gate) /\n"
               "median(hp1 - gate) over interleaved calls; sm/dense = softmax / hp1 dense; GB/s of\n"
               "KV read; %% of the measured bandwidth (hp1); split * = the plan did split\n\n");
        printf("| shape     | batch |  ctx | split | zeros want/got | softmax | hp1 dense |      hp1 |"
               "     gate |   PV x | sm/dense | sm GB/s | hp1 GB/s | %% of bw |\n");
        printf("|-----------|------:|-----:|-------|----------------|--------:|----------:|---------:|"
               "---------:|-------:|---------:|--------:|---------:|--------:|\n");
    }
    fflush(stdout);
    int rc = 0;
    for (int si = 0; si < N_SHAPES; si++) {
        if (!o->shape_on[si]) continue;
        for (int bi = 0; bi < o->n_batch; bi++)
            for (int ci = 0; ci < o->n_ctx; ci++) {
                int r = run_case_hp1(o, &SHAPES[si], pool, o->batch[bi], o->ctx[ci], bwn);
                if (r == 1 && !o->json)
                    printf("| %-9s | %5d | %4d | skipped: KV over --max-mem %.0f MB |\n",
                           SHAPES[si].name, o->batch[bi], o->ctx[ci], o->max_mem_mb);
                if (r < 0) rc = 1;
            }
    }
    return rc;
}

/* ---------------------------------------------------------------------- */
/* entry */

/* Options into *o. Returns 0, -1 after --help (printed), or 2 after an
 * error message. */
static int parse(int argc, char **argv, struct opts *o) {
    static const int DEF_BATCH[] = {1, 4, 16, 32, 64, 128};
    static const int DEF_CTX[] = {256, 512, 1024, 2048, 8192};
    memset(o, 0, sizeof(*o));
    o->shape_on[0] = o->shape_on[1] = true;
    memcpy(o->batch, DEF_BATCH, sizeof(DEF_BATCH));
    o->n_batch = 6;
    memcpy(o->ctx, DEF_CTX, sizeof(DEF_CTX));
    o->n_ctx = 5;
    o->threads = cpu_count_online();
    o->kv_type = ANVIL_TYPE_F16;
    o->block = 16;
    o->split_on[0] = o->split_on[1] = o->split_on[2] = true;
    o->kernels = "auto";
    o->footprint_mb = 1024;
    o->max_mem_mb = 3072;
    o->reps = 30;
    static const int DEF_SP[] = {0, 50, 70, 90};
    memcpy(o->sparsity, DEF_SP, sizeof(DEF_SP));
    o->n_sparsity = 4;
    bool given_shape = false, given_batch = false, given_ctx = false, given_split = false,
         given_reps = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long l;
        if (!strcmp(a, "--attention")) continue;
        if (!strcmp(a, "--shared")) {
            o->shared = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!strcmp(a, "--no-bw")) {
            o->no_bw = true;
            continue;
        }
        if (!strcmp(a, "--cpu-time")) {
            o->cpu_time = true;
            continue;
        }
        const char *v = cli_value(CMD, argc, argv, &i);
        if (!v) return 2;
        if (!strcmp(a, "--shape")) {
            given_shape = true;
            /* a comma list of names, or "all" (the two shapes of SCENARIOS.md) */
            bool any = false;
            for (int k = 0; k < N_SHAPES; k++) {
                const char *f = strstr(v, SHAPES[k].name);
                size_t n = strlen(SHAPES[k].name);
                o->shape_on[k] = (f && (f == v || f[-1] == ',') && (f[n] == 0 || f[n] == ',')) ||
                                 (k < 2 && !strcmp(v, "all"));
                any |= o->shape_on[k];
            }
            if (!any) return usage("unknown shape (smollm2, llama3-8b, mqa, all)", v);
        } else if (!strcmp(a, "--batch")) {
            given_batch = true;
            if ((o->n_batch = cli_int_list(CMD, a, v, 1, 4096, o->batch, 16)) < 0) return 2;
        } else if (!strcmp(a, "--ctx")) {
            given_ctx = true;
            if ((o->n_ctx = cli_int_list(CMD, a, v, 1, 1 << 20, o->ctx, 16)) < 0) return 2;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_int(CMD, a, v, 1, 256, &l)) return 2;
            o->threads = (int)l;
        } else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "f16") || !strcmp(v, "F16")) o->kv_type = ANVIL_TYPE_F16;
            else if (!strcmp(v, "q8_0") || !strcmp(v, "Q8_0")) o->kv_type = ANVIL_TYPE_Q8_0;
            else return usage("bad --kv-type (f16, q8_0)", v);
        } else if (!strcmp(a, "--block")) {
            if (!cli_int(CMD, a, v, 16, 1024, &l)) return 2;
            if (l % 16) return usage("--block must be a multiple of 16, got", v);
            o->block = (int)l;
        } else if (!strcmp(a, "--split")) {
            given_split = true;
            o->split_on[0] = strstr(v, "off") != NULL;
            o->split_on[1] = strstr(v, "on") != NULL;
            o->split_on[2] = strstr(v, "auto") != NULL;
            if (!o->split_on[0] && !o->split_on[1] && !o->split_on[2]) return usage("bad --split", v);
        } else if (!strcmp(a, "--kernels")) {
            o->kernels = v;
        } else if (!strcmp(a, "--footprint")) {
            if (!cli_int(CMD, a, v, 1, 1 << 20, &l)) return 2;
            o->footprint_mb = (double)l;
        } else if (!strcmp(a, "--max-mem")) {
            if (!cli_int(CMD, a, v, 1, 1 << 20, &l)) return 2;
            o->max_mem_mb = (double)l;
        } else if (!strcmp(a, "-r")) {
            given_reps = true;
            if (!cli_int(CMD, a, v, 1, 100000, &l)) return 2;
            o->reps = (int)l;
        } else if (!strcmp(a, "--png")) {
            o->png = v;
        } else if (!strcmp(a, "--kind")) {
            if (!strcmp(v, "hp1")) o->hp1 = true;
            else if (strcmp(v, "softmax")) return usage("bad --kind (softmax, hp1)", v);
        } else if (!strcmp(a, "--prefill")) {
            if (!cli_int(CMD, a, v, 1, 1 << 16, &l)) return 2;
            o->prefill = (int)l;
        } else if (!strcmp(a, "--sparsity")) {
            if ((o->n_sparsity = cli_int_list(CMD, a, v, 0, 99, o->sparsity, 8)) < 0) return 2;
        } else {
            return usage("unknown option", a);
        }
    }
    if (o->prefill) {
        if (o->hp1) return usage("--prefill times the softmax only", NULL);
        if (o->png) return usage("--png charts decode only; use --json with --prefill", NULL);
        for (int i = 0; i < o->n_ctx; i++)
            if (o->ctx[i] < o->prefill) return usage("--ctx below --prefill rows", NULL);
        if (!given_split) o->split_on[1] = o->split_on[2] = false;
    }
    if (o->hp1) {
        /* the HP1 grid: every shape, batch 1/16/64, 512..8192, split off and on */
        static const int HB[] = {1, 16, 64}, HC[] = {512, 1024, 2048, 4096, 8192};
        if (!given_shape) o->shape_on[0] = o->shape_on[1] = o->shape_on[2] = true;
        if (!given_batch) memcpy(o->batch, HB, sizeof(HB)), o->n_batch = 3;
        if (!given_ctx) memcpy(o->ctx, HC, sizeof(HC)), o->n_ctx = 5;
        if (!given_split) o->split_on[2] = false;
        if (!given_reps) o->reps = 20;
        if (o->png) return usage("--png charts the softmax bench only; use --json with --kind hp1", NULL);
    }
    return 0;
}

/* One read_bw record (stdout for --json, data for --png). */
static void print_bw(FILE *out, FILE *data, int threads, double gbs, bool cpu_time) {
    if (!out && !data) return;
    struct bench_json j;
    bench_json_begin(&j, out, data);
    bench_json_str(&j, "bench", "read_bw");
    bench_json_int(&j, "threads", threads);
    bench_json_num(&j, "gbs", gbs, 2);
    bench_json_str(&j, "clock", cpu_time ? "cpu" : "wall");
    bench_json_str(&j, "commit", bench_commit());
    bench_json_str(&j, "cpu", bench_cpu_flags());
    bench_json_end(&j);
}

int bench_attention(int argc, char **argv) {
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    const struct kn_attn_ops *ops = kn_attn_select(o.kernels);
    if (!ops || (o.hp1 && !kn_hp1_select(o.kernels)))
        return usage("kernels not available on this CPU:", o.kernels);
    struct bench_png png;
    if (o.png && (rc = bench_png_open(&png, CMD, "attention", o.png, NULL, 0))) return rc;
    FILE *data = o.png ? bench_png_data(&png) : NULL; /* the chart's copy of the records */
    struct pool *pool = NULL, *pool1 = NULL;
    if (pool_create(o.threads, &pool) != ANVIL_OK || pool_create(1, &pool1) != ANVIL_OK) {
        pool_free(pool);
        fprintf(stderr, "anvil %s: cannot start threads\n", CMD);
        if (o.png) bench_png_close(&png);
        return 1;
    }
    double bw1 = o.no_bw ? 1.0 : read_bandwidth(pool1, o.cpu_time);
    double bwn = o.no_bw ? 1.0 : o.threads > 1 ? read_bandwidth(pool, o.cpu_time) : bw1;
    pool_free(pool1);
    const char *tname = o.kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16";
    /* without a measurement (--no-bw) the chart gets no bandwidth line */
    print_bw(o.json ? stdout : NULL, o.no_bw ? NULL : data, 1, bw1, o.cpu_time);
    print_bw(o.json ? stdout : NULL, o.no_bw ? NULL : data, o.threads, bwn, o.cpu_time);
    if (!o.json) {
        printf("%s attention over the paged KV cache%s: kernels %s, KV %s, block %d, %d threads, "
               "%s clock, commit %s, cpu %s\n",
               o.prefill ? "prefill" : "decode", o.hp1 ? ", HP1 vs softmax" : "", ops->name, tname, o.block, o.threads,
               o.cpu_time ? "CPU" : "wall", bench_commit(), bench_cpu_flags());
        printf("measured read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n\n", bw1,
               bwn, o.threads);
    }
    if (o.hp1) {
        rc = run_hp1(&o, pool, bwn);
        pool_free(pool);
        return rc;
    }
    /* prefill: the float FMA peak of all threads at once, same run */
    double fpeak = 0.0;
    if (o.prefill) {
        const struct kn_ops *ko = kn_select(o.kernels);
        if (ko && ko->f32_peak) fpeak = bench_peak_all(pool, ko->f32_peak);
        if (o.json && fpeak > 0) {
            struct bench_json j;
            bench_json_begin(&j, stdout, NULL);
            bench_json_str(&j, "bench", "f32_peak_all");
            bench_json_int(&j, "threads", o.threads);
            bench_json_num(&j, "gflops", fpeak, 2);
            bench_json_str(&j, "commit", bench_commit());
            bench_json_end(&j);
        }
        if (!o.json)
            printf("prefill: %d rows per sequence; float FMA peak, %d threads at once: %.1f GFLOP/s\n\n",
                   o.prefill, o.threads, fpeak);
    }
    if (!o.json && o.prefill) {
        printf("| shape     | batch |  ctx | split |   µs (p10-p90)         | GFLOP/s | %% of FMA peak |\n");
        printf("|-----------|------:|-----:|-------|------------------------|--------:|--------------:|\n");
    } else if (!o.json) {
        printf("| shape     | batch |  ctx | split |   µs (p10-p90)         |  GB/s | %% of bw | "
               "split used |\n");
        printf("|-----------|------:|-----:|-------|------------------------|------:|--------:|"
               "------------|\n");
    }
    fflush(stdout);
    rc = 0;
    for (int si = 0; si < N_SHAPES; si++) {
        if (!o.shape_on[si]) continue;
        const struct shape *sh = &SHAPES[si];
        for (int bi = 0; bi < o.n_batch; bi++)
            for (int ci = 0; ci < o.n_ctx; ci++) {
                struct case_res res;
                int r = run_case(&o, sh, ops, pool, o.batch[bi], o.ctx[ci], &res);
                if (r == 1) {
                    if (!o.json)
                        printf("| %-9s | %5d | %4d | skipped: KV over --max-mem %.0f MB |\n",
                               sh->name, o.batch[bi], o.ctx[ci], o.max_mem_mb);
                    continue;
                }
                if (r < 0) {
                    rc = 1;
                    continue;
                }
                for (int m = 0; m < 3; m++) {
                    if (!res.ran[m]) continue;
                    double frac = res.gbs[m] / bwn;
                    if (o.json || data) {
                        struct bench_json j;
                        bench_json_begin(&j, o.json ? stdout : NULL, data);
                        bench_json_str(&j, "bench", "attention");
                        bench_json_str(&j, "shape", sh->name);
                        bench_json_int(&j, "n_head", sh->n_head);
                        bench_json_int(&j, "n_head_kv", sh->n_head_kv);
                        bench_json_int(&j, "head_dim", sh->head_dim);
                        bench_json_str(&j, "kv_type", tname);
                        bench_json_int(&j, "block", o.block);
                        bench_json_int(&j, "batch", o.batch[bi]);
                        bench_json_int(&j, "ctx", o.ctx[ci]);
                        bench_json_int(&j, "threads", o.threads);
                        bench_json_str(&j, "split", SPLIT_NAME[m]);
                        bench_json_bool(&j, "split_used", res.split_used[m]);
                        bench_json_num(&j, "us", res.us[m], 2);
                        bench_json_num(&j, "us_p10", res.p10[m], 2);
                        bench_json_num(&j, "us_p90", res.p90[m], 2);
                        bench_json_num(&j, "gbs", res.gbs[m], 2);
                        bench_json_num(&j, "read_bw_gbs", bwn, 2);
                        bench_json_num(&j, "bw_frac", frac, 3);
                        if (o.prefill) {
                            bench_json_int(&j, "rows", o.prefill);
                            bench_json_num(&j, "gflops", res.gflops[m], 2);
                            if (fpeak > 0) bench_json_num(&j, "peak_frac", res.gflops[m] / fpeak, 3);
                        }
                        bench_json_str(&j, "kernels", ops->name);
                        bench_json_str(&j, "clock", o.cpu_time ? "cpu" : "wall");
                        bench_json_str(&j, "commit", bench_commit());
                        bench_json_end(&j);
                    }
                    if (!o.json && o.prefill) {
                        printf("| %-9s | %5d | %4d | %-5s | %9.1f (%7.1f-%7.1f) | %7.1f | %12.0f%% |\n",
                               sh->name, o.batch[bi], o.ctx[ci], SPLIT_NAME[m], res.us[m], res.p10[m],
                               res.p90[m], res.gflops[m], fpeak > 0 ? 100.0 * res.gflops[m] / fpeak : 0.0);
                    } else if (!o.json) {
                        printf("| %-9s | %5d | %4d | %-5s | %9.1f (%7.1f-%7.1f) | %5.1f | %6.0f%% | "
                               "%-10s |\n",
                               sh->name, o.batch[bi], o.ctx[ci], SPLIT_NAME[m], res.us[m], res.p10[m],
                               res.p90[m], res.gbs[m], 100.0 * frac, res.split_used[m] ? "yes" : "no");
                    }
                }
                if (!o.json && res.ran[0] && res.ran[1])
                    printf("| %-9s | %5d | %4d | split-K speedup %.2fx |\n", sh->name, o.batch[bi],
                           o.ctx[ci], res.us[0] / res.us[1]);
                fflush(stdout);
            }
    }
    pool_free(pool);
    if (o.png) {
        int prc = bench_png_draw(&png);
        bench_png_close(&png);
        if (!rc) rc = prc;
    }
    return rc;
}
