/*
 * parse.c - tokens to an AST (struct tm_node), with jinja2's grammar and
 * operator precedence (parser.py): condexpr < or < and < not < compare
 * (==, !=, <, <=, >, >=, in, not in) < + - < ~ < * / // % < ** < unary
 * - + < postfix (. [] ()) < filters (|) and tests (is), which bind to the
 * unary operand ("-x|abs" is abs(-x), "not x is y" is not (x is y)).
 *
 * Statements: if/elif/else, for (targets, "if" filter, else), set (plain,
 * tuple, namespace attribute, block with filters), macro, call, filter,
 * break, continue, generation (transformers' AssistantTracker: the body
 * only). Anything else (extends, include, import, block, do, with) is an
 * error naming its line. Nesting is bounded by lim.max_depth.
 */
#include <string.h>

#include "tmpl/tmpl_int.h"

static struct tm_token *cur(struct tm_state *s) { return &s->toks[s->pos]; }
static struct tm_token *nxt(struct tm_state *s)
{
    struct tm_token *t = &s->toks[s->pos];
    if (t->type != T_EOF)
        s->pos++;
    return t;
}

static bool is_op(struct tm_token *t, const char *op)
{
    return t->type == T_OP && t->n == strlen(op) && !strncmp(t->p, op, t->n);
}
static bool is_name(struct tm_token *t, const char *nm)
{
    return t->type == T_NAME && t->n == strlen(nm) && !strncmp(t->p, nm, t->n);
}

static _Noreturn void fail_at(struct tm_state *s, struct tm_token *t, const char *what)
{
    s->line = t->line;
    if (t->type == T_EOF)
        tm_fail(s, "unexpected end of template: %s", what);
    if (t->type == T_BLOCK_END || t->type == T_VAR_END)
        tm_fail(s, "unexpected end of tag: %s", what);
    if (t->type == T_NAME || t->type == T_OP)
        tm_fail(s, "unexpected '%.*s': %s", (int)t->n, t->p, what);
    tm_fail(s, "unexpected token: %s", what);
}

static void expect_op(struct tm_state *s, const char *op)
{
    if (!is_op(cur(s), op)) {
        char m[32];
        strcpy(m, "expected '");
        strcat(m, op);
        strcat(m, "'");
        fail_at(s, cur(s), m);
    }
    nxt(s);
}

static void expect_end(struct tm_state *s)
{
    if (cur(s)->type != T_BLOCK_END)
        fail_at(s, cur(s), "expected end of statement '%}'");
    nxt(s);
}

static const char *name_of(struct tm_state *s, struct tm_token *t)
{
    return tm_strndup(s, t->p, t->n);
}

static const char *expect_name(struct tm_state *s)
{
    if (cur(s)->type != T_NAME)
        fail_at(s, cur(s), "expected a name");
    return name_of(s, nxt(s));
}

static struct tm_node *node(struct tm_state *s, int kind, int line)
{
    struct tm_node *n = tm_alloc(s, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

struct kids { struct tm_node **v; const char **names; size_t n, cap; };
static void kid_push(struct tm_state *s, struct kids *k, struct tm_node *n, const char *name)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 4;
        struct tm_node **nv = tm_alloc(s, cap * sizeof *nv);
        const char **nn = tm_alloc(s, cap * sizeof *nn);
        if (k->n) {
            memcpy(nv, k->v, k->n * sizeof *nv);
            memcpy(nn, k->names, k->n * sizeof *nn);
        }
        k->v = nv;
        k->names = nn;
        k->cap = cap;
    }
    k->v[k->n] = n;
    k->names[k->n++] = name;
}
static void kids_to(struct tm_node *n, struct kids *k)
{
    n->kids = k->v;
    n->knames = k->names;
    n->n_kids = k->n;
}

static void enter(struct tm_state *s)
{
    if (++s->depth > s->lim.max_depth) {
        s->line = cur(s)->line;
        tm_fail(s, "template nested deeper than %d", s->lim.max_depth);
    }
}
static void leave(struct tm_state *s) { s->depth--; }

static struct tm_node *expr(struct tm_state *s, bool condexpr);
static struct tm_node *unary(struct tm_state *s, bool with_filter);
static struct tm_node *or_expr(struct tm_state *s);

