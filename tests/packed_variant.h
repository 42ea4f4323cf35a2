/*
 * packed_variant.h - the "avx512-packed" kernel variant of the kernel unit
 * tests (unit_kernels.c, unit_kquant.c): the avx512 table whose matmuls of
 * the chosen types pack rows [0, r1) of the GGUF weights into the kernels'
 * layout on every call (ops.h: pack_size, pack_rows) and run
 * matmul_packed, so every matmul test of those types also covers packing
 * and the packed kernels. A type the table does not pack runs the table's
 * own kernel. Include after cmocka.h and kernels/ops.h.
 */
#ifndef ANVIL_TESTS_PACKED_VARIANT_H
#define ANVIL_TESTS_PACKED_VARIANT_H

#include <stdlib.h>
#include <string.h>

static const struct kn_ops *packed_base;
static struct kn_ops packed_ops;

static void packed_matmul(int type, float *restrict y, size_t ldy, const void *restrict w,
                          size_t w_stride, const void *restrict x, size_t x_stride, int n,
                          int n_tokens, int r0, int r1) {
    size_t sz = packed_base->pack_size(type, r1, n);
    if (sz == 0) { /* not packable: the table's own kernel */
        packed_base->matmul[type](y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1);
        return;
    }
    void *pw = aligned_alloc(64, (sz + 63) & ~(size_t)63);
    assert_non_null(pw);
    memset(pw, 0, sz);
    packed_base->pack_rows(type, pw, n, 0, r1, w, w_stride);
    packed_base->matmul_packed[type](y, ldy, pw, 0, x, x_stride, n, n_tokens, r0, r1);
    free(pw);
}

#define PACKED_MM(T) \
    static void packed_mm_##T(float *restrict y, size_t ldy, const void *restrict w, \
                              size_t w_stride, const void *restrict x, size_t x_stride, int n, \
                              int n_tokens, int r0, int r1) { \
        packed_matmul(ANVIL_TYPE_##T, y, ldy, w, w_stride, x, x_stride, n, n_tokens, r0, r1); \
    }
PACKED_MM(Q4_0)
PACKED_MM(Q4_1)
PACKED_MM(Q8_0)
PACKED_MM(Q5_0)
PACKED_MM(Q5_1)
PACKED_MM(IQ4_NL)
PACKED_MM(MXFP4)
PACKED_MM(Q4_K)
PACKED_MM(Q5_K)
PACKED_MM(Q6_K)
PACKED_MM(IQ4_XS)
PACKED_MM(Q2_K)
PACKED_MM(Q3_K)
#undef PACKED_MM

static const kn_matmul_fn packed_mm[KN_TYPE_MAX] = {
    [ANVIL_TYPE_Q4_0] = packed_mm_Q4_0, [ANVIL_TYPE_Q4_1] = packed_mm_Q4_1,
    [ANVIL_TYPE_Q8_0] = packed_mm_Q8_0, [ANVIL_TYPE_Q5_0] = packed_mm_Q5_0,
    [ANVIL_TYPE_Q5_1] = packed_mm_Q5_1, [ANVIL_TYPE_Q4_K] = packed_mm_Q4_K,
    [ANVIL_TYPE_IQ4_NL] = packed_mm_IQ4_NL, [ANVIL_TYPE_IQ4_XS] = packed_mm_IQ4_XS,
    [ANVIL_TYPE_MXFP4] = packed_mm_MXFP4,
    [ANVIL_TYPE_Q5_K] = packed_mm_Q5_K, [ANVIL_TYPE_Q6_K] = packed_mm_Q6_K,
    [ANVIL_TYPE_Q2_K] = packed_mm_Q2_K, [ANVIL_TYPE_Q3_K] = packed_mm_Q3_K,
};

/* The variant of table base for the n types listed, or NULL when base
 * packs nothing. */
static const struct kn_ops *packed_table(const struct kn_ops *base, const int *types, int n) {
    packed_base = base;
    packed_ops = *base;
    packed_ops.name = "avx512-packed";
    if (!base->pack_size) return NULL;
    for (int i = 0; i < n; i++) packed_ops.matmul[types[i]] = packed_mm[types[i]];
    return &packed_ops;
}

#endif
