/*
 * blocks.h - weight block formats (bit-compatible with GGUF/ggml), the
 * activation formats the quantized dot products consume, and the scalar
 * conversions. Defined once here; every kernel variant reuses them.
 *
 * Weight blocks of 32 elements (QK), "legacy" types:
 *   Q8_0: x = d * q,             q int8
 *   Q4_0: x = d * (q - 8),       q 4-bit, low nibbles are elements 0..15,
 *                                high nibbles 16..31
 *   Q4_1: x = d * q + m,         q 4-bit, same nibble order
 *   Q5_0: x = d * (q - 16),      q 5-bit: low 4 bits as Q4_0, bit 4 of
 *                                element j is bit j of qh (little endian)
 *   Q5_1: x = d * q + m,         q 5-bit as Q5_0
 *   IQ4_NL: x = d * kv[q],       q 4-bit as Q4_0, kv = kn_iq4nl_values
 *   MXFP4: x = h * kv[q],        q 4-bit as Q4_0, kv = kn_mxfp4_values (the
 *                                E2M1 values doubled), h = 2^(e - 128) =
 *                                half the E8M0 scale byte e's 2^(e - 127)
 *                                (kn_e8m0_half; e 0 and 1 give subnormals)
 *
 * Super-blocks of 256 elements (QK_K), "K-quants" (field order as in the
 * file; every product below is a float32 product, in this order):
 *   Q2_K: 16 sub-blocks of 16. scales[j]: low nibble sc, high nibble m.
 *         x = (d * sc) * q - (dmin * m), q 2-bit: element 128h + 32s + l
 *         (h < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32h + l].
 *   Q3_K: 16 sub-blocks of 16, 6-bit scales sc (kn_q3_k_scales: low 4
 *         bits are nibble j/8 of scales[j%8], high 2 bits are bits 2(j/4)..
 *         of scales[8 + j%4]), used as sc - 32. x = (d * (sc - 32)) *
 *         (q - 4 * !hb): q the 2 bits of element e placed as in Q2_K, hb
 *         bit e/32 of hmask[e%32].
 *   Q4_K: 8 sub-blocks of 32, 6-bit sc and m packed in scales[12]
 *         (kn_k_scale_min). x = (d * sc) * q - (dmin * m), q 4-bit: element
 *         64c + 32s + l (c < 4, s < 2, l < 32) is nibble s of qs[32c + l].
 *   Q5_K: as Q4_K; bit 4 of element e is bit e/32 of qh[e%32].
 *   Q6_K: 16 sub-blocks of 16, sc int8. x = (d * sc) * (q - 32), q 6-bit:
 *         element 128h + 32s + l (s < 4) has low 4 bits from nibble s/2 of
 *         ql[64h + 32(s%2) + l] and high 2 bits from bits 2s.. of
 *         qh[32h + l].
 *   IQ4_XS: 8 sub-blocks of 32, 6-bit signed scales ls - 32 (low 4 bits:
 *         nibble j%2 of scales_l[j/2]; high 2: bits 2j.. of scales_h).
 *         x = (d * (ls - 32)) * kv[q], q 4-bit: element l < 16 of
 *         sub-block j is the low nibble of qs[16j + l], element 16 + l
 *         the high one.
 *   Q8_K: d float, qs int8, bsums = sums of 16 qs: x = d * q. ggml's
 *         activation type; anvil reads it from files but never runs it.
 *
 * Activation row formats (one row of n elements):
 *   Q8A  (for the 32-element types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL,
 *        MXFP4),
 *        n a multiple of 32: qs[n] int8, then d[n/32] float, then s[n/32]
 *        float with s = d * sum(qs of the block). Blocks are quantized
 *        symmetrically: d = max|x| / 127, q = round(x / d) in [-127, 127]
 *        (NaN lanes 0).
 *   Q8K  (for the super-block types Q2_K..Q6_K, IQ4_XS), n a multiple of
 *        256: qs[n] int8, then d[n/256] float, then bsums[n/16] int16 =
 *        sums of 16 consecutive qs. Quantized like Q8A but with one scale
 *        per 256 elements, so that a super-block's whole dot product is an
 *        exact integer sum of sub-block dots times their integer scales
 *        (d * sum_j sc_j * sum(q * qa)), and the weights' offsets and
 *        mins need only the per-16 sums (sum_j m_j * bsums_j): one float
 *        step per 256 products, nothing per element. (ggml's Q8_K is the
 *        same idea with d = 1 / (-127 / max): its d can differ from ours in
 *        the last bit; the layout here is anvil's own.)
 *   Q8A_Q8K (for a matrix whose parts mix both families, e.g. Q4_K rows
 *        stacked with Q5_0 rows): the Q8A row then the Q8K row of the same
 *        n elements, the Q8K part at kn_act_part_offset().
 *   BF16 (for BF16 weights): n bf16 values (round to nearest even).
 *   F32  (for F32 and F16 weights): n floats.
 * Every row occupies kn_act_row_size() bytes, a multiple of 64, and its qs
 * start 64-byte aligned when the row does.
 */
