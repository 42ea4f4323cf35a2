/*
 * unit_tok.c - the tokenizer on hand-made vocabularies: UTF-8 readers, the
 * GPT-2 byte alphabet, pre-tokenizer splits, BPE against a naive O(n^2)
 * twin on random words, special-token partition (llama.cpp's order),
 * decoding and the streaming detokenizer, chat templates, tok_load on tiny
 * GGUF files (good and bad), and an out-of-memory walk.
 *
 * The differential test against llama-cpp-python on the real vocabulary is
 * tests/py/test_tok.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// helpers

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* A toy vocabulary description owning its strings. */
struct toy {
    char **tok;
    int32_t *type;
    int n_tok, cap_tok;
    char **merge;
    int n_merge, cap_merge;
};

static void toy_tok(struct toy *t, const char *s, int type) {
    if (t->n_tok == t->cap_tok) {
        t->cap_tok = t->cap_tok * 2 + 16;
        t->tok = realloc(t->tok, sizeof(char *) * (size_t)t->cap_tok);
        t->type = realloc(t->type, sizeof(int32_t) * (size_t)t->cap_tok);
    }
    t->tok[t->n_tok] = strdup(s);
    t->type[t->n_tok++] = type;
}

static void toy_merge(struct toy *t, const char *s) {
    if (t->n_merge == t->cap_merge) {
        t->cap_merge = t->cap_merge * 2 + 16;
        t->merge = realloc(t->merge, sizeof(char *) * (size_t)t->cap_merge);
    }
    t->merge[t->n_merge++] = strdup(s);
}

/* All 256 byte characters, in byte order, as tokens 0..255. */
static void toy_bytes(struct toy *t) {
    for (int b = 0; b < 256; b++) {
        char u[5] = {0};
        utf8_encode(utf8_byte_to_cp((uint8_t)b), u);
        toy_tok(t, u, TOK_TYPE_NORMAL);
    }
}

static void toy_free(struct toy *t) {
    for (int i = 0; i < t->n_tok; i++) free(t->tok[i]);
    for (int i = 0; i < t->n_merge; i++) free(t->merge[i]);
    free(t->tok);
    free(t->type);
    free(t->merge);
    memset(t, 0, sizeof(*t));
}

static anvil_status toy_build(const struct toy *t, const char *pre, const char *tmpl,
                              struct tok_vocab **v, char *err) {
    struct gguf_str *ts = calloc((size_t)t->n_tok + 1, sizeof(*ts));
    struct gguf_str *ms = calloc((size_t)t->n_merge + 1, sizeof(*ms));
    for (int i = 0; i < t->n_tok; i++) ts[i] = (struct gguf_str){t->tok[i], strlen(t->tok[i])};
    for (int i = 0; i < t->n_merge; i++)
        ms[i] = (struct gguf_str){t->merge[i], strlen(t->merge[i])};
    struct tok_spec s = {
        .kind = TOK_KIND_BPE,
        .pre = {pre, pre ? strlen(pre) : 0},
        .n_tokens = t->n_tok,
        .tokens = ts,
        .types = t->type,
        .n_merges = t->n_merge,
        .merges = ms,
        .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .eom = -1,
        .add_bos = -1, .add_eos = -1,
        .chat_template = {tmpl, tmpl ? strlen(tmpl) : 0},
    };
    anvil_status st = tok_build(&s, v, err, ANVIL_ERRMSG_CAP);
    free(ts);
    free(ms);
    return st;
}

static int encode(const struct tok_vocab *v, const char *s, size_t n, anvil_token *out, int cap,
                  bool parse_special) {
    int32_t r = tok_encode(v, s, n, out, cap, false, parse_special);
    assert_true(r >= 0);
    return r;
}

static int id_of(const struct toy *t, const char *s) {
    for (int i = 0; i < t->n_tok; i++)
        if (!strcmp(t->tok[i], s)) return i;
    fail_msg("no token '%s'", s);
    return -1;
}

// ----------------------------------------------------------------------------
// UTF-8

