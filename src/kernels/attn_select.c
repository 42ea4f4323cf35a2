/*
 * attn_select.c - pick the attention kernel table (kernels/attn.h) for a
 * kernel family, and the HP1 table (kernels/attn_hp1.h). Follows
 * kn_select: the family's CPU checks live there.
 */
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_hp1.h"
#include "kernels/ops.h"

const struct kn_attn_ops *kn_attn_select(const char *name) {
    if (!name || !strcmp(name, "auto")) {
        const struct kn_ops *ops = kn_select(NULL);
        if (!ops) return NULL;
        name = ops->name;
    } else if (!kn_select(name)) {
        return NULL; /* unknown family or the CPU cannot run it */
    }
    if (!strcmp(name, "ref")) return &kn_attn_ops_ref;
    if (!strcmp(name, "avx2")) return &kn_attn_ops_avx2;
    if (!strcmp(name, "avx512")) return &kn_attn_ops_avx512;
    return NULL;
}

const struct kn_hp1_ops *kn_hp1_select(const char *name) {
    const struct kn_attn_ops *a = kn_attn_select(name);
    if (!a) return NULL;
    if (!strcmp(a->name, "ref")) return &kn_hp1_ops_ref;
    if (!strcmp(a->name, "avx2")) return &kn_hp1_ops_avx2;
    if (!strcmp(a->name, "avx512")) return &kn_hp1_ops_avx512;
    return NULL;
}
