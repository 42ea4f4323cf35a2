/*
 * unit_tok.c - the tokenizer on hand-made vocabularies: UTF-8 readers, the
 * GPT-2 byte alphabet, pre-tokenizer splits, BPE (byte-level and raw) and
 * SentencePiece merging each against a naive O(n^2) twin on random input,
 * the special-token partition against llama.cpp's literal algorithm
 * (with LSTRIP/RSTRIP and protected spans), 1 MB through SPM in linear
 * time, decoding and the streaming detokenizer, every chat template
 * family, chat tokenizing that keeps message content text, tok_load on
 * tiny GGUF files (good and bad), and an out-of-memory walk.
 *
 * The differential tests against llama-cpp-python on real vocabularies
 * are tests/py/test_tok.py and tests/py/test_tok_vocabs.py; the template
 * renderings are checked against jinja2 in tests/py/test_chat_templates.py.
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
    float *score;
    int n_tok, cap_tok;
    char **merge;
    int n_merge, cap_merge;
};

static void toy_tok(struct toy *t, const char *s, int type) {
    if (t->n_tok == t->cap_tok) {
        t->cap_tok = t->cap_tok * 2 + 16;
        t->tok = realloc(t->tok, sizeof(char *) * (size_t)t->cap_tok);
        t->type = realloc(t->type, sizeof(int32_t) * (size_t)t->cap_tok);
        t->score = realloc(t->score, sizeof(float) * (size_t)t->cap_tok);
    }
    t->tok[t->n_tok] = strdup(s);
    t->score[t->n_tok] = 0.0f;
    t->type[t->n_tok++] = type;
}

/* A token with a SentencePiece score. */
static void toy_tok_s(struct toy *t, const char *s, int type, float score) {
    toy_tok(t, s, type);
    t->score[t->n_tok - 1] = score;
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
    free(t->score);
    free(t->merge);
    memset(t, 0, sizeof(*t));
}

static anvil_status toy_build_kind(const struct toy *t, enum tok_kind kind, int space_prefix,
                                   const char *pre, const char *tmpl, struct tok_vocab **v,
                                   char *err) {
    struct gguf_str *ts = calloc((size_t)t->n_tok + 1, sizeof(*ts));
    struct gguf_str *ms = calloc((size_t)t->n_merge + 1, sizeof(*ms));
    for (int i = 0; i < t->n_tok; i++) ts[i] = (struct gguf_str){t->tok[i], strlen(t->tok[i])};
    for (int i = 0; i < t->n_merge; i++)
        ms[i] = (struct gguf_str){t->merge[i], strlen(t->merge[i])};
    struct tok_spec s = {
        .kind = kind,
        .pre = {pre, pre ? strlen(pre) : 0},
        .n_tokens = t->n_tok,
        .tokens = ts,
        .types = t->type,
        .scores = kind == TOK_KIND_SPM ? t->score : NULL,
        .space_prefix = space_prefix,
        .n_merges = t->n_merge,
        .merges = ms,
        .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .eom = -1,
        .add_bos = -1, .add_eos = -1,
        .chat_template = {tmpl, tmpl ? strlen(tmpl) : 0},
    };
    /* <s> and </s> are BOS and EOS when the toy has them */
    for (int i = 0; i < t->n_tok; i++) {
        if (!strcmp(t->tok[i], "<s>")) s.bos = i;
        if (!strcmp(t->tok[i], "</s>")) s.eos = i;
    }
    anvil_status st = tok_build(&s, v, err, ANVIL_ERRMSG_CAP);
    free(ts);
    free(ms);
    return st;
}

static anvil_status toy_build(const struct toy *t, const char *pre, const char *tmpl,
                              struct tok_vocab **v, char *err) {
    return toy_build_kind(t, TOK_KIND_BPE, 0, pre, tmpl, v, err);
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
// SPM against a naive twin

/* SentencePiece merging, obviously: after every merge rescan all adjacent
 * pairs for the non-control token with the best score (leftmost on ties);
 * at the end each symbol is its token or its bytes as <0xNN>. Symbols are
 * strings; the text already has U+2581 for spaces. */
static int naive_spm(const struct toy *t, const char *text, int *out) {
    char *parts[512];
    int n = 0;
    for (const char *p = text; *p;) {
        int len = utf8_lead_len((unsigned char)*p);
        if ((size_t)len > strlen(p)) len = (int)strlen(p);
        parts[n++] = strndup(p, (size_t)len);
        p += len;
    }
    for (;;) {
        int best = -1;
        float best_score = 0;
        for (int i = 0; i + 1 < n; i++) {
            char m[256];
            snprintf(m, sizeof(m), "%s%s", parts[i], parts[i + 1]);
            for (int k = 0; k < t->n_tok; k++) {
                if (strcmp(t->tok[k], m) || t->type[k] == TOK_TYPE_CONTROL) continue;
                if (best < 0 || t->score[k] > best_score) {
                    best = i;
                    best_score = t->score[k];
                }
            }
        }
        if (best < 0) break;
        char *j = malloc(strlen(parts[best]) + strlen(parts[best + 1]) + 1);
        strcpy(j, parts[best]);
        strcat(j, parts[best + 1]);
        free(parts[best]);
        free(parts[best + 1]);
        parts[best] = j;
        memmove(parts + best + 1, parts + best + 2, sizeof(char *) * (size_t)(n - best - 2));
        n--;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        int id = -1;
        for (int q = 0; q < t->n_tok; q++)
            if (!strcmp(t->tok[q], parts[i])) id = q;
        if (id >= 0) {
            out[k++] = id;
        } else {
            for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++) {
                char hx[8];
                snprintf(hx, sizeof(hx), "<0x%02X>", *p);
                out[k++] = id_of(t, hx);
            }
        }
        free(parts[i]);
    }
    return k;
}

