/*
 * toolcall.c - OpenAI tool calling on top of constraints: `tools` and
 * `tool_choice` become a JSON Schema for the call and a system-prompt text
 * that shows the model its functions; the model's output becomes
 * `tool_calls` (whole, or as streamed deltas).
 *
 * The call the model writes is one JSON object
 *     {"name": "<function>", "arguments": {<its parameters>}}
 * constrained by the schema anyOf over the functions (each branch: the
 * name as a const, the arguments under that function's `parameters`). The
 * parameters keep their own $defs: each is moved under the call schema's
 * "$defs" as "t<i>" and every "$ref" inside it that points into its own
 * document ("#...") is rewritten to "#/$defs/t<i>...".
 *
 * tool_choice:
 *   "none"      tools are not shown to the model and nothing is
 *               constrained (the model cannot call them, so it is not
 *               told about them);
 *   "required"  the output is a call to one of the functions;
 *   {"type": "function", "function": {"name": N}}  a call to N;
 *   "auto"      (the default with tools) the output is either a call or
 *               an answer in words, decided by its first character: the
 *               constraint allows the call's object or any text that does
 *               not start with '{' (anvil_constraint_params.or_text). The
 *               model chooses with its own first token, under the same
 *               distribution it has for the rest, and nothing is decided
 *               for it by a second pass or a heuristic.
 * One call per answer (a single call is a valid answer whatever
 * parallel_tool_calls says).
 *
 * Not here: rendering the conversation (prompt.c; assistant turns that
 * called a function are shown to the model as the call's JSON, tool
 * results as user turns that say which call they answer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > SRV_TOOL_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool srv_tools_parse(const cJSON *root, struct srv_tools *t, struct srv_err *e) {
    memset(t, 0, sizeof(*t));
    t->named = -1;
    const cJSON *tools = srv_field(root, "tools");
    const cJSON *choice = srv_field(root, "tool_choice");
    if (tools) {
        if (!cJSON_IsArray(tools))
            return srv_bad(e, "tools", "'tools' must be an array of function tools");
        int i = 0;
        for (const cJSON *x = tools->child; x; x = x->next, i++) {
            char param[48];
            snprintf(param, sizeof(param), "tools[%d]", i);
            if (i >= SRV_MAX_TOOLS)
                return srv_bad(e, "tools", "at most %d tools per request", SRV_MAX_TOOLS);
            const cJSON *type = cJSON_IsObject(x) ? srv_field(x, "type") : NULL;
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
                return srv_bad(e, param, "'%s' must be {\"type\": \"function\", \"function\": "
                               "{...}}", param);
            for (const cJSON *k = x->child; k; k = k->next)
                if (strcmp(k->string, "type") && strcmp(k->string, "function"))
                    return srv_bad(e, param, "'%s': unknown field '%.40s'", param, k->string);
            const cJSON *fn = srv_field(x, "function");
            if (!cJSON_IsObject(fn))
                return srv_bad(e, param, "'%s.function' must be an object", param);
            for (const cJSON *k = fn->child; k; k = k->next)
                if (strcmp(k->string, "name") && strcmp(k->string, "description") &&
                    strcmp(k->string, "parameters") && strcmp(k->string, "strict"))
                    return srv_bad(e, param, "'%s.function': unknown field '%.40s'", param,
                                   k->string);
            const cJSON *name = srv_field(fn, "name");
            if (!cJSON_IsString(name) || !name_ok(name->valuestring))
                return srv_bad(e, param, "'%s.function.name' must be 1 to %d characters of a-z, "
                               "A-Z, 0-9, '_' and '-'", param, SRV_TOOL_NAME_MAX);
            const cJSON *desc = srv_field(fn, "description");
            if (desc && !cJSON_IsString(desc))
                return srv_bad(e, param, "'%s.function.description' must be a string", param);
            const cJSON *par = srv_field(fn, "parameters");
            if (par && !cJSON_IsObject(par))
                return srv_bad(e, param, "'%s.function.parameters' must be a JSON Schema object",
                               param);
            const cJSON *strict = srv_field(fn, "strict");
            if (strict && !cJSON_IsBool(strict))
                return srv_bad(e, param, "'%s.function.strict' must be a boolean", param);
            for (int j = 0; j < t->n; j++)
                if (!strcmp(t->name[j], name->valuestring))
                    return srv_bad(e, param, "two tools are named '%s'", name->valuestring);
            t->fn[t->n] = fn;
            t->name[t->n] = name->valuestring;
            t->n++;
        }
    }
    if (!choice) {
        t->mode = t->n > 0 ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
        return true;
    }
    if (cJSON_IsString(choice)) {
        const char *c = choice->valuestring;
        if (!strcmp(c, "none")) t->mode = SRV_TOOLS_NONE;
        else if (!strcmp(c, "auto")) t->mode = SRV_TOOLS_AUTO;
        else if (!strcmp(c, "required")) t->mode = SRV_TOOLS_REQUIRED;
        else
            return srv_bad(e, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (cJSON_IsObject(choice)) {
        const cJSON *type = srv_field(choice, "type"), *fn = srv_field(choice, "function");
        const cJSON *name = cJSON_IsObject(fn) ? srv_field(fn, "name") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return srv_bad(e, "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        for (int j = 0; j < t->n; j++)
            if (!strcmp(t->name[j], name->valuestring)) t->named = j;
        if (t->named < 0)
            return srv_bad(e, "tool_choice", "'tool_choice' names the function '%.64s', which is "
                           "not in 'tools'", name->valuestring);
        t->mode = SRV_TOOLS_NAMED;
    } else {
        return srv_bad(e, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (t->mode != SRV_TOOLS_NONE && t->n == 0)
        return srv_bad(e, "tool_choice",
                       "'tool_choice' is only allowed when 'tools' are specified");
    return true;
}

/* ---------------------------------------------------------------------- */
/* the call's schema */

