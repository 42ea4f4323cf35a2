/*
 * tok_int.h - internals shared by the tokenizer files and by the
 * tokenizer unit tests.
 *
 * Floors (each file calls only the floors below it):
 *
 *   strtab.c utf8.c                       string table, maps, scratch, UTF-8
 *   unicode_tab.c                         character classes, lowercase, NFD (generated)
 *   pretok.c bpe.c spm.c special.c        the algorithms, each on its own data
 *   wpm.c ugm.c                           WordPiece (BERT), Unigram (T5 / XLM-R)
 *   chat_tmpl.c                           template recognition (text only)
 *   vocab.c                               tok_build: derive everything once
 *   tokenizer.c                           tok_encode, pieces, detokenizer
 *   chat.c                                render / tokenize a conversation
 *   load.c                                GGUF metadata -> tok_spec -> tok_build
 *
 * Data flow of tok_encode:
 *
 *   raw bytes --special-token partition (special.c)---------> fragments
 *   BPE fragment --llama.cpp-style UTF-8 decode (utf8.c)----> normalized text
 *     text --pre-tokenizer regexes, PCRE2 (pretok.c)--------> words
 *     word --BPE merges by rank (bpe.c)---------------------> token ids
 *   SPM fragment --space prefix, U+2581 for spaces----------> text
 *     text --merges by token score (spm.c)------------------> token ids
 *   WPM fragment --lowercase, strip accents, split (wpm.c)--> words
 *     "\u2581" + word --greedy longest match----------------> token ids
 *   UGM fragment --precompiled charsmap, spaces (ugm.c)-----> text
 *     text --Viterbi over token scores (ugm.c)--------------> token ids
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
    TOK_KIND_BPE = 1, /* "gpt2" (GPT-2 byte alphabet) or "gemma4" (raw UTF-8) */
    TOK_KIND_SPM = 2, /* "llama": SentencePiece-style, merges by token score */
    TOK_KIND_WPM = 3, /* "bert": WordPiece, greedy longest match per word */
    TOK_KIND_UGM = 4, /* "t5": Unigram, Viterbi over token scores */
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

/* Token attributes (bit set), derived from the types and llama.cpp's
 * fix-ups. LSTRIP/RSTRIP: the special token eats the ASCII whitespace
 * before/after it when the text is partitioned. */
enum {
    TOK_ATTR_NORMAL = 1u << 0,
    TOK_ATTR_UNKNOWN = 1u << 1,
    TOK_ATTR_CONTROL = 1u << 2,
    TOK_ATTR_USER = 1u << 3,
    TOK_ATTR_UNUSED = 1u << 4,
    TOK_ATTR_BYTE = 1u << 5,
    TOK_ATTR_UNDEF = 1u << 6,
    TOK_ATTR_LSTRIP = 1u << 7,
    TOK_ATTR_RSTRIP = 1u << 8,
};
#define TOK_ATTR_SPECIAL (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN)

/* The merge queue of BPE and SPM: a binary heap over an array of bigrams
 * of type T, BEFORE(a, b) true when a pops first. Defines the file-local
 * heap_push(T *h, size_t *n, T b) and T heap_pop(T *h, size_t *n) (n > 0). */
#define TOK_BIGRAM_HEAP(T, BEFORE) \
    static void heap_push(T *h, size_t *n, T b) { \
        size_t i = (*n)++; \
        while (i > 0) { \
            size_t p = (i - 1) / 2; \
            if (!BEFORE(&b, &h[p])) break; \
            h[i] = h[p]; \
            i = p; \
        } \
        h[i] = b; \
    } \
    static T heap_pop(T *h, size_t *n) { \
        T top = h[0]; \
        T last = h[--(*n)]; \
        size_t i = 0, m = *n; \
        for (;;) { \
            size_t c = 2 * i + 1; \
            if (c >= m) break; \
            if (c + 1 < m && BEFORE(&h[c + 1], &h[c])) c++; \
            if (!BEFORE(&h[c], &last)) break; \
            h[i] = h[c]; \
            i = c; \
        } \
        if (m > 0) h[i] = last; \
        return top; \
    }

