/*
 * bench_util.c - clocks, statistics, record stamps, JSON lines and the
 * read-bandwidth probe shared by the benchmarks (see bench_util.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_util.h"
#include "core/core.h"
#include "core/pool.h"

#ifndef ANVIL_COMMIT
#define ANVIL_COMMIT "unknown"
#endif

/* ---------------------------------------------------------------------- */
/* clocks */

double bench_wall_s(void) { return time_now_s(); }

double bench_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------- */
/* statistics */

void bench_mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(double *x, int n, double q) {
    if (n <= 0) return 0.0;
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    double pos = q * (n - 1);
    int i = (int)pos;
    double f = pos - i;
    return i + 1 < n ? x[i] * (1 - f) + x[i + 1] * f : x[i];
}

double bench_max(const double *x, int n) {
    double m = 0.0;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* ---------------------------------------------------------------------- */
/* record stamps */

const char *bench_commit(void) { return ANVIL_COMMIT; }

const char *bench_cpu_flags(void) {
    static char s[160];
    if (s[0]) return s;
    const struct cpu_features *f = cpu_get_features();
    snprintf(s, sizeof(s), "%s%s%s%s%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
             f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "", f->avx512bw ? "avx512bw " : "",
             f->avx512vl ? "avx512vl " : "", f->avx512dq ? "avx512dq " : "",
             f->avx512vnni ? "avx512vnni " : "", f->avx512bf16 ? "avx512bf16 " : "",
             /* the AMX tiles the OS granted (kn_amx_active() may still be off) */
             f->amx ? "amx-int8 " : "");
    size_t l = strlen(s);
    if (l && s[l - 1] == ' ') s[l - 1] = 0;
    if (!s[0]) snprintf(s, sizeof(s), "none");
    return s;
}

double bench_peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

/* ---------------------------------------------------------------------- */
/* JSON lines */

static void put(struct bench_json *j, const char *s) {
    for (int k = 0; k < 2; k++)
        if (j->out[k]) fputs(s, j->out[k]);
}

static void putf(struct bench_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct bench_json *j, const char *fmt, ...) {
    for (int k = 0; k < 2; k++) {
        if (!j->out[k]) continue;
        va_list ap;
        va_start(ap, fmt);
        vfprintf(j->out[k], fmt, ap);
        va_end(ap);
    }
}

static void put_string(struct bench_json *j, const char *s) {
    put(j, "\"");
    char esc[8];
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p, esc[2] = 0;
        } else if (*p < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", *p);
        } else {
            esc[0] = (char)*p, esc[1] = 0;
        }
        put(j, esc);
    }
    put(j, "\"");
}

static void key(struct bench_json *j, const char *k) {
    if (!j->first) put(j, ", ");
    j->first = false;
    put_string(j, k);
    put(j, ": ");
}

static void num(struct bench_json *j, double v, int decimals) {
    if (isfinite(v)) putf(j, "%.*f", decimals, v);
    else put(j, "null");
}

void bench_json_begin(struct bench_json *j, FILE *a, FILE *b) {
    *j = (struct bench_json){.out = {a, b}, .first = true};
    put(j, "{");
}

void bench_json_str(struct bench_json *j, const char *k, const char *v) {
    key(j, k);
    put_string(j, v ? v : "");
}

void bench_json_int(struct bench_json *j, const char *k, long long v) {
    key(j, k);
    putf(j, "%lld", v);
}

void bench_json_num(struct bench_json *j, const char *k, double v, int decimals) {
    key(j, k);
    num(j, v, decimals);
}

void bench_json_bool(struct bench_json *j, const char *k, bool v) {
    key(j, k);
    put(j, v ? "true" : "false");
}

void bench_json_nums(struct bench_json *j, const char *k, const double *v, int n, int decimals) {
    key(j, k);
    put(j, "[");
    for (int i = 0; i < n; i++) {
        if (i) put(j, ", ");
        num(j, v[i], decimals);
    }
    put(j, "]");
}

void bench_json_int_rows(struct bench_json *j, const char *k, const int32_t *v, int rows,
                         int cols) {
    key(j, k);
    put(j, "[");
    for (int r = 0; r < rows; r++) {
        put(j, r ? ", [" : "[");
        for (int c = 0; c < cols; c++) putf(j, c ? ", %d" : "%d", (int)v[(size_t)r * cols + c]);
        put(j, "]");
    }
    put(j, "]");
}

void bench_json_end(struct bench_json *j) {
    put(j, "}\n");
    for (int k = 0; k < 2; k++)
        if (j->out[k]) fflush(j->out[k]);
}

/* ---------------------------------------------------------------------- */
/* memory read bandwidth */

struct bw_job {
    const uint8_t *buf;
    size_t per;        /* bytes per thread, a multiple of 4096 */
    int loop;          /* which read loop (enum bw_loop) */
    uint64_t sink[64]; /* keeps the loads alive */
    double cpu[64];    /* CPU seconds of each thread's pass */
};

/* The read loops, 128 bytes per stream and step: one stream with or
 * without a software prefetch 2 KiB ahead, or four streams (the thread's
 * share in quarters, read in lockstep), each prefetched a page ahead, the
 * way the packed matvec reads its weights (kernels/cpu/avx512/avx512.h).
 * Which one reaches the memory's limit depends on the machine: on Intel
 * (Cascade Lake) the prefetch, on AMD (Zen 4) one stream without it (its
 * hardware prefetchers alone reach ~30 GB/s where the prefetching loop held
 * one core at 19), and on a Sapphire Rapids class VM (2026-12-01) the four
 * prefetched streams: 33-36 GB/s at 2 threads where one stream read 26,
 * below what the matvec itself then streamed. bench_read_bw times them all
 * and keeps the fastest, so that the bandwidth a kernel is judged against
 * is a limit, not one loop's rate. This file is built without ISA flags
 * (bench code runs everywhere), hence the target attribute on the
 * functions that use AVX2 when the CPU has it; wide loads get closer to
 * the memory's limit than 64-bit ones. */