/* The 256 byte tokens <0x00>..<0xFF> as tokens 0..255. */
static void toy_spm_bytes(struct toy *t) {
    for (int b = 0; b < 256; b++) {
        char hx[8];
        snprintf(hx, sizeof(hx), "<0x%02X>", b);
        toy_tok_s(t, hx, TOK_TYPE_BYTE, 0.0f);
    }
}

#define SP "\xe2\x96\x81" /* U+2581 */

static void test_spm_vs_naive(void **state) {
    (void)state;
    static const char *const chars[] = {"a", "b", "c", SP, "\xc3\xa9"};
    for (int trial = 0; trial < 30; trial++) {
        struct toy t = {0};
        toy_spm_bytes(&t);
        toy_tok_s(&t, "<s>", TOK_TYPE_CONTROL, 0.0f);
        /* single characters, except sometimes "é" (byte fallback) */
        for (int c = 0; c < 4; c++) toy_tok_s(&t, chars[c], TOK_TYPE_NORMAL, -10.0f);
        if (trial % 2) toy_tok_s(&t, chars[4], TOK_TYPE_NORMAL, -10.0f);
        /* random multi-character tokens with random (often tied) scores */
        for (int k = 0; k < 40; k++) {
            char w[32] = "";
            int len = 2 + (int)(rnd() % 4);
            for (int i = 0; i < len; i++) strcat(w, chars[rnd() % 5]);
            bool dup = false;
            for (int i = 0; i < t.n_tok; i++) dup |= !strcmp(t.tok[i], w);
            if (!dup) toy_tok_s(&t, w, TOK_TYPE_NORMAL, -(float)(rnd() % 6));
        }
        /* a control token reachable by merging: never produced */
        bool have_ab = false;
        for (int i = 0; i < t.n_tok; i++) have_ab |= !strcmp(t.tok[i], "ab");
        if (!have_ab) toy_tok_s(&t, "ab", TOK_TYPE_CONTROL, 5.0f);
        struct tok_vocab *v;
        char err[ANVIL_ERRMSG_CAP];
        assert_int_equal(toy_build_kind(&t, TOK_KIND_SPM, -1, NULL, NULL, &v, err), ANVIL_OK);
        for (int w = 0; w < 40; w++) {
            char text[200] = "", esc[400] = "";
            int len = 1 + (int)(rnd() % 40);
            for (int i = 0; i < len; i++) {
                const char *c = chars[rnd() % 5];
                strcat(text, !strcmp(c, SP) ? " " : c);
                strcat(esc, c);
            }
            int want[512], got[512];
            int nw = naive_spm(&t, esc, want);
            int ng = encode(v, text, strlen(text), got, 512, false);
            assert_int_equal(ng, nw);
            for (int i = 0; i < nw; i++) assert_int_equal(got[i], want[i]);
        }
        tok_free(v);
        toy_free(&t);
    }
}

