/*
 * cv_tok.c - the tokenizer of a Hugging Face checkpoint to GGUF metadata,
 * with the keys llama.cpp's converter writes:
 *   tokenizer.ggml.model "gpt2" (byte-level BPE: tokenizer.json's model
 *     type BPE with a ByteLevel pre-tokenizer or decoder),
 *   tokenizer.ggml.pre: the pre-tokenizer, named from tokenizer.json's
 *     pre_tokenizer (llama.cpp hashes the tokens of a test text instead;
 *     here the splitting rules themselves are matched: ByteLevel alone is
 *     gpt2, Digits + ByteLevel smollm, the Llama-3 split regex llama-bpe,
 *     the same with single digits qwen2; anything else "default"),
 *   tokenizer.ggml.tokens / token_type / merges (ids with no token become
 *     "[PAD<id>]", type UNUSED; added tokens are CONTROL when special,
 *     USER_DEFINED otherwise),
 *   bos/eos/unknown/padding token ids from tokenizer_config.json's token
 *     strings (else config.json's / generation_config.json's ids),
 *     add_bos_token / add_eos_token, and tokenizer.chat_template from
 *     tokenizer_config.json or chat_template.jinja.
 * WordPiece (BERT's tokenizer.json model type WordPiece) becomes
 * tokenizer.ggml.model "bert" as llama.cpp writes it: a word-initial token
 * gets the phantom space U+2581 in front, a "##" continuation loses its
 * "##", bracketed specials ([CLS]) stay as they are; unknown, padding,
 * separator, cls and mask ids from tokenizer_config.json (bos = [CLS],
 * eos = [SEP]); tokenizer.ggml.token_type_count from type_vocab_size.
 * A Unigram model (XLM-R's SentencePiece vocabulary) becomes "t5" (see
 * unigram() below). What it does not do: SentencePiece BPE (Llama-2 style)
 * vocabularies (refused with a message naming the model type).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/cv_int.h"

char *cv_read_text(const char *dir, const char *name, size_t *len) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *txt = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            char *nt = core_realloc(txt, cap = cap * 2 + 65536 + 1);
            if (!nt) {
                core_free(txt);
                fclose(fp);
                return NULL;
            }
            txt = nt;
        }
        size_t r = fread(txt + n, 1, cap - n - 1, fp);
        n += r;
        if (r == 0) break;
    }
    fclose(fp);
    txt[n] = 0;
    if (len) *len = n;
    return txt;
}

cJSON *cv_read_json(const char *dir, const char *name, bool *missing, anvil_status *st, char *err,
                    size_t cap) {
    size_t n;
    *missing = false;
    *st = ANVIL_OK;
    char *txt = cv_read_text(dir, name, &n);
    if (!txt) {
        *missing = true;
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(txt, n);
    core_free(txt);
    if (!j) {
        errmsg_set(err, cap, "convert: %s/%s is not valid JSON", dir, name);
        *st = ANVIL_ERR_FORMAT;
    }
    return j;
}

/* a token string of tokenizer_config.json: "tok" or {"content": "tok"} */
static const char *tok_str(const cJSON *j) {
    if (cJSON_IsString(j)) return j->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static bool has_type(const cJSON *node, const char *type) {
    if (!node) return false;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (cJSON_IsString(t) && !strcmp(t->valuestring, type)) return true;
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(node, "pretokenizers");
    const cJSON *e;
    cJSON_ArrayForEach(e, seq) if (has_type(e, type)) return true;
    return false;
}

/* the Split regexes of a pre_tokenizer, concatenated with '\n' */
static void split_rx(const cJSON *node, char *buf, size_t cap) {
    if (!node) return;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(node, "pattern");
        const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        if (cJSON_IsString(rx) && strlen(buf) + strlen(rx->valuestring) + 2 < cap) {
            strcat(buf, rx->valuestring);
            strcat(buf, "\n");
        }
    }
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(node, "pretokenizers"), *e;
    cJSON_ArrayForEach(e, seq) split_rx(e, buf, cap);
}

static const char *pre_name(const cJSON *pt) {
    static char rx[8192];
    rx[0] = 0;
    split_rx(pt, rx, sizeof rx);
    bool digits = has_type(pt, "Digits");
    if (strstr(rx, "(?i:'s|'t|'re|'ve|'m|'ll|'d)")) {
        if (strstr(rx, "\\p{N}{1,3}")) return "llama-bpe";
        if (strstr(rx, "\\p{N}")) return "qwen2";
    }
    if (!rx[0] && has_type(pt, "ByteLevel")) return digits ? "smollm" : "gpt2";
    return "default";
}

