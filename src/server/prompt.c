/*
 * prompt.c - the prompt of a request: chat messages rendered through the
 * model's chat template and tokenized, or a completion's prompt (text or
 * token ids).
 *
 * Messages: roles system, user, assistant, tool and developer (OpenAI's
 * newer name for system); content a string or text parts; an assistant
 * turn's tool_calls are shown to the model the way it is asked to write a
 * call (toolcall.c), a tool result as a user turn that says which call it
 * answers (the native templates have no tool turns); with tools, the
 * functions' text joins the system turn. Prompt token ids are checked
 * against the vocabulary, so one bad request fails alone (llama-server
 * b4748 failed every slot).
 *
 * What it does not do: the fit of prompt plus completion (fit.c); here a
 * prompt is only refused when it alone overflows the tokenizer's buffer
 * of n_ctx tokens.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/srv_int.h"

/* Tokenize text into r->prompt (at most lim->n_ctx tokens + the overflow
 * count). */
static bool tokenize_into(const struct srv_limits *lim, const char *text, size_t len,
                          struct srv_req *r, const char *param, struct srv_err *e) {
    int32_t cap = lim->n_ctx;
    r->prompt = malloc((size_t)cap * sizeof(anvil_token));
    if (!r->prompt) {
        srv_oom(e);
        return false;
    }
    int32_t n = anvil_tokenize(lim->model, text, len, r->prompt, cap, true, true);
    if (n == INT32_MIN) {
        srv_oom(e);
        return false;
    }
    if (n < 0) {
        return srv_too_long(e, param, lim->n_ctx, "prompt is", -(long long)n);
    }
    r->n_prompt = n;
    return true;
}

static const char *msg_role(const char *role) {
    static const char *const roles[] = {"system", "user", "assistant"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(role, roles[i])) return roles[i];
    if (!strcmp(role, "developer")) return "system"; /* OpenAI's newer name for system */
    return NULL;
}

/* Message content: a string, an array of {"type":"text","text":...} parts
 * (joined), or null for an assistant turn. Returns text to free with
 * core_free. */
static char *msg_content(const cJSON *msg, int idx, bool assistant, struct srv_err *e) {
    char param[48];
    snprintf(param, sizeof(param), "messages[%d].content", idx);
    const cJSON *c = srv_field(msg, "content");
    if (!c) {
        if (!assistant) {
            srv_bad(e, param, "'%s' is required", param);
            return NULL;
        }
        return core_strdup("");
    }
    if (cJSON_IsString(c)) return core_strdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        srv_bad(e, param, "'%s' must be a string or an array of content parts, got %s", param,
                srv_type_name(c));
        return NULL;
    }
    struct sbuf b;
    sb_init(&b);
    sb_reserve(&b, 0);
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *t = cJSON_IsObject(p) ? srv_field(p, "type") : NULL;
        const cJSON *txt = cJSON_IsObject(p) ? srv_field(p, "text") : NULL;
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0 || !cJSON_IsString(txt)) {
            sb_free(&b);
            srv_bad(e, param, "'%s': only {\"type\": \"text\", \"text\": ...} parts are supported",
                    param);
            return NULL;
        }
        sb_puts(&b, txt->valuestring);
    }
    if (b.oom) {
        sb_free(&b);
        srv_oom(e);
        return NULL;
    }
    return sb_take(&b, NULL);
}

/* An assistant turn's tool_calls, shown to the model the way it is asked
 * to write a call ({"name", "arguments"}, toolcall.c), one per line after
 * the turn's text. Returns text to free with core_free, NULL with e set
 * on error. */
static char *calls_text(const cJSON *calls, int idx, char *content, struct srv_err *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].tool_calls", idx);
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, content);
    int k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        const cJSON *fn = cJSON_IsObject(c) ? srv_field(c, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? srv_field(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? srv_field(fn, "arguments") : NULL;
        if (!cJSON_IsString(name) || (args && !cJSON_IsString(args))) {
            sb_free(&b);
            srv_bad(e, param, "'%s[%d]' must be {\"id\", \"type\": \"function\", \"function\": "
                    "{\"name\": string, \"arguments\": string}}", param, k);
            return NULL;
        }
        if (b.len) sb_puts(&b, "\n");
        sb_puts(&b, "{\"name\": ");
        sb_json_str(&b, name->valuestring, strlen(name->valuestring));
        sb_puts(&b, ", \"arguments\": ");
        /* arguments are JSON text in OpenAI's shape: kept as they are
         * when they parse, quoted otherwise */
        cJSON *parsed = args ? cJSON_Parse(args->valuestring) : NULL;
        if (parsed) sb_puts(&b, args->valuestring);
        else if (args) sb_json_str(&b, args->valuestring, strlen(args->valuestring));
        else sb_puts(&b, "{}");
        cJSON_Delete(parsed);
        sb_puts(&b, "}");
    }
    if (b.oom) {
        sb_free(&b);
        srv_oom(e);
        return NULL;
    }
    sb_reserve(&b, 1);
    return sb_take(&b, NULL);
}

