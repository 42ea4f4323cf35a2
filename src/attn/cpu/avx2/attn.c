/*
 * attn.c (avx2) - attention kernels of attn/attn.h with AVX2 + FMA.
 *
 * The structure of the avx512 variant with 8-lane vectors: a step's 16
 * keys are two vectors (keys 0-7 and 8-15). Per query vector the
 * arithmetic is fixed, whatever the grouping:
 *   score  = (a0 + a1) * scale per half, a_u = sum over d = u mod 2, in d
 *            order, of q[d] * k[d] (fused multiply-add)
 *   m_new  = max(m, max of valid scores); if it grew (and m was finite),
 *            l and acc are scaled by expf(m - m_new)
 *   p      = exp256(score - m_new) on valid lanes, 0 elsewhere
 *   l     += hsum8(p_lo + p_hi);  acc[d] += p_j * v_j[d] for j in order
 * Query vectors go two at a time over the step buffer (sharing loads),
 * which changes no result; so attn, partial + reduce and prefill tiles
 * agree bit for bit within this variant.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "anvil.h"
#include "attn/attn.h"

#define SUB KN_ATTN_SUB
#define HDMAX KN_ATTN_MAX_HEAD_DIM
#define QGROUP 2

_Static_assert(KN_ATTN_SUB == 16, "one step is two 8-lane vectors");

/* ---------------------------------------------------------------------- */
/* helpers */

static inline __m256 exp256(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* times 2^n, n in [-126, 127] after the clamp: build the exponent */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load_i8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Keys [j0, j0 + 16) of a tile as float: Kb (hd, 16), Vb (16, hd). */
static void load_step(const struct kn_kv_layout *kv, const uint8_t *tile, int j0,
                      float *restrict Kb, float *restrict Vb) {
    int bs = kv->block_size, hd = kv->head_dim;
    if (kv->type == ANVIL_TYPE_F16) {
        const uint16_t *kt = (const uint16_t *)tile + j0;
        for (int d = 0; d < hd; d++) {
            _mm256_store_ps(Kb + d * SUB, load_f16x8(kt + (size_t)d * bs));
            _mm256_store_ps(Kb + d * SUB + 8, load_f16x8(kt + (size_t)d * bs + 8));
        }
        const uint16_t *vt = (const uint16_t *)(tile + kv->v_off) + (size_t)j0 * hd;
        for (int i = 0; i < SUB * hd; i += 8) _mm256_store_ps(Vb + i, load_f16x8(vt + i));
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
    const int8_t *vq = (const int8_t *)(tile + kv->v_off) + (size_t)j0 * hd;
    const uint16_t *vs = (const uint16_t *)(tile + kv->vs_off) + j0;
    for (int j = 0; j < SUB; j++)
        for (int g = 0; g < hd / 32; g++) {
            __m256 sc = _mm256_set1_ps(_cvtsh_ss(vs[(size_t)g * bs + j]));
            const int8_t *src = vq + (size_t)j * hd + g * 32;
            float *dst = Vb + j * hd + g * 32;
            for (int u = 0; u < 32; u += 8) _mm256_store_ps(dst + u, _mm256_mul_ps(load_i8x8(src + u), sc));
        }
}

/* acc_k[0, 8*nb) += sum over j < valid, in order, of p[k][j] * V[j][...]. */
static inline __attribute__((always_inline)) void
pv_cols(const int nq, const int nb, float *restrict acc, int acc_stride,
        const float (*restrict p)[SUB], const float *restrict V, int hd, int valid) {
    __m256 c[QGROUP][4];
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) c[k][b] = _mm256_load_ps(acc + k * acc_stride + 8 * b);
    for (int j = 0; j < valid; j++) {
        const float *vr = V + j * hd;
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) {
            __m256 v = _mm256_load_ps(vr + 8 * b);
            __asm__("" : "+x"(v));
#pragma GCC unroll 4
            for (int k = 0; k < nq; k++) c[k][b] = _mm256_fmadd_ps(_mm256_set1_ps(p[k][j]), v, c[k][b]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < nq; k++)
#pragma GCC unroll 4
        for (int b = 0; b < nb; b++) _mm256_store_ps(acc + k * acc_stride + 8 * b, c[k][b]);
}

/* One online-softmax step for nq (1..2) query vectors q + k*hd, states
 * m[k], l[k], acc + k*hd, over keys [first, valid) of the buffer (the
 * others are masked: score -inf, weight 0). */
static inline __attribute__((always_inline)) void
step_group(const int nq, const float *restrict q, float *restrict m, float *restrict l,
           float *restrict acc, const float *restrict Kb, const float *restrict Vb, int hd,
           int first, int valid, float scale) {
    __m256 a[QGROUP][2][2]; /* [query][half][d mod 2] */
#pragma GCC unroll 2
    for (int k = 0; k < nq; k++)
        a[k][0][0] = a[k][0][1] = a[k][1][0] = a[k][1][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 2) {
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) {
            __m256 k0 = _mm256_load_ps(Kb + (d + u) * SUB), k1 = _mm256_load_ps(Kb + (d + u) * SUB + 8);
            /* keep the rows in registers (see the avx512 variant) */
            __asm__("" : "+x"(k0), "+x"(k1));
#pragma GCC unroll 2
            for (int k = 0; k < nq; k++) {
                __m256 qd = _mm256_set1_ps(q[k * hd + d + u]);
                a[k][0][u] = _mm256_fmadd_ps(qd, k0, a[k][0][u]);
                a[k][1][u] = _mm256_fmadd_ps(qd, k1, a[k][1][u]);
            }
        }
    }
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i vlo = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(first), iota),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), iota));
    const __m256i vhi = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(first - 8), iota),
                                            _mm256_cmpgt_epi32(_mm256_set1_epi32(valid - 8), iota));
    const __m256 mlo = _mm256_castsi256_ps(vlo), mhi = _mm256_castsi256_ps(vhi);
    const __m256 ninf = _mm256_set1_ps(-INFINITY), sc = _mm256_set1_ps(scale);
    float pb[QGROUP][SUB] __attribute__((aligned(32)));
