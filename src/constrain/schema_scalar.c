/*
 * schema_scalar.c - strings and numbers of the schema lowering
 * (schema_int.h).
 *
 * Strings: the JSON text of a string is bytes; a pattern or format regex
 * describes the decoded characters, so its IR is rewritten to JSON's
 * escaped form (a '"' in the pattern's language becomes \" in the output,
 * a control character its escape) - escape_json below. Formats are
 * regexes over the decoded text (formats[]); lengths count code points.
 *
 * Numbers: bounds (minimum, exclusive ones, draft-04 boolean exclusives)
 * become digit automata (numrange.c); an integer bound must be exact in a
 * double (|x| <= 2^53), a number bound must have at most 15 significant
 * digits (constrain.h says why).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "constrain/schema_int.h"

#define INT_DIGITS 19 /* unbounded integers */

/* ---------------------------------------------------------------------- */
/* escaping a regex language into JSON text */

/* Rewrite node id (a regex over the decoded text) into its JSON-escaped
 * form. memo maps old node ids (< n_memo) to new ones. */
static uint32_t escape_json(struct cn_ir *g, uint32_t id, uint32_t *memo, uint32_t n_memo,
                            int depth) {
    if (!ir_ok(g)) return CN_NIL;
    if (id < n_memo && memo[id] != CN_NIL) return memo[id];
    if (depth > 4 * CN_DEF_MAX_DEPTH) return ir_fail(g, ANVIL_ERR_UNSUPPORTED, "pattern nested too deeply");
    struct ir_node n = g->nodes[id];
    uint32_t r = id;
    switch (n.op) {
    case IR_BYTES: {
        /* ASCII bytes only occur at character starts in UTF-8, so a set
         * holding one is a one-byte character position */
        struct cn_bset s = g->sets[n.a], keep = s;
        bool special = false;
        for (unsigned b = 0; b < 0x20; b++) special |= bset_has(&s, b);
        special |= bset_has(&s, '"') || bset_has(&s, '\\');
        if (!special) break;
        struct ir_list l = {0};
        for (unsigned b = 0; b < 256; b++) {
            if (!bset_has(&s, b) || (b >= 0x20 && b != '"' && b != '\\')) continue;
            keep.w[b >> 6] &= ~((uint64_t)1 << (b & 63));
            char e[8];
            switch (b) {
            case '"': strcpy(e, "\\\""); break;
            case '\\': strcpy(e, "\\\\"); break;
            case '\b': strcpy(e, "\\b"); break;
            case '\f': strcpy(e, "\\f"); break;
            case '\n': strcpy(e, "\\n"); break;
            case '\r': strcpy(e, "\\r"); break;
            case '\t': strcpy(e, "\\t"); break;
            default: snprintf(e, sizeof e, "\\u%04x", b); break;
            }
            ir_list_push(g, &l, ir_str(g, e));
        }
        if (!bset_empty(&keep)) ir_list_push(g, &l, ir_bytes(g, &keep));
        r = ir_alt(g, l.v, l.n);
        ir_list_free(&l);
        break;
    }
    case IR_SEQ:
    case IR_ALT: {
        struct ir_list l = {0};
        bool changed = false;
        for (uint32_t i = 0; i < n.n; i++) {
            uint32_t k = g->kids[n.a + i];
            uint32_t k2 = escape_json(g, k, memo, n_memo, depth + 1);
            changed |= k2 != k;
            ir_list_push(g, &l, k2);
        }
        if (changed) r = n.op == IR_SEQ ? ir_seq(g, l.v, l.n) : ir_alt(g, l.v, l.n);
        ir_list_free(&l);
        break;
    }
    case IR_REP: {
        uint32_t k2 = escape_json(g, n.a, memo, n_memo, depth + 1);
        if (k2 != n.a) r = ir_rep(g, k2, n.min, n.max);
        break;
    }
    default: break;
    }
    if (id < n_memo && r != CN_NIL) memo[id] = r;
    return r;
}

