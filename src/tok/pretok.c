/*
 * pretok.c - pre-tokenizers: split text into words before BPE, with the
 * regexes that tokenizer.ggml.pre names, run by PCRE2 (UTF + UCP, JIT when
 * the library has it).
 *
 * Reference: llama.cpp llama-vocab.cpp (llm_tokenizer_bpe: the regex list
 * per pre type) and unicode.cpp (unicode_regex_split). llama.cpp applies the
 * regexes of a list one after the other, each to the pieces the previous
 * one produced; text between two matches becomes a piece of its own. It
 * runs four patterns (GPT-2, Llama 3, Qwen 2, Qwen 3.5) through
 * hand-written matchers and the rest through std::regex, on a copy of the
 * text where every non-ASCII character stands for its category (when the
 * pattern uses \p{..}) or where non-ASCII spaces became \v (when it does
 * not). We run the patterns themselves with Unicode properties, written so
 * that they select the same pieces (every row is checked against
 * llama-cpp-python by tests/py/test_tok_vocabs.py):
 *
 *   - `\s` is spelled out as llama.cpp's whitespace set (Unicode
 *     White_Space: TAB..CR, space, U+0085, U+00A0, U+1680, U+2000..U+200A,
 *     U+2028, U+2029, U+202F, U+205F, U+3000), so we do not depend on how a
 *     given PCRE2 version defines \s under UCP; literal ranges that contain
 *     a non-ASCII space leave it out (std::wregex never sees one);
 *   - the GPT-2 pattern gets a final `|\s+` (llama.cpp's hand-written
 *     matcher has it; with the regex alone the same text would come out as
 *     an unmatched gap, i.e. the same piece);
 *   - std::regex's `$` (end of the piece) is PCRE's `\z`.
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
#define RX_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3_LIKE(NUM) \
    RX_CONTRACTIONS \
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" NUM "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*" \
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* Qwen 3.5: letters take their combining marks along */
#define RX_QWEN35 \
    RX_CONTRACTIONS \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*" \
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* o200k (GPT-4o, gpt-oss, Llama 4), as llama.cpp rewrote the tokenizer.json
 * pattern for std::regex: the case classes [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
 * and [\p{Ll}\p{Lm}\p{Lo}\p{M}] became "a letter that is not a-z" and "a
 * letter that is not A-Z" (so a non-ASCII letter is both, and marks are not
 * letters), which is what llama.cpp's output follows */
#define RX_GPT4O_UPPER "[^\\P{L}a-z]" /* (?=\p{L})[^a-z] as one class: no group to */
#define RX_GPT4O_LOWER "[^\\P{L}A-Z]" /* backtrack through on long words */
#define RX_GPT4O \
    "[^\\r\\n\\p{L}\\p{N}]?" RX_GPT4O_UPPER "*" RX_GPT4O_LOWER "+" RX_CONTRACTIONS "?" \
    "|[^\\r\\n\\p{L}\\p{N}]?" RX_GPT4O_UPPER "+" RX_GPT4O_LOWER "*" RX_CONTRACTIONS "?" \
    "|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*" \
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* the CJK/Hangul run of DeepSeek's pre-tokenizers, U+0800-U+9FA5 and
 * U+AC00-U+D7FF: llama.cpp runs it through std::wregex after replacing
 * every non-ASCII space by \v, so the spaces inside the range (U+1680,
 * U+2000-U+200A, U+2028/9, U+202F, U+205F, U+3000) are left out here */
#define RX_DEEPSEEK_CJK \
    "[\\x{800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}" \
    "\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{9FA5}\\x{AC00}-\\x{D7FF}]+"

/* DeepSeek LLM's letters, as its tokenizer.json lists them */
#define RX_DEEPSEEK_LETTERS \
    "[" WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}" \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}" \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}" \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}" \
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}" \
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}" \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}" \
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}" \
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}" \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}" \
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}" \
    "\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}" \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}" \
    "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}" \
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}" \
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}" \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}" \
    "\\x{1E900}-\\x{1E943}]+"

/* DeepSeek LLM's punctuation run (U+3000 is a space there, see above);
 * `$` of std::regex is the end of the piece: \z, not PCRE's $ */
#define RX_DEEPSEEK_PUNCT \
    "[" WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}-\\x{3002}]+"

/* DeepSeek V3: ASCII punctuation opens a word, letters keep their marks */
#define RX_DEEPSEEK3 \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" \
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*" \
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+"

/* BLOOM, Poro, Viking: anything up to a space or one of these marks */
#define RX_BLOOM \
    " ?[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

struct pre_def {
    const char *names; /* tokenizer.ggml.pre values, '|'-separated */
    const char *canon;
    const char *rx[TOK_MAX_RX];
    bool ignore_merges, add_bos;
};

