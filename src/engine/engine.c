/*
 * engine.c - serving engine: a request queue and a continuous-batching
 * scheduler on top of one anvil_ctx.
 *
 * Each step:
 *   1. take new submissions and cancellations (under the lock);
 *   2. admit waiting requests into free sequence slots while the KV cache
 *      has room for their first chunk;
 *   3. build one batch: first one decode row for every running request
 *      that has finished its prompt (so decodes never stall behind a long
 *      prompt), then prompt chunks (at most prefill_chunk tokens of one
 *      request) in admission order, up to step_tokens rows; while some
 *      requests decode, prompt rows stop earlier where the step's work
 *      (weights plus attention at each row's depth) reaches that of
 *      step_tokens rows at depth 0, so deep prompts do not stretch the
 *      gap between decoded tokens;
 *   4. run the forward pass; when the KV pool runs out, preempt the most
 *      recently admitted request (free its cache; it recomputes later from
 *      its prompt plus what it generated) and rebuild the batch;
 *   5. sample for every row that finished a request's pending tokens, emit
 *      events, and retire finished requests (freeing their KV).
 *
 * Speculation (spec.h, anvil.h enum anvil_spec): a decoding request may
 * carry proposed tokens after its pending one - from prompt lookup, or
 * from a draft model run just before the batch is built. Its rows are the
 * pending token and the proposals, each asking for logits; step 5 then
 * samples row after row (anvil_sampler_sample_spec with the proposal as
 * the preferred token), emits every token it draws, and stops at the
 * first one that differs from the proposal. The KV of the rows after the
 * last accepted proposal is dropped (anvil_seq_truncate). Because a row's
 * logits do not depend on the rows beside it, a greedy request produces
 * exactly the tokens of plain decoding; a sampled one, exactly its
 * distribution.
 *
 * A request's tokens are tokens[0, n_tokens): the prompt, then generated
 * tokens. n_cached of them are in the KV cache; the step feeds
 * tokens[n_cached, ...). Preemption sets n_cached to 0 - nothing else
 * changes, and because every row of the forward pass is computed
 * independently of the others (batch-invariant kernels), the recomputed
 * cache and the continuation are the same as without preemption.
 *
 * Locking: `mu` guards the inbox, the live list (for cancel), the stats
 * and the wake-up condition. Everything else belongs to the driver thread.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "engine/guide.h"
#include "engine/spec.h"
#include "model/ctx.h"
#include "sample/sample.h"

#define MAX_STOP 16
#define MAX_TOP_LOGPROBS 20
#define PROMPT_ROWS_MIN 32 /* prompt rows a step takes whatever their cost (build_batch) */

struct request {
    anvil_req_id id;
    anvil_event_fn cb;
    void *user;
    anvil_token *tokens; /* (n_prompt + max_tokens) prompt then generated */
    int32_t n_prompt, n_tokens, max_tokens, n_gen;
    int32_t n_cached;    /* tokens in the KV cache */
    int32_t n_reused;    /* prompt tokens the last admission found in the prefix cache */
    int32_t slot;        /* sequence id in the ctx, -1 while waiting */
    struct anvil_sampler *smp;
    bool ignore_eos;
    char *stop[MAX_STOP];
    int32_t n_stop, stop_max_len;
    int32_t top_logprobs;
    bool argmax_only;    /* greedy with no penalties: lm_head's fused argmax suffices */
    struct anvil_detok dt;
    char *held;          /* released by detok, held back for stop matching */
    int32_t n_held, held_cap;
    double t_submit, t_first;
    bool cancelled;      /* written under mu */
    uint64_t admit_seq;  /* admission order, for preemption */
    enum anvil_spec spec;     /* OFF, NGRAM or DRAFT (resolved at submit) */
    struct spec_adapt ad;     /* proposal length */
    int32_t n_draft;          /* proposals in this step's batch */
    anvil_token draft[ANVIL_SPEC_K_MAX];
    int32_t draft_cached;     /* positions in the draft model's cache */
    bool constrained;         /* cq holds a constraint state */
    struct guide_req cq;       /* structured output (guide.h) */
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
    struct guide_index cix;    /* the model's vocabulary index for constraints (built on first use) */
    double row_cost0;         /* ctx_model_row_cost at position 0 (build_batch) */
    char *text;               /* (text_cap) event text scratch */
    int32_t text_cap;
    anvil_token top_tok[MAX_TOP_LOGPROBS];
    float top_lp[MAX_TOP_LOGPROBS];
    /* profiling (anvil_engine_set_profile): the model ctx times its
     * decodes; the engine, its steps and their sampling */
    bool prof_on;
    double prof_step_s, prof_sample_s;
    uint64_t prof_n_step;
    char errmsg[256];
};

