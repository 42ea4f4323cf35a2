/*
 * fuzz_request.c - libFuzzer harness: bytes -> the HTTP server's request
 * body parser (srv_parse_request, src/server/request.c), as a chat and as
 * a completion request, and as POST /infill's body (infill.c: with a
 * vocabulary without FIM tokens the body's checks run, then the 400).
 *
 * The model ($ANVIL_MODEL, else the Makefile's MODEL: fuzz_model_path) is
 * loaded once: the parser renders the chat template and tokenizes with it.
 * Per input and kind:
 *   - accepted: the request is within every limit the server relies on
 *     (prompt ids in the vocabulary, prompt + max_tokens within n_ctx, at
 *     most 16 non-empty stop strings of <= 256 bytes, top_logprobs <= 20,
 *     sampler parameters accepted by anvil_sampler_params_check);
 *   - refused: a 400, 404 (another model's name) or 500 with a message,
 *     and the OpenAI error body the server would send is valid JSON
 *     (cJSON) and valid UTF-8 with the four fields;
 *   - either way srv_req_free leaves nothing behind (ASan's leak check).
 * Structured output (response_format, grammar, regex, tools and
 * tool_choice) is compiled by the parser, so its errors are checked the
 * same way; an accepted tool_choice required or named carries a
 * constraint.
 * The same bytes are also the generated text (and, read as token ids and
 * floats, the logprobs) of every response shape (src/server/response.c):
 * each is valid JSON and valid UTF-8, and a valid UTF-8 text without NUL
 * comes back unchanged from the JSON string; the same holds for a tool
 * call's arguments, whole and streamed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/srv_int.h"
#define FUZZ_NAME "fuzz_request"
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


static void check_error_body(const struct srv_err *e) {
    fuzz_check(e->status == 400 || e->status == 404 || e->status == 500,
               "error status 400, 404 or 500");
    fuzz_check(e->message[0] != '\0', "error has a message");
    struct sbuf b;
    sb_init(&b);
    srv_fmt_error(&b, e);
    fuzz_check(!b.oom && b.len > 0, "error body formatted");
    fuzz_check_error_json(b.p, b.len);
    sb_free(&b);
}

static void check_request(const struct srv_req *r, enum srv_kind kind) {
    fuzz_check(r->kind == kind, "kind kept");
    fuzz_check(r->n_prompt > 0 && r->n_prompt < N_CTX, "prompt length within n_ctx");
    fuzz_check(r->prompt != NULL, "prompt ids present");
    for (int32_t i = 0; i < r->n_prompt; i++)
        fuzz_check(r->prompt[i] >= 0 && r->prompt[i] < g_lim.n_vocab,
                   "prompt id in the vocabulary");
    fuzz_check(r->max_tokens >= 1, "max_tokens >= 1");
    fuzz_check((int64_t)r->n_prompt + r->max_tokens <= N_CTX, "prompt + max_tokens within n_ctx");
    fuzz_check(r->n_stop >= 0 && r->n_stop <= SRV_MAX_STOP, "stop count");
    for (int32_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        fuzz_check(n > 0 && n <= SRV_MAX_STOP_LEN, "stop string length");
    }
    fuzz_check(r->top_logprobs >= 0 && r->top_logprobs <= ANVIL_MAX_TOP_LOGPROBS, "top_logprobs");
    fuzz_check(!r->include_usage || r->stream, "include_usage only with stream");
    fuzz_check((r->tools != SRV_TOOLS_REQUIRED && r->tools != SRV_TOOLS_NAMED) || r->constraint,
          "a required or named tool call is constrained");
    char msg[160];
    fuzz_check(anvil_sampler_params_check(&r->sampling, msg, sizeof(msg)) == ANVIL_OK,
          "sampler parameters accepted");
}

/* The generated text inside a parsed response, or NULL. */
static const char *response_text(const cJSON *root, enum srv_kind kind, bool chunk) {
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    if (kind == SRV_KIND_COMPLETION)
        return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ch, "text"));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(ch, chunk ? "delta" : "message");
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "content"));
}

