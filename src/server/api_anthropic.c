/*
 * api_anthropic.c - the Anthropic Messages API over the chat machinery:
 * POST /v1/messages (whole or streamed) and /v1/messages/count_tokens.
 *
 * A body is checked with Anthropic's own rules and words first (required
 * model, messages and max_tokens; user and assistant roles; content
 * blocks; tools with input_schema; tool_choice; thinking; output_config),
 * then translated into the equivalent chat-completions object and handed
 * to srv_parse_request_json, so that prompts, tools, constraints and the
 * context fit are the chat route's:
 *   system (string or text blocks)   -> a system message first
 *   text blocks                      -> the turn's content
 *   tool_use blocks (assistant)      -> tool_calls, input as arguments text
 *   tool_result blocks (user)        -> tool messages with tool_call_id
 *                                       (is_error: the text says so)
 *   thinking / redacted_thinking     -> dropped (earlier turns' thoughts
 *                                       are not shown to the model again)
 *   tools [{name, input_schema}]     -> function tools
 *   tool_choice auto/any/tool/none   -> auto/required/named/none;
 *     disable_parallel_tool_use      -> parallel_tool_calls false
 *   output_config.format json_schema -> response_format json_schema
 *   thinking enabled/adaptive        -> chat_template_kwargs.enable_thinking
 *                                       (for a template that marks thoughts)
 *   stop_sequences, temperature, top_p, top_k -> stop and the sampler.
 * max_tokens is a bound, not a promise: the chat side gives the request
 * the rest of the context and it is cut to max_tokens here, so clients
 * that always ask for a large max_tokens work on a small context.
 *
 * Answers: a message {"id": "msg_...", "type": "message", "content":
 * [thinking, text, tool_use...], "stop_reason", "stop_sequence", "usage"},
 * or the event stream message_start, ping, (content_block_start,
 * content_block_delta*, content_block_stop)*, message_delta, message_stop,
 * each as "event: TYPE\ndata: {...}\n\n". Tool ids are "toolu_" and the
 * call id's letters. stop_reason: end_turn, max_tokens, tool_use, or
 * stop_sequence with the string that matched: the engine reports only
 * STOP, so a request with stop_sequences keeps its token records and the
 * match is found by replaying them (srv_anthropic_stop_index).
 * usage.input_tokens counts the prompt tokens not read from the prefix
 * cache, cache_read_input_tokens the others (Anthropic's split).
 * Errors: {"type": "error", "error": {"type", "message"}}, the type from
 * the status (400 invalid_request_error, 401 authentication_error, 404
 * not_found_error, 413 request_too_large, 429 rate_limit_error, 503 and
 * 529 overloaded_error, else api_error).
 *
 * Unknown top-level fields are ignored and named in X-Anvil-Ignored-Fields
 * (Anthropic's 400 "Extra inputs are not permitted" with --strict);
 * unknown fields inside the objects are always a 400.
 * Not here: images, documents, server tools (web search, code execution)
 * and prefill (a last assistant turn is shown as an earlier turn, not
 * continued): each is a 400 or documented in docs/api-anthropic.md.
 * Reference: the Anthropic API reference (Messages, Streaming Messages,
 * Count Message tokens, Errors); the `anthropic` Python SDK's parsers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/api_anthropic.h"

// ----------------------------------------------------------------------------
// errors

static const char *err_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 400 && status < 500 ? "invalid_request_error" : "api_error";
    }
}

static void fmt_error_obj(struct sbuf *b, const struct srv_err *e) {
    const char *t = err_type(e->status);
    sb_puts(b, "{\"type\":\"error\",\"error\":{\"type\":");
    sb_json_str(b, t, strlen(t));
    sb_puts(b, ",\"message\":");
    sb_json_str(b, e->message, strlen(e->message));
    sb_puts(b, "}}");
}

static void anth_error(struct sbuf *b, const struct srv_err *e) { fmt_error_obj(b, e); }

// ----------------------------------------------------------------------------
// request checks: Anthropic's words, path-style field names

/* A 400 naming the field (path "messages.0.content"); returns false. */
static bool bad(struct srv_err *e, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(struct srv_err *e, const char *path, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srv_err_set(e, 400, "invalid_request_error", NULL, path, "%s: %s", path, msg);
    return false;
}

static bool only_keys(const cJSON *o, const char *path, const char *const *keys,
                      struct srv_err *e) {
    for (const cJSON *k = o->child; k; k = k->next) {
        bool ok = false;
        for (int i = 0; keys[i]; i++)
            if (!strcmp(k->string, keys[i])) ok = true;
        if (!ok) {
            char p[160];
            snprintf(p, sizeof(p), "%s%s%.60s", path, path[0] ? "." : "", k->string);
            return bad(e, p, "Extra inputs are not permitted");
        }
    }
    return true;
}

/* cJSON building with one out-of-memory flag. */
struct jb {
    bool oom;
};

static cJSON *add(struct jb *j, cJSON *o, const char *key, cJSON *v) {
    if (!v || !o) {
        j->oom = true;
        cJSON_Delete(v);
        return NULL;
    }
    if (key ? !cJSON_AddItemToObject(o, key, v) : !cJSON_AddItemToArray(o, v)) {
        j->oom = true;
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

static cJSON *add_str(struct jb *j, cJSON *o, const char *key, const char *s) {
    return add(j, o, key, cJSON_CreateString(s));
}

/* Text blocks (or a string) joined into b. allow_tool_result etc. are
 * decided by the caller; here only text. */
static bool text_blocks(const cJSON *v, const char *path, struct sbuf *b, struct srv_err *e) {
    if (cJSON_IsString(v)) {
        sb_puts(b, v->valuestring);
        return true;
    }
    if (!cJSON_IsArray(v)) return bad(e, path, "Input should be a valid string or list");
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        char p[160];
        snprintf(p, sizeof(p), "%s.%d", path, i);
        const cJSON *t = cJSON_IsObject(x) ? srv_field(x, "type") : NULL;
        if (!cJSON_IsString(t)) return bad(e, p, "a content block must be an object with a 'type'");
        if (strcmp(t->valuestring, "text") != 0)
            return bad(e, p, "only text blocks are accepted here, got '%.40s'", t->valuestring);
        static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
        if (!only_keys(x, p, keys, e)) return false;
        const cJSON *txt = srv_field(x, "text");
        if (!cJSON_IsString(txt)) return bad(e, p, "'text' must be a string");
        if (b->len && i > 0) sb_puts(b, "\n");
        sb_puts(b, txt->valuestring);
    }
    return true;
}

/* b's text, NUL terminated even when nothing was written (sb_reserve
 * allocates without terminating), to free with core_free. */
static char *take(struct sbuf *b, struct srv_err *e) {
    if (sb_reserve(b, 1)) b->p[b->len] = '\0';
    if (b->oom) {
        sb_free(b);
        srv_oom(e);
        return NULL;
    }
    char *s = sb_take(b, NULL);
    if (!s) srv_oom(e);
    return s;
}

/* One user turn's blocks -> chat messages (text runs as user messages,
 * each tool_result a tool message), appended to msgs. */
static bool user_turn(struct jb *j, const cJSON *content, const char *path, cJSON *msgs,
                      struct srv_err *e) {
    struct sbuf text;
    sb_init(&text);
    bool have_text = false, ok = false;
    if (cJSON_IsString(content)) {
        cJSON *m = add(j, msgs, NULL, cJSON_CreateObject());
        add_str(j, m, "role", "user");
        add_str(j, m, "content", content->valuestring);
        return true;
    }
    if (!cJSON_IsArray(content)) return bad(e, path, "Input should be a valid string or list");
    int i = 0;
    for (const cJSON *x = content->child; x; x = x->next, i++) {
        char p[160];
        snprintf(p, sizeof(p), "%s.%d", path, i);
        const cJSON *t = cJSON_IsObject(x) ? srv_field(x, "type") : NULL;
        if (!cJSON_IsString(t)) {
            bad(e, p, "a content block must be an object with a 'type'");
            goto out;
        }
        const char *ty = t->valuestring;
        if (!strcmp(ty, "text")) {
            static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
            if (!only_keys(x, p, keys, e)) goto out;
            const cJSON *txt = srv_field(x, "text");
            if (!cJSON_IsString(txt)) {
                bad(e, p, "'text' must be a string");
                goto out;
            }
            if (have_text) sb_puts(&text, "\n");
            sb_puts(&text, txt->valuestring);
            have_text = true;
        } else if (!strcmp(ty, "tool_result")) {
            static const char *const keys[] = {"type", "tool_use_id", "content", "is_error",
                                               "cache_control", NULL};
            if (!only_keys(x, p, keys, e)) goto out;
            const cJSON *id = srv_field(x, "tool_use_id");
            if (!cJSON_IsString(id) || !id->valuestring[0]) {
                bad(e, p, "'tool_use_id' must be a non-empty string");
                goto out;
            }
            bool is_error = false;
            if (!srv_get_bool(x, "is_error", &is_error, NULL, e)) {
                bad(e, p, "'is_error' must be a boolean");
                goto out;
            }
            struct sbuf r;
            sb_init(&r);
            if (is_error) sb_puts(&r, "Error: ");
            const cJSON *rc = srv_field(x, "content");
            char cp[180];
            snprintf(cp, sizeof(cp), "%s.content", p);
            if (rc && !text_blocks(rc, cp, &r, e)) {
                sb_free(&r);
                goto out;
            }
            char *rs = take(&r, e);
            if (!rs) goto out;
            if (have_text) { /* the text before the result is its own turn */
                char *ts = take(&text, e);
                if (!ts) {
                    core_free(rs);
                    goto out;
                }
                cJSON *m = add(j, msgs, NULL, cJSON_CreateObject());
                add_str(j, m, "role", "user");
                add_str(j, m, "content", ts);
                core_free(ts);
                sb_init(&text);
                have_text = false;
            }
            cJSON *m = add(j, msgs, NULL, cJSON_CreateObject());
            add_str(j, m, "role", "tool");
            add_str(j, m, "tool_call_id", id->valuestring);
            add_str(j, m, "content", rs);
            core_free(rs);
        } else if (!strcmp(ty, "image") || !strcmp(ty, "document")) {
            bad(e, p, "'%s' blocks are not supported by this server (text only)", ty);
            goto out;
        } else {
            bad(e, p, "block type '%.40s' is not accepted in a user turn (text, tool_result)", ty);
            goto out;
        }
    }
    if (have_text || i == 0) {
        char *ts = take(&text, e);
        if (!ts) return false;
        cJSON *m = add(j, msgs, NULL, cJSON_CreateObject());
        add_str(j, m, "role", "user");
        add_str(j, m, "content", ts);
        core_free(ts);
    } else {
        sb_free(&text);
    }
    return true;
out:
    sb_free(&text);
    return ok;
}

/* One assistant turn -> a chat assistant message with content and
 * tool_calls. */
static bool assistant_turn(struct jb *j, const cJSON *content, const char *path, cJSON *msgs,
                           struct srv_err *e) {
    cJSON *m = add(j, msgs, NULL, cJSON_CreateObject());
    add_str(j, m, "role", "assistant");
    if (cJSON_IsString(content)) {
        add_str(j, m, "content", content->valuestring);
        return true;
    }
    if (!cJSON_IsArray(content)) return bad(e, path, "Input should be a valid string or list");
    struct sbuf text;
    sb_init(&text);
    cJSON *calls = NULL;
    bool have_text = false;
    int i = 0;
    for (const cJSON *x = content->child; x; x = x->next, i++) {
        char p[160];
        snprintf(p, sizeof(p), "%s.%d", path, i);
        const cJSON *t = cJSON_IsObject(x) ? srv_field(x, "type") : NULL;
        if (!cJSON_IsString(t)) {
            sb_free(&text);
            return bad(e, p, "a content block must be an object with a 'type'");
        }
        const char *ty = t->valuestring;
        if (!strcmp(ty, "text")) {
            static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
            const cJSON *txt = srv_field(x, "text");
            if (!only_keys(x, p, keys, e) || !cJSON_IsString(txt)) {
                sb_free(&text);
                return e->status ? false : bad(e, p, "'text' must be a string");
            }
            if (have_text) sb_puts(&text, "\n");
            sb_puts(&text, txt->valuestring);
            have_text = true;
        } else if (!strcmp(ty, "tool_use")) {
            static const char *const keys[] = {"type", "id", "name", "input", "cache_control",
                                               NULL};
            if (!only_keys(x, p, keys, e)) {
                sb_free(&text);
                return false;
            }
            const cJSON *id = srv_field(x, "id"), *name = srv_field(x, "name");
            const cJSON *input = srv_field(x, "input");
            if (!cJSON_IsString(id) || !id->valuestring[0] || !cJSON_IsString(name) ||
                !cJSON_IsObject(input)) {
                sb_free(&text);
                return bad(e, p, "a tool_use block needs 'id' and 'name' (strings) and 'input' "
                           "(an object)");
            }
            char *args = cJSON_PrintUnformatted(input);
            if (!calls) calls = add(j, m, "tool_calls", cJSON_CreateArray());
            cJSON *c = add(j, calls, NULL, cJSON_CreateObject());
            add_str(j, c, "id", id->valuestring);
            add_str(j, c, "type", "function");
            cJSON *fn = add(j, c, "function", cJSON_CreateObject());
            add_str(j, fn, "name", name->valuestring);
            if (args) add_str(j, fn, "arguments", args);
            else j->oom = true;
            free(args);
        } else if (!strcmp(ty, "thinking") || !strcmp(ty, "redacted_thinking")) {
            continue; /* earlier thoughts are not shown to the model again */
        } else {
            sb_free(&text);
            return bad(e, p, "block type '%.40s' is not accepted in an assistant turn (text, "
                       "tool_use, thinking)", ty);
        }
    }
    char *ts = take(&text, e);
    if (!ts) return false;
    add_str(j, m, "content", ts);
    core_free(ts);
    return true;
}

static bool tools_of(struct jb *j, const cJSON *tools, cJSON *out, struct srv_err *e) {
    if (!cJSON_IsArray(tools)) return bad(e, "tools", "Input should be a valid list");
    cJSON *arr = add(j, out, "tools", cJSON_CreateArray());
    int i = 0;
    for (const cJSON *x = tools->child; x; x = x->next, i++) {
        char p[48];
        snprintf(p, sizeof(p), "tools.%d", i);
        if (!cJSON_IsObject(x)) return bad(e, p, "a tool must be an object");
        const cJSON *type = srv_field(x, "type");
        if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom") != 0))
            return bad(e, p, "tool type '%.60s' is not supported by this server (custom tools "
                       "with 'name' and 'input_schema' only)",
                       cJSON_IsString(type) ? type->valuestring : "?");
        static const char *const keys[] = {"type", "name", "description", "input_schema",
                                           "cache_control", "strict", "input_examples", NULL};
        if (!only_keys(x, p, keys, e)) return false;
        const cJSON *name = srv_field(x, "name"), *desc = srv_field(x, "description");
        const cJSON *schema = srv_field(x, "input_schema");
        if (!cJSON_IsString(name)) return bad(e, p, "'name' must be a string");
        if (desc && !cJSON_IsString(desc)) return bad(e, p, "'description' must be a string");
        if (!cJSON_IsObject(schema)) return bad(e, p, "'input_schema' must be a JSON Schema object");
        cJSON *t = add(j, arr, NULL, cJSON_CreateObject());
        add_str(j, t, "type", "function");
        cJSON *fn = add(j, t, "function", cJSON_CreateObject());
        add_str(j, fn, "name", name->valuestring);
        if (desc) add_str(j, fn, "description", desc->valuestring);
        add(j, fn, "parameters", cJSON_Duplicate(schema, true));
    }
    return true;
}

static bool tool_choice_of(struct jb *j, const cJSON *tc, cJSON *out, struct srv_err *e) {
    if (!cJSON_IsObject(tc)) return bad(e, "tool_choice", "Input should be a valid dictionary");
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    if (!only_keys(tc, "tool_choice", keys, e)) return false;
    const cJSON *type = srv_field(tc, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    bool dp = false;
    if (!srv_get_bool(tc, "disable_parallel_tool_use", &dp, NULL, e))
        return bad(e, "tool_choice.disable_parallel_tool_use", "Input should be a valid boolean");
    const cJSON *name = srv_field(tc, "name");
    if (!strcmp(t, "tool")) {
        if (!cJSON_IsString(name)) return bad(e, "tool_choice.name", "Field required");
        cJSON *o = add(j, out, "tool_choice", cJSON_CreateObject());
        add_str(j, o, "type", "function");
        cJSON *fn = add(j, o, "function", cJSON_CreateObject());
        add_str(j, fn, "name", name->valuestring);
    } else if (!strcmp(t, "auto") || !strcmp(t, "any") || !strcmp(t, "none")) {
        if (name) return bad(e, "tool_choice.name", "Extra inputs are not permitted");
        add_str(j, out, "tool_choice", !strcmp(t, "any") ? "required" : t);
    } else {
        return bad(e, "tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'");
    }
    if (dp) add(j, out, "parallel_tool_calls", cJSON_CreateFalse());
    return true;
}

/* thinking -> *on; budget_tokens checked against max_tokens. */
static bool thinking_of(const cJSON *th, long long max_tokens, bool count_only, bool *on,
                        long long *budget_out, struct srv_err *e) {
    if (!cJSON_IsObject(th)) return bad(e, "thinking", "Input should be a valid dictionary");
    const cJSON *type = srv_field(th, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "disabled")) {
        static const char *const keys[] = {"type", NULL};
        *on = false;
        *budget_out = 0; /* a template that opens a thought anyway: closed at once */
        return only_keys(th, "thinking", keys, e);
    }
    if (!strcmp(t, "adaptive")) {
        static const char *const keys[] = {"type", "display", NULL};
        *on = true;
        return only_keys(th, "thinking", keys, e);
    }
    if (strcmp(t, "enabled") != 0)
        return bad(e, "thinking.type", "Input should be 'enabled', 'disabled' or 'adaptive'");
    static const char *const keys[] = {"type", "budget_tokens", "display", NULL};
    if (!only_keys(th, "thinking", keys, e)) return false;
    const cJSON *d = srv_field(th, "display");
    if (d && (!cJSON_IsString(d) ||
              (strcmp(d->valuestring, "summarized") && strcmp(d->valuestring, "omitted"))))
        return bad(e, "thinking.display", "Input should be 'summarized' or 'omitted'");
    long long budget = 0;
    bool present = false;
    if (!srv_get_int(th, "budget_tokens", -1e15, 1e15, &budget, &present, e))
        return bad(e, "thinking.budget_tokens", "Input should be a valid integer");
    if (!present) return bad(e, "thinking.budget_tokens", "Field required");
    if (budget < 1024) return bad(e, "thinking.budget_tokens", "Input should be greater than or "
                                  "equal to 1024");
    if (!count_only && budget >= max_tokens)
        return bad(e, "max_tokens", "`max_tokens` must be greater than `thinking.budget_tokens`");
    *on = true;
    *budget_out = budget;
    return true;
}

static bool output_config_of(struct jb *j, const cJSON *oc, cJSON *out, struct srv_err *e) {
    if (!cJSON_IsObject(oc)) return bad(e, "output_config", "Input should be a valid dictionary");
    static const char *const keys[] = {"format", "effort", NULL};
    if (!only_keys(oc, "output_config", keys, e)) return false;
    const cJSON *ef = srv_field(oc, "effort");
    if (ef && !cJSON_IsString(ef))
        return bad(e, "output_config.effort", "Input should be a valid string");
    const cJSON *f = srv_field(oc, "format");
    if (!f) return true;
    if (!cJSON_IsObject(f)) return bad(e, "output_config.format", "Input should be a valid "
                                       "dictionary");
    static const char *const fkeys[] = {"type", "schema", NULL};
    if (!only_keys(f, "output_config.format", fkeys, e)) return false;
    const cJSON *type = srv_field(f, "type"), *schema = srv_field(f, "schema");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "json_schema") != 0)
        return bad(e, "output_config.format.type", "Input should be 'json_schema'");
    if (!cJSON_IsObject(schema))
        return bad(e, "output_config.format.schema", "Field required (a JSON Schema object)");
    cJSON *rf = add(j, out, "response_format", cJSON_CreateObject());
    add_str(j, rf, "type", "json_schema");
    cJSON *js = add(j, rf, "json_schema", cJSON_CreateObject());
    add_str(j, js, "name", "output");
    add(j, js, "schema", cJSON_Duplicate(schema, true));
    return true;
}

