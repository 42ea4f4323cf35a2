/*
 * tok_int.h - internals shared by the tokenizer files (tokenizer.c, bpe.c,
 * pretok.c, utf8.c, chat.c) and by the tokenizer unit tests.
 *
 * Data flow of tok_encode for a byte-level BPE ("gpt2") vocabulary:
 *
 *   raw bytes --partition on special tokens (tokenizer.c)--> fragments
 *   fragment  --llama.cpp-style UTF-8 decode (utf8.c)------> normalized text
 *   text      --pre-tokenizer regexes, PCRE2 (pretok.c)----> words
 *   word      --byte-level BPE merges (bpe.c)--------------> token ids
 *
 * Everything in struct tok_vocab is written once by tok_build and then only
 * read, so one vocab serves any number of threads; per-call scratch lives in
 * struct tok_work, owned by the caller of the encode functions.
 */
#ifndef ANVIL_TOK_INT_H
#define ANVIL_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/hash.h"
#include "tok/tok.h"

/* ---------------------------------------------------------------------- */
/* vocabulary description: what tok_load reads from GGUF, or what a test
 * builds by hand. Strings are (ptr, len), not NUL-terminated. */

enum tok_kind {
    TOK_KIND_BPE = 1, /* tokenizer.ggml.model = "gpt2": byte-level BPE */
    /* TOK_KIND_SPM: SentencePiece ("llama") goes here, with its own
     * encode/piece functions behind the same dispatch in tokenizer.c. */
};

/* GGUF token types (tokenizer.ggml.token_type), llama.cpp's values. */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Token attributes (bit set), derived from the types. */
enum {
    TOK_ATTR_NORMAL = 1u << 0,
    TOK_ATTR_UNKNOWN = 1u << 1,
    TOK_ATTR_CONTROL = 1u << 2,
    TOK_ATTR_USER = 1u << 3,
    TOK_ATTR_UNUSED = 1u << 4,
    TOK_ATTR_BYTE = 1u << 5,
    TOK_ATTR_UNDEF = 1u << 6,
};

struct tok_spec {
    enum tok_kind kind;
    struct gguf_str pre;      /* tokenizer.ggml.pre; len 0 = "default" */
    int32_t n_tokens;
    const struct gguf_str *tokens; /* (n_tokens) */
    const int32_t *types;     /* (n_tokens) or NULL = all normal */
    int32_t n_merges;
    const struct gguf_str *merges; /* (n_merges) "left right" */
    int32_t bos, eos, unk, pad, eot, eom; /* -1 = none */
    int add_bos, add_eos;     /* 0/1, or -1 = the pre-tokenizer's default */
    struct gguf_str chat_template; /* len 0 = none */
};

/* Build a vocabulary from a spec. Copies everything it keeps. Same errors
 * as tok_load. */
anvil_status tok_build(const struct tok_spec *s, struct tok_vocab **out, char *err,
                       size_t err_cap);

/* ---------------------------------------------------------------------- */
/* the bottom floor (strtab.c): string table and growable buffers. The
 * other files call down into it, never the other way:
 *
 *   strtab.c utf8.c  <  pretok.c bpe.c  <  vocab.c  <  tokenizer.c chat.c
 *   <  load.c
 */

/* symbol id <-> text; ids are dense from 0, append-only */
struct tok_strtab {
    char *blob;             /* all texts back to back */
    size_t blob_len, blob_cap;
    uint32_t *off;          /* (n + 1): text i is blob[off[i] .. off[i+1]) */
    size_t off_cap;
    int32_t n;
    struct hash_index ix;   /* text -> id */
};

/* Empty table with room for about n_hint texts of blob_hint bytes. */
anvil_status strtab_init(struct tok_strtab *t, int32_t n_hint, size_t blob_hint);
void strtab_free(struct tok_strtab *t);
/* Id of text s (n bytes), or -1. */
int32_t strtab_find(const struct tok_strtab *t, const char *s, size_t n);
/* Id of text s, appending it when new (*added tells which, if not NULL).
 * ANVIL_ERR_FORMAT when the table would pass 4 GiB or 2^31 texts. */
