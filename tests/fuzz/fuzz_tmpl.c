/*
 * fuzz_tmpl.c - libFuzzer harness: bytes -> the sandboxed Jinja
 * interpreter (src/tmpl) and the chat rendering built on it.
 *
 * Input: a template, a NUL, then a context (JSON text). When the context
 * part is missing or does not parse as an object, a fixed chat context is
 * used (messages with tool calls and results, tools, add_generation_prompt,
 * bos/eos) so that template mutations meet realistic values. Per input:
 *   - tmpl_check and tmpl_render agree: a template that does not parse
 *     never renders;
 *   - a render either succeeds with *out NUL-terminated at *out_len, or
 *     fails with *out NULL and a non-empty message;
 *   - small limits (64 KiB output, 200k steps, 20k iterations, depth 32,
 *     8 MiB memory) so that every bound trips and returns, never hangs;
 *   - the same render twice gives the same bytes (no hidden state).
 * Seeds: tests/fuzz/corpus/tmpl (the corpus templates of llama.cpp, each
 * followed by a NUL and one of the test conversations).
 */
#define FUZZ_NAME "fuzz_tmpl"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tmpl/tmpl.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char DEFAULT_CTX[] =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_generation_prompt\":true,"
    "\"enable_thinking\":false,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"description\":\"d\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":"
    "{\"type\":\"string\"}},\"required\":[\"a\"]}}}],\"messages\":["
    "{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U <|im_start|>\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"R\",\"tool_calls\":["
    "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":"
    "{\"a\":\"x\"}}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"},"
    "{\"role\":\"assistant\",\"content\":\"A\"}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 18) return 0;
    const char *src = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t tn = nul ? (size_t)(nul - src) : size;
    const char *ctx = DEFAULT_CTX;
    size_t cn = sizeof(DEFAULT_CTX) - 1;
    if (nul && size - tn - 1 > 1 && src[tn + 1] == '{') {
        ctx = src + tn + 1;
        cn = size - tn - 1;
    }
    struct tmpl_limits lim = {.max_output = 1 << 16, .max_steps = 200000,
                              .max_iterations = 20000, .max_depth = 32,
                              .max_memory = 8u << 20};
    char err[512] = "", err2[512] = "";
    int parses = tmpl_check(src, tn, err, sizeof err) == 0;
    char *out = (char *)1, *out2 = NULL;
    size_t n = 7, n2 = 0;
    int rc = tmpl_render(src, tn, ctx, cn, &lim, 1764662400, &out, &n, err, sizeof err);
    if (rc == 0) {
        fuzz_check(parses, "a template that does not parse rendered");
        fuzz_check(out != NULL && out[n] == '\0', "the output is NUL-terminated at its length");
        int rc2 = tmpl_render(src, tn, ctx, cn, &lim, 1764662400, &out2, &n2, err2, sizeof err2);
        fuzz_check(rc2 == 0 && n2 == n && memcmp(out, out2, n) == 0,
                   "the same render twice gives the same bytes");
        core_free(out2);
        core_free(out);
    } else {
        fuzz_check(rc == -1, "a failure returns -1");
        fuzz_check(out == NULL, "a failure leaves *out NULL");
        fuzz_check(err[0] != '\0', "a failure has a message");
    }
    return 0;
}
