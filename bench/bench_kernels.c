/*
 * bench_kernels.c - `anvil-microbench --kernels`: the quantized matmul
 * micro-benchmark of ../shared/SCENARIOS.md, plus the machine's memory read
 * bandwidth for context.
 *
 * Cases: each weight type x projection shape - SmolLM2-135M's as the
 * model runs them (qkv 576->960: Q, K and V stacked; o 576->576, also
 * q's shape; gate_up 576->3072: gate and up stacked; down 1536->576;
 * lm_head 576->49152; and k/v 576->192 alone, as a part of a stacked
 * matrix whose parts differ in type runs) and Llama-3.2-1B's (1b_qkv
 * 2048->3072, 1b_o 2048->2048,
 * 1b_gate_up 2048->16384, 1b_down 8192->2048, 1b_lm_head 2048->128256) -
 * x 1, 4, 16, 64, 512 activation rows x kernel variant (ref, avx2, avx512
 * as the CPU allows). A type whose block does not divide a shape's row
 * (the 256-element K-quant super-blocks on 576-wide rows) skips it. Each
 * case reports time per call, GFLOP/s (2*m*n*rows) and GB/s of weights
 * (rows * row bytes per call), mean +- sd over -r reps, and their shares of
 * the machine's limits measured in the same run: the int8 multiply-
 * accumulate peak of the variant's instruction set (its best compute-only loop,
 * kn_ops.int8_peak, run by all -t threads at once and summed: two threads
 * on the two hyperthreads of one core share its multiply ports, so one
 * thread's peak times the threads would overstate the limit) for the
 * quantized types, and the memory read bandwidth at the same thread count.
 *
 * Weights are "cold" by default: calls rotate over enough copies of the
 * matrix (>= 256 MB) that each call streams its weights from memory, as a
 * decode step does with the whole model; --hot times a single copy.
 * Before timing, each variant's output is compared with the reference on a
 * slice of rows; a wrong kernel gets no number ("REFUSED"). The tolerance
 * tests themselves live in tests/unit_kernels.c. --png draws the chart with
 * bench/plot.py from the same records as --json. Never run by `make test`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "bench.h"
#include "bench_png.h"
#include "bench_util.h"
#include "core/core.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu/amx/amx.h"
#include "kernels/cpu/ref/ref.h"
#include "kernels/ops.h"
#include "quantize/quantize.h"

#define CMD "microbench --kernels"

/* ---------------------------------------------------------------------- */
/* cases */

struct shape {
    const char *name;
    int n, rows; /* input length, output rows */
};
static const struct shape SHAPES[] = {
    {"qkv", 576, 960},          {"qo", 576, 576},          {"kv", 576, 192},          {"gate_up", 576, 3072},
    {"down", 1536, 576},        {"lm_head", 576, 49152},   {"1b_qkv", 2048, 3072},
    {"1b_o", 2048, 2048},       {"1b_gate_up", 2048, 16384}, {"1b_down", 8192, 2048},
    {"1b_lm_head", 2048, 128256},
    /* gpt-oss-20b: Q/K/V, one expert's gate+up and down (MXFP4 in the GGUF) */
    {"oss_qkv", 2880, 5120},    {"oss_exp_gate_up", 2880, 5760}, {"oss_exp_down", 2880, 2880},
};
enum { N_SHAPES = sizeof(SHAPES) / sizeof(SHAPES[0]) };
static const int TYPES[] = {ANVIL_TYPE_Q4_1, ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q8_0, ANVIL_TYPE_Q5_0,
                            ANVIL_TYPE_Q5_1, ANVIL_TYPE_IQ4_NL, ANVIL_TYPE_Q2_K, ANVIL_TYPE_Q3_K,
                            ANVIL_TYPE_Q4_K, ANVIL_TYPE_Q5_K, ANVIL_TYPE_Q6_K, ANVIL_TYPE_IQ4_XS,
                            ANVIL_TYPE_MXFP4, ANVIL_TYPE_F16, ANVIL_TYPE_BF16, ANVIL_TYPE_F32};
