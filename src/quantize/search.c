/*
 * search.c - the scale search every searched quantizer shares.
 *
 * Error measure (minimised by every type of this module):
 *
 *     E = sum_i w_i (x_i - xhat_i)^2,   w_i = sqrt(sigma2 + x_i^2)
 *
 * where xhat is what the block decodes to (after the f16 and integer
 * rounding of its scales) and sigma2 the mean of x^2 over the (super-)
 * block. The weights grow like |x| for large-magnitude elements - the
 * ones that carry the dot products - and stay near the block's RMS for
 * small ones: with no activation statistics (no importance matrix), large
 * weights are the best available proxy for the columns that matter, and
 * the floor keeps the plain squared error (what an unknown activation
 * sees on average) in the measure. On random and SmolLM2 rows against
 * llama.cpp's quantizers, this weighting is better than w = x^2 and
 * w = sigma2 + x^2 on plain RMSE and on the sigma2 + x^2 measure alike
 * (commit db51ce7; tests/py/test_quantizers.py checks plain RMSE per
 * type).
 *
 * Two fits, on one block of n <= 32 elements:
 *   - symmetric, x ~= s * lv[L] with lv a grid of levels (linear or the
 *     IQ4 table) and s of either sign;
 *   - affine, x ~= s * L + o with L in [0, nmax].
 * Each tries candidate scales spread around the max-magnitude (min/max)
 * solution, computes the indices by nearest rounding, and scores the
 * candidate by the error of its least-squares scale (and offset) for
 * those indices. The best candidate is then refined by alternating
 * rounding and least squares until the indices stop changing (neither
 * step can increase E). Sums are in double so that the ranking of
 * candidates does not depend on accumulation order subtleties.
 *
 * Not here: how scales are stored. The callers (blocks32.c, kquants.c)
 * quantize the scales to their fields and search again around them.
 *
 * Compare ggml-quants.c's make_qx_quants / make_qkx2_quants /
 * quantize_row_iq4_nl_impl, which search a similar candidate set; this
 * module scores every candidate by its refitted error, tries both ends
 * of asymmetric grids, and iterates the refit to a fixed point.
 */
#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

void qs_weights(const float *x, int n, float *w) {
    double s2 = 0.0;
    for (int i = 0; i < n; i++) s2 += (double)x[i] * x[i];
    float sigma2 = (float)(s2 / n);
    for (int i = 0; i < n; i++) w[i] = sqrtf(sigma2 + x[i] * x[i]);
}

float qs_f16_round(float v) {
    return kn_f16_to_f32(kn_f32_to_f16(v));
}

// ----------------------------------------------------------------------------
// grids

static const int8_t lv_q3[8] = {-4, -3, -2, -1, 0, 1, 2, 3};
static const int8_t lv_q5[32] = {-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6,
                                 -5,  -4,  -3,  -2,  -1,  0,   1,   2,  3,  4,  5,
                                 6,   7,   8,   9,   10,  11,  12,  13, 14, 15};
/* the non-linear IQ4 levels (GGUF's IQ4_NL / IQ4_XS value table) */
static const int8_t lv_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

#define LV64(b)                                                                       \
    b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11, \
        b + 12, b + 13, b + 14, b + 15
static const int8_t lv_q6[64] = {LV64(-32), LV64(-16), LV64(0), LV64(16)};
#undef LV64

const struct qs_grid qs_grid_q3 = {lv_q3, 8, true};
const struct qs_grid qs_grid_q5 = {lv_q5, 32, true};
const struct qs_grid qs_grid_q6 = {lv_q6, 64, true};
const struct qs_grid qs_grid_iq4 = {lv_iq4, 16, false};

/* Round to nearest (ties to even) for |v| < 2^22, without libm: adding
 * 1.5 * 2^23 leaves the integer in the low mantissa bits. Plain IEEE
 * arithmetic, so the same on every CPU (lrintf is a libm call here). */
