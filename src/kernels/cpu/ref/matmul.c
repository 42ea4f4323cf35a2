/*
 * matmul.c (ref) - the specification of every matmul and activation
 * conversion: plain loops, no intrinsics.
 *
 * The 32-element types take Q8A activations; each block's dot product is
 * an exact integer sum, scaled and accumulated in float in block order:
 *   Q8_0:   acc += dw * da * sum(qw * qa)
 *   Q4_0:   acc += dw * (da * sum(qw * qa) - 8 * sa)      qw in 0..15
 *   Q4_1:   acc += dw * da * sum(qw * qa) + mw * sa        qw in 0..15
 *   Q5_0:   acc += dw * (da * sum(qw * qa) - 16 * sa)     qw in 0..31
 *   Q5_1:   acc += dw * da * sum(qw * qa) + mw * sa        qw in 0..31
 *   IQ4_NL: acc += dw * da * sum(kv[qw] * qa)
 *   MXFP4:  acc += hw * da * sum(kv[qw] * qa)      hw = kn_e8m0_half(e)
 * where sa = da * sum(qa) is stored with the activation block.
 *
 * The super-block types take Q8K activations (one scale da per 256). A
 * super-block's dot is two exact integer sums over its sub-blocks j
 * (isum_j = sum(qw * qa), bsum_j = sum(qa), both over sub-block j; |S| <
 * 2^31 for every input, see below), then one float step in super-block
 * order:
 *   Q4_K, Q5_K, Q2_K: S1 = sum sc_j * isum_j, S2 = sum m_j * bsum_j
 *           acc += d * da * S1 - dmin * da * S2        qw unsigned
 *   Q6_K:   S = sum sc_j * (isum_j - 32 * bsum_j)      qw in 0..63
 *   Q3_K:   S = sum sc_j * (isum_j - 4 * bsum_j)       qw = q + 4*h in 0..7
 *   IQ4_XS: S = sum ls_j * isum(kv[qw] * qa)
 *           acc += d * da * S
 * (C evaluates left to right: ((d * da) * S1) - ((dmin * da) * S2), then
 * acc + that. The fast kernels do the same operations, unfused, so they
 * are bit-exact with these.) Bounds: |qa| <= 127; Q6_K |S| <= 16 * 128 *
 * 16 * 95 * 127 < 4e8, every other type less.
 */
#include <math.h>

#include "kernels/cpu/ref/ref.h"

/* ---------------------------------------------------------------------- */
/* activation conversion */

/* q = round(x * id) clamped to [-127, 127]. |v| <= 127 for finite inputs,
 * except that a subnormal amax makes id infinite, and a NaN or infinite
 * input makes v NaN: converting those to int is undefined in C, so v is
 * clamped and NaN lanes quantize to 0. */
static inline int q8_round(float v) {
    return isnan(v) ? 0 : (int)nearbyintf(fminf(fmaxf(v, -127.0f), 127.0f));
}

/* Block b (elements [L*b, L*b + k), L = kn_act_block_len(act), k <= L,
 * k == L for the quantized formats) of an activation row of n elements,
 * from the k floats at x. The whole-row conversions below are this, block
 * by block; the fused norm/SiLU ops use it to convert as they go, with no
 * row-sized temporary. */
void kn_act_block_ref(void *restrict dst, const float *restrict x, int n, int b, int k, int act) {
    if (act == KN_ACT_Q8A_Q8K) {
        for (int s = 0; s < QK_K / QK; s++)
            kn_act_block_ref(dst, x + s * QK, n, b * (QK_K / QK) + s, QK, KN_ACT_Q8A);
        kn_act_block_ref((uint8_t *)dst + kn_act_part_offset(act, KN_ACT_Q8K, n), x, n, b, k,
                         KN_ACT_Q8K);
    } else if (act == KN_ACT_Q8K) {
        int8_t *qs = (int8_t *)dst + (size_t)b * QK_K;
        float *d = (float *)((uint8_t *)dst + n);
        int16_t *bs = (int16_t *)(d + n / QK_K) + b * (QK_K / 16);
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
        float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) {
                qs[j] = (int8_t)q8_round(x[j] * id);
                sum += qs[j];
            }
            bs[g] = (int16_t)sum;
        }
        d[b] = db;
    } else if (act == KN_ACT_Q8A) {
        int nb = n / QK;
        int8_t *qs = (int8_t *)dst + (size_t)b * QK;
        float *d = (float *)((uint8_t *)dst + n);
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        float db = amax / 127.0f, id = db != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            int q = q8_round(x[j] * id);
            qs[j] = (int8_t)q;
            sum += q;
        }
        d[b] = db;
        d[nb + b] = db * (float)sum;
    } else if (act == KN_ACT_BF16) {
        for (int j = 0; j < k; j++) ((kn_bf16 *)dst)[(size_t)b * QK + j] = kn_f32_to_bf16(x[j]);
    } else {
        memcpy((float *)dst + (size_t)b * QK, x, (size_t)k * sizeof(float));
    }
}

