/*
 * chat.c - render a conversation with the vocabulary's chat template
 * family (recognised by chat_tmpl.c), natively: no Jinja engine.
 *
 * Each family writes what its reference templates write, checked string
 * for string against the jinja2 package on the real template texts
 * (tests/py/test_chat_templates.py):
 *
 *   chatml      <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
 *               with the template's default system turn (SmolLM2, Qwen 2,
 *               Qwen 2.5); Qwen 3 also moves an assistant turn's
 *               <think>..</think> out of the history.
 *   llama3      <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>;
 *               3.1+ always open with a system turn carrying the knowledge
 *               cutoff and today's date (3.2: today; 3.1, 3.3: the fixed
 *               date in the template).
 *   gemma       <start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n,
 *               a system message goes in front of the first user turn
 *               followed by a blank line (Gemma 3).
 *   mistral-v1  [INST] {content} [/INST]{answer}</s>
 *   mistral-v3  [INST]{content}[/INST]{answer}</s>, the system message in
 *               front of the last user message (Mistral Nemo)
 *   mistral-v7  [SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT][INST]{content}[/INST]{answer}</s>
 *   phi3        <|user|>\n{content}<|end|>\n<|assistant|>\n{answer}<|end|>\n
 *               (Phi-3: system dropped, the user turn opens the answer;
 *               Phi-3.5: <|system|> turns, eos_token closes a finished chat)
 *
 * Not reproduced: tool calls and tool results, multimodal content, and
 * default system prompts built from expressions (Mistral Small 3.2's,
 * which embeds today's date).
 *
 * The result is the template text plus the spans that came from the caller
 * (contents and roles). tok_chat_tokenize tokenizes it in one piece, so
 * text merges across those seams exactly as when tokenizing the rendered
 * string, but control tokens are recognised only outside the spans: a
 * user who types "<|im_start|>" gets the text, not the token.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// output with content spans

struct rbuf {
    char *p;
    size_t len, cap;
    struct tok_span *sp;
    size_t n_sp, sp_cap;
    anvil_status st;
};

static void put(struct rbuf *b, const char *s, size_t n) {
    if (b->st != ANVIL_OK || n == 0) return;
    if (b->len + n + 1 > UINT32_MAX / 4) {
        b->st = ANVIL_ERR_INVALID;
        return;
    }
    if ((b->st = tok_grow((void **)&b->p, &b->cap, b->len + n + 1, 1)) != ANVIL_OK) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void text(struct rbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Caller's text: written and remembered as a protected span. */
static void content(struct rbuf *b, const char *s, size_t n) {
    if (b->st != ANVIL_OK || n == 0) return;
    size_t at = b->len;
    put(b, s, n);
    if (b->st != ANVIL_OK) return;
    /* adjacent spans join: the partition only asks "inside or not" */
    if (b->n_sp > 0 && b->sp[b->n_sp - 1].start + b->sp[b->n_sp - 1].len == at) {
        b->sp[b->n_sp - 1].len += (uint32_t)n;
        return;
    }
    if ((b->st = tok_grow((void **)&b->sp, &b->sp_cap, b->n_sp + 1, sizeof(*b->sp))) != ANVIL_OK)
        return;
    b->sp[b->n_sp++] = (struct tok_span){(uint32_t)at, (uint32_t)n};
}

static void content_z(struct rbuf *b, const char *s) {
    if (s) content(b, s, strlen(s));
}

static void token_text(struct rbuf *b, const struct tok_vocab *v, anvil_token t) {
    if (t < 0 || t >= v->n_vocab) return;
    size_t n;
    const char *s = tok_text(v, t, &n);
    put(b, s, n);
}

// ----------------------------------------------------------------------------
// Jinja's string filters on UTF-8

/* Python's str.isspace() for the code point starting at s[i]; its length
 * in *k (0 when it is not a space). */
