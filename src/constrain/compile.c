/*
 * compile.c - from the IR to an NFA per call-rule, with the checks that
 * make the run-time recognizer terminate and never get stuck:
 *
 *   - every referenced rule is defined and the root exists;
 *   - no left recursion: a rule reachable from its own start without
 *     consuming a byte (directly, through other rules, or behind nullable
 *     items) would make the pushdown recognizer's closure grow forever;
 *   - productive rules: the root must derive some string (else the
 *     constraint matches nothing and is an error); unproductive parts are
 *     later pruned with the dead DFA states.
 *
 * Nullable and productive are least fixpoints of Horn clauses over the
 * IR's nodes and rules, solved in linear time with counters (a SEQ waits
 * for all its kids, an ALT for one). Left recursion is a cycle in the
 * "can start with" graph, found by an iterative DFS that reports the rules
 * on the cycle.
 *
 * Inlining. A rule that is not recursive (not in a cycle of references:
 * Tarjan's SCCs) is expanded in place wherever it is used, unless its
 * expansion is big (INLINE_MAX NFA states) or nests deep; those and the
 * recursive rules (and the root) stay "call-rules", each determinized on
 * its own and connected at run time by a stack. A recursion-free grammar
 * becomes a single DFA. Rules are decided callees first (Tarjan emits SCCs
 * in reverse topological order), so a rule's size is known when its
 * callers are sized. Then shrink(): a call-rule whose expanded body is
 * still over CALL_BODY_MAX (a rule used many times, each copy under the
 * inline budget) gets its biggest contributors (size x copies) split off
 * as calls, so that big schemas degrade to a few DFAs and a stack rather
 * than to a state-bound error.
 *
 * Thompson construction builds each node between two given states (no
 * fragment copies); loops always get a fresh state so that no loop is ever
 * entered from an alternative that shares a state with it.
 */
#include <stdio.h>
#include <string.h>

#include "constrain/cn_int.h"

#define INLINE_MAX 65536u  /* NFA states of one inlined expansion */
#define INLINE_DEPTH 64    /* rules inlined inside each other */
#define CALL_BODY_MAX (1u << 17) /* NFA states of one call-rule's expanded body */
#define MIN_SPLIT 256u     /* inlined rules smaller than this are never split off */
#define BUILD_DEPTH 4096   /* recursion of the builders (nesting of the IR) */

/* ---------------------------------------------------------------------- */
/* the variable graph: nodes 0..N-1, rules N..N+R-1 */

struct an {
    const struct cn_ir *g;
    uint32_t N, R, V;
    uint8_t *nullable, *productive; /* (V) */
};

static uint32_t rvar(const struct an *a, uint32_t rule) { return a->N + rule; }

/* Children of variable v in the full reference graph, written to out
 * (capacity: the node's kid count or 1). Returns the count. */
static uint32_t var_kids(const struct an *a, uint32_t v, const uint32_t **list, uint32_t *one) {
    const struct cn_ir *g = a->g;
    if (v >= a->N) {
        uint32_t body = g->rules[v - a->N].body;
        if (body == CN_NIL) return 0;
        *one = body;
        *list = one;
        return 1;
    }
    const struct ir_node *n = &g->nodes[v];
    switch (n->op) {
    case IR_SEQ: case IR_ALT: case IR_SUBSEQ: *list = &g->kids[n->a]; return n->n;
    case IR_REP: *one = n->a; *list = one; return 1;
    case IR_REF: *one = rvar(a, n->a); *list = one; return 1;
    default: return 0;
    }
}

/* Is kid i of v one the Horn clause of v waits for? All kids of SEQ, any
 * of ALT; for SUBSEQ the required members, and the separator when two or
 * more are required. */
static uint32_t subseq_required(const struct cn_ir *g, const struct ir_node *n) {
    uint32_t req = 0;
    for (uint32_t k = 1; k < n->n; k++) req += g->kreq[n->a + k];
    return req;
}

/* A non-empty SUBSEQ of optional members only is an ALT of them (for the
 * Horn clauses: one member suffices). */
