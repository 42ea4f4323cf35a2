/*
 * spec.c - n-gram proposals, proposal-length adaptation and the check of
 * the speculation settings (spec.h).
 *
 * Prompt lookup (as in llama.cpp's lookup decoding and vLLM's n-gram
 * proposer): text that copies its input - code edits, summaries, answers
 * quoting a document - repeats runs of tokens it has seen. The last few
 * tokens are looked up earlier in the sequence (prompt and output), most
 * recent occurrence first, and what followed is proposed. A linear scan
 * per step is cheap beside a forward pass (8k tokens: ~10 us).
 */
#include <string.h>

#include "engine/spec.h"

bool spec_params_ok(enum anvil_spec spec, int32_t k) {
    return spec >= ANVIL_SPEC_DEFAULT && spec <= ANVIL_SPEC_DRAFT && k >= 0 &&
           k <= ANVIL_SPEC_K_MAX;
}

int32_t spec_ngram_propose(const anvil_token *toks, int32_t n_toks, int32_t k, anvil_token *out) {
    if (k <= 0) return 0;
    for (int32_t n = SPEC_NGRAM_MAX; n >= SPEC_NGRAM_MIN; n--) {
        if (n_toks <= n) continue;
        const anvil_token *suf = toks + n_toks - n;
        /* occurrences ending before the suffix itself, newest first */
        for (int32_t j = n_toks - n - 1; j >= 0; j--) {
            if (toks[j] != suf[0] || memcmp(toks + j, suf, (size_t)n * sizeof(anvil_token)) != 0)
                continue;
            int32_t m = 0;
            while (m < k && j + n + m < n_toks) {
                out[m] = toks[j + n + m];
                m++;
            }
            if (m > 0) return m;
        }
    }
    return 0;
}

void spec_adapt_init(struct spec_adapt *a, int32_t k_max) {
    a->k_max = k_max < 1 ? 1 : k_max;
    a->rate = 0.5f;
    a->k = a->k_max < 4 ? a->k_max : 4;
}

/* Expected accepted run for a per-token acceptance rate q is q/(1-q):
 * propose that many plus one, within [1, k_max]. The average moves fast
 * (weight 0.3) so a copied passage ramps up within a few steps. */
void spec_adapt_update(struct spec_adapt *a, int32_t proposed, int32_t accepted) {
    if (proposed <= 0) return;
    float q = (float)accepted / (float)proposed;
    a->rate = 0.7f * a->rate + 0.3f * q;
    float run = a->rate < 0.95f ? a->rate / (1.0f - a->rate) : 19.0f;
    int32_t k = (int32_t)(run + 1.5f);
    a->k = k < 1 ? 1 : k > a->k_max ? a->k_max : k;
}
