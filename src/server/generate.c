/*
 * generate.c - POST /v1/completions and /v1/chat/completions: a validated
 * request becomes a `job` in the engine, and the engine's events become
 * one JSON answer or a Server-Sent Events stream.
 *
 * Nothing here blocks an HTTP worker (http.c runs a few epoll workers for
 * every connection). A request that waits for the engine *parks* its
 * connection (MHD_suspend_connection: MHD stops polling it) and the
 * engine's event callback, on the driver thread, resumes it when there is
 * something to send: every token for a stream, the end for a whole answer.
 *
 * No lost wake-up: parking checks for news and suspends under the job's
 * mutex, and the callback records news and resumes under the same mutex,
 * so a resume always follows its suspend (libmicrohttpd leaves a resume
 * of a connection that is not suspended undefined) and an event that
 * lands between a check and a suspend is never missed. `parked` says a
 * suspend is pending a resume; whoever clears it resumes.
 *
 * Disconnects: libmicrohttpd does not watch a suspended socket, so the
 * sweep (srv_jobs_sweep, every SWEEP_MS from http.c's watcher) polls the
 * sockets of parked requests for POLLRDHUP and cancels the requests of
 * clients gone; the engine then frees their KV blocks and its DONE event
 * resumes the connection, which is closed. A connection that is not
 * parked is read and written by MHD, which notices a dead peer itself and
 * reports the request complete (srv_job_closed cancels it).
 *
 * Tool calls (toolcall.c): when the output may be a call, its text goes
 * through a splitter that tells content from the call's arguments; a
 * stream sends the call as tool_calls deltas (the first with its id and
 * name) and ends with finish_reason "tool_calls" when the call is
 * complete (the whole output matches the call's constraint).
 *
 * Storage: token records go into arrays of max_tokens slots (the engine
 * never emits more), text into a pending buffer that the HTTP side empties
 * on every drain, so a job holds at most one request's output. A job is
 * reference counted: the connection, the streaming response and the
 * engine (until DONE) each hold one. srv->n_live counts the jobs not yet
 * freed: a drain (srv_n_active) waits for it, so an answer is not cut
 * between DONE and its last byte.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "server/srv_int.h"

struct job {
    struct srv *srv;
    pthread_mutex_t mu;
    int refs; /* under mu */
    anvil_req_id id;
    bool id_set;
    struct job *prev, *next; /* srv->jobs, under srv->mu */
    bool listed;

    /* the request, fixed after submit */
    struct srv_req req;
    struct srv_resp_info ri;
    char idstr[48];
    int fd;                      /* client socket, for the disconnect sweep */
    struct MHD_Connection *conn; /* under mu; NULL once MHD closed the request */

    /* parking, under mu */
    bool parked;  /* suspended, waiting for a resume */
    bool resumed; /* resumed, its handler has not run since (n_suspended) */
    bool gone;    /* the sweep saw the client leave */

    /* written by the engine callback under mu */
    int32_t cap;            /* token slots (max_tokens) */
    int32_t n_ev;           /* token events so far */
    int32_t *ev_len;        /* (cap,) text bytes released with event i */
    struct srv_tok *ev_tok; /* (cap,) when logprobs */
    anvil_token *top_tok;   /* (cap, k) */
    float *top_lp;          /* (cap, k) */
    int32_t k;              /* alternatives kept per token */
    struct sbuf pend;       /* text not yet taken by the HTTP side */
    bool done;
    enum anvil_finish finish;
    int32_t n_prompt, n_gen;
    char errmsg[200];
    double t_last;          /* last token event (ITL), time_now_s */

    /* HTTP side only (one handler runs at a time for a connection) */
    int32_t consumed; /* events formatted so far */
    bool seen_done;   /* the drain that saw done has been taken */
    struct sbuf rx;   /* text taken in the last drain */
    struct sbuf out;  /* formatted bytes for the wire */
    size_t out_pos;
    struct sbuf full; /* non-streaming, or a possible tool call: whole text */
    bool sent_first, sent_done;

    /* the dialect answering, its state, and the choice's output parser */
    const struct srv_dialect *d;
    void *dstate;
    struct srv_gen_view view;
    struct srv_usage usage;
    struct srv_outparse *op;
    /* the choice whole, accumulated from its parts (also when streaming:
     * stream_end gets it) */
    struct sbuf content, reasoning;
    struct srv_call_out *calls;
    struct sbuf *cargs; /* (cap_calls,) each call's arguments */
    int n_calls, cap_calls;
};

