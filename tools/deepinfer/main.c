/* main.c — `deepinfer <command> [options]`: dispatch to the subcommands of commands.h. */
#include "commands.h"

#include "deepinfer.h"

#include "base/env.h"
#include "base/error.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} Command;

static const Command commands[] = {
    {"generate", cmd_generate, "generate text from a prompt (greedy or sampled)"},
    {"chat", cmd_chat, "interactive multi-turn chat"},
    {"serve", cmd_serve, "HTTP API server (OpenAI / Anthropic compatible)"},
    {"gateway", cmd_gateway, "HTTP front that routes requests over serve workers"},
    {"make-tiny", cmd_make_tiny, "write a tiny V4.1 checkpoint in the official format"},
    {"check-golden", cmd_check_golden, "run a golden test set and compare logits"},
    {"tokenize", cmd_tokenize, "text on stdin -> {\"ids\":[...]}"},
    {"detokenize", cmd_detokenize, "{\"ids\":[...]} on stdin -> text"},
    {"render", cmd_render, "conversation JSON on stdin -> prompt and ids"},
    {"parse", cmd_parse, "model output chunks on stdin -> parsed message"},
    {"eplb", cmd_eplb, "expert-parallel load balancer plan"},
    {"sim", cmd_sim, "cluster simulation over a request trace"},
    {"bench", cmd_bench, "performance figures against measured baselines"},
};

static void usage(FILE *out) {
    fprintf(out, "deepinfer %s — inference engine for DeepSeek-V4.1-Flash\n\n", di_version());
    fprintf(out, "usage: deepinfer <command> [options]   (deepinfer <command> --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].summary);
}

int cmd_added_table(const char *cmd, const char *encoding, DiAddedTable *out) {
    *out = DI_ADDED_TABLE_FILE;
    if (!encoding) return 0;
    if (strcmp(encoding, "v4") == 0) *out = DI_ADDED_TABLE_V4;
    else if (strcmp(encoding, "v41") == 0) *out = DI_ADDED_TABLE_V41;
    else {
        fprintf(stderr, "deepinfer %s: --encoding: expected v4 or v41, got '%s'\n", cmd, encoding);
        return -1;
    }
    return 0;
}

int cmd_not_available(const char *name, const char *issue) {
    fprintf(stderr, "deepinfer %s: not available in this build yet (%s)\n", name, issue);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("deepinfer %s\n", di_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            if (di_env_check() != 0) {
                fprintf(stderr, "deepinfer: %s\n", di_error_message());
                return 2;
            }
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "deepinfer: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