static inline int round_int(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* For the IQ4 table: index of the largest level <= k for k in
 * [-128, 127] (0 below the first level), at [k + 128]. */
static const uint8_t iq4_floor[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5,
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10,
    10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 12,
    12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14,
    14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
};

static inline int nearest(const struct qs_grid *g, float v) {
    const int8_t *lv = g->lv;
    int k = g->k;
    /* clamp in float first: v may be huge (a tiny scale); NaN never
     * reaches here (inputs are checked by the caller) */
    float lo = lv[0], hi = lv[k - 1];
    v = v < lo ? lo : v > hi ? hi : v;
    if (g->linear) return round_int(v) - lv[0];
    /* the IQ4 table: the level below v and the one above; the level above
     * an integer floor(v) is >= floor(v) + 1 > v */
    int f = round_int(v - 0.5f); /* floor(v) up to ties, which do not matter here */
    f = f < -128 ? -128 : f > 127 ? 127 : f;
    int j = iq4_floor[f + 128];
    if (j + 1 < k && lv[j + 1] - v < v - lv[j]) j++;
    return j;
}

int qs_round(float v) {
    return round_int(v);
}

int qs_nearest(const struct qs_grid *g, float v) {
    return nearest(g, v);
}

// ----------------------------------------------------------------------------
// symmetric fit

/* relative spread of the candidate inverse scales around the max-magnitude
 * one, and how many on each side: coarse grids need a wider search */
static float sym_spread(const struct qs_grid *g) {
    switch (g->k) {
    case 8: return 0.30f;
    case 16: return 0.12f;
    case 32: return 0.12f;
    default: return 0.08f;
    }
}
#define SYM_STEPS 4

/* Indices for inverse scale u and the sums of the LS scale for them. */
static void sym_eval(const struct qs_grid *g, int n, const float *x, const float *w, float u,
                     uint8_t *L, double *sxg, double *sgg) {
    float a = 0.0f, b = 0.0f;
    for (int i = 0; i < n; i++) {
        int j = nearest(g, x[i] * u);
        L[i] = (uint8_t)j;
        float q = g->lv[j], wq = w[i] * q;
        a += wq * x[i];
        b += wq * q;
    }
    *sxg = a;
    *sgg = b;
}

float qs_fit_sym(const struct qs_grid *g, int n, const float *x, const float *w, uint8_t *L,
                 double *err) {
    float amax = 0.0f, xm = 0.0f;
    double sxx = 0.0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a, xm = x[i];
        sxx += (double)w[i] * x[i] * x[i];
    }
    if (!(amax > 1e-30f)) {
        int z = nearest(g, 0.0f);
        for (int i = 0; i < n; i++) L[i] = (uint8_t)z;
        if (err) *err = sxx;
        return 0.0f;
    }
    uint8_t Lc[QK_K / 8];
    double best_a = 0.0, best_b = 1.0; /* best ratio a^2/b, with a^2/b = 0 */
    bool have = false;
    const float spread = sym_spread(g);
    const int ends[2] = {g->lv[0], g->lv[g->k - 1]};
    for (int e = 0; e < 2; e++) {
        float u0 = (float)ends[e] / xm;
        for (int t = -SYM_STEPS; t <= SYM_STEPS; t++) {
            float u = u0 * (1.0f + spread * (float)t / SYM_STEPS);
            double a, b;
            sym_eval(g, n, x, w, u, Lc, &a, &b);
            if (b > 0.0 && (!have || a * a * best_b > best_a * best_a * b)) {
                best_a = a, best_b = b, have = true;
                memcpy(L, Lc, (size_t)n);
            }
        }
    }
    if (!have) { /* every candidate rounded to 0: cannot happen with amax > 0 */
        if (err) *err = sxx;
        return 0.0f;
    }
    /* refine: the LS scale of the best indices, re-round, repeat */
    for (int it = 0; it < 8; it++) {
        float s = (float)(best_a / best_b);
        double a, b;
        sym_eval(g, n, x, w, 1.0f / s, Lc, &a, &b);
        if (!(b > 0.0 && a * a * best_b > best_a * best_a * b)) break;
        best_a = a, best_b = b;
        memcpy(L, Lc, (size_t)n);
    }
    float s = (float)(best_a / best_b);
    if (err) { /* directly: the closed form above cancels in float */
        double e = 0.0;
        for (int i = 0; i < n; i++) {
            double r = (double)x[i] - (double)s * g->lv[L[i]];
            e += (double)w[i] * r * r;
        }
        *err = e;
    }
    return s;
}

// ----------------------------------------------------------------------------
// affine fit

struct aff_sums {
    double w, l, ll, x, xl;
};

static void aff_sums(int n, const float *x, const float *w, const uint8_t *L,
                     struct aff_sums *s) {
    float sw = 0, sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
        float wi = w[i], li = L[i], wl = wi * li;
        sw += wi;
        sl += wl;
        sll += wl * li;
        sx += wi * x[i];
        sxl += wl * x[i];
    }
    s->w = sw, s->l = sl, s->ll = sll, s->x = sx, s->xl = sxl;
}

/* Least-squares (s, o) for fixed indices and its error (sxx given). */
static double aff_solve(const struct aff_sums *t, double sxx, bool nonpos, double *s, double *o) {
    double D = t->w * t->ll - t->l * t->l;
    double ss = 0.0, oo;
    if (D > 1e-12 * t->w * t->ll) {
        ss = (t->w * t->xl - t->x * t->l) / D;
        oo = (t->ll * t->x - t->l * t->xl) / D;
        if (nonpos && oo > 0.0) {
            oo = 0.0;
            ss = t->ll > 0.0 ? t->xl / t->ll : 0.0;
        }
        if (ss < 0.0) { /* indices out of order with x: fall back to a constant */
            ss = 0.0;
            oo = t->w > 0.0 ? t->x / t->w : 0.0;
            if (nonpos && oo > 0.0) oo = 0.0;
        }
    } else {
        /* every index equal: the offset alone, or (when the offset may
         * not be positive) the scale alone, whichever fits better */
        oo = t->w > 0.0 ? t->x / t->w : 0.0;
        if (nonpos && oo > 0.0) {
            oo = 0.0;
            ss = t->ll > 0.0 && t->xl > 0.0 ? t->xl / t->ll : 0.0;
        }
    }
    *s = ss;
    *o = oo;
    return sxx - 2.0 * ss * t->xl - 2.0 * oo * t->x + ss * ss * t->ll + 2.0 * ss * oo * t->l +
           oo * oo * t->w;
}