struct anvil_engine_params anvil_engine_default_params(void) {
    struct anvil_engine_params p = {0};
    return p;
}

const char *anvil_engine_errmsg(const struct anvil_engine *e) { return e->errmsg; }
int32_t anvil_engine_n_ctx(const struct anvil_engine *e) { return e->n_ctx; }

/* ---------------------------------------------------------------------- */
/* requests */

static void request_free(struct request *r) {
    if (!r) return;
    anvil_sampler_free(r->smp);
    guide_req_free(&r->cq);
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
static void emit(struct request *r, const struct anvil_event *ev) {
    if (r->cb) r->cb(r->user, ev);
}

/* Retire a request: free its KV, send DONE with the text still held (unless
 * a stop string cut it), and free it. */
static void finish(struct anvil_engine *e, struct request *r, enum anvil_finish why,
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
        .text = e->text,
        .text_len = n,
        .finish = why,
        .n_prompt = r->n_prompt,
        .n_gen = r->n_gen,
        .n_reused = r->n_reused,
        .ttft_s = r->t_first > 0 ? r->t_first - r->t_submit : 0.0,
        .error = error,
    };
    emit(r, &ev);
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
    request_free(r);
}

/* ---------------------------------------------------------------------- */
/* init / free */

static void *alloc_n(size_t n, size_t size) {
    size_t b;
    return size_mul(n, size, &b) ? core_malloc(b) : NULL;
}

/* Bytes of memory the system has available now (MemAvailable), or 0 when
 * it cannot tell. */
static int64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    long long kb = 0;
    char line[128];
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb <= 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        return pages > 0 && psz > 0 ? (int64_t)pages * psz : 0;
    }
    return (int64_t)kb * 1024;
}

/* The default KV pool (kv_mem 0), sized from the machine as vLLM sizes its
 * cache from a memory fraction: enough for every running sequence at the
 * full context, but at most ENGINE_KV_MEM_FRACTION of the memory available
 * at start, and at least max_running sequences of 1024 positions when
 * that fits. The pool is reserved, not touched: pages become resident as
 * blocks are first used, so a large default costs nothing until needed. */
#define ENGINE_KV_MEM_FRACTION 0.5
static int64_t default_kv_mem(const struct anvil_model *m, const struct anvil_engine_params *p) {
    int64_t full = ctx_model_kv_bytes(m, p->kv_type, p->n_ctx, p->max_running, p->step_tokens);
    int64_t floor = ctx_model_kv_bytes(m, p->kv_type, p->n_ctx < 1024 ? p->n_ctx : 1024,
                                       p->max_running, p->step_tokens);
    int64_t avail = mem_available();
    int64_t cap = avail > 0 ? (int64_t)((double)avail * ENGINE_KV_MEM_FRACTION) : full;
    int64_t kv = full < cap ? full : cap;
    if (kv < floor && floor <= avail) kv = floor;
    return kv;
}

