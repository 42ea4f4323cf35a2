/*
 * attn_hp1.c (avx2) - HP1 gated attention (attn/hp1/attn_hp1.h) with AVX2 +
 * FMA + F16C, F16 and Q8_0 KV. Also the avx512 family's HP1 table.
 *
 * Same grid as the softmax kernels (attn/attn.h): steps of 16 keys,
 * chunks of 256 at fixed positions; PV in spans of up to 64 keys.
 *   1. Scores, per step: every query vector of the task (the GQA group,
 *      times the rows of a prefill tile) runs over the step's K, up to 3
 *      at a time sharing the loads: 16 scores in two 8-lane vectors,
 *      a_u = FMA chain over d = u mod 2, s = (a_0 + a_1) * scale, then the
 *      ReLU. Decode with up to 3 heads per kv head converts K in
 *      registers as it reads it; otherwise K is converted once to a float
 *      buffer that the vectors share (same floats either way).
 *   2. Gate, 8 lanes at a time: the step's r sit after the last 8 r of
 *      the keys before it in a small per-vector buffer, so r_{t-j} is an
 *      unaligned load; z by FMA in tap order, clamp, times gamma, lanes
 *      past the row's last key zeroed; the bit mask of p != 0 is the
 *      step's part of the vector's list of nonzero positions.
 *   3. PV, per span, one span behind the gate (so the V rows a span needs
 *      are prefetched while the next span's scores are computed): only V
 *      rows set in the union of the group's masks are read; each vector
 *      walks its mask (see WALK_*), acc = fma(p_t, v_t, acc), 64 columns
 *      at a time in registers. The rows are converted to a float buffer
 *      that the walks share, except that with F16 the sparse walks of a
 *      span whose rows serve few of them read the tiles and convert in
 *      registers (span_pv).
 * No exp, no running max, no rescale. The history of a call's first chunk
 * (when it is not chunk 0) is the step left of it, recomputed with the
 * same code, so any split gives the same bits (attn_hp1.h, numeric
 * specification). Only the next tile's K is prefetched ahead: the V rows
 * are prefetched once a gate says they are needed.
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
#define HIST 8 /* r of the 8 keys before the step, then the step's 16 */

_Static_assert(KN_ATTN_SUB == 16, "one step is two 8-lane vectors");
_Static_assert(KN_HP1_MAX_TAPS - 1 <= HIST, "FIR history fits the buffer");

/* ---------------------------------------------------------------------- */
/* loads */

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_i8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Keys [j0, j0 + 16) of a tile: K^T as float into Kb (hd, 16). */
static void load_k(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, float *restrict Kb) {
    int bs = kv->block_size, hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *kt = (const uint16_t *)tile + j0;
        for (int d = 0; d < hd; d++) {
            _mm256_store_ps(Kb + d * SUB, load_f16x8(kt + (size_t)d * bs));
            _mm256_store_ps(Kb + d * SUB + 8, load_f16x8(kt + (size_t)d * bs + 8));
        }
        return;
    }
    const int8_t *kq = (const int8_t *)tile + j0;
    const uint16_t *ks = (const uint16_t *)(tile + kv->ks_off) + j0;
    for (int g = 0; g < hd / 32; g++) {
        __m256 s0 = load_f16x8(ks + (size_t)g * bs), s1 = load_f16x8(ks + (size_t)g * bs + 8);
        for (int d = g * 32; d < g * 32 + 32; d++) {
            _mm256_store_ps(Kb + d * SUB, _mm256_mul_ps(load_i8x8(kq + (size_t)d * bs), s0));
            _mm256_store_ps(Kb + d * SUB + 8, _mm256_mul_ps(load_i8x8(kq + (size_t)d * bs + 8), s1));
        }
    }
}