static bool subseq_alt(const struct cn_ir *g, const struct ir_node *n) {
    return n->op == IR_SUBSEQ && n->min == 1 && subseq_required(g, n) == 0;
}

static bool horn_needed(const struct an *a, uint32_t v, uint32_t i) {
    if (v >= a->N || a->g->nodes[v].op != IR_SUBSEQ) return true;
    const struct ir_node *n = &a->g->nodes[v];
    if (subseq_alt(a->g, n)) return i > 0;
    if (i > 0) return a->g->kreq[n->a + i] != 0;
    return subseq_required(a->g, n) >= 2;
}

/* Least fixpoint: seeds true; SEQ/SUBSEQ true when all needed kids are,
 * ALT/REP/REF/rule when one is. out[v] = 1 for true. */
static anvil_status horn(const struct an *a, bool productive, uint8_t *out) {
    const struct cn_ir *g = a->g;
    uint32_t V = a->V;
    anvil_status st = ANVIL_ERR_NOMEM;
    uint32_t *need = core_malloc((size_t)V * sizeof *need);
    uint32_t *poff = core_calloc((size_t)V + 1, sizeof *poff);
    uint32_t *par = NULL, *queue = core_malloc((size_t)V * sizeof *queue);
    if (!need || !poff || !queue) goto done;
    /* parents (one entry per occurrence) */
    for (uint32_t v = 0; v < V; v++) {
        const uint32_t *k;
        uint32_t one, nk = var_kids(a, v, &k, &one);
        for (uint32_t i = 0; i < nk; i++)
            if (horn_needed(a, v, i)) poff[k[i] + 1]++;
    }
    for (uint32_t v = 0; v < V; v++) poff[v + 1] += poff[v];
    par = core_malloc((size_t)(poff[V] ? poff[V] : 1) * sizeof *par);
    uint32_t *fill = core_malloc((size_t)V * sizeof *fill);
    if (!par || !fill) {
        core_free(fill);
        goto done;
    }
    memcpy(fill, poff, (size_t)V * sizeof *fill);
    for (uint32_t v = 0; v < V; v++) {
        const uint32_t *k;
        uint32_t one, nk = var_kids(a, v, &k, &one);
        for (uint32_t i = 0; i < nk; i++)
            if (horn_needed(a, v, i)) par[fill[k[i]]++] = v;
    }
    core_free(fill);
    uint32_t qn = 0;
    memset(out, 0, V);
    for (uint32_t v = 0; v < V; v++) {
        need[v] = 1;
        bool seed = false;
        if (v < a->N) {
            const struct ir_node *n = &g->nodes[v];
            switch (n->op) {
            case IR_NONE: need[v] = UINT32_MAX; break;
            case IR_EMPTY: seed = true; break;
            case IR_BYTES:
                if (productive) seed = true;
                else need[v] = UINT32_MAX;
                break;
            case IR_SEQ: need[v] = n->n; break;
            case IR_SUBSEQ:
                if (subseq_alt(g, n)) break; /* need 1, like ALT */
                need[v] = 0;
                for (uint32_t i = 0; i < n->n; i++) need[v] += horn_needed(a, v, i);
                if (need[v] == 0) seed = true;
                break;
            case IR_REP: if (n->min == 0) seed = true; break;
            default: break;
            }
        } else if (g->rules[v - a->N].body == CN_NIL) {
            need[v] = UINT32_MAX;
        }
        if (seed) {
            out[v] = 1;
            queue[qn++] = v;
        }
    }
    for (uint32_t qi = 0; qi < qn; qi++) {
        uint32_t v = queue[qi];
        for (uint32_t e = poff[v]; e < poff[v + 1]; e++) {
            uint32_t p = par[e];
            if (out[p] || need[p] == UINT32_MAX) continue;
            if (--need[p] == 0) {
                out[p] = 1;
                queue[qn++] = p;
            }
        }
    }
    st = ANVIL_OK;
done:
    core_free(need);
    core_free(poff);
    core_free(par);
    core_free(queue);
    return st;
}

