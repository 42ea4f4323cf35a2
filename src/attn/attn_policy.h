/*
 * attn_policy.h - the attention scheduling policy (attn_policy.c): task
 * costs in key*vector units (one key against one query vector at head_dim
 * 64 is 1) and the split-K decision.
 */
#ifndef ANVIL_KN_ATTN_POLICY_H
#define ANVIL_KN_ATTN_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* Cost of one decode task (one kv head of one row) over `keys` keys. */
double kn_attn_cost_decode(int64_t keys, int32_t group, int32_t head_dim);
/* Cost of one prefill tile: rows [r0, r1) of a run starting at pos, for
 * one kv head, with a sliding window (0 = none). */
double kn_attn_cost_prefill(int32_t pos, int32_t r0, int32_t r1, int32_t group, int32_t head_dim,
                            int32_t window);

/* Split decode rows into chunks when that shortens the step: given the
 * batch's decode rows (n_kv[i] keys seen by row i), the cost of everything
 * else in the call (prefill tiles, in cost units), and the threads. */
bool kn_attn_split_policy(int32_t n_decode, const int32_t *n_kv, int32_t n_head_kv, int32_t group,
                          int32_t head_dim, double other_cost, int n_threads);

#endif
