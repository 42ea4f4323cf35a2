/*
 * qtypes.c - the types the quantizer writes: block geometry, names, bits
 * per weight, and the row-quantizer dispatch.
 *
 * The geometry is GGUF's (ggml's type traits). It is kept here rather than
 * taken from gguf_type_block because the writer must know every type it
 * can produce even where the reader (gguf/) does not run that type yet;
 * tests/unit_quantize.c checks that both agree wherever both know a type.
 */
#include <string.h>

#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

static const struct qt_type types[] = {
    {ANVIL_TYPE_F32, "F32", 1, 4, false},
    {ANVIL_TYPE_F16, "F16", 1, 2, false},
    {ANVIL_TYPE_BF16, "BF16", 1, 2, false},
    {ANVIL_TYPE_Q8_0, "Q8_0", QK, sizeof(struct blk_q8_0), true},
    {ANVIL_TYPE_Q4_0, "Q4_0", QK, sizeof(struct blk_q4_0), true},
    {ANVIL_TYPE_Q4_1, "Q4_1", QK, sizeof(struct blk_q4_1), true},
    {ANVIL_TYPE_Q5_0, "Q5_0", QK, sizeof(struct blk_q5_0), true},
    {ANVIL_TYPE_Q5_1, "Q5_1", QK, sizeof(struct blk_q5_1), true},
    {ANVIL_TYPE_IQ4_NL, "IQ4_NL", QK, sizeof(struct blk_iq4_nl), true},
    {ANVIL_TYPE_Q2_K, "Q2_K", QK_K, sizeof(struct blk_q2_k), true},
    {ANVIL_TYPE_Q3_K, "Q3_K", QK_K, sizeof(struct blk_q3_k), true},
    {ANVIL_TYPE_Q4_K, "Q4_K", QK_K, sizeof(struct blk_q4_k), true},
    {ANVIL_TYPE_Q5_K, "Q5_K", QK_K, sizeof(struct blk_q5_k), true},
    {ANVIL_TYPE_Q6_K, "Q6_K", QK_K, sizeof(struct blk_q6_k), true},
    {ANVIL_TYPE_IQ4_XS, "IQ4_XS", QK_K, sizeof(struct blk_iq4_xs), true},
};

const struct qt_type *qt_type_get(int type) {
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (types[i].type == type) return &types[i];
    return NULL;
}

size_t qt_row_size(int type, uint64_t n) {
    const struct qt_type *t = qt_type_get(type);
    return t ? (size_t)(n / t->blck) * t->bytes : 0;
}

double qt_bpw(int type) {
    const struct qt_type *t = qt_type_get(type);
    return t ? 8.0 * t->bytes / t->blck : 0.0;
}

const char *qt_type_name(int type) {
    const struct qt_type *t = qt_type_get(type);
    if (t) return t->name;
    const char *n = anvil_type_name(type);
    return n ? n : "?";
}

bool qt_quantize_row(int type, const float *x, void *dst, int64_t n) {
    switch (type) {
    case ANVIL_TYPE_F32:
    case ANVIL_TYPE_F16:
    case ANVIL_TYPE_BF16:
    case ANVIL_TYPE_Q8_0:
    case ANVIL_TYPE_Q4_0:
    case ANVIL_TYPE_Q4_1: kn_quantize_row(type, x, dst, n); return true;
    case ANVIL_TYPE_Q5_0: qt_quantize_q5_0(x, dst, n); return true;
    case ANVIL_TYPE_Q5_1: qt_quantize_q5_1(x, dst, n); return true;
    case ANVIL_TYPE_IQ4_NL: qt_quantize_iq4_nl(x, dst, n); return true;
    case ANVIL_TYPE_Q2_K: qt_quantize_q2_k(x, dst, n); return true;
    case ANVIL_TYPE_Q3_K: qt_quantize_q3_k(x, dst, n); return true;
    case ANVIL_TYPE_Q4_K: qt_quantize_q4_k(x, dst, n); return true;
    case ANVIL_TYPE_Q5_K: qt_quantize_q5_k(x, dst, n); return true;
    case ANVIL_TYPE_Q6_K: qt_quantize_q6_k(x, dst, n); return true;
    case ANVIL_TYPE_IQ4_XS: qt_quantize_iq4_xs(x, dst, n); return true;
    default: return false;
    }
}
