/*
 * hp1_meta.c - read and check a model's HP1 configuration from its GGUF
 * metadata (hp1_meta.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn/hp1/hp1_meta.h"
#include "core/core.h"

/* where the keys come from and where an error goes */
struct hp1_src {
    const struct gguf_file *f;
    const char *arch;
    char *err;
    size_t err_cap;
};

/* Optional finite f32 <arch>.attention.hp1.<name>; false (error set) when
 * present with another type or not finite. */
static bool hp1_scalar(const struct hp1_src *L, const char *name, float *v) {
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.hp1.%s", L->arch, name);
    if (!gguf_find(L->f, key)) return true;
    if (!gguf_get_f32(L->f, key, v)) {
        errmsg_set(L->err, L->err_cap, "model: metadata %s must be a float", key);
        return false;
    }
    if (!isfinite(*v)) {
        errmsg_set(L->err, L->err_cap, "model: metadata %s = %g is not finite", key, *v);
        return false;
    }
    return true;
}

anvil_status hp1_meta_load(const struct gguf_file *f, const char *arch, int n_layer, int n_head,
                           struct kn_hp1_params *params, float **taps_out, char *err,
                           size_t err_cap) {
    const struct hp1_src src = {f, arch, err, err_cap}, *L = &src;
    char key[128], prefix[96];
    snprintf(prefix, sizeof(prefix), "%s.attention.hp1.", arch);
    struct kn_hp1_params p = {.gamma = 1.0f, .lo = 0.0f, .hi = 1.0f, .relu = true};
    uint32_t k32 = 0;
    snprintf(key, sizeof(key), "%sfir_k", prefix);
    if (!gguf_find(L->f, key)) {
        errmsg_set(L->err, L->err_cap, "model: required metadata %s is missing (hp1 layers)", key);
        return ANVIL_ERR_FORMAT;
    }
    if (!gguf_get_u32(L->f, key, &k32) || k32 < 1 || k32 > KN_HP1_MAX_TAPS) {
        errmsg_set(L->err, L->err_cap, "model: metadata %s must be an integer in [1, %d]", key, KN_HP1_MAX_TAPS);
        return ANVIL_ERR_FORMAT;
    }
    p.n_taps = (int)k32;
    if (!hp1_scalar(L, "gamma", &p.gamma) || !hp1_scalar(L, "lo", &p.lo) ||
        !hp1_scalar(L, "hi", &p.hi))
        return ANVIL_ERR_FORMAT;
    if (p.lo > p.hi) {
        errmsg_set(L->err, L->err_cap, "model: metadata %slo = %g is above %shi = %g", prefix, p.lo, prefix, p.hi);
        return ANVIL_ERR_FORMAT;
    }
    snprintf(key, sizeof(key), "%srelu", prefix);
    if (gguf_find(L->f, key) && !gguf_get_bool(L->f, key, &p.relu)) {
        errmsg_set(L->err, L->err_cap, "model: metadata %s must be a bool", key);
        return ANVIL_ERR_FORMAT;
    }

    /* taps: (n_layer, n_head, K), f32 (or f64, converted) */
    snprintf(key, sizeof(key), "%staps", prefix);
    const struct gguf_kv *kv = gguf_find(L->f, key);
    uint64_t want = (uint64_t)n_layer * (uint64_t)n_head * (uint64_t)p.n_taps;
    if (!kv) {
        errmsg_set(L->err, L->err_cap, "model: required metadata %s is missing (hp1 layers)", key);
        return ANVIL_ERR_FORMAT;
    }
    if (kv->type != GGUF_VT_ARRAY ||
        (kv->arr_type != GGUF_VT_FLOAT32 && kv->arr_type != GGUF_VT_FLOAT64) || kv->n != want) {
        errmsg_set(L->err, L->err_cap, "model: metadata %s must be an array of %llu floats (n_layer %d x n_head "
                        "%d x fir_k %d)", key, (unsigned long long)want, n_layer, n_head,
                     p.n_taps);
        return ANVIL_ERR_FORMAT;
    }
    float *taps = core_malloc((size_t)want * sizeof(float));
    if (!taps) return ANVIL_ERR_NOMEM;
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
            int per_layer = n_head * p.n_taps;
            errmsg_set(L->err, L->err_cap, "model: metadata %s[%llu] (layer %d, head %d, tap %d) = %g is not "
                            "finite", key, (unsigned long long)i, (int)(i / (uint64_t)per_layer),
                         (int)(i % (uint64_t)per_layer) / p.n_taps, (int)(i % (uint64_t)p.n_taps), v);
            core_free(taps);
            return ANVIL_ERR_FORMAT;
        }
        taps[i] = v;
    }
    *params = p;
    *taps_out = taps;
    return ANVIL_OK;
}
