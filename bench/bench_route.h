/*
 * bench_route.h - routing statistics of a mixture of experts beside the
 * speed (`anvil bench --profile`): the counters of anvil.h's
 * anvil_ctx_get_route_stats summed over the profiled repetitions, and
 * what the table and the JSON show of them, per layer and overall.
 *
 * Per step (one decode of a layer): rows per expert (min / mean / max over
 * the experts of the rows it got per step, on average over the steps),
 * the imbalance (max / mean), the share of experts no row chose in the
 * whole run, the experts a step touched, the rows per touched expert, and
 * the share of rows in (step, expert) groups of >= 16 rows (the size at
 * which an expert's matmul runs the packed prefill kernels, issue 35).
 * "Overall" pools the (layer, expert) cells of every MoE layer.
 */
#ifndef ANVIL_BENCH_ROUTE_H
#define ANVIL_BENCH_ROUTE_H

#include <stdint.h>

#include "anvil.h"
#include "bench_util.h"

struct bench_route {
    int n_layer, n_expert;          /* n_expert 0: a dense model, nothing to show */
    struct anvil_route_stats *st;   /* (n_layer) summed over the added profiles */
    uint64_t *cnt;                  /* (n_layer, n_expert) rows per expert, summed */
};

/* The statistics' source: a ctx (anvil_ctx_get_route_stats) or an engine's. */
typedef int32_t (*bench_route_get_fn)(const void *h, int32_t layer, struct anvil_route_stats *out,
                                      uint64_t *counts, int32_t cap);
int32_t bench_route_get_ctx(const void *ctx, int32_t layer, struct anvil_route_stats *out,
                            uint64_t *counts, int32_t cap);

/* Sized for model m (zeroed; n_expert 0 for a dense model). Returns false
 * when out of memory. Free with bench_route_free (also after a failure). */
bool bench_route_init(struct bench_route *r, const struct anvil_model *m, const void *h,
                      bench_route_get_fn get);
void bench_route_free(struct bench_route *r);
/* Add the source's counters (read them before the profile is reset). */
void bench_route_add(struct bench_route *r, const void *h, bench_route_get_fn get);

/* route_* fields of a JSON row (nothing for a dense model): overall
 * numbers, per-layer lists and the raw counts (n_layer lists of n_expert). */
void bench_route_json(struct bench_json *j, const struct bench_route *r);
/* The routing table of the tests run (nothing when none is a MoE). */
void bench_route_table(const char *const *tests, const struct bench_route *r, int n);

#endif
