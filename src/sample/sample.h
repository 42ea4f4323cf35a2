/*
 * sample.h - sampler internals: the sampler struct, the exact numeric
 * definition shared by the fast path (sampler.c) and its slow twin
 * (sampler_ref.c), and the log-probability helper for the server.
 *
 * The public API is in include/anvil.h (anvil_sampler_*). This header is
 * for src/engine, src/server (through the engine) and tests.
 *
 * Definition of one draw (both twins implement exactly this):
 *   1. Penalties (llama.cpp `penalties` sampler): for every token t that
 *      occurs c > 0 times among the last repeat_last_n accepted tokens,
 *        l = l <= 0 ? l * repeat_penalty : l / repeat_penalty;
 *        l = l - (c * frequency_penalty + presence_penalty);   (float math)
 *   2. Candidates: tokens whose bit is set in `allowed` (all when NULL),
 *      whose penalized logit is neither NaN nor -inf. None -> return -1.
 *      m = max logit over candidates. x(t) = l(t) - m in double, taken as
 *      0 when l == m (so that a +inf maximum gives weight 1, not NaN).
 *   3. temperature == 0: argmax of l, ties to the lowest id. Stop.
 *   4. Order candidates by (l descending, id ascending): a total order.
 *   5. top_k > 0: keep the first top_k.
 *   6. top_p < 1: w1(t) = fx(exp(x)); Z1 = sum of w1 over the kept set;
 *      keep the shortest prefix whose running sum cum satisfies
 *      (double)cum >= top_p * (double)Z1 (llama.cpp's rule, min_keep 1).
 *   7. min_p > 0: keep tokens with x >= log(min_p) (p/p_max >= min_p, in
 *      logit space like llama.cpp; a prefix of the order).
 *   8. Draw: w(t) = fx(exp(x / temperature)); Z = sum over the kept set;
 *      r = floor(rand64 * Z / 2^64) (exact integer math); return the first
 *      token in the order whose running sum exceeds r.
 * The order of 5-8 is llama.cpp's common default chain (top-k, top-p,
 * min-p, temperature, dist). Temperature last means top-p and min-p see
 * the model's own distribution, so "top_p 0.9" keeps the same tokens at
 * every temperature; temperature only reshapes what is left.
 *
 * Why fixed point: fx(w) = floor(w * 2^63) makes every weight an integer
 * and sums (128-bit) are exact and independent of summation order. The
 * fast path can then sum over an unsorted candidate array and still agree
 * bit for bit with the sorted reference, and a draw is an exact integer
 * comparison. The cost: tokens with w < 2^-63 (x < -43.6) get weight 0
 * and are never drawn, and truncation moves a probability by at most
 * n_vocab * 2^-63 (1.4e-14 at 128k tokens).
 * exp is our own (sample_exp: only + * and exact scaling), so the same
 * seed and logits give the same tokens on every IEEE-754 machine; the one
 * libm call is log(min_p), done once at init.
 *
 * Each draw with temperature > 0 consumes exactly one 64-bit RNG output
 * (xoshiro256**, seeded through splitmix64); greedy draws consume none.
 *
 * This is the default chain. Params that ask for more (logit bias, DRY,
 * typical, top-n-sigma, XTC, mirostat, min_keep > 1, a stage order) take
 * the general chain instead, defined in sampler.c, with its twin
 * sample_ext_draw_ref in sampler_ref.c.
 */
#ifndef ANVIL_SAMPLE_H
#define ANVIL_SAMPLE_H

#include <stdint.h>
#include <string.h>

#include "anvil.h"

/* Largest vocabulary: a sanity bound (16 bytes of scratch per token);
 * sums stay below n_vocab * 2^63 < 2^91 in 128 bits. */
#define SAMPLE_MAX_VOCAB (1 << 27)
/* Largest penalty window: bounds the ring buffer (4 MiB of ids each). */
#define SAMPLE_MAX_LAST_N (1 << 20)
/* fixed-point scale of weights, and the x below which every weight is 0
 * at temperature >= 1 (exp(-45) = 2.9e-20 < 2^-63 = 1.1e-19). */
#define SAMPLE_FX_SCALE 0x1p63
#define SAMPLE_X_CUT (-45.0)

typedef unsigned __int128 sample_u128; /* exact weight sums (GCC/Clang) */

struct sample_cand {
    float l;    /* penalized logit, never NaN */
    int32_t id; /* token id */
    uint64_t w; /* fixed-point weight at the current stage (fast path only) */
};

struct anvil_sampler {
    struct anvil_sampler_params p;
    int32_t n_vocab;
    int32_t last_n;       /* ring capacity: p.repeat_last_n, or 0 when penalties are off */
    double log_min_p;     /* log(p.min_p), -inf when min_p == 0 */
    uint64_t rng[4];      /* xoshiro256** state */
    anvil_token *hist;    /* (last_n,) ring of accepted tokens, oldest at hist_head when full */
    int32_t hist_n;       /* tokens in the ring, <= last_n */
    int32_t hist_head;    /* next slot to write */
    anvil_token *sorted;  /* (hist_n,) the ring's tokens in ascending order (a multiset) */
    anvil_token *pen_id;  /* (last_n,) scratch: distinct window tokens, ascending */
    int32_t *pen_cnt;     /* (last_n,) scratch: their counts */
    struct sample_cand *cand; /* (n_vocab,) scratch; NULL for greedy samplers */
    /* the general chain (sampler.c): everything beyond the default path */
    struct sample_ext *ext;   /* NULL when sample_ext_needed(p) is false */
};

