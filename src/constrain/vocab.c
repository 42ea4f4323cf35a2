/*
 * vocab.c - the vocabulary index (built once per model) and the mask walk.
 *
 * Index: the TEXT tokens sorted by their bytes form a trie stored as an
 * array of nodes in preorder. A node is one byte at one depth; `skip` is
 * the index just past its subtree, so a walk that finds a byte dead jumps
 * over every token starting with that prefix in one step. Tokens whose
 * byte string ends at a node are listed there (duplicates share a node).
 * The walk keeps the automaton state of each depth on a small stack, so
 * every node costs one transition from its parent's state: the work is
 * the number of live trie nodes, not the vocabulary's total bytes.
 *
 * For a pure program the state per depth is one DFA state (an int); for a
 * pushdown program it is a configuration set (cn_level), each made by
 * rt_step from its parent's, with the scratch frames of abandoned
 * subtrees dropped as the walk returns to a shallower depth.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cn_int.h"

#define CN_MAX_VOCAB (1 << 27)
#define CN_MAX_TOKEN_LEN 65535

/* ---------------------------------------------------------------------- */
/* building */

struct sort_ent {
    const uint8_t *b;
    uint32_t len;
    int32_t id;
};

static int cmp_tok(const void *x, const void *y) {
    const struct sort_ent *a = x, *b = y;
    uint32_t m = a->len < b->len ? a->len : b->len;
    int c = m ? memcmp(a->b, b->b, m) : 0;
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void cn_vocab_free(struct cn_vocab *v) {
    if (!v) return;
    core_free(v->kind);
    core_free(v->off);
    core_free(v->data);
    core_free(v->nodes);
    core_free(v->sig);
    core_free(v->end_ids);
    core_free(v->eog);
    core_free(v);
}

int32_t cn_vocab_n_vocab(const struct cn_vocab *v) { return v->n_vocab; }
int32_t cn_vocab_n_nodes(const struct cn_vocab *v) { return (int32_t)v->n_nodes; }
size_t cn_vocab_bytes(const struct cn_vocab *v) { return v->bytes; }

anvil_status cn_vocab_build(int32_t n_vocab, const uint8_t *const *bytes, const int32_t *lens,
                            const uint8_t *kinds, struct cn_vocab **out, char *err,
                            size_t err_cap) {
    if (!out || n_vocab <= 0 || n_vocab > CN_MAX_VOCAB || !lens || !bytes) {
        errmsg_set(err, err_cap, "vocabulary: bad size or arguments");
        return ANVIL_ERR_INVALID;
    }
    uint64_t total = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        if (lens[t] < 0 || (lens[t] > 0 && !bytes[t])) {
            errmsg_set(err, err_cap, "vocabulary: token %d has a bad length", t);
            return ANVIL_ERR_INVALID;
        }
        if (kinds && kinds[t] > CN_TOK_NEVER) {
            errmsg_set(err, err_cap, "vocabulary: token %d has a bad kind", t);
            return ANVIL_ERR_INVALID;
        }
        total += (uint64_t)lens[t];
    }
    if (total > UINT32_MAX / 2) {
        errmsg_set(err, err_cap, "vocabulary: too many bytes");
        return ANVIL_ERR_INVALID;
    }
    struct cn_vocab *v = core_calloc(1, sizeof *v);
    int32_t *sorted = NULL;
    struct sort_ent *ent = NULL;
    uint32_t *parent = NULL; /* (n_nodes) build only */
    uint32_t *path = NULL;
    if (!v) goto oom;
    v->n_vocab = n_vocab;
    v->kind = core_malloc((size_t)n_vocab);
    v->off = core_malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->data = core_malloc(total ? (size_t)total : 1);
    sorted = core_malloc((size_t)n_vocab * sizeof *sorted);
    if (!v->kind || !v->off || !v->data || !sorted) goto oom;
    uint32_t pos = 0, n_text = 0;
    int32_t n_eog = 0;
    for (int32_t t = 0; t < n_vocab; t++) {
        uint8_t k = kinds ? kinds[t] : CN_TOK_TEXT;
        if (k == CN_TOK_TEXT && (lens[t] == 0 || lens[t] > CN_MAX_TOKEN_LEN)) k = CN_TOK_NEVER;
        v->kind[t] = k;
        v->off[t] = pos;
        if (lens[t]) memcpy(v->data + pos, bytes[t], (size_t)lens[t]);
        pos += (uint32_t)lens[t];
        if (k == CN_TOK_TEXT) {
            sorted[n_text++] = t;
            if ((uint32_t)lens[t] > v->max_len) v->max_len = (uint32_t)lens[t];
        }
        if (k == CN_TOK_EOG) n_eog++;
    }
    v->off[n_vocab] = pos;
    v->eog = core_malloc((size_t)(n_eog ? n_eog : 1) * sizeof *v->eog);
    v->end_ids = core_malloc((size_t)(n_text ? n_text : 1) * sizeof *v->end_ids);
    path = core_malloc(((size_t)v->max_len + 1) * sizeof *path);
    if (!v->eog || !v->end_ids || !path) goto oom;
    for (int32_t t = 0; t < n_vocab; t++)
        if (v->kind[t] == CN_TOK_EOG) v->eog[v->n_eog++] = t;
    ent = core_malloc((size_t)(n_text ? n_text : 1) * sizeof *ent);
    if (!ent) goto oom;
    for (uint32_t i = 0; i < n_text; i++) {
        int32_t t = sorted[i];
        ent[i] = (struct sort_ent){v->data + v->off[t], v->off[t + 1] - v->off[t], t};
    }
    qsort(ent, n_text, sizeof *ent, cmp_tok);
    for (uint32_t i = 0; i < n_text; i++) sorted[i] = ent[i].id;
    core_free(ent);
    ent = NULL;
    /* node count: bytes beyond the common prefix with the previous token */
    uint64_t n_nodes = 0;
    for (uint32_t i = 0; i < n_text; i++) {
        int32_t t = sorted[i];
        uint32_t len = v->off[t + 1] - v->off[t], lcp = 0;
        if (i > 0) {
            int32_t u = sorted[i - 1];
            uint32_t lu = v->off[u + 1] - v->off[u];
            while (lcp < len && lcp < lu && v->data[v->off[t] + lcp] == v->data[v->off[u] + lcp])
                lcp++;
        }
        n_nodes += len - lcp;
    }
    v->nodes = core_malloc((size_t)(n_nodes + 1) * sizeof *v->nodes);
    v->sig = core_calloc(n_nodes ? n_nodes : 1, sizeof *v->sig);
    parent = core_malloc((size_t)(n_nodes ? n_nodes : 1) * sizeof *parent);
    if (!v->nodes || !v->sig || !parent) goto oom;
    uint32_t nn = 0, depth = 0; /* path[1..depth]: open nodes of the current branch */
    for (uint32_t i = 0; i < n_text; i++) {
        int32_t t = sorted[i];
        const uint8_t *b = v->data + v->off[t];
        uint32_t len = v->off[t + 1] - v->off[t], lcp = 0;
        if (i > 0) {
            int32_t u = sorted[i - 1];
            uint32_t lu = v->off[u + 1] - v->off[u];
            while (lcp < len && lcp < lu && b[lcp] == v->data[v->off[u] + lcp]) lcp++;
        }
        /* close the previous branch below the common prefix */
        while (depth > lcp) v->nodes[path[depth--]].skip = nn;
        for (uint32_t d = lcp; d < len; d++) {
            struct cn_trie_node *nd = &v->nodes[nn];
            nd->byte = b[d];
            nd->depth = (uint16_t)(d + 1);
            nd->ntok = 0;
            nd->tok = i; /* token i is the first one in the new node's subtree */
            nd->skip = 0;
            parent[nn] = depth ? path[depth] : UINT32_MAX;
            path[++depth] = nn++;
        }
        struct cn_trie_node *end = &v->nodes[path[len]];
        if (end->ntok == UINT16_MAX) {
            errmsg_set(err, err_cap, "vocabulary: more than 65535 tokens with the same bytes");
            core_free(sorted);
            core_free(path);
            core_free(parent);
            cn_vocab_free(v);
            return ANVIL_ERR_INVALID;
        }
        end->ntok++;
        v->end_ids[i] = t;
    }
    while (depth > 0) v->nodes[path[depth--]].skip = nn;
    v->nodes[nn] = (struct cn_trie_node){.skip = nn + 1, .tok = n_text};
    v->n_nodes = nn;
    /* subtree byte buckets, children before parents */
    for (uint32_t k = nn; k-- > 0;) {
        v->sig[k] |= (uint64_t)1 << cn_bucket(v->nodes[k].byte);
        if (parent[k] != UINT32_MAX) v->sig[parent[k]] |= v->sig[k];
    }
    v->bytes = sizeof *v + (size_t)n_vocab * (1 + sizeof *v->off) + pos +
               (size_t)(nn + 1) * sizeof *v->nodes + (size_t)nn * sizeof *v->sig +
               (size_t)n_text * sizeof *v->end_ids;
    core_free(sorted);
    core_free(path);
    core_free(parent);
    *out = v;
    return ANVIL_OK;
oom:
    core_free(sorted);
    core_free(ent);
    core_free(path);
    core_free(parent);
    cn_vocab_free(v);
    errmsg_set(err, err_cap, "out of memory");
    return ANVIL_ERR_NOMEM;
}

