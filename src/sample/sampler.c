/*
 * sampler.c - token sampling: penalties, top-k, top-p, min-p, temperature
 * and a seeded draw; the fast path and the public anvil_sampler_* API.
 *
 * The exact definition of a draw is written in sample.h; sampler_ref.c is
 * its plain slow twin and tests/unit_sampler.c checks that both return the
 * same token for the same random word.
 *
 * Not here: grammar / constrained decoding (it passes the `allowed` mask),
 * stop strings, batching of samplers; logit bias, DRY, typical, top-n-sigma,
 * XTC, mirostat and custom orders are the general chain's (below, in this file), which
 * a sampler takes only when its params ask for one of them.
 *
 * Invariants and costs:
 *   - All memory is one allocation made at init, sized from n_vocab and
 *     repeat_last_n; sampling never allocates. A greedy sampler has no
 *     candidate scratch at all (it only needs one pass over the logits).
 *   - The penalty window is a ring of repeat_last_n ids plus the same ids
 *     kept sorted; accept() is O(repeat_last_n) (memmove), and a draw
 *     walks the sorted ids alongside the logits, so no n_vocab-sized
 *     count table is needed and the vocabulary is scanned in id order.
 *   - A draw never sorts the vocabulary. Pass 1 finds the maximum; pass 2
 *     keeps only tokens that can have a nonzero weight (x >= -45*max(1, T),
 *     tighter with min-p when top-p is off) and computes their weights;
 *     top-k keeps a k-entry heap during pass 2 instead of writing every
 *     token. The top-p cut and the draw are "walks" along the sorted order
 *     to the point where a running sum crosses a threshold; both run as a
 *     quickselect on weight mass (walk_find): expected O(n), only the last
 *     <= 24 candidates get sorted. Sums are fixed point, so summing an
 *     unsorted partition is exact and the result equals the sorted walk.
 *   - Cost per draw: greedy is one pass; T=1 with no filter is dominated
 *     by one sample_exp per token; the filters (top-k, min-p) cut pass 2
 *     to a few candidates, so llama.cpp's default chain costs a fraction
 *     of the unfiltered draw. The slow twin (sampler_ref.c) sorts and is
 *     an order of magnitude slower for any non-greedy setting. Figures:
 *     commit d427d16.
 *
 * References: llama.cpp src/llama-sampling.cpp (penalty rule, top-p
 * min_keep rule, min-p in logit space, the default chain order); OpenAI
 * API docs (presence/frequency penalties); Blackman & Vigna, xoshiro256**
 * and splitmix64 (https://prng.di.unimi.it/).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"

/* ---------------------------------------------------------------------- */
/* sample_exp's table: 2^(j/64) rounded to nearest, computed in 60-digit
 * decimal arithmetic (Python decimal) and written in hex so that no
 * compiler or libm rounds them */

const double sample_exp2_tab[64] = {
    0x1.0000000000000p+0, 0x1.02c9a3e778061p+0, 0x1.059b0d3158574p+0, 0x1.0874518759bc8p+0,
    0x1.0b5586cf9890fp+0, 0x1.0e3ec32d3d1a2p+0, 0x1.11301d0125b51p+0, 0x1.1429aaea92de0p+0,
    0x1.172b83c7d517bp+0, 0x1.1a35beb6fcb75p+0, 0x1.1d4873168b9aap+0, 0x1.2063b88628cd6p+0,
    0x1.2387a6e756238p+0, 0x1.26b4565e27cddp+0, 0x1.29e9df51fdee1p+0, 0x1.2d285a6e4030bp+0,
    0x1.306fe0a31b715p+0, 0x1.33c08b26416ffp+0, 0x1.371a7373aa9cbp+0, 0x1.3a7db34e59ff7p+0,
    0x1.3dea64c123422p+0, 0x1.4160a21f72e2ap+0, 0x1.44e086061892dp+0, 0x1.486a2b5c13cd0p+0,
    0x1.4bfdad5362a27p+0, 0x1.4f9b2769d2ca7p+0, 0x1.5342b569d4f82p+0, 0x1.56f4736b527dap+0,
    0x1.5ab07dd485429p+0, 0x1.5e76f15ad2148p+0, 0x1.6247eb03a5585p+0, 0x1.6623882552225p+0,
    0x1.6a09e667f3bcdp+0, 0x1.6dfb23c651a2fp+0, 0x1.71f75e8ec5f74p+0, 0x1.75feb564267c9p+0,
    0x1.7a11473eb0187p+0, 0x1.7e2f336cf4e62p+0, 0x1.82589994cce13p+0, 0x1.868d99b4492edp+0,
    0x1.8ace5422aa0dbp+0, 0x1.8f1ae99157736p+0, 0x1.93737b0cdc5e5p+0, 0x1.97d829fde4e50p+0,
    0x1.9c49182a3f090p+0, 0x1.a0c667b5de565p+0, 0x1.a5503b23e255dp+0, 0x1.a9e6b5579fdbfp+0,
    0x1.ae89f995ad3adp+0, 0x1.b33a2b84f15fbp+0, 0x1.b7f76f2fb5e47p+0, 0x1.bcc1e904bc1d2p+0,
    0x1.c199bdd85529cp+0, 0x1.c67f12e57d14bp+0, 0x1.cb720dcef9069p+0, 0x1.d072d4a07897cp+0,
    0x1.d5818dcfba487p+0, 0x1.da9e603db3285p+0, 0x1.dfc97337b9b5fp+0, 0x1.e502ee78b3ff6p+0,
    0x1.ea4afa2a490dap+0, 0x1.efa1bee615a27p+0, 0x1.f50765b6e4540p+0, 0x1.fa7c1819e90d8p+0,
};

