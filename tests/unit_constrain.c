/*
 * unit_constrain.c - the constraint engine against its slow twin and
 * against brute force:
 *
 *   - UTF-8 classes: every code point of random code-point sets (and every
 *     malformed sequence shape) against a direct membership test;
 *   - regexes and GBNF grammars: guided random walks through the compiled
 *     automaton where, at every step, all 256 next bytes are checked
 *     against the Earley recognizer on the same IR (viable prefix and
 *     complete match), so the NFA/DFA/pushdown construction is compared
 *     with an independent reading of the same grammar;
 *   - the vocabulary: cn_fill_mask and cn_allowed against each other and
 *     against the recognizer fed each token's bytes, on small vocabularies
 *     (single bytes, random multi-byte tokens, duplicates, EOG, NEVER);
 *   - JSON Schema lowering: integer and number ranges against exact
 *     comparisons on enumerated decimal strings;
 *   - errors (syntax, undefined rules, left recursion, unsupported
 *     features, keywords), bounds (exploding regexes, huge enums, deep
 *     nesting) with a time limit, state copy/reset, and out-of-memory at
 *     every allocation of compile, state init and advance.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "constrain/cn_int.h"
#include "constrain/constrain.h"

/* ---------------------------------------------------------------------- */
/* helpers */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static uint32_t rnd_below(uint32_t n) { return (uint32_t)(rnd() % n); }

static struct cn_ir *parse_ok(enum cn_kind kind, const char *text) {
    struct cn_ir *g = NULL;
    char err[256] = "";
    anvil_status st = cn_parse(kind, text, strlen(text), NULL, &g, err, sizeof err);
    if (st != ANVIL_OK) {
        print_error("parse failed for <<%s>>: %s\n", text, err);
        fail();
    }
    return g;
}

static struct cn_program *compile_ir_ok(const struct cn_ir *g, const char *text) {
    struct cn_program *p = NULL;
    char err[256] = "";
    anvil_status st = cn_compile_ir(g, NULL, &p, err, sizeof err);
    if (st != ANVIL_OK) {
        print_error("compile failed for <<%s>>: %s\n", text, err);
        fail();
    }
    return p;
}

/* The bytes b for which the state can advance, as a 256-flag array. */
static void fast_next(struct cn_state *s, struct cn_state *tmp, uint8_t ok[256]) {
    for (int b = 0; b < 256; b++) {
        assert_int_equal(cn_state_copy(tmp, s), ANVIL_OK);
        uint8_t c = (uint8_t)b;
        anvil_status st = cn_advance_bytes(tmp, &c, 1);
        assert_true(st == ANVIL_OK || st == ANVIL_ERR_INVALID);
        ok[b] = st == ANVIL_OK;
    }
}

static void ref_next(struct cn_ref *r, uint8_t ok[256]) {
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        ok[b] = cn_ref_feed(r, &c, 1);
        cn_ref_pop(r);
    }
}

static void dump_path(const char *text, const uint8_t *path, size_t n) {
    fprintf(stderr, "grammar <<%s>>\npath (%zu bytes):", text, n);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", path[i]);
    fprintf(stderr, "\n");
}

/* Guided random walks: at every step compare all next bytes and the
 * accept flag with the reference, then take a random allowed byte. */
