/*
 * builtins.c - the filters, tests, methods and global functions a
 * template may call (jinja2's filters.py/tests.py, Python's str/dict/list
 * methods, transformers' tojson, raise_exception and strftime_now), and
 * Python's %-formatting and str.format.
 *
 * Case conversion (upper, lower, title, capitalize) and whitespace
 * classes are ASCII: other characters are left as they are (Python maps
 * them by Unicode tables; the tests' conversations are ASCII there).
 * Mutating methods (append, pop, update, ...) never get here: the
 * immutable sandbox refuses them at the attribute (eval.c).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tmpl/tmpl_int.h"

/* ---- argument helpers ---- */
struct args { struct tval *v; size_t n; const char **k; };

/* argument `name` at position pos (positional or keyword), or NULL */
static struct tval *arg(struct args *a, size_t pos, const char *name)
{
    size_t npos = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->k && a->k[i]) {
            if (name && !strcmp(a->k[i], name))
                return &a->v[i];
        } else if (npos++ == pos)
            return &a->v[i];
    }
    return NULL;
}

static const char *need_str(struct tm_state *s, struct tval *v, const char *what)
{
    if (!v || v->k != TV_STR)
        tm_fail(s, "%s: expected a string%s%s", what, v ? ", got " : "", v ? tv_type_name(*v) : "");
    return v->u.s->p;
}

static int64_t need_int(struct tm_state *s, struct tval *v, int64_t def, const char *what)
{
    if (!v || v->k == TV_NONE)
        return def;
    if (v->k == TV_INT)
        return v->u.i;
    if (v->k == TV_BOOL)
        return v->u.b;
    tm_fail(s, "%s: expected an integer, got %s", what, tv_type_name(*v));
}

static bool opt_bool(struct tval *v, bool def) { return v ? tv_truthy(*v) : def; }

static struct tval str_of(struct tm_state *s, struct tval v) { return tv_stringify(s, v); }

static bool py_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

static struct tval strip(struct tm_state *s, struct tval v, struct tval *chars, bool l, bool r)
{
    const char *p = v.u.s->p;
    size_t a = 0, b = v.u.s->n;
    if (chars && chars->k == TV_STR) {
        const char *c = chars->u.s->p;
        size_t cn = chars->u.s->n;
        while (l && a < b && memchr(c, p[a], cn))
            a++;
        while (r && b > a && memchr(c, p[b - 1], cn))
            b--;
    } else {
        while (l && a < b && py_space((unsigned char)p[a]))
            a++;
        while (r && b > a && py_space((unsigned char)p[b - 1]))
            b--;
    }
    struct tval out = tv_str(s, p + a, b - a);
    out.safe = v.safe; /* Markup's strip gives a Markup */
    return out;
}

static struct tval map_case(struct tm_state *s, struct tval v, int mode)
{
    struct tval r = tv_str(s, v.u.s->p, v.u.s->n);
    r.safe = v.safe; /* Markup's upper, lower, title, capitalize give a Markup */
    char *p = r.u.s->p;
    bool start = true;
    for (size_t i = 0; i < r.u.s->n; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (mode) {
        case 'u': p[i] = (char)toupper(c); break;
        case 'l': p[i] = (char)tolower(c); break;
        case 'c': p[i] = (char)(i == 0 ? toupper(c) : tolower(c)); break;
        case 't': /* Python str.title: a cased letter after an uncased one starts a word */
            if (isalpha(c)) {
                p[i] = (char)(start ? toupper(c) : tolower(c));
                start = false;
            } else
                start = c < 0x80;
            break;
        }
    }
    return r;
}

/* jinja2's title filter: words split at whitespace, -, (, {, [, < */
static struct tval jinja_title(struct tm_state *s, struct tval v)
{
    struct tval r = tv_str(s, v.u.s->p, v.u.s->n);
    char *p = r.u.s->p;
    bool start = true;
    for (size_t i = 0; i < r.u.s->n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (py_space(c) || (c && strchr("-({[<", c))) {
            start = true;
            continue;
        }
        p[i] = (char)(start ? toupper(c) : tolower(c));
        start = false;
    }
    return r;
}

static struct tval replace(struct tm_state *s, struct tval v, struct tval *old, struct tval *new,
                           int64_t count)
{
    const char *o = need_str(s, old, "replace"), *nw = need_str(s, new, "replace");
    size_t on = old->u.s->n, nn = new->u.s->n;
    struct sbuf *b = tm_buf(s);
    const char *p = v.u.s->p;
    size_t n = v.u.s->n, i = 0;
    int64_t done = 0;
    if (on == 0) {
        /* Python inserts new between every character (and at both ends) */
        for (i = 0; i <= n; i++) {
            if (count < 0 || done < count) {
                sb_put(b, nw, nn);
                done++;
            }
            if (i < n)
                sb_put(b, p + i, 1);
        }
        return tm_buf_str(s, b);
    }
    while (i < n) {
        if ((count < 0 || done < count) && i + on <= n && !memcmp(p + i, o, on)) {
            sb_put(b, nw, nn);
            i += on;
            done++;
        } else
            sb_put(b, p + i++, 1);
        if (b->len > s->lim.max_memory)
            tm_fail(s, "template memory limit (%zu bytes) exceeded", s->lim.max_memory);
    }
    return tm_buf_str(s, b);
}

static struct tval split(struct tm_state *s, struct tval v, struct tval *sep, int64_t maxsplit)
{
    struct tval r = tv_list(s, 0);
    const char *p = v.u.s->p;
    size_t n = v.u.s->n, i = 0;
    if (!sep || sep->k == TV_NONE) {
        int64_t done = 0;
        while (i < n) {
            while (i < n && py_space((unsigned char)p[i]))
                i++;
            if (i >= n)
                break;
            size_t st = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = n;
                while (e > st && py_space((unsigned char)p[e - 1]))
                    e--;
                tv_list_push(s, r.u.l, tv_str(s, p + st, e - st));
                break;
            }
            while (i < n && !py_space((unsigned char)p[i]))
                i++;
            tv_list_push(s, r.u.l, tv_str(s, p + st, i - st));
            done++;
        }
        return r;
    }
    const char *sp = need_str(s, sep, "split");
    size_t sn = sep->u.s->n;
    if (!sn)
        tm_fail(s, "empty separator");
    size_t st = 0;
    int64_t done = 0;
    for (i = 0; i + sn <= n;) {
        if ((maxsplit < 0 || done < maxsplit) && !memcmp(p + i, sp, sn)) {
            tv_list_push(s, r.u.l, tv_str(s, p + st, i - st));
            i += sn;
            st = i;
            done++;
        } else
            i++;
    }
    tv_list_push(s, r.u.l, tv_str(s, p + st, n - st));
    return r;
}

static bool has_prefix(struct tm_state *s, struct tval v, struct tval *x, bool suffix)
{
    if (x && x->k == TV_LIST && x->u.l->tuple) {
        for (size_t i = 0; i < x->u.l->n; i++)
            if (has_prefix(s, v, &x->u.l->v[i], suffix))
                return true;
        return false;
    }
    need_str(s, x, suffix ? "endswith" : "startswith");
    size_t k = x->u.s->n;
    if (k > v.u.s->n)
        return false;
    return !memcmp(v.u.s->p + (suffix ? v.u.s->n - k : 0), x->u.s->p, k);
}