/* V row j0 + j of a tile as float into dst (hd). */
static inline void load_v_row(const struct kn_kv_layout *kv, const uint8_t *tile, int j,
                              float *restrict dst) {
    int hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *src = (const uint16_t *)(tile + kv->v_off) + (size_t)j * hd;
        for (int d = 0; d < hd; d += 8) _mm256_store_ps(dst + d, load_f16x8(src + d));
        return;
    }
    const int8_t *src = (const int8_t *)(tile + kv->v_off) + (size_t)j * hd;
    const uint16_t *vs = (const uint16_t *)(tile + kv->vs_off) + j;
    for (int g = 0; g < hd / 32; g++) {
        __m256 sc = _mm256_set1_ps(_cvtsh_ss(vs[(size_t)g * kv->block_size]));
        for (int u = 0; u < 32; u += 8)
            _mm256_store_ps(dst + g * 32 + u, _mm256_mul_ps(load_i8x8(src + g * 32 + u), sc));
    }
}

/* ---------------------------------------------------------------------- */
/* scores, gate, PV */

/* Where a step's K comes from: the float buffer of load_k (prefill tiles
 * and groups of more than 3 heads, which would otherwise convert each
 * row more than once), or the tile itself, converted in registers as it
 * is read (decode with up to 3 heads per kv head: one pass reads every K
 * value once). Both give the same floats (Q8_0: quant times scale, exact
 * in float), so the scores are the same bits. */
enum { KSRC_BUF, KSRC_F16, KSRC_Q8 };

struct ksrc {
    const float *buf;   /* KSRC_BUF: (hd, 16) */
    const uint8_t *k;   /* else: K^T at key j0 of the tile, rows bs apart */
    const uint16_t *ks; /* KSRC_Q8: the scales at key j0, rows bs apart */
    int bs;
};

/* r of the step's 16 keys for nq (1..3) query vectors q[k] into r[k][0, 16). */
static inline __attribute__((always_inline)) void
qk_group(const int mode, const int nq, const float *const *q, const struct ksrc *src, int hd,
         float scale, bool relu, float *const *r) {
    __m256 a[3][2][2]; /* [query][half][d mod 2] */
    __m256 sc0 = _mm256_setzero_ps(), sc1 = sc0;
#pragma GCC unroll 3
    for (int k = 0; k < nq; k++) a[k][0][0] = a[k][0][1] = a[k][1][0] = a[k][1][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
        if (mode == KSRC_Q8 && d % 32 == 0) {
            sc0 = load_f16x8(src->ks + (size_t)(d / 32) * src->bs);
            sc1 = load_f16x8(src->ks + (size_t)(d / 32) * src->bs + 8);
        }
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            __m256 k0, k1;
            if (mode == KSRC_BUF) {
                k0 = _mm256_load_ps(src->buf + (d + u) * SUB);
                k1 = _mm256_load_ps(src->buf + (d + u) * SUB + 8);
            } else if (mode == KSRC_F16) {
                const uint16_t *kr = (const uint16_t *)src->k + (size_t)(d + u) * src->bs;
                k0 = load_f16x8(kr);
                k1 = load_f16x8(kr + 8);
            } else {
                const int8_t *kr = (const int8_t *)src->k + (size_t)(d + u) * src->bs;
                k0 = _mm256_mul_ps(load_i8x8(kr), sc0);
                k1 = _mm256_mul_ps(load_i8x8(kr + 8), sc1);
            }
            /* keep the rows in registers, shared by the nq queries */
            __asm__("" : "+x"(k0), "+x"(k1));
#pragma GCC unroll 3
            for (int k = 0; k < nq; k++) {
                __m256 qd = _mm256_set1_ps(q[k][d + u]);
                a[k][0][u] = _mm256_fmadd_ps(qd, k0, a[k][0][u]);
                a[k][1][u] = _mm256_fmadd_ps(qd, k1, a[k][1][u]);
            }
        }
    }
    const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
#pragma GCC unroll 3
    for (int k = 0; k < nq; k++) {
        __m256 s0 = _mm256_mul_ps(_mm256_add_ps(a[k][0][0], a[k][0][1]), sc);
        __m256 s1 = _mm256_mul_ps(_mm256_add_ps(a[k][1][0], a[k][1][1]), sc);
        if (relu) {
            /* max(s, 0) is s > 0 ? s : 0, NaN included (maxps returns its second operand) */
            s0 = _mm256_max_ps(s0, zero);
            s1 = _mm256_max_ps(s1, zero);
        }
        _mm256_store_ps(r[k], s0);
        _mm256_store_ps(r[k] + 8, s1);
    }
}

