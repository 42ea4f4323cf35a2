/*
 * unit_api_responses.c - src/server/api_responses.c without a server:
 *   - the translation of Responses bodies into the chat-completions shape
 *     (instructions, input items, function_call / function_call_output,
 *     tools, tool_choice, text.format, max_output_tokens) against the
 *     expected JSON, and the chat parser accepting it;
 *   - refusals name the field in the Responses API's terms;
 *   - previous_response_id: the kept conversation goes first; unknown and
 *     expired ids are a 404 previous_response_not_found;
 *   - the dialect driven with parts (reasoning, content, two calls): the
 *     exact event sequence, sequence numbers, every event valid JSON, and
 *     the streamed final response byte-equal to the whole one made from
 *     the same choice; max_tokens -> incomplete; a stream error ends with
 *     error and response.failed.
 * Loads the default model's vocabulary (the chat template and tokenizer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <cjson/cJSON.h>

#include "server/api_responses.h"

#ifndef ANVIL_DEFAULT_MODEL
#define ANVIL_DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

static struct anvil_model *g_model;
static struct srv_limits g_lim;

static int setup(void **state) {
    (void)state;
    char err[256] = "";
    if (anvil_model_load_vocab(ANVIL_DEFAULT_MODEL, &g_model, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "cannot load %s: %s\n", ANVIL_DEFAULT_MODEL, err);
        return -1;
    }
    g_lim = (struct srv_limits){
        .model = g_model,
        .model_id = "m",
        .n_vocab = anvil_model_n_vocab(g_model),
        .n_ctx = 1024,
        .kv_tokens = 4096,
    };
    return 0;
}

static int teardown(void **state) {
    (void)state;
    anvil_model_free(g_model);
    return 0;
}

/* Translate body (must succeed); the chat JSON's text (malloc'd). */
static char *chat_of(const char *body, struct resp_store *st, struct resp_ctx **ctx) {
    cJSON *chat = NULL;
    struct resp_ctx *x = NULL;
    struct srv_err e;
    bool ok = srv_responses_translate(&g_lim, st, body, strlen(body), 0.0, 42, &chat, &x, &e);
    if (!ok) fprintf(stderr, "refused: %d %s: %s\n", e.status, e.param, e.message);
    assert_true(ok);
    /* the chat parser takes it */
    struct srv_req req;
    struct srv_err e2;
    bool parsed = srv_parse_request_json(&g_lim, SRV_KIND_CHAT, chat, &req, &e2);
    if (!parsed) fprintf(stderr, "chat parse: %s: %s\n", e2.param, e2.message);
    assert_true(parsed);
    srv_req_free(&req);
    char *txt = cJSON_PrintUnformatted(chat);
    cJSON_Delete(chat);
    if (ctx)
        *ctx = x;
    else
        resp_ctx_free(x);
    return txt;
}

static void test_translate(void **state) {
    (void)state;
    char *t = chat_of("{\"input\":\"Hi\",\"instructions\":\"Be brief.\",\"max_output_tokens\":7,"
                      "\"temperature\":0.5}", NULL, NULL);
    assert_string_equal(t, "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                           "{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":7,"
                           "\"temperature\":0.5}");
    free(t);
    t = chat_of("{\"input\":[{\"role\":\"developer\",\"content\":\"D\"},"
                "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                "\"text\":\"a\"},{\"type\":\"input_text\",\"text\":\"b\"}]},"
                "{\"type\":\"reasoning\",\"summary\":[]},"
                "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
                "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"},"
                "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"r1\"},"
                "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":"
                "\"input_text\",\"text\":\"r2\"}]}],"
                "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"F\","
                "\"parameters\":{\"type\":\"object\"},\"strict\":true}],"
                "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
                "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"s\",\"schema\":"
                "{\"type\":\"object\"},\"strict\":true}}}", NULL, NULL);
    assert_string_equal(
        t, "{\"messages\":[{\"role\":\"system\",\"content\":\"D\"},"
           "{\"role\":\"user\",\"content\":\"ab\"},"
           "{\"role\":\"assistant\",\"tool_calls\":["
           "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},"
           "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
           "\"{\\\"x\\\":1}\"}}]},"
           "{\"role\":\"tool\",\"content\":\"r1\",\"tool_call_id\":\"c1\"},"
           "{\"role\":\"tool\",\"content\":\"r2\",\"tool_call_id\":\"c2\"}],"
           "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"F\","
           "\"parameters\":{\"type\":\"object\"},\"strict\":true}}],"
           "\"tool_choice\":{\"function\":{\"name\":\"f\"},\"type\":\"function\"},"
           "\"response_format\":{\"json_schema\":{\"name\":\"s\",\"schema\":{\"type\":\"object\"},"
           "\"strict\":true},\"type\":\"json_schema\"}}");
    free(t);
}