/* ---------------------------------------------------------------------- */
/* params */

struct anvil_sampler_params anvil_sampler_default_params(void) {
    /* llama.cpp's common defaults */
    struct anvil_sampler_params p = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .seed = 0,
        /* the rest off, with llama.cpp's values for when they are turned on */
        .dry_base = 1.75f,
        .dry_allowed_length = 2,
        .dry_last_n = 4096,
        .xtc_threshold = 0.1f,
        .mirostat_tau = 5.0f,
        .mirostat_eta = 0.1f,
    };
    return p;
}

bool anvil_sampler_params_plain_greedy(const struct anvil_sampler_params *p) {
    int dry = p->dry_multiplier > 0.0f && p->dry_base >= 1.0f && p->dry_last_n > 0;
    return p->temperature == 0.0f && p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f &&
           p->frequency_penalty == 0.0f && p->n_bias == 0 && !dry;
}

#define CHECK(cond, ...)                                                                        \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            errmsg_set(err, err_cap, __VA_ARGS__);                                             \
            return ANVIL_ERR_INVALID;                                                          \
        }                                                                                      \
    } while (0)

/* the parameters of the general chain (every float test fails on NaN) */
static anvil_status check_ext(const struct anvil_sampler_params *p, char *err, size_t err_cap) {
    CHECK(p->min_keep >= 0 && p->min_keep <= SAMPLE_MAX_VOCAB, "min_keep must be >= 0 (got %d)",
          (int)p->min_keep);
    CHECK(p->typical_p >= 0.0f && p->typical_p <= 1.0f, "typical_p must be in [0, 1] (got %g)",
          (double)p->typical_p);
    CHECK(p->top_n_sigma >= 0.0f && isfinite(p->top_n_sigma),
          "top_n_sigma must be a finite number >= 0 (got %g)", (double)p->top_n_sigma);
    CHECK(p->dry_multiplier >= 0.0f && isfinite(p->dry_multiplier),
          "dry_multiplier must be a finite number >= 0 (got %g)", (double)p->dry_multiplier);
    CHECK(p->dry_base >= 0.0f && isfinite(p->dry_base),
          "dry_base must be a finite number >= 0 (got %g)", (double)p->dry_base);
    CHECK(p->dry_allowed_length >= 0 && p->dry_allowed_length <= SAMPLE_MAX_LAST_N,
          "dry_allowed_length must be in [0, %d] (got %d)", SAMPLE_MAX_LAST_N,
          (int)p->dry_allowed_length);
    CHECK(p->dry_last_n >= 0 && p->dry_last_n <= SAMPLE_MAX_LAST_N,
          "dry_penalty_last_n must be in [0, %d] (got %d)", SAMPLE_MAX_LAST_N, (int)p->dry_last_n);
    CHECK(p->n_dry_breakers >= 0 && p->n_dry_breakers <= ANVIL_SAMPLER_MAX_BREAKERS,
          "at most %d DRY sequence breakers (got %d)", ANVIL_SAMPLER_MAX_BREAKERS,
          (int)p->n_dry_breakers);
    for (int32_t i = 0; i < p->n_dry_breakers; i++) {
        CHECK(p->dry_breaker_len[i] >= 1 && p->dry_breaker_len[i] <= ANVIL_SAMPLER_MAX_BREAKER_LEN,
              "a DRY sequence breaker must be 1 to %d tokens (got %d)",
              ANVIL_SAMPLER_MAX_BREAKER_LEN, (int)p->dry_breaker_len[i]);
        for (int32_t j = 0; j < p->dry_breaker_len[i]; j++)
            CHECK(p->dry_breakers[i][j] >= 0, "DRY sequence breaker token ids must be >= 0");
    }
    CHECK(p->xtc_probability >= 0.0f && p->xtc_probability <= 1.0f,
          "xtc_probability must be in [0, 1] (got %g)", (double)p->xtc_probability);
    CHECK(p->xtc_threshold >= 0.0f && p->xtc_threshold <= 1.0f,
          "xtc_threshold must be in [0, 1] (got %g)", (double)p->xtc_threshold);
    CHECK(p->mirostat >= 0 && p->mirostat <= 2, "mirostat must be 0, 1 or 2 (got %d)",
          (int)p->mirostat);
    CHECK(p->mirostat_tau >= 0.0f && isfinite(p->mirostat_tau),
          "mirostat_tau must be a finite number >= 0 (got %g)", (double)p->mirostat_tau);
    CHECK(p->mirostat_eta >= 0.0f && isfinite(p->mirostat_eta),
          "mirostat_eta must be a finite number >= 0 (got %g)", (double)p->mirostat_eta);
    CHECK(p->n_order >= 0 && p->n_order <= ANVIL_SAMPLER_MAX_ORDER,
          "the sampler order holds at most %d stages (got %d)", ANVIL_SAMPLER_MAX_ORDER,
          (int)p->n_order);
    for (int32_t i = 0; i < p->n_order; i++)
        CHECK(p->order[i] >= ANVIL_STAGE_PENALTIES && p->order[i] < ANVIL_STAGE_COUNT_,
              "unknown sampler stage %d", (int)p->order[i]);
    CHECK(p->n_bias >= 0 && p->n_bias <= ANVIL_SAMPLER_MAX_BIAS,
          "at most %d logit-bias entries (got %d)", ANVIL_SAMPLER_MAX_BIAS, (int)p->n_bias);
    for (int32_t i = 0; i < p->n_bias; i++) {
        CHECK(p->bias[i].id >= 0, "logit-bias token ids must be >= 0 (got %d)",
              (int)p->bias[i].id);
        CHECK(!isnan(p->bias[i].bias) && p->bias[i].bias != INFINITY,
              "a logit bias must be a number or -inf (got %g)", (double)p->bias[i].bias);
    }
    return ANVIL_OK;
}