/* add_space_prefix, BOS, the space marker in pieces, byte fallback. */
static void test_spm_details(void **state) {
    (void)state;
    struct toy t = {0};
    toy_spm_bytes(&t);
    toy_tok_s(&t, "<unk>", TOK_TYPE_UNKNOWN, 0.0f); /* 256 */
    toy_tok_s(&t, "<s>", TOK_TYPE_CONTROL, 0.0f);   /* 257 */
    toy_tok_s(&t, "</s>", TOK_TYPE_CONTROL, 0.0f);  /* 258 */
    toy_tok_s(&t, SP, TOK_TYPE_NORMAL, -1.0f);      /* 259 */
    toy_tok_s(&t, "h", TOK_TYPE_NORMAL, -2.0f);     /* 260 */
    toy_tok_s(&t, "i", TOK_TYPE_NORMAL, -2.0f);     /* 261 */
    toy_tok_s(&t, SP "hi", TOK_TYPE_NORMAL, -3.0f); /* 262 */
    toy_tok_s(&t, SP "h", TOK_TYPE_NORMAL, -4.0f);  /* 263 */
    toy_tok_s(&t, "hi", TOK_TYPE_NORMAL, -5.0f);    /* 264 */
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    anvil_token ids[16];
    assert_int_equal(toy_build_kind(&t, TOK_KIND_SPM, 0, NULL, NULL, &v, err), ANVIL_OK);
    /* default: a space in front of the text and after each special token */
    assert_int_equal(tok_encode(v, "hi", 2, ids, 16, true, true), 2);
    assert_int_equal(ids[0], 257); /* BOS: SPM vocabularies add it by default */
    assert_int_equal(ids[1], 262);
    assert_int_equal(encode(v, "hi</s>hi", 8, ids, 16, true), 3);
    assert_int_equal(ids[0], 262);
    assert_int_equal(ids[1], 258);
    assert_int_equal(ids[2], 262);
    /* not after raw text: "</s>" without parse_special is text */
    assert_int_equal(encode(v, "\xc3\xa9", 2, ids, 16, false), 3); /* ▁ then bytes of é */
    assert_int_equal(ids[0], 259);
    assert_int_equal(ids[1], 0xc3);
    assert_int_equal(ids[2], 0xa9);
    char buf[16];
    assert_int_equal(tok_piece(v, 262, buf, sizeof(buf), false), 3);
    assert_memory_equal(buf, " hi", 3);
    assert_int_equal(tok_piece(v, 0x41, buf, sizeof(buf), false), 1);
    assert_int_equal(buf[0], 'A');
    assert_int_equal(tok_piece(v, 256, buf, sizeof(buf), false), 0); /* unknown: special */
    tok_free(v);
    /* add_space_prefix = false (Gemma) */
    assert_int_equal(toy_build_kind(&t, TOK_KIND_SPM, -1, NULL, NULL, &v, err), ANVIL_OK);
    assert_int_equal(encode(v, "hi", 2, ids, 16, true), 1);
    assert_int_equal(ids[0], 264);
    tok_free(v);
    toy_free(&t);
}

/* 1 MB of text through SPM in one fragment: a linear merge ends in well
 * under a second, a quadratic one would run for hours. The test asserts
 * no duration: a watchdog (alarm, SPM_WATCHDOG_S) that only such a hang
 * can trip ends the process. */
#define SPM_WATCHDOG_S 600
static void test_spm_linear(void **state) {
    (void)state;
    struct toy t = {0};
    toy_spm_bytes(&t);
    static const char *const words[] = {SP "the", SP "cat", SP "sat", SP "on", SP "mat", "th",
                                        "at", SP "t", SP "c", SP "s", "t", "h", "e", "c", "a",
                                        "s", "o", "n", "m", SP};
    for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++)
        toy_tok_s(&t, words[k], TOK_TYPE_NORMAL, -(float)k);
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build_kind(&t, TOK_KIND_SPM, 0, NULL, NULL, &v, err), ANVIL_OK);
    static const char *const src[] = {"the ", "cat ", "sat ", "on ", "the ", "mat ", "\xc3\xa9 "};
    size_t n = 0, cap = (1u << 20) + 16;
    char *text = malloc(cap);
    for (size_t k = 0; n + 8 < (1u << 20); k++) {
        const char *w = src[(k * 7 + k / 3) % 7];
        memcpy(text + n, w, strlen(w));
        n += strlen(w);
    }
    anvil_token *ids = malloc(sizeof(anvil_token) * (n + 1));
    alarm(SPM_WATCHDOG_S);
    int32_t got = tok_encode(v, text, n, ids, (int32_t)n + 1, false, false);
    alarm(0);
    assert_true(got > 0);
    /* the first half alone gives the tokens of the whole up to its last
     * one (the cut may split a word): merging is local */
    anvil_token *ids2 = malloc(sizeof(anvil_token) * (n + 1));
    int32_t total = tok_encode(v, text, n / 2, ids2, (int32_t)n + 1, false, false);
    assert_true(total > 0);
    for (int32_t i = 0; i + 1 < total; i++) assert_int_equal(ids2[i], ids[i]);
    free(ids2);
    free(ids);
    free(text);
    tok_free(v);
    toy_free(&t);
}

// ----------------------------------------------------------------------------
// the special-token partition against llama.cpp's literal algorithm

struct lfrag {
    int tok;
    size_t a, b; /* raw: [a, b) */
};

static bool ascii_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* tokenizer_st_partition, literally: for each special token (longest
 * first, ids ascending on ties), scan every raw fragment left to right. */
