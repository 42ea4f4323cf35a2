/*
 * attn_hp1.c (avx2) - HP1 gated attention (kernels/attn_hp1.h) with AVX2 +
 * FMA + F16C, F16 and Q8_0 KV. Also the avx512 family's HP1 table.
 *
 * Same grid as the softmax kernels (kernels/attn.h): steps of 16 keys,
 * chunks of 256 at fixed positions. Per step:
 *   1. the step's K is converted once to float (K^T (hd, 16) in a stack
 *      buffer) and every query vector of the task (the GQA group, times
 *      the rows of a prefill tile) runs over it, up to 3 at a time sharing
 *      the loads: 16 scores in two 8-lane vectors, a_u = FMA chain over
 *      d = u mod 2, s = (a_0 + a_1) * scale, then the ReLU;
 *   2. the gate, 8 lanes at a time: the step's r sit after the K-1 r of
 *      the keys before it in a small per-vector buffer, so r_{t-j} is an
 *      unaligned load; z by FMA in tap order, clamp, times gamma, lanes
 *      past the row's last key zeroed; the bit mask of p != 0 is the
 *      step's part of the vector's list of nonzero positions;
 *   3. PV: only V rows set in the union of the group's masks are
 *      converted (and read); each vector walks its mask lowest bit first,
 *      acc = fma(p_t, v_t, acc), in registers 64 columns at a time; a
 *      full mask takes a straight-line walk (same arithmetic).
 * No exp, no running max, no rescale: HP1 decode does less per key than
 * the softmax kernel. The history of a call's first chunk (when it is not
 * chunk 0) is the step left of it, recomputed with the same code, so any
 * split gives the same bits (attn_hp1.h, numeric specification).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "anvil.h"
#include "kernels/attn_hp1.h"

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

/* V rows j (bit j of rows) of keys [j0, j0 + 16) as float into Vb (16, hd);
 * other rows are left alone. */
static void load_v(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, uint32_t rows,
                   float *restrict Vb) {
    int bs = kv->block_size, hd = kv->head_dim;
    bool all = __builtin_popcount(rows) > 12; /* converting a few extra rows is cheaper than branching */
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *vt = (const uint16_t *)(tile + kv->v_off) + (size_t)j0 * hd;
        if (all) {
            for (int i = 0; i < SUB * hd; i += 8) _mm256_store_ps(Vb + i, load_f16x8(vt + i));
            return;
        }
        while (rows) {
            int j = __builtin_ctz(rows);
            rows &= rows - 1;
            for (int d = 0; d < hd; d += 8)
                _mm256_store_ps(Vb + j * hd + d, load_f16x8(vt + (size_t)j * hd + d));
        }
        return;
    }
    const int8_t *vq = (const int8_t *)(tile + kv->v_off) + (size_t)j0 * hd;
    const uint16_t *vs = (const uint16_t *)(tile + kv->vs_off) + j0;
    if (all) rows = 0xffff;
    while (rows) {
        int j = __builtin_ctz(rows);
        rows &= rows - 1;
        for (int g = 0; g < hd / 32; g++) {
            __m256 sc = _mm256_set1_ps(_cvtsh_ss(vs[(size_t)g * bs + j]));
            const int8_t *src = vq + (size_t)j * hd + g * 32;
            float *dst = Vb + j * hd + g * 32;
            for (int u = 0; u < 32; u += 8) _mm256_store_ps(dst + u, _mm256_mul_ps(load_i8x8(src + u), sc));
        }
    }
}

/* ---------------------------------------------------------------------- */
/* scores, gate, PV */

