/*
 * toolfmt.h - the model families' own tool-call formats and reasoning
 * markers, parsed incrementally from a generation's raw text into parts
 * (dialect.h): content, reasoning, tool calls (begin, argument pieces,
 * end). outparse.c's srv_outparse_* are thin wrappers over srv_tfp_*.
 *
 * Every parser is fed bytes in pieces of any size (one byte at a time
 * included) and gives the same parts, once adjacent pieces of one kind
 * are joined, whatever the split: text that may be the start of a marker
 * is held until it is known not to be one. A call's CALL_BEGIN comes as
 * soon as its name is known, its arguments (JSON text) as they come.
 * Malformed output (an unclosed tag, invalid JSON, a bad name) never
 * crashes: what was not yet a call goes out as content, a call already
 * begun is ended where the output broke.
 *
 * Included by srv_int.h users only (it needs dialect.h's part types).
 */
#ifndef ANVIL_SRV_TOOLFMT_H
#define ANVIL_SRV_TOOLFMT_H

#include "server/srv_int.h"

struct srv_tfp;

/* A parser for one choice in format f. tools: SRV_TOOLS_NONE parses no
 * calls (reasoning is still split). thinking: the prompt left the model
 * inside a thought (the template opened it), so text before the closing
 * marker is reasoning. id_seed: the calls' ids ("call_" + 24 hex digits
 * derived from it and the call's index). NULL when out of memory. */
struct srv_tfp *srv_tfp_new(const struct srv_outfmt *f, enum srv_tools_mode tools, bool thinking,
                            uint64_t id_seed);
void srv_tfp_free(struct srv_tfp *p);
/* Feed the next n bytes; parts go to fn(user, part) as soon as certain.
 * A part's text and strings are valid during the call only. */
void srv_tfp_feed(struct srv_tfp *p, const char *s, size_t n, srv_part_fn fn, void *user);
/* End of output: releases what is held. complete: the engine finished
 * normally (not cut by max_tokens), so a call whose closing marker is
 * missing but whose arguments are whole is closed; otherwise such a call
 * is ended as it stands. */
void srv_tfp_end(struct srv_tfp *p, bool complete, srv_part_fn fn, void *user);
/* Calls begun so far. */
int srv_tfp_n_calls(const struct srv_tfp *p);

/* ---------------------------------------------------------------------- */
/* JSON pieces (toolfmt_json.c), used by toolfmt.c */

/* An incremental JSON value scanner (RFC 8259 grammar, depth <= 64). */
struct tf_jscan {
    int st;        /* internal state */
    int depth;
    int lit;       /* position in a literal (true/false/null) */
    char litc;     /* which literal */
    int uleft;     /* hex digits left in \u */
    int nst;       /* number sub-state */
    unsigned char stack[64];
};
enum tf_js { TF_JS_MORE = 0, TF_JS_END, TF_JS_END_PB, TF_JS_ERR };
void tf_jscan_init(struct tf_jscan *j);
/* The next byte: MORE (consumed, the value goes on), END (consumed, the
 * value is whole), END_PB (the value ended before c: c is not part of
 * it), ERR (c cannot continue a JSON value). */
enum tf_js tf_jscan_byte(struct tf_jscan *j, unsigned char c);

/* A JSON string body decoder (after the opening quote): UTF-8 out. */
struct tf_strdec {
    int st, uleft;
    unsigned u, hi;
};
enum tf_sd { TF_SD_MORE = 0, TF_SD_END, TF_SD_ERR };
void tf_strdec_init(struct tf_strdec *d);
enum tf_sd tf_strdec_byte(struct tf_strdec *d, unsigned char c, struct sbuf *out);

/* A tool call object, or an array of them, read incrementally:
 * {"name": N, "arguments": A} with the name under "name", "tool_name" or
 * "function", the arguments under "arguments" or "parameters" (an object,
 * or a string holding JSON, which is decoded), other keys skipped. */
struct tf_cobj_ops {
    /* the name is whole: false refuses it (the object fails) */
    bool (*begin)(void *u, const char *name);
    void (*args)(void *u, const char *s, size_t n);
    void (*end)(void *u);
};
struct tf_cobj {
    const struct tf_cobj_ops *ops;
    void *u;
    bool array;       /* an array of calls */
    int st;
    int which;        /* the current key: 0 other, 1 name, 2 args */
    bool named, had_args, args_str, in_array;
    struct tf_jscan js;
    struct tf_strdec sd;
    struct sbuf key, name, abuf; /* key text, name, args held before the name */
};
enum tf_co { TF_CO_MORE = 0, TF_CO_END, TF_CO_ERR };
/* array_ok: the value may be an array of call objects. */
void tf_cobj_init(struct tf_cobj *o, const struct tf_cobj_ops *ops, void *u, bool array_ok);
void tf_cobj_free(struct tf_cobj *o);
/* The next byte; END when the object (or array) closed with this byte. */
enum tf_co tf_cobj_byte(struct tf_cobj *o, unsigned char c);
/* A call of the object begun (its name known) and not yet ended. */
bool tf_cobj_open(const struct tf_cobj *o);

/* "name.call(k=v, ...)" (Llama 3.1's built-in tools) -> name and JSON
 * arguments; false when the text is not of that shape. */
bool tf_pycall_to_json(const char *s, size_t n, struct sbuf *name, struct sbuf *args);
/* A tool name anvil accepts: 1..64 of [A-Za-z0-9_.:-]. */
bool tf_name_ok(const char *s, size_t n);

#endif
