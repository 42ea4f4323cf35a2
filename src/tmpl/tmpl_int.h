/*
 * tmpl_int.h - the interpreter's internals: the arena, values, tokens,
 * the AST and the evaluation state, shared by the files of src/tmpl.
 *
 * Memory: everything a render makes (tokens, nodes, values, strings)
 * comes from one arena freed at the end, so values need no reference
 * counts and an error can unwind with longjmp (tm_fail) without leaking:
 * nothing outside the arena is allocated between tm_try and the end.
 * Values are immutable once built, except a namespace's dictionary
 * (set ns.attr = ...), which is the only mutation the sandbox allows.
 */
#ifndef ANVIL_TMPL_INT_H
#define ANVIL_TMPL_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/sbuf.h"
#include "tmpl/tmpl.h"

struct tm_state;

/* ---- arena ---- */
struct tm_chunk {
    struct tm_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};
void *tm_alloc(struct tm_state *s, size_t n); /* zeroed; fails the render past max_memory */
char *tm_strndup(struct tm_state *s, const char *p, size_t n);

/* Growable text buffers the render owns: freed when the render ends (also
 * by an error's unwinding), or earlier by tm_buf_str. */
struct tm_buf { struct sbuf b; struct tm_buf *next; };
struct sbuf *tm_buf(struct tm_state *s);
struct tval;
/* The buffer's text as a string value; the buffer is released. */
struct tval tm_buf_str(struct tm_state *s, struct sbuf *b);

/* ---- values ---- */
enum tv_kind {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT,
    TV_NS,     /* namespace(): a dict whose members set can assign */
    TV_MACRO,  /* a macro (or the caller of a call block) */
    TV_FUNC,   /* a global function or a bound method */
    TV_LOOP    /* the loop variable of a for */
};
struct tm_str { size_t n; char p[]; }; /* p NUL terminated */
struct tval;
struct tm_list { size_t n, cap; struct tval *v; bool tuple; };
struct tm_dict { size_t n, cap; struct tval *k, *v; };
struct tm_node;
struct tm_scope;
struct tm_macro {
    const char *name;
    struct tm_node *def;     /* N_MACRO or N_CALLBLOCK (its caller) */
    struct tm_scope *closure;
    struct tval *caller;     /* for the body of a call block */
};
struct tm_loop {
    struct tm_list *items;
    size_t i;
    int depth;
};
struct tm_func {
    const char *name;        /* "range", "namespace", or a method name */
    struct tval *self;       /* bound object for a method, else NULL */
};
struct tval {
    uint8_t k;
    /* a string marked safe (markupsafe's Markup: |safe, |escape): `+`
     * with a plain string escapes the plain one, as jinja2 does without
     * autoescape; output and `~` ignore the mark */
    uint8_t safe;
    union {
        bool b;
        int64_t i;
        double f;
        struct tm_str *s;
        struct tm_list *l;
        struct tm_dict *d;
        struct tm_macro *m;
        struct tm_func *fn;
        struct tm_loop *lp;
    } u;
};

struct tval tv_undef(void);
struct tval tv_none(void);
struct tval tv_bool(bool b);
struct tval tv_int(int64_t i);
struct tval tv_float(double f);
struct tval tv_str(struct tm_state *s, const char *p, size_t n);
struct tval tv_cstr(struct tm_state *s, const char *p);
struct tval tv_list(struct tm_state *s, size_t cap);
struct tval tv_dict(struct tm_state *s, size_t cap);
void tv_list_push(struct tm_state *s, struct tm_list *l, struct tval v);
/* Set d[k] = v (replacing in place, insertion order kept). */
void tv_dict_set(struct tm_state *s, struct tm_dict *d, struct tval k, struct tval v);
/* d[k] or NULL. */
struct tval *tv_dict_get(struct tm_dict *d, struct tval k);
struct tval *tv_dict_gets(struct tm_dict *d, const char *key);

bool tv_truthy(struct tval v);
bool tv_equal(struct tval a, struct tval b);
/* -1/0/1; fails the render for types Python cannot order. */
int tv_compare(struct tm_state *s, struct tval a, struct tval b);
const char *tv_type_name(struct tval v);
/* str(v) as Python prints it, appended to b. */
void tv_to_str(struct tm_state *s, struct sbuf *b, struct tval v);
/* repr(v) (what str() of a list shows for its items). */
void tv_repr(struct tm_state *s, struct sbuf *b, struct tval v);
/* str(v) as a string value. */
struct tval tv_stringify(struct tm_state *s, struct tval v);
/* markupsafe.escape(v): a safe string as it is, anything else as its
 * text with & < > " ' escaped, marked safe. */
