/* cmd_inspect.c - `anvil inspect` (not built yet). */
#include "cli.h"

int cmd_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("inspect", "not available in this build yet");
}
