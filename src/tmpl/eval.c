/*
 * eval.c - the evaluator: statements write text, expressions make values,
 * with jinja2's runtime semantics (runtime.py, sandbox.py):
 *   - scopes: the context is the outermost scope; a for loop opens a
 *     scope per pass (an assignment inside lasts until the end of that
 *     pass and never leaks out), a macro call opens one per call,
 *     if/else do not open any; namespace() objects are how a template
 *     carries a value out of a loop;
 *   - names that are nowhere are Undefined (default Undefined: prints as
 *     "", is false, iterates as empty, has length 0; attribute or item
 *     access on it, arithmetic and calls fail);
 *   - attribute access on a dict tries an allowed method first, then the
 *     key; item access tries the key first, then the method (getattr and
 *     getitem of jinja2's Environment);
 *   - every evaluation counts a step, every loop pass an iteration, every
 *     macro call a level of depth, every write the output size: past a
 *     limit the render fails naming the line.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "tmpl/tmpl_int.h"

static struct tm_scope *scope_new(struct tm_state *s, struct tm_scope *parent)
{
    struct tm_scope *sc = tm_alloc(s, sizeof *sc);
    sc->parent = parent;
    return sc;
}

static void scope_set(struct tm_state *s, struct tm_scope *sc, const char *name, struct tval v)
{
    tv_dict_set(s, &sc->vars, tv_cstr(s, name), v);
}

struct tval tm_lookup(struct tm_scope *sc, const char *name)
{
    for (; sc; sc = sc->parent) {
        struct tval *v = tv_dict_gets(&sc->vars, name);
        if (v)
            return *v;
    }
    return tv_undef();
}

static void out_put(struct tm_state *s, const char *p, size_t n)
{
    if (s->out->len + n > s->lim.max_output)
        tm_fail(s, "template output limit (%zu bytes) exceeded", s->lim.max_output);
    sb_put(s->out, p, n);
    if (s->out->oom)
        tm_oom(s);
}

static void out_val(struct tm_state *s, struct tval v)
{
    if (v.k == TV_STR) {
        out_put(s, v.u.s->p, v.u.s->n);
        return;
    }
    struct tval t = tv_stringify(s, v);
    out_put(s, t.u.s->p, t.u.s->n);
}


/* ---- attribute and item access ---- */
/* tm_getattr is builtins.c's: attributes are mostly methods */

static int64_t slice_arg(struct tm_state *s, struct tm_scope *sc, struct tm_node *e, bool *none)
{
    *none = true;
    if (!e)
        return 0;
    struct tval v = tm_eval(s, sc, e);
    if (v.k == TV_NONE)
        return 0;
    if (v.k != TV_INT && v.k != TV_BOOL)
        tm_fail(s, "slice indices must be integers or None");
    *none = false;
    return v.k == TV_INT ? v.u.i : v.u.b;
}

static struct tval do_slice(struct tm_state *s, struct tm_scope *sc, struct tm_node *e)
{
    struct tval obj = tm_eval(s, sc, e->a);
    bool n_a, n_b, n_c;
    int64_t a = slice_arg(s, sc, e->b, &n_a), b = slice_arg(s, sc, e->c, &n_b),
            step = slice_arg(s, sc, e->d, &n_c);
    if (n_c)
        step = 1;
    if (step == 0)
        tm_fail(s, "slice step cannot be zero");
    size_t len;
    size_t *o = NULL;
    if (obj.k == TV_LIST)
        len = obj.u.l->n;
    else if (obj.k == TV_STR)
        o = tm_cp_offsets(s, obj.u.s, &len);
    else if (obj.k == TV_UNDEF)
        tm_fail(s, "cannot slice an undefined value");
    else
        tm_fail(s, "'%s' object is not subscriptable", tv_type_name(obj));
    int64_t L = (int64_t)len;
    /* CPython's PySlice_AdjustIndices */
    if (n_a) a = step < 0 ? L - 1 : 0;
    else if (a < 0) { a += L; if (a < 0) a = step < 0 ? -1 : 0; }
    else if (a >= L) a = step < 0 ? L - 1 : L;
    if (n_b) b = step < 0 ? -1 : L;
    else if (b < 0) { b += L; if (b < 0) b = step < 0 ? -1 : 0; }
    else if (b >= L) b = step < 0 ? L - 1 : L;
    if (obj.k == TV_LIST) {
        struct tval r = tv_list(s, 0);
        r.u.l->tuple = obj.u.l->tuple;
        for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
            tv_list_push(s, r.u.l, obj.u.l->v[i]);
        return r;
    }
    struct sbuf *buf = tm_buf(s);
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
        sb_put(buf, obj.u.s->p + o[i], o[i + 1] - o[i]);
    return tm_buf_str(s, buf);
}

