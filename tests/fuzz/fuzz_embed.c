/*
 * fuzz_embed.c - libFuzzer harness: bytes -> the embeddings and rerank
 * request parser (srv_emb_parse, src/server/api_embed.c) as a body of each
 * route (/v1/embeddings, /api/embed, /api/embeddings, /v1/rerank), and the
 * accepted requests through the answer formatter.
 *
 * The model ($ANVIL_MODEL, else the Makefile's MODEL) is loaded once for
 * its tokenizer and sizes; the targets pretend to pool: "emb" (mean),
 * "rr" (rank) and "chat" (the file's own pooling), so that every route
 * gets past the model check. Per input and route:
 *   - accepted: every input has 1..n_max tokens, all in the vocabulary;
 *     at most SRV_EMB_MAX_INPUTS inputs and SRV_EMB_MAX_TOKENS tokens;
 *     dimensions within n_embd, top_n within the documents; the answer
 *     (vectors of arbitrary floats, NaN included) is valid UTF-8 and one
 *     JSON object;
 *   - refused: 400, 404, 413 or 500 with a message, and the OpenAI error
 *     body is valid JSON;
 *   - srv_emb_req_free leaves nothing behind (ASan's leak check).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/api_embed.h"
#define FUZZ_NAME "fuzz_embed"
#include "fuzz_util.h"
#include "fuzz_srv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_MAX 64

static struct anvil_model *g_model;
static struct srv_emb_target g_t[3];
static struct srv_emb_targets g_ts;

static void unload(void) { anvil_model_free(g_model); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_load_model();
    atexit(unload);
    g_t[0] = (struct srv_emb_target){g_model, "emb", N_MAX, ANVIL_POOL_MEAN};
    g_t[1] = (struct srv_emb_target){g_model, "rr", N_MAX, ANVIL_POOL_RANK};
    g_t[2] = (struct srv_emb_target){g_model, "chat", N_MAX, anvil_model_pooling(g_model)};
    g_ts = (struct srv_emb_targets){.t = g_t, .n = 3, .def_embed = 0, .def_rerank = 1};
    return 0;
}

static void check_answer(const struct srv_emb_req *r) {
    int ne = anvil_model_n_embd(g_model);
    fuzz_check(r->n >= 1 && r->n <= SRV_EMB_MAX_INPUTS, "input count within the limit");
    fuzz_check(r->n_tokens <= SRV_EMB_MAX_TOKENS, "token total within the limit");
    fuzz_check(r->target >= 0 && r->target < 3, "a target was chosen");
    int64_t sum = 0;
    for (int32_t i = 0; i < r->n; i++) {
        fuzz_check(r->lens[i] >= 1 && r->lens[i] <= N_MAX, "input length within n_max");
        for (int32_t j = 0; j < r->lens[i]; j++)
            fuzz_check(r->seqs[i][j] >= 0 && r->seqs[i][j] < anvil_model_n_vocab(g_model),
                       "token id in the vocabulary");
        sum += r->lens[i];
    }
    fuzz_check(sum == r->n_tokens, "n_tokens counts the inputs");
    fuzz_check(r->dims >= 0 && r->dims <= ne, "dimensions within n_embd");
    fuzz_check(r->top_n >= 0 && r->top_n <= r->n, "top_n within the documents");
    bool rank = r->kind == SRV_EMB_RERANK;
    size_t nv = (size_t)r->n * (rank ? 1 : (size_t)ne);
    float *v = malloc(nv * sizeof(float));
    fuzz_check(v != NULL, "vectors allocated");
    for (size_t i = 0; i < nv; i++) v[i] = i % 7 == 3 ? NAN : (float)i * 0.5f - 3.0f;
    struct sbuf b;
    sb_init(&b);
    srv_emb_format(r, v, ne, &b);
    fuzz_check(!b.oom && b.len > 0, "answer formatted");
    fuzz_check(valid_utf8((const uint8_t *)b.p, b.len), "answer is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(b.p, b.len);
    fuzz_check(cJSON_IsObject(root), "answer is one JSON object");
    cJSON_Delete(root);
    sb_free(&b);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const enum srv_emb_kind kinds[] = {SRV_EMB_OPENAI, SRV_EMB_OLLAMA, SRV_EMB_OLLAMA_OLD,
                                              SRV_EMB_RERANK};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        struct srv_emb_req r;
        struct srv_err e;
        memset(&e, 0, sizeof(e));
        if (srv_emb_parse(&g_ts, kinds[k], (const char *)data, size, &r, &e)) {
            check_answer(&r);
        } else {
            fuzz_check(e.status == 400 || e.status == 404 || e.status == 413 || e.status == 500,
                       "error status 400, 404, 413 or 500");
            fuzz_check(e.message[0] != '\0', "error has a message");
            struct sbuf b;
            sb_init(&b);
            srv_fmt_error(&b, &e);
            fuzz_check(!b.oom, "error formatted");
            fuzz_check_error_json(b.p, b.len);
            sb_free(&b);
        }
        srv_emb_req_free(&r);
    }
    return 0;
}
