/*
 * quant.h - weight block formats (bit-compatible with GGUF/ggml), the
 * activation formats the quantized dot products consume, and the scalar
 * conversions. Defined once here; every kernel variant reuses them.
 *
 * Weight blocks hold 32 elements:
 *   Q8_0: x = d * q,             q int8
 *   Q4_0: x = d * (q - 8),       q 4-bit, low nibbles are elements 0..15,
 *                                high nibbles 16..31
 *   Q4_1: x = d * q + m,         q 4-bit, same nibble order
 *
 * Activation row formats (one row of n elements, n a multiple of 32):
 *   Q8A  (for Q4_0, Q4_1, Q8_0 weights): qs[n] int8, then d[n/32] float,
 *        then s[n/32] float with s = d * sum(qs of the block). Blocks are
 *        quantized symmetrically: d = max|x| / 127, q = round(x / d).
 *        The row occupies kn_act_row_size() bytes, a multiple of 64, and
 *        qs starts 64-byte aligned when the row does.
 *   BF16 (for BF16 weights): n bf16 values (round to nearest even).
 *   F32  (for F32 and F16 weights): n floats.
 */
#ifndef ANVIL_KN_QUANT_H
#define ANVIL_KN_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK 32 /* elements per block, every quantized type here */

typedef uint16_t kn_f16;
typedef uint16_t kn_bf16;

struct blk_q8_0 {
    kn_f16 d;
    int8_t qs[QK];
};
struct blk_q4_0 {
    kn_f16 d;
    uint8_t qs[QK / 2];
};
struct blk_q4_1 {
    kn_f16 d;
    kn_f16 m;
    uint8_t qs[QK / 2];
};

/* 5-bit: the fifth bit of element j is bit j of qh (little endian u32) */
struct blk_q5_0 {
    kn_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
struct blk_q5_1 {
    kn_f16 d;
    kn_f16 m;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
/* IQ4_NL: 4-bit indices into a fixed non-linear table of 16 int8 values */
struct blk_iq4_nl {
    kn_f16 d;
    uint8_t qs[QK / 2];
};

_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(struct blk_iq4_nl) == 18, "iq4_nl block size");

/* ---------------------------------------------------------------------- */
/* K-quants: super-blocks of QK_K = 256 elements in sub-blocks of 16 or 32
 * with quantized scales (GGUF's layouts, field order as in the file). */

#define QK_K 256
#define K_SCALE_SIZE 12

struct blk_q2_k { /* 16 sub-blocks of 16: x = d*sc*q - dmin*m, q 2-bit */
    uint8_t scales[QK_K / 16]; /* low nibble scale, high nibble min */
    uint8_t qs[QK_K / 4];
    kn_f16 d, dmin;
};
struct blk_q3_k { /* 16 sub-blocks of 16: x = d*(sc-32)*(q-4*!hbit), q 2+1 bit */
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12]; /* 16 6-bit scales */
    kn_f16 d;
};
struct blk_q4_k { /* 8 sub-blocks of 32: x = d*sc*q - dmin*m, 6-bit sc and m */
    kn_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
struct blk_q5_k { /* as Q4_K with a fifth bit per element in qh */
    kn_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct blk_q6_k { /* 16 sub-blocks of 16: x = d*sc*(q-32), q 4+2 bit, sc int8 */
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    kn_f16 d;
};
struct blk_iq4_xs { /* 8 sub-blocks of 32, 6-bit scales, IQ4_NL table values */
    kn_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
};
struct blk_q8_k { /* activations: x = d*q; bsums = sums of 16 q each */
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

_Static_assert(sizeof(struct blk_q2_k) == 84, "q2_k block size");
_Static_assert(sizeof(struct blk_q3_k) == 110, "q3_k block size");
_Static_assert(sizeof(struct blk_q4_k) == 144, "q4_k block size");
_Static_assert(sizeof(struct blk_q5_k) == 176, "q5_k block size");
_Static_assert(sizeof(struct blk_q6_k) == 210, "q6_k block size");
_Static_assert(sizeof(struct blk_iq4_xs) == 136, "iq4_xs block size");
_Static_assert(sizeof(struct blk_q8_k) == 292, "q8_k block size");

enum kn_act {
    KN_ACT_F32 = 0,
    KN_ACT_BF16,
    KN_ACT_Q8A,
    KN_ACT_COUNT
};

/* Activation format a weight type consumes; -1 for unknown types. */
int kn_act_for_type(int type);
/* Bytes of one activation row of n elements (rounded up to 64). */
size_t kn_act_row_size(int act, int n);

/* ---------------------------------------------------------------------- */
/* scalar conversions (IEEE half, bfloat16) */

float kn_f16_to_f32(kn_f16 h);
kn_f16 kn_f32_to_f16(float f);   /* round to nearest even, like ggml/numpy */
float kn_bf16_to_f32(kn_bf16 h);
kn_bf16 kn_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* ---------------------------------------------------------------------- */
/* reference row conversions (k elements, a multiple of the block) */

void kn_dequantize_row(int type, const void *src, float *dst, int64_t k);
/* Quantize k floats into `type` blocks the way ggml's reference does. */
void kn_quantize_row(int type, const float *src, void *dst, int64_t k);

#endif
