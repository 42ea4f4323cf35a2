/*
 * api_embed.c - POST /v1/embeddings (OpenAI), /api/embed and
 * /api/embeddings (Ollama), POST /v1/rerank and /rerank (llama-server's
 * and Jina's shape), answered on the HTTP worker that received them.
 *
 * A server holds up to three models that can answer these: the embedding
 * model (serve --embedding-model), the rerank model (--rerank-model) and
 * the chat model, when its file says how to pool. The request's "model"
 * picks one by id; without it the embedding routes use the embedding
 * model (else the chat model), reranking the rerank model (else the chat
 * model). A model whose pooling cannot make the answer (a chat model with
 * no <arch>.pooling_type, an embedding model asked to rerank) is a 400.
 *
 * Each model gets its own anvil_ctx, made on first use and guarded by a
 * mutex: one request at a time per model, all its inputs packed into
 * batches by anvil_embed (many sequences per forward pass). Inputs longer
 * than the model's limit are a 400 unless the request says "truncate"
 * (Ollama's default is true, as Ollama's is); more than
 * SRV_EMB_MAX_INPUTS inputs or SRV_EMB_MAX_TOKENS tokens is a 413.
 *
 * Reranking: each (query, document) pair is tokenized as llama-server
 * does: BOS when the vocabulary adds it, the query, EOS, the document,
 * EOS; the rank head's score is relevance_score, and results come sorted
 * by it (highest first, ties by index), cut to top_n.
 *
 * POST /embedding is llama-server's own route: "input" or "content", the
 * answer an array of {"index", "embedding": [vectors]}: one vector
 * (normalized unless "embd_normalize" is -1) for a pooling model, one raw
 * vector per token for a model whose pooling is none. /v1/embeddings
 * refuses pooling none with a 400, as llama-server does.
 *
 * What it does not do: sparse or
 * multi-vector outputs (BGE-M3's), queueing beside generation: a request
 * computes while holding its model's mutex.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server/api_embed.h"

#define EMB_SEQ_MAX 16 /* sequences per forward pass */

struct emb_slot {
    struct srv_emb_target t;
    pthread_mutex_t mu;
    struct anvil_ctx *ctx; /* under mu; made on first use */
    bool listed;           /* its own /v1/models entry (not the chat model's) */
};

struct srv_emb {
    struct emb_slot slot[3];
    struct srv_emb_target tg[3];
    struct srv_emb_targets ts;
    int n;
    char *ids[3];
};

// ----------------------------------------------------------------------------
// parsing

void srv_emb_req_free(struct srv_emb_req *r) {
    if (!r) return;
    for (int32_t i = 0; r->seqs && i < r->n; i++) free(r->seqs[i]);
    for (int32_t i = 0; r->docs && i < r->n; i++) free(r->docs[i]);
    free(r->seqs);
    free(r->lens);
    free(r->docs);
    memset(r, 0, sizeof(*r));
}

static bool too_many(struct srv_err *e, const char *param, const char *fmt, long long n,
                     long long lim) {
    srv_err_set(e, 413, "invalid_request_error", "too_many_inputs", param, fmt, n, lim);
    return false;
}

/* Does name pick target t? Ollama's clients add ":latest". */
static bool name_is(const char *name, const char *id, bool ollama) {
    if (!strcmp(name, id)) return true;
    size_t n = strlen(id);
    return ollama && !strncmp(name, id, n) && !strcmp(name + n, ":latest");
}

bool srv_emb_check_target(const struct srv_emb_target *t, enum srv_emb_kind kind,
                          struct srv_err *e) {
    int p = t->pooling;
    if (kind == SRV_EMB_RERANK) {
        if (p == ANVIL_POOL_RANK) return true;
        return srv_bad(e, "model",
                       "the model '%.100s' has no rank head (its pooling is %s): it cannot "
                       "rerank; serve a reranking model with --rerank-model",
                       t->id, anvil_pooling_name(p));
    }
    if (p == ANVIL_POOL_MEAN || p == ANVIL_POOL_CLS || p == ANVIL_POOL_LAST) return true;
    if (p == ANVIL_POOL_NONE && kind == SRV_EMB_LLAMA) return true;
    if (p == ANVIL_POOL_NONE)
        return srv_bad(e, "model",
                       "Pooling type 'none' is not OAI compatible: the model '%.100s' gives one "
                       "vector per token; use POST /embedding",
                       t->id);
    if (p == ANVIL_POOL_RANK)
        return srv_bad(e, "model",
                       "the model '%.100s' is a reranker (pooling rank): use /v1/rerank",
                       t->id);
    return srv_bad(e, "model",
                   "the model '%.100s' cannot make embeddings: its file gives no pooling "
                   "(%s.pooling_type %s); serve an embedding model with --embedding-model",
                   t->id, "<arch>", anvil_pooling_name(p));
}