anvil_status anvil_engine_init(struct anvil_model *m, const struct anvil_engine_params *p,
                               struct anvil_engine **out, char *err, size_t err_cap) {
    if (err && err_cap) err[0] = '\0';
    if (!m || !out) {
        errmsg_set(err, err_cap, "engine: model and out are required");
        return ANVIL_ERR_INVALID;
    }
    struct anvil_engine_params d = anvil_engine_default_params();
    if (!p) p = &d;
    if (p->n_threads < 0 || p->max_running < 0 || p->max_queue < 0 || p->n_ctx < 0 ||
        p->step_tokens < 0 || p->prefill_chunk < 0 || p->kv_mem < 0 || p->max_running > 4096) {
        errmsg_set(err, err_cap,
                   "engine: parameters out of range (n_threads %d, max_running %d (<= 4096), "
                   "max_queue %d, n_ctx %d, step_tokens %d, prefill_chunk %d, kv_mem %lld)",
                   p->n_threads, p->max_running, p->max_queue, p->n_ctx, p->step_tokens,
                   p->prefill_chunk, (long long)p->kv_mem);
        return ANVIL_ERR_INVALID;
    }
    if (p->kv_type != 0 && p->kv_type != ANVIL_TYPE_F16 && p->kv_type != ANVIL_TYPE_Q8_0) {
        errmsg_set(err, err_cap, "engine: KV type must be F16 or Q8_0");
        return ANVIL_ERR_INVALID;
    }
    if (p->spec < ANVIL_SPEC_DEFAULT || p->spec > ANVIL_SPEC_DRAFT || p->spec_k < 0 ||
        p->spec_k > ANVIL_SPEC_K_MAX) {
        errmsg_set(err, err_cap, "engine: speculation mode %d or k %d out of range (k 1..%d)",
                   (int)p->spec, p->spec_k, ANVIL_SPEC_K_MAX);
        return ANVIL_ERR_INVALID;
    }
    if (p->spec == ANVIL_SPEC_DRAFT && !p->draft) {
        errmsg_set(err, err_cap, "engine: draft speculation needs a draft model");
        return ANVIL_ERR_INVALID;
    }
    if (p->draft) {
        anvil_status vst = anvil_vocab_compatible(m, p->draft, err, err_cap);
        if (vst != ANVIL_OK) return vst;
    }
    struct anvil_engine *e = core_calloc(1, sizeof(*e));
    if (!e) {
        errmsg_set(err, err_cap, "engine: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    e->m = m;
    e->p = *p;
    if (!e->p.max_running) e->p.max_running = 64;
    if (!e->p.max_queue) e->p.max_queue = 1024;
    if (!e->p.step_tokens) e->p.step_tokens = 512;
    if (!e->p.prefill_chunk) e->p.prefill_chunk = 256;
    if (e->p.step_tokens < e->p.max_running) e->p.step_tokens = e->p.max_running;
    if (!e->p.spec_k) e->p.spec_k = 8;
    e->row_cost0 = ctx_model_row_cost(m, 0);
    /* output rows: one per running request, plus proposals when anything
     * may speculate (a request can ask even if the engine default is off) */
    int64_t n_out = (int64_t)e->p.max_running * (1 + e->p.spec_k);
    e->n_out_max = (int32_t)(n_out < e->p.step_tokens ? n_out : e->p.step_tokens);
    if (e->n_out_max < e->p.max_running) e->n_out_max = e->p.max_running;
    if (!e->p.kv_type) e->p.kv_type = ANVIL_TYPE_F16;
    int32_t train = anvil_model_n_ctx_train(m);
    if (!e->p.n_ctx) e->p.n_ctx = train < 8192 ? train : 8192;
    e->n_vocab = anvil_model_n_vocab(m);
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    guide_index_init(&e->cix);

    anvil_status st = ANVIL_ERR_NOMEM;
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = e->p.n_ctx;
    cp.n_seq_max = e->p.max_running;
    cp.n_batch = e->p.step_tokens;
    cp.n_threads = e->p.n_threads;
    cp.n_outputs = e->n_out_max;
    cp.kv_type = e->p.kv_type;
    cp.prefix_cache = true;
    cp.kv_mem = e->p.kv_mem ? e->p.kv_mem : default_kv_mem(m, &e->p);
    if ((st = anvil_ctx_init(m, &cp, &e->ctx, err, err_cap)) != ANVIL_OK) goto fail;
    e->n_ctx = anvil_ctx_n_ctx(e->ctx);
    e->pool_tokens = ctx_kv_seq_capacity(e->ctx);
    if (e->p.draft) {
        /* the draft's own cache: every slot at full length, prefix caching
         * off (it follows the target's accepted tokens exactly) */
        struct anvil_ctx_params dp = anvil_ctx_default_params();
        dp.n_ctx = e->n_ctx;
        dp.n_seq_max = e->p.max_running;
        dp.n_batch = e->p.step_tokens;
        dp.n_threads = e->p.n_threads;
        dp.n_outputs = e->p.max_running;
        dp.kv_type = e->p.kv_type;
        if ((st = anvil_ctx_init(e->p.draft, &dp, &e->dctx, err, err_cap)) != ANVIL_OK)
            goto fail;
    }
    st = ANVIL_ERR_NOMEM;
    size_t nb = (size_t)e->p.step_tokens, nr = (size_t)e->p.max_running;
    if (!(e->running = core_calloc(nr, sizeof(*e->running)))) goto fail;
    if (!(e->b_token = alloc_n(nb, sizeof(anvil_token)))) goto fail;
    if (!(e->b_pos = alloc_n(nb, sizeof(int32_t)))) goto fail;
    if (!(e->b_seq = alloc_n(nb, sizeof(int32_t)))) goto fail;
    if (!(e->b_logits = alloc_n(nb, sizeof(int8_t)))) goto fail;
    if (!(e->b_req = alloc_n(nb, sizeof(*e->b_req)))) goto fail;
    if (!(e->out_req = alloc_n((size_t)e->n_out_max, sizeof(*e->out_req)))) goto fail;
    if (!(e->order = alloc_n(nr, sizeof(*e->order)))) goto fail;
    if (e->dctx) {
        if (!(e->d_tok = alloc_n(nb, sizeof(anvil_token)))) goto fail;
        if (!(e->d_pos = alloc_n(nb, sizeof(int32_t)))) goto fail;
        if (!(e->d_seq = alloc_n(nb, sizeof(int32_t)))) goto fail;
        if (!(e->d_out = alloc_n(nb, sizeof(int8_t)))) goto fail;
        if (!(e->d_take = alloc_n(nr, sizeof(int32_t)))) goto fail;
    }
    e->text_cap = 4096;
    if (!(e->text = core_malloc((size_t)e->text_cap))) goto fail;
    *out = e;
    return ANVIL_OK;
fail:
    if (st == ANVIL_ERR_NOMEM && err && err_cap && !err[0])
        errmsg_set(err, err_cap, "engine: out of memory (%d sequences, %d tokens per step)",
                   e->p.max_running, e->p.step_tokens);
    anvil_engine_free(e);
    return st;
}

void anvil_engine_free(struct anvil_engine *e) {
    if (!e) return;
    anvil_engine_stop(e);
    /* everything still queued or running ends as cancelled */
    if (e->running) {
        for (int s = 0; s < e->p.max_running; s++)
            if (e->running[s]) finish(e, e->running[s], ANVIL_FINISH_CANCELLED, NULL, false);
    }
    while (e->wait_head) {
        struct request *r = e->wait_head;
        e->wait_head = r->next;
        finish(e, r, ANVIL_FINISH_CANCELLED, NULL, false);
    }
    while (e->inbox_head) {
        struct request *r = e->inbox_head;
        e->inbox_head = r->next;
        finish(e, r, ANVIL_FINISH_CANCELLED, NULL, false);
    }
    anvil_ctx_free(e->ctx);
    anvil_ctx_free(e->dctx);
    core_free(e->order);
    core_free(e->d_tok);
    core_free(e->d_pos);
    core_free(e->d_seq);
    core_free(e->d_out);
    core_free(e->d_take);
    core_free(e->running);
    core_free(e->b_token);
    core_free(e->b_pos);
    core_free(e->b_seq);
    core_free(e->b_logits);
    core_free(e->b_req);
    core_free(e->out_req);
    core_free(e->text);
    guide_index_free(&e->cix);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    core_free(e);
}

/* ---------------------------------------------------------------------- */
/* submit / cancel (any thread) */

anvil_status anvil_engine_submit(struct anvil_engine *e, const struct anvil_request_params *rp,
                                 anvil_event_fn cb, void *user, anvil_req_id *out_id, char *err,
                                 size_t err_cap) {
    if (!e || !rp) return ANVIL_ERR_INVALID;
    if (rp->n_prompt < 1 || !rp->prompt) {
        errmsg_set(err, err_cap, "the prompt is empty");
        return ANVIL_ERR_INVALID;
    }
    if (rp->max_tokens < 1) {
        errmsg_set(err, err_cap, "max_tokens must be >= 1, got %d", rp->max_tokens);
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
    if (rp->n_stop < 0 || rp->n_stop > MAX_STOP || (rp->n_stop > 0 && !rp->stop)) {
        errmsg_set(err, err_cap, "at most %d stop strings", MAX_STOP);
        return ANVIL_ERR_INVALID;
    }
    if (rp->top_logprobs < 0 || rp->top_logprobs > MAX_TOP_LOGPROBS) {
        errmsg_set(err, err_cap, "top_logprobs must be in [0, %d]", MAX_TOP_LOGPROBS);
        return ANVIL_ERR_INVALID;
    }
    if (anvil_sampler_params_check(&rp->sampling, err, err_cap) != ANVIL_OK)
        return ANVIL_ERR_INVALID;
    if (rp->spec < ANVIL_SPEC_DEFAULT || rp->spec > ANVIL_SPEC_DRAFT || rp->spec_k < 0 ||
        rp->spec_k > ANVIL_SPEC_K_MAX) {
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
    r->cb = cb;
    r->user = user;
    r->n_prompt = r->n_tokens = rp->n_prompt;
    r->max_tokens = rp->max_tokens;
    r->ignore_eos = rp->ignore_eos;
    r->top_logprobs = rp->top_logprobs;
    /* a constrained request needs its logits when the argmax is refused */
    r->argmax_only = rp->sampling.temperature == 0.0f && rp->sampling.repeat_penalty == 1.0f &&
                     rp->sampling.presence_penalty == 0.0f &&
                     rp->sampling.frequency_penalty == 0.0f && rp->top_logprobs == 0 &&
                     !rp->constraint;
    r->t_submit = time_now_s();
    r->spec = rp->spec != ANVIL_SPEC_DEFAULT ? rp->spec
              : e->p.spec != ANVIL_SPEC_DEFAULT ? e->p.spec
                                                 : ANVIL_SPEC_OFF;
    spec_adapt_init(&r->ad, rp->spec_k ? rp->spec_k : e->p.spec_k);
    anvil_status st = ANVIL_ERR_NOMEM;
    if (!(r->tokens = alloc_n((size_t)rp->n_prompt + (size_t)rp->max_tokens, sizeof(anvil_token))))
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
        if (len > 256) {
            errmsg_set(err, err_cap, "stop strings are limited to 256 bytes");
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
    request_free(r);
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
/* the step */

static void take_inbox(struct anvil_engine *e) {
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

static void drop_cancelled(struct anvil_engine *e) {
    for (struct request **pp = &e->wait_head, *r; (r = *pp);) {
        if (is_cancelled(e, r)) {
            *pp = r->next;
            if (e->wait_tail == r) e->wait_tail = NULL;
            e->n_waiting--;
            finish(e, r, ANVIL_FINISH_CANCELLED, NULL, false);
        } else {
            pp = &r->next;
        }
    }
    if (!e->wait_tail)
        for (struct request *r = e->wait_head; r; r = r->next) e->wait_tail = r;
    for (int s = 0; s < e->p.max_running; s++)
        if (e->running[s] && is_cancelled(e, e->running[s]))
            finish(e, e->running[s], ANVIL_FINISH_CANCELLED, NULL, false);
}

/* Move waiting requests into free slots, FIFO, while the KV pool has room
 * for the rest of their tokens plus one block of growth per running
 * request (a watermark, so that admitting does not force an immediate
 * preemption). Identical prompt prefixes reuse cached blocks. */
static void admit(struct anvil_engine *e) {
    while (e->wait_head && e->n_running < e->p.max_running) {
        int slot = -1;
        for (int s = 0; s < e->p.max_running; s++)
            if (!e->running[s]) {
                slot = s;
                break;
            }
        if (slot < 0) break;
        struct request *r = e->wait_head;
        int32_t reused = anvil_seq_reuse_prefix(e->ctx, slot, r->tokens, r->n_tokens);
        /* the pool, not the slot: n_ctx per request was checked at submit */
        if (!ctx_kv_fits(e->ctx, (int64_t)r->n_tokens - reused, e->n_running) && e->n_running > 0) {
            anvil_seq_truncate(e->ctx, slot, 0);
            break;
        }
        e->wait_head = r->next;
        if (!e->wait_head) e->wait_tail = NULL;
        e->n_waiting--;
        r->next = NULL;
        r->slot = slot;
        r->n_cached = reused;
        r->n_reused = reused;
        r->admit_seq = ++e->admit_counter;
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
static bool preempt_one(struct anvil_engine *e) {
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

/* How many proposals request r may carry this step: its adaptive length,
 * within the context, max_tokens (a proposal past it is never used) and
 * the step's row budget (the pending row takes one). */
static int32_t spec_room(const struct anvil_engine *e, const struct request *r, int32_t budget) {
    if (r->spec == ANVIL_SPEC_OFF) return 0;
    int32_t k = r->ad.k;
    int32_t ctx_room = e->n_ctx - r->n_tokens;         /* rows at n_tokens .. */
    int32_t gen_room = r->max_tokens - r->n_gen - 1;   /* tokens after the next one */
    if (k > ctx_room) k = ctx_room;
    if (k > gen_room) k = gen_room;
    if (k > budget - 1) k = budget - 1;
    return k > 0 ? k : 0;
}

static bool is_decoding(const struct request *r) {
    return r->n_tokens - r->n_cached == 1 && r->n_gen > 0;
}

/* Draft-model proposals for every decoding request that speculates with
 * the draft: catch the draft's cache up with the request's tokens (the
 * last of them is the pending one), then greedy steps, all requests in
 * one batch per step. Leaves the proposals in r->draft, their count in
 * r->n_draft. r->draft_cached counts only positions holding the request's
 * own tokens: proposals fed to the draft are dropped again here before
 * the next round (verify() keeps the accepted ones). A failing draft step
 * proposes nothing more: the target then decodes as usual. */
static void draft_propose(struct anvil_engine *e) {
    struct request **rs = e->order; /* scratch: build_batch refills it */
    int32_t *take = e->d_take;
    int32_t n_rs = 0;
    for (int s = 0; s < e->p.max_running; s++) {
        struct request *r = e->running[s];
        if (!r || r->spec != ANVIL_SPEC_DRAFT) continue;
        r->n_draft = is_decoding(r) ? spec_room(e, r, e->p.step_tokens) : 0;
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
        if (anvil_decode(e->dctx, &b) != ANVIL_OK) {
            for (int32_t j = 0; j < n_rs; j++) {
                rs[j]->n_draft = 0;
                anvil_seq_truncate(e->dctx, rs[j]->slot, 0);
                rs[j]->draft_cached = 0;
            }
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
        if (anvil_decode(e->dctx, &b) != ANVIL_OK) {
            for (int32_t j = 0; j < n_rs; j++)
                if (rs[j]->n_draft > step) rs[j]->n_draft = step;
            break;
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
        if (r->spec != ANVIL_SPEC_DRAFT || !is_decoding(r)) r->n_draft = 0;
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
     * the decoding requests' tokens (1.1 s with 512 rows at depth 2,000 on
     * two cores). At least PROMPT_ROWS_MIN rows, so prompts progress. */
    double cap = (double)e->p.step_tokens * e->row_cost0, used = 0.0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int32_t i = 0; i < n; i++) used += ctx_model_row_cost(e->m, e->b_pos[i]);
        for (int32_t i = 0; i < nr && budget > 0; i++) {
            struct request *r = order[i];
            bool decode = is_decoding(r);
            if ((pass == 0) != decode) continue;
            int32_t k = r->n_tokens - r->n_cached;
            if (k > e->p.prefill_chunk) k = e->p.prefill_chunk;
            if (k > budget) k = budget;
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
                e->b_logits[n] = p != r->n_tokens - 1 ? ANVIL_OUT_NONE
                                 : r->argmax_only    ? ANVIL_OUT_ARGMAX
                                                     : ANVIL_OUT_LOGITS;
                if (e->b_logits[n]) e->out_req[no++] = r;
                n++;
            }
            budget -= k;
            if (!decode) continue;
            /* proposals: after the pending token, each row asking for its
             * logits (n_out_max covers them: it counts spec_k per request) */
            if (r->spec == ANVIL_SPEC_NGRAM)
                r->n_draft = spec_ngram_propose(r->tokens, r->n_tokens, spec_room(e, r, budget + 1),
                                                r->draft);
            else if (r->spec != ANVIL_SPEC_DRAFT)
                r->n_draft = 0;
            if (r->n_draft > budget) r->n_draft = budget;
            if (r->n_draft > e->n_out_max - no) r->n_draft = e->n_out_max - no;
            /* a proposal the constraint refuses could never be accepted:
             * cut there (a prefix, so a draft model's cache stays right) */
            if (r->constrained) r->n_draft = guide_cut(&r->cq, r->draft, r->n_draft);
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

/* The token of output row o for request r: the fused argmax for
 * argmax-only rows, else a draw from the row's logits (under the
 * constraint when there is one: guide.h), preferring the proposal `draft`
 * when it is >= 0. -1 with *why when no token can be drawn. */
static anvil_token draw(struct anvil_engine *e, struct request *r, int32_t o,
                        const float *logits, anvil_token draft, const char **why) {
    *why = "the logits are not finite";
    if (r->argmax_only) return anvil_get_argmax(e->ctx, o);
    if (!logits) return -1;
    if (r->constrained) {
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
static bool take_token(struct anvil_engine *e, struct request *r, anvil_token t,
                       const float *logits, double now, const char *why) {
    if (t < 0) {
        finish(e, r, t == GUIDE_DEAD_END ? ANVIL_FINISH_CONSTRAINT : ANVIL_FINISH_ERROR, why,
               true);
        return false;
    }
    if (r->t_first == 0) r->t_first = now;
    if (!r->ignore_eos && anvil_token_is_eog(e->m, t)) {
        finish(e, r, ANVIL_FINISH_STOP, NULL, true);
        return false;
    }
    if (r->constrained && guide_advance(&r->cq, t) != ANVIL_OK) {
        /* the token was chosen under the constraint: only memory can fail */
        finish(e, r, ANVIL_FINISH_ERROR, "out of memory (constraint state)", true);
        return false;
    }
    anvil_sampler_accept(r->smp, t);
    r->tokens[r->n_tokens++] = t;
    r->n_gen++;
    struct anvil_event ev = {.type = ANVIL_EVENT_TOKEN, .id = r->id, .token = t};
    if (r->top_logprobs > 0 && logits) {
        struct sample_logprob top[MAX_TOP_LOGPROBS];
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
    bool stopped = false;
    int32_t rel = release_text(e, r, piece, k, &stopped);
    ev.text = e->text;
    ev.text_len = rel;
    emit(r, &ev);
    if (stopped) {
        finish(e, r, ANVIL_FINISH_STOP, NULL, false);
        return false;
    }
    if (r->constrained && guide_complete(&r->cq)) {
        /* complete, and no byte may follow: only end of generation is
         * allowed, so end now instead of spending a step to draw it */
        finish(e, r, ANVIL_FINISH_STOP, NULL, true);
        return false;
    }
    if (r->n_gen >= r->max_tokens || r->n_tokens >= e->n_ctx) {
        finish(e, r, ANVIL_FINISH_LENGTH, NULL, true);
        return false;
    }
    return true;
}

/* Output rows o.. of a request that carried k proposals: draw row by row,
 * stop at the first disagreement, keep the KV of the accepted prefix.
 * Returns the output rows consumed (k + 1). */
static int32_t verify(struct anvil_engine *e, struct request *r, int32_t o, double now) {
    int32_t k = r->n_draft, pos0 = r->n_tokens - 1; /* the pending token's position */
    int32_t acc = 0;
    bool alive = true;
    for (int32_t i = 0; i <= k && alive; i++) {
        const float *logits = anvil_get_logits(e->ctx, o + i);
        const char *why;
        anvil_token t = draw(e, r, o + i, logits, i < k ? r->draft[i] : -1, &why);
        alive = take_token(e, r, t, logits, now, why);
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

static void after_decode(struct anvil_engine *e, int32_t n_rows, int32_t n_out) {
    /* advance caches (verify() corrects the speculating requests) */
    for (int32_t i = 0; i < n_rows; i++) e->b_req[i]->n_cached = e->b_pos[i] + 1;
    double now = time_now_s();
    for (int32_t o = 0; o < n_out;) {
        struct request *r = e->out_req[o];
        if (r->n_draft > 0) {
            o += verify(e, r, o, now);
            continue;
        }
        const float *logits = anvil_get_logits(e->ctx, o);
        const char *why;
        anvil_token t = draw(e, r, o, logits, -1, &why);
        take_token(e, r, t, logits, now, why);
        o++;
    }
}

static void publish_stats(struct anvil_engine *e) {
    struct ctx_kv_info kv;
    ctx_kv_info(e->ctx, &kv);
    pthread_mutex_lock(&e->mu);
    e->stats.running = e->n_running;
    e->stats.kv_blocks_total = kv.blocks_total;
    e->stats.kv_blocks_used = kv.blocks_used;
    e->stats.kv_block_tokens = kv.block_tokens;
    pthread_mutex_unlock(&e->mu);
}

anvil_status anvil_engine_step(struct anvil_engine *e, int32_t *n_active) {
    if (!e) return ANVIL_ERR_INVALID;
    double t_step = e->prof_on ? time_now_s() : 0.0;
    take_inbox(e);
    drop_cancelled(e);
    admit(e);
    if (e->dctx) draft_propose(e);
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
        if (st == ANVIL_ERR_KV_FULL && preempt_one(e)) continue;
        if (st != ANVIL_OK) {
            /* a batch the engine built was refused: fail its requests
             * rather than retrying forever */
            snprintf(e->errmsg, sizeof(e->errmsg), "%s", anvil_ctx_errmsg(e->ctx));
            for (int32_t i = 0; i < n; i++) {
                struct request *r = e->b_req[i];
                if (r && r->slot >= 0) {
                    for (int32_t j = i + 1; j < n; j++)
                        if (e->b_req[j] == r) e->b_req[j] = NULL;
                    finish(e, r, ANVIL_FINISH_ERROR, e->errmsg, false);
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
    publish_stats(e);
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

void anvil_engine_set_profile(struct anvil_engine *e, bool on) {
    if (!e) return;
    if (on && !e->prof_on) e->prof_step_s = e->prof_sample_s = 0.0, e->prof_n_step = 0;
    e->prof_on = on;
    anvil_ctx_set_profile(e->ctx, on);
}

void anvil_engine_get_profile(const struct anvil_engine *e, struct anvil_prof *out) {
    memset(out, 0, sizeof(*out));
    if (!e) return;
    anvil_ctx_get_profile(e->ctx, out); /* matmul, attention, norms, decode */
    out->s[ANVIL_PROF_SAMPLE] = e->prof_sample_s;
    double rest = e->prof_step_s - out->total_s - e->prof_sample_s;
    out->s[ANVIL_PROF_SCHED] = rest > 0.0 ? rest : 0.0;
    out->total_s = e->prof_step_s;
    out->n_calls = e->prof_n_step;
    out->n_clock_reads += 4 * e->prof_n_step; /* a step's own: start, end, sampling */
}

/* ---------------------------------------------------------------------- */
/* driver thread */

static void *driver_main(void *arg) {
    struct anvil_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->n_inbox == 0 && e->n_waiting == 0 && e->n_running == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        anvil_engine_step(e, NULL);
    }
    return NULL;
}

anvil_status anvil_engine_start(struct anvil_engine *e) {
    if (!e || e->thread_started) return ANVIL_ERR_INVALID;
    e->stop = false;
    if (pthread_create(&e->thread, NULL, driver_main, e) != 0) return ANVIL_ERR_NOMEM;
    e->thread_started = true;
    return ANVIL_OK;
}

void anvil_engine_stop(struct anvil_engine *e) {
    if (!e || !e->thread_started) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->thread_started = false;
    pthread_mutex_lock(&e->mu);
    e->stop = false;
    pthread_mutex_unlock(&e->mu);
}

void anvil_engine_get_stats(struct anvil_engine *e, struct anvil_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
}
