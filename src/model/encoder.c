/*
 * encoder.c - the bidirectional encoder forward pass (BERT's block, as
 * the arch descriptors with ARCH_ENCODER bind it) and its weights' binding.
 * nomic-bert (arch/nomic_bert.c) changes three steps: no position_embd,
 * q and k rotated by RoPE after the bias (ARCH_ENC_ROPE); the FFN is
 * Wdown (silu(Wgate x) * (Wup x)) (act MODEL_ACT_SILU).
 *
 * Per batch (one pool_run, phases split by pool_barrier like forward.c):
 *
 *   x   = LN(tok_embd[t] + position_embd[pos] + token_types[type])  (token_embd_norm)
 *   per layer:
 *     qkv  = Wqkv x + b                      (one matmul over stacked Q, K, V)
 *     attn = softmax(q k^T / sqrt(head_dim)) v over every row of the row's
 *            own sequence: no causal mask, no RoPE (positions were added
 *            to the input)
 *     x    = LN(x + Wo attn + bo)            (attn_output_norm: post-norm)
 *     h    = gelu_erf(Wup x + bup)
 *     x    = LN(x + Wdown h + bdown)         (layer_output_norm)
 *
 * and the rows that asked for ANVIL_OUT_EMBD copy x into c->embd. The KV
 * cache is never written: a batch holds whole sequences (embed.c builds
 * it so), keys and values are read from the batch's own qkv rows.
 *
 * Matmuls use the shared wmat path (F32/F16/BF16/Q8_0/K-quants, packed
 * when the kernels pack), so many sequences run as one batch; the
 * LayerNorm and GELU are kn_ops entries (kernels/cpu/{ref,avx2,avx512}/enc.c).
 * Attention here is a plain scalar loop per (row, head): encoder inputs
 * are short (<= 512 positions on BERT) and it is a small share of the work.
 *
 * Reference: Devlin et al. 2018 (BERT); llama.cpp src/models/bert.cpp for
 * the GGUF tensor names and shapes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "model/ctx_int.h"
#include "model/encoder.h"
#include "model/loader.h"

/* ---------------------------------------------------------------------- */
/* binding */

/* name as an owned float vector of n (F32/F16/BF16); a missing optional
 * bias becomes zeros. */
static anvil_status vec(struct model_loader *L, const char *name, int n, bool required,
                        float **out) {
    anvil_status st = loader_floats(L, name, n, 0, required, out);
    if (st != ANVIL_OK || *out) return st;
    if (!(*out = core_calloc((size_t)n, sizeof(float)))) return ANVIL_ERR_NOMEM;
    return ANVIL_OK;
}

static bool wmat1(struct model_loader *L, struct wmat *w, const char *name, int n_in, int rows) {
    const char *names[1] = {name};
    int r[1] = {rows};
    return loader_bind_wmat(L, w, n_in, 1, names, r);
}