static void fuzz_response(const char *text, size_t size) {
    /* tokens and logprobs from the same bytes: ids spread over [-2, n_vocab + 2) */
    enum { MAX_TOK = 16, K = 3 };
    struct srv_tok toks[MAX_TOK];
    anvil_token top_tok[MAX_TOK][K];
    float top_lp[MAX_TOK][K];
    int32_t n_toks = (int32_t)(size / 8 < MAX_TOK ? size / 8 : MAX_TOK);
    for (int32_t i = 0; i < n_toks; i++) {
        uint32_t v;
        float lp;
        memcpy(&v, text + 8 * i, 4);
        memcpy(&lp, text + 8 * i + 4, 4); /* any float: NaN and inf included */
        toks[i] = (struct srv_tok){
            .token = (anvil_token)(v % (uint32_t)(g_lim.n_vocab + 4)) - 2,
            .logprob = lp,
            .n_top = (int32_t)(v >> 30),
            .top_tokens = top_tok[i],
            .top_logprobs = top_lp[i],
        };
        for (int k = 0; k < K; k++) {
            top_tok[i][k] = (anvil_token)((v >> (8 * k)) % (uint32_t)g_lim.n_vocab);
            top_lp[i][k] = -lp * (float)k;
        }
    }
    bool plain = valid_utf8((const unsigned char *)text, size) && !memchr(text, 0, size);
    /* 8 shapes (kind x logprobs x chunk); parsing them all back costs more
     * than the rest of the harness (cJSON allocates per number under ASan),
     * so each input checks the plain chat response and one shape it picks */
    unsigned pick = size ? (unsigned char)text[size - 1] & 7u : 0;
    for (unsigned v = 0; v < 8; v++) {
        if (v != 0 && v != pick) continue;
        int k = (int)(v & 1), lp = (int)(v >> 1 & 1), chunk = (int)(v >> 2);
        enum srv_kind kind = k ? SRV_KIND_COMPLETION : SRV_KIND_CHAT;
        struct srv_resp_info ri = {
            .kind = kind,
            .id = "chatcmpl-fuzz",
            .created = 1,
            .model_id = g_lim.model_id,
            .model = g_model,
            .logprobs = lp != 0,
            .top_logprobs = lp ? K : 0,
        };
        struct sbuf b;
        sb_init(&b);
        if (chunk)
            srv_fmt_chunk(&b, &ri, text, size, lp ? toks : NULL, lp ? n_toks : 0,
                          kind == SRV_KIND_CHAT, "stop", 7);
        else
            srv_fmt_full(&b, &ri, text, size, toks, lp ? n_toks : 0, "length", 3,
                         n_toks, NULL);
        fuzz_check(!b.oom && b.len > 0, "response formatted");
        fuzz_check(valid_utf8((const unsigned char *)b.p, b.len), "response is valid UTF-8");
        const char *json = b.p;
        size_t len = b.len;
        if (chunk) {
            fuzz_check(len > 8 && !memcmp(json, "data: ", 6) &&
                      !memcmp(json + len - 2, "\n\n", 2),
                  "SSE framing");
            json += 6;
            len -= 8;
        }
        cJSON *root = cJSON_ParseWithLength(json, len);
        fuzz_check(root != NULL, "response is valid JSON");
        const char *got = response_text(root, kind, chunk);
        fuzz_check(got != NULL, "response holds the text");
        if (plain) fuzz_check(strlen(got) == size && !memcmp(got, text, size),
                         "valid UTF-8 text comes back unchanged");
        cJSON_Delete(root);
        sb_free(&b);
    }
}

/* The same bytes as a tool call's arguments: the whole message's
 * tool_calls[0].function and a streamed tool-call delta are valid JSON and
 * UTF-8, and valid UTF-8 arguments come back unchanged. */
static void fuzz_tool_call(const char *text, size_t size) {
    bool plain = valid_utf8((const unsigned char *)text, size) && !memchr(text, 0, size);
    struct srv_resp_info ri = {
        .kind = SRV_KIND_CHAT,
        .id = "chatcmpl-fuzz",
        .created = 1,
        .model_id = g_lim.model_id,
        .model = g_model,
    };
    const struct srv_tool_call call = {"call_fuzz", "get_weather", text, size};
    for (int chunk = 0; chunk < 2; chunk++) {
        struct sbuf b;
        sb_init(&b);
        if (chunk)
            srv_fmt_tool_chunk(&b, &ri, call.id, call.name, text, size, NULL, 0);
        else
            srv_fmt_full(&b, &ri, NULL, 0, NULL, 0, "tool_calls", 3, 1, &call);
        fuzz_check(!b.oom && b.len > 0, "tool call formatted");
        fuzz_check(valid_utf8((const unsigned char *)b.p, b.len), "tool call is valid UTF-8");
        const char *json = b.p;
        size_t len = b.len;
        if (chunk) {
            fuzz_check(len > 8 && !memcmp(json, "data: ", 6) && !memcmp(json + len - 2, "\n\n", 2),
                  "tool chunk SSE framing");
            json += 6;
            len -= 8;
        }
        cJSON *root = cJSON_ParseWithLength(json, len);
        fuzz_check(root != NULL, "tool call is valid JSON");
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(ch, chunk ? "delta" : "message");
        const cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), 0);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "name"));
        fuzz_check(name && !strcmp(name, call.name), "tool call holds the name");
        const char *got = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fn, "arguments"));
        fuzz_check(got != NULL, "tool call holds the arguments");
        if (plain) fuzz_check(strlen(got) == size && !memcmp(got, text, size),
                         "valid UTF-8 arguments come back unchanged");
        cJSON_Delete(root);
        sb_free(&b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    /* an exact-size copy, so ASan sees any read past the body */
    char *body = malloc(size ? size : 1);
    fuzz_check(body != NULL, "harness out of memory");
    if (size) memcpy(body, data, size);
    for (int k = 0; k < 3; k++) { /* chat, completion, POST /infill's body */
        enum srv_kind kind = k ? SRV_KIND_COMPLETION : SRV_KIND_CHAT;
        struct srv_req r;
        struct srv_err e;
        if (srv_parse_request_ex(&g_lim, kind, k == 2, body, size, &r, &e)) {
            check_request(&r, kind);
        } else {
            fuzz_check(r.prompt == NULL && r.n_stop == 0, "a refused request holds nothing");
            check_error_body(&e);
        }
        srv_req_free(&r);
    }
    fuzz_response(body, size);
    fuzz_tool_call(body, size);
    free(body);
    return 0;
}
