/*
 * blocks.c - the reference definition of every weight format: half/bfloat16
 * conversions, dequantization of every type GGUF files hold that anvil
 * reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4,
 * Q2_K..Q6_K, IQ4_XS, Q8_K), quantization of the simple ones (F16, BF16,
 * Q8_0, Q4_0, Q4_1, MXFP4), the scale check, and the activation-format bookkeeping (sizes,
 * which format a type consumes). The activation conversions themselves are
 * in matmul.c, next to the dot products that define their use.
 *
 * Quantization follows ggml's reference routines (quantize_row_*_ref), so
 * a file written by `anvil quantize` matches what llama.cpp would write.
 * Dequantization is bit-exact with the gguf Python package (gguf/quants.py,
 * tests/py/test_quant.py): each element is the same float32 products in
 * the same order (blocks.h spells them out), never contracted to FMAs.
 * The weight quantizers with scale search for the other types live in
 * src/quantize, above this layer.
 */
#include <math.h>
#include <stddef.h>

#include "core/core.h"
#include "gguf/gguf_types.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"

/* ---------------------------------------------------------------------- */
/* half and bfloat16 */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

kn_f16 kn_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (kn_f16)(sign | 0x7e00 | ((abs >> 13) & 0x3ff)); /* NaN */
    if (abs >= 0x477ff000u) return (kn_f16)(sign | 0x7c00); /* rounds to inf */
    if (abs < 0x38800000u) {
        /* result is subnormal or zero: round abs * 2^24 to an integer, ties to even */
        float v = bits_f32(abs) * 16777216.0f;
        float r = nearbyintf(v); /* default rounding mode: nearest even */
        return (kn_f16)(sign | (uint16_t)r);
    }
    /* normal: add rounding bias for nearest-even on the 13 dropped bits */
    uint32_t mant_odd = (abs >> 13) & 1;
    abs += 0xfff + mant_odd;
    return (kn_f16)(sign | (uint16_t)(((abs >> 13) - (112u << 10)) & 0x7fff));
}

float kn_bf16_to_f32(kn_bf16 h) { return bits_f32((uint32_t)h << 16); }

kn_bf16 kn_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (kn_bf16)((u >> 16) | 64); /* quiet NaN */
    return (kn_bf16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

/* ---------------------------------------------------------------------- */
/* weight rows */

static void dequant_q8_0(const struct blk_q8_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_f16_to_f32(x[i].d);
        for (int j = 0; j < QK; j++) y[i * QK + j] = d * (float)x[i].qs[j];
    }
}

static void dequant_q4_0(const struct blk_q4_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_f16_to_f32(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)((x[i].qs[j] & 0x0f) - 8);
            y[i * QK + j + QK / 2] = d * (float)((x[i].qs[j] >> 4) - 8);
        }
    }
}

static void dequant_q4_1(const struct blk_q4_1 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_f16_to_f32(x[i].d), m = kn_f16_to_f32(x[i].m);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)(x[i].qs[j] & 0x0f) + m;
            y[i * QK + j + QK / 2] = d * (float)(x[i].qs[j] >> 4) + m;
        }
    }
}

