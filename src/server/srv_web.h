/*
 * srv_web.h - declarations shared by the parts of src/server that serve
 * people and tools around the OpenAI API rather than the API itself:
 *
 *   webui.c  the chat page's files, embedded at build time (Makefile:
 *            tools/embed/embed.c turns src/server/webui/ into
 *            build/MODE/gen/webui_assets.c); looked up by exact path,
 *            never read from disk;
 *   tokenize.c  POST /tokenize, POST /detokenize (the endpoints
 *            llama-server users expect);
 *   props.c  GET /props and the /v1/models entry with the model's facts.
 *
 * http.c routes to these; they know nothing of connections or threads.
 */
#ifndef ANVIL_SRV_WEB_H
#define ANVIL_SRV_WEB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"
#include "server/srv_int.h"

struct MHD_Response;
struct MHD_Connection;

// ----------------------------------------------------------------------------
// embedded page (webui.c and the generated webui_assets.c)

struct srv_asset {
    const char *path;          /* "/app.js": "/" + the file's base name */
    const char *ctype;         /* Content-Type */
    const unsigned char *data; /* (len,) the file's bytes, in the binary */
    size_t len;
    const char *etag;          /* strong ETag, quoted: "\"0123456789abcdef\"" */
};

extern const struct srv_asset srv_assets[]; /* generated */
extern const size_t srv_n_assets;

/* The asset served at `url` (the decoded request path): "/" is
 * "/index.html"; every other path must equal an asset's path exactly, so
 * no spelling of "..", no encoded slash and no unknown name finds
 * anything. NULL when none. */
const struct srv_asset *srv_asset_find(const char *url);

/* A response for the asset with its headers (type, ETag, no-cache,
 * Content-Security-Policy, nosniff). If if_none_match (the request's
 * If-None-Match header, or NULL) names the asset's ETag or is "*", the
 * response is an empty 304. *status gets 200 or 304. NULL on
 * out-of-memory. The caller queues and destroys it. */
struct MHD_Response *srv_asset_response(const struct srv_asset *a, const char *if_none_match,
                                        unsigned *status);

/* libmicrohttpd's URL unescaper (MHD_OPTION_UNESCAPE_CALLBACK): "%HH"
 * becomes its byte except "%00", which stays as the three characters.
 * MHD's own decoder turns "%00" into a NUL that cuts the path the handler
 * sees, so "/app.js%00.png" would be served as "/app.js"; kept literal it
 * matches nothing and is a 404. */
size_t srv_url_unescape(void *cls, struct MHD_Connection *c, char *s);

// ----------------------------------------------------------------------------
// tokenizer endpoints (tokenize.c), props and the model entry (props.c)

/* Most tokens /tokenize returns and /detokenize accepts: a bound on the
 * memory one request can make the server spend (4 MiB of text or ids
 * is far below it in practice, but pieces multiply the output). */
#define SRV_MAX_TOK_IO (1 << 20)

/* POST /tokenize: {"content": string, "add_special": bool (false),
 * "parse_special": bool (true), "with_pieces": bool (false)} ->
 * {"tokens": [ids]} or, with pieces, {"tokens": [{"id", "piece"}]} where
 * a piece that is not valid UTF-8 on its own is given as an array of byte
 * values (as llama-server does). Unknown fields and wrong types are 400s.
 * Returns false with err filled (400 or 500); out then holds nothing
 * useful. Never reads past body[len]. */
bool srv_tokenize(const struct srv_info *in, const char *body, size_t len, struct sbuf *out,
                  struct srv_err *err);

/* POST /detokenize: {"tokens": [ids]} -> {"content": string}; control
 * tokens give their text; bytes that are not valid UTF-8 in the joined
 * text become U+FFFD. Ids outside the vocabulary are a 400. */
bool srv_detokenize(const struct srv_info *in, const char *body, size_t len, struct sbuf *out,
                    struct srv_err *err);

/* GET /props: context size, parallelism, chat template (the file's text,
 * the family anvil renders and where that choice came from: "file",
 * "vocabulary", "fallback" or "chosen" with --chat-template),
 * architecture and description, vocabulary, kernels, replica. */
void srv_fmt_props(struct sbuf *b, const struct srv_info *in);

/* GET /v1/models (single = false) and /v1/models/{id}: the OpenAI model
 * object plus "meta" with the same facts as /props. */
void srv_fmt_model_entry(struct sbuf *b, const struct srv_info *in, bool single);

#endif
