/* cmd_check_golden.c — `deepinfer check-golden`. */
#include "commands.h"

int cmd_check_golden(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("check-golden", "model core, issue 2");
}