/* Rewrite every "$ref": "#..." under x to point under prefix (in place). */
static bool rebase_refs(cJSON *x, const char *prefix, int depth) {
    if (depth > SRV_MAX_JSON_DEPTH) return false;
    for (cJSON *c = x->child; c; c = c->next) {
        if (c->string && !strcmp(c->string, "$ref") && cJSON_IsString(c) &&
            c->valuestring[0] == '#') {
            size_t n = strlen(prefix) + strlen(c->valuestring);
            char *v = malloc(n + 1);
            if (!v) return false;
            snprintf(v, n + 1, "%s%s", prefix, c->valuestring + 1);
            bool ok = cJSON_SetValuestring(c, v) != NULL;
            free(v);
            if (!ok) return false;
        } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
            if (!rebase_refs(c, prefix, depth + 1)) return false;
        }
    }
    return true;
}

/* One tool's parameters schema, its $refs rebased under ref (NULL when
 * out of memory); a function without parameters takes none. */
static cJSON *params_of(const struct srv_tools *t, int i, const char *ref) {
    const cJSON *par = srv_field(t->fn[i], "parameters");
    cJSON *p = par ? cJSON_Duplicate(par, true)
                   : cJSON_Parse("{\"type\":\"object\",\"properties\":{}}");
    if (p && ref && !rebase_refs(p, ref, 0)) {
        cJSON_Delete(p);
        p = NULL;
    }
    return p;
}

/* The schema of one call object {name_key: N, args_key: {...}} as anyOf
 * over the tools the mode allows, each function's parameters under
 * $defs/t<i>. With array, an array of 1 (or, parallel, 1 or more) such
 * objects; with wrap, that inside {wrap: ...}. */
