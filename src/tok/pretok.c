/*
 * pretok.c - pre-tokenizers: split text into words before BPE, with the
 * regexes that tokenizer.ggml.pre names, run by PCRE2 (UTF + UCP, JIT when
 * the library has it).
 *
 * Reference: llama.cpp llama-vocab.cpp (llm_tokenizer_bpe: the regex list
 * per pre type) and unicode.cpp (unicode_regex_split). llama.cpp applies the
 * regexes of a list one after the other, each to the pieces the previous
 * one produced; text between two matches becomes a piece of its own. It
 * runs the GPT-2 and Llama-3 regexes through hand-written matchers; we run
 * the regexes themselves, which select the same pieces (checked by
 * tests/py/test_tok.py against llama-cpp-python), with two adjustments:
 *
 *   - `\s` is spelled out as llama.cpp's whitespace set (Unicode
 *     White_Space: TAB..CR, space, U+0085, U+00A0, U+1680, U+2000..U+200A,
 *     U+2028, U+2029, U+202F, U+205F, U+3000), so we do not depend on how a
 *     given PCRE2 version defines \s under UCP;
 *   - the GPT-2 pattern gets a final `|\s+` (llama.cpp's hand-written
 *     matcher has it; with the regex alone the same text would come out as
 *     an unmatched gap, i.e. the same piece).
 *
 * Known difference: PCRE2 10.42 (Debian 12) has Unicode 14 tables and
 * llama.cpp's unicode-data.cpp is Unicode 15, so the ~5,000 letters and 40
 * digits first assigned in Unicode 15 (CJK Ext. H, Kawi, Nag Mundari, ...)
 * are letters/digits for llama.cpp and unassigned for us.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// patterns

#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
#define RX_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
    "|[" WS "]+(?![^" WS "])|[" WS "]+"

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+  (NUM = {1,3} or empty) */
#define RX_LLAMA3_LIKE(NUM) \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])" \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" NUM "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*" \
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

struct pre_def {
    const char *names; /* tokenizer.ggml.pre values, '|'-separated */
    const char *canon;
    const char *rx[TOK_MAX_RX];
    bool ignore_merges, add_bos;
};

