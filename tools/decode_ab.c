/* decode_ab.c — A/B of whole batch-1 decode steps of two builds of the library in one process.
 *
 * kernel_ab compares one kernel; a decode step also pays for everything between the kernels
 * (norms, mHC, attention, routing, the thread pool's hand-offs), and on the shared, noisy
 * machine two bench_decode runs minutes apart differ by 20-30 %.  This tool loads both builds
 * (dlopen, RTLD_LOCAL), loads the same checkpoint in each, and runs them in alternating rounds
 * on the same tokens at the same positions: a round is a fresh state, the same prompt and a run
 * of decode steps for one build, then the same for the other (which goes first alternates).
 * A round's ratio is A's time over B's for the timed steps (B's speed relative to A); the round's
 * prompt (DECODE_AB_PROMPT tokens, default 16, one forward) is timed the same way as a prefill.  It reports the median of the rounds' ratios with the quartiles,
 * each build's median tokens/s, and whether the two builds' logits were the same bits at every
 * step (they must be for a pure speed change).
 *
 *     make BUILD=/tmp/a lib     (old tree)      make BUILD=/tmp/b lib     (new tree)
 *     build/decode_ab /tmp/a/libdeepinfer_internal.so /tmp/b/libdeepinfer_internal.so [ref|kvq|exact] [THREADS]
 *
 * It calls internal functions (model_load, model_forward, ...), which libdeepinfer.so does not
 * export: give it libdeepinfer_internal.so, the same objects with every symbol exported (a tree
 * older than that library exports them from libdeepinfer.so).
 *
 * Checkpoint: $DECODE_AB_MODEL as it is (one that make-tiny wrote, any preset: the tool uses the
 * tiny tokenizer's Engram token map), else $DEEPINFER_BENCH_DIR, else bench_decode's default
 * (the medium synthetic checkpoint, generated there on first use).  Defaults: ref numerics, 2
 * threads.
 * Both builds must share model.h's Model layout up to its `pool` field (the tool sets it), which
 * holds for any two trees that do not change that struct. */
#include "model/forward.h"
#include "model/model.h"
#include "model/state.h"

#include "ab_common.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROUNDS = 61, PROMPT = 16, WARMUP = 2, STEPS = 16 };

typedef Model *(*LoadFn)(const char *, NumericsMode);
typedef void (*FreeFn)(Model *);
typedef int (*MapFn)(const int32_t **, int64_t *);
typedef int (*SetMapFn)(Model *, const int32_t *, int64_t);
typedef RunState *(*StateCreateFn)(const ModelDims *);
typedef void (*StateFreeFn)(RunState *);
typedef int (*ForwardFn)(const Model *, RunState *, const int32_t *, int64_t, int64_t, float *, bool, ForwardTrace *);
typedef DiThreadPool *(*PoolCreateFn)(int);
typedef void (*PoolDestroyFn)(DiThreadPool *);
typedef int (*EnsureFn)(const char *, const char *, int);
typedef const char *(*LastErrorFn)(void);

/* One build: its entry points, its model, pool, state and logits. */
typedef struct {
    const char *path;
    LoadFn load;
    FreeFn free_model;
    MapFn token_map;
    SetMapFn set_map;
    StateCreateFn state_create;
    StateFreeFn state_free;
    ForwardFn forward;
    PoolCreateFn pool_create;
    PoolDestroyFn pool_destroy;
    EnsureFn ensure;
    LastErrorFn last_error;
    Model *m;
    DiThreadPool *pool;
    RunState *st;
    float *logits;
    int64_t n_tokens; /* token ids 0 .. n_tokens-1 are in both the vocabulary and the Engram map */
} Build;


static double quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[(int)(q * (n - 1) + 0.5)];
}

static int usage(void) {
    fprintf(stderr, "usage: decode_ab OLD.so NEW.so [ref|kvq|exact] [THREADS]\n"
                    "  checkpoint: $DECODE_AB_MODEL (a make-tiny one, used as is), else $DEEPINFER_BENCH_DIR,\n"
                    "  else bench_decode's medium checkpoint\n");
    return 2;
}

static void *symbol(void *h, const char *path, const char *name, int *missing) {
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "decode_ab: %s: no symbol %s (%s)\n", path, name, AB_INTERNAL_HINT);
        *missing = 1;
    }
    return p;
}

