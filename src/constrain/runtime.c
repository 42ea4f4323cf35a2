/*
 * runtime.c - the per-request state: where the output so far leaves the
 * automaton, how one more byte moves it, and the state API of constrain.h
 * (cn_fill_mask is in vocab.c, next to the trie it walks).
 *
 * A pure program (no call edges) is one DFA: the state is one DFA state,
 * a byte is one table lookup. Otherwise the state is a set of parse
 * configurations (top DFA state, stack of return states): a byte moves
 * every configuration whose top has a transition on it, then the closure
 * runs - a final top pops its frame (or, on the empty stack, marks the
 * output complete), a call pushes the return state and starts the callee.
 * Only configurations whose top can consume a byte are kept in the set.
 *
 * Stacks are linked frames (return state, parent) in one array; frame 0 is
 * the empty stack. Between tokens the frames are hash-consed (equal stacks
 * are the same frame, so equal configurations are equal pairs and the set
 * has no duplicates) and compacted into a fresh array, so the state stays
 * as small as its live stacks however long the output grows. While
 * stepping, new frames go above the persistent ones as scratch, found
 * again by a short linear search among the frames made in the same step
 * (so a nullable callee in a loop cannot push the same frame forever), and
 * dropped when the walk backs out.
 *
 * Termination and bounds: the compiler rejects left recursion, so a
 * closure can only push a bounded number of frames before a byte is
 * consumed; the visited table ends the pop/call cycles of nullable rules.
 * A set over max_stacks configurations, a stack deeper than max_stack, or
 * a closure visiting more than VISIT_MAX pairs makes that byte "not
 * allowed": we may refuse a valid continuation of a pathological grammar,
 * never accept an invalid one.
 */
#include <string.h>

#include "constrain/cn_int.h"

/* ---------------------------------------------------------------------- */
/* scratch */

/* grow for the stepping code: a failure is remembered in sc.oom so that
 * the API can tell "out of memory" from "not allowed" */
static bool sgrow(struct cn_state *s, void **p, uint32_t *cap, uint64_t need, size_t sz) {
    if (cn_grow(p, cap, need, sz)) return true;
    s->sc.oom = true;
    return false;
}

/* a bound refused the step (not memory): -1, remembered in sc.bound */
static int32_t bound(struct cn_state *s) {
    s->sc.bound = true;
    return -1;
}

static uint32_t visit_max(const struct cn_program *p) { return 16u * (uint32_t)p->max_stacks + 64u; }

static bool vis_ready(struct cn_state *s) {
    struct cn_scratch *sc = &s->sc;
    if (sc->vis) return true;
    uint32_t cap = 64;
    while (cap < 2 * visit_max(s->p)) cap *= 2;
    sc->vis = core_malloc((size_t)cap * sizeof *sc->vis);
    sc->vis_gen = core_calloc(cap, sizeof *sc->vis_gen);
    if (!sc->vis || !sc->vis_gen) {
        core_free(sc->vis);
        core_free(sc->vis_gen);
        sc->vis = NULL;
        sc->vis_gen = NULL;
        sc->oom = true;
        return false;
    }
    sc->cap_vis = cap;
    sc->gen = 0;
    return true;
}

/* true when (top, stk) was not yet visited in this generation */
static bool vis_insert(struct cn_scratch *sc, int32_t top, uint32_t stk) {
    uint64_t key = ((uint64_t)(uint32_t)top << 32) | stk;
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    uint32_t m = sc->cap_vis - 1, j = (uint32_t)(h >> 40) & m;
    while (sc->vis_gen[j] == sc->gen) {
        if (sc->vis[j] == key) return false;
        j = (j + 1) & m;
    }
    sc->vis_gen[j] = sc->gen;
    sc->vis[j] = key;
    return true;
}

static void vis_new_gen(struct cn_scratch *sc) {
    if (++sc->gen == 0) {
        memset(sc->vis_gen, 0, (size_t)sc->cap_vis * sizeof *sc->vis_gen);
        sc->gen = 1;
    }
}

/* ---------------------------------------------------------------------- */
/* stepping */