anvil_status strtab_intern(struct tok_strtab *t, const char *s, size_t n, int32_t *id,
                           bool *added);

/* Make room for n elements of size sz in *p (capacity *cap, in elements). */
anvil_status tok_grow(void **p, size_t *cap, size_t n, size_t sz);

/* ---------------------------------------------------------------------- */
/* pre-tokenizer (pretok.c) */

#define TOK_MAX_RX 4

struct tok_pretok {
    int n_rx;
    pcre2_code *rx[TOK_MAX_RX]; /* applied in order, each to the previous pieces */
    pcre2_general_context *gctx; /* routes PCRE2's allocations to anvil_malloc */
    bool ignore_merges; /* a whole word found in the vocab is one token (llama3) */
    bool add_bos;       /* default of add_bos for this pre-tokenizer */
    const char *name;   /* canonical name (static string) */
};

/* Compile the regexes for tokenizer.ggml.pre = `pre` (len 0: "default").
 * ANVIL_ERR_UNSUPPORTED for an unknown name. */
anvil_status pretok_init(struct tok_pretok *p, struct gguf_str pre, char *err, size_t err_cap);
void pretok_free(struct tok_pretok *p);

/* A piece of text: byte range [start, start + len). */
struct tok_span {
    uint32_t start, len;
};

struct tok_work;

/* Split valid UTF-8 text (n bytes) into pre-tokenizer words, stored in
 * w->spans[0 .. *n_spans). Offsets are byte offsets into text. */
anvil_status pretok_split(const struct tok_pretok *p, const char *text, size_t n,
                          struct tok_work *w, size_t *n_spans);

/* ---------------------------------------------------------------------- */
/* per-call scratch: grown on demand, freed by tok_work_free */

struct bpe_sym;
struct bpe_bigram;

struct tok_work {
    char *norm, *rx;        /* normalized text and its regex twin (same length) */
    size_t text_cap;
    struct tok_span *spans, *spans2;
    size_t span_cap;
    struct bpe_sym *sym;
    size_t sym_cap;
    struct bpe_bigram *heap;
    size_t heap_cap;
    char *enc;              /* a word in byte-level encoding (ignore_merges) */
    size_t enc_cap;
    pcre2_match_data *md;
};

void tok_work_free(struct tok_work *w); /* tokenizer.c */

/* Token output: ids go to out[0 .. cap); n counts all of them. */
struct tok_out {
    anvil_token *out;
    int64_t cap, n;
};

static inline void tok_out_push(struct tok_out *o, anvil_token t) {
    if (o->n < o->cap) o->out[o->n] = t;
    o->n++;
}

/* ---------------------------------------------------------------------- */
/* UTF-8 and the GPT-2 byte alphabet (utf8.c) */

/* Decode one code point at s[*i] (n bytes total) the way llama.cpp's
 * unicode_cpt_from_utf8/unicode_cpts_from_utf8 do: lead byte decides the
 * length, continuation bytes must be 10xxxxxx and present, overlong forms
 * and surrogates are accepted as they decode; anything else yields U+FFFD
 * and consumes one byte. One deviation: a 4-byte form above U+10FFFF is
 * also treated as invalid (llama.cpp throws on it later and aborts). */
uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *i);
/* Encode a code point (<= 0x10FFFF; surrogates allowed) into b; returns 1-4. */
int utf8_encode(uint32_t cp, char *b);

/* Strict UTF-8 (Unicode 3.9, table 3-7) for the streaming decoder: at
 * s[0 .. n), returns the length of one complete valid character (> 0);
 * 0 if s is a valid but incomplete prefix (more bytes needed); or -k when
 * the first k bytes are an invalid maximal subpart (k >= 1), to be
 * replaced by one U+FFFD, as Python's bytes.decode("utf-8", "replace"). */