static char *call_schema(const struct srv_tools *t, const char *name_key, const char *args_key,
                         bool array, bool parallel, const char *wrap) {
    cJSON *root = cJSON_CreateObject();
    cJSON *defs = root ? cJSON_AddObjectToObject(root, "$defs") : NULL;
    cJSON *one = defs ? cJSON_CreateObject() : NULL;
    cJSON *any = one ? cJSON_AddArrayToObject(one, "anyOf") : NULL;
    bool ok = root && defs && one && any;
    for (int i = 0; ok && i < t->n; i++) {
        if (t->mode == SRV_TOOLS_NAMED && i != t->named) continue;
        char def[16], ref[32];
        snprintf(def, sizeof(def), "t%d", i);
        snprintf(ref, sizeof(ref), "#/$defs/t%d", i);
        cJSON *p = params_of(t, i, ref);
        ok = p != NULL;
        if (ok) cJSON_AddItemToObject(defs, def, p);
        cJSON *br = ok ? cJSON_CreateObject() : NULL;
        cJSON *props = br ? cJSON_AddObjectToObject(br, "properties") : NULL;
        cJSON *nm = props ? cJSON_AddObjectToObject(props, name_key) : NULL;
        cJSON *args = nm ? cJSON_AddObjectToObject(props, args_key) : NULL;
        cJSON *req = args ? cJSON_CreateStringArray((const char *[]){name_key, args_key}, 2) : NULL;
        ok = req && cJSON_AddStringToObject(br, "type", "object") &&
             cJSON_AddStringToObject(nm, "const", t->name[i]) &&
             cJSON_AddStringToObject(args, "$ref", ref);
        if (req) cJSON_AddItemToObject(br, "required", req);
        if (br) cJSON_AddItemToArray(any, br);
    }
    /* root: the call, an array of calls, or {wrap: [calls]} */
    cJSON *item = one;
    if (ok && array) {
        cJSON *arr = cJSON_CreateObject();
        ok = arr && cJSON_AddStringToObject(arr, "type", "array") &&
             cJSON_AddNumberToObject(arr, "minItems", 1) &&
             (parallel || cJSON_AddNumberToObject(arr, "maxItems", 1));
        if (arr) cJSON_AddItemToObject(arr, "items", one);
        else cJSON_Delete(one);
        item = arr;
        one = NULL;
    }
    if (ok && wrap) {
        cJSON *w = cJSON_CreateObject();
        cJSON *props = w ? cJSON_AddObjectToObject(w, "properties") : NULL;
        cJSON *req = props ? cJSON_CreateStringArray((const char *[]){wrap}, 1) : NULL;
        ok = req && cJSON_AddStringToObject(w, "type", "object");
        if (req) cJSON_AddItemToObject(w, "required", req);
        if (props) cJSON_AddItemToObject(props, wrap, item);
        else cJSON_Delete(item);
        item = w;
        one = NULL;
    }
    /* the item's keywords move up to the root, beside $defs */
    if (ok && item) {
        while (item->child) {
            cJSON *c = cJSON_DetachItemViaPointer(item, item->child);
            cJSON_AddItemToObject(root, c->string, c);
        }
        cJSON_Delete(item);
        item = NULL;
    } else {
        cJSON_Delete(item);
    }
    (void)one;
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}

char *srv_tools_schema(const struct srv_tools *t) {
    return call_schema(t, "name", "arguments", false, false, NULL);
}

/* DeepSeek's markers (U+FF5C and U+2581, as toolfmt.c spells them) */
#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

