/*
 * attn.c (avx512) - attention kernels of attn/attn.h with AVX-512F.
 *
 * Same algorithm and structure as the reference (cpu/ref/attn.c): steps of
 * 16 keys, chunks of 256, left fold of chunk partials. One step is one
 * vector: a step's 16 keys are converted once to float (K^T (hd, 16) and
 * V (16, hd) in a stack buffer), then every query vector of the task
 * (the GQA group, times the rows of a prefill tile) runs over the buffer,
 * so K and V are read from memory once per (sequence, kv head).
 *
 * Per query vector the arithmetic is fixed, whatever the grouping:
 *   score  = ((a0 + a1) + (a2 + a3)) * scale,  a_u = sum over d = u mod 4,
 *            in d order, of q[d] * k[d]  (fused multiply-add); Q8_0 per
 *            32-dim group with the scales factored out (see struct src)
 *   m      moves lazily: only when a valid score exceeds m + LAZY_M, to
 *            the step's max m_new; then (if m was finite) l and acc are
 *            scaled by expf(m - m_new). Any m gives the same softmax (l
 *            and acc are relative to it); this one keeps p <= e^LAZY_M
 *            and spares most steps the reduction and the rescale
 *   p      = exp512(score - m) on valid lanes, 0 elsewhere
 *   l     += p lane by lane (16 lane sums per query vector, added up
 *            into the chunk's l at its end);  acc[d] += p_j * v_j[d] for
 *            j in order
 * Query vectors are processed up to 4 at a time only to reuse the loaded
 * K row and V row; that changes no result. So attn, partial + reduce, and
 * any prefill tile give the same bits for the same query (attn.h).
 *
 * exp512: Cody-Waite range reduction and Cephes' expf polynomial, ~1 ulp;
 * the fold uses libm expf like the reference.
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "anvil.h"
#include "attn/attn.h"

#define SUB KN_ATTN_SUB
#define HDMAX KN_ATTN_MAX_HEAD_DIM
#define QGROUP 4 /* query vectors sharing one pass over the step buffer */
/* decode: besides the next tile into L1, the tile PF_AHEAD blocks on into
 * L2, spread the same way. The paged blocks are scattered, so the hardware
 * prefetchers cannot run ahead across them; 4 blocks (32 KiB at head_dim
 * 128) ahead covers the memory latency and stays well inside L2, and 2 or
 * 8 do about as well. The KV read rate before and after: commit 364b6ba. */
#define PF_AHEAD 4
#define LAZY_M 8.0f /* how far a score may pass m before m moves (p <= e^8) */

_Static_assert(KN_ATTN_SUB == 16, "one step is one 16-lane vector");

/* ---------------------------------------------------------------------- */
/* helpers */

static inline __m512 exp512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3365f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3762f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static inline __m512 load_f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline __m512 load_i8x16(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* Keys [j0, j0 + 16) of a tile as float: Kb (hd, 16), Vb (16, hd). F16:
 * the exact values. Q8_0: the quants only (exact), and the scales as
 * floats in Ks, Vs (hd/32, 16) - the arithmetic applies them per group. */
static void load_step(const struct kn_kv_layout *kv, const uint8_t *tile, int j0,
                      float *restrict Kb, float *restrict Vb, float *restrict Ks,
                      float *restrict Vs) {
    int bs = kv->block_size, hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *kt = (const uint16_t *)tile + j0;
        for (int d = 0; d < hd; d++) _mm512_store_ps(Kb + d * SUB, load_f16x16(kt + (size_t)d * bs));
        const uint16_t *vt = (const uint16_t *)(tile + kv->v_off) + (size_t)j0 * hd;
        for (int i = 0; i < SUB * hd; i += 16) _mm512_store_ps(Vb + i, load_f16x16(vt + i));
        return;
    }
    const int8_t *kq = (const int8_t *)tile + j0;
    for (int d = 0; d < hd; d++) _mm512_store_ps(Kb + d * SUB, load_i8x16(kq + (size_t)d * bs));
    const int8_t *vq = (const int8_t *)(tile + kv->v_off) + (size_t)j0 * hd;
    for (int i = 0; i < SUB * hd; i += 16) _mm512_store_ps(Vb + i, load_i8x16(vq + i));
    const uint16_t *ks = (const uint16_t *)(tile + kv->ks_off) + j0;
    const uint16_t *vs = (const uint16_t *)(tile + kv->vs_off) + j0;
    for (int g = 0; g < hd / 32; g++) {
        _mm512_store_ps(Ks + g * SUB, load_f16x16(ks + (size_t)g * bs));
        _mm512_store_ps(Vs + g * SUB, load_f16x16(vs + (size_t)g * bs));
    }
}

