/*
 * fuzz_anthropic.c - libFuzzer harness: bytes -> the Anthropic Messages
 * API's body parser (srv_anthropic_parse, src/server/api_anthropic.c), as
 * a /v1/messages and as a /v1/messages/count_tokens body, and the same
 * bytes through the Anthropic dialect's answers.
 *
 * The model ($ANVIL_MODEL, else the Makefile's MODEL: fuzz_model_path) is
 * loaded once: the translated request renders the chat template.
 *   - accepted: the request is within every limit the server relies on
 *     (prompt ids in the vocabulary, prompt + max_tokens within n_ctx,
 *     stop strings bounded; a request with stop strings keeps its token
 *     records, which the stop_reason needs);
 *   - refused: a 400, 404 or 500 with a message, and the body the server
 *     sends is Anthropic's error shape, valid JSON and UTF-8;
 *   - srv_req_free leaves nothing behind (ASan's leak check).
 * As generated output, the bytes become content, thinking and tool-call
 * parts of a stream (every event "event: T\ndata: {JSON with type T}\n\n"
 * and valid UTF-8) and of a whole message (valid JSON whose text and
 * thinking come back unchanged when the bytes are valid UTF-8, and whose
 * tool_use input is always an object); the same bytes read as token ids
 * are replayed by srv_anthropic_stop_index, which stays in range.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/api_anthropic.h"
#define FUZZ_NAME "fuzz_anthropic"
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

/* p[0..n) is {"type": "error", "error": {"type": string, "message": string}}. */
static void check_anth_error_json(const char *p, size_t n) {
    fuzz_check(valid_utf8((const uint8_t *)p, n), "error body is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(p, n);
    fuzz_check(root != NULL, "error body is valid JSON");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "type");
    fuzz_check(cJSON_IsString(t) && !strcmp(t->valuestring, "error"), "type error");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    fuzz_check(cJSON_IsObject(e), "error object");
    fuzz_check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")), "error type");
    fuzz_check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")), "error message");
    cJSON_Delete(root);
}

static void fuzz_parse(const char *body, size_t size, bool count_only) {
    struct srv_req r;
    struct srv_err e;
    struct srv_anth_opts o;
    if (srv_anthropic_parse(&g_lim, body, size, count_only, &r, &o, &e)) {
        fuzz_check(r.n_prompt > 0 && r.n_prompt < N_CTX, "prompt length within n_ctx");
        for (int32_t i = 0; i < r.n_prompt; i++)
            fuzz_check(r.prompt[i] >= 0 && r.prompt[i] < g_lim.n_vocab, "prompt id in vocabulary");
        fuzz_check(r.max_tokens >= 1, "max_tokens >= 1");
        fuzz_check((int64_t)r.n_prompt + r.max_tokens <= N_CTX, "prompt + max_tokens fit");
        if (!count_only) {
            fuzz_check(o.max_tokens >= 1 && r.max_tokens <= o.max_tokens, "max_tokens as asked");
            fuzz_check(r.n_stop == 0 || r.logprobs, "stop strings keep the token records");
        }
        fuzz_check(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP, "stop count");
        char msg[160];
        fuzz_check(anvil_sampler_params_check(&r.sampling, msg, sizeof(msg)) == ANVIL_OK,
                   "sampler parameters accepted");
    } else {
        fuzz_check(e.status == 400 || e.status == 404 || e.status == 500, "error status");
        fuzz_check(e.message[0] != '\0', "error has a message");
        struct sbuf b;
        sb_init(&b);
        srv_dialect_anthropic.error(&b, &e);
        fuzz_check(!b.oom && b.len > 0, "error body formatted");
        check_anth_error_json(b.p, b.len);
        sb_free(&b);
    }
    srv_req_free(&r);
}

/* Every event of an Anthropic stream is framed and typed. */
static void check_stream(const char *p, size_t n) {
    fuzz_check(valid_utf8((const uint8_t *)p, n), "stream is valid UTF-8");
    size_t at = 0;
    int events = 0;
    while (at < n) {
        const char *ev = p + at;
        const char *end = memmem(ev, n - at, "\n\n", 2);
        fuzz_check(end != NULL, "event ends with a blank line");
        fuzz_check(!strncmp(ev, "event: ", 7), "event line");
        const char *nl = memchr(ev, '\n', (size_t)(end - ev));
        fuzz_check(nl && !strncmp(nl + 1, "data: ", 6), "data line");
        const char *data = nl + 7;
        cJSON *j = cJSON_ParseWithLength(data, (size_t)(end - data));
        fuzz_check(j != NULL, "event data is JSON");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
        fuzz_check(cJSON_IsString(t) && strlen(t->valuestring) == (size_t)(nl - ev - 7) &&
                       !strncmp(t->valuestring, ev + 7, (size_t)(nl - ev - 7)),
                   "event name is the data's type");
        cJSON_Delete(j);
        at = (size_t)(end - p) + 2;
        events++;
    }
    fuzz_check(events >= 4, "message_start, ping, message_delta, message_stop at least");
}

