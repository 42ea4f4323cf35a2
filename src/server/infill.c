/*
 * infill.c - fill in the middle: the prompt of /v1/completions with a
 * `suffix`, and of POST /infill (llama-server's body: input_prefix,
 * input_suffix, input_extra [{filename, text}], prompt; the route and its
 * answer shape are api_infill.c's).
 *
 * The prompt, in prefix-suffix-middle order (PSM):
 *
 *   [BOS]  extra chunks  FIM_PRE prefix prompt  FIM_SUF suffix  FIM_MID
 *
 * where each extra chunk is FILE_SEP "filename\n" text when the vocabulary
 * has a file separator token (<|file_sep|>), and "\n\n--- snippet ---\n\n"
 * text otherwise. The texts are tokenized as text: a control token typed
 * into a prefix stays characters. BOS comes first when the vocabulary asks
 * for one.
 *
 * The FIM tokens are found by their text, as llama.cpp finds them when the
 * GGUF does not give their ids (the names of src/tok/vocab.c's fim_texts:
 * <|fim_prefix|> (Qwen), <fim_prefix> (StarCoder), <｜fim▁begin｜>
 * (DeepSeek Coder), <PRE> (CodeLlama), ...). A model without them answers
 * 400 naming the tokens it lacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

/* The candidate texts of each FIM token, most common first. */
static const char *const pre_texts[] = {
    "<|fim_prefix|>", "<fim_prefix>", "<fim-prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const suf_texts[] = {
    "<|fim_suffix|>", "<fim_suffix>", "<fim-suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>",
    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const mid_texts[] = {
    "<|fim_middle|>", "<fim_middle>", "<fim-middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const sep_texts[] = {"<|file_sep|>", "<file_sep>", NULL};

/* The id of the single token whose text is one of texts, or -1. */
static anvil_token find_special(const struct anvil_model *m, const char *const *texts) {
    for (int i = 0; texts[i]; i++) {
        anvil_token t[2];
        size_t n = strlen(texts[i]);
        if (anvil_tokenize(m, texts[i], n, t, 2, false, true) != 1) continue;
        char piece[64];
        int32_t k = anvil_token_to_piece(m, t[0], piece, (int32_t)sizeof(piece), true);
        if (k == (int32_t)n && !memcmp(piece, texts[i], n)) return t[0];
    }
    return -1;
}

struct fim {
    anvil_token pre, suf, mid, sep;
};

static bool fim_tokens(const struct srv_limits *lim, const char *param, struct fim *f,
                       struct srv_err *e) {
    f->pre = find_special(lim->model, pre_texts);
    f->suf = find_special(lim->model, suf_texts);
    f->mid = find_special(lim->model, mid_texts);
    f->sep = find_special(lim->model, sep_texts);
    if (f->pre >= 0 && f->suf >= 0 && f->mid >= 0) return true;
    char miss[128] = "";
    const char *names[3] = {f->pre < 0 ? "prefix (<|fim_prefix|>, <fim_prefix>, ...)" : NULL,
                            f->suf < 0 ? "suffix (<|fim_suffix|>, <fim_suffix>, ...)" : NULL,
                            f->mid < 0 ? "middle (<|fim_middle|>, <fim_middle>, ...)" : NULL};
    for (int i = 0; i < 3; i++)
        if (names[i]) {
            size_t l = strlen(miss);
            snprintf(miss + l, sizeof(miss) - l, "%s%s", l ? ", " : "", names[i]);
        }
    return srv_bad(e, param, "fill-in-the-middle is not supported by this model: its vocabulary "
                   "has no %s token", miss);
}

/* The token list being built: r->prompt, lim->n_ctx long at most. */
struct tl {
    const struct srv_limits *lim;
    struct srv_req *r;
    int64_t want; /* tokens asked for so far (may exceed the capacity) */
};

static bool put_tok(struct tl *t, anvil_token id) {
    if (t->want < t->lim->n_ctx) t->r->prompt[t->want] = id;
    t->want++;
    return true;
}

static bool put_text(struct tl *t, const char *s, size_t n, struct srv_err *e) {
    if (n == 0) return true;
    int32_t room = t->want < t->lim->n_ctx ? (int32_t)(t->lim->n_ctx - t->want) : 0;
    anvil_token scratch[1];
    anvil_token *dst = room > 0 ? t->r->prompt + t->want : scratch;
    int32_t k = anvil_tokenize(t->lim->model, s, n, dst, room > 0 ? room : 0, false, false);
    if (k == INT32_MIN) return srv_oom(e);
    t->want += k < 0 ? -(int64_t)k : k; /* past the end: only counted */
    return true;
}

static bool str_field(const cJSON *root, const char *key, bool required, const char **out,
                      struct srv_err *e) {
    const cJSON *v = srv_field(root, key);
    *out = "";
    if (!v) return required ? srv_bad(e, key, "'%s' is required", key) : true;
    if (!cJSON_IsString(v))
        return srv_bad(e, key, "'%s' must be a string, got %s", key, srv_type_name(v));
    *out = v->valuestring;
    return true;
}

static bool check_extra(const cJSON *extra, struct srv_err *e) {
    if (!extra) return true;
    if (!cJSON_IsArray(extra))
        return srv_bad(e, "input_extra", "'input_extra' must be an array of {\"filename\": "
                       "string, \"text\": string}, got %s", srv_type_name(extra));
    int i = 0;
    for (const cJSON *c = extra->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c))
            return srv_bad(e, "input_extra", "'input_extra[%d]' must be an object, got %s", i,
                           srv_type_name(c));
        for (const cJSON *k = c->child; k; k = k->next)
            if (strcmp(k->string, "text") && strcmp(k->string, "filename"))
                return srv_bad(e, "input_extra", "'input_extra[%d]' has an unknown field "
                               "'%.40s' (expected 'filename' and 'text')", i, k->string);
        const cJSON *t = srv_field(c, "text"), *f = srv_field(c, "filename");
        if (!t || !cJSON_IsString(t))
            return srv_bad(e, "input_extra", "'input_extra[%d].text' must be a string, got %s",
                           i, srv_type_name(t));
        if (f && !cJSON_IsString(f))
            return srv_bad(e, "input_extra", "'input_extra[%d].filename' must be a string, got "
                           "%s", i, srv_type_name(f));
    }
    return true;
}