/* ---------------------------------------------------------------------- */
/* the mask walk */

static inline int32_t set_tokens(const struct cn_vocab *v, const struct cn_trie_node *nd,
                                 uint8_t *mask) {
    for (uint32_t k = 0; k < nd->ntok; k++) {
        int32_t t = v->end_ids[nd->tok + k];
        mask[t >> 3] |= (uint8_t)(1u << (t & 7));
    }
    return nd->ntok;
}

/* every token of end_ids[lo .. hi) */
static inline int32_t set_range(const struct cn_vocab *v, uint32_t lo, uint32_t hi, uint8_t *mask) {
    for (uint32_t k = lo; k < hi; k++) {
        int32_t t = v->end_ids[k];
        mask[t >> 3] |= (uint8_t)(1u << (t & 7));
    }
    return (int32_t)(hi - lo);
}

static int32_t walk_pure(struct cn_state *s, uint8_t *mask) {
    const struct cn_program *p = s->p;
    const struct cn_vocab *v = s->v;
    struct cn_scratch *sc = &s->sc;
    if (sc->cap_dstate < v->max_len + 1) {
        void *d = core_realloc(sc->dstate, ((size_t)v->max_len + 1) * 2 * sizeof(uint64_t));
        if (!d) return ANVIL_ERR_NOMEM;
        sc->dstate = d;
        sc->cap_dstate = v->max_len + 1;
    }
    /* the transition row of the state at each depth (a pointer saves the
     * multiply on the dependent chain parent -> child) */
    struct walk_depth {
        const int32_t *row; /* the state's transition row */
        uint64_t loop;      /* its loopsig */
    } *dd = sc->dstate;
    const int32_t *trans = p->trans;
    const uint8_t *cls = p->class_of;
    const size_t nc = (size_t)p->n_classes;
    const uint64_t *sig = v->sig;
    dd[0].row = trans + (size_t)s->cfg[0].top * nc;
    dd[0].loop = p->loopsig[s->cfg[0].top];
    const struct cn_trie_node *nodes = v->nodes;
    int32_t count = 0;
    for (uint32_t i = 0; i < v->n_nodes;) {
        const struct cn_trie_node *nd = &nodes[i];
        const struct walk_depth *par = &dd[nd->depth - 1];
        if (!(sig[i] & ~par->loop)) { /* every byte below loops: all allowed */
            count += set_range(v, nd->tok, nodes[nd->skip].tok, mask);
            i = nd->skip;
            continue;
        }
        int32_t t = par->row[cls[nd->byte]];
        if (t < 0) {
            i = nd->skip;
            continue;
        }
        dd[nd->depth].row = trans + (size_t)t * nc;
        dd[nd->depth].loop = p->loopsig[t];
        if (nd->ntok) count += set_tokens(v, nd, mask);
        i++;
    }
    return count;
}

