/* schema.c - placeholder while the core is brought up (replaced below). */
#include "constrain/cn_int.h"

anvil_status cn_parse_schema(const char *text, size_t len, const struct cn_options *opt,
                             struct cn_ir **out, char *err, size_t err_cap) {
    (void)text; (void)len; (void)opt; (void)out;
    errmsg_set(err, err_cap, "JSON Schema: not yet");
    return ANVIL_ERR_UNSUPPORTED;
}
anvil_status cn_parse_json_any(const struct cn_options *opt, struct cn_ir **out, char *err,
                               size_t err_cap) {
    (void)opt; (void)out;
    errmsg_set(err, err_cap, "JSON: not yet");
    return ANVIL_ERR_UNSUPPORTED;
}