/* A number field copied when present (null = absent), range checked. */
static bool copy_num(struct jb *j, const cJSON *root, const char *key, double lo, double hi,
                     bool integer, cJSON *out, struct srv_err *e) {
    const cJSON *v = srv_field(root, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || (integer && v->valuedouble != (double)(long long)v->valuedouble))
        return bad(e, key, "Input should be a valid %s", integer ? "integer" : "number");
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return bad(e, key, "Input should be between %g and %g", lo, hi);
    add(j, out, key, cJSON_CreateNumber(v->valuedouble));
    return true;
}

/* The Anthropic body -> the chat-completions object (new, the caller
 * deletes it), or NULL with e set. */
static cJSON *translate(const struct srv_limits *lim, const cJSON *root, bool count_only,
                        struct srv_anth_opts *o, struct srv_err *e) {
    static const char *const keys_msg[] = {
        "model", "messages", "max_tokens", "system", "metadata", "stop_sequences", "stream",
        "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "output_config",
        "service_tier", "cache_control", "inference_geo", "speed", NULL};
    static const char *const keys_count[] = {"model", "messages", "system", "tools",
                                             "tool_choice", "thinking", "output_config",
                                             "cache_control", NULL};
    /* unknown top-level fields: Anthropic's 400 with --strict, else
     * ignored and named in X-Anvil-Ignored-Fields, as the chat route does
     * (clients add fields as the API grows) */
    const char *const *top = count_only ? keys_count : keys_msg;
    for (const cJSON *k = root->child; k; k = k->next) {
        bool known = false;
        for (int i = 0; top[i]; i++)
            if (!strcmp(k->string, top[i])) known = true;
        if (known) continue;
        if (lim->strict) return bad(e, k->string, "Extra inputs are not permitted"), NULL;
        srv_note_ignored(o->ignored, sizeof(o->ignored), k->string);
    }
    const cJSON *model = srv_field(root, "model");
    if (!model) return bad(e, "model", "Field required"), NULL;
    if (!cJSON_IsString(model)) return bad(e, "model", "Input should be a valid string"), NULL;
    if (strcmp(model->valuestring, lim->model_id) != 0) {
        srv_err_set(e, 404, "not_found_error", NULL, "model", "model: %.100s",
                    model->valuestring);
        return NULL;
    }
    long long max_tokens = 0;
    if (!count_only) {
        bool present = false;
        if (!srv_get_int(root, "max_tokens", -1e15, 1e15, &max_tokens, &present, e))
            return bad(e, "max_tokens", "Input should be a valid integer"), NULL;
        if (!present) return bad(e, "max_tokens", "Field required"), NULL;
        if (max_tokens < 1)
            return bad(e, "max_tokens", "Input should be greater than or equal to 1"), NULL;
    }
    o->max_tokens = max_tokens;
    o->thinking = false;
    long long budget = -1; /* thinking.budget_tokens -> the thought gate's budget */
    const cJSON *th = srv_field(root, "thinking");
    if (th && !thinking_of(th, max_tokens, count_only, &o->thinking, &budget, e)) return NULL;
    const cJSON *msgs = srv_field(root, "messages");
    if (!msgs) return bad(e, "messages", "Field required"), NULL;
    if (!cJSON_IsArray(msgs)) return bad(e, "messages", "Input should be a valid list"), NULL;
    if (!msgs->child) return bad(e, "messages", "at least one message is required"), NULL;

    struct jb j = {false};
    cJSON *out = cJSON_CreateObject();
    if (!out) return srv_oom(e), NULL;
    add_str(&j, out, "model", lim->model_id);
    cJSON *cm = add(&j, out, "messages", cJSON_CreateArray());
    const cJSON *sys = srv_field(root, "system");
    if (sys) {
        struct sbuf b;
        sb_init(&b);
        if (!text_blocks(sys, "system", &b, e)) {
            sb_free(&b);
            goto fail;
        }
        char *s = take(&b, e);
        if (!s) goto fail;
        cJSON *m = add(&j, cm, NULL, cJSON_CreateObject());
        add_str(&j, m, "role", "system");
        add_str(&j, m, "content", s);
        core_free(s);
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char p[48];
        snprintf(p, sizeof(p), "messages.%d", i);
        if (!cJSON_IsObject(m)) {
            bad(e, p, "Input should be a valid dictionary");
            goto fail;
        }
        static const char *const keys[] = {"role", "content", NULL};
        if (!only_keys(m, p, keys, e)) goto fail;
        const cJSON *role = srv_field(m, "role"), *content = srv_field(m, "content");
        char pc[64];
        snprintf(pc, sizeof(pc), "%s.content", p);
        if (!content) {
            bad(e, pc, "Field required");
            goto fail;
        }
        bool user = cJSON_IsString(role) && !strcmp(role->valuestring, "user");
        bool asst = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
        if (!user && !asst) {
            char pr[64];
            snprintf(pr, sizeof(pr), "%s.role", p);
            bad(e, pr, "Input should be 'user' or 'assistant'");
            goto fail;
        }
        if (!(user ? user_turn(&j, content, pc, cm, e) : assistant_turn(&j, content, pc, cm, e)))
            goto fail;
    }
    if (!count_only) {
        bool stream = false;
        if (!srv_get_bool(root, "stream", &stream, NULL, e)) {
            bad(e, "stream", "Input should be a valid boolean");
            goto fail;
        }
        if (stream) add(&j, out, "stream", cJSON_CreateTrue());
        if (!copy_num(&j, root, "temperature", 0.0, 1.0, false, out, e) ||
            !copy_num(&j, root, "top_p", 0.0, 1.0, false, out, e) ||
            !copy_num(&j, root, "top_k", 0.0, 1e9, true, out, e))
            goto fail;
        const cJSON *ss = srv_field(root, "stop_sequences");
        if (ss) {
            if (!cJSON_IsArray(ss)) {
                bad(e, "stop_sequences", "Input should be a valid list");
                goto fail;
            }
            int k = 0;
            for (const cJSON *x = ss->child; x; x = x->next, k++) {
                char p[48];
                snprintf(p, sizeof(p), "stop_sequences.%d", k);
                if (!cJSON_IsString(x)) {
                    bad(e, p, "Input should be a valid string");
                    goto fail;
                }
                if (!x->valuestring[0]) {
                    bad(e, p, "stop sequences must not be empty");
                    goto fail;
                }
            }
            if (ss->child) add(&j, out, "stop", cJSON_Duplicate(ss, true));
        }
        const cJSON *md = srv_field(root, "metadata");
        if (md) {
            static const char *const keys[] = {"user_id", NULL};
            if (!cJSON_IsObject(md)) {
                bad(e, "metadata", "Input should be a valid dictionary");
                goto fail;
            }
            if (!only_keys(md, "metadata", keys, e)) goto fail;
            const cJSON *u = srv_field(md, "user_id");
            if (u && !cJSON_IsString(u)) {
                bad(e, "metadata.user_id", "Input should be a valid string");
                goto fail;
            }
        }
        const cJSON *st = srv_field(root, "service_tier");
        if (st && (!cJSON_IsString(st) || (strcmp(st->valuestring, "auto") &&
                                           strcmp(st->valuestring, "standard_only")))) {
            bad(e, "service_tier", "Input should be 'auto' or 'standard_only'");
            goto fail;
        }
    }
    const cJSON *tools = srv_field(root, "tools");
    if (tools && !tools_of(&j, tools, out, e)) goto fail;
    const cJSON *tc = srv_field(root, "tool_choice");
    if (tc && !tool_choice_of(&j, tc, out, e)) goto fail;
    const cJSON *oc = srv_field(root, "output_config");
    if (oc && !output_config_of(&j, oc, out, e)) goto fail;
    /* the template decides what enable_thinking means; sent (on or off:
     * Anthropic's default is off) to a template that marks thoughts, not
     * to one that has none to turn on */
    if (lim->outfmt.reasoning_format != SRV_REASONING_NONE) {
        cJSON *kw = add(&j, out, "chat_template_kwargs", cJSON_CreateObject());
        add(&j, kw, "enable_thinking", cJSON_CreateBool(o->thinking));
        if (budget >= 0) add(&j, out, "reasoning_budget", cJSON_CreateNumber((double)budget));
    }
    if (j.oom) {
        srv_oom(e);
        goto fail;
    }
    return out;
fail:
    cJSON_Delete(out);
    return NULL;
}