/* ---- arithmetic ---- */
static bool numeric(struct tval v) { return v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL; }
static double fval(struct tval v) { return v.k == TV_FLOAT ? v.u.f : v.k == TV_INT ? (double)v.u.i : v.u.b; }
static int64_t ival(struct tval v) { return v.k == TV_INT ? v.u.i : v.u.b; }

struct tval tm_percent_format(struct tm_state *s, struct tval fmt, struct tval args);

static struct tval arith(struct tm_state *s, const char *op, struct tval a, struct tval b)
{
    if (a.k == TV_UNDEF || b.k == TV_UNDEF)
        tm_fail(s, "unsupported operand: an undefined value in '%s'", op);
    char o = op[0];
    bool two = op[1] != 0;
    if (o == '%' && a.k == TV_STR) {
        if (!a.safe)
            return tm_percent_format(s, a, b);
        /* Markup % args: string arguments are escaped, the result is safe */
        if (b.k == TV_LIST && b.u.l->tuple) {
            struct tval t = tv_list(s, b.u.l->n);
            t.u.l->tuple = true;
            for (size_t i = 0; i < b.u.l->n; i++)
                tv_list_push(s, t.u.l, b.u.l->v[i].k == TV_STR ? tv_escape(s, b.u.l->v[i]) : b.u.l->v[i]);
            b = t;
        } else if (b.k == TV_STR) {
            b = tv_escape(s, b);
        }
        struct tval r = tm_percent_format(s, a, b);
        r.safe = 1;
        return r;
    }
    if (o == '+' && a.k == TV_STR && b.k == TV_STR) {
        /* Markup + str, str + Markup: the plain side is escaped */
        bool safe = a.safe || b.safe;
        if (safe) {
            a = tv_escape(s, a);
            b = tv_escape(s, b);
        }
        size_t n = a.u.s->n + b.u.s->n;
        struct tval r = {.k = TV_STR, .safe = safe};
        r.u.s = tm_alloc(s, sizeof *r.u.s + n + 1);
        r.u.s->n = n;
        memcpy(r.u.s->p, a.u.s->p, a.u.s->n);
        memcpy(r.u.s->p + a.u.s->n, b.u.s->p, b.u.s->n);
        return r;
    }
    if (o == '+' && a.k == TV_LIST && b.k == TV_LIST && a.u.l->tuple == b.u.l->tuple) {
        struct tval r = tv_list(s, a.u.l->n + b.u.l->n);
        r.u.l->tuple = a.u.l->tuple;
        for (size_t i = 0; i < a.u.l->n; i++)
            tv_list_push(s, r.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++)
            tv_list_push(s, r.u.l, b.u.l->v[i]);
        return r;
    }
    if (o == '*' && !two && ((a.k == TV_STR || a.k == TV_LIST) && (b.k == TV_INT || b.k == TV_BOOL))) {
        int64_t k = ival(b);
        if (k < 0)
            k = 0;
        size_t unit = a.k == TV_STR ? a.u.s->n : a.u.l->n * sizeof(struct tval);
        if (unit && (uint64_t)k > s->lim.max_memory / unit)
            tm_fail(s, "template memory limit (%zu bytes) exceeded", s->lim.max_memory);
        if (a.k == TV_STR) {
            struct sbuf *buf = tm_buf(s);
            for (int64_t i = 0; i < k; i++)
                sb_put(buf, a.u.s->p, a.u.s->n);
            struct tval r = tm_buf_str(s, buf);
            r.safe = a.safe;
            return r;
        }
        struct tval r = tv_list(s, 0);
        for (int64_t i = 0; i < k; i++)
            for (size_t j = 0; j < a.u.l->n; j++)
                tv_list_push(s, r.u.l, a.u.l->v[j]);
        return r;
    }
    if (!numeric(a) || !numeric(b))
        tm_fail(s, "unsupported operand type(s) for %s: '%s' and '%s'", op, tv_type_name(a),
                tv_type_name(b));
    bool fl = a.k == TV_FLOAT || b.k == TV_FLOAT;
    if (o == '/' && !two) {
        if (fval(b) == 0)
            tm_fail(s, "division by zero");
        return tv_float(fval(a) / fval(b));
    }
    if (fl) {
        double x = fval(a), y = fval(b);
        switch (o) {
        case '+': return tv_float(x + y);
        case '-': return tv_float(x - y);
        case '*': return two ? tv_float(pow(x, y)) : tv_float(x * y);
        case '/': if (y == 0) tm_fail(s, "division by zero"); return tv_float(floor(x / y));
        case '%': {
            if (y == 0) tm_fail(s, "division by zero");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0)))
                m += y;
            return tv_float(m);
        }
        }
    }
    int64_t x = ival(a), y = ival(b), r;
    switch (o) {
    case '+': if (__builtin_add_overflow(x, y, &r)) tm_fail(s, "integer overflow"); return tv_int(r);
    case '-': if (__builtin_sub_overflow(x, y, &r)) tm_fail(s, "integer overflow"); return tv_int(r);
    case '*':
        if (two) {
            if (y < 0)
                return tv_float(pow((double)x, (double)y));
            r = 1;
            for (int64_t i = 0; i < y; i++) {
                if (__builtin_mul_overflow(r, x, &r))
                    tm_fail(s, "integer overflow");
                if (r == 0 || r == 1)
                    break;
            }
            return tv_int(r);
        }
        if (__builtin_mul_overflow(x, y, &r)) tm_fail(s, "integer overflow");
        return tv_int(r);
    case '/': case '%': {
        if (y == 0)
            tm_fail(s, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1)
            tm_fail(s, "integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
            q -= 1;
            m += y;
        }
        return tv_int(o == '/' ? q : m);
    }
    }
    tm_fail(s, "bad operator");
}