/* Kids of v in the "can start with" graph: SEQ kids up to the first
 * non-nullable one, every ALT kid, the REP kid, REF's rule, a rule's body;
 * every kid of a SUBSEQ (an over-approximation: a separator or a later
 * member can only start the match after nullable members, and object
 * members start with their key, so it never reports a false cycle in
 * practice - and it can never miss one). */
static uint32_t first_kids(const struct an *a, uint32_t v, const uint32_t **list, uint32_t *one) {
    uint32_t nk = var_kids(a, v, list, one);
    if (v < a->N && a->g->nodes[v].op == IR_SEQ) {
        uint32_t j = 0;
        while (j < nk && a->nullable[(*list)[j]]) j++;
        return j < nk ? j + 1 : nk;
    }
    return nk;
}

/* Left recursion: a cycle in first_kids. Iterative DFS with colours. */
static anvil_status check_left_rec(const struct an *a, char *err, size_t err_cap) {
    const struct cn_ir *g = a->g;
    uint32_t V = a->V;
    uint8_t *col = core_calloc(V, 1); /* 0 white, 1 on stack, 2 done */
    uint32_t *stk = core_malloc((size_t)V * sizeof *stk);
    uint32_t *it = core_malloc((size_t)V * sizeof *it);
    anvil_status st = ANVIL_OK;
    if (!col || !stk || !it) {
        st = ANVIL_ERR_NOMEM;
        errmsg_set(err, err_cap, "out of memory");
        goto done;
    }
    for (uint32_t r = 0; r < a->R && st == ANVIL_OK; r++) {
        uint32_t s0 = rvar(a, r);
        if (col[s0]) continue;
        uint32_t sp = 0;
        stk[sp] = s0;
        it[sp] = 0;
        col[s0] = 1;
        sp++;
        while (sp > 0) {
            uint32_t v = stk[sp - 1];
            const uint32_t *k;
            uint32_t one, nk = first_kids(a, v, &k, &one);
            if (it[sp - 1] >= nk) {
                col[v] = 2;
                sp--;
                continue;
            }
            uint32_t w = k[it[sp - 1]++];
            if (col[w] == 2) continue;
            if (col[w] == 1) {
                /* the cycle: stack entries from w to the top; name its rules */
                char msg[200];
                size_t used = 0;
                uint32_t from = sp;
                while (from > 0 && stk[from - 1] != w) from--;
                if (from > 0) from--;
                for (uint32_t i = from; i < sp && used + 40 < sizeof msg; i++) {
                    if (stk[i] < a->N) continue;
                    int n = snprintf(msg + used, sizeof msg - used, "%s%.30s", used ? " -> " : "",
                                     g->rules[stk[i] - a->N].name);
                    if (n > 0) used += (size_t)n;
                }
                if (w >= a->N && used + 40 < sizeof msg)
                    snprintf(msg + used, sizeof msg - used, " -> %.30s", g->rules[w - a->N].name);
                errmsg_set(err, err_cap, "left recursion: %s (a rule must consume input before "
                           "it can recur)", msg);
                st = ANVIL_ERR_INVALID;
                break;
            }
            col[w] = 1;
            stk[sp] = w;
            it[sp] = 0;
            sp++;
        }
    }
done:
    core_free(col);
    core_free(stk);
    core_free(it);
    return st;
}

static anvil_status an_init(struct an *a, const struct cn_ir *g, char *err, size_t err_cap) {
    memset(a, 0, sizeof *a);
    a->g = g;
    a->N = g->n_nodes;
    a->R = g->n_rules;
    a->V = a->N + a->R;
    if (g->root == CN_NIL || g->root >= g->n_rules) {
        errmsg_set(err, err_cap, "no root rule");
        return ANVIL_ERR_INVALID;
    }
    for (uint32_t r = 0; r < g->n_rules; r++) {
        if (g->rules[r].body == CN_NIL) {
            errmsg_set(err, err_cap, "undefined rule '%.100s'", g->rules[r].name);
            return ANVIL_ERR_INVALID;
        }
    }
    a->nullable = core_malloc(a->V ? a->V : 1);
    a->productive = core_malloc(a->V ? a->V : 1);
    if (!a->nullable || !a->productive || horn(a, false, a->nullable) != ANVIL_OK ||
        horn(a, true, a->productive) != ANVIL_OK) {
        errmsg_set(err, err_cap, "out of memory");
        return ANVIL_ERR_NOMEM;
    }
    return ANVIL_OK;
}

