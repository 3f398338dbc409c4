/* test_kv_segment.c — the KV cache's disk tier (serving.md §4.4): records round-trip through
 * sealed and unsealed segments; files truncated at random offsets or with flipped bits never
 * serve a wrong byte and count what they lose; foreign files are skipped and counted once; the
 * TTL drops whole hourly segments; the size cap evicts oldest first; a writer killed with
 * SIGKILL mid-write leaves a directory that reopens with its complete records; two processes
 * share one directory; a full disk degrades the cache to RAM. */
#include "test.h"

#include "base/error.h"
#include "base/log.h"
#include "deepinfer.h"
#include "engine/kvcache/kv_cache.h"
#include "engine/kvcache/kv_writer.h"
#include "engine/kvcache/segment_store.h"

#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ALIGN 4096

static DiKvKey K(uint64_t i) { return (DiKvKey){i * 0x9E3779B97F4A7C15ull + 1, i}; }

/* Payload of record i: its length varies (0, small, over a page) and every byte depends on i. */
static size_t plen(int i) { return (size_t)((i * 1237) % 9000); }
static void payload(int i, uint8_t *out, size_t n) {
    for (size_t j = 0; j < n; j++) out[j] = (uint8_t)(i * 31 + j * 7 + (j >> 8));
}

static char *make_dir(void) {
    static char tmpl[64];
    snprintf(tmpl, sizeof tmpl, "/tmp/test_kv_segment.XXXXXX");
    return strdup(mkdtemp(tmpl));
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* The only file in dir whose name ends with suffix (NULL when not exactly one). */
static char *only_file(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    char *found = NULL;
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name), s = strlen(suffix);
        if (l > s && !strcmp(e->d_name + l - s, suffix)) {
            n++;
            free(found);
            found = malloc(strlen(dir) + l + 2);
            sprintf(found, "%s/%s", dir, e->d_name);
        }
    }
    if (d) closedir(d);
    if (n != 1) free(found), found = NULL;
    return found;
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static DiKvSegStore *open_dir(const char *dir) {
    DiKvSegOptions o = {.dir = dir};
    return di_kv_seg_open(&o);
}

static int append_range(DiKvSegStore *s, int from, int to) {
    uint8_t buf[9000];
    for (int i = from; i < to; i++) {
        payload(i, buf, plen(i));
        if (di_kv_seg_append(s, K((uint64_t)i), DI_KV_KIND_BLOCK, buf, plen(i)) != 0) return -1;
    }
    return 0;
}

/* 1 when record i is served with exactly its bytes, 0 when absent, -1 when served WRONG. */
static int served(DiKvSegStore *s, int i) {
    void *d;
    size_t n;
    int kind = 0;
    if (di_kv_seg_get(s, K((uint64_t)i), &d, &n, &kind) != 1) return 0;
    uint8_t want[9000];
    payload(i, want, plen(i));
    int ok = n == plen(i) && memcmp(d, want, n) == 0 && kind == DI_KV_KIND_BLOCK;
    free(d);
    return ok ? 1 : -1;
}

TEST(records_round_trip_through_open_and_sealed_segments) {
    char *dir = make_dir();
    DiKvSegStore *s = open_dir(dir);
    CHECK(s != NULL);
    CHECK_EQ_INT(append_range(s, 0, 40), 0);
    int ok = 0;
    for (int i = 0; i < 40; i++) ok += served(s, i) == 1;
    CHECK_EQ_INT(ok, 40);
    CHECK_EQ_INT(served(s, 40), 0);
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.records_written, 40);
    CHECK_EQ_INT(st.reads, 40);
    di_kv_seg_close(s);
    char *sealed = only_file(dir, ".kvs");
    CHECK(sealed != NULL);
    free(sealed);
    CHECK_EQ_INT(count_files(dir), 1);
    s = open_dir(dir); /* index rebuilt from the footer */
    ok = 0;
    for (int i = 0; i < 40; i++) ok += served(s, i) == 1;
    CHECK_EQ_INT(ok, 40);
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.records_corrupt, 0);
    CHECK_EQ_INT(st.files_skipped, 0);
    CHECK_EQ_INT(di_kv_seg_append(s, K(1), 7, "x", 1), -1);
    CHECK(strstr(di_error_message(), "kind 7") != NULL);
    di_kv_seg_close(s);
    DiKvSegOptions bad = {.dir = dir, .cap_bytes = 1 << 20, .segment_bytes = 1 << 20};
    CHECK(di_kv_seg_open(&bad) == NULL);
    CHECK(strstr(di_error_message(), "segment_bytes") != NULL);
    remove_dir(dir);
    free(dir);
}