char *srv_tools_family(const struct srv_tools *t, enum srv_toolfmt f, bool parallel,
                       struct sbuf *prefix, struct srv_err *e) {
    sb_clear(prefix);
    switch (f) {
    case SRV_TOOLFMT_JSON: return call_schema(t, "name", "arguments", false, false, NULL);
    case SRV_TOOLFMT_HERMES:
        /* one <tool_call> block: the constraint ends with its object */
        sb_puts(prefix, "<tool_call>\n");
        return call_schema(t, "name", "arguments", false, false, NULL);
    case SRV_TOOLFMT_LLAMA3: return call_schema(t, "name", "parameters", false, false, NULL);
    case SRV_TOOLFMT_MISTRAL:
        sb_puts(prefix, "[TOOL_CALLS]");
        return call_schema(t, "name", "arguments", true, parallel, NULL);
    case SRV_TOOLFMT_GRANITE:
        sb_puts(prefix, "<|tool_call|>");
        return call_schema(t, "name", "arguments", true, parallel, NULL);
    case SRV_TOOLFMT_COMMAND_R:
        sb_puts(prefix, "Action: ```json\n");
        return call_schema(t, "tool_name", "parameters", true, parallel, NULL);
    case SRV_TOOLFMT_GENERIC:
        return call_schema(t, "name", "arguments", true, parallel, "tool_calls");
    default: break;
    }
    /* the name sits between markers: the call's tool must be known */
    int i = t->mode == SRV_TOOLS_NAMED ? t->named : t->n == 1 ? 0 : -1;
    if (i < 0) {
        srv_bad(e, "tool_choice", "tool_choice 'required' with several tools cannot be enforced "
                "in this model's tool-call format (%s): name one function", srv_toolfmt_name(f));
        return NULL;
    }
    const char *name = t->name[i];
    switch (f) {
    case SRV_TOOLFMT_FUNCTIONARY: sb_printf(prefix, "<function=%s>", name); break;
    case SRV_TOOLFMT_DEEPSEEK_R1:
    case SRV_TOOLFMT_DEEPSEEK_V3:
        sb_printf(prefix, DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP "%s\n```json\n", name);
        break;
    default: /* harmony: after the prompt's <|start|>assistant */
        sb_printf(prefix, "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", name);
        break;
    }
    cJSON *p = params_of(t, i, NULL);
    char *s = p ? cJSON_PrintUnformatted(p) : NULL;
    cJSON_Delete(p);
    return s;
}

char *srv_tools_prompt(const struct srv_tools *t) {
    struct sbuf b;
    sb_init(&b);
    if (t->mode == SRV_TOOLS_NAMED)
        sb_printf(&b, "Call the function %s: answer with only a JSON object "
                  "{\"name\": \"%s\", \"arguments\": {...}} holding its arguments.\n",
                  t->name[t->named], t->name[t->named]);
    else if (t->mode == SRV_TOOLS_REQUIRED)
        sb_puts(&b, "Call one of the functions below: answer with only a JSON object "
                    "{\"name\": \"<function name>\", \"arguments\": {...}}.\n");
    else
        sb_puts(&b, "You can call the functions below. To call one, answer with only a JSON "
                    "object {\"name\": \"<function name>\", \"arguments\": {...}}; otherwise "
                    "answer normally.\n");
    sb_puts(&b, "Functions:\n");
    for (int i = 0; i < t->n; i++) {
        if (t->mode == SRV_TOOLS_NAMED && i != t->named) continue;
        const cJSON *desc = srv_field(t->fn[i], "description");
        const cJSON *par = srv_field(t->fn[i], "parameters");
        char *ps = par ? cJSON_PrintUnformatted(par) : NULL;
        sb_printf(&b, "- %s", t->name[i]);
        if (desc) sb_printf(&b, ": %s", desc->valuestring);
        sb_printf(&b, "\n  arguments (JSON Schema): %s\n", ps ? ps : "{}");
        free(ps);
    }
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return sb_take(&b, NULL);
}