static void an_free(struct an *a) {
    core_free(a->nullable);
    core_free(a->productive);
}

/* ---------------------------------------------------------------------- */
/* recursive rules: Tarjan's SCCs over the variable graph (iterative) */

/* rec[r] = 1 when rule r is on a cycle; order[] = rules callees first.
 * Only variables reachable from the root are visited. */
static anvil_status find_sccs(const struct an *a, uint8_t *rec, uint32_t *order, uint32_t *n_order) {
    uint32_t V = a->V;
    anvil_status st = ANVIL_ERR_NOMEM;
    uint32_t *idx = core_malloc((size_t)V * sizeof *idx);
    uint32_t *low = core_malloc((size_t)V * sizeof *low);
    uint32_t *cstk = core_malloc((size_t)V * sizeof *cstk); /* call stack */
    uint32_t *it = core_malloc((size_t)V * sizeof *it);
    uint32_t *sstk = core_malloc((size_t)V * sizeof *sstk); /* Tarjan stack */
    uint8_t *on = core_calloc(V, 1);
    if (!idx || !low || !cstk || !it || !sstk || !on) goto done;
    for (uint32_t v = 0; v < V; v++) idx[v] = UINT32_MAX;
    uint32_t next = 0, csp = 0, ssp = 0;
    *n_order = 0;
    uint32_t s0 = rvar(a, a->g->root);
    cstk[csp] = s0;
    it[csp++] = 0;
    idx[s0] = low[s0] = next++;
    sstk[ssp++] = s0;
    on[s0] = 1;
    while (csp > 0) {
        uint32_t v = cstk[csp - 1];
        const uint32_t *k;
        uint32_t one, nk = var_kids(a, v, &k, &one);
        if (it[csp - 1] < nk) {
            uint32_t w = k[it[csp - 1]++];
            if (idx[w] == UINT32_MAX) {
                idx[w] = low[w] = next++;
                sstk[ssp++] = w;
                on[w] = 1;
                cstk[csp] = w;
                it[csp++] = 0;
            } else if (on[w] && idx[w] < low[v]) {
                low[v] = idx[w];
            }
            continue;
        }
        csp--;
        if (csp > 0) {
            uint32_t u = cstk[csp - 1];
            if (low[v] < low[u]) low[u] = low[v];
        }
        if (low[v] == idx[v]) {
            uint32_t size = 0, top = ssp;
            do {
                on[sstk[--ssp]] = 0;
                size++;
            } while (sstk[ssp] != v);
            for (uint32_t i = ssp; i < top; i++) {
                uint32_t w = sstk[i];
                if (w >= a->N) {
                    rec[w - a->N] = size > 1;
                    order[(*n_order)++] = w - a->N;
                }
            }
        }
    }
    st = ANVIL_OK;
done:
    core_free(idx);
    core_free(low);
    core_free(cstk);
    core_free(it);
    core_free(sstk);
    core_free(on);
    return st;
}

/* ---------------------------------------------------------------------- */
/* sizes and inlining */

struct cc {
    const struct cn_ir *g;
    const struct cn_limits *lim;
    uint32_t *crule;   /* (R) call-rule index, CN_NIL when inlined */
    uint64_t *size;    /* (N) expanded NFA states, UINT64_MAX unknown */
    uint16_t *idepth;  /* (N) inlined rules nested under this node */
    bool deep;
    /* NFA under construction */
    struct cn_nfa nfa;
    uint32_t cap_states;
    struct { uint32_t from, to, label; uint8_t kind; } *e;
    uint32_t n_e, cap_e;
    uint32_t max_states, max_edges;
    anvil_status st;
    char err[256];
};

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* NFA states the node expands to (approximately: an upper bound of the
 * states build() makes) with current inlining decisions. */