/* Where a step's 16 keys come from: the float buffer filled by load_step
 * (prefill tiles, groups of more than QGROUP heads: converted once, read
 * many times), or the tile itself, converted in registers as it is read
 * (decode: each K and V row is read exactly once per group anyway). Both
 * give the same floats, so the arithmetic below is the same bit for bit.
 * Q8_0 (SRC_Q8, SRC_BUF8) factors the scales out of each 32-dim group:
 *     score = sum over groups g, in order, of ((a0+a1)+(a2+a3)) * ks_g
 *             (first group a product, the others fused multiply-adds)
 *     acc[d] += (p_j * vs_{j,g}) * vq[j][d]
 * so the inner loops run on the int8 values converted to float, and the
 * kernel stays memory-bound on half the bytes of F16. */
enum { SRC_BUF, SRC_F16, SRC_Q8, SRC_BUF8 };

struct src {
    const void *k;           /* BUF*: (hd, 16) floats; else K^T at key j0, rows bs apart */
    const void *v;           /* BUF*: (16, hd) floats; else V at row j0 */
    const void *ks, *vs;     /* Q8: f16 scales at key j0, rows bs apart; BUF8: (hd/32, 16) floats */
    int bs;
};

#define IS_Q8(mode) ((mode) == SRC_Q8 || (mode) == SRC_BUF8)
#define IS_DIRECT(mode) ((mode) == SRC_F16 || (mode) == SRC_Q8)

/* Lines of the next tile still to prefetch. Decode issues them a couple
 * at a time from inside the compute loops: a burst of a whole tile at the
 * block edge stalls the pipeline once the line-fill buffers are full, so
 * memory and arithmetic would take turns instead of overlapping. */
struct pfq {
    const char *p, *end;   /* the next tile, into L1 */
    const char *p2, *end2; /* the tile PF_AHEAD blocks on, into L2 */
};

static inline __attribute__((always_inline)) void pf_issue(struct pfq *q, int n) {
    for (int i = 0; i < n && q->p < q->end; i++, q->p += 64) _mm_prefetch(q->p, _MM_HINT_T0);
    for (int i = 0; i < n && q->p2 < q->end2; i++, q->p2 += 64) _mm_prefetch(q->p2, _MM_HINT_T1);
}

/* K row d (16 keys); Q8: unscaled quants */
static inline __attribute__((always_inline)) __m512 src_k(const int mode, const struct src *s,
                                                          int d) {
    if (mode == SRC_BUF || mode == SRC_BUF8) return _mm512_load_ps((const float *)s->k + d * SUB);
    if (mode == SRC_F16) return load_f16x16((const uint16_t *)s->k + (size_t)d * s->bs);
    return load_i8x16((const int8_t *)s->k + (size_t)d * s->bs);
}

/* Q8: scales of group g for the 16 keys (K or V) */
static inline __attribute__((always_inline)) __m512 src_scale(const int mode, const void *sc,
                                                              int g, int bs) {
    if (mode == SRC_BUF8) return _mm512_load_ps((const float *)sc + g * SUB);
    return load_f16x16((const uint16_t *)sc + (size_t)g * bs);
}

/* V row j, columns [col, col + 16); Q8: unscaled quants */
static inline __attribute__((always_inline)) __m512 src_v(const int mode, const struct src *s,
                                                          int j, int col, int hd) {
    if (mode == SRC_BUF || mode == SRC_BUF8) return _mm512_load_ps((const float *)s->v + j * hd + col);
    if (mode == SRC_F16) return load_f16x16((const uint16_t *)s->v + (size_t)j * hd + col);
    return load_i8x16((const int8_t *)s->v + (size_t)j * hd + col);
}

