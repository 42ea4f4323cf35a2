/*
 * unit_tmpl.c - the sandboxed Jinja interpreter (src/tmpl): each limit
 * (output, steps, iterations, depth, memory) stops a render with an error
 * naming the template's line; the sandbox refuses internals and mutating
 * methods; raise_exception's message reaches the caller; a few exact
 * renders (whitespace control, loops, macros, namespace, tojson, Python
 * printing) whose expected text is what jinja2 3.1 prints for them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"
#include "tmpl/tmpl.h"

static const int64_t NOW = 1764662400; /* 2025-12-02 08:00 UTC */

/* Render src with ctx (and lim); returns the text (core_free) or NULL
 * with err filled. */
static char *render(const char *src, const char *ctx, const struct tmpl_limits *lim, char *err,
                    size_t cap) {
    char *out = NULL;
    size_t n = 0;
    err[0] = '\0';
    int rc = tmpl_render(src, strlen(src), ctx, strlen(ctx), lim, NOW, &out, &n, err, cap);
    if (rc != 0) {
        assert_null(out);
        assert_true(err[0] != '\0');
        return NULL;
    }
    assert_non_null(out);
    assert_int_equal(strlen(out), n);
    return out;
}

static void expect(const char *src, const char *ctx, const char *want) {
    char err[512];
    char *out = render(src, ctx, NULL, err, sizeof err);
    if (!out) fail_msg("render failed: %s\n  template: %s", err, src);
    if (strcmp(out, want) != 0) fail_msg("got %s\nwant %s\n  template: %s", out, want, src);
    core_free(out);
}

/* The render fails and the message contains `part` (and "line N: "). */
static void expect_error(const char *src, const char *ctx, const struct tmpl_limits *lim,
                         int line, const char *part) {
    char err[512];
    char *out = render(src, ctx, lim, err, sizeof err);
    if (out) fail_msg("rendered %s, expected an error\n  template: %s", out, src);
    if (!strstr(err, part)) fail_msg("error %s does not say %s", err, part);
    if (line > 0) {
        char want[32];
        snprintf(want, sizeof want, "line %d: ", line);
        if (strncmp(err, want, strlen(want)) != 0) fail_msg("error %s does not start %s", err, want);
    }
}

// ----------------------------------------------------------------------------
// limits

static void test_output_limit(void **state) {
    (void)state;
    struct tmpl_limits l = tmpl_default_limits();
    l.max_output = 1000;
    expect_error("a\n{% for i in range(100) %}0123456789ABCDEF{% endfor %}", "{}", &l, 2,
                 "output limit");
    /* just under the limit is fine */
    char err[256];
    char *out = render("{% for i in range(62) %}0123456789ABCDEF{% endfor %}", "{}", &l, err,
                       sizeof err);
    assert_non_null(out);
    assert_int_equal(strlen(out), 992);
    core_free(out);
}

static void test_step_limit(void **state) {
    (void)state;
    struct tmpl_limits l = tmpl_default_limits();
    l.max_steps = 5000;
    expect_error("\n\n{% for i in range(100000) %}{{ i + 1 }}{% endfor %}", "{}", &l, 3,
                 "step limit");
}

static void test_iteration_limit(void **state) {
    (void)state;
    struct tmpl_limits l = tmpl_default_limits();
    l.max_iterations = 50;
    expect_error("{% for i in range(10) %}\n{% for j in range(10) %}x{% endfor %}{% endfor %}",
                 "{}", &l, 2, "iteration");
}

static void test_depth_limit(void **state) {
    (void)state;
    /* a macro that calls itself forever */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}", "{}", NULL, 0,
                 "recursion");
    /* nesting beyond the parse depth */
    struct tmpl_limits l = tmpl_default_limits();
    l.max_depth = 8;
    char src[512] = "{{ ";
    for (int i = 0; i < 40; i++) strcat(src, "(");
    strcat(src, "1");
    for (int i = 0; i < 40; i++) strcat(src, ")");
    strcat(src, " }}");
    char err[256];
    char *out = render(src, "{}", &l, err, sizeof err);
    assert_null(out);
}

static void test_memory_limit(void **state) {
    (void)state;
    struct tmpl_limits l = tmpl_default_limits();
    l.max_memory = 1 << 16;
    /* a string doubled until it exceeds the arena */
    expect_error("{% set ns = namespace(s='x') %}\n{% for i in range(30) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
                 "{}", &l, 0, "memory limit");
}

// ----------------------------------------------------------------------------
// the sandbox

static void test_mutating_methods_refused(void **state) {
    (void)state;
    expect_error("{% set l = [1] %}\n{{ l.append(2) }}", "{}", NULL, 2, "unsafe");
    expect_error("{{ d.update({'a': 1}) }}", "{\"d\": {}}", NULL, 1, "unsafe");
    expect_error("{{ messages.pop() }}", "{\"messages\": [1, 2]}", NULL, 1, "unsafe");
}

static void test_no_internals(void **state) {
    (void)state;
    /* Python's internals do not exist here: undefined, printed as "" */
    expect("[{{ messages.__class__ }}][{{ ''.__class__ }}][{{ x.__dict__ }}]",
           "{\"messages\": [], \"x\": {}}", "[][][]");
    /* an undefined thing cannot be called */
    char err[256];
    char *out = render("{{ ''.__class__.__mro__() }}", "{}", NULL, err, sizeof err);
    assert_null(out);
    /* no includes, imports or extends */
    out = render("{% include 'x' %}", "{}", NULL, err, sizeof err);
    assert_null(out);
    out = render("{% import 'os' as os %}", "{}", NULL, err, sizeof err);
    assert_null(out);
}

