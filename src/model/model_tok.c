/*
 * model_tok.c - the public calls of the tokenizer and chat templates:
 * special tokens, tokenize, pieces, detokenizing, vocabulary comparison,
 * choosing, reporting and applying the chat template, rendering +
 * tokenizing a conversation, and loading a vocabulary without weights.
 * Each is a thin wrapper over src/tok (tok.h).
 *
 * A vocabulary-only model holds the mapping and the tokenizer, and no
 * weights: m->layers stays NULL.
 */
#include <stdio.h>
#include <string.h>

#include "model/model.h"

const char *anvil_chat_template_name(const struct anvil_model *m) {
    return tok_chat_name(m->vocab);
}

enum anvil_chat_source anvil_chat_template_source(const struct anvil_model *m) {
    return (enum anvil_chat_source)tok_chat_source(m->vocab);
}

const char *anvil_chat_template_names(void) { return tok_chat_names(); }

anvil_status anvil_chat_template_set(struct anvil_model *m, const char *name) {
    if (!m || !name) return ANVIL_ERR_INVALID;
    return tok_chat_set(m->vocab, name);
}

int32_t anvil_chat_tokenize(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                            size_t n_msgs, bool add_assistant, anvil_token *out, int32_t cap) {
    if (!m) return INT32_MIN;
    return tok_chat_tokenize(m->vocab, msgs, n_msgs, add_assistant, out, cap);
}

