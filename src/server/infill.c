/*
 * infill.c - fill in the middle: the prompt of /v1/completions with a
 * `suffix`, and of POST /infill (llama-server's body: input_prefix,
 * input_suffix, input_extra [{filename, text}], prompt; the route and its
 * answer shape are api_infill.c's).
 *
 * The prompt of /v1/completions with `suffix`, in prefix-suffix-middle
 * order (PSM):
 *
 *   [BOS]  FIM_PRE prefix  FIM_SUF suffix  FIM_MID
 *
 * and of POST /infill, llama-server's repository-level layout
 * (format_prompt_infill; Qwen2.5-Coder's report, arXiv 2409.12186):
 *
 *   [FIM_REP "myproject\n"]  extra chunks  [FIM_SEP "filename\n"]
 *   [BOS]  FIM_PRE prefix prompt  FIM_SUF suffix  FIM_MID
 *
 * where the repository header comes when the vocabulary has a repository
 * token (<|repo_name|>), each extra chunk is FILE_SEP "filename\n" text
 * (filename "tmp" when not given) when it has a file separator
 * (<|file_sep|>), and "\n\n--- snippet ---\n\n" text otherwise, and a
 * file separator with the name "filename" ends the extra part whenever the
 * vocabulary has one (llama-server's stand-in for the current file's
 * name). BOS, when the vocabulary asks for one, comes after the extra
 * part, as llama-server puts it. Prefix, suffix, extra texts and file names
 * are tokenized as text (a control token typed into them stays
 * characters); `prompt` is tokenized with its control tokens parsed, as
 * llama-server does. input_prefix and input_suffix may also be arrays of
 * strings and token ids (llama-server's mixed prompts).
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/srv_int.h"

struct fim {
    anvil_token pre, suf, mid, sep, rep;
};

static bool fim_tokens(const struct srv_limits *lim, const char *param, struct fim *f,
                       struct srv_err *e) {
    f->pre = anvil_token_fim(lim->model, ANVIL_FIM_PRE);
    f->suf = anvil_token_fim(lim->model, ANVIL_FIM_SUF);
    f->mid = anvil_token_fim(lim->model, ANVIL_FIM_MID);
    f->sep = anvil_token_fim(lim->model, ANVIL_FIM_SEP);
    f->rep = anvil_token_fim(lim->model, ANVIL_FIM_REP);
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

/* Append the tokens of text; control tokens in it become their ids only
 * when special is true. */
static bool tv_tok(struct tv *v, const struct anvil_model *m, const char *s, size_t n,
                   bool special, struct srv_err *e) {
    if (n == 0) return true;
    if (n > INT32_MAX) return srv_oom(e);
    int32_t room = (int32_t)(v->cap - v->n);
    int32_t k = anvil_tokenize(m, s, n, v->p ? v->p + v->n : NULL, room, false, special);
    if (k == INT32_MIN) return srv_oom(e);
    if (k < 0) {
        if (!tv_room(v, -(int64_t)k, e)) return false;
        k = anvil_tokenize(m, s, n, v->p + v->n, (int32_t)(v->cap - v->n), false, special);
        if (k < 0) return srv_oom(e);
    }
    v->n += k;
    return true;
}

/* Append the tokens of text as text. */
static bool tv_text(struct tv *v, const struct anvil_model *m, const char *s, size_t n,
                    struct srv_err *e) {
    return tv_tok(v, m, s, n, false, e);
}

static bool tv_str(struct tv *v, const struct anvil_model *m, const char *s, struct srv_err *e) {
    return tv_text(v, m, s, strlen(s), e);
}

/* Append a chunk's file header: FILE_SEP name "\n" (one text, as
 * llama-server tokenizes it). */
static bool tv_file(struct tv *v, const struct anvil_model *m, anvil_token sep, const char *name,
                    struct srv_err *e) {
    size_t n = strlen(name);
    char *s = malloc(n + 2);
    if (!s) return srv_oom(e);
    memcpy(s, name, n);
    s[n] = '\n';
    s[n + 1] = 0;
    bool ok = tv_put(v, sep, e) && tv_text(v, m, s, n + 1, e);
    free(s);
    return ok;
}

