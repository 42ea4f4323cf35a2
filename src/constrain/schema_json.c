/*
 * schema_json.c - the JSON side of the schema lowering (schema_int.h):
 * errors that name the schema's place as a JSON pointer, the pieces of
 * JSON syntax the lowering assembles (whitespace, separators, strings,
 * numbers, any value), and the writer of schema values (enum, const,
 * property names) as the exact JSON text the model must emit.
 *
 * Whitespace is bounded (constrain.h: CN_WS_FLEX, CN_WS_COMPACT), so that
 * a model cannot run on in spaces. A string's characters leave out \u
 * escapes of surrogates, so one escape is one code point (minLength
 * counts code points).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/schema_int.h"

/* ---------------------------------------------------------------------- */
/* errors and paths */

uint32_t schema_fail(struct sc *c, anvil_status st, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* a deep path keeps its last part, so that the message stays readable */
    const char *path = c->plen ? c->path : "/";
    bool cut = c->plen > 80;
    if (cut) path = c->path + c->plen - 80;
    return ir_fail(c->g, st, "JSON Schema at %s%s: %s", cut ? "..." : "", path, msg);
}

size_t schema_path_push(struct sc *c, const char *seg, const char *seg2) {
    size_t save = c->plen;
    int n = snprintf(c->path + c->plen, sizeof c->path - c->plen, "/%s%s%s", seg, seg2 ? "/" : "",
                     seg2 ? seg2 : "");
    if (n > 0) c->plen += (size_t)n;
    if (c->plen >= sizeof c->path) c->plen = sizeof c->path - 1;
    return save;
}

void schema_path_pop(struct sc *c, size_t save) {
    c->plen = save;
    c->path[save] = 0;
}

/* ---------------------------------------------------------------------- */
/* shared pieces of JSON text */

uint32_t schema_ws(struct sc *c) {
    struct cn_ir *g = c->g;
    if (c->ws == CN_WS_COMPACT) return ir_empty(g);
    struct cn_bset sp = {{0}};
    bset_add(&sp, ' ');
    bset_add(&sp, '\t');
    uint32_t nl = ir_seq2(g, ir_byte(g, '\n'), ir_rep(g, ir_bytes(g, &sp), 0, 20));
    return ir_opt(g, ir_alt2(g, ir_byte(g, ' '), nl));
}

uint32_t schema_colon(struct sc *c) {
    struct cn_ir *g = c->g;
    if (c->ws == CN_WS_COMPACT) return ir_byte(g, ':');
    return ir_seq2(g, ir_byte(g, ':'), ir_opt(g, ir_byte(g, ' ')));
}

uint32_t schema_sep(struct sc *c) { return ir_seq2(c->g, ir_byte(c->g, ','), schema_ws(c)); }

static uint32_t hex(struct cn_ir *g) {
    struct cn_bset s = {{0}};
    bset_add_range(&s, '0', '9');
    bset_add_range(&s, 'a', 'f');
    bset_add_range(&s, 'A', 'F');
    return ir_bytes(g, &s);
}

/* One character of a JSON string's text: an unescaped character (no '"',
 * '\\', control) or an escape; \u escapes of surrogates are left out so
 * that one escape is one code point. */
uint32_t schema_json_char(struct cn_ir *g) {
    struct cp_set raw = {0};
    cps_add(g, &raw, 0x20, 0x21);
    cps_add(g, &raw, 0x23, 0x5B);
    cps_add(g, &raw, 0x5D, CN_MAX_CP);
    uint32_t plain = ir_cps(g, &raw);
    cps_free(&raw);
    struct cn_bset e = {{0}};
    const char *simple = "\"\\/bfnrt";
    for (const char *p = simple; *p; p++) bset_add(&e, (uint8_t)*p);
    struct cn_bset nd = {{0}}, d = {{0}}, lo8 = {{0}};
    bset_add_range(&nd, '0', '9');
    bset_add_range(&nd, 'a', 'c');
    bset_add_range(&nd, 'A', 'C');
    bset_add_range(&nd, 'e', 'f');
    bset_add_range(&nd, 'E', 'F');
    bset_add(&d, 'd');
    bset_add(&d, 'D');
    bset_add_range(&lo8, '0', '7');
    uint32_t u4 = ir_alt2(g, ir_seq(g, (uint32_t[]){ir_bytes(g, &nd), hex(g), hex(g), hex(g)}, 4),
                          ir_seq(g, (uint32_t[]){ir_bytes(g, &d), ir_bytes(g, &lo8), hex(g), hex(g)}, 4));
    uint32_t esc = ir_seq2(g, ir_byte(g, '\\'), ir_alt2(g, ir_bytes(g, &e), ir_seq2(g, ir_byte(g, 'u'), u4)));
    return ir_alt2(g, plain, esc);
}

uint32_t schema_quoted(struct cn_ir *g, uint32_t body) {
    return ir_seq3(g, ir_byte(g, '"'), body, ir_byte(g, '"'));
}

uint32_t schema_any_string(struct cn_ir *g) {
    return schema_quoted(g, ir_rep(g, schema_json_char(g), 0, -1));
}