static uint64_t node_size(struct cc *c, uint32_t id, int depth) {
    if (c->size[id] != UINT64_MAX) return c->size[id];
    if (depth > BUILD_DEPTH) {
        c->deep = true;
        return 1;
    }
    const struct ir_node *n = &c->g->nodes[id];
    uint64_t s = 1;
    uint16_t d = 0;
    switch (n->op) {
    case IR_SEQ:
    case IR_ALT:
        for (uint32_t i = 0; i < n->n; i++) {
            uint32_t k = c->g->kids[n->a + i];
            s = sat_add(s, node_size(c, k, depth + 1));
            if (c->idepth[k] > d) d = c->idepth[k];
        }
        break;
    case IR_SUBSEQ: {
        uint64_t sep = node_size(c, c->g->kids[n->a], depth + 1);
        for (uint32_t i = 1; i < n->n; i++) {
            uint32_t k = c->g->kids[n->a + i];
            s = sat_add(s, sat_add(4, sat_add(sep, node_size(c, k, depth + 1))));
            if (c->idepth[k] > d) d = c->idepth[k];
        }
        if (c->idepth[c->g->kids[n->a]] > d) d = c->idepth[c->g->kids[n->a]];
        break;
    }
    case IR_REP: {
        uint64_t k = node_size(c, n->a, depth + 1);
        uint64_t copies = n->max < 0 ? (uint64_t)n->min + 1 : (uint64_t)n->max;
        s = sat_add(2, sat_mul(k, copies));
        d = c->idepth[n->a];
        break;
    }
    case IR_REF: {
        uint32_t r = n->a;
        if (c->crule[r] == CN_NIL) {
            uint32_t b = c->g->rules[r].body;
            s = node_size(c, b, depth + 1);
            d = (uint16_t)(c->idepth[b] + 1);
        }
        break;
    }
    default: break;
    }
    c->size[id] = s;
    c->idepth[id] = d;
    return s;
}

/* How much each directly inlined rule adds to node id's expansion:
 * contrib[r] += (copies of the reference) * size(r). Rules inlined inside
 * those are part of their size, not counted again. */
static void contributions(struct cc *c, uint32_t id, uint64_t mult, uint64_t *contrib, int depth) {
    if (depth > BUILD_DEPTH) return;
    const struct cn_ir *g = c->g;
    const struct ir_node *n = &g->nodes[id];
    switch (n->op) {
    case IR_SEQ: case IR_ALT: case IR_SUBSEQ:
        for (uint32_t i = 0; i < n->n; i++) contributions(c, g->kids[n->a + i], mult, contrib, depth + 1);
        break;
    case IR_REP: {
        uint64_t copies = n->max < 0 ? (uint64_t)n->min + 1 : (uint64_t)n->max;
        contributions(c, n->a, sat_mul(mult, copies), contrib, depth + 1);
        break;
    }
    case IR_REF:
        if (c->crule[n->a] == CN_NIL)
            contrib[n->a] = sat_add(contrib[n->a], sat_mul(mult, c->size[g->rules[n->a].body]));
        break;
    default: break;
    }
}

/* A call-rule whose body, with its inlined rules expanded, passes
 * CALL_BODY_MAX NFA states gets the inlined rule that adds the most to it
 * (size times copies) turned into a call, until it fits; the new
 * call-rules are checked in turn. A big schema built from a repeated
 * medium sub-schema then runs as a few DFAs and a stack instead of
 * failing the state bound. Rules smaller than MIN_SPLIT stay inlined (a
 * huge enum stays one DFA: only the bounds can refuse it). */
