/*
 * guide.h - constraints as the engine uses them to guide sampling (the
 * automata themselves are the src/constrain/ room): the public
 * compiled-constraint handle (anvil_constraint_*), the vocabulary index an
 * engine builds once for its model, and the per-request state with the two operations the
 * step needs: choose a token under the constraint, and cut speculative
 * proposals at the first one the constraint refuses.
 *
 * How a token is chosen (guide_choose), and why each case is exact:
 *   - greedy: the model's top token (the forward pass's fused argmax, or
 *     the sampler's penalized argmax) is tested with cn_allowed first. If
 *     the constraint allows it, it is the masked argmax too (the lowest id
 *     among the maxima stays the lowest among the allowed maxima). Only
 *     when it is refused is the full mask built and the argmax taken over
 *     the allowed tokens. The mask is needed on a minority of steps (a
 *     model that follows the format mostly proposes allowed tokens), and
 *     for a recursion-free constraint it is a cached copy.
 *   - sampling: always the full mask, then the sampler's draw under it.
 *     The sampler's definition (sample.h) applies the mask first and then
 *     top-k, top-p, min-p and the temperature to the allowed tokens, so
 *     the draw is from exactly that distribution. A candidates-first
 *     shortcut ("draw unmasked, keep the token if allowed") would not be:
 *     it over-weights tokens the unmasked draw favours, and top-p/min-p
 *     thresholds depend on the allowed set's whole mass. A draw pays a pass
 *     over the vocabulary anyway (one exp per candidate), beside which a
 *     cached mask (a 6 KiB copy) costs nothing.
 *   - speculation: a proposed token is preferred through
 *     anvil_sampler_sample_spec with the same mask, so the rejection step
 *     keeps the masked distribution.
 * The state advances only with tokens the request keeps: proposals are
 * checked on a scratch copy of the state (guide_cut), never on the state
 * itself, so a rejected proposal needs no rollback.
 */
#ifndef ANVIL_ENGINE_GUIDE_H
#define ANVIL_ENGINE_GUIDE_H

#include <pthread.h>
#include <stdatomic.h>

#include "anvil.h"
#include "constrain/constrain.h"

struct anvil_constraint {
    _Atomic int refs;
    const struct anvil_model *m; /* the model it was compiled for */
    struct cn_program *prog;
    /* ANVIL_CONSTRAINT_CALLS: the model's control tokens whose text the
     * document spells (markers such as gpt-oss's <|message|>), allowed by
     * that text (cn_state_set_specials); sp_text holds their bytes */
    int32_t n_sp;
    anvil_token *sp_id;
    const uint8_t **sp_bytes;
    int32_t *sp_len;
    char *sp_text;
};

/* Take one more reference (a request holds one from submit to DONE). */
void guide_ref(struct anvil_constraint *c);

/* The vocabulary index of one model, built on first use by whoever needs
 * it, under a mutex; read-only and shared afterwards. */
struct guide_index {
    pthread_mutex_t mu;
    struct cn_vocab *_Atomic v;
};

void guide_index_init(struct guide_index *ix);
void guide_index_free(struct guide_index *ix);
/* The index for model m (built now if needed: ~20 ms for 49k tokens).
 * Thread-safe. ANVIL_ERR_NOMEM or ANVIL_ERR_INVALID with err. */
anvil_status guide_index_get(struct guide_index *ix, const struct anvil_model *m,
                            const struct cn_vocab **out, char *err, size_t err_cap);

/* A request's constraint state. */
struct guide_req {
    struct anvil_constraint *c; /* referenced */
    const struct cn_vocab *v;
    struct cn_state *st;        /* after the tokens the request kept */
    struct cn_state *scratch;   /* proposals are tried here (made on first use) */
    uint8_t *mask;              /* ((n_vocab + 7) / 8) allowed-token bitmask */
    uint64_t n_tokens, n_masks; /* tokens chosen, masks built (stats) */
    double secs;                /* in guide_choose, guide_cut and guide_advance (stats) */
};

/* Start a state at the beginning of the output; takes a reference to c.
 * ANVIL_ERR_UNSUPPORTED when a run-time bound refuses even the start. */
anvil_status guide_req_init(struct guide_req *q, struct anvil_constraint *c,
                           const struct cn_vocab *v, char *err, size_t err_cap);
void guide_req_free(struct guide_req *q); /* zeroed or initialised */

