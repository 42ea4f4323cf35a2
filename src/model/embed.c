/*
 * embed.c - sequence embeddings: anvil_embed packs many token sequences
 * into decode batches, asks the forward pass for the hidden states after
 * the output norm (ANVIL_OUT_EMBD rows), pools each sequence's rows into
 * one vector (mean, first, last) and L2-normalizes it when asked. Also the
 * pooling getters.
 *
 * A batch is filled greedily in the caller's order while its rows fit
 * n_batch, its sequences n_seq_max and its output rows n_outputs (mean
 * pooling asks for every row, first/last for one per sequence). Every
 * sequence is decoded from position 0 in the ctx's sequences 0..k-1 and
 * truncated to empty right after, so the cache holds nothing between
 * batches. Pooling sums in double, in row order: the result does not
 * depend on how the sequences were packed.
 *
 * Rank pooling (rerankers) scores one row per sequence with the
 * classification head llama.cpp's converter writes (cls.weight and
 * cls.bias, then tanh; cls.output.weight and .bias; either stage may be
 * missing): the last row on the decoder archs anvil runs (their attention
 * is causal, so only the last row has seen the whole pair). The head is
 * copied to F32 at load (it is small) and applied here in double.
 *
 * Encoders (ARCH_ENCODER, model/encoder.c) run the same batches through
 * encoder_run instead of anvil_decode (no KV cache, bidirectional); rank
 * pooling takes their first row ([CLS]) and gives the rows after the first
 * separator (anvil_token_sep: [SEP] in a BERT vocabulary, else eos) token type 1.
 *
 * Pooling none gives every token's hidden state as its own row (out holds
 * the sequences' rows back to back, in order; anvil_embed_rows counts
 * them), L2-normalized per row when asked.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/ctx_int.h"
#include "model/encoder.h"

/* ---------------------------------------------------------------------- */
/* the rank head (bound at load by embed_head.c) */

/* The first class's score of hidden state h; tmp holds n_embd floats. */
static float rank_score(const struct anvil_model *m, const float *h, float *tmp) {
    int ne = m->hp.n_embd;
    const float *x = h;
    if (m->cls_w) {
        for (int i = 0; i < ne; i++) {
            double acc = m->cls_b ? m->cls_b[i] : 0.0;
            const float *w = m->cls_w + (size_t)i * ne;
            for (int j = 0; j < ne; j++) acc += (double)w[j] * h[j];
            tmp[i] = (float)tanh(acc);
        }
        x = tmp;
    }
    double s = x[0];
    if (m->cls_out_w) {
        s = m->cls_out_b ? m->cls_out_b[0] : 0.0;
        for (int j = 0; j < ne; j++) s += (double)m->cls_out_w[j] * x[j];
    }
    return (float)s;
}

/* ---------------------------------------------------------------------- */
/* pooling */

bool anvil_model_generates(const struct anvil_model *m) {
    return m && !m->enc && !m->hp.bidir;
}

int anvil_model_pooling(const struct anvil_model *m) {
    return m && m->has_pooling ? m->pooling : ANVIL_POOL_UNSPECIFIED;
}

const char *anvil_pooling_name(int pooling) {
    switch (pooling) {
    case ANVIL_POOL_NONE: return "none";
    case ANVIL_POOL_MEAN: return "mean";
    case ANVIL_POOL_CLS: return "cls";
    case ANVIL_POOL_LAST: return "last";
    case ANVIL_POOL_RANK: return "rank";
    default: return "unspecified";
    }
}

/* Output rows sequence i asks for (rank: one, the last, or an encoder's first). */
static int32_t outs_of(int pooling, int32_t len) {
    return pooling == ANVIL_POOL_MEAN || pooling == ANVIL_POOL_NONE ? len : 1;
}

/* Scale the n floats of y to unit L2 norm (an all-zero row stays zero, as
 * llama.cpp's floor keeps it). */
static void l2_normalize(float *y, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)y[i] * y[i];
    double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
    for (int i = 0; i < n; i++) y[i] = (float)(y[i] * inv);
}

