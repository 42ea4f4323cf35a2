/*
 * chat_render.c - the CLI's chat rendering (chat_render.h): a conversation
 * of role/content messages becomes the Jinja template's context (messages,
 * add_generation_prompt) or goes to the built-in family, so `anvil run
 * --chat`, `anvil chat` and `anvil tokenize --chat` show the model what
 * `anvil serve` shows it for the same messages.
 *
 * What it does not do: tools or tool results (the CLI has none); the
 * server builds those contexts itself (src/server/prompt.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_render.h"
#include "cli.h"

int cli_chat_choose(const char *cmd, struct anvil_model *m, const char *name, const char *file,
                    bool verbose_choice) {
    if (name && file) return cli_fail(cmd, "give --chat-template or --chat-template-file, not both");
    if (name && anvil_chat_template_set(m, name) != ANVIL_OK)
        return cli_fail(cmd, "unknown chat template '%s' (known: %s)", name,
                        anvil_chat_template_names());
    if (file) {
        size_t len;
        char *src = cli_read_file(file, &len);
        if (!src) return cli_fail(cmd, "--chat-template-file: cannot read '%s'", file);
        char err[ANVIL_ERRMSG_CAP];
        anvil_status st = anvil_chat_template_set_jinja(m, src, len, err, sizeof err);
        free(src);
        if (st != ANVIL_OK)
            return cli_fail(cmd, "--chat-template-file %s: %s", file,
                            st == ANVIL_ERR_FORMAT ? err : anvil_status_str(st));
    }
    const char *w = anvil_chat_template_warning(m);
    if (w && !name && !file)
        fprintf(stderr, "anvil %s: warning: %s; using the built-in %s family\n", cmd, w,
                anvil_chat_template_name(m));
    else if (!name && !file && !anvil_chat_template_text(m) &&
             anvil_chat_template_source(m) == ANVIL_CHAT_FALLBACK)
        fprintf(stderr,
                "anvil %s: warning: the model has no chat template anvil can use; using ChatML "
                "(choose another with --chat-template NAME: %s)\n",
                cmd, anvil_chat_template_names());
    if (verbose_choice) {
        char buf[96];
        fprintf(stderr, "anvil %s: chat template: %s\n", cmd, cli_chat_renderer(m, buf, sizeof buf));
    }
    return 0;
}

const char *cli_chat_renderer(const struct anvil_model *m, char *buf, size_t cap) {
    const char *o = anvil_chat_template_origin(m);
    if (!strcmp(o, "gguf"))
        snprintf(buf, cap, "the GGUF's Jinja template");
    else if (!strcmp(o, "file"))
        snprintf(buf, cap, "the Jinja template of the file");
    else
        snprintf(buf, cap, "the built-in %s family", anvil_chat_template_name(m));
    return buf;
}

/* {"messages": [...], "add_generation_prompt": true} as JSON text. */
static char *context(const struct anvil_chat_msg *msgs, size_t n) {
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "messages");
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(arr, o);
        cJSON_AddStringToObject(o, "role", msgs[i].role ? msgs[i].role : "user");
        cJSON_AddStringToObject(o, "content", msgs[i].content ? msgs[i].content : "");
    }
    cJSON_AddBoolToObject(root, "add_generation_prompt", 1);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

int32_t cli_chat_tokenize(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                          size_t n_msgs, anvil_token *out, int32_t cap, char *err,
                          size_t err_cap) {
    if (!anvil_chat_template_text(m)) {
        int32_t n = anvil_chat_tokenize(m, msgs, n_msgs, true, out, cap);
        if (n == INT32_MIN) snprintf(err, err_cap, "could not render the chat (out of memory?)");
        return n;
    }
    char *ctx = context(msgs, n_msgs);
    if (!ctx) {
        snprintf(err, err_cap, "out of memory");
        return INT32_MIN;
    }
    int32_t n = anvil_chat_tokenize_json(m, ctx, strlen(ctx), out, cap, err, err_cap);
    cJSON_free(ctx);
    return n;
}

char *cli_chat_prompt(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                      size_t n_msgs, char *err, size_t err_cap) {
    char *ctx = NULL, *buf = NULL;
    int32_t need;
    if (!anvil_chat_template_text(m)) {
        need = anvil_chat_apply(m, msgs, n_msgs, true, NULL, 0);
        if (need < 0 && need != INT32_MIN && (buf = malloc((size_t)-need)) &&
            anvil_chat_apply(m, msgs, n_msgs, true, buf, -need) >= 0)
            return buf;
        free(buf);
        snprintf(err, err_cap, "could not render the chat (out of memory?)");
        return NULL;
    }
    if (!(ctx = context(msgs, n_msgs))) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    need = anvil_chat_render_json(m, ctx, strlen(ctx), NULL, 0, err, err_cap);
    if (need < 0 && need != INT32_MIN && (buf = malloc((size_t)-need)) &&
        anvil_chat_render_json(m, ctx, strlen(ctx), buf, -need, err, err_cap) >= 0) {
        cJSON_free(ctx);
        return buf;
    }
    free(buf);
    cJSON_free(ctx);
    return NULL;
}