static bool py_space_at(const char *s, size_t n, size_t i, size_t *k) {
    unsigned char c = (unsigned char)s[i];
    *k = 1;
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return true;
    if (c < 0x80) return false;
    size_t j = i;
    uint32_t cp = utf8_decode_lenient((const unsigned char *)s, n, &j);
    *k = j - i;
    if (cp == 0xfffd && *k == 1) return false; /* an invalid byte */
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* [*a, *b) of s with Python's strip() applied. */
static void strip_span(const char *s, size_t *a, size_t *b) {
    size_t k;
    while (*a < *b && py_space_at(s, *b, *a, &k)) *a += k;
    while (*b > *a) {
        /* the start of the last code point (at most 4 bytes back) */
        size_t j = *b - 1;
        while (j > *a && ((unsigned char)s[j] & 0xc0) == 0x80 && *b - j < 4) j--;
        if (!py_space_at(s, *b, j, &k) || j + k != *b) break;
        *b = j;
    }
}

static void content_trimmed(struct rbuf *b, const char *s) {
    if (!s) return;
    size_t a = 0, e = strlen(s);
    strip_span(s, &a, &e);
    content(b, s + a, e - a);
}

static const char *role_of(const struct anvil_chat_msg *m) { return m->role ? m->role : ""; }
static const char *content_of(const struct anvil_chat_msg *m) {
    return m->content ? m->content : "";
}
static bool is_role(const struct anvil_chat_msg *m, const char *r) {
    return !strcmp(role_of(m), r);
}

// ----------------------------------------------------------------------------
// dates

/* strftime for the formats templates use (%Y %y %m %d %b %B %%), in
 * English whatever the locale, on today's local date. */
static void format_date(const char *fmt, size_t n, char *buf, size_t cap) {
    static const char *const mon[12] = {"January", "February", "March",     "April",
                                        "May",     "June",     "July",      "August",
                                        "September", "October", "November", "December"};
    time_t t = time(NULL);
    struct tm tm;
    if (!localtime_r(&t, &tm)) memset(&tm, 0, sizeof(tm));
    size_t w = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && w + 16 < cap; i++) {
        if (fmt[i] != '%' || i + 1 >= n) {
            buf[w++] = fmt[i];
            continue;
        }
        char c = fmt[++i];
        int k = 0;
        switch (c) {
        case 'Y': k = snprintf(buf + w, cap - w, "%04d", tm.tm_year + 1900); break;
        case 'y': k = snprintf(buf + w, cap - w, "%02d", tm.tm_year % 100); break;
        case 'm': k = snprintf(buf + w, cap - w, "%02d", tm.tm_mon + 1); break;
        case 'd': k = snprintf(buf + w, cap - w, "%02d", tm.tm_mday); break;
        case 'b': k = snprintf(buf + w, cap - w, "%.3s", mon[tm.tm_mon % 12]); break;
        case 'B': k = snprintf(buf + w, cap - w, "%s", mon[tm.tm_mon % 12]); break;
        case '%': k = snprintf(buf + w, cap - w, "%%"); break;
        default: k = snprintf(buf + w, cap - w, "%%%c", c); break;
        }
        w += (size_t)(k > 0 ? k : 0);
    }
    buf[w < cap ? w : cap - 1] = '\0';
}

/* Template text (a default system prompt) with its date placeholders
 * "\x01FMT\x02" (chat_tmpl.c) filled in. */
static void text_with_dates(struct rbuf *b, const char *s) {
    while (*s) {
        const char *p = strchr(s, '\x01');
        if (!p) {
            text(b, s);
            return;
        }
        put(b, s, (size_t)(p - s));
        const char *e = strchr(p + 1, '\x02');
        if (!e) return;
        char date[64];
        format_date(p + 1, (size_t)(e - p - 1), date, sizeof(date));
        text(b, date);
        s = e + 1;
    }
}

// ----------------------------------------------------------------------------
// families

static void render_chatml(const struct tok_vocab *v, const struct anvil_chat_msg *m, size_t n,
                          bool add, struct rbuf *b) {
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && v->chat.default_system && !is_role(&m[0], "system")) {
            text(b, "<|im_start|>system\n");
            text_with_dates(b, v->chat.default_system);
            text(b, "<|im_end|>\n");
        }
        text(b, "<|im_start|>");
        content_z(b, role_of(&m[i]));
        text(b, "\n");
        content_z(b, content_of(&m[i]));
        text(b, "<|im_end|>\n");
    }
    if (add) text(b, "<|im_start|>assistant\n");
}

