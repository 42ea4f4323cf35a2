/*
 * attn_fold.c - the fold driver of attn/attn.h, shared by the SIMD
 * variants: which chunks a task reads, the order in which their partials
 * are folded (left to right, chunk by chunk), and the split-K record
 * format. This order is the numeric specification of batch invariance, so
 * it is written once; the ISA files supply the chunk pass, the fold of two
 * partials and the final division (struct kn_attn_prims).
 *
 * Built without ISA flags: it only loops and calls the primitives.
 */
#include <math.h>
#include <string.h>

#include "attn/attn.h"

static void states_clear(struct kn_attn_states *s, int nq, int hd) {
    for (int i = 0; i < nq; i++) {
        s->m[i] = -INFINITY;
        s->l[i] = 0.0f;
    }
    memset(s->acc, 0, (size_t)nq * hd * sizeof(float));
}

/* Whether chunk c holds at least one key row r may see. */
static bool chunk_in_row(const struct kn_attn_task *t, int c, int r) {
    int p = t->pos + r;
    return c * KN_ATTN_CHUNK <= p && (c + 1) * KN_ATTN_CHUNK > kn_attn_lo(t, r);
}

void kn_attn_fold_attn(const struct kn_attn_prims *p, const struct kn_attn_task *t) {
    int hd = t->kv->head_dim, G = t->group, nq = t->n_rows * G;
    struct kn_attn_states run, cur;
    states_clear(&run, nq, hd);
    int nc = kn_attn_n_chunks(t->pos + t->n_rows);
    for (int c = kn_attn_first_chunk(t); c < nc; c++) {
        p->chunk_pass(t, c, &cur);
        for (int r = 0; r < t->n_rows; r++) {
            if (!chunk_in_row(t, c, r)) continue;
            for (int g = 0; g < G; g++) {
                int i = r * G + g;
                p->fold(&run.m[i], &run.l[i], run.acc + (size_t)i * hd, cur.m[i], cur.l[i],
                        cur.acc + (size_t)i * hd, hd);
            }
        }
    }
    for (int r = 0; r < t->n_rows; r++)
        for (int g = 0; g < G; g++) {
            int i = r * G + g;
            p->finish(kn_attn_sink_l(t, g, run.m[i], run.l[i]), run.acc + (size_t)i * hd,
                      t->out + (size_t)r * t->out_stride + (size_t)g * hd, hd);
        }
}

void kn_attn_fold_partial(const struct kn_attn_prims *p, const struct kn_attn_task *t) {
    int hd = t->kv->head_dim, G = t->group;
    struct kn_attn_states cur;
    size_t rec = kn_attn_rec_floats(G, hd);
    for (int c = t->c0; c < t->c1; c++) {
        float *pr = t->part + (size_t)(c - t->c0) * rec;
        if (chunk_in_row(t, c, 0)) {
            p->chunk_pass(t, c, &cur);
        } else { /* an empty partial: reduce skips it */
            states_clear(&cur, G, hd);
        }
        for (int g = 0; g < G; g++) {
            float *pg = pr + (size_t)g * (hd + 2);
            memcpy(pg, cur.acc + (size_t)g * hd, (size_t)hd * sizeof(float));
            pg[hd] = cur.m[g];
            pg[hd + 1] = cur.l[g];
        }
    }
}

void kn_attn_fold_reduce(const struct kn_attn_prims *p, const struct kn_attn_task *t) {
    int hd = t->kv->head_dim, G = t->group;
    size_t rec = kn_attn_rec_floats(G, hd);
    float acc[KN_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    for (int g = 0; g < G; g++) {
        float m = -INFINITY, l = 0.0f;
        memset(acc, 0, (size_t)hd * sizeof(float));
        for (int c = t->c0; c < t->c1; c++) {
            if (!chunk_in_row(t, c, 0)) continue; /* as attn: chunks without keys */
            const float *pg = t->part + (size_t)(c - t->c0) * rec + (size_t)g * (hd + 2);
            p->fold(&m, &l, acc, pg[hd], pg[hd + 1], pg, hd);
        }
        p->finish(kn_attn_sink_l(t, g, m, l), acc, t->out + (size_t)g * hd, hd);
    }
}