static int64_t find(struct tval v, struct tval x, bool last)
{
    size_t n = v.u.s->n, k = x.u.s->n;
    if (k > n)
        return -1;
    int64_t found = -1;
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(v.u.s->p + i, x.u.s->p, k)) {
            found = (int64_t)i;
            if (!last)
                break;
        }
    if (found < 0)
        return -1;
    /* byte offset to code point index */
    int64_t cp = 0;
    for (int64_t i = 0; i < found; i++)
        if (((unsigned char)v.u.s->p[i] & 0xc0) != 0x80)
            cp++;
    return cp;
}

static int64_t count_sub(struct tval v, struct tval x)
{
    size_t n = v.u.s->n, k = x.u.s->n;
    if (!k) {
        int64_t cps = 0;
        for (size_t i = 0; i < n; i++)
            cps += ((unsigned char)v.u.s->p[i] & 0xc0) != 0x80;
        return cps + 1;
    }
    int64_t c = 0;
    for (size_t i = 0; i + k <= n;)
        if (!memcmp(v.u.s->p + i, x.u.s->p, k)) {
            c++;
            i += k;
        } else
            i++;
    return c;
}

static size_t cp_count(const struct tm_str *s)
{
    size_t c = 0;
    for (size_t i = 0; i < s->n; i++)
        c += ((unsigned char)s->p[i] & 0xc0) != 0x80;
    return c;
}

static int64_t length(struct tm_state *s, struct tval v)
{
    switch (v.k) {
    case TV_UNDEF: return 0;
    case TV_STR: return (int64_t)cp_count(v.u.s);
    case TV_LIST: return (int64_t)v.u.l->n;
    case TV_DICT: case TV_NS: return (int64_t)v.u.d->n;
    default: tm_fail(s, "object of type '%s' has no len()", tv_type_name(v));
    }
}

static struct tval join(struct tm_state *s, struct tm_list *l, struct tval sep, const char *attr)
{
    struct sbuf *b = tm_buf(s);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            tv_to_str(s, b, sep);
        struct tval x = l->v[i];
        if (attr)
            x = tm_getattr(s, x, attr);
        tv_to_str(s, b, x);
    }
    return tm_buf_str(s, b);
}

/* Python's str.join: items must be strings */
static struct tval str_join(struct tm_state *s, struct tval sep, struct tval it)
{
    struct tm_list *l = tm_iterate(s, it);
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].k != TV_STR)
            tm_fail(s, "sequence item %zu: expected str instance, %s found", i, tv_type_name(l->v[i]));
    return join(s, l, sep, NULL);
}

/* attribute path "a.b" or an integer index, as jinja2's make_attrgetter */
static struct tval attr_path(struct tm_state *s, struct tval v, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf, *dot; p; p = dot) {
        dot = strchr(p, '.');
        if (dot)
            *dot++ = 0;
        char *e;
        long idx = strtol(p, &e, 10);
        if (*p && !*e)
            v = tm_getitem(s, v, tv_int(idx));
        else
            v = tm_getitem(s, v, tv_cstr(s, p));
    }
    return v;
}

static int sort_cmp_ci(struct tm_state *s, struct tval a, struct tval b, bool ci)
{
    if (ci && a.k == TV_STR && b.k == TV_STR) {
        a = map_case(s, a, 'l');
        b = map_case(s, b, 'l');
    }
    return tv_compare(s, a, b);
}

/* stable merge sort of v[0..n) by key (attr path or NULL) */
static void sort_vals(struct tm_state *s, struct tval *v, size_t n, const char *attr, bool ci,
                      bool rev, int by /* 0 value, 1 key of pair, 2 value of pair */)
{
    if (n < 2)
        return;
    struct tval *tmp = tm_alloc(s, n * sizeof *tmp), *keys = tm_alloc(s, n * sizeof *keys),
                *tk = tm_alloc(s, n * sizeof *tk);
    for (size_t i = 0; i < n; i++) {
        struct tval k = v[i];
        if (by)
            k = v[i].u.l->v[by - 1];
        if (attr)
            k = attr_path(s, k, attr);
        keys[i] = k;
    }
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) {
                tm_step(s);
                int c = sort_cmp_ci(s, keys[j], keys[i], ci);
                bool take_j = rev ? c > 0 : c < 0;
                if (take_j) { tmp[o] = v[j]; tk[o++] = keys[j++]; }
                else { tmp[o] = v[i]; tk[o++] = keys[i++]; }
            }
            while (i < mid) { tmp[o] = v[i]; tk[o++] = keys[i++]; }
            while (j < hi) { tmp[o] = v[j]; tk[o++] = keys[j++]; }
        }
        memcpy(v, tmp, n * sizeof *v);
        memcpy(keys, tk, n * sizeof *keys);
    }
}

static struct tval items_of(struct tm_state *s, struct tval v)
{
    if (v.k == TV_UNDEF)
        return tv_list(s, 0);
    if (v.k != TV_DICT && v.k != TV_NS)
        tm_fail(s, "items: expected a mapping, got %s", tv_type_name(v));
    struct tval r = tv_list(s, v.u.d->n);
    for (size_t i = 0; i < v.u.d->n; i++) {
        struct tval p = tv_list(s, 2);
        p.u.l->tuple = true;
        tv_list_push(s, p.u.l, v.u.d->k[i]);
        tv_list_push(s, p.u.l, v.u.d->v[i]);
        tv_list_push(s, r.u.l, p);
    }
    return r;
}

static struct tval copy_list(struct tm_state *s, struct tm_list *l)
{
    struct tval r = tv_list(s, l->n);
    for (size_t i = 0; i < l->n; i++)
        tv_list_push(s, r.u.l, l->v[i]);
    return r;
}

static struct tval indent(struct tm_state *s, struct tval v, struct tval *w, bool first, bool blank)
{
    struct sbuf *pad = tm_buf(s);
    if (w && w->k == TV_STR)
        sb_put(pad, w->u.s->p, w->u.s->n);
    else
        for (int64_t i = need_int(s, w, 4, "indent"); i > 0; i--)
            sb_put(pad, " ", 1);
    struct tval ps = tm_buf_str(s, pad);
    struct sbuf *b = tm_buf(s);
    const char *p = v.u.s->p;
    size_t n = v.u.s->n;
    /* jinja2: lines = s.splitlines(); rv = "\n".join(pad + l if l or blank else l); first line
     * padded only with first; a trailing newline is kept */
    bool trailing = n && p[n - 1] == '\n';
    size_t st = 0, ln = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '\n')
            continue;
        if (i == n && trailing)
            break;
        if (ln)
            sb_put(b, "\n", 1);
        bool empty = i == st;
        if ((ln > 0 || first) && (!empty || blank))
            sb_put(b, ps.u.s->p, ps.u.s->n);
        sb_put(b, p + st, i - st);
        st = i + 1;
        ln++;
    }
    if (trailing)
        sb_put(b, "\n", 1);
    struct tval r = tm_buf_str(s, b);
    r.safe = v.safe; /* jinja2 joins a Markup's lines as a Markup */
    return r;
}

static double py_round(double x, int64_t nd)
{
    double m = pow(10.0, (double)nd);
    double y = x * m;
    double r = nearbyint(y);
    if (fabs(y - r) == 0.5)
        r = 2.0 * nearbyint(y / 2.0);
    return r / m;
}

