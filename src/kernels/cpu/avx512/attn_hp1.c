/*
 * attn_hp1.c (avx512) - HP1 gated attention (kernels/attn_hp1.h) with
 * AVX-512 F/BW/VL/DQ + FMA + F16C, F16 and Q8_0 KV.
 *
 * The structure of cpu/avx2/attn_hp1.c (read its header first): steps of
 * 16 keys, chunks of 256 at fixed positions, PV in spans of up to 64 keys
 * one span behind the gate, only the V rows in the union of the group's
 * masks read, split-K with the first chunk's FIR history recomputed. What
 * 16 lanes change:
 *   1. Scores: a step is one vector. Every query vector of the task runs
 *      over the step's K, up to 8 at a time sharing the loads (16
 *      accumulators; q[d] is a broadcast operand of the FMA), so decode
 *      with up to 8 heads per kv head reads and converts every K value
 *      once, in registers; prefill tiles and larger groups convert K once
 *      into a float buffer.
 *   2. Gate: r_{t-j} for the step's 16 lanes is valignd of the step's r
 *      and the 16 r before it, both in registers (no unaligned reload of
 *      just-stored r); the valid lanes are a mask register.
 *   3. PV: up to 128 columns in 8 accumulators, so head_dim 128 walks a
 *      mask once (avx2 walks it twice), and the F16 sparse walks read the
 *      tiles directly up to head_dim 128 (span_pv). The masked walk is a
 *      merge-masked FMA.
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
#include "kernels/attn_hp1.h"

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

/* V row j of a tile as float into dst (hd): the floats of avx2's load_v_row. */
static inline void load_v_row(const struct kn_kv_layout *kv, const uint8_t *tile, int j,
                              float *restrict dst) {
    int hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *src = (const uint16_t *)(tile + kv->v_off) + (size_t)j * hd;
        for (int d = 0; d < hd; d += 16) _mm512_store_ps(dst + d, load_f16x16(src + d));
        return;
    }
    const int8_t *src = (const int8_t *)(tile + kv->v_off) + (size_t)j * hd;
    const uint16_t *vs = (const uint16_t *)(tile + kv->vs_off) + j;
    for (int g = 0; g < hd / 32; g++) {
        __m512 sc = _mm512_set1_ps(_cvtsh_ss(vs[(size_t)g * kv->block_size]));
        _mm512_store_ps(dst + g * 32, _mm512_mul_ps(load_i8x16(src + g * 32), sc));
        _mm512_store_ps(dst + g * 32 + 16, _mm512_mul_ps(load_i8x16(src + g * 32 + 16), sc));
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

/* Lines to prefetch, issued a couple at a time from inside the score
 * loop (decode reading K in registers) rather than in one burst: a burst
 * of a tile or a span's V rows fills the line-fill buffers and stalls
 * the loads of the step being computed, so memory and arithmetic take
 * turns (the avx512 softmax kernel's finding, cpu/avx512/attn.c). The
 * next tile's K goes first (the next step needs it), then the V rows the
 * last gate asked for (PV needs them one span later). */
#define PFQ_LINES 256

struct pfq {
    const char *k, *k_end; /* the next tile's K, a range of lines */
    int v0, v1;            /* v[v0, v1): V lines still to issue */
    const char *v[PFQ_LINES];
};

static inline __attribute__((always_inline)) void pf_issue(struct pfq *q, int n) {
    for (int i = 0; i < n; i++) {
        if (q->k < q->k_end) {
            _mm_prefetch(q->k, _MM_HINT_T0);
            q->k += 64;
        } else if (q->v0 < q->v1) {
            _mm_prefetch(q->v[q->v0++], _MM_HINT_T0);
        } else {
            return;
        }
    }
}

static void pf_flush(struct pfq *q) { pf_issue(q, 1 << 20); }

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
        if (mode != KSRC_BUF) pf_issue(pf, 2);
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

/* Spans and walks as in avx2: VBUF_FLOATS / head_dim keys per span (64 at
 * head_dim 64, 32 at 128; 16 KiB of float V, in L1), one walk per vector
 * and span (WALK_SPARSE: the set bits of m lowest first; WALK_MASKED:
 * every j < n with the terms of clear bits left out; WALK_ALL: every
 * j < n). All give the same bits (attn_hp1.h, step 5). */
#define VBUF_FLOATS 4096
#define SPAN_MAX (VBUF_FLOATS / 64)

enum { WALK_SPARSE, WALK_MASKED, WALK_ALL };

/* acc[d0, d0 + 16*nb) += p_j * V[j][d0, ...] over the walk's j, nb = 2, 4
 * or 8. Named accumulators, as in avx2 (gcc keeps an array in memory in
 * the sparse loop). The masked walk merges with the mask of bit j: a
 * clear bit leaves the accumulators as they were, so a row that no walk
 * converted cannot leak in. */
static inline __attribute__((always_inline)) void
pv_cols(const int mode, const int nb, float *restrict acc, const float *restrict p, uint64_t m,
        int n, const float *restrict Vb, int hd, int d0) {
    float *a = acc + d0;
    __m512 c0 = _mm512_load_ps(a), c1 = _mm512_load_ps(a + 16), c2 = c0, c3 = c0, c4 = c0, c5 = c0,
           c6 = c0, c7 = c0;
    if (nb > 2) {
        c2 = _mm512_load_ps(a + 32);
        c3 = _mm512_load_ps(a + 48);
    }
    if (nb > 4) {
        c4 = _mm512_load_ps(a + 64);
        c5 = _mm512_load_ps(a + 80);
        c6 = _mm512_load_ps(a + 96);
        c7 = _mm512_load_ps(a + 112);
    }
#define HP1_FMA(F)                                                                                \
    do {                                                                                          \
        c0 = F(c0, vr);                                                                           \
        c1 = F(c1, vr + 16);                                                                      \
        if (nb > 2) {                                                                             \
            c2 = F(c2, vr + 32);                                                                  \
            c3 = F(c3, vr + 48);                                                                  \
        }                                                                                         \
        if (nb > 4) {                                                                             \
            c4 = F(c4, vr + 64);                                                                  \
            c5 = F(c5, vr + 80);                                                                  \
            c6 = F(c6, vr + 96);                                                                  \
            c7 = F(c7, vr + 112);                                                                 \
        }                                                                                         \
    } while (0)
#define HP1_PLAIN(c, ptr) _mm512_fmadd_ps(pj, _mm512_load_ps(ptr), c)
#define HP1_MERGE(c, ptr) _mm512_mask3_fmadd_ps(pj, _mm512_load_ps(ptr), c, mj)
    if (mode == WALK_ALL) {
        for (int j = 0; j < n; j++) {
            __m512 pj = _mm512_set1_ps(p[j]);
            const float *vr = Vb + j * hd + d0;
            HP1_FMA(HP1_PLAIN);
        }
    } else if (mode == WALK_MASKED) {
        for (int j = 0; j < n; j++) {
            __m512 pj = _mm512_set1_ps(p[j]);
            __mmask16 mj = (__mmask16)-(int)((m >> j) & 1);
            const float *vr = Vb + j * hd + d0;
            HP1_FMA(HP1_MERGE);
        }
    } else {
        while (m) {
            int j = __builtin_ctzll(m);
            m &= m - 1;
            __m512 pj = _mm512_set1_ps(p[j]);
            const float *vr = Vb + j * hd + d0;
            HP1_FMA(HP1_PLAIN);
        }
    }
#undef HP1_PLAIN
#undef HP1_MERGE
    _mm512_store_ps(a, c0);
    _mm512_store_ps(a + 16, c1);
    if (nb > 2) {
        _mm512_store_ps(a + 32, c2);
        _mm512_store_ps(a + 48, c3);
    }
    if (nb > 4) {
        _mm512_store_ps(a + 64, c4);
        _mm512_store_ps(a + 80, c5);
        _mm512_store_ps(a + 96, c6);
        _mm512_store_ps(a + 112, c7);
    }
}

/* Column passes of 128, then 64, then 32 (hd is a multiple of 32). */
static inline __attribute__((always_inline)) void
pv_vec(const int mode, float *acc, const float *p, uint64_t m, int n, const float *Vb, int hd) {
    int d0 = 0;
    for (; d0 + 128 <= hd; d0 += 128) pv_cols(mode, 8, acc, p, m, n, Vb, hd, d0);
    if (d0 + 64 <= hd) {
        pv_cols(mode, 4, acc, p, m, n, Vb, hd, d0);
        d0 += 64;
    }
    if (d0 < hd) pv_cols(mode, 2, acc, p, m, n, Vb, hd, d0);
}

/* The sparse walk of an F16 span straight from the tiles: V row j of the
 * span at vbase[j / 16] + (j % 16) * hd halves, converted in registers
 * (the floats of load_v_row); same FMAs in the same order as pv_cols'
 * WALK_SPARSE. */
static inline __attribute__((always_inline)) void
pv_cols_f16(const int nb, float *restrict acc, const float *restrict p, uint64_t m,
            const uint16_t *const *vbase, int hd, int d0) {
    float *a = acc + d0;
    __m512 c0 = _mm512_load_ps(a), c1 = _mm512_load_ps(a + 16), c2 = c0, c3 = c0, c4 = c0, c5 = c0,
           c6 = c0, c7 = c0;
    if (nb > 2) {
        c2 = _mm512_load_ps(a + 32);
        c3 = _mm512_load_ps(a + 48);
    }
    if (nb > 4) {
        c4 = _mm512_load_ps(a + 64);
        c5 = _mm512_load_ps(a + 80);
        c6 = _mm512_load_ps(a + 96);
        c7 = _mm512_load_ps(a + 112);
    }
#define HP1_F16(c, ptr) _mm512_fmadd_ps(pj, load_f16x16(ptr), c)
    while (m) {
        int j = __builtin_ctzll(m);
        m &= m - 1;
        __m512 pj = _mm512_set1_ps(p[j]);
        const uint16_t *vr = vbase[j >> 4] + (size_t)(j & 15) * hd + d0;
        HP1_FMA(HP1_F16);
    }
#undef HP1_F16
#undef HP1_FMA
    _mm512_store_ps(a, c0);
    _mm512_store_ps(a + 16, c1);
    if (nb > 2) {
        _mm512_store_ps(a + 32, c2);
        _mm512_store_ps(a + 48, c3);
    }
    if (nb > 4) {
        _mm512_store_ps(a + 64, c4);
        _mm512_store_ps(a + 80, c5);
        _mm512_store_ps(a + 96, c6);
        _mm512_store_ps(a + 112, c7);
    }
}

static void pv_vec_f16(float *acc, const float *p, uint64_t m, const uint16_t *const *vbase, int hd) {
    int d0 = 0;
    for (; d0 + 128 <= hd; d0 += 128) pv_cols_f16(8, acc, p, m, vbase, hd, d0);
    if (d0 + 64 <= hd) {
        pv_cols_f16(4, acc, p, m, vbase, hd, d0);
        d0 += 64;
    }
    if (d0 < hd) pv_cols_f16(2, acc, p, m, vbase, hd, d0);
}

/* ---------------------------------------------------------------------- */
/* chunks */

struct span {
    const uint8_t *tile[SPAN_MAX / SUB]; /* of each step */
    int j0[SPAN_MAX / SUB];
    int n;        /* keys in the span */
    int buf;      /* its gate results in ws.p[buf], ws.mask[buf] */
    uint64_t all; /* V rows some query vector needs */
};

struct ws {
    float K[HDMAX * SUB] __attribute__((aligned(64)));
    float V[VBUF_FLOATS] __attribute__((aligned(64)));    /* a span's V (n, hd) */
    float acc[MAXQ * HDMAX] __attribute__((aligned(64))); /* the chunk's partials */
    float run[MAXQ * HDMAX] __attribute__((aligned(64))); /* attn: their sum */
    float rb[MAXQ][HIST + SUB] __attribute__((aligned(64)));
    /* gate results of two spans: PV of one, gate of the next */
    float p[2][MAXQ][SPAN_MAX] __attribute__((aligned(64)));
    uint64_t mask[2][MAXQ];  /* p != 0 among the valid keys */
    uint64_t vbits[2][MAXQ]; /* the valid keys */
    struct pfq pf;
};

static size_t v_row_bytes(const struct kn_kv_layout *kv) {
    return kv->type == ANVIL_TYPE_F16 ? (size_t)kv->head_dim * 2 : (size_t)kv->head_dim;
}

static void pf_push(struct pfq *q, const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) {
        if (q->v1 < PFQ_LINES) q->v[q->v1++] = (const char *)p + o;
        else _mm_prefetch((const char *)p + o, _MM_HINT_T0);
    }
}