static anvil_status bind_layer(struct model_loader *L, struct anvil_model *m, int l) {
    const struct model_hparams *hp = &m->hp;
    struct model_layer *ly = &m->layers[l];
    struct enc_layer *el = &m->enc->layers[l];
    int ne = hp->n_embd, q_dim = hp->n_head * hp->head_dim;
    char n0[96], n1[96], n2[96];
    anvil_status st = ANVIL_OK;
    /* Q, K, V: one fused attn_qkv (nomic-bert) or three tensors (BERT);
     * the fused bias, else one bias per part, else zeros (llama.cpp's
     * create_tensor_qkv accepts the same combinations) */
    snprintf(n0, sizeof(n0), "blk.%d.attn_qkv.weight", l);
    bool fused = gguf_find_tensor(L->f, n0) != NULL;
    snprintf(n1, sizeof(n1), "blk.%d.attn_q.weight", l);
    if (!fused && (m->arch->flags & ARCH_FUSED_QKV) && !gguf_find_tensor(L->f, n1)) {
        loader_error(L, "model: missing tensor %s (or attn_q/k/v)", n0);
        return ANVIL_ERR_FORMAT;
    }
    if (fused) {
        if (!wmat1(L, &ly->wqkv, n0, ne, 3 * q_dim)) return ANVIL_ERR_FORMAT;
    } else {
        snprintf(n0, sizeof(n0), "blk.%d.attn_q.weight", l);
        snprintf(n1, sizeof(n1), "blk.%d.attn_k.weight", l);
        snprintf(n2, sizeof(n2), "blk.%d.attn_v.weight", l);
        const char *qkv[3] = {n0, n1, n2};
        int rows[3] = {q_dim, q_dim, q_dim};
        if (!loader_bind_wmat(L, &ly->wqkv, ne, 3, qkv, rows)) return ANVIL_ERR_FORMAT;
    }
    float *fb = NULL;
    snprintf(n0, sizeof(n0), "blk.%d.attn_qkv.bias", l);
    if (fused) TRY(loader_floats(L, n0, 3 * q_dim, 0, false, &fb));
    if (fb) {
        ly->qkv_bias = fb;
    } else {
        if (!(ly->qkv_bias = core_calloc((size_t)3 * q_dim, sizeof(float)))) return ANVIL_ERR_NOMEM;
        static const char *const which[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++) {
            float *b = NULL;
            snprintf(n0, sizeof(n0), "blk.%d.attn_%s.bias", l, which[i]);
            TRY(loader_floats(L, n0, q_dim, 0, false, &b));
            if (b) memcpy(ly->qkv_bias + (size_t)i * q_dim, b, (size_t)q_dim * sizeof(float));
            core_free(b);
        }
    }
    snprintf(n0, sizeof(n0), "blk.%d.attn_output.weight", l);
    if (!wmat1(L, &ly->wo, n0, q_dim, ne)) return ANVIL_ERR_FORMAT;
    snprintf(n0, sizeof(n0), "blk.%d.attn_output.bias", l);
    TRY(vec(L, n0, ne, false, &ly->wo_bias));
    snprintf(n0, sizeof(n0), "blk.%d.attn_output_norm.weight", l);
    TRY(vec(L, n0, ne, true, &el->ln_attn_w));
    snprintf(n0, sizeof(n0), "blk.%d.attn_output_norm.bias", l);
    TRY(vec(L, n0, ne, true, &el->ln_attn_b));
    snprintf(n0, sizeof(n0), "blk.%d.ffn_up.weight", l);
    if (m->enc->swiglu) {
        /* gate rows then up rows, as forward.c's wgu: gu = [g | u] per row */
        snprintf(n1, sizeof(n1), "blk.%d.ffn_gate.weight", l);
        const char *gu[2] = {n1, n0};
        int rows[2] = {hp->n_ff, hp->n_ff};
        if (!loader_bind_wmat(L, &ly->wgu, ne, 2, gu, rows)) return ANVIL_ERR_FORMAT;
    } else if (!wmat1(L, &ly->wgu, n0, ne, hp->n_ff)) {
        return ANVIL_ERR_FORMAT;
    }
    snprintf(n0, sizeof(n0), "blk.%d.ffn_up.bias", l);
    TRY(vec(L, n0, hp->n_ff, false, &el->up_b));
    snprintf(n0, sizeof(n0), "blk.%d.ffn_down.weight", l);
    if (!wmat1(L, &ly->wdown, n0, hp->n_ff, ne)) return ANVIL_ERR_FORMAT;
    snprintf(n0, sizeof(n0), "blk.%d.ffn_down.bias", l);
    TRY(vec(L, n0, ne, false, &el->down_b));
    snprintf(n0, sizeof(n0), "blk.%d.layer_output_norm.weight", l);
    TRY(vec(L, n0, ne, true, &el->ln_out_w));
    snprintf(n0, sizeof(n0), "blk.%d.layer_output_norm.bias", l);
    TRY(vec(L, n0, ne, true, &el->ln_out_b));
fail:
    return st;
}

/* position_embd.weight: (n_pos, n_embd) learned positions (BERT). */
static anvil_status bind_positions(struct model_loader *L, struct enc_model *e, int ne) {
    const struct gguf_tensor *tp = gguf_find_tensor(L->f, "position_embd.weight");
    if (!tp) {
        loader_error(L, "model: missing tensor position_embd.weight");
        return ANVIL_ERR_FORMAT;
    }
    if (tp->n_dims != 2 || tp->ne[1] < 1 || tp->ne[1] > (1u << 20)) {
        loader_error(L, "model: tensor position_embd.weight has the wrong shape (want [%d, n_pos])", ne);
        return ANVIL_ERR_FORMAT;
    }
    if (!loader_bind(L, "position_embd.weight", ne, (int64_t)tp->ne[1], true)) return ANVIL_ERR_FORMAT;
    e->pos_embd = tp->data;
    e->pos_type = tp->type;
    e->pos_row_bytes = gguf_row_size(tp->type, (uint64_t)ne);
    e->n_pos = (int)tp->ne[1];
    return ANVIL_OK;
}

