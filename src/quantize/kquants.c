/*
 * kquants.c - searched quantizers for the 256-element super-block types:
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS.
 *
 * Error measure: search.c's weighted squared error, with sigma2 the
 * super-block's mean square, summed over the super-block.
 *
 * A super-block holds sub-blocks of 16 or 32 elements, each with an
 * integer scale (and for the affine types an integer min) times the
 * super-block's f16 d (and dmin). The search, per super-block:
 *   1. every sub-block gets its own float fit (search.c);
 *   2. d (dmin) is set so the largest sub-block scale (min) takes the
 *      largest integer, rounded to f16;
 *   3. every sub-block picks its integer scale (and min) among the three
 *      (3 x 3) integers around its float optimum divided by d, by the
 *      error of its elements re-rounded at that scale;
 *   4. d (and dmin) are refitted by least squares over the super-block
 *      for those integers and indices, rounded to f16, the float optima
 *      of step 3 are recomputed from the current indices, and 3-4 repeat
 *      while the super-block's error goes down (at most SB_ITERS times).
 * The encoding with the lowest error is kept. (llama.cpp without an
 * importance matrix does steps 1 and 2, then re-rounds the indices once.)
 *
 * Layouts (GGUF, see kernels/blocks.h): sub-block j of a 16-element type
 * covers elements 16j..16j+15, of a 32-element type 32j..32j+31.
 *   Q2_K   x = d*sc*q - dmin*m, q 2-bit, sc and m 4-bit (scales[j] = sc | m<<4)
 *   Q3_K   x = d*(sc-32)*(q-4), q 3-bit (2 low bits in qs, the high in hmask),
 *          sc 6-bit in 12 bytes
 *   Q4_K   x = d*sc*q - dmin*m, q 4-bit, sc and m 6-bit in 12 bytes
 *   Q5_K   as Q4_K with a fifth bit per element in qh
 *   Q6_K   x = d*sc*(q-32), q 6-bit (4 in ql, 2 in qh), sc int8
 *   IQ4_XS x = d*(sc-32)*table[q], q 4-bit, sc 6-bit (4 in scales_l, 2 in scales_h)
 * The 2-bit fields of Q2_K/Q3_K and the qh of Q5_K/Q6_K interleave the
 * four 32-element quarters of each 128 elements: byte l of a 32-byte
 * group holds element l of every quarter.
 */
#include <math.h>
#include <string.h>

#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

#define SB_ITERS 4
#define NSUB_MAX 16

