/*
 * attn_hp1.c (avx512) - HP1 gated attention (attn/hp1/attn_hp1.h) with
 * AVX-512 F/BW/VL/DQ + FMA + F16C, F16 and Q8_0 KV.
 *
 * The numerics of cpu/avx2/attn_hp1.c (read its header first): steps of
 * 16 keys, chunks of 256 at fixed positions, split-K with the first
 * chunk's FIR history recomputed. What 16 lanes change:
 *   1. Scores: a step is one vector. Every query vector of the task runs
 *      over the step's K, up to 8 at a time sharing the loads (16
 *      accumulators; q[d] is a broadcast operand of the FMA), so decode
 *      with up to 8 heads per kv head reads and converts every K value
 *      once, in registers; prefill tiles and larger groups convert K once
 *      into a float buffer.
 *   2. Gate: r_{t-j} for the step's 16 lanes is valignd of the step's r
 *      and the 16 r before it, both in registers (no unaligned reload of
 *      just-stored r); the valid lanes are a mask register.
 *   3. PV step by step, not in spans: avx2 gates a span of up to 64 keys
 *      and runs its PV one span later, reading only the V rows some gate
 *      asked for, prefetched meanwhile. Here each step's PV runs right
 *      after its gate, from the tile its K came from, while the whole next
 *      tile (K and V) streams in a few lines per loop iteration. The span
 *      pipeline pays for its saved V rows with V read from memory a
 *      second time (the KV of the other layers flushes the cache between
 *      gate and PV), so on AVX-512 machines the step path is the faster
 *      one at every sparsity from 0 to 90% zeros, dense HP1 at about the
 *      softmax kernel's speed (commit 9fe5f67, bench/results/
 *      hp1-attention-avx512-2026-11-27.jsonl). Sparsity still saves the
 *      FMAs:
 *      a step walks the union of its row's masks, merge-masked per query
 *      vector, and skips a step no query vector needs.
 * The arithmetic is avx2's, lane for lane: a_u = FMA chain over d = u mod
 * 2 in d order, s = (a_0 + a_1) * scale; z by FMA in tap order; the clamp
 * by max/min; acc = fma(p_t, v_t, acc) in ascending t; the chunk sum by
 * plain adds. So this table gives avx2's bits (the tests check it while
 * both keep this arithmetic), and like every variant it is bit-exact with
 * itself across splits, batch, tiles and sparse vs dense PV.
 */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "anvil.h"
#include "core/core.h"
#include "attn/hp1/attn_hp1.h"

#define SUB KN_ATTN_SUB
#define HDMAX KN_ATTN_MAX_HEAD_DIM
#define MAXQ KN_ATTN_MAXQ
#define HIST 16 /* r of the step before, then the step's 16: both aligned vectors */
#define QMAX 8  /* query vectors sharing one pass over a step's K */

_Static_assert(KN_ATTN_SUB == 16, "one step is one 16-lane vector");
_Static_assert(KN_HP1_MAX_TAPS - 1 <= HIST, "FIR history fits the buffer");
_Static_assert(KN_HP1_MAX_TAPS <= 8, "gate() unrolls taps 1..7");

/* ---------------------------------------------------------------------- */
/* loads */

static inline __m512 load_f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline __m512 load_i8x16(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

/* Keys [j0, j0 + 16) of a tile: K^T as float into Kb (hd, 16). */
static void load_k(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, float *restrict Kb) {
    int bs = kv->block_size, hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *kt = (const uint16_t *)tile + j0;
        for (int d = 0; d < hd; d++) _mm512_store_ps(Kb + d * SUB, load_f16x16(kt + (size_t)d * bs));
        return;
    }
    const int8_t *kq = (const int8_t *)tile + j0;
    const uint16_t *ks = (const uint16_t *)(tile + kv->ks_off) + j0;
    for (int g = 0; g < hd / 32; g++) {
        __m512 s = load_f16x16(ks + (size_t)g * bs);
        for (int d = g * 32; d < g * 32 + 32; d++)
            _mm512_store_ps(Kb + d * SUB, _mm512_mul_ps(load_i8x16(kq + (size_t)d * bs), s));
    }
}