/* map/select helpers: call filter `name` or test `name` with the rest */
static struct tval select_like(struct tm_state *s, struct tm_scope *sc, struct tval v, struct args *a,
                               bool attr, bool keep)
{
    /* jinja2 filters nothing out of a false value (None, undefined, ''),
     * before looking at the arguments */
    if (!tv_truthy(v))
        return tv_list(s, 0);
    struct tm_list *l = tm_iterate(s, v);
    size_t off = 0;
    const char *an = NULL;
    if (attr) {
        an = need_str(s, arg(a, 0, "attribute"), "selectattr");
        off = 1;
    }
    struct tval *tn = arg(a, off, NULL);
    const char *test = tn ? need_str(s, tn, "select") : NULL;
    struct tval *targs = a->v + off + (tn ? 1 : 0);
    size_t tcount = a->n > off + (tn ? 1 : 0) ? a->n - off - (tn ? 1 : 0) : 0;
    (void)sc;
    struct tval r = tv_list(s, 0);
    for (size_t i = 0; i < l->n; i++) {
        struct tval x = an ? attr_path(s, l->v[i], an) : l->v[i];
        bool ok = test ? tm_test(s, test, x, targs, tcount) : tv_truthy(x);
        if (ok == keep)
            tv_list_push(s, r.u.l, l->v[i]);
    }
    return r;
}

static const char *const filter_names[] = {
    "trim", "length", "count", "upper", "lower", "capitalize", "title", "replace", "join",
    "first", "last", "list", "map", "select", "reject", "selectattr", "rejectattr", "tojson",
    "string", "int", "float", "default", "d", "safe", "items", "dictsort", "unique", "reverse",
    "sort", "abs", "round", "wordcount", "indent", "escape", "e", "sum", "min", "max", "format",
    "batch", "center", "striptags", "truncate", "attr", "pprint", "urlencode", "forceescape", NULL};

bool tm_is_filter(const char *name)
{
    for (int i = 0; filter_names[i]; i++)
        if (!strcmp(filter_names[i], name))
            return true;
    return false;
}

struct tval tm_percent_format(struct tm_state *s, struct tval fmt, struct tval args);
static struct tval str_format(struct tm_state *s, struct tval fmt, struct args *a);