/* acc_k[d0, d0 + 16*nb) += sum over j < valid, in order, of w * v_j for
 * nq query vectors (acc_k at acc + k*hd), with the weight w of query k,
 * key j, column block b at p[k*pk + ((d0 + 16b)/32)*pg + j]: the
 * probability (F16, pg = 0) or probability times V scale (Q8). */
static inline __attribute__((always_inline)) void
pv_cols(const int mode, const int nq, const int nb, float *restrict acc, int d0,
        const float *restrict p, int pk, int pg, const struct src *s, int hd, int first, int valid,
        struct pfq *pf) {
    __m512 c[QGROUP][4];
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) c[k][b] = _mm512_load_ps(acc + k * hd + d0 + 16 * b);
    for (int j = first; j < valid; j++) {
        if (IS_DIRECT(mode)) pf_issue(pf, 2);
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) {
            __m512 v = src_v(mode, s, j, d0 + 16 * b, hd);
            __asm__("" : "+v"(v)); /* one load, shared by the nq FMAs */
            const float *pb = p + ((d0 + 16 * b) / 32) * pg + j;
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++) c[k][b] = _mm512_fmadd_ps(_mm512_set1_ps(pb[k * pk]), v, c[k][b]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) _mm512_store_ps(acc + k * hd + d0 + 16 * b, c[k][b]);
}

/* Scores of the 16 keys for nq query vectors, over dims [d0, d1):
 * a_u = sum over d = u mod 4, in d order, of q[d] * k[d]; returns
 * (a0 + a1) + (a2 + a3) per query in out[]. */
static inline __attribute__((always_inline)) void
qk_dims(const int mode, const int nq, const float *restrict q, const struct src *s, int hd,
        int d0, int d1, __m512 *out, struct pfq *pf) {
    __m512 a[QGROUP][4];
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) a[k][u] = _mm512_setzero_ps();
    for (int d = d0; d < d1; d += 4) {
        if (IS_DIRECT(mode)) pf_issue(pf, 2);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            __m512 kr = src_k(mode, s, d + u);
            /* keep the row in a register: otherwise gcc folds its load into
             * each of the nq FMAs and loads q separately (2 loads per FMA);
             * this way q comes as an embedded broadcast */
            __asm__("" : "+v"(kr));
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++)
                a[k][u] = _mm512_fmadd_ps(_mm512_set1_ps(q[k * hd + d + u]), kr, a[k][u]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
        out[k] = _mm512_add_ps(_mm512_add_ps(a[k][0], a[k][1]), _mm512_add_ps(a[k][2], a[k][3]));
}

/* One online-softmax step for nq (1..4) query vectors q + k*hd, states
 * m[k], l[k], acc + k*hd, over the first `valid` keys of the step. */
/* Raw scores (before the scale) of the step's 16 keys for nq query
 * vectors: sv[k]. */
static inline __attribute__((always_inline)) void
qk_scores(const int mode, const int nq, const float *restrict q, const struct src *s, int hd,
          __m512 *sv, struct pfq *pf) {
    if (IS_Q8(mode)) {
        __m512 gs[QGROUP];
        qk_dims(mode, nq, q, s, hd, 0, 32, gs, pf);
        __m512 ks = src_scale(mode, s->ks, 0, s->bs);
#pragma GCC unroll 4
        for (int k = 0; k < nq; k++) sv[k] = _mm512_mul_ps(gs[k], ks);
        for (int g = 1; g < hd / 32; g++) {
            qk_dims(mode, nq, q, s, hd, g * 32, g * 32 + 32, gs, pf);
            ks = src_scale(mode, s->ks, g, s->bs);
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++) sv[k] = _mm512_fmadd_ps(gs[k], ks, sv[k]);
        }
    } else {
        qk_dims(mode, nq, q, s, hd, 0, hd, sv, pf);
    }
}

/* qk_dims() over all dims of two F16 steps at once, from float buffers
 * K0, K1 (hd, 16): each key's score is computed exactly as there, but a
 * broadcast q element serves both steps' rows (the loop is load-bound:
 * 5 loads per 6 FMAs instead of 4 per 3). nq <= 3 (24 accumulators). */
