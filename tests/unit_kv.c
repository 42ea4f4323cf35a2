/*
 * unit_kv.c - the paged KV cache (src/kv/kv_cache.c): block accounting,
 * KV_FULL behaviour (all or nothing), prefix sharing, copy-on-write, LRU
 * eviction, prefaulting ahead of use, and a long random run of append/truncate/free/fork/match
 * checked against a shadow model (kv_check after every operation, and the
 * stored K/V of every live sequence compared with what was written).
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

#include "core/core.h"
#include "attn/attn.h"
#include "kernels/blocks.h"
#include "kv/kv_cache.h"

enum { HD = 32, NKV = 2, NL = 2 };

static struct kv_cache *make(int n_blocks, int n_seq, int n_ctx, int type, bool prefix) {
    struct kv_params p = {
        .n_layer = NL,
        .n_head = 2 * NKV,
        .n_head_kv = NKV,
        .head_dim = HD,
        .type = type,
        .block_size = 16,
        .n_blocks = n_blocks,
        .n_seq_max = n_seq,
        .n_ctx = n_ctx,
        .prefix_cache = prefix,
    };
    struct kv_cache *kv = NULL;
    char err[256];
    if (kv_init(&p, &kv, err, sizeof(err)) != ANVIL_OK) fail_msg("kv_init: %s", err);
    return kv;
}

static void check(const struct kv_cache *kv) {
    char err[256];
    anvil_status st = kv_check(kv, err, sizeof(err));
    if (st != ANVIL_OK) fail_msg("kv_check: %s", err);
}

/* The value stored for (layer, token id, position, head, dim, K or V): a
 * multiple of 1/8 in [-6, 6], exact in f16. */
static float val(int layer, int tok, int pos, int h, int d, int is_v) {
    int k = (tok * 31 + pos * 7 + h * 3 + d * 5 + layer * 11 + is_v * 13) % 97;
    return (float)(k - 48) / 8.0f;
}

/* reserve + write + commit of tokens[0, n) at the end of seq */
static anvil_status append(struct kv_cache *kv, int seq, const int32_t *tokens, int n) {
    anvil_status st = kv_seq_reserve(kv, seq, n);
    if (st != ANVIL_OK) return st;
    int pos = kv_seq_len(kv, seq);
    float k[NKV * HD], v[NKV * HD];
    for (int t = 0; t < n; t++) {
        for (int l = 0; l < NL; l++) {
            for (int h = 0; h < NKV; h++)
                for (int d = 0; d < HD; d++) {
                    k[h * HD + d] = val(l, tokens[t], pos + t, h, d, 0);
                    v[h * HD + d] = val(l, tokens[t], pos + t, h, d, 1);
                }
            kv_write(kv, l, seq, pos + t, 1, k, 0, v, 0);
        }
    }
    return kv_seq_commit(kv, seq, n, tokens);
}

/* Stored K/V of seq equal the written values for its tokens. */
static void expect_data(const struct kv_cache *kv, int seq, const int32_t *tokens, int n) {
    assert_int_equal(kv_seq_len(kv, seq), n);
    const struct kn_kv_layout *L = kv_layout(kv);
    for (int l = 0; l < NL; l++)
        for (int t = 0; t < n; t++)
            for (int h = 0; h < NKV; h++)
                for (int d = 0; d < HD; d += 7)
                    for (int is_v = 0; is_v < 2; is_v++) {
                        float got = kn_kv_get(L, kv_layer_base(kv, l), kv_seq_blocks(kv, seq), h,
                                              t, d, is_v);
                        float want = val(l, tokens[t], t, h, d, is_v);
                        if (got != want)
                            fail_msg("seq %d layer %d pos %d h %d d %d %c: got %g want %g", seq, l,
                                     t, h, d, is_v ? 'V' : 'K', got, want);
                    }
}

static void stats(const struct kv_cache *kv, struct kv_stats *s) { kv_get_stats(kv, s); }

/* ---------------------------------------------------------------------- */