static bool contains(struct tm_state *s, struct tval item, struct tval cont)
{
    switch (cont.k) {
    case TV_STR:
        if (item.k != TV_STR)
            tm_fail(s, "'in <string>' requires string as left operand, not %s", tv_type_name(item));
        if (!item.u.s->n)
            return true;
        if (item.u.s->n > cont.u.s->n)
            return false;
        for (size_t i = 0; i + item.u.s->n <= cont.u.s->n; i++)
            if (!memcmp(cont.u.s->p + i, item.u.s->p, item.u.s->n))
                return true;
        return false;
    case TV_LIST:
        for (size_t i = 0; i < cont.u.l->n; i++)
            if (tv_equal(cont.u.l->v[i], item))
                return true;
        return false;
    case TV_DICT: case TV_NS:
        return tv_dict_get(cont.u.d, item) != NULL;
    case TV_UNDEF:
        return false;
    default:
        tm_fail(s, "argument of type '%s' is not iterable", tv_type_name(cont));
    }
}

/* ---- calls ---- */
static struct tval call_macro(struct tm_state *s, struct tm_macro *m, struct tval *args, size_t n,
                              const char **knames)
{
    struct tm_node *def = m->def;
    if (++s->depth > s->lim.max_depth)
        tm_fail(s, "template recursion deeper than %d", s->lim.max_depth);
    struct tm_scope *sc = scope_new(s, m->closure);
    size_t np = def->n_kids, npos = 0;
    struct tval varargs = tv_list(s, 0), kwargs = tv_dict(s, 0);
    bool *set = tm_alloc(s, (np + 1) * sizeof *set);
    for (size_t i = 0; i < n; i++) {
        if (knames && knames[i]) {
            size_t j;
            for (j = 0; j < np; j++)
                if (!strcmp(def->ops[j], knames[i]))
                    break;
            if (j < np) {
                scope_set(s, sc, def->ops[j], args[i]);
                set[j] = true;
            } else
                tv_dict_set(s, kwargs.u.d, tv_cstr(s, knames[i]), args[i]);
        } else if (npos < np) {
            scope_set(s, sc, def->ops[npos], args[i]);
            set[npos++] = true;
        } else
            tv_list_push(s, varargs.u.l, args[i]);
    }
    for (size_t j = 0; j < np; j++)
        if (!set[j])
            scope_set(s, sc, def->ops[j], def->kids[j] ? tm_eval(s, sc, def->kids[j]) : tv_undef());
    varargs.u.l->tuple = true;
    scope_set(s, sc, "varargs", varargs);
    scope_set(s, sc, "kwargs", kwargs);
    if (m->caller)
        scope_set(s, sc, "caller", *m->caller);
    struct sbuf *buf = tm_buf(s), *saved = s->out;
    s->out = buf;
    size_t base = saved->len;
    s->lim.max_output -= base; /* captured text counts against the limit too */
    tm_exec(s, sc, def->b);
    s->lim.max_output += base;
    s->out = saved;
    s->brk = 0;
    s->depth--;
    return tm_buf_str(s, buf);
}