static inline __attribute__((always_inline)) void
qk_dims2(const int nq, const float *restrict q, const float *restrict K0,
         const float *restrict K1, int hd, __m512 *out0, __m512 *out1) {
    __m512 a[3][4], b[3][4];
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) a[k][u] = b[k][u] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 4) {
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            __m512 k0 = _mm512_load_ps(K0 + (d + u) * SUB), k1 = _mm512_load_ps(K1 + (d + u) * SUB);
            /* rows in registers, or gcc folds a load into each FMA */
            __asm__("" : "+v"(k0), "+v"(k1));
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++) {
                __m512 qv = _mm512_set1_ps(q[k * hd + d + u]);
                __asm__("" : "+v"(qv)); /* one broadcast, two FMAs */
                a[k][u] = _mm512_fmadd_ps(qv, k0, a[k][u]);
                b[k][u] = _mm512_fmadd_ps(qv, k1, b[k][u]);
            }
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++) {
        out0[k] = _mm512_add_ps(_mm512_add_ps(a[k][0], a[k][1]), _mm512_add_ps(a[k][2], a[k][3]));
        out1[k] = _mm512_add_ps(_mm512_add_ps(b[k][0], b[k][1]), _mm512_add_ps(b[k][2], b[k][3]));
    }
}

/* The rest of an online-softmax step, from the raw scores sv[k]. */
static inline __attribute__((always_inline)) void
softmax_pv(const int mode, const int nq, const __m512 *sv, float *restrict m, __m512 *restrict l,
           float *restrict acc, const struct src *s, int hd, int first, int valid, float scale,
           struct pfq *pf) {
    const __mmask16 vm = (__mmask16)(((1u << valid) - 1u) & ~((1u << first) - 1u));
    /* weights: p (F16) or p times the V scale of each group (Q8) */
    float pb[QGROUP * (HDMAX / 32)][SUB] __attribute__((aligned(64)));
    const int ng = IS_Q8(mode) ? hd / 32 : 1;
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++) {
        __m512 x = _mm512_mul_ps(sv[k], _mm512_set1_ps(scale));
        x = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vm, x);
        /* the lazy max: m moves only when a score passes it by more than
         * LAZY_M (then to the step's max), so p <= e^LAZY_M; most steps
         * then cost a compare instead of a reduction and a rescale */
        const float mo = m[k];
        if (_mm512_cmp_ps_mask(x, _mm512_set1_ps(mo + LAZY_M), _CMP_GT_OQ)) {
            const float mn = _mm512_reduce_max_ps(x);
            if (mo != -INFINITY) {
                float al = expf(mo - mn);
                l[k] = _mm512_mul_ps(l[k], _mm512_set1_ps(al));
                __m512 av = _mm512_set1_ps(al);
                float *ak = acc + k * hd;
                for (int d = 0; d < hd; d += 16) _mm512_store_ps(ak + d, _mm512_mul_ps(_mm512_load_ps(ak + d), av));
            }
            m[k] = mn;
        }
        __m512 p = _mm512_maskz_mov_ps(vm, exp512(_mm512_sub_ps(x, _mm512_set1_ps(m[k]))));
        l[k] = _mm512_add_ps(l[k], p); /* lane sums, reduced at the chunk's end */
        if (IS_Q8(mode)) {
            for (int g = 0; g < ng; g++)
                _mm512_store_ps(pb[k * ng + g], _mm512_mul_ps(p, src_scale(mode, s->vs, g, s->bs)));
        } else {
            _mm512_store_ps(pb[k], p);
        }
    }
    /* acc[d] += w_j * v_j[d], j in order; 64 columns of every query
     * vector at once for independent chains (32 for a head_dim tail) */
    const int pk = ng * SUB, pg = IS_Q8(mode) ? SUB : 0;
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) pv_cols(mode, nq, 4, acc, d0, pb[0], pk, pg, s, hd, first, valid, pf);
    if (d0 < hd) pv_cols(mode, nq, 2, acc, d0, pb[0], pk, pg, s, hd, first, valid, pf);
}

static inline __attribute__((always_inline)) void
step_group(const int mode, const int nq, const float *restrict q, float *restrict m,
           __m512 *restrict l, float *restrict acc, const struct src *s, int hd, int first,
           int valid, float scale, struct pfq *pf) {
    __m512 sv[QGROUP];
    qk_scores(mode, nq, q, s, hd, sv, pf);
    softmax_pv(mode, nq, sv, m, l, acc, s, hd, first, valid, scale, pf);
}

