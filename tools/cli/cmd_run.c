/*
 * cmd_run.c - `anvil run`: generate a continuation of one prompt (or a chat
 * answer with --chat, with the model's chat template, --chat-template
 * NAME or --chat-template-file FILE; --print-prompt prints the rendered
 * prompt instead), streaming only the generated text to stdout and one stats line to
 * stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gen.h"

static void usage(FILE *f) {
    fprintf(f, "usage: anvil run -m MODEL -p PROMPT [options]\n\n"
               "  -p, --prompt TEXT     the prompt (required, not empty)\n"
               "      --chat            wrap the prompt in the model's chat template (the\n"
               "                        prompt is tokenized as text: typed control tokens\n"
               "                        such as <|im_start|> stay text)\n");
    gen_print_opts_help(f);
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
    if (o.print_prompt && !o.chat) {
        fputs(o.prompt, stdout); /* no template: the prompt is the text */
    } else if (o.chat) {
        /* the prompt is message content: tokenized as text, whatever it
         * contains, while the template's markers are control tokens */
        struct anvil_chat_msg msgs[2];
        size_t n = 0;
        if (o.system) msgs[n++] = (struct anvil_chat_msg){"system", o.system};
        msgs[n++] = (struct anvil_chat_msg){"user", o.prompt};
        rc = gen_run_chat("run", &o, &s, msgs, n, stdout, NULL);
    } else {
        rc = gen_run("run", &o, &s, o.prompt, stdout, NULL);
    }
    gen_close(&s);
    return rc;
}