static void test_raise_exception(void **state) {
    (void)state;
    expect_error("{% if messages[0].role != 'user' %}\n"
                 "{{ raise_exception('Conversations must start with a user message') }}"
                 "{% endif %}",
                 "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", NULL, 2,
                 "Conversations must start with a user message");
}

static void test_bad_template_names_line(void **state) {
    (void)state;
    expect_error("ok\n{% if x %}\nno endif", "{}", NULL, 0, "");
    char err[256];
    assert_int_equal(tmpl_check("{% for %}", 9, err, sizeof err), -1);
    assert_int_equal(tmpl_check("{{ a }}", 7, err, sizeof err), 0);
    /* a bad context */
    assert_null(render("x", "[1, 2]", NULL, err, sizeof err));
    assert_null(render("x", "{\"a\": ", NULL, err, sizeof err));
}

// ----------------------------------------------------------------------------
// exact renders (the text jinja2 3.1 prints, trim_blocks + lstrip_blocks)

static void test_exact_renders(void **state) {
    (void)state;
    expect("{% for m in messages %}\n  {{ m.role }}: {{ m.content | trim }}\n{% endfor %}",
           "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, "
           "{\"role\": \"assistant\", \"content\": \"yo\"}]}",
           "  user: hi\n  assistant: yo\n");
    expect("{% for x in [1, 2, 3] %}{{ loop.index }}{{ '' if loop.last else ',' }}{% endfor %}",
           "{}", "1,2,3");
    expect("{% set ns = namespace(n=0) %}{% for x in xs %}{% if x > 1 %}{% set ns.n = ns.n + x %}"
           "{% endif %}{% endfor %}{{ ns.n }}",
           "{\"xs\": [1, 2, 3]}", "5");
    expect("{% macro tag(name, v='d') %}<{{ name }}={{ v }}>{% endmacro %}{{ tag('a') }}"
           "{{ tag('b', v=2) }}",
           "{}", "<a=d><b=2>");
    expect("{{ tools | tojson }}|{{ {'b': 1, 'a': [true, none, 1.5]} | tojson(indent=2) }}",
           "{\"tools\": [{\"name\": \"f\", \"n\": \"\\u00e9\"}]}",
           "[{\"name\": \"f\", \"n\": \"\xc3\xa9\"}]|{\n  \"b\": 1,\n  \"a\": [\n    true,\n"
           "    null,\n    1.5\n  ]\n}");
    /* Python printing of values */
    expect("{{ [1, 'a', none, true] }} {{ {'k': 'v'} }} {{ 2.0 }} {{ 7 // 2 }}", "{}",
           "[1, 'a', None, True] {'k': 'v'} 2.0 3");
    expect("{{ 'a,b'.split(',') }} {{ 'Hi'.upper() }} {{ '  x '.strip() }}|{{ 'abc'[1:] }}", "{}",
           "['a', 'b'] HI x|bc");
    expect("{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor %}", "{}", "012");
    expect("{{ strftime_now('%Y-%m-%d') }}", "{}", "2025-12-02");
    expect("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{}",
           "012");
}

/* markupsafe's Markup as jinja2 has it without autoescape (jinja2's
 * renderings of the same sources, by hand): `+` with a safe string
 * escapes the plain side, `~` and output do not; % escapes its string
 * arguments; escape leaves a safe string alone, forceescape does not.
 * Functionary v3.1's template writes its tools so. Also: select, map and
 * the like give nothing for a false value (None, undefined, ''). */
static void test_markup(void **state) {
    (void)state;
    expect("{{ \"a<\"|safe + \"<b>\" }}", "{}", "a<&lt;b&gt;");
    expect("{{ \"<x>\" + \"'q'\"|safe }}", "{}", "&lt;x&gt;'q'");
    expect("{{ \"<x>\" ~ \"y\"|safe }}", "{}", "<x>y");
    expect("{{ \"<p>%s</p>\"|safe % \"<i>\" }}", "{}", "<p>&lt;i&gt;</p>");
    expect("{{ (\"&\"|safe) * 2 + \"&\" }}", "{}", "&&&amp;");
    expect("{{ \"<a>\"|e }}{{ \"<a>\"|e|e }}{{ \"<a>\"|safe|forceescape }}", "{}",
           "&lt;a&gt;&lt;a&gt;&lt;a&gt;");
    expect("{% set t = \"<b>\"|safe %}{{ t + \"&\" }}|{{ t }}", "{}", "<b>&amp;|<b>");
    expect("{{ \"'\"|safe + tools | tojson }}", "{\"tools\": [\"x\"]}", "'[&#34;x&#34;]");
    /* kept by trim, upper, strip(), indent; not by title and replace */
    expect("{{ (\" <a> \"|safe|trim) + \"<\" }}|{{ (\"<a>\"|safe|upper) + \"&\" }}|"
           "{{ (\"x\"|safe).strip() + \"<\" }}|{{ (\"ab\"|safe|indent(2, true)) + \"<\" }}|"
           "{{ (\"ab\"|safe|title) + \"<\" }}|{{ (\"ab\"|safe|replace(\"a\",\"b\")) + \"<\" }}",
           "{}", "<a>&lt;|<A>&amp;|x&lt;|  ab&lt;|Ab<|bb<");
    expect("{{ none|selectattr(\"x\")|list }}{{ none|map(\"upper\")|list }}{{ \"\"|reject|list }}"
           "{{ undefined_x|select|list }}",
           "{}", "[][][][]");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_limit),
        cmocka_unit_test(test_step_limit),
        cmocka_unit_test(test_iteration_limit),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_mutating_methods_refused),
        cmocka_unit_test(test_no_internals),
        cmocka_unit_test(test_raise_exception),
        cmocka_unit_test(test_bad_template_names_line),
        cmocka_unit_test(test_exact_renders),
        cmocka_unit_test(test_markup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
