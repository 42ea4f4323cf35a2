/*
 * step.c - one engine step (anvil_engine_step): take the queues (sched.c),
 * draft proposals (speculate.c), build the batch of decode rows and
 * prompt chunks, run the forward pass (preempting on a full KV pool), then
 * draw and emit a token for every output row (output.c, speculate.c),
 * after the prompt logprobs of the prompt rows that asked for them.
 * engine.c's header describes the batch's order and the step's cap.
 */
#include <pthread.h>
#include <stdio.h>

#include "engine/engine_int.h"

#define PROMPT_ROWS_MIN 32 /* prompt rows a step takes whatever their cost (build_batch) */

/* What row p of request r asks for: the logits (or only the argmax) of
 * its last token, and with prompt logprobs those of every prompt row whose
 * next token's logprob is still owed. */
static int8_t row_output(const struct request *r, int32_t p) {
    if (p == r->n_tokens - 1) return r->argmax_only ? ANVIL_OUT_ARGMAX : ANVIL_OUT_LOGITS;
    if (r->prompt_lp && p + 1 < r->n_prompt && p + 1 >= r->lp_next) return ANVIL_OUT_LOGITS;
    return ANVIL_OUT_NONE;
}

/* The first k rows of r from its cache's end, cut where they would ask for
 * more than `left` output rows (prompt logprobs ask for one per row). */
static int32_t cut_to_outputs(const struct request *r, int32_t k, int32_t left) {
    if (!r->prompt_lp) return k; /* at most its last row asks */
    for (int32_t j = 0; j < k; j++)
        if (row_output(r, r->n_cached + j) != ANVIL_OUT_NONE && left-- == 0) return j;
    return k;
}

/* Fill the batch arrays; returns the row count. Running requests are
 * taken in admission order: first those with one pending token (decode,
 * with their proposals when they speculate), then prompt chunks. */
static int32_t build_batch(struct anvil_engine *e, int32_t *n_out) {
    struct request **order = e->order;
    int32_t nr = 0;
    for (int s = 0; s < e->p.max_running; s++) {
        struct request *r = e->running[s];
        if (!r) continue;
        /* draft proposals stand only for a decoding request this step */
        if (r->spec != ANVIL_SPEC_DRAFT || !engine_is_decoding(r)) r->n_draft = 0;
        if (r->n_cached >= r->n_tokens) continue;
        int32_t j = nr++;
        while (j > 0 && order[j - 1]->admit_seq > r->admit_seq) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = r;
    }
    int32_t n = 0, no = 0, budget = e->p.step_tokens, n_prompt_rows = 0;
    /* With requests decoding, prompt rows also stop where the step's work
     * reaches that of step_tokens rows at position 0: a deep prompt row
     * costs more (its attention), and a long step is a long gap between
     * the decoding requests' tokens (commit b51d6d5). At least
     * PROMPT_ROWS_MIN rows, so prompts progress. */
    double cap = (double)e->p.step_tokens * e->row_cost0, used = 0.0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int32_t i = 0; i < n; i++) used += ctx_model_row_cost(e->m, e->b_pos[i]);
        for (int32_t i = 0; i < nr && budget > 0; i++) {
            struct request *r = order[i];
            bool decode = engine_is_decoding(r);
            if ((pass == 0) != decode) continue;
            int32_t k = r->n_tokens - r->n_cached;
            if (k > e->p.prefill_chunk) k = e->p.prefill_chunk;
            if (k > budget) k = budget;
            if (!decode) {
                k = cut_to_outputs(r, k, e->n_out_max - no);
                if (k == 0) continue;
            }
            if (!decode && n > n_prompt_rows) { /* rows of decoding requests are in */
                int32_t j = 0;
                for (; j < k; j++) {
                    double c = ctx_model_row_cost(e->m, r->n_cached + j);
                    if (n_prompt_rows + j >= PROMPT_ROWS_MIN && used + c > cap) break;
                    used += c;
                }
                k = j;
                if (k == 0) break;
            }
            if (!decode) n_prompt_rows += k;
            for (int32_t j = 0; j < k; j++) {
                int32_t p = r->n_cached + j;
                e->b_token[n] = r->tokens[p];
                e->b_pos[n] = p;
                e->b_seq[n] = r->slot;
                e->b_req[n] = r;
                e->b_logits[n] = row_output(r, p);
                if (e->b_logits[n]) e->out_req[no++] = r;
                n++;
            }
            budget -= k;
            if (!decode) continue;
            /* proposals: after the pending token, each row asking for its
             * logits (n_out_max covers them: it counts spec_k per request) */
            if (r->spec == ANVIL_SPEC_NGRAM)
                r->n_draft = spec_ngram_propose(r->tokens, r->n_tokens, engine_spec_room(e, r, budget + 1),
                                                r->draft);
            else if (r->spec != ANVIL_SPEC_DRAFT)
                r->n_draft = 0;
            if (r->n_draft > budget) r->n_draft = budget;
            if (r->n_draft > e->n_out_max - no) r->n_draft = e->n_out_max - no;
            /* a proposal the constraint refuses could never be accepted:
             * cut there (a prefix, so a draft model's cache stays right) */
            if (guide_gate_forced(&r->gate) >= 0 || guide_gate_deciding(&r->gate))
                r->n_draft = 0; /* forced tokens, or the choice of a thought, come next */
            else if (r->constrained && guide_gate_active(&r->gate))
                r->n_draft = guide_cut(&r->cq, r->draft, r->n_draft);
            for (int32_t j = 0; j < r->n_draft; j++) {
                e->b_token[n] = r->draft[j];
                e->b_pos[n] = r->n_tokens + j;
                e->b_seq[n] = r->slot;
                e->b_req[n] = r;
                e->b_logits[n] = r->argmax_only ? ANVIL_OUT_ARGMAX : ANVIL_OUT_LOGITS;
                e->out_req[no++] = r;
                n++;
            }
            budget -= r->n_draft;
        }
    }
    *n_out = no;
    return n;
}

