/*
 * webui.c - serve the chat page (src/server/webui/: index.html, app.js,
 * style.css, favicon.svg) from the arrays the build embedded.
 *
 * What it does not do: touch the file system. The set of paths is fixed
 * at build time and a request path matches one of them exactly or finds
 * nothing, so path tricks ("/../", "%2e%2e", "%2f", double encoding) have
 * nothing to escape from; they are plain 404s (http.c).
 *
 * Headers: a strong ETag with If-None-Match -> 304, Cache-Control
 * no-cache (revalidate every load, so a new binary's page is picked up
 * at once), nosniff, and a Content-Security-Policy that allows scripts
 * and styles from this origin only. The page builds every message with
 * textContent (it never parses model output as HTML); the policy is the
 * second line of defence: even an injected <script> or inline handler
 * would not run.
 */
#include <string.h>

#include <microhttpd.h>

#include "server/srv_web.h"

/* connect-src 'self': the page only talks to this server's API. */
#define CSP                                                                                    \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "        \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const struct srv_asset *srv_asset_find(const char *url) {
    if (!url) return NULL;
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t i = 0; i < srv_n_assets; i++)
        if (!strcmp(url, srv_assets[i].path)) return &srv_assets[i];
    return NULL;
}

/* If-None-Match: "*" or a comma-separated list of (possibly weak) tags. */
static bool etag_matches(const char *inm, const char *etag) {
    if (!inm) return false;
    size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (*p == '*') return true;
        if (!strncmp(p, "W/", 2)) p += 2;
        if (!strncmp(p, etag, n)) {
            char c = p[n];
            if (c == '\0' || c == ',' || c == ' ' || c == '\t') return true;
        }
        while (*p && *p != ',') p++;
    }
    return false;
}

struct MHD_Response *srv_asset_response(const struct srv_asset *a, const char *if_none_match,
                                        unsigned *status) {
    bool not_modified = etag_matches(if_none_match, a->etag);
    /* the bytes live in the binary for its whole life: no copy */
    struct MHD_Response *r = MHD_create_response_from_buffer(
        not_modified ? 0 : a->len, not_modified ? NULL : (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return NULL;
    if (!not_modified) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, a->etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
    *status = not_modified ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK;
    return r;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t srv_url_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hexval(r[1]) : -1, lo = hi >= 0 ? hexval(r[2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
            continue;
        }
        *w++ = *r++; /* a literal byte, "%00", or a malformed escape */
    }
    *w = '\0';
    return (size_t)(w - s);
}
