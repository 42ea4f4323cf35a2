/* cmd_run.c - `anvil run` (not built yet). */
#include "cli.h"

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("run", "not available in this build yet");
}
