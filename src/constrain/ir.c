/*
 * ir.c - the grammar IR (see cn_int.h): builder with sticky errors, byte
 * sets deduplicated by hash, code-point sets and their UTF-8 encoding as
 * byte-set sequences, and a GBNF-like dump for debugging.
 *
 * UTF-8 ranges: a code-point range is split until each piece encodes to
 * sequences of one length whose bytes vary independently (the classic
 * construction of RE2 and Rust's utf8-ranges): split at the encoding-length
 * boundaries 0x7F/0x7FF/0xFFFF, drop the surrogates D800-DFFF, then split
 * wherever a lower 6-bit group does not span its full range. Each piece is
 * then a sequence of byte ranges. Strict UTF-8 falls out: no overlongs (the
 * length boundaries), no surrogates, nothing above 0x10FFFF.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cn_int.h"
#include "core/sbuf.h"

/* ---------------------------------------------------------------------- */
/* lifetime and errors */

anvil_status ir_init(struct cn_ir **out, uint32_t max_nodes) {
    struct cn_ir *g = core_calloc(1, sizeof *g);
    if (!g) return ANVIL_ERR_NOMEM;
    g->root = CN_NIL;
    g->max_nodes = max_nodes ? max_nodes : CN_DEF_MAX_NFA;
    *out = g;
    return ANVIL_OK;
}

void ir_free(struct cn_ir *g) {
    if (!g) return;
    for (uint32_t i = 0; i < g->n_rules; i++) core_free(g->rules[i].name);
    core_free(g->rules);
    core_free(g->nodes);
    core_free(g->kids);
    core_free(g->kreq);
    core_free(g->sets);
    core_free(g->set_hash);
    core_free(g);
}

uint32_t ir_fail(struct cn_ir *g, anvil_status st, const char *fmt, ...) {
    if (g->st != ANVIL_OK) return CN_NIL;
    g->st = st;
    if (st == ANVIL_ERR_NOMEM && !fmt) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return CN_NIL;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return CN_NIL;
}

static uint32_t oom(struct cn_ir *g) { return ir_fail(g, ANVIL_ERR_NOMEM, NULL); }