static inline __attribute__((always_inline)) void
qk_mode(const int mode, const float *q, int G, int hd, const struct ksrc *src, float scale,
        bool relu, float (*rb)[HIST + SUB]) {
    int g = 0;
    while (g < G) {
        int rem = G - g, n = rem == 2 || rem == 4 ? 2 : rem >= 3 ? 3 : 1;
        int g1 = n > 1 ? g + 1 : g, g2 = n > 2 ? g + 2 : g; /* unused slots repeat g */
        const float *qp[3] = {q + (size_t)g * hd, q + (size_t)g1 * hd, q + (size_t)g2 * hd};
        float *rp[3] = {rb[g] + HIST, rb[g1] + HIST, rb[g2] + HIST};
        if (n == 3) qk_group(mode, 3, qp, src, hd, scale, relu, rp);
        else if (n == 2) qk_group(mode, 2, qp, src, hd, scale, relu, rp);
        else qk_group(mode, 1, qp, src, hd, scale, relu, rp);
        g += n;
    }
}

/* Scores and ReLU of a step's 16 keys for the G query vectors of one row:
 * r into rb[g] + HIST. */
static void qk_row(int mode, const float *q, int G, int hd, const struct ksrc *src, float scale,
                   bool relu, float (*rb)[HIST + SUB]) {
    if (mode == KSRC_BUF) qk_mode(KSRC_BUF, q, G, hd, src, scale, relu, rb);
    else if (mode == KSRC_F16) qk_mode(KSRC_F16, q, G, hd, src, scale, relu, rb);
    else qk_mode(KSRC_Q8, q, G, hd, src, scale, relu, rb);
}

/* The K source of keys [j0, j0 + 16) of a tile for a task of nq query
 * vectors; fills Kb when the buffer is the better one. */
static int k_source(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, int nq, float *Kb,
                    struct ksrc *src) {
    src->bs = kv->block_size;
    if (nq > 3) {
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

/* The gate of one query vector over a step: rb holds r_{t-HIST..t+15};
 * p[0, 16) and the mask of p != 0 among the first `valid` lanes. */
static inline uint32_t gate(const float *rb, const float *c, int K, __m256 lo, __m256 hi,
                            __m256 gamma, int valid, float *p) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    uint32_t m = 0;
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const float *r = rb + HIST + 8 * h;
        __m256 z = _mm256_mul_ps(_mm256_set1_ps(c[0]), _mm256_load_ps(r));
        for (int j = 1; j < K; j++) z = _mm256_fmadd_ps(_mm256_set1_ps(c[j]), _mm256_loadu_ps(r - j), z);
        /* maxps/minps return the second operand unless the first is
         * greater/less: exactly x > lo ? x : lo and x < hi ? x : hi */
        z = _mm256_min_ps(_mm256_max_ps(z, lo), hi);
        __m256 pv = _mm256_mul_ps(gamma, z);
        __m256 vm = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(valid - 8 * h), iota));
        pv = _mm256_and_ps(pv, vm);
        _mm256_store_ps(p + 8 * h, pv);
        m |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(pv, _mm256_setzero_ps(), _CMP_NEQ_UQ)) << (8 * h);
    }
    return m;
}

/* PV runs over spans of whole steps, VBUF_FLOATS / head_dim keys at most
 * (64 at head_dim 64, 32 at 128: the float V of a span is 16 KiB and
 * stays in L1): the gate of a span leaves, per query vector, the 64-bit
 * mask of its nonzero p, and one walk per vector and span keeps branch
 * mispredictions (one per walk, at its end) rare: per 16-key step they
 * cost as much as the FMAs they skipped (PV at 70% zeros then runs no
 * faster than dense, commit 6c9e073). A span's PV runs after the gate of the next
 * span, so the V rows it needs are prefetched meanwhile, and only those
 * are read and converted. */
