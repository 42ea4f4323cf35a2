/*
 * schema.c - JSON Schema (the subset of constrain.h) to the grammar IR:
 * the keyword walk. Strings and numbers are schema_scalar.c's, the JSON
 * syntax pieces and the value writer schema_json.c's (schema_int.h).
 *
 * The schema is parsed with cJSON and walked once. Each keyword is looked
 * up in a table that says what it is: handled, an annotation (ignored on
 * purpose), known but unsupported, or unknown - the last two are errors
 * naming the keyword and where it is (a JSON pointer), so a constraint
 * never silently means less than the schema says.
 *
 * Lowering. Every sub-schema that can be large (property values, items,
 * anyOf branches, $ref targets) becomes its own IR rule; the compiler
 * inlines the small ones and keeps big or recursive ones as calls. $ref
 * targets are memoized by the node they point at, so a recursive schema is
 * a recursive rule; other sub-schemas by content (member order included),
 * so a shape repeated under many properties is one rule. Objects use
 * IR_SUBSEQ for "declared properties in order, optional ones may be
 * missing, commas between", which stays linear in the number of
 * properties. Free-form JSON (any value) is a small recursive grammar
 * built once per schema.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/schema_int.h"
#include "core/hash.h"

#define KEY_MAX_CPS 512 /* declared property names excluded from extra names */

static const struct {
    const char *name;
    enum kw kw;
} keywords[] = {
    {"title", KW_ANNOT}, {"description", KW_ANNOT}, {"examples", KW_ANNOT},
    {"default", KW_ANNOT}, {"$schema", KW_ANNOT}, {"$id", KW_ANNOT}, {"$comment", KW_ANNOT},
    {"$anchor", KW_ANNOT}, {"deprecated", KW_ANNOT}, {"readOnly", KW_ANNOT},
    {"writeOnly", KW_ANNOT}, {"contentMediaType", KW_ANNOT}, {"contentEncoding", KW_ANNOT},
    {"$defs", KW_DEFS}, {"definitions", KW_DEFS},
    {"type", KW_TYPE}, {"enum", KW_ENUM}, {"const", KW_CONST}, {"$ref", KW_REF},
    {"anyOf", KW_ANYOF}, {"oneOf", KW_ONEOF}, {"allOf", KW_ALLOF},
    {"properties", KW_PROPS}, {"required", KW_REQ}, {"additionalProperties", KW_ADDL},
    {"items", KW_ITEMS}, {"prefixItems", KW_PREFIX}, {"additionalItems", KW_ADDITEMS},
    {"minItems", KW_MINITEMS}, {"maxItems", KW_MAXITEMS}, {"uniqueItems", KW_UNIQUE},
    {"minLength", KW_MINLEN}, {"maxLength", KW_MAXLEN}, {"pattern", KW_PATTERN},
    {"format", KW_FORMAT}, {"minimum", KW_MIN}, {"maximum", KW_MAX},
    {"exclusiveMinimum", KW_XMIN}, {"exclusiveMaximum", KW_XMAX}, {"multipleOf", KW_MULTOF},
    {"not", KW_UNSUP}, {"if", KW_UNSUP}, {"then", KW_UNSUP}, {"else", KW_UNSUP},
    {"dependentRequired", KW_UNSUP}, {"dependentSchemas", KW_UNSUP}, {"dependencies", KW_UNSUP},
    {"patternProperties", KW_UNSUP}, {"propertyNames", KW_UNSUP}, {"minProperties", KW_UNSUP},
    {"maxProperties", KW_UNSUP}, {"unevaluatedProperties", KW_UNSUP},
    {"unevaluatedItems", KW_UNSUP}, {"contains", KW_UNSUP}, {"minContains", KW_UNSUP},
    {"maxContains", KW_UNSUP}, {"contentSchema", KW_UNSUP}, {"$dynamicRef", KW_UNSUP},
    {"$dynamicAnchor", KW_UNSUP}, {"$recursiveRef", KW_UNSUP}, {"$recursiveAnchor", KW_UNSUP},
    {"$vocabulary", KW_UNSUP},
};

/* ---------------------------------------------------------------------- */
/* identical sub-schemas */

static uint32_t schema_node(struct sc *c, const cJSON *s, int depth);

/* structural hash and equality of JSON values, member order included
 * (order matters: properties are produced in declared order) */
static uint64_t json_hash(const cJSON *v, int depth) {
    const uint64_t mix = 0x9e3779b97f4a7c15ull;
    uint64_t h = ((uint64_t)(v->type & 0xff) + 1) * mix;
    if (depth > 200) return h;
    if (v->string && depth > 0) /* a member's key; not the top node's own key */
        h = (h ^ hash_fnv1a(v->string, strlen(v->string))) * mix;
    if (cJSON_IsString(v)) h = (h ^ hash_fnv1a(v->valuestring, strlen(v->valuestring))) * mix;
    if (cJSON_IsNumber(v)) h = (h ^ hash_fnv1a(&v->valuedouble, sizeof v->valuedouble)) * mix;
    for (const cJSON *k = v->child; k; k = k->next) h = (h ^ json_hash(k, depth + 1)) * mix;
    return h;
}

