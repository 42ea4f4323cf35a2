/*
 * chat_tmpl.c - recognise the family of a chat template from its source
 * text (tokenizer.chat_template), without executing it: anvil has no
 * Jinja engine, and a template is untrusted input. chat.c renders the
 * families natively.
 *
 * A family is recognised by its turn markers; the variants inside a
 * family by a few phrases of the template text (listed with the flags in
 * tok_int.h). tests/py/test_chat_templates.py renders every template of
 * llama.cpp's collection that this file claims with the jinja2 package
 * and compares the strings: a template that contains a family's markers
 * but renders something anvil does not reproduce (tool preambles, extra
 * metadata blocks) is refused here by its telltale phrase, so it gets the
 * "unrecognised" warning instead of a silently wrong prompt.
 *
 * Also here: the family of a vocabulary that comes without a template
 * (Gemma 3's GGUF has none), from the turn-marker tokens it contains.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

static const char *find_in(const char *s, size_t n, const char *pat, size_t from) {
    size_t m = strlen(pat);
    if (from > n) return NULL;
    return memmem(s + from, n - from, pat, m);
}

static bool has(struct gguf_str t, const char *pat) { return find_in(t.ptr, t.len, pat, 0) != NULL; }

// ----------------------------------------------------------------------------
// names

static const char *const kind_names[TOK_CHAT_COUNT] = {
    [TOK_CHAT_CHATML] = "chatml",         [TOK_CHAT_LLAMA3] = "llama3",
    [TOK_CHAT_GEMMA] = "gemma",           [TOK_CHAT_MISTRAL_V1] = "mistral-v1",
    [TOK_CHAT_MISTRAL_V3] = "mistral-v3", [TOK_CHAT_MISTRAL_V7] = "mistral-v7",
    [TOK_CHAT_PHI3] = "phi3",
};

const char *chat_kind_name(enum tok_chat_kind k) {
    return k > TOK_CHAT_NONE && k < TOK_CHAT_COUNT ? kind_names[k] : NULL;
}

enum tok_chat_kind chat_kind_from_name(const char *name) {
    if (!name) return TOK_CHAT_NONE;
    for (int k = 1; k < TOK_CHAT_COUNT; k++)
        if (!strcmp(name, kind_names[k])) return (enum tok_chat_kind)k;
    /* llama.cpp's names for the same renderings */
    if (!strcmp(name, "mistral-v3-tekken")) return TOK_CHAT_MISTRAL_V3;
    if (!strcmp(name, "mistral-v7-tekken")) return TOK_CHAT_MISTRAL_V7;
    if (!strcmp(name, "gemma3") || !strcmp(name, "gemma2")) return TOK_CHAT_GEMMA;
    if (!strcmp(name, "llama-3") || !strcmp(name, "llama31")) return TOK_CHAT_LLAMA3;
    if (!strcmp(name, "qwen") || !strcmp(name, "qwen2")) return TOK_CHAT_CHATML;
    return TOK_CHAT_NONE;
}

const char *chat_kind_names(void) {
    return "chatml, llama3, gemma, mistral-v1, mistral-v3, mistral-v7, phi3";
}

void chat_free(struct tok_chat *c) {
    core_free(c->default_system);
    core_free(c->date);
    memset(c, 0, sizeof(*c));
}

// ----------------------------------------------------------------------------
// literals inside the template

/* The value of the Jinja string literal that starts at s[i] (a quote),
 * with \n \t \\ \' \" unescaped, into a new string; *end gets the index
 * after the closing quote. NULL when it is not a complete literal, or when
 * the allocation fails (then *st = ANVIL_ERR_NOMEM). */
static char *parse_literal(const char *s, size_t n, size_t i, size_t *end, anvil_status *st) {
    if (i >= n || (s[i] != '\'' && s[i] != '"')) return NULL;
    char q = s[i++];
    size_t j = i, len = 0;
    while (j < n && s[j] != q) j += s[j] == '\\' && j + 1 < n ? 2 : 1;
    if (j >= n) return NULL;
    char *out = core_malloc(j - i + 1);
    if (!out) {
        *st = ANVIL_ERR_NOMEM;
        return NULL;
    }
    for (size_t k = i; k < j; k++) {
        char c = s[k];
        if (c == '\\' && k + 1 < j) {
            char e = s[++k];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        out[len++] = c;
    }
    out[len] = '\0';
    *end = j + 1;
    return out;
}

/* Is s[i..) the identifier `id` (and not a longer one)? */
static bool ident_at(const char *s, size_t n, size_t i, const char *id, size_t *end) {
    size_t m = strlen(id);
    if (i + m > n || memcmp(s + i, id, m)) return false;
    char c = i + m < n ? s[i + m] : ' ';
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
        return false;
    *end = i + m;
    return true;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) i++;
    return i;
}