anvil_status anvil_sampler_params_check(const struct anvil_sampler_params *p, char *err,
                                        size_t err_cap) {
    if (!p) {
        errmsg_set(err, err_cap, "sampler params: NULL");
        return ANVIL_ERR_INVALID;
    }
    /* every float test is written so that NaN fails it */
    if (!(p->temperature >= 0.0f && isfinite(p->temperature))) {
        errmsg_set(err, err_cap, "temperature must be a finite number >= 0 (got %g)",
                   (double)p->temperature);
        return ANVIL_ERR_INVALID;
    }
    if (p->top_k < 0) {
        errmsg_set(err, err_cap, "top_k must be >= 0 (got %d)", (int)p->top_k);
        return ANVIL_ERR_INVALID;
    }
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
        errmsg_set(err, err_cap, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
        return ANVIL_ERR_INVALID;
    }
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
        errmsg_set(err, err_cap, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
        return ANVIL_ERR_INVALID;
    }
    if (!(p->repeat_penalty > 0.0f && isfinite(p->repeat_penalty))) {
        errmsg_set(err, err_cap, "repeat_penalty must be a finite number > 0 (got %g)",
                   (double)p->repeat_penalty);
        return ANVIL_ERR_INVALID;
    }
    if (p->repeat_last_n < 0 || p->repeat_last_n > SAMPLE_MAX_LAST_N) {
        errmsg_set(err, err_cap, "repeat_last_n must be in [0, %d] (got %d)", SAMPLE_MAX_LAST_N,
                   (int)p->repeat_last_n);
        return ANVIL_ERR_INVALID;
    }
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f)) {
        errmsg_set(err, err_cap, "presence_penalty must be in [-2, 2] (got %g)",
                   (double)p->presence_penalty);
        return ANVIL_ERR_INVALID;
    }
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f)) {
        errmsg_set(err, err_cap, "frequency_penalty must be in [-2, 2] (got %g)",
                   (double)p->frequency_penalty);
        return ANVIL_ERR_INVALID;
    }
    return check_ext(p, err, err_cap);
}

/* ---------------------------------------------------------------------- */
/* RNG: xoshiro256** seeded through splitmix64 */

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t sample_rng_next(struct anvil_sampler *s) {
    uint64_t *st = s->rng;
    uint64_t out = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return out;
}

static void rng_seed(struct anvil_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = core_splitmix64(&x);
    /* splitmix64 never yields four zero words in a row, so the state is valid */
}

/* ---------------------------------------------------------------------- */
/* lifetime */

int sample_penalties_on(const struct anvil_sampler *s) {
    if (s->ext) /* does the greedy answer differ from the raw argmax? */
        return s->p.mirostat == 0 ? s->ext->pen_at >= 0 || s->ext->dry_at >= 0 || s->p.n_bias > 0
                                  : s->p.n_bias > 0;
    return s->last_n > 0;
}