static void expect_refusal(const char *body, int status, const char *param) {
    cJSON *chat = (cJSON *)1;
    struct resp_ctx *x = (struct resp_ctx *)1;
    struct srv_err e;
    assert_false(srv_responses_translate(&g_lim, NULL, body, strlen(body), 0.0, 1, &chat, &x, &e));
    assert_null(chat);
    assert_null(x);
    assert_int_equal(e.status, status);
    assert_string_equal(e.param, param);
    assert_true(e.message[0] != '\0');
}

static void test_refusals(void **state) {
    (void)state;
    expect_refusal("{}", 400, "input");
    expect_refusal("{\"input\":[]}", 400, "input");
    expect_refusal("{\"input\":[{\"role\":\"x\",\"content\":\"a\"}]}", 400, "input[0]");
    expect_refusal("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", 400,
                   "input[0].output");
    expect_refusal("{\"input\":\"a\",\"tools\":[{\"type\":\"file_search\"}]}", 400, "tools[0]");
    expect_refusal("{\"input\":\"a\",\"text\":{\"format\":{\"type\":\"x\"}}}", 400,
                   "text.format.type");
    expect_refusal("{\"input\":\"a\",\"max_output_tokens\":0}", 400, "max_output_tokens");
    expect_refusal("{\"input\":\"a\",\"previous_response_id\":\"resp_x\"}", 404,
                   "previous_response_id");
    expect_refusal("[1]", 400, "");
    expect_refusal("{\"input\":\"a\"} {}", 400, "");
}

static void test_previous(void **state) {
    (void)state;
    struct resp_store *st = resp_store_new(4, 1 << 16, 10.0);
    assert_true(resp_store_put(st, "resp_p", "{}",
                               "[{\"role\":\"user\",\"content\":\"Q\"},"
                               "{\"role\":\"assistant\",\"content\":\"A\"}]", 0.0));
    char *t = chat_of("{\"input\":\"Q2\",\"previous_response_id\":\"resp_p\",\"instructions\":\"I\"}",
                      st, NULL);
    assert_string_equal(t, "{\"messages\":[{\"role\":\"system\",\"content\":\"I\"},"
                           "{\"role\":\"user\",\"content\":\"Q\"},"
                           "{\"role\":\"assistant\",\"content\":\"A\"},"
                           "{\"role\":\"user\",\"content\":\"Q2\"}]}");
    free(t);
    /* expired */
    cJSON *chat;
    struct resp_ctx *x;
    struct srv_err e;
    const char *b = "{\"input\":\"Q2\",\"previous_response_id\":\"resp_p\"}";
    assert_false(srv_responses_translate(&g_lim, st, b, strlen(b), 11.0, 1, &chat, &x, &e));
    assert_int_equal(e.status, 404);
    assert_string_equal(e.code, "previous_response_not_found");
    resp_store_free(st);
}

/* The SSE events of b: their types in order (into types, space separated);
 * every data line parses, sequence numbers count from 0, the event line
 * names the data's type. Returns the last event's "response" printed. */