int64_t anvil_embed_rows(const struct anvil_model *m, int pooling, const int32_t *lens,
                         int32_t n_seqs) {
    if (pooling == ANVIL_POOL_UNSPECIFIED) pooling = anvil_model_pooling(m);
    if (pooling != ANVIL_POOL_NONE || n_seqs <= 0) return n_seqs > 0 ? n_seqs : 0;
    if (!lens) return 0;
    int64_t n = 0;
    for (int32_t s = 0; s < n_seqs; s++) n += lens[s] > 0 ? lens[s] : 0;
    return n;
}

/* sentence-transformers' Dense layers after pooling (model.h: dense2,
 * dense3), in place on one n_embd row; t holds n_dense floats. */
static void dense_out(const struct anvil_model *m, float *y, float *t) {
    int ne = m->hp.n_embd, nd = m->n_dense;
    for (int j = 0; j < nd; j++) {
        const float *w = m->dense2 + (size_t)j * ne;
        double acc = m->dense2_b ? m->dense2_b[j] : 0.0;
        for (int i = 0; i < ne; i++) acc += (double)w[i] * y[i];
        t[j] = (float)acc;
    }
    for (int i = 0; i < ne; i++) {
        const float *w = m->dense3 + (size_t)i * nd;
        double acc = 0.0;
        for (int j = 0; j < nd; j++) acc += (double)w[j] * t[j];
        y[i] = (float)acc;
    }
}

/* Decode sequences [s0, s1) as one batch (rows, positions and flags built
 * in the caller's scratch), pool them into out. */
static anvil_status embed_batch(struct anvil_ctx *c, const anvil_token *const *seqs,
                                const int32_t *lens, int32_t s0, int32_t s1, int pooling,
                                bool normalize, float *out, int64_t row0, anvil_token *tok, int32_t *pos,
                                int32_t *sid, int8_t *flag, int8_t *type) {
    bool enc = c->m->enc != NULL;
    /* rank: an encoder scores its first row ([CLS], which attends to the
     * whole pair), a causal decoder its last */
    int rank_first = enc && pooling == ANVIL_POOL_RANK;
    anvil_token sep = anvil_token_sep(c->m);
    int32_t n = 0;
    for (int32_t s = s0; s < s1; s++) {
        int8_t ty = 0;
        for (int32_t j = 0; j < lens[s]; j++, n++) {
            tok[n] = seqs[s][j];
            pos[n] = j;
            sid[n] = s - s0;
            bool want = pooling == ANVIL_POOL_MEAN || pooling == ANVIL_POOL_NONE || (pooling == ANVIL_POOL_CLS && j == 0) ||
                        (rank_first && j == 0) ||
                        ((pooling == ANVIL_POOL_LAST || (pooling == ANVIL_POOL_RANK && !rank_first)) &&
                         j == lens[s] - 1);
            flag[n] = want ? ANVIL_OUT_EMBD : ANVIL_OUT_NONE;
            /* a pair (rank): the rows after the first separator are the
             * second segment, token type 1 (BERT's sentence B) */
            type[n] = ty;
            if (rank_first && ty == 0 && j > 0 && tok[n] == sep) ty = 1;
        }
    }
    struct anvil_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq_id = sid, .logits = flag};
    anvil_status st = enc ? encoder_run(c, &b, c->m->enc->n_types > 1 ? type : NULL)
                          : anvil_decode(c, &b);
    /* the cache keeps nothing between batches, failed or not */
    char msg[sizeof(c->errmsg)];
    memcpy(msg, c->errmsg, sizeof(msg));
    for (int32_t s = s0; s < s1; s++) (void)anvil_seq_truncate(c, s - s0, 0);
    memcpy(c->errmsg, msg, sizeof(msg));
    if (st != ANVIL_OK) return st;
    int ne = c->m->hp.n_embd;
    int32_t o = 0;
    float *dt = NULL; /* the Dense layers' middle row */
    if (c->m->dense2 && pooling != ANVIL_POOL_RANK &&
        !(dt = core_malloc((size_t)c->m->n_dense * sizeof(float)))) {
        snprintf(c->errmsg, sizeof(c->errmsg), "embed: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    if (pooling == ANVIL_POOL_RANK) {
        for (int32_t s = s0; s < s1; s++) out[s] = rank_score(c->m, c->embd + (size_t)(s - s0) * ne, c->nrm);
        return ANVIL_OK;
    }
    if (pooling == ANVIL_POOL_NONE) { /* every row of the batch, in order */
        float *y = out + (size_t)row0 * ne;
        memcpy(y, c->embd, (size_t)n * ne * sizeof(float));
        for (int32_t r = 0; dt && r < n; r++) dense_out(c->m, y + (size_t)r * ne, dt);
        if (normalize)
            for (int32_t r = 0; r < n; r++) l2_normalize(y + (size_t)r * ne, ne);
        core_free(dt);
        return ANVIL_OK;
    }
    for (int32_t s = s0; s < s1; s++) {
        float *y = out + (size_t)s * ne;
        int32_t k = outs_of(pooling, lens[s]);
        for (int i = 0; i < ne; i++) {
            double acc = 0.0;
            for (int32_t r = 0; r < k; r++) acc += c->embd[(size_t)(o + r) * ne + i];
            y[i] = (float)(acc / k);
        }
        o += k;
        if (dt) dense_out(c->m, y, dt);
        if (normalize) l2_normalize(y, ne);
    }
    core_free(dt);
    return ANVIL_OK;
}

