/* bench_ttft.c — a short request's time to first token behind a long prefill (issue 19 item 5).
 *
 * On the built-in tiny model (the one `deepinfer` runs with no checkpoint), with the engine's
 * default step budget (max_batch_tokens 512, async scheduling):
 *   alone:   a 5-token prompt in an idle engine, from its arrival to its first token;
 *   behind:  the same prompt arriving while a 16384-token prompt is prefilling (4 steps into it).
 * Each is the median of 3 rounds; the figure is behind / alone.  Before the prefill budget was
 * shared, the short prompt waited for the whole long prefill (the ratio was the long prompt's
 * prefill time over a short step); now it shares the next step with the long prompt's chunk.
 * Also printed: the long prompt's prefill rate over its first 4 steps (alone in the engine).
 * BENCH_TTFT_LONG=N changes the long prompt's length, BENCH_TTFT_CHUNK=N sets max_prefill_chunk (a
 * smaller chunk makes the step the short prompt shares shorter, and the long prefill slower).
 *
 * BENCH_TTFT_MODE=kv measures the KV block cache instead (issue 22 item 4), on the medium synthetic
 * checkpoint (bench_medium.h), default engine options plus a --kv-cache-dir in a temporary
 * directory: a request of KV_PREFIX + KV_SUFFIX tokens cold (its blocks are stored), one sharing
 * its first KV_PREFIX tokens in the same engine (a RAM hit), and one more in a new engine on the
 * same directory (a disk hit; the segment files are in the OS page cache).  Each round uses its
 * own prefix; medians of 3 rounds.  The hits replay exactly (the default, kv_cache_replay exact), and
 * the disk hit once more in an engine with kv_cache_replay approx (the official W-row replay).
 * BENCH_TTFT_KV_PREFIX=N sets the cached prefix (default 4096; issue 35 asks for 16384 and 65536),
 * BENCH_TTFT_ROUNDS=N the rounds (default 3; the median, or the middle of an odd count).  Also
 * printed: the bytes the cache stored per cached token (its files on disk after the cold run). */
#include "bench_stats.h"
#include "bench_medium.h"
#include "deepinfer.h"
#include "engine/step.h"
#include "model/tiny.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHORT_LEN 5
#define ROUNDS 3

static void fail(const char *what) {
    fprintf(stderr, "bench_ttft: %s: %s\n", what, di_last_error());
    exit(1);
}

static uint64_t add(DiEngine *e, const int32_t *ids, int n, int max_tokens) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.ignore_eos = 1;
    p.max_tokens = max_tokens;
    DiRequestInput in = {.prompt_ids = ids, .n_prompt_ids = n};
    uint64_t id = 0;
    if (di_engine_add_request(e, &in, &p, NULL, NULL, &id) != 0) fail("adding a request");
    return id;
}

/* Step until request `id` has its first token; its time to first token. */
static double first_token(DiEngine *e, uint64_t id) {
    DiRequestOutput out;
    int active = 1;
    do {
        if (di_engine_step(e, &active) != 0) fail("step");
        if (di_engine_get_output(e, id, &out) != 0) fail("output");
    } while (out.n_tokens == 0 && active > 0);
    return out.time_to_first_token_s;
}

/* One round: the short prompt's TTFT, alone (long_len 0) or 4 steps into the long prefill.
 * *long_rate: the long prompt's prefill tokens/s over those 4 steps (long_len > 0). */
static double round_ttft(const char *dir, const int32_t *long_ids, int long_len, int chunk, double *long_rate) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_prefill_chunk = chunk;
    DiEngine *e = di_engine_create(dir, &o);
    if (!e) fail("creating the engine");
    int32_t short_ids[SHORT_LEN] = {40, 41, 42, 43, 44};
    uint64_t long_id = 0;
    if (long_len > 0) {
        long_id = add(e, long_ids, long_len, 1);
        DiEngineMetrics m0, m1;
        di_engine_get_metrics(e, &m0);
        double t0 = di_now_seconds();
        for (int i = 0; i < 4; i++)
            if (di_engine_step(e, NULL) != 0) fail("step");
        di_engine_get_metrics(e, &m1);
        *long_rate = (double)(m1.prefill_tokens - m0.prefill_tokens) / (di_now_seconds() - t0);
    }
    double ttft = first_token(e, add(e, short_ids, SHORT_LEN, 1));
    if (long_id && di_engine_abort(e, long_id) != 0) fail("abort");
    if (di_engine_run(e) != 0) fail("run");
    di_engine_destroy(e);
    return ttft;
}

