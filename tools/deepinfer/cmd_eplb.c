/* cmd_eplb.c — `deepinfer eplb`. */
#include "commands.h"

int cmd_eplb(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("eplb", "serving control plane, issue 6");
}