static void copy_prefix(const char *from, const char *to, off_t n) {
    int a = open(from, O_RDONLY), b = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char buf[65536];
    while (n > 0) {
        ssize_t r = read(a, buf, n < (off_t)sizeof buf ? (size_t)n : sizeof buf);
        if (r <= 0) break;
        if (write(b, buf, (size_t)r) != r) break;
        n -= r;
    }
    close(a);
    close(b);
}

TEST(truncated_segments_serve_exactly_their_complete_records) {
    char *dir = make_dir(), *work = make_dir();
    DiKvSegStore *s = open_dir(dir);
    enum { N = 20 };
    append_range(s, 0, N);
    di_kv_seg_close(s);
    char *seg = only_file(dir, ".kvs");
    CHECK(seg != NULL);
    if (!seg) return;
    struct stat sb;
    stat(seg, &sb);
    /* independent layout: header page, then per record a header page and the payload padded */
    uint64_t off[N + 1], end[N];
    off[0] = ALIGN;
    for (int i = 0; i < N; i++) {
        end[i] = off[i] + ALIGN + plen(i);
        off[i + 1] = off[i] + ALIGN + (plen(i) + ALIGN - 1) / ALIGN * ALIGN;
    }
    const char *base = strrchr(seg, '/') + 1;
    char dst[512];
    snprintf(dst, sizeof dst, "%s/%s", work, base);
    di_log_set_level(DI_LOG_ERROR);
    for (int trial = 0; trial < 60; trial++) {
        uint64_t cut = trial == 0 ? off[7] : trial == 1 ? 30 : test_rand32() % (uint64_t)sb.st_size;
        copy_prefix(seg, dst, (off_t)cut);
        DiKvSegStore *t = open_dir(work);
        int wrong = 0, missing = 0, extra = 0;
        int torn = 0;
        for (int i = 0; i < N; i++) {
            int r = served(t, i);
            int want = cut >= 64 && end[i] <= cut;
            wrong += r < 0, missing += want && r == 0, extra += !want && r == 1;
            torn += cut > off[i] && cut < end[i];
        }
        DiKvSegStats st;
        di_kv_seg_stats(t, &st);
        CHECK_MSG(!wrong && !missing && !extra, "cut %llu: %d wrong, %d missing, %d extra", (unsigned long long)cut,
                  wrong, missing, extra);
        CHECK_MSG(st.records_corrupt == (uint64_t)torn, "cut %llu: %llu corrupt counted, %d torn",
                  (unsigned long long)cut, (unsigned long long)st.records_corrupt, torn);
        CHECK_EQ_INT(st.files_skipped, cut < 64);
        di_kv_seg_close(t);
        unlink(dst);
    }
    di_log_set_level(DI_LOG_INFO);
    free(seg);
    remove_dir(dir);
    remove_dir(work);
    free(dir);
    free(work);
}

static void flip_bit(const char *path, uint64_t at, int bit) {
    int fd = open(path, O_RDWR);
    uint8_t b;
    if (pread(fd, &b, 1, (off_t)at) == 1) {
        b ^= (uint8_t)(1u << bit);
        if (pwrite(fd, &b, 1, (off_t)at) != 1) abort();
    }
    close(fd);
}

/* Reopen dir: records 1..n except 3 are served exact, and record 3 is counted lost once. */
static void expect_all_but_3(const char *dir, int n) {
    DiKvSegStore *s = open_dir(dir);
    int ok = 0;
    for (int i = 1; i <= n; i++) ok += served(s, i) == 1;
    CHECK_EQ_INT(served(s, 3), 0);
    CHECK_EQ_INT(ok, n - 1);
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.records_corrupt, 1);
    di_kv_seg_close(s);
}

