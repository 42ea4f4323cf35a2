/*
 * api_responses.c - the OpenAI Responses API over the chat machinery.
 *
 * POST /v1/responses: the body is checked field by field with the
 * Responses API's own names and translated into the equivalent
 * chat-completions object (instructions -> a system message, input items
 * -> messages, function_call items -> an assistant turn's tool_calls,
 * function_call_output -> tool messages, tools flattened -> OpenAI function
 * tools, text.format -> response_format, max_output_tokens -> max_tokens),
 * which srv_parse_request_json turns into a request; srv_generate runs it
 * and the dialect below writes the answer as a response object or as the
 * Responses event stream.
 *
 * previous_response_id: a kept response's conversation (the chat messages
 * of its input and output, without its instructions, as OpenAI does) goes
 * in front of the new input. Responses are kept (store, default true) in
 * a process-wide resp_store once they complete; GET returns the response
 * object, DELETE drops it.
 *
 * The dialect's per-request state is the request's resp_ctx: the handler
 * hands it to make_state through a thread-local slot (srv_generate makes
 * the state on the handler's thread, before it returns); a state made
 * without one is a bare context that keeps nothing.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/api_responses.h"

/* ---------------------------------------------------------------------- */
/* the store */

static struct resp_store *g_store;
static pthread_once_t g_store_once = PTHREAD_ONCE_INIT;

static double env_num(const char *name, double dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    double x = strtod(v, &end);
    return (*end || !(x > 0)) ? dflt : x;
}

static void store_init(void) {
    g_store = resp_store_new((int)env_num("ANVIL_RESPONSES_MAX", 1024),
                             (size_t)env_num("ANVIL_RESPONSES_MAX_BYTES", 64.0 * 1024 * 1024),
                             env_num("ANVIL_RESPONSES_TTL", 3600));
}

