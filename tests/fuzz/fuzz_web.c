/*
 * fuzz_web.c - libFuzzer harness for the parsers of src/server/tokenize.c and
 * src/server/webui.c: bytes -> the body of POST /tokenize and POST
 * /detokenize, and the same bytes as a request path (URL unescaping and
 * the asset lookup).
 *
 * The model ($ANVIL_MODEL, else the Makefile's MODEL: fuzz_model_path) is
 * loaded once. Per input:
 *   - srv_tokenize / srv_detokenize: accepted -> the answer is valid JSON
 *     and valid UTF-8 of the documented shape (ids in the vocabulary;
 *     pieces strings or byte arrays; at most SRV_MAX_TOK_IO tokens);
 *     refused -> a 400/500 with a message whose OpenAI error body is valid
 *     JSON; and for /tokenize of a valid body, detokenizing its ids gives
 *     the text back when the text is valid UTF-8 without NUL made of bytes
 *     the vocabulary has a token for (parsed specials included). SmolLM2's
 *     byte-level vocabulary has no token for some control bytes (0x14 is
 *     one): they vanish, in llama.cpp as in anvil;
 *   - srv_url_unescape: agrees with a decoder written here the plain way
 *     (never longer, no NUL produced, "%00" kept literal);
 *   - srv_asset_find: finds something only for "/" or an asset's exact
 *     path, and never for a path holding "..", "%" or a second "/".
 * ASan's leak check covers every path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/srv_web.h"
#define FUZZ_NAME "fuzz_web"
#include "fuzz_util.h"
#include "fuzz_srv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct anvil_model *g_model;
static struct srv_info g_info;
static bool g_byte_ok[256]; /* the vocabulary has a one-byte token for it */

static void unload(void) { anvil_model_free(g_model); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_load_model();
    atexit(unload);
    for (anvil_token t = 0; t < anvil_model_n_vocab(g_model); t++) {
        char b[8];
        if (anvil_token_to_piece(g_model, t, b, sizeof(b), false) == 1)
            g_byte_ok[(unsigned char)b[0]] = true;
    }
    g_info = (struct srv_info){
        .model = g_model,
        .model_id = "SmolLM2-135M-Instruct.Q4_1",
        .replica_id = "fuzz",
        .n_ctx = 512,
        .parallel = 4,
        .webui = true,
        .created = 1,
    };
    return 0;
}

static void check_error(const struct srv_err *e) {
    fuzz_check(e->status == 400 || e->status == 500, "error status 400 or 500");
    fuzz_check(e->message[0] != '\0', "error has a message");
    struct sbuf b;
    sb_init(&b);
    srv_fmt_error(&b, e);
    fuzz_check(!b.oom, "error body formatted");
    fuzz_check_error_json(b.p, b.len);
    sb_free(&b);
}

