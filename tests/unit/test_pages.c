/* test_pages.c — the state page pool: exact accounting, all-or-nothing reservation, reuse
 * without fragmentation, poisoning of freed pages, and a random alloc/free schedule that must
 * return every page (checked under ASan too). */
#include "test.h"

#include "base/error.h"
#include "engine/pages.h"

#include <stdint.h>

TEST(pool_rejects_bad_sizes) {
    CHECK(di_page_pool_create(0, 4, false) == NULL);
    CHECK(strstr(di_error_message(), "positive") != NULL);
    CHECK(di_page_pool_create(64, 0, false) == NULL);
}

TEST(page_size_rounds_to_cache_lines) {
    DiPagePool *pool = di_page_pool_create(100, 3, false);
    CHECK(pool != NULL);
    CHECK_EQ_INT(di_page_pool_page_bytes(pool), 128);
    CHECK_EQ_INT(di_page_pool_total(pool), 3);
    di_page_pool_destroy(pool);
}

TEST(reserve_is_all_or_nothing_and_counts_exactly) {
    DiPagePool *pool = di_page_pool_create(64, 10, false);
    DiPageTable a = {0}, b = {0};
    CHECK_EQ_INT(di_page_table_reserve(pool, &a, 4), 0);
    CHECK_EQ_INT(a.n, 4);
    CHECK_EQ_INT(di_page_table_reserve(pool, &a, 3), 0); /* already has them */
    CHECK_EQ_INT(a.n, 4);
    CHECK_EQ_INT(di_page_table_reserve(pool, &b, 7), -1); /* 6 free */
    CHECK(strstr(di_error_message(), "need 7 more pages") != NULL);
    CHECK_EQ_INT(b.n, 0);
    CHECK_EQ_INT(di_page_pool_used(pool), 4);
    CHECK_EQ_INT(di_page_table_reserve(pool, &b, 6), 0);
    CHECK_EQ_INT(di_page_pool_free(pool), 0);
    CHECK_EQ_INT(di_page_pool_peak(pool), 10);
    /* pages are distinct and page aligned inside the slab */
    for (size_t i = 0; i < a.n; i++)
        for (size_t j = 0; j < b.n; j++) CHECK(a.pages[i] != b.pages[j]);
    for (size_t i = 0; i < a.n; i++) CHECK(((uintptr_t)a.pages[i] & 63) == 0);
    di_page_table_release(pool, &a);
    CHECK_EQ_INT(a.n, 0);
    CHECK_EQ_INT(di_page_pool_used(pool), 6);
    CHECK_EQ_INT(di_page_pool_peak(pool), 10);
    di_page_table_release(pool, &b);
    CHECK_EQ_INT(di_page_pool_used(pool), 0);
    di_page_table_free(&a);
    di_page_table_free(&b);
    di_page_pool_destroy(pool);
}

TEST(freed_pages_are_poisoned_and_reused) {
    DiPagePool *pool = di_page_pool_create(64, 2, true);
    DiPageTable t = {0};
    CHECK_EQ_INT(di_page_table_reserve(pool, &t, 2), 0);
    memset(t.pages[0], 0x11, 64);
    uint8_t *first = t.pages[0];
    di_page_table_release(pool, &t);
    CHECK_EQ_INT(first[0], 0xA5);
    CHECK_EQ_INT(first[63], 0xA5);
    CHECK_EQ_INT(di_page_table_reserve(pool, &t, 1), 0);
    CHECK(t.pages[0] == first); /* LIFO: the table's first page comes back first */
    di_page_table_release(pool, &t);
    di_page_table_free(&t);
    di_page_pool_destroy(pool);
}

/* Random growth and release of 16 tables over 64 pages: the pool's count always equals the sum
 * of the table lengths, no page is in two tables, and a full pool can always be refilled
 * (fixed-size pages: no fragmentation). */
TEST(random_schedule_keeps_exact_accounting) {
    enum { TABLES = 16, PAGES = 64 };
    DiPagePool *pool = di_page_pool_create(64, PAGES, true);
    DiPageTable t[TABLES] = {{0}};
    uint64_t rng = 12345;
    int ok = 1;
    for (int step = 0; step < 5000 && ok; step++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        int k = (int)((rng >> 33) % TABLES);
        if ((rng >> 20) % 5 == 0) {
            di_page_table_release(pool, &t[k]);
        } else {
            size_t want = t[k].n + 1 + (size_t)((rng >> 40) % 4);
            size_t free_before = di_page_pool_free(pool);
            int rc = di_page_table_reserve(pool, &t[k], want);
            if (rc == 0) ok &= t[k].n == want;
            else ok &= di_page_pool_free(pool) == free_before && want - t[k].n > free_before;
        }
        size_t sum = 0;
        for (int i = 0; i < TABLES; i++) sum += t[i].n;
        ok &= sum == di_page_pool_used(pool);
    }
    CHECK(ok);
    /* no page in two tables: mark each page's first byte */
    for (int i = 0; i < TABLES; i++)
        for (size_t j = 0; j < t[i].n; j++) t[i].pages[j][0] = (uint8_t)i;
    int distinct = 1;
    for (int i = 0; i < TABLES; i++)
        for (size_t j = 0; j < t[i].n; j++) distinct &= t[i].pages[j][0] == (uint8_t)i;
    CHECK(distinct);
    for (int i = 0; i < TABLES; i++) di_page_table_release(pool, &t[i]);
    CHECK_EQ_INT(di_page_pool_used(pool), 0);
    CHECK_EQ_INT(di_page_table_reserve(pool, &t[0], PAGES), 0);
    di_page_table_release(pool, &t[0]);
    for (int i = 0; i < TABLES; i++) di_page_table_free(&t[i]);
    di_page_pool_destroy(pool);
}

int main(void) {
    RUN_TEST(pool_rejects_bad_sizes);
    RUN_TEST(page_size_rounds_to_cache_lines);
    RUN_TEST(reserve_is_all_or_nothing_and_counts_exactly);
    RUN_TEST(freed_pages_are_poisoned_and_reused);
    RUN_TEST(random_schedule_keeps_exact_accounting);
    return TEST_SUMMARY();
}
