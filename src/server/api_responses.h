/*
 * api_responses.h - the OpenAI Responses API (api_responses.c):
 * POST /v1/responses, GET and DELETE /v1/responses/{id}, and the
 * translation of a Responses body into the chat-completions shape that
 * srv_parse_request_json reads (exposed for the fuzz harness and tests).
 *
 * Kept responses live in one process-wide store (resp_store.h), created
 * on first use with bounds from the environment:
 *   ANVIL_RESPONSES_MAX        entries       (default 1024)
 *   ANVIL_RESPONSES_MAX_BYTES  bytes         (default 64 MiB)
 *   ANVIL_RESPONSES_TTL        seconds kept  (default 3600)
 */
#ifndef ANVIL_SRV_API_RESPONSES_H
#define ANVIL_SRV_API_RESPONSES_H

#include "server/srv_int.h"
#include "server/resp_store.h"

/* Routes (http.c). POST /v1/responses; GET /v1/responses/{id} (the kept
 * response object); DELETE /v1/responses/{id}. */
enum MHD_Result srv_post_responses(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url);
enum MHD_Result srv_get_response(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url);
enum MHD_Result srv_delete_response(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                    const char *url);

/* What one Responses request carries beyond the chat request: the echo
 * fields of its response object, its id, and the conversation to keep. */
struct resp_ctx;
void resp_ctx_free(struct resp_ctx *x);

/* A Responses body (len bytes, need not be NUL terminated) -> *chat, the
 * equivalent chat-completions object (free with cJSON_Delete), and *ctx.
 * st: where previous_response_id is looked up (NULL: every id is
 * unknown); now: the store's clock; id_seed: where the response's and
 * its items' ids come from. False with e filled (400 naming the field in
 * the Responses API's terms, 404 previous_response_not_found, 500 out of
 * memory); *chat and *ctx are then NULL. */
bool srv_responses_translate(const struct srv_limits *lim, struct resp_store *st,
                             const char *body, size_t len, double now, uint64_t id_seed,
                             struct cJSON **chat, struct resp_ctx **ctx, struct srv_err *e);

/* The response object of ctx in state status ("completed", ...) with
 * output text as one message (n bytes) and no usage: for tests and the
 * fuzz harness, which check that every shape is valid JSON. */
void srv_responses_fmt_text(struct sbuf *b, const struct resp_ctx *ctx, const char *status,
                            const char *text, size_t n);

/* The Responses dialect (errors: the OpenAI error object). */
extern const struct srv_dialect srv_dialect_responses;

#endif