static void dequant_q5_0(const struct blk_q5_0 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_f16_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK / 2; j++) {
            int lo = (x[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int hi = (x[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[i * QK + j] = d * (float)(lo - 16);
            y[i * QK + j + QK / 2] = d * (float)(hi - 16);
        }
    }
}

static void dequant_q5_1(const struct blk_q5_1 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_f16_to_f32(x[i].d), m = kn_f16_to_f32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK / 2; j++) {
            int lo = (x[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            int hi = (x[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[i * QK + j] = d * (float)lo + m;
            y[i * QK + j + QK / 2] = d * (float)hi + m;
        }
    }
}

static void dequant_iq4_nl(const struct blk_iq4_nl *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_f16_to_f32(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)kn_iq4nl_values[x[i].qs[j] & 0x0f];
            y[i * QK + j + QK / 2] = d * (float)kn_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

static void dequant_q2_k(const struct blk_q2_k *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        float d = kn_f16_to_f32(x[i].d), dmin = kn_f16_to_f32(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = e % 128 / 32, l = e % 32, j = e / 16;
            int q = (x[i].qs[32 * h + l] >> (2 * s)) & 3;
            float dl = d * (float)(x[i].scales[j] & 0x0f);
            float ml = dmin * (float)(x[i].scales[j] >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

static void dequant_q3_k(const struct blk_q3_k *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        float d = kn_f16_to_f32(x[i].d);
        int sc[16];
        kn_q3_k_scales(x[i].scales, sc);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = e % 128 / 32, l = e % 32;
            int q = (x[i].qs[32 * h + l] >> (2 * s)) & 3;
            int hb = (x[i].hmask[l] >> (e / 32)) & 1;
            float dl = d * (float)sc[e / 16];
            y[e] = dl * (float)(q - (hb ? 0 : 4));
        }
    }
}

static void dequant_q4_k(const struct blk_q4_k *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        float d = kn_f16_to_f32(x[i].d), dmin = kn_f16_to_f32(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            int c = e / 64, s = e % 64 / 32, l = e % 32, sc, m;
            kn_k_scale_min(x[i].scales, e / 32, &sc, &m);
            int q = (x[i].qs[32 * c + l] >> (4 * s)) & 0x0f;
            y[e] = (d * (float)sc) * (float)q - dmin * (float)m;
        }
    }
}

static void dequant_q5_k(const struct blk_q5_k *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        float d = kn_f16_to_f32(x[i].d), dmin = kn_f16_to_f32(x[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            int c = e / 64, s = e % 64 / 32, l = e % 32, sc, m;
            kn_k_scale_min(x[i].scales, e / 32, &sc, &m);
            int q = ((x[i].qs[32 * c + l] >> (4 * s)) & 0x0f) | ((x[i].qh[l] >> (e / 32)) & 1) << 4;
            y[e] = (d * (float)sc) * (float)q - dmin * (float)m;
        }
    }
}

static void dequant_q6_k(const struct blk_q6_k *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        float d = kn_f16_to_f32(x[i].d);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, s = e % 128 / 32, l = e % 32;
            int lo = (x[i].ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0x0f;
            int hi = (x[i].qh[32 * h + l] >> (2 * s)) & 3;
            float dl = d * (float)x[i].scales[e / 16];
            y[e] = dl * (float)((lo | hi << 4) - 32);
        }
    }
}

static void dequant_mxfp4(const struct blk_mxfp4 *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float d = kn_e8m0_half(x[i].e);
        for (int j = 0; j < QK / 2; j++) {
            y[i * QK + j] = d * (float)kn_mxfp4_values[x[i].qs[j] & 0x0f];
            y[i * QK + j + QK / 2] = d * (float)kn_mxfp4_values[x[i].qs[j] >> 4];
        }
    }
}

static void dequant_iq4_xs(const struct blk_iq4_xs *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        float d = kn_f16_to_f32(x[i].d);
        int ls[8];
        kn_iq4_xs_scales(&x[i], ls);
        for (int e = 0; e < QK_K; e++) {
            int j = e / 32, l = e % 32;
            int q = (x[i].qs[16 * j + l % 16] >> (4 * (l / 16))) & 0x0f;
            float dl = d * (float)ls[j];
            y[e] = dl * (float)kn_iq4nl_values[q];
        }
    }
}

static void dequant_q8_k(const struct blk_q8_k *x, float *y, int64_t k) {
    for (int64_t i = 0; i < k / QK_K; i++)
        for (int e = 0; e < QK_K; e++) y[i * QK_K + e] = x[i].d * (float)x[i].qs[e];
}

void kn_dequantize_row(int type, const void *src, float *dst, int64_t k) {
    switch (type) {
    case ANVIL_TYPE_F32: memcpy(dst, src, (size_t)k * sizeof(float)); break;
    case ANVIL_TYPE_F16:
        for (int64_t i = 0; i < k; i++) dst[i] = kn_f16_to_f32(((const kn_f16 *)src)[i]);
        break;
    case ANVIL_TYPE_BF16:
        for (int64_t i = 0; i < k; i++) dst[i] = kn_bf16_to_f32(((const kn_bf16 *)src)[i]);
        break;
    case ANVIL_TYPE_Q8_0: dequant_q8_0(src, dst, k); break;
    case ANVIL_TYPE_Q4_0: dequant_q4_0(src, dst, k); break;
    case ANVIL_TYPE_Q4_1: dequant_q4_1(src, dst, k); break;
    case ANVIL_TYPE_Q5_0: dequant_q5_0(src, dst, k); break;
    case ANVIL_TYPE_Q5_1: dequant_q5_1(src, dst, k); break;
    case ANVIL_TYPE_IQ4_NL: dequant_iq4_nl(src, dst, k); break;
    case ANVIL_TYPE_MXFP4: dequant_mxfp4(src, dst, k); break;
    case ANVIL_TYPE_Q2_K: dequant_q2_k(src, dst, k); break;
    case ANVIL_TYPE_Q3_K: dequant_q3_k(src, dst, k); break;
    case ANVIL_TYPE_Q4_K: dequant_q4_k(src, dst, k); break;
    case ANVIL_TYPE_Q5_K: dequant_q5_k(src, dst, k); break;
    case ANVIL_TYPE_Q6_K: dequant_q6_k(src, dst, k); break;
    case ANVIL_TYPE_IQ4_XS: dequant_iq4_xs(src, dst, k); break;
    case ANVIL_TYPE_Q8_K: dequant_q8_k(src, dst, k); break;
    default: break;
    }
}

static void quant_q8_0(const float *x, struct blk_q8_0 *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[i * QK + j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = kn_f32_to_f16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)roundf(x[i * QK + j] * id);
    }
}

static void quant_q4_0(const float *x, struct blk_q4_0 *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float amax = 0.0f, max = 0.0f; /* max keeps the sign of the largest magnitude */
        for (int j = 0; j < QK; j++) {
            float v = x[i * QK + j];
            if (amax < fabsf(v)) {
                amax = fabsf(v);
                max = v;
            }
        }
        float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = kn_f32_to_f16(d);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int)(int8_t)(x[i * QK + j] * id + 8.5f);
            int q1 = (int)(int8_t)(x[i * QK + QK / 2 + j] * id + 8.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void quant_q4_1(const float *x, struct blk_q4_1 *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK; j++) {
            float v = x[i * QK + j];
            if (v < min) min = v;
            if (v > max) max = v;
        }
        float d = (max - min) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = kn_f32_to_f16(d);
        y[i].m = kn_f32_to_f16(min);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int)(int8_t)((x[i * QK + j] - min) * id + 0.5f);
            int q1 = (int)(int8_t)((x[i * QK + QK / 2 + j] - min) * id + 0.5f);
            if (q0 > 15) q0 = 15;
            if (q1 > 15) q1 = 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ggml's rule: the scale byte from the block's largest magnitude a,
 * e = floor(log2(a)) - 2 + 127 (so that a / 2^(e-127) lands in [4, 8), the
 * top of the E2M1 range; 0 for an all-zero block; for a below 2^-125,
 * where ggml's float-to-uint8 conversion is undefined, taken mod 256 as
 * x86 builds of ggml do), then each element the code of the
 * nearest value h * kv (the first of equal errors: +0 before -0). log2f as
 * ggml calls it, so that a just below a power of two rounds like ggml's. */
static int mxfp4_nearest(float x, float h) {
    int best = 0;
    float best_err = fabsf(h * (float)kn_mxfp4_values[0] - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(h * (float)kn_mxfp4_values[i] - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void quant_mxfp4(const float *x, struct blk_mxfp4 *y, int64_t k) {
    for (int64_t i = 0; i < k / QK; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[i * QK + j]));
        /* finite amax gives -24..252 here; an infinite one (where ggml's
         * conversion is undefined) the largest scale */
        float ef = amax > 0.0f ? floorf(log2f(amax)) - 2.0f + 127.0f : 0.0f;
        uint8_t e = ef <= 255.0f ? (uint8_t)(int)ef : 255;
        float h = kn_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QK / 2; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_nearest(x[i * QK + j], h) |
                                   mxfp4_nearest(x[i * QK + QK / 2 + j], h) << 4);
    }
}

void kn_quantize_row(int type, const float *src, void *dst, int64_t k) {
    switch (type) {
    case ANVIL_TYPE_F32: memcpy(dst, src, (size_t)k * sizeof(float)); break;
    case ANVIL_TYPE_F16:
        for (int64_t i = 0; i < k; i++) ((kn_f16 *)dst)[i] = kn_f32_to_f16(src[i]);
        break;
    case ANVIL_TYPE_BF16:
        for (int64_t i = 0; i < k; i++) ((kn_bf16 *)dst)[i] = kn_f32_to_bf16(src[i]);
        break;
    case ANVIL_TYPE_Q8_0: quant_q8_0(src, dst, k); break;
    case ANVIL_TYPE_Q4_0: quant_q4_0(src, dst, k); break;
    case ANVIL_TYPE_Q4_1: quant_q4_1(src, dst, k); break;
    case ANVIL_TYPE_MXFP4: quant_mxfp4(src, dst, k); break;
    default: ANVIL_ASSERT(!"kn_quantize_row: type not quantized here (src/quantize has the others)");
    }
}

/* ---------------------------------------------------------------------- */
/* scale check */

/* Byte offsets of the f16 scales (d, dmin or m) inside one block; 0 ends. */
static int scale_offsets(int type, int off[2]) {
    switch (type) {
    case ANVIL_TYPE_Q4_1:
    case ANVIL_TYPE_Q5_1: off[0] = 0, off[1] = 2; return 2;
    case ANVIL_TYPE_Q4_K:
    case ANVIL_TYPE_Q5_K: off[0] = offsetof(struct blk_q4_k, d), off[1] = offsetof(struct blk_q4_k, dmin); return 2;
    case ANVIL_TYPE_Q2_K: off[0] = offsetof(struct blk_q2_k, d), off[1] = offsetof(struct blk_q2_k, dmin); return 2;
    case ANVIL_TYPE_Q3_K: off[0] = offsetof(struct blk_q3_k, d); return 1;
    case ANVIL_TYPE_Q6_K: off[0] = offsetof(struct blk_q6_k, d); return 1;
    case ANVIL_TYPE_Q8_0:
    case ANVIL_TYPE_Q4_0:
    case ANVIL_TYPE_Q5_0:
    case ANVIL_TYPE_IQ4_NL:
    case ANVIL_TYPE_IQ4_XS: off[0] = 0; return 1;
    default: return 0;
    }
}

int64_t kn_find_bad_scale(int type, const void *data, int64_t nrows, int64_t n,
                          size_t row_bytes) {
    const struct gguf_type_info *ti = gguf_type_info(type);
    if (!ti || !ti->read || !ti->quantized) return -1;
    int off[2];
    int64_t bb = ti->bytes, nb = n / ti->blck;
    if (type == ANVIL_TYPE_Q8_K) {
        for (int64_t r = 0; r < nrows; r++)
            for (int64_t b = 0; b < nb; b++) {
                float d;
                memcpy(&d, (const uint8_t *)data + (size_t)r * row_bytes + (size_t)(b * bb), 4);
                if (!isfinite(d)) return r * nb + b;
            }
        return -1;
    }
    int ns = scale_offsets(type, off);
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = (const uint8_t *)data + (size_t)r * row_bytes;
        /* an f16 is NaN or infinite exactly when its exponent bits are all
         * ones; OR-ing the masked exponents keeps the scan branch-free */
        for (int64_t b = 0; b < nb; b++) {
            uint16_t bad = 0;
            for (int s = 0; s < ns; s++) {
                uint16_t h;
                memcpy(&h, row + (size_t)(b * bb) + off[s], 2);
                bad |= (uint16_t)((h & 0x7c00) == 0x7c00);
            }
            if (bad) return r * nb + b;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------------- */
/* activation rows */

const int8_t kn_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
const int8_t kn_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

int kn_act_for_type(int type) {
    switch (type) {
    case ANVIL_TYPE_F32:
    case ANVIL_TYPE_F16: return KN_ACT_F32;
    case ANVIL_TYPE_BF16: return KN_ACT_BF16;
    case ANVIL_TYPE_Q8_0:
    case ANVIL_TYPE_Q4_0:
    case ANVIL_TYPE_Q4_1:
    case ANVIL_TYPE_Q5_0:
    case ANVIL_TYPE_Q5_1:
    case ANVIL_TYPE_IQ4_NL:
    case ANVIL_TYPE_MXFP4: return KN_ACT_Q8A;
    case ANVIL_TYPE_Q2_K:
    case ANVIL_TYPE_Q3_K:
    case ANVIL_TYPE_Q4_K:
    case ANVIL_TYPE_Q5_K:
    case ANVIL_TYPE_Q6_K:
    case ANVIL_TYPE_IQ4_XS: return KN_ACT_Q8K;
    default: return -1;
    }
}

static size_t act_bytes(int act, int n) {
    switch (act) {
    case KN_ACT_F32: return (size_t)n * 4;
    case KN_ACT_BF16: return (size_t)n * 2;
    case KN_ACT_Q8A: return (size_t)n + (size_t)(n / QK) * 8;
    case KN_ACT_Q8K: return (size_t)n + (size_t)(n / QK_K) * 4 + (size_t)(n / 16) * 2;
    default: return 0;
    }
}

size_t kn_act_row_size(int act, int n) {
    if (act == KN_ACT_Q8A_Q8K) return kn_act_row_size(KN_ACT_Q8A, n) + kn_act_row_size(KN_ACT_Q8K, n);
    size_t b = act_bytes(act, n);
    return (b + 63) & ~(size_t)63;
}

int kn_act_block_len(int act) { return act == KN_ACT_Q8K || act == KN_ACT_Q8A_Q8K ? QK_K : QK; }

int kn_act_merge(int a, int b) {
    if (a == b) return a;
    if ((a == KN_ACT_Q8A || a == KN_ACT_Q8A_Q8K) && (b == KN_ACT_Q8K || b == KN_ACT_Q8A_Q8K))
        return KN_ACT_Q8A_Q8K;
    if ((b == KN_ACT_Q8A || b == KN_ACT_Q8A_Q8K) && (a == KN_ACT_Q8K || a == KN_ACT_Q8A_Q8K))
        return KN_ACT_Q8A_Q8K;
    return -1;
}

size_t kn_act_part_offset(int act, int part, int n) {
    return act == KN_ACT_Q8A_Q8K && part == KN_ACT_Q8K ? kn_act_row_size(KN_ACT_Q8A, n) : 0;
}
