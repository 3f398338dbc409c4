/* cmd_detokenize.c — `deepinfer detokenize`: {"ids":[...]} on stdin -> the exact bytes of
 * those tokens on stdout (no newline added, nothing replaced: a token sequence that splits a
 * UTF-8 character prints the split bytes as they are). */
#include "commands.h"

#include "base/error.h"
#include "base/json.h"
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer detokenize --tokenizer FILE [--encoding v4|v41]\n"
            "\n"
            "Reads {\"ids\":[...]} from stdin and writes the bytes of those tokens to stdout,\n"
            "exactly (no newline added; added tokens print their spelling).  An id the tokenizer\n"
            "does not have is an error (exit 1).\n"
            "\n"
            "  --tokenizer FILE   a Hugging Face tokenizer.json of the DeepSeek V3/V4/V4.1 family\n"
            "  --encoding v4|v41  add the built-in V4 / V4.1 added-token table (see tokenize --help)\n");
}

static int decode_stdin(const DiTokenizer *tok) {
    json_error_t jerr;
    json_t *root = json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return di_errorf("stdin:%d:%d: invalid JSON: %s", jerr.line, jerr.column, jerr.text);
    int64_t *ids64 = NULL;
    size_t n = 0;
    int rc = di_json_int_array(root, "", "ids", true, &ids64, &n);
    json_decref(root);
    if (rc != 0) return di_error_wrap("stdin");
    int32_t *ids = calloc(n ? n : 1, sizeof *ids);
    if (!ids) {
        free(ids64);
        return di_errorf("out of memory for %zu ids", n);
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (ids64[i] < 0 || ids64[i] > INT32_MAX) rc = di_errorf("ids[%zu]: %lld is not a token id", i, (long long)ids64[i]);
        ids[i] = (int32_t)ids64[i];
    }
    free(ids64);
    char *out = NULL;
    size_t len = 0;
    if (rc == 0) rc = di_tokenizer_decode(tok, ids, n, &out, &len);
    free(ids);
    if (rc == 0 && (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0)) rc = di_errorf("writing stdout failed");
    free(out);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *path = NULL, *encoding = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(a, "--encoding") && i + 1 < argc) {
            encoding = argv[++i];
        } else {
            fprintf(stderr, "deepinfer detokenize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "deepinfer detokenize: --tokenizer FILE is required\n\n");
        usage(stderr);
        return 2;
    }
    DiAddedTable table;
    if (cmd_added_table("detokenize", encoding, &table) != 0) {
        return 2;
    }
    DiTokenizer *tok = di_tokenizer_load_table(path, table);
    int rc = tok ? decode_stdin(tok) : -1;
    if (rc != 0) fprintf(stderr, "deepinfer detokenize: %s\n", di_last_error());
    di_tokenizer_free(tok);
    return rc == 0 ? 0 : 1;
}