/* Tokens of one text; NULL with e set. */
static anvil_token *tok_text(const struct anvil_model *m, const char *s, size_t n, bool special,
                             int32_t *len, struct srv_err *e) {
    int32_t cap = (int32_t)(n < 64 ? 64 : n + 8);
    if (n > (size_t)SRV_EMB_MAX_TOKENS * 8) {
        too_many(e, "input", "an input of %lld bytes is more than the %lld this server takes",
                 (long long)n, (long long)SRV_EMB_MAX_TOKENS * 8);
        return NULL;
    }
    anvil_token *t = malloc((size_t)cap * sizeof(*t));
    if (!t) {
        srv_oom(e);
        return NULL;
    }
    int32_t k = anvil_tokenize(m, s, n, t, cap, special, false);
    if (k < 0 && k != INT32_MIN) { /* -(needed) */
        anvil_token *t2 = realloc(t, (size_t)(-k) * sizeof(*t));
        if (!t2) {
            free(t);
            srv_oom(e);
            return NULL;
        }
        t = t2;
        k = anvil_tokenize(m, s, n, t, -k, special, false);
    }
    if (k < 0) {
        free(t);
        srv_oom(e);
        return NULL;
    }
    *len = k;
    return t;
}

/* A JSON array of token ids into a new array; NULL with e set. */
static anvil_token *tok_ids(const cJSON *a, int32_t n_vocab, const char *param, int32_t *len,
                            struct srv_err *e) {
    int n = cJSON_GetArraySize(a);
    if (n > SRV_EMB_MAX_TOKENS) {
        too_many(e, param, "an input of %lld tokens is more than the %lld this server takes", n,
                 SRV_EMB_MAX_TOKENS);
        return NULL;
    }
    anvil_token *t = malloc((size_t)(n ? n : 1) * sizeof(*t));
    if (!t) {
        srv_oom(e);
        return NULL;
    }
    int i = 0;
    for (const cJSON *v = a->child; v; v = v->next, i++) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
        if (!cJSON_IsNumber(v) || d != floor(d) || d < 0 || d >= n_vocab) {
            free(t);
            if (cJSON_IsNumber(v))
                srv_bad(e, param, "token id %.17g at %d is not in the vocabulary (0..%d)", d, i,
                        n_vocab - 1);
            else
                srv_bad(e, param, "a token array must hold integers, got %s at %d",
                        srv_type_name(v), i);
            return NULL;
        }
        t[i] = (anvil_token)d;
    }
    *len = n;
    return t;
}

static bool all_numbers(const cJSON *a) {
    for (const cJSON *v = a->child; v; v = v->next)
        if (!cJSON_IsNumber(v)) return false;
    return a->child != NULL;
}

/* Append one input to r (takes t). */
static bool push(struct srv_emb_req *r, int32_t cap, anvil_token *t, int32_t n, char *doc,
                 struct srv_err *e) {
    if (r->n >= cap) {
        free(t);
        free(doc);
        return srv_oom(e);
    }
    r->seqs[r->n] = t;
    r->lens[r->n] = n;
    if (r->docs) r->docs[r->n] = doc;
    r->n++;
    r->n_tokens += n;
    return true;
}

/* Check lengths against the target (cut when truncate), the totals. */
static bool check_lengths(struct srv_emb_req *r, const struct srv_emb_target *t, bool truncate,
                          const char *param, struct srv_err *e) {
    r->n_tokens = 0;
    for (int32_t i = 0; i < r->n; i++) {
        if (r->lens[i] == 0)
            return srv_bad(e, param, "input %d is empty: there is nothing to embed", i);
        if (r->lens[i] > t->n_max) {
            if (!truncate)
                return srv_bad(e, param,
                               "input %d has %d tokens, more than the %d the model '%.100s' "
                               "takes (send \"truncate\": true to cut it)",
                               i, r->lens[i], t->n_max, t->id);
            r->lens[i] = t->n_max;
            r->n_truncated++;
        }
        r->n_tokens += r->lens[i];
    }
    if (r->n_tokens > SRV_EMB_MAX_TOKENS)
        return too_many(e, param, "the inputs hold %lld tokens, more than the %lld of one request",
                        (long long)r->n_tokens, SRV_EMB_MAX_TOKENS);
    return true;
}

