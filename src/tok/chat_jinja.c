/*
 * chat_jinja.c - render a conversation with the model's own Jinja chat
 * template (the GGUF's tokenizer.chat_template, or a file given by the
 * user) through the sandboxed interpreter in src/tmpl, and tokenize the
 * result with the caller's text protected.
 *
 * What it does:
 *   - keeps the template source (chat_jinja_init: the GGUF's, when it
 *     parses; tok_chat_jinja_set: a file's);
 *   - builds the template's context from the caller's JSON (messages as
 *     OpenAI sends them, tools, add_generation_prompt, chat_template_kwargs
 *     already merged at top level, ...): bos_token / eos_token from the
 *     vocabulary when the caller gave none, and each tool call's
 *     function.arguments given to the template as the parsed JSON object
 *     when the string parses to one (the Hugging Face convention most
 *     templates expect: `tool_call.arguments | tojson`, `.items()`);
 *   - finds the spans of the rendered text that came from the caller
 *     (message content, reasoning_content, tool results) so that control
 *     tokens are not recognised inside them (a user typing "<|im_start|>"
 *     gets text). Two ways, the exact one first: the context is rendered a
 *     second time with each caller string replaced by a sentinel; when the
 *     sentinel rendering, with the strings put back (verbatim or Python-
 *     stripped), equals the real rendering byte for byte, the spans are
 *     exactly where the strings went. Otherwise (the template looked
 *     inside the content: split, slicing, tests) each string is searched
 *     in the real rendering in order, verbatim then stripped;
 *   - tokenizes with parse_special outside the spans, and with no second
 *     BOS when the rendered text already starts with the BOS text
 *     (llama.cpp's rule).
 *
 * What it does not do: choose the built-in family (chat.c, chat_tmpl.c),
 * validate messages beyond their JSON shape (the server does), or run
 * anything but the template (src/tmpl's sandbox and limits).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "tmpl/tmpl.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// the template source

anvil_status chat_jinja_init(struct tok_jinja *j, struct gguf_str t) {
    memset(j, 0, sizeof(*j));
    if (t.len == 0 || !t.ptr) return ANVIL_OK;
    char err[256];
    int rc = tmpl_check(t.ptr, (size_t)t.len, err, sizeof err);
    if (rc == -2) return ANVIL_ERR_NOMEM;
    if (rc != 0) {
        snprintf(j->warn, sizeof j->warn, "the GGUF's chat template does not parse (%s)", err);
        return ANVIL_OK;
    }
    j->src = core_malloc((size_t)t.len + 1);
    if (!j->src) return ANVIL_ERR_NOMEM;
    memcpy(j->src, t.ptr, (size_t)t.len);
    j->src[t.len] = '\0';
    j->len = (size_t)t.len;
    j->origin = TOK_JINJA_GGUF;
    return ANVIL_OK;
}

void chat_jinja_free(struct tok_jinja *j) {
    core_free(j->src);
    j->src = NULL;
    j->len = 0;
    j->origin = TOK_JINJA_NONE;
}

anvil_status tok_chat_jinja_set(struct tok_vocab *v, const char *src, size_t n, char *err,
                                size_t err_cap) {
    if (!v || (!src && n)) return ANVIL_ERR_INVALID;
    char e[256];
    int rc = tmpl_check(src, n, e, sizeof e);
    if (rc == -2) return ANVIL_ERR_NOMEM;
    if (rc != 0) {
        errmsg_set(err, err_cap, "the chat template does not parse: %s", e);
        return ANVIL_ERR_FORMAT;
    }
    char *copy = core_malloc(n + 1);
    if (!copy) return ANVIL_ERR_NOMEM;
    memcpy(copy, src, n);
    copy[n] = '\0';
    chat_jinja_free(&v->jinja);
    v->jinja.src = copy;
    v->jinja.len = n;
    v->jinja.origin = TOK_JINJA_FILE;
    v->jinja.warn[0] = '\0';
    return ANVIL_OK;
}

const char *tok_chat_jinja_text(const struct tok_vocab *v) { return v ? v->jinja.src : NULL; }

const char *tok_chat_jinja_warning(const struct tok_vocab *v) {
    return v && v->jinja.warn[0] ? v->jinja.warn : NULL;
}

int tok_chat_jinja_origin(const struct tok_vocab *v) { return v ? v->jinja.origin : 0; }

// ----------------------------------------------------------------------------
// the context

static cJSON *token_str(const struct tok_vocab *v, anvil_token t) {
    char buf[256];
    int32_t n = t >= 0 ? tok_piece(v, t, buf, sizeof buf - 1, true) : 0;
    if (n < 0) n = 0;
    buf[n] = '\0';
    return cJSON_CreateString(buf);
}

/* The caller's strings of one message, in the order a template writes
 * them: reasoning first (templates put the thought before the answer),
 * then content (a string, or the text of each part). */