enum { N_TYPES = sizeof(TYPES) / sizeof(TYPES[0]) };
/* 2 and 8 (speculative verification's sizes) only when asked for */
static const int MS[] = {1, 2, 4, 8, 16, 32, 64, 512};
static const bool MS_DEFAULT[] = {true, false, true, false, true, false, true, true};
enum { N_MS = sizeof(MS) / sizeof(MS[0]) };
/* "avx512p": the avx512 table's packed kernels (weights repacked as the
 * model loader does, ops.h pack_size/pack_rows/matmul_packed) */
static const char *VARIANTS[] = {"ref", "avx2", "avx512", "avx512p"};
enum { N_VARIANTS = 4, V_PACKED = 3 };

#define COLD_BYTES ((size_t)256 << 20)

struct opts {
    bool json, hot, full_ref, membw;
    bool cpu_time; /* time with the calling thread's CPU clock (-t 1 on a busy machine) */
    const char *png;
    int threads, reps;
    bool type_on[KN_TYPE_MAX], shape_on[N_SHAPES], m_on[N_MS], var_on[N_VARIANTS];
};

struct result {
    bool done, refused;
    double us, us_sd, gflops, gflops_sd, gbps, gbps_sd;
    double flops, bytes; /* per call */
};

/* The machine's limits, measured at the start of the run. */
struct limits {
    double peak[4];  /* int8 GOP/s of one thread, by variant (0: none) */
    double peak_t[4]; /* int8 GOP/s of all the threads at once, by variant */
    double bw[3];    /* read GB/s at 1 and 2 threads (index = threads) */
};

static const char *type_name(int type) {
    const char *s = anvil_type_name(type);
    return s ? s : "?";
}

/* Bytes of a row of n elements; 0 when the type's block does not divide n. */
static size_t row_bytes(int type, int n) {
    uint32_t blck = 0, bytes = 0;
    if (!gguf_type_block(type, &blck, &bytes) || n % (int)blck != 0) return 0;
    return gguf_row_size(type, (uint64_t)n);
}

/* Whether the weights would be too big to time here (the F32 copy of a
 * 128k-vocabulary lm_head is a gigabyte). */
static bool too_big(int type, const struct shape *sh) {
    return row_bytes(type, sh->n) * (size_t)sh->rows > ((size_t)600 << 20);
}

/* Integer (int8 dot product) types, whose GOP/s compare with the int8 peak. */
static bool int8_type(int type) {
    return type != ANVIL_TYPE_F32 && type != ANVIL_TYPE_F16 && type != ANVIL_TYPE_BF16;
}

/* ---------------------------------------------------------------------- */
/* helpers */

static uint64_t rng = 0x853c49e6748fea9bull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void *xalloc(size_t n) {
    void *p = core_malloc_aligned(n ? n : 64);
    if (!p) {
        fprintf(stderr, "anvil %s: out of memory (%zu bytes)\n", CMD, n);
        exit(1); /* tools may exit */
    }
    return p;
}

/* The clock of every timing: wall time, or the caller's CPU time with
 * --cpu-time (meaningful with one thread only; the option requires -t 1). */
static bool use_cpu_time;
static double now_s(void) { return use_cpu_time ? bench_thread_cpu_s() : bench_wall_s(); }

/* Read bandwidth in GB/s, mean +- sd over reps passes of a COLD_BYTES
 * buffer on `threads` threads. */
static void measure_bw(int threads, int reps, double *mean, double *sd) {
    struct pool *pool = NULL;
    double v[64];
    int n = 0;
    if (pool_create(threads, &pool) == ANVIL_OK)
        n = bench_read_bw(pool, COLD_BYTES, reps > 64 ? 64 : reps, use_cpu_time, v);
    pool_free(pool);
    if (n > 0) bench_mean_sd(v, n, mean, sd);
    else *mean = *sd = 0;
}

/* One weight row of `type` from floats: the reference quantizer for the
 * types the kernels define, the searched quantizers of src/quantize for the
 * others (what `anvil quantize` writes). */
static void fill_row(int type, const float *f, uint8_t *dst, int n) {
    if (type == ANVIL_TYPE_F32 || type == ANVIL_TYPE_F16 || type == ANVIL_TYPE_BF16 ||
        type == ANVIL_TYPE_Q8_0 || type == ANVIL_TYPE_Q4_0 || type == ANVIL_TYPE_Q4_1 ||
        type == ANVIL_TYPE_MXFP4)
        kn_quantize_row(type, f, dst, n);
    else if (!qt_quantize_row(type, f, dst, n))
        memset(dst, 0, row_bytes(type, n));
}

