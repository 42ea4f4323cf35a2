/*
 * api_ollama.c - Ollama's API over anvil's generation: POST /api/chat and
 * /api/generate, GET /api/tags, POST /api/show, GET /api/version, GET
 * /api/ps, and /api/embed and /api/embeddings (answered by api_embed.c).
 *
 * A request body is translated into the equivalent chat-completions
 * JSON (messages with OpenAI's roles, tool calls with their arguments as
 * text and ids, tools, response_format from `format`, stop strings,
 * logprobs) and checked by srv_parse_request_json; Ollama's `options`
 * are then applied to the parsed request itself (the sampler fields,
 * num_predict and num_ctx against the prompt's length), because their
 * names, defaults and ranges are Ollama's, not OpenAI's. The answer goes
 * through srv_generate with the dialects below: newline-delimited JSON
 * (application/x-ndjson) when `stream` is absent or true, one JSON object
 * otherwise.
 *
 * Ollama's rules kept here (its docs/api.md and the `ollama` Python
 * client, whose models parse every answer in the tests):
 *   - unknown top-level fields and unknown options are ignored (Ollama's
 *     Go decoder ignores them); a known field of the wrong type is a 400;
 *   - a model name is "name:tag": the server's model id is accepted with
 *     or without ":latest", anything else is a 404 "model ... not found";
 *   - defaults are Ollama's (temperature 0.8, top_k 40, top_p 0.9,
 *     repeat_penalty 1.1, repeat_last_n 64, num_predict -1 = until the
 *     context is full), not OpenAI's;
 *   - a call with no prompt (generate) or no messages (chat) only "loads
 *     the model": done_reason "load" ("unload" with keep_alive 0);
 *   - tool calls carry their arguments as a JSON object; a streamed call
 *     is sent whole, in one line, when it ends (as Ollama does);
 *   - errors are {"error": "message"}: 400 bad input, 404 unknown model,
 *     500 out of memory; in a stream, an {"error"} line.
 * What it does not do: images (400: anvil has no multimodal model),
 * Ollama's Go templates (`template` is refused unless `raw`), `context`
 * (the deprecated token memory of /api/generate; 400), model management
 * (pull, create, copy, delete: no route).
 *
 * Timing fields (nanoseconds): total_duration from the request's arrival,
 * load_duration the parse and tokenization before submission plus the
 * wait in the engine's queue (the model is always loaded),
 * prompt_eval_duration the prefill and eval_duration the decoding, as the
 * engine measured them (its DONE event's times).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/api_embed.h"
#include "server/api_ollama.h"

/* The Ollama version /api/version reports: clients gate features on it
 * (tools, think, structured output are all older than this one). */
#define OL_VERSION "0.12.0"
#define OL_MAX_CALLS 128 /* assistant tool calls remembered to match tool results */

// ----------------------------------------------------------------------------
// small helpers

static void put_time(struct sbuf *b, time_t sec, long nsec) {
    struct tm tm;
    char buf[40];
    gmtime_r(&sec, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    sb_printf(b, "\"%s.%06ldZ\"", buf, nsec / 1000);
}

static void put_now(struct sbuf *b) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    put_time(b, ts.tv_sec, ts.tv_nsec);
}

/* "id" and "id:latest" name the served model. */
static bool name_matches(const char *want, const char *id) {
    size_t n = strlen(id);
    if (strncmp(want, id, n) != 0) return false;
    return want[n] == '\0' || !strcmp(want + n, ":latest");
}

/* The name Ollama clients see: the id with its tag. */
static void display_name(struct sbuf *b, const char *id) {
    if (strchr(id, ':')) {
        sb_json_str(b, id, strlen(id));
        return;
    }
    size_t n = strlen(id);
    char *t = malloc(n + 8);
    if (!t) {
        b->oom = true;
        return;
    }
    memcpy(t, id, n);
    memcpy(t + n, ":latest", 8);
    sb_json_str(b, t, n + 7);
    free(t);
}

static bool not_found(struct srv_err *e, const char *name) {
    srv_err_set(e, 404, "not_found_error", "model_not_found", "model",
                "model \"%.100s\" not found, try pulling it first", name);
    return false;
}

/* The model field of a body: required, a string, the served model. */
static bool check_model(const struct srv_limits *lim, const cJSON *root, char *out, size_t cap,
                        struct srv_err *e) {
    const cJSON *m = srv_field(root, "model");
    if (!m) m = srv_field(root, "name"); /* the older spelling */
    if (!m) return srv_bad(e, "model", "model is required");
    if (!cJSON_IsString(m))
        return srv_bad(e, "model", "'model' must be a string, got %s", srv_type_name(m));
    if (!m->valuestring[0]) return srv_bad(e, "model", "model is required");
    if (!name_matches(m->valuestring, lim->model_id)) return not_found(e, m->valuestring);
    snprintf(out, cap, "%s", m->valuestring);
    return true;
}

