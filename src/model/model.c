/*
 * model.c - load a GGUF model of any architecture anvil runs: find the
 * architecture's descriptor (model/arch.h), read the common
 * hyperparameters and the architecture's own, bind every weight by name
 * with its shape checked, build the tokenizer, pick the kernels. Also the
 * public model, tokenizer and chat wrappers.
 *
 * Weights stay in gguf's read-only mapping, and the multi-part matrices
 * (QKV, gate/up) only point into it, unless the kernel table packs their
 * type: then each matrix is copied once into the packed layout (parts
 * stacked) and the mapping's pages under it are released (pack_wmat).
 * The few small arrays a model owns: Q/K/V biases stacked into one
 * vector per layer, and the RoPE frequencies.
 *
 * Reference: llama.cpp's tensor names (LLM_TENSOR_*) and hparams keys
 * (LLM_KV_*), which GGUF files of every architecture use.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/pool.h"
#include "model/arch.h"
#include "model/model.h"

/* ---------------------------------------------------------------------- */
/* public helpers that need no model */

struct anvil_model_params anvil_model_default_params(void) {
    struct anvil_model_params p = {.kernels = NULL};
    return p;
}

/* ---------------------------------------------------------------------- */
/* architectures */

static const struct arch_desc *const archs[] = {&arch_llama, &arch_qwen2, &arch_qwen3,
                                                &arch_gemma3, &arch_phi3};

const struct arch_desc *arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
        if (strlen(archs[i]->name) == len && !memcmp(archs[i]->name, name, len)) return archs[i];
    return NULL;
}

const char *arch_names(void) { return "llama, qwen2, qwen3, gemma3, phi3"; }

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
        const uint8_t *xp = (const uint8_t *)x + w->part[p].act_off;
        if (a < b && w->part[p].packed)
            ops->matmul_packed[w->part[p].type](y + off, ldy, w->part[p].packed, 0, xp, x_stride,
                                                w->n_in, n_tokens, a - off, b - off);
        else if (a < b)
            ops->matmul[w->part[p].type](y + off, ldy, w->part[p].data, w->part[p].row_bytes, xp,
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
        const uint8_t *xp = (const uint8_t *)x + w->part[p].act_off;
        int type = w->part[p].type;
        if (lo < hi && w->part[p].packed) { /* parts start on tile boundaries */
            size_t at = (size_t)((lo - off) / KN_PACK_ROWS) * w->part[p].packed_tile;
            ops->matmul_packed[type](y + (lo - a), ldy, w->part[p].packed + at, 0, xp, x_stride,
                                     w->n_in, n_tokens, 0, hi - lo);
        } else if (lo < hi) {
            ops->matmul[type](y + (lo - a), ldy,
                              w->part[p].data + (size_t)(lo - off) * w->part[p].row_bytes,
                              w->part[p].row_bytes, xp, x_stride, w->n_in, n_tokens, 0, hi - lo);
        }
        off += rows;
    }
}

/* ---------------------------------------------------------------------- */
/* loading */

struct model_loader {
    struct gguf_file *f;
    const char *arch;
    char *err;
    size_t err_cap;
    bool failed;
    uint64_t n_params;
};

void loader_error(struct model_loader *L, const char *fmt, ...) {
    L->failed = true;
    if (!L->err || !L->err_cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err, L->err_cap, fmt, ap);
    va_end(ap);
}

bool loader_failed(const struct model_loader *L) { return L->failed; }

bool loader_u32(struct model_loader *L, const char *suffix, uint32_t *out, bool required) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", L->arch, suffix);
    if (gguf_get_u32(L->f, key, out)) return true;
    if (required) {
        if (gguf_find(L->f, key))
            loader_error(L, "model: metadata %s has the wrong type or range", key);
        else
            loader_error(L, "model: required metadata %s is missing", key);
    }
    return false;
}

bool loader_f32(struct model_loader *L, const char *suffix, float *out) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", L->arch, suffix);
    return gguf_get_f32(L->f, key, out);
}

bool loader_bool_array(struct model_loader *L, const char *suffix, bool *out, int n) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", L->arch, suffix);
    const struct gguf_kv *kv = gguf_find(L->f, key);
    if (!kv || kv->type != GGUF_VT_ARRAY) return false;
    size_t esz = kv->arr_type == GGUF_VT_BOOL || kv->arr_type == GGUF_VT_UINT8 ||
                         kv->arr_type == GGUF_VT_INT8
                     ? 1
                 : kv->arr_type == GGUF_VT_UINT32 || kv->arr_type == GGUF_VT_INT32 ? 4
                                                                                   : 0;
    if (esz == 0 || kv->n != (uint64_t)n) {
        loader_error(L, "model: metadata %s must be %d bools or integers (one per layer)", key, n);
        return false;
    }
    for (int i = 0; i < n; i++) {
        uint32_t v = 0;
        memcpy(&v, kv->data + (size_t)i * esz, esz); /* little endian: low bytes first */
        out[i] = v != 0;
    }
    return true;
}

/* Find a tensor and check its shape (ne0 = n_in, ne1 = n_out; n_out 0 for
 * a vector). */
