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

/* ---------------------------------------------------------------------- */
/* the general chain's twin (sampler.c, "the general sampler chain", has the definition) */

/* DRY by direct suffix comparison, O(N^2) */
static void dry_ref(const struct anvil_sampler *s, float *l) {
    const struct anvil_sampler_params *p = &s->p;
    const struct sample_ext *x = s->ext;
    int32_t n = x->dry_n;
    if (n < 2) return;
    anvil_token *a = core_malloc((size_t)n * sizeof *a);
    int32_t *best = core_malloc((size_t)s->n_vocab * sizeof *best);
    if (!a || !best) goto out;
    for (int32_t i = 0; i < n; i++) /* oldest first */
        a[i] = x->dry_hist[((n == x->dry_cap ? x->dry_head : 0) + i) % x->dry_cap];
    int32_t lim = n;
    for (int32_t e = n - 1; e >= 0 && lim == n; e--)
        for (int32_t b = 0; b < p->n_dry_breakers; b++) {
            int32_t len = p->dry_breaker_len[b], same = len <= e + 1;
            for (int32_t q = 0; same && q < len; q++) same = a[e - len + 1 + q] == p->dry_breakers[b][q];
            if (same) {
                lim = n - 1 - e;
                break;
            }
        }
    if (lim <= p->dry_allowed_length) goto out;
    for (int32_t t = 0; t < s->n_vocab; t++) best[t] = -1;
    for (int32_t j = 0; j + 1 < n; j++) {
        int32_t len = 0;
        while (len <= j && len < lim && a[j - len] == a[n - 1 - len]) len++;
        if (len >= p->dry_allowed_length && len > best[a[j + 1]]) best[a[j + 1]] = len;
    }
    for (int32_t t = 0; t < s->n_vocab; t++) {
        if (best[t] < 0) continue;
        int breaker = 0;
        for (int32_t b = 0; b < p->n_dry_breakers; b++)
            breaker |= p->dry_breaker_len[b] == 1 && p->dry_breakers[b][0] == t;
        if (breaker) continue;
        int32_t e = best[t] - p->dry_allowed_length;
        if (p->dry_base > 1.000001f && e > (int32_t)(88.7228391f / logf(p->dry_base)))
            e = (int32_t)(88.7228391f / logf(p->dry_base));
        l[t] -= p->dry_multiplier * powf(p->dry_base, (float)e);
    }
out:
    core_free(a);
    core_free(best);
}

static void penalties_ref(const struct anvil_sampler *s, const float *in, float *l) {
    for (int32_t i = 0; i < s->hist_n; i++) {
        anvil_token t = s->hist[i];
        int seen_before = 0, count = 0;
        for (int32_t j = 0; j < s->hist_n; j++) {
            if (s->hist[j] != t) continue;
            if (j < i) seen_before = 1;
            count++;
        }
        if (!seen_before) l[t] = sample_penalize(in[t], count, &s->p);
    }
}

/* q_i = exp(x_i) / sum, the set sorted */
static double q_ref(const struct sample_cand *c, int32_t n, double tc, int32_t i) {
    double z = 0.0;
    for (int32_t j = 0; j < n; j++) z += sample_exp(sample_shift(c[j].l, c[0].l) / tc);
    return sample_exp(sample_shift(c[i].l, c[0].l) / tc) / z;
}

/* mirostat's weight sum: exact in fixed point, so independent of the
 * order (as sampler.c's st_mirostat has it), over SAMPLE_FX_SCALE */
static double z_miro_ref(const struct sample_cand *c, int32_t n, double tc) {
    sample_u128 z = 0;
    for (int32_t j = 0; j < n; j++) z += sample_fx(sample_exp(sample_shift(c[j].l, c[0].l) / tc));
    return (double)z / SAMPLE_FX_SCALE;
}

