/*
 * request.c - JSON body of /v1/completions and /v1/chat/completions ->
 * struct srv_req, with every field checked for type and range.
 *
 * Reference: the OpenAI API reference (Chat Completions, Completions).
 * Rules kept here:
 *   - a JSON null is the same as an absent field;
 *   - numbers are never accepted as strings ("10" is a type error, the
 *     bug llama-server b4748 had), integers must be integral;
 *   - unknown top-level fields are rejected (OpenAI answers "Unrecognized
 *     request argument supplied"), and known fields anvil cannot honour
 *     (logit_bias, echo, best_of > 1, n > 1, the deprecated functions,
 *     ...) get a clear 400 instead of being ignored silently;
 *   - structured output: response_format (text, json_object,
 *     json_schema), the extensions grammar (GBNF) and regex, and tool
 *     calls (tools.c) are compiled here, before anything is queued, so a
 *     schema anvil cannot enforce is a 400 that names the problem; at
 *     most one of them per request. Compiled constraints are kept in a
 *     small cache keyed by their source (srv_ccache), so a schema sent
 *     with every request is compiled once and its masks are shared;
 *   - the prompt (after the chat template) plus max_tokens must fit in the
 *     context and in the KV cache, or the request is a 400 here rather
 *     than a request the engine can never run;
 *   - prompt token ids are checked against the vocabulary, so one bad
 *     request fails alone (llama-server b4748 failed every slot).
 * Defaults are OpenAI's: temperature 1, top_p 1, no top_k/min_p, max_tokens
 * 16 for completions and "the rest of the context" for chat.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/srv_int.h"

void srv_err_set(struct srv_err *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
}

/* A 400 invalid_request_error naming `param`; returns false. */
static bool bad(struct srv_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(struct srv_err *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    e->code = NULL;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return false;
}

void srv_req_free(struct srv_req *r) {
    if (!r) return;
    anvil_constraint_free(r->constraint);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof(*r));
}

// ----------------------------------------------------------------------------
// typed field getters: absent and null are "not present"

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static bool get_bool(const cJSON *o, const char *key, bool *out, bool *present,
                     struct srv_err *e) {
    const cJSON *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!cJSON_IsBool(v)) return bad(e, key, "'%s' must be a boolean, got %s", key, type_name(v));
    *out = cJSON_IsTrue(v);
    return true;
}

/* Integer in [lo, hi]. JSON numbers are doubles in cJSON; |v| <= 2^53 is
 * exact, so integrality is checked on the double. */
static bool get_int(const cJSON *o, const char *key, double lo, double hi, long long *out,
                    bool *present, struct srv_err *e) {
    const cJSON *v = field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!cJSON_IsNumber(v))
        return bad(e, key, "'%s' must be an integer, got %s", key, type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return bad(e, key, "'%s' must be an integer, got %g", key, d);
    if (d < lo || d > hi)
        return bad(e, key, "'%s' must be in [%.0f, %.0f], got %.0f", key, lo, hi, d);
    *out = (long long)d;
    return true;
}

static bool get_num(const cJSON *o, const char *key, double lo, double hi, float *out,
                    struct srv_err *e) {
    const cJSON *v = field(o, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v)) return bad(e, key, "'%s' must be a number, got %s", key, type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi)
        return bad(e, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, d);
    *out = (float)d;
    return true;
}

// ----------------------------------------------------------------------------
// accepted fields

enum fld_rule {
    FLD_USED,     /* parsed below */
    FLD_IGNORED,  /* accepted and ignored (metadata, user, ...) */
};

struct fld {
    const char *name;
    unsigned kinds; /* bit 0 chat, bit 1 completion */
    enum fld_rule rule;
};

#define CH 1u
#define CO 2u
static const struct fld fields[] = {
    {"model", CH | CO, FLD_USED},
    {"messages", CH, FLD_USED},
    {"prompt", CO, FLD_USED},
    {"max_tokens", CH | CO, FLD_USED},
    {"max_completion_tokens", CH, FLD_USED},
    {"temperature", CH | CO, FLD_USED},
    {"top_p", CH | CO, FLD_USED},
    {"top_k", CH | CO, FLD_USED},
    {"min_p", CH | CO, FLD_USED},
    {"seed", CH | CO, FLD_USED},
    {"stop", CH | CO, FLD_USED},
    {"presence_penalty", CH | CO, FLD_USED},
    {"frequency_penalty", CH | CO, FLD_USED},
    {"logprobs", CH | CO, FLD_USED},
    {"top_logprobs", CH, FLD_USED},
    {"n", CH | CO, FLD_USED},
    {"stream", CH | CO, FLD_USED},
    {"stream_options", CH | CO, FLD_USED},
    {"ignore_eos", CH | CO, FLD_USED},
    {"spec", CH | CO, FLD_USED},
    {"spec_k", CH | CO, FLD_USED},
    {"logit_bias", CH | CO, FLD_USED},
    {"response_format", CH | CO, FLD_USED},
    {"grammar", CH | CO, FLD_USED},
    {"regex", CH | CO, FLD_USED},
    {"tools", CH, FLD_USED},
    {"tool_choice", CH, FLD_USED},
    {"functions", CH, FLD_USED},
    {"function_call", CH, FLD_USED},
    {"echo", CO, FLD_USED},
    {"best_of", CO, FLD_USED},
    {"suffix", CO, FLD_USED},
    {"user", CH | CO, FLD_IGNORED},
    {"metadata", CH, FLD_IGNORED},
    {"store", CH, FLD_IGNORED},
    {"service_tier", CH | CO, FLD_IGNORED},
    {"parallel_tool_calls", CH, FLD_IGNORED},
};