static cJSON *parse_body(const char *body, size_t len, struct srv_err *e) {
    if (len == 0) {
        srv_bad(e, NULL, "the request body is empty: expected a JSON object");
        return NULL;
    }
    if (!srv_json_prescan(body, len, e)) return NULL;
    const char *end = NULL;
    cJSON *root = srv_json_parse(body, len, &end);
    if (!root) {
        size_t off = (end && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        srv_bad(e, NULL, "invalid JSON near byte %zu of the request body", off);
        return NULL;
    }
    if (end)
        for (const char *p = end; p < body + len; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
                srv_bad(e, NULL, "invalid JSON: trailing data after the object at byte %zu",
                        (size_t)(p - body));
                cJSON_Delete(root);
                return NULL;
            }
    if (!cJSON_IsObject(root)) {
        srv_bad(e, NULL, "the request body must be a JSON object, got %s", srv_type_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* An optional string member: true when absent or a string (*out NULL or
 * its text). */
static bool opt_str(const cJSON *o, const char *key, const char **out, struct srv_err *e) {
    const cJSON *v = srv_field(o, key);
    *out = NULL;
    if (!v) return true;
    if (!cJSON_IsString(v))
        return srv_bad(e, key, "'%s' must be a string, got %s", key, srv_type_name(v));
    *out = v->valuestring;
    return true;
}

static bool images_refused(const cJSON *o, const char *param, struct srv_err *e) {
    const cJSON *im = srv_field(o, "images");
    if (!im) return true;
    if (!cJSON_IsArray(im))
        return srv_bad(e, param, "'%s' must be an array of base64 images, got %s", param,
                       srv_type_name(im));
    if (im->child)
        return srv_bad(e, param, "images are not supported: anvil serves no multimodal model "
                       "(send text only)");
    return true;
}

// ----------------------------------------------------------------------------
// the request: Ollama -> chat-completions JSON

/* Assistant calls seen so far, to give tool results the id of the call
 * they answer (Ollama's tool messages name the tool, not the call). */
struct call_memo {
    int n;
    char id[OL_MAX_CALLS][40];
    char name[OL_MAX_CALLS][SRV_TOOL_NAME_MAX + 1];
    bool answered[OL_MAX_CALLS];
};

static bool oom_false(struct srv_err *e) { return srv_oom(e); }

/* messages[i].tool_calls: [{"id"?, "function": {"name", "arguments": {..}}}]
 * -> OpenAI's [{"id", "type": "function", "function": {"name", "arguments": "text"}}] */
static bool tr_calls(const cJSON *calls, int i, cJSON *msg, struct call_memo *memo,
                     struct srv_err *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(calls))
        return srv_bad(e, param, "'%s' must be an array, got %s", param, srv_type_name(calls));
    cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
    if (!arr) return oom_false(e);
    int j = 0;
    for (const cJSON *c = calls->child; c; c = c->next, j++) {
        const cJSON *fn = cJSON_IsObject(c) ? srv_field(c, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? srv_field(fn, "name") : NULL;
        const cJSON *args = cJSON_IsObject(fn) ? srv_field(fn, "arguments") : NULL;
        const cJSON *id = cJSON_IsObject(c) ? srv_field(c, "id") : NULL;
        if (!cJSON_IsString(name) || !name->valuestring[0] ||
            strlen(name->valuestring) > SRV_TOOL_NAME_MAX ||
            (args && !cJSON_IsObject(args) && !cJSON_IsString(args)) ||
            (id && !cJSON_IsString(id)))
            return srv_bad(e, param, "'%s[%d]' must be {\"function\": {\"name\": string, "
                           "\"arguments\": object}}", param, j);
        char idbuf[40];
        if (id && id->valuestring[0])
            snprintf(idbuf, sizeof(idbuf), "%.39s", id->valuestring);
        else
            snprintf(idbuf, sizeof(idbuf), "call_%d_%d", i, j);
        char *atext = !args ? strdup("{}")
                      : cJSON_IsString(args) ? strdup(args->valuestring)
                                             : cJSON_PrintUnformatted(args);
        cJSON *o = cJSON_CreateObject();
        cJSON *f = o ? cJSON_AddObjectToObject(o, "function") : NULL;
        bool ok = atext && f && cJSON_AddStringToObject(o, "id", idbuf) &&
                  cJSON_AddStringToObject(o, "type", "function") &&
                  cJSON_AddStringToObject(f, "name", name->valuestring) &&
                  cJSON_AddStringToObject(f, "arguments", atext);
        free(atext);
        if (o) cJSON_AddItemToArray(arr, o);
        if (!ok) return oom_false(e);
        if (memo->n < OL_MAX_CALLS) {
            snprintf(memo->id[memo->n], sizeof(memo->id[0]), "%s", idbuf);
            snprintf(memo->name[memo->n], sizeof(memo->name[0]), "%s", name->valuestring);
            memo->answered[memo->n] = false;
            memo->n++;
        }
    }
    return true;
}

/* The id a tool result answers: its own tool_call_id, else the first
 * unanswered call of its tool_name, else the first unanswered call. */
static void result_id(const cJSON *m, struct call_memo *memo, char *out, size_t cap) {
    const cJSON *id = srv_field(m, "tool_call_id");
    if (cJSON_IsString(id) && id->valuestring[0]) {
        snprintf(out, cap, "%s", id->valuestring);
        for (int k = 0; k < memo->n; k++)
            if (!strcmp(memo->id[k], out)) memo->answered[k] = true;
        return;
    }
    const cJSON *tn = srv_field(m, "tool_name");
    if (!cJSON_IsString(tn)) tn = srv_field(m, "name");
    int pick = -1;
    for (int k = 0; k < memo->n && pick < 0; k++)
        if (!memo->answered[k] && cJSON_IsString(tn) && !strcmp(memo->name[k], tn->valuestring))
            pick = k;
    for (int k = 0; k < memo->n && pick < 0; k++)
        if (!memo->answered[k]) pick = k;
    if (pick >= 0) {
        memo->answered[pick] = true;
        snprintf(out, cap, "%s", memo->id[pick]);
    } else {
        snprintf(out, cap, "%s", cJSON_IsString(tn) ? tn->valuestring : "call_0");
    }
}

static bool tr_messages(const cJSON *msgs, cJSON *out, struct srv_err *e) {
    if (!cJSON_IsArray(msgs))
        return srv_bad(e, "messages", "'messages' must be an array, got %s", srv_type_name(msgs));
    struct call_memo *memo = calloc(1, sizeof(*memo));
    if (!memo) return oom_false(e);
    bool ok = false;
    int i = 0;
    for (const cJSON *m = msgs->child; m; m = m->next, i++) {
        char param[64];
        snprintf(param, sizeof(param), "messages[%d]", i);
        if (!cJSON_IsObject(m)) {
            srv_bad(e, param, "'%s' must be an object, got %s", param, srv_type_name(m));
            goto out;
        }
        const cJSON *role = srv_field(m, "role");
        snprintf(param, sizeof(param), "messages[%d].role", i);
        if (!cJSON_IsString(role)) {
            srv_bad(e, param, "'%s' must be a string", param);
            goto out;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "tool")) {
            srv_bad(e, param, "'%s' must be one of system, user, assistant, tool; got '%.40s'",
                    param, r);
            goto out;
        }
        snprintf(param, sizeof(param), "messages[%d].images", i);
        if (!images_refused(m, param, e)) goto out;
        const cJSON *content = srv_field(m, "content");
        snprintf(param, sizeof(param), "messages[%d].content", i);
        if (content && !cJSON_IsString(content)) {
            srv_bad(e, param, "'%s' must be a string, got %s", param, srv_type_name(content));
            goto out;
        }
        cJSON *o = cJSON_CreateObject();
        if (!o) {
            srv_oom(e);
            goto out;
        }
        cJSON_AddItemToArray(out, o);
        if (!cJSON_AddStringToObject(o, "role", r) ||
            !cJSON_AddStringToObject(o, "content", content ? content->valuestring : "")) {
            srv_oom(e);
            goto out;
        }
        const cJSON *calls = srv_field(m, "tool_calls");
        if (calls) {
            if (strcmp(r, "assistant") != 0) {
                snprintf(param, sizeof(param), "messages[%d].tool_calls", i);
                srv_bad(e, param, "'%s' is only allowed on assistant messages", param);
                goto out;
            }
            if (!tr_calls(calls, i, o, memo, e)) goto out;
        }
        if (!strcmp(r, "tool")) {
            char id[SRV_TOOL_NAME_MAX + 40];
            result_id(m, memo, id, sizeof(id));
            if (!cJSON_AddStringToObject(o, "tool_call_id", id)) {
                srv_oom(e);
                goto out;
            }
        }
        /* "thinking" of earlier assistant turns is not shown again (the
         * templates drop past thoughts) */
    }
    ok = true;
out:
    free(memo);
    return ok;
}

/* tools: Ollama's function tools are OpenAI's; "type" may be left out. */
static bool tr_tools(const cJSON *tools, cJSON *cb, struct srv_err *e) {
    if (!cJSON_IsArray(tools))
        return srv_bad(e, "tools", "'tools' must be an array of function tools, got %s",
                       srv_type_name(tools));
    if (!tools->child) return true;
    cJSON *arr = cJSON_AddArrayToObject(cb, "tools");
    if (!arr) return oom_false(e);
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        char param[48];
        snprintf(param, sizeof(param), "tools[%d]", i);
        const cJSON *type = cJSON_IsObject(t) ? srv_field(t, "type") : NULL;
        const cJSON *fn = cJSON_IsObject(t) ? srv_field(t, "function") : NULL;
        if (!cJSON_IsObject(fn) ||
            (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))))
            return srv_bad(e, param, "'%s' must be {\"type\": \"function\", \"function\": "
                           "{\"name\", \"description\", \"parameters\"}}", param);
        cJSON *o = cJSON_CreateObject();
        cJSON *f = o ? cJSON_AddObjectToObject(o, "function") : NULL;
        if (o) cJSON_AddItemToArray(arr, o);
        if (!f || !cJSON_AddStringToObject(o, "type", "function")) return oom_false(e);
        /* the function's own fields go through as they are: the chat
         * parser checks them (name, description, parameters) */
        static const char *const keep[] = {"name", "description", "parameters"};
        for (int k = 0; k < 3; k++) {
            const cJSON *v = srv_field(fn, keep[k]);
            if (!v) continue;
            cJSON *d = cJSON_Duplicate(v, true);
            if (!d) return oom_false(e);
            cJSON_AddItemToObject(f, keep[k], d);
        }
    }
    return true;
}

