/*
 * unit_bench.c - the benchmarks' shared helper (bench/bench_util.c):
 * statistics against values numpy gives for the same samples, the JSON
 * lines (escaping, null for non-finite numbers, the same bytes on both
 * streams), and the read-bandwidth probe's bookkeeping.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "bench_util.h"
#include "core/pool.h"

static void test_mean_sd(void **state) {
    (void)state;
    double x[] = {1, 2, 3, 4}, mean, sd;
    bench_mean_sd(x, 4, &mean, &sd);
    /* numpy: x.mean() = 2.5, x.std(ddof=1) = sqrt(5/3) */
    assert_true(mean == 2.5);
    assert_true(fabs(sd - sqrt(5.0 / 3.0)) < 1e-15);
    bench_mean_sd(x + 2, 1, &mean, &sd);
    assert_true(mean == 3.0 && sd == 0.0);
}

static void test_percentile(void **state) {
    (void)state;
    /* numpy.percentile(x, q) with the default linear method */
    double x[] = {5, 1, 4, 2, 3};
    assert_true(bench_percentile(x, 5, 0.5) == 3.0);
    assert_true(x[0] == 1 && x[4] == 5); /* sorted in place */
    assert_true(fabs(bench_percentile(x, 5, 0.1) - 1.4) < 1e-12);
    assert_true(fabs(bench_percentile(x, 5, 0.99) - 4.96) < 1e-12);
    assert_true(bench_percentile(x, 5, 0.0) == 1.0);
    assert_true(bench_percentile(x, 5, 1.0) == 5.0);
    double y[] = {7, 3};
    assert_true(bench_percentile(y, 2, 0.25) == 4.0);
    assert_true(bench_percentile(y, 1, 0.9) == 3.0); /* first n only */
    assert_true(bench_percentile(NULL, 0, 0.5) == 0.0);
    double z[] = {0.5, 2.5, 1.5};
    assert_true(bench_max(z, 3) == 2.5);
    assert_true(bench_max(z, 0) == 0.0);
}

/* The JSON text written by one record, read back from a memory stream. */
static char *record(FILE *second) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    struct bench_json j;
    bench_json_begin(&j, f, second);
    bench_json_str(&j, "name", "a \"quoted\" back\\slash\nnew\x01line");
    bench_json_int(&j, "n", -42);
    bench_json_num(&j, "x", 2.0 / 3.0, 3);
    bench_json_num(&j, "inf", INFINITY, 2);
    bench_json_num(&j, "nan", NAN, 2);
    bench_json_bool(&j, "yes", true);
    double v[] = {1.5, NAN, 0.25};
    bench_json_nums(&j, "v", v, 3, 2);
    bench_json_nums(&j, "empty", v, 0, 2);
    int32_t m[] = {1, 2, 3, 4, 5, 6};
    bench_json_int_rows(&j, "rows", m, 2, 3);
    bench_json_end(&j);
    fclose(f);
    return buf;
}

static void test_json(void **state) {
    (void)state;
    const char *want =
        "{\"name\": \"a \\\"quoted\\\" back\\\\slash\\u000anew\\u0001line\", \"n\": -42, "
        "\"x\": 0.667, \"inf\": null, \"nan\": null, \"yes\": true, \"v\": [1.50, null, 0.25], "
        "\"empty\": [], \"rows\": [[1, 2, 3], [4, 5, 6]]}\n";
    char *one = record(NULL);
    assert_string_equal(one, want);
    /* both streams get the same bytes */
    char *buf = NULL;
    size_t len = 0;
    FILE *second = open_memstream(&buf, &len);
    char *first = record(second);
    fclose(second);
    assert_string_equal(first, want);
    assert_string_equal(buf, want);
    free(one);
    free(first);
    free(buf);
    /* no stream at all is allowed (a bench without --json or --png) */
    struct bench_json j;
    bench_json_begin(&j, NULL, NULL);
    bench_json_int(&j, "n", 1);
    bench_json_end(&j);
}

static void test_stamps(void **state) {
    (void)state;
    assert_true(strlen(bench_commit()) > 0);
    assert_true(strlen(bench_cpu_flags()) > 0);
    assert_true(bench_peak_rss_mb() > 0.0);
}

static void test_read_bw(void **state) {
    (void)state;
    struct pool *p = NULL;
    assert_int_equal(pool_create(2, &p), 0);
    double gbs[3] = {-1, -1, -1};
    assert_int_equal(bench_read_bw(p, (size_t)8 << 20, 2, false, gbs), 2);
    assert_true(isfinite(gbs[0]) && gbs[0] > 0 && isfinite(gbs[1]) && gbs[1] > 0);
    assert_true(gbs[2] == -1); /* only the passes asked for */
    assert_int_equal(bench_read_bw(p, (size_t)8 << 20, 1, true, gbs), 1);
    assert_true(isfinite(gbs[0]) && gbs[0] > 0);
    /* nothing to time: fewer bytes than a page per thread, or no pass */
    assert_int_equal(bench_read_bw(p, 4096, 1, false, gbs), 0);
    assert_int_equal(bench_read_bw(p, (size_t)1 << 20, 0, false, gbs), 0);
    pool_free(p);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mean_sd),
        cmocka_unit_test(test_percentile),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_stamps),
        cmocka_unit_test(test_read_bw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
