/*
 * attn_fixture.h - what the attention tests (unit_attn.c, softmax;
 * unit_attn_hp1.c, HP1) share: the LCG of the golden generators, the
 * variant names, a one-layer cache and a sequence filled with K/V rows.
 * cmocka-based: failures end the running test.
 */
#ifndef ANVIL_TESTS_ATTN_FIXTURE_H
#define ANVIL_TESTS_ATTN_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "kv/kv_cache.h"

/* Uniform in [-1, 1): the generator of tests/gen/gen_attn_golden.py and
 * gen_hp1_golden.py (x = x * 1664525 + 1013904223, top 24 bits). */
static inline float lcg_uniform(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return (float)(*x >> 8) * 0x1p-23f - 1.0f;
}

/* The kernel families, in the order the tests walk them. */
#define N_VARIANTS 3
extern const char *const VARIANTS[N_VARIANTS];

/* Block size of make_kv (16 unless a test sets it). */
extern int g_block;

/* A one-layer cache for (type, head_dim, heads, kv heads), n_seq
 * sequences of n_ctx positions each (plus 2 spare blocks), a plan for up
 * to n_threads. Fails the test when kv_init does. */
struct kv_cache *make_kv(int type, int hd, int n_head, int n_head_kv, int n_ctx, int n_seq,
                         int n_threads);

/* Append n_kv tokens to seq (layer 0), 16 at a time: K and V rows from
 * k_in and v_in ((n_kv, n_head_kv * hd) each), or LCG values from *x
 * when NULL (all K first, then all V). With dummy >= 0, 16 positions of
 * that sequence follow every 16 of seq while the pool has room, so the
 * block table is not contiguous. */
void fill_seq(struct kv_cache *kv, int seq, int dummy, int n_kv, int n_head_kv, int hd,
              uint32_t *x, const float *k_in, const float *v_in);

/* The common start of a test fixture: *kv, a cache of n_kv + 16
 * positions (two sequences when dummy), sequence 0 filled with n_kv LCG
 * keys and values (seeded with seed; interleaved with sequence 1 when
 * dummy), then *q, n_rows query rows (n_rows, n_head, hd) of 4 * LCG
 * values, and *want and *got of the same size. Returns the LCG state
 * after the queries, for the test's own draws. */
uint32_t fixture_start(struct kv_cache **kv, int type, int hd, int n_head, int n_head_kv,
                       int n_kv, int n_rows, uint32_t seed, bool dummy, float **q, float **want,
                       float **got);

/* The task of kv head h over rows [r0, r0 + n_rows) of such a fixture
 * (query rows (n_rows_all, n_head, hd) at q, the last at position
 * n_kv - 1; out of the same layout), scale 1/sqrt(hd). */
struct kn_attn_task fixture_attn_task(const struct kv_cache *kv, int n_head, int hd, int group,
                                      const float *q, int n_kv, int n_rows_all, int h, int r0,
                                      int n_rows, float *out, int window);

/* Fails unless a[0, n) and b[0, n) are bit-identical; names the first
 * difference. */
void expect_same(const float *a, const float *b, size_t n, const char *what);

#endif
