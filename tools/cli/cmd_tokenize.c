/* cmd_tokenize.c - `anvil tokenize` (not built yet). */
#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("tokenize", "not available in this build yet");
}
