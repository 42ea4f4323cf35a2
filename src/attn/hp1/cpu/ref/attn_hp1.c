/*
 * attn_hp1.c (ref) - the specification of the HP1 kernels (attn_hp1.h):
 *
 *   - kn_hp1_ops_ref: steps 1-6 of attn_hp1.h in plain float C, one query
 *     vector and one position at a time. Slow on purpose: nothing here is
 *     shared between query vectors, so the per-position arithmetic is in
 *     plain sight;
 *   - kn_hp1_naive_ref: the formula in double over materialized scores,
 *     with a first-order bound on any variant's float rounding; the
 *     tests' oracle;
 *   - kn_hp1_gate_keys, kn_hp1_gate_queries, kn_hp1_scores_ref, kn_hp1_calibrate,
 *     kn_hp1_zero_frac: controlled sparsity for tests and benchmarks.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "anvil.h"
#include "core/core.h"
#include "attn/hp1/attn_hp1.h"

#define HDMAX KN_ATTN_MAX_HEAD_DIM

/* ---------------------------------------------------------------------- */
/* per-position arithmetic: the spec */

/* Row t of K (is_v = 0) or V of kv head h as float (exact: F16 and Q8_0
 * values are representable). */
static void kv_row(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks, int h,
                   int t, int is_v, float *out) {
    for (int d = 0; d < kv->head_dim; d++) out[d] = kn_kv_get(kv, base, blocks, h, t, d, is_v);
}

/* Step 1: s = sum over d in order of q[d]*k[d], unfused, times scale. */
static float score(const float *q, const float *k, int hd, float scale) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++) s += q[d] * k[d];
    return s * scale;
}

/* Step 2. */
static float relu_of(float s, bool relu) {
    if (!relu) return s;
    return s > 0.0f ? s : 0.0f;
}

/* Steps 3-4 for the position whose r is hist[0], with hist[j] = r_{t-j}. */
static float gate(const float *hist, const struct kn_hp1_params *hp, const float *c) {
    float z = c[0] * hist[0];
    for (int j = 1; j < hp->n_taps; j++) z += c[j] * hist[j];
    float x = z > hp->lo ? z : hp->lo;
    x = x < hp->hi ? x : hp->hi;
    return hp->gamma * x;
}

/* Step 5 for one query vector (head g of the task, position P) and chunk
 * c: acc[hd] = the chunk's partial. */
static void chunk_acc(const struct kn_hp1_task *t, int g, const float *q, int P, int c, float *acc) {
    const struct kn_attn_task *a = &t->at;
    const struct kn_hp1_params *hp = &t->hp;
    int hd = a->kv->head_dim, K = hp->n_taps;
    const float *taps = hp->taps + (size_t)g * K;
    int k0 = c * KN_ATTN_CHUNK, k1 = k0 + KN_ATTN_CHUNK <= P + 1 ? k0 + KN_ATTN_CHUNK : P + 1;
    float row[HDMAX], hist[KN_HP1_MAX_TAPS];
    memset(acc, 0, (size_t)hd * sizeof(float));
    /* at position t, after the shift, hist[j] = r_{t-j}; so before the
     * first key of the chunk hist[j-1] = r_{k0-j}: the K-1 keys left of
     * the chunk, recomputed (0 before the first key) */
    for (int j = 1; j < K; j++) {
        int tt = k0 - j;
        float r = 0.0f;
        if (tt >= 0) {
            kv_row(a->kv, a->base, a->blocks, a->kv_head, tt, 0, row);
            r = relu_of(score(q, row, hd, a->scale), hp->relu);
        }
        hist[j - 1] = r;
    }
    for (int tt = k0; tt < k1; tt++) {
        kv_row(a->kv, a->base, a->blocks, a->kv_head, tt, 0, row);
        for (int j = K - 1; j > 0; j--) hist[j] = hist[j - 1];
        hist[0] = relu_of(score(q, row, hd, a->scale), hp->relu);
        float p = gate(hist, hp, taps);
        if (t->pv == KN_HP1_PV_NONE) continue;
        if (p == 0.0f && t->pv == KN_HP1_PV_SPARSE) continue;
        kv_row(a->kv, a->base, a->blocks, a->kv_head, tt, 1, row);
        for (int d = 0; d < hd; d++) acc[d] += p * row[d];
    }
}

/* ---------------------------------------------------------------------- */
/* the table */

static void attn_ref(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim;
    float acc[HDMAX];
    for (int r = 0; r < a->n_rows; r++) {
        int P = a->pos + r;
        for (int g = 0; g < a->group; g++) {
            const float *q = a->q + (size_t)r * a->q_stride + (size_t)g * hd;
            float *o = a->out + (size_t)r * a->out_stride + (size_t)g * hd;
            for (int d = 0; d < hd; d++) o[d] = 0.0f;
            int nc = kn_attn_n_chunks(P + 1);
            for (int c = 0; c < nc; c++) {
                chunk_acc(t, g, q, P, c, acc);
                for (int d = 0; d < hd; d++) o[d] = o[d] + acc[d];
            }
        }
    }
}

