/*
 * unit_toolfmt.c - the families' tool-call parsers and reasoning markers
 * (src/server/toolfmt.c): recorded outputs of each format fed whole, byte
 * by byte and in random pieces give the same parts, and the parts
 * expected; malformed output becomes content (or an ended call), never a
 * crash; srv_outfmt_detect names the expected format of every template of
 * llama.cpp's corpus (ANVIL_TEMPLATES, else the unpacked sdist under
 * ~/.cache/anvil; with ANVIL_TOOLFMT_PRINT=1 it prints what it detects).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/toolfmt.h"

/* ---------------------------------------------------------------------- */
/* parts -> a canonical string: C[..] R[..] B0(name) A0[..] E0, adjacent
 * pieces of one kind joined */

struct rec {
    struct sbuf s;
    int last;    /* the kind of the open piece, -1 none */
    int n_begin, n_end;
    bool bad_id;
    bool bad_index;
};

static void rec_close(struct rec *r) {
    if (r->last == SRV_PART_CONTENT || r->last == SRV_PART_REASONING ||
        r->last == SRV_PART_CALL_ARGS)
        sb_puts(&r->s, "]");
    r->last = -1;
}

static void rec_fn(void *user, const struct srv_part *p) {
    struct rec *r = user;
    if ((int)p->kind == r->last && p->kind != SRV_PART_CALL_BEGIN && p->kind != SRV_PART_CALL_END) {
        sb_put(&r->s, p->text, p->n);
        return;
    }
    rec_close(r);
    switch (p->kind) {
    case SRV_PART_CONTENT:
        sb_puts(&r->s, "C[");
        sb_put(&r->s, p->text, p->n);
        break;
    case SRV_PART_REASONING:
        sb_puts(&r->s, "R[");
        sb_put(&r->s, p->text, p->n);
        break;
    case SRV_PART_CALL_BEGIN:
        sb_printf(&r->s, "B%d(%s)", p->call_index, p->name);
        if (strncmp(p->id, "call_", 5) || strlen(p->id) < 12) r->bad_id = true;
        if (p->call_index != r->n_begin) r->bad_index = true;
        r->n_begin++;
        break;
    case SRV_PART_CALL_ARGS:
        sb_printf(&r->s, "A%d[", p->call_index);
        sb_put(&r->s, p->text, p->n);
        if (p->call_index != r->n_begin - 1) r->bad_index = true;
        break;
    case SRV_PART_CALL_END:
        sb_printf(&r->s, "E%d", p->call_index);
        if (p->call_index != r->n_end) r->bad_index = true;
        r->n_end++;
        break;
    }
    r->last = p->kind == SRV_PART_CALL_BEGIN || p->kind == SRV_PART_CALL_END ? -1 : (int)p->kind;
}

/* Run text through a parser fed in pieces: chunk 0 = whole, 1 = byte by
 * byte, other = random sizes from that seed. Returns the canonical
 * string (malloc'd). */
/* the tools bare Hermes calls may name (run_tools) */
static const char *g_tools[2];

static char *run(enum srv_toolfmt tf, enum srv_reasoningfmt rf, enum srv_tools_mode tools,
                 bool thinking, const char *text, unsigned chunk, bool complete) {
    struct srv_outfmt f = {.tool_format = tf, .reasoning_format = rf};
    for (int i = 0; i < 2 && g_tools[i]; i++)
        f.tool_hash[f.n_tools++] = srv_tool_hash(g_tools[i], strlen(g_tools[i]));
    struct srv_tfp *p = srv_tfp_new(&f, tools, thinking, 42);
    assert_non_null(p);
    struct rec r = {.last = -1};
    sb_init(&r.s);
    size_t n = strlen(text), i = 0;
    uint64_t st = chunk * 2654435761u + 1;
    while (i < n) {
        size_t k = n - i;
        if (chunk == 1) k = 1;
        else if (chunk > 1) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            k = 1 + (size_t)((st >> 33) % 7);
            if (k > n - i) k = n - i;
        }
        srv_tfp_feed(p, text + i, k, rec_fn, &r);
        i += k;
    }
    srv_tfp_end(p, complete, rec_fn, &r);
    rec_close(&r);
    sb_put(&r.s, "", 0); /* NUL terminated even when empty */
    assert_false(r.bad_id);
    assert_false(r.bad_index);
    assert_int_equal(r.n_begin, r.n_end); /* every call begun is ended */
    assert_int_equal(srv_tfp_n_calls(p), r.n_begin);
    srv_tfp_free(p);
    char *out = sb_take(&r.s, NULL);
    assert_non_null(out);
    return out;
}