TEST(flipped_bits_never_serve_a_wrong_byte) {
    char *dir = make_dir();
    enum { N = 12 };
    DiKvSegStore *s = open_dir(dir);
    append_range(s, 1, N + 1); /* record 0 has an empty payload; start at 1 */
    di_kv_seg_close(s);
    char *seg = only_file(dir, ".kvs");
    if (!seg) return;
    struct stat sb;
    stat(seg, &sb);
    di_log_set_level(DI_LOG_ERROR);
    /* a flip inside record 3's payload loses record 3 only, counted once when read */
    uint64_t off3 = ALIGN;
    for (int i = 1; i < 3; i++) off3 += ALIGN + (plen(i) + ALIGN - 1) / ALIGN * ALIGN;
    flip_bit(seg, off3 + ALIGN + plen(3) / 2, 3);
    expect_all_but_3(dir, N);
    flip_bit(seg, off3 + ALIGN + plen(3) / 2, 3); /* restore */
    /* a flip in the trailer: the footer fails, a scan rebuilds every record */
    flip_bit(seg, (uint64_t)sb.st_size - 5, 0);
    s = open_dir(dir);
    int ok = 0;
    for (int i = 1; i <= N; i++) ok += served(s, i) == 1;
    CHECK_EQ_INT(ok, N);
    di_kv_seg_close(s);
    flip_bit(seg, (uint64_t)sb.st_size - 5, 0);
    /* random flips anywhere: whatever is served is exact */
    for (int trial = 0; trial < 40; trial++) {
        uint64_t at = test_rand32() % (uint64_t)sb.st_size;
        int bit = (int)(test_rand32() % 8);
        flip_bit(seg, at, bit);
        s = open_dir(dir);
        int wrong = 0;
        for (int i = 1; i <= N; i++) wrong += served(s, i) < 0;
        CHECK_MSG(wrong == 0, "flip at %llu bit %d: %d records served wrong", (unsigned long long)at, bit, wrong);
        di_kv_seg_close(s);
        flip_bit(seg, at, bit);
    }
    /* a flip in the file header: the whole file is skipped and counted */
    flip_bit(seg, 20, 1);
    s = open_dir(dir);
    CHECK_EQ_INT(served(s, 1), 0);
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.files_skipped, 1);
    di_kv_seg_close(s);
    di_log_set_level(DI_LOG_INFO);
    free(seg);
    remove_dir(dir);
    free(dir);
}

/* A damaged length field in the middle of a footerless segment (here it points past the end of
 * the file, like a torn record) loses that record only: the scan resynchronises after it. */
TEST(a_bad_length_mid_segment_loses_one_record) {
    char *dir = make_dir();
    enum { N = 10 };
    DiKvSegStore *s = open_dir(dir);
    append_range(s, 1, N + 1);
    di_kv_seg_close(s);
    char *seg = only_file(dir, ".kvs");
    if (!seg) return;
    uint64_t off[N + 2];
    off[1] = ALIGN;
    for (int i = 1; i <= N; i++) off[i + 1] = off[i] + ALIGN + (plen(i) + ALIGN - 1) / ALIGN * ALIGN;
    if (truncate(seg, (off_t)(off[N] + ALIGN + plen(N))) != 0) abort(); /* no footer: a scan rebuilds */
    flip_bit(seg, off[3] + 24 + 3, 0); /* record 3's len += 16 MiB: past the end of the file */
    di_log_set_level(DI_LOG_ERROR);
    expect_all_but_3(dir, N);
    di_log_set_level(DI_LOG_INFO);
    free(seg);
    remove_dir(dir);
    free(dir);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

TEST(foreign_files_are_skipped_and_counted_once) {
    char *dir = make_dir();
    write_file(dir, "README.txt", "not a segment");
    write_file(dir, "kv-0000000001-00000000000000ab-000001.kvs", "right name, wrong contents");
    write_file(dir, ".hidden", "ignored: dot files are temporaries");
    di_log_set_level(DI_LOG_ERROR);
    DiKvSegStore *s = open_dir(dir);
    CHECK(s != NULL);
    append_range(s, 0, 3);
    CHECK_EQ_INT(di_kv_seg_refresh(s), 0);
    CHECK_EQ_INT(di_kv_seg_refresh(s), 0);
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.files_skipped, 2);
    CHECK_EQ_INT(served(s, 2), 1);
    di_kv_seg_close(s);
    di_log_set_level(DI_LOG_INFO);
    remove_dir(dir);
    free(dir);
}

static double fake_now;
static double fake_clock(void *arg) { return fake_now; }

/* A writer that died between creating its next segment and publishing it leaves a hidden
 * temporary: removed once it is old and unlocked, never while young or locked. */
TEST(stale_hidden_temporaries_are_removed) {
    char *dir = make_dir();
    const char *names[3] = {".kv-0000000001-00000000000000aa-000001.open.new",
                            ".kv-0000000001-00000000000000bb-000001.open.new", ".other-temp"};
    for (int i = 0; i < 3; i++) write_file(dir, names[i], "x");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, names[1]);
    int locked = open(path, O_RDONLY);
    CHECK(flock(locked, LOCK_EX) == 0);
    struct stat sb;
    stat(path, &sb);
    DiKvSegOptions o = {.dir = dir, .clock = fake_clock};
    fake_now = (double)sb.st_mtime + 599; /* young: kept */
    DiKvSegStore *s = di_kv_seg_open(&o);
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    CHECK(access(path, F_OK) == 0);
    fake_now = (double)sb.st_mtime + 600;
    CHECK_EQ_INT(di_kv_seg_refresh(s), 0);
    CHECK(access(path, F_OK) != 0); /* old and unlocked: removed */
    snprintf(path, sizeof path, "%s/%s", dir, names[1]);
    CHECK(access(path, F_OK) == 0); /* its writer still holds it */
    snprintf(path, sizeof path, "%s/%s", dir, names[2]);
    CHECK(access(path, F_OK) == 0); /* not ours */
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.files_skipped, 0);
    di_kv_seg_close(s);
    close(locked);
    remove_dir(dir);
    free(dir);
}