struct tokrec {
    const char *s;
    size_t len;
    int32_t type;
};

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int64_t id_of(const struct tokrec *t, uint64_t n, const char *s) {
    size_t l = strlen(s);
    for (uint64_t i = 0; i < n; i++)
        if (t[i].s && t[i].len == l && !memcmp(t[i].s, s, l)) return (int64_t)i;
    return -1;
}

/* tokenizer.ggml.<key>_token_id of the special tokens: names[i][0] is the
 * tokenizer_config.json field naming the token (its text def[i] when the
 * field is absent), names[i][1] the GGUF key's middle; a text the
 * vocabulary does not hold writes no key. */
static void put_special_ids(struct kvbuf *kb, const cJSON *tc, const struct tokrec *raw,
                            uint64_t n, const char *const names[][2], const char *const *def,
                            int count) {
    for (int i = 0; i < count; i++) {
        const char *s = tok_str(cJSON_GetObjectItemCaseSensitive(tc, names[i][0]));
        int64_t id = id_of(raw, n, s ? s : def[i]);
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", names[i][1]);
        if (id >= 0) kb_u32(kb, key, (uint32_t)id);
    }
}


/* BERT's WordPiece vocabulary (see the file comment) */
static anvil_status wordpiece(const cJSON *tj, const cJSON *tc, const cJSON *config,
                              uint64_t n_vocab, struct kvbuf *kb, char *pre, char *err,
                              size_t cap) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"),
                                                          "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *e;
    uint64_t n = n_vocab;
    cJSON_ArrayForEach(e, vocab) if (cJSON_IsNumber(e) && e->valuedouble >= 0 &&
                                     e->valuedouble < 1e7 && (uint64_t)e->valuedouble + 1 > n)
        n = (uint64_t)e->valuedouble + 1;
    if (!cJSON_IsObject(vocab) || n == 0 || n > 10000000) {
        errmsg_set(err, cap, "convert: tokenizer.json: a WordPiece model needs a vocab object");
        return ANVIL_ERR_FORMAT;
    }
    anvil_status st = ANVIL_OK;
    char **own = core_calloc((size_t)n, sizeof(*own));
    const char **strs = core_calloc((size_t)n, sizeof(*strs));
    size_t *lens = core_calloc((size_t)n, sizeof(*lens));
    int32_t *types = core_calloc((size_t)n, sizeof(*types));
    struct tokrec *raw = core_calloc((size_t)n, sizeof(*raw));
    if (!own || !strs || !lens || !types || !raw) goto nomem;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)n) continue;
        uint64_t id = (uint64_t)e->valuedouble;
        const char *t = e->string;
        size_t l = strlen(t);
        raw[id] = (struct tokrec){t, l, TT_NORMAL};
        if (!(own[id] = core_malloc(l + 4))) goto nomem;
        if (l >= 2 && t[0] == '[' && t[l - 1] == ']') {
            memcpy(own[id], t, l + 1);
        } else if (l > 2 && t[0] == '#' && t[1] == '#') {
            memcpy(own[id], t + 2, l - 1);
            l -= 2;
        } else {
            memcpy(own[id], "\xe2\x96\x81", 3); /* U+2581 */
            memcpy(own[id] + 3, t, l + 1);
            l += 3;
        }
        strs[id] = own[id], lens[id] = l, types[id] = TT_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "special");
        if (cJSON_IsNumber(idj) && idj->valuedouble >= 0 && idj->valuedouble < (double)n &&
            strs[(uint64_t)idj->valuedouble])
            types[(uint64_t)idj->valuedouble] = cJSON_IsTrue(sp) ? TT_CONTROL : TT_USER;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!strs[i]) {
            if (!(own[i] = core_malloc(24))) goto nomem;
            int l = snprintf(own[i], 24, "[PAD%llu]", (unsigned long long)i);
            strs[i] = own[i], lens[i] = (size_t)l, types[i] = TT_UNUSED;
        }
    kb_str(kb, "tokenizer.ggml.model", "bert", 4);
    snprintf(pre, 32, "default");
    kb_str(kb, "tokenizer.ggml.pre", "default", 7);
    kb_arr_str(kb, "tokenizer.ggml.tokens", strs, lens, n);
    kb_arr_i32(kb, "tokenizer.ggml.token_type", types, n);
    kb_u32(kb, "tokenizer.ggml.token_type_count",
           cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(config, "type_vocab_size"))
               ? (uint32_t)cJSON_GetObjectItemCaseSensitive(config, "type_vocab_size")->valuedouble
               : 2);
    static const char *const sp[][2] = {{"cls_token", "bos"},     {"sep_token", "eos"},
                                        {"unk_token", "unknown"}, {"pad_token", "padding"},
                                        {"sep_token", "seperator"}, {"cls_token", "cls"},
                                        {"mask_token", "mask"}};
    static const char *const def[] = {"[CLS]", "[SEP]", "[UNK]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"};
    put_special_ids(kb, tc, raw, n, sp, def, 7);
    if (kb->oom) goto nomem;
    goto done;
