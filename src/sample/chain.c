/*
 * chain.c - the general sampler chain: logit bias, DRY, top-n-sigma,
 * typical-p, XTC, mirostat v1/v2, min_keep and a custom stage order, on
 * top of sampler.c's penalties, top-k, top-p, min-p and temperature.
 *
 * A sampler takes this path only when its params ask for one of these
 * (sample_ext_needed); the default chain stays on sampler.c's fast path.
 * sampler_ref.c holds the slow twin (sample_ext_draw_ref) and
 * tests/unit_sampler.c checks that both return the same token for the
 * same random words. The definition (docs/sampling.md has the user's
 * view):
 *
 *   1. work = logits; work[id] += bias for every logit-bias entry.
 *   2. Penalties and DRY, in the relative order they have in the stage
 *      list (each only when in it; mirostat runs neither, as llama.cpp):
 *      penalties as sample.h step 1; DRY below.
 *   3. Candidates: allowed, not NaN, not -inf. None -> -1.
 *      temperature == 0: argmax of work (lowest id on ties). Stop.
 *   4. The stages in order, on the candidate set S (kept in candidate
 *      order l desc, id asc when a stage needs an order), with tc the
 *      product of the temperatures applied so far (1 at the start) and
 *      m = max l over S, x(t) = sample_shift(l, m) / tc:
 *      top_n_sigma n: v = l / tc in double; keep v >= max v - n * std(v)
 *        (population std over S); no-op when that is NaN (a +inf logit).
 *      top_k k: keep the first k (min_keep does not apply, as llama.cpp).
 *      typical p: q = softmax(x) in double over S in order, H = -sum q ln q;
 *        sort S by (|-ln q - H| asc, order asc); keep the shortest prefix
 *        whose running sum of q exceeds p and holds >= min_keep tokens.
 *      top_p p: sample.h step 6 with weights fx(exp(x)), at least
 *        min_keep tokens.
 *      min_p p: keep x >= log(p), at least min_keep (the first ones).
 *      xtc: when u = sample_unit(rand_xtc) < xtc_probability and |S| >= 2
 *        and threshold <= 0.5: q as in typical; j = the last index of the
 *        leading run with q >= threshold; when j > 0 and |S| - j >=
 *        min_keep, drop the first j tokens.
 *      temperature: tc *= T.
 *      mirostat replaces the stage list by "temperature, mirostat":
 *        v1: q over S sorted; s_hat from the first 100 q as llama.cpp;
 *        k = ((s_hat-1) 2^mu / (1 - n_vocab^-(s_hat-1)))^(1/s_hat);
 *        keep the first max(1, k). v2: keep the leading run with
 *        -log2 q <= mu (at least one).
 *   5. Draw: w = fx(exp(x / 1)) over S with tc folded in (x above),
 *      r = sample_target(rand64, sum w), the first token in candidate
 *      order whose running sum exceeds r. Mirostat then sets
 *      mu -= eta * (-log2(w/Z of the token) - tau).
 *
 * DRY on the window a[0..N) of the last dry_last_n accepted tokens
 * (prompt included): rep_limit = the number of tokens after the last
 * place a breaker sequence ends (N when none); nothing when rep_limit <=
 * allowed_length. For every j < N-1: L(j) = the longest common suffix of
 * a[0..j] and a[0..N), capped at rep_limit; when L(j) >= allowed_length
 * the token a[j+1] would continue a repeat of length L(j). Each such
 * token that is not itself a one-token breaker loses
 * multiplier * base^(min(L - allowed_length, 88.72 / ln base)) from its
 * logit, L its longest. The fast path gets every L(j) from one Z-array
 * (O(N)); the twin compares suffixes directly (O(N^2)).
 *
 * Costs: one copy of the logits (O(n_vocab)) and a candidate pass;
 * top-n-sigma, min-p and top-p work on the unsorted set in O(n); top-k
 * selects its k in O(n) expected and sorts only those; typical, XTC and
 * mirostat sort what is left (llama.cpp sorts for them too), so put
 * top-k first to keep them cheap.
 *
 * RNG: a draw with temperature > 0 takes the draw's word first and then,
 * when xtc_probability > 0, XTC's word: same seed, same draws.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"

static const uint8_t default_order[] = {
    ANVIL_STAGE_PENALTIES, ANVIL_STAGE_DRY,   ANVIL_STAGE_TOP_N_SIGMA,
    ANVIL_STAGE_TOP_K,     ANVIL_STAGE_TYPICAL, ANVIL_STAGE_TOP_P,
    ANVIL_STAGE_MIN_P,     ANVIL_STAGE_XTC,   ANVIL_STAGE_TEMPERATURE,
};

static int dry_on(const struct anvil_sampler_params *p) {
    return p->dry_multiplier > 0.0f && p->dry_base >= 1.0f && p->dry_last_n > 0;
}

int sample_ext_needed(const struct anvil_sampler_params *p) {
    return p->n_bias > 0 || dry_on(p) || (p->typical_p > 0.0f && p->typical_p < 1.0f) ||
           p->top_n_sigma > 0.0f || p->xtc_probability > 0.0f || p->mirostat != 0 ||
           p->min_keep > 1 || p->n_order > 0;
}

anvil_status sample_ext_init(struct anvil_sampler *s) {
    const struct anvil_sampler_params *p = &s->p;
    int32_t nv = s->n_vocab;
    for (int32_t i = 0; i < p->n_bias; i++)
        if (p->bias[i].id >= nv) return ANVIL_ERR_INVALID;
    for (int32_t i = 0; i < p->n_dry_breakers; i++)
        for (int32_t j = 0; j < p->dry_breaker_len[i]; j++)
            if (p->dry_breakers[i][j] >= nv) return ANVIL_ERR_INVALID;
    int32_t cap = dry_on(p) && p->mirostat == 0 ? p->dry_last_n : 0;
    int typ = p->typical_p > 0.0f && p->typical_p < 1.0f;
    size_t off_work = (sizeof(struct sample_ext) + 15) & ~(size_t)15;
    size_t off_aux = off_work + (((size_t)nv * sizeof(float) + 15) & ~(size_t)15);
    size_t off_dry = off_aux + (typ ? (size_t)nv * sizeof(struct sample_aux) : 0);
    size_t total = off_dry + (cap ? (size_t)nv + 3 * (size_t)cap : 0) * sizeof(int32_t);
    char *mem = core_malloc(total);
    if (!mem) return ANVIL_ERR_NOMEM;
    struct sample_ext *x = (struct sample_ext *)mem;
    memset(x, 0, sizeof *x);
    x->work = (float *)(mem + off_work);
    x->aux = typ ? (struct sample_aux *)(mem + off_aux) : NULL;
    x->dry_cap = cap;
    if (cap) {
        int32_t *d = (int32_t *)(mem + off_dry);
        x->dry_max = d;
        x->dry_hist = d + nv;
        x->dry_seq = d + nv + cap;
        x->dry_z = d + nv + 2 * (size_t)cap;
        for (int32_t i = 0; i < nv; i++) x->dry_max[i] = -1;
    }
    x->pen_at = x->dry_at = -1;
    if (p->mirostat) {
        x->order[x->n_order++] = ANVIL_STAGE_TEMPERATURE;
    } else {
        const uint8_t *o = p->n_order ? p->order : default_order;
        int32_t n = p->n_order ? p->n_order : (int32_t)sizeof default_order;
        for (int32_t i = 0; i < n; i++) {
            if (o[i] == ANVIL_STAGE_PENALTIES) {
                if (x->pen_at < 0 && s->last_n > 0) x->pen_at = i;
            } else if (o[i] == ANVIL_STAGE_DRY) {
                if (x->dry_at < 0 && cap > 0) x->dry_at = i;
            } else {
                x->order[x->n_order++] = o[i];
            }
        }
    }
    x->log_min_p = p->min_p > 0.0f ? log((double)p->min_p) : -INFINITY;
    s->ext = x;
    sample_ext_reset(s);
    return ANVIL_OK;
}

void sample_ext_free(struct anvil_sampler *s) {
    core_free(s->ext);
    s->ext = NULL;
}

void sample_ext_reset(struct anvil_sampler *s) {
    s->ext->mu = 2.0f * s->p.mirostat_tau;
    s->ext->dry_n = 0;
    s->ext->dry_head = 0;
}

void sample_ext_accept(struct anvil_sampler *s, anvil_token t) {
    struct sample_ext *x = s->ext;
    if (x->dry_cap == 0) return;
    x->dry_hist[x->dry_head] = t;
    x->dry_head = x->dry_head + 1 == x->dry_cap ? 0 : x->dry_head + 1;
    if (x->dry_n < x->dry_cap) x->dry_n++;
}

/* ---------------------------------------------------------------------- */
/* DRY, fast: one Z-array over the reversed window */

