/*
 * srv_int.h - declarations shared by the files of src/server (not by
 * anything outside it).
 *
 * Files, in the order a request meets them:
 *   http.c       libmicrohttpd glue: connections and their limits,
 *                routing, bodies, auth, the small GET routes, life cycle;
 *   reply.c      queueing an answer (common headers, metrics, send
 *                helpers), used by http.c and generate.c alike;
 *   fields.c     the JSON field validators and the OpenAI error record;
 *   request.c    JSON body -> struct srv_req (accepted fields, sampling,
 *                stop, logprobs), calling:
 *   prompt.c     messages through the chat template, or the prompt;
 *   fit.c        prompt + completion against the context and KV cache;
 *   structured.c response_format, grammar, regex -> the constraint;
 *   ccache.c     compiled constraints kept by their source;
 *   toolcall.c   tool calling: tools and tool_choice -> the call's
 *                constraint and prompt text, output -> tool calls;
 *   generate.c   the two generation routes: jobs, engine events, parked
 *                connections, streaming;
 *   response.c   OpenAI JSON and SSE shapes;
 *   metrics.c    counters, histograms, Prometheus text.
 * webui.c, tokenize.c and props.c (the chat page, /tokenize, /detokenize,
 * /props, the model entry) declare theirs in srv_web.h.
 * The growable buffer and its JSON escaping are core/sbuf.h.
 */
#ifndef ANVIL_SRV_INT_H
#define ANVIL_SRV_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "anvil.h"
#include "core/sbuf.h"
#include "server/outfmt.h"
#include "server/server.h"


/* ---------------------------------------------------------------------- */
/* request parsing (request.c and its parts) */

enum srv_kind { SRV_KIND_CHAT, SRV_KIND_COMPLETION };

#define SRV_MAX_STOP ANVIL_MAX_STOP
#define SRV_MAX_STOP_LEN ANVIL_MAX_STOP_LEN
/* Arrays and objects nested deeper than this are a 400. The deepest body
 * the OpenAI API defines (a message's content parts) nests 4 levels; a
 * JSON schema in response_format may go deeper, so the bound leaves room
 * while keeping cJSON's recursive parser (its own limit is 1000) far
 * from the thread's stack. */
#define SRV_MAX_JSON_DEPTH 64

/* OpenAI error: {"error": {"message", "type", "param", "code"}}; set
 * with srv_err_set (fields.c), written by srv_fmt_error (response.c). */
struct srv_err {
    int status;
    const char *type;  /* "invalid_request_error", "server_error", ... */
    const char *code;  /* NULL or "model_not_found", "invalid_api_key", ... */
    char param[64];    /* "" = null */
    char message[512];
};