static void collect_strings(const cJSON *msg, const cJSON **out, size_t *n, size_t cap) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
    if (cJSON_IsString(r) && r->valuestring[0] && *n < cap) out[(*n)++] = r;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(msg, "content");
    if (cJSON_IsString(c) && c->valuestring[0] && *n < cap) out[(*n)++] = c;
    if (cJSON_IsArray(c))
        for (const cJSON *p = c->child; p; p = p->next) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "text");
            if (cJSON_IsString(t) && t->valuestring[0] && *n < cap) out[(*n)++] = t;
        }
}

/* Parse ctx, add what the vocabulary knows, parse tool-call arguments.
 * Returns the tree (cJSON_Delete) or NULL with err set. */
static cJSON *build_context(const struct tok_vocab *v, const char *ctx, size_t n, char *err,
                            size_t err_cap) {
    cJSON *root = cJSON_ParseWithLength(ctx, n);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        errmsg_set(err, err_cap, "the chat context must be a JSON object");
        return NULL;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (msgs && !cJSON_IsArray(msgs)) {
        cJSON_Delete(root);
        errmsg_set(err, err_cap, "'messages' must be an array");
        return NULL;
    }
    if (!cJSON_GetObjectItemCaseSensitive(root, "bos_token"))
        cJSON_AddItemToObject(root, "bos_token", token_str(v, v->bos));
    if (!cJSON_GetObjectItemCaseSensitive(root, "eos_token"))
        cJSON_AddItemToObject(root, "eos_token", token_str(v, v->eos));
    for (const cJSON *m = msgs ? msgs->child : NULL; m; m = m->next) {
        const cJSON *calls = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "tool_calls")
                                               : NULL;
        for (cJSON *c = cJSON_IsArray(calls) ? calls->child : NULL; c; c = c->next) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
            cJSON *args = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "arguments")
                                             : NULL;
            if (!cJSON_IsString(args)) continue;
            cJSON *parsed = cJSON_Parse(args->valuestring);
            if (cJSON_IsObject(parsed))
                cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
            else
                cJSON_Delete(parsed);
        }
    }
    return root;
}

// ----------------------------------------------------------------------------
// spans of the caller's text

struct spans {
    struct tok_span *p;
    size_t n, cap;
};

static anvil_status span_add(struct spans *s, size_t at, size_t len) {
    if (len == 0) return ANVIL_OK;
    if (at + len > UINT32_MAX) return ANVIL_ERR_INVALID;
    if (s->n && s->p[s->n - 1].start + s->p[s->n - 1].len == at) {
        s->p[s->n - 1].len += (uint32_t)len;
        return ANVIL_OK;
    }
    anvil_status st = tok_grow((void **)&s->p, &s->cap, s->n + 1, sizeof(*s->p));
    if (st != ANVIL_OK) return st;
    s->p[s->n++] = (struct tok_span){(uint32_t)at, (uint32_t)len};
    return ANVIL_OK;
}

static bool is_space(unsigned char c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
}

/* [*a, *b) of s without the ASCII whitespace Python's strip() removes
 * (the common case of `content | trim` and `.strip()`). */
static void strip_ascii(const char *s, size_t *a, size_t *b) {
    while (*a < *b && is_space((unsigned char)s[*a])) (*a)++;
    while (*b > *a && is_space((unsigned char)s[*b - 1])) (*b)--;
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0 || nn > hn) return NULL;
    for (const char *p = h; (p = memchr(p, n[0], hn - (size_t)(p - h) - nn + 1)) != NULL; p++)
        if (memcmp(p, n, nn) == 0) return p;
    return NULL;
}

/* Sentinel i: "\x01" decimal "\x02" (bytes a template never writes on
 * its own; checked: the exact method is refused when the real rendering
 * holds \x01). */