nomem:
    errmsg_set(err, cap, "convert: out of memory");
    st = ANVIL_ERR_NOMEM;
done:
    for (uint64_t i = 0; own && i < n; i++) core_free(own[i]);
    core_free(own);
    core_free(strs);
    core_free(lens);
    core_free(types);
    core_free(raw);
    return st;
}

/* the first node of type `type` in a normalizer / pre_tokenizer tree */
static const cJSON *find_node(const cJSON *node, const char *type) {
    if (!node) return NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (cJSON_IsString(t) && !strcmp(t->valuestring, type)) return node;
    static const char *const kids[] = {"normalizers", "pretokenizers"};
    for (int k = 0; k < 2; k++) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(node, kids[k])) {
            const cJSON *f = find_node(e, type);
            if (f) return f;
        }
    }
    return NULL;
}

/* standard base64 (padding optional); NULL on a bad character */
static uint8_t *b64_decode(const char *s, size_t *out_n) {
    size_t l = strlen(s);
    uint8_t *o = core_malloc(l / 4 * 3 + 4);
    if (!o) return NULL;
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    for (size_t i = 0; i < l; i++) {
        char c = s[i];
        int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
              : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
        if (c == '=') break;
        if (v < 0) {
            core_free(o);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[n++] = (uint8_t)(acc >> bits);
        }
    }
    *out_n = n;
    return o;
}

/* XLM-R's SentencePiece unigram vocabulary (tokenizer.json model type
 * Unigram) as tokenizer.ggml.model "t5", as llama.cpp writes it: pieces
 * and scores in id order, types UNKNOWN (unk_id), CONTROL (special added
 * tokens), USER_DEFINED (other added tokens), NORMAL; ids past the vocab up
 * to vocab_size "[PAD<id>]" UNUSED with score -10000; the normalizer's
 * Precompiled charsmap decoded; add_space_prefix from the Metaspace
 * (prepend_scheme other than "never"), remove_extra_whitespaces from a
 * Replace of " {2,}" in the normalizer (else clean_up_tokenization_spaces). */
