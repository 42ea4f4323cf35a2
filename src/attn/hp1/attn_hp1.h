/*
 * attn_hp1.h - HP1 gated attention over the paged KV cache: the
 * non-softmax attention of ../shared/seeds/hp1-attention-vllm-kernels.zh.md.
 * For a query vector q at position P (keys [0, P]) with taps c_0..c_{K-1}:
 *
 *     s_t = (q . k_t) * scale
 *     r_t = ReLU(s_t)  (or s_t when the ReLU is off);  r_t = 0 for t < 0
 *     z_t = sum_{j<K} c_j * r_{t-j}                     (a causal FIR)
 *     p_t = gamma * clamp(z_t, lo, hi)
 *     o   = sum_t p_t * v_t                             (no normalisation)
 *
 * This header is the kernel layer only: the task, the table, the numeric
 * specification, and test/bench helpers. It reuses the KV layout, the
 * chunk and step grid and the task fields of attn.h; it knows nothing
 * of GGUF metadata, models or the scheduler.
 *
 * Numeric specification (every variant; only the marked arithmetic is
 * variant-specific). For query vector (row r, head g), P = pos + r:
 *   1. s_t: a dot product whose order depends only on q and k_t, never on
 *      where t sits in a step, chunk, tile or split, then times scale.
 *        ref:  s = 0; s += q[d]*k[d] for d = 0..hd-1 (float, unfused)
 *        avx2: a_u = fused multiply-add chain over d = u mod 2 in d order,
 *              s = (a_0 + a_1) * scale
 *        avx512: avx2's, here and in steps 3 and 5, lane for lane: the
 *              same bits as avx2 (unit_attn_hp1 checks it)
 *   2. r_t = s_t > 0 ? s_t : 0 with the ReLU on (NaN -> 0), else s_t.
 *   3. z_t = c_0*r_t, then z_t += c_j*r_{t-j} for j = 1..K-1 in order
 *        (ref: unfused; avx2: fused multiply-add).
 *   4. p_t = gamma * min(max(z_t, lo), hi), with max(x, lo) = x > lo ? x : lo
 *      and min(x, hi) = x < hi ? x : hi, so a NaN z gives lo; with finite
 *      gamma, lo, hi (the loader's job) p_t is always finite.
 *   5. Keys are cut into chunks [c*KN_ATTN_CHUNK, (c+1)*KN_ATTN_CHUNK) at
 *      fixed positions. Chunk c's partial is
 *          acc_c = sum over t in chunk c, t <= P, p_t != 0, ascending t,
 *                  of p_t * v_t, starting from +0
 *        (ref: acc = acc + p*v unfused; avx2: fused multiply-add).
 *      A term with p_t == 0 contributes nothing: a kernel skips it (the
 *      sparse walk) or adds it as p_t * 0, with the V row masked to zeros
 *      (a straight walk over a mostly nonzero span). Adding an exact zero
 *      to a sum changes at most the sign of a zero sum, and step 6 starts
 *      from +0, so the output bits are the same either way; and a V value
 *      at a position with p_t == 0 never reaches the sum, finite or not.
 *   6. o = (((+0 + acc_0) + acc_1) + ...) + acc_last: plain float adds in
 *      ascending chunk order, the same in every variant.
 * Every value above is a function of q, the taps, the parameters and the
 * keys and values at [0, P], computed by per-position arithmetic. Steps,
 * prefill tiles, the batch, threads and splits decide only *when* a
 * position is computed, never *how*; the FIR history of a chunk (the K-1
 * scores left of it) is recomputed with the same arithmetic when the
 * chunk starts a call. So within one variant a row's output is bit
 * identical whatever the split, the batch, the thread count or the
 * prefill tile; across variants results agree within the rounding bound
 * of the arithmetic (the tests derive it, kn_hp1_naive_ref).
 *
 * Split-K needs no log-sum-exp: a partial is a plain sum, so a record is
 * just acc_c, and the reduction adds records in ascending chunk order
 * (step 6), which is what attn does chunk by chunk.
 *
 * Sparse PV. The gate pass of a span of keys (up to 64) leaves, per query
 * vector, the bit mask of keys with p_t != 0: the span's part of the
 * ascending list of nonzero positions. PV walks the set bits lowest
 * first; V rows that no query vector of the group needs are neither
 * read nor converted. A mostly nonzero span takes a straight masked walk
 * and a fully nonzero one a plain walk, with the same arithmetic
 * (cpu/avx2/attn_hp1.c; cpu/avx512/attn_hp1.c).
 */