static void fuzz_answer(const char *text, size_t size) {
    enum { MAX_TOK = 32 };
    struct srv_tok toks[MAX_TOK];
    int32_t n_toks = (int32_t)(size / 4 < MAX_TOK ? size / 4 : MAX_TOK);
    for (int32_t i = 0; i < n_toks; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        toks[i] = (struct srv_tok){.token = (anvil_token)(v % (uint32_t)g_lim.n_vocab)};
    }
    char s0[] = "e", s1[] = " the", s2[] = "\n";
    struct srv_req req = {.kind = SRV_KIND_CHAT, .n_prompt = 5, .max_tokens = 9, .n_stop = 3};
    req.stop[0] = s0;
    req.stop[1] = s1;
    req.stop[2] = s2;
    int si = srv_anthropic_stop_index(g_model, toks, n_toks, req.stop, req.n_stop);
    fuzz_check(si >= -1 && si < 3, "stop index in range");
    struct srv_resp_info ri = {.kind = SRV_KIND_CHAT, .id = "chatcmpl-fuzz", .created = 1,
                               .model_id = g_lim.model_id, .model = g_model};
    bool plain = valid_utf8((const unsigned char *)text, size) && !memchr(text, 0, size);
    for (int d = 0; d < 2; d++) {
        const struct srv_dialect *dl = d ? &srv_dialect_anthropic_thinking : &srv_dialect_anthropic;
        struct srv_gen_view v = {.ri = &ri, .req = &req, .state = dl->make_state()};
        struct sbuf b;
        sb_init(&b);
        dl->stream_start(&b, &v);
        /* the bytes cut into parts of every kind */
        size_t at = 0;
        int call = 0;
        while (at < size) {
            unsigned char c = (unsigned char)text[at];
            size_t n = 1 + c % 7;
            if (n > size - at) n = size - at;
            struct srv_part p = {.kind = (enum srv_part_kind)(c % 5), .call_index = call,
                                 .id = "call_fuzz", .name = "get_weather", .text = text + at,
                                 .n = n};
            if (p.kind == SRV_PART_CALL_END) call++;
            dl->stream_part(&b, &v, 0, &p, toks, n_toks > 2 ? 2 : n_toks);
            at += n;
        }
        char *args = malloc(size + 1);
        fuzz_check(args != NULL, "alloc");
        memcpy(args, text, size);
        args[size] = '\0';
        struct srv_call_out calls[1] = {{.args = args, .n_args = size, .whole = true}};
        snprintf(calls[0].id, sizeof(calls[0].id), "call_fuzz");
        snprintf(calls[0].name, sizeof(calls[0].name), "get_weather");
        struct srv_choice ch = {.content = text, .n_content = size, .reasoning = text,
                                .n_reasoning = size, .calls = calls, .n_calls = 1,
                                .toks = toks, .n_toks = n_toks,
                                .finish = size & 1 ? "stop" : "length",
                                .engine_finish = size & 1 ? ANVIL_FINISH_STOP : ANVIL_FINISH_LENGTH,
                                .n_gen = n_toks};
        struct srv_usage u = {.n_prompt = 5, .n_cached = 2, .n_gen = n_toks};
        dl->stream_end(&b, &v, &ch, 1, &u);
        fuzz_check(!b.oom, "stream formatted");
        check_stream(b.p, b.len);
        sb_clear(&b);
        dl->full(&b, &v, &ch, 1, &u);
        fuzz_check(!b.oom && valid_utf8((const uint8_t *)b.p, b.len), "message is valid UTF-8");
        cJSON *m = cJSON_ParseWithLength(b.p, b.len);
        fuzz_check(m != NULL, "message is valid JSON");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        fuzz_check(cJSON_IsArray(content), "content is a list");
        for (const cJSON *blk = content->child; blk; blk = blk->next) {
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(blk, "type"));
            fuzz_check(t != NULL, "block type");
            if (!strcmp(t, "tool_use"))
                fuzz_check(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(blk, "input")),
                           "tool_use input is an object");
            const char *body = !strcmp(t, "text") ? "text" : !strcmp(t, "thinking") ? "thinking"
                                                                                   : NULL;
            if (body && plain) {
                const char *got = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(blk, body));
                fuzz_check(got && strlen(got) == size && !memcmp(got, text, size),
                           "valid UTF-8 text comes back unchanged");
            }
        }
        cJSON_Delete(m);
        sb_free(&b);
        free(args);
        dl->free_state(v.state);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *body = (const char *)data;
    fuzz_parse(body, size, false);
    fuzz_parse(body, size, true);
    fuzz_answer(body, size);
    return 0;
}