/* A live .open file that has no header yet (its writer holds the lock and is still writing
 * it) must be looked at again later, not skipped for good. */
TEST(a_live_segment_without_its_header_yet_is_retried) {
    char *dir = make_dir();
    DiKvSegStore *a = open_dir(dir);
    append_range(a, 0, 3);
    di_kv_seg_close(a); /* sealed: kv-<hour>-<writer>-000001.kvs */
    char *sealed = only_file(dir, ".kvs");
    if (!sealed) return;
    char hour[11], late[512];
    memcpy(hour, strrchr(sealed, '/') + 4, 10);
    hour[10] = 0;
    snprintf(late, sizeof late, "%s/kv-%s-00000000000000ff-000001.open", dir, hour);
    int fd = open(late, O_RDWR | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    int src = open(sealed, O_RDONLY);
    uint8_t buf[1 << 16];
    ssize_t n = read(src, buf, sizeof buf);
    close(src);
    unlink(sealed);
    DiKvSegStore *b = open_dir(dir); /* sees the empty, locked .open */
    DiKvSegStats st;
    di_kv_seg_stats(b, &st);
    CHECK_EQ_INT(st.files_skipped, 0);
    CHECK_EQ_INT(served(b, 0), 0);
    CHECK(n > 0 && write(fd, buf, (size_t)n) == n); /* the writer gets on with it */
    CHECK_EQ_INT(di_kv_seg_refresh(b), 0);
    int ok = 0;
    for (int i = 0; i < 3; i++) ok += served(b, i) == 1;
    CHECK_EQ_INT(ok, 3);
    di_kv_seg_stats(b, &st);
    CHECK_EQ_INT(st.files_skipped, 0);
    di_kv_seg_close(b);
    close(fd);
    free(sealed);
    remove_dir(dir);
    free(dir);
}


TEST(ttl_drops_whole_hourly_segments) {
    char *dir = make_dir();
    /* a TTL finer than the hour a segment spans could not be honoured: refused, naming the hour */
    DiKvSegOptions fine = {.dir = dir, .ttl_s = 10, .clock = fake_clock};
    CHECK(di_kv_seg_open(&fine) == NULL);
    CHECK(strstr(di_last_error(), "granularity of 3600 s") != NULL);
    fine.ttl_s = DI_KV_SEG_BUCKET_S - 1;
    CHECK(di_kv_seg_open(&fine) == NULL);
    DiKvSegOptions o = {.dir = dir, .ttl_s = 7200, .clock = fake_clock};
    fake_now = 100 * 3600.0 + 10;
    DiKvSegStore *s = di_kv_seg_open(&o);
    append_range(s, 0, 5); /* hour 100 */
    fake_now = 101 * 3600.0 + 10;
    append_range(s, 5, 10); /* hour 101: rolls to a new segment */
    di_kv_seg_close(s);
    CHECK_EQ_INT(count_files(dir), 2);
    fake_now = 103 * 3600.0 - 1; /* hour 100 ended at 101h; +2h TTL = 103h */
    s = di_kv_seg_open(&o);
    CHECK_EQ_INT(served(s, 0), 1);
    fake_now = 103 * 3600.0;
    CHECK_EQ_INT(di_kv_seg_refresh(s), 0);
    int old = 0, young = 0;
    for (int i = 0; i < 5; i++) old += served(s, i) == 1;
    for (int i = 5; i < 10; i++) young += served(s, i) == 1;
    CHECK_EQ_INT(old, 0);
    CHECK_EQ_INT(young, 5);
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK_EQ_INT(st.segments_expired, 1);
    CHECK_EQ_INT(count_files(dir), 1);
    di_kv_seg_close(s);
    remove_dir(dir);
    free(dir);
}

static uint64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    uint64_t n = 0;
    char path[512];
    struct stat sb;
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &sb) == 0) n += (uint64_t)sb.st_size;
    }
    if (d) closedir(d);
    return n;
}