static void differential(enum cn_kind kind, const char *text, int walks, int max_len) {
    struct cn_ir *g = parse_ok(kind, text);
    struct cn_program *p = compile_ir_ok(g, text);
    struct cn_ref *r = NULL;
    assert_int_equal(cn_ref_init(g, &r), ANVIL_OK);
    struct cn_state *s = NULL, *tmp = NULL;
    assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
    assert_int_equal(cn_state_init(p, NULL, &tmp), ANVIL_OK);
    uint8_t path[256];
    for (int w = 0; w < walks; w++) {
        cn_state_reset(s);
        cn_ref_reset(r);
        for (int len = 0; len <= max_len; len++) {
            uint8_t a[256], b[256];
            if (cn_accepts(s) != cn_ref_accepts(r)) {
                dump_path(text, path, (size_t)len);
                fail_msg("accept differs: fast %d ref %d", cn_accepts(s), cn_ref_accepts(r));
            }
            fast_next(s, tmp, a);
            ref_next(r, b);
            int n_ok = 0;
            for (int c = 0; c < 256; c++) {
                if (a[c] != b[c]) {
                    dump_path(text, path, (size_t)len);
                    fail_msg("byte %02x: fast %d ref %d", c, a[c], b[c]);
                }
                n_ok += a[c];
            }
            assert_int_equal(cn_can_continue(s), n_ok > 0);
            if (n_ok == 0 || len == max_len) break;
            if (cn_accepts(s) && rnd_below(8) == 0) break;
            int k = (int)rnd_below((uint32_t)n_ok);
            int c = 0;
            for (; c < 256; c++)
                if (a[c] && k-- == 0) break;
            uint8_t byte = (uint8_t)c;
            path[len] = byte;
            assert_int_equal(cn_advance_bytes(s, &byte, 1), ANVIL_OK);
            assert_true(cn_ref_feed(r, &byte, 1));
        }
    }
    cn_state_free(s);
    cn_state_free(tmp);
    cn_ref_free(r);
    cn_program_free(p);
    ir_free(g);
}

static void expect_error(enum cn_kind kind, const char *text, anvil_status want, const char *sub) {
    struct cn_program *p = NULL;
    char err[256] = "";
    anvil_status st = cn_compile(kind, text, strlen(text), NULL, &p, err, sizeof err);
    if (st == ANVIL_OK) {
        cn_program_free(p);
        fail_msg("<<%s>> compiled, expected an error containing '%s'", text, sub);
    }
    assert_null(p);
    if (st != want || !strstr(err, sub))
        fail_msg("<<%s>>: status %d (want %d), message '%s' (want '%s')", text, st, want, err,
                 sub);
}

/* ---------------------------------------------------------------------- */
/* UTF-8 */

/* Does the program accept exactly the UTF-8 encodings of the set? Every
 * code point is checked, and every byte string shape that is not UTF-8. */
static void check_cp_set(const uint32_t (*ranges)[2], int n) {
    struct cn_ir *g = NULL;
    assert_int_equal(ir_init(&g, 0), ANVIL_OK);
    struct cp_set set = {0};
    for (int i = 0; i < n; i++) cps_add(g, &set, ranges[i][0], ranges[i][1]);
    uint32_t root = ir_rule_add(g, "root", 4);
    ir_rule_define(g, root, ir_cps(g, &set));
    g->root = root;
    assert_true(ir_ok(g));
    struct cn_program *p = compile_ir_ok(g, "cp set");
    struct cn_state *s = NULL;
    assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
    for (uint32_t cp = 0; cp <= CN_MAX_CP; cp++) {
        bool in = false;
        for (int i = 0; i < n; i++) in |= cp >= ranges[i][0] && cp <= ranges[i][1];
        in &= !(cp >= 0xD800 && cp <= 0xDFFF);
        uint8_t b[4];
        int len = cn_utf8_encode(cp, b);
        cn_state_reset(s);
        bool ok = cn_advance_bytes(s, b, (size_t)len) == ANVIL_OK && cn_accepts(s);
        if (ok != in) fail_msg("U+%04X: accepted %d, in set %d", cp, ok, in);
    }
    /* malformed: overlongs, surrogates, stray continuations, > U+10FFFF */
    static const uint8_t bad[][4] = {
        {0xC0, 0x80}, {0xC1, 0xBF}, {0xE0, 0x80, 0x80}, {0xE0, 0x9F, 0xBF}, {0xED, 0xA0, 0x80},
        {0xED, 0xBF, 0xBF}, {0xF0, 0x80, 0x80, 0x80}, {0xF0, 0x8F, 0xBF, 0xBF},
        {0xF4, 0x90, 0x80, 0x80}, {0xF5, 0x80, 0x80, 0x80}, {0xFF}, {0x80}, {0xBF}};
    static const int bad_len[] = {2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 1, 1, 1};
    for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
        cn_state_reset(s);
        bool ok = cn_advance_bytes(s, bad[i], (size_t)bad_len[i]) == ANVIL_OK && cn_accepts(s);
        assert_false(ok);
    }
    cps_free(&set);
    cn_state_free(s);
    cn_program_free(p);
    ir_free(g);
}

