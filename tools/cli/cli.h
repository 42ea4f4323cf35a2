/*
 * cli.h - the anvil command-line tool: one file per command, thin over
 * libanvil (`anvil bench` lives in bench/, see bench/bench.h). Exit
 * status: 0 ok, 1 runtime failure, 2 bad usage or bad input.
 */
#ifndef ANVIL_CLI_H
#define ANVIL_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "anvil.h"
#include "args.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_rerank(int argc, char **argv);

#endif