static void test_init_params(void **state) {
    (void)state;
    struct kv_params p = {.n_layer = 30, .n_head = 9, .n_head_kv = 3, .head_dim = 64,
                          .n_seq_max = 4, .n_ctx = 1024, .mem_bytes = 64u << 20};
    /* SmolLM2: 30 layers * 3 heads * 4 KiB tiles = 360 KiB per 16 tokens */
    assert_int_equal(kv_block_bytes(&p), 30 * 3 * 4096);
    struct kv_cache *kv = NULL;
    char err[256];
    assert_int_equal(kv_init(&p, &kv, err, sizeof(err)), ANVIL_OK);
    struct kv_stats s;
    stats(kv, &s);
    assert_int_equal(s.n_blocks, (64u << 20) / (30 * 3 * 4096));
    assert_int_equal(s.n_free, s.n_blocks);
    assert_int_equal(s.block_size, 16);
    assert_true(s.total_bytes >= s.pool_bytes && s.total_bytes < s.pool_bytes + (4u << 20));
    check(kv);
    kv_free(kv);
    kv_free(NULL);
    /* Q8_0 roughly halves the block */
    p.type = ANVIL_TYPE_Q8_0;
    size_t q8 = kv_block_bytes(&p);
    assert_true(q8 * 100 < 30 * 3 * 4096 * 55);
    /* bad geometry is refused, *out untouched */
    struct kv_cache *none = (struct kv_cache *)&p;
    p.head_dim = 48;
    assert_int_equal(kv_init(&p, &none, err, sizeof(err)), ANVIL_ERR_UNSUPPORTED);
    assert_ptr_equal(none, (struct kv_cache *)&p);
    p.head_dim = 64;
    p.n_head = 10;
    assert_int_equal(kv_init(&p, &none, err, sizeof(err)), ANVIL_ERR_INVALID);
    p.n_head = 9;
    p.block_size = 24;
    assert_int_equal(kv_init(&p, &none, err, sizeof(err)), ANVIL_ERR_UNSUPPORTED);
    p.block_size = 32;
    p.mem_bytes = 1000; /* not even one block */
    assert_int_equal(kv_init(&p, &none, err, sizeof(err)), ANVIL_ERR_INVALID);
    p.type = ANVIL_TYPE_Q4_0;
    p.mem_bytes = 1 << 20;
    assert_int_equal(kv_init(&p, &none, err, sizeof(err)), ANVIL_ERR_UNSUPPORTED);
}

static void test_init_oom(void **state) {
    (void)state;
    int64_t live = core_alloc_live();
    struct kv_params p = {.n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 32,
                          .n_seq_max = 4, .n_ctx = 64, .n_blocks = 8};
    struct kv_cache *kv = NULL;
    core_alloc_fail_at(1);
    assert_int_equal(kv_init(&p, &kv, NULL, 0), ANVIL_ERR_NOMEM);
    core_alloc_fail_at(0);
    assert_null(kv);
    assert_int_equal(core_alloc_live(), live);
}

static void test_append_truncate_free(void **state) {
    (void)state;
    struct kv_cache *kv = make(8, 3, 100, ANVIL_TYPE_F16, false);
    int32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = 1000 + i;
    assert_int_equal(append(kv, 0, tok, 1), ANVIL_OK);
    assert_int_equal(append(kv, 0, tok + 1, 20), ANVIL_OK);
    struct kv_stats s;
    stats(kv, &s);
    assert_int_equal(s.n_used, 2);
    expect_data(kv, 0, tok, 21);
    check(kv);
    assert_int_equal(kv_seq_truncate(kv, 0, 16), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_used, 1);
    assert_int_equal(kv_seq_truncate(kv, 0, 17), ANVIL_ERR_INVALID); /* cannot grow */
    assert_int_equal(append(kv, 0, tok + 16, 5), ANVIL_OK);
    expect_data(kv, 0, tok, 21);
    /* past n_ctx is invalid, not "full" */
    assert_int_equal(kv_seq_reserve(kv, 0, 80), ANVIL_ERR_INVALID);
    assert_int_equal(kv_seq_blocks_needed(kv, 0, 80), -1);
    /* commit more than reserved */
    assert_int_equal(kv_seq_commit(kv, 0, 40, NULL), ANVIL_ERR_INVALID);
    /* a reservation given back by truncating to the length */
    assert_int_equal(kv_seq_reserve(kv, 0, 30), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_used, 4);
    check(kv);
    assert_int_equal(kv_seq_truncate(kv, 0, kv_seq_len(kv, 0)), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_used, 2);
    kv_seq_free(kv, 0);
    stats(kv, &s);
    assert_int_equal(s.n_free, 8);
    assert_int_equal(kv_seq_len(kv, 0), 0);
    assert_int_equal(kv_seq_reserve(kv, 3, 1), ANVIL_ERR_INVALID); /* bad seq id */
    assert_int_equal(kv_seq_reserve(kv, -1, 1), ANVIL_ERR_INVALID);
    check(kv);
    kv_free(kv);
}