static void test_utf8_classes(void **state) {
    (void)state;
    static const uint32_t all[][2] = {{0, CN_MAX_CP}};
    check_cp_set(all, 1);
    static const uint32_t edges[][2] = {{0x7F, 0x80}, {0x7FF, 0x800}, {0xFFFF, 0x10000},
                                        {0xD7FF, 0xE000}, {0x10FFFF, 0x10FFFF}};
    check_cp_set(edges, 5);
    for (int t = 0; t < 6; t++) {
        uint32_t r[6][2];
        int n = 1 + (int)rnd_below(6);
        for (int i = 0; i < n; i++) {
            uint32_t a = rnd_below(CN_MAX_CP + 1), b = a + rnd_below(t < 3 ? 300 : 70000);
            r[i][0] = a;
            r[i][1] = b > CN_MAX_CP ? CN_MAX_CP : b;
        }
        check_cp_set((const uint32_t(*)[2])r, n);
    }
}

/* ---------------------------------------------------------------------- */
/* regex and GBNF against the Earley reference */

static const char *const regexes[] = {
    "abc", "a|b|c", "a*", "(ab)+c?", "[a-c]{2,4}", "x{3}", "(a|ab)(c|bcd)(d*)", "[^a]", ".",
    "\\d+(\\.\\d+)?", "[a-z]+@[a-z]+\\.(com|org)", "(a|b)*a(a|b){3}",
    "\\u00e9|\\u4e2d|\\U0001F600", "[\\u0080-\\u07ff]+", "[\\u0800-\\uffff]", "[^\\x00-\\x7f]",
    "", "()", "a{0,0}b", "(a*)*b", "(|a)+", "[\\w\\s]+", "\\W", "ab|^cd$", "a{2,}", "a{,2}",
    "[-a]", "[a-]", "[]a]", "x{", "a{1,2}?", "\\.\\*\\+", "[\\d-]+", "(?:x|y)(?P<n>z)",
    "é+ü?", "[à-ÿ]{1,3}", "\\x41\\n\\t", "[^\\n]*\\n", "a{}", "a{,}",
};

static void test_regex_vs_ref(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof regexes / sizeof regexes[0]; i++)
        differential(CN_REGEX, regexes[i], 12, 16);
}

static const char *const grammars[] = {
    "root ::= \"a\" | \"b\"",
    "root ::= \"(\" root \")\" | \"\"",
    "root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= factor ([*/] factor)*\n"
    "factor ::= [0-9]+ | \"(\" expr \")\"",
    "root ::= item (\",\" item)*\nitem ::= [a-z]+",
    "root ::= x* \"z\"\nx ::= \"a\"?",
    "root ::= \"a\" root | \"b\"",
    "root ::= a\na ::= \"x\" b | \"y\"\nb ::= \"z\" a",
    "root ::= [^\"\\\\]* \"\\\"\"",
    "root ::= [ab]{2,3} (\"c\"){0,2}",
    "# comment\nroot ::= (\n  \"a\" |  # inline\n  \"b\"\n) \"c\"\n",
    "root ::= obj\nobj ::= \"{\" (pair (\",\" pair)*)? \"}\"\npair ::= str \":\" val\n"
    "str ::= \"\\\"\" [a-z]* \"\\\"\"\nval ::= str | obj | [0-9]+ | \"[\" (val (\",\" val)*)? \"]\"",
    "root ::= a a a\na ::= b b\nb ::= \"x\" | \"y\"",
    "root ::= n? \"!\"\nn ::= \"n\" n?",
    "root ::= (s)*\ns ::= \"<\" s* \">\" | \"x\"",
    "root ::= . .? [\\u4e00-\\u9fff]",
    "root ::= e\ne ::= \"\" | \"a\" e \"b\"",
    "root ::= x{2,4}\nx ::= \"(\" root? \")\"",
};

static void test_gbnf_vs_ref(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof grammars / sizeof grammars[0]; i++)
        differential(CN_GBNF, grammars[i], 12, 20);
}

