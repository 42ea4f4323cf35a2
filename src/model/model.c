/*
 * model.c - load a Llama-family GGUF: read hyperparameters from metadata,
 * bind every weight by name with its shape checked, build the tokenizer,
 * pick the kernels. Also the public model, tokenizer and chat wrappers.
 *
 * Weights stay in gguf's read-only mapping, and the multi-part matrices
 * (QKV, gate/up) only point into it, unless the kernel table packs their
 * type: then each matrix is copied once into the packed layout (parts
 * stacked) and the mapping's pages under it are released (pack_wmat).
 * Reference: llama.cpp's LLM_ARCH_LLAMA tensor names and hparams keys.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"

/* ---------------------------------------------------------------------- */
/* public helpers that need no model */

struct anvil_model_params anvil_model_default_params(void) {
    struct anvil_model_params p = {.kernels = NULL};
    return p;
}

/* ---------------------------------------------------------------------- */
/* multi-part matmul */

void wmat_matmul(const struct kn_ops *ops, const struct wmat *w, float *y, size_t ldy,
                 const void *x, size_t x_stride, int n_tokens, int r0, int r1) {
    if (w->packed) {
        ops->matmul_packed[w->packed_type](y, ldy, w->packed, 0, x, x_stride, w->n_in, n_tokens,
                                           r0, r1);
        return;
    }
    int off = 0;
    for (int p = 0; p < w->n_parts; p++) {
        int rows = w->part[p].rows;
        int a = r0 > off ? r0 : off, b = r1 < off + rows ? r1 : off + rows;
        if (a < b)
            ops->matmul[w->part[p].type](y + off, ldy, w->part[p].data, w->part[p].row_bytes, x,
                                         x_stride, w->n_in, n_tokens, a - off, b - off);
        off += rows;
    }
}

void wmat_matmul_tile(const struct kn_ops *ops, const struct wmat *w, float *y, size_t ldy,
                      const void *x, size_t x_stride, int n_tokens, int a, int b) {
    if (w->packed) { /* callers cut windows on tile boundaries */
        ANVIL_ASSERT(a % KN_PACK_ROWS == 0);
        ops->matmul_packed[w->packed_type](y, ldy, w->packed + (size_t)(a / KN_PACK_ROWS) * w->packed_tile,
                                           0, x, x_stride, w->n_in, n_tokens, 0, b - a);
        return;
    }
    int off = 0;
    for (int p = 0; p < w->n_parts; p++) {
        int rows = w->part[p].rows;
        int lo = a > off ? a : off, hi = b < off + rows ? b : off + rows;
        if (lo < hi)
            ops->matmul[w->part[p].type](y + (lo - a), ldy,
                                         w->part[p].data + (size_t)(lo - off) * w->part[p].row_bytes,
                                         w->part[p].row_bytes, x, x_stride, w->n_in, n_tokens, 0,
                                         hi - lo);
        off += rows;
    }
}

/* ---------------------------------------------------------------------- */
/* loading */

struct loader {
    struct gguf_file *f;
    const char *arch;
    char *err;
    size_t err_cap;
    uint64_t n_params;
};

static bool get_u32_arch(struct loader *L, const char *suffix, uint32_t *out, bool required) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", L->arch, suffix);
    if (gguf_get_u32(L->f, key, out)) return true;
    if (required) {
        if (gguf_find(L->f, key))
            errmsg_set(L->err, L->err_cap, "model: metadata %s has the wrong type or range", key);
        else
            errmsg_set(L->err, L->err_cap, "model: required metadata %s is missing", key);
    }
    return false;
}

static bool get_f32_arch(struct loader *L, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", L->arch, suffix);
    return gguf_get_f32(L->f, key, out);
}

/* Find a tensor and check its shape (ne0 = n_in, ne1 = n_out; n_out 0 for
 * a vector). */
