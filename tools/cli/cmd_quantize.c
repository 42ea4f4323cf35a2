/* cmd_quantize.c - `anvil quantize` (not built yet). */
#include "cli.h"

int cmd_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("quantize", "not available in this build yet");
}