static void test_purity(void **state) {
    (void)state;
    struct cn_program *p = NULL;
    char err[256];
    assert_int_equal(cn_compile(CN_REGEX, "(ab|c)*d", 8, NULL, &p, err, sizeof err), ANVIL_OK);
    assert_true(p->pure);
    cn_program_free(p);
    const char *g = "root ::= \"(\" root \")\" | \"x\"";
    assert_int_equal(cn_compile(CN_GBNF, g, strlen(g), NULL, &p, err, sizeof err), ANVIL_OK);
    assert_false(p->pure);
    cn_program_free(p);
    /* a non-recursive rule is inlined: pure */
    const char *h = "root ::= a a\na ::= \"x\" | \"y\"";
    assert_int_equal(cn_compile(CN_GBNF, h, strlen(h), NULL, &p, err, sizeof err), ANVIL_OK);
    assert_true(p->pure);
    cn_program_free(p);
}

static void test_errors(void **state) {
    (void)state;
    expect_error(CN_REGEX, "(", ANVIL_ERR_INVALID, "missing )");
    expect_error(CN_REGEX, ")", ANVIL_ERR_INVALID, "unbalanced");
    expect_error(CN_REGEX, "a**", ANVIL_ERR_INVALID, "multiple repeat");
    expect_error(CN_REGEX, "*a", ANVIL_ERR_INVALID, "nothing to repeat");
    expect_error(CN_REGEX, "[a", ANVIL_ERR_INVALID, "unterminated character set");
    expect_error(CN_REGEX, "(a)\\1", ANVIL_ERR_UNSUPPORTED, "backreference");
    expect_error(CN_REGEX, "(?=a)", ANVIL_ERR_UNSUPPORTED, "lookaround");
    expect_error(CN_REGEX, "(?i)a", ANVIL_ERR_UNSUPPORTED, "extension");
    expect_error(CN_REGEX, "a\\b", ANVIL_ERR_UNSUPPORTED, "word boundary");
    expect_error(CN_REGEX, "[z-a]", ANVIL_ERR_INVALID, "bad character range");
    expect_error(CN_REGEX, "a{3,2}", ANVIL_ERR_INVALID, "min repeat greater");
    expect_error(CN_REGEX, "a*+", ANVIL_ERR_UNSUPPORTED, "possessive");
    expect_error(CN_REGEX, "a^b", ANVIL_ERR_UNSUPPORTED, "^");
    expect_error(CN_REGEX, "a$b", ANVIL_ERR_UNSUPPORTED, "$");
    expect_error(CN_REGEX, "\\q", ANVIL_ERR_INVALID, "bad escape");
    expect_error(CN_REGEX, "a{200000}", ANVIL_ERR_UNSUPPORTED, "repetition");
    expect_error(CN_REGEX, "[^\\x00-\\U0010ffff]", ANVIL_ERR_INVALID, "matches no string");
    expect_error(CN_GBNF, "root ::= foo", ANVIL_ERR_INVALID, "undefined rule 'foo'");
    expect_error(CN_GBNF, "root ::= root \"a\" | \"b\"", ANVIL_ERR_INVALID, "left recursion");
    expect_error(CN_GBNF, "root ::= a\na ::= b \"x\"\nb ::= root | \"y\"", ANVIL_ERR_INVALID,
                 "left recursion");
    expect_error(CN_GBNF, "root ::= x root \"a\" | \"b\"\nx ::= \"c\"?", ANVIL_ERR_INVALID,
                 "left recursion");
    expect_error(CN_GBNF, "root ::= (\"a\")* root | \"b\"", ANVIL_ERR_INVALID, "left recursion");
    expect_error(CN_GBNF, "a ::= \"x\"", ANVIL_ERR_INVALID, "no 'root'");
    expect_error(CN_GBNF, "root ::= \"a", ANVIL_ERR_INVALID, "unterminated string");
    expect_error(CN_GBNF, "root = \"a\"", ANVIL_ERR_INVALID, "expecting ::=");
    expect_error(CN_GBNF, "root ::= \"a\"\nroot ::= \"b\"", ANVIL_ERR_INVALID, "defined twice");
    expect_error(CN_GBNF, "root ::= \"\\q\"", ANVIL_ERR_INVALID, "unknown escape");
    expect_error(CN_GBNF, "root ::= <foo>", ANVIL_ERR_UNSUPPORTED, "token references");
    expect_error(CN_GBNF, "root ::= (\"a\"", ANVIL_ERR_INVALID, "expecting ')'");
    expect_error(CN_GBNF, "root ::= \"a\" )", ANVIL_ERR_INVALID, "unbalanced");
    expect_error(CN_GBNF, "root ::= * \"a\"", ANVIL_ERR_INVALID, "before a repetition");
    expect_error(CN_GBNF, "root ::= \"a\"{2,1}", ANVIL_ERR_INVALID, "n < m");
    expect_error(CN_GBNF, "root ::= \"a\" root", ANVIL_ERR_INVALID, "matches no string");
    expect_error(CN_GBNF, "root ::= [b-a]", ANVIL_ERR_INVALID, "out of order");
}