TEST(size_cap_evicts_oldest_segments_first) {
    char *dir = make_dir();
    DiKvSegOptions o = {.dir = dir, .cap_bytes = 1 << 20}; /* segments of 128 KiB */
    DiKvSegStore *s = di_kv_seg_open(&o);
    uint8_t buf[4000];
    for (int i = 0; i < 300; i++) { /* 8 KiB on disk each: 2.4 MB in all */
        payload(i, buf, sizeof buf);
        CHECK_EQ_INT(di_kv_seg_append(s, K((uint64_t)i), DI_KV_KIND_BLOCK, buf, sizeof buf), 0);
        CHECK(dir_bytes(dir) <= (1u << 20));
    }
    DiKvSegStats st;
    di_kv_seg_stats(s, &st);
    CHECK(st.segments_evicted >= 8);
    CHECK(st.disk_bytes <= (1u << 20));
    CHECK_EQ_INT(st.disk_bytes, dir_bytes(dir));
    /* present records are a suffix of the write order: the oldest went first */
    int first = -1, holes = 0;
    for (int i = 0; i < 300; i++) {
        void *d;
        size_t n;
        int have = di_kv_seg_get(s, K((uint64_t)i), &d, &n, NULL) == 1;
        if (have) free(d);
        if (have && first < 0) first = i;
        if (!have && first >= 0) holes++;
    }
    CHECK_EQ_INT(holes, 0);
    CHECK_MSG(first > 100 && first < 200, "oldest kept record %d", first);
    di_kv_seg_close(s);
    remove_dir(dir);
    free(dir);
}

/* A child that appends 256 KiB records forever. */
static void writer_forever(const char *dir) {
    di_log_set_level(DI_LOG_ERROR);
    DiKvSegOptions o = {.dir = dir};
    DiKvSegStore *s = di_kv_seg_open(&o);
    static uint8_t buf[256 << 10];
    for (int i = 0; s; i++) {
        memset(buf, i & 0xff, sizeof buf);
        memcpy(buf, &i, sizeof i);
        di_kv_seg_append(s, K((uint64_t)i), DI_KV_KIND_BLOCK, buf, sizeof buf);
    }
    _exit(1);
}

static int big_ok(DiKvSegStore *s, int i) {
    void *d;
    size_t n;
    if (di_kv_seg_get(s, K((uint64_t)i), &d, &n, NULL) != 1) return 0;
    const uint8_t *p = d;
    int ok = n == (256 << 10) && memcmp(p, &i, sizeof i) == 0;
    for (size_t j = sizeof i; ok && j < n; j++) ok = p[j] == (uint8_t)(i & 0xff);
    free(d);
    return ok ? 1 : -1;
}

TEST(sigkill_mid_write_then_reopen_serves_only_complete_records) {
    for (int round = 0; round < 3; round++) {
        char *dir = make_dir();
        pid_t pid = fork();
        if (pid == 0) writer_forever(dir);
        uint64_t target = (uint64_t)(2 + round * 3) << 20; /* kill at a different point each round */
        for (int w = 0; w < 2000 && dir_bytes(dir) < target; w++) usleep(2000);
        usleep(700u * (unsigned)round);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status));
        di_log_set_level(DI_LOG_ERROR);
        DiKvSegStore *s = open_dir(dir);
        CHECK(s != NULL);
        if (!s) return;
        int m = 0, wrong = 0, after = 0;
        while (big_ok(s, m) == 1) m++;
        for (int i = 0; i < m + 64; i++) {
            int r = big_ok(s, i);
            wrong += r < 0;
            after += i > m && r == 1;
        }
        CHECK_MSG(m >= 4, "round %d: only %d records survived", round, m);
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(after, 0);
        DiKvSegStats st;
        di_kv_seg_stats(s, &st);
        CHECK(st.records_corrupt <= 1); /* at most the one torn record */
        /* hits resume and new writes work after the crash */
        CHECK_EQ_INT(append_range(s, 100000, 100010), 0);
        di_kv_seg_close(s);
        s = open_dir(dir);
        CHECK_EQ_INT(big_ok(s, m - 1), 1);
        CHECK_EQ_INT(served(s, 100009), 1);
        di_kv_seg_close(s);
        di_log_set_level(DI_LOG_INFO);
        remove_dir(dir);
        free(dir);
    }
}

/* Fault injection: a writer killed with SIGKILL inside its last record's write.  The child appends
 * ten records, then the eleventh, cuts its own segment back into that record (what a kill during
 * the write leaves on disk: the record's first bytes only) and kills itself, its lock still held.
 * Reopened, the directory serves the ten whole records, never the torn one, and counts exactly
 * that one as corrupt (0 before), at each cut: inside the record's header, right after it (no
 * payload yet), inside its payload and one byte short of its end. */
