/*
 * load.c - tok_load: read the tokenizer.* metadata of a GGUF file into a
 * struct tok_spec and build the vocabulary from it (vocab.c).
 *
 * Keys: tokenizer.ggml.model (required: "gpt2" byte-level BPE, "llama"
 * SentencePiece-style, "gemma4" raw BPE, "bert" WordPiece, "t5" Unigram),
 * .tokens (required string
 * array), .merges (required for BPE), .scores (SPM, optional float32 or
 * int32 array), .token_type (optional int32 array), .pre (optional;
 * missing = "default", as llama.cpp), .bos/.eos/.unknown/.padding/.eot/
 * .eom_token_id, .seperator_token_id (llama.cpp's spelling),
 * .fim_{pre,suf,mid,pad,rep,sep}_token_id (and the older .prefix/.suffix/
 * .middle_token_id, which win when both are there, as in llama.cpp; an id
 * out of range is a warning and the token is then found by its text),
 * .add_bos_token/.add_eos_token, .add_space_prefix, for WordPiece
 * .normalizer.lowercase/.strip_accents, for Unigram
 * .remove_extra_whitespaces and .precompiled_charsmap (uint8/int8 array),
 * tokenizer.chat_template, and general.name (llama.cpp gives Phi-3's
 * special tokens their whitespace stripping by name). Strings stay in the
 * mapping only during the call: tok_build copies what it keeps.
 *
 * A file may be vocabulary-only (no tensors, no architecture keys): this
 * reads nothing else, so such a file tokenizes (tools/cli cmd_tokenize).
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

/* A token id key; dflt when missing. A present but unreadable or
 * negative id counts as missing; tok_build drops out-of-range ones. */
static int32_t get_id(const struct gguf_file *f, const char *key, int32_t dflt) {
    uint32_t v;
    if (!gguf_get_u32(f, key, &v) || v > INT32_MAX) return dflt;
    return (int32_t)v;
}

/* The fill-in-the-middle ids the file gives, in llama.cpp's key order (a
 * later key overrides an earlier one; a bad value keeps what was there,
 * with a warning). */
static void get_fim_ids(const struct gguf_file *f, int32_t n_tokens, bool *given,
                        int32_t *fim) {
    static const struct {
        const char *key;
        int which;
    } keys[] = {
        {"tokenizer.ggml.fim_pre_token_id", ANVIL_FIM_PRE},
        {"tokenizer.ggml.fim_suf_token_id", ANVIL_FIM_SUF},
        {"tokenizer.ggml.fim_mid_token_id", ANVIL_FIM_MID},
        {"tokenizer.ggml.fim_pad_token_id", ANVIL_FIM_PAD},
        {"tokenizer.ggml.fim_rep_token_id", ANVIL_FIM_REP},
        {"tokenizer.ggml.fim_sep_token_id", ANVIL_FIM_SEP},
        {"tokenizer.ggml.prefix_token_id", ANVIL_FIM_PRE},
        {"tokenizer.ggml.suffix_token_id", ANVIL_FIM_SUF},
        {"tokenizer.ggml.middle_token_id", ANVIL_FIM_MID},
    };
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        if (!gguf_find(f, keys[k].key)) continue;
        uint32_t v;
        if (gguf_get_u32(f, keys[k].key, &v) && v < (uint32_t)n_tokens) {
            fim[keys[k].which] = (int32_t)v;
            given[keys[k].which] = true;
            continue;
        }
        if (gguf_get_u32(f, keys[k].key, &v))
            core_log(CORE_LOG_ERROR, "warning: tokenizer: %s = %u is out of the vocabulary "
                     "(%d tokens); ignored", keys[k].key, v, n_tokens);
        else
            core_log(CORE_LOG_ERROR, "warning: tokenizer: %s is not a token id; ignored",
                     keys[k].key);
    }
}

