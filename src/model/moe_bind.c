/*
 * moe_bind.c - loading a mixture of experts: the hyperparameters
 * (<arch>.expert_count, expert_used_count, expert_feed_forward_length,
 * expert_shared_feed_forward_length, expert_weights_norm,
 * expert_weights_scale, expert_gating_func) and each layer's tensors as
 * llama.cpp's converter writes them:
 *
 *   blk.N.ffn_gate_inp.weight        router          [n_embd, n_expert]
 *   blk.N.ffn_gate_exps.weight       gate            [n_embd, n_ff_exp, n_expert]
 *   blk.N.ffn_up_exps.weight         up              [n_embd, n_ff_exp, n_expert]
 *   blk.N.ffn_down_exps.weight       down            [n_ff_exp, n_embd, n_expert]
 *   blk.N.ffn_{gate,up,down}_shexp   shared expert   [n_embd, n_ff_shexp] ...
 *   blk.N.ffn_gate_inp_shexp.weight  its gate        [n_embd]
 *   blk.N.ffn_gate_inp.bias, ffn_{gate,up}_exps.bias [n_ff_exp, n_expert],
 *   ffn_down_exps.bias [n_embd, n_expert]            biases (gpt-oss)
 *
 * Each expert is a slice of the 3-D tensors, bound as a wmat of its own
 * (gate and up stacked) so that packing and the matmuls treat it as any
 * matrix. Old Mixtral conversions with one 2-D tensor per expert
 * (blk.N.ffn_gate.E.weight) are refused with a message.
 */
#include <stdio.h>
#include <string.h>

#include "model/loader.h"
#include "model/moe.h"