static void test_utf8_lenient(void **state) {
    (void)state;
    struct {
        const char *in;
        uint32_t cps[8];
        int n;
    } cases[] = {
        {"a", {'a'}, 1},
        {"\xc3\xa9", {0xe9}, 1},
        {"\xe2\x82\xac", {0x20ac}, 1},
        {"\xf0\x9f\x98\x80", {0x1f600}, 1},
        {"\x80", {0xfffd}, 1},                       /* lone continuation */
        {"\xe2\x82", {0xfffd, 0xfffd}, 2},           /* truncated: every byte */
        {"\xe2\x82" "a", {0xfffd, 0xfffd, 'a'}, 3},
        {"\xc0\xaf", {'/'}, 1},                      /* overlong: passes, like llama.cpp */
        {"\xe0\x80\x80", {0}, 1},
        {"\xed\xa0\x80", {0xd800}, 1},               /* surrogate: passes */
        {"\xff\xfe", {0xfffd, 0xfffd}, 2},
        {"\xf8\x88\x80\x80\x80", {0xfffd, 0xfffd, 0xfffd, 0xfffd, 0xfffd}, 5},
        {"\xf4\x90\x80\x80", {0xfffd, 0xfffd, 0xfffd, 0xfffd}, 4}, /* > U+10FFFF: our deviation */
        {"\xc3" "a", {0xfffd, 'a'}, 2},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const unsigned char *s = (const unsigned char *)cases[c].in;
        size_t n = strlen(cases[c].in), i = 0;
        if (n == 0) n = 1;
        int k = 0;
        while (i < n) {
            uint32_t cp = utf8_decode_lenient(s, n, &i);
            assert_true(k < cases[c].n);
            assert_int_equal(cp, cases[c].cps[k]);
            k++;
        }
        assert_int_equal(k, cases[c].n);
    }
    /* the NUL byte is a character like any other */
    size_t i = 0;
    assert_int_equal(utf8_decode_lenient((const unsigned char *)"\0", 1, &i), 0);
    assert_int_equal(i, 1);
}

static void test_utf8_strict(void **state) {
    (void)state;
    struct {
        const char *in;
        int n, want;
    } cases[] = {
        {"a", 1, 1},
        {"\xc3\xa9", 2, 2},
        {"\xc3", 1, 0},
        {"\xe2\x82", 2, 0},
        {"\xe2\x82\xac", 3, 3},
        {"\xf0\x9f\x98", 3, 0},
        {"\xf0\x9f\x98\x80", 4, 4},
        {"\x80", 1, -1},
        {"\xc0\xaf", 2, -1},        /* C0 never starts a character */
        {"\xe0\x80\x80", 3, -1},    /* overlong: E0 needs A0..BF */
        {"\xed\xa0\x80", 3, -1},    /* surrogate: ED needs 80..9F */
        {"\xf4\x90\x80\x80", 4, -1},
        {"\xf5\x80", 2, -1},
        {"\xe2\x82" "a", 3, -2},    /* maximal subpart of 2 bytes */
        {"\xf0\x9f\x98" "a", 4, -3},
        {"\xe2" "a", 2, -1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
        assert_int_equal(utf8_next_strict((const unsigned char *)cases[c].in, (size_t)cases[c].n),
                         cases[c].want);
}

static void test_byte_alphabet(void **state) {
    (void)state;
    bool seen[512] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = utf8_byte_to_cp((uint8_t)b);
        assert_true(cp < 512);
        assert_false(seen[cp]);
        seen[cp] = true;
        assert_int_equal(utf8_cp_to_byte(cp), b);
    }
    assert_int_equal(utf8_byte_to_cp(' '), 0x120);  /* 'Ġ' */
    assert_int_equal(utf8_byte_to_cp('\n'), 0x10a); /* 'Ċ' */
    assert_int_equal(utf8_byte_to_cp(0xad), 0x143);
    assert_int_equal(utf8_byte_to_cp('a'), 'a');
    assert_int_equal(utf8_cp_to_byte(0x20), -1);
    assert_int_equal(utf8_cp_to_byte(0x144), -1);
}

// ----------------------------------------------------------------------------
// pre-tokenizers

/* Split `text` with pre-tokenizer `pre` and compare with the '|'-joined
 * expectation. */
static void check_split(const char *pre, const char *text, const char *want) {
    struct tok_pretok p;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(pretok_init(&p, (struct gguf_str){pre, strlen(pre)}, err, sizeof(err)),
                     ANVIL_OK);
    struct tok_work w;
    memset(&w, 0, sizeof(w));
    size_t n;
    assert_int_equal(pretok_split(&p, text, strlen(text), &w, &n), ANVIL_OK);
    char got[512] = "";
    size_t g = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) got[g++] = '|';
        memcpy(got + g, text + w.spans[i].start, w.spans[i].len);
        g += w.spans[i].len;
    }
    got[g] = 0;
    if (strcmp(got, want)) fail_msg("pre %s: '%s' -> '%s', want '%s'", pre, text, got, want);
    tok_work_free(&w);
    pretok_free(&p);
}