/* ---------------------------------------------------------------------- */
/* matmul timing */

struct mm_job {
    kn_matmul_fn fn;
    float *y;
    size_t ldy;
    const uint8_t *w;
    size_t ws;
    const void *x;
    size_t xs;
    int n, m, rows;
};

static void mm_run(void *arg, int ith, int nth) {
    struct mm_job *j = arg;
    int r0, r1;
    pool_split(j->rows, ith, nth, 16, &r0, &r1);
    if (r0 < r1) j->fn(j->y, j->ldy, j->w, j->ws, j->x, j->xs, j->n, j->m, r0, r1);
}

/* Variant output against the reference on two slices of rows (head and
 * tail). Returns false, with a message, for a wrong kernel. */
static bool mm_verify(const char *var, int type, const struct shape *sh, int m,
                      const struct mm_job *job, const uint8_t *w_gguf, float *y_ref) {
    int rows = sh->rows, slice = rows < 48 ? rows : 48;
    int starts[2] = {0, rows - slice};
    double se = 0, sr = 0, maxd = 0, maxr = 0;
    for (int s = 0; s < 2; s++) {
        kn_ops_ref.matmul[type](y_ref, job->ldy, w_gguf, row_bytes(type, sh->n), job->x, job->xs, job->n, m,
                                starts[s], starts[s] + slice);
        for (int t = 0; t < m; t++)
            for (int r = starts[s]; r < starts[s] + slice; r++) {
                double a = job->y[(size_t)t * job->ldy + r], b = y_ref[(size_t)t * job->ldy + r];
                se += (a - b) * (a - b);
                sr += b * b;
                if (fabs(a - b) > maxd || isnan(a)) maxd = isnan(a) ? INFINITY : fabs(a - b);
                if (fabs(b) > maxr) maxr = fabs(b);
            }
    }
    double nmse = sr > 0 ? se / sr : se;
    if (nmse <= 1e-8 && maxd <= 1e-4 * maxr) return true;
    fprintf(stderr,
            "anvil %s: REFUSED %s %s %s m=%d: output differs from the reference "
            "(nmse %.3g, max |diff| %.3g of max |ref| %.3g)\n",
            CMD, var, type_name(type), sh->name, m, nmse, maxd, maxr);
    return false;
}

/* Time one case into *res; returns false when refused. */
static bool mm_case(const struct opts *o, struct pool *pool, const struct kn_ops *ops, int vi,
                    int ti, int si, int mi, const uint8_t *copies, int n_copies, size_t copy_stride,
                    const uint8_t *w_gguf, const void *x, size_t xs, float *y, float *y_ref,
                    struct result *res) {
    int type = TYPES[ti], m = MS[mi];
    const struct shape *sh = &SHAPES[si];
    *res = (struct result){0};
    kn_matmul_fn fn = vi == V_PACKED ? ops->matmul_packed[type] : ops->matmul[type];
    struct mm_job job = {fn, y, (size_t)sh->rows, copies, row_bytes(type, sh->n),
                         x, xs, sh->n, m, sh->rows};
    res->flops = 2.0 * m * sh->n * sh->rows;
    res->bytes = (double)job.ws * sh->rows;
    pool_run(pool, mm_run, &job);
    if (!mm_verify(VARIANTS[vi], type, sh, m, &job, w_gguf, y_ref)) {
        res->done = res->refused = true;
        return false;
    }
    /* warm-up, and calls per timed batch so that a batch lasts >= 20 ms */
    int idx = 0;
    double t0 = now_s(), el;
    int calls = 0;
    do {
        job.w = copies + copy_stride * (size_t)(idx++ % n_copies);
        pool_run(pool, mm_run, &job);
        calls++;
        el = now_s() - t0;
    } while (el < 0.05 && calls < 1000000);
    int batch = (int)(0.02 / (el / calls)) + 1;
    double us[256];
    int reps = o->reps > 256 ? 256 : o->reps;
    for (int r = 0; r < reps; r++) {
        t0 = now_s();
        for (int c = 0; c < batch; c++) {
            job.w = copies + copy_stride * (size_t)(idx++ % n_copies);
            pool_run(pool, mm_run, &job);
        }
        us[r] = (now_s() - t0) / batch * 1e6;
    }
    double gf[256], gb[256];
    for (int r = 0; r < reps; r++) {
        gf[r] = res->flops / us[r] / 1e3;
        gb[r] = res->bytes / us[r] / 1e3;
    }
    bench_mean_sd(us, reps, &res->us, &res->us_sd);
    bench_mean_sd(gf, reps, &res->gflops, &res->gflops_sd);
    bench_mean_sd(gb, reps, &res->gbps, &res->gbps_sd);
    res->done = true;
    return true;
}

