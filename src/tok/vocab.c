/*
 * vocab.c - build the read-only vocabulary from a spec (tok_build; load.c
 * fills the spec from GGUF metadata, tests fill it by hand).
 *
 * What it derives, once, at load:
 *   - a string table of token texts with a hash index, extended with texts
 *     that occur only in BPE merges;
 *   - for BPE, the merge table (bpe.c) and the byte tables; for SPM, the
 *     scores and the byte tokens <0xNN> (spm.c); for WPM the normalizer
 *     switches (wpm.c); for UGM the token tries and the charsmap (ugm.c);
 *   - token attributes from tokenizer.ggml.token_type, with llama.cpp's
 *     fix-ups (end-of-turn and fill-in-the-middle looking tokens become
 *     control tokens, gpt-oss's channel tokens user-defined, Phi-3's
 *     special tokens strip the whitespace after them);
 *   - the special-token index for partitioning (special.c);
 *   - the decoded bytes of every token, so tok_piece is a copy;
 *   - the end-of-generation set: EOS, EOT, EOM and tokens with the
 *     end-of-turn texts llama.cpp lists (llama-vocab.cpp, special_eog_ids);
 *   - the chat template family (chat_tmpl.c), from the template text or,
 *     when the file has none, from the special tokens.
 *
 * Input is untrusted: counts, ids and string lengths are checked; a bad
 * value gives ANVIL_ERR_FORMAT with a one-line reason.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// attributes, end of generation

/* Texts llama.cpp treats as end of generation (llama-vocab.cpp, the
 * special_eog_ids loop); such tokens are also forced to be control tokens. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
};

/* Fill-in-the-middle texts llama.cpp detects (llama-vocab.cpp, the FIM
 * loops), per token (enum anvil_fim order). When the file gives a token's
 * id (load.c) that id is the token and its texts are left alone, as
 * llama.cpp skips the group then; otherwise the first text found is the
 * token and every text found becomes a control token. Pad, repo and file
 * separator also end a generation. */
static const char *const fim_texts[ANVIL_FIM_COUNT][9] = {
    [ANVIL_FIM_PRE] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                       "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                       "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
    [ANVIL_FIM_SUF] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                       "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>",
                       "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
    [ANVIL_FIM_MID] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                       "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                       "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL},
    [ANVIL_FIM_PAD] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    [ANVIL_FIM_REP] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                       NULL},
    [ANVIL_FIM_SEP] = {"<|file_sep|>", NULL},
};

