/*
 * cmd_run.c - `anvil run`: generate a continuation of one prompt (or a chat
 * answer with --chat), streaming only the generated text to stdout and one
 * stats line to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gen.h"

static void usage(FILE *f) {
    fprintf(f, "usage: anvil run -m MODEL -p PROMPT [options]\n\n"
               "  -p, --prompt TEXT     the prompt (required, not empty)\n"
               "      --chat            wrap the prompt in the model's chat template\n");
    gen_print_opts_help(f);
}

/* Render [system], user with the model's template; falls back to the raw
 * text when the model has no template it recognises. Caller frees. */
static char *render_chat(struct anvil_model *m, const char *system, const char *user) {
    struct anvil_chat_msg msgs[2];
    size_t n = 0;
    if (system) msgs[n++] = (struct anvil_chat_msg){"system", system};
    msgs[n++] = (struct anvil_chat_msg){"user", user};
    int32_t need = anvil_chat_apply(m, msgs, n, true, NULL, 0);
    if (need == 0) return strdup(user);
    if (need < 0) need = -need;
    char *buf = malloc((size_t)need + 1);
    if (!buf) return NULL;
    if (anvil_chat_apply(m, msgs, n, true, buf, need + 1) <= 0) {
        free(buf);
        return strdup(user);
    }
    return buf;
}

int cmd_run(int argc, char **argv) {
    struct gen_opts o;
    gen_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) {
            if (!(o.prompt = cli_value("run", argc, argv, &i))) return 2;
            continue;
        }
        if (!strcmp(argv[i], "--chat")) {
            o.chat = true;
            continue;
        }
        int r = gen_parse_opt("run", &o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) return cli_fail("run", "unknown option '%s' (see anvil run --help)", argv[i]);
    }
    if (!o.prompt) return cli_fail("run", "a prompt is required (-p TEXT)");
    if (!o.prompt[0]) return cli_fail("run", "the prompt is empty");
    if (!o.model_path) return cli_fail("run", "a model is required (-m FILE)");

    struct gen_session s;
    int rc = gen_open("run", &o, &s);
    if (rc) return rc;
    char *text = o.chat ? render_chat(s.model, o.system, o.prompt) : strdup(o.prompt);
    if (!text) {
        gen_close(&s);
        return cli_fail("run", "out of memory");
    }
    rc = gen_run("run", &o, &s, text, stdout, NULL);
    free(text);
    gen_close(&s);
    return rc;
}
