/* test_kv_engine.c — the KV block cache inside the engine (engine/kv_blocks.h) over the mock
 * runner, whose restore + bounded replay is exact by construction (runner_mock.h), so every
 * request must generate exactly what the independent reference generates from scratch; pages are
 * poisoned when freed, so a restore that skipped a block or a replay that missed a ring entry
 * shows.  Covered: two prompts sharing a long system prompt share its whole blocks (hit tokens
 * counted per tier), the same prompt again hits every whole block before its last token, tenant
 * salts never share, a new engine on the same directory hits the disk tier, a second engine
 * running at the same time sees the first one's blocks, corrupt records and foreign files are
 * skipped and counted, preemption under memory pressure, and the options' errors. */

#include "test.h"
#include "test_engine_helpers.h"

#include "base/error.h"
#include "base/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define SYS 600 /* a system prompt of two whole 256-token blocks and a part of a third */

static int32_t sys_prompt[SYS + 128];

static void fill_prompts(void) {
    for (int i = 0; i < SYS + 128; i++) sys_prompt[i] = (int32_t)((i * 37 + 11) % 256);
}

/* The system prompt followed by a question of n_q tokens picked by q. */
static int question(int q, int n_q, int32_t *out) {
    memcpy(out, sys_prompt, sizeof(int32_t) * SYS);
    for (int i = 0; i < n_q; i++) out[SYS + i] = (int32_t)((q * 101 + i * 13) % 256);
    return SYS + n_q;
}

/* Two questions after the system prompt. */
typedef struct {
    int32_t a[SYS + 128], b[SYS + 128];
    int na, nb;
} Pair;

static void two_questions(Pair *p) {
    fill_prompts();
    p->na = question(1, 40, p->a);
    p->nb = question(2, 40, p->b);
}

static DiEngine *kv_engine_budget(int async, const char *dir, size_t memory, int budget) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = async;
    o.max_batch_tokens = budget;
    o.max_num_seqs = 8;
    o.state_memory_bytes = memory;
    o.kv_cache_ram_bytes = (size_t)64 << 20;
    o.kv_cache_dir = dir;
    DiEngine *e = poisoned_mock_engine(&o);
    CHECK_MSG(e != NULL, "%s", di_last_error());
    return e;
}

static DiEngine *kv_engine(int async, const char *dir, size_t memory) {
    return kv_engine_budget(async, dir, memory, 512);
}

/* Run one request alone; its tokens must equal the reference's; returns its cached tokens. */
static int run_checked(DiEngine *e, const int32_t *prompt, int n, const char *salt, uint64_t seed) {
    DiSamplingParams p = seeded(6, seed);
    uint64_t id;
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = n, .cache_salt = salt};
    CHECK_MSG(di_engine_add_request(e, &in, &p, NULL, NULL, &id) == 0, "%s", di_last_error());
    CHECK_MSG(di_engine_run(e) == 0, "%s", di_last_error());
    DiRequestOutput res;
    CHECK_EQ_INT(di_engine_get_output(e, id, &res), 0);
    int32_t ref[16];
    DiFinishReason why;
    int n_ref = reference_generate(prompt, n, &p, seed, ref, &why);
    CHECK_MSG(res.n_tokens == n_ref && memcmp(res.token_ids, ref, sizeof(int32_t) * (size_t)n_ref) == 0,
              "tokens differ from the reference (%d cached)", res.n_cached_tokens);
    int cached = res.n_cached_tokens;
    CHECK_EQ_INT(di_engine_release(e, id), 0);
    return cached;
}

static DiEngineMetrics metrics(DiEngine *e) {
    DiEngineMetrics m;
    CHECK_EQ_INT(di_engine_get_metrics(e, &m), 0);
    return m;
}

static char *make_dir(void) {
    static char tmpl[64];
    snprintf(tmpl, sizeof tmpl, "/tmp/test_kv_engine.XXXXXX");
    return strdup(mkdtemp(tmpl));
}

