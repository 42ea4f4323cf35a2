/*
 * model_tok.c - the public calls of the tokenizer and chat templates that
 * model.c does not already wrap: choosing and reporting the chat template,
 * rendering + tokenizing a conversation, and loading a vocabulary without
 * weights. Each is a thin wrapper over src/tok (tok.h).
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
