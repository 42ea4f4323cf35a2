/*
 * http.c - libmicrohttpd glue: connections and their limits, routing,
 * request bodies, auth, the small GET routes, draining, and the daemon's
 * life cycle. Answers are queued through reply.c; the generation routes
 * are in generate.c; the chat page's files and /tokenize, /detokenize,
 * /props in webui.c, tokenize.c and props.c (srv_web.h), which know
 * nothing of connections.
 *
 * Threading: HTTP_WORKERS threads, each with its own epoll loop over its
 * share of the connections (MHD_USE_EPOLL_INTERNAL_THREAD with a thread
 * pool), not a thread per connection: an open connection costs a socket
 * and its buffers, so a thousand idle or slow clients cost memory, never
 * threads, and never stall service to the others. Nothing on a worker
 * blocks for long: a request that waits for the engine parks its
 * connection (generate.c). Parsing a request (chat template, tokenizer)
 * does run on the worker; a 4 MiB prompt holds its worker for a moment
 * while the other workers go on.
 *
 * Connections (struct sconn, through MHD_OPTION_NOTIFY_CONNECTION):
 *   - at most cfg.max_conn are served at once. The next ones, up to an
 *     eighth more (the `spare`), are accepted so that they can be told:
 *     their first request gets 503 with Retry-After and the connection is
 *     closed. Past that libmicrohttpd stops accepting, and new clients
 *     wait in the kernel's listen backlog until a connection closes.
 *   - a connection has cfg.header_timeout_s to deliver a whole request
 *     head, counted from when it opened or its previous request ended:
 *     an idle keep-alive connection, a client that sends nothing and a
 *     slowloris dripping one header byte at a time are all shut down by
 *     the sweep. libmicrohttpd's own timeout (cfg.timeout_s) only counts
 *     idle time, which a drip resets.
 *   - while a body is uploaded or a response written, cfg.timeout_s of
 *     silence closes the connection; a parked request has no timeout (a
 *     long generation is not idleness) but the sweep notices its client
 *     leaving.
 * The sweep runs every SWEEP_MS on a watcher thread (srv_run with
 * cfg.external). It shuts a socket down (shutdown(2), never close(2)):
 * libmicrohttpd then reads end-of-file and closes the connection itself.
 * It only touches sockets listed in s->conns, under conn_mu; an entry
 * leaves the list in the CLOSED notification, which libmicrohttpd sends
 * before it closes the socket, so the descriptor cannot have been reused.
 *
 * Limits on a request: headers are bounded by HEADER_MEM (libmicrohttpd
 * answers 431 above it); a body whose Content-Length is over max_body
 * gets 413 before a byte of it is read. A chunked body (no Content-Length)
 * that grows past max_body also gets 413, but only once it has been read
 * to its end: libmicrohttpd 0.9.x refuses a response queued in the middle
 * of an upload (MHD_queue_response returns MHD_NO and the connection is
 * closed), so the rest is read and dropped, up to DISCARD_MAX bytes; an
 * upload longer than that has its connection closed.
 *
 * Responses that libmicrohttpd writes itself, before any of this code
 * sees the request (a request line or header it cannot parse: 400; a
 * head over HEADER_MEM: 431; an HTTP version it does not speak: 505),
 * carry its short HTML body, not the OpenAI JSON error shape.
 *
 * Draining (srv_quiesce, on SIGTERM), what a replica behind a load
 * balancer must do: /health answers 503 {"status":"draining"}, every
 * other new request but /metrics gets 503 server_draining with
 * Retry-After before its auth or body is looked at, and every response
 * carries Connection: close, so that clients and balancers go to another
 * replica. The listening socket stays open and served: a closed one would
 * leave connections already in its backlog hanging, and a balancer's
 * probe would time out instead of reading the 503. In-flight requests go
 * on; srv_n_active counts them until their last byte is out.
 *
 * URLs are unescaped by srv_url_unescape (webui.c): "%00" stays literal,
 * where libmicrohttpd's own decoder would cut the path at the NUL.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "core/core.h"
#include "server/server.h"
#include "server/api_responses.h"
#include "server/srv_int.h"
#include "server/api_anthropic.h"
#include "server/srv_web.h"
#include "server/api_ollama.h"
#include "server/api_embed.h"

#define SWEEP_MS 100
#define HTTP_WORKERS 4
#define HEADER_MEM (32 * 1024)
#define DISCARD_MAX ((size_t)64 << 20) /* chunked bytes dropped past max_body before a 413 */