static void call_args(struct tm_state *s, struct tm_node *n)
{
    struct kids k = {0};
    expect_op(s, "(");
    while (!is_op(cur(s), ")")) {
        if (k.n)
            expect_op(s, ",");
        if (is_op(cur(s), ")"))
            break;
        if (is_op(cur(s), "*") || is_op(cur(s), "**"))
            fail_at(s, cur(s), "*args and **kwargs are not supported");
        const char *kw = NULL;
        if (cur(s)->type == T_NAME && is_op(&s->toks[s->pos + 1], "=")) {
            kw = name_of(s, nxt(s));
            nxt(s);
        } else {
            for (size_t i = 0; i < k.n; i++)
                if (k.names[i])
                    fail_at(s, cur(s), "positional argument after keyword argument");
        }
        kid_push(s, &k, expr(s, true), kw);
    }
    nxt(s);
    kids_to(n, &k);
}

static struct tm_node *primary(struct tm_state *s)
{
    struct tm_token *t = cur(s);
    struct tm_node *n;
    if (t->type == T_NAME) {
        nxt(s);
        n = node(s, N_CONST, t->line);
        if (is_name(t, "true") || is_name(t, "True"))
            n->val = tv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False"))
            n->val = tv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None"))
            n->val = tv_none();
        else {
            n->kind = N_NAME;
            n->name = name_of(s, t);
        }
        return n;
    }
    if (t->type == T_STRING) {
        struct sbuf *b = tm_buf(s);
        while (cur(s)->type == T_STRING) {
            sb_put(b, cur(s)->p, cur(s)->n);
            nxt(s);
        }
        n = node(s, N_CONST, t->line);
        n->val = tm_buf_str(s, b);
        return n;
    }
    if (t->type == T_INT || t->type == T_FLOAT) {
        nxt(s);
        n = node(s, N_CONST, t->line);
        n->val = t->type == T_INT ? tv_int(t->i) : tv_float(t->f);
        return n;
    }
    if (is_op(t, "(")) {
        nxt(s);
        if (is_op(cur(s), ")")) {
            nxt(s);
            n = node(s, N_TUPLE, t->line);
            return n;
        }
        struct tm_node *e = expr(s, true);
        if (!is_op(cur(s), ",")) {
            expect_op(s, ")");
            return e;
        }
        struct kids k = {0};
        kid_push(s, &k, e, NULL);
        while (is_op(cur(s), ",")) {
            nxt(s);
            if (is_op(cur(s), ")"))
                break;
            kid_push(s, &k, expr(s, true), NULL);
        }
        expect_op(s, ")");
        n = node(s, N_TUPLE, t->line);
        kids_to(n, &k);
        return n;
    }
    if (is_op(t, "[")) {
        nxt(s);
        struct kids k = {0};
        while (!is_op(cur(s), "]")) {
            if (k.n)
                expect_op(s, ",");
            if (is_op(cur(s), "]"))
                break;
            kid_push(s, &k, expr(s, true), NULL);
        }
        nxt(s);
        n = node(s, N_LIST, t->line);
        kids_to(n, &k);
        return n;
    }
    if (is_op(t, "{")) {
        nxt(s);
        struct kids k = {0};
        while (!is_op(cur(s), "}")) {
            if (k.n)
                expect_op(s, ",");
            if (is_op(cur(s), "}"))
                break;
            kid_push(s, &k, expr(s, true), NULL);
            expect_op(s, ":");
            kid_push(s, &k, expr(s, true), NULL);
        }
        nxt(s);
        n = node(s, N_DICT, t->line);
        kids_to(n, &k);
        return n;
    }
    fail_at(s, t, "expected an expression");
}

static struct tm_node *subscript(struct tm_state *s, struct tm_node *obj, int line)
{
    struct tm_node *parts[3] = {NULL, NULL, NULL};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (is_op(cur(s), ":")) {
            slice = true;
            nxt(s);
            if (++np > 2)
                fail_at(s, cur(s), "too many ':' in a slice");
            continue;
        }
        if (is_op(cur(s), "]"))
            break;
        if (parts[np])
            fail_at(s, cur(s), "expected ']'");
        parts[np] = expr(s, true);
    }
    nxt(s);
    struct tm_node *n;
    if (slice) {
        n = node(s, N_SLICE, line);
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        if (!parts[0])
            fail_at(s, cur(s), "expected a subscript");
        n = node(s, N_ITEM, line);
        n->b = parts[0];
    }
    n->a = obj;
    return n;
}

