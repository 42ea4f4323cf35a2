/*
 * cmd_chat.c - `anvil chat`: interactive chat on stdin/stdout using the
 * model's chat template (its Jinja template, --chat-template-file FILE,
 * or --chat-template NAME). The whole conversation is re-rendered and
 * tokenized each turn (what the user types is text, never control
 * tokens; --print-prompt prints the first turn's prompt and exits); the KV cache keeps the
 * common prefix, so only the new turn is prefilled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gen.h"

static void usage(FILE *f) {
    fprintf(f, "usage: anvil chat -m MODEL [options]\n"
               "Type a message and press enter; an empty line or EOF ends the chat.\n\n");
    gen_print_opts_help(f);
}

struct history {
    struct anvil_chat_msg *msgs;
    char **owned;
    size_t n, cap;
};

static bool history_add(struct history *h, const char *role, char *content) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        struct anvil_chat_msg *m = realloc(h->msgs, cap * sizeof(*m));
        if (!m) return false;
        h->msgs = m;
        char **o = realloc(h->owned, cap * sizeof(*o));
        if (!o) return false;
        h->owned = o;
        h->cap = cap;
    }
    h->msgs[h->n] = (struct anvil_chat_msg){role, content};
    h->owned[h->n++] = content;
    return true;
}

int cmd_chat(int argc, char **argv) {
    struct gen_opts o;
    gen_opts_default(&o);
    o.n_predict = 512;
    o.chat = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        int r = gen_parse_opt("chat", &o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) return cli_fail("chat", "unknown option '%s' (see anvil chat --help)", argv[i]);
    }
    struct gen_session s;
    int rc = gen_open("chat", &o, &s);
    if (rc) return rc;
    struct history h = {0};
    if (o.system) history_add(&h, "system", strdup(o.system));
    char line[8192];
    for (;;) {
        fputs("> ", stderr);
        if (!fgets(line, sizeof(line), stdin)) break;
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) break;
        if (!history_add(&h, "user", strdup(line))) break;
        char *reply = NULL;
        rc = gen_run_chat("chat", &o, &s, h.msgs, h.n, stdout, &reply);
        if (o.print_prompt) break; /* the first turn's prompt was printed */
        fputc('\n', stdout);
        if (rc) break;
        history_add(&h, "assistant", reply ? reply : strdup(""));
    }
    for (size_t i = 0; i < h.n; i++) free(h.owned[i]);
    free(h.msgs);
    free(h.owned);
    gen_close(&s);
    return rc;
}