struct tval tv_escape(struct tm_state *s, struct tval v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), sort_keys). */
void tv_to_json(struct tm_state *s, struct sbuf *b, struct tval v, int indent, bool sort_keys,
                int level);
/* Python's float repr. */
void tv_float_repr(struct sbuf *b, double f);
/* Parse JSON text into a value (ints stay ints, floats floats). */
struct tval tv_from_json(struct tm_state *s, const char *p, size_t n);

/* ---- tokens and AST ---- */
enum tm_tok {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP
};
struct tm_token {
    uint8_t type;
    int line;
    const char *p; size_t n; /* text, name, string (unescaped), operator */
    int64_t i; double f;
};

enum tm_node_kind {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_CALLBLOCK,
    N_FILTERBLOCK, N_BREAK, N_CONTINUE,
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER,
    N_TEST, N_BINOP, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_COND, N_COMPARE, N_CONCAT, N_NSATTR
};
struct tm_node {
    uint8_t kind;
    int line;
    const char *name;        /* name, attribute, filter, test, operator, macro */
    struct tval val;         /* N_CONST */
    struct tm_node *a, *b, *c, *d; /* children (meaning per kind) */
    struct tm_node **kids;   /* body statements, list items, call args */
    size_t n_kids;
    const char **knames;     /* keyword names for kids (NULL for positional) */
    bool flag;               /* N_TEST negated; N_SETBLOCK; N_FOR recursive */
    const char **ops;        /* N_COMPARE operators (n_kids - 1) */
};

/* ---- state ---- */
struct tm_scope {
    struct tm_scope *parent;
    struct tm_dict vars;
};
struct tm_state {
    struct tmpl_limits lim;
    struct tm_chunk *chunks;
    struct tm_buf *bufs;
    size_t mem;
    uint64_t steps, iters;
    int depth;
    int64_t now;
    jmp_buf jb;
    bool jb_set;
    bool oom;               /* the failure was out of memory (tmpl_render -2) */
    char *err; size_t err_cap;
    int line;               /* line of the node being evaluated */
    struct sbuf *out;       /* where output goes now (macros capture) */
    struct tm_scope *globals;
    /* lexer output */
    struct tm_token *toks; size_t n_toks, cap_toks;
    size_t pos;             /* parser position */
    int brk;                /* 1 break, 2 continue pending */
};

/* Fail the render: formats the message with the current line, unwinds. */
_Noreturn void tm_fail(struct tm_state *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* tm_fail with "out of memory", marked so the caller can tell it apart. */
_Noreturn void tm_oom(struct tm_state *s);
void tm_step(struct tm_state *s);

/* lex.c: fills s->toks from the (normalised) source. */
void tm_lex(struct tm_state *s, const char *src, size_t n);
/* parse.c: the template's body. */
struct tm_node *tm_parse(struct tm_state *s);
/* eval.c */
struct tval tm_eval(struct tm_state *s, struct tm_scope *sc, struct tm_node *e);
void tm_exec(struct tm_state *s, struct tm_scope *sc, struct tm_node *st);
struct tval tm_lookup(struct tm_scope *sc, const char *name);
struct tval tm_call_value(struct tm_state *s, struct tval fn, struct tval *args, size_t n,
                          const char **knames);
struct tval tm_getattr(struct tm_state *s, struct tval obj, const char *name);
/* Byte offsets of each UTF-8 code point of str, plus str->n at the end
 * (Python indexes strings by code point); *count = code points (value.c). */
size_t *tm_cp_offsets(struct tm_state *s, const struct tm_str *str, size_t *count);
struct tval tm_getitem(struct tm_state *s, struct tval obj, struct tval key);
struct tm_list *tm_iterate(struct tm_state *s, struct tval v);
/* builtins.c */
struct tval tm_filter(struct tm_state *s, struct tm_scope *sc, const char *name, struct tval v,
                      struct tval *args, size_t n, const char **knames);
bool tm_test(struct tm_state *s, const char *name, struct tval v, struct tval *args, size_t n);
bool tm_is_test(const char *name);
bool tm_is_filter(const char *name);
struct tval tm_call_method(struct tm_state *s, struct tm_func *fn, struct tval *args, size_t n,
                           const char **knames);
struct tval tm_call_global(struct tm_state *s, const char *name, struct tval *args, size_t n,
                           const char **knames);
/* Whether obj has an allowed method called name. */
bool tm_has_method(struct tval obj, const char *name);
bool tm_is_global_func(const char *name);

#endif /* ANVIL_TMPL_INT_H */