static inline int clampi(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

// ----------------------------------------------------------------------------
// affine super-blocks (Q2_K, Q4_K, Q5_K)

struct sb_aff {
    float d, dmin;
    uint8_t sc[NSUB_MAX], mn[NSUB_MAX];
    uint8_t L[QK_K];
};

static void sb_affine(const float *x, const float *w, int nsub, int nmax, int scmax,
                      struct sb_aff *r) {
    const int sn = QK_K / nsub;
    float s[NSUB_MAX], m[NSUB_MAX];
    uint8_t L[QK_K], Lc[32], sc[NSUB_MAX], mn[NSUB_MAX];
    float max_s = 0.0f, max_m = 0.0f;
    for (int j = 0; j < nsub; j++) {
        float o;
        s[j] = qs_fit_affine(nmax, true, sn, x + j * sn, w + j * sn, L + j * sn, &o, NULL);
        m[j] = -o;
        if (s[j] > max_s) max_s = s[j];
        if (m[j] > max_m) max_m = m[j];
    }
    float d = qs_f16_round(max_s / (float)scmax), dm = qs_f16_round(max_m / (float)scmax);
    double best = INFINITY;
    for (int it = 0; it < SB_ITERS; it++) {
        double tot = 0.0;
        for (int j = 0; j < nsub; j++) {
            const float *xj = x + j * sn, *wj = w + j * sn;
            int c0 = d > 0.0f ? clampi(qs_round(s[j] / d), 0, scmax) : 0;
            int m0 = dm > 0.0f ? clampi(qs_round(m[j] / dm), 0, scmax) : 0;
            double be = INFINITY;
            for (int a = c0 - 1; a <= c0 + 1; a++) {
                if (a < 0 || a > scmax || (a != c0 && d == 0.0f)) continue;
                for (int b = m0 - 1; b <= m0 + 1; b++) {
                    if (b < 0 || b > scmax || (b != m0 && dm == 0.0f)) continue;
                    double e = qs_aff_round(nmax, sn, xj, wj, d * (float)a, -dm * (float)b, Lc);
                    if (e < be) {
                        be = e, sc[j] = (uint8_t)a, mn[j] = (uint8_t)b;
                        memcpy(L + j * sn, Lc, (size_t)sn);
                    }
                }
            }
            tot += be;
        }
        if (!(tot < best)) break;
        best = tot;
        r->d = d, r->dmin = dm;
        memcpy(r->sc, sc, sizeof(sc));
        memcpy(r->mn, mn, sizeof(mn));
        memcpy(r->L, L, sizeof(L));
        if (it == SB_ITERS - 1) break;
        /* refit x ~= d*a + c*b, a = sc*L, b = mn, c = -dmin */
        double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
        for (int i = 0; i < QK_K; i++) {
            double a = (double)sc[i / sn] * L[i], b = mn[i / sn], wi = w[i];
            saa += wi * a * a, sab += wi * a * b, sbb += wi * b * b;
            sxa += wi * x[i] * a, sxb += wi * x[i] * b;
        }
        double nd, nc;
        double det = saa * sbb - sab * sab;
        if (sbb > 0.0 && det > 1e-12 * saa * sbb) {
            nd = (sxa * sbb - sxb * sab) / det;
            nc = (saa * sxb - sab * sxa) / det;
            if (nc > 0.0) nc = 0.0, nd = sxa / saa;
        } else {
            nd = saa > 0.0 ? sxa / saa : 0.0;
            nc = -dm;
        }
        if (!(nd > 0.0)) break;
        float d2 = qs_f16_round((float)nd), dm2 = qs_f16_round((float)-nc);
        for (int j = 0; j < nsub; j++) {
            double oo;
            s[j] = (float)qs_aff_ls(sn, x + j * sn, w + j * sn, L + j * sn, true, &oo);
            m[j] = (float)-oo;
        }
        d = d2, dm = dm2;
    }
}

// ----------------------------------------------------------------------------
// symmetric super-blocks (Q3_K, Q6_K, IQ4_XS)

struct sb_sym {
    float d;
    int sc[NSUB_MAX];
    uint8_t L[QK_K];
};

static void sb_symmetric(const float *x, const float *w, const struct qs_grid *g, int nsub,
                         int scmin, int scmax, struct sb_sym *r) {
    const int sn = QK_K / nsub;
    float s[NSUB_MAX];
    int sc[NSUB_MAX];
    uint8_t L[QK_K], Lc[32];
    float max_s = 0.0f;
    for (int j = 0; j < nsub; j++) {
        s[j] = qs_fit_sym(g, sn, x + j * sn, w + j * sn, L + j * sn, NULL);
        if (fabsf(s[j]) > fabsf(max_s)) max_s = s[j];
    }
    /* the largest scale takes the end of the integer range with more room */
    float d = qs_f16_round(max_s / (float)scmin);
    double best = INFINITY;
    for (int it = 0; it < SB_ITERS; it++) {
        double tot = 0.0;
        for (int j = 0; j < nsub; j++) {
            const float *xj = x + j * sn, *wj = w + j * sn;
            int c0 = d != 0.0f ? clampi(qs_round(s[j] / d), scmin, scmax) : 0;
            double be = INFINITY;
            for (int a = c0 - 1; a <= c0 + 1; a++) {
                if (a < scmin || a > scmax || (a != c0 && d == 0.0f)) continue;
                double e = qs_sym_round(g, sn, xj, wj, d * (float)a, Lc);
                if (e < be) {
                    be = e, sc[j] = a;
                    memcpy(L + j * sn, Lc, (size_t)sn);
                }
            }
            tot += be;
        }
        if (!(tot < best)) break;
        best = tot;
        r->d = d;
        memcpy(r->sc, sc, sizeof(sc));
        memcpy(r->L, L, sizeof(L));
        if (it == SB_ITERS - 1 || d == 0.0f) break;
        double sxa = 0, saa = 0;
        for (int i = 0; i < QK_K; i++) {
            double a = (double)sc[i / sn] * g->lv[L[i]];
            sxa += (double)w[i] * x[i] * a, saa += (double)w[i] * a * a;
        }
        if (!(saa > 0.0)) break;
        for (int j = 0; j < nsub; j++)
            s[j] = (float)qs_sym_ls(g, sn, x + j * sn, w + j * sn, L + j * sn);
        d = qs_f16_round((float)(sxa / saa));
    }
}

// ----------------------------------------------------------------------------
// packing

/* 2-bit fields: byte l of each 32-byte group holds element l of the four
 * quarters of 128 elements (Q2_K and the low bits of Q3_K). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < QK_K / 128; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *e = L + 128 * h + l;
            qs[32 * h + l] = (uint8_t)((e[0] & 3) | (e[32] & 3) << 2 | (e[64] & 3) << 4 |
                                       (e[96] & 3) << 6);
        }
}

/* The 12-byte 6-bit scale and min fields of Q4_K/Q5_K: sub-blocks 0-3 in
 * the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 with their low
 * nibbles in bytes 8-11 and their top 2 bits in the spare bits above. */
static void pack_k4_scales(const uint8_t *sc, const uint8_t *mn, uint8_t *q) {
    memset(q, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = sc[j];
            q[j + 4] = mn[j];
        } else {
            q[j + 4] = (uint8_t)((sc[j] & 0xf) | (mn[j] & 0xf) << 4);
            q[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            q[j] |= (uint8_t)((mn[j] >> 4) << 6);
        }
    }
}

void qt_quantize_q2_k(const float *x, void *dst, int64_t n) {
    struct blk_q2_k *y = dst;
    float w[QK_K];
    struct sb_aff r;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        qs_weights(x, QK_K, w);
        sb_affine(x, w, 16, 3, 15, &r);
        for (int j = 0; j < 16; j++) y[b].scales[j] = (uint8_t)(r.sc[j] | r.mn[j] << 4);
        pack_2bit(r.L, y[b].qs);
        y[b].d = kn_f32_to_f16(r.d);
        y[b].dmin = kn_f32_to_f16(r.dmin);
    }
}