static uint32_t new_node(struct cn_ir *g, uint8_t op) {
    if (!ir_ok(g)) return CN_NIL;
    if (g->n_nodes + g->n_kids >= g->max_nodes)
        return ir_fail(g, ANVIL_ERR_UNSUPPORTED,
                       "constraint too large: more than %u grammar nodes", g->max_nodes);
    if (!cn_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return oom(g);
    struct ir_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    return g->n_nodes++;
}

/* ---------------------------------------------------------------------- */
/* leaves */

uint32_t ir_none(struct cn_ir *g) { return new_node(g, IR_NONE); }
uint32_t ir_empty(struct cn_ir *g) { return new_node(g, IR_EMPTY); }

static uint64_t set_hash(const struct cn_bset *s) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4; i++) {
        h ^= s->w[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

/* id of set s in the table, adding it when new; CN_NIL on OOM */
static uint32_t set_id(struct cn_ir *g, const struct cn_bset *s) {
    if ((uint64_t)(g->n_sets + 1) * 2 > g->cap_hash) {
        uint32_t nc = g->cap_hash ? g->cap_hash * 2 : 64;
        uint32_t *h = core_malloc((size_t)nc * sizeof *h);
        if (!h) return oom(g);
        for (uint32_t i = 0; i < nc; i++) h[i] = CN_NIL;
        for (uint32_t i = 0; i < g->n_sets; i++) {
            uint32_t j = (uint32_t)set_hash(&g->sets[i]) & (nc - 1);
            while (h[j] != CN_NIL) j = (j + 1) & (nc - 1);
            h[j] = i;
        }
        core_free(g->set_hash);
        g->set_hash = h;
        g->cap_hash = nc;
    }
    uint32_t j = (uint32_t)set_hash(s) & (g->cap_hash - 1);
    while (g->set_hash[j] != CN_NIL) {
        if (!memcmp(&g->sets[g->set_hash[j]], s, sizeof *s)) return g->set_hash[j];
        j = (j + 1) & (g->cap_hash - 1);
    }
    if (!cn_grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1, sizeof *g->sets)) return oom(g);
    g->sets[g->n_sets] = *s;
    g->set_hash[j] = g->n_sets;
    return g->n_sets++;
}

uint32_t ir_bytes(struct cn_ir *g, const struct cn_bset *s) {
    if (!ir_ok(g)) return CN_NIL;
    if (bset_empty(s)) return ir_none(g);
    uint32_t id = set_id(g, s);
    if (id == CN_NIL) return CN_NIL;
    uint32_t n = new_node(g, IR_BYTES);
    if (n != CN_NIL) g->nodes[n].a = id;
    return n;
}

uint32_t ir_byte_range(struct cn_ir *g, uint8_t lo, uint8_t hi) {
    struct cn_bset s = {{0}};
    if (lo <= hi) bset_add_range(&s, lo, hi);
    return ir_bytes(g, &s);
}

uint32_t ir_byte(struct cn_ir *g, uint8_t b) { return ir_byte_range(g, b, b); }

uint32_t ir_lit(struct cn_ir *g, const char *s, size_t n) {
    if (!ir_ok(g)) return CN_NIL;
    if (n == 0) return ir_empty(g);
    if (n == 1) return ir_byte(g, (uint8_t)s[0]);
    struct ir_list l = {0};
    for (size_t i = 0; i < n; i++) ir_list_push(g, &l, ir_byte(g, (uint8_t)s[i]));
    uint32_t r = ir_seq(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

uint32_t ir_str(struct cn_ir *g, const char *s) { return ir_lit(g, s, strlen(s)); }

/* ---------------------------------------------------------------------- */
/* composites */

static bool grow_kids(struct cn_ir *g, uint32_t need) {
    uint32_t cap = g->cap_kids;
    if (!cn_grow((void **)&g->kids, &cap, need, sizeof *g->kids)) return false;
    if (cap != g->cap_kids) {
        uint8_t *r = core_realloc(g->kreq, cap);
        if (!r) return false; /* kids grew, kreq did not: cap_kids stays, retried next time */
        g->kreq = r;
        g->cap_kids = cap;
    }
    return true;
}

static uint32_t composite(struct cn_ir *g, uint8_t op, const uint32_t *k, uint32_t n) {
    if (!ir_ok(g)) return CN_NIL;
    for (uint32_t i = 0; i < n; i++)
        if (k[i] == CN_NIL) return ir_fail(g, ANVIL_ERR_INVALID, "internal: nil node");
    if (n == 0) return op == IR_SEQ ? ir_empty(g) : ir_none(g);
    if (n == 1) return k[0];
    if (g->n_nodes + g->n_kids + n >= g->max_nodes)
        return ir_fail(g, ANVIL_ERR_UNSUPPORTED,
                       "constraint too large: more than %u grammar nodes", g->max_nodes);
    if (!grow_kids(g, g->n_kids + n)) return oom(g);
    /* k is the caller's list, never g->kids (growing would move it) */
    uint32_t first = g->n_kids;
    memcpy(&g->kids[first], k, (size_t)n * sizeof *k);
    memset(&g->kreq[first], 0, n);
    g->n_kids += n;
    uint32_t id = new_node(g, op);
    if (id == CN_NIL) return CN_NIL;
    g->nodes[id].a = first;
    g->nodes[id].n = n;
    return id;
}

uint32_t ir_seq(struct cn_ir *g, const uint32_t *k, uint32_t n) { return composite(g, IR_SEQ, k, n); }
uint32_t ir_alt(struct cn_ir *g, const uint32_t *k, uint32_t n) { return composite(g, IR_ALT, k, n); }

uint32_t ir_seq2(struct cn_ir *g, uint32_t a, uint32_t b) {
    uint32_t k[2] = {a, b};
    return ir_seq(g, k, 2);
}
uint32_t ir_seq3(struct cn_ir *g, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t k[3] = {a, b, c};
    return ir_seq(g, k, 3);
}
uint32_t ir_alt2(struct cn_ir *g, uint32_t a, uint32_t b) {
    uint32_t k[2] = {a, b};
    return ir_alt(g, k, 2);
}

uint32_t ir_rep(struct cn_ir *g, uint32_t x, int32_t min, int32_t max) {
    if (!ir_ok(g) || x == CN_NIL) return CN_NIL;
    if (min < 0 || (max >= 0 && max < min) || min > CN_MAX_REPEAT || max > CN_MAX_REPEAT)
        return ir_fail(g, ANVIL_ERR_UNSUPPORTED, "repetition {%d,%d} out of range (at most %d)",
                       min, max, CN_MAX_REPEAT);
    if (min == 1 && max == 1) return x;
    if (max == 0) return ir_empty(g);
    uint32_t id = new_node(g, IR_REP);
    if (id == CN_NIL) return CN_NIL;
    g->nodes[id].a = x;
    g->nodes[id].min = min;
    g->nodes[id].max = max;
    return id;
}

uint32_t ir_opt(struct cn_ir *g, uint32_t x) { return ir_rep(g, x, 0, 1); }

uint32_t ir_subseq(struct cn_ir *g, uint32_t sep, const uint32_t *m, const bool *req, uint32_t n,
                   bool nonempty) {
    if (!ir_ok(g)) return CN_NIL;
    if (sep == CN_NIL) return ir_fail(g, ANVIL_ERR_INVALID, "internal: nil node");
    for (uint32_t i = 0; i < n; i++)
        if (m[i] == CN_NIL) return ir_fail(g, ANVIL_ERR_INVALID, "internal: nil node");
    if (n == 0) return nonempty ? ir_none(g) : ir_empty(g);
    if (g->n_nodes + g->n_kids + n + 1 >= g->max_nodes)
        return ir_fail(g, ANVIL_ERR_UNSUPPORTED,
                       "constraint too large: more than %u grammar nodes", g->max_nodes);
    if (!grow_kids(g, g->n_kids + n + 1)) return oom(g);
    uint32_t first = g->n_kids;
    g->kids[first] = sep;
    g->kreq[first] = 0;
    for (uint32_t i = 0; i < n; i++) {
        g->kids[first + 1 + i] = m[i];
        g->kreq[first + 1 + i] = req[i] ? 1 : 0;
    }
    g->n_kids += n + 1;
    uint32_t id = new_node(g, IR_SUBSEQ);
    if (id == CN_NIL) return CN_NIL;
    g->nodes[id].a = first;
    g->nodes[id].n = n + 1;
    g->nodes[id].min = nonempty ? 1 : 0;
    return id;
}

uint32_t ir_ref(struct cn_ir *g, uint32_t rule) {
    if (!ir_ok(g)) return CN_NIL;
    if (rule >= g->n_rules) return ir_fail(g, ANVIL_ERR_INVALID, "internal: bad rule id");
    uint32_t id = new_node(g, IR_REF);
    if (id != CN_NIL) g->nodes[id].a = rule;
    return id;
}

uint32_t ir_rule_add(struct cn_ir *g, const char *name, size_t len) {
    if (!ir_ok(g)) return CN_NIL;
    if (g->n_rules >= g->max_nodes)
        return ir_fail(g, ANVIL_ERR_UNSUPPORTED, "constraint too large: too many rules");
    if (!cn_grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) return oom(g);
    char *nm = core_malloc(len + 1);
    if (!nm) return oom(g);
    memcpy(nm, name, len);
    nm[len] = 0;
    g->rules[g->n_rules] = (struct ir_rule){.name = nm, .body = CN_NIL, .line = 0};
    return g->n_rules++;
}

void ir_rule_define(struct cn_ir *g, uint32_t rule, uint32_t body) {
    if (!ir_ok(g) || rule >= g->n_rules || body == CN_NIL) return;
    g->rules[rule].body = body;
}

void ir_list_push(struct cn_ir *g, struct ir_list *l, uint32_t x) {
    if (!ir_ok(g)) return;
    if (x == CN_NIL) {
        ir_fail(g, ANVIL_ERR_INVALID, "internal: nil node");
        return;
    }
    if (!cn_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) {
        oom(g);
        return;
    }
    l->v[l->n++] = x;
}

void ir_list_free(struct ir_list *l) {
    core_free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* ---------------------------------------------------------------------- */
/* code points and UTF-8 */

int cn_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Validity is core's rule (sb_utf8_len: no overlongs, no surrogates,
 * nothing above U+10FFFF); this adds the value. */
int cn_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    size_t len = sb_utf8_len(s, n);
    if (len == 0) return 0;
    uint32_t v = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) v = (v << 6) | (s[i] & 0x3F);
    *cp = v;
    return (int)len;
}

void cps_add(struct cn_ir *g, struct cp_set *s, uint32_t lo, uint32_t hi) {
    if (!ir_ok(g) || lo > hi) return;
    if (hi > CN_MAX_CP) hi = CN_MAX_CP;
    if (lo > hi) return;
    if (!cn_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) {
        oom(g);
        return;
    }
    s->r[s->n++] = (struct cp_range){lo, hi};
}

static int cmp_range(const void *a, const void *b) {
    const struct cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void cps_normalize(struct cp_set *s) {
    if (s->n < 2) return;
    qsort(s->r, s->n, sizeof *s->r, cmp_range);
    uint32_t w = 0;
    for (uint32_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[w].hi + 1) {
            if (s->r[i].hi > s->r[w].hi) s->r[w].hi = s->r[i].hi;
        } else {
            s->r[++w] = s->r[i];
        }
    }
    s->n = w + 1;
}

void cps_negate(struct cn_ir *g, struct cp_set *s) {
    cps_normalize(s);
    struct cp_set t = {0};
    uint32_t next = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > next) cps_add(g, &t, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= CN_MAX_CP) cps_add(g, &t, next, CN_MAX_CP);
    cps_free(s);
    *s = t;
}

