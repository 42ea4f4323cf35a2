/*
 * http.c - libmicrohttpd glue: routing, limits, auth, and the hand-off
 * between HTTP threads and the engine's driver thread.
 *
 * Threading: MHD runs one thread per connection (MHD_USE_THREAD_PER_
 * CONNECTION). Chosen over the epoll pool + MHD_suspend_connection because
 * (1) MHD does not detect disconnects nor run timeouts on suspended
 * connections (microhttpd.h, MHD_suspend_connection), and a client that
 * goes away while its request waits must cancel it so the KV blocks come
 * back; (2) a blocking wait on a condition variable is simple and has no
 * suspend/resume races; (3) concurrency is bounded anyway by the engine
 * (max_running + max_queue) and by MHD_OPTION_CONNECTION_LIMIT, so one
 * thread per connection costs at most a few hundred mostly idle threads.
 *
 * Hand-off: each generation request is a `struct job`. The engine callback
 * (driver thread) appends the event to the job under the job's mutex and
 * signals; it never blocks on a client. Token records go into arrays of
 * max_tokens slots (the engine never emits more), text into a pending
 * buffer that the HTTP thread empties on every drain, so a job holds at
 * most one request's output. The HTTP thread waits on the condition
 * variable in slices of WAIT_SLICE_MS and, between slices, polls its
 * socket for POLLRDHUP: a client gone mid-stream or while still queued
 * cancels its request (anvil_engine_cancel). Writes to a dead socket and
 * MHD's own timeout (--timeout) end the request the same way, through
 * the request-completed callback.
 *
 * A job is reference counted: the connection, the streaming response and
 * the engine (until DONE) each hold one.
 *
 * Limits: headers are bounded by MHD_OPTION_CONNECTION_MEMORY_LIMIT
 * (MHD answers 431 above it); a body whose Content-Length is over
 * max_body gets 413 before a byte of it is read. A chunked body (no
 * Content-Length) that grows past max_body also gets 413, but only once
 * it has been read to its end: libmicrohttpd 0.9.x refuses a response
 * queued in the middle of an upload (MHD_queue_response returns MHD_NO
 * and the connection is closed), so the rest is read and dropped, up to
 * DISCARD_MAX bytes; an upload longer than that has its connection closed.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/server.h"
#include "server/srv_int.h"
#include "server/srv_web.h"

#define WAIT_SLICE_MS 100
#define HEADER_MEM (32 * 1024)
#define DISCARD_MAX ((size_t)64 << 20) /* chunked bytes dropped past max_body before a 413 */

struct job;

struct srv {
    struct MHD_Daemon *d;
    struct anvil_model *model;
    struct anvil_engine *engine;
    struct srv_config cfg;
    char *host, *api_key, *model_id, *replica_id; /* owned copies of cfg strings */
    struct srv_info info; /* for /props, /v1/models, /tokenize */
    struct srv_limits lim;
    struct srv_metrics metrics;
    int port;
    long long created;
    uint32_t salt;
    _Atomic uint64_t next_seq;
    atomic_bool draining; /* srv_quiesce: new requests get 503 */
    atomic_bool stopping; /* srv_stop: waits give up */
    pthread_mutex_t mu;   /* jobs list */
    struct job *jobs;     /* submitted, not yet DONE */
    int n_jobs;
    atomic_int n_live;    /* jobs not yet freed: their answer may still be on the way out */
};

// ----------------------------------------------------------------------------
// jobs

struct job {
    struct srv *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs; /* under mu */
    anvil_req_id id;
    bool id_set;
    struct job *prev, *next; /* srv->jobs, under srv->mu */
    bool listed;

    /* the request, fixed after submit */
    struct srv_req req;
    struct srv_resp_info ri;
    char idstr[48];
    int fd; /* client socket, for disconnect polling */

