/*
 * ref.c - the reference recognizer: an Earley parser run directly on the
 * IR, the slow and obviously correct twin of compile.c + dfa.c + the
 * pushdown runtime. Tests feed both the same bytes and compare "still a
 * prefix of the language" and "a complete match" at every byte.
 *
 * It shares nothing with the fast path but the IR: no inlining, no NFA, no
 * DFA, no byte classes, no stacks. The IR becomes plain BNF (one
 * nonterminal per node and per rule; REP{m,n} unrolled into a chain of
 * optional copies), productions that use an unproductive nonterminal are
 * dropped (after that every Earley item can be completed, so "the current
 * set is not empty" is exactly "the input is a viable prefix"), and nullable
 * nonterminals are handled at prediction time (Aycock and Horspool, 2002).
 * Earley handles any context-free grammar, left recursion included; it is
 * cubic and keeps every set, which is fine for test inputs.
 */
#include <string.h>

#include "constrain/cn_int.h"

struct ref_item {
    uint32_t prod, dot, origin;
};

struct cn_ref {
    const struct cn_ir *g;
    /* BNF: symbols >= 0 are nonterminals, < 0 terminals -(set id + 1) */
    uint32_t n_nt;
    uint32_t n_prod;
    uint32_t *prod_lhs, *prod_off; /* (n_prod), (n_prod + 1) */
    int32_t *syms;
    uint32_t *nt_off, *nt_prods; /* productions of each nonterminal (CSR) */
    uint8_t *nullable;
    uint32_t start; /* S' */
    /* chart */
    struct ref_item *items;
    size_t n_items, cap_items;
    size_t *set_off; /* set i = items[set_off[i] .. set_off[i+1]) */
    size_t n_sets, cap_sets;
    bool dead;
    bool oom;
    /* per-set dedup */
    uint64_t *hkeys;
    uint32_t cap_h;
};

/* ---------------------------------------------------------------------- */
/* IR -> BNF */

struct bnf {
    uint32_t *lhs, *off;
    int32_t *syms;
    size_t n_prod, cap_prod, n_syms, cap_syms;
    uint32_t n_nt;
    bool oom;
};

static void bnf_prod(struct bnf *b, uint32_t lhs, const int32_t *rhs, uint32_t n) {
    if (b->oom) return;
    if (b->n_prod + 2 > b->cap_prod) {
        size_t nc = b->cap_prod ? b->cap_prod * 2 : 256;
        uint32_t *l = core_realloc(b->lhs, nc * sizeof *l);
        if (l) b->lhs = l;
        uint32_t *o = core_realloc(b->off, (nc + 1) * sizeof *o);
        if (o) b->off = o;
        if (!l || !o) {
            b->oom = true;
            return;
        }
        b->cap_prod = nc;
    }
    if (b->n_syms + n > b->cap_syms) {
        size_t nc = b->cap_syms ? b->cap_syms * 2 : 1024;
        while (nc < b->n_syms + n) nc *= 2;
        int32_t *s = core_realloc(b->syms, nc * sizeof *s);
        if (!s) {
            b->oom = true;
            return;
        }
        b->syms = s;
        b->cap_syms = nc;
    }
    if (b->n_prod == 0) b->off[0] = 0;
    b->lhs[b->n_prod] = lhs;
    if (n) memcpy(b->syms + b->n_syms, rhs, n * sizeof *rhs);
    b->n_syms += n;
    b->off[++b->n_prod] = (uint32_t)b->n_syms;
}

static uint32_t bnf_new_nt(struct bnf *b) { return b->n_nt++; }

