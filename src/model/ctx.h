/*
 * ctx.h - internal context calls for the scheduler (src/engine): KV cache
 * accounting that the public API does not expose, and what the engine
 * needs to know of the model's KV footprint.
 */
#ifndef ANVIL_CTX_H
#define ANVIL_CTX_H

#include "anvil.h"

struct ctx_kv_info {
    int32_t blocks_total; /* blocks in the pools (every KV group) */
    int32_t blocks_used;  /* blocks held by sequences */
    int32_t block_tokens; /* positions per block */
};

void ctx_kv_info(const struct anvil_ctx *c, struct ctx_kv_info *out);

/* Whether every KV group can take n more positions of one sequence now,
 * keeping slack_blocks blocks of each group free beyond them (windowed
 * groups need only their window's worth). */
bool ctx_kv_fits(const struct anvil_ctx *c, int64_t n, int32_t slack_blocks);

/* Positions one sequence could ever hold if it had the pools to itself. */
int64_t ctx_kv_seq_capacity(const struct anvil_ctx *c);
/* One step of kv_prefault on the KV groups: the pool's next `ahead`
 * positions' worth of blocks made resident, one layer of one group per
 * call. Returns 0 when nothing is left to do. For the owner when idle. */
int32_t ctx_kv_prefault(struct anvil_ctx *c, int32_t ahead);

/* Bytes of KV cache that n_seq sequences of n_ctx positions need with
 * model m and KV type kv_type (F16 or Q8_0), each growing by up to `step`
 * positions at a time: windowed layers count only their window (plus the
 * step). For sizing pools from a memory budget and for reports. */
int64_t ctx_model_kv_bytes(const struct anvil_model *m, int kv_type, int64_t n_ctx, int64_t n_seq,
                           int64_t step);

/* The work of one batch row at position pos, in multiply-accumulates: the
 * layers' weights (the lm_head left out: only output rows run it) plus
 * attention over the pos + 1 keys it sees (QK and PV, a windowed layer at
 * most its window), the attention counted twice because it runs at about
 * half the matmul rate on the CPU. For the scheduler's step budget. */
double ctx_model_row_cost(const struct anvil_model *m, int32_t pos);

#endif