/* Two consecutive F16 steps (buffers sa, sb; keys [first0, valid0) of the
 * first and [0, valid1) of the second, both nonempty) for nq <= 3 query
 * vectors: the same arithmetic as two step_group calls, with the scores of
 * both computed first. */
static inline __attribute__((always_inline)) void
step_group2(const int nq, const float *restrict q, float *restrict m, __m512 *restrict l,
            float *restrict acc, const struct src *sa, const struct src *sb, int hd, int first0,
            int valid0, int valid1, float scale) {
    __m512 s0[3], s1[3];
    qk_dims2(nq, q, sa->k, sb->k, hd, s0, s1);
    softmax_pv(SRC_BUF, nq, s0, m, l, acc, sa, hd, first0, valid0, scale, NULL);
    softmax_pv(SRC_BUF, nq, s1, m, l, acc, sb, hd, 0, valid1, scale, NULL);
}

/* The G query vectors of one row through two F16 steps, 3 at a time. */
static void step_row_buf2(const float *q, float *m, __m512 *l, float *acc, int G,
                          const struct src *sa, const struct src *sb, int hd, int first0,
                          int valid0, int valid1, float scale) {
    int g = 0;
    for (; g + 3 <= G; g += 3)
        step_group2(3, q + g * hd, m + g, l + g, acc + g * hd, sa, sb, hd, first0, valid0, valid1, scale);
    switch (G - g) {
    case 2: step_group2(2, q + g * hd, m + g, l + g, acc + g * hd, sa, sb, hd, first0, valid0, valid1, scale); break;
    case 1: step_group2(1, q + g * hd, m + g, l + g, acc + g * hd, sa, sb, hd, first0, valid0, valid1, scale); break;
    default: break;
    }
}

/* The G query vectors of one row through one step, in groups of 4. */
static inline __attribute__((always_inline)) void
step_row(const int mode, const float *q, float *m, __m512 *l, float *acc, int G,
         const struct src *s, int hd, int first, int valid, float scale, struct pfq *pf) {
    int g = 0;
    for (; g + 4 <= G; g += 4)
        step_group(mode, 4, q + g * hd, m + g, l + g, acc + g * hd, s, hd, first, valid, scale, pf);
    switch (G - g) {
    case 3: step_group(mode, 3, q + g * hd, m + g, l + g, acc + g * hd, s, hd, first, valid, scale, pf); break;
    case 2: step_group(mode, 2, q + g * hd, m + g, l + g, acc + g * hd, s, hd, first, valid, scale, pf); break;
    case 1: step_group(mode, 1, q + g * hd, m + g, l + g, acc + g * hd, s, hd, first, valid, scale, pf); break;
    default: break;
    }
}

#define STEP_ROW_FN(NAME, MODE) \
    static void NAME(const float *q, float *m, __m512 *l, float *acc, int G, const struct src *s, \
                     int hd, int first, int valid, float scale, struct pfq *pf) { \
        step_row(MODE, q, m, l, acc, G, s, hd, first, valid, scale, pf); \
    }
STEP_ROW_FN(step_row_buf, SRC_BUF)
STEP_ROW_FN(step_row_f16, SRC_F16)
STEP_ROW_FN(step_row_q8, SRC_Q8)
STEP_ROW_FN(step_row_buf8, SRC_BUF8)

/* Raw scores of one row's G query vectors over one buffered step, in
 * groups of QGROUP, into sv[0..G). */
static inline __attribute__((always_inline)) void
qk_row(const int mode, const float *q, int G, const struct src *s, int hd, __m512 *sv) {
    for (int g = 0; g < G; g += QGROUP) {
        int nq = G - g < QGROUP ? G - g : QGROUP;
#define QK_CASE(M, N) \
    case N: qk_scores(M, N, q + g * hd, s, hd, sv + g, NULL); break;
        if (mode == SRC_BUF) {
            switch (nq) { QK_CASE(SRC_BUF, 4) QK_CASE(SRC_BUF, 3) QK_CASE(SRC_BUF, 2) QK_CASE(SRC_BUF, 1) }
        } else {
            switch (nq) { QK_CASE(SRC_BUF8, 4) QK_CASE(SRC_BUF8, 3) QK_CASE(SRC_BUF8, 2) QK_CASE(SRC_BUF8, 1) }
        }
#undef QK_CASE
    }
}