/* ---------------------------------------------------------------------- */
/* scores */

/* Where a step's K comes from (as in avx2): the float buffer of load_k,
 * or the tile itself, converted in registers as it is read. Both give the
 * same floats (Q8_0: quant times scale, exact in float). */
enum { KSRC_BUF, KSRC_F16, KSRC_Q8 };

struct ksrc {
    const float *buf;   /* KSRC_BUF: (hd, 16) */
    const uint8_t *k;   /* else: K^T at key j0 of the tile, rows bs apart */
    const uint16_t *ks; /* KSRC_Q8: the scales at key j0, rows bs apart */
    int bs;
};

/* Lines to prefetch (the next tile), issued a couple at a time from
 * inside the score and PV loops rather than in one burst: a burst of a
 * tile fills the line-fill buffers and stalls the loads of the step being
 * computed, so memory and arithmetic take turns (the avx512 softmax
 * kernel's finding, cpu/avx512/attn.c). */
struct pfq {
    const char *k, *k_end;   /* a range of lines: the next tile, into L1 */
    const char *k2, *k2_end; /* the tile PF_AHEAD blocks on, into L2 (the
                              * softmax kernel's lookahead, cpu/avx512/attn.c) */
};
enum { PF_AHEAD = 4 };

static inline __attribute__((always_inline)) void pf_issue(struct pfq *q, int n) {
    for (int i = 0; i < n && q->k < q->k_end; i++, q->k += 64) _mm_prefetch(q->k, _MM_HINT_T0);
    for (int i = 0; i < n && q->k2 < q->k2_end; i++, q->k2 += 64) _mm_prefetch(q->k2, _MM_HINT_T1);
}

static inline __attribute__((always_inline)) void pf_flush(struct pfq *q) { pf_issue(q, 1 << 20); }

/* r of the step's 16 keys for nq (1..QMAX) query vectors q + k*hd (k <
 * nq: consecutive heads of one row) into r + k*(HIST + SUB). */
static inline __attribute__((always_inline)) void
qk_group(const int mode, const int nq, const float *q, const struct ksrc *src, int hd, float scale,
         bool relu, float *r, struct pfq *pf) {
    __m512 a[QMAX][2]; /* [query][d mod 2] */
    __m512 sc = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int k = 0; k < nq; k++) a[k][0] = a[k][1] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
        if (mode == KSRC_Q8 && d % 32 == 0) sc = load_f16x16(src->ks + (size_t)(d / 32) * src->bs);
        if (mode != KSRC_BUF) pf_issue(pf, 1);
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            __m512 kv;
            if (mode == KSRC_BUF) {
                kv = _mm512_load_ps(src->buf + (d + u) * SUB);
            } else if (mode == KSRC_F16) {
                kv = load_f16x16((const uint16_t *)src->k + (size_t)(d + u) * src->bs);
            } else {
                kv = _mm512_mul_ps(load_i8x16((const int8_t *)src->k + (size_t)(d + u) * src->bs), sc);
            }
#pragma GCC unroll 8
            for (int k = 0; k < nq; k++)
                a[k][u] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)k * hd + d + u]), kv, a[k][u]);
        }
    }
    const __m512 s512 = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int k = 0; k < nq; k++) {
        __m512 s = _mm512_mul_ps(_mm512_add_ps(a[k][0], a[k][1]), s512);
        /* max(s, 0) is s > 0 ? s : 0, NaN included (maxps returns its second operand) */
        if (relu) s = _mm512_max_ps(s, zero);
        _mm512_store_ps(r + (size_t)k * (HIST + SUB) + HIST, s);
    }
}

#define QK_CASE(M, N)                                                                             \
    case N:                                                                                       \
        qk_group(M, N, qg, src, hd, scale, relu, rb[g], pf);                                      \
        break

