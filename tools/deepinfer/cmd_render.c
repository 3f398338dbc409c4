/* cmd_render.c — `deepinfer render`. */
#include "commands.h"

int cmd_render(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("render", "recipe, issue 3");
}
