/*
 * hp1_meta.h - the HP1 configuration of a model from its GGUF metadata
 * (docs: docs/attention.md):
 *
 *   <arch>.attention.hp1.fir_k   u32 K, 1..KN_HP1_MAX_TAPS          (required)
 *   <arch>.attention.hp1.taps    f32 array (n_layer, n_head, K)      (required)
 *   <arch>.attention.hp1.gamma   f32, default 1
 *   <arch>.attention.hp1.lo/.hi  f32, default 0 and 1, lo <= hi
 *   <arch>.attention.hp1.relu    bool, default true
 *
 * The taps are metadata rather than a tensor per layer: they are a few
 * hundred numbers that configure the op, not weights of a matrix product,
 * and one array keeps a model's whole HP1 configuration in one place (for
 * `anvil inspect`, for converters). Everything is checked here, so the
 * kernels can rely on finite parameters (attn_hp1.h). Which layers are
 * HP1 (<arch>.attention.kind) is the model loader's to read.
 */
#ifndef ANVIL_ATTN_HP1_META_H
#define ANVIL_ATTN_HP1_META_H

#include <stddef.h>

#include "anvil.h"
#include "attn/hp1/attn_hp1.h"
#include "gguf/gguf.h"

/* Read and check the HP1 keys of architecture arch for a model of
 * n_layer layers of n_head query heads. On success *params holds K,
 * gamma, lo, hi and relu (params->taps NULL) and *taps the taps
 * (n_layer, n_head, K), core_malloc'ed, the caller's to core_free.
 * ANVIL_ERR_FORMAT (message in err) for a missing, mistyped or
 * non-finite value, ANVIL_ERR_NOMEM; nothing is set then. In a build
 * without HP1 (make HP1=0) always ANVIL_ERR_UNSUPPORTED, "built without
 * HP1". */
anvil_status hp1_meta_load(const struct gguf_file *f, const char *arch, int n_layer, int n_head,
                           struct kn_hp1_params *params, float **taps, char *err, size_t err_cap);

#endif