static anvil_status shrink(struct cc *c, const struct an *a, char *err, size_t err_cap) {
    const struct cn_ir *g = c->g;
    uint64_t *contrib = core_malloc((size_t)(a->R ? a->R : 1) * sizeof *contrib);
    if (!contrib) {
        errmsg_set(err, err_cap, "out of memory");
        return ANVIL_ERR_NOMEM;
    }
    for (uint32_t k = 0; k < c->nfa.n_crules; k++) {
        uint32_t body = g->rules[c->nfa.cr_rule[k]].body;
        for (uint32_t iter = 0; iter < a->R; iter++) {
            for (uint32_t v = 0; v < a->N; v++) c->size[v] = UINT64_MAX;
            if (node_size(c, body, 0) <= CALL_BODY_MAX) break;
            memset(contrib, 0, (size_t)a->R * sizeof *contrib);
            contributions(c, body, 1, contrib, 0);
            uint32_t best = CN_NIL;
            for (uint32_t r = 0; r < a->R; r++)
                if (contrib[r] && c->size[g->rules[r].body] >= MIN_SPLIT &&
                    (best == CN_NIL || contrib[r] > contrib[best]))
                    best = r;
            if (best == CN_NIL) break;
            c->crule[best] = c->nfa.n_crules;
            c->nfa.cr_rule[c->nfa.n_crules++] = best;
        }
    }
    core_free(contrib);
    return ANVIL_OK;
}

/* ---------------------------------------------------------------------- */
/* Thompson construction */

static bool cc_failed(struct cc *c) { return c->st != ANVIL_OK; }

static void cc_fail(struct cc *c, anvil_status st, const char *msg) {
    if (c->st != ANVIL_OK) return;
    c->st = st;
    snprintf(c->err, sizeof c->err, "%s", msg);
}

static uint32_t new_state(struct cc *c) {
    if (cc_failed(c)) return 0;
    if (c->nfa.n_states >= c->max_states) {
        char msg[160];
        snprintf(msg, sizeof msg, "constraint too large: the automaton would need more than %u "
                 "NFA states (a long repetition or a huge enum?)", c->max_states);
        cc_fail(c, ANVIL_ERR_UNSUPPORTED, msg);
        return 0;
    }
    return c->nfa.n_states++;
}

static void add_edge(struct cc *c, uint32_t from, uint8_t kind, uint32_t label, uint32_t to) {
    if (cc_failed(c)) return;
    if (c->n_e >= c->max_edges) {
        cc_fail(c, ANVIL_ERR_UNSUPPORTED, "constraint too large: too many NFA transitions");
        return;
    }
    if (c->n_e == c->cap_e) {
        uint32_t nc = c->cap_e ? c->cap_e * 2 : 1024;
        void *q = core_realloc(c->e, (size_t)nc * sizeof *c->e);
        if (!q) {
            cc_fail(c, ANVIL_ERR_NOMEM, "out of memory");
            return;
        }
        c->e = q;
        c->cap_e = nc;
    }
    c->e[c->n_e].from = from;
    c->e[c->n_e].to = to;
    c->e[c->n_e].label = label;
    c->e[c->n_e].kind = kind;
    c->n_e++;
}