void cps_free(struct cp_set *s) {
    core_free(s->r);
    s->r = NULL;
    s->n = s->cap = 0;
}

/* Emit the byte-range sequences of [lo, hi] (one encoding length, no
 * surrogates, lower groups aligned) into l. */
static void utf8_emit(struct cn_ir *g, struct ir_list *l, uint32_t lo, uint32_t hi) {
    uint8_t a[4], b[4];
    int n = cn_utf8_encode(lo, a);
    cn_utf8_encode(hi, b);
    uint32_t k[4];
    for (int i = 0; i < n; i++) k[i] = ir_byte_range(g, a[i], b[i]);
    ir_list_push(g, l, ir_seq(g, k, (uint32_t)n));
}

static void utf8_split(struct cn_ir *g, struct ir_list *l, uint32_t lo, uint32_t hi, int depth) {
    if (lo > hi || !ir_ok(g)) return;
    if (depth > 64) { /* cannot happen: each split halves a 21-bit structure */
        ir_fail(g, ANVIL_ERR_INVALID, "internal: utf8 split depth");
        return;
    }
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800) utf8_split(g, l, lo, 0xD7FF, depth + 1);
        if (hi > 0xDFFF) utf8_split(g, l, 0xE000, hi, depth + 1);
        return;
    }
    static const uint32_t bound[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++) {
        if (lo <= bound[i] && hi > bound[i]) {
            utf8_split(g, l, lo, bound[i], depth + 1);
            utf8_split(g, l, bound[i] + 1, hi, depth + 1);
            return;
        }
    }
    if (hi <= 0x7F) {
        ir_list_push(g, l, ir_byte_range(g, (uint8_t)lo, (uint8_t)hi));
        return;
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = ((uint32_t)1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(g, l, lo, lo | m, depth + 1);
                utf8_split(g, l, (lo | m) + 1, hi, depth + 1);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(g, l, lo, (hi & ~m) - 1, depth + 1);
                utf8_split(g, l, hi & ~m, hi, depth + 1);
                return;
            }
        }
    }
    utf8_emit(g, l, lo, hi);
}

