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
 *   - the schema lowering's languages spelled out (accepted and refused
 *     texts, the value writer's one spelling of enum/const values);
 *   - errors (syntax, undefined rules, left recursion, unsupported
 *     features, keywords), bounds (exploding regexes, huge enums, deep
 *     nesting: the error, not its time, which bench_constrain measures),
 *     state copy/reset, and out-of-memory at every allocation of compile,
 *     state init and advance.
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
        fail_msg("<<%.200s>>: status %d (want %d), message '%s' (want '%s')", text, st, want, err,
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
/* JSON Schema: numbers */

/* A program for one IR node built by f; the caller frees both. */
static struct cn_program *program_of(struct cn_ir *g, uint32_t body) {
    uint32_t root = ir_rule_add(g, "root", 4);
    ir_rule_define(g, root, body);
    g->root = root;
    assert_true(ir_ok(g));
    return compile_ir_ok(g, "range");
}

static bool accepts_str(struct cn_state *s, const char *t) {
    cn_state_reset(s);
    return cn_advance_bytes(s, (const uint8_t *)t, strlen(t)) == ANVIL_OK && cn_accepts(s);
}

static void test_int_range(void **state) {
    (void)state;
    for (int trial = 0; trial < 60; trial++) {
        bool lo_set = rnd_below(4) != 0, hi_set = rnd_below(4) != 0;
        int64_t lo = (int64_t)rnd_below(2400) - 1200, hi = (int64_t)rnd_below(2400) - 1200;
        if (trial < 4) { /* edges around zero */
            lo = trial - 2;
            hi = lo + trial;
            lo_set = hi_set = true;
        }
        if (lo_set && hi_set && lo > hi) {
            int64_t t = lo;
            lo = hi;
            hi = t;
        }
        struct cn_ir *g = NULL;
        assert_int_equal(ir_init(&g, 0), ANVIL_OK);
        struct cn_program *p = program_of(g, ir_int_range(g, lo_set, lo, hi_set, hi, 19));
        struct cn_state *s = NULL;
        assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
        for (int64_t v = -1600; v <= 1600; v++) {
            char t[32];
            snprintf(t, sizeof t, "%lld", (long long)v);
            bool in = (!lo_set || v >= lo) && (!hi_set || v <= hi);
            if (accepts_str(s, t) != in)
                fail_msg("[%lld%s, %lld%s]: %s accepted %d", (long long)lo, lo_set ? "" : "(unset)",
                         (long long)hi, hi_set ? "" : "(unset)", t, !in);
        }
        static const char *never[] = {"-0", "00", "01", "+1", "1.0", "", "-", "1e3", "--1", "0-"};
        for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) assert_false(accepts_str(s, never[i]));
        /* unbounded sides reach 19 digits, no more */
        if (!hi_set) {
            assert_true(accepts_str(s, "9999999999999999999"));
            assert_false(accepts_str(s, "10000000000000000000"));
        }
        if (!lo_set) assert_true(accepts_str(s, "-9223372036854775807"));
        cn_state_free(s);
        cn_program_free(p);
        ir_free(g);
    }
}

/* exact value of a short decimal string, times 1000 (3 fraction digits at most) */
static bool scaled(const char *t, int64_t *out) {
    bool neg = *t == '-';
    if (neg) t++;
    int64_t ip = 0, fp = 0;
    int nf = 0;
    for (; *t && *t != '.'; t++) ip = ip * 10 + (*t - '0');
    if (*t == '.')
        for (t++; *t; t++) {
            if (nf == 3) return false;
            fp = fp * 10 + (*t - '0');
            nf++;
        }
    while (nf < 3) fp *= 10, nf++;
    *out = (ip * 1000 + fp) * (neg ? -1 : 1);
    return true;
}