struct tok_spec {
    enum tok_kind kind;
    bool bpe_raw;             /* BPE over raw UTF-8 with U+2581 for spaces and
                               * <0xNN> byte fallback ("gemma4"), not GPT-2 bytes */
    struct gguf_str pre;      /* tokenizer.ggml.pre; len 0 = "default" */
    int32_t n_tokens;
    const struct gguf_str *tokens; /* (n_tokens) */
    const int32_t *types;     /* (n_tokens) or NULL = all normal */
    const float *scores;      /* (n_tokens) or NULL = all 0 (SPM merge priority) */
    int32_t n_merges;
    const struct gguf_str *merges; /* (n_merges) "left right" (BPE) */
    int32_t bos, eos, unk, pad, eot, eom; /* -1 = none */
    int32_t sep;              /* separator (WPM: [SEP], added last); -1 = none */
    bool fim_given[ANVIL_FIM_COUNT]; /* the file gives fim[k] (tokenizer.ggml.
                               * fim_*_token_id, in range); else vocab.c finds
                               * the token by its text (zero-init: none given) */
    int32_t fim[ANVIL_FIM_COUNT];
    int add_bos, add_eos;     /* 0/1, or -1 = the kind's / pre-tokenizer's default */
    int space_prefix;         /* add_space_prefix: 0 = the kind's default (SPM yes,
                               * UGM no), 1 yes, -1 no */
    int lowercase;            /* WPM normalizer: 0 = default (yes), 1 yes, -1 no */
    int strip_accents;        /* WPM normalizer: 0 = as lowercase, 1 yes, -1 no */
    bool remove_extra_ws;     /* UGM: runs of spaces become one, none at the ends */
    const uint8_t *charsmap;  /* UGM precompiled_charsmap (charsmap_len bytes) or NULL */
    size_t charsmap_len;
    bool rstrip_specials;     /* Phi-3 (llama.cpp keys it on general.name): special
                               * tokens but <unk> <s> <|endoftext|> eat the whitespace
                               * after them */
    struct gguf_str chat_template; /* len 0 = none */
};

/* Build a vocabulary from a spec. Copies everything it keeps. Same errors
 * as tok_load. */
anvil_status tok_build(const struct tok_spec *s, struct tok_vocab **out, char *err,
                       size_t err_cap);

/* ---------------------------------------------------------------------- */
/* the bottom floor (strtab.c): string table, an integer map, growable
 * buffers */

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

static inline const char *strtab_text(const struct tok_strtab *t, int32_t id, size_t *len) {
    *len = t->off[id + 1] - t->off[id];
    return t->blob + t->off[id];
}

/* u64 -> int32 map, open addressing (merge pairs, special-token trie edges).
 * UINT64_MAX is not a valid key. */
struct tok_map64 {
    uint64_t *key; /* (mask + 1); UINT64_MAX = empty */
    int32_t *val;  /* (mask + 1) */
    uint32_t mask, n;
};

anvil_status map64_init(struct tok_map64 *m, size_t n_hint);
void map64_free(struct tok_map64 *m);
/* Value of key, or -1. */
int32_t map64_get(const struct tok_map64 *m, uint64_t key);
/* Set key to val unless key is already there (the first value stays);
 * grows as needed. */
anvil_status map64_put_first(struct tok_map64 *m, uint64_t key, int32_t val);

/* Make room for n elements of size sz in *p (capacity *cap, in elements). */
anvil_status tok_grow(void **p, size_t *cap, size_t n, size_t sz);

/* Token output: ids go to out[0 .. cap); n counts all of them. */
struct tok_out {
    anvil_token *out;
    int64_t cap, n;
};

