/*
 * generate.c - the generation routes: a validated request becomes a `job`
 * of one or more engine requests (its choices, `n`), and the engine's
 * events become one answer or a stream in the dialect the route speaks
 * (dialect.h: OpenAI chat/completions, and the dialects of the other
 * APIs).
 *
 * Nothing here blocks an HTTP worker (http.c runs a few epoll workers for
 * every connection). A request that waits for the engine *parks* its
 * connection (MHD_suspend_connection: MHD stops polling it) and the
 * engine's event callback, on the driver thread, resumes it when there is
 * something to send: every token for a stream, the end of every choice
 * for a whole answer.
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
 * Output: every choice's text goes through its output parser (outparse.c:
 * the model's tool-call format and reasoning markers) into parts, which
 * the dialect formats (a stream: as they come; whole: at the end). The
 * job also accumulates each choice whole (content, reasoning, calls),
 * since a stream's end gets them too.
 *
 * n > 1: n engine requests from one prompt, submitted together (the
 * prefix cache shares the prompt, the engine batches their decoding);
 * choice i samples with seed + i.
 *
 * Storage: token records go into arrays of max_tokens slots per choice
 * (the engine never emits more), text into a pending buffer that the HTTP
 * side empties on every drain. A job is reference counted: the
 * connection, the streaming response and every choice's engine request
 * (until its DONE) each hold one. srv->n_live counts the jobs not yet
 * freed: a drain (srv_n_active) waits for it, so an answer is not cut
 * between DONE and its last byte.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "server/srv_int.h"

/* One choice: its engine request and its output. */
struct chc {
    struct job *j;
    int index;
    anvil_req_id id; /* under j->mu */
    bool id_set;

    /* written by the engine callback under j->mu */
    int32_t n_ev;           /* token events so far */
    int32_t *ev_len;        /* (cap,) text bytes released with event i */
    struct srv_tok *ev_tok; /* (cap,) when logprobs or return_token_ids */
    anvil_token *top_tok;   /* (cap, k) */
    float *top_lp;          /* (cap, k) */
    struct sbuf pend;       /* text not yet taken by the HTTP side */
    bool done;
    enum anvil_finish finish;
    anvil_token eog; /* the DONE event's end-of-generation token, -1 */
    int32_t n_prompt, n_gen, n_reused;
    double queue_s, prefill_s, decode_s; /* the DONE event's */
    char errmsg[200];
    double t_last; /* last token event (ITL), time_now_s */

    /* HTTP side only */
    int32_t consumed; /* events formatted so far */
    /* streams: the first event whose token no chunk has carried yet (its
     * text was held by the parser, in this drain or an earlier one) */
    int32_t lp_from;
    bool seen_done;   /* the drain that saw done has been taken */
    bool ended;       /* its output parser has ended (a stream: all its parts out) */
    struct sbuf rx;   /* text taken in the last drain */
    struct sbuf full; /* whole text (non-streaming, or a possible tool call) */
    struct srv_outparse *op;
    /* the choice whole, accumulated from its parts */
    struct sbuf content, reasoning;
    struct srv_call_out *calls;
    struct sbuf *cargs; /* (cap_calls,) each call's arguments */
    int n_calls, cap_calls;
};

struct job {
    struct srv *srv;
    pthread_mutex_t mu;
    int refs; /* under mu */
    struct job *prev, *next; /* srv->jobs, under srv->mu */
    bool listed;

    /* the request, fixed after submit */
    struct srv_req req;
    struct srv_resp_info ri;
    char idstr[48];
    int fd;                      /* client socket, for the disconnect sweep */
    struct MHD_Connection *conn; /* under mu; NULL once MHD closed the request */
    int32_t cap;                 /* token slots per choice (max_tokens, + n_prompt with echo) */
    struct sbuf echo;            /* echo: the prompt's text, token by token */
    int32_t *echo_len;           /* echo: (n_prompt,) bytes of echo per prompt token */
    int32_t k;                   /* alternatives kept per token */
    /* prompt_logprobs: (n_prompt,) records of choice 0's PROMPT events,
     * ANVIL_MAX_TOP_LOGPROBS alternatives each, under mu */
    struct srv_tok *plp;
    anvil_token *plp_tok;
    float *plp_lp;

    /* the choices */
    int n_alloc; /* choices asked for (n) */
    int n;      /* under mu: choices submitted (fewer than asked after a submit error) */
    int n_done; /* under mu: choices whose DONE came */
    struct chc *ch;

    /* parking, under mu */
    bool parked;  /* suspended, waiting for a resume */
    bool resumed; /* resumed, its handler has not run since (n_suspended) */
    bool gone;    /* the sweep saw the client leave */