struct tval tm_filter(struct tm_state *s, struct tm_scope *sc, const char *name, struct tval v,
                      struct tval *argv, size_t n, const char **knames)
{
    struct args A = {argv, n, knames}, *a = &A;
    tm_step(s);
#define IS(x) (!strcmp(name, x))
    if (IS("default") || IS("d")) {
        struct tval *dv = arg(a, 0, "default_value");
        bool boolean = opt_bool(arg(a, 1, "boolean"), false);
        if (v.k == TV_UNDEF || (boolean && !tv_truthy(v)))
            return dv ? *dv : tv_cstr(s, "");
        return v;
    }
    if (IS("length") || IS("count"))
        return tv_int(length(s, v));
    if (IS("string"))
        return str_of(s, v);
    if (IS("safe")) {
        struct tval r = str_of(s, v);
        r.safe = 1;
        return r;
    }
    if (IS("trim"))
        return strip(s, str_of(s, v), arg(a, 0, "chars"), true, true);
    if (IS("upper")) return map_case(s, str_of(s, v), 'u');
    if (IS("lower")) return map_case(s, str_of(s, v), 'l');
    if (IS("capitalize")) return map_case(s, str_of(s, v), 'c');
    if (IS("title")) return jinja_title(s, str_of(s, v));
    if (IS("replace")) {
        struct tval *c = arg(a, 2, "count");
        return replace(s, str_of(s, v), arg(a, 0, "old"), arg(a, 1, "new"),
                       c && c->k != TV_NONE ? need_int(s, c, -1, "replace") : -1);
    }
    if (IS("escape") || IS("e"))
        return tv_escape(s, v);
    if (IS("forceescape")) { /* escapes a safe string too */
        struct tval t = str_of(s, v);
        t.safe = 0;
        return tv_escape(s, t);
    }
    if (IS("tojson")) {
        struct tval *ind = arg(a, 0, "indent");
        struct sbuf *b = tm_buf(s);
        int in = ind && ind->k != TV_NONE ? (int)need_int(s, ind, 0, "tojson") : -1;
        if (in > 64)
            in = 64;
        tv_to_json(s, b, v, in, opt_bool(arg(a, 1, "sort_keys"), false), 0);
        if (b->len > s->lim.max_output)
            tm_fail(s, "template output limit (%zu bytes) exceeded", s->lim.max_output);
        return tm_buf_str(s, b);
    }
    if (IS("int")) {
        int64_t def = need_int(s, arg(a, 0, "default"), 0, "int");
        if (v.k == TV_INT) return v;
        if (v.k == TV_BOOL) return tv_int(v.u.b);
        if (v.k == TV_FLOAT) return isfinite(v.u.f) ? tv_int((int64_t)v.u.f) : tv_int(def);
        if (v.k == TV_STR) {
            struct tval t = strip(s, v, NULL, true, true);
            char *e;
            long long x = strtoll(t.u.s->p, &e, 10);
            if (t.u.s->n && !*e)
                return tv_int(x);
            double f = strtod(t.u.s->p, &e);
            if (t.u.s->n && !*e && isfinite(f))
                return tv_int((int64_t)f);
        }
        return tv_int(def);
    }
    if (IS("float")) {
        struct tval *d = arg(a, 0, "default");
        if (v.k == TV_FLOAT) return v;
        if (v.k == TV_INT || v.k == TV_BOOL) return tv_float(v.k == TV_INT ? (double)v.u.i : v.u.b);
        if (v.k == TV_STR) {
            struct tval t = strip(s, v, NULL, true, true);
            char *e;
            double f = strtod(t.u.s->p, &e);
            if (t.u.s->n && !*e)
                return tv_float(f);
        }
        return d ? *d : tv_float(0.0);
    }
    if (IS("abs")) {
        if (v.k == TV_INT) return tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        if (v.k == TV_FLOAT) return tv_float(fabs(v.u.f));
        if (v.k == TV_BOOL) return tv_int(v.u.b);
        tm_fail(s, "bad operand type for abs(): '%s'", tv_type_name(v));
    }
    if (IS("round")) {
        int64_t p = need_int(s, arg(a, 0, "precision"), 0, "round");
        struct tval *m = arg(a, 1, "method");
        const char *meth = m ? need_str(s, m, "round") : "common";
        double x = v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : v.k == TV_BOOL ? v.u.b : NAN;
        if (isnan(x) && v.k != TV_FLOAT)
            tm_fail(s, "round: expected a number");
        double mm = pow(10.0, (double)p);
        if (!strcmp(meth, "common")) return tv_float(py_round(x, p));
        if (!strcmp(meth, "floor")) return tv_float(floor(x * mm) / mm);
        if (!strcmp(meth, "ceil")) return tv_float(ceil(x * mm) / mm);
        tm_fail(s, "method must be common, ceil or floor");
    }
    if (IS("wordcount")) {
        struct tval t = str_of(s, v);
        int64_t c = 0;
        bool in = false;
        for (size_t i = 0; i < t.u.s->n; i++) {
            unsigned char ch = (unsigned char)t.u.s->p[i];
            bool w = isalnum(ch) || ch == '_' || ch >= 0x80;
            if (w && !in)
                c++;
            in = w;
        }
        return tv_int(c);
    }
    if (IS("indent")) {
        return indent(s, str_of(s, v), arg(a, 0, "width"), opt_bool(arg(a, 1, "first"), false),
                      opt_bool(arg(a, 2, "blank"), false));
    }
    if (IS("format")) {
        struct tval t = tv_list(s, n);
        t.u.l->tuple = true;
        for (size_t i = 0; i < n; i++)
            tv_list_push(s, t.u.l, argv[i]);
        return tm_percent_format(s, str_of(s, v), t);
    }
    if (IS("items"))
        return items_of(s, v);
    if (IS("attr")) {
        return tm_getattr(s, v, need_str(s, arg(a, 0, "name"), "attr"));
    }
    /* sequence filters */
    if (IS("first")) {
        if (v.k == TV_UNDEF)
            return tv_undef();
        struct tm_list *l = tm_iterate(s, v);
        return l->n ? l->v[0] : tv_undef();
    }
    if (IS("last")) {
        struct tm_list *l = tm_iterate(s, v);
        return l->n ? l->v[l->n - 1] : tv_undef();
    }
    if (IS("list"))
        return copy_list(s, tm_iterate(s, v));
    if (IS("reverse")) {
        if (v.k == TV_STR) {
            struct tm_list *l = tm_iterate(s, v);
            struct sbuf *b = tm_buf(s);
            for (size_t i = l->n; i-- > 0;)
                sb_put(b, l->v[i].u.s->p, l->v[i].u.s->n);
            return tm_buf_str(s, b);
        }
        struct tm_list *l = tm_iterate(s, v);
        struct tval r = tv_list(s, l->n);
        for (size_t i = l->n; i-- > 0;)
            tv_list_push(s, r.u.l, l->v[i]);
        return r;
    }
    if (IS("join")) {
        struct tval *d = arg(a, 0, "d");
        struct tval *at = arg(a, 1, "attribute");
        return join(s, tm_iterate(s, v), d ? *d : tv_cstr(s, ""), at ? need_str(s, at, "join") : NULL);
    }
    if (IS("unique")) {
        struct tm_list *l = tm_iterate(s, v);
        bool cs = opt_bool(arg(a, 0, "case_sensitive"), false);
        struct tval *at = arg(a, 1, "attribute");
        struct tval r = tv_list(s, 0), seen = tv_list(s, 0);
        for (size_t i = 0; i < l->n; i++) {
            struct tval k = at ? attr_path(s, l->v[i], need_str(s, at, "unique")) : l->v[i];
            if (!cs && k.k == TV_STR)
                k = map_case(s, k, 'l');
            bool dup = false;
            for (size_t j = 0; j < seen.u.l->n && !dup; j++) {
                tm_step(s);
                dup = tv_equal(seen.u.l->v[j], k);
            }
            if (!dup) {
                tv_list_push(s, seen.u.l, k);
                tv_list_push(s, r.u.l, l->v[i]);
            }
        }
        return r;
    }
    if (IS("sort")) {
        struct tval r = copy_list(s, tm_iterate(s, v));
        struct tval *at = arg(a, 2, "attribute");
        sort_vals(s, r.u.l->v, r.u.l->n, at ? need_str(s, at, "sort") : NULL,
                  !opt_bool(arg(a, 1, "case_sensitive"), false), opt_bool(arg(a, 0, "reverse"), false), 0);
        return r;
    }
    if (IS("dictsort")) {
        struct tval r = items_of(s, v);
        struct tval *by = arg(a, 1, "by");
        int b = 1;
        if (by) {
            const char *bs = need_str(s, by, "dictsort");
            if (!strcmp(bs, "value"))
                b = 2;
            else if (strcmp(bs, "key"))
                tm_fail(s, "You can only sort by either \"key\" or \"value\"");
        }
        sort_vals(s, r.u.l->v, r.u.l->n, NULL, !opt_bool(arg(a, 0, "case_sensitive"), false),
                  opt_bool(arg(a, 2, "reverse"), false), b);
        return r;
    }
    if (IS("sum") || IS("min") || IS("max")) {
        struct tm_list *l = tm_iterate(s, v);
        struct tval *at = arg(a, IS("sum") ? 0 : 1, "attribute");
        const char *an = at ? need_str(s, at, name) : NULL;
        if (IS("sum")) {
            struct tval *st = arg(a, 1, "start");
            struct tval acc = st ? *st : tv_int(0);
            for (size_t i = 0; i < l->n; i++) {
                struct tval x = an ? attr_path(s, l->v[i], an) : l->v[i];
                acc = tm_filter(s, sc, "__add", acc, &x, 1, NULL);
            }
            return acc;
        }
        if (!l->n)
            return tv_undef();
        bool ci = !opt_bool(arg(a, 0, "case_sensitive"), false);
        struct tval best = l->v[0], bk = an ? attr_path(s, best, an) : best;
        for (size_t i = 1; i < l->n; i++) {
            struct tval k = an ? attr_path(s, l->v[i], an) : l->v[i];
            int c = sort_cmp_ci(s, k, bk, ci);
            if (IS("min") ? c < 0 : c > 0) {
                best = l->v[i];
                bk = k;
            }
        }
        return best;
    }
    if (IS("__add")) { /* sum's accumulation: a + b */
        struct tval b = argv[0];
        if ((v.k == TV_INT || v.k == TV_BOOL) && (b.k == TV_INT || b.k == TV_BOOL)) {
            int64_t r;
            if (__builtin_add_overflow(v.k == TV_INT ? v.u.i : v.u.b, b.k == TV_INT ? b.u.i : b.u.b, &r))
                tm_fail(s, "integer overflow");
            return tv_int(r);
        }
        if ((v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL) && (b.k == TV_INT || b.k == TV_FLOAT || b.k == TV_BOOL))
            return tv_float((v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : v.u.b) +
                            (b.k == TV_FLOAT ? b.u.f : b.k == TV_INT ? (double)b.u.i : b.u.b));
        tm_fail(s, "unsupported operand type(s) for +: '%s' and '%s'", tv_type_name(v), tv_type_name(b));
    }
    if (IS("map")) {
        if (!tv_truthy(v)) /* as select: nothing from a false value */
            return tv_list(s, 0);
        struct tm_list *l = tm_iterate(s, v);
        struct tval r = tv_list(s, l->n);
        struct tval *at = arg(a, 99, "attribute");
        if (at) {
            const char *an = need_str(s, at, "map");
            struct tval *def = arg(a, 99, "default");
            for (size_t i = 0; i < l->n; i++) {
                struct tval x = attr_path(s, l->v[i], an);
                if (x.k == TV_UNDEF && def)
                    x = *def;
                tv_list_push(s, r.u.l, x);
            }
            return r;
        }
        const char *fname = need_str(s, arg(a, 0, NULL), "map");
        for (size_t i = 0; i < l->n; i++)
            tv_list_push(s, r.u.l, tm_filter(s, sc, fname, l->v[i], argv + 1, n ? n - 1 : 0,
                                             knames ? knames + 1 : NULL));
        return r;
    }
    if (IS("select")) return select_like(s, sc, v, a, false, true);
    if (IS("reject")) return select_like(s, sc, v, a, false, false);
    if (IS("selectattr")) return select_like(s, sc, v, a, true, true);
    if (IS("rejectattr")) return select_like(s, sc, v, a, true, false);
    if (IS("batch")) {
        int64_t k = need_int(s, arg(a, 0, "linecount"), 1, "batch");
        if (k <= 0)
            tm_fail(s, "batch: linecount must be positive");
        struct tm_list *l = tm_iterate(s, v);
        struct tval r = tv_list(s, 0), cur = tv_list(s, 0);
        for (size_t i = 0; i < l->n; i++) {
            tv_list_push(s, cur.u.l, l->v[i]);
            if ((int64_t)cur.u.l->n == k) {
                tv_list_push(s, r.u.l, cur);
                cur = tv_list(s, 0);
            }
        }
        if (cur.u.l->n) {
            struct tval *fill = arg(a, 1, "fill_with");
            while (fill && fill->k != TV_NONE && (int64_t)cur.u.l->n < k)
                tv_list_push(s, cur.u.l, *fill);
            tv_list_push(s, r.u.l, cur);
        }
        return r;
    }
    if (IS("pprint")) {
        struct sbuf *b = tm_buf(s);
        tv_repr(s, b, v);
        return tm_buf_str(s, b);
    }
    tm_fail(s, "no filter named '%s'", name);
#undef IS
}