/* "input" (OpenAI, Ollama) or "prompt" (Ollama's old route) into r. */
static bool parse_inputs(struct srv_emb_req *r, const struct srv_emb_target *t, const cJSON *in,
                         const char *param, struct srv_err *e) {
    int32_t n_vocab = anvil_model_n_vocab(t->m);
    if (!in) return srv_bad(e, param, "'%s' is required", param);
    int n = 1;
    bool one_ids = false;
    if (cJSON_IsArray(in)) {
        n = cJSON_GetArraySize(in);
        if (n == 0) return srv_bad(e, param, "'%s' is empty: give at least one input", param);
        one_ids = all_numbers(in); /* [1, 2, 3]: one input of token ids */
        if (one_ids) n = 1;
    } else if (!cJSON_IsString(in)) {
        return srv_bad(e, param, "'%s' must be a string or an array, got %s", param,
                       srv_type_name(in));
    }
    if (n > SRV_EMB_MAX_INPUTS)
        return too_many(e, param, "%lld inputs are more than the %lld of one request", n,
                        SRV_EMB_MAX_INPUTS);
    r->seqs = calloc((size_t)n, sizeof(*r->seqs));
    r->lens = calloc((size_t)n, sizeof(*r->lens));
    if (!r->seqs || !r->lens) return srv_oom(e);
    if (cJSON_IsString(in) || one_ids) {
        int32_t k = 0;
        anvil_token *tk = one_ids ? tok_ids(in, n_vocab, param, &k, e)
                                  : tok_text(t->m, in->valuestring, strlen(in->valuestring),
                                             true, &k, e);
        return tk && push(r, n, tk, k, NULL, e);
    }
    int i = 0;
    for (const cJSON *v = in->child; v; v = v->next, i++) {
        int32_t k = 0;
        anvil_token *tk = NULL;
        if (cJSON_IsString(v)) {
            tk = tok_text(t->m, v->valuestring, strlen(v->valuestring), true, &k, e);
        } else if (cJSON_IsArray(v)) {
            if (!v->child)
                return srv_bad(e, param, "input %d is empty: there is nothing to embed", i);
            tk = tok_ids(v, n_vocab, param, &k, e);
        } else {
            return srv_bad(e, param,
                           "'%s' items must be strings or arrays of token ids, got %s at %d",
                           param, srv_type_name(v), i);
        }
        if (!tk || !push(r, n, tk, k, NULL, e)) return false;
    }
    return true;
}

/* Query + documents into (query, document) pairs. */
static bool parse_rerank(struct srv_emb_req *r, const struct srv_emb_target *t, const cJSON *root,
                         struct srv_err *e) {
    const cJSON *q = srv_field(root, "query"), *docs = srv_field(root, "documents");
    if (!q) return srv_bad(e, "query", "'query' is required");
    if (!cJSON_IsString(q))
        return srv_bad(e, "query", "'query' must be a string, got %s", srv_type_name(q));
    if (!docs) docs = srv_field(root, "texts"); /* Hugging Face TEI's name */
    if (!docs) return srv_bad(e, "documents", "'documents' is required");
    if (!cJSON_IsArray(docs))
        return srv_bad(e, "documents", "'documents' must be an array, got %s",
                       srv_type_name(docs));
    int n = cJSON_GetArraySize(docs);
    if (n == 0) return srv_bad(e, "documents", "'documents' is empty");
    if (n > SRV_EMB_MAX_INPUTS)
        return too_many(e, "documents", "%lld documents are more than the %lld of one request", n,
                        SRV_EMB_MAX_INPUTS);
    long long top_n = 0;
    bool has = false;
    if (!srv_get_int(root, "top_n", 1, 1e9, &top_n, &has, e)) return false;
    r->top_n = has ? (int32_t)(top_n < n ? top_n : n) : 0;
    if (!srv_get_bool(root, "return_documents", &r->return_docs, NULL, e)) return false;
    r->seqs = calloc((size_t)n, sizeof(*r->seqs));
    r->lens = calloc((size_t)n, sizeof(*r->lens));
    r->docs = calloc((size_t)n, sizeof(*r->docs));
    if (!r->seqs || !r->lens || !r->docs) return srv_oom(e);
    size_t qn = strlen(q->valuestring);
    int i = 0;
    bool ok = true;
    for (const cJSON *v = docs->child; v && ok; v = v->next, i++) {
        const cJSON *txt = v;
        if (cJSON_IsObject(v)) txt = srv_field(v, "text"); /* Jina: {"text": ...} */
        if (!txt || !cJSON_IsString(txt)) {
            ok = srv_bad(e, "documents", "document %d must be a string or {\"text\": string}", i);
            break;
        }
        size_t dn = strlen(txt->valuestring);
        if (qn + dn > (size_t)SRV_EMB_MAX_TOKENS * 8) {
            ok = too_many(e, "documents", "a pair of %lld bytes is more than the %lld this server "
                          "takes", (long long)(qn + dn), (long long)SRV_EMB_MAX_TOKENS * 8);
            break;
        }
        /* llama-server's pair: [BOS] query EOS document EOS (anvil_rank_pair) */
        int32_t cap = (int32_t)(qn + dn + 8);
        anvil_token *p = malloc((size_t)cap * sizeof(*p));
        char *doc = strdup(txt->valuestring);
        int32_t k = p ? anvil_rank_pair(t->m, q->valuestring, qn, txt->valuestring, dn, p, cap)
                      : INT32_MIN;
        if (k < 0 && k != INT32_MIN) { /* more tokens than bytes: room for -k */
            anvil_token *p2 = realloc(p, (size_t)(-k) * sizeof(*p));
            if (p2) {
                p = p2;
                k = anvil_rank_pair(t->m, q->valuestring, qn, txt->valuestring, dn, p, -k);
            } else {
                k = INT32_MIN;
            }
        }
        if (k < 0 || !doc) {
            free(p);
            free(doc);
            ok = srv_oom(e);
            break;
        }
        ok = push(r, n, p, k, doc, e);
    }
    return ok;
}