#define VBUF_FLOATS 4096
#define SPAN_MAX (VBUF_FLOATS / 64) /* keys per span at head_dim <= 64 */

/* How a query vector walks a span (all give the same bits, see the
 * header: a term with p_j == 0 is an exact zero, and V rows that its
 * vector does not need are masked to zeros, so a stale or non-finite
 * row cannot leak in):
 *   WALK_SPARSE: the set bits j of m, lowest first;
 *   WALK_MASKED: every j < n in order, V row j ANDed with bit j of m
 *                (most p nonzero: a straight loop beats the per-key cost);
 *   WALK_ALL:    every j < n in order, as is (every p of the span
 *                nonzero, or KN_HP1_PV_DENSE). */
enum { WALK_SPARSE, WALK_MASKED, WALK_ALL };

/* acc[d0, d0 + 8*nb) += p_j * V[j][d0, ...] over the walk's j, nb = 4 or
 * 8. The accumulators are named variables, not an array: in the sparse
 * loop gcc would otherwise keep them in memory (a store-forwarding chain
 * per FMA, three times slower). */
static inline __attribute__((always_inline)) void
pv_cols(const int mode, const int nb, float *restrict acc, const float *restrict p, uint64_t m,
        int n, const float *restrict Vb, int hd, int d0) {
    float *a = acc + d0;
    __m256 c0 = _mm256_load_ps(a), c1 = _mm256_load_ps(a + 8), c2 = _mm256_load_ps(a + 16),
           c3 = _mm256_load_ps(a + 24), c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    if (nb > 4) {
        c4 = _mm256_load_ps(a + 32);
        c5 = _mm256_load_ps(a + 40);
        c6 = _mm256_load_ps(a + 48);
        c7 = _mm256_load_ps(a + 56);
    }
#define HP1_FMA(X)                                                                                \
    do {                                                                                          \
        c0 = _mm256_fmadd_ps(pj, X(vr), c0);                                                      \
        c1 = _mm256_fmadd_ps(pj, X(vr + 8), c1);                                                  \
        c2 = _mm256_fmadd_ps(pj, X(vr + 16), c2);                                                 \
        c3 = _mm256_fmadd_ps(pj, X(vr + 24), c3);                                                 \
        if (nb > 4) {                                                                             \
            c4 = _mm256_fmadd_ps(pj, X(vr + 32), c4);                                             \
            c5 = _mm256_fmadd_ps(pj, X(vr + 40), c5);                                             \
            c6 = _mm256_fmadd_ps(pj, X(vr + 48), c6);                                             \
            c7 = _mm256_fmadd_ps(pj, X(vr + 56), c7);                                             \
        }                                                                                         \
    } while (0)
#define HP1_LD(ptr) _mm256_load_ps(ptr)
#define HP1_LDM(ptr) _mm256_and_ps(mj, _mm256_load_ps(ptr))
    if (mode == WALK_ALL) {
        for (int j = 0; j < n; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            const float *vr = Vb + j * hd + d0;
            HP1_FMA(HP1_LD);
        }
    } else if (mode == WALK_MASKED) {
        for (int j = 0; j < n; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            __m256 mj = _mm256_castsi256_ps(_mm256_set1_epi32(-(int)((m >> j) & 1)));
            const float *vr = Vb + j * hd + d0;
            HP1_FMA(HP1_LDM);
        }
    } else {
        while (m) {
            int j = __builtin_ctzll(m);
            m &= m - 1;
            __m256 pj = _mm256_set1_ps(p[j]);
            const float *vr = Vb + j * hd + d0;
            HP1_FMA(HP1_LD);
        }
    }
#undef HP1_FMA
#undef HP1_LD
#undef HP1_LDM
    _mm256_store_ps(a, c0);
    _mm256_store_ps(a + 8, c1);
    _mm256_store_ps(a + 16, c2);
    _mm256_store_ps(a + 24, c3);
    if (nb > 4) {
        _mm256_store_ps(a + 32, c4);
        _mm256_store_ps(a + 40, c5);
        _mm256_store_ps(a + 48, c6);
        _mm256_store_ps(a + 56, c7);
    }
}