#ifndef ANVIL_KN_ATTN_HP1_H
#define ANVIL_KN_ATTN_HP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "core/core.h"

#define KN_HP1_MAX_TAPS 8 /* K; the FIR history (K-1 keys) fits in one step */

_Static_assert(KN_HP1_MAX_TAPS - 1 <= KN_ATTN_SUB, "FIR history within one step");

/* The HP1 parameters of one layer, for the query heads a task covers. */
struct kn_hp1_params {
    const float *taps; /* (n_head, n_taps): head i's c_j at taps[i*n_taps + j]; in a
                        * task it points at the group's first head */
    int n_taps;        /* K, 1..KN_HP1_MAX_TAPS */
    float gamma;       /* finite */
    float lo, hi;      /* finite, lo <= hi */
    bool relu;         /* r_t = ReLU(s_t), else r_t = s_t */
};

/* What PV does. SPARSE is the kernel; the other two exist to measure it
 * (`anvil bench --attention --kind hp1`): DENSE visits every position and reads every V
 * row, adding p_t * v_t even when p_t == 0 (what a kernel without the
 * nonzero list does; equal to SPARSE bit for bit when V is finite, see
 * the tests), NONE skips PV and writes zeros (QK and gate alone). */
enum kn_hp1_pv { KN_HP1_PV_SPARSE = 0, KN_HP1_PV_DENSE, KN_HP1_PV_NONE };

/* One HP1 task: the fields of kn_attn_task mean what they mean there
 * (kv, base, blocks, kv_head, group, scale, q/q_stride, out/out_stride,
 * pos, n_rows with n_rows * group <= KN_ATTN_MAXQ, c0/c1, part), except
 * that a partial record is kn_hp1_rec_floats() long and window must be 0:
 * HP1 has no sliding window (the kernels assert it). */
struct kn_hp1_task {
    struct kn_attn_task at;
    struct kn_hp1_params hp;
    enum kn_hp1_pv pv;
};

/* Floats of one split-K partial record: for each of the group's query
 * heads g, acc_c[head_dim] at rec + g*head_dim (no max, no sum). */
static inline size_t kn_hp1_rec_floats(int group, int head_dim) {
    return (size_t)group * (size_t)head_dim;
}

/* The task limits every variant relies on (its buffers are sized by
 * them); each kernel entry checks them, cheap next to the task. */
static inline void kn_hp1_check_task(const struct kn_hp1_task *t) {
    ANVIL_ASSERT(t->hp.n_taps >= 1 && t->hp.n_taps <= KN_HP1_MAX_TAPS);
    ANVIL_ASSERT(t->at.n_rows >= 1 && t->at.group >= 1 && t->at.n_rows * t->at.group <= KN_ATTN_MAXQ);
    ANVIL_ASSERT(t->at.kv->head_dim % 32 == 0 && t->at.kv->head_dim <= KN_ATTN_MAX_HEAD_DIM);
    ANVIL_ASSERT(t->at.window == 0); /* HP1 has no sliding window */
}

/*   attn:    every chunk of every row (decode or a prefill tile), summed
 *            (step 6), written to out.
 *   partial: n_rows == 1: acc_c of each chunk c in [c0, c1) written to
 *            part + (c - c0) * kn_hp1_rec_floats(); out unused.
 *   reduce:  n_rows == 1: sum the records of chunks [c0, c1) (c0 == 0,
 *            c1 == all chunks) in ascending order, write out.
 * For every variant, attn == reduce(partial) bit for bit whatever the
 * pieces [c0, c1) the chunks were computed in, and a row's output does
 * not depend on n_rows or the other rows. */
typedef void (*kn_hp1_fn)(const struct kn_hp1_task *t);

struct kn_hp1_ops {
    const char *name; /* "ref", "avx2", "avx512" */
    kn_hp1_fn attn;
    kn_hp1_fn partial;
    kn_hp1_fn reduce;
};

extern const struct kn_hp1_ops kn_hp1_ops_ref;
extern const struct kn_hp1_ops kn_hp1_ops_avx2;
extern const struct kn_hp1_ops kn_hp1_ops_avx512;

/* The HP1 table of a kernel family, by the kn_ops name ("ref", "avx2",
 * "avx512"; NULL or "auto" = the best the CPU runs, with the
 * ANVIL_KERNELS override, like kn_attn_select). NULL when unknown or the
 * CPU cannot run it. */
const struct kn_hp1_ops *kn_hp1_select(const char *name);

/* ---------------------------------------------------------------------- */
/* oracle and helpers (cpu/ref/attn_hp1.c): for tests and benchmarks, not
 * in any table */

