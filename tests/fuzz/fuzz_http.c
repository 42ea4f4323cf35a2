/*
 * fuzz_http.c - libFuzzer harness: bytes -> one HTTP connection to the
 * real server (src/server: libmicrohttpd's parser, connection limits,
 * routing, auth, bodies, request validation, the engine hand-off with
 * parking and waking, JSON and SSE formatting), end to end.
 *
 * Why this shape. The input is the raw byte stream a client sends on one
 * connection: request line, headers, body, any number of pipelined
 * requests, valid or not. Calling the route handlers directly would skip
 * libmicrohttpd's parsing and the connection state machine (bodies,
 * chunked uploads, keep-alive, suspend/resume), which is where the glue's
 * bugs live. A TCP listener per input would be slow and would bring in
 * the kernel's timing. So the server runs in its external mode
 * (srv_config.external: no threads, no listening socket): the harness
 * hands it one end of a socketpair (srv_add_conn, libmicrohttpd's
 * MHD_add_connection), writes the input into the other end, and drives
 * everything on this one thread: srv_run (MHD_run, then the sweep) and
 * anvil_engine_step, in a bounded loop. The engine is real, on the default
 * model, with a short context (N_CTX) so that a request costs at most a
 * few steps; after MAX_STEPS engine steps the harness hangs up, which
 * exercises the disconnect paths (a parked request cancelled by the
 * sweep, a stream cut). Requests without a seed sample with a fixed one,
 * so a run is repeatable.
 *
 * FUZZ_HTTP_TRACE=1 prints what the server answered to each input.
 *
 * Per input, on the server without an API key (and, when the input says
 * "Bearer", also on one that requires the key "fuzz-key"):
 *   - what the server wrote parses as HTTP/1.1 responses; a response cut
 *     off is allowed only as the last one (the harness hung up);
 *   - the status is one the server documents (200, 304, 400, 401, 404,
 *     405, 413, 503) or one libmicrohttpd writes itself with its HTML body
 *     (400, 413, 414, 431, 501, 505), or 100 Continue; never a 500;
 *   - every answer of the server (not libmicrohttpd's own) names the
 *     replica (X-Anvil-Replica);
 *   - the chat page's files: a 200 of an asset's type, or a 304, carries
 *     the ETag of one embedded asset, a 200 that asset's length and
 *     bytes, a 304 no body;
 *   - application/json bodies are valid UTF-8 and valid JSON; an error
 *     status carries OpenAI's error shape; a stream is `data: JSON` events
 *     (each valid UTF-8 and JSON) that end with `data: [DONE]` when whole;
 *   - after the hang-up the server closes the connection within a bounded
 *     number of rounds, holds no request, and every KV block is free;
 *   - ASan/UBSan/LeakSanitizer see nothing (libFuzzer's per-input leak
 *     check included: a connection is fully freed before the next input).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "anvil.h"
#include "server/server.h"
#include "server/srv_web.h"
#define FUZZ_NAME "fuzz_http"
#include "fuzz_util.h"
#include "fuzz_srv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_CTX 128 /* room for a tool-calling prompt (the tools are in it) */
#define MAX_STEPS 8          /* engine steps before the harness hangs up */
#define MAX_ROUNDS 4000      /* rounds of the exchange before hanging up */
#define MAX_DRAIN 20000      /* rounds after the hang-up to close everything */
#define IDLE_ROUNDS 3        /* rounds without progress that end the exchange */
#define MAX_RESP (4u << 20)  /* response bytes kept */
#define REPLICA "fuzz-r"

static struct anvil_model *g_model;
static struct anvil_engine *g_engine;
static struct srv *g_open, *g_keyed;

static void teardown(void) {
    srv_stop(g_open);
    srv_stop(g_keyed);
    anvil_engine_free(g_engine);
    srv_free(g_open);
    srv_free(g_keyed);
    anvil_model_free(g_model);
}

