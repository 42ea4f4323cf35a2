/*
 * schema_int.h - what the files of the JSON Schema lowering share:
 *
 *   schema.c         the keyword walk: the keyword table, composition,
 *                    $ref, identical sub-schemas as one rule, objects,
 *                    arrays, enum/const, the entry points
 *   schema_scalar.c  strings (lengths, pattern, formats: a regex over the
 *                    decoded text rewritten to JSON's escaped text) and
 *                    numbers (bounds as digit automata, numrange.c)
 *   schema_json.c    the walk's context (errors at a JSON pointer), the
 *                    JSON syntax pieces every part uses (whitespace,
 *                    separators, strings, numbers, any value) and the
 *                    writer of schema values as JSON text
 *
 * Calls run down that list, never up. The subset of JSON Schema and the
 * generation choices are in constrain.h.
 */
#ifndef ANVIL_SCHEMA_INT_H
#define ANVIL_SCHEMA_INT_H

#include <cjson/cJSON.h>

#include "constrain/cn_int.h"
#include "core/sbuf.h"

/* 2^53: integer bounds beyond are not exact in a double */
#define SCHEMA_MAX_SAFE 9007199254740992.0

/* the keywords by role (schema.c's table names them) */
enum kw {
    KW_ANNOT, KW_DEFS, KW_TYPE, KW_ENUM, KW_CONST, KW_REF, KW_ANYOF, KW_ONEOF, KW_ALLOF,
    KW_PROPS, KW_REQ, KW_ADDL, KW_ITEMS, KW_PREFIX, KW_ADDITEMS, KW_MINITEMS, KW_MAXITEMS,
    KW_UNIQUE, KW_MINLEN, KW_MAXLEN, KW_PATTERN, KW_FORMAT, KW_MIN, KW_MAX, KW_XMIN, KW_XMAX,
    KW_MULTOF, KW_UNSUP, KW_COUNT
};

/* a schema object's keywords, NULL where absent */
struct kws {
    const cJSON *k[KW_COUNT];
};

/* the walk over one document */
struct sc {
    struct cn_ir *g;
    const cJSON *doc;
    enum cn_ws ws;
    int max_depth;
    struct {
        const cJSON *target;
        uint32_t rule;
    } *refs;
    uint32_t n_refs, cap_refs;
    uint32_t r_value, r_object; /* any JSON value / object: recursive rules, CN_NIL until built */
    /* sub-schemas by content: identical ones share one rule */
    struct sub_memo {
        uint64_t h;
        const cJSON *s;
        uint32_t rule;
    } *subs;
    uint32_t n_subs, cap_subs; /* cap_subs: power of two, open addressing */
    char path[320];
    size_t plen;
};

/* ---------------------------------------------------------------------- */
/* schema_json.c */

/* Record an error at the current path (ir_fail's contract): CN_NIL. */
uint32_t schema_fail(struct sc *c, anvil_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Append /seg (and /seg2) to the path; returns what schema_path_pop
 * restores. */
size_t schema_path_push(struct sc *c, const char *seg, const char *seg2);
void schema_path_pop(struct sc *c, size_t save);

/* JSON syntax as IR, with the whitespace of c->ws (constrain.h) */
uint32_t schema_ws(struct sc *c);
uint32_t schema_colon(struct sc *c);
uint32_t schema_sep(struct sc *c);                     /* ',' and whitespace */
uint32_t schema_quoted(struct cn_ir *g, uint32_t body); /* '"' body '"' */
uint32_t schema_json_char(struct cn_ir *g);             /* one character of a string's text */
uint32_t schema_any_string(struct cn_ir *g);
uint32_t schema_any_number(struct cn_ir *g);
/* Any JSON value (c->r_value) and object (c->r_object): recursive rules,
 * built once per document. schema_any_value: a REF to the value rule. */
void schema_build_any(struct sc *c);
uint32_t schema_any_value(struct sc *c);

/* The JSON text of s (NUL-terminated) / of v, appended to b (see
 * schema_json.c for the spelling). schema_write_value returns false when v
 * cannot be written (a number that is not finite, nesting over 64 levels);
 * an allocation failure is b->oom. */
void schema_write_string(struct sbuf *b, const char *s);
bool schema_write_value(struct sbuf *b, const cJSON *v, int depth);

/* ---------------------------------------------------------------------- */
/* schema_scalar.c */

/* v is an integer in [0, 1e15]: *out. */
bool schema_nonneg_int(const cJSON *v, int64_t *out);
/* A string / number value under k's keywords (integer: "type": "integer"). */
uint32_t schema_string(struct sc *c, const struct kws *k);
uint32_t schema_number(struct sc *c, const struct kws *k, bool integer);

#endif /* ANVIL_SCHEMA_INT_H */