static struct tm_node *postfix(struct tm_state *s, struct tm_node *n)
{
    for (;;) {
        struct tm_token *t = cur(s);
        if (is_op(t, ".")) {
            nxt(s);
            struct tm_token *a = nxt(s);
            struct tm_node *m;
            if (a->type == T_NAME) {
                m = node(s, N_ATTR, t->line);
                m->name = name_of(s, a);
            } else if (a->type == T_INT) {
                m = node(s, N_ITEM, t->line);
                m->b = node(s, N_CONST, t->line);
                m->b->val = tv_int(a->i);
            } else
                fail_at(s, a, "expected an attribute name");
            m->a = n;
            n = m;
        } else if (is_op(t, "[")) {
            nxt(s);
            n = subscript(s, n, t->line);
        } else if (is_op(t, "(")) {
            struct tm_node *m = node(s, N_CALL, t->line);
            m->a = n;
            call_args(s, m);
            n = m;
        } else
            return n;
    }
}

static struct tm_node *filter_one(struct tm_state *s, struct tm_node *in)
{
    struct tm_token *t = cur(s);
    const char *nm = expect_name(s);
    while (is_op(cur(s), ".")) { /* dotted filter names: a.b */
        nxt(s);
        const char *more = expect_name(s);
        size_t l = strlen(nm) + strlen(more) + 2;
        char *j = tm_alloc(s, l);
        strcpy(j, nm);
        strcat(j, ".");
        strcat(j, more);
        nm = j;
    }
    struct tm_node *f = node(s, N_FILTER, t->line);
    f->name = nm;
    f->a = in;
    if (is_op(cur(s), "("))
        call_args(s, f);
    return f;
}

static struct tm_node *filter_expr(struct tm_state *s, struct tm_node *n)
{
    for (;;) {
        struct tm_token *t = cur(s);
        if (is_op(t, "|")) {
            nxt(s);
            n = filter_one(s, n);
        } else if (is_name(t, "is")) {
            nxt(s);
            struct tm_node *m = node(s, N_TEST, t->line);
            if (is_name(cur(s), "not")) {
                nxt(s);
                m->flag = true;
            }
            m->name = expect_name(s);
            m->a = n;
            struct tm_token *c = cur(s);
            if (is_op(c, "(")) {
                call_args(s, m);
            } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
                        c->type == T_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is"))
                    fail_at(s, c, "tests cannot be chained with 'is'");
                struct kids k = {0};
                kid_push(s, &k, postfix(s, primary(s)), NULL);
                kids_to(m, &k);
            }
            n = m;
        } else if (is_op(t, "(")) {
            struct tm_node *m = node(s, N_CALL, t->line);
            m->a = n;
            call_args(s, m);
            n = m;
        } else
            return n;
    }
}

static struct tm_node *unary(struct tm_state *s, bool with_filter)
{
    enter(s);
    struct tm_token *t = cur(s);
    struct tm_node *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        nxt(s);
        n = node(s, is_op(t, "-") ? N_NEG : N_POS, t->line);
        n->a = unary(s, false);
    } else
        n = primary(s);
    n = postfix(s, n);
    if (with_filter)
        n = filter_expr(s, n);
    leave(s);
    return n;
}