static int32_t breaker_limit(const struct anvil_sampler_params *p, const anvil_token *a,
                             int32_t n) {
    for (int32_t e = n - 1; e >= 0; e--)
        for (int32_t b = 0; b < p->n_dry_breakers; b++) {
            int32_t len = p->dry_breaker_len[b];
            if (len > e + 1) continue;
            if (!memcmp(a + e - len + 1, p->dry_breakers[b], (size_t)len * sizeof *a))
                return n - 1 - e;
        }
    return n;
}

static int single_breaker(const struct anvil_sampler_params *p, anvil_token t) {
    for (int32_t b = 0; b < p->n_dry_breakers; b++)
        if (p->dry_breaker_len[b] == 1 && p->dry_breakers[b][0] == t) return 1;
    return 0;
}

static float dry_penalty(const struct anvil_sampler_params *p, int32_t len) {
    int32_t e = len - p->dry_allowed_length;
    if (p->dry_base > 1.000001f) {
        int32_t max_e = (int32_t)(88.7228391f / logf(p->dry_base));
        if (e > max_e) e = max_e;
    }
    return p->dry_multiplier * powf(p->dry_base, (float)e);
}

static void dry_apply(struct anvil_sampler *s, float *l) {
    const struct anvil_sampler_params *p = &s->p;
    struct sample_ext *x = s->ext;
    int32_t n = x->dry_n;
    if (n < 2) return;
    anvil_token *a = x->dry_seq;
    int32_t start = n == x->dry_cap ? x->dry_head : 0;
    for (int32_t i = 0; i < n; i++) a[i] = x->dry_hist[(start + i) % x->dry_cap];
    int32_t lim = breaker_limit(p, a, n);
    if (lim <= p->dry_allowed_length) return;
    /* z[k] = LCP of rev and rev[k..], rev[k] = a[n-1-k] */
    int32_t *z = x->dry_z;
    z[0] = n;
    for (int32_t k = 1, lo = 0, hi = 0; k < n; k++) {
        int32_t v = 0;
        if (k < hi) {
            v = z[k - lo];
            if (v > hi - k) v = hi - k;
        }
        while (k + v < n && a[n - 1 - v] == a[n - 1 - k - v]) v++;
        z[k] = v;
        if (k + v > hi) {
            lo = k;
            hi = k + v;
        }
    }
    /* z's scratch doubles as the list of touched tokens after use */
    int32_t n_t = 0;
    for (int32_t j = 0; j < n - 1; j++) {
        int32_t len = z[n - 1 - j];
        if (len > lim) len = lim;
        if (len < p->dry_allowed_length) continue;
        anvil_token t = a[j + 1];
        if (x->dry_max[t] < 0) a[n_t++] = t; /* a[0..n_t) is behind j + 1: safe to reuse */
        if (len > x->dry_max[t]) x->dry_max[t] = len;
    }
    for (int32_t i = 0; i < n_t; i++) {
        anvil_token t = a[i];
        if (!single_breaker(p, t)) l[t] -= dry_penalty(p, x->dry_max[t]);
        x->dry_max[t] = -1;
    }
}