anvil_status anvil_sampler_init(const struct anvil_sampler_params *p, int32_t n_vocab,
                                struct anvil_sampler **out) {
    struct anvil_sampler_params def = anvil_sampler_default_params();
    if (!p) p = &def;
    if (!out || n_vocab <= 0 || n_vocab > SAMPLE_MAX_VOCAB) return ANVIL_ERR_INVALID;
    char msg[128];
    if (anvil_sampler_params_check(p, msg, sizeof msg) != ANVIL_OK) {
        core_log(CORE_LOG_DEBUG, "anvil_sampler_init: %s", msg);
        return ANVIL_ERR_INVALID;
    }
    /* penalties that change nothing keep no window (llama.cpp does the same) */
    int32_t last_n = p->repeat_last_n;
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        last_n = 0;
    int need_cand = p->temperature > 0.0f || sample_ext_needed(p);

    /* one allocation: struct | cand (n_vocab) | hist, sorted, pen_id, pen_cnt (last_n each).
     * n_vocab <= 2^23 and last_n <= 2^20 keep this far from overflow. */
    size_t off_cand = (sizeof(struct anvil_sampler) + 15) & ~(size_t)15;
    size_t sz_cand = need_cand ? (size_t)n_vocab * sizeof(struct sample_cand) : 0;
    size_t off_ring = off_cand + sz_cand;
    size_t total = off_ring + 4 * (size_t)last_n * sizeof(int32_t);
    char *mem = core_malloc(total);
    if (!mem) return ANVIL_ERR_NOMEM;
    struct anvil_sampler *s = (struct anvil_sampler *)mem;
    memset(s, 0, sizeof *s);
    s->p = *p;
    s->n_vocab = n_vocab;
    s->last_n = last_n;
    s->log_min_p = p->min_p > 0.0f ? log((double)p->min_p) : -INFINITY;
    s->cand = need_cand ? (struct sample_cand *)(mem + off_cand) : NULL;
    int32_t *ring = (int32_t *)(mem + off_ring);
    s->hist = ring;
    s->sorted = ring + last_n;
    s->pen_id = ring + 2 * (size_t)last_n;
    s->pen_cnt = ring + 3 * (size_t)last_n;
    rng_seed(s);
    if (sample_ext_needed(p)) {
        anvil_status st = sample_ext_init(s);
        if (st != ANVIL_OK) {
            core_free(mem);
            return st;
        }
    }
    *out = s;
    return ANVIL_OK;
}

void anvil_sampler_free(struct anvil_sampler *s) {
    if (!s) return;
    sample_ext_free(s);
    core_free(s);
}

void anvil_sampler_reset(struct anvil_sampler *s) {
    if (!s) return;
    s->hist_n = 0;
    s->hist_head = 0;
    rng_seed(s);
    if (s->ext) sample_ext_reset(s);
}

/* ---------------------------------------------------------------------- */
/* penalty window */

/* first index in a[0..n) with a[i] >= t (strict: > t) */
static int32_t lower_bound(const anvil_token *a, int32_t n, anvil_token t, int strict) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (a[mid] < t || (strict && a[mid] == t)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void anvil_sampler_accept(struct anvil_sampler *s, anvil_token t) {
    /* ids outside the vocabulary (e.g. a -1 from sample) cannot be penalized */
    if (!s || t < 0 || t >= s->n_vocab) return;
    if (s->ext) sample_ext_accept(s, t);
    if (s->last_n == 0) return;
    int32_t n = s->hist_n;
    if (n == s->last_n) { /* evict the oldest from the sorted multiset */
        anvil_token old = s->hist[s->hist_head];
        int32_t i = lower_bound(s->sorted, n, old, 0);
        ANVIL_DASSERT(i < n && s->sorted[i] == old);
        memmove(s->sorted + i, s->sorted + i + 1, (size_t)(n - 1 - i) * sizeof *s->sorted);
        n--;
    } else {
        s->hist_n++;
    }
    s->hist[s->hist_head] = t;
    s->hist_head = s->hist_head + 1 == s->last_n ? 0 : s->hist_head + 1;
    int32_t i = lower_bound(s->sorted, n, t, 1);
    memmove(s->sorted + i + 1, s->sorted + i, (size_t)(n - i) * sizeof *s->sorted);
    s->sorted[i] = t;
}

/* Fill pen_id/pen_cnt with the distinct window tokens; returns how many. */
static int32_t build_penalties(struct anvil_sampler *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->hist_n; i++) {
        if (n > 0 && s->pen_id[n - 1] == s->sorted[i]) {
            s->pen_cnt[n - 1]++;
        } else {
            s->pen_id[n] = s->sorted[i];
            s->pen_cnt[n] = 1;
            n++;
        }
    }
    return n;
}

void sample_apply_penalties(const struct anvil_sampler *s, float *logits) {
    /* const: reads the sorted window directly instead of the pen_* scratch */
    for (int32_t i = 0; i < s->hist_n;) {
        int32_t j = i;
        while (j < s->hist_n && s->sorted[j] == s->sorted[i]) j++;
        anvil_token t = s->sorted[i];
        logits[t] = sample_penalize(logits[t], j - i, &s->p);
        i = j;
    }
}

/* ---------------------------------------------------------------------- */
/* pass 1: the maximum. Every candidate (allowed, penalized, not NaN/-inf)
 * in id order; plain runs between penalized ids go through a tight loop. */

struct scan_max {
    float m;     /* max penalized logit so far, -inf when none */
    int32_t arg; /* its lowest id, -1 when none */
};

