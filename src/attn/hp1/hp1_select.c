/*
 * hp1_select.c - pick the HP1 kernel table (attn_hp1.h) for a kernel
 * family: the one beside the softmax table kn_attn_select picks.
 */
#include <string.h>

#include "attn/attn.h"
#include "attn/hp1/attn_hp1.h"

const struct kn_hp1_ops *kn_hp1_select(const char *name) {
    const struct kn_attn_ops *a = kn_attn_select(name);
    if (!a) return NULL;
    if (!strcmp(a->name, "ref")) return &kn_hp1_ops_ref;
    if (!strcmp(a->name, "avx2")) return &kn_hp1_ops_avx2;
    if (!strcmp(a->name, "avx512")) return &kn_hp1_ops_avx512;
    return NULL;
}