/* format: "" or absent (text), "json" (any JSON object), or a JSON Schema. */
static bool tr_format(const cJSON *fmt, cJSON *cb, struct srv_err *e) {
    if (!fmt) return true;
    if (cJSON_IsString(fmt)) {
        if (!fmt->valuestring[0]) return true;
        if (strcmp(fmt->valuestring, "json") != 0)
            return srv_bad(e, "format", "invalid format '%.40s': expected \"json\" or a JSON "
                           "Schema object", fmt->valuestring);
        cJSON *rf = cJSON_AddObjectToObject(cb, "response_format");
        return (rf && cJSON_AddStringToObject(rf, "type", "json_object")) || oom_false(e);
    }
    if (!cJSON_IsObject(fmt))
        return srv_bad(e, "format", "'format' must be \"json\" or a JSON Schema object, got %s",
                       srv_type_name(fmt));
    cJSON *rf = cJSON_AddObjectToObject(cb, "response_format");
    cJSON *js = rf ? cJSON_AddObjectToObject(rf, "json_schema") : NULL;
    cJSON *schema = js ? cJSON_Duplicate(fmt, true) : NULL;
    if (!schema || !cJSON_AddStringToObject(rf, "type", "json_schema") ||
        !cJSON_AddStringToObject(js, "name", "format")) {
        cJSON_Delete(schema);
        return oom_false(e);
    }
    cJSON_AddItemToObject(js, "schema", schema);
    return true;
}

// ----------------------------------------------------------------------------
// options

struct ol_opts {
    long long num_predict; /* <= 0: until the context is full */
    long long num_ctx;     /* 0 = the server's */
    bool has_seed;
    long long seed;
    struct anvil_sampler_params s; /* Ollama's defaults, then the options */
};

static bool opt_num(const cJSON *o, const char *key, float *out, struct srv_err *e) {
    const cJSON *v = srv_field(o, key);
    if (!v) return true;
    char param[48];
    snprintf(param, sizeof(param), "options.%s", key);
    if (!cJSON_IsNumber(v))
        return srv_bad(e, param, "option \"%s\" must be a number, got %s", key, srv_type_name(v));
    if (v->valuedouble != v->valuedouble || v->valuedouble > 1e30 || v->valuedouble < -1e30)
        return srv_bad(e, param, "option \"%s\" is out of range", key);
    *out = (float)v->valuedouble;
    return true;
}

