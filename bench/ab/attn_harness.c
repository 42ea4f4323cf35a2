/*
 * attn_harness.c - the AVX-512 attention kernels (attn.c) of two
 * revisions (A_attn_ops, B_attn_ops: built by bench/ab_attn.sh) timed
 * alternately in one process on the same paged KV and queries: causal
 * prefill of N tokens from position 0 in tasks of KN_ATTN_MAXQ / G rows,
 * as the engine cuts them, for one KV head. Both sides' outputs are
 * compared bit for bit (a kernel change that keeps the arithmetic must
 * keep them equal).
 *
 * usage: attn_harness HEAD_DIM GROUP N [REPS] [f16|q8_0]   prints one JSON object
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anvil.h"
#include "attn/attn.h"

extern const struct kn_attn_ops A_attn_ops, B_attn_ops;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* f16 bits of a float in [-1, 1] (normal or zero; truncating is enough) */
static uint16_t f16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000u;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)s;
    return (uint16_t)(s | (uint32_t)e << 10 | ((u >> 13) & 0x3ffu));
}

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s HEAD_DIM GROUP N [REPS] [f16|q8_0]\n", argv[0]);
        return 2;
    }
    const int hd = atoi(argv[1]), G = atoi(argv[2]), n = atoi(argv[3]);
    const int reps = argc > 4 ? atoi(argv[4]) : 10;
    const int type = argc > 5 && !strcmp(argv[5], "q8_0") ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
    struct kn_kv_layout kv;
    if (G < 1 || G > KN_ATTN_MAXQ || n < 1 || reps < 1 || kn_kv_layout_init(&kv, type, 16, hd, 1)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    const int nblk = (n + 15) / 16, rows = KN_ATTN_MAXQ / G;
    uint8_t *base = aligned_alloc(64, (size_t)nblk * kv.tile_bytes);
    int32_t *blocks = malloc(sizeof(int32_t) * nblk);
    float *q = aligned_alloc(64, sizeof(float) * (size_t)n * G * hd);
    float *out[2] = {aligned_alloc(64, sizeof(float) * (size_t)n * G * hd),
                     aligned_alloc(64, sizeof(float) * (size_t)n * G * hd)};
    if (!base || !blocks || !q || !out[0] || !out[1]) return 1;
    srand(7);
    for (int b = 0; b < nblk; b++) {
        blocks[b] = (b * 7) % nblk == b ? b : b; /* identity table */
        uint8_t *t = base + (size_t)b * kv.tile_bytes;
        if (type == ANVIL_TYPE_F16) {
            uint16_t *k = (uint16_t *)t, *v = (uint16_t *)(t + kv.v_off);
            for (int i = 0; i < hd * 16; i++) k[i] = f16_bits(frand());
            for (int i = 0; i < hd * 16; i++) v[i] = f16_bits(frand());
        } else {
            int8_t *k = (int8_t *)t, *v = (int8_t *)(t + kv.v_off);
            for (int i = 0; i < hd * 16; i++) k[i] = (int8_t)(rand() % 255 - 127);
            for (int i = 0; i < hd * 16; i++) v[i] = (int8_t)(rand() % 255 - 127);
            uint16_t *ks = (uint16_t *)(t + kv.ks_off), *vs = (uint16_t *)(t + kv.vs_off);
            for (int i = 0; i < hd / 32 * 16; i++) ks[i] = f16_bits(0.01f), vs[i] = f16_bits(0.01f);
        }
    }
    for (size_t i = 0; i < (size_t)n * G * hd; i++) q[i] = frand();
    const struct kn_attn_ops *ops[2] = {&A_attn_ops, &B_attn_ops};
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int s = 0; s < 2; s++) {
            double t0 = now();
            for (int r0 = 0; r0 < n; r0 += rows) {
                struct kn_attn_task t = {.kv = &kv, .base = base, .blocks = blocks, .kv_head = 0,
                                         .group = G, .scale = 1.0f / sqrtf((float)hd),
                                         .q = q + (size_t)r0 * G * hd, .q_stride = (size_t)G * hd,
                                         .out = out[s] + (size_t)r0 * G * hd,
                                         .out_stride = (size_t)G * hd, .pos = r0,
                                         .n_rows = n - r0 < rows ? n - r0 : rows};
                ops[s]->attn(&t);
            }
            t0 = now() - t0;
            if (t0 < best[s]) best[s] = t0;
        }
    const int same = !memcmp(out[0], out[1], sizeof(float) * (size_t)n * G * hd);
    /* QK and PV multiply-adds of the causal prefill: 2 * hd per (query, key) */
    const double flop = 2.0 * 2.0 * hd * G * ((double)n * (n + 1) / 2);
    printf("{\"head_dim\": %d, \"group\": %d, \"n\": %d, \"kv\": \"%s\", \"reps\": %d, \"a_us\": %.1f, "
           "\"b_us\": %.1f, \"a_gflops\": %.2f, \"b_gflops\": %.2f, \"b_over_a\": %.3f, \"same_bits\": %s}\n",
           hd, G, n, type == ANVIL_TYPE_F16 ? "f16" : "q8_0", reps, best[0] * 1e6, best[1] * 1e6,
           flop / best[0] * 1e-9, flop / best[1] * 1e-9, best[0] / best[1], same ? "true" : "false");
    return same ? 0 : 1;
}