static inline __attribute__((always_inline)) void
qk_mode(const int mode, const float *q, int G, int hd, const struct ksrc *src, float scale,
        bool relu, float (*rb)[HIST + SUB], struct pfq *pf) {
    for (int g = 0; g < G; g += QMAX) {
        const float *qg = q + (size_t)g * hd;
        switch (G - g < QMAX ? G - g : QMAX) {
            QK_CASE(mode, 1);
            QK_CASE(mode, 2);
            QK_CASE(mode, 3);
            QK_CASE(mode, 4);
            QK_CASE(mode, 5);
            QK_CASE(mode, 6);
            QK_CASE(mode, 7);
            QK_CASE(mode, 8);
        }
    }
}
#undef QK_CASE

/* Scores and ReLU of a step's 16 keys for the G query vectors of one row:
 * r into rb[g] + HIST. */
static void qk_row(int mode, const float *q, int G, int hd, const struct ksrc *src, float scale,
                   bool relu, float (*rb)[HIST + SUB], struct pfq *pf) {
    if (mode == KSRC_BUF) qk_mode(KSRC_BUF, q, G, hd, src, scale, relu, rb, pf);
    else if (mode == KSRC_F16) qk_mode(KSRC_F16, q, G, hd, src, scale, relu, rb, pf);
    else qk_mode(KSRC_Q8, q, G, hd, src, scale, relu, rb, pf);
}

/* The K source of keys [j0, j0 + 16) of a tile for a task of nq query
 * vectors: in registers when one pass of qk_group covers them all, else
 * the buffer (filled here), which the passes share. */
static int k_source(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, int nq, float *Kb,
                    struct ksrc *src) {
    src->bs = kv->block_size;
    if (nq > QMAX) {
        load_k(kv, tile, j0, Kb);
        src->buf = Kb;
        return KSRC_BUF;
    }
    if (kv->type == ANVIL_TYPE_F16) {
        src->k = tile + (size_t)j0 * 2;
        return KSRC_F16;
    }
    src->k = tile + j0;
    src->ks = (const uint16_t *)(tile + kv->ks_off) + j0;
    return KSRC_Q8;
}

/* ---------------------------------------------------------------------- */
/* gate */

/* The gate of one query vector over a step: rb holds r_{t-16..t+15}
 * (aligned). p[0, 16) and the mask of p != 0 among the first `valid`
 * lanes; the step's r become the history. valignd(cur, prev, 16 - j)
 * is lane i's r_{t-j}: prev[16 - j + i] for i < j, else cur[i - j]. */
static inline uint32_t gate(float *rb, const float *c, int K, __m512 lo, __m512 hi, __m512 gamma,
                            int valid, float *p) {
    __m512i prev = _mm512_load_si512(rb), cur = _mm512_load_si512(rb + HIST);
    __m512 z = _mm512_mul_ps(_mm512_set1_ps(c[0]), _mm512_castsi512_ps(cur));
#define TAP(j)                                                                                    \
    if (K > j)                                                                                    \
        z = _mm512_fmadd_ps(_mm512_set1_ps(c[j]),                                                 \
                            _mm512_castsi512_ps(_mm512_alignr_epi32(cur, prev, 16 - j)), z)
    TAP(1);
    TAP(2);
    TAP(3);
    TAP(4);
    TAP(5);
    TAP(6);
    TAP(7);
#undef TAP
    _mm512_store_si512(rb, cur);
    /* maxps/minps return the second operand unless the first is
     * greater/less: exactly x > lo ? x : lo and x < hi ? x : hi */
    z = _mm512_min_ps(_mm512_max_ps(z, lo), hi);
    __mmask16 vm = (__mmask16)((1u << valid) - 1);
    __m512 pv = _mm512_maskz_mul_ps(vm, gamma, z); /* lanes past the row's last key: +0 */
    _mm512_store_ps(p, pv);
    return _mm512_mask_cmp_ps_mask(vm, pv, _mm512_setzero_ps(), _CMP_NEQ_UQ);
}

/* ---------------------------------------------------------------------- */
/* PV */

struct ws {
    float K[HDMAX * SUB] __attribute__((aligned(64)));
    float acc[MAXQ * HDMAX] __attribute__((aligned(64))); /* the chunk's partials */
    float run[MAXQ * HDMAX] __attribute__((aligned(64))); /* attn: their sum */
    float rb[MAXQ][HIST + SUB] __attribute__((aligned(64)));
    float p[MAXQ][SUB] __attribute__((aligned(64))); /* a step's gate weights */
    struct pfq pf;
};

