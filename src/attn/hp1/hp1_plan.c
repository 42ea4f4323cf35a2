/*
 * hp1_plan.c - the HP1 entry point of the attention plan: checks the
 * layer's parameters, stores them with the HP1 kernel table in the plan's
 * kind state and hands every task of the plan to the HP1 kernels. The
 * plan itself (entries, threads, split-K, reduction) is attn_plan.c's.
 */
#include "attn/attn_plan_int.h"
#include "attn/hp1/hp1_plan.h"

/* The plan's kind state for HP1. */
struct hp1_state {
    const struct kn_hp1_ops *ops;
    struct kn_hp1_params hp; /* taps (n_head, n_taps) of the layer */
    enum kn_hp1_pv pv;       /* SPARSE but in benchmarks */
};

_Static_assert(sizeof(struct hp1_state) <= KV_ATTN_KIND_STATE, "HP1 state fits the plan");

/* Task t of kv head h with the HP1 kernels, the taps from the group's
 * first head on. */
static void hp1_call(const struct kv_attn_job *job, enum kv_attn_call which, int32_t h,
                     const struct kn_attn_task *t) {
    const struct hp1_state *hs = (const struct hp1_state *)job->kind_state;
    struct kn_hp1_task ht = {.at = *t, .hp = hs->hp, .pv = hs->pv};
    ht.hp.taps = hs->hp.taps + (size_t)h * job->group * hs->hp.n_taps;
    kn_hp1_fn f = which == KV_ATTN_CALL_ATTN      ? hs->ops->attn
                  : which == KV_ATTN_CALL_PARTIAL ? hs->ops->partial
                                                  : hs->ops->reduce;
    f(&ht);
}

anvil_status kv_attn_prepare_hp1(struct kv_cache *kv, const struct kn_hp1_ops *ops,
                                 const struct kn_hp1_params *hp, enum kn_hp1_pv pv, int32_t layer,
                                 const struct kv_attn_seq *seqs, int32_t n_seqs, size_t q_stride,
                                 size_t out_stride, int n_threads, enum kv_split split,
                                 float scale, struct kv_attn_job **out) {
    if (!ops || !hp || !hp->taps || hp->n_taps < 1 || hp->n_taps > KN_HP1_MAX_TAPS ||
        kv_params_of(kv)->window > 0 ||
        (pv != KN_HP1_PV_SPARSE && pv != KN_HP1_PV_DENSE && pv != KN_HP1_PV_NONE))
        return ANVIL_ERR_INVALID;
    anvil_status st;
    struct kv_attn_job *job = kv_attn_job_of(kv, &st);
    if (!job) return st;
    struct hp1_state *hs = (struct hp1_state *)job->kind_state;
    job->ops = NULL;
    job->kind_call = hp1_call;
    hs->ops = ops;
    hs->hp = *hp;
    hs->pv = pv;
    /* an HP1 record (no max, no sum) is smaller than a softmax one, which
     * sized the scratch */
    job->rec = kn_hp1_rec_floats(kv_params_of(kv)->n_head / kv_layout(kv)->n_head_kv,
                                 kv_layout(kv)->head_dim);
    return kv_attn_plan(kv, job, layer, seqs, n_seqs, q_stride, out_stride, n_threads, split,
                        scale, out);
}
