/*
 * unit_ops_arch.c - the row ops that the architectures beyond Llama need:
 * rope_ext (NeoX pair layout, partial rotary) and the GELU(tanh)-gated
 * product (plain and fused with the activation conversion); and the F16
 * row conversion the KV cache writes with (f16_row), which must give
 * kn_f32_to_f16's bits in every variant.
 *
 * The reference is checked against a double-precision evaluation of the
 * definition in kernels/ops.h; every variant this CPU runs is checked
 * against the reference within a tolerance derived from the arithmetic
 * (a few float ulps of the inputs' magnitude); variants it cannot run are
 * skipped, never passed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "kernels/cpu/ref/ref.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"

static uint64_t rng = 1;
static float frand(void) { /* uniform in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) * (1.0 / (1ull << 23))) - 1.0f;
}

static const char *families[] = {"ref", "avx2", "avx512"};

/* ---------------------------------------------------------------------- */

static void rope_oracle(double *y, const float *x, int n_head, int head_dim, int n_rot, int pos,
                        const float *inv_freq, int neox) {
    int half = n_rot / 2;
    for (int i = 0; i < n_head * head_dim; i++) y[i] = x[i];
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < half; i++) {
            double th = (double)(float)((float)pos * inv_freq[i]);
            int i0 = h * head_dim + (neox ? i : 2 * i), i1 = h * head_dim + (neox ? i + half : 2 * i + 1);
            double a = x[i0], b = x[i1];
            y[i0] = a * cos(th) - b * sin(th);
            y[i1] = a * sin(th) + b * cos(th);
        }
}

static void test_rope_ext(void **state) {
    (void)state;
    static const int shapes[][3] = {{9, 64, 64}, {4, 256, 256}, {2, 96, 64}, {3, 80, 32},
                                    {1, 128, 128}, {2, 64, 16}, {1, 34, 34}};
    static const int positions[] = {0, 1, 37, 4095, 30000};
    float inv[512], x[4 * 256], xr[4 * 256], x0[4 * 256];
    double y[4 * 256];
    int fails = 0, runs = 0;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int nh = shapes[s][0], hd = shapes[s][1], nr = shapes[s][2], n = nh * hd;
        for (int i = 0; i < nr / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / nr);
        for (size_t p = 0; p < sizeof(positions) / sizeof(positions[0]); p++)
            for (int neox = 0; neox < 2; neox++) {
                for (int i = 0; i < n; i++) x0[i] = frand() * 4.0f;
                int pos = positions[p];
                rope_oracle(y, x0, nh, hd, nr, pos, inv, neox);
                memcpy(xr, x0, sizeof(float) * n);
                kn_ops_ref.rope_ext(xr, nh, hd, nr, pos, inv, neox);
                for (int i = 0; i < n; i++)
                    if (fabs(xr[i] - y[i]) > 4e-6 * 8.0) {
                        if (fails++ < 5)
                            printf("ref rope_ext nh %d hd %d nr %d pos %d neox %d [%d]: %g vs %g\n",
                                   nh, hd, nr, pos, neox, i, xr[i], y[i]);
                    }
                /* dims past n_rot are untouched, bit for bit */
                for (int h = 0; h < nh; h++)
                    for (int d = nr; d < hd; d++)
                        if (xr[h * hd + d] != x0[h * hd + d]) fails++;
                for (size_t f = 1; f < 3; f++) {
                    const struct kn_ops *ops = kn_select(families[f]);
                    if (!ops) continue;
                    memcpy(x, x0, sizeof(float) * n);
                    ops->rope_ext(x, nh, hd, nr, pos, inv, neox);
                    runs++;
                    /* the SIMD sin/cos are within ~1e-6 absolute of libm's
                     * for the reduced angle; the angle itself is the same
                     * float (pos * inv_freq), so a few ulps of |x| bound it */
                    for (int i = 0; i < n; i++)
                        if (fabsf(x[i] - xr[i]) > 2e-5f * 4.0f) {
                            if (fails++ < 5)
                                printf("%s rope_ext nh %d hd %d nr %d pos %d neox %d [%d]: %g vs %g\n",
                                       families[f], nh, hd, nr, pos, neox, i, x[i], xr[i]);
                        }
                }
            }
    }
    /* rope_ext(norm, full) is rope */
    for (int i = 0; i < 64 / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / 64);
    for (int i = 0; i < 9 * 64; i++) x0[i] = frand();
    memcpy(x, x0, sizeof(float) * 9 * 64);
    memcpy(xr, x0, sizeof(float) * 9 * 64);
    kn_ops_ref.rope(x, 9, 64, 123, inv);
    kn_ops_ref.rope_ext(xr, 9, 64, 64, 123, inv, 0);
    assert_memory_equal(x, xr, sizeof(float) * 9 * 64);
    printf("rope_ext: %d SIMD runs checked\n", runs);
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------- */

static double gelu_oracle(double g) {
    double z = sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
    return 0.5 * g * (1.0 + tanh(z));
}