static void max_range(struct scan_max *r, const float *logits, const uint8_t *allowed, int32_t a,
                      int32_t b) {
    /* strict > skips NaN and -inf, and keeps the lowest id among ties */
    float m = r->m;
    int32_t arg = r->arg;
    if (!allowed) {
        for (int32_t i = a; i < b; i++)
            if (logits[i] > m) {
                m = logits[i];
                arg = i;
            }
    } else {
        for (int32_t i = a; i < b; i++)
            if (logits[i] > m && sample_allowed(allowed, i)) {
                m = logits[i];
                arg = i;
            }
    }
    r->m = m;
    r->arg = arg;
}

static struct scan_max scan_max(const struct anvil_sampler *s, int32_t n_pen,
                                const float *logits, const uint8_t *allowed) {
    struct scan_max r = {-INFINITY, -1};
    int32_t a = 0;
    for (int32_t j = 0; j <= n_pen; j++) {
        int32_t b = j < n_pen ? s->pen_id[j] : s->n_vocab;
        max_range(&r, logits, allowed, a, b);
        if (j < n_pen && sample_allowed(allowed, b)) {
            float l = sample_penalize(logits[b], s->pen_cnt[j], &s->p);
            if (l > r.m) {
                r.m = l;
                r.arg = b;
            }
        }
        a = b + 1;
    }
    return r;
}

/* ---------------------------------------------------------------------- */
/* pass 2: candidate collection */

/* fixed-point weight of logit l at temperature t (x / 1 is exact, so t = 1
 * is the plain softmax weight) */
static inline uint64_t weight(float l, float m, double t) {
    return sample_fx(sample_exp(sample_shift(l, m) / t));
}

static inline void swap_cand(struct sample_cand *a, struct sample_cand *b) {
    struct sample_cand t = *a;
    *a = *b;
    *b = t;
}

/* Keeps the candidates with sample_shift(l, m) >= xcut, with their weight
 * at temperature t. With cap > 0 it keeps only the first `cap` of them in
 * candidate order, in a binary heap whose root is the last kept, so a
 * top-k pass writes O(k log) entries instead of the vocabulary. */
struct collect {
    struct sample_cand *c;
    int32_t n;   /* entries in c */
    int32_t cap; /* 0 = keep all */
    float m;
    double xcut, t;
};

static void heap_down(struct sample_cand *c, int32_t n, int32_t i) {
    for (;;) {
        int32_t w = i, a = 2 * i + 1, b = a + 1;
        if (a < n && sample_before(c[w], c[a])) w = a;
        if (b < n && sample_before(c[w], c[b])) w = b;
        if (w == i) return;
        swap_cand(&c[i], &c[w]);
        i = w;
    }
}

static void heap_up(struct sample_cand *c, int32_t i) {
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!sample_before(c[parent], c[i])) return;
        swap_cand(&c[parent], &c[i]);
        i = parent;
    }
}

static inline void collect_one(struct collect *k, float l, int32_t id) {
    /* NaN fails the >=; -inf gives x = -inf and fails too */
    if (!(sample_shift(l, k->m) >= k->xcut)) return;
    struct sample_cand e = {l, id, 0};
    if (k->cap == 0) {
        e.w = weight(l, k->m, k->t);
        k->c[k->n++] = e;
    } else if (k->n < k->cap) {
        e.w = weight(l, k->m, k->t);
        k->c[k->n] = e;
        heap_up(k->c, k->n);
        k->n++;
    } else if (sample_before(e, k->c[0])) {
        e.w = weight(l, k->m, k->t);
        k->c[0] = e;
        heap_down(k->c, k->n, 0);
    }
}

/* collect_one for cap == 0 over a plain run [a, b) without a mask: the
 * common case, kept small enough to inline and overlap the exps */
static void collect_run(struct collect *k, const float *logits, int32_t a, int32_t b) {
    struct sample_cand *c = k->c;
    int32_t n = k->n;
    const float m = k->m;
    const double xcut = k->xcut, t = k->t;
    for (int32_t i = a; i < b; i++) {
        double x = sample_shift(logits[i], m);
        if (x >= xcut) {
            c[n].l = logits[i];
            c[n].id = i;
            c[n].w = sample_fx(sample_exp(x / t));
            n++;
        }
    }
    k->n = n;
}

static void scan_collect(const struct anvil_sampler *s, int32_t n_pen, const float *logits,
                         const uint8_t *allowed, struct collect *k) {
    int32_t a = 0;
    for (int32_t j = 0; j <= n_pen; j++) {
        int32_t b = j < n_pen ? s->pen_id[j] : s->n_vocab;
        if (!allowed && k->cap == 0) {
            collect_run(k, logits, a, b);
        } else if (!allowed) {
            for (int32_t i = a; i < b; i++) collect_one(k, logits[i], i);
        } else {
            for (int32_t i = a; i < b; i++)
                if (sample_allowed(allowed, i)) collect_one(k, logits[i], i);
        }
        if (j < n_pen && sample_allowed(allowed, b))
            collect_one(k, sample_penalize(logits[b], s->pen_cnt[j], &s->p), b);
        a = b + 1;
    }
}

