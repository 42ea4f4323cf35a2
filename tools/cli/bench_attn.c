/*
 * bench_attn.c - decode attention over the paged KV cache: µs per call and
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
#include <time.h>
#include <xmmintrin.h>

#include "bench_attn.h"
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
};

static const char *SPLIT_NAME[3] = {"off", "on", "auto"};
static const enum kv_split SPLIT_MODE[3] = {KV_SPLIT_OFF, KV_SPLIT_ON, KV_SPLIT_AUTO};

/* ---------------------------------------------------------------------- */
/* small utilities */

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "anvil bench --attention: %s%s%s\n", msg, arg ? " " : "", arg ? arg : "");
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

/* ---------------------------------------------------------------------- */
/* read bandwidth: every thread sums its slice of a buffer far larger than
 * the caches; best of several passes */

struct bw_job {
    const uint64_t *buf;
    size_t n; /* uint64 words */
    uint64_t sink[64];
    double cpu[64]; /* CPU seconds of each thread */
};

static void bw_fn(void *arg, int ith, int nth) {
    struct bw_job *j = arg;
    double c0 = thread_cpu_s();
    size_t per = j->n / (size_t)nth, i0 = per * (size_t)ith, i1 = ith == nth - 1 ? j->n : i0 + per;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    const uint64_t *p = j->buf;
    size_t i = i0;
    /* one cache line per iteration, prefetched 4 KiB ahead (like the
     * kernel's next-tile prefetch): the best plain read this code knows */
    for (; i + 8 <= i1; i += 8) {
        _mm_prefetch((const char *)(p + i) + 4096, _MM_HINT_T0);
        a0 += p[i] + p[i + 4];
        a1 += p[i + 1] + p[i + 5];
        a2 += p[i + 2] + p[i + 6];
        a3 += p[i + 3] + p[i + 7];
    }
    for (; i < i1; i++) a0 += p[i];
    j->sink[ith % 64] = a0 + a1 + a2 + a3;
    j->cpu[ith % 64] = thread_cpu_s() - c0;
}

static double max_of(const double *x, int n) {
    double m = 0.0;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
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
        if (cpu_time) dt = max_of(j.cpu, pool_size(pool) < 64 ? pool_size(pool) : 64);
        double gbs = (double)bytes / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    anvil_free_aligned(buf);
    return best;
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
    double c0 = thread_cpu_s();
    kv_attn_work(a->job, a->pool, ith, nth);
    if (ith < 64) a->cpu[ith] = thread_cpu_s() - c0;
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
                    "bench --attention: %s kernel disagrees with ref (%s batch %d ctx %d seq %d: "
                    "nmse %.3g); no number reported\n",
                    ops->name, sh->name, batch, ctx, s, den > 0 ? num / den : num);
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
        fprintf(stderr, "bench --attention: %s\n", err);
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
            double t0 = time_now_s(), c0 = thread_cpu_s();
            kv_attn_prepare(kv, ops, l, seqs, batch, row, row, o->threads, SPLIT_MODE[m], 1.0f / sqrtf((float)sh->head_dim), &job);
            double prep = thread_cpu_s() - c0;
            struct timed_arg ta = {.job = job, .pool = pool};
            pool_run(pool, timed_fn, &ta);
            t_us[r] = (time_now_s() - t0) * 1e6;
            if (o->cpu_time) t_us[r] = (prep + max_of(ta.cpu, o->threads < 64 ? o->threads : 64)) * 1e6;
        }
        if (anvil_alloc_count() != allocs) {
            fprintf(stderr, "bench --attention: the attention path allocated memory\n");
            rc = -1;
            goto done;
        }
        res->split_used[m] = kv_attn_job_split(job);
        qsort(t_us, (size_t)o->reps, sizeof(double), cmp_double);
        res->us[m] = pct(t_us, o->reps, 0.5);
        res->p10[m] = pct(t_us, o->reps, 0.1);
        res->p90[m] = pct(t_us, o->reps, 0.9);
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
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--attention")) continue;
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
        if (!v) return usage("missing value for", a);
        i++;
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
            if ((o->n_batch = parse_list(v, o->batch, 16, 1, 4096)) < 1) return usage("bad --batch", v);
        } else if (!strcmp(a, "--ctx")) {
            if ((o->n_ctx = parse_list(v, o->ctx, 16, 1, 1 << 20)) < 1) return usage("bad --ctx", v);
        } else if (!strcmp(a, "--threads")) {
            int t;
            if (parse_list(v, &t, 1, 1, 256) != 1) return usage("bad --threads", v);
            o->threads = t;
        } else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "f16") || !strcmp(v, "F16")) o->kv_type = ANVIL_TYPE_F16;
            else if (!strcmp(v, "q8_0") || !strcmp(v, "Q8_0")) o->kv_type = ANVIL_TYPE_Q8_0;
            else return usage("bad --kv-type (f16, q8_0)", v);
        } else if (!strcmp(a, "--block")) {
            int b;
            if (parse_list(v, &b, 1, 16, 1024) != 1 || b % 16) return usage("bad --block", v);
            o->block = b;
        } else if (!strcmp(a, "--split")) {
            o->split_on[0] = strstr(v, "off") != NULL;
            o->split_on[1] = strstr(v, "on") != NULL;
            o->split_on[2] = strstr(v, "auto") != NULL;
            if (!o->split_on[0] && !o->split_on[1] && !o->split_on[2]) return usage("bad --split", v);
        } else if (!strcmp(a, "--kernels")) {
            o->kernels = v;
        } else if (!strcmp(a, "--footprint")) {
            int mb;
            if (parse_list(v, &mb, 1, 1, 1 << 20) != 1) return usage("bad --footprint", v);
            o->footprint_mb = mb;
        } else if (!strcmp(a, "--max-mem")) {
            int mb;
            if (parse_list(v, &mb, 1, 1, 1 << 20) != 1) return usage("bad --max-mem", v);
            o->max_mem_mb = mb;
        } else if (!strcmp(a, "-r")) {
            if (parse_list(v, &o->reps, 1, 1, 100000) != 1) return usage("bad -r", v);
        } else {
            return usage("unknown option", a);
        }
    }
    return 0;
}

