/*
 * model.c - load a GGUF model of any architecture anvil runs, in order:
 * open the file, find the architecture's descriptor (model/arch.h), pick
 * the kernels, build the tokenizer, read the hyperparameters and bind the
 * weights (model_bind.c), read each layer's attention kind
 * (model_attn.c), pack what the kernels pack (model_pack.c). Also
 * anvil_model_free and the public model getters; the tokenizer and chat
 * wrappers are model_tok.c.
 *
 * Weights stay in gguf's read-only mapping, unless the kernel table packs
 * their type (model_pack.c). The few small arrays a model owns: Q/K/V
 * biases stacked into one vector per layer, the RoPE frequencies, the
 * HP1 taps, the packed weights.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "model/arch.h"
#include "model/encoder.h"
#include "model/loader.h"
#include "model/model.h"
#include "model/moe.h"

/* ---------------------------------------------------------------------- */
/* public helpers that need no model */

struct anvil_model_params anvil_model_default_params(void) {
    struct anvil_model_params p = {.kernels = NULL};
    return p;
}

/* ---------------------------------------------------------------------- */
/* architectures */

static const struct arch_desc *const archs[] = {
    &arch_llama, &arch_qwen2,    &arch_qwen3, &arch_gemma3,     &arch_phi3,
    &arch_qwen2moe, &arch_qwen3moe, &arch_olmoe, &arch_granitemoe,
    &arch_gptoss, &arch_bert, &arch_nomic_bert, &arch_gemma_embedding};

const struct arch_desc *arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++)
        if (strlen(archs[i]->name) == len && !memcmp(archs[i]->name, name, len)) return archs[i];
    return NULL;
}

/* The names of archs[], comma-separated, composed once from the table (a
 * list written out by hand fell behind it once). */
static char arch_names_buf[256];
static pthread_once_t arch_names_once = PTHREAD_ONCE_INIT;

static void arch_names_compose(void) {
    size_t k = 0;
    for (size_t i = 0; i < sizeof(archs) / sizeof(archs[0]); i++) {
        int w = snprintf(arch_names_buf + k, sizeof(arch_names_buf) - k, "%s%s", i ? ", " : "",
                         archs[i]->name);
        if (w < 0 || (size_t)w >= sizeof(arch_names_buf) - k) break;
        k += (size_t)w;
    }
}

const char *arch_names(void) {
    pthread_once(&arch_names_once, arch_names_compose);
    return arch_names_buf;
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
    TRY(load_moe_hparams(&L, m->arch, &m->hp));
    {
        uint32_t pt; /* embedding models say how they pool (docs/embeddings.md) */
        if (loader_u32(&L, "pooling_type", &pt, false)) {
            if (pt > ANVIL_POOL_RANK) {
                errmsg_set(err, err_cap, "model: %s.pooling_type %u is unknown (0..4)",
                           m->arch->name, pt);
                TRY(ANVIL_ERR_FORMAT);
            }
            m->has_pooling = true;
            m->pooling = (int)pt;
        }
    }
    if (m->has_pooling && m->pooling == ANVIL_POOL_RANK) TRY(embed_bind_head(m, err, err_cap));
    TRY(embed_bind_dense(m, err, err_cap));
    if (m->arch->flags & ARCH_ENCODER) {
        TRY(encoder_bind(&L, m));
    } else {
        TRY(load_weights(&L, m, swa));
        TRY(load_moe_layers(&L, m));
        TRY(load_attn_kinds(&L, m, swa));
    }
    TRY(pack_weights(m));
    core_free(swa);
    swa = NULL;
    m->n_params = L.n_params;
    int n_local = 0;
    for (int l = 0; l < m->hp.n_layer; l++) n_local += m->layers[l].n_swa > 0;
    char swa_desc[96] = "";
    if (m->hp.n_expert)
        snprintf(swa_desc, sizeof(swa_desc), " moe%d/%d ffe%d%s", m->hp.n_expert_used,
                 m->hp.n_expert, m->hp.n_ff_exp, m->hp.n_ff_shexp ? " +shared" : "");
    if (n_local)
        snprintf(swa_desc + strlen(swa_desc), sizeof(swa_desc) - strlen(swa_desc), " swa%d/%dL",
                 m->hp.n_swa, n_local);
    if (m->n_hp1)
        snprintf(swa_desc + strlen(swa_desc), sizeof(swa_desc) - strlen(swa_desc), " hp1/%dL",
                 m->n_hp1);
    /* composed in room to spare, then cut to the description's size (a
     * MoE file with windows and HP1 layers may say more than it holds) */
    char full[320];
    snprintf(full, sizeof(full), "%s %dL %dd %dh/%dkv hd%d ff%d%s %s (%.0fM params)",
             m->arch->name, m->hp.n_layer, m->hp.n_embd, m->hp.n_head, m->hp.n_head_kv,
             m->hp.head_dim, m->hp.n_ff, swa_desc, anvil_type_name(m->wtype),
             (double)m->n_params / 1e6);
    snprintf(m->desc, sizeof(m->desc), "%.*s", (int)sizeof(m->desc) - 1, full);
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
    embed_free_head(m);
    encoder_free(m);
    core_free_aligned(m->packed);
    for (int l = 0; m->layers && l < m->hp.n_layer; l++) {
        core_free(m->layers[l].qkv_bias);
        core_free(m->layers[l].attn_sinks);
        core_free(m->layers[l].wo_bias);
        moe_free(m->layers[l].moe);
    }
    core_free(m->layers);
    tok_free(m->vocab);
    gguf_close(m->gguf);
    core_free(m);
}

/* ---------------------------------------------------------------------- */
/* getters */

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