struct tcase {
    const char *what;
    enum srv_toolfmt tf;
    enum srv_reasoningfmt rf;
    enum srv_tools_mode tools;
    bool thinking;
    const char *text;
    const char *want;
};

#define AUTO SRV_TOOLS_AUTO
#define NOR SRV_REASONING_NONE
#define THK SRV_REASONING_THINK
#define DSB "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DSE "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DCB "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DCE "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DSP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

static const struct tcase cases[] = {
    /* Hermes / Qwen 2.5 / Qwen 3 */
    {"hermes one", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0"},
    {"hermes parallel after text", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2.5e3, true, null]}}\n"
     "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
     "C[Let me check.]B0(a)A0[{\"x\": [1, 2.5e3, true, null]}]E0B1(b)A1[{}]E1"},
    {"qwen3 thought then call", SRV_TOOLFMT_HERMES, THK, AUTO, false,
     "<think>\nI should call it.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
     "{\"s\": \"a \\\"q\\\" </tool_call>\"}}\n</tool_call>",
     "R[I should call it.]B0(f)A0[{\"s\": \"a \\\"q\\\" </tool_call>\"}]E0"},
    {"thought opened by the prompt", SRV_TOOLFMT_HERMES, THK, AUTO, true,
     "I think so.\n</think>\n\nThe answer is 4.", "R[I think so.]C[The answer is 4.]"},
    {"thought without tools", SRV_TOOLFMT_HERMES, THK, SRV_TOOLS_NONE, false,
     "<think>a < b</think>Yes, <tool_call>{} stays text.",
     "R[a < b]C[Yes, <tool_call>{} stays text.]"},
    {"unclosed thought is all reasoning", SRV_TOOLFMT_JSON, THK, AUTO, true, "still thinking",
     "R[still thinking]"},
    {"arguments before the name", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "<tool_call>{\"arguments\": {\"x\": 1}, \"name\": \"f\"}</tool_call>",
     "B0(f)A0[{\"x\": 1}]E0"},
    {"arguments as a string", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": \\\"\\u00e9\\\"}\"}</tool_call>",
     "B0(f)A0[{\"x\": \"\xc3\xa9\"}]E0"},
    {"no arguments", SRV_TOOLFMT_HERMES, NOR, AUTO, false, "<tool_call>{\"name\": \"now\"}</tool_call>",
     "B0(now)A0[{}]E0"},
    /* Llama 3.x */
    {"llama3 whole answer", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0"},
    {"llama3 type key, two calls", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false,
     "{\"type\": \"function\", \"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"n\": -1}}",
     "B0(a)A0[{}]E0B1(b)A1[{\"n\": -1}]E1"},
    {"llama3 python_tag builtin", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false,
     "<|python_tag|>brave_search.call(query=\"weather in Paris\", n=3)",
     "B0(brave_search)A0[{\"query\":\"weather in Paris\",\"n\":3}]E0"},
    {"llama3 python_tag json", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false,
     "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}", "B0(f)A0[{\"x\": 1}]E0"},
    {"llama3 python_tag code", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false, "<|python_tag|>print(1+1)",
     "B0(python)A0[{\"code\":\"print(1+1)\"}]E0"},
    {"llama3 json that is no call", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false, "{\"answer\": 42}",
     "C[{\"answer\": 42}]"},
    {"llama3 text with braces", SRV_TOOLFMT_LLAMA3, NOR, AUTO, false, "The set {1, 2} is small.",
     "C[The set {1, 2} is small.]"},
    /* Mistral */
    {"mistral array", SRV_TOOLFMT_MISTRAL, NOR, AUTO, false,
     "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abc123def\"}, "
     "{\"name\": \"b\", \"arguments\": {}}]",
     "B0(a)A0[{\"x\": 1}]E0B1(b)A1[{}]E1"},
    {"mistral v11", SRV_TOOLFMT_MISTRAL, NOR, AUTO, false,
     "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]x1[ARGS]{}",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0B1(get_time)A1[{}]E1"},
    {"magistral thought", SRV_TOOLFMT_MISTRAL, THK, AUTO, false,
     "[THINK]hm[/THINK]Sure.", "R[hm]C[Sure.]"},
    /* gpt-oss harmony */
    {"harmony call", SRV_TOOLFMT_HARMONY, SRV_REASONING_HARMONY, AUTO, false,
     "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
     "R[Need the weather.]B0(get_weather)A0[{\"city\":\"Paris\"}]E0"},
    {"harmony final", SRV_TOOLFMT_HARMONY, SRV_REASONING_HARMONY, AUTO, false,
     "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
     "R[Think.]C[Hello!]"},
    {"harmony recipient first", SRV_TOOLFMT_HARMONY, SRV_REASONING_HARMONY, AUTO, false,
     " to=functions.f<|channel|>commentary json<|message|>{}<|call|>", "B0(f)A0[{}]E0"},
    {"harmony plain text", SRV_TOOLFMT_HARMONY, SRV_REASONING_HARMONY, AUTO, false, "Just text.",
     "C[Just text.]"},
    /* DeepSeek */
    {"deepseek r1", SRV_TOOLFMT_DEEPSEEK_R1, THK, AUTO, false,
     "<think>\nhmm\n</think>\n\n" DSB DCB "function" DSP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" DCE
     "\n" DCB "function" DSP "get_time\n```json\n{}\n```" DCE DSE,
     "R[hmm]B0(get_weather)A0[{\"city\": \"Paris\"}]E0B1(get_time)A1[{}]E1"},
    {"deepseek v3.1", SRV_TOOLFMT_DEEPSEEK_V3, THK, AUTO, false,
     "Sure." DSB DCB "get_weather" DSP "{\"city\": \"Paris\"}" DCE DSE,
     "C[Sure.]B0(get_weather)A0[{\"city\": \"Paris\"}]E0"},
    /* Granite */
    {"granite", SRV_TOOLFMT_GRANITE, THK, AUTO, false,
     "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"g\", \"arguments\": {}}]",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0B1(g)A1[{}]E1"},
    /* Command R */
    {"command r+", SRV_TOOLFMT_COMMAND_R, NOR, AUTO, false,
     "Action: ```json\n[\n    {\n        \"tool_name\": \"internet_search\",\n        \"parameters\": {\n"
     "            \"query\": \"x\"\n        }\n    }\n]\n```",
     "B0(internet_search)A0[{\n            \"query\": \"x\"\n        }]E0"},
    {"command r7b", SRV_TOOLFMT_COMMAND_R, THK, AUTO, false,
     "<|START_THINKING|>I will search.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", "
     "\"tool_name\": \"internet_search\", \"parameters\": {\"query\": \"x\"}}\n]<|END_ACTION|>",
     "R[I will search.]B0(internet_search)A0[{\"query\": \"x\"}]E0"},
    {"command r7b answer", SRV_TOOLFMT_COMMAND_R, THK, AUTO, false,
     "<|START_RESPONSE|>Hello.<|END_RESPONSE|>", "C[Hello.]"},
    /* Functionary */
    {"functionary v3.2", SRV_TOOLFMT_FUNCTIONARY, NOR, AUTO, false,
     "get_weather\n{\"city\": \"Paris\"}>>>get_time\n{}",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0B1(get_time)A1[{}]E1"},
    {"functionary v3.2 text", SRV_TOOLFMT_FUNCTIONARY, NOR, AUTO, false, "all\nHello there.",
     "C[Hello there.]"},
    {"functionary v3.1", SRV_TOOLFMT_FUNCTIONARY, NOR, AUTO, false,
     "<function=get_weather>{\"city\": \"Paris\"}</function>",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0"},
    /* generic and anvil's own */
    {"generic calls", SRV_TOOLFMT_GENERIC, NOR, AUTO, false,
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}",
     "B0(get_weather)A0[{\"city\":\"Paris\"}]E0"},
    {"generic response", SRV_TOOLFMT_GENERIC, NOR, AUTO, false, "{\"response\": \"Hi there\"}",
     "C[Hi there]"},
    {"json", SRV_TOOLFMT_JSON, NOR, SRV_TOOLS_REQUIRED, false,
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
     "B0(get_weather)A0[{\"city\": \"Paris\"}]E0"},
    {"json plain text", SRV_TOOLFMT_JSON, NOR, AUTO, false, "  Hello  \n", "C[  Hello  \n]"},
    /* malformed */
    {"name not a string", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "<tool_call>\n{\"name\": 42}</tool_call>", "C[<tool_call>\n{\"name\": 42}</tool_call>]"},
    {"not json", SRV_TOOLFMT_HERMES, NOR, AUTO, false, "Hi <tool_call>hello",
     "C[Hi <tool_call>hello]"},
    {"bad name", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "<tool_call>{\"name\": \"bad name!\", \"arguments\": {}}</tool_call>",
     "C[<tool_call>{\"name\": \"bad name!\", \"arguments\": {}}</tool_call>]"},
    {"held prefix released", SRV_TOOLFMT_HERMES, NOR, AUTO, false, "Hello <tool_",
     "C[Hello <tool_]"},
    {"broken arguments end the call", SRV_TOOLFMT_HERMES, NOR, AUTO, false,
     "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1,}}</tool_call> after",
     "B0(f)A0[{\"x\": 1,]E0C[}</tool_call> after]"},
    {"mistral no name", SRV_TOOLFMT_MISTRAL, NOR, AUTO, false, "[TOOL_CALLS] what now?",
     "C[[TOOL_CALLS] what now?]"},
    {"deepseek junk", SRV_TOOLFMT_DEEPSEEK_R1, NOR, AUTO, false, DSB "oops",
     "C[" DSB "oops]"},
    {"generic not json", SRV_TOOLFMT_GENERIC, NOR, AUTO, false, "{not json", "C[{not json]"},
};

static void test_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct tcase *c = &cases[i];
        char *whole = run(c->tf, c->rf, c->tools, c->thinking, c->text, 0, true);
        if (strcmp(whole, c->want))
            fail_msg("%s:\n got  %s\n want %s", c->what, whole, c->want);
        for (unsigned chunk = 1; chunk < 12; chunk++) {
            char *other = run(c->tf, c->rf, c->tools, c->thinking, c->text, chunk, true);
            if (strcmp(whole, other))
                fail_msg("%s, pieces %u:\n got  %s\n whole %s", c->what, chunk, other, whole);
            core_free(other);
        }
        core_free(whole);
    }
}

/* every call's arguments in the recorded cases are valid JSON objects */
static void test_args_valid(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct tcase *c = &cases[i];
        if (strstr(c->what, "broken")) continue;
        char *out = run(c->tf, c->rf, c->tools, c->thinking, c->text, 1, true);
        for (char *a = strstr(out, ")A"); a; a = strstr(a + 1, ")A")) {
            char *b = strchr(a, '[');
            char *e = b ? strstr(b, "]E") : NULL;
            assert_non_null(e);
            cJSON *j = cJSON_ParseWithLength(b + 1, (size_t)(e - b - 1));
            if (!cJSON_IsObject(j))
                fail_msg("%s: arguments not an object: %.*s", c->what, (int)(e - b - 1), b + 1);
            cJSON_Delete(j);
            a = e;
        }
        core_free(out);
    }
}