static void test_pretok_splits(void **state) {
    (void)state;
    check_split("gpt2", "Hello world", "Hello| world");
    check_split("gpt2", "I'm here, it's 2024!", "I|'m| here|,| it|'s| 2024|!");
    check_split("gpt2", "a  b", "a| | b");
    check_split("gpt2", "a   \n", "a|   \n");
    check_split("gpt2", "x\n\ny", "x|\n|\n|y");
    check_split("gpt2", "  ", "  ");
    check_split("gpt2", "don'T", "don|'|T"); /* gpt2 contractions are case-sensitive */
    check_split("gpt2", "a\xc2\xa0" "b", "a|\xc2\xa0|b"); /* NBSP is whitespace */
    check_split("smollm", "abc 123", "abc| |1|2|3");
    check_split("smollm", "x1.5", "x|1|.|5");
    check_split("smollm", "\xd9\xa3\xd9\xa4", "\xd9\xa3|\xd9\xa4"); /* Arabic-Indic digits */
    check_split("llama3", "1234567", "123|456|7");
    check_split("llama3", "don'T", "don|'T");
    check_split("llama3", "  \n\n  x", "  \n\n| | x");
    check_split("llama3", "(hello)", "(hello|)");
    check_split("llama3", "!!\n\nx", "!!\n\n|x");
    check_split("qwen2", "123", "1|2|3");
    check_split("default", "a+b=12345", "a|+|b|=|123|45");
}

static void test_pretok_unknown(void **state) {
    (void)state;
    struct tok_pretok p;
    char err[ANVIL_ERRMSG_CAP] = "";
    assert_int_equal(pretok_init(&p, (struct gguf_str){"no-such-pre", 11}, err, sizeof(err)),
                     ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "no-such-pre"));
}

// ----------------------------------------------------------------------------
// BPE against a naive twin

/* The obviously correct version: rescan all pairs after every merge, take
 * the lowest rank, leftmost on ties. Works on strings. */
static int naive_bpe(const struct toy *t, const char *word, int *out) {
    char *parts[64];
    int n = 0;
    for (const char *p = word; *p; p++) parts[n++] = strndup(p, 1);
    for (;;) {
        int best = -1, best_rank = 1 << 30;
        for (int i = 0; i + 1 < n; i++) {
            size_t la = strlen(parts[i]), lb = strlen(parts[i + 1]);
            char *m = malloc(la + lb + 2);
            memcpy(m, parts[i], la);
            m[la] = ' ';
            memcpy(m + la + 1, parts[i + 1], lb + 1);
            for (int r = 0; r < t->n_merge && r < best_rank; r++)
                if (!strcmp(t->merge[r], m)) {
                    best_rank = r;
                    best = i;
                }
            free(m);
        }
        if (best < 0) break;
        size_t la = strlen(parts[best]), lb = strlen(parts[best + 1]);
        char *j = malloc(la + lb + 1);
        memcpy(j, parts[best], la);
        memcpy(j + la, parts[best + 1], lb + 1);
        free(parts[best]);
        free(parts[best + 1]);
        parts[best] = j;
        memmove(parts + best + 1, parts + best + 2, sizeof(char *) * (size_t)(n - best - 2));
        n--;
    }
    for (int i = 0; i < n; i++) {
        out[i] = id_of(t, parts[i]);
        free(parts[i]);
    }
    return n;
}