/* ---------------------------------------------------------------------- */
/* weighted selection: the walk along the order, without sorting */

/* The stopping rule of a walk: top-p stops at the first cum with
 * (double)cum >= thr, the draw at the first cum > r. Both are monotone
 * in cum, which is all weighted selection needs. */
struct walk {
    int topp;
    double thr;
    sample_u128 r;
};

static inline int reached(const struct walk *wk, sample_u128 cum) {
    return wk->topp ? (double)cum >= wk->thr : cum > wk->r;
}

static int cmp_cand(const void *pa, const void *pb) {
    const struct sample_cand *a = pa, *b = pb;
    return sample_before(*a, *b) ? -1 : sample_before(*b, *a) ? 1 : 0;
}

/* Walking c[0..n) in candidate order and summing w, find the first
 * position whose running sum reaches the rule. Quickselect on the weight
 * mass instead of the rank: partition around a pivot, sum the weight of
 * the side before it, and keep only the side where the crossing lies -
 * expected O(n) compares, no sort of the vocabulary. On return c[0..pos)
 * hold exactly the candidates before c[pos] (unsorted); returns n when
 * the total never reaches the rule. */
static int32_t walk_find(struct sample_cand *c, int32_t n, const struct walk *wk) {
    int32_t lo = 0, hi = n;
    sample_u128 base = 0; /* sum of w over c[0..lo), all before c[lo..hi) */
    while (hi - lo > 24) {
        int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* median of three into c[last], then Lomuto partition */
        if (sample_before(c[mid], c[lo])) swap_cand(&c[mid], &c[lo]);
        if (sample_before(c[last], c[lo])) swap_cand(&c[last], &c[lo]);
        if (sample_before(c[mid], c[last])) swap_cand(&c[mid], &c[last]);
        struct sample_cand piv = c[last];
        int32_t st = lo;
        sample_u128 w_before = 0;
        for (int32_t i = lo; i < last; i++) {
            if (sample_before(c[i], piv)) {
                w_before += c[i].w;
                swap_cand(&c[i], &c[st]);
                st++;
            }
        }
        swap_cand(&c[st], &c[last]);
        if (reached(wk, base + w_before)) {
            hi = st;
        } else if (reached(wk, base + w_before + c[st].w)) {
            return st;
        } else {
            base += w_before + c[st].w;
            lo = st + 1;
        }
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand);
    for (int32_t i = lo; i < hi; i++) {
        base += c[i].w;
        if (reached(wk, base)) return i;
    }
    return n;
}

/* ---------------------------------------------------------------------- */
/* the draw */

/* Steps 1-7 of sample.h: returns the kept count n, the set in s->cand[0..n)
 * (any order) with weights at the sampler's temperature; 0 when there is no
 * candidate. */
static int32_t build_kept(struct anvil_sampler *s, const float *logits, const uint8_t *allowed) {
    const struct anvil_sampler_params *p = &s->p;
    int32_t n_pen = s->last_n ? build_penalties(s) : 0;
    struct scan_max mx = scan_max(s, n_pen, logits, allowed);
    if (mx.arg < 0) return 0;
    float m = mx.m;
    int topp = p->top_p < 1.0f;
    double t = (double)p->temperature;

    /* Drop tokens that have weight 0 both at T = 1 (top-p) and at T (the
     * draw): x < -45 * max(1, T) makes both fx() zero, and such tokens sit
     * at the end of the order, so no step can tell they are gone.
     * Without top-p, min-p (a prefix of the order, like top-k) can cut
     * here too: min-p(top-k(S)) = top-k(min-p(S)) for prefixes. With top-p
     * it cannot, because top-p's total Z1 covers the whole top-k set. */
    struct collect k = {.c = s->cand, .n = 0, .cap = 0, .m = m, .t = topp ? 1.0 : t};
    k.xcut = SAMPLE_X_CUT * (t > 1.0 ? t : 1.0);
    if (!topp && p->min_p > 0.0f && s->log_min_p > k.xcut) k.xcut = s->log_min_p;
    if (p->top_k > 0 && p->top_k < s->n_vocab) k.cap = p->top_k;
    scan_collect(s, n_pen, logits, allowed, &k);
    int32_t n = k.n;
    ANVIL_DASSERT(n >= 1); /* the max itself has x = 0 */
    struct sample_cand *c = s->cand;

    if (topp) {
        sample_u128 z1 = 0;
        for (int32_t i = 0; i < n; i++) z1 += c[i].w;
        struct walk wk = {.topp = 1, .thr = (double)p->top_p * (double)z1};
        if (p->min_p > 0.0f) { /* min-p after top-p: both prefixes, so cut first */
            int32_t w = 0;
            for (int32_t i = 0; i < n; i++)
                if (sample_shift(c[i].l, m) >= s->log_min_p) c[w++] = c[i];
            n = w;
        }
        int32_t pos = walk_find(c, n, &wk);
        if (pos < n) n = pos + 1;
        if (t != 1.0) /* the draw's weights */
            for (int32_t i = 0; i < n; i++) c[i].w = weight(c[i].l, m, t);
    }
    return n;
}