/* An integer >= lo from the environment, else the default; exits with status 2 when malformed. */
static int env_int(const char *name, int fallback, int lo) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < lo || n > 1 << 24) {
        fprintf(stderr, "bench_ttft: %s must be an integer in [%d, %d], got '%s'\n", name, lo, 1 << 24, v);
        exit(2);
    }
    return (int)n;
}

/* ---- KV block cache mode */

#define KV_SUFFIX 32
#define KV_MAX_ROUNDS 15

static int kv_prefix_len; /* BENCH_TTFT_KV_PREFIX */

/* TTFT of prefix + a suffix drawn from salt, run to completion; *cached: its restored tokens. */
static double kv_request(DiEngine *e, const int32_t *prefix, int salt, int *cached) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(kv_prefix_len + KV_SUFFIX));
    if (!ids) fail("memory for the prompt");
    memcpy(ids, prefix, sizeof(int32_t) * (size_t)kv_prefix_len);
    for (int i = 0; i < KV_SUFFIX; i++) ids[kv_prefix_len + i] = 3 + (salt * 131 + i * 7) % 200;
    uint64_t id = add(e, ids, kv_prefix_len + KV_SUFFIX, 1);
    free(ids);
    double t = first_token(e, id);
    DiRequestOutput out;
    if (di_engine_get_output(e, id, &out) != 0 || di_engine_run(e) != 0) fail("finishing a request");
    *cached = out.n_cached_tokens;
    return t;
}

static DiEngine *kv_engine(const char *model, const char *kv_dir, int replay) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.kv_cache_dir = kv_dir;
    o.kv_cache_replay = replay;
    DiEngine *e = di_engine_create(model, &o);
    if (!e) fail("creating the engine with a KV block cache");
    return e;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static long long dir_bytes;

static int add_size(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)path, (void)ftw;
    if (flag == FTW_F) dir_bytes += (long long)sb->st_size;
    return 0;
}

