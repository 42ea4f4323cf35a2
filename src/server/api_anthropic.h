/*
 * api_anthropic.h - the Anthropic Messages API (POST /v1/messages and
 * /v1/messages/count_tokens): the routes, the request translation into
 * the chat-completions shape, and the dialect (api_anthropic.c).
 */
#ifndef ANVIL_SRV_API_ANTHROPIC_H
#define ANVIL_SRV_API_ANTHROPIC_H

#include "server/srv_int.h"

/* What the translation decided beyond struct srv_req. */
struct srv_anth_opts {
    bool thinking;        /* thinking enabled: REASONING parts become thinking blocks */
    long long max_tokens; /* as asked (0 for count_tokens) */
    char ignored[256];    /* unknown top-level fields ignored, comma separated ("" = none) */
};

/* Parse an Anthropic Messages body (count_only: a count_tokens body, no
 * max_tokens) into *out, through the chat-completions checks
 * (srv_parse_request_json). On failure fills e (400 invalid_request_error,
 * 404 for another model, 500 out of memory) and returns false; *out is
 * then empty (safe to srv_req_free). Never reads past body[len]. */
bool srv_anthropic_parse(const struct srv_limits *lim, const char *body, size_t len,
                         bool count_only, struct srv_req *out, struct srv_anth_opts *o,
                         struct srv_err *e);

/* Anthropic's name for the stop sequence that ended a generation, found
 * by replaying the generated tokens toks (n) against the request's stop
 * strings as the engine does: the index into stop, or -1 (none matched:
 * an end-of-generation token). */
int srv_anthropic_stop_index(const struct anvil_model *m, const struct srv_tok *toks,
                             int32_t n, char *const *stop, int n_stop);

/* The dialects: thinking blocks shown (thinking enabled) or dropped. */
extern const struct srv_dialect srv_dialect_anthropic;
extern const struct srv_dialect srv_dialect_anthropic_thinking;

/* The routes. */
enum MHD_Result srv_post_messages(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                  const char *url);
enum MHD_Result srv_post_count_tokens(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                      const char *url);

#endif
