/* cmd_bench.c - `anvil bench` (not built yet). */
#include "cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("bench", "not available in this build yet");
}
