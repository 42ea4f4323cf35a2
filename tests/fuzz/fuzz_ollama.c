/*
 * fuzz_ollama.c - libFuzzer harness: bytes -> Ollama's request
 * translation (srv_ollama_parse, src/server/api_ollama.c) as a body of
 * /api/chat and of /api/generate, and the same bytes through the Ollama
 * dialect's answer shapes.
 *
 * The model ($ANVIL_MODEL, else the Makefile's MODEL) is loaded once: the
 * translation ends in srv_parse_request_json, which renders the chat
 * template and tokenizes. Per input and route:
 *   - accepted: the request is within every limit the server relies on
 *     (prompt ids in the vocabulary, prompt + max_tokens within n_ctx,
 *     stop strings, sampler parameters accepted by
 *     anvil_sampler_params_check), or a load-only call with no prompt;
 *   - refused: a 400, 404 or 500 with a message, and the body the server
 *     sends ({"error": "..."}) is valid UTF-8 and JSON;
 *   - srv_req_free leaves nothing behind (ASan's leak check).
 * The bytes are also the generated text and a tool call's arguments of
 * every answer shape, streamed and whole, chat and generate: each line of
 * a stream is one valid JSON object (no raw newline inside it: the
 * framing of application/x-ndjson), valid UTF-8, and the last one says
 * done; a whole answer is one valid JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/api_ollama.h"
#define FUZZ_NAME "fuzz_ollama"
#include "fuzz_util.h"
#include "fuzz_srv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_CTX 512

static struct anvil_model *g_model;
static struct srv_limits g_lim;

static void unload(void) { anvil_model_free(g_model); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_load_model();
    atexit(unload);
    g_lim = (struct srv_limits){
        .model = g_model,
        .model_id = "SmolLM2-135M-Instruct.Q4_1",
        .n_vocab = anvil_model_n_vocab(g_model),
        .n_ctx = N_CTX,
        .kv_tokens = 4 * N_CTX,
    };
    return 0;
}

/* p[0..n) is one JSON object with only a string "error". */
static void check_error_json(const char *p, size_t n) {
    fuzz_check(valid_utf8((const uint8_t *)p, n), "error body is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(p, n);
    fuzz_check(cJSON_IsObject(root), "error body is a JSON object");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    fuzz_check(cJSON_IsString(e) && e->valuestring[0], "error is a non-empty string");
    fuzz_check(cJSON_GetArraySize(root) == 1, "error is the only member");
    cJSON_Delete(root);
}

static void check_request(const struct srv_req *r) {
    fuzz_check(r->n_prompt > 0 && r->prompt != NULL, "prompt present");
    for (int32_t i = 0; i < r->n_prompt; i++)
        fuzz_check(r->prompt[i] >= 0 && r->prompt[i] < g_lim.n_vocab,
                   "prompt id in the vocabulary");
    fuzz_check(r->max_tokens >= 1, "max_tokens >= 1");
    fuzz_check((int64_t)r->n_prompt + r->max_tokens <= N_CTX, "prompt + max_tokens within n_ctx");
    fuzz_check(r->n_stop >= 0 && r->n_stop <= SRV_MAX_STOP, "stop count");
    fuzz_check(r->top_logprobs >= 0 && r->top_logprobs <= ANVIL_MAX_TOP_LOGPROBS, "top_logprobs");
    char msg[160];
    fuzz_check(anvil_sampler_params_check(&r->sampling, msg, sizeof(msg)) == ANVIL_OK,
               "sampler parameters accepted");
}

static void fuzz_parse(const char *body, size_t size, bool generate) {
    struct srv_req r;
    struct srv_ollama_req o;
    struct srv_err e;
    if (srv_ollama_parse(&g_lim, generate, body, size, &r, &o, &e)) {
        if (o.load_only)
            fuzz_check(r.prompt == NULL && r.n_prompt == 0, "a load-only call has no prompt");
        else
            check_request(&r);
        fuzz_check(o.model[0] != '\0', "the model's name is kept");
    } else {
        fuzz_check(e.status == 400 || e.status == 404 || e.status == 500,
                   "error status 400, 404 or 500");
        fuzz_check(e.message[0] != '\0', "error has a message");
        struct sbuf b;
        sb_init(&b);
        srv_dialect_ollama_chat.error(&b, &e);
        fuzz_check(!b.oom && b.len > 0, "error body formatted");
        check_error_json(b.p, b.len);
        sb_free(&b);
    }
    srv_req_free(&r);
}

/* Every line of a stream is a JSON object; the last one says done. */
static void check_stream(const struct sbuf *b) {
    fuzz_check(!b->oom && b->len > 0 && b->p[b->len - 1] == '\n', "a stream ends a line");
    fuzz_check(valid_utf8((const uint8_t *)b->p, b->len), "stream is valid UTF-8");
    size_t at = 0;
    bool done = false;
    while (at < b->len) {
        const char *nl = memchr(b->p + at, '\n', b->len - at);
        size_t n = (size_t)(nl - (b->p + at));
        cJSON *line = cJSON_ParseWithLength(b->p + at, n);
        fuzz_check(cJSON_IsObject(line), "each line is one JSON object");
        done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(line, "done"));
        cJSON_Delete(line);
        at += n + 1;
    }
    fuzz_check(done, "the last line says done");
}

