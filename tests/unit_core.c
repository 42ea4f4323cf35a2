/*
 * unit_core.c - core utilities: half/bfloat16 conversions, thread pool,
 * allocation counters and fault injection.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"
#include "core/pool.h"
#include "kernels/blocks.h"

static void test_f16_roundtrip_all(void **state) {
    (void)state;
    /* every finite half converts to float and back unchanged */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue; /* inf/nan */
        float f = kn_f16_to_f32((kn_f16)h);
        assert_int_equal(kn_f32_to_f16(f), h);
    }
}

static void test_f16_rounding(void **state) {
    (void)state;
    assert_int_equal(kn_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(kn_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(kn_f32_to_f16(65520.0f), 0x7c00);  /* ties to even -> inf */
    assert_int_equal(kn_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(kn_f32_to_f16(-2.0f), 0xc000);
    /* 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1.0) */
    assert_int_equal(kn_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(kn_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(kn_f32_to_f16(0x1p-24f), 0x0001);  /* smallest subnormal */
    assert_int_equal(kn_f32_to_f16(0x1p-26f), 0x0000);
    assert_true(isnan(kn_f16_to_f32(kn_f32_to_f16(NAN))));
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(kn_f32_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is a tie: rounds to even (1.0); a hair above rounds up */
    assert_int_equal(kn_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(kn_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_true(kn_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(isnan(kn_bf16_to_f32(kn_f32_to_bf16(NAN))));
}

struct sum_job {
    int n;
    _Atomic long total;
    int hits[8];
};

static void sum_fn(void *arg, int ith, int nth) {
    struct sum_job *j = arg;
    int r0, r1;
    pool_split(j->n, ith, nth, 1, &r0, &r1);
    long s = 0;
    for (int i = r0; i < r1; i++) s += i;
    j->total += s;
    j->hits[ith]++;
}

static void test_pool_run(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        struct pool *p = NULL;
        assert_int_equal(pool_create(nt, &p), ANVIL_OK);
        for (int rep = 0; rep < 200; rep++) {
            struct sum_job j = {.n = 1000 + rep};
            pool_run(p, sum_fn, &j);
            long n = j.n;
            assert_int_equal(j.total, n * (n - 1) / 2);
            for (int t = 0; t < nt; t++) assert_int_equal(j.hits[t], 1);
        }
        pool_free(p);
    }
}

/* Phases separated by barriers: every thread adds to a phase counter, and
 * after the barrier every thread must see the whole phase's sum. With 8
 * threads on a machine of 2 cores most waits end asleep (the futex path),
 * with 1 or 2 most end spinning; both must keep the phases apart. */
struct phase_job {
    struct pool *pool;
    int n_phases;
    _Atomic int count[64];
    _Atomic int bad;
};

static void phase_fn(void *arg, int ith, int nth) {
    struct phase_job *j = arg;
    for (int ph = 0; ph < j->n_phases; ph++) {
        atomic_fetch_add(&j->count[ph], 1);
        if (ith == ph % nth) /* one thread dawdles: the others wait long */
            for (volatile int k = 0; k < 20000; k++) {
            }
        pool_barrier(j->pool);
        if (atomic_load(&j->count[ph]) != nth) atomic_fetch_add(&j->bad, 1);
    }
}

static void test_pool_barrier_oversubscribed(void **state) {
    (void)state;
    for (int nt = 1; nt <= 8; nt *= 2) {
        struct pool *p = NULL;
        static struct phase_job j;
        assert_int_equal(pool_create(nt, &p), ANVIL_OK);
        for (int rep = 0; rep < 20; rep++) {
            memset(&j, 0, sizeof(j));
            j.pool = p;
            j.n_phases = 64;
            pool_run(p, phase_fn, &j);
            assert_int_equal(atomic_load(&j.bad), 0);
            for (int ph = 0; ph < 64; ph++) assert_int_equal(atomic_load(&j.count[ph]), nt);
        }
        pool_free(p);
    }
}

static void test_pool_split(void **state) {
    (void)state;
    for (int n = 0; n < 200; n += 7)
        for (int nth = 1; nth <= 5; nth++)
            for (int align = 1; align <= 16; align *= 4) {
                int prev = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int r0, r1;
                    pool_split(n, ith, nth, align, &r0, &r1);
                    assert_int_equal(r0, prev);
                    assert_true(r1 >= r0);
                    if (r1 < n) assert_int_equal(r1 % align, 0);
                    prev = r1;
                }
                assert_int_equal(prev, n);
            }
}

static void test_alloc_fault_injection(void **state) {
    (void)state;
    int64_t live = core_alloc_live();
    core_alloc_fail_at(2);
    void *a = core_malloc(16);
    void *b = core_malloc(16);
    void *c = core_malloc(16);
    assert_non_null(a);
    assert_null(b);
    assert_non_null(c);
    core_alloc_fail_at(0);
    core_free(a);
    core_free(c);
    assert_int_equal(core_alloc_live(), live);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_pool_run),
        cmocka_unit_test(test_pool_split),
        cmocka_unit_test(test_pool_barrier_oversubscribed),
        cmocka_unit_test(test_alloc_fault_injection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
