/*
 * value.c - the interpreter's arena and values: construction, truth,
 * equality and order (Python's), str()/repr() as Python prints them,
 * json.dumps as transformers' tojson calls it, and JSON text to values.
 *
 * Floats print as Python's repr: the shortest text that reads back to the
 * same double, in fixed notation for exponents -5..15 and "1e-05" /
 * "1e+16" style outside. Strings are UTF-8 bytes; repr escapes what
 * Python escapes for ASCII (control bytes as \xNN) and leaves other
 * characters as they are.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tmpl/tmpl_int.h"

void *tm_alloc(struct tm_state *s, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct tm_chunk *c = s->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (s->mem + cap + sizeof *c > s->lim.max_memory)
            tm_fail(s, "template memory limit (%zu bytes) exceeded", s->lim.max_memory);
        c = core_malloc(sizeof *c + cap);
        if (!c)
            tm_oom(s);
        c->next = s->chunks;
        c->used = 0;
        c->cap = cap;
        s->chunks = c;
        s->mem += cap + sizeof *c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

struct sbuf *tm_buf(struct tm_state *s)
{
    struct tm_buf *b = tm_alloc(s, sizeof *b);
    sb_init(&b->b);
    b->next = s->bufs;
    s->bufs = b;
    return &b->b;
}

struct tval tm_buf_str(struct tm_state *s, struct sbuf *b)
{
    if (b->oom)
        tm_oom(s);
    struct tval v = tv_str(s, b->p ? b->p : "", b->len);
    sb_free(b);
    return v;
}

char *tm_strndup(struct tm_state *s, const char *p, size_t n)
{
    char *d = tm_alloc(s, n + 1);
    if (n)
        memcpy(d, p, n);
    d[n] = 0;
    return d;
}

struct tval tv_undef(void) { struct tval v = {.k = TV_UNDEF}; return v; }
struct tval tv_none(void) { struct tval v = {.k = TV_NONE}; return v; }
struct tval tv_bool(bool b) { struct tval v = {.k = TV_BOOL}; v.u.b = b; return v; }
struct tval tv_int(int64_t i) { struct tval v = {.k = TV_INT}; v.u.i = i; return v; }
struct tval tv_float(double f) { struct tval v = {.k = TV_FLOAT}; v.u.f = f; return v; }

struct tval tv_str(struct tm_state *s, const char *p, size_t n)
{
    struct tval v = {.k = TV_STR};
    v.u.s = tm_alloc(s, sizeof *v.u.s + n + 1);
    v.u.s->n = n;
    if (n)
        memcpy(v.u.s->p, p, n);
    v.u.s->p[n] = 0;
    return v;
}

struct tval tv_cstr(struct tm_state *s, const char *p) { return tv_str(s, p, strlen(p)); }

struct tval tv_list(struct tm_state *s, size_t cap)
{
    struct tval v = {.k = TV_LIST};
    v.u.l = tm_alloc(s, sizeof *v.u.l);
    if (cap) {
        v.u.l->v = tm_alloc(s, cap * sizeof(struct tval));
        v.u.l->cap = cap;
    }
    return v;
}

struct tval tv_dict(struct tm_state *s, size_t cap)
{
    struct tval v = {.k = TV_DICT};
    v.u.d = tm_alloc(s, sizeof *v.u.d);
    if (cap) {
        v.u.d->k = tm_alloc(s, cap * sizeof(struct tval));
        v.u.d->v = tm_alloc(s, cap * sizeof(struct tval));
        v.u.d->cap = cap;
    }
    return v;
}

void tv_list_push(struct tm_state *s, struct tm_list *l, struct tval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        struct tval *nv = tm_alloc(s, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

struct tval *tv_dict_get(struct tm_dict *d, struct tval k)
{
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

struct tval *tv_dict_gets(struct tm_dict *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].k == TV_STR && d->k[i].u.s->n == n && !memcmp(d->k[i].u.s->p, key, n))
            return &d->v[i];
    return NULL;
}

void tv_dict_set(struct tm_state *s, struct tm_dict *d, struct tval k, struct tval v)
{
    struct tval *have = tv_dict_get(d, k);
    if (have) {
        *have = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct tval *nk = tm_alloc(s, cap * sizeof *nk), *nv = tm_alloc(s, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

bool tv_truthy(struct tval v)
{
    switch (v.k) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s->n > 0;
    case TV_LIST: return v.u.l->n > 0;
    case TV_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

static bool is_num(struct tval v) { return v.k == TV_BOOL || v.k == TV_INT || v.k == TV_FLOAT; }
static double num_f(struct tval v)
{
    return v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(struct tval v) { return v.k == TV_INT ? v.u.i : (int64_t)v.u.b; }

bool tv_equal(struct tval a, struct tval b)
{
    if (is_num(a) && is_num(b)) {
        if (a.k == TV_FLOAT || b.k == TV_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.k != b.k) {
        if ((a.k == TV_DICT && b.k == TV_NS) || (a.k == TV_NS && b.k == TV_DICT))
            return false;
        return false;
    }
    switch (a.k) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_STR: return a.u.s->n == b.u.s->n && !memcmp(a.u.s->p, b.u.s->p, a.u.s->n);
    case TV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!tv_equal(a.u.l->v[i], b.u.l->v[i]))
                return false;
        return true;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct tval *o = tv_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !tv_equal(a.u.d->v[i], *o))
                return false;
        }
        return true;
    case TV_NS: return a.u.d == b.u.d;
    case TV_MACRO: return a.u.m == b.u.m;
    case TV_FUNC: return a.u.fn == b.u.fn;
    case TV_LOOP: return a.u.lp == b.u.lp;
    }
    return false;
}

const char *tv_type_name(struct tval v)
{
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                  "list", "dict", "Namespace", "Macro", "function", "LoopContext"};
    if (v.k == TV_LIST && v.u.l->tuple)
        return "tuple";
    return names[v.k];
}

int tv_compare(struct tm_state *s, struct tval a, struct tval b)
{
    if (is_num(a) && is_num(b)) {
        if (a.k == TV_FLOAT || b.k == TV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.k == TV_STR && b.k == TV_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        if (c)
            return c < 0 ? -1 : 1;
        return a.u.s->n < b.u.s->n ? -1 : a.u.s->n > b.u.s->n ? 1 : 0;
    }
    if (a.k == TV_LIST && b.k == TV_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (tv_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return tv_compare(s, a.u.l->v[i], b.u.l->v[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
    }
    tm_fail(s, "'<' not supported between instances of '%s' and '%s'", tv_type_name(a),
            tv_type_name(b));
}

void tv_float_repr(struct sbuf *b, double f)
{
    if (isnan(f)) {
        sb_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        sb_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    /* buf: d.ddde[+-]XX; digits and exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = buf;
    bool neg = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    if (neg)
        sb_put(b, "-", 1);
    if (exp < -4 || exp >= 16) {
        sb_put(b, digits, 1);
        if (nd > 1) {
            sb_put(b, ".", 1);
            sb_put(b, digits + 1, nd - 1);
        }
        sb_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        sb_puts(b, "0.");
        for (int i = -1; i > exp; i--)
            sb_put(b, "0", 1);
        sb_put(b, digits, nd);
    } else {
        for (int i = 0; i <= exp; i++)
            sb_put(b, i < (int)nd ? &digits[i] : "0", 1);
        sb_put(b, ".", 1);
        if ((int)nd > exp + 1)
            sb_put(b, digits + exp + 1, nd - (size_t)exp - 1);
        else
            sb_put(b, "0", 1);
    }
}

static void str_repr(struct sbuf *b, const struct tm_str *s)
{
    bool sq = memchr(s->p, '\'', s->n) != NULL, dq = memchr(s->p, '"', s->n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sb_put(b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->p[i];
        if (c == '\\')
            sb_puts(b, "\\\\");
        else if (c == (unsigned char)q) {
            sb_put(b, "\\", 1);
            sb_put(b, &q, 1);
        } else if (c == '\n')
            sb_puts(b, "\\n");
        else if (c == '\r')
            sb_puts(b, "\\r");
        else if (c == '\t')
            sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f)
            sb_printf(b, "\\x%02x", c);
        else
            sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, &q, 1);
}

void tv_repr(struct tm_state *s, struct sbuf *b, struct tval v)
{
    if (v.k == TV_STR) {
        str_repr(b, v.u.s);
        return;
    }
    if (v.k == TV_UNDEF) {
        sb_puts(b, "Undefined");
        return;
    }
    tv_to_str(s, b, v);
}

void tv_to_str(struct tm_state *s, struct sbuf *b, struct tval v)
{
    switch (v.k) {
    case TV_UNDEF: return;
    case TV_NONE: sb_puts(b, "None"); return;
    case TV_BOOL: sb_puts(b, v.u.b ? "True" : "False"); return;
    case TV_INT: sb_printf(b, "%lld", (long long)v.u.i); return;
    case TV_FLOAT: tv_float_repr(b, v.u.f); return;
    case TV_STR: sb_put(b, v.u.s->p, v.u.s->n); return;
    case TV_LIST:
        sb_put(b, v.u.l->tuple ? "(" : "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                sb_puts(b, ", ");
            tv_repr(s, b, v.u.l->v[i]);
        }
        if (v.u.l->tuple && v.u.l->n == 1)
            sb_put(b, ",", 1);
        sb_put(b, v.u.l->tuple ? ")" : "]", 1);
        return;
    case TV_DICT:
        sb_put(b, "{", 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                sb_puts(b, ", ");
            tv_repr(s, b, v.u.d->k[i]);
            sb_puts(b, ": ");
            tv_repr(s, b, v.u.d->v[i]);
        }
        sb_put(b, "}", 1);
        return;
    case TV_NS: sb_puts(b, "<Namespace>"); return;
    case TV_MACRO: sb_printf(b, "<Macro '%s'>", v.u.m->name ? v.u.m->name : "caller"); return;
    case TV_FUNC: sb_printf(b, "<function %s>", v.u.fn->name); return;
    case TV_LOOP: sb_puts(b, "<LoopContext>"); return;
    }
}

struct tval tv_escape(struct tm_state *s, struct tval v)
{
    if (v.k == TV_STR && v.safe)
        return v;
    v = tv_stringify(s, v);
    struct sbuf *b = tm_buf(s);
    for (size_t i = 0; i < v.u.s->n; i++) {
        char c = v.u.s->p[i];
        switch (c) {
        case '&': sb_puts(b, "&amp;"); break;
        case '<': sb_puts(b, "&lt;"); break;
        case '>': sb_puts(b, "&gt;"); break;
        case '"': sb_puts(b, "&#34;"); break;
        case '\'': sb_puts(b, "&#39;"); break;
        default: sb_put(b, &c, 1);
        }
    }
    struct tval r = tm_buf_str(s, b);
    r.safe = 1;
    return r;
}

struct tval tv_stringify(struct tm_state *s, struct tval v)
{
    if (v.k == TV_STR)
        return v;
    struct sbuf *b = tm_buf(s);
    tv_to_str(s, b, v);
    return tm_buf_str(s, b);
}

static void json_str(struct sbuf *b, const char *p, size_t n)
{
    sb_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (c < 0x20)
                sb_printf(b, "\\u%04x", c);
            else
                sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static void json_nl(struct sbuf *b, int indent, int level)
{
    sb_put(b, "\n", 1);
    for (int i = 0; i < indent * level; i++)
        sb_put(b, " ", 1);
}

static int key_cmp(const void *x, const void *y)
{
    const struct tval *a = *(struct tval *const *)x, *b = *(struct tval *const *)y;
    if (a->k == TV_STR && b->k == TV_STR) {
        size_t n = a->u.s->n < b->u.s->n ? a->u.s->n : b->u.s->n;
        int c = memcmp(a->u.s->p, b->u.s->p, n);
        return c ? c : (a->u.s->n > b->u.s->n) - (a->u.s->n < b->u.s->n);
    }
    return 0;
}

void tv_to_json(struct tm_state *s, struct sbuf *b, struct tval v, int indent, bool sort_keys,
                int level)
{
    if (level > s->lim.max_depth)
        tm_fail(s, "tojson: nesting deeper than %d", s->lim.max_depth);
    switch (v.k) {
    case TV_NONE: sb_puts(b, "null"); return;
    case TV_BOOL: sb_puts(b, v.u.b ? "true" : "false"); return;
    case TV_INT: sb_printf(b, "%lld", (long long)v.u.i); return;
    case TV_FLOAT:
        if (isnan(v.u.f))
            sb_puts(b, "NaN");
        else if (isinf(v.u.f))
            sb_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else
            tv_float_repr(b, v.u.f);
        return;
    case TV_STR: json_str(b, v.u.s->p, v.u.s->n); return;
    case TV_LIST:
        if (!v.u.l->n) {
            sb_puts(b, "[]");
            return;
        }
        sb_put(b, "[", 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                sb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                json_nl(b, indent, level + 1);
            tv_to_json(s, b, v.u.l->v[i], indent, sort_keys, level + 1);
        }
        if (indent >= 0)
            json_nl(b, indent, level);
        sb_put(b, "]", 1);
        return;
    case TV_DICT: case TV_NS: {
        struct tm_dict *d = v.u.d;
        if (!d->n) {
            sb_puts(b, "{}");
            return;
        }
        struct tval **order = tm_alloc(s, d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++)
            order[i] = &d->k[i];
        if (sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].k != TV_STR)
                    tm_fail(s, "tojson: sort_keys needs string keys");
            qsort(order, d->n, sizeof *order, key_cmp);
        }
        sb_put(b, "{", 1);
        for (size_t j = 0; j < d->n; j++) {
            size_t i = (size_t)(order[j] - d->k);
            if (j)
                sb_puts(b, indent >= 0 ? "," : ", ");
            if (indent >= 0)
                json_nl(b, indent, level + 1);
            struct tval k = d->k[i];
            if (k.k == TV_STR)
                json_str(b, k.u.s->p, k.u.s->n);
            else if (k.k == TV_INT || k.k == TV_FLOAT || k.k == TV_BOOL || k.k == TV_NONE) {
                struct sbuf *t = tm_buf(s);
                tv_to_json(s, t, k, -1, false, level);
                json_str(b, t->p ? t->p : "", t->len);
                sb_free(t);
            } else
                tm_fail(s, "tojson: keys must be str, int, float, bool or None");
            sb_puts(b, ": ");
            tv_to_json(s, b, d->v[i], indent, sort_keys, level + 1);
        }
        if (indent >= 0)
            json_nl(b, indent, level);
        sb_put(b, "}", 1);
        return;
    }
    default:
        tm_fail(s, "Object of type %s is not JSON serializable", tv_type_name(v));
    }
}

/* ---- JSON text to values ---- */
struct jp { struct tm_state *s; const char *p, *end; int depth; };