void kn_act_q8a_ref(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK; b++) kn_act_block_ref(dst, x + (size_t)b * QK, n, b, QK, KN_ACT_Q8A);
}

void kn_act_q8k_ref(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK_K; b++)
        kn_act_block_ref(dst, x + (size_t)b * QK_K, n, b, QK_K, KN_ACT_Q8K);
}

void kn_act_q8a_q8k_ref(void *restrict dst, const float *restrict x, int n) {
    for (int b = 0; b < n / QK_K; b++)
        kn_act_block_ref(dst, x + (size_t)b * QK_K, n, b, QK_K, KN_ACT_Q8A_Q8K);
}

void kn_act_bf16_ref(void *restrict dst, const float *restrict x, int n) {
    kn_bf16 *y = dst;
    for (int i = 0; i < n; i++) y[i] = kn_f32_to_bf16(x[i]);
}

void kn_act_f32_ref(void *restrict dst, const float *restrict x, int n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}

/* ---------------------------------------------------------------------- */
/* one dot product per weight type */

/* Integer dot product of one 32-element block's unsigned 4-bit quants
 * (low nibbles elements 0..15, high 16..31) with 32 int8 activations. */
static inline int isum_q4(const uint8_t qs[QK / 2], const int8_t *qa) {
    int isum = 0;
    for (int j = 0; j < QK / 2; j++) {
        isum += (qs[j] & 0x0f) * qa[j];
        isum += (qs[j] >> 4) * qa[QK / 2 + j];
    }
    return isum;
}

/* The same for 5-bit quants: bit 4 of element j is bit j of qh. */
static inline int isum_q5(const uint8_t qs[QK / 2], const uint8_t qh4[4], const int8_t *qa) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    int isum = 0;
    for (int j = 0; j < QK / 2; j++) {
        isum += ((qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4) * qa[j];
        isum += ((qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4) * qa[QK / 2 + j];
    }
    return isum;
}

static float dot_q8_0(const struct blk_q8_0 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < QK; j++) isum += w[b].qs[j] * qa[b * QK + j];
        acc += kn_f16_to_f32(w[b].d) * da[b] * (float)isum;
    }
    return acc;
}

static float dot_q4_0(const struct blk_q4_0 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    const float *sa = da + nb;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = isum_q4(w[b].qs, qa + b * QK);
        acc += kn_f16_to_f32(w[b].d) * (da[b] * (float)isum - 8.0f * sa[b]);
    }
    return acc;
}

static float dot_q4_1(const struct blk_q4_1 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    const float *sa = da + nb;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = isum_q4(w[b].qs, qa + b * QK);
        acc += kn_f16_to_f32(w[b].d) * da[b] * (float)isum + kn_f16_to_f32(w[b].m) * sa[b];
    }
    return acc;
}

static float dot_q5_0(const struct blk_q5_0 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    const float *sa = da + nb;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = isum_q5(w[b].qs, w[b].qh, qa + b * QK);
        acc += kn_f16_to_f32(w[b].d) * (da[b] * (float)isum - 16.0f * sa[b]);
    }
    return acc;
}

static float dot_q5_1(const struct blk_q5_1 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    const float *sa = da + nb;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = isum_q5(w[b].qs, w[b].qh, qa + b * QK);
        acc += kn_f16_to_f32(w[b].d) * da[b] * (float)isum + kn_f16_to_f32(w[b].m) * sa[b];
    }
    return acc;
}

static float dot_iq4_nl(const struct blk_iq4_nl *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < QK / 2; j++) {
            isum += kn_iq4nl_values[w[b].qs[j] & 0x0f] * qa[b * QK + j];
            isum += kn_iq4nl_values[w[b].qs[j] >> 4] * qa[b * QK + QK / 2 + j];
        }
        acc += kn_f16_to_f32(w[b].d) * da[b] * (float)isum;
    }
    return acc;
}

