/*
 * kq_speed.c - speed sanity check of the K-quant, 5-bit and IQ4 matmul
 * kernels against this machine's limits, as issue 12 asks (not a test, not
 * the product benchmark: `anvil bench --kernels` is, once the new types are
 * added to it). Prints:
 *   - the int8 peak: a register-only loop of vpmaddubsw (12 independent
 *     chains), 64 int8 ops (32 multiply-adds) per instruction, thread CPU
 *     time;
 *   - the ceiling of the tiled kernels' inner pattern (vpmaddubsw + vpaddw
 *     into int16 sums, 3 rows x 2 token tiles, operands from L1), and the
 *     kernel table's own peak (ops->int8_peak: vpmaddubsw + vpmaddwd +
 *     vpaddd chains, the sequence a VNNI-less dot product needs);
 *   - the read bandwidth, 1 and 2 threads (512 MiB, wall time);
 *   - per type: prefill GOP/s on Llama-3.2-1B's matrix shapes at 512
 *     tokens (1 thread, thread CPU time) as a share of the peak, and decode
 *     matvec GB/s (2 threads, wall time) as a share of the 2-thread
 *     bandwidth, measured right before and after.
 * The machine is shared: only same-run ratios mean anything.
 *
 * Build (after make):
 *   cc -O2 -mavx2 -std=gnu11 -pthread -Iinclude -Isrc scripts/kq_speed.c \
 *      build/release/libanvil.a -lm -o build/kq_speed && build/kq_speed [TYPE...]
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
__attribute__((target("avx2"), noinline)) static double peak_once(void) {
    __m256i b = _mm256_set1_epi8(1);
#define DECL(i) __m256i a##i = _mm256_set1_epi16(i);
    R12(DECL)
    long it = 20000000;
    double t = cpu_s();
    for (long k = 0; k < it; k++) {
#define STEP(i) a##i = _mm256_maddubs_epi16(a##i, b);
        R12(STEP)
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),
                         "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    t = cpu_s() - t;
#define SUM(i) +_mm256_extract_epi32(a##i, 0)
    volatile int s = 0 R12(SUM);
    (void)s;
    return it * 12.0 * 64 / t / 1e9;
}

__attribute__((target("avx2"))) static inline __m256i bc(const uint8_t *p) {
    int v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
_Alignas(64) static int8_t pq[2][8192];
_Alignas(64) static uint8_t pw[3][1024];
__attribute__((target("avx2"), noinline)) static double pattern_once(void) {
    long it = 200000;
    __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00;
    __m256i one = _mm256_set1_epi16(1);
    double t = cpu_s();
    for (long k = 0; k < it; k++)
        for (int e = 0; e < 256; e += 32) {
            const int8_t *q0 = pq[0] + e * 8, *q1 = pq[1] + e * 8;
            __m256i c00, c01, c10, c11, c20, c21;
#pragma GCC unroll 8
            for (int f = 0; f < 8; f++) {
                __m256i a0 = _mm256_load_si256((const __m256i *)(q0 + 32 * f));
                __m256i a1 = _mm256_load_si256((const __m256i *)(q1 + 32 * f));
                __m256i b0 = bc(pw[0] + e + 4 * f), b1 = bc(pw[1] + e + 4 * f), b2 = bc(pw[2] + e + 4 * f);
                __m256i p00 = _mm256_maddubs_epi16(b0, a0), p01 = _mm256_maddubs_epi16(b0, a1);
                __m256i p10 = _mm256_maddubs_epi16(b1, a0), p11 = _mm256_maddubs_epi16(b1, a1);
                __m256i p20 = _mm256_maddubs_epi16(b2, a0), p21 = _mm256_maddubs_epi16(b2, a1);
                if (f == 0) {
                    c00 = p00, c01 = p01, c10 = p10, c11 = p11, c20 = p20, c21 = p21;
                } else {
                    c00 = _mm256_add_epi16(c00, p00), c01 = _mm256_add_epi16(c01, p01);
                    c10 = _mm256_add_epi16(c10, p10), c11 = _mm256_add_epi16(c11, p11);
                    c20 = _mm256_add_epi16(c20, p20), c21 = _mm256_add_epi16(c21, p21);
                }
                __asm__("" : "+x"(c00), "+x"(c01), "+x"(c10), "+x"(c11), "+x"(c20), "+x"(c21));
            }
            s00 = _mm256_add_epi32(s00, _mm256_madd_epi16(c00, one));
            s01 = _mm256_add_epi32(s01, _mm256_madd_epi16(c01, one));
            s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(c10, one));
            s11 = _mm256_add_epi32(s11, _mm256_madd_epi16(c11, one));
            s20 = _mm256_add_epi32(s20, _mm256_madd_epi16(c20, one));
            s21 = _mm256_add_epi32(s21, _mm256_madd_epi16(c21, one));
        }
    t = cpu_s() - t;
    __m256i z = _mm256_add_epi32(_mm256_add_epi32(s00, s01),
                                 _mm256_add_epi32(_mm256_add_epi32(s10, s11), _mm256_add_epi32(s20, s21)));
    volatile int zz = _mm256_extract_epi32(z, 0);
    (void)zz;
    return it * 64.0 * 6 * 64 / t / 1e9;
}

/* ---------------------------------------------------------------------- */
/* bandwidth and 2-thread decode */