static void test_bpe_vs_naive(void **state) {
    (void)state;
    for (int trial = 0; trial < 40; trial++) {
        struct toy t = {0};
        toy_bytes(&t);
        /* random merges over a 4-letter alphabet; only merges of existing
         * tokens, each creating a new token */
        int n_merges = 5 + (int)(rnd() % 40);
        for (int k = 0; k < n_merges; k++) {
            int a = (int)(rnd() % (uint32_t)t.n_tok), b = (int)(rnd() % (uint32_t)t.n_tok);
            const char *sa = a < 256 ? NULL : t.tok[a], *sb = b < 256 ? NULL : t.tok[b];
            char ca[2] = {(char)('a' + rnd() % 4), 0}, cb[2] = {(char)('a' + rnd() % 4), 0};
            if (!sa) sa = ca;
            if (!sb) sb = cb;
            if (strlen(sa) + strlen(sb) > 12) continue;
            char m[40], cat[40];
            snprintf(m, sizeof(m), "%s %s", sa, sb);
            snprintf(cat, sizeof(cat), "%s%s", sa, sb);
            bool dup = false;
            for (int i = 0; i < t.n_merge; i++) dup |= !strcmp(t.merge[i], m);
            if (dup) continue;
            toy_merge(&t, m);
            bool have = false;
            for (int i = 0; i < t.n_tok; i++) have |= !strcmp(t.tok[i], cat);
            if (!have) toy_tok(&t, cat, TOK_TYPE_NORMAL);
        }
        struct tok_vocab *v;
        char err[ANVIL_ERRMSG_CAP];
        assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
        for (int w = 0; w < 50; w++) {
            char word[40];
            int len = 1 + (int)(rnd() % 30);
            for (int i = 0; i < len; i++) word[i] = (char)('a' + rnd() % 4);
            word[len] = 0;
            int want[64], got[64];
            int nw = naive_bpe(&t, word, want);
            int ng = encode(v, word, (size_t)len, got, 64, false);
            assert_int_equal(ng, nw);
            for (int i = 0; i < nw; i++) assert_int_equal(got[i], want[i]);
        }
        tok_free(v);
        toy_free(&t);
    }
}

/* A merge whose result is not a token still chains (llama.cpp works on
 * strings), and a final non-token symbol falls back to one-byte tokens. */
static void test_bpe_non_token_merges(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "abc", TOK_TYPE_NORMAL);
    toy_merge(&t, "a b"); /* "ab" is not a token */
    toy_merge(&t, "ab c");
    toy_merge(&t, "x y"); /* "xy" is not a token, and nothing continues it */
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
    anvil_token ids[8];
    assert_int_equal(encode(v, "abc", 3, ids, 8, false), 1);
    assert_int_equal(ids[0], id_of(&t, "abc"));
    assert_int_equal(encode(v, "xy", 2, ids, 8, false), 2);
    assert_int_equal(ids[0], 'x');
    assert_int_equal(ids[1], 'y');
    tok_free(v);
    toy_free(&t);
}

/* Long words stay fast and correct: 20k bytes with no split points. */
static void test_bpe_long_word(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "aa", TOK_TYPE_NORMAL);
    toy_tok(&t, "aaaa", TOK_TYPE_NORMAL);
    toy_merge(&t, "a a");
    toy_merge(&t, "aa aa");
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
    size_t n = 20001;
    char *s = malloc(n);
    memset(s, 'a', n);
    anvil_token *ids = malloc(sizeof(anvil_token) * n);
    int k = encode(v, s, n, ids, (int)n, false);
    assert_int_equal(k, 5000 + 1);
    for (int i = 0; i < 5000; i++) assert_int_equal(ids[i], id_of(&t, "aaaa"));
    assert_int_equal(ids[5000], 'a');
    /* too small a buffer: the needed count, negated */
    assert_int_equal(tok_encode(v, s, n, ids, 10, false, false), -5001);
    free(ids);
    free(s);
    tok_free(v);
    toy_free(&t);
}

// ----------------------------------------------------------------------------
// special tokens