static struct resp_store *store(void) {
    pthread_once(&g_store_once, store_init);
    return g_store;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------- */
/* the request's context */

enum item_kind { IT_MSG, IT_REASONING, IT_CALL };

struct item {
    enum item_kind kind;
    char id[48];
    struct sbuf text; /* message text, reasoning text, or arguments */
    char call_id[48];
    char name[72];
    bool closed; /* its output_item.done went out (stream) / the call is whole */
};

struct resp_ctx {
    char id[40];           /* "resp_..." */
    uint64_t seed;         /* the items' ids */
    long long created;
    char *head;            /* the response object's fixed fields: "{...," without the end */
    char *conv;            /* the conversation before the answer: chat messages' JSON array */
    bool store;
    bool summary;          /* reasoning.summary asked: the reasoning text is also its summary */
    char ignored[256];     /* unknown top-level fields ignored, comma separated ("" = none) */
    /* the stream */
    long long seq;
    struct item *items;
    int n_items, cap_items;
    int open; /* index of the item whose events are under way, or -1 */
};

static void id_chars(char *out, size_t cap, const char *prefix, uint64_t seed) {
    static const char a[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    size_t k = strlen(prefix);
    if (cap < k + 2) {
        if (cap) out[0] = 0;
        return;
    }
    memcpy(out, prefix, k);
    for (int i = 0; i < 32 && k + 1 < cap; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        out[k++] = a[(seed >> 33) % (sizeof(a) - 1)];
    }
    out[k] = 0;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void resp_ctx_free(struct resp_ctx *x) {
    if (!x) return;
    free(x->head);
    free(x->conv);
    for (int i = 0; i < x->n_items; i++) sb_free(&x->items[i].text);
    free(x->items);
    free(x);
}

static struct resp_ctx *ctx_new(uint64_t seed) {
    struct resp_ctx *x = calloc(1, sizeof(*x));
    if (!x) return NULL;
    x->seed = mix64(seed ^ 0x5851f42d4c957f2dull);
    id_chars(x->id, sizeof(x->id), "resp_", x->seed);
    x->created = (long long)time(NULL);
    x->store = true;
    x->open = -1;
    return x;
}

static struct item *item_push(struct resp_ctx *x, enum item_kind kind) {
    if (x->n_items == x->cap_items) {
        int cap = x->cap_items ? 2 * x->cap_items : 4;
        struct item *p = realloc(x->items, (size_t)cap * sizeof(*p));
        if (!p) return NULL;
        x->items = p;
        x->cap_items = cap;
    }
    struct item *it = &x->items[x->n_items];
    memset(it, 0, sizeof(*it));
    it->kind = kind;
    sb_init(&it->text);
    static const char *const prefix[] = {"msg_", "rs_", "fc_"};
    id_chars(it->id, sizeof(it->id), prefix[kind],
             mix64(x->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(x->n_items + 1)));
    x->n_items++;
    return it;
}

/* ---------------------------------------------------------------------- */
/* request translation: field checks in the Responses API's terms */

static bool bad(struct srv_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool bad(struct srv_err *e, const char *param, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srv_err_set(e, 400, "invalid_request_error", NULL, param, "%s", msg);
    return false;
}

static bool oom(struct srv_err *e) { return srv_oom(e); }

/* Text of a content array: input_text / output_text / text / refusal
 * parts joined. */
static bool parts_text(const cJSON *c, const char *param, struct sbuf *b, struct srv_err *e) {
    if (cJSON_IsString(c)) {
        sb_puts(b, c->valuestring);
        return true;
    }
    if (!cJSON_IsArray(c))
        return bad(e, param, "'%s' must be a string or an array of content parts, got %s", param,
                   srv_type_name(c));
    int j = 0;
    for (const cJSON *p = c->child; p; p = p->next, j++) {
        char pp[96];
        snprintf(pp, sizeof(pp), "%s[%d]", param, j);
        const cJSON *t = cJSON_IsObject(p) ? srv_field(p, "type") : NULL;
        if (!cJSON_IsString(t)) return bad(e, pp, "'%s' must be an object with a 'type'", pp);
        const char *ty = t->valuestring;
        if (!strcmp(ty, "input_text") || !strcmp(ty, "output_text") || !strcmp(ty, "text") ||
            !strcmp(ty, "summary_text") || !strcmp(ty, "reasoning_text")) {
            const cJSON *tx = srv_field(p, "text");
            if (!cJSON_IsString(tx)) return bad(e, pp, "'%s.text' must be a string", pp);
            sb_puts(b, tx->valuestring);
        } else if (!strcmp(ty, "refusal")) {
            const cJSON *tx = srv_field(p, "refusal");
            if (!cJSON_IsString(tx)) return bad(e, pp, "'%s.refusal' must be a string", pp);
            sb_puts(b, tx->valuestring);
        } else if (!strcmp(ty, "input_image") || !strcmp(ty, "input_file") ||
                   !strcmp(ty, "input_audio")) {
            return bad(e, pp, "'%s': content of type '%s' is not supported (the model reads text "
                       "only)", pp, ty);
        } else {
            return bad(e, pp, "'%s.type' must be one of input_text, output_text, refusal; got "
                       "'%.40s'", pp, ty);
        }
    }
    return true;
}

static cJSON *msg_new(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddItemToArray(msgs, m);
    if (!cJSON_AddStringToObject(m, "role", role)) return NULL;
    if (content && !cJSON_AddStringToObject(m, "content", content)) return NULL;
    return m;
}

/* The last message of msgs when it is an assistant turn, to which a
 * function_call item adds its call; else a new assistant turn. */
static cJSON *assistant_turn(cJSON *msgs) {
    cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = last ? srv_field(last, "role") : NULL;
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "assistant")) return last;
    return msg_new(msgs, "assistant", NULL);
}

static bool input_item(const cJSON *it, int i, cJSON *msgs, struct srv_err *e) {
    char param[48];
    snprintf(param, sizeof(param), "input[%d]", i);
    if (!cJSON_IsObject(it))
        return bad(e, param, "'%s' must be an object, got %s", param, srv_type_name(it));
    const cJSON *type = srv_field(it, "type");
    if (type && !cJSON_IsString(type)) return bad(e, param, "'%s.type' must be a string", param);
    const char *ty = type ? type->valuestring : "message";
    struct sbuf b;
    sb_init(&b);
    sb_put(&b, "", 0); /* allocated and NUL terminated */
    bool ok = false;
    if (!strcmp(ty, "message")) {
        const cJSON *role = srv_field(it, "role");
        if (!cJSON_IsString(role)) {
            bad(e, param, "'%s.role' must be a string", param);
            goto out;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system")) {
            bad(e, param, "'%s.role' must be one of user, assistant, system, developer; got "
                "'%.40s'", param, role->valuestring);
            goto out;
        }
        const cJSON *c = srv_field(it, "content");
        char cp[64];
        snprintf(cp, sizeof(cp), "%s.content", param);
        if (!c) {
            bad(e, cp, "'%s' is required", cp);
            goto out;
        }
        if (!parts_text(c, cp, &b, e)) goto out;
        if (b.oom || !msg_new(msgs, r, b.p ? b.p : "")) {
            oom(e);
            goto out;
        }
        ok = true;
    } else if (!strcmp(ty, "function_call")) {
        const cJSON *cid = srv_field(it, "call_id"), *name = srv_field(it, "name"),
                    *args = srv_field(it, "arguments");
        if (!cJSON_IsString(cid) || !cid->valuestring[0]) {
            bad(e, param, "'%s.call_id' must be a non-empty string", param);
            goto out;
        }
        if (!cJSON_IsString(name) || !name->valuestring[0]) {
            bad(e, param, "'%s.name' must be a non-empty string", param);
            goto out;
        }
        if (!cJSON_IsString(args)) {
            bad(e, param, "'%s.arguments' must be a string (the arguments' JSON text)", param);
            goto out;
        }
        cJSON *turn = assistant_turn(msgs);
        if (!turn) {
            oom(e);
            goto out;
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(turn, "tool_calls");
        if (!calls && !(calls = cJSON_AddArrayToObject(turn, "tool_calls"))) {
            oom(e);
            goto out;
        }
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        if (!call || !fn) {
            cJSON_Delete(call);
            cJSON_Delete(fn);
            oom(e);
            goto out;
        }
        cJSON_AddItemToArray(calls, call);
        cJSON_AddStringToObject(call, "id", cid->valuestring);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON_AddItemToObject(call, "function", fn);
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        if (!cJSON_AddStringToObject(fn, "arguments", args->valuestring)) {
            oom(e);
            goto out;
        }
        ok = true;
    } else if (!strcmp(ty, "function_call_output")) {
        const cJSON *cid = srv_field(it, "call_id"), *out = srv_field(it, "output");
        if (!cJSON_IsString(cid) || !cid->valuestring[0]) {
            bad(e, param, "'%s.call_id' must be a non-empty string", param);
            goto out;
        }
        char op[64];
        snprintf(op, sizeof(op), "%s.output", param);
        if (!out) {
            bad(e, op, "'%s' is required", op);
            goto out;
        }
        if (!parts_text(out, op, &b, e)) goto out;
        cJSON *m = msg_new(msgs, "tool", b.p ? b.p : "");
        if (b.oom || !m || !cJSON_AddStringToObject(m, "tool_call_id", cid->valuestring)) {
            oom(e);
            goto out;
        }
        ok = true;
    } else if (!strcmp(ty, "reasoning")) {
        ok = true; /* fed back: the model's earlier thoughts are not shown again */
    } else {
        bad(e, param, "'%s.type' must be one of message, function_call, function_call_output, "
            "reasoning; got '%.40s'", param, ty);
    }
out:
    sb_free(&b);
    return ok;
}

/* tools: the Responses shape {"type":"function","name",...} -> OpenAI's. */
static bool tools_of(const cJSON *tools, cJSON *chat, struct srv_err *e) {
    if (!cJSON_IsArray(tools))
        return bad(e, "tools", "'tools' must be an array, got %s", srv_type_name(tools));
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    if (!out) return oom(e);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        char param[32];
        snprintf(param, sizeof(param), "tools[%d]", i);
        const cJSON *type = cJSON_IsObject(t) ? srv_field(t, "type") : NULL;
        if (!cJSON_IsString(type)) return bad(e, param, "'%s' must be an object with a 'type'", param);
        if (strcmp(type->valuestring, "function"))
            return bad(e, param, "'%s': only function tools are supported, got type '%.40s'",
                       param, type->valuestring);
        const cJSON *name = srv_field(t, "name");
        if (!cJSON_IsString(name)) return bad(e, param, "'%s.name' must be a string", param);
        cJSON *ct = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        if (!ct || !fn) {
            cJSON_Delete(ct);
            cJSON_Delete(fn);
            return oom(e);
        }
        cJSON_AddItemToArray(out, ct);
        cJSON_AddStringToObject(ct, "type", "function");
        cJSON_AddItemToObject(ct, "function", fn);
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            const cJSON *v = srv_field(t, keys[k]);
            if (!v) continue;
            cJSON *d = cJSON_Duplicate(v, true);
            if (!d) return oom(e);
            cJSON_AddItemToObject(fn, keys[k], d);
        }
    }
    return true;
}

static bool tool_choice_of(const cJSON *tc, cJSON *chat, struct srv_err *e) {
    if (cJSON_IsString(tc)) {
        const char *c = tc->valuestring;
        if (strcmp(c, "none") && strcmp(c, "auto") && strcmp(c, "required"))
            return bad(e, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                       "{\"type\": \"function\", \"name\": ...}; got '%.40s'", c);
        return cJSON_AddStringToObject(chat, "tool_choice", c) ? true : oom(e);
    }
    const cJSON *type = cJSON_IsObject(tc) ? srv_field(tc, "type") : NULL;
    const cJSON *name = cJSON_IsObject(tc) ? srv_field(tc, "name") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
        return bad(e, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                   "{\"type\": \"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice");
    cJSON *fn = o ? cJSON_AddObjectToObject(o, "function") : NULL;
    if (!fn || !cJSON_AddStringToObject(o, "type", "function") ||
        !cJSON_AddStringToObject(fn, "name", name->valuestring))
        return oom(e);
    return true;
}

/* text.format -> response_format */
static bool text_of(const cJSON *text, cJSON *chat, struct srv_err *e) {
    if (!cJSON_IsObject(text))
        return bad(e, "text", "'text' must be an object, got %s", srv_type_name(text));
    const cJSON *f = srv_field(text, "format");
    if (!f) return true;
    const cJSON *type = cJSON_IsObject(f) ? srv_field(f, "type") : NULL;
    if (!cJSON_IsString(type))
        return bad(e, "text.format", "'text.format' must be an object with a 'type'");
    const char *ty = type->valuestring;
    if (!strcmp(ty, "text")) return true;
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (!rf) return oom(e);
    if (!strcmp(ty, "json_object"))
        return cJSON_AddStringToObject(rf, "type", "json_object") ? true : oom(e);
    if (strcmp(ty, "json_schema"))
        return bad(e, "text.format.type", "'text.format.type' must be one of text, json_object, "
                   "json_schema; got '%.40s'", ty);
    const cJSON *name = srv_field(f, "name"), *schema = srv_field(f, "schema"),
                *strict = srv_field(f, "strict");
    if (name && !cJSON_IsString(name))
        return bad(e, "text.format.name", "'text.format.name' must be a string");
    if (!cJSON_IsObject(schema))
        return bad(e, "text.format.schema", "'text.format.schema' must be a JSON Schema object");
    if (strict && !cJSON_IsBool(strict))
        return bad(e, "text.format.strict", "'text.format.strict' must be a boolean");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    cJSON *sd = cJSON_Duplicate(schema, true);
    if (!js || !sd || !cJSON_AddStringToObject(rf, "type", "json_schema") ||
        !cJSON_AddStringToObject(js, "name", name ? name->valuestring : "response")) {
        cJSON_Delete(sd);
        return oom(e);
    }
    cJSON_AddItemToObject(js, "schema", sd);
    if (strict) cJSON_AddBoolToObject(js, "strict", cJSON_IsTrue(strict));
    return true;
}

static bool copy_field(const cJSON *root, const char *from, cJSON *chat, const char *to,
                       struct srv_err *e) {
    const cJSON *v = srv_field(root, from);
    if (!v) return true;
    cJSON *d = cJSON_Duplicate(v, true);
    if (!d) return oom(e);
    cJSON_AddItemToObject(chat, to, d);
    return true;
}

/* Echo of a request field in the response object: a copy, or dflt (JSON
 * text) when absent. */
static bool echo(cJSON *head, const cJSON *root, const char *key, const char *dflt,
                 struct srv_err *e) {
    const cJSON *v = srv_field(root, key);
    cJSON *d = v ? cJSON_Duplicate(v, true) : cJSON_Parse(dflt);
    if (!d) return oom(e);
    cJSON_AddItemToObject(head, key, d);
    return true;
}

static bool check_reasoning(const cJSON *r, bool *summary, const char **effort,
                            struct srv_err *e) {
    if (!cJSON_IsObject(r))
        return bad(e, "reasoning", "'reasoning' must be an object, got %s", srv_type_name(r));
    const cJSON *ef = srv_field(r, "effort"), *su = srv_field(r, "summary");
    if (!su) su = srv_field(r, "generate_summary");
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    if (ef) {
        bool ok = false;
        for (size_t i = 0; cJSON_IsString(ef) && i < sizeof(efforts) / sizeof(efforts[0]); i++)
            ok |= !strcmp(ef->valuestring, efforts[i]);
        if (!ok)
            return bad(e, "reasoning.effort", "'reasoning.effort' must be one of none, minimal, "
                       "low, medium, high, xhigh");
        *effort = ef->valuestring;
    }
    if (su) {
        if (!cJSON_IsString(su) || (strcmp(su->valuestring, "auto") &&
                                    strcmp(su->valuestring, "concise") &&
                                    strcmp(su->valuestring, "detailed")))
            return bad(e, "reasoning.summary", "'reasoning.summary' must be one of auto, concise, "
                       "detailed");
        *summary = true;
    }
    return true;
}

/* The fields of a Responses request anvil reads or accepts (the rest is
 * ignored, or a 400 under anvil serve --strict). */
static const char *const known_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
    "max_output_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "text",
    "reasoning", "stream", "stream_options", "previous_response_id", "store", "metadata",
    "user", "safety_identifier", "prompt_cache_key", "service_tier", "truncation", "include",
    "background", "conversation", "prompt", "top_logprobs", "max_tool_calls",
};

