/*
 * load.c - tok_load: read the tokenizer.* metadata of a GGUF file into a
 * struct tok_spec and build the vocabulary from it (vocab.c).
 *
 * Keys: tokenizer.ggml.model (required; "gpt2"), .tokens and .merges
 * (required string arrays), .token_type (optional int32 array), .pre
 * (optional; missing = "default", as llama.cpp), .bos/.eos/.unknown/
 * .padding/.eot/.eom_token_id, .add_bos_token/.add_eos_token, and
 * tokenizer.chat_template. Strings stay in the mapping only during the
 * call: tok_build copies what it keeps.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

static anvil_status get_str_arr(const struct gguf_file *f, const char *key, bool required,
                                const struct gguf_kv **kv, char *err, size_t err_cap) {
    *kv = NULL;
    const struct gguf_kv *k = gguf_find(f, key);
    if (!k) {
        if (!required) return ANVIL_OK;
        errmsg_set(err, err_cap, "missing metadata %s", key);
        return ANVIL_ERR_FORMAT;
    }
    if (!gguf_get_arr(f, key, GGUF_VT_STRING, kv) || !(*kv)->strs) {
        errmsg_set(err, err_cap, "metadata %s is not an array of strings", key);
        return ANVIL_ERR_FORMAT;
    }
    if ((*kv)->n > INT32_MAX - 2048) {
        errmsg_set(err, err_cap, "metadata %s has %llu entries", key,
                   (unsigned long long)(*kv)->n);
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

static int32_t get_id(const struct gguf_file *f, const char *key) {
    uint32_t v;
    if (!gguf_get_u32(f, key, &v) || v > INT32_MAX) return -1;
    return (int32_t)v;
}

anvil_status tok_load(const struct gguf_file *f, struct tok_vocab **out, char *err,
                      size_t err_cap) {
    anvil_status st;
    struct tok_spec s;
    memset(&s, 0, sizeof(s));
    struct gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model)) {
        errmsg_set(err, err_cap, "missing metadata tokenizer.ggml.model");
        return ANVIL_ERR_FORMAT;
    }
    if (gguf_str_eq(model, "gpt2")) {
        s.kind = TOK_KIND_BPE;
    } else {
        int n = model.len > 32 ? 32 : (int)model.len;
        errmsg_set(err, err_cap,
                   "unsupported tokenizer '%.*s' (tokenizer.ggml.model): only byte-level BPE "
                   "('gpt2') vocabularies are supported",
                   n, model.ptr);
        return ANVIL_ERR_UNSUPPORTED;
    }
    const struct gguf_kv *toks, *merges, *types = NULL;
    if ((st = get_str_arr(f, "tokenizer.ggml.tokens", true, &toks, err, err_cap)) != ANVIL_OK)
        return st;
    if ((st = get_str_arr(f, "tokenizer.ggml.merges", true, &merges, err, err_cap)) != ANVIL_OK)
        return st;
    if (toks->n == 0) {
        errmsg_set(err, err_cap, "tokenizer.ggml.tokens is empty");
        return ANVIL_ERR_FORMAT;
    }
    if (gguf_find(f, "tokenizer.ggml.token_type")) {
        if (!gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types) ||
            types->n < toks->n) {
            errmsg_set(err, err_cap,
                       "tokenizer.ggml.token_type must be an int32 array of at least %llu",
                       (unsigned long long)toks->n);
            return ANVIL_ERR_FORMAT;
        }
    }
    int32_t *tt = NULL;
    if (types) {
        /* the array lies in the mapping, maybe unaligned: copy it */
        tt = anvil_malloc(sizeof(int32_t) * toks->n);
        if (!tt) return ANVIL_ERR_NOMEM;
        memcpy(tt, types->data, sizeof(int32_t) * toks->n);
    }
    s.n_tokens = (int32_t)toks->n;
    s.tokens = toks->strs;
    s.types = tt;
    s.n_merges = (int32_t)merges->n;
    s.merges = merges->strs;
    if (!gguf_get_str(f, "tokenizer.ggml.pre", &s.pre)) s.pre = (struct gguf_str){NULL, 0};
    s.bos = get_id(f, "tokenizer.ggml.bos_token_id");
    s.eos = get_id(f, "tokenizer.ggml.eos_token_id");
    s.unk = get_id(f, "tokenizer.ggml.unknown_token_id");
    s.pad = get_id(f, "tokenizer.ggml.padding_token_id");
    s.eot = get_id(f, "tokenizer.ggml.eot_token_id");
    s.eom = get_id(f, "tokenizer.ggml.eom_token_id");
    bool b;
    s.add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) ? b : -1;
    s.add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b) ? b : -1;
    if (!gguf_get_str(f, "tokenizer.chat_template", &s.chat_template))
        s.chat_template = (struct gguf_str){NULL, 0};
    st = tok_build(&s, out, err, err_cap);
    anvil_free(tt);
    return st;
}
