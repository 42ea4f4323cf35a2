/*
 * bench_kernels.c - `anvil bench --kernels`: the quantized matmul
 * micro-benchmark of ../shared/SCENARIOS.md, plus the machine's memory read
 * bandwidth for context.
 *
 * Cases: each weight type x SmolLM2-135M projection shape (q/o 576->576,
 * k/v 576->192, gate/up 576->1536, down 1536->576, lm_head 576->49152) x
 * 1, 4, 16, 64, 512 activation rows x kernel variant (ref, avx2, avx512 as
 * the CPU allows). Each case reports time per call, GFLOP/s (2*m*n*rows)
 * and GB/s of weights (rows * row bytes per call), mean +- sd over -r reps.
 *
 * Weights are "cold" by default: calls rotate over enough copies of the
 * matrix (>= 256 MB) that each call streams its weights from memory, as a
 * decode step does with the whole model; --hot times a single copy.
 * Before timing, each variant's output is compared with the reference on a
 * slice of rows; a wrong kernel gets no number ("REFUSED"). The tolerance
 * tests themselves live in tests/unit_kernels.c. Never run by `make test`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "plot.h"
#include "core/core.h"
#include "core/pool.h"
#include "kernels/cpu/ref/ref.h"
#include "kernels/ops.h"

#define CMD "bench --kernels"

/* ---------------------------------------------------------------------- */
/* cases */

struct shape {
    const char *name;
    int n, rows; /* input length, output rows */
};
static const struct shape SHAPES[] = {
    {"qo", 576, 576}, {"kv", 576, 192}, {"gate_up", 576, 1536}, {"down", 1536, 576},
    {"lm_head", 576, 49152},
};
enum { N_SHAPES = sizeof(SHAPES) / sizeof(SHAPES[0]) };
static const int TYPES[] = {ANVIL_TYPE_Q4_1, ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q8_0,
                            ANVIL_TYPE_F16,  ANVIL_TYPE_BF16, ANVIL_TYPE_F32};
enum { N_TYPES = sizeof(TYPES) / sizeof(TYPES[0]) };
static const int MS[] = {1, 4, 16, 64, 512};
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
/* results[variant][type index][shape][m index] */
static struct result results[N_VARIANTS][N_TYPES][N_SHAPES][N_MS];

static const char *type_name(int type) {
    switch (type) {
    case ANVIL_TYPE_F32: return "F32";
    case ANVIL_TYPE_F16: return "F16";
    case ANVIL_TYPE_BF16: return "BF16";
    case ANVIL_TYPE_Q8_0: return "Q8_0";
    case ANVIL_TYPE_Q4_0: return "Q4_0";
    case ANVIL_TYPE_Q4_1: return "Q4_1";
    default: return "?";
    }
}

static size_t row_bytes(int type, int n) {
    switch (type) {
    case ANVIL_TYPE_F32: return (size_t)n * 4;
    case ANVIL_TYPE_F16:
    case ANVIL_TYPE_BF16: return (size_t)n * 2;
    case ANVIL_TYPE_Q8_0: return (size_t)(n / QK) * sizeof(struct blk_q8_0);
    case ANVIL_TYPE_Q4_0: return (size_t)(n / QK) * sizeof(struct blk_q4_0);
    case ANVIL_TYPE_Q4_1: return (size_t)(n / QK) * sizeof(struct blk_q4_1);
    default: return 0;
    }
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
    void *p = anvil_malloc_aligned(n ? n : 64);
    if (!p) {
        fprintf(stderr, "anvil %s: out of memory (%zu bytes)\n", CMD, n);
        exit(1); /* tools may exit */
    }
    return p;
}

