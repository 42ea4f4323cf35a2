/*
 * main.c - `anvil COMMAND [options]`: dispatch to one command file each
 * (tools/cli/cmd_*.c; `bench` lives in bench/, linked into the same binary).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive chat with the model's template"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"quantize", cmd_quantize, "convert a GGUF's weights to another type"},
    {"perplexity", cmd_perplexity, "perplexity and KL divergence over a text"},
    {"bench", bench_main, "measure prefill/decode speed and kernels"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"convert", cmd_convert, "Hugging Face checkpoint folder to GGUF"},
    {"embed", cmd_embed, "print the embeddings of texts (embedding models)"},
    {"rerank", cmd_rerank, "score documents against a query (reranker models)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: anvil COMMAND [options]   (anvil COMMAND --help for details)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "anvil: unknown command '%s' (see anvil --help)\n", argv[1]);
    return 2;
}