struct tval tm_call_value(struct tm_state *s, struct tval fn, struct tval *args, size_t n,
                          const char **knames)
{
    tm_step(s);
    switch (fn.k) {
    case TV_MACRO: return call_macro(s, fn.u.m, args, n, knames);
    case TV_FUNC:
        if (fn.u.fn->self)
            return tm_call_method(s, fn.u.fn, args, n, knames);
        return tm_call_global(s, fn.u.fn->name, args, n, knames);
    case TV_UNDEF: tm_fail(s, "cannot call an undefined value");
    default: tm_fail(s, "'%s' object is not callable", tv_type_name(fn));
    }
}

static struct tval *eval_args(struct tm_state *s, struct tm_scope *sc, struct tm_node *e)
{
    struct tval *a = tm_alloc(s, (e->n_kids + 1) * sizeof *a);
    for (size_t i = 0; i < e->n_kids; i++)
        a[i] = tm_eval(s, sc, e->kids[i]);
    return a;
}

static struct tval apply_filters(struct tm_state *s, struct tm_scope *sc, struct tm_node *f,
                                 struct tval in)
{
    if (f->a)
        in = apply_filters(s, sc, f->a, in);
    return tm_filter(s, sc, f->name, in, eval_args(s, sc, f), f->n_kids, f->knames);
}