anvil_status cn_ref_init(const struct cn_ir *g, struct cn_ref **out) {
    struct bnf b = {0};
    uint32_t N = g->n_nodes, R = g->n_rules;
    b.n_nt = N + R;
    int32_t *rhs = NULL;
    size_t cap_rhs = 0;
    for (uint32_t id = 0; id < N && !b.oom; id++) {
        const struct ir_node *n = &g->nodes[id];
        switch (n->op) {
        case IR_NONE: break;
        case IR_EMPTY: bnf_prod(&b, id, NULL, 0); break;
        case IR_BYTES: {
            int32_t t = -(int32_t)n->a - 1;
            bnf_prod(&b, id, &t, 1);
            break;
        }
        case IR_SEQ:
            if (cap_rhs < n->n) {
                core_free(rhs);
                rhs = core_malloc(n->n * sizeof *rhs);
                cap_rhs = rhs ? n->n : 0;
                if (!rhs) {
                    b.oom = true;
                    break;
                }
            }
            for (uint32_t i = 0; i < n->n; i++) rhs[i] = (int32_t)g->kids[n->a + i];
            bnf_prod(&b, id, rhs, n->n);
            break;
        case IR_ALT:
            for (uint32_t i = 0; i < n->n; i++) {
                int32_t k = (int32_t)g->kids[n->a + i];
                bnf_prod(&b, id, &k, 1);
            }
            break;
        case IR_REP: {
            /* id -> x^min T;  T = ε | x T (unbounded)  or a chain of max-min optionals */
            uint32_t need = (uint32_t)n->min + 1;
            if (cap_rhs < need) {
                core_free(rhs);
                rhs = core_malloc(need * sizeof *rhs);
                cap_rhs = rhs ? need : 0;
                if (!rhs) {
                    b.oom = true;
                    break;
                }
            }
            for (int32_t i = 0; i < n->min; i++) rhs[i] = (int32_t)n->a;
            uint32_t tail = bnf_new_nt(&b);
            rhs[n->min] = (int32_t)tail;
            bnf_prod(&b, id, rhs, need);
            if (n->max < 0) {
                int32_t loop[2] = {(int32_t)n->a, (int32_t)tail};
                bnf_prod(&b, tail, NULL, 0);
                bnf_prod(&b, tail, loop, 2);
            } else {
                uint32_t cur = tail;
                for (int32_t k = n->max - n->min; k > 0 && !b.oom; k--) {
                    bnf_prod(&b, cur, NULL, 0);
                    if (k == 1) {
                        int32_t one = (int32_t)n->a;
                        bnf_prod(&b, cur, &one, 1);
                    } else {
                        uint32_t nxt = bnf_new_nt(&b);
                        int32_t two[2] = {(int32_t)n->a, (int32_t)nxt};
                        bnf_prod(&b, cur, two, 2);
                        cur = nxt;
                    }
                }
                if (n->max == n->min) bnf_prod(&b, cur, NULL, 0);
            }
            break;
        }
        case IR_REF: {
            int32_t r = (int32_t)(N + n->a);
            bnf_prod(&b, id, &r, 1);
            break;
        }
        case IR_SUBSEQ: {
            /* E_i -> m_i F_{i+1} | E_{i+1} (optional m_i);
             * F_i -> sep m_i F_{i+1} | F_{i+1} (optional); E_{k+1}, F_{k+1} -> ε */
            uint32_t k = n->n - 1;
            int32_t sep = (int32_t)g->kids[n->a];
            uint32_t e = bnf_new_nt(&b), f = 0;
            int32_t e1 = (int32_t)e;
            bnf_prod(&b, id, &e1, 1);
            for (uint32_t i = 1; i <= k; i++) {
                int32_t m = (int32_t)g->kids[n->a + i];
                bool req = g->kreq[n->a + i] != 0;
                uint32_t e2 = bnf_new_nt(&b), f2 = bnf_new_nt(&b);
                int32_t r1[2] = {m, (int32_t)f2}, sk = (int32_t)e2;
                bnf_prod(&b, e, r1, 2);
                if (!req) bnf_prod(&b, e, &sk, 1);
                if (i >= 2) {
                    int32_t r2[3] = {sep, m, (int32_t)f2}, fs = (int32_t)f2;
                    bnf_prod(&b, f, r2, 3);
                    if (!req) bnf_prod(&b, f, &fs, 1);
                }
                e = e2;
                f = f2;
            }
            if (n->min == 0) bnf_prod(&b, e, NULL, 0); /* nothing chosen */
            bnf_prod(&b, f, NULL, 0);
            break;
        }
        }
    }
    core_free(rhs);
    for (uint32_t r = 0; r < R && !b.oom; r++) {
        if (g->rules[r].body == CN_NIL) continue;
        int32_t body = (int32_t)g->rules[r].body;
        bnf_prod(&b, N + r, &body, 1);
    }
    uint32_t start = bnf_new_nt(&b);
    if (g->root != CN_NIL) {
        int32_t root = (int32_t)(N + g->root);
        bnf_prod(&b, start, &root, 1);
    }
    struct cn_ref *r = core_calloc(1, sizeof *r);
    uint8_t *prod_ok = NULL, *productive = NULL;
    if (b.oom || !r) goto oom;
    r->g = g;
    r->n_nt = b.n_nt;
    r->start = start;
    /* productive: fixpoint (test grammars are small) */
    productive = core_calloc(b.n_nt, 1);
    prod_ok = core_calloc(b.n_prod ? b.n_prod : 1, 1);
    r->nullable = core_calloc(b.n_nt, 1);
    if (!productive || !prod_ok || !r->nullable) goto oom;
    for (bool ch = true; ch;) {
        ch = false;
        for (size_t p = 0; p < b.n_prod; p++) {
            if (productive[b.lhs[p]]) continue;
            bool ok = true;
            for (uint32_t k = b.off[p]; k < b.off[p + 1] && ok; k++)
                ok = b.syms[k] < 0 || productive[b.syms[k]];
            if (ok) productive[b.lhs[p]] = 1, ch = true;
        }
    }
    size_t kept = 0;
    for (size_t p = 0; p < b.n_prod; p++) {
        bool ok = true;
        for (uint32_t k = b.off[p]; k < b.off[p + 1] && ok; k++)
            ok = b.syms[k] < 0 || productive[b.syms[k]];
        prod_ok[p] = ok;
        kept += ok;
    }
    for (bool ch = true; ch;) {
        ch = false;
        for (size_t p = 0; p < b.n_prod; p++) {
            if (!prod_ok[p] || r->nullable[b.lhs[p]]) continue;
            bool ok = true;
            for (uint32_t k = b.off[p]; k < b.off[p + 1] && ok; k++)
                ok = b.syms[k] >= 0 && r->nullable[b.syms[k]];
            if (ok) r->nullable[b.lhs[p]] = 1, ch = true;
        }
    }
    /* kept productions, and each nonterminal's list */
    r->n_prod = (uint32_t)kept;
    r->prod_lhs = core_malloc((kept ? kept : 1) * sizeof *r->prod_lhs);
    r->prod_off = core_malloc((kept + 1) * sizeof *r->prod_off);
    r->syms = core_malloc((b.n_syms ? b.n_syms : 1) * sizeof *r->syms);
    r->nt_off = core_calloc((size_t)b.n_nt + 1, sizeof *r->nt_off);
    r->nt_prods = core_malloc((kept ? kept : 1) * sizeof *r->nt_prods);
    if (!r->prod_lhs || !r->prod_off || !r->syms || !r->nt_off || !r->nt_prods) goto oom;
    uint32_t w = 0, ws = 0;
    r->prod_off[0] = 0;
    for (size_t p = 0; p < b.n_prod; p++) {
        if (!prod_ok[p]) continue;
        r->prod_lhs[w] = b.lhs[p];
        for (uint32_t k = b.off[p]; k < b.off[p + 1]; k++) r->syms[ws++] = b.syms[k];
        r->prod_off[++w] = ws;
        r->nt_off[b.lhs[p] + 1]++;
    }
    for (uint32_t nt = 0; nt < b.n_nt; nt++) r->nt_off[nt + 1] += r->nt_off[nt];
    uint32_t *fill = core_malloc((size_t)b.n_nt * sizeof *fill);
    if (!fill) goto oom;
    memcpy(fill, r->nt_off, (size_t)b.n_nt * sizeof *fill);
    for (uint32_t p = 0; p < w; p++) r->nt_prods[fill[r->prod_lhs[p]]++] = p;
    core_free(fill);
    core_free(productive);
    core_free(prod_ok);
    core_free(b.lhs);
    core_free(b.off);
    core_free(b.syms);
    cn_ref_reset(r);
    if (r->oom) {
        cn_ref_free(r);
        return ANVIL_ERR_NOMEM;
    }
    *out = r;
    return ANVIL_OK;
oom:
    core_free(productive);
    core_free(prod_ok);
    core_free(b.lhs);
    core_free(b.off);
    core_free(b.syms);
    cn_ref_free(r);
    return ANVIL_ERR_NOMEM;
}

