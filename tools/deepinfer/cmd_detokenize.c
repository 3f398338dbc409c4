/* cmd_detokenize.c — `deepinfer detokenize`. */
#include "commands.h"

int cmd_detokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("detokenize", "recipe, issue 3");
}