static const struct gguf_tensor *bind(struct loader *L, const char *name, int64_t n_in,
                                      int64_t n_out, bool required) {
    const struct gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) {
        if (required) errmsg_set(L->err, L->err_cap, "model: missing tensor %s", name);
        return NULL;
    }
    bool ok = n_out == 0 ? (t->n_dims == 1 && (int64_t)t->ne[0] == n_in)
                         : (t->n_dims == 2 && (int64_t)t->ne[0] == n_in &&
                            (int64_t)t->ne[1] == n_out);
    if (!ok) {
        if (n_out == 0)
            errmsg_set(L->err, L->err_cap, "model: tensor %s has the wrong shape (want [%lld])",
                       name, (long long)n_in);
        else
            errmsg_set(L->err, L->err_cap,
                       "model: tensor %s has the wrong shape (want [%lld, %lld])", name,
                       (long long)n_in, (long long)n_out);
        return NULL;
    }
    if (n_out != 0 && kn_act_for_type(t->type) < 0) {
        errmsg_set(L->err, L->err_cap, "model: tensor %s has unsupported type %d for a matrix",
                   name, t->type);
        return NULL;
    }
    uint64_t ne = t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1);
    L->n_params += ne;
    return t;
}

static const float *bind_norm(struct loader *L, const char *name, int n) {
    const struct gguf_tensor *t = bind(L, name, n, 0, true);
    if (!t) return NULL;
    if (t->type != ANVIL_TYPE_F32) {
        errmsg_set(L->err, L->err_cap, "model: norm tensor %s must be F32", name);
        return NULL;
    }
    return t->data;
}

/* Bind 1..3 tensors stacked by rows into one wmat. */
static bool bind_wmat(struct loader *L, struct wmat *w, int n_in, int n_parts,
                      const char *const *names, const int *rows) {
    memset(w, 0, sizeof(*w));
    w->n_in = n_in;
    w->n_parts = n_parts;
    for (int p = 0; p < n_parts; p++) {
        const struct gguf_tensor *t = bind(L, names[p], n_in, rows[p], true);
        if (!t) return false;
        int act = kn_act_for_type(t->type);
        if (p == 0) w->act = act;
        if (act != w->act) {
            errmsg_set(L->err, L->err_cap,
                       "model: tensors %s and %s need different activation formats (types %s, "
                       "%s); mixed groups are not supported",
                       names[0], names[p], anvil_type_name(w->part[0].type),
                       anvil_type_name(t->type));
            return false;
        }
        w->part[p].data = t->data;
        w->part[p].type = t->type;
        w->part[p].rows = rows[p];
        w->part[p].row_bytes = gguf_row_size(t->type, (uint64_t)n_in);
        w->n_out += rows[p];
    }
    return true;
}