/* PV of one step for nq (1..4) query vectors of one row, straight after
 * their gate: acc_k[d0, d0 + 16*nb) += p_k[j] * v_j over the keys j of
 * `keys` (the union of the vectors' masks) in ascending order, V read from
 * the tile (converted in registers to the floats of avx2's load_v_row) once for
 * the nq vectors. masked: vector k's FMA merges under bit j of m[k], so a
 * key outside its own mask leaves its accumulators as they were (the
 * bits of WALK_SPARSE / WALK_MASKED); else every key of `keys` (WALK_ALL). */
static inline __attribute__((always_inline)) void
pv_step_cols(const int q8, const int masked, const int nq, const int nb, float *restrict acc,
             const float *const *p, const uint32_t *m, uint32_t keys,
             const struct kn_kv_layout *kv, const uint8_t *tile, int j0, int d0, struct pfq *pf) {
    int hd = kv->head_dim;
    __m512 c[4][4];
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) c[k][b] = _mm512_load_ps(acc + (size_t)k * hd + d0 + 16 * b);
    while (keys) {
        int j = __builtin_ctz(keys);
        keys &= keys - 1;
        pf_issue(pf, 2);
        __mmask16 mk[4];
        if (masked)
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++) mk[k] = (__mmask16)-(int)((m[k] >> j) & 1);
        __m512 sc = _mm512_setzero_ps();
        if (q8) /* one 32-dim scale group per pair of blocks (d0 % 32 == 0) */
            sc = _mm512_set1_ps(_cvtsh_ss(((const uint16_t *)(tile + kv->vs_off))[(size_t)(d0 / 32) * kv->block_size + j0 + j]));
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) {
            __m512 v;
            if (q8) {
                if (b == 2) /* the next 32-dim group */
                    sc = _mm512_set1_ps(_cvtsh_ss(((const uint16_t *)(tile + kv->vs_off))[(size_t)((d0 + 32) / 32) * kv->block_size + j0 + j]));
                v = _mm512_mul_ps(load_i8x16((const int8_t *)(tile + kv->v_off) + (size_t)(j0 + j) * hd + d0 + 16 * b), sc);
            } else {
                v = load_f16x16((const uint16_t *)(tile + kv->v_off) + (size_t)(j0 + j) * hd + d0 + 16 * b);
            }
            __asm__("" : "+v"(v)); /* one load and conversion for the nq FMAs */
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++)
                c[k][b] = masked ? _mm512_mask3_fmadd_ps(_mm512_set1_ps(p[k][j]), v, c[k][b], mk[k])
                                 : _mm512_fmadd_ps(_mm512_set1_ps(p[k][j]), v, c[k][b]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) _mm512_store_ps(acc + (size_t)k * hd + d0 + 16 * b, c[k][b]);
}

static inline __attribute__((always_inline)) void
pv_step_q(const int q8, const int masked, const int nq, float *acc, const float *const *p,
          const uint32_t *m, uint32_t keys, const struct kn_kv_layout *kv, const uint8_t *tile,
          int j0, struct pfq *pf) {
    int hd = kv->head_dim, d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) pv_step_cols(q8, masked, nq, 4, acc, p, m, keys, kv, tile, j0, d0, pf);
    if (d0 < hd) pv_step_cols(q8, masked, nq, 2, acc, p, m, keys, kv, tile, j0, d0, pf);
}

#define PV_STEP_CASE(Q8, MK, N) \
    case N: pv_step_q(Q8, MK, N, acc, pp, m, keys, kv, tile, j0, pf); break
#define PV_STEP_SWITCH(Q8, MK) \
    switch (nq) { PV_STEP_CASE(Q8, MK, 1); PV_STEP_CASE(Q8, MK, 2); PV_STEP_CASE(Q8, MK, 3); PV_STEP_CASE(Q8, MK, 4); }

/* The step's PV for nq (1..4) vectors with masks m[k]: over the union of
 * the masks, merged per vector unless every mask is that union. */