    /* written by the engine callback under mu */
    int32_t cap;             /* token slots (max_tokens) */
    int32_t n_ev;            /* token events so far */
    int32_t *ev_len;         /* (cap,) text bytes released with event i */
    struct srv_tok *ev_tok;  /* (cap,) when logprobs */
    anvil_token *top_tok;    /* (cap, k) */
    float *top_lp;           /* (cap, k) */
    int32_t k;               /* alternatives kept per token */
    struct sbuf pend;        /* text not yet taken by the HTTP thread */
    bool done;
    enum anvil_finish finish;
    int32_t n_prompt, n_gen;
    char errmsg[200];
    struct timespec t_last; /* last token event (ITL) */

    /* HTTP thread only */
    int32_t consumed; /* events formatted so far */
    struct sbuf rx;   /* text taken in the last drain */
    struct sbuf out;  /* formatted bytes for the wire */
    size_t out_pos;
    size_t text_sent; /* completion text bytes so far */
    double t_check;   /* last peer_gone check (monotonic seconds) */
    struct sbuf full; /* non-streaming: whole text */
    bool sent_first, sent_done;
};

static void job_free(struct job *j) {
    srv_req_free(&j->req);
    free(j->ev_len);
    free(j->ev_tok);
    free(j->top_tok);
    free(j->top_lp);
    sb_free(&j->pend);
    sb_free(&j->rx);
    sb_free(&j->out);
    sb_free(&j->full);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    struct srv *s = j->srv;
    free(j);
    atomic_fetch_sub(&s->n_live, 1);
}