static struct tm_node *binop(struct tm_state *s, const char *op, struct tm_node *a,
                             struct tm_node *b, int line)
{
    struct tm_node *n = node(s, N_BINOP, line);
    n->name = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct tm_node *pow_expr(struct tm_state *s)
{
    struct tm_node *n = unary(s, true);
    while (is_op(cur(s), "**")) {
        int line = nxt(s)->line;
        n = binop(s, "**", n, unary(s, true), line);
    }
    return n;
}

static struct tm_node *math2(struct tm_state *s)
{
    struct tm_node *n = pow_expr(s);
    for (;;) {
        struct tm_token *t = cur(s);
        const char *op = is_op(t, "*") ? "*" : is_op(t, "/") ? "/" : is_op(t, "//") ? "//"
                       : is_op(t, "%") ? "%" : NULL;
        if (!op)
            return n;
        nxt(s);
        n = binop(s, op, n, pow_expr(s), t->line);
    }
}

static struct tm_node *concat(struct tm_state *s)
{
    struct tm_node *n = math2(s);
    if (!is_op(cur(s), "~"))
        return n;
    struct kids k = {0};
    kid_push(s, &k, n, NULL);
    int line = cur(s)->line;
    while (is_op(cur(s), "~")) {
        nxt(s);
        kid_push(s, &k, math2(s), NULL);
    }
    struct tm_node *c = node(s, N_CONCAT, line);
    kids_to(c, &k);
    return c;
}

static struct tm_node *math1(struct tm_state *s)
{
    struct tm_node *n = concat(s);
    for (;;) {
        struct tm_token *t = cur(s);
        const char *op = is_op(t, "+") ? "+" : is_op(t, "-") ? "-" : NULL;
        if (!op)
            return n;
        nxt(s);
        n = binop(s, op, n, concat(s), t->line);
    }
}

static struct tm_node *compare(struct tm_state *s)
{
    struct tm_node *first = math1(s);
    struct kids k = {0};
    const char *ops[64];
    size_t nops = 0;
    int line = cur(s)->line;
    for (;;) {
        struct tm_token *t = cur(s);
        const char *op = NULL;
        if (is_op(t, "==")) op = "==";
        else if (is_op(t, "!=")) op = "!=";
        else if (is_op(t, "<")) op = "<";
        else if (is_op(t, "<=")) op = "<=";
        else if (is_op(t, ">")) op = ">";
        else if (is_op(t, ">=")) op = ">=";
        else if (is_name(t, "in")) op = "in";
        else if (is_name(t, "not") && is_name(&s->toks[s->pos + 1], "in")) {
            op = "notin";
            nxt(s);
        }
        if (!op)
            break;
        nxt(s);
        if (nops == 64)
            fail_at(s, t, "too many comparisons in a chain");
        if (!k.n)
            kid_push(s, &k, first, NULL);
        ops[nops++] = op;
        kid_push(s, &k, math1(s), NULL);
    }
    if (!nops)
        return first;
    struct tm_node *n = node(s, N_COMPARE, line);
    kids_to(n, &k);
    n->ops = tm_alloc(s, nops * sizeof *n->ops);
    memcpy(n->ops, ops, nops * sizeof *ops);
    return n;
}

static struct tm_node *not_expr(struct tm_state *s)
{
    if (is_name(cur(s), "not")) {
        enter(s);
        struct tm_node *n = node(s, N_NOT, nxt(s)->line);
        n->a = not_expr(s);
        leave(s);
        return n;
    }
    return compare(s);
}

static struct tm_node *and_expr(struct tm_state *s)
{
    struct tm_node *n = not_expr(s);
    while (is_name(cur(s), "and")) {
        struct tm_node *m = node(s, N_AND, nxt(s)->line);
        m->a = n;
        m->b = not_expr(s);
        n = m;
    }
    return n;
}

static struct tm_node *or_expr(struct tm_state *s)
{
    struct tm_node *n = and_expr(s);
    while (is_name(cur(s), "or")) {
        struct tm_node *m = node(s, N_OR, nxt(s)->line);
        m->a = n;
        m->b = and_expr(s);
        n = m;
    }
    return n;
}

static struct tm_node *expr(struct tm_state *s, bool condexpr)
{
    enter(s);
    struct tm_node *n = or_expr(s);
    while (condexpr && is_name(cur(s), "if")) {
        struct tm_node *m = node(s, N_COND, nxt(s)->line);
        m->a = n;
        m->b = or_expr(s);
        if (is_name(cur(s), "else")) {
            nxt(s);
            m->c = expr(s, true);
        }
        n = m;
    }
    leave(s);
    return n;
}

/* expression, or an implicit tuple "a, b" */
static struct tm_node *tuple_expr(struct tm_state *s, bool condexpr)
{
    int line = cur(s)->line;
    struct tm_node *n = expr(s, condexpr);
    if (!is_op(cur(s), ","))
        return n;
    struct kids k = {0};
    kid_push(s, &k, n, NULL);
    while (is_op(cur(s), ",")) {
        nxt(s);
        struct tm_token *t = cur(s);
        if (t->type == T_BLOCK_END || t->type == T_VAR_END || is_name(t, "if") || is_name(t, "recursive"))
            break;
        kid_push(s, &k, expr(s, condexpr), NULL);
    }
    struct tm_node *tu = node(s, N_TUPLE, line);
    kids_to(tu, &k);
    return tu;
}

/* assignment target: name, (a, b), a, b; ns.attr when allow_attr */
static struct tm_node *target(struct tm_state *s, bool allow_attr)
{
    int line = cur(s)->line;
    struct kids k = {0};
    bool paren = false;
    if (is_op(cur(s), "(")) {
        nxt(s);
        paren = true;
    }
    for (;;) {
        const char *nm = expect_name(s);
        struct tm_node *n = node(s, N_NAME, line);
        n->name = nm;
        if (allow_attr && !paren && !k.n && is_op(cur(s), ".")) {
            nxt(s);
            struct tm_node *a = node(s, N_NSATTR, line);
            a->a = n;
            a->name = expect_name(s);
            return a;
        }
        kid_push(s, &k, n, NULL);
        if (!is_op(cur(s), ","))
            break;
        nxt(s);
        if (paren && is_op(cur(s), ")"))
            break;
    }
    if (paren)
        expect_op(s, ")");
    if (k.n == 1 && !paren)
        return k.v[0];
    struct tm_node *t = node(s, N_TUPLE, line);
    kids_to(t, &k);
    return t;
}

static struct tm_node *body(struct tm_state *s, const char *const *ends);

/* macro / call-block parameters: names with optional defaults */
static void params(struct tm_state *s, struct tm_node *n)
{
    struct kids k = {0};
    const char *names[256];
    expect_op(s, "(");
    while (!is_op(cur(s), ")")) {
        if (k.n)
            expect_op(s, ",");
        if (is_op(cur(s), ")"))
            break;
        if (k.n == 256)
            fail_at(s, cur(s), "too many parameters");
        names[k.n] = expect_name(s);
        struct tm_node *def = NULL;
        if (is_op(cur(s), "=")) {
            nxt(s);
            def = expr(s, true);
        } else if (k.n && k.v[k.n - 1])
            fail_at(s, cur(s), "non-default argument follows default argument");
        kid_push(s, &k, def, NULL);
    }
    nxt(s);
    kids_to(n, &k);
    n->ops = tm_alloc(s, (k.n + 1) * sizeof *n->ops);
    if (k.n)
        memcpy(n->ops, names, k.n * sizeof *names);
}

static const char *const end_if[] = {"elif", "else", "endif", NULL};
static const char *const end_for[] = {"else", "endfor", NULL};
static const char *const end_for2[] = {"endfor", NULL};
static const char *const end_set[] = {"endset", NULL};
static const char *const end_macro[] = {"endmacro", NULL};
static const char *const end_call[] = {"endcall", NULL};
static const char *const end_filter[] = {"endfilter", NULL};
static const char *const end_gen[] = {"endgeneration", NULL};

static struct tm_node *if_stmt(struct tm_state *s, int line)
{
    struct tm_node *n = node(s, N_IF, line);
    n->a = tuple_expr(s, true);
    expect_end(s);
    n->b = body(s, end_if);
    struct tm_token *t = nxt(s);
    if (is_name(t, "elif")) {
        n->c = if_stmt(s, t->line);
        return n;
    }
    if (is_name(t, "else")) {
        expect_end(s);
        n->c = body(s, end_if + 2);
        nxt(s);
    }
    expect_end(s);
    return n;
}

static struct tm_node *statement(struct tm_state *s)
{
    struct tm_token *t = nxt(s); /* the tag's name */
    int line = t->line;
    struct tm_node *n;
    if (t->type != T_NAME)
        fail_at(s, t, "expected a statement name");
    if (is_name(t, "if"))
        return if_stmt(s, line);
    if (is_name(t, "for")) {
        n = node(s, N_FOR, line);
        n->a = target(s, false);
        if (!is_name(cur(s), "in"))
            fail_at(s, cur(s), "expected 'in'");
        nxt(s);
        n->b = tuple_expr(s, false);
        if (is_name(cur(s), "if")) {
            nxt(s);
            n->c = expr(s, true);
        }
        if (is_name(cur(s), "recursive"))
            fail_at(s, cur(s), "recursive loops are not supported");
        expect_end(s);
        n->kids = tm_alloc(s, 2 * sizeof *n->kids);
        n->n_kids = 2;
        n->kids[0] = body(s, end_for);
        if (is_name(nxt(s), "else")) {
            expect_end(s);
            n->kids[1] = body(s, end_for2);
            nxt(s);
        }
        expect_end(s);
        return n;
    }
    if (is_name(t, "set")) {
        struct tm_node *tg = target(s, true);
        if (is_op(cur(s), "=")) {
            nxt(s);
            n = node(s, N_SET, line);
            n->a = tg;
            n->b = tuple_expr(s, true);
            expect_end(s);
            return n;
        }
        n = node(s, N_SETBLOCK, line);
        n->a = tg;
        if (is_op(cur(s), "|")) {
            nxt(s);
            struct tm_node *f = filter_one(s, NULL);
            while (is_op(cur(s), "|")) {
                nxt(s);
                f = filter_one(s, f);
            }
            n->c = f;
        }
        expect_end(s);
        n->b = body(s, end_set);
        nxt(s);
        expect_end(s);
        return n;
    }
    if (is_name(t, "macro")) {
        n = node(s, N_MACRO, line);
        n->name = expect_name(s);
        params(s, n);
        expect_end(s);
        n->b = body(s, end_macro);
        nxt(s);
        if (cur(s)->type == T_NAME)
            nxt(s); /* {% endmacro name %} */
        expect_end(s);
        return n;
    }
    if (is_name(t, "call")) {
        n = node(s, N_CALLBLOCK, line);
        if (is_op(cur(s), "("))
            params(s, n);
        else
            n->ops = tm_alloc(s, sizeof *n->ops);
        n->a = expr(s, true);
        if (n->a->kind != N_CALL)
            fail_at(s, cur(s), "expected a call");
        expect_end(s);
        n->b = body(s, end_call);
        nxt(s);
        expect_end(s);
        return n;
    }
    if (is_name(t, "filter")) {
        n = node(s, N_FILTERBLOCK, line);
        struct tm_node *f = filter_one(s, NULL);
        while (is_op(cur(s), "|")) {
            nxt(s);
            f = filter_one(s, f);
        }
        n->a = f;
        expect_end(s);
        n->b = body(s, end_filter);
        nxt(s);
        expect_end(s);
        return n;
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        n = node(s, is_name(t, "break") ? N_BREAK : N_CONTINUE, line);
        expect_end(s);
        return n;
    }
    if (is_name(t, "generation")) {
        expect_end(s);
        n = body(s, end_gen);
        nxt(s);
        expect_end(s);
        return n;
    }
    s->line = line;
    tm_fail(s, "unknown or unsupported tag '%.*s'", (int)t->n, t->p);
}

/* statements up to a {% NAME %} with NAME in ends (left as the current
 * token, after its "{%") or, when ends is NULL, the end of the template */
static struct tm_node *body(struct tm_state *s, const char *const *ends)
{
    enter(s);
    struct kids k = {0};
    int line = cur(s)->line;
    for (;;) {
        struct tm_token *t = cur(s);
        if (t->type == T_EOF) {
            if (ends) {
                s->line = t->line;
                tm_fail(s, "unexpected end of template, expected '%s'", ends[0]);
            }
            break;
        }
        if (t->type == T_TEXT) {
            struct tm_node *n = node(s, N_TEXT, t->line);
            n->val = tv_str(s, t->p, t->n);
            kid_push(s, &k, n, NULL);
            nxt(s);
        } else if (t->type == T_VAR_BEGIN) {
            nxt(s);
            struct tm_node *n = node(s, N_OUTPUT, t->line);
            n->a = tuple_expr(s, true);
            if (cur(s)->type != T_VAR_END)
                fail_at(s, cur(s), "expected end of print statement '}}'");
            nxt(s);
            kid_push(s, &k, n, NULL);
        } else if (t->type == T_BLOCK_BEGIN) {
            struct tm_token *nm = &s->toks[s->pos + 1];
            bool is_end = false;
            for (size_t i = 0; ends && ends[i]; i++)
                if (is_name(nm, ends[i]))
                    is_end = true;
            if (is_end) {
                nxt(s);
                break;
            }
            if (nm->type == T_NAME && (!strncmp(nm->p, "end", 3) || is_name(nm, "elif") || is_name(nm, "else")))
                fail_at(s, nm, ends ? "this tag does not close the open block" : "no block is open");
            nxt(s);
            kid_push(s, &k, statement(s), NULL);
        } else
            fail_at(s, t, "unexpected token");
    }
    struct tm_node *b = node(s, N_BODY, line);
    kids_to(b, &k);
    leave(s);
    return b;
}

struct tm_node *tm_parse(struct tm_state *s)
{
    s->pos = 0;
    s->depth = 0;
    return body(s, NULL);
}