static void test_num_range(void **state) {
    (void)state;
    static const char *bs[] = {"0", "-0", "2.25", "-1.5", "0.1", "7", "-20", "0.05", "-0.75", "13.5",
                               "1", "-3"};
    const int nb = (int)(sizeof bs / sizeof bs[0]);
    for (int trial = 0; trial < 70; trial++) {
        const char *ls = bs[rnd_below((uint32_t)nb)], *hs = bs[rnd_below((uint32_t)nb)];
        bool lo_set = rnd_below(5) != 0, hi_set = rnd_below(5) != 0;
        bool lx = rnd_below(2), hx = rnd_below(2);
        int64_t L, H;
        scaled(ls, &L);
        scaled(hs, &H);
        if (lo_set && hi_set && (L > H || (L == H && (lx || hx)))) continue;
        struct dec_bound dl = {0}, dh = {0};
        if (lo_set) assert_true(dec_from_double(strtod(ls, NULL), lx, &dl));
        if (hi_set) assert_true(dec_from_double(strtod(hs, NULL), hx, &dh));
        struct cn_ir *g = NULL;
        assert_int_equal(ir_init(&g, 0), ANVIL_OK);
        struct cn_program *p = program_of(g, ir_num_range(g, &dl, &dh));
        struct cn_state *s = NULL;
        assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
        for (int sign = 0; sign < 2; sign++)
            for (int ip = 0; ip <= 25; ip++)
                for (int nf = 0; nf <= 3; nf++)
                    for (int f = 0; f < (nf ? (nf == 3 ? 40 : 100) : 1); f++) {
                        int fv = nf == 3 ? (int)rnd_below(1000) : f;
                        if (nf == 1 && fv >= 10) break;
                        char t[40];
                        if (nf)
                            snprintf(t, sizeof t, "%s%d.%0*d", sign ? "-" : "", ip, nf, fv);
                        else
                            snprintf(t, sizeof t, "%s%d", sign ? "-" : "", ip);
                        int64_t v;
                        scaled(t, &v);
                        bool in = (!lo_set || (lx ? v > L : v >= L)) && (!hi_set || (hx ? v < H : v <= H));
                        if (sign && v == 0) in = false; /* no "-0" spellings */
                        if (accepts_str(s, t) != in)
                            fail_msg("lo %s%s%s hi %s%s%s: %s accepted %d", lo_set ? ls : "-", lx ? "(x)" : "",
                                     "", hi_set ? hs : "-", hx ? "(x)" : "", "", t, !in);
                    }
        static const char *never[] = {"01", "1.", ".5", "+1", "1e2", "00.1", "--1", "1.2.3"};
        for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) assert_false(accepts_str(s, never[i]));
        /* at most 15 digits once a fraction is present */
        if ((!hi_set || H >= 2000) && (!lo_set || L <= 1000)) {
            assert_true(accepts_str(s, "1.00000000000001"));
            assert_false(accepts_str(s, "1.000000000000001"));
        }
        cn_state_free(s);
        cn_program_free(p);
        ir_free(g);
    }
    struct dec_bound d;
    assert_true(dec_from_double(1e-14, false, &d));
    assert_string_equal(d.ip, "0");
    assert_string_equal(d.fp, "00000000000001");
    assert_false(dec_from_double(1e-15, false, &d));
    assert_false(dec_from_double(1e15, false, &d));
    assert_false(dec_from_double(0.1234567890123456, false, &d));
    assert_true(dec_from_double(-123456.789, false, &d));
    assert_true(d.neg);
    assert_string_equal(d.ip, "123456");
    assert_string_equal(d.fp, "789");
}

/* ---------------------------------------------------------------------- */
/* JSON Schema: lowering against the reference, errors */

static const char *const schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"enum\":[1,\"x\",null]}},"
    "\"required\":[\"b\"]}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":12},"
    "\"b\":{\"type\":\"string\",\"maxLength\":3},\"c\":{\"type\":\"array\",\"items\":{\"type\":\"null\"},"
    "\"maxItems\":2}}}",
    "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"k\":{\"type\":"
    "\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/t\"}",
    "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"x\":{\"const\":1}},\"required\":[\"x\"]},"
    "{\"type\":\"string\",\"pattern\":\"^a+$\"}]}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"boolean\"},{\"type\":\"number\",\"minimum\":0,"
    "\"maximum\":1}],\"minItems\":1}",
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"additionalProperties\":{"
    "\"type\":\"boolean\"}}",
    "{\"type\":[\"string\",\"null\"],\"format\":\"date\"}",
    "{\"type\":\"object\"}",
    "true",
    "{\"type\":\"string\",\"pattern\":\"a.c\"}",
};

static void test_schema_vs_ref(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++)
        differential(CN_JSON_SCHEMA, schemas[i], 10, 40);
}