/* Each row: llama.cpp's LLAMA_VOCAB_PRE_TYPE_* for these names
 * (llama-vocab.cpp, the pre-type switch and llm_tokenizer_bpe's regex
 * lists). tests/py/test_tok_vocabs.py checks every row against
 * llama-cpp-python. */
static const struct pre_def pre_defs[] = {
    /* also used when tokenizer.ggml.pre is missing */
    {"default", "default",
     {"[\\p{P}$+<=>^~|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"gpt-2|gpt2|phi-2|mpt|olmo|jais|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|"
     "mellum|modern-bert|exaone4|trillion|granite-docling",
     "gpt2", {RX_GPT2}, false, false},
    /* SmolLM, StarCoder: digits are split one by one first */
    {"smollm|starcoder|refact|command-r|codeshell|exaone|minerva-7b|mellum2", "smollm",
     {"\\p{N}", RX_GPT2}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", "llama3",
     {RX_LLAMA3_LIKE("{1,3}")}, true, true},
    {"dbrx|smaug-bpe", "dbrx", {RX_LLAMA3_LIKE("{1,3}")}, false, false},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez|stablelm2|hunyuan|solar-open|grok-2", "qwen2",
     {RX_LLAMA3_LIKE("")}, false, false},
    {"qwen35", "qwen35", {RX_QWEN35}, false, false},
    {"laguna", "laguna", {"[^\\n]+|[\\n]+", RX_LLAMA3_LIKE("")}, false, false},
    {"falcon", "falcon", {"[\\p{P}$+<=>^~|`]+", RX_GPT2, "[0-9][0-9][0-9]"}, false, false},
    {"deepseek-llm", "deepseek-llm",
     {"[\\r\\n]", RX_DEEPSEEK_LETTERS, RX_DEEPSEEK_PUNCT, "[" WS "]+\\z", RX_DEEPSEEK_CJK,
      "\\p{N}+"},
     false, false},
    {"deepseek-coder", "deepseek-coder",
     {"[\\r\\n]", "[" WS "]?\\p{L}+", "[" WS "]?\\p{P}+", RX_DEEPSEEK_CJK, "\\p{N}"}, false,
     false},
    {"deepseek-v3|hunyuan-dense|joyai-llm|hy_v4", "deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", RX_DEEPSEEK3},
     false, false},
    {"poro-chat|bloom|gpt3-finnish", "bloom", {RX_BLOOM}, false, false},
    {"viking", "viking", {RX_BLOOM, "\\p{N}"}, false, false},
    {"gpt-4o|llama4", "gpt-4o", {RX_GPT4O}, false, false},
    /* raw-UTF-8 BPE (tokenizer.ggml.model "gemma4"): only newlines split */
    {"gemma4", "gemma4", {"[^\\n]+|[\\n]+"}, false, true},
};

const char *pretok_names(void) {
    return "default, gpt2, smollm/starcoder/refact/command-r, llama3/llama-bpe, dbrx, "
           "qwen2, qwen35, laguna, falcon, deepseek-llm, deepseek-coder, deepseek-v3, "
           "bloom, viking, gemma4, gpt-4o/llama4 and aliases";
}

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
    return core_malloc(n);
}
static void rx_free(void *p, void *u) {
    (void)u;
    core_free(p);
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
                   "unsupported pre-tokenizer tokenizer.ggml.pre = '%.*s' (supported: %s)", n,
                   pre.ptr, pretok_names());
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
    anvil_status st = tok_grow((void **)&w->spans, &w->span_cap, n + 2, sizeof(struct tok_span));
    if (st == ANVIL_OK)
        st = tok_grow((void **)&w->spans2, &w->span2_cap, n + 2, sizeof(struct tok_span));
    if (st != ANVIL_OK) return st;
    if (!w->md) {
        w->md = pcre2_match_data_create(1, p->gctx);
        if (!w->md) return ANVIL_ERR_NOMEM;
    }
    w->spans[0] = (struct tok_span){0, (uint32_t)n};
    size_t cnt = 1;
    for (int i = 0; i < p->n_rx; i++) {
        size_t out_n;
        st = split_one(p->rx[i], text, w->spans, cnt, w->spans2, w->span2_cap, &out_n, w->md);
        if (st != ANVIL_OK) return st;
        struct tok_span *t = w->spans;
        w->spans = w->spans2;
        w->spans2 = t;
        size_t c = w->span_cap;
        w->span_cap = w->span2_cap;
        w->span2_cap = c;
        cnt = out_n;
    }
    *n_spans = cnt;
    return ANVIL_OK;
}
