/*
 * dialect.h - the seam between the generation machinery (generate.c: jobs,
 * engine events, parking, streaming) and the API a route speaks (OpenAI
 * chat/completions, OpenAI Responses, Anthropic Messages, Ollama).
 *
 * A generation's raw text goes through an output parser (srv_outparse:
 * the model's own tool-call format and its reasoning markers) that turns
 * it into *parts*: content text, reasoning text, and tool calls (begin
 * with id and name, argument text in pieces, end). A dialect turns parts
 * into its own wire shape, streamed or whole, and formats errors in its
 * own shape. A route handler parses its body into a struct srv_req (most
 * dialects by building the equivalent chat-completions JSON and calling
 * srv_parse_request_json), then hands the request and its dialect to
 * srv_generate.
 *
 * Included at the end of srv_int.h (it uses that file's types); nothing
 * outside src/server sees it.
 */
#ifndef ANVIL_SRV_DIALECT_H
#define ANVIL_SRV_DIALECT_H

#ifndef ANVIL_SRV_INT_H
#error "include server/srv_int.h, which includes this file"
#endif

/* ---------------------------------------------------------------------- */
/* parts: what one choice's output says */

enum srv_part_kind {
    SRV_PART_CONTENT = 0, /* answer text */
    SRV_PART_REASONING,   /* thought text (reasoning_content, thinking) */
    SRV_PART_CALL_BEGIN,  /* a tool call starts: id and name known */
    SRV_PART_CALL_ARGS,   /* a piece of the current call's arguments (JSON text) */
    SRV_PART_CALL_END,    /* the current call is whole */
};

struct srv_part {
    enum srv_part_kind kind;
    int call_index;   /* CALL_*: 0, 1, ... within the choice (parallel calls) */
    const char *id;   /* CALL_BEGIN: "call_..." */
    const char *name; /* CALL_BEGIN: the function's name */
    const char *text; /* CONTENT, REASONING, CALL_ARGS: the piece (not NUL terminated) */
    size_t n;
};

typedef void (*srv_part_fn)(void *user, const struct srv_part *p);

/* ---------------------------------------------------------------------- */
/* the output parser of one choice (outparse.c) */

/* enum srv_toolfmt, enum srv_reasoningfmt, struct srv_outfmt: server/outfmt.h */

struct srv_outparse;
/* A parser for one choice. tools: the request's tools mode (enum
 * srv_tools_mode); thinking: the prompt left the model inside a thought
 * (the template opened it); id_seed: where the calls' ids come from. NULL when out of memory. */
struct srv_outparse *srv_outparse_new(const struct srv_outfmt *f, enum srv_tools_mode tools,
                                      bool thinking,
                                      uint64_t id_seed);
void srv_outparse_free(struct srv_outparse *p);
/* Feed the next n bytes of output; parts go to fn as soon as they are
 * certain (text that may be the start of a marker is held). */
void srv_outparse_feed(struct srv_outparse *p, const char *s, size_t n, srv_part_fn fn,
                       void *user);
/* End of output: releases what is held. complete: the engine finished
 * normally (not cut by max_tokens), so an open call may be closed. */
void srv_outparse_end(struct srv_outparse *p, bool complete, srv_part_fn fn, void *user);
/* Calls begun so far. */
int srv_outparse_n_calls(const struct srv_outparse *p);

/* ---------------------------------------------------------------------- */
/* a whole choice, accumulated from its parts (generate.c) */

struct srv_call_out {
    char id[40];
    char name[65];
    char *args; /* malloc'd, NUL terminated JSON text */
    size_t n_args;
    bool whole; /* CALL_END seen */
};

struct srv_choice {
    int index;
    const char *content; /* answer text */
    size_t n_content;
    const char *reasoning; /* thought text */
    size_t n_reasoning;
    struct srv_call_out *calls;
    int n_calls;
    const struct srv_tok *toks; /* the choice's tokens, NULL unless logprobs or return_token_ids */
    int32_t n_toks;
    anvil_token eog; /* the end-of-generation token that ended it, or -1 */
    const char *finish; /* OpenAI's word: "stop", "length", "tool_calls" */
    enum anvil_finish engine_finish;
    int32_t n_gen;
};