static int32_t walk_gen(struct cn_state *s, uint8_t *mask) {
    const struct cn_vocab *v = s->v;
    struct cn_scratch *sc = &s->sc;
    if (sc->cap_lev < v->max_len + 1) {
        struct cn_level *l = core_realloc(sc->lev, ((size_t)v->max_len + 1) * sizeof *l);
        if (!l) return ANVIL_ERR_NOMEM;
        sc->lev = l;
        sc->cap_lev = v->max_len + 1;
    }
    /* room for a chain of single configurations at every depth, so that
     * the fast path below never grows the scratch */
    if (sc->cap_cfg < v->max_len + 2) {
        struct cn_cfg *c = core_realloc(sc->cfg, ((size_t)v->max_len + 2) * sizeof *c);
        if (!c) return ANVIL_ERR_NOMEM;
        sc->cfg = c;
        sc->cap_cfg = v->max_len + 2;
    }
    const struct cn_program *p = s->p;
    const int32_t *trans = p->trans;
    const uint8_t *cls = p->class_of, *flags = p->flags;
    const size_t nc = (size_t)p->n_classes;
    struct cn_level *lev = sc->lev;
    lev[0] = (struct cn_level){.off = 0, .n = s->n_cfg, .n_fr = s->n_fr, .acc = s->acc};
    int32_t count = 0;
    for (uint32_t i = 0; i < v->n_nodes;) {
        const struct cn_trie_node *nd = &v->nodes[i];
        uint32_t d = nd->depth;
        const struct cn_level *par = &lev[d - 1];
        if (par->n == 1) {
            /* one configuration moving to a plain state (no call, not an
             * end): the common case inside strings, without rt_step */
            struct cn_cfg c = d == 1 ? s->cfg[0] : sc->cfg[par->off];
            if (flags[c.top] == CN_SF_BYTES && !(v->sig[i] & ~p->loopsig[c.top])) {
                /* every byte below loops on a plain state: all allowed */
                count += set_range(v, nd->tok, v->nodes[nd->skip].tok, mask);
                i = nd->skip;
                continue;
            }
            int32_t t = trans[(size_t)c.top * nc + cls[nd->byte]];
            if (t < 0) {
                i = nd->skip;
                continue;
            }
            if (flags[t] == CN_SF_BYTES) {
                uint32_t out_off = d == 1 ? 0 : par->off + 1;
                sc->cfg[out_off] = (struct cn_cfg){t, c.stk};
                lev[d] = (struct cn_level){.off = out_off, .n = 1, .n_fr = par->n_fr, .acc = false};
                if (nd->ntok) count += set_tokens(v, nd, mask);
                i++;
                continue;
            }
        }
        uint32_t ftop = par->n_fr; /* drop frames of deeper, finished subtrees */
        uint32_t out_off = d == 1 ? 0 : par->off + par->n;
        bool acc = false;
        int32_t m = par->n ? rt_step(s, d > 1, par->off, par->n, nd->byte, out_off, &acc, &ftop)
                           : 0;
        if (m < 0 || (m == 0 && !acc)) {
            i = nd->skip;
            continue;
        }
        if (nd->ntok) count += set_tokens(v, nd, mask);
        if (m == 0) { /* complete, nothing can follow: no longer token fits */
            i = nd->skip;
            continue;
        }
        lev[d] = (struct cn_level){.off = out_off, .n = (uint32_t)m, .n_fr = ftop, .acc = acc};
        i++;
    }
    return count;
}

