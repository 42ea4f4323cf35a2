/*
 * model_bind.c - the loader's reading steps: the hyperparameters (common
 * keys, RoPE scaling, then the architecture's hook), and every weight
 * bound by name with its shape and type checked (multi-part matrices
 * such as QKV and gate/up only point into gguf's read-only mapping), the
 * Q/K/V biases stacked into one vector per layer, and the RoPE
 * frequencies. Also the loader helpers the architecture hooks call
 * (model/arch.h).
 *
 * Reference: llama.cpp's tensor names (LLM_TENSOR_*) and hparams keys
 * (LLM_KV_*), which GGUF files of every architecture use.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/loader.h"

/* ---------------------------------------------------------------------- */
/* loading */


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

const struct gguf_tensor *loader_bind(struct model_loader *L, const char *name, int64_t n_in,
                                      int64_t n_out, bool required) {
    return bind(L, name, n_in, n_out, required);
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

bool loader_bind_wmat(struct model_loader *L, struct wmat *w, int n_in, int n_parts,
                      const char *const *names, const int *rows) {
    return bind_wmat(L, w, n_in, n_parts, names, rows);
}

/* YaRN (rope.scaling.type "yarn"): the factor, the original context
 * (rope.scaling.original_context_length, default the training context),
 * yarn_beta_fast / yarn_beta_slow (32 / 1), yarn_ext_factor (1) and the
 * attention factor (rope.scaling.attn_factor, 1) as llama.cpp reads them;
 * rope_freqs mixes the frequencies and load_hparams folds the magnitude
 * scale into attn_scale (model.h). */
static anvil_status load_rope_yarn(struct model_loader *L, struct model_hparams *hp, float factor) {
    uint32_t v = 0;
    hp->yarn_factor = factor;
    hp->yarn_orig_ctx = hp->n_ctx_train;
    if (loader_u32(L, "rope.scaling.original_context_length", &v, false)) hp->yarn_orig_ctx = (int)v;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->yarn_ext_factor = 1.0f;
    hp->yarn_attn_factor = 1.0f;
    loader_f32(L, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast);
    loader_f32(L, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow);
    loader_f32(L, "rope.scaling.yarn_ext_factor", &hp->yarn_ext_factor);
    loader_f32(L, "rope.scaling.attn_factor", &hp->yarn_attn_factor);
    if (!(factor >= 1.0f && factor <= 1024.0f) || hp->yarn_orig_ctx < 1 ||
        !(hp->yarn_beta_fast > 0.0f && hp->yarn_beta_fast < 1e6f) ||
        !(hp->yarn_beta_slow > 0.0f && hp->yarn_beta_slow < 1e6f) ||
        !(hp->yarn_ext_factor >= 0.0f && hp->yarn_ext_factor <= 1.0f) ||
        !(hp->yarn_attn_factor > 0.0f && hp->yarn_attn_factor < 100.0f)) {
        loader_error(L, "model: YaRN parameters out of range (rope.scaling.factor %g in [1, 1024], "
                        "original_context_length %d, yarn_beta_fast %g, yarn_beta_slow %g, "
                        "yarn_ext_factor %g, attn_factor %g)",
                     factor, hp->yarn_orig_ctx, hp->yarn_beta_fast, hp->yarn_beta_slow,
                     hp->yarn_ext_factor, hp->yarn_attn_factor);
        return ANVIL_ERR_FORMAT;
    }
    hp->rope_scale = 1.0f / factor;
    return ANVIL_OK;
}

/* RoPE scaling: none, linear (freq scale = 1/factor) or YaRN. */
static anvil_status load_rope_scaling(struct model_loader *L, struct model_hparams *hp) {
    char key[128];
    snprintf(key, sizeof(key), "%s.rope.scaling.type", L->arch);
    struct gguf_str type;
    float factor = 0.0f;
    bool has_factor = loader_f32(L, "rope.scaling.factor", &factor);
    if (gguf_get_str(L->f, key, &type) && !gguf_str_eq(type, "none")) {
        if (gguf_str_eq(type, "yarn")) return load_rope_yarn(L, hp, has_factor ? factor : 1.0f);
        if (!gguf_str_eq(type, "linear")) {
            loader_error(L, "model: RoPE scaling '%.*s' is not supported (none, linear or yarn)",
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

anvil_status load_hparams(struct model_loader *L, const struct arch_desc *arch,
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
    hp->residual_scale = 1.0f;
    hp->logit_scale = 1.0f;
    hp->qk_norm_full = (arch->flags & ARCH_QK_NORM_FULL) != 0;
    hp->bidir = (arch->flags & ARCH_BIDIR) != 0;

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
    if (hp->yarn_factor > 0.0f) {
        /* YaRN scales cos and sin of the rotated dims by mscale: with every
         * dim rotated that is q.k times mscale^2 */
        if (hp->n_rot != hp->head_dim) {
            loader_error(L, "model: YaRN RoPE with partial rotary (rope.dimension_count %d < "
                            "head_dim %d) is not supported", hp->n_rot, hp->head_dim);
            return ANVIL_ERR_UNSUPPORTED;
        }
        float ms = hp->yarn_attn_factor;
        if (hp->yarn_ext_factor != 0.0f) ms *= 1.0f + 0.1f * logf(hp->yarn_factor);
        hp->attn_scale *= ms * ms;
    }
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
    snprintf(n0, sizeof(n0),
             (arch->flags & ARCH_FFN_NORM_POST_ATTN) ? "blk.%d.post_attention_norm.weight"
                                                     : "blk.%d.ffn_norm.weight", l);
    if (!(ly->ffn_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
    if (arch->flags & ARCH_POST_NORMS) {
        snprintf(n0, sizeof(n0), "blk.%d.post_attention_norm.weight", l);
        if (!(ly->attn_post_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
        snprintf(n0, sizeof(n0), "blk.%d.post_ffw_norm.weight", l);
        if (!(ly->ffn_post_norm = bind_norm(L, n0, hp->n_embd, true))) return ANVIL_ERR_FORMAT;
    }
    if (arch->flags & ARCH_QK_NORM) {
        snprintf(n0, sizeof(n0), "blk.%d.attn_q_norm.weight", l);
        bool full = hp->qk_norm_full;
        if (!(ly->q_norm = bind_norm(L, n0, full ? q_dim : hp->head_dim, true)))
            return ANVIL_ERR_FORMAT;
        snprintf(n0, sizeof(n0), "blk.%d.attn_k_norm.weight", l);
        if (!(ly->k_norm = bind_norm(L, n0, full ? kv_dim : hp->head_dim, true)))
            return ANVIL_ERR_FORMAT;
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

    if (hp->n_expert > 0) {
        /* a mixture of experts: moe_bind.c (load_moe_layers) */
    } else if (arch->flags & ARCH_FUSED_GATE_UP) {
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
    if (hp->n_expert == 0) {
        snprintf(n0, sizeof(n0), "blk.%d.ffn_down.weight", l);
        const char *dn[1] = {n0};
        int dn_rows[1] = {hp->n_embd};
        if (!bind_wmat(L, &ly->wdown, hp->n_ff, 1, dn, dn_rows)) return ANVIL_ERR_FORMAT;
    }

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
    /* YaRN: dims below lo keep the original frequency, dims above hi the
     * interpolated one, a linear ramp between (ggml's corr dims) */
    double y_lo = 0.0, y_hi = 0.0;
    bool yarn = hp->yarn_factor > 0.0f && hp->yarn_ext_factor != 0.0f;
    if (yarn) {
        double n = hp->n_rot, two_pi = 2.0 * 3.14159265358979323846;
        double d_fast = n * log(hp->yarn_orig_ctx / (hp->yarn_beta_fast * two_pi)) / (2.0 * log(base));
        double d_slow = n * log(hp->yarn_orig_ctx / (hp->yarn_beta_slow * two_pi)) / (2.0 * log(base));
        y_lo = floor(d_fast) > 0.0 ? floor(d_fast) : 0.0;
        y_hi = ceil(d_slow) < n - 1 ? ceil(d_slow) : n - 1;
    }
    for (int i = 0; i < half; i++) {
        double v = (double)scale * pow((double)base, -2.0 * i / hp->n_rot);
        if (yarn) {
            double span = y_hi - y_lo > 0.001 ? y_hi - y_lo : 0.001;
            double ramp = (i - y_lo) / span;
            ramp = 1.0 - (ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp);
            double mix = ramp * hp->yarn_ext_factor;
            v = v * (1.0 - mix) + pow((double)base, -2.0 * i / hp->n_rot) * mix;
        }
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

anvil_status load_weights(struct model_loader *L, struct anvil_model *m, const bool *swa) {
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
    m->wtype = m->layers[0].wgu.part[0].type; /* a MoE's: set by load_moe_layers */
    return ANVIL_OK;
fail:
    return st;
}