static void jp_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static unsigned jp_hex4(struct jp *j)
{
    if (j->end - j->p < 4)
        tm_fail(j->s, "context JSON: bad \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else tm_fail(j->s, "context JSON: bad \\u escape");
    }
    return v;
}

static void put_utf8(struct sbuf *b, unsigned cp)
{
    char o[4];
    size_t n;
    if (cp < 0x80) { o[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
        o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    sb_put(b, o, n);
}

static struct tval jp_string(struct jp *j)
{
    j->p++; /* opening quote */
    struct sbuf *bp = tm_buf(j->s);
#define b (*bp)
    for (;;) {
        if (j->p >= j->end) {
            tm_fail(j->s, "context JSON: unterminated string");
        }
        char c = *j->p++;
        if (c == '"')
            break;
        if ((unsigned char)c < 0x20) {
            tm_fail(j->s, "context JSON: control character in string");
        }
        if (c != '\\') {
            sb_put(&b, &c, 1);
            continue;
        }
        if (j->p >= j->end)
            continue;
        c = *j->p++;
        switch (c) {
        case '"': case '\\': case '/': sb_put(&b, &c, 1); break;
        case 'n': sb_put(&b, "\n", 1); break;
        case 't': sb_put(&b, "\t", 1); break;
        case 'r': sb_put(&b, "\r", 1); break;
        case 'b': sb_put(&b, "\b", 1); break;
        case 'f': sb_put(&b, "\f", 1); break;
        case 'u': {
            unsigned cp = jp_hex4(j);
            if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
                j->p[1] == 'u') {
                const char *save = j->p;
                j->p += 2;
                unsigned lo = jp_hex4(j);
                if (lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else
                    j->p = save;
            }
            if (cp >= 0xd800 && cp < 0xe000)
                cp = 0xfffd; /* a lone surrogate: not representable in UTF-8 */
            put_utf8(&b, cp);
            break;
        }
        default:
            tm_fail(j->s, "context JSON: bad escape");
        }
    }
#undef b
    return tm_buf_str(j->s, bp);
}

static struct tval jp_value(struct jp *j)
{
    jp_ws(j);
    if (j->p >= j->end)
        tm_fail(j->s, "context JSON: unexpected end");
    if (++j->depth > 512)
        tm_fail(j->s, "context JSON: nested too deep");
    struct tval v;
    char c = *j->p;
    if (c == '{') {
        j->p++;
        v = tv_dict(j->s, 0);
        jp_ws(j);
        if (j->p < j->end && *j->p == '}')
            j->p++;
        else
            for (;;) {
                jp_ws(j);
                if (j->p >= j->end || *j->p != '"')
                    tm_fail(j->s, "context JSON: expected a key");
                struct tval k = jp_string(j);
                jp_ws(j);
                if (j->p >= j->end || *j->p != ':')
                    tm_fail(j->s, "context JSON: expected ':'");
                j->p++;
                struct tval x = jp_value(j);
                tv_dict_set(j->s, v.u.d, k, x);
                jp_ws(j);
                if (j->p < j->end && *j->p == ',') {
                    j->p++;
                    continue;
                }
                if (j->p < j->end && *j->p == '}') {
                    j->p++;
                    break;
                }
                tm_fail(j->s, "context JSON: expected ',' or '}'");
            }
    } else if (c == '[') {
        j->p++;
        v = tv_list(j->s, 0);
        jp_ws(j);
        if (j->p < j->end && *j->p == ']')
            j->p++;
        else
            for (;;) {
                tv_list_push(j->s, v.u.l, jp_value(j));
                jp_ws(j);
                if (j->p < j->end && *j->p == ',') {
                    j->p++;
                    continue;
                }
                if (j->p < j->end && *j->p == ']') {
                    j->p++;
                    break;
                }
                tm_fail(j->s, "context JSON: expected ',' or ']'");
            }
    } else if (c == '"') {
        v = jp_string(j);
    } else if (j->end - j->p >= 4 && !memcmp(j->p, "true", 4)) {
        j->p += 4;
        v = tv_bool(true);
    } else if (j->end - j->p >= 5 && !memcmp(j->p, "false", 5)) {
        j->p += 5;
        v = tv_bool(false);
    } else if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) {
        j->p += 4;
        v = tv_none();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        const char *st = j->p;
        bool isf = false;
        if (*j->p == '-')
            j->p++;
        while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || *j->p == '.' || *j->p == 'e' ||
                                 *j->p == 'E' || *j->p == '+' || *j->p == '-')) {
            if (*j->p == '.' || *j->p == 'e' || *j->p == 'E')
                isf = true;
            j->p++;
        }
        char buf[64];
        size_t n = (size_t)(j->p - st);
        if (n == 0 || n >= sizeof buf)
            tm_fail(j->s, "context JSON: bad number");
        memcpy(buf, st, n);
        buf[n] = 0;
        char *e;
        if (!isf) {
            long long x = strtoll(buf, &e, 10);
            if (*e)
                tm_fail(j->s, "context JSON: bad number");
            v = tv_int((int64_t)x);
        } else {
            double x = strtod(buf, &e);
            if (*e)
                tm_fail(j->s, "context JSON: bad number");
            v = tv_float(x);
        }
    } else
        tm_fail(j->s, "context JSON: unexpected character");
    j->depth--;
    return v;
}