bool srv_parse_infill(const struct srv_limits *lim, const cJSON *root, bool route,
                      struct srv_req *r, struct srv_err *e) {
    const char *prefix = "", *suffix = "", *prompt = "";
    const cJSON *extra = NULL;
    const char *pname = route ? "input_prefix" : "suffix";
    if (route) {
        if (!str_field(root, "input_prefix", true, &prefix, e)) return false;
        if (!str_field(root, "input_suffix", true, &suffix, e)) return false;
        if (!str_field(root, "prompt", false, &prompt, e)) return false;
        extra = srv_field(root, "input_extra");
        if (!check_extra(extra, e)) return false;
    } else {
        const cJSON *p = srv_field(root, "prompt");
        if (!p) return srv_bad(e, "prompt", "'prompt' is required");
        if (cJSON_IsArray(p) && p->child && !p->child->next && cJSON_IsString(p->child))
            p = p->child; /* a batch of one */
        if (!cJSON_IsString(p))
            return srv_bad(e, "prompt", "with 'suffix', 'prompt' must be a string, got %s",
                           srv_type_name(p));
        prefix = p->valuestring;
        if (!str_field(root, "suffix", true, &suffix, e)) return false;
    }
    struct fim f;
    if (!fim_tokens(lim, pname, &f, e)) return false;
    r->prompt = malloc((size_t)lim->n_ctx * sizeof(anvil_token));
    if (!r->prompt) return srv_oom(e);
    struct tl t = {lim, r, 0};
    anvil_token bos[2];
    if (anvil_tokenize(lim->model, "", 0, bos, 2, true, false) == 1) put_tok(&t, bos[0]);
    for (const cJSON *c = extra ? extra->child : NULL; c; c = c->next) {
        const cJSON *fn = srv_field(c, "filename"), *tx = srv_field(c, "text");
        if (f.sep >= 0) {
            const char *name = fn ? fn->valuestring : "tmp";
            put_tok(&t, f.sep);
            if (!put_text(&t, name, strlen(name), e) || !put_text(&t, "\n", 1, e)) return false;
        } else {
            static const char snip[] = "\n\n--- snippet ---\n\n";
            if (!put_text(&t, snip, sizeof(snip) - 1, e)) return false;
        }
        if (!put_text(&t, tx->valuestring, strlen(tx->valuestring), e)) return false;
    }
    put_tok(&t, f.pre);
    if (!put_text(&t, prefix, strlen(prefix), e) || !put_text(&t, prompt, strlen(prompt), e))
        return false;
    put_tok(&t, f.suf);
    if (!put_text(&t, suffix, strlen(suffix), e)) return false;
    put_tok(&t, f.mid);
    if (t.want >= lim->n_ctx) return srv_too_long(e, pname, lim->n_ctx, "prompt is", t.want);
    r->n_prompt = (int32_t)t.want;
    return true;
}
