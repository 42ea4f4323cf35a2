/*
 * response.c - OpenAI response shapes: errors, chat.completion(.chunk),
 * text_completion (whole and streamed), and token pieces for logprobs.
 *
 * Reference: the OpenAI API reference, "The chat completion object", "The
 * chat completion chunk object", "The completion object". Streams are
 * Server-Sent Events: one "data: {json}\n\n" per chunk and a final
 * "data: [DONE]\n\n" (written by generate.c). JSON is formatted by hand with
 * sb_json_str, which never emits invalid UTF-8.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

const char *srv_finish_str(enum anvil_finish f) {
    switch (f) {
    case ANVIL_FINISH_LENGTH: return "length";
    case ANVIL_FINISH_STOP: return "stop";
    /* not OpenAI values, but never seen by a client in practice: a
     * cancelled request's client is gone, an error becomes an error body */
    case ANVIL_FINISH_CANCELLED: return "cancelled";
    case ANVIL_FINISH_ERROR: return "error";
    case ANVIL_FINISH_CONSTRAINT: return "constraint";
    default: return NULL;
    }
}

void srv_fmt_error(struct sbuf *b, const struct srv_err *e) {
    sb_puts(b, "{\"error\":{\"message\":");
    sb_json_str(b, e->message, strlen(e->message));
    sb_puts(b, ",\"type\":");
    sb_json_str(b, e->type ? e->type : "invalid_request_error",
                strlen(e->type ? e->type : "invalid_request_error"));
    sb_puts(b, ",\"param\":");
    if (e->param[0])
        sb_json_str(b, e->param, strlen(e->param));
    else
        sb_puts(b, "null");
    sb_puts(b, ",\"code\":");
    if (e->code)
        sb_json_str(b, e->code, strlen(e->code));
    else
        sb_puts(b, "null");
    sb_puts(b, "}}");
}

// ----------------------------------------------------------------------------
// logprobs

bool srv_token_piece(const struct anvil_model *m, anvil_token t, struct sbuf *scratch) {
    sb_clear(scratch);
    if (!sb_reserve(scratch, 64)) return false;
    int32_t n = anvil_token_to_piece(m, t, scratch->p, (int32_t)scratch->cap, true);
    if (n < 0) {
        if (!sb_reserve(scratch, (size_t)-n)) return false;
        n = anvil_token_to_piece(m, t, scratch->p, (int32_t)scratch->cap, true);
        if (n < 0) n = 0;
    }
    scratch->len = (size_t)n;
    return true;
}

static void bytes_array(struct sbuf *b, const struct sbuf *s) {
    sb_puts(b, "[");
    for (size_t i = 0; i < s->len; i++)
        sb_printf(b, i ? ",%u" : "%u", (unsigned)(unsigned char)s->p[i]);
    sb_puts(b, "]");
}

static void chat_logprobs(struct sbuf *b, const struct srv_resp_info *ri,
                          const struct srv_tok *toks, int32_t n) {
    struct sbuf s;
    sb_init(&s);
    sb_puts(b, "{\"content\":[");
    for (int32_t i = 0; i < n; i++) {
        const struct srv_tok *t = &toks[i];
        srv_token_piece(ri->model, t->token, &s);
        sb_puts(b, i ? ",{\"token\":" : "{\"token\":");
        sb_json_str(b, s.p, s.len);
        sb_puts(b, ",\"logprob\":");
        sb_json_num(b, t->logprob);
        sb_puts(b, ",\"bytes\":");
        bytes_array(b, &s);
        sb_puts(b, ",\"top_logprobs\":[");
        int32_t k = t->n_top < ri->top_logprobs ? t->n_top : ri->top_logprobs;
        for (int32_t j = 0; j < k; j++) {
            srv_token_piece(ri->model, t->top_tokens[j], &s);
            sb_puts(b, j ? ",{\"token\":" : "{\"token\":");
            sb_json_str(b, s.p, s.len);
            sb_puts(b, ",\"logprob\":");
            sb_json_num(b, t->top_logprobs[j]);
            sb_puts(b, ",\"bytes\":");
            bytes_array(b, &s);
            sb_puts(b, "}");
        }
        sb_puts(b, "]}");
    }
    sb_puts(b, "],\"refusal\":null}");
    if (s.oom) b->oom = true;
    sb_free(&s);
}

