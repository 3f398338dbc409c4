/* cmd_tokenize.c — `deepinfer tokenize`. */
#include "commands.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("tokenize", "recipe, issue 3");
}
