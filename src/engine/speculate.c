/*
 * speculate.c - speculative decoding in the step: how many proposals a
 * request may carry, the draft model's proposals (one batch per round for
 * every request that speculates with it), and verification of the
 * proposals row by row (engine.c's header says why this is exact). The
 * n-gram proposer and the adaptive length are in spec.c.
 */
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"

/* How many proposals request r may carry this step: its adaptive length,
 * within the context, max_tokens (a proposal past it is never used) and
 * the step's row budget (the pending row takes one). */
int32_t engine_spec_room(const struct anvil_engine *e, const struct request *r, int32_t budget) {
    if (r->spec == ANVIL_SPEC_OFF) return 0;
    int32_t k = r->ad.k;
    int32_t ctx_room = e->n_ctx - r->n_tokens;         /* rows at n_tokens .. */
    int32_t gen_room = r->max_tokens - r->n_gen - 1;   /* tokens after the next one */
    if (k > ctx_room) k = ctx_room;
    if (k > gen_room) k = gen_room;
    if (k > budget - 1) k = budget - 1;
    return k > 0 ? k : 0;
}

/* A draft-model decode failed for the requests rs[0, n_rs): they go on
 * without the draft (its proposals only save time: the output is the
 * same), and the reason is logged once, not retried every step. */
static void draft_failed(struct anvil_engine *e, struct request **rs, int32_t n_rs,
                         anvil_status st) {
    const char *why = anvil_ctx_errmsg(e->dctx);
    core_log(CORE_LOG_ERROR,
             "engine: the draft model failed a decode (%s: %s); %d request(s) continue "
             "without draft speculation",
             anvil_status_str(st), why && why[0] ? why : "no detail", (int)n_rs);
    for (int32_t j = 0; j < n_rs; j++) {
        struct request *r = rs[j];
        r->n_draft = 0;
        r->spec = ANVIL_SPEC_OFF;
        anvil_seq_truncate(e->dctx, r->slot, 0);
        r->draft_cached = 0;
    }
    pthread_mutex_lock(&e->mu);
    e->stats.n_spec_draft_failed += (uint64_t)n_rs;
    pthread_mutex_unlock(&e->mu);
}

/* Draft-model proposals for every decoding request that speculates with
 * the draft: catch the draft's cache up with the request's tokens (the
 * last of them is the pending one), then greedy steps, all requests in
 * one batch per step. Leaves the proposals in r->draft, their count in
 * r->n_draft. r->draft_cached counts only positions holding the request's
 * own tokens: proposals fed to the draft are dropped again here before
 * the next round (engine_verify() keeps the accepted ones). When a draft
 * decode fails, its requests stop speculating with the draft
 * (draft_failed): the target then decodes as usual. */