static bool opt_int(const cJSON *o, const char *key, long long lo, long long hi, long long *out,
                    bool *present, struct srv_err *e) {
    const cJSON *v = srv_field(o, key);
    if (present) *present = false;
    if (!v) return true;
    char param[48];
    snprintf(param, sizeof(param), "options.%s", key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
    /* the range before any conversion: a double outside long long's is
     * undefined behaviour to convert (found by fuzz_ollama) */
    if (!cJSON_IsNumber(v) || !isfinite(d) || d != floor(d))
        return srv_bad(e, param, "option \"%s\" must be an integer, got %s", key,
                       cJSON_IsNumber(v) ? "a fraction" : srv_type_name(v));
    if (d < (double)lo || d > (double)hi)
        return srv_bad(e, param, "option \"%s\" must be between %lld and %lld", key, lo, hi);
    *out = (long long)d;
    if (present) *present = true;
    return true;
}

/* options -> o (and its stop strings into cb's "stop"). Unknown options
 * (num_gpu, num_thread, mirostat, ...) are ignored, as Ollama ignores
 * what its runner does not use. */
static bool parse_options(const struct srv_limits *lim, const cJSON *opts, cJSON *cb,
                          struct ol_opts *o, struct srv_err *e) {
    memset(o, 0, sizeof(*o));
    o->s.temperature = 0.8f;
    o->s.top_k = 40;
    o->s.top_p = 0.9f;
    o->s.min_p = 0.0f;
    o->s.repeat_penalty = 1.1f;
    o->s.repeat_last_n = 64;
    if (!opts) return true;
    if (!cJSON_IsObject(opts))
        return srv_bad(e, "options", "'options' must be an object, got %s", srv_type_name(opts));
    long long v = 0;
    bool present = false;
    if (!opt_int(opts, "num_predict", -2, 9007199254740991LL, &o->num_predict, NULL, e))
        return false;
    if (!opt_int(opts, "num_ctx", 1, 1 << 30, &o->num_ctx, NULL, e)) return false;
    if (o->num_ctx > lim->n_ctx)
        return srv_bad(e, "options.num_ctx", "num_ctx %lld is over this server's context of %d "
                       "tokens (anvil serve --ctx): ask for %d or fewer", o->num_ctx,
                       (int)lim->n_ctx, (int)lim->n_ctx);
    if (!opt_num(opts, "temperature", &o->s.temperature, e)) return false;
    if (!opt_num(opts, "top_p", &o->s.top_p, e)) return false;
    if (!opt_num(opts, "min_p", &o->s.min_p, e)) return false;
    if (!opt_num(opts, "repeat_penalty", &o->s.repeat_penalty, e)) return false;
    if (!opt_num(opts, "presence_penalty", &o->s.presence_penalty, e)) return false;
    if (!opt_num(opts, "frequency_penalty", &o->s.frequency_penalty, e)) return false;
    if (!opt_int(opts, "top_k", 0, 1 << 30, &v, &present, e)) return false;
    if (present) o->s.top_k = (int32_t)(v > lim->n_vocab ? lim->n_vocab : v);
    if (!opt_int(opts, "repeat_last_n", -1, 1 << 30, &v, &present, e)) return false;
    if (present) o->s.repeat_last_n = (int32_t)(v < 0 ? lim->n_ctx : v); /* -1 = num_ctx */
    /* seed: -1 (Ollama's default) or any negative = a fresh one */
    if (!opt_int(opts, "seed", -9007199254740991LL, 9007199254740991LL, &o->seed, &present, e))
        return false;
    o->has_seed = present && o->seed >= 0;
    if (o->s.top_p == 0.0f) { /* only the most likely token, as with OpenAI's top_p 0 */
        o->s.top_p = 1.0f;
        o->s.top_k = 1;
    }
    const cJSON *stop = srv_field(opts, "stop");
    if (stop) {
        if (!cJSON_IsArray(stop) && !cJSON_IsString(stop))
            return srv_bad(e, "options.stop", "option \"stop\" must be an array of strings, "
                           "got %s", srv_type_name(stop));
        cJSON *d = cJSON_Duplicate(stop, true);
        if (!d) return oom_false(e);
        cJSON_AddItemToObject(cb, "stop", d);
    }
    return true;
}

/* After srv_parse_request_json: the sampler and the completion's length. */
static bool apply_options(const struct srv_limits *lim, const struct ol_opts *o,
                          struct srv_req *r, struct srv_err *e) {
    /* field by field: the parser's values stay for every sampler field
     * Ollama has no option for (their neutral defaults are the parser's) */
    struct anvil_sampler_params *p = &r->sampling;
    p->temperature = o->s.temperature;
    p->top_k = o->s.top_k;
    p->top_p = o->s.top_p;
    p->min_p = o->s.min_p;
    p->repeat_penalty = o->s.repeat_penalty;
    p->repeat_last_n = o->s.repeat_last_n;
    p->presence_penalty = o->s.presence_penalty;
    p->frequency_penalty = o->s.frequency_penalty;
    if (o->has_seed) p->seed = (uint64_t)o->seed; /* else the server's default or a fresh one */
    char msg[160];
    if (anvil_sampler_params_check(&r->sampling, msg, sizeof(msg)) != ANVIL_OK)
        return srv_bad(e, "options", "invalid options: %s", msg);
    int64_t limit = lim->n_ctx;
    if (lim->kv_tokens > 0 && lim->kv_tokens < limit) limit = lim->kv_tokens;
    if (o->num_ctx > 0 && o->num_ctx < limit) limit = o->num_ctx;
    if (r->n_prompt >= limit)
        return srv_too_long(e, "options.num_ctx", limit, "prompt is", r->n_prompt);
    int64_t rest = limit - r->n_prompt;
    r->max_tokens = (int32_t)(o->num_predict > 0 && o->num_predict < rest ? o->num_predict : rest);
    return true;
}

// ----------------------------------------------------------------------------
// the request

/* think: true/false, or "high"/"medium"/"low" (gpt-oss's levels: on). */
static bool parse_think(const struct srv_limits *lim, const cJSON *root, const char *model,
                        cJSON *cb, struct srv_err *e) {
    const cJSON *t = srv_field(root, "think");
    if (!t) return true;
    bool on;
    const char *level = NULL;
    if (cJSON_IsBool(t)) {
        on = cJSON_IsTrue(t);
    } else if (cJSON_IsString(t) && (!strcmp(t->valuestring, "high") ||
                                     !strcmp(t->valuestring, "medium") ||
                                     !strcmp(t->valuestring, "low"))) {
        on = true;
        level = t->valuestring;
    } else {
        return srv_bad(e, "think", "'think' must be true, false, \"high\", \"medium\" or "
                       "\"low\"");
    }
    if (lim->outfmt.reasoning_format == SRV_REASONING_NONE) {
        /* Ollama's answer for a model without a thinking capability */
        if (on) return srv_bad(e, "think", "\"%.100s\" does not support thinking", model);
        return true;
    }
    /* a level is the template's reasoning_effort (gpt-oss's); think false
     * closes a thought the template opens anyway at once (budget 0) */
    if (level && !cJSON_AddStringToObject(cb, "reasoning_effort", level)) return oom_false(e);
    if (!on && !cJSON_AddNumberToObject(cb, "reasoning_budget", 0)) return oom_false(e);
    cJSON *kw = cJSON_AddObjectToObject(cb, "chat_template_kwargs");
    return (kw && cJSON_AddBoolToObject(kw, "enable_thinking", on)) || oom_false(e);
}

/* The keep_alive of a load-only call: 0 unloads. */
static bool keep_alive_zero(const cJSON *root) {
    const cJSON *k = srv_field(root, "keep_alive");
    if (cJSON_IsNumber(k)) return k->valuedouble == 0;
    if (cJSON_IsString(k)) return !strcmp(k->valuestring, "0") || !strcmp(k->valuestring, "0s");
    return false;
}

/* The body of /api/generate -> cb; *kind chat (templated) or completion
 * (raw, or with a suffix). */
static bool tr_generate(const cJSON *root, cJSON *cb, enum srv_kind *kind, bool *load_only,
                        struct srv_err *e) {
    const char *prompt, *suffix, *system, *tmpl;
    if (!opt_str(root, "prompt", &prompt, e) || !opt_str(root, "suffix", &suffix, e) ||
        !opt_str(root, "system", &system, e) || !opt_str(root, "template", &tmpl, e))
        return false;
    bool raw = false;
    if (!srv_get_bool(root, "raw", &raw, NULL, e)) return false;
    if (!images_refused(root, "images", e)) return false;
    const cJSON *ctx = srv_field(root, "context");
    if (ctx && (!cJSON_IsArray(ctx) || ctx->child))
        return srv_bad(e, "context", "'context' (the deprecated token memory of "
                       "/api/generate) is not supported: send the conversation to /api/chat");
    if (tmpl && tmpl[0] && !raw)
        return srv_bad(e, "template", "'template' is not supported: anvil renders the model's "
                       "own chat template (send a templated prompt with \"raw\": true)");
    if (!prompt || !prompt[0]) {
        if (suffix && suffix[0])
            return srv_bad(e, "prompt", "'prompt' is required with 'suffix'");
        *load_only = true;
        return true;
    }
    if (raw || (suffix && suffix[0])) {
        /* raw: the prompt as it is (system and template do not apply) */
        *kind = SRV_KIND_COMPLETION;
        if (!cJSON_AddStringToObject(cb, "prompt", prompt)) return oom_false(e);
        if (suffix && suffix[0] && !cJSON_AddStringToObject(cb, "suffix", suffix))
            return oom_false(e);
        return true;
    }
    *kind = SRV_KIND_CHAT;
    cJSON *msgs = cJSON_AddArrayToObject(cb, "messages");
    if (!msgs) return oom_false(e);
    if (system && system[0]) {
        cJSON *m = cJSON_CreateObject();
        if (!m) return oom_false(e);
        cJSON_AddItemToArray(msgs, m);
        if (!cJSON_AddStringToObject(m, "role", "system") ||
            !cJSON_AddStringToObject(m, "content", system))
            return oom_false(e);
    }
    cJSON *m = cJSON_CreateObject();
    if (!m) return oom_false(e);
    cJSON_AddItemToArray(msgs, m);
    if (!cJSON_AddStringToObject(m, "role", "user") ||
        !cJSON_AddStringToObject(m, "content", prompt))
        return oom_false(e);
    return true;
}

bool srv_ollama_parse(const struct srv_limits *lim, bool generate, const char *body,
                      size_t len, struct srv_req *out, struct srv_ollama_req *o,
                      struct srv_err *e) {
    memset(out, 0, sizeof(*out));
    memset(o, 0, sizeof(*o));
    memset(e, 0, sizeof(*e));
    o->generate = generate;
    cJSON *root = parse_body(body, len, e);
    if (!root) return false;
    cJSON *cb = cJSON_CreateObject();
    bool ok = false;
    enum srv_kind kind = SRV_KIND_CHAT;
    struct ol_opts opts;
    if (!cb) {
        srv_oom(e);
        goto out;
    }
    if (!check_model(lim, root, o->model, sizeof(o->model), e)) goto out;
    bool stream = true; /* Ollama streams unless told not to */
    if (!srv_get_bool(root, "stream", &stream, NULL, e)) goto out;
    const cJSON *ka = srv_field(root, "keep_alive");
    if (ka && !cJSON_IsNumber(ka) && !cJSON_IsString(ka)) {
        srv_bad(e, "keep_alive", "'keep_alive' must be a duration (\"5m\") or a number of "
                "seconds, got %s", srv_type_name(ka));
        goto out;
    }
    if (generate) {
        if (!tr_generate(root, cb, &kind, &o->load_only, e)) goto out;
    } else {
        const cJSON *msgs = srv_field(root, "messages");
        if (!msgs || (cJSON_IsArray(msgs) && !msgs->child)) {
            o->load_only = true;
        } else {
            cJSON *arr = cJSON_AddArrayToObject(cb, "messages");
            if (!arr) {
                srv_oom(e);
                goto out;
            }
            if (!tr_messages(msgs, arr, e)) goto out;
        }
        const cJSON *tools = srv_field(root, "tools");
        if (tools && !tr_tools(tools, cb, e)) goto out;
        /* extension: OpenAI's tool_choice, to force a call (Ollama has none) */
        const cJSON *tc = srv_field(root, "tool_choice");
        if (tc) {
            cJSON *d = cJSON_Duplicate(tc, true);
            if (!d) {
                srv_oom(e);
                goto out;
            }
            cJSON_AddItemToObject(cb, "tool_choice", d);
        }
    }
    if (!parse_options(lim, srv_field(root, "options"), cb, &opts, e)) goto out;
    if (!tr_format(srv_field(root, "format"), cb, e)) goto out;
    if (kind == SRV_KIND_CHAT && !parse_think(lim, root, o->model, cb, e)) goto out;
    bool logprobs = false;
    if (!srv_get_bool(root, "logprobs", &logprobs, NULL, e)) goto out;
    long long top = 0;
    bool has_top = false;
    if (!srv_get_int(root, "top_logprobs", 0, ANVIL_MAX_TOP_LOGPROBS, &top, &has_top, e))
        goto out;
    if (o->load_only) {
        o->unload = keep_alive_zero(root);
        ok = true;
        goto out;
    }
    if (logprobs) {
        /* the chat parser counts alternatives per token; completions take
         * their number as "logprobs" */
        if (kind == SRV_KIND_CHAT) {
            if (!cJSON_AddBoolToObject(cb, "logprobs", true) ||
                (has_top && !cJSON_AddNumberToObject(cb, "top_logprobs", (double)top))) {
                srv_oom(e);
                goto out;
            }
        } else if (!cJSON_AddNumberToObject(cb, "logprobs", (double)(top > 5 ? 5 : top))) {
            srv_oom(e);
            goto out;
        }
    }
    if (!cJSON_AddBoolToObject(cb, "stream", stream)) {
        srv_oom(e);
        goto out;
    }
    if (!srv_parse_request_json(lim, kind, cb, out, e)) goto out;
    if (!apply_options(lim, &opts, out, e)) {
        srv_req_free(out);
        goto out;
    }
    ok = true;
out:
    cJSON_Delete(cb);
    cJSON_Delete(root);
    return ok;
}

// ----------------------------------------------------------------------------
// the dialect: per-request state

struct ol_state {
    bool generate;
    bool logprobs;
    char model[160];
    double t0;      /* the request arrived (monotonic s) */
    double t_sub;   /* submitted to the engine */
    double t_first; /* the first output part (0 = none yet) */
    /* the call being streamed: sent whole at its end */
    bool in_call;
    int call_index;
    char call_id[40];
    char call_name[SRV_TOOL_NAME_MAX + 1];
    struct sbuf args;
};

/* The state srv_ollama_* hands to make_state: srv_generate calls
 * make_state on the thread that called it, before it returns, and
 * make_state's signature takes no argument. */
static _Thread_local struct ol_state *pending;

static void *ol_make_state(void) {
    struct ol_state *st = pending;
    pending = NULL;
    if (!st) {
        st = calloc(1, sizeof(*st));
        if (!st) return NULL;
        st->t0 = time_now_s();
        sb_init(&st->args);
    }
    st->t_sub = time_now_s();
    return st;
}

static void ol_free_state(void *p) {
    struct ol_state *st = p;
    if (!st) return;
    sb_free(&st->args);
    free(st);
}

// ----------------------------------------------------------------------------
// the dialect: shapes

static void ol_error(struct sbuf *b, const struct srv_err *e) {
    sb_puts(b, "{\"error\":");
    sb_json_str(b, e->message, strlen(e->message));
    sb_puts(b, "}");
}

/* {"model": ..., "created_at": ... (no closing brace) */
static void head(struct sbuf *b, const struct ol_state *st, const struct srv_gen_view *v) {
    const char *m = st && st->model[0] ? st->model : v->ri->model_id;
    sb_puts(b, "{\"model\":");
    sb_json_str(b, m, strlen(m));
    sb_puts(b, ",\"created_at\":");
    put_now(b);
}

static void logprobs_array(struct sbuf *b, const struct srv_gen_view *v,
                           const struct srv_tok *toks, int32_t n) {
    struct sbuf s;
    sb_init(&s);
    sb_puts(b, "[");
    for (int32_t i = 0; i < n; i++) {
        const struct srv_tok *t = &toks[i];
        if (!srv_token_piece(v->ri->model, t->token, &s)) b->oom = true;
        sb_puts(b, i ? ",{\"token\":" : "{\"token\":");
        sb_json_str(b, s.p, s.len);
        sb_puts(b, ",\"logprob\":");
        sb_json_num(b, t->logprob);
        int32_t k = t->n_top < v->ri->top_logprobs ? t->n_top : v->ri->top_logprobs;
        if (k > 0) {
            sb_puts(b, ",\"top_logprobs\":[");
            for (int32_t j = 0; j < k; j++) {
                if (!srv_token_piece(v->ri->model, t->top_tokens[j], &s)) b->oom = true;
                sb_puts(b, j ? ",{\"token\":" : "{\"token\":");
                sb_json_str(b, s.p, s.len);
                sb_puts(b, ",\"logprob\":");
                sb_json_num(b, t->top_logprobs[j]);
                sb_puts(b, "}");
            }
            sb_puts(b, "]");
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
    sb_free(&s);
}

/* A tool call as Ollama shows it; false when the arguments are not a
 * whole JSON object (a call cut by num_predict): nothing written then. */
static bool call_json(struct sbuf *b, int index, const char *id, const char *name,
                      const char *args, size_t n) {
    cJSON *a = n ? cJSON_ParseWithLength(args, n) : cJSON_CreateObject();
    /* printed again, unformatted: the model's newlines inside the object
     * would break a newline-delimited stream */
    char *text = cJSON_IsObject(a) && sb_utf8_check(args, n) == n ? cJSON_PrintUnformatted(a)
                                                                   : NULL;
    cJSON_Delete(a);
    if (!text) return false;
    sb_puts(b, "{\"id\":");
    sb_json_str(b, id, strlen(id));
    sb_printf(b, ",\"function\":{\"index\":%d,\"name\":", index);
    sb_json_str(b, name, strlen(name));
    sb_puts(b, ",\"arguments\":");
    sb_puts(b, text);
    sb_puts(b, "}}");
    free(text);
    return true;
}

/* One streamed line of text (content or thinking). */
static void text_line(struct sbuf *b, const struct srv_gen_view *v, const struct ol_state *st,
                      bool thinking, const char *s, size_t n, const struct srv_tok *toks,
                      int32_t n_toks) {
    head(b, st, v);
    if (st->generate) {
        sb_puts(b, ",\"response\":");
        if (thinking) {
            sb_puts(b, "\"\",\"thinking\":");
        }
        sb_json_str(b, s, n);
    } else {
        sb_puts(b, ",\"message\":{\"role\":\"assistant\",\"content\":");
        if (thinking) sb_puts(b, "\"\",\"thinking\":");
        sb_json_str(b, s, n);
        sb_puts(b, "}");
    }
    if (st->logprobs && n_toks > 0) {
        sb_puts(b, ",\"logprobs\":");
        logprobs_array(b, v, toks, n_toks);
    }
    sb_puts(b, ",\"done\":false}\n");
}

/* The current call, whole, as one line (or its text as content when it
 * is not a whole object). */
static void flush_call(struct sbuf *b, const struct srv_gen_view *v, struct ol_state *st) {
    if (!st->in_call) return;
    st->in_call = false;
    if (st->generate) return;
    struct sbuf line;
    sb_init(&line);
    head(&line, st, v);
    sb_puts(&line, ",\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[");
    bool ok = call_json(&line, st->call_index, st->call_id, st->call_name, st->args.p,
                        st->args.len);
    sb_puts(&line, "]},\"done\":false}\n");
    if (ok) {
        sb_put(b, line.p, line.len);
        if (line.oom) b->oom = true;
    } else if (st->args.len) {
        text_line(b, v, st, false, st->args.p, st->args.len, NULL, 0);
    }
    sb_free(&line);
    sb_clear(&st->args);
}

static void ol_stream_start(struct sbuf *b, const struct srv_gen_view *v) {
    (void)b; /* Ollama's stream has no opening line */
    struct ol_state *st = v->state;
    if (st) st->logprobs = v->req && v->req->logprobs;
}

static void ol_stream_part(struct sbuf *b, const struct srv_gen_view *v, int choice,
                           const struct srv_part *p, const struct srv_tok *toks, int32_t n_toks) {
    (void)choice;
    struct ol_state *st = v->state;
    if (!st) {
        b->oom = true;
        return;
    }
    if (st->t_first == 0) st->t_first = time_now_s();
    switch (p->kind) {
    case SRV_PART_CONTENT:
    case SRV_PART_REASONING:
        if (p->n == 0 && n_toks == 0) return;
        text_line(b, v, st, p->kind == SRV_PART_REASONING, p->text, p->n, toks, n_toks);
        return;
    case SRV_PART_CALL_BEGIN:
        flush_call(b, v, st);
        st->in_call = true;
        st->call_index = p->call_index;
        snprintf(st->call_id, sizeof(st->call_id), "%s", p->id ? p->id : "call_0");
        snprintf(st->call_name, sizeof(st->call_name), "%s", p->name ? p->name : "");
        sb_clear(&st->args);
        return;
    case SRV_PART_CALL_ARGS:
        if (st->in_call) sb_put(&st->args, p->text, p->n);
        return;
    case SRV_PART_CALL_END:
        flush_call(b, v, st);
        return;
    }
}

static void ol_stream_error(struct sbuf *b, const struct srv_gen_view *v,
                            const struct srv_err *e) {
    (void)v;
    ol_error(b, e);
    sb_puts(b, "\n");
}

static const char *done_reason(const struct srv_choice *c) {
    if (c && c->finish && !strcmp(c->finish, "length")) return "length";
    return "stop";
}

static long long ns(double s) {
    long long v = (long long)(s * 1e9);
    return v > 0 ? v : 1; /* never 0: clients divide by these */
}

/* The counts and durations of the final object (no braces). */
static void stats(struct sbuf *b, const struct ol_state *st, const struct srv_choice *c,
                  const struct srv_usage *u) {
    double now = time_now_s();
    double t0 = st ? st->t0 : now, t_sub = st ? st->t_sub : now;
    int32_t n_prompt = u ? u->n_prompt : 0, n_gen = u ? u->n_gen : (c ? c->n_gen : 0);
    double gen = now - t_sub, prompt_s;
    if (u && u->prefill_s > 0) { /* the engine's measured times */
        sb_printf(b, ",\"done_reason\":\"%s\",\"total_duration\":%lld,\"load_duration\":%lld,"
                  "\"prompt_eval_count\":%d,\"prompt_eval_duration\":%lld,\"eval_count\":%d,"
                  "\"eval_duration\":%lld",
                  done_reason(c), ns(now - t0), ns(t_sub - t0 + u->queue_s), (int)n_prompt,
                  ns(u->prefill_s), (int)n_gen, ns(u->decode_s));
        return;
    }
    if (st && st->t_first > 0) {
        prompt_s = st->t_first - t_sub;
    } else {
        /* a whole answer has no first-part time: the generation's time
         * split by tokens, a prompt token counted as a tenth of a
         * generated one (prefill runs batched) */
        double wp = (double)(n_prompt - (u ? u->n_cached : 0)) * 0.1, wg = (double)n_gen;
        prompt_s = wp + wg > 0 ? gen * wp / (wp + wg) : gen;
    }
    sb_printf(b, ",\"done_reason\":\"%s\",\"total_duration\":%lld,\"load_duration\":%lld,"
              "\"prompt_eval_count\":%d,\"prompt_eval_duration\":%lld,\"eval_count\":%d,"
              "\"eval_duration\":%lld",
              done_reason(c), ns(now - t0), ns(t_sub - t0), (int)n_prompt, ns(prompt_s),
              (int)n_gen, ns(gen - prompt_s));
}

static void ol_stream_end(struct sbuf *b, const struct srv_gen_view *v,
                          const struct srv_choice *choices, int n_choices,
                          const struct srv_usage *u) {
    struct ol_state *st = v->state;
    if (st) flush_call(b, v, st);
    head(b, st, v);
    if (st && st->generate)
        sb_puts(b, ",\"response\":\"\"");
    else
        sb_puts(b, ",\"message\":{\"role\":\"assistant\",\"content\":\"\"}");
    sb_puts(b, ",\"done\":true");
    stats(b, st, n_choices > 0 ? &choices[0] : NULL, u);
    sb_puts(b, "}\n");
}

static void ol_full(struct sbuf *b, const struct srv_gen_view *v,
                    const struct srv_choice *choices, int n_choices,
                    const struct srv_usage *u) {
    struct ol_state *st = v->state;
    const struct srv_choice *c = n_choices > 0 ? &choices[0] : NULL;
    bool generate = st && st->generate;
    /* calls whose arguments are not a whole object are given as text */
    struct sbuf calls, content;
    sb_init(&calls);
    sb_init(&content);
    if (c) sb_put(&content, c->content ? c->content : "", c->n_content);
    int n_ok = 0;
    for (int i = 0; c && i < c->n_calls; i++) {
        const struct srv_call_out *k = &c->calls[i];
        if (n_ok) sb_puts(&calls, ",");
        size_t before = calls.len;
        if (call_json(&calls, i, k->id, k->name, k->args ? k->args : "", k->n_args)) {
            n_ok++;
        } else {
            calls.len = before;
            if (n_ok) calls.len--; /* the comma */
            if (k->args) sb_put(&content, k->args, k->n_args);
        }
    }
    head(b, st, v);
    const char *text = content.p ? content.p : "";
    if (generate) {
        sb_puts(b, ",\"response\":");
        sb_json_str(b, text, content.len);
        if (c && c->n_reasoning) {
            sb_puts(b, ",\"thinking\":");
            sb_json_str(b, c->reasoning, c->n_reasoning);
        }
    } else {
        sb_puts(b, ",\"message\":{\"role\":\"assistant\",\"content\":");
        sb_json_str(b, text, content.len);
        if (c && c->n_reasoning) {
            sb_puts(b, ",\"thinking\":");
            sb_json_str(b, c->reasoning, c->n_reasoning);
        }
        if (n_ok) {
            sb_puts(b, ",\"tool_calls\":[");
            sb_put(b, calls.p, calls.len);
            sb_puts(b, "]");
        }
        sb_puts(b, "}");
    }
    if (v->req && v->req->logprobs && c && c->toks && c->n_toks > 0) {
        sb_puts(b, ",\"logprobs\":");
        logprobs_array(b, v, c->toks, c->n_toks);
    }
    sb_puts(b, ",\"done\":true");
    stats(b, st, c, u);
    sb_puts(b, "}");
    if (calls.oom || content.oom) b->oom = true;
    sb_free(&calls);
    sb_free(&content);
}

const struct srv_dialect srv_dialect_ollama_chat = {
    .name = "ollama",
    .stream_ctype = "application/x-ndjson",
    .error = ol_error,
    .make_state = ol_make_state,
    .free_state = ol_free_state,
    .stream_start = ol_stream_start,
    .stream_part = ol_stream_part,
    .stream_error = ol_stream_error,
    .stream_end = ol_stream_end,
    .full = ol_full,
};

/* the same functions: the state says which shape (generate) */
const struct srv_dialect srv_dialect_ollama_generate = {
    .name = "ollama",
    .stream_ctype = "application/x-ndjson",
    .error = ol_error,
    .make_state = ol_make_state,
    .free_state = ol_free_state,
    .stream_start = ol_stream_start,
    .stream_part = ol_stream_part,
    .stream_error = ol_stream_error,
    .stream_end = ol_stream_end,
    .full = ol_full,
};

// ----------------------------------------------------------------------------
// the generation routes

static enum MHD_Result send_err(struct srv *s, struct MHD_Connection *c,
                                const struct srv_err *e) {
    struct sbuf b;
    sb_init(&b);
    ol_error(&b, e);
    return srv_send_sbuf(s, c, e->status ? e->status : 500, "application/json", &b, NULL, NULL);
}

/* Ollama's answer to a call with nothing to generate. */
static enum MHD_Result send_load(struct srv *s, struct MHD_Connection *c,
                                 const struct srv_ollama_req *o, bool unload) {
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"model\":");
    sb_json_str(&b, o->model, strlen(o->model));
    sb_puts(&b, ",\"created_at\":");
    put_now(&b);
    if (o->generate)
        sb_puts(&b, ",\"response\":\"\"");
    else
        sb_puts(&b, ",\"message\":{\"role\":\"assistant\",\"content\":\"\"}");
    sb_printf(&b, ",\"done_reason\":\"%s\",\"done\":true}", unload ? "unload" : "load");
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static enum MHD_Result post_gen(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                bool generate) {
    double t0 = time_now_s();
    struct srv_req req;
    struct srv_ollama_req o;
    struct srv_err e;
    const char *body = k->body ? k->body : "";
    if (!srv_ollama_parse(&s->lim, generate, body, k->body_len, &req, &o, &e))
        return send_err(s, c, &e);
    if (o.load_only) {
        /* keep_alive 0 on a load call is Ollama's unload; the model stays */
        return send_load(s, c, &o, o.unload);
    }
    struct ol_state *st = calloc(1, sizeof(*st));
    if (!st) {
        srv_req_free(&req);
        srv_oom(&e);
        return send_err(s, c, &e);
    }
    sb_init(&st->args);
    st->generate = generate;
    st->logprobs = req.logprobs;
    st->t0 = t0;
    snprintf(st->model, sizeof(st->model), "%s", o.model);
    pending = st;
    enum MHD_Result r = srv_generate(s, c, k, &req,
                                     generate ? &srv_dialect_ollama_generate
                                              : &srv_dialect_ollama_chat);
    if (pending == st) { /* srv_generate refused before making a state */
        pending = NULL;
        ol_free_state(st);
    }
    srv_req_free(&req);
    return r;
}

enum MHD_Result srv_ollama_chat(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url) {
    (void)url;
    return post_gen(s, c, k, false);
}

enum MHD_Result srv_ollama_generate(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                    const char *url) {
    (void)url;
    return post_gen(s, c, k, true);
}

// ----------------------------------------------------------------------------
// the model's description: /api/tags, /api/show, /api/ps

/* The model file (found among this process's mappings by the id anvil
 * serve derives from its name: "<id>.gguf"): its size and time. */
struct ol_file {
    long long size;
    time_t mtime;
    bool found;
};

static void model_file(const struct srv *s, struct ol_file *f) {
    memset(f, 0, sizeof(*f));
    f->mtime = (time_t)s->created;
    FILE *fp = fopen("/proc/self/maps", "r");
    if (!fp) return;
    char want[300], line[1200];
    snprintf(want, sizeof(want), "/%s.gguf", s->model_id);
    size_t wn = strlen(want);
    while (fgets(line, sizeof(line), fp)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == ' ')) line[--n] = '\0';
        char *path = strchr(line, '/');
        if (!path || n < wn || strcmp(line + n - wn, want) != 0) continue;
        struct stat sb;
        if (stat(path, &sb) == 0) {
            f->size = (long long)sb.st_size;
            f->mtime = sb.st_mtime;
            f->found = true;
        }
        break;
    }
    fclose(fp);
}

/* A 64-hex-digit identifier of the served file (id, size, time): Ollama
 * clients compare digests; this one is not the file's SHA-256. */
static void put_digest(struct sbuf *b, const struct srv *s, const struct ol_file *f) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s->model_id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    uint64_t st = h ^ (uint64_t)f->size ^ ((uint64_t)f->mtime << 20);
    sb_puts(b, "\"");
    for (int i = 0; i < 4; i++) sb_printf(b, "%016llx", (unsigned long long)core_splitmix64(&st));
    sb_puts(b, "\"");
}