/* llama.cpp lower-cases general.name and looks for "phi-3" or "phi3". */
static bool is_phi3_name(struct gguf_str name) {
    static const char *const pats[] = {"phi-3", "phi3"};
    for (size_t k = 0; k < 2; k++) {
        size_t m = strlen(pats[k]);
        for (size_t i = 0; i + m <= name.len; i++) {
            size_t j = 0;
            while (j < m) {
                char c = name.ptr[i + j];
                if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
                if (c != pats[k][j]) break;
                j++;
            }
            if (j == m) return true;
        }
    }
    return false;
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
    } else if (gguf_str_eq(model, "gemma4")) {
        s.kind = TOK_KIND_BPE;
        s.bpe_raw = true;
    } else if (gguf_str_eq(model, "llama")) {
        s.kind = TOK_KIND_SPM;
    } else if (gguf_str_eq(model, "bert")) {
        s.kind = TOK_KIND_WPM;
    } else if (gguf_str_eq(model, "t5")) {
        s.kind = TOK_KIND_UGM;
    } else {
        int n = model.len > 32 ? 32 : (int)model.len;
        errmsg_set(err, err_cap,
                   "unsupported tokenizer '%.*s' (tokenizer.ggml.model): anvil reads byte-level "
                   "BPE ('gpt2'), SentencePiece-style ('llama'), raw BPE ('gemma4'), WordPiece "
                   "('bert') and Unigram ('t5') vocabularies",
                   n, model.ptr);
        return ANVIL_ERR_UNSUPPORTED;
    }
    const struct gguf_kv *toks, *merges = NULL, *types = NULL, *scores = NULL;
    if ((st = get_str_arr(f, "tokenizer.ggml.tokens", true, &toks, err, err_cap)) != ANVIL_OK)
        return st;
    if ((st = get_str_arr(f, "tokenizer.ggml.merges", s.kind == TOK_KIND_BPE, &merges, err,
                          err_cap)) != ANVIL_OK)
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
    if (gguf_find(f, "tokenizer.ggml.scores")) {
        if ((!gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, &scores) &&
             !gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_VT_INT32, &scores)) ||
            scores->n < toks->n) {
            errmsg_set(err, err_cap,
                       "tokenizer.ggml.scores must be a float32 or int32 array of at least %llu",
                       (unsigned long long)toks->n);
            return ANVIL_ERR_FORMAT;
        }
    }
    int32_t *tt = NULL;
    float *sc = NULL;
    /* the arrays lie in the mapping, maybe unaligned: copy them */
    if (types) {
        tt = core_malloc(sizeof(int32_t) * toks->n);
        if (!tt) return ANVIL_ERR_NOMEM;
        memcpy(tt, types->data, sizeof(int32_t) * toks->n);
    }
    if (scores && (s.kind == TOK_KIND_SPM || s.kind == TOK_KIND_UGM)) {
        sc = core_malloc(sizeof(float) * toks->n);
        if (!sc) {
            core_free(tt);
            return ANVIL_ERR_NOMEM;
        }
        for (uint64_t i = 0; i < toks->n; i++) {
            if (scores->arr_type == GGUF_VT_FLOAT32) {
                memcpy(&sc[i], scores->data + 4 * i, 4);
            } else {
                int32_t iv;
                memcpy(&iv, scores->data + 4 * i, 4);
                sc[i] = (float)iv;
            }
        }
    }
    s.n_tokens = (int32_t)toks->n;
    s.tokens = toks->strs;
    s.types = tt;
    s.scores = sc;
    s.n_merges = merges ? (int32_t)merges->n : 0;
    s.merges = merges ? merges->strs : NULL;
    if (!gguf_get_str(f, "tokenizer.ggml.pre", &s.pre)) s.pre = (struct gguf_str){NULL, 0};
    /* llama.cpp's defaults: SentencePiece <unk> <s> </s> = 0 1 2; BERT
     * [UNK] [CLS] [SEP] = 100 101 102; T5 </s> <unk> = 1 2 */
    bool spm = s.kind == TOK_KIND_SPM, wpm = s.kind == TOK_KIND_WPM, ugm = s.kind == TOK_KIND_UGM;
    s.bos = get_id(f, "tokenizer.ggml.bos_token_id", spm ? 1 : wpm ? 101 : -1);
    s.eos = get_id(f, "tokenizer.ggml.eos_token_id", spm ? 2 : ugm ? 1 : -1);
    s.unk = get_id(f, "tokenizer.ggml.unknown_token_id", spm ? 0 : wpm ? 100 : ugm ? 2 : -1);
    s.sep = get_id(f, "tokenizer.ggml.seperator_token_id", wpm ? 102 : -1);
    s.pad = get_id(f, "tokenizer.ggml.padding_token_id", -1);
    s.eot = get_id(f, "tokenizer.ggml.eot_token_id", -1);
    s.eom = get_id(f, "tokenizer.ggml.eom_token_id", -1);
    get_fim_ids(f, s.n_tokens, s.fim_given, s.fim);
    bool b;
    s.add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) ? b : -1;
    s.add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b) ? b : -1;
    s.space_prefix = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b) ? (b ? 1 : -1) : 0;
    s.lowercase = gguf_get_bool(f, "tokenizer.ggml.normalizer.lowercase", &b) ? (b ? 1 : -1) : 0;
    s.strip_accents =
        gguf_get_bool(f, "tokenizer.ggml.normalizer.strip_accents", &b) ? (b ? 1 : -1) : 0;
    s.remove_extra_ws =
        gguf_get_bool(f, "tokenizer.ggml.remove_extra_whitespaces", &b) && b;
    if (ugm && gguf_find(f, "tokenizer.ggml.precompiled_charsmap")) {
        const struct gguf_kv *cm;
        if (!gguf_get_arr(f, "tokenizer.ggml.precompiled_charsmap", GGUF_VT_UINT8, &cm) &&
            !gguf_get_arr(f, "tokenizer.ggml.precompiled_charsmap", GGUF_VT_INT8, &cm)) {
            errmsg_set(err, err_cap,
                       "tokenizer.ggml.precompiled_charsmap must be a uint8 or int8 array");
            core_free(tt);
            core_free(sc);
            return ANVIL_ERR_FORMAT;
        }
        s.charsmap = (const uint8_t *)cm->data;
        s.charsmap_len = (size_t)cm->n;
    }
    struct gguf_str name;
    s.rstrip_specials = gguf_get_str(f, "general.name", &name) && is_phi3_name(name);
    if (!gguf_get_str(f, "tokenizer.chat_template", &s.chat_template))
        s.chat_template = (struct gguf_str){NULL, 0};
    st = tok_build(&s, out, err, err_cap);
    core_free(tt);
    core_free(sc);
    return st;
}
