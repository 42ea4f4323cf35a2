/*
 * cmd_tokenize.c - `anvil tokenize -m MODEL -p TEXT`: print the token ids
 * of a text (and each token's bytes), as the model's tokenizer makes them;
 * with --chat, the ids of the text sent as a user message through the
 * chat template. Only the tokenizer is loaded, so a vocabulary-only GGUF
 * (llama.cpp's ggml-vocab-*.gguf) works as well as a model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_render.h"
#include "cli.h"

static void help(FILE *f) {
    fprintf(f, "usage: anvil tokenize -m MODEL (-p TEXT | -f FILE) [options]\n"
               "\n"
               "Tokenize TEXT with the model's vocabulary and print one token per line:\n"
               "its id and its bytes (escaped). Special-token texts such as <|im_start|>\n"
               "become their ids unless --no-special is given.\n"
               "\n"
               "options:\n"
               "  -m, --model PATH   the GGUF model\n"
               "  -p, --prompt TEXT  the text to tokenize\n"
               "  -f, --file PATH    read the text from a file (any bytes)\n"
               "  --no-special       treat special-token texts as plain text\n"
               "  --no-bos           never add BOS (by default it is added when the\n"
               "                     vocabulary asks for it)\n"
               "  --ids-only         print only the ids, on one line\n"
               "  --chat             tokenize TEXT as a user message in the model's chat\n"
               "                     template (the message is text: typed control tokens\n"
               "                     stay text); the template's name goes to stderr\n"
               "  --system TEXT      with --chat: a system message first\n"
               "  --chat-template NAME  with --chat: this template family instead of the\n"
               "                     model's (chatml, llama3, gemma, mistral-v1, mistral-v3,\n"
               "                     mistral-v7, phi3)\n"
               "  --chat-template-file FILE  with --chat: this Jinja template instead of\n"
               "                     the GGUF's\n"
               "  --print-prompt     with --chat: print the rendered prompt, not its ids\n"
               "  -h, --help         this help\n"
               "\n"
               "Exit status: 0 ok, 1 runtime failure, 2 bad usage or bad input.\n");
}

/* Length of the well-formed UTF-8 character at p[0..n), or 0. */
static int utf8_char_len(const unsigned char *p, int32_t n) {
    int len = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
              : p[0] >= 0xf0 && p[0] <= 0xf4                ? 4
                                                             : 0;
    if (len == 0 || len > n) return 0;
    for (int k = 1; k < len; k++)
        if ((p[k] & 0xc0) != 0x80) return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] > 0x9f) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] > 0x8f))
        return 0;
    return len;
}

/* Print a token's bytes quoted: whole UTF-8 characters as they are, control
 * characters and bytes of split or invalid characters as escapes. */