static void job_ref(struct job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

static void job_unref(struct job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

static void job_unref_cb(void *cls) { job_unref(cls); }

/* Takes ownership of *req (leaves it empty). */
static struct job *job_new(struct srv *s, struct srv_req *req, int fd) {
    struct job *j = calloc(1, sizeof(*j));
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->srv = s;
    atomic_fetch_add(&s->n_live, 1);
    j->refs = 1;
    j->fd = fd;
    j->req = *req;
    memset(req, 0, sizeof(*req));
    j->cap = j->req.max_tokens;
    j->ev_len = calloc((size_t)j->cap, sizeof(*j->ev_len));
    bool ok = j->ev_len && sb_reserve(&j->pend, 1024);
    if (ok && j->req.logprobs) {
        j->k = j->req.top_logprobs > 0 ? j->req.top_logprobs : 1;
        j->ev_tok = calloc((size_t)j->cap, sizeof(*j->ev_tok));
        j->top_tok = calloc((size_t)j->cap * (size_t)j->k, sizeof(*j->top_tok));
        j->top_lp = calloc((size_t)j->cap * (size_t)j->k, sizeof(*j->top_lp));
        ok = j->ev_tok && j->top_tok && j->top_lp;
    }
    if (!ok) {
        job_free(j);
        return NULL;
    }
    bool chat = j->req.kind == SRV_KIND_CHAT;
    snprintf(j->idstr, sizeof(j->idstr), "%s-%08x%012llx", chat ? "chatcmpl" : "cmpl", s->salt,
             (unsigned long long)atomic_fetch_add(&s->next_seq, 1));
    j->ri = (struct srv_resp_info){
        .kind = j->req.kind,
        .id = j->idstr,
        .created = (long long)time(NULL),
        .model_id = s->model_id,
        .model = s->model,
        .logprobs = j->req.logprobs,
        .top_logprobs = j->req.top_logprobs,
    };
    return j;
}

static void job_list(struct srv *s, struct job *j) {
    pthread_mutex_lock(&s->mu);
    j->next = s->jobs;
    j->prev = NULL;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    j->listed = true;
    s->n_jobs++;
    pthread_mutex_unlock(&s->mu);
}

static void job_unlist(struct srv *s, struct job *j) {
    pthread_mutex_lock(&s->mu);
    if (j->listed) {
        if (j->prev) j->prev->next = j->next;
        else s->jobs = j->next;
        if (j->next) j->next->prev = j->prev;
        j->listed = false;
        s->n_jobs--;
    }
    pthread_mutex_unlock(&s->mu);
}

/* Engine callback, on the driver thread: record, signal, never block. */
static void on_event(void *user, const struct anvil_event *ev) {
    struct job *j = user;
    struct srv *s = j->srv;
    bool done = ev->type == ANVIL_EVENT_DONE;
    bool overflow = false;
    pthread_mutex_lock(&j->mu);
    if (ev->text_len > 0) {
        sb_put(&j->pend, ev->text, (size_t)ev->text_len);
        overflow = j->pend.oom;
    }
    if (ev->type == ANVIL_EVENT_TOKEN) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (j->n_ev > 0)
            srv_hist_observe(&s->metrics.itl, (double)(t.tv_sec - j->t_last.tv_sec) +
                                                  (double)(t.tv_nsec - j->t_last.tv_nsec) * 1e-9);
        j->t_last = t;
        if (j->n_ev < j->cap) {
            int32_t i = j->n_ev++;
            j->ev_len[i] = ev->text_len > 0 ? ev->text_len : 0;
            if (j->ev_tok) {
                struct srv_tok *r = &j->ev_tok[i];
                r->token = ev->token;
                r->logprob = ev->logprob;
                r->n_top = ev->n_top < j->k ? ev->n_top : j->k;
                if (r->n_top < 0 || !ev->top_tokens || !ev->top_logprobs) r->n_top = 0;
                r->top_tokens = j->top_tok + (size_t)i * (size_t)j->k;
                r->top_logprobs = j->top_lp + (size_t)i * (size_t)j->k;
                for (int32_t a = 0; a < r->n_top; a++) {
                    j->top_tok[(size_t)i * (size_t)j->k + (size_t)a] = ev->top_tokens[a];
                    j->top_lp[(size_t)i * (size_t)j->k + (size_t)a] = ev->top_logprobs[a];
                }
            }
        } else if (j->cap > 0 && ev->text_len > 0) {
            /* more tokens than max_tokens: an engine bug; keep the text */
            j->ev_len[j->cap - 1] += ev->text_len;
        }
    } else if (done) {
        j->done = true;
        j->finish = ev->finish;
        j->n_prompt = ev->n_prompt;
        j->n_gen = ev->n_gen;
        if (ev->error) snprintf(j->errmsg, sizeof(j->errmsg), "%s", ev->error);
        if (overflow) {
            j->finish = ANVIL_FINISH_ERROR;
            snprintf(j->errmsg, sizeof(j->errmsg), "out of memory");
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (done) {
        if (ev->n_gen > 0 && ev->ttft_s >= 0) srv_hist_observe(&s->metrics.ttft, ev->ttft_s);
        int f = ev->finish >= 0 && ev->finish < 5 ? (int)ev->finish : 4;
        atomic_fetch_add(&s->metrics.finished[f], 1);
        atomic_fetch_sub(&s->metrics.in_flight, 1);
        job_unlist(s, j);
        job_unref(j); /* the engine's reference */
    } else if (overflow) {
        anvil_engine_cancel(s->engine, ev->id); /* allowed from the callback */
    }
}

static void job_cancel(struct job *j) {
    pthread_mutex_lock(&j->mu);
    bool live = j->id_set && !j->done;
    anvil_req_id id = j->id;
    pthread_mutex_unlock(&j->mu);
    if (live) anvil_engine_cancel(j->srv->engine, id);
}

/* True when the peer has closed or reset its end. A client that only
 * half-closes after sending (shutdown(SHUT_WR)) also reads as gone; curl,
 * browsers and the OpenAI clients never do that. */
static bool peer_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

enum wait_res { WAIT_DATA, WAIT_GONE, WAIT_STOP };

/* Wait until the job has new events or is done, then move its pending
 * text into j->rx. *n_ev and *done are a consistent snapshot: rx holds the
 * text of events [consumed, n_ev) and, when done, the DONE text. */
static enum wait_res job_wait(struct job *j, int32_t *n_ev, bool *done) {
    /* also between events: a non-streaming request's events keep coming
     * while its client is gone, and nothing is written to notice it */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
    if (t - j->t_check >= WAIT_SLICE_MS * 1e-3) {
        j->t_check = t;
        if (peer_gone(j->fd)) return WAIT_GONE;
    }
    pthread_mutex_lock(&j->mu);
    while (j->n_ev == j->consumed && j->pend.len == 0 && !j->done) {
        if (atomic_load(&j->srv->stopping)) {
            pthread_mutex_unlock(&j->mu);
            return WAIT_STOP;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000L;
        }
        int rc = pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (rc == ETIMEDOUT && j->n_ev == j->consumed && j->pend.len == 0 && !j->done) {
            pthread_mutex_unlock(&j->mu);
            if (peer_gone(j->fd)) return WAIT_GONE;
            pthread_mutex_lock(&j->mu);
        }
    }
    *n_ev = j->n_ev;
    *done = j->done;
    sb_clear(&j->rx);
    sb_put(&j->rx, j->pend.p, j->pend.len);
    sb_clear(&j->pend);
    pthread_mutex_unlock(&j->mu);
    return j->rx.oom ? WAIT_STOP : WAIT_DATA;
}

// ----------------------------------------------------------------------------
// streaming

static const struct srv_tok *toks_at(const struct job *j, int32_t from) {
    return j->ev_tok ? j->ev_tok + from : NULL;
}

static void stream_error(struct job *j, int status, const char *type, const char *msg) {
    struct srv_err e;
    srv_err_set(&e, status, type, NULL, NULL, "%s", msg);
    sb_puts(&j->out, "data: ");
    srv_fmt_error(&j->out, &e);
    sb_puts(&j->out, "\n\n");
}

/* Format what the last drain brought into j->out. */
static void stream_format(struct job *j, int32_t n_ev, bool done) {
    size_t pos = 0;
    int32_t lp_from = j->consumed;
    for (int32_t i = j->consumed; i < n_ev; i++) {
        size_t len = (size_t)j->ev_len[i];
        if (len > j->rx.len - pos) len = j->rx.len - pos;
        if (len == 0) continue; /* held text: its logprobs ride with the next chunk */
        int32_t nt = j->ev_tok ? i + 1 - lp_from : 0;
        srv_fmt_chunk(&j->out, &j->ri, j->rx.p + pos, len, toks_at(j, lp_from), nt, false, NULL,
                      j->text_sent);
        pos += len;
        j->text_sent += len;
        lp_from = i + 1;
    }
    j->consumed = n_ev;
    if (!done) return;
    size_t tail = j->rx.len - pos;
    int32_t nt = j->ev_tok ? n_ev - lp_from : 0;
    if (tail || nt > 0)
        srv_fmt_chunk(&j->out, &j->ri, j->rx.p + pos, tail, toks_at(j, lp_from), nt, false, NULL,
                      j->text_sent);
    j->text_sent += tail;
    if (j->finish == ANVIL_FINISH_ERROR)
        stream_error(j, 500, "server_error", j->errmsg[0] ? j->errmsg : "generation failed");
    else if (j->finish == ANVIL_FINISH_CANCELLED)
        stream_error(j, 503, "server_error", "the request was cancelled: the server is "
                     "shutting down");
    else
        srv_fmt_chunk(&j->out, &j->ri, "", 0, NULL, 0, false, srv_finish_str(j->finish),
                      j->text_sent);
    if (j->req.include_usage) srv_fmt_usage_chunk(&j->out, &j->ri, j->n_prompt, j->n_gen);
    sb_puts(&j->out, "data: [DONE]\n\n");
    j->sent_done = true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct job *j = cls;
    for (;;) {
        if (j->out_pos < j->out.len) {
            size_t n = j->out.len - j->out_pos;
            if (n > max) n = max;
            memcpy(buf, j->out.p + j->out_pos, n);
            j->out_pos += n;
            return (ssize_t)n;
        }
        if (j->sent_done || j->out.oom) return MHD_CONTENT_READER_END_OF_STREAM;
        sb_clear(&j->out);
        j->out_pos = 0;
        if (j->req.kind == SRV_KIND_CHAT && !j->sent_first) {
            /* the role chunk goes out at once, as OpenAI does */
            srv_fmt_chunk(&j->out, &j->ri, "", 0, NULL, 0, true, NULL, 0);
            j->sent_first = true;
            continue;
        }
        int32_t n_ev;
        bool done;
        enum wait_res w = job_wait(j, &n_ev, &done);
        if (w != WAIT_DATA) {
            job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        stream_format(j, n_ev, done);
    }
}

// ----------------------------------------------------------------------------
// responses

struct conn {
    int route;
    char *body;
    size_t body_len, body_cap;
    struct job *job;
    bool responded;
    bool too_large;   /* chunked body past max_body: dropping the rest, then 413 */
    size_t discarded; /* bytes dropped so far */
};

/* Queue r with the headers every response carries, count it, drop our
 * reference. While draining, keep-alive connections are closed so a load
 * balancer reconnects (to another replica) for its next request. */
static enum MHD_Result queue(struct srv *s, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r) {
    if (s->replica_id) MHD_add_response_header(r, "X-Anvil-Replica", s->replica_id);
    if (atomic_load(&s->draining)) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    srv_metrics_status(&s->metrics, (int)status);
    return ret;
}

static enum MHD_Result send_sbuf(struct srv *s, struct MHD_Connection *c, int status,
                                 const char *ctype, struct sbuf *b, const char *extra_hdr,
                                 const char *extra_val) {
    if (b->oom) {
        sb_free(b);
        sb_puts(b, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                   "\"param\":null,\"code\":null}}");
        status = 500;
        ctype = "application/json";
        if (b->oom) return MHD_NO;
    }
    size_t len = 0;
    char *p = sb_take(b, &len);
    if (!p) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(p);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (extra_hdr) MHD_add_response_header(r, extra_hdr, extra_val);
    return queue(s, c, (unsigned)status, r);
}

static enum MHD_Result send_err(struct srv *s, struct MHD_Connection *c, const struct srv_err *e,
                                const char *hdr, const char *val) {
    struct sbuf b;
    sb_init(&b);
    srv_fmt_error(&b, e);
    return send_sbuf(s, c, e->status, "application/json", &b, hdr, val);
}

static enum MHD_Result send_errf(struct srv *s, struct MHD_Connection *c, int status,
                                 const char *type, const char *code, const char *hdr,
                                 const char *val, const char *msg) {
    struct srv_err e;
    srv_err_set(&e, status, type, code, NULL, "%s", msg);
    return send_err(s, c, &e, hdr, val);
}

// ----------------------------------------------------------------------------
// routes

enum {
    R_NONE,
    R_HEALTH,
    R_METRICS,
    R_MODELS,
    R_MODEL,
    R_COMPLETIONS,
    R_CHAT,
    R_STATIC,     /* the chat page's files (webui.c) */
    R_TOKENIZE,   /* extra.c */
    R_DETOKENIZE,
    R_PROPS,
};

static int route_of(const struct srv *s, const char *url) {
    if (s->cfg.webui && srv_asset_find(url)) return R_STATIC;
    if (!strcmp(url, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(url, "/detokenize")) return R_DETOKENIZE;
    if (!strcmp(url, "/props")) return R_PROPS;
    if (!strcmp(url, "/health")) return R_HEALTH;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(url, "/v1/models")) return R_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) return R_MODEL;
    if (!strcmp(url, "/v1/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return R_CHAT;
    return R_NONE;
}

static bool route_is_post(int r) {
    return r == R_COMPLETIONS || r == R_CHAT || r == R_TOKENIZE || r == R_DETOKENIZE;
}

/* Constant-time comparison of the bearer token with the key. */
static bool auth_ok(const struct srv *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->api_key[i % b];
    return diff == 0;
}

static enum MHD_Result handle_get(struct srv *s, struct MHD_Connection *c, int route,
                                  const char *url) {
    struct sbuf b;
    sb_init(&b);
    switch (route) {
    case R_HEALTH:
        if (atomic_load(&s->draining)) {
            sb_puts(&b, "{\"status\":\"draining\"}");
            return send_sbuf(s, c, 503, "application/json", &b, "Retry-After", "1");
        }
        sb_puts(&b, "{\"status\":\"ok\"}");
        return send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
    case R_METRICS: {
        struct anvil_engine_stats st;
        memset(&st, 0, sizeof(st));
        anvil_engine_get_stats(s->engine, &st);
        srv_fmt_metrics(&b, &s->metrics, &st);
        return send_sbuf(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", &b, NULL, NULL);
    }
    case R_STATIC: {
        unsigned status = 0;
        struct MHD_Response *r =
            srv_asset_response(srv_asset_find(url),
                               MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                           MHD_HTTP_HEADER_IF_NONE_MATCH),
                               &status);
        if (!r) return MHD_NO;
        return queue(s, c, status, r);
    }
    case R_PROPS:
        srv_fmt_props(&b, &s->info);
        return send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
    case R_MODELS:
        srv_fmt_model_entry(&b, &s->info, false);
        return send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
    case R_MODEL:
        if (strcmp(url + 11, s->model_id) != 0) {
            struct srv_err e;
            srv_err_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                        "The model '%.100s' does not exist", url + 11);
            return send_err(s, c, &e, NULL, NULL);
        }
        srv_fmt_model_entry(&b, &s->info, true);
        return send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
    }
    return MHD_NO;
}

static enum MHD_Result submit_error(struct srv *s, struct MHD_Connection *c, anvil_status st,
                                    const char *msg) {
    if (st == ANVIL_ERR_INVALID)
        return send_errf(s, c, 400, "invalid_request_error", NULL, NULL, NULL, msg);
    if (st == ANVIL_ERR_KV_FULL) /* the queue is full (what can never fit is INVALID) */
        return send_errf(s, c, 503, "server_error", "engine_overloaded", "Retry-After", "1",
                         "The server is overloaded: its request queue is full. Retry later.");
    return send_errf(s, c, 500, "server_error", NULL, NULL, NULL, msg);
}

/* POST /tokenize and /detokenize: answered on the HTTP thread. */
static enum MHD_Result handle_tok(struct srv *s, struct MHD_Connection *c, struct conn *k) {
    struct sbuf b;
    struct srv_err err;
    sb_init(&b);
    bool ok = (k->route == R_TOKENIZE ? srv_tokenize : srv_detokenize)(
        &s->info, k->body ? k->body : "", k->body_len, &b, &err);
    if (!ok) {
        sb_free(&b);
        return send_err(s, c, &err, NULL, NULL);
    }
    return send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

static enum MHD_Result handle_generate(struct srv *s, struct MHD_Connection *c, struct conn *k) {
    struct srv_req req;
    struct srv_err err;
    enum srv_kind kind = k->route == R_CHAT ? SRV_KIND_CHAT : SRV_KIND_COMPLETION;
    if (!srv_parse_request(&s->lim, kind, k->body ? k->body : "", k->body_len, &req, &err)) {
        srv_req_free(&req);
        return send_err(s, c, &err, NULL, NULL);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct job *j = job_new(s, &req, ci ? ci->connect_fd : -1);
    srv_req_free(&req);
    if (!j) return send_errf(s, c, 500, "server_error", NULL, NULL, NULL, "out of memory");
    k->job = j;

    struct anvil_request_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.prompt = j->req.prompt;
    rp.n_prompt = j->req.n_prompt;
    rp.max_tokens = j->req.max_tokens;
    rp.sampling = j->req.sampling;
    rp.ignore_eos = j->req.ignore_eos;
    rp.stop = (const char *const *)j->req.stop;
    rp.n_stop = j->req.n_stop;
    rp.top_logprobs = j->req.logprobs ? j->k : 0;

    job_ref(j); /* the engine's, dropped at DONE */
    job_list(s, j);
    atomic_fetch_add(&s->metrics.in_flight, 1);
    char msg[256] = "";
    anvil_req_id id = 0;
    anvil_status st = anvil_engine_submit(s->engine, &rp, on_event, j, &id, msg, sizeof(msg));
    if (st != ANVIL_OK) {
        atomic_fetch_sub(&s->metrics.in_flight, 1);
        job_unlist(s, j);
        job_unref(j);
        return submit_error(s, c, st, msg[0] ? msg : anvil_status_str(st));
    }
    pthread_mutex_lock(&j->mu);
    j->id = id;
    j->id_set = true;
    pthread_mutex_unlock(&j->mu);

    if (j->req.stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, j,
                                              job_unref_cb);
        if (!r) {
            job_cancel(j);
            return MHD_NO;
        }
        job_ref(j); /* the response's, dropped by job_unref_cb */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        /* nginx: pass the stream through even where proxy_buffering is on */
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        return queue(s, c, MHD_HTTP_OK, r);
    }

    /* non-streaming: collect the whole completion, then answer */
    for (;;) {
        int32_t n_ev;
        bool done;
        enum wait_res w = job_wait(j, &n_ev, &done);
        if (w != WAIT_DATA) {
            job_cancel(j);
            return MHD_NO; /* client gone or server stopping: close */
        }
        sb_put(&j->full, j->rx.p, j->rx.len);
        j->consumed = n_ev;
        if (done) break;
    }
    if (j->finish == ANVIL_FINISH_ERROR)
        return send_errf(s, c, 500, "server_error", NULL, NULL, NULL,
                         j->errmsg[0] ? j->errmsg : "generation failed");
    if (j->finish == ANVIL_FINISH_CANCELLED)
        return send_errf(s, c, 503, "server_error", NULL, NULL, NULL,
                         "the request was cancelled: the server is shutting down");
    struct sbuf b;
    sb_init(&b);
    srv_fmt_full(&b, &j->ri, j->full.p ? j->full.p : "", j->full.len, toks_at(j, 0),
                 j->ev_tok ? j->consumed : 0, srv_finish_str(j->finish), j->n_prompt, j->n_gen);
    return send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

/* First call for a request: only headers are in. Everything that can be
 * refused without the body is refused here, before a byte of it is read. */
static enum MHD_Result on_headers(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                  const char *url, const char *method) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    k->route = route_of(s, url);
    if (k->route == R_NONE) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Invalid URL (%.16s %.100s)", method, url);
        k->responded = true;
        return send_errf(s, c, 404, "invalid_request_error", NULL, NULL, NULL, msg);
    }
    bool want_post = route_is_post(k->route);
    if ((want_post && !post) || (!want_post && !get)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Method %.16s is not allowed on %.100s", method, url);
        k->responded = true;
        return send_errf(s, c, 405, "invalid_request_error", NULL, MHD_HTTP_HEADER_ALLOW,
                         want_post ? "POST" : "GET, HEAD", msg);
    }
    /* while draining only the probes answer: everything else is refused
     * before auth or body, so a load balancer retries it elsewhere */
    if (atomic_load(&s->draining) && k->route != R_HEALTH && k->route != R_METRICS) {
        k->responded = true;
        return send_errf(s, c, 503, "server_error", "server_draining", "Retry-After", "1",
                         "The server is shutting down: retry on another replica.");
    }
    /* the page and /health are public: the page asks for the key itself */
    if (k->route != R_HEALTH && k->route != R_STATIC && !auth_ok(s, c)) {
        k->responded = true;
        return send_errf(s, c, 401, "invalid_request_error", "invalid_api_key",
                         MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer",
                         "Incorrect or missing API key: send 'Authorization: Bearer KEY'.");
    }
    if (get) {
        k->responded = true;
        return handle_get(s, c, k->route, url);
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
            k->responded = true;
            return send_errf(s, c, 413, "invalid_request_error", "request_too_large",
                             MHD_HTTP_HEADER_CONNECTION, "close", msg);
        }
        if (n > 0) {
            k->body = malloc((size_t)n + 1);
            if (!k->body) return MHD_NO;
            k->body_cap = (size_t)n;
        }
    }
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
    if (k->responded) return MHD_NO; /* answered already; do not read the rest */
    if (*upload_size) {
        size_t n = *upload_size;
        if (!k->too_large && n > s->cfg.max_body - k->body_len) {
            /* a chunked body (no Content-Length) over the limit: MHD takes
             * no response in the middle of an upload, so the body is freed
             * and the rest is read and dropped; the 413 goes out at its end */
            k->too_large = true;
            free(k->body);
            k->body = NULL;
            k->body_len = k->body_cap = 0;
        }
        if (k->too_large) {
            *upload_size = 0;
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
        *upload_size = 0;
        return MHD_YES;
    }
    k->responded = true;
    if (k->too_large) {
        char msg[160];
        snprintf(msg, sizeof(msg), "The request body is over the limit of %zu bytes.",
                 s->cfg.max_body);
        return send_errf(s, c, 413, "invalid_request_error", "request_too_large",
                         MHD_HTTP_HEADER_CONNECTION, "close", msg);
    }
    if (k->route == R_TOKENIZE || k->route == R_DETOKENIZE) return handle_tok(s, c, k);
    return handle_generate(s, c, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    struct conn *k = *req_cls;
    if (!k) return;
    *req_cls = NULL;
    if (k->job) {
        /* completed OK means the stream or answer went out whole; anything
         * else (client gone, timeout, shutdown) must free the request */
        job_cancel(k->job);
        job_unref(k->job);
    }
    free(k->body);
    free(k);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
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
    struct srv *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, err_cap, "out of memory");
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->model = m;
    s->engine = e;
    s->cfg = *cfg;
    s->host = strdup(cfg->host);
    s->model_id = strdup(cfg->model_id);
    s->api_key = cfg->api_key && cfg->api_key[0] ? strdup(cfg->api_key) : NULL;
    s->replica_id = cfg->replica_id && cfg->replica_id[0] ? strdup(cfg->replica_id) : NULL;
    if (!s->host || !s->model_id || (cfg->api_key && cfg->api_key[0] && !s->api_key) ||
        (cfg->replica_id && cfg->replica_id[0] && !s->replica_id)) {
        snprintf(err, err_cap, "out of memory");
        srv_free(s);
        return -1;
    }
    s->cfg.host = s->host;
    s->cfg.model_id = s->model_id;
    s->cfg.api_key = s->api_key;
    s->cfg.replica_id = s->replica_id;
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
        .kv_tokens = (int64_t)st.kv_blocks_total * st.kv_block_tokens,
    };

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conn,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_MEM,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_UNESCAPE_CALLBACK, srv_url_unescape, NULL, MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, err_cap, "cannot listen on %s port %d: %s", cfg->host, cfg->port,
                 strerror(errno));
        srv_free(s);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *out = s;
    return 0;
}

int srv_port(const struct srv *s) { return s->port; }

void srv_quiesce(struct srv *s) {
    if (!s || !s->d) return;
    /* The listening socket stays open on purpose (no MHD_quiesce_daemon):
     * a load balancer's probe or request then gets a prompt 503 and moves
     * on, where a closed or unserved socket leaves connections hanging in
     * the backlog until the process exits. */
    atomic_store(&s->draining, true);
}

int srv_n_active(struct srv *s) {
    /* not n_jobs: a job leaves that list at DONE, while its last bytes may
     * still be on their way to the client, and srv_stop would cut them */
    return atomic_load(&s->n_live);
}

void srv_cancel_all(struct srv *s) {
    /* collect ids first: anvil_engine_cancel must not run under s->mu,
     * which the driver thread takes in on_event */
    pthread_mutex_lock(&s->mu);
    int cap = s->n_jobs;
    anvil_req_id *ids = cap > 0 ? malloc((size_t)cap * sizeof(*ids)) : NULL;
    int n = 0;
    for (struct job *j = s->jobs; ids && j && n < cap; j = j->next) {
        pthread_mutex_lock(&j->mu);
        if (j->id_set && !j->done) ids[n++] = j->id;
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) anvil_engine_cancel(s->engine, ids[i]);
    free(ids);
}

void srv_stop(struct srv *s) {
    if (!s || !s->d) return;
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void srv_free(struct srv *s) {
    if (!s) return;
    srv_stop(s);
    free(s->host);
    free(s->model_id);
    free(s->api_key);
    free(s->replica_id);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
