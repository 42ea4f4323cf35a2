/*
 * vocab.c - build the read-only vocabulary from a spec (tok_build; load.c
 * fills the spec from GGUF metadata, tests fill it by hand).
 *
 * What it derives, once, at load:
 *   - a string table of token texts with a hash index, extended with texts
 *     that occur only in merges;
 *   - the merge table: (left symbol, right symbol) -> (rank, merged symbol);
 *     the rank is the merge's index, the first of duplicate merges wins
 *     (llama.cpp: bpe_ranks.emplace);
 *   - token attributes from tokenizer.ggml.token_type, with llama.cpp's
 *     fix-ups (end-of-turn-looking tokens become control tokens);
 *   - the special-token list for partitioning, longest text first (ties by
 *     id, where llama.cpp's std::sort leaves the order unspecified);
 *   - the decoded bytes of every token, so tok_piece is a copy;
 *   - the end-of-generation set: EOS, EOT, EOM and tokens with the
 *     end-of-turn texts llama.cpp lists (llama-vocab.cpp, special_eog_ids).
 *
 * Input is untrusted: counts, ids and string lengths are checked; a bad
 * value gives ANVIL_ERR_FORMAT with a one-line reason.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// attributes, specials, end of generation

/* Texts llama.cpp treats as end of generation (llama-vocab.cpp, the
 * special_eog_ids loop); such tokens are also forced to be control tokens. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
};

static uint8_t attr_of_type(int32_t t) {
    switch (t) {
    case TOK_TYPE_NORMAL: return TOK_ATTR_NORMAL;
    case TOK_TYPE_UNKNOWN: return TOK_ATTR_UNKNOWN;
    case TOK_TYPE_CONTROL: return TOK_ATTR_CONTROL;
    case TOK_TYPE_USER_DEFINED: return TOK_ATTR_USER;
    case TOK_TYPE_UNUSED: return TOK_ATTR_UNUSED;
    case TOK_TYPE_BYTE: return TOK_ATTR_BYTE;
    default: return TOK_ATTR_UNDEF;
    }
}

static void eog_set(struct tok_vocab *v, anvil_token t) {
    if (t >= 0 && t < v->n_vocab) v->eog[t / 8] |= (uint8_t)(1u << (t % 8));
}

static anvil_status specials_build(struct tok_vocab *v) {
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN)) n++;
    v->special = anvil_malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!v->special) return ANVIL_ERR_NOMEM;
    n = 0;
    for (int32_t i = 0; i < v->n_vocab; i++)
        if (v->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN)) v->special[n++] = i;
    /* insertion sort by text length, longest first, stable (ids ascending
     * among equal lengths); the list is short (tens to a few hundred) */
    for (int32_t i = 1; i < n; i++) {
        int32_t id = v->special[i];
        size_t len = v->syms.off[id + 1] - v->syms.off[id];
        int32_t j = i - 1;
        while (j >= 0) {
            int32_t o = v->special[j];
            if (v->syms.off[o + 1] - v->syms.off[o] >= len) break;
            v->special[j + 1] = o;
            j--;
        }
        v->special[j + 1] = id;
    }
    v->n_special = n;
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// decoded pieces

struct piece_buf {
    char *p;
    size_t len, cap;
};

static anvil_status piece_add(struct piece_buf *b, const void *data, size_t n) {
    if (b->len + n > UINT32_MAX) return ANVIL_ERR_FORMAT;
    anvil_status st = tok_grow((void **)&b->p, &b->cap, b->len + n, 1);
    if (st != ANVIL_OK) return st;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return ANVIL_OK;
}

