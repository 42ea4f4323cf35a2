/*
 * attn.c (ref) - the specification of the attention kernels (attn.h):
 *
 *   - kn_attn_naive_ref: plain attention in double over materialized
 *     scores; the oracle the tests compare every variant with;
 *   - kn_attn_ops_ref: the chunked online-softmax algorithm of attn.h in
 *     plain float C (steps of KN_ATTN_SUB keys, chunks of KN_ATTN_CHUNK,
 *     left fold of chunk partials). Slow on purpose; the SIMD variants
 *     compute the same thing with the same structure.
 *
 * Also the element getter of the KV tiles (kn_kv_get; the layout is
 * kv/kv_layout.h).
 */
#include <math.h>
#include <string.h>

#include "anvil.h"
#include "attn/attn.h"
#include "kernels/blocks.h"

/* ---------------------------------------------------------------------- */
/* the element getter */

float kn_kv_get(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                int h, int t, int d, int is_v) {
    int bs = kv->block_size, hd = kv->head_dim, j = t % bs;
    const uint8_t *tile = kn_kv_tile(kv, base, blocks[t / bs], h);
    if (kv->type == ANVIL_TYPE_F16) {
        const kn_f16 *p = (const kn_f16 *)(tile + (is_v ? kv->v_off : 0));
        return kn_f16_to_f32(is_v ? p[(size_t)j * hd + d] : p[(size_t)d * bs + j]);
    }
    if (!is_v) {
        const int8_t *q = (const int8_t *)tile;
        const kn_f16 *s = (const kn_f16 *)(tile + kv->ks_off);
        return (float)q[(size_t)d * bs + j] * kn_f16_to_f32(s[(size_t)(d / 32) * bs + j]);
    }
    const int8_t *q = (const int8_t *)(tile + kv->v_off);
    const kn_f16 *s = (const kn_f16 *)(tile + kv->vs_off);
    return (float)q[(size_t)j * hd + d] * kn_f16_to_f32(s[(size_t)(d / 32) * bs + j]);
}

/* ---------------------------------------------------------------------- */
/* naive reference */

void kn_attn_naive_ref(const struct kn_kv_layout *kv, const uint8_t *base,
                       const int32_t *blocks, int n_head, float scale, const float *q,
                       size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                       double *scratch) {
    kn_attn_naive_window_ref(kv, base, blocks, n_head, scale, q, q_stride, out, out_stride, pos,
                             n_rows, 0, scratch);
}

void kn_attn_naive_window_ref(const struct kn_kv_layout *kv, const uint8_t *base,
                              const int32_t *blocks, int n_head, float scale, const float *q,
                              size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                              int window, double *scratch) {
    kn_attn_naive_sink_ref(kv, base, blocks, n_head, scale, q, q_stride, out, out_stride, pos,
                           n_rows, window, NULL, scratch);
}

