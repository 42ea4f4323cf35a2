/*
 * tmpl.h - a sandboxed interpreter for the Jinja subset that chat
 * templates use (the GGUF's tokenizer.chat_template).
 *
 * What it does: lexes, parses and renders a template against a context
 * given as JSON text (messages, tools, add_generation_prompt, bos_token,
 * ...), with the semantics of jinja2's ImmutableSandboxedEnvironment as
 * transformers' apply_chat_template configures it: trim_blocks and
 * lstrip_blocks on, the loopcontrols extension (break/continue), the
 * {% generation %} block, and the tojson, raise_exception and strftime_now
 * that transformers registers. Values print as Python prints them.
 *
 * What it does not do: run anything but the template. There is no access
 * to anything but the context's values and the allowed methods (the
 * string, list and dict methods named in docs/chat-templates.md); the
 * mutating list/dict methods (append, pop, update, ...) are refused, as
 * the immutable sandbox refuses them. No includes, imports, extends or
 * blocks.
 *
 * Limits: every render is bounded in output bytes, loop iterations,
 * nesting/recursion depth, total evaluation steps (the time bound) and
 * memory. Exceeding one is an error naming the template's line, like any
 * other error ("line 12: ...").
 *
 * Reference: jinja2 3.1 (lexer.py, parser.py, runtime.py, filters.py,
 * tests.py, sandbox.py) for behaviour; tests/py/test_tmpl_corpus.py
 * compares against it byte for byte.
 */
#ifndef ANVIL_TMPL_H
#define ANVIL_TMPL_H

#include <stddef.h>
#include <stdint.h>

struct tmpl_limits {
    size_t max_output;       /* bytes of rendered text */
    uint64_t max_steps;      /* expression/statement evaluations */
    uint64_t max_iterations; /* loop iterations, all loops together */
    int max_depth;           /* parse nesting and macro recursion */
    size_t max_memory;       /* bytes of the render's arena */
};

/* 4 MiB output, 10M steps, 1M iterations, depth 128, 256 MiB memory. */
struct tmpl_limits tmpl_default_limits(void);

/* Render template src[0..n) with the context ctx_json (a JSON object:
 * its members become the template's variables). lim NULL = the defaults;
 * now = the time strftime_now formats (seconds since the epoch, local
 * time). On success returns 0 and *out (NUL terminated, free with
 * core_free) and *out_len. On any failure (bad template, bad context,
 * raise_exception, a limit) returns -1, *out = NULL, and err holds a
 * message that starts with "line N: " when the failure has a line; out of
 * memory returns -2 (err "out of memory"). */
int tmpl_render(const char *src, size_t n, const char *ctx_json, size_t ctx_n,
                const struct tmpl_limits *lim, int64_t now, char **out, size_t *out_len,
                char *err, size_t err_cap);

/* Parse only: 0 when src parses, else -1 (-2: out of memory) and err as above. */
int tmpl_check(const char *src, size_t n, char *err, size_t err_cap);

#endif /* ANVIL_TMPL_H */
