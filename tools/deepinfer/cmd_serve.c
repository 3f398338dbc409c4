/* cmd_serve.c — `deepinfer serve`. */
#include "commands.h"

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cmd_not_available("serve", "HTTP server, issue 5");
}