static struct srv *start(const char *key) {
    struct srv_config cfg = {
        .host = "127.0.0.1",
        .api_key = key,
        .model_id = "SmolLM2-135M-Instruct.Q4_1",
        .timeout_s = 3600, /* no timer fires during a run: repeatable */
        .header_timeout_s = 3600,
        .max_conn = 4,
        .n_ctx = N_CTX,
        .max_body = 8192, /* small, so that inputs reach the 413 paths */
        .external = true,
        .quiet = true,
        .default_seed = 1234,
        .webui = true,
        .replica_id = REPLICA,
        .parallel = 2,
    };
    struct srv *s = NULL;
    char err[256] = "";
    if (srv_start(g_model, g_engine, &cfg, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_http: srv_start: %s\n", err);
        abort();
    }
    return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_model = fuzz_load_model();
    char err[256] = "";
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = 1;
    ep.max_running = 2;
    ep.max_queue = 2;
    ep.n_ctx = N_CTX;
    ep.kv_mem = 8 << 20;
    if (anvil_engine_init(g_model, &ep, &g_engine, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "fuzz_http: cannot start the engine: %s\n", err);
        abort();
    }
    g_open = start(NULL);
    g_keyed = start("fuzz-key");
    atexit(teardown);
    return 0;
}

// ----------------------------------------------------------------------------
// the exchange

struct buf {
    char *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const char *s, size_t n) {
    if (b->len + n > MAX_RESP) n = MAX_RESP - b->len;
    if (n == 0) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        fuzz_check(b->p != NULL, "harness out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static bool engine_busy(void) {
    struct anvil_engine_stats st;
    anvil_engine_get_stats(g_engine, &st);
    return st.queued > 0 || st.running > 0;
}

/* One round: write what fits, let the server and the engine run, read
 * what came back. True when anything moved. */
static bool round_trip(struct srv *s, int fd, const uint8_t *data, size_t size, size_t *sent,
                       struct buf *resp, int *steps, bool step_engine) {
    bool moved = false;
    if (fd >= 0 && *sent < size) {
        ssize_t n = send(fd, data + *sent, size - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            *sent += (size_t)n;
            moved = true;
        }
    }
    srv_run(s);
    if (step_engine && engine_busy()) {
        int32_t n_active = 0;
        anvil_engine_step(g_engine, &n_active);
        (*steps)++;
        moved = true;
    }
    srv_run(s);
    if (fd >= 0) {
        char tmp[16384];
        for (;;) {
            ssize_t n = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);
            if (n <= 0) break;
            buf_put(resp, tmp, (size_t)n);
            moved = true;
        }
    }
    return moved;
}

// ----------------------------------------------------------------------------
// checking what the server wrote

static const char *find(const char *p, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(p + i, needle, k)) return p + i;
    return NULL;
}

/* Value of header `name` in head[0..n) (a copy in out), or false. */
static bool header(const char *head, size_t n, const char *name, char *out, size_t cap) {
    size_t k = strlen(name);
    const char *p = head, *end = head + n;
    while (p < end) {
        const char *eol = find(p, (size_t)(end - p), "\r\n");
        if (!eol) eol = end;
        if ((size_t)(eol - p) > k + 1 && !strncasecmp(p, name, k) && p[k] == ':') {
            const char *v = p + k + 1;
            while (v < eol && *v == ' ') v++;
            size_t m = (size_t)(eol - v) < cap - 1 ? (size_t)(eol - v) : cap - 1;
            memcpy(out, v, m);
            out[m] = '\0';
            return true;
        }
        p = eol + 2;
    }
    return false;
}

/* An error body in the shape of the API its path belongs to (errors
 * written before a route runs follow the path): Ollama's {"error":
 * "..."}, Anthropic's {"type": "error", "error": {"type", "message"}}, or
 * OpenAI's (fuzz_check_error_json). */
static void check_error_any(const char *p, size_t n) {
    fuzz_check(valid_utf8((const uint8_t *)p, n), "error body is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(p, n);
    fuzz_check(root != NULL, "error body is valid JSON");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "type");
    bool ollama = cJSON_IsString(e) && e->valuestring[0];
    bool anthropic = cJSON_IsString(t) && !strcmp(t->valuestring, "error") && cJSON_IsObject(e) &&
                     cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")) &&
                     cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message"));
    cJSON_Delete(root);
    if (!ollama && !anthropic) fuzz_check_error_json(p, n);
}