/* ---------------------------------------------------------------------- */
/* bounds */

static void test_bounds(void **state) {
    (void)state;
    double t0 = time_now_s();
    expect_error(CN_REGEX, "(a|b)*a(a|b){20}", ANVIL_ERR_UNSUPPORTED, "too large");
    /* a tighter state bound fails faster, with the same kind of message */
    struct cn_options o = cn_default_options();
    o.limits.max_dfa_states = 1000;
    struct cn_program *p = NULL;
    char err[256];
    const char *re = "(a|b)*a(a|b){12}";
    assert_int_equal(cn_compile(CN_REGEX, re, strlen(re), &o, &p, err, sizeof err),
                     ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "states"));
    /* the work bound */
    o = cn_default_options();
    o.limits.max_work = 100000;
    assert_int_equal(cn_compile(CN_REGEX, re, strlen(re), &o, &p, err, sizeof err),
                     ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "steps"));
    /* NFA size: a long repetition of a big class (the DFA bound comes
     * first by default; a tighter NFA bound catches it earlier) */
    expect_error(CN_REGEX, "[\\u0000-\\U0010ffff]{100000}", ANVIL_ERR_UNSUPPORTED, "too large");
    o = cn_default_options();
    o.limits.max_nfa_states = 10000;
    re = "[a-z]{20000}";
    assert_int_equal(cn_compile(CN_REGEX, re, strlen(re), &o, &p, err, sizeof err),
                     ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "NFA states"));
    /* deep nesting: parentheses past the limit */
    char deep[2100];
    for (int i = 0; i < 1000; i++) deep[i] = '(';
    deep[1000] = 'a';
    for (int i = 0; i < 1000; i++) deep[1001 + i] = ')';
    deep[2001] = 0;
    expect_error(CN_REGEX, deep, ANVIL_ERR_UNSUPPORTED, "nested deeper");
    char gdeep[2200] = "root ::= ";
    size_t n = strlen(gdeep);
    for (int i = 0; i < 1000; i++) gdeep[n++] = '(';
    gdeep[n++] = '"';
    gdeep[n++] = 'a';
    gdeep[n++] = '"';
    for (int i = 0; i < 1000; i++) gdeep[n++] = ')';
    gdeep[n] = 0;
    expect_error(CN_GBNF, gdeep, ANVIL_ERR_UNSUPPORTED, "nested deeper");
    /* a chain of 3000 quantifiers nests the IR without parentheses */
    char *stars = malloc(4000);
    strcpy(stars, "root ::= \"a\"");
    n = strlen(stars);
    for (int i = 0; i < 3000; i++) stars[n++] = '?';
    stars[n] = 0;
    p = NULL;
    anvil_status st = cn_compile(CN_GBNF, stars, n, NULL, &p, err, sizeof err);
    if (st == ANVIL_OK) {
        cn_program_free(p);
    } else {
        assert_int_equal(st, ANVIL_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "nested too deeply"));
    }
    free(stars);
    double dt = time_now_s() - t0;
    if (dt > 20.0) fail_msg("bounded failures took %.1f s", dt);
}

/* ---------------------------------------------------------------------- */
/* vocabulary */

struct tvocab {
    int32_t n;
    uint8_t *bytes[400];
    int32_t len[400];
    uint8_t kind[400];
};

