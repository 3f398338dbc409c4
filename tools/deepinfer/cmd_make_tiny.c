/* cmd_make_tiny.c — `deepinfer make-tiny --out DIR [--seed N] [--config tiny|medium|spec9] [--planted]`:
 * write a synthetic V4.1 checkpoint in the official layout (src/model/tiny.h), then open it with
 * the checkpoint reader as a self-check and print one summary line. */
#include "commands.h"

#include "base/error.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/tiny.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer make-tiny --out DIR [--seed N] [--config tiny|medium|spec9] [--planted]\n"
            "\n"
            "Write a synthetic DeepSeek-V4.1 checkpoint in the official Hugging Face layout: nested\n"
            "config.json, two safetensors shards + model.safetensors.index.json (FP8 E4M3 weights with\n"
            "32x32 UE8M0 scales, FP4 E2M1 experts, Engram tables, DSpark stages) and tokenizer.json.\n"
            "\n"
            "  --out DIR      output directory (created; files are replaced atomically)\n"
            "  --seed N       random seed, a non-negative integer (default %d); same seed, same bytes\n"
            "  --config NAME  tiny   (default) model-v41.md §9 shapes, vocabulary 291 with a tokenizer\n"
            "                 medium benchmark size: hidden 1024, 64 experts, about 520 MB\n"
            "                 spec9  §9.2 verbatim (vocabulary 256), no tokenizer\n"
            "  --planted      a drafter that agrees with its target: the blocks' outputs shrunk to\n"
            "                 2^-16, the head and the DSpark Markov head encoding one next-token map,\n"
            "                 so speculative drafts are accepted (engine-features.md 1.7 item 2)\n"
            "  --help         this text\n",
            DI_TINY_DEFAULT_SEED);
}

static int parse_seed(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Open what was written with config + inventory checks: it must load with zero warnings. */
static int self_check(const char *dir) {
    DiModelConfig cfg;
    if (di_config_load(dir, &cfg) < 0) return -1;
    DiCheckpoint *ck = di_checkpoint_open(dir, &cfg);
    int rc = -1;
    if (ck && di_checkpoint_n_warnings(ck) == 0) {
        printf("wrote %s: %zu tensors, %lld bytes of weights in %zu shards\n", dir, di_checkpoint_n_tensors(ck),
               (long long)di_checkpoint_tensor_bytes(ck), di_checkpoint_n_files(ck));
        rc = 0;
    } else if (ck) {
        di_errorf("%s: written checkpoint has %zu warnings (first: %s)", dir, di_checkpoint_n_warnings(ck),
                  di_checkpoint_warning(ck, 0));
    }
    di_checkpoint_close(ck);
    di_config_free(&cfg);
    return rc;
}

int cmd_make_tiny(int argc, char **argv) {
    const char *out = NULL, *preset = "tiny";
    uint64_t seed = DI_TINY_DEFAULT_SEED;
    int planted = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--planted") == 0) {
            planted = 1;
            continue;
        }
        if (i + 1 >= argc || (strcmp(a, "--out") && strcmp(a, "--seed") && strcmp(a, "--config"))) {
            fprintf(stderr, "deepinfer make-tiny: %s '%s'\n",
                    i + 1 >= argc && a[0] == '-' ? "missing value for" : "unknown argument", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--config") == 0)
            preset = v;
        else if (parse_seed(v, &seed) < 0) {
            fprintf(stderr, "deepinfer make-tiny: --seed: '%s' is not a non-negative integer\n", v);
            return 2;
        }
    }
    if (!out || !*out) {
        fprintf(stderr, "deepinfer make-tiny: --out DIR is required\n");
        usage(stderr);
        return 2;
    }
    if (!di_tiny_config_json(preset)) {
        fprintf(stderr, "deepinfer make-tiny: --config: %s\n", di_error_message());
        return 2;
    }
    int wrote = planted ? di_tiny_write_planted(out, preset, seed, 1) : di_tiny_write(out, preset, seed, 1);
    if (wrote < 0 || self_check(out) < 0) {
        fprintf(stderr, "deepinfer make-tiny: %s\n", di_error_message());
        return 1;
    }
    return 0;
}
