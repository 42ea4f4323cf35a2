/*
 * structured.c - structured output: response_format (text, json_object,
 * json_schema), the extensions grammar (GBNF) and regex, and the call of
 * a tool choice (toolcall.c) become the request's constraint.
 *
 * Compiled here, before anything is queued, so a schema anvil cannot
 * enforce is a 400 that names the problem; at most one of them per
 * request. Compiled constraints come from the cache (ccache.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

/* response_format {"type": "json_schema", "json_schema": {...}}: the
 * schema's text (malloc'd; "{}", any JSON value, when it has none) */
static char *json_schema_text(const cJSON *js, struct srv_err *e) {
    const char *P = "response_format.json_schema";
    if (!cJSON_IsObject(js)) {
        srv_bad(e, P, "'%s' must be an object with 'name' and 'schema'", P);
        return NULL;
    }
    for (const cJSON *k = js->child; k; k = k->next)
        if (strcmp(k->string, "name") && strcmp(k->string, "schema") &&
            strcmp(k->string, "strict") && strcmp(k->string, "description")) {
            srv_bad(e, P, "'%s': unknown field '%.40s'", P, k->string);
            return NULL;
        }
    const cJSON *name = srv_field(js, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) > 64) {
        srv_bad(e, "response_format.json_schema.name",
                "'response_format.json_schema.name' must be a string of 1 to 64 characters");
        return NULL;
    }
    const cJSON *d = srv_field(js, "description");
    if (d && !cJSON_IsString(d)) {
        srv_bad(e, "response_format.json_schema.description",
                "'response_format.json_schema.description' must be a string");
        return NULL;
    }
    bool strict = false;
    if (!srv_get_bool(js, "strict", &strict, NULL, e)) return NULL;
    const cJSON *schema = srv_field(js, "schema");
    if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema)) {
        srv_bad(e, "response_format.json_schema.schema",
                "'response_format.json_schema.schema' must be a JSON Schema (an object)");
        return NULL;
    }
    char *t = schema ? cJSON_PrintUnformatted(schema) : strdup("{}");
    if (!t) srv_oom(e);
    return t;
}

/* Tokens of text (control tokens parsed) into a malloc'd array. */
static bool tokens_of(const struct srv_limits *lim, const char *text, anvil_token **out,
                      int32_t *n, struct srv_err *e) {
    *out = NULL;
    *n = 0;
    size_t len = strlen(text);
    if (!len) return true;
    anvil_token tmp[256];
    int32_t k = anvil_tokenize(lim->model, text, len, tmp, 256, false, true);
    if (k < 0) {
        srv_err_set(e, 500, "server_error", NULL, NULL, "a format marker is over 256 tokens");
        return false;
    }
    if (!(*out = malloc((size_t)(k ? k : 1) * sizeof(**out)))) return srv_oom(e);
    memcpy(*out, tmp, (size_t)k * sizeof(**out));
    *n = k;
    return true;
}

/* The answer's forced start for a content constraint: harmony's final
 * channel (after the prompt's <|start|>assistant), nothing otherwise. */
static const char *answer_prefix(const struct srv_req *r) {
    return r->outfmt.tool_format == SRV_TOOLFMT_HARMONY ? "<|channel|>final<|message|>" : NULL;
}

/* The prompt's text ends with `close` (trailing white space aside): a
 * thought already closed (Qwen 3's template with enable_thinking false
 * writes an empty one: the model is not offered a second), or gpt-oss's
 * generation prompt. */
static bool prompt_ends_with(const struct srv_limits *lim, const struct srv_req *r,
                             const char *close) {
    /* the last tokens, as many as spell close and some white space (a
     * small vocabulary spells a word in several) */
    size_t m = strlen(close), want = m + 8, got = 0;
    char piece[128], tail[512];
    int32_t i0 = r->n_prompt;
    while (i0 > 0 && r->n_prompt - i0 < 64 && got < want) {
        int32_t k = anvil_token_to_piece(lim->model, r->prompt[--i0], piece, sizeof(piece), true);
        if (k > 0) got += (size_t)k;
    }
    size_t n = 0;
    for (int32_t i = i0; i < r->n_prompt; i++) {
        int32_t k = anvil_token_to_piece(lim->model, r->prompt[i], tail + n,
                                         (int32_t)(sizeof(tail) - 1 - n), true);
        if (k > 0) n += (size_t)k;
    }
    tail[n] = 0;
    while (n && (tail[n - 1] == '\n' || tail[n - 1] == ' ' || tail[n - 1] == '\r')) tail[--n] = 0;
    return n >= m && !memcmp(tail + n - m, close, m);
}