static bool json_eq(const cJSON *a, const cJSON *b, int depth) {
    if ((a->type & 0xff) != (b->type & 0xff) || depth > 200) return false;
    if (depth > 0 &&
        ((a->string == NULL) != (b->string == NULL) || (a->string && strcmp(a->string, b->string))))
        return false;
    if (cJSON_IsString(a) && strcmp(a->valuestring, b->valuestring)) return false;
    if (cJSON_IsNumber(a) && memcmp(&a->valuedouble, &b->valuedouble, sizeof a->valuedouble))
        return false;
    const cJSON *x = a->child, *y = b->child;
    for (; x && y; x = x->next, y = y->next)
        if (!json_eq(x, y, depth + 1)) return false;
    return !x && !y;
}

/* A sub-schema as its own rule (the compiler inlines it when small, and
 * makes it a call when it is big and used often). Identical sub-schemas
 * anywhere in the document share one rule. */
static uint32_t sub_rule(struct sc *c, const cJSON *s, int depth) {
    struct cn_ir *g = c->g;
    if (cJSON_IsBool(s)) return schema_node(c, s, depth);
    uint64_t h = json_hash(s, 0);
    if ((uint64_t)(c->n_subs + 1) * 2 > c->cap_subs) {
        uint32_t nc = c->cap_subs ? c->cap_subs * 2 : 64;
        struct sub_memo *t = core_calloc(nc, sizeof *t);
        if (!t) return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < c->cap_subs; i++) {
            if (!c->subs[i].s) continue;
            uint32_t j = (uint32_t)c->subs[i].h & (nc - 1);
            while (t[j].s) j = (j + 1) & (nc - 1);
            t[j] = c->subs[i];
        }
        core_free(c->subs);
        c->subs = t;
        c->cap_subs = nc;
    }
    uint32_t j = (uint32_t)h & (c->cap_subs - 1);
    for (; c->subs[j].s; j = (j + 1) & (c->cap_subs - 1))
        if (c->subs[j].h == h && json_eq(c->subs[j].s, s, 0)) return ir_ref(g, c->subs[j].rule);
    uint32_t r = ir_rule_add(g, c->path, c->plen > 100 ? 100 : c->plen);
    if (r == CN_NIL) return CN_NIL;
    c->subs[j] = (struct sub_memo){h, s, r};
    c->n_subs++;
    uint32_t body = schema_node(c, s, depth);
    if (body == CN_NIL) return CN_NIL;
    ir_rule_define(g, r, body);
    return ir_ref(g, r);
}

/* ---------------------------------------------------------------------- */
/* $ref */

static const cJSON *resolve(struct sc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = c->doc;
    const char *p = ref + 1;
    if (*p == 0) return cur;
    if (*p != '/') return NULL;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/') {
            int ch = (unsigned char)*p++;
            if (ch == '%' && cn_hexval(p[0]) >= 0 && cn_hexval(p[1]) >= 0) {
                ch = cn_hexval(p[0]) * 16 + cn_hexval(p[1]);
                p += 2;
            } else if (ch == '~' && (*p == '0' || *p == '1')) {
                ch = *p++ == '0' ? '~' : '/';
            }
            if (n + 1 >= sizeof tok) return NULL;
            tok[n++] = (char)ch;
        }
        tok[n] = 0;
        if (cJSON_IsObject(cur)) {
            const cJSON *next = NULL;
            for (const cJSON *k = cur->child; k; k = k->next)
                if (k->string && !strcmp(k->string, tok)) {
                    next = k;
                    break;
                }
            cur = next;
        } else if (cJSON_IsArray(cur)) {
            char *end;
            long idx = strtol(tok, &end, 10);
            if (*end || idx < 0 || !tok[0]) return NULL;
            cur = cJSON_GetArrayItem(cur, (int)idx);
        } else {
            return NULL;
        }
    }
    return cur;
}

static uint32_t ref_node(struct sc *c, const cJSON *refv, int depth) {
    struct cn_ir *g = c->g;
    if (!cJSON_IsString(refv)) return schema_fail(c, ANVIL_ERR_INVALID, "'$ref' must be a string");
    const char *ref = refv->valuestring;
    if (ref[0] != '#')
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                       "$ref '%.80s' is not supported (only '#' and '#/...' pointers)", ref);
    const cJSON *t = resolve(c, ref);
    if (!t) return schema_fail(c, ANVIL_ERR_INVALID, "$ref '%.80s' points at nothing", ref);
    for (uint32_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == t) return ir_ref(g, c->refs[i].rule);
    if (c->n_refs == c->cap_refs) {
        uint32_t nc = c->cap_refs ? c->cap_refs * 2 : 16;
        void *q = core_realloc(c->refs, (size_t)nc * sizeof *c->refs);
        if (!q) return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
        c->refs = q;
        c->cap_refs = nc;
    }
    uint32_t r = ir_rule_add(g, ref, strlen(ref) > 100 ? 100 : strlen(ref));
    if (r == CN_NIL) return CN_NIL;
    c->refs[c->n_refs].target = t;
    c->refs[c->n_refs].rule = r;
    c->n_refs++;
    /* the target's errors are reported at its own path */
    char save_path[sizeof c->path];
    size_t save_len = c->plen;
    memcpy(save_path, c->path, sizeof save_path);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    c->plen = strlen(c->path);
    uint32_t body = schema_node(c, t, depth + 1);
    memcpy(c->path, save_path, sizeof save_path);
    c->plen = save_len;
    if (body == CN_NIL) return CN_NIL;
    ir_rule_define(g, r, body);
    return ir_ref(g, r);
}