static bool check_known(const cJSON *root, bool strict, char *ignored, size_t cap,
                        struct srv_err *e) {
    for (const cJSON *k = root->child; k; k = k->next) {
        bool known = false;
        for (size_t i = 0; !known && i < sizeof(known_fields) / sizeof(known_fields[0]); i++)
            known = !strcmp(k->string, known_fields[i]);
        if (known) continue;
        if (strict)
            return bad(e, k->string, "Unknown parameter: '%.60s' (anvil serve --strict refuses "
                       "fields it does not know).", k->string);
        srv_note_ignored(ignored, cap, k->string);
    }
    return true;
}

/* Type checks of the scalar fields. */
static bool check_scalars(const cJSON *root, struct srv_err *e) {
    static const char *const bools[] = {"stream", "store", "parallel_tool_calls", "background"};
    for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
        const cJSON *v = srv_field(root, bools[i]);
        if (v && !cJSON_IsBool(v))
            return bad(e, bools[i], "'%s' must be a boolean, got %s", bools[i], srv_type_name(v));
    }
    static const char *const strs[] = {"model", "instructions", "previous_response_id", "user",
                                       "safety_identifier", "prompt_cache_key", "service_tier"};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        const cJSON *v = srv_field(root, strs[i]);
        if (v && !cJSON_IsString(v))
            return bad(e, strs[i], "'%s' must be a string, got %s", strs[i], srv_type_name(v));
    }
    const cJSON *bg = srv_field(root, "background");
    if (cJSON_IsTrue(bg))
        return bad(e, "background", "'background': true is not supported: responses run in the "
                   "foreground");
    static const char *const unsupported[] = {"conversation", "prompt"};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++)
        if (srv_field(root, unsupported[i]))
            return bad(e, unsupported[i], "'%s' is not supported: send the conversation as input "
                       "items or use previous_response_id", unsupported[i]);
    long long n;
    if (!srv_get_int(root, "max_output_tokens", 1, 1e9, &n, NULL, e)) return false;
    if (!srv_get_int(root, "top_logprobs", 0, 0, &n, NULL, e)) {
        return bad(e, "top_logprobs", "'top_logprobs' is not supported on /v1/responses "
                   "(only 0)");
    }
    const cJSON *tr = srv_field(root, "truncation");
    if (tr && (!cJSON_IsString(tr) || (strcmp(tr->valuestring, "auto") &&
                                       strcmp(tr->valuestring, "disabled"))))
        return bad(e, "truncation", "'truncation' must be 'auto' or 'disabled'");
    const cJSON *md = srv_field(root, "metadata");
    if (md) {
        if (!cJSON_IsObject(md))
            return bad(e, "metadata", "'metadata' must be an object of strings");
        int k = 0;
        for (const cJSON *x = md->child; x; x = x->next, k++)
            if (!cJSON_IsString(x) || k >= 16 || strlen(x->string) > 64 ||
                strlen(x->valuestring) > 512)
                return bad(e, "metadata", "'metadata' must be at most 16 pairs of strings (keys "
                           "up to 64 characters, values up to 512)");
    }
    return true;
}

