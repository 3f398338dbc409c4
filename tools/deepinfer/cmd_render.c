/* cmd_render.c — `deepinfer render`: conversation JSON on stdin -> {"prompt": "...", "ids": [...]}
 * on stdout (architecture.md; input fields in src/recipe/conversation.h).  Ids only with
 * --tokenizer; --segments adds the segment list (which spans are control tokens), for checking
 * that client text stays text. */
#include "commands.h"

#include "base/error.h"
#include "base/file.h"

#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void render_usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer render [--tokenizer FILE] [--segments] < conversation.json\n\n"
            "Renders a conversation to the exact prompt string of its encoding.\n"
            "stdin: {\"encoding\": \"v4\"|\"v4-0731\"|\"v41\", \"messages\": [...], \"tools\": [...],\n"
            "        \"thinking_mode\": \"chat\"|\"thinking\", \"reasoning_effort\": null|\"low\"|\"high\"|\"max\"|1..100,\n"
            "        \"drop_thinking\": true, \"tool_choice\": \"auto\"|\"none\"|\"required\",\n"
            "        \"response_format\": \"text\"|\"json_object\"\n"
            "                           |{\"type\": \"json_schema\", \"json_schema\": {\"schema\": {...}}}}\n"
            "stdout: {\"prompt\": \"...\", \"ids\": [...]} (\"ids\" only with --tokenizer; with --segments also\n"
            "        \"segments\": [{\"special\": bool, \"text\": \"...\"}])\n\n"
            "  --tokenizer FILE   tokenizer.json for the ids; a file that defines the V4 control\n"
            "                     tokens (has </think>) is used as it is, otherwise (a V3 file) the\n"
            "                     V4.1 added tokens come from the built-in table\n"
            "  --segments         also print the control-token / text segments\n"
            "  --help             this text\n");
}

int cmd_render(int argc, char **argv) {
    int want_segments = 0;
    const char *tokenizer_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            render_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--tokenizer") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "deepinfer render: --tokenizer needs a FILE\n\n");
                render_usage(stderr);
                return 2;
            }
            tokenizer_path = argv[++i];
        } else if (strcmp(argv[i], "--segments") == 0) {
            want_segments = 1;
        } else {
            fprintf(stderr, "deepinfer render: unknown option '%s'\n\n", argv[i]);
            render_usage(stderr);
            return 2;
        }
    }
    DiTokenizer *tok = NULL;
    if (tokenizer_path && !(tok = di_tokenizer_load_table(tokenizer_path, DI_ADDED_TABLE_AUTO))) {
        fprintf(stderr, "deepinfer render: %s\n", di_last_error());
        return 1;
    }
    char *input = NULL;
    size_t input_len = 0;
    if (di_read_stream(stdin, "stdin", &input, &input_len) != 0) {
        fprintf(stderr, "deepinfer render: %s\n", di_error_message());
        di_tokenizer_free(tok);
        return 1;
    }
    char *result = NULL;
    int rc = di_render_json_ids(tok, input, input_len, want_segments ? DI_RENDER_WITH_SEGMENTS : 0, &result);
    free(input);
    di_tokenizer_free(tok);
    if (rc != 0) {
        fprintf(stderr, "deepinfer render: %s\n", di_last_error());
        return 1;
    }
    fputs(result, stdout);
    fputc('\n', stdout);
    free(result);
    return 0;
}