uint32_t schema_any_number(struct cn_ir *g) {
    uint32_t d = ir_byte_range(g, '0', '9');
    uint32_t ip = ir_alt2(g, ir_byte(g, '0'), ir_seq2(g, ir_byte_range(g, '1', '9'), ir_rep(g, d, 0, 15)));
    uint32_t frac = ir_opt(g, ir_seq2(g, ir_byte(g, '.'), ir_rep(g, d, 1, 16)));
    struct cn_bset eE = {{0}}, pm = {{0}};
    bset_add(&eE, 'e');
    bset_add(&eE, 'E');
    bset_add(&pm, '+');
    bset_add(&pm, '-');
    uint32_t ex = ir_opt(g, ir_seq3(g, ir_bytes(g, &eE), ir_opt(g, ir_bytes(g, &pm)), ir_rep(g, d, 1, 3)));
    return ir_seq(g, (uint32_t[]){ir_opt(g, ir_byte(g, '-')), ip, frac, ex}, 4);
}

/* Any JSON value / object: value ::= object | array | string | number |
 * true | false | null, recursive through object and array. */
void schema_build_any(struct sc *c) {
    struct cn_ir *g = c->g;
    if (c->r_value != CN_NIL) return;
    uint32_t rv = ir_rule_add(g, "json-value", 10);
    uint32_t ro = ir_rule_add(g, "json-object", 11);
    uint32_t ra = ir_rule_add(g, "json-array", 10);
    if (!ir_ok(g)) return;
    c->r_value = rv;
    c->r_object = ro;
    uint32_t member = ir_seq3(g, schema_any_string(g), schema_colon(c), ir_ref(g, rv));
    uint32_t members = ir_seq2(g, member, ir_rep(g, ir_seq2(g, schema_sep(c), member), 0, -1));
    ir_rule_define(g, ro, ir_seq(g, (uint32_t[]){ir_byte(g, '{'), schema_ws(c),
                                                 ir_opt(g, ir_seq2(g, members, schema_ws(c))),
                                                 ir_byte(g, '}')}, 4));
    uint32_t vals = ir_seq2(g, ir_ref(g, rv), ir_rep(g, ir_seq2(g, schema_sep(c), ir_ref(g, rv)), 0, -1));
    ir_rule_define(g, ra, ir_seq(g, (uint32_t[]){ir_byte(g, '['), schema_ws(c),
                                                 ir_opt(g, ir_seq2(g, vals, schema_ws(c))),
                                                 ir_byte(g, ']')}, 4));
    uint32_t alts[7] = {ir_ref(g, ro), ir_ref(g, ra), schema_any_string(g), schema_any_number(g),
                        ir_str(g, "true"), ir_str(g, "false"), ir_str(g, "null")};
    ir_rule_define(g, rv, ir_alt(g, alts, 7));
}

uint32_t schema_any_value(struct sc *c) {
    schema_build_any(c);
    return c->r_value == CN_NIL ? CN_NIL : ir_ref(c->g, c->r_value);
}


/* ---------------------------------------------------------------------- */
/* JSON text of schema values (enum, const, property names)
 *
 * These bytes are what the model must emit, so a string is written as the
 * schema spells it: only '"', '\\' and the controls below 0x20 are escaped
 * (constrain.h: "é" is raw UTF-8). This is not sb_json_str's rule, on
 * purpose: that one also escapes DEL and turns bytes that are not UTF-8
 * into U+FFFD, which here would change the value (U+FFFD) or give DEL a
 * second spelling that extra property names (schema.c's extra_name) do not
 * exclude. Numbers get their shortest round-trip spelling, integers below
 * 2^53 without a fraction (sb_json_num writes %.7g). */

void schema_write_string(struct sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
            else sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static bool write_number(struct sbuf *b, double v) {
    char t[40];
    if (!isfinite(v)) return false;
    if (v == floor(v) && fabs(v) < SCHEMA_MAX_SAFE) {
        snprintf(t, sizeof t, "%lld", (long long)v);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*g", p, v);
            if (strtod(t, NULL) == v) break;
        }
    }
    sb_puts(b, t);
    return true;
}

bool schema_write_value(struct sbuf *b, const cJSON *v, int depth) {
    if (depth > 64) return false;
    if (cJSON_IsNull(v)) sb_put(b, "null", 4);
    else if (cJSON_IsTrue(v)) sb_put(b, "true", 4);
    else if (cJSON_IsFalse(v)) sb_put(b, "false", 5);
    else if (cJSON_IsNumber(v)) return write_number(b, v->valuedouble);
    else if (cJSON_IsString(v)) schema_write_string(b, v->valuestring);
    else if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        sb_put(b, obj ? "{" : "[", 1);
        int i = 0;
        for (const cJSON *k = v->child; k; k = k->next, i++) {
            if (i) sb_put(b, ",", 1);
            if (obj) {
                schema_write_string(b, k->string);
                sb_put(b, ":", 1);
            }
            if (!schema_write_value(b, k, depth + 1)) return false;
        }
        sb_put(b, obj ? "}" : "]", 1);
    } else {
        return false;
    }
    return true;
}