    /* HTTP side only (one handler runs at a time for a connection) */
    struct sbuf out; /* formatted bytes for the wire */
    size_t out_pos;
    bool sent_first, sent_done;

    /* the dialect answering and its state */
    const struct srv_dialect *d;
    void *dstate;
    struct srv_gen_view view;
    struct srv_usage usage;
    struct srv_choice *choices; /* (n,) for stream_end and full */
};

// ----------------------------------------------------------------------------
// jobs

static void chc_free(struct chc *c) {
    free(c->ev_len);
    free(c->ev_tok);
    free(c->top_tok);
    free(c->top_lp);
    sb_free(&c->pend);
    sb_free(&c->rx);
    sb_free(&c->full);
    srv_outparse_free(c->op);
    sb_free(&c->content);
    sb_free(&c->reasoning);
    for (int i = 0; i < c->n_calls; i++) sb_free(&c->cargs[i]);
    free(c->cargs);
    free(c->calls);
}

static void job_free(struct job *j) {
    struct srv *s = j->srv;
    srv_req_free(&j->req);
    sb_free(&j->echo);
    free(j->echo_len);
    free(j->plp);
    free(j->plp_tok);
    free(j->plp_lp);
    for (int i = 0; j->ch && i < j->n_alloc; i++) chc_free(&j->ch[i]);
    free(j->ch);
    free(j->choices);
    sb_free(&j->out);
    if (j->d && j->d->free_state && j->dstate) j->d->free_state(j->dstate);
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

/* Under j->mu (or before the choice is submitted): one token record of
 * choice c with its text, when there is a slot left. */
/* Event i's token record (when kept): the token, its logprob and the
 * best j->k alternatives. */
static void chc_tok(struct chc *c, int32_t i, anvil_token t, float lp, int32_t n_top,
                    const anvil_token *top_t, const float *top_lp) {
    struct job *j = c->j;
    if (!c->ev_tok) return;
    struct srv_tok *r = &c->ev_tok[i];
    r->token = t;
    r->logprob = lp;
    r->echo = false;
    r->n_top = n_top < j->k ? n_top : j->k;
    if (r->n_top < 0 || !top_t || !top_lp) r->n_top = 0;
    r->top_tokens = j->k ? c->top_tok + (size_t)i * (size_t)j->k : NULL;
    r->top_logprobs = j->k ? c->top_lp + (size_t)i * (size_t)j->k : NULL;
    for (int32_t a = 0; a < r->n_top; a++) {
        c->top_tok[(size_t)i * (size_t)j->k + (size_t)a] = top_t[a];
        c->top_lp[(size_t)i * (size_t)j->k + (size_t)a] = top_lp[a];
    }
}

/* echo: a prompt token's record, with its text, ahead of the output's */
static void chc_record(struct chc *c, anvil_token t, float lp, int32_t n_top,
                       const anvil_token *top_t, const float *top_lp, const char *text,
                       int32_t len) {
    struct job *j = c->j;
    if (c->n_ev >= j->cap) return;
    int32_t i = c->n_ev++;
    sb_put(&c->pend, text, (size_t)len);
    c->ev_len[i] = len;
    chc_tok(c, i, t, lp, n_top, top_t, top_lp);
    if (c->ev_tok) c->ev_tok[i].echo = true;
}

/* echo: the prompt's text by token, detokenized as the output would be
 * (an incomplete UTF-8 character waits for the token that ends it). */
static bool echo_prepare(struct job *j) {
    const struct anvil_model *m = j->srv->model;
    j->echo_len = calloc((size_t)j->req.n_prompt, sizeof(*j->echo_len));
    if (!j->echo_len) return false;
    struct anvil_detok dt;
    memset(&dt, 0, sizeof(dt));
    char piece[256 + 16];
    for (int32_t i = 0; i < j->req.n_prompt; i++) {
        int32_t k = anvil_detok_push(m, &dt, j->req.prompt[i], piece, sizeof(piece));
        if (i == j->req.n_prompt - 1 && k >= 0) {
            int32_t f = anvil_detok_flush(&dt, piece + k, (int32_t)sizeof(piece) - k);
            if (f > 0) k += f;
        }
        if (k < 0) k = 0;
        sb_put(&j->echo, piece, (size_t)k);
        j->echo_len[i] = k;
    }
    return !j->echo.oom;
}

/* echo: the prompt's records that need no engine event: the first token
 * (its logprob is null: nothing comes before it), or all of them when no
 * logprobs were asked for. */
static void echo_start(struct chc *c) {
    struct job *j = c->j;
    int32_t n = j->req.logprobs ? 1 : j->req.n_prompt;
    size_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        chc_record(c, j->req.prompt[i], NAN, 0, NULL, NULL, j->echo.p + off, j->echo_len[i]);
        off += (size_t)j->echo_len[i];
    }
}