static void tvocab_make(struct tvocab *tv, const uint8_t *alpha, int n_alpha) {
    tv->n = 0;
    for (int i = 0; i < n_alpha; i++) {
        tv->bytes[tv->n] = malloc(1);
        tv->bytes[tv->n][0] = alpha[i];
        tv->len[tv->n] = 1;
        tv->kind[tv->n++] = CN_TOK_TEXT;
    }
    while (tv->n < 300) {
        int len = 2 + (int)rnd_below(5);
        tv->bytes[tv->n] = malloc((size_t)len);
        for (int k = 0; k < len; k++) tv->bytes[tv->n][k] = alpha[rnd_below((uint32_t)n_alpha)];
        tv->len[tv->n] = len;
        tv->kind[tv->n++] = CN_TOK_TEXT;
    }
    /* a duplicate, an EOG, a NEVER, an empty TEXT */
    tv->bytes[tv->n] = malloc(2);
    memcpy(tv->bytes[tv->n], tv->bytes[n_alpha], 2);
    tv->len[tv->n] = 2;
    tv->kind[tv->n++] = CN_TOK_TEXT;
    tv->bytes[tv->n] = NULL;
    tv->len[tv->n] = 0;
    tv->kind[tv->n++] = CN_TOK_EOG;
    tv->bytes[tv->n] = malloc(1);
    tv->bytes[tv->n][0] = alpha[0];
    tv->len[tv->n] = 1;
    tv->kind[tv->n++] = CN_TOK_NEVER;
    tv->bytes[tv->n] = NULL;
    tv->len[tv->n] = 0;
    tv->kind[tv->n++] = CN_TOK_TEXT;
}

static void tvocab_free(struct tvocab *tv) {
    for (int i = 0; i < tv->n; i++) free(tv->bytes[i]);
}

/* Every token's allowed flag three ways: mask, cn_allowed, the reference
 * fed the token's bytes. Then walk by random allowed tokens. */
static void vocab_check(enum cn_kind kind, const char *text) {
    uint8_t alpha[64];
    int n_alpha = 0;
    for (const char *c = text; *c && n_alpha < 40; c++) {
        bool seen = false;
        for (int i = 0; i < n_alpha; i++) seen |= alpha[i] == (uint8_t)*c;
        if (!seen && (uint8_t)*c >= 0x20 && *c != '\\') alpha[n_alpha++] = (uint8_t)*c;
    }
    const uint8_t extra[] = {'a', 'b', '0', '1', ' ', '"', 0xC3, 0xA9};
    for (size_t i = 0; i < sizeof extra && n_alpha < 48; i++) alpha[n_alpha++] = extra[i];
    struct tvocab tv;
    tvocab_make(&tv, alpha, n_alpha);
    struct cn_vocab *v = NULL;
    char err[256];
    assert_int_equal(cn_vocab_build(tv.n, (const uint8_t *const *)tv.bytes, tv.len, tv.kind, &v,
                                    err, sizeof err),
                     ANVIL_OK);
    struct cn_ir *g = parse_ok(kind, text);
    struct cn_program *p = compile_ir_ok(g, text);
    struct cn_ref *r = NULL;
    assert_int_equal(cn_ref_init(g, &r), ANVIL_OK);
    struct cn_state *s = NULL;
    assert_int_equal(cn_state_init(p, v, &s), ANVIL_OK);
    uint8_t mask[(400 + 7) / 8];
    uint8_t path[512];
    size_t plen = 0;
    for (int walk = 0; walk < 6; walk++) {
        cn_state_reset(s);
        cn_ref_reset(r);
        plen = 0;
        for (int step = 0; step < 12; step++) {
            int32_t cnt = cn_fill_mask(s, mask);
            assert_true(cnt >= 0);
            int32_t n_set = 0, allowed_ids[400];
            for (int32_t t = 0; t < tv.n; t++) {
                bool m = (mask[t >> 3] >> (t & 7)) & 1;
                bool a = cn_allowed(s, t);
                bool want;
                if (tv.kind[t] == CN_TOK_EOG)
                    want = cn_ref_accepts(r);
                else if (tv.kind[t] == CN_TOK_NEVER || tv.len[t] == 0)
                    want = false;
                else {
                    want = cn_ref_feed(r, tv.bytes[t], (size_t)tv.len[t]);
                    /* pop what was fed (feeding stops at the first dead byte) */
                    while (cn_ref_len(r) > plen) cn_ref_pop(r);
                }
                if (m != a || a != want) {
                    dump_path(text, path, plen);
                    fail_msg("token %d (len %d): mask %d allowed %d reference %d", t, tv.len[t],
                             m, a, want);
                }
                if (m) allowed_ids[n_set++] = t;
            }
            assert_int_equal(cnt, n_set);
            if (n_set == 0) break;
            int32_t t = allowed_ids[rnd_below((uint32_t)n_set)];
            assert_int_equal(cn_advance(s, t), ANVIL_OK);
            if (tv.kind[t] == CN_TOK_EOG) {
                assert_int_equal(cn_fill_mask(s, mask), 0);
                assert_false(cn_allowed(s, t));
                assert_int_equal(cn_advance(s, t), ANVIL_ERR_INVALID);
                break;
            }
            assert_true(cn_ref_feed(r, tv.bytes[t], (size_t)tv.len[t]));
            for (int k = 0; k < tv.len[t] && plen < sizeof path; k++) path[plen++] = tv.bytes[t][k];
        }
    }
    /* a token that is not allowed leaves the state unchanged */
    cn_state_reset(s);
    assert_true(cn_fill_mask(s, mask) >= 0);
    for (int32_t t = 0; t < tv.n; t++) {
        if ((mask[t >> 3] >> (t & 7)) & 1) continue;
        assert_int_equal(cn_advance(s, t), ANVIL_ERR_INVALID);
        uint8_t mask2[sizeof mask];
        assert_true(cn_fill_mask(s, mask2) >= 0);
        assert_memory_equal(mask, mask2, (size_t)(tv.n + 7) / 8);
        break;
    }
    assert_false(cn_allowed(s, -1));
    assert_false(cn_allowed(s, tv.n));
    cn_state_free(s);
    cn_ref_free(r);
    cn_program_free(p);
    ir_free(g);
    cn_vocab_free(v);
    tvocab_free(&tv);
}

