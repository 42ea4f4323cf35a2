/*
 * unit_resp_store.c - src/server/resp_store.c: put/get/delete, replacing
 * an id, the bound on the number of entries and on their bytes (oldest
 * evicted first, an entry over the byte bound refused without evicting),
 * the expiry (get and delete of an expired entry fail, put drops expired
 * entries first), and the store against a plain model under a random
 * sequence of operations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/resp_store.h"

static void test_put_get_delete(void **state) {
    (void)state;
    struct resp_store *st = resp_store_new(4, 1000, 10.0);
    assert_non_null(st);
    assert_true(resp_store_put(st, "resp_a", "{\"id\":\"resp_a\"}", "[1]", 0.0));
    char *r = NULL, *c = NULL;
    assert_true(resp_store_get(st, "resp_a", 1.0, &r, &c));
    assert_string_equal(r, "{\"id\":\"resp_a\"}");
    assert_string_equal(c, "[1]");
    free(r);
    free(c);
    assert_false(resp_store_get(st, "resp_b", 1.0, &r, &c));
    assert_null(r);
    assert_null(c);
    /* replace */
    assert_true(resp_store_put(st, "resp_a", "x", "y", 2.0));
    assert_int_equal(resp_store_count(st), 1);
    assert_int_equal(resp_store_bytes(st), strlen("resp_a") + 2);
    assert_true(resp_store_get(st, "resp_a", 3.0, &r, NULL));
    assert_string_equal(r, "x");
    free(r);
    assert_true(resp_store_delete(st, "resp_a", 3.0));
    assert_false(resp_store_delete(st, "resp_a", 3.0));
    assert_false(resp_store_get(st, "resp_a", 3.0, NULL, NULL));
    assert_int_equal(resp_store_count(st), 0);
    assert_int_equal(resp_store_bytes(st), 0);
    /* bad bounds */
    assert_null(resp_store_new(0, 10, 1.0));
    assert_null(resp_store_new(1, 0, 1.0));
    assert_null(resp_store_new(1, 10, 0.0));
    resp_store_free(st);
    resp_store_free(NULL);
}

static void test_count_bound(void **state) {
    (void)state;
    struct resp_store *st = resp_store_new(3, 1 << 20, 100.0);
    char id[16];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "r%d", i);
        assert_true(resp_store_put(st, id, "a", "b", (double)i));
        assert_true(resp_store_count(st) <= 3);
    }
    assert_int_equal(resp_store_count(st), 3);
    /* the oldest two went */
    assert_false(resp_store_get(st, "r0", 5.0, NULL, NULL));
    assert_false(resp_store_get(st, "r1", 5.0, NULL, NULL));
    for (int i = 2; i < 5; i++) {
        snprintf(id, sizeof(id), "r%d", i);
        assert_true(resp_store_get(st, id, 5.0, NULL, NULL));
    }
    resp_store_free(st);
}

static void test_byte_bound(void **state) {
    (void)state;
    /* each entry: id 2 + 8 + 0 = 10 bytes; 35 holds three */
    struct resp_store *st = resp_store_new(100, 35, 100.0);
    assert_true(resp_store_put(st, "r0", "12345678", "", 0.0));
    assert_true(resp_store_put(st, "r1", "12345678", "", 0.0));
    assert_true(resp_store_put(st, "r2", "12345678", "", 0.0));
    assert_int_equal(resp_store_bytes(st), 30);
    assert_true(resp_store_put(st, "r3", "12345678", "", 0.0));
    assert_int_equal(resp_store_count(st), 3);
    assert_true(resp_store_bytes(st) <= 35);
    assert_false(resp_store_get(st, "r0", 0.0, NULL, NULL));
    /* one that alone is over the bound: refused, nothing evicted */
    char big[64];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_false(resp_store_put(st, "rb", big, "", 0.0));
    assert_int_equal(resp_store_count(st), 3);
    /* a large one evicts as many as it needs */
    assert_true(resp_store_put(st, "rl", "1234567890123456789012345", "", 0.0));
    assert_int_equal(resp_store_count(st), 1);
    assert_true(resp_store_get(st, "rl", 0.0, NULL, NULL));
    resp_store_free(st);
}