static void pv_step_group(int q8, int nq, float *acc, const float *const *pp, const uint32_t *m,
                          const struct kn_kv_layout *kv, const uint8_t *tile, int j0,
                          struct pfq *pf) {
    uint32_t keys = 0, same = ~0u;
    for (int k = 0; k < nq; k++) keys |= m[k];
    for (int k = 0; k < nq; k++) same &= ~(m[k] ^ keys);
    if (!keys) return;
    int masked = same != ~0u;
    if (q8) {
        if (masked) PV_STEP_SWITCH(1, 1) else PV_STEP_SWITCH(1, 0)
    } else {
        if (masked) PV_STEP_SWITCH(0, 1) else PV_STEP_SWITCH(0, 0)
    }
}
#undef PV_STEP_SWITCH
#undef PV_STEP_CASE

/* Chunk c of every row: the partials into w->acc, step by step (the
 * header, point 3). The history in w->rb must be that of key c * CHUNK;
 * it is left for the next chunk. KN_HP1_PV_DENSE walks every valid key,
 * KN_HP1_PV_NONE only gates (and prefetches K alone). */
static void chunk_pass(const struct kn_hp1_task *t, int c, struct ws *w) {
    const struct kn_attn_task *a = &t->at;
    const struct kn_kv_layout *kv = a->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = a->group, K = t->hp.n_taps;
    int nq = a->n_rows * G, n_kv_max = a->pos + a->n_rows;
    int k0 = c * KN_ATTN_CHUNK;
    int k1 = k0 + KN_ATTN_CHUNK < n_kv_max ? k0 + KN_ATTN_CHUNK : n_kv_max;
    const __m512 lo = _mm512_set1_ps(t->hp.lo), hi = _mm512_set1_ps(t->hp.hi);
    const __m512 gamma = _mm512_set1_ps(t->hp.gamma);
    const int q8 = kv->type == ANVIL_TYPE_Q8_0;
    struct pfq *pf = &w->pf;
    const size_t pf_bytes = t->pv == KN_HP1_PV_NONE ? kv->v_off : kv->tile_bytes;
    pf->k = pf->k_end = pf->k2 = pf->k2_end = NULL;
    memset(w->acc, 0, (size_t)nq * hd * sizeof(float));
    for (int s = k0; s < k1; s += SUB) {
        const uint8_t *tile = kn_kv_tile(kv, a->base, a->blocks[s / bs], a->kv_head);
        int j0 = s % bs, nxt = s + bs - j0;
        if (j0 == 0 && nxt < n_kv_max) { /* the next tile, spread over this block's loops */
            pf_flush(pf); /* what the last block's loops left (sparse PV walks few keys) */
            pf->k = (const char *)kn_kv_tile(kv, a->base, a->blocks[nxt / bs], a->kv_head);
            pf->k_end = pf->k + pf_bytes;
        }
        if (j0 == 0 && s + PF_AHEAD * bs < n_kv_max) {
            pf->k2 = (const char *)kn_kv_tile(kv, a->base, a->blocks[s / bs + PF_AHEAD], a->kv_head);
            pf->k2_end = pf->k2 + pf_bytes;
        }
        struct ksrc src;
        int mode = k_source(kv, tile, j0, nq, w->K, &src);
        int r0 = s - a->pos > 0 ? s - a->pos : 0;
        for (int r = r0; r < a->n_rows; r++) {
            int valid = a->pos + r + 1 - s;
            if (valid > SUB) valid = SUB;
            qk_row(mode, a->q + (size_t)r * a->q_stride, G, hd, &src, a->scale, t->hp.relu, w->rb + r * G, pf);
            const float *pp[MAXQ];
            uint32_t m[MAXQ];
            uint32_t vbits = ((1u << valid) - 1) & 0xffff;
            for (int g = 0; g < G; g++) {
                int k = r * G + g;
                m[g] = gate(w->rb[k], t->hp.taps + (size_t)g * K, K, lo, hi, gamma, valid, w->p[k]);
                if (t->pv == KN_HP1_PV_DENSE) m[g] = vbits;
                pp[g] = w->p[k];
            }
            if (t->pv == KN_HP1_PV_NONE) continue;
            for (int g = 0; g < G; g += 4)
                pv_step_group(q8, G - g < 4 ? G - g : 4, w->acc + (size_t)(r * G + g) * hd, pp + g,
                              m + g, kv, tile, j0, pf);
        }
    }
    pf_flush(pf);
}

