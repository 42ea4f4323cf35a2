/*
 * moe.h - the mixture-of-experts FFN (Mixtral, Qwen2/3-MoE, OLMoE,
 * Granite-MoE): what one layer does to a normalized row h,
 *
 *   logits = Wrouter h                       (n_expert)
 *   p      = softmax(logits) | sigmoid(logits)   (hp.moe_gating)
 *   sel    = the n_expert_used largest p, largest first; equal p: the
 *            lowest expert index first (what llama.cpp's argsort gives
 *            for its expert counts)
 *   w_j    = p[sel_j], / sum_j p[sel_j] when hp.moe_norm_w (the sum
 *            clamped below at 2^-14 as llama.cpp does), * hp.moe_w_scale
 *   out    = sum_j w_j Wdown[sel_j] (silu(Wgate[sel_j] h) * Wup[sel_j] h)
 *            (summed in the order of sel)
 *          + g * Wdown_sh (silu(Wgate_sh h) * Wup_sh h)   (shared expert;
 *            g = sigmoid(sh_gate . h), or 1 without a gate)
 *
 * Two ways to run it, which give the same bits (the matmul kernels are
 * batch-invariant, kernels/ops.h): the reference walks row by row and
 * expert by expert (n_tokens = 1 products); the grouped path sorts the
 * step's (row, expert) pairs by expert, gathers each expert's rows and runs
 * one matmul per expert over them, threads splitting the (expert, row tile)
 * units by cost, then adds each row's weighted outputs. A one-row decode
 * reads only its chosen experts either way. ANVIL_MOE_REF=1 in the
 * environment when a context is created makes it use the reference.
 */
#ifndef ANVIL_MODEL_MOE_H
#define ANVIL_MODEL_MOE_H

#include <stdint.h>

#include "model/model.h"

struct anvil_ctx;

/* The choice of experts for one row: sel (n_expert_used) gets the expert
 * indices, w their weights, from the router logits (n_expert); p is
 * scratch of n_expert floats. Plain C, shared by both paths. */
void moe_route(const struct model_hparams *hp, const float *logits, float *p, int32_t *sel,
               float *w);

/* Free a layer's MoE (NULL is fine). */
void moe_free(struct model_moe *moe);

/* The context's MoE scratch, sized for n_batch rows (nothing for a dense
 * model); freed by moe_ctx_free. Sets c->errmsg on failure. */
anvil_status moe_ctx_init(struct anvil_ctx *c);
void moe_ctx_free(struct anvil_ctx *c);

/* Zero the routing statistics (anvil_ctx_get_route_stats); a dense
 * model's context has none. Called when profiling is turned on. */
void moe_route_reset(struct anvil_ctx *c);

/* Row t's input to the MoE: the FFN-normalized float row the forward pass
 * writes (n_embd floats). */
float *moe_input_row(struct anvil_ctx *c, int t);

/* Row t's activation rows for layer ly from moe_input_row(c, t), by the
 * thread that wrote it (the forward pass's FFN-norm phase). */
void moe_prepare_row(struct anvil_ctx *c, const struct model_layer *ly, int t);

/* Layer ly's MoE over the batch's rows, run by all nth threads after a
 * barrier that closes the rows' moe_prepare_row: writes c->tmp rows
 * (n_embd). Thread ith writes the rows pool_split(n_tokens, ith, nth, 1)
 * gives it and returns without a barrier: the forward pass's next phase
 * reads exactly those rows on the same thread. prof_t: NULL, or (profiling)
 * the thread's last mark: moe_ffn charges its router and its experts
 * (ANVIL_PROF_ROUTER, _EXPERTS); what it does after the last mark (the
 * weighted sums) is the caller's to charge to ANVIL_PROF_SCATTER. When
 * profiling, thread 0 also counts the step's routing (the reference path
 * after one more barrier, once every row is routed). */
void moe_ffn(struct anvil_ctx *c, const struct model_layer *ly, int ith, int nth, double *prof_t);

#endif