/* The response object's fixed fields ("{...," text). */
static bool make_head(struct resp_ctx *x, const struct srv_limits *lim, const cJSON *root,
                      const char *effort, struct srv_err *e) {
    cJSON *h = cJSON_CreateObject();
    if (!h) return oom(e);
    bool ok = cJSON_AddStringToObject(h, "id", x->id) &&
              cJSON_AddStringToObject(h, "object", "response") &&
              cJSON_AddNumberToObject(h, "created_at", (double)x->created) &&
              cJSON_AddBoolToObject(h, "background", false);
    const cJSON *model = srv_field(root, "model");
    ok = ok && cJSON_AddStringToObject(h, "model", cJSON_IsString(model) ? model->valuestring
                                                       : (lim->model_id ? lim->model_id : ""));
    ok = ok && echo(h, root, "instructions", "null", e) &&
         echo(h, root, "max_output_tokens", "null", e) &&
         echo(h, root, "metadata", "{}", e) &&
         echo(h, root, "parallel_tool_calls", "true", e) &&
         echo(h, root, "previous_response_id", "null", e) &&
         echo(h, root, "temperature", "1.0", e) && echo(h, root, "text", "{\"format\":{\"type\":\"text\"}}", e) &&
         echo(h, root, "tool_choice", "\"auto\"", e) && echo(h, root, "tools", "[]", e) &&
         echo(h, root, "top_p", "1.0", e) && echo(h, root, "truncation", "\"disabled\"", e) &&
         echo(h, root, "user", "null", e);
    cJSON *r = ok ? cJSON_AddObjectToObject(h, "reasoning") : NULL;
    ok = r && (effort ? cJSON_AddStringToObject(r, "effort", effort) != NULL
                      : cJSON_AddNullToObject(r, "effort") != NULL);
    const cJSON *rs = srv_field(root, "reasoning");
    const cJSON *su = cJSON_IsObject(rs) ? srv_field(rs, "summary") : NULL;
    ok = ok && (cJSON_IsString(su) ? cJSON_AddStringToObject(r, "summary", su->valuestring) != NULL
                                   : cJSON_AddNullToObject(r, "summary") != NULL);
    ok = ok && cJSON_AddBoolToObject(h, "store", x->store);
    char *txt = ok ? cJSON_PrintUnformatted(h) : NULL;
    cJSON_Delete(h);
    if (!txt) return e->status ? false : oom(e);
    size_t n = strlen(txt);
    /* "{...}" -> "{...," : the varying fields follow */
    if (n < 2 || txt[n - 1] != '}') {
        free(txt);
        return oom(e);
    }
    txt[n - 1] = ',';
    x->head = txt;
    return true;
}

/* Param names of the chat parser's errors in the Responses API's terms. */
static void rename_param(struct srv_err *e) {
    static const struct {
        const char *from, *to;
    } map[] = {
        {"response_format.json_schema", "text.format"},
        {"messages", "input"},
        {"max_tokens", "max_output_tokens"},
        {"response_format", "text.format"},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        size_t n = strlen(map[i].from);
        if (!strncmp(e->param, map[i].from, n)) {
            char rest[64];
            snprintf(rest, sizeof(rest), "%s", e->param + n);
            snprintf(e->param, sizeof(e->param), "%s%s", map[i].to, rest);
            return;
        }
    }
    char *f = strstr(e->param, "].function");
    if (!strncmp(e->param, "tools[", 6) && f) memmove(f + 1, f + 10, strlen(f + 10) + 1);
}