static void test_special_partition(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "<s>", TOK_TYPE_CONTROL);       /* 256 */
    toy_tok(&t, "@@", TOK_TYPE_USER_DEFINED);    /* 257 */
    toy_tok(&t, "ab", TOK_TYPE_CONTROL);         /* 258 */
    toy_tok(&t, "bcd", TOK_TYPE_CONTROL);        /* 259 */
    toy_tok(&t, "<|im_end|>", TOK_TYPE_NORMAL);  /* 260: forced to control, EOG */
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
    anvil_token ids[32];
    /* control tokens only with parse_special, user-defined always */
    int n = encode(v, "x<s>@@y", 7, ids, 32, true);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 'x');
    assert_int_equal(ids[1], 256);
    assert_int_equal(ids[2], 257);
    assert_int_equal(ids[3], 'y');
    n = encode(v, "x<s>@@y", 7, ids, 32, false);
    assert_int_equal(n, 6); /* x < s > @@ y */
    assert_int_equal(ids[4], 257);
    /* llama.cpp order: longest token first over the whole text, so "bcd"
     * wins over "ab" in "abcd" */
    n = encode(v, "abcd", 4, ids, 32, true);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 'a');
    assert_int_equal(ids[1], 259);
    /* an end-of-turn text is a control token whatever its type says */
    assert_true(tok_is_eog(v, 260));
    n = encode(v, "<|im_end|>", 10, ids, 32, true);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 260);
    char buf[16];
    assert_int_equal(tok_piece(v, 260, buf, sizeof(buf), false), 0);
    assert_int_equal(tok_piece(v, 260, buf, sizeof(buf), true), 10);
    assert_int_equal(tok_piece(v, 257, buf, sizeof(buf), false), 2); /* user-defined prints */
    /* partial special text is plain text */
    n = encode(v, "<s", 2, ids, 32, true);
    assert_int_equal(n, 2);
    tok_free(v);
    toy_free(&t);
}

// ----------------------------------------------------------------------------
// decoding

static void test_piece_and_detok(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
    char buf[32];
    /* byte tokens decode to the byte */
    for (int b = 0; b < 256; b++) {
        assert_int_equal(tok_piece(v, b, buf, sizeof(buf), false), 1);
        assert_int_equal((unsigned char)buf[0], b);
    }
    assert_int_equal(tok_piece(v, 'a', buf, 0, false), -1);
    assert_int_equal(tok_piece(v, -1, buf, sizeof(buf), false), 0);
    assert_int_equal(tok_piece(v, 100000, buf, sizeof(buf), false), 0);

    /* "é€😀" fed byte by byte: output only at character ends */
    const unsigned char s[] = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    struct anvil_detok d = {{0}, 0};
    int emitted_at[9];
    char all[64];
    size_t tot = 0;
    for (int i = 0; i < 9; i++) {
        int r = tok_detok_push(v, &d, s[i], buf, sizeof(buf));
        assert_true(r >= 0);
        emitted_at[i] = r;
        memcpy(all + tot, buf, (size_t)r);
        tot += (size_t)r;
    }
    int want[9] = {0, 2, 0, 0, 3, 0, 0, 0, 4};
    for (int i = 0; i < 9; i++) assert_int_equal(emitted_at[i], want[i]);
    assert_int_equal(tot, 9);
    assert_memory_equal(all, s, 9);
    assert_int_equal(tok_detok_flush(&d, buf, sizeof(buf)), 0);

    /* invalid bytes become U+FFFD; an unfinished tail is one U+FFFD at flush */
    tok_detok_push(v, &d, 0x80, buf, sizeof(buf));
    assert_string_equal(buf, "\xef\xbf\xbd");
    assert_int_equal(tok_detok_push(v, &d, 0xe2, buf, sizeof(buf)), 0);
    assert_int_equal(tok_detok_push(v, &d, 0x82, buf, sizeof(buf)), 0);
    /* too small: the need is reported and the state kept */
    assert_int_equal(tok_detok_push(v, &d, 'a', buf, 2), -5);
    assert_int_equal(d.n_pend, 2);
    assert_int_equal(tok_detok_push(v, &d, 'a', buf, sizeof(buf)), 4);
    assert_string_equal(buf, "\xef\xbf\xbd" "a");
    tok_detok_push(v, &d, 0xf0, buf, sizeof(buf));
    assert_int_equal(tok_detok_flush(&d, buf, 2), -4);
    assert_int_equal(tok_detok_flush(&d, buf, sizeof(buf)), 3);
    assert_string_equal(buf, "\xef\xbf\xbd");
    assert_int_equal(d.n_pend, 0);
    tok_free(v);
    toy_free(&t);
}

