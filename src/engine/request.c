/*
 * request.c - a request's end: its callback, and retirement (free its KV,
 * send DONE with the text still held back, fold its counts into the
 * stats, free it). Every way a request ends goes through engine_finish.
 */
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"

void engine_request_free(struct request *r) {
    if (!r) return;
    anvil_sampler_free(r->smp);
    guide_req_free(&r->cq);
    guide_gate_free(&r->gate);
    for (int i = 0; i < r->n_stop; i++) core_free(r->stop[i]);
    core_free(r->tokens);
    core_free(r->held);
    core_free(r);
}

static void live_remove(struct anvil_engine *e, struct request *r) {
    if (r->live_prev) r->live_prev->live_next = r->live_next;
    else e->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    r->live_prev = r->live_next = NULL;
}

/* Emit an event to the request's callback. */
void engine_emit(struct request *r, const struct anvil_event *ev) {
    if (r->cb) r->cb(r->user, ev);
}

/* Retire a request: free its KV, send DONE with the text still held (unless
 * a stop string cut it), and free it. */
void engine_finish(struct anvil_engine *e, struct request *r, enum anvil_finish why,
                   const char *error, bool flush_held) {
    bool was_queued = r->slot < 0;
    if (r->slot >= 0) {
        anvil_seq_truncate(e->ctx, r->slot, 0);
        if (e->dctx) anvil_seq_truncate(e->dctx, r->slot, 0);
        e->running[r->slot] = NULL;
        e->n_running--;
        r->slot = -1;
    }
    int32_t n = 0;
    if (flush_held) {
        /* the detokenizer's incomplete tail becomes U+FFFD at the end */
        char tail[16];
        int32_t k = anvil_detok_flush(&r->dt, tail, sizeof(tail));
        if (r->n_held > 0 && r->n_held <= e->text_cap) {
            memcpy(e->text, r->held, (size_t)r->n_held);
            n = r->n_held;
        }
        if (k > 0 && n + k <= e->text_cap) {
            memcpy(e->text + n, tail, (size_t)k);
            n += k;
        }
    }
    struct anvil_event ev = {
        .type = ANVIL_EVENT_DONE,
        .id = r->id,
        .token = r->eog,
        .text = e->text,
        .text_len = n,
        .finish = why,
        .n_prompt = r->n_prompt,
        .n_gen = r->n_gen,
        .n_reused = r->n_reused,
        .ttft_s = r->t_first > 0 ? r->t_first - r->t_submit : 0.0,
        .error = error,
    };
    double now = time_now_s();
    if (r->t_admit > 0) {
        ev.queue_s = r->t_admit - r->t_submit;
        ev.prefill_s = (r->t_first > 0 ? r->t_first : now) - r->t_admit;
        ev.decode_s = r->t_first > 0 ? now - r->t_first : 0.0;
    } else { /* never admitted (cancelled while waiting) */
        ev.queue_s = now - r->t_submit;
    }
    engine_emit(r, &ev);
    pthread_mutex_lock(&e->mu);
    if (was_queued) e->stats.queued--;
    live_remove(e, r);
    e->stats.n_requests_done++;
    e->stats.n_prompt_tokens += (uint64_t)r->n_prompt;
    e->stats.n_gen_tokens += (uint64_t)r->n_gen;
    e->stats.n_cons_tokens += r->cq.n_tokens;
    e->stats.n_cons_masks += r->cq.n_masks;
    e->stats.cons_s += r->cq.secs;
    pthread_mutex_unlock(&e->mu);
    engine_request_free(r);
}
