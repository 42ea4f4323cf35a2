/*
 * api_infill.c - POST /infill: the body is parsed as a completion whose
 * prompt infill.c builds (prefix, suffix, extra chunks, FIM tokens), and
 * the answer is written in llama-server's /completion shape.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

// POST /infill: answered in llama-server's /completion shape (what the
// editors that speak /infill read: llama.vim, llama.vscode), {"content",
// "stop", "stop_type", "tokens_predicted", "tokens_evaluated", ...};
// streamed as `data: {"content": ..., "stop": false}` events and a last
// one with "stop": true (no [DONE], as llama-server's own stream).

static const char *stop_type(const struct srv_choice *ch) {
    if (ch->engine_finish == ANVIL_FINISH_LENGTH) return "limit";
    if (ch->engine_finish == ANVIL_FINISH_STOP) return "eos";
    return "none";
}

static void native_tail(struct sbuf *b, const struct srv_gen_view *v, const struct srv_choice *ch,
                        const struct srv_usage *u) {
    sb_puts(b, ",\"model\":");
    sb_json_str(b, v->ri->model_id, strlen(v->ri->model_id));
    sb_printf(b, ",\"tokens_predicted\":%d,\"tokens_evaluated\":%d,\"tokens_cached\":%d,"
              "\"stop_type\":\"%s\",\"stopping_word\":\"\",\"truncated\":false",
              (int)ch->n_gen, (int)u->n_prompt, (int)u->n_cached, stop_type(ch));
    sb_printf(b, ",\"timings\":{\"prompt_n\":%d,\"prompt_ms\":%.3f,\"predicted_n\":%d,"
              "\"predicted_ms\":%.3f}", (int)u->n_prompt, u->prefill_s * 1e3, (int)ch->n_gen,
              u->decode_s * 1e3);
    if (v->req && v->req->return_token_ids) {
        sb_puts(b, ",\"prompt_token_ids\":[");
        for (int32_t i = 0; i < v->req->n_prompt; i++)
            sb_printf(b, i ? ",%d" : "%d", (int)v->req->prompt[i]);
        sb_puts(b, "]");
    }
}

static void native_stream_start(struct sbuf *b, const struct srv_gen_view *v) {
    (void)b;
    (void)v;
}

static void native_stream_part(struct sbuf *b, const struct srv_gen_view *v, int choice,
                               const struct srv_part *p, const struct srv_tok *toks,
                               int32_t n_toks) {
    (void)v;
    (void)toks;
    (void)n_toks;
    if (p->kind != SRV_PART_CONTENT || p->n == 0) return;
    sb_printf(b, "data: {\"index\":%d,\"content\":", choice);
    sb_json_str(b, p->text, p->n);
    sb_puts(b, ",\"tokens\":[],\"stop\":false}\n\n");
}

static void native_stream_error(struct sbuf *b, const struct srv_gen_view *v,
                                const struct srv_err *e) {
    (void)v;
    sb_puts(b, "data: ");
    srv_fmt_error(b, e);
    sb_puts(b, "\n\n");
}

static void native_stream_end(struct sbuf *b, const struct srv_gen_view *v,
                              const struct srv_choice *choices, int n_choices,
                              const struct srv_usage *u) {
    for (int i = 0; i < n_choices; i++) {
        sb_printf(b, "data: {\"index\":%d,\"content\":\"\",\"tokens\":[],\"stop\":true",
                  choices[i].index);
        native_tail(b, v, &choices[i], u);
        sb_puts(b, "}\n\n");
    }
}

static void native_full(struct sbuf *b, const struct srv_gen_view *v,
                        const struct srv_choice *choices, int n_choices,
                        const struct srv_usage *u) {
    /* one object, or an array of them for n > 1 */
    if (n_choices > 1) sb_puts(b, "[");
    for (int i = 0; i < n_choices; i++) {
        const struct srv_choice *ch = &choices[i];
        sb_printf(b, "%s{\"index\":%d,\"content\":", i ? "," : "", ch->index);
        sb_json_str(b, ch->content ? ch->content : "", ch->n_content);
        sb_puts(b, ",\"tokens\":[],\"id_slot\":-1,\"stop\":true");
        native_tail(b, v, ch, u);
        sb_puts(b, "}");
    }
    if (n_choices > 1) sb_puts(b, "]");
}

static const struct srv_dialect dialect_infill = {
    .name = "infill",
    .stream_ctype = "text/event-stream",
    .error = srv_fmt_error,
    .stream_start = native_stream_start,
    .stream_part = native_stream_part,
    .stream_error = native_stream_error,
    .stream_end = native_stream_end,
    .full = native_full,
};

enum MHD_Result srv_post_infill(struct srv *s, struct MHD_Connection *c, struct conn *k,
                                const char *url) {
    (void)url;
    struct srv_req req;
    struct srv_err err;
    if (!srv_parse_request_ex(&s->lim, SRV_KIND_COMPLETION, true, k->body ? k->body : "",
                              k->body_len, &req, &err)) {
        srv_req_free(&req);
        return srv_send_dialect_err(s, c, &dialect_infill, &err);
    }
    return srv_generate(s, c, k, &req, &dialect_infill);
}