#pragma GCC unroll 2
    for (int k = 0; k < nq; k++) {
        __m256 s0 = _mm256_mul_ps(_mm256_add_ps(a[k][0][0], a[k][0][1]), sc);
        __m256 s1 = _mm256_mul_ps(_mm256_add_ps(a[k][1][0], a[k][1][1]), sc);
        s0 = _mm256_blendv_ps(ninf, s0, mlo);
        s1 = _mm256_blendv_ps(ninf, s1, mhi);
        float mb = hmax8(_mm256_max_ps(s0, s1));
        float mo = m[k], mn = mo > mb ? mo : mb;
        if (mn > mo && mo != -INFINITY) {
            float al = expf(mo - mn);
            l[k] *= al;
            __m256 av = _mm256_set1_ps(al);
            float *ak = acc + k * hd;
            for (int d = 0; d < hd; d += 8) _mm256_store_ps(ak + d, _mm256_mul_ps(_mm256_load_ps(ak + d), av));
        }
        m[k] = mn;
        __m256 mv = _mm256_set1_ps(mn);
        __m256 p0 = _mm256_and_ps(exp256(_mm256_sub_ps(s0, mv)), mlo);
        __m256 p1 = _mm256_and_ps(exp256(_mm256_sub_ps(s1, mv)), mhi);
        l[k] += hsum8(_mm256_add_ps(p0, p1));
        _mm256_store_ps(pb[k], p0);
        _mm256_store_ps(pb[k] + 8, p1);
    }
    for (int d0 = 0; d0 < hd; d0 += 32) pv_cols(nq, 4, acc + d0, hd, pb, Vb + d0, hd, valid);
}

static void step_row(const float *q, float *m, float *l, float *acc, int G, const float *Kb,
                     const float *Vb, int hd, int first, int valid, float scale) {
    int g = 0;
    for (; g + 2 <= G; g += 2)
        step_group(2, q + g * hd, m + g, l + g, acc + g * hd, Kb, Vb, hd, first, valid, scale);
    if (g < G)
        step_group(1, q + g * hd, m + g, l + g, acc + g * hd, Kb, Vb, hd, first, valid, scale);
}

/* ---------------------------------------------------------------------- */
/* chunks, fold, tasks */

struct bufs {
    float K[HDMAX * SUB] __attribute__((aligned(64)));
    float V[SUB * HDMAX] __attribute__((aligned(64)));
};

