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
 * The files of this room and what each holds: engine_int.h.
 *
 * Locking: `mu` guards the inbox, the live list (for cancel), the stats
 * and the wake-up condition. Everything else belongs to the driver thread.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_int.h"

struct anvil_engine_params anvil_engine_default_params(void) {
    struct anvil_engine_params p = {0};
    return p;
}

const char *anvil_engine_errmsg(const struct anvil_engine *e) { return e->errmsg; }

int32_t anvil_engine_n_ctx(const struct anvil_engine *e) { return e->n_ctx; }

int64_t anvil_engine_seq_capacity(const struct anvil_engine *e) { return e->pool_tokens; }

/* ---------------------------------------------------------------------- */
/* init / free */

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
    if (!anvil_model_generates(m)) {
        char arch[64];
        anvil_model_meta_str(m, "general.architecture", arch, sizeof(arch));
        errmsg_set(err, err_cap, "engine: the model (%s: an encoder, or a decoder attending "
                   "both ways) embeds, it does not generate (anvil embed; anvil serve "
                   "--embedding-model)", arch[0] ? arch : "?");
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (!spec_params_ok(p->spec, p->spec_k)) {
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
    if (!e->p.max_running) e->p.max_running = ANVIL_ENGINE_MAX_RUNNING_DEFAULT;
    if (!e->p.max_queue) e->p.max_queue = ANVIL_ENGINE_MAX_QUEUE_DEFAULT;
    if (!e->p.step_tokens) e->p.step_tokens = ANVIL_ENGINE_STEP_TOKENS_DEFAULT;
    if (!e->p.prefill_chunk) e->p.prefill_chunk = ANVIL_ENGINE_PREFILL_CHUNK_DEFAULT;
    if (e->p.step_tokens < e->p.max_running) e->p.step_tokens = e->p.max_running;
    if (!e->p.spec_k) e->p.spec_k = ANVIL_SPEC_K_DEFAULT;
    e->row_cost0 = ctx_model_row_cost(m, 0);
    /* output rows: one per running request, plus proposals when anything
     * may speculate (a request can ask even if the engine default is off) */
    int64_t n_out = (int64_t)e->p.max_running * (1 + e->p.spec_k);
    e->n_out_max = (int32_t)(n_out < e->p.step_tokens ? n_out : e->p.step_tokens);
    if (e->n_out_max < e->p.max_running) e->n_out_max = e->p.max_running;
    if (!e->p.kv_type) e->p.kv_type = ANVIL_TYPE_F16;
    int32_t train = anvil_model_n_ctx_train(m);
    if (!e->p.n_ctx)
        e->p.n_ctx = train < ANVIL_ENGINE_N_CTX_DEFAULT_MAX ? train : ANVIL_ENGINE_N_CTX_DEFAULT_MAX;
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
    if (!(e->b_token = engine_alloc_n(nb, sizeof(anvil_token)))) goto fail;
    if (!(e->b_pos = engine_alloc_n(nb, sizeof(int32_t)))) goto fail;
    if (!(e->b_seq = engine_alloc_n(nb, sizeof(int32_t)))) goto fail;
    if (!(e->b_logits = engine_alloc_n(nb, sizeof(int8_t)))) goto fail;
    if (!(e->b_req = engine_alloc_n(nb, sizeof(*e->b_req)))) goto fail;
    if (!(e->out_req = engine_alloc_n((size_t)e->n_out_max, sizeof(*e->out_req)))) goto fail;
    if (!(e->order = engine_alloc_n(nr, sizeof(*e->order)))) goto fail;
    if (e->dctx) {
        if (!(e->d_tok = engine_alloc_n(nb, sizeof(anvil_token)))) goto fail;
        if (!(e->d_pos = engine_alloc_n(nb, sizeof(int32_t)))) goto fail;
        if (!(e->d_seq = engine_alloc_n(nb, sizeof(int32_t)))) goto fail;
        if (!(e->d_out = engine_alloc_n(nb, sizeof(int8_t)))) goto fail;
        if (!(e->d_take = engine_alloc_n(nr, sizeof(int32_t)))) goto fail;
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
            if (e->running[s]) engine_finish(e, e->running[s], ANVIL_FINISH_CANCELLED, NULL, false);
    }
    while (e->wait_head) {
        struct request *r = e->wait_head;
        e->wait_head = r->next;
        engine_finish(e, r, ANVIL_FINISH_CANCELLED, NULL, false);
    }
    while (e->inbox_head) {
        struct request *r = e->inbox_head;
        e->inbox_head = r->next;
        engine_finish(e, r, ANVIL_FINISH_CANCELLED, NULL, false);
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
/* driver thread */

/* While idle, the driver makes the KV pool's next ENGINE_PREFAULT_AHEAD
 * positions resident (ctx_kv_prefault, a layer at a time, looking at the
 * queue between layers), so that a new prompt does not wait for page
 * faults: the pool is reserved, not touched, and fresh huge pages are
 * what the first request to reach them would otherwise pay for (on a VM
 * whose host backs guest memory lazily, hundreds of ms on a 1,000-token
 * prompt). The resident memory this adds is bounded by that window. */
#define ENGINE_PREFAULT_AHEAD 2048

static void *driver_main(void *arg) {
    struct anvil_engine *e = arg;
    bool prefault = true; /* a step may have handed out blocks */
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->n_inbox == 0 && e->n_waiting == 0 && e->n_running == 0) {
            if (prefault) {
                pthread_mutex_unlock(&e->mu);
                prefault = ctx_kv_prefault(e->ctx, ENGINE_PREFAULT_AHEAD) ||
                           (e->dctx && ctx_kv_prefault(e->dctx, ENGINE_PREFAULT_AHEAD));
                pthread_mutex_lock(&e->mu);
                continue;
            }
            pthread_cond_wait(&e->cv, &e->mu);
        }
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        anvil_engine_step(e, NULL);
        prefault = true;
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