static void test_vocab_masks(void **state) {
    (void)state;
    vocab_check(CN_REGEX, "(ab|a\"b)*c?");
    vocab_check(CN_REGEX, "[a-z0-9 ]{0,8}\"");
    vocab_check(CN_REGEX, "é*1");
    vocab_check(CN_GBNF, grammars[1]);
    vocab_check(CN_GBNF, grammars[10]);
    vocab_check(CN_GBNF, grammars[13]);
    vocab_check(CN_GBNF, "root ::= \"ab\" | \"a\" root \"b\" | \"\\\"\"");
}

static void test_vocab_build(void **state) {
    (void)state;
    char err[256];
    struct cn_vocab *v = NULL;
    const uint8_t a[] = "abc", b[] = "ab", c[] = "b";
    const uint8_t *bytes[] = {a, b, c, a};
    int32_t lens[] = {3, 2, 1, 3};
    assert_int_equal(cn_vocab_build(4, bytes, lens, NULL, &v, err, sizeof err), ANVIL_OK);
    /* trie: a, ab, abc, b -> 4 nodes in preorder, abc holds tokens 0 and 3 */
    assert_int_equal(cn_vocab_n_nodes(v), 4);
    assert_int_equal(v->nodes[0].byte, 'a');
    assert_int_equal(v->nodes[0].skip, 3);
    assert_int_equal(v->nodes[2].ntok, 2);
    assert_int_equal(v->nodes[3].byte, 'b');
    assert_int_equal(v->nodes[3].depth, 1);
    cn_vocab_free(v);
    v = NULL;
    int32_t bad[] = {3, -1, 1, 3};
    assert_int_equal(cn_vocab_build(4, bytes, bad, NULL, &v, err, sizeof err), ANVIL_ERR_INVALID);
    assert_int_equal(cn_vocab_build(0, bytes, lens, NULL, &v, err, sizeof err), ANVIL_ERR_INVALID);
    uint8_t kinds[] = {0, 0, 7, 0};
    assert_int_equal(cn_vocab_build(4, bytes, lens, kinds, &v, err, sizeof err),
                     ANVIL_ERR_INVALID);
    assert_null(v);
}

/* ---------------------------------------------------------------------- */
/* state copy, reset, out of memory */