/* Softmax and P.V of one row's G query vectors over one buffered step,
 * from their raw scores sv[0..G), in groups of QGROUP. */
static inline __attribute__((always_inline)) void
softmax_pv_row(const int mode, const __m512 *sv, float *m, __m512 *l, float *acc, int G,
               const struct src *s, int hd, int first, int valid, float scale) {
    for (int g = 0; g < G; g += QGROUP) {
        int nq = G - g < QGROUP ? G - g : QGROUP;
#define SP_CASE(M, N) \
    case N: softmax_pv(M, N, sv + g, m + g, l + g, acc + (size_t)g * hd, s, hd, first, valid, scale, NULL); break;
        if (mode == SRC_BUF) {
            switch (nq) { SP_CASE(SRC_BUF, 4) SP_CASE(SRC_BUF, 3) SP_CASE(SRC_BUF, 2) SP_CASE(SRC_BUF, 1) }
        } else {
            switch (nq) { SP_CASE(SRC_BUF8, 4) SP_CASE(SRC_BUF8, 3) SP_CASE(SRC_BUF8, 2) SP_CASE(SRC_BUF8, 1) }
        }
#undef SP_CASE
    }
}

/* ---------------------------------------------------------------------- */
/* chunks, fold, tasks */


struct bufs {
    float K[HDMAX * SUB] __attribute__((aligned(64)));
    float V[SUB * HDMAX] __attribute__((aligned(64)));
    float K2[HDMAX * SUB] __attribute__((aligned(64))); /* F16: the next step */
    float V2[SUB * HDMAX] __attribute__((aligned(64)));
    float Ks[HDMAX / 32 * SUB] __attribute__((aligned(64))); /* Q8_0 scales */
    float Vs[HDMAX / 32 * SUB] __attribute__((aligned(64)));
    __m512 S[2][KN_ATTN_MAXQ]; /* raw scores of one or two steps per query vector */
    __m512 L[KN_ATTN_MAXQ];    /* l per query vector as 16 lane sums (the chunk's l: their sum) */
};

static void states_clear(struct kn_attn_states *s, int nq, int hd) {
    for (int i = 0; i < nq; i++) {
        s->m[i] = -INFINITY;
        s->l[i] = 0.0f;
    }
    memset(s->acc, 0, (size_t)nq * hd * sizeof(float));
}

