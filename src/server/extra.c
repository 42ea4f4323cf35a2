/*
 * extra.c - the endpoints llama-server users expect next to the OpenAI
 * API: POST /tokenize, POST /detokenize, GET /props, and the model's
 * facts in the /v1/models entry.
 *
 * Request rules are request.c's: a JSON null is an absent field, no type
 * coercion ("true" is not a boolean, 1.0 is an integer but 1.5 is not),
 * unknown fields are a 400 naming the field, every error has OpenAI's
 * shape. Shapes follow llama-server (tools/server/README.md there):
 * /tokenize's "with_pieces" gives {"id", "piece"} objects, a piece that
 * is not valid UTF-8 on its own (half a character of a byte-level token)
 * comes as an array of byte values; "parse_special" defaults to true and
 * "add_special" to false, as there.
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
// shared request checks

static bool bad(struct srv_err *e, const char *param, const char *msg) {
    srv_err_set(e, 400, "invalid_request_error", NULL, param, "%s", msg);
    return false;
}

static bool oom(struct srv_err *e) {
    srv_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return false;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

/* Parse the body as a JSON object whose keys are all in `known`. */
static cJSON *parse_object(const char *body, size_t len, const char *const *known, size_t n_known,
                           struct srv_err *e) {
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) {
        bad(e, NULL, "We could not parse the JSON body of your request. (HINT: This likely means "
                     "you aren't using your HTTP library correctly.)");
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "The request body must be a JSON object, got %s",
                 type_name(root));
        bad(e, NULL, msg);
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

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool get_bool(const cJSON *o, const char *key, bool *out, struct srv_err *e) {
    const cJSON *v = field(o, key);
    if (!v) return true;
    if (!cJSON_IsBool(v)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "'%s' must be a boolean, got %s", key, type_name(v));
        return bad(e, key, msg);
    }
    *out = cJSON_IsTrue(v);
    return true;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_ok(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], len, lo = 0x80, hi = 0xbf;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) len = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else
            return false;
        if (n - i < len) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (unsigned k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) return false;
        i += len;
    }
    return true;
}

/* The bytes of token t (control tokens give their text). Grows *buf.
 * Returns the length, or -1 on out-of-memory. */
static int32_t piece_of(const struct anvil_model *m, anvil_token t, char **buf, int32_t *cap) {
    int32_t n = anvil_token_to_piece(m, t, *buf, *cap, true);
    if (n >= 0) return n;
    char *p = realloc(*buf, (size_t)-n);
    if (!p) return -1;
    *buf = p;
    *cap = -n;
    return anvil_token_to_piece(m, t, *buf, *cap, true);
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
    char *piece = NULL;
    const cJSON *c = field(root, "content");
    if (!c) {
        bad(err, "content", "'content' is required");
        goto done;
    }
    if (!cJSON_IsString(c)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "'content' must be a string, got %s", type_name(c));
        bad(err, "content", msg);
        goto done;
    }
    if (!get_bool(root, "add_special", &add_special, err) ||
        !get_bool(root, "parse_special", &parse_special, err) ||
        !get_bool(root, "with_pieces", &with_pieces, err))
        goto done;

    const char *text = c->valuestring;
    size_t n_text = strlen(text);
    /* a first guess that fits most texts (about 4 bytes a token), then the
     * exact count the tokenizer asks for */
    int32_t cap = (int32_t)(n_text / 2 + 16 < SRV_MAX_TOK_IO ? n_text / 2 + 16 : SRV_MAX_TOK_IO);
    toks = malloc((size_t)cap * sizeof(*toks));
    if (!toks) {
        oom(err);
        goto done;
    }
    int32_t n = anvil_tokenize(in->model, text, n_text, toks, cap, add_special, parse_special);
    if (n < 0 && n != INT32_MIN && -n <= SRV_MAX_TOK_IO) {
        cap = -n;
        anvil_token *p = realloc(toks, (size_t)cap * sizeof(*toks));
        if (!p) {
            oom(err);
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

    int32_t piece_cap = 0;
    sb_puts(out, "{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) sb_puts(out, ",");
        if (!with_pieces) {
            sb_printf(out, "%d", (int)toks[i]);
            continue;
        }
        int32_t k = piece_of(in->model, toks[i], &piece, &piece_cap);
        if (k < 0) {
            oom(err);
            goto done;
        }
        sb_printf(out, "{\"id\":%d,\"piece\":", (int)toks[i]);
        if (utf8_ok((const unsigned char *)piece, (size_t)k)) {
            sb_json_str(out, piece, (size_t)k);
        } else {
            sb_puts(out, "[");
            for (int32_t b = 0; b < k; b++)
                sb_printf(out, "%s%u", b ? "," : "", (unsigned)(unsigned char)piece[b]);
            sb_puts(out, "]");
        }
        sb_puts(out, "}");
    }
    sb_puts(out, "]}");
    if (out->oom) {
        oom(err);
        goto done;
    }
    ok = true;
done:
    free(piece);
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
    char *piece = NULL;
    struct sbuf text;
    sb_init(&text);
    const cJSON *a = field(root, "tokens");
    if (!a) {
        bad(err, "tokens", "'tokens' is required");
        goto done;
    }
    if (!cJSON_IsArray(a)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "'tokens' must be an array of token ids, got %s",
                 type_name(a));
        bad(err, "tokens", msg);
        goto done;
    }
    int n_vocab = anvil_model_n_vocab(in->model), i = 0, piece_cap = 0;
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
                        type_name(t), num);
            goto done;
        }
        int32_t k = piece_of(in->model, (anvil_token)d, &piece, &piece_cap);
        if (k < 0) {
            oom(err);
            goto done;
        }
        sb_put(&text, piece, (size_t)k);
    }
    sb_puts(out, "{\"content\":");
    /* one string of the joined bytes: a character split over two tokens
     * comes out whole; stray bytes become U+FFFD in sb_json_str */
    sb_json_str(out, text.p ? text.p : "", text.len);
    sb_puts(out, "}");
    if (out->oom || text.oom) {
        oom(err);
        goto done;
    }
    ok = true;