uint32_t ir_cps(struct cn_ir *g, struct cp_set *s) {
    if (!ir_ok(g)) return CN_NIL;
    cps_normalize(s);
    struct ir_list l = {0};
    /* ASCII members share one byte set instead of one ALT branch each */
    struct cn_bset ascii = {{0}};
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        if (lo <= 0x7F) {
            bset_add_range(&ascii, lo, hi < 0x7F ? hi : 0x7F);
            if (hi <= 0x7F) continue;
            lo = 0x80;
        }
        utf8_split(g, &l, lo, hi, 0);
    }
    if (!bset_empty(&ascii)) ir_list_push(g, &l, ir_bytes(g, &ascii));
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

static uint32_t cp_range(struct cn_ir *g, uint32_t lo, uint32_t hi) {
    struct cp_set s = {0};
    cps_add(g, &s, lo, hi);
    uint32_t r = ir_cps(g, &s);
    cps_free(&s);
    return r;
}

uint32_t ir_any_cp(struct cn_ir *g) { return cp_range(g, 0, CN_MAX_CP); }

uint32_t ir_cp(struct cn_ir *g, uint32_t cp) {
    uint8_t b[4];
    if (cp > CN_MAX_CP || (cp >= 0xD800 && cp <= 0xDFFF))
        return ir_fail(g, ANVIL_ERR_INVALID, "code point U+%04X is not a Unicode scalar value",
                       cp);
    int n = cn_utf8_encode(cp, b);
    return ir_lit(g, (const char *)b, (size_t)n);
}