static inline __attribute__((always_inline)) void
pv_vec(const int mode, float *acc, const float *p, uint64_t m, int n, const float *Vb, int hd) {
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) pv_cols(mode, 8, acc, p, m, n, Vb, hd, d0);
    if (d0 < hd) pv_cols(mode, 4, acc, p, m, n, Vb, hd, d0); /* hd is a multiple of 32 */
}

/* The sparse walk of an F16 span straight from the tiles: V row j of the
 * span at vbase[j / 16] + (j % 16) * hd halves, converted in registers as
 * it is read (the same floats as load_v_row), so a row that only sparse
 * walks need is neither stored to nor reloaded from the span buffer. Same
 * FMAs in the same order as pv_cols' WALK_SPARSE. */
static inline __attribute__((always_inline)) void
pv_cols_f16(const int nb, float *restrict acc, const float *restrict p, uint64_t m,
            const uint16_t *const *vbase, int hd, int d0) {
    float *a = acc + d0;
    __m256 c0 = _mm256_load_ps(a), c1 = _mm256_load_ps(a + 8), c2 = _mm256_load_ps(a + 16),
           c3 = _mm256_load_ps(a + 24), c4 = c0, c5 = c0, c6 = c0, c7 = c0;
    if (nb > 4) {
        c4 = _mm256_load_ps(a + 32);
        c5 = _mm256_load_ps(a + 40);
        c6 = _mm256_load_ps(a + 48);
        c7 = _mm256_load_ps(a + 56);
    }
    while (m) {
        int j = __builtin_ctzll(m);
        m &= m - 1;
        __m256 pj = _mm256_set1_ps(p[j]);
        const uint16_t *vr = vbase[j >> 4] + (size_t)(j & 15) * hd + d0;
        c0 = _mm256_fmadd_ps(pj, load_f16x8(vr), c0);
        c1 = _mm256_fmadd_ps(pj, load_f16x8(vr + 8), c1);
        c2 = _mm256_fmadd_ps(pj, load_f16x8(vr + 16), c2);
        c3 = _mm256_fmadd_ps(pj, load_f16x8(vr + 24), c3);
        if (nb > 4) {
            c4 = _mm256_fmadd_ps(pj, load_f16x8(vr + 32), c4);
            c5 = _mm256_fmadd_ps(pj, load_f16x8(vr + 40), c5);
            c6 = _mm256_fmadd_ps(pj, load_f16x8(vr + 48), c6);
            c7 = _mm256_fmadd_ps(pj, load_f16x8(vr + 56), c7);
        }
    }
    _mm256_store_ps(a, c0);
    _mm256_store_ps(a + 8, c1);
    _mm256_store_ps(a + 16, c2);
    _mm256_store_ps(a + 24, c3);
    if (nb > 4) {
        _mm256_store_ps(a + 32, c4);
        _mm256_store_ps(a + 40, c5);
        _mm256_store_ps(a + 48, c6);
        _mm256_store_ps(a + 56, c7);
    }
}

static void pv_vec_f16(float *acc, const float *p, uint64_t m, const uint16_t *const *vbase, int hd) {
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) pv_cols_f16(8, acc, p, m, vbase, hd, d0);
    if (d0 < hd) pv_cols_f16(4, acc, p, m, vbase, hd, d0);
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
    float V[VBUF_FLOATS] __attribute__((aligned(64)));  /* a span's V (n, hd) */
    float acc[MAXQ * HDMAX] __attribute__((aligned(64))); /* the chunk's partials */
    float run[MAXQ * HDMAX] __attribute__((aligned(64))); /* attn: their sum */
    float rb[MAXQ][HIST + SUB] __attribute__((aligned(32)));
    /* gate results of two spans: PV of one, gate of the next */
    float p[2][MAXQ][SPAN_MAX] __attribute__((aligned(32)));
    uint64_t mask[2][MAXQ];  /* p != 0 among the valid keys */
    uint64_t vbits[2][MAXQ]; /* the valid keys */
};