/* A frame (ret, parent), reusing one made since `mark`; CN_NIL on OOM or
 * when too many frames were made in one step. */
static uint32_t push_frame(struct cn_state *s, uint32_t *top, uint32_t mark, int32_t ret,
                           uint32_t parent) {
    for (uint32_t i = mark; i < *top; i++)
        if (s->fr[i].ret == ret && s->fr[i].parent == parent) return i;
    if (*top - mark > visit_max(s->p)) {
        s->sc.bound = true;
        return CN_NIL;
    }
    if (!sgrow(s, (void **)&s->fr, &s->cap_fr, (uint64_t)*top + 1, sizeof *s->fr)) return CN_NIL;
    s->fr[*top] = (struct cn_frame){ret, parent, s->fr[parent].depth + 1};
    return (*top)++;
}

/* The closure of the work list sc->work[0..nw) (no byte consumed): every
 * configuration reached through rule ends and calls, those with a byte
 * transition written to scratch cfg[out_off ..), *acc set when one may end
 * the output. Frames made go above *ftop (updated: those above the
 * caller's value are this step's, and shared where equal). The visited
 * table is of a fresh generation. Forced inline into both callers: the
 * step is the inner loop of a pushdown program's mask walk. */
static inline __attribute__((always_inline)) int32_t
close_work(struct cn_state *s, uint32_t nw, uint32_t out_off, bool *acc, uint32_t *ftop) {
    const struct cn_program *p = s->p;
    struct cn_scratch *sc = &s->sc;
    uint32_t n_out = 0, visits = 0, mark = *ftop;
    uint32_t max_out = (uint32_t)p->max_stacks;
    while (nw > 0) {
        struct cn_cfg c = sc->work[--nw];
        if (!vis_insert(sc, c.top, c.stk)) continue;
        if (++visits > visit_max(p)) return bound(s);
        uint8_t f = p->flags[c.top];
        if (f & CN_SF_BYTES) {
            if (n_out >= max_out) return bound(s);
            if (!sgrow(s, (void **)&sc->cfg, &sc->cap_cfg, (uint64_t)out_off + n_out + 1,
                      sizeof *sc->cfg))
                return -1;
            sc->cfg[out_off + n_out++] = c;
        }
        if (f & CN_SF_FINAL) {
            if (c.stk == 0) {
                *acc = true;
            } else {
                const struct cn_frame *fr = &s->fr[c.stk];
                if (!sgrow(s, (void **)&sc->work, &sc->cap_work, (uint64_t)nw + 1, sizeof *sc->work))
                    return -1;
                sc->work[nw++] = (struct cn_cfg){fr->ret, fr->parent};
            }
        }
        if (f & CN_SF_CALLS) {
            if (s->fr[c.stk].depth + 1 > (uint32_t)p->max_stack) {
                s->sc.bound = true; /* nesting refused: not an error, but not exact either */
                continue;
            }
            for (uint32_t k = p->call_off[c.top]; k < p->call_off[c.top + 1]; k++) {
                uint32_t nf = push_frame(s, ftop, mark, p->calls[k].ret, c.stk);
                if (nf == CN_NIL) return -1;
                if (!sgrow(s, (void **)&sc->work, &sc->cap_work, (uint64_t)nw + 1, sizeof *sc->work))
                    return -1;
                sc->work[nw++] = (struct cn_cfg){p->calls[k].start, nf};
            }
        }
    }
    return (int32_t)n_out;
}

