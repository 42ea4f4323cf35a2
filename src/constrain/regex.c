/*
 * regex.c - regular expressions (Python `re` syntax, the subset of
 * constrain.h) to the grammar IR, over the UTF-8 bytes of the matched text.
 *
 * A recursive-descent parser that follows sre_parse's decisions where they
 * matter for which patterns are accepted and what they mean: "]" first in
 * a class is a literal, "-" at a class end is a literal, "{" that does not
 * form {m}, {m,}, {,n}, {m,n} is a literal, a quantifier with nothing
 * before it is "nothing to repeat", two in a row are "multiple repeat"
 * (lazy "?" excepted), an unknown ASCII-letter escape is "bad escape".
 * Everything it does not support is an error naming the construct, so a
 * pattern never silently means something else than it says.
 *
 * Anchors: ^ may open and $ may close a top-level alternative. Anchored
 * sides match nothing more; in search mode (JSON Schema "pattern", whose
 * semantics is "the pattern matches somewhere in the string") an
 * unanchored side gets any text, so "abc" means .*abc.* with . matching
 * newlines too.
 */
#include <stdio.h>
#include <string.h>

#include "constrain/cn_int.h"

struct rx {
    struct cn_ir *g;
    const uint8_t *s;
    size_t n, i;
    int depth, max_depth;
};

static uint32_t rx_fail(struct rx *p, const char *what) {
    return ir_fail(p->g, ANVIL_ERR_INVALID, "regex: %s at offset %zu", what, p->i);
}
static uint32_t rx_unsup(struct rx *p, const char *what) {
    return ir_fail(p->g, ANVIL_ERR_UNSUPPORTED, "regex: %s is not supported (offset %zu)", what,
                   p->i);
}

static int peek(const struct rx *p) { return p->i < p->n ? p->s[p->i] : -1; }
static int peek_at(const struct rx *p, size_t k) { return p->i + k < p->n ? p->s[p->i + k] : -1; }

/* ---------------------------------------------------------------------- */
/* escapes and classes */

static void add_d(struct cn_ir *g, struct cp_set *s) { cps_add(g, s, '0', '9'); }
static void add_w(struct cn_ir *g, struct cp_set *s) {
    cps_add(g, s, '0', '9');
    cps_add(g, s, 'A', 'Z');
    cps_add(g, s, 'a', 'z');
    cps_add(g, s, '_', '_');
}
static void add_s(struct cn_ir *g, struct cp_set *s) {
    cps_add(g, s, '\t', '\r'); /* \t \n \v \f \r */
    cps_add(g, s, ' ', ' ');
}

/* Add the class escape letter c (d D w W s S) to s. */
static void add_class_escape(struct cn_ir *g, struct cp_set *s, int c) {
    struct cp_set t = {0};
    switch (c | 0x20) {
    case 'd': add_d(g, &t); break;
    case 'w': add_w(g, &t); break;
    default: add_s(g, &t); break;
    }
    if (c >= 'A' && c <= 'Z') cps_negate(g, &t);
    for (uint32_t i = 0; i < t.n; i++) cps_add(g, s, t.r[i].lo, t.r[i].hi);
    cps_free(&t);
}

/* Read exactly k hex digits; -1 when malformed. */
static int64_t read_hex(struct rx *p, int k) {
    int64_t v = 0;
    for (int j = 0; j < k; j++) {
        int h = cn_hexval(peek(p));
        if (h < 0) return -1;
        v = v * 16 + h;
        p->i++;
    }
    return v;
}

/* One code point from the pattern text (UTF-8). */
static int64_t read_cp(struct rx *p) {
    uint32_t cp;
    int len = cn_utf8_decode(p->s + p->i, p->n - p->i, &cp);
    if (len == 0) {
        rx_fail(p, "invalid UTF-8 in the pattern");
        return -1;
    }
    p->i += (size_t)len;
    return cp;
}

enum { ESC_CP = 0, ESC_CLASS = 1 };

/* After a backslash: either a code point (*cp, returns ESC_CP) or a class
 * letter (*cp = the letter, ESC_CLASS). -1 on error. in_class: \b is a
 * backspace there. */
