/* cmd_tokenize.c — `deepinfer tokenize`: UTF-8 text on stdin -> {"ids":[...]} on stdout.
 *
 * Two modes, because the prompt path and Hugging Face disagree on purpose (recipe.md §5):
 * by default added-token spellings in the text become their ids, exactly like HF
 * `Tokenizer.encode(text, add_special_tokens=False)`; with --plain the text is encoded with
 * no added-token recognition, the way every TEXT segment of a rendered prompt is encoded
 * (user text "<｜User｜>" is 5 ordinary tokens). */
#include "commands.h"

#include "base/file.h"

#include "base/error.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer tokenize --tokenizer FILE [--encoding v4|v41] [--plain] [--threads N]\n"
            "\n"
            "Reads UTF-8 text from stdin (all of it, newlines included) and prints {\"ids\":[...]}.\n"
            "\n"
            "  --tokenizer FILE   a Hugging Face tokenizer.json of the DeepSeek V3/V4/V4.1 family\n"
            "  --encoding v4|v41  add the built-in V4 (or V4.1: also <｜System｜> = 128799) added-token\n"
            "                     table to the file's own; ids the file already has keep its tokens.\n"
            "                     Default: the file's table as it is.\n"
            "  --plain            no added-token recognition: special-token spellings in the text\n"
            "                     are ordinary text (how a prompt's text segments are encoded).\n"
            "                     Default: spellings of added tokens become their ids, as in HF\n"
            "                     tokenizers' encode(text, add_special_tokens=False).\n"
            "  --threads N        threads for long texts (default: DEEPINFER_NUM_THREADS, else all\n"
            "                     CPUs); the ids never depend on it.\n"
            "\n"
            "No BOS is added.  Input that is not valid UTF-8 is an error (exit 1) naming the byte\n"
            "offset; nothing is replaced silently.\n");
}

static int print_ids(const int32_t *ids, size_t n) {
    fputs("{\"ids\":[", stdout);
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    fputs("]}\n", stdout);
    return fflush(stdout) == 0 ? 0 : di_errorf("writing stdout failed");
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *encoding = NULL;
    int plain = 0, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--plain")) {
            plain = 1;
        } else if ((!strcmp(a, "--tokenizer") || !strcmp(a, "--encoding") || !strcmp(a, "--threads")) && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(a, "--tokenizer")) path = v;
            else if (!strcmp(a, "--encoding")) encoding = v;
            else {
                char *end;
                long t = strtol(v, &end, 10);
                if (*end || t < 1 || t > 1024) {
                    fprintf(stderr, "deepinfer tokenize: --threads: expected 1..1024, got '%s'\n", v);
                    return 2;
                }
                threads = (int)t;
            }
        } else {
            fprintf(stderr, "deepinfer tokenize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "deepinfer tokenize: --tokenizer FILE is required\n\n");
        usage(stderr);
        return 2;
    }
    DiAddedTable table;
    if (cmd_added_table("tokenize", encoding, &table) != 0) {
        return 2;
    }
    if (threads == 0 && (threads = di_default_threads()) < 0) {
        fprintf(stderr, "deepinfer tokenize: %s\n", di_last_error());
        return 2;
    }
    DiTokenizer *tok = di_tokenizer_load_table(path, table);
    size_t len = 0;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = -1;
    if (tok && di_tokenizer_set_threads(tok, threads) == 0 && di_read_stream(stdin, "stdin", &text, &len) == 0) {
        rc = plain ? di_tokenizer_encode(tok, text, len, &ids, &n_ids)
                   : di_tokenizer_encode_with_added(tok, text, len, &ids, &n_ids);
        if (rc != 0) di_error_wrap("stdin");
        if (rc == 0) rc = print_ids(ids, n_ids);
    }
    if (rc != 0) fprintf(stderr, "deepinfer tokenize: %s\n", di_last_error());
    free(ids);
    free(text);
    di_tokenizer_free(tok);
    return rc == 0 ? 0 : 1;
}
