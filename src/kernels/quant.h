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

_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1 block size");

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
