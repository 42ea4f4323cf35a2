/*
 * quant.c - the reference definition of every weight and activation format:
 * half/bfloat16 conversions, dequantize and quantize of Q8_0, Q4_0, Q4_1,
 * F16, BF16, F32 rows, and the Q8A/BF16/F32 activation rows.
 *
 * Quantization follows ggml's reference routines (quantize_row_*_ref), so
 * a file written by `anvil quantize` matches what llama.cpp would write;
 * dequantization is bit-exact with the gguf Python package.
 */
#include <math.h>

#include "kernels/ops.h"
#include "kernels/quant.h"

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

float kn_f16_to_f32(kn_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
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
    default: break;
    }
}

/* ---------------------------------------------------------------------- */
/* activation rows */

int kn_act_for_type(int type) {
    switch (type) {
    case ANVIL_TYPE_F32:
    case ANVIL_TYPE_F16: return KN_ACT_F32;
    case ANVIL_TYPE_BF16: return KN_ACT_BF16;
    case ANVIL_TYPE_Q8_0:
    case ANVIL_TYPE_Q4_0:
    case ANVIL_TYPE_Q4_1: return KN_ACT_Q8A;
    default: return -1;
    }
}

size_t kn_act_row_size(int act, int n) {
    size_t b = 0;
    switch (act) {
    case KN_ACT_F32: b = (size_t)n * 4; break;
    case KN_ACT_BF16: b = (size_t)n * 2; break;
    case KN_ACT_Q8A: b = (size_t)n + (size_t)(n / QK) * 8; break;
    default: return 0;
    }
    return (b + 63) & ~(size_t)63;
}
