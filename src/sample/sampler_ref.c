/*
 * sampler_ref.c - the slow twin of sample_draw: the definition in sample.h
 * written as plainly as possible, for tests only.
 *
 * It takes its own path everywhere the fast one is clever: counts come from
 * the ring buffer (not the sorted copy), the penalties go into a full copy
 * of the logits, every candidate is kept (no zero-weight cut), and the
 * whole candidate set is sorted with qsort before top-k/top-p/min-p and the
 * draw walk it in order. It allocates, so it is never on a serving path.
 */
#include <math.h>
#include <stdlib.h>

#include "core/core.h"
#include "sample/sample.h"

static int cmp_ref(const void *pa, const void *pb) {
    const struct sample_cand *a = pa, *b = pb;
    if (sample_before(*a, *b)) return -1;
    if (sample_before(*b, *a)) return 1;
    return 0;
}

anvil_token sample_draw_ref(const struct anvil_sampler *s, const float *logits,
                            const uint8_t *allowed, uint64_t rand64) {
    const struct anvil_sampler_params *p = &s->p;
    int32_t nv = s->n_vocab;
    float *l = core_malloc((size_t)nv * sizeof *l);
    struct sample_cand *c = core_malloc((size_t)nv * sizeof *c);
    anvil_token result = -2;
    if (!l || !c) goto done;

    /* 1. penalties: count each window token by scanning the ring */
    memcpy(l, logits, (size_t)nv * sizeof *l);
    for (int32_t i = 0; i < s->hist_n; i++) {
        anvil_token t = s->hist[i];
        int seen_before = 0, count = 0;
        for (int32_t j = 0; j < s->hist_n; j++) {
            if (s->hist[j] != t) continue;
            if (j < i) seen_before = 1;
            count++;
        }
        if (!seen_before) l[t] = sample_penalize(logits[t], count, p);
    }

    /* 2. candidates */
    int32_t n = 0;
    for (int32_t t = 0; t < nv; t++) {
        if (!sample_allowed(allowed, t) || isnan(l[t]) || l[t] == -INFINITY) continue;
        c[n].l = l[t];
        c[n].id = t;
        c[n].w = 0;
        n++;
    }
    result = -1;
    if (n == 0) goto done;

    /* 3. greedy */
    if (p->temperature == 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].l > c[best].l) best = i; /* ids ascend in c: ties keep the lowest */
        result = c[best].id;
        goto done;
    }

    /* 4. order */
    qsort(c, (size_t)n, sizeof *c, cmp_ref);
    float m = c[0].l;

    /* 5. top-k */
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;

    /* 6. top-p on the temperature-1 distribution */
    if (p->top_p < 1.0f) {
        sample_u128 z1 = 0;
        for (int32_t i = 0; i < n; i++) z1 += sample_fx(sample_exp(sample_shift(c[i].l, m) / 1.0));
        double thr = (double)p->top_p * (double)z1;
        sample_u128 cum = 0;
        for (int32_t i = 0; i < n; i++) {
            cum += sample_fx(sample_exp(sample_shift(c[i].l, m) / 1.0));
            if ((double)cum >= thr) {
                n = i + 1;
                break;
            }
        }
    }

    /* 7. min-p: x >= log(min_p) */
    if (p->min_p > 0.0f) {
        int32_t keep = 0;
        while (keep < n && sample_shift(c[keep].l, m) >= s->log_min_p) keep++;
        n = keep;
    }

    /* 8. temperature and the draw */
    double t = (double)p->temperature;
    sample_u128 z = 0;
    for (int32_t i = 0; i < n; i++) z += sample_fx(sample_exp(sample_shift(c[i].l, m) / t));
    /* r = floor(rand64 * z / 2^64), by 32-bit limbs of z (z < 2^96), as a
     * second derivation of sample_target's split */
    sample_u128 z0 = z & 0xffffffffu, z1l = (z >> 32) & 0xffffffffu, z2 = z >> 64;
    sample_u128 lo = z0 * rand64;                /* < 2^96 */
    sample_u128 mid = z1l * rand64 + (lo >> 32); /* < 2^97, in units of 2^32 */
    sample_u128 r = z2 * rand64 + (mid >> 32);   /* in units of 2^64 */
    sample_u128 cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += sample_fx(sample_exp(sample_shift(c[i].l, m) / t));
        if (cum > r) {
            result = c[i].id;
            goto done;
        }
    }
    result = -3; /* unreachable: r < z */

done:
    core_free(l);
    core_free(c);
    return result;
}
