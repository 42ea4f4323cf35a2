/*
 * request.c - JSON body of /v1/completions and /v1/chat/completions ->
 * struct srv_req: the accepted fields, sampling, stop strings, logprobs
 * and the order in which the parts are checked.
 *
 * Reference: the OpenAI API reference (Chat Completions, Completions).
 * Rules kept here:
 *   - unknown top-level fields are ignored, as llama-server and vLLM do,
 *     named in r->ignored (the X-Anvil-Ignored-Fields header) and logged
 *     once per name; with lim->strict (anvil serve --strict) they are
 *     rejected as OpenAI does ("Unrecognized request argument supplied").
 *     Known fields anvil cannot honour (best_of > 1, the
 *     deprecated functions, ...) get a clear 400 instead of being ignored
 *     silently;
 *   - the field types and ranges are checked by the validators of
 *     fields.c (null = absent, no coercion);
 *   - the prompt comes from prompt.c, its fit from fit.c, and the
 *     constraint (response_format, grammar, regex, tool calls) from
 *     structured.c, last: a compile error is only worth the time for a
 *     request that is otherwise fine.
 * Defaults are OpenAI's: temperature 1, top_p 1, no top_k/min_p, max_tokens
 * 16 for completions and "the rest of the context" for chat (fit.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/srv_int.h"

void srv_req_free(struct srv_req *r) {
    if (!r) return;
    anvil_constraint_free(r->constraint);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->think_end);
    free(r->answer_prefix);
    memset(r, 0, sizeof(*r));
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
#define IN 4u /* POST /infill (with every completions field) */
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
    /* POST /infill (llama-server's body; infill.c) */
    {"input_prefix", IN, FLD_USED},
    {"input_suffix", IN, FLD_USED},
    {"input_extra", IN, FLD_USED},
    /* vLLM's: the prompt's token ids in the answer */
    {"return_token_ids", CH | CO, FLD_USED},
    /* vLLM's: the prompt's logprobs (prompt_logprobs in the answer) */
    {"prompt_logprobs", CH | CO, FLD_USED},
    /* llama-server's sampling fields (sampling.c) */
    {"repeat_penalty", CH | CO, FLD_USED},
    {"repeat_last_n", CH | CO, FLD_USED},
    {"typical_p", CH | CO, FLD_USED},
    {"top_n_sigma", CH | CO, FLD_USED},
    {"min_keep", CH | CO, FLD_USED},
    {"dry_multiplier", CH | CO, FLD_USED},
    {"dry_base", CH | CO, FLD_USED},
    {"dry_allowed_length", CH | CO, FLD_USED},
    {"dry_penalty_last_n", CH | CO, FLD_USED},
    {"dry_sequence_breakers", CH | CO, FLD_USED},
    {"xtc_probability", CH | CO, FLD_USED},
    {"xtc_threshold", CH | CO, FLD_USED},
    {"mirostat", CH | CO, FLD_USED},
    {"mirostat_tau", CH | CO, FLD_USED},
    {"mirostat_eta", CH | CO, FLD_USED},
    {"n_probs", CH | CO, FLD_USED},
    {"cache_prompt", CH | CO, FLD_USED},
    {"samplers", CH | CO, FLD_USED},
    {"user", CH | CO, FLD_IGNORED},
    {"metadata", CH, FLD_IGNORED},
    {"store", CH, FLD_IGNORED},
    {"service_tier", CH | CO, FLD_IGNORED},
    {"parallel_tool_calls", CH, FLD_USED},
    /* reasoning (llama-server's names) */
    {"reasoning_format", CH, FLD_USED},
    {"reasoning_budget", CH, FLD_USED},
    /* the chat template's variables (prompt.c) */
    {"chat_template_kwargs", CH, FLD_USED},
    {"reasoning_effort", CH, FLD_USED},
};

/* Unknown field names already logged (once per name and server process). */
#define LOGGED_MAX 256
static pthread_mutex_t logged_mu = PTHREAD_MUTEX_INITIALIZER;
static char logged[LOGGED_MAX][48];
static int n_logged;

