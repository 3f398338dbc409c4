/* cmd_bench.c — `deepinfer bench`. */
#include "commands.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("bench", "benchmarks");
}