static void test_copy_reset(void **state) {
    (void)state;
    const char *g = grammars[10];
    struct cn_program *p = NULL;
    char err[256];
    assert_int_equal(cn_compile(CN_GBNF, g, strlen(g), NULL, &p, err, sizeof err), ANVIL_OK);
    struct cn_state *s = NULL, *cp = NULL, *other = NULL;
    assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
    assert_int_equal(cn_state_init(p, NULL, &cp), ANVIL_OK);
    const char *a = "{\"ab\":[1,{\"c\":";
    assert_int_equal(cn_advance_bytes(s, (const uint8_t *)a, strlen(a)), ANVIL_OK);
    assert_int_equal(cn_state_copy(cp, s), ANVIL_OK);
    const char *rest = "\"x\"}]}";
    assert_int_equal(cn_advance_bytes(s, (const uint8_t *)rest, strlen(rest)), ANVIL_OK);
    assert_true(cn_accepts(s));
    assert_false(cn_accepts(cp));
    assert_int_equal(cn_min_remaining(cp), 4); /* a one-digit value, then "}]}" */
    assert_int_equal(cn_advance_bytes(cp, (const uint8_t *)rest, strlen(rest)), ANVIL_OK);
    assert_true(cn_accepts(cp));
    /* all or nothing */
    assert_int_equal(cn_advance_bytes(cp, (const uint8_t *)"}", 1), ANVIL_ERR_INVALID);
    assert_true(cn_accepts(cp));
    cn_state_reset(cp);
    assert_false(cn_accepts(cp));
    assert_int_equal(cn_min_remaining(cp), 2);
    /* copy between programs is refused */
    struct cn_program *p2 = NULL;
    assert_int_equal(cn_compile(CN_REGEX, "a", 1, NULL, &p2, err, sizeof err), ANVIL_OK);
    assert_int_equal(cn_state_init(p2, NULL, &other), ANVIL_OK);
    assert_int_equal(cn_state_copy(other, s), ANVIL_ERR_INVALID);
    cn_state_free(s);
    cn_state_free(cp);
    cn_state_free(other);
    cn_program_free(p);
    cn_program_free(p2);
}

/* Fail each allocation of compile + state init + advance in turn: every
 * run must end in ANVIL_ERR_NOMEM at some stage and leak nothing. */
static void oom_walk(enum cn_kind kind, const char *text, const char *input) {
    char err[256];
    struct cn_program *p = NULL;
    struct cn_state *s = NULL;
    uint64_t c0 = anvil_alloc_count();
    assert_int_equal(cn_compile(kind, text, strlen(text), NULL, &p, err, sizeof err), ANVIL_OK);
    assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
    assert_int_equal(cn_advance_bytes(s, (const uint8_t *)input, strlen(input)), ANVIL_OK);
    assert_true(cn_accepts(s));
    uint64_t total = anvil_alloc_count() - c0;
    cn_state_free(s);
    cn_program_free(p);
    for (uint64_t n = 1; n <= total; n++) {
        int64_t live0 = anvil_alloc_live();
        p = NULL;
        s = NULL;
        anvil_alloc_fail_at(n);
        anvil_status st = cn_compile(kind, text, strlen(text), NULL, &p, err, sizeof err);
        if (st == ANVIL_OK) {
            st = cn_state_init(p, NULL, &s);
            if (st == ANVIL_OK) {
                st = cn_advance_bytes(s, (const uint8_t *)input, strlen(input));
                if (st != ANVIL_OK) assert_false(cn_accepts(s)); /* unchanged: at the start */
            }
        }
        anvil_alloc_fail_at(0);
        if (st != ANVIL_ERR_NOMEM)
            fail_msg("allocation %llu of %llu failed: status %d, want out of memory (%s)",
                     (unsigned long long)n, (unsigned long long)total, st,
                     st == ANVIL_OK ? "" : err);
        cn_state_free(s);
        cn_program_free(p);
        assert_int_equal(anvil_alloc_live(), live0);
    }
}

static void test_oom(void **state) {
    (void)state;
    oom_walk(CN_REGEX, "[a-z]+(,[a-z]+)*", "ab,c");
    oom_walk(CN_GBNF, grammars[10], "{\"a\":[{},1]}");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_classes),
        cmocka_unit_test(test_regex_vs_ref),
        cmocka_unit_test(test_gbnf_vs_ref),
        cmocka_unit_test(test_purity),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_vocab_build),
        cmocka_unit_test(test_vocab_masks),
        cmocka_unit_test(test_copy_reset),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