/* ---------------------------------------------------------------------- */
/* types */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64 };

static int type_bit(const char *t) {
    static const char *names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

static bool value_has_type(const cJSON *v, int types) {
    if (cJSON_IsNull(v)) return types & T_NULL;
    if (cJSON_IsBool(v)) return types & T_BOOL;
    if (cJSON_IsNumber(v))
        return (types & T_NUM) || ((types & T_INT) && v->valuedouble == floor(v->valuedouble));
    if (cJSON_IsString(v)) return types & T_STR;
    if (cJSON_IsArray(v)) return types & T_ARR;
    if (cJSON_IsObject(v)) return types & T_OBJ;
    return false;
}

/* ---------------------------------------------------------------------- */
/* objects */

/* escape-free string text that spells none of the keys (code points) */
struct ktrie {
    uint32_t cp;
    bool end;
    uint32_t child, next; /* first child, next sibling: indices, 0 none */
};

static uint32_t not_in(struct sc *c, struct ktrie *t, uint32_t node, int depth) {
    struct cn_ir *g = c->g;
    if (depth > KEY_MAX_CPS) return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "property name too long");
    struct ir_list l = {0};
    /* the raw characters of a JSON string */
    struct cp_set other = {0};
    cps_add(g, &other, 0x20, 0x21);
    cps_add(g, &other, 0x23, 0x5B);
    cps_add(g, &other, 0x5D, CN_MAX_CP);
    struct cp_set ex = {0};
    for (uint32_t k = t[node].child; k; k = t[k].next) cps_add(g, &ex, t[k].cp, t[k].cp);
    /* other minus the children's code points */
    cps_negate(g, &ex);
    struct cp_set both = {0};
    cps_normalize(&other);
    for (uint32_t i = 0, j = 0; i < other.n && j < ex.n;) {
        uint32_t lo = other.r[i].lo > ex.r[j].lo ? other.r[i].lo : ex.r[j].lo;
        uint32_t hi = other.r[i].hi < ex.r[j].hi ? other.r[i].hi : ex.r[j].hi;
        if (lo <= hi) cps_add(g, &both, lo, hi);
        if (other.r[i].hi < ex.r[j].hi) i++;
        else j++;
    }
    struct cp_set all = {0};
    cps_add(g, &all, 0x20, 0x21);
    cps_add(g, &all, 0x23, 0x5B);
    cps_add(g, &all, 0x5D, CN_MAX_CP);
    uint32_t any_raw = ir_rep(g, ir_cps(g, &all), 0, -1);
    if (!t[node].end) ir_list_push(g, &l, ir_empty(g));
    if (both.n) ir_list_push(g, &l, ir_seq2(g, ir_cps(g, &both), any_raw));
    for (uint32_t k = t[node].child; k && ir_ok(g); k = t[k].next)
        ir_list_push(g, &l, ir_seq2(g, ir_cp(g, t[k].cp), not_in(c, t, k, depth + 1)));
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    cps_free(&other);
    cps_free(&ex);
    cps_free(&both);
    cps_free(&all);
    return r;
}

/* A name for extra properties: a string that is none of the declared
 * names. Names that need escaping cannot collide with escape-free text. */
static uint32_t extra_name(struct sc *c, const cJSON *props) {
    struct cn_ir *g = c->g;
    if (!props || !props->child) return schema_any_string(g);
    uint32_t cap = 64, n = 1;
    struct ktrie *t = core_calloc(cap, sizeof *t);
    if (!t) return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
    for (const cJSON *p = props->child; p; p = p->next) {
        const uint8_t *s = (const uint8_t *)p->string;
        size_t len = strlen(p->string);
        bool plain = true;
        for (size_t i = 0; i < len; i++) plain &= s[i] >= 0x20 && s[i] != '"' && s[i] != '\\';
        if (!plain) continue;
        uint32_t node = 0;
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            int m = cn_utf8_decode(s + i, len - i, &cp);
            if (m == 0) {
                core_free(t);
                return schema_fail(c, ANVIL_ERR_INVALID, "property name is not valid UTF-8");
            }
            i += (size_t)m;
            uint32_t k = t[node].child;
            while (k && t[k].cp != cp) k = t[k].next;
            if (!k) {
                if (n == cap) {
                    struct ktrie *q = core_realloc(t, (size_t)cap * 2 * sizeof *t);
                    if (!q) {
                        core_free(t);
                        return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
                    }
                    t = q;
                    memset(t + cap, 0, (size_t)cap * sizeof *t);
                    cap *= 2;
                }
                k = n++;
                t[k].cp = cp;
                t[k].next = t[node].child;
                t[node].child = k;
            }
            node = k;
        }
        t[node].end = true;
    }
    uint32_t r = schema_quoted(g, not_in(c, t, 0, 0));
    core_free(t);
    return r;
}