static void states_clear(struct kn_attn_states *s, int nq, int hd) {
    for (int i = 0; i < nq; i++) {
        s->m[i] = -INFINITY;
        s->l[i] = 0.0f;
    }
    memset(s->acc, 0, (size_t)nq * hd * sizeof(float));
}

enum { PF_AHEAD = 4 }; /* blocks ahead for the L2 prefetch */

static inline __attribute__((always_inline)) void prefetch_tile(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Keys of chunk c for every row of the task into cur (cleared first):
 * steps below the first row's window are not read; inside a step, keys
 * outside a row's [lo, p] are masked. */
static void chunk_pass(const struct kn_attn_task *t, int c, struct kn_attn_states *cur) {
    const struct kn_kv_layout *kv = t->kv;
    int hd = kv->head_dim, bs = kv->block_size, G = t->group;
    int n_kv_max = t->pos + t->n_rows;
    int k0 = c * KN_ATTN_CHUNK;
    int k1 = k0 + KN_ATTN_CHUNK < n_kv_max ? k0 + KN_ATTN_CHUNK : n_kv_max;
    int lo0 = kn_attn_lo(t, 0) / SUB * SUB;
    struct bufs bb, *b = &bb;
    states_clear(cur, t->n_rows * G, hd);
    for (int s0 = k0 > lo0 ? k0 : lo0; s0 < k1; s0 += SUB) {
        const uint8_t *tile = kn_kv_tile(kv, t->base, t->blocks[s0 / bs], t->kv_head);
        int nxt = s0 + bs - s0 % bs;
        if (s0 % bs == 0 && nxt < k1)
            prefetch_tile(kn_kv_tile(kv, t->base, t->blocks[nxt / bs], t->kv_head), kv->tile_bytes);
        /* and into L2 the tile PF_AHEAD blocks on (cpu/avx512/attn.c) */
        if (s0 % bs == 0 && s0 + PF_AHEAD * bs < n_kv_max) {
            const char *fp = (const char *)kn_kv_tile(kv, t->base, t->blocks[s0 / bs + PF_AHEAD], t->kv_head);
            for (size_t o = 0; o < kv->tile_bytes; o += 64) _mm_prefetch(fp + o, _MM_HINT_T1);
        }
        load_step(kv, tile, s0 % bs, b->K, b->V);
        for (int r = 0; r < t->n_rows; r++) {
            int valid = t->pos + r + 1 - s0, first = kn_attn_lo(t, r) - s0;
            if (valid > SUB) valid = SUB;
            if (first < 0) first = 0;
            if (first >= valid) continue;
            int i = r * G;
            step_row(t->q + (size_t)r * t->q_stride, cur->m + i, cur->l + i, cur->acc + (size_t)i * hd,
                     G, b->K, b->V, hd, first, valid, t->scale);
        }
    }
}

static void fold(float *m, float *l, float *acc, float cm, float cl, const float *cacc, int hd) {
    float mx = *m > cm ? *m : cm;
    float a = expf(*m - mx), b = expf(cm - mx);
    *m = mx;
    *l = *l * a + cl * b;
    __m256 av = _mm256_set1_ps(a), bv = _mm256_set1_ps(b);
    for (int d = 0; d < hd; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(acc + d), av),
                                                _mm256_mul_ps(_mm256_loadu_ps(cacc + d), bv)));
}

static void finish(float l, const float *acc, float *out, int hd) {
    __m256 inv = _mm256_set1_ps(1.0f / l);
    for (int d = 0; d < hd; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), inv));
}

static const struct kn_attn_prims prims = {.chunk_pass = chunk_pass, .fold = fold, .finish = finish};

static void attn_avx2(const struct kn_attn_task *t) { kn_attn_fold_attn(&prims, t); }
static void partial_avx2(const struct kn_attn_task *t) { kn_attn_fold_partial(&prims, t); }
static void reduce_avx2(const struct kn_attn_task *t) { kn_attn_fold_reduce(&prims, t); }

const struct kn_attn_ops kn_attn_ops_avx2 = {
    .name = "avx2",
    .attn = attn_avx2,
    .partial = partial_avx2,
    .reduce = reduce_avx2,
    .window = true,
};