static void fuzz_answers(const char *text, size_t size) {
    struct srv_resp_info ri = {
        .kind = SRV_KIND_CHAT,
        .id = "chatcmpl-fuzz",
        .created = 1,
        .model_id = g_lim.model_id,
        .model = g_model,
    };
    struct srv_req req;
    memset(&req, 0, sizeof(req));
    struct srv_call_out call = {.id = "call_fuzz", .name = "get_weather", .whole = true};
    call.args = malloc(size + 1);
    if (!call.args) return;
    memcpy(call.args, text, size);
    call.args[size] = '\0';
    call.n_args = size;
    struct srv_usage u = {.n_prompt = 3, .n_gen = 2};
    for (int g = 0; g < 2; g++) {
        const struct srv_dialect *d = g ? &srv_dialect_ollama_generate : &srv_dialect_ollama_chat;
        struct srv_choice ch = {
            .content = text, .n_content = size, .reasoning = text, .n_reasoning = size / 2,
            .calls = &call, .n_calls = g ? 0 : 1, .finish = "stop", .n_gen = 2,
        };
        /* streamed: content, thinking, a call in pieces, the end */
        void *st = d->make_state();
        fuzz_check(st != NULL, "state made");
        struct srv_gen_view v = {.ri = &ri, .req = &req, .state = st, .n_choices = 1};
        struct sbuf b;
        sb_init(&b);
        d->stream_start(&b, &v);
        struct srv_part p = {.kind = SRV_PART_CONTENT, .text = text, .n = size};
        d->stream_part(&b, &v, 0, &p, NULL, 0);
        p = (struct srv_part){.kind = SRV_PART_REASONING, .text = text, .n = size / 2};
        d->stream_part(&b, &v, 0, &p, NULL, 0);
        p = (struct srv_part){.kind = SRV_PART_CALL_BEGIN, .id = "call_fuzz", .name = "f"};
        d->stream_part(&b, &v, 0, &p, NULL, 0);
        p = (struct srv_part){.kind = SRV_PART_CALL_ARGS, .text = text, .n = size / 3};
        d->stream_part(&b, &v, 0, &p, NULL, 0);
        p = (struct srv_part){.kind = SRV_PART_CALL_ARGS, .text = text + size / 3,
                              .n = size - size / 3};
        d->stream_part(&b, &v, 0, &p, NULL, 0);
        if (size & 1) { /* ended, or left open for stream_end to flush */
            p = (struct srv_part){.kind = SRV_PART_CALL_END};
            d->stream_part(&b, &v, 0, &p, NULL, 0);
        }
        d->stream_end(&b, &v, &ch, 1, &u);
        check_stream(&b);
        sb_free(&b);
        /* whole */
        sb_init(&b);
        d->full(&b, &v, &ch, 1, &u);
        fuzz_check(!b.oom && valid_utf8((const uint8_t *)b.p, b.len), "whole answer UTF-8");
        cJSON *root = cJSON_ParseWithLength(b.p, b.len);
        fuzz_check(cJSON_IsObject(root), "whole answer is a JSON object");
        cJSON_Delete(root);
        sb_free(&b);
        d->free_state(st);
    }
    free(call.args);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data;
    fuzz_parse(body, size, false);
    fuzz_parse(body, size, true);
    fuzz_answers(body, size);
    return 0;
}