static char *meta(const struct anvil_model *m, const char *key) {
    int32_t n = anvil_model_meta_str(m, key, NULL, 0);
    if (n < 0) return NULL;
    char *v = malloc((size_t)n + 1);
    if (v && anvil_model_meta_str(m, key, v, (size_t)n + 1) != n) {
        free(v);
        v = NULL;
    }
    return v;
}

/* "(135M params)" of anvil_model_desc -> "135M" (Ollama's parameter_size). */
static void param_size(const struct anvil_model *m, char *out, size_t cap) {
    const char *d = anvil_model_desc(m);
    const char *p = d ? strstr(d, " params)") : NULL;
    const char *q = p;
    while (q && q > d && q[-1] != '(') q--;
    if (p && q > d && p > q && (size_t)(p - q) < cap) {
        memcpy(out, q, (size_t)(p - q));
        out[p - q] = '\0';
    } else {
        snprintf(out, cap, "unknown");
    }
}

static void details(struct sbuf *b, const struct anvil_model *m) {
    char *arch = meta(m, "general.architecture");
    char ps[32];
    param_size(m, ps, sizeof(ps));
    const char *q = anvil_type_name(anvil_model_type(m));
    const char *fam = arch ? arch : "unknown";
    sb_puts(b, "{\"parent_model\":\"\",\"format\":\"gguf\",\"family\":");
    sb_json_str(b, fam, strlen(fam));
    sb_puts(b, ",\"families\":[");
    sb_json_str(b, fam, strlen(fam));
    sb_puts(b, "],\"parameter_size\":");
    sb_json_str(b, ps, strlen(ps));
    sb_puts(b, ",\"quantization_level\":");
    sb_json_str(b, q ? q : "unknown", strlen(q ? q : "unknown"));
    sb_puts(b, "}");
    free(arch);
}