/* the OpenAPI document (src/server/openapi.json, made a C array by the
 * Makefile) */
extern const char srv_openapi_json[];
extern const size_t srv_openapi_json_len;

// ----------------------------------------------------------------------------
// connections

/* One TCP connection, from libmicrohttpd's STARTED to its CLOSED
 * notification. Fields under s->conn_mu. */
struct sconn {
    int fd;
    double t_head;   /* the current request head is awaited since (monotonic s) */
    bool in_request; /* its head is in: the head deadline does not apply */
    bool over_limit; /* opened with max_conn connections open: 503 */
    bool cut;        /* shut down by the sweep */
    struct sconn *prev, *next;
};

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    struct srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct sconn *sc = calloc(1, sizeof(*sc));
        *socket_context = sc;
        atomic_fetch_add(&s->metrics.conns_total, 1);
        atomic_fetch_add(&s->metrics.conns_open, 1);
        if (!sc) return; /* out of memory: served, but without a head deadline */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        sc->fd = ci ? ci->connect_fd : -1;
        sc->t_head = time_now_s();
        pthread_mutex_lock(&s->conn_mu);
        sc->next = s->conns;
        if (s->conns) s->conns->prev = sc;
        s->conns = sc;
        s->n_conns++;
        sc->over_limit = s->n_conns > s->cfg.max_conn;
        pthread_mutex_unlock(&s->conn_mu);
        return;
    }
    atomic_fetch_sub(&s->metrics.conns_open, 1);
    struct sconn *sc = *socket_context;
    if (!sc) return;
    *socket_context = NULL;
    pthread_mutex_lock(&s->conn_mu);
    if (sc->prev) sc->prev->next = sc->next;
    else s->conns = sc->next;
    if (sc->next) sc->next->prev = sc->prev;
    s->n_conns--;
    pthread_mutex_unlock(&s->conn_mu);
    free(sc);
}

static struct sconn *sconn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The head deadline: shut down connections still waiting for a whole
 * request head after header_timeout_s. */
static void sweep_heads(struct srv *s) {
    double now = time_now_s(), limit = (double)s->cfg.header_timeout_s;
    pthread_mutex_lock(&s->conn_mu);
    for (struct sconn *sc = s->conns; sc; sc = sc->next) {
        if (sc->in_request || sc->cut || sc->fd < 0 || now - sc->t_head <= limit) continue;
        shutdown(sc->fd, SHUT_RDWR);
        sc->cut = true;
        atomic_fetch_add(&s->metrics.conns_head_timeout, 1);
    }
    pthread_mutex_unlock(&s->conn_mu);
}

static void sweep(struct srv *s) {
    sweep_heads(s);
    srv_jobs_sweep(s);
}

static void *watcher_main(void *arg) {
    struct srv *s = arg;
    pthread_mutex_lock(&s->watch_mu);
    while (!s->watch_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->watch_cv, &s->watch_mu, &ts);
        if (s->watch_stop) break;
        pthread_mutex_unlock(&s->watch_mu);
        sweep(s);
        pthread_mutex_lock(&s->watch_mu);
    }
    pthread_mutex_unlock(&s->watch_mu);
    return NULL;
}

// ----------------------------------------------------------------------------
// GET routes

