/*
 * loader.h - the model loader's state and its steps, shared by the files
 * of the load (model.c runs them in order): model_bind.c (hyperparameters,
 * weights bound by name), model_attn.c (attention kinds), model_pack.c
 * (weight packing). Not for use outside src/model.
 */
#ifndef ANVIL_MODEL_LOADER_H
#define ANVIL_MODEL_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "model/arch.h"
#include "model/model.h"

struct model_loader {
    struct gguf_file *f;
    const char *arch;
    char *err;
    size_t err_cap;
    bool failed;
    uint64_t n_params;
};

/* The common hyperparameters, then the architecture's own (arch->hparams);
 * *swa_out (n_layer, core_malloc'ed, the caller's) marks windowed layers. */
anvil_status load_hparams(struct model_loader *L, const struct arch_desc *arch,
                          struct model_hparams *hp, const struct tok_vocab *vocab,
                          bool **swa_out);
/* Every tensor bound by name with its shape checked, the Q/K/V biases
 * stacked, the RoPE frequencies; m->layers allocated. */
anvil_status load_weights(struct model_loader *L, struct anvil_model *m, const bool *swa);
/* Find a tensor and check its 2-D shape (ne0 = n_in, ne1 = n_out; n_out 0
 * for a vector), type and block scales; counts its parameters. NULL with
 * the loader's error set (or, when !required and missing, without). */
const struct gguf_tensor *loader_bind(struct model_loader *L, const char *name, int64_t n_in,
                                      int64_t n_out, bool required);
/* Bind 1..3 tensors stacked by rows into one wmat. */
bool loader_bind_wmat(struct model_loader *L, struct wmat *w, int n_in, int n_parts,
                      const char *const *names, const int *rows);
/* The MoE hyperparameters (<arch>.expert_*), when the file or the
 * architecture has experts (model/moe_bind.c; after load_hparams). */
anvil_status load_moe_hparams(struct model_loader *L, const struct arch_desc *arch,
                              struct model_hparams *hp);
/* Every layer's router, experts and shared expert into a new ly->moe, and
 * m->wtype from them (after load_weights, which leaves a MoE layer's FFN
 * out); nothing for a dense model. */
anvil_status load_moe_layers(struct model_loader *L, struct anvil_model *m);
/* Each layer's attention kind (<arch>.attention.kind) and, for HP1
 * layers, their parameters (attn/hp1/hp1_meta.h). */
anvil_status load_attn_kinds(struct model_loader *L, struct anvil_model *m, const bool *swa);
/* Copy the matrices whose type the kernel table packs into one packed
 * allocation (m->packed) and release the mapping's pages under them. */
anvil_status pack_weights(struct anvil_model *m);

/* Tensor name of an F32/F16/BF16 type with exactly n0 x n1 elements
 * (ne[0] = n0, and ne[1] = n1 unless n1 == 0: a vector), converted into a
 * new float array (*out, core_malloc'ed, the caller's), finite values
 * only. Missing: *out = NULL, an error only when required. (model_attn.c) */
anvil_status loader_floats(struct model_loader *L, const char *name, int64_t n0, int64_t n1,
                           bool required, float **out);

#endif