/* ---------------------------------------------------------------------- */
/* dump */

static void dump_byte(struct sbuf *b, unsigned c) {
    if (c >= 0x21 && c < 0x7F && c != '\\' && c != ']' && c != '[' && c != '"' && c != '-' &&
        c != '^')
        sb_printf(b, "%c", c);
    else
        sb_printf(b, "\\x%02X", c);
}

static void dump_node(const struct cn_ir *g, struct sbuf *b, uint32_t id, int depth) {
    if (depth > 200) {
        sb_put(b, "...", 3);
        return;
    }
    const struct ir_node *n = &g->nodes[id];
    switch (n->op) {
    case IR_NONE: sb_put(b, "[]", 2); break;
    case IR_EMPTY: sb_put(b, "\"\"", 2); break;
    case IR_BYTES: {
        const struct cn_bset *s = &g->sets[n->a];
        sb_put(b, "[", 1);
        for (unsigned c = 0; c < 256;) {
            if (!bset_has(s, c)) {
                c++;
                continue;
            }
            unsigned e = c;
            while (e + 1 < 256 && bset_has(s, e + 1)) e++;
            dump_byte(b, c);
            if (e > c) {
                sb_put(b, "-", 1);
                dump_byte(b, e);
            }
            c = e + 1;
        }
        sb_put(b, "]", 1);
        break;
    }
    case IR_SEQ:
    case IR_ALT:
        sb_put(b, "(", 1);
        for (uint32_t i = 0; i < n->n; i++) {
            if (i) sb_put(b, n->op == IR_SEQ ? " " : " | ", n->op == IR_SEQ ? 1 : 3);
            dump_node(g, b, g->kids[n->a + i], depth + 1);
        }
        sb_put(b, ")", 1);
        break;
    case IR_REP:
        dump_node(g, b, n->a, depth + 1);
        if (n->max < 0)
            sb_printf(b, "{%d,}", n->min);
        else
            sb_printf(b, "{%d,%d}", n->min, n->max);
        break;
    case IR_REF: sb_put(b, g->rules[n->a].name, strlen(g->rules[n->a].name)); break;
    case IR_SUBSEQ:
        sb_put(b, n->min ? "subseq1<sep=" : "subseq<sep=", n->min ? 12 : 11);
        dump_node(g, b, g->kids[n->a], depth + 1);
        for (uint32_t i = 1; i < n->n; i++) {
            sb_put(b, g->kreq[n->a + i] ? "; " : "; opt ", g->kreq[n->a + i] ? 2 : 6);
            dump_node(g, b, g->kids[n->a + i], depth + 1);
        }
        sb_put(b, ">", 1);
        break;
    }
}

char *ir_to_gbnf(const struct cn_ir *g) {
    struct sbuf b;
    sb_init(&b);
    sb_put(&b, "", 0);
    for (uint32_t r = 0; r < g->n_rules; r++) {
        const char *nm = g->rules[r].name;
        sb_put(&b, nm, strlen(nm));
        if (r == g->root) sb_put(&b, " (root)", 7);
        sb_put(&b, " ::= ", 5);
        if (g->rules[r].body == CN_NIL)
            sb_put(&b, "<undefined>", 11);
        else
            dump_node(g, &b, g->rules[r].body, 0);
        sb_put(&b, "\n", 1);
    }
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return sb_take(&b, NULL);
}
