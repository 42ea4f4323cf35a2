/*
 * gbnf.c - GBNF grammars (llama.cpp's syntax; see constrain.h) to the IR.
 *
 * Our own recursive-descent parser, written from the syntax as users write
 * it: a rule is `name ::= alternatives` and ends at a newline outside
 * parentheses (newlines are free after `::=`, after `|` and inside
 * parentheses); `#` comments run to the end of the line. Strings and
 * classes are code points, compiled to their UTF-8 bytes, so a grammar
 * written over characters runs on bytes and matches partial characters
 * token by token without decoding.
 *
 * Semantic checks here: duplicate rules, undefined rules (reported with
 * the line of first use), a missing root. Left recursion is checked on the
 * IR by compile.c, where nullable prefixes are known.
 */
#include <stdio.h>
#include <string.h>

#include "constrain/cn_int.h"
#include "core/hash.h"

struct gp {
    struct cn_ir *g;
    const uint8_t *s;
    size_t n, i;
    int depth, max_depth;
    struct hash_index names; /* rule name -> rule id (every rule is made by rule_for) */
    uint8_t *defined; /* per rule: defined once already */
    uint32_t cap_def;
};

static void line_col(const struct gp *p, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t k = 0; k < off && k < p->n; k++) {
        if (p->s[k] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static uint32_t gp_fail(struct gp *p, const char *what) {
    int l, c;
    line_col(p, p->i, &l, &c);
    return ir_fail(p->g, ANVIL_ERR_INVALID, "grammar: %s at line %d column %d", what, l, c);
}

static int peek(const struct gp *p) { return p->i < p->n ? p->s[p->i] : -1; }
static int peek_at(const struct gp *p, size_t k) { return p->i + k < p->n ? p->s[p->i + k] : -1; }

static bool is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

static void skip_space(struct gp *p, bool nl_ok) {
    for (;;) {
        int c = peek(p);
        if (c == ' ' || c == '\t') {
            p->i++;
        } else if (c == '#') {
            while (peek(p) >= 0 && peek(p) != '\n' && peek(p) != '\r') p->i++;
        } else if (nl_ok && (c == '\n' || c == '\r')) {
            p->i++;
        } else {
            return;
        }
    }
}

/* ---------------------------------------------------------------------- */
/* rule names */

static void rule_name(const void *ctx, uint32_t id, const void **key, size_t *len) {
    const struct cn_ir *g = ctx;
    *key = g->rules[id].name;
    *len = strlen(g->rules[id].name);
}

/* Rule id for name s[0..n), created (undefined) when new. */
static uint32_t rule_for(struct gp *p, const uint8_t *s, size_t n) {
    struct cn_ir *g = p->g;
    int64_t id = hash_index_find(&p->names, s, n, rule_name, g);
    if (id >= 0) return (uint32_t)id;
    uint32_t r = ir_rule_add(g, (const char *)s, n);
    if (r == CN_NIL) return CN_NIL;
    if (hash_index_add(&p->names, r, s, n, rule_name, g, NULL) != ANVIL_OK)
        return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
    int l, c;
    line_col(p, p->i, &l, &c);
    g->rules[r].line = l;
    return r;
}

/* ---------------------------------------------------------------------- */
/* terminals */

/* One character of a string or class: a code point, or -1 on error. */
static int64_t parse_char(struct gp *p) {
    int c = peek(p);
    if (c < 0) {
        gp_fail(p, "unexpected end of input");
        return -1;
    }
    if (c == '\\') {
        int e = peek_at(p, 1);
        p->i += 2;
        switch (e) {
        case 'x': case 'u': case 'U': {
            int k = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            int64_t v = 0;
            for (int j = 0; j < k; j++) {
                int h = cn_hexval(peek(p));
                if (h < 0) {
                    gp_fail(p, "expecting hex digits in escape");
                    return -1;
                }
                v = v * 16 + h;
                p->i++;
            }
            if (v > CN_MAX_CP) {
                gp_fail(p, "escape beyond U+10FFFF");
                return -1;
            }
            return v;
        }
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '-': return e;
        default:
            p->i -= 2;
            gp_fail(p, "unknown escape");
            return -1;
        }
    }
    uint32_t cp;
    int len = cn_utf8_decode(p->s + p->i, p->n - p->i, &cp);
    if (len == 0) {
        gp_fail(p, "invalid UTF-8");
        return -1;
    }
    p->i += (size_t)len;
    return cp;
}

static uint32_t parse_string(struct gp *p) {
    struct cn_ir *g = p->g;
    struct ir_list l = {0};
    p->i++; /* opening quote */
    while (peek(p) != '"') {
        if (peek(p) < 0) {
            ir_list_free(&l);
            return gp_fail(p, "unterminated string");
        }
        int64_t cp = parse_char(p);
        if (cp < 0) {
            ir_list_free(&l);
            return CN_NIL;
        }
        ir_list_push(g, &l, ir_cp(g, (uint32_t)cp));
    }
    p->i++;
    uint32_t r = ir_seq(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

static uint32_t parse_class(struct gp *p) {
    struct cn_ir *g = p->g;
    struct cp_set set = {0};
    p->i++; /* [ */
    bool neg = false;
    if (peek(p) == '^') {
        neg = true;
        p->i++;
    }
    while (peek(p) != ']') {
        if (peek(p) < 0) {
            cps_free(&set);
            return gp_fail(p, "unterminated character class");
        }
        int64_t lo = parse_char(p);
        if (lo < 0) {
            cps_free(&set);
            return CN_NIL;
        }
        int64_t hi = lo;
        if (peek(p) == '-' && peek_at(p, 1) != ']' && peek_at(p, 1) >= 0) {
            p->i++;
            hi = parse_char(p);
            if (hi < 0) {
                cps_free(&set);
                return CN_NIL;
            }
            if (hi < lo) {
                cps_free(&set);
                return gp_fail(p, "character range out of order");
            }
        }
        cps_add(g, &set, (uint32_t)lo, (uint32_t)hi);
    }
    p->i++;
    if (neg) cps_negate(g, &set);
    uint32_t r = ir_cps(g, &set);
    cps_free(&set);
    return r;
}

/* ---------------------------------------------------------------------- */
/* structure */

static uint32_t parse_alternates(struct gp *p, bool nested);

static bool parse_int(struct gp *p, int64_t *v) {
    if (peek(p) < '0' || peek(p) > '9') return false;
    *v = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        *v = *v * 10 + (p->s[p->i++] - '0');
        if (*v > CN_MAX_REPEAT) *v = CN_MAX_REPEAT + 1;
    }
    return true;
}

static uint32_t parse_sequence(struct gp *p, bool nested) {
    struct cn_ir *g = p->g;
    struct ir_list l = {0};
    for (;;) {
        int c = peek(p);
        uint32_t item = CN_NIL;
        if (c == '"') {
            item = parse_string(p);
        } else if (c == '[') {
            item = parse_class(p);
        } else if (c == '.') {
            p->i++;
            item = ir_any_cp(g);
        } else if (is_word(c)) {
            size_t b = p->i;
            while (is_word(peek(p))) p->i++;
            uint32_t r = rule_for(p, p->s + b, p->i - b);
            item = r == CN_NIL ? CN_NIL : ir_ref(g, r);
        } else if (c == '(') {
            p->i++;
            if (++p->depth > p->max_depth) {
                ir_fail(g, ANVIL_ERR_UNSUPPORTED, "grammar: parentheses nested deeper than %d",
                        p->max_depth);
                goto fail;
            }
            skip_space(p, true);
            item = parse_alternates(p, true);
            p->depth--;
            if (item == CN_NIL) goto fail;
            if (peek(p) != ')') {
                gp_fail(p, "expecting ')'");
                goto fail;
            }
            p->i++;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (l.n == 0) {
                gp_fail(p, "expecting an item before a repetition operator");
                goto fail;
            }
            int32_t min, max;
            if (c != '{') {
                p->i++;
                min = c == '+' ? 1 : 0;
                max = c == '?' ? 1 : -1;
            } else {
                p->i++;
                skip_space(p, nested);
                int64_t a, b = -1;
                if (!parse_int(p, &a)) {
                    gp_fail(p, "expecting an integer");
                    goto fail;
                }
                skip_space(p, nested);
                if (peek(p) == '}') {
                    b = a;
                } else if (peek(p) == ',') {
                    p->i++;
                    skip_space(p, nested);
                    if (parse_int(p, &b)) skip_space(p, nested);
                    if (peek(p) != '}') {
                        gp_fail(p, "expecting '}'");
                        goto fail;
                    }
                } else {
                    gp_fail(p, "expecting ',' or '}'");
                    goto fail;
                }
                p->i++;
                if (a > CN_MAX_REPEAT || b > CN_MAX_REPEAT) {
                    ir_fail(g, ANVIL_ERR_UNSUPPORTED, "grammar: repetition count over %d",
                            CN_MAX_REPEAT);
                    goto fail;
                }
                if (b >= 0 && b < a) {
                    gp_fail(p, "repetition {m,n} with n < m");
                    goto fail;
                }
                min = (int32_t)a;
                max = (int32_t)b;
            }
            l.v[l.n - 1] = ir_rep(g, l.v[l.n - 1], min, max);
            if (!ir_ok(g)) goto fail;
            skip_space(p, nested);
            continue;
        } else if (c == '<') {
            ir_fail(g, ANVIL_ERR_UNSUPPORTED, "grammar: token references <...> are not supported");
            goto fail;
        } else {
            break;
        }
        if (item == CN_NIL) goto fail;
        ir_list_push(g, &l, item);
        if (!ir_ok(g)) goto fail;
        skip_space(p, nested);
    }
    uint32_t r = ir_seq(g, l.v, l.n);
    ir_list_free(&l);
    return r;
fail:
    ir_list_free(&l);
    if (ir_ok(g)) gp_fail(p, "syntax error");
    return CN_NIL;
}

static uint32_t parse_alternates(struct gp *p, bool nested) {
    struct cn_ir *g = p->g;
    struct ir_list l = {0};
    for (;;) {
        uint32_t s = parse_sequence(p, nested);
        if (s == CN_NIL) {
            ir_list_free(&l);
            return CN_NIL;
        }
        ir_list_push(g, &l, s);
        if (peek(p) != '|') break;
        p->i++;
        skip_space(p, true);
    }
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

static bool parse_rule(struct gp *p) {
    struct cn_ir *g = p->g;
    size_t b = p->i;
    while (is_word(peek(p))) p->i++;
    if (p->i == b) {
        gp_fail(p, "expecting a rule name");
        return false;
    }
    size_t name_end = p->i;
    skip_space(p, false);
    if (!(peek(p) == ':' && peek_at(p, 1) == ':' && peek_at(p, 2) == '=')) {
        gp_fail(p, "expecting ::=");
        return false;
    }
    p->i += 3;
    size_t save = p->i;
    p->i = b;
    uint32_t r = rule_for(p, p->s + b, name_end - b);
    p->i = save;
    if (r == CN_NIL) return false;
    if (r >= p->cap_def) {
        uint32_t nc = p->cap_def ? p->cap_def : 64;
        while (nc <= r) nc *= 2;
        uint8_t *d = core_realloc(p->defined, nc);
        if (!d) {
            ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
            return false;
        }
        memset(d + p->cap_def, 0, nc - p->cap_def);
        p->defined = d;
        p->cap_def = nc;
    }
    if (p->defined[r]) {
        size_t keep = p->i;
        p->i = b;
        char msg[160];
        snprintf(msg, sizeof msg, "rule '%.100s' defined twice", g->rules[r].name);
        gp_fail(p, msg);
        p->i = keep;
        return false;
    }
    p->defined[r] = 1;
    int l, c;
    line_col(p, b, &l, &c);
    g->rules[r].line = l;
    skip_space(p, true);
    uint32_t body = parse_alternates(p, false);
    if (body == CN_NIL) return false;
    ir_rule_define(g, r, body);
    int e = peek(p);
    if (e == '\r') {
        p->i += peek_at(p, 1) == '\n' ? 2 : 1;
    } else if (e == '\n') {
        p->i++;
    } else if (e >= 0) {
        gp_fail(p, e == ')' ? "unbalanced ')'" : "expecting newline or end of input");
        return false;
    }
    return ir_ok(g);
}

anvil_status cn_parse_gbnf(const char *text, size_t len, const struct cn_options *opt,
                           struct cn_ir **out, char *err, size_t err_cap) {
    struct cn_limits lim = cn_limits_resolve(opt ? &opt->limits : NULL);
    struct cn_ir *g = NULL;
    anvil_status st = ir_init(&g, (uint32_t)lim.max_nfa_states);
    if (st != ANVIL_OK) {
        errmsg_set(err, err_cap, "out of memory");
        return st;
    }
    struct gp p = {.g = g, .s = (const uint8_t *)text, .n = len, .max_depth = lim.max_depth};
    if (hash_index_init(&p.names, 64) != ANVIL_OK) {
        ir_free(g);
        errmsg_set(err, err_cap, "out of memory");
        return ANVIL_ERR_NOMEM;
    }
    skip_space(&p, true);
    while (p.i < p.n && ir_ok(g)) {
        if (!parse_rule(&p)) break;
        skip_space(&p, true);
    }
    if (ir_ok(g)) {
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (g->rules[r].body == CN_NIL) {
                ir_fail(g, ANVIL_ERR_INVALID, "grammar: undefined rule '%.100s' (used at line %d)",
                        g->rules[r].name, g->rules[r].line);
                break;
            }
        }
    }
    if (ir_ok(g)) {
        for (uint32_t r = 0; r < g->n_rules; r++)
            if (!strcmp(g->rules[r].name, "root")) g->root = r;
        if (g->root == CN_NIL) ir_fail(g, ANVIL_ERR_INVALID, "grammar: no 'root' rule");
    }
    hash_index_free(&p.names);
    core_free(p.defined);
    if (!ir_ok(g)) {
        errmsg_set(err, err_cap, "%s", g->err);
        st = g->st;
        ir_free(g);
        return st;
    }
    *out = g;
    return ANVIL_OK;
}