/* Queue the V rows a span needs (and Q8_0's V scales); the queue must be
 * empty. */
static void prefetch_span(const struct kn_kv_layout *kv, const struct span *sp, struct pfq *q) {
    size_t rb = v_row_bytes(kv);
    uint64_t rows = sp->all;
    q->v0 = q->v1 = 0;
    while (rows) {
        int j = __builtin_ctzll(rows);
        rows &= rows - 1;
        pf_push(q, sp->tile[j / SUB] + kv->v_off + (size_t)(sp->j0[j / SUB] + j % SUB) * rb, rb);
    }
    if (kv->type == ANVIL_TYPE_Q8_0)
        for (int st = 0; st * SUB < sp->n; st++)
            if ((sp->all >> (st * SUB)) & 0xffff)
                pf_push(q, sp->tile[st] + kv->vs_off, kv->tile_bytes - kv->vs_off);
}

/* MASKED walk from this many nonzero p among n keys (as in avx2). */
static inline int masked_min(int n) { return n - n / 4; }

/* F16 sparse walks read the tiles (no float buffer) up to this head_dim:
 * one pass over the mask covers 128 columns here, where avx2 stops at 64
 * because its second pass at 128 cost more than the buffer saved. */
#define DIRECT_MAX_HD 128

static void span_pv(const struct kn_hp1_task *t, struct ws *w, const struct span *sp, int nq) {
    const struct kn_kv_layout *kv = t->at.kv;
    int hd = kv->head_dim;
    bool f16 = kv->type == ANVIL_TYPE_F16;
    uint8_t walk[MAXQ];
    uint64_t sparse_rows = 0;
    int sparse_terms = 0;
    uint64_t rows = f16 ? 0 : sp->all; /* the rows the float buffer must hold */
    for (int k = 0; k < nq; k++) {
        uint64_t m = w->mask[sp->buf][k], vb = w->vbits[sp->buf][k];
        /* the vector's keys in the span are [0, nv): only their p were written */
        int nv = __builtin_popcountll(vb);
        walk[k] = m == vb ? WALK_ALL : __builtin_popcountll(m) >= masked_min(nv) ? WALK_MASKED : WALK_SPARSE;
        if (f16 && walk[k] != WALK_SPARSE) rows |= m;
        if (walk[k] == WALK_SPARSE) {
            sparse_rows |= m;
            sparse_terms += __builtin_popcountll(m);
        }
    }
    /* the avx2 rule: straight from the tiles while a row serves two sparse
     * walks or fewer on average */
    bool direct = f16 && hd <= DIRECT_MAX_HD && sparse_terms <= 2 * __builtin_popcountll(sparse_rows);
    if (f16 && !direct) rows |= sparse_rows;
    while (rows) {
        int j = __builtin_ctzll(rows);
        rows &= rows - 1;
        load_v_row(kv, sp->tile[j / SUB], sp->j0[j / SUB] + j % SUB, w->V + (size_t)j * hd);
    }
    const uint16_t *vbase[SPAN_MAX / SUB];
    if (direct)
        for (int st = 0; st * SUB < sp->n; st++)
            vbase[st] = (const uint16_t *)(sp->tile[st] + kv->v_off) + (size_t)sp->j0[st] * hd;
    for (int k = 0; k < nq; k++) {
        uint64_t m = w->mask[sp->buf][k], vb = w->vbits[sp->buf][k];
        if (!m) continue;
        float *acc = w->acc + (size_t)k * hd;
        const float *p = w->p[sp->buf][k];
        int nv = __builtin_popcountll(vb);
        if (walk[k] == WALK_ALL) pv_vec(WALK_ALL, acc, p, m, nv, w->V, hd);
        else if (walk[k] == WALK_MASKED) pv_vec(WALK_MASKED, acc, p, m, nv, w->V, hd);
        else if (direct) pv_vec_f16(acc, p, m, vbase, hd);
        else pv_vec(WALK_SPARSE, acc, p, m, 0, w->V, hd);
    }
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

/* Scores and gate of the steps of a span: p, masks and valid bits of every
 * query vector into buffer sp->buf; the history moves along (gate). */
static void span_gate(const struct kn_hp1_task *t, struct ws *w, struct span *sp, int s0, int n_kv_max,
                      struct pfq *pf) {
    const struct kn_attn_task *a = &t->at;
    const struct kn_kv_layout *kv = a->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = a->group, K = t->hp.n_taps;
    int nq = a->n_rows * G, buf = sp->buf;
    const __m512 lo = _mm512_set1_ps(t->hp.lo), hi = _mm512_set1_ps(t->hp.hi);
    const __m512 gamma = _mm512_set1_ps(t->hp.gamma);
    uint64_t all = 0;
    for (int k = 0; k < nq; k++) w->mask[buf][k] = w->vbits[buf][k] = 0;
    for (int st = 0; st * SUB < sp->n; st++) {
        int s = s0 + st * SUB;
        const uint8_t *tile = kn_kv_tile(kv, a->base, a->blocks[s / bs], a->kv_head);
        sp->tile[st] = tile;
        sp->j0[st] = s % bs;
        int nxt = s + bs - s % bs;
        /* the next tile's K only: its V rows are fetched when a gate wants them */
        if (s % bs == 0 && nxt < n_kv_max) {
            pf->k = (const char *)kn_kv_tile(kv, a->base, a->blocks[nxt / bs], a->kv_head);
            pf->k_end = pf->k + kv->v_off;
        }
        struct ksrc src;
        int mode = k_source(kv, tile, s % bs, nq, w->K, &src);
        if (mode == KSRC_BUF) pf_flush(pf); /* K is read once, into the buffer: no loop to spread over */
        /* row r ends at key pos + r: rows [r0, n_rows) have keys here */
        int r0 = s - a->pos > 0 ? s - a->pos : 0;
        for (int r = r0; r < a->n_rows; r++) {
            int valid = a->pos + r + 1 - s;
            if (valid > SUB) valid = SUB;
            uint64_t vbits = ((1u << valid) - 1) & 0xffff;
            qk_row(mode, a->q + (size_t)r * a->q_stride, G, hd, &src, a->scale, t->hp.relu, w->rb + r * G, pf);
            for (int g = 0; g < G; g++) {
                int k = r * G + g;
                uint64_t m = gate(w->rb[k], t->hp.taps + (size_t)g * K, K, lo, hi, gamma, valid,
                                  w->p[buf][k] + st * SUB);
                if (t->pv == KN_HP1_PV_DENSE) m = vbits;
                w->mask[buf][k] |= m << (st * SUB);
                w->vbits[buf][k] |= vbits << (st * SUB);
                all |= m << (st * SUB);
            }
        }
    }
    sp->all = all;
    pf_flush(pf); /* what short steps left: the previous span's V before its PV */
}

/* Chunk c of every row: the partials into w->acc. The history in w->rb
 * must be that of key c * CHUNK; it is left for the next chunk. */
static void chunk_pass(const struct kn_hp1_task *t, int c, struct ws *w) {
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, nq = a->n_rows * a->group, n_kv_max = a->pos + a->n_rows;
    int k0 = c * KN_ATTN_CHUNK;
    int k1 = k0 + KN_ATTN_CHUNK < n_kv_max ? k0 + KN_ATTN_CHUNK : n_kv_max;
    int span_keys = VBUF_FLOATS / hd / SUB * SUB; /* whole steps: 64 at hd 64, 32 at 128 */
    if (span_keys > SPAN_MAX) span_keys = SPAN_MAX;
    struct span sp[2];
    struct pfq *pf = &w->pf;
    bool pending = false;
    pf->k = pf->k_end = NULL;
    pf->v0 = pf->v1 = 0;
    memset(w->acc, 0, (size_t)nq * hd * sizeof(float));
    for (int s0 = k0, buf = 0; s0 < k1; s0 += span_keys, buf ^= 1) {
        struct span *cur = &sp[buf];
        cur->buf = buf;
        cur->n = k1 - s0 < span_keys ? k1 - s0 : span_keys;
        span_gate(t, w, cur, s0, n_kv_max, pf);
        if (t->pv == KN_HP1_PV_NONE) continue;
        prefetch_span(a->kv, cur, pf);
        if (pending) span_pv(t, w, &sp[buf ^ 1], nq);
        pending = cur->all != 0;
    }
    pf_flush(pf);
    if (pending) span_pv(t, w, &sp[((k1 - k0 + span_keys - 1) / span_keys - 1) & 1], nq);
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

/* The task limits the buffers are sized by; cheap next to the task. */
static void check_task(const struct kn_hp1_task *t) {
    ANVIL_ASSERT(t->hp.n_taps >= 1 && t->hp.n_taps <= KN_HP1_MAX_TAPS);
    ANVIL_ASSERT(t->at.n_rows >= 1 && t->at.group >= 1 && t->at.n_rows * t->at.group <= KN_ATTN_MAXQ);
    ANVIL_ASSERT(t->at.kv->head_dim % 32 == 0 && t->at.kv->head_dim <= KN_ATTN_MAX_HEAD_DIM);
    ANVIL_ASSERT(t->at.window == 0); /* no sliding window for HP1 (yet) */
}

static void attn_avx512(const struct kn_hp1_task *t) {
    check_task(t);
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
    check_task(t);
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
    check_task(t);
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