static inline void tok_out_push(struct tok_out *o, anvil_token t) {
    if (o->n < o->cap) o->out[o->n] = t;
    o->n++;
}

/* A piece of text: byte range [start, start + len). */
struct tok_span {
    uint32_t start, len;
};

/* ---------------------------------------------------------------------- */
/* per-call scratch: grown on demand, freed by tok_work_free */

struct bpe_sym;
struct bpe_bigram;
struct spm_sym;
struct spm_bigram;
struct special_hit;
struct ugm_best;

struct tok_work {
    char *norm, *rx;        /* normalized text and its regex twin (same length) */
    size_t norm_cap, rx_cap;
    struct tok_span *spans, *spans2;
    size_t span_cap, span2_cap;
    struct bpe_sym *sym;
    size_t sym_cap;
    struct bpe_bigram *heap;
    size_t heap_cap;
    struct spm_sym *ssym;
    size_t ssym_cap;
    struct spm_bigram *sheap;
    size_t sheap_cap;
    uint32_t *cps;          /* WPM: the fragment's code points */
    size_t cps_cap;
    struct ugm_best *best;  /* UGM: Viterbi lattice, one entry per byte + 1 */
    size_t best_cap;
    char *enc;              /* a word in byte-level encoding (ignore_merges) */
    size_t enc_cap;
    pcre2_match_data *md;
    /* special-token partition */
    struct special_hit *hits;
    size_t hits_cap;
    int32_t *owner;         /* (text length) per byte: -1 free, -2 stripped, else token */
    size_t owner_cap;
};

void tok_work_free(struct tok_work *w); /* tokenizer.c */

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
/* Length of the UTF-8 sequence that lead byte c announces, from its high
 * nibble alone (1 for ASCII and stray continuation bytes, 2 for C0-DF,
 * 3 for E0-EF, 4 for F0-FF): how llama.cpp cuts text into characters for
 * SPM and BPE symbols. */
int utf8_lead_len(unsigned char c);

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
/* pre-tokenizer (pretok.c) */

#define TOK_MAX_RX 6

struct tok_pretok {
    int n_rx;
    pcre2_code *rx[TOK_MAX_RX]; /* applied in order, each to the previous pieces */
    pcre2_general_context *gctx; /* routes PCRE2's allocations to core_malloc */
    bool ignore_merges; /* a whole word found in the vocab is one token (llama3) */
    bool add_bos;       /* default of add_bos for this pre-tokenizer */
    const char *name;   /* canonical name (static string) */
};

/* Compile the regexes for tokenizer.ggml.pre = `pre` (len 0: "default").
 * ANVIL_ERR_UNSUPPORTED, naming pre, for an unknown name. */
anvil_status pretok_init(struct tok_pretok *p, struct gguf_str pre, char *err, size_t err_cap);
void pretok_free(struct tok_pretok *p);
/* The tokenizer.ggml.pre names anvil knows, for messages. */
const char *pretok_names(void);

/* Split valid UTF-8 text (n bytes) into pre-tokenizer words, stored in
 * w->spans[0 .. *n_spans). Offsets are byte offsets into text. */
anvil_status pretok_split(const struct tok_pretok *p, const char *text, size_t n,
                          struct tok_work *w, size_t *n_spans);

/* ---------------------------------------------------------------------- */
/* BPE (bpe.c): merges by rank on the symbols of one word */

struct tok_bpe {
    const struct tok_strtab *syms; /* token texts, then merge-only texts */
    int32_t n_vocab;               /* symbols below this are tokens */
    struct tok_map64 merges;       /* (left sym << 32 | right sym) -> merge rank */
    int32_t *merge_res;            /* (n_merges): symbol of the merged text */
    int32_t n_merges;
    bool raw;                      /* symbols are UTF-8 characters of the text
                                    * (gemma4), not GPT-2 byte characters */
    bool ignore_merges;            /* a word that is a token stays whole */
    bool newline_words;            /* raw: a word of '\n's that is a token stays whole */
    int32_t byte_sym[256];         /* !raw: symbol of the character showing byte b */
    char byte_enc[256][2];         /* !raw: UTF-8 of the character showing byte b */
    uint8_t byte_enc_len[256];
    int32_t fallback[256];         /* token for one byte of a non-token symbol's
                                    * text ("b" or "<0xBB>"), or -1: dropped */
};