/* name, model, size, digest, details (no braces) */
static void model_common(struct sbuf *b, const struct srv *s, const struct ol_file *f) {
    sb_puts(b, "\"name\":");
    display_name(b, s->model_id);
    sb_puts(b, ",\"model\":");
    display_name(b, s->model_id);
    sb_printf(b, ",\"size\":%lld,\"digest\":", f->size);
    put_digest(b, s, f);
    sb_puts(b, ",\"details\":");
    details(b, s->model);
}

enum MHD_Result srv_ollama_tags(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url) {
    (void)k;
    (void)url;
    struct ol_file f;
    model_file(s, &f);
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"models\":[{");
    model_common(&b, s, &f);
    sb_puts(&b, ",\"modified_at\":");
    put_time(&b, f.mtime, 0);
    sb_puts(&b, "}]}");
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

enum MHD_Result srv_ollama_ps(struct srv *s, struct MHD_Connection *c, struct conn *k,
                              const char *url) {
    (void)k;
    (void)url;
    struct ol_file f;
    model_file(s, &f);
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"models\":[{");
    model_common(&b, s, &f);
    /* the model stays loaded for the server's life: a far expiry, as
     * Ollama reports for keep_alive -1 */
    sb_printf(&b, ",\"expires_at\":\"2318-01-01T00:00:00.000000Z\",\"size_vram\":0,"
              "\"context_length\":%d}]}", (int)s->info.n_ctx);
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

