/*
 * fuzz_tok.c - libFuzzer harness: bytes -> tokenizer, detokenizer and chat
 * templates.
 *
 * The vocabulary is loaded once from $ANVIL_MODEL, else from
 * the Makefile's MODEL (fuzz_model_path; relative to the working
 * directory). From its tokens the harness also builds, once:
 *   - the same vocabulary under the other pre-tokenizer families;
 *   - a SentencePiece-style vocabulary (the tokens' decoded texts with
 *     U+2581 for spaces, scored by id, plus the 256 byte tokens <0xNN>),
 *     with and without add_space_prefix;
 *   - a raw-UTF-8 BPE vocabulary (gemma4-style) from the same tokens and
 *     merges;
 *   - one copy per chat template family.
 * Per input:
 *   - tokenize with and without special-token parsing and BOS; every id is
 *     in the vocabulary, and a too-small cap returns -(needed) with the
 *     same first ids;
 *   - round trip: for valid UTF-8 (checked here with an independent strict
 *     validator), tokenizing without special tokens and concatenating the
 *     pieces (special = false) gives back the input byte for byte, and so
 *     does the streaming detokenizer (push + flush) - except for the bytes
 *     that no token of the vocabulary spells on its own: SmolLM2's lacks
 *     0x04 0x06 0x13 0x14 0x16 0x1d 0xc0 0xc1 0xf1 0xf2 0xf5..0xff, and
 *     llama.cpp drops those bytes when it tokenizes (checked against
 *     llama-cpp-python: "a\x13b" -> "a" "b"), so the expected text is the
 *     input without them. The SPM and raw-BPE vocabularies have byte
 *     fallback, so nothing is dropped there (U+2581 reads back as a
 *     space, and SPM with the space prefix gives " " + input);
 *   - the same round trip under one of the other pre-tokenizers, picked by
 *     the input's first byte;
 *   - the streaming detokenizer's output is valid UTF-8 for any input, and
 *     also for arbitrary token ids read from the input (out-of-range ones
 *     included);
 *   - the model's chat template and one other family (picked by the second
 *     byte) with the input (up to its first NUL) as message content: the
 *     size query and the render agree, the content appears verbatim, and
 *     tokenizing the conversation (tok_chat_tokenize) gives exactly as
 *     many control tokens as the same conversation with content "x":
 *     markers typed in a message stay text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "tok/tok.h"
#include "tok/tok_int.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct gguf_file *g_file;
static struct tok_vocab *g_vocab;
static int32_t g_n_vocab;
static bool g_byte_ok[256]; /* some token's piece is exactly this byte */
static const char *const g_pre_names[] = {
    "default", "gpt2",         "llama-bpe",      "qwen2",       "qwen35", "dbrx",   "falcon",
    "smollm",  "deepseek-llm", "deepseek-coder", "deepseek-v3", "bloom",  "viking", "laguna"};
enum { N_PRE = sizeof(g_pre_names) / sizeof(g_pre_names[0]) };
static struct tok_vocab *g_pre_vocab[N_PRE]; /* same tokens, other pre-tokenizers */
static struct tok_vocab *g_spm[2];           /* SentencePiece: space prefix off, on */
static struct tok_vocab *g_raw;              /* raw-UTF-8 BPE */
static const char *const g_families[] = {"chatml",     "llama3",     "gemma", "mistral-v1",
                                         "mistral-v3", "mistral-v7", "phi3"};
enum { N_FAM = sizeof(g_families) / sizeof(g_families[0]) };
static struct tok_vocab *g_fam[N_FAM]; /* the model's vocabulary, one family each */

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_tok: property broken: %s\n", what);
        abort();
    }
}

static void unload(void) {
    for (int i = 0; i < N_PRE; i++) tok_free(g_pre_vocab[i]);
    for (int i = 0; i < N_FAM; i++) tok_free(g_fam[i]);
    tok_free(g_spm[0]);
    tok_free(g_spm[1]);
    tok_free(g_raw);
    tok_free(g_vocab);
    gguf_close(g_file);
}