struct job {
    const struct kn_ops *ops;
    int type, n, r0, r1, reps;
    const uint8_t *w, *x;
    size_t ws;
    float *y;
    const uint8_t *buf;
    size_t len;
};

__attribute__((target("avx2"))) static void *read_job(void *arg) {
    struct job *j = arg;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (int r = 0; r < j->reps; r++)
        for (size_t i = 0; i < j->len; i += 128) {
            a = _mm256_add_epi8(a, _mm256_load_si256((const __m256i *)(j->buf + i)));
            b = _mm256_add_epi8(b, _mm256_load_si256((const __m256i *)(j->buf + i + 32)));
            c = _mm256_add_epi8(c, _mm256_load_si256((const __m256i *)(j->buf + i + 64)));
            d = _mm256_add_epi8(d, _mm256_load_si256((const __m256i *)(j->buf + i + 96)));
        }
    volatile int s = _mm256_extract_epi32(_mm256_add_epi8(_mm256_add_epi8(a, b), _mm256_add_epi8(c, d)), 0);
    (void)s;
    return NULL;
}

static void *mv_job(void *arg) {
    struct job *j = arg;
    for (int r = 0; r < j->reps; r++)
        j->ops->matmul[j->type](j->y, (size_t)(j->r1), j->w, j->ws, j->x, 0, j->n, 1, j->r0, j->r1);
    return NULL;
}

/* wall time of fn over nt threads (jobs[i]) */
static double run_threads(void *(*fn)(void *), struct job *jobs, int nt) {
    pthread_t th[2];
    double t = wall_s();
    for (int i = 0; i < nt; i++) pthread_create(&th[i], NULL, fn, &jobs[i]);
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    return wall_s() - t;
}

static double bandwidth(int nt) {
    size_t len = (size_t)512 << 20;
    uint8_t *p = aligned_alloc(64, len);
    memset(p, 1, len);
    struct job j[2];
    for (int i = 0; i < nt; i++) j[i] = (struct job){.buf = p + len / nt * i, .len = len / nt, .reps = 2};
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        double t = run_threads(read_job, j, nt);
        if (t < best) best = t;
    }
    free(p);
    return 2.0 * len / best / 1e9;
}

/* ---------------------------------------------------------------------- */

/* random blocks with finite f16 scales (0x2000 = 2^-7) */
static void fill_blocks(int type, uint8_t *w, size_t bytes) {
    static const struct {
        int t, o0, o1;
    } so[] = {{ANVIL_TYPE_Q5_0, 0, -1}, {ANVIL_TYPE_Q5_1, 0, 2},  {ANVIL_TYPE_IQ4_NL, 0, -1},
              {ANVIL_TYPE_Q2_K, 80, 82}, {ANVIL_TYPE_Q3_K, 108, -1}, {ANVIL_TYPE_Q4_K, 0, 2},
              {ANVIL_TYPE_Q5_K, 0, 2},  {ANVIL_TYPE_Q6_K, 208, -1}, {ANVIL_TYPE_IQ4_XS, 0, -1},
              {ANVIL_TYPE_Q4_0, 0, -1}, {ANVIL_TYPE_Q8_0, 0, -1},  {ANVIL_TYPE_Q4_1, 0, 2}};
    uint32_t bl, bb;
    gguf_type_block(type, &bl, &bb);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)(rand() >> 7);
    for (size_t k = 0; k < sizeof(so) / sizeof(so[0]); k++)
        if (so[k].t == type)
            for (size_t b = 0; b < bytes / bb; b++) {
                uint16_t h = 0x2000;
                memcpy(w + b * bb + so[k].o0, &h, 2);
                if (so[k].o1 >= 0) memcpy(w + b * bb + so[k].o1, &h, 2);
            }
}