bool srv_anthropic_parse(const struct srv_limits *lim, const char *body, size_t len,
                         bool count_only, struct srv_req *out, struct srv_anth_opts *o,
                         struct srv_err *e) {
    memset(out, 0, sizeof(*out));
    memset(e, 0, sizeof(*e));
    memset(o, 0, sizeof(*o));
    out->kind = SRV_KIND_CHAT;
    if (len == 0) return srv_bad(e, NULL, "the request body is empty: expected a JSON object");
    if (!srv_json_prescan(body, len, e)) return false;
    const char *end = NULL;
    cJSON *root = srv_json_parse(body, len, &end);
    if (!root) {
        size_t off = (end && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        return srv_bad(e, NULL, "There was an issue with your request: malformed JSON near byte "
                       "%zu", off);
    }
    bool ok = false;
    cJSON *chat = NULL;
    if (end)
        for (const char *p = end; p < body + len; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
                srv_bad(e, NULL, "There was an issue with your request: trailing data after the "
                        "JSON object at byte %zu", (size_t)(p - body));
                goto out;
            }
    if (!cJSON_IsObject(root)) {
        srv_bad(e, NULL, "the request body must be a JSON object, got %s", srv_type_name(root));
        goto out;
    }
    chat = translate(lim, root, count_only, o, e);
    if (!chat) goto out;
    if (!srv_parse_request_json(lim, SRV_KIND_CHAT, chat, out, e)) goto out;
    snprintf(out->ignored, sizeof(out->ignored), "%s", o->ignored);
    if (!count_only) {
        /* the rest of the context, cut to what was asked (file header) */
        if (out->max_tokens > o->max_tokens) out->max_tokens = (int32_t)o->max_tokens;
        /* the tokens tell which stop sequence matched (file header) */
        if (out->n_stop > 0) out->logprobs = true;
    }
    ok = true;
out:
    cJSON_Delete(chat);
    cJSON_Delete(root);
    if (!ok) {
        srv_req_free(out);
        out->kind = SRV_KIND_CHAT;
    }
    return ok;
}

// ----------------------------------------------------------------------------
// which stop sequence matched

int srv_anthropic_stop_index(const struct anvil_model *m, const struct srv_tok *toks,
                             int32_t n, char *const *stop, int n_stop) {
    if (!toks || n <= 0 || n_stop <= 0) return -1;
    /* the engine checks its held text after every token and cuts at the
     * earliest match; the held text starts after the last release, which
     * never holds a whole stop string, so the whole text replays it */
    struct sbuf text, piece;
    sb_init(&text);
    sb_init(&piece);
    int found = -1;
    for (int32_t t = 0; t < n && found < 0; t++) {
        if (!srv_token_piece(m, toks[t].token, &piece)) break;
        sb_put(&text, piece.p, piece.len);
        if (text.oom) break;
        size_t best = (size_t)-1;
        for (int i = 0; i < n_stop; i++) {
            const char *hit = memmem(text.p, text.len, stop[i], strlen(stop[i]));
            if (hit && (size_t)(hit - text.p) < best) {
                best = (size_t)(hit - text.p);
                found = i;
            }
        }
    }
    sb_free(&text);
    sb_free(&piece);
    return found;
}

// ----------------------------------------------------------------------------
// answers

static void msg_id(struct sbuf *b, const struct srv_gen_view *v) {
    const char *id = v->ri && v->ri->id ? v->ri->id : "";
    const char *dash = strchr(id, '-');
    const char *tail = dash ? dash + 1 : id;
    sb_puts(b, "\"msg_");
    for (const char *p = tail; *p; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))
            sb_put(b, p, 1);
    sb_puts(b, "\"");
}

