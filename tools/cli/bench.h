/*
 * bench.h - benchmark entry points behind `anvil bench`.
 */
#ifndef ANVIL_CLI_BENCH_H
#define ANVIL_CLI_BENCH_H

#include <stdbool.h>

#include "anvil.h"

struct bench_scenario_result {
    const char *name;
    int n_req, in_tokens, out_tokens;
    double wall_s, total_tok_s, prefill_tok_s, decode_tok_s;
    double ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms, peak_rss_mb;
    int kv_blocks_used, preemptions;
    double *ttft_ms; /* (n_ttft) malloc'd; caller frees */
    int n_ttft;
    double *itl_ms;  /* (n_itl) malloc'd; caller frees */
    int n_itl;
};

/* pp<n_prompt> and tg<n_gen> on one stream; prints a table or JSON lines. */
int bench_single_stream(const char *model, const char *kernels, int n_prompt, int n_gen,
                        int n_threads, int reps, bool json);

/* One serving scenario from SCENARIOS.md through the engine. res may be
 * NULL. Returns 0 or an exit status. */
int bench_run_scenario(const char *model, const char *kernels, int n_threads, const char *name,
                       bool json, struct bench_scenario_result *res);
int bench_scenario_count(void);
const char *bench_scenario_name(int i);

/* `anvil bench --batched ...` (bench_batched.c); argv as given to cmd_bench. */
int bench_batched(int argc, char **argv);

const char *bench_commit(void);
double bench_peak_rss_mb(void);
/* Sorts x in place. */
double bench_percentile(double *x, int n, double q);

#endif
