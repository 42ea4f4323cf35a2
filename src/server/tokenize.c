/*
 * tokenize.c - POST /tokenize and POST /detokenize, the tokenizer
 * endpoints llama-server users expect next to the OpenAI API.
 *
 * Request rules are those of every route (fields.c): a JSON null is an
 * absent field, no type coercion, unknown fields are a 400 naming the
 * field, every error has OpenAI's shape. Shapes follow llama-server
 * (tools/server/README.md there): /tokenize's "with_pieces" gives
 * {"id", "piece"} objects, a piece that is not valid UTF-8 on its own
 * (half a character of a byte-level token) comes as an array of byte
 * values; "parse_special" defaults to true and "add_special" to false, as
 * there.
 *
 * What it does not do: anything with the engine. These are pure functions
 * of the model, safe on any HTTP thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_web.h"

// ----------------------------------------------------------------------------
// the body

/* Parse the body as a JSON object whose keys are all in `known`. */
static cJSON *parse_object(const char *body, size_t len, const char *const *known, size_t n_known,
                           struct srv_err *e) {
    cJSON *root = srv_json_parse(body, len, NULL);
    if (!root) {
        srv_bad(e, NULL, "We could not parse the JSON body of your request. (HINT: This likely "
                "means you aren't using your HTTP library correctly.)");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        srv_bad(e, NULL, "The request body must be a JSON object, got %s", srv_type_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    for (const cJSON *f = root->child; f; f = f->next) {
        bool ok = false;
        for (size_t i = 0; i < n_known && !ok; i++) ok = f->string && !strcmp(f->string, known[i]);
        if (!ok) {
            srv_err_set(e, 400, "invalid_request_error", NULL, NULL,
                        "Unrecognized request argument supplied: %.100s",
                        f->string ? f->string : "");
            /* param names the field only when it fits, untruncated */
            if (f->string && strlen(f->string) < sizeof(e->param))
                snprintf(e->param, sizeof(e->param), "%s", f->string);
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

// ----------------------------------------------------------------------------
// POST /tokenize

bool srv_tokenize(const struct srv_info *in, const char *body, size_t len, struct sbuf *out,
                  struct srv_err *err) {
    static const char *const known[] = {"content", "add_special", "parse_special",
                                        "with_pieces"};
    cJSON *root = parse_object(body, len, known, sizeof(known) / sizeof(known[0]), err);
    if (!root) return false;
    bool add_special = false, parse_special = true, with_pieces = false, ok = false;
    anvil_token *toks = NULL;
    struct sbuf piece;
    sb_init(&piece);
    const cJSON *c = srv_field(root, "content");
    if (!c) {
        srv_bad(err, "content", "'content' is required");
        goto done;
    }
    if (!cJSON_IsString(c)) {
        srv_bad(err, "content", "'content' must be a string, got %s", srv_type_name(c));
        goto done;
    }
    if (!srv_get_bool(root, "add_special", &add_special, NULL, err) ||
        !srv_get_bool(root, "parse_special", &parse_special, NULL, err) ||
        !srv_get_bool(root, "with_pieces", &with_pieces, NULL, err))
        goto done;

    const char *text = c->valuestring;
    size_t n_text = strlen(text);
    /* a first guess that fits most texts (about 4 bytes a token), then the
     * exact count the tokenizer asks for */
    int32_t cap = (int32_t)(n_text / 2 + 16 < SRV_MAX_TOK_IO ? n_text / 2 + 16 : SRV_MAX_TOK_IO);
    toks = malloc((size_t)cap * sizeof(*toks));
    if (!toks) {
        srv_oom(err);
        goto done;
    }
    int32_t n = anvil_tokenize(in->model, text, n_text, toks, cap, add_special, parse_special);
    if (n < 0 && n != INT32_MIN && -n <= SRV_MAX_TOK_IO) {
        cap = -n;
        anvil_token *p = realloc(toks, (size_t)cap * sizeof(*toks));
        if (!p) {
            srv_oom(err);
            goto done;
        }
        toks = p;
        n = anvil_tokenize(in->model, text, n_text, toks, cap, add_special, parse_special);
    }
    if (n == INT32_MIN) {
        srv_err_set(err, 500, "server_error", NULL, NULL, "tokenizer failed");
        goto done;
    }
    if (n < 0) {
        srv_err_set(err, 400, "invalid_request_error", NULL, "content",
                    "'content' is %d tokens long; /tokenize returns at most %d", (int)-n,
                    SRV_MAX_TOK_IO);
        goto done;
    }

    sb_puts(out, "{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) sb_puts(out, ",");
        if (!with_pieces) {
            sb_printf(out, "%d", (int)toks[i]);
            continue;
        }
        if (!srv_token_piece(in->model, toks[i], &piece)) {
            srv_oom(err);
            goto done;
        }
        size_t k = piece.len;
        sb_printf(out, "{\"id\":%d,\"piece\":", (int)toks[i]);
        if (sb_utf8_check(piece.p, k) == k) {
            sb_json_str(out, piece.p, k);
        } else {
            sb_puts(out, "[");
            for (size_t b = 0; b < k; b++)
                sb_printf(out, "%s%u", b ? "," : "", (unsigned)(unsigned char)piece.p[b]);
            sb_puts(out, "]");
        }
        sb_puts(out, "}");
    }
    sb_puts(out, "]}");
    if (out->oom) {
        srv_oom(err);
        goto done;
    }
    ok = true;
done:
    sb_free(&piece);
    free(toks);
    cJSON_Delete(root);
    return ok;
}

// ----------------------------------------------------------------------------
// POST /detokenize

bool srv_detokenize(const struct srv_info *in, const char *body, size_t len, struct sbuf *out,
                    struct srv_err *err) {
    static const char *const known[] = {"tokens"};
    cJSON *root = parse_object(body, len, known, 1, err);
    if (!root) return false;
    bool ok = false;
    struct sbuf text, piece;
    sb_init(&text);
    sb_init(&piece);
    const cJSON *a = srv_field(root, "tokens");
    if (!a) {
        srv_bad(err, "tokens", "'tokens' is required");
        goto done;
    }
    if (!cJSON_IsArray(a)) {
        srv_bad(err, "tokens", "'tokens' must be an array of token ids, got %s",
                srv_type_name(a));
        goto done;
    }
    int n_vocab = anvil_model_n_vocab(in->model), i = 0;
    for (const cJSON *t = a->child; t; t = t->next, i++) {
        if (i >= SRV_MAX_TOK_IO) {
            srv_err_set(err, 400, "invalid_request_error", NULL, "tokens",
                        "'tokens' holds more than %d ids", SRV_MAX_TOK_IO);
            goto done;
        }
        double d = cJSON_IsNumber(t) ? t->valuedouble : NAN;
        if (!cJSON_IsNumber(t) || !isfinite(d) || d != floor(d) || d < 0 || d >= n_vocab) {
            char num[40] = "";
            if (cJSON_IsNumber(t)) snprintf(num, sizeof(num), " %g", d);
            srv_err_set(err, 400, "invalid_request_error", NULL, "tokens",
                        "'tokens'[%d] must be a token id in [0, %d), got %s%s", i, n_vocab,
                        srv_type_name(t), num);
            goto done;
        }
        if (!srv_token_piece(in->model, (anvil_token)d, &piece)) {
            srv_oom(err);
            goto done;
        }
        sb_put(&text, piece.p, piece.len);
    }
    sb_puts(out, "{\"content\":");
    /* one string of the joined bytes: a character split over two tokens
     * comes out whole; stray bytes become U+FFFD in sb_json_str */
    sb_json_str(out, text.p ? text.p : "", text.len);
    sb_puts(out, "}");
    if (out->oom || text.oom) {
        srv_oom(err);
        goto done;
    }
    ok = true;
done:
    sb_free(&text);
    sb_free(&piece);
    cJSON_Delete(root);
    return ok;
}