static int read_escape(struct rx *p, bool in_class, int64_t *cp) {
    int c = peek(p);
    if (c < 0) {
        rx_fail(p, "pattern ends with a backslash");
        return -1;
    }
    if (c >= 0x80) {
        *cp = read_cp(p);
        return *cp < 0 ? -1 : ESC_CP;
    }
    p->i++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *cp = c;
        return ESC_CLASS;
    case 'n': *cp = '\n'; return ESC_CP;
    case 't': *cp = '\t'; return ESC_CP;
    case 'r': *cp = '\r'; return ESC_CP;
    case 'f': *cp = '\f'; return ESC_CP;
    case 'v': *cp = '\v'; return ESC_CP;
    case 'a': *cp = '\a'; return ESC_CP;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return ESC_CP;
        }
        rx_unsup(p, "the word boundary \\b");
        return -1;
    case 'x': case 'u': case 'U': {
        int k = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        int64_t v = read_hex(p, k);
        if (v < 0) {
            rx_fail(p, c == 'x' ? "bad \\x escape" : c == 'u' ? "bad \\u escape" : "bad \\U escape");
            return -1;
        }
        if (v > CN_MAX_CP) {
            rx_fail(p, "escape beyond U+10FFFF");
            return -1;
        }
        *cp = v;
        return ESC_CP;
    }
    case '0': {
        /* octal: \0, \0o, \0oo */
        int64_t v = 0;
        for (int j = 0; j < 2 && peek(p) >= '0' && peek(p) <= '7'; j++) v = v * 8 + (p->s[p->i++] - '0');
        *cp = v;
        return ESC_CP;
    }
    default: break;
    }
    if (c >= '1' && c <= '9') {
        rx_unsup(p, "a backreference");
        return -1;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        if (c == 'B' || c == 'A' || c == 'Z' || c == 'N' || c == 'p' || c == 'P' || c == 'G' ||
            c == 'z' || c == 'k')
            rx_unsup(p, "this escape (\\A \\B \\Z \\N \\p \\k ...)");
        else
            rx_fail(p, "bad escape");
        return -1;
    }
    *cp = c; /* escaped punctuation, digits handled above, space... */
    return ESC_CP;
}

/* One member of a set: an escape (after a backslash) or a code point. */
static int read_class_item(struct rx *p, int64_t *cp) {
    if (peek(p) == '\\') {
        p->i++;
        return read_escape(p, true, cp);
    }
    *cp = read_cp(p);
    return *cp < 0 ? -1 : ESC_CP;
}

static uint32_t parse_class(struct rx *p) {
    struct cn_ir *g = p->g;
    struct cp_set set = {0};
    bool neg = false;
    if (peek(p) == '^') {
        neg = true;
        p->i++;
    }
    size_t start = p->i;
    for (;;) {
        int c = peek(p);
        if (c < 0) {
            cps_free(&set);
            return rx_fail(p, "unterminated character set");
        }
        if (c == ']' && p->i != start) {
            p->i++;
            break;
        }
        int64_t lo;
        int kind = read_class_item(p, &lo);
        if (kind < 0) {
            cps_free(&set);
            return CN_NIL;
        }
        if (peek(p) == '-') {
            int d = peek_at(p, 1);
            if (d < 0) {
                cps_free(&set);
                return rx_fail(p, "unterminated character set");
            }
            if (d == ']') {
                /* trailing '-' is a literal, and the set ends */
                if (kind == ESC_CLASS)
                    add_class_escape(g, &set, (int)lo);
                else
                    cps_add(g, &set, (uint32_t)lo, (uint32_t)lo);
                cps_add(g, &set, '-', '-');
                p->i += 2;
                break;
            }
            p->i++;
            int64_t hi;
            int kind2 = read_class_item(p, &hi);
            if (kind2 < 0) {
                cps_free(&set);
                return CN_NIL;
            }
            if (kind != ESC_CP || kind2 != ESC_CP || hi < lo) {
                cps_free(&set);
                return rx_fail(p, "bad character range");
            }
            cps_add(g, &set, (uint32_t)lo, (uint32_t)hi);
            continue;
        }
        if (kind == ESC_CLASS)
            add_class_escape(g, &set, (int)lo);
        else
            cps_add(g, &set, (uint32_t)lo, (uint32_t)lo);
    }
    if (neg) cps_negate(g, &set);
    uint32_t r = ir_cps(g, &set);
    cps_free(&set);
    return r;
}

/* ---------------------------------------------------------------------- */
/* structure */

static uint32_t parse_alt(struct rx *p, bool top, const struct cn_regex_opts *o);

/* any code point but \n */
static uint32_t dot(struct cn_ir *g) {
    struct cp_set s = {0};
    cps_add(g, &s, 0, '\n' - 1);
    cps_add(g, &s, '\n' + 1, CN_MAX_CP);
    uint32_t r = ir_cps(g, &s);
    cps_free(&s);
    return r;
}