static void test_schema_errors(void **state) {
    (void)state;
    const anvil_status U = ANVIL_ERR_UNSUPPORTED, I = ANVIL_ERR_INVALID;
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"object\",\"foo\":1}", U, "unknown keyword 'foo'");
    expect_error(CN_JSON_SCHEMA, "{\"not\":{}}", U, "keyword 'not' is not supported");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"a\":{\"if\":{}}}}", U,
                 "at /properties/a: keyword 'if'");
    expect_error(CN_JSON_SCHEMA, "{\"allOf\":[{},{}]}", U, "more than one");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"strin\"}", I, "unknown type");
    expect_error(CN_JSON_SCHEMA, "{\"$ref\":\"http://x/y\"}", U, "only '#'");
    expect_error(CN_JSON_SCHEMA, "{\"$ref\":\"#/$defs/missing\"}", I, "points at nothing");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"(a\"}", I, "missing )");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"hostname\"}", U,
                 "format 'hostname'");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}", I,
                 "no integer");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"number\",\"minimum\":0.1234567890123456}", U,
                 "15 significant");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"number\",\"maximum\":1e20}", U, "1e15");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":1e300}", U, "2^53");
    expect_error(CN_JSON_SCHEMA, "{\"properties\":{\"a\":{}},\"required\":[\"b\"]}", U,
                 "required property 'b'");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true}", U, "uniqueItems");
    expect_error(CN_JSON_SCHEMA, "{\"enum\":[]}", I, "non-empty");
    expect_error(CN_JSON_SCHEMA, "{\"enum\":[1,2],\"type\":\"string\"}", I, "leaves no value");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"integer\",\"multipleOf\":3}", U, "multipleOf");
    expect_error(CN_JSON_SCHEMA, "{\"$ref\":\"#\",\"type\":\"object\"}", U, "next to '$ref'");
    expect_error(CN_JSON_SCHEMA, "not json", I, "not valid JSON");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"object\"} x", I, "trailing");
    expect_error(CN_JSON_SCHEMA, "{\"enum\":[1],\"minimum\":0}", U, "together with 'enum'");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", I, "below");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"array\",\"prefixItems\":[{}],\"minItems\":3}", I,
                 "'minItems' above");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":2}", U,
                 "together");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\",\"maxLength\":5}", I,
                 "outside the length");
    expect_error(CN_JSON_SCHEMA, "{\"anyOf\":[]}", I, "non-empty");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"minLength\":-1}", I, "non-negative");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":\"3\"}", I, "must be a number");
    expect_error(CN_JSON_SCHEMA, "false", I, "matches no string");
    expect_error(CN_JSON_SCHEMA, "{\"properties\":{\"a\":false},\"required\":[\"a\"]}", I,
                 "matches no string");
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"string\",\"maxLength\":1000000}", U, "length bounds");
    expect_error(CN_JSON_SCHEMA, "[1,2]", I, "object or a boolean");
    /* an error inside additionalProperties (found by fuzz_constrain: the
     * extra-member flag was written at index -1) */
    expect_error(CN_JSON_SCHEMA, "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\","
                 "\"m\xff\xffum\":0}}", U, "at /additionalProperties: unknown keyword");
}