int utf8_next_strict(const unsigned char *s, size_t n);

/* GPT-2 bytes_to_unicode: byte b is shown as the code point tok_byte_cp[b]. */
uint32_t utf8_byte_to_cp(uint8_t b);
/* Inverse: the byte shown as code point cp, or -1 if cp is not in the
 * byte alphabet. */
int utf8_cp_to_byte(uint32_t cp);

/* ---------------------------------------------------------------------- */
/* byte-level BPE (bpe.c) */

struct tok_merges {
    uint64_t *key;   /* (mask + 1): left sym id << 32 | right sym id; UINT64_MAX = empty */
    int32_t *rank;   /* (mask + 1): merge rank (index in the merges array) */
    int32_t *res;    /* (mask + 1): symbol id of the merged text */
    uint32_t mask;
};

static inline uint32_t tok_hash64(uint64_t k) { /* murmur3 finalizer */
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* Build the merge table from "left right" strings: texts that are not yet
 * symbols are added to syms. The first of duplicate merges wins. */
anvil_status bpe_merges_build(struct tok_merges *m, struct tok_strtab *syms,
                              const struct gguf_str *merges, int32_t n_merges, char *err,
                              size_t err_cap);
void bpe_merges_free(struct tok_merges *m);

/* Rank and result of merging symbols (l, r); false when there is none. */
bool bpe_merge_find(const struct tok_merges *m, int32_t l, int32_t r, int32_t *rank,
                    int32_t *res);

/* Encode one pre-tokenized word (raw bytes) into tokens. */
anvil_status bpe_encode_word(const struct tok_vocab *v, const char *word, size_t n,
                             struct tok_work *w, struct tok_out *o);

/* ---------------------------------------------------------------------- */
/* chat templates (chat.c) */

enum tok_chat_kind {
    TOK_CHAT_NONE = 0,
    TOK_CHAT_CHATML,  /* <|im_start|>role\ncontent<|im_end|>\n */
    TOK_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
};

struct tok_chat {
    enum tok_chat_kind kind;
    char *default_system; /* injected when messages[0] is not "system"; or NULL */
};

/* Recognise a template's family from its source text. */
anvil_status chat_detect(struct tok_chat *c, struct gguf_str tmpl);
void chat_free(struct tok_chat *c);

/* ---------------------------------------------------------------------- */
/* the vocabulary */

struct tok_vocab {
    enum tok_kind kind;
    int32_t n_vocab;        /* symbols [0, n_vocab) are tokens */
    struct tok_strtab syms; /* token texts, then texts that only occur in merges */
    uint8_t *attr;          /* (n_vocab) TOK_ATTR_* */
    uint8_t *eog;           /* (n_vocab + 7) / 8 bit set of end-of-generation tokens */

    /* decoded bytes of each token (byte-level decoded for normal tokens,
     * verbatim for control/user-defined ones) */
    char *piece;            /* all pieces back to back */
    uint32_t *piece_off;    /* (n_vocab + 1) */

    struct tok_merges merges;
    int32_t byte_sym[256];  /* symbol id of the one-char text showing byte b, or -1 */
    int32_t byte_tok1[256]; /* token whose text is the single byte b, or -1 */
    char byte_enc[256][2];  /* UTF-8 of the code point showing byte b */
    uint8_t byte_enc_len[256];

    int32_t *special;       /* control/user-defined/unknown tokens, longest text first */
    int32_t n_special;

    anvil_token bos, eos, unk, pad, eot, eom;
    bool add_bos, add_eos;

    struct tok_pretok pre;
    struct tok_chat chat;
};

static inline const char *tok_text(const struct tok_vocab *v, int32_t id, size_t *len) {
    *len = v->syms.off[id + 1] - v->syms.off[id];
    return v->syms.blob + v->syms.off[id];
}

#endif