static void tool_id(struct sbuf *b, const char *id) {
    const char *tail = id && !strncmp(id, "call_", 5) ? id + 5 : (id ? id : "");
    sb_puts(b, "\"toolu_");
    for (const char *p = tail; *p; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))
            sb_put(b, p, 1);
    sb_puts(b, "\"");
}

static void model_str(struct sbuf *b, const struct srv_gen_view *v) {
    const char *m = v->ri && v->ri->model_id ? v->ri->model_id : "";
    sb_json_str(b, m, strlen(m));
}

/* stop_reason and stop_sequence of the choice. */
static void stop_fields(struct sbuf *b, const struct srv_gen_view *v,
                        const struct srv_choice *ch, const struct srv_tok *toks, int32_t n_toks) {
    const char *reason = "end_turn";
    int si = -1;
    const char *f = ch ? ch->finish : NULL;
    if (f && !strcmp(f, "tool_calls")) reason = "tool_use";
    else if (f && !strcmp(f, "length")) reason = "max_tokens";
    else if (ch && ch->engine_finish == ANVIL_FINISH_STOP && v->req && v->req->n_stop > 0) {
        si = srv_anthropic_stop_index(v->ri ? v->ri->model : NULL, toks, n_toks, v->req->stop,
                                      v->req->n_stop);
        if (si >= 0) reason = "stop_sequence";
    }
    sb_puts(b, "\"stop_reason\":");
    sb_json_str(b, reason, strlen(reason));
    sb_puts(b, ",\"stop_sequence\":");
    if (si >= 0) sb_json_str(b, v->req->stop[si], strlen(v->req->stop[si]));
    else sb_puts(b, "null");
}