bool srv_responses_translate(const struct srv_limits *lim, struct resp_store *st,
                             const char *body, size_t len, double now, uint64_t id_seed,
                             struct cJSON **chat_out, struct resp_ctx **ctx_out,
                             struct srv_err *e) {
    *chat_out = NULL;
    *ctx_out = NULL;
    memset(e, 0, sizeof(*e));
    if (!srv_json_prescan(body, len, e)) return false;
    const char *end = NULL;
    cJSON *root = srv_json_parse(body, len, &end);
    if (!root) return bad(e, NULL, "The request body is not valid JSON.");
    while (end && end < body + len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
        end++;
    cJSON *chat = NULL;
    struct resp_ctx *x = NULL;
    char *prev_conv = NULL;
    bool ok = false;
    if (end != body + len) {
        bad(e, NULL, "The request body has data after its JSON value.");
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        bad(e, NULL, "The request body must be a JSON object, got %s", srv_type_name(root));
        goto out;
    }
    char ignored[256] = "";
    if (!check_known(root, lim->strict, ignored, sizeof(ignored), e)) goto out;
    if (!check_scalars(root, e)) goto out;
    bool summary = false;
    const char *effort = NULL;
    const cJSON *rs = srv_field(root, "reasoning");
    if (rs && !check_reasoning(rs, &summary, &effort, e)) goto out;

    chat = cJSON_CreateObject();
    x = ctx_new(id_seed);
    if (!chat || !x) {
        oom(e);
        goto out;
    }
    x->summary = summary;
    memcpy(x->ignored, ignored, sizeof(ignored));
    const cJSON *store_f = srv_field(root, "store");
    if (store_f) x->store = cJSON_IsTrue(store_f);

    /* the conversation: the kept one, then the new input */
    cJSON *conv = NULL;
    const cJSON *prev = srv_field(root, "previous_response_id");
    if (prev) {
        if (!resp_store_get(st, prev->valuestring, now, NULL, &prev_conv)) {
            srv_err_set(e, 404, "invalid_request_error", "previous_response_not_found",
                        "previous_response_id", "Previous response with id '%.64s' not found.",
                        prev->valuestring);
            goto out;
        }
        conv = cJSON_Parse(prev_conv);
        if (!cJSON_IsArray(conv)) {
            cJSON_Delete(conv);
            oom(e);
            goto out;
        }
    } else {
        conv = cJSON_CreateArray();
        if (!conv) {
            oom(e);
            goto out;
        }
    }
    const cJSON *input = srv_field(root, "input");
    if (!input) {
        cJSON_Delete(conv);
        bad(e, "input", "Missing required parameter: 'input'.");
        goto out;
    }
    if (cJSON_IsString(input)) {
        if (!msg_new(conv, "user", input->valuestring)) {
            cJSON_Delete(conv);
            oom(e);
            goto out;
        }
    } else if (cJSON_IsArray(input)) {
        int i = 0;
        for (const cJSON *it = input->child; it; it = it->next, i++)
            if (!input_item(it, i, conv, e)) {
                cJSON_Delete(conv);
                goto out;
            }
    } else {
        cJSON_Delete(conv);
        bad(e, "input", "'input' must be a string or an array of input items, got %s",
            srv_type_name(input));
        goto out;
    }
    if (cJSON_GetArraySize(conv) == 0) {
        cJSON_Delete(conv);
        bad(e, "input", "'input' holds no message");
        goto out;
    }
    x->conv = cJSON_PrintUnformatted(conv);
    /* the chat messages: instructions first (not kept with the conversation) */
    cJSON *msgs = cJSON_AddArrayToObject(chat, "messages");
    const cJSON *ins = srv_field(root, "instructions");
    if (!x->conv || !msgs || (ins && !msg_new(msgs, "system", ins->valuestring))) {
        cJSON_Delete(conv);
        oom(e);
        goto out;
    }
    while (conv->child) cJSON_AddItemToArray(msgs, cJSON_DetachItemFromArray(conv, 0));
    cJSON_Delete(conv);

    const cJSON *tools = srv_field(root, "tools");
    if (tools && !tools_of(tools, chat, e)) goto out;
    const cJSON *tc = srv_field(root, "tool_choice");
    if (tc && !tool_choice_of(tc, chat, e)) goto out;
    const cJSON *text = srv_field(root, "text");
    if (text && !text_of(text, chat, e)) goto out;
    if (!copy_field(root, "model", chat, "model", e) ||
        !copy_field(root, "max_output_tokens", chat, "max_tokens", e) ||
        !copy_field(root, "temperature", chat, "temperature", e) ||
        !copy_field(root, "top_p", chat, "top_p", e) ||
        /* extensions the chat route knows */
        !copy_field(root, "top_k", chat, "top_k", e) ||
        !copy_field(root, "min_p", chat, "min_p", e) ||
        !copy_field(root, "seed", chat, "seed", e) ||
        !copy_field(root, "stop", chat, "stop", e) ||
        !copy_field(root, "parallel_tool_calls", chat, "parallel_tool_calls", e) ||
        !copy_field(root, "stream", chat, "stream", e))
        goto out;
    /* reasoning.effort: the template's reasoning_effort; "none" also closes
     * a thought the template opens (budget 0) */
    if (effort && !cJSON_AddStringToObject(chat, "reasoning_effort", effort)) {
        oom(e);
        goto out;
    }
    if (effort && lim->outfmt.reasoning_format != SRV_REASONING_NONE) {
        bool none = !strcmp(effort, "none");
        if (none && !cJSON_AddNumberToObject(chat, "reasoning_budget", 0)) {
            oom(e);
            goto out;
        }
        cJSON *kw = cJSON_GetObjectItemCaseSensitive(chat, "chat_template_kwargs");
        if (!kw) kw = cJSON_AddObjectToObject(chat, "chat_template_kwargs");
        if (!kw || !cJSON_AddBoolToObject(kw, "enable_thinking", !none)) {
            oom(e);
            goto out;
        }
    }
    if (!make_head(x, lim, root, effort, e)) goto out;
    ok = true;
out:
    free(prev_conv);
    cJSON_Delete(root);
    if (!ok) {
        if (!e->status) oom(e);
        cJSON_Delete(chat);
        resp_ctx_free(x);
        return false;
    }
    *chat_out = chat;
    *ctx_out = x;
    return true;
}

/* ---------------------------------------------------------------------- */
/* wire shapes */

static void put_str(struct sbuf *b, const char *s, size_t n) { sb_json_str(b, s, n); }
static void put_cstr(struct sbuf *b, const char *s) { sb_json_str(b, s, strlen(s)); }

static const char *item_type(enum item_kind k) {
    return k == IT_MSG ? "message" : k == IT_REASONING ? "reasoning" : "function_call";
}

/* An output item; whole: with its text (else as output_item.added shows it). */
static void fmt_item(struct sbuf *b, const struct resp_ctx *x, const struct item *it,
                     const char *status, bool whole) {
    sb_puts(b, "{\"id\":");
    put_cstr(b, it->id);
    sb_printf(b, ",\"type\":\"%s\",\"status\":\"%s\"", item_type(it->kind), status);
    const char *t = it->text.p ? it->text.p : "";
    size_t n = it->text.len;
    switch (it->kind) {
    case IT_MSG:
        sb_puts(b, ",\"role\":\"assistant\",\"content\":[");
        if (whole) {
            sb_puts(b, "{\"type\":\"output_text\",\"text\":");
            put_str(b, t, n);
            sb_puts(b, ",\"annotations\":[],\"logprobs\":[]}");
        }
        sb_puts(b, "]}");
        break;
    case IT_REASONING:
        sb_puts(b, ",\"summary\":[");
        if (whole && x->summary) {
            sb_puts(b, "{\"type\":\"summary_text\",\"text\":");
            put_str(b, t, n);
            sb_puts(b, "}");
        }
        sb_puts(b, "],\"content\":[");
        if (whole) {
            sb_puts(b, "{\"type\":\"reasoning_text\",\"text\":");
            put_str(b, t, n);
            sb_puts(b, "}");
        }
        sb_puts(b, "]}");
        break;
    case IT_CALL:
        sb_puts(b, ",\"call_id\":");
        put_cstr(b, it->call_id);
        sb_puts(b, ",\"name\":");
        put_cstr(b, it->name);
        sb_puts(b, ",\"arguments\":");
        if (whole)
            put_str(b, t, n);
        else
            sb_puts(b, "\"\"");
        sb_puts(b, "}");
        break;
    }
}

/* A bare context's head, for a state made without the handler's ctx. */
static void ensure_head(struct resp_ctx *x, const struct srv_gen_view *v) {
    if (x->head) return;
    struct sbuf b;
    sb_init(&b);
    sb_printf(&b, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"model\":", x->id,
              x->created);
    const char *m = v && v->ri && v->ri->model_id ? v->ri->model_id : "";
    put_cstr(&b, m);
    sb_puts(&b, ",\"parallel_tool_calls\":true,\"tool_choice\":\"auto\","
                "\"tools\":[],");
    x->head = b.oom ? NULL : sb_take(&b, NULL);
    if (!x->head) sb_free(&b);
}

/* The response object: status, output items (the first n_items of x, the
 * last incomplete when last_incomplete), usage (NULL = null), error. */
static void fmt_response(struct sbuf *b, const struct resp_ctx *x, const char *status,
                         bool last_incomplete, const struct srv_usage *u,
                         const struct srv_err *err) {
    sb_puts(b, x->head ? x->head : "{");
    sb_printf(b, "\"status\":\"%s\",\"error\":", status);
    if (err) {
        sb_puts(b, "{\"code\":\"server_error\",\"message\":");
        put_cstr(b, err->message);
        sb_puts(b, "}");
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, ",\"incomplete_details\":");
    sb_puts(b, !strcmp(status, "incomplete") ? "{\"reason\":\"max_output_tokens\"}" : "null");
    sb_puts(b, ",\"output\":[");
    bool live = !strcmp(status, "in_progress");
    for (int i = 0; !live && i < x->n_items; i++) {
        if (i) sb_puts(b, ",");
        const struct item *it = &x->items[i];
        bool inc = last_incomplete && i == x->n_items - 1 && !(it->kind == IT_CALL && it->closed);
        fmt_item(b, x, it, inc ? "incomplete" : "completed", true);
    }
    sb_puts(b, "],\"usage\":");
    if (u) {
        sb_printf(b, "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},"
                     "\"output_tokens\":%d,\"output_tokens_details\":{\"reasoning_tokens\":0},"
                     "\"total_tokens\":%d}",
                  (int)u->n_prompt, (int)u->n_cached, (int)u->n_gen,
                  (int)(u->n_prompt + u->n_gen));
    } else {
        sb_puts(b, "null");
    }
    sb_puts(b, "}");
}

void srv_responses_fmt_text(struct sbuf *b, const struct resp_ctx *cx, const char *status,
                            const char *text, size_t n) {
    struct resp_ctx *x = (struct resp_ctx *)cx;
    int keep = x->n_items;
    struct item *it = item_push(x, IT_MSG);
    if (it) sb_put(&it->text, text, n);
    fmt_response(b, x, status, false, NULL, NULL);
    while (x->n_items > keep) sb_free(&x->items[--x->n_items].text);
}

/* Keep x's finished response: the object for GET, the conversation with
 * the answer appended as an assistant turn for previous_response_id. */
static void keep(struct resp_ctx *x, const char *status, const struct srv_usage *u) {
    if (!x->store || !x->conv) return;
    struct sbuf b;
    sb_init(&b);
    fmt_response(&b, x, status, !strcmp(status, "incomplete"), u, NULL);
    cJSON *conv = cJSON_Parse(x->conv);
    cJSON *m = cJSON_CreateObject();
    struct sbuf text;
    sb_init(&text);
    sb_put(&text, "", 0);
    cJSON *calls = NULL;
    for (int i = 0; m && i < x->n_items; i++) {
        const struct item *it = &x->items[i];
        if (it->kind == IT_MSG) sb_put(&text, it->text.p ? it->text.p : "", it->text.len);
        if (it->kind != IT_CALL) continue;
        if (!calls) calls = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        if (!calls || !c || !fn) {
            cJSON_Delete(c);
            cJSON_Delete(fn);
            continue;
        }
        cJSON_AddItemToArray(calls, c);
        cJSON_AddStringToObject(c, "id", it->call_id);
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddItemToObject(c, "function", fn);
        cJSON_AddStringToObject(fn, "name", it->name);
        cJSON_AddStringToObject(fn, "arguments", it->text.p ? it->text.p : "{}");
    }
    char *conv_txt = NULL;
    if (conv && m && !text.oom) {
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", text.p ? text.p : "");
        if (calls) cJSON_AddItemToObject(m, "tool_calls", calls);
        calls = NULL;
        cJSON_AddItemToArray(conv, m);
        m = NULL;
        conv_txt = cJSON_PrintUnformatted(conv);
    }
    if (conv_txt && !b.oom) resp_store_put(store(), x->id, b.p, conv_txt, now_s());
    free(conv_txt);
    cJSON_Delete(calls);
    cJSON_Delete(m);
    cJSON_Delete(conv);
    sb_free(&text);
    sb_free(&b);
}

/* ---------------------------------------------------------------------- */
/* the dialect */

static _Thread_local struct resp_ctx *tl_pending;

static void *d_make_state(void) {
    struct resp_ctx *x = tl_pending;
    tl_pending = NULL;
    if (!x) {
        x = ctx_new((uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&x);
        if (x) x->store = false;
    }
    return x;
}

static void d_free_state(void *state) { resp_ctx_free(state); }

static void d_error(struct sbuf *b, const struct srv_err *e) { srv_fmt_error(b, e); }

/* One SSE event: "event: TYPE\ndata: {"type":TYPE,"sequence_number":N,BODY}\n\n". */
static void ev_begin(struct sbuf *b, struct resp_ctx *x, const char *type) {
    sb_printf(b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%lld", type, type,
              x->seq++);
}
static void ev_end(struct sbuf *b) { sb_puts(b, "}\n\n"); }

static void ev_response(struct sbuf *b, struct resp_ctx *x, const char *type, const char *status,
                        bool last_incomplete, const struct srv_usage *u,
                        const struct srv_err *err) {
    ev_begin(b, x, type);
    sb_puts(b, ",\"response\":");
    fmt_response(b, x, status, last_incomplete, u, err);
    ev_end(b);
}

static void ev_item_ref(struct sbuf *b, int idx, const struct item *it) {
    sb_printf(b, ",\"item_id\":\"%s\",\"output_index\":%d", it->id, idx);
}

static void open_item(struct sbuf *b, struct resp_ctx *x, int idx) {
    struct item *it = &x->items[idx];
    ev_begin(b, x, "response.output_item.added");
    sb_printf(b, ",\"output_index\":%d,\"item\":", idx);
    fmt_item(b, x, it, "in_progress", false);
    ev_end(b);
    if (it->kind == IT_CALL) return;
    ev_begin(b, x, "response.content_part.added");
    ev_item_ref(b, idx, it);
    sb_puts(b, it->kind == IT_MSG
                   ? ",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\","
                     "\"annotations\":[],\"logprobs\":[]}"
                   : ",\"content_index\":0,\"part\":{\"type\":\"reasoning_text\",\"text\":\"\"}");
    ev_end(b);
}

static void close_item(struct sbuf *b, struct resp_ctx *x, int idx, const char *status) {
    struct item *it = &x->items[idx];
    const char *t = it->text.p ? it->text.p : "";
    size_t n = it->text.len;
    if (it->kind == IT_CALL) {
        ev_begin(b, x, "response.function_call_arguments.done");
        ev_item_ref(b, idx, it);
        sb_puts(b, ",\"name\":");
        put_cstr(b, it->name);
        sb_puts(b, ",\"arguments\":");
        put_str(b, t, n);
        ev_end(b);
    } else {
        bool msg = it->kind == IT_MSG;
        ev_begin(b, x, msg ? "response.output_text.done" : "response.reasoning_text.done");
        ev_item_ref(b, idx, it);
        sb_puts(b, ",\"content_index\":0,\"text\":");
        put_str(b, t, n);
        if (msg) sb_puts(b, ",\"logprobs\":[]");
        ev_end(b);
        ev_begin(b, x, "response.content_part.done");
        ev_item_ref(b, idx, it);
        sb_puts(b, ",\"content_index\":0,\"part\":");
        sb_puts(b, msg ? "{\"type\":\"output_text\",\"text\":" : "{\"type\":\"reasoning_text\",\"text\":");
        put_str(b, t, n);
        sb_puts(b, msg ? ",\"annotations\":[],\"logprobs\":[]}" : "}");
        ev_end(b);
    }
    ev_begin(b, x, "response.output_item.done");
    sb_printf(b, ",\"output_index\":%d,\"item\":", idx);
    fmt_item(b, x, it, status, true);
    ev_end(b);
    x->open = -1;
}

static void d_stream_start(struct sbuf *b, const struct srv_gen_view *v) {
    struct resp_ctx *x = v->state;
    if (!x) return;
    ensure_head(x, v);
    ev_response(b, x, "response.created", "in_progress", false, NULL, NULL);
    ev_response(b, x, "response.in_progress", "in_progress", false, NULL, NULL);
}

/* The open item of kind k (CONTENT and REASONING continue theirs). */
static int want_item(struct sbuf *b, struct resp_ctx *x, enum item_kind k) {
    if (x->open >= 0 && x->items[x->open].kind == k && k != IT_CALL) return x->open;
    if (x->open >= 0) close_item(b, x, x->open, "completed");
    if (!item_push(x, k)) return -1;
    return x->n_items - 1;
}

static void d_stream_part(struct sbuf *b, const struct srv_gen_view *v, int choice,
                          const struct srv_part *p, const struct srv_tok *toks, int32_t n_toks) {
    (void)toks;
    (void)n_toks;
    struct resp_ctx *x = v->state;
    if (!x || choice != 0) return; /* the Responses API has one output */
    switch (p->kind) {
    case SRV_PART_CONTENT:
    case SRV_PART_REASONING: {
        if (p->n == 0) return;
        enum item_kind k = p->kind == SRV_PART_CONTENT ? IT_MSG : IT_REASONING;
        bool fresh = !(x->open >= 0 && x->items[x->open].kind == k);
        int idx = want_item(b, x, k);
        if (idx < 0) return;
        if (fresh) {
            x->open = idx;
            open_item(b, x, idx);
        }
        struct item *it = &x->items[idx];
        sb_put(&it->text, p->text, p->n);
        ev_begin(b, x, k == IT_MSG ? "response.output_text.delta" : "response.reasoning_text.delta");
        ev_item_ref(b, idx, it);
        sb_puts(b, ",\"content_index\":0,\"delta\":");
        put_str(b, p->text, p->n);
        if (k == IT_MSG) sb_puts(b, ",\"logprobs\":[]");
        ev_end(b);
        break;
    }
    case SRV_PART_CALL_BEGIN: {
        int idx = want_item(b, x, IT_CALL);
        if (idx < 0) return;
        struct item *it = &x->items[idx];
        snprintf(it->call_id, sizeof(it->call_id), "%s", p->id ? p->id : "");
        snprintf(it->name, sizeof(it->name), "%s", p->name ? p->name : "");
        x->open = idx;
        open_item(b, x, idx);
        break;
    }
    case SRV_PART_CALL_ARGS: {
        if (x->open < 0 || x->items[x->open].kind != IT_CALL || p->n == 0) return;
        struct item *it = &x->items[x->open];
        sb_put(&it->text, p->text, p->n);
        ev_begin(b, x, "response.function_call_arguments.delta");
        ev_item_ref(b, x->open, it);
        sb_puts(b, ",\"delta\":");
        put_str(b, p->text, p->n);
        ev_end(b);
        break;
    }
    case SRV_PART_CALL_END:
        if (x->open < 0 || x->items[x->open].kind != IT_CALL) return;
        x->items[x->open].closed = true;
        close_item(b, x, x->open, "completed");
        break;
    }
}

static void d_stream_error(struct sbuf *b, const struct srv_gen_view *v, const struct srv_err *e) {
    struct resp_ctx *x = v->state;
    if (!x) return;
    ensure_head(x, v);
    ev_begin(b, x, "error");
    sb_puts(b, ",\"code\":");
    put_cstr(b, e->code ? e->code : (e->type ? e->type : "server_error"));
    sb_puts(b, ",\"message\":");
    put_cstr(b, e->message);
    sb_puts(b, ",\"param\":");
    if (e->param[0])
        put_cstr(b, e->param);
    else
        sb_puts(b, "null");
    ev_end(b);
    ev_response(b, x, "response.failed", "failed", false, NULL, e);
}

static bool incomplete(const struct srv_choice *ch) {
    return ch && ch->finish && !strcmp(ch->finish, "length");
}

static void d_stream_end(struct sbuf *b, const struct srv_gen_view *v,
                         const struct srv_choice *choices, int n_choices,
                         const struct srv_usage *u) {
    struct resp_ctx *x = v->state;
    if (!x) return;
    ensure_head(x, v);
    bool inc = incomplete(n_choices > 0 ? &choices[0] : NULL);
    if (x->n_items == 0 && item_push(x, IT_MSG)) { /* no output at all: an empty message */
        x->open = 0;
        open_item(b, x, 0);
    }
    if (x->open >= 0) close_item(b, x, x->open, inc ? "incomplete" : "completed");
    const char *status = inc ? "incomplete" : "completed";
    ev_response(b, x, inc ? "response.incomplete" : "response.completed", status, inc, u, NULL);
    keep(x, status, u);
}

static void d_full(struct sbuf *b, const struct srv_gen_view *v, const struct srv_choice *choices,
                   int n_choices, const struct srv_usage *u) {
    struct resp_ctx *x = v->state;
    if (!x) return;
    ensure_head(x, v);
    const struct srv_choice *ch = n_choices > 0 ? &choices[0] : NULL;
    if (ch && ch->n_reasoning > 0) {
        struct item *it = item_push(x, IT_REASONING);
        if (it) sb_put(&it->text, ch->reasoning, ch->n_reasoning);
    }
    if (ch && (ch->n_content > 0 || (ch->n_calls == 0 && ch->n_reasoning == 0))) {
        struct item *it = item_push(x, IT_MSG);
        if (it) sb_put(&it->text, ch->content ? ch->content : "", ch->n_content);
    }
    for (int i = 0; ch && i < ch->n_calls; i++) {
        struct item *it = item_push(x, IT_CALL);
        if (!it) break;
        snprintf(it->call_id, sizeof(it->call_id), "%s", ch->calls[i].id);
        snprintf(it->name, sizeof(it->name), "%s", ch->calls[i].name);
        sb_put(&it->text, ch->calls[i].args ? ch->calls[i].args : "", ch->calls[i].n_args);
        it->closed = ch->calls[i].whole;
    }
    if (!ch) item_push(x, IT_MSG);
    bool inc = incomplete(ch);
    const char *status = inc ? "incomplete" : "completed";
    fmt_response(b, x, status, inc, u, NULL);
    keep(x, status, u);
}

const struct srv_dialect srv_dialect_responses = {
    .name = "responses",
    .stream_ctype = "text/event-stream",
    .error = d_error,
    .make_state = d_make_state,
    .free_state = d_free_state,
    .stream_start = d_stream_start,
    .stream_part = d_stream_part,
    .stream_error = d_stream_error,
    .stream_end = d_stream_end,
    .full = d_full,
};

/* ---------------------------------------------------------------------- */
/* routes */

enum MHD_Result srv_post_responses(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url) {
    (void)url;
    struct srv_err err;
    cJSON *chat = NULL;
    struct resp_ctx *x = NULL;
    uint64_t seed = mix64(((uint64_t)s->salt << 32) ^
                          atomic_fetch_add(&s->next_seq, 1) ^ (uint64_t)(now_s() * 1e9));
    if (!srv_responses_translate(&s->lim, store(), k->body ? k->body : "", k->body_len, now_s(),
                                 seed, &chat, &x, &err))
        return srv_send_dialect_err(s, c, &srv_dialect_responses, &err);
    struct srv_req req;
    bool ok = srv_parse_request_json(&s->lim, SRV_KIND_CHAT, chat, &req, &err);
    cJSON_Delete(chat);
    if (!ok) {
        srv_req_free(&req);
        resp_ctx_free(x);
        rename_param(&err);
        return srv_send_dialect_err(s, c, &srv_dialect_responses, &err);
    }
    if (x->ignored[0] && !req.ignored[0]) memcpy(req.ignored, x->ignored, sizeof(req.ignored));
    tl_pending = x;
    enum MHD_Result r = srv_generate(s, c, k, &req, &srv_dialect_responses);
    if (tl_pending) { /* srv_generate refused before it made the state */
        resp_ctx_free(tl_pending);
        tl_pending = NULL;
    }
    srv_req_free(&req);
    return r;
}

/* The id of /v1/responses/{id} (NULL when the path has more after it). */
static const char *id_of(const char *url) {
    const char *p = url + strlen("/v1/responses/");
    if (strchr(p, '/') || strlen(p) > 64 || !*p) return NULL;
    return p;
}

static enum MHD_Result not_found(struct srv *s, struct MHD_Connection *c, const char *id) {
    struct srv_err e;
    srv_err_set(&e, 404, "invalid_request_error", NULL, NULL,
                "Response with id '%.64s' not found.", id ? id : "");
    return srv_send_dialect_err(s, c, &srv_dialect_responses, &e);
}

enum MHD_Result srv_get_response(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url) {
    (void)k;
    const char *id = id_of(url);
    char *resp = NULL;
    if (!id || !resp_store_get(store(), id, now_s(), &resp, NULL)) return not_found(s, c, id);
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, resp);
    free(resp);
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

enum MHD_Result srv_delete_response(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                    const char *url) {
    (void)k;
    const char *id = id_of(url);
    if (!id || !resp_store_delete(store(), id, now_s())) return not_found(s, c, id);
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"id\":");
    put_cstr(&b, id);
    sb_puts(&b, ",\"object\":\"response.deleted\",\"deleted\":true}");
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}
