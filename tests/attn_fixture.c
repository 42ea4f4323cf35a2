/*
 * attn_fixture.c - the attention tests' shared fixture (attn_fixture.h),
 * linked into unit_attn and unit_attn_hp1.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "attn_fixture.h"

const char *const VARIANTS[N_VARIANTS] = {"ref", "avx2", "avx512"};

int g_block = 16;

struct kv_cache *make_kv(int type, int hd, int n_head, int n_head_kv, int n_ctx, int n_seq,
                         int n_threads) {
    struct kv_params p = {
        .n_layer = 1,
        .n_head = n_head,
        .n_head_kv = n_head_kv,
        .head_dim = hd,
        .type = type,
        .block_size = g_block,
        .n_seq_max = n_seq,
        .n_ctx = n_ctx,
        .n_threads = n_threads,
    };
    p.n_blocks = n_seq * ((n_ctx + g_block - 1) / g_block) + 2;
    struct kv_cache *kv = NULL;
    char err[256];
    anvil_status st = kv_init(&p, &kv, err, sizeof(err));
    if (st != ANVIL_OK) fail_msg("kv_init: %s", err);
    return kv;
}

void fill_seq(struct kv_cache *kv, int seq, int dummy, int n_kv, int n_head_kv, int hd,
              uint32_t *x, const float *k_in, const float *v_in) {
    size_t row = (size_t)n_head_kv * hd;
    float *k = malloc((size_t)n_kv * row * sizeof(float) + 1);
    float *v = malloc((size_t)n_kv * row * sizeof(float) + 1);
    assert_non_null(k);
    assert_non_null(v);
    for (size_t i = 0; i < (size_t)n_kv * row; i++) k[i] = k_in ? k_in[i] : lcg_uniform(x);
    for (size_t i = 0; i < (size_t)n_kv * row; i++) v[i] = v_in ? v_in[i] : lcg_uniform(x);
    int base = kv_seq_len(kv, seq);
    for (int t0 = 0; t0 < n_kv; t0 += 16) {
        int n = n_kv - t0 < 16 ? n_kv - t0 : 16;
        assert_int_equal(kv_seq_reserve(kv, seq, n), ANVIL_OK);
        kv_write(kv, 0, seq, base + t0, n, k + (size_t)t0 * row, row, v + (size_t)t0 * row, row);
        assert_int_equal(kv_seq_commit(kv, seq, n, NULL), ANVIL_OK);
        if (dummy >= 0 && kv_seq_blocks_needed(kv, dummy, 16) <= kv_n_available(kv) &&
            kv_seq_len(kv, dummy) + 16 <= 1 << 20) {
            if (kv_seq_reserve(kv, dummy, 16) == ANVIL_OK) kv_seq_commit(kv, dummy, 16, NULL);
        }
    }
    free(k);
    free(v);
}

uint32_t fixture_start(struct kv_cache **kv, int type, int hd, int n_head, int n_head_kv,
                       int n_kv, int n_rows, uint32_t seed, bool dummy, float **q, float **want,
                       float **got) {
    *kv = make_kv(type, hd, n_head, n_head_kv, n_kv + 16, dummy ? 2 : 1, 4);
    uint32_t x = seed;
    fill_seq(*kv, 0, dummy ? 1 : -1, n_kv, n_head_kv, hd, &x, NULL, NULL);
    size_t n = (size_t)n_rows * n_head * hd;
    *q = malloc(n * sizeof(float));
    *want = malloc(n * sizeof(float));
    *got = malloc(n * sizeof(float));
    assert_true(*q && *want && *got);
    for (size_t i = 0; i < n; i++) (*q)[i] = 4.0f * lcg_uniform(&x);
    return x;
}

struct kn_attn_task fixture_attn_task(const struct kv_cache *kv, int n_head, int hd, int group,
                                      const float *q, int n_kv, int n_rows_all, int h, int r0,
                                      int n_rows, float *out, int window) {
    size_t stride = (size_t)n_head * hd;
    struct kn_attn_task t = {
        .kv = kv_layout(kv),
        .base = kv_layer_base(kv, 0),
        .blocks = kv_seq_blocks(kv, 0),
        .kv_head = h,
        .group = group,
        .scale = 1.0f / sqrtf((float)hd),
        .q = q + (size_t)r0 * stride + (size_t)h * group * hd,
        .q_stride = stride,
        .out = out + (size_t)r0 * stride + (size_t)h * group * hd,
        .out_stride = stride,
        .pos = n_kv - n_rows_all + r0,
        .n_rows = n_rows,
        .window = window,
    };
    return t;
}

void expect_same(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof(float)) != 0) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof(float)))
                fail_msg("%s: not bit-identical at [%zu]: %.9g vs %.9g", what, i, a[i], b[i]);
    }
}