#ifndef ANVIL_KN_BLOCKS_H
#define ANVIL_KN_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK 32 /* elements per block of the 32-element types */

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
/* IQ4_NL: 4-bit indices into kn_iq4nl_values */
struct blk_iq4_nl {
    kn_f16 d;
    uint8_t qs[QK / 2];
};

/* MXFP4 (ggml type 39): one E8M0 scale byte, then 4-bit indices into
 * kn_mxfp4_values; 17 bytes, so blocks in a row are unaligned */
struct blk_mxfp4 {
    uint8_t e;
    uint8_t qs[QK / 2];
};

_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(struct blk_iq4_nl) == 18, "iq4_nl block size");
_Static_assert(sizeof(struct blk_mxfp4) == 17, "mxfp4 block size");

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

/* The 16 values of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t kn_iq4nl_values[16];
/* The 16 MXFP4 (E2M1) values times 2 (ggml's kvalues_mxfp4): codes 0..7
 * are 0, 0.5, 1, 1.5, 2, 3, 4, 6 doubled, 8..15 the same negated. */
extern const int8_t kn_mxfp4_values[16];

/* Half the value 2^(e - 127) of an E8M0 scale byte: 2^(e - 128), built
 * from its bits (a subnormal for e < 2; every e is finite, ggml has no
 * NaN code 255 here), as ggml_e8m0_to_fp32_half does. */
static inline float kn_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Scale and min j (< 8) of a Q4_K/Q5_K super-block from its 12 packed
 * bytes: bytes 0..3 hold sc 0..3 (low 6 bits) and the high 2 bits of sc
 * 4..7, bytes 4..7 the same for m, bytes 8..11 the low 4 bits of sc 4..7
 * (low nibble) and m 4..7 (high nibble). */
static inline void kn_k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The 16 6-bit Q3_K scales, minus 32 (sc[j] in -32..31). */
static inline void kn_q3_k_scales(const uint8_t *s, int sc[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = (s[j % 8] >> (4 * (j / 8))) & 0x0f;
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (lo | hi << 4) - 32;
    }
}

/* The 8 6-bit IQ4_XS scales, minus 32 (ls[j] in -32..31). */
static inline void kn_iq4_xs_scales(const struct blk_iq4_xs *x, int ls[8]) {
    for (int j = 0; j < 8; j++) {
        int lo = (x->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
        int hi = (x->scales_h >> (2 * j)) & 3;
        ls[j] = (lo | hi << 4) - 32;
    }
}

enum kn_act {
    KN_ACT_F32 = 0,
    KN_ACT_BF16,
    KN_ACT_Q8A,
    KN_ACT_Q8K,
    KN_ACT_Q8A_Q8K,
    KN_ACT_COUNT
};

/* Activation format a weight type consumes; -1 for types no matmul runs. */
int kn_act_for_type(int type);
/* Bytes of one activation row of n elements (rounded up to 64). */
size_t kn_act_row_size(int act, int n);
/* Elements one conversion step of `act` covers: the fused norm/SiLU ops
 * convert a row in pieces of this many elements (32, 256 for Q8K). */
int kn_act_block_len(int act);
/* The activation format matmuls of a matrix need when its parts consume
 * formats a and b (-1 when one format cannot serve both). */
int kn_act_merge(int a, int b);
/* Byte offset, inside a row of format `act` with n elements, of the
 * part in format `part` (which act contains): 0, or the Q8K half of
 * Q8A_Q8K. */
size_t kn_act_part_offset(int act, int part, int n);
/* The first block of a tensor (rows of n elements in `type`, nrows rows,
 * row_bytes apart) whose scale (d, dmin or m) is NaN or infinite, or -1.
 * F32/F16/BF16 have no scales: -1. */
int64_t kn_find_bad_scale(int type, const void *data, int64_t nrows, int64_t n,
                          size_t row_bytes);

/* ---------------------------------------------------------------------- */
/* scalar conversions (IEEE half, bfloat16) */

/* inline: the reference kernels convert a scale per 32 weights, and an
 * out-of-line call for each costs them about a quarter of their time
 * (commit f3946e3) */
static inline float kn_f16_to_f32(kn_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    float f;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    u = exp == 31 ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
    memcpy(&f, &u, sizeof(f));
    return f;
}
kn_f16 kn_f32_to_f16(float f);   /* round to nearest even, like ggml/numpy */
float kn_bf16_to_f32(kn_bf16 h);
kn_bf16 kn_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* ---------------------------------------------------------------------- */
/* reference row conversions (k elements, a multiple of the block) */

/* Every type gguf_type_block() knows, Q8_K included (k a multiple of its
 * block); bit-exact with gguf.quants.dequantize. */
void kn_dequantize_row(int type, const void *src, float *dst, int64_t k);
/* Quantize k floats into `type` blocks the way ggml's reference does
 * (F32, F16, BF16, Q8_0, Q4_0, Q4_1; other types are src/quantize's, and
 * passing one here aborts: it would leave dst unwritten). */
void kn_quantize_row(int type, const float *src, void *dst, int64_t k);

#endif