struct tval tm_eval(struct tm_state *s, struct tm_scope *sc, struct tm_node *e)
{
    tm_step(s);
    int saved_line = s->line;
    s->line = e->line;
    struct tval r;
    switch (e->kind) {
    case N_CONST: r = e->val; break;
    case N_NAME:
        r = tm_lookup(sc, e->name);
        if (r.k == TV_UNDEF && tm_is_global_func(e->name)) {
            struct tm_func *f = tm_alloc(s, sizeof *f);
            f->name = e->name;
            r = (struct tval){.k = TV_FUNC};
            r.u.fn = f;
        }
        break;
    case N_LIST: case N_TUPLE:
        r = tv_list(s, e->n_kids);
        r.u.l->tuple = e->kind == N_TUPLE;
        for (size_t i = 0; i < e->n_kids; i++)
            tv_list_push(s, r.u.l, tm_eval(s, sc, e->kids[i]));
        break;
    case N_DICT:
        r = tv_dict(s, e->n_kids / 2);
        for (size_t i = 0; i + 1 < e->n_kids; i += 2) {
            struct tval k = tm_eval(s, sc, e->kids[i]);
            if (k.k == TV_LIST && !k.u.l->tuple)
                tm_fail(s, "unhashable type: 'list'");
            if (k.k == TV_DICT)
                tm_fail(s, "unhashable type: 'dict'");
            tv_dict_set(s, r.u.d, k, tm_eval(s, sc, e->kids[i + 1]));
        }
        break;
    case N_ATTR: r = tm_getattr(s, tm_eval(s, sc, e->a), e->name); break;
    case N_ITEM: {
        struct tval o = tm_eval(s, sc, e->a);
        r = tm_getitem(s, o, tm_eval(s, sc, e->b));
        break;
    }
    case N_SLICE: r = do_slice(s, sc, e); break;
    case N_CALL: {
        struct tval fn = tm_eval(s, sc, e->a);
        struct tval *a = eval_args(s, sc, e);
        s->line = e->line;
        r = tm_call_value(s, fn, a, e->n_kids, e->knames);
        break;
    }
    case N_FILTER: {
        struct tval in = tm_eval(s, sc, e->a);
        struct tval *a = eval_args(s, sc, e);
        s->line = e->line;
        r = tm_filter(s, sc, e->name, in, a, e->n_kids, e->knames);
        break;
    }
    case N_TEST: {
        struct tval in;
        /* "x is defined" must not fail on x.y of an undefined x's parent:
         * jinja2 fails there too, so evaluate plainly */
        in = tm_eval(s, sc, e->a);
        struct tval *a = eval_args(s, sc, e);
        s->line = e->line;
        r = tv_bool(tm_test(s, e->name, in, a, e->n_kids) != e->flag);
        break;
    }
    case N_BINOP: {
        struct tval a = tm_eval(s, sc, e->a), b = tm_eval(s, sc, e->b);
        s->line = e->line;
        r = arith(s, e->name, a, b);
        break;
    }
    case N_NEG: case N_POS: {
        struct tval a = tm_eval(s, sc, e->a);
        if (a.k == TV_INT) r = tv_int(e->kind == N_NEG ? -a.u.i : a.u.i);
        else if (a.k == TV_BOOL) r = tv_int(e->kind == N_NEG ? -(int64_t)a.u.b : a.u.b);
        else if (a.k == TV_FLOAT) r = tv_float(e->kind == N_NEG ? -a.u.f : a.u.f);
        else tm_fail(s, "bad operand type for unary %c: '%s'", e->kind == N_NEG ? '-' : '+', tv_type_name(a));
        break;
    }
    case N_NOT: r = tv_bool(!tv_truthy(tm_eval(s, sc, e->a))); break;
    case N_AND: r = tm_eval(s, sc, e->a); if (tv_truthy(r)) r = tm_eval(s, sc, e->b); break;
    case N_OR: r = tm_eval(s, sc, e->a); if (!tv_truthy(r)) r = tm_eval(s, sc, e->b); break;
    case N_COND:
        if (tv_truthy(tm_eval(s, sc, e->b)))
            r = tm_eval(s, sc, e->a);
        else
            r = e->c ? tm_eval(s, sc, e->c) : tv_undef();
        break;
    case N_COMPARE: {
        struct tval a = tm_eval(s, sc, e->kids[0]);
        r = tv_bool(true);
        for (size_t i = 1; i < e->n_kids; i++) {
            struct tval b = tm_eval(s, sc, e->kids[i]);
            const char *op = e->ops[i - 1];
            bool ok;
            s->line = e->line;
            if (!strcmp(op, "==")) ok = tv_equal(a, b);
            else if (!strcmp(op, "!=")) ok = !tv_equal(a, b);
            else if (!strcmp(op, "in")) ok = contains(s, a, b);
            else if (!strcmp(op, "notin")) ok = !contains(s, a, b);
            else {
                if (a.k == TV_UNDEF || b.k == TV_UNDEF)
                    tm_fail(s, "cannot compare an undefined value");
                int c = tv_compare(s, a, b);
                ok = op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
            }
            if (!ok) {
                r = tv_bool(false);
                break;
            }
            a = b;
        }
        break;
    }
    case N_CONCAT: {
        struct sbuf *buf = tm_buf(s);
        for (size_t i = 0; i < e->n_kids; i++) {
            struct tval v = tm_eval(s, sc, e->kids[i]);
            tv_to_str(s, buf, v);
            if (buf->len > s->lim.max_memory)
                tm_fail(s, "template memory limit (%zu bytes) exceeded", s->lim.max_memory);
        }
        r = tm_buf_str(s, buf);
        break;
    }
    default:
        tm_fail(s, "internal: not an expression");
    }
    s->line = saved_line;
    return r;
}

/* ---- statements ---- */
static void assign(struct tm_state *s, struct tm_scope *sc, struct tm_node *t, struct tval v)
{
    if (t->kind == N_NAME) {
        scope_set(s, sc, t->name, v);
        return;
    }
    if (t->kind == N_NSATTR) {
        struct tval ns = tm_lookup(sc, t->a->name);
        if (ns.k != TV_NS)
            tm_fail(s, "cannot assign attribute on non-namespace object");
        tv_dict_set(s, ns.u.d, tv_cstr(s, t->name), v);
        return;
    }
    /* tuple unpacking */
    struct tm_list *l = tm_iterate(s, v);
    if (l->n != t->n_kids)
        tm_fail(s, l->n > t->n_kids ? "too many values to unpack (expected %zu)"
                                   : "not enough values to unpack (expected %zu)", t->n_kids);
    for (size_t i = 0; i < t->n_kids; i++)
        assign(s, sc, t->kids[i], l->v[i]);
}

