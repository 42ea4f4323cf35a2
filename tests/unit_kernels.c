/*
 * unit_kernels.c - every kernel of every variant this CPU can run, against
 * the reference (kn_ops_ref) on the same inputs, test-backend-ops style:
 * op x variant x shape x 3 seeds. A case passes when nmse <= tol and
 * |a - ref| <= atol + rtol * |ref| elementwise; on failure it prints op,
 * variant, shape, seed and the first mismatches. Variants the CPU cannot run
 * are reported as skipped, never as passed.
 *
 * Also here: batch invariance of each matmul variant (ops.h: y(t, r) must
 * be bit-identical whatever n_tokens, r0, r1), and the reference against
 * golden tensors computed with numpy and the gguf package
 * (tests/gen/gen_kernels.py -> tests/data/kernels_golden.bin).
 *
 * Tolerances: matmul error bounds scale with the magnitude sum
 * sum_i |w_i| |x_i| of each dot (absdot), not with |y|, so cancellation in
 * random data cannot make a correct kernel fail nor hide a wrong one (a
 * dropped block costs ~1/nb of absdot, far above the bound).
 */
#include <float.h>
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
#include "gguf/gguf_types.h"
#include "kernels/cpu/ref/ref.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"
#include "packed_variant.h"
#include "kernel_variants.h"
#include "quantize/quantize.h"

/* ---------------------------------------------------------------------- */
/* variants */

/* The "-packed" variant (packed_variant.h) for these types: every matmul
 * test below also covers packing and the packed kernels */
static const int PACKED_TYPES[] = {ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q4_1, ANVIL_TYPE_Q8_0,
                                   ANVIL_TYPE_Q5_0, ANVIL_TYPE_Q5_1, ANVIL_TYPE_MXFP4};
#define N_PACKED ((int)(sizeof(PACKED_TYPES) / sizeof(PACKED_TYPES[0])))

static void variants_init(void) { variants_init_packed(PACKED_TYPES, N_PACKED); }

/* ---------------------------------------------------------------------- */
/* deterministic inputs */

/* Mostly N(0,1); a few rows or elements are large or small, some exact
 * zeros and block-constant runs, so that scales, saturation and zero
 * blocks are exercised. */
static void fill(float *x, size_t count, int row_len) {
    float scale = 1.0f;
    for (size_t i = 0; i < count; i++) {
        if (i % (size_t)row_len == 0) {
            uint32_t r = rng_u32() % 16;
            scale = r == 0 ? 1e-3f : r == 1 ? 50.0f : 1.0f;
        }
        uint32_t r = rng_u32() % 256;
        float v = rng_normal() * scale;
        if (r == 0) v = 0.0f;
        else if (r == 1) v *= 20.0f;
        x[i] = v;
    }
    /* one all-zero block and one constant block, when there is room */
    if (count >= 128) {
        memset(x + 32, 0, 32 * sizeof(float));
        for (int j = 0; j < 32; j++) x[96 + j] = 0.75f;
    }
}

/* ---------------------------------------------------------------------- */
/* comparison */

struct cmp {
    double atol_c; /* atol = atol_c * scale_i (scale given per element) or atol_c */
    double rtol;
    double nmse;
};

/* Compare got against ref over count values; scale (may be NULL) gives each
 * element's magnitude for atol. Returns true on pass; prints on failure. */
static bool check(const char *op, const char *var, const char *shape, int seed, const float *got,
                  const float *ref, const double *scale, size_t count, struct cmp c) {
    double se = 0, sr = 0;
    int bad = 0;
    size_t first_bad[5];
    for (size_t i = 0; i < count; i++) {
        double a = got[i], b = ref[i];
        double tol = c.atol_c * (scale ? scale[i] : 1.0) + c.rtol * fabs(b);
        if (!(fabs(a - b) <= tol) && !(isnan(a) && isnan(b)) && !(a == b)) {
            if (bad < 5) first_bad[bad] = i;
            bad++;
        }
        if (isfinite(a) && isfinite(b)) {
            se += (a - b) * (a - b);
            sr += b * b;
        }
    }
    double nmse = sr > 0 ? se / sr : se;
    if (bad == 0 && nmse <= c.nmse) return true;
    printf("FAIL %s [%s] %s seed %d: %d/%zu mismatches, nmse %.3g (tol %.3g)\n", op, var, shape,
           seed, bad, count, nmse, c.nmse);
    for (int k = 0; k < bad && k < 5; k++) {
        size_t i = first_bad[k];
        printf("  [%zu] got %.9g ref %.9g diff %.3g tol %.3g\n", i, got[i], ref[i],
               fabs((double)got[i] - ref[i]),
               c.atol_c * (scale ? scale[i] : 1.0) + c.rtol * fabs(ref[i]));
    }
    return false;
}

/* ---------------------------------------------------------------------- */
/* matmul */

static const int MM_TYPES[] = {ANVIL_TYPE_Q4_1, ANVIL_TYPE_Q8_0, ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q5_0,
                               ANVIL_TYPE_Q5_1, ANVIL_TYPE_F16,  ANVIL_TYPE_BF16, ANVIL_TYPE_F32,
                               ANVIL_TYPE_MXFP4};