/* Legacy completions shape: parallel arrays. */
static void completion_logprobs(struct sbuf *b, const struct srv_resp_info *ri,
                                const struct srv_tok *toks, int32_t n, size_t text_offset) {
    struct sbuf s;
    sb_init(&s);
    sb_puts(b, "{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        srv_token_piece(ri->model, toks[i].token, &s);
        if (i) sb_puts(b, ",");
        sb_json_str(b, s.p, s.len);
    }
    /* a NaN logprob is echo's first prompt token: null (nothing precedes it) */
    sb_puts(b, "],\"token_logprobs\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) sb_puts(b, ",");
        if (isnan(toks[i].logprob))
            sb_puts(b, "null");
        else
            sb_json_num(b, toks[i].logprob);
    }
    sb_puts(b, "],\"top_logprobs\":[");
    for (int32_t i = 0; i < n; i++) {
        if (isnan(toks[i].logprob)) {
            sb_puts(b, i ? ",null" : "null");
            continue;
        }
        sb_puts(b, i ? ",{" : "{");
        int32_t k = toks[i].n_top < ri->top_logprobs ? toks[i].n_top : ri->top_logprobs;
        for (int32_t j = 0; j < k; j++) {
            srv_token_piece(ri->model, toks[i].top_tokens[j], &s);
            if (j) sb_puts(b, ",");
            sb_json_str(b, s.p, s.len);
            sb_puts(b, ":");
            sb_json_num(b, toks[i].top_logprobs[j]);
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "],\"text_offset\":[");
    size_t off = text_offset;
    for (int32_t i = 0; i < n; i++) {
        srv_token_piece(ri->model, toks[i].token, &s);
        sb_printf(b, i ? ",%zu" : "%zu", off);
        off += s.len;
    }
    sb_puts(b, "]}");
    if (s.oom) b->oom = true;
    sb_free(&s);
}

static void logprobs(struct sbuf *b, const struct srv_resp_info *ri, const struct srv_tok *toks,
                     int32_t n, size_t text_offset) {
    if (!ri->logprobs) {
        sb_puts(b, "null");
        return;
    }
    if (ri->kind == SRV_KIND_CHAT)
        chat_logprobs(b, ri, toks, n);
    else
        completion_logprobs(b, ri, toks, n, text_offset);
}

/* vLLM's return_token_ids: ,"token_ids":[...], the output's ids of toks
 * (echoed prompt tokens left out: they are the prompt_token_ids), then
 * eog, the end-of-generation token that ended the choice (>= 0), as vLLM
 * keeps it. A chunk writes it when it carries tokens, a whole answer
 * always. */
static void token_ids(struct sbuf *b, const struct srv_resp_info *ri, const struct srv_tok *toks,
                      int32_t n, bool always, anvil_token eog) {
    if (!ri->token_ids || (!always && n <= 0 && eog < 0)) return;
    sb_puts(b, ",\"token_ids\":[");
    bool first = true;
    for (int32_t i = 0; toks && i < n; i++) {
        if (toks[i].echo) continue;
        sb_printf(b, first ? "%d" : ",%d", (int)toks[i].token);
        first = false;
    }
    if (eog >= 0) sb_printf(b, first ? "%d" : ",%d", (int)eog);
    sb_puts(b, "]");
}

/* A chunk's logprobs: null when it carries no token (a role or finish
 * chunk, or text whose tokens went out with an earlier chunk). */
static void chunk_logprobs(struct sbuf *b, const struct srv_resp_info *ri,
                           const struct srv_tok *toks, int32_t n, size_t text_offset) {
    if (n)
        logprobs(b, ri, toks, n, text_offset);
    else
        sb_puts(b, "null");
}

// ----------------------------------------------------------------------------
// completions

static void head(struct sbuf *b, const struct srv_resp_info *ri, const char *object) {
    sb_puts(b, "{\"id\":");
    sb_json_str(b, ri->id, strlen(ri->id));
    sb_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, ri->created);
    sb_json_str(b, ri->model_id, strlen(ri->model_id));
    sb_puts(b, ",\"system_fingerprint\":\"anvil\"");
}