static void mean_sd(const double *v, int n, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The clock of every timing: wall time, or the caller's CPU time with
 * --cpu-time (meaningful with one thread only; the option requires -t 1). */
static bool use_cpu_time;
static double now_s(void) { return use_cpu_time ? thread_cpu_s() : time_now_s(); }

static void git_commit(char *out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE *f = popen("git rev-parse --short=10 HEAD 2>/dev/null", "r");
    if (!f) return;
    char buf[64];
    if (fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\r\n")] = 0;
        if (*buf && strlen(buf) < cap) memcpy(out, buf, strlen(buf) + 1);
    }
    pclose(f);
}

static void cpu_flags(char *out, size_t cap) {
    const struct cpu_features *f = cpu_get_features();
    snprintf(out, cap, "%s%s%s%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
             f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "", f->avx512bw ? "avx512bw " : "",
             f->avx512vl ? "avx512vl " : "", f->avx512dq ? "avx512dq " : "",
             f->avx512vnni ? "avx512vnni " : "", f->avx512bf16 ? "avx512bf16" : "");
    size_t l = strlen(out);
    if (l && out[l - 1] == ' ') out[l - 1] = 0;
}

/* ---------------------------------------------------------------------- */
/* memory read bandwidth */

struct bw_job {
    const uint8_t *buf;
    size_t len;
    uint64_t sink[64];
};

/* Streaming read with software prefetch; AVX2 loads when the CPU has them
 * (this file is built without ISA flags, hence the target attribute). */
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t len) {
    typedef long long v4 __attribute__((vector_size(32)));
    v4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = 0; i + 128 <= len; i += 128) {
        __builtin_prefetch(p + i + 2048);
        __builtin_prefetch(p + i + 2048 + 64);
        v4 x0, x1, x2, x3;
        memcpy(&x0, p + i, 32);
        memcpy(&x1, p + i + 32, 32);
        memcpy(&x2, p + i + 64, 32);
        memcpy(&x3, p + i + 96, 32);
        a0 ^= x0;
        a1 ^= x1;
        a2 ^= x2;
        a3 ^= x3;
    }
    a0 ^= a1 ^ a2 ^ a3;
    return (uint64_t)(a0[0] ^ a0[1] ^ a0[2] ^ a0[3]);
}
static uint64_t read_plain(const uint8_t *p, size_t len) {
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 16 <= len; i += 16) {
        uint64_t x, y;
        memcpy(&x, p + i, 8);
        memcpy(&y, p + i + 8, 8);
        a ^= x;
        b ^= y;
    }
    return a ^ b;
}

static void bw_run(void *arg, int ith, int nth) {
    struct bw_job *j = arg;
    size_t per = j->len / (size_t)nth / 4096 * 4096;
    const uint8_t *p = j->buf + per * (size_t)ith;
    j->sink[ith] = cpu_get_features()->avx2 ? read_avx2(p, per) : read_plain(p, per);
}