void srv_err_set(struct srv_err *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* ---------------------------------------------------------------------- */
/* JSON field validators (fields.c): a JSON null is an absent field, no
 * type coercion; on error they fill e naming the field and return false */

struct cJSON;

/* A 400 invalid_request_error naming param (NULL = none); returns false. */
bool srv_bad(struct srv_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A 500 server_error "out of memory"; returns false. */
bool srv_oom(struct srv_err *e);
/* "a string", "a number", "a boolean", "an array", "an object", "null" */
const char *srv_type_name(const struct cJSON *v);
/* Member key of o, NULL when absent or null. */
const struct cJSON *srv_field(const struct cJSON *o, const char *key);
/* Optional typed members: true when absent (out untouched; *present,
 * if given, says which) or valid. An integer must be integral and in
 * [lo, hi]; a number finite and in [lo, hi]. */
bool srv_get_bool(const struct cJSON *o, const char *key, bool *out, bool *present,
                  struct srv_err *e);
bool srv_get_int(const struct cJSON *o, const char *key, double lo, double hi, long long *out,
                 bool *present, struct srv_err *e);
bool srv_get_num(const struct cJSON *o, const char *key, double lo, double hi, float *out,
                 struct srv_err *e);
/* What cJSON does not check or cannot represent, in one pass over the
 * raw bytes of a body:
 *   - JSON text is UTF-8 (RFC 8259 section 8.1); cJSON copies string
 *     bytes through unchecked;
 *   - arrays and objects nest at most SRV_MAX_JSON_DEPTH levels;
 *   - strings hold no raw control characters (RFC 8259 section 7 wants
 *     them escaped; cJSON lets them through);
 *   - no string holds the escape \u0000: cJSON stores strings NUL
 *     terminated, so "ab\u0000cd" would silently become "ab" (a prompt,
 *     a stop string or a field name cut short).
 * A 400 naming the offset on failure. */
bool srv_json_prescan(const char *body, size_t len, struct srv_err *e);
/* cJSON_ParseWithLengthOpts(body, len, end, false) under one lock: cJSON
 * keeps a global error record that concurrent parses would race on.
 * Free the result with cJSON_Delete. */
struct cJSON *srv_json_parse(const char *body, size_t len, const char **end);

/* Compiled constraints by source (ccache.c): a schema sent with every
 * request is compiled once and its masks are shared. Thread-safe. */
#define SRV_CCACHE_N 8
struct srv_ccache;
struct srv_ccache *srv_ccache_new(void); /* NULL when out of memory: no cache */
void srv_ccache_free(struct srv_ccache *c);
/* A compiled constraint (a new reference in *out) from the cache, or
 * compiled now (anvil_constraint_compile's status and message). cc NULL:
 * always compiled, nothing kept. */
anvil_status srv_ccache_get(struct srv_ccache *cc, const struct anvil_model *m,
                            enum anvil_constraint_kind kind,
                            const struct anvil_constraint_params *p, const char *text,
                            size_t len, struct anvil_constraint **out, char *err,
                            size_t err_cap);

/* What the parser needs to know about the serving side. */
struct srv_limits {
    const struct anvil_model *model;
    const char *model_id;
    int32_t n_vocab;
    int32_t n_ctx;       /* prompt + max_tokens must fit */
    int64_t kv_tokens;   /* anvil_engine_seq_capacity (0 = unknown) */
    uint64_t default_seed; /* seed of a request that gives none; 0 = a fresh random one */
    struct srv_ccache *cc; /* compiled constraints, or NULL (compile every time) */
    struct srv_outfmt outfmt; /* the template's tool-call format and reasoning markers */
    bool strict; /* anvil serve --strict: an unknown request field is a 400 (else ignored) */
    /* anvil serve --reasoning-budget N: a thought's tokens at most (0: no
     * thinking), for requests that give no reasoning_budget */
    bool has_reasoning_budget;
    int32_t reasoning_budget;
};

/* tool_choice, resolved (toolcall.c) */
enum srv_tools_mode {
    SRV_TOOLS_NONE = 0, /* no tools, or "none": nothing constrained, tools not shown */
    SRV_TOOLS_AUTO,     /* a call or words, decided by the first character */
    SRV_TOOLS_REQUIRED, /* a call to one of the tools */
    SRV_TOOLS_NAMED,    /* a call to the named tool */
};

/* What the server knows about itself, for /props, /v1/models and the
 * tokenizer endpoints (props.c, tokenize.c). All strings are borrowed
 * and outlive the server. */
struct srv_info {
    const struct anvil_model *model;
    const char *model_id;
    const char *replica_id; /* "" = none */
    int32_t n_ctx;          /* prompt + completion tokens per request */
    int32_t parallel;       /* sequences the engine decodes at once */
    bool webui;             /* the chat page is served at / */
    long long created;      /* unix seconds, the models' "created" */
};

/* A request after validation: everything the engine submit needs, plus
 * the response options. Owned by whoever called srv_parse_request; free
 * with srv_req_free. */
struct srv_req {
    enum srv_kind kind;
    anvil_token *prompt; /* (n_prompt,) malloc'd */
    int32_t n_prompt;
    int32_t max_tokens;
    struct anvil_sampler_params sampling;
    bool ignore_eos;
    enum anvil_spec spec;   /* extension "spec": off / ngram / draft; DEFAULT = the server's */
    int32_t spec_k;         /* extension "spec_k": 1..ANVIL_SPEC_K_MAX; 0 = the server's */
    char *stop[SRV_MAX_STOP]; /* malloc'd strings */
    int32_t n_stop;
    bool logprobs;        /* report the chosen token's logprob */
    int32_t top_logprobs; /* alternatives to report (0..20) */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    /* structured output: response_format (json_object, json_schema), the
     * extensions grammar / regex, or the tool call; NULL = free text */
    struct anvil_constraint *constraint;
    enum srv_tools_mode tools; /* the output may be (or must be) a tool call */
    bool reasoning_open; /* the rendered prompt ends inside a thought (the template opened it) */
    int32_t n;           /* choices (n), 1 and up; 0 reads as 1 */
    bool echo;           /* completions: the prompt's text comes first (echo) */
    bool return_token_ids; /* vLLM's: prompt_token_ids in the answer */
    bool prompt_lp;        /* vLLM's prompt_logprobs asked for ... */
    int32_t prompt_lp_k;   /* ... with this many alternatives (0..ANVIL_MAX_TOP_LOGPROBS) */
    /* unknown top-level fields that were ignored, comma separated, for the
     * X-Anvil-Ignored-Fields header ("" = none; cut to fit) */
    char ignored[256];
    /* reasoning and the model's own tool-call format (request.c,
     * structured.c; docs/tool-calls.md) */
    struct srv_outfmt outfmt;   /* what the output parser reads (chat; reasoning_format
                                   "none" leaves thoughts in the content) */
    int32_t reasoning_budget;   /* a thought's tokens at most; -1: no limit */
    bool parallel_calls;        /* parallel_tool_calls (true unless false) */
    bool think_gate;            /* the engine holds the constraint until a thought ends */
    anvil_token *think_end;     /* (n_think_end,) malloc'd: the tokens that end a thought */
    int32_t n_think_end;
    anvil_token *answer_prefix; /* (n_answer_prefix,) malloc'd: forced before the answer */
    int32_t n_answer_prefix;
    anvil_token think_start[16]; /* a thought the model may open itself (structured.c) */
    int32_t n_think_start;
};

/* Parse and validate a JSON body. On failure fills err (400 and the
 * offending param; 404 model_not_found for another model's name; 500 when
 * out of memory) and returns false; *out is then empty (safe to
 * srv_req_free). Never reads past body[len]. */
bool srv_parse_request(const struct srv_limits *lim, enum srv_kind kind, const char *body,
                       size_t len, struct srv_req *out, struct srv_err *err);
void srv_req_free(struct srv_req *r);
/* srv_parse_request, or with infill POST /infill's body (input_prefix,
 * input_suffix, input_extra, prompt and every completions field; kind
 * SRV_KIND_COMPLETION). */
bool srv_parse_request_ex(const struct srv_limits *lim, enum srv_kind kind, bool infill,
                          const char *body, size_t len, struct srv_req *out, struct srv_err *err);
/* The fill-in-the-middle prompt (infill.c) into r->prompt: from POST
 * /infill's fields when route, else from a completion's prompt and
 * suffix. A vocabulary without FIM tokens is a 400 naming them. */
bool srv_parse_infill(const struct srv_limits *lim, const struct cJSON *root, bool route,
                      struct srv_req *r, struct srv_err *e);
/* The sampling fields of root into r->sampling (sampling.c): OpenAI's,
 * top_k/min_p, llama-server's samplers, logit_bias; n_probs sets
 * r->logprobs/top_logprobs when logprobs was not asked for (call after
 * those are parsed). false with e filled (400) on a bad field. */
bool srv_parse_sampling(const struct srv_limits *lim, const struct cJSON *root, struct srv_req *r,
                        struct srv_err *e);

struct srv_tools;

/* The parts of a request (prompt.c, fit.c, structured.c), each filling
 * its share of r; false with e filled on error. */
/* Chat messages (and, with tools, their system text) through the chat
 * template into r->prompt. */
bool srv_parse_messages(const struct srv_limits *lim, const struct cJSON *root,
                        const struct srv_tools *tools, struct srv_req *r, struct srv_err *e);
/* The Jinja template's context for a chat request (root's messages,
 * tools unless tool_choice is none, add_generation_prompt,
 * reasoning_effort, chat_template_kwargs merged at top level) as JSON text
 * (free with free); NULL with e set (400 for a bad kwargs/effort field).
 * tmpl_src: the template's text; one that never names tools, tool_calls
 * or the tool role gets them as the built-in families do. */
char *srv_chat_context(const struct cJSON *root, const struct srv_tools *tools,
                       const char *tmpl_src, bool add_generation, struct srv_err *e);
/* POST /apply-template (llama-server's shape): messages, tools,
 * add_generation_prompt, chat_template_kwargs, reasoning_effort in,
 * {"prompt": "..."} out (the text the model would be given, BOS included
 * when the template writes it). false with e set (400 for a bad body or a
 * template error). */
bool srv_apply_template(const struct srv_info *in, const char *body, size_t len,
                        struct sbuf *out, struct srv_err *e);
/* A completion's prompt: a string, token ids, or a batch of one. */
bool srv_parse_prompt(const struct srv_limits *lim, const struct cJSON *root, struct srv_req *r,
                      struct srv_err *e);
/* r->n_prompt plus the completion against the context and the KV cache;
 * sets r->max_tokens (max_tokens when has_max, else the default). pname
 * names the prompt's field in the error. */
bool srv_fit(const struct srv_limits *lim, struct srv_req *r, const char *pname, bool has_max,
             long long max_tokens, struct srv_err *e);
/* The 400 context_length_exceeded of a prompt of n tokens over limit:
 * "... However, your <what> <n> tokens long." (what: "prompt is",
 * "messages are"). Returns false. */
bool srv_too_long(struct srv_err *e, const char *param, long long limit, const char *what,
                  long long n);
/* response_format, grammar, regex or the tool call -> r->constraint (and
 * r->tools), compiled through lim->cc. */
bool srv_parse_constraint(const struct srv_limits *lim, const struct cJSON *root,
                          const struct srv_tools *tools, struct srv_req *r,
                          struct srv_err *e);

/* ---------------------------------------------------------------------- */
/* tool calling (toolcall.c) */

#define SRV_MAX_TOOLS 128
#define SRV_TOOL_NAME_MAX 64

/* tools and tool_choice of a chat body (borrowed from the parsed JSON) */
struct srv_tools {
    enum srv_tools_mode mode;
    int n;
    const struct cJSON *fn[SRV_MAX_TOOLS]; /* each tool's "function" object */
    const char *name[SRV_MAX_TOOLS];
    int named; /* SRV_TOOLS_NAMED: index into fn */
};

/* Check tools/tool_choice (400 naming the field on error). */
bool srv_tools_parse(const struct cJSON *root, struct srv_tools *t, struct srv_err *e);
/* The JSON Schema of a call ({"name", "arguments"}) under tool_choice:
 * malloc'd text, NULL when out of memory. */
char *srv_tools_schema(const struct srv_tools *t);
/* The call of tool_choice required / named in the model's own format f:
 * the JSON Schema (malloc'd) of the text after the format's opening
 * marker, which goes to prefix ("" when the call has none). parallel:
 * formats whose calls are a JSON array take one or more, else one.
 * NULL with e set (400, or 500 when out of memory) when f cannot hold
 * the choice. */
char *srv_tools_family(const struct srv_tools *t, enum srv_toolfmt f, bool parallel,
                       struct sbuf *prefix, struct srv_err *e);
/* required / named in a family's format where each call is the tool's
 * name inside literal markers (Hermes, Llama 3, harmony, DeepSeek,
 * Functionary): the ANVIL_CONSTRAINT_CALLS document for one or more calls
 * (exactly one without parallel), each of a tool the mode allows with
 * arguments under its own schema; prefix gets the forced opening text.
 * NULL with *handled false for other formats; NULL with *handled true
 * when out of memory. */
char *srv_tools_calls(const struct srv_tools *t, enum srv_toolfmt f, bool parallel,
                      struct sbuf *prefix, bool *handled);
/* System-prompt text listing the functions and how to call them (free
 * with core_free; NULL when out of memory). */
char *srv_tools_prompt(const struct srv_tools *t);

/* Splits a streamed output into content text and a call's arguments. */
enum srv_call_state {
    SRV_CALL_UNDECIDED = 0, /* "auto": nothing seen yet */
    SRV_CALL_TEXT,          /* an answer in words: everything is content */
    SRV_CALL_HEAD,          /* reading {"name": "...", "arguments": */
    SRV_CALL_ARGS,          /* inside the arguments */
};
struct srv_call {
    enum srv_call_state state;
    bool named;                          /* the name is known (ARGS reached) */
    char name[SRV_TOOL_NAME_MAX + 1];
    struct sbuf head;                    /* the call so far, until the arguments */
    struct sbuf tail;                    /* held: trailing whitespace and '}' */
};
/* forced: the output is a call (required, named); else "auto". */
void srv_call_init(struct srv_call *c, bool forced);
void srv_call_free(struct srv_call *c);
/* Feed the next n bytes of output: content text goes to content, the
 * arguments' text to args (a trailing run of '}' and whitespace is held:
 * the call's closing brace may be among it). */
void srv_call_feed(struct srv_call *c, const char *s, size_t n, struct sbuf *content,
                   struct sbuf *args);
/* End of output: complete (the call is whole) drops the call's closing
 * brace from what is held; the rest is released. */
void srv_call_end(struct srv_call *c, bool complete, struct sbuf *content, struct sbuf *args);
/* "call_" and 24 letters and digits from seed. */
void srv_call_id(char *out, size_t cap, uint64_t seed);

/* ---------------------------------------------------------------------- */
/* response formatting (response.c) */

/* One generated token as reported by the engine (for logprobs). */
struct srv_tok {
    anvil_token token;
    float logprob;
    bool echo; /* a prompt token echoed (echo): not among return_token_ids' token_ids */
    int32_t n_top;
    const anvil_token *top_tokens; /* (n_top,) */
    const float *top_logprobs;     /* (n_top,) */
};

struct srv_resp_info {
    enum srv_kind kind;
    const char *id;    /* "chatcmpl-..." / "cmpl-..." */
    long long created; /* unix seconds */
    const char *model_id;
    const struct anvil_model *model;
    bool logprobs;
    int32_t top_logprobs;
    bool token_ids; /* vLLM's return_token_ids: each choice's (or chunk's) token_ids */
};

/* Error body. */
void srv_fmt_error(struct sbuf *b, const struct srv_err *e);
/* The raw bytes of token t (control tokens give their text) into scratch
 * (cleared first). False when out of memory. */
bool srv_token_piece(const struct anvil_model *m, anvil_token t, struct sbuf *scratch);
/* "data: {chunk}\n\n" with `text` (may be empty) and the logprobs of toks;
 * first_chat adds the assistant role to a chat delta; finish is NULL or
 * "stop"/"length". text_offset is the completion's text length before this
 * chunk (legacy completions logprobs). */
void srv_fmt_chunk(struct sbuf *b, const struct srv_resp_info *ri, const char *text, size_t n,
                   const struct srv_tok *toks, int32_t n_toks, bool first_chat,
                   const char *finish, size_t text_offset);
/* "data: {usage chunk}\n\n" (stream_options.include_usage). */
void srv_fmt_usage_chunk(struct sbuf *b, const struct srv_resp_info *ri, int32_t n_prompt,
                         int32_t n_gen);
/* "data: {chunk}\n\n" of a tool-call delta: with name (the first
 * delta of the call) the id, type and name, then arguments text. */
void srv_fmt_tool_chunk(struct sbuf *b, const struct srv_resp_info *ri, const char *call_id,
                        const char *name, const char *args, size_t n,
                        const struct srv_tok *toks, int32_t n_toks);
/* A tool call of a whole response. */
struct srv_tool_call {
    const char *id, *name;
    const char *args; /* arguments JSON text */
    size_t n_args;
};
/* Whole non-streaming response: call NULL for content text, else the
 * message carries the call (content null). */
void srv_fmt_full(struct sbuf *b, const struct srv_resp_info *ri, const char *text, size_t n,
                  const struct srv_tok *toks, int32_t n_toks, const char *finish,
                  int32_t n_prompt, int32_t n_gen, const struct srv_tool_call *call);
/* finish_reason string for an engine finish (NULL for NONE). */
const char *srv_finish_str(enum anvil_finish f);
#define SRV_N_FINISH (ANVIL_FINISH_CONSTRAINT + 1) /* values of enum anvil_finish */

/* ---------------------------------------------------------------------- */
/* metrics (metrics.c): lock-free counters written from HTTP threads and
 * the engine's driver thread, read by GET /metrics. */

#define SRV_HIST_MAX 16

struct srv_hist {
    int n_bounds;
    double bounds[SRV_HIST_MAX]; /* upper bounds in seconds, increasing */
    _Atomic uint64_t counts[SRV_HIST_MAX + 1]; /* per bucket, last = +Inf */
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t count;
};

enum { SRV_N_CODES = 11 };

struct srv_metrics {
    _Atomic uint64_t by_code[SRV_N_CODES]; /* indexed by srv_code_index */
    _Atomic uint64_t finished[SRV_N_FINISH]; /* by enum anvil_finish */
    _Atomic int64_t in_flight;             /* generation requests submitted, not done */
    _Atomic int64_t conns_open;            /* connections accepted, not yet closed */
    _Atomic uint64_t conns_total;          /* connections accepted */
    _Atomic uint64_t conns_refused;        /* over max_conn: 503 and closed */
    _Atomic uint64_t conns_head_timeout;   /* request head not in time: closed */
    _Atomic uint64_t client_gone;          /* parked requests whose client left */
    struct srv_hist ttft, itl;
};

void srv_metrics_init(struct srv_metrics *m);
void srv_metrics_status(struct srv_metrics *m, int status);
void srv_hist_observe(struct srv_hist *h, double seconds);
/* Prometheus text exposition format 0.0.4. */
void srv_fmt_metrics(struct sbuf *b, struct srv_metrics *m, const struct anvil_engine_stats *st);

/* ---------------------------------------------------------------------- */
/* the daemon (http.c) and the generation routes (generate.c) */

struct job;   /* one generation request (generate.c) */
struct sconn; /* one TCP connection (http.c) */

struct srv {
    struct MHD_Daemon *d;
    struct anvil_model *model;
    struct anvil_engine *engine;
    struct srv_config cfg;
    char *host, *api_key, *model_id, *replica_id; /* owned copies of cfg strings */
    char *cors; /* owned copy of cfg.cors_origins, NULL = no CORS */
    struct srv_info info; /* for /props, /v1/models, /tokenize */
    struct srv_limits lim;
    struct srv_metrics metrics;
    int port;
    long long created;
    uint32_t salt;
    _Atomic uint64_t next_seq;
    atomic_bool draining; /* srv_quiesce: new requests get 503 */
    atomic_bool stopping; /* srv_stop: nothing parks any more */

    /* generation requests submitted and not yet DONE (generate.c) */
    pthread_mutex_t mu;
    struct job *jobs;
    int n_jobs;
    /* jobs not yet freed: a job leaves `jobs` at DONE while its answer may
     * still be on its way out; srv_n_active counts these, so a drain waits
     * for the last byte (generate.c) */
    atomic_int n_live;
    /* connections suspended for a parked job, plus resumed ones whose
     * handler has not run again yet: srv_stop waits for 0 before it stops
     * MHD, which must not hold a suspended connection then */
    atomic_int n_suspended;

    /* open connections (http.c), under conn_mu */
    pthread_mutex_t conn_mu;
    struct sconn *conns;
    int n_conns;

    /* the sweep's thread (not with cfg.external) */
    pthread_t watcher;
    bool watcher_on;
    pthread_mutex_t watch_mu;
    pthread_cond_t watch_cv;
    bool watch_stop; /* under watch_mu */

    struct srv_emb *emb; /* embeddings and reranking (api_embed.c) */
};

/* Per HTTP request (MHD's con_cls): created when its headers are in,
 * freed when MHD reports the request complete. */
struct conn {
    const struct srv_route *rt;
    char *body; /* POST body so far, NUL terminated */
    size_t body_len, body_cap;
    struct job *job; /* generation routes, once submitted */
    bool responded;  /* a response is queued: ignore the rest */
    bool too_large;  /* chunked body past max_body: dropping the rest, then 413 */
    size_t discarded; /* bytes dropped so far */
};

/* A route handler. GET routes run as soon as the headers are in, POST
 * routes once the whole body is (k->body, k->body_len). A handler queues
 * a response (srv_send_*), parks the connection until the engine has
 * something (generate.c), or returns MHD_NO to close the connection. */
typedef enum MHD_Result (*srv_handler_fn)(struct srv *s, struct MHD_Connection *c,
                                          struct conn *k, const char *url);

enum { SRV_GET = 1, SRV_POST = 2, SRV_DELETE = 4 }; /* SRV_DELETE: /v1/responses/{id} */

struct srv_route {
    const char *path;   /* exact match, or a prefix when it ends in '/' */
    unsigned methods;   /* SRV_GET (GET and HEAD) or SRV_POST */
    bool open;          /* served without the API key */
    srv_handler_fn fn;
    bool page;          /* part of the chat page: routed only with cfg.webui */
};

/* ---------------------------------------------------------------------- */
/* answers (reply.c) */

/* The Origin header of c's request when cfg.cors_origins allows it (then
 * every answer carries the Access-Control-Allow-* headers), else NULL. */
const char *srv_cors_origin(struct srv *s, struct MHD_Connection *c);
/* Queue r on c with the headers every response of the server carries
 * (X-Anvil-Replica; the CORS headers for an allowed Origin; Connection:
 * close on a 503 and while the server
 * drains, so that a load balancer reconnects elsewhere), count its status
 * in the metrics, and destroy our reference to r. */
enum MHD_Result srv_queue(struct srv *s, struct MHD_Connection *c, unsigned status,
                          struct MHD_Response *r);
/* Responses, through srv_queue. b is consumed. */
enum MHD_Result srv_send_sbuf(struct srv *s, struct MHD_Connection *c, int status,
                              const char *ctype, struct sbuf *b, const char *hdr,
                              const char *val);
enum MHD_Result srv_send_err(struct srv *s, struct MHD_Connection *c, const struct srv_err *e,
                             const char *hdr, const char *val);
enum MHD_Result srv_send_errf(struct srv *s, struct MHD_Connection *c, int status,
                              const char *type, const char *code, const char *hdr,
                              const char *val, const char *msg);

/* Generation routes (generate.c): POST /v1/completions and
 * /v1/chat/completions. */
enum MHD_Result srv_post_completions(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                     const char *url);
enum MHD_Result srv_post_chat(struct srv *s, struct MHD_Connection *c, struct conn *k,
                              const char *url);
/* POST /infill (api_infill.c). */
enum MHD_Result srv_post_infill(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url);
/* MHD calls the access handler again for a request whose job parked the
 * connection and was woken: answer it, or park it again. */
enum MHD_Result srv_generate_resume(struct srv *s, struct MHD_Connection *c, struct conn *k);
/* The request of k->job is over for MHD (answered, client gone, timeout,
 * shutdown): cancel what still runs and drop the connection's reference. */
void srv_job_closed(struct job *j);
/* Poll the sockets of parked requests and cancel those whose client has
 * gone (MHD does not watch a suspended connection). */
void srv_jobs_sweep(struct srv *s);
/* srv_stop: resume every parked connection; nothing parks afterwards
 * (s->stopping is set). */
void srv_jobs_wake_all(struct srv *s);

/* API dialects and the output parser */
#include "server/dialect.h"

#endif