/* A tool result, shown to the model as a user turn that says which call
 * it answers (the native templates have no tool turns). */
static char *tool_result_text(const cJSON *m, int idx, char *content, struct srv_err *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].tool_call_id", idx);
    const cJSON *id = srv_field(m, "tool_call_id");
    if (!cJSON_IsString(id)) {
        srv_bad(e, param, "'%s' must be a string (the id of the call this result answers)", param);
        return NULL;
    }
    struct sbuf b;
    sb_init(&b);
    sb_printf(&b, "Result of the function call %.64s:\n%s", id->valuestring, content);
    if (b.oom) {
        sb_free(&b);
        srv_oom(e);
        return NULL;
    }
    return sb_take(&b, NULL);
}

bool srv_parse_messages(const struct srv_limits *lim, const cJSON *root,
                        const struct srv_tools *tools, struct srv_req *r, struct srv_err *e) {
    const cJSON *msgs = srv_field(root, "messages");
    if (!msgs) return srv_bad(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs))
        return srv_bad(e, "messages", "'messages' must be an array, got %s", srv_type_name(msgs));
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return srv_bad(e, "messages", "'messages' must not be empty");
    /* one more slot: the tools' system turn when there is no system message */
    int n_msgs = n;
    struct anvil_chat_msg *cm = calloc((size_t)n + 1, sizeof(*cm));
    char **texts = calloc((size_t)n + 1, sizeof(*texts));
    bool ok = false;
    if (!cm || !texts) {
        srv_oom(e);
        goto fail;
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char param[48];
        snprintf(param, sizeof(param), "messages[%d]", i);
        if (!cJSON_IsObject(m)) {
            srv_bad(e, param, "'%s' must be an object, got %s", param, srv_type_name(m));
            goto fail;
        }
        const cJSON *role = srv_field(m, "role");
        if (!cJSON_IsString(role)) {
            snprintf(param, sizeof(param), "messages[%d].role", i);
            srv_bad(e, param, "'%s' must be a string", param);
            goto fail;
        }
        bool is_tool = !strcmp(role->valuestring, "tool");
        cm[i].role = is_tool ? "user" : msg_role(role->valuestring);
        if (!cm[i].role) {
            snprintf(param, sizeof(param), "messages[%d].role", i);
            srv_bad(e, param, "'%s' must be one of system, user, assistant, tool, developer; got "
                    "'%.40s'", param, role->valuestring);
            goto fail;
        }
        bool assistant = !strcmp(cm[i].role, "assistant");
        const cJSON *calls = NULL;
        for (const cJSON *k = m->child; k; k = k->next) {
            if (!strcmp(k->string, "role") || !strcmp(k->string, "content") ||
                !strcmp(k->string, "name") || !strcmp(k->string, "refusal"))
                continue;
            if (!strcmp(k->string, "tool_calls") && assistant &&
                (cJSON_IsNull(k) || cJSON_IsArray(k))) {
                calls = cJSON_IsArray(k) && k->child ? k : NULL;
                continue;
            }
            if (!strcmp(k->string, "tool_call_id") && is_tool) continue;
            srv_bad(e, param, "'%s': field '%.40s' is not supported", param, k->string);
            goto fail;
        }
        const cJSON *name = srv_field(m, "name");
        if (name && !cJSON_IsString(name)) {
            snprintf(param, sizeof(param), "messages[%d].name", i);
            srv_bad(e, param, "'%s' must be a string", param);
            goto fail;
        }
        texts[i] = msg_content(m, i, assistant, e);
        if (texts[i] && (calls || is_tool)) {
            char *t = calls ? calls_text(calls, i, texts[i], e) : tool_result_text(m, i, texts[i], e);
            core_free(texts[i]);
            texts[i] = t;
        }
        if (!texts[i]) {
            if (e->status == 0) srv_oom(e);
            goto fail;
        }
        cm[i].content = texts[i];
    }
    if (tools->mode != SRV_TOOLS_NONE) {
        /* the functions go into the system turn: appended to the caller's,
         * or a system turn of their own in front */
        char *tt = srv_tools_prompt(tools);
        if (!tt) {
            srv_oom(e);
            goto fail;
        }
        if (!strcmp(cm[0].role, "system")) {
            size_t la = strlen(texts[0]), lb = strlen(tt);
            char *joined = core_malloc(la + lb + 3);
            if (joined) {
                memcpy(joined, texts[0], la);
                memcpy(joined + la, "\n\n", 2);
                memcpy(joined + la + 2, tt, lb + 1);
            }
            core_free(tt);
            if (!joined) {
                srv_oom(e);
                goto fail;
            }
            core_free(texts[0]);
            texts[0] = joined;
            cm[0].content = joined;
        } else {
            memmove(cm + 1, cm, (size_t)n * sizeof(*cm));
            memmove(texts + 1, texts, (size_t)n * sizeof(*texts));
            texts[0] = tt;
            cm[0] = (struct anvil_chat_msg){"system", tt};
            n_msgs++;
        }
    }
    /* render and tokenize in one call: the template's markers become
     * control tokens, the messages' text stays text (a user typing
     * "<|im_start|>" gets those characters, not a turn boundary) */
    r->prompt = malloc((size_t)lim->n_ctx * sizeof(anvil_token));
    if (!r->prompt) {
        srv_oom(e);
        goto fail;
    }
    int32_t nt = anvil_chat_tokenize(lim->model, cm, (size_t)n_msgs, true, r->prompt, lim->n_ctx);
    if (nt == INT32_MIN) {
        srv_oom(e);
        goto fail;
    }
    if (nt < 0) {
        srv_too_long(e, "messages", lim->n_ctx, "messages are", -(long long)nt);
        goto fail;
    }
    r->n_prompt = nt;
    ok = true;