/* The r of the HIST keys before k0 for every query vector: zeros before
 * the first key, else the step [k0 - 16, k0) recomputed. */
static void init_history(const struct kn_hp1_task *t, int k0, struct ws *w) {
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group, nq = a->n_rows * G;
    if (k0 == 0) {
        for (int k = 0; k < nq; k++) _mm512_store_ps(w->rb[k], _mm512_setzero_ps());
        return;
    }
    int s0 = k0 - SUB, bs = a->kv->block_size;
    struct ksrc src;
    int mode = k_source(a->kv, kn_kv_tile(a->kv, a->base, a->blocks[s0 / bs], a->kv_head), s0 % bs,
                        nq, w->K, &src);
    struct pfq pf = {0};
    for (int r = 0; r < a->n_rows; r++)
        qk_row(mode, a->q + (size_t)r * a->q_stride, G, hd, &src, a->scale, t->hp.relu, w->rb + r * G, &pf);
    for (int k = 0; k < nq; k++) _mm512_store_ps(w->rb[k], _mm512_load_ps(w->rb[k] + HIST));
}
/* ---------------------------------------------------------------------- */
/* the table */

/* Debug builds fill the workspace with NaN, so a read of anything the
 * kernel did not write this call shows in the tests' outputs. */
static void ws_poison(struct ws *w) {
#ifdef ANVIL_DEBUG
    memset(w, 0xff, sizeof(*w));
#else
    (void)w;
#endif
}

static void attn_avx512(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group, nq = a->n_rows * G;
    struct ws w;
    ws_poison(&w);
    memset(w.run, 0, (size_t)nq * hd * sizeof(float));
    init_history(t, 0, &w);
    int nc = kn_attn_n_chunks(a->pos + a->n_rows);
    for (int c = 0; c < nc; c++) {
        chunk_pass(t, c, &w);
        for (int r = 0; r < a->n_rows; r++) {
            if (a->pos + r + 1 <= c * KN_ATTN_CHUNK) continue; /* the row ends before chunk c */
            float *run = w.run + (size_t)r * G * hd;
            const float *acc = w.acc + (size_t)r * G * hd;
            for (int i = 0; i < G * hd; i += 16)
                _mm512_store_ps(run + i, _mm512_add_ps(_mm512_load_ps(run + i), _mm512_load_ps(acc + i)));
        }
    }
    for (int r = 0; r < a->n_rows; r++)
        memcpy(a->out + (size_t)r * a->out_stride, w.run + (size_t)r * G * hd, (size_t)G * hd * sizeof(float));
}

static void partial_avx512(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group;
    size_t rec = kn_hp1_rec_floats(G, hd);
    struct ws w;
    ws_poison(&w);
    init_history(t, a->c0 * KN_ATTN_CHUNK, &w);
    for (int c = a->c0; c < a->c1; c++) {
        chunk_pass(t, c, &w);
        memcpy(a->part + (size_t)(c - a->c0) * rec, w.acc, (size_t)G * hd * sizeof(float));
    }
}

static void reduce_avx512(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group;
    size_t rec = kn_hp1_rec_floats(G, hd);
    for (int g = 0; g < G; g++) {
        float *o = a->out + (size_t)g * hd;
        for (int d = 0; d < hd; d += 16) {
            __m512 s = _mm512_setzero_ps();
            for (int c = a->c0; c < a->c1; c++)
                s = _mm512_add_ps(s, _mm512_loadu_ps(a->part + (size_t)(c - a->c0) * rec + (size_t)g * hd + d));
            _mm512_storeu_ps(o + d, s);
        }
    }
}

const struct kn_hp1_ops kn_hp1_ops_avx512 = {
    .name = "avx512",
    .attn = attn_avx512,
    .partial = partial_avx512,
    .reduce = reduce_avx512,
};