/* ---------------------------------------------------------------------- */
/* command */

static int usage(void) {
    fprintf(stderr,
            "usage: anvil-microbench --kernels [--json] [--png FILE] [-t T] [-r REPS]\n"
            "                   [--types Q4_1,Q8_0,..] [--shapes qkv,qo,kv,gate_up,down,lm_head,1b_*,oss_*]\n"
            "                   [--m 1,4,16,64,512] [--variants ref,avx2,avx512]\n"
            "                   [--hot] [--full-ref] [--no-membw] [--cpu-time]\n"
            "  --hot       time one copy of the weights (cache-resident when small);\n"
            "              default rotates over 256 MB of copies (streamed from memory)\n"
            "  --full-ref  also time the scalar reference at m > 4 (slow)\n"
            "  --cpu-time  time with the thread's CPU clock instead of wall time\n"
            "              (-t 1 only; for a machine shared with other jobs)\n");
    return 2;
}

/* Comma list of names; sets on[i] for each NAMES[i] listed. */
static bool parse_list(const char *opt, const char *s, const char *const *names, int count,
                       bool *on) {
    for (int i = 0; i < count; i++) on[i] = false;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int i = 0;
        while (i < count && strcasecmp(tok, names[i])) i++;
        if (i == count) {
            cli_fail(CMD, "%s: unknown value '%s'", opt, tok);
            return false;
        }
        on[i] = true;
    }
    return true;
}