static inline __attribute__((always_inline)) void prefetch(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

static size_t v_row_bytes(const struct kn_kv_layout *kv) {
    return kv->type == ANVIL_TYPE_F16 ? (size_t)kv->head_dim * 2 : (size_t)kv->head_dim;
}

/* Prefetch the V rows a span needs (and Q8_0's V scales). */
static inline __attribute__((always_inline)) void prefetch_span(const struct kn_kv_layout *kv, const struct span *sp) {
    size_t rb = v_row_bytes(kv);
    uint64_t rows = sp->all;
    while (rows) {
        int j = __builtin_ctzll(rows);
        rows &= rows - 1;
        prefetch(sp->tile[j / SUB] + kv->v_off + (size_t)(sp->j0[j / SUB] + j % SUB) * rb, rb);
    }
    if (kv->type == ANVIL_TYPE_Q8_0)
        for (int st = 0; st * SUB < sp->n; st++)
            if ((sp->all >> (st * SUB)) & 0xffff)
                prefetch(sp->tile[st] + kv->vs_off, kv->tile_bytes - kv->vs_off);
}

/* MASKED walk from this many nonzero p among n keys: past it, the sparse
 * walk's per-key overhead costs more than the FMAs it skips. */
static inline int masked_min(int n) { return n - n / 4; }

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
        /* the vector's keys in the span are [0, nv) (a prefill row may end
         * inside it): only their p were written, so no walk reads past */
        int nv = __builtin_popcountll(vb);
        walk[k] = m == vb ? WALK_ALL : __builtin_popcountll(m) >= masked_min(nv) ? WALK_MASKED : WALK_SPARSE;
        if (f16 && walk[k] != WALK_SPARSE) rows |= m;
        if (walk[k] == WALK_SPARSE) {
            sparse_rows |= m;
            sparse_terms += __builtin_popcountll(m);
        }
    }
    /* F16 sparse walks read V straight from the tiles while their rows
     * are used twice or less on average: a conversion in a walk costs
     * about half of a conversion into the buffer plus its store, which
     * pays at a few heads per kv head and not at 8, where a row serves
     * about 2.5. Only up to 64 columns: at head_dim 128 (two passes over
     * the mask) it wins with the KV in L3 but loses a few percent of
     * sparse PV time with the KV in DRAM, the decode case (commit
     * aa51bc7). */
    bool direct = f16 && hd <= 64 && sparse_terms <= 2 * __builtin_popcountll(sparse_rows);
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
        for (int k = 0; k < nq; k++) memset(w->rb[k], 0, HIST * sizeof(float));
        return;
    }
    int s0 = k0 - SUB, bs = a->kv->block_size;
    struct ksrc src;
    int mode = k_source(a->kv, kn_kv_tile(a->kv, a->base, a->blocks[s0 / bs], a->kv_head), s0 % bs,
                        nq, w->K, &src);
    for (int r = 0; r < a->n_rows; r++) {
        qk_row(mode, a->q + (size_t)r * a->q_stride, G, hd, &src, a->scale, t->hp.relu, w->rb + r * G);
        for (int g = 0; g < G; g++) memcpy(w->rb[r * G + g], w->rb[r * G + g] + SUB, HIST * sizeof(float));
    }
}

/* Scores and gate of the steps of a span: p, masks and valid bits of every
 * query vector into buffer sp->buf; the history moves along. */