/* Parse an answer: valid UTF-8 and JSON object. Caller frees. */
static cJSON *parse_answer(const struct sbuf *b) {
    fuzz_check(!b->oom && b->len > 0, "answer formatted");
    fuzz_check(valid_utf8((const unsigned char *)b->p, b->len), "answer is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(b->p, b->len);
    fuzz_check(root && cJSON_IsObject(root), "answer is a JSON object");
    return root;
}

static void fuzz_tokenize(const char *body, size_t size) {
    struct sbuf b;
    struct srv_err e;
    sb_init(&b);
    if (!srv_tokenize(&g_info, body, size, &b, &e)) {
        check_error(&e);
        sb_free(&b);
        return;
    }
    cJSON *root = parse_answer(&b);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    fuzz_check(cJSON_IsArray(toks), "tokens is an array");
    int n = cJSON_GetArraySize(toks);
    fuzz_check(n <= SRV_MAX_TOK_IO, "at most SRV_MAX_TOK_IO tokens");
    int n_vocab = anvil_model_n_vocab(g_model);
    /* the ids, for the round trip below */
    struct sbuf ids;
    sb_init(&ids);
    sb_puts(&ids, "{\"tokens\":[");
    int i = 0;
    for (const cJSON *t = toks->child; t; t = t->next, i++) {
        const cJSON *id = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "id") : t;
        fuzz_check(cJSON_IsNumber(id) && id->valuedouble >= 0 && id->valuedouble < n_vocab,
              "token id in the vocabulary");
        if (cJSON_IsObject(t)) {
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(t, "piece");
            fuzz_check(cJSON_IsString(p) || cJSON_IsArray(p), "piece is a string or bytes");
            for (const cJSON *x = cJSON_IsArray(p) ? p->child : NULL; x; x = x->next)
                fuzz_check(cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= 255,
                      "piece byte in [0, 255]");
        }
        sb_printf(&ids, "%s%d", i ? "," : "", (int)id->valuedouble);
    }
    sb_puts(&ids, "]}");

    /* round trip: the text comes back (cJSON gives the text up to a NUL),
     * unless add_special asked for a BOS in front */
    cJSON *req = cJSON_ParseWithLength(body, size);
    const char *text = req ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "content"))
                           : NULL;
    bool bos = req && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "add_special"));
    bool coded = text != NULL;
    for (const unsigned char *q = (const unsigned char *)text; coded && *q; q++) coded = g_byte_ok[*q];
    if (coded && !bos && valid_utf8((const unsigned char *)text, strlen(text))) {
        struct sbuf back;
        struct srv_err e2;
        sb_init(&back);
        fuzz_check(srv_detokenize(&g_info, ids.p, ids.len, &back, &e2), "detokenize its own ids");
        cJSON *r2 = parse_answer(&back);
        const char *got = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r2, "content"));
        fuzz_check(got && !strcmp(got, text), "detokenize(tokenize(text)) == text");
        cJSON_Delete(r2);
        sb_free(&back);
    }
    cJSON_Delete(req);
    cJSON_Delete(root);
    sb_free(&ids);
    sb_free(&b);
}

static void fuzz_detokenize(const char *body, size_t size) {
    struct sbuf b;
    struct srv_err e;
    sb_init(&b);
    if (!srv_detokenize(&g_info, body, size, &b, &e)) {
        check_error(&e);
        sb_free(&b);
        return;
    }
    cJSON *root = parse_answer(&b);
    fuzz_check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(root, "content")), "content string");
    cJSON_Delete(root);
    sb_free(&b);
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void fuzz_path(const char *data, size_t size) {
    /* the path as MHD hands it over: NUL-terminated, no NUL inside */
    size_t n = strnlen(data, size);
    char *s = malloc(n + 1), *want = malloc(n + 1);
    fuzz_check(s && want, "harness out of memory");
    memcpy(s, data, n);
    s[n] = '\0';
    size_t w = 0;
    for (size_t r = 0; r < n; r++) { /* the plain decoder */
        /* s is NUL-terminated: a '%' at the end meets the NUL, not hex */
        int v = s[r] == '%' && hexv(s[r + 1]) >= 0 && hexv(s[r + 2]) >= 0
                    ? hexv(s[r + 1]) * 16 + hexv(s[r + 2])
                    : -1;
        if (v > 0) {
            want[w++] = (char)v;
            r += 2;
        } else {
            want[w++] = s[r];
        }
    }
    want[w] = '\0';
    size_t got = srv_url_unescape(NULL, NULL, s);
    fuzz_check(got == w && got <= n && strlen(s) == got && !memcmp(s, want, w + 1),
          "unescape agrees with the plain decoder");

    const struct srv_asset *a = srv_asset_find(s);
    if (a) {
        fuzz_check(!strcmp(s, "/") || !strcmp(s, a->path), "an asset only at its exact path");
        fuzz_check(!strstr(s, "..") && !strchr(s, '%') && !strchr(s + 1, '/'),
              "no dot-dot, escape or second slash reaches an asset");
        fuzz_check(a->len > 0 && a->data[a->len] == '\0', "asset bytes present");
    }
    free(s);
    free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    /* an exact-size copy, so ASan sees any read past the body */
    char *body = malloc(size ? size : 1);
    fuzz_check(body != NULL, "harness out of memory");
    if (size) memcpy(body, data, size);
    fuzz_tokenize(body, size);
    fuzz_detokenize(body, size);
    fuzz_path(body, size);
    free(body);
    return 0;
}