static const struct gguf_tensor *bind(struct model_loader *L, const char *name, int64_t n_in,
                                      int64_t n_out, bool required) {
    const struct gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) {
        if (required) loader_error(L, "model: missing tensor %s", name);
        return NULL;
    }
    bool ok = n_out == 0 ? (t->n_dims == 1 && (int64_t)t->ne[0] == n_in)
                         : (t->n_dims == 2 && (int64_t)t->ne[0] == n_in &&
                            (int64_t)t->ne[1] == n_out);
    if (!ok) {
        if (n_out == 0)
            loader_error(L, "model: tensor %s has the wrong shape (want [%lld])", name,
                         (long long)n_in);
        else
            loader_error(L, "model: tensor %s has the wrong shape (want [%lld, %lld])", name,
                         (long long)n_in, (long long)n_out);
        return NULL;
    }
    if (n_out != 0 && kn_act_for_type(t->type) < 0) {
        loader_error(L, "model: tensor %s has type %s, which anvil cannot multiply", name,
                     anvil_type_name(t->type) ? anvil_type_name(t->type) : "unknown");
        return NULL;
    }
    if (n_out != 0) {
        /* NaN/inf block scales would turn every logit NaN: refuse them here,
         * naming the tensor (one pass over the scales, ~1% of the bytes) */
        int64_t bad = kn_find_bad_scale(t->type, t->data, n_out, n_in, gguf_row_size(t->type, (uint64_t)n_in));
        if (bad >= 0) {
            loader_error(L, "model: tensor %s: block %lld has a NaN or infinite scale", name,
                         (long long)bad);
            return NULL;
        }
    }
    uint64_t ne = t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1);
    L->n_params += ne;
    return t;
}

/* A norm weight (F32 vector of n). NULL when missing (an error only when
 * required) or malformed (always an error: check loader_failed). */
static const float *bind_norm(struct model_loader *L, const char *name, int n, bool required) {
    const struct gguf_tensor *t = bind(L, name, n, 0, required);
    if (!t) return NULL;
    if (t->type != ANVIL_TYPE_F32) {
        loader_error(L, "model: norm tensor %s must be F32", name);
        return NULL;
    }
    return t->data;
}

/* Bind 1..3 tensors stacked by rows into one wmat. */
static bool bind_wmat(struct model_loader *L, struct wmat *w, int n_in, int n_parts,
                      const char *const *names, const int *rows) {
    memset(w, 0, sizeof(*w));
    w->n_in = n_in;
    w->n_parts = n_parts;
    for (int p = 0; p < n_parts; p++) {
        const struct gguf_tensor *t = bind(L, names[p], n_in, rows[p], true);
        if (!t) return false;
        int act = kn_act_for_type(t->type);
        /* parts of the 32-element and the super-block families (Q4_K_M
         * files stack Q4_K/Q6_K with Q5_0/Q8_0 rows) share one activation
         * row holding both formats; each part reads its own (act_off) */
        int merged = p == 0 ? act : kn_act_merge(w->act, act);
        if (merged < 0) {
            loader_error(L,
                         "model: tensors %s and %s need different activation formats (types %s, "
                         "%s); mixed groups are not supported",
                         names[0], names[p], anvil_type_name(w->part[0].type),
                         anvil_type_name(t->type));
            return false;
        }
        w->act = merged;
        w->part[p].data = t->data;
        w->part[p].type = t->type;
        w->part[p].rows = rows[p];
        w->part[p].row_bytes = gguf_row_size(t->type, (uint64_t)n_in);
        w->n_out += rows[p];
    }
    for (int p = 0; p < n_parts; p++)
        w->part[p].act_off = kn_act_part_offset(w->act, kn_act_for_type(w->part[p].type), n_in);
    return true;
}

/* RoPE scaling: none or linear (freq scale = 1/factor). */
static anvil_status load_rope_scaling(struct model_loader *L, struct model_hparams *hp) {
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", L->arch);
    struct gguf_str type;
    float factor = 0.0f;
    bool has_factor = loader_f32(L, "rope.scaling.factor", &factor);
    if (gguf_get_str(L->f, key, &type) && !gguf_str_eq(type, "none")) {
        if (!gguf_str_eq(type, "linear")) {
            loader_error(L, "model: RoPE scaling '%.*s' is not supported (none or linear)",
                         (int)(type.len > 32 ? 32 : type.len), type.ptr);
            return ANVIL_ERR_UNSUPPORTED;
        }
        if (!has_factor) factor = 1.0f;
    } else if (!gguf_get_str(L->f, key, &type) && has_factor && factor != 1.0f && factor != 0.0f) {
        /* old files: a factor without a type means linear */
    } else {
        factor = 0.0f;
    }
    if (factor != 0.0f) {
        if (!(factor >= 1.0f && factor <= 1024.0f)) {
            loader_error(L, "model: rope.scaling.factor %g out of range [1, 1024]", factor);
            return ANVIL_ERR_FORMAT;
        }
        hp->rope_scale = 1.0f / factor;
    }
    return ANVIL_OK;
}