/* the mask from the walks, without caches */
int32_t cn_fill_mask_walk(struct cn_state *s, uint8_t *mask) {
    const struct cn_vocab *v = s->v;
    memset(mask, 0, ((size_t)v->n_vocab + 7) / 8);
    int32_t count = 0;
    s->sc.oom = false;
    s->sc.bound = false;
    if (s->n_cfg > 0) {
        count = s->p->pure ? walk_pure(s, mask) : walk_gen(s, mask);
        if (count < 0) return count;
        if (s->sc.oom) { /* a subtree was skipped for lack of memory */
            memset(mask, 0, ((size_t)v->n_vocab + 7) / 8);
            return ANVIL_ERR_NOMEM;
        }
    }
    if (s->acc) {
        for (int32_t k = 0; k < v->n_eog; k++) {
            int32_t t = v->eog[k];
            mask[t >> 3] |= (uint8_t)(1u << (t & 7));
        }
        count += v->n_eog;
    }
    return count;
}

/* pure programs: the program's shared cache by DFA state */
static int32_t fill_pure_cached(struct cn_state *s, uint8_t *mask) {
    const struct cn_vocab *v = s->v;
    struct cn_mask_cache *c = s->p->cache;
    size_t nb = ((size_t)v->n_vocab + 7) / 8;
    const struct cn_vocab *cv = atomic_load_explicit(&c->vocab, memory_order_acquire);
    if (!cv && atomic_compare_exchange_strong(&c->vocab, &cv, v)) cv = v;
    if (cv != v) return cn_fill_mask_walk(s, mask); /* another model's cache */
    int32_t st = s->cfg[0].top;
    uint8_t *hit = atomic_load_explicit(&c->slot[st], memory_order_acquire);
    if (hit) {
        int32_t count;
        memcpy(mask, hit, nb);
        memcpy(&count, hit + nb, sizeof count);
        return count;
    }
    int32_t count = cn_fill_mask_walk(s, mask);
    if (count < 0) return count;
    int64_t need = (int64_t)(nb + sizeof count);
    if (atomic_fetch_sub(&c->budget, need) < need) {
        atomic_fetch_add(&c->budget, need); /* over budget: not cached */
        return count;
    }
    uint8_t *copy = core_malloc(nb + sizeof count);
    if (!copy) {
        atomic_fetch_add(&c->budget, need);
        return count;
    }
    memcpy(copy, mask, nb);
    memcpy(copy + nb, &count, sizeof count);
    uint8_t *expect = NULL;
    if (!atomic_compare_exchange_strong_explicit(&c->slot[st], &expect, copy, memory_order_release,
                                                 memory_order_relaxed)) {
        core_free(copy); /* another thread published the same mask */
        atomic_fetch_add(&c->budget, need);
    }
    return count;
}