// ----------------------------------------------------------------------------
// derived vocabularies

/* A string list owned by the harness. */
struct strs {
    struct gguf_str *s;
    int32_t n, cap;
};

static void strs_add(struct strs *l, const char *p, size_t n) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->s = realloc(l->s, sizeof(*l->s) * (size_t)l->cap);
        check(l->s != NULL, "harness out of memory");
    }
    char *c = malloc(n ? n : 1);
    check(c != NULL, "harness out of memory");
    memcpy(c, p, n);
    l->s[l->n++] = (struct gguf_str){c, n};
}

static void strs_free(struct strs *l) {
    for (int32_t i = 0; i < l->n; i++) free((void *)l->s[i].ptr);
    free(l->s);
}

/* A token's decoded bytes with ' ' shown as U+2581 (out: 4 KiB); -1 when
 * they are empty or not valid UTF-8 (such a token is left out). */
static int sp_text(anvil_token t, char *out) {
    char piece[1024];
    int32_t k = tok_piece(g_vocab, t, piece, (int32_t)sizeof(piece), false);
    if (k <= 0 || !valid_utf8((const uint8_t *)piece, (size_t)k)) return -1;
    int m = 0;
    for (int32_t i = 0; i < k; i++) {
        if (piece[i] == ' ') {
            memcpy(out + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            out[m++] = piece[i];
        }
    }
    return m;
}

/* The SPM and raw-BPE vocabularies, made from the default one. */
static void build_derived(const struct gguf_kv *merges) {
    struct strs toks = {0}, mg = {0};
    float *scores = malloc(sizeof(float) * ((size_t)g_n_vocab + 256));
    int32_t *types = malloc(sizeof(int32_t) * ((size_t)g_n_vocab + 256));
    check(scores && types, "harness out of memory");
    char text[4096];
    for (int b = 0; b < 256; b++) {
        char hx[8];
        snprintf(hx, sizeof(hx), "<0x%02X>", b);
        scores[toks.n] = 0.0f;
        types[toks.n] = TOK_TYPE_BYTE;
        strs_add(&toks, hx, 6);
    }
    struct tok_strtab seen; /* decoded texts already taken (two tokens may decode alike) */
    check(strtab_init(&seen, g_n_vocab, 1 << 20) == ANVIL_OK, "harness table");
    for (anvil_token t = 0; t < g_n_vocab; t++) {
        int m = sp_text(t, text);
        if (m <= 0) continue;
        int32_t id;
        bool added;
        check(strtab_intern(&seen, text, (size_t)m, &id, &added) == ANVIL_OK, "harness table");
        if (!added) continue;
        scores[toks.n] = -(float)t;
        types[toks.n] = TOK_TYPE_NORMAL;
        strs_add(&toks, text, (size_t)m);
    }
    strtab_free(&seen);
    /* the merges in the raw alphabet: both sides decoded the same way */
    for (uint64_t i = 0; i < merges->n; i++) {
        const struct gguf_str *g = &merges->strs[i];
        const char *sp = g->len > 1 ? memchr(g->ptr + 1, ' ', g->len - 1) : NULL;
        if (!sp) continue;
        size_t nl = (size_t)(sp - g->ptr), nr = g->len - nl - 1;
        int32_t a = strtab_find(&g_vocab->syms, g->ptr, nl);
        int32_t b = strtab_find(&g_vocab->syms, sp + 1, nr);
        if (a < 0 || b < 0 || a >= g_n_vocab || b >= g_n_vocab) continue;
        char l[4096], r[4096], m[8200];
        int ml = sp_text(a, l), mr = sp_text(b, r);
        if (ml <= 0 || mr <= 0) continue;
        memcpy(m, l, (size_t)ml);
        m[ml] = ' ';
        memcpy(m + ml + 1, r, (size_t)mr);
        strs_add(&mg, m, (size_t)ml + 1 + (size_t)mr);
    }
    char err[256];
    for (int k = 0; k < 2; k++) {
        struct tok_spec sp = {.kind = TOK_KIND_SPM, .n_tokens = toks.n, .tokens = toks.s,
                              .types = types, .scores = scores, .bos = -1, .eos = -1,
                              .unk = -1, .pad = -1, .eot = -1, .eom = -1, .add_bos = 0,
                              .add_eos = 0, .space_prefix = k ? 1 : -1};
        if (tok_build(&sp, &g_spm[k], err, sizeof(err)) != ANVIL_OK) {
            fprintf(stderr, "fuzz_tok: SPM vocabulary: %s\n", err);
            abort();
        }
    }
    struct tok_spec rp = {.kind = TOK_KIND_BPE, .bpe_raw = true, .n_tokens = toks.n,
                          .tokens = toks.s, .types = types, .n_merges = mg.n, .merges = mg.s,
                          .bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .eom = -1,
                          .add_bos = 0, .add_eos = 0};
    if (tok_build(&rp, &g_raw, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "fuzz_tok: raw BPE vocabulary: %s\n", err);
        abort();
    }
    strs_free(&toks);
    strs_free(&mg);
    free(scores);
    free(types);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = fuzz_model_path();
    char err[256] = "";
    if (gguf_open(path, &g_file, err, sizeof(err)) != ANVIL_OK ||
        tok_load(g_file, &g_vocab, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "fuzz_tok: cannot load the vocabulary of %s: %s\n", path, err);
        abort();
    }
    g_n_vocab = tok_n_vocab(g_vocab);
    /* the same tokens and merges under the other pre-tokenizers */
    const struct gguf_kv *toks, *merges, *types;
    if (!gguf_get_arr(g_file, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks) ||
        !gguf_get_arr(g_file, "tokenizer.ggml.merges", GGUF_VT_STRING, &merges) ||
        !gguf_get_arr(g_file, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types)) {
        fprintf(stderr, "fuzz_tok: %s has no tokens, merges or token types\n", path);
        abort();
    }
    int32_t *tt = malloc(sizeof(int32_t) * toks->n);
    check(tt != NULL, "harness out of memory");
    memcpy(tt, types->data, sizeof(int32_t) * toks->n);
    for (int i = 0; i < N_PRE; i++) {
        struct tok_spec sp = {
            .kind = TOK_KIND_BPE,
            .pre = {g_pre_names[i], strlen(g_pre_names[i])},
            .n_tokens = (int32_t)toks->n,
            .tokens = toks->strs,
            .types = tt,
            .n_merges = (int32_t)merges->n,
            .merges = merges->strs,
            .bos = tok_bos(g_vocab),
            .eos = tok_eos(g_vocab),
            .unk = -1, .pad = -1, .eot = -1, .eom = -1,
            .add_bos = -1, .add_eos = 0,
        };
        if (tok_build(&sp, &g_pre_vocab[i], err, sizeof(err)) != ANVIL_OK) {
            fprintf(stderr, "fuzz_tok: pre-tokenizer %s: %s\n", g_pre_names[i], err);
            abort();
        }
    }
    free(tt);
    for (int32_t t = 0; t < g_n_vocab; t++) {
        char piece[8];
        if (tok_piece(g_vocab, t, piece, (int32_t)sizeof(piece), false) == 1)
            g_byte_ok[(uint8_t)piece[0]] = true;
    }
    build_derived(merges);
    for (int i = 0; i < N_FAM; i++) {
        if (tok_load(g_file, &g_fam[i], err, sizeof(err)) != ANVIL_OK ||
            tok_chat_set(g_fam[i], g_families[i]) != ANVIL_OK) {
            fprintf(stderr, "fuzz_tok: template family %s: %s\n", g_families[i], err);
            abort();
        }
    }
    atexit(unload);
    return 0;
}

// ----------------------------------------------------------------------------
// properties

/* Growable byte buffer for the harness (plain malloc: not the library's). */
struct buf {
    char *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = realloc(b->p, cap);
        check(b->p != NULL, "harness out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Tokenize, checking ids and the too-small-cap contract. Returns malloc'd
 * ids (count in *n). */
static anvil_token *encode(const struct tok_vocab *v, const char *text, size_t len,
                           bool add_special, bool parse_special, int32_t *n) {
    int32_t need = tok_encode(v, text, len, NULL, 0, add_special, parse_special);
    check(need != INT32_MIN, "tok_encode size query");
    need = need < 0 ? -need : need;
    anvil_token *ids = malloc(((size_t)need + 1) * sizeof(*ids));
    check(ids != NULL, "harness out of memory");
    int32_t got = tok_encode(v, text, len, ids, need, add_special, parse_special);
    check(got == need, "tok_encode returns the size it asked for");
    for (int32_t i = 0; i < got; i++) check(ids[i] >= 0 && ids[i] < tok_n_vocab(v), "id in vocab");
    if (got >= 2) {
        int32_t cap = got / 2;
        anvil_token *part = malloc((size_t)cap * sizeof(*part));
        check(part != NULL, "harness out of memory");
        int32_t r = tok_encode(v, text, len, part, cap, add_special, parse_special);
        check(r == -got, "too-small cap returns -(needed)");
        check(memcmp(part, ids, (size_t)cap * sizeof(*ids)) == 0, "partial ids are a prefix");
        free(part);
    }
    *n = got;
    return ids;
}

/* Streaming detokenizer over ids; starts with a tiny buffer so that the
 * -(needed) path runs, and checks that it leaves the state unchanged. */
static void detok_stream(const struct tok_vocab *v, const anvil_token *ids, int32_t n,
                         struct buf *out) {
    struct anvil_detok d;
    memset(&d, 0, sizeof(d));
    char small[4];
    for (int32_t i = 0; i < n; i++) {
        struct anvil_detok before = d;
        int32_t r = tok_detok_push(v, &d, ids[i], small, (int32_t)sizeof(small));
        if (r < 0) {
            check(r != INT32_MIN, "detok push");
            check(memcmp(&before, &d, sizeof(d)) == 0, "too-small buffer leaves state unchanged");
            int32_t need = -r;
            char *big = malloc((size_t)need);
            check(big != NULL, "harness out of memory");
            r = tok_detok_push(v, &d, ids[i], big, need);
            check(r >= 0 && r == need - 1, "detok push with the needed room");
            check(big[r] == '\0', "detok output NUL terminated");
            buf_put(out, big, (size_t)r);
            free(big);
        } else {
            check(small[r] == '\0', "detok output NUL terminated");
            buf_put(out, small, (size_t)r);
        }
    }
    char tail[8];
    int32_t r = tok_detok_flush(&d, tail, (int32_t)sizeof(tail));
    check(r >= 0, "detok flush");
    buf_put(out, tail, (size_t)r);
}

enum rt_mode {
    RT_BYTE_LEVEL,  /* GPT-2 alphabet: bytes no token spells are dropped */
    RT_SPACE_MARK,  /* U+2581 for spaces and byte fallback (SPM, raw BPE) */
    RT_SPACE_PREFIX /* the same, and a space in front (SPM add_space_prefix) */
};

static void fuzz_roundtrip(const struct tok_vocab *v, const uint8_t *data, size_t size,
                           enum rt_mode mode) {
    const char *text = (const char *)data;
    bool utf8 = valid_utf8(data, size);
    int32_t n;
    anvil_token *ids = encode(v, text, size, false, false, &n);

    /* what the pieces must spell: the input without the bytes the
     * vocabulary cannot spell; with the space marker every U+2581 of the
     * input reads back as a space (the marker is lossy, as in
     * SentencePiece), and the space prefix adds one in front */
    struct buf want = {0};
    buf_put(&want, "", 0);
    if (mode == RT_SPACE_PREFIX && size > 0) buf_put(&want, " ", 1);
    for (size_t i = 0; i < size; i++) {
        if (mode != RT_BYTE_LEVEL && i + 3 <= size && !memcmp(text + i, "\xe2\x96\x81", 3)) {
            buf_put(&want, " ", 1);
            i += 2;
        } else if (mode != RT_BYTE_LEVEL || g_byte_ok[data[i]]) {
            buf_put(&want, text + i, 1);
        }
    }
    check(want.len == 0 || n > 0, "non-empty text gives tokens");

    struct buf pieces = {0}, stream = {0};
    buf_put(&pieces, "", 0);
    for (int32_t i = 0; i < n; i++) {
        char small[8];
        int32_t r = tok_piece(v, ids[i], small, (int32_t)sizeof(small), false);
        if (r < 0) {
            char *big = malloc((size_t)-r);
            check(big != NULL, "harness out of memory");
            int32_t r2 = tok_piece(v, ids[i], big, -r, false);
            check(r2 == -r, "tok_piece with the needed room");
            buf_put(&pieces, big, (size_t)r2);
            free(big);
        } else {
            buf_put(&pieces, small, (size_t)r);
        }
    }
    detok_stream(v, ids, n, &stream);
    buf_put(&stream, "", 0);
    check(valid_utf8((const uint8_t *)stream.p, stream.len), "detok output is valid UTF-8");
    if (utf8) {
        check(pieces.len == want.len && memcmp(pieces.p, want.p, want.len) == 0,
              "pieces of tokenize(s) concatenate to s");
        if (valid_utf8((const uint8_t *)want.p, want.len))
            check(stream.len == want.len && memcmp(stream.p, want.p, want.len) == 0,
                  "streaming detokenize(tokenize(s)) == s");
    }
    free(want.p);
    free(pieces.p);
    free(stream.p);
    free(ids);

    /* with special tokens and BOS: ids valid, detokenizer output valid */
    ids = encode(v, text, size, true, true, &n);
    struct buf out = {0};
    detok_stream(v, ids, n, &out);
    buf_put(&out, "", 0);
    check(valid_utf8((const uint8_t *)out.p, out.len), "detok output is valid UTF-8 (special)");
    free(out.p);
    free(ids);
}

/* Arbitrary ids (16 bits each, spread over [-4, n_vocab + 4)). */
static void fuzz_ids(const uint8_t *data, size_t size) {
    int32_t n = (int32_t)(size / 2);
    if (n > 4096) n = 4096;
    anvil_token *ids = malloc(((size_t)n + 1) * sizeof(*ids));
    check(ids != NULL, "harness out of memory");
    for (int32_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)data[2 * i] | (uint32_t)data[2 * i + 1] << 8;
        ids[i] = (anvil_token)(v % (uint32_t)(g_n_vocab + 8)) - 4;
        char piece[256];
        tok_piece(g_vocab, ids[i], piece, (int32_t)sizeof(piece), (v & 1) != 0);
        (void)tok_is_eog(g_vocab, ids[i]);
    }
    struct buf out = {0};
    detok_stream(g_vocab, ids, n, &out);
    buf_put(&out, "", 0);
    check(valid_utf8((const uint8_t *)out.p, out.len), "detok of any ids is valid UTF-8");
    free(out.p);
    free(ids);
}

/* Control tokens among ids. */
static int32_t n_control(const struct tok_vocab *v, const anvil_token *ids, int32_t n) {
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) k += (v->attr[ids[i]] & TOK_ATTR_CONTROL) != 0;
    return k;
}

/* tok_chat_tokenize with the size query first. Returns malloc'd ids. */
static anvil_token *chat_ids(const struct tok_vocab *v, const struct anvil_chat_msg *m, size_t nm,
                             bool add, int32_t *n) {
    int32_t need = tok_chat_tokenize(v, m, nm, add, NULL, 0);
    check(need != INT32_MIN, "chat tokenize size query");
    need = need < 0 ? -need : need;
    anvil_token *ids = malloc(((size_t)need + 1) * sizeof(*ids));
    check(ids != NULL, "harness out of memory");
    int32_t got = tok_chat_tokenize(v, m, nm, add, ids, need);
    check(got == need, "chat tokenize fills the size it asked for");
    for (int32_t i = 0; i < got; i++) check(ids[i] >= 0 && ids[i] < tok_n_vocab(v), "chat id");
    *n = got;
    return ids;
}

static void fuzz_chat_with(const struct tok_vocab *v, const char *content) {
    /* Llama 3 and Gemma trim the content (Python's str.strip): what must
     * appear is its core, between the first and the last printable ASCII
     * byte */
    size_t clen = strlen(content), ca = 0, ce = clen;
    while (ca < ce && !(content[ca] > 0x20 && content[ca] < 0x7f)) ca++;
    while (ce > ca && !(content[ce - 1] > 0x20 && content[ce - 1] < 0x7f)) ce--;
    struct anvil_chat_msg msgs[4] = {
        {"system", "You are a test."},
        {"user", content},
        {"assistant", content},
        {"user", "x"},
    };
    struct anvil_chat_msg plain[4] = {
        {"system", "You are a test."}, {"user", "x"}, {"assistant", "x"}, {"user", "x"}};
    /* with and without a leading system message, with and without the
     * assistant header */
    for (int variant = 0; variant < 2; variant++) {
        const struct anvil_chat_msg *m = variant ? msgs : msgs + 1;
        const struct anvil_chat_msg *pm = variant ? plain : plain + 1;
        size_t nm = variant ? 4 : 1;
        bool add = variant == 0;
        int32_t need = tok_chat_apply(v, m, nm, add, NULL, 0);
        check(need < 0 && need != INT32_MIN, "chat size query reports the needed size");
        need = -need;
        char *out = malloc((size_t)need);
        check(out != NULL, "harness out of memory");
        int32_t got = tok_chat_apply(v, m, nm, add, out, need);
        check(got == need - 1 && out[got] == '\0', "chat render fills the size it asked for");
        check(memmem(out, (size_t)got, content + ca, ce - ca) != NULL || ce == ca,
              "content appears in the render");
        int32_t r = tok_chat_apply(v, m, nm, add, out, need - 1);
        check(r == -need, "chat render one byte short");
        /* typed markers stay text: as many control tokens as with "x" */
        int32_t n, np;
        anvil_token *ids = chat_ids(v, m, nm, add, &n);
        anvil_token *pids = chat_ids(v, pm, nm, add, &np);
        check(n_control(v, ids, n) == n_control(v, pids, np),
              "message content adds no control token");
        free(ids);
        free(pids);
        free(out);
    }
}

static void fuzz_chat(const uint8_t *data, size_t size) {
    char *content = malloc(size + 1);
    check(content != NULL, "harness out of memory");
    memcpy(content, data, size);
    content[size] = '\0';
    fuzz_chat_with(g_vocab, content);
    fuzz_chat_with(g_fam[size > 1 ? data[1] % N_FAM : 0], content);
    free(content);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0; /* long inputs add time, not coverage */
    int64_t live0 = core_alloc_live();
    fuzz_roundtrip(g_vocab, data, size, RT_BYTE_LEVEL);
    if (size > 0) fuzz_roundtrip(g_pre_vocab[data[0] % N_PRE], data, size, RT_BYTE_LEVEL);
    fuzz_roundtrip(g_spm[0], data, size, RT_SPACE_MARK);
    fuzz_roundtrip(g_spm[1], data, size, RT_SPACE_PREFIX);
    fuzz_roundtrip(g_raw, data, size, RT_SPACE_MARK);
    fuzz_ids(data, size);
    fuzz_chat(data, size);
    check(core_alloc_live() == live0, "tokenizer calls free their scratch");
    return 0;
}