static anvil_status unigram(const cJSON *tj, const cJSON *tc, const cJSON *config,
                            uint64_t n_vocab, struct kvbuf *kb, char *pre, char *err,
                            size_t cap) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *e;
    int nv = cJSON_GetArraySize(vocab);
    uint64_t n = (uint64_t)(nv > 0 ? nv : 0);
    if (n_vocab > n) n = n_vocab;
    if (!cJSON_IsArray(vocab) || nv <= 0 || n > 10000000) {
        errmsg_set(err, cap, "convert: tokenizer.json: a Unigram model needs a vocab list");
        return ANVIL_ERR_FORMAT;
    }
    anvil_status st = ANVIL_OK;
    const char **strs = core_calloc((size_t)n, sizeof(*strs));
    size_t *lens = core_calloc((size_t)n, sizeof(*lens));
    int32_t *types = core_calloc((size_t)n, sizeof(*types));
    float *scores = core_calloc((size_t)n, sizeof(*scores));
    struct tokrec *raw = core_calloc((size_t)n, sizeof(*raw));
    char (*pads)[24] = core_calloc((size_t)n, sizeof(*pads));
    uint8_t *cmap = NULL;
    if (!strs || !lens || !types || !scores || !raw || !pads) goto nomem;
    uint64_t id = 0;
    cJSON_ArrayForEach(e, vocab) {
        const cJSON *pc = cJSON_GetArrayItem(e, 0), *sc = cJSON_GetArrayItem(e, 1);
        if (!cJSON_IsString(pc) || !cJSON_IsNumber(sc)) {
            errmsg_set(err, cap, "convert: tokenizer.json: Unigram vocab entry %llu is not "
                       "[piece, score]", (unsigned long long)id);
            st = ANVIL_ERR_FORMAT;
            goto done;
        }
        strs[id] = pc->valuestring, lens[id] = strlen(pc->valuestring);
        scores[id] = (float)sc->valuedouble;
        types[id] = TT_NORMAL;
        id++;
    }
    for (; id < n; id++) {
        int l = snprintf(pads[id], sizeof pads[id], "[PAD%llu]", (unsigned long long)id);
        strs[id] = pads[id], lens[id] = (size_t)l, scores[id] = -10000.0f, types[id] = TT_UNUSED;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "special");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(idj) || idj->valuedouble < 0 || idj->valuedouble >= (double)n ||
            !cJSON_IsString(c))
            continue;
        uint64_t k = (uint64_t)idj->valuedouble;
        strs[k] = c->valuestring, lens[k] = strlen(c->valuestring);
        types[k] = cJSON_IsTrue(sp) ? TT_CONTROL : TT_USER;
    }
    if (cJSON_IsNumber(unk) && unk->valuedouble >= 0 && unk->valuedouble < (double)n)
        types[(uint64_t)unk->valuedouble] = TT_UNKNOWN;
    for (uint64_t i = 0; i < n; i++) raw[i] = (struct tokrec){strs[i], lens[i], types[i]};

    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
    const cJSON *pcm = cJSON_GetObjectItemCaseSensitive(find_node(norm, "Precompiled"),
                                                        "precompiled_charsmap");
    size_t cmap_n = 0;
    if (cJSON_IsString(pcm) && pcm->valuestring[0] &&
        !(cmap = b64_decode(pcm->valuestring, &cmap_n))) {
        errmsg_set(err, cap, "convert: tokenizer.json: precompiled_charsmap is not base64");
        st = ANVIL_ERR_FORMAT;
        goto done;
    }
    const cJSON *ms = find_node(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"), "Metaspace");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(ms, "prepend_scheme");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(ms, "add_prefix_space");
    bool add_prefix = cJSON_IsString(ps) ? strcmp(ps->valuestring, "never") != 0
                      : cJSON_IsBool(ap) ? cJSON_IsTrue(ap) : true;
    const cJSON *rp = find_node(norm, "Replace");
    const cJSON *rx = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(rp, "pattern"), "Regex");
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(tc, "clean_up_tokenization_spaces");
    bool rm_ws = (cJSON_IsString(rx) && !strcmp(rx->valuestring, " {2,}")) || cJSON_IsTrue(cu);

    kb_str(kb, "tokenizer.ggml.model", "t5", 2);
    snprintf(pre, 32, "default");
    kb_str(kb, "tokenizer.ggml.pre", "default", 7);
    kb_arr_str(kb, "tokenizer.ggml.tokens", strs, lens, n);
    kb_arr_f32(kb, "tokenizer.ggml.scores", scores, n);
    kb_arr_i32(kb, "tokenizer.ggml.token_type", types, n);
    kb_bool(kb, "tokenizer.ggml.add_space_prefix", add_prefix);
    const cJSON *tv = cJSON_GetObjectItemCaseSensitive(config, "type_vocab_size");
    kb_u32(kb, "tokenizer.ggml.token_type_count",
           cJSON_IsNumber(tv) && tv->valuedouble >= 0 ? (uint32_t)tv->valuedouble : 1);
    kb_bool(kb, "tokenizer.ggml.remove_extra_whitespaces", rm_ws);
    if (cmap) kb_arr_u8(kb, "tokenizer.ggml.precompiled_charsmap", cmap, cmap_n);
    static const char *const sp[][2] = {{"bos_token", "bos"},     {"eos_token", "eos"},
                                        {"unk_token", "unknown"}, {"sep_token", "seperator"},
                                        {"pad_token", "padding"}, {"cls_token", "cls"},
                                        {"mask_token", "mask"}};
    static const char *const def[] = {"<s>", "</s>", "<unk>", "</s>", "<pad>", "<s>", "<mask>"};
    put_special_ids(kb, tc, raw, n, sp, def, 7);
    /* XLM-R's post-processor wraps a text in <s> ... </s> */
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor");
    if (find_node(pp, "RobertaProcessing") || find_node(pp, "TemplateProcessing")) {
        kb_bool(kb, "tokenizer.ggml.add_bos_token", true);
        kb_bool(kb, "tokenizer.ggml.add_eos_token", true);
    }
    if (kb->oom) goto nomem;
    goto done;
