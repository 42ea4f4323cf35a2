/*
 * amx_harness.c - the AMX matmul kernels of two revisions (A_*, B_*: see
 * amx_variant.c) timed alternately in one process, call by call, on the
 * same weights and activations, one thread: the ratio of the two best
 * times is a fair comparison on a host whose speed drifts. Weights are
 * random bytes whose f16 scales are all normal numbers (no denormal
 * assists; timing does not depend on values), hot in the cache when small.
 *
 * usage: amx_harness TYPE N ROWS M [REPS]   prints one JSON object
 *        (M a multiple of 16: the kernels do whole token tiles)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ab_util.h"

const int8_t kn_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

typedef int (*amx_fn)(int, float *, size_t, const void *, const void *, size_t, int, int, int, int);
int A_p_amx(int, float *, size_t, const void *, const void *, size_t, int, int, int, int);
int B_p_amx(int, float *, size_t, const void *, const void *, size_t, int, int, int, int);
int A_pk_amx(int, float *, size_t, const void *, const void *, size_t, int, int, int, int);
int B_pk_amx(int, float *, size_t, const void *, const void *, size_t, int, int, int, int);


static const struct {
    const char *name;
    int k, pt; /* k: a K-quant (matmul_pk_amx.c); pt: its T_* */
} TYPES[] = {{"q8_0", 0, 0}, {"q4_0", 0, 1}, {"q4_1", 0, 2}, {"q5_0", 0, 3}, {"q5_1", 0, 4},
             {"iq4_nl", 0, 5}, {"q4_k", 1, 0}, {"q5_k", 1, 1}, {"q6_k", 1, 2}, {"iq4_xs", 1, 3},
             {"q2_k", 1, 4}, {"q3_k", 1, 5}};

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TYPE N ROWS M [REPS]\n", argv[0]);
        return 2;
    }
    const char *ty = argv[1];
    const int n = atoi(argv[2]), rows = atoi(argv[3]), m = atoi(argv[4]), reps = argc > 5 ? atoi(argv[5]) : 10;
    int ti = -1;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(ty, TYPES[i].name)) ti = (int)i;
    if (ti < 0 || n <= 0 || n % (TYPES[ti].k ? 256 : 32) || rows <= 0 || rows % 16 || m < 16 || m % 16 ||
        reps <= 0) {
        fprintf(stderr, "bad arguments (TYPE: q4_0, q4_k, ...; N a multiple of 256 (K types) or 32, "
                        "ROWS of 16, M of 16)\n");
        return 2;
    }
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        fprintf(stderr, "the OS does not grant the AMX tile state\n");
        return 1;
    }
    amx_fn fn[2] = {TYPES[ti].k ? A_pk_amx : A_p_amx, TYPES[ti].k ? B_pk_amx : B_p_amx};
    const int pt = TYPES[ti].pt;
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
        if (TYPES[ti].k) { /* Q8K: d per super-block, then 16 int16 block sums per super-block */
            for (int b = 0; b < n / 256; b++) d[b] = 0.01f;
            int16_t *bs = (int16_t *)(d + n / 256);
            for (int b = 0; b < n / 16; b++) bs[b] = (int16_t)(rand() % 2000 - 1000);
        } else { /* Q8A: d per block, then the blocks' scaled sums (normal floats: no assists) */
            for (int b = 0; b < n / 32; b++) d[b] = 0.01f, d[n / 32 + b] = 0.5f + (float)(rand() % 100) / 64;
        }
    }
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            double t = ab_now();
            int done = fn[v](pt, y, (size_t)rows, w, x, xs, n, m, 0, rows);
            t = ab_now() - t;
            if (done != m) {
                fprintf(stderr, "the kernel did %d of %d tokens\n", done, m);
                return 1;
            }
            if (t < best[v]) best[v] = t;
        }
    ab_report(ty, n, rows, m, reps, best);
    free(w);
    free(x);
    free(y);
    return 0;
}