/* Qwen 3: the first system message heads the prompt; assistant turns after
 * the last real user query keep their reasoning in a <think> block, older
 * ones lose it. */
static void render_qwen3(const struct anvil_chat_msg *m, size_t n, bool add, struct rbuf *b) {
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;) {
        const char *c = content_of(&m[i]);
        size_t cl = strlen(c);
        bool tool_response = cl >= 31 && !strncmp(c, "<tool_response>", 15) &&
                             !strcmp(c + cl - 16, "</tool_response>");
        if (is_role(&m[i], "user") && !tool_response) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const char *c = content_of(&m[i]);
        if (is_role(&m[i], "user") || is_role(&m[i], "system")) {
            text(b, "<|im_start|>");
            content_z(b, role_of(&m[i]));
            text(b, "\n");
            content_z(b, c);
            text(b, "<|im_end|>\n");
        } else if (is_role(&m[i], "assistant")) {
            size_t cl = strlen(c), ca = 0, ce = cl; /* the answer: c[ca .. ce) */
            size_t ra = 0, re = 0;                  /* the reasoning: c[ra .. re) */
            const char *close = NULL;
            for (const char *p = c; (p = strstr(p, "</think>")) != NULL; p++) close = p;
            if (close) {
                ca = (size_t)(close - c) + 8;
                while (ca < ce && c[ca] == '\n') ca++;
                /* split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                const char *first = strstr(c, "</think>");
                re = (size_t)(first - c);
                while (re > 0 && c[re - 1] == '\n') re--;
                ra = 0;
                for (size_t k = 0; k + 7 <= re; k++)
                    if (!memcmp(c + k, "<think>", 7)) ra = k + 7;
                while (ra < re && c[ra] == '\n') ra++;
            }
            text(b, "<|im_start|>");
            content_z(b, role_of(&m[i]));
            if (i > last_query && (i == n - 1 || re > ra)) {
                /* reasoning.strip('\n'), answer.lstrip('\n') */
                size_t sa = ra, se = re;
                while (sa < se && c[sa] == '\n') sa++;
                while (se > sa && c[se - 1] == '\n') se--;
                text(b, "\n<think>\n");
                content(b, c + sa, se - sa);
                text(b, "\n</think>\n\n");
                while (ca < ce && c[ca] == '\n') ca++;
            } else {
                text(b, "\n");
            }
            content(b, c + ca, ce - ca);
            text(b, "<|im_end|>\n");
        }
        /* tool turns are not reproduced */
    }
    if (add) text(b, "<|im_start|>assistant\n");
}