/* ---------------------------------------------------------------------- */
/* stages on s->cand[0..n) */

struct chain {
    struct sample_cand *c;
    int32_t n;
    int sorted; /* c is in candidate order */
    double tc;  /* temperatures applied so far */
};

static int cmp_cand(const void *pa, const void *pb) {
    const struct sample_cand *a = pa, *b = pb;
    return sample_before(*a, *b) ? -1 : sample_before(*b, *a) ? 1 : 0;
}

static void ensure_sorted(struct chain *k) {
    if (!k->sorted) qsort(k->c, (size_t)k->n, sizeof *k->c, cmp_cand);
    k->sorted = 1;
}

static float chain_max(const struct chain *k) {
    if (k->sorted) return k->c[0].l;
    float m = k->c[0].l;
    for (int32_t i = 1; i < k->n; i++)
        if (k->c[i].l > m) m = k->c[i].l;
    return m;
}

/* the first `want` of c[0..n) in order into c[0..want), sorted */
static void select_first(struct chain *k, int32_t want) {
    if (k->sorted || want * 8 >= k->n) {
        ensure_sorted(k);
        k->n = want;
        return;
    }
    struct sample_cand *c = k->c;
    int32_t lo = 0, hi = k->n;
    while (hi - lo > 1) { /* quickselect: c[0..want) are the first want */
        int32_t mid = lo + (hi - lo) / 2;
        struct sample_cand piv = c[mid];
        c[mid] = c[hi - 1];
        c[hi - 1] = piv;
        int32_t st = lo;
        for (int32_t i = lo; i < hi - 1; i++)
            if (sample_before(c[i], piv)) {
                struct sample_cand t = c[i];
                c[i] = c[st];
                c[st] = t;
                st++;
            }
        c[hi - 1] = c[st];
        c[st] = piv;
        if (st == want || st + 1 == want) break;
        if (st > want) hi = st;
        else lo = st + 1;
    }
    k->n = want;
    k->sorted = 0;
    ensure_sorted(k);
}