/* echo with logprobs: the record of prompt position pos (an engine PROMPT
 * event), under j->mu. */
static void echo_event(struct chc *c, const struct anvil_event *ev) {
    struct job *j = c->j;
    if (!j->req.echo || !j->req.logprobs || ev->pos < 1 || ev->pos >= j->req.n_prompt) return;
    size_t off = 0;
    for (int32_t i = 0; i < ev->pos; i++) off += (size_t)j->echo_len[i];
    chc_record(c, ev->token, ev->logprob, ev->n_top, ev->top_tokens, ev->top_logprobs,
               j->echo.p + off, j->echo_len[ev->pos]);
}

/* prompt_logprobs: one record per prompt token, the first with no
 * logprob (nothing precedes it); the engine's PROMPT events fill the rest. */
static bool plp_prepare(struct job *j) {
    size_t n = (size_t)j->req.n_prompt, k = ANVIL_MAX_TOP_LOGPROBS;
    j->plp = calloc(n, sizeof(*j->plp));
    j->plp_tok = calloc(n * k, sizeof(*j->plp_tok));
    j->plp_lp = calloc(n * k, sizeof(*j->plp_lp));
    if (!j->plp || !j->plp_tok || !j->plp_lp) return false;
    for (size_t i = 0; i < n; i++) {
        j->plp[i] = (struct srv_tok){.token = j->req.prompt[i], .logprob = NAN, .n_top = 0,
                                     .top_tokens = j->plp_tok + i * k,
                                     .top_logprobs = j->plp_lp + i * k};
    }
    return true;
}

/* prompt_logprobs: choice 0's PROMPT event, under j->mu. */
static void plp_event(struct chc *c, const struct anvil_event *ev) {
    struct job *j = c->j;
    if (!j->plp || c->index != 0 || ev->pos < 1 || ev->pos >= j->req.n_prompt) return;
    struct srv_tok *r = &j->plp[ev->pos];
    r->token = ev->token;
    r->logprob = ev->logprob;
    r->n_top = ev->top_tokens && ev->top_logprobs ? ev->n_top : 0;
    if (r->n_top > ANVIL_MAX_TOP_LOGPROBS) r->n_top = ANVIL_MAX_TOP_LOGPROBS;
    if (r->n_top < 0) r->n_top = 0;
    for (int32_t a = 0; a < r->n_top; a++) {
        j->plp_tok[(size_t)ev->pos * ANVIL_MAX_TOP_LOGPROBS + (size_t)a] = ev->top_tokens[a];
        j->plp_lp[(size_t)ev->pos * ANVIL_MAX_TOP_LOGPROBS + (size_t)a] = ev->top_logprobs[a];
    }
}

static bool chc_init(struct job *j, struct chc *c, int index, uint64_t id_seed) {
    c->j = j;
    c->index = index;
    c->eog = -1;
    /* a completion's text is the model's raw continuation: never split */
    struct srv_outfmt raw = {.tool_format = SRV_TOOLFMT_JSON,
                             .reasoning_format = SRV_REASONING_NONE};
    c->op = srv_outparse_new(j->req.kind == SRV_KIND_CHAT ? &j->req.outfmt : &raw, j->req.tools,
                             j->req.reasoning_open,
                             id_seed ^ ((uint64_t)index * 0x94D049BB133111EBull));
    c->ev_len = calloc((size_t)j->cap, sizeof(*c->ev_len));
    bool ok = c->op && c->ev_len && sb_reserve(&c->pend, 1024);
    /* the token records also carry return_token_ids' ids */
    if (ok && (j->req.logprobs || j->req.return_token_ids)) {
        c->ev_tok = calloc((size_t)j->cap, sizeof(*c->ev_tok));
        if (j->k > 0) {
            c->top_tok = calloc((size_t)j->cap * (size_t)j->k, sizeof(*c->top_tok));
            c->top_lp = calloc((size_t)j->cap * (size_t)j->k, sizeof(*c->top_lp));
        }
        ok = c->ev_tok && (j->k == 0 || (c->top_tok && c->top_lp));
    }
    if (ok && j->req.echo) echo_start(c);
    return ok && !c->pend.oom;
}

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
    j->cap = j->req.max_tokens + (j->req.echo ? j->req.n_prompt : 0);
    j->k = j->req.logprobs ? (j->req.top_logprobs > 0 ? j->req.top_logprobs : 1) : 0;
    int n = j->req.n > 0 ? j->req.n : 1;
    uint64_t id_seed = ((uint64_t)s->salt << 32) ^ (uint64_t)atomic_load(&s->next_seq) ^
                       (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    if (d->make_state) j->dstate = d->make_state();
    j->ch = calloc((size_t)n, sizeof(*j->ch));
    j->choices = calloc((size_t)n, sizeof(*j->choices));
    bool ok = j->ch && j->choices && (!d->make_state || j->dstate) &&
              (!j->req.echo || echo_prepare(j)) && (!j->req.prompt_lp || plp_prepare(j));
    if (ok) j->n_alloc = j->n = n;
    for (int i = 0; ok && i < n; i++) ok = chc_init(j, &j->ch[i], i, id_seed);
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
        .token_ids = j->req.return_token_ids,
        .top_logprobs = j->req.top_logprobs,
    };
    j->view = (struct srv_gen_view){
        .ri = &j->ri, .req = &j->req, .state = j->dstate, .n_choices = n, .usage = &j->usage,
        .prompt_toks = j->plp, .n_prompt_toks = j->plp ? j->req.n_prompt : 0};
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