static char *check_stream(const struct sbuf *b, char *types, size_t cap) {
    types[0] = 0;
    char *text = strndup(b->p, b->len);
    char *last = NULL;
    long long want = 0;
    for (char *blk = text; blk && *blk;) {
        char *end = strstr(blk, "\n\n");
        assert_non_null(end);
        *end = 0;
        assert_true(!strncmp(blk, "event: ", 7));
        char *nl = strchr(blk, '\n');
        assert_non_null(nl);
        *nl = 0;
        const char *ev = blk + 7;
        assert_true(!strncmp(nl + 1, "data: ", 6));
        cJSON *d = cJSON_Parse(nl + 7);
        assert_non_null(d);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(d, "type")), ev);
        assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(d, "sequence_number")),
                         want++);
        strncat(types, ev, cap - strlen(types) - 2);
        strcat(types, " ");
        cJSON *r = cJSON_GetObjectItem(d, "response");
        if (r) {
            free(last);
            last = cJSON_PrintUnformatted(r);
        }
        cJSON_Delete(d);
        blk = end + 2;
    }
    free(text);
    return last;
}

static void part(struct sbuf *b, const struct srv_gen_view *v, enum srv_part_kind k,
                 const char *text, const char *id, const char *name) {
    struct srv_part p = {.kind = k, .id = id, .name = name, .text = text,
                         .n = text ? strlen(text) : 0};
    srv_dialect_responses.stream_part(b, v, 0, &p, NULL, 0);
}

static void run_case(const char *finish, const char *want_types, const char *want_status) {
    struct resp_ctx *xs, *xf;
    const char *body = "{\"input\":\"Hi\",\"store\":false,\"reasoning\":{\"summary\":\"auto\"}}";
    free(chat_of(body, NULL, &xs));
    free(chat_of(body, NULL, &xf)); /* same seed: same ids */
    struct srv_resp_info ri = {.kind = SRV_KIND_CHAT, .id = "x", .model_id = "m"};
    struct srv_gen_view vs = {.ri = &ri, .state = xs}, vf = {.ri = &ri, .state = xf};
    struct sbuf b;
    sb_init(&b);
    srv_dialect_responses.stream_start(&b, &vs);
    part(&b, &vs, SRV_PART_REASONING, "hm", NULL, NULL);
    part(&b, &vs, SRV_PART_REASONING, "m.", NULL, NULL);
    part(&b, &vs, SRV_PART_CONTENT, "Hel", NULL, NULL);
    part(&b, &vs, SRV_PART_CONTENT, "lo", NULL, NULL);
    part(&b, &vs, SRV_PART_CALL_BEGIN, NULL, "call_1", "f");
    part(&b, &vs, SRV_PART_CALL_ARGS, "{\"a\":", NULL, NULL);
    part(&b, &vs, SRV_PART_CALL_ARGS, "1}", NULL, NULL);
    part(&b, &vs, SRV_PART_CALL_END, NULL, NULL, NULL);
    part(&b, &vs, SRV_PART_CALL_BEGIN, NULL, "call_2", "g");
    part(&b, &vs, SRV_PART_CALL_ARGS, "{}", NULL, NULL);
    bool whole2 = strcmp(finish, "length") != 0;
    if (whole2) part(&b, &vs, SRV_PART_CALL_END, NULL, NULL, NULL);
    struct srv_call_out calls[2] = {
        {.id = "call_1", .name = "f", .args = "{\"a\":1}", .n_args = 7, .whole = true},
        {.id = "call_2", .name = "g", .args = "{}", .n_args = 2, .whole = whole2},
    };
    struct srv_choice ch = {.content = "Hello", .n_content = 5, .reasoning = "hmm.",
                            .n_reasoning = 4, .calls = calls, .n_calls = 2, .finish = finish};
    struct srv_usage u = {.n_prompt = 10, .n_cached = 3, .n_gen = 9};
    srv_dialect_responses.stream_end(&b, &vs, &ch, 1, &u);
    assert_false(b.oom);
    char types[2048];
    char *final_stream = check_stream(&b, types, sizeof(types));
    assert_string_equal(types, want_types);
    struct sbuf f;
    sb_init(&f);
    srv_dialect_responses.full(&f, &vf, &ch, 1, &u);
    char *ft = strndup(f.p, f.len);
    cJSON *fj = cJSON_Parse(ft);
    assert_non_null(fj);
    char *final_full = cJSON_PrintUnformatted(fj);
    assert_string_equal(final_stream, final_full);
    /* the shape */
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(fj, "status")), want_status);
    cJSON *out = cJSON_GetObjectItem(fj, "output");
    assert_int_equal(cJSON_GetArraySize(out), 4);
    const char *kinds[] = {"reasoning", "message", "function_call", "function_call"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(
            cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(out, i), "type")),
            kinds[i]);
    cJSON *rs = cJSON_GetArrayItem(out, 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(
                            cJSON_GetObjectItem(rs, "summary"), 0), "text")), "hmm.");
    cJSON *last = cJSON_GetArrayItem(out, 3);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(last, "status")),
                        whole2 ? "completed" : "incomplete");
    cJSON *usage = cJSON_GetObjectItem(fj, "usage");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(usage, "total_tokens")), 19);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(
                         cJSON_GetObjectItem(usage, "input_tokens_details"), "cached_tokens")), 3);
    cJSON_Delete(fj);
    free(ft);
    free(final_full);
    free(final_stream);
    sb_free(&f);
    sb_free(&b);
    srv_dialect_responses.free_state(xs);
    srv_dialect_responses.free_state(xf);
}

