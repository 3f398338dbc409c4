/* Specification of src/base: errors, checked allocation, JSON field errors, files, thread pool. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "base/threadpool.h"

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

TEST(error_wrap_prefixes_context) {
    di_errorf("bad dtype %s", "F16");
    di_error_wrap("tensor %s", "embed.weight");
    CHECK_STR(di_error_message(), "tensor embed.weight: bad dtype F16");
    di_error_clear();
    CHECK_STR(di_error_message(), "");
}

TEST(calloc_rejects_overflow) {
    void *p = di_calloc(SIZE_MAX / 2, 4, "huge table");
    CHECK(p == NULL);
    CHECK(strstr(di_error_message(), "huge table") != NULL);
    size_t out;
    CHECK(!di_mul_size(SIZE_MAX, 2, &out));
    CHECK(di_mul_size(1000, 1000, &out) && out == 1000000);
}

/* di_grow: doubles until the need fits, keeps what was there, leaves everything alone on overflow
 * or when the array is already big enough. */
TEST(grow_doubles_keeps_contents_and_refuses_overflow) {
    int *a = NULL;
    size_t cap = 0;
    CHECK(di_grow(&a, &cap, 1, 4, sizeof *a, "test ints") == 0);
    CHECK(a != NULL && cap == 4);
    for (int i = 0; i < 4; i++) a[i] = 100 + i;
    CHECK(di_grow(&a, &cap, 9, 4, sizeof *a, "test ints") == 0);
    CHECK(cap == 16); /* 4 -> 8 -> 16: the first power-of-two multiple that holds 9 */
    for (int i = 0; i < 4; i++) CHECK(a[i] == 100 + i);
    int *before = a;
    CHECK(di_grow(&a, &cap, 16, 4, sizeof *a, "test ints") == 0); /* need <= cap: no-op */
    CHECK(a == before && cap == 16);
    di_error_clear();
    CHECK(di_grow(&a, &cap, SIZE_MAX / 2, 4, sizeof *a, "test ints") == -1);
    CHECK(strstr(di_error_message(), "test ints") != NULL);
    CHECK(strstr(di_error_message(), "overflows") != NULL);
    CHECK(a == before && cap == 16);
    for (int i = 0; i < 4; i++) CHECK(a[i] == 100 + i);
    CHECK(di_grow(NULL, &cap, 32, 4, sizeof *a, "test ints") == -1);
    CHECK(cap == 16);
    free(a);
}

TEST(json_errors_name_the_field) {
    const char *src = "{\"a\": {\"n\": \"x\", \"k\": 3}}";
    json_t *root = di_json_load_buffer(src, strlen(src), "cfg");
    CHECK(root != NULL);
    json_t *a = NULL;
    CHECK_EQ_INT(di_json_object(root, "", "a", true, &a), 0);
    int64_t v = 0;
    CHECK_EQ_INT(di_json_int(a, "a", "n", true, &v), -1);
    CHECK_STR(di_error_message(), "a.n: expected an integer, got a string");
    CHECK_EQ_INT(di_json_int(a, "a", "k", true, &v), 0);
    CHECK_EQ_INT(v, 3);
    CHECK_EQ_INT(di_json_int(a, "a", "missing", false, &v), 1);
    CHECK_EQ_INT(di_json_int(a, "a", "missing", true, &v), -1);
    CHECK_STR(di_error_message(), "a.missing: required field is missing");
    json_decref(root);
    CHECK(di_json_load_buffer("{\"a\": }", 7, "req") == NULL);
    CHECK(strncmp(di_error_message(), "req:1:", 6) == 0);
}

TEST(atomic_write_then_map_roundtrip) {
    char dir[] = "/tmp/di_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *sub = di_path_join(dir, "a/b");
    CHECK_EQ_INT(di_make_dirs(sub), 0);
    char *path = di_path_join(sub, "f.bin");
    CHECK_EQ_INT(di_write_file_atomic(path, "hello", 5), 0);
    DiMappedFile mf;
    CHECK_EQ_INT(di_map_file(path, &mf), 0);
    CHECK_EQ_INT(mf.size, 5);
    CHECK(memcmp(mf.data, "hello", 5) == 0);
    di_unmap_file(&mf);
    CHECK_EQ_INT(di_map_file("/nonexistent/x", &mf), -1);
    CHECK(strstr(di_error_message(), "/nonexistent/x") != NULL);
    unlink(path);
    rmdir(sub);
    char *a = di_path_join(dir, "a");
    rmdir(a);
    rmdir(dir);
    free(a);
    free(path);
    free(sub);
}