/* input_prefix / input_suffix: a string, or an array of strings (as text)
 * and token ids. */
static bool mixed_field(const struct anvil_model *m, const cJSON *root, const char *key,
                        struct tv *v, struct srv_err *e) {
    const cJSON *f = srv_field(root, key);
    if (!f) return srv_bad(e, key, "'%s' is required", key);
    if (cJSON_IsString(f)) return tv_str(v, m, f->valuestring, e);
    if (!cJSON_IsArray(f))
        return srv_bad(e, key, "'%s' must be a string or an array of strings and token ids, "
                       "got %s", key, srv_type_name(f));
    int32_t n_vocab = anvil_model_n_vocab(m);
    int i = 0;
    for (const cJSON *c = f->child; c; c = c->next, i++) {
        if (cJSON_IsString(c)) {
            if (!tv_str(v, m, c->valuestring, e)) return false;
            continue;
        }
        if (!cJSON_IsNumber(c))
            return srv_bad(e, key, "'%s[%d]' must be a string or a token id, got %s", key, i,
                           srv_type_name(c));
        double d = c->valuedouble;
        if (!(d >= 0 && d < n_vocab) || d != floor(d))
            return srv_bad(e, key, "'%s[%d]': %g is not a token id of this vocabulary [0, %d)",
                           key, i, d, (int)n_vocab);
        if (!tv_put(v, (anvil_token)c->valuedouble, e)) return false;
    }
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
    const char *prompt = "", *prefix = "", *suffix = "";
    const cJSON *extra = NULL;
    const char *pname = route ? "input_prefix" : "suffix";
    if (route) {
        if (!srv_field(root, "input_prefix"))
            return srv_bad(e, "input_prefix", "'input_prefix' is required");
        if (!srv_field(root, "input_suffix"))
            return srv_bad(e, "input_suffix", "'input_suffix' is required");
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
    if (route) {
        if (!mixed_field(m, root, "input_prefix", &pre, e) ||
            !mixed_field(m, root, "input_suffix", &suf, e) ||
            !tv_tok(&pr, m, prompt, strlen(prompt), true, e))
            goto out;
        if (f.rep >= 0 && (!tv_put(&ex, f.rep, e) || !tv_str(&ex, m, "myproject\n", e)))
            goto out;
        for (const cJSON *c = extra ? extra->child : NULL; c; c = c->next) {
            const cJSON *fn = srv_field(c, "filename"), *tx = srv_field(c, "text");
            static const char snip[] = "\n\n--- snippet ---\n\n";
            if (f.sep >= 0 ? !tv_file(&ex, m, f.sep, fn ? fn->valuestring : "tmp", e)
                           : !tv_text(&ex, m, snip, sizeof(snip) - 1, e))
                goto out;
            if (!tv_str(&ex, m, tx->valuestring, e)) goto out;
        }
        if (f.sep >= 0 && !tv_file(&ex, m, f.sep, "filename", e)) goto out;
    } else if (!tv_str(&pre, m, prefix, e) || !tv_str(&suf, m, suffix, e)) {
        goto out;
    }
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
    /* BOS when the vocabulary adds one (anvil_tokenize with add_special
     * gives it first; an add_eos vocabulary also gives EOS, not wanted
     * here) */
    struct tv out = {0};
    anvil_token sp[2];
    anvil_token bos = anvil_token_bos(m);
    bool add_bos = bos >= 0 && anvil_tokenize(m, "", 0, sp, 2, true, false) >= 1 && sp[0] == bos;
    if (!tv_part(&out, &ex, ex.n - keep_ex, keep_ex, e) || (add_bos && !tv_put(&out, bos, e)) ||
        !tv_put(&out, f.pre, e) ||
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