static struct tval capture(struct tm_state *s, struct tm_scope *sc, struct tm_node *body)
{
    struct sbuf *buf = tm_buf(s), *saved = s->out;
    s->out = buf;
    size_t base = saved->len;
    s->lim.max_output -= base;
    tm_exec(s, sc, body);
    s->lim.max_output += base;
    s->out = saved;
    return tm_buf_str(s, buf);
}

static int loop_depth(struct tm_scope *sc)
{
    struct tval l = tm_lookup(sc, "loop");
    return l.k == TV_LOOP ? l.u.lp->depth + 1 : 1;
}

static void exec_for(struct tm_state *s, struct tm_scope *sc, struct tm_node *st)
{
    struct tval it = tm_eval(s, sc, st->b);
    s->line = st->line;
    struct tm_list *items = tm_iterate(s, it);
    struct tm_scope *ls = scope_new(s, sc);
    if (st->c) {
        struct tval f = tv_list(s, 0);
        for (size_t i = 0; i < items->n; i++) {
            if (++s->iters > s->lim.max_iterations)
                tm_fail(s, "template loop limit (%llu iterations) exceeded",
                        (unsigned long long)s->lim.max_iterations);
            assign(s, ls, st->a, items->v[i]);
            if (tv_truthy(tm_eval(s, ls, st->c)))
                tv_list_push(s, f.u.l, items->v[i]);
        }
        items = f.u.l;
    }
    struct tm_loop *lp = tm_alloc(s, sizeof *lp);
    lp->items = items;
    lp->depth = loop_depth(sc);
    struct tval lv = {.k = TV_LOOP};
    lv.u.lp = lp;
    for (size_t i = 0; i < items->n; i++) {
        s->line = st->line;
        if (++s->iters > s->lim.max_iterations)
            tm_fail(s, "template loop limit (%llu iterations) exceeded",
                    (unsigned long long)s->lim.max_iterations);
        lp->i = i;
        ls = scope_new(s, sc); /* jinja2: each pass starts from the outer values */
        assign(s, ls, st->a, items->v[i]);
        scope_set(s, ls, "loop", lv);
        tm_exec(s, ls, st->kids[0]);
        if (s->brk == 1) {
            s->brk = 0;
            break;
        }
        s->brk = 0;
    }
    if (!items->n && st->kids[1])
        tm_exec(s, sc, st->kids[1]);
}

void tm_exec(struct tm_state *s, struct tm_scope *sc, struct tm_node *st)
{
    tm_step(s);
    s->line = st->line;
    switch (st->kind) {
    case N_BODY:
        for (size_t i = 0; i < st->n_kids && !s->brk; i++)
            tm_exec(s, sc, st->kids[i]);
        return;
    case N_TEXT: out_put(s, st->val.u.s->p, st->val.u.s->n); return;
    case N_OUTPUT: out_val(s, tm_eval(s, sc, st->a)); return;
    case N_IF:
        if (tv_truthy(tm_eval(s, sc, st->a)))
            tm_exec(s, sc, st->b);
        else if (st->c)
            tm_exec(s, sc, st->c);
        return;
    case N_FOR: exec_for(s, sc, st); return;
    case N_SET: {
        struct tval v = tm_eval(s, sc, st->b);
        s->line = st->line;
        assign(s, sc, st->a, v);
        return;
    }
    case N_SETBLOCK: {
        struct tval v = capture(s, sc, st->b);
        if (st->c)
            v = apply_filters(s, sc, st->c, v);
        s->line = st->line;
        assign(s, sc, st->a, v);
        return;
    }
    case N_MACRO: {
        struct tm_macro *m = tm_alloc(s, sizeof *m);
        m->name = st->name;
        m->def = st;
        m->closure = sc;
        struct tval v = {.k = TV_MACRO};
        v.u.m = m;
        scope_set(s, sc, st->name, v);
        return;
    }
    case N_CALLBLOCK: {
        struct tm_macro *caller = tm_alloc(s, sizeof *caller);
        caller->def = st;
        caller->closure = sc;
        struct tval cv = {.k = TV_MACRO};
        cv.u.m = caller;
        struct tval fn = tm_eval(s, sc, st->a->a);
        struct tval *a = eval_args(s, sc, st->a);
        s->line = st->line;
        if (fn.k != TV_MACRO)
            tm_fail(s, "call block needs a macro");
        struct tm_macro m2 = *fn.u.m;
        m2.caller = tm_alloc(s, sizeof *m2.caller);
        *m2.caller = cv;
        out_val(s, call_macro(s, &m2, a, st->a->n_kids, st->a->knames));
        return;
    }
    case N_FILTERBLOCK: {
        struct tval v = capture(s, sc, st->b);
        out_val(s, apply_filters(s, sc, st->a, v));
        return;
    }
    case N_BREAK: s->brk = 1; return;
    case N_CONTINUE: s->brk = 2; return;
    default:
        tm_fail(s, "internal: not a statement");
    }
}