static anvil_status load_hparams(struct model_loader *L, const struct arch_desc *arch,
                                 struct model_hparams *hp, const struct tok_vocab *vocab,
                                 bool **swa_out) {
    uint32_t v;
    if (!loader_u32(L, "block_count", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_layer = (int)v;
    if (!loader_u32(L, "embedding_length", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_embd = (int)v;
    if (!loader_u32(L, "feed_forward_length", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_ff = (int)v;
    if (!loader_u32(L, "attention.head_count", &v, true)) return ANVIL_ERR_FORMAT;
    hp->n_head = (int)v;
    hp->n_head_kv = hp->n_head;
    if (loader_u32(L, "attention.head_count_kv", &v, false)) hp->n_head_kv = (int)v;
    hp->n_ctx_train = 2048;
    if (loader_u32(L, "context_length", &v, false)) hp->n_ctx_train = (int)v;
    hp->rope_base = 10000.0f;
    loader_f32(L, "rope.freq_base", &hp->rope_base);
    hp->rope_scale = 1.0f;
    hp->norm_eps = 1e-5f;
    loader_f32(L, "attention.layer_norm_rms_epsilon", &hp->norm_eps);
    hp->n_vocab = tok_n_vocab(vocab);
    hp->act = arch->act;
    hp->rope = arch->rope;
    hp->embd_scale = 1.0f;

    /* sanity bounds: generous, but they keep size arithmetic far from
     * overflow and reject absurd files with a clear message */
    if (hp->n_layer < 1 || hp->n_layer > 1024 || hp->n_embd < 1 || hp->n_embd > 65536 ||
        hp->n_ff < 1 || hp->n_ff > 1 << 18 || hp->n_head < 1 || hp->n_head > 1024 ||
        hp->n_head_kv < 1 || hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0 ||
        hp->n_ctx_train < 1 || hp->n_vocab < 1) {
        loader_error(L,
                     "model: inconsistent hyperparameters (n_layer %d, n_embd %d, n_ff %d, n_head "
                     "%d, n_head_kv %d, n_ctx %d, n_vocab %d)",
                     hp->n_layer, hp->n_embd, hp->n_ff, hp->n_head, hp->n_head_kv, hp->n_ctx_train,
                     hp->n_vocab);
        return ANVIL_ERR_FORMAT;
    }
    hp->head_dim = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    if (loader_u32(L, "attention.key_length", &v, false)) hp->head_dim = (int)v;
    uint32_t vlen;
    if (loader_u32(L, "attention.value_length", &vlen, false) && (int)vlen != hp->head_dim) {
        loader_error(L, "model: attention.value_length %u != key_length %d is not supported", vlen,
                     hp->head_dim);
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (hp->head_dim < 2 || hp->head_dim > 256 || hp->head_dim % 2 != 0) {
        loader_error(L, "model: head_dim %d (n_embd %d / n_head %d, or attention.key_length) is "
                        "not supported (even, 2..256)",
                     hp->head_dim, hp->n_embd, hp->n_head);
        return hp->head_dim == 0 ? ANVIL_ERR_FORMAT : ANVIL_ERR_UNSUPPORTED;
    }
    hp->n_rot = hp->head_dim;
    if (loader_u32(L, "rope.dimension_count", &v, false)) hp->n_rot = (int)v;
    if (hp->n_rot < 2 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0) {
        loader_error(L, "model: rope.dimension_count %d must be even and within head_dim %d",
                     hp->n_rot, hp->head_dim);
        return ANVIL_ERR_FORMAT;
    }
    if (!(hp->rope_base > 0.0f) || !isfinite(hp->rope_base) || !(hp->norm_eps > 0.0f) ||
        !(hp->norm_eps < 1.0f)) {
        loader_error(L, "model: invalid rope base %g or eps %g", hp->rope_base, hp->norm_eps);
        return ANVIL_ERR_FORMAT;
    }
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (arch->flags & ARCH_EMBD_SCALE) hp->embd_scale = sqrtf((float)hp->n_embd);
    anvil_status st = load_rope_scaling(L, hp);
    if (st != ANVIL_OK) return st;
    hp->rope_base_swa = hp->rope_base;
    hp->rope_scale_swa = hp->rope_scale;

    bool *swa = core_calloc((size_t)hp->n_layer, sizeof(bool));
    if (!swa) return ANVIL_ERR_NOMEM;
    *swa_out = swa;
    if (arch->hparams && (st = arch->hparams(L, hp, swa)) != ANVIL_OK) return st;
    if (hp->n_swa < 0 || (hp->n_swa > 0 && !(hp->rope_base_swa > 0.0f))) {
        loader_error(L, "model: invalid sliding window %d or local RoPE base %g", hp->n_swa,
                     hp->rope_base_swa);
        return ANVIL_ERR_FORMAT;
    }
    if (hp->n_swa > hp->n_ctx_train) {
        loader_error(L, "model: %s.attention.sliding_window %d is larger than the context length %d",
                     L->arch, hp->n_swa, hp->n_ctx_train);
        return ANVIL_ERR_FORMAT;
    }
    if (hp->n_swa == 0)
        for (int l = 0; l < hp->n_layer; l++) swa[l] = false;
    return ANVIL_OK;
}

/* The Q, K, V biases of a layer, stacked into one owned vector, or NULL
 * when the file has none. Any float type is accepted (converted once). */
static anvil_status load_qkv_bias(struct model_loader *L, struct model_layer *ly, int l,
                                  bool fused, int q_dim, int kv_dim, bool required) {
    char name[96];
    const struct gguf_tensor *t[3] = {NULL, NULL, NULL};
    int len[3] = {q_dim, kv_dim, kv_dim};
    static const char *const which[3] = {"q", "k", "v"};
    int n_parts = 3;
    if (fused) {
        snprintf(name, sizeof(name), "blk.%d.attn_qkv.bias", l);
        len[0] = q_dim + 2 * kv_dim;
        n_parts = 1;
        if (!(t[0] = gguf_find_tensor(L->f, name))) {
            if (required) loader_error(L, "model: missing tensor %s", name);
            return required ? ANVIL_ERR_FORMAT : ANVIL_OK;
        }
    } else {
        int found = 0;
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof(name), "blk.%d.attn_%s.bias", l, which[i]);
            if ((t[i] = gguf_find_tensor(L->f, name))) found++;
        }
        if (found == 0 && !required) return ANVIL_OK;
        if (found != 3) {
            loader_error(L, "model: layer %d has %d of the 3 attn_q/k/v.bias tensors", l, found);
            return ANVIL_ERR_FORMAT;
        }
    }
    ly->qkv_bias = core_malloc((size_t)(q_dim + 2 * kv_dim) * sizeof(float));
    if (!ly->qkv_bias) return ANVIL_ERR_NOMEM;
    int off = 0;
    for (int i = 0; i < n_parts; i++) {
        uint32_t blck = 0, bytes = 0;
        if (t[i]->n_dims != 1 || (int64_t)t[i]->ne[0] != len[i] ||
            !gguf_type_block(t[i]->type, &blck, &bytes) || len[i] % (int)blck != 0 ||
            (t[i]->type != ANVIL_TYPE_F32 && t[i]->type != ANVIL_TYPE_F16 &&
             t[i]->type != ANVIL_TYPE_BF16)) {
            loader_error(L, "model: tensor %s must be an F32/F16/BF16 vector of %d",
                         t[i]->name, len[i]);
            return ANVIL_ERR_FORMAT;
        }
        kn_dequantize_row(t[i]->type, t[i]->data, ly->qkv_bias + off, len[i]);
        off += len[i];
    }
    return ANVIL_OK;
}

static anvil_status load_layer(struct model_loader *L, struct anvil_model *m, int l,
                               bool is_swa) {
    const struct model_hparams *hp = &m->hp;
    const struct arch_desc *arch = m->arch;
    struct model_layer *ly = &m->layers[l];
    int q_dim = hp->n_head * hp->head_dim, kv_dim = hp->n_head_kv * hp->head_dim;
    char n0[96], n1[96], n2[96];

    snprintf(n0, sizeof(n0), "blk.%d.attn_norm.weight", l);
    if (!(ly->attn_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
    snprintf(n0, sizeof(n0), "blk.%d.ffn_norm.weight", l);
    if (!(ly->ffn_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
    if (arch->flags & ARCH_POST_NORMS) {
        snprintf(n0, sizeof(n0), "blk.%d.post_attention_norm.weight", l);
        if (!(ly->attn_post_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
        snprintf(n0, sizeof(n0), "blk.%d.post_ffw_norm.weight", l);
        if (!(ly->ffn_post_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
    }
    if (arch->flags & ARCH_QK_NORM) {
        snprintf(n0, sizeof(n0), "blk.%d.attn_q_norm.weight", l);
        if (!(ly->q_norm = bind_norm(L, n0, hp->head_dim, true))) return ANVIL_ERR_FORMAT;
        snprintf(n0, sizeof(n0), "blk.%d.attn_k_norm.weight", l);
        if (!(ly->k_norm = bind_norm(L, n0, hp->head_dim, true))) return ANVIL_ERR_FORMAT;
    }

    snprintf(n0, sizeof(n0), "blk.%d.attn_qkv.weight", l);
    bool fused_qkv = (arch->flags & ARCH_FUSED_QKV) && gguf_find_tensor(L->f, n0);
    if (fused_qkv) {
        const char *qkv[1] = {n0};
        int rows[1] = {q_dim + 2 * kv_dim};
        if (!bind_wmat(L, &ly->wqkv, hp->n_embd, 1, qkv, rows)) return ANVIL_ERR_FORMAT;
    } else {
        snprintf(n0, sizeof(n0), "blk.%d.attn_q.weight", l);
        snprintf(n1, sizeof(n1), "blk.%d.attn_k.weight", l);
        snprintf(n2, sizeof(n2), "blk.%d.attn_v.weight", l);
        const char *qkv[3] = {n0, n1, n2};
        int rows[3] = {q_dim, kv_dim, kv_dim};
        if (!bind_wmat(L, &ly->wqkv, hp->n_embd, 3, qkv, rows)) return ANVIL_ERR_FORMAT;
    }
    anvil_status st = load_qkv_bias(L, ly, l, fused_qkv, q_dim, kv_dim,
                                    (arch->flags & ARCH_QKV_BIAS) != 0);
    if (st != ANVIL_OK) return st;

    snprintf(n0, sizeof(n0), "blk.%d.attn_output.weight", l);
    const char *wo[1] = {n0};
    int wo_rows[1] = {hp->n_embd};
    if (!bind_wmat(L, &ly->wo, q_dim, 1, wo, wo_rows)) return ANVIL_ERR_FORMAT;

    if (arch->flags & ARCH_FUSED_GATE_UP) {
        snprintf(n0, sizeof(n0), "blk.%d.ffn_up.weight", l);
        const char *gu[1] = {n0};
        int gu_rows[1] = {2 * hp->n_ff};
        if (!bind_wmat(L, &ly->wgu, hp->n_embd, 1, gu, gu_rows)) return ANVIL_ERR_FORMAT;
    } else {
        snprintf(n0, sizeof(n0), "blk.%d.ffn_gate.weight", l);
        snprintf(n1, sizeof(n1), "blk.%d.ffn_up.weight", l);
        const char *gu[2] = {n0, n1};
        int gu_rows[2] = {hp->n_ff, hp->n_ff};
        if (!bind_wmat(L, &ly->wgu, hp->n_embd, 2, gu, gu_rows)) return ANVIL_ERR_FORMAT;
    }
    snprintf(n0, sizeof(n0), "blk.%d.ffn_down.weight", l);
    const char *dn[1] = {n0};
    int dn_rows[1] = {hp->n_embd};
    if (!bind_wmat(L, &ly->wdown, hp->n_ff, 1, dn, dn_rows)) return ANVIL_ERR_FORMAT;

    ly->n_swa = is_swa ? hp->n_swa : 0;
    ly->inv_freq = is_swa ? m->inv_freq_swa : m->inv_freq;
    return ANVIL_OK;
}

/* inv_freq[i] = scale * base^(-2i/n_rot) / factor[i] (rope_freqs.weight,
 * Llama 3.1's per-dimension factors, when the file has them). */
static anvil_status rope_freqs(struct model_loader *L, const struct model_hparams *hp, float base,
                               float scale, bool factors, float **out) {
    int half = hp->n_rot / 2;
    float *f = core_malloc((size_t)half * sizeof(float));
    if (!f) return ANVIL_ERR_NOMEM;
    *out = f;
    const struct gguf_tensor *rf = factors ? gguf_find_tensor(L->f, "rope_freqs.weight") : NULL;
    if (rf && (rf->type != ANVIL_TYPE_F32 || rf->n_dims != 1 || (int)rf->ne[0] != half)) {
        loader_error(L, "model: rope_freqs.weight must be F32 [%d]", half);
        return ANVIL_ERR_FORMAT;
    }
    for (int i = 0; i < half; i++) {
        double v = (double)scale * pow((double)base, -2.0 * i / hp->n_rot);
        if (rf) {
            float d = ((const float *)rf->data)[i];
            if (!(d > 0.0f) || !isfinite(d)) {
                loader_error(L, "model: rope_freqs.weight[%d] = %g is not a positive factor", i, d);
                return ANVIL_ERR_FORMAT;
            }
            v /= d;
        }
        f[i] = (float)v;
    }
    return ANVIL_OK;
}

static anvil_status load_weights(struct model_loader *L, struct anvil_model *m, const bool *swa) {
    const struct model_hparams *hp = &m->hp;
    anvil_status st = ANVIL_OK;
    if (gguf_find_tensor(L->f, "rope_factors_long.weight") ||
        gguf_find_tensor(L->f, "rope_factors_short.weight")) {
        loader_error(L, "model: LongRoPE (rope_factors_long/short) is not supported");
        return ANVIL_ERR_UNSUPPORTED;
    }
    TRY(rope_freqs(L, hp, hp->rope_base, hp->rope_scale, true, &m->inv_freq));
    if (hp->n_swa > 0) TRY(rope_freqs(L, hp, hp->rope_base_swa, hp->rope_scale_swa, true, &m->inv_freq_swa));

    const struct gguf_tensor *te = bind(L, "token_embd.weight", hp->n_embd, hp->n_vocab, true);
    if (!te) return ANVIL_ERR_FORMAT;
    m->tok_embd = te->data;
    m->tok_embd_type = te->type;
    m->tok_embd_row_bytes = gguf_row_size(te->type, (uint64_t)hp->n_embd);
    if (!(m->output_norm = bind_norm(L, "output_norm.weight", hp->n_embd, true)))
        return ANVIL_ERR_FORMAT;
    int vocab_rows[1] = {hp->n_vocab};
    if (gguf_find_tensor(L->f, "output.weight")) {
        const char *out_name[1] = {"output.weight"};
        if (!bind_wmat(L, &m->output, hp->n_embd, 1, out_name, vocab_rows)) return ANVIL_ERR_FORMAT;
    } else {
        /* tied embeddings: lm_head is token_embd */
        const char *tied[1] = {"token_embd.weight"};
        uint64_t saved = L->n_params;
        if (!bind_wmat(L, &m->output, hp->n_embd, 1, tied, vocab_rows)) return ANVIL_ERR_FORMAT;
        L->n_params = saved;
    }

    m->layers = core_calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers) return ANVIL_ERR_NOMEM;
    for (int l = 0; l < hp->n_layer; l++) TRY(load_layer(L, m, l, swa[l]));
    m->wtype = m->layers[0].wgu.part[0].type;
    return ANVIL_OK;
fail:
    return st;
}

/* ---------------------------------------------------------------------- */
/* attention kinds (README "Attention kinds")
 *
 *   <arch>.attention.kind        string "softmax" | "hp1" (every layer), or an
 *                                array of n_layer such strings; absent = softmax
 *   <arch>.attention.hp1.fir_k   u32 K, 1..KN_HP1_MAX_TAPS          (required)
 *   <arch>.attention.hp1.taps    f32 array (n_layer, n_head, K)      (required)
 *   <arch>.attention.hp1.gamma   f32, default 1
 *   <arch>.attention.hp1.lo/.hi  f32, default 0 and 1, lo <= hi
 *   <arch>.attention.hp1.relu    bool, default true
 * The taps are metadata rather than a tensor per layer: they are a few
 * hundred numbers that configure the op, not weights of a matrix product,
 * and one array keeps a model's whole HP1 configuration in one place (for
 * `anvil inspect`, for converters). Everything is checked here, so the
 * kernels can rely on finite parameters (attn_hp1.h). */

static bool attn_kind_parse(struct gguf_str s, enum model_attn *out) {
    if (gguf_str_eq(s, "softmax")) *out = MODEL_ATTN_SOFTMAX;
    else if (gguf_str_eq(s, "hp1")) *out = MODEL_ATTN_HP1;
    else return false;
    return true;
}

/* Optional finite f32 <arch>.attention.hp1.<name>; false (error set) when
 * present with another type or not finite. */
static bool hp1_scalar(struct model_loader *L, const char *name, float *v) {
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.hp1.%s", L->arch, name);
    if (!gguf_find(L->f, key)) return true;
    if (!gguf_get_f32(L->f, key, v)) {
        loader_error(L, "model: metadata %s must be a float", key);
        return false;
    }
    if (!isfinite(*v)) {
        loader_error(L, "model: metadata %s = %g is not finite", key, *v);
        return false;
    }
    return true;
}

static anvil_status load_attn_kinds(struct model_loader *L, struct anvil_model *m, const bool *swa) {
    const struct model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.kind", L->arch);
    const struct gguf_kv *kv = gguf_find(L->f, key);
    if (kv && kv->type == GGUF_VT_STRING) {
        struct gguf_str s = {"", 0};
        enum model_attn a = MODEL_ATTN_SOFTMAX;
        if (!gguf_get_str(L->f, key, &s) || !attn_kind_parse(s, &a)) {
            loader_error(L, "model: metadata %s = '%.*s' is not an attention kind anvil runs "
                            "(softmax, hp1)", key, (int)(s.len > 32 ? 32 : s.len), s.ptr);
            return ANVIL_ERR_UNSUPPORTED;
        }
        for (int l = 0; l < hp->n_layer; l++) m->layers[l].attn = a;
    } else if (kv) {
        if (kv->type != GGUF_VT_ARRAY || kv->arr_type != GGUF_VT_STRING ||
            kv->n != (uint64_t)hp->n_layer) {
            loader_error(L, "model: metadata %s must be a string or an array of %d strings (one "
                            "per layer)", key, hp->n_layer);
            return ANVIL_ERR_FORMAT;
        }
        for (int l = 0; l < hp->n_layer; l++) {
            if (!attn_kind_parse(kv->strs[l], &m->layers[l].attn)) {
                struct gguf_str s = kv->strs[l];
                loader_error(L, "model: metadata %s[%d] = '%.*s' is not an attention kind anvil "
                                "runs (softmax, hp1)", key, l, (int)(s.len > 32 ? 32 : s.len), s.ptr);
                return ANVIL_ERR_UNSUPPORTED;
            }
        }
    }
    m->n_hp1 = 0;
    for (int l = 0; l < hp->n_layer; l++) m->n_hp1 += m->layers[l].attn == MODEL_ATTN_HP1;

    char prefix[96];
    int np = snprintf(prefix, sizeof(prefix), "%s.attention.hp1.", L->arch);
    if (m->n_hp1 == 0) {
        /* HP1 parameters with no HP1 layer: most likely a converter that
         * forgot the kind; running softmax would be silently wrong */
        for (uint64_t i = 0; i < L->f->n_kv; i++) {
            struct gguf_str k = L->f->kv[i].key;
            if (k.len >= (uint64_t)np && !memcmp(k.ptr, prefix, (size_t)np)) {
                loader_error(L, "model: metadata %.*s is set but %s names no hp1 layer",
                             (int)(k.len > 96 ? 96 : k.len), k.ptr, key);
                return ANVIL_ERR_FORMAT;
            }
        }
        return ANVIL_OK;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        if (m->layers[l].attn == MODEL_ATTN_HP1 && swa[l]) {
            loader_error(L, "model: layer %d is both hp1 (%s) and sliding-window: HP1 attention "
                            "with a sliding window is not supported", l, key);
            return ANVIL_ERR_UNSUPPORTED;
        }
    }

    struct kn_hp1_params p = {.gamma = 1.0f, .lo = 0.0f, .hi = 1.0f, .relu = true};
    uint32_t k32 = 0;
    snprintf(key, sizeof(key), "%sfir_k", prefix);
    if (!gguf_find(L->f, key)) {
        loader_error(L, "model: required metadata %s is missing (hp1 layers)", key);
        return ANVIL_ERR_FORMAT;
    }
    if (!gguf_get_u32(L->f, key, &k32) || k32 < 1 || k32 > KN_HP1_MAX_TAPS) {
        loader_error(L, "model: metadata %s must be an integer in [1, %d]", key, KN_HP1_MAX_TAPS);
        return ANVIL_ERR_FORMAT;
    }
    p.n_taps = (int)k32;
    if (!hp1_scalar(L, "gamma", &p.gamma) || !hp1_scalar(L, "lo", &p.lo) ||
        !hp1_scalar(L, "hi", &p.hi))
        return ANVIL_ERR_FORMAT;
    if (p.lo > p.hi) {
        loader_error(L, "model: metadata %slo = %g is above %shi = %g", prefix, p.lo, prefix, p.hi);
        return ANVIL_ERR_FORMAT;
    }
    snprintf(key, sizeof(key), "%srelu", prefix);
    if (gguf_find(L->f, key) && !gguf_get_bool(L->f, key, &p.relu)) {
        loader_error(L, "model: metadata %s must be a bool", key);
        return ANVIL_ERR_FORMAT;
    }

    /* taps: (n_layer, n_head, K), f32 (or f64, converted) */
    snprintf(key, sizeof(key), "%staps", prefix);
    kv = gguf_find(L->f, key);
    uint64_t want = (uint64_t)hp->n_layer * (uint64_t)hp->n_head * (uint64_t)p.n_taps;
    if (!kv) {
        loader_error(L, "model: required metadata %s is missing (hp1 layers)", key);
        return ANVIL_ERR_FORMAT;
    }
    if (kv->type != GGUF_VT_ARRAY ||
        (kv->arr_type != GGUF_VT_FLOAT32 && kv->arr_type != GGUF_VT_FLOAT64) || kv->n != want) {
        loader_error(L, "model: metadata %s must be an array of %llu floats (n_layer %d x n_head "
                        "%d x fir_k %d)", key, (unsigned long long)want, hp->n_layer, hp->n_head,
                     p.n_taps);
        return ANVIL_ERR_FORMAT;
    }
    m->hp1_taps = core_malloc((size_t)want * sizeof(float));
    if (!m->hp1_taps) return ANVIL_ERR_NOMEM;
    for (uint64_t i = 0; i < want; i++) {
        float v;
        if (kv->arr_type == GGUF_VT_FLOAT32) {
            memcpy(&v, kv->data + i * 4, 4); /* the mapping need not align it */
        } else {
            double d;
            memcpy(&d, kv->data + i * 8, 8);
            v = (float)d;
        }
        if (!isfinite(v)) {
            int per_layer = hp->n_head * p.n_taps;
            loader_error(L, "model: metadata %s[%llu] (layer %d, head %d, tap %d) = %g is not "
                            "finite", key, (unsigned long long)i, (int)(i / (uint64_t)per_layer),
                         (int)(i % (uint64_t)per_layer) / p.n_taps, (int)(i % (uint64_t)p.n_taps), v);
            return ANVIL_ERR_FORMAT;
        }
        m->hp1_taps[i] = v;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        if (m->layers[l].attn != MODEL_ATTN_HP1) continue;
        m->layers[l].hp1 = p;
        m->layers[l].hp1.taps = m->hp1_taps + (size_t)l * hp->n_head * p.n_taps;
    }
    return ANVIL_OK;
}

/* Packing runs on every online CPU (a 1B model's 800 MB took a second on
 * one core): the tiles of a matrix are split in contiguous runs, one per
 * thread, which zeroes its run and then writes the rows that fall in it,
 * part by part. A tile is written by one thread only, and the bytes are
 * the same whatever the split. */
struct pack_job {
    const struct kn_ops *ops;
    int type, n_in;
    uint8_t *dst;
    size_t tile;        /* bytes per tile */
    int n_tiles;        /* of the whole packed matrix */
    const struct wmat *w;
    int p0, p1;         /* parts [p0, p1) go to this matrix */
};

static void pack_run(void *arg, int ith, int nth) {
    const struct pack_job *j = arg;
    int t0 = (int)((int64_t)j->n_tiles * ith / nth), t1 = (int)((int64_t)j->n_tiles * (ith + 1) / nth);
    if (t0 >= t1) return;
    memset(j->dst + (size_t)t0 * j->tile, 0, (size_t)(t1 - t0) * j->tile);
    int row0 = 0;
    for (int p = j->p0; p < j->p1; p++) {
        int rows = j->w->part[p].rows;
        int a = row0 > t0 * KN_PACK_ROWS ? row0 : t0 * KN_PACK_ROWS;
        int b = row0 + rows < t1 * KN_PACK_ROWS ? row0 + rows : t1 * KN_PACK_ROWS;
        if (a < b)
            j->ops->pack_rows(j->type, j->dst, j->n_in, a, b - a,
                              j->w->part[p].data + (size_t)(a - row0) * j->w->part[p].row_bytes,
                              j->w->part[p].row_bytes);
        row0 += rows;
    }
}

/* Parts [p0, p1) of w (of one type, rows stacked from 0) into dst. */
static void pack_into(const struct kn_ops *ops, struct pool *pool, const struct wmat *w, int p0, int p1,
                      uint8_t *dst, int type, int rows) {
    struct pack_job j = {.ops = ops, .type = type, .n_in = w->n_in, .dst = dst,
                         .tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in),
                         .n_tiles = (rows + KN_PACK_ROWS - 1) / KN_PACK_ROWS, .w = w, .p0 = p0, .p1 = p1};
    if (pool) pool_run(pool, pack_run, &j);
    else pack_run(&j, 0, 1);
}

/* Where the packed copies go: one buffer for all of them (core_malloc_huge:
 * huge pages, so a decode step that streams the whole model walks a few
 * hundred pages; with a buffer per matrix the Q/K/V parts and the o
 * projections, below its 8 MiB threshold, took 4 KiB pages: 12% of the 1B
 * shape's weights), each copy starting on a 4 KiB page. pack_weights runs
 * the packing twice: first with base NULL, which only adds up the sizes. */
struct pack_arena {
    uint8_t *base;
    size_t used;
};
static uint8_t *arena_take(struct pack_arena *a, size_t sz) {
    uint8_t *p = a->base ? a->base + a->used : NULL;
    a->used += (sz + 4095) & ~(size_t)4095;
    return p;
}

/* Parts of different types: each part whose type the kernels pack, on its
 * own (when every part starts on a tile boundary, as tile windows need). */
static void pack_parts(const struct kn_ops *ops, struct pool *pool, struct gguf_file *f, struct wmat *w,
                       struct pack_arena *a) {
    for (int p = 0; p < w->n_parts; p++)
        if (w->part[p].rows % KN_PACK_ROWS) return;
    for (int p = 0; p < w->n_parts; p++) {
        int type = w->part[p].type, rows = w->part[p].rows;
        size_t sz = ops->pack_size(type, rows, w->n_in);
        if (sz == 0) continue;
        uint8_t *dst = arena_take(a, sz);
        if (!dst) continue;
        pack_into(ops, pool, w, p, p + 1, dst, type, rows);
        gguf_release(f, w->part[p].data, (size_t)rows * w->part[p].row_bytes);
        w->part[p].packed = dst;
        w->part[p].packed_tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in);
    }
}

/* Copy w into the kernels' packed layout, if they have one for its type
 * (with a->base NULL: count its bytes only). */
static void pack_wmat(const struct kn_ops *ops, struct pool *pool, struct gguf_file *f, struct wmat *w,
                      struct pack_arena *a) {
    int type = w->part[0].type;
    for (int p = 1; p < w->n_parts; p++)
        if (w->part[p].type != type) {
            pack_parts(ops, pool, f, w, a);
            return;
        }
    size_t sz = ops->pack_size(type, w->n_out, w->n_in);
    if (sz == 0) return;
    uint8_t *dst = arena_take(a, sz);
    if (!dst) return;
    pack_into(ops, pool, w, 0, w->n_parts, dst, type, w->n_out);
    /* the copy serves every product from now on */
    for (int p = 0; p < w->n_parts; p++)
        gguf_release(f, w->part[p].data, (size_t)w->part[p].rows * w->part[p].row_bytes);
    w->packed = dst;
    w->packed_type = type;
    w->packed_tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in);
}

static void pack_all(struct anvil_model *m, struct pool *pool, struct pack_arena *a) {
    /* a tied lm_head is packed too: the embedding lookup then refaults
     * the few rows it reads from the file */
    pack_wmat(m->ops, pool, m->gguf, &m->output, a);
    for (int l = 0; l < m->hp.n_layer; l++) {
        struct model_layer *ly = &m->layers[l];
        pack_wmat(m->ops, pool, m->gguf, &ly->wqkv, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->wo, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->wgu, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->wdown, a);
    }
}

static anvil_status pack_weights(struct anvil_model *m) {
    if (!m->ops->pack_size) return ANVIL_OK;
    struct pack_arena a = {0};
    pack_all(m, NULL, &a); /* sizes only */
    if (a.used == 0) return ANVIL_OK;
    if (!(m->packed = core_malloc_huge(a.used))) return ANVIL_ERR_NOMEM;
    /* threads for the copy only; without them it runs on this one */
    struct pool *pool = NULL;
    int nth = cpu_count_online();
    if (nth > 1 && pool_create(nth > 64 ? 64 : nth, &pool) != ANVIL_OK) pool = NULL;
    size_t total = a.used;
    a = (struct pack_arena){.base = m->packed};
    pack_all(m, pool, &a);
    ANVIL_ASSERT(a.used == total);
    pool_free(pool);
    return ANVIL_OK;
}

anvil_status anvil_model_load(const char *path, const struct anvil_model_params *p,
                              struct anvil_model **out, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    struct anvil_model_params defaults = anvil_model_default_params();
    bool *swa = NULL;
    if (!p) p = &defaults;
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

    struct model_loader L = {.f = m->gguf, .err = err, .err_cap = err_cap};
    if (m->gguf->n_tensors == 0) {
        errmsg_set(err, err_cap,
                   "model: the file holds a vocabulary only (no weights): it can tokenize "
                   "(anvil tokenize), not run");
        TRY(ANVIL_ERR_UNSUPPORTED);
    }
    struct gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch)) {
        errmsg_set(err, err_cap, "model: required metadata general.architecture is missing");
        TRY(ANVIL_ERR_FORMAT);
    }
    m->arch = arch_find(arch.ptr, arch.len);
    if (!m->arch) {
        errmsg_set(err, err_cap, "model: architecture '%.*s' is not supported (anvil runs: %s)",
                   (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, arch_names());
        TRY(ANVIL_ERR_UNSUPPORTED);
    }
    L.arch = m->arch->name;

    m->ops = kn_select(p->kernels);
    if (!m->ops) {
        errmsg_set(err, err_cap, "model: kernels '%s' are unknown or not supported by this CPU",
                   p->kernels ? p->kernels : "(ANVIL_KERNELS)");
        TRY(ANVIL_ERR_UNSUPPORTED);
    }
    TRY(tok_load(m->gguf, &m->vocab, err, err_cap));
    TRY(load_hparams(&L, m->arch, &m->hp, m->vocab, &swa));
    TRY(load_weights(&L, m, swa));
    TRY(load_attn_kinds(&L, m, swa));
    TRY(pack_weights(m));
    core_free(swa);
    swa = NULL;
    m->n_params = L.n_params;
    int n_local = 0;
    for (int l = 0; l < m->hp.n_layer; l++) n_local += m->layers[l].n_swa > 0;
    char swa_desc[48] = "";
    if (n_local)
        snprintf(swa_desc, sizeof(swa_desc), " swa%d/%dL", m->hp.n_swa, n_local);
    if (m->n_hp1)
        snprintf(swa_desc + strlen(swa_desc), sizeof(swa_desc) - strlen(swa_desc), " hp1/%dL",
                 m->n_hp1);
    snprintf(m->desc, sizeof(m->desc), "%s %dL %dd %dh/%dkv hd%d ff%d%s %s (%.0fM params)",
             m->arch->name, m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv,
             m->hp.head_dim, m->hp.n_ff, swa_desc, anvil_type_name(m->wtype),
             (double)m->n_params / 1e6);
    *out = m;
    return ANVIL_OK;
fail:
    if (st == ANVIL_ERR_NOMEM && err && err_cap && !err[0]) errmsg_set(err, err_cap, "out of memory");
    core_free(swa);
    anvil_model_free(m);
    return st;
}

void anvil_model_free(struct anvil_model *m) {
    if (!m) return;
    core_free(m->inv_freq);
    core_free(m->inv_freq_swa);
    core_free(m->hp1_taps);
    core_free_aligned(m->packed);
    for (int l = 0; m->layers && l < m->hp.n_layer; l++) core_free(m->layers[l].qkv_bias);
    core_free(m->layers);
    tok_free(m->vocab);
    gguf_close(m->gguf);
    core_free(m);
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