anvil_status anvil_embed(struct anvil_ctx *c, const anvil_token *const *seqs,
                         const int32_t *lens, int32_t n_seqs, int pooling, bool normalize,
                         float *out) {
    if (!c) return ANVIL_ERR_INVALID;
    if (pooling == ANVIL_POOL_UNSPECIFIED) pooling = anvil_model_pooling(c->m);
    if (pooling == ANVIL_POOL_RANK && !c->m->cls_w && !c->m->cls_out_w) {
        snprintf(c->errmsg, sizeof(c->errmsg), "embed: the model has no rank head");
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (pooling != ANVIL_POOL_MEAN && pooling != ANVIL_POOL_CLS && pooling != ANVIL_POOL_LAST &&
        pooling != ANVIL_POOL_RANK && pooling != ANVIL_POOL_NONE) {
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "embed: the model does not say how to pool (pooling %s; anvil pools none, "
                 "mean, cls, last or rank)",
                 anvil_pooling_name(pooling));
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (n_seqs < 0 || (n_seqs > 0 && (!seqs || !lens || !out))) {
        snprintf(c->errmsg, sizeof(c->errmsg), "embed: bad arguments");
        return ANVIL_ERR_INVALID;
    }
    int32_t cap = c->n_batch < c->n_ctx ? c->n_batch : c->n_ctx;
    if (c->m->enc && c->m->enc->n_pos < cap) cap = c->m->enc->n_pos; /* learned positions */
    for (int32_t s = 0; s < n_seqs; s++) {
        if (lens[s] < 1 || lens[s] > cap || !seqs[s]) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "embed: sequence %d has %d tokens (1 to %d fit)", s, lens[s], cap);
            return ANVIL_ERR_INVALID;
        }
        if (outs_of(pooling, lens[s]) > c->n_outputs) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "embed: sequence %d needs %d output rows, the context has %d", s,
                     outs_of(pooling, lens[s]), c->n_outputs);
            return ANVIL_ERR_INVALID;
        }
        for (int32_t j = 0; j < lens[s]; j++)
            if (seqs[s][j] < 0 || seqs[s][j] >= c->m->hp.n_vocab) {
                snprintf(c->errmsg, sizeof(c->errmsg),
                         "embed: sequence %d token %d is %d, out of range (0..%d)", s, j,
                         seqs[s][j], c->m->hp.n_vocab - 1);
                return ANVIL_ERR_INVALID;
            }
    }
    for (int32_t s = 0; s < c->n_seq_max; s++)
        if (anvil_seq_len(c, s) != 0) {
            snprintf(c->errmsg, sizeof(c->errmsg), "embed: the context's sequence %d is in use", s);
            return ANVIL_ERR_INVALID;
        }
    size_t nb = (size_t)c->n_batch;
    anvil_token *tok = core_malloc(nb * sizeof(*tok));
    int32_t *pos = core_malloc(nb * sizeof(*pos));
    int32_t *sid = core_malloc(nb * sizeof(*sid));
    int8_t *flag = core_malloc(nb * sizeof(*flag));
    int8_t *type = core_malloc(nb * sizeof(*type));
    anvil_status st = ANVIL_OK;
    if (!tok || !pos || !sid || !flag || !type) {
        snprintf(c->errmsg, sizeof(c->errmsg), "embed: out of memory");
        st = ANVIL_ERR_NOMEM;
    }
    int64_t row0 = 0; /* pooling none: the out row of sequence s0's first token */
    for (int32_t s0 = 0; st == ANVIL_OK && s0 < n_seqs;) {
        int32_t s1 = s0, rows = 0, outs = 0;
        while (s1 < n_seqs && s1 - s0 < c->n_seq_max && rows + lens[s1] <= c->n_batch &&
               outs + outs_of(pooling, lens[s1]) <= c->n_outputs) {
            rows += lens[s1];
            outs += outs_of(pooling, lens[s1]);
            s1++;
        }
        st = embed_batch(c, seqs, lens, s0, s1, pooling, normalize, out, row0, tok, pos, sid, flag,
                         type);
        row0 += rows;
        s0 = s1;
    }
    core_free(tok);
    core_free(pos);
    core_free(sid);
    core_free(flag);
    core_free(type);
    return st;
}