static uint32_t regex_string(struct sc *c, const char *re, bool search) {
    struct cn_ir *g = c->g;
    struct cn_regex_opts o = {.search = search, .max_depth = c->max_depth};
    uint32_t r = regex_to_ir(g, re, strlen(re), &o);
    if (r == CN_NIL) {
        /* put the schema path in front of the regex error */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", g->err);
        anvil_status st = g->st;
        g->st = ANVIL_OK;
        return schema_fail(c, st, "pattern: %s", msg);
    }
    uint32_t n_memo = g->n_nodes;
    uint32_t *full = core_malloc((size_t)n_memo * sizeof *full);
    if (!full) return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n_memo; i++) full[i] = CN_NIL;
    uint32_t e = escape_json(g, r, full, n_memo, 0);
    core_free(full);
    return schema_quoted(g, e);
}

/* formats: regexes over the decoded text */
#define RX_YEAR "(?:[1-9]\\d{3}|0[1-9]\\d{2}|00[1-9]\\d|000[1-9])"
#define RX_LEAP "(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#define RX_DATE                                                                                   \
    "(?:" RX_YEAR "-(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|" RX_YEAR                         \
    "-(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|" RX_YEAR "-02-(?:0[1-9]|1\\d|2[0-8])|" RX_LEAP "-02-29)"
#define RX_TIME "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"
#define RX_ATOM "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
#define RX_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

static const struct {
    const char *name, *re;
    int len; /* fixed length in characters, 0 variable */
} formats[] = {
    {"date", RX_DATE, 10},
    {"time", RX_TIME, 0},
    {"date-time", RX_DATE "T" RX_TIME, 0},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", 36},
    {"email", RX_ATOM "(?:\\." RX_ATOM ")*@" RX_LABEL "(?:\\." RX_LABEL ")+", 0},
};

/* ---------------------------------------------------------------------- */
/* strings */

bool schema_nonneg_int(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d) || d > 1e15) return false;
    *out = (int64_t)d;
    return true;
}
uint32_t schema_string(struct sc *c, const struct kws *k) {
    struct cn_ir *g = c->g;
    int64_t min = 0, max = -1;
    if (k->k[KW_MINLEN] && !schema_nonneg_int(k->k[KW_MINLEN], &min))
        return schema_fail(c, ANVIL_ERR_INVALID, "'minLength' must be a non-negative integer");
    if (k->k[KW_MAXLEN] && !schema_nonneg_int(k->k[KW_MAXLEN], &max))
        return schema_fail(c, ANVIL_ERR_INVALID, "'maxLength' must be a non-negative integer");
    if (max >= 0 && max < min)
        return schema_fail(c, ANVIL_ERR_INVALID, "'maxLength' is below 'minLength'");
    bool lens = k->k[KW_MINLEN] || k->k[KW_MAXLEN];
    if (min > CN_MAX_REPEAT || max > CN_MAX_REPEAT)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "string length bounds above %d", CN_MAX_REPEAT);
    const cJSON *pat = k->k[KW_PATTERN], *fmt = k->k[KW_FORMAT];
    if (pat && !cJSON_IsString(pat)) return schema_fail(c, ANVIL_ERR_INVALID, "'pattern' must be a string");
    if (fmt && !cJSON_IsString(fmt)) return schema_fail(c, ANVIL_ERR_INVALID, "'format' must be a string");
    if (pat && fmt)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "'pattern' together with 'format' is not supported");
    if (pat && lens)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                       "'pattern' together with 'minLength'/'maxLength' is not supported");
    if (pat) return regex_string(c, pat->valuestring, true);
    if (fmt) {
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
            if (strcmp(formats[i].name, fmt->valuestring)) continue;
            if (lens) {
                if (!formats[i].len)
                    return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                                   "format '%s' together with 'minLength'/'maxLength' is not "
                                   "supported", formats[i].name);
                if (formats[i].len < min || (max >= 0 && formats[i].len > max))
                    return schema_fail(c, ANVIL_ERR_INVALID,
                                   "format '%s' strings have %d characters, outside the length "
                                   "bounds", formats[i].name, formats[i].len);
            }
            return regex_string(c, formats[i].re, false);
        }
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "format '%.40s' is not supported", fmt->valuestring);
    }
    return schema_quoted(g, ir_rep(g, schema_json_char(g), (int32_t)min, (int32_t)max));
}

