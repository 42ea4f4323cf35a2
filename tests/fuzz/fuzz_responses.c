/*
 * fuzz_responses.c - libFuzzer harness: bytes -> the OpenAI Responses API's
 * request translation (srv_responses_translate, src/server/api_responses.c)
 * and its dialect.
 *
 * The model ($ANVIL_MODEL, else the default model) is loaded once (the chat
 * parser renders its template). A store holds one conversation under
 * "resp_fuzz", so inputs naming it as previous_response_id reach the merge.
 * Per input:
 *   - refused: a 400, 404 or 500 with a message and a valid OpenAI error
 *     body; nothing is left allocated (ASan's leak check);
 *   - translated: the chat object goes through srv_parse_request_json;
 *     refused there, the same error checks;
 *   - either way the same bytes, cut into parts (the first byte of each
 *     piece picks content, reasoning, a call's begin, arguments or end),
 *     drive the dialect of a translated context: every streamed event is
 *     valid JSON whose type the event line names, sequence numbers count
 *     from 0, and the whole response is valid JSON and UTF-8.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/api_responses.h"
#define FUZZ_NAME "fuzz_responses"
#include "fuzz_util.h"
#include "fuzz_srv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct anvil_model *g_model;
static struct srv_limits g_lim;
static struct resp_store *g_st;

static void unload(void) {
    resp_store_free(g_st);
    anvil_model_free(g_model);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_load_model();
    g_st = resp_store_new(4, 1 << 16, 1e9);
    resp_store_put(g_st, "resp_fuzz", "{}",
                   "[{\"role\":\"user\",\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":\"A\","
                   "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
                   "{\"name\":\"f\",\"arguments\":\"{}\"}}]}]",
                   0.0);
    atexit(unload);
    g_lim = (struct srv_limits){
        .model = g_model,
        .model_id = "SmolLM2-135M-Instruct.Q4_1",
        .n_vocab = anvil_model_n_vocab(g_model),
        .n_ctx = 512,
        .kv_tokens = 2048,
    };
    return 0;
}

static void check_err(const struct srv_err *e) {
    fuzz_check(e->status == 400 || e->status == 404 || e->status == 500, "error status");
    fuzz_check(e->message[0] != '\0', "error has a message");
    struct sbuf b;
    sb_init(&b);
    srv_dialect_responses.error(&b, e);
    fuzz_check(!b.oom, "error formatted");
    fuzz_check_error_json(b.p, b.len);
    sb_free(&b);
}

static void check_stream(const struct sbuf *b) {
    char *text = malloc(b->len + 1);
    fuzz_check(text != NULL, "oom");
    memcpy(text, b->p, b->len);
    text[b->len] = 0;
    long long want = 0;
    for (char *blk = text; *blk;) {
        char *end = strstr(blk, "\n\n");
        fuzz_check(end != NULL, "event ends with a blank line");
        *end = 0;
        fuzz_check(!strncmp(blk, "event: ", 7), "event line");
        char *nl = strchr(blk, '\n');
        fuzz_check(nl && !strncmp(nl + 1, "data: ", 6), "data line");
        *nl = 0;
        size_t n = strlen(nl + 7);
        fuzz_check(valid_utf8((const uint8_t *)nl + 7, n), "event is valid UTF-8");
        cJSON *d = cJSON_ParseWithLength(nl + 7, n);
        fuzz_check(d != NULL, "event is valid JSON");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "type"));
        fuzz_check(type && !strcmp(type, blk + 7), "event line names the type");
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(d, "sequence_number");
        fuzz_check(cJSON_IsNumber(seq) && (long long)seq->valuedouble == want++, "sequence");
        cJSON_Delete(d);
        blk = end + 2;
    }
    free(text);
}

/* The input's bytes as parts: pieces of up to 16 bytes, kind from the
 * first byte. */
static void drive(struct resp_ctx *x, const uint8_t *data, size_t size) {
    struct srv_resp_info ri = {.kind = SRV_KIND_CHAT, .id = "x", .model_id = g_lim.model_id};
    struct srv_gen_view v = {.ri = &ri, .state = x};
    struct sbuf b;
    sb_init(&b);
    srv_dialect_responses.stream_start(&b, &v);
    int calls = 0;
    for (size_t i = 0; i < size;) {
        size_t n = 1 + data[i] % 16;
        if (n > size - i) n = size - i;
        struct srv_part p = {.kind = (enum srv_part_kind)(data[i] % 5), .id = "call_x",
                             .name = "f", .text = (const char *)data + i, .n = n,
                             .call_index = calls};
        if (p.kind == SRV_PART_CALL_BEGIN) calls++;
        srv_dialect_responses.stream_part(&b, &v, 0, &p, NULL, 0);
        i += n;
    }
    struct srv_choice ch = {.content = (const char *)data, .n_content = size,
                            .finish = size & 1 ? "length" : "stop"};
    struct srv_usage u = {.n_prompt = 3, .n_gen = 2};
    if (size % 3 == 0) {
        struct srv_err e;
        srv_err_set(&e, 500, "server_error", NULL, NULL, "%.*s", (int)(size > 40 ? 40 : size),
                    (const char *)data);
        srv_dialect_responses.stream_error(&b, &v, &e);
    } else {
        srv_dialect_responses.stream_end(&b, &v, &ch, 1, &u);
    }
    fuzz_check(!b.oom, "stream formatted");
    check_stream(&b);
    sb_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cJSON *chat = NULL;
    struct resp_ctx *x = NULL;
    struct srv_err e;
    if (!srv_responses_translate(&g_lim, g_st, (const char *)data, size, 1.0, size, &chat, &x,
                                 &e)) {
        fuzz_check(chat == NULL && x == NULL, "nothing out on refusal");
        check_err(&e);
        /* a context of a plain body, driven by the same bytes */
        const char *plain = "{\"input\":\"x\",\"store\":false}";
        if (!srv_responses_translate(&g_lim, g_st, plain, strlen(plain), 1.0, 7, &chat, &x, &e))
            fuzz_check(false, "plain body translated");
        cJSON_Delete(chat);
        drive(x, data, size);
        resp_ctx_free(x);
        return 0;
    }
    struct srv_req req;
    if (!srv_parse_request_json(&g_lim, SRV_KIND_CHAT, chat, &req, &e)) check_err(&e);
    srv_req_free(&req);
    cJSON_Delete(chat);
    drive(x, data, size);
    resp_ctx_free(x);
    return 0;
}
