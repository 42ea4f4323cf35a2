/*
 * chat.c - chat templates without a Jinja engine: tokenizer.chat_template
 * is recognised by family and rendered natively.
 *
 *   ChatML (the template contains "<|im_start|>"): SmolLM2, Qwen, ...
 *       <|im_start|>{role}\n{content}<|im_end|>\n ... [<|im_start|>assistant\n]
 *     A template that writes a fixed system turn when messages[0] is not a
 *     system message (SmolLM2: "You are a helpful AI assistant named
 *     SmolLM, trained by Hugging Face"; Qwen2.5: "You are Qwen, ...") has
 *     that text extracted here and injected the same way. Tool calls and
 *     other template logic are not reproduced.
 *   Llama 3 (the template contains "<|start_header_id|>"):
 *       <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
 *     Like llama.cpp's built-in renderer (llama-chat.cpp), no BOS text is
 *     written: tokenizing with add_special adds the BOS token. Llama 3.1's
 *     date/tools preamble is not reproduced.
 *
 * Anything else: tok_chat_apply returns 0 and the caller falls back.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

static const char *find_in(const char *s, size_t n, const char *pat, size_t from) {
    size_t m = strlen(pat);
    if (from > n) return NULL;
    return memmem(s + from, n - from, pat, m);
}

/* The literal system text of a "default system turn" in a ChatML
 * template: '<|im_start|>system\n' followed by plain text up to
 * '<|im_end|>' inside one string literal. */
static anvil_status find_default_system(struct tok_chat *c, const char *s, size_t n) {
    static const char head[] = "<|im_start|>system";
    /* only templates that test for a system message can inject one
     * (SmolLM2: messages[0]['role'] != 'system'; Qwen2.5: == 'system'
     * ... else) */
    if (!find_in(s, n, "'system'", 0) && !find_in(s, n, "\"system\"", 0)) return ANVIL_OK;
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
        c->default_system = anvil_malloc(len + 1);
        if (!c->default_system) return ANVIL_ERR_NOMEM;
        memcpy(c->default_system, s + i, len);
        c->default_system[len] = '\0';
        return ANVIL_OK;
    }
    return ANVIL_OK;
}

anvil_status chat_detect(struct tok_chat *c, struct gguf_str tmpl) {
    memset(c, 0, sizeof(*c));
    if (!tmpl.ptr || tmpl.len == 0) return ANVIL_OK;
    if (find_in(tmpl.ptr, tmpl.len, "<|im_start|>", 0)) {
        c->kind = TOK_CHAT_CHATML;
        return find_default_system(c, tmpl.ptr, tmpl.len);
    }
    if (find_in(tmpl.ptr, tmpl.len, "<|start_header_id|>", 0)) c->kind = TOK_CHAT_LLAMA3;
    return ANVIL_OK;
}

const char *tok_chat_name(const struct tok_vocab *v) {
    switch (v ? v->chat.kind : TOK_CHAT_NONE) {
    case TOK_CHAT_CHATML: return "chatml";
    case TOK_CHAT_LLAMA3: return "llama3";
    default: return NULL;
    }
}

void chat_free(struct tok_chat *c) {
    anvil_free(c->default_system);
    memset(c, 0, sizeof(*c));
}

// ----------------------------------------------------------------------------
// rendering

struct sbuf {
    char *p;
    size_t cap, len; /* len counts everything, written or not */
};

static void put(struct sbuf *b, const char *s, size_t n) {
    if (b->len < b->cap) {
        size_t k = b->cap - b->len < n ? b->cap - b->len : n;
        memcpy(b->p + b->len, s, k);
    }
    b->len += n;
}

static void puts_(struct sbuf *b, const char *s) { put(b, s, s ? strlen(s) : 0); }

static bool is_ws(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

static void put_trimmed(struct sbuf *b, const char *s) {
    if (!s) return;
    size_t n = strlen(s), i = 0;
    while (i < n && is_ws(s[i])) i++;
    while (n > i && is_ws(s[n - 1])) n--;
    put(b, s + i, n - i);
}

int32_t tok_chat_apply(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                       size_t n_msgs, bool add_assistant, char *buf, int32_t cap) {
    if (!v || (n_msgs && !msgs)) return 0;
    struct sbuf b = {buf, cap > 0 ? (size_t)cap : 0, 0};
    switch (v->chat.kind) {
    case TOK_CHAT_NONE:
        return 0;
    case TOK_CHAT_CHATML:
        for (size_t i = 0; i < n_msgs; i++) {
            const char *role = msgs[i].role ? msgs[i].role : "";
            if (i == 0 && v->chat.default_system && strcmp(role, "system") != 0) {
                puts_(&b, "<|im_start|>system\n");
                puts_(&b, v->chat.default_system);
                puts_(&b, "<|im_end|>\n");
            }
            puts_(&b, "<|im_start|>");
            puts_(&b, role);
            puts_(&b, "\n");
            puts_(&b, msgs[i].content);
            puts_(&b, "<|im_end|>\n");
        }
        if (add_assistant) puts_(&b, "<|im_start|>assistant\n");
        break;
    case TOK_CHAT_LLAMA3:
        for (size_t i = 0; i < n_msgs; i++) {
            puts_(&b, "<|start_header_id|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "<|end_header_id|>\n\n");
            put_trimmed(&b, msgs[i].content);
            puts_(&b, "<|eot_id|>");
        }
        if (add_assistant) puts_(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    }
    if (b.len >= INT32_MAX) return INT32_MIN;
    if (b.len + 1 > b.cap) return -(int32_t)(b.len + 1);
    buf[b.len] = '\0';
    return (int32_t)b.len;
}