/* a cut output (max_tokens) ends an open call; nothing leaks or crashes
 * on every prefix of every case */
static void test_prefixes(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct tcase *c = &cases[i];
        size_t n = strlen(c->text);
        char *t = malloc(n + 1);
        for (size_t k = 0; k <= n; k++) {
            memcpy(t, c->text, k);
            t[k] = 0;
            char *a = run(c->tf, c->rf, c->tools, c->thinking, t, 0, false);
            char *b = run(c->tf, c->rf, c->tools, c->thinking, t, 1, false);
            if (strcmp(a, b)) fail_msg("%s, prefix %zu:\n whole %s\n bytes %s", c->what, k, a, b);
            core_free(a);
            core_free(b);
        }
        free(t);
    }
}

static void test_names(void **state) {
    (void)state;
    assert_string_equal(srv_toolfmt_name(SRV_TOOLFMT_HERMES), "hermes");
    assert_string_equal(srv_toolfmt_name(SRV_TOOLFMT_GENERIC), "generic");
    assert_string_equal(srv_toolfmt_name(SRV_TOOLFMT_COUNT), "unknown");
    assert_string_equal(srv_reasoningfmt_name(SRV_REASONING_HARMONY), "harmony");
    struct srv_outfmt f;
    srv_outfmt_detect(NULL, &f);
    assert_int_equal(f.tool_format, SRV_TOOLFMT_JSON);
    assert_int_equal(f.reasoning_format, SRV_REASONING_NONE);
    srv_outfmt_detect("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", &f);
    assert_int_equal(f.tool_format, SRV_TOOLFMT_JSON);
}