static int kv_main(void) {
    char model[1000], kv_dir[] = "/tmp/bench_ttft_kv.XXXXXX";
    kv_prefix_len = env_int("BENCH_TTFT_KV_PREFIX", 4096, 256);
    int rounds = env_int("BENCH_TTFT_ROUNDS", ROUNDS, 1);
    if (rounds > KV_MAX_ROUNDS) rounds = KV_MAX_ROUNDS;
    bench_medium_dir(model, sizeof model);
    if (di_tiny_ensure_preset(model, "medium", 1) != 0) fail("make-tiny --config medium");
    if (!mkdtemp(kv_dir)) fail("a temporary directory");
    int32_t *prefix = malloc(sizeof(int32_t) * (size_t)kv_prefix_len);
    if (!prefix) fail("memory for the prefix");
    double cold[KV_MAX_ROUNDS], ram[KV_MAX_ROUNDS], disk[KV_MAX_ROUNDS], approx[KV_MAX_ROUNDS];
    int hit_ram = 0, hit_disk = 0, hit_cold = 0, hit_approx = 0;
    double stored_per_token = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < kv_prefix_len; i++)
            prefix[i] = 3 + (int32_t)(((uint32_t)(i + r * kv_prefix_len) * 2654435761u) >> 8) % 250;
        DiEngine *e = kv_engine(model, kv_dir, DI_KV_REPLAY_EXACT);
        cold[r] = kv_request(e, prefix, 1, &hit_cold);
        if (r == 0) { /* what the cold run stored: its blocks (the suffix's partial block is not kept) */
            di_engine_destroy(e);
            dir_bytes = 0;
            nftw(kv_dir, add_size, 8, FTW_PHYS);
            stored_per_token = (double)dir_bytes / (double)(kv_prefix_len + KV_SUFFIX);
            e = kv_engine(model, kv_dir, DI_KV_REPLAY_EXACT);
        }
        ram[r] = kv_request(e, prefix, 2, &hit_ram);
        di_engine_destroy(e);
        e = kv_engine(model, kv_dir, DI_KV_REPLAY_EXACT);
        disk[r] = kv_request(e, prefix, 3, &hit_disk);
        di_engine_destroy(e);
        e = kv_engine(model, kv_dir, DI_KV_REPLAY_APPROX); /* the same disk hit, the official replay */
        approx[r] = kv_request(e, prefix, 4, &hit_approx);
        di_engine_destroy(e);
    }
    nftw(kv_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(prefix);
    double c = bench_median(cold, rounds), m = bench_median(ram, rounds), d = bench_median(disk, rounds), a = bench_median(approx, rounds);
    printf("time to first token of a %d-token prompt whose first %d tokens are cached, medium synthetic checkpoint, "
           "default engine options, KV block cache in a temporary directory (median of %d):\n",
           kv_prefix_len + KV_SUFFIX, kv_prefix_len, rounds);
    printf("  stored by the cold run: %.1f bytes per prompt token (its files on disk)\n", stored_per_token);
    printf("  cold (nothing cached):          %8.1f ms   (cached tokens %d)\n", 1e3 * c, hit_cold);
    printf("  RAM hit:                        %8.1f ms   (cached tokens %d)   %.3fx cold (target <= 0.15x)\n", 1e3 * m,
           hit_ram, m / c);
    printf("  disk hit after an engine restart: %6.1f ms   (cached tokens %d)   %.3fx cold (target <= 0.25x)\n", 1e3 * d,
           hit_disk, d / c);
    printf("  the same disk hit, kv_cache_replay approx: %6.1f ms   (cached tokens %d)   %.3fx cold, %.3fx the exact hit\n",
           1e3 * a, hit_approx, a / c, a / d);
    return 0;
}

int main(void) {
    const char *mode = getenv("BENCH_TTFT_MODE");
    if (mode && strcmp(mode, "kv") == 0) return kv_main();
    if (mode && *mode) {
        fprintf(stderr, "bench_ttft: BENCH_TTFT_MODE must be kv or unset, got '%s'\n", mode);
        return 2;
    }
    char dir[4096];
    if (di_builtin_model_dir(dir, sizeof dir) != 0 || di_tiny_ensure(dir) != 0) fail("the built-in tiny model");
    int long_len = env_int("BENCH_TTFT_LONG", 16384, 16), chunk = env_int("BENCH_TTFT_CHUNK", 0, 0);
    int32_t *long_ids = malloc(sizeof *long_ids * (size_t)long_len);
    if (!long_ids) fail("memory");
    for (int i = 0; i < long_len; i++) long_ids[i] = 3 + (i * 37) % 250;
    double alone[ROUNDS], behind[ROUNDS], rate[ROUNDS], unused;
    for (int r = 0; r < ROUNDS; r++) { /* interleaved, so drifts of the machine hit both alike */
        alone[r] = round_ttft(dir, NULL, 0, chunk, &unused);
        behind[r] = round_ttft(dir, long_ids, long_len, chunk, &rate[r]);
    }
    double a = bench_median(alone, ROUNDS), b = bench_median(behind, ROUNDS), lr = bench_median(rate, ROUNDS);
    printf("short request (%d tokens) time to first token, built-in tiny model, max_batch_tokens 512, "
           "max_prefill_chunk %d, async:\n", SHORT_LEN, chunk);
    printf("  alone:                          %8.1f ms\n", 1e3 * a);
    printf("  behind a %5d-token prefill:    %8.1f ms   ratio %.2f\n", long_len, 1e3 * b, b / a);
    printf("  long prompt's prefill rate before the short one arrived: %.0f tokens/s\n", lr);
    free(long_ids);
    return 0;
}