/* An atom, or CN_NIL with *none set when the next char cannot start one. */
static uint32_t parse_atom(struct rx *p, const struct cn_regex_opts *o, bool *none) {
    struct cn_ir *g = p->g;
    *none = false;
    int c = peek(p);
    switch (c) {
    case '(': {
        p->i++;
        if (peek(p) == '?') {
            int d = peek_at(p, 1);
            if (d == ':') {
                p->i += 2;
            } else if (d == 'P' && peek_at(p, 2) == '<') {
                p->i += 3;
                while (peek(p) >= 0 && peek(p) != '>') p->i++;
                if (peek(p) != '>') return rx_fail(p, "unterminated group name");
                p->i++;
            } else if (d == '<' && peek_at(p, 2) != '=' && peek_at(p, 2) != '!') {
                p->i += 2;
                while (peek(p) >= 0 && peek(p) != '>') p->i++;
                if (peek(p) != '>') return rx_fail(p, "unterminated group name");
                p->i++;
            } else if (d == '=' || d == '!' || d == '<') {
                return rx_unsup(p, "lookaround");
            } else {
                return rx_unsup(p, "this group extension (?...) (flags, comments, backreferences)");
            }
        }
        if (++p->depth > p->max_depth)
            return ir_fail(g, ANVIL_ERR_UNSUPPORTED, "regex: groups nested deeper than %d",
                           p->max_depth);
        uint32_t r = parse_alt(p, false, o);
        p->depth--;
        if (r == CN_NIL) return CN_NIL;
        if (peek(p) != ')') return rx_fail(p, "missing ), unterminated subpattern");
        p->i++;
        return r;
    }
    case '[':
        p->i++;
        return parse_class(p);
    case '.':
        p->i++;
        return dot(g);
    case '\\': {
        p->i++;
        int64_t cp;
        int kind = read_escape(p, false, &cp);
        if (kind < 0) return CN_NIL;
        if (kind == ESC_CLASS) {
            struct cp_set s = {0};
            add_class_escape(g, &s, (int)cp);
            uint32_t r = ir_cps(g, &s);
            cps_free(&s);
            return r;
        }
        return ir_cp(g, (uint32_t)cp);
    }
    case '*': case '+': case '?':
        return rx_fail(p, "nothing to repeat");
    case '{': {
        /* a quantifier shape here is "nothing to repeat"; otherwise a literal */
        size_t j = p->i + 1;
        bool digits = false;
        while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') j++, digits = true;
        if (j < p->n && p->s[j] == ',') {
            j++;
            while (j < p->n && p->s[j] >= '0' && p->s[j] <= '9') j++;
            digits = true;
        }
        if (digits && j < p->n && p->s[j] == '}') return rx_fail(p, "nothing to repeat");
        p->i++;
        return ir_byte(g, '{');
    }
    case '^':
        return rx_unsup(p, "^ other than at the start of a top-level alternative");
    case '$':
        if (p->depth == 0 && (peek_at(p, 1) == '|' || peek_at(p, 1) == -1)) {
            *none = true; /* the anchor closing a top-level alternative */
            return CN_NIL;
        }
        return rx_unsup(p, "$ other than at the end of a top-level alternative");
    case ')': case '|': case -1:
        *none = true;
        return CN_NIL;
    default: {
        int64_t cp = read_cp(p);
        if (cp < 0) return CN_NIL;
        return ir_cp(g, (uint32_t)cp);
    }
    }
}

/* Try to read a quantifier at p->i. Returns 1 (with min/max), 0 when there
 * is none (p->i unchanged), -1 on error. */
static int parse_quant(struct rx *p, int32_t *min, int32_t *max) {
    int c = peek(p);
    if (c == '*' || c == '+' || c == '?') {
        p->i++;
        *min = c == '+' ? 1 : 0;
        *max = c == '?' ? 1 : -1;
        return 1;
    }
    if (c != '{') return 0;
    size_t save = p->i;
    p->i++;
    int64_t lo = -1, hi = -1;
    while (peek(p) >= '0' && peek(p) <= '9') {
        lo = (lo < 0 ? 0 : lo) * 10 + (p->s[p->i++] - '0');
        if (lo > CN_MAX_REPEAT) lo = CN_MAX_REPEAT + 1;
    }
    bool comma = false;
    if (peek(p) == ',') {
        comma = true;
        p->i++;
        while (peek(p) >= '0' && peek(p) <= '9') {
            hi = (hi < 0 ? 0 : hi) * 10 + (p->s[p->i++] - '0');
            if (hi > CN_MAX_REPEAT) hi = CN_MAX_REPEAT + 1;
        }
    } else {
        hi = lo;
    }
    if (peek(p) != '}' || (!comma && lo < 0)) {
        p->i = save; /* not a quantifier: '{' is a literal */
        return 0;
    }
    p->i++;
    *min = lo < 0 ? 0 : (int32_t)lo;
    *max = hi < 0 ? -1 : (int32_t)hi;
    if (*min > CN_MAX_REPEAT || *max > CN_MAX_REPEAT) {
        ir_fail(p->g, ANVIL_ERR_UNSUPPORTED, "regex: repetition count over %d", CN_MAX_REPEAT);
        return -1;
    }
    if (*max >= 0 && *max < *min) {
        rx_fail(p, "min repeat greater than max repeat");
        return -1;
    }
    return 1;
}