static bool parse(const struct srv_emb_targets *ts, enum srv_emb_kind kind, const cJSON *root,
                  struct srv_emb_req *r, struct srv_err *e) {
    static const char *const known_openai[] = {"input", "model", "encoding_format", "dimensions",
                                               "user", "truncate"};
    static const char *const known_ollama[] = {"input", "model", "truncate", "options",
                                               "keep_alive", "dimensions"};
    static const char *const known_old[] = {"prompt", "model", "options", "keep_alive"};
    static const char *const known_llama[] = {"input", "content", "model", "encoding_format",
                                              "embd_normalize", "truncate"};
    static const char *const known_rerank[] = {"query", "documents", "texts", "model", "top_n",
                                               "return_documents", "truncate"};
    const char *const *known = kind == SRV_EMB_OPENAI   ? known_openai
                               : kind == SRV_EMB_OLLAMA ? known_ollama
                               : kind == SRV_EMB_RERANK ? known_rerank
                               : kind == SRV_EMB_LLAMA  ? known_llama
                                                        : known_old;
    size_t n_known = kind == SRV_EMB_OPENAI   ? 6
                     : kind == SRV_EMB_OLLAMA ? 6
                     : kind == SRV_EMB_RERANK ? 7
                     : kind == SRV_EMB_LLAMA  ? 6
                                              : 4;
    if (ts->strict)
        for (const cJSON *f = root->child; f; f = f->next) {
            bool ok = false;
            for (size_t i = 0; i < n_known && !ok; i++) ok = !strcmp(f->string, known[i]);
            if (!ok)
                return srv_bad(e, NULL, "Unrecognized request argument supplied: %.100s",
                               f->string);
        }
    bool ollama = kind == SRV_EMB_OLLAMA || kind == SRV_EMB_OLLAMA_OLD;
    const cJSON *model = srv_field(root, "model");
    int ti = kind == SRV_EMB_RERANK ? ts->def_rerank : ts->def_embed;
    if (model) {
        if (!cJSON_IsString(model))
            return srv_bad(e, "model", "'model' must be a string, got %s", srv_type_name(model));
        ti = -1;
        for (int i = 0; i < ts->n && ti < 0; i++)
            if (name_is(model->valuestring, ts->t[i].id, ollama)) ti = i;
        if (ti < 0) {
            if (ollama)
                srv_err_set(e, 404, "not_found_error", "model_not_found", "model",
                            "model \"%.100s\" not found, try pulling it first",
                            model->valuestring);
            else
                srv_err_set(e, 404, "invalid_request_error", "model_not_found", NULL,
                            "The model `%.100s` does not exist or you do not have access to it.",
                            model->valuestring);
            return false;
        }
        snprintf(r->model, sizeof(r->model), "%s", model->valuestring);
    } else if (ollama) {
        return srv_bad(e, "model", "model is required");
    }
    if (ti < 0 || ti >= ts->n) return srv_bad(e, "model", "no model here can answer this route");
    const struct srv_emb_target *t = &ts->t[ti];
    if (!model) snprintf(r->model, sizeof(r->model), "%s", t->id);
    r->target = ti;
    if (!srv_emb_check_target(t, kind, e)) return false;

    bool truncate = ollama && kind == SRV_EMB_OLLAMA; /* Ollama truncates by default */
    if (!srv_get_bool(root, "truncate", &truncate, NULL, e)) return false;
    r->normalize = kind != SRV_EMB_OLLAMA_OLD && kind != SRV_EMB_RERANK;
    if (kind == SRV_EMB_LLAMA) {
        r->per_token = t->pooling == ANVIL_POOL_NONE;
        long long en = 2;
        bool has = false;
        if (!srv_get_int(root, "embd_normalize", -1, 2, &en, &has, e)) return false;
        if (en != -1 && en != 2)
            return srv_bad(e, "embd_normalize",
                           "'embd_normalize' must be -1 (none) or 2 (L2); anvil has no other norm");
        /* llama-server normalizes only pooled vectors */
        r->normalize = !r->per_token && en == 2;
        const cJSON *in = srv_field(root, "input");
        if (!in) in = srv_field(root, "content");
        if (!in) return srv_bad(e, "input", "\"input\" or \"content\" must be provided");
        if (!parse_inputs(r, t, in, "input", e)) return false;
        return check_lengths(r, t, truncate, "input", e);
    }
    if (kind == SRV_EMB_OPENAI) {
        const cJSON *f = srv_field(root, "encoding_format");
        if (f) {
            if (!cJSON_IsString(f) ||
                (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64")))
                return srv_bad(e, "encoding_format",
                               "'encoding_format' must be \"float\" or \"base64\"");
            r->base64 = !strcmp(f->valuestring, "base64");
        }
        const cJSON *u = srv_field(root, "user");
        if (u && !cJSON_IsString(u))
            return srv_bad(e, "user", "'user' must be a string, got %s", srv_type_name(u));
    }
    if (kind == SRV_EMB_OPENAI || kind == SRV_EMB_OLLAMA) {
        long long d = 0;
        bool has = false;
        if (!srv_get_int(root, "dimensions", 1, 1e9, &d, &has, e)) return false;
        int ne = anvil_model_n_embd(t->m);
        if (has && d > ne)
            return srv_bad(e, "dimensions",
                           "'dimensions' is %lld, more than the %d of the model '%.100s'", d, ne,
                           t->id);
        r->dims = has ? (int32_t)d : 0;
    }
    if (kind == SRV_EMB_RERANK) {
        if (!parse_rerank(r, t, root, e)) return false;
        return check_lengths(r, t, truncate, "documents", e);
    }
    const char *param = kind == SRV_EMB_OLLAMA_OLD ? "prompt" : "input";
    const cJSON *in = srv_field(root, param);
    if (kind == SRV_EMB_OLLAMA && in && cJSON_IsArray(in))
        for (const cJSON *v = in->child; v; v = v->next)
            if (!cJSON_IsString(v))
                return srv_bad(e, "input", "'input' must be a string or an array of strings");
    if (kind == SRV_EMB_OLLAMA_OLD && in && !cJSON_IsString(in))
        return srv_bad(e, "prompt", "'prompt' must be a string, got %s", srv_type_name(in));
    if (!parse_inputs(r, t, in, param, e)) return false;
    return check_lengths(r, t, truncate, param, e);
}

bool srv_emb_parse(const struct srv_emb_targets *ts, enum srv_emb_kind kind, const char *body,
                   size_t len, struct srv_emb_req *out, struct srv_err *e) {
    memset(out, 0, sizeof(*out));
    out->kind = kind;
    if (!srv_json_prescan(body, len, e)) return false;
    cJSON *root = srv_json_parse(body, len, NULL);
    if (!root)
        return srv_bad(e, NULL, "We could not parse the JSON body of your request. (HINT: This "
                       "likely means you aren't using your HTTP library correctly.)");
    bool ok;
    if (!cJSON_IsObject(root))
        ok = srv_bad(e, NULL, "The request body must be a JSON object, got %s",
                     srv_type_name(root));
    else
        ok = parse(ts, kind, root, out, e);
    cJSON_Delete(root);
    if (!ok) {
        srv_emb_req_free(out);
        out->kind = kind;
    }
    return ok;
}

// ----------------------------------------------------------------------------
// answers

static void put_float(struct sbuf *b, float v) {
    if (isfinite(v))
        sb_printf(b, "%.9g", (double)v);
    else
        sb_puts(b, "null"); /* JSON has no NaN */
}

static void put_vec(struct sbuf *b, const float *v, int n) {
    sb_puts(b, "[");
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(b, ",");
        put_float(b, v[i]);
    }
    sb_puts(b, "]");
}

/* The float32 little-endian bytes of v, base64 (RFC 4648, padded). */
static void put_base64(struct sbuf *b, const float *v, int n) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v;
    size_t len = (size_t)n * 4;
    sb_puts(b, "\"");
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)p[i] << 16;
        if (i + 1 < len) x |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len) x |= p[i + 2];
        char q[4] = {al[(x >> 18) & 63], al[(x >> 12) & 63], i + 1 < len ? al[(x >> 6) & 63] : '=',
                     i + 2 < len ? al[x & 63] : '='};
        sb_put(b, q, 4);
    }
    sb_puts(b, "\"");
}

