/* commands.h — the subcommands of the `deepinfer` CLI, one file each (cmd_<name>.c).
 * Each takes argc/argv starting at its own name and returns the process exit code:
 * 0 success, 1 failure of the work, 2 bad usage.  Errors go to stderr with their cause. */
#ifndef DI_TOOLS_COMMANDS_H
#define DI_TOOLS_COMMANDS_H

#include "deepinfer.h"

int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_gateway(int argc, char **argv);
int cmd_make_tiny(int argc, char **argv);
int cmd_check_golden(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_parse(int argc, char **argv);
int cmd_eplb(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* --encoding of tokenize/detokenize: NULL -> the file's own table, "v4" / "v41" -> the built-in
 * tables.  Prints "deepinfer <cmd>: ..." and returns -1 for anything else. */
int cmd_added_table(const char *cmd, const char *encoding, DiAddedTable *out);

/* For commands not built yet: says so on stderr and returns 2. */
int cmd_not_available(const char *name, const char *issue);

#endif
