/*
 * unit_hash.c - core/hash.c: FNV-1a against published vectors, the id
 * index against a linear scan (random keys, growth, duplicates, empty and
 * binary keys), and an out-of-memory walk through growth.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"
#include "core/hash.h"

/* keys of the entries, owned by the test */
struct keys {
    char (*k)[24];
    size_t *len;
    uint32_t n;
};

static void key_of(const void *ctx, uint32_t id, const void **key, size_t *len) {
    const struct keys *ks = ctx;
    assert_true(id < ks->n);
    *key = ks->k[id];
    *len = ks->len[id];
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static void test_fnv1a_vectors(void **state) {
    (void)state;
    /* the FNV authors' test vectors for 64-bit FNV-1a */
    assert_true(hash_fnv1a("", 0) == 0xcbf29ce484222325ull);
    assert_true(hash_fnv1a("a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(hash_fnv1a("foobar", 6) == 0x85944171f73967e8ull);
}

/* Random binary keys (some empty, many sharing prefixes), added one by one
 * from a tiny start so the table grows many times; every find agrees with
 * a linear scan, and re-adding any key reports its first id. */
static void test_index_vs_scan(void **state) {
    (void)state;
    enum { N = 5000 };
    struct keys ks = {calloc(N, 24), calloc(N, sizeof(size_t)), 0};
    struct hash_index ix;
    assert_int_equal(hash_index_init(&ix, 0), ANVIL_OK);
    uint32_t *first = calloc(N, sizeof(uint32_t)); /* id of the first equal key */
    for (uint32_t i = 0; i < N; i++) {
        size_t len = rnd() % 5 == 0 ? rnd() % 3 : rnd() % 24;
        for (size_t j = 0; j < len; j++) ks.k[i][j] = (char)(rnd() % 4); /* small alphabet: many duplicates */
        ks.len[i] = len;
        first[i] = i;
        for (uint32_t j = 0; j < i; j++)
            if (ks.len[j] == len && !memcmp(ks.k[j], ks.k[i], len)) {
                first[i] = first[j];
                break;
            }
        ks.n = i + 1;
        int64_t dup;
        assert_int_equal(hash_index_add(&ix, i, ks.k[i], len, key_of, &ks, &dup), ANVIL_OK);
        assert_int_equal(dup, first[i] == i ? -1 : (int64_t)first[i]);
    }
    uint32_t distinct = 0;
    for (uint32_t i = 0; i < N; i++) {
        distinct += first[i] == i;
        assert_int_equal(hash_index_find(&ix, ks.k[i], ks.len[i], key_of, &ks), first[i]);
    }
    assert_int_equal(ix.n, distinct);
    assert_true((uint64_t)ix.n * 2 <= (uint64_t)ix.mask + 1); /* at most half full */
    /* a key that was never added */
    char absent[25] = "this key is not there!!";
    assert_int_equal(hash_index_find(&ix, absent, 24, key_of, &ks), -1);
    hash_index_free(&ix);
    hash_index_free(&ix); /* harmless */
    assert_int_equal(hash_index_find(&ix, "x", 1, key_of, &ks), -1);
    free(ks.k);
    free(ks.len);
    free(first);
}

/* Every allocation of a growing index fails once in turn: the add reports
 * ANVIL_ERR_NOMEM, the index keeps what it had, and nothing leaks. */
static void test_index_oom(void **state) {
    (void)state;
    enum { N = 200 };
    struct keys ks = {calloc(N, 24), calloc(N, sizeof(size_t)), N};
    for (uint32_t i = 0; i < N; i++) ks.len[i] = (size_t)snprintf(ks.k[i], 24, "key-%u", i);
    int64_t live0 = core_alloc_live();
    int n_failed = 0;
    for (uint64_t k = 1; k < 64; k++) {
        struct hash_index ix;
        core_alloc_fail_at(k);
        anvil_status st = hash_index_init(&ix, 0);
        uint32_t added = 0;
        for (uint32_t i = 0; st == ANVIL_OK && i < N; i++) {
            st = hash_index_add(&ix, i, ks.k[i], ks.len[i], key_of, &ks, NULL);
            if (st == ANVIL_OK) added++;
        }
        core_alloc_fail_at(0);
        if (st != ANVIL_OK) {
            assert_int_equal(st, ANVIL_ERR_NOMEM);
            n_failed++;
        }
        /* what was added before the failure is still found */
        for (uint32_t i = 0; i < added; i++)
            assert_int_equal(hash_index_find(&ix, ks.k[i], ks.len[i], key_of, &ks), i);
        hash_index_free(&ix);
        assert_int_equal(core_alloc_live(), live0);
    }
    assert_true(n_failed >= 5); /* init and four growths at least */
    free(ks.k);
    free(ks.len);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fnv1a_vectors),
        cmocka_unit_test(test_index_vs_scan),
        cmocka_unit_test(test_index_oom),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
