/*
 * mix.c - quantization mixes by name: which type every tensor of a model
 * gets under Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, Q2_K, ... The rules are
 * llama.cpp's (src/llama-quant.cpp, llama_tensor_get_type and
 * tensor_type_fallback, in the llama-cpp-python 0.3.36 sdist), so a file
 * anvil writes has the same tensor types as llama-quantize's on the same
 * input; tests/py/test_quantize_mix.py checks that tensor by tensor.
 *
 * The rule, for a mix with base type B:
 *   - Quantized at all: matrices (two or more dims that are not 1) whose
 *     name ends in "weight", except norms, MoE router and a few small
 *     tensors of other architectures (see skip[] below). Other matrices
 *     are copied; 1-D tensors become F32 (anvil's model loader wants F32
 *     norms; llama.cpp would keep their type, which is F32 in practice).
 *   - F32/F16/BF16 mixes: every quantized matrix becomes B.
 *   - Quantized mixes, per tensor category (name match):
 *       output.weight, and token_embd.weight when there is no output
 *       (tied): Q8_0 if its row does not divide into B's blocks (or the
 *       arch is falcon), else Q6_K unless B is Q8_0;
 *       attn_v (and attn_qkv, attn_kv_b), counting them in layer order
 *       i of n: Q2_K -> Q4_K if n_head/n_head_kv >= 4 else Q3_K;
 *       Q3_K_M -> Q5_K for i < 2 else Q4_K; Q3_K_L -> Q5_K;
 *       IQ4_NL/IQ4_XS -> Q5_K if n_head/n_head_kv >= 4; Q4_K_M/Q5_K_M ->
 *       Q6_K when more_bits(i, n); Q4_K_S -> Q5_K for i < 4; then Q3_K or
 *       Q4_K -> Q5_K on a 70B llama (80 layers, grouped KV), and Q8_0
 *       with 8 experts;
 *       attn_k: Q8_0 with 8 experts;
 *       ffn_down, layer i of n (its count in layer order; the layer in
 *       the name for MoE): Q2_K -> Q3_K; Q3_K_M -> Q5_K for i < n/16,
 *       else Q4_K (falcon: Q4_K only when more_bits, else Q3_K); Q3_K_L
 *       -> Q5_K (falcon Q4_K); Q4_K_M -> Q6_K when more_bits (falcon:
 *       Q6_K for i < n/16, Q5_K when more_bits, else Q4_K); IQ4_NL/IQ4_XS
 *       -> Q5_K for i < n/8; Q5_K_M -> Q6_K when more_bits; Q4_K_S ->
 *       Q5_K for i < n/8 (not falcon);
 *       attn_output: with 8 experts Q5_K for the K/IQ4 mixes below Q5;
 *       otherwise Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K (falcon:
 *       Q3_K_L -> Q4_K);
 *       everything else: B.
 *     MXFP4_MOE (gpt-oss's own mix) has none of the above: the stacked
 *     expert matrices (a third dimension > 1) become MXFP4, every other
 *     quantized matrix Q8_0.
 *     more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
 *     "Layer order" is llama.cpp's: tensors sorted by block number, then
 *     by name.
 *   - A pure mix (the bare type names Q3_K, Q4_K, Q5_K, or --pure) skips
 *     the per-category rules: every matrix gets B.
 *   - Shape fallback, last: when the row length does not divide into the
 *     chosen type's blocks, Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K ->
 *     Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; if that still does not
 *     divide (the row is not a multiple of 32), F16.
 * SmolLM2 (576-wide rows) and Gemma 3 270M (640) hit the fallback on most
 * matrices; Llama-3.2-1B's shapes (2048, 8192) never do.
 *
 * Not supported (ANVIL_ERR_UNSUPPORTED naming the mix): the IQ1/IQ2/IQ3
 * mixes and Q2_K_S, which need an importance matrix or grids anvil does
 * not write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/gguf.h"
#include "quantize/quantize_int.h"

enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14,
    FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ4_NL = 25,
    FT_IQ4_XS = 30, FT_BF16 = 32, FT_MXFP4_MOE = 38,
};

static const struct qt_mix mixes[] = {
    {"F32", FT_F32, ANVIL_TYPE_F32, false},
    {"F16", FT_F16, ANVIL_TYPE_F16, false},
    {"BF16", FT_BF16, ANVIL_TYPE_BF16, false},
    {"Q8_0", FT_Q8_0, ANVIL_TYPE_Q8_0, false},
    {"Q4_0", FT_Q4_0, ANVIL_TYPE_Q4_0, false},
    {"Q4_1", FT_Q4_1, ANVIL_TYPE_Q4_1, false},
    {"Q5_0", FT_Q5_0, ANVIL_TYPE_Q5_0, false},
    {"Q5_1", FT_Q5_1, ANVIL_TYPE_Q5_1, false},
    {"Q2_K", FT_Q2_K, ANVIL_TYPE_Q2_K, false},
    {"Q3_K_S", FT_Q3_K_S, ANVIL_TYPE_Q3_K, false},
    {"Q3_K_M", FT_Q3_K_M, ANVIL_TYPE_Q3_K, false},
    {"Q3_K_L", FT_Q3_K_L, ANVIL_TYPE_Q3_K, false},
    {"Q4_K_S", FT_Q4_K_S, ANVIL_TYPE_Q4_K, false},
    {"Q4_K_M", FT_Q4_K_M, ANVIL_TYPE_Q4_K, false},
    {"Q5_K_S", FT_Q5_K_S, ANVIL_TYPE_Q5_K, false},
    {"Q5_K_M", FT_Q5_K_M, ANVIL_TYPE_Q5_K, false},
    {"Q6_K", FT_Q6_K, ANVIL_TYPE_Q6_K, false},
    {"IQ4_NL", FT_IQ4_NL, ANVIL_TYPE_IQ4_NL, false},
    {"IQ4_XS", FT_IQ4_XS, ANVIL_TYPE_IQ4_XS, false},
    {"MXFP4_MOE", FT_MXFP4_MOE, ANVIL_TYPE_MXFP4, false},
    /* bare K types: every matrix that type; file_type says "small" */
    {"Q3_K", FT_Q3_K_S, ANVIL_TYPE_Q3_K, true},
    {"Q4_K", FT_Q4_K_S, ANVIL_TYPE_Q4_K, true},
    {"Q5_K", FT_Q5_K_S, ANVIL_TYPE_Q5_K, true},
};
#define N_MIXES (sizeof(mixes) / sizeof(mixes[0]))

