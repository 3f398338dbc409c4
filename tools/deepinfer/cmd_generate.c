/* cmd_generate.c — `deepinfer generate`. */
#include "commands.h"

int cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("generate", "model core, issue 2");
}