/* The general step. Frames made go above *ftop (updated). */
static int32_t step_gen(struct cn_state *s, bool in_scratch, uint32_t in_off, uint32_t n_in,
                        uint8_t byte, uint32_t out_off, bool *acc, uint32_t *ftop) {
    const struct cn_program *p = s->p;
    struct cn_scratch *sc = &s->sc;
    uint32_t nc = (uint32_t)p->n_classes, cls = p->class_of[byte];
    *acc = false;
    /* fast path: one configuration moving to a plain state */
    if (n_in == 1) {
        struct cn_cfg c = in_scratch ? sc->cfg[in_off] : s->cfg[0];
        int32_t t = p->trans[(size_t)c.top * nc + cls];
        if (t < 0) return 0;
        if (p->flags[t] == CN_SF_BYTES) {
            if (!sgrow(s, (void **)&sc->cfg, &sc->cap_cfg, (uint64_t)out_off + 1, sizeof *sc->cfg))
                return -1;
            sc->cfg[out_off] = (struct cn_cfg){t, c.stk};
            return 1;
        }
    }
    if (!vis_ready(s)) return -1;
    vis_new_gen(sc);
    uint32_t nw = 0;
    for (uint32_t i = 0; i < n_in; i++) {
        struct cn_cfg c = in_scratch ? sc->cfg[in_off + i] : s->cfg[i];
        int32_t t = p->trans[(size_t)c.top * nc + cls];
        if (t < 0) continue;
        if (!sgrow(s, (void **)&sc->work, &sc->cap_work, (uint64_t)nw + 1, sizeof *sc->work)) return -1;
        sc->work[nw++] = (struct cn_cfg){t, c.stk};
    }
    return close_work(s, nw, out_off, acc, ftop);
}

int32_t rt_step(struct cn_state *s, bool in_scratch, uint32_t in_off, uint32_t n_in, uint8_t b,
                uint32_t out_off, bool *acc, uint32_t *ftop) {
    return step_gen(s, in_scratch, in_off, n_in, b, out_off, acc, ftop);
}

/* The closure of one configuration (no byte consumed): the set at the
 * start of the output. Same rules as a step. */
static int32_t closure_one(struct cn_state *s, int32_t top, uint32_t out_off, bool *acc,
                           uint32_t *ftop) {
    struct cn_scratch *sc = &s->sc;
    if (!vis_ready(s)) return -1;
    vis_new_gen(sc);
    *acc = false;
    if (!sgrow(s, (void **)&sc->work, &sc->cap_work, 1, sizeof *sc->work)) return -1;
    sc->work[0] = (struct cn_cfg){top, 0};
    return close_work(s, 1, out_off, acc, ftop);
}

/* ---------------------------------------------------------------------- */
/* committing a scratch set as the new persistent state */

/* Hash-cons the frames of cfg[0..n) (scratch, at offset off) into the
 * spare frame array and swap it in. All buffers are the state's and only
 * grow, so a warm state commits without allocating. All or nothing. */
static bool commit(struct cn_state *s, uint32_t off, uint32_t n, bool acc, uint32_t ftop) {
    struct cn_scratch *sc = &s->sc;
    uint32_t cap = 16;
    while (cap < 2 * ftop + 2) cap *= 2;
    if (!cn_grow((void **)&s->fr2, &s->cap_fr2, (uint64_t)ftop + 1, sizeof *s->fr2) ||
        !cn_grow((void **)&sc->map, &sc->cap_map, (uint64_t)ftop + 1, sizeof *sc->map) ||
        !cn_grow((void **)&sc->chain, &sc->cap_chain, (uint64_t)ftop + 1, sizeof *sc->chain) ||
        !cn_grow((void **)&sc->hash, &sc->cap_hash, cap, sizeof *sc->hash) ||
        !cn_grow((void **)&s->cfg2, &s->cap_cfg2, n ? n : 1, sizeof *s->cfg2)) {
        sc->oom = true;
        return false;
    }
    struct cn_frame *nf = s->fr2;
    uint32_t *map = sc->map, *h = sc->hash, *chain = sc->chain;
    struct cn_cfg *ncfg = s->cfg2;
    for (uint32_t i = 0; i <= ftop; i++) map[i] = CN_NIL;
    for (uint32_t i = 0; i < cap; i++) h[i] = CN_NIL;
    nf[0] = (struct cn_frame){-1, 0, 0};
    map[0] = 0;
    uint32_t nn = 1, ncf = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct cn_cfg c = sc->cfg[off + i];
        /* frames of this stack not yet mapped, top first */
        uint32_t len = 0;
        for (uint32_t k = c.stk; map[k] == CN_NIL; k = s->fr[k].parent) chain[len++] = k;
        while (len > 0) {
            uint32_t k = chain[--len];
            int32_t ret = s->fr[k].ret;
            uint32_t par = map[s->fr[k].parent];
            uint64_t key = ((uint64_t)(uint32_t)ret << 32) | par;
            uint32_t j = (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) & (cap - 1);
            while (h[j] != CN_NIL && !(nf[h[j]].ret == ret && nf[h[j]].parent == par))
                j = (j + 1) & (cap - 1);
            if (h[j] == CN_NIL) {
                nf[nn] = (struct cn_frame){ret, par, nf[par].depth + 1};
                h[j] = nn++;
            }
            map[k] = h[j];
        }
        struct cn_cfg m = {c.top, map[c.stk]};
        bool dup = false;
        for (uint32_t j = 0; j < ncf && !dup; j++) dup = ncfg[j].top == m.top && ncfg[j].stk == m.stk;
        if (!dup) ncfg[ncf++] = m;
    }
    /* swap in */
    struct cn_frame *tf = s->fr;
    uint32_t tcap = s->cap_fr;
    s->fr = s->fr2;
    s->cap_fr = s->cap_fr2;
    s->fr2 = tf;
    s->cap_fr2 = tcap;
    s->n_fr = nn;
    struct cn_cfg *tc = s->cfg;
    tcap = s->cap_cfg;
    s->cfg = s->cfg2;
    s->cap_cfg = s->cap_cfg2;
    s->cfg2 = tc;
    s->cap_cfg2 = tcap;
    s->n_cfg = ncf;
    s->acc = acc;
    return true;
}