/* ---------------------------------------------------------------------- */
/* numbers */

/* the bounds of a number keyword: numeric, or draft-04 boolean exclusives */
static bool num_kw(struct sc *c, const cJSON *v, const char *name, double *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        schema_fail(c, ANVIL_ERR_INVALID, "'%s' must be a number", name);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

/* lower/upper bounds from minimum/exclusiveMinimum/... (draft-04 booleans
 * included): *x set exclusive. Returns false on error. */
static bool bounds(struct sc *c, const struct kws *k, bool lower, bool *set, double *v, bool *x) {
    const cJSON *inc = k->k[lower ? KW_MIN : KW_MAX], *exc = k->k[lower ? KW_XMIN : KW_XMAX];
    *set = false;
    *x = false;
    double a;
    if (inc) {
        if (!num_kw(c, inc, lower ? "minimum" : "maximum", &a)) return false;
        *set = true;
        *v = a;
    }
    if (exc) {
        if (cJSON_IsBool(exc)) {
            if (cJSON_IsTrue(exc)) {
                if (!inc) {
                    schema_fail(c, ANVIL_ERR_INVALID, "boolean '%s' without '%s'",
                            lower ? "exclusiveMinimum" : "exclusiveMaximum",
                            lower ? "minimum" : "maximum");
                    return false;
                }
                *x = true;
            }
        } else {
            if (!num_kw(c, exc, lower ? "exclusiveMinimum" : "exclusiveMaximum", &a)) return false;
            if (!*set || (lower ? a >= *v : a <= *v)) {
                *set = true;
                *v = a;
                *x = true;
            }
        }
    }
    return true;
}

uint32_t schema_number(struct sc *c, const struct kws *k, bool integer) {
    struct cn_ir *g = c->g;
    if (k->k[KW_MULTOF]) {
        const cJSON *m = k->k[KW_MULTOF];
        if (!(integer && cJSON_IsNumber(m) && m->valuedouble == 1.0))
            return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "keyword 'multipleOf' is not supported");
    }
    bool lo_set, hi_set, lo_x, hi_x;
    double lo = 0, hi = 0;
    if (!bounds(c, k, true, &lo_set, &lo, &lo_x) || !bounds(c, k, false, &hi_set, &hi, &hi_x))
        return CN_NIL;
    if (integer) {
        if ((lo_set && fabs(lo) > SCHEMA_MAX_SAFE) || (hi_set && fabs(hi) > SCHEMA_MAX_SAFE))
            return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "integer bounds beyond 2^53 are not supported");
        int64_t a = 0, b = 0;
        if (lo_set) a = lo_x ? (int64_t)floor(lo) + 1 : (int64_t)ceil(lo);
        if (hi_set) b = hi_x ? (int64_t)ceil(hi) - 1 : (int64_t)floor(hi);
        if (lo_set && hi_set && a > b)
            return schema_fail(c, ANVIL_ERR_INVALID, "no integer lies between the minimum and maximum");
        return ir_int_range(g, lo_set, a, hi_set, b, INT_DIGITS);
    }
    if (!lo_set && !hi_set) return schema_any_number(g);
    struct dec_bound dl = {0}, dh = {0};
    if (lo_set && !dec_from_double(lo, lo_x, &dl))
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                       "lower bound %.17g: bounds need at most 15 significant digits and |x| < 1e15",
                       lo);
    if (hi_set && !dec_from_double(hi, hi_x, &dh))
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                       "upper bound %.17g: bounds need at most 15 significant digits and |x| < 1e15",
                       hi);
    if (lo_set && hi_set && (lo > hi || (lo == hi && (lo_x || hi_x))))
        return schema_fail(c, ANVIL_ERR_INVALID, "no number lies between the minimum and maximum");
    return ir_num_range(g, &dl, &dh);
}

