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
 * Long inputs on POST /infill are trimmed as llama-server trims them
 * (format_prompt_infill), with anvil's context in place of its batch. Let
 * C be what one request may hold (the context, or the KV cache when that
 * is smaller), W = C / 2 the FIM window (llama-server's n_batch, half its
 * default context) and n_predict the request's max_tokens (16 when not
 * given). Then the prefix keeps its last min(|prefix|, 3 * (W / 4))
 * tokens, the suffix its first min(|suffix|, max(0, W / 4 - 2 - |prompt|))
 * tokens, and the extra chunks (all their tokens, separators included, in
 * order) their last min(|extra|, max(0, C - W - 2 * n_predict)) tokens; the
 * prompt is kept whole. A prompt that is still too long (a long `prompt`,
 * or max_tokens past the context) is a 400, as is any too long prompt of
 * /v1/completions with `suffix`, which trims nothing.
 *
 * The FIM tokens are the vocabulary's (anvil_token_fim): the ids the GGUF
 * gives (tokenizer.ggml.fim_pre_token_id, ...), else the tokens found by
 * their text as llama.cpp finds them (src/tok/vocab.c's fim_texts:
 * <|fim_prefix|> (Qwen), <fim_prefix> (StarCoder), <｜fim▁begin｜>
 * (DeepSeek Coder), <PRE> (CodeLlama), ...). A model without them answers
 * 400 naming the tokens it lacks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

struct fim {
    anvil_token pre, suf, mid, sep;
};

static bool fim_tokens(const struct srv_limits *lim, const char *param, struct fim *f,
                       struct srv_err *e) {
    f->pre = anvil_token_fim(lim->model, ANVIL_FIM_PRE);
    f->suf = anvil_token_fim(lim->model, ANVIL_FIM_SUF);
    f->mid = anvil_token_fim(lim->model, ANVIL_FIM_MID);
    f->sep = anvil_token_fim(lim->model, ANVIL_FIM_SEP);
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

/* A growing token list. */
struct tv {
    anvil_token *p;
    int64_t n, cap;
};

static bool tv_room(struct tv *v, int64_t more, struct srv_err *e) {
    if (v->n + more <= v->cap) return true;
    int64_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + more) cap *= 2;
    if (cap > INT32_MAX) return srv_oom(e);
    anvil_token *p = realloc(v->p, (size_t)cap * sizeof(anvil_token));
    if (!p) return srv_oom(e);
    v->p = p;
    v->cap = cap;
    return true;
}

static bool tv_put(struct tv *v, anvil_token id, struct srv_err *e) {
    if (!tv_room(v, 1, e)) return false;
    v->p[v->n++] = id;
    return true;
}

static bool tv_cat(struct tv *v, const anvil_token *t, int64_t n, struct srv_err *e) {
    if (!tv_room(v, n, e)) return false;
    memcpy(v->p + v->n, t, (size_t)n * sizeof(anvil_token));
    v->n += n;
    return true;
}

/* Append n tokens of src from index from. */
static bool tv_part(struct tv *v, const struct tv *src, int64_t from, int64_t n,
                    struct srv_err *e) {
    return n <= 0 || tv_cat(v, src->p + from, n, e);
}

/* Append the tokens of text (as text: control tokens stay characters). */
static bool tv_text(struct tv *v, const struct anvil_model *m, const char *s, size_t n,
                    struct srv_err *e) {
    if (n == 0) return true;
    if (n > INT32_MAX) return srv_oom(e);
    int32_t room = (int32_t)(v->cap - v->n);
    int32_t k = anvil_tokenize(m, s, n, v->p ? v->p + v->n : NULL, room, false, false);
    if (k == INT32_MIN) return srv_oom(e);
    if (k < 0) {
        if (!tv_room(v, -(int64_t)k, e)) return false;
        k = anvil_tokenize(m, s, n, v->p + v->n, (int32_t)(v->cap - v->n), false, false);
        if (k < 0) return srv_oom(e);
    }
    v->n += k;
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
    const struct anvil_model *m = lim->model;
    struct tv ex = {0}, pre = {0}, pr = {0}, suf = {0};
    bool ok = false;
    for (const cJSON *c = extra ? extra->child : NULL; c; c = c->next) {
        const cJSON *fn = srv_field(c, "filename"), *tx = srv_field(c, "text");
        if (f.sep >= 0) {
            const char *name = fn ? fn->valuestring : "tmp";
            if (!tv_put(&ex, f.sep, e) || !tv_text(&ex, m, name, strlen(name), e) ||
                !tv_text(&ex, m, "\n", 1, e))
                goto out;
        } else {
            static const char snip[] = "\n\n--- snippet ---\n\n";
            if (!tv_text(&ex, m, snip, sizeof(snip) - 1, e)) goto out;
        }
        if (!tv_text(&ex, m, tx->valuestring, strlen(tx->valuestring), e)) goto out;
    }
    if (!tv_text(&pre, m, prefix, strlen(prefix), e) ||
        !tv_text(&pr, m, prompt, strlen(prompt), e) ||
        !tv_text(&suf, m, suffix, strlen(suffix), e))
        goto out;
    /* what is kept: the whole of each part, or on /infill llama-server's
     * rule (the file comment) */
    int64_t keep_ex = ex.n, keep_pre = pre.n, keep_suf = suf.n;
    if (route) {
        int64_t cap = lim->n_ctx;
        if (lim->kv_tokens > 0 && lim->kv_tokens < cap) cap = lim->kv_tokens;
        int64_t w = cap / 2, n_predict = r->max_tokens > 0 ? r->max_tokens : 0;
        int64_t suf_room = w / 4 - (2 + pr.n), ex_room = cap - w - 2 * n_predict;
        if (keep_pre > 3 * (w / 4)) keep_pre = 3 * (w / 4);
        if (keep_suf > (suf_room > 0 ? suf_room : 0)) keep_suf = suf_room > 0 ? suf_room : 0;
        if (keep_ex > (ex_room > 0 ? ex_room : 0)) keep_ex = ex_room > 0 ? ex_room : 0;
    }
    struct tv out = {0};
    anvil_token bos[2];
    if ((anvil_tokenize(m, "", 0, bos, 2, true, false) == 1 && !tv_put(&out, bos[0], e)) ||
        !tv_part(&out, &ex, ex.n - keep_ex, keep_ex, e) || !tv_put(&out, f.pre, e) ||
        !tv_part(&out, &pre, pre.n - keep_pre, keep_pre, e) || !tv_part(&out, &pr, 0, pr.n, e) ||
        !tv_put(&out, f.suf, e) || !tv_part(&out, &suf, 0, keep_suf, e) ||
        !tv_put(&out, f.mid, e)) {
        free(out.p);
        goto out;
    }
    r->prompt = out.p;
    r->n_prompt = out.n > INT32_MAX ? INT32_MAX : (int32_t)out.n;
    ok = true;
out:
    free(ex.p);
    free(pre.p);
    free(pr.p);
    free(suf.p);
    return ok;
}
