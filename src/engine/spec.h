/*
 * spec.h - the proposing half of speculative decoding, for the engine:
 * prompt-lookup (n-gram) proposals and the per-request adaptation of how
 * many tokens to propose, and the check of the speculation settings. The
 * draft model's proposals and the verifying half (one multi-row forward
 * pass, anvil_sampler_sample_spec on each row) are in speculate.c.
 */
#ifndef ANVIL_SPEC_H
#define ANVIL_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "anvil.h"

/* The speculation settings of engine or request params are in range:
 * a mode of enum anvil_spec, k 0 (the default) .. ANVIL_SPEC_K_MAX. */
bool spec_params_ok(enum anvil_spec spec, int32_t k);

/* Prompt lookup: find the most recent earlier occurrence of the last n
 * tokens of toks[0, n_toks) (n from SPEC_NGRAM_MAX down to SPEC_NGRAM_MIN,
 * longest first) and propose up to k tokens that followed it. Returns the
 * count written to out (0: no match). O(n_toks) per call. */
#define SPEC_NGRAM_MAX 4
#define SPEC_NGRAM_MIN 2
int32_t spec_ngram_propose(const anvil_token *toks, int32_t n_toks, int32_t k, anvil_token *out);

/* How many tokens to propose next: follows the recent acceptance rate, so
 * that text which does not repeat soon costs one row per step at most. */
struct spec_adapt {
    float rate;   /* exponential average of accepted / proposed */
    int32_t k;    /* the next proposal's length, 1..k_max */
    int32_t k_max;
};

void spec_adapt_init(struct spec_adapt *a, int32_t k_max);
void spec_adapt_update(struct spec_adapt *a, int32_t proposed, int32_t accepted);

#endif