fail:
    if (texts)
        for (int j = 0; j < n + 1; j++) core_free(texts[j]);
    free(texts);
    free(cm);
    return ok;
}

static bool parse_token_ids(const struct srv_limits *lim, const cJSON *arr, struct srv_req *r,
                            struct srv_err *e) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return srv_bad(e, "prompt", "'prompt' must not be empty");
    if (n >= lim->n_ctx) {
        return srv_too_long(e, "prompt", lim->n_ctx, "prompt is", n);
    }
    r->prompt = malloc((size_t)n * sizeof(anvil_token));
    if (!r->prompt) {
        srv_oom(e);
        return false;
    }
    int i = 0;
    for (const cJSON *c = arr->child; c; c = c->next, i++) {
        if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) ||
            c->valuedouble != floor(c->valuedouble))
            return srv_bad(e, "prompt", "'prompt[%d]' must be an integer token id, got %s", i,
                           cJSON_IsNumber(c) ? "a fraction" : srv_type_name(c));
        if (c->valuedouble < 0 || c->valuedouble >= lim->n_vocab)
            return srv_bad(e, "prompt", "'prompt[%d]' = %.0f is not a token id: the vocabulary has "
                           "%d tokens", i, c->valuedouble, (int)lim->n_vocab);
        r->prompt[i] = (anvil_token)c->valuedouble;
    }
    r->n_prompt = n;
    return true;
}

bool srv_parse_prompt(const struct srv_limits *lim, const cJSON *root, struct srv_req *r,
                      struct srv_err *e) {
    const cJSON *p = srv_field(root, "prompt");
    if (!p) return srv_bad(e, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p)) {
        const cJSON *first = p->child;
        if (!first) return srv_bad(e, "prompt", "'prompt' must not be empty");
        if (cJSON_IsNumber(first)) return parse_token_ids(lim, p, r, e);
        /* a batch of prompts: anvil answers one prompt per request */
        if (first->next)
            return srv_bad(e, "prompt", "batched prompts are not supported: send one prompt per "
                           "request");
        if (cJSON_IsArray(first)) return parse_token_ids(lim, first, r, e);
        p = first;
    }
    if (!cJSON_IsString(p))
        return srv_bad(e, "prompt", "'prompt' must be a string or an array of token ids, got %s",
                       srv_type_name(p));
    return tokenize_into(lim, p->valuestring, strlen(p->valuestring), r, "prompt", e);
}