#define KEY_MAX 4096

/* pushdown programs: a few masks of this request by exact parse state */
static int32_t fill_gen_cached(struct cn_state *s, uint8_t *mask) {
    const struct cn_vocab *v = s->v;
    struct cn_scratch *sc = &s->sc;
    size_t nb = ((size_t)v->n_vocab + 7) / 8;
    /* key: acc, n_cfg, per configuration its top, depth and return states */
    uint32_t n = 2;
    for (uint32_t i = 0; i < s->n_cfg; i++) n += 2 + s->fr[s->cfg[i].stk].depth;
    if (n > KEY_MAX) return cn_fill_mask_walk(s, mask);
    if (sc->cap_key < n) {
        uint32_t *k = core_realloc(sc->key, (size_t)KEY_MAX * sizeof *k);
        if (!k) return cn_fill_mask_walk(s, mask);
        sc->key = k;
        sc->cap_key = KEY_MAX;
    }
    uint32_t *key = sc->key, w = 0;
    key[w++] = s->acc;
    key[w++] = s->n_cfg;
    for (uint32_t i = 0; i < s->n_cfg; i++) {
        key[w++] = (uint32_t)s->cfg[i].top;
        key[w++] = s->fr[s->cfg[i].stk].depth;
        for (uint32_t f = s->cfg[i].stk; f; f = s->fr[f].parent) key[w++] = (uint32_t)s->fr[f].ret;
    }
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < w; i++) h = (h ^ key[i]) * 0xff51afd7ed558ccdull;
    struct cn_mask_ent *lru = &sc->mc[0];
    for (int e = 0; e < 4; e++) {
        struct cn_mask_ent *m = &sc->mc[e];
        if (m->mask && m->hash == h && m->key_len == w && !memcmp(m->key, key, w * sizeof *key)) {
            m->age = ++sc->mc_clock;
            memcpy(mask, m->mask, nb);
            return m->count;
        }
        if (!m->mask || m->age < lru->age) lru = m;
    }
    int32_t count = cn_fill_mask_walk(s, mask);
    if (count < 0) return count;
    /* remember it (a failed allocation just skips caching) */
    if (!lru->mask) lru->mask = core_malloc(nb);
    if (lru->cap_key < w) {
        uint32_t *k = core_realloc(lru->key, (size_t)w * sizeof *k);
        if (k) {
            lru->key = k;
            lru->cap_key = w;
        }
    }
    if (lru->mask && lru->cap_key >= w) {
        memcpy(lru->mask, mask, nb);
        memcpy(lru->key, key, w * sizeof *key);
        lru->key_len = w;
        lru->hash = h;
        lru->count = count;
        lru->age = ++sc->mc_clock;
    } else {
        lru->hash = 0;
        lru->key_len = UINT32_MAX;
    }
    return count;
}

/* the mask of the text and EOG tokens, from a cache or the walk */
static int32_t fill_text(struct cn_state *s, uint8_t *mask) {
    if (s->n_cfg == 0) return cn_fill_mask_walk(s, mask); /* EOG at most */
    if (s->p->pure) return s->p->cache ? fill_pure_cached(s, mask) : cn_fill_mask_walk(s, mask);
    return fill_gen_cached(s, mask);
}

int32_t cn_fill_mask(struct cn_state *s, uint8_t *mask) {
    const struct cn_vocab *v = s->v;
    if (!v || !mask) return ANVIL_ERR_INVALID;
    if (s->done) {
        memset(mask, 0, ((size_t)v->n_vocab + 7) / 8);
        return 0;
    }
    int32_t count = fill_text(s, mask);
    /* the specials on top: a handful of walks, never cached (a cache is
     * shared by every state of the program, specials or not) */
    for (int32_t i = 0; count >= 0 && i < s->n_sp && s->n_cfg > 0; i++) {
        anvil_token t = s->sp_id[i];
        if (t < 0 || t >= v->n_vocab || (mask[t >> 3] >> (t & 7) & 1) || !cn_allowed(s, t))
            continue;
        mask[t >> 3] |= (uint8_t)(1u << (t & 7));
        count++;
    }
    return count;
}