/* ---------------------------------------------------------------------- */
/* the model's output -> a call */

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* The head {"name": "N", "arguments": up to the value's first byte:
 * 1 complete (name copied, *args_at set), 0 not yet, -1 not a call. */
static int parse_head(const char *s, size_t n, char *name, size_t *args_at) {
    size_t i = 0;
#define WS() while (i < n && is_ws(s[i])) i++
#define LIT(str) \
    do { \
        for (const char *q_ = (str); *q_; q_++, i++) { \
            if (i == n) return 0; \
            if (s[i] != *q_) return -1; \
        } \
    } while (0)
    WS();
    LIT("{");
    WS();
    LIT("\"name\"");
    WS();
    LIT(":");
    WS();
    LIT("\"");
    size_t k = 0;
    for (;; i++) {
        if (i == n) return 0;
        if (s[i] == '"') break;
        if (k == SRV_TOOL_NAME_MAX || s[i] == '\\') return -1;
        name[k++] = s[i];
    }
    name[k] = 0;
    i++;
    WS();
    LIT(",");
    WS();
    LIT("\"arguments\"");
    WS();
    LIT(":");
    WS();
    if (i == n) return 0;
    *args_at = i;
    return 1;
#undef WS
#undef LIT
}

void srv_call_init(struct srv_call *c, bool forced) {
    memset(c, 0, sizeof(*c));
    sb_init(&c->head);
    sb_init(&c->tail);
    c->state = forced ? SRV_CALL_HEAD : SRV_CALL_UNDECIDED;
}

void srv_call_free(struct srv_call *c) {
    sb_free(&c->head);
    sb_free(&c->tail);
}

/* arguments text: all but a trailing run of whitespace and '}' (the
 * call's own closing brace is among them until the end) */
static void args_put(struct srv_call *c, const char *s, size_t n, struct sbuf *args) {
    sb_put(&c->tail, s, n);
    size_t keep = c->tail.len;
    while (keep > 0 && (is_ws(c->tail.p[keep - 1]) || c->tail.p[keep - 1] == '}')) keep--;
    if (keep == 0) return;
    sb_put(args, c->tail.p, keep);
    memmove(c->tail.p, c->tail.p + keep, c->tail.len - keep);
    c->tail.len -= keep;
}

void srv_call_feed(struct srv_call *c, const char *s, size_t n, struct sbuf *content,
                   struct sbuf *args) {
    if (n == 0) return;
    if (c->state == SRV_CALL_UNDECIDED) /* "auto": the first character decides */
        c->state = s[0] == '{' ? SRV_CALL_HEAD : SRV_CALL_TEXT;
    if (c->state == SRV_CALL_TEXT) {
        sb_put(content, s, n);
        return;
    }
    if (c->state == SRV_CALL_ARGS) {
        args_put(c, s, n, args);
        return;
    }
    sb_put(&c->head, s, n);
    size_t at = 0;
    int r = parse_head(c->head.p, c->head.len, c->name, &at);
    if (r == 0) return;
    if (r < 0) { /* not a call after all (a stop string, a cut): plain text */
        c->state = SRV_CALL_TEXT;
        sb_put(content, c->head.p, c->head.len);
        sb_clear(&c->head);
        return;
    }
    c->state = SRV_CALL_ARGS;
    c->named = true;
    args_put(c, c->head.p + at, c->head.len - at, args);
}

void srv_call_end(struct srv_call *c, bool complete, struct sbuf *content, struct sbuf *args) {
    if (c->state == SRV_CALL_HEAD) {
        /* the name never finished: what there is goes out as text */
        sb_put(content, c->head.p, c->head.len);
        sb_clear(&c->head);
        return;
    }
    if (c->state != SRV_CALL_ARGS) return;
    size_t n = c->tail.len;
    if (complete) {
        /* drop the call's closing brace and the whitespace around it */
        while (n > 0 && is_ws(c->tail.p[n - 1])) n--;
        if (n > 0 && c->tail.p[n - 1] == '}') n--;
        while (n > 0 && is_ws(c->tail.p[n - 1])) n--;
    }
    sb_put(args, c->tail.p, n);
    sb_clear(&c->tail);
}

void srv_call_id(char *out, size_t cap, uint64_t seed) {
    static const char a[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t k = 0;
    if (cap < 6) return;
    memcpy(out, "call_", 5);
    k = 5;
    for (int i = 0; i < 24 && k + 1 < cap; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        out[k++] = a[(seed >> 33) % (sizeof(a) - 1)];
    }
    out[k] = 0;
}

/* ---------------------------------------------------------------------- */
/* several calls in a family's format: an alternation of per-tool grammars */

#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"

char *srv_tools_calls(const struct srv_tools *t, enum srv_toolfmt f, bool parallel,
                      struct sbuf *prefix, bool *handled) {
    /* per format: the forced opening, each call's text before its
     * arguments (%s: the name) and after them, between calls, at the end */
    const char *open, *before, *after, *sep, *fin = "";
    switch (f) {
    case SRV_TOOLFMT_HERMES:
        open = "<tool_call>\n";
        before = "{\"name\": \"%s\", \"arguments\": ";
        after = "}\n</tool_call>";
        sep = "\n<tool_call>\n";
        break;
    case SRV_TOOLFMT_LLAMA3:
        open = "";
        before = "{\"name\": \"%s\", \"parameters\": ";
        after = "}";
        sep = "; ";
        break;
    case SRV_TOOLFMT_HARMONY: /* after the prompt's <|start|>assistant */
        open = "<|channel|>commentary to=functions.";
        before = "%s <|constrain|>json<|message|>";
        after = "";
        /* a call ends with <|call|>, which also ends the answer when it
         * is a token (guide.c) */
        sep = "<|call|><|start|>assistant<|channel|>commentary to=functions.";
        fin = "<|call|>";
        break;
    case SRV_TOOLFMT_DEEPSEEK_R1:
    case SRV_TOOLFMT_DEEPSEEK_V3:
        open = DS_CALLS_BEGIN DS_CALL_BEGIN "function" DS_SEP;
        before = "%s\n```json\n";
        after = "\n```" DS_CALL_END;
        sep = DS_CALL_BEGIN "function" DS_SEP;
        fin = DS_CALLS_END;
        break;
    case SRV_TOOLFMT_FUNCTIONARY:
        open = "<function=";
        before = "%s>";
        after = "</function>";
        sep = "<function=";
        break;
    default: *handled = false; return NULL;
    }
    *handled = true;
    sb_clear(prefix);
    sb_puts(prefix, open);
    cJSON *root = cJSON_CreateObject();
    cJSON *defs = root ? cJSON_AddObjectToObject(root, "$defs") : NULL;
    cJSON *calls = defs ? cJSON_AddArrayToObject(root, "calls") : NULL;
    bool ok = calls && cJSON_AddStringToObject(root, "sep", sep) &&
              cJSON_AddStringToObject(root, "end", fin) &&
              cJSON_AddNumberToObject(root, "max", parallel ? 0 : 1);
    for (int i = 0; ok && i < t->n; i++) {
        if (t->mode == SRV_TOOLS_NAMED && i != t->named) continue;
        char def[16], ref[32], head[SRV_TOOL_NAME_MAX + 64];
        snprintf(def, sizeof(def), "t%d", i);
        snprintf(ref, sizeof(ref), "#/$defs/t%d", i);
        snprintf(head, sizeof(head), before, t->name[i]);
        cJSON *p = params_of(t, i, ref);
        ok = p != NULL;
        if (ok) cJSON_AddItemToObject(defs, def, p);
        cJSON *c = ok ? cJSON_CreateObject() : NULL;
        cJSON *s = c ? cJSON_AddObjectToObject(c, "schema") : NULL;
        ok = s && cJSON_AddStringToObject(s, "$ref", ref) &&
             cJSON_AddStringToObject(c, "before", head) &&
             cJSON_AddStringToObject(c, "after", after);
        if (c) cJSON_AddItemToArray(calls, c);
    }
    char *out = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return out;
}