int32_t sample_walk_draw(struct sample_cand *c, int32_t n, sample_u128 r) {
    struct walk wk = {.topp = 0, .r = r};
    return walk_find(c, n, &wk);
}

int32_t sample_walk_topp(struct sample_cand *c, int32_t n, double thr) {
    struct walk wk = {.topp = 1, .thr = thr};
    return walk_find(c, n, &wk);
}

anvil_token sample_draw(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                        uint64_t rand64) {
    if (s->ext) return sample_ext_draw(s, logits, allowed, rand64, 0, -1, 0);
    if (s->p.temperature == 0.0f) {
        int32_t n_pen = s->last_n ? build_penalties(s) : 0;
        return scan_max(s, n_pen, logits, allowed).arg;
    }
    int32_t n = build_kept(s, logits, allowed);
    if (n == 0) return -1;
    struct sample_cand *c = s->cand;
    sample_u128 z = 0;
    for (int32_t i = 0; i < n; i++) z += c[i].w;
    struct walk wk = {.topp = 0, .r = sample_target(rand64, z)};
    int32_t pos = walk_find(c, n, &wk);
    ANVIL_ASSERT(pos < n); /* r < z */
    return c[pos].id;
}

anvil_token sample_draw_prefer(struct anvil_sampler *s, const float *logits,
                               const uint8_t *allowed, uint64_t rand64, anvil_token prefer) {
    if (s->ext) return sample_ext_draw(s, logits, allowed, rand64, 0, prefer, 0);
    if (s->p.temperature == 0.0f) return sample_draw(s, logits, allowed, rand64);
    int32_t n = build_kept(s, logits, allowed);
    if (n == 0) return -1;
    struct sample_cand *c = s->cand;
    sample_u128 z = 0;
    int32_t at = -1;
    for (int32_t i = 0; i < n; i++) {
        z += c[i].w;
        if (c[i].id == prefer) at = i;
    }
    sample_u128 r = sample_target(rand64, z);
    if (at >= 0) {
        /* the preferred token first in the order: it owns [0, w) */
        uint64_t wp = c[at].w;
        if (r < wp) return prefer;
        r -= wp;
        c[at] = c[--n]; /* the rest keep their order: walk_find sorts by (l, id) */
    }
    struct walk wk = {.topp = 0, .r = r};
    int32_t pos = walk_find(c, n, &wk);
    ANVIL_ASSERT(pos < n); /* r < z - w(prefer) */
    return c[pos].id;
}

anvil_token anvil_sampler_sample_spec(struct anvil_sampler *s, const float *logits,
                                      const uint8_t *allowed, anvil_token draft) {
    ANVIL_ASSERT(s && logits);
    uint64_t r = s->p.temperature > 0.0f ? sample_rng_next(s) : 0;
    if (s->ext) {
        uint64_t x = s->p.temperature > 0.0f && s->p.xtc_probability > 0.0f ? sample_rng_next(s) : 0;
        return sample_ext_draw(s, logits, allowed, r, x, draft, 1);
    }
    return sample_draw_prefer(s, logits, allowed, r, draft);
}

int32_t sample_kept(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                    anvil_token *ids, double *probs) {
    if (s->p.temperature == 0.0f) return 0;
    if (s->ext) return sample_ext_kept(s, logits, allowed, 0, ids, probs);
    int32_t n = build_kept(s, logits, allowed);
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

anvil_token anvil_sampler_sample(struct anvil_sampler *s, const float *logits,
                                 const uint8_t *allowed) {
    ANVIL_ASSERT(s && logits);
    uint64_t r = s->p.temperature > 0.0f ? sample_rng_next(s) : 0;
    if (s->ext) {
        uint64_t x = s->p.temperature > 0.0f && s->p.xtc_probability > 0.0f ? sample_rng_next(s) : 0;
        return sample_ext_draw(s, logits, allowed, r, x, -1, 1);
    }
    return sample_draw(s, logits, allowed, r);
}

/* ---------------------------------------------------------------------- */
/* log-probabilities */

int32_t sample_logprobs(const float *logits, int32_t n_vocab, anvil_token chosen, int32_t n_top,
                        struct sample_logprob *top, float *chosen_lp) {
    float m = -INFINITY;
    int any = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (l != l) continue;
        if (!any || l > m) m = l;
        any = 1;
    }
    if (!any || m == -INFINITY) { /* every logit NaN or -inf: no distribution */
        if (chosen_lp) *chosen_lp = NAN;
        return 0;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] == logits[i]) sum += sample_exp(sample_shift(logits[i], m));
    double lse = log(sum);
    /* top n_top by insertion into a sorted array: O(n_vocab) compares and
     * O(n_top) moves for the rare token that enters */
    int32_t nt = 0;
    if (n_top > 0) {
        for (int32_t i = 0; i < n_vocab; i++) {
            float l = logits[i];
            if (l != l) continue;
            if (nt == n_top && !(l > top[nt - 1].logprob)) continue; /* ids ascend: ties stay out */
            int32_t j = nt < n_top ? nt++ : nt - 1;
            while (j > 0 && l > top[j - 1].logprob) {
                top[j] = top[j - 1];
                j--;
            }
            top[j].id = i;
            top[j].logprob = l; /* raw logit for now */
        }
        for (int32_t j = 0; j < nt; j++)
            top[j].logprob = (float)(sample_shift(top[j].logprob, m) - lse);
    }
    if (chosen_lp) {
        if (chosen < 0 || chosen >= n_vocab || logits[chosen] != logits[chosen])
            *chosen_lp = chosen >= 0 && chosen < n_vocab ? -INFINITY : NAN;
        else
            *chosen_lp = (float)(sample_shift(logits[chosen], m) - lse);
    }
    return nt;
}