/* mirostat's q of candidate i, z from z_miro_ref */
static double q_miro_ref(const struct sample_cand *c, double z, double tc, int32_t i) {
    return sample_exp(sample_shift(c[i].l, c[0].l) / tc) / z;
}

static int cmp_aux_ref(const void *pa, const void *pb) {
    const struct sample_aux *a = pa, *b = pb;
    if (a->score != b->score) return a->score < b->score ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

anvil_token sample_ext_draw_ref(const struct anvil_sampler *s, const float *logits,
                                const uint8_t *allowed, uint64_t rand64, uint64_t rand_xtc) {
    const struct anvil_sampler_params *p = &s->p;
    const struct sample_ext *x = s->ext;
    int32_t nv = s->n_vocab, mk = p->min_keep;
    float *l = core_malloc((size_t)nv * sizeof *l), *tmp = core_malloc((size_t)nv * sizeof *tmp);
    struct sample_cand *c = core_malloc((size_t)nv * sizeof *c);
    struct sample_aux *aux = core_malloc((size_t)nv * sizeof *aux);
    anvil_token result = -2;
    if (!l || !c || !aux || !tmp) goto done;

    /* 1-2. bias, then penalties and DRY in their order */
    memcpy(l, logits, (size_t)nv * sizeof *l);
    for (int32_t i = 0; i < p->n_bias; i++) l[p->bias[i].id] = l[p->bias[i].id] + p->bias[i].bias;
    for (int pass = 0; pass < 2; pass++) {
        int pen_first = x->dry_at < 0 || (x->pen_at >= 0 && x->pen_at < x->dry_at);
        int do_pen = (pass == 0) == pen_first;
        if (do_pen && x->pen_at >= 0) {
            memcpy(tmp, l, (size_t)nv * sizeof *l);
            penalties_ref(s, tmp, l);
        }
        if (!do_pen && x->dry_at >= 0) dry_ref(s, l);
    }

    /* 3. candidates, greedy */
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
    if (p->temperature == 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].l > c[best].l) best = i;
        result = c[best].id;
        goto done;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_ref);

    /* 4. the stages, on the sorted set */
    double tc = 1.0;
    for (int32_t st = 0; st < x->n_order; st++) {
        switch (x->order[st]) {
        case ANVIL_STAGE_TOP_N_SIGMA:
            if (p->top_n_sigma > 0.0f && n > 1) {
                double mx = (double)c[0].l / tc, sum = 0.0, acc = 0.0;
                for (int32_t i = 0; i < n; i++) sum += (double)c[i].l / tc;
                double mean = sum / n;
                for (int32_t i = 0; i < n; i++)
                    acc += ((double)c[i].l / tc - mean) * ((double)c[i].l / tc - mean);
                double thr = mx - (double)p->top_n_sigma * sqrt(acc / n);
                int32_t keep = 0;
                while (keep < n && (double)c[keep].l / tc >= thr) keep++;
                if (!isnan(thr)) n = keep; /* NaN: an infinite logit, the set stays */
            }
            break;
        case ANVIL_STAGE_TOP_K:
            if (p->top_k > 0 && p->top_k < n) n = p->top_k;
            break;
        case ANVIL_STAGE_TYPICAL:
            if (p->typical_p > 0.0f && p->typical_p < 1.0f) {
                double h = 0.0;
                for (int32_t i = 0; i < n; i++) {
                    double q = q_ref(c, n, tc, i);
                    if (q > 0.0) h -= q * log(q);
                }
                for (int32_t i = 0; i < n; i++) {
                    double q = q_ref(c, n, tc, i);
                    aux[i].score = q > 0.0 ? fabs(-log(q) - h) : INFINITY;
                    aux[i].pos = i;
                }
                qsort(aux, (size_t)n, sizeof *aux, cmp_aux_ref);
                double cum = 0.0;
                int32_t keep = n;
                for (int32_t i = 0; i < n; i++) {
                    cum += q_ref(c, n, tc, aux[i].pos);
                    if (cum > (double)p->typical_p && i + 1 >= mk) {
                        keep = i + 1;
                        break;
                    }
                }
                /* the kept positions, back in candidate order */
                int32_t w = 0;
                for (int32_t i = 0; i < n; i++) {
                    int in = 0;
                    for (int32_t j = 0; j < keep; j++) in |= aux[j].pos == i;
                    if (in) c[w++] = c[i];
                }
                n = w;
            }
            break;
        case ANVIL_STAGE_TOP_P:
            if (p->top_p < 1.0f) {
                sample_u128 z1 = 0, cum = 0;
                for (int32_t i = 0; i < n; i++) z1 += sample_fx(sample_exp(sample_shift(c[i].l, c[0].l) / tc));
                double thr = (double)p->top_p * (double)z1;
                int32_t keep = n;
                for (int32_t i = 0; i < n; i++) {
                    cum += sample_fx(sample_exp(sample_shift(c[i].l, c[0].l) / tc));
                    if ((double)cum >= thr) {
                        keep = i + 1;
                        break;
                    }
                }
                if (keep < mk) keep = mk < n ? mk : n;
                n = keep;
            }
            break;
        case ANVIL_STAGE_MIN_P:
            if (p->min_p > 0.0f) {
                int32_t keep = 0;
                while (keep < n && sample_shift(c[keep].l, c[0].l) / tc >= log((double)p->min_p)) keep++;
                if (keep < mk) keep = mk < n ? mk : n;
                n = keep;
            }
            break;
        case ANVIL_STAGE_XTC:
            if (p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f && n >= 2 &&
                sample_unit(rand_xtc) < (double)p->xtc_probability) {
                int32_t last = 0;
                while (last + 1 < n && q_ref(c, n, tc, last + 1) >= (double)p->xtc_threshold) last++;
                if (q_ref(c, n, tc, 0) < (double)p->xtc_threshold) last = 0;
                if (last > 0 && n - last >= mk) {
                    memmove(c, c + last, (size_t)(n - last) * sizeof *c);
                    n -= last;
                }
            }
            break;
        case ANVIL_STAGE_TEMPERATURE:
            tc *= (double)p->temperature;
            break;
        default:
            break;
        }
    }
    if (p->mirostat == 1) {
        double tb = 0.0, tt = 0.0, z = z_miro_ref(c, n, tc);
        for (int32_t i = 0; i + 1 < n && i < 99; i++) {
            double t = log((double)(i + 2) / (double)(i + 1));
            tb += t * log(q_miro_ref(c, z, tc, i) / q_miro_ref(c, z, tc, i + 1));
            tt += t * t;
        }
        double sh = tb / tt, eps = sh - 1.0;
        double k = pow(eps * pow(2.0, (double)x->mu) / (1.0 - pow((double)nv, -eps)), 1.0 / sh);
        if (!(k >= 1.0)) n = 1;
        else if (k < (double)n) n = (int32_t)k;
    } else if (p->mirostat == 2) {
        int32_t keep = 0;
        double z = z_miro_ref(c, n, tc);
        while (keep < n && -log2(q_miro_ref(c, z, tc, keep)) <= (double)x->mu) keep++;
        n = keep > 0 ? keep : 1;
    }

    /* 5. the draw */
    if (n == 0) goto done; /* result is -1 */
    sample_u128 z = 0, cum = 0;
    for (int32_t i = 0; i < n; i++) z += sample_fx(sample_exp(sample_shift(c[i].l, c[0].l) / tc));
    sample_u128 r = sample_target(rand64, z);
    result = -3;
    for (int32_t i = 0; i < n; i++) {
        cum += sample_fx(sample_exp(sample_shift(c[i].l, c[0].l) / tc));
        if (cum > r) {
            result = c[i].id;
            break;
        }
    }
done:
    core_free(l);
    core_free(tmp);
    core_free(c);
    core_free(aux);
    return result;
}