struct scored {
    float s;
    int32_t i;
};

static int by_score(const void *a, const void *b) {
    const struct scored *x = a, *y = b;
    /* highest first; NaN last; ties by index */
    bool xn = isnan(x->s), yn = isnan(y->s);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x->s != y->s) return x->s > y->s ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

void srv_emb_format(const struct srv_emb_req *r, const float *v, int n_embd, struct sbuf *b) {
    int d = r->dims ? r->dims : n_embd;
    if (r->kind == SRV_EMB_LLAMA) {
        sb_puts(b, "[");
        size_t row = 0;
        for (int32_t i = 0; i < r->n; i++) {
            sb_printf(b, "%s{\"index\":%d,\"embedding\":[", i ? "," : "", (int)i);
            int32_t k = r->per_token ? r->lens[i] : 1;
            for (int32_t j = 0; j < k; j++, row++) {
                if (j) sb_puts(b, ",");
                put_vec(b, v + row * (size_t)n_embd, n_embd);
            }
            sb_puts(b, "]}");
        }
        sb_puts(b, "]");
        return;
    }
    if (r->kind == SRV_EMB_RERANK) {
        struct scored *sc = malloc((size_t)r->n * sizeof(*sc));
        int32_t n = r->top_n ? r->top_n : r->n;
        sb_puts(b, "{\"model\":");
        sb_json_str(b, r->model, strlen(r->model));
        sb_puts(b, ",\"object\":\"list\",\"results\":[");
        for (int32_t i = 0; sc && i < r->n; i++) sc[i] = (struct scored){v[i], i};
        if (sc) qsort(sc, (size_t)r->n, sizeof(*sc), by_score);
        for (int32_t k = 0; sc && k < n; k++) {
            sb_printf(b, "%s{\"index\":%d,\"relevance_score\":", k ? "," : "", (int)sc[k].i);
            put_float(b, sc[k].s);
            if (r->return_docs) {
                const char *doc = r->docs[sc[k].i];
                sb_puts(b, ",\"document\":{\"text\":");
                sb_json_str(b, doc, strlen(doc));
                sb_puts(b, "}");
            }
            sb_puts(b, "}");
        }
        free(sc);
        sb_printf(b, "],\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}",
                  (long long)r->n_tokens, (long long)r->n_tokens);
        return;
    }
    if (r->kind == SRV_EMB_OLLAMA_OLD) {
        sb_puts(b, "{\"embedding\":");
        put_vec(b, v, d);
        sb_puts(b, "}");
        return;
    }
    if (r->kind == SRV_EMB_OLLAMA) {
        sb_puts(b, "{\"model\":");
        sb_json_str(b, r->model, strlen(r->model));
        sb_puts(b, ",\"embeddings\":[");
        for (int32_t i = 0; i < r->n; i++) {
            if (i) sb_puts(b, ",");
            put_vec(b, v + (size_t)i * n_embd, d);
        }
        sb_printf(b, "],\"prompt_eval_count\":%lld}", (long long)r->n_tokens);
        return;
    }
    sb_puts(b, "{\"object\":\"list\",\"data\":[");
    for (int32_t i = 0; i < r->n; i++) {
        sb_printf(b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "",
                  (int)i);
        if (r->base64)
            put_base64(b, v + (size_t)i * n_embd, d);
        else
            put_vec(b, v + (size_t)i * n_embd, d);
        sb_puts(b, "}");
    }
    sb_puts(b, "],\"model\":");
    sb_json_str(b, r->model, strlen(r->model));
    sb_printf(b, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}",
              (long long)r->n_tokens, (long long)r->n_tokens);
}