struct tmpl_limits tmpl_default_limits(void)
{
    struct tmpl_limits l = {.max_output = 4u << 20, .max_steps = 10000000, .max_iterations = 1000000,
                            .max_depth = 128, .max_memory = 256u << 20};
    return l;
}

static void state_free(struct tm_state *s)
{
    for (struct tm_buf *b = s->bufs; b; b = b->next)
        sb_free(&b->b);
    s->bufs = NULL;
    for (struct tm_chunk *c = s->chunks, *n; c; c = n) {
        n = c->next;
        core_free(c);
    }
    s->chunks = NULL;
}

static int run(const char *src, size_t n, const char *ctx, size_t ctx_n,
               const struct tmpl_limits *lim, int64_t now, char **out, size_t *out_len, char *err,
               size_t err_cap, bool render)
{
    struct tm_state *s = core_malloc(sizeof *s);
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!s) {
        if (err && err_cap)
            snprintf(err, err_cap, "out of memory");
        return -2;
    }
    memset(s, 0, sizeof *s);
    s->lim = lim ? *lim : tmpl_default_limits();
    s->now = now;
    s->err = err;
    s->err_cap = err_cap;
    if (err && err_cap)
        err[0] = 0;
    if (setjmp(s->jb)) {
        int rc = s->oom ? -2 : -1;
        state_free(s);
        core_free(s);
        return rc;
    }
    if (!src)
        tm_fail(s, "no template");
    tm_lex(s, src, n);
    struct tm_node *root = tm_parse(s);
    if (render) {
        s->line = 0;
        s->depth = 0;
        s->globals = scope_new(s, NULL);
        if (ctx && ctx_n) {
            struct tval c = tv_from_json(s, ctx, ctx_n);
            if (c.k != TV_DICT)
                tm_fail(s, "the context must be a JSON object");
            s->globals->vars = *c.u.d;
        }
        struct sbuf *buf = tm_buf(s);
        s->out = buf;
        struct tm_scope *top = scope_new(s, s->globals);
        tm_exec(s, top, root);
        if (buf->oom)
            tm_oom(s);
        size_t len = buf->len;
        char *text = sb_take(buf, NULL);
        if (!text) {
            text = core_malloc(1);
            if (!text)
                tm_oom(s);
        }
        text[len] = 0; /* an empty render never wrote its NUL */
        *out = text;
        if (out_len)
            *out_len = len;
    }
    state_free(s);
    core_free(s);
    return 0;
}

int tmpl_render(const char *src, size_t n, const char *ctx_json, size_t ctx_n,
                const struct tmpl_limits *lim, int64_t now, char **out, size_t *out_len,
                char *err, size_t err_cap)
{
    if (!out) {
        if (err && err_cap)
            snprintf(err, err_cap, "no output pointer");
        return -1;
    }
    return run(src, n, ctx_json, ctx_n, lim, now, out, out_len, err, err_cap, true);
}

int tmpl_check(const char *src, size_t n, char *err, size_t err_cap)
{
    return run(src, n, NULL, 0, NULL, 0, NULL, NULL, err, err_cap, false);
}