static void usage_obj(struct sbuf *b, const struct srv_usage *u) {
    int32_t cached = u->n_cached > 0 && u->n_cached <= u->n_prompt ? u->n_cached : 0;
    sb_printf(b, "{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,"
              "\"cache_read_input_tokens\":%d,\"output_tokens\":%d}",
              (int)(u->n_prompt - cached), (int)cached, (int)u->n_gen);
}

/* JSON text that cJSON printed, written so that any parser takes it:
 * bytes that are not UTF-8 become U+FFFD and raw control characters in
 * strings become \u escapes (cJSON lets both through; a byte-level token
 * can be half a character). Escapes are left alone: cJSON refused the
 * text if one was invalid. */
static void put_clean_json(struct sbuf *b, const char *s, size_t n) {
    bool str = false, esc = false;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x80) {
            size_t k = sb_utf8_len((const unsigned char *)s + i, n - i);
            if (k == 0) {
                sb_puts(b, "\xEF\xBF\xBD");
                k = 1;
            } else {
                sb_put(b, s + i, k);
            }
            i += k;
            esc = false;
            continue;
        }
        if (str) {
            if (esc) esc = false;
            else if (ch == '\\') esc = true;
            else if (ch == '"') str = false;
            else if (ch < 0x20) {
                sb_printf(b, "\\u%04x", ch);
                i++;
                continue;
            }
        } else if (ch == '"') {
            str = true;
        }
        sb_put(b, s + i, 1);
        i++;
    }
}

