/*
 * attn.c (avx512) - attention kernels (kernels/attn.h); not written yet:
 * every entry points at the reference.
 */
#include "kernels/attn.h"

const struct kn_attn_ops kn_attn_ops_avx512 = {
    .name = "avx512",
    .attn = kn_attn_ref,
    .partial = kn_attn_partial_ref,
    .reduce = kn_attn_reduce_ref,
};