anvil_status anvil_model_load_vocab(const char *path, struct anvil_model **out, char *err,
                                    size_t err_cap) {
    anvil_status st;
    if (!path || !out) {
        errmsg_set(err, err_cap, "model: path and out are required");
        return ANVIL_ERR_INVALID;
    }
    struct anvil_model *m = core_calloc(1, sizeof(*m));
    if (!m) {
        errmsg_set(err, err_cap, "model: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    if (err && err_cap) err[0] = '\0';
    TRY(gguf_open(path, &m->gguf, err, err_cap));
    TRY(tok_load(m->gguf, &m->vocab, err, err_cap));
    /* the getters of a model stay answerable */
    m->ops = kn_select("ref");
    m->hp.n_vocab = tok_n_vocab(m->vocab);
    snprintf(m->desc, sizeof(m->desc), "vocabulary only (%d tokens)", m->hp.n_vocab);
    *out = m;
    return ANVIL_OK;
fail:
    if (st == ANVIL_ERR_NOMEM && err && err_cap && !err[0]) errmsg_set(err, err_cap, "out of memory");
    anvil_model_free(m);
    return st;
}

/* ---------------------------------------------------------------------- */
/* tokens, pieces, chat */

anvil_token anvil_token_bos(const struct anvil_model *m) { return tok_bos(m->vocab); }
anvil_token anvil_token_eos(const struct anvil_model *m) { return tok_eos(m->vocab); }
anvil_token anvil_token_sep(const struct anvil_model *m) {
    anvil_token s = tok_sep(m->vocab);
    return s >= 0 ? s : tok_eos(m->vocab);
}
anvil_token anvil_token_fim(const struct anvil_model *m, enum anvil_fim which) {
    return m ? tok_fim(m->vocab, (int)which) : -1;
}
bool anvil_token_is_eog(const struct anvil_model *m, anvil_token t) {
    return tok_is_eog(m->vocab, t);
}

anvil_status anvil_vocab_compatible(const struct anvil_model *a, const struct anvil_model *b,
                                    char *err, size_t err_cap) {
    if (!a || !b) return ANVIL_ERR_INVALID;
    if (a->hp.n_vocab != b->hp.n_vocab) {
        errmsg_set(err, err_cap, "the vocabularies differ: %d tokens against %d", a->hp.n_vocab,
                   b->hp.n_vocab);
        return ANVIL_ERR_INVALID;
    }
    char pa[512], pb[512];
    for (int32_t t = 0; t < a->hp.n_vocab; t++) {
        int32_t na = tok_piece(a->vocab, t, pa, sizeof(pa), true);
        int32_t nb = tok_piece(b->vocab, t, pb, sizeof(pb), true);
        if (na != nb || (na > 0 && memcmp(pa, pb, (size_t)na) != 0) ||
            tok_is_eog(a->vocab, t) != tok_is_eog(b->vocab, t)) {
            errmsg_set(err, err_cap, "the vocabularies differ at token %d", t);
            return ANVIL_ERR_INVALID;
        }
    }
    return ANVIL_OK;
}

int32_t anvil_tokenize(const struct anvil_model *m, const char *text, size_t len,
                       anvil_token *out, int32_t cap, bool add_special, bool parse_special) {
    return tok_encode(m->vocab, text, len, out, cap, add_special, parse_special);
}

int32_t anvil_token_to_piece(const struct anvil_model *m, anvil_token t, char *buf, int32_t cap,
                             bool special) {
    return tok_piece(m->vocab, t, buf, cap, special);
}

int32_t anvil_detok_push(const struct anvil_model *m, struct anvil_detok *d, anvil_token t,
                         char *buf, int32_t cap) {
    return tok_detok_push(m->vocab, d, t, buf, cap);
}

int32_t anvil_detok_flush(struct anvil_detok *d, char *buf, int32_t cap) {
    return tok_detok_flush(d, buf, cap);
}

int32_t anvil_chat_apply(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                         size_t n_msgs, bool add_assistant, char *buf, int32_t cap) {
    return tok_chat_apply(m->vocab, msgs, n_msgs, add_assistant, buf, cap);
}

/* ---------------------------------------------------------------------- */
/* the Jinja chat template */

const char *anvil_chat_template_text(const struct anvil_model *m) {
    return m ? tok_chat_jinja_text(m->vocab) : NULL;
}

const char *anvil_chat_template_origin(const struct anvil_model *m) {
    static const char *const names[] = {"builtin", "gguf", "file"};
    int o = m ? tok_chat_jinja_origin(m->vocab) : 0;
    return names[o >= 0 && o <= 2 ? o : 0];
}

const char *anvil_chat_template_warning(const struct anvil_model *m) {
    return m ? tok_chat_jinja_warning(m->vocab) : NULL;
}

anvil_status anvil_chat_template_set_jinja(struct anvil_model *m, const char *src, size_t n,
                                           char *err, size_t err_cap) {
    if (!m) return ANVIL_ERR_INVALID;
    return tok_chat_jinja_set(m->vocab, src, n, err, err_cap);
}

int32_t anvil_chat_render_json(const struct anvil_model *m, const char *ctx_json, size_t n,
                               char *buf, int32_t cap, char *err, size_t err_cap) {
    if (!m || !ctx_json || cap < 0 || (cap > 0 && !buf)) {
        errmsg_set(err, err_cap, "chat: bad arguments");
        return INT32_MIN;
    }
    char *s;
    size_t len;
    if (tok_chat_jinja_render(m->vocab, ctx_json, n, &s, &len, err, err_cap) != ANVIL_OK)
        return INT32_MIN;
    int32_t r;
    if (len >= INT32_MAX) {
        errmsg_set(err, err_cap, "chat template: the rendering is too long");
        r = INT32_MIN;
    } else if (len + 1 > (size_t)cap) {
        r = -(int32_t)(len + 1);
    } else {
        memcpy(buf, s, len + 1);
        r = (int32_t)len;
    }
    core_free(s);
    return r;
}

int32_t anvil_chat_tokenize_json(const struct anvil_model *m, const char *ctx_json, size_t n,
                                 anvil_token *out, int32_t cap, char *err, size_t err_cap) {
    if (!m) {
        errmsg_set(err, err_cap, "chat: bad arguments");
        return INT32_MIN;
    }
    return tok_chat_jinja_tokenize(m->vocab, ctx_json, n, out, cap, err, err_cap, NULL);
}
