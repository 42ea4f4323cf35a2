/*
 * output.c - what happens to a drawn token: the draw itself (argmax,
 * sampler, or under a constraint: guide.h), end of generation, penalties,
 * logprobs, detokenizing and text release with stop strings held back,
 * and the limits that end a request; and the prompt's logprobs
 * (prompt_logprobs), one event per prompt position.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"

/* ---------------------------------------------------------------------- */
/* text release with stop strings */

/* Length of the longest suffix of s[0, n) that is a proper prefix of some
 * stop string: that much must be held back. */
static int32_t stop_prefix_len(const struct request *r, const char *s, int32_t n) {
    int32_t best = 0;
    for (int i = 0; i < r->n_stop; i++) {
        int32_t len = (int32_t)strlen(r->stop[i]);
        for (int32_t k = len - 1 < n ? len - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, r->stop[i], (size_t)k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Append new text; move what can be released into e->text. Returns the
 * number of bytes released; *stopped when a stop string matched (the text
 * before it is released, the rest dropped). */
static int32_t release_text(struct anvil_engine *e, struct request *r, const char *piece,
                            int32_t n, bool *stopped) {
    *stopped = false;
    if (r->n_stop == 0) {
        if (n > e->text_cap) n = e->text_cap;
        memcpy(e->text, piece, (size_t)n);
        return n;
    }
    if (r->n_held + n > r->held_cap) {
        /* cannot happen with held_cap >= max stop length + max piece, but
         * stay safe: release what is held first */
        int32_t k = r->n_held < e->text_cap ? r->n_held : e->text_cap;
        memcpy(e->text, r->held, (size_t)k);
        r->n_held = 0;
        int32_t m = n < r->held_cap ? n : r->held_cap;
        memcpy(r->held, piece, (size_t)m);
        r->n_held = m;
        return k;
    }
    memcpy(r->held + r->n_held, piece, (size_t)n);
    r->n_held += n;
    int32_t cut = -1;
    for (int i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(r->held, (size_t)r->n_held, r->stop[i], strlen(r->stop[i]));
        if (hit && (cut < 0 || hit - r->held < cut)) cut = (int32_t)(hit - r->held);
    }
    int32_t rel;
    if (cut >= 0) {
        rel = cut;
        *stopped = true;
    } else {
        rel = r->n_held - stop_prefix_len(r, r->held, r->n_held);
    }
    if (rel > e->text_cap) rel = e->text_cap;
    memcpy(e->text, r->held, (size_t)rel);
    if (*stopped) {
        r->n_held = 0;
    } else {
        memmove(r->held, r->held + rel, (size_t)(r->n_held - rel));
        r->n_held -= rel;
    }
    return rel;
}

/* ---------------------------------------------------------------------- */
/* drawing and taking tokens */

/* The token of output row o for request r: the fused argmax for
 * argmax-only rows, else a draw from the row's logits (under the
 * constraint when there is one: guide.h), preferring the proposal `draft`
 * when it is >= 0. -1 with *why when no token can be drawn. */
anvil_token engine_draw(struct anvil_engine *e, struct request *r, int32_t o,
                        const float *logits, anvil_token draft, const char **why) {
    *why = "the logits are not finite";
    anvil_token f = guide_gate_forced(&r->gate);
    if (f >= 0) return f; /* the end of a thought, or the answer's prefix */
    if (r->argmax_only) return anvil_get_argmax(e->ctx, o);
    if (!logits) return -1;
    if (guide_gate_deciding(&r->gate)) /* a thought the model opens, or the answer */
        return guide_gate_choose(&r->gate, r->constrained ? &r->cq : NULL, r->smp, logits,
                                 e->n_vocab, why);
    if (r->constrained && guide_gate_active(&r->gate)) {
        bool greedy = r->smp->p.temperature == 0.0f;
        return guide_choose(&r->cq, r->smp, greedy, sample_penalties_on(r->smp), logits,
                           anvil_get_argmax(e->ctx, o), draft, why);
    }
    return draft >= 0 ? anvil_sampler_sample_spec(r->smp, logits, NULL, draft)
                      : anvil_sampler_sample(r->smp, logits, NULL);
}

/* One drawn token t of request r (logits: its row, or NULL for argmax-only
 * rows; why: the reason when t is -1): end of generation, the constraint,
 * penalties, logprobs, text release with stop strings, limits. Returns
 * false when the request finished (it is freed). */
bool engine_take_token(struct anvil_engine *e, struct request *r, anvil_token t,
                       const float *logits, double now, const char *why) {
    if (t < 0) {
        engine_finish(e, r, t == GUIDE_DEAD_END ? ANVIL_FINISH_CONSTRAINT : ANVIL_FINISH_ERROR, why,
               true);
        return false;
    }
    if (r->t_first == 0) r->t_first = now;
    if (!r->ignore_eos && anvil_token_is_eog(e->m, t)) {
        r->eog = t;
        engine_finish(e, r, ANVIL_FINISH_STOP, NULL, true);
        return false;
    }
    /* the constraint sees the answer only: not a thought, not a forced token */
    bool cons = r->constrained && guide_gate_for_constraint(&r->gate, t);
    guide_gate_take(&r->gate, t);
    if (cons && guide_advance(&r->cq, t) != ANVIL_OK) {
        /* the token was chosen under the constraint: only memory can fail */
        engine_finish(e, r, ANVIL_FINISH_ERROR, "out of memory (constraint state)", true);
        return false;
    }
    anvil_sampler_accept(r->smp, t);
    r->tokens[r->n_tokens++] = t;
    r->n_gen++;
    struct anvil_event ev = {.type = ANVIL_EVENT_TOKEN, .id = r->id, .token = t};
    if (r->top_logprobs > 0 && logits) {
        struct sample_logprob top[ANVIL_MAX_TOP_LOGPROBS];
        int32_t k = sample_logprobs(logits, e->n_vocab, t, r->top_logprobs, top, &ev.logprob);
        for (int32_t j = 0; j < k; j++) {
            e->top_tok[j] = top[j].id;
            e->top_lp[j] = top[j].logprob;
        }
        ev.n_top = k;
        ev.top_tokens = e->top_tok;
        ev.top_logprobs = e->top_lp;
    }
    char piece[256 + 16];
    int32_t k = anvil_detok_push(e->m, &r->dt, t, piece, sizeof(piece));
    if (k < 0) k = 0;
    if (k == 0 && r->special_text &&
        anvil_token_to_piece(e->m, t, piece, (int32_t)sizeof(piece) - 1, false) == 0) {
        /* a control token spells nothing as text (a byte the detokenizer
         * holds as part of a UTF-8 sequence does, so it is not one); its
         * own text is asked for: a whole token, nothing left pending */
        k = anvil_token_to_piece(e->m, t, piece, (int32_t)sizeof(piece) - 1, true);
        if (k < 0) k = 0;
    }
    bool stopped = false;
    int32_t rel = release_text(e, r, piece, k, &stopped);
    ev.text = e->text;
    ev.text_len = rel;
    engine_emit(r, &ev);
    if (stopped) {
        engine_finish(e, r, ANVIL_FINISH_STOP, NULL, false);
        return false;
    }
    if (r->constrained && guide_gate_active(&r->gate) && guide_complete(&r->cq)) {
        /* complete, and no byte may follow: only end of generation is
         * allowed, so end now instead of spending a step to draw it */
        engine_finish(e, r, ANVIL_FINISH_STOP, NULL, true);
        return false;
    }
    if (r->n_gen >= r->max_tokens || r->n_tokens >= e->n_ctx) {
        engine_finish(e, r, ANVIL_FINISH_LENGTH, NULL, true);
        return false;
    }
    return true;
}

void engine_prompt_logprob(struct anvil_engine *e, struct request *r, int32_t pos,
                           const float *logits) {
    struct anvil_event ev = {.type = ANVIL_EVENT_PROMPT,
                             .id = r->id,
                             .token = r->tokens[pos],
                             .pos = pos,
                             .text = "",
                             .logprob = NAN};
    if (logits) {
        struct sample_logprob top[ANVIL_MAX_TOP_LOGPROBS];
        int32_t k = sample_logprobs(logits, e->n_vocab, ev.token, r->prompt_top, top, &ev.logprob);
        for (int32_t j = 0; j < k; j++) {
            e->top_tok[j] = top[j].id;
            e->top_lp[j] = top[j].logprob;
        }
        ev.n_top = k;
        ev.top_tokens = e->top_tok;
        ev.top_logprobs = e->top_lp;
    }
    engine_emit(r, &ev);
    r->lp_next = pos + 1;
}