/* State and scratch of the general chain, one allocation (sampler.c). */
struct sample_ext {
    uint8_t order[ANVIL_STAGE_COUNT_ * 2]; /* the stages to run, in order */
    int32_t n_order;
    int pen_at, dry_at;      /* index of penalties / DRY in order, -1 when absent */
    float mu;                /* mirostat's running surprise bound (2 * tau at reset) */
    double log_min_p;
    int32_t dry_cap;         /* DRY window: p.dry_last_n, or 0 when DRY is off */
    int32_t dry_n, dry_head; /* tokens in the ring, next slot */
    anvil_token *dry_hist;   /* (dry_cap,) ring of accepted tokens */
    anvil_token *dry_seq;    /* (dry_cap,) scratch: the window, oldest first */
    int32_t *dry_z;          /* (dry_cap,) scratch: Z-array of the reversed window */
    int32_t *dry_max;        /* (n_vocab,) longest repeat per next token, -1 = none */
    float *work;             /* (n_vocab,) logits after bias, penalties, DRY */
    struct sample_aux *aux;  /* (n_vocab,) typical-p scratch */
};

struct sample_aux {
    double score;
    int32_t pos;
};

/* True when p needs the general chain (logit bias, DRY, typical,
 * top-n-sigma, XTC, mirostat, min_keep > 1 or a custom order). */
int sample_ext_needed(const struct anvil_sampler_params *p);
/* Allocate s->ext for s (s->p, s->n_vocab set). ANVIL_ERR_INVALID for a
 * bias or breaker id outside the vocabulary, ANVIL_ERR_NOMEM. */
anvil_status sample_ext_init(struct anvil_sampler *s);
void sample_ext_free(struct anvil_sampler *s);
void sample_ext_reset(struct anvil_sampler *s);
void sample_ext_accept(struct anvil_sampler *s, anvil_token t);
/* The chain's draw (fast path): rand64 the draw's word, rand_xtc XTC's
 * (used only when xtc_probability > 0), prefer as in sample_draw_prefer
 * (-1: none). update: advance mirostat's mu after the draw. */
anvil_token sample_ext_draw(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                            uint64_t rand64, uint64_t rand_xtc, anvil_token prefer, int update);
/* sample_kept for the chain (same contract), XTC's word given. */
int32_t sample_ext_kept(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                        uint64_t rand_xtc, anvil_token *ids, double *probs);
/* Slow twin of sample_ext_draw (update 0, prefer -1): plain code, full
 * sort, naive DRY. Allocates; -2 when that fails. */
anvil_token sample_ext_draw_ref(const struct anvil_sampler *s, const float *logits,
                                const uint8_t *allowed, uint64_t rand64, uint64_t rand_xtc);
/* Walk c[0..n) in candidate order to the first running sum > r (r < the
 * sum of w): the index, with c partitioned (sampler.c's walk_find). */
int32_t sample_walk_draw(struct sample_cand *c, int32_t n, sample_u128 r);
/* The same walk with top-p's rule: the first position whose running sum
 * s has (double)s >= thr; n when none. */
int32_t sample_walk_topp(struct sample_cand *c, int32_t n, double thr);
/* XTC's uniform in [0, 1) from a random word: top 53 bits. */
static inline double sample_unit(uint64_t r) {
    return (double)(r >> 11) * 0x1p-53;
}

/* ---------------------------------------------------------------------- */
/* shared numerics: both twins call exactly these */

/* exp(x) for x <= 0 (returns 0 below -700, 1 at 0). Only + and * with
 * round-to-nearest, a table of 2^(j/64) and an exact power-of-two scaling,
 * so it is the same on every IEEE-754 machine. Relative error ~2e-16.
 * x = (k/64) ln2 + r, |r| <= ln2/128; exp(r) by a degree-5 Taylor
 * polynomial (truncation r^6/720 < 4e-17). */
extern const double sample_exp2_tab[64]; /* 2^(j/64), correctly rounded */

static inline double sample_exp(double x) {
    if (!(x > -700.0)) return 0.0;
    if (x >= 0.0) return 1.0; /* callers only pass x <= 0 */
    double y = x * 0x1.71547652b82fep+6;  /* x * 64 / ln2 */
    int32_t k = (int32_t)(y - 0.5);        /* round(y) for y < 0; k >= -64640 */
    /* ln2/64 split hi + lo; hi has 29 significant bits, so k * hi is exact */
    double r = (x - (double)k * 0x1.62e42fee00000p-7) - (double)k * 0x1.a39ef35793c76p-39;
    double p = r * (1.0 / 120.0) + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint32_t j = (uint32_t)k & 63u;
    int32_t e = (k - (int32_t)j) / 64; /* floor(k / 64), exact */
    uint64_t bits = (uint64_t)((int64_t)e + 1023) << 52; /* 2^e, e >= -1011: normal */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return (sample_exp2_tab[j] * p) * scale;
}