/* A windowed cache: truncating back (speculative decoding's rollback) is
 * allowed while the new length's window is still held - always when the
 * sequence is shorter than the window, up to KV_WINDOW_SLACK back once
 * blocks have slid out - and refused, changing nothing, past that. */
static void test_window_truncate(void **state) {
    (void)state;
    enum { W = 48, N = 400 };
    struct kv_params p = {.n_layer = NL, .n_head = 2 * NKV, .n_head_kv = NKV, .head_dim = HD,
                          .type = ANVIL_TYPE_F16, .block_size = 16, .n_blocks = 64,
                          .n_seq_max = 2, .n_ctx = N, .window = W};
    struct kv_cache *kv = NULL;
    char err[256];
    if (kv_init(&p, &kv, err, sizeof(err)) != ANVIL_OK) fail_msg("kv_init: %s", err);
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = 7 + i;
    /* shorter than the window: every length back to 1 */
    assert_int_equal(append(kv, 0, tok, 20), ANVIL_OK);
    assert_int_equal(kv_seq_truncate(kv, 0, 20), ANVIL_OK);
    assert_int_equal(kv_seq_truncate(kv, 0, 12), ANVIL_OK);
    assert_int_equal(kv_seq_truncate(kv, 0, 1), ANVIL_OK);
    assert_int_equal(kv_seq_len(kv, 0), 1);
    check(kv);
    /* long: blocks below the window and slack are gone */
    assert_int_equal(append(kv, 0, tok + 1, 300), ANVIL_OK);
    assert_true(kv_seq_n_held(kv, 0) < 301 / 16);
    check(kv);
    assert_int_equal(kv_seq_truncate(kv, 0, 301 - KV_WINDOW_SLACK), ANVIL_OK);
    assert_int_equal(kv_seq_len(kv, 0), 301 - KV_WINDOW_SLACK);
    check(kv);
    /* refused past the held window; the sequence is unchanged */
    int32_t len = kv_seq_len(kv, 0), held = kv_seq_n_held(kv, 0);
    assert_int_equal(kv_seq_truncate(kv, 0, len - W - 2 * KV_WINDOW_SLACK), ANVIL_ERR_UNSUPPORTED);
    assert_int_equal(kv_seq_len(kv, 0), len);
    assert_int_equal(kv_seq_n_held(kv, 0), held);
    /* growing again works, and truncating to 0 frees everything */
    assert_int_equal(append(kv, 0, tok + len, 40), ANVIL_OK);
    check(kv);
    assert_int_equal(kv_seq_truncate(kv, 0, 0), ANVIL_OK);
    struct kv_stats s;
    stats(kv, &s);
    assert_int_equal(s.n_free, 64);
    check(kv);
    kv_free(kv);
}

