/*
 * qtypes.c - the types the quantizer writes (the `write` rows of the type
 * table, gguf/gguf_types.h, which holds their geometry and names) and the
 * row-quantizer dispatch.
 */
#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

const struct gguf_type_info *qt_type_get(int type) {
    const struct gguf_type_info *t = gguf_type_info(type);
    return t && t->write ? t : NULL;
}

bool qt_quantize_row(int type, const float *x, void *dst, int64_t n) {
    switch (type) {
    case ANVIL_TYPE_F32:
    case ANVIL_TYPE_F16:
    case ANVIL_TYPE_BF16:
    case ANVIL_TYPE_Q8_0:
    case ANVIL_TYPE_Q4_0:
    case ANVIL_TYPE_Q4_1:
    case ANVIL_TYPE_MXFP4: kn_quantize_row(type, x, dst, n); return true;
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