/* ---- tests ---- */
static const char *const test_names[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable",
    "sequence", "boolean", "true", "false", "odd", "even", "divisibleby", "equalto", "eq", "==",
    "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "sameas", "lower", "upper",
    "callable", "in", "filter", "test", "escaped", NULL};

bool tm_is_test(const char *name)
{
    for (int i = 0; test_names[i]; i++)
        if (!strcmp(test_names[i], name))
            return true;
    return false;
}

bool tm_test(struct tm_state *s, const char *name, struct tval v, struct tval *argv, size_t n)
{
    tm_step(s);
#define IS(x) (!strcmp(name, x))
    struct tval *x = n ? &argv[0] : NULL;
    if (IS("defined")) return v.k != TV_UNDEF;
    if (IS("undefined")) return v.k == TV_UNDEF;
    if (IS("none")) return v.k == TV_NONE;
    if (IS("string")) return v.k == TV_STR;
    if (IS("number")) return v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL;
    if (IS("integer")) return v.k == TV_INT;
    if (IS("float")) return v.k == TV_FLOAT;
    if (IS("mapping")) return v.k == TV_DICT;
    if (IS("iterable")) return v.k == TV_STR || v.k == TV_LIST || v.k == TV_DICT || v.k == TV_UNDEF;
    if (IS("sequence")) return v.k == TV_STR || v.k == TV_LIST || v.k == TV_DICT || v.k == TV_UNDEF;
    if (IS("boolean")) return v.k == TV_BOOL;
    if (IS("true")) return v.k == TV_BOOL && v.u.b;
    if (IS("false")) return v.k == TV_BOOL && !v.u.b;
    if (IS("callable")) return v.k == TV_MACRO || v.k == TV_FUNC;
    if (IS("escaped")) return false;
    if (IS("filter")) return tm_is_filter(need_str(s, x, "filter"));
    if (IS("test")) return tm_is_test(need_str(s, x, "test"));
    if (IS("lower") || IS("upper")) {
        if (v.k != TV_STR)
            v = tv_stringify(s, v);
        bool cased = false;
        for (size_t i = 0; i < v.u.s->n; i++) {
            unsigned char c = (unsigned char)v.u.s->p[i];
            if (IS("lower") ? isupper(c) : islower(c))
                return false;
            cased |= isalpha(c) != 0;
        }
        return cased;
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (v.k != TV_INT && v.k != TV_BOOL)
            tm_fail(s, "%s: expected an integer", name);
        int64_t i = v.k == TV_INT ? v.u.i : v.u.b;
        if (IS("odd")) return (i % 2) != 0;
        if (IS("even")) return (i % 2) == 0;
        int64_t d = need_int(s, x, 0, "divisibleby");
        if (d == 0)
            tm_fail(s, "integer division or modulo by zero");
        return d == -1 || i % d == 0;
    }
    if (!x)
        tm_fail(s, "test '%s' needs an argument", name);
    if (IS("equalto") || IS("eq") || IS("==")) return tv_equal(v, *x);
    if (IS("ne") || IS("!=")) return !tv_equal(v, *x);
    if (IS("lt") || IS("<")) return tv_compare(s, v, *x) < 0;
    if (IS("le") || IS("<=")) return tv_compare(s, v, *x) <= 0;
    if (IS("gt") || IS(">")) return tv_compare(s, v, *x) > 0;
    if (IS("ge") || IS(">=")) return tv_compare(s, v, *x) >= 0;
    if (IS("in")) {
        struct tm_list *l;
        if (x->k == TV_STR) {
            if (v.k != TV_STR)
                tm_fail(s, "'in <string>' requires string as left operand");
            return find(*x, v, false) >= 0 || v.u.s->n == 0;
        }
        if (x->k == TV_DICT)
            return tv_dict_get(x->u.d, v) != NULL;
        l = tm_iterate(s, *x);
        for (size_t i = 0; i < l->n; i++)
            if (tv_equal(l->v[i], v))
                return true;
        return false;
    }
    if (IS("sameas")) {
        if (v.k != x->k)
            return false;
        switch (v.k) {
        case TV_NONE: case TV_UNDEF: return true;
        case TV_BOOL: return v.u.b == x->u.b;
        case TV_INT: return v.u.i == x->u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small ints */
        case TV_STR: return v.u.s == x->u.s;
        case TV_LIST: return v.u.l == x->u.l;
        case TV_DICT: case TV_NS: return v.u.d == x->u.d;
        default: return tv_equal(v, *x);
        }
    }
    tm_fail(s, "no test named '%s'", name);
#undef IS
}

/* ---- methods ---- */
static const char *const str_methods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper",
    "lower", "title", "capitalize", "replace", "format", "find", "rfind", "index", "count", "join",
    "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "removeprefix", "removesuffix",
    NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", "copy", NULL};
static const char *const list_methods[] = {"index", "count", "copy", NULL};

static bool in_names(const char *const *names, const char *n)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], n))
            return true;
    return false;
}

bool tm_has_method(struct tval obj, const char *name)
{
    if (obj.k == TV_STR) return in_names(str_methods, name);
    if (obj.k == TV_DICT) return in_names(dict_methods, name);
    if (obj.k == TV_LIST) return in_names(list_methods, name);
    return false;
}

static struct tval splitlines(struct tm_state *s, struct tval v, bool keep)
{
    struct tval r = tv_list(s, 0);
    const char *p = v.u.s->p;
    size_t n = v.u.s->n, st = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
            size_t e = i;
            if (c == '\r' && i + 1 < n && p[i + 1] == '\n')
                i++;
            tv_list_push(s, r.u.l, tv_str(s, p + st, (keep ? i + 1 : e) - st));
            st = i + 1;
        }
    }
    if (st < n)
        tv_list_push(s, r.u.l, tv_str(s, p + st, n - st));
    return r;
}