static void st_top_n_sigma(struct chain *k, double nsig) {
    if (k->n <= 1) return;
    double mx = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < k->n; i++) {
        double v = (double)k->c[i].l / k->tc;
        if (v > mx) mx = v;
        sum += v;
    }
    double mean = sum / k->n, acc = 0.0;
    for (int32_t i = 0; i < k->n; i++) {
        double d = (double)k->c[i].l / k->tc - mean;
        acc += d * d;
    }
    double thr = mx - nsig * sqrt(acc / k->n);
    if (isnan(thr)) return; /* an infinite logit: no spread to measure, keep the set */
    int32_t w = 0;
    for (int32_t i = 0; i < k->n; i++)
        if ((double)k->c[i].l / k->tc >= thr) k->c[w++] = k->c[i];
    k->n = w;
}

static void st_min_p(struct chain *k, double log_min_p, int32_t min_keep) {
    float m = chain_max(k);
    int32_t w = 0;
    for (int32_t i = 0; i < k->n; i++)
        if (sample_shift(k->c[i].l, m) / k->tc >= log_min_p) w++;
    if (w < min_keep) {
        select_first(k, min_keep < k->n ? min_keep : k->n);
        return;
    }
    w = 0;
    for (int32_t i = 0; i < k->n; i++)
        if (sample_shift(k->c[i].l, m) / k->tc >= log_min_p) k->c[w++] = k->c[i];
    k->n = w;
}

static void st_top_p(struct chain *k, double top_p, int32_t min_keep) {
    float m = chain_max(k);
    sample_u128 z1 = 0;
    for (int32_t i = 0; i < k->n; i++) {
        k->c[i].w = sample_fx(sample_exp(sample_shift(k->c[i].l, m) / k->tc));
        z1 += k->c[i].w;
    }
    double thr = top_p * (double)z1;
    int32_t keep;
    if (k->sorted) {
        sample_u128 cum = 0;
        keep = k->n;
        for (int32_t i = 0; i < k->n; i++) {
            cum += k->c[i].w;
            if ((double)cum >= thr) {
                keep = i + 1;
                break;
            }
        }
    } else {
        int32_t pos = sample_walk_topp(k->c, k->n, thr); /* c partitioned around pos */
        keep = pos < k->n ? pos + 1 : k->n;
        k->sorted = 0;
    }
    if (keep < min_keep) {
        select_first(k, min_keep < k->n ? min_keep : k->n);
        return;
    }
    k->n = keep;
}

static int cmp_aux(const void *pa, const void *pb) {
    const struct sample_aux *a = pa, *b = pb;
    if (a->score < b->score) return -1;
    if (a->score > b->score) return 1;
    return (a->pos > b->pos) - (a->pos < b->pos);
}