static uint16_t attr_of_type(int32_t t) {
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

static int32_t find_token(const struct tok_vocab *v, const char *text) {
    int32_t id = strtab_find(&v->syms, text, strlen(text));
    return id >= 0 && id < v->n_vocab ? id : -1;
}

static void eog_set(struct tok_vocab *v, anvil_token t) {
    if (t >= 0 && t < v->n_vocab) v->eog[t / 8] |= (uint8_t)(1u << (t % 8));
}

static void eog_clear(struct tok_vocab *v, anvil_token t) {
    if (t >= 0 && t < v->n_vocab) v->eog[t / 8] &= (uint8_t)~(1u << (t % 8));
}

/* llama.cpp's fix-ups of attributes and the end-of-generation set, in its
 * order. */
static void fixups(struct tok_vocab *v, const struct tok_spec *s) {
    for (int g = 0; g < ANVIL_FIM_COUNT; g++) {
        bool ends = g == ANVIL_FIM_PAD || g == ANVIL_FIM_REP || g == ANVIL_FIM_SEP;
        v->fim[g] = s->fim_given[g] && s->fim[g] >= 0 && s->fim[g] < v->n_vocab ? s->fim[g] : -1;
        if (v->fim[g] >= 0) {
            if (ends) eog_set(v, v->fim[g]);
            continue;
        }
        for (int k = 0; fim_texts[g][k]; k++) {
            int32_t id = find_token(v, fim_texts[g][k]);
            if (id < 0) continue;
            if (v->fim[g] < 0) v->fim[g] = id;
            v->attr[id] |= TOK_ATTR_CONTROL;
            if (ends) eog_set(v, id);
        }
    }
    for (size_t k = 0; k < sizeof(eog_texts) / sizeof(eog_texts[0]); k++) {
        int32_t id = find_token(v, eog_texts[k]);
        if (id < 0) continue;
        eog_set(v, id);
        v->attr[id] |= TOK_ATTR_CONTROL;
    }
    /* gpt-oss: always rendered */
    static const char *const force_user[] = {"<|channel|>", "<|message|>", "<|start|>",
                                             "<|constrain|>"};
    for (size_t k = 0; k < sizeof(force_user) / sizeof(force_user[0]); k++) {
        int32_t id = find_token(v, force_user[k]);
        if (id >= 0) v->attr[id] = TOK_ATTR_USER;
    }
    eog_set(v, v->eos);
    eog_set(v, v->eot);
    eog_set(v, v->eom);
    /* gpt-oss, solar-open: <|end|> ends a message, not the generation */
    int32_t end = find_token(v, "<|end|>");
    bool has_return = find_token(v, "<|return|>") >= 0, has_flush = find_token(v, "<|flush|>") >= 0;
    bool has_call = find_token(v, "<|call|>") >= 0 || find_token(v, "<|calls|>") >= 0;
    if (end >= 0 && has_call && (has_return || has_flush)) {
        eog_clear(v, end);
        v->attr[end] = TOK_ATTR_USER;
    }
    /* Gemma 4: </s> is an ordinary token there */
    int32_t slash_s = find_token(v, "</s>");
    if (slash_s >= 0 && find_token(v, "<|tool_response>") >= 0) {
        eog_clear(v, slash_s);
        v->attr[slash_s] = TOK_ATTR_NORMAL;
    }
    /* Phi-3: the special tokens strip the whitespace after them, except
     * these three (llama.cpp keys this on general.name; load.c decides) */
    if (s->rstrip_specials) {
        for (int32_t i = 0; i < v->n_vocab; i++)
            if (v->attr[i] & TOK_ATTR_SPECIAL) v->attr[i] |= TOK_ATTR_RSTRIP;
        if (slash_s >= 0) v->attr[slash_s] |= TOK_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++) {
            int32_t id = find_token(v, keep[k]);
            if (id >= 0) v->attr[id] &= (uint16_t)~TOK_ATTR_RSTRIP;
        }
    }
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

/* The byte of a "<0xAB>" token text, or -1. */
static int hex_byte(const char *t, size_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = t[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F'                                 ? c - 'A' + 10
                                                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A normal token's text with every U+2581 turned back into a space. */
static anvil_status add_unescaped(struct piece_buf *b, const char *t, size_t n) {
    anvil_status st = ANVIL_OK;
    size_t i = 0;
    while (i < n && st == ANVIL_OK) {
        if (i + 3 <= n && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
            st = piece_add(b, " ", 1);
            i += 3;
        } else {
            const char *e = i + 1 < n ? memchr(t + i + 1, 0xe2, n - i - 1) : NULL;
            size_t run = e ? (size_t)(e - (t + i)) : n - i;
            st = piece_add(b, t + i, run);
            i += run;
        }
    }
    return st;
}

/* A byte-level BPE token's text decoded (llama_decode_text): each code
 * point back to its byte. */
static anvil_status add_byte_decoded(struct piece_buf *b, const char *t, size_t n) {
    anvil_status st = ANVIL_OK;
    size_t i = 0;
    while (i < n && st == ANVIL_OK) {
        uint32_t cp = utf8_decode_lenient((const unsigned char *)t, n, &i);
        int by = utf8_cp_to_byte(cp);
        if (by >= 0) {
            char c = (char)by;
            st = piece_add(b, &c, 1);
        } else {
            /* llama.cpp's marker for a character outside the byte
             * alphabet (not seen in a well-formed vocab) */
            char u[4], hex[32];
            int k = utf8_encode(cp, u), m = 0;
            m += snprintf(hex + m, sizeof(hex) - (size_t)m, "[UNK_BYTE_0x");
            for (int j = 0; j < k; j++)
                m += snprintf(hex + m, sizeof(hex) - (size_t)m, "%02x", (unsigned char)u[j]);
            if ((st = piece_add(b, hex, (size_t)m)) == ANVIL_OK &&
                (st = piece_add(b, t, n)) == ANVIL_OK)
                st = piece_add(b, "]", 1);
        }
    }
    return st;
}

/* llama.cpp's token_to_piece, once per token. */
static anvil_status pieces_build(struct tok_vocab *v) {
    anvil_status st = ANVIL_OK;
    struct piece_buf b = {NULL, 0, 0};
    v->piece_off = core_malloc(sizeof(uint32_t) * ((size_t)v->n_vocab + 1));
    if (!v->piece_off) return ANVIL_ERR_NOMEM;
    TRY(tok_grow((void **)&b.p, &b.cap, v->syms.off[v->n_vocab] + 16, 1));
    for (int32_t id = 0; id < v->n_vocab; id++) {
        v->piece_off[id] = (uint32_t)b.len;
        size_t n;
        const char *t = tok_text(v, id, &n);
        uint16_t a = v->attr[id];
        if (a & TOK_ATTR_SPECIAL) {
            TRY(piece_add(&b, t, n)); /* verbatim */
        } else if (a & TOK_ATTR_NORMAL) {
            if (v->escape_spaces)
                TRY(add_unescaped(&b, t, n));
            else
                TRY(add_byte_decoded(&b, t, n));
        } else if (a & TOK_ATTR_BYTE) {
            int by = hex_byte(t, n);
            if (by >= 0) {
                char c = (char)by;
                TRY(piece_add(&b, &c, 1));
            }
        }
        /* unused / undefined tokens decode to nothing */
    }
    v->piece_off[v->n_vocab] = (uint32_t)b.len;
    v->piece = b.p;
    return ANVIL_OK;
fail:
    core_free(b.p);
    return st;
}

// ----------------------------------------------------------------------------
// build

void tok_free(struct tok_vocab *v) {
    if (!v) return;
    strtab_free(&v->syms);
    core_free(v->attr);
    core_free(v->score);
    core_free(v->eog);
    core_free(v->piece);
    core_free(v->piece_off);
    bpe_free(&v->bpe);
    ugm_free(&v->ugm);
    special_free(&v->specials);
    pretok_free(&v->pre);
    chat_free(&v->chat);
    chat_jinja_free(&v->jinja);
    core_free(v);
}

static anvil_token check_id(const struct tok_spec *s, int32_t id) {
    /* llama.cpp ignores an out-of-range special id (with a warning) */
    return id >= 0 && id < s->n_tokens ? id : -1;
}

/* BPE: the merge table, the byte alphabet and the byte fallback tokens. */
static anvil_status bpe_setup(struct tok_vocab *v, const struct tok_spec *s, char *err,
                              size_t err_cap) {
    anvil_status st = bpe_init(&v->bpe, &v->syms, v->n_vocab, s->bpe_raw, s->merges,
                               s->n_merges, err, err_cap);
    if (st != ANVIL_OK) return st;
    struct tok_bpe *b = &v->bpe;
    b->ignore_merges = v->pre.ignore_merges;
    b->newline_words = s->bpe_raw;
    for (int c = 0; c < 256; c++) {
        int k = utf8_encode(utf8_byte_to_cp((uint8_t)c), b->byte_enc[c]);
        b->byte_enc_len[c] = (uint8_t)k;
        b->byte_sym[c] = strtab_find(&v->syms, b->byte_enc[c], (size_t)k);
        if (s->bpe_raw) {
            char hx[7];
            snprintf(hx, sizeof(hx), "<0x%02X>", c);
            b->fallback[c] = find_token(v, hx);
        } else {
            char one = (char)c;
            int32_t t = strtab_find(&v->syms, &one, 1);
            b->fallback[c] = t < v->n_vocab ? t : -1;
        }
    }
    return ANVIL_OK;
}

static anvil_status scores_copy(struct tok_vocab *v, const struct tok_spec *s) {
    v->score = core_malloc(sizeof(float) * (size_t)v->n_vocab);
    if (!v->score) return ANVIL_ERR_NOMEM;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        float f = s->scores ? s->scores[i] : 0.0f;
        /* a NaN would make the heap order (SPM) or the path comparison
         * (UGM) meaningless; rank it lowest */
        v->score[i] = f == f ? f : -INFINITY;
    }
    return ANVIL_OK;
}

/* WPM: the longest token text bounds the match; llama.cpp's normalizer
 * defaults (lowercase, strip accents as lowercase says). */
static void wpm_setup(struct tok_vocab *v, const struct tok_spec *s) {
    struct tok_wpm *p = &v->wpm;
    p->syms = &v->syms;
    p->n_vocab = v->n_vocab;
    p->unk = v->unk;
    p->max_len = 1;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        size_t n;
        tok_text(v, i, &n);
        if ((int32_t)n > p->max_len) p->max_len = (int32_t)n;
    }
    p->lowercase = s->lowercase >= 0;
    p->strip_accents = s->strip_accents ? s->strip_accents > 0 : p->lowercase;
}

/* SPM: scores, byte tokens. */
static anvil_status spm_setup(struct tok_vocab *v, const struct tok_spec *s) {
    anvil_status st = scores_copy(v, s);
    if (st != ANVIL_OK) return st;
    struct tok_spm *p = &v->spm;
    p->syms = &v->syms;
    p->n_vocab = v->n_vocab;
    p->score = v->score;
    p->attr = v->attr;
    p->unk = v->unk;
    for (int c = 0; c < 256; c++) {
        /* llama.cpp byte_to_token: "<0xAB>", else the one-byte token */
        char hx[7];
        snprintf(hx, sizeof(hx), "<0x%02X>", c);
        int32_t t = find_token(v, hx);
        if (t < 0) {
            char one[2] = {(char)c, 0};
            int32_t u = strtab_find(&v->syms, one, 1);
            t = u < v->n_vocab ? u : -1;
        }
        p->byte_tok[c] = t;
    }
    return ANVIL_OK;
}

anvil_status tok_build(const struct tok_spec *s, struct tok_vocab **out, char *err,
                       size_t err_cap) {
    anvil_status st = ANVIL_OK;
    if (s->kind != TOK_KIND_BPE && s->kind != TOK_KIND_SPM && s->kind != TOK_KIND_WPM &&
        s->kind != TOK_KIND_UGM) {
        errmsg_set(err, err_cap, "unsupported tokenizer kind");
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (s->n_tokens <= 0 || !s->tokens || (s->n_merges > 0 && !s->merges) || s->n_merges < 0) {
        errmsg_set(err, err_cap, "tokenizer has no tokens");
        return ANVIL_ERR_FORMAT;
    }
    struct tok_vocab *v = core_calloc(1, sizeof(*v));
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

    v->attr = core_malloc(sizeof(uint16_t) * (size_t)s->n_tokens);
    v->eog = core_calloc(((size_t)s->n_tokens + 7) / 8, 1);
    if (!v->attr || !v->eog) {
        st = ANVIL_ERR_NOMEM;
        goto fail;
    }
    for (int32_t i = 0; i < s->n_tokens; i++)
        v->attr[i] = s->types ? attr_of_type(s->types[i]) : TOK_ATTR_NORMAL;

    v->bos = check_id(s, s->bos);
    v->eos = check_id(s, s->eos);
    v->unk = check_id(s, s->unk);
    v->pad = check_id(s, s->pad);
    v->eot = check_id(s, s->eot);
    v->eom = check_id(s, s->eom);
    v->sep = check_id(s, s->sep);

    bool add_bos_default;
    if (s->kind == TOK_KIND_BPE) {
        /* the raw (gemma4) pre-tokenizer is implied by the model kind */
        struct gguf_str pre = s->bpe_raw ? (struct gguf_str){"gemma4", 6} : s->pre;
        TRY(pretok_init(&v->pre, pre, err, err_cap));
        TRY(bpe_setup(v, s, err, err_cap));
        v->escape_spaces = s->bpe_raw;
        add_bos_default = v->pre.add_bos;
    } else if (s->kind == TOK_KIND_SPM) {
        TRY(spm_setup(v, s));
        v->escape_spaces = true;
        v->space_prefix = s->space_prefix >= 0;
        add_bos_default = true;
    } else if (s->kind == TOK_KIND_WPM) {
        wpm_setup(v, s);
        v->escape_spaces = true; /* pieces: U+2581 reads back as a space */
        add_bos_default = true;
    } else {
        /* before fixups(): llama.cpp builds the tries from the file's types */
        TRY(scores_copy(v, s));
        v->ugm.space_prefix = s->space_prefix > 0;
        v->ugm.remove_extra_ws = s->remove_extra_ws;
        TRY(ugm_init(&v->ugm, &v->syms, v->n_vocab, v->score, v->attr, v->unk, s->charsmap,
                     s->charsmap_len, err, err_cap));
        v->escape_spaces = true;
        add_bos_default = false;
    }
    v->add_bos = s->add_bos >= 0 ? s->add_bos != 0 : add_bos_default;
    /* llama.cpp forces BOS on for Gemma 4 */
    if (s->kind == TOK_KIND_BPE && s->bpe_raw) v->add_bos = true;
    /* UGM adds EOS unless the file says no; WordPiece always adds [CLS]
     * and [SEP] with add_special, whatever the add_*_token keys say
     * (llama.cpp's tokenize for LLAMA_VOCAB_TYPE_WPM) */
    v->add_eos = s->kind == TOK_KIND_UGM ? s->add_eos != 0 : s->add_eos > 0;
    if (s->kind == TOK_KIND_WPM) {
        v->add_bos = true;
        v->add_eos = false;
        v->add_sep = v->sep >= 0;
    }
    if (v->add_bos && v->bos < 0) v->add_bos = false;
    if (v->add_eos && v->eos < 0) v->add_eos = false;

    fixups(v, s);
    TRY(special_init(&v->specials, &v->syms, v->attr, v->n_vocab));
    TRY(pieces_build(v));
    TRY(chat_detect(&v->chat, s->chat_template));
    if (v->chat.kind == TOK_CHAT_NONE && s->chat_template.len == 0)
        chat_detect_vocab(&v->chat, &v->syms, v->n_vocab);
    if (v->chat.kind == TOK_CHAT_NONE) {
        /* no template, or one anvil does not recognise: ChatML, and the
         * caller warns (anvil_chat_template_source) */
        chat_free(&v->chat);
        v->chat.kind = TOK_CHAT_CHATML;
        v->chat.source = ANVIL_CHAT_FALLBACK;
    }
    TRY(chat_jinja_init(&v->jinja, s->chat_template));
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
anvil_token tok_sep(const struct tok_vocab *v) { return v->sep; }
bool tok_add_sep(const struct tok_vocab *v) { return v->add_sep; }
bool tok_add_bos(const struct tok_vocab *v) { return v->add_bos; }
bool tok_add_eos(const struct tok_vocab *v) { return v->add_eos; }
anvil_token tok_fim(const struct tok_vocab *v, int which) {
    return which >= 0 && which < ANVIL_FIM_COUNT ? v->fim[which] : -1;
}

bool tok_is_eog(const struct tok_vocab *v, anvil_token t) {
    return t >= 0 && t < v->n_vocab && (v->eog[t / 8] >> (t % 8)) & 1;
}