static enum MHD_Result get_health(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                  const char *url) {
    (void)k;
    (void)url;
    struct sbuf b;
    sb_init(&b);
    if (atomic_load(&s->draining)) {
        sb_puts(&b, "{\"status\":\"draining\"}");
        return srv_send_sbuf(s, c, 503, "application/json", &b, "Retry-After", "1");
    }
    sb_puts(&b, "{\"status\":\"ok\"}");
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static enum MHD_Result get_metrics(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url) {
    (void)k;
    (void)url;
    struct sbuf b;
    sb_init(&b);
    struct anvil_engine_stats st;
    memset(&st, 0, sizeof(st));
    anvil_engine_get_stats(s->engine, &st);
    srv_fmt_metrics(&b, &s->metrics, &st);
    return srv_send_sbuf(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", &b, NULL, NULL);
}

static enum MHD_Result get_openapi(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   const char *url) {
    (void)k;
    (void)url;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        srv_openapi_json_len, (void *)srv_openapi_json, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    return srv_queue(s, c, MHD_HTTP_OK, r);
}

static enum MHD_Result get_models(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                  const char *url) {
    (void)k;
    (void)url;
    struct sbuf b;
    sb_init(&b);
    srv_fmt_model_entry(&b, &s->info, false);
    if (b.len >= 2 && s->emb) { /* the embedding and rerank models join the list */
        b.len -= 2; /* before the closing "]}" */
        srv_emb_fmt_models(s, &b);
        sb_puts(&b, "]}");
    }
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static enum MHD_Result get_model(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url) {
    (void)k;
    const char *id = url + strlen("/v1/models/");
    if (strcmp(id, s->model_id) != 0) {
        struct sbuf eb;
        sb_init(&eb);
        if (srv_emb_fmt_model(s, id, &eb))
            return srv_send_sbuf(s, c, 200, "application/json", &eb, NULL, NULL);
        sb_free(&eb);
        /* OpenAI's answer to retrieving a model it does not have */
        struct srv_err e;
        srv_err_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                    "The model '%.100s' does not exist", id);
        return srv_send_err(s, c, &e, NULL, NULL);
    }
    struct sbuf b;
    sb_init(&b);
    srv_fmt_model_entry(&b, &s->info, true);
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static enum MHD_Result get_props(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url) {
    (void)k;
    (void)url;
    struct sbuf b;
    sb_init(&b);
    srv_fmt_props(&b, &s->info);
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

/* The chat page's files (webui.c): "/" and each asset's exact path. */
static enum MHD_Result get_asset(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url) {
    (void)k;
    const struct srv_asset *a = srv_asset_find(url);
    if (!a) { /* a route row without its file in src/server/webui/ */
        char msg[160];
        snprintf(msg, sizeof(msg), "Invalid URL (GET %.100s)", url);
        return srv_send_errf(s, c, 404, "invalid_request_error", NULL, NULL, NULL, msg);
    }
    unsigned status = 0;
    struct MHD_Response *r = srv_asset_response(
        a, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
        &status);
    if (!r) return MHD_NO;
    return srv_queue(s, c, status, r);
}

// ----------------------------------------------------------------------------
// POST /tokenize and /detokenize: answered on the HTTP worker (a pure
// function of the model, no engine)

static enum MHD_Result post_tok(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                bool detok) {
    struct sbuf b;
    struct srv_err err;
    sb_init(&b);
    bool ok = (detok ? srv_detokenize : srv_tokenize)(&s->info, k->body ? k->body : "",
                                                      k->body_len, &b, &err);
    if (!ok) {
        sb_free(&b);
        return srv_send_err(s, c, &err, NULL, NULL);
    }
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static enum MHD_Result post_tokenize(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                     const char *url) {
    (void)url;
    return post_tok(s, c, k, false);
}

static enum MHD_Result post_detokenize(struct srv *s, struct MHD_Connection *c,
                                       struct conn *k, const char *url) {
    (void)url;
    return post_tok(s, c, k, true);
}

/* POST /apply-template: the chat rendered with the model's template, no
 * engine (prompt.c). */
static enum MHD_Result post_apply_template(struct srv *s, struct MHD_Connection *c,
                                           struct conn *k, const char *url) {
    (void)url;
    struct sbuf b;
    struct srv_err err;
    memset(&err, 0, sizeof(err));
    sb_init(&b);
    if (!srv_apply_template(&s->info, k->body ? k->body : "", k->body_len, &b, &err)) {
        sb_free(&b);
        return srv_send_err(s, c, &err, NULL, NULL);
    }
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

// ----------------------------------------------------------------------------
// routing

/* Every endpoint, one row each; src/server/openapi.json documents the
 * same list (tests/py/test_server_openapi.py checks that they agree, and
 * that the page rows are the files of src/server/webui/). The page is
 * public: it asks for the API key itself and sends it with its API
 * calls. */
static const struct srv_route routes[] = {
    {"/health", SRV_GET, true, get_health, false},
    {"/openapi.json", SRV_GET, true, get_openapi, false},
    {"/metrics", SRV_GET, false, get_metrics, false},
    {"/props", SRV_GET, false, get_props, false},
    {"/v1/models", SRV_GET, false, get_models, false},
    {"/v1/models/", SRV_GET, false, get_model, false},
    {"/v1/completions", SRV_POST, false, srv_post_completions, false},
    {"/v1/chat/completions", SRV_POST, false, srv_post_chat, false},
    {"/infill", SRV_POST, false, srv_post_infill, false},
    {"/v1/responses", SRV_POST, false, srv_post_responses, false},
    {"/v1/responses/", SRV_GET, false, srv_get_response, false},
    {"/v1/responses/", SRV_DELETE, false, srv_delete_response, false},
    {"/tokenize", SRV_POST, false, post_tokenize, false},
    {"/detokenize", SRV_POST, false, post_detokenize, false},
    {"/apply-template", SRV_POST, false, post_apply_template, false},
    {"/v1/messages", SRV_POST, false, srv_post_messages, false},
    {"/v1/messages/count_tokens", SRV_POST, false, srv_post_count_tokens, false},
    {"/api/chat", SRV_POST, false, srv_ollama_chat, false},
    {"/api/generate", SRV_POST, false, srv_ollama_generate, false},
    {"/api/tags", SRV_GET, false, srv_ollama_tags, false},
    {"/api/show", SRV_POST, false, srv_ollama_show, false},
    {"/api/version", SRV_GET, false, srv_ollama_version, false},
    {"/api/ps", SRV_GET, false, srv_ollama_ps, false},
    {"/api/embed", SRV_POST, false, srv_ollama_embed, false},
    {"/api/embeddings", SRV_POST, false, srv_ollama_embed, false},
    {"/v1/embeddings", SRV_POST, false, srv_post_embeddings, false},
    {"/embeddings", SRV_POST, false, srv_post_embeddings, false},
    {"/embedding", SRV_POST, false, srv_post_embedding, false},
    {"/v1/rerank", SRV_POST, false, srv_post_rerank, false},
    {"/rerank", SRV_POST, false, srv_post_rerank, false},
    {"/", SRV_GET, true, get_asset, true},
    {"/index.html", SRV_GET, true, get_asset, true},
    {"/app.js", SRV_GET, true, get_asset, true},
    {"/style.css", SRV_GET, true, get_asset, true},
    {"/favicon.svg", SRV_GET, true, get_asset, true},
};

/* The row for url and method bit m (SRV_GET, ...; 0 = another method):
 * the first row of the path that takes m, else the path's first row (a
 * 405); *allow gets the methods of all the path's rows. */
static const struct srv_route *route_of(const struct srv *s, const char *url, unsigned m,
                                        unsigned *allow) {
    const struct srv_route *first = NULL, *hit = NULL;
    *allow = 0;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const char *p = routes[i].path;
        size_t n = strlen(p);
        if (routes[i].page && !s->cfg.webui) continue;
        /* "/" is the page, not a prefix */
        bool prefix = n > 1 && p[n - 1] == '/';
        if (prefix ? !strncmp(url, p, n) && url[n] != '\0' : !strcmp(url, p)) {
            if (first && strcmp(first->path, p)) break; /* another, shorter path */
            if (!first) first = &routes[i];
            if (!hit && (routes[i].methods & m)) hit = &routes[i];
            *allow |= routes[i].methods;
        }
    }
    return hit ? hit : first;
}

/* Constant-time comparison of h with the key. */
static bool key_eq(const struct srv *s, const char *h) {
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->api_key[i % b];
    return diff == 0;
}

/* The key as a bearer token, or in x-api-key (how Anthropic's clients
 * send it). */
static bool auth_ok(const struct srv *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (x && key_eq(s, x)) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    return key_eq(s, h);
}

/* Errors written before a route runs (unknown route, method, body too
 * large, too many connections, draining, no key) come in the shape of the
 * API the path belongs to, so that its clients read them: Anthropic's for
 * /v1/messages..., Ollama's {"error": "..."} for /api/..., OpenAI's for
 * the rest (the Responses API shares it). */
static const struct srv_dialect *path_dialect(const char *url) {
    if (!url) return NULL;
    if (!strncmp(url, "/v1/messages", 12) && (url[12] == 0 || url[12] == '/' || url[12] == '?'))
        return &srv_dialect_anthropic;
    if (!strncmp(url, "/api/", 5)) return &srv_dialect_ollama_chat;
    return NULL;
}

static enum MHD_Result path_errf(struct srv *s, struct MHD_Connection *c, const char *url,
                                 int status, const char *type, const char *code, const char *hdr,
                                 const char *val, const char *msg) {
    const struct srv_dialect *d = path_dialect(url);
    if (!d) return srv_send_errf(s, c, status, type, code, hdr, val, msg);
    struct srv_err e;
    srv_err_set(&e, status, type, code, NULL, "%s", msg);
    struct sbuf b;
    sb_init(&b);
    d->error(&b, &e);
    return srv_send_sbuf(s, c, status, "application/json", &b, hdr, val);
}

/* The 401 of a request without the key, in its route's error shape. */
static enum MHD_Result auth_refused(struct srv *s, struct MHD_Connection *c, const struct conn *k) {
    if (k->rt->fn == srv_post_messages || k->rt->fn == srv_post_count_tokens) {
        struct srv_err e;
        srv_err_set(&e, 401, "authentication_error", NULL, NULL,
                    "invalid x-api-key: send 'x-api-key: KEY' or 'Authorization: Bearer KEY'");
        return srv_send_dialect_err(s, c, &srv_dialect_anthropic, &e);
    }
    return path_errf(s, c, k->rt->path, 401, "invalid_request_error", "invalid_api_key",
                         MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer",
                         "Incorrect or missing API key: send 'Authorization: Bearer KEY'.");
}

/* A CORS preflight (OPTIONS): 204 with what a browser may send; the
 * Access-Control-Allow-Origin comes from srv_queue when the origin is
 * allowed (else the browser refuses the real request). */
static enum MHD_Result preflight(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                 const char *url) {
    (void)k;
    (void)url;
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"",
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST, DELETE, OPTIONS");
    if (srv_cors_origin(s, c)) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, DELETE, OPTIONS");
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                    "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                h && h[0] ? h : "Authorization, Content-Type, X-Api-Key");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    return srv_queue(s, c, 204, r);
}

static const struct srv_route preflight_route = {.path = "", .methods = SRV_GET, .open = true,
                                                 .fn = preflight};

/* First call for a request: only headers are in. Everything that can be
 * refused without the body is refused here, before a byte of it is read. */
static enum MHD_Result on_headers(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                  const char *url, const char *method) {
    struct sconn *sc = sconn_of(c);
    bool over = false;
    if (sc) {
        pthread_mutex_lock(&s->conn_mu);
        sc->in_request = true;
        over = sc->over_limit;
        pthread_mutex_unlock(&s->conn_mu);
    }
    k->responded = true; /* until a POST below wants its body */
    if (over) {
        atomic_fetch_add(&s->metrics.conns_refused, 1);
        char msg[160];
        snprintf(msg, sizeof(msg), "The server has too many open connections (limit %d). "
                 "Retry later.", s->cfg.max_conn);
        return path_errf(s, c, url, 503, "server_error", "too_many_connections", "Retry-After",
                             "1", msg);
    }
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    bool del = !strcmp(method, "DELETE");
    unsigned allow = 0;
    k->rt = route_of(s, url, get ? SRV_GET : post ? SRV_POST : del ? SRV_DELETE : 0, &allow);
    if (!k->rt) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Invalid URL (%.16s %.100s)", method, url);
        return path_errf(s, c, url, 404, "invalid_request_error", NULL, NULL, NULL, msg);
    }
    if (!strcmp(method, "OPTIONS") && s->cors) {
        /* a preflight carries no credentials: answered before auth, at
         * the request's last call as a GET is (below); without
         * --cors-origins OPTIONS is a method like any other (405) */
        k->rt = &preflight_route;
        get = true;
    }
    if (!(k->rt->methods & (get ? SRV_GET : post ? SRV_POST : del ? SRV_DELETE : 0))) {
        char msg[160], allowed[32];
        snprintf(msg, sizeof(msg), "Method %.16s is not allowed on %.100s", method, url);
        snprintf(allowed, sizeof(allowed), "%s%s%s", (allow & SRV_GET) ? "GET, HEAD" : "",
                 (allow & SRV_POST) ? ((allow & SRV_GET) ? ", POST" : "POST") : "",
                 (allow & SRV_DELETE) ? ((allow & ~SRV_DELETE) ? ", DELETE" : "DELETE") : "");
        return path_errf(s, c, url, 405, "invalid_request_error", NULL, MHD_HTTP_HEADER_ALLOW,
                             allowed, msg);
    }
    /* while draining only the probes answer: everything else is refused
     * before auth or body, so that a load balancer retries it elsewhere */
    if (atomic_load(&s->draining) && k->rt->fn != get_health && k->rt->fn != get_metrics)
        return path_errf(s, c, url, 503, "server_error", "server_draining", "Retry-After", "1",
                             "The server is shutting down: retry on another replica.");
    if (!k->rt->open && !auth_ok(s, c)) return auth_refused(s, c, k);
    if (get || del) {
        /* answered at the request's last call, once MHD has read the whole
         * request: libmicrohttpd 0.9 closes a connection whose response is
         * queued at this first call (it cannot tell whether a body
         * follows), which would cost every GET its keep-alive. A GET that
         * announces a body is answered now, and closed. */
        const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_TRANSFER_ENCODING);
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (te || (len && strcmp(len, "0") != 0)) return k->rt->fn(s, c, k, url);
        k->responded = false;
        return MHD_YES;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || *end) n = (unsigned long long)-1;
        if (n > s->cfg.max_body) {
            char msg[160];
            snprintf(msg, sizeof(msg), "The request body is over the limit of %zu bytes.",
                     s->cfg.max_body);
            return path_errf(s, c, url, 413, "invalid_request_error", "request_too_large",
                                 MHD_HTTP_HEADER_CONNECTION, "close", msg);
        }
        if (n > 0) {
            k->body = malloc((size_t)n + 1);
            if (!k->body) return MHD_NO;
            k->body_cap = (size_t)n;
        }
    }
    k->responded = false;
    return MHD_YES;
}

/* A piece of the body. */
static enum MHD_Result on_upload(struct srv *s, struct conn *k, const char *upload,
                                 size_t *upload_size) {
    size_t n = *upload_size;
    *upload_size = 0;
    if (!k->too_large && n > s->cfg.max_body - k->body_len) {
        /* a chunked body (no Content-Length) over the limit: MHD takes no
         * response in the middle of an upload, so the body is freed and
         * the rest is read and dropped; the 413 goes out at its end */
        k->too_large = true;
        free(k->body);
        k->body = NULL;
        k->body_len = k->body_cap = 0;
    }
    if (k->too_large) {
        k->discarded += n;
        if (k->discarded > DISCARD_MAX) { /* an endless upload: give up */
            k->responded = true;
            srv_metrics_status(&s->metrics, 413);
            return MHD_NO;
        }
        return MHD_YES;
    }
    if (k->body_len + n > k->body_cap) {
        size_t cap = k->body_cap ? k->body_cap * 2 : 4096;
        while (cap < k->body_len + n) cap *= 2;
        if (cap > s->cfg.max_body) cap = s->cfg.max_body;
        char *p = realloc(k->body, cap + 1);
        if (!p) return MHD_NO;
        k->body = p;
        k->body_cap = cap;
    }
    memcpy(k->body + k->body_len, upload, n);
    k->body_len += n;
    k->body[k->body_len] = '\0';
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **req_cls) {
    (void)version;
    struct srv *s = cls;
    struct conn *k = *req_cls;
    if (!k) {
        k = calloc(1, sizeof(*k));
        if (!k) return MHD_NO;
        *req_cls = k;
        return on_headers(s, c, k, url, method);
    }
    if (k->job) return srv_generate_resume(s, c, k); /* woken after parking */
    if (k->responded) return MHD_NO; /* answered already; do not read the rest */
    if (*upload_size) return on_upload(s, k, upload, upload_size);
    k->responded = true;
    if (k->too_large) {
        char msg[160];
        snprintf(msg, sizeof(msg), "The request body is over the limit of %zu bytes.",
                 s->cfg.max_body);
        return path_errf(s, c, url, 413, "invalid_request_error", "request_too_large",
                             MHD_HTTP_HEADER_CONNECTION, "close", msg);
    }
    return k->rt->fn(s, c, k, url);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    struct srv *s = cls;
    struct sconn *sc = sconn_of(c);
    if (sc) {
        /* a keep-alive connection now waits for its next request head */
        pthread_mutex_lock(&s->conn_mu);
        sc->in_request = false;
        sc->t_head = time_now_s();
        pthread_mutex_unlock(&s->conn_mu);
    }
    struct conn *k = *req_cls;
    if (!k) return;
    *req_cls = NULL;
    if (k->job) srv_job_closed(k->job);
    free(k->body);
    free(k);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const struct srv *s = cls;
    if (s->cfg.quiet) return;
    fputs("anvil serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

// ----------------------------------------------------------------------------
// life cycle

static int resolve(const char *host, int port, struct sockaddr_storage *ss, bool *v6) {
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *v6 = false;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *v6 = true;
        return 0;
    }
    return -1;
}

int srv_start(struct anvil_model *m, struct anvil_engine *e, const struct srv_config *cfg,
              struct srv **out, char *err, size_t err_cap) {
    struct sockaddr_storage ss;
    bool v6 = false;
    if (resolve(cfg->host, cfg->port, &ss, &v6) != 0) {
        snprintf(err, err_cap, "--host must be a numeric IPv4/IPv6 address or localhost, got '%s'",
                 cfg->host);
        return -1;
    }
    if (cfg->max_conn < 1 || cfg->header_timeout_s < 1 || cfg->timeout_s < 1) {
        snprintf(err, err_cap, "connection limit and timeouts must be positive");
        return -1;
    }
    struct srv *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_mutex_init(&s->watch_mu, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
    s->model = m;
    s->engine = e;
    s->cfg = *cfg;
    s->host = strdup(cfg->host);
    s->model_id = strdup(cfg->model_id);
    s->api_key = cfg->api_key && cfg->api_key[0] ? strdup(cfg->api_key) : NULL;
    s->replica_id = cfg->replica_id && cfg->replica_id[0] ? strdup(cfg->replica_id) : NULL;
    s->cors = cfg->cors_origins && cfg->cors_origins[0] ? strdup(cfg->cors_origins) : NULL;
    if (!s->host || !s->model_id || (cfg->api_key && cfg->api_key[0] && !s->api_key) ||
        (cfg->replica_id && cfg->replica_id[0] && !s->replica_id) ||
        (cfg->cors_origins && cfg->cors_origins[0] && !s->cors)) {
        snprintf(err, err_cap, "out of memory");
        srv_free(s);
        return -1;
    }
    s->cfg.host = s->host;
    s->cfg.model_id = s->model_id;
    s->cfg.api_key = s->api_key;
    s->cfg.replica_id = s->replica_id;
    s->cfg.cors_origins = s->cors;
    s->created = (long long)time(NULL);
    s->salt = (uint32_t)((uint64_t)s->created * 2654435761u ^ (uint64_t)getpid());
    srv_metrics_init(&s->metrics);
    s->info = (struct srv_info){
        .model = m,
        .model_id = s->model_id,
        .replica_id = s->replica_id ? s->replica_id : "",
        .n_ctx = cfg->n_ctx,
        .parallel = cfg->parallel,
        .webui = cfg->webui,
        .created = s->created,
    };

    struct anvil_engine_stats st;
    memset(&st, 0, sizeof(st));
    anvil_engine_get_stats(e, &st);
    s->lim = (struct srv_limits){
        .model = m,
        .model_id = s->model_id,
        .n_vocab = anvil_model_n_vocab(m),
        .n_ctx = cfg->n_ctx,
        .kv_tokens = anvil_engine_seq_capacity(e),
        .default_seed = cfg->default_seed,
        .cc = srv_ccache_new(), /* NULL (out of memory) only means no cache */
        .strict = cfg->strict,
        .has_reasoning_budget = cfg->has_reasoning_budget,
        .reasoning_budget = cfg->reasoning_budget,
    };
    { /* the tool-call format and reasoning markers, from the chat template */
        int32_t tn = anvil_model_meta_str(m, "tokenizer.chat_template", NULL, 0);
        char *tsrc = tn > 0 ? malloc((size_t)tn + 1) : NULL;
        if (tsrc) anvil_model_meta_str(m, "tokenizer.chat_template", tsrc, (size_t)tn + 1);
        /* a --chat-template-file's template is the one the model is shown */
        const char *jsrc = anvil_chat_template_text(m);
        srv_outfmt_detect(jsrc && anvil_chat_template_origin(m)[0] == 'f' ? jsrc : tsrc,
                          &s->lim.outfmt);
        free(tsrc);
    }
    if (srv_emb_init(s, err, err_cap) != 0) {
        srv_free(s);
        return -1;
    }

    /* accepted beyond max_conn only to be told 503 (file header) */
    int spare = cfg->max_conn / 8 > 16 ? cfg->max_conn / 8 : 16;
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (cfg->external)
        s->d = MHD_start_daemon(
            flags | MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_request, s,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned)cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)(cfg->max_conn + spare), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)HEADER_MEM, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_UNESCAPE_CALLBACK,
            srv_url_unescape, NULL, MHD_OPTION_END);
    else
        s->d = MHD_start_daemon(
            flags | MHD_USE_EPOLL_INTERNAL_THREAD | (v6 ? MHD_USE_IPv6 : 0), (uint16_t)cfg->port,
            NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_THREAD_POOL_SIZE,
            (unsigned)HTTP_WORKERS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(cfg->max_conn + spare),
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEM, MHD_OPTION_NOTIFY_COMPLETED,
            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
            MHD_OPTION_UNESCAPE_CALLBACK, srv_url_unescape, NULL, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, err_cap, "cannot listen on %s port %d: %s", cfg->host, cfg->port,
                 strerror(errno));
        srv_free(s);
        return -1;
    }
    if (!cfg->external) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
        s->port = di ? di->port : cfg->port;
        if (pthread_create(&s->watcher, NULL, watcher_main, s) != 0) {
            snprintf(err, err_cap, "cannot start a thread");
            srv_free(s);
            return -1;
        }
        s->watcher_on = true;
    }
    *out = s;
    return 0;
}