/* Add node id's language on paths from -> to. */
static void build(struct cc *c, uint32_t id, uint32_t from, uint32_t to, int depth) {
    if (cc_failed(c)) return;
    if (depth > BUILD_DEPTH) {
        cc_fail(c, ANVIL_ERR_UNSUPPORTED, "constraint nested too deeply");
        return;
    }
    const struct cn_ir *g = c->g;
    const struct ir_node *n = &g->nodes[id];
    switch (n->op) {
    case IR_NONE: return;
    case IR_EMPTY: add_edge(c, from, NFA_EPS, 0, to); return;
    case IR_BYTES: add_edge(c, from, NFA_SET, n->a, to); return;
    case IR_SEQ: {
        uint32_t cur = from;
        for (uint32_t i = 0; i < n->n; i++) {
            uint32_t nxt = i + 1 == n->n ? to : new_state(c);
            build(c, g->kids[n->a + i], cur, nxt, depth + 1);
            cur = nxt;
        }
        return;
    }
    case IR_ALT:
        for (uint32_t i = 0; i < n->n; i++) build(c, g->kids[n->a + i], from, to, depth + 1);
        return;
    case IR_REP: {
        uint32_t cur = from;
        for (int32_t i = 0; i < n->min && !cc_failed(c); i++) {
            uint32_t nxt = new_state(c);
            build(c, n->a, cur, nxt, depth + 1);
            cur = nxt;
        }
        if (n->max < 0) {
            uint32_t m = new_state(c); /* fresh loop state */
            add_edge(c, cur, NFA_EPS, 0, m);
            build(c, n->a, m, m, depth + 1);
            add_edge(c, m, NFA_EPS, 0, to);
            return;
        }
        for (int32_t i = n->min; i < n->max && !cc_failed(c); i++) {
            add_edge(c, cur, NFA_EPS, 0, to);
            uint32_t nxt = i + 1 == n->max ? to : new_state(c);
            build(c, n->a, cur, nxt, depth + 1);
            cur = nxt;
        }
        if (n->min == n->max) add_edge(c, cur, NFA_EPS, 0, to);
        return;
    }
    case IR_SUBSEQ: {
        /* E_i: no member chosen yet; F_i: some member chosen (a separator
         * comes before the next). Both enter J_i (E_i directly, F_i through
         * the separator), and member i runs once, from J_i to F_{i+1}.
         * E_1 = from; E/F_{k+1} lead to `to`. */
        uint32_t k = n->n - 1, sep = g->kids[n->a];
        uint32_t e = from, f = 0;
        bool all_opt = true;
        for (uint32_t i = 1; i <= k && !cc_failed(c); i++) {
            uint32_t m = g->kids[n->a + i];
            bool req = g->kreq[n->a + i] != 0;
            all_opt &= !req;
            uint32_t e2 = new_state(c), f2 = new_state(c), j = new_state(c);
            add_edge(c, e, NFA_EPS, 0, j);
            if (i >= 2) build(c, sep, f, j, depth + 1);
            build(c, m, j, f2, depth + 1);
            if (!req) {
                add_edge(c, e, NFA_EPS, 0, e2);
                if (i >= 2) add_edge(c, f, NFA_EPS, 0, f2);
            }
            e = e2;
            f = f2;
        }
        add_edge(c, f, NFA_EPS, 0, to);
        if (all_opt && n->min == 0) add_edge(c, e, NFA_EPS, 0, to);
        return;
    }
    case IR_REF: {
        uint32_t r = n->a;
        if (c->crule[r] != CN_NIL)
            add_edge(c, from, NFA_CALL, c->crule[r], to);
        else
            build(c, g->rules[r].body, from, to, depth + 1);
        return;
    }
    }
}

static void nfa_free(struct cn_nfa *a) {
    core_free(a->off);
    core_free(a->out);
    core_free(a->cr_start);
    core_free(a->cr_final);
    core_free(a->cr_rule);
    memset(a, 0, sizeof *a);
}