static anvil_status load_hparams(struct loader *L, struct llama_hparams *hp,
                                 const struct tok_vocab *vocab) {
    uint32_t v;
    if (!get_u32_arch(L, "block_count", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_layer = (int)v;
    if (!get_u32_arch(L, "embedding_length", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_embd = (int)v;
    if (!get_u32_arch(L, "feed_forward_length", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_ff = (int)v;
    if (!get_u32_arch(L, "attention.head_count", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_head = (int)v;
    hp->n_head_kv = hp->n_head;
    if (get_u32_arch(L, "attention.head_count_kv", &v, false)) hp->n_head_kv = (int)v;
    hp->n_ctx_train = 2048;
    if (get_u32_arch(L, "context_length", &v, false)) hp->n_ctx_train = (int)v;
    hp->rope_base = 10000.0f;
    get_f32_arch(L, "rope.freq_base", &hp->rope_base);
    hp->norm_eps = 1e-5f;
    get_f32_arch(L, "attention.layer_norm_rms_epsilon", &hp->norm_eps);
    hp->n_vocab = tok_n_vocab(vocab);

    /* sanity bounds: generous, but they keep size arithmetic far from
     * overflow and reject absurd files with a clear message */
    if (hp->n_layer < 1 || hp->n_layer > 1024 || hp->n_embd < 1 || hp->n_embd > 65536 ||
        hp->n_ff < 1 || hp->n_ff > 1 << 18 || hp->n_head < 1 || hp->n_head > 1024 ||
        hp->n_head_kv < 1 || hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0 ||
        hp->n_embd % hp->n_head != 0 || hp->n_ctx_train < 1 || hp->n_vocab < 1) {
        errmsg_set(L->err, L->err_cap,
                   "model: inconsistent hyperparameters (n_layer %d, n_embd %d, n_ff %d, n_head "
                   "%d, n_head_kv %d, n_ctx %d, n_vocab %d)",
                   hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv, hp->n_ctx_train,
                   hp->n_vocab);
        return ANVIL_ERR_FORMAT;
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    if (get_u32_arch(L, "attention.key_length", &v, false) && (int)v != hp->head_dim) {
        errmsg_set(L->err, L->err_cap, "model: attention.key_length %u != n_embd/n_head %d "
                   "is not supported", v, hp->head_dim);
        return ANVIL_ERR_UNSUPPORTED;
    }
    hp->n_rot = hp->head_dim;
    if (get_u32_arch(L, "rope.dimension_count", &v, false) && (int)v != hp->head_dim) {
        errmsg_set(L->err, L->err_cap, "model: partial RoPE (%u of %d dims) is not supported", v,
                   hp->head_dim);
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (hp->head_dim % 2 != 0 || !(hp->rope_base > 0.0f) || !(hp->norm_eps > 0.0f)) {
        errmsg_set(L->err, L->err_cap, "model: invalid head_dim %d, rope base %g or eps %g",
                   hp->head_dim, hp->rope_base, hp->norm_eps);
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

static anvil_status load_weights(struct loader *L, struct anvil_model *m) {
    const struct llama_hparams *hp = &m->hp;
    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char n0[96], n1[96], n2[96];

    const struct gguf_tensor *te = bind(L, "token_embd.weight", hp->n_embd, hp->n_vocab, true);
    if (!te) return ANVIL_ERR_FORMAT;
    m->tok_embd = te->data;
    m->tok_embd_type = te->type;
    m->tok_embd_row_bytes = gguf_row_size(te->type, (uint64_t)hp->n_embd);
    if (!(m->output_norm = bind_norm(L, "output_norm.weight", hp->n_embd))) return ANVIL_ERR_FORMAT;
    const char *out_name[1] = {"output.weight"};
    int vocab_rows[1] = {hp->n_vocab};
    if (gguf_find_tensor(L->f, "output.weight")) {
        if (!bind_wmat(L, &m->output, hp->n_embd, 1, out_name, vocab_rows)) return ANVIL_ERR_FORMAT;
    } else {
        /* tied embeddings: lm_head is token_embd */
        const char *tied[1] = {"token_embd.weight"};
        uint64_t saved = L->n_params;
        if (!bind_wmat(L, &m->output, hp->n_embd, 1, tied, vocab_rows)) return ANVIL_ERR_FORMAT;
        L->n_params = saved;
    }

    m->layers = anvil_calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) return ANVIL_ERR_NOMEM;
    for (int l = 0; l < hp->n_layer; l++) {
        struct llama_layer *ly = &m->layers[l];
        snprintf(n0, sizeof(n0), "blk.%d.attn_norm.weight", l);
        if (!(ly->attn_norm = bind_norm(L, n0, hp->n_embd))) return ANVIL_ERR_FORMAT;
        snprintf(n0, sizeof(n0), "blk.%d.ffn_norm.weight", l);
        if (!(ly->ffn_norm = bind_norm(L, n0, hp->n_embd))) return ANVIL_ERR_FORMAT;

        snprintf(n0, sizeof(n0), "blk.%d.attn_q.weight", l);
        snprintf(n1, sizeof(n1), "blk.%d.attn_k.weight", l);
        snprintf(n2, sizeof(n2), "blk.%d.attn_v.weight", l);
        const char *qkv[3] = {n0, n1, n2};
        int qkv_rows[3] = {q_dim, kv_dim, kv_dim};
        if (!bind_wmat(L, &ly->wqkv, hp->n_embd, 3, qkv, qkv_rows)) return ANVIL_ERR_FORMAT;

        snprintf(n0, sizeof(n0), "blk.%d.attn_output.weight", l);
        const char *wo[1] = {n0};
        int wo_rows[1] = {hp->n_embd};
        if (!bind_wmat(L, &ly->wo, q_dim, 1, wo, wo_rows)) return ANVIL_ERR_FORMAT;

        snprintf(n0, sizeof(n0), "blk.%d.ffn_gate.weight", l);
        snprintf(n1, sizeof(n1), "blk.%d.ffn_up.weight", l);
        const char *gu[2] = {n0, n1};
        int gu_rows[2] = {hp->n_ff, hp->n_ff};
        if (!bind_wmat(L, &ly->wgu, hp->n_embd, 2, gu, gu_rows)) return ANVIL_ERR_FORMAT;

        snprintf(n0, sizeof(n0), "blk.%d.ffn_down.weight", l);
        const char *dn[1] = {n0};
        int dn_rows[1] = {hp->n_embd};
        if (!bind_wmat(L, &ly->wdown, hp->n_ff, 1, dn, dn_rows)) return ANVIL_ERR_FORMAT;
    }
    m->wtype = m->layers[0].wgu.part[0].type;

    /* RoPE frequencies, with optional per-dimension factors (Llama 3.1) */
    int half = hp->n_rot / 2;
    m->inv_freq = anvil_malloc((size_t)half * sizeof(float));
    if (!m->inv_freq) return ANVIL_ERR_NOMEM;
    const struct gguf_tensor *rf = gguf_find_tensor(L->f, "rope_freqs.weight");
    if (rf && (rf->type != ANVIL_TYPE_F32 || rf->n_dims != 1 || (int)rf->ne[0] != half)) {
        errmsg_set(L->err, L->err_cap, "model: rope_freqs.weight must be F32 [%d]", half);
        return ANVIL_ERR_FORMAT;
    }
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (rf) f /= ((const float *)rf->data)[i];
        m->inv_freq[i] = (float)f;
    }
    return ANVIL_OK;
}

/* Copy w into the kernels' packed layout, if they have one for its type. */
static anvil_status pack_wmat(const struct kn_ops *ops, struct gguf_file *f, struct wmat *w) {
    if (!ops->pack_size) return ANVIL_OK;
    int type = w->part[0].type;
    for (int p = 1; p < w->n_parts; p++)
        if (w->part[p].type != type) return ANVIL_OK;
    size_t sz = ops->pack_size(type, w->n_out, w->n_in);
    if (sz == 0) return ANVIL_OK;
    uint8_t *dst = anvil_malloc_aligned(sz);
    if (!dst) return ANVIL_ERR_NOMEM;
    memset(dst, 0, sz);
    int row0 = 0;
    for (int p = 0; p < w->n_parts; p++) {
        ops->pack_rows(type, dst, w->n_in, row0, w->part[p].rows, w->part[p].data,
                       w->part[p].row_bytes);
        row0 += w->part[p].rows;
    }
    /* the copy serves every product from now on */
    for (int p = 0; p < w->n_parts; p++)
        gguf_release(f, w->part[p].data, (size_t)w->part[p].rows * w->part[p].row_bytes);
    w->packed = dst;
    w->packed_type = type;
    w->packed_tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in);
    return ANVIL_OK;
}

static anvil_status pack_weights(struct anvil_model *m) {
    anvil_status st = ANVIL_OK;
    TRY(pack_wmat(m->ops, m->gguf, &m->output));
    for (int l = 0; l < m->hp.n_layer; l++) {
        struct llama_layer *ly = &m->layers[l];
        TRY(pack_wmat(m->ops, m->gguf, &ly->wqkv));
        TRY(pack_wmat(m->ops, m->gguf, &ly->wo));
        TRY(pack_wmat(m->ops, m->gguf, &ly->wgu));
        TRY(pack_wmat(m->ops, m->gguf, &ly->wdown));
    }
    return ANVIL_OK;
fail:
    return st;
}

anvil_status anvil_model_load(const char *path, const struct anvil_model_params *p,
                              struct anvil_model **out, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    struct anvil_model_params defaults = anvil_model_default_params();
    if (!p) p = &defaults;
    if (!path || !out) {
        errmsg_set(err, err_cap, "model: path and out are required");
        return ANVIL_ERR_INVALID;
    }
    struct anvil_model *m = anvil_calloc(1, sizeof(*m));
    if (!m) {
        errmsg_set(err, err_cap, "model: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    if (err && err_cap) err[0] = '\0';
    TRY(gguf_open(path, &m->gguf, err, err_cap));

    struct loader L = {.f = m->gguf, .err = err, .err_cap = err_cap};
    struct gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch)) {
        errmsg_set(err, err_cap, "model: required metadata general.architecture is missing");
        TRY(ANVIL_ERR_FORMAT);
    }
    if (!gguf_str_eq(arch, "llama")) {
        errmsg_set(err, err_cap, "model: architecture '%.*s' is not supported (only llama)",
                   (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        TRY(ANVIL_ERR_UNSUPPORTED);
    }
    L.arch = "llama";

    m->ops = kn_select(p->kernels);
    if (!m->ops) {
        errmsg_set(err, err_cap, "model: kernels '%s' are unknown or not supported by this CPU",
                   p->kernels ? p->kernels : "(ANVIL_KERNELS)");
        TRY(ANVIL_ERR_UNSUPPORTED);
    }
    TRY(tok_load(m->gguf, &m->vocab, err, err_cap));
    TRY(load_hparams(&L, &m->hp, m->vocab));
    TRY(load_weights(&L, m));
    TRY(pack_weights(m));
    m->n_params = L.n_params;
    snprintf(m->desc, sizeof(m->desc), "llama %dL %dd %dh/%dkv ff%d %s (%.0fM params)",
             m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv, m->hp.n_ff,
             anvil_type_name(m->wtype), (double)m->n_params / 1e6);
    *out = m;
    return ANVIL_OK;
fail:
    if (st == ANVIL_ERR_NOMEM && err && err_cap && !err[0]) errmsg_set(err, err_cap, "out of memory");
    anvil_model_free(m);
    return st;
}

void anvil_model_free(struct anvil_model *m) {
    if (!m) return;
    anvil_free(m->inv_freq);
    anvil_free_aligned(m->output.packed);
    for (int l = 0; m->layers && l < m->hp.n_layer; l++) {
        anvil_free_aligned(m->layers[l].wqkv.packed);
        anvil_free_aligned(m->layers[l].wo.packed);
        anvil_free_aligned(m->layers[l].wgu.packed);
        anvil_free_aligned(m->layers[l].wdown.packed);
    }
    anvil_free(m->layers);
    tok_free(m->vocab);
    gguf_close(m->gguf);
    anvil_free(m);
}

/* ---------------------------------------------------------------------- */
/* getters and tokenizer wrappers */

int32_t anvil_model_n_vocab(const struct anvil_model *m) { return m->hp.n_vocab; }
int32_t anvil_model_n_ctx_train(const struct anvil_model *m) { return m->hp.n_ctx_train; }
int32_t anvil_model_n_embd(const struct anvil_model *m) { return m->hp.n_embd; }
int32_t anvil_model_n_layer(const struct anvil_model *m) { return m->hp.n_layer; }
int anvil_model_type(const struct anvil_model *m) { return m->wtype; }
const char *anvil_model_kernels(const struct anvil_model *m) { return m->ops->name; }
const char *anvil_model_desc(const struct anvil_model *m) { return m->desc; }

int32_t anvil_model_meta_str(const struct anvil_model *m, const char *key, char *buf,
                             size_t cap) {
    struct gguf_str v;
    if (buf && cap) buf[0] = '\0';
    if (!m || !key || !gguf_get_str(m->gguf, key, &v)) return -1;
    if (v.len > INT32_MAX) return -1; /* gguf caps strings far below this */
    if (buf && cap) {
        size_t n = v.len < cap - 1 ? v.len : cap - 1;
        memcpy(buf, v.ptr, n);
        buf[n] = '\0';
    }
    return (int32_t)v.len;
}
anvil_token anvil_token_bos(const struct anvil_model *m) { return tok_bos(m->vocab); }
anvil_token anvil_token_eos(const struct anvil_model *m) { return tok_eos(m->vocab); }
bool anvil_token_is_eog(const struct anvil_model *m, anvil_token t) {
    return tok_is_eog(m->vocab, t);
}

int32_t anvil_tokenize(const struct anvil_model *m, const char *text, size_t len,
                       anvil_token *out, int32_t cap, bool add_special, bool parse_special) {
    return tok_encode(m->vocab, text, len, out, cap, add_special, parse_special);
}

int32_t anvil_token_to_piece(const struct anvil_model *m, anvil_token t, char *buf, int32_t cap,
                             bool special) {
    return tok_piece(m->vocab, t, buf, cap, special);
}

void anvil_detok_reset(struct anvil_detok *d) { memset(d, 0, sizeof(*d)); }

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

const char *anvil_chat_template_name(const struct anvil_model *m) {
    return tok_chat_name(m->vocab);
}