void cn_ref_free(struct cn_ref *r) {
    if (!r) return;
    core_free(r->prod_lhs);
    core_free(r->prod_off);
    core_free(r->syms);
    core_free(r->nt_off);
    core_free(r->nt_prods);
    core_free(r->nullable);
    core_free(r->items);
    core_free(r->set_off);
    core_free(r->hkeys);
    core_free(r);
}

/* ---------------------------------------------------------------------- */
/* the chart */

static uint64_t item_key(struct ref_item it) {
    return ((uint64_t)it.prod << 40) ^ ((uint64_t)it.dot << 20) ^ it.origin ^
           ((uint64_t)it.origin << 52);
}

/* Add it to the current (last) set unless present. */
static void add_item(struct cn_ref *r, struct ref_item it) {
    if (r->oom) return;
    size_t lo = r->set_off[r->n_sets - 1];
    size_t n = r->n_items - lo;
    if ((n + 1) * 2 > r->cap_h) {
        uint32_t nc = r->cap_h ? r->cap_h * 2 : 256;
        uint64_t *h = core_malloc((size_t)nc * sizeof *h);
        if (!h) {
            r->oom = true;
            return;
        }
        for (uint32_t i = 0; i < nc; i++) h[i] = UINT64_MAX;
        core_free(r->hkeys);
        r->hkeys = h;
        r->cap_h = nc;
        for (size_t i = lo; i < r->n_items; i++) {
            uint64_t k = item_key(r->items[i]);
            uint32_t j = (uint32_t)(k * 0x9e3779b97f4a7c15ull >> 40) & (nc - 1);
            while (h[j] != UINT64_MAX) j = (j + 1) & (nc - 1);
            h[j] = i;
        }
    }
    uint64_t k = item_key(it);
    uint32_t j = (uint32_t)(k * 0x9e3779b97f4a7c15ull >> 40) & (r->cap_h - 1);
    while (r->hkeys[j] != UINT64_MAX) {
        struct ref_item *o = &r->items[r->hkeys[j]];
        if (o->prod == it.prod && o->dot == it.dot && o->origin == it.origin) return;
        j = (j + 1) & (r->cap_h - 1);
    }
    if (r->n_items == r->cap_items) {
        size_t nc = r->cap_items ? r->cap_items * 2 : 1024;
        struct ref_item *q = core_realloc(r->items, nc * sizeof *q);
        if (!q) {
            r->oom = true;
            return;
        }
        r->items = q;
        r->cap_items = nc;
    }
    r->hkeys[j] = r->n_items;
    r->items[r->n_items++] = it;
}