static uint32_t object_node(struct sc *c, const struct kws *k, int depth) {
    struct cn_ir *g = c->g;
    const cJSON *props = k->k[KW_PROPS], *req = k->k[KW_REQ], *addl = k->k[KW_ADDL];
    if (props && !cJSON_IsObject(props))
        return schema_fail(c, ANVIL_ERR_INVALID, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return schema_fail(c, ANVIL_ERR_INVALID, "'required' must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return schema_fail(c, ANVIL_ERR_INVALID, "'additionalProperties' must be a boolean or a schema");
    if (req) {
        for (const cJSON *r = req->child; r; r = r->next) {
            if (!cJSON_IsString(r))
                return schema_fail(c, ANVIL_ERR_INVALID, "'required' must list strings");
            if (!props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
                return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                               "required property '%.60s' is not in 'properties' (extra "
                               "properties are never required)", r->valuestring);
        }
    }
    /* extra properties: absent additionalProperties means any when no
     * properties are declared, none otherwise (constrain.h) */
    bool extras = addl ? !cJSON_IsFalse(addl) : !props;
    struct ir_list m = {0};
    bool *rq = NULL;
    uint32_t n_props = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) n_props++;
    rq = core_calloc(n_props + 1, sizeof *rq);
    if (!rq) return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
    uint32_t i = 0;
    for (const cJSON *p = props ? props->child : NULL; p && ir_ok(g); p = p->next, i++) {
        struct sbuf kb;
        sb_init(&kb);
        schema_write_string(&kb, p->string);
        if (kb.oom) {
            sb_free(&kb);
            core_free(rq);
            ir_list_free(&m);
            return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
        }
        size_t save = schema_path_push(c, "properties", p->string);
        uint32_t val = sub_rule(c, p, depth + 1);
        schema_path_pop(c, save);
        ir_list_push(g, &m, ir_seq3(g, ir_lit(g, kb.p, kb.len), schema_colon(c), val));
        sb_free(&kb);
        if (req)
            for (const cJSON *r = req->child; r; r = r->next)
                if (!strcmp(r->valuestring, p->string)) rq[i] = true;
    }
    if (extras && ir_ok(g)) {
        uint32_t val;
        if (addl && cJSON_IsObject(addl)) {
            size_t save = schema_path_push(c, "additionalProperties", NULL);
            val = sub_rule(c, addl, depth + 1);
            schema_path_pop(c, save);
        } else {
            val = schema_any_value(c);
        }
        uint32_t one = ir_seq3(g, extra_name(c, props), schema_colon(c), val);
        ir_list_push(g, &m, ir_seq2(g, one, ir_rep(g, ir_seq2(g, schema_sep(c), one), 0, -1)));
        if (ir_ok(g)) rq[m.n - 1] = false; /* (after an error nothing was pushed: fuzz_constrain) */
    }
    /* "{" ws (members ws)? "}": one whitespace slot when empty */
    bool any_req = false;
    for (uint32_t j = 0; j < m.n; j++) any_req |= rq[j];
    uint32_t body = ir_empty(g);
    if (m.n) {
        body = ir_seq2(g, ir_subseq(g, schema_sep(c), m.v, rq, m.n, true), schema_ws(c));
        if (!any_req) body = ir_opt(g, body);
    }
    ir_list_free(&m);
    core_free(rq);
    return ir_seq(g, (uint32_t[]){ir_byte(g, '{'), schema_ws(c), body, ir_byte(g, '}')}, 4);
}

/* ---------------------------------------------------------------------- */
/* arrays */

static uint32_t array_node(struct sc *c, const struct kws *k, int depth) {
    struct cn_ir *g = c->g;
    const cJSON *prefix = k->k[KW_PREFIX], *items = k->k[KW_ITEMS], *more = k->k[KW_ADDITEMS];
    int64_t min = 0, max = -1;
    if (k->k[KW_MINITEMS] && !schema_nonneg_int(k->k[KW_MINITEMS], &min))
        return schema_fail(c, ANVIL_ERR_INVALID, "'minItems' must be a non-negative integer");
    if (k->k[KW_MAXITEMS] && !schema_nonneg_int(k->k[KW_MAXITEMS], &max))
        return schema_fail(c, ANVIL_ERR_INVALID, "'maxItems' must be a non-negative integer");
    if (k->k[KW_UNIQUE] && !cJSON_IsFalse(k->k[KW_UNIQUE])) {
        if (!cJSON_IsBool(k->k[KW_UNIQUE]))
            return schema_fail(c, ANVIL_ERR_INVALID, "'uniqueItems' must be a boolean");
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "'uniqueItems': true is not supported");
    }
    if (min > CN_MAX_REPEAT || max > CN_MAX_REPEAT)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "array length bounds above %d", CN_MAX_REPEAT);
    /* draft-04..07 tuples: items as an array, additionalItems for the rest */
    const cJSON *tuple = prefix, *rest = items;
    if (items && cJSON_IsArray(items)) {
        if (prefix) return schema_fail(c, ANVIL_ERR_INVALID, "both 'prefixItems' and array 'items'");
        tuple = items;
        rest = more;
    } else if (more) {
        return schema_fail(c, ANVIL_ERR_INVALID, "'additionalItems' without array 'items'");
    }
    if (tuple && !cJSON_IsArray(tuple))
        return schema_fail(c, ANVIL_ERR_INVALID, "'prefixItems' must be an array");
    if (rest && !cJSON_IsBool(rest) && !cJSON_IsObject(rest))
        return schema_fail(c, ANVIL_ERR_INVALID, "'items' must be a schema");
    int nt = tuple ? cJSON_GetArraySize(tuple) : 0;
    /* items absent: any items without a tuple, none after one (constrain.h) */
    bool rest_any = rest ? !cJSON_IsFalse(rest) : !tuple;
    if (!rest_any && (max < 0 || max > nt)) max = nt;
    if (max >= 0 && min > max)
        return schema_fail(c, ANVIL_ERR_INVALID, "'minItems' above the number of items allowed");
    if (max >= 0 && nt > max) nt = (int)max;
    uint32_t item = CN_NIL;
    if (rest_any) {
        size_t save = schema_path_push(c, tuple == prefix ? "items" : "additionalItems", NULL);
        item = rest ? sub_rule(c, rest, depth + 1) : schema_any_value(c);
        schema_path_pop(c, save);
        if (item == CN_NIL) return CN_NIL;
    }
    /* after the tuple: (sep item){max(0, min-nt), max-nt} */
    uint32_t tail = ir_empty(g);
    if (rest_any) {
        int64_t a = min > nt ? min - nt : 0, b = max < 0 ? -1 : max - nt;
        tail = ir_rep(g, ir_seq2(g, schema_sep(c), item), (int32_t)a, (int32_t)b);
    }
    /* the tuple from the back: R_j = what follows element j */
    uint32_t r = tail;
    for (int j = nt; j >= 1 && ir_ok(g); j--) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", j - 1);
        size_t save = schema_path_push(c, tuple == prefix ? "prefixItems" : "items", idx);
        uint32_t e = sub_rule(c, cJSON_GetArrayItem(tuple, j - 1), depth + 1);
        schema_path_pop(c, save);
        if (j == 1) {
            r = ir_seq2(g, e, r);
        } else {
            uint32_t x = ir_seq3(g, schema_sep(c), e, r);
            r = j <= min ? x : ir_opt(g, x);
        }
    }
    /* "[" ws (items ws)? "]": one whitespace slot when empty */
    uint32_t list = CN_NIL;
    if (nt >= 1) {
        list = r;
    } else if (rest_any && max != 0) {
        int64_t b = max < 0 ? -1 : max - 1;
        list = ir_seq2(g, item, ir_rep(g, ir_seq2(g, schema_sep(c), item), min > 0 ? (int32_t)min - 1 : 0,
                                       (int32_t)b));
    }
    uint32_t content = ir_empty(g);
    if (list != CN_NIL) {
        content = ir_seq2(g, list, schema_ws(c));
        if (min < 1) content = ir_opt(g, content);
    }
    return ir_seq(g, (uint32_t[]){ir_byte(g, '['), schema_ws(c), content, ir_byte(g, ']')}, 4);
}

