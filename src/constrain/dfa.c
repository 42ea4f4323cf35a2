/*
 * dfa.c - from the NFA to the program: byte classes, subset construction
 * per call-rule, pruning, shortest completions, the final tables.
 *
 * Byte classes: bytes that every byte set of the NFA either contains or
 * not are interchangeable; rows of the transition table are indexed by
 * class (JSON schemas have ~30-80 classes instead of 256 columns).
 *
 * Subset construction: a DFA state is the sorted list of its "kernel" NFA
 * states (those with a byte or call edge, or the rule's final state) of an
 * epsilon closure; a hash table finds existing ones. Per DFA state, the
 * targets of each class are gathered into buckets (CSR over classes);
 * classes with identical buckets share one closure (a second hash table,
 * stamped per state), which matters for big classes such as "any string
 * character". Call edges are grouped by callee the same way. Work is
 * counted (edges scanned, closure elements) and bounded by max_work, the
 * states by max_dfa_states and the table by CN_MAX_TABLE entries, so an
 * exploding regex fails with a message in bounded time and memory.
 *
 * Pruning and distances: a state is kept when it can reach its rule's end
 * (through bytes and calls to rules that can end) and is reachable from
 * the root. "Can end" with fewest bytes is a shortest-path problem where a
 * call edge costs the callee's own distance: Knuth's generalization of
 * Dijkstra (superior functions) computes it in one pass, and a finite
 * distance is exactly liveness. Every kept state therefore has a way to
 * finish, so the run time never walks into a dead end it could have seen.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cn_int.h"

#define CN_MAX_TABLE (16u << 20) /* transition entries (64 MiB) */
#define CN_MASK_CACHE_BYTES (16 << 20) /* cached masks per pure program */
#define CN_MAX_KEYS (16u << 20)         /* NFA state ids over all DFA states' keys (64 MiB) */

struct dfab {
    const struct cn_ir *g;
    const struct cn_nfa *a;
    const struct cn_limits *lim;
    /* classes */
    uint8_t cls[256];
    uint32_t nc;
    uint32_t *set_cls_off; /* (n_sets + 1) classes of each set */
    uint8_t *set_cls;
    /* DFA states */
    uint32_t n, cap;
    uint32_t *key_off, *key_len; /* into keys */
    uint32_t *keys;
    uint32_t n_keys, cap_keys;
    uint32_t *rule_of;
    uint8_t *final;
    int32_t *trans; /* (cap, nc) */
    uint32_t *hash; /* open addressing, CN_NIL empty */
    uint32_t cap_hash;
    /* call edges */
    struct dcall {
        uint32_t from, crule, to;
    } *calls;
    uint32_t n_calls, cap_calls;
    uint32_t *cr_start; /* (n_crules) DFA start, CN_NIL when the rule matches nothing */
    /* scratch */
    uint32_t *mark; /* (n_nfa) closure stamps */
    uint32_t stamp;
    uint32_t *stk, *clo;
    uint32_t n_clo;
    int64_t work;
    anvil_status st;
    char err[256];
};

static void fail(struct dfab *b, anvil_status st, const char *msg) {
    if (b->st != ANVIL_OK) return;
    b->st = st;
    snprintf(b->err, sizeof b->err, "%s", msg);
}