int srv_port(const struct srv *s) { return s->port; }

void srv_quiesce(struct srv *s) {
    if (!s || !s->d) return;
    /* the listening socket stays open on purpose (no MHD_quiesce_daemon):
     * see "Draining" in the header */
    atomic_store(&s->draining, true);
}

int srv_add_conn(struct srv *s, int fd) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!s->cfg.external || !s->d || atomic_load(&s->stopping)) {
        close(fd);
        return -1;
    }
    /* MHD closes fd when it fails */
    return MHD_add_connection(s->d, fd, (struct sockaddr *)&a, sizeof(a)) == MHD_YES ? 0 : -1;
}

void srv_run(struct srv *s) {
    if (!s->cfg.external || !s->d) return;
    MHD_run(s->d);
    sweep(s);
}

int srv_n_conns(struct srv *s) {
    pthread_mutex_lock(&s->conn_mu);
    int n = s->n_conns;
    pthread_mutex_unlock(&s->conn_mu);
    return n;
}

void srv_stop(struct srv *s) {
    if (!s || !s->d) return;
    if (s->watcher_on) {
        pthread_mutex_lock(&s->watch_mu);
        s->watch_stop = true;
        pthread_cond_signal(&s->watch_cv);
        pthread_mutex_unlock(&s->watch_mu);
        pthread_join(s->watcher, NULL);
        s->watcher_on = false;
    }
    /* MHD must not hold a suspended connection when it stops: wake every
     * parked request (they see `stopping` and close) and wait until MHD
     * has run each resumed one, for at most 5 s */
    atomic_store(&s->stopping, true);
    srv_jobs_wake_all(s);
    for (int i = 0; i < 5000 && atomic_load(&s->n_suspended) > 0; i++) {
        if (s->cfg.external)
            MHD_run(s->d);
        else
            usleep(1000);
    }
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void srv_free(struct srv *s) {
    if (!s) return;
    srv_stop(s);
    srv_emb_free(s);
    srv_ccache_free(s->lim.cc);
    free(s->host);
    free(s->model_id);
    free(s->api_key);
    free(s->replica_id);
    free(s->cors);
    pthread_cond_destroy(&s->watch_cv);
    pthread_mutex_destroy(&s->watch_mu);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
