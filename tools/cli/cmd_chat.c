/* cmd_chat.c - `anvil chat` (not built yet). */
#include "cli.h"

int cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_fail("chat", "not available in this build yet");
}