/* edges -> CSR */
static void finish_nfa(struct cc *c) {
    if (cc_failed(c)) return;
    struct cn_nfa *a = &c->nfa;
    a->off = core_calloc((size_t)a->n_states + 1, sizeof *a->off);
    a->out = core_malloc((size_t)(c->n_e ? c->n_e : 1) * sizeof *a->out);
    if (!a->off || !a->out) {
        cc_fail(c, ANVIL_ERR_NOMEM, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < c->n_e; i++) a->off[c->e[i].from + 1]++;
    for (uint32_t s = 0; s < a->n_states; s++) a->off[s + 1] += a->off[s];
    uint32_t *fill = core_malloc((size_t)(a->n_states ? a->n_states : 1) * sizeof *fill);
    if (!fill) {
        cc_fail(c, ANVIL_ERR_NOMEM, "out of memory");
        return;
    }
    memcpy(fill, a->off, (size_t)a->n_states * sizeof *fill);
    for (uint32_t i = 0; i < c->n_e; i++) {
        struct nfa_edge *e = &a->out[fill[c->e[i].from]++];
        e->to = c->e[i].to;
        e->label = c->e[i].label;
        e->kind = c->e[i].kind;
    }
    a->n_edges = c->n_e;
    core_free(fill);
}

anvil_status cn_compile_ir(const struct cn_ir *g, const struct cn_options *opt,
                           struct cn_program **out, char *err, size_t err_cap) {
    struct cn_limits lim = cn_limits_resolve(opt ? &opt->limits : NULL);
    struct an a;
    struct cc c;
    memset(&c, 0, sizeof c);
    uint8_t *rec = NULL;
    uint32_t *order = NULL;
    anvil_status st = an_init(&a, g, err, err_cap);
    if (st != ANVIL_OK) goto done;
    st = check_left_rec(&a, err, err_cap);
    if (st != ANVIL_OK) goto done;
    if (!a.productive[rvar(&a, g->root)]) {
        errmsg_set(err, err_cap, "the constraint matches no string at all");
        st = ANVIL_ERR_INVALID;
        goto done;
    }
    rec = core_calloc(a.R ? a.R : 1, 1);
    order = core_malloc((size_t)(a.R ? a.R : 1) * sizeof *order);
    c.g = g;
    c.lim = &lim;
    c.crule = core_malloc((size_t)(a.R ? a.R : 1) * sizeof *c.crule);
    c.size = core_malloc((size_t)(a.N ? a.N : 1) * sizeof *c.size);
    c.idepth = core_calloc(a.N ? a.N : 1, sizeof *c.idepth);
    c.nfa.cr_start = core_malloc((size_t)(a.R ? a.R : 1) * sizeof(uint32_t));
    c.nfa.cr_final = core_malloc((size_t)(a.R ? a.R : 1) * sizeof(uint32_t));
    c.nfa.cr_rule = core_malloc((size_t)(a.R ? a.R : 1) * sizeof(uint32_t));
    if (!rec || !order || !c.crule || !c.size || !c.idepth || !c.nfa.cr_start ||
        !c.nfa.cr_final || !c.nfa.cr_rule) {
        st = ANVIL_ERR_NOMEM;
        errmsg_set(err, err_cap, "out of memory");
        goto done;
    }
    uint32_t n_order = 0;
    st = find_sccs(&a, rec, order, &n_order);
    if (st != ANVIL_OK) {
        errmsg_set(err, err_cap, "out of memory");
        goto done;
    }
    for (uint32_t r = 0; r < a.R; r++) c.crule[r] = CN_NIL;
    for (uint32_t v = 0; v < a.N; v++) c.size[v] = UINT64_MAX;
    /* decide callees first; the root gets call-rule 0 */
    c.nfa.n_crules = 1;
    c.nfa.cr_rule[0] = g->root;
    for (uint32_t i = 0; i < n_order; i++) {
        uint32_t r = order[i];
        if (r == g->root) {
            c.crule[r] = 0;
            continue;
        }
        bool call = rec[r] != 0;
        if (!call) {
            uint32_t b = g->rules[r].body;
            uint64_t s = node_size(&c, b, 0);
            if (c.deep) {
                errmsg_set(err, err_cap, "constraint nested too deeply");
                st = ANVIL_ERR_UNSUPPORTED;
                goto done;
            }
            call = s > INLINE_MAX || c.idepth[b] >= INLINE_DEPTH;
        }
        if (call) {
            c.crule[r] = c.nfa.n_crules;
            c.nfa.cr_rule[c.nfa.n_crules++] = r;
        }
    }
    st = shrink(&c, &a, err, err_cap);
    if (st != ANVIL_OK) goto done;
    /* NFA: one start/final pair per call-rule */
    c.max_states = (uint32_t)lim.max_nfa_states;
    c.max_edges = c.max_states > UINT32_MAX / 4 ? UINT32_MAX : c.max_states * 4;
    for (uint32_t k = 0; k < c.nfa.n_crules && !cc_failed(&c); k++) {
        c.nfa.cr_start[k] = new_state(&c);
        c.nfa.cr_final[k] = new_state(&c);
        build(&c, g->rules[c.nfa.cr_rule[k]].body, c.nfa.cr_start[k], c.nfa.cr_final[k], 0);
    }
    finish_nfa(&c);
    if (cc_failed(&c)) {
        st = c.st;
        errmsg_set(err, err_cap, "%s", c.err);
        goto done;
    }
    st = dfa_build(g, &c.nfa, &lim, out, err, err_cap);
done:
    an_free(&a);
    core_free(rec);
    core_free(order);
    core_free(c.crule);
    core_free(c.size);
    core_free(c.idepth);
    core_free(c.e);
    nfa_free(&c.nfa);
    return st;
}