static void check_json(const char *p, size_t n, int status) {
    if (status >= 400) {
        check_error_any(p, n);
        return;
    }
    fuzz_check(valid_utf8((const uint8_t *)p, n), "JSON body is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(p, n);
    fuzz_check(root != NULL, "JSON body parses");
    fuzz_check(cJSON_IsObject(root), "a 200 JSON body is an object");
    cJSON_Delete(root);
}

/* A whole or cut SSE body: "data: X\n\n" events, X JSON or [DONE]. */
static void check_sse(const char *p, size_t n, bool whole) {
    bool done = false;
    while (n > 0) {
        const char *end = find(p, n, "\n\n");
        if (!end) {
            fuzz_check(!whole, "a whole stream ends with a blank line");
            return;
        }
        size_t len = (size_t)(end - p);
        fuzz_check(len >= 6 && !memcmp(p, "data: ", 6), "event starts with data: ");
        fuzz_check(!done, "nothing after data: [DONE]");
        if (len == 12 && !memcmp(p + 6, "[DONE]", 6)) {
            done = true;
        } else {
            check_json(p + 6, len - 6, 200);
        }
        n -= len + 2;
        p = end + 2;
    }
    if (whole) fuzz_check(done, "a whole stream ends with data: [DONE]");
}

/* Decode a chunked body at p[0..n) into out; returns bytes consumed, or
 * 0 when cut off. */
static size_t dechunk(const char *p, size_t n, struct buf *out) {
    size_t pos = 0;
    for (;;) {
        const char *eol = find(p + pos, n - pos, "\r\n");
        if (!eol) return 0;
        char *e;
        unsigned long sz = strtoul(p + pos, &e, 16);
        fuzz_check(e > p + pos, "chunk size is hex");
        pos = (size_t)(eol - p) + 2;
        if (sz == 0) {
            const char *fin = find(p + pos - 2, n - (pos - 2), "\r\n\r\n");
            if (!fin) return 0;
            return (size_t)(fin - p) + 4;
        }
        if (n - pos < sz + 2) return 0;
        buf_put(out, p + pos, sz);
        fuzz_check(!memcmp(p + pos + sz, "\r\n", 2), "chunk ends with CRLF");
        pos += sz + 2;
    }
}

static bool status_ok(int st, bool ours) {
    static const int mine[] = {200, 304, 400, 401, 404, 405, 413, 503};
    static const int mhd[] = {400, 413, 414, 431, 501, 505};
    const int *set = ours ? mine : mhd;
    int n = ours ? 8 : 6;
    for (int i = 0; i < n; i++)
        if (set[i] == st) return true;
    return false;
}

/* A response of the chat page (an asset's type, or a 304): the ETag names
 * an embedded asset, whose length and (when the body is here) bytes it
 * carries; a 304 has none. */
static void check_asset(int st, const char *head, size_t hlen, const struct buf *body,
                        bool whole, bool has_len, const char *clen) {
    char etag[64] = "";
    fuzz_check(header(head, hlen, "ETag", etag, sizeof(etag)), "a page response has an ETag");
    const struct srv_asset *a = NULL;
    for (size_t i = 0; i < srv_n_assets && !a; i++)
        if (!strcmp(srv_assets[i].etag, etag)) a = &srv_assets[i];
    fuzz_check(a != NULL, "the ETag is an embedded asset's");
    if (st == 304) {
        fuzz_check(body->len == 0, "a 304 has no body");
        return;
    }
    fuzz_check(st == 200, "a page file is a 200 or a 304");
    fuzz_check(has_len && strtoull(clen, NULL, 10) == a->len, "Content-Length is the asset's");
    /* no body at all is a HEAD answer */
    if (whole && body->len) fuzz_check(body->len == a->len && !memcmp(body->p, a->data, a->len),
                                  "the body is the asset's bytes");
}

static void check_responses(const char *p, size_t n) {
    struct buf body = {0};
    while (n > 0) {
        fuzz_check(n >= 5 && !memcmp(p, "HTTP/", 5), "a response starts with HTTP/");
        const char *hend = find(p, n, "\r\n\r\n");
        if (!hend) break; /* cut off: the harness hung up */
        size_t hlen = (size_t)(hend - p);
        fuzz_check(hlen > 12 && !memcmp(p, "HTTP/1.", 7), "status line");
        int st = atoi(p + 9);
        size_t pos = hlen + 4;
        if (st == 100) { /* interim answer to Expect: 100-continue */
            p += pos;
            n -= pos;
            continue;
        }
        char ctype[128] = "", clen[32] = "", te[32] = "";
        header(p, hlen, "Content-Type", ctype, sizeof(ctype));
        bool has_len = header(p, hlen, "Content-Length", clen, sizeof(clen));
        bool chunked = header(p, hlen, "Transfer-Encoding", te, sizeof(te));
        body.len = 0;
        size_t used;
        bool whole = true;
        if (st == 304) {
            used = 0; /* never a body (RFC 9110 15.4.5), whatever the headers say */
        } else if (chunked) {
            used = dechunk(p + pos, n - pos, &body);
            if (used == 0) {
                whole = false;
                used = n - pos;
            }
        } else if (has_len) {
            size_t want = (size_t)strtoull(clen, NULL, 10);
            /* a HEAD answer has a Content-Length and no body: what follows
             * is the next response */
            if (n - pos >= 7 && !memcmp(p + pos, "HTTP/1.", 7)) want = 0;
            if (want > n - pos) {
                whole = false;
                want = n - pos;
            }
            buf_put(&body, p + pos, want);
            used = want;
        } else {
            used = n - pos; /* until the connection closes */
            buf_put(&body, p + pos, used);
        }
        /* libmicrohttpd's own answers have no Content-Type and an HTML body
         * (none to a HEAD); every answer of the server names its type */
        bool mhd = !ctype[0] && st != 304;
        char replica[32] = "";
        if (!mhd)
            fuzz_check(header(p, hlen, "X-Anvil-Replica", replica, sizeof(replica)) &&
                      !strcmp(replica, REPLICA), "the server's answers name the replica");
        fuzz_check(st != 500, "no 500: nothing here fails inside the server");
        fuzz_check(status_ok(st, !mhd), "a documented status");
        if (mhd) fuzz_check(body.len == 0 || (body.len >= 6 && !memcmp(body.p, "<html>", 6)),
                       "libmicrohttpd's body is HTML");
        if (!strncmp(ctype, "application/json", 16)) {
            if (whole && body.len) check_json(body.p, body.len, st);
        } else if (!strncmp(ctype, "text/event-stream", 17)) {
            fuzz_check(st == 200, "streams are 200");
            check_sse(body.p ? body.p : "", body.len, whole && chunked);
        } else if (!strncmp(ctype, "text/plain", 10)) {
            fuzz_check(valid_utf8((const uint8_t *)body.p, body.len), "metrics text is UTF-8");
        } else if (st == 304 || !strncmp(ctype, "text/html", 9) ||
                   !strncmp(ctype, "text/javascript", 15) || !strncmp(ctype, "text/css", 8) ||
                   !strncmp(ctype, "image/svg+xml", 13)) {
            check_asset(st, p, hlen, &body, whole, has_len, clen);
        } else {
            fuzz_check(mhd, "a known content type");
        }
        p += pos + used;
        n -= pos + used;
        if (!whole) break;
    }
    free(body.p);
}

// ----------------------------------------------------------------------------

static void exchange(struct srv *s, const uint8_t *data, size_t size) {
    int sv[2];
    fuzz_check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    if (srv_add_conn(s, sv[1]) != 0) { /* the server closed sv[1] */
        close(sv[0]);
        return;
    }
    struct buf resp = {0};
    size_t sent = 0;
    int steps = 0, idle = 0;
    for (int r = 0; r < MAX_ROUNDS && idle < IDLE_ROUNDS && steps < MAX_STEPS; r++) {
        if (round_trip(s, sv[0], data, size, &sent, &resp, &steps, true))
            idle = 0;
        else
            idle++;
    }
    close(sv[0]); /* hang up: whatever still runs must be cancelled */
    int r = 0;
    for (; r < MAX_DRAIN; r++) {
        if (srv_n_conns(s) == 0 && srv_n_active(s) == 0 && !engine_busy()) break;
        round_trip(s, -1, data, size, &sent, &resp, &steps, true);
    }
    fuzz_check(r < MAX_DRAIN, "the connection closes and its requests end after a hang-up");
    struct anvil_engine_stats st;
    anvil_engine_get_stats(g_engine, &st);
    fuzz_check(st.kv_blocks_used == 0, "every KV block is free after the exchange");
    if (getenv("FUZZ_HTTP_TRACE")) { /* what the server answered, for debugging */
        fprintf(stderr, "---- %zu bytes in, %zu out, %d engine steps\n", size, resp.len, steps);
        fwrite(resp.p ? resp.p : "", 1, resp.len < 4096 ? resp.len : 4096, stderr);
        fputc('\n', stderr);
    }
    check_responses(resp.p ? resp.p : "", resp.len);
    free(resp.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    exchange(g_open, data, size);
    static const char bearer[] = "Bearer";
    for (size_t i = 0; i + sizeof(bearer) - 1 <= size; i++)
        if (!memcmp(data + i, bearer, sizeof(bearer) - 1)) {
            exchange(g_keyed, data, size);
            break;
        }
    return 0;
}