/* Cancel every choice still in the engine. */
static void job_cancel(struct job *j) {
    enum { CHUNK = 32 };
    anvil_req_id ids[CHUNK];
    for (int from = 0;; from += CHUNK) {
        int m = 0;
        pthread_mutex_lock(&j->mu);
        int n = j->n;
        for (int i = from; i < n && i < from + CHUNK; i++)
            if (j->ch[i].id_set && !j->ch[i].done) ids[m++] = j->ch[i].id;
        pthread_mutex_unlock(&j->mu);
        for (int i = 0; i < m; i++) anvil_engine_cancel(j->srv->engine, ids[i]);
        if (from + CHUNK >= n) break;
    }
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
    for (int i = 0; i < j->n; i++) {
        const struct chc *c = &j->ch[i];
        if (c->n_ev != c->consumed || c->pend.len > 0 || (c->done && !c->seen_done)) return true;
    }
    return false;
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
 * stream, the end of every choice for a whole answer (tokens_wake false).
 * False, and not suspended, when there is news already or the server is
 * stopping: the caller goes on. */
static bool job_park(struct job *j, bool tokens_wake) {
    struct srv *s = j->srv;
    pthread_mutex_lock(&j->mu);
    bool news = tokens_wake ? news_locked(j) : j->n_done == j->n;
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

/* Move what the engine sent for choice c since the last drain into
 * c->rx. *n_ev and *done are a consistent snapshot: rx holds the text of
 * events [consumed, n_ev) and, when done, the DONE text. False when there
 * was nothing new. */
static bool chc_take(struct chc *c, int32_t *n_ev, bool *done) {
    struct job *j = c->j;
    pthread_mutex_lock(&j->mu);
    bool news = c->n_ev != c->consumed || c->pend.len > 0 || (c->done && !c->seen_done);
    *n_ev = c->n_ev;
    *done = c->done;
    if (c->done) c->seen_done = true;
    sb_clear(&c->rx);
    sb_put(&c->rx, c->pend.p, c->pend.len);
    sb_clear(&c->pend);
    pthread_mutex_unlock(&j->mu);
    return news;
}

// ----------------------------------------------------------------------------
// engine events (driver thread)

/* Record, wake, never block. */
static void on_event(void *user, const struct anvil_event *ev) {
    struct chc *c = user;
    struct job *j = c->j;
    struct srv *s = j->srv;
    bool done = ev->type == ANVIL_EVENT_DONE;
    bool overflow = false, last = false, failed = false;
    pthread_mutex_lock(&j->mu);
    if (ev->text_len > 0) {
        sb_put(&c->pend, ev->text, (size_t)ev->text_len);
        overflow = c->pend.oom;
    }
    if (ev->type == ANVIL_EVENT_PROMPT) {
        echo_event(c, ev);
        plp_event(c, ev);
        overflow = c->pend.oom;
    } else if (ev->type == ANVIL_EVENT_TOKEN) {
        double t = time_now_s();
        if (c->t_last > 0) srv_hist_observe(&s->metrics.itl, t - c->t_last);
        c->t_last = t;
        if (c->n_ev < j->cap) {
            int32_t i = c->n_ev++;
            c->ev_len[i] = ev->text_len > 0 ? ev->text_len : 0;
            chc_tok(c, i, ev->token, ev->logprob, ev->n_top, ev->top_tokens, ev->top_logprobs);
        } else if (j->cap > 0 && ev->text_len > 0) {
            /* more tokens than max_tokens: an engine bug; keep the text */
            c->ev_len[j->cap - 1] += ev->text_len;
        }
    } else if (done) {
        c->done = true;
        c->finish = ev->finish;
        c->eog = ev->token;
        c->n_prompt = ev->n_prompt;
        c->n_gen = ev->n_gen;
        c->n_reused = ev->n_reused;
        c->queue_s = ev->queue_s;
        c->prefill_s = ev->prefill_s;
        c->decode_s = ev->decode_s;
        if (ev->error) snprintf(c->errmsg, sizeof(c->errmsg), "%s", ev->error);
        if (overflow) {
            c->finish = ANVIL_FINISH_ERROR;
            snprintf(c->errmsg, sizeof(c->errmsg), "out of memory");
        }
        failed = c->finish == ANVIL_FINISH_ERROR || c->finish == ANVIL_FINISH_CONSTRAINT;
        last = ++j->n_done == j->n;
    }
    if (done || j->req.stream) wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    if (done) {
        if (ev->n_gen > 0 && ev->ttft_s >= 0) srv_hist_observe(&s->metrics.ttft, ev->ttft_s);
        int f = ev->finish >= 0 && ev->finish < SRV_N_FINISH ? (int)ev->finish : ANVIL_FINISH_ERROR;
        atomic_fetch_add(&s->metrics.finished[f], 1);
        /* a choice that failed fails the answer: the others stop */
        if (failed && !last) job_cancel(j); /* anvil_engine_cancel: allowed from the callback */
        if (last) {
            atomic_fetch_sub(&s->metrics.in_flight, 1);
            job_unlist(s, j);
        }
        job_unref(j); /* this choice's engine reference */
    } else if (overflow) {
        anvil_engine_cancel(s->engine, ev->id); /* allowed from the callback */
    }
}

// ----------------------------------------------------------------------------
// parts: accumulated per choice, streamed in the dialect

static const struct srv_tok *toks_at(const struct chc *c, int32_t from) {
    return c->ev_tok ? c->ev_tok + from : NULL;
}

/* The choice whole: one part more. False when out of memory. */
static bool chc_accumulate(struct chc *c, const struct srv_part *p) {
    switch (p->kind) {
    case SRV_PART_CONTENT: sb_put(&c->content, p->text, p->n); return !c->content.oom;
    case SRV_PART_REASONING: sb_put(&c->reasoning, p->text, p->n); return !c->reasoning.oom;
    case SRV_PART_CALL_BEGIN: {
        if (c->n_calls == c->cap_calls) {
            int cap = c->cap_calls ? 2 * c->cap_calls : 2;
            struct srv_call_out *calls = realloc(c->calls, (size_t)cap * sizeof(*calls));
            if (!calls) return false;
            c->calls = calls;
            struct sbuf *cargs = realloc(c->cargs, (size_t)cap * sizeof(*cargs));
            if (!cargs) return false;
            c->cargs = cargs;
            c->cap_calls = cap;
        }
        struct srv_call_out *co = &c->calls[c->n_calls];
        memset(co, 0, sizeof(*co));
        snprintf(co->id, sizeof(co->id), "%s", p->id ? p->id : "");
        snprintf(co->name, sizeof(co->name), "%s", p->name ? p->name : "");
        sb_init(&c->cargs[c->n_calls]);
        c->n_calls++;
        return true;
    }
    case SRV_PART_CALL_ARGS:
        if (c->n_calls == 0) return true;
        sb_put(&c->cargs[c->n_calls - 1], p->text, p->n);
        return !c->cargs[c->n_calls - 1].oom;
    case SRV_PART_CALL_END:
        if (c->n_calls > 0) c->calls[c->n_calls - 1].whole = true;
        return true;
    }
    return true;
}

/* One feed of an output parser: the tokens whose logprobs ride on the
 * first part written, and whether one was. */
struct feed {
    struct chc *c;
    const struct srv_tok *toks;
    int32_t nt;
    bool wrote;
    bool oom;
};

static void on_part(void *user, const struct srv_part *p) {
    struct feed *f = user;
    struct chc *c = f->c;
    struct job *j = c->j;
    if (!chc_accumulate(c, p)) f->oom = true;
    if (!j->req.stream) return;
    bool takes = p->kind != SRV_PART_CALL_END;
    bool lp = takes && !f->wrote;
    j->d->stream_part(&j->out, &j->view, c->index, p, lp ? f->toks : NULL, lp ? f->nt : 0);
    if (takes) f->wrote = true;
}

/* Whether the output ended as it should (not cut by max_tokens, a stop
 * string or an error): with a possible tool call, the whole output must
 * also match the call's constraint. */
static bool chc_complete(const struct chc *c) {
    const struct job *j = c->j;
    if (c->finish != ANVIL_FINISH_STOP) return false;
    if (j->req.tools == SRV_TOOLS_NONE || !j->req.constraint) return true;
    /* a family's format: the constraint held the text after the forced
     * marker, and the parser closes a call whose closer is missing */
    if (j->req.outfmt.tool_format != SRV_TOOLFMT_JSON || j->req.think_gate) return true;
    return anvil_constraint_matches(j->req.constraint, c->full.p ? c->full.p : "", c->full.len);
}

/* The choice whole, from what was accumulated. */
static void chc_choice(struct chc *c, struct srv_choice *ch) {
    static char empty[1];
    for (int i = 0; i < c->n_calls; i++) {
        c->calls[i].args = c->cargs[i].p && c->cargs[i].len ? c->cargs[i].p : empty;
        c->calls[i].n_args = c->cargs[i].len;
    }
    bool called = false;
    for (int i = 0; i < c->n_calls; i++) called |= c->calls[i].whole;
    const char *finish = srv_finish_str(c->finish);
    if (called) finish = "tool_calls";
    *ch = (struct srv_choice){
        .index = c->index,
        .content = c->content.p ? c->content.p : empty,
        .n_content = c->content.len,
        .reasoning = c->reasoning.p ? c->reasoning.p : empty,
        .n_reasoning = c->reasoning.len,
        .calls = c->calls,
        .n_calls = c->n_calls,
        .toks = toks_at(c, 0),
        .n_toks = c->ev_tok ? c->consumed : 0,
        .finish = finish,
        .eog = c->eog,
        .engine_finish = c->finish,
        .n_gen = c->n_gen,
    };
}

/* The whole answer's choices and usage, into j->choices and j->usage. */
static void job_choices(struct job *j) {
    j->usage = (struct srv_usage){0};
    for (int i = 0; i < j->n; i++) {
        chc_choice(&j->ch[i], &j->choices[i]);
        j->usage.n_gen += j->ch[i].n_gen;
        if (j->ch[i].queue_s > j->usage.queue_s) j->usage.queue_s = j->ch[i].queue_s;
        if (j->ch[i].prefill_s > j->usage.prefill_s) j->usage.prefill_s = j->ch[i].prefill_s;
        if (j->ch[i].decode_s > j->usage.decode_s) j->usage.decode_s = j->ch[i].decode_s;
    }
    /* one prompt: counted once */
    j->usage.n_prompt = j->n > 0 ? j->ch[0].n_prompt : 0;
    j->usage.n_cached = j->n > 0 ? j->ch[0].n_reused : 0;
}

/* The error of a generation that did not finish well (the first failed
 * choice; a cancel only when nothing failed); false when all did. */
static bool job_error(const struct job *j, struct srv_err *e) {
    const struct chc *bad = NULL;
    for (int i = 0; i < j->n && !bad; i++)
        if (j->ch[i].finish == ANVIL_FINISH_ERROR || j->ch[i].finish == ANVIL_FINISH_CONSTRAINT)
            bad = &j->ch[i];
    for (int i = 0; i < j->n && !bad; i++)
        if (j->ch[i].finish == ANVIL_FINISH_CANCELLED) bad = &j->ch[i];
    if (!bad) return false;
    if (bad->finish == ANVIL_FINISH_ERROR)
        srv_err_set(e, 500, "server_error", NULL, NULL, "%s",
                    bad->errmsg[0] ? bad->errmsg : "generation failed");
    else if (bad->finish == ANVIL_FINISH_CONSTRAINT) /* text the model cannot spell */
        srv_err_set(e, 400, "invalid_request_error", "constraint_unsatisfiable", NULL, "%s",
                    bad->errmsg);
    else
        srv_err_set(e, 503, "server_error", NULL, NULL,
                    "the request was cancelled: the server is shutting down");
    return true;
}

// ----------------------------------------------------------------------------
// streaming

/* One piece of choice c's output through its parser; the parts go out in
 * the dialect. Returns whether a part carrying logprobs was written. */
static bool stream_text(struct chc *c, const char *s, size_t n, const struct srv_tok *toks,
                        int32_t nt) {
    struct job *j = c->j;
    if (j->req.tools != SRV_TOOLS_NONE) sb_put(&c->full, s, n);
    struct feed f = {.c = c, .toks = toks, .nt = nt};
    srv_outparse_feed(c->op, s, n, on_part, &f);
    if (f.oom) j->out.oom = true;
    return f.wrote;
}

/* Format what the last drain of choice c brought into j->out. */
static void stream_format(struct chc *c, int32_t n_ev, bool done) {
    struct job *j = c->j;
    size_t pos = 0;
    int32_t lp_from = c->lp_from;
    for (int32_t i = c->consumed; i < n_ev; i++) {
        size_t len = (size_t)c->ev_len[i];
        if (len > c->rx.len - pos) len = c->rx.len - pos;
        if (len == 0) continue; /* held text: its logprobs ride with the next chunk */
        int32_t nt = c->ev_tok ? i + 1 - lp_from : 0;
        if (stream_text(c, c->rx.p + pos, len, toks_at(c, lp_from), nt)) lp_from = i + 1;
        pos += len;
    }
    c->consumed = n_ev;
    c->lp_from = lp_from;
    if (!done) return;
    size_t tail = c->rx.len - pos;
    int32_t nt = c->ev_tok ? n_ev - lp_from : 0;
    if (tail && stream_text(c, c->rx.p + pos, tail, toks_at(c, lp_from), nt)) {
        lp_from = n_ev;
        nt = 0;
    }
    struct feed f = {.c = c, .toks = toks_at(c, lp_from), .nt = nt};
    srv_outparse_end(c->op, chc_complete(c), on_part, &f);
    if (f.oom) j->out.oom = true;
    if (!f.wrote && nt > 0) { /* logprobs of tokens whose text was all held back */
        struct srv_part p = {.kind = SRV_PART_CONTENT, .text = "", .n = 0};
        j->d->stream_part(&j->out, &j->view, c->index, &p, toks_at(c, lp_from), nt);
    }
    c->ended = true;
}

/* Every choice has ended: the stream's end, or its error. */
static void stream_finish(struct job *j) {
    job_choices(j);
    struct srv_err e;
    if (job_error(j, &e))
        j->d->stream_error(&j->out, &j->view, &e);
    else
        j->d->stream_end(&j->out, &j->view, j->choices, j->n, &j->usage);
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
        pthread_mutex_lock(&j->mu);
        int n = j->n; /* fixed once the stream runs */
        pthread_mutex_unlock(&j->mu);
        bool any = false, all_ended = true;
        for (int i = 0; i < n; i++) {
            struct chc *c = &j->ch[i];
            int32_t n_ev;
            bool done;
            if (!c->ended && chc_take(c, &n_ev, &done)) {
                if (c->rx.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
                stream_format(c, n_ev, done);
                any = true;
            }
            all_ended &= c->ended;
        }
        if (all_ended) {
            stream_finish(j);
            continue;
        }
        if (any) continue;
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

static void submit_err(struct srv_err *e, anvil_status st, const char *msg) {
    if (st == ANVIL_ERR_INVALID)
        srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "%s", msg);
    else if (st == ANVIL_ERR_KV_FULL) /* the queue is full (what can never fit is INVALID) */
        srv_err_set(e, 503, "server_error", "engine_overloaded", NULL,
                    "The server is overloaded: its request queue is full. Retry later.");
    else
        srv_err_set(e, 500, "server_error", NULL, NULL, "%s", msg);
}

/* X-Anvil-Ignored-Fields on r when the request had unknown fields. */
static void ignored_header(struct MHD_Response *r, const struct srv_req *req) {
    if (req->ignored[0]) MHD_add_response_header(r, "X-Anvil-Ignored-Fields", req->ignored);
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
    rp.top_logprobs = j->k;
    /* echo: the prompt's logprobs when asked; max_tokens 0 is a request
     * for the prompt alone */
    rp.prompt_logprobs = j->req.echo && (j->req.logprobs || j->req.max_tokens == 0);
    rp.prompt_top_logprobs = j->k;
    if (j->req.prompt_lp) { /* the best 20: the token's rank is known within them */
        rp.prompt_logprobs = true;
        rp.prompt_top_logprobs = ANVIL_MAX_TOP_LOGPROBS;
    }
    rp.constraint = j->req.constraint; /* each request takes its own reference */
    if (j->req.think_gate) {
        rp.think_open = j->req.reasoning_open && j->req.n_think_end > 0;
        rp.think_end = j->req.think_end;
        rp.n_think_end = j->req.n_think_end;
        rp.think_budget = j->req.reasoning_budget;
        rp.answer_prefix = j->req.answer_prefix;
        rp.n_answer_prefix = j->req.n_answer_prefix;
        rp.think_start = j->req.think_start;
        rp.n_think_start = j->req.n_think_start;
    }
    /* the families' markers may be control tokens ([TOOL_CALLS],
     * <|python_tag|>, harmony's <|channel|>): the parser must see them */
    rp.special_text = j->req.kind == SRV_KIND_CHAT &&
                      (j->req.outfmt.tool_format != SRV_TOOLFMT_JSON ||
                       j->req.outfmt.reasoning_format != SRV_REASONING_NONE);

    job_list(s, j);
    atomic_fetch_add(&s->metrics.in_flight, 1);
    char msg[256] = "";
    anvil_status st = ANVIL_OK;
    int n = j->n, submitted = 0;
    /* all at once: the prefix cache shares the prompt, the engine batches
     * the choices' decoding */
    for (; submitted < n; submitted++) {
        struct chc *ch = &j->ch[submitted];
        rp.sampling.seed = j->req.sampling.seed + (uint64_t)submitted; /* choice i: seed + i */
        job_ref(j); /* this choice's engine reference, dropped at its DONE */
        anvil_req_id id = 0;
        st = anvil_engine_submit(s->engine, &rp, on_event, ch, &id, msg, sizeof(msg));
        if (st != ANVIL_OK) {
            job_unref(j);
            break;
        }
        pthread_mutex_lock(&j->mu);
        ch->id = id;
        ch->id_set = true;
        pthread_mutex_unlock(&j->mu);
    }
    if (st != ANVIL_OK) {
        /* the choices submitted are cancelled; their DONEs end the job */
        pthread_mutex_lock(&j->mu);
        j->n = submitted;
        bool last = j->n_done == j->n;
        pthread_mutex_unlock(&j->mu);
        if (last) {
            atomic_fetch_sub(&s->metrics.in_flight, 1);
            job_unlist(s, j);
        }
        job_cancel(j);
        struct srv_err e;
        submit_err(&e, st, msg[0] ? msg : anvil_status_str(st));
        return srv_send_dialect_err(s, c, d, &e);
    }

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
        ignored_header(r, &j->req);
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
        pthread_mutex_lock(&j->mu);
        int n = j->n;
        pthread_mutex_unlock(&j->mu);
        bool all_done = true;
        for (int i = 0; i < n; i++) {
            struct chc *ch = &j->ch[i];
            int32_t n_ev;
            bool done;
            chc_take(ch, &n_ev, &done);
            if (ch->rx.oom) {
                job_cancel(j);
                return MHD_NO;
            }
            sb_put(&ch->full, ch->rx.p, ch->rx.len);
            ch->consumed = n_ev;
            all_done &= done;
        }
        if (all_done) break;
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
    bool oom = false;
    for (int i = 0; i < j->n; i++) {
        struct chc *ch = &j->ch[i];
        struct feed f = {.c = ch};
        srv_outparse_feed(ch->op, ch->full.p ? ch->full.p : "", ch->full.len, on_part, &f);
        srv_outparse_end(ch->op, chc_complete(ch), on_part, &f);
        ch->ended = true;
        oom |= f.oom || ch->full.oom;
    }
    if (oom) {
        srv_oom(&e);
        return srv_send_dialect_err(s, c, j->d, &e);
    }
    job_choices(j);
    struct sbuf b;
    sb_init(&b);
    j->d->full(&b, &j->view, j->choices, j->n, &j->usage);
    return srv_send_sbuf(s, c, 200, "application/json", &b,
                         j->req.ignored[0] ? "X-Anvil-Ignored-Fields" : NULL,
                         j->req.ignored[0] ? j->req.ignored : NULL);
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
    struct job *gone[BATCH];
    /* in batches, so that the stack holds them; the list cannot change
     * while s->mu is held, and a listed job holds an engine reference */
    int skip = 0;
    for (;;) {
        int n = 0, seen = 0, n_gone = 0;
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
                    j->refs++; /* held until its cancel, below */
                    gone[n_gone++] = j;
                    atomic_fetch_add(&s->metrics.client_gone, 1);
                }
                pthread_mutex_unlock(&j->mu);
            }
        }
        pthread_mutex_unlock(&s->mu);
        /* not under s->mu: the driver thread takes it in on_event */
        for (int i = 0; i < n_gone; i++) {
            job_cancel(gone[i]);
            job_unref(gone[i]);
        }
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
    /* hold the jobs first: anvil_engine_cancel must not run under s->mu,
     * which the driver thread takes in on_event */
    pthread_mutex_lock(&s->mu);
    int cap = s->n_jobs;
    struct job **js = cap > 0 ? malloc((size_t)cap * sizeof(*js)) : NULL;
    int n = 0;
    for (struct job *j = s->jobs; js && j && n < cap; j = j->next) {
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        js[n++] = j;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) {
        job_cancel(js[i]);
        job_unref(js[i]);
    }
    free(js);
}