/* x = l - m in double; 0 when l == m (covers m = +inf). */
static inline double sample_shift(float l, float m) {
    return l == m ? 0.0 : (double)l - (double)m;
}

/* fixed-point weight of w in [0, 1]: at most 2^63 */
static inline uint64_t sample_fx(double w) {
    return (uint64_t)(w * SAMPLE_FX_SCALE);
}

/* the penalty rule for one token seen c > 0 times */
static inline float sample_penalize(float l, int32_t c, const struct anvil_sampler_params *p) {
    l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
    return l - ((float)c * p->frequency_penalty + p->presence_penalty);
}

/* a comes before b in the candidate order (l desc, id asc) */
static inline int sample_before(struct sample_cand a, struct sample_cand b) {
    return a.l > b.l || (a.l == b.l && a.id < b.id);
}

static inline int sample_allowed(const uint8_t *allowed, int32_t t) {
    return !allowed || ((allowed[t >> 3] >> (t & 7)) & 1);
}

/* ---------------------------------------------------------------------- */
/* internal entry points */

/* True when the penalty step changes anything. */
int sample_penalties_on(const struct anvil_sampler *s);

/* Apply the penalty step (1) in place to a full (n_vocab,) logits row. */
void sample_apply_penalties(const struct anvil_sampler *s, float *logits);

/* One draw with an explicit random word (the public sample() passes the
 * next RNG output when temperature > 0). Fast path: no allocation, no
 * full sort. Returns the token or -1. */
anvil_token sample_draw(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                        uint64_t rand64);

/* sample_draw with token `prefer` moved to the front of the order (step 8
 * walks it first): returns prefer when r < w(prefer), else the token the
 * walk over the others finds at r - w(prefer). So prefer comes out with
 * exactly its probability w/Z, and any other token t with w(t)/Z: the
 * same distribution as sample_draw, one random word, a different map from
 * the word to the token. With a deterministic proposal (speculative
 * decoding's draft) this is the rejection step: accepting the draft with
 * probability p(draft) and otherwise drawing from p without it. Greedy
 * samplers ignore prefer. */
anvil_token sample_draw_prefer(struct anvil_sampler *s, const float *logits,
                               const uint8_t *allowed, uint64_t rand64, anvil_token prefer);

/* Slow twin of sample_draw: the definition above, written plainly (full
 * penalized copy, full qsort). For tests; allocates its scratch with
 * core_malloc and returns -2 when that fails. */
anvil_token sample_draw_ref(const struct anvil_sampler *s, const float *logits,
                            const uint8_t *allowed, uint64_t rand64);

/* The set kept after steps 1-7 (fast path), in candidate order, with each
 * token's draw probability w/Z (step 8). ids and probs have room for
 * n_vocab entries. Returns the count (0 when there is no candidate, or
 * the sampler is greedy: use sample_draw). Tokens the fast path drops
 * for having weight 0 at every stage are not listed. */
int32_t sample_kept(struct anvil_sampler *s, const float *logits, const uint8_t *allowed,
                    anvil_token *ids, double *probs);

/* floor(rand64 * z / 2^64) for z < 2^127, exact: the draw's target. */
static inline sample_u128 sample_target(uint64_t rand64, sample_u128 z) {
    uint64_t z_lo = (uint64_t)z;
    sample_u128 z_hi = z >> 64;
    return z_hi * rand64 + (((sample_u128)z_lo * rand64) >> 64);
}

/* RNG: next output of the sampler's xoshiro256** stream. */
uint64_t sample_rng_next(struct anvil_sampler *s);

/* ---------------------------------------------------------------------- */
/* log-probabilities for the server (OpenAI logprobs / top_logprobs)
 *
 * These are of the model's distribution: log-softmax of the raw logits,
 * before penalties, the allowed mask, temperature and the top-k/p/min-p
 * filters - what vLLM reports by default, and what OpenAI documents as
 * "the log probability of this token". They do not depend on the sampling
 * parameters, so they are comparable across requests. NaN logits are
 * ignored (probability 0). */

struct sample_logprob {
    anvil_token id;
    float logprob;
};

/* Log-probability of `chosen` into *chosen_lp (-inf when its logit is
 * NaN or -inf, NaN when every logit is NaN or chosen is out of range),
 * and the n_top most likely tokens into top[0..) in order (logprob desc,
 * id asc). Returns how many were written (< n_top when fewer tokens have
 * a non-NaN logit). No allocation; O(n_vocab * small). */
int32_t sample_logprobs(const float *logits, int32_t n_vocab, anvil_token chosen, int32_t n_top,
                        struct sample_logprob *top, float *chosen_lp);

#endif /* ANVIL_SAMPLE_H */
