/* Specification of src/base: errors, checked allocation, JSON field errors, files, thread pool. */
#include "test.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "base/threadpool.h"

#include <stdint.h>
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

int main(void) {
    RUN_TEST(error_wrap_prefixes_context);
    RUN_TEST(calloc_rejects_overflow);
    RUN_TEST(json_errors_name_the_field);
    RUN_TEST(atomic_write_then_map_roundtrip);
    RUN_TEST(pool_runs_every_task_once);
    return TEST_SUMMARY();
}