TEST(a_writer_killed_inside_a_record_leaves_one_counted_torn_record) {
    for (int cut_kind = 0; cut_kind < 4; cut_kind++) {
        char *dir = make_dir();
        pid_t pid = fork();
        if (pid == 0) {
            di_log_set_level(DI_LOG_ERROR);
            DiKvSegStore *s = open_dir(dir);
            if (!s || append_range(s, 0, 10) != 0) _exit(1);
            char *seg = only_file(dir, ".open");
            struct stat before;
            if (!seg || stat(seg, &before) != 0) _exit(1);
            static uint8_t big[20000];
            memset(big, 0x5A, sizeof big);
            if (di_kv_seg_append(s, K(10), DI_KV_KIND_BLOCK, big, sizeof big) != 0) _exit(1);
            off_t at = before.st_size; /* the torn record's header page starts here */
            off_t cuts[4] = {at + 100, at + ALIGN, at + ALIGN + (off_t)sizeof big / 2, at + ALIGN + (off_t)sizeof big - 1};
            if (truncate(seg, cuts[cut_kind]) != 0) _exit(1);
            raise(SIGKILL);
            _exit(1);
        }
        int status;
        waitpid(pid, &status, 0);
        CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "cut %d: the writer did not die by SIGKILL", cut_kind);
        di_log_set_level(DI_LOG_ERROR);
        DiKvSegStore *s = open_dir(dir);
        CHECK(s != NULL);
        if (!s) return;
        int whole = 0;
        for (int i = 0; i < 10; i++) whole += served(s, i) == 1;
        CHECK_EQ_INT(whole, 10);
        void *d = NULL;
        size_t n = 0;
        CHECK_EQ_INT(di_kv_seg_get(s, K(10), &d, &n, NULL), 0);
        DiKvSegStats st;
        di_kv_seg_stats(s, &st);
        CHECK_MSG(st.records_corrupt == 1, "cut %d: %llu corrupt records counted, 1 torn", cut_kind,
                  (unsigned long long)st.records_corrupt);
        di_kv_seg_close(s);
        di_log_set_level(DI_LOG_INFO);
        remove_dir(dir);
        free(dir);
    }
}

TEST(two_processes_share_one_directory) {
    char *dir = make_dir();
    int to_parent[2], to_child[2];
    if (pipe(to_parent) != 0 || pipe(to_child) != 0) abort();
    DiKvSegStore *mine = open_dir(dir);
    append_range(mine, 1000, 1010); /* the parent's own blocks, unsealed */
    pid_t pid = fork();
    if (pid == 0) {
        DiKvSegStore *s = open_dir(dir);
        int bad = 0;
        for (int i = 1000; i < 1010; i++) bad += served(s, i) != 1; /* reads the parent's live segment */
        append_range(s, 0, 20);
        char c = (char)bad;
        if (write(to_parent[1], &c, 1) != 1 || read(to_child[0], &c, 1) != 1) _exit(3);
        append_range(s, 20, 30);
        di_kv_seg_close(s);
        _exit(bad ? 2 : 0);
    }
    char c = 1;
    CHECK(read(to_parent[0], &c, 1) == 1);
    CHECK_EQ_INT(c, 0);
    /* the child is alive: its .open file is followed, its records served */
    CHECK_EQ_INT(di_kv_seg_refresh(mine), 0);
    int ok = 0;
    for (int i = 0; i < 20; i++) ok += served(mine, i) == 1;
    CHECK_EQ_INT(ok, 20);
    CHECK_EQ_INT(served(mine, 25), 0);
    if (write(to_child[1], &c, 1) != 1) abort();
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the child sealed and renamed its segment: picked up under the new name */
    CHECK_EQ_INT(di_kv_seg_refresh(mine), 0);
    ok = 0;
    for (int i = 0; i < 30; i++) ok += served(mine, i) == 1;
    CHECK_EQ_INT(ok, 30);
    DiKvSegStats st;
    di_kv_seg_stats(mine, &st);
    CHECK_EQ_INT(st.records_corrupt, 0);
    di_kv_seg_close(mine);
    remove_dir(dir);
    free(dir);
}