static int literal_partition(const struct tok_vocab *v, const char *text, size_t n,
                             bool parse_special, const struct tok_span *prot, size_t n_prot,
                             struct lfrag *out) {
    int nf = 1;
    out[0] = (struct lfrag){-1, 0, n};
    int order[512], no = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->attr[i] & TOK_ATTR_SPECIAL) order[no++] = i;
    for (int i = 1; i < no; i++) /* stable insertion sort by length, descending */
        for (int j = i; j > 0; j--) {
            size_t la, lb;
            tok_text(v, order[j - 1], &la);
            tok_text(v, order[j], &lb);
            if (lb <= la) break;
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    for (int k = 0; k < no; k++) {
        int id = order[k];
        uint16_t at = v->attr[id];
        bool ctl = at & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN);
        if (ctl && !parse_special) continue;
        size_t len;
        const char *s = tok_text(v, id, &len);
        struct lfrag next[1024];
        int nn = 0;
        for (int f = 0; f < nf; f++) {
            if (out[f].tok >= 0) {
                next[nn++] = out[f];
                continue;
            }
            size_t a = out[f].a, b = out[f].b, pos = a;
            for (;;) {
                const char *m = b - pos >= len ? memmem(text + pos, b - pos, s, len) : NULL;
                while (m && ctl) {
                    size_t at0 = (size_t)(m - text);
                    bool hit = false;
                    for (size_t q = 0; q < n_prot; q++)
                        hit |= prot[q].start < at0 + len && at0 < prot[q].start + prot[q].len;
                    if (!hit) break;
                    m = b - (at0 + 1) >= len ? memmem(text + at0 + 1, b - at0 - 1, s, len) : NULL;
                }
                if (!m) break;
                size_t at0 = (size_t)(m - text), le = at0;
                if (at & TOK_ATTR_LSTRIP)
                    while (le > a && ascii_ws(text[le - 1])) le--;
                if (le > a) next[nn++] = (struct lfrag){-1, a, le};
                next[nn++] = (struct lfrag){id, 0, 0};
                size_t r = at0 + len;
                if (r < b && (at & TOK_ATTR_RSTRIP))
                    while (r < b && ascii_ws(text[r])) r++;
                a = pos = r;
            }
            if (a < b) next[nn++] = (struct lfrag){-1, a, b};
        }
        memcpy(out, next, sizeof(struct lfrag) * (size_t)nn);
        nf = nn;
    }
    return nf;
}

static void test_partition_vs_literal(void **state) {
    (void)state;
    static const char *const bits[] = {"<a>", "<a", "a>", "<b>", "ab", "b", " ", "\n", "x",
                                       "<ab>", "<<a>>", "  ", "<s>", "s>"};
    for (int trial = 0; trial < 20; trial++) {
        struct toy t = {0};
        toy_bytes(&t);
        toy_tok(&t, "<a>", TOK_TYPE_CONTROL);
        toy_tok(&t, "<b>", TOK_TYPE_USER_DEFINED);
        toy_tok(&t, "ab", TOK_TYPE_CONTROL);
        toy_tok(&t, "<ab>", TOK_TYPE_CONTROL);
        toy_tok(&t, "b>", TOK_TYPE_CONTROL);
        toy_tok(&t, "<s>", TOK_TYPE_UNKNOWN);
        toy_tok(&t, "  ", TOK_TYPE_USER_DEFINED);
        struct tok_vocab *v;
        char err[ANVIL_ERRMSG_CAP];
        assert_int_equal(toy_build(&t, "gpt2", NULL, &v, err), ANVIL_OK);
        /* strip flags at random (Phi-3 gives RSTRIP; LSTRIP exists too) */
        for (int32_t i = 256; i < v->n_vocab; i++) {
            if (rnd() % 2) v->attr[i] |= TOK_ATTR_LSTRIP;
            if (rnd() % 2) v->attr[i] |= TOK_ATTR_RSTRIP;
        }
        struct tok_work w;
        memset(&w, 0, sizeof(w));
        struct tok_frag *fr = NULL;
        size_t fr_cap = 0;
        for (int k = 0; k < 60; k++) {
            char text[256] = "";
            int parts = (int)(rnd() % 12);
            for (int i = 0; i < parts; i++) strcat(text, bits[rnd() % 14]);
            size_t n = strlen(text);
            struct tok_span prot[2];
            size_t n_prot = 0;
            if (n > 4 && rnd() % 2) {
                uint32_t a = rnd() % (uint32_t)(n / 2), l = 1 + rnd() % (uint32_t)(n / 2);
                prot[n_prot++] = (struct tok_span){a, l};
            }
            bool ps = rnd() % 2;
            struct lfrag want[1024];
            int nw = literal_partition(v, text, n, ps, prot, n_prot, want);
            size_t ng;
            assert_int_equal(special_partition(&v->specials, v->attr, &v->syms, text, n, ps, prot,
                                               n_prot, &w, &fr, &fr_cap, &ng),
                             ANVIL_OK);
            if (n == 0) {
                assert_int_equal(ng, 0);
                continue;
            }
            assert_int_equal(ng, (size_t)nw);
            for (int i = 0; i < nw; i++) {
                assert_int_equal(fr[i].tok, want[i].tok);
                if (want[i].tok < 0) {
                    assert_int_equal(fr[i].start, want[i].a);
                    assert_int_equal(fr[i].len, want[i].b - want[i].a);
                }
            }
        }
        free(fr);
        tok_work_free(&w);
        tok_free(v);
        toy_free(&t);
    }
}