const struct qt_mix *qt_mix_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_MIXES; i++)
        if (!strcasecmp(name, mixes[i].name)) return &mixes[i];
    return NULL;
}

const char *qt_mix_names(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, "
           "Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE, Q3_K, Q4_K, Q5_K";
}

// ----------------------------------------------------------------------------
// tensors

enum cat {
    CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_QKV, CAT_ATTN_KV_B,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER,
};

static enum cat category(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return CAT_TOKEN_EMBD;
    /* first match wins, in this order (attn_kv_b before attn_v, ...) */
    static const struct {
        const char *sub;
        enum cat c;
    } by_sub[] = {
        {"attn_qkv.weight", CAT_ATTN_QKV},       {"attn_kv_b.weight", CAT_ATTN_KV_B},
        {"attn_v.weight", CAT_ATTN_V},           {"attn_k.weight", CAT_ATTN_K},
        {"attn_q.weight", CAT_ATTN_Q},           {"attn_output.weight", CAT_ATTN_OUTPUT},
        {"ffn_up", CAT_FFN_UP},                  {"ffn_gate", CAT_FFN_GATE},
        {"ffn_down", CAT_FFN_DOWN},
    };
    for (size_t i = 0; i < sizeof(by_sub) / sizeof(by_sub[0]); i++)
        if (strstr(name, by_sub[i].sub)) return by_sub[i].c;
    return CAT_OTHER;
}