/* Build the merge table from "left right" strings: texts that are not yet
 * symbols are added to syms. The first of duplicate merges wins. */
anvil_status bpe_init(struct tok_bpe *b, struct tok_strtab *syms, int32_t n_vocab, bool raw,
                      const struct gguf_str *merges, int32_t n_merges, char *err, size_t err_cap);
void bpe_free(struct tok_bpe *b);

/* Rank and result of merging symbols (l, r); false when there is none. */
bool bpe_merge_find(const struct tok_bpe *b, int32_t l, int32_t r, int32_t *rank,
                    int32_t *res);

/* Encode one pre-tokenized word (n bytes: raw bytes, or UTF-8 for raw
 * mode) into tokens. */
anvil_status bpe_encode_word(const struct tok_bpe *b, const char *word, size_t n,
                             struct tok_work *w, struct tok_out *o);

/* ---------------------------------------------------------------------- */
/* SPM (spm.c): merges by token score over the whole fragment */

struct tok_spm {
    const struct tok_strtab *syms;
    int32_t n_vocab;
    const float *score;     /* (n_vocab) */
    const uint16_t *attr;   /* (n_vocab) */
    int32_t byte_tok[256];  /* "<0xBB>", else the one-byte token "b", else -1 */
    int32_t unk;
};

/* Encode text (U+2581 already standing for spaces) into tokens: start
 * from one symbol per character (utf8_lead_len), merge the adjacent pair
 * whose concatenation is the best-scoring token (ties: leftmost) until no
 * pair is a token, then emit each symbol's token, or its bytes as byte
 * tokens. Control tokens never come out of merging. O(n log n). */
anvil_status spm_encode(const struct tok_spm *s, const char *text, size_t n, struct tok_work *w,
                        struct tok_out *o);

/* ---------------------------------------------------------------------- */
/* Unicode character data (unicode_tab.c, generated by
 * tests/gen/gen_tok_unicode.py from UnicodeData.txt) */

enum { TOK_UCLS_OTHER, TOK_UCLS_CONTROL, TOK_UCLS_PUNCT, TOK_UCLS_MARK, TOK_UCLS_SYMBOL };
struct tok_urange {
    uint32_t start; /* the class holds from start to the next range's start - 1 */
    uint8_t cls;    /* TOK_UCLS_*: control = Cc Cf Co Cs, punct = P*, mark = M*,
                     * symbol = S*, other = letters, numbers, separators, unassigned */
};
extern const struct tok_urange tok_uclass[]; /* (tok_n_uclass) sorted by start */
extern const int tok_n_uclass;
extern const uint32_t tok_ulower[][2]; /* (tok_ulower_n) {cp, simple lowercase}, sorted */
extern const int tok_ulower_n;
extern const uint32_t tok_unfd[][2];   /* (tok_unfd_n) {cp, first code point of its
                                        * canonical decomposition}, sorted; Hangul
                                        * syllables are computed instead */
extern const int tok_unfd_n;

/* ---------------------------------------------------------------------- */
/* WordPiece (wpm.c): BERT's uncased tokenizer as llama.cpp runs it */

struct tok_wpm {
    const struct tok_strtab *syms;
    int32_t n_vocab;
    int32_t unk;         /* a word with no full match; -1: the word is dropped */
    int32_t max_len;     /* longest token text, bytes */
    bool lowercase;      /* lower-case every character */
    bool strip_accents;  /* map each character to the first code point of its
                          * decomposition and drop marks (\p{M}) */
};