/* ---------------------------------------------------------------------- */
/* detection over llama.cpp's template corpus */

struct dcase {
    const char *file;
    enum srv_toolfmt tf;
    enum srv_reasoningfmt rf;
};

#define T(x) SRV_TOOLFMT_##x
#define R(x) SRV_REASONING_##x
static const struct dcase dcases[] = {
#include "unit_toolfmt_detect.h"
};

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s) return NULL;
    s[got] = 0;
    return s;
}

static void test_detect_corpus(void **state) {
    (void)state;
    char dir[1024];
    const char *env = getenv("ANVIL_TEMPLATES");
    if (env) snprintf(dir, sizeof(dir), "%s", env);
    else snprintf(dir, sizeof(dir), "%s/.cache/anvil/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates",
                  getenv("HOME") ? getenv("HOME") : "");
    DIR *d = opendir(dir);
    if (!d) {
        print_message("no template corpus at %s (scripts/fetch_llama_sdist.sh)\n", dir);
        skip();
    }
    bool print = getenv("ANVIL_TOOLFMT_PRINT") != NULL;
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 6, ".jinja")) continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        char *src = slurp(path);
        assert_non_null(src);
        struct srv_outfmt f;
        srv_outfmt_detect(src, &f);
        free(src);
        if (print) {
            printf("    {\"%s\", T(%s), R(%s)},\n", e->d_name, srv_toolfmt_name(f.tool_format),
                   srv_reasoningfmt_name(f.reasoning_format));
            continue;
        }
        const struct dcase *want = NULL;
        for (size_t i = 0; i < sizeof(dcases) / sizeof(dcases[0]); i++)
            if (!strcmp(dcases[i].file, e->d_name)) want = &dcases[i];
        if (!want) fail_msg("template %s is not in the table (tests/unit_toolfmt_detect.h)", e->d_name);
        if (f.tool_format != want->tf || f.reasoning_format != want->rf)
            fail_msg("%s: detected %s/%s, want %s/%s", e->d_name, srv_toolfmt_name(f.tool_format),
                     srv_reasoningfmt_name(f.reasoning_format), srv_toolfmt_name(want->tf),
                     srv_reasoningfmt_name(want->rf));
        seen++;
    }
    closedir(d);
    if (!print) assert_int_equal(seen, (int)(sizeof(dcases) / sizeof(dcases[0])));
}


