/*
 * hp1_none.c - the HP1 entry points of a build without HP1 (make HP1=0),
 * built instead of src/attn/hp1/. Every entry refuses, so that a model
 * asking for HP1 is turned away at load ("built without HP1",
 * ANVIL_ERR_UNSUPPORTED) and the benchmarks see no HP1 kernels
 * (kn_hp1_select returns NULL). The HP1 test and bench helpers are never
 * reached after that: they abort.
 */
#include <stdio.h>
#include <stdlib.h>

#include "attn/hp1/hp1_meta.h"
#include "attn/hp1/hp1_plan.h"
#include "core/core.h"

anvil_status hp1_meta_load(const struct gguf_file *f, const char *arch, int n_layer, int n_head,
                           struct kn_hp1_params *params, float **taps, char *err,
                           size_t err_cap) {
    (void)f, (void)n_layer, (void)n_head, (void)params, (void)taps;
    errmsg_set(err, err_cap,
               "model: %s.attention.kind asks for hp1 attention, but this anvil was built without "
               "HP1 (make HP1=0)", arch);
    return ANVIL_ERR_UNSUPPORTED;
}

const struct kn_hp1_ops *kn_hp1_select(const char *name) {
    (void)name;
    return NULL;
}

anvil_status kv_attn_prepare_hp1(struct kv_cache *kv, const struct kn_hp1_ops *ops,
                                 const struct kn_hp1_params *hp, enum kn_hp1_pv pv, int32_t layer,
                                 const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                                 size_t out_stride, int n_threads, enum kv_split split,
                                 float scale, struct kv_attn_job **out) {
    (void)kv, (void)ops, (void)hp, (void)pv, (void)layer, (void)seqs, (void)n_seqs;
    (void)q_stride, (void)out_stride, (void)n_threads, (void)split, (void)scale, (void)out;
    return ANVIL_ERR_UNSUPPORTED;
}

static void unreachable(const char *fn) {
    fprintf(stderr, "anvil: %s: built without HP1 (make HP1=0)\n", fn);
    abort();
}

void kn_hp1_gate_keys(float *k, size_t k_stride, int n_kv, int n_head_kv, int head_dim, int group,
                      bool shared, uint32_t seed) {
    (void)k, (void)k_stride, (void)n_kv, (void)n_head_kv, (void)head_dim, (void)group;
    (void)shared, (void)seed;
    unreachable(__func__);
}

void kn_hp1_gate_queries(float *q, size_t q_stride, int n_rows, int n_head, int n_head_kv,
                         int head_dim, float scale, double on_frac) {
    (void)q, (void)q_stride, (void)n_rows, (void)n_head, (void)n_head_kv, (void)head_dim;
    (void)scale, (void)on_frac;
    unreachable(__func__);
}

void kn_hp1_scores_ref(const struct kn_kv_layout *kv, const uint8_t *base, const int32_t *blocks,
                       int h, const float *q, float scale, int n, float *s) {
    (void)kv, (void)base, (void)blocks, (void)h, (void)q, (void)scale, (void)n, (void)s;
    unreachable(__func__);
}

double kn_hp1_calibrate(const float *scores, int n_vec, int n_pos, double zero_frac, int n_head,
                        float *taps, struct kn_hp1_params *hp) {
    (void)scores, (void)n_vec, (void)n_pos, (void)zero_frac, (void)n_head, (void)taps, (void)hp;
    unreachable(__func__);
    return 0.0;
}