/* ---------------------------------------------------------------------- */
/* state API */

void cn_state_reset(struct cn_state *s) {
    s->done = false;
    s->n_fr = 1;
    s->fr[0] = (struct cn_frame){-1, 0, 0};
    const struct cn_program *p = s->p;
    if (p->pure) {
        s->n_cfg = (p->flags[p->start] & CN_SF_BYTES) ? 1 : 0;
        s->cfg[0] = (struct cn_cfg){p->start, 0};
        s->acc = (p->flags[p->start] & CN_SF_FINAL) != 0;
        return;
    }
    /* the start closure cannot fail for lack of anything but memory or a
     * bound; a failure leaves an empty, non-accepting (dead) state */
    uint32_t ftop = s->n_fr;
    bool acc = false;
    s->sc.oom = false;
    s->sc.bound = false;
    int32_t n = closure_one(s, p->start, 0, &acc, &ftop);
    if (n < 0 || !commit(s, 0, (uint32_t)n, acc, ftop)) {
        s->n_cfg = 0;
        s->acc = false;
        s->n_fr = 1;
    }
}

anvil_status cn_state_init(const struct cn_program *p, const struct cn_vocab *v,
                           struct cn_state **out) {
    if (!p || !out) return ANVIL_ERR_INVALID;
    struct cn_state *s = core_calloc(1, sizeof *s);
    if (!s) return ANVIL_ERR_NOMEM;
    s->p = p;
    s->v = v;
    s->cfg = core_malloc(4 * sizeof *s->cfg);
    s->fr = core_malloc(16 * sizeof *s->fr);
    if (!s->cfg || !s->fr) {
        cn_state_free(s);
        return ANVIL_ERR_NOMEM;
    }
    s->cap_cfg = 4;
    s->cap_fr = 16;
    cn_state_reset(s);
    if (!p->pure && s->n_cfg == 0 && !s->acc) {
        /* the start closure ran out of memory, or a bound refused it */
        anvil_status st = s->sc.oom ? ANVIL_ERR_NOMEM : ANVIL_ERR_UNSUPPORTED;
        cn_state_free(s);
        return st;
    }
    *out = s;
    return ANVIL_OK;
}