anvil_status load_moe_hparams(struct model_loader *L, const struct arch_desc *arch,
                              struct model_hparams *hp) {
    uint32_t v = 0;
    char key[128];
    hp->n_expert = 0;
    if (loader_u32(L, "expert_count", &v, (arch->flags & ARCH_MOE) != 0)) hp->n_expert = (int)v;
    else if (loader_failed(L)) return ANVIL_ERR_FORMAT;
    snprintf(key, sizeof(key), "%s.expert_count", L->arch);
    if (hp->n_expert == 0) {
        if (arch->flags & ARCH_MOE) {
            loader_error(L, "model: %s must be at least 1 for %s", key, L->arch);
            return ANVIL_ERR_FORMAT;
        }
        return ANVIL_OK; /* dense */
    }
    if (hp->n_expert > 4096) {
        loader_error(L, "model: %s %d is out of range (1..4096)", key, hp->n_expert);
        return ANVIL_ERR_FORMAT;
    }
    if (!loader_u32(L, "expert_used_count", &v, true)) return ANVIL_ERR_FORMAT;
    if (v == 0 || (int64_t)v > hp->n_expert) {
        loader_error(L, "model: %s.expert_used_count %u must be in 1..expert_count (%d)", L->arch,
                     v, hp->n_expert);
        return ANVIL_ERR_FORMAT;
    }
    hp->n_expert_used = (int)v;
    hp->n_ff_exp = hp->n_ff;
    if (loader_u32(L, "expert_feed_forward_length", &v, false)) hp->n_ff_exp = (int)v;
    hp->n_ff_shexp = 0;
    if (loader_u32(L, "expert_shared_feed_forward_length", &v, false)) hp->n_ff_shexp = (int)v;
    if (hp->n_ff_exp < 1 || hp->n_ff_exp > 1 << 18 || hp->n_ff_shexp > 1 << 18) {
        loader_error(L, "model: %s.expert_feed_forward_length %d / shared %d out of range", L->arch,
                     hp->n_ff_exp, hp->n_ff_shexp);
        return ANVIL_ERR_FORMAT;
    }
    hp->moe_norm_w = (arch->flags & ARCH_MOE_NORM_W) != 0;
    snprintf(key, sizeof(key), "%s.expert_weights_norm", L->arch);
    bool b;
    if (gguf_get_bool(L->f, key, &b)) hp->moe_norm_w = b;
    else if (gguf_find(L->f, key)) {
        loader_error(L, "model: metadata %s must be a bool", key);
        return ANVIL_ERR_FORMAT;
    }
    hp->moe_w_scale = 1.0f;
    float sc;
    if (loader_f32(L, "expert_weights_scale", &sc)) {
        if (!(sc >= 0.0f && sc < 1e6f)) {
            loader_error(L, "model: %s.expert_weights_scale %g is out of range", L->arch, sc);
            return ANVIL_ERR_FORMAT;
        }
        hp->moe_w_scale = sc == 0.0f ? 1.0f : sc;
    }
    hp->moe_gating = (arch->flags & ARCH_MOE_GATING_SW) ? MODEL_GATING_SOFTMAX_WEIGHT
                                                        : MODEL_GATING_SOFTMAX;
    if (loader_u32(L, "expert_gating_func", &v, false)) {
        /* 3 (softmax over the top-k) only where the architecture was made
         * for it (gpt-oss): llama.cpp sets it per architecture */
        bool sw = (arch->flags & ARCH_MOE_GATING_SW) != 0;
        if (v != MODEL_GATING_SOFTMAX && v != MODEL_GATING_SIGMOID &&
            !(sw && v == MODEL_GATING_SOFTMAX_WEIGHT)) {
            loader_error(L, "model: %s.expert_gating_func %u is not supported (1 softmax, 2 sigmoid%s)",
                         L->arch, v, sw ? ", 3 softmax over the top-k" : "");
            return ANVIL_ERR_UNSUPPORTED;
        }
        hp->moe_gating = (enum model_gating)v;
    } else if (loader_failed(L)) {
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

/* The first of n MXFP4 blocks (17 bytes: the E8M0 scale byte, then 16
 * bytes of 4-bit codes) whose scale is 0xFF, E8M0's NaN (ggml would read
 * it as 2^128: inf), or -1. */
static int64_t mxfp4_bad_scale(const void *data, int64_t n) {
    const uint8_t *b = data;
    for (int64_t i = 0; i < n; i++)
        if (b[(size_t)i * 17] == 0xFF) return i;
    return -1;
}

/* A 3-D expert tensor [n_in, n_out, n_expert] of a type anvil multiplies,
 * with sane block scales. */
static const struct gguf_tensor *bind3(struct model_loader *L, const char *name, int n_in, int n_out,
                                       int n_expert) {
    const struct gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) {
        loader_error(L, "model: missing tensor %s", name);
        return NULL;
    }
    if (t->n_dims != 3 || (int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out ||
        (int64_t)t->ne[2] != n_expert) {
        loader_error(L, "model: tensor %s has the wrong shape (want [%d, %d, %d])", name, n_in,
                     n_out, n_expert);
        return NULL;
    }
    if (kn_act_for_type(t->type) < 0) {
        loader_error(L, "model: tensor %s has type %s, which anvil cannot multiply", name,
                     anvil_type_name(t->type) ? anvil_type_name(t->type) : "unknown");
        return NULL;
    }
    int64_t rows = (int64_t)n_out * n_expert;
    int64_t bad = kn_find_bad_scale(t->type, t->data, rows, n_in, gguf_row_size(t->type, (uint64_t)n_in));
    if (bad < 0 && t->type == ANVIL_TYPE_MXFP4) bad = mxfp4_bad_scale(t->data, rows * (n_in / 32));
    if (bad >= 0) {
        loader_error(L, "model: tensor %s: block %lld has a NaN or infinite scale", name, (long long)bad);
        return NULL;
    }
    L->n_params += (uint64_t)n_in * (uint64_t)rows;
    return t;
}

/* Expert e's rows of the 3-D tensors ts[0..n_parts) as one wmat. */
static bool expert_wmat(struct model_loader *L, struct wmat *w, int n_in, int n_out, int n_parts,
                        const struct gguf_tensor *const *ts, int e) {
    memset(w, 0, sizeof(*w));
    w->n_in = n_in;
    w->n_parts = n_parts;
    for (int p = 0; p < n_parts; p++) {
        int act = kn_act_for_type(ts[p]->type);
        int merged = p == 0 ? act : kn_act_merge(w->act, act);
        if (merged < 0) {
            loader_error(L, "model: tensors %s and %s need different activation formats",
                         ts[0]->name, ts[p]->name);
            return false;
        }
        w->act = merged;
        size_t rb = gguf_row_size(ts[p]->type, (uint64_t)n_in);
        w->part[p].data = (const uint8_t *)ts[p]->data + (size_t)e * n_out * rb;
        w->part[p].type = ts[p]->type;
        w->part[p].rows = n_out;
        w->part[p].row_bytes = rb;
        w->n_out += n_out;
    }
    for (int p = 0; p < n_parts; p++)
        w->part[p].act_off = kn_act_part_offset(w->act, kn_act_for_type(w->part[p].type), n_in);
    return true;
}

/* The router's and the experts' biases (gpt-oss): required with
 * ARCH_MOE_GATING_SW, else used when present. Gate and up biases are
 * stacked per expert as the expert's gate/up rows are. */
static anvil_status load_moe_biases(struct model_loader *L, struct model_moe *moe,
                                    const struct model_hparams *hp, int l, bool req) {
    int ne = hp->n_embd, nx = hp->n_expert, nff = hp->n_ff_exp;
    char name[96];
    float *g = NULL, *u = NULL;
    anvil_status st;
    snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.bias", l);
    if ((st = loader_floats(L, name, nx, 0, req, &moe->router_b)) != ANVIL_OK) return st;
    snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.bias", l);
    if ((st = loader_floats(L, name, ne, nx, req, &moe->down_b)) != ANVIL_OK) return st;
    snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.bias", l);
    if ((st = loader_floats(L, name, nff, nx, req, &g)) != ANVIL_OK) return st;
    snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.bias", l);
    if ((st = loader_floats(L, name, nff, nx, req || g, &u)) != ANVIL_OK) {
        core_free(g);
        return st;
    }
    if (g && !u) { /* can't happen: up is required once gate exists */
        core_free(g);
        return ANVIL_ERR_FORMAT;
    }
    if (u && !g) {
        core_free(u);
        loader_error(L, "model: blk.%d.ffn_up_exps.bias without ffn_gate_exps.bias", l);
        return ANVIL_ERR_FORMAT;
    }
    if (g) {
        moe->gu_b = core_malloc((size_t)nx * 2 * nff * sizeof(float));
        if (!moe->gu_b) st = ANVIL_ERR_NOMEM;
        else
            for (int e = 0; e < nx; e++) {
                memcpy(moe->gu_b + (size_t)e * 2 * nff, g + (size_t)e * nff, (size_t)nff * sizeof(float));
                memcpy(moe->gu_b + (size_t)e * 2 * nff + nff, u + (size_t)e * nff,
                       (size_t)nff * sizeof(float));
            }
    }
    core_free(g);
    core_free(u);
    return st;
}

static anvil_status load_moe_layer(struct model_loader *L, const struct model_hparams *hp,
                                   struct model_layer *ly, int l, bool bias_req) {
    char n0[96], n1[96], n2[96];
    int ne = hp->n_embd, nx = hp->n_expert, nff = hp->n_ff_exp, nsh = hp->n_ff_shexp;
    snprintf(n0, sizeof(n0), "blk.%d.ffn_gate.0.weight", l);
    if (gguf_find_tensor(L->f, n0)) {
        loader_error(L, "model: %s: one tensor per expert is an old conversion; anvil reads the "
                        "3-D blk.N.ffn_*_exps tensors (convert the model again)", n0);
        return ANVIL_ERR_UNSUPPORTED;
    }
    struct model_moe *moe = core_calloc(1, sizeof(*moe));
    if (!moe) return ANVIL_ERR_NOMEM;
    ly->moe = moe;
    moe->gu = core_calloc((size_t)nx, sizeof(struct wmat));
    moe->down = core_calloc((size_t)nx, sizeof(struct wmat));
    if (!moe->gu || !moe->down) return ANVIL_ERR_NOMEM;

    snprintf(n0, sizeof(n0), "blk.%d.ffn_gate_inp.weight", l);
    const char *rn[1] = {n0};
    int rrows[1] = {nx};
    if (!loader_bind_wmat(L, &moe->router, ne, 1, rn, rrows)) return ANVIL_ERR_FORMAT;

    snprintf(n0, sizeof(n0), "blk.%d.ffn_gate_exps.weight", l);
    snprintf(n1, sizeof(n1), "blk.%d.ffn_up_exps.weight", l);
    snprintf(n2, sizeof(n2), "blk.%d.ffn_down_exps.weight", l);
    const struct gguf_tensor *tg = bind3(L, n0, ne, nff, nx);
    if (!tg) return ANVIL_ERR_FORMAT;
    const struct gguf_tensor *tu = bind3(L, n1, ne, nff, nx);
    if (!tu) return ANVIL_ERR_FORMAT;
    const struct gguf_tensor *td = bind3(L, n2, nff, ne, nx);
    if (!td) return ANVIL_ERR_FORMAT;
    const struct gguf_tensor *gu[2] = {tg, tu};
    for (int e = 0; e < nx; e++) {
        if (!expert_wmat(L, &moe->gu[e], ne, nff, 2, gu, e)) return ANVIL_ERR_FORMAT;
        if (!expert_wmat(L, &moe->down[e], nff, ne, 1, &td, e)) return ANVIL_ERR_FORMAT;
    }
    anvil_status st = load_moe_biases(L, moe, hp, l, bias_req);
    if (st != ANVIL_OK) return st;

    /* the shared expert: its length from the file, or from the tensor */
    snprintf(n0, sizeof(n0), "blk.%d.ffn_gate_shexp.weight", l);
    snprintf(n1, sizeof(n1), "blk.%d.ffn_up_shexp.weight", l);
    snprintf(n2, sizeof(n2), "blk.%d.ffn_down_shexp.weight", l);
    bool has_sh = gguf_find_tensor(L->f, n0) || gguf_find_tensor(L->f, n1) ||
                  gguf_find_tensor(L->f, n2);
    if (has_sh && nsh == 0) {
        loader_error(L, "model: %s has a shared expert but %s.expert_shared_feed_forward_length "
                        "is missing", n0, L->arch);
        return ANVIL_ERR_FORMAT;
    }
    if (!has_sh && nsh > 0) {
        loader_error(L, "model: missing tensor %s (expert_shared_feed_forward_length is %d)", n0, nsh);
        return ANVIL_ERR_FORMAT;
    }
    if (has_sh) {
        const char *sgu[2] = {n0, n1};
        int srows[2] = {nsh, nsh};
        if (!loader_bind_wmat(L, &moe->sh_gu, ne, 2, sgu, srows)) return ANVIL_ERR_FORMAT;
        const char *sdn[1] = {n2};
        int drows[1] = {ne};
        if (!loader_bind_wmat(L, &moe->sh_down, nsh, 1, sdn, drows)) return ANVIL_ERR_FORMAT;
        snprintf(n0, sizeof(n0), "blk.%d.ffn_gate_inp_shexp.weight", l);
        const struct gguf_tensor *t = gguf_find_tensor(L->f, n0);
        if (t) {
            bool vec = (t->n_dims == 1 && (int)t->ne[0] == ne) ||
                       (t->n_dims == 2 && (int)t->ne[0] == ne && t->ne[1] == 1);
            if (!vec || (t->type != ANVIL_TYPE_F32 && t->type != ANVIL_TYPE_F16 &&
                         t->type != ANVIL_TYPE_BF16)) {
                loader_error(L, "model: tensor %s must be an F32/F16/BF16 vector of %d", n0, ne);
                return ANVIL_ERR_FORMAT;
            }
            if (!(moe->sh_gate = core_malloc((size_t)ne * sizeof(float)))) return ANVIL_ERR_NOMEM;
            kn_dequantize_row(t->type, t->data, moe->sh_gate, ne);
            L->n_params += (uint64_t)ne;
        }
    }
    return ANVIL_OK;
}

anvil_status load_moe_layers(struct model_loader *L, struct anvil_model *m) {
    if (m->hp.n_expert == 0) return ANVIL_OK;
    for (int l = 0; l < m->hp.n_layer; l++) {
        anvil_status st = load_moe_layer(L, &m->hp, &m->layers[l], l,
                                         (m->arch->flags & ARCH_MOE_GATING_SW) != 0);
        if (st != ANVIL_OK) return st;
    }
    m->wtype = m->layers[0].moe->gu[0].part[0].type;
    return ANVIL_OK;
}