static void test_expiry(void **state) {
    (void)state;
    struct resp_store *st = resp_store_new(10, 1000, 5.0);
    assert_true(resp_store_put(st, "old", "a", "b", 0.0));
    assert_true(resp_store_put(st, "new", "a", "b", 3.0));
    assert_true(resp_store_get(st, "old", 4.999, NULL, NULL));
    assert_false(resp_store_get(st, "old", 5.0, NULL, NULL)); /* expired: dropped */
    assert_int_equal(resp_store_count(st), 1);
    assert_false(resp_store_delete(st, "new", 8.0)); /* expired */
    assert_int_equal(resp_store_count(st), 0);
    /* put drops expired entries before it counts */
    struct resp_store *s2 = resp_store_new(2, 1000, 5.0);
    assert_true(resp_store_put(s2, "a", "", "", 0.0));
    assert_true(resp_store_put(s2, "b", "", "", 1.0));
    assert_true(resp_store_put(s2, "c", "", "", 5.5)); /* a expired: b stays */
    assert_true(resp_store_get(s2, "b", 5.5, NULL, NULL));
    assert_true(resp_store_get(s2, "c", 5.5, NULL, NULL));
    resp_store_free(s2);
    resp_store_free(st);
}

/* The store against a plain model: an array of (id, expires, order). */
struct model_e {
    int live;
    double expires;
    long order;
    size_t bytes;
};

static void test_random_vs_model(void **state) {
    (void)state;
    enum { N_ID = 12, MAX_N = 5, MAX_B = 60 };
    const double ttl = 7.0;
    struct resp_store *st = resp_store_new(MAX_N, MAX_B, ttl);
    struct model_e m[N_ID];
    memset(m, 0, sizeof(m));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    long order = 0;
    double now = 0;
    for (int step = 0; step < 4000; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int id = (int)(x % N_ID), op = (int)((x >> 8) % 3);
        size_t len = (size_t)((x >> 16) % 20);
        now += (double)((x >> 24) % 3) * 0.5;
        char key[8], val[32];
        snprintf(key, sizeof(key), "k%02d", id);
        memset(val, 'v', len);
        val[len] = '\0';
        if (op == 0) {
            size_t bytes = strlen(key) + len;
            bool ok = resp_store_put(st, key, val, "", now);
            assert_true(ok == (bytes <= MAX_B));
            if (!ok) continue;
            m[id].live = 0;
            for (int i = 0; i < N_ID; i++)
                if (m[i].live && m[i].expires <= now) m[i].live = 0;
            for (;;) {
                int n = 0, oldest = -1;
                size_t b = 0;
                for (int i = 0; i < N_ID; i++)
                    if (m[i].live) {
                        n++;
                        b += m[i].bytes;
                        if (oldest < 0 || m[i].order < m[oldest].order) oldest = i;
                    }
                if (n == 0 || (n < MAX_N && b + bytes <= MAX_B)) break;
                m[oldest].live = 0;
            }
            m[id] = (struct model_e){1, now + ttl, order++, bytes};
        } else if (op == 1) {
            char *r = NULL;
            bool ok = resp_store_get(st, key, now, &r, NULL);
            bool want = m[id].live && m[id].expires > now;
            assert_true(ok == want);
            if (ok) assert_int_equal(strlen(r), m[id].bytes - strlen(key));
            free(r);
            if (!want) m[id].live = 0;
        } else {
            bool ok = resp_store_delete(st, key, now);
            assert_true(ok == (m[id].live && m[id].expires > now));
            m[id].live = 0;
        }
        assert_true(resp_store_count(st) <= MAX_N);
        assert_true(resp_store_bytes(st) <= MAX_B);
    }
    resp_store_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_delete),
        cmocka_unit_test(test_count_bound),
        cmocka_unit_test(test_byte_bound),
        cmocka_unit_test(test_expiry),
        cmocka_unit_test(test_random_vs_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