// ----------------------------------------------------------------------------
// jobs

static void job_free(struct job *j) {
    struct srv *s = j->srv;
    srv_req_free(&j->req);
    free(j->ev_len);
    free(j->ev_tok);
    free(j->top_tok);
    free(j->top_lp);
    sb_free(&j->pend);
    sb_free(&j->rx);
    sb_free(&j->out);
    sb_free(&j->full);
    srv_outparse_free(j->op);
    if (j->d && j->d->free_state && j->dstate) j->d->free_state(j->dstate);
    sb_free(&j->content);
    sb_free(&j->reasoning);
    for (int i = 0; i < j->n_calls; i++) sb_free(&j->cargs[i]);
    free(j->cargs);
    free(j->calls);
    pthread_mutex_destroy(&j->mu);
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
static struct job *job_new(struct srv *s, struct srv_req *req, struct MHD_Connection *c,
                           const struct srv_dialect *d) {
    struct job *j = calloc(1, sizeof(*j));
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    j->srv = s;
    atomic_fetch_add(&s->n_live, 1);
    j->refs = 1;
    j->conn = c;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->req = *req;
    memset(req, 0, sizeof(*req));
    j->d = d;
    uint64_t id_seed = ((uint64_t)s->salt << 32) ^ (uint64_t)atomic_load(&s->next_seq) ^
                       (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    /* a completion's text is the model's raw continuation: never split */
    struct srv_outfmt raw = {.tool_format = SRV_TOOLFMT_JSON,
                             .reasoning_format = SRV_REASONING_NONE};
    j->op = srv_outparse_new(j->req.kind == SRV_KIND_CHAT ? &s->lim.outfmt : &raw, j->req.tools,
                             j->req.reasoning_open, id_seed);
    if (d->make_state) j->dstate = d->make_state();
    j->cap = j->req.max_tokens;
    j->ev_len = calloc((size_t)j->cap, sizeof(*j->ev_len));
    bool ok = j->ev_len && j->op && (!d->make_state || j->dstate) && sb_reserve(&j->pend, 1024);
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
    j->view = (struct srv_gen_view){
        .ri = &j->ri, .req = &j->req, .state = j->dstate, .n_choices = 1, .usage = &j->usage};
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

static void job_cancel(struct job *j) {
    pthread_mutex_lock(&j->mu);
    bool live = j->id_set && !j->done;
    anvil_req_id id = j->id;
    pthread_mutex_unlock(&j->mu);
    if (live) anvil_engine_cancel(j->srv->engine, id);
}

// ----------------------------------------------------------------------------
// parking

/* Under j->mu: resume a parked connection. */
static void wake_locked(struct job *j) {
    if (!j->parked) return;
    j->parked = false;
    j->resumed = true;
    MHD_resume_connection(j->conn);
}

/* Under j->mu: is there anything the HTTP side has not taken? */
static bool news_locked(const struct job *j) {
    return j->n_ev != j->consumed || j->pend.len > 0 || (j->done && !j->seen_done);
}

/* A handler of this job's connection runs: a resume (if any) has been
 * carried out by MHD. */
static void job_running(struct job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->resumed) {
        j->resumed = false;
        atomic_fetch_sub(&j->srv->n_suspended, 1);
    }
    pthread_mutex_unlock(&j->mu);
}

/* Suspend the connection until the engine has news: any event for a
 * stream, the end for a whole answer (tokens_wake false). False, and not
 * suspended, when there is news already or the server is stopping: the
 * caller goes on. */
static bool job_park(struct job *j, bool tokens_wake) {
    struct srv *s = j->srv;
    pthread_mutex_lock(&j->mu);
    bool news = tokens_wake ? news_locked(j) : j->done;
    if (news || j->gone || !j->conn || atomic_load(&s->stopping)) {
        pthread_mutex_unlock(&j->mu);
        return false;
    }
    atomic_fetch_add(&s->n_suspended, 1);
    MHD_suspend_connection(j->conn);
    j->parked = true;
    pthread_mutex_unlock(&j->mu);
    return true;
}

/* Move what the engine sent since the last drain into j->rx. *n_ev and
 * *done are a consistent snapshot: rx holds the text of events
 * [consumed, n_ev) and, when done, the DONE text. False when there was
 * nothing new. */
static bool job_take(struct job *j, int32_t *n_ev, bool *done) {
    pthread_mutex_lock(&j->mu);
    bool news = news_locked(j);
    *n_ev = j->n_ev;
    *done = j->done;
    if (j->done) j->seen_done = true;
    sb_clear(&j->rx);
    sb_put(&j->rx, j->pend.p, j->pend.len);
    sb_clear(&j->pend);
    pthread_mutex_unlock(&j->mu);
    return news;
}

// ----------------------------------------------------------------------------
// engine events (driver thread)

/* Record, wake, never block. */
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
        double t = time_now_s();
        if (j->n_ev > 0) srv_hist_observe(&s->metrics.itl, t - j->t_last);
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
    if (done || j->req.stream) wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    if (done) {
        if (ev->n_gen > 0 && ev->ttft_s >= 0) srv_hist_observe(&s->metrics.ttft, ev->ttft_s);
        int f = ev->finish >= 0 && ev->finish < SRV_N_FINISH ? (int)ev->finish : ANVIL_FINISH_ERROR;
        atomic_fetch_add(&s->metrics.finished[f], 1);
        atomic_fetch_sub(&s->metrics.in_flight, 1);
        job_unlist(s, j);
        job_unref(j); /* the engine's reference */
    } else if (overflow) {
        anvil_engine_cancel(s->engine, ev->id); /* allowed from the callback */
    }
}

// ----------------------------------------------------------------------------
// streaming

static const struct srv_tok *toks_at(const struct job *j, int32_t from) {
    return j->ev_tok ? j->ev_tok + from : NULL;
}

/* The choice whole: one part more. False when out of memory. */
static bool job_accumulate(struct job *j, const struct srv_part *p) {
    switch (p->kind) {
    case SRV_PART_CONTENT: sb_put(&j->content, p->text, p->n); return !j->content.oom;
    case SRV_PART_REASONING: sb_put(&j->reasoning, p->text, p->n); return !j->reasoning.oom;
    case SRV_PART_CALL_BEGIN: {
        if (j->n_calls == j->cap_calls) {
            int cap = j->cap_calls ? 2 * j->cap_calls : 2;
            struct srv_call_out *calls = realloc(j->calls, (size_t)cap * sizeof(*calls));
            if (!calls) return false;
            j->calls = calls;
            struct sbuf *cargs = realloc(j->cargs, (size_t)cap * sizeof(*cargs));
            if (!cargs) return false;
            j->cargs = cargs;
            j->cap_calls = cap;
        }
        struct srv_call_out *co = &j->calls[j->n_calls];
        memset(co, 0, sizeof(*co));
        snprintf(co->id, sizeof(co->id), "%s", p->id ? p->id : "");
        snprintf(co->name, sizeof(co->name), "%s", p->name ? p->name : "");
        sb_init(&j->cargs[j->n_calls]);
        j->n_calls++;
        return true;
    }
    case SRV_PART_CALL_ARGS:
        if (j->n_calls == 0) return true;
        sb_put(&j->cargs[j->n_calls - 1], p->text, p->n);
        return !j->cargs[j->n_calls - 1].oom;
    case SRV_PART_CALL_END:
        if (j->n_calls > 0) j->calls[j->n_calls - 1].whole = true;
        return true;
    }
    return true;
}

/* One feed of the output parser: the tokens whose logprobs ride on the
 * first part written, and whether one was. */
struct feed {
    struct job *j;
    const struct srv_tok *toks;
    int32_t nt;
    bool wrote;
    bool oom;
};

static void on_part(void *user, const struct srv_part *p) {
    struct feed *f = user;
    struct job *j = f->j;
    if (!job_accumulate(j, p)) f->oom = true;
    if (!j->req.stream) return;
    bool takes = p->kind != SRV_PART_CALL_END;
    bool lp = takes && !f->wrote;
    j->d->stream_part(&j->out, &j->view, 0, p, lp ? f->toks : NULL, lp ? f->nt : 0);
    if (takes) f->wrote = true;
}

/* Whether the output ended as it should (not cut by max_tokens, a stop
 * string or an error): with a possible tool call, the whole output must
 * also match the call's constraint. */
static bool output_complete(const struct job *j) {
    if (j->finish != ANVIL_FINISH_STOP) return false;
    if (j->req.tools == SRV_TOOLS_NONE || !j->req.constraint) return true;
    return anvil_constraint_matches(j->req.constraint, j->full.p ? j->full.p : "", j->full.len);
}

/* The choice whole, from what was accumulated. */
static void job_choice(struct job *j, struct srv_choice *ch) {
    static char empty[1];
    for (int i = 0; i < j->n_calls; i++) {
        j->calls[i].args = j->cargs[i].p && j->cargs[i].len ? j->cargs[i].p : empty;
        j->calls[i].n_args = j->cargs[i].len;
    }
    bool called = false;
    for (int i = 0; i < j->n_calls; i++) called |= j->calls[i].whole;
    const char *finish = srv_finish_str(j->finish);
    if (called) finish = "tool_calls";
    *ch = (struct srv_choice){
        .index = 0,
        .content = j->content.p ? j->content.p : empty,
        .n_content = j->content.len,
        .reasoning = j->reasoning.p ? j->reasoning.p : empty,
        .n_reasoning = j->reasoning.len,
        .calls = j->calls,
        .n_calls = j->n_calls,
        .toks = toks_at(j, 0),
        .n_toks = j->ev_tok ? j->consumed : 0,
        .finish = finish,
        .engine_finish = j->finish,
        .n_gen = j->n_gen,
    };
}

/* The error a generation that did not finish well answers with; false
 * for one that did. */
static bool job_error(const struct job *j, struct srv_err *e) {
    if (j->finish == ANVIL_FINISH_ERROR)
        srv_err_set(e, 500, "server_error", NULL, NULL, "%s",
                    j->errmsg[0] ? j->errmsg : "generation failed");
    else if (j->finish == ANVIL_FINISH_CONSTRAINT) /* text the model cannot spell */
        srv_err_set(e, 400, "invalid_request_error", "constraint_unsatisfiable", NULL, "%s",
                    j->errmsg);
    else if (j->finish == ANVIL_FINISH_CANCELLED)
        srv_err_set(e, 503, "server_error", NULL, NULL,
                    "the request was cancelled: the server is shutting down");
    else
        return false;
    return true;
}

/* One piece of output through the output parser; the parts go out as the
 * dialect's stream. Returns whether a part carrying logprobs was written. */
static bool stream_text(struct job *j, const char *s, size_t n, const struct srv_tok *toks,
                        int32_t nt) {
    if (j->req.tools != SRV_TOOLS_NONE) sb_put(&j->full, s, n);
    struct feed f = {.j = j, .toks = toks, .nt = nt};
    srv_outparse_feed(j->op, s, n, on_part, &f);
    if (f.oom) j->out.oom = true;
    return f.wrote;
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
        if (stream_text(j, j->rx.p + pos, len, toks_at(j, lp_from), nt)) lp_from = i + 1;
        pos += len;
    }
    j->consumed = n_ev;
    if (!done) return;
    size_t tail = j->rx.len - pos;
    int32_t nt = j->ev_tok ? n_ev - lp_from : 0;
    if (tail && stream_text(j, j->rx.p + pos, tail, toks_at(j, lp_from), nt)) {
        lp_from = n_ev;
        nt = 0;
    }
    struct feed f = {.j = j, .toks = toks_at(j, lp_from), .nt = nt};
    srv_outparse_end(j->op, output_complete(j), on_part, &f);
    if (f.oom) j->out.oom = true;
    if (!f.wrote && nt > 0) { /* logprobs of tokens whose text was all held back */
        struct srv_part p = {.kind = SRV_PART_CONTENT, .text = "", .n = 0};
        j->d->stream_part(&j->out, &j->view, 0, &p, toks_at(j, lp_from), nt);
    }
    j->usage = (struct srv_usage){.n_prompt = j->n_prompt, .n_gen = j->n_gen};
    struct srv_err e;
    if (job_error(j, &e)) {
        j->d->stream_error(&j->out, &j->view, &e);
    } else {
        struct srv_choice ch;
        job_choice(j, &ch);
        j->d->stream_end(&j->out, &j->view, &ch, 1, &j->usage);
    }
    j->sent_done = true;
}