/* Read bandwidth in GB/s over reps passes of a 256 MB buffer. */
static void measure_bw(int threads, int reps, double *mean, double *sd) {
    struct pool *pool = NULL;
    if (pool_create(threads, &pool) != ANVIL_OK) {
        *mean = *sd = 0;
        return;
    }
    size_t len = COLD_BYTES;
    uint8_t *buf = xalloc(len);
    for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(i * 131);
    struct bw_job j = {.buf = buf, .len = len};
    pool_run(pool, bw_run, &j); /* warm up: page-in, frequency */
    double v[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        pool_run(pool, bw_run, &j);
        v[r] = (double)len / (now_s() - t0) / 1e9;
    }
    mean_sd(v, reps, mean, sd);
    anvil_free_aligned(buf);
    pool_free(pool);
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

/* Time one case; returns false when refused. */
static bool mm_case(const struct opts *o, struct pool *pool, const struct kn_ops *ops, int vi,
                    int ti, int si, int mi, const uint8_t *copies, int n_copies, size_t copy_stride,
                    const uint8_t *w_gguf, const void *x, size_t xs, float *y, float *y_ref) {
    int type = TYPES[ti], m = MS[mi];
    const struct shape *sh = &SHAPES[si];
    struct result *res = &results[vi][ti][si][mi];
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
    mean_sd(us, reps, &res->us, &res->us_sd);
    mean_sd(gf, reps, &res->gflops, &res->gflops_sd);
    mean_sd(gb, reps, &res->gbps, &res->gbps_sd);
    res->done = true;
    return true;
}

/* ---------------------------------------------------------------------- */
/* PNG plot (tools/cli/plot.h): decode (smallest m) GB/s and prefill
 * (largest m) GFLOP/s per type and variant, aggregated over the shapes as
 * a forward pass would (total work / total time), and GFLOP/s against m per
 * type for the best variant. */

static bool plot(const struct opts *o, const bool *type_on, const char *path, double bw,
                 const char *cpu, const char *commit) {
    int mlo = -1, mhi = -1, best = -1;
    for (int mi = 0; mi < N_MS; mi++)
        if (o->m_on[mi]) {
            if (mlo < 0) mlo = mi;
            mhi = mi;
        }
    for (int v = 0; v < N_VARIANTS; v++)
        for (int t = 0; t < N_TYPES; t++)
            if (results[v][t][0][mhi].done || results[v][t][N_SHAPES - 1][mhi].done) best = v;
    if (mlo < 0) return false;
    char title[320], sub[128];
    snprintf(title, sizeof(title),
             "anvil matmul kernels, SmolLM2-135M shapes, %d thread%s, %s weights - commit %s - %s",
             o->threads, o->threads > 1 ? "s" : "", o->hot ? "hot" : "cold", commit, cpu);
    struct plot_grid *g = plot_grid_new(3, 1, 620, 460, title);
    if (!g) return false;
    struct plot *dec = plot_grid_panel(g, 0), *pre = plot_grid_panel(g, 1),
                *scale = plot_grid_panel(g, 2);
    bool ok = dec && pre && scale;
    snprintf(sub, sizeof(sub), "decode, m = %d: GB/s of weights", MS[mlo]);
    ok = ok && !plot_set_labels(dec, sub, "weight type", "GB/s");
    snprintf(sub, sizeof(sub), "prefill, m = %d: GFLOP/s", MS[mhi]);
    ok = ok && !plot_set_labels(pre, sub, "weight type", "GFLOP/s");
    ok = ok && !plot_set_labels(scale, "GFLOP/s against activation rows m (all shapes)", "m",
                                "GFLOP/s");
    const char *labels[N_TYPES];
    for (int v = 0; ok && v < N_VARIANTS; v++) {
        double dv[N_TYPES], pv[N_TYPES];
        int nl = 0;
        bool any = false;
        for (int t = 0; t < N_TYPES; t++) {
            if (!type_on[t]) continue;
            double bytes = 0, flops = 0, tlo = 0, thi = 0;
            bool all_lo = true, all_hi = true;
            for (int s = 0; s < N_SHAPES; s++) {
                if (!o->shape_on[s]) continue;
                const struct result *a = &results[v][t][s][mlo], *b = &results[v][t][s][mhi];
                if (a->done && !a->refused) bytes += a->bytes, tlo += a->us;
                else all_lo = false;
                if (b->done && !b->refused) flops += b->flops, thi += b->us;
                else all_hi = false;
            }
            labels[nl] = type_name(TYPES[t]);
            dv[nl] = all_lo && tlo > 0 ? bytes / tlo / 1e3 : NAN;
            pv[nl] = all_hi && thi > 0 ? flops / thi / 1e3 : NAN;
            any = any || isfinite(dv[nl]) || isfinite(pv[nl]);
            nl++;
        }
        if (!any) continue;
        ok = !plot_bars(dec, labels, dv, nl, VARIANTS[v]) && !plot_bars(pre, labels, pv, nl, VARIANTS[v]);
    }
    if (ok && bw > 0) {
        snprintf(sub, sizeof(sub), "memory read %.1f GB/s", bw);
        ok = !plot_hline(dec, bw, sub);
    }
    plot_log_x(scale, true);
    for (int t = 0; ok && best >= 0 && t < N_TYPES; t++) {
        if (!type_on[t]) continue;
        double x[N_MS], y[N_MS];
        int k = 0;
        for (int mi = 0; mi < N_MS; mi++) {
            if (!o->m_on[mi]) continue;
            double flops = 0, us = 0;
            bool all = true;
            for (int s = 0; s < N_SHAPES; s++) {
                if (!o->shape_on[s]) continue;
                const struct result *r = &results[best][t][s][mi];
                if (r->done && !r->refused) flops += r->flops, us += r->us;
                else all = false;
            }
            x[k] = MS[mi];
            y[k++] = all && us > 0 ? flops / us / 1e3 : NAN;
        }
        char lab[32];
        snprintf(lab, sizeof(lab), "%s %s", VARIANTS[best], type_name(TYPES[t]));
        ok = !plot_line(scale, lab, x, y, k);
    }
    char err[256] = "";
    if (ok && plot_grid_write_png(g, path, err, sizeof(err))) {
        fprintf(stderr, "anvil %s: %s\n", CMD, err);
        ok = false;
    }
    plot_grid_free(g);
    return ok;
}

/* ---------------------------------------------------------------------- */
/* command */

static int usage(void) {
    fprintf(stderr,
            "usage: anvil bench --kernels [--json] [--png FILE] [-t T] [-r REPS]\n"
            "                   [--types Q4_1,Q8_0,..] [--shapes qo,kv,gate_up,down,lm_head]\n"
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

int cli_bench_kernels(int argc, char **argv) {
    struct opts o = {.threads = 1, .reps = 5, .membw = true};
    const char *type_names[N_TYPES], *shape_names[N_SHAPES], *m_names[N_MS];
    char m_buf[N_MS][8];
    bool type_on[N_TYPES];
    for (int i = 0; i < N_TYPES; i++) type_on[i] = true, type_names[i] = type_name(TYPES[i]);
    for (int i = 0; i < N_SHAPES; i++) o.shape_on[i] = true, shape_names[i] = SHAPES[i].name;
    for (int i = 0; i < N_MS; i++) {
        o.m_on[i] = true;
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
    char commit[32], cpu[160];
    git_commit(commit, sizeof(commit));
    cpu_flags(cpu, sizeof(cpu));
    const struct kn_ops *ops[N_VARIANTS];
    for (int v = 0; v < N_VARIANTS; v++) {
        ops[v] = o.var_on[v] ? kn_select(v == V_PACKED ? "avx512" : VARIANTS[v]) : NULL;
        if (o.var_on[v] && !ops[v] && !o.json)
            printf("# variant %s: not supported by this CPU, skipped\n", VARIANTS[v]);
    }
    if (!o.json)
        printf("# anvil bench --kernels: commit %s, threads %d, %s weights, %s time\n# cpu: %s\n",
               commit, o.threads, o.hot ? "hot" : "cold", o.cpu_time ? "thread CPU" : "wall", cpu);

    double bw[2] = {0, 0};
    if (o.membw) {
        int tl[2] = {1, 2};
        for (int k = 0; k < (o.cpu_time ? 1 : 2); k++) {
            double mean, sd;
            measure_bw(tl[k], o.reps, &mean, &sd);
            bw[k] = mean;
            if (o.json)
                printf("{\"bench\":\"membw\",\"threads\":%d,\"gbps\":%.3f,\"gbps_sd\":%.3f,"
                       "\"commit\":\"%s\",\"cpu\":\"%s\"}\n",
                       tl[k], mean, sd, commit, cpu);
            else
                printf("memory read bandwidth, %d thread%s: %.1f +- %.1f GB/s\n", tl[k],
                       tl[k] > 1 ? "s" : "", mean, sd);
        }
    }

    struct pool *pool = NULL;
    if (pool_create(o.threads, &pool) != ANVIL_OK) {
        fprintf(stderr, "anvil %s: cannot create %d threads\n", CMD, o.threads);
        return 1;
    }
    if (!o.json)
        printf("\n%-7s %-5s %-8s %11s %4s %18s %10s %10s\n", "variant", "type", "shape", "n->rows",
               "m", "us/call", "GFLOP/s", "GB/s");
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
            size_t rb = row_bytes(type, sh->n), wbytes = rb * sh->rows;
            size_t stride = (wbytes + 4095) & ~(size_t)4095;
            int n_copies = o.hot ? 1 : (int)((COLD_BYTES + wbytes - 1) / wbytes);
            if (n_copies < 1) n_copies = 1;
            uint8_t *copies = xalloc(stride * n_copies);
            float *f = xalloc(sizeof(float) * (size_t)sh->n * (sh->rows > max_m ? sh->rows : max_m));
            for (size_t i = 0; i < (size_t)sh->n * sh->rows; i++) f[i] = frand();
            for (int r = 0; r < sh->rows; r++) kn_quantize_row(type, f + (size_t)r * sh->n, copies + rb * r, sh->n);
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
                    bool pk = vi == V_PACKED;
                    if (!mm_case(&o, pool, ops[vi], vi, ti, si, mi, pk ? pcopies : copies, n_copies,
                                 pk ? pstride : stride, copies, x, xs, y, y_ref)) {
                        refused++;
                        continue;
                    }
                    const struct result *r = &results[vi][ti][si][mi];
                    if (o.json)
                        printf("{\"bench\":\"matmul\",\"variant\":\"%s\",\"type\":\"%s\","
                               "\"shape\":\"%s\",\"n\":%d,\"rows\":%d,\"m\":%d,\"threads\":%d,"
                               "\"weights\":\"%s\",\"clock\":\"%s\",\"us\":%.3f,\"us_sd\":%.3f,\"gflops\":%.3f,"
                               "\"gflops_sd\":%.3f,\"gbps\":%.3f,\"gbps_sd\":%.3f,"
                               "\"commit\":\"%s\",\"cpu\":\"%s\"}\n",
                               VARIANTS[vi], type_name(type), sh->name, sh->n, sh->rows, MS[mi],
                               o.threads, o.hot ? "hot" : "cold", o.cpu_time ? "cpu" : "wall", r->us, r->us_sd, r->gflops,
                               r->gflops_sd, r->gbps, r->gbps_sd, commit, cpu);
                    else {
                        char nr[24], t[40];
                        snprintf(nr, sizeof(nr), "%d->%d", sh->n, sh->rows);
                        snprintf(t, sizeof(t), "%.1f +- %.1f", r->us, r->us_sd);
                        printf("%-7s %-5s %-8s %11s %4d %18s %10.1f %10.2f\n", VARIANTS[vi],
                               type_name(type), sh->name, nr, MS[mi], t, r->gflops, r->gbps);
                    }
                    fflush(stdout);
                }
            }
            anvil_free_aligned(y_ref);
            anvil_free_aligned(y);
            anvil_free_aligned(x);
            anvil_free_aligned(f);
            anvil_free_aligned(copies);
            if (pcopies) anvil_free_aligned(pcopies);
        }
    }
    pool_free(pool);
    if (o.png) {
        double line = o.membw ? bw[o.threads > 1 ? 1 : 0] : 0;
        if (!plot(&o, type_on, o.png, line, cpu, commit)) {
            fprintf(stderr, "anvil %s: cannot write %s\n", CMD, o.png);
            return 1;
        }
        if (!o.json) printf("wrote %s\n", o.png);
    }
    if (refused) {
        fprintf(stderr, "anvil %s: %d case(s) refused: kernel output differs from the reference\n",
                CMD, refused);
        return 1;
    }
    return 0;
}
