/*
 * attn_policy.c - how attention work is scheduled: the cost model that
 * partitions a layer's attention tasks over threads, and the split-K
 * policy (whether decode rows are cut into chunks spread over threads).
 * Used by the attention driver (attn_plan.c); the numbers never depend
 * on these choices (attn.h), only the time does.
 *
 * Cost model (key*vector units: one key against one query vector at
 * head_dim 64 is 1): a kv task over K keys costs K * (COST_LOAD + group);
 * a kernel call adds COST_CALL; a split adds COST_SPLIT once (barrier and
 * reduction). One unit is about 6.5 ns of one core with COST_LOAD under
 * one unit per key, and a barrier plus the reduction of a batch-1 step
 * about 300 units: the constants come from `anvil bench --attention
 * --cpu-time --threads 1` over the smollm2, llama3-8b and mqa shapes
 * (commit 92c4b5d has the per-shape timings).
 *
 * Split-K. With one task per kv head, a batch-1 step already has
 * n_head_kv tasks; splitting helps by the imbalance of n_head_kv over the
 * threads (at most 4/3 for 3 heads on 2 threads), and the full factor
 * only when there are fewer tasks than threads. So the policy splits
 * batch-1 steps of few kv heads (mqa, smollm2) and keeps many-head
 * shapes (llama3-8b) and batches of 4 or more unsplit, which is what the
 * split-K timings at 2 threads show (CPU time: commit dc72612; wall clock:
 * commit df20a36).
 */
#include <stdbool.h>
#include <stdint.h>

#include "attn/attn.h"
#include "attn/attn_policy.h"

#define COST_LOAD 1.0    /* per key: read and convert K and V once per task */
#define COST_CALL 32.0   /* per kernel call: setup, state init, record write */
#define COST_SPLIT 300.0 /* per split call: the barrier and the reduction */
#define MAX_SIM_THREADS 256

/* ---------------------------------------------------------------------- */
/* policy */

static double task_cost(int64_t keys, int32_t group, double hd_f) {
    return (double)keys * (COST_LOAD + group) * hd_f + COST_CALL;
}

double kn_attn_cost_decode(int64_t keys, int32_t group, int32_t head_dim) {
    return task_cost(keys, group, head_dim / 64.0);
}

double kn_attn_cost_prefill(int32_t pos, int32_t r0, int32_t r1, int32_t group, int32_t head_dim,
                            int32_t window) {
    double hd_f = head_dim / 64.0;
    /* keys read once per tile; q.k per query vector over its (causal,
     * windowed) keys */
    double keys = (double)pos + r1, per_row = pos + 0.5 * (r0 + r1 + 1);
    if (window > 0) {
        if (keys > window + (r1 - r0)) keys = window + (r1 - r0);
        if (per_row > window) per_row = window;
    }
    double qk = (double)(r1 - r0) * group * per_row;
    return (keys * COST_LOAD + qk) * hd_f + COST_CALL;
}

/* Contiguous partition of decode work (plus `other`, taken as evenly
 * divisible) over nth threads by cost midpoints; returns the makespan. */
static double sim_makespan(int32_t n_decode, const int32_t *n_kv, int32_t n_head_kv,
                           int32_t group, double hd_f, double other, int nth, bool split) {
    double load[MAX_SIM_THREADS] = {0};
    double w = 0.0;
    for (int32_t i = 0; i < n_decode; i++) {
        if (split) {
            int32_t nc = kn_attn_n_chunks(n_kv[i]);
            w += n_head_kv * ((double)n_kv[i] * (COST_LOAD + group) * hd_f + nc * COST_CALL);
        } else {
            w += n_head_kv * task_cost(n_kv[i], group, hd_f);
        }
    }
    if (w <= 0.0) return other / nth;
    double acc = 0.0;
    for (int32_t i = 0; i < n_decode; i++) {
        int32_t nc = split ? kn_attn_n_chunks(n_kv[i]) : 1;
        for (int32_t h = 0; h < n_head_kv; h++) {
            for (int32_t c = 0; c < nc; c++) {
                int32_t keys = split ? (c + 1 < nc ? KN_ATTN_CHUNK : n_kv[i] - c * KN_ATTN_CHUNK)
                                     : n_kv[i];
                double cost = task_cost(keys, group, hd_f);
                int t = (int)((acc + 0.5 * cost) * nth / w);
                if (t >= nth) t = nth - 1;
                load[t] += cost;
                acc += cost;
            }
        }
    }
    double mx = 0.0;
    for (int t = 0; t < nth; t++) mx = load[t] > mx ? load[t] : mx;
    return mx + other / nth + (split ? COST_SPLIT : 0.0);
}

/* Split decode rows into chunks when that shortens the step. Without a
 * split, a (sequence, kv head) task is the unit: with few tasks (batch 1:
 * n_head_kv tasks) threads idle while one finishes a long context. With a
 * split, chunks of 256 keys balance the threads at the price of a barrier,
 * a reduction and one partial record per chunk. Both schedules are costed
 * with the model above and the cheaper one wins; at large batch the tasks
 * already balance and the split's fixed cost decides against it. */
bool kn_attn_split_policy(int32_t n_decode, const int32_t *n_kv, int32_t n_head_kv, int32_t group,
                     int32_t head_dim, double other_cost, int n_threads) {
    if (n_threads <= 1 || n_decode <= 0) return false;
    if (n_threads > MAX_SIM_THREADS) n_threads = MAX_SIM_THREADS;
    double hd_f = head_dim / 64.0;
    double m0 = sim_makespan(n_decode, n_kv, n_head_kv, group, hd_f, other_cost, n_threads, false);
    double m1 = sim_makespan(n_decode, n_kv, n_head_kv, group, hd_f, other_cost, n_threads, true);
    return m1 < m0;
}