static void test_kv_full(void **state) {
    (void)state;
    struct kv_cache *kv = make(5, 3, 200, ANVIL_TYPE_F16, false);
    int32_t tok[200];
    for (int i = 0; i < 200; i++) tok[i] = i;
    assert_int_equal(append(kv, 0, tok, 40), ANVIL_OK); /* 3 blocks */
    assert_int_equal(append(kv, 1, tok, 16), ANVIL_OK); /* 1 block */
    struct kv_stats before, after;
    stats(kv, &before);
    /* needs 2 more, 1 left: nothing changes */
    assert_int_equal(kv_seq_reserve(kv, 0, 40), ANVIL_ERR_KV_FULL);
    stats(kv, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    assert_int_equal(kv_seq_len(kv, 0), 40);
    check(kv);
    /* batch reservation: the first fits, the second does not -> neither */
    int32_t seqs[2] = {1, 2}, ns[2] = {10, 40};
    assert_int_equal(kv_reserve(kv, 2, seqs, ns), ANVIL_ERR_KV_FULL);
    stats(kv, &after);
    assert_memory_equal(&before, &after, sizeof(before));
    check(kv);
    /* a repeated sequence is a caller bug */
    int32_t dup[2] = {1, 1}, nd[2] = {1, 1};
    assert_int_equal(kv_reserve(kv, 2, dup, nd), ANVIL_ERR_INVALID);
    check(kv);
    /* fits exactly: seq 2 takes the last block */
    ns[0] = 0;
    ns[1] = 8;
    assert_int_equal(kv_reserve(kv, 2, seqs, ns), ANVIL_OK);
    stats(kv, &after);
    assert_int_equal(after.n_free, 0);
    check(kv);
    /* freeing a sequence makes room again (recoverable) */
    kv_seq_free(kv, 0);
    assert_int_equal(kv_seq_reserve(kv, 2, 40), ANVIL_OK);
    check(kv);
    kv_free(kv);
}

static void test_prefix_share(void **state) {
    (void)state;
    struct kv_cache *kv = make(16, 4, 200, ANVIL_TYPE_F16, true);
    int32_t a[70], b[70];
    for (int i = 0; i < 70; i++) a[i] = b[i] = 5 + i % 13;
    b[50] = 999; /* b diverges inside the 4th block */
    assert_int_equal(append(kv, 0, a, 70), ANVIL_OK); /* 4 full + 1 partial */
    check(kv);
    /* b shares a's first three blocks (48 tokens) */
    assert_int_equal(kv_seq_match(kv, 1, b, 69), 48);
    for (int i = 0; i < 3; i++) assert_int_equal(kv_seq_blocks(kv, 1)[i], kv_seq_blocks(kv, 0)[i]);
    check(kv);
    assert_int_equal(append(kv, 1, b + 48, 22), ANVIL_OK);
    expect_data(kv, 0, a, 70);
    expect_data(kv, 1, b, 70);
    struct kv_stats s;
    stats(kv, &s);
    assert_int_equal(s.n_used, 5 + 2);
    /* a freed: its full blocks stay cached (the shared ones stay used) */
    kv_seq_free(kv, 0);
    stats(kv, &s);
    assert_int_equal(s.n_cached, 1); /* a's 4th block; its partial 5th is free */
    assert_int_equal(s.n_used, 5);
    check(kv);
    /* c = a again: takes 4 blocks back (3 shared with b + 1 from the LRU) */
    assert_int_equal(kv_seq_match(kv, 2, a, 70), 64);
    stats(kv, &s);
    assert_int_equal(s.n_cached, 0);
    assert_int_equal(append(kv, 2, a + 64, 6), ANVIL_OK);
    expect_data(kv, 2, a, 70);
    check(kv);
    /* a non-empty sequence cannot match */
    assert_true(kv_seq_match(kv, 2, a, 70) < 0);
    /* dedup: d computes a's prompt from scratch and ends on the same blocks */
    kv_seq_free(kv, 2);
    int32_t d_len = 40;
    assert_int_equal(append(kv, 3, a, d_len), ANVIL_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(kv_seq_blocks(kv, 3)[i], kv_seq_blocks(kv, 1)[i]);
    expect_data(kv, 3, a, d_len);
    check(kv);
    kv_seq_free(kv, 1);
    kv_seq_free(kv, 3);
    stats(kv, &s);
    assert_int_equal(s.n_used, 0);
    assert_int_equal(s.n_free + s.n_cached, 16);
    check(kv);
    kv_free(kv);
}

static void test_fork_cow(void **state) {
    (void)state;
    struct kv_cache *kv = make(10, 3, 100, ANVIL_TYPE_F16, true);
    int32_t a[40], b[40];
    for (int i = 0; i < 40; i++) a[i] = b[i] = i;
    b[20] = b[21] = 77;
    assert_int_equal(append(kv, 0, a, 20), ANVIL_OK); /* 1 full + 4 in the 2nd */
    assert_int_equal(kv_seq_fork(kv, 1, 0), ANVIL_OK);
    assert_int_equal(kv_seq_fork(kv, 1, 0), ANVIL_ERR_INVALID); /* dst not empty */
    struct kv_stats s;
    stats(kv, &s);
    assert_int_equal(s.n_used, 2);
    check(kv);
    /* both write into the shared partial block: the first writer copies */
    assert_int_equal(kv_seq_blocks_needed(kv, 1, 2), 1);
    assert_int_equal(append(kv, 1, b + 20, 2), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_cow, 1);
    assert_int_equal(s.n_used, 3);
    /* the second writer now holds the block alone: no copy */
    assert_int_equal(kv_seq_blocks_needed(kv, 0, 2), 0);
    assert_int_equal(append(kv, 0, a + 20, 2), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_cow, 1);
    expect_data(kv, 0, a, 22);
    expect_data(kv, 1, b, 22);
    check(kv);
    /* committing into the shared block without a reservation is refused */
    assert_int_equal(kv_seq_truncate(kv, 1, 10), ANVIL_OK);
    assert_int_equal(kv_seq_commit(kv, 1, 1, b + 10), ANVIL_ERR_INVALID);
    check(kv);
    /* truncating into a shared full block, then writing, copies it */
    assert_int_equal(kv_seq_truncate(kv, 1, 10), ANVIL_OK);
    b[10] = 555;
    assert_int_equal(append(kv, 1, b + 10, 1), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_cow, 2);
    expect_data(kv, 0, a, 22);
    expect_data(kv, 1, b, 11);
    check(kv);
    kv_seq_free(kv, 0);
    kv_seq_free(kv, 1);
    check(kv);
    kv_free(kv);
}

static void test_lru_eviction(void **state) {
    (void)state;
    struct kv_cache *kv = make(6, 3, 200, ANVIL_TYPE_F16, true);
    int32_t a[64], b[96];
    for (int i = 0; i < 64; i++) a[i] = i;
    for (int i = 0; i < 96; i++) b[i] = 500 + i;
    assert_int_equal(append(kv, 0, a, 64), ANVIL_OK);
    kv_seq_free(kv, 0);
    struct kv_stats s;
    stats(kv, &s);
    assert_int_equal(s.n_cached, 4);
    assert_int_equal(kv_n_available(kv), 6);
    /* b needs 5 blocks: 2 free + 3 evicted, the prefix's tail first */
    assert_int_equal(append(kv, 1, b, 80), ANVIL_OK);
    stats(kv, &s);
    assert_int_equal(s.n_evicted, 3);
    assert_int_equal(s.n_cached, 1);
    check(kv);
    /* a's first block survived (evicted leaf first): a match finds it */
    assert_int_equal(kv_seq_match(kv, 2, a, 64), 16);
    expect_data(kv, 2, a, 16);
    /* the pool is now exhausted */
    assert_int_equal(kv_seq_reserve(kv, 2, 17), ANVIL_ERR_KV_FULL);
    check(kv);
    kv_free(kv);
}

static void test_q8_0_write(void **state) {
    (void)state;
    struct kv_cache *kv = make(4, 1, 64, ANVIL_TYPE_Q8_0, false);
    float k[NKV * HD], v[NKV * HD];
    for (int i = 0; i < NKV * HD; i++) {
        k[i] = sinf((float)i * 0.37f) * 3.0f;
        v[i] = cosf((float)i * 0.11f) * 0.01f;
    }
    assert_int_equal(kv_seq_reserve(kv, 0, 3), ANVIL_OK);
    kv_write(kv, 1, 0, 2, 1, k, 0, v, 0);
    /* stored values are exactly ggml's Q8_0 round trip of the input */
    struct blk_q8_0 qb[NKV * HD / QK];
    float kq[NKV * HD], vq[NKV * HD];
    kn_quantize_row(ANVIL_TYPE_Q8_0, k, qb, NKV * HD);
    kn_dequantize_row(ANVIL_TYPE_Q8_0, qb, kq, NKV * HD);
    kn_quantize_row(ANVIL_TYPE_Q8_0, v, qb, NKV * HD);
    kn_dequantize_row(ANVIL_TYPE_Q8_0, qb, vq, NKV * HD);
    for (int h = 0; h < NKV; h++)
        for (int d = 0; d < HD; d++) {
            assert_true(kn_kv_get(kv_layout(kv), kv_layer_base(kv, 1), kv_seq_blocks(kv, 0), h, 2,
                                  d, 0) == kq[h * HD + d]);
            assert_true(kn_kv_get(kv_layout(kv), kv_layer_base(kv, 1), kv_seq_blocks(kv, 0), h, 2,
                                  d, 1) == vq[h * HD + d]);
        }
    kv_free(kv);
}

/* ---------------------------------------------------------------------- */
/* random operations against a shadow model */

struct shadow {
    int32_t tok[8][256];
    int len[8];
};

static uint32_t rnd(uint32_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

/* kv_prefault makes the blocks just past the highest one handed out
 * resident, a layer per call, up to `ahead` of them, never past the pool,
 * and changes no stored byte: written sequences read back the same, and
 * blocks it touched are handed out as usual afterwards. */
static void test_prefault(void **state) {
    (void)state;
    struct kv_cache *kv = make(40, 2, 512, ANVIL_TYPE_F16, true);
    int32_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = 1000 + i;
    assert_int_equal(kv_prefault(kv, 0), 0); /* nothing handed out, nothing ahead */
    assert_int_equal(append(kv, 0, toks, 40), ANVIL_OK); /* blocks 0..2 */
    int calls = 0;
    while (kv_prefault(kv, 8)) calls++;
    assert_int_equal(calls, NL);
    assert_int_equal(kv_n_prefaulted(kv), 3 + 8);
    assert_int_equal(kv_prefault(kv, 8), 0); /* up to date */
    expect_data(kv, 0, toks, 40);
    check(kv);
    /* a layer done, then blocks handed out past the range: the rest of the
     * range still completes, and the data written meanwhile survives */
    assert_int_equal(append(kv, 1, toks + 40, 60), ANVIL_OK); /* blocks 3..6 */
    assert_int_equal(kv_prefault(kv, 30), 1);
    assert_int_equal(append(kv, 0, toks + 40, 24), ANVIL_OK); /* 64 rows: block 7 */
    while (kv_prefault(kv, 30)) {}
    assert_int_equal(kv_n_prefaulted(kv), 8 + 30); /* 8 handed out now */
    while (kv_prefault(kv, 100)) {}
    assert_int_equal(kv_n_prefaulted(kv), 40); /* capped at the pool */
    int32_t want0[64];
    memcpy(want0, toks, 40 * sizeof(int32_t));
    memcpy(want0 + 40, toks + 40, 24 * sizeof(int32_t));
    expect_data(kv, 0, want0, 64);
    expect_data(kv, 1, toks + 40, 60);
    check(kv);
    kv_free(kv);
}

static void test_random_ops(void **state) {
    (void)state;
    enum { NSEQ = 8, NCTX = 256, NBLK = 28, OPS = 4000 };
    struct kv_cache *kv = make(NBLK, NSEQ, NCTX, ANVIL_TYPE_F16, true);
    struct shadow sh;
    memset(&sh, 0, sizeof(sh));
    /* three "system prompts" so that prefixes repeat */
    int32_t sys[3][80];
    uint32_t x = 12345;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 80; j++) sys[i][j] = (int32_t)(rnd(&x) % 50);
    int64_t n_full = 0, n_matched_tok = 0;
    for (int op = 0; op < OPS; op++) {
        int s = (int)(rnd(&x) % NSEQ);
        int what = (int)(rnd(&x) % 100);
        if (what < 45) {
            /* append 1..40 tokens: continue a system prompt or random */
            int n = 1 + (int)(rnd(&x) % 40);
            if (sh.len[s] + n > NCTX) n = NCTX - sh.len[s];
            if (n == 0) continue;
            int32_t t[40];
            int which = (int)(rnd(&x) % 4);
            for (int i = 0; i < n; i++) {
                int p = sh.len[s] + i;
                t[i] = which < 3 && p < 80 ? sys[which][p] : (int32_t)(rnd(&x) % 50);
            }
            struct kv_stats before, after;
            kv_get_stats(kv, &before);
            anvil_status st = append(kv, s, t, n);
            if (st == ANVIL_ERR_KV_FULL) {
                kv_get_stats(kv, &after);
                assert_memory_equal(&before, &after, sizeof(before));
                n_full++;
            } else {
                assert_int_equal(st, ANVIL_OK);
                memcpy(&sh.tok[s][sh.len[s]], t, (size_t)n * sizeof(int32_t));
                sh.len[s] += n;
            }
        } else if (what < 60) {
            int len = sh.len[s] ? (int)(rnd(&x) % (unsigned)(sh.len[s] + 1)) : 0;
            assert_int_equal(kv_seq_truncate(kv, s, len), ANVIL_OK);
            sh.len[s] = len;
        } else if (what < 72) {
            kv_seq_free(kv, s);
            sh.len[s] = 0;
        } else if (what < 84) {
            /* a new request: match a prompt against the cache */
            if (sh.len[s]) kv_seq_free(kv, s);
            sh.len[s] = 0;
            int which = (int)(rnd(&x) % 3);
            int n = 16 + (int)(rnd(&x) % 64);
            int m = kv_seq_match(kv, s, sys[which], n);
            assert_true(m >= 0 && m <= n && m % 16 == 0);
            memcpy(sh.tok[s], sys[which], (size_t)m * sizeof(int32_t));
            sh.len[s] = m;
            n_matched_tok += m;
        } else if (what < 92) {
            /* fork s into an empty sequence */
            int d = (int)(rnd(&x) % NSEQ);
            if (d == s) continue;
            kv_seq_free(kv, d);
            sh.len[d] = 0;
            assert_int_equal(kv_seq_fork(kv, d, s), ANVIL_OK);
            memcpy(sh.tok[d], sh.tok[s], (size_t)sh.len[s] * sizeof(int32_t));
            sh.len[d] = sh.len[s];
        } else {
            /* a batch reservation for three sequences, then given back */
            int32_t seqs[3] = {s, (s + 1) % NSEQ, (s + 2) % NSEQ}, ns[3];
            for (int i = 0; i < 3; i++) {
                ns[i] = (int32_t)(rnd(&x) % 30);
                if (sh.len[seqs[i]] + ns[i] > NCTX) ns[i] = NCTX - sh.len[seqs[i]];
            }
            anvil_status st = kv_reserve(kv, 3, seqs, ns);
            assert_true(st == ANVIL_OK || st == ANVIL_ERR_KV_FULL);
            check(kv);
            for (int i = 0; i < 3; i++)
                assert_int_equal(kv_seq_truncate(kv, seqs[i], sh.len[seqs[i]]), ANVIL_OK);
        }
        check(kv);
        if (op % 50 == 0)
            for (int q = 0; q < NSEQ; q++) expect_data(kv, q, sh.tok[q], sh.len[q]);
    }
    for (int q = 0; q < NSEQ; q++) expect_data(kv, q, sh.tok[q], sh.len[q]);
    struct kv_stats st;
    kv_get_stats(kv, &st);
    printf("random ops: %lld KV_FULL, %lld tokens matched, %lld COW, %lld evicted\n",
           (long long)n_full, (long long)n_matched_tok, (long long)st.n_cow,
           (long long)st.n_evicted);
    assert_true(n_full > 0 && n_matched_tok > 0 && st.n_cow > 0 && st.n_evicted > 0);
    for (int q = 0; q < NSEQ; q++) kv_seq_free(kv, q);
    kv_get_stats(kv, &st);
    assert_int_equal(st.n_used, 0);
    assert_int_equal(st.n_free + st.n_cached, NBLK);
    check(kv);
    kv_free(kv);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_params),
        cmocka_unit_test(test_init_oom),
        cmocka_unit_test(test_append_truncate_free),
        cmocka_unit_test(test_window_truncate),
        cmocka_unit_test(test_kv_full),
        cmocka_unit_test(test_prefix_share),
        cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_q8_0_write),
        cmocka_unit_test(test_prefault),
        cmocka_unit_test(test_random_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