typedef struct {
    int64_t out[1000];
} SquareJob;

static void square_task(void *ctx, int task, int thread) {
    (void)thread;
    ((SquareJob *)ctx)->out[task] = (int64_t)task * task;
}

TEST(pool_runs_every_task_once) {
    DiThreadPool *pool = di_pool_create(3);
    CHECK(pool != NULL);
    static SquareJob job;
    for (int round = 0; round < 50; round++) {
        memset(&job, 0xff, sizeof job);
        di_pool_run(pool, 1000, square_task, &job);
        int ok = 1;
        for (int i = 0; i < 1000; i++) ok &= job.out[i] == (int64_t)i * i;
        CHECK(ok);
    }
    di_pool_destroy(pool);
}

typedef struct {
    _Atomic int64_t sum;
    _Atomic int calls;
} CountJob;

static void count_task(void *ctx, int task, int thread) {
    (void)thread;
    CountJob *j = ctx;
    atomic_fetch_add(&j->sum, task + 1);
    atomic_fetch_add(&j->calls, 1);
}

/* Many short jobs back to back, now and then after the pool has idled: every task runs exactly
 * once, with more threads than tasks too, and a pool that never ran a job shuts down. */
TEST(pool_runs_short_jobs_back_to_back) {
    for (int threads = 2; threads <= 4; threads++) {
        DiThreadPool *pool = di_pool_create(threads);
        CHECK(pool != NULL);
        int bad = 0;
        for (int round = 0; round < 20000; round++) {
            CountJob job = {0, 0};
            int n = 2 + round % 7;
            di_pool_run(pool, n, count_task, &job);
            bad += job.calls != n || job.sum != (int64_t)n * (n + 1) / 2;
            if (round % 5000 == 4999) {
                struct timespec idle = {0, 5 * 1000 * 1000};
                nanosleep(&idle, NULL);
            }
        }
        CHECK_EQ_INT(bad, 0);
        di_pool_destroy(pool);
    }
    DiThreadPool *sleeping = di_pool_create(2);
    CHECK(sleeping != NULL);
    struct timespec idle = {0, 5 * 1000 * 1000};
    nanosleep(&idle, NULL);
    di_pool_destroy(sleeping);
}

typedef struct {
    int round;
    int out[16];
} PlainJob;

static void plain_task(void *ctx, int task, int thread) {
    (void)thread;
    PlainJob *j = ctx;
    j->out[task] = j->round * 16 + task; /* plain stores: di_pool_run must publish them */
}

/* What the tasks wrote without atomics is what the caller reads when di_pool_run returns, job
 * after job, whether the workers were spinning or asleep when it was posted; a pool destroyed
 * right after a job (its workers still spinning) shuts down. */
TEST(pool_publishes_plain_writes_of_each_job) {
    DiThreadPool *pool = di_pool_create(2);
    CHECK(pool != NULL);
    int bad = 0;
    PlainJob job;
    for (int round = 0; round < 20000; round++) {
        job.round = round;
        di_pool_run(pool, 16, plain_task, &job);
        for (int t = 0; t < 16; t++) bad += job.out[t] != round * 16 + t;
        if (round % 4000 == 3999) {
            struct timespec idle = {0, 2 * 1000 * 1000}; /* past the spin: the workers sleep */
            nanosleep(&idle, NULL);
        }
    }
    CHECK_EQ_INT(bad, 0);
    di_pool_destroy(pool);
}

int main(void) {
    RUN_TEST(error_wrap_prefixes_context);
    RUN_TEST(calloc_rejects_overflow);
    RUN_TEST(grow_doubles_keeps_contents_and_refuses_overflow);
    RUN_TEST(json_errors_name_the_field);
    RUN_TEST(atomic_write_then_map_roundtrip);
    RUN_TEST(pool_runs_every_task_once);
    RUN_TEST(pool_runs_short_jobs_back_to_back);
    RUN_TEST(pool_publishes_plain_writes_of_each_job);
    return TEST_SUMMARY();
}
