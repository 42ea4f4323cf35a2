/*
 * harness.c - packed matmul kernels of two revisions (A_*, B_*: see
 * variant.c) timed alternately in one process, call by call, on the same
 * weights and activations: on a host whose speed drifts from second to
 * second, the ratio of the two best times is still a fair comparison.
 * Weights are random bytes (the timing does not depend on their values;
 * every f16 scale is a normal number), hot in the cache when small.
 *
 * usage: harness TYPE N ROWS M [REPS]   prints one JSON object
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ab_util.h"

/* the VNNI kernels only: AMX off (src/kernels/cpu/amx/amx.h) */
#include <stdbool.h>
bool kn_amx_active(void) { return false; }
int kn_matmul_p_amx(int pt, float *y, size_t ldy, const void *w, const void *x, size_t xs, int n, int nt, int r0,
                    int r1) {
    (void)pt, (void)y, (void)ldy, (void)w, (void)x, (void)xs, (void)n, (void)nt, (void)r0, (void)r1;
    return 0;
}
int kn_matmul_pk_amx(int pt, float *y, size_t ldy, const void *w, const void *x, size_t xs, int n, int nt, int r0,
                     int r1) {
    (void)pt, (void)y, (void)ldy, (void)w, (void)x, (void)xs, (void)n, (void)nt, (void)r0, (void)r1;
    return 0;
}

const int8_t kn_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

typedef void (*mm_fn)(float *, size_t, const void *, size_t, const void *, size_t, int, int, int, int);
#define DECL(P, T) void P##T(float *, size_t, const void *, size_t, const void *, size_t, int, int, int, int);
#define DECL_ALL(P) \
    DECL(P, q8_0) DECL(P, q4_0) DECL(P, q4_1) DECL(P, q5_0) DECL(P, q5_1) DECL(P, iq4_nl) DECL(P, q4_k) \
    DECL(P, q5_k) DECL(P, q6_k) DECL(P, iq4_xs) DECL(P, q2_k) DECL(P, q3_k)
DECL_ALL(A_)
DECL_ALL(B_)


int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TYPE N ROWS M [REPS]\n", argv[0]);
        return 2;
    }
    const char *ty = argv[1];
    const int n = atoi(argv[2]), rows = atoi(argv[3]), m = atoi(argv[4]), reps = argc > 5 ? atoi(argv[5]) : 10;
    mm_fn fn[2] = {0, 0};
#define PICK(T) \
    if (!strcmp(ty, #T)) { \
        fn[0] = A_##T; \
        fn[1] = B_##T; \
    }
    PICK(q8_0) PICK(q4_0) PICK(q4_1) PICK(q5_0) PICK(q5_1) PICK(iq4_nl) PICK(q4_k) PICK(q5_k) PICK(q6_k)
    PICK(iq4_xs) PICK(q2_k) PICK(q3_k)
    const int ktype = strchr(ty, 'k') || !strcmp(ty, "iq4_xs"); /* 256-element super-blocks */
    if (!fn[0] || n <= 0 || n % (ktype ? 256 : 32) || rows <= 0 || rows % 16 || m <= 0 || reps <= 0) {
        fprintf(stderr, "bad arguments (TYPE: q4_0, q4_k, ...; N a multiple of 256 (K types) or 32, "
                        "ROWS of 16)\n");
        return 2;
    }
    /* generous for every packed layout: 2 bytes per weight */
    const size_t wsz = (size_t)rows * n * 2 + (1u << 20), xs = (size_t)n + (size_t)n / 8 * 4 + 64;
    uint8_t *w = aligned_alloc(64, wsz), *x = aligned_alloc(64, xs * m + 64);
    float *y = aligned_alloc(64, (size_t)rows * m * 4 + 64);
    if (!w || !x || !y) return 1;
    srand(1);
    ab_fill_weights(w, wsz);
    for (int t = 0; t < m; t++) {
        int8_t *r = (int8_t *)(x + (size_t)t * xs);
        for (int i = 0; i < n; i++) r[i] = (int8_t)(rand() % 255 - 127);
        float *d = (float *)(r + n);
        for (int b = 0; b < n / 32; b++) d[b] = 0.01f;
    }
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            double t = ab_now();
            fn[v](y, (size_t)rows, w, 0, x, xs, n, m, 0, rows);
            t = ab_now() - t;
            if (t < best[v]) best[v] = t;
        }
    ab_report(ty, n, rows, m, reps, best);
    free(w);
    free(x);
    free(y);
    return 0;
}