void qt_quantize_q4_k(const float *x, void *dst, int64_t n) {
    struct blk_q4_k *y = dst;
    float w[QK_K];
    struct sb_aff r;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        qs_weights(x, QK_K, w);
        sb_affine(x, w, 8, 15, 63, &r);
        y[b].d = kn_f32_to_f16(r.d);
        y[b].dmin = kn_f32_to_f16(r.dmin);
        pack_k4_scales(r.sc, r.mn, y[b].scales);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[b].qs[32 * c + l] = (uint8_t)(r.L[64 * c + l] | r.L[64 * c + 32 + l] << 4);
    }
}

void qt_quantize_q5_k(const float *x, void *dst, int64_t n) {
    struct blk_q5_k *y = dst;
    float w[QK_K];
    struct sb_aff r;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        qs_weights(x, QK_K, w);
        sb_affine(x, w, 8, 31, 63, &r);
        y[b].d = kn_f32_to_f16(r.d);
        y[b].dmin = kn_f32_to_f16(r.dmin);
        pack_k4_scales(r.sc, r.mn, y[b].scales);
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                uint8_t lo = r.L[64 * c + l], hi = r.L[64 * c + 32 + l];
                y[b].qs[32 * c + l] = (uint8_t)((lo & 0xf) | (hi & 0xf) << 4);
                y[b].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
    }
}

void qt_quantize_q3_k(const float *x, void *dst, int64_t n) {
    struct blk_q3_k *y = dst;
    float w[QK_K];
    struct sb_sym r;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        qs_weights(x, QK_K, w);
        sb_symmetric(x, w, &qs_grid_q3, 16, -32, 31, &r);
        /* 6-bit scales: low nibble at byte j%8 (nibble j/8), top 2 bits at
         * byte 8 + j%4, bits 2*(j/4) */
        memset(y[b].scales, 0, sizeof(y[b].scales));
        for (int j = 0; j < 16; j++) {
            int v = r.sc[j] + 32;
            y[b].scales[j % 8] |= (uint8_t)((v & 0xf) << (4 * (j / 8)));
            y[b].scales[8 + j % 4] |= (uint8_t)((v >> 4) << (2 * (j / 4)));
        }
        /* L = q + 4 in [0, 7]: the low 2 bits in qs, the third in hmask
         * (byte e % 32, bit e / 32 for element e) */
        uint8_t lo[QK_K];
        memset(y[b].hmask, 0, sizeof(y[b].hmask));
        for (int e = 0; e < QK_K; e++) {
            lo[e] = r.L[e] & 3;
            y[b].hmask[e % 32] |= (uint8_t)((r.L[e] >> 2) << (e / 32));
        }
        pack_2bit(lo, y[b].qs);
        y[b].d = kn_f32_to_f16(r.d);
    }
}

void qt_quantize_q6_k(const float *x, void *dst, int64_t n) {
    struct blk_q6_k *y = dst;
    float w[QK_K];
    struct sb_sym r;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        qs_weights(x, QK_K, w);
        sb_symmetric(x, w, &qs_grid_q6, 16, -128, 127, &r);
        for (int j = 0; j < 16; j++) y[b].scales[j] = (int8_t)r.sc[j];
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *e = r.L + 128 * h + l; /* L = q + 32 in [0, 63] */
                y[b].ql[64 * h + l] = (uint8_t)((e[0] & 0xf) | (e[64] & 0xf) << 4);
                y[b].ql[64 * h + 32 + l] = (uint8_t)((e[32] & 0xf) | (e[96] & 0xf) << 4);
                y[b].qh[32 * h + l] = (uint8_t)((e[0] >> 4) | (e[32] >> 4) << 2 |
                                                (e[64] >> 4) << 4 | (e[96] >> 4) << 6);
            }
        y[b].d = kn_f32_to_f16(r.d);
    }
}

void qt_quantize_iq4_xs(const float *x, void *dst, int64_t n) {
    struct blk_iq4_xs *y = dst;
    float w[QK_K];
    struct sb_sym r;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        qs_weights(x, QK_K, w);
        sb_symmetric(x, w, &qs_grid_iq4, 8, -32, 31, &r);
        uint16_t sh = 0;
        memset(y[b].scales_l, 0, sizeof(y[b].scales_l));
        for (int j = 0; j < 8; j++) {
            int v = r.sc[j] + 32;
            y[b].scales_l[j / 2] |= (uint8_t)((v & 0xf) << (4 * (j % 2)));
            sh |= (uint16_t)((v >> 4) << (2 * j));
        }
        y[b].scales_h = sh;
        for (int j = 0; j < 8; j++)
            for (int l = 0; l < 16; l++)
                y[b].qs[16 * j + l] = (uint8_t)(r.L[32 * j + l] | r.L[32 * j + 16 + l] << 4);
        y[b].d = kn_f32_to_f16(r.d);
    }
}
