/*
 * model_attn.c - which attention each layer runs: the softmax, or HP1
 * gated attention, whose parameters the HP1 part of the attention room
 * reads (attn/hp1/hp1_meta.h; a build without HP1 refuses such a model
 * there); and the softmax's attention sinks and output bias (gpt-oss:
 * blk.N.attn_sinks.weight, n_head logits; blk.N.attn_output.bias).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn/hp1/hp1_meta.h"
#include "model/loader.h"

/* ---------------------------------------------------------------------- */
/* attention kinds (docs/attention.md)
 *
 *   <arch>.attention.kind        string "softmax" | "hp1" (every layer), or an
 *                                array of n_layer such strings; absent = softmax
 *   <arch>.attention.hp1.*       the HP1 configuration (attn/hp1/hp1_meta.h)
 * HP1 keys with no HP1 layer are refused: most likely a converter that
 * forgot the kind, and running softmax would be silently wrong. */

static bool attn_kind_parse(struct gguf_str s, enum model_attn *out) {
    if (gguf_str_eq(s, "softmax")) *out = MODEL_ATTN_SOFTMAX;
    else if (gguf_str_eq(s, "hp1")) *out = MODEL_ATTN_HP1;
    else return false;
    return true;
}

anvil_status loader_floats(struct model_loader *L, const char *name, int64_t n0, int64_t n1,
                           bool required, float **out) {
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) {
        if (!required) return ANVIL_OK;
        loader_error(L, "model: missing tensor %s", name);
        return ANVIL_ERR_FORMAT;
    }
    bool shape = n1 == 0 ? (t->n_dims == 1 || (t->n_dims == 2 && t->ne[1] == 1)) && (int64_t)t->ne[0] == n0
                         : t->n_dims == 2 && (int64_t)t->ne[0] == n0 && (int64_t)t->ne[1] == n1;
    if (!shape || (t->type != ANVIL_TYPE_F32 && t->type != ANVIL_TYPE_F16 &&
                   t->type != ANVIL_TYPE_BF16)) {
        if (n1 == 0)
            loader_error(L, "model: tensor %s must be an F32/F16/BF16 vector of %lld", name,
                         (long long)n0);
        else
            loader_error(L, "model: tensor %s must be F32/F16/BF16 of shape [%lld, %lld]", name,
                         (long long)n0, (long long)n1);
        return ANVIL_ERR_FORMAT;
    }
    int64_t rows = n1 == 0 ? 1 : n1;
    float *f = core_malloc((size_t)(n0 * rows) * sizeof(float));
    if (!f) return ANVIL_ERR_NOMEM;
    size_t rb = gguf_row_size(t->type, (uint64_t)n0);
    for (int64_t r = 0; r < rows; r++)
        kn_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, f + r * n0, (int)n0);
    for (int64_t i = 0; i < n0 * rows; i++)
        if (!isfinite(f[i])) {
            loader_error(L, "model: tensor %s: element %lld is %g (finite values only)", name,
                         (long long)i, f[i]);
            core_free(f);
            return ANVIL_ERR_FORMAT;
        }
    L->n_params += (uint64_t)(n0 * rows);
    *out = f;
    return ANVIL_OK;
}

/* Every layer's attn_sinks and attn_output.bias: required with
 * ARCH_ATTN_SINKS, used whenever present otherwise. */
static anvil_status load_attn_sinks(struct model_loader *L, struct anvil_model *m) {
    const struct model_hparams *hp = &m->hp;
    bool req = (m->arch->flags & ARCH_ATTN_SINKS) != 0;
    char name[96];
    for (int l = 0; l < hp->n_layer; l++) {
        struct model_layer *ly = &m->layers[l];
        snprintf(name, sizeof(name), "blk.%d.attn_sinks.weight", l);
        anvil_status st = loader_floats(L, name, hp->n_head, 0, req, &ly->attn_sinks);
        if (st != ANVIL_OK) return st;
        if (ly->attn_sinks && ly->attn != MODEL_ATTN_SOFTMAX) {
            loader_error(L, "model: %s: attention sinks on a layer that is not softmax attention", name);
            return ANVIL_ERR_UNSUPPORTED;
        }
        snprintf(name, sizeof(name), "blk.%d.attn_output.bias", l);
        if ((st = loader_floats(L, name, hp->n_embd, 0, req, &ly->wo_bias)) != ANVIL_OK) return st;
    }
    return ANVIL_OK;
}

static anvil_status load_attn_kinds_only(struct model_loader *L, struct anvil_model *m,
                                         const bool *swa);

anvil_status load_attn_kinds(struct model_loader *L, struct anvil_model *m, const bool *swa) {
    anvil_status st = load_attn_kinds_only(L, m, swa);
    return st != ANVIL_OK ? st : load_attn_sinks(L, m);
}

static anvil_status load_attn_kinds_only(struct model_loader *L, struct anvil_model *m,
                                         const bool *swa) {
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

    struct kn_hp1_params p;
    anvil_status st = hp1_meta_load(L->f, L->arch, hp->n_layer, hp->n_head, &p, &m->hp1_taps,
                                    L->err, L->err_cap);
    if (st != ANVIL_OK) {
        L->failed = true;
        return st;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        if (m->layers[l].attn != MODEL_ATTN_HP1) continue;
        m->layers[l].hp1 = p;
        m->layers[l].hp1.taps = m->hp1_taps + (size_t)l * hp->n_head * p.n_taps;
    }
    return ANVIL_OK;
}