static void after_decode(struct anvil_engine *e, int32_t n_rows, int32_t n_out) {
    /* advance caches (engine_verify() corrects the speculating requests) */
    for (int32_t i = 0; i < n_rows; i++) e->b_req[i]->n_cached = e->b_pos[i] + 1;
    double now = time_now_s();
    /* prompt rows' logprobs first (their requests have not finished) */
    for (int32_t i = 0, o = 0; i < n_rows; i++) {
        if (e->b_logits[i] == ANVIL_OUT_NONE) continue;
        struct request *r = e->b_req[i];
        int32_t p = e->b_pos[i];
        if (r->prompt_lp && p + 1 < r->n_prompt) {
            engine_prompt_logprob(e, r, p + 1, anvil_get_logits(e->ctx, o));
            e->out_req[o] = NULL;
        }
        o++;
    }
    for (int32_t o = 0; o < n_out;) {
        struct request *r = e->out_req[o];
        if (!r) {
            o++;
            continue;
        }
        if (r->max_tokens == 0) { /* prompt logprobs only: done after the prompt */
            engine_finish(e, r, ANVIL_FINISH_LENGTH, NULL, true);
            o++;
            continue;
        }
        if (r->n_draft > 0) {
            o += engine_verify(e, r, o, now);
            continue;
        }
        const float *logits = anvil_get_logits(e->ctx, o);
        const char *why;
        anvil_token t = engine_draw(e, r, o, logits, -1, &why);
        engine_take_token(e, r, t, logits, now, why);
        o++;
    }
}

anvil_status anvil_engine_step(struct anvil_engine *e, int32_t *n_active) {
    if (!e) return ANVIL_ERR_INVALID;
    double t_step = e->prof_on ? time_now_s() : 0.0;
    engine_take_inbox(e);
    engine_drop_cancelled(e);
    engine_admit(e);
    if (e->dctx) engine_draft_propose(e);
    anvil_status st = ANVIL_OK;
    for (;;) {
        int32_t n_out = 0, n = build_batch(e, &n_out);
        if (n == 0) break;
        struct anvil_batch b = {.n_tokens = n,
                                .token = e->b_token,
                                .pos = e->b_pos,
                                .seq_id = e->b_seq,
                                .logits = e->b_logits};
        st = anvil_decode(e->ctx, &b);
        if (st == ANVIL_ERR_KV_FULL && engine_preempt_one(e)) continue;
        if (st != ANVIL_OK) {
            /* a batch the engine built was refused: fail its requests
             * rather than retrying forever */
            snprintf(e->errmsg, sizeof(e->errmsg), "%s", anvil_ctx_errmsg(e->ctx));
            for (int32_t i = 0; i < n; i++) {
                struct request *r = e->b_req[i];
                if (r && r->slot >= 0) {
                    for (int32_t j = i + 1; j < n; j++)
                        if (e->b_req[j] == r) e->b_req[j] = NULL;
                    engine_finish(e, r, ANVIL_FINISH_ERROR, e->errmsg, false);
                }
            }
            break;
        }
        double t_sample = e->prof_on ? time_now_s() : 0.0;
        after_decode(e, n, n_out);
        if (e->prof_on) e->prof_sample_s += time_now_s() - t_sample;
        pthread_mutex_lock(&e->mu);
        e->stats.n_steps++;
        pthread_mutex_unlock(&e->mu);
        break;
    }
    engine_publish_stats(e);
    if (n_active) {
        pthread_mutex_lock(&e->mu);
        *n_active = e->n_inbox + e->n_waiting + e->n_running;
        pthread_mutex_unlock(&e->mu);
    }
    if (e->prof_on) {
        e->prof_step_s += time_now_s() - t_step;
        e->prof_n_step++;
    }
    return st == ANVIL_ERR_KV_FULL ? ANVIL_OK : st;
}