// ----------------------------------------------------------------------------
// the server's side

static void slot_add(struct srv_emb *E, struct anvil_model *m, const char *id, bool listed) {
    struct emb_slot *sl = &E->slot[E->n];
    int32_t n_max = anvil_model_n_ctx_train(m);
    if (n_max <= 0 || n_max > 8192) n_max = 8192;
    sl->t = (struct srv_emb_target){
        .m = m, .id = id, .n_max = n_max, .pooling = anvil_model_pooling(m)};
    sl->listed = listed;
    pthread_mutex_init(&sl->mu, NULL);
    E->tg[E->n] = sl->t;
    E->n++;
}

int srv_emb_init(struct srv *s, char *err, size_t err_cap) {
    struct srv_emb *E = calloc(1, sizeof(*E));
    if (!E) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    const struct srv_config *cfg = &s->cfg;
    int def_embed = -1, def_rerank = -1;
    const char *ids[2] = {cfg->embed_model_id, cfg->rerank_model_id};
    struct anvil_model *ms[2] = {cfg->embed_model, cfg->rerank_model};
    for (int k = 0; k < 2; k++) {
        if (!ms[k]) continue;
        E->ids[E->n] = strdup(ids[k] && ids[k][0] ? ids[k] : k ? "rerank" : "embedding");
        if (!E->ids[E->n]) {
            for (int i = 0; i < E->n; i++) free(E->ids[i]);
            free(E);
            snprintf(err, err_cap, "out of memory");
            return -1;
        }
        if (k == 0) def_embed = E->n;
        else def_rerank = E->n;
        slot_add(E, ms[k], E->ids[E->n], true);
    }
    int chat = E->n;
    slot_add(E, s->model, s->model_id, false);
    E->ts = (struct srv_emb_targets){.t = E->tg,
                                     .n = E->n,
                                     .def_embed = def_embed >= 0 ? def_embed : chat,
                                     .def_rerank = def_rerank >= 0 ? def_rerank : chat,
                                     .strict = cfg->strict};
    s->emb = E;
    return 0;
}

