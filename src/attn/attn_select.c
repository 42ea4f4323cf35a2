/*
 * attn_select.c - pick the attention kernel table (attn/attn.h) for a
 * kernel family. Follows kn_select: the family's CPU checks live there.
 */
#include <string.h>

#include "attn/attn.h"
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
