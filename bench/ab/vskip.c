/*
 * vskip.c - can sparse P.V save memory traffic on this CPU? (issue 15)
 *
 * HP1 attention skips the V rows whose gate weight is zero. Whether that
 * saves time once the KV cache streams from DRAM depends on the hardware
 * prefetchers, not on the kernel: if they fetch the skipped rows anyway,
 * the bytes cross the memory bus whatever the kernel reads. This loop
 * measures exactly that, without any attention arithmetic: one thread
 * streams a 128 MiB pool of 16-key F16 tiles (head_dim 64: K 2 KiB, V
 * 2 KiB per tile, as src/attn/attn.h lays them out), reads every K
 * line and, of V, every row ("dense"), the rows of a random mask
 * ("sparse"), or none ("K only"), for two layouts: K and V of a tile side
 * by side (the engine's) and K and V in two separate regions. The masks
 * keep DENSITY of the rows, drawn per row, or in runs of RUN whole tiles
 * (RUN = 1: a tile's V is read whole or skipped whole). The cache is
 * flushed (a 256 MiB read) before each pass; the best of 5 passes counts.
 *
 *   gcc -O2 -mavx512f bench/ab/vskip.c -o /tmp/vskip && /tmp/vskip
 *
 * One JSON line per (layout, mask), with ms per pass and the time over
 * the dense pass of the same layout. If "sparse" is not faster than
 * "dense" by about the share of V bytes skipped, the skipped rows were
 * fetched anyway.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define N_TILES (1 << 15) /* x 4 KiB = 128 MiB */
#define TILE 4096
#define HALF 2048
#define ROW 128 /* one key's V: 64 f16 */
#define FLUSH (256u << 20)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static __m512 rd(const uint8_t *p) { return _mm512_castsi512_ps(_mm512_load_si512(p)); }

/* One pass; layout 0: K|V per tile, 1: K region then V region. */
static double pass(const uint8_t *pool, const uint8_t *flush, const uint16_t *mask, int layout,
                   float *sink) {
    __m512 acc = _mm512_setzero_ps();
    for (size_t i = 0; i < FLUSH; i += 64) acc = _mm512_add_ps(acc, rd(flush + i));
    double t0 = now();
    for (size_t t = 0; t < N_TILES; t++) {
        const uint8_t *k = layout == 0 ? pool + t * TILE : pool + t * HALF;
        const uint8_t *v = layout == 0 ? k + HALF : pool + (size_t)N_TILES * HALF + t * HALF;
        for (int o = 0; o < HALF; o += 64) acc = _mm512_add_ps(acc, rd(k + o));
        for (uint32_t m = mask[t]; m; m &= m - 1) {
            int j = __builtin_ctz(m);
            acc = _mm512_add_ps(acc, _mm512_add_ps(rd(v + j * ROW), rd(v + j * ROW + 64)));
        }
    }
    double dt = now() - t0;
    *sink += _mm512_reduce_add_ps(acc);
    return dt;
}

int main(int argc, char **argv) {
    double density = argc > 1 ? atof(argv[1]) : 0.3;
    uint8_t *pool = aligned_alloc(TILE, (size_t)N_TILES * TILE);
    uint8_t *flush = aligned_alloc(TILE, FLUSH);
    uint16_t *mask = malloc(N_TILES * sizeof(uint16_t));
    if (!pool || !flush || !mask) return 1;
    memset(pool, 1, (size_t)N_TILES * TILE);
    memset(flush, 2, FLUSH);
    float sink = 0.0f;
    /* run 0: per row; run n: n whole tiles at a time */
    static const int runs[] = {0, 1, 2, 4, 16};
    for (size_t ri = 0; ri < sizeof(runs) / sizeof(runs[0]); ri++) {
        int run = runs[ri];
        uint16_t cur = 0;
        for (int t = 0; t < N_TILES; t++) {
            if (run == 0) {
                cur = 0;
                for (int j = 0; j < 16; j++)
                    if (urand() < density) cur |= (uint16_t)(1u << j);
            } else if (t % run == 0) {
                cur = urand() < density ? 0xffff : 0;
            }
            mask[t] = cur;
        }
        for (int layout = 0; layout < 2; layout++) {
            double ms[3];
            for (int mode = 0; mode < 3; mode++) {
                static uint16_t all[N_TILES], none[N_TILES];
                if (mode == 0) memset(all, 0xff, sizeof(all));
                const uint16_t *mk = mode == 0 ? all : mode == 1 ? mask : none;
                double best = 1e30;
                for (int rep = 0; rep < 5; rep++) {
                    double dt = pass(pool, flush, mk, layout, &sink);
                    if (dt < best) best = dt;
                }
                ms[mode] = best * 1e3;
            }
            printf("{\"layout\": \"%s\", \"density\": %.2f, \"run_tiles\": %d, \"dense_ms\": %.2f, "
                   "\"sparse_ms\": %.2f, \"k_only_ms\": %.2f, \"sparse_over_dense\": %.3f, "
                   "\"ideal_sparse_over_dense\": %.3f}\n",
                   layout ? "separate" : "interleaved", density, run, ms[0], ms[1], ms[2],
                   ms[1] / ms[0], (ms[2] + density * (ms[0] - ms[2])) / ms[0]);
            fflush(stdout);
        }
    }
    return sink == 12345.0f; /* keep the reads */
}