void cn_state_free(struct cn_state *s) {
    if (!s) return;
    core_free(s->cfg);
    core_free(s->fr);
    core_free(s->sc.cfg);
    core_free(s->sc.work);
    core_free(s->sc.vis);
    core_free(s->sc.vis_gen);
    core_free(s->sc.dstate);
    core_free(s->sc.lev);
    core_free(s->sc.map);
    core_free(s->sc.hash);
    core_free(s->sc.chain);
    core_free(s->fr2);
    core_free(s->cfg2);
    for (int e = 0; e < 4; e++) {
        core_free(s->sc.mc[e].key);
        core_free(s->sc.mc[e].mask);
    }
    core_free(s->sc.key);
    core_free(s);
}

anvil_status cn_state_copy(struct cn_state *dst, const struct cn_state *src) {
    if (!dst || !src || dst->p != src->p || dst->v != src->v) return ANVIL_ERR_INVALID;
    if (dst == src) return ANVIL_OK;
    if (!cn_grow((void **)&dst->cfg, &dst->cap_cfg, src->n_cfg ? src->n_cfg : 1, sizeof *dst->cfg) ||
        !cn_grow((void **)&dst->fr, &dst->cap_fr, src->n_fr, sizeof *dst->fr))
        return ANVIL_ERR_NOMEM;
    memcpy(dst->cfg, src->cfg, (size_t)src->n_cfg * sizeof *dst->cfg);
    memcpy(dst->fr, src->fr, (size_t)src->n_fr * sizeof *dst->fr);
    dst->n_cfg = src->n_cfg;
    dst->n_fr = src->n_fr;
    dst->acc = src->acc;
    dst->done = src->done;
    cn_state_set_specials(dst, src->n_sp, src->sp_id, src->sp_bytes, src->sp_len);
    return ANVIL_OK;
}

bool cn_accepts(const struct cn_state *s) { return s->acc; }
bool cn_can_continue(const struct cn_state *s) { return !s->done && s->n_cfg > 0; }

int64_t cn_min_remaining(const struct cn_state *s) {
    if (s->acc) return 0;
    const struct cn_program *p = s->p;
    int64_t best = -1;
    for (uint32_t i = 0; i < s->n_cfg; i++) {
        int64_t d = p->dist[s->cfg[i].top];
        for (uint32_t k = s->cfg[i].stk; k != 0 && d < INT64_MAX / 2; k = s->fr[k].parent)
            d += p->dist[s->fr[k].ret];
        if (best < 0 || d < best) best = d;
    }
    return best;
}

/* Walk bytes from the persistent set. Returns the count of the final set
 * (at scratch offset *off) or -1 when some byte has no continuation;
 * *acc as of the last byte, *ftop the frames in use. n must be >= 1. */
static int32_t walk_bytes(struct cn_state *s, const uint8_t *b, size_t n, uint32_t *off, bool *acc,
                          uint32_t *ftop) {
    uint32_t cur_off = 0, cur_n = s->n_cfg;
    bool in_scratch = false;
    *ftop = s->n_fr;
    for (size_t i = 0; i < n; i++) {
        if (cur_n == 0) return -1;
        uint32_t out_off = in_scratch ? cur_off + cur_n : 0;
        int32_t m = step_gen(s, in_scratch, cur_off, cur_n, b[i], out_off, acc, ftop);
        if (m < 0 || (m == 0 && !*acc)) return -1;
        /* keep the scratch compact: move the new set to the front */
        if (in_scratch && m > 0)
            memmove(&s->sc.cfg[0], &s->sc.cfg[out_off], (size_t)m * sizeof *s->sc.cfg);
        cur_off = 0;
        cur_n = (uint32_t)m;
        in_scratch = true;
    }
    *off = cur_off;
    return (int32_t)cur_n;
}

/* pure: state after bytes, or -1 */
static int32_t pure_walk(const struct cn_state *s, const uint8_t *b, size_t n) {
    if (s->n_cfg == 0) return -1;
    const struct cn_program *p = s->p;
    int32_t st = s->cfg[0].top;
    uint32_t nc = (uint32_t)p->n_classes;
    for (size_t i = 0; i < n; i++) {
        st = p->trans[(size_t)st * nc + p->class_of[b[i]]];
        if (st < 0) return -1;
    }
    return st;
}

