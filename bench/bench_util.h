/*
 * bench_util.h - what every benchmark of `anvil bench` shares: the clocks,
 * statistics over repeated timings, the stamp of each record (commit, CPU
 * flags, peak RSS), JSON-lines output and the machine's memory read
 * bandwidth (the ceiling the kernel and attention numbers are read
 * against).
 *
 * It does not decide what a benchmark measures, how many repetitions it
 * runs or how it prints its table; and it never checks correctness (each
 * bench compares its kernels with the reference before timing them).
 */
#ifndef ANVIL_BENCH_UTIL_H
#define ANVIL_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct pool;

/* ---------------------------------------------------------------------- */
/* clocks */

/* Monotonic wall clock, seconds. */
double bench_wall_s(void);
/* CPU time of the calling thread, seconds: on a machine shared with other
 * jobs it leaves out the time the thread was descheduled. */
double bench_thread_cpu_s(void);

/* ---------------------------------------------------------------------- */
/* statistics */

/* Mean and sample standard deviation (n - 1 in the denominator; 0 when
 * n == 1) of x[0..n), n >= 1. */
void bench_mean_sd(const double *x, int n, double *mean, double *sd);

/* The q-quantile (0 <= q <= 1) of x[0..n), interpolating linearly between
 * the two nearest order statistics (numpy's default), so q = 0.5 is the
 * median. Sorts x in place. 0 when n == 0. */
double bench_percentile(double *x, int n, double q);

/* Largest of x[0..n); 0 when n == 0 (the values are times or rates). */
double bench_max(const double *x, int n);

/* ---------------------------------------------------------------------- */
/* what every record carries */

/* The commit the binary was built from ("abc1234", "-dirty" appended when
 * the tree had changes; "unknown" outside git), stamped in by the Makefile. */
const char *bench_commit(void);
/* The SIMD features this CPU offers, space-separated ("avx2 fma f16c"). */
const char *bench_cpu_flags(void);
/* Peak resident set size of this process so far, MB. */
double bench_peak_rss_mb(void);

/* ---------------------------------------------------------------------- */
/* JSON lines: one object per record, written to up to two streams at once
 * (stdout for --json, the data file of a chart for --png; either may be
 * NULL). Keys and strings are escaped; a non-finite number is null. */

struct bench_json {
    FILE *out[2];
    bool first;
};

void bench_json_begin(struct bench_json *j, FILE *a, FILE *b);
void bench_json_str(struct bench_json *j, const char *key, const char *v);
void bench_json_int(struct bench_json *j, const char *key, long long v);
/* v with `decimals` digits after the point (printf %.*f). */
void bench_json_num(struct bench_json *j, const char *key, double v, int decimals);
void bench_json_bool(struct bench_json *j, const char *key, bool v);
/* A list of numbers, each with `decimals` digits after the point. */
void bench_json_nums(struct bench_json *j, const char *key, const double *v, int n, int decimals);
/* A list of `rows` lists of `cols` integers, v row-major (rows, cols). */
void bench_json_int_rows(struct bench_json *j, const char *key, const int32_t *v, int rows,
                         int cols);
/* Closes the object with a newline and flushes. */
void bench_json_end(struct bench_json *j);

/* ---------------------------------------------------------------------- */
/* memory read bandwidth */

/* Each thread of pool streams its share of a fresh buffer of `bytes`
 * (make it far larger than the caches). One untimed pass first (page-in,
 * clocks up), then `passes` timed ones: gbs[i] is pass i's GB/s. With
 * cpu_time, a pass costs the slowest thread's CPU time instead of the
 * wall time. Returns the number of passes timed, 0 when out of memory. */
int bench_read_bw(struct pool *pool, size_t bytes, int passes, bool cpu_time, double *gbs);

/* A peak loop of kn_ops (int8_peak, f32_peak: GOP/s or GFLOP/s of one
 * thread over `seconds`) run by all the pool's threads at once, each
 * timing its own CPU clock (a thread that shares its core's ports reads
 * less), summed; the best of three. */
double bench_peak_all(struct pool *pool, double (*fn)(double));

#endif
