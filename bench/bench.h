/*
 * bench.h - the benchmarks: `anvil bench` (linked into bin/anvil) and the
 * micro-benchmarks of bin/anvil-microbench (never in bin/anvil).
 *
 * anvil bench:
 *   bench_main.c     the command: options, dispatch, single stream and
 *                    scenario runs, the scenario chart
 *   bench_model.c    single stream pp/tg and the serving scenarios
 *   bench_batched.c  batched decode, llama-batched-bench style
 *   bench_spec.c     speculative decoding on shipped prompt sets
 *   bench_constrained.c  structured output: constrained against free
 *                    decode, schema compile, the vocabulary index
 * anvil-microbench (microbench.c dispatches):
 *   bench_kernels.c  quantized matmul micro-benchmark
 *   bench_attn.c     decode attention micro-benchmark
 *   bench_constrain.c  the constraint engine's costs
 * both:
 *   bench_util.c     clocks, statistics, JSON lines, read bandwidth
 *   bench_png.c      --png: records to bench/plot.py (matplotlib), which
 *                    is compiled into both binaries
 *
 * Benchmarks measure and never gate tests. Each sub-benchmark takes argv
 * as given to the command (argv[0] is "bench" or the binary's name; its
 * own flag, --kernels say, may be among the rest) and returns an exit
 * status: 0, 1 on a runtime failure (including a kernel that disagrees
 * with the reference: it gets no number), 2 on bad usage or input.
 */
#ifndef ANVIL_BENCH_H
#define ANVIL_BENCH_H

#include <stdbool.h>
#include <stdio.h>

#include "anvil.h"

/* `anvil bench ...`: argv[0] is "bench". */
int bench_main(int argc, char **argv);

/* `anvil-microbench --kernels ...` (bench_kernels.c). */
int bench_kernels(int argc, char **argv);
/* `anvil-microbench --attention ...` (bench_attn.c); its usage() lists the options. */
int bench_attention(int argc, char **argv);
/* `anvil-microbench --constrain ...` (bench_constrain.c): argv[0] is
 * "--constrain", the options follow. */
int bench_constrain(int argc, char **argv);
/* `anvil bench -m MODEL --batched ...` (bench_batched.c). */
int bench_batched(int argc, char **argv);
/* `anvil bench -m MODEL --spec ngram|draft ...` (bench_spec.c). */
int bench_spec(int argc, char **argv);
/* `anvil bench -m MODEL --constrained ...` (bench_constrained.c). */
int bench_constrained(int argc, char **argv);
/* `anvil bench --toolfmt ...` (bench_toolfmt.c): parse time per token of
 * each tool-call format. */
int bench_toolfmt(int argc, char **argv);

/* ---------------------------------------------------------------------- */
/* bench_model.c */

/* pp<n_prompt> and tg<n_gen> on one stream, mean +- sd over reps after a
 * warmup; prints a table (header included) or JSON lines. kernels NULL is
 * the automatic choice. With profile, also the time by category and the
 * throughput with the counters on (bench_model.c). Returns 0 or an exit
 * status (error printed). */
int bench_single_stream(const char *model, const char *kernels, int n_prompt, int n_gen,
                        int n_threads, int reps, bool json, bool profile);

/* One serving scenario from SCENARIOS.md through the engine; prints one
 * table row or one JSON line. When plot is not NULL, the record also goes
 * there, followed by a "scenario_samples" record with every TTFT and
 * inter-token latency (the chart's distributions). When prof is not NULL
 * the engine is profiled and *prof gets the counters (also in the JSON
 * record). Returns 0 or an exit status (error printed). */
int bench_run_scenario(const char *model, const char *kernels, int n_threads, const char *name,
                       bool json, FILE *plot, struct anvil_prof *prof);
/* The --profile table of scenarios run with a prof (names[i], prof[i]). */
void bench_print_scenario_profiles(const char *const *names, const struct anvil_prof *prof, int n);
int bench_scenario_count(void);
const char *bench_scenario_name(int i); /* 0 <= i < bench_scenario_count() */

#endif