static bool spend(struct dfab *b, int64_t w) {
    b->work += w;
    if (b->work > b->lim->max_work) {
        char msg[200];
        snprintf(msg, sizeof msg, "constraint too complex: building its automaton took more than "
                 "%lld steps (a regex like (a|b)*a(a|b){20} explodes)", (long long)b->lim->max_work);
        fail(b, ANVIL_ERR_UNSUPPORTED, msg);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* byte classes */

static bool make_classes(struct dfab *b) {
    const struct cn_ir *g = b->g;
    const struct cn_nfa *a = b->a;
    uint8_t *used = core_calloc(g->n_sets ? g->n_sets : 1, 1);
    if (!used) return false;
    for (uint32_t i = 0; i < a->n_edges; i++)
        if (a->out[i].kind == NFA_SET) used[a->out[i].label] = 1;
    memset(b->cls, 0, sizeof b->cls);
    uint32_t n = 1;
    for (uint32_t s = 0; s < g->n_sets; s++) {
        if (!used[s]) continue;
        uint32_t map[512];
        for (uint32_t i = 0; i < 2 * n; i++) map[i] = UINT32_MAX;
        uint32_t nn = 0;
        for (unsigned c = 0; c < 256; c++) {
            uint32_t k = b->cls[c] * 2u + (bset_has(&g->sets[s], c) ? 1u : 0u);
            if (map[k] == UINT32_MAX) map[k] = nn++;
            b->cls[c] = (uint8_t)map[k];
        }
        n = nn;
    }
    b->nc = n;
    b->set_cls_off = core_calloc((size_t)g->n_sets + 1, sizeof *b->set_cls_off);
    if (!b->set_cls_off) {
        core_free(used);
        return false;
    }
    /* a class is in a set iff its first byte is */
    for (uint32_t s = 0; s < g->n_sets; s++) {
        uint32_t cnt = 0;
        if (used[s]) {
            uint8_t seen[256] = {0};
            for (unsigned c = 0; c < 256; c++)
                if (bset_has(&g->sets[s], c) && !seen[b->cls[c]]) seen[b->cls[c]] = 1, cnt++;
        }
        b->set_cls_off[s + 1] = b->set_cls_off[s] + cnt;
    }
    b->set_cls = core_malloc(b->set_cls_off[g->n_sets] ? b->set_cls_off[g->n_sets] : 1);
    if (!b->set_cls) {
        core_free(used);
        return false;
    }
    for (uint32_t s = 0; s < g->n_sets; s++) {
        if (!used[s]) continue;
        uint8_t seen[256] = {0};
        uint32_t w = b->set_cls_off[s];
        for (unsigned c = 0; c < 256; c++)
            if (bset_has(&g->sets[s], c) && !seen[b->cls[c]]) {
                seen[b->cls[c]] = 1;
                b->set_cls[w++] = b->cls[c];
            }
    }
    core_free(used);
    return true;
}

/* ---------------------------------------------------------------------- */
/* closures and the state table */

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, c = *(const uint32_t *)y;
    return a < c ? -1 : a > c;
}

/* Epsilon closure of seeds[0..n) restricted to kernel states of call-rule
 * k, sorted, into b->clo[0..b->n_clo). */
static void closure(struct dfab *b, const uint32_t *seeds, uint32_t n, uint32_t k) {
    const struct cn_nfa *a = b->a;
    if (++b->stamp == 0) {
        memset(b->mark, 0, (size_t)a->n_states * sizeof *b->mark);
        b->stamp = 1;
    }
    uint32_t sp = 0;
    b->n_clo = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (b->mark[seeds[i]] == b->stamp) continue;
        b->mark[seeds[i]] = b->stamp;
        b->stk[sp++] = seeds[i];
    }
    int64_t w = 0;
    while (sp > 0) {
        uint32_t q = b->stk[--sp];
        bool kernel = q == a->cr_final[k];
        for (uint32_t e = a->off[q]; e < a->off[q + 1]; e++) {
            w++;
            const struct nfa_edge *ed = &a->out[e];
            if (ed->kind != NFA_EPS) {
                kernel = true;
                continue;
            }
            if (b->mark[ed->to] != b->stamp) {
                b->mark[ed->to] = b->stamp;
                b->stk[sp++] = ed->to;
            }
        }
        if (kernel) b->clo[b->n_clo++] = q;
    }
    /* the sort counts too: n log n */
    int64_t lg = 1;
    while (((uint64_t)1 << lg) < b->n_clo) lg++;
    if (!spend(b, w + (int64_t)b->n_clo * lg)) return;
    if (b->n_clo > 1) qsort(b->clo, b->n_clo, sizeof *b->clo, cmp_u32);
}