static bool is_attn_v(enum cat c) {
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

static uint32_t eff_dims(const struct gguf_tensor *t) {
    uint32_t n = t->n_dims;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

/* Matrices llama.cpp never quantizes, by name (the ones that can occur in
 * the architectures it reads; substring match unless noted). */
static bool allows_quantization(const struct gguf_tensor *t) {
    static const char *const skip[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
        "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
        "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
        ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
        ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    if (eff_dims(t) < 2) return false;
    size_t len = strlen(t->name);
    if (len < 6 || strcmp(t->name + len - 6, "weight") != 0) return false;
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
        if (strstr(t->name, skip[i])) return false;
    /* exact names: positional and token-type embeddings (BERT) */
    if (!strcmp(t->name, "position_embd.weight") || !strcmp(t->name, "token_types.weight"))
        return false;
    return true;
}

static int layer_of(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) return -1;
    return l;
}

/* llama.cpp's tensor order: by block number (-1 for the others), then name */
struct ord {
    int layer;
    const char *name;
    uint64_t index;
};
static int by_layer_then_name(const void *a, const void *b) {
    const struct ord *x = a, *y = b;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->name, y->name);
}

// ----------------------------------------------------------------------------
// hyperparameters the rules read

struct hparams {
    char arch[64];
    int n_layer, n_head, n_head_kv, n_expert;
    bool falcon, is_70b;
};

static int arch_int(const struct gguf_file *f, const char *arch, const char *key, int dflt) {
    char k[160];
    snprintf(k, sizeof(k), "%s.%s", arch, key);
    int64_t v;
    if (gguf_get_i64(f, k, &v)) return (int)v;
    const struct gguf_kv *kv = gguf_find(f, k);
    /* per-layer arrays (head_count_kv of some models): layer 0's value */
    if (kv && kv->type == GGUF_VT_ARRAY && kv->n > 0) {
        switch (kv->arr_type) {
        case GGUF_VT_UINT32:
        case GGUF_VT_INT32: {
            int32_t x;
            memcpy(&x, kv->data, 4);
            return x;
        }
        default: break;
        }
    }
    return dflt;
}

static void read_hparams(const struct gguf_file *f, struct hparams *hp) {
    memset(hp, 0, sizeof(*hp));
    struct gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s) && s.len < sizeof(hp->arch)) {
        memcpy(hp->arch, s.ptr, (size_t)s.len);
        hp->arch[s.len] = 0;
    }
    hp->n_layer = arch_int(f, hp->arch, "block_count", 0);
    hp->n_head = arch_int(f, hp->arch, "attention.head_count", 0);
    hp->n_head_kv = arch_int(f, hp->arch, "attention.head_count_kv", hp->n_head);
    hp->n_expert = arch_int(f, hp->arch, "expert_count", 0);
    hp->falcon = !strcmp(hp->arch, "falcon");
    hp->is_70b = !strcmp(hp->arch, "llama") && hp->n_layer == 80 && hp->n_head != hp->n_head_kv;
}

// ----------------------------------------------------------------------------
// the rules

struct state {
    struct hparams hp;
    int ftype, base;
    bool tied;
    int n_attn_v, i_attn_v, i_ffn_down;
};

static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static uint32_t blck_of(int type) {
    const struct gguf_type_info *t = qt_type_get(type);
    return t ? t->blck : 1;
}

static int n_gqa(const struct hparams *hp) {
    return hp->n_head_kv > 0 ? hp->n_head / hp->n_head_kv : 0;
}

/* The per-category rule; counters advance as llama.cpp's do. */
static int rule(struct state *s, const struct gguf_tensor *t, enum cat c, char *err,
                size_t err_cap, bool *bad) {
    const struct hparams *hp = &s->hp;
    const int ft = s->ftype;
    int ty = s->base;
    if (ft == FT_MXFP4_MOE) /* the stacked experts (3-D) MXFP4, every other matrix Q8_0 */
        return c != CAT_OUTPUT && !(s->tied && c == CAT_TOKEN_EMBD) && t->n_dims >= 3 && t->ne[2] > 1
                   ? ANVIL_TYPE_MXFP4
                   : ANVIL_TYPE_Q8_0;
    if (c == CAT_OUTPUT || (s->tied && c == CAT_TOKEN_EMBD)) {
        if (hp->falcon || t->ne[0] % blck_of(s->base) != 0)
            ty = ANVIL_TYPE_Q8_0;
        else if (ty != ANVIL_TYPE_Q8_0)
            ty = ANVIL_TYPE_Q6_K;
    } else if (c == CAT_TOKEN_EMBD) {
        /* the untied embedding keeps the base type in every mix anvil writes */
    } else if (is_attn_v(c)) {
        const int i = s->i_attn_v, n = s->n_attn_v;
        if (ft == FT_Q2_K)
            ty = n_gqa(hp) >= 4 ? ANVIL_TYPE_Q4_K : ANVIL_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            ty = i < 2 ? ANVIL_TYPE_Q5_K : ANVIL_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            ty = ANVIL_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && n_gqa(hp) >= 4)
            ty = ANVIL_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && more_bits(i, n))
            ty = ANVIL_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4)
            ty = ANVIL_TYPE_Q5_K;
        if (hp->is_70b && (ty == ANVIL_TYPE_Q3_K || ty == ANVIL_TYPE_Q4_K)) ty = ANVIL_TYPE_Q5_K;
        if (hp->n_expert == 8) ty = ANVIL_TYPE_Q8_0;
        s->i_attn_v++;
    } else if (c == CAT_ATTN_K) {
        if (hp->n_expert == 8) ty = ANVIL_TYPE_Q8_0;
    } else if (c == CAT_FFN_DOWN) {
        int i = s->i_ffn_down, n = hp->n_layer;
        if (hp->n_expert > 1) {
            i = layer_of(t->name);
            if (i < 0 || i >= n) {
                errmsg_set(err, err_cap, "quantize: cannot tell the layer of tensor '%s' "
                           "(want blk.N. with N < %d)", t->name, n);
                *bad = true;
                return ty;
            }
        }
        if (ft == FT_Q2_K)
            ty = ANVIL_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            ty = i < n / 16 ? ANVIL_TYPE_Q5_K
                 : !hp->falcon || more_bits(i, n) ? ANVIL_TYPE_Q4_K
                                                  : ANVIL_TYPE_Q3_K;
        else if (ft == FT_Q3_K_L)
            ty = hp->falcon ? ANVIL_TYPE_Q4_K : ANVIL_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (hp->falcon)
                ty = i < n / 16 ? ANVIL_TYPE_Q6_K
                     : more_bits(i, n) ? ANVIL_TYPE_Q5_K
                                       : ANVIL_TYPE_Q4_K;
            else if (more_bits(i, n))
                ty = ANVIL_TYPE_Q6_K;
        } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS))
            ty = ANVIL_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M && more_bits(i, n))
            ty = ANVIL_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !hp->falcon && i < n / 8)
            ty = ANVIL_TYPE_Q5_K;
        s->i_ffn_down++;
    } else if (c == CAT_ATTN_OUTPUT) {
        if (!hp->falcon) {
            if (hp->n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL ||
                    ft == FT_Q4_K_S || ft == FT_Q4_K_M || ft == FT_IQ4_XS)
                    ty = ANVIL_TYPE_Q5_K;
            } else if (ft == FT_Q2_K)
                ty = ANVIL_TYPE_Q3_K;
            else if (ft == FT_Q3_K_M)
                ty = ANVIL_TYPE_Q4_K;
            else if (ft == FT_Q3_K_L)
                ty = ANVIL_TYPE_Q5_K;
        } else if (ft == FT_Q3_K_L)
            ty = ANVIL_TYPE_Q4_K;
    }
    /* attn_qkv is matched by the attn_v rule above, as in llama.cpp (its
     * own rule there comes after and is never reached) */
    return ty;
}