static void remove_dir(char *dir) {
    DIR *d = opendir(dir);
    char path[512];
    for (struct dirent *x; d && (x = readdir(d));) {
        if (!strcmp(x->d_name, ".") || !strcmp(x->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, x->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    free(dir);
}

TEST(two_questions_after_one_system_prompt_share_its_whole_blocks) {
    static Pair q;
    two_questions(&q);
    for (int async = 0; async <= 1; async++) {
        DiEngine *e = kv_engine(async, NULL, 1 << 20);
        if (!e) continue;
        CHECK_EQ_INT(run_checked(e, q.a, q.na, NULL, 7), 0);
        CHECK_EQ_INT(run_checked(e, q.b, q.nb, NULL, 8), 512); /* blocks 0 and 1; block 2 holds the question */
        /* the same prompt again: every whole block before its last token */
        CHECK_EQ_INT(run_checked(e, q.b, q.nb, NULL, 9), 512);
        int32_t c[SYS + 128];
        int nc = question(3, 60, c); /* 660 tokens: still two whole blocks */
        CHECK_EQ_INT(run_checked(e, c, 257, NULL, 10), 256); /* a prompt of 257: one block, one to compute */
        CHECK_EQ_INT(run_checked(e, c, 256, NULL, 11), 0);   /* 256: the last token must be computed */
        DiEngineMetrics m = metrics(e);
        CHECK_EQ_INT(m.kv_cache_enabled, 1);
        CHECK_EQ_INT(m.kv_hit_tokens_ram, 512 + 512 + 256);
        CHECK_EQ_INT(m.kv_hit_tokens_disk, 0);
        /* a's blocks 0 and 1 (646 positions, 645 computed); b computes no new whole block; the
         * 256-token prompt recomputes block 0 (no lookup below one block + one) and stores it again */
        CHECK_EQ_INT(m.kv_blocks_stored, 3);
        CHECK_EQ_INT(m.prefix_cache_enabled, 0);
        CHECK(nc == 660);
        di_engine_destroy(e);
    }
}

TEST(a_replay_split_over_several_chunks_still_matches) {
    static Pair q;
    two_questions(&q);
    for (int async = 0; async <= 1; async++) {
        /* a budget of 3 tokens: the 8 replayed positions and the one after the hit span three
         * steps; a 513-token prompt samples right after the hit, where the window reaches back
         * to the replay's first positions */
        DiEngine *e = kv_engine_budget(async, NULL, 1 << 20, 3);
        if (!e) continue;
        CHECK_EQ_INT(run_checked(e, q.a, q.na, NULL, 1), 0);
        CHECK_EQ_INT(run_checked(e, q.b, 513, NULL, 2), 512);
        di_engine_destroy(e);
    }
}

TEST(different_tenant_salts_never_share_blocks) {
    static Pair q;
    two_questions(&q);
    DiEngine *e = kv_engine(1, NULL, 1 << 20);
    if (!e) return;
    CHECK_EQ_INT(run_checked(e, q.a, q.na, "tenant-1", 1), 0);
    CHECK_EQ_INT(run_checked(e, q.b, q.nb, "tenant-2", 2), 0);
    CHECK_EQ_INT(run_checked(e, q.b, q.nb, NULL, 3), 0);
    CHECK_EQ_INT(run_checked(e, q.b, q.nb, "tenant-1", 4), 512);
    di_engine_destroy(e);
}

/* A fresh directory where an engine (async or not) ran q->a and closed (sealing its segment). */
static char *dir_after_a(Pair *q, int async) {
    two_questions(q);
    char *dir = make_dir();
    DiEngine *e = kv_engine(async, dir, 1 << 20);
    if (e) CHECK_EQ_INT(run_checked(e, q->a, q->na, NULL, 1), 0);
    di_engine_destroy(e);
    return dir;
}

/* A new engine on dir runs q->b, which must find `cached` tokens; its metrics after it. */
static DiEngine *b_on_new_engine(const char *dir, const Pair *q, int cached, DiEngineMetrics *m) {
    DiEngine *e = kv_engine(0, dir, 1 << 20);
    memset(m, 0, sizeof *m);
    if (!e) return NULL;
    CHECK_EQ_INT(run_checked(e, q->b, q->nb, NULL, 2), cached);
    *m = metrics(e);
    return e;
}

TEST(a_new_engine_on_the_same_directory_hits_the_disk_tier) {
    static Pair q;
    char *dir = dir_after_a(&q, 1);
    DiEngineMetrics m;
    DiEngine *e = b_on_new_engine(dir, &q, 512, &m);
    if (e) {
        /* the new engine's RAM started empty: the blocks came from disk, read at lookup or
         * already promoted by the prefetch queued when the request arrived */
        CHECK_EQ_INT(m.kv_hit_tokens_disk + m.kv_hit_tokens_ram, 512);
        CHECK(m.kv_bytes_read >= 2 * 256 * 8);
    }
    di_engine_destroy(e);
    remove_dir(dir);
}

TEST(a_second_engine_on_the_directory_sees_the_blocks_the_first_writes) {
    static Pair q;
    two_questions(&q);
    char *dir = make_dir();
    DiEngine *first = kv_engine(1, dir, 1 << 20), *second = kv_engine(1, dir, 1 << 20);
    if (first && second) {
        CHECK_EQ_INT(run_checked(first, q.a, q.na, NULL, 1), 0);
        /* the second engine rescans the directory every 2 s; the first one's open segment is
         * readable once its records are written */
        struct timespec nap = {2, 600000000};
        nanosleep(&nap, NULL);
        CHECK_EQ_INT(run_checked(second, q.b, q.nb, NULL, 2), 512);
        CHECK(metrics(second).kv_bytes_read >= 2 * 256 * 8); /* from the directory, not its own RAM */
    }
    di_engine_destroy(first);
    di_engine_destroy(second);
    remove_dir(dir);
}

/* Flip one byte at `offset` of every sealed segment in dir. */
static int corrupt_segments(const char *dir, long offset) {
    DIR *d = opendir(dir);
    int n = 0;
    char path[512];
    for (struct dirent *x; d && (x = readdir(d));) {
        size_t l = strlen(x->d_name);
        if (l < 4 || strcmp(x->d_name + l - 4, ".kvs") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, x->d_name);
        FILE *f = fopen(path, "r+b");
        if (!f) continue;
        fseek(f, offset, SEEK_SET);
        int c = fgetc(f);
        fseek(f, offset, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
        n++;
    }
    if (d) closedir(d);
    return n;
}

TEST(corrupt_records_and_foreign_files_are_skipped_and_counted) {
    static Pair q;
    char *dir = dir_after_a(&q, 0);
    /* the first record's payload (after the 4 KiB file header and its 4 KiB record header) is
     * block 0: with it corrupt, no prefix of b is cached */
    CHECK_EQ_INT(corrupt_segments(dir, 2 * 4096 + 100), 1);
    char path[512];
    snprintf(path, sizeof path, "%s/kv-0000000001-00000000000000ab-000001.kvs", dir);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("a foreign file with a segment's name", f);
        fclose(f);
    }
    di_log_set_level(DI_LOG_ERROR);
    DiEngineMetrics m;
    DiEngine *e = b_on_new_engine(dir, &q, 0, &m);
    if (e) {
        CHECK_EQ_INT(m.kv_records_corrupt, 1);
        CHECK_EQ_INT(m.kv_files_skipped, 1);
        /* b's own blocks were stored afresh: the same prompt again hits them from RAM */
        CHECK_EQ_INT(run_checked(e, q.b, q.nb, NULL, 3), 512);
    }
    di_engine_destroy(e);
    di_log_set_level(DI_LOG_INFO);
    remove_dir(dir);
}

TEST(requests_sharing_blocks_under_memory_pressure_preempt_and_still_match) {
    fill_prompts();
    /* 740 positions need 25 mock pages of 256 bytes: a 40-page pool holds one whole and a restored one */
    DiEngine *e = kv_engine(1, NULL, 40 * 256);
    if (!e) return;
    int32_t p[6][SYS + 128];
    int n[6];
    uint64_t id[6];
    DiSamplingParams sp[6];
    for (int i = 0; i < 6; i++) {
        n[i] = question(i, 100, p[i]);
        sp[i] = seeded(40, 50 + (uint64_t)i);
        DiRequestInput in = {.prompt_ids = p[i], .n_prompt_ids = n[i]};
        CHECK_EQ_INT(di_engine_add_request(e, &in, &sp[i], NULL, NULL, &id[i]), 0);
    }
    CHECK_MSG(di_engine_run(e) == 0, "%s", di_last_error());
    int hits = 0;
    for (int i = 0; i < 6; i++) {
        DiRequestOutput res;
        CHECK_EQ_INT(di_engine_get_output(e, id[i], &res), 0);
        int32_t ref[64];
        DiFinishReason why;
        int n_ref = reference_generate(p[i], n[i], &sp[i], sp[i].seed, ref, &why);
        CHECK_MSG(res.n_tokens == n_ref && memcmp(res.token_ids, ref, sizeof(int32_t) * (size_t)n_ref) == 0,
                  "request %d differs from the reference (%d cached, %d preemptions)", i, res.n_cached_tokens,
                  res.n_preemptions);
        hits += res.n_cached_tokens > 0;
    }
    DiEngineMetrics m = metrics(e);
    CHECK_MSG(m.preemptions > 0, "no preemption: the test does not test it");
    CHECK(hits > 0);
    CHECK_EQ_INT(m.pages_used, 0);
    di_engine_destroy(e);
}

static void refused(DiEngineOptions o, const char *needle) {
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
    CHECK(e == NULL);
    CHECK_MSG(strstr(di_last_error(), needle) != NULL, "error '%s' does not name %s", di_last_error(), needle);
    di_engine_destroy(e);
}

TEST(bad_kv_cache_options_are_errors_that_name_them) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.kv_cache_ram_bytes = 1 << 20;
    o.kv_block_tokens = 200;
    refused(o, "kv_block_tokens");
    di_engine_options_init(&o);
    o.kv_cache_ttl_s = 60;
    refused(o, "kv_cache_dir");
    o.kv_cache_dir = "/nonexistent/kv-ttl-refused"; /* refused before the directory is made */
    refused(o, "kv_cache_ttl_s 60 is finer than the disk tier's retention granularity of 3600 s");
    di_engine_options_init(&o);
    o.kv_block_tokens = 256;
    refused(o, "kv_block_tokens");
    /* the replay mode: only exact or approx, and only with a block cache to replay for */
    di_engine_options_init(&o);
    o.kv_cache_ram_bytes = 1 << 20;
    o.kv_cache_replay = 2;
    refused(o, "kv_cache_replay");
    di_engine_options_init(&o);
    o.kv_cache_replay = DI_KV_REPLAY_APPROX;
    refused(o, "kv_cache_replay");
    /* a salt with no block cache to honour it */
    di_engine_options_init(&o);
    DiEngine *e = di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o);
    int32_t ids[3] = {1, 2, 3};
    DiRequestInput in = {.prompt_ids = ids, .n_prompt_ids = 3, .cache_salt = "t"};
    CHECK(di_engine_add_request(e, &in, NULL, NULL, NULL, NULL) != 0);
    CHECK(strstr(di_last_error(), "cache_salt") != NULL);
    di_engine_destroy(e);
}

int main(void) {
    RUN_TEST(two_questions_after_one_system_prompt_share_its_whole_blocks);
    RUN_TEST(a_replay_split_over_several_chunks_still_matches);
    RUN_TEST(different_tenant_salts_never_share_blocks);
    RUN_TEST(a_new_engine_on_the_same_directory_hits_the_disk_tier);
    RUN_TEST(a_second_engine_on_the_directory_sees_the_blocks_the_first_writes);
    RUN_TEST(corrupt_records_and_foreign_files_are_skipped_and_counted);
    RUN_TEST(requests_sharing_blocks_under_memory_pressure_preempt_and_still_match);
    RUN_TEST(bad_kv_cache_options_are_errors_that_name_them);
    return TEST_SUMMARY();
}