static int sentinel(char *buf, size_t i) { return snprintf(buf, 32, "\x01%zu\x02", i); }

/* The exact method: walk the sentinel rendering b, matching its literal
 * bytes against the real rendering a, and at each sentinel the string's
 * text (verbatim, else stripped). true when all of a is accounted for. */
static bool spans_exact(const char *a, size_t an, const char *b, size_t bn,
                        const cJSON *const *strs, size_t ns, struct spans *out) {
    if (memchr(a, '\x01', an)) return false;
    size_t i = 0, j = 0;
    while (j < bn) {
        if (b[j] != '\x01') {
            if (i >= an || a[i] != b[j]) return false;
            i++, j++;
            continue;
        }
        char *end;
        unsigned long k = strtoul(b + j + 1, &end, 10);
        if (*end != '\x02' || k >= ns) return false;
        j = (size_t)(end - b) + 1;
        const char *s = strs[k]->valuestring;
        size_t sa = 0, sb = strlen(s);
        if (!(sb <= an - i && memcmp(a + i, s, sb) == 0)) {
            strip_ascii(s, &sa, &sb);
            if (!(sb - sa <= an - i && memcmp(a + i, s + sa, sb - sa) == 0)) return false;
        }
        if (span_add(out, i, sb - sa) != ANVIL_OK) return false;
        i += sb - sa;
    }
    return i == an;
}

/* The fallback: each string searched in order after the previous one. */
static anvil_status spans_search(const char *a, size_t an, const cJSON *const *strs, size_t ns,
                                 struct spans *out) {
    size_t pos = 0;
    for (size_t k = 0; k < ns; k++) {
        const char *s = strs[k]->valuestring;
        size_t sa = 0, sb = strlen(s);
        const char *hit = find_bytes(a + pos, an - pos, s, sb);
        if (!hit) {
            strip_ascii(s, &sa, &sb);
            hit = find_bytes(a + pos, an - pos, s + sa, sb - sa);
        }
        if (!hit) continue; /* the template dropped or changed it */
        size_t at = (size_t)(hit - a);
        anvil_status st = span_add(out, at, sb - sa);
        if (st != ANVIL_OK) return st;
        pos = at + (sb - sa);
    }
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// render

/* The time strftime_now formats: now, or ANVIL_CHAT_NOW (seconds since
 * the epoch) so that tests can compare renderings that show the date. */
static int64_t now_or_env(void) {
    const char *e = getenv("ANVIL_CHAT_NOW");
    if (e && *e) return (int64_t)strtoll(e, NULL, 10);
    return (int64_t)time(NULL);
}

/* Render with the template in use. *spans may be NULL (text only). */
static anvil_status render(const struct tok_vocab *v, const char *ctx, size_t n, char **out,
                           size_t *out_len, struct tok_span **spans, size_t *n_spans, char *err,
                           size_t err_cap) {
    if (!v->jinja.src) {
        errmsg_set(err, err_cap, "the model has no Jinja chat template in use");
        return ANVIL_ERR_INVALID;
    }
    cJSON *root = build_context(v, ctx, n, err, err_cap);
    if (!root) return ANVIL_ERR_INVALID;
    anvil_status st = ANVIL_OK;
    char *js = cJSON_PrintUnformatted(root), *text = NULL, *text2 = NULL, *js2 = NULL;
    size_t len = 0, len2 = 0;
    const cJSON **strs = NULL;
    struct spans sp = {0};
    int64_t now = now_or_env();
    char e[512];
    if (!js) {
        st = ANVIL_ERR_NOMEM;
        goto done;
    }
    int rc = tmpl_render(v->jinja.src, v->jinja.len, js, strlen(js), NULL, now, &text, &len, e,
                         sizeof e);
    if (rc != 0) {
        errmsg_set(err, err_cap, "chat template: %s", e);
        st = rc == -2 ? ANVIL_ERR_NOMEM : ANVIL_ERR_INVALID;
        goto done;
    }
    if (spans) {
        /* the caller's strings, in message order */
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
        size_t cap = 0, ns = 0;
        for (const cJSON *m = msgs ? msgs->child : NULL; m; m = m->next) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
            cap += 2 + (size_t)(cJSON_IsArray(c) ? cJSON_GetArraySize(c) : 0);
        }
        strs = core_malloc((cap + 1) * sizeof(*strs));
        if (!strs) {
            st = ANVIL_ERR_NOMEM;
            goto done;
        }
        for (const cJSON *m = msgs ? msgs->child : NULL; m; m = m->next)
            if (cJSON_IsObject(m)) collect_strings(m, strs, &ns, cap);
        /* the sentinel rendering: the same tree with each string replaced */
        bool exact = false;
        if (ns > 0) {
            char **saved = core_malloc(ns * sizeof(*saved));
            if (!saved) {
                st = ANVIL_ERR_NOMEM;
                goto done;
            }
            char sb[32];
            bool ok = true;
            for (size_t k = 0; k < ns && ok; k++) {
                sentinel(sb, k);
                saved[k] = strs[k]->valuestring;
                char *dup = core_strdup(sb);
                if (!dup) {
                    ok = false;
                    ns = k; /* restore only those replaced */
                    break;
                }
                ((cJSON *)strs[k])->valuestring = dup;
            }
            if (ok) js2 = cJSON_PrintUnformatted(root);
            for (size_t k = 0; k < ns; k++) {
                core_free(strs[k]->valuestring);
                ((cJSON *)strs[k])->valuestring = saved[k];
            }
            core_free(saved);
            if (!ok || !js2) {
                st = ANVIL_ERR_NOMEM;
                goto done;
            }
            if (tmpl_render(v->jinja.src, v->jinja.len, js2, strlen(js2), NULL, now, &text2,
                            &len2, e, sizeof e) == 0)
                exact = spans_exact(text, len, text2, len2, strs, ns, &sp);
            if (!exact) {
                sp.n = 0;
                if ((st = spans_search(text, len, strs, ns, &sp)) != ANVIL_OK) goto done;
            }
        }
        *spans = sp.p;
        *n_spans = sp.n;
        sp.p = NULL;
    }
    *out = text;
    *out_len = len;
    text = NULL;
done:
    core_free(text);
    core_free(text2);
    cJSON_free(js);
    cJSON_free(js2);
    core_free(strs);
    core_free(sp.p);
    cJSON_Delete(root);
    if (st == ANVIL_ERR_NOMEM) errmsg_set(err, err_cap, "out of memory rendering the chat");
    return st;
}