static uint32_t parse_concat(struct rx *p, const struct cn_regex_opts *o) {
    struct cn_ir *g = p->g;
    struct ir_list l = {0};
    for (;;) {
        bool none;
        uint32_t a = parse_atom(p, o, &none);
        if (none) break;
        if (a == CN_NIL) goto fail;
        int32_t min, max;
        int q = parse_quant(p, &min, &max);
        if (q < 0) goto fail;
        if (q == 1) {
            if (peek(p) == '?') {
                p->i++; /* lazy: same language */
            } else if (peek(p) == '+') {
                rx_unsup(p, "a possessive quantifier");
                goto fail;
            }
            int32_t m2, x2;
            size_t save = p->i;
            int q2 = parse_quant(p, &m2, &x2);
            if (q2 != 0) {
                p->i = save;
                if (q2 > 0) rx_fail(p, "multiple repeat");
                goto fail;
            }
            a = ir_rep(g, a, min, max);
        }
        ir_list_push(g, &l, a);
        if (!ir_ok(g)) goto fail;
    }
    uint32_t r = ir_seq(g, l.v, l.n);
    ir_list_free(&l);
    return r;
fail:
    ir_list_free(&l);
    return CN_NIL;
}

static uint32_t any_text(struct cn_ir *g) { return ir_rep(g, ir_any_cp(g), 0, -1); }

static uint32_t parse_branch(struct rx *p, bool top, const struct cn_regex_opts *o) {
    struct cn_ir *g = p->g;
    bool anch_lo = false, anch_hi = false;
    if (top && peek(p) == '^') {
        anch_lo = true;
        p->i++;
    }
    uint32_t body = parse_concat(p, o);
    if (body == CN_NIL) return CN_NIL;
    if (top && peek(p) == '$') {
        p->i++;
        anch_hi = true;
        if (peek(p) != '|' && peek(p) != -1)
            return rx_unsup(p, "$ other than at the end of a top-level alternative");
    }
    if (!o->search || !top) return body;
    uint32_t k[3];
    uint32_t n = 0;
    if (!anch_lo) k[n++] = any_text(g);
    k[n++] = body;
    if (!anch_hi) k[n++] = any_text(g);
    return ir_seq(g, k, n);
}

static uint32_t parse_alt(struct rx *p, bool top, const struct cn_regex_opts *o) {
    struct cn_ir *g = p->g;
    struct ir_list l = {0};
    for (;;) {
        uint32_t b = parse_branch(p, top, o);
        if (b == CN_NIL) {
            ir_list_free(&l);
            return CN_NIL;
        }
        ir_list_push(g, &l, b);
        if (peek(p) != '|') break;
        p->i++;
    }
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

uint32_t regex_to_ir(struct cn_ir *g, const char *re, size_t len, const struct cn_regex_opts *o) {
    struct rx p = {.g = g, .s = (const uint8_t *)re, .n = len, .i = 0, .depth = 0,
                   .max_depth = o->max_depth > 0 ? o->max_depth : CN_DEF_MAX_DEPTH};
    uint32_t r = parse_alt(&p, true, o);
    if (r == CN_NIL) {
        if (ir_ok(g)) rx_fail(&p, "syntax error");
        return CN_NIL;
    }
    if (p.i < p.n) {
        if (p.s[p.i] == ')') return rx_fail(&p, "unbalanced parenthesis");
        return rx_fail(&p, "syntax error");
    }
    return r;
}

anvil_status cn_parse_regex(const char *text, size_t len, const struct cn_options *opt,
                            struct cn_ir **out, char *err, size_t err_cap) {
    struct cn_limits lim = cn_limits_resolve(opt ? &opt->limits : NULL);
    struct cn_ir *g = NULL;
    anvil_status st = ir_init(&g, (uint32_t)lim.max_nfa_states);
    if (st != ANVIL_OK) {
        errmsg_set(err, err_cap, "out of memory");
        return st;
    }
    struct cn_regex_opts o = {.search = false, .max_depth = lim.max_depth};
    uint32_t body = regex_to_ir(g, text, len, &o);
    uint32_t root = ir_rule_add(g, "root", 4);
    ir_rule_define(g, root, body);
    if (!ir_ok(g)) {
        errmsg_set(err, err_cap, "%s", g->err);
        st = g->st;
        ir_free(g);
        return st;
    }
    g->root = root;
    *out = g;
    return ANVIL_OK;
}