TEST(cache_tiers_promote_prefetch_and_persist) {
    char *dir = make_dir();
    DiKvCacheOptions o = {.ram_bytes = 3 * 4000, .block_tokens = 512, .dir = dir};
    DiKvCache *c = di_kv_cache_open(&o);
    DiKvKey keys[10];
    uint8_t buf[4000], got[4000];
    for (int i = 0; i < 10; i++) {
        keys[i] = K((uint64_t)i);
        payload(i, buf, sizeof buf);
        CHECK_EQ_INT(di_kv_cache_store(c, keys[i], buf, sizeof buf), 0);
    }
    di_kv_cache_flush(c);
    uint8_t tiers[10];
    CHECK_EQ_INT(di_kv_cache_lookup(c, keys, 10, tiers), 10);
    int l2 = 0;
    for (int i = 0; i < 10; i++) l2 += tiers[i] == 2;
    CHECK_EQ_INT(l2, 3);
    CHECK(tiers[0] == 3 && tiers[9] == 2);
    size_t n;
    CHECK_EQ_INT(di_kv_cache_read(c, keys[0], got, sizeof got, &n), 1); /* from disk, promoted */
    payload(0, buf, sizeof buf);
    CHECK(n == sizeof got && memcmp(got, buf, n) == 0);
    CHECK_EQ_INT(di_kv_cache_prefetch(c, keys + 1, 2), 2);
    di_kv_cache_flush(c);
    CHECK_EQ_INT(di_kv_cache_lookup(c, keys, 3, tiers), 3);
    CHECK(tiers[0] == 2 && tiers[1] == 2 && tiers[2] == 2);
    DiKvCacheStats st;
    di_kv_cache_stats(c, &st);
    CHECK_EQ_INT(st.hit_blocks[0], 3 + 3);
    CHECK_EQ_INT(st.hit_blocks[1], 7);
    CHECK_EQ_INT(st.hit_tokens[1], 7 * 512);
    CHECK_EQ_INT(st.writes_queued, 10);
    CHECK_EQ_INT(st.prefetches, 2);
    CHECK_EQ_INT(st.bytes_read, 3 * (4096 + 4000)); /* a header page and the payload per read */
    CHECK(st.bytes_written >= 10 * 8192);
    CHECK(st.ram_evictions >= 7);
    di_kv_cache_close(c);
    /* a restarted engine (another process) hits everything on disk */
    c = di_kv_cache_open(&o);
    CHECK_EQ_INT(di_kv_cache_lookup(c, keys, 10, NULL), 10);
    CHECK_EQ_INT(di_kv_cache_read(c, keys[5], got, sizeof got, &n), 1);
    payload(5, buf, sizeof buf);
    CHECK(memcmp(got, buf, sizeof buf) == 0);
    di_kv_cache_close(c);
    remove_dir(dir);
    free(dir);
}

TEST(an_engine_sees_another_engines_blocks_without_asking) {
    char *dir = make_dir();
    DiKvCacheOptions o = {.ram_bytes = 1 << 20, .block_tokens = 512, .dir = dir, .refresh_s = 0.02};
    DiKvCache *c = di_kv_cache_open(&o);
    int done[2];
    if (pipe(done) != 0) abort();
    pid_t pid = fork();
    if (pid == 0) {
        DiKvCache *d = di_kv_cache_open(&o);
        uint8_t buf[3000];
        for (int i = 0; i < 5; i++) {
            payload(i, buf, sizeof buf);
            di_kv_cache_store(d, K((uint64_t)i), buf, sizeof buf);
        }
        di_kv_cache_flush(d);
        char x = 0;
        if (write(done[1], &x, 1) != 1) _exit(2);
        if (read(done[0], &x, 0) < 0) _exit(3);
        _exit(0); /* no close: the segment stays an .open of a process that is gone */
    }
    char x;
    CHECK(read(done[0], &x, 1) == 1);
    DiKvKey keys[5];
    for (int i = 0; i < 5; i++) keys[i] = K((uint64_t)i);
    int hits = 0;
    for (int w = 0; w < 200 && hits < 5; w++) { /* the I/O thread refreshes every 20 ms */
        usleep(10000);
        hits = di_kv_cache_lookup(c, keys, 5, NULL);
    }
    CHECK_EQ_INT(hits, 5);
    uint8_t got[3000], want[3000];
    size_t n;
    CHECK_EQ_INT(di_kv_cache_read(c, keys[4], got, sizeof got, &n), 1);
    payload(4, want, sizeof want);
    CHECK(n == sizeof want && memcmp(got, want, n) == 0);
    waitpid(pid, NULL, 0);
    di_kv_cache_close(c);
    o.refresh_s = 1e9;
    CHECK(di_kv_cache_open(&o) == NULL);
    CHECK(strstr(di_error_message(), "refresh_s") != NULL);
    close(done[0]);
    close(done[1]);
    remove_dir(dir);
    free(dir);
}