static void finish_field(struct sbuf *b, const char *finish) {
    sb_puts(b, ",\"finish_reason\":");
    if (finish)
        sb_printf(b, "\"%s\"", finish);
    else
        sb_puts(b, "null");
}

/* cached: prompt tokens taken from the prefix cache */
static void usage(struct sbuf *b, int32_t n_prompt, int32_t n_gen, int32_t cached) {
    sb_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
              "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
              (int)n_prompt, (int)n_gen, (int)(n_prompt + n_gen), (int)cached);
}

/* A chunk of choice `index`: text (may be empty) under `field` of a chat
 * delta ("content", "reasoning_content"), or a completion's text. */
static void prompt_logprobs(struct sbuf *b, const struct srv_gen_view *v);

/* plp: when non-NULL, the chunk carries the view's prompt_logprobs in its
 * choice (vLLM sends them with the first chunk of a stream). */
static void chunk_ex(struct sbuf *b, const struct srv_resp_info *ri, int index, const char *field,
                     const char *text, size_t n, const struct srv_tok *toks, int32_t n_toks,
                     bool first_chat, const char *finish, size_t text_offset,
                     const struct srv_gen_view *plp, anvil_token eog) {
    sb_puts(b, "data: ");
    if (ri->kind == SRV_KIND_CHAT) {
        head(b, ri, "chat.completion.chunk");
        sb_printf(b, ",\"choices\":[{\"index\":%d,\"delta\":{", index);
        if (first_chat) sb_puts(b, "\"role\":\"assistant\"");
        if (n || first_chat) {
            sb_printf(b, first_chat ? ",\"%s\":" : "\"%s\":", field);
            sb_json_str(b, text, n);
        }
        sb_puts(b, "},\"logprobs\":");
        chunk_logprobs(b, ri, toks, n_toks, text_offset);
        if (plp) prompt_logprobs(b, plp);
    } else {
        head(b, ri, "text_completion");
        sb_puts(b, ",\"choices\":[{\"text\":");
        sb_json_str(b, text, n);
        if (plp) prompt_logprobs(b, plp);
        sb_printf(b, ",\"index\":%d,\"logprobs\":", index);
        chunk_logprobs(b, ri, toks, n_toks, text_offset);
    }
    finish_field(b, finish);
    token_ids(b, ri, toks, n_toks, false, eog);
    sb_puts(b, "}]}\n\n");
}

void srv_fmt_chunk(struct sbuf *b, const struct srv_resp_info *ri, const char *text, size_t n,
                   const struct srv_tok *toks, int32_t n_toks, bool first_chat,
                   const char *finish, size_t text_offset) {
    chunk_ex(b, ri, 0, "content", text, n, toks, n_toks, first_chat, finish, text_offset, NULL, -1);
}