/* Encode one raw fragment: normalized (lowercase, accents), split into
 * words at whitespace and around punctuation and CJK ideographs, each word
 * "\u2581" + word matched greedily longest-first against the vocabulary;
 * a word that does not match to its end gives unk. */
anvil_status wpm_encode(const struct tok_wpm *p, const char *text, size_t n, struct tok_work *w,
                        struct tok_out *o);

/* ---------------------------------------------------------------------- */
/* Unigram (ugm.c): SentencePiece's unigram model as llama.cpp runs it */

struct tok_ugm {
    /* token trie: (node << 8 | byte) -> child node; node_tok[node] = token
     * spelled by the path from the root (node 0), or -1 */
    struct tok_map64 edge;
    int32_t *node_tok;       /* (n_nodes) */
    int32_t n_nodes;
    struct tok_map64 uedge;  /* the same over the user-defined tokens only */
    int32_t *unode_tok;      /* (n_unodes) */
    int32_t n_unodes;
    const float *score;      /* (n_vocab) */
    const uint16_t *attr;    /* (n_vocab) */
    int32_t unk;             /* -1: characters no token spells are dropped */
    double unk_score;        /* lowest normal token score - 10 */
    /* precompiled charsmap: XOR-compressed compact double array over the
     * input bytes (xcda, n_xcda entries) whose leaves index NUL-terminated
     * replacement strings in repl (n_repl bytes) */
    uint32_t *xcda;
    size_t n_xcda;
    char *repl;
    size_t n_repl;
    bool space_prefix;       /* a U+2581 before the fragment */
    bool remove_extra_ws;    /* one U+2581 before every run of non-spaces, no
                              * other spaces */
};

/* Build the tries and copy the charsmap. ANVIL_ERR_FORMAT (with err) for
 * a charsmap whose header does not fit. */
anvil_status ugm_init(struct tok_ugm *u, const struct tok_strtab *syms, int32_t n_vocab,
                      const float *score, const uint16_t *attr, int32_t unk,
                      const uint8_t *charsmap, size_t charsmap_len, char *err, size_t err_cap);
void ugm_free(struct tok_ugm *u);
/* Encode one raw fragment: normalized by the charsmap (longest match
 * first, user-defined tokens kept as they are, invalid UTF-8 bytes each
 * U+FFFD), spaces as U+2581, then the best-scoring segmentation (Viterbi;
 * a character no token spells costs unk_score, and runs of unknowns
 * give one unk). */
anvil_status ugm_encode(const struct tok_ugm *u, const char *text, size_t n, struct tok_work *w,
                        struct tok_out *o);

/* ---------------------------------------------------------------------- */
/* special tokens (special.c): the partition that cuts control, unknown
 * and user-defined tokens out of the text before the tokenizer runs */

struct tok_specials {
    struct tok_map64 edge;   /* trie over the texts: (node << 8 | byte) -> child */
    int32_t *node_tok;       /* (n_nodes): the special token spelled by the path, or -1 */
    int32_t n_nodes;
    uint8_t first[32];       /* bit set of the bytes a special text starts with */
    int32_t *rank;           /* (n_vocab): priority (0 = first), -1 = not special */
    int32_t n;               /* special tokens */
};

/* Index the tokens with attr & TOK_ATTR_SPECIAL: priority is llama.cpp's
 * order, longest text first (ties: lower id first). */
anvil_status special_init(struct tok_specials *sp, const struct tok_strtab *syms,
                          const uint16_t *attr, int32_t n_vocab);
void special_free(struct tok_specials *sp);

/* One output fragment of the partition. */
struct tok_frag {
    int32_t tok;          /* a special token, or -1 for raw text */
    uint32_t start, len;  /* raw text: bytes [start, start + len) */
};