/* One text's tokens into out[k..cap) when they fit; the count either way. */
static int32_t put_text(const struct anvil_model *m, const char *s, size_t n, anvil_token *out,
                        int32_t k, int32_t cap) {
    int32_t room = cap > k ? cap - k : 0;
    int32_t r = anvil_tokenize(m, s, n, room ? out + k : NULL, room, false, false);
    if (r == INT32_MIN) return INT32_MIN;
    return r < 0 ? -r : r;
}

int32_t anvil_rank_pair(const struct anvil_model *m, const char *query, size_t query_len,
                        const char *doc, size_t doc_len, anvil_token *out, int32_t cap) {
    anvil_token probe[4];
    bool add_bos = anvil_tokenize(m, "", 0, probe, 4, true, false) > 0;
    anvil_token bos = anvil_token_bos(m), eos = anvil_token_sep(m); /* between and after */
    int64_t k = 0;
    if (add_bos && bos >= 0) {
        if (k < cap) out[k] = bos;
        k++;
    }
    int32_t nq = put_text(m, query, query_len, out, (int32_t)k, cap);
    if (nq == INT32_MIN) return INT32_MIN;
    k += nq;
    if (eos >= 0) {
        if (k < cap) out[k] = eos;
        k++;
    }
    /* a vocabulary that ends each text with EOS (RoBERTa, XLM-R) joins a
     * pair with EOS and the separator, as its tokenizer's post-processor
     * does: <s> q </s></s> d </s> (BERT: [CLS] q [SEP] d [SEP]) */
    if (tok_add_eos(m->vocab) && tok_sep(m->vocab) >= 0) {
        if (k < cap) out[k] = tok_sep(m->vocab);
        k++;
    }
    int32_t nd = put_text(m, doc, doc_len, out, k > INT32_MAX ? INT32_MAX : (int32_t)k, cap);
    if (nd == INT32_MIN) return INT32_MIN;
    k += nd;
    if (eos >= 0) {
        if (k < cap) out[k] = eos;
        k++;
    }
    if (k > INT32_MAX) return INT32_MIN;
    return k <= cap ? (int32_t)k : -(int32_t)k;
}