static bool check_keys(const cJSON *root, unsigned kind_bit, struct srv_err *e) {
    for (const cJSON *c = root->child; c; c = c->next) {
        bool ok = false;
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            if ((fields[i].kinds & kind_bit) && !strcmp(fields[i].name, c->string)) {
                ok = true;
                break;
            }
        if (!ok) {
            char name[48];
            snprintf(name, sizeof(name), "%s", c->string);
            return bad(e, name, "Unrecognized request argument supplied: %s", name);
        }
    }
    return true;
}

/* Fields anvil knows but cannot honour: fine when absent, null or neutral. */
static bool check_unsupported(const cJSON *root, enum srv_kind kind, struct srv_err *e) {
    const cJSON *v;
    if ((v = field(root, "logit_bias")) != NULL) {
        if (!cJSON_IsObject(v))
            return bad(e, "logit_bias", "'logit_bias' must be an object, got %s", type_name(v));
        if (v->child) return bad(e, "logit_bias", "'logit_bias' is not supported by anvil");
    }
    if (kind == SRV_KIND_CHAT) {
        static const char *const old[] = {"functions", "function_call"};
        for (int i = 0; i < 2; i++)
            if ((v = field(root, old[i])) != NULL && !(cJSON_IsArray(v) && !v->child))
                return bad(e, old[i], "'%s' is deprecated and not supported by anvil: use "
                           "'tools' and 'tool_choice'", old[i]);
    } else {
        bool echo = false;
        if (!get_bool(root, "echo", &echo, NULL, e)) return false;
        if (echo) return bad(e, "echo", "'echo' is not supported by anvil");
        long long best_of = 1;
        if (!get_int(root, "best_of", 0, 20, &best_of, NULL, e)) return false;
        if (best_of != 1) return bad(e, "best_of", "'best_of' must be 1 with anvil");
        if ((v = field(root, "suffix")) != NULL) {
            if (!cJSON_IsString(v))
                return bad(e, "suffix", "'suffix' must be a string, got %s", type_name(v));
            if (v->valuestring[0]) return bad(e, "suffix", "'suffix' is not supported by anvil");
        }
    }
    return true;
}

// ----------------------------------------------------------------------------
// stop strings