anvil_status encoder_bind(struct model_loader *L, struct anvil_model *m) {
    const struct model_hparams *hp = &m->hp;
    int ne = hp->n_embd;
    anvil_status st = ANVIL_OK;
    if (hp->n_head_kv != hp->n_head) {
        loader_error(L, "model: an encoder with grouped K/V heads (%d of %d) is not supported",
                     hp->n_head_kv, hp->n_head);
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (!(m->enc = core_calloc(1, sizeof(*m->enc)))) return ANVIL_ERR_NOMEM;
    struct enc_model *e = m->enc;
    e->rope = (m->arch->flags & ARCH_ENC_ROPE) != 0;
    e->swiglu = hp->act == MODEL_ACT_SILU;
    const struct gguf_tensor *te = loader_bind(L, "token_embd.weight", ne, hp->n_vocab, true);
    if (!te) return ANVIL_ERR_FORMAT;
    m->tok_embd = te->data;
    m->tok_embd_type = te->type;
    m->tok_embd_row_bytes = gguf_row_size(te->type, (uint64_t)ne);
    if (e->rope) {
        if (hp->yarn_factor > 0.0f) {
            loader_error(L, "model: an encoder with YaRN RoPE scaling is not supported");
            return ANVIL_ERR_UNSUPPORTED;
        }
        /* inv_freq_i = rope_scale * base^(-2i/n_rot), as model_bind.c's
         * rope_freqs without YaRN and per-dim factors */
        int half = hp->n_rot / 2;
        if (!(m->inv_freq = core_malloc((size_t)half * sizeof(float)))) return ANVIL_ERR_NOMEM;
        for (int i = 0; i < half; i++)
            m->inv_freq[i] = (float)((double)hp->rope_scale *
                                     pow((double)hp->rope_base, -2.0 * i / hp->n_rot));
        e->n_pos = hp->n_ctx_train;
    } else {
        TRY(bind_positions(L, e, ne));
    }
    const struct gguf_tensor *tt = gguf_find_tensor(L->f, "token_types.weight");
    if (tt) {
        int64_t nt = tt->n_dims == 2 ? (int64_t)tt->ne[1] : tt->n_dims == 1 ? 1 : 0;
        if (nt < 1 || nt > 16) {
            loader_error(L, "model: tensor token_types.weight has the wrong shape (want [%d, 1..16])", ne);
            return ANVIL_ERR_FORMAT;
        }
        TRY(loader_floats(L, "token_types.weight", ne, tt->n_dims == 2 ? nt : 0, true, &e->type_embd));
        e->n_types = (int)nt;
    }
    TRY(vec(L, "token_embd_norm.weight", ne, true, &e->norm_w));
    TRY(vec(L, "token_embd_norm.bias", ne, true, &e->norm_b));
    m->layers = core_calloc((size_t)hp->n_layer, sizeof(*m->layers));
    e->layers = core_calloc((size_t)hp->n_layer, sizeof(*e->layers));
    if (!m->layers || !e->layers) return ANVIL_ERR_NOMEM;
    for (int l = 0; l < hp->n_layer; l++) TRY(bind_layer(L, m, l));
    m->wtype = m->layers[0].wgu.part[0].type;
fail:
    return st;
}

void encoder_free(struct anvil_model *m) {
    struct enc_model *e = m->enc;
    if (!e) return;
    for (int l = 0; e->layers && l < m->hp.n_layer; l++) {
        struct enc_layer *el = &e->layers[l];
        core_free(el->ln_attn_w);
        core_free(el->ln_attn_b);
        core_free(el->up_b);
        core_free(el->down_b);
        core_free(el->ln_out_w);
        core_free(el->ln_out_b);
    }
    core_free(e->layers);
    core_free(e->type_embd);
    core_free(e->norm_w);
    core_free(e->norm_b);
    core_free(e);
    m->enc = NULL;
}

/* ---------------------------------------------------------------------- */
/* forward */

struct enc_job {
    struct anvil_ctx *c;
    const struct anvil_batch *b;
    const int8_t *types;
    int32_t *run0, *runn; /* (n_tokens) first row and length of each row's sequence */
    int32_t *out;         /* (n_tokens) output row in c->embd, or -1 */
    int32_t *seq0;        /* (n_seqs) first row of each sequence */
    int n_seqs, max_run;  /* sequences in the batch, the longest one's rows */
    float *scores;        /* (n_threads, max_run^2 + head_dim * max_run) attention scratch */
};

static void matmul_rows(const struct anvil_ctx *c, const struct wmat *w, float *y, size_t ldy,
                        int n_tokens, int ith, int nth) {
    int r0, r1;
    pool_split(w->n_out, ith, nth, 16, &r0, &r1);
    wmat_matmul(c->m->ops, w, y, ldy, c->act, c->act_stride, n_tokens, r0, r1);
}

/* softmax(Q K^T * scale) V of the (sequence, head) pairs [p0, p1), each as
 * two matmuls of the F32 kernels (kernels/ops.h: the same bits whatever the
 * shape, so a sequence's rows do not depend on its batch): S = Q K^T with
 * K's rows as the weights, read in place in qkv; then, after a softmax per
 * row, O = P V with V transposed into vt as the weights. s holds max_run^2
 * floats, vt head_dim * max_run. */
static void attention(const struct enc_job *j, int p0, int p1, float *s, float *vt) {
    const struct anvil_ctx *c = j->c;
    const struct model_hparams *hp = &c->m->hp;
    kn_matmul_fn mm = c->m->ops->matmul[ANVIL_TYPE_F32];
    int hd = hp->head_dim, qd = c->q_dim;
    size_t ld = (size_t)c->qkv_dim;
    for (int p = p0; p < p1; p++) {
        int q = p / hp->n_head, h = p % hp->n_head;
        int r0 = j->seq0[q], n = j->runn[r0];
        const float *qp = c->qkv + (size_t)r0 * ld + (size_t)h * hd;
        const float *kp = qp + qd, *vp = qp + 2 * (size_t)qd;
        mm(s, (size_t)n, kp, ld * sizeof(float), qp, ld * sizeof(float), hd, n, 0, n);
        for (int t = 0; t < n; t++) {
            float *st = s + (size_t)t * n, mx = -INFINITY, sum = 0.0f;
            for (int r = 0; r < n; r++) {
                st[r] *= hp->attn_scale;
                if (st[r] > mx) mx = st[r];
            }
            for (int r = 0; r < n; r++) {
                st[r] = expf(st[r] - mx);
                sum += st[r];
            }
            float inv = 1.0f / sum;
            for (int r = 0; r < n; r++) st[r] *= inv;
        }
        for (int r = 0; r < n; r++)
            for (int i = 0; i < hd; i++) vt[(size_t)i * n + r] = vp[(size_t)r * ld + i];
        mm(c->attn + (size_t)r0 * qd + (size_t)h * hd, (size_t)qd, vt, (size_t)n * sizeof(float), s,
           (size_t)n * sizeof(float), n, n, 0, hd);
    }
}

static void encoder_worker(void *arg, int ith, int nth) {
    const struct enc_job *j = arg;
    struct anvil_ctx *c = j->c;
    const struct anvil_model *m = c->m;
    const struct enc_model *e = m->enc;
    const struct model_hparams *hp = &m->hp;
    const struct kn_ops *ops = m->ops;
    const struct anvil_batch *b = j->b;
    int n = b->n_tokens, ne = hp->n_embd, nff = hp->n_ff;
    float eps = hp->norm_eps;
    ANVIL_ASSERT(nth <= c->n_threads); /* scores and nrm have n_threads rows */
    int t0, t1;
    pool_split(n, ith, nth, 1, &t0, &t1);
    float *tmp = c->nrm + (size_t)ith * c->max_dim;

    for (int t = t0; t < t1; t++) {
        float *x = c->x + (size_t)t * ne;
        kn_dequantize_row(m->tok_embd_type, m->tok_embd + (size_t)b->token[t] * m->tok_embd_row_bytes,
                          x, ne);
        if (!e->rope) {
            kn_dequantize_row(e->pos_type, e->pos_embd + (size_t)b->pos[t] * e->pos_row_bytes, tmp,
                              ne);
            for (int i = 0; i < ne; i++) x[i] += tmp[i];
        }
        if (e->type_embd) {
            const float *ty = e->type_embd + (size_t)(j->types ? j->types[t] : 0) * ne;
            for (int i = 0; i < ne; i++) x[i] += ty[i];
        }
        ops->layernorm(x, x, e->norm_w, e->norm_b, ne, eps);
        ops->act[m->layers[0].wqkv.act](c->act + (size_t)t * c->act_stride, x, ne);
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *ly = &m->layers[l];
        const struct enc_layer *el = &e->layers[l];
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wqkv, c->qkv, (size_t)c->qkv_dim, n, ith, nth);
        pool_barrier(c->pool);
        for (int t = t0; t < t1; t++) {
            float *r = c->qkv + (size_t)t * c->qkv_dim;
            for (int i = 0; i < c->qkv_dim; i++) r[i] += ly->qkv_bias[i];
            if (e->rope) {
                int neox = hp->rope == MODEL_ROPE_NEOX;
                ops->rope_ext(r, hp->n_head, hp->head_dim, hp->n_rot, b->pos[t], m->inv_freq, neox);
                ops->rope_ext(r + c->q_dim, hp->n_head, hp->head_dim, hp->n_rot, b->pos[t],
                              m->inv_freq, neox);
            }
        }
        pool_barrier(c->pool);
        int p0, p1;
        size_t scr = (size_t)j->max_run * j->max_run + (size_t)hp->head_dim * j->max_run;
        pool_split(j->n_seqs * hp->n_head, ith, nth, 1, &p0, &p1);
        float *s = j->scores + (size_t)ith * scr;
        attention(j, p0, p1, s, s + (size_t)j->max_run * j->max_run);
        pool_barrier(c->pool);
        for (int t = t0; t < t1; t++)
            ops->act[ly->wo.act](c->act + (size_t)t * c->act_stride, c->attn + (size_t)t * c->q_dim,
                                 c->q_dim);
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wo, c->tmp, (size_t)ne, n, ith, nth);
        pool_barrier(c->pool);
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * ne, *d = c->tmp + (size_t)t * ne;
            for (int i = 0; i < ne; i++) x[i] += d[i] + ly->wo_bias[i];
            ops->layernorm(x, x, el->ln_attn_w, el->ln_attn_b, ne, eps);
            ops->act[ly->wgu.act](c->act + (size_t)t * c->act_stride, x, ne);
        }
        pool_barrier(c->pool);
        size_t ldg = (size_t)nff * (e->swiglu ? 2 : 1); /* gu row: [up] or [gate | up] */
        matmul_rows(c, &ly->wgu, c->gu, ldg, n, ith, nth);
        pool_barrier(c->pool);
        for (int t = t0; t < t1; t++) {
            float *g = c->gu + (size_t)t * ldg;
            if (e->swiglu) {
                float *u = g + nff;
                for (int i = 0; i < nff; i++) u[i] += el->up_b[i];
                ops->silu_mul(g, g, u, nff);
            } else {
                for (int i = 0; i < nff; i++) g[i] += el->up_b[i];
                ops->gelu_erf(g, g, nff);
            }
            ops->act[ly->wdown.act](c->act + (size_t)t * c->act_stride, g, nff);
        }
        pool_barrier(c->pool);
        matmul_rows(c, &ly->wdown, c->tmp, (size_t)ne, n, ith, nth);
        pool_barrier(c->pool);
        const struct model_layer *next = l + 1 < hp->n_layer ? &m->layers[l + 1] : NULL;
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * ne, *d = c->tmp + (size_t)t * ne;
            for (int i = 0; i < ne; i++) x[i] += d[i] + el->down_b[i];
            ops->layernorm(x, x, el->ln_out_w, el->ln_out_b, ne, eps);
            if (next) ops->act[next->wqkv.act](c->act + (size_t)t * c->act_stride, x, ne);
            else if (j->out[t] >= 0)
                memcpy(c->embd + (size_t)j->out[t] * ne, x, (size_t)ne * sizeof(float));
        }
    }
}