static void new_set(struct cn_ref *r) {
    if (r->n_sets + 2 > r->cap_sets) {
        size_t nc = r->cap_sets ? r->cap_sets * 2 : 64;
        size_t *q = core_realloc(r->set_off, nc * sizeof *q);
        if (!q) {
            r->oom = true;
            return;
        }
        r->set_off = q;
        r->cap_sets = nc;
    }
    r->set_off[r->n_sets] = r->n_items;
    r->n_sets++;
    r->set_off[r->n_sets] = r->n_items;
    for (uint32_t i = 0; i < r->cap_h; i++) r->hkeys[i] = UINT64_MAX;
}

/* predict and complete the current set to a fixpoint */
static void close_set(struct cn_ref *r) {
    uint32_t cur = (uint32_t)(r->n_sets - 1);
    for (size_t i = r->set_off[cur]; i < r->n_items && !r->oom; i++) {
        struct ref_item it = r->items[i];
        uint32_t len = r->prod_off[it.prod + 1] - r->prod_off[it.prod];
        if (it.dot == len) {
            uint32_t lhs = r->prod_lhs[it.prod];
            size_t lo = r->set_off[it.origin];
            size_t hi = it.origin == cur ? r->n_items : r->set_off[it.origin + 1];
            for (size_t j = lo; j < hi && !r->oom; j++) {
                struct ref_item w = r->items[j];
                uint32_t wl = r->prod_off[w.prod + 1] - r->prod_off[w.prod];
                if (w.dot < wl && r->syms[r->prod_off[w.prod] + w.dot] == (int32_t)lhs)
                    add_item(r, (struct ref_item){w.prod, w.dot + 1, w.origin});
                if (it.origin == cur) hi = r->n_items;
            }
            continue;
        }
        int32_t s = r->syms[r->prod_off[it.prod] + it.dot];
        if (s < 0) continue;
        for (uint32_t k = r->nt_off[s]; k < r->nt_off[s + 1]; k++)
            add_item(r, (struct ref_item){r->nt_prods[k], 0, cur});
        if (r->nullable[s]) add_item(r, (struct ref_item){it.prod, it.dot + 1, it.origin});
    }
    r->set_off[r->n_sets] = r->n_items;
}