#define HEAD "response.created response.in_progress "
#define RS "response.output_item.added response.content_part.added " \
           "response.reasoning_text.delta response.reasoning_text.delta " \
           "response.reasoning_text.done response.content_part.done response.output_item.done "
#define MSG "response.output_item.added response.content_part.added " \
            "response.output_text.delta response.output_text.delta " \
            "response.output_text.done response.content_part.done response.output_item.done "
#define CALL1 "response.output_item.added response.function_call_arguments.delta " \
              "response.function_call_arguments.delta response.function_call_arguments.done " \
              "response.output_item.done "
#define CALL2 "response.output_item.added response.function_call_arguments.delta " \
              "response.function_call_arguments.done response.output_item.done "

static void test_stream_vs_full(void **state) {
    (void)state;
    run_case("tool_calls", HEAD RS MSG CALL1 CALL2 "response.completed ", "completed");
    run_case("length", HEAD RS MSG CALL1 CALL2 "response.incomplete ", "incomplete");
}

static void test_stream_error_and_empty(void **state) {
    (void)state;
    struct resp_ctx *x;
    free(chat_of("{\"input\":\"Hi\",\"store\":false}", NULL, &x));
    struct srv_resp_info ri = {.kind = SRV_KIND_CHAT, .id = "x", .model_id = "m"};
    struct srv_gen_view v = {.ri = &ri, .state = x};
    struct sbuf b;
    sb_init(&b);
    srv_dialect_responses.stream_start(&b, &v);
    part(&b, &v, SRV_PART_CONTENT, "a\"\n\x01", NULL, NULL);
    struct srv_err e;
    srv_err_set(&e, 500, "server_error", NULL, NULL, "engine \"failed\"");
    srv_dialect_responses.stream_error(&b, &v, &e);
    char types[1024];
    char *last = check_stream(&b, types, sizeof(types));
    assert_non_null(strstr(types, "error response.failed "));
    assert_non_null(strstr(last, "\"status\":\"failed\""));
    free(last);
    srv_dialect_responses.free_state(x);
    /* no output at all: one empty message */
    free(chat_of("{\"input\":\"Hi\",\"store\":false}", NULL, &x));
    v.state = x;
    sb_clear(&b);
    srv_dialect_responses.stream_start(&b, &v);
    struct srv_choice ch = {.content = "", .finish = "stop"};
    struct srv_usage u = {.n_prompt = 1, .n_gen = 1};
    srv_dialect_responses.stream_end(&b, &v, &ch, 1, &u);
    last = check_stream(&b, types, sizeof(types));
    assert_string_equal(types, HEAD "response.output_item.added response.content_part.added "
                               "response.output_text.done response.content_part.done "
                               "response.output_item.done response.completed ");
    free(last);
    srv_dialect_responses.free_state(x);
    sb_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_translate),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_previous),
        cmocka_unit_test(test_stream_vs_full),
        cmocka_unit_test(test_stream_error_and_empty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
