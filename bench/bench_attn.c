/*
 * bench_attn.c - `anvil bench --attention`: decode attention over the paged
 * KV cache: µs per call and
 * GB/s of KV read, split-K on and off, against the read bandwidth measured
 * on this machine (SCENARIOS.md, "Kernel micro-benchmarks").
 *
 * One case = (shape, batch, ctx): `batch` sequences of `ctx` cached tokens,
 * one decode row each, one layer's attention per timed call (kv_attn_prepare
 * + kv_attn_run, as the forward pass does). The KV of a case is spread over
 * enough layers that a timed loop touches --footprint bytes (1 GiB by
 * default), so the numbers are DRAM numbers, not cache numbers; calls cycle
 * through the layers. Block tables are interleaved (round robin over the
 * sequences plus one gap sequence), as a serving cache fragments.
 *
 * KV bytes per call follow seeds/flashdecode-wormhole.md:
 *     2 * batch * head_dim * n_head_kv * ctx * element bytes
 * with 2 bytes for F16 and 34/32 for Q8_0 (a 2-byte scale per 32).
 *
 * Before timing, each case's output is compared with the reference
 * kernel's on a sample of sequences; a disagreeing kernel gets no number.
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
#include "kernels/attn.h"
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
};

static const char *SPLIT_NAME[3] = {"off", "on", "auto"};
static const enum kv_split SPLIT_MODE[3] = {KV_SPLIT_OFF, KV_SPLIT_ON, KV_SPLIT_AUTO};

/* ---------------------------------------------------------------------- */
/* small utilities */

#define CMD "bench --attention"

static void help(FILE *f) {
    fprintf(f,
            "usage: anvil bench --attention [options]\n\n"
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
            "                    the split-K speedup, per shape (bench/plot.py)\n");
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
    double us[3], p10[3], p90[3], gbs[3];
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
                   int batch, int ctx, const float *q, float *out, float *ref) {
    const struct kn_attn_ops *r = kn_attn_select("ref");
    size_t row = (size_t)sh->n_head * sh->head_dim;
    int G = sh->n_head / sh->n_head_kv;
    for (int s = 0; s < batch; s += (batch + 2) / 3) {
        for (int h = 0; h < sh->n_head_kv; h++) {
            struct kn_attn_task t = {
                .kv = kv_layout(kv),
                .base = kv_layer_base(kv, 0),
                .blocks = kv_seq_blocks(kv, s),
                .kv_head = h,
                .group = G,
                .scale = 1.0f / sqrtf((float)sh->head_dim),
                .q = q + (size_t)s * row + (size_t)h * G * sh->head_dim,
                .q_stride = row,
                .out = ref + (size_t)h * G * sh->head_dim,
                .out_stride = row,
                .pos = ctx - 1,
                .n_rows = 1,
            };
            r->attn(&t);
        }
        const float *o = out + (size_t)s * row;
        double num = 0, den = 0, worst = 0;
        for (size_t i = 0; i < row; i++) {
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
    float *q = anvil_malloc_aligned((size_t)batch * row * sizeof(float));
    float *out = anvil_malloc_aligned((size_t)batch * row * sizeof(float));
    float *ref = anvil_malloc_aligned(row * sizeof(float));
    struct kv_attn_seq *seqs = anvil_malloc((size_t)batch * sizeof(*seqs));
    double *t_us = anvil_malloc((size_t)o->reps * sizeof(double));
    int rc = 0;
    if (!q || !out || !ref || !seqs || !t_us) {
        rc = -1;
        goto done;
    }
    uint32_t x = 12345;
    for (size_t i = 0; i < (size_t)batch * row; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = ((float)(x >> 8) * 0x1p-23f - 1.0f) * 2.0f;
    }
    for (int s = 0; s < batch; s++)
        seqs[s] = (struct kv_attn_seq){.seq = s, .pos = ctx - 1, .n_tokens = 1,
                                       .q = q + (size_t)s * row, .out = out + (size_t)s * row};
    double bytes = 2.0 * batch * sh->head_dim * sh->n_head_kv * (double)ctx * elt_bytes(o->kv_type);
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
        if (!verify(kv, ops, sh, batch, ctx, q, out, ref)) {
            rc = -2;
            goto done;
        }
        /* warm up one pass over the layers (bounded), then time */
        int warm = n_layer < 8 ? n_layer : 8;
        for (int l = 0; l < warm; l++) {
            kv_attn_prepare(kv, ops, l, seqs, batch, row, row, o->threads, SPLIT_MODE[m], 1.0f / sqrtf((float)sh->head_dim), &job);
            kv_attn_run(job, pool);
        }
        uint64_t allocs = anvil_alloc_count();
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
        if (anvil_alloc_count() != allocs) {
            fprintf(stderr, "anvil %s: the attention path allocated memory\n", CMD);
            rc = -1;
            goto done;
        }
        res->split_used[m] = kv_attn_job_split(job);
        res->us[m] = bench_percentile(t_us, o->reps, 0.5);
        res->p10[m] = bench_percentile(t_us, o->reps, 0.1);
        res->p90[m] = bench_percentile(t_us, o->reps, 0.9);
        res->gbs[m] = bytes / (res->us[m] * 1e-6) / 1e9;
        res->ran[m] = true;
    }
done:
    anvil_free_aligned(q);
    anvil_free_aligned(out);
    anvil_free_aligned(ref);
    anvil_free(seqs);
    anvil_free(t_us);
    kv_free(kv);
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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long l;
        if (!strcmp(a, "--attention")) continue;
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
            if ((o->n_batch = cli_int_list(CMD, a, v, 1, 4096, o->batch, 16)) < 0) return 2;
        } else if (!strcmp(a, "--ctx")) {
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
            if (!cli_int(CMD, a, v, 1, 100000, &l)) return 2;
            o->reps = (int)l;
        } else if (!strcmp(a, "--png")) {
            o->png = v;
        } else {
            return usage("unknown option", a);
        }
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
    if (!ops) return usage("kernels not available on this CPU:", o.kernels);
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
        printf("decode attention over the paged KV cache: kernels %s, KV %s, block %d, %d threads, "
               "%s clock, commit %s, cpu %s\n",
               ops->name, tname, o.block, o.threads, o.cpu_time ? "CPU" : "wall", bench_commit(),
               bench_cpu_flags());
        printf("measured read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n\n", bw1,
               bwn, o.threads);
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
                        bench_json_str(&j, "kernels", ops->name);
                        bench_json_str(&j, "clock", o.cpu_time ? "cpu" : "wall");
                        bench_json_str(&j, "commit", bench_commit());
                        bench_json_end(&j);
                    }
                    if (!o.json) {
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
