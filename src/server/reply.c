/*
 * reply.c - queueing an answer on a connection: the headers every
 * response of the server carries, the status counted in the metrics, and
 * the send helpers for a formatted buffer and an OpenAI error body.
 *
 * Both sides of the server answer through here: the routes of http.c and
 * the generation routes of generate.c; it calls neither (so the two do not
 * call each other in a circle).
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "server/srv_int.h"

const char *srv_cors_origin(struct srv *s, struct MHD_Connection *c) {
    if (!s->cors) return NULL;
    const char *o = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!o || !o[0]) return NULL;
    if (!strcmp(s->cors, "*")) return o;
    size_t n = strlen(o);
    for (const char *p = s->cors; *p;) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == n && !memcmp(p, o, n)) return o;
        if (!q) break;
        p = q + 1;
    }
    return NULL;
}

enum MHD_Result srv_queue(struct srv *s, struct MHD_Connection *c, unsigned status,
                          struct MHD_Response *r) {
    if (s->replica_id) MHD_add_response_header(r, "X-Anvil-Replica", s->replica_id);
    const char *origin = srv_cors_origin(s, c);
    if (origin) { /* CORS: a browser page of an allowed origin may read the answer */
        bool any = !strcmp(s->cors, "*");
        MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
        if (!any) MHD_add_response_header(r, "Vary", "Origin");
        MHD_add_response_header(r, "Access-Control-Expose-Headers",
                                "X-Anvil-Ignored-Fields, X-Anvil-Replica, Retry-After");
    }
    /* a 503 (overloaded, too many connections, draining) also frees the
     * connection; while draining every answer does */
    if ((status == 503 || atomic_load(&s->draining)) &&
        !MHD_get_response_header(r, MHD_HTTP_HEADER_CONNECTION))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    srv_metrics_status(&s->metrics, (int)status);
    return ret;
}

enum MHD_Result srv_send_sbuf(struct srv *s, struct MHD_Connection *c, int status,
                              const char *ctype, struct sbuf *b, const char *hdr,
                              const char *val) {
    if (b->oom) {
        sb_free(b);
        sb_puts(b, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                   "\"param\":null,\"code\":null}}");
        status = 500;
        ctype = "application/json";
        hdr = NULL;
        if (b->oom) return MHD_NO;
    }
    size_t len = 0;
    char *p = sb_take(b, &len);
    if (!p) return MHD_NO;
    /* the storage is core_realloc's (core/sbuf.h): core_free releases it */
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, p, core_free);
    if (!r) {
        core_free(p);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hdr) MHD_add_response_header(r, hdr, val);
    return srv_queue(s, c, (unsigned)status, r);
}

enum MHD_Result srv_send_err(struct srv *s, struct MHD_Connection *c, const struct srv_err *e,
                             const char *hdr, const char *val) {
    struct sbuf b;
    sb_init(&b);
    srv_fmt_error(&b, e);
    return srv_send_sbuf(s, c, e->status, "application/json", &b, hdr, val);
}

enum MHD_Result srv_send_errf(struct srv *s, struct MHD_Connection *c, int status,
                              const char *type, const char *code, const char *hdr,
                              const char *val, const char *msg) {
    struct srv_err e;
    srv_err_set(&e, status, type, code, NULL, "%s", msg);
    return srv_send_err(s, c, &e, hdr, val);
}

enum MHD_Result srv_send_dialect_err(struct srv *s, struct MHD_Connection *c,
                                     const struct srv_dialect *d, const struct srv_err *e) {
    struct sbuf b;
    sb_init(&b);
    d->error(&b, e);
    /* an overloaded engine: come back in a second */
    bool retry = e->status == 503 && e->code && !strcmp(e->code, "engine_overloaded");
    return srv_send_sbuf(s, c, e->status, "application/json", &b, retry ? "Retry-After" : NULL,
                         retry ? "1" : NULL);
}