/* ---------------------------------------------------------------------- */
/* a schema */

static bool kw_lookup(const char *name, enum kw *out) {
    for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
        if (!strcmp(keywords[i].name, name)) {
            *out = keywords[i].kw;
            return true;
        }
    return false;
}

/* keywords that constrain a value (not annotations, not $defs) */
static bool constraining(enum kw w) { return w != KW_ANNOT && w != KW_DEFS; }

/* One JSON value as text: scalars as their literal; arrays and objects
 * with the same whitespace as generated structures (keys in the value's
 * order), so "enum": [{"a": 1}] may come out indented like the rest. */
static uint32_t literal_ir(struct sc *c, const cJSON *v, int depth) {
    struct cn_ir *g = c->g;
    if (depth > c->max_depth)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "value nested deeper than %d levels", c->max_depth);
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        struct ir_list l = {0};
        for (const cJSON *k = v->child; k && ir_ok(g); k = k->next) {
            uint32_t item = literal_ir(c, k, depth + 1);
            if (obj) {
                struct sbuf kb;
                sb_init(&kb);
                schema_write_string(&kb, k->string);
                if (kb.oom) {
                    sb_free(&kb);
                    ir_list_free(&l);
                    return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
                }
                item = ir_seq3(g, ir_lit(g, kb.p, kb.len), schema_colon(c), item);
                sb_free(&kb);
            }
            if (l.n) item = ir_seq2(g, schema_sep(c), item);
            ir_list_push(g, &l, item);
        }
        uint32_t body = l.n ? ir_seq2(g, ir_seq(g, l.v, l.n), schema_ws(c)) : ir_empty(g);
        ir_list_free(&l);
        return ir_seq(g, (uint32_t[]){ir_byte(g, obj ? '{' : '['), schema_ws(c), body,
                                     ir_byte(g, obj ? '}' : ']')}, 4);
    }
    struct sbuf b;
    sb_init(&b);
    bool ok = schema_write_value(&b, v, 0), oom = b.oom;
    if (oom || !ok) {
        sb_free(&b);
        if (oom) return ir_fail(g, ANVIL_ERR_NOMEM, "out of memory");
        return schema_fail(c, ANVIL_ERR_INVALID, "a value of 'enum'/'const' cannot be written as JSON");
    }
    uint32_t r = ir_lit(g, b.p, b.len);
    sb_free(&b);
    return r;
}