struct tval tv_from_json(struct tm_state *s, const char *p, size_t n)
{
    struct jp j = {s, p, p + n, 0};
    struct tval v = jp_value(&j);
    jp_ws(&j);
    if (j.p != j.end)
        tm_fail(s, "context JSON: trailing characters");
    return v;
}

/* ---- UTF-8 code points (Python indexes strings by code point) ---- */
static size_t cp_len(const char *p, size_t n, size_t i)
{
    unsigned char c = (unsigned char)p[i];
    size_t l = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return i + l > n ? n - i : l;
}

/* byte offsets of each code point start, plus n at the end */
size_t *tm_cp_offsets(struct tm_state *s, const struct tm_str *str, size_t *count)
{
    size_t *o = tm_alloc(s, (str->n + 1) * sizeof *o), k = 0;
    for (size_t i = 0; i < str->n; i += cp_len(str->p, str->n, i))
        o[k++] = i;
    o[k] = str->n;
    *count = k;
    return o;
}

struct tm_list *tm_iterate(struct tm_state *s, struct tval v)
{
    struct tval l;
    switch (v.k) {
    case TV_UNDEF: return tv_list(s, 0).u.l;
    case TV_LIST: return v.u.l;
    case TV_DICT:
        l = tv_list(s, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++)
            tv_list_push(s, l.u.l, v.u.d->k[i]);
        return l.u.l;
    case TV_STR: {
        size_t n;
        size_t *o = tm_cp_offsets(s, v.u.s, &n);
        l = tv_list(s, n);
        for (size_t i = 0; i < n; i++)
            tv_list_push(s, l.u.l, tv_str(s, v.u.s->p + o[i], o[i + 1] - o[i]));
        return l.u.l;
    }
    default:
        tm_fail(s, "'%s' object is not iterable", tv_type_name(v));
    }
}
