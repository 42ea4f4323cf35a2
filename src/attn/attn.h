/*
 * attn.h - attention kernels over the paged KV cache (src/kv): one kernel
 * shape serves batched decode, split-K decode (Flash-Decoding) and causal
 * prefill. Kept apart from ops.h; the table is picked by kn_attn_select()
 * from the name of the kn_ops family in use.
 *
 * KV layout: the tiles of kv/kv_layout.h (K transposed, V row-major,
 * F16 or Q8_0); this header adds the algorithm over them.
 *
 * Algorithm (the same in every variant, so that results are batch
 * invariant). Query row at position p attends to keys [0, p]. Keys are
 * cut into chunks of KN_ATTN_CHUNK at fixed positions [c*CHUNK,
 * (c+1)*CHUNK), chunks into steps of KN_ATTN_SUB keys. Inside a chunk an
 * online softmax runs step by step from an empty state (m = -inf, l = 0,
 * acc = 0); each chunk yields a partial (m, l, acc). The partials are
 * folded left to right, chunk 0 first:
 *     m = max(m1, m2); l = l1*e^(m1-m) + l2*e^(m2-m); acc likewise;
 * and out = acc / l. Because every path (no split, split over threads,
 * a prefill tile, a decode row) computes the same partials with the same
 * code and folds them in the same order, the output for a query depends
 * only on q and the keys and values it sees: not on the thread count, the
 * batch, the split policy, or the prefill tile it sits in. Within one
 * variant the results are bit-identical; across variants they agree
 * within floating-point tolerance.
 *
 * Sliding window. A task with window W > 0 lets row r (at position p =
 * pos + r) see keys [lo, p] with lo = max(0, p - W + 1) (W keys, itself
 * included: llama.cpp's LLAMA_SWA_TYPE_STANDARD). Keys below lo are masked
 * inside their step, steps wholly below every row's lo are not read (their
 * blocks may have been returned to the pool), and a chunk enters a row's
 * fold only when it holds at least one of the row's keys; the fold order
 * is otherwise unchanged, so windowed results are batch invariant too.
 *
 * Attention sinks (gpt-oss). A task with sinks gives each query head g a
 * learned logit sinks[g] that joins the softmax denominator and nothing
 * else: out = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sink - m)),
 * with m the running max over the keys. It enters once, after the last
 * fold (attn and reduce; never in a chunk's partial, so that split-K adds
 * it exactly once), as l += e^(sink - m) before the division. A sink far
 * above every score gives l = inf and an output of 0, its limit.
 *
 * One fold driver (attn_fold.c) runs the chunk loop, the fold order and
 * the split-K reduction for every SIMD variant; each ISA file provides
 * only the inner primitives (struct kn_attn_prims): the chunk pass, the
 * fold of two partials and the final division. The reference (cpu/ref)
 * keeps its own plain copy of the loop, as the specification.
 *
 * Reference: Dao et al., "Flash-Decoding for long-context inference"
 * (2023); ../shared/seeds/flashdecode-wormhole.md.
 */
#ifndef ANVIL_KN_ATTN_H
#define ANVIL_KN_ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>

#include "kv/kv_layout.h"

#define KN_ATTN_SUB 16          /* keys per online-softmax step */
#define KN_ATTN_CHUNK 256       /* keys per split-K chunk (fixed positions) */
#define KN_ATTN_MAXQ 32         /* max query vectors (rows * group) per task */
#define KN_ATTN_MAX_HEAD_DIM KN_KV_MAX_HEAD_DIM

_Static_assert(KN_KV_BLOCK_STEP % KN_ATTN_SUB == 0, "a block holds whole steps");

/* Floats of one split-K partial record: for each of the group's query
 * heads g, acc[head_dim] then m then l, at rec + g*(head_dim + 2). */
static inline size_t kn_attn_rec_floats(int group, int head_dim) {
    return (size_t)group * (size_t)(head_dim + 2);
}

/* Number of chunks covering keys [0, n_kv). */
static inline int kn_attn_n_chunks(int n_kv) { return (n_kv + KN_ATTN_CHUNK - 1) / KN_ATTN_CHUNK; }

/* One attention task: the `group` query heads of kv head `kv_head` for
 * query rows [0, n_rows) of one sequence. Row r is at position pos + r
 * and attends to keys [0, pos + r]; keys are read through the block table.
 *   q:   row r, head g (g < group) at q + r*q_stride + g*head_dim; float32
 *        after RoPE; q already points at the group's first head
 *   out: same layout as q
 * n_rows * group <= KN_ATTN_MAXQ. */
struct kn_attn_task {
    const struct kn_kv_layout *kv;
    const uint8_t *base;     /* the layer's tiles */
    const int32_t *blocks;   /* the sequence's block table */
    int kv_head;
    int group;               /* query heads per kv head (GQA ratio) */
    float scale;             /* softmax scale, 1/sqrt(head_dim) */
    const float *q;
    size_t q_stride;         /* floats between query rows */
    float *out;
    size_t out_stride;       /* floats between output rows */
    int pos;
    int n_rows;
    int window;              /* keys per query, itself included; 0 = no window */
    int c0, c1;              /* partial/reduce: chunk range */
    float *part;             /* partial/reduce: records, chunk c at (c - c0) */
    const float *sinks;      /* attn/reduce: the group's per-head sink logits (sinks[g]
                              * for head g), or NULL: see "Attention sinks" above */
};

