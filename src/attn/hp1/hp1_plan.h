/*
 * hp1_plan.h - HP1 layers through the attention plan (attn/attn_plan.h):
 * the same plan, threads, split-K and reduction as the softmax, with the
 * HP1 kernels (attn_hp1.h) and the layer's parameters.
 */
#ifndef ANVIL_ATTN_HP1_PLAN_H
#define ANVIL_ATTN_HP1_PLAN_H

#include "attn/attn_plan.h"
#include "attn/hp1/attn_hp1.h"

/* The same plan for a layer with HP1 gated attention (attn_hp1.h):
 * HP1 kernels, the layer's parameters (hp->taps: (n_head, n_taps), head i
 * at taps + i*n_taps; copied into the plan, the taps themselves borrowed
 * until the run ends) and the PV mode (KN_HP1_PV_SPARSE; the others are
 * for benchmarks). Split decode rows run as HP1 partials (each re-reads
 * the FIR history left of its first chunk) and a plain-sum reduction;
 * prefill rows as tiles, like the softmax. A windowed cache is refused
 * (ANVIL_ERR_INVALID): HP1 has no sliding window. */
anvil_status kv_attn_prepare_hp1(struct kv_cache *kv, const struct kn_hp1_ops *ops,
                                 const struct kn_hp1_params *hp, enum kn_hp1_pv pv, int32_t layer,
                                 const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                                 size_t out_stride, int n_threads, enum kv_split split,
                                 float scale, struct kv_attn_job **out);

#endif