/* gpt-oss: its thought is the analysis channel, which it writes before
 * the answer's channel as trained. After the generation prompt
 * (<|start|>assistant) the model may open it (<|channel|>analysis
 * <|message|>, sharing <|channel|> with the answer's prefix: the gate
 * decides on the next token); the thought ends with <|end|><|start|>
 * assistant (the budget forces it), then the answer's prefix (the final
 * or commentary channel) is forced and the constraint holds after it.
 * Not when the request reads no thoughts (reasoning_format none). */
static bool harmony_gate(const struct srv_limits *lim, struct srv_req *r, bool constrained,
                         struct srv_err *e) {
    static const char open[] = "<|channel|>analysis<|message|>", close[] = "<|end|><|start|>assistant";
    r->think_gate = r->n_answer_prefix > 0;
    if ((!constrained && r->n_answer_prefix == 0) ||
        r->outfmt.reasoning_format != SRV_REASONING_HARMONY ||
        !prompt_ends_with(lim, r, "<|start|>assistant"))
        return true;
    anvil_token tmp[256];
    int32_t k = anvil_tokenize(lim->model, open, strlen(open), tmp, 256, false, true);
    if (k <= 0 || k > 16) return true;
    if (!tokens_of(lim, close, &r->think_end, &r->n_think_end, e)) return false;
    memcpy(r->think_start, tmp, (size_t)k * sizeof(*tmp));
    r->n_think_start = k;
    r->think_gate = true;
    return true;
}

/* The engine's thought gate and answer prefix (guide.h) for the
 * template's reasoning markers: a thought the prompt opened is free
 * text, the constraint (if any) starts after its end marker; the budget
 * forces that marker. prefix: forced at the start of the answer (NULL:
 * none). */
static bool set_gate(const struct srv_limits *lim, struct srv_req *r, const char *prefix,
                     bool constrained, struct srv_err *e) {
    if (!lim->model) return true;
    if (prefix && !tokens_of(lim, prefix, &r->answer_prefix, &r->n_answer_prefix, e))
        return false;
    /* the markers are the template's: it decides, not the request's
     * reasoning_format (the model thinks whatever the client reads) */
    if (lim->outfmt.reasoning_format == SRV_REASONING_HARMONY &&
        r->outfmt.tool_format == SRV_TOOLFMT_HARMONY)
        return harmony_gate(lim, r, constrained, e);
    if (lim->outfmt.reasoning_format != SRV_REASONING_THINK) {
        r->think_gate = r->n_answer_prefix > 0;
        return true;
    }
    const char *open = "<think>", *close = "</think>";
    if (r->outfmt.tool_format == SRV_TOOLFMT_COMMAND_R) {
        open = "<|START_THINKING|>";
        close = "<|END_THINKING|>";
    } else if (r->outfmt.tool_format == SRV_TOOLFMT_MISTRAL) {
        open = "[THINK]";
        close = "[/THINK]";
    }
    if (!r->reasoning_open) {
        /* the prompt did not open a thought, but the model may: a
         * constraint (or prefix) waits for its end. Only when the output
         * parser splits thoughts (reasoning_format not "none") and there
         * is something to hold back. */
        if (!constrained && r->n_answer_prefix == 0) {
            r->think_gate = false;
            return true;
        }
        anvil_token tmp[256];
        int32_t k = anvil_tokenize(lim->model, open, strlen(open), tmp, 256, false, true);
        if (k > 0 && k <= 16 && r->outfmt.reasoning_format == SRV_REASONING_THINK &&
            !prompt_ends_with(lim, r, close)) {
            if (!tokens_of(lim, close, &r->think_end, &r->n_think_end, e)) return false;
            memcpy(r->think_start, tmp, (size_t)k * sizeof(*tmp));
            r->n_think_start = k;
        }
        r->think_gate = r->n_answer_prefix > 0 || r->n_think_start > 0;
        return true;
    }
    if (!tokens_of(lim, close, &r->think_end, &r->n_think_end, e)) return false;
    r->think_gate = r->n_think_end > 0;
    return true;
}