static void partial_ref(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim;
    size_t rec = kn_hp1_rec_floats(a->group, hd);
    for (int c = a->c0; c < a->c1; c++)
        for (int g = 0; g < a->group; g++)
            chunk_acc(t, g, a->q + (size_t)g * hd, a->pos, c,
                      a->part + (size_t)(c - a->c0) * rec + (size_t)g * hd);
}

static void reduce_ref(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim;
    size_t rec = kn_hp1_rec_floats(a->group, hd);
    for (int g = 0; g < a->group; g++) {
        float *o = a->out + (size_t)g * hd;
        for (int d = 0; d < hd; d++) o[d] = 0.0f;
        for (int c = a->c0; c < a->c1; c++) {
            const float *pg = a->part + (size_t)(c - a->c0) * rec + (size_t)g * hd;
            for (int d = 0; d < hd; d++) o[d] = o[d] + pg[d];
        }
    }
}

const struct kn_hp1_ops kn_hp1_ops_ref = {
    .name = "ref",
    .attn = attn_ref,
    .partial = partial_ref,
    .reduce = reduce_ref,
};

/* ---------------------------------------------------------------------- */
/* the oracle */

void kn_hp1_naive_ref(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                      int n_head, const struct kn_hp1_params *hp, float scale, const float *q,
                      size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                      double *scratch, float *bound, int64_t *n_zero, int64_t *n_gate) {
    int hd = kv->head_dim, group = n_head / kv->n_head_kv, K = hp->n_taps;
    int n_max = pos + n_rows;
    double *rr = scratch, *ep = scratch + n_max, *pp = scratch + 2 * (size_t)n_max;
    const double u = 0x1p-24;
    /* first-order rounding bound, valid for any summation order:
     *   s:  |ds| <= scale * (hd+2) u * sum_d |q_d k_d|; |dr| = 0 where the
     *       ReLU zeroes s with a margin of |ds|
     *   z:  |dz| <= sum_j |c_j| (|dr_{t-j}| + (K+1) u |r_{t-j}|)   (ReLU is 1-Lipschitz)
     *   p:  |dp| <= |gamma| |dz| + u |p|                            (so is the clamp;
     *       only u |p| where z is clamped with a margin of |dz|)
     *   o:  |do| <= sum_t |dp_t| |v_t| + (n + n_chunks + 1) u sum_t |p_t v_t| */
    for (int r = 0; r < n_rows; r++) {
        int n = pos + r + 1;
        for (int i = 0; i < n_head; i++) {
            const float *qi = q + (size_t)r * q_stride + (size_t)i * hd;
            const float *c = hp->taps + (size_t)i * K;
            int h = i / group;
            /* scores, ReLU and their error bound; ep first holds |dr| */
            for (int t = 0; t < n; t++) {
                double s = 0.0, sa = 0.0;
                for (int d = 0; d < hd; d++) {
                    double x = (double)qi[d] * kn_kv_get(kv, base, blocks, h, t, d, 0);
                    s += x;
                    sa += fabs(x);
                }
                s *= scale;
                rr[t] = hp->relu ? (s > 0.0 ? s : 0.0) : s;
                ep[t] = (double)scale * (hd + 2) * u * sa;
                /* negative with a margin: the float ReLU gives exactly 0 */
                if (hp->relu && s + ep[t] < 0.0) ep[t] = 0.0;
            }
            /* gate, from the last position down so ep[t - j] is still |dr| */
            for (int t = n - 1; t >= 0; t--) {
                double z = 0.0, ez = 0.0;
                for (int j = 0; j < K && j <= t; j++) {
                    z += (double)c[j] * rr[t - j];
                    ez += fabs((double)c[j]) * (ep[t - j] + (K + 1) * u * fabs(rr[t - j]));
                }
                double x = z > hp->lo ? z : hp->lo;
                x = x < hp->hi ? x : hp->hi;
                pp[t] = (double)hp->gamma * x;
                /* clamped with a margin: the float z is clamped too, to
                 * the same bound, so only gamma's product rounds */
                bool sat = z + ez < hp->lo || z - ez > hp->hi;
                ep[t] = (sat ? 0.0 : fabs((double)hp->gamma) * ez) + u * fabs(pp[t]);
                if (n_zero && pp[t] == 0.0) (*n_zero)++;
            }
            if (n_gate) *n_gate += n;
            float *oi = out + (size_t)r * out_stride + (size_t)i * hd;
            float *bi = bound ? bound + (size_t)r * out_stride + (size_t)i * hd : NULL;
            double depth = n + kn_attn_n_chunks(n) + 1;
            for (int d = 0; d < hd; d++) {
                double o = 0.0, e1 = 0.0, e2 = 0.0;
                for (int t = 0; t < n; t++) {
                    if (pp[t] == 0.0 && ep[t] == 0.0) continue;
                    double v = kn_kv_get(kv, base, blocks, h, t, d, 1);
                    o += pp[t] * v;
                    e1 += ep[t] * fabs(v);
                    e2 += fabs(pp[t] * v);
                }
                oi[d] = (float)o;
                if (bi) bi[d] = (float)(e1 + depth * u * e2 + u * fabs(o));
            }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* controlled sparsity */

void kn_hp1_scores_ref(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                       int h, const float *q, float scale, int n, float *s) {
    float row[HDMAX];
    for (int t = 0; t < n; t++) {
        kv_row(kv, base, blocks, h, t, 0, row);
        s[t] = score(q, row, kv->head_dim, scale);
    }
}

double kn_hp1_zero_frac(const float *s, int n, const struct kn_hp1_params *hp) {
    float hist[KN_HP1_MAX_TAPS] = {0};
    int64_t zeros = 0;
    for (int t = 0; t < n; t++) {
        for (int j = hp->n_taps - 1; j > 0; j--) hist[j] = hist[j - 1];
        hist[0] = relu_of(s[t], hp->relu);
        zeros += gate(hist, hp, hp->taps) == 0.0f;
    }
    return n > 0 ? (double)zeros / n : 0.0;
}

static double frac_all(const float *scores, int n_vec, int n_pos, const struct kn_hp1_params *hp) {
    double f = 0.0;
    for (int i = 0; i < n_vec; i++) f += kn_hp1_zero_frac(scores + (size_t)i * n_pos, n_pos, hp);
    return n_vec > 0 ? f / n_vec : 0.0;
}

double kn_hp1_calibrate(const float *scores, int n_vec, int n_pos, double zero_frac, int n_head,
                        float *taps, struct kn_hp1_params *hp) {
    float c[3] = {1.0f, 0.0f, 0.0f};
    hp->taps = c;
    hp->n_taps = 3;
    hp->gamma = 1.0f;
    hp->lo = 0.0f;
    hp->hi = 1.0f;
    hp->relu = true;
    double f;
    if (zero_frac <= 0.0) {
        /* every p >= gamma * lo > 0; a realistic filter all the same */
        c[1] = c[2] = -0.5f;
        hp->lo = 0x1p-10f;
        f = frac_all(scores, n_vec, n_pos, hp);
    } else {
        /* the zero share grows with a: z_t = r_t - a (r_{t-1} + r_{t-2}) */
        float lo_a = 0.0f, hi_a = 64.0f;
        f = frac_all(scores, n_vec, n_pos, hp);
        if (f < zero_frac) {
            for (int it = 0; it < 40; it++) {
                float mid = 0.5f * (lo_a + hi_a);
                c[1] = c[2] = -mid;
                if (frac_all(scores, n_vec, n_pos, hp) < zero_frac) lo_a = mid;
                else hi_a = mid;
            }
            /* the closer of the two ends */
            c[1] = c[2] = -lo_a;
            double f_lo = frac_all(scores, n_vec, n_pos, hp);
            c[1] = c[2] = -hi_a;
            double f_hi = frac_all(scores, n_vec, n_pos, hp);
            if (fabs(f_lo - zero_frac) < fabs(f_hi - zero_frac)) c[1] = c[2] = -lo_a;
            f = frac_all(scores, n_vec, n_pos, hp);
        }
    }
    for (int i = 0; i < n_head; i++) memcpy(taps + (size_t)i * 3, c, sizeof(c));
    hp->taps = taps;
    return f;
}

void kn_hp1_gate_keys(float *k, size_t k_stride, int n_kv, int n_head_kv, int head_dim, int group,
                      bool shared, uint32_t seed) {
    uint32_t x = seed;
    for (int t = 0; t < n_kv; t++)
        for (int h = 0; h < n_head_kv; h++) {
            float *kr = k + (size_t)t * k_stride + (size_t)h * head_dim;
            float u = 0.0f;
            for (int g = 0; g < group; g++) {
                if (g == 0 || !shared) {
                    x = x * 1664525u + 1013904223u;
                    u = (float)(x >> 8) * 0x1p-23f - 1.0f;
                }
                kr[g] = u;
            }
            kr[group] = 1.0f;
        }
}

void kn_hp1_gate_queries(float *q, size_t q_stride, int n_rows, int n_head, int n_head_kv,
                         int head_dim, float scale, double on_frac) {
    int group = n_head / n_head_kv;
    float beta = (float)(2.0 * on_frac - 1.0);
    for (int r = 0; r < n_rows; r++)
        for (int i = 0; i < n_head; i++) {
            float *qi = q + (size_t)r * q_stride + (size_t)i * head_dim;
            for (int g = 0; g < group; g++) qi[g] = g == i % group ? 1.0f / scale : 0.0f;
            qi[group] = beta / scale;
        }
}