static uint32_t literal_alt(struct sc *c, const cJSON *vals, int types, const char *what) {
    struct cn_ir *g = c->g;
    struct ir_list l = {0};
    for (const cJSON *v = vals; v && ir_ok(g); v = v->next) {
        if (types && !value_has_type(v, types)) continue;
        ir_list_push(g, &l, literal_ir(c, v, 0));
    }
    if (ir_ok(g) && l.n == 0) {
        ir_list_free(&l);
        return schema_fail(c, ANVIL_ERR_INVALID, "'%s' leaves no value (of the given type)", what);
    }
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

static uint32_t schema_node(struct sc *c, const cJSON *s, int depth) {
    struct cn_ir *g = c->g;
    if (!ir_ok(g)) return CN_NIL;
    if (depth > c->max_depth)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "schema nested deeper than %d levels", c->max_depth);
    if (cJSON_IsTrue(s)) return schema_any_value(c);
    if (cJSON_IsFalse(s)) return ir_none(g);
    if (!cJSON_IsObject(s)) return schema_fail(c, ANVIL_ERR_INVALID, "a schema must be an object or a boolean");
    struct kws k;
    memset(&k, 0, sizeof k);
    const char *other = NULL; /* first constraining keyword that is not $ref/anyOf/... */
    for (const cJSON *e = s->child; e; e = e->next) {
        enum kw w;
        if (!kw_lookup(e->string, &w))
            return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "unknown keyword '%.60s'", e->string);
        if (w == KW_UNSUP)
            return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "keyword '%.60s' is not supported", e->string);
        if (k.k[w] && w != KW_ANNOT && w != KW_DEFS)
            return schema_fail(c, ANVIL_ERR_INVALID, "keyword '%.60s' given twice", e->string);
        k.k[w] = e;
        if (constraining(w) && w != KW_REF && w != KW_ANYOF && w != KW_ONEOF && w != KW_ALLOF &&
            !other)
            other = e->string;
    }
    /* composition keywords take the whole schema */
    int n_comp = !!k.k[KW_REF] + !!k.k[KW_ANYOF] + !!k.k[KW_ONEOF] + !!k.k[KW_ALLOF];
    if (n_comp > 1)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                       "combining '$ref', 'anyOf', 'oneOf' and 'allOf' in one schema is not supported");
    if (n_comp == 1 && other)
        return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "keyword '%.60s' next to '%s' is not supported",
                       other,
                       k.k[KW_REF] ? "$ref" : k.k[KW_ANYOF] ? "anyOf" : k.k[KW_ONEOF] ? "oneOf" : "allOf");
    if (k.k[KW_REF]) return ref_node(c, k.k[KW_REF], depth);
    if (k.k[KW_ALLOF]) {
        const cJSON *a = k.k[KW_ALLOF];
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0)
            return schema_fail(c, ANVIL_ERR_INVALID, "'allOf' must be a non-empty array");
        if (cJSON_GetArraySize(a) > 1)
            return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "'allOf' with more than one schema is not supported");
        size_t save = schema_path_push(c, "allOf", "0");
        uint32_t r = schema_node(c, a->child, depth + 1);
        schema_path_pop(c, save);
        return r;
    }
    if (k.k[KW_ANYOF] || k.k[KW_ONEOF]) {
        const cJSON *a = k.k[KW_ANYOF] ? k.k[KW_ANYOF] : k.k[KW_ONEOF];
        const char *nm = k.k[KW_ANYOF] ? "anyOf" : "oneOf";
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0)
            return schema_fail(c, ANVIL_ERR_INVALID, "'%s' must be a non-empty array", nm);
        struct ir_list l = {0};
        int i = 0;
        for (const cJSON *b = a->child; b && ir_ok(g); b = b->next, i++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            size_t save = schema_path_push(c, nm, idx);
            ir_list_push(g, &l, sub_rule(c, b, depth + 1));
            schema_path_pop(c, save);
        }
        uint32_t r = ir_alt(g, l.v, l.n);
        ir_list_free(&l);
        return r;
    }
    /* types: given, or inferred from the keywords */
    int types = 0;
    const cJSON *tv = k.k[KW_TYPE];
    if (tv) {
        if (cJSON_IsString(tv)) {
            types = type_bit(tv->valuestring);
            if (!types) return schema_fail(c, ANVIL_ERR_INVALID, "unknown type '%.40s'", tv->valuestring);
        } else if (cJSON_IsArray(tv) && tv->child) {
            for (const cJSON *t = tv->child; t; t = t->next) {
                int b = cJSON_IsString(t) ? type_bit(t->valuestring) : 0;
                if (!b) return schema_fail(c, ANVIL_ERR_INVALID, "'type' lists an unknown type");
                types |= b;
            }
        } else {
            return schema_fail(c, ANVIL_ERR_INVALID, "'type' must be a string or a non-empty array");
        }
    }
    if (k.k[KW_ENUM] || k.k[KW_CONST]) {
        for (int w = 0; w < KW_COUNT; w++)
            if (k.k[w] && constraining((enum kw)w) && w != KW_ENUM && w != KW_CONST && w != KW_TYPE)
                return schema_fail(c, ANVIL_ERR_UNSUPPORTED,
                               "keyword '%.60s' together with 'enum'/'const' is not supported",
                               k.k[w]->string);
        if (k.k[KW_ENUM] && k.k[KW_CONST])
            return schema_fail(c, ANVIL_ERR_UNSUPPORTED, "'enum' together with 'const' is not supported");
        if (k.k[KW_CONST]) {
            /* one value: detach a view of it */
            const cJSON *v = k.k[KW_CONST];
            cJSON one = *v;
            one.next = NULL;
            one.prev = NULL;
            return literal_alt(c, &one, types, "const");
        }
        const cJSON *e = k.k[KW_ENUM];
        if (!cJSON_IsArray(e) || !e->child)
            return schema_fail(c, ANVIL_ERR_INVALID, "'enum' must be a non-empty array");
        return literal_alt(c, e->child, types, "enum");
    }
    if (!types) {
        if (k.k[KW_PROPS] || k.k[KW_REQ] || k.k[KW_ADDL]) types |= T_OBJ;
        if (k.k[KW_ITEMS] || k.k[KW_PREFIX] || k.k[KW_ADDITEMS] || k.k[KW_MINITEMS] ||
            k.k[KW_MAXITEMS] || k.k[KW_UNIQUE])
            types |= T_ARR;
        if (k.k[KW_MINLEN] || k.k[KW_MAXLEN] || k.k[KW_PATTERN] || k.k[KW_FORMAT]) types |= T_STR;
        if (k.k[KW_MIN] || k.k[KW_MAX] || k.k[KW_XMIN] || k.k[KW_XMAX] || k.k[KW_MULTOF])
            types |= T_NUM;
        if (!types) return schema_any_value(c);
    }
    struct ir_list l = {0};
    if (types & T_OBJ) ir_list_push(g, &l, object_node(c, &k, depth));
    if (types & T_ARR) ir_list_push(g, &l, array_node(c, &k, depth));
    if (types & T_STR) ir_list_push(g, &l, schema_string(c, &k));
    if (types & T_NUM) ir_list_push(g, &l, schema_number(c, &k, false));
    else if (types & T_INT) ir_list_push(g, &l, schema_number(c, &k, true));
    if (types & T_BOOL) ir_list_push(g, &l, ir_alt2(g, ir_str(g, "true"), ir_str(g, "false")));
    if (types & T_NULL) ir_list_push(g, &l, ir_str(g, "null"));
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