/* Whether every marker of a calls document (toolcall.c's) is something
 * the constraint can hold: text, or a control token, which the compiled
 * constraint allows by its text (guide.c: gpt-oss's <|constrain|> and
 * <|message|>). An end-of-generation token can only be where the calls may
 * end, in the separator or the end (gpt-oss's <|call|> ends the answer
 * after its one call); inside a call's text it would cut the call. */
static bool marker_text(const struct srv_limits *lim, const char *s, bool eog_ok) {
    size_t len = strlen(s);
    if (!len) return true;
    anvil_token tmp[256];
    int32_t k = anvil_tokenize(lim->model, s, len, tmp, 256, false, true);
    if (k < 0) return false;
    for (int32_t i = 0; i < k; i++) {
        char piece[64];
        int32_t n = anvil_token_to_piece(lim->model, tmp[i], piece, sizeof(piece), true);
        if (n == 0 || (!eog_ok && anvil_token_is_eog(lim->model, tmp[i]))) return false;
    }
    return true;
}

static bool markers_are_text(const struct srv_limits *lim, const char *doc) {
    if (!lim->model) return true;
    cJSON *d = cJSON_Parse(doc);
    bool ok = d != NULL;
    static const char *const top[] = {"sep", "end"};
    for (int i = 0; ok && i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, top[i]);
        ok = !cJSON_IsString(v) || marker_text(lim, v->valuestring, true);
    }
    const cJSON *c = d ? cJSON_GetObjectItemCaseSensitive(d, "calls") : NULL;
    for (const cJSON *k = c ? c->child : NULL; ok && k; k = k->next) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(k, "before");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(k, "after");
        ok = (!cJSON_IsString(b) || marker_text(lim, b->valuestring, false)) &&
             (!cJSON_IsString(a) || marker_text(lim, a->valuestring, false));
    }
    cJSON_Delete(d);
    return ok;
}