static void log_ignored(const char *name) {
    pthread_mutex_lock(&logged_mu);
    bool seen = false;
    for (int i = 0; i < n_logged && !seen; i++) seen = !strcmp(logged[i], name);
    if (!seen && n_logged < LOGGED_MAX) {
        snprintf(logged[n_logged++], sizeof(logged[0]), "%s", name);
        fprintf(stderr, "anvil serve: ignoring unknown request field '%s' (logged once; "
                "--strict refuses it)\n", name);
    }
    pthread_mutex_unlock(&logged_mu);
}

void srv_note_ignored(char *list, size_t cap, const char *name) {
    char clean[48];
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < sizeof(clean); p++)
        clean[k++] = (*p > 0x20 && *p < 0x7f && *p != ',') ? *p : '_';
    clean[k] = 0;
    log_ignored(clean);
    size_t len = strlen(list);
    if (len + (len ? 1 : 0) + k + 1 > cap) return;
    snprintf(list + len, cap - len, "%s%s", len ? "," : "", clean);
}

static bool check_keys(const struct srv_limits *lim, const cJSON *root, unsigned kind_bit,
                       struct srv_req *r, struct srv_err *e) {
    for (const cJSON *c = root->child; c; c = c->next) {
        bool ok = false;
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            if ((fields[i].kinds & kind_bit) && !strcmp(fields[i].name, c->string)) {
                ok = true;
                break;
            }
        if (ok) continue;
        bool other = false; /* a field of the other endpoint: a mistake worth a 400 */
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            other |= !strcmp(fields[i].name, c->string);
        if (!lim->strict && !other) { /* what llama-server and vLLM do; named in a header */
            srv_note_ignored(r->ignored, sizeof(r->ignored), c->string);
            continue;
        }
        char name[48];
        snprintf(name, sizeof(name), "%s", c->string);
        return srv_bad(e, name, "Unrecognized request argument supplied: %s", name);
    }
    return true;
}

/* Fields anvil knows but cannot honour: fine when absent, null or neutral. */
static bool check_unsupported(const cJSON *root, enum srv_kind kind, struct srv_err *e) {
    const cJSON *v; /* logit_bias: parsed with the sampling fields (sampling.c) */
    if (kind == SRV_KIND_CHAT) {
        static const char *const old[] = {"functions", "function_call"};
        for (int i = 0; i < 2; i++)
            if ((v = srv_field(root, old[i])) != NULL && !(cJSON_IsArray(v) && !v->child))
                return srv_bad(e, old[i], "'%s' is deprecated and not supported by anvil: use "
                               "'tools' and 'tool_choice'", old[i]);
    } else {
        long long best_of = 1;
        if (!srv_get_int(root, "best_of", 0, 20, &best_of, NULL, e)) return false;
        if (best_of != 1) return srv_bad(e, "best_of", "'best_of' must be 1 with anvil");
        if ((v = srv_field(root, "suffix")) != NULL && !cJSON_IsString(v))
            return srv_bad(e, "suffix", "'suffix' must be a string, got %s", srv_type_name(v));
    }
    return true;
}

// ----------------------------------------------------------------------------
// stop strings