static inline __attribute__((always_inline)) void prefetch_tile(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Keys of chunk c for every row of the task into cur (cleared first):
 * steps below the first row's window are not read; inside a step, keys
 * outside a row's [lo, p] are masked (their weights are not summed). */
static void chunk_pass_buf(const struct kn_attn_task *t, int c, struct kn_attn_states *cur,
                           struct bufs *b) {
    const struct kn_kv_layout *kv = t->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = t->group;
    int n_kv_max = t->pos + t->n_rows;
    int k0 = c * KN_ATTN_CHUNK;
    int k1 = k0 + KN_ATTN_CHUNK < n_kv_max ? k0 + KN_ATTN_CHUNK : n_kv_max;
    /* decode rows with one group of heads read the tile directly */
    const bool direct = t->n_rows == 1 && G <= QGROUP;
    const int lo0 = kn_attn_lo(t, 0) / SUB * SUB;
    states_clear(cur, t->n_rows * G, hd);
    for (int i = 0; i < t->n_rows * G; i++) b->L[i] = _mm512_setzero_ps();
    struct pfq pf = {NULL, NULL, NULL, NULL};
    for (int s0 = k0 > lo0 ? k0 : lo0; s0 < k1; s0 += SUB) {
        const uint8_t *tile = kn_kv_tile(kv, t->base, t->blocks[s0 / bs], t->kv_head);
        int nxt = s0 + bs - s0 % bs; /* first key of the next block */
        int far = s0 - s0 % bs + PF_AHEAD * bs;
        if (direct && s0 % bs == 0 && far < n_kv_max) {
            pf.p2 = (const char *)kn_kv_tile(kv, t->base, t->blocks[far / bs], t->kv_head);
            pf.end2 = pf.p2 + kv->tile_bytes;
        }
        if (s0 % bs == 0 && nxt < k1) {
            const char *np = (const char *)kn_kv_tile(kv, t->base, t->blocks[nxt / bs], t->kv_head);
            if (direct) {
                pf.p = np; /* spread over this block's steps */
                pf.end = np + kv->tile_bytes;
            } else {
                prefetch_tile((const uint8_t *)np, kv->tile_bytes);
            }
        }
        if (direct) {
            int j0 = s0 % bs;
            struct src sr = {.bs = bs};
            if (kv->type == ANVIL_TYPE_F16) {
                sr.k = (const uint16_t *)tile + j0;
                sr.v = (const uint16_t *)(tile + kv->v_off) + (size_t)j0 * hd;
            } else {
                sr.k = (const int8_t *)tile + j0;
                sr.v = (const int8_t *)(tile + kv->v_off) + (size_t)j0 * hd;
                sr.ks = (const uint16_t *)(tile + kv->ks_off) + j0;
                sr.vs = (const uint16_t *)(tile + kv->vs_off) + j0;
            }
            int valid = t->pos + 1 - s0, first = kn_attn_lo(t, 0) - s0;
            if (valid > SUB) valid = SUB;
            if (first < 0) first = 0;
            (kv->type == ANVIL_TYPE_F16 ? step_row_f16 : step_row_q8)(
                t->q, cur->m, b->L, cur->acc, G, &sr, hd, first, valid, t->scale, &pf);
            pf_issue(&pf, 1 << 20); /* whatever the loops left (short steps) */
            continue;
        }
        /* a prefill tile (or a group of more than QGROUP heads): the
         * step's keys are converted to float once for all rows */
        load_step(kv, tile, s0 % bs, b->K, b->V, b->Ks, b->Vs);
        struct src sb = {.k = b->K, .v = b->V, .ks = b->Ks, .vs = b->Vs, .bs = SUB};
        const int mode = kv->type == ANVIL_TYPE_F16 ? SRC_BUF : SRC_BUF8;
        /* F16 with head_dim <= 128: two steps at once (both buffers fit
         * in L1), sharing each broadcast q element between them */
        const bool two = kv->type == ANVIL_TYPE_F16 && hd <= 128 && s0 + SUB < k1;
        struct src sb2 = {.k = b->K2, .v = b->V2, .bs = SUB};
        if (two) {
            int s1 = s0 + SUB;
            const uint8_t *tile1 = kn_kv_tile(kv, t->base, t->blocks[s1 / bs], t->kv_head);
            if (s1 % bs == 0 && s1 + bs < k1)
                prefetch_tile(kn_kv_tile(kv, t->base, t->blocks[s1 / bs + 1], t->kv_head), kv->tile_bytes);
            load_step(kv, tile1, s1 % bs, b->K2, b->V2, NULL, NULL);
        }
        const int nsteps = two ? 2 : 1;
        int first[2][KN_ATTN_MAXQ], valid[2][KN_ATTN_MAXQ];
        for (int r = 0; r < t->n_rows; r++)
            for (int k = 0; k < nsteps; k++) {
                int sk = s0 + k * SUB;
                int v = t->pos + r + 1 - sk, f = kn_attn_lo(t, r) - sk;
                valid[k][r] = v > SUB ? SUB : v;
                first[k][r] = f < 0 ? 0 : f;
            }
        if (mode != SRC_BUF || (size_t)nsteps * 2 * SUB * hd * sizeof(float) <= 16384) {
            /* the step buffers stay in L1 next to a row's accumulators:
             * row by row, each row's scores, softmax and P.V at once */
            for (int r = 0; r < t->n_rows; r++) {
                bool in0 = first[0][r] < valid[0][r], in1 = two && first[1][r] < valid[1][r];
                int i = r * G;
                const float *qr = t->q + (size_t)r * t->q_stride;
                float *mr = cur->m + i, *ar = cur->acc + (size_t)i * hd;
                __m512 *lr = b->L + i;
                if (in0 && in1)
                    step_row_buf2(qr, mr, lr, ar, G, &sb, &sb2, hd, first[0][r], valid[0][r], valid[1][r],
                                  t->scale);
                else if (in0 || in1)
                    (mode == SRC_BUF ? step_row_buf : step_row_buf8)(qr, mr, lr, ar, G, in0 ? &sb : &sb2, hd,
                                                                      first[!in0][r], valid[!in0][r],
                                                                      t->scale, NULL);
            }
        } else {
            /* F16 buffers too big for that (head_dim 256: 16 KiB each):
             * every row's scores first, then the softmax and P.V step by
             * step, row by row, so that K (then V) stays in L1 while all
             * rows run over it instead of being evicted by each row's
             * accumulators in turn (faster at head_dim 256 and at 128 with
             * two steps, no gain for Q8_0: commit 43cd0e0). Per query vector the
             * operations and their order are those of the row path. */
            for (int r = 0; r < t->n_rows; r++) {
                bool in0 = first[0][r] < valid[0][r], in1 = two && first[1][r] < valid[1][r];
                const float *qr = t->q + (size_t)r * t->q_stride;
                __m512 *o0 = b->S[0] + r * G, *o1 = b->S[1] + r * G;
                if (in0 && in1) { /* both steps' K fit in L1 (head_dim <= 128) */
                    int g = 0;
                    for (; g + 3 <= G; g += 3) qk_dims2(3, qr + g * hd, b->K, b->K2, hd, o0 + g, o1 + g);
                    if (G - g == 2) qk_dims2(2, qr + g * hd, b->K, b->K2, hd, o0 + g, o1 + g);
                    if (G - g == 1) qk_dims2(1, qr + g * hd, b->K, b->K2, hd, o0 + g, o1 + g);
                } else if (in0 || in1) {
                    qk_row(mode, qr, G, in0 ? &sb : &sb2, hd, in0 ? o0 : o1);
                }
            }
            for (int k = 0; k < nsteps; k++)
                for (int r = 0; r < t->n_rows; r++) {
                    if (first[k][r] >= valid[k][r]) continue;
                    int i = r * G;
                    softmax_pv_row(mode, b->S[k] + i, cur->m + i, b->L + i, cur->acc + (size_t)i * hd,
                                   G, k ? &sb2 : &sb, hd, first[k][r], valid[k][r], t->scale);
                }
        }
        if (two) s0 += SUB; /* the loop adds the second SUB */
    }
    for (int i = 0; i < t->n_rows * G; i++) cur->l[i] = _mm512_reduce_add_ps(b->L[i]);
}

/* (m, l, acc) = fold((m, l, acc), (cm, cl, cacc)); the reference's merge. */
static void fold(float *m, float *l, float *acc, float cm, float cl, const float *cacc, int hd) {
    float mx = *m > cm ? *m : cm;
    float a = expf(*m - mx), b = expf(cm - mx);
    *m = mx;
    *l = *l * a + cl * b;
    __m512 av = _mm512_set1_ps(a), bv = _mm512_set1_ps(b);
    for (int d = 0; d < hd; d += 16)
        _mm512_storeu_ps(acc + d, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(acc + d), av),
                                                _mm512_mul_ps(_mm512_loadu_ps(cacc + d), bv)));
}

static void finish(float l, const float *acc, float *out, int hd) {
    __m512 inv = _mm512_set1_ps(1.0f / l);
    for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(out + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), inv));
}

/* The fold driver's primitive: the step buffers live in this frame. */
static void chunk_pass(const struct kn_attn_task *t, int c, struct kn_attn_states *cur) {
    struct bufs b;
    chunk_pass_buf(t, c, cur, &b);
}

static const struct kn_attn_prims prims = {.chunk_pass = chunk_pass, .fold = fold, .finish = finish};

static void attn_avx512(const struct kn_attn_task *t) { kn_attn_fold_attn(&prims, t); }
static void partial_avx512(const struct kn_attn_task *t) { kn_attn_fold_partial(&prims, t); }
static void reduce_avx512(const struct kn_attn_task *t) { kn_attn_fold_reduce(&prims, t); }

const struct kn_attn_ops kn_attn_ops_avx512 = {
    .name = "avx512",
    .attn = attn_avx512,
    .partial = partial_avx512,
    .reduce = reduce_avx512,
    .window = true,
};