/* Random bytes: encode never fails, and for valid UTF-8 decode(encode(x))
 * is x again. */
static void test_roundtrip_random(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "<|im_start|>", TOK_TYPE_CONTROL);
    toy_tok(&t, "Ġt", TOK_TYPE_NORMAL);
    toy_tok(&t, "he", TOK_TYPE_NORMAL);
    toy_merge(&t, "Ġ t");
    toy_merge(&t, "h e");
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(&t, "smollm", NULL, &v, err), ANVIL_OK);
    static const char *bits[] = {"a", " ", "\n", "1", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                 "'s", "<|im_start|>", "\xff", "\x80", "\xed\xa0\x80", "\t", "he"};
    for (int trial = 0; trial < 300; trial++) {
        char s[256];
        size_t n = 0;
        bool valid = true;
        int parts = (int)(rnd() % 20);
        for (int k = 0; k < parts; k++) {
            size_t b = rnd() % (sizeof(bits) / sizeof(bits[0]));
            if (b >= 9 && b <= 11) valid = false;
            size_t l = strlen(bits[b]);
            memcpy(s + n, bits[b], l);
            n += l;
        }
        anvil_token ids[256];
        int k = encode(v, s, n, ids, 256, false);
        if (!valid) continue;
        char back[512];
        size_t m = 0;
        for (int i = 0; i < k; i++) {
            int r = tok_piece(v, ids[i], back + m, (int32_t)(sizeof(back) - m), true);
            assert_true(r >= 0);
            m += (size_t)r;
        }
        assert_int_equal(m, n);
        assert_memory_equal(back, s, n);
    }
    tok_free(v);
    toy_free(&t);
}

// ----------------------------------------------------------------------------
// chat templates