void kn_attn_naive_sink_ref(const struct kn_kv_layout *kv, const uint8_t *base,
                            const int32_t *blocks, int n_head, float scale, const float *q,
                            size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                            int window, const float *sinks, double *scratch) {
    int hd = kv->head_dim, group = n_head / kv->n_head_kv;
    for (int r = 0; r < n_rows; r++) {
        int n_kv = pos + r + 1;
        int lo = window > 0 && n_kv - window > 0 ? n_kv - window : 0;
        for (int i = 0; i < n_head; i++) {
            const float *qi = q + (size_t)r * q_stride + (size_t)i * hd;
            float *oi = out + (size_t)r * out_stride + (size_t)i * hd;
            int h = i / group;
            double mx = -INFINITY;
            for (int t = lo; t < n_kv; t++) {
                double s = 0.0;
                for (int d = 0; d < hd; d++) s += (double)qi[d] * kn_kv_get(kv, base, blocks, h, t, d, 0);
                scratch[t] = s * scale;
                if (scratch[t] > mx) mx = scratch[t];
            }
            if (sinks && sinks[i] > mx) mx = sinks[i];
            double sum = sinks ? exp((double)sinks[i] - mx) : 0.0;
            for (int t = lo; t < n_kv; t++) {
                scratch[t] = exp(scratch[t] - mx);
                sum += scratch[t];
            }
            for (int d = 0; d < hd; d++) {
                double a = 0.0;
                for (int t = lo; t < n_kv; t++) a += scratch[t] * kn_kv_get(kv, base, blocks, h, t, d, 1);
                oi[d] = (float)(a / sum);
            }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* chunked online softmax: the specification of every variant */

/* Running softmax state of one query vector. */
struct qstate {
    float m, l;
    float acc[KN_ATTN_MAX_HEAD_DIM];
};

static void state_clear(struct qstate *s, int hd) {
    s->m = -INFINITY;
    s->l = 0.0f;
    memset(s->acc, 0, (size_t)hd * sizeof(float));
}

/* Dequantize keys [j0, j0 + SUB) of a tile: K (hd, SUB) transposed, V (SUB, hd). */
static void load_step(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, float *K,
                      float *V) {
    int bs = kv->block_size, hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const kn_f16 *kt = (const kn_f16 *)tile;
        const kn_f16 *vt = (const kn_f16 *)(tile + kv->v_off);
        for (int d = 0; d < hd; d++)
            for (int j = 0; j < KN_ATTN_SUB; j++)
                K[d * KN_ATTN_SUB + j] = kn_f16_to_f32(kt[(size_t)d * bs + j0 + j]);
        for (int j = 0; j < KN_ATTN_SUB; j++)
            for (int d = 0; d < hd; d++)
                V[j * hd + d] = kn_f16_to_f32(vt[(size_t)(j0 + j) * hd + d]);
        return;
    }
    const int8_t *kq = (const int8_t *)tile;
    const kn_f16 *ks = (const kn_f16 *)(tile + kv->ks_off);
    const int8_t *vq = (const int8_t *)(tile + kv->v_off);
    const kn_f16 *vs = (const kn_f16 *)(tile + kv->vs_off);
    for (int d = 0; d < hd; d++)
        for (int j = 0; j < KN_ATTN_SUB; j++)
            K[d * KN_ATTN_SUB + j] = (float)kq[(size_t)d * bs + j0 + j] *
                                     kn_f16_to_f32(ks[(size_t)(d / 32) * bs + j0 + j]);
    for (int j = 0; j < KN_ATTN_SUB; j++)
        for (int d = 0; d < hd; d++)
            V[j * hd + d] = (float)vq[(size_t)(j0 + j) * hd + d] *
                            kn_f16_to_f32(vs[(size_t)(d / 32) * bs + j0 + j]);
}

/* One online-softmax step over keys [first, valid) of a loaded step. */
static void step(struct qstate *st, const float *q, const float *K, const float *V, int hd,
                 int first, int valid, float scale) {
    float s[KN_ATTN_SUB] = {0};
    float mb = -INFINITY;
    /* s[j] = sum over d in order of q[d] * k_j[d]; d outer for speed, the
     * order of each sum is the same */
    for (int d = 0; d < hd; d++)
        for (int j = 0; j < KN_ATTN_SUB; j++) s[j] += q[d] * K[d * KN_ATTN_SUB + j];
    for (int j = first; j < valid; j++) {
        s[j] *= scale;
        mb = fmaxf(mb, s[j]);
    }
    float m_new = fmaxf(st->m, mb);
    if (m_new > st->m && st->m != -INFINITY) {
        /* the max moved: rescale what was summed so far */
        float alpha = expf(st->m - m_new);
        st->l *= alpha;
        for (int d = 0; d < hd; d++) st->acc[d] *= alpha;
    }
    st->m = m_new;
    float sum = 0.0f;
    for (int j = first; j < valid; j++) {
        s[j] = expf(s[j] - m_new);
        sum += s[j];
    }
    st->l += sum;
    for (int j = first; j < valid; j++)
        for (int d = 0; d < hd; d++) st->acc[d] += s[j] * V[j * hd + d];
}

/* run = fold(run, c): the log-sum-exp merge of two partials. */
static void fold(struct qstate *run, float cm, float cl, const float *cacc, int hd) {
    float m = fmaxf(run->m, cm);
    float a = expf(run->m - m), b = expf(cm - m);
    run->m = m;
    run->l = run->l * a + cl * b;
    for (int d = 0; d < hd; d++) run->acc[d] = run->acc[d] * a + cacc[d] * b;
}

/* out = acc / l, l with the head's sink joined (attn.h) */
static void finish(const struct kn_attn_task *t, int g, const struct qstate *s, float *out, int hd) {
    float inv = 1.0f / kn_attn_sink_l(t, g, s->m, s->l);
    for (int d = 0; d < hd; d++) out[d] = s->acc[d] * inv;
}

/* Keys of chunk c for rows [0, n_rows) into cur[] (cleared first). */
static void chunk_pass(const struct kn_attn_task *t, int c, struct qstate *cur, float *K,
                       float *V) {
    const struct kn_kv_layout *kv = t->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = t->group;
    int n_kv_max = t->pos + t->n_rows;
    int k0 = c * KN_ATTN_CHUNK;
    int k1 = k0 + KN_ATTN_CHUNK < n_kv_max ? k0 + KN_ATTN_CHUNK : n_kv_max;
    int lo0 = kn_attn_lo(t, 0) / KN_ATTN_SUB * KN_ATTN_SUB; /* steps below: never read */
    for (int i = 0; i < t->n_rows * G; i++) state_clear(&cur[i], hd);
    for (int s0 = k0 > lo0 ? k0 : lo0; s0 < k1; s0 += KN_ATTN_SUB) {
        const uint8_t *tile = kn_kv_tile(kv, t->base, t->blocks[s0 / bs], t->kv_head);
        load_step(kv, tile, s0 % bs, K, V);
        for (int r = 0; r < t->n_rows; r++) {
            int valid = t->pos + r + 1 - s0, first = kn_attn_lo(t, r) - s0;
            if (valid > KN_ATTN_SUB) valid = KN_ATTN_SUB;
            if (first < 0) first = 0;
            if (first >= valid) continue;
            for (int g = 0; g < G; g++)
                step(&cur[r * G + g], t->q + (size_t)r * t->q_stride + (size_t)g * hd, K, V, hd,
                     first, valid, t->scale);
        }
    }
}

/* Whether chunk c holds at least one key row r may see. */
static int chunk_in_row(const struct kn_attn_task *t, int c, int r) {
    int p = t->pos + r;
    return c * KN_ATTN_CHUNK <= p && (c + 1) * KN_ATTN_CHUNK > kn_attn_lo(t, r);
}

void kn_attn_ref(const struct kn_attn_task *t) {
    int hd = t->kv->head_dim, G = t->group, nq = t->n_rows * G;
    struct qstate run[KN_ATTN_MAXQ], cur[KN_ATTN_MAXQ];
    float K[KN_ATTN_MAX_HEAD_DIM * KN_ATTN_SUB], V[KN_ATTN_SUB * KN_ATTN_MAX_HEAD_DIM];
    for (int i = 0; i < nq; i++) state_clear(&run[i], hd);
    int nc = kn_attn_n_chunks(t->pos + t->n_rows);
    for (int c = kn_attn_first_chunk(t); c < nc; c++) {
        chunk_pass(t, c, cur, K, V);
        for (int r = 0; r < t->n_rows; r++) {
            if (!chunk_in_row(t, c, r)) continue; /* no key of the row in the chunk */
            for (int g = 0; g < G; g++) {
                struct qstate *s = &cur[r * G + g];
                fold(&run[r * G + g], s->m, s->l, s->acc, hd);
            }
        }
    }
    for (int r = 0; r < t->n_rows; r++)
        for (int g = 0; g < G; g++)
            finish(t, g, &run[r * G + g], t->out + (size_t)r * t->out_stride + (size_t)g * hd, hd);
}

void kn_attn_partial_ref(const struct kn_attn_task *t) {
    int hd = t->kv->head_dim, G = t->group;
    struct qstate cur[KN_ATTN_MAXQ];
    float K[KN_ATTN_MAX_HEAD_DIM * KN_ATTN_SUB], V[KN_ATTN_SUB * KN_ATTN_MAX_HEAD_DIM];
    size_t rec = kn_attn_rec_floats(G, hd);
    for (int c = t->c0; c < t->c1; c++) {
        if (chunk_in_row(t, c, 0)) chunk_pass(t, c, cur, K, V);
        else for (int g = 0; g < G; g++) state_clear(&cur[g], hd); /* empty: reduce skips it */
        float *p = t->part + (size_t)(c - t->c0) * rec;
        for (int g = 0; g < G; g++) {
            float *pg = p + (size_t)g * (hd + 2);
            memcpy(pg, cur[g].acc, (size_t)hd * sizeof(float));
            pg[hd] = cur[g].m;
            pg[hd + 1] = cur[g].l;
        }
    }
}

void kn_attn_reduce_ref(const struct kn_attn_task *t) {
    int hd = t->kv->head_dim, G = t->group;
    size_t rec = kn_attn_rec_floats(G, hd);
    for (int g = 0; g < G; g++) {
        struct qstate run;
        state_clear(&run, hd);
        for (int c = t->c0; c < t->c1; c++) {
            if (!chunk_in_row(t, c, 0)) continue;
            const float *pg = t->part + (size_t)(c - t->c0) * rec + (size_t)g * (hd + 2);
            fold(&run, pg[hd], pg[hd + 1], pg, hd);
        }
        finish(t, g, &run, t->out + (size_t)g * hd, hd);
    }
}

const struct kn_attn_ops kn_attn_ops_ref = {
    .name = "ref",
    .attn = kn_attn_ref,
    .partial = kn_attn_partial_ref,
    .reduce = kn_attn_reduce_ref,
    .window = true,
};
