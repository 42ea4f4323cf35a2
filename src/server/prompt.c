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

// ----------------------------------------------------------------------------
// the Jinja path: the request as the template's context

/* What a template knows of tools, read from its text as llama.cpp's
 * generic handler does: one that never names tools, tool_calls or the
 * tool role is given them the way the built-in families are (the tools'
 * text in the system turn, calls as JSON text, results as user turns). */
struct tmpl_caps {
    bool tools, calls, tool_role;
};

static struct tmpl_caps caps_of(const char *src) {
    struct tmpl_caps c = {true, true, true};
    if (!src) return c;
    c.tools = strstr(src, "tools") != NULL;
    c.calls = strstr(src, "tool_calls") != NULL;
    c.tool_role = strstr(src, "'tool'") || strstr(src, "\"tool\"") || strstr(src, "ipython");
    return c;
}

/* One message of the context: role (developer -> system), content (a
 * string, text parts joined, null kept), and the fields templates read. */
static cJSON *ctx_message(const cJSON *m, struct srv_err *e, int idx, struct tmpl_caps caps) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const cJSON *role = srv_field(m, "role");
    const char *rs = !strcmp(role->valuestring, "developer") ? "system" : role->valuestring;
    bool is_tool = !strcmp(rs, "tool"), as_user = is_tool && !caps.tool_role;
    const cJSON *calls = srv_field(m, "tool_calls");
    bool calls_as_text = !caps.calls && cJSON_IsArray(calls) && calls->child;
    cJSON_AddStringToObject(o, "role", as_user ? "user" : rs);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (cJSON_IsString(c) || cJSON_IsArray(c) || as_user || calls_as_text) {
        char *t = cJSON_IsString(c) || cJSON_IsArray(c) ? msg_content(m, idx, true, e)
                                                         : core_strdup("");
        if (t && (as_user || calls_as_text)) {
            char *u = as_user ? tool_result_text(m, idx, t, e) : calls_text(calls, idx, t, e);
            core_free(t);
            t = u;
        }
        if (!t) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddStringToObject(o, "content", t);
        core_free(t);
    } else {
        cJSON_AddNullToObject(o, "content");
    }
    static const char *const keep[] = {"tool_calls", "tool_call_id", "name", "reasoning_content"};
    for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++) {
        const cJSON *f = srv_field(m, keep[k]);
        if (k == 0 && calls_as_text) continue;
        if (f) cJSON_AddItemToObject(o, keep[k], cJSON_Duplicate(f, true));
    }
    return o;
}

/* A template that does not take tools gets the tools' text in its system
 * turn (appended to the caller's, or a system turn of its own first). */
static bool tools_into_system(cJSON *msgs, const struct srv_tools *tools, struct srv_err *e) {
    char *tt = srv_tools_prompt(tools);
    if (!tt) return srv_oom(e);
    cJSON *first = msgs->child;
    const cJSON *r = first ? cJSON_GetObjectItemCaseSensitive(first, "role") : NULL;
    const cJSON *c = first ? cJSON_GetObjectItemCaseSensitive(first, "content") : NULL;
    bool ok;
    if (cJSON_IsString(r) && !strcmp(r->valuestring, "system") && cJSON_IsString(c)) {
        struct sbuf b;
        sb_init(&b);
        sb_printf(&b, "%s\n\n%s", c->valuestring, tt);
        ok = !b.oom;
        if (ok) cJSON_ReplaceItemInObjectCaseSensitive(first, "content", cJSON_CreateString(b.p));
        sb_free(&b);
    } else {
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL;
        if (o) {
            cJSON_AddStringToObject(o, "role", "system");
            cJSON_AddStringToObject(o, "content", tt);
            ok = cJSON_InsertItemInArray(msgs, 0, o);
        }
    }
    core_free(tt);
    return ok ? true : srv_oom(e);
}