/* Partition text[0 .. n) as llama.cpp's tokenizer_st_partition does: for
 * each special token in priority order, each occurrence in what is still
 * raw text, left to right, becomes that token (LSTRIP/RSTRIP tokens also
 * take the ASCII whitespace around them). User-defined tokens always take
 * part; control and unknown ones when parse_special, and never inside the
 * protected spans (sorted, disjoint): that is how message content stays
 * text in a chat prompt. Fragments go to *frags (grown; *n_frags). */
anvil_status special_partition(const struct tok_specials *sp, const uint16_t *attr,
                               const struct tok_strtab *syms, const char *text, size_t n,
                               bool parse_special, const struct tok_span *protect,
                               size_t n_protect, struct tok_work *w, struct tok_frag **frags,
                               size_t *frags_cap, size_t *n_frags);

/* ---------------------------------------------------------------------- */
/* chat templates: recognition (chat_tmpl.c) and rendering (chat.c) */

enum tok_chat_kind {
    TOK_CHAT_NONE = 0,
    TOK_CHAT_CHATML,     /* <|im_start|>role\ncontent<|im_end|>\n */
    TOK_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> */
    TOK_CHAT_GEMMA,      /* <start_of_turn>user\ncontent<end_of_turn>\n, system folded in */
    TOK_CHAT_MISTRAL_V1, /* [INST] content [/INST]answer</s> (7B v0.1) */
    TOK_CHAT_MISTRAL_V3, /* [INST]content[/INST]answer</s>, system before the last user
                          * message (Nemo, "v3-tekken" in llama.cpp) */
    TOK_CHAT_MISTRAL_V7, /* [SYSTEM_PROMPT]..[/SYSTEM_PROMPT][INST]content[/INST]answer</s> */
    TOK_CHAT_PHI3,       /* <|user|>\ncontent<|end|>\n<|assistant|>\n */
    TOK_CHAT_COUNT
};

/* Variant switches of a family, read from the template text. */
enum {
    TOK_CHAT_F_TRIM = 1u << 0,        /* content | trim */
    TOK_CHAT_F_DATE = 1u << 1,        /* Llama 3.1+: a system turn with the knowledge
                                       * date and today's date, always */
    TOK_CHAT_F_QWEN3_THINK = 1u << 2, /* Qwen 3: assistant turns before the last query
                                       * lose their <think> block, later ones keep it
                                       * in Qwen 3's layout */
    TOK_CHAT_F_NO_SYSTEM = 1u << 3,   /* Phi-3: the template drops system messages */
    TOK_CHAT_F_EOS_END = 1u << 4,     /* Phi-3.5: eos_token after the last turn when
                                       * no generation prompt is asked */
    TOK_CHAT_F_BOS = 1u << 5,         /* the template starts with bos_token */
};

struct tok_chat {
    enum tok_chat_kind kind;
    unsigned flags;
    int source;           /* enum anvil_chat_source: how the kind was chosen */
    char *default_system; /* injected when messages[0] is not "system"; or NULL */
    char *date;           /* Llama 3.1/3.3: the fixed "Today Date"; NULL: today's */
};

/* Recognise a template's family from its source text (never executed).
 * kind NONE when nothing matched. */
anvil_status chat_detect(struct tok_chat *c, struct gguf_str tmpl);
/* For a vocabulary without a template: the family whose turn markers are
 * tokens of the vocabulary (<start_of_turn> -> Gemma, ...), with the
 * current form's flags; kind stays NONE when none matches. */
void chat_detect_vocab(struct tok_chat *c, const struct tok_strtab *syms, int32_t n_vocab);
/* The flags of the current form of c->kind (used when the kind comes from
 * the vocabulary or the user, not from a template text). */
void chat_defaults(struct tok_chat *c);
void chat_free(struct tok_chat *c);
/* Canonical name of a kind ("chatml", "llama3", ...), NULL for NONE. */
const char *chat_kind_name(enum tok_chat_kind k);
/* Kind for a name (as chat_kind_name gives, or an alias); NONE if unknown. */
enum tok_chat_kind chat_kind_from_name(const char *name);
/* Names for messages: "chatml, llama3, ...". */
const char *chat_kind_names(void);