static float dot_mxfp4(const struct blk_mxfp4 *w, const uint8_t *xa, int n) {
    int nb = n / QK;
    const int8_t *qa = (const int8_t *)xa;
    const float *da = (const float *)(xa + n);
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int j = 0; j < QK / 2; j++) {
            isum += kn_mxfp4_values[w[b].qs[j] & 0x0f] * qa[b * QK + j];
            isum += kn_mxfp4_values[w[b].qs[j] >> 4] * qa[b * QK + QK / 2 + j];
        }
        acc += kn_e8m0_half(w[b].e) * da[b] * (float)isum;
    }
    return acc;
}

/* A Q8K activation row: qs, the scale of super-block i, the sum of the 16
 * qs starting at element e (e a multiple of 16). */
struct q8k_row {
    const int8_t *qs;
    const float *d;
    const int16_t *bsums;
};
static struct q8k_row q8k_row(const uint8_t *xa, int n) {
    struct q8k_row a = {(const int8_t *)xa, (const float *)(xa + n), NULL};
    a.bsums = (const int16_t *)(a.d + n / QK_K);
    return a;
}
/* isum = sum over elements e in [e0, e0 + len) of super-block i of
 * q(e) * qa(e), q(e) an expression of e */
#define SUB_DOT(q_of_e, e0, len, isum) \
    do { \
        isum = 0; \
        for (int e = (e0); e < (e0) + (len); e++) isum += (q_of_e) * a.qs[i * QK_K + e]; \
    } while (0)

static float dot_q2_k(const struct blk_q2_k *w, const uint8_t *xa, int n) {
    struct q8k_row a = q8k_row(xa, n);
    float acc = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int s1 = 0, s2 = 0;
        for (int j = 0; j < 16; j++) {
            int isum;
            SUB_DOT((w[i].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3, 16 * j, 16, isum);
            s1 += (w[i].scales[j] & 0x0f) * isum;
            s2 += (w[i].scales[j] >> 4) * a.bsums[i * 16 + j];
        }
        acc += kn_f16_to_f32(w[i].d) * a.d[i] * (float)s1 - kn_f16_to_f32(w[i].dmin) * a.d[i] * (float)s2;
    }
    return acc;
}

static float dot_q3_k(const struct blk_q3_k *w, const uint8_t *xa, int n) {
    struct q8k_row a = q8k_row(xa, n);
    float acc = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int sc[16], s = 0;
        kn_q3_k_scales(w[i].scales, sc);
        for (int j = 0; j < 16; j++) {
            int isum;
            SUB_DOT(((w[i].qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) +
                         4 * ((w[i].hmask[e % 32] >> (e / 32)) & 1),
                     16 * j, 16, isum);
            s += sc[j] * (isum - 4 * a.bsums[i * 16 + j]);
        }
        acc += kn_f16_to_f32(w[i].d) * a.d[i] * (float)s;
    }
    return acc;
}

static float dot_q4_k(const struct blk_q4_k *w, const uint8_t *xa, int n) {
    struct q8k_row a = q8k_row(xa, n);
    float acc = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int s1 = 0, s2 = 0;
        for (int j = 0; j < 8; j++) {
            int isum, sc, m;
            kn_k_scale_min(w[i].scales, j, &sc, &m);
            SUB_DOT((w[i].qs[32 * (e / 64) + e % 32] >> (4 * (e % 64 / 32))) & 0x0f, 32 * j, 32, isum);
            s1 += sc * isum;
            s2 += m * (a.bsums[i * 16 + 2 * j] + a.bsums[i * 16 + 2 * j + 1]);
        }
        acc += kn_f16_to_f32(w[i].d) * a.d[i] * (float)s1 - kn_f16_to_f32(w[i].dmin) * a.d[i] * (float)s2;
    }
    return acc;
}

static float dot_q5_k(const struct blk_q5_k *w, const uint8_t *xa, int n) {
    struct q8k_row a = q8k_row(xa, n);
    float acc = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int s1 = 0, s2 = 0;
        for (int j = 0; j < 8; j++) {
            int isum, sc, m;
            kn_k_scale_min(w[i].scales, j, &sc, &m);
            SUB_DOT(((w[i].qs[32 * (e / 64) + e % 32] >> (4 * (e % 64 / 32))) & 0x0f) |
                         ((w[i].qh[e % 32] >> (e / 32)) & 1) << 4,
                     32 * j, 32, isum);
            s1 += sc * isum;
            s2 += m * (a.bsums[i * 16 + 2 * j] + a.bsums[i * 16 + 2 * j + 1]);
        }
        acc += kn_f16_to_f32(w[i].d) * a.d[i] * (float)s1 - kn_f16_to_f32(w[i].dmin) * a.d[i] * (float)s2;
    }
    return acc;
}