struct tval tm_call_method(struct tm_state *s, struct tm_func *fn, struct tval *argv, size_t n,
                           const char **knames)
{
    struct args A = {argv, n, knames}, *a = &A;
    struct tval self = *fn->self;
    const char *name = fn->name;
#define IS(x) (!strcmp(name, x))
    if (self.k == TV_LOOP && IS("cycle")) {
        if (!n)
            tm_fail(s, "no items for cycling given");
        return argv[self.u.lp->i % n];
    }
    if (self.k == TV_DICT) {
        if (IS("items")) return items_of(s, self);
        if (IS("keys") || IS("values")) {
            struct tval r = tv_list(s, self.u.d->n);
            for (size_t i = 0; i < self.u.d->n; i++)
                tv_list_push(s, r.u.l, IS("keys") ? self.u.d->k[i] : self.u.d->v[i]);
            return r;
        }
        if (IS("get")) {
            struct tval *k = arg(a, 0, NULL), *d = arg(a, 1, NULL);
            if (!k)
                tm_fail(s, "get expected at least 1 argument");
            struct tval *v = tv_dict_get(self.u.d, *k);
            return v ? *v : d ? *d : tv_none();
        }
        if (IS("copy")) {
            struct tval r = tv_dict(s, self.u.d->n);
            for (size_t i = 0; i < self.u.d->n; i++)
                tv_dict_set(s, r.u.d, self.u.d->k[i], self.u.d->v[i]);
            return r;
        }
    }
    if (self.k == TV_LIST) {
        struct tval *x = arg(a, 0, NULL);
        if (IS("copy")) return copy_list(s, self.u.l);
        if (!x)
            tm_fail(s, "%s expected 1 argument", name);
        int64_t c = 0;
        for (size_t i = 0; i < self.u.l->n; i++)
            if (tv_equal(self.u.l->v[i], *x)) {
                if (IS("index"))
                    return tv_int((int64_t)i);
                c++;
            }
        if (IS("index"))
            tm_fail(s, "value is not in list");
        return tv_int(c);
    }
    if (self.k == TV_STR) {
        struct tval *x = arg(a, 0, NULL);
        if (IS("strip")) return strip(s, self, x, true, true);
        if (IS("lstrip")) return strip(s, self, x, true, false);
        if (IS("rstrip")) return strip(s, self, x, false, true);
        if (IS("upper")) return map_case(s, self, 'u');
        if (IS("lower")) return map_case(s, self, 'l');
        if (IS("title")) return map_case(s, self, 't');
        if (IS("capitalize")) return map_case(s, self, 'c');
        if (IS("split")) {
            struct tval *sep = arg(a, 0, "sep");
            return split(s, self, sep, need_int(s, arg(a, 1, "maxsplit"), -1, "split"));
        }
        if (IS("rsplit")) {
            struct tval *sep = arg(a, 0, "sep");
            int64_t ms = need_int(s, arg(a, 1, "maxsplit"), -1, "rsplit");
            if (ms < 0)
                return split(s, self, sep, -1);
            /* rsplit with a limit: split all, then rejoin the leading parts */
            struct tval all = split(s, self, sep, -1);
            if ((int64_t)all.u.l->n <= ms + 1)
                return all;
            if (!sep || sep->k == TV_NONE)
                tm_fail(s, "rsplit with maxsplit and no separator is not supported");
            size_t keep = all.u.l->n - (size_t)ms;
            struct tval head = tv_list(s, keep);
            for (size_t i = 0; i < keep; i++)
                tv_list_push(s, head.u.l, all.u.l->v[i]);
            struct tval r = tv_list(s, 0);
            tv_list_push(s, r.u.l, join(s, head.u.l, *sep, NULL));
            for (size_t i = keep; i < all.u.l->n; i++)
                tv_list_push(s, r.u.l, all.u.l->v[i]);
            return r;
        }
        if (IS("splitlines")) return splitlines(s, self, opt_bool(arg(a, 0, "keepends"), false));
        if (IS("startswith")) return tv_bool(has_prefix(s, self, x, false));
        if (IS("endswith")) return tv_bool(has_prefix(s, self, x, true));
        if (IS("replace")) {
            struct tval *c = arg(a, 2, "count");
            return replace(s, self, arg(a, 0, NULL), arg(a, 1, NULL), c ? need_int(s, c, -1, "replace") : -1);
        }
        if (IS("format")) return str_format(s, self, a);
        if (IS("find") || IS("rfind") || IS("index")) {
            need_str(s, x, name);
            int64_t r = find(self, *x, IS("rfind"));
            if (r < 0 && IS("index"))
                tm_fail(s, "substring not found");
            return tv_int(r);
        }
        if (IS("count")) {
            need_str(s, x, "count");
            return tv_int(count_sub(self, *x));
        }
        if (IS("join")) {
            if (!x)
                tm_fail(s, "join expected 1 argument");
            return str_join(s, self, *x);
        }
        if (IS("removeprefix") || IS("removesuffix")) {
            need_str(s, x, name);
            bool suf = IS("removesuffix");
            if (x->u.s->n && has_prefix(s, self, x, suf))
                return suf ? tv_str(s, self.u.s->p, self.u.s->n - x->u.s->n)
                           : tv_str(s, self.u.s->p + x->u.s->n, self.u.s->n - x->u.s->n);
            return self;
        }
        if (name[0] == 'i' && name[1] == 's') {
            if (!self.u.s->n)
                return tv_bool(false);
            bool cased = false;
            for (size_t i = 0; i < self.u.s->n; i++) {
                unsigned char c = (unsigned char)self.u.s->p[i];
                if (IS("isdigit") && !isdigit(c)) return tv_bool(false);
                if (IS("isalpha") && !isalpha(c)) return tv_bool(false);
                if (IS("isalnum") && !isalnum(c)) return tv_bool(false);
                if (IS("isspace") && !py_space(c)) return tv_bool(false);
                if (IS("isupper") && islower(c)) return tv_bool(false);
                if (IS("islower") && isupper(c)) return tv_bool(false);
                cased |= isalpha(c) != 0;
            }
            return tv_bool(IS("isupper") || IS("islower") ? cased : true);
        }
    }
    tm_fail(s, "'%s' object has no method '%s'", tv_type_name(self), name);
#undef IS
}