enum MHD_Result srv_ollama_version(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url) {
    (void)k;
    (void)url;
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"version\":\"" OL_VERSION "\"}");
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static void info_str(struct sbuf *b, const struct anvil_model *m, const char *key, bool *first) {
    char *v = meta(m, key);
    if (!v) return;
    sb_puts(b, *first ? "" : ",");
    *first = false;
    sb_json_str(b, key, strlen(key));
    sb_puts(b, ":");
    sb_json_str(b, v, strlen(v));
    free(v);
}

enum MHD_Result srv_ollama_show(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url) {
    (void)url;
    struct srv_err e;
    memset(&e, 0, sizeof(e));
    cJSON *root = parse_body(k->body ? k->body : "", k->body_len, &e);
    char name[160];
    if (!root || !check_model(&s->lim, root, name, sizeof(name), &e)) {
        cJSON_Delete(root);
        return send_err(s, c, &e);
    }
    cJSON_Delete(root);
    const struct anvil_model *m = s->model;
    struct ol_file f;
    model_file(s, &f);
    char *arch = meta(m, "general.architecture");
    char *tmpl = meta(m, "tokenizer.chat_template");
    const char *a = arch ? arch : "unknown";
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"license\":\"\",\"modelfile\":");
    {
        struct sbuf mf;
        sb_init(&mf);
        sb_printf(&mf, "# Modelfile of the model anvil serves\nFROM %s\nPARAMETER num_ctx %d\n",
                  s->model_id, (int)s->info.n_ctx);
        sb_json_str(&b, mf.p ? mf.p : "", mf.len);
        if (mf.oom) b.oom = true;
        sb_free(&mf);
    }
    sb_printf(&b, ",\"parameters\":\"num_ctx %d\",\"template\":", (int)s->info.n_ctx);
    sb_json_str(&b, tmpl ? tmpl : "", tmpl ? strlen(tmpl) : 0);
    sb_puts(&b, ",\"details\":");
    details(&b, m);
    sb_puts(&b, ",\"model_info\":{");
    bool first = true;
    info_str(&b, m, "general.architecture", &first);
    info_str(&b, m, "general.name", &first);
    info_str(&b, m, "general.basename", &first);
    info_str(&b, m, "general.size_label", &first);
    info_str(&b, m, "tokenizer.ggml.model", &first);
    info_str(&b, m, "tokenizer.ggml.pre", &first);
    sb_printf(&b, "%s\"%s.context_length\":%d,\"%s.embedding_length\":%d,\"%s.block_count\":%d,"
              "\"%s.vocab_size\":%d}", first ? "" : ",", a, (int)anvil_model_n_ctx_train(m), a,
              (int)anvil_model_n_embd(m), a, (int)anvil_model_n_layer(m), a,
              (int)anvil_model_n_vocab(m));
    /* what the model can do here: every model completes; "tools" when its
     * template shows tools (anvil calls tools on any model, through its
     * own format); "thinking" when the template marks thoughts */
    sb_puts(&b, ",\"capabilities\":[\"completion\"");
    if (tmpl && strstr(tmpl, "tools")) sb_puts(&b, ",\"tools\"");
    if (s->lim.outfmt.reasoning_format != SRV_REASONING_NONE) sb_puts(&b, ",\"thinking\"");
    sb_puts(&b, "],\"modified_at\":");
    put_time(&b, f.mtime, 0);
    sb_puts(&b, "}");
    free(arch);
    free(tmpl);
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

enum MHD_Result srv_ollama_embed(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url) {
    /* /api/embed, and the older /api/embeddings (one prompt): api_embed.c */
    return srv_emb_ollama(s, c, k, !strcmp(url, "/api/embeddings"));
}
