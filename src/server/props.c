/*
 * props.c - GET /props (the facts llama-server users look for: context,
 * parallelism, chat template, special tokens) and the model's entry in
 * GET /v1/models, which carries the same facts under "meta".
 *
 * /props also names the chat renderer in use (chat_template_origin: the
 * GGUF's Jinja template, a file's, or a built-in family) and the tool-call
 * and reasoning formats read from that template.
 *
 * Pure functions of the model and the server's settings (struct
 * srv_info), safe on any HTTP thread.
 */
#include <stdlib.h>
#include <string.h>

#include "server/outfmt.h"
#include "server/srv_web.h"

/* Append "key": the metadata string, or null when missing. */
static void meta_field(struct sbuf *b, const struct anvil_model *m, const char *name,
                       const char *key) {
    sb_printf(b, "\"%s\":", name);
    int32_t n = anvil_model_meta_str(m, key, NULL, 0);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && anvil_model_meta_str(m, key, s, (size_t)n + 1) == n)
        sb_json_str(b, s, (size_t)n);
    else if (n >= 0)
        b->oom = true;
    else
        sb_puts(b, "null");
    free(s);
}

static void str_or_null(struct sbuf *b, const char *s) {
    if (s && s[0])
        sb_json_str(b, s, strlen(s));
    else
        sb_puts(b, "null");
}

/* Text of a special token (BOS/EOS), or null. */
static void token_text(struct sbuf *b, const struct anvil_model *m, anvil_token t) {
    char buf[256];
    int32_t n = t >= 0 ? anvil_token_to_piece(m, t, buf, sizeof(buf), true) : 0;
    if (n > 0)
        sb_json_str(b, buf, (size_t)n);
    else
        sb_puts(b, "null");
}

/* The facts both /props and the model entry carry (no braces). */
static void facts(struct sbuf *b, const struct srv_info *in) {
    const struct anvil_model *m = in->model;
    meta_field(b, m, "architecture", "general.architecture");
    sb_puts(b, ",");
    meta_field(b, m, "name", "general.name");
    sb_puts(b, ",\"desc\":");
    str_or_null(b, anvil_model_desc(m));
    sb_printf(b, ",\"n_ctx\":%d,\"n_ctx_train\":%d,\"n_vocab\":%d,\"n_embd\":%d,\"n_layer\":%d",
              (int)in->n_ctx, (int)anvil_model_n_ctx_train(m), (int)anvil_model_n_vocab(m),
              (int)anvil_model_n_embd(m), (int)anvil_model_n_layer(m));
    sb_puts(b, ",\"type\":");
    str_or_null(b, anvil_type_name(anvil_model_type(m)));
    /* the family anvil renders (never null: an unrecognised template
     * falls back to ChatML) and why that one */
    static const char *const src[] = {"file", "vocabulary", "fallback", "chosen"};
    sb_puts(b, ",\"chat_template_name\":");
    str_or_null(b, anvil_chat_template_name(m));
    sb_printf(b, ",\"chat_template_source\":\"%s\"",
              src[(int)anvil_chat_template_source(m) & 3]);
    sb_printf(b, ",\"parallel\":%d,\"kernels\":", (int)in->parallel);
    str_or_null(b, anvil_model_kernels(m));
    sb_puts(b, ",\"replica_id\":");
    str_or_null(b, in->replica_id);
}

void srv_fmt_props(struct sbuf *b, const struct srv_info *in) {
    const struct anvil_model *m = in->model;
    sb_puts(b, "{\"model_id\":");
    sb_json_str(b, in->model_id, strlen(in->model_id));
    sb_puts(b, ",");
    facts(b, in);
    /* llama-server's names for the same facts, so its clients find them */
    sb_printf(b, ",\"total_slots\":%d,\"default_generation_settings\":{\"n_ctx\":%d}",
              (int)in->parallel, (int)in->n_ctx);
    sb_puts(b, ",");
    /* the Jinja source the model is shown (a --chat-template-file's, or
     * the GGUF's); with a built-in family, the GGUF's text (or null) */
    const char *jsrc = anvil_chat_template_text(m);
    if (jsrc) {
        sb_puts(b, "\"chat_template\":");
        sb_json_str(b, jsrc, strlen(jsrc));
    } else {
        meta_field(b, m, "chat_template", "tokenizer.chat_template");
    }
    /* which renderer: "gguf", "file", or "builtin NAME"; the warning says
     * why the GGUF's template is not used when it does not parse */
    const char *origin = anvil_chat_template_origin(m);
    sb_puts(b, ",\"chat_template_origin\":");
    if (jsrc)
        sb_json_str(b, origin, strlen(origin));
    else
        sb_printf(b, "\"builtin %s\"", anvil_chat_template_name(m));
    sb_puts(b, ",\"chat_template_warning\":");
    str_or_null(b, anvil_chat_template_warning(m));
    /* the output formats read from that template (toolfmt.c) */
    struct srv_outfmt of;
    if (jsrc) {
        srv_outfmt_detect(jsrc, &of);
    } else {
        int32_t tn = anvil_model_meta_str(m, "tokenizer.chat_template", NULL, 0);
        char *t = tn > 0 ? malloc((size_t)tn + 1) : NULL;
        if (t) anvil_model_meta_str(m, "tokenizer.chat_template", t, (size_t)tn + 1);
        srv_outfmt_detect(t, &of);
        free(t);
    }
    sb_puts(b, ",\"tool_format\":");
    str_or_null(b, srv_toolfmt_name(of.tool_format));
    sb_puts(b, ",\"reasoning_format\":");
    str_or_null(b, srv_reasoningfmt_name(of.reasoning_format));
    sb_puts(b, ",\"bos_token\":");
    token_text(b, m, anvil_token_bos(m));
    sb_puts(b, ",\"eos_token\":");
    token_text(b, m, anvil_token_eos(m));
    sb_printf(b, ",\"webui\":%s}", in->webui ? "true" : "false");
}

void srv_fmt_model_entry(struct sbuf *b, const struct srv_info *in, bool single) {
    if (!single) sb_puts(b, "{\"object\":\"list\",\"data\":[");
    sb_puts(b, "{\"id\":");
    sb_json_str(b, in->model_id, strlen(in->model_id));
    sb_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"anvil\",\"meta\":{",
              in->created);
    facts(b, in);
    sb_puts(b, "}}");
    if (!single) sb_puts(b, "]}");
}