/* A row that does not divide into the type's blocks gets a type with
 * smaller blocks (as llama.cpp's tensor_type_fallback), F16 as the last
 * resort. */
static int fallback(const struct gguf_tensor *t, int ty, int *n_fallback) {
    if (t->ne[0] % blck_of(ty) == 0) return ty;
    (*n_fallback)++;
    switch (ty) {
    case ANVIL_TYPE_IQ4_XS: ty = ANVIL_TYPE_IQ4_NL; break;
    case ANVIL_TYPE_Q2_K:
    case ANVIL_TYPE_Q3_K: ty = ANVIL_TYPE_Q4_0; break;
    case ANVIL_TYPE_Q4_K: ty = ANVIL_TYPE_Q5_0; break;
    case ANVIL_TYPE_Q5_K: ty = ANVIL_TYPE_Q5_1; break;
    case ANVIL_TYPE_Q6_K: ty = ANVIL_TYPE_Q8_0; break;
    default: break; /* a 32-block type: only F16 is left */
    }
    return t->ne[0] % blck_of(ty) == 0 ? ty : ANVIL_TYPE_F16;
}

anvil_status qt_mix_plan(const struct gguf_file *f, const struct qt_mix *mix, bool pure, int *types,
                         int *n_fallback, char *err, size_t err_cap) {
    const uint64_t n = f->n_tensors;
    struct state s = {.ftype = mix->ftype, .base = mix->base, .tied = true};
    read_hparams(f, &s.hp);
    pure = pure || mix->pure;
    *n_fallback = 0;
    for (uint64_t i = 0; i < n; i++) {
        enum cat c = category(f->tensors[i].name);
        if (is_attn_v(c)) s.n_attn_v++;
        if (c == CAT_OUTPUT) s.tied = false;
    }
    struct ord *order = core_malloc((n ? (size_t)n : 1) * sizeof(*order));
    if (!order) {
        errmsg_set(err, err_cap, "quantize: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < n; i++)
        order[i] = (struct ord){layer_of(f->tensors[i].name), f->tensors[i].name, i};
    qsort(order, (size_t)n, sizeof(*order), by_layer_then_name);

    const bool quantized = qt_type_get(mix->base)->quantized;
    bool bad = false;
    for (uint64_t k = 0; k < n && !bad; k++) {
        const struct gguf_tensor *t = &f->tensors[order[k].index];
        int ty;
        if (eff_dims(t) < 2)
            ty = ANVIL_TYPE_F32;
        else if (!allows_quantization(t))
            ty = t->type;
        else if (!quantized)
            ty = mix->base;
        else {
            ty = pure ? mix->base : rule(&s, t, category(t->name), err, err_cap, &bad);
            ty = fallback(t, ty, n_fallback);
        }
        types[order[k].index] = ty;
    }
    core_free(order);
    return bad ? ANVIL_ERR_FORMAT : ANVIL_OK;
}
