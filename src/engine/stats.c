/*
 * stats.c - the engine's counters and profile: the KV pool's state
 * published after each step, anvil_engine_get_stats (under mu), and the
 * step / sampling profile added to the model ctx's own.
 */
#include <pthread.h>
#include <string.h>

#include "engine/engine_int.h"

void engine_publish_stats(struct anvil_engine *e) {
    struct ctx_kv_info kv;
    ctx_kv_info(e->ctx, &kv);
    pthread_mutex_lock(&e->mu);
    e->stats.running = e->n_running;
    e->stats.kv_blocks_total = kv.blocks_total;
    e->stats.kv_blocks_used = kv.blocks_used;
    e->stats.kv_block_tokens = kv.block_tokens;
    pthread_mutex_unlock(&e->mu);
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

void anvil_engine_get_stats(struct anvil_engine *e, struct anvil_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
}