/* A loader that holds the I/O thread until the test lets it go: a stand-in for a hung mount. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_entered;
static void gated_load(void *arg, DiKvKey key) {
    pthread_mutex_lock(&gate_mu);
    gate_entered = 1;
    pthread_cond_broadcast(&gate_cv);
    while (!gate_open) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

TEST(a_stuck_writer_never_blocks_submitters_and_counts_drops) {
    char *dir = make_dir();
    DiKvSegStore *s = open_dir(dir);
    DiKvWriter *w = di_kv_writer_start(s, 3, 1 << 20, 0, gated_load, NULL);
    CHECK(w != NULL);
    if (!w) return;
    CHECK_EQ_INT(di_kv_writer_prefetch(w, K(999)), 1);
    pthread_mutex_lock(&gate_mu);
    while (!gate_entered) pthread_cond_wait(&gate_cv, &gate_mu); /* the thread is stuck now */
    pthread_mutex_unlock(&gate_mu);
    static uint8_t big[(1 << 20) + 1];
    int queued = 0, dropped = 0;
    for (int i = 0; i < 100; i++) {
        int r = di_kv_writer_submit(w, K((uint64_t)i), DI_KV_KIND_BLOCK, big, 100);
        queued += r == 1, dropped += r == 0;
    }
    CHECK_EQ_INT(di_kv_writer_submit(w, K(500), DI_KV_KIND_BLOCK, big, sizeof big), 0); /* over max_bytes */
    CHECK_EQ_INT(queued, 3);
    CHECK_EQ_INT(dropped, 97);
    pthread_mutex_lock(&gate_mu);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    di_kv_writer_flush(w);
    DiKvWriterStats st;
    di_kv_writer_stats(w, &st);
    CHECK_EQ_INT(st.queued, 3);
    CHECK_EQ_INT(st.dropped, 98);
    CHECK_EQ_INT(st.written, 3);
    CHECK_EQ_INT(st.loads, 1);
    CHECK_EQ_INT(di_kv_seg_contains(s, K(0)), 1); /* the three queued before the queue filled */
    CHECK_EQ_INT(di_kv_seg_contains(s, K(2)), 1);
    CHECK_EQ_INT(di_kv_seg_contains(s, K(3)), 0);
    CHECK_EQ_INT(di_kv_writer_submit(w, K(1), 9, big, 1), -1);
    di_kv_writer_stop(w);
    CHECK(di_kv_writer_start(s, 0, 1, 0, NULL, NULL) == NULL);
    CHECK(strstr(di_error_message(), "max_jobs") != NULL);
    di_kv_seg_close(s);
    remove_dir(dir);
    free(dir);
}

TEST(unwritable_or_full_disk_degrades_to_ram) {
    char *dir = make_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/file", dir);
    write_file(dir, "file", "a file where a directory should be");
    snprintf(path, sizeof path, "%s/file/sub", dir);
    di_log_set_level(DI_LOG_ERROR);
    DiKvCacheOptions o = {.ram_bytes = 1 << 20, .block_tokens = 512, .dir = path};
    DiKvCache *c = di_kv_cache_open(&o);
    CHECK(c != NULL);
    DiKvCacheStats st;
    di_kv_cache_stats(c, &st);
    CHECK_EQ_INT(st.disk_enabled, 0);
    CHECK_EQ_INT(di_kv_cache_store(c, K(1), "abc", 3), 0);
    CHECK_EQ_INT(di_kv_cache_lookup(c, (DiKvKey[]){K(1)}, 1, NULL), 1);
    di_kv_cache_close(c);
    /* a disk that fills up: RLIMIT_FSIZE makes writes past 64 KiB fail, in a child */
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {64 << 10, 64 << 10};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        o.dir = dir;
        DiKvCache *d = di_kv_cache_open(&o);
        uint8_t buf[8000];
        int fails = 0;
        for (int i = 0; i < 40; i++) {
            payload(i, buf, sizeof buf);
            fails += di_kv_cache_store(d, K((uint64_t)i), buf, sizeof buf) != 0;
        }
        di_kv_cache_flush(d);
        DiKvKey keys[40];
        for (int i = 0; i < 40; i++) keys[i] = K((uint64_t)i);
        int hits = di_kv_cache_lookup(d, keys, 40, NULL);
        DiKvCacheStats s2;
        di_kv_cache_stats(d, &s2);
        di_kv_cache_close(d);
        _exit(fails == 0 && hits == 40 && s2.write_errors >= 1 && s2.disk_enabled ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "full-disk child status %d", status);
    di_log_set_level(DI_LOG_INFO);
    remove_dir(dir);
    free(dir);
}

int main(void) {
    RUN_TEST(records_round_trip_through_open_and_sealed_segments);
    RUN_TEST(truncated_segments_serve_exactly_their_complete_records);
    RUN_TEST(flipped_bits_never_serve_a_wrong_byte);
    RUN_TEST(a_bad_length_mid_segment_loses_one_record);
    RUN_TEST(foreign_files_are_skipped_and_counted_once);
    RUN_TEST(a_live_segment_without_its_header_yet_is_retried);
    RUN_TEST(stale_hidden_temporaries_are_removed);
    RUN_TEST(ttl_drops_whole_hourly_segments);
    RUN_TEST(size_cap_evicts_oldest_segments_first);
    RUN_TEST(sigkill_mid_write_then_reopen_serves_only_complete_records);
    RUN_TEST(a_writer_killed_inside_a_record_leaves_one_counted_torn_record);
    RUN_TEST(two_processes_share_one_directory);
    RUN_TEST(cache_tiers_promote_prefetch_and_persist);
    RUN_TEST(an_engine_sees_another_engines_blocks_without_asking);
    RUN_TEST(a_stuck_writer_never_blocks_submitters_and_counts_drops);
    RUN_TEST(unwritable_or_full_disk_degrades_to_ram);
    return TEST_SUMMARY();
}