/* Render messages (chat.c): the template's own text, and the spans of the
 * result that came from the caller (message content and roles).
 * *out is allocated (core_malloc), NUL-terminated, *out_len bytes
 * without the NUL; *spans (allocated, *n_spans) are sorted and disjoint.
 * with_bos writes the BOS text where the template has bos_token (tests
 * compare with Jinja that way); without it BOS is left to the tokenizer,
 * as add_special adds it. */
anvil_status chat_render(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                         size_t n_msgs, bool add_assistant, bool with_bos, char **out,
                         size_t *out_len, struct tok_span **spans, size_t *n_spans);

/* The Jinja chat template (chat_jinja.c): the GGUF's tokenizer.chat_template
 * or a file's, rendered by src/tmpl. src NULL = the built-in family
 * (struct tok_chat) renders. */
enum { TOK_JINJA_NONE = 0, TOK_JINJA_GGUF = 1, TOK_JINJA_FILE = 2 };
struct tok_jinja {
    char *src;      /* NUL-terminated copy, or NULL */
    size_t len;
    int origin;     /* TOK_JINJA_* */
    char warn[320]; /* why the GGUF's template is not used ("" = it is, or none) */
};
/* From the GGUF's template text: kept when it parses, else warn is set
 * and src stays NULL. ANVIL_ERR_NOMEM only. */
anvil_status chat_jinja_init(struct tok_jinja *j, struct gguf_str tmpl);
void chat_jinja_free(struct tok_jinja *j);

/* ---------------------------------------------------------------------- */
/* the vocabulary */

struct tok_vocab {
    enum tok_kind kind;
    int32_t n_vocab;        /* symbols [0, n_vocab) are tokens */
    struct tok_strtab syms; /* token texts, then texts that only occur in merges */
    uint16_t *attr;         /* (n_vocab) TOK_ATTR_* */
    float *score;           /* (n_vocab) SPM merge scores; NULL for BPE */
    uint8_t *eog;           /* (n_vocab + 7) / 8 bit set of end-of-generation tokens */

    /* decoded bytes of each token: byte-level decoded (BPE), U+2581 back to
     * a space (SPM, raw BPE), <0xNN> to its byte, control/user-defined
     * verbatim */
    char *piece;            /* all pieces back to back */
    uint32_t *piece_off;    /* (n_vocab + 1) */

    struct tok_bpe bpe;     /* BPE */
    struct tok_spm spm;     /* SPM */
    struct tok_wpm wpm;     /* WPM */
    struct tok_ugm ugm;     /* UGM */
    bool escape_spaces;     /* spaces become U+2581 before merging (SPM, raw BPE) */
    bool space_prefix;      /* SPM: a raw fragment after a special token (or at
                             * the start) gets a leading space */
    struct tok_specials specials;

    anvil_token bos, eos, unk, pad, eot, eom, sep;
    anvil_token fim[ANVIL_FIM_COUNT]; /* fill-in-the-middle tokens; -1 = none */
    bool add_bos, add_eos;
    bool add_sep;           /* WPM: [SEP] after the text with add_special */

    struct tok_pretok pre;
    struct tok_chat chat;
    struct tok_jinja jinja; /* the Jinja template in use (chat_jinja.c) */
};

static inline const char *tok_text(const struct tok_vocab *v, int32_t id, size_t *len) {
    return strtab_text(&v->syms, id, len);
}

/* tok_encode with spans of text where control tokens must not be
 * recognised (chat message content); add_special as tok_encode. Same
 * return convention. */
int32_t tok_encode_protected(const struct tok_vocab *v, const char *text, size_t len,
                             const struct tok_span *protect, size_t n_protect,
                             anvil_token *out, int32_t cap, bool add_special);

#endif