static const char smollm2_tmpl[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

static void render(const struct tok_vocab *v, const struct anvil_chat_msg *m, size_t n, bool add,
                   const char *want) {
    char buf[1024];
    int32_t need = tok_chat_apply(v, m, n, add, buf, 3);
    assert_int_equal(need, -(int32_t)strlen(want) - 1);
    int32_t r = tok_chat_apply(v, m, n, add, buf, -need);
    assert_int_equal(r, (int32_t)strlen(want));
    assert_string_equal(buf, want);
}

static void test_chat(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_chat_msg m[3] = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", " Bye "}};
    struct anvil_chat_msg ms[2] = {{"system", "Be brief."}, {"user", "Hi"}};

    assert_int_equal(toy_build(&t, "gpt2", smollm2_tmpl, &v, err), ANVIL_OK);
    render(v, m, 1, true,
           "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
           "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    render(v, ms, 2, false,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    tok_free(v);

    /* a ChatML template without a default system turn */
    assert_int_equal(toy_build(&t, "gpt2",
                               "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + "
                               "m['content'] + '<|im_end|>\\n'}}{% endfor %}",
                               &v, err),
                     ANVIL_OK);
    render(v, m, 3, false,
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
           "<|im_start|>user\n Bye <|im_end|>\n");
    tok_free(v);

    assert_int_equal(toy_build(&t, "gpt2", "{{ '<|start_header_id|>' }}", &v, err), ANVIL_OK);
    render(v, m + 1, 2, true,
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    tok_free(v);

    /* unknown or missing template: 0, the caller falls back */
    char buf[64];
    assert_int_equal(toy_build(&t, "gpt2", "{{ messages }}", &v, err), ANVIL_OK);
    assert_int_equal(tok_chat_apply(v, m, 1, true, buf, sizeof(buf)), 0);
    tok_free(v);
    assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
    assert_int_equal(tok_chat_apply(v, m, 1, true, buf, sizeof(buf)), 0);
    tok_free(v);
    toy_free(&t);
}

// ----------------------------------------------------------------------------
// tok_load on tiny GGUF files

struct gbuf {
    uint8_t *p;
    size_t n, cap;
};

static void gput(struct gbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void g32(struct gbuf *b, uint32_t v) { gput(b, &v, 4); }
static void g64(struct gbuf *b, uint64_t v) { gput(b, &v, 8); }
static void gstr(struct gbuf *b, const char *s) {
    g64(b, strlen(s));
    gput(b, s, strlen(s));
}
static void gkv_str(struct gbuf *b, const char *k, const char *v) {
    gstr(b, k);
    g32(b, GGUF_VT_STRING);
    gstr(b, v);
}
static void gkv_strs(struct gbuf *b, const char *k, const char *const *v, int n) {
    gstr(b, k);
    g32(b, GGUF_VT_ARRAY);
    g32(b, GGUF_VT_STRING);
    g64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) gstr(b, v[i]);
}
static void gkv_i32s(struct gbuf *b, const char *k, const int32_t *v, int n) {
    gstr(b, k);
    g32(b, GGUF_VT_ARRAY);
    g32(b, GGUF_VT_INT32);
    g64(b, (uint64_t)n);
    gput(b, v, sizeof(int32_t) * (size_t)n);
}

/* A GGUF with only tokenizer metadata; `drop`/`model`/`pre`/`n_types`
 * make it bad in one way. Returns the status of tok_load. */
static anvil_status load_tiny(const char *model, const char *pre, int n_types, bool drop_merges,
                              char *err, struct tok_vocab **out) {
    static const char *const toks[] = {"<|endoftext|>", "a", "b", "ab", "Ġ", "Ġab"};
    static const char *const merges[] = {"a b", "Ġ ab"};
    static const int32_t types[] = {3, 1, 1, 1, 1, 1};
    struct gbuf b = {0};
    int n_kv = 3 + (pre != NULL) + (n_types > 0) + !drop_merges;
    gput(&b, "GGUF", 4);
    g32(&b, 3);
    g64(&b, 0);
    g64(&b, (uint64_t)n_kv);
    gkv_str(&b, "general.architecture", "llama");
    gkv_str(&b, "tokenizer.ggml.model", model);
    if (pre) gkv_str(&b, "tokenizer.ggml.pre", pre);
    gkv_strs(&b, "tokenizer.ggml.tokens", toks, 6);
    if (n_types > 0) gkv_i32s(&b, "tokenizer.ggml.token_type", types, n_types);
    if (!drop_merges) gkv_strs(&b, "tokenizer.ggml.merges", merges, 2);
    char path[] = "/tmp/anvil_unit_tok_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    free(b.p);
    struct gguf_file *f;
    anvil_status st = gguf_open(path, &f, err, ANVIL_ERRMSG_CAP);
    unlink(path);
    assert_int_equal(st, ANVIL_OK);
    st = tok_load(f, out, err, ANVIL_ERRMSG_CAP);
    gguf_close(f);
    return st;
}

static void test_load_gguf(void **state) {
    (void)state;
    char err[ANVIL_ERRMSG_CAP];
    struct tok_vocab *v = NULL;
    assert_int_equal(load_tiny("gpt2", "smollm", 6, false, err, &v), ANVIL_OK);
    anvil_token ids[8];
    assert_int_equal(encode(v, " ab<|endoftext|>", 16, ids, 8, true), 2);
    assert_int_equal(ids[0], 5);
    assert_int_equal(ids[1], 0);
    assert_int_equal(tok_n_vocab(v), 6);
    assert_true(tok_is_eog(v, 0)); /* "<|endoftext|>" */
    tok_free(v);

    v = NULL;
    assert_int_equal(load_tiny("llama", "smollm", 6, false, err, &v), ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "llama"));
    assert_int_equal(load_tiny("gpt2", "klingon", 6, false, err, &v), ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "klingon"));
    assert_int_equal(load_tiny("gpt2", "smollm", 3, false, err, &v), ANVIL_ERR_FORMAT);
    assert_int_equal(load_tiny("gpt2", "smollm", 6, true, err, &v), ANVIL_ERR_FORMAT);
    assert_non_null(strstr(err, "merges"));
    assert_null(v);
    /* no pre-tokenizer: llama.cpp's "default" */
    assert_int_equal(load_tiny("gpt2", NULL, 0, false, err, &v), ANVIL_OK);
    tok_free(v);
}

// ----------------------------------------------------------------------------
// one vocabulary, several threads

static const char *const mt_texts[] = {
    "Hello world, it's 2024!", "<|im_start|>user\n\xf0\x9f\x98\x80 hi<|im_end|>",
    "  \t\n  spaces  ", "\xff\xfe bad bytes", "the theory of everything 1234567",
};
#define MT_N (sizeof(mt_texts) / sizeof(mt_texts[0]))

struct mt_job {
    const struct tok_vocab *v;
    anvil_token want[MT_N][64];
    int n_want[MT_N];
    int errors;
};

static void *mt_worker(void *arg) {
    struct mt_job *j = arg;
    for (int rep = 0; rep < 200; rep++) {
        for (size_t i = 0; i < MT_N; i++) {
            anvil_token got[64];
            int32_t n = tok_encode(j->v, mt_texts[i], strlen(mt_texts[i]), got, 64, false, true);
            if (n != j->n_want[i] || memcmp(got, j->want[i], sizeof(anvil_token) * (size_t)n))
                __atomic_add_fetch(&j->errors, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void test_threads_share_vocab(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "<|im_start|>", TOK_TYPE_CONTROL);
    toy_tok(&t, "<|im_end|>", TOK_TYPE_CONTROL);
    toy_tok(&t, "th", TOK_TYPE_NORMAL);
    toy_tok(&t, "the", TOK_TYPE_NORMAL);
    toy_tok(&t, "\xc4\xa0the", TOK_TYPE_NORMAL); /* "Ġthe" */
    toy_merge(&t, "t h");
    toy_merge(&t, "th e");
    toy_merge(&t, "\xc4\xa0 the");
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(&t, "smollm", NULL, &v, err), ANVIL_OK);
    static struct mt_job job;
    memset(&job, 0, sizeof(job));
    job.v = v;
    for (size_t i = 0; i < MT_N; i++)
        job.n_want[i] = encode(v, mt_texts[i], strlen(mt_texts[i]), job.want[i], 64, true);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, mt_worker, &job), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    assert_int_equal(job.errors, 0);
    tok_free(v);
    toy_free(&t);
}

// ----------------------------------------------------------------------------
// out of memory

static void test_oom_walk(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "<s>", TOK_TYPE_CONTROL);
    toy_tok(&t, "ab", TOK_TYPE_NORMAL);
    toy_merge(&t, "a b");
    const char *text = "ab <s> 12 \xff ab";
    int64_t live0 = anvil_alloc_live();
    bool done = false;
    for (uint64_t k = 1; k < 2000 && !done; k++) {
        struct tok_vocab *v = NULL;
        char err[ANVIL_ERRMSG_CAP];
        anvil_alloc_fail_at(k);
        anvil_status st = toy_build(&t, "smollm", smollm2_tmpl, &v, err);
        if (st == ANVIL_OK) {
            anvil_token ids[32];
            int32_t r = tok_encode(v, text, strlen(text), ids, 32, false, true);
            if (r >= 0) done = true;
            else assert_int_equal(r, INT32_MIN);
            tok_free(v);
        } else {
            assert_int_equal(st, ANVIL_ERR_NOMEM);
            assert_null(v);
        }
        anvil_alloc_fail_at(0);
        assert_int_equal(anvil_alloc_live(), live0);
    }
    assert_true(done);
    toy_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_lenient),
        cmocka_unit_test(test_utf8_strict),
        cmocka_unit_test(test_byte_alphabet),
        cmocka_unit_test(test_pretok_splits),
        cmocka_unit_test(test_pretok_unknown),
        cmocka_unit_test(test_bpe_vs_naive),
        cmocka_unit_test(test_bpe_non_token_merges),
        cmocka_unit_test(test_bpe_long_word),
        cmocka_unit_test(test_special_partition),
        cmocka_unit_test(test_piece_and_detok),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_load_gguf),
        cmocka_unit_test(test_threads_share_vocab),
        cmocka_unit_test(test_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