static void span_gate(const struct kn_hp1_task *t, struct ws *w, struct span *sp, int s0, int n_kv_max) {
    const struct kn_attn_task *a = &t->at;
    const struct kn_kv_layout *kv = a->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = a->group, K = t->hp.n_taps;
    int nq = a->n_rows * G, buf = sp->buf;
    const __m256 lo = _mm256_set1_ps(t->hp.lo), hi = _mm256_set1_ps(t->hp.hi);
    const __m256 gamma = _mm256_set1_ps(t->hp.gamma);
    uint64_t all = 0;
    for (int k = 0; k < nq; k++) w->mask[buf][k] = w->vbits[buf][k] = 0;
    for (int st = 0; st * SUB < sp->n; st++) {
        int s = s0 + st * SUB;
        const uint8_t *tile = kn_kv_tile(kv, a->base, a->blocks[s / bs], a->kv_head);
        sp->tile[st] = tile;
        sp->j0[st] = s % bs;
        int nxt = s + bs - s % bs;
        /* the next tile's K only: its V rows are fetched when a gate wants them */
        if (s % bs == 0 && nxt < n_kv_max)
            prefetch(kn_kv_tile(kv, a->base, a->blocks[nxt / bs], a->kv_head), kv->v_off);
        struct ksrc src;
        int mode = k_source(kv, tile, s % bs, nq, w->K, &src);
        /* row r ends at key pos + r: rows [r0, n_rows) have keys here */
        int r0 = s - a->pos > 0 ? s - a->pos : 0;
        for (int r = r0; r < a->n_rows; r++) {
            int valid = a->pos + r + 1 - s;
            if (valid > SUB) valid = SUB;
            uint64_t vbits = ((1u << valid) - 1) & 0xffff;
            qk_row(mode, a->q + (size_t)r * a->q_stride, G, hd, &src, a->scale, t->hp.relu, w->rb + r * G);
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
        for (int k = r0 * G; k < nq; k++) memcpy(w->rb[k], w->rb[k] + SUB, HIST * sizeof(float));
    }
    sp->all = all;
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
    bool pending = false;
    memset(w->acc, 0, (size_t)nq * hd * sizeof(float));
    for (int s0 = k0, buf = 0; s0 < k1; s0 += span_keys, buf ^= 1) {
        struct span *cur = &sp[buf];
        cur->buf = buf;
        cur->n = k1 - s0 < span_keys ? k1 - s0 : span_keys;
        span_gate(t, w, cur, s0, n_kv_max);
        if (t->pv == KN_HP1_PV_NONE) continue;
        prefetch_span(a->kv, cur);
        if (pending) span_pv(t, w, &sp[buf ^ 1], nq);
        pending = cur->all != 0;
    }
    if (pending) span_pv(t, w, &sp[((k1 - k0 + span_keys - 1) / span_keys - 1) & 1], nq);
}

/* ---------------------------------------------------------------------- */
/* the table */

/* Debug builds fill the workspace with NaN, so a read of anything the
 * kernel did not write this call (a stale p, an unconverted V row that a
 * walk does not mask) shows in the tests' outputs. */
static void ws_poison(struct ws *w) {
#ifdef ANVIL_DEBUG
    memset(w, 0xff, sizeof(*w));
#else
    (void)w;
#endif
}

static void attn_avx2(const struct kn_hp1_task *t) {
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
            for (int i = 0; i < G * hd; i += 8)
                _mm256_store_ps(run + i, _mm256_add_ps(_mm256_load_ps(run + i), _mm256_load_ps(acc + i)));
        }
    }
    for (int r = 0; r < a->n_rows; r++)
        memcpy(a->out + (size_t)r * a->out_stride, w.run + (size_t)r * G * hd, (size_t)G * hd * sizeof(float));
}

static void partial_avx2(const struct kn_hp1_task *t) {
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

static void reduce_avx2(const struct kn_hp1_task *t) {
    kn_hp1_check_task(t);
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group;
    size_t rec = kn_hp1_rec_floats(G, hd);
    for (int g = 0; g < G; g++) {
        float *o = a->out + (size_t)g * hd;
        for (int d = 0; d < hd; d += 8) {
            __m256 s = _mm256_setzero_ps();
            for (int c = a->c0; c < a->c1; c++)
                s = _mm256_add_ps(s, _mm256_loadu_ps(a->part + (size_t)(c - a->c0) * rec + (size_t)g * hd + d));
            _mm256_storeu_ps(o + d, s);
        }
    }
}

const struct kn_hp1_ops kn_hp1_ops_avx2 = {
    .name = "avx2",
    .attn = attn_avx2,
    .partial = partial_avx2,
    .reduce = reduce_avx2,
};