/* A call's arguments as an object: the text when it is one, else {} (a
 * call cut short by max_tokens). */
static void call_input(struct sbuf *b, const struct srv_call_out *c) {
    cJSON *a = c->args ? srv_json_parse(c->args, c->n_args, NULL) : NULL;
    /* printed again: cJSON stops at the end of the first value, so the
     * text itself may carry more after it */
    char *t = cJSON_IsObject(a) ? cJSON_PrintUnformatted(a) : NULL;
    if (t) put_clean_json(b, t, strlen(t));
    else sb_puts(b, "{}");
    free(t);
    cJSON_Delete(a);
}

static void full(struct sbuf *b, const struct srv_gen_view *v, const struct srv_choice *choices,
                 int n_choices, const struct srv_usage *u, bool thinking) {
    const struct srv_choice *ch = n_choices > 0 ? &choices[0] : NULL;
    sb_puts(b, "{\"id\":");
    msg_id(b, v);
    sb_puts(b, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    model_str(b, v);
    sb_puts(b, ",\"content\":[");
    bool first = true;
    if (ch && thinking && ch->n_reasoning > 0) {
        sb_puts(b, "{\"type\":\"thinking\",\"thinking\":");
        sb_json_str(b, ch->reasoning, ch->n_reasoning);
        sb_puts(b, ",\"signature\":\"\"}");
        first = false;
    }
    if (ch && ch->n_content > 0) {
        if (!first) sb_puts(b, ",");
        sb_puts(b, "{\"type\":\"text\",\"text\":");
        sb_json_str(b, ch->content, ch->n_content);
        sb_puts(b, "}");
        first = false;
    }
    for (int i = 0; ch && i < ch->n_calls; i++) {
        if (!first) sb_puts(b, ",");
        sb_puts(b, "{\"type\":\"tool_use\",\"id\":");
        tool_id(b, ch->calls[i].id);
        sb_puts(b, ",\"name\":");
        sb_json_str(b, ch->calls[i].name, strlen(ch->calls[i].name));
        sb_puts(b, ",\"input\":");
        call_input(b, &ch->calls[i]);
        sb_puts(b, "}");
        first = false;
    }
    sb_puts(b, "],");
    stop_fields(b, v, ch, ch ? ch->toks : NULL, ch ? ch->n_toks : 0);
    sb_puts(b, ",\"usage\":");
    usage_obj(b, u);
    sb_puts(b, "}");
}

static void full_plain(struct sbuf *b, const struct srv_gen_view *v,
                       const struct srv_choice *choices, int n_choices,
                       const struct srv_usage *u) {
    full(b, v, choices, n_choices, u, false);
}

static void full_thinking(struct sbuf *b, const struct srv_gen_view *v,
                          const struct srv_choice *choices, int n_choices,
                          const struct srv_usage *u) {
    full(b, v, choices, n_choices, u, true);
}

// ----------------------------------------------------------------------------
// the event stream

enum blk { BLK_NONE = 0, BLK_TEXT, BLK_THINKING, BLK_TOOL };

struct anth_state {
    int n_blocks;   /* blocks started */
    enum blk open;  /* the open block's kind */
    struct srv_tok *recs; /* (cap,) tokens of the parts so far (stop sequences) */
    int32_t n_toks, cap;
};

static void *make_state(void) { return calloc(1, sizeof(struct anth_state)); }

static void free_state(void *p) {
    struct anth_state *st = p;
    if (!st) return;
    free(st->recs);
    free(st);
}

static void event(struct sbuf *b, const char *type) {
    sb_puts(b, "event: ");
    sb_puts(b, type);
    sb_puts(b, "\ndata: ");
}

static void close_block(struct sbuf *b, struct anth_state *st) {
    if (st->open == BLK_NONE) return;
    if (st->open == BLK_THINKING) {
        event(b, "content_block_delta");
        sb_printf(b, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":"
                  "\"signature_delta\",\"signature\":\"\"}}\n\n", st->n_blocks - 1);
    }
    event(b, "content_block_stop");
    sb_printf(b, "{\"type\":\"content_block_stop\",\"index\":%d}\n\n", st->n_blocks - 1);
    st->open = BLK_NONE;
}

static void open_block(struct sbuf *b, struct anth_state *st, enum blk k,
                       const struct srv_part *p) {
    close_block(b, st);
    event(b, "content_block_start");
    sb_printf(b, "{\"type\":\"content_block_start\",\"index\":%d,\"content_block\":",
              st->n_blocks);
    if (k == BLK_TEXT) {
        sb_puts(b, "{\"type\":\"text\",\"text\":\"\"}");
    } else if (k == BLK_THINKING) {
        sb_puts(b, "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}");
    } else {
        sb_puts(b, "{\"type\":\"tool_use\",\"id\":");
        tool_id(b, p->id);
        sb_puts(b, ",\"name\":");
        const char *name = p->name ? p->name : "";
        sb_json_str(b, name, strlen(name));
        sb_puts(b, ",\"input\":{}}");
    }
    sb_puts(b, "}\n\n");
    st->open = k;
    st->n_blocks++;
}

static void delta(struct sbuf *b, struct anth_state *st, const char *type, const char *field,
                  const char *text, size_t n) {
    event(b, "content_block_delta");
    sb_printf(b, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"%s\","
              "\"%s\":", st->n_blocks - 1, type, field);
    sb_json_str(b, text, n);
    sb_puts(b, "}}\n\n");
}

static void stream_start(struct sbuf *b, const struct srv_gen_view *v) {
    event(b, "message_start");
    sb_puts(b, "{\"type\":\"message_start\",\"message\":{\"id\":");
    msg_id(b, v);
    sb_puts(b, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    model_str(b, v);
    sb_printf(b, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{"
              "\"input_tokens\":%d,\"cache_creation_input_tokens\":0,"
              "\"cache_read_input_tokens\":0,\"output_tokens\":0}}}\n\n",
              v->req ? (int)v->req->n_prompt : 0);
    event(b, "ping");
    sb_puts(b, "{\"type\": \"ping\"}\n\n");
}

/* Keep the token records of the parts: stop_index replays them when the
 * end's choice has none. */
static void keep_toks(struct anth_state *st, const struct srv_tok *toks, int32_t n) {
    if (!st || !toks || n <= 0) return;
    if (st->n_toks + n > st->cap) {
        int32_t cap = st->cap ? st->cap : 64;
        while (cap < st->n_toks + n) cap *= 2;
        struct srv_tok *r = realloc(st->recs, (size_t)cap * sizeof(*r));
        if (!r) return;
        st->recs = r;
        st->cap = cap;
    }
    for (int32_t i = 0; i < n; i++) {
        st->recs[st->n_toks + i] = (struct srv_tok){.token = toks[i].token};
    }
    st->n_toks += n;
}

static void stream_part(struct sbuf *b, const struct srv_gen_view *v, int choice,
                        const struct srv_part *p, const struct srv_tok *toks, int32_t n_toks,
                        bool thinking) {
    struct anth_state *st = v->state;
    if (!st || choice != 0) return;
    keep_toks(st, toks, n_toks);
    switch (p->kind) {
    case SRV_PART_CONTENT:
        if (p->n == 0) return;
        if (st->open != BLK_TEXT) open_block(b, st, BLK_TEXT, p);
        delta(b, st, "text_delta", "text", p->text, p->n);
        break;
    case SRV_PART_REASONING:
        if (!thinking || p->n == 0) return; /* thoughts not asked for */
        if (st->open != BLK_THINKING) open_block(b, st, BLK_THINKING, p);
        delta(b, st, "thinking_delta", "thinking", p->text, p->n);
        break;
    case SRV_PART_CALL_BEGIN:
        open_block(b, st, BLK_TOOL, p);
        break;
    case SRV_PART_CALL_ARGS:
        if (st->open != BLK_TOOL || p->n == 0) return;
        delta(b, st, "input_json_delta", "partial_json", p->text, p->n);
        break;
    case SRV_PART_CALL_END:
        if (st->open == BLK_TOOL) close_block(b, st);
        break;
    }
}

static void stream_part_plain(struct sbuf *b, const struct srv_gen_view *v, int choice,
                              const struct srv_part *p, const struct srv_tok *toks,
                              int32_t n_toks) {
    stream_part(b, v, choice, p, toks, n_toks, false);
}

static void stream_part_thinking(struct sbuf *b, const struct srv_gen_view *v, int choice,
                                 const struct srv_part *p, const struct srv_tok *toks,
                                 int32_t n_toks) {
    stream_part(b, v, choice, p, toks, n_toks, true);
}

static void stream_error(struct sbuf *b, const struct srv_gen_view *v, const struct srv_err *e) {
    (void)v;
    event(b, "error");
    fmt_error_obj(b, e);
    sb_puts(b, "\n\n");
}

static void stream_end(struct sbuf *b, const struct srv_gen_view *v,
                       const struct srv_choice *choices, int n_choices,
                       const struct srv_usage *u) {
    struct anth_state *st = v->state;
    if (st) close_block(b, st);
    const struct srv_choice *ch = n_choices > 0 ? &choices[0] : NULL;
    const struct srv_tok *toks = ch ? ch->toks : NULL;
    int32_t n_toks = ch ? ch->n_toks : 0;
    if ((!toks || n_toks <= 0) && st) {
        toks = st->recs;
        n_toks = st->n_toks;
    }
    event(b, "message_delta");
    sb_puts(b, "{\"type\":\"message_delta\",\"delta\":{");
    stop_fields(b, v, ch, toks, n_toks);
    sb_puts(b, "},\"usage\":");
    usage_obj(b, u);
    sb_puts(b, "}\n\n");
    event(b, "message_stop");
    sb_puts(b, "{\"type\":\"message_stop\"}\n\n");
}

const struct srv_dialect srv_dialect_anthropic = {
    .name = "anthropic",
    .stream_ctype = "text/event-stream",
    .error = anth_error,
    .make_state = make_state,
    .free_state = free_state,
    .stream_start = stream_start,
    .stream_part = stream_part_plain,
    .stream_error = stream_error,
    .stream_end = stream_end,
    .full = full_plain,
};

const struct srv_dialect srv_dialect_anthropic_thinking = {
    .name = "anthropic",
    .stream_ctype = "text/event-stream",
    .error = anth_error,
    .make_state = make_state,
    .free_state = free_state,
    .stream_start = stream_start,
    .stream_part = stream_part_thinking,
    .stream_error = stream_error,
    .stream_end = stream_end,
    .full = full_thinking,
};

// ----------------------------------------------------------------------------
// the routes

enum MHD_Result srv_post_messages(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                  const char *url) {
    (void)url;
    struct srv_req req;
    struct srv_err err;
    struct srv_anth_opts o;
    if (!srv_anthropic_parse(&s->lim, k->body ? k->body : "", k->body_len, false, &req, &o,
                             &err))
        return srv_send_dialect_err(s, c, &srv_dialect_anthropic, &err);
    return srv_generate(s, c, k, &req,
                        o.thinking ? &srv_dialect_anthropic_thinking : &srv_dialect_anthropic);
}

enum MHD_Result srv_post_count_tokens(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                      const char *url) {
    (void)url;
    struct srv_req req;
    struct srv_err err;
    struct srv_anth_opts o;
    if (!srv_anthropic_parse(&s->lim, k->body ? k->body : "", k->body_len, true, &req, &o,
                             &err))
        return srv_send_dialect_err(s, c, &srv_dialect_anthropic, &err);
    struct sbuf b;
    sb_init(&b);
    sb_printf(&b, "{\"input_tokens\":%d}", (int)req.n_prompt);
    srv_req_free(&req);
    return srv_send_sbuf(s, c, 200, "application/json", &b,
                         o.ignored[0] ? "X-Anvil-Ignored-Fields" : NULL,
                         o.ignored[0] ? o.ignored : NULL);
}