/* ---------------------------------------------------------------------- */
/* entry points */

static anvil_status finish(struct sc *c, uint32_t body, struct cn_ir **out, char *err, size_t err_cap) {
    struct cn_ir *g = c->g;
    uint32_t root = ir_rule_add(g, "root", 4);
    ir_rule_define(g, root, body);
    core_free(c->refs);
    core_free(c->subs);
    if (!ir_ok(g) || body == CN_NIL) {
        if (ir_ok(g)) ir_fail(g, ANVIL_ERR_INVALID, "JSON Schema: internal error");
        errmsg_set(err, err_cap, "%s", g->err);
        anvil_status st = g->st;
        ir_free(g);
        return st;
    }
    g->root = root;
    *out = g;
    return ANVIL_OK;
}

static anvil_status sc_init(struct sc *c, const struct cn_options *opt, char *err, size_t err_cap) {
    struct cn_limits lim = cn_limits_resolve(opt ? &opt->limits : NULL);
    memset(c, 0, sizeof *c);
    c->ws = opt ? opt->ws : CN_WS_FLEX;
    c->max_depth = lim.max_depth;
    c->r_value = c->r_object = CN_NIL;
    anvil_status st = ir_init(&c->g, (uint32_t)lim.max_nfa_states);
    if (st != ANVIL_OK) errmsg_set(err, err_cap, "out of memory");
    return st;
}

