/* cmd_make_tiny.c — `deepinfer make-tiny`. */
#include "commands.h"

int cmd_make_tiny(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("make-tiny", "model core, issue 2");
}
