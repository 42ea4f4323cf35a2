/*
 * api_ollama.h - Ollama's API (api_ollama.c): the route handlers http.c
 * lists, and the request translation the tests and the fuzz harness call.
 * Included by http.c after srv_int.h.
 */
#ifndef ANVIL_API_OLLAMA_H
#define ANVIL_API_OLLAMA_H

#include "server/srv_int.h"

/* POST /api/chat, POST /api/generate: generation through srv_generate,
 * answered as newline-delimited JSON (stream absent or true) or one JSON
 * object; errors {"error": "..."} with 400, 404 (unknown model), 500. */
enum MHD_Result srv_ollama_chat(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url);
enum MHD_Result srv_ollama_generate(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                    const char *url);
/* GET /api/tags, POST /api/show, GET /api/version, GET /api/ps: the
 * served model described in Ollama's shapes. */
enum MHD_Result srv_ollama_tags(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url);
enum MHD_Result srv_ollama_show(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url);
enum MHD_Result srv_ollama_version(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url);
enum MHD_Result srv_ollama_ps(struct srv *s, struct MHD_Connection *c, struct conn *k,
                              const char *url);
/* POST /api/embed and /api/embeddings: 501 in Ollama's error shape (no
 * embeddings in anvil yet). */
enum MHD_Result srv_ollama_embed(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url);

/* What a translated request carries besides struct srv_req. */
struct srv_ollama_req {
    bool generate;   /* /api/generate (else /api/chat) */
    bool load_only;  /* no prompt / no messages: Ollama's "load the model" call */
    bool unload;     /* ... with keep_alive 0 ("unload"; the model stays loaded) */
    char model[160]; /* the name the client sent, echoed in every answer */
};

/* Parse an Ollama body of /api/chat (generate false) or /api/generate
 * into *out (through srv_parse_request_json; options applied to the
 * sampler, num_predict and num_ctx to max_tokens). On failure e is filled
 * (400 bad field, 404 unknown model, 500 out of memory) and *out is
 * empty. A load-only call (o->load_only) succeeds with *out empty.
 * Never reads past body[len]. */
bool srv_ollama_parse(const struct srv_limits *lim, bool generate, const char *body,
                      size_t len, struct srv_req *out, struct srv_ollama_req *o,
                      struct srv_err *e);

/* The dialects: chat answers carry "message", generate answers "response". */
extern const struct srv_dialect srv_dialect_ollama_chat;
extern const struct srv_dialect srv_dialect_ollama_generate;

#endif