char *srv_chat_context(const cJSON *root, const struct srv_tools *tools, const char *tmpl_src,
                       bool add_generation, struct srv_err *e) {
    struct tmpl_caps caps = caps_of(tmpl_src);
    cJSON *ctx = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(ctx, "messages");
    if (!ctx || !msgs) goto oom;
    int i = 0;
    for (const cJSON *m = srv_field(root, "messages")->child; m; m = m->next, i++) {
        cJSON *o = ctx_message(m, e, i, caps);
        if (!o) {
            cJSON_Delete(ctx);
            if (e->status == 0) srv_oom(e);
            return NULL;
        }
        cJSON_AddItemToArray(msgs, o);
    }
    if (tools && tools->mode != SRV_TOOLS_NONE && !caps.tools && !tools_into_system(msgs, tools, e)) {
        cJSON_Delete(ctx);
        return NULL;
    }
    const cJSON *kw = srv_field(root, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw)) {
        cJSON_Delete(ctx);
        srv_bad(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object, got %s",
                srv_type_name(kw));
        return NULL;
    }
    const cJSON *effort = srv_field(root, "reasoning_effort");
    if (effort && !cJSON_IsString(effort)) {
        cJSON_Delete(ctx);
        srv_bad(e, "reasoning_effort", "'reasoning_effort' must be a string, got %s",
                srv_type_name(effort));
        return NULL;
    }
    /* tool_choice "none" hides the tools, as on the built-in path */
    const cJSON *tl = srv_field(root, "tools");
    if (tools && tools->mode != SRV_TOOLS_NONE && caps.tools && cJSON_IsArray(tl) && tl->child)
        cJSON_AddItemToObject(ctx, "tools", cJSON_Duplicate(tl, true));
    cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_generation);
    if (effort) cJSON_AddStringToObject(ctx, "reasoning_effort", effort->valuestring);
    /* the kwargs at top level (enable_thinking, ...); they do not replace
     * the conversation itself */
    for (const cJSON *k = kw ? kw->child : NULL; k; k = k->next) {
        if (!strcmp(k->string, "messages") || !strcmp(k->string, "tools")) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(ctx, k->string);
        cJSON_AddItemToObject(ctx, k->string, cJSON_Duplicate(k, true));
    }
    char *out = cJSON_PrintUnformatted(ctx);
    cJSON_Delete(ctx);
    if (!out) {
        srv_oom(e);
        return NULL;
    }
    return out;
oom:
    cJSON_Delete(ctx);
    srv_oom(e);
    return NULL;
}

/* A render failure: 500 when memory ran out, else a 400 that carries the
 * template's message (raise_exception's text, or "line N: ..." for a
 * limit or a template error: the request is what made the template
 * fail, docs/chat-templates.md). */
static bool template_error(struct srv_err *e, const char *err) {
    if (!strncmp(err, "out of memory", 13)) return srv_oom(e);
    return srv_bad(e, "messages", "%s", err);
}

/* Does the prompt end inside an opened thought ("<think>" last, as the
 * reasoning templates open it when thinking is on)? */
static bool ends_in_think(const struct anvil_model *m, const anvil_token *t, int32_t n) {
    char buf[96];
    size_t len = 0;
    for (int32_t i = n > 3 ? n - 3 : 0; i < n; i++) {
        int32_t k = anvil_token_to_piece(m, t[i], buf + len, (int32_t)(sizeof buf - 1 - len), true);
        if (k > 0) len += (size_t)k;
    }
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' ')) len--;
    return len >= 7 && !memcmp(buf + len - 7, "<think>", 7);
}

static bool jinja_prompt(const struct srv_limits *lim, const cJSON *root,
                         const struct srv_tools *tools, struct srv_req *r, struct srv_err *e) {
    bool add = true;
    if (!srv_get_bool(root, "add_generation_prompt", &add, NULL, e)) return false;
    char *ctx = srv_chat_context(root, tools, anvil_chat_template_text(lim->model), add, e);
    if (!ctx) return false;
    r->prompt = malloc((size_t)lim->n_ctx * sizeof(anvil_token));
    if (!r->prompt) {
        free(ctx);
        return srv_oom(e);
    }
    char err[400];
    int32_t nt = anvil_chat_tokenize_json(lim->model, ctx, strlen(ctx), r->prompt, lim->n_ctx,
                                          err, sizeof err);
    free(ctx);
    if (nt == INT32_MIN) return template_error(e, err);
    if (nt < 0) return srv_too_long(e, "messages", lim->n_ctx, "messages are", -(long long)nt);
    r->n_prompt = nt;
    r->reasoning_open = ends_in_think(lim->model, r->prompt, nt);
    return true;
}