void srv_emb_free(struct srv *s) {
    struct srv_emb *E = s ? s->emb : NULL;
    if (!E) return;
    for (int i = 0; i < E->n; i++) {
        anvil_ctx_free(E->slot[i].ctx);
        pthread_mutex_destroy(&E->slot[i].mu);
    }
    for (int i = 0; i < 3; i++) free(E->ids[i]);
    free(E);
    s->emb = NULL;
}

static void model_entry(const struct srv *s, const struct emb_slot *sl, struct sbuf *b) {
    const struct anvil_model *m = sl->t.m;
    int p = anvil_model_pooling(m);
    sb_puts(b, "{\"id\":");
    sb_json_str(b, sl->t.id, strlen(sl->t.id));
    sb_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"anvil\",\"meta\":{"
                 "\"kind\":\"%s\",\"pooling\":\"%s\",\"n_embd\":%d,\"n_ctx_train\":%d,"
                 "\"n_vocab\":%d,\"desc\":",
              s->created, p == ANVIL_POOL_RANK ? "rerank" : "embedding", anvil_pooling_name(p),
              (int)anvil_model_n_embd(m), (int)anvil_model_n_ctx_train(m),
              (int)anvil_model_n_vocab(m));
    const char *d = anvil_model_desc(m);
    sb_json_str(b, d, strlen(d));
    sb_puts(b, "}}");
}

void srv_emb_fmt_models(const struct srv *s, struct sbuf *b) {
    const struct srv_emb *E = s->emb;
    for (int i = 0; E && i < E->n; i++)
        if (E->slot[i].listed) {
            sb_puts(b, ",");
            model_entry(s, &E->slot[i], b);
        }
}

bool srv_emb_fmt_model(const struct srv *s, const char *id, struct sbuf *b) {
    const struct srv_emb *E = s->emb;
    for (int i = 0; E && i < E->n; i++)
        if (E->slot[i].listed && !strcmp(E->slot[i].t.id, id)) {
            model_entry(s, &E->slot[i], b);
            return true;
        }
    return false;
}

