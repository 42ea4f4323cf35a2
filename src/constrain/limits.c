/*
 * limits.c - the options and limits of a compilation with their defaults
 * (the CN_DEF_* values of cn_int.h), and the one growth rule of the
 * room's arrays.
 *
 * This is the floor of the constraint room: the parsers, the compiler,
 * the determinizer and the run time all read it, and it calls no other
 * file of the room, so none of them has to call up into the front door
 * (constrain.c) for a default.
 */
#include <string.h>

#include "constrain/cn_int.h"

struct cn_options cn_default_options(void) {
    struct cn_options o;
    memset(&o, 0, sizeof o);
    o.ws = CN_WS_FLEX;
    return o;
}

struct cn_limits cn_limits_resolve(const struct cn_limits *l) {
    struct cn_limits r;
    memset(&r, 0, sizeof r);
    if (l) r = *l;
    if (r.max_nfa_states <= 0) r.max_nfa_states = CN_DEF_MAX_NFA;
    if (r.max_dfa_states <= 0) r.max_dfa_states = CN_DEF_MAX_DFA;
    if (r.max_work <= 0) r.max_work = CN_DEF_MAX_WORK;
    if (r.max_depth <= 0) r.max_depth = CN_DEF_MAX_DEPTH;
    if (r.max_stack <= 0) r.max_stack = CN_DEF_MAX_STACK;
    if (r.max_stacks <= 0) r.max_stacks = CN_DEF_MAX_STACKS;
    return r;
}


bool cn_grow_slow(void **p, uint32_t *cap, uint64_t need, size_t sz) {
    if (need <= *cap) return true;
    uint64_t nc = *cap ? (uint64_t)*cap * 2 : 16;
    while (nc < need) nc *= 2;
    if (nc > UINT32_MAX - 1) nc = UINT32_MAX - 1;
    if (nc < need) return false;
    size_t bytes;
    if (!size_mul((size_t)nc, sz, &bytes)) return false;
    void *q = core_realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = (uint32_t)nc;
    return true;
}
