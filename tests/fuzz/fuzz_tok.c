/*
 * fuzz_tok.c - libFuzzer harness: bytes -> tokenizer, detokenizer and chat
 * template of the default model's vocabulary.
 *
 * The vocabulary is loaded once from $ANVIL_MODEL, else from
 * models/SmolLM2-135M-Instruct.Q4_1.gguf (relative to the working
 * directory). Per input:
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
 *     input without them;
 *   - the same round trip with the vocabulary rebuilt (tok_build) under the
 *     other pre-tokenizers anvil knows (default, gpt2, llama3, qwen2), one
 *     of them per input, picked by its first byte;
 *   - the streaming detokenizer's output is valid UTF-8 for any input, and
 *     also for arbitrary token ids read from the input (out-of-range ones
 *     included);
 *   - the chat template with the input (up to its first NUL) as a user
 *     message: the size query and the render agree, the content appears
 *     verbatim, and the result tokenizes with special tokens.
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
static const char *const g_pre_names[] = {"default", "gpt2", "llama-bpe", "qwen2"};
enum { N_PRE = sizeof(g_pre_names) / sizeof(g_pre_names[0]) };
static struct tok_vocab *g_pre_vocab[N_PRE]; /* same tokens, other pre-tokenizers */

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_tok: property broken: %s\n", what);
        abort();
    }
}

static void unload(void) {
    for (int i = 0; i < N_PRE; i++) tok_free(g_pre_vocab[i]);
    tok_free(g_vocab);
    gguf_close(g_file);
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
    atexit(unload);
    return 0;
}


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
    for (int32_t i = 0; i < got; i++) check(ids[i] >= 0 && ids[i] < g_n_vocab, "id in vocab");
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

static void fuzz_roundtrip(const struct tok_vocab *v, const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    bool utf8 = valid_utf8(data, size);
    int32_t n;
    anvil_token *ids = encode(v, text, size, false, false, &n);

    /* the input without the bytes the vocabulary cannot spell */
    struct buf want = {0};
    buf_put(&want, "", 0);
    for (size_t i = 0; i < size; i++)
        if (g_byte_ok[data[i]]) buf_put(&want, text + i, 1);
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

static void fuzz_chat(const uint8_t *data, size_t size) {
    char *content = malloc(size + 1);
    check(content != NULL, "harness out of memory");
    memcpy(content, data, size);
    content[size] = '\0';
    size_t clen = strlen(content);
    struct anvil_chat_msg msgs[3] = {
        {"system", "You are a test."},
        {"user", content},
        {"assistant", content},
    };
    /* with and without a leading system message, with and without the
     * assistant header */
    for (int variant = 0; variant < 2; variant++) {
        const struct anvil_chat_msg *m = variant ? msgs : msgs + 1;
        size_t nm = variant ? 3 : 1;
        int32_t need = tok_chat_apply(g_vocab, m, nm, variant == 0, NULL, 0);
        if (need == 0) break; /* a vocabulary without a template anvil knows */
        check(need < 0, "chat size query reports the needed size");
        need = -need;
        char *out = malloc((size_t)need);
        check(out != NULL, "harness out of memory");
        int32_t got = tok_chat_apply(g_vocab, m, nm, variant == 0, out, need);
        check(got == need - 1 && out[got] == '\0', "chat render fills the size it asked for");
        check(memmem(out, (size_t)got, content, clen) != NULL || clen == 0,
              "content appears in the render");
        int32_t r = tok_chat_apply(g_vocab, m, nm, variant == 0, out, need - 1);
        check(r == -need, "chat render one byte short");
        int32_t n;
        anvil_token *ids = encode(g_vocab, out, (size_t)got, true, true, &n);
        check(n > 0, "chat render tokenizes");
        free(ids);
        free(out);
    }
    free(content);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0; /* long inputs add time, not coverage */
    int64_t live0 = anvil_alloc_live();
    fuzz_roundtrip(g_vocab, data, size);
    if (size > 0) fuzz_roundtrip(g_pre_vocab[data[0] % N_PRE], data, size);
    fuzz_ids(data, size);
    fuzz_chat(data, size);
    check(anvil_alloc_live() == live0, "tokenizer calls free their scratch");
    return 0;
}