static anvil_status pieces_build(struct tok_vocab *v) {
    anvil_status st = ANVIL_OK;
    struct piece_buf b = {NULL, 0, 0};
    v->piece_off = anvil_malloc(sizeof(uint32_t) * ((size_t)v->n_vocab + 1));
    if (!v->piece_off) return ANVIL_ERR_NOMEM;
    TRY(tok_grow((void **)&b.p, &b.cap, v->syms.off[v->n_vocab] + 16, 1));
    for (int32_t id = 0; id < v->n_vocab; id++) {
        v->piece_off[id] = (uint32_t)b.len;
        size_t n;
        const char *t = tok_text(v, id, &n);
        uint8_t a = v->attr[id];
        if (a & (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN)) {
            TRY(piece_add(&b, t, n)); /* verbatim */
        } else if (a & TOK_ATTR_NORMAL) {
            /* llama_decode_text: each code point of the text back to its byte */
            size_t i = 0;
            while (i < n) {
                uint32_t cp = utf8_decode_lenient((const unsigned char *)t, n, &i);
                int by = utf8_cp_to_byte(cp);
                if (by >= 0) {
                    char c = (char)by;
                    TRY(piece_add(&b, &c, 1));
                } else {
                    /* llama.cpp's marker for a character outside the byte
                     * alphabet (not seen in a well-formed vocab) */
                    char u[4], hex[32];
                    int k = utf8_encode(cp, u), m = 0;
                    m += snprintf(hex + m, sizeof(hex) - (size_t)m, "[UNK_BYTE_0x");
                    for (int j = 0; j < k; j++)
                        m += snprintf(hex + m, sizeof(hex) - (size_t)m, "%02x", (unsigned char)u[j]);
                    TRY(piece_add(&b, hex, (size_t)m));
                    TRY(piece_add(&b, t, n));
                    TRY(piece_add(&b, "]", 1));
                }
            }
        } else if (a & TOK_ATTR_BYTE) {
            /* "<0xAB>" */
            unsigned x;
            char hx[3] = {0};
            if (n == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>') {
                memcpy(hx, t + 3, 2);
                if (sscanf(hx, "%2x", &x) == 1) {
                    char c = (char)x;
                    TRY(piece_add(&b, &c, 1));
                }
            }
        }
        /* unused / undefined tokens decode to nothing */
    }
    v->piece_off[v->n_vocab] = (uint32_t)b.len;
    v->piece = b.p;
    return ANVIL_OK;
fail:
    anvil_free(b.p);
    return st;
}

// ----------------------------------------------------------------------------
// build

void tok_free(struct tok_vocab *v) {
    if (!v) return;
    strtab_free(&v->syms);
    anvil_free(v->attr);
    anvil_free(v->eog);
    anvil_free(v->piece);
    anvil_free(v->piece_off);
    bpe_merges_free(&v->merges);
    anvil_free(v->special);
    pretok_free(&v->pre);
    chat_free(&v->chat);
    anvil_free(v);
}

static anvil_token check_id(const struct tok_spec *s, int32_t id) {
    /* llama.cpp ignores an out-of-range special id (with a warning) */
    return id >= 0 && id < s->n_tokens ? id : -1;
}