/* The usage of a whole request (all choices). */
struct srv_usage {
    int32_t n_prompt;
    int32_t n_cached; /* prompt tokens taken from the prefix cache */
    int32_t n_gen;
    /* the engine's measured times (seconds; the slowest choice): queue
     * wait, prefill, decode; all 0 when not known */
    double queue_s, prefill_s, decode_s;
};

/* ---------------------------------------------------------------------- */
/* dialects */

/* What a formatter may read of the request being answered. */
struct srv_gen_view {
    const struct srv_resp_info *ri; /* id, created, model id, the model, logprobs */
    const struct srv_req *req;
    void *state;                    /* the dialect's per-request state (make_state) */
    int n_choices;                  /* choices the request asks for (n: 1 and up) */
    const struct srv_usage *usage;  /* the usage so far (set for stream_error) */
    /* vLLM's prompt_logprobs (req->prompt_lp): (n_prompt_toks,) records,
     * the first one's logprob NaN; alternatives are the
     * ANVIL_MAX_TOP_LOGPROBS best (the rank comes from them). NULL when
     * not asked for. */
    const struct srv_tok *prompt_toks;
    int32_t n_prompt_toks;
};

struct srv_dialect {
    const char *name;         /* "openai", "responses", "anthropic", "ollama" */
    const char *stream_ctype; /* "text/event-stream" or "application/x-ndjson" */
    /* An error body in this API's shape (status is e->status). */
    void (*error)(struct sbuf *b, const struct srv_err *e);
    /* Per-request state, or NULL for none; freed with free_state. */
    void *(*make_state)(void);
    void (*free_state)(void *state);
    /* A stream: once before any part (the role chunk, message_start,
     * response.created ...); every part of choice `choice` as it comes;
     * an error that ends the stream; the end, with every choice whole.
     * After stream_error, stream_end is not called. A CONTENT part may be
     * empty (n 0): it carries the logprobs of tokens whose text was held
     * back, and a dialect without logprobs writes nothing for it. */
    void (*stream_start)(struct sbuf *b, const struct srv_gen_view *v);
    void (*stream_part)(struct sbuf *b, const struct srv_gen_view *v, int choice,
                        const struct srv_part *p, const struct srv_tok *toks, int32_t n_toks);
    void (*stream_error)(struct sbuf *b, const struct srv_gen_view *v, const struct srv_err *e);
    void (*stream_end)(struct sbuf *b, const struct srv_gen_view *v,
                       const struct srv_choice *choices, int n_choices,
                       const struct srv_usage *u);
    /* A whole answer. */
    void (*full)(struct sbuf *b, const struct srv_gen_view *v, const struct srv_choice *choices,
                 int n_choices, const struct srv_usage *u);
};

extern const struct srv_dialect srv_dialect_openai; /* chat.completion(.chunk), text_completion */

/* Parse a body that is already JSON (a dialect's translation into the
 * chat-completions shape): the checks of srv_parse_request after the
 * text is parsed. root is borrowed. */
bool srv_parse_request_json(const struct srv_limits *lim, enum srv_kind kind,
                            const struct cJSON *root,
                            struct srv_req *out, struct srv_err *err);

/* An unknown request field ignored (not under --strict): its name (cut
 * to 47 bytes, anything but printable ASCII and ',' as '_') logged once
 * per server process and appended to the comma-separated list[cap] that
 * becomes the X-Anvil-Ignored-Fields header, when it fits. */
void srv_note_ignored(char *list, size_t cap, const char *name);

/* Submit req (taken over: left empty) and answer the connection in
 * dialect d: streamed when req->stream, whole otherwise. Errors before
 * the first byte are sent in d's shape. */
enum MHD_Result srv_generate(struct srv *s, struct MHD_Connection *c, struct conn *k, struct srv_req *req,
                 const struct srv_dialect *d);

/* Send e in d's error shape. */
enum MHD_Result srv_send_dialect_err(struct srv *s, struct MHD_Connection *c, const struct srv_dialect *d,
                         const struct srv_err *e);

#endif