static float dot_q6_k(const struct blk_q6_k *w, const uint8_t *xa, int n) {
    struct q8k_row a = q8k_row(xa, n);
    float acc = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++) {
            int isum;
            SUB_DOT(((w[i].ql[64 * (e / 128) + 32 * (e % 128 / 32 % 2) + e % 32] >> (4 * (e % 128 / 64))) & 0x0f) |
                         ((w[i].qh[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) << 4,
                     16 * j, 16, isum);
            s += w[i].scales[j] * (isum - 32 * a.bsums[i * 16 + j]);
        }
        acc += kn_f16_to_f32(w[i].d) * a.d[i] * (float)s;
    }
    return acc;
}

static float dot_iq4_xs(const struct blk_iq4_xs *w, const uint8_t *xa, int n) {
    struct q8k_row a = q8k_row(xa, n);
    float acc = 0.0f;
    for (int i = 0; i < n / QK_K; i++) {
        int ls[8], s = 0;
        kn_iq4_xs_scales(&w[i], ls);
        for (int j = 0; j < 8; j++) {
            int isum;
            SUB_DOT(kn_iq4nl_values[(w[i].qs[16 * j + e % 16] >> (4 * (e % 32 / 16))) & 0x0f], 32 * j, 32,
                     isum);
            s += ls[j] * isum;
        }
        acc += kn_f16_to_f32(w[i].d) * a.d[i] * (float)s;
    }
    return acc;
}

static float dot_f16(const kn_f16 *w, const float *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += kn_f16_to_f32(w[i]) * x[i];
    return acc;
}

static float dot_bf16(const kn_bf16 *w, const kn_bf16 *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += kn_bf16_to_f32(w[i]) * kn_bf16_to_f32(x[i]);
    return acc;
}

static float dot_f32(const float *w, const float *x, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += w[i] * x[i];
    return acc;
}

/* ---------------------------------------------------------------------- */
/* matmuls: one dot per (token, row) */

#define DEFINE_MATMUL(NAME, DOT, WT, XT) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1) { \
        for (int t = 0; t < n_tokens; t++) { \
            const XT *xt = (const XT *)((const uint8_t *)x + (size_t)t * x_stride); \
            for (int r = r0; r < r1; r++) { \
                const WT *wr = (const WT *)((const uint8_t *)w + (size_t)r * w_stride); \
                y[(size_t)t * ldy + r] = DOT(wr, xt, n); \
            } \
        } \
    }

DEFINE_MATMUL(kn_matmul_q8_0_ref, dot_q8_0, struct blk_q8_0, uint8_t)
DEFINE_MATMUL(kn_matmul_q4_0_ref, dot_q4_0, struct blk_q4_0, uint8_t)
DEFINE_MATMUL(kn_matmul_q4_1_ref, dot_q4_1, struct blk_q4_1, uint8_t)
DEFINE_MATMUL(kn_matmul_q5_0_ref, dot_q5_0, struct blk_q5_0, uint8_t)
DEFINE_MATMUL(kn_matmul_q5_1_ref, dot_q5_1, struct blk_q5_1, uint8_t)
DEFINE_MATMUL(kn_matmul_iq4_nl_ref, dot_iq4_nl, struct blk_iq4_nl, uint8_t)
DEFINE_MATMUL(kn_matmul_mxfp4_ref, dot_mxfp4, struct blk_mxfp4, uint8_t)
DEFINE_MATMUL(kn_matmul_q2_k_ref, dot_q2_k, struct blk_q2_k, uint8_t)
DEFINE_MATMUL(kn_matmul_q3_k_ref, dot_q3_k, struct blk_q3_k, uint8_t)
DEFINE_MATMUL(kn_matmul_q4_k_ref, dot_q4_k, struct blk_q4_k, uint8_t)
DEFINE_MATMUL(kn_matmul_q5_k_ref, dot_q5_k, struct blk_q5_k, uint8_t)
DEFINE_MATMUL(kn_matmul_q6_k_ref, dot_q6_k, struct blk_q6_k, uint8_t)
DEFINE_MATMUL(kn_matmul_iq4_xs_ref, dot_iq4_xs, struct blk_iq4_xs, uint8_t)
DEFINE_MATMUL(kn_matmul_f16_ref, dot_f16, kn_f16, float)
DEFINE_MATMUL(kn_matmul_bf16_ref, dot_bf16, kn_bf16, kn_bf16)
DEFINE_MATMUL(kn_matmul_f32_ref, dot_f32, float, float)
