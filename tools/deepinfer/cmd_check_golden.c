/* cmd_check_golden.c — `deepinfer check-golden DIR`: load DIR/checkpoint, replay every case of
 * DIR/golden.json (logits cases with their chunk schedules, DSpark cases) and compare with the
 * tolerances of golden-v41/README.md §6.  One line per case on stdout:
 *     case=NAME max_abs=X max_rel=Y ok        (or ... FAIL, with the reason on stderr)
 * then "N passed, N failed".  Exit 0 only when every case passes.  `ref`-mode cases run on the
 * reference kernel by default (--kernels), see usage(). */
#include "commands.h"

#include "base/error.h"
#include "base/file.h"
#include "golden/golden.h"
#include "golden/golden_vision.h"
#include "model/vit.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: deepinfer check-golden DIR [--case SUBSTRING] [--mode exact|kvq|ref] [--kernels auto|backend|ref]\n"
            "  Runs the golden set in DIR (DIR/checkpoint, DIR/golden.json, DIR/golden.bin).\n"
            "  --case S   only cases whose name contains S\n"
            "  --mode M   only cases of numerics mode M\n"
            "  --kernels  matrix kernels: backend (di_matmul), ref (the scalar di_matmul_ref), or auto\n"
            "             (default): ref for `ref`-mode cases, backend for the others.  In `ref` mode every\n"
            "             GEMM input is FP8-rounded, so a float32 summation-order difference can flip a\n"
            "             rounding and move the logits by ~0.5 (golden README §6); the reference kernel's\n"
            "             fixed ascending order keeps that tier reproducible.\n"
            "  Prints one line per case: case=NAME max_abs=X max_rel=Y ok|FAIL (max_rel = max_abs /\n"
            "  max |golden value|), then 'N passed, N failed'.  Exit 0 when all pass, 1 otherwise.\n");
}

static void report(const GoldenResult *r, int *passed, int *failed) {
    printf("case=%s max_abs=%.3g max_rel=%.3g %s\n", r->name, r->max_abs, r->max_rel, r->ok ? "ok" : "FAIL");
    fflush(stdout);
    if (!r->ok) fprintf(stderr, "  %s: %s\n", r->name, r->why);
    if (r->ok) (*passed)++;
    else (*failed)++;
}

/* A vision case's line: rc != 0 is a case that could not run (the error names why). */
static void report_run(int rc, GoldenResult *r, const char *name, int *passed, int *failed) {
    if (rc != 0) {
        printf("case=%s max_abs=nan max_rel=nan FAIL\n", name);
        fprintf(stderr, "  %s: %s\n", name, di_error_message());
        (*failed)++;
        return;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    report(r, passed, failed);
}

/* A vision set (golden-v41/tiny-v): every image's ViT layers, final norm, aligner input and rows,
 * once per numerics mode of golden.json["modes"] (the vision stages are float32 in each; the
 * mode picks the kernels as for the text cases), as cases "image<k>.vision.<mode>". */
static void run_vision(const GoldenSet *g, Model *m, const DiKernelBackend *loaded, const char *only_case, const char *only_mode,
                       const char *kernels, int *passed, int *failed) {
    VisionModel *vm = vit_load(m->ck, &m->cfg, loaded, m->pool);
    if (!vm) {
        printf("case=vision max_abs=nan max_rel=nan FAIL\n");
        fprintf(stderr, "  vision: %s\n", di_error_message());
        (*failed)++;
        return;
    }
    json_t *modes = json_object_get(g->root, "modes");
    const char *mode;
    json_t *unused;
    json_object_foreach(modes, mode, unused) {
        NumericsMode nm;
        if (only_mode && strcmp(mode, only_mode) != 0) continue;
        if (numerics_mode_parse(mode, &nm) != 0) continue;
        bool ref = strcmp(kernels, "ref") == 0 || (strcmp(kernels, "auto") == 0 && nm == MODE_REF);
        vm->be = ref ? di_backend_cpu_ref() : loaded;
        for (size_t k = 0; k < golden_n_images(g); k++) {
            GoldenResult r;
            char name[100];
            snprintf(name, sizeof name, "image%zu.vision.%s", k, mode);
            if (only_case && !strstr(name, only_case)) continue;
            report_run(golden_run_image(g, vm, k, &r), &r, name, passed, failed);
        }
        char name[100];
        snprintf(name, sizeof name, "prompt.span.%s", mode);
        if (only_case && !strstr(name, only_case)) continue;
        GoldenResult r;
        report_run(golden_run_prompt(g, vm, m->cfg.image_token_id, &r), &r, name, passed, failed);
    }
    vit_free(vm);
}

int cmd_check_golden(int argc, char **argv) {
    const char *dir = NULL, *only_case = NULL, *only_mode = NULL, *kernels = "auto";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            only_case = argv[++i];
        } else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            only_mode = argv[++i];
        } else if (strcmp(argv[i], "--kernels") == 0 && i + 1 < argc) {
            kernels = argv[++i];
            if (strcmp(kernels, "auto") && strcmp(kernels, "backend") && strcmp(kernels, "ref")) {
                fprintf(stderr, "deepinfer check-golden: --kernels must be auto, backend or ref\n");
                return 2;
            }
        } else if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "deepinfer check-golden: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    NumericsMode mode_filter;
    if (only_mode && numerics_mode_parse(only_mode, &mode_filter) != 0) {
        fprintf(stderr, "deepinfer check-golden: %s\n", di_error_message());
        return 2;
    }
    GoldenSet g;
    if (golden_open(dir, &g) != 0) {
        fprintf(stderr, "deepinfer check-golden: %s\n", di_error_message());
        return 1;
    }
    char *ckdir = di_path_join(dir, "checkpoint");
    Model *m = ckdir ? model_load(ckdir, MODE_REF) : NULL;
    free(ckdir);
    if (!m || golden_prepare_model(&g, m) != 0) {
        fprintf(stderr, "deepinfer check-golden: %s\n", di_error_message());
        model_free(m);
        golden_close(&g);
        return 1;
    }
    int passed = 0, failed = 0;
    const DiKernelBackend *loaded = m->be; /* the backend cpuid and DEEPINFER_KERNELS chose */
    if (golden_is_vision(&g)) run_vision(&g, m, loaded, only_case, only_mode, kernels, &passed, &failed);
    for (size_t i = 0; i < golden_n_cases(&g); i++) {
        GoldenResult r;
        json_t *c = json_array_get(json_object_get(g.root, "cases"), i);
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *mode = json_string_value(json_object_get(c, "mode"));
        if (only_case && (!name || !strstr(name, only_case))) continue;
        if (only_mode && (!mode || strcmp(mode, only_mode) != 0)) continue;
        bool ref = strcmp(kernels, "ref") == 0 || (strcmp(kernels, "auto") == 0 && mode && strcmp(mode, "ref") == 0);
        const DiKernelBackend *be = ref ? di_backend_cpu_ref() : loaded;
        if ((m->be != be && model_set_backend(m, be) != 0) || golden_run_case(&g, m, i, &r) != 0) {
            printf("case=%s max_abs=nan max_rel=nan FAIL\n", name ? name : "?");
            fprintf(stderr, "  %s: %s\n", name ? name : "?", di_error_message());
            failed++;
            continue;
        }
        report(&r, &passed, &failed);
    }
    printf("%d passed, %d failed\n", passed, failed);
    model_free(m);
    golden_close(&g);
    return failed ? 1 : 0;
}