int bench_attention(int argc, char **argv) {
    struct opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    const struct kn_attn_ops *ops = kn_attn_select(o.kernels);
    if (!ops) return usage("kernels not available on this CPU:", o.kernels);
    struct pool *pool = NULL, *pool1 = NULL;
    if (pool_create(o.threads, &pool) != ANVIL_OK || pool_create(1, &pool1) != ANVIL_OK) {
        pool_free(pool);
        fprintf(stderr, "bench --attention: cannot start threads\n");
        return 1;
    }
    double bw1 = o.no_bw ? 1.0 : read_bandwidth(pool1, (size_t)1 << 30, o.cpu_time);
    double bwn = o.no_bw ? 1.0 : o.threads > 1 ? read_bandwidth(pool, (size_t)1 << 30, o.cpu_time) : bw1;
    pool_free(pool1);
    const char *tname = o.kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16";
    if (o.json) {
        const char *clk = o.cpu_time ? "cpu" : "wall";
        printf("{\"bench\":\"read_bw\",\"threads\":1,\"gbs\":%.2f,\"clock\":\"%s\",\"commit\":\"%s\","
               "\"cpu\":\"%s\"}\n",
               bw1, clk, commit_id(), cpu_flags());
        printf("{\"bench\":\"read_bw\",\"threads\":%d,\"gbs\":%.2f,\"clock\":\"%s\",\"commit\":\"%s\","
               "\"cpu\":\"%s\"}\n",
               o.threads, bwn, clk, commit_id(), cpu_flags());
    } else {
        printf("decode attention over the paged KV cache: kernels %s, KV %s, block %d, %d threads, "
               "%s clock, commit %s, cpu %s\n",
               ops->name, tname, o.block, o.threads, o.cpu_time ? "CPU" : "wall", commit_id(),
               cpu_flags());
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
                    if (o.json) {
                        printf("{\"bench\":\"attention\",\"shape\":\"%s\",\"n_head\":%d,"
                               "\"n_head_kv\":%d,\"head_dim\":%d,\"kv_type\":\"%s\",\"block\":%d,"
                               "\"batch\":%d,\"ctx\":%d,\"threads\":%d,\"split\":\"%s\","
                               "\"split_used\":%s,\"us\":%.2f,\"us_p10\":%.2f,\"us_p90\":%.2f,"
                               "\"gbs\":%.2f,\"read_bw_gbs\":%.2f,\"bw_frac\":%.3f,"
                               "\"kernels\":\"%s\",\"clock\":\"%s\",\"commit\":\"%s\"}\n",
                               sh->name, sh->n_head, sh->n_head_kv, sh->head_dim, tname, o.block,
                               o.batch[bi], o.ctx[ci], o.threads, SPLIT_NAME[m],
                               res.split_used[m] ? "true" : "false", res.us[m], res.p10[m],
                               res.p90[m], res.gbs[m], bwn, frac, ops->name,
                               o.cpu_time ? "cpu" : "wall", commit_id());
                    } else {
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
    return rc;
}

#ifdef BENCH_ATTN_MAIN
/* standalone build: cc -DBENCH_ATTN_MAIN tools/cli/bench_attn.c libanvil.a */
int main(int argc, char **argv) { return bench_attention(argc, argv); }
#endif