static int open_build(Build *b, const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "decode_ab: %s\n", dlerror());
        return -1;
    }
    int missing = 0;
    b->path = path;
    b->load = (LoadFn)symbol(h, path, "model_load", &missing);
    b->free_model = (FreeFn)symbol(h, path, "model_free", &missing);
    b->token_map = (MapFn)symbol(h, path, "di_tiny_engram_token_map", &missing);
    b->set_map = (SetMapFn)symbol(h, path, "model_set_engram_token_map", &missing);
    b->state_create = (StateCreateFn)symbol(h, path, "state_create", &missing);
    b->state_free = (StateFreeFn)symbol(h, path, "state_free", &missing);
    b->forward = (ForwardFn)symbol(h, path, "model_forward", &missing);
    b->pool_create = (PoolCreateFn)symbol(h, path, "di_pool_create", &missing);
    b->pool_destroy = (PoolDestroyFn)symbol(h, path, "di_pool_destroy", &missing);
    b->ensure = (EnsureFn)symbol(h, path, "di_tiny_ensure_preset", &missing);
    b->last_error = (LastErrorFn)symbol(h, path, "di_error_message", &missing);
    return missing ? -1 : 0;
}

static int fail(const Build *b, const char *what) {
    fprintf(stderr, "decode_ab: %s: %s: %s\n", b->path, what, b->last_error());
    return -1;
}

static int load_model(Build *b, const char *dir, NumericsMode mode, int threads) {
    const int32_t *map;
    int64_t map_len;
    if (!(b->m = b->load(dir, mode))) return fail(b, "loading the checkpoint");
    if (b->token_map(&map, &map_len) != 0 || b->set_map(b->m, map, map_len) != 0) return fail(b, "engram token map");
    b->n_tokens = map_len < b->m->d.vocab ? map_len : b->m->d.vocab;
    if (!(b->pool = b->pool_create(threads))) return fail(b, "thread pool");
    b->m->pool = b->pool;
    if (!(b->logits = malloc((size_t)b->m->d.vocab * sizeof *b->logits))) return fail(b, "logits");
    return 0;
}

/* The token stream: deterministic, inside the vocabulary and the Engram map. */
static int32_t token_at(int i, int64_t n_tokens) { return (int32_t)((7 + 13 * i) % n_tokens); }

/* Prompt length: DECODE_AB_PROMPT, else PROMPT. */
static int prompt_len = PROMPT;

/* A fresh state and the prompt, one prefill forward timed into *seconds. */
static int start_round(Build *b, double *seconds) {
    if (b->st) b->state_free(b->st);
    if (!(b->st = b->state_create(&b->m->d))) return fail(b, "state");
    int32_t *prompt = malloc((size_t)prompt_len * sizeof *prompt);
    if (!prompt) return fail(b, "prompt");
    for (int i = 0; i < prompt_len; i++) prompt[i] = token_at(i, b->n_tokens);
    double t0 = clock_s(CLOCK_MONOTONIC);
    int rc = b->forward(b->m, b->st, prompt, prompt_len, 0, b->logits, false, NULL);
    *seconds = clock_s(CLOCK_MONOTONIC) - t0;
    free(prompt);
    return rc != 0 ? fail(b, "prefill") : 0;
}