void cn_ref_reset(struct cn_ref *r) {
    r->n_items = 0;
    r->n_sets = 0;
    r->dead = false;
    new_set(r);
    for (uint32_t k = r->nt_off[r->start]; k < r->nt_off[r->start + 1]; k++)
        add_item(r, (struct ref_item){r->nt_prods[k], 0, 0});
    close_set(r);
    if (r->set_off[r->n_sets] == r->set_off[r->n_sets - 1]) r->dead = true;
}

bool cn_ref_feed(struct cn_ref *r, const uint8_t *b, size_t n) {
    const struct cn_ir *g = r->g;
    for (size_t i = 0; i < n && !r->dead && !r->oom; i++) {
        uint32_t prev = (uint32_t)(r->n_sets - 1);
        size_t lo = r->set_off[prev], hi = r->set_off[prev + 1];
        new_set(r);
        for (size_t j = lo; j < hi && !r->oom; j++) {
            struct ref_item it = r->items[j];
            uint32_t len = r->prod_off[it.prod + 1] - r->prod_off[it.prod];
            if (it.dot == len) continue;
            int32_t s = r->syms[r->prod_off[it.prod] + it.dot];
            if (s < 0 && bset_has(&g->sets[-s - 1], b[i]))
                add_item(r, (struct ref_item){it.prod, it.dot + 1, it.origin});
        }
        close_set(r);
        if (r->set_off[r->n_sets] == r->set_off[r->n_sets - 1]) r->dead = true;
    }
    return !r->dead && !r->oom;
}

bool cn_ref_accepts(const struct cn_ref *r) {
    if (r->dead || r->oom) return false;
    uint32_t cur = (uint32_t)(r->n_sets - 1);
    for (size_t i = r->set_off[cur]; i < r->set_off[cur + 1]; i++) {
        struct ref_item it = r->items[i];
        if (r->prod_lhs[it.prod] == r->start && it.origin == 0 &&
            it.dot == r->prod_off[it.prod + 1] - r->prod_off[it.prod])
            return true;
    }
    return false;
}

void cn_ref_pop(struct cn_ref *r) {
    if (r->n_sets <= 1) return;
    r->n_sets--;
    r->n_items = r->set_off[r->n_sets];
    r->set_off[r->n_sets] = r->n_items;
    r->dead = r->set_off[r->n_sets] == r->set_off[r->n_sets - 1];
}

size_t cn_ref_len(const struct cn_ref *r) { return r->n_sets - 1; }