done:
    sb_free(&text);
    free(piece);
    cJSON_Delete(root);
    return ok;
}

// ----------------------------------------------------------------------------
// GET /props and the /v1/models entry

/* Append "key": the metadata string, or null when missing. */
static void meta_field(struct sbuf *b, const struct anvil_model *m, const char *name,
                       const char *key) {
    sb_printf(b, "\"%s\":", name);
    int32_t n = anvil_model_meta_str(m, key, NULL, 0);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && anvil_model_meta_str(m, key, s, (size_t)n + 1) == n)
        sb_json_str(b, s, (size_t)n);
    else if (n >= 0)
        b->oom = true;
    else
        sb_puts(b, "null");
    free(s);
}

static void str_or_null(struct sbuf *b, const char *s) {
    if (s && s[0])
        sb_json_str(b, s, strlen(s));
    else
        sb_puts(b, "null");
}

/* Text of a special token (BOS/EOS), or null. */
static void token_text(struct sbuf *b, const struct anvil_model *m, anvil_token t) {
    char buf[256];
    int32_t n = t >= 0 ? anvil_token_to_piece(m, t, buf, sizeof(buf), true) : 0;
    if (n > 0)
        sb_json_str(b, buf, (size_t)n);
    else
        sb_puts(b, "null");
}

/* The facts both /props and the model entry carry (no braces). */
static void facts(struct sbuf *b, const struct srv_info *in) {
    const struct anvil_model *m = in->model;
    meta_field(b, m, "architecture", "general.architecture");
    sb_puts(b, ",");
    meta_field(b, m, "name", "general.name");
    sb_puts(b, ",\"desc\":");
    str_or_null(b, anvil_model_desc(m));
    sb_printf(b, ",\"n_ctx\":%d,\"n_ctx_train\":%d,\"n_vocab\":%d,\"n_embd\":%d,\"n_layer\":%d",
              (int)in->n_ctx, (int)anvil_model_n_ctx_train(m), (int)anvil_model_n_vocab(m),
              (int)anvil_model_n_embd(m), (int)anvil_model_n_layer(m));
    sb_puts(b, ",\"type\":");
    str_or_null(b, anvil_type_name(anvil_model_type(m)));
    /* the family anvil renders (never null: an unrecognised template
     * falls back to ChatML) and why that one */
    static const char *const src[] = {"file", "vocabulary", "fallback", "chosen"};
    sb_puts(b, ",\"chat_template_name\":");
    str_or_null(b, anvil_chat_template_name(m));
    sb_printf(b, ",\"chat_template_source\":\"%s\"",
              src[(int)anvil_chat_template_source(m) & 3]);
    sb_printf(b, ",\"parallel\":%d,\"kernels\":", (int)in->parallel);
    str_or_null(b, anvil_model_kernels(m));
    sb_puts(b, ",\"replica_id\":");
    str_or_null(b, in->replica_id);
}

void srv_fmt_props(struct sbuf *b, const struct srv_info *in) {
    const struct anvil_model *m = in->model;
    sb_puts(b, "{\"model_id\":");
    sb_json_str(b, in->model_id, strlen(in->model_id));
    sb_puts(b, ",");
    facts(b, in);
    /* llama-server's names for the same facts, so its clients find them */
    sb_printf(b, ",\"total_slots\":%d,\"default_generation_settings\":{\"n_ctx\":%d}",
              (int)in->parallel, (int)in->n_ctx);
    sb_puts(b, ",");
    meta_field(b, m, "chat_template", "tokenizer.chat_template");
    sb_puts(b, ",\"bos_token\":");
    token_text(b, m, anvil_token_bos(m));
    sb_puts(b, ",\"eos_token\":");
    token_text(b, m, anvil_token_eos(m));
    sb_printf(b, ",\"webui\":%s}", in->webui ? "true" : "false");
}

void srv_fmt_model_entry(struct sbuf *b, const struct srv_info *in, bool single) {
    if (!single) sb_puts(b, "{\"object\":\"list\",\"data\":[");
    sb_puts(b, "{\"id\":");
    sb_json_str(b, in->model_id, strlen(in->model_id));
    sb_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"anvil\",\"meta\":{",
              in->created);
    facts(b, in);
    sb_puts(b, "}}");
    if (!single) sb_puts(b, "]}");
}
