/* cmd_serve.c - `anvil serve` (not built yet). */
#include "cli.h"

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("serve", "not available in this build yet");
}