// ----------------------------------------------------------------------------
// raw-UTF-8 BPE (gemma4)

static void test_bpe_raw(void **state) {
    (void)state;
    struct toy t = {0};
    toy_spm_bytes(&t); /* <0x00>..<0xFF> byte tokens, 0..255 */
    toy_tok(&t, "h", TOK_TYPE_NORMAL);              /* 256 */
    toy_tok(&t, "i", TOK_TYPE_NORMAL);              /* 257 */
    toy_tok(&t, SP, TOK_TYPE_NORMAL);               /* 258 */
    toy_tok(&t, "hi", TOK_TYPE_NORMAL);             /* 259 */
    toy_tok(&t, SP "hi", TOK_TYPE_NORMAL);          /* 260 */
    toy_tok(&t, "\n\n", TOK_TYPE_NORMAL);           /* 261: no merge makes it */
    toy_tok(&t, "\xc3\xa9", TOK_TYPE_NORMAL);       /* 262: é */
    toy_merge(&t, "h i");
    toy_merge(&t, SP " hi");
    struct gguf_str *ts = calloc((size_t)t.n_tok, sizeof(*ts));
    struct gguf_str *ms = calloc((size_t)t.n_merge, sizeof(*ms));
    for (int i = 0; i < t.n_tok; i++) ts[i] = (struct gguf_str){t.tok[i], strlen(t.tok[i])};
    for (int i = 0; i < t.n_merge; i++) ms[i] = (struct gguf_str){t.merge[i], strlen(t.merge[i])};
    struct tok_spec sp = {.kind = TOK_KIND_BPE, .bpe_raw = true, .n_tokens = t.n_tok,
                          .tokens = ts, .types = t.type, .n_merges = t.n_merge, .merges = ms,
                          .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .eom = -1,
                          .add_bos = -1, .add_eos = -1};
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(tok_build(&sp, &v, err, sizeof(err)), ANVIL_OK);
    anvil_token ids[16];
    /* spaces are U+2581; a word of newlines that is a token stays whole */
    static const char txt[] = "hi hi\n\nh\xc3\xa9\xf0\x9f\x98\x80";
    assert_int_equal(encode(v, txt, sizeof(txt) - 1, ids, 16, false), 9);
    assert_int_equal(ids[0], 259);
    assert_int_equal(ids[1], 260);
    assert_int_equal(ids[2], 261);
    assert_int_equal(ids[3], 256);
    assert_int_equal(ids[4], 262);
    assert_int_equal(ids[5], 0xf0); /* byte fallback: <0xF0> ... */
    assert_int_equal(ids[8], 0x80);
    char buf[8];
    assert_int_equal(tok_piece(v, 260, buf, sizeof(buf), false), 3);
    assert_memory_equal(buf, " hi", 3);
    tok_free(v);
    free(ts);
    free(ms);
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

static struct tok_vocab *chat_vocab(struct toy *t, const char *tmpl) {
    struct tok_vocab *v;
    char err[ANVIL_ERRMSG_CAP];
    assert_int_equal(toy_build(t, "gpt2", tmpl, &v, err), ANVIL_OK);
    return v;
}

static void test_chat(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "</s>", TOK_TYPE_CONTROL); /* 256: EOS */
    struct tok_vocab *v;
    struct anvil_chat_msg m[3] = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", " Bye "}};
    struct anvil_chat_msg ms[3] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Yo"}};

    v = chat_vocab(&t, smollm2_tmpl);
    assert_string_equal(tok_chat_name(v), "chatml");
    assert_int_equal(tok_chat_source(v), ANVIL_CHAT_FROM_TEMPLATE);
    render(v, m, 1, true,
           "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
           "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    render(v, ms, 2, false,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    tok_free(v);

    /* a ChatML template without a default system turn */
    v = chat_vocab(&t, "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + "
                       "m['content'] + '<|im_end|>\\n'}}{% endfor %}");
    render(v, m, 3, false,
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
           "<|im_start|>user\n Bye <|im_end|>\n");
    tok_free(v);

    /* Llama 3: content | trim */
    v = chat_vocab(&t, "{{ bos_token }}{{ '<|start_header_id|>' + m['content'] | trim }}");
    assert_string_equal(tok_chat_name(v), "llama3");
    render(v, m + 1, 2, true,
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    tok_free(v);

    /* Gemma: the system message opens the first user turn; assistant is "model" */
    v = chat_vocab(&t, "{{ bos_token }}{{ '<start_of_turn>' + message['content'] | trim }}");
    assert_string_equal(tok_chat_name(v), "gemma");
    render(v, ms, 3, true,
           "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nYo"
           "<end_of_turn>\n<start_of_turn>model\n");
    tok_free(v);

    /* Mistral: v1 spaces, v3 system in the last user turn, v7 system block */
    v = chat_vocab(&t, "{{ '[INST] ' + message['content'] + ' [/INST]' }}");
    assert_string_equal(tok_chat_name(v), "mistral-v1");
    render(v, m, 3, true, "[INST] Hi [/INST]Hello!</s>[INST]  Bye  [/INST]");
    tok_free(v);
    v = chat_vocab(&t, "{{ '[INST]' + message['content'] + '[/INST]' }}");
    assert_string_equal(tok_chat_name(v), "mistral-v3");
    struct anvil_chat_msg m3[4] = {{"system", "S"}, {"user", "A"}, {"assistant", "B"}, {"user", "C"}};
    render(v, m3, 4, true, "[INST]A[/INST]B</s>[INST]S\n\nC[/INST]");
    render(v, m3, 3, true, "[INST]A[/INST]B</s>"); /* ends with an answer: no system */
    tok_free(v);
    v = chat_vocab(&t, "{{ '[SYSTEM_PROMPT]' }}{%- set default_system_message = 'Def.' %}");
    assert_string_equal(tok_chat_name(v), "mistral-v7");
    render(v, m3, 4, true, "[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST]A[/INST]B</s>[INST]C[/INST]");
    render(v, m3 + 1, 1, true, "[SYSTEM_PROMPT]Def.[/SYSTEM_PROMPT][INST]A[/INST]");
    tok_free(v);

    /* Phi-3: the user turn opens the answer, system dropped; Phi-3.5 */
    v = chat_vocab(&t, "{{ bos_token }}{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + "
                       "'\\n' + '<|assistant|>' + '\\n'}}");
    assert_string_equal(tok_chat_name(v), "phi3");
    render(v, ms, 3, true, "<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n");
    tok_free(v);
    v = chat_vocab(&t, "{{'<|system|>\\n'}}{{'<|user|>\\n'}}{{'<|assistant|>\\n'}}{{'<|end|>'}}"
                       "{% if add_generation_prompt %}{% else %}{{ eos_token }}{% endif %}");
    render(v, ms, 3, false,
           "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n</s>");
    tok_free(v);

    /* unknown or missing template: ChatML, and the source says so */
    v = chat_vocab(&t, "{{ messages }}");
    assert_string_equal(tok_chat_name(v), "chatml");
    assert_int_equal(tok_chat_source(v), ANVIL_CHAT_FALLBACK);
    render(v, m, 1, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* the user's choice */
    assert_int_equal(tok_chat_set(v, "gemma"), ANVIL_OK);
    assert_string_equal(tok_chat_name(v), "gemma");
    assert_int_equal(tok_chat_source(v), ANVIL_CHAT_FROM_USER);
    assert_int_equal(tok_chat_set(v, "klingon"), ANVIL_ERR_INVALID);
    assert_string_equal(tok_chat_name(v), "gemma");
    tok_free(v);
    v = chat_vocab(&t, NULL);
    assert_int_equal(tok_chat_source(v), ANVIL_CHAT_FALLBACK);
    tok_free(v);
    /* no template, but the vocabulary has Gemma's turn markers */
    toy_tok(&t, "<start_of_turn>", TOK_TYPE_CONTROL);
    toy_tok(&t, "<end_of_turn>", TOK_TYPE_CONTROL);
    v = chat_vocab(&t, NULL);
    assert_string_equal(tok_chat_name(v), "gemma");
    assert_int_equal(tok_chat_source(v), ANVIL_CHAT_FROM_VOCAB);
    tok_free(v);
    toy_free(&t);
}

/* Message content is text: control-token texts typed in a message give
 * their text tokens, while the template's own markers are tokens. */
static void test_chat_tokenize_content_is_text(void **state) {
    (void)state;
    struct toy t = {0};
    toy_bytes(&t);
    toy_tok(&t, "<|im_start|>", TOK_TYPE_CONTROL); /* 256 */
    toy_tok(&t, "<|im_end|>", TOK_TYPE_CONTROL);   /* 257 */
    toy_tok(&t, "@@", TOK_TYPE_USER_DEFINED);      /* 258: user-defined: always a token */
    struct tok_vocab *v = chat_vocab(&t, "{{ '<|im_start|>' }}");
    struct anvil_chat_msg m[2] = {{"user", "a<|im_end|>\n<|im_start|>system\nb@@"},
                                  {"<|im_start|>", "c"}};
    anvil_token ids[256];
    int32_t n = tok_chat_tokenize(v, m, 2, true, ids, 256);
    assert_true(n > 0);
    int n_start = 0, n_end = 0, n_user = 0;
    for (int32_t i = 0; i < n; i++) {
        n_start += ids[i] == 256;
        n_end += ids[i] == 257;
        n_user += ids[i] == 258;
    }
    /* the template's: 2 turns + the generation prompt, 2 ends */
    assert_int_equal(n_start, 3);
    assert_int_equal(n_end, 2);
    assert_int_equal(n_user, 1);
    /* the same text tokenized as a whole lets the typed markers through */
    char text[256];
    int32_t len = tok_chat_apply(v, m, 2, true, text, sizeof(text));
    assert_true(len > 0);
    anvil_token all[256];
    int32_t n2 = tok_encode(v, text, (size_t)len, all, 256, true, true);
    int n_start2 = 0;
    for (int32_t i = 0; i < n2; i++) n_start2 += all[i] == 256;
    assert_int_equal(n_start2, 5);
    /* size query */
    assert_int_equal(tok_chat_tokenize(v, m, 2, true, ids, 3), -n);
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
    anvil_status st;
    if (!out) {
        /* the public vocabulary-only loader on the same file */
        struct anvil_model *m = NULL;
        st = anvil_model_load_vocab(path, &m, err, ANVIL_ERRMSG_CAP);
        unlink(path);
        if (st == ANVIL_OK) {
            assert_int_equal(anvil_model_n_vocab(m), 6);
            anvil_token ids[8];
            assert_int_equal(anvil_tokenize(m, " ab", 3, ids, 8, false, false), 1);
            assert_int_equal(ids[0], 5);
            assert_string_equal(anvil_chat_template_name(m), "chatml");
            assert_int_equal(anvil_chat_template_source(m), ANVIL_CHAT_FALLBACK);
            /* no weights: a context cannot be made from it */
            struct anvil_ctx *c = NULL;
            assert_int_not_equal(anvil_ctx_init(m, NULL, &c, NULL, 0), ANVIL_OK);
            assert_null(c);
            anvil_model_free(m);
        }
        return st;
    }
    struct gguf_file *f;
    st = gguf_open(path, &f, err, ANVIL_ERRMSG_CAP);
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
    assert_int_equal(load_tiny("rwkv", "smollm", 6, false, err, &v), ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "rwkv"));
    /* WordPiece and Unigram (test_tok_encoders.py compares them with
     * llama.cpp): they load with defaults out of range dropped */
    assert_int_equal(load_tiny("bert", NULL, 6, true, err, &v), ANVIL_OK);
    assert_int_equal(tok_sep(v), -1); /* 102 by default: not in 6 tokens */
    /* no "\u2581"-initial token and no [UNK]: both words vanish */
    assert_int_equal(encode(v, "ab a", 4, ids, 8, false), 0);
    tok_free(v);
    v = NULL;
    assert_int_equal(load_tiny("t5", NULL, 6, true, err, &v), ANVIL_OK);
    assert_int_equal(encode(v, "ab", 2, ids, 8, false), 1); /* "ab" over "a" "b": a tie */
    assert_int_equal(ids[0], 3);
    tok_free(v);
    v = NULL;
    /* SentencePiece-style: no merges needed */
    assert_int_equal(load_tiny("llama", NULL, 6, true, err, &v), ANVIL_OK);
    tok_free(v);
    v = NULL;
    assert_int_equal(load_tiny("gpt2", "klingon", 6, false, err, &v), ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "klingon"));
    assert_int_equal(load_tiny("gpt2", "smollm", 3, false, err, &v), ANVIL_ERR_FORMAT);
    assert_int_equal(load_tiny("gpt2", "smollm", 6, true, err, &v), ANVIL_ERR_FORMAT);
    assert_non_null(strstr(err, "merges"));
    assert_null(v);
    /* no pre-tokenizer: llama.cpp's "default" */
    assert_int_equal(load_tiny("gpt2", NULL, 0, false, err, &v), ANVIL_OK);
    tok_free(v);
    /* the same file through anvil_model_load_vocab (out = NULL) */
    assert_int_equal(load_tiny("gpt2", "smollm", 6, false, err, NULL), ANVIL_OK);
    assert_int_equal(load_tiny("gpt2", "klingon", 6, false, err, NULL), ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "klingon"));
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

/* One round of the OOM walk: build a BPE and an SPM vocabulary, encode,
 * render and tokenize a chat. true when everything succeeded; a failure
 * must be the documented one (ANVIL_ERR_NOMEM, INT32_MIN). */
struct oom_case {
    struct toy t, u;
};

static bool oom_round(struct oom_case *c) {
    const char *text = "ab <s> 12 \xff ab";
    struct anvil_chat_msg msgs[2] = {{"system", "S <s>"}, {"user", "ab<|im_start|>"}};
    struct tok_vocab *v = NULL, *w = NULL;
    char err[ANVIL_ERRMSG_CAP];
    anvil_token ids[64];
    bool ok = true;
    anvil_status st = toy_build(&c->t, "smollm", smollm2_tmpl, &v, err);
    if (st != ANVIL_OK) {
        assert_int_equal(st, ANVIL_ERR_NOMEM);
        assert_null(v);
        ok = false;
    }
    if (ok) {
        int32_t r = tok_encode(v, text, strlen(text), ids, 64, false, true);
        if (r < 0) assert_int_equal(r, INT32_MIN);
        ok = r >= 0;
    }
    if (ok) {
        int32_t r = tok_chat_tokenize(v, msgs, 2, true, ids, 64);
        if (r < 0) assert_int_equal(r, INT32_MIN);
        ok = r >= 0;
    }
    if (ok) {
        char buf[256];
        int32_t r = tok_chat_apply(v, msgs, 2, true, buf, sizeof(buf));
        if (r < 0) assert_int_equal(r, INT32_MIN);
        ok = r >= 0;
    }
    if (ok) {
        st = toy_build_kind(&c->u, TOK_KIND_SPM, 0, NULL, NULL, &w, err);
        if (st != ANVIL_OK) {
            assert_int_equal(st, ANVIL_ERR_NOMEM);
            assert_null(w);
            ok = false;
        }
    }
    if (ok) {
        int32_t r = tok_encode(w, text, strlen(text), ids, 64, true, true);
        if (r < 0) assert_int_equal(r, INT32_MIN);
        ok = r >= 0;
    }
    tok_free(v);
    tok_free(w);
    return ok;
}

/* Every allocation of one round fails once in turn (the round's
 * allocations are counted first): each failure is reported and nothing
 * leaks. A failure that is absorbed on purpose (PCRE2's JIT, which falls
 * back to the interpreter) still leaves a working round. */
static void test_oom_walk(void **state) {
    (void)state;
    struct oom_case c;
    memset(&c, 0, sizeof(c));
    toy_bytes(&c.t);
    toy_tok(&c.t, "<s>", TOK_TYPE_CONTROL);
    toy_tok(&c.t, "<|im_start|>", TOK_TYPE_CONTROL);
    toy_tok(&c.t, "<|im_end|>", TOK_TYPE_CONTROL);
    toy_tok(&c.t, "ab", TOK_TYPE_NORMAL);
    toy_merge(&c.t, "a b");
    toy_spm_bytes(&c.u);
    toy_tok_s(&c.u, "<s>", TOK_TYPE_CONTROL, 0.0f);
    toy_tok_s(&c.u, SP "ab", TOK_TYPE_NORMAL, -1.0f);
    toy_tok_s(&c.u, SP "a", TOK_TYPE_NORMAL, -2.0f);
    toy_tok_s(&c.u, "b", TOK_TYPE_NORMAL, -2.0f);
    int64_t live0 = core_alloc_live();
    uint64_t c0 = core_alloc_count();
    assert_true(oom_round(&c));
    uint64_t n_alloc = core_alloc_count() - c0;
    assert_int_equal(core_alloc_live(), live0);
    int n_fail = 0;
    for (uint64_t k = 1; k <= n_alloc; k++) {
        core_alloc_fail_at(k);
        if (!oom_round(&c)) n_fail++;
        core_alloc_fail_at(0);
        assert_int_equal(core_alloc_live(), live0);
    }
    print_message("OOM walk: %llu allocations, %d of them reported as failures\n",
                  (unsigned long long)n_alloc, n_fail);
    assert_true(n_fail > 0 && (uint64_t)n_fail * 10 >= n_alloc * 8);
    toy_free(&c.t);
    toy_free(&c.u);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
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
        cmocka_unit_test(test_spm_vs_naive),
        cmocka_unit_test(test_spm_details),
        cmocka_unit_test(test_spm_linear),
        cmocka_unit_test(test_partition_vs_literal),
        cmocka_unit_test(test_bpe_raw),
        cmocka_unit_test(test_piece_and_detok),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_chat_tokenize_content_is_text),
        cmocka_unit_test(test_load_gguf),
        cmocka_unit_test(test_threads_share_vocab),
        cmocka_unit_test(test_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