nomem:
    errmsg_set(err, cap, "convert: out of memory");
    st = ANVIL_ERR_NOMEM;
done:
    core_free(strs);
    core_free(lens);
    core_free(types);
    core_free(scores);
    core_free(raw);
    core_free(pads);
    core_free(cmap);
    return st;
}

anvil_status cv_tokenizer(const char *dir, const cJSON *config, uint64_t n_vocab,
                          struct kvbuf *kb, char *pre, char *err, size_t cap) {
    anvil_status st = ANVIL_OK;
    bool missing;
    cJSON *tj = NULL, *tc = NULL, *gc = NULL;
    struct tokrec *toks = NULL;
    const char **strs = NULL;
    size_t *lens = NULL;
    int32_t *types = NULL;
    char (*pads)[24] = NULL;
    pre[0] = 0;

    tj = cv_read_json(dir, "tokenizer.json", &missing, &st, err, cap);
    if (missing) {
        errmsg_set(err, cap, "convert: %s has no tokenizer.json (anvil convert reads the fast "
                   "tokenizer's file)", dir);
        return ANVIL_ERR_FORMAT;
    }
    if (!tj) return st;
    tc = cv_read_json(dir, "tokenizer_config.json", &missing, &st, err, cap);
    if (st != ANVIL_OK) goto fail;
    gc = cv_read_json(dir, "generation_config.json", &missing, &st, err, cap);
    if (st != ANVIL_OK) goto fail;

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *ptok = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(tj, "decoder");
    const char *mt = cJSON_IsString(mtype) ? mtype->valuestring : "?";
    if (!strcmp(mt, "WordPiece")) {
        st = wordpiece(tj, tc, config, n_vocab, kb, pre, err, cap);
        goto done;
    }
    if (!strcmp(mt, "Unigram")) {
        st = unigram(tj, tc, config, n_vocab, kb, pre, err, cap);
        goto done;
    }
    if (strcmp(mt, "BPE") || !cJSON_IsObject(vocab) ||
        !(has_type(ptok, "ByteLevel") || has_type(dec, "ByteLevel"))) {
        errmsg_set(err, cap, "convert: tokenizer.json has a %s model%s: anvil convert writes "
                   "byte-level BPE vocabularies only (WordPiece and SentencePiece are not done "
                   "yet)", mt, strcmp(mt, "BPE") ? "" : " without ByteLevel");
        st = ANVIL_ERR_UNSUPPORTED;
        goto fail;
    }

    /* ids: the vocab, then added_tokens over it */
    uint64_t n = n_vocab;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        uint64_t id = cJSON_IsNumber(e) && e->valuedouble >= 0 ? (uint64_t)e->valuedouble : 0;
        if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < 1e8 && id + 1 > n)
            n = id + 1;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    cJSON_ArrayForEach(e, added) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsNumber(idj) && idj->valuedouble >= 0 && idj->valuedouble < 1e8 &&
            (uint64_t)idj->valuedouble + 1 > n)
            n = (uint64_t)idj->valuedouble + 1;
    }
    if (n == 0 || n > 10000000) {
        errmsg_set(err, cap, "convert: tokenizer.json: vocabulary of %llu tokens",
                   (unsigned long long)n);
        st = ANVIL_ERR_FORMAT;
        goto fail;
    }
    toks = core_calloc((size_t)n, sizeof(*toks));
    strs = core_calloc((size_t)n, sizeof(*strs));
    lens = core_calloc((size_t)n, sizeof(*lens));
    types = core_calloc((size_t)n, sizeof(*types));
    pads = core_calloc((size_t)n, sizeof(*pads));
    if (!toks || !strs || !lens || !types || !pads) goto nomem;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)n) {
            errmsg_set(err, cap, "convert: tokenizer.json: token id of '%.40s' is not valid",
                       e->string ? e->string : "");
            st = ANVIL_ERR_FORMAT;
            goto fail;
        }
        uint64_t id = (uint64_t)e->valuedouble;
        toks[id] = (struct tokrec){e->string, strlen(e->string), TT_NORMAL};
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "special");
        if (!cJSON_IsNumber(idj) || !cJSON_IsString(c) || idj->valuedouble < 0) continue;
        uint64_t id = (uint64_t)idj->valuedouble;
        toks[id] = (struct tokrec){c->valuestring, strlen(c->valuestring),
                                   cJSON_IsTrue(sp) ? TT_CONTROL : TT_USER};
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!toks[i].s) {
            int l = snprintf(pads[i], sizeof pads[i], "[PAD%llu]", (unsigned long long)i);
            toks[i] = (struct tokrec){pads[i], (size_t)l, TT_UNUSED};
        }
        strs[i] = toks[i].s, lens[i] = toks[i].len, types[i] = toks[i].type;
    }
    kb_str(kb, "tokenizer.ggml.model", "gpt2", 4);
    const char *pn = pre_name(ptok);
    snprintf(pre, 32, "%s", pn);
    kb_str(kb, "tokenizer.ggml.pre", pn, strlen(pn));
    kb_arr_str(kb, "tokenizer.ggml.tokens", strs, lens, n);
    kb_arr_i32(kb, "tokenizer.ggml.token_type", types, n);

    /* merges: "a b" strings, or [a, b] pairs (tokenizers >= 0.20) */
    int nm = cJSON_GetArraySize(merges), k = 0;
    if (nm > 0) {
        const char **ms = core_calloc((size_t)nm, sizeof(*ms));
        size_t *ml = core_calloc((size_t)nm, sizeof(*ml));
        char **own = core_calloc((size_t)nm, sizeof(*own));
        bool ok = ms && ml && own;
        cJSON_ArrayForEach(e, merges) {
            if (!ok) break;
            if (cJSON_IsString(e)) {
                ms[k] = e->valuestring, ml[k] = strlen(e->valuestring), k++;
            } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                       cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                       cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
                const char *a = cJSON_GetArrayItem(e, 0)->valuestring;
                const char *b = cJSON_GetArrayItem(e, 1)->valuestring;
                size_t la = strlen(a), lb = strlen(b);
                if (!(own[k] = core_malloc(la + lb + 2))) {
                    ok = false;
                    break;
                }
                memcpy(own[k], a, la);
                own[k][la] = ' ';
                memcpy(own[k] + la + 1, b, lb + 1);
                ms[k] = own[k], ml[k] = la + lb + 1, k++;
            }
        }
        if (ok) kb_arr_str(kb, "tokenizer.ggml.merges", ms, ml, (uint64_t)k);
        for (int i = 0; own && i < nm; i++) core_free(own[i]);
        core_free(own);
        core_free(ms);
        core_free(ml);
        if (!ok) goto nomem;
    }

    /* special tokens: the strings of tokenizer_config.json, else ids */
    static const char *const names[][2] = {{"bos_token", "bos"}, {"eos_token", "eos"},
                                           {"unk_token", "unknown"}, {"pad_token", "padding"}};
    for (int i = 0; i < 4; i++) {
        char key[64], idk[32];
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", names[i][1]);
        const char *s = tok_str(cJSON_GetObjectItemCaseSensitive(tc, names[i][0]));
        int64_t id = s ? id_of(toks, n, s) : -1;
        snprintf(idk, sizeof idk, "%s_id", names[i][0]);
        for (int src = 0; id < 0 && src < 2; src++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(src ? config : gc, idk);
            if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
            if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < (double)n)
                id = (int64_t)v->valuedouble;
        }
        if (id >= 0) kb_u32(kb, key, (uint32_t)id);
    }
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token");
    if (cJSON_IsBool(ab)) kb_bool(kb, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(ab));
    if (cJSON_IsBool(ae)) kb_bool(kb, "tokenizer.ggml.add_eos_token", cJSON_IsTrue(ae));

    /* chat template: a string, or a list of {name, template} (the default one) */
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    const char *tmpl = cJSON_IsString(ct) ? ct->valuestring : NULL;
    const cJSON *ctl = cJSON_IsArray(ct) ? ct : NULL;
    cJSON_ArrayForEach(e, ctl) {
        const cJSON *nm_ = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (cJSON_IsString(nm_) && cJSON_IsString(tt) && !strcmp(nm_->valuestring, "default"))
            tmpl = tt->valuestring;
    }
    if (tmpl) {
        kb_str(kb, "tokenizer.chat_template", tmpl, strlen(tmpl));
    } else {
        size_t tl;
        char *t = cv_read_text(dir, "chat_template.jinja", &tl);
        if (t) kb_str(kb, "tokenizer.chat_template", t, tl);
        core_free(t);
    }
    if (kb->oom) goto nomem;
    goto done;
nomem:
    errmsg_set(err, cap, "convert: out of memory");
    st = ANVIL_ERR_NOMEM;
fail:
done:
    core_free(toks);
    core_free(strs);
    core_free(lens);
    core_free(types);
    core_free(pads);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    cJSON_Delete(gc);
    return st;
}