static uint64_t key_hash(const uint32_t *k, uint32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h ^= k[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

static bool rehash(struct dfab *b) {
    uint32_t nc = b->cap_hash ? b->cap_hash * 2 : 1024;
    uint32_t *h = core_malloc((size_t)nc * sizeof *h);
    if (!h) return false;
    for (uint32_t i = 0; i < nc; i++) h[i] = CN_NIL;
    for (uint32_t d = 0; d < b->n; d++) {
        uint32_t j = (uint32_t)key_hash(&b->keys[b->key_off[d]], b->key_len[d]) & (nc - 1);
        while (h[j] != CN_NIL) j = (j + 1) & (nc - 1);
        h[j] = d;
    }
    core_free(b->hash);
    b->hash = h;
    b->cap_hash = nc;
    return true;
}

/* DFA state of the current closure (added when new); CN_NIL when the
 * closure is empty (dead) or on failure. */
static uint32_t intern(struct dfab *b, uint32_t k) {
    if (b->st != ANVIL_OK || b->n_clo == 0) return CN_NIL;
    if ((uint64_t)(b->n + 1) * 2 > b->cap_hash && !rehash(b)) {
        fail(b, ANVIL_ERR_NOMEM, "out of memory");
        return CN_NIL;
    }
    uint32_t j = (uint32_t)key_hash(b->clo, b->n_clo) & (b->cap_hash - 1);
    while (b->hash[j] != CN_NIL) {
        uint32_t d = b->hash[j];
        if (b->key_len[d] == b->n_clo &&
            !memcmp(&b->keys[b->key_off[d]], b->clo, (size_t)b->n_clo * sizeof *b->clo))
            return d;
        j = (j + 1) & (b->cap_hash - 1);
    }
    if (b->n >= (uint32_t)b->lim->max_dfa_states || (uint64_t)(b->n + 1) * b->nc > CN_MAX_TABLE) {
        char msg[200];
        snprintf(msg, sizeof msg, "constraint too large: its automaton needs more than %u states "
                 "(a regex like (a|b)*a(a|b){20} explodes)", b->n);
        fail(b, ANVIL_ERR_UNSUPPORTED, msg);
        return CN_NIL;
    }
    uint32_t d = b->n;
    uint32_t cap = b->cap;
    if (d >= cap) {
        uint32_t nc = cap ? cap * 2 : 256;
        uint32_t *ko = core_realloc(b->key_off, (size_t)nc * sizeof *ko);
        if (ko) b->key_off = ko;
        uint32_t *kl = core_realloc(b->key_len, (size_t)nc * sizeof *kl);
        if (kl) b->key_len = kl;
        uint32_t *ro = core_realloc(b->rule_of, (size_t)nc * sizeof *ro);
        if (ro) b->rule_of = ro;
        uint8_t *fi = core_realloc(b->final, nc);
        if (fi) b->final = fi;
        int32_t *tr = core_realloc(b->trans, (size_t)nc * b->nc * sizeof *tr);
        if (tr) b->trans = tr;
        if (!ko || !kl || !ro || !fi || !tr) {
            fail(b, ANVIL_ERR_NOMEM, "out of memory");
            return CN_NIL;
        }
        b->cap = nc;
    }
    if ((uint64_t)b->n_keys + b->n_clo > CN_MAX_KEYS) {
        fail(b, ANVIL_ERR_UNSUPPORTED, "constraint too large: its automaton's states would hold "
             "more than 16M NFA states in all");
        return CN_NIL;
    }
    if (!cn_grow((void **)&b->keys, &b->cap_keys, b->n_keys + b->n_clo, sizeof *b->keys)) {
        fail(b, ANVIL_ERR_NOMEM, "out of memory");
        return CN_NIL;
    }
    memcpy(&b->keys[b->n_keys], b->clo, (size_t)b->n_clo * sizeof *b->clo);
    b->key_off[d] = b->n_keys;
    b->key_len[d] = b->n_clo;
    b->n_keys += b->n_clo;
    b->rule_of[d] = k;
    b->final[d] = 0;
    for (uint32_t i = 0; i < b->n_clo; i++)
        if (b->clo[i] == b->a->cr_final[k]) b->final[d] = 1;
    for (uint32_t c = 0; c < b->nc; c++) b->trans[(size_t)d * b->nc + c] = -1;
    b->hash[j] = d;
    b->n++;
    return d;
}

/* ---------------------------------------------------------------------- */
/* subset construction */

struct bucket_memo {
    uint64_t h;
    uint32_t cls;
    uint32_t stamp;
};

static void determinize(struct dfab *b) {
    const struct cn_nfa *a = b->a;
    uint32_t nc = b->nc;
    uint32_t *cnt = core_calloc((size_t)nc + 1, sizeof *cnt);
    uint32_t *fillp = core_malloc((size_t)nc * sizeof *fillp);
    uint32_t *bk = NULL, cap_bk = 0;
    struct bucket_memo memo[512];
    uint32_t memo_stamp = 0;
    struct dcall *pend = NULL;
    uint32_t cap_pend = 0;
    memset(memo, 0, sizeof memo);
    if (!cnt || !fillp) {
        fail(b, ANVIL_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (uint32_t k = 0; k < a->n_crules && b->st == ANVIL_OK; k++) {
        uint32_t s = a->cr_start[k];
        closure(b, &s, 1, k);
        b->cr_start[k] = intern(b, k);
    }
    for (uint32_t d = 0; d < b->n && b->st == ANVIL_OK; d++) {
        uint32_t k = b->rule_of[d];
        /* count targets per class, and the call edges */
        memset(cnt, 0, ((size_t)nc + 1) * sizeof *cnt);
        uint32_t n_pend = 0;
        int64_t w = 0;
        for (uint32_t i = 0; i < b->key_len[d]; i++) {
            uint32_t q = b->keys[b->key_off[d] + i];
            for (uint32_t e = a->off[q]; e < a->off[q + 1]; e++) {
                const struct nfa_edge *ed = &a->out[e];
                if (ed->kind == NFA_SET) {
                    uint32_t lo = b->set_cls_off[ed->label], hi = b->set_cls_off[ed->label + 1];
                    w += hi - lo;
                    for (uint32_t j = lo; j < hi; j++) cnt[b->set_cls[j] + 1]++;
                } else if (ed->kind == NFA_CALL) {
                    if (!cn_grow((void **)&pend, &cap_pend, n_pend + 1, sizeof *pend)) {
                        fail(b, ANVIL_ERR_NOMEM, "out of memory");
                        goto done;
                    }
                    pend[n_pend++] = (struct dcall){d, ed->label, ed->to};
                }
            }
        }
        if (!spend(b, w + b->key_len[d])) goto done;
        for (uint32_t c = 0; c < nc; c++) cnt[c + 1] += cnt[c];
        if (!cn_grow((void **)&bk, &cap_bk, cnt[nc] + 1, sizeof *bk)) {
            fail(b, ANVIL_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(fillp, cnt, (size_t)nc * sizeof *fillp);
        for (uint32_t i = 0; i < b->key_len[d]; i++) {
            uint32_t q = b->keys[b->key_off[d] + i];
            for (uint32_t e = a->off[q]; e < a->off[q + 1]; e++) {
                const struct nfa_edge *ed = &a->out[e];
                if (ed->kind != NFA_SET) continue;
                for (uint32_t j = b->set_cls_off[ed->label]; j < b->set_cls_off[ed->label + 1]; j++)
                    bk[fillp[b->set_cls[j]]++] = ed->to;
            }
        }
        if (++memo_stamp == 0) {
            memset(memo, 0, sizeof memo);
            memo_stamp = 1;
        }
        for (uint32_t c = 0; c < nc && b->st == ANVIL_OK; c++) {
            uint32_t lo = cnt[c], n = cnt[c + 1] - lo;
            if (n == 0) continue;
            uint64_t h = key_hash(&bk[lo], n);
            uint32_t j = (uint32_t)h & 511;
            int32_t target = -2;
            while (memo[j].stamp == memo_stamp) {
                uint32_t c2 = memo[j].cls;
                if (memo[j].h == h && cnt[c2 + 1] - cnt[c2] == n &&
                    !memcmp(&bk[cnt[c2]], &bk[lo], (size_t)n * sizeof *bk)) {
                    target = b->trans[(size_t)d * nc + c2];
                    break;
                }
                j = (j + 1) & 511;
            }
            if (target == -2) {
                memo[j] = (struct bucket_memo){h, c, memo_stamp};
                closure(b, &bk[lo], n, k);
                uint32_t t = intern(b, k);
                target = t == CN_NIL ? -1 : (int32_t)t;
            }
            /* b->trans may have moved in intern */
            b->trans[(size_t)d * nc + c] = target;
        }
        /* call edges, grouped by callee */
        for (uint32_t i = 0; i < n_pend && b->st == ANVIL_OK;) {
            uint32_t cr = pend[i].crule, j = i;
            uint32_t m = 0;
            while (j < n_pend) {
                if (pend[j].crule == cr) {
                    struct dcall t = pend[j];
                    pend[j] = pend[i + m];
                    pend[i + m] = t;
                    m++;
                }
                j++;
            }
            if (!cn_grow((void **)&bk, &cap_bk, m, sizeof *bk)) {
                fail(b, ANVIL_ERR_NOMEM, "out of memory");
                goto done;
            }
            for (uint32_t x = 0; x < m; x++) bk[x] = pend[i + x].to;
            closure(b, bk, m, k);
            uint32_t t = intern(b, k);
            if (t != CN_NIL) {
                if (!cn_grow((void **)&b->calls, &b->cap_calls, b->n_calls + 1, sizeof *b->calls)) {
                    fail(b, ANVIL_ERR_NOMEM, "out of memory");
                    goto done;
                }
                b->calls[b->n_calls++] = (struct dcall){d, cr, t};
            }
            i += m;
        }
    }
done:
    core_free(cnt);
    core_free(fillp);
    core_free(bk);
    core_free(pend);
}

/* ---------------------------------------------------------------------- */
/* distances (Knuth's algorithm), pruning, the program */

struct heap_ent {
    int64_t d;
    uint32_t s;
};

static void heap_push(struct heap_ent *h, uint32_t *n, struct heap_ent e) {
    uint32_t i = (*n)++;
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (h[p].d <= e.d) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct heap_ent heap_pop(struct heap_ent *h, uint32_t *n) {
    struct heap_ent top = h[0], last = h[--(*n)];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].d < h[c].d) c++;
        if (h[c].d >= last.d) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

#define DIST_INF INT64_MAX

/* dist[s] for every DFA state (DIST_INF: cannot end). */
static bool distances(struct dfab *b, int64_t *dist) {
    uint32_t n = b->n, nc = b->nc;
    bool ok = false;
    /* distinct byte successors per state, reversed (CSR) */
    uint32_t *roff = core_calloc((size_t)n + 1, sizeof *roff);
    uint32_t *rsrc = NULL;
    uint32_t *seen = core_malloc((size_t)(n ? n : 1) * sizeof *seen);
    uint32_t *coff_t = core_calloc((size_t)n + 1, sizeof *coff_t); /* calls by target */
    uint32_t *coff_s = core_calloc((size_t)n + 1, sizeof *coff_s); /* calls by callee start */
    uint32_t *cby_t = NULL, *cby_s = NULL;
    uint8_t *done = core_calloc(n ? n : 1, 1);
    uint32_t hcap = n + b->n_calls + 1, hn = 0;
    struct heap_ent *heap = NULL;
    if (!roff || !seen || !coff_t || !coff_s || !done) goto out;
    for (uint32_t s = 0; s < n; s++) seen[s] = UINT32_MAX;
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t c = 0; c < nc; c++) {
            int32_t t = b->trans[(size_t)s * nc + c];
            if (t >= 0 && seen[t] != s) {
                seen[t] = s;
                roff[t + 1]++;
            }
        }
    }
    for (uint32_t s = 0; s < n; s++) roff[s + 1] += roff[s];
    rsrc = core_malloc((size_t)(roff[n] ? roff[n] : 1) * sizeof *rsrc);
    uint32_t *fill = core_malloc((size_t)(n ? n : 1) * sizeof *fill);
    if (!rsrc || !fill) {
        core_free(fill);
        goto out;
    }
    memcpy(fill, roff, (size_t)n * sizeof *fill);
    for (uint32_t s = 0; s < n; s++) seen[s] = UINT32_MAX;
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t c = 0; c < nc; c++) {
            int32_t t = b->trans[(size_t)s * nc + c];
            if (t >= 0 && seen[t] != s) {
                seen[t] = s;
                rsrc[fill[t]++] = s;
            }
        }
    }
    core_free(fill);
    for (uint32_t i = 0; i < b->n_calls; i++) {
        coff_t[b->calls[i].to + 1]++;
        uint32_t st = b->cr_start[b->calls[i].crule];
        if (st != CN_NIL) coff_s[st + 1]++;
    }
    for (uint32_t s = 0; s < n; s++) {
        coff_t[s + 1] += coff_t[s];
        coff_s[s + 1] += coff_s[s];
    }
    cby_t = core_malloc((size_t)(b->n_calls ? b->n_calls : 1) * sizeof *cby_t);
    cby_s = core_malloc((size_t)(b->n_calls ? b->n_calls : 1) * sizeof *cby_s);
    uint32_t *ft = core_malloc((size_t)(n ? n : 1) * sizeof *ft);
    uint32_t *fs = core_malloc((size_t)(n ? n : 1) * sizeof *fs);
    if (!cby_t || !cby_s || !ft || !fs) {
        core_free(ft);
        core_free(fs);
        goto out;
    }
    memcpy(ft, coff_t, (size_t)n * sizeof *ft);
    memcpy(fs, coff_s, (size_t)n * sizeof *fs);
    for (uint32_t i = 0; i < b->n_calls; i++) {
        cby_t[ft[b->calls[i].to]++] = i;
        uint32_t st = b->cr_start[b->calls[i].crule];
        if (st != CN_NIL) cby_s[fs[st]++] = i;
    }
    core_free(ft);
    core_free(fs);
    /* each state is pushed at most once per incoming relaxation */
    hcap = roff[n] + 2 * b->n_calls + n + 1;
    heap = core_malloc((size_t)hcap * sizeof *heap);
    if (!heap) goto out;
    for (uint32_t s = 0; s < n; s++) {
        dist[s] = DIST_INF;
        if (b->final[s]) {
            dist[s] = 0;
            heap_push(heap, &hn, (struct heap_ent){0, s});
        }
    }
    while (hn > 0) {
        struct heap_ent e = heap_pop(heap, &hn);
        if (done[e.s] || e.d != dist[e.s]) continue;
        done[e.s] = 1;
        uint32_t x = e.s;
        for (uint32_t i = roff[x]; i < roff[x + 1]; i++) {
            uint32_t p = rsrc[i];
            if (!done[p] && e.d + 1 < dist[p]) {
                dist[p] = e.d + 1;
                heap_push(heap, &hn, (struct heap_ent){dist[p], p});
            }
        }
        /* call edges p --(callee k)--> t: cost dist(start k) + dist(t),
         * relaxed when both ends are settled */
        for (int pass = 0; pass < 2; pass++) {
            const uint32_t *off = pass ? coff_s : coff_t, *by = pass ? cby_s : cby_t;
            for (uint32_t i = off[x]; i < off[x + 1]; i++) {
                const struct dcall *cl = &b->calls[by[i]];
                uint32_t st = b->cr_start[cl->crule];
                if (st == CN_NIL || !done[st] || !done[cl->to]) continue;
                int64_t cand = dist[st] + dist[cl->to];
                if (!done[cl->from] && cand < dist[cl->from]) {
                    dist[cl->from] = cand;
                    heap_push(heap, &hn, (struct heap_ent){cand, cl->from});
                }
            }
        }
    }
    ok = true;
out:
    core_free(roff);
    core_free(rsrc);
    core_free(seen);
    core_free(coff_t);
    core_free(coff_s);
    core_free(cby_t);
    core_free(cby_s);
    core_free(done);
    core_free(heap);
    return ok;
}

static anvil_status make_program(struct dfab *b, const int64_t *dist, struct cn_program **out) {
    uint32_t n = b->n, nc = b->nc;
    const struct cn_nfa *a = b->a;
    uint32_t root = b->cr_start[0];
    uint32_t *map = core_malloc((size_t)(n ? n : 1) * sizeof *map);
    uint32_t *q = core_malloc((size_t)(n ? n : 1) * sizeof *q);
    uint32_t *coff = core_calloc((size_t)n + 1, sizeof *coff);
    struct cn_program *p = core_calloc(1, sizeof *p);
    anvil_status st = ANVIL_ERR_NOMEM;
    if (!map || !q || !coff || !p) goto fail;
    /* calls of each state (b->calls is grouped by source in order) */
    for (uint32_t i = 0; i < b->n_calls; i++) coff[b->calls[i].from + 1]++;
    for (uint32_t s = 0; s < n; s++) coff[s + 1] += coff[s];
    /* reachable live states, breadth first from the root */
    for (uint32_t s = 0; s < n; s++) map[s] = CN_NIL;
    uint32_t qn = 0, kept = 0;
    map[root] = kept++;
    q[qn++] = root;
    for (uint32_t qi = 0; qi < qn; qi++) {
        uint32_t s = q[qi];
        for (uint32_t c = 0; c < nc; c++) {
            int32_t t = b->trans[(size_t)s * nc + c];
            if (t >= 0 && dist[t] != DIST_INF && map[t] == CN_NIL) {
                map[t] = kept++;
                q[qn++] = (uint32_t)t;
            }
        }
        for (uint32_t i = coff[s]; i < coff[s + 1]; i++) {
            const struct dcall *cl = &b->calls[i];
            uint32_t cs = b->cr_start[cl->crule];
            if (cs == CN_NIL || dist[cs] == DIST_INF || dist[cl->to] == DIST_INF) continue;
            if (map[cs] == CN_NIL) {
                map[cs] = kept++;
                q[qn++] = cs;
            }
            if (map[cl->to] == CN_NIL) {
                map[cl->to] = kept++;
                q[qn++] = cl->to;
            }
        }
    }
    p->n_states = (int32_t)kept;
    p->n_classes = (int32_t)nc;
    memcpy(p->class_of, b->cls, 256);
    p->trans = core_malloc((size_t)kept * nc * sizeof *p->trans);
    p->flags = core_calloc(kept, 1);
    p->call_off = core_calloc((size_t)kept + 1, sizeof *p->call_off);
    p->dist = core_malloc((size_t)kept * sizeof *p->dist);
    if (!p->trans || !p->flags || !p->call_off || !p->dist) goto fail;
    uint32_t n_calls = 0;
    for (uint32_t s = 0; s < n; s++) {
        if (map[s] == CN_NIL) continue;
        for (uint32_t i = coff[s]; i < coff[s + 1]; i++) {
            const struct dcall *cl = &b->calls[i];
            uint32_t cs = b->cr_start[cl->crule];
            if (cs != CN_NIL && map[cs] != CN_NIL && map[cl->to] != CN_NIL) n_calls++;
        }
    }
    p->calls = core_malloc((size_t)(n_calls ? n_calls : 1) * sizeof *p->calls);
    if (!p->calls) goto fail;
    /* states in new order (q holds them in BFS = new-id order) */
    uint32_t w = 0;
    for (uint32_t i = 0; i < kept; i++) {
        uint32_t s = q[i];
        uint8_t f = 0;
        for (uint32_t c = 0; c < nc; c++) {
            int32_t t = b->trans[(size_t)s * nc + c];
            int32_t nt = t >= 0 && map[t] != CN_NIL ? (int32_t)map[t] : -1;
            p->trans[(size_t)i * nc + c] = nt;
            if (nt >= 0) f |= CN_SF_BYTES;
        }
        if (b->final[s]) f |= CN_SF_FINAL;
        p->call_off[i] = w;
        for (uint32_t k = coff[s]; k < coff[s + 1]; k++) {
            const struct dcall *cl = &b->calls[k];
            uint32_t cs = b->cr_start[cl->crule];
            if (cs == CN_NIL || map[cs] == CN_NIL || map[cl->to] == CN_NIL) continue;
            p->calls[w].start = (int32_t)map[cs];
            p->calls[w].ret = (int32_t)map[cl->to];
            w++;
            f |= CN_SF_CALLS;
        }
        p->flags[i] = f;
        p->dist[i] = dist[s];
    }
    p->call_off[kept] = w;
    /* loop signatures: bucket k loops on s when every class of its bytes does */
    p->loopsig = core_malloc((size_t)kept * sizeof *p->loopsig);
    if (!p->loopsig) goto fail;
    {
        uint8_t bucket_cls[64][256];
        uint16_t nbc[64] = {0};
        uint8_t seen[64][32];
        memset(seen, 0, sizeof seen);
        for (unsigned byte = 0; byte < 256; byte++) {
            unsigned k = cn_bucket((uint8_t)byte), cl = b->cls[byte];
            if (!(seen[k][cl >> 3] & (1u << (cl & 7)))) {
                seen[k][cl >> 3] |= (uint8_t)(1u << (cl & 7));
                bucket_cls[k][nbc[k]++] = (uint8_t)cl;
            }
        }
        for (uint32_t i = 0; i < kept; i++) {
            const int32_t *row = &p->trans[(size_t)i * nc];
            uint64_t sig = 0;
            for (unsigned k = 0; k < 64; k++) {
                if (!nbc[k]) continue;
                bool loops = true;
                for (unsigned j = 0; j < nbc[k] && loops; j++) loops = row[bucket_cls[k][j]] == (int32_t)i;
                if (loops) sig |= (uint64_t)1 << k;
            }
            p->loopsig[i] = sig;
        }
    }
    p->start = 0; /* the root is first in BFS order */
    p->pure = w == 0;
    p->n_rules = (int32_t)a->n_crules;
    p->n_nfa = (int32_t)a->n_states;
    p->max_stack = b->lim->max_stack;
    p->max_stacks = b->lim->max_stacks;
    if (p->pure) {
        p->cache = core_calloc(1, sizeof *p->cache);
        if (!p->cache) goto fail;
        p->cache->slot = core_calloc(kept, sizeof *p->cache->slot);
        if (!p->cache->slot) goto fail;
        atomic_init(&p->cache->vocab, NULL);
        atomic_init(&p->cache->budget, CN_MASK_CACHE_BYTES);
    }
    p->bytes = sizeof *p + (size_t)kept * nc * sizeof *p->trans + kept +
               ((size_t)kept + 1) * sizeof *p->call_off + (size_t)w * sizeof *p->calls +
               (size_t)kept * sizeof *p->dist + (size_t)kept * sizeof *p->loopsig;
    core_free(map);
    core_free(q);
    core_free(coff);
    *out = p;
    return ANVIL_OK;
fail:
    core_free(map);
    core_free(q);
    core_free(coff);
    cn_program_free(p);
    return st;
}

void cn_program_free(struct cn_program *p) {
    if (!p) return;
    if (p->cache) {
        if (p->cache->slot)
            for (int32_t i = 0; i < p->n_states; i++) core_free(atomic_load(&p->cache->slot[i]));
        core_free(p->cache->slot);
        core_free(p->cache);
    }
    core_free(p->trans);
    core_free(p->flags);
    core_free(p->call_off);
    core_free(p->calls);
    core_free(p->dist);
    core_free(p->loopsig);
    core_free(p);
}

anvil_status dfa_build(const struct cn_ir *g, const struct cn_nfa *a, const struct cn_limits *lim,
                       struct cn_program **out, char *err, size_t err_cap) {
    struct dfab b;
    memset(&b, 0, sizeof b);
    b.g = g;
    b.a = a;
    b.lim = lim;
    int64_t *dist = NULL;
    anvil_status st;
    b.mark = core_calloc(a->n_states ? a->n_states : 1, sizeof *b.mark);
    b.stk = core_malloc((size_t)(a->n_states ? a->n_states : 1) * sizeof *b.stk);
    b.clo = core_malloc((size_t)(a->n_states ? a->n_states : 1) * sizeof *b.clo);
    b.cr_start = core_malloc((size_t)(a->n_crules ? a->n_crules : 1) * sizeof *b.cr_start);
    if (!b.mark || !b.stk || !b.clo || !b.cr_start || !make_classes(&b)) {
        fail(&b, ANVIL_ERR_NOMEM, "out of memory");
        goto done;
    }
    determinize(&b);
    if (b.st != ANVIL_OK) goto done;
    if (b.cr_start[0] == CN_NIL) {
        fail(&b, ANVIL_ERR_INVALID, "the constraint matches no string at all");
        goto done;
    }
    dist = core_malloc((size_t)(b.n ? b.n : 1) * sizeof *dist);
    if (!dist || !distances(&b, dist)) {
        fail(&b, ANVIL_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (dist[b.cr_start[0]] == DIST_INF) {
        fail(&b, ANVIL_ERR_INVALID, "the constraint matches no string at all");
        goto done;
    }
    st = make_program(&b, dist, out);
    if (st != ANVIL_OK) fail(&b, st, "out of memory");
done:
    st = b.st;
    if (st != ANVIL_OK) errmsg_set(err, err_cap, "%s", b.err);
    core_free(dist);
    core_free(b.set_cls_off);
    core_free(b.set_cls);
    core_free(b.key_off);
    core_free(b.key_len);
    core_free(b.keys);
    core_free(b.rule_of);
    core_free(b.final);
    core_free(b.trans);
    core_free(b.hash);
    core_free(b.calls);
    core_free(b.cr_start);
    core_free(b.mark);
    core_free(b.stk);
    core_free(b.clo);
    return st;
}