bool srv_apply_template(const struct srv_info *in, const char *body, size_t len,
                        struct sbuf *out, struct srv_err *e) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    bool ok = false;
    char *ctx = NULL, *text = NULL;
    if (!cJSON_IsObject(root)) {
        srv_bad(e, NULL, "the body must be a JSON object");
        goto done;
    }
    const cJSON *msgs = srv_field(root, "messages");
    if (!msgs) {
        srv_bad(e, "messages", "'messages' is required");
        goto done;
    }
    if (!cJSON_IsArray(msgs)) {
        srv_bad(e, "messages", "'messages' must be an array, got %s", srv_type_name(msgs));
        goto done;
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        const cJSON *role = cJSON_IsObject(m) ? srv_field(m, "role") : NULL;
        if (!cJSON_IsString(role)) {
            char param[48];
            snprintf(param, sizeof(param), "messages[%d].role", i);
            srv_bad(e, param, "'%s' must be a string", param);
            goto done;
        }
    }
    struct srv_tools tools = {.mode = SRV_TOOLS_NONE};
    if (!srv_tools_parse(root, &tools, e)) goto done;
    bool add = true;
    if (!srv_get_bool(root, "add_generation_prompt", &add, NULL, e)) goto done;
    const struct anvil_model *m = in->model;
    if (!anvil_chat_template_text(m)) {
        /* the built-in family: the plain messages, as a chat is rendered */
        int n = cJSON_GetArraySize(msgs);
        struct anvil_chat_msg *cm = calloc((size_t)n + 1, sizeof(*cm));
        char **texts = calloc((size_t)n + 1, sizeof(*texts));
        bool good = cm && texts;
        i = 0;
        for (const cJSON *mm = msgs->child; good && mm; mm = mm->next, i++) {
            const char *role = srv_field(mm, "role")->valuestring;
            cm[i].role = msg_role(role) ? msg_role(role) : "user";
            texts[i] = msg_content(mm, i, true, e);
            good = texts[i] != NULL;
            cm[i].content = texts[i];
        }
        int32_t need = good ? anvil_chat_apply(m, cm, (size_t)n, add, NULL, 0) : 0;
        if (good && need < 0 && need != INT32_MIN) {
            text = malloc((size_t)-need);
            if (text && anvil_chat_apply(m, cm, (size_t)n, add, text, -need) >= 0) ok = true;
        }
        for (int j = 0; texts && j < n; j++) core_free(texts[j]);
        free(texts);
        free(cm);
        if (!ok) {
            if (e->status == 0) srv_oom(e);
            goto done;
        }
    } else {
        ctx = srv_chat_context(root, &tools, anvil_chat_template_text(m), add, e);
        if (!ctx) goto done;
        char err[400];
        int32_t need = anvil_chat_render_json(m, ctx, strlen(ctx), NULL, 0, err, sizeof err);
        if (need == INT32_MIN) {
            template_error(e, err);
            goto done;
        }
        text = malloc((size_t)-need);
        if (!text || anvil_chat_render_json(m, ctx, strlen(ctx), text, -need, err, sizeof err) < 0) {
            srv_oom(e);
            goto done;
        }
        ok = true;
    }
    sb_puts(out, "{\"prompt\":");
    sb_json_str(out, text, strlen(text));
    sb_puts(out, "}");
    if (out->oom) ok = srv_oom(e);
done:
    free(text);
    free(ctx);
    cJSON_Delete(root);
    return ok;
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
            if (!strcmp(k->string, "reasoning_content") && assistant &&
                (cJSON_IsNull(k) || cJSON_IsString(k)))
                continue; /* shown to the Jinja template; the built-in families drop it */
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
    if (anvil_chat_template_text(lim->model)) {
        /* the model's own template: messages, tools and the request's
         * template variables go to it as they are */
        ok = jinja_prompt(lim, root, tools, r, e);
        goto fail;
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