static const struct pre_def pre_defs[] = {
    /* llama.cpp LLAMA_VOCAB_PRE_TYPE_DEFAULT (also used when pre is missing) */
    {"default", "default",
     {"[\\p{P}$+<=>^~|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"gpt-2|gpt2|phi-2|mpt|olmo|jais", "gpt2", {RX_GPT2}, false, false},
    /* SmolLM, StarCoder: digits are split one by one first */
    {"smollm|starcoder|refact|codeshell|command-r", "smollm", {"\\p{N}", RX_GPT2}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3", "llama3", {RX_LLAMA3_LIKE("{1,3}")}, true, true},
    {"dbrx|smaug-bpe", "llama3", {RX_LLAMA3_LIKE("{1,3}")}, false, false},
    {"qwen2|deepseek-r1-qwen|megrez", "qwen2", {RX_LLAMA3_LIKE("")}, false, false},
};

static bool name_in_list(const char *list, struct gguf_str name) {
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == name.len && memcmp(p, name.ptr, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

// ----------------------------------------------------------------------------
// PCRE2 with the library's allocator

static void *rx_malloc(PCRE2_SIZE n, void *u) {
    (void)u;
    return anvil_malloc(n);
}
static void rx_free(void *p, void *u) {
    (void)u;
    anvil_free(p);
}

anvil_status pretok_init(struct tok_pretok *p, struct gguf_str pre, char *err, size_t err_cap) {
    memset(p, 0, sizeof(*p));
    static const char dflt[] = "default";
    if (pre.len == 0) pre = (struct gguf_str){dflt, sizeof(dflt) - 1};
    const struct pre_def *d = NULL;
    for (size_t i = 0; i < sizeof(pre_defs) / sizeof(pre_defs[0]); i++)
        if (name_in_list(pre_defs[i].names, pre)) d = &pre_defs[i];
    if (!d) {
        int n = pre.len > 64 ? 64 : (int)pre.len;
        errmsg_set(err, err_cap,
                   "unsupported pre-tokenizer tokenizer.ggml.pre = '%.*s' (supported: smollm, "
                   "gpt2, llama3/llama-bpe, qwen2, default and aliases)",
                   n, pre.ptr);
        return ANVIL_ERR_UNSUPPORTED;
    }
    p->gctx = pcre2_general_context_create(rx_malloc, rx_free, NULL);
    if (!p->gctx) return ANVIL_ERR_NOMEM;
    pcre2_compile_context *cc = pcre2_compile_context_create(p->gctx);
    if (!cc) {
        pretok_free(p);
        return ANVIL_ERR_NOMEM;
    }
    anvil_status st = ANVIL_OK;
    for (int i = 0; i < TOK_MAX_RX && d->rx[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->rx[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &ec, &eo, cc);
        if (!re) {
            /* our own patterns: only an allocation failure can get here */
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            errmsg_set(err, err_cap, "pre-tokenizer regex %d: %s at %zu", i, (char *)msg,
                       (size_t)eo);
            /* compile error 121 ("failed to get memory") is the only one
             * a fixed, tested pattern can hit */
            st = ec == 121 ? ANVIL_ERR_NOMEM : ANVIL_ERR_UNSUPPORTED;
            break;
        }
        /* JIT is an optimisation: without it (or on failure) the
         * interpreter gives the same matches. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->rx[p->n_rx++] = re;
    }
    pcre2_compile_context_free(cc);
    if (st != ANVIL_OK) {
        pretok_free(p);
        return st;
    }
    p->ignore_merges = d->ignore_merges;
    p->add_bos = d->add_bos;
    p->name = d->canon;
    return ANVIL_OK;
}

void pretok_free(struct tok_pretok *p) {
    for (int i = 0; i < p->n_rx; i++) pcre2_code_free(p->rx[i]);
    p->n_rx = 0;
    if (p->gctx) pcre2_general_context_free(p->gctx);
    p->gctx = NULL;
}

// ----------------------------------------------------------------------------
// splitting

/* Apply one regex to each span of `in`, writing the pieces to `out`:
 * each match is a piece, and so is each stretch between matches. */
static anvil_status split_one(const pcre2_code *re, const char *text, const struct tok_span *in,
                              size_t n_in, struct tok_span *out, size_t out_cap, size_t *n_out,
                              pcre2_match_data *md) {
    size_t k = 0;
    for (size_t s = 0; s < n_in; s++) {
        const char *sub = text + in[s].start;
        size_t len = in[s].len, pos = 0, prev = 0;
        while (pos < len) {
            /* the subject is this span only: lookaheads do not see past it */
            int rc = pcre2_match(re, (PCRE2_SPTR)sub, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return rc == PCRE2_ERROR_NOMEMORY ? ANVIL_ERR_NOMEM : ANVIL_ERR_INVALID;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* none of our patterns matches empty; stay safe anyway */
                pos = ms + 1;
                while (pos < len && ((unsigned char)sub[pos] & 0xc0) == 0x80) pos++;
                continue;
            }
            if (k + 2 > out_cap) return ANVIL_ERR_INVALID;
            if (ms > prev) out[k++] = (struct tok_span){in[s].start + (uint32_t)prev, (uint32_t)(ms - prev)};
            out[k++] = (struct tok_span){in[s].start + (uint32_t)ms, (uint32_t)(me - ms)};
            prev = pos = me;
        }
        if (prev < len) {
            if (k + 1 > out_cap) return ANVIL_ERR_INVALID;
            out[k++] = (struct tok_span){in[s].start + (uint32_t)prev, (uint32_t)(len - prev)};
        }
    }
    *n_out = k;
    return ANVIL_OK;
}

anvil_status pretok_split(const struct tok_pretok *p, const char *text, size_t n,
                          struct tok_work *w, size_t *n_spans) {
    *n_spans = 0;
    if (n == 0) return ANVIL_OK;
    if (n > UINT32_MAX) return ANVIL_ERR_INVALID;
    /* every piece holds at least one byte, so n pieces is a bound; one
     * more slot lets split_one write a gap and a match together */
    if (w->span_cap < n + 2) {
        size_t cap = w->span_cap * 2 > n + 2 ? w->span_cap * 2 : n + 2;
        size_t c1 = w->span_cap, c2 = w->span_cap;
        anvil_status st = tok_grow((void **)&w->spans, &c1, cap, sizeof(struct tok_span));
        if (st == ANVIL_OK) st = tok_grow((void **)&w->spans2, &c2, cap, sizeof(struct tok_span));
        if (st != ANVIL_OK) return st;
        w->span_cap = cap;
    }
    if (!w->md) {
        w->md = pcre2_match_data_create(1, p->gctx);
        if (!w->md) return ANVIL_ERR_NOMEM;
    }
    w->spans[0] = (struct tok_span){0, (uint32_t)n};
    size_t cnt = 1;
    for (int i = 0; i < p->n_rx; i++) {
        size_t out_n;
        anvil_status st = split_one(p->rx[i], text, w->spans, cnt, w->spans2, w->span_cap, &out_n, w->md);
        if (st != ANVIL_OK) return st;
        struct tok_span *t = w->spans;
        w->spans = w->spans2;
        w->spans2 = t;
        cnt = out_n;
    }
    *n_spans = cnt;
    return ANVIL_OK;
}
