/* cmd_parse.c — `deepinfer parse`. */
#include "commands.h"

int cmd_parse(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("parse", "recipe, issue 3");
}