static anvil_status advance_bytes(struct cn_state *s, const uint8_t *b, size_t n) {
    if (s->done) return ANVIL_ERR_INVALID;
    if (n == 0) return ANVIL_OK;
    const struct cn_program *p = s->p;
    if (p->pure) {
        int32_t st = pure_walk(s, b, n);
        if (st < 0) return ANVIL_ERR_INVALID;
        s->cfg[0].top = st;
        s->n_cfg = (p->flags[st] & CN_SF_BYTES) ? 1 : 0;
        s->acc = (p->flags[st] & CN_SF_FINAL) != 0;
        return ANVIL_OK;
    }
    uint32_t off, ftop;
    bool acc;
    s->sc.oom = false;
    s->sc.bound = false;
    int32_t m = walk_bytes(s, b, n, &off, &acc, &ftop);
    if (m < 0) return s->sc.oom ? ANVIL_ERR_NOMEM : ANVIL_ERR_INVALID;
    return commit(s, off, (uint32_t)m, acc, ftop) ? ANVIL_OK : ANVIL_ERR_NOMEM;
}

anvil_status cn_advance_bytes(struct cn_state *s, const uint8_t *bytes, size_t n) {
    if (!s || (!bytes && n)) return ANVIL_ERR_INVALID;
    return advance_bytes(s, bytes, n);
}

static bool tok_bytes(const struct cn_vocab *v, anvil_token t, const uint8_t **b, size_t *n) {
    *b = v->data + v->off[t];
    *n = v->off[t + 1] - v->off[t];
    return true;
}

void cn_state_set_specials(struct cn_state *s, int32_t n, const anvil_token *ids,
                           const uint8_t *const *bytes, const int32_t *lens) {
    s->n_sp = n > 0 && ids && bytes && lens ? n : 0;
    s->sp_id = ids;
    s->sp_bytes = bytes;
    s->sp_len = lens;
}

int32_t rt_special(const struct cn_state *s, anvil_token t) {
    for (int32_t i = 0; i < s->n_sp; i++)
        if (s->sp_id[i] == t) return i;
    return -1;
}

/* The bytes t spells under s: a text token's, or a special's (a control
 * or end-of-generation token in s's specials); false: neither. */
static bool spelled(const struct cn_state *s, anvil_token t, const uint8_t **b, size_t *n) {
    const struct cn_vocab *v = s->v;
    if (v->kind[t] == CN_TOK_TEXT) {
        tok_bytes(v, t, b, n);
        return true;
    }
    int32_t k = rt_special(s, t);
    if (k < 0 || s->sp_len[k] <= 0) return false;
    *b = s->sp_bytes[k];
    *n = (size_t)s->sp_len[k];
    return true;
}

bool cn_allowed(struct cn_state *s, anvil_token t) {
    const struct cn_vocab *v = s->v;
    if (!v || t < 0 || t >= v->n_vocab || s->done) return false;
    /* an end-of-generation token: where the output may end, or (a
     * special) where its text may come */
    if (v->kind[t] == CN_TOK_EOG && (s->acc || rt_special(s, t) < 0)) return s->acc;
    const uint8_t *b;
    size_t n;
    if (!spelled(s, t, &b, &n)) return false;
    if (s->p->pure) return pure_walk(s, b, n) >= 0;
    uint32_t off, ftop;
    bool acc;
    s->sc.oom = false;
    s->sc.bound = false;
    return walk_bytes(s, b, n, &off, &acc, &ftop) >= 0;
}

anvil_status cn_advance(struct cn_state *s, anvil_token t) {
    const struct cn_vocab *v = s ? s->v : NULL;
    if (!v || t < 0 || t >= v->n_vocab || s->done) return ANVIL_ERR_INVALID;
    if (v->kind[t] == CN_TOK_EOG) {
        if (!s->acc) return ANVIL_ERR_INVALID;
        s->done = true;
        return ANVIL_OK;
    }
    const uint8_t *b;
    size_t n;
    if (!spelled(s, t, &b, &n)) return ANVIL_ERR_INVALID;
    return advance_bytes(s, b, n);
}