enum bw_loop { BW_PLAIN, BW_PF, BW_STREAMS4, BW_NLOOPS };

typedef long long bw_v4 __attribute__((vector_size(32)));

__attribute__((target("avx2"))) static inline void bw_step(const uint8_t *p, bw_v4 a[4]) {
    bw_v4 x0, x1, x2, x3;
    memcpy(&x0, p, 32);
    memcpy(&x1, p + 32, 32);
    memcpy(&x2, p + 64, 32);
    memcpy(&x3, p + 96, 32);
    a[0] ^= x0;
    a[1] ^= x1;
    a[2] ^= x2;
    a[3] ^= x3;
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t len, int loop) {
    bw_v4 a[4] = {{0}, {0}, {0}, {0}};
    if (loop == BW_STREAMS4) {
        const size_t q = len / 4 / 128 * 128;
        const uint8_t *s0 = p, *s1 = p + q, *s2 = p + 2 * q, *s3 = p + 3 * q;
        for (size_t i = 0; i + 128 <= q; i += 128) {
            __builtin_prefetch(s0 + i + 4096);
            __builtin_prefetch(s0 + i + 4096 + 64);
            __builtin_prefetch(s1 + i + 4096);
            __builtin_prefetch(s1 + i + 4096 + 64);
            __builtin_prefetch(s2 + i + 4096);
            __builtin_prefetch(s2 + i + 4096 + 64);
            __builtin_prefetch(s3 + i + 4096);
            __builtin_prefetch(s3 + i + 4096 + 64);
            bw_step(s0 + i, a);
            bw_step(s1 + i, a);
            bw_step(s2 + i, a);
            bw_step(s3 + i, a);
        }
    } else {
        for (size_t i = 0; i + 128 <= len; i += 128) {
            if (loop == BW_PF) {
                __builtin_prefetch(p + i + 2048);
                __builtin_prefetch(p + i + 2048 + 64);
            }
            bw_step(p + i, a);
        }
    }
    a[0] ^= a[1] ^ a[2] ^ a[3];
    return (uint64_t)(a[0][0] ^ a[0][1] ^ a[0][2] ^ a[0][3]);
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
    (void)nth;
    struct bw_job *j = arg;
    double c0 = bench_thread_cpu_s();
    const uint8_t *p = j->buf + j->per * (size_t)ith;
    uint64_t s = cpu_get_features()->avx2 ? read_avx2(p, j->per, j->loop) : read_plain(p, j->per);
    if (ith < 64) {
        j->sink[ith] = s;
        j->cpu[ith] = bench_thread_cpu_s() - c0;
    }
}

int bench_read_bw(struct pool *pool, size_t bytes, int passes, bool cpu_time, double *gbs) {
    int nth = pool_size(pool);
    struct bw_job j = {.per = bytes / (size_t)nth / 4096 * 4096};
    if (j.per == 0 || passes < 1) return 0;
    uint8_t *buf = core_malloc_aligned(j.per * (size_t)nth);
    if (!buf) return 0;
    for (size_t i = 0; i < j.per * (size_t)nth; i++) buf[i] = (uint8_t)(i * 131);
    j.buf = buf;
    pool_run(pool, bw_run, &j); /* untimed: page-in, clocks up */
    double total = (double)j.per * nth, best = 0;
    int best_loop = BW_PLAIN;
    /* the fastest loop on this machine, best of two passes each */
    for (int loop = 0; loop < (cpu_get_features()->avx2 ? BW_NLOOPS : 1); loop++)
        for (int k = 0; k < 2; k++) {
            j.loop = loop;
            double t0 = bench_wall_s();
            pool_run(pool, bw_run, &j);
            double dt = bench_wall_s() - t0;
            if (best == 0 || dt < best) {
                best = dt;
                best_loop = loop;
            }
        }
    j.loop = best_loop;
    for (int r = 0; r < passes; r++) {
        double t0 = bench_wall_s();
        pool_run(pool, bw_run, &j);
        double dt = bench_wall_s() - t0;
        if (cpu_time) dt = bench_max(j.cpu, nth < 64 ? nth : 64);
        gbs[r] = total / dt / 1e9;
    }
    core_free_aligned(buf);
    return passes;
}

/* ---------------------------------------------------------------------- */
/* compute peaks */

struct peak_job {
    double (*fn)(double);
    double g[64];
};

static void peak_run(void *arg, int ith, int nth) {
    (void)nth;
    struct peak_job *j = arg;
    double g = j->fn(0.2);
    if (ith < 64) j->g[ith] = g;
}

double bench_peak_all(struct pool *pool, double (*fn)(double)) {
    struct peak_job j = {.fn = fn};
    int nth = pool_size(pool) < 64 ? pool_size(pool) : 64;
    double best = 0.0;
    for (int r = 0; r < 3; r++) {
        pool_run(pool, peak_run, &j);
        double s = 0.0;
        for (int i = 0; i < nth; i++) s += j.g[i];
        if (s > best) best = s;
    }
    return best;
}