/* ====================================================================== */
/*
 * The general sampler chain (was chain.c; one file with the fast path,
 * since each calls the other): logit bias, DRY, top-n-sigma,
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

/* Quickselect: the first `want` of c[0..n) in candidate order into
 * c[0..want) (in no order), the rest after them. */
static void partition_first(struct sample_cand *c, int32_t n, int32_t want) {
    int32_t lo = 0, hi = n;
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
}

/* the first `want` of c[0..n) in order into c[0..want), sorted */
static void select_first(struct chain *k, int32_t want) {
    if (k->sorted || want * 8 >= k->n) {
        ensure_sorted(k);
        k->n = want;
        return;
    }
    partition_first(k->c, k->n, want);
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

/* Mirostat in O(n), no full sort (a sort of a 49k vocabulary took 6.7
 * ms a draw). A candidate's probability q is its weight over the exact
 * fixed-point sum of the weights (the draw's own), so it does not depend
 * on the order the candidates are in, and sampler_ref.c's sorted twin
 * gets the same bits. v1 needs the 100 first in order (a selection, then a sort of
 * those), then keeps the first kk (another selection); v2 keeps every
 * candidate with surprise -log2 q <= mu: q falls along the order, so that
 * set is the prefix the sorted walk would keep (ties in or out together),
 * and at least the first. */
static void st_mirostat(struct chain *k, const struct anvil_sampler *s) {
    float mu = s->ext->mu;
    float m = chain_max(k);
    sample_u128 z1 = 0;
    for (int32_t i = 0; i < k->n; i++) {
        k->c[i].w = sample_fx(sample_exp(sample_shift(k->c[i].l, m) / k->tc));
        z1 += k->c[i].w;
    }
    double z = (double)z1 / SAMPLE_FX_SCALE;
#define Q(i) (sample_exp(sample_shift(k->c[(i)].l, m) / k->tc) / z)
    if (s->p.mirostat == 1) {
        int32_t n = k->n, t = n < 100 ? n : 100;
        if (!k->sorted) {
            partition_first(k->c, n, t);
            qsort(k->c, (size_t)t, sizeof *k->c, cmp_cand);
        }
        double sum_tb = 0.0, sum_tt = 0.0;
        for (int32_t i = 0; i < t - 1; i++) {
            double ti = log((double)(i + 2) / (double)(i + 1));
            double b = log(Q(i) / Q(i + 1));
            sum_tb += ti * b;
            sum_tt += ti * ti;
        }
        double sh = sum_tb / sum_tt, eps = sh - 1.0;
        double kk = pow((eps * pow(2.0, (double)mu)) / (1.0 - pow((double)s->n_vocab, -eps)),
                        1.0 / sh);
        int32_t keep = kk >= 1.0 && kk < (double)n ? (int32_t)kk : kk >= (double)n ? n : 1;
        if (keep <= t) {
            k->n = keep; /* c[0..t) is sorted */
            k->sorted = 1;
        } else {
            select_first(k, keep);
        }
    } else {
        /* the test is monotone in the logit: evaluate it only between the
         * lowest logit seen to pass and the highest seen to fail (a few
         * evaluations on random order, not one per candidate) */
        int32_t w = 0;
        float pass = INFINITY, fail = -INFINITY;
        for (int32_t i = 0; i < k->n; i++) {
            float l = k->c[i].l;
            bool in;
            if (l >= pass) in = true;
            else if (l <= fail) in = false;
            else if ((in = !(-log2(Q(i)) > (double)mu))) pass = l;
            else fail = l;
            if (in) k->c[w++] = k->c[i]; /* keeps the order */
        }
        if (w == 0) { /* nothing moved: the first in order */
            int32_t best = 0;
            for (int32_t i = 1; i < k->n; i++)
                if (sample_before(k->c[i], k->c[best])) best = i;
            k->c[0] = k->c[best];
            w = 1;
        }
        k->n = w;
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