/* The formula in double over materialized scores: for each row r and each
 * of the n_head query heads (kv head of head i = i / (n_head / n_head_kv),
 * taps of head i at hp->taps + i*n_taps), o = sum_t p_t v_t. Same q/out
 * layout as the task with group = n_head. scratch holds 3*(pos + n_rows)
 * doubles. When bound is not NULL it gets, per output element, a first
 * order bound on the rounding error of any variant's float arithmetic
 * (the score dot in any order of hd terms, the FIR of K terms, the sum
 * over positions and chunks), same layout as out. A key whose p is 0
 * with a margin (every float variant gets exactly 0 there too: the ReLU
 * or the clamp saturates by more than the rounding bound) is left out of
 * the sums, its V unread, like the kernels. When n_zero is not NULL,
 * *n_zero += the number of (row, head, key) with p == 0 in double, and
 * *n_gate += the number of (row, head, key). */
void kn_hp1_naive_ref(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                      int n_head, const struct kn_hp1_params *hp, float scale, const float *q,
                      size_t q_stride, float *out, size_t out_stride, int pos, int n_rows,
                      double *scratch, float *bound, int64_t *n_zero, int64_t *n_gate);

/* Scores s_t = (q . k_t) * scale of one query vector against kv head h,
 * keys [0, n), as the ref kernel computes them, into s[0, n). */
void kn_hp1_scores_ref(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                       int h, const float *q, float scale, int n, float *s);

/* Controlled sparsity, step 1: scores whose sign rate is chosen. With
 * random keys of zero mean, the zero share of the served model's gate
 * cannot pass about 7/8 (a key whose two predecessors score <= 0 always
 * passes), so the keys get "gate dimensions" and the queries choose the
 * rate:
 *   kn_hp1_gate_keys: in every key row (rows t at k + t*k_stride, kv
 *     head h at + h*head_dim) dims g < group become u uniform in [-1, 1),
 *     drawn per (t, h, g), or per (t, h) when shared (every head of the
 *     group then sees the same pattern), and dim group becomes 1;
 *   kn_hp1_gate_queries: in every query vector (rows at q + r*q_stride,
 *     head i at + i*head_dim) dim i % group becomes 1/scale, the other
 *     gate dims 0, and dim group (2*on_frac - 1)/scale.
 * Head i's score is then u + 2*on_frac - 1 plus the rest of the dot
 * product (about N(0, 1/9) for values uniform in [-1, 1)), positive for
 * a share of about on_frac of the keys. The keys are written once; each
 * target only rewrites the queries. Seeded, deterministic;
 * group + 1 <= head_dim. */
void kn_hp1_gate_keys(float *k, size_t k_stride, int n_kv, int n_head_kv, int head_dim, int group,
                      bool shared, uint32_t seed);
void kn_hp1_gate_queries(float *q, size_t q_stride, int n_rows, int n_head, int n_head_kv,
                         int head_dim, float scale, double on_frac);

/* Controlled sparsity, step 2. Choose K = 3 taps (1, -a, -a) with the
 * ReLU on, hi = 1 and gamma = 1, the shape of the served model's gate
 * (the score minus a multiple of the pooled ReLU scores, clamped to
 * [0, 1]), so that the share of p_t == 0 over the given score rows is as
 * close to zero_frac as the data allow: 0 takes lo = 2^-10 (no p can be
 * zero) and a = 1/2; otherwise lo = 0 and a >= 0 grows by bisection from
 * a = 0, where the share is that of scores <= 0, up to about
 * 1 - on * (1 - on)^2 for an on share `on` (kn_hp1_gate_queries with
 * on_frac = 1 - zero_frac: the rest of the dot product pulls the on share
 * towards 1/2, so a = 0 starts at or below the target, and 0.5 to 0.9
 * are reachable). scores holds n_vec rows of
 * n_pos scores (each row keys [0, n_pos) of one query vector,
 * kn_hp1_scores_ref). Writes n_head copies of the taps to taps (n_head * 3
 * floats), fills *hp (hp->taps = taps) and returns the share reached
 * (with the ref gate arithmetic). */
double kn_hp1_calibrate(const float *scores, int n_vec, int n_pos, double zero_frac, int n_head,
                        float *taps, struct kn_hp1_params *hp);

/* Fraction of p_t == 0 in one score row under hp (head 0's taps), ref gate
 * arithmetic. */
double kn_hp1_zero_frac(const float *s, int n, const struct kn_hp1_params *hp);

#endif
