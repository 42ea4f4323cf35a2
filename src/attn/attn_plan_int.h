/*
 * attn_plan_int.h - the plan's private state, shared by attn_plan.c (the
 * plan and the run, for every kind) and another attention kind's entry
 * point (hp1/hp1_plan.c). Not for use outside src/attn.
 */
#ifndef ANVIL_ATTN_PLAN_INT_H
#define ANVIL_ATTN_PLAN_INT_H

#include "attn/attn_plan.h"

/* One entry of an attention plan. */
struct kv_attn_ent {
    struct kv_attn_seq s;
    const int32_t *blocks;
    int32_t n_kv;       /* keys seen by the last row: pos + n_tokens */
    int32_t units;      /* work items per kv head */
    int32_t rows;       /* query rows per prefill tile (prefill only) */
    int32_t c_lo;       /* decode: first chunk holding a key of its window */
    int32_t n_chunks;   /* decode: chunks [c_lo, c_lo + n_chunks) */
    int64_t part_off;   /* split decode: first record (in records) */
    uint8_t decode;     /* n_tokens == 1 */
};

enum kv_attn_call { KV_ATTN_CALL_ATTN, KV_ATTN_CALL_PARTIAL, KV_ATTN_CALL_REDUCE };

/* Runs task t of kv head h with another kind's kernels (job->kind_call). */
typedef void (*kv_attn_kind_fn)(const struct kv_attn_job *job, enum kv_attn_call which,
                                int32_t h, const struct kn_attn_task *t);

#define KV_ATTN_KIND_STATE 64 /* bytes of job->kind_state */

struct kv_attn_job {
    const struct kv_cache *kv;
    const struct kn_attn_ops *ops;   /* softmax kernels, or NULL for another kind */
    kv_attn_kind_fn kind_call;       /* another kind (HP1), or NULL for the softmax */
    _Alignas(16) unsigned char kind_state[KV_ATTN_KIND_STATE]; /* kind_call's
                                      * kernels and layer parameters */
    size_t rec;                      /* floats of one split-K record */
    const uint8_t *base;
    size_t q_stride, out_stride;
    float scale;
    int32_t window;     /* the cache's sliding window, 0 = none */
    int32_t group;
    int n_threads;
    bool split;         /* decode entries are split into chunk items */
    int32_t n_ent;
    struct kv_attn_ent *ent;  /* (n_seq_max) */
    int32_t *item_off;        /* (n_seq_max + 1): first item of each entry */
    int32_t *th_start;        /* (n_threads_max + 1): first item of each thread */
    int32_t *red;             /* (n_seq_max): decode entries, for the reduction */
    int32_t n_red;            /* decode entries (split only) */
    int32_t *nkv;             /* (n_seq_max): decode contexts, for the policy */
    uint8_t *mark;            /* (n_seq_max): duplicate check of one prepare */
    float *part;              /* split-K records */
    size_t part_recs;         /* capacity of part, in records */
    void *mem;                /* the one allocation (the job at its start) */
    const float *sinks;       /* (n_head) sink logits of this layer, or NULL
                               * (kv_attn_job_set_sinks after the prepare) */
};

/* The cache's plan (made by kv_attn_plan_init if it has none yet), or
 * NULL with *st set when it cannot be made. */
struct kv_attn_job *kv_attn_job_of(struct kv_cache *kv, anvil_status *st);

/* The plan of any kind; the caller has set job->ops or job->kind_call
 * (with kind_state) and job->rec, and checked them. */
anvil_status kv_attn_plan(struct kv_cache *kv, struct kv_attn_job *job, int32_t layer,
                          const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                          size_t out_stride, int n_threads, enum kv_split split, float scale,
                          struct kv_attn_job **out);

#endif
