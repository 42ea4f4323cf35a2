/*
 * metrics.c - server metrics for GET /metrics, in the Prometheus text
 * exposition format 0.0.4 (https://prometheus.io/docs/instrumenting/
 * exposition_formats/).
 *
 * Counters and histograms are atomics: HTTP threads count responses, the
 * engine's driver thread observes TTFT and inter-token latency from its
 * event callback, and nobody takes a lock. A scrape therefore sees a
 * histogram whose buckets may be one observation ahead of its _count;
 * Prometheus tolerates that. Engine gauges (queue, running, KV blocks) and
 * token counters come from anvil_engine_get_stats at scrape time.
 */
#include <string.h>

#include "server/srv_int.h"

static const int codes[SRV_N_CODES] = {200, 400, 401, 404, 405, 413, 429, 431, 500, 503, 0};

static int code_index(int status) {
    for (int i = 0; i < SRV_N_CODES - 1; i++)
        if (codes[i] == status) return i;
    return SRV_N_CODES - 1; /* "other" */
}

static void hist_init(struct srv_hist *h, const double *bounds, int n) {
    memset(h, 0, sizeof(*h));
    h->n_bounds = n;
    for (int i = 0; i < n; i++) h->bounds[i] = bounds[i];
}

void srv_metrics_init(struct srv_metrics *m) {
    static const double ttft[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    static const double itl[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
    memset(m, 0, sizeof(*m));
    hist_init(&m->ttft, ttft, (int)(sizeof(ttft) / sizeof(ttft[0])));
    hist_init(&m->itl, itl, (int)(sizeof(itl) / sizeof(itl[0])));
}

void srv_metrics_status(struct srv_metrics *m, int status) {
    atomic_fetch_add(&m->by_code[code_index(status)], 1);
}

void srv_hist_observe(struct srv_hist *h, double s) {
    int i = 0;
    while (i < h->n_bounds && s > h->bounds[i]) i++;
    atomic_fetch_add(&h->counts[i], 1);
    atomic_fetch_add(&h->sum_ns, (uint64_t)(s > 0 ? s * 1e9 : 0));
    atomic_fetch_add(&h->count, 1);
}

static void fmt_hist(struct sbuf *b, const char *name, const char *help, struct srv_hist *h) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i <= h->n_bounds; i++) {
        cum += atomic_load(&h->counts[i]);
        if (i < h->n_bounds)
            sb_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                      (unsigned long long)cum);
        else
            sb_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    }
    sb_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, (double)atomic_load(&h->sum_ns) * 1e-9,
              name, (unsigned long long)cum);
}

static void gauge(struct sbuf *b, const char *name, const char *help, const char *type,
                  long long v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %lld\n", name, help, name, type, name, v);
}

static void gauge_f(struct sbuf *b, const char *name, const char *help, double v) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.6f\n", name, help, name, name, v);
}