anvil_status tok_build(const struct tok_spec *s, struct tok_vocab **out, char *err,
                       size_t err_cap) {
    anvil_status st = ANVIL_OK;
    if (s->kind != TOK_KIND_BPE) {
        errmsg_set(err, err_cap, "unsupported tokenizer kind");
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (s->n_tokens <= 0 || !s->tokens || (s->n_merges > 0 && !s->merges) || s->n_merges < 0) {
        errmsg_set(err, err_cap, "tokenizer has no tokens");
        return ANVIL_ERR_FORMAT;
    }
    struct tok_vocab *v = anvil_calloc(1, sizeof(*v));
    if (!v) return ANVIL_ERR_NOMEM;
    v->kind = s->kind;
    v->n_vocab = s->n_tokens;

    size_t blob = 0;
    for (int32_t i = 0; i < s->n_tokens; i++) {
        if (s->tokens[i].len > (1u << 20)) {
            errmsg_set(err, err_cap, "token %d is %llu bytes long", i,
                       (unsigned long long)s->tokens[i].len);
            st = ANVIL_ERR_FORMAT;
            goto fail;
        }
        blob += s->tokens[i].len ? s->tokens[i].len : 24;
    }
    if (blob > UINT32_MAX / 2) {
        errmsg_set(err, err_cap, "token texts too large");
        st = ANVIL_ERR_FORMAT;
        goto fail;
    }
    /* room for the merge-only texts too */
    TRY(strtab_init(&v->syms, s->n_tokens + 1024, blob + 4096));
    for (int32_t i = 0; i < s->n_tokens; i++) {
        const char *t = s->tokens[i].ptr;
        size_t n = s->tokens[i].len;
        char empty[32];
        if (n == 0) { /* llama.cpp renames empty tokens */
            n = (size_t)snprintf(empty, sizeof(empty), "[EMPTY_%d]", i);
            t = empty;
        }
        int32_t id;
        bool added;
        TRY(strtab_intern(&v->syms, t, n, &id, &added));
        if (!added) {
            errmsg_set(err, err_cap, "duplicate token text at id %d", i);
            st = ANVIL_ERR_FORMAT;
            goto fail;
        }
    }

    v->attr = anvil_malloc((size_t)s->n_tokens);
    v->eog = anvil_calloc(((size_t)s->n_tokens + 7) / 8, 1);
    if (!v->attr || !v->eog) {
        st = ANVIL_ERR_NOMEM;
        goto fail;
    }
    for (int32_t i = 0; i < s->n_tokens; i++)
        v->attr[i] = s->types ? attr_of_type(s->types[i]) : TOK_ATTR_NORMAL;

    TRY(pretok_init(&v->pre, s->pre, err, err_cap));
    TRY(bpe_merges_build(&v->merges, &v->syms, s->merges, s->n_merges, err, err_cap));

    /* byte alphabet */
    for (int b = 0; b < 256; b++) {
        int k = utf8_encode(utf8_byte_to_cp((uint8_t)b), v->byte_enc[b]);
        v->byte_enc_len[b] = (uint8_t)k;
        v->byte_sym[b] = strtab_find(&v->syms, v->byte_enc[b], (size_t)k);
        char one = (char)b;
        int32_t t = strtab_find(&v->syms, &one, 1);
        v->byte_tok1[b] = t < v->n_vocab ? t : -1;
    }

    v->bos = check_id(s, s->bos);
    v->eos = check_id(s, s->eos);
    v->unk = check_id(s, s->unk);
    v->pad = check_id(s, s->pad);
    v->eot = check_id(s, s->eot);
    v->eom = check_id(s, s->eom);
    v->add_bos = s->add_bos >= 0 ? s->add_bos != 0 : v->pre.add_bos;
    v->add_eos = s->add_eos > 0;
    if (v->add_bos && v->bos < 0) v->add_bos = false;
    if (v->add_eos && v->eos < 0) v->add_eos = false;

    /* end of generation, and llama.cpp's attribute fix-ups */
    for (size_t k = 0; k < sizeof(eog_texts) / sizeof(eog_texts[0]); k++) {
        int32_t id = strtab_find(&v->syms, eog_texts[k], strlen(eog_texts[k]));
        if (id < 0 || id >= v->n_vocab) continue;
        eog_set(v, id);
        v->attr[id] |= TOK_ATTR_CONTROL;
    }
    eog_set(v, v->eos);
    eog_set(v, v->eot);
    eog_set(v, v->eom);
    static const char *const force_user[] = {"<|channel|>", "<|message|>", "<|start|>",
                                             "<|constrain|>"};
    for (size_t k = 0; k < sizeof(force_user) / sizeof(force_user[0]); k++) {
        int32_t id = strtab_find(&v->syms, force_user[k], strlen(force_user[k]));
        if (id >= 0 && id < v->n_vocab) v->attr[id] = TOK_ATTR_USER;
    }

    TRY(specials_build(v));
    TRY(pieces_build(v));
    TRY(chat_detect(&v->chat, s->chat_template));
    *out = v;
    return ANVIL_OK;
fail:
    if (st == ANVIL_ERR_NOMEM) errmsg_set(err, err_cap, "out of memory loading the tokenizer");
    tok_free(v);
    return st;
}

// ----------------------------------------------------------------------------
// accessors

int32_t tok_n_vocab(const struct tok_vocab *v) { return v->n_vocab; }
anvil_token tok_bos(const struct tok_vocab *v) { return v->bos; }
anvil_token tok_eos(const struct tok_vocab *v) { return v->eos; }
bool tok_add_bos(const struct tok_vocab *v) { return v->add_bos; }

bool tok_is_eog(const struct tok_vocab *v, anvil_token t) {
    return t >= 0 && t < v->n_vocab && (v->eog[t / 8] >> (t % 8)) & 1;
}