anvil_status cn_parse_schema(const char *text, size_t len, const struct cn_options *opt,
                             struct cn_ir **out, char *err, size_t err_cap) {
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!doc) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        errmsg_set(err, err_cap,
                   "JSON Schema: not valid JSON (near byte %zu; nesting is limited to %d)", at,
                   CJSON_NESTING_LIMIT);
        return ANVIL_ERR_INVALID;
    }
    for (const char *p = end; p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(doc);
            errmsg_set(err, err_cap, "JSON Schema: trailing characters after the schema");
            return ANVIL_ERR_INVALID;
        }
    }
    struct sc c;
    anvil_status st = sc_init(&c, opt, err, err_cap);
    if (st != ANVIL_OK) {
        cJSON_Delete(doc);
        return st;
    }
    c.doc = doc;
    uint32_t body = schema_node(&c, doc, 0);
    st = finish(&c, body, out, err, err_cap);
    cJSON_Delete(doc);
    return st;
}

anvil_status cn_parse_json_any(const struct cn_options *opt, struct cn_ir **out, char *err,
                               size_t err_cap) {
    struct sc c;
    anvil_status st = sc_init(&c, opt, err, err_cap);
    if (st != ANVIL_OK) return st;
    schema_build_any(&c);
    uint32_t body = c.r_object == CN_NIL ? CN_NIL : ir_ref(c.g, c.r_object);
    return finish(&c, body, out, err, err_cap);
}


/* a string member of o (NULL: absent; *bad: present and not a string) */
static const char *str_member(const cJSON *o, const char *k, bool *bad) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v) return "";
    if (!cJSON_IsString(v)) {
        *bad = true;
        return "";
    }
    return v->valuestring;
}

anvil_status cn_parse_calls(const char *text, size_t len, const struct cn_options *opt,
                            struct cn_ir **out, char *err, size_t err_cap) {
    cJSON *doc = cJSON_ParseWithLength(text, len);
    const cJSON *calls = doc ? cJSON_GetObjectItemCaseSensitive(doc, "calls") : NULL;
    const cJSON *maxv = doc ? cJSON_GetObjectItemCaseSensitive(doc, "max") : NULL;
    bool bad = !cJSON_IsObject(doc) || !cJSON_IsArray(calls) || !cJSON_GetArraySize(calls) ||
               (maxv && (!cJSON_IsNumber(maxv) || maxv->valuedouble < 0 ||
                         maxv->valuedouble > 1e6));
    const char *sep = bad ? "" : str_member(doc, "sep", &bad);
    const char *fin = bad ? "" : str_member(doc, "end", &bad);
    if (bad) {
        cJSON_Delete(doc);
        errmsg_set(err, err_cap, "tool calls: expected {\"calls\": [{\"before\", \"schema\", "
                   "\"after\"}, ...], \"sep\", \"end\", \"max\"}");
        return ANVIL_ERR_INVALID;
    }
    int32_t max = maxv ? (int32_t)maxv->valuedouble : 0;
    struct sc c;
    anvil_status st = sc_init(&c, opt, err, err_cap);
    if (st != ANVIL_OK) {
        cJSON_Delete(doc);
        return st;
    }
    c.doc = doc;
    uint32_t alt = CN_NIL;
    int i = 0;
    for (const cJSON *k = calls->child; k && ir_ok(c.g); k = k->next, i++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(k, "schema");
        const char *before = str_member(k, "before", &bad);
        const char *after = str_member(k, "after", &bad);
        if (bad || !cJSON_IsObject(k) || !s) {
            ir_fail(c.g, ANVIL_ERR_INVALID, "tool calls: calls[%d] needs a string 'before' and "
                    "'after' and a 'schema'", i);
            break;
        }
        uint32_t one = ir_seq3(c.g, ir_str(c.g, before), sub_rule(&c, s, 1), ir_str(c.g, after));
        alt = alt == CN_NIL ? one : ir_alt2(c.g, alt, one);
    }
    uint32_t body = CN_NIL;
    if (ir_ok(c.g) && alt != CN_NIL) {
        uint32_t call = ir_rule_add(c.g, "call", 4);
        ir_rule_define(c.g, call, alt);
        uint32_t more = max == 1 ? ir_empty(c.g)
                        : ir_rep(c.g, ir_seq2(c.g, ir_str(c.g, sep), ir_ref(c.g, call)), 0,
                                 max == 0 ? -1 : max - 1);
        body = ir_seq3(c.g, ir_ref(c.g, call), more, ir_str(c.g, fin));
    }
    st = finish(&c, body, out, err, err_cap);
    cJSON_Delete(doc);
    return st;
}