/* The strftime_now("FMT") assigned by `set NAME = strftime_now("FMT")`,
 * as a date placeholder "\x01FMT\x02" (chat.c fills it in at render time);
 * NULL when NAME is not that. */
static char *date_variable(struct gguf_str t, const char *name, size_t name_len,
                           anvil_status *st) {
    for (const char *p = find_in(t.ptr, t.len, "set ", 0); p;
         p = find_in(t.ptr, t.len, "set ", (size_t)(p - t.ptr) + 4)) {
        size_t i = skip_ws(t.ptr, t.len, (size_t)(p - t.ptr) + 4), e;
        if (i + name_len > t.len || memcmp(t.ptr + i, name, name_len)) continue;
        e = i + name_len;
        i = skip_ws(t.ptr, t.len, e);
        if (i >= t.len || t.ptr[i] != '=') continue;
        i = skip_ws(t.ptr, t.len, i + 1);
        if (!ident_at(t.ptr, t.len, i, "strftime_now", &e)) continue;
        i = skip_ws(t.ptr, t.len, e);
        if (i >= t.len || t.ptr[i] != '(') continue;
        size_t end;
        char *fmt = parse_literal(t.ptr, t.len, skip_ws(t.ptr, t.len, i + 1), &end, st);
        if (!fmt) return NULL;
        size_t fl = strlen(fmt);
        char *out = core_malloc(fl + 3);
        if (!out) *st = ANVIL_ERR_NOMEM;
        if (out) {
            out[0] = '\x01';
            memcpy(out + 1, fmt, fl);
            out[fl + 1] = '\x02';
            out[fl + 2] = '\0';
        }
        core_free(fmt);
        return out;
    }
    return NULL;
}

/* The value of `set NAME = EXPR` when EXPR is string literals and date
 * variables joined by `+` (Mistral's default system prompts); NULL
 * otherwise, or on allocation failure (*st = ANVIL_ERR_NOMEM). */
static char *set_literal(struct gguf_str t, const char *name, anvil_status *st) {
    for (const char *p = find_in(t.ptr, t.len, name, 0); p;
         p = find_in(t.ptr, t.len, name, (size_t)(p - t.ptr) + 1)) {
        size_t i = skip_ws(t.ptr, t.len, (size_t)(p - t.ptr) + strlen(name));
        if (i >= t.len || t.ptr[i] != '=' || (i + 1 < t.len && t.ptr[i + 1] == '=')) continue;
        i = skip_ws(t.ptr, t.len, i + 1);
        char *acc = NULL;
        size_t acc_len = 0;
        bool ok = false;
        for (;;) {
            size_t end;
            char *v = parse_literal(t.ptr, t.len, i, &end, st);
            if (!v && *st != ANVIL_OK) break;
            if (!v) {
                size_t j = i;
                while (j < t.len && ((t.ptr[j] >= 'a' && t.ptr[j] <= 'z') || t.ptr[j] == '_'))
                    j++;
                if (j == i || !(v = date_variable(t, t.ptr + i, j - i, st))) break;
                end = j;
            }
            size_t vl = strlen(v);
            char *g = core_realloc(acc, acc_len + vl + 1);
            if (!g) {
                core_free(v);
                *st = ANVIL_ERR_NOMEM;
                break;
            }
            acc = g;
            memcpy(acc + acc_len, v, vl + 1);
            acc_len += vl;
            core_free(v);
            i = skip_ws(t.ptr, t.len, end);
            if (i < t.len && t.ptr[i] == '+') {
                i = skip_ws(t.ptr, t.len, i + 1);
                continue;
            }
            /* the statement must end here */
            ok = i + 1 < t.len && (t.ptr[i] == '%' || t.ptr[i] == '-');
            break;
        }
        if (ok) return acc;
        core_free(acc);
        return NULL;
    }
    return NULL;
}