/* Hermes: a call without its tags, as a bare object or in a ```json
 * fence, is a call when its name is one of the tools; whatever the split */
static void test_hermes_bare(void **state) {
    (void)state;
    static const struct {
        const char *text, *want;
    } c[] = {
        {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
         "B0(get_weather)A0[{\"city\": \"Paris\"}]E0"},
        {"```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```",
         "B0(get_time)A0[{}]E0"},
        {"```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```\nDone.",
         "B0(get_time)A0[{}]E0C[Done.]"},
        {"{\"name\": \"nope\", \"arguments\": {}}", "C[{\"name\": \"nope\", \"arguments\": {}}]"},
        {"```json\n{\"a\": 1}\n```", "C[```json\n{\"a\": 1}\n```]"},
        {"Text {\"name\": \"get_time\", \"arguments\": {}}",
         "C[Text {\"name\": \"get_time\", \"arguments\": {}}]"},
    };
    g_tools[0] = "get_weather";
    g_tools[1] = "get_time";
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        for (unsigned chunk = 0; chunk < 6; chunk++) {
            char *got = run(SRV_TOOLFMT_HERMES, NOR, AUTO, false, c[i].text, chunk, true);
            if (strcmp(got, c[i].want))
                fail_msg("case %zu chunk %u: got %s want %s", i, chunk, got, c[i].want);
            free(got);
        }
    }
    /* no tools given: never a call */
    g_tools[0] = g_tools[1] = NULL;
    char *got = run(SRV_TOOLFMT_HERMES, NOR, AUTO, false, c[0].text, 1, true);
    assert_string_equal(got, "C[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]");
    free(got);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_hermes_bare),
        cmocka_unit_test(test_args_valid),
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_detect_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