static int step(Build *b, int s, double *seconds) {
    int32_t tok = token_at(prompt_len + s, b->n_tokens);
    double t0 = clock_s(CLOCK_MONOTONIC);
    if (b->forward(b->m, b->st, &tok, 1, prompt_len + s, b->logits, false, NULL) != 0) return fail(b, "decode");
    *seconds = clock_s(CLOCK_MONOTONIC) - t0;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) return usage();
    NumericsMode mode = MODE_REF;
    if (argc >= 4) {
        if (strcmp(argv[3], "ref") == 0) mode = MODE_REF;
        else if (strcmp(argv[3], "kvq") == 0) mode = MODE_KVQ;
        else if (strcmp(argv[3], "exact") == 0) mode = MODE_EXACT;
        else return usage();
    }
    int threads = 2;
    if (argc == 5) {
        char *end;
        long t = strtol(argv[4], &end, 10);
        if (*end || t < 1 || t > 256) return usage();
        threads = (int)t;
    }
    const char *plen = getenv("DECODE_AB_PROMPT");
    if (plen && *plen) {
        char *end;
        long p = strtol(plen, &end, 10);
        if (*end || p < 1 || p > 4096) return fprintf(stderr, "decode_ab: DECODE_AB_PROMPT=%s: expected 1 to 4096\n", plen), 2;
        prompt_len = (int)p;
    }
    char dir[1000];
    const char *model = getenv("DECODE_AB_MODEL"), *env = getenv("DEEPINFER_BENCH_DIR"), *cache = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (model && *model) snprintf(dir, sizeof dir, "%s", model);
    else if (env && *env) snprintf(dir, sizeof dir, "%s", env);
    else if (cache && *cache) snprintf(dir, sizeof dir, "%s/deepinfer/bench-medium", cache);
    else snprintf(dir, sizeof dir, "%s/.cache/deepinfer/bench-medium", home ? home : ".");

    Build b[2] = {{0}, {0}};
    if (open_build(&b[0], argv[1]) != 0 || open_build(&b[1], argv[2]) != 0) return 1;
    if (!(model && *model) && b[0].ensure(dir, "medium", 1) != 0) return fail(&b[0], "make-tiny --config medium"), 1;
    for (int i = 0; i < 2; i++)
        if (load_model(&b[i], dir, mode, threads) != 0) return 1;
    if (b[0].m->d.vocab != b[1].m->d.vocab || b[0].n_tokens != b[1].n_tokens)
        return fprintf(stderr, "decode_ab: the builds disagree on the vocabulary\n"), 1;

    /* Each round runs one build's steps back to back, then the other's (which goes first
     * alternates): steps of the two builds interleaved one by one had each build's idle pool
     * threads spinning through the other's step, which favours the build that spins longer. */
    int64_t V = b[0].m->d.vocab;
    float *first = malloc((size_t)(WARMUP + STEPS) * (size_t)V * sizeof *first);
    if (!first) return fprintf(stderr, "decode_ab: out of memory\n"), 1;
    double ratio[ROUNDS], tps[2][ROUNDS], pratio[ROUNDS], ptps[2][ROUNDS];
    long long steps_differing = 0, prompts_differing = 0;
    float *first_prompt = malloc((size_t)V * sizeof *first_prompt);
    if (!first_prompt) return fprintf(stderr, "decode_ab: out of memory\n"), 1;
    for (int r = 0; r < ROUNDS; r++) {
        double total[2] = {0, 0}, prefill[2];
        for (int k = 0; k < 2; k++) {
            int i = r % 2 ? 1 - k : k;
            if (start_round(&b[i], &prefill[i]) != 0) return 1;
            if (k == 0) memcpy(first_prompt, b[i].logits, (size_t)V * sizeof *first_prompt);
            else prompts_differing += memcmp(first_prompt, b[i].logits, (size_t)V * sizeof *first_prompt) != 0;
            for (int s = 0; s < WARMUP + STEPS; s++) {
                double t;
                if (step(&b[i], s, &t) != 0) return 1;
                if (s >= WARMUP) total[i] += t;
                float *keep = first + (int64_t)s * V;
                if (k == 0) memcpy(keep, b[i].logits, (size_t)V * sizeof *keep);
                else steps_differing += memcmp(keep, b[i].logits, (size_t)V * sizeof *keep) != 0;
            }
        }
        pratio[r] = prefill[0] / prefill[1];
        ptps[0][r] = prompt_len / prefill[0];
        ptps[1][r] = prompt_len / prefill[1];
        ratio[r] = total[0] / total[1];
        tps[0][r] = STEPS / total[0];
        tps[1][r] = STEPS / total[1];
    }
    free(first);
    free(first_prompt);
    double q1 = quantile(ratio, ROUNDS, 0.25), med = quantile(ratio, ROUNDS, 0.5), q3 = quantile(ratio, ROUNDS, 0.75);
    printf("decode batch 1, %s numerics, %d thread%s, %s (%d rounds x %d steps after a %d-token prompt):\n",
           mode == MODE_REF ? "ref" : mode == MODE_KVQ ? "kvq" : "exact", threads, threads == 1 ? "" : "s", dir, ROUNDS,
           STEPS, prompt_len);
    printf("  A %.1f tokens/s  B %.1f tokens/s (medians)  B/A %.3f [quartiles %.3f %.3f]  %s\n",
           quantile(tps[0], ROUNDS, 0.5), quantile(tps[1], ROUNDS, 0.5), med, q1, q3,
           steps_differing ? "DIFFERENT LOGITS" : "same logits (bits) at every step");
    printf("  prefill of the %d-token prompt: A %.1f tokens/s  B %.1f tokens/s (medians)  B/A %.3f [quartiles %.3f %.3f]  %s\n",
           prompt_len, quantile(ptps[0], ROUNDS, 0.5), quantile(ptps[1], ROUNDS, 0.5), quantile(pratio, ROUNDS, 0.5),
           quantile(pratio, ROUNDS, 0.25), quantile(pratio, ROUNDS, 0.75),
           prompts_differing ? "DIFFERENT LOGITS" : "same last-row logits (bits)");
    for (int i = 0; i < 2; i++) {
        b[i].state_free(b[i].st);
        b[i].m->pool = NULL;
        b[i].pool_destroy(b[i].pool);
        b[i].free_model(b[i].m);
        free(b[i].logits);
    }
    return 0;
}