/* The language of a few schemas, spelled out: accepted and refused texts. */
static void test_schema_language(void **state) {
    (void)state;
    struct {
        const char *schema;
        const char *yes[6], *no[8];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
         "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}",
         {"{\"b\":\"\"}", "{\"a\":1,\"b\":\"x\"}", "{\"a\":-3,\"b\":\"x\",\"c\":true}",
          "{ \"b\": \"y\" }", "{\n  \"b\": \"\\u00e9\",\n  \"c\": false\n}", NULL},
         {"{}", "{\"b\":\"x\",\"a\":1}", "{\"a\":1}", "{\"b\":\"x\",}", "{\"b\":\"x\",\"d\":1}",
          "{\"b\":\"\\ud800\"}", "{\"b\" :\"x\"}", NULL}},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"},\"b\":{\"type\":\"null\"}}}",
         {"{}", "{\"a\":null}", "{\"b\":null}", "{\"a\":null,\"b\":null}", NULL},
         {"{,\"b\":null}", "{\"b\":null,\"a\":null}", "{\"a\":null,}", NULL}},
        {"{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"null\"}},\"additionalProperties\":"
         "{\"type\":\"integer\"}}",
         {"{\"ab\":null}", "{\"ab\":null,\"a\":1}", "{\"abc\":2,\"b\":3}", "{\"x\":1}", "{}", NULL},
         {"{\"ab\":1}", "{\"x\":1,\"ab\":null}", "{\"a\\u0062\":1}", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^\\\"[a-z]\\\\\\\\$\"}",
         {"\"\\\"q\\\\\"", NULL},
         {"\"\"q\\\"", "\"\\\"q\\\"", "\"\\\"Q\\\\\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"^[0-9]{2}(-[0-9])?$\"}",
         {"\"12\"", "\"12-3\"", NULL},
         {"\"12-3!\"", "\"12!-3\"", "\"1\"", NULL}},
        {"{\"type\":\"string\",\"pattern\":\"b(c)d\"}",
         {"\"bcd\"", "\"abcde\"", "\"x\\nbcd\"", NULL},
         {"\"bd\"", "\"b c d\"", NULL}},
        {"{\"type\":\"string\",\"format\":\"date\"}",
         {"\"2024-02-29\"", "\"2023-12-31\"", "\"0001-01-01\"", "\"2000-02-29\"", NULL},
         {"\"2023-02-29\"", "\"1900-02-29\"", "\"0000-01-01\"", "\"2023-04-31\"", "\"2023-13-01\"",
          "\"2023-1-01\"", NULL}},
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
         {"[1,2]", "[1, 2, 3]", "[\n 1,\n 2\n]", NULL},
         {"[]", "[1]", "[1,2,3,4]", "[1,,2]", "[1,2,]", NULL}},
        {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
         {"\"ab\"", "\"\\n\\t\"", "\"\\u00e9\\u00e9\\u00e9\"", "\"éü\"", NULL},
         {"\"a\"", "\"abcd\"", "\"\\ud83d\\ude00\"", NULL}},
        {"{\"enum\":[\"a\\\"b\",{\"k\":[1,2.5]},-0.5,true]}",
         {"\"a\\\"b\"", "{\"k\":[1,2.5]}", "{\"k\": [1, 2.5]}", "-0.5", "true", NULL},
         {"\"a\"b\"", "{\"k\":[2.5,1]}", "{\"k\":[1,2.50]}", "-.5", "false", NULL}},
        /* the value writer's one spelling (schema_json.c): DEL and UTF-8 raw,
         * controls as lowercase \u00XX; integers below 2^53 plain, other
         * numbers the shortest round trip */
        {"{\"enum\":[\"a\\u007fb\\u001F\xc3\xa9\",1.0,0.1,1e21,123456789012345678]}",
         {"\"a\x7f" "b\\u001f\xc3\xa9\"", "1", "0.1", "1e+21", "1.2345678901234568e+17", NULL},
         {"\"a\\u007fb\\u001f\xc3\xa9\"", "\"a\x7f" "b\\u001F\xc3\xa9\"",
          "\"a\x7f" "b\\u001f\\u00e9\"", "1.0", "1e21", "123456789012345678", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cn_program *p = NULL;
        char err[256];
        if (cn_compile(CN_JSON_SCHEMA, cases[i].schema, strlen(cases[i].schema), NULL, &p, err,
                       sizeof err) != ANVIL_OK)
            fail_msg("%s: %s", cases[i].schema, err);
        struct cn_state *s = NULL;
        assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
        for (int k = 0; cases[i].yes[k]; k++)
            if (!accepts_str(s, cases[i].yes[k]))
                fail_msg("%s should accept %s", cases[i].schema, cases[i].yes[k]);
        for (int k = 0; cases[i].no[k]; k++)
            if (accepts_str(s, cases[i].no[k]))
                fail_msg("%s should refuse %s", cases[i].schema, cases[i].no[k]);
        cn_state_free(s);
        cn_program_free(p);
    }
}

/* ---------------------------------------------------------------------- */
/* bounds */

static void test_bounds(void **state) {
    (void)state;
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
    /* (3000 levels are within the builders' bound of 4096: it compiles,
     * without a stack overflow, to "a" or nothing) */
    p = NULL;
    assert_int_equal(cn_compile(CN_GBNF, stars, n, NULL, &p, err, sizeof err), ANVIL_OK);
    struct cn_state *s3 = NULL;
    assert_int_equal(cn_state_init(p, NULL, &s3), ANVIL_OK);
    assert_true(accepts_str(s3, ""));
    assert_true(accepts_str(s3, "a"));
    assert_false(accepts_str(s3, "aa"));
    cn_state_free(s3);
    cn_program_free(p);
    p = NULL;
    free(stars);
    /* schemas nested 200 deep (our bound) and 1000 deep (cJSON's) */
    for (int depth = 200; depth <= 1000; depth += 800) {
        size_t cap = (size_t)depth * 40 + 64, m = 0;
        char *sch = malloc(cap);
        for (int i = 0; i < depth; i++) m += (size_t)snprintf(sch + m, cap - m, "{\"type\":\"array\",\"items\":");
        m += (size_t)snprintf(sch + m, cap - m, "{\"type\":\"null\"}");
        for (int i = 0; i < depth; i++) sch[m++] = '}';
        sch[m] = 0;
        expect_error(CN_JSON_SCHEMA, sch, depth == 200 ? ANVIL_ERR_UNSUPPORTED : ANVIL_ERR_INVALID,
                     depth == 200 ? "nested deeper than" : "nesting is limited");
        free(sch);
    }
    /* a 10,000-value enum compiles (a trie-shaped DFA), within the bounds */
    {
        size_t cap = 400000, m = 0;
        char *sch = malloc(cap);
        m += (size_t)snprintf(sch + m, cap - m, "{\"enum\":[");
        for (int i = 0; i < 10000; i++)
            m += (size_t)snprintf(sch + m, cap - m, "%s\"value-%d-%x\"", i ? "," : "", i, i * 2654435761u);
        m += (size_t)snprintf(sch + m, cap - m, "]}");
        assert_int_equal(cn_compile(CN_JSON_SCHEMA, sch, m, NULL, &p, err, sizeof err), ANVIL_OK);
        struct cn_state *s = NULL;
        assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
        /* the first, a middle and the last value; a near miss of each */
        assert_true(accepts_str(s, "\"value-0-0\""));
        assert_true(accepts_str(s, "\"value-9999-b8ca185f\""));
        char one[64];
        snprintf(one, sizeof one, "\"value-%d-%x\"", 4321, 4321 * 2654435761u);
        assert_true(accepts_str(s, one));
        assert_false(accepts_str(s, "\"value-4321-0\""));
        assert_false(accepts_str(s, "\"value-9999-b8ca185\""));
        assert_false(accepts_str(s, "\"value-10000-0\""));
        cn_state_free(s);
        cn_program_free(p);
        p = NULL;
        /* and a tighter bound fails it cleanly */
        o = cn_default_options();
        o.limits.max_dfa_states = 5000;
        assert_int_equal(cn_compile(CN_JSON_SCHEMA, sch, m, &o, &p, err, sizeof err),
                         ANVIL_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "states"));
        free(sch);
    }
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
            /* cached or not, the same mask */
            uint8_t walked[sizeof mask];
            assert_int_equal(cn_fill_mask_walk(s, walked), cnt);
            assert_memory_equal(mask, walked, (size_t)(tv.n + 7) / 8);
            assert_int_equal(cn_fill_mask(s, walked), cnt);
            assert_memory_equal(mask, walked, (size_t)(tv.n + 7) / 8);
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

/* Every token sequence up to a depth over a 12-token vocabulary, allowed
 * or not: each token's allowed flag (and the mask) against the reference
 * fed the concatenated bytes. */
static void exhaustive_rec(struct cn_state *s, struct cn_ref *r, const struct cn_vocab *v,
                           const uint8_t *const *tb, const int32_t *tl, int n, int depth,
                           size_t fed) {
    uint8_t mask[2];
    int32_t cnt = cn_fill_mask(s, mask);
    assert_true(cnt >= 0);
    struct cn_state *c = NULL;
    assert_int_equal(cn_state_init(s->p, v, &c), ANVIL_OK);
    for (int t = 0; t < n; t++) {
        bool want;
        if (tl[t] == 0) {
            want = cn_ref_accepts(r); /* the EOG token */
        } else {
            want = cn_ref_feed(r, tb[t], (size_t)tl[t]);
        }
        bool got = cn_allowed(s, t), bit = (mask[t >> 3] >> (t & 7)) & 1;
        if (got != want || bit != want)
            fail_msg("token %d after %zu bytes: allowed %d mask %d reference %d", t, fed, got, bit, want);
        if (tl[t] && depth > 0) {
            assert_int_equal(cn_state_copy(c, s), ANVIL_OK);
            anvil_status st = cn_advance(c, t);
            assert_int_equal(st, want ? ANVIL_OK : ANVIL_ERR_INVALID);
            if (want) exhaustive_rec(c, r, v, tb, tl, n, depth - 1, fed + (size_t)tl[t]);
        }
        while (cn_ref_len(r) > fed) cn_ref_pop(r);
    }
    cn_state_free(c);
}

static void test_exhaustive_small_vocab(void **state) {
    (void)state;
    static const struct {
        enum cn_kind kind;
        const char *src;
        const char *toks[11];
    } cases[] = {
        {CN_REGEX, "(ab|b)*a?c", {"a", "b", "c", "ab", "ba", "bc", "abc", "cc", "aab", "bb", "x"}},
        {CN_GBNF, "root ::= \"(\" root \")\" root | \"\"", {"(", ")", "()", "((", "))", ")(", "(()", "())", "x", "(((", ")))"}},
        {CN_GBNF, "root ::= a+\na ::= \"x\" | \"y\" a \"z\"", {"x", "y", "z", "xy", "yz", "zx", "yx", "xz", "yyx", "zz", "xx"}},
        {CN_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"enum\":[1,12]},\"maxItems\":2}",
         {"[", "]", "1", "2", ",", "[1", "12", "1,", "2]", " ", "[]"}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const uint8_t *tb[12];
        int32_t tl[12];
        uint8_t kinds[12];
        for (int t = 0; t < 11; t++) {
            tb[t] = (const uint8_t *)cases[k].toks[t];
            tl[t] = (int32_t)strlen(cases[k].toks[t]);
            kinds[t] = CN_TOK_TEXT;
        }
        tb[11] = NULL;
        tl[11] = 0;
        kinds[11] = CN_TOK_EOG;
        struct cn_vocab *v = NULL;
        char err[256];
        assert_int_equal(cn_vocab_build(12, tb, tl, kinds, &v, err, sizeof err), ANVIL_OK);
        struct cn_options o = cn_default_options();
        o.ws = CN_WS_COMPACT;
        struct cn_ir *g = NULL;
        assert_int_equal(cn_parse(cases[k].kind, cases[k].src, strlen(cases[k].src), &o, &g, err, sizeof err), ANVIL_OK);
        struct cn_program *p = NULL;
        assert_int_equal(cn_compile_ir(g, &o, &p, err, sizeof err), ANVIL_OK);
        struct cn_ref *r = NULL;
        assert_int_equal(cn_ref_init(g, &r), ANVIL_OK);
        struct cn_state *s = NULL;
        assert_int_equal(cn_state_init(p, v, &s), ANVIL_OK);
        exhaustive_rec(s, r, v, tb, tl, 12, 4, 0);
        cn_state_free(s);
        cn_ref_free(r);
        cn_program_free(p);
        ir_free(g);
        cn_vocab_free(v);
    }
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

/* Control tokens allowed by their text (cn_state_set_specials): a
 * calls-style literal "a<|m|>b" where <|m|> is a control token (NEVER in
 * the vocabulary) that the state is given as a special. */
static void test_specials(void **state) {
    (void)state;
    static const char *const toks[] = {"a", "b", "<", "|m|>", "", ""};
    const uint8_t *tb[6];
    int32_t tl[6];
    uint8_t kinds[6] = {CN_TOK_TEXT, CN_TOK_TEXT, CN_TOK_TEXT, CN_TOK_TEXT, CN_TOK_NEVER,
                        CN_TOK_EOG};
    for (int t = 0; t < 6; t++) {
        tb[t] = (const uint8_t *)toks[t];
        tl[t] = (int32_t)strlen(toks[t]);
    }
    char err[256];
    struct cn_vocab *v = NULL;
    assert_int_equal(cn_vocab_build(6, tb, tl, kinds, &v, err, sizeof err), ANVIL_OK);
    const char *src = "a<\\|m\\|>b";
    struct cn_program *p = NULL;
    assert_int_equal(cn_compile(CN_REGEX, src, strlen(src), NULL, &p, err, sizeof err), ANVIL_OK);
    struct cn_state *s = NULL, *cp = NULL;
    assert_int_equal(cn_state_init(p, v, &s), ANVIL_OK);
    assert_int_equal(cn_state_init(p, v, &cp), ANVIL_OK);
    uint8_t mask[1];
    /* without specials the control token is never allowed */
    assert_int_equal(cn_advance(s, 0), ANVIL_OK);
    assert_false(cn_allowed(s, 4));
    assert_int_equal(cn_fill_mask(s, mask), 1);
    assert_int_equal(mask[0], 1u << 2); /* "<" only */
    static const anvil_token ids[] = {4, 1};
    static const uint8_t m[] = "<|m|>", bb[] = "zz";
    const uint8_t *sb[] = {m, bb};
    static const int32_t sl[] = {5, 2};
    /* token 1 is text: its own bytes count, not the special's */
    cn_state_set_specials(s, 2, ids, sb, sl);
    assert_true(cn_allowed(s, 4));
    assert_false(cn_allowed(s, 1));
    for (int rep = 0; rep < 2; rep++) { /* the second from the mask cache */
        assert_int_equal(cn_fill_mask(s, mask), 2);
        assert_int_equal(mask[0], (1u << 2) | (1u << 4));
    }
    assert_int_equal(cn_state_copy(cp, s), ANVIL_OK);
    assert_int_equal(cn_advance(cp, 4), ANVIL_OK);
    assert_false(cn_allowed(cp, 4));
    assert_true(cn_allowed(cp, 1));
    assert_int_equal(cn_advance(cp, 1), ANVIL_OK);
    assert_true(cn_accepts(cp));
    assert_true(cn_allowed(cp, 5));
    /* the text spelling is still the same output */
    assert_int_equal(cn_advance(s, 2), ANVIL_OK);
    assert_int_equal(cn_advance(s, 3), ANVIL_OK);
    assert_false(cn_allowed(s, 4));
    assert_int_equal(cn_fill_mask(s, mask), 1);
    assert_int_equal(mask[0], 1u << 1);
    /* a special outside the vocabulary or a cleared set allows nothing */
    cn_state_set_specials(cp, 0, NULL, NULL, NULL);
    cn_state_reset(cp);
    assert_int_equal(cn_advance(cp, 0), ANVIL_OK);
    assert_int_equal(cn_advance(cp, 4), ANVIL_ERR_INVALID);
    cn_state_free(s);
    cn_state_free(cp);
    cn_program_free(p);
    cn_vocab_free(v);
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
    uint64_t c0 = core_alloc_count();
    assert_int_equal(cn_compile(kind, text, strlen(text), NULL, &p, err, sizeof err), ANVIL_OK);
    assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
    assert_int_equal(cn_advance_bytes(s, (const uint8_t *)input, strlen(input)), ANVIL_OK);
    assert_true(cn_accepts(s));
    uint64_t total = core_alloc_count() - c0;
    cn_state_free(s);
    cn_program_free(p);
    for (uint64_t n = 1; n <= total; n++) {
        int64_t live0 = core_alloc_live();
        p = NULL;
        s = NULL;
        core_alloc_fail_at(n);
        anvil_status st = cn_compile(kind, text, strlen(text), NULL, &p, err, sizeof err);
        if (st == ANVIL_OK) {
            st = cn_state_init(p, NULL, &s);
            if (st == ANVIL_OK) {
                st = cn_advance_bytes(s, (const uint8_t *)input, strlen(input));
                if (st != ANVIL_OK) assert_false(cn_accepts(s)); /* unchanged: at the start */
            }
        }
        core_alloc_fail_at(0);
        if (st != ANVIL_ERR_NOMEM)
            fail_msg("allocation %llu of %llu failed: status %d, want out of memory (%s)",
                     (unsigned long long)n, (unsigned long long)total, st,
                     st == ANVIL_OK ? "" : err);
        cn_state_free(s);
        cn_program_free(p);
        assert_int_equal(core_alloc_live(), live0);
    }
}

static void test_oom(void **state) {
    (void)state;
    oom_walk(CN_REGEX, "[a-z]+(,[a-z]+)*", "ab,c");
    oom_walk(CN_GBNF, grammars[10], "{\"a\":[{},1]}");
    oom_walk(CN_JSON_SCHEMA,
             "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1},"
             "\"b\":{\"enum\":[\"x\",\"y\"]},\"c\":{\"type\":\"string\",\"pattern\":\"^[a-z]+$\"}},"
             "\"required\":[\"a\"],\"additionalProperties\":{\"type\":\"number\",\"maximum\":2.5}}",
             "{\"a\":5,\"c\":\"q\",\"zz\":-1.25}");
    oom_walk(CN_JSON_SCHEMA, schemas[2], "{\"v\":1,\"k\":[{\"v\":2}]}");
    oom_walk(CN_JSON, "", "{\"a\":[1,{\"b\":null}]}");
    /* the vocabulary index and a mask walk */
    const uint8_t a[] = "ab", b[] = "abc", c[] = "b";
    const uint8_t *bytes[] = {a, b, c, NULL};
    int32_t lens[] = {2, 3, 1, 0};
    uint8_t kinds[] = {0, 0, 0, CN_TOK_EOG};
    uint64_t c0 = core_alloc_count();
    struct cn_vocab *v = NULL;
    char err[256];
    assert_int_equal(cn_vocab_build(4, bytes, lens, kinds, &v, err, sizeof err), ANVIL_OK);
    uint64_t total = core_alloc_count() - c0;
    cn_vocab_free(v);
    for (uint64_t n = 1; n <= total; n++) {
        int64_t live0 = core_alloc_live();
        v = NULL;
        core_alloc_fail_at(n);
        anvil_status st = cn_vocab_build(4, bytes, lens, kinds, &v, err, sizeof err);
        core_alloc_fail_at(0);
        assert_int_equal(st, ANVIL_ERR_NOMEM);
        assert_null(v);
        assert_int_equal(core_alloc_live(), live0);
    }
    assert_int_equal(cn_vocab_build(4, bytes, lens, kinds, &v, err, sizeof err), ANVIL_OK);
    const char *g = "root ::= \"(\" root \")\" | \"ab\"";
    struct cn_program *p = NULL;
    assert_int_equal(cn_compile(CN_GBNF, g, strlen(g), NULL, &p, err, sizeof err), ANVIL_OK);
    struct cn_state *s = NULL;
    assert_int_equal(cn_state_init(p, v, &s), ANVIL_OK);
    uint8_t mask[1];
    for (uint64_t n = 1; n < 64; n++) {
        cn_state_free(s);
        s = NULL;
        assert_int_equal(cn_state_init(p, v, &s), ANVIL_OK);
        core_alloc_fail_at(n);
        int32_t cnt = cn_fill_mask(s, mask);
        core_alloc_fail_at(0);
        if (cnt >= 0) {
            assert_int_equal(cnt, 1); /* "ab" */
            assert_int_equal(mask[0], 1);
            break;
        }
        assert_int_equal(cnt, ANVIL_ERR_NOMEM);
    }
    cn_state_free(s);
    cn_program_free(p);
    cn_vocab_free(v);
}


/* CN_CALLS: one or more calls, each the alternation of literal markers
 * around a tool's schema; names outside the list are refused */
static bool calls_match(const struct cn_program *p, const char *t) {
    struct cn_state *s = NULL;
    assert_int_equal(cn_state_init(p, NULL, &s), ANVIL_OK);
    bool ok = accepts_str(s, t);
    cn_state_free(s);
    return ok;
}

static void test_calls(void **state) {
    (void)state;
    static const char doc[] =
        "{\"$defs\": {\"t0\": {\"type\": \"object\", \"properties\": {\"city\": {\"enum\": "
        "[\"Paris\"]}}, \"required\": [\"city\"], \"additionalProperties\": false},"
        " \"t1\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", "
        "\"minimum\": 0, \"maximum\": 9}}, \"required\": [\"n\"], \"additionalProperties\": false}},"
        " \"calls\": [{\"before\": \"<c>a:\", \"schema\": {\"$ref\": \"#/$defs/t0\"}, \"after\": \"</c>\"},"
        " {\"before\": \"<c>b:\", \"schema\": {\"$ref\": \"#/$defs/t1\"}, \"after\": \"</c>\"}],"
        " \"sep\": \"\\n\", \"end\": \".\", \"max\": %d}";
    char text[1024], err[256];
    struct cn_options o = cn_default_options();
    o.ws = CN_WS_COMPACT;
    for (int max = 0; max <= 1; max++) {
        snprintf(text, sizeof text, doc, max);
        struct cn_program *p = NULL;
        assert_int_equal(cn_compile(CN_CALLS, text, strlen(text), &o, &p, err, sizeof err), ANVIL_OK);
        assert_true(calls_match(p, "<c>a:{\"city\":\"Paris\"}</c>."));
        assert_true(calls_match(p, "<c>b:{\"n\":3}</c>."));
        assert_false(calls_match(p, "<c>c:{\"n\":3}</c>."));          /* not a tool */
        assert_false(calls_match(p, "<c>a:{\"n\":3}</c>."));          /* b's arguments under a */
        assert_false(calls_match(p, "<c>b:{\"n\":10}</c>."));         /* out of b's schema */
        assert_false(calls_match(p, "."));                            /* at least one */
        bool two = calls_match(p, "<c>a:{\"city\":\"Paris\"}</c>\n<c>b:{\"n\":0}</c>.");
        assert_true(two == (max == 0));
        cn_program_free(p);
    }
    static const char *const bad[] = {"{}", "{\"calls\": []}", "{\"calls\": [{\"before\": 1, "
                                      "\"schema\": {}}]}", "{\"calls\": [{}]}", "[1]",
                                      "{\"calls\": [{\"schema\": {\"nope\": 1}}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct cn_program *p = NULL;
        assert_int_not_equal(cn_compile(CN_CALLS, bad[i], strlen(bad[i]), &o, &p, err, sizeof err),
                             ANVIL_OK);
        assert_null(p);
        assert_true(err[0] != 0);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_classes),
        cmocka_unit_test(test_regex_vs_ref),
        cmocka_unit_test(test_gbnf_vs_ref),
        cmocka_unit_test(test_purity),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_calls),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_int_range),
        cmocka_unit_test(test_num_range),
        cmocka_unit_test(test_schema_vs_ref),
        cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_schema_language),
        cmocka_unit_test(test_vocab_build),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_exhaustive_small_vocab),
        cmocka_unit_test(test_vocab_masks),
        cmocka_unit_test(test_copy_reset),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