/* Run the request on its model: vectors or scores into a new array. */
static anvil_status compute(struct srv *s, const struct srv_emb_req *r, float **out,
                            struct srv_err *e) {
    struct emb_slot *sl = &s->emb->slot[r->target];
    const struct anvil_model *m = sl->t.m;
    int ne = anvil_model_n_embd(m);
    bool rank = r->kind == SRV_EMB_RERANK;
    size_t per = rank ? 1 : (size_t)ne;
    size_t rows = r->per_token ? (size_t)r->n_tokens : (size_t)r->n; /* pooling none: a row a token */
    float *v = malloc((rows ? rows : 1) * per * sizeof(float));
    if (!v) {
        srv_oom(e);
        return ANVIL_ERR_NOMEM;
    }
    pthread_mutex_lock(&sl->mu);
    anvil_status st = ANVIL_OK;
    if (!sl->ctx) {
        struct anvil_ctx_params cp = anvil_ctx_default_params();
        cp.n_ctx = sl->t.n_max;
        cp.n_batch = sl->t.n_max < 2048 ? 2048 : sl->t.n_max;
        cp.n_outputs = cp.n_batch;
        cp.n_seq_max = EMB_SEQ_MAX;
        cp.n_threads = s->cfg.emb_threads;
        /* one batch's positions at a time (every sequence is dropped after
         * its batch), with a block of slack per sequence */
        cp.kv_mem = anvil_model_kv_bytes(m, ANVIL_TYPE_F16, cp.n_batch + EMB_SEQ_MAX * 256, true);
        char err[ANVIL_ERRMSG_CAP];
        st = anvil_ctx_init((struct anvil_model *)m, &cp, &sl->ctx, err, sizeof(err));
        if (st != ANVIL_OK)
            srv_err_set(e, 500, "server_error", NULL, NULL, "cannot make a context for '%.100s': %s",
                        sl->t.id, err);
    }
    if (st == ANVIL_OK) {
        st = anvil_embed(sl->ctx, (const anvil_token *const *)r->seqs, r->lens, r->n,
                         rank ? ANVIL_POOL_RANK : ANVIL_POOL_UNSPECIFIED, r->normalize, v);
        if (st != ANVIL_OK)
            srv_err_set(e, st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED ? 400 : 500,
                        st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED
                            ? "invalid_request_error"
                            : "server_error",
                        NULL, NULL, "%s", anvil_ctx_errmsg(sl->ctx));
    }
    pthread_mutex_unlock(&sl->mu);
    if (st != ANVIL_OK) {
        free(v);
        return st;
    }
    /* Matryoshka: the first dims components, renormalized */
    if (!rank && r->dims && r->dims < ne)
        for (int32_t i = 0; i < r->n; i++) {
            float *y = v + (size_t)i * ne;
            double ss = 0.0;
            for (int j = 0; j < r->dims; j++) ss += (double)y[j] * y[j];
            double inv = r->normalize && ss > 0.0 ? 1.0 / sqrt(ss) : 1.0;
            for (int j = 0; j < r->dims; j++) y[j] = (float)(y[j] * inv);
        }
    *out = v;
    return ANVIL_OK;
}

static enum MHD_Result send_ollama_err(struct srv *s, struct MHD_Connection *c,
                                       const struct srv_err *e) {
    struct sbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"error\":");
    sb_json_str(&b, e->message, strlen(e->message));
    sb_puts(&b, "}");
    return srv_send_sbuf(s, c, e->status ? e->status : 500, "application/json", &b, NULL, NULL);
}

static enum MHD_Result answer(struct srv *s, struct MHD_Connection *c, struct conn *k,
                              enum srv_emb_kind kind) {
    struct srv_err e;
    memset(&e, 0, sizeof(e));
    struct srv_emb_req r;
    bool ollama = kind == SRV_EMB_OLLAMA || kind == SRV_EMB_OLLAMA_OLD;
    float *v = NULL;
    if (!s->emb) {
        srv_err_set(&e, 500, "server_error", NULL, NULL, "embeddings are not set up");
        return ollama ? send_ollama_err(s, c, &e) : srv_send_err(s, c, &e, NULL, NULL);
    }
    if (!srv_emb_parse(&s->emb->ts, kind, k->body ? k->body : "", k->body_len, &r, &e) ||
        compute(s, &r, &v, &e) != ANVIL_OK) {
        srv_emb_req_free(&r);
        return ollama ? send_ollama_err(s, c, &e) : srv_send_err(s, c, &e, NULL, NULL);
    }
    struct sbuf b;
    sb_init(&b);
    srv_emb_format(&r, v, anvil_model_n_embd(s->emb->slot[r.target].t.m), &b);
    char trunc[16];
    snprintf(trunc, sizeof(trunc), "%d", (int)r.n_truncated);
    bool cut = r.n_truncated > 0;
    free(v);
    srv_emb_req_free(&r);
    return srv_send_sbuf(s, c, 200, "application/json", &b, cut ? "X-Anvil-Truncated" : NULL,
                         cut ? trunc : NULL);
}

enum MHD_Result srv_post_embeddings(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                    const char *url) {
    (void)url;
    return answer(s, c, k, SRV_EMB_OPENAI);
}

enum MHD_Result srv_post_embedding(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url) {
    (void)url;
    return answer(s, c, k, SRV_EMB_LLAMA);
}

enum MHD_Result srv_post_rerank(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url) {
    (void)url;
    return answer(s, c, k, SRV_EMB_RERANK);
}

enum MHD_Result srv_emb_ollama(struct srv *s, struct MHD_Connection *c, struct conn *k,
                               bool legacy) {
    return answer(s, c, k, legacy ? SRV_EMB_OLLAMA_OLD : SRV_EMB_OLLAMA);
}