static bool add_stop(struct srv_req *r, const cJSON *s, struct srv_err *e) {
    if (!cJSON_IsString(s))
        return bad(e, "stop", "'stop' must be a string or an array of strings, got %s",
                   type_name(s));
    size_t n = strlen(s->valuestring);
    if (n == 0) return bad(e, "stop", "'stop' strings must not be empty");
    if (n > SRV_MAX_STOP_LEN)
        return bad(e, "stop", "'stop' strings must be at most %d bytes", SRV_MAX_STOP_LEN);
    if (r->n_stop >= SRV_MAX_STOP)
        return bad(e, "stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
    char *c = strdup(s->valuestring);
    if (!c) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    r->stop[r->n_stop++] = c;
    return true;
}

static bool parse_stop(const cJSON *root, struct srv_req *r, struct srv_err *e) {
    const cJSON *v = field(root, "stop");
    if (!v) return true;
    if (cJSON_IsString(v)) return add_stop(r, v, e);
    if (!cJSON_IsArray(v))
        return bad(e, "stop", "'stop' must be a string or an array of strings, got %s",
                   type_name(v));
    for (const cJSON *c = v->child; c; c = c->next)
        if (!add_stop(r, c, e)) return false;
    return true;
}

// ----------------------------------------------------------------------------
// prompt: chat messages through the template, or a completion prompt

/* Tokenize text into r->prompt (at most lim->n_ctx tokens + the overflow
 * count). */
static bool tokenize_into(const struct srv_limits *lim, const char *text, size_t len,
                          struct srv_req *r, const char *param, struct srv_err *e) {
    int32_t cap = lim->n_ctx;
    r->prompt = malloc((size_t)cap * sizeof(anvil_token));
    if (!r->prompt) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    int32_t n = anvil_tokenize(lim->model, text, len, r->prompt, cap, true, true);
    if (n == INT32_MIN) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    if (n < 0) {
        srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded", param,
                    "This model's maximum context length is %d tokens. However, your prompt "
                    "is %lld tokens long.",
                    (int)lim->n_ctx, -(long long)n);
        return false;
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
 * (joined), or null for an assistant turn. Returns malloc'd text. */
static char *msg_content(const cJSON *msg, int idx, bool assistant, struct srv_err *e) {
    char param[48];
    snprintf(param, sizeof(param), "messages[%d].content", idx);
    const cJSON *c = field(msg, "content");
    if (!c) {
        if (!assistant) {
            bad(e, param, "'%s' is required", param);
            return NULL;
        }
        return strdup("");
    }
    if (cJSON_IsString(c)) return strdup(c->valuestring);
    if (!cJSON_IsArray(c)) {
        bad(e, param, "'%s' must be a string or an array of content parts, got %s", param,
            type_name(c));
        return NULL;
    }
    struct sbuf b;
    sb_init(&b);
    sb_reserve(&b, 0);
    for (const cJSON *p = c->child; p; p = p->next) {
        const cJSON *t = cJSON_IsObject(p) ? field(p, "type") : NULL;
        const cJSON *txt = cJSON_IsObject(p) ? field(p, "text") : NULL;
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0 || !cJSON_IsString(txt)) {
            sb_free(&b);
            bad(e, param, "'%s': only {\"type\": \"text\", \"text\": ...} parts are supported",
                param);
            return NULL;
        }
        sb_puts(&b, txt->valuestring);
    }
    if (b.oom) {
        sb_free(&b);
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    return sb_take(&b, NULL);
}

/* An assistant turn's tool_calls, shown to the model the way it is asked
 * to write a call ({"name", "arguments"}, tools.c), one per line after
 * the turn's text. Returns malloc'd text, NULL with e set on error. */
static char *calls_text(const cJSON *calls, int idx, char *content, struct srv_err *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].tool_calls", idx);
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, content);
    int k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        const cJSON *fn = cJSON_IsObject(c) ? field(c, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? field(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? field(fn, "arguments") : NULL;
        if (!cJSON_IsString(name) || (args && !cJSON_IsString(args))) {
            sb_free(&b);
            bad(e, param, "'%s[%d]' must be {\"id\", \"type\": \"function\", \"function\": "
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
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
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
    const cJSON *id = field(m, "tool_call_id");
    if (!cJSON_IsString(id)) {
        bad(e, param, "'%s' must be a string (the id of the call this result answers)", param);
        return NULL;
    }
    struct sbuf b;
    sb_init(&b);
    sb_printf(&b, "Result of the function call %.64s:\n%s", id->valuestring, content);
    if (b.oom) {
        sb_free(&b);
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    return sb_take(&b, NULL);
}

static bool parse_messages(const struct srv_limits *lim, const cJSON *root,
                           const struct srv_tools *tools, struct srv_req *r, struct srv_err *e) {
    const cJSON *msgs = field(root, "messages");
    if (!msgs) return bad(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs))
        return bad(e, "messages", "'messages' must be an array, got %s", type_name(msgs));
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return bad(e, "messages", "'messages' must not be empty");
    /* one more slot: the tools' system turn when there is no system message */
    int n_msgs = n;
    struct anvil_chat_msg *cm = calloc((size_t)n + 1, sizeof(*cm));
    char **texts = calloc((size_t)n + 1, sizeof(*texts));
    bool ok = false;
    if (!cm || !texts) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char param[48];
        snprintf(param, sizeof(param), "messages[%d]", i);
        if (!cJSON_IsObject(m)) {
            bad(e, param, "'%s' must be an object, got %s", param, type_name(m));
            goto fail;
        }
        const cJSON *role = field(m, "role");
        if (!cJSON_IsString(role)) {
            snprintf(param, sizeof(param), "messages[%d].role", i);
            bad(e, param, "'%s' must be a string", param);
            goto fail;
        }
        bool is_tool = !strcmp(role->valuestring, "tool");
        cm[i].role = is_tool ? "user" : msg_role(role->valuestring);
        if (!cm[i].role) {
            snprintf(param, sizeof(param), "messages[%d].role", i);
            bad(e, param, "'%s' must be one of system, user, assistant, tool, developer; got "
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
            bad(e, param, "'%s': field '%.40s' is not supported", param, k->string);
            goto fail;
        }
        const cJSON *name = field(m, "name");
        if (name && !cJSON_IsString(name)) {
            snprintf(param, sizeof(param), "messages[%d].name", i);
            bad(e, param, "'%s' must be a string", param);
            goto fail;
        }
        texts[i] = msg_content(m, i, assistant, e);
        if (texts[i] && (calls || is_tool)) {
            char *t = calls ? calls_text(calls, i, texts[i], e) : tool_result_text(m, i, texts[i], e);
            free(texts[i]);
            texts[i] = t;
        }
        if (!texts[i]) {
            if (e->status == 0) srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        cm[i].content = texts[i];
    }
    if (tools->mode != SRV_TOOLS_NONE) {
        /* the functions go into the system turn: appended to the caller's,
         * or a system turn of their own in front */
        char *tt = srv_tools_prompt(tools);
        if (!tt) {
            srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
            goto fail;
        }
        if (!strcmp(cm[0].role, "system")) {
            size_t la = strlen(texts[0]), lb = strlen(tt);
            char *joined = malloc(la + lb + 3);
            if (joined) {
                memcpy(joined, texts[0], la);
                memcpy(joined + la, "\n\n", 2);
                memcpy(joined + la + 2, tt, lb + 1);
            }
            free(tt);
            if (!joined) {
                srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
                goto fail;
            }
            free(texts[0]);
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
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    int32_t nt = anvil_chat_tokenize(lim->model, cm, (size_t)n_msgs, true, r->prompt, lim->n_ctx);
    if (nt == INT32_MIN) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    if (nt < 0) {
        srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded", "messages",
                    "This model's maximum context length is %d tokens. However, your messages "
                    "are %lld tokens long.",
                    (int)lim->n_ctx, -(long long)nt);
        goto fail;
    }
    r->n_prompt = nt;
    ok = true;
fail:
    if (texts)
        for (int j = 0; j < n + 1; j++) free(texts[j]);
    free(texts);
    free(cm);
    return ok;
}

static bool parse_token_ids(const struct srv_limits *lim, const cJSON *arr, struct srv_req *r,
                            struct srv_err *e) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return bad(e, "prompt", "'prompt' must not be empty");
    if (n >= lim->n_ctx) {
        srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                    "This model's maximum context length is %d tokens. However, your prompt "
                    "is %d tokens long.",
                    (int)lim->n_ctx, n);
        return false;
    }
    r->prompt = malloc((size_t)n * sizeof(anvil_token));
    if (!r->prompt) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return false;
    }
    int i = 0;
    for (const cJSON *c = arr->child; c; c = c->next, i++) {
        if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) ||
            c->valuedouble != floor(c->valuedouble))
            return bad(e, "prompt", "'prompt[%d]' must be an integer token id, got %s", i,
                       cJSON_IsNumber(c) ? "a fraction" : type_name(c));
        if (c->valuedouble < 0 || c->valuedouble >= lim->n_vocab)
            return bad(e, "prompt", "'prompt[%d]' = %.0f is not a token id: the vocabulary has "
                       "%d tokens", i, c->valuedouble, (int)lim->n_vocab);
        r->prompt[i] = (anvil_token)c->valuedouble;
    }
    r->n_prompt = n;
    return true;
}

static bool parse_prompt(const struct srv_limits *lim, const cJSON *root, struct srv_req *r,
                         struct srv_err *e) {
    const cJSON *p = field(root, "prompt");
    if (!p) return bad(e, "prompt", "'prompt' is required");
    if (cJSON_IsArray(p)) {
        const cJSON *first = p->child;
        if (!first) return bad(e, "prompt", "'prompt' must not be empty");
        if (cJSON_IsNumber(first)) return parse_token_ids(lim, p, r, e);
        /* a batch of prompts: anvil answers one prompt per request */
        if (first->next)
            return bad(e, "prompt", "batched prompts are not supported: send one prompt per "
                       "request");
        if (cJSON_IsArray(first)) return parse_token_ids(lim, first, r, e);
        p = first;
    }
    if (!cJSON_IsString(p))
        return bad(e, "prompt", "'prompt' must be a string or an array of token ids, got %s",
                   type_name(p));
    return tokenize_into(lim, p->valuestring, strlen(p->valuestring), r, "prompt", e);
}

// ----------------------------------------------------------------------------
// sampling and the rest

static uint64_t random_seed(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t k = atomic_fetch_add(&counter, 1);
    uint64_t mixed = t ^ core_splitmix64(&k);
    return core_splitmix64(&mixed);
}

static bool parse_sampling(const struct srv_limits *lim, const cJSON *root, struct srv_req *r,
                           struct srv_err *e) {
    struct anvil_sampler_params *s = &r->sampling;
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repeat_penalty = 1.0f;
    s->repeat_last_n = 64;
    if (!get_num(root, "temperature", 0.0, 2.0, &s->temperature, e)) return false;
    if (!get_num(root, "top_p", 0.0, 1.0, &s->top_p, e)) return false;
    if (!get_num(root, "min_p", 0.0, 1.0, &s->min_p, e)) return false;
    if (!get_num(root, "presence_penalty", -2.0, 2.0, &s->presence_penalty, e)) return false;
    if (!get_num(root, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty, e)) return false;
    long long v = 0;
    bool present = false;
    if (!get_int(root, "top_k", 0, lim->n_vocab, &v, &present, e)) return false;
    if (present) s->top_k = (int32_t)v;
    if (s->top_p == 0.0f) {
        /* OpenAI accepts top_p 0 (keep only the most likely token); the
         * sampler wants (0, 1], and top_k 1 is the same distribution */
        s->top_p = 1.0f;
        s->top_k = 1;
    }
    /* +-(2^53 - 1): every integer in it is exact in a double (cJSON's
     * numbers), and one past it cannot pass for it: 2^53 + 1 reads as
     * 2^53, which is out of range (schemathesis found 2^53 + 1 accepted
     * when the bound was 2^53) */
    if (!get_int(root, "seed", -9007199254740991.0, 9007199254740991.0, &v, &present, e))
        return false;
    s->seed = present ? (uint64_t)v : lim->default_seed ? lim->default_seed : random_seed();
    char msg[160];
    if (anvil_sampler_params_check(s, msg, sizeof(msg)) != ANVIL_OK)
        return bad(e, NULL, "%s", msg);
    return true;
}

static bool parse_logprobs(const cJSON *root, enum srv_kind kind, struct srv_req *r,
                           struct srv_err *e) {
    long long v = 0;
    bool present = false;
    if (kind == SRV_KIND_COMPLETION) {
        /* legacy completions: logprobs is the number of alternatives, 0..5 */
        if (!get_int(root, "logprobs", 0, 5, &v, &present, e)) return false;
        r->logprobs = present;
        r->top_logprobs = (int32_t)v;
        return true;
    }
    if (!get_bool(root, "logprobs", &r->logprobs, NULL, e)) return false;
    if (!get_int(root, "top_logprobs", 0, ANVIL_MAX_TOP_LOGPROBS, &v, &present, e)) return false;
    if (present && !r->logprobs)
        return bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r->top_logprobs = (int32_t)v;
    return true;
}

// ----------------------------------------------------------------------------
// structured output: response_format, grammar, regex, tool calls

struct cc_ent {
    enum anvil_constraint_kind kind;
    struct anvil_constraint_params p;
    char *text;
    size_t len;
    uint64_t age;
    struct anvil_constraint *c; /* the cache's reference */
};

struct srv_ccache {
    pthread_mutex_t mu;
    struct cc_ent e[SRV_CCACHE_N];
    uint64_t clock;
};

struct srv_ccache *srv_ccache_new(void) {
    struct srv_ccache *c = calloc(1, sizeof(*c));
    if (c) pthread_mutex_init(&c->mu, NULL);
    return c;
}

void srv_ccache_free(struct srv_ccache *c) {
    if (!c) return;
    for (int i = 0; i < SRV_CCACHE_N; i++) {
        free(c->e[i].text);
        anvil_constraint_free(c->e[i].c);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static bool cc_same(const struct cc_ent *x, enum anvil_constraint_kind kind,
                    const struct anvil_constraint_params *p, const char *text, size_t len) {
    return x->c && x->kind == kind && x->p.compact == p->compact && x->p.or_text == p->or_text &&
           x->len == len && !memcmp(x->text, text, len);
}

/* A compiled constraint (a new reference) from the cache or compiled now.
 * Compilation runs outside the lock: two requests with the same new
 * schema may both compile it, and the second copy is simply dropped. */
static anvil_status cc_get(struct srv_ccache *cc, const struct anvil_model *m,
                           enum anvil_constraint_kind kind,
                           const struct anvil_constraint_params *p, const char *text,
                           size_t len, struct anvil_constraint **out, char *err, size_t err_cap) {
    if (cc) {
        pthread_mutex_lock(&cc->mu);
        for (int i = 0; i < SRV_CCACHE_N; i++)
            if (cc_same(&cc->e[i], kind, p, text, len)) {
                cc->e[i].age = ++cc->clock;
                *out = anvil_constraint_retain(cc->e[i].c);
                pthread_mutex_unlock(&cc->mu);
                return ANVIL_OK;
            }
        pthread_mutex_unlock(&cc->mu);
    }
    struct anvil_constraint *c = NULL;
    anvil_status st = anvil_constraint_compile(m, kind, text, len, p, &c, err, err_cap);
    if (st != ANVIL_OK) return st;
    *out = c;
    char *copy = cc ? malloc(len + 1) : NULL;
    if (!copy) return ANVIL_OK; /* not cached */
    memcpy(copy, text, len);
    copy[len] = 0;
    pthread_mutex_lock(&cc->mu);
    struct cc_ent *lru = &cc->e[0];
    for (int i = 0; i < SRV_CCACHE_N; i++) {
        if (cc_same(&cc->e[i], kind, p, text, len)) { /* compiled meanwhile */
            lru = NULL;
            break;
        }
        if (!cc->e[i].c || cc->e[i].age < lru->age) lru = &cc->e[i];
    }
    struct anvil_constraint *old = NULL;
    if (lru) {
        free(lru->text);
        old = lru->c;
        *lru = (struct cc_ent){kind, *p, copy, len, ++cc->clock, anvil_constraint_retain(c)};
        copy = NULL;
    }
    pthread_mutex_unlock(&cc->mu);
    free(copy);
    anvil_constraint_free(old);
    return ANVIL_OK;
}

/* response_format {"type": "json_schema", "json_schema": {...}}: the
 * schema's text (malloc'd; "{}", any JSON value, when it has none) */
static char *json_schema_text(const cJSON *js, struct srv_err *e) {
    const char *P = "response_format.json_schema";
    if (!cJSON_IsObject(js)) {
        bad(e, P, "'%s' must be an object with 'name' and 'schema'", P);
        return NULL;
    }
    for (const cJSON *k = js->child; k; k = k->next)
        if (strcmp(k->string, "name") && strcmp(k->string, "schema") &&
            strcmp(k->string, "strict") && strcmp(k->string, "description")) {
            bad(e, P, "'%s': unknown field '%.40s'", P, k->string);
            return NULL;
        }
    const cJSON *name = field(js, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 64) {
        bad(e, "response_format.json_schema.name",
            "'response_format.json_schema.name' must be a string of 1 to 64 characters");
        return NULL;
    }
    const cJSON *d = field(js, "description");
    if (d && !cJSON_IsString(d)) {
        bad(e, "response_format.json_schema.description",
            "'response_format.json_schema.description' must be a string");
        return NULL;
    }
    bool strict = false;
    if (!get_bool(js, "strict", &strict, NULL, e)) return NULL;
    const cJSON *schema = field(js, "schema");
    if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
        bad(e, "response_format.json_schema.schema",
            "'response_format.json_schema.schema' must be a JSON Schema (an object)");
        return NULL;
    }
    char *t = schema ? cJSON_PrintUnformatted(schema) : strdup("{}");
    if (!t) srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return t;
}

static bool parse_constraint(const struct srv_limits *lim, const cJSON *root,
                             const struct srv_tools *tools, struct srv_req *r,
                             struct srv_err *e) {
    const cJSON *rf = field(root, "response_format");
    const cJSON *gr = field(root, "grammar"), *rx = field(root, "regex");
    enum anvil_constraint_kind kind = 0;
    struct anvil_constraint_params cp = {0};
    const char *param = NULL, *src = NULL;
    char *owned = NULL;
    int n_src = 0;
    if (rf) {
        const cJSON *t = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
        if (!cJSON_IsString(t))
            return bad(e, "response_format",
                       "'response_format' must be an object with a string 'type'");
        for (const cJSON *k = rf->child; k; k = k->next)
            if (strcmp(k->string, "type") && strcmp(k->string, "json_schema"))
                return bad(e, "response_format", "'response_format': unknown field '%.40s'",
                           k->string);
        if (!strcmp(t->valuestring, "json_object")) {
            kind = ANVIL_CONSTRAINT_JSON;
            src = "";
        } else if (!strcmp(t->valuestring, "json_schema")) {
            if (!(owned = json_schema_text(field(rf, "json_schema"), e))) return false;
            kind = ANVIL_CONSTRAINT_JSON_SCHEMA;
            src = owned;
        } else if (strcmp(t->valuestring, "text") != 0) {
            return bad(e, "response_format", "'response_format.type' must be 'text', "
                       "'json_object' or 'json_schema', got '%.40s'", t->valuestring);
        }
        if (kind) {
            param = "response_format";
            n_src++;
        }
    }
    static const char *const ext[2] = {"grammar", "regex"};
    const cJSON *ev[2] = {gr, rx};
    for (int i = 0; i < 2; i++) {
        if (!ev[i]) continue;
        if (!cJSON_IsString(ev[i]))
            return bad(e, ext[i], "'%s' must be a string, got %s", ext[i], type_name(ev[i]));
        kind = i == 0 ? ANVIL_CONSTRAINT_GBNF : ANVIL_CONSTRAINT_REGEX;
        src = ev[i]->valuestring;
        param = ext[i];
        n_src++;
    }
    bool ok = false;
    if (n_src > 1) {
        bad(e, param, "a request takes at most one of 'response_format' (json_object, "
            "json_schema), 'grammar' and 'regex'");
        goto out;
    }
    if (tools->mode != SRV_TOOLS_NONE) {
        if (gr || rx) {
            bad(e, gr ? "grammar" : "regex", "'%s' cannot be combined with tool calls "
                "(tool_choice 'none' turns them off)", gr ? "grammar" : "regex");
            goto out;
        }
        if (kind && tools->mode == SRV_TOOLS_AUTO) {
            bad(e, "response_format", "a JSON 'response_format' with tools needs tool_choice "
                "'none', 'required' or a named function ('auto' decides between a call and "
                "free text)");
            goto out;
        }
        /* required / named: the answer is the call, so response_format
         * (which shapes a content answer) has nothing to apply to */
        free(owned);
        if (!(owned = srv_tools_schema(tools))) {
            srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
            goto out;
        }
        kind = ANVIL_CONSTRAINT_JSON_SCHEMA;
        src = owned;
        param = "tools";
        cp.or_text = tools->mode == SRV_TOOLS_AUTO;
    }
    if (!kind) {
        ok = true;
        goto out;
    }
    char msg[400];
    anvil_status st = cc_get(lim->cc, lim->model, kind, &cp, src, strlen(src), &r->constraint,
                             msg, sizeof(msg));
    if (st == ANVIL_ERR_NOMEM) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (st != ANVIL_OK && !strcmp(param, "tools")) {
        /* the call schema keeps each function's parameters as $defs/t<i> */
        bad(e, "tools", "a function's parameters cannot be enforced (#/$defs/t<i> is "
            "tools[i].function.parameters): %s", msg);
    } else if (st != ANVIL_OK) {
        bad(e, param, "'%s' cannot be enforced: %s", param, msg);
    }
    ok = st == ANVIL_OK;
    if (ok) r->tools = tools->mode;
out:
    free(owned);
    return ok;
}

// ----------------------------------------------------------------------------
// the body before cJSON: UTF-8, nesting depth, U+0000

/* What cJSON does not check or cannot represent, in one pass over the raw
 * bytes:
 *   - JSON text is UTF-8 (RFC 8259 section 8.1); cJSON copies string bytes
 *     through unchecked, so "\xff\xfe" inside a prompt used to reach the
 *     tokenizer;
 *   - arrays and objects nest at most SRV_MAX_JSON_DEPTH levels;
 *   - strings hold no raw control characters (RFC 8259 section 7 wants
 *     them escaped; cJSON lets them through);
 *   - no string holds the escape \u0000: cJSON stores strings NUL
 *     terminated, so "ab\u0000cd" would silently become "ab" (a prompt,
 *     a stop string or a field name cut short).
 * Brackets and escapes are tracked only as far as these checks need: a
 * body that is not JSON at all is left for cJSON to report. */
static bool prescan(const char *body, size_t len, struct srv_err *e) {
    size_t bad_at = sb_utf8_check(body, len);
    if (bad_at < len)
        return bad(e, NULL, "The request body is not valid UTF-8 (byte 0x%02x at offset %zu): "
                   "JSON text must be UTF-8 (RFC 8259, section 8.1)",
                   (unsigned)(unsigned char)body[bad_at], bad_at);
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = body[i];
        if (in_str) {
            if (c == '"') {
                in_str = false;
            } else if ((unsigned char)c < 0x20) {
                /* RFC 8259 section 7; cJSON lets them through, a raw NUL
                 * included */
                return bad(e, NULL, "We could not parse the JSON body of your request: control "
                           "character 0x%02x inside a string at offset %zu must be escaped",
                           (unsigned)c, i);
            } else if (c == '\\' && i + 1 < len) {
                if (body[i + 1] == 'u' && len - i >= 6 && !memcmp(body + i + 2, "0000", 4))
                    return bad(e, NULL, "The JSON body holds the escape \\u0000 (U+0000) at "
                               "offset %zu: anvil does not accept NUL characters in strings",
                               i);
                i++; /* the escaped character cannot end the string */
            }
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > SRV_MAX_JSON_DEPTH)
                return bad(e, NULL, "The JSON body nests arrays and objects deeper than %d "
                           "levels (offset %zu)", SRV_MAX_JSON_DEPTH, i);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return true;
}

bool srv_parse_request(const struct srv_limits *lim, enum srv_kind kind, const char *body,
                       size_t len, struct srv_req *r, struct srv_err *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    r->kind = kind;
    if (len == 0) return bad(e, NULL, "the request body is empty: expected a JSON object");
    if (!prescan(body, len, e)) return false;
    const char *end = NULL;
    /* cJSON resets and sets a global error record on every parse
     * (cJSON.c global_error): parsing is serialised so that concurrent
     * requests do not race on it. A parse takes microseconds. */
    static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&parse_mu);
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    pthread_mutex_unlock(&parse_mu);
    if (!root) {
        /* on failure cJSON points `end` at the error */
        size_t off = (end && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        return bad(e, NULL, "We could not parse the JSON body of your request: malformed JSON "
                   "near byte %zu", off);
    }
    bool ok = false;
    if (end)
        for (const char *p = end; p < body + len; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
                bad(e, NULL, "We could not parse the JSON body of your request: trailing data "
                    "after the JSON object at byte %zu", (size_t)(p - body));
                goto out;
            }
    if (!cJSON_IsObject(root)) {
        bad(e, NULL, "the request body must be a JSON object, got %s", type_name(root));
        goto out;
    }
    if (!check_keys(root, kind == SRV_KIND_CHAT ? CH : CO, e)) goto out;
    if (!check_unsupported(root, kind, e)) goto out;

    const cJSON *model = field(root, "model");
    if (model) {
        if (!cJSON_IsString(model)) {
            bad(e, "model", "'model' must be a string, got %s", type_name(model));
            goto out;
        }
        if (strcmp(model->valuestring, lim->model_id) != 0) {
            /* OpenAI's answer, word for word: 404, param null (what its
             * API sends, e.g. github.com/openai/openai-agents-python
             * issue 458); the openai client raises NotFoundError */
            srv_err_set(e, 404, "invalid_request_error", "model_not_found", NULL,
                        "The model `%.100s` does not exist or you do not have access to it.",
                        model->valuestring);
            goto out;
        }
    }
    long long n = 1;
    if (!get_int(root, "n", 1, 128, &n, NULL, e)) goto out;
    if (n != 1) {
        bad(e, "n", "'n' must be 1: anvil returns one choice per request (send %lld requests "
            "instead)", n);
        goto out;
    }
    if (!get_bool(root, "stream", &r->stream, NULL, e)) goto out;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            bad(e, "stream_options", "'stream_options' must be an object, got %s",
                type_name(so));
            goto out;
        }
        if (!r->stream) {
            bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
            goto out;
        }
        for (const cJSON *k = so->child; k; k = k->next)
            if (strcmp(k->string, "include_usage") != 0) {
                bad(e, "stream_options", "Unrecognized stream option: %.40s", k->string);
                goto out;
            }
        if (!get_bool(so, "include_usage", &r->include_usage, NULL, e)) goto out;
    }
    if (!get_bool(root, "ignore_eos", &r->ignore_eos, NULL, e)) goto out;
    /* extensions: speculative decoding per request */
    const cJSON *spec = field(root, "spec");
    if (spec) {
        const char *sv = cJSON_IsString(spec) ? spec->valuestring : NULL;
        if (sv && !strcmp(sv, "off")) r->spec = ANVIL_SPEC_OFF;
        else if (sv && !strcmp(sv, "ngram")) r->spec = ANVIL_SPEC_NGRAM;
        else if (sv && !strcmp(sv, "draft")) r->spec = ANVIL_SPEC_DRAFT;
        else {
            bad(e, "spec", "'spec' must be one of 'off', 'ngram', 'draft'");
            goto out;
        }
    }
    long long spec_k = 0;
    if (!get_int(root, "spec_k", 1, ANVIL_SPEC_K_MAX, &spec_k, NULL, e)) goto out;
    r->spec_k = (int32_t)spec_k;
    long long max_tokens = 0;
    bool has_max = false, has_mct = false;
    if (!get_int(root, "max_tokens", 1, 1 << 30, &max_tokens, &has_max, e)) goto out;
    if (kind == SRV_KIND_CHAT) {
        long long mct = 0;
        if (!get_int(root, "max_completion_tokens", 1, 1 << 30, &mct, &has_mct, e)) goto out;
        if (has_mct) {
            if (has_max && mct != max_tokens) {
                bad(e, "max_completion_tokens", "'max_tokens' and 'max_completion_tokens' "
                    "disagree");
                goto out;
            }
            max_tokens = mct;
            has_max = true;
        }
    }
    if (!parse_sampling(lim, root, r, e)) goto out;
    if (!parse_logprobs(root, kind, r, e)) goto out;
    if (!parse_stop(root, r, e)) goto out;
    struct srv_tools tools = {.mode = SRV_TOOLS_NONE};
    if (kind == SRV_KIND_CHAT && !srv_tools_parse(root, &tools, e)) goto out;

    if (kind == SRV_KIND_CHAT ? !parse_messages(lim, root, &tools, r, e)
                              : !parse_prompt(lim, root, r, e))
        goto out;
    const char *pname = kind == SRV_KIND_CHAT ? "messages" : "prompt";
    if (r->n_prompt == 0) {
        bad(e, pname, "the prompt is empty");
        goto out;
    }
    /* what one request may hold: the context, and the whole KV cache */
    int64_t limit = lim->n_ctx;
    if (lim->kv_tokens > 0 && lim->kv_tokens < limit) limit = lim->kv_tokens;
    if (r->n_prompt >= limit) {
        srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded", pname,
                    "This model's maximum context length is %lld tokens. However, your prompt "
                    "is %d tokens long.",
                    (long long)limit, (int)r->n_prompt);
        goto out;
    }
    if (has_max) {
        if (r->n_prompt + max_tokens > limit) {
            srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded",
                        "max_tokens",
                        "This model's maximum context length is %lld tokens. However, you "
                        "requested %lld tokens (%d in the prompt, %lld in the completion). "
                        "Please reduce the length of the prompt or completion.",
                        (long long)limit, r->n_prompt + max_tokens, (int)r->n_prompt,
                        max_tokens);
            goto out;
        }
        r->max_tokens = (int32_t)max_tokens;
    } else {
        int64_t rest = limit - r->n_prompt;
        r->max_tokens = (int32_t)(kind == SRV_KIND_COMPLETION && rest > 16 ? 16 : rest);
    }
    /* last: a compile error is only worth the time for a request that is
     * otherwise fine */
    if (!parse_constraint(lim, root, &tools, r, e)) goto out;
    ok = true;
out:
    cJSON_Delete(root);
    if (!ok) {
        enum srv_kind k = r->kind;
        srv_req_free(r);
        r->kind = k;
    }
    return ok;
}
