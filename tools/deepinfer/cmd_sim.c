/* cmd_sim.c — `deepinfer sim`. */
#include "commands.h"

int cmd_sim(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("sim", "serving control plane, issue 6");
}
