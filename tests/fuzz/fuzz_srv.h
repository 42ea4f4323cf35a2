/*
 * fuzz_srv.h - properties shared by the server's fuzz harnesses
 * (fuzz_http.c, fuzz_request.c, fuzz_web.c). Include after fuzz_util.h.
 */
#ifndef ANVIL_FUZZ_SRV_H
#define ANVIL_FUZZ_SRV_H

#include <cjson/cJSON.h>

#include "fuzz_util.h"

static inline bool fuzz_str_or_null(const cJSON *v) {
    return v && (cJSON_IsString(v) || cJSON_IsNull(v));
}

/* p[0..n) is an OpenAI error body: valid UTF-8 and JSON, {"error":
 * {"message": string, "type": string, "param": string or null, "code":
 * string or null}}. */
static inline void fuzz_check_error_json(const char *p, size_t n) {
    fuzz_check(valid_utf8((const uint8_t *)p, n), "error body is valid UTF-8");
    cJSON *root = cJSON_ParseWithLength(p, n);
    fuzz_check(root != NULL, "error body is valid JSON");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    fuzz_check(cJSON_IsObject(e), "error body has an error object");
    fuzz_check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "message")), "error message");
    fuzz_check(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")), "error type");
    fuzz_check(fuzz_str_or_null(cJSON_GetObjectItemCaseSensitive(e, "param")), "error param");
    fuzz_check(fuzz_str_or_null(cJSON_GetObjectItemCaseSensitive(e, "code")), "error code");
    cJSON_Delete(root);
}

#endif
