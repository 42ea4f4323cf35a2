/*
 * fields.c - the JSON field validators of every request body the server
 * reads (the generation routes, /tokenize, /detokenize, tool lists), and
 * the OpenAI error record they fill.
 *
 * Rules, the same for every route:
 *   - a JSON null is the same as an absent field;
 *   - no type coercion: numbers are never accepted as strings ("10" is a
 *     type error, the bug llama-server b4748 had), "true" is not a
 *     boolean, integers must be integral (1.0 is one, 1.5 is not);
 *   - an error names the field in `param` and says what was expected and
 *     what came.
 * Also here: what cJSON does not check in a raw body (srv_json_prescan)
 * and the one lock around cJSON's parser (srv_json_parse).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

static void err_vset(struct srv_err *e, int status, const char *type, const char *code,
                     const char *param, const char *fmt, va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
}

void srv_err_set(struct srv_err *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(e, status, type, code, param, fmt, ap);
    va_end(ap);
}

bool srv_bad(struct srv_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(e, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return false;
}

bool srv_oom(struct srv_err *e) {
    srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

// ----------------------------------------------------------------------------
// typed field getters: absent and null are "not present"

const char *srv_type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

const cJSON *srv_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

bool srv_get_bool(const cJSON *o, const char *key, bool *out, bool *present, struct srv_err *e) {
    const cJSON *v = srv_field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!cJSON_IsBool(v))
        return srv_bad(e, key, "'%s' must be a boolean, got %s", key, srv_type_name(v));
    *out = cJSON_IsTrue(v);
    return true;
}

/* JSON numbers are doubles in cJSON; |v| <= 2^53 is exact, so
 * integrality is checked on the double. */
bool srv_get_int(const cJSON *o, const char *key, double lo, double hi, long long *out,
                 bool *present, struct srv_err *e) {
    const cJSON *v = srv_field(o, key);
    if (present) *present = v != NULL;
    if (!v) return true;
    if (!cJSON_IsNumber(v))
        return srv_bad(e, key, "'%s' must be an integer, got %s", key, srv_type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return srv_bad(e, key, "'%s' must be an integer, got %g", key, d);
    if (d < lo || d > hi)
        return srv_bad(e, key, "'%s' must be in [%.0f, %.0f], got %.0f", key, lo, hi, d);
    *out = (long long)d;
    return true;
}

bool srv_get_num(const cJSON *o, const char *key, double lo, double hi, float *out,
                 struct srv_err *e) {
    const cJSON *v = srv_field(o, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v))
        return srv_bad(e, key, "'%s' must be a number, got %s", key, srv_type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi)
        return srv_bad(e, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, d);
    *out = (float)d;
    return true;
}

// ----------------------------------------------------------------------------
// the body before and through cJSON

/* One pass over the raw bytes. Brackets and escapes are tracked only as
 * far as these checks need: a body that is not JSON at all is left for
 * cJSON to report. */
bool srv_json_prescan(const char *body, size_t len, struct srv_err *e) {
    size_t bad_at = sb_utf8_check(body, len);
    if (bad_at < len)
        return srv_bad(e, NULL, "The request body is not valid UTF-8 (byte 0x%02x at offset "
                       "%zu): JSON text must be UTF-8 (RFC 8259, section 8.1)",
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
                return srv_bad(e, NULL, "We could not parse the JSON body of your request: "
                               "control character 0x%02x inside a string at offset %zu must "
                               "be escaped", (unsigned)c, i);
            } else if (c == '\\' && i + 1 < len) {
                if (body[i + 1] == 'u' && len - i >= 6 && !memcmp(body + i + 2, "0000", 4))
                    return srv_bad(e, NULL, "The JSON body holds the escape \\u0000 (U+0000) "
                                   "at offset %zu: anvil does not accept NUL characters in "
                                   "strings", i);
                i++; /* the escaped character cannot end the string */
            }
            continue;
        }
        if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > SRV_MAX_JSON_DEPTH)
                return srv_bad(e, NULL, "The JSON body nests arrays and objects deeper than "
                               "%d levels (offset %zu)", SRV_MAX_JSON_DEPTH, i);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return true;
}

cJSON *srv_json_parse(const char *body, size_t len, const char **end) {
    /* cJSON resets and sets a global error record on every parse
     * (cJSON.c global_error): parsing is serialised so that concurrent
     * requests do not race on it. A parse takes microseconds. */
    static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&parse_mu);
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, end, false);
    pthread_mutex_unlock(&parse_mu);
    return root;
}
