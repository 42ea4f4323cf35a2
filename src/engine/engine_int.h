/*
 * engine_int.h - the engine's state, shared by the files of src/engine/
 * (engine.c's header describes the design and the locking):
 *
 *   engine.c     parameters, init / free, the driver thread
 *   submit.c     request admission (any thread): submit, cancel
 *   sched.c      queues, admission into slots, preemption (driver thread)
 *   step.c       one step: build the batch, forward pass, outputs
 *   output.c     a drawn token: draw, stop strings, logprobs, limits
 *   speculate.c  proposal room, draft-model proposals, verification
 *   request.c    a request's end (engine_finish) and its callback
 *   stats.c      counters and profile
 *   guide.c      constraints (guide.h); spec.c n-gram proposals (spec.h)
 *
 * Calls between them go one way (no circle): engine.c's driver calls
 * step.c; step.c calls sched.c, speculate.c, output.c and stats.c;
 * speculate.c calls output.c; all of them may call request.c, which calls
 * none of them.
 */
#ifndef ANVIL_ENGINE_INT_H
#define ANVIL_ENGINE_INT_H

#include <pthread.h>

#include "core/core.h"
#include "engine/guide.h"
#include "engine/spec.h"
#include "model/ctx.h"
#include "sample/sample.h"

struct request {
    anvil_req_id id;
    anvil_event_fn cb;
    void *user;
    anvil_token *tokens; /* (n_prompt + max_tokens) prompt then generated */
    int32_t n_prompt, n_tokens, max_tokens, n_gen;
    int32_t n_cached;    /* tokens in the KV cache */
    int32_t n_reused;    /* prompt tokens the last admission found in the prefix cache */
    int32_t slot;        /* sequence id in the ctx, -1 while waiting */
    anvil_token eog;     /* the end-of-generation token that stopped it, -1 */
    struct anvil_sampler *smp;
    bool ignore_eos;
    char *stop[ANVIL_MAX_STOP];
    int32_t n_stop, stop_max_len;
    int32_t top_logprobs;
    /* prompt logprobs (anvil_request_params.prompt_logprobs): lp_next is
     * the next prompt position whose logprob is owed (from 1): rows before
     * it need no logits when recomputed, and no cached prefix may start
     * past it (sched.c) */
    bool prompt_lp;
    int32_t prompt_top, lp_next;
    bool argmax_only;    /* greedy with no penalties: lm_head's fused argmax suffices */
    struct anvil_detok dt;
    char *held;          /* released by detok, held back for stop matching */
    int32_t n_held, held_cap;
    double t_submit, t_first;
    double t_admit;      /* first admission (0 before) */
    bool cancelled;      /* written under mu */
    uint64_t admit_seq;  /* admission order, for preemption */
    enum anvil_spec spec;     /* OFF, NGRAM or DRAFT (resolved at submit) */
    struct spec_adapt ad;     /* proposal length */
    int32_t n_draft;          /* proposals in this step's batch */
    anvil_token draft[ANVIL_SPEC_K_MAX];
    int32_t draft_cached;     /* positions in the draft model's cache */
    bool constrained;         /* cq holds a constraint state */
    struct guide_req cq;      /* structured output (guide.h) */
    struct guide_gate gate;   /* thought and answer prefix (guide.h); zeroed: none */
    bool special_text;        /* control tokens spell their text */
    struct request *next;      /* inbox / waiting list */
    struct request *live_prev, *live_next; /* live list, under mu */
};

struct anvil_engine {
    struct anvil_model *m;
    struct anvil_ctx *ctx;
    struct anvil_engine_params p;
    int32_t n_vocab, n_ctx;
    int64_t pool_tokens; /* positions one sequence could hold with the whole pool */
    struct anvil_ctx *dctx;  /* the draft model's context (ANVIL_SPEC_DRAFT), or NULL */
    int32_t n_out_max;       /* output rows one step may ask for */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct request *inbox_head, *inbox_tail; /* under mu */
    int32_t n_inbox;                         /* under mu */
    struct request *live;                    /* under mu */
    anvil_req_id next_id;                    /* under mu */
    struct anvil_engine_stats stats;         /* under mu */
    bool stop;                               /* under mu */
    pthread_t thread;
    bool thread_started;

    /* driver-owned */
    struct request *wait_head, *wait_tail;
    int32_t n_waiting;
    struct request **running; /* (max_running) by slot */
    int32_t n_running;
    uint64_t admit_counter;
    anvil_token *b_token;     /* (step_tokens) batch rows */
    int32_t *b_pos, *b_seq;
    int8_t *b_logits;
    struct request **b_req;   /* (step_tokens) request of each row */
    struct request **out_req; /* (n_out_max) request of each output row */
    struct request **order;   /* (max_running) build_batch's admission-order scratch */
    anvil_token *d_tok;       /* (step_tokens) draft model batch rows */
    int32_t *d_pos, *d_seq;
    int8_t *d_out;
    int32_t *d_take;          /* (max_running) draft catch-up rows per request */
    struct guide_index cix;   /* the model's vocabulary index for constraints (built on first use) */
    double row_cost0;         /* ctx_model_row_cost at position 0 (build_batch) */
    char *text;               /* (text_cap) event text scratch */
    int32_t text_cap;
    anvil_token top_tok[ANVIL_MAX_TOP_LOGPROBS];
    float top_lp[ANVIL_MAX_TOP_LOGPROBS];
    /* profiling (anvil_engine_set_profile): the model ctx times its
     * decodes; the engine, its steps and their sampling */
    bool prof_on;
    double prof_step_s, prof_sample_s;
    uint64_t prof_n_step;
    char errmsg[256];
};

/* n elements of size bytes, or NULL on overflow or out of memory. */
static inline void *engine_alloc_n(size_t n, size_t size) {
    size_t b;
    return size_mul(n, size, &b) ? core_malloc(b) : NULL;
}

/* The request has finished its prompt and has one pending token. */
static inline bool engine_is_decoding(const struct request *r) {
    return r->n_tokens - r->n_cached == 1 && r->n_gen > 0;
}

/* request.c */
void engine_request_free(struct request *r); /* NULL is a no-op */
void engine_emit(struct request *r, const struct anvil_event *ev);
/* Retire r: free its KV, send DONE (with the held text when flush_held),
 * count it, free it. error: the DONE event's message, or NULL. */
void engine_finish(struct anvil_engine *e, struct request *r, enum anvil_finish why,
                   const char *error, bool flush_held);

/* sched.c (driver thread) */
void engine_take_inbox(struct anvil_engine *e);
void engine_drop_cancelled(struct anvil_engine *e);
void engine_admit(struct anvil_engine *e);
bool engine_preempt_one(struct anvil_engine *e); /* false: nothing to preempt */

/* output.c */
anvil_token engine_draw(struct anvil_engine *e, struct request *r, int32_t o, const float *logits,
                        anvil_token draft, const char **why);
bool engine_take_token(struct anvil_engine *e, struct request *r, anvil_token t,
                       const float *logits, double now, const char *why);
/* The PROMPT event of prompt position pos from the logits of row pos - 1. */
void engine_prompt_logprob(struct anvil_engine *e, struct request *r, int32_t pos,
                           const float *logits);

/* speculate.c */
int32_t engine_spec_room(const struct anvil_engine *e, const struct request *r, int32_t budget);
void engine_draft_propose(struct anvil_engine *e);
int32_t engine_verify(struct anvil_engine *e, struct request *r, int32_t o, double now);

/* stats.c */
void engine_publish_stats(struct anvil_engine *e);

#endif