static bool add_stop(struct srv_req *r, const cJSON *s, struct srv_err *e) {
    if (!cJSON_IsString(s))
        return srv_bad(e, "stop", "'stop' must be a string or an array of strings, got %s",
                       srv_type_name(s));
    size_t n = strlen(s->valuestring);
    if (n == 0) return srv_bad(e, "stop", "'stop' strings must not be empty");
    if (n > SRV_MAX_STOP_LEN)
        return srv_bad(e, "stop", "'stop' strings must be at most %d bytes", SRV_MAX_STOP_LEN);
    if (r->n_stop >= SRV_MAX_STOP)
        return srv_bad(e, "stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
    char *c = strdup(s->valuestring);
    if (!c) {
        srv_oom(e);
        return false;
    }
    r->stop[r->n_stop++] = c;
    return true;
}

static bool parse_stop(const cJSON *root, struct srv_req *r, struct srv_err *e) {
    const cJSON *v = srv_field(root, "stop");
    if (!v) return true;
    if (cJSON_IsString(v)) return add_stop(r, v, e);
    if (!cJSON_IsArray(v))
        return srv_bad(e, "stop", "'stop' must be a string or an array of strings, got %s",
                       srv_type_name(v));
    for (const cJSON *c = v->child; c; c = c->next)
        if (!add_stop(r, c, e)) return false;
    return true;
}

// ----------------------------------------------------------------------------
// sampling and the rest

static bool parse_logprobs(const cJSON *root, enum srv_kind kind, struct srv_req *r,
                           struct srv_err *e) {
    long long v = 0;
    bool present = false;
    if (kind == SRV_KIND_COMPLETION) {
        /* legacy completions: logprobs is the number of alternatives, 0..5 */
        if (!srv_get_int(root, "logprobs", 0, 5, &v, &present, e)) return false;
        r->logprobs = present;
        r->top_logprobs = (int32_t)v;
        return true;
    }
    if (!srv_get_bool(root, "logprobs", &r->logprobs, NULL, e)) return false;
    if (!srv_get_int(root, "top_logprobs", 0, ANVIL_MAX_TOP_LOGPROBS, &v, &present, e)) return false;
    if (present && !r->logprobs)
        return srv_bad(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    r->top_logprobs = (int32_t)v;
    return true;
}

// ----------------------------------------------------------------------------
// reasoning

/* reasoning_format, reasoning_budget and parallel_tool_calls (chat). */
static bool parse_reasoning(const struct srv_limits *lim, const cJSON *root, struct srv_req *r,
                            struct srv_err *e) {
    r->outfmt = lim->outfmt;
    r->reasoning_budget = lim->has_reasoning_budget ? lim->reasoning_budget : -1;
    r->parallel_calls = true;
    const cJSON *rf = srv_field(root, "reasoning_format");
    if (rf) {
        /* llama-server's values: "none" keeps the thought in the content;
         * "auto", "deepseek" and "deepseek-legacy" split it off (anvil's
         * parser is the same for all three) */
        const char *v = cJSON_IsString(rf) ? rf->valuestring : "";
        if (!strcmp(v, "none")) r->outfmt.reasoning_format = SRV_REASONING_NONE;
        else if (strcmp(v, "auto") && strcmp(v, "deepseek") && strcmp(v, "deepseek-legacy"))
            return srv_bad(e, "reasoning_format", "'reasoning_format' must be one of 'none', "
                           "'auto', 'deepseek', 'deepseek-legacy'");
    }
    long long b = 0;
    bool has_b = false;
    if (!srv_get_int(root, "reasoning_budget", -1, 1 << 30, &b, &has_b, e)) return false;
    if (has_b) r->reasoning_budget = (int32_t)b;
    return srv_get_bool(root, "parallel_tool_calls", &r->parallel_calls, NULL, e);
}

/* Whether the prompt's last tokens open a thought (the template wrote
 * "<think>" after the generation prompt, as DeepSeek-R1's does): the
 * output then starts inside it. */
static void find_reasoning_open(const struct srv_limits *lim, struct srv_req *r) {
    r->reasoning_open = false;
    if (lim->outfmt.reasoning_format != SRV_REASONING_THINK || !lim->model || r->n_prompt <= 0)
        return;
    char tail[160];
    size_t n = 0;
    for (int32_t i = r->n_prompt > 6 ? r->n_prompt - 6 : 0; i < r->n_prompt; i++) {
        int32_t k = anvil_token_to_piece(lim->model, r->prompt[i], tail + n,
                                         (int32_t)(sizeof(tail) - 1 - n), true);
        if (k > 0) n += (size_t)k;
    }
    tail[n] = 0;
    while (n && (tail[n - 1] == '\n' || tail[n - 1] == ' ' || tail[n - 1] == '\r')) tail[--n] = 0;
    static const char *const open[] = {"<think>", "<|START_THINKING|>", "[THINK]"};
    for (int i = 0; i < 3; i++) {
        size_t m = strlen(open[i]);
        if (n >= m && !memcmp(tail + n - m, open[i], m)) r->reasoning_open = true;
    }
}

// ----------------------------------------------------------------------------
// the request

static bool parse_json(const struct srv_limits *lim, enum srv_kind kind, bool infill,
                       const cJSON *root, struct srv_req *r, struct srv_err *e);

bool srv_parse_request(const struct srv_limits *lim, enum srv_kind kind, const char *body,
                       size_t len, struct srv_req *r, struct srv_err *e) {
    return srv_parse_request_ex(lim, kind, false, body, len, r, e);
}

bool srv_parse_request_ex(const struct srv_limits *lim, enum srv_kind kind, bool infill,
                          const char *body, size_t len, struct srv_req *r, struct srv_err *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    r->kind = kind;
    if (len == 0) return srv_bad(e, NULL, "the request body is empty: expected a JSON object");
    if (!srv_json_prescan(body, len, e)) return false;
    const char *end = NULL;
    cJSON *root = srv_json_parse(body, len, &end);
    if (!root) {
        /* on failure cJSON points `end` at the error */
        size_t off = (end && end >= body && end <= body + len) ? (size_t)(end - body) : 0;
        return srv_bad(e, NULL, "We could not parse the JSON body of your request: malformed JSON "
                       "near byte %zu", off);
    }
    bool ok = false;
    if (end)
        for (const char *p = end; p < body + len; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
                srv_bad(e, NULL, "We could not parse the JSON body of your request: trailing data "
                        "after the JSON object at byte %zu", (size_t)(p - body));
                goto out;
            }
    if (!cJSON_IsObject(root)) {
        srv_bad(e, NULL, "the request body must be a JSON object, got %s", srv_type_name(root));
        goto out;
    }
    ok = parse_json(lim, kind, infill, root, r, e);
out:
    cJSON_Delete(root);
    return ok;
}

bool srv_parse_request_json(const struct srv_limits *lim, enum srv_kind kind, const cJSON *root,
                            struct srv_req *r, struct srv_err *e) {
    return parse_json(lim, kind, false, root, r, e);
}

/* infill: POST /infill's body (kind is SRV_KIND_COMPLETION) */
static bool parse_json(const struct srv_limits *lim, enum srv_kind kind, bool infill,
                       const cJSON *root, struct srv_req *r, struct srv_err *e) {
    memset(r, 0, sizeof(*r));
    memset(e, 0, sizeof(*e));
    r->kind = kind;
    bool ok = false;
    if (!cJSON_IsObject(root)) {
        srv_bad(e, NULL, "the request body must be a JSON object, got %s", srv_type_name(root));
        goto out;
    }
    if (!check_keys(lim, root, kind == SRV_KIND_CHAT ? CH : infill ? CO | IN : CO, r, e)) goto out;
    if (!check_unsupported(root, kind, e)) goto out;

    const cJSON *model = srv_field(root, "model");
    if (model) {
        if (!cJSON_IsString(model)) {
            srv_bad(e, "model", "'model' must be a string, got %s", srv_type_name(model));
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
    if (!srv_get_int(root, "n", 1, 128, &n, NULL, e)) goto out;
    r->n = (int32_t)n; /* choices: n engine requests from one prompt (generate.c) */
    if (!srv_get_bool(root, "stream", &r->stream, NULL, e)) goto out;
    const cJSON *so = srv_field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            srv_bad(e, "stream_options", "'stream_options' must be an object, got %s",
                    srv_type_name(so));
            goto out;
        }
        if (!r->stream) {
            srv_bad(e, "stream_options", "'stream_options' is only allowed when 'stream' is true");
            goto out;
        }
        for (const cJSON *k = so->child; k; k = k->next)
            if (strcmp(k->string, "include_usage") != 0) {
                srv_bad(e, "stream_options", "Unrecognized stream option: %.40s", k->string);
                goto out;
            }
        if (!srv_get_bool(so, "include_usage", &r->include_usage, NULL, e)) goto out;
    }
    if (!srv_get_bool(root, "ignore_eos", &r->ignore_eos, NULL, e)) goto out;
    if (!srv_get_bool(root, "return_token_ids", &r->return_token_ids, NULL, e)) goto out;
    long long plp = 0;
    if (!srv_get_int(root, "prompt_logprobs", 0, ANVIL_MAX_TOP_LOGPROBS, &plp,
                     &r->prompt_lp, e))
        goto out;
    r->prompt_lp_k = (int32_t)plp;
    /* extensions: speculative decoding per request */
    const cJSON *spec = srv_field(root, "spec");
    if (spec) {
        const char *sv = cJSON_IsString(spec) ? spec->valuestring : NULL;
        if (sv && !strcmp(sv, "off")) r->spec = ANVIL_SPEC_OFF;
        else if (sv && !strcmp(sv, "ngram")) r->spec = ANVIL_SPEC_NGRAM;
        else if (sv && !strcmp(sv, "draft")) r->spec = ANVIL_SPEC_DRAFT;
        else {
            srv_bad(e, "spec", "'spec' must be one of 'off', 'ngram', 'draft'");
            goto out;
        }
    }
    long long spec_k = 0;
    if (!srv_get_int(root, "spec_k", 1, ANVIL_SPEC_K_MAX, &spec_k, NULL, e)) goto out;
    r->spec_k = (int32_t)spec_k;
    long long max_tokens = 0;
    bool has_max = false, has_mct = false;
    /* echo: the prompt with its logprobs; max_tokens 0 asks for it alone */
    if (kind == SRV_KIND_COMPLETION && !srv_get_bool(root, "echo", &r->echo, NULL, e)) goto out;
    if (!srv_get_int(root, "max_tokens", r->echo ? 0 : 1, 1 << 30, &max_tokens, &has_max, e))
        goto out;
    if (kind == SRV_KIND_CHAT) {
        long long mct = 0;
        if (!srv_get_int(root, "max_completion_tokens", 1, 1 << 30, &mct, &has_mct, e)) goto out;
        if (has_mct) {
            if (has_max && mct != max_tokens) {
                srv_bad(e, "max_completion_tokens", "'max_tokens' and 'max_completion_tokens' "
                        "disagree");
                goto out;
            }
            max_tokens = mct;
            has_max = true;
        }
    }
    if (!parse_logprobs(root, kind, r, e)) goto out;
    if (!srv_parse_sampling(lim, root, r, e)) goto out; /* after logprobs: n_probs */
    if (!parse_stop(root, r, e)) goto out;
    struct srv_tools tools = {.mode = SRV_TOOLS_NONE};
    if (kind == SRV_KIND_CHAT && !srv_tools_parse(root, &tools, e)) goto out;
    if (kind == SRV_KIND_CHAT && !parse_reasoning(lim, root, r, e)) goto out;
    if (kind != SRV_KIND_CHAT) r->reasoning_budget = -1; /* raw text: no thought gate */

    /* fill in the middle: POST /infill, or a non-empty suffix */
    const cJSON *suffix = kind == SRV_KIND_COMPLETION ? srv_field(root, "suffix") : NULL;
    bool fim = infill || (suffix && suffix->valuestring[0]);
    /* /infill keeps room for the completion when it trims (srv_fit sets
     * the final value) */
    r->max_tokens = has_max ? (int32_t)max_tokens : 16;
    if (kind == SRV_KIND_CHAT ? !srv_parse_messages(lim, root, &tools, r, e)
        : fim                 ? !srv_parse_infill(lim, root, infill, r, e)
                              : !srv_parse_prompt(lim, root, r, e))
        goto out;
    const char *pname = kind == SRV_KIND_CHAT ? "messages" : infill ? "input_prefix" : "prompt";
    if (r->n_prompt == 0) {
        srv_bad(e, pname, "the prompt is empty");
        goto out;
    }
    if (kind == SRV_KIND_CHAT) find_reasoning_open(lim, r);
    if (!srv_fit(lim, r, pname, has_max, max_tokens, e)) goto out;
    /* last: a compile error is only worth the time for a request that is
     * otherwise fine */
    if (!srv_parse_constraint(lim, root, &tools, r, e)) goto out;
    ok = true;
out:
    if (!ok) {
        enum srv_kind k = r->kind;
        srv_req_free(r);
        r->kind = k;
    }
    return ok;
}
