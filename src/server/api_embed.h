/*
 * api_embed.h - embeddings and reranking routes (api_embed.c): the
 * request parser, shared with the fuzz harness (tests/fuzz/fuzz_embed.c),
 * and the handlers http.c and api_ollama.c route to.
 */
#ifndef ANVIL_API_EMBED_H
#define ANVIL_API_EMBED_H

#include "server/srv_int.h"

/* Inputs per request (OpenAI's limit); more is a 413. */
#define SRV_EMB_MAX_INPUTS 2048
/* Tokens of all inputs of one request together; more is a 413. */
#define SRV_EMB_MAX_TOKENS (1 << 20)

enum srv_emb_kind {
    SRV_EMB_OPENAI = 0,  /* POST /v1/embeddings */
    SRV_EMB_OLLAMA,      /* POST /api/embed */
    SRV_EMB_OLLAMA_OLD,  /* POST /api/embeddings (one "prompt", not normalized) */
    SRV_EMB_RERANK,      /* POST /v1/rerank, /rerank */
    SRV_EMB_LLAMA,       /* POST /embedding (llama-server's own shape; per-token
                            vectors under pooling none) */
};

/* A model a request may name. */
struct srv_emb_target {
    const struct anvil_model *m;
    const char *id;
    int32_t n_max; /* tokens per input */
    int pooling;   /* anvil_model_pooling(m) (a fuzz harness may pretend) */
};

/* Which targets a request may use: the request's "model" picks by id; a
 * request without one gets def_embed (embedding routes) or def_rerank. */
struct srv_emb_targets {
    const struct srv_emb_target *t;
    int n;
    int def_embed, def_rerank;
    bool strict; /* unknown fields are a 400 */
};

/* A parsed request; free with srv_emb_req_free. */
struct srv_emb_req {
    enum srv_emb_kind kind;
    int target;           /* index in srv_emb_targets */
    anvil_token **seqs;   /* (n) inputs, or (query, document) pairs when reranking */
    int32_t *lens;
    int32_t n;
    int64_t n_tokens;
    int32_t n_truncated;  /* inputs cut to n_max ("truncate": true) */
    bool base64;          /* encoding_format base64 */
    int32_t dims;         /* "dimensions"; 0 = all */
    bool normalize;
    bool per_token;       /* pooling none (SRV_EMB_LLAMA): one vector per token */
    /* reranking */
    char **docs;          /* (n) the documents' text, for return_documents */
    int32_t top_n;        /* 0 = all */
    bool return_docs;
    char model[128];      /* the name the request used (echoed), or the target's id */
};

/* Parse and validate body for route kind: tokens in range, lengths within
 * the target's n_max (or cut when the request says "truncate"), counts
 * within the limits. False with e set (400, 404 model_not_found, 413,
 * 500) on failure; out is then empty. */
bool srv_emb_parse(const struct srv_emb_targets *ts, enum srv_emb_kind kind, const char *body,
                   size_t len, struct srv_emb_req *out, struct srv_err *e);
void srv_emb_req_free(struct srv_emb_req *r);
/* Can target t serve this kind (pooling that makes a vector, or a rank
 * head)? False with a 400 naming why. */
bool srv_emb_check_target(const struct srv_emb_target *t, enum srv_emb_kind kind,
                          struct srv_err *e);
/* The answer of a request whose vectors (n, n_embd floats, normalized as
 * asked) or scores (n floats) are computed. */
void srv_emb_format(const struct srv_emb_req *r, const float *v, int n_embd, struct sbuf *b);

/* server glue (api_embed.c) */
int srv_emb_init(struct srv *s, char *err, size_t err_cap);
void srv_emb_free(struct srv *s);
/* The extra /v1/models entries (",{...}" each) of the embedding and
 * rerank models. */
void srv_emb_fmt_models(const struct srv *s, struct sbuf *b);
/* /v1/models/ID of an embedding or rerank model: true when id is one. */
bool srv_emb_fmt_model(const struct srv *s, const char *id, struct sbuf *b);
/* POST /embedding: llama-server's shape (per-token vectors under pooling none). */
enum MHD_Result srv_post_embedding(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url);
enum MHD_Result srv_post_embeddings(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                    const char *url);
enum MHD_Result srv_post_rerank(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url);
/* Ollama's /api/embed (legacy false) and /api/embeddings (legacy true). */
enum MHD_Result srv_emb_ollama(struct srv *s, struct MHD_Connection *c, struct conn *k,
                               bool legacy);

#endif
