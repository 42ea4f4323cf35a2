/*
 * server.h - the OpenAI-compatible HTTP front door of anvil (`anvil serve`).
 *
 * src/server turns HTTP requests into anvil_engine_* calls and engine
 * events back into OpenAI JSON / Server-Sent Events. It only calls the
 * public API (include/anvil.h), so the engine stays usable as a library and
 * knows nothing about JSON (llama.cpp keeps JSON out of server_slot).
 *
 * It is linked into the CLI binary only, not into libanvil.a. The CLI
 * (tools/cli/cmd_serve.c) owns the process: argv, signals, model and
 * engine lifetime; this module owns the HTTP daemon.
 *
 * Life cycle: srv_start -> (requests) -> srv_quiesce -> wait for
 * srv_n_active() to reach 0, or give up -> srv_cancel_all -> srv_stop ->
 * anvil_engine_free -> srv_free -> anvil_model_free. srv_free comes after
 * the engine because a request still inside the engine gets its last
 * event (DONE) from anvil_engine_free, and that event lands in the server.
 */
#ifndef ANVIL_SERVER_H
#define ANVIL_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"

struct srv;

struct srv_config {
    const char *host;     /* numeric IPv4/IPv6 address or "localhost" */
    int port;             /* 0 = any free port (see srv_port) */
    const char *api_key;  /* NULL or "" = no key required */
    const char *model_id; /* name served in /v1/models and accepted in "model" */
    int timeout_s;        /* idle timeout of a connection uploading a body or
                             being sent a response (no byte either way) */
    int header_timeout_s; /* a connection's time to deliver a whole request
                             head, from its open or its previous request's end */
    int max_conn;         /* connections served at once; the next ones get 503 */
    int32_t n_ctx;        /* the engine's n_ctx: prompt + max_tokens limit */
    size_t max_body;      /* request body limit in bytes (413 above it) */
    /* No threads and no listening socket: the caller hands connected
     * sockets to srv_add_conn and drives everything with srv_run (and
     * steps the engine itself). For the HTTP fuzz harness and tests, so
     * that one thread runs a whole exchange deterministically. */
    bool external;
    bool quiet; /* no libmicrohttpd log lines on stderr */
    /* Seed of a request that gives none; 0 (the default) draws a fresh
     * one per request. A fixed seed makes the fuzz harness repeatable. */
    uint64_t default_seed;
    bool webui;           /* serve the chat page at / (else / is a 404) */
    const char *replica_id; /* NULL or "" = none; else sent as X-Anvil-Replica */
    int32_t parallel;     /* the engine's max_running (reported by /props) */
    /* A request field anvil does not know is a 400 (else it is ignored,
     * named in an X-Anvil-Ignored-Fields header and logged once). */
    bool strict;
    /* Browser origins allowed (CORS): NULL or "" = none, "*" = any, else
     * a comma-separated list of exact origins ("https://a.example"). */
    const char *cors_origins;
    /* --reasoning-budget: a thought's tokens at most for requests that
     * give no reasoning_budget (0: no thinking); unset: no limit */
    bool has_reasoning_budget;
    int32_t reasoning_budget;
    /* Embedding and reranking models served beside the chat model
     * (src/server/api_embed.c), or NULL; borrowed, they outlive the server.
     * Their ids name them in /v1/models and a request's "model". */
    struct anvil_model *embed_model, *rerank_model;
    const char *embed_model_id, *rerank_model_id;
    int32_t emb_threads; /* their contexts' threads; 0 = every online CPU */
};

/* Start the HTTP daemon on its own threads (none with cfg->external).
 * The server borrows the model and the engine (started by the caller, or
 * stepped by it with cfg->external): both must outlive srv_free. On
 * failure writes a one-line message to err and leaves *out unchanged. */
int srv_start(struct anvil_model *m, struct anvil_engine *e, const struct srv_config *cfg,
              struct srv **out, char *err, size_t err_cap);
/* The port actually bound (useful with port 0). */
int srv_port(const struct srv *s);
/* Start draining: /health answers 503 {"status":"draining"}, every new
 * request other than /health and /metrics gets 503 with Retry-After and
 * "Connection: close", in-flight requests continue. The socket keeps
 * accepting, so load balancers see the 503s instead of hanging. */
void srv_quiesce(struct srv *s);
/* Generation requests not yet over: submitted and not finished, or
 * finished with their answer still being sent. */
int srv_n_active(struct srv *s);
/* Cancel every in-flight generation (anvil_engine_cancel): streams end
 * with an error event and [DONE], waiting clients get 503. */
void srv_cancel_all(struct srv *s);
/* Stop the HTTP daemon: closes every connection and joins its thread;
 * waits give up at once. The engine may still hold requests. */
void srv_stop(struct srv *s);
/* Free the server (stops it first if needed). Call after
 * anvil_engine_free. NULL is a no-op. */
void srv_free(struct srv *s);

/* cfg->external only. Hand a connected stream socket to the server, which
 * owns it from then on (closes it), failure included. 0 on success. */
int srv_add_conn(struct srv *s, int fd);
/* cfg->external only. One non-blocking round: read, parse, answer and
 * write what the sockets allow, then the sweep (disconnected parked
 * requests, request-head deadlines). */
void srv_run(struct srv *s);
/* Connections open (accepted and not yet closed). */
int srv_n_conns(struct srv *s);

#endif