/* The token for one output row (see the header). greedy: the sampler has
 * temperature 0; penalized: its penalties change the logits; argmax: the
 * row's argmax from the forward pass (used when greedy and not
 * penalized); draft: the proposal to prefer, or -1. Returns -1 with *why
 * set when no token can be drawn, GUIDE_DEAD_END (with *why) when that is
 * because no token of the vocabulary can continue the output. */
#define GUIDE_DEAD_END (-2)
anvil_token guide_choose(struct guide_req *q, struct anvil_sampler *smp, bool greedy, bool penalized,
                        const float *logits, anvil_token argmax, anvil_token draft,
                        const char **why);

/* How many of the n proposals d[0..n) the constraint allows in a row from
 * the current state (the first refused one and all after it are cut). */
int32_t guide_cut(struct guide_req *q, const anvil_token *d, int32_t n);

/* Append a kept token (not an end-of-generation token). */
anvil_status guide_advance(struct guide_req *q, anvil_token t);

/* The output is complete and nothing may follow: the request can end. */
bool guide_complete(const struct guide_req *q);

/* ---------------------------------------------------------------------- */
/* the thought gate: a reasoning model's thought is free text, the
 * constraint holds for the answer that follows it */

/* The output is [thought] answer-prefix answer. While the output is in a
 * thought, the constraint is not consulted and does not advance; the
 * thought ends when the model writes the end tokens (end[0..n_end) in a
 * row), or after `budget` thought tokens, when the rest of the end
 * tokens are forced. Then the answer's prefix (e.g. a tool-call format's
 * opening marker) is forced, and the constraint starts after it. Forced
 * tokens are neither drawn nor fed to the constraint. */
struct guide_gate {
    anvil_token *seq;        /* (n_end + n_prefix) the end tokens, then the prefix; NULL when none */
    int32_t n_end, n_prefix;
    bool in_thought;
    int32_t budget;          /* thought tokens before the end is forced; < 0: no limit */
    int32_t n_thought;       /* thought tokens kept so far (forced ones excluded) */
    int32_t match;           /* end tokens matched by the latest thought tokens */
    int32_t i_force, n_force; /* seq[i_force..n_force) is still to be forced */
    /* a thought the model may open itself (guide_gate_start) */
    anvil_token start[16];
    int32_t n_start;
    bool deciding;           /* the first tokens: a thought's start or the answer */
    bool alive_s, alive_p;   /* which is still possible: the start, the prefix */
    int32_t k;               /* tokens taken while deciding */
    uint8_t *mask;           /* ((n_vocab + 7) / 8) the choice's mask, made on first use */
};

/* open: the output starts inside a thought (needs n_end >= 1). The
 * arrays are copied. ANVIL_ERR_INVALID (err says why) or _NOMEM. A
 * zeroed gate (or one inited with nothing) is always open for the
 * constraint and forces nothing. */
anvil_status guide_gate_init(struct guide_gate *g, const anvil_token *end, int32_t n_end, bool open,
                             int32_t budget, const anvil_token *prefix, int32_t n_prefix,
                             char *err, size_t err_cap);
void guide_gate_free(struct guide_gate *g);
/* The model may open a thought itself: start[0..n_start) (1..16) are its
 * opening tokens. Only for a gate that does not start inside a thought
 * and has end tokens; otherwise (or when the constraint itself allows
 * start[0]: guide_gate_choose says so) nothing changes. */
anvil_status guide_gate_start(struct guide_gate *g, const anvil_token *start, int32_t n_start,
                              char *err, size_t err_cap);
/* The output is at the choice between a thought and the answer: the next
 * token is drawn by guide_gate_choose (not forced, not the constraint's). */
bool guide_gate_deciding(const struct guide_gate *g);
/* The choice's draw: from the logits under the mask of the thought's next
 * start token and the answer's (its prefix's next token, or on the first
 * token without a prefix the constraint's allowed set; q NULL when
 * unconstrained: any token). -1 with *why when nothing can be drawn. */
anvil_token guide_gate_choose(struct guide_gate *g, struct guide_req *q, struct anvil_sampler *smp,
                              const float *logits, int32_t n_vocab, const char **why);
/* Whether the kept token t (about to be passed to guide_gate_take) is the
 * constraint's: the gate is open for it. */
bool guide_gate_for_constraint(const struct guide_gate *g, anvil_token t);
/* The token the next output position must be, or -1 when it is drawn. */
anvil_token guide_gate_forced(const struct guide_gate *g);
/* The constraint applies to the next drawn token. */
bool guide_gate_active(const struct guide_gate *g);
/* A token the request kept (forced or drawn): moves the gate on. */
void guide_gate_take(struct guide_gate *g, anvil_token t);

#endif