anvil_status encoder_run(struct anvil_ctx *c, const struct anvil_batch *b, const int8_t *types) {
    const struct anvil_model *m = c->m;
    const struct enc_model *e = m->enc;
    int n = b->n_tokens;
    if (n < 1 || n > c->n_batch) {
        snprintf(c->errmsg, sizeof(c->errmsg), "encoder: %d rows (1 to %d fit)", n, c->n_batch);
        return ANVIL_ERR_INVALID;
    }
    struct enc_job j = {.c = c, .b = b, .types = types};
    j.run0 = core_malloc((size_t)n * sizeof(int32_t));
    j.runn = core_malloc((size_t)n * sizeof(int32_t));
    j.out = core_malloc((size_t)n * sizeof(int32_t));
    j.seq0 = core_malloc((size_t)n * sizeof(int32_t));
    anvil_status st = ANVIL_OK;
    if (!j.run0 || !j.runn || !j.out || !j.seq0) {
        snprintf(c->errmsg, sizeof(c->errmsg), "encoder: out of memory");
        st = ANVIL_ERR_NOMEM;
        goto done;
    }
    /* a sequence is a run of consecutive rows with one seq_id, from position 0 */
    int no = 0;
    for (int t = 0, r0 = 0; t < n; t++) {
        if (b->token[t] < 0 || b->token[t] >= m->hp.n_vocab || b->pos[t] < 0 ||
            b->pos[t] >= e->n_pos || (types && (types[t] < 0 || types[t] >= (e->n_types ? e->n_types : 1)))) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "encoder: row %d (token %d, position %d, type %d) is out of range (vocab %d, "
                     "%d positions, %d types)", t, b->token[t], b->pos[t], types ? types[t] : 0,
                     m->hp.n_vocab, e->n_pos, e->n_types ? e->n_types : 1);
            st = ANVIL_ERR_INVALID;
            goto done;
        }
        if (t > 0 && b->seq_id[t] != b->seq_id[t - 1]) r0 = t;
        if (b->pos[t] != t - r0) {
            snprintf(c->errmsg, sizeof(c->errmsg),
                     "encoder: row %d: every sequence must be whole and in order (position %d, "
                     "want %d)", t, b->pos[t], t - r0);
            st = ANVIL_ERR_INVALID;
            goto done;
        }
        j.run0[t] = r0;
        bool want = b->logits && b->logits[t] == ANVIL_OUT_EMBD;
        if (b->logits && b->logits[t] != ANVIL_OUT_EMBD && b->logits[t] != ANVIL_OUT_NONE) {
            snprintf(c->errmsg, sizeof(c->errmsg), "encoder: an encoder has no logits (row %d)", t);
            st = ANVIL_ERR_UNSUPPORTED;
            goto done;
        }
        if (want && no >= c->n_outputs) {
            snprintf(c->errmsg, sizeof(c->errmsg), "encoder: more than %d output rows", c->n_outputs);
            st = ANVIL_ERR_INVALID;
            goto done;
        }
        j.out[t] = want ? no++ : -1;
    }
    for (int t = n - 1; t >= 0; t--)
        j.runn[t] = t + 1 < n && j.run0[t + 1] == j.run0[t] ? j.runn[t + 1] : t - j.run0[t] + 1;
    for (int t = 0; t < n; t++) {
        if (j.run0[t] != t) continue;
        j.seq0[j.n_seqs++] = t;
        if (j.runn[t] > j.max_run) j.max_run = j.runn[t];
    }
    j.scores = core_malloc((size_t)c->n_threads *
                           ((size_t)j.max_run * j.max_run + (size_t)m->hp.head_dim * j.max_run) *
                           sizeof(float));
    if (!j.scores) {
        snprintf(c->errmsg, sizeof(c->errmsg), "encoder: out of memory");
        st = ANVIL_ERR_NOMEM;
        goto done;
    }
    pool_run(c->pool, encoder_worker, &j);
done:
    core_free(j.run0);
    core_free(j.runn);
    core_free(j.out);
    core_free(j.scores);
    core_free(j.seq0);
    return st;
}