static void st_typical(struct chain *k, struct sample_aux *aux, double tp, int32_t min_keep) {
    ensure_sorted(k);
    /* aux[i].score holds q first, then the shifted score */
    float m = k->c[0].l;
    double z = 0.0;
    for (int32_t i = 0; i < k->n; i++) {
        aux[i].score = sample_exp(sample_shift(k->c[i].l, m) / k->tc);
        z += aux[i].score;
    }
    double h = 0.0;
    for (int32_t i = 0; i < k->n; i++) {
        aux[i].score /= z;
        if (aux[i].score > 0.0) h -= aux[i].score * log(aux[i].score);
    }
    for (int32_t i = 0; i < k->n; i++) {
        double qi = aux[i].score;
        aux[i].score = qi > 0.0 ? fabs(-log(qi) - h) : INFINITY;
        aux[i].pos = i;
    }
    qsort(aux, (size_t)k->n, sizeof *aux, cmp_aux);
    double cum = 0.0;
    int32_t keep = k->n;
    for (int32_t i = 0; i < k->n; i++) {
        int32_t pos = aux[i].pos;
        cum += sample_exp(sample_shift(k->c[pos].l, m) / k->tc) / z;
        if (cum > tp && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    /* keep the chosen positions, in candidate order: mark by w */
    for (int32_t i = 0; i < k->n; i++) k->c[i].w = 0;
    for (int32_t i = 0; i < keep; i++) k->c[aux[i].pos].w = 1;
    int32_t w = 0;
    for (int32_t i = 0; i < k->n; i++)
        if (k->c[i].w) k->c[w++] = k->c[i];
    k->n = w;
}

static void st_xtc(struct chain *k, const struct anvil_sampler_params *p, uint64_t rand_xtc) {
    if (p->xtc_probability <= 0.0f || p->xtc_threshold > 0.5f || k->n < 2) return;
    if (!(sample_unit(rand_xtc) < (double)p->xtc_probability)) return;
    ensure_sorted(k);
    float m = k->c[0].l;
    double z = 0.0;
    for (int32_t i = 0; i < k->n; i++) z += sample_exp(sample_shift(k->c[i].l, m) / k->tc);
    int32_t last = 0;
    for (int32_t i = 0; i < k->n; i++) {
        if (sample_exp(sample_shift(k->c[i].l, m) / k->tc) / z >= (double)p->xtc_threshold) last = i;
        else break;
    }
    if (last > 0 && k->n - last >= p->min_keep) {
        memmove(k->c, k->c + last, (size_t)(k->n - last) * sizeof *k->c);
        k->n -= last;
    }
}

static void st_mirostat(struct chain *k, const struct anvil_sampler *s) {
    ensure_sorted(k);
    float mu = s->ext->mu;
    float m = k->c[0].l;
    double z = 0.0;
    for (int32_t i = 0; i < k->n; i++) z += sample_exp(sample_shift(k->c[i].l, m) / k->tc);
#define Q(i) (sample_exp(sample_shift(k->c[(i)].l, m) / k->tc) / z)
    if (s->p.mirostat == 1) {
        double sum_tb = 0.0, sum_tt = 0.0;
        for (int32_t i = 0; i < 99 && i < k->n - 1; i++) {
            double t = log((double)(i + 2) / (double)(i + 1));
            double b = log(Q(i) / Q(i + 1));
            sum_tb += t * b;
            sum_tt += t * t;
        }
        double sh = sum_tb / sum_tt, eps = sh - 1.0;
        double kk = pow((eps * pow(2.0, (double)mu)) / (1.0 - pow((double)s->n_vocab, -eps)),
                        1.0 / sh);
        int32_t keep = kk >= 1.0 && kk < (double)k->n ? (int32_t)kk : kk >= (double)k->n ? k->n : 1;
        k->n = keep;
    } else {
        int32_t keep = 0;
        while (keep < k->n && !(-log2(Q(keep)) > (double)mu)) keep++;
        k->n = keep > 0 ? keep : 1;
    }
#undef Q
}

/* ---------------------------------------------------------------------- */
/* the chain */

/* Steps 1-3: work logits. Returns the greedy token when temperature is 0,
 * else -1 with the candidates in s->cand[0..*n). */
static anvil_token build(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                         int32_t *n_out) {
    const struct anvil_sampler_params *p = &s->p;
    struct sample_ext *x = s->ext;
    float *l = x->work;
    int32_t nv = s->n_vocab;
    memcpy(l, logits, (size_t)nv * sizeof *l);
    for (int32_t i = 0; i < p->n_bias; i++) l[p->bias[i].id] += p->bias[i].bias;
    if (x->pen_at >= 0 && (x->dry_at < 0 || x->pen_at < x->dry_at)) {
        sample_apply_penalties(s, l);
        if (x->dry_at >= 0) dry_apply(s, l);
    } else {
        if (x->dry_at >= 0) dry_apply(s, l);
        if (x->pen_at >= 0) sample_apply_penalties(s, l);
    }
    *n_out = 0;
    if (p->temperature == 0.0f) {
        float m = -INFINITY;
        anvil_token arg = -1;
        for (int32_t i = 0; i < nv; i++)
            if (l[i] > m && sample_allowed(allowed, i)) {
                m = l[i];
                arg = i;
            }
        return arg;
    }
    struct sample_cand *c = s->cand;
    int32_t n = 0;
    for (int32_t i = 0; i < nv; i++)
        if (l[i] > -INFINITY && sample_allowed(allowed, i)) { /* NaN fails too */
            c[n].l = l[i];
            c[n].id = i;
            c[n].w = 0;
            n++;
        }
    *n_out = n;
    return -1;
}

static int32_t run_chain(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                         uint64_t rand_xtc, anvil_token *greedy, double *tc_out, int *sorted) {
    const struct anvil_sampler_params *p = &s->p;
    struct sample_ext *x = s->ext;
    int32_t n = 0;
    *greedy = build(s, logits, allowed, &n);
    if (p->temperature == 0.0f || n == 0) return 0;
    struct chain k = {.c = s->cand, .n = n, .sorted = 0, .tc = 1.0};
    int32_t mk = p->min_keep;
    for (int32_t i = 0; i < x->n_order && k.n > 0; i++) {
        switch (x->order[i]) {
        case ANVIL_STAGE_TOP_N_SIGMA:
            if (p->top_n_sigma > 0.0f) st_top_n_sigma(&k, (double)p->top_n_sigma);
            break;
        case ANVIL_STAGE_TOP_K:
            if (p->top_k > 0 && p->top_k < k.n) select_first(&k, p->top_k);
            break;
        case ANVIL_STAGE_TYPICAL:
            if (x->aux) st_typical(&k, x->aux, (double)p->typical_p, mk);
            break;
        case ANVIL_STAGE_TOP_P:
            if (p->top_p < 1.0f) st_top_p(&k, (double)p->top_p, mk);
            break;
        case ANVIL_STAGE_MIN_P:
            if (p->min_p > 0.0f) st_min_p(&k, x->log_min_p, mk);
            break;
        case ANVIL_STAGE_XTC:
            st_xtc(&k, p, rand_xtc);
            break;
        case ANVIL_STAGE_TEMPERATURE:
            k.tc *= (double)p->temperature;
            break;
        default:
            break;
        }
    }
    if (p->mirostat) st_mirostat(&k, s);
    /* the draw's weights at the applied temperature */
    float m = chain_max(&k);
    for (int32_t i = 0; i < k.n; i++) k.c[i].w = sample_fx(sample_exp(sample_shift(k.c[i].l, m) / k.tc));
    *tc_out = k.tc;
    *sorted = k.sorted;
    return k.n;
}

anvil_token sample_ext_draw(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                            uint64_t rand64, uint64_t rand_xtc, anvil_token prefer, int update) {
    anvil_token g;
    double tc;
    int sorted;
    int32_t n = run_chain(s, logits, allowed, rand_xtc, &g, &tc, &sorted);
    if (s->p.temperature == 0.0f) return g;
    if (n == 0) return -1;
    struct sample_cand *c = s->cand;
    sample_u128 z = 0;
    int32_t at = -1;
    for (int32_t i = 0; i < n; i++) {
        z += c[i].w;
        if (c[i].id == prefer) at = i;
    }
    sample_u128 r = sample_target(rand64, z);
    anvil_token tok = -1;
    uint64_t wt = 0;
    if (at >= 0 && r < c[at].w) {
        tok = prefer;
        wt = c[at].w;
    } else {
        if (at >= 0) {
            r -= c[at].w;
            c[at] = c[--n];
            sorted = 0;
        }
        int32_t pos;
        if (sorted) {
            sample_u128 cum = 0;
            for (pos = 0; pos < n - 1; pos++) {
                cum += c[pos].w;
                if (cum > r) break;
            }
        } else {
            pos = sample_walk_draw(c, n, r);
        }
        ANVIL_ASSERT(pos < n);
        tok = c[pos].id;
        wt = c[pos].w;
    }
    if (update && s->p.mirostat) {
        double q = (double)wt / (double)z;
        float surprise = (float)-log2(q);
        s->ext->mu -= s->p.mirostat_eta * (surprise - s->p.mirostat_tau);
    }
    return tok;
}

int32_t sample_ext_kept(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                        uint64_t rand_xtc, anvil_token *ids, double *probs) {
    anvil_token g;
    double tc;
    int sorted;
    int32_t n = run_chain(s, logits, allowed, rand_xtc, &g, &tc, &sorted);
    if (n == 0) return 0;
    struct sample_cand *c = s->cand;
    qsort(c, (size_t)n, sizeof *c, cmp_cand);
    sample_u128 z = 0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    for (int32_t i = 0; i < n; i++) {
        ids[i] = c[i].id;
        probs[i] = (double)c[i].w / (double)z;
    }
    return n;
}