void engine_draft_propose(struct anvil_engine *e) {
    struct request **rs = e->order; /* scratch: build_batch refills it */
    int32_t *take = e->d_take;
    int32_t n_rs = 0;
    for (int s = 0; s < e->p.max_running; s++) {
        struct request *r = e->running[s];
        if (!r || r->spec != ANVIL_SPEC_DRAFT) continue;
        r->n_draft = engine_is_decoding(r) ? engine_spec_room(e, r, e->p.step_tokens) : 0;
        if (r->n_draft == 0) continue;
        if (anvil_seq_truncate(e->dctx, r->slot, r->draft_cached) != ANVIL_OK) {
            anvil_seq_truncate(e->dctx, r->slot, 0);
            r->draft_cached = 0;
        }
        rs[n_rs++] = r;
    }
    for (;;) { /* catch up, at most step_tokens rows per call */
        int32_t n = 0;
        for (int32_t j = 0; j < n_rs; j++) {
            struct request *r = rs[j];
            int32_t need = r->n_tokens - r->draft_cached, room = e->p.step_tokens - n;
            take[j] = need < room ? need : room;
            for (int32_t i = 0; i < take[j]; i++) {
                int32_t p = r->draft_cached + i;
                e->d_tok[n] = r->tokens[p];
                e->d_pos[n] = p;
                e->d_seq[n] = r->slot;
                e->d_out[n] = p == r->n_tokens - 1 ? ANVIL_OUT_ARGMAX : ANVIL_OUT_NONE;
                n++;
            }
        }
        if (n == 0) break;
        struct anvil_batch b = {.n_tokens = n, .token = e->d_tok, .pos = e->d_pos,
                                .seq_id = e->d_seq, .logits = e->d_out};
        anvil_status st = anvil_decode(e->dctx, &b);
        if (st != ANVIL_OK) {
            draft_failed(e, rs, n_rs, st);
            return;
        }
        int32_t o = 0;
        for (int32_t j = 0; j < n_rs; j++) {
            struct request *r = rs[j];
            r->draft_cached += take[j];
            if (take[j] > 0 && r->draft_cached == r->n_tokens) r->draft[0] = anvil_get_argmax(e->dctx, o++);
        }
    }
    /* proposals 2..k: proposal step-1 goes in at position n_tokens+step-1 */
    for (int32_t step = 1;; step++) {
        int32_t n = 0;
        for (int32_t j = 0; j < n_rs; j++) {
            struct request *r = rs[j];
            if (r->n_draft <= step) continue;
            e->d_tok[n] = r->draft[step - 1];
            e->d_pos[n] = r->n_tokens + step - 1;
            e->d_seq[n] = r->slot;
            e->d_out[n] = ANVIL_OUT_ARGMAX;
            n++;
        }
        if (n == 0) break;
        struct anvil_batch b = {.n_tokens = n, .token = e->d_tok, .pos = e->d_pos,
                                .seq_id = e->d_seq, .logits = e->d_out};
        anvil_status st = anvil_decode(e->dctx, &b);
        if (st != ANVIL_OK) {
            draft_failed(e, rs, n_rs, st);
            return;
        }
        int32_t o = 0;
        for (int32_t j = 0; j < n_rs; j++)
            if (rs[j]->n_draft > step) rs[j]->draft[step] = anvil_get_argmax(e->dctx, o++);
    }
    for (int32_t j = 0; j < n_rs; j++) /* a failed argmax ends the proposal */
        for (int32_t t = 0; t < rs[j]->n_draft; t++)
            if (rs[j]->draft[t] < 0) {
                rs[j]->n_draft = t;
                break;
            }
}

/* Output rows o.. of a request that carried k proposals: draw row by row,
 * stop at the first disagreement, keep the KV of the accepted prefix.
 * Returns the output rows consumed (k + 1). */
int32_t engine_verify(struct anvil_engine *e, struct request *r, int32_t o, double now) {
    int32_t k = r->n_draft, pos0 = r->n_tokens - 1; /* the pending token's position */
    int32_t acc = 0;
    bool alive = true;
    for (int32_t i = 0; i <= k && alive; i++) {
        const float *logits = anvil_get_logits(e->ctx, o + i);
        const char *why;
        anvil_token t = engine_draw(e, r, o + i, logits, i < k ? r->draft[i] : -1, &why);
        alive = engine_take_token(e, r, t, logits, now, why);
        if (i == k || t != r->draft[i]) break;
        acc++;
    }
    pthread_mutex_lock(&e->mu);
    e->stats.n_spec_verify++;
    e->stats.n_spec_proposed += (uint64_t)k;
    e->stats.n_spec_accepted += (uint64_t)acc;
    e->stats.n_spec_tokens += (uint64_t)acc + 1;
    pthread_mutex_unlock(&e->mu);
    if (!alive) return k + 1;
    /* the cache holds the pending token and the accepted proposals; the
     * last drawn token is the new pending one */
    r->n_cached = pos0 + 1 + acc;
    anvil_status st = anvil_seq_truncate(e->ctx, r->slot, r->n_cached);
    ANVIL_ASSERT(st == ANVIL_OK); /* at most ANVIL_SPEC_K_MAX back: within any window's slack */
    if (e->dctx && r->spec == ANVIL_SPEC_DRAFT) {
        /* the draft saw the pending token and proposals 1..k-1: the
         * accepted ones among those are the request's tokens now */
        int32_t keep = pos0 + 1 + (acc < k - 1 ? acc : k - 1);
        if (keep > r->draft_cached + k - 1) keep = r->draft_cached;
        if (anvil_seq_truncate(e->dctx, r->slot, keep) != ANVIL_OK) {
            anvil_seq_truncate(e->dctx, r->slot, 0);
            keep = 0;
        }
        r->draft_cached = keep;
    }
    spec_adapt_update(&r->ad, k, acc);
    r->n_draft = 0;
    return k + 1;
}
