/* cmd_parse.c — `deepinfer parse`: model output chunks on stdin -> the parsed message
 * (architecture.md).  The streaming state machine of src/recipe/parse.h does the work. */
#include "commands.h"

#include "base/error.h"
#include "base/file.h"

#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void parse_usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer parse < output.json\n\n"
            "Parses model output text the way the server streams it.\n"
            "stdin: {\"encoding\": \"v4\"|\"v4-0731\"|\"v41\",\n"
            "        \"options\": {\"initial\": \"content\"|\"start\"|\"reasoning\"|\"content_continuation\",\n"
            "                    \"tools\": true, \"tool_stage\": false, \"json_mode\": false,\n"
            "                    \"stop\": [\"...\"], \"finish\": \"stop\"|\"length\"},\n"
            "        \"chunks\": [\"...\", ...]}\n"
            "stdout: {\"reasoning_content\", \"content\", \"tool_calls\": [{\"name\", \"arguments\", \"complete\"}],\n"
            "         \"invalid\": [...], \"stopped\": bool, \"finish_reason\": \"stop\"|\"length\"|\"tool_calls\"}\n\n"
            "  --help   this text\n");
}

int cmd_parse(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            parse_usage(stdout);
            return 0;
        }
        fprintf(stderr, "deepinfer parse: unknown option '%s'\n\n", argv[i]);
        parse_usage(stderr);
        return 2;
    }
    char *input = NULL;
    size_t input_len = 0;
    if (di_read_stream(stdin, "stdin", &input, &input_len) != 0) {
        fprintf(stderr, "deepinfer parse: %s\n", di_error_message());
        return 1;
    }
    char *result = NULL;
    int rc = di_parse_json(input, input_len, &result);
    free(input);
    if (rc != 0) {
        fprintf(stderr, "deepinfer parse: %s\n", di_last_error());
        return 1;
    }
    fputs(result, stdout);
    fputc('\n', stdout);
    free(result);
    return 0;
}
