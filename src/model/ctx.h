/*
 * ctx.h - internal context calls for the scheduler (src/engine): KV cache
 * accounting that the public API does not expose.
 */
#ifndef ANVIL_CTX_H
#define ANVIL_CTX_H

#include "anvil.h"

struct ctx_kv_info {
    int32_t blocks_total; /* blocks in the pool */
    int32_t blocks_used;  /* blocks held by sequences */
    int32_t block_tokens; /* positions per block */
};

void ctx_kv_info(const struct anvil_ctx *c, struct ctx_kv_info *out);

/* Positions the pool can still hand out (free and evictable blocks). */
int64_t ctx_kv_pool_room(const struct anvil_ctx *c);

#endif