/* MHD's content reader for a stream: bytes ready, or 0 after parking the
 * connection until the next event. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    struct job *j = cls;
    job_running(j);
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
        if (!j->sent_first) { /* the dialect's opening goes out at once */
            j->d->stream_start(&j->out, &j->view);
            j->sent_first = true;
            continue;
        }
        int32_t n_ev;
        bool done;
        if (job_take(j, &n_ev, &done)) {
            if (j->rx.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
            stream_format(j, n_ev, done);
            continue;
        }
        if (job_park(j, true)) return 0;
        /* not parked: news came in meanwhile (take it), or the client is
         * gone or the server stopping (end the stream) */
        pthread_mutex_lock(&j->mu);
        bool end = j->gone || atomic_load(&j->srv->stopping);
        pthread_mutex_unlock(&j->mu);
        if (end) {
            job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

// ----------------------------------------------------------------------------
// the routes

static enum MHD_Result submit_error(struct srv *s, struct MHD_Connection *c,
                                    const struct srv_dialect *d, anvil_status st,
                                    const char *msg) {
    struct srv_err e;
    if (st == ANVIL_ERR_INVALID)
        srv_err_set(&e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
    else if (st == ANVIL_ERR_KV_FULL) /* the queue is full (what can never fit is INVALID) */
        srv_err_set(&e, 503, "server_error", "engine_overloaded", NULL,
                    "The server is overloaded: its request queue is full. Retry later.");
    else
        srv_err_set(&e, 500, "server_error", NULL, NULL, "%s", msg);
    return srv_send_dialect_err(s, c, d, &e);
}

enum MHD_Result srv_generate(struct srv *s, struct MHD_Connection *c, struct conn *k,
                             struct srv_req *req, const struct srv_dialect *d) {
    struct job *j = job_new(s, req, c, d);
    srv_req_free(req);
    if (!j) {
        struct srv_err e;
        srv_oom(&e);
        return srv_send_dialect_err(s, c, d, &e);
    }
    k->job = j;

    struct anvil_request_params rp;
    memset(&rp, 0, sizeof(rp));
    rp.prompt = j->req.prompt;
    rp.n_prompt = j->req.n_prompt;
    rp.max_tokens = j->req.max_tokens;
    rp.sampling = j->req.sampling;
    rp.ignore_eos = j->req.ignore_eos;
    rp.spec = j->req.spec;
    rp.spec_k = j->req.spec_k;
    rp.stop = (const char *const *)j->req.stop;
    rp.n_stop = j->req.n_stop;
    rp.top_logprobs = j->req.logprobs ? j->k : 0;
    rp.constraint = j->req.constraint; /* the request takes its own reference */

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
        return submit_error(s, c, d, st, msg[0] ? msg : anvil_status_str(st));
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
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, d->stream_ctype);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        /* nginx: pass the stream through even where proxy_buffering is on */
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        return srv_queue(s, c, MHD_HTTP_OK, r);
    }
    return srv_generate_resume(s, c, k);
}

static enum MHD_Result post_openai(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                   enum srv_kind kind) {
    struct srv_req req;
    struct srv_err err;
    if (!srv_parse_request(&s->lim, kind, k->body ? k->body : "", k->body_len, &req, &err)) {
        srv_req_free(&req);
        return srv_send_dialect_err(s, c, &srv_dialect_openai, &err);
    }
    return srv_generate(s, c, k, &req, &srv_dialect_openai);
}

enum MHD_Result srv_post_completions(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                     const char *url) {
    (void)url;
    return post_openai(s, c, k, SRV_KIND_COMPLETION);
}

enum MHD_Result srv_post_chat(struct srv *s, struct MHD_Connection *c, struct conn *k,
                              const char *url) {
    (void)url;
    return post_openai(s, c, k, SRV_KIND_CHAT);
}

enum MHD_Result srv_generate_resume(struct srv *s, struct MHD_Connection *c, struct conn *k) {
    struct job *j = k->job;
    job_running(j);
    for (;;) {
        int32_t n_ev;
        bool done;
        job_take(j, &n_ev, &done);
        if (j->rx.oom) {
            job_cancel(j);
            return MHD_NO;
        }
        sb_put(&j->full, j->rx.p, j->rx.len);
        j->consumed = n_ev;
        if (done) break;
        if (job_park(j, false)) return MHD_YES;
        pthread_mutex_lock(&j->mu);
        bool end = j->gone || atomic_load(&s->stopping);
        pthread_mutex_unlock(&j->mu);
        if (end) {
            job_cancel(j);
            return MHD_NO; /* client gone or server stopping: close */
        }
    }
    if (j->gone) return MHD_NO;
    struct srv_err e;
    if (job_error(j, &e)) return srv_send_dialect_err(s, c, j->d, &e);
    struct feed f = {.j = j};
    srv_outparse_feed(j->op, j->full.p ? j->full.p : "", j->full.len, on_part, &f);
    srv_outparse_end(j->op, output_complete(j), on_part, &f);
    if (f.oom || j->full.oom) {
        srv_oom(&e);
        return srv_send_dialect_err(s, c, j->d, &e);
    }
    j->usage = (struct srv_usage){.n_prompt = j->n_prompt, .n_gen = j->n_gen};
    struct srv_choice ch;
    job_choice(j, &ch);
    struct sbuf b;
    sb_init(&b);
    j->d->full(&b, &j->view, &ch, 1, &j->usage);
    return srv_send_sbuf(s, c, 200, "application/json", &b, NULL, NULL);
}

void srv_job_closed(struct job *j) {
    job_running(j); /* a resume MHD carried out without running a handler */
    pthread_mutex_lock(&j->mu);
    j->conn = NULL;
    pthread_mutex_unlock(&j->mu);
    /* completed OK means the stream or answer went out whole; anything
     * else (client gone, timeout, shutdown) must free the request */
    job_cancel(j);
    job_unref(j);
}

// ----------------------------------------------------------------------------
// the sweep, shutdown

/* A parked request's client is gone when its socket reads as closed or
 * reset. A client that only half-closes after sending (shutdown(SHUT_WR))
 * also reads as gone; curl, browsers and the OpenAI clients never do
 * that. */
void srv_jobs_sweep(struct srv *s) {
    enum { BATCH = 256 };
    struct pollfd pf[BATCH];
    struct job *who[BATCH];
    anvil_req_id ids[BATCH];
    /* in batches, so that the stack holds them; the list cannot change
     * while s->mu is held, and a listed job holds the engine's reference */
    int skip = 0;
    for (;;) {
        int n = 0, seen = 0, n_ids = 0;
        pthread_mutex_lock(&s->mu);
        for (struct job *j = s->jobs; j && n < BATCH; j = j->next) {
            pthread_mutex_lock(&j->mu);
            bool watch = j->parked && !j->gone && j->fd >= 0;
            pthread_mutex_unlock(&j->mu);
            if (!watch || seen++ < skip) continue;
            pf[n] = (struct pollfd){.fd = j->fd, .events = POLLRDHUP};
            who[n++] = j;
        }
        if (n > 0 && poll(pf, (nfds_t)n, 0) > 0) {
            for (int i = 0; i < n; i++) {
                if (!(pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) continue;
                struct job *j = who[i];
                pthread_mutex_lock(&j->mu);
                /* still parked: the socket is still this connection's */
                if (j->parked && !j->gone) {
                    j->gone = true;
                    if (j->id_set && !j->done) ids[n_ids++] = j->id;
                    atomic_fetch_add(&s->metrics.client_gone, 1);
                }
                pthread_mutex_unlock(&j->mu);
            }
        }
        pthread_mutex_unlock(&s->mu);
        /* not under s->mu: the driver thread takes it in on_event */
        for (int i = 0; i < n_ids; i++) anvil_engine_cancel(s->engine, ids[i]);
        if (n < BATCH) break;
        skip += n;
    }
}

void srv_jobs_wake_all(struct srv *s) {
    pthread_mutex_lock(&s->mu);
    for (struct job *j = s->jobs; j; j = j->next) {
        pthread_mutex_lock(&j->mu);
        wake_locked(j);
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
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