static void test_gelu_mul(void **state) {
    (void)state;
    static const int sizes[] = {1, 7, 8, 31, 32, 33, 640, 2048, 2051};
    float g[2051], u[2051], yr[2051], y[2051];
    int fails = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        int n = sizes[s];
        for (int i = 0; i < n; i++) {
            g[i] = frand() * 6.0f;
            u[i] = frand() * 2.0f;
        }
        g[0] = n > 1 ? -12.0f : 0.5f; /* deep in the saturated tails */
        if (n > 2) g[1] = 12.0f;
        if (n > 3) g[2] = 0.0f;
        kn_ops_ref.gelu_mul(yr, g, u, n);
        for (int i = 0; i < n; i++) {
            double want = gelu_oracle(g[i]) * u[i];
            /* float exp/division: a few ulps relative of |g*u| */
            if (fabs(yr[i] - want) > 1e-6 * (fabs((double)g[i] * u[i]) + 1e-30) + 1e-37) {
                if (fails++ < 5) printf("ref gelu_mul n %d [%d]: g %g: %g vs %g\n", n, i, g[i], yr[i], want);
            }
        }
        /* the reference too: its fused op once cut Q8K rows into 32-wide
         * blocks, and Gemma's ref logits were garbage */
        for (size_t f = 0; f < 3; f++) {
            const struct kn_ops *ops = kn_select(families[f]);
            if (!ops) continue;
            ops->gelu_mul(y, g, u, n);
            for (int i = 0; f > 0 && i < n; i++)
                if (fabsf(y[i] - yr[i]) > 4e-6f * fabsf(g[i] * u[i]) + 1e-30f) {
                    if (fails++ < 5)
                        printf("%s gelu_mul n %d [%d]: %g vs %g\n", families[f], n, i, y[i], yr[i]);
                }
            /* fused with every activation format: the same bytes as the
             * variant's own gelu_mul followed by its act conversion */
            for (int act = 0; act < KN_ACT_COUNT; act++) {
                if (!ops->act[act]) continue;
                int blk = act == KN_ACT_F32 || act == KN_ACT_BF16 ? 1 : act == KN_ACT_Q8A ? QK : QK_K;
                int nn = n / blk * blk; /* whole blocks of the format */
                if (nn == 0) continue;
                size_t rs = kn_act_row_size(act, nn);
                _Alignas(64) uint8_t a1[16384], a2[16384];
                memset(a1, 0, rs);
                memset(a2, 0, rs);
                ops->gelu_mul(y, g, u, nn);
                ops->act[act](a1, y, nn);
                ops->gelu_mul_act(a2, g, u, nn, act);
                if (memcmp(a1, a2, rs) != 0) {
                    if (fails++ < 5) printf("%s gelu_mul_act act %d n %d differs\n", families[f], act, nn);
                }
            }
        }
    }
    assert_int_equal(fails, 0);
}

/* f16_row: every variant's bits against kn_f32_to_f16, element by element,
 * on values that exercise each rounding path (ties to even, subnormal
 * results, overflow to inf, NaN payloads, signed zeros), contiguous and
 * strided as the KV cache's transposed K; entries between the strided
 * ones stay untouched. */
static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_f16_row(void **state) {
    (void)state;
    enum { N = 300, STRIDE = 16 };
    float x[N];
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, /* +-0, +-inf */
        0x7fc00000u, 0xffc01234u, 0x7f800001u, 0x7fbfe000u, /* NaNs, one signalling */
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47800000u, /* 65504, just below/at the inf cut */
        0x3f801000u, 0x3f803000u, 0x3f800fffu,              /* 1 + ties to even and below */
        0x38800000u, 0x387fffffu, 0x33800000u, 0x33000000u, /* smallest normal, subnormals */
        0x33000001u, 0x33c00000u, 0x00000001u, 0x80000010u, /* tiny: rounds to 0 or 2^-24 */
    };
    const int ns = (int)(sizeof(special) / sizeof(special[0]));
    for (int i = 0; i < N; i++) {
        if (i < ns) {
            x[i] = bits_to_f32(special[i]);
        } else {
            /* random sign, mantissa and exponent from 2^-30 to 2^17 */
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t e = 97 + (uint32_t)((rng >> 33) % 48);
            x[i] = bits_to_f32((uint32_t)(rng >> 63) << 31 | e << 23 | (uint32_t)(rng >> 20 & 0x7fffff));
        }
    }
    static const int sizes[] = {1, 7, 8, 9, 64, 256, N};
    static kn_f16 got[N * STRIDE];
    int fails = 0, ran = 0;
    for (size_t f = 0; f < 3; f++) {
        const struct kn_ops *ops = kn_select(families[f]);
        if (!ops) continue;
        assert_non_null(ops->f16_row);
        ran++;
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
            for (int stride = 1; stride <= STRIDE; stride += STRIDE - 1) {
                int n = sizes[si];
                memset(got, 0xab, sizeof(got));
                ops->f16_row(got, (size_t)stride, x, n);
                for (int i = 0; i < n * stride; i++) {
                    kn_f16 want = i % stride ? (kn_f16)0xabab : kn_f32_to_f16(x[i / stride]);
                    if (got[i] != want && fails++ < 5)
                        printf("%s f16_row n %d stride %d [%d]: %#06x vs %#06x\n", families[f], n, stride,
                               i, got[i], want);
                }
            }
    }
    assert_true(ran >= 1);
    assert_int_equal(fails, 0);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_ext),
        cmocka_unit_test(test_gelu_mul),
        cmocka_unit_test(test_f16_row),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