bool srv_parse_constraint(const struct srv_limits *lim, const cJSON *root,
                          const struct srv_tools *tools, struct srv_req *r,
                          struct srv_err *e) {
    const cJSON *rf = srv_field(root, "response_format");
    const cJSON *gr = srv_field(root, "grammar"), *rx = srv_field(root, "regex");
    enum anvil_constraint_kind kind = 0;
    struct anvil_constraint_params cp = {0};
    const char *param = NULL, *src = NULL;
    char *owned = NULL;
    int n_src = 0;
    if (rf) {
        const cJSON *t = cJSON_IsObject(rf) ? srv_field(rf, "type") : NULL;
        if (!cJSON_IsString(t))
            return srv_bad(e, "response_format",
                           "'response_format' must be an object with a string 'type'");
        for (const cJSON *k = rf->child; k; k = k->next)
            if (strcmp(k->string, "type") && strcmp(k->string, "json_schema"))
                return srv_bad(e, "response_format", "'response_format': unknown field '%.40s'",
                               k->string);
        if (!strcmp(t->valuestring, "json_object")) {
            kind = ANVIL_CONSTRAINT_JSON;
            src = "";
        } else if (!strcmp(t->valuestring, "json_schema")) {
            if (!(owned = json_schema_text(srv_field(rf, "json_schema"), e))) return false;
            kind = ANVIL_CONSTRAINT_JSON_SCHEMA;
            src = owned;
        } else if (strcmp(t->valuestring, "text") != 0) {
            return srv_bad(e, "response_format", "'response_format.type' must be 'text', "
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
            return srv_bad(e, ext[i], "'%s' must be a string, got %s", ext[i],
                           srv_type_name(ev[i]));
        kind = i == 0 ? ANVIL_CONSTRAINT_GBNF : ANVIL_CONSTRAINT_REGEX;
        src = ev[i]->valuestring;
        param = ext[i];
        n_src++;
    }
    bool ok = false;
    r->outfmt.n_tools = 0;
    for (int i = 0; tools->mode != SRV_TOOLS_NONE && i < tools->n && i < SRV_OUTFMT_TOOLS; i++)
        r->outfmt.tool_hash[r->outfmt.n_tools++] =
            srv_tool_hash(tools->name[i], (unsigned long)strlen(tools->name[i]));
    if (n_src > 1) {
        srv_bad(e, param, "a request takes at most one of 'response_format' (json_object, "
                "json_schema), 'grammar' and 'regex'");
        goto out;
    }
    if (tools->mode == SRV_TOOLS_AUTO && (gr || rx) &&
        r->outfmt.tool_format != SRV_TOOLFMT_JSON) {
        /* the model's own format under "auto": a grammar or regex shapes
         * the raw output (markers included) and the parser finds the
         * calls in it, as in any "auto" answer */
        r->tools = tools->mode;
        if (!set_gate(lim, r, NULL, false, e)) goto out;
    } else if (tools->mode != SRV_TOOLS_NONE) {
        if (gr || rx) {
            srv_bad(e, gr ? "grammar" : "regex", "'%s' cannot be combined with tool calls "
                    "(tool_choice 'none' turns them off)", gr ? "grammar" : "regex");
            goto out;
        }
        if (kind && tools->mode == SRV_TOOLS_AUTO) {
            srv_bad(e, "response_format", "a JSON 'response_format' with tools needs tool_choice "
                    "'none', 'required' or a named function ('auto' decides between a call and "
                    "free text)");
            goto out;
        }
        enum srv_toolfmt tf = r->outfmt.tool_format;
        if (tf != SRV_TOOLFMT_JSON && tools->mode == SRV_TOOLS_AUTO) {
            /* the model's own format: it decides as trained, the parser
             * finds its calls (nothing constrained) */
            r->tools = tools->mode;
            ok = set_gate(lim, r, NULL, false, e);
            goto out;
        }
        /* required / named: the answer is the call, so response_format
         * (which shapes a content answer) has nothing to apply to; in a
         * family's format, its opening marker is forced and the
         * constraint holds what follows */
        free(owned);
        owned = NULL;
        struct sbuf prefix;
        sb_init(&prefix);
        bool calls = false;
        if (tf == SRV_TOOLFMT_JSON) {
            owned = srv_tools_schema(tools);
        } else {
            owned = srv_tools_calls(tools, tf, r->parallel_calls, &prefix, &calls);
            if (calls && owned && !markers_are_text(lim, owned)) {
                free(owned);
                owned = NULL;
                calls = false;
            }
            if (!calls) owned = srv_tools_family(tools, tf, r->parallel_calls, &prefix, e);
        }
        if (!owned || prefix.oom) {
            if (!owned && e->status == 0) srv_oom(e);
            else if (prefix.oom) srv_oom(e);
            sb_free(&prefix);
            goto out;
        }
        bool pok = set_gate(lim, r, prefix.p ? prefix.p : "", true, e);
        sb_free(&prefix);
        if (!pok) goto out;
        kind = calls ? ANVIL_CONSTRAINT_CALLS : ANVIL_CONSTRAINT_JSON_SCHEMA;
        src = owned;
        param = "tools";
        cp.or_text = tools->mode == SRV_TOOLS_AUTO;
    } else if (kind || r->reasoning_budget >= 0) {
        /* a content constraint after the thought, or a budget alone */
        if (!set_gate(lim, r, kind ? answer_prefix(r) : NULL, kind != 0, e)) goto out;
    }
    if (!kind) {
        ok = true;
        goto out;
    }
    char msg[400];
    anvil_status st = srv_ccache_get(lim->cc, lim->model, kind, &cp, src, strlen(src),
                                     &r->constraint, msg, sizeof(msg));
    if (st == ANVIL_ERR_NOMEM) {
        srv_oom(e);
    } else if (st != ANVIL_OK && !strcmp(param, "tools")) {
        /* the call schema keeps each function's parameters as $defs/t<i> */
        srv_bad(e, "tools", "a function's parameters cannot be enforced (#/$defs/t<i> is "
                "tools[i].function.parameters): %s", msg);
    } else if (st != ANVIL_OK) {
        srv_bad(e, param, "'%s' cannot be enforced: %s", param, msg);
    }
    ok = st == ANVIL_OK;
    if (ok) r->tools = tools->mode;
out:
    free(owned);
    return ok;
}