/* |terms| of one weight row as the kernels see them (see the header). */
static void abs_weights(int type, const void *w, int n, float *out) {
    if (type == ANVIL_TYPE_Q4_0 || type == ANVIL_TYPE_Q4_1) {
        for (int b = 0; b < n / QK; b++) {
            const uint8_t *qs;
            float d, m = 0.0f;
            if (type == ANVIL_TYPE_Q4_0) {
                const struct blk_q4_0 *blk = (const struct blk_q4_0 *)w + b;
                d = kn_f16_to_f32(blk->d);
                m = 8.0f * fabsf(d);
                qs = blk->qs;
            } else {
                const struct blk_q4_1 *blk = (const struct blk_q4_1 *)w + b;
                d = kn_f16_to_f32(blk->d);
                m = fabsf(kn_f16_to_f32(blk->m));
                qs = blk->qs;
            }
            for (int j = 0; j < QK / 2; j++) {
                out[b * QK + j] = fabsf(d) * (float)(qs[j] & 15) + m;
                out[b * QK + QK / 2 + j] = fabsf(d) * (float)(qs[j] >> 4) + m;
            }
        }
        return;
    }
    if (type == ANVIL_TYPE_Q5_0) { /* |d| q + 16 |d|, q in 0..31 */
        for (int b = 0; b < n / QK; b++) {
            const struct blk_q5_0 *blk = (const struct blk_q5_0 *)w + b;
            float d = fabsf(kn_f16_to_f32(blk->d));
            uint32_t h;
            memcpy(&h, blk->qh, 4);
            for (int j = 0; j < QK / 2; j++) {
                int lo = (blk->qs[j] & 15) | (int)((h >> j) & 1) << 4;
                int hi = (blk->qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
                out[b * QK + j] = d * (float)lo + 16.0f * d;
                out[b * QK + QK / 2 + j] = d * (float)hi + 16.0f * d;
            }
        }
        return;
    }
    if (type == ANVIL_TYPE_Q5_1) { /* |d| q + |m|, q in 0..31 */
        for (int b = 0; b < n / QK; b++) {
            const struct blk_q5_1 *blk = (const struct blk_q5_1 *)w + b;
            float d = fabsf(kn_f16_to_f32(blk->d)), m = fabsf(kn_f16_to_f32(blk->m));
            uint32_t h;
            memcpy(&h, blk->qh, 4);
            for (int j = 0; j < QK / 2; j++) {
                int lo = (blk->qs[j] & 15) | (int)((h >> j) & 1) << 4;
                int hi = (blk->qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
                out[b * QK + j] = d * (float)lo + m;
                out[b * QK + QK / 2 + j] = d * (float)hi + m;
            }
        }
        return;
    }
    kn_dequantize_row(type, w, out, n);
    for (int i = 0; i < n; i++) out[i] = fabsf(out[i]);
}

/* Float values of one activation row as the kernels see them. */
static void act_values(int act, const void *a, int n, float *out) {
    if (act == KN_ACT_Q8A) {
        const int8_t *q = a;
        const float *d = (const float *)((const uint8_t *)a + n);
        for (int i = 0; i < n; i++) out[i] = d[i / QK] * (float)q[i];
    } else if (act == KN_ACT_BF16) {
        for (int i = 0; i < n; i++) out[i] = kn_bf16_to_f32(((const kn_bf16 *)a)[i]);
    } else {
        memcpy(out, a, (size_t)n * sizeof(float));
    }
}

struct mm_case {
    int type, n, rows, n_tokens, seed;
    void *w;       /* rows x row_bytes */
    void *x;       /* n_tokens x act row */
    size_t w_stride, x_stride;
    float *y_ref;  /* n_tokens x rows */
    double *absdot;
};

static void mm_case_make(struct mm_case *c, int type, int n, int rows, int n_tokens, int seed) {
    memset(c, 0, sizeof(*c));
    c->type = type;
    c->n = n;
    c->rows = rows;
    c->n_tokens = n_tokens;
    c->seed = seed;
    int act = kn_act_for_type(type);
    c->w_stride = gguf_row_size(type, (uint64_t)n);
    c->x_stride = kn_act_row_size(act, n);
    c->w = xmalloc(c->w_stride * rows);
    c->x = xmalloc(c->x_stride * n_tokens);
    float *f = xmalloc((size_t)n * sizeof(float) * (rows > n_tokens ? rows : n_tokens));
    rng_seed((uint64_t)seed * 1000003u + (uint64_t)type * 7919u + (uint64_t)n * 31u + rows);
    fill(f, (size_t)n * rows, n);
    if (type == ANVIL_TYPE_Q5_0) {
        /* the kernels' reference has no Q5_0 quantizer (src/quantize has the
         * searching one): ggml's plain rule, d = the block's value of
         * largest magnitude / -16, q = round(x / d) + 16 in 0..31 */
        for (int r = 0; r < rows; r++)
            for (int blk = 0; blk < n / QK; blk++) {
                const float *x = f + (size_t)r * n + (size_t)blk * QK;
                struct blk_q5_0 *q = (struct blk_q5_0 *)((uint8_t *)c->w + r * c->w_stride) + blk;
                float amax = 0.0f, mx = 0.0f;
                for (int j = 0; j < QK; j++)
                    if (fabsf(x[j]) > amax) amax = fabsf(x[j]), mx = x[j];
                float d = mx / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                uint32_t h = 0;
                memset(q->qs, 0, sizeof(q->qs));
                for (int j = 0; j < QK; j++) {
                    int v = (int)lrintf(x[j] * id) + 16;
                    v = v < 0 ? 0 : v > 31 ? 31 : v;
                    q->qs[j % (QK / 2)] |= (uint8_t)((v & 15) << (j < QK / 2 ? 0 : 4));
                    h |= (uint32_t)(v >> 4) << j;
                }
                memcpy(q->qh, &h, 4);
                q->d = kn_f32_to_f16(d);
            }
    } else if (type == ANVIL_TYPE_Q5_1) {
        /* ggml's plain rule: m = the block's minimum, d = (max - min) / 31,
         * q = round((x - m) / d) in 0..31 */
        for (int r = 0; r < rows; r++)
            for (int blk = 0; blk < n / QK; blk++) {
                const float *x = f + (size_t)r * n + (size_t)blk * QK;
                struct blk_q5_1 *q = (struct blk_q5_1 *)((uint8_t *)c->w + r * c->w_stride) + blk;
                float lo = x[0], hi = x[0];
                for (int j = 1; j < QK; j++) {
                    if (x[j] < lo) lo = x[j];
                    if (x[j] > hi) hi = x[j];
                }
                float d = (hi - lo) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                uint32_t h = 0;
                memset(q->qs, 0, sizeof(q->qs));
                for (int j = 0; j < QK; j++) {
                    int v = (int)lrintf((x[j] - lo) * id);
                    v = v < 0 ? 0 : v > 31 ? 31 : v;
                    q->qs[j % (QK / 2)] |= (uint8_t)((v & 15) << (j < QK / 2 ? 0 : 4));
                    h |= (uint32_t)(v >> 4) << j;
                }
                memcpy(q->qh, &h, 4);
                q->d = kn_f32_to_f16(d);
                q->m = kn_f32_to_f16(lo);
            }
    } else {
        for (int r = 0; r < rows; r++)
            kn_quantize_row(type, f + (size_t)r * n, (uint8_t *)c->w + r * c->w_stride, n);
    }
    fill(f, (size_t)n * n_tokens, n);
    for (int t = 0; t < n_tokens; t++)
        kn_ops_ref.act[act]((uint8_t *)c->x + t * c->x_stride, f + (size_t)t * n, n);
    c->y_ref = xmalloc(sizeof(float) * (size_t)rows * n_tokens);
    kn_ops_ref.matmul[type](c->y_ref, rows, c->w, c->w_stride, c->x, c->x_stride, n, n_tokens, 0,
                            rows);
    /* absdot(t, r) = sum |w||x| in double */
    c->absdot = xmalloc(sizeof(double) * (size_t)rows * n_tokens);
    float *aw = xmalloc((size_t)n * sizeof(float)), *ax = xmalloc((size_t)n * sizeof(float));
    float *axs = xmalloc((size_t)n * sizeof(float) * n_tokens);
    for (int t = 0; t < n_tokens; t++) {
        act_values(act, (uint8_t *)c->x + t * c->x_stride, n, ax);
        for (int i = 0; i < n; i++) axs[(size_t)t * n + i] = fabsf(ax[i]);
    }
    for (int r = 0; r < rows; r++) {
        abs_weights(type, (uint8_t *)c->w + r * c->w_stride, n, aw);
        for (int t = 0; t < n_tokens; t++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += (double)aw[i] * axs[(size_t)t * n + i];
            c->absdot[(size_t)t * rows + r] = s;
        }
    }
    free(aw);
    free(ax);
    free(axs);
    free(f);
}

static void mm_case_free(struct mm_case *c) {
    free(c->w);
    free(c->x);
    free(c->y_ref);
    free(c->absdot);
}

/* Accumulation error bound coefficient for a dot of n elements: a variant
 * and the reference each round at most ~(terms + tree depth) times. */
static double mm_atol_c(int type, int n) {
    int terms = kn_act_for_type(type) == KN_ACT_Q8A ? 2 * (n / QK) : n;
    return 2.0 * (terms + 40) * FLT_EPSILON;
}

/* Run variant v on rows [r0, r1) of case c, compare with the reference;
 * rows outside the range must stay untouched. */
static bool mm_run_check(const struct variant *v, struct mm_case *c, int r0, int r1) {
    size_t cnt = (size_t)c->rows * c->n_tokens;
    float *y = xmalloc(sizeof(float) * cnt);
    for (size_t i = 0; i < cnt; i++) y[i] = NAN;
    /* write into a larger ldy to check that it is honoured */
    size_t ldy = (size_t)c->rows + 3;
    float *yb = xmalloc(sizeof(float) * ldy * c->n_tokens);
    for (size_t i = 0; i < ldy * c->n_tokens; i++) yb[i] = -777.0f;
    v->ops->matmul[c->type](yb, ldy, c->w, c->w_stride, c->x, c->x_stride, c->n, c->n_tokens, r0,
                            r1);
    bool ok = true;
    for (int t = 0; t < c->n_tokens; t++)
        for (size_t r = 0; r < ldy; r++) {
            float val = yb[t * ldy + r];
            bool inside = (int)r >= r0 && (int)r < r1;
            if (inside) y[(size_t)t * c->rows + r] = val;
            else if (val != -777.0f) {
                if (ok)
                    printf("FAIL matmul %s [%s] n %d rows %d: wrote y[t %d][r %zu] outside [%d, %d)\n",
                           gguf_type_name_any(c->type), v->name, c->n, c->rows, t, r, r0, r1);
                ok = false;
            }
        }
    /* compare only inside the range */
    float *g = xmalloc(sizeof(float) * cnt), *rf = xmalloc(sizeof(float) * cnt);
    double *sc = xmalloc(sizeof(double) * cnt);
    size_t k = 0;
    for (int t = 0; t < c->n_tokens; t++)
        for (int r = r0; r < r1; r++, k++) {
            g[k] = y[(size_t)t * c->rows + r];
            rf[k] = c->y_ref[(size_t)t * c->rows + r];
            sc[k] = c->absdot[(size_t)t * c->rows + r];
        }
    char shape[128];
    snprintf(shape, sizeof(shape), "n %d rows [%d,%d) of %d, n_tokens %d", c->n, r0, r1, c->rows,
             c->n_tokens);
    char op[32];
    snprintf(op, sizeof(op), "matmul %s", gguf_type_name_any(c->type));
    /* Q5_0: the reference subtracts 16 * sa with sa = da * sum(qa) rounded
     * to float, the packed kernel 16 * sum(qa) in int32 before scaling; on
     * a dot that cancels, the reference's rounding (bounded by atol)
     * is a larger share of a small result than nmse 1e-9 allows. Q5_1:
     * the same for the packed kernel's fused m * sa term (one token, one
     * row of 8224 that cancels: nmse 1.6e-9 with every element in atol) */
    bool loose = c->type == ANVIL_TYPE_Q5_0 || c->type == ANVIL_TYPE_Q5_1;
    struct cmp cm = {mm_atol_c(c->type, c->n), 0.0, loose ? 1e-7 : 1e-9};
    ok = check(op, v->name, shape, c->seed, g, rf, sc, k, cm) && ok;
    free(g);
    free(rf);
    free(sc);
    free(y);
    free(yb);
    return ok;
}

struct mm_shape {
    int n, rows;
    const int *tokens; /* 0-terminated */
};
static const int TOK_ALL[] = {1, 2, 3, 4, 5, 7, 8, 16, 33, 0};
static const int TOK_FEW[] = {1, 2, 5, 0};
static const int TOK_LONG[] = {70, 300, 0}; /* 300: past a 256-token call chunk */
static const struct mm_shape MM_SHAPES[] = {
    {32, 5, TOK_ALL},  {64, 9, TOK_ALL},    {576, 67, TOK_ALL}, {1536, 19, TOK_ALL},
    {544, 13, TOK_FEW}, {576, 6, TOK_LONG}, {32, 49157, (const int[]){1, 0}},
    {8224, 6, TOK_FEW}, /* n > 8192: the matvec-per-token path of the tiled variants */
};

static void test_matmul_type(void **state, int type) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (size_t s = 0; s < sizeof(MM_SHAPES) / sizeof(MM_SHAPES[0]); s++) {
        const struct mm_shape *sh = &MM_SHAPES[s];
        for (const int *nt = sh->tokens; *nt; nt++)
            for (int seed = 1; seed <= 3; seed++) {
                struct mm_case c;
                mm_case_make(&c, type, sh->n, sh->rows, *nt, seed);
                int R = sh->rows;
                /* whole range, then an inner range that is no multiple of a tile */
                if (!mm_run_check(v, &c, 0, R)) fails++;
                if (R > 4 && !mm_run_check(v, &c, seed, R - 2)) fails++;
                if (R > 2 && !mm_run_check(v, &c, R - 1, R)) fails++;
                mm_case_free(&c);
                if (fails > 3) break;
            }
    }
    assert_int_equal(fails, 0);
}

#define MM_TEST(T) \
    static void test_matmul_##T(void **state) { test_matmul_type(state, ANVIL_TYPE_##T); }
MM_TEST(Q4_1)
MM_TEST(Q8_0)
MM_TEST(Q4_0)
MM_TEST(Q5_0)
MM_TEST(Q5_1)
MM_TEST(F16)
MM_TEST(BF16)
MM_TEST(F32)
/* MXFP4: weights by the reference's quantizer (ggml's rule) */
static void test_matmul_MXFP4(void **state) { test_matmul_type(state, ANVIL_TYPE_MXFP4); }

/* Batch invariance: y(t, r) from one call over n_tokens tokens and all rows
 * must equal, bit for bit, the value from calls over one token, other
 * token windows and other row ranges. */
static void test_batch_invariance(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    static const int shapes[][3] = {{576, 23, 37}, {1536, 9, 11}, {64, 13, 70}, {8224, 5, 5}};
    int fails = 0;
    for (size_t ti = 0; ti < sizeof(MM_TYPES) / sizeof(MM_TYPES[0]); ti++)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            int type = MM_TYPES[ti], n = shapes[s][0], R = shapes[s][1], T = shapes[s][2];
            struct mm_case c;
            mm_case_make(&c, type, n, R, T, 5);
            kn_matmul_fn mm = v->ops->matmul[type];
            float *full = xmalloc(sizeof(float) * R * T), *part = xmalloc(sizeof(float) * R * T);
            mm(full, R, c.w, c.w_stride, c.x, c.x_stride, n, T, 0, R);
            /* one token at a time, rows split unevenly */
            for (int t = 0; t < T; t++) {
                const uint8_t *xt = (const uint8_t *)c.x + t * c.x_stride;
                mm(part + (size_t)t * R, R, c.w, c.w_stride, xt, c.x_stride, n, 1, 0, 3);
                mm(part + (size_t)t * R, R, c.w, c.w_stride, xt, c.x_stride, n, 1, 3, R);
            }
            if (memcmp(full, part, sizeof(float) * R * T)) {
                printf("FAIL batch invariance %s [%s] n %d rows %d: n_tokens %d vs 1\n",
                       gguf_type_name_any(type), v->name, n, R, T);
                fails++;
            }
            /* token windows of odd sizes at odd offsets, rows in 3 pieces */
            memset(part, 0, sizeof(float) * R * T);
            for (int t0 = 0, w = 3; t0 < T; t0 += w, w = w % 7 + 2) {
                int nt = T - t0 < w ? T - t0 : w;
                const uint8_t *xt = (const uint8_t *)c.x + t0 * c.x_stride;
                int cut1 = R / 3 + 1, cut2 = 2 * R / 3 + 1;
                float *yt = part + (size_t)t0 * R;
                mm(yt, R, c.w, c.w_stride, xt, c.x_stride, n, nt, 0, cut1);
                mm(yt, R, c.w, c.w_stride, xt, c.x_stride, n, nt, cut1, cut2);
                mm(yt, R, c.w, c.w_stride, xt, c.x_stride, n, nt, cut2, R);
            }
            if (memcmp(full, part, sizeof(float) * R * T)) {
                printf("FAIL batch invariance %s [%s] n %d rows %d: token windows\n",
                       gguf_type_name_any(type), v->name, n, R);
                fails++;
            }
            free(full);
            free(part);
            mm_case_free(&c);
        }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------- */
/* element-wise and row ops */

static const int ROW_NS[] = {32, 64, 96, 576, 1536, 8224};       /* multiples of 32 (Q8A) */
static const int ANY_NS[] = {1, 7, 16, 17, 33, 100, 576, 1536}; /* anything */

/* Inputs for row ops: fill() plus specials (big, tiny, ties for rounding). */
static void fill_row(float *x, int n, int seed, int salt) {
    rng_seed((uint64_t)seed * 7777u + (uint64_t)salt * 131u + (uint64_t)n);
    fill(x, (size_t)n, n);
    if (n > 40) {
        x[3] = 1e4f;
        x[5] = -3e-5f;
        x[7] = 0.5f; /* with x[3] the block's scale: exercises exact halves */
    }
}

static bool bytes_equal(const char *op, const char *var, int n, int seed, const void *a,
                        const void *b, size_t len) {
    if (!memcmp(a, b, len)) return true;
    const uint8_t *pa = a, *pb = b;
    size_t i = 0;
    while (pa[i] == pb[i]) i++;
    printf("FAIL %s [%s] n %d seed %d: first differing byte %zu (%02x vs ref %02x)\n", op, var, n,
           seed, i, pa[i], pb[i]);
    return false;
}

/* Bytes of an activation row that carry data (not the padding). */
static size_t act_data_bytes(int act, int n) {
    return act == KN_ACT_Q8A ? (size_t)n + (size_t)(n / QK) * 8
                             : (size_t)n * (act == KN_ACT_BF16 ? 2 : 4);
}

/* Activation rows produced by a fused op vs the reference: the values
 * (dequantized) may differ by one quantum where the float inputs differed
 * by rounding and a value sat at a rounding boundary. */
static bool act_close(const char *op, const char *var, int act, int n, int seed, const void *got,
                      const void *ref, double rtol) {
    float *a = xmalloc(sizeof(float) * n), *b = xmalloc(sizeof(float) * n);
    double *sc = xmalloc(sizeof(double) * n);
    act_values(act, got, n, a);
    act_values(act, ref, n, b);
    for (int i = 0; i < n; i++) {
        double q = 0;
        if (act == KN_ACT_Q8A) {
            const float *dr = (const float *)((const uint8_t *)ref + n);
            q = 1.01 * dr[i / QK];
        } else if (act == KN_ACT_BF16) {
            q = fabs(b[i]) * (1.0 / 128); /* one bf16 ulp */
        }
        sc[i] = q;
    }
    char shape[32];
    snprintf(shape, sizeof(shape), "n %d", n);
    struct cmp c = {1.0, rtol, act == KN_ACT_F32 ? 1e-12 : 1e-4};
    bool ok = check(op, var, shape, seed, a, b, sc, (size_t)n, c);
    free(a);
    free(b);
    free(sc);
    return ok;
}

static void test_act(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    static const char *names[] = {"act F32", "act BF16", "act Q8A"};
    /* the formats with one scale per 256 (Q8K, Q8A_Q8K): tests/unit_kquant.c */
    for (int act = 0; act <= KN_ACT_Q8A; act++) {
        const int *ns = act == KN_ACT_Q8A ? ROW_NS : ANY_NS;
        int nn = act == KN_ACT_Q8A ? (int)(sizeof(ROW_NS) / sizeof(int)) : (int)(sizeof(ANY_NS) / sizeof(int));
        for (int k = 0; k < nn; k++)
            for (int seed = 1; seed <= 3; seed++) {
                int n = ns[k];
                float *x = xmalloc(sizeof(float) * n);
                fill_row(x, n, seed, act);
                if (act == KN_ACT_BF16 && n >= 17) { /* specials the rounding must keep */
                    x[0] = NAN;
                    x[1] = INFINITY;
                    x[2] = -INFINITY;
                    x[4] = 1e-40f;  /* denormal */
                    x[6] = 1.0f + 0x1p-8f; /* tie: to even */
                    x[8] = 1.0f + 0x1p-8f + 0x1p-7f;
                    x[9] = 3.4e38f; /* rounds to inf */
                }
                if (act == KN_ACT_Q8A && seed == 2) { /* the reference's q8_round cases */
                    x[1] = NAN;   /* skipped by amax, quantized to 0 */
                    x[3] = INFINITY;
                    x[n - 1] = -INFINITY; /* +-inf: +-127 */
                    if (n >= 64)  /* a block whose amax is subnormal: id is inf */
                        for (int i = 32; i < 64; i++) x[i] = 1e-42f * (float)(i % 5 - 2);
                }
                size_t rs = kn_act_row_size(act, n);
                uint8_t *a = xmalloc(rs), *b = xmalloc(rs);
                memset(a, 0, rs);
                memset(b, 0, rs);
                v->ops->act[act](a, x, n);
                kn_ops_ref.act[act](b, x, n);
                /* the conversions are exact: the reference's format, bit for bit */
                if (!bytes_equal(names[act], v->name, n, seed, a, b, act_data_bytes(act, n))) fails++;
                free(a);
                free(b);
                free(x);
            }
    }
    assert_int_equal(fails, 0);
}

static double rms_rtol(int n) { (void)n; return 4.0 * FLT_EPSILON; }

static void test_rmsnorm(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (size_t k = 0; k < sizeof(ANY_NS) / sizeof(int); k++)
        for (int seed = 1; seed <= 3; seed++) {
            int n = ANY_NS[k];
            float *x = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n);
            float *y = xmalloc(sizeof(float) * n), *yr = xmalloc(sizeof(float) * n);
            fill_row(x, n, seed, 11);
            fill_row(w, n, seed, 12);
            kn_ops_ref.rmsnorm(yr, x, w, n, 1e-5f);
            v->ops->rmsnorm(y, x, w, n, 1e-5f);
            char shape[32];
            snprintf(shape, sizeof(shape), "n %d", n);
            struct cmp c = {1e-30, rms_rtol(n), 1e-12};
            if (!check("rmsnorm", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            /* in place (y aliases x) */
            memcpy(y, x, sizeof(float) * n);
            v->ops->rmsnorm(y, y, w, n, 1e-5f);
            if (!check("rmsnorm in place", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            free(x);
            free(w);
            free(y);
            free(yr);
        }
    assert_int_equal(fails, 0);
}

static void test_add_rmsnorm(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (size_t k = 0; k < sizeof(ANY_NS) / sizeof(int); k++)
        for (int seed = 1; seed <= 3; seed++) {
            int n = ANY_NS[k];
            float *res = xmalloc(sizeof(float) * n), *resr = xmalloc(sizeof(float) * n);
            float *d = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n);
            float *y = xmalloc(sizeof(float) * n), *yr = xmalloc(sizeof(float) * n);
            fill_row(res, n, seed, 21);
            fill_row(d, n, seed, 22);
            fill_row(w, n, seed, 23);
            memcpy(resr, res, sizeof(float) * n);
            kn_ops_ref.add_rmsnorm(resr, d, yr, w, n, 1e-6f);
            v->ops->add_rmsnorm(res, d, y, w, n, 1e-6f);
            char shape[32];
            snprintf(shape, sizeof(shape), "n %d", n);
            struct cmp c = {1e-30, rms_rtol(n), 1e-12};
            /* the residual sum is one float add per element: exact */
            if (!bytes_equal("add_rmsnorm residual", v->name, n, seed, res, resr, sizeof(float) * n))
                fails++;
            if (!check("add_rmsnorm", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            free(res);
            free(resr);
            free(d);
            free(w);
            free(y);
            free(yr);
        }
    assert_int_equal(fails, 0);
}

/* rmsnorm_act and silu_mul_act: the fused op against the reference's
 * unfused composition, for every activation format. */
static void test_fused_act(void **state, bool silu) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (int act = 0; act <= KN_ACT_Q8A; act++) /* Q8K formats: unit_kquant.c */
        for (size_t k = 0; k < sizeof(ROW_NS) / sizeof(int); k++)
            for (int seed = 1; seed <= 3; seed++) {
                int n = ROW_NS[k];
                float *x = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n);
                fill_row(x, n, seed, 31 + act);
                fill_row(w, n, seed, 41 + act);
                size_t rs = kn_act_row_size(act, n);
                uint8_t *a = xmalloc(rs), *b = xmalloc(rs);
                const char *op;
                if (silu) {
                    op = "silu_mul_act";
                    v->ops->silu_mul_act(a, x, w, n, act);
                    kn_ops_ref.silu_mul_act(b, x, w, n, act);
                } else {
                    op = "rmsnorm_act";
                    v->ops->rmsnorm_act(a, x, w, n, 1e-5f, act);
                    kn_ops_ref.rmsnorm_act(b, x, w, n, 1e-5f, act);
                }
                char name[48];
                snprintf(name, sizeof(name), "%s %s", op,
                         act == KN_ACT_Q8A ? "Q8A" : act == KN_ACT_BF16 ? "BF16" : "F32");
                if (!act_close(name, v->name, act, n, seed, a, b, silu ? 1e-6 : rms_rtol(n))) fails++;
                free(a);
                free(b);
                free(x);
                free(w);
            }
    assert_int_equal(fails, 0);
}
static void test_rmsnorm_act(void **state) { test_fused_act(state, false); }
static void test_silu_mul_act(void **state) { test_fused_act(state, true); }

/* The fused ops of the reference are the unfused compositions (a test
 * that the definition is kept, independent of the variants). */
static void test_ref_fused_is_composition(void **state) {
    (void)state;
    int n = 576;
    float *x = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n);
    float *t = xmalloc(sizeof(float) * n);
    fill_row(x, n, 1, 51);
    fill_row(w, n, 1, 52);
    for (int act = 0; act <= KN_ACT_Q8A; act++) { /* Q8K formats: unit_kquant.c */
        size_t rs = kn_act_row_size(act, n);
        uint8_t *a = xmalloc(rs), *b = xmalloc(rs);
        kn_ops_ref.rmsnorm_act(a, x, w, n, 1e-5f, act);
        kn_ops_ref.rmsnorm(t, x, w, n, 1e-5f);
        kn_ops_ref.act[act](b, t, n);
        assert_memory_equal(a, b, act_data_bytes(act, n));
        kn_ops_ref.silu_mul_act(a, x, w, n, act);
        kn_ops_ref.silu_mul(t, x, w, n);
        kn_ops_ref.act[act](b, t, n);
        assert_memory_equal(a, b, act_data_bytes(act, n));
        free(a);
        free(b);
    }
    free(x);
    free(w);
    free(t);
}

static void test_silu_mul(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (size_t k = 0; k < sizeof(ANY_NS) / sizeof(int); k++)
        for (int seed = 1; seed <= 3; seed++) {
            int n = ANY_NS[k];
            float *g = xmalloc(sizeof(float) * n), *u = xmalloc(sizeof(float) * n);
            float *y = xmalloc(sizeof(float) * n), *yr = xmalloc(sizeof(float) * n);
            fill_row(g, n, seed, 61);
            fill_row(u, n, seed, 62);
            for (int i = 0; i < n; i += 13) g[i] *= 10.0f; /* tails of the sigmoid */
            if (n > 8) {
                g[1] = -100.0f; /* e^100 overflows: y = -0 */
                g[2] = 100.0f;
                g[4] = -87.0f;
                g[6] = 0.0f;
            }
            kn_ops_ref.silu_mul(yr, g, u, n);
            v->ops->silu_mul(y, g, u, n);
            char shape[32];
            snprintf(shape, sizeof(shape), "n %d", n);
            struct cmp c = {1e-37, 1e-6, 1e-12};
            if (!check("silu_mul", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            /* y aliases g, as the forward pass calls it */
            memcpy(y, g, sizeof(float) * n);
            v->ops->silu_mul(y, y, u, n);
            if (!check("silu_mul in place", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            free(g);
            free(u);
            free(y);
            free(yr);
        }
    assert_int_equal(fails, 0);
}

static void test_rope(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    static const int hds[] = {64, 128, 32, 80, 2, 96};
    static const int heads[] = {1, 3, 9};
    static const int poss[] = {0, 1, 7, 511, 4095, 32767};
    int fails = 0;
    for (size_t a = 0; a < sizeof(hds) / sizeof(int); a++)
        for (size_t b = 0; b < sizeof(heads) / sizeof(int); b++)
            for (size_t p = 0; p < sizeof(poss) / sizeof(int); p++) {
                int hd = hds[a], nh = heads[b], pos = poss[p], n = hd * nh;
                int seed = (int)(a + b + p) % 3 + 1;
                float *x = xmalloc(sizeof(float) * n), *xr = xmalloc(sizeof(float) * n);
                float *sc = NULL, *inv = xmalloc(sizeof(float) * hd / 2);
                double *scale = xmalloc(sizeof(double) * n);
                (void)sc;
                double base = (p % 2) ? 100000.0 : 10000.0;
                for (int i = 0; i < hd / 2; i++) inv[i] = (float)pow(base, -2.0 * i / hd);
                fill_row(x, n, seed, 71);
                memcpy(xr, x, sizeof(float) * n);
                for (int i = 0; i < n; i += 2) scale[i] = scale[i + 1] = fabs(x[i]) + fabs(x[i + 1]);
                kn_ops_ref.rope(xr, nh, hd, pos, inv);
                v->ops->rope(x, nh, hd, pos, inv);
                char shape[64];
                snprintf(shape, sizeof(shape), "n_head %d head_dim %d pos %d", nh, hd, pos);
                struct cmp c = {1e-6, 0.0, 1e-11};
                if (!check("rope", v->name, shape, seed, x, xr, scale, n, c)) fails++;
                free(x);
                free(xr);
                free(inv);
                free(scale);
            }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------- */
/* the reference against numpy golden tensors (tests/gen/gen_kernels.py) */

struct garr {
    uint32_t dtype; /* 0 f32, 1 u8, 2 f64 */
    uint64_t count;
    void *data;
};
struct grec {
    char name[17];
    uint32_t n_int, n_arr;
    int32_t ints[8];
    struct garr arr[8];
};

static bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

/* One record; false at EOF or on a malformed file (then *bad is set). */
static bool grec_read(FILE *f, struct grec *r, bool *bad) {
    memset(r, 0, sizeof(*r));
    *bad = true;
    if (!read_exact(f, r->name, 16)) return false;
    if (!read_exact(f, &r->n_int, 4) || r->n_int > 8) return false;
    if (!read_exact(f, r->ints, 4 * r->n_int)) return false;
    if (!read_exact(f, &r->n_arr, 4) || r->n_arr > 8) return false;
    for (uint32_t i = 0; i < r->n_arr; i++) {
        struct garr *a = &r->arr[i];
        if (!read_exact(f, &a->dtype, 4) || !read_exact(f, &a->count, 8) || a->dtype > 2 ||
            a->count > (1u << 24))
            return false;
        size_t es = a->dtype == 0 ? 4 : a->dtype == 1 ? 1 : 8;
        a->data = xmalloc(a->count * es + 64);
        if (!read_exact(f, a->data, a->count * es)) return false;
    }
    *bad = false;
    return true;
}

static void grec_free(struct grec *r) {
    for (uint32_t i = 0; i < r->n_arr; i++) free(r->arr[i].data);
}

static bool golden_one(const struct grec *r) {
    const char *nm = r->name;
    char shape[64];
    if (!strcmp(nm, "rmsnorm")) {
        int n = r->ints[0];
        const float *x = r->arr[0].data, *w = r->arr[1].data, *eps = r->arr[2].data;
        float *y = xmalloc(sizeof(float) * n);
        kn_rmsnorm_ref(y, x, w, n, eps[0]);
        snprintf(shape, sizeof(shape), "n %d", n);
        bool ok = check("golden rmsnorm", "ref", shape, 0, y, r->arr[3].data, NULL, n,
                        (struct cmp){1e-30, 6 * FLT_EPSILON, 1e-12});
        free(y);
        return ok;
    }
    if (!strcmp(nm, "rope")) {
        int nh = r->ints[0], hd = r->ints[1], pos = r->ints[2], n = nh * hd;
        float *x = xmalloc(sizeof(float) * n);
        double *sc = xmalloc(sizeof(double) * n);
        memcpy(x, r->arr[0].data, sizeof(float) * n);
        for (int i = 0; i < n; i += 2) sc[i] = sc[i + 1] = fabs(x[i]) + fabs(x[i + 1]);
        kn_rope_ref(x, nh, hd, pos, r->arr[1].data);
        snprintf(shape, sizeof(shape), "n_head %d head_dim %d pos %d", nh, hd, pos);
        bool ok = check("golden rope", "ref", shape, 0, x, r->arr[2].data, sc, n,
                        (struct cmp){1e-6, 0, 1e-12});
        free(x);
        free(sc);
        return ok;
    }
    if (!strcmp(nm, "silu_mul")) {
        int n = r->ints[0];
        float *y = xmalloc(sizeof(float) * n);
        kn_silu_mul_ref(y, r->arr[0].data, r->arr[1].data, n);
        snprintf(shape, sizeof(shape), "n %d", n);
        bool ok = check("golden silu_mul", "ref", shape, 0, y, r->arr[2].data, NULL, n,
                        (struct cmp){1e-37, 5e-7, 1e-12});
        free(y);
        return ok;
    }
    if (!strcmp(nm, "q8a")) {
        int n = r->ints[0], nb = n / QK;
        uint8_t *a = xmalloc(kn_act_row_size(KN_ACT_Q8A, n));
        kn_act_q8a_ref(a, r->arr[0].data, n);
        /* the format is exact: qs, then d, then s */
        bool ok = bytes_equal("golden q8a qs", "ref", n, 0, a, r->arr[1].data, (size_t)n) &&
                  bytes_equal("golden q8a d", "ref", n, 0, a + n, r->arr[2].data, 4 * (size_t)nb) &&
                  bytes_equal("golden q8a s", "ref", n, 0, a + n + 4 * nb, r->arr[3].data,
                              4 * (size_t)nb);
        free(a);
        return ok;
    }
    if (!strcmp(nm, "matmul")) {
        int type = r->ints[0], n = r->ints[1], rows = r->ints[2], nt = r->ints[3];
        int act = kn_act_for_type(type);
        size_t ws = gguf_row_size(type, (uint64_t)n), xs = kn_act_row_size(act, n);
        if (r->arr[0].count != ws * rows) {
            printf("FAIL golden matmul: %zu weight bytes for %s n %d rows %d\n",
                   (size_t)r->arr[0].count, gguf_type_name_any(type), n, rows);
            return false;
        }
        uint8_t *x = xmalloc(xs * nt);
        float *y = xmalloc(sizeof(float) * rows * nt);
        for (int t = 0; t < nt; t++)
            kn_ops_ref.act[act](x + xs * t, (const float *)r->arr[1].data + (size_t)t * n, n);
        kn_ops_ref.matmul[type](y, rows, r->arr[0].data, ws, x, xs, n, nt, 0, rows);
        snprintf(shape, sizeof(shape), "%s n %d rows %d n_tokens %d", gguf_type_name_any(type), n, rows, nt);
        bool ok = check("golden matmul", "ref", shape, 0, y, r->arr[2].data, r->arr[3].data,
                        (size_t)rows * nt, (struct cmp){mm_atol_c(type, n), 0, 1e-10});
        free(x);
        free(y);
        return ok;
    }
    printf("FAIL golden: unknown record '%s'\n", nm);
    return false;
}

static void test_golden(void **state) {
    (void)state;
    FILE *f = fopen("tests/data/kernels_golden.bin", "rb");
    if (!f) fail_msg("tests/data/kernels_golden.bin missing (run from the repo root)");
    char magic[8];
    uint32_t count = 0;
    assert_true(read_exact(f, magic, 8) && !memcmp(magic, "ANVKRN01", 8));
    assert_true(read_exact(f, &count, 4));
    int fails = 0, seen = 0;
    bool kinds[5] = {false};
    for (uint32_t i = 0; i < count; i++) {
        struct grec r;
        bool bad;
        if (!grec_read(f, &r, &bad)) {
            grec_free(&r);
            fclose(f);
            fail_msg("tests/data/kernels_golden.bin: malformed record %u", i);
        }
        static const char *names[5] = {"rmsnorm", "rope", "silu_mul", "q8a", "matmul"};
        for (int k = 0; k < 5; k++)
            if (!strcmp(r.name, names[k])) kinds[k] = true;
        if (!golden_one(&r)) fails++;
        seen++;
        grec_free(&r);
    }
    fclose(f);
    assert_int_equal(seen, (int)count);
    for (int k = 0; k < 5; k++) assert_true(kinds[k]);
    assert_int_equal(fails, 0);
}

/* Packing rows from several tensors (as QKV is) gives the same packed
 * matrix as one tensor, and a product over a tile-aligned window of the
 * packed matrix (the lm_head's tiles) equals the same rows of the whole. */
/* Weights (rows x n, random) and activations (n_tokens rows) of type for
 * test_packed_parts; any quantized type, the K-quants with their Q8K rows
 * (mm_case_make reads activations as Q8A or floats only). */
struct parts_case {
    uint8_t *w, *x;
    size_t w_stride, x_stride;
};
static void parts_make(struct parts_case *c, int type, int n, int rows, int n_tokens) {
    int act = kn_act_for_type(type);
    c->w_stride = gguf_row_size(type, (uint64_t)n);
    c->x_stride = kn_act_row_size(act, n);
    c->w = xmalloc(c->w_stride * rows);
    c->x = xmalloc(c->x_stride * n_tokens);
    float *f = xmalloc((size_t)n * sizeof(float) * (rows > n_tokens ? rows : n_tokens));
    rng_seed((uint64_t)type * 7919u + (uint64_t)n);
    fill(f, (size_t)n * rows, n);
    /* the searched quantizers of src/quantize: they do every type (the
     * kernels' reference quantizer only the legacy ones) */
    for (int r = 0; r < rows; r++)
        assert_true(qt_quantize_row(type, f + (size_t)r * n, c->w + r * c->w_stride, n));
    fill(f, (size_t)n * n_tokens, n);
    for (int t = 0; t < n_tokens; t++) kn_ops_ref.act[act](c->x + t * c->x_stride, f + (size_t)t * n, n);
    free(f);
}

/* MXFP4 packed (avx512, P16) against the reference bit for bit, with the
 * E8M0 scales that make subnormal halves (0, 1), the smallest normal (2)
 * and a spread of ordinary ones, over shapes that cover one token (the
 * one-stream path), register tiles of several tokens, a partial last tile
 * and a row range inside a tile. */
static void test_mxfp4_packed_exact(void **state) {
    (void)state;
    const struct kn_ops *ops = kn_select("avx512");
    if (!ops || !ops->pack_size || !ops->matmul_packed[ANVIL_TYPE_MXFP4]) skip();
    static const int shapes[][3] = {{32, 16, 1}, {96, 37, 1}, {96, 37, 7}, {2880, 40, 1},
                                    {2880, 40, 13}, {64, 17, 300}};
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int n = shapes[si][0], rows = shapes[si][1], ntok = shapes[si][2], nb = n / QK;
        int act = kn_act_for_type(ANVIL_TYPE_MXFP4);
        size_t ws = gguf_row_size(ANVIL_TYPE_MXFP4, (uint64_t)n), xs = kn_act_row_size(act, n);
        uint8_t *w = xmalloc(ws * rows), *x = xmalloc(xs * ntok);
        float *f = xmalloc(sizeof(float) * n);
        rng_seed(4242u + (uint64_t)si);
        for (int r = 0; r < rows; r++)
            for (int b = 0; b < nb; b++) {
                struct blk_mxfp4 *blk = (struct blk_mxfp4 *)(w + r * ws) + b;
                uint32_t k = rng_u32() % 8;
                blk->e = k < 3 ? (uint8_t)k : (uint8_t)(100 + rng_u32() % 50);
                for (int j = 0; j < QK / 2; j++) blk->qs[j] = (uint8_t)rng_u32();
            }
        for (int t = 0; t < ntok; t++) {
            fill(f, (size_t)n, n);
            kn_ops_ref.act[act](x + t * xs, f, n);
        }
        size_t sz = ops->pack_size(ANVIL_TYPE_MXFP4, rows, n);
        assert_true(sz > 0);
        uint8_t *pw = xmalloc(sz);
        memset(pw, 0, sz);
        ops->pack_rows(ANVIL_TYPE_MXFP4, pw, n, 0, rows, w, ws);
        float *yr = xmalloc(sizeof(float) * rows * ntok), *yp = xmalloc(sizeof(float) * rows * ntok);
        const int ranges[][2] = {{0, rows}, {3, rows - 2}};
        for (int k = 0; k < 2; k++) {
            int r0 = ranges[k][0], r1 = ranges[k][1];
            memset(yr, 0, sizeof(float) * rows * ntok);
            memset(yp, 0, sizeof(float) * rows * ntok);
            kn_ops_ref.matmul[ANVIL_TYPE_MXFP4](yr, rows, w, ws, x, xs, n, ntok, r0, r1);
            ops->matmul_packed[ANVIL_TYPE_MXFP4](yp, rows, pw, 0, x, xs, n, ntok, r0, r1);
            for (int t = 0; t < ntok; t++)
                for (int r = r0; r < r1; r++) {
                    float u = yr[(size_t)t * rows + r], v = yp[(size_t)t * rows + r];
                    if (memcmp(&u, &v, sizeof(float)))
                        fail_msg("n %d rows %d tokens %d [%d,%d): y[%d][%d] ref %a packed %a", n,
                                 rows, ntok, r0, r1, t, r, (double)u, (double)v);
                }
        }
        free(yr);
        free(yp);
        free(pw);
        free(f);
        free(w);
        free(x);
    }
}

/* The block structs of kernels/blocks.h are the layouts of the type table
 * (gguf/gguf_types.h, checked against ggml's numbers in unit_gguf.c). */
static void test_block_sizes(void **state) {
    (void)state;
    static const struct {
        int type;
        size_t size, blck;
    } blk[] = {
        {ANVIL_TYPE_Q8_0, sizeof(struct blk_q8_0), QK},     {ANVIL_TYPE_Q4_0, sizeof(struct blk_q4_0), QK},
        {ANVIL_TYPE_Q4_1, sizeof(struct blk_q4_1), QK},     {ANVIL_TYPE_Q5_0, sizeof(struct blk_q5_0), QK},
        {ANVIL_TYPE_Q5_1, sizeof(struct blk_q5_1), QK},     {ANVIL_TYPE_IQ4_NL, sizeof(struct blk_iq4_nl), QK},
        {ANVIL_TYPE_Q2_K, sizeof(struct blk_q2_k), QK_K},   {ANVIL_TYPE_Q3_K, sizeof(struct blk_q3_k), QK_K},
        {ANVIL_TYPE_Q4_K, sizeof(struct blk_q4_k), QK_K},   {ANVIL_TYPE_Q5_K, sizeof(struct blk_q5_k), QK_K},
        {ANVIL_TYPE_Q6_K, sizeof(struct blk_q6_k), QK_K},   {ANVIL_TYPE_IQ4_XS, sizeof(struct blk_iq4_xs), QK_K},
        {ANVIL_TYPE_Q8_K, sizeof(struct blk_q8_k), QK_K},   {ANVIL_TYPE_F16, sizeof(kn_f16), 1},
        {ANVIL_TYPE_BF16, sizeof(kn_bf16), 1},              {ANVIL_TYPE_F32, sizeof(float), 1},
        {ANVIL_TYPE_MXFP4, sizeof(struct blk_mxfp4), QK},
    };
    for (size_t i = 0; i < sizeof(blk) / sizeof(blk[0]); i++) {
        uint32_t bl, by;
        assert_true(gguf_type_block(blk[i].type, &bl, &by));
        assert_int_equal(by, blk[i].size);
        assert_int_equal(bl, blk[i].blck);
    }
}

static void test_packed_parts(void **state) {
    (void)state;
    const struct kn_ops *ops = kn_select("avx512");
    if (!ops || !ops->pack_size) skip();
    static const int types[] = {ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q4_1, ANVIL_TYPE_Q8_0, ANVIL_TYPE_Q4_K,
                                ANVIL_TYPE_Q5_K, ANVIL_TYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        int type = types[ti], n = ti < 3 ? 576 : 768, rows = 40, nt = 9;
        struct parts_case c;
        parts_make(&c, type, n, rows, nt);
        size_t sz = ops->pack_size(type, rows, n), tsz = ops->pack_size(type, KN_PACK_ROWS, n);
        assert_true(sz > 0 && sz == 3 * tsz);
        uint8_t *a = xmalloc(sz), *b = xmalloc(sz);
        memset(a, 0, sz);
        memset(b, 0, sz);
        ops->pack_rows(type, a, n, 0, rows, c.w, c.w_stride);
        /* parts of 7, 13 and 20 rows, packed in reverse order */
        const uint8_t *w = c.w;
        ops->pack_rows(type, b, n, 20, 20, w + 20 * c.w_stride, c.w_stride);
        ops->pack_rows(type, b, n, 7, 13, w + 7 * c.w_stride, c.w_stride);
        ops->pack_rows(type, b, n, 0, 7, w, c.w_stride);
        assert_memory_equal(a, b, sz);
        float *full = xmalloc(sizeof(float) * rows * nt), *win = xmalloc(sizeof(float) * 24 * nt);
        ops->matmul_packed[type](full, rows, a, 0, c.x, c.x_stride, n, nt, 0, rows);
        ops->matmul_packed[type](win, 24, a + tsz, 0, c.x, c.x_stride, n, nt, 0, 24);
        /* bit-identical, or NaN in both: the Q4_K data here has a row
         * that gives NaN (the reference's too), and which NaN's bits come
         * out depends on operand order, which the compiler may swap */
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < 24; r++) {
                float u = win[(size_t)t * 24 + r], v = full[(size_t)t * rows + 16 + r];
                assert_true((isnan(u) && isnan(v)) || !memcmp(&u, &v, sizeof(float)));
            }
        /* padding rows are zero and never written out */
        assert_int_equal(ops->pack_size(type, rows, n + 1), 0);
        free(full);
        free(win);
        free(a);
        free(b);
        free(c.w);
        free(c.x);
    }
}

/* ---------------------------------------------------------------------- */
/* test list: every op x every variant */

/* the encoder ops (kernels/cpu/{ref,avx2,avx512}/enc.c): LayerNorm with bias, rows with a
 * large mean included (the variants centre before squaring), in place too;
 * the erf GELU against erff, with the AVX variants' A&S 7.1.28 error bound
 * (3e-7 on erf, so 1.5e-7 |x| on the GELU) plus float rounding */
static void test_layernorm(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (size_t k = 0; k < sizeof(ANY_NS) / sizeof(int); k++)
        for (int seed = 1; seed <= 3; seed++) {
            int n = ANY_NS[k];
            float *x = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n);
            float *b = xmalloc(sizeof(float) * n);
            float *y = xmalloc(sizeof(float) * n), *yr = xmalloc(sizeof(float) * n);
            fill_row(x, n, seed, 81);
            fill_row(w, n, seed, 82);
            fill_row(b, n, seed, 83);
            /* seed 3: a row far from 0 (a mean of 4 spreads); farther, the
             * float rounding of the mean alone exceeds the tolerance */
            if (seed == 3) {
                double s = 0, ss = 0;
                for (int i = 0; i < n; i++) s += x[i];
                for (int i = 0; i < n; i++) ss += (x[i] - s / n) * (x[i] - s / n);
                float sh = 4.0f * (float)sqrt(ss / n);
                for (int i = 0; i < n; i++) x[i] += sh;
            }
            kn_ops_ref.layernorm(yr, x, w, b, n, 1e-12f);
            v->ops->layernorm(y, x, w, b, n, 1e-12f);
            char shape[32];
            snprintf(shape, sizeof(shape), "n %d", n);
            /* a row of one element normalizes to 0 (then y = b) */
            struct cmp c = {2e-5, 2e-5, 1e-9};
            if (!check("layernorm", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            memcpy(y, x, sizeof(float) * n);
            v->ops->layernorm(y, y, w, b, n, 1e-12f);
            if (!check("layernorm in place", v->name, shape, seed, y, yr, NULL, n, c)) fails++;
            free(x);
            free(w);
            free(b);
            free(y);
            free(yr);
        }
    assert_int_equal(fails, 0);
}

static void test_gelu_erf(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (size_t k = 0; k < sizeof(ANY_NS) / sizeof(int); k++)
        for (int seed = 1; seed <= 3; seed++) {
            int n = ANY_NS[k];
            float *x = xmalloc(sizeof(float) * n), *y = xmalloc(sizeof(float) * n);
            float *yr = xmalloc(sizeof(float) * n);
            double *sc = xmalloc(sizeof(double) * n);
            fill_row(x, n, seed, 91);
            for (int i = 0; i < n; i += 7) x[i] *= 4.0f; /* the tails */
            if (n > 8) {
                x[1] = -30.0f; /* 0 (-0) */
                x[2] = 30.0f;  /* x */
                x[3] = 0.0f;
            }
            for (int i = 0; i < n; i++) sc[i] = 1.0 + fabs(x[i]);
            kn_ops_ref.gelu_erf(yr, x, n);
            v->ops->gelu_erf(y, x, n);
            char shape[32];
            snprintf(shape, sizeof(shape), "n %d", n);
            struct cmp c = {4e-7, 1e-6, 1e-11};
            if (!check("gelu_erf", v->name, shape, seed, y, yr, sc, n, c)) fails++;
            memcpy(y, x, sizeof(float) * n);
            v->ops->gelu_erf(y, y, n);
            if (!check("gelu_erf in place", v->name, shape, seed, y, yr, sc, n, c)) fails++;
            free(x);
            free(y);
            free(yr);
            free(sc);
        }
    assert_int_equal(fails, 0);
}

struct tdef {
    const char *op;
    CMUnitTestFunction fn;
};
static const struct tdef TESTS[] = {
    {"matmul_Q4_1", test_matmul_Q4_1}, {"matmul_Q8_0", test_matmul_Q8_0},
    {"matmul_Q4_0", test_matmul_Q4_0}, {"matmul_Q5_0", test_matmul_Q5_0},
    {"matmul_Q5_1", test_matmul_Q5_1}, {"matmul_MXFP4", test_matmul_MXFP4},
    {"matmul_F16", test_matmul_F16},
    {"matmul_BF16", test_matmul_BF16}, {"matmul_F32", test_matmul_F32},
    {"batch_invariance", test_batch_invariance},
    {"act", test_act},
    {"rmsnorm", test_rmsnorm},
    {"add_rmsnorm", test_add_rmsnorm},
    {"rmsnorm_act", test_rmsnorm_act},
    {"silu_mul", test_silu_mul},
    {"silu_mul_act", test_silu_mul_act},
    {"rope", test_rope},
    {"layernorm", test_layernorm},
    {"gelu_erf", test_gelu_erf},
};
enum { N_TDEF = sizeof(TESTS) / sizeof(TESTS[0]) };

int main(int argc, char **argv) {
    variants_init();
    static struct CMUnitTest tests[N_TDEF * N_VARIANTS + 5];
    static char names[N_TDEF * N_VARIANTS][64];
    const char *filter = argc > 1 ? argv[1] : NULL;
    size_t nt = 0;
    for (int i = 0; i < N_TDEF; i++)
        for (int v = 0; v < N_VARIANTS; v++) {
            /* ref vs ref is trivially equal; ref still gets the invariance test */
            if (v == 0 && strcmp(TESTS[i].op, "batch_invariance")) continue;
            snprintf(names[nt], sizeof(names[nt]), "%s/%s", TESTS[i].op, variants[v].name);
            if (filter && !strstr(names[nt], filter)) continue;
            tests[nt] = (struct CMUnitTest){names[nt], TESTS[i].fn, NULL, NULL, &variants[v]};
            nt++;
        }
    if (!filter || strstr("block_sizes", filter))
        tests[nt++] = (struct CMUnitTest){"block_sizes", test_block_sizes, NULL, NULL, NULL};
    if (!filter || strstr("packed_parts", filter))
        tests[nt++] = (struct CMUnitTest){"packed_parts", test_packed_parts, NULL, NULL, NULL};
    if (!filter || strstr("mxfp4_packed_exact", filter))
        tests[nt++] = (struct CMUnitTest){"mxfp4_packed_exact", test_mxfp4_packed_exact, NULL, NULL, NULL};
    if (!filter || strstr("golden", filter))
        tests[nt++] = (struct CMUnitTest){"golden", test_golden, NULL, NULL, NULL};
    if (!filter || strstr("ref_fused_is_composition", filter))
        tests[nt++] = (struct CMUnitTest){"ref_fused_is_composition", test_ref_fused_is_composition,
                                          NULL, NULL, NULL};
    return _cmocka_run_group_tests("kernels", tests, nt, NULL, NULL);
}
