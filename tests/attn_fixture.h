/*
 * attn_fixture.h - what the attention tests (unit_attn.c, softmax;
 * unit_attn_hp1.c, HP1) share: the LCG of the golden generators, the
 * variant names, a one-layer cache and a sequence filled with K/V rows.
 * cmocka-based: failures end the running test.
 */
#ifndef ANVIL_TESTS_ATTN_FIXTURE_H
#define ANVIL_TESTS_ATTN_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

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

/* Fails unless a[0, n) and b[0, n) are bit-identical; names the first
 * difference. */
void expect_same(const float *a, const float *b, size_t n, const char *what);

#endif