/* ChatML: the literal system text of a "default system turn" written when
 * messages[0] is not a system message: '<|im_start|>system\n' followed by
 * plain text up to '<|im_end|>' inside one string literal. */
static anvil_status find_default_system(struct tok_chat *c, struct gguf_str t) {
    static const char head[] = "<|im_start|>system";
    const char *s = t.ptr;
    size_t n = t.len;
    /* only templates that test for a system message can inject one
     * (SmolLM2: messages[0]['role'] != 'system'; Qwen2.5: == 'system'
     * ... else) */
    if (!has(t, "'system'") && !has(t, "\"system\"")) return ANVIL_OK;
    size_t from = 0;
    const char *p;
    while ((p = find_in(s, n, head, from)) != NULL) {
        size_t i = (size_t)(p - s) + sizeof(head) - 1;
        from = i;
        if (i < n && s[i] == '\n')
            i += 1;
        else if (i + 1 < n && s[i] == '\\' && s[i + 1] == 'n')
            i += 2;
        else
            continue;
        const char *e = find_in(s, n, "<|im_end|>", i);
        if (!e || (size_t)(e - s) == i) continue;
        size_t len = (size_t)(e - s) - i;
        if (memchr(s + i, '\'', len) || memchr(s + i, '"', len) || memchr(s + i, '\\', len) ||
            memchr(s + i, '{', len) || memchr(s + i, '}', len))
            continue; /* an expression, not a plain literal */
        c->default_system = core_malloc(len + 1);
        if (!c->default_system) return ANVIL_ERR_NOMEM;
        memcpy(c->default_system, s + i, len);
        c->default_system[len] = '\0';
        return ANVIL_OK;
    }
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// recognition

/* Phrases of templates that carry a family's markers but render more than
 * anvil reproduces (found by the sweep over llama.cpp's templates in
 * tests/py/test_chat_templates.py): they are not claimed. */
static const char *const not_plain[] = {
    "Knowledge Cutoff Date: June 2025", /* SmolLM3: metadata block, reasoning modes */
    "function calling AI model",        /* Hermes tool-use templates */
    "call one or more of the provided functions", /* FireFunction */
    "version=v3-llama3.1",              /* Functionary: its own system block */
    ">>>all",                           /* Functionary v3.2 */
    "keep_past_thinking",               /* LFM 2.5 */
    "[BEGIN FINAL RESPONSE]",           /* Apriel: a default system prompt */
};

/* Qwen 3's shape of a reasoning template: the generation prompt gets an
 * empty <think> block only when enable_thinking is false, and nothing
 * otherwise. Other reasoning templates open <think> by default (QwQ,
 * Qwen 3.5, StepFun, Nemotron) or keep reasoning differently (Bielik,
 * MiniCPM 5): anvil does not claim them. */
static bool qwen3_shape(struct gguf_str t) {
    static const char cond[] = "enable_thinking is defined and enable_thinking is false";
    const char *p = find_in(t.ptr, t.len, cond, 0);
    if (!p || !has(t, "last_query_index")) return false;
    /* the next two tags after the condition: the empty block, then endif */
    size_t i = (size_t)(p - t.ptr) + sizeof(cond) - 1;
    const char *blk = find_in(t.ptr, t.len, "<think>\\n\\n</think>\\n\\n", i);
    const char *tag = find_in(t.ptr, t.len, "{%", i);
    if (!blk || !tag || tag < blk) return false;
    size_t j = (size_t)(tag - t.ptr) + 2;
    while (j < t.len && (t.ptr[j] == '-' || t.ptr[j] == ' ')) j++;
    return j + 5 <= t.len && !memcmp(t.ptr + j, "endif", 5);
}

static bool refused(struct gguf_str t) {
    for (size_t k = 0; k < sizeof(not_plain) / sizeof(not_plain[0]); k++)
        if (has(t, not_plain[k])) return true;
    if (has(t, "<think>") && !qwen3_shape(t)) return true;
    /* a knowledge-date system block that is not Llama 3.1's */
    if (has(t, "Cutting Knowledge Date") && !has(t, "Today Date: ")) return true;
    return false;
}

anvil_status chat_detect(struct tok_chat *c, struct gguf_str tmpl) {
    memset(c, 0, sizeof(*c));
    c->source = ANVIL_CHAT_FROM_TEMPLATE;
    if (!tmpl.ptr || tmpl.len == 0 || refused(tmpl)) return ANVIL_OK;
    if (has(tmpl, "bos_token")) c->flags |= TOK_CHAT_F_BOS;
    if (has(tmpl, "<|im_start|>")) {
        c->kind = TOK_CHAT_CHATML;
        if (has(tmpl, "</think>") && has(tmpl, "reasoning_content"))
            c->flags |= TOK_CHAT_F_QWEN3_THINK;
        return find_default_system(c, tmpl);
    }
    if (has(tmpl, "<|start_header_id|>")) {
        c->kind = TOK_CHAT_LLAMA3;
        if (has(tmpl, "trim")) c->flags |= TOK_CHAT_F_TRIM;
        if (has(tmpl, "Cutting Knowledge Date")) {
            c->flags |= TOK_CHAT_F_DATE;
            /* Llama 3.2 asks for today's date; 3.1 and 3.3 write a fixed one */
            anvil_status st = ANVIL_OK;
            if (!has(tmpl, "strftime_now")) c->date = set_literal(tmpl, "date_string", &st);
            return st;
        }
        return ANVIL_OK;
    }
    if (has(tmpl, "<start_of_turn>")) {
        c->kind = TOK_CHAT_GEMMA;
        if (has(tmpl, "trim")) c->flags |= TOK_CHAT_F_TRIM;
        return ANVIL_OK;
    }
    if (has(tmpl, "[SYSTEM_PROMPT]")) {
        c->kind = TOK_CHAT_MISTRAL_V7;
        anvil_status st = ANVIL_OK;
        c->default_system = set_literal(tmpl, "default_system_message", &st);
        return st;
    }
    if (has(tmpl, "[INST]")) {
        c->kind = has(tmpl, "'[INST] '") || has(tmpl, "\"[INST] \"") ? TOK_CHAT_MISTRAL_V1
                                                                  : TOK_CHAT_MISTRAL_V3;
        return ANVIL_OK;
    }
    if (has(tmpl, "<|user|>") && has(tmpl, "<|assistant|>") && has(tmpl, "<|end|>")) {
        c->kind = TOK_CHAT_PHI3;
        if (!has(tmpl, "<|system|>")) c->flags |= TOK_CHAT_F_NO_SYSTEM;
        if (has(tmpl, "eos_token")) c->flags |= TOK_CHAT_F_EOS_END;
        return ANVIL_OK;
    }
    return ANVIL_OK;
}

void chat_defaults(struct tok_chat *c) {
    switch (c->kind) {
    case TOK_CHAT_LLAMA3:
    case TOK_CHAT_GEMMA: c->flags |= TOK_CHAT_F_TRIM | TOK_CHAT_F_BOS; break;
    case TOK_CHAT_MISTRAL_V1:
    case TOK_CHAT_MISTRAL_V3:
    case TOK_CHAT_MISTRAL_V7: c->flags |= TOK_CHAT_F_BOS; break;
    case TOK_CHAT_PHI3: c->flags |= TOK_CHAT_F_EOS_END; break;
    default: break;
    }
}

void chat_detect_vocab(struct tok_chat *c, const struct tok_strtab *syms, int32_t n_vocab) {
    static const struct {
        const char *a, *b;
        enum tok_chat_kind kind;
    } marks[] = {
        {"<start_of_turn>", "<end_of_turn>", TOK_CHAT_GEMMA},
        {"<|start_header_id|>", "<|eot_id|>", TOK_CHAT_LLAMA3},
        {"<|im_start|>", "<|im_end|>", TOK_CHAT_CHATML},
        {"[SYSTEM_PROMPT]", "[INST]", TOK_CHAT_MISTRAL_V7},
        {"[INST]", "[/INST]", TOK_CHAT_MISTRAL_V3},
        {"<|user|>", "<|end|>", TOK_CHAT_PHI3},
    };
    for (size_t k = 0; k < sizeof(marks) / sizeof(marks[0]); k++) {
        int32_t a = strtab_find(syms, marks[k].a, strlen(marks[k].a));
        int32_t b = strtab_find(syms, marks[k].b, strlen(marks[k].b));
        if (a >= 0 && a < n_vocab && b >= 0 && b < n_vocab) {
            c->kind = marks[k].kind;
            c->source = ANVIL_CHAT_FROM_VOCAB;
            chat_defaults(c);
            return;
        }
    }
}