void srv_fmt_usage_chunk(struct sbuf *b, const struct srv_resp_info *ri, int32_t n_prompt,
                         int32_t n_gen) {
    sb_puts(b, "data: ");
    head(b, ri, ri->kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion");
    sb_puts(b, ",\"choices\":[],");
    usage(b, n_prompt, n_gen, 0);
    sb_puts(b, "}\n\n");
}

/* A tool_calls delta of choice `index`, call `call_index`: with name (the
 * call's first delta) its id, type and name, then arguments text. */
static void tool_chunk_ex(struct sbuf *b, const struct srv_resp_info *ri, int index,
                          int call_index, const char *call_id, const char *name,
                          const char *args, size_t n, const struct srv_tok *toks,
                          int32_t n_toks) {
    sb_puts(b, "data: ");
    head(b, ri, "chat.completion.chunk");
    sb_printf(b, ",\"choices\":[{\"index\":%d,\"delta\":{\"tool_calls\":[{\"index\":%d,", index,
              call_index);
    if (name) {
        sb_puts(b, "\"id\":");
        sb_json_str(b, call_id, strlen(call_id));
        sb_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
        sb_json_str(b, name, strlen(name));
        sb_puts(b, ",\"arguments\":");
    } else {
        sb_puts(b, "\"function\":{\"arguments\":");
    }
    sb_json_str(b, args ? args : "", n);
    sb_puts(b, "}}]},\"logprobs\":");
    chunk_logprobs(b, ri, toks, n_toks, 0);
    finish_field(b, NULL);
    token_ids(b, ri, toks, n_toks, false, -1);
    sb_puts(b, "}]}\n\n");
}

void srv_fmt_tool_chunk(struct sbuf *b, const struct srv_resp_info *ri, const char *call_id,
                        const char *name, const char *args, size_t n,
                        const struct srv_tok *toks, int32_t n_toks) {
    tool_chunk_ex(b, ri, 0, 0, call_id, name, args, n, toks, n_toks);
}

static void tool_calls_array(struct sbuf *b, const struct srv_tool_call *calls, int n) {
    sb_puts(b, "[");
    for (int i = 0; i < n; i++) {
        const struct srv_tool_call *call = &calls[i];
        sb_puts(b, i ? ",{\"id\":" : "{\"id\":");
        sb_json_str(b, call->id, strlen(call->id));
        sb_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
        sb_json_str(b, call->name, strlen(call->name));
        sb_puts(b, ",\"arguments\":");
        sb_json_str(b, call->args ? call->args : "", call->n_args);
        sb_puts(b, "}}");
    }
    sb_puts(b, "]");
}

void srv_fmt_full(struct sbuf *b, const struct srv_resp_info *ri, const char *text, size_t n,
                  const struct srv_tok *toks, int32_t n_toks, const char *finish,
                  int32_t n_prompt, int32_t n_gen, const struct srv_tool_call *call) {
    if (ri->kind == SRV_KIND_CHAT) {
        head(b, ri, "chat.completion");
        sb_puts(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
        if (call) {
            sb_puts(b, "null,\"tool_calls\":");
            tool_calls_array(b, call, 1);
        } else {
            sb_json_str(b, text, n);
        }
        sb_puts(b, ",\"refusal\":null},\"logprobs\":");
    } else {
        head(b, ri, "text_completion");
        sb_puts(b, ",\"choices\":[{\"text\":");
        sb_json_str(b, text, n);
        sb_puts(b, ",\"index\":0,\"logprobs\":");
    }
    logprobs(b, ri, toks, n_toks, 0);
    finish_field(b, finish);
    sb_puts(b, "}],");
    usage(b, n_prompt, n_gen, 0);
    sb_puts(b, "}");
}

// ----------------------------------------------------------------------------
// the OpenAI dialect (chat completions and completions)

#define OAI_MAX_CHOICES 128

struct oai_state {
    size_t text_sent[OAI_MAX_CHOICES]; /* completion text so far (text_offset) */
    bool plp_sent;                     /* prompt_logprobs went out (choice 0) */
};

/* The view for a chunk of `choice` that should carry prompt_logprobs (the
 * first of choice 0 after the prompt is read), else NULL. */
static const struct srv_gen_view *plp_due(const struct srv_gen_view *v, int choice) {
    struct oai_state *st = v->state;
    if (!st || st->plp_sent || choice != 0 || !v->req || !v->req->prompt_lp || !v->prompt_toks)
        return NULL;
    st->plp_sent = true;
    return v;
}

static void *oai_make_state(void) { return calloc(1, sizeof(struct oai_state)); }

static void oai_free_state(void *state) { free(state); }

static void oai_stream_start(struct sbuf *b, const struct srv_gen_view *v) {
    if (v->ri->kind != SRV_KIND_CHAT) return;
    /* the role chunk goes out at once, as OpenAI does */
    int n = v->n_choices > 0 ? v->n_choices : 1;
    for (int i = 0; i < n; i++)
        chunk_ex(b, v->ri, i, "content", "", 0, NULL, 0, true, NULL, 0, NULL, -1);
}

static void oai_stream_part(struct sbuf *b, const struct srv_gen_view *v, int choice,
                            const struct srv_part *p, const struct srv_tok *toks,
                            int32_t n_toks) {
    struct oai_state *st = v->state;
    size_t *sent = st && choice >= 0 && choice < OAI_MAX_CHOICES ? &st->text_sent[choice] : NULL;
    size_t off = sent ? *sent : 0;
    bool chat = v->ri->kind == SRV_KIND_CHAT;
    switch (p->kind) {
    case SRV_PART_CONTENT:
    case SRV_PART_REASONING: {
        const char *field = chat && p->kind == SRV_PART_REASONING ? "reasoning_content" : "content";
        chunk_ex(b, v->ri, choice, field, p->text, p->n, toks, n_toks, false, NULL, off,
                 plp_due(v, choice), -1);
        if (sent) *sent += p->n;
        break;
    }
    case SRV_PART_CALL_BEGIN:
        tool_chunk_ex(b, v->ri, choice, p->call_index, p->id, p->name, "", 0, toks, n_toks);
        break;
    case SRV_PART_CALL_ARGS:
        tool_chunk_ex(b, v->ri, choice, p->call_index, NULL, NULL, p->text, p->n, toks, n_toks);
        break;
    case SRV_PART_CALL_END: break;
    }
}

static void oai_usage_tail(struct sbuf *b, const struct srv_gen_view *v,
                           const struct srv_usage *u) {
    if (v->req && v->req->include_usage && u) {
        sb_puts(b, "data: ");
        head(b, v->ri, v->ri->kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion");
        sb_puts(b, ",\"choices\":[],");
        usage(b, u->n_prompt, u->n_gen, u->n_cached);
        sb_puts(b, "}\n\n");
    }
    sb_puts(b, "data: [DONE]\n\n");
}

static void oai_stream_error(struct sbuf *b, const struct srv_gen_view *v,
                             const struct srv_err *e) {
    sb_puts(b, "data: ");
    srv_fmt_error(b, e);
    sb_puts(b, "\n\n");
    oai_usage_tail(b, v, v->usage);
}

static void oai_stream_end(struct sbuf *b, const struct srv_gen_view *v,
                           const struct srv_choice *choices, int n_choices,
                           const struct srv_usage *u) {
    for (int i = 0; i < n_choices; i++) {
        size_t off = 0;
        struct oai_state *st = v->state;
        if (st && choices[i].index >= 0 && choices[i].index < OAI_MAX_CHOICES)
            off = st->text_sent[choices[i].index];
        chunk_ex(b, v->ri, choices[i].index, "content", "", 0, NULL, 0, false, choices[i].finish,
                 off, plp_due(v, choices[i].index), choices[i].eog);
    }
    oai_usage_tail(b, v, u);
}

/* vLLM's return_token_ids: ,"prompt_token_ids":[...] */
static void prompt_ids(struct sbuf *b, const struct srv_req *r) {
    if (!r || !r->return_token_ids) return;
    sb_puts(b, ",\"prompt_token_ids\":[");
    for (int32_t i = 0; i < r->n_prompt; i++) sb_printf(b, i ? ",%d" : "%d", (int)r->prompt[i]);
    sb_puts(b, "]");
}

/* vLLM's prompt_logprobs: ,"prompt_logprobs":[null,{"id":{"logprob","rank",
 * "decoded_token"},...},...]: the prompt token first, then the best
 * prompt_lp_k (the prompt token once). rank: 1 + the alternatives that are
 * more likely, exact while the token is among the ANVIL_MAX_TOP_LOGPROBS
 * best the engine gives, a lower bound (21) below them. */
static void plp_entry(struct sbuf *b, const struct anvil_model *m, struct sbuf *s,
                      anvil_token t, float lp, int32_t rank, bool first) {
    sb_printf(b, first ? "\"%d\":{\"logprob\":" : ",\"%d\":{\"logprob\":", (int)t);
    sb_json_num(b, lp);
    sb_printf(b, ",\"rank\":%d,\"decoded_token\":", (int)rank);
    srv_token_piece(m, t, s);
    sb_json_str(b, s->p ? s->p : "", s->len);
    sb_puts(b, "}");
}

static void prompt_logprobs(struct sbuf *b, const struct srv_gen_view *v) {
    if (!v->prompt_toks || !v->req || !v->req->prompt_lp) return;
    struct sbuf s;
    sb_init(&s);
    sb_puts(b, ",\"prompt_logprobs\":[");
    for (int32_t i = 0; i < v->n_prompt_toks; i++) {
        const struct srv_tok *t = &v->prompt_toks[i];
        if (i) sb_puts(b, ",");
        if (isnan(t->logprob)) {
            sb_puts(b, "null");
            continue;
        }
        int32_t rank = 1;
        for (int32_t a = 0; a < t->n_top; a++)
            if (t->top_logprobs[a] > t->logprob && t->top_tokens[a] != t->token) rank++;
        sb_puts(b, "{");
        plp_entry(b, v->ri->model, &s, t->token, t->logprob, rank, true);
        int32_t k = t->n_top < v->req->prompt_lp_k ? t->n_top : v->req->prompt_lp_k;
        for (int32_t a = 0; a < k; a++)
            if (t->top_tokens[a] != t->token)
                plp_entry(b, v->ri->model, &s, t->top_tokens[a], t->top_logprobs[a], a + 1, false);
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
    if (s.oom) b->oom = true;
    sb_free(&s);
}

static void oai_full(struct sbuf *b, const struct srv_gen_view *v,
                     const struct srv_choice *choices, int n_choices, const struct srv_usage *u) {
    const struct srv_resp_info *ri = v->ri;
    bool chat = ri->kind == SRV_KIND_CHAT;
    head(b, ri, chat ? "chat.completion" : "text_completion");
    sb_puts(b, ",\"choices\":[");
    for (int i = 0; i < n_choices; i++) {
        const struct srv_choice *ch = &choices[i];
        if (i) sb_puts(b, ",");
        if (chat) {
            sb_printf(b, "{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":",
                      ch->index);
            if (ch->n_calls > 0 && ch->n_content == 0)
                sb_puts(b, "null");
            else
                sb_json_str(b, ch->content ? ch->content : "", ch->n_content);
            if (ch->n_reasoning > 0) {
                sb_puts(b, ",\"reasoning_content\":");
                sb_json_str(b, ch->reasoning, ch->n_reasoning);
            }
            if (ch->n_calls > 0) {
                sb_puts(b, ",\"tool_calls\":[");
                for (int c = 0; c < ch->n_calls; c++) {
                    const struct srv_call_out *co = &ch->calls[c];
                    sb_puts(b, c ? ",{\"id\":" : "{\"id\":");
                    sb_json_str(b, co->id, strlen(co->id));
                    sb_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
                    sb_json_str(b, co->name, strlen(co->name));
                    sb_puts(b, ",\"arguments\":");
                    sb_json_str(b, co->args ? co->args : "", co->n_args);
                    sb_puts(b, "}}");
                }
                sb_puts(b, "]");
            }
            sb_puts(b, ",\"refusal\":null},\"logprobs\":");
        } else {
            sb_puts(b, "{\"text\":");
            sb_json_str(b, ch->content ? ch->content : "", ch->n_content);
            prompt_ids(b, v->req);
            prompt_logprobs(b, v);
            sb_printf(b, ",\"index\":%d,\"logprobs\":", ch->index);
        }
        logprobs(b, ri, ch->toks, ch->toks ? ch->n_toks : 0, 0);
        finish_field(b, ch->finish);
        token_ids(b, ri, ch->toks, ch->toks ? ch->n_toks : 0, true, ch->eog);
        sb_puts(b, "}");
    }
    sb_puts(b, "]");
    if (chat) {
        prompt_ids(b, v->req);
        prompt_logprobs(b, v);
    }
    sb_puts(b, ",");
    usage(b, u->n_prompt, u->n_gen, u->n_cached);
    sb_puts(b, "}");
}

const struct srv_dialect srv_dialect_openai = {
    .name = "openai",
    .stream_ctype = "text/event-stream",
    .error = srv_fmt_error,
    .make_state = oai_make_state,
    .free_state = oai_free_state,
    .stream_start = oai_stream_start,
    .stream_part = oai_stream_part,
    .stream_error = oai_stream_error,
    .stream_end = oai_stream_end,
    .full = oai_full,
};
