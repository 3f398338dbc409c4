/* cmd_chat.c — `deepinfer chat`. */
#include "commands.h"

int cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("chat", "engine, issue 4");
}
