/*
 * sched.c - the scheduler's queues (driver thread): inbox to waiting list,
 * cancellations, admission of waiting requests into sequence slots while
 * the KV pool has room, and preemption when it runs out. A preempted
 * request keeps its tokens and recomputes its cache later (engine.c).
 */
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"

void engine_take_inbox(struct anvil_engine *e) {
    pthread_mutex_lock(&e->mu);
    struct request *head = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    e->n_inbox = 0;
    pthread_mutex_unlock(&e->mu);
    for (struct request *r = head, *next; r; r = next) {
        next = r->next;
        r->next = NULL;
        if (e->wait_tail) e->wait_tail->next = r;
        else e->wait_head = r;
        e->wait_tail = r;
        e->n_waiting++;
    }
}

static bool is_cancelled(struct anvil_engine *e, struct request *r) {
    pthread_mutex_lock(&e->mu);
    bool c = r->cancelled;
    pthread_mutex_unlock(&e->mu);
    return c;
}

void engine_drop_cancelled(struct anvil_engine *e) {
    for (struct request **pp = &e->wait_head, *r; (r = *pp);) {
        if (is_cancelled(e, r)) {
            *pp = r->next;
            if (e->wait_tail == r) e->wait_tail = NULL;
            e->n_waiting--;
            engine_finish(e, r, ANVIL_FINISH_CANCELLED, NULL, false);
        } else {
            pp = &r->next;
        }
    }
    if (!e->wait_tail)
        for (struct request *r = e->wait_head; r; r = r->next) e->wait_tail = r;
    for (int s = 0; s < e->p.max_running; s++)
        if (e->running[s] && is_cancelled(e, e->running[s]))
            engine_finish(e, e->running[s], ANVIL_FINISH_CANCELLED, NULL, false);
}

/* Whether r shares whole blocks of its prompt, past the `reused` the
 * cache gave it, with a running request whose prefill has not computed
 * them yet: admitted now, r would compute them a second time beside it
 * (n > 1 choices, or the same prompt sent at once by several clients);
 * held back a step or a few, it finds them in the prefix cache. Only a
 * running request still in its prefill can hold r back, so r waits at
 * most until that prefill ends (or is preempted). */
static bool prefix_in_flight(const struct anvil_engine *e, const struct request *r,
                             int32_t reused, int32_t bs) {
    if (bs <= 0 || r->prompt_lp) return false;
    for (int s = 0; s < e->p.max_running; s++) {
        const struct request *q = e->running[s];
        if (!q || q->n_cached >= q->n_prompt) continue;
        /* r computes its last prompt token itself (reuse stops before it) */
        int32_t n = r->n_prompt - 1 < q->n_prompt ? r->n_prompt - 1 : q->n_prompt;
        int32_t k = 0;
        while (k < n && r->tokens[k] == q->tokens[k]) k++;
        k -= k % bs;
        if (k > reused && k > q->n_cached) return true;
    }
    return false;
}

/* Move waiting requests into free slots, FIFO, while the KV pool has room
 * for the rest of their tokens plus one block of growth per running
 * request (a watermark, so that admitting does not force an immediate
 * preemption). Identical prompt prefixes reuse cached blocks; a request
 * whose prefix another one is computing right now waits for it
 * (prefix_in_flight) and the requests behind it go first. */
void engine_admit(struct anvil_engine *e) {
    struct ctx_kv_info ki;
    ctx_kv_info(e->ctx, &ki);
    struct request **pp = &e->wait_head, *prev = NULL;
    while (*pp && e->n_running < e->p.max_running) {
        int slot = -1;
        for (int s = 0; s < e->p.max_running; s++)
            if (!e->running[s]) {
                slot = s;
                break;
            }
        if (slot < 0) break;
        struct request *r = *pp;
        int32_t reused = anvil_seq_reuse_prefix(e->ctx, slot, r->tokens, r->n_tokens);
        /* prompt logprobs: cached positions have no logits, so a prefix
         * may be reused only as far as the logprobs already sent */
        if (r->prompt_lp && reused > r->lp_next - 1) {
            anvil_seq_truncate(e->ctx, slot, 0);
            reused = 0;
        }
        if (prefix_in_flight(e, r, reused, ki.block_tokens)) {
            anvil_seq_truncate(e->ctx, slot, 0);
            prev = r;
            pp = &r->next;
            continue;
        }
        /* the pool, not the slot: n_ctx per request was checked at submit */
        if (!ctx_kv_fits(e->ctx, (int64_t)r->n_tokens - reused, e->n_running) && e->n_running > 0) {
            anvil_seq_truncate(e->ctx, slot, 0);
            break;
        }
        *pp = r->next;
        if (e->wait_tail == r) e->wait_tail = prev;
        e->n_waiting--;
        r->next = NULL;
        r->slot = slot;
        r->n_cached = reused;
        r->n_reused = reused;
        r->admit_seq = ++e->admit_counter;
        if (r->t_admit == 0) r->t_admit = time_now_s();
        pthread_mutex_lock(&e->mu);
        e->stats.queued--;
        e->stats.n_prefix_tokens += (uint64_t)reused;
        pthread_mutex_unlock(&e->mu);
        e->running[slot] = r;
        e->n_running++;
    }
}

/* Free the running request that loses least by it - the one with the
 * fewest positions in the cache (the least to recompute), the most
 * recently admitted among equals - and put it back at the head of the
 * queue, so it resumes before any newer request is admitted. */
bool engine_preempt_one(struct anvil_engine *e) {
    struct request *victim = NULL;
    for (int s = 0; s < e->p.max_running; s++) {
        struct request *r = e->running[s];
        if (r && (!victim || r->n_cached < victim->n_cached ||
                  (r->n_cached == victim->n_cached && r->admit_seq > victim->admit_seq)))
            victim = r;
    }
    if (!victim || e->n_running <= 1) return false;
    anvil_seq_truncate(e->ctx, victim->slot, 0);
    if (e->dctx) anvil_seq_truncate(e->dctx, victim->slot, 0);
    victim->draft_cached = 0;
    e->running[victim->slot] = NULL;
    e->n_running--;
    victim->slot = -1;
    victim->n_cached = 0;
    victim->next = e->wait_head;
    e->wait_head = victim;
    if (!e->wait_tail) e->wait_tail = victim;
    e->n_waiting++;
    pthread_mutex_lock(&e->mu);
    e->stats.n_preemptions++;
    e->stats.queued++;
    pthread_mutex_unlock(&e->mu);
    return true;
}