static void render_llama3(const struct tok_vocab *v, const struct anvil_chat_msg *m, size_t n,
                          bool add, struct rbuf *b) {
    bool trim = v->chat.flags & TOK_CHAT_F_TRIM;
    size_t i = 0;
    if (v->chat.flags & TOK_CHAT_F_DATE) {
        char date[32];
        if (v->chat.date)
            snprintf(date, sizeof(date), "%s", v->chat.date);
        else
            format_date("%d %b %Y", 8, date, sizeof(date));
        text(b, "<|start_header_id|>system<|end_header_id|>\n\n"
                "Cutting Knowledge Date: December 2023\nToday Date: ");
        text(b, date);
        text(b, "\n\n");
        if (n > 0 && is_role(&m[0], "system")) {
            content_trimmed(b, content_of(&m[0]));
            i = 1;
        }
        text(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        text(b, "<|start_header_id|>");
        content_z(b, role_of(&m[i]));
        text(b, "<|end_header_id|>\n\n");
        if (trim)
            content_trimmed(b, content_of(&m[i]));
        else
            content_z(b, content_of(&m[i]));
        text(b, "<|eot_id|>");
    }
    if (add) text(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_gemma(const struct anvil_chat_msg *m, size_t n, bool add, struct rbuf *b) {
    size_t i = 0;
    const char *system = NULL;
    if (n > 0 && is_role(&m[0], "system")) {
        system = content_of(&m[0]);
        i = 1;
    }
    for (size_t first = i; i < n; i++) {
        text(b, "<start_of_turn>");
        if (is_role(&m[i], "assistant"))
            text(b, "model");
        else
            content_z(b, role_of(&m[i]));
        text(b, "\n");
        if (i == first && system) {
            content_z(b, system);
            text(b, "\n\n");
        }
        content_trimmed(b, content_of(&m[i]));
        text(b, "<end_of_turn>\n");
    }
    if (add) text(b, "<start_of_turn>model\n");
}

static void render_mistral(const struct tok_vocab *v, const struct anvil_chat_msg *m, size_t n,
                           struct rbuf *b) {
    enum tok_chat_kind k = v->chat.kind;
    size_t i = 0;
    const char *system = NULL;
    if (n > 0 && is_role(&m[0], "system")) {
        system = content_of(&m[0]);
        i = 1;
    }
    if (k == TOK_CHAT_MISTRAL_V7) {
        if (system || v->chat.default_system) {
            text(b, "[SYSTEM_PROMPT]");
            if (system)
                content_z(b, system);
            else
                text_with_dates(b, v->chat.default_system);
            text(b, "[/SYSTEM_PROMPT]");
        }
    }
    /* v1 and v3 put the system message in one user turn: v3 (Nemo) in the
     * last message when that is a user message, v1 in the first */
    size_t sys_at = n;
    if (system && k != TOK_CHAT_MISTRAL_V7) {
        if (k == TOK_CHAT_MISTRAL_V3) {
            if (n > i && is_role(&m[n - 1], "user")) sys_at = n - 1;
        } else {
            for (size_t j = i; j < n; j++)
                if (is_role(&m[j], "user")) {
                    sys_at = j;
                    break;
                }
        }
    }
    for (; i < n; i++) {
        if (is_role(&m[i], "user")) {
            text(b, k == TOK_CHAT_MISTRAL_V1 ? "[INST] " : "[INST]");
            if (i == sys_at) {
                content_z(b, system);
                text(b, "\n\n");
            }
            content_z(b, content_of(&m[i]));
            text(b, k == TOK_CHAT_MISTRAL_V1 ? " [/INST]" : "[/INST]");
        } else if (is_role(&m[i], "assistant")) {
            content_z(b, content_of(&m[i]));
            token_text(b, v, v->eos);
        } else if (is_role(&m[i], "system") && k == TOK_CHAT_MISTRAL_V7) {
            text(b, "[SYSTEM_PROMPT]");
            content_z(b, content_of(&m[i]));
            text(b, "[/SYSTEM_PROMPT]");
        }
    }
}

static void render_phi3(const struct tok_vocab *v, const struct anvil_chat_msg *m, size_t n,
                        bool add, struct rbuf *b) {
    bool phi35 = !(v->chat.flags & TOK_CHAT_F_NO_SYSTEM);
    for (size_t i = 0; i < n; i++) {
        const char *c = content_of(&m[i]);
        if (is_role(&m[i], "system")) {
            if (!phi35 || !*c) continue;
            text(b, "<|system|>\n");
            content_z(b, c);
            text(b, "<|end|>\n");
        } else if (is_role(&m[i], "user")) {
            text(b, "<|user|>\n");
            content_z(b, c);
            text(b, phi35 ? "<|end|>\n" : "<|end|>\n<|assistant|>\n");
        } else if (is_role(&m[i], "assistant")) {
            if (phi35) text(b, "<|assistant|>\n");
            content_z(b, c);
            text(b, "<|end|>\n");
        }
    }
    if (phi35) {
        if (add)
            text(b, "<|assistant|>\n");
        else if (v->chat.flags & TOK_CHAT_F_EOS_END)
            token_text(b, v, v->eos);
    }
}

anvil_status chat_render(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                         size_t n_msgs, bool add_assistant, bool with_bos, char **out,
                         size_t *out_len, struct tok_span **spans, size_t *n_spans) {
    struct rbuf b;
    memset(&b, 0, sizeof(b));
    if ((b.st = tok_grow((void **)&b.p, &b.cap, 256, 1)) != ANVIL_OK) return b.st;
    const struct tok_chat *c = &v->chat;
    if (with_bos && (c->flags & TOK_CHAT_F_BOS)) token_text(&b, v, v->bos);
    switch (c->kind) {
    case TOK_CHAT_NONE:
    case TOK_CHAT_COUNT:
    case TOK_CHAT_CHATML:
        if (c->flags & TOK_CHAT_F_QWEN3_THINK)
            render_qwen3(msgs, n_msgs, add_assistant, &b);
        else
            render_chatml(v, msgs, n_msgs, add_assistant, &b);
        break;
    case TOK_CHAT_LLAMA3: render_llama3(v, msgs, n_msgs, add_assistant, &b); break;
    case TOK_CHAT_GEMMA: render_gemma(msgs, n_msgs, add_assistant, &b); break;
    case TOK_CHAT_MISTRAL_V1:
    case TOK_CHAT_MISTRAL_V3:
    case TOK_CHAT_MISTRAL_V7: render_mistral(v, msgs, n_msgs, &b); break;
    case TOK_CHAT_PHI3: render_phi3(v, msgs, n_msgs, add_assistant, &b); break;
    }
    if (b.st != ANVIL_OK) {
        core_free(b.p);
        core_free(b.sp);
        return b.st;
    }
    b.p[b.len] = '\0';
    *out = b.p;
    *out_len = b.len;
    *spans = b.sp;
    *n_spans = b.n_sp;
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// the calls behind anvil_chat_apply / anvil_chat_tokenize

static bool msgs_ok(const struct anvil_chat_msg *msgs, size_t n) {
    return n == 0 || msgs != NULL;
}

int32_t tok_chat_render_text(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                             size_t n_msgs, bool add_assistant, bool with_bos, char *buf,
                             int32_t cap) {
    if (!v || !msgs_ok(msgs, n_msgs) || cap < 0 || (cap > 0 && !buf)) return INT32_MIN;
    char *s;
    size_t len, n_sp;
    struct tok_span *sp;
    if (chat_render(v, msgs, n_msgs, add_assistant, with_bos, &s, &len, &sp, &n_sp) != ANVIL_OK)
        return INT32_MIN;
    core_free(sp);
    int32_t r;
    if (len >= INT32_MAX) {
        r = INT32_MIN;
    } else if (len + 1 > (size_t)cap) {
        r = -(int32_t)(len + 1);
    } else {
        memcpy(buf, s, len + 1);
        r = (int32_t)len;
    }
    core_free(s);
    return r;
}

int32_t tok_chat_apply(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                       size_t n_msgs, bool add_assistant, char *buf, int32_t cap) {
    return tok_chat_render_text(v, msgs, n_msgs, add_assistant, false, buf, cap);
}

int32_t tok_chat_tokenize(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                          size_t n_msgs, bool add_assistant, anvil_token *out, int32_t cap) {
    if (!v || !msgs_ok(msgs, n_msgs) || cap < 0 || (cap > 0 && !out)) return INT32_MIN;
    char *s;
    size_t len, n_sp;
    struct tok_span *sp;
    if (chat_render(v, msgs, n_msgs, add_assistant, false, &s, &len, &sp, &n_sp) != ANVIL_OK)
        return INT32_MIN;
    int32_t r = tok_encode_protected(v, s, len, sp, n_sp, out, cap, true);
    core_free(s);
    core_free(sp);
    return r;
}

// ----------------------------------------------------------------------------
// which template

const char *tok_chat_name(const struct tok_vocab *v) {
    const char *n = chat_kind_name(v->chat.kind);
    return n ? n : "chatml";
}

int tok_chat_source(const struct tok_vocab *v) { return v->chat.source; }

const char *tok_chat_names(void) { return chat_kind_names(); }

anvil_status tok_chat_set(struct tok_vocab *v, const char *name) {
    enum tok_chat_kind k = chat_kind_from_name(name);
    if (k == TOK_CHAT_NONE) return ANVIL_ERR_INVALID;
    struct tok_chat c;
    memset(&c, 0, sizeof(c));
    c.kind = k;
    chat_defaults(&c);
    c.source = ANVIL_CHAT_FROM_USER;
    chat_free(&v->chat);
    v->chat = c;
    /* a family asked for by name renders instead of the Jinja template */
    core_free(v->jinja.src);
    v->jinja.src = NULL;
    v->jinja.len = 0;
    v->jinja.origin = TOK_JINJA_NONE;
    return ANVIL_OK;
}