/* r of the 16 keys in Kb for nq (1..3) query vectors q[k] into r[k][0, 16). */
static inline __attribute__((always_inline)) void
qk_group(const int nq, const float *const *q, const float *restrict Kb, int hd, float scale,
         bool relu, float *const *r) {
    __m256 a[3][2][2]; /* [query][half][d mod 2] */
#pragma GCC unroll 3
    for (int k = 0; k < nq; k++) a[k][0][0] = a[k][0][1] = a[k][1][0] = a[k][1][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            __m256 k0 = _mm256_load_ps(Kb + (d + u) * SUB), k1 = _mm256_load_ps(Kb + (d + u) * SUB + 8);
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

/* Scores and ReLU of keys [s0, s0 + 16) (K in Kb) for the G query vectors
 * of one row: r into rb[g] + HIST. */
static void qk_row(const float *q, int G, int hd, const float *Kb, float scale, bool relu,
                   float (*rb)[HIST + SUB]) {
    int g = 0;
    while (g < G) {
        int rem = G - g, n = rem == 2 || rem == 4 ? 2 : rem >= 3 ? 3 : 1;
        int g1 = n > 1 ? g + 1 : g, g2 = n > 2 ? g + 2 : g; /* unused slots repeat g */
        const float *qp[3] = {q + (size_t)g * hd, q + (size_t)g1 * hd, q + (size_t)g2 * hd};
        float *rp[3] = {rb[g] + HIST, rb[g1] + HIST, rb[g2] + HIST};
        if (n == 3) qk_group(3, qp, Kb, hd, scale, relu, rp);
        else if (n == 2) qk_group(2, qp, Kb, hd, scale, relu, rp);
        else qk_group(1, qp, Kb, hd, scale, relu, rp);
        g += n;
    }
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

/* How a query vector's PV walks a step (all give the same bits, see the
 * header: a term with p_j == 0 is an exact zero, and V rows that its
 * vector does not need are masked to zeros, so a stale or non-finite
 * row cannot leak in):
 *   WALK_SPARSE: the set bits j of m, lowest first (few nonzero p);
 *   WALK_MASKED: every j < 16 in order, V row j ANDed with bit j of m
 *                (many nonzero p: a straight loop beats the branches);
 *   WALK_ALL:    every j < n in order, as is (every p of the step nonzero,
 *                or KN_HP1_PV_DENSE). */
enum { WALK_SPARSE, WALK_MASKED, WALK_ALL };

#define MASKED_MIN 8 /* nonzero p from which WALK_MASKED beats WALK_SPARSE */

/* acc[d0, d0 + 8*nb) += p_j * V[j][d0, ...] over the walk's j. */
static inline __attribute__((always_inline)) void
pv_cols(const int mode, const int nb, float *restrict acc, const float *restrict p, uint32_t m,
        int n, const float *restrict Vb, int hd, int d0) {
    __m256 c[8];
#pragma GCC unroll 8
    for (int b = 0; b < nb; b++) c[b] = _mm256_load_ps(acc + d0 + 8 * b);
    if (mode == WALK_ALL) {
        for (int j = 0; j < n; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            const float *vr = Vb + j * hd + d0;
#pragma GCC unroll 8
            for (int b = 0; b < nb; b++) c[b] = _mm256_fmadd_ps(pj, _mm256_load_ps(vr + 8 * b), c[b]);
        }
    } else if (mode == WALK_MASKED) {
        for (int j = 0; j < SUB; j++) {
            __m256 pj = _mm256_set1_ps(p[j]);
            __m256 mj = _mm256_castsi256_ps(_mm256_set1_epi32(-(int)((m >> j) & 1)));
            const float *vr = Vb + j * hd + d0;
#pragma GCC unroll 8
            for (int b = 0; b < nb; b++)
                c[b] = _mm256_fmadd_ps(pj, _mm256_and_ps(mj, _mm256_load_ps(vr + 8 * b)), c[b]);
        }
    } else {
        while (m) {
            int j = __builtin_ctz(m);
            m &= m - 1;
            __m256 pj = _mm256_set1_ps(p[j]);
            const float *vr = Vb + j * hd + d0;
#pragma GCC unroll 8
            for (int b = 0; b < nb; b++) c[b] = _mm256_fmadd_ps(pj, _mm256_load_ps(vr + 8 * b), c[b]);
        }
    }
#pragma GCC unroll 8
    for (int b = 0; b < nb; b++) _mm256_store_ps(acc + d0 + 8 * b, c[b]);
}

static inline __attribute__((always_inline)) void
pv_vec(const int mode, float *acc, const float *p, uint32_t m, int n, const float *Vb, int hd) {
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) pv_cols(mode, 8, acc, p, m, n, Vb, hd, d0);
    if (d0 < hd) pv_cols(mode, 4, acc, p, m, n, Vb, hd, d0); /* hd is a multiple of 32 */
}

/* ---------------------------------------------------------------------- */
/* chunks */

struct ws {
    float K[HDMAX * SUB] __attribute__((aligned(64)));
    float V[SUB * HDMAX] __attribute__((aligned(64)));
    float acc[MAXQ * HDMAX] __attribute__((aligned(64))); /* the chunk's partials */
    float run[MAXQ * HDMAX] __attribute__((aligned(64))); /* attn: their sum */
    float rb[MAXQ][HIST + SUB] __attribute__((aligned(32)));
    /* gate results of two steps: PV of a step runs after the gate of the
     * next one, so that the V rows it needs are prefetched meanwhile */
    float p[2][MAXQ][SUB] __attribute__((aligned(32)));
    uint32_t mask[2][MAXQ];  /* p != 0 among the valid keys */
    uint32_t vbits[2][MAXQ]; /* the valid keys */
};

/* A step whose gate is done and whose PV is pending. */
struct pend {
    const uint8_t *tile;
    int j0, buf;
    uint32_t all; /* V rows some query vector needs */
};

static void prefetch(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* The V rows `rows` of keys [j0, j0 + 16) of a tile (and Q8_0's scales). */
static void prefetch_v(const struct kn_kv_layout *kv, const uint8_t *tile, int j0, uint32_t rows) {
    size_t rb = kv->type == ANVIL_TYPE_F16 ? (size_t)kv->head_dim * 2 : (size_t)kv->head_dim;
    const uint8_t *v = tile + kv->v_off + (size_t)j0 * rb;
    while (rows) {
        int j = __builtin_ctz(rows);
        rows &= rows - 1;
        prefetch(v + (size_t)j * rb, rb);
    }
    if (kv->type == ANVIL_TYPE_Q8_0) prefetch(tile + kv->vs_off, kv->tile_bytes - kv->vs_off);
}

static void step_pv(const struct kn_hp1_task *t, struct ws *w, const struct pend *pd, int nq) {
    int hd = t->at.kv->head_dim;
    load_v(t->at.kv, pd->tile, pd->j0, pd->all, w->V);
    for (int k = 0; k < nq; k++) {
        uint32_t m = w->mask[pd->buf][k], vb = w->vbits[pd->buf][k];
        if (!m) continue;
        float *acc = w->acc + (size_t)k * hd;
        const float *p = w->p[pd->buf][k];
        if (m == vb) pv_vec(WALK_ALL, acc, p, m, __builtin_popcount(vb), w->V, hd);
        else if (__builtin_popcount(m) >= MASKED_MIN) pv_vec(WALK_MASKED, acc, p, m, SUB, w->V, hd);
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
    load_k(a->kv, kn_kv_tile(a->kv, a->base, a->blocks[s0 / bs], a->kv_head), s0 % bs, w->K);
    for (int r = 0; r < a->n_rows; r++) {
        qk_row(a->q + (size_t)r * a->q_stride, G, hd, w->K, a->scale, t->hp.relu, w->rb + r * G);
        for (int g = 0; g < G; g++) memcpy(w->rb[r * G + g], w->rb[r * G + g] + SUB, HIST * sizeof(float));
    }
}

/* Chunk c of every row: the partials into w->acc. The history in w->rb
 * must be that of key c * CHUNK; it is left for the next chunk. */
static void chunk_pass(const struct kn_hp1_task *t, int c, struct ws *w) {
    const struct kn_attn_task *a = &t->at;
    const struct kn_kv_layout *kv = a->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = a->group, K = t->hp.n_taps;
    int nq = a->n_rows * G, n_kv_max = a->pos + a->n_rows;
    int k0 = c * KN_ATTN_CHUNK;
    int k1 = k0 + KN_ATTN_CHUNK < n_kv_max ? k0 + KN_ATTN_CHUNK : n_kv_max;
    const __m256 lo = _mm256_set1_ps(t->hp.lo), hi = _mm256_set1_ps(t->hp.hi);
    const __m256 gamma = _mm256_set1_ps(t->hp.gamma);
    struct pend pd = {0};
    bool pending = false;
    memset(w->acc, 0, (size_t)nq * hd * sizeof(float));
    for (int s0 = k0, buf = 0; s0 < k1; s0 += SUB, buf ^= 1) {
        const uint8_t *tile = kn_kv_tile(kv, a->base, a->blocks[s0 / bs], a->kv_head);
        int nxt = s0 + bs - s0 % bs;
        /* the next tile's K only: its V rows are fetched when a gate wants them */
        if (s0 % bs == 0 && nxt < n_kv_max)
            prefetch(kn_kv_tile(kv, a->base, a->blocks[nxt / bs], a->kv_head), kv->v_off);
        load_k(kv, tile, s0 % bs, w->K);
        uint32_t all = 0;
        /* row r ends at key pos + r: rows [r0, n_rows) have keys here */
        int r0 = s0 - a->pos > 0 ? s0 - a->pos : 0;
        for (int k = 0; k < r0 * G; k++) w->mask[buf][k] = 0;
        for (int r = r0; r < a->n_rows; r++) {
            int valid = a->pos + r + 1 - s0;
            if (valid > SUB) valid = SUB;
            uint32_t vbits = (1u << valid) - 1;
            qk_row(a->q + (size_t)r * a->q_stride, G, hd, w->K, a->scale, t->hp.relu, w->rb + r * G);
            for (int g = 0; g < G; g++) {
                int k = r * G + g;
                uint32_t m = gate(w->rb[k], t->hp.taps + (size_t)g * K, K, lo, hi, gamma, valid, w->p[buf][k]);
                if (t->pv == KN_HP1_PV_DENSE) m = vbits;
                w->mask[buf][k] = m;
                w->vbits[buf][k] = vbits;
                all |= m;
            }
        }
        for (int k = r0 * G; k < nq; k++) memcpy(w->rb[k], w->rb[k] + SUB, HIST * sizeof(float));
        if (t->pv == KN_HP1_PV_NONE) continue;
        if (all) prefetch_v(kv, tile, s0 % bs, all);
        if (pending) step_pv(t, w, &pd, nq);
        pending = all != 0;
        pd = (struct pend){tile, s0 % bs, buf, all};
    }
    if (pending) step_pv(t, w, &pd, nq);
}

/* ---------------------------------------------------------------------- */
/* the table */

static void attn_avx2(const struct kn_hp1_task *t) {
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group, nq = a->n_rows * G;
    struct ws w;
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
    const struct kn_attn_task *a = &t->at;
    int hd = a->kv->head_dim, G = a->group;
    size_t rec = kn_hp1_rec_floats(G, hd);
    struct ws w;
    init_history(t, a->c0 * KN_ATTN_CHUNK, &w);
    for (int c = a->c0; c < a->c1; c++) {
        chunk_pass(t, c, &w);
        memcpy(a->part + (size_t)(c - a->c0) * rec, w.acc, (size_t)G * hd * sizeof(float));
    }
}

static void reduce_avx2(const struct kn_hp1_task *t) {
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