void srv_fmt_metrics(struct sbuf *b, struct srv_metrics *m, const struct anvil_engine_stats *st) {
    sb_puts(b, "# HELP anvil_http_requests_total HTTP responses sent, by status code.\n"
               "# TYPE anvil_http_requests_total counter\n");
    for (int i = 0; i < SRV_N_CODES; i++) {
        uint64_t v = atomic_load(&m->by_code[i]);
        if (i == SRV_N_CODES - 1)
            sb_printf(b, "anvil_http_requests_total{code=\"other\"} %llu\n",
                      (unsigned long long)v);
        else
            sb_printf(b, "anvil_http_requests_total{code=\"%d\"} %llu\n", codes[i],
                      (unsigned long long)v);
    }
    sb_puts(b, "# HELP anvil_requests_finished_total Generation requests finished, by reason.\n"
               "# TYPE anvil_requests_finished_total counter\n");
    static const char *const reasons[SRV_N_FINISH] = {"none",      "length", "stop",
                                                      "cancelled", "error",  "constraint"};
    for (int i = 1; i < SRV_N_FINISH; i++)
        sb_printf(b, "anvil_requests_finished_total{reason=\"%s\"} %llu\n", reasons[i],
                  (unsigned long long)atomic_load(&m->finished[i]));
    gauge(b, "anvil_requests_in_flight", "Generation requests submitted and not finished.",
          "gauge", (long long)atomic_load(&m->in_flight));
    gauge(b, "anvil_http_connections_open", "TCP connections open.", "gauge",
          (long long)atomic_load(&m->conns_open));
    gauge(b, "anvil_http_connections_total", "TCP connections accepted.", "counter",
          (long long)atomic_load(&m->conns_total));
    gauge(b, "anvil_http_connections_refused_total",
          "Connections over --max-conn, answered 503 and closed.", "counter",
          (long long)atomic_load(&m->conns_refused));
    gauge(b, "anvil_http_connections_head_timeout_total",
          "Connections closed for not sending a request head within --header-timeout.",
          "counter", (long long)atomic_load(&m->conns_head_timeout));
    gauge(b, "anvil_http_clients_gone_total",
          "Requests waiting for the engine whose client disconnected.", "counter",
          (long long)atomic_load(&m->client_gone));
    gauge(b, "anvil_prompt_tokens_total", "Prompt tokens processed by the engine.", "counter",
          (long long)st->n_prompt_tokens);
    gauge(b, "anvil_generation_tokens_total", "Tokens generated by the engine.", "counter",
          (long long)st->n_gen_tokens);
    gauge(b, "anvil_prefix_cache_tokens_total",
          "Prompt positions taken from the prefix cache when requests were admitted.", "counter",
          (long long)st->n_prefix_tokens);
    gauge(b, "anvil_queue_depth", "Requests waiting for a sequence slot.", "gauge", st->queued);
    gauge(b, "anvil_running_sequences", "Sequences being decoded.", "gauge", st->running);
    gauge(b, "anvil_kv_blocks_used", "KV cache blocks in use.", "gauge", st->kv_blocks_used);
    gauge(b, "anvil_kv_blocks_free", "KV cache blocks free.", "gauge",
          (long long)st->kv_blocks_total - st->kv_blocks_used);
    gauge(b, "anvil_kv_blocks_total", "KV cache blocks in the pool.", "gauge",
          st->kv_blocks_total);
    gauge(b, "anvil_kv_block_tokens", "Tokens per KV cache block.", "gauge",
          st->kv_block_tokens);
    gauge(b, "anvil_preemptions_total", "Sequences preempted to free KV blocks.", "counter",
          (long long)st->n_preemptions);
    gauge(b, "anvil_spec_verifications_total",
          "Decode rows that carried speculative proposals (each verified in one pass).", "counter",
          (long long)st->n_spec_verify);
    gauge(b, "anvil_spec_proposed_tokens_total", "Tokens proposed by speculation.", "counter",
          (long long)st->n_spec_proposed);
    gauge(b, "anvil_spec_accepted_tokens_total", "Proposed tokens the model accepted.", "counter",
          (long long)st->n_spec_accepted);
    gauge(b, "anvil_spec_tokens_total",
          "Tokens produced by verifications (accepted proposals plus one each).", "counter",
          (long long)st->n_spec_tokens);
    gauge_f(b, "anvil_spec_acceptance_ratio", "Accepted / proposed tokens since start.",
            st->n_spec_proposed ? (double)st->n_spec_accepted / (double)st->n_spec_proposed : 0.0);
    gauge_f(b, "anvil_spec_tokens_per_verification", "Tokens per verification since start.",
            st->n_spec_verify ? (double)st->n_spec_tokens / (double)st->n_spec_verify : 0.0);
    gauge(b, "anvil_engine_steps_total", "Engine scheduling steps.", "counter",
          (long long)st->n_steps);
    fmt_hist(b, "anvil_time_to_first_token_seconds",
             "Time from submit to the first generated token.", &m->ttft);
    fmt_hist(b, "anvil_inter_token_latency_seconds",
             "Time between consecutive generated tokens of a request.", &m->itl);
}
