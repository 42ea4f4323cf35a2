/*
 * submit.c - request admission from any thread: anvil_engine_submit checks
 * a request against the engine's limits (context, KV pool, stop strings,
 * top logprobs, sampling, speculation, constraint), builds its state and
 * puts it in the inbox; anvil_engine_cancel marks it. The driver thread
 * takes both up at the start of its next step (sched.c).
 */
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"

anvil_status anvil_engine_submit(struct anvil_engine *e, const struct anvil_request_params *rp,
                                 anvil_event_fn cb, void *user, anvil_req_id *out_id, char *err,
                                 size_t err_cap) {
    if (!e || !rp) return ANVIL_ERR_INVALID;
    if (rp->n_prompt < 1 || !rp->prompt) {
        errmsg_set(err, err_cap, "the prompt is empty");
        return ANVIL_ERR_INVALID;
    }
    if (rp->max_tokens < (rp->prompt_logprobs ? 0 : 1)) {
        errmsg_set(err, err_cap, "max_tokens must be >= %d, got %d", rp->prompt_logprobs ? 0 : 1,
                   rp->max_tokens);
        return ANVIL_ERR_INVALID;
    }
    for (int i = 0; i < rp->n_prompt; i++)
        if (rp->prompt[i] < 0 || rp->prompt[i] >= e->n_vocab) {
            errmsg_set(err, err_cap, "prompt token %d is %d, outside the vocabulary [0, %d)", i,
                       rp->prompt[i], e->n_vocab);
            return ANVIL_ERR_INVALID;
        }
    if (rp->n_prompt >= e->n_ctx) {
        errmsg_set(err, err_cap, "the prompt has %d tokens; the context holds %d", rp->n_prompt,
                   e->n_ctx);
        return ANVIL_ERR_INVALID;
    }
    if ((int64_t)rp->n_prompt + rp->max_tokens > e->n_ctx) {
        errmsg_set(err, err_cap,
                   "prompt (%d tokens) plus max_tokens (%d) exceeds the context (%d tokens)",
                   rp->n_prompt, rp->max_tokens, e->n_ctx);
        return ANVIL_ERR_INVALID;
    }
    if ((int64_t)rp->n_prompt + rp->max_tokens > e->pool_tokens) {
        errmsg_set(err, err_cap,
                   "prompt (%d tokens) plus max_tokens (%d) exceeds what the whole KV cache "
                   "holds for one sequence (%lld positions)",
                   rp->n_prompt, rp->max_tokens, (long long)e->pool_tokens);
        return ANVIL_ERR_INVALID;
    }
    if (rp->n_stop < 0 || rp->n_stop > ANVIL_MAX_STOP || (rp->n_stop > 0 && !rp->stop)) {
        errmsg_set(err, err_cap, "at most %d stop strings", ANVIL_MAX_STOP);
        return ANVIL_ERR_INVALID;
    }
    if (rp->top_logprobs < 0 || rp->top_logprobs > ANVIL_MAX_TOP_LOGPROBS) {
        errmsg_set(err, err_cap, "top_logprobs must be in [0, %d]", ANVIL_MAX_TOP_LOGPROBS);
        return ANVIL_ERR_INVALID;
    }
    if (rp->prompt_logprobs &&
        (rp->prompt_top_logprobs < 0 || rp->prompt_top_logprobs > ANVIL_MAX_TOP_LOGPROBS)) {
        errmsg_set(err, err_cap, "prompt_top_logprobs must be in [0, %d]", ANVIL_MAX_TOP_LOGPROBS);
        return ANVIL_ERR_INVALID;
    }
    if (anvil_sampler_params_check(&rp->sampling, err, err_cap) != ANVIL_OK)
        return ANVIL_ERR_INVALID;
    if (!spec_params_ok(rp->spec, rp->spec_k)) {
        errmsg_set(err, err_cap, "speculation mode %d or k %d out of range (k 1..%d)",
                   (int)rp->spec, rp->spec_k, ANVIL_SPEC_K_MAX);
        return ANVIL_ERR_INVALID;
    }
    if (rp->spec == ANVIL_SPEC_DRAFT && !e->dctx) {
        errmsg_set(err, err_cap, "draft speculation needs a server started with a draft model");
        return ANVIL_ERR_INVALID;
    }
    const struct cn_vocab *cv = NULL;
    if (rp->constraint) {
        if (rp->constraint->m != e->m) {
            errmsg_set(err, err_cap, "the constraint was compiled for another model");
            return ANVIL_ERR_INVALID;
        }
        if (rp->ignore_eos) {
            errmsg_set(err, err_cap, "ignore_eos cannot be combined with a constraint (the "
                       "constraint decides where the output ends)");
            return ANVIL_ERR_INVALID;
        }
        /* the index is built once, by the first constrained request */
        anvil_status ist = guide_index_get(&e->cix, e->m, &cv, err, err_cap);
        if (ist != ANVIL_OK) return ist;
    }

    struct request *r = core_calloc(1, sizeof(*r));
    if (!r) return ANVIL_ERR_NOMEM;
    r->slot = -1;
    r->eog = -1;
    r->cb = cb;
    r->user = user;
    r->n_prompt = r->n_tokens = rp->n_prompt;
    r->max_tokens = rp->max_tokens;
    r->ignore_eos = rp->ignore_eos;
    r->top_logprobs = rp->top_logprobs;
    r->prompt_lp = rp->prompt_logprobs;
    r->prompt_top = rp->prompt_logprobs ? rp->prompt_top_logprobs : 0;
    r->lp_next = 1;
    /* a constrained request needs its logits when the argmax is refused;
     * prompt logprobs need the prompt rows' logits */
    r->argmax_only = anvil_sampler_params_plain_greedy(&rp->sampling) && rp->top_logprobs == 0 &&
                     !rp->constraint && !rp->prompt_logprobs && rp->n_think_start == 0;
    r->t_submit = time_now_s();
    r->spec = rp->spec != ANVIL_SPEC_DEFAULT ? rp->spec
              : e->p.spec != ANVIL_SPEC_DEFAULT ? e->p.spec
                                                 : ANVIL_SPEC_OFF;
    spec_adapt_init(&r->ad, rp->spec_k ? rp->spec_k : e->p.spec_k);
    anvil_status st = ANVIL_ERR_NOMEM;
    if (!(r->tokens = engine_alloc_n((size_t)rp->n_prompt + (size_t)rp->max_tokens, sizeof(anvil_token))))
        goto fail;
    memcpy(r->tokens, rp->prompt, (size_t)rp->n_prompt * sizeof(anvil_token));
    for (int i = 0; i < rp->n_stop; i++) {
        if (!rp->stop[i] || !rp->stop[i][0]) {
            errmsg_set(err, err_cap, "stop strings must not be empty");
            st = ANVIL_ERR_INVALID;
            goto fail;
        }
        if (!(r->stop[i] = core_strdup(rp->stop[i]))) goto fail;
        r->n_stop = i + 1;
        int32_t len = (int32_t)strlen(rp->stop[i]);
        if (len > ANVIL_MAX_STOP_LEN) {
            errmsg_set(err, err_cap, "stop strings are limited to %d bytes", ANVIL_MAX_STOP_LEN);
            st = ANVIL_ERR_INVALID;
            goto fail;
        }
        if (len > r->stop_max_len) r->stop_max_len = len;
    }
    r->held_cap = 512 + 2 * r->stop_max_len;
    if (!(r->held = core_malloc((size_t)r->held_cap))) goto fail;
    if ((st = anvil_sampler_init(&rp->sampling, e->n_vocab, &r->smp)) != ANVIL_OK) goto fail;
    for (int i = 0; i < r->n_prompt; i++) anvil_sampler_accept(r->smp, r->tokens[i]);
    if (rp->constraint) {
        if ((st = guide_req_init(&r->cq, rp->constraint, cv, err, err_cap)) != ANVIL_OK) goto fail;
        r->constrained = true;
    }
    /* a thought before the answer, a forced answer prefix (guide.h) */
    if ((st = guide_gate_init(&r->gate, rp->think_end, rp->n_think_end, rp->think_open,
                              rp->think_budget, rp->answer_prefix, rp->n_answer_prefix, err,
                              err_cap)) != ANVIL_OK ||
        (st = guide_gate_start(&r->gate, rp->think_start, rp->n_think_start, err, err_cap)) !=
            ANVIL_OK)
        goto fail;
    r->special_text = rp->special_text;

    pthread_mutex_lock(&e->mu);
    if (e->stop || e->stats.queued >= e->p.max_queue) {
        pthread_mutex_unlock(&e->mu);
        errmsg_set(err, err_cap, "the request queue is full (%d waiting)", e->p.max_queue);
        st = ANVIL_ERR_KV_FULL;
        goto fail;
    }
    r->id = e->next_id++;
    if (e->inbox_tail) e->inbox_tail->next = r;
    else e->inbox_head = r;
    e->inbox_tail = r;
    e->n_inbox++;
    e->stats.queued++; /* until admitted (admit) or finished while waiting */
    r->live_next = e->live;
    if (e->live) e->live->live_prev = r;
    e->live = r;
    if (out_id) *out_id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return ANVIL_OK;
fail:
    if (st == ANVIL_ERR_NOMEM) errmsg_set(err, err_cap, "out of memory");
    engine_request_free(r);
    return st;
}

anvil_status anvil_engine_cancel(struct anvil_engine *e, anvil_req_id id) {
    if (!e) return ANVIL_ERR_INVALID;
    anvil_status st = ANVIL_ERR_INVALID;
    pthread_mutex_lock(&e->mu);
    for (struct request *r = e->live; r; r = r->live_next)
        if (r->id == id) {
            r->cancelled = true;
            st = ANVIL_OK;
            pthread_cond_signal(&e->cv);
            break;
        }
    pthread_mutex_unlock(&e->mu);
    return st;
}