/* ---- Python formatting ---- */
static void fmt_one(struct tm_state *s, struct sbuf *b, char conv, const char *flags, int width,
                    int prec, struct tval v)
{
    char spec[32];
    char tmp[512];
    if (conv == 's' || conv == 'r' || conv == 'a') {
        struct sbuf *t = tm_buf(s);
        if (conv == 's')
            tv_to_str(s, t, v);
        else
            tv_repr(s, t, v);
        struct tval sv = tm_buf_str(s, t);
        size_t len = sv.u.s->n;
        if (prec >= 0 && (size_t)prec < len)
            len = (size_t)prec;
        bool left = strchr(flags, '-') != NULL;
        size_t pad = width > 0 && (size_t)width > len ? (size_t)width - len : 0;
        for (size_t i = 0; !left && i < pad; i++)
            sb_put(b, " ", 1);
        sb_put(b, sv.u.s->p, len);
        for (size_t i = 0; left && i < pad; i++)
            sb_put(b, " ", 1);
        return;
    }
    if (width > 200)
        width = 200;
    if (prec > 100)
        prec = 100;
    if (strchr("diouxXc", conv)) {
        if (v.k == TV_FLOAT && conv != 'c')
            v = tv_int((int64_t)v.u.f);
        if (v.k != TV_INT && v.k != TV_BOOL)
            tm_fail(s, "%%%c format: a number is required, not %s", conv, tv_type_name(v));
        long long x = v.k == TV_INT ? v.u.i : v.u.b;
        if (conv == 'i' || conv == 'u')
            conv = 'd';
        snprintf(spec, sizeof spec, "%%%s%s%s%s%sll%c", flags, width >= 0 ? "*" : "", "",
                 prec >= 0 ? ".*" : "", "", conv);
        if (width >= 0 && prec >= 0) snprintf(tmp, sizeof tmp, spec, width, prec, x);
        else if (width >= 0) snprintf(tmp, sizeof tmp, spec, width, x);
        else if (prec >= 0) snprintf(tmp, sizeof tmp, spec, prec, x);
        else snprintf(tmp, sizeof tmp, spec, x);
        sb_puts(b, tmp);
        return;
    }
    if (strchr("eEfFgG", conv)) {
        if (v.k != TV_INT && v.k != TV_FLOAT && v.k != TV_BOOL)
            tm_fail(s, "%%%c format: a real number is required, not %s", conv, tv_type_name(v));
        double x = v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : v.u.b;
        snprintf(spec, sizeof spec, "%%%s%s%s%c", flags, width >= 0 ? "*" : "", ".*", conv);
        if (width >= 0) snprintf(tmp, sizeof tmp, spec, width, prec >= 0 ? prec : 6, x);
        else snprintf(tmp, sizeof tmp, spec, prec >= 0 ? prec : 6, x);
        sb_puts(b, tmp);
        return;
    }
    tm_fail(s, "unsupported format character '%c'", conv);
}

struct tval tm_percent_format(struct tm_state *s, struct tval fmt, struct tval args)
{
    struct sbuf *b = tm_buf(s);
    const char *p = fmt.u.s->p;
    size_t n = fmt.u.s->n, ai = 0;
    bool tuple = args.k == TV_LIST && args.u.l->tuple;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            sb_put(b, p + i, 1);
            continue;
        }
        if (++i >= n)
            tm_fail(s, "incomplete format");
        struct tval v;
        bool have = false;
        if (p[i] == '(') {
            size_t st = ++i;
            while (i < n && p[i] != ')')
                i++;
            if (i >= n || args.k != TV_DICT)
                tm_fail(s, "format requires a mapping");
            struct tval *x = tv_dict_get(args.u.d, tv_str(s, p + st, i - st));
            if (!x)
                tm_fail(s, "format: missing key");
            v = *x;
            have = true;
            i++;
        }
        char flags[8];
        int nf = 0;
        while (i < n && strchr("-+ #0", p[i]) && nf < 7)
            flags[nf++] = p[i++];
        flags[nf] = 0;
        int width = -1, prec = -1;
        if (i < n && p[i] >= '0' && p[i] <= '9') {
            width = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9')
                width = width * 10 + (p[i++] - '0') % 1000;
        }
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9')
                prec = prec * 10 + (p[i++] - '0') % 1000;
        }
        if (i >= n)
            tm_fail(s, "incomplete format");
        if (p[i] == '%') {
            sb_put(b, "%", 1);
            continue;
        }
        if (!have) {
            if (tuple) {
                if (ai >= args.u.l->n)
                    tm_fail(s, "not enough arguments for format string");
                v = args.u.l->v[ai++];
            } else {
                if (ai++)
                    tm_fail(s, "not enough arguments for format string");
                v = args;
            }
        }
        fmt_one(s, b, p[i], flags, width, prec, v);
    }
    if (tuple && ai < args.u.l->n)
        tm_fail(s, "not all arguments converted during string formatting");
    if (!tuple && args.k != TV_DICT && ai == 0)
        tm_fail(s, "not all arguments converted during string formatting");
    return tm_buf_str(s, b);
}

static struct tval str_format(struct tm_state *s, struct tval fmt, struct args *a)
{
    struct sbuf *b = tm_buf(s);
    const char *p = fmt.u.s->p;
    size_t n = fmt.u.s->n, auto_i = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '}' && i + 1 < n && p[i + 1] == '}') {
            sb_put(b, "}", 1);
            i++;
            continue;
        }
        if (c != '{') {
            sb_put(b, &c, 1);
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            sb_put(b, "{", 1);
            i++;
            continue;
        }
        size_t st = ++i;
        while (i < n && p[i] != '}' && p[i] != ':' && p[i] != '!')
            i++;
        size_t fe = i;
        char conv = 's';
        if (i < n && p[i] == '!') {
            conv = i + 1 < n ? p[i + 1] : 's';
            i += 2;
        }
        const char *spec = NULL;
        size_t spec_n = 0;
        if (i < n && p[i] == ':') {
            spec = p + ++i;
            while (i < n && p[i] != '}')
                i++;
            spec_n = (size_t)(p + i - spec);
        }
        if (i >= n)
            tm_fail(s, "Single '{' encountered in format string");
        struct tval *v;
        if (fe == st)
            v = arg(a, auto_i++, NULL);
        else if (p[st] >= '0' && p[st] <= '9')
            v = arg(a, (size_t)atoi(p + st), NULL);
        else {
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)(fe - st), p + st);
            v = arg(a, (size_t)-1, key);
        }
        if (!v)
            tm_fail(s, "format: missing argument");
        if (!spec_n) {
            if (conv == 'r')
                tv_repr(s, b, *v);
            else
                tv_to_str(s, b, *v);
            continue;
        }
        /* a small spec subset: [<>^]? width? (.prec)? type? */
        char align = 0, type = 0;
        int width = -1, prec = -1;
        size_t k = 0;
        if (k < spec_n && strchr("<>^", spec[k]))
            align = spec[k++];
        if (k < spec_n && spec[k] >= '0' && spec[k] <= '9') {
            width = 0;
            while (k < spec_n && spec[k] >= '0' && spec[k] <= '9')
                width = width * 10 + (spec[k++] - '0') % 1000;
        }
        if (k < spec_n && spec[k] == '.') {
            k++;
            prec = 0;
            while (k < spec_n && spec[k] >= '0' && spec[k] <= '9')
                prec = prec * 10 + (spec[k++] - '0') % 1000;
        }
        if (k < spec_n)
            type = spec[k++];
        if (k != spec_n || align == '^')
            tm_fail(s, "unsupported format spec");
        if (!type)
            type = v->k == TV_STR ? 's' : v->k == TV_FLOAT ? 'g' : 'd';
        char fl[2] = {(align == '<' || (!align && type == 's')) ? '-' : 0, 0};
        if (!align && type == 's')
            fl[0] = '-';
        fmt_one(s, b, type, fl, width, prec, *v);
    }
    return tm_buf_str(s, b);
}

/* ---- globals ---- */
static const char *const global_names[] = {"range", "namespace", "dict", "raise_exception",
                                           "strftime_now", NULL};

bool tm_is_global_func(const char *name) { return in_names(global_names, name); }