static uint8_t *act_rows(const struct kn_ops *ops, int act, int n, int nt) {
    size_t xs = kn_act_row_size(act, n);
    uint8_t *x = aligned_alloc(64, xs * nt);
    float *f = malloc(sizeof(float) * n);
    for (int t = 0; t < nt; t++) {
        for (int i = 0; i < n; i++) f[i] = (float)(rand() % 2001 - 1000) / 500.0f;
        ops->act[act](x + xs * t, f, n);
    }
    free(f);
    return x;
}

int main(int argc, char **argv) {
    const struct kn_ops *ops = kn_select("avx2");
    if (!ops) {
        fprintf(stderr, "kq_speed: needs AVX2\n");
        return 2;
    }
    double pk = 0, pat = 0;
    for (int r = 0; r < 5; r++) {
        double v = peak_once(), u = pattern_once();
        if (v > pk) pk = v;
        if (u > pat) pat = u;
    }
    double bw1 = bandwidth(1), bw2 = bandwidth(2);
    double tab = ops->int8_peak ? ops->int8_peak(1.0) : 0.0;
    printf("int8 peak (vpmaddubsw, 1 thread): %.1f GOP/s; tiled inner pattern ceiling %.1f GOP/s (%.0f%%);\n"
           "the kernel table's peak (vpmaddubsw + vpmaddwd + vpaddd chains): %.1f GOP/s (%.0f%%)\n",
           pk, pat, 100 * pat / pk, tab, 100 * tab / pk);
    printf("read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n", bw1, bw2);
    static const int all[] = {ANVIL_TYPE_Q4_K, ANVIL_TYPE_Q5_K, ANVIL_TYPE_Q6_K, ANVIL_TYPE_Q3_K,
                              ANVIL_TYPE_Q2_K, ANVIL_TYPE_IQ4_XS, ANVIL_TYPE_Q5_0, ANVIL_TYPE_Q5_1,
                              ANVIL_TYPE_IQ4_NL, ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q8_0};
    for (size_t ti = 0; ti < sizeof(all) / sizeof(all[0]); ti++) {
        int type = all[ti];
        if (argc > 1) {
            int want = 0;
            for (int a = 1; a < argc; a++) want |= anvil_type_from_name(argv[a]) == type;
            if (!want) continue;
        }
        int act = kn_act_for_type(type);
        /* Llama-3.2-1B: q/o 2048 -> 2048, gate/up 2048 -> 8192, down 8192 -> 2048;
         * 512 rows of each at 512 tokens, one thread */
        static const int shapes[][2] = {{2048, 512}, {8192, 512}};
        for (int s = 0; s < 2; s++) {
            int n = shapes[s][0], rows = shapes[s][1], nt = 512;
            size_t ws = gguf_row_size(type, n), xs = kn_act_row_size(act, n);
            uint8_t *w = aligned_alloc(64, ws * rows), *x = act_rows(ops, act, n, nt);
            fill_blocks(type, w, ws * rows);
            float *y = malloc(sizeof(float) * rows * nt);
            double best = 1e9;
            for (int r = 0; r < 3; r++) {
                double t = cpu_s();
                ops->matmul[type](y, rows, w, ws, x, xs, n, nt, 0, rows);
                t = cpu_s() - t;
                if (t < best) best = t;
            }
            double gop = 2.0 * n * rows * nt / best / 1e9;
            printf("%-6s prefill n %4d x %d rows, %d tok: %6.1f GOP/s = %4.1f%% of peak\n",
                   anvil_type_name(type), n, rows, nt, gop, 100 * gop / pk);
            free(w);
            free(x);
            free(y);
        }
        /* decode: ~192 MB of weights (out of cache), 2 threads */
        {
            int n = 4096;
            size_t ws = gguf_row_size(type, n);
            int rows = (int)(((size_t)192 << 20) / ws) & ~15;
            uint8_t *w = aligned_alloc(64, ws * rows), *x = act_rows(ops, act, n, 1);
            fill_blocks(type, w, ws * rows);
            float *y = malloc(sizeof(float) * rows);
            struct job j[2];
            for (int i = 0; i < 2; i++)
                j[i] = (struct job){ops, type, n, rows / 2 * i, rows / 2 * (i + 1), 3, w, x, ws, y, NULL, 0};
            double b0 = bandwidth(2);
            double t = run_threads(mv_job, j, 2);
            double b1 = bandwidth(2);
            double gbs = 3.0 * ws * rows / t / 1e9, bwm = (b0 + b1) / 2;
            printf("%-6s decode  n %d, %d MB, 2 threads: %5.1f GB/s = %4.1f%% of %.1f GB/s\n",
                   anvil_type_name(type), n, (int)(ws * rows >> 20), gbs, 100 * gbs / bwm, bwm);
            free(w);
            free(x);
            free(y);
        }
    }
    return 0;
}
