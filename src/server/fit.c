/*
 * fit.c - whether a request fits: its prompt plus its completion must fit
 * in the context (n_ctx) and in the whole KV cache, or the request is a
 * 400 context_length_exceeded here rather than a request the engine can
 * never run. The messages are OpenAI's, so clients that parse them (to
 * trim a conversation) keep working.
 *
 * Defaults: a request without max_tokens gets OpenAI's, 16 for a
 * completion and "the rest of the context" for a chat.
 */
#include "server/srv_int.h"

bool srv_too_long(struct srv_err *e, const char *param, long long limit, const char *what,
                  long long n) {
    srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded", param,
                "This model's maximum context length is %lld tokens. However, your %s %lld "
                "tokens long.", limit, what, n);
    return false;
}

bool srv_fit(const struct srv_limits *lim, struct srv_req *r, const char *pname, bool has_max,
             long long max_tokens, struct srv_err *e) {
    /* what one request may hold: the context, and the whole KV cache */
    int64_t limit = lim->n_ctx;
    if (lim->kv_tokens > 0 && lim->kv_tokens < limit) limit = lim->kv_tokens;
    if (r->n_prompt >= limit) return srv_too_long(e, pname, limit, "prompt is", r->n_prompt);
    if (has_max) {
        if (r->n_prompt + max_tokens > limit) {
            srv_err_set(e, 400, "invalid_request_error", "context_length_exceeded",
                        "max_tokens",
                        "This model's maximum context length is %lld tokens. However, you "
                        "requested %lld tokens (%d in the prompt, %lld in the completion). "
                        "Please reduce the length of the prompt or completion.",
                        (long long)limit, r->n_prompt + max_tokens, (int)r->n_prompt,
                        max_tokens);
            return false;
        }
        r->max_tokens = (int32_t)max_tokens;
    } else {
        int64_t rest = limit - r->n_prompt;
        r->max_tokens = (int32_t)(r->kind == SRV_KIND_COMPLETION && rest > 16 ? 16 : rest);
    }
    return true;
}