int bench_kernels(int argc, char **argv) {
    struct opts o = {.threads = 1, .reps = 5, .membw = true};
    const char *type_names[N_TYPES], *shape_names[N_SHAPES], *m_names[N_MS];
    char m_buf[N_MS][8];
    bool type_on[N_TYPES];
    for (int i = 0; i < N_TYPES; i++) type_on[i] = true, type_names[i] = type_name(TYPES[i]);
    for (int i = 0; i < N_SHAPES; i++) o.shape_on[i] = true, shape_names[i] = SHAPES[i].name;
    for (int i = 0; i < N_MS; i++) {
        o.m_on[i] = MS_DEFAULT[i];
        snprintf(m_buf[i], sizeof(m_buf[i]), "%d", MS[i]);
        m_names[i] = m_buf[i];
    }
    for (int i = 0; i < N_VARIANTS; i++) o.var_on[i] = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long l;
        if (!strcmp(a, "--kernels")) continue;
        else if (!strcmp(a, "--json")) o.json = true;
        else if (!strcmp(a, "--hot")) o.hot = true;
        else if (!strcmp(a, "--full-ref")) o.full_ref = true;
        else if (!strcmp(a, "--no-membw")) o.membw = false;
        else if (!strcmp(a, "--cpu-time")) o.cpu_time = true;
        else if (!strcmp(a, "--png")) {
            if (!(o.png = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 1, 256, &l)) return 2;
            o.threads = (int)l;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 1, 256, &l)) return 2;
            o.reps = (int)l;
        } else if (!strcmp(a, "--types")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) ||
                !parse_list(a, v, type_names, N_TYPES, type_on))
                return 2;
        } else if (!strcmp(a, "--shapes")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) ||
                !parse_list(a, v, shape_names, N_SHAPES, o.shape_on))
                return 2;
        } else if (!strcmp(a, "--m")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !parse_list(a, v, m_names, N_MS, o.m_on))
                return 2;
        } else if (!strcmp(a, "--variants")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) ||
                !parse_list(a, v, VARIANTS, N_VARIANTS, o.var_on))
                return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        } else {
            cli_fail(CMD, "unknown option '%s'", a);
            return usage();
        }
    }

    if (o.cpu_time && o.threads != 1) return cli_fail(CMD, "--cpu-time needs -t 1");
    use_cpu_time = o.cpu_time;
    struct bench_png png;
    int rc = o.png ? bench_png_open(&png, CMD, "kernels", o.png, NULL, 0) : 0;
    if (rc) return rc;
    FILE *data = o.png ? bench_png_data(&png) : NULL; /* the chart's copy of the records */
    const char *commit = bench_commit(), *cpu = bench_cpu_flags();
    const struct kn_ops *ops[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++) {
        ops[v] = o.var_on[v] ? kn_select(v == V_PACKED ? "avx512" : VARIANTS[v]) : NULL;
        if (o.var_on[v] && !ops[v] && !o.json)
            printf("# variant %s: not supported by this CPU, skipped\n", VARIANTS[v]);
    }
    if (!o.json)
        printf("# anvil-microbench --kernels: commit %s, threads %d, %s weights, %s time\n# cpu: %s\n",
               commit, o.threads, o.hot ? "hot" : "cold", o.cpu_time ? "thread CPU" : "wall", cpu);

    struct limits lim = {{0}, {0}, {0}};
    for (int v = 1; v < N_VARIANTS; v++) {
        if (!ops[v] || !ops[v]->int8_peak) continue;
        double best = 0.0;
        for (int r = 0; r < 3; r++) { /* the best of three: a busy machine only lowers it */
            double g = ops[v]->int8_peak(0.2);
            if (g > best) best = g;
        }
        lim.peak[v] = best;
        if (o.json || data) {
            struct bench_json j;
            bench_json_begin(&j, o.json ? stdout : NULL, data);
            bench_json_str(&j, "bench", "int8_peak");
            bench_json_str(&j, "variant", VARIANTS[v]);
            bench_json_num(&j, "gops_per_thread", best, 2);
            bench_json_str(&j, "commit", commit);
            bench_json_str(&j, "cpu", cpu);
            bench_json_end(&j);
        }
        if (!o.json)
            printf("int8 multiply-accumulate peak (%s, best compute-only loop): %.1f GOP/s per thread\n",
                   VARIANTS[v], best);
    }
    if (kn_amx_active() && ops[V_PACKED]) {
        /* the tile unit's own peak: the AMX kernels' limit */
        double best = 0.0;
        for (int r = 0; r < 3; r++) {
            double g = kn_amx_int8_peak(0.2);
            if (g > best) best = g;
        }
        if (o.json || data) {
            struct bench_json j;
            bench_json_begin(&j, o.json ? stdout : NULL, data);
            bench_json_str(&j, "bench", "amx_int8_peak");
            bench_json_num(&j, "gops_per_thread", best, 2);
            bench_json_str(&j, "commit", commit);
            bench_json_str(&j, "cpu", cpu);
            bench_json_end(&j);
        }
        if (!o.json)
            printf("AMX int8 peak (register-only TDPBSSD loop): %.1f GOP/s per thread; the %s kernels "
                   "run their many-token products on AMX (ANVIL_AMX=0: off), so their share of the "
                   "VNNI peak can pass 100%%\n",
                   best, VARIANTS[V_PACKED]);
    }
    if (o.membw) {
        int tl[2] = {1, 2};
        for (int k = 0; k < (o.cpu_time ? 1 : 2); k++) {
            double mean, sd;
            measure_bw(tl[k], o.reps, &mean, &sd);
            lim.bw[tl[k]] = mean;
            if (o.json || data) {
                struct bench_json j;
                bench_json_begin(&j, o.json ? stdout : NULL, data);
                bench_json_str(&j, "bench", "membw");
                bench_json_int(&j, "threads", tl[k]);
                bench_json_num(&j, "gbps", mean, 3);
                bench_json_num(&j, "gbps_sd", sd, 3);
                bench_json_str(&j, "commit", commit);
                bench_json_str(&j, "cpu", cpu);
                bench_json_end(&j);
            }
            if (!o.json)
                printf("memory read bandwidth, %d thread%s: %.1f +- %.1f GB/s\n", tl[k],
                       tl[k] > 1 ? "s" : "", mean, sd);
        }
    }

    struct pool *pool = NULL;
    if (pool_create(o.threads, &pool) != ANVIL_OK) {
        fprintf(stderr, "anvil %s: cannot create %d threads\n", CMD, o.threads);
        if (o.png) bench_png_close(&png);
        return 1;
    }
    for (int v = 1; v < N_VARIANTS; v++) {
        if (!lim.peak[v]) continue;
        lim.peak_t[v] = o.threads > 1 ? bench_peak_all(pool, ops[v]->int8_peak) : lim.peak[v];
        if (o.threads < 2) continue;
        if (o.json || data) {
            struct bench_json j;
            bench_json_begin(&j, o.json ? stdout : NULL, data);
            bench_json_str(&j, "bench", "int8_peak_all");
            bench_json_str(&j, "variant", VARIANTS[v]);
            bench_json_int(&j, "threads", o.threads);
            bench_json_num(&j, "gops", lim.peak_t[v], 2);
            bench_json_num(&j, "per_thread_ratio", lim.peak_t[v] / (lim.peak[v] * o.threads), 3);
            bench_json_str(&j, "commit", commit);
            bench_json_str(&j, "cpu", cpu);
            bench_json_end(&j);
        }
        if (!o.json)
            printf("int8 peak (%s), %d threads at once: %.1f GOP/s (%.2f x one thread's x %d; "
                   "%%peak below is of this)\n",
                   VARIANTS[v], o.threads, lim.peak_t[v], lim.peak_t[v] / (lim.peak[v] * o.threads),
                   o.threads);
    }
    if (!o.json)
        printf("\n%-7s %-6s %-10s %12s %4s %18s %10s %6s %10s %6s\n", "variant", "type", "shape",
               "n->rows", "m", "us/call", "GFLOP/s", "%peak", "GB/s", "%bw");
    int refused = 0;
    int max_m = 0;
    for (int mi = 0; mi < N_MS; mi++)
        if (o.m_on[mi] && MS[mi] > max_m) max_m = MS[mi];
    for (int ti = 0; ti < N_TYPES; ti++) {
        if (!type_on[ti]) continue;
        int type = TYPES[ti], act = kn_act_for_type(type);
        for (int si = 0; si < N_SHAPES; si++) {
            if (!o.shape_on[si]) continue;
            const struct shape *sh = &SHAPES[si];
            if (!row_bytes(type, sh->n) || too_big(type, sh)) continue;
            size_t rb = row_bytes(type, sh->n), wbytes = rb * sh->rows;
            size_t stride = (wbytes + 4095) & ~(size_t)4095;
            int n_copies = o.hot ? 1 : (int)((COLD_BYTES + wbytes - 1) / wbytes);
            if (n_copies < 1) n_copies = 1;
            uint8_t *copies = xalloc(stride * n_copies);
            float *f = xalloc(sizeof(float) * (size_t)sh->n * (sh->rows > max_m ? sh->rows : max_m));
            for (size_t i = 0; i < (size_t)sh->n * sh->rows; i++) f[i] = frand();
            for (int r = 0; r < sh->rows; r++)
                fill_row(type, f + (size_t)r * sh->n, copies + rb * r, sh->n);
            for (int k = 1; k < n_copies; k++) memcpy(copies + stride * k, copies, wbytes);
            /* the packed form of the same weights, as many copies */
            uint8_t *pcopies = NULL;
            size_t pbytes = 0, pstride = 0;
            if (ops[V_PACKED] && ops[V_PACKED]->pack_size &&
                (pbytes = ops[V_PACKED]->pack_size(type, sh->rows, sh->n)) > 0) {
                pstride = (pbytes + 4095) & ~(size_t)4095;
                pcopies = xalloc(pstride * n_copies);
                memset(pcopies, 0, pbytes);
                ops[V_PACKED]->pack_rows(type, pcopies, sh->n, 0, sh->rows, copies, rb);
                for (int k = 1; k < n_copies; k++) memcpy(pcopies + pstride * k, pcopies, pbytes);
            }
            size_t xs = kn_act_row_size(act, sh->n);
            uint8_t *x = xalloc(xs * max_m);
            for (size_t i = 0; i < (size_t)sh->n * max_m; i++) f[i] = frand();
            for (int t = 0; t < max_m; t++) kn_ops_ref.act[act](x + xs * t, f + (size_t)t * sh->n, sh->n);
            float *y = xalloc(sizeof(float) * (size_t)sh->rows * max_m);
            float *y_ref = xalloc(sizeof(float) * (size_t)sh->rows * max_m);
            for (int mi = 0; mi < N_MS; mi++) {
                if (!o.m_on[mi]) continue;
                for (int vi = 0; vi < N_VARIANTS; vi++) {
                    if (!ops[vi]) continue;
                    if (vi == 0 && MS[mi] > 4 && !o.full_ref) continue;
                    if (vi == V_PACKED && !pcopies) continue;
                    if (!(vi == V_PACKED ? ops[vi]->matmul_packed[type] : ops[vi]->matmul[type]))
                        continue; /* no kernel of this family for the type */
                    bool pk = vi == V_PACKED;
                    struct result res, *r = &res;
                    /* the limits this case is judged against: the variant's
                     * int8 peak on every thread, the read bandwidth at this
                     * thread count (measured at 1 and 2) */
                    double peak = int8_type(type) ? lim.peak_t[vi] : 0.0;
                    double bw = o.hot ? 0.0 : lim.bw[o.threads < 2 ? 1 : 2];
                    if (!mm_case(&o, pool, ops[vi], vi, ti, si, mi, pk ? pcopies : copies, n_copies,
                                 pk ? pstride : stride, copies, x, xs, y, y_ref, &res)) {
                        refused++;
                        continue;
                    }
                    if (o.json || data) {
                        struct bench_json j;
                        bench_json_begin(&j, o.json ? stdout : NULL, data);
                        bench_json_str(&j, "bench", "matmul");
                        bench_json_str(&j, "variant", VARIANTS[vi]);
                        bench_json_str(&j, "type", type_name(type));
                        bench_json_str(&j, "shape", sh->name);
                        bench_json_int(&j, "n", sh->n);
                        bench_json_int(&j, "rows", sh->rows);
                        bench_json_int(&j, "m", MS[mi]);
                        bench_json_int(&j, "threads", o.threads);
                        bench_json_str(&j, "weights", o.hot ? "hot" : "cold");
                        bench_json_str(&j, "clock", o.cpu_time ? "cpu" : "wall");
                        bench_json_num(&j, "us", r->us, 3);
                        bench_json_num(&j, "us_sd", r->us_sd, 3);
                        bench_json_num(&j, "gflops", r->gflops, 3);
                        bench_json_num(&j, "gflops_sd", r->gflops_sd, 3);
                        bench_json_num(&j, "gbps", r->gbps, 3);
                        bench_json_num(&j, "gbps_sd", r->gbps_sd, 3);
                        if (peak > 0) bench_json_num(&j, "peak_share", r->gflops / peak, 4);
                        if (bw > 0) bench_json_num(&j, "bw_share", r->gbps / bw, 4);
                        bench_json_str(&j, "commit", commit);
                        bench_json_str(&j, "cpu", cpu);
                        bench_json_end(&j);
                    }
                    if (!o.json) {
                        char nr[24], t[40], ps[16] = "-", bs[16] = "-";
                        snprintf(nr, sizeof(nr), "%d->%d", sh->n, sh->rows);
                        snprintf(t, sizeof(t), "%.1f +- %.1f", r->us, r->us_sd);
                        if (peak > 0) snprintf(ps, sizeof(ps), "%.0f%%", 100 * r->gflops / peak);
                        if (bw > 0) snprintf(bs, sizeof(bs), "%.0f%%", 100 * r->gbps / bw);
                        printf("%-7s %-6s %-10s %12s %4d %18s %10.1f %6s %10.2f %6s\n", VARIANTS[vi],
                               type_name(type), sh->name, nr, MS[mi], t, r->gflops, ps, r->gbps, bs);
                    }
                    fflush(stdout);
                }
            }
            core_free_aligned(y_ref);
            core_free_aligned(y);
            core_free_aligned(x);
            core_free_aligned(f);
            core_free_aligned(copies);
            if (pcopies) core_free_aligned(pcopies);
        }
    }
    pool_free(pool);
    if (o.png) {
        rc = bench_png_draw(&png);
        bench_png_close(&png);
    }
    if (refused) {
        fprintf(stderr, "anvil %s: %d case(s) refused: kernel output differs from the reference\n",
                CMD, refused);
        return 1;
    }
    return rc;
}