struct tval tm_call_global(struct tm_state *s, const char *name, struct tval *argv, size_t n,
                           const char **knames)
{
    struct args A = {argv, n, knames}, *a = &A;
#define IS(x) (!strcmp(name, x))
    if (IS("range")) {
        int64_t st = 0, en, step = 1;
        size_t np = 0;
        for (size_t i = 0; i < n; i++)
            np += !(knames && knames[i]);
        if (np == 1)
            en = need_int(s, arg(a, 0, NULL), 0, "range");
        else if (np == 2 || np == 3) {
            st = need_int(s, arg(a, 0, NULL), 0, "range");
            en = need_int(s, arg(a, 1, NULL), 0, "range");
            if (np == 3)
                step = need_int(s, arg(a, 2, NULL), 1, "range");
        } else
            tm_fail(s, "range expected 1 to 3 arguments");
        if (step == 0)
            tm_fail(s, "range() arg 3 must not be zero");
        double cnt = step > 0 ? ((double)en - (double)st) / (double)step
                              : ((double)st - (double)en) / (double)-step;
        if (ceil(cnt) > 100000) /* jinja2's sandbox: MAX_RANGE */
            tm_fail(s, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        struct tval r = tv_list(s, 0);
        for (int64_t i = st; step > 0 ? i < en : i > en; i += step)
            tv_list_push(s, r.u.l, tv_int(i));
        return r;
    }
    if (IS("namespace") || IS("dict")) {
        struct tval r = tv_dict(s, n);
        for (size_t i = 0; i < n; i++) {
            if (knames && knames[i])
                tv_dict_set(s, r.u.d, tv_cstr(s, knames[i]), argv[i]);
            else if (argv[i].k == TV_DICT || argv[i].k == TV_NS) {
                for (size_t j = 0; j < argv[i].u.d->n; j++)
                    tv_dict_set(s, r.u.d, argv[i].u.d->k[j], argv[i].u.d->v[j]);
            } else
                tm_fail(s, "%s: positional arguments must be mappings", name);
        }
        if (IS("namespace"))
            r.k = TV_NS;
        return r;
    }
    if (IS("raise_exception")) {
        struct tval m = n ? tv_stringify(s, argv[0]) : tv_cstr(s, "");
        tm_fail(s, "%s", m.u.s->p);
    }
    if (IS("strftime_now")) {
        const char *f = need_str(s, arg(a, 0, NULL), "strftime_now");
        time_t t = (time_t)s->now;
        struct tm tmv;
        localtime_r(&t, &tmv);
        char out[512];
        size_t k = strftime(out, sizeof out, f, &tmv);
        if (!k && *f)
            tm_fail(s, "strftime_now: format too long");
        return tv_str(s, out, k);
    }
    tm_fail(s, "'%s' is undefined", name);
#undef IS
}

/* ---- attribute access (eval.c's obj.name, and the filters attr / map) ---- */
static struct tval bound(struct tm_state *s, struct tval obj, const char *name)
{
    struct tm_func *f = tm_alloc(s, sizeof *f);
    f->name = name;
    f->self = tm_alloc(s, sizeof *f->self);
    *f->self = obj;
    struct tval v = {.k = TV_FUNC};
    v.u.fn = f;
    return v;
}

static const char *const unsafe_methods[] = {
    "append", "pop", "popitem", "update", "extend", "insert", "remove", "clear", "sort",
    "reverse", "setdefault", "add", "discard", "difference_update", NULL};

static void check_safe(struct tm_state *s, struct tval obj, const char *name)
{
    if (obj.k != TV_LIST && obj.k != TV_DICT)
        return;
    for (int i = 0; unsafe_methods[i]; i++)
        if (!strcmp(unsafe_methods[i], name))
            tm_fail(s, "access to attribute '%s' of '%s' object is unsafe", name,
                    tv_type_name(obj));
}

static struct tval loop_attr(struct tm_state *s, struct tm_loop *lp, const char *name)
{
    size_t n = lp->items->n, i = lp->i;
    if (!strcmp(name, "index")) return tv_int((int64_t)i + 1);
    if (!strcmp(name, "index0")) return tv_int((int64_t)i);
    if (!strcmp(name, "revindex")) return tv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0")) return tv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first")) return tv_bool(i == 0);
    if (!strcmp(name, "last")) return tv_bool(i + 1 == n);
    if (!strcmp(name, "length")) return tv_int((int64_t)n);
    if (!strcmp(name, "depth")) return tv_int(lp->depth);
    if (!strcmp(name, "depth0")) return tv_int(lp->depth - 1);
    if (!strcmp(name, "previtem")) return i > 0 ? lp->items->v[i - 1] : tv_undef();
    if (!strcmp(name, "nextitem")) return i + 1 < n ? lp->items->v[i + 1] : tv_undef();
    if (!strcmp(name, "cycle")) {
        struct tval v = {.k = TV_LOOP};
        v.u.lp = lp;
        return bound(s, v, "cycle");
    }
    return tv_undef();
}

struct tval tm_getattr(struct tm_state *s, struct tval obj, const char *name)
{
    switch (obj.k) {
    case TV_UNDEF:
        tm_fail(s, "'%s' has no attribute '%s' (the value is undefined)", "undefined", name);
    case TV_LOOP:
        return loop_attr(s, obj.u.lp, name);
    case TV_NS: {
        struct tval *v = tv_dict_gets(obj.u.d, name);
        return v ? *v : tv_undef();
    }
    case TV_DICT:
        if (tm_has_method(obj, name))
            return bound(s, obj, name);
        check_safe(s, obj, name);
        {
            struct tval *v = tv_dict_gets(obj.u.d, name);
            return v ? *v : tv_undef();
        }
    case TV_LIST: case TV_STR:
        if (tm_has_method(obj, name))
            return bound(s, obj, name);
        check_safe(s, obj, name);
        return tv_undef();
    default:
        return tv_undef();
    }
}

struct tval tm_getitem(struct tm_state *s, struct tval obj, struct tval key)
{
    switch (obj.k) {
    case TV_UNDEF:
        tm_fail(s, "cannot index an undefined value");
    case TV_DICT: case TV_NS: {
        struct tval *v = tv_dict_get(obj.u.d, key);
        if (v)
            return *v;
        if (key.k == TV_STR && obj.k == TV_DICT)
            return tm_getattr(s, obj, key.u.s->p);
        return tv_undef();
    }
    case TV_LIST:
        if (key.k == TV_INT || key.k == TV_BOOL) {
            int64_t i = key.k == TV_INT ? key.u.i : key.u.b;
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            return i >= 0 && i < n ? obj.u.l->v[i] : tv_undef();
        }
        if (key.k == TV_STR)
            return tm_getattr(s, obj, key.u.s->p);
        return tv_undef();
    case TV_STR:
        if (key.k == TV_INT || key.k == TV_BOOL) {
            size_t n;
            size_t *o = tm_cp_offsets(s, obj.u.s, &n);
            int64_t i = key.k == TV_INT ? key.u.i : key.u.b;
            if (i < 0)
                i += (int64_t)n;
            if (i < 0 || i >= (int64_t)n)
                return tv_undef();
            return tv_str(s, obj.u.s->p + o[i], o[i + 1] - o[i]);
        }
        if (key.k == TV_STR)
            return tm_getattr(s, obj, key.u.s->p);
        return tv_undef();
    case TV_LOOP:
        if (key.k == TV_STR)
            return tm_getattr(s, obj, key.u.s->p);
        return tv_undef();
    default:
        return tv_undef();
    }
}
