/*
 * attn_plan.h - attention over the paged KV cache, one layer at a time:
 * plan a batch (decode rows and prefill chunks of many sequences) into
 * kernel tasks (attn/attn.h), spread them over threads by estimated cost
 * (attn/attn_policy.h) and run them, split-K decode as a chunk pass, a
 * barrier and a reduction. HP1 layers use the same plan
 * (attn/hp1/hp1_plan.h).
 *
 * Use by the forward pass, per layer, after kv_write of the new tokens:
 *     kv_attn_prepare(...) then kv_attn_run(...) (or kv_attn_work on
 *     every thread of a pool)
 * Numbers never depend on the plan: only on q and the keys and values a
 * row sees (attn.h).
 */
#ifndef ANVIL_ATTN_PLAN_H
#define ANVIL_ATTN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"
#include "attn/attn.h"
#include "kv/kv_cache.h"

struct pool;

/* One sequence's query rows in an attention call. Row i is at position
 * pos + i and attends to positions [0, pos + i], whose K/V must be
 * written (committed or reserved). n_tokens == 1 is a decode row. */
struct kv_attn_seq {
    int32_t seq;
    int32_t pos;
    int32_t n_tokens;
    const float *q; /* (n_tokens, n_head, head_dim): row i at q + i*q_stride */
    float *out;     /* (n_tokens, n_head, head_dim): row i at out + i*out_stride */
};

enum kv_split {
    KV_SPLIT_AUTO = 0, /* the policy decides (attn/attn_policy.h) */
    KV_SPLIT_OFF,      /* one thread per (sequence, kv head) decode task */
    KV_SPLIT_ON,       /* decode chunks spread over threads, then reduced
                        * (unless the chunk records would not fit the
                        * scratch: 64 per thread, at least 8192) */
};

struct kv_attn_job;

/* Give the cache its plan: the entries, the thread partition and the
 * split-K scratch (one record per (sequence, kv head, 256-key chunk) at
 * n_ctx, capped at max(8192, 64 * n_threads) records: splitting pays only
 * with few tasks, and a plan that would need more records runs unsplit,
 * with the same numbers), in one allocation hung on the cache
 * (kv_set_ext) and freed by kv_free. ANVIL_ERR_UNSUPPORTED when the GQA
 * group exceeds KN_ATTN_MAXQ, ANVIL_ERR_INVALID on a size overflow,
 * ANVIL_ERR_NOMEM (message in err). A cache that already has its plan is
 * left alone (ANVIL_OK). kv_attn_prepare calls it when the caller has
 * not, so that tests and benchmarks need not; the model calls it right
 * after kv_init so that no decode step allocates. */
anvil_status kv_attn_plan_init(struct kv_cache *kv, char *err, size_t err_cap);

/* Plan one layer's attention for a batch: at most one entry per sequence,
 * at most n_seq_max entries. scale multiplies q.k (1/sqrt(head_dim) for
 * most models). A windowed cache's window applies to every row; its ops
 * table must honour windows (kn_attn_ops.window), else ANVIL_ERR_INVALID.
 * The plan is held by the cache (one at a time, kv_attn_plan_init) and
 * stays valid until the next prepare. n_threads (<= the kv_params
 * n_threads) is how many threads will call kv_attn_work.
 * The split choice never changes the numbers, only their schedule. */
anvil_status kv_attn_prepare(struct kv_cache *kv, const struct kn_attn_ops *ops, int32_t layer,
                             const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                             size_t out_stride, int n_threads, enum kv_split split, float scale,
                             struct kv_attn_job **out);
/* Thread ith of nth (nth == the planned n_threads) does its share. When
 * the plan splits decode rows it calls pool_barrier(pool) once between
 * the chunk pass and the reduction, so every thread of the pool must call
 * it (pool may be NULL when nth == 1). Outputs are complete once every
 * thread has returned (the caller's barrier or pool_run's end). */
void kv_attn_work(const struct kv_attn_job *job, struct pool *pool, int ith, int nth);
/* Run the whole job on a pool of the planned size (NULL = the calling
 * thread only, for a plan of 1 thread). */
void kv_attn_run(const struct kv_attn_job *job, struct pool *pool);
/* Attention sinks for the planned layer (attn.h): sinks holds n_head
 * logits (query head i's at sinks[i]) and must outlive the run; NULL =
 * none. Each prepare resets them to none, so call it after the prepare.
 * Only the softmax kernels read them. */
void kv_attn_job_set_sinks(struct kv_attn_job *job, const float *sinks);
/* Whether the job splits decode rows (for benchmarks and logs). */
bool kv_attn_job_split(const struct kv_attn_job *job);

#endif