static void put_piece(const char *s, int32_t n) {
    const unsigned char *p = (const unsigned char *)s;
    putchar('\'');
    for (int32_t i = 0; i < n;) {
        unsigned char c = p[i];
        int k = utf8_char_len(p + i, n - i);
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\'' || c == '\\') printf("\\%c", c);
        else if (k == 0 || c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else fwrite(p + i, 1, (size_t)k, stdout);
        i += k > 0 ? k : 1;
    }
    putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize", *model = NULL, *prompt = NULL, *file = NULL;
    const char *system = NULL, *tmpl = NULL, *tmpl_file = NULL;
    bool parse_special = true, add_special = true, ids_only = false, chat = false;
    bool print_prompt = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (!(prompt = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-special")) {
            parse_special = false;
        } else if (!strcmp(a, "--no-bos")) {
            add_special = false;
        } else if (!strcmp(a, "--ids-only")) {
            ids_only = true;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--system")) {
            if (!(system = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat-template")) {
            if (!(tmpl = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--chat-template-file")) {
            if (!(tmpl_file = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--print-prompt")) {
            print_prompt = true;
        } else {
            help(stderr);
            return cli_fail(cmd, "unknown option '%s'", a);
        }
    }
    if (!model) return cli_fail(cmd, "no model (-m MODEL)");
    if (!prompt == !file) return cli_fail(cmd, "give exactly one of -p TEXT or -f FILE");
    if ((system || tmpl || tmpl_file || print_prompt) && !chat)
        return cli_fail(cmd, "--system, --chat-template(-file) and --print-prompt need --chat");

    char *text = NULL;
    size_t len;
    if (file) {
        text = cli_read_file(file, &len);
        if (!text) return cli_fail(cmd, "cannot read '%s'", file);
    } else {
        len = strlen(prompt);
    }
    const char *t = file ? text : prompt;
    if (len == 0) {
        free(text);
        return cli_fail(cmd, "empty text");
    }

    char err[ANVIL_ERRMSG_CAP] = "";
    struct anvil_model *m = NULL;
    anvil_status st = anvil_model_load_vocab(model, &m, err, sizeof(err));
    if (st != ANVIL_OK) {
        free(text);
        return cli_fail(cmd, "%s", err[0] ? err : anvil_status_str(st));
    }
    struct anvil_chat_msg msgs[2];
    size_t n_msgs = 0;
    if (chat) {
        int crc = cli_chat_choose(cmd, m, tmpl, tmpl_file, false);
        if (crc) {
            free(text);
            anvil_model_free(m);
            return crc;
        }
        if (memchr(t, 0, len)) {
            free(text);
            anvil_model_free(m);
            return cli_fail(cmd, "--chat: the message contains a NUL byte");
        }
        /* the built-in family (the fallback) as before, then the renderer */
        static const char *const src[] = {"the model's template", "inferred from the vocabulary",
                                          "not recognised: ChatML", "chosen"};
        fprintf(stderr, "anvil %s: chat template %s (%s)\n", cmd, anvil_chat_template_name(m),
                src[(int)anvil_chat_template_source(m) & 3]);
        char rb[96];
        fprintf(stderr, "anvil %s: chat template: %s\n", cmd, cli_chat_renderer(m, rb, sizeof rb));
        if (system) msgs[n_msgs++] = (struct anvil_chat_msg){"system", system};
        msgs[n_msgs++] = (struct anvil_chat_msg){"user", t};
    }

    int rc = 0;
    if (print_prompt) {
        char *p = cli_chat_prompt(m, msgs, n_msgs, err, sizeof err);
        if (!p) {
            rc = cli_fail(cmd, "%s", err);
        } else {
            fputs(p, stdout);
            free(p);
        }
        free(text);
        anvil_model_free(m);
        return rc;
    }
    err[0] = '\0';
    int32_t cap = 256;
    anvil_token *ids = malloc(sizeof(anvil_token) * (size_t)cap);
#define TOKENIZE()                                                                             \
    (!ids ? INT32_MIN                                                                          \
     : chat ? cli_chat_tokenize(m, msgs, n_msgs, ids, cap, err, sizeof err)                    \
            : anvil_tokenize(m, t, len, ids, cap, add_special, parse_special))
    int32_t n = TOKENIZE();
    if (n < 0 && n != INT32_MIN) {
        cap = -n;
        free(ids);
        ids = malloc(sizeof(anvil_token) * (size_t)cap);
        n = TOKENIZE();
    }
#undef TOKENIZE
    if (n < 0) {
        /* a template that refuses the conversation is bad input (2) */
        if (err[0] && strncmp(err, "out of memory", 13) != 0) {
            rc = cli_fail(cmd, "%s", err);
        } else {
            fprintf(stderr, "anvil %s: tokenization failed (out of memory?)\n", cmd);
            rc = 1;
        }
        goto done;
    }
    if (ids_only) {
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        char piece[512];
        for (int32_t i = 0; i < n; i++) {
            int32_t k = anvil_token_to_piece(m, ids[i], piece, sizeof(piece), true);
            printf("%6d -> ", ids[i]);
            if (k < 0) {
                printf("(%d bytes)", -k);
            } else {
                put_piece(piece, k);
            }
            putchar('\n');
        }
    }
done:
    free(ids);
    free(text);
    anvil_model_free(m);
    return rc;
}