anvil_status tok_chat_jinja_render(const struct tok_vocab *v, const char *ctx, size_t n,
                                   char **out, size_t *out_len, char *err, size_t err_cap) {
    if (!v || !ctx || !out || !out_len) return ANVIL_ERR_INVALID;
    return render(v, ctx, n, out, out_len, NULL, NULL, err, err_cap);
}

int32_t tok_chat_jinja_tokenize(const struct tok_vocab *v, const char *ctx, size_t n,
                                anvil_token *out, int32_t cap, char *err, size_t err_cap,
                                anvil_status *status) {
    anvil_status dummy;
    if (!status) status = &dummy;
    *status = ANVIL_ERR_INVALID;
    if (!v || !ctx || cap < 0 || (cap > 0 && !out)) return INT32_MIN;
    char *text;
    size_t len, n_sp = 0;
    struct tok_span *sp = NULL;
    anvil_status st = render(v, ctx, n, &text, &len, &sp, &n_sp, err, err_cap);
    if (st != ANVIL_OK) {
        *status = st;
        return INT32_MIN;
    }
    /* no second BOS when the template wrote it (llama.cpp's rule) */
    bool has_bos = false;
    if (v->add_bos && v->bos >= 0) {
        size_t bl;
        const char *bt = tok_text(v, v->bos, &bl);
        has_bos = bl > 0 && len >= bl && memcmp(text, bt, bl) == 0;
    }
    int32_t r = tok_encode_protected(v, text, len, sp, n_sp, out, cap, !has_bos);
    if (has_bos && v->add_eos && r >= 0) {
        /* add_special was off for the BOS: the EOS it would add */
        if (r < cap)
            out[r++] = v->eos;
        else
            r = -(r + 1);
    } else if (has_bos && v->add_eos && r < 0 && r != INT32_MIN) {
        r -= 1;
    }
    core_free(text);
    core_free(sp);
    *status = r == INT32_MIN ? ANVIL_ERR_NOMEM : ANVIL_OK;
    if (r == INT32_MIN) errmsg_set(err, err_cap, "out of memory tokenizing the chat");
    return r;
}