/*   attn:    every chunk of every row, folded, written to out.
 *   partial: n_rows == 1: the partial record of each chunk c in [c0, c1)
 *            written to part + (c - c0) * kn_attn_rec_floats(); out unused.
 *   reduce:  n_rows == 1: fold the records of chunks [c0, c1) (c0 == 0,
 *            c1 == all chunks) and write out.
 * For every variant, attn == reduce(partial) bit for bit, and a row's
 * output does not depend on n_rows or on the other rows. */
typedef void (*kn_attn_fn)(const struct kn_attn_task *t);

struct kn_attn_ops {
    const char *name; /* "ref", "avx2", "avx512" */
    kn_attn_fn attn;
    kn_attn_fn partial;
    kn_attn_fn reduce;
    bool window;      /* honours kn_attn_task.window (else the caller must
                         use a table that does, such as avx2's) */
};

/* First key row r of a task may see. */
static inline int kn_attn_lo(const struct kn_attn_task *t, int r) {
    int lo = t->window > 0 ? t->pos + r - t->window + 1 : 0;
    return lo > 0 ? lo : 0;
}

/* First chunk holding a key that row 0 of the task may see. */
static inline int kn_attn_first_chunk(const struct kn_attn_task *t) {
    return kn_attn_lo(t, 0) / KN_ATTN_CHUNK;
}

/* ---------------------------------------------------------------------- */
/* the fold driver shared by the SIMD variants (attn_fold.c) */

/* Softmax state of up to KN_ATTN_MAXQ query vectors: query vector i
 * (row r, head g: i = r*group + g) has m[i], l[i], acc[i*head_dim ...]. */
struct kn_attn_states {
    float m[KN_ATTN_MAXQ], l[KN_ATTN_MAXQ];
    float acc[KN_ATTN_MAXQ * KN_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
};

struct kn_attn_prims {
    /* The partial of chunk c for every query vector of the task into cur
     * (cleared first; keys outside each row's [lo, p] masked). */
    void (*chunk_pass)(const struct kn_attn_task *t, int c, struct kn_attn_states *cur);
    /* (m, l, acc) = fold((m, l, acc), (cm, cl, cacc)) as attn.h defines it. */
    void (*fold)(float *m, float *l, float *acc, float cm, float cl, const float *cacc, int hd);
    /* out = acc / l */
    void (*finish)(float l, const float *acc, float *out, int hd);
};

void kn_attn_fold_attn(const struct kn_attn_prims *p, const struct kn_attn_task *t);
void kn_attn_fold_partial(const struct kn_attn_prims *p, const struct kn_attn_task *t);
void kn_attn_fold_reduce(const struct kn_attn_prims *p, const struct kn_attn_task *t);

extern const struct kn_attn_ops kn_attn_ops_ref;
void kn_attn_ref(const struct kn_attn_task *t); /* the ref entries, for fallbacks */
void kn_attn_partial_ref(const struct kn_attn_task *t);
void kn_attn_reduce_ref(const struct kn_attn_task *t);
extern const struct kn_attn_ops kn_attn_ops_avx2;
extern const struct kn_attn_ops kn_attn_ops_avx512;

/* The attention table of a kernel family, by the kn_ops name ("ref",
 * "avx2", "avx512"; NULL or "auto" = the best the CPU runs, with the
 * ANVIL_KERNELS override, like kn_select). NULL when unknown/unsupported. */
const struct kn_attn_ops *kn_attn_select(const char *name);

/* ---------------------------------------------------------------------- */
/* naive reference (cpu/ref/attn.c): the test oracle, not in any table */

/* Plain attention in double: for each row r and each of the n_head query
 * heads, materialize the scores over keys [0, pos + r], softmax, and sum
 * the values. Same q/out layout as kn_attn_task with group = n_head and
 * kv head of query head i = i / (n_head / n_head_kv). scratch holds
 * pos + n_rows doubles. */
void kn_attn_naive_ref(const struct kn_kv_layout *kv, const uint8_t *base,
                       const int32_t *blocks, int n_head, float scale, const float *q,
                       size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                       double *scratch);

/* The same over each row's window of keys (window 0 = all). */
void kn_attn_naive_window_ref(const struct kn_kv_layout *kv, const uint8_t *base,
                              const int32_t *blocks, int n_head, float scale, const float *q,
                              size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                              int window, double *scratch);

/* The same with attention sinks (sinks: n_head logits, or NULL = none):
 * the sink joins the max and the denominator of each head's softmax. */
void kn_attn_naive_sink_ref(const struct kn_kv_layout *kv, const uint8_t *base,
                            const int32_t *blocks, int n_head, float scale, const float *q,
                            size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                            int window, const float *sinks, double *scratch);

/* l + e^(sink - m): the denominator with head g's sink joined, or l when
 * the task has none (the one formula every variant uses). */
static inline float kn_attn_sink_l(const struct kn_attn_task *t, int g, float m, float l) {
    return t->sinks ? l + expf(t->sinks[g] - m) : l;
}

/* Value of K (is_v = 0) or V (is_v = 1) of kv head h, token position t, as
 * stored (after F16/Q8_0 rounding), as float. */
float kn_kv_get(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                int h, int t, int d, int is_v);

#endif