static inline uint8_t aff_round(float v, int nmax) {
    v = v < 0.0f ? 0.0f : v > (float)nmax ? (float)nmax : v;
    return (uint8_t)round_int(v);
}

float qs_fit_affine(int nmax, bool nonpos_offset, int n, const float *x, const float *w,
                    uint8_t *L, float *o, double *err) {
    float mn = x[0], mx = x[0];
    double sxx = 0.0;
    for (int i = 0; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
        sxx += (double)w[i] * x[i] * x[i];
    }
    if (nonpos_offset && mn > 0.0f) mn = 0.0f;
    if (!(mx - mn > 1e-30f)) {
        memset(L, 0, (size_t)n);
        struct aff_sums t;
        aff_sums(n, x, w, L, &t);
        double s, oo;
        double e = aff_solve(&t, sxx, nonpos_offset, &s, &oo);
        *o = (float)oo;
        if (err) *err = e;
        return 0.0f;
    }
    /* candidates: nmax +- spread levels over the range [mn, mx] */
    const float spread = nmax <= 3 ? 1.0f : nmax <= 15 ? 1.5f : 2.0f;
    const int steps = 5;
    uint8_t Lc[QK_K / 8];
    double best = 0.0, bs = 0.0, bo = 0.0;
    bool have = false;
    for (int t = -steps; t <= steps; t++) {
        float u = ((float)nmax + spread * (float)t / steps) / (mx - mn);
        for (int i = 0; i < n; i++) Lc[i] = aff_round((x[i] - mn) * u, nmax);
        struct aff_sums sm;
        aff_sums(n, x, w, Lc, &sm);
        double s, oo, e = aff_solve(&sm, sxx, nonpos_offset, &s, &oo);
        if (!have || e < best) {
            best = e, bs = s, bo = oo, have = true;
            memcpy(L, Lc, (size_t)n);
        }
    }
    for (int it = 0; it < 8 && bs > 0.0; it++) {
        float is = (float)(1.0 / bs), off = (float)bo;
        for (int i = 0; i < n; i++) Lc[i] = aff_round((x[i] - off) * is, nmax);
        struct aff_sums sm;
        aff_sums(n, x, w, Lc, &sm);
        double s, oo, e = aff_solve(&sm, sxx, nonpos_offset, &s, &oo);
        if (!(e < best)) break;
        best = e, bs = s, bo = oo;
        memcpy(L, Lc, (size_t)n);
    }
    *o = (float)bo;
    if (err) {
        double e = 0.0;
        for (int i = 0; i < n; i++) {
            double r = (double)x[i] - ((double)(float)bs * L[i] + (double)(float)bo);
            e += (double)w[i] * r * r;
        }
        *err = e;
    }
    return (float)bs;
}

// ----------------------------------------------------------------------------
// rounding at a fixed scale

double qs_sym_round(const struct qs_grid *g, int n, const float *x, const float *w, float d,
                    uint8_t *L) {
    float e = 0.0f;
    if (d == 0.0f) {
        int z = nearest(g, 0.0f);
        for (int i = 0; i < n; i++) {
            L[i] = (uint8_t)z;
            e += w[i] * x[i] * x[i];
        }
        return e;
    }
    float id = 1.0f / d;
    for (int i = 0; i < n; i++) {
        int j = nearest(g, x[i] * id);
        L[i] = (uint8_t)j;
        float r = x[i] - d * (float)g->lv[j];
        e += w[i] * r * r;
    }
    return e;
}

double qs_aff_round(int nmax, int n, const float *x, const float *w, float d, float o,
                    uint8_t *L) {
    float e = 0.0f;
    if (d == 0.0f) {
        for (int i = 0; i < n; i++) {
            L[i] = 0;
            float r = x[i] - o;
            e += w[i] * r * r;
        }
        return e;
    }
    float id = 1.0f / d;
    for (int i = 0; i < n; i++) {
        L[i] = aff_round((x[i] - o) * id, nmax);
        float r = x[i] - (d * (float)L[i] + o);
        e += w[i] * r * r;
    }
    return e;
}

double qs_sym_ls(const struct qs_grid *g, int n, const float *x, const float *w,
                 const uint8_t *L) {
    double a = 0.0, b = 0.0;
    for (int i = 0; i < n; i++) {
        double q = g->lv[L[i]];
        a += (double)w[i] * x[i] * q;
        b += (double)w[i] * q * q;
    }
    return b > 0.0 ? a / b : 0.0;
}

double qs_aff_ls(int n, const float *x, const float *w, const uint8_t *L, bool nonpos_offset,
                 double *o) {
    double sxx = 0.0, s;
    for (int i = 0; i < n; i++) sxx += (double)w[i] * x[i] * x[i];
    struct aff_sums t;
    aff_sums(n, x, w, L, &t);
    aff_solve(&t, sxx, nonpos_offset, &s, o);
    return s;
}
