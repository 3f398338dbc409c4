/* pages.c — the state page pool: one slab, a LIFO free stack of page indices (recently freed
 * pages are reused first, while they are still in cache), exact counters.  The slab is an
 * anonymous mapping: the kernel supplies zeroed memory as pages are first touched, so a large pool
 * costs nothing until it is used (a calloc'd slab would be written in full at start-up). */
#include "engine/pages.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE_POISON 0xA5

struct DiPagePool {
    uint8_t *slab;
    size_t page_bytes, n_pages;
    uint32_t *free_stack; /* indices of free pages; top at n_free - 1 */
    size_t n_free, peak_used;
    bool poison;
};

DiPagePool *di_page_pool_create(size_t page_bytes, size_t n_pages, bool poison) {
    if (page_bytes == 0 || n_pages == 0) {
        di_errorf("page pool: page size (%zu) and page count (%zu) must be positive", page_bytes, n_pages);
        return NULL;
    }
    if (n_pages > UINT32_MAX) {
        di_errorf("page pool: %zu pages exceeds the limit of %u", n_pages, UINT32_MAX);
        return NULL;
    }
    page_bytes = (page_bytes + 63) & ~(size_t)63; /* each page starts on a cache line */
    size_t slab_bytes;
    if (!di_mul_size(n_pages, page_bytes, &slab_bytes)) {
        di_errorf("page pool: %zu pages of %zu bytes overflows", n_pages, page_bytes);
        return NULL;
    }
    DiPagePool *pool = di_calloc(1, sizeof *pool, "page pool");
    if (!pool) return NULL;
    pool->page_bytes = page_bytes;
    pool->n_pages = n_pages;
    pool->free_stack = di_calloc(n_pages, sizeof *pool->free_stack, "page free list");
    void *slab = mmap(NULL, slab_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (slab == MAP_FAILED) {
        di_errorf("page pool: cannot map %zu bytes of state memory", slab_bytes);
        slab = NULL;
    }
    pool->slab = slab;
    if (!pool->slab || !pool->free_stack) {
        di_page_pool_destroy(pool);
        return NULL;
    }
    pool->poison = poison;
    /* Page 0 on top, so a fresh pool hands out pages in address order. */
    for (size_t i = 0; i < n_pages; i++) pool->free_stack[i] = (uint32_t)(n_pages - 1 - i);
    pool->n_free = n_pages;
    if (poison) memset(pool->slab, PAGE_POISON, n_pages * page_bytes);
    return pool;
}

void di_page_pool_destroy(DiPagePool *pool) {
    if (!pool) return;
    if (pool->slab) munmap(pool->slab, pool->n_pages * pool->page_bytes);
    free(pool->free_stack);
    free(pool);
}

size_t di_page_pool_page_bytes(const DiPagePool *pool) { return pool ? pool->page_bytes : 0; }
size_t di_page_pool_total(const DiPagePool *pool) { return pool ? pool->n_pages : 0; }
size_t di_page_pool_free(const DiPagePool *pool) { return pool ? pool->n_free : 0; }
size_t di_page_pool_used(const DiPagePool *pool) { return pool ? pool->n_pages - pool->n_free : 0; }
size_t di_page_pool_peak(const DiPagePool *pool) { return pool ? pool->peak_used : 0; }

int di_page_table_reserve(DiPagePool *pool, DiPageTable *table, size_t n_pages) {
    if (!pool || !table) return di_errorf("page table reserve: NULL pool or table");
    if (table->n >= n_pages) return 0;
    size_t need = n_pages - table->n;
    if (need > pool->n_free)
        return di_errorf("state memory exhausted: need %zu more pages of %zu bytes, %zu free of %zu", need,
                         pool->page_bytes, pool->n_free, pool->n_pages);
    if (di_grow(&table->pages, &table->cap, n_pages, 8, sizeof *table->pages, "page table") != 0) return -1;
    for (size_t i = 0; i < need; i++) {
        uint32_t index = pool->free_stack[--pool->n_free];
        table->pages[table->n++] = pool->slab + (size_t)index * pool->page_bytes;
    }
    size_t used = pool->n_pages - pool->n_free;
    if (used > pool->peak_used) pool->peak_used = used;
    return 0;
}

void di_page_table_truncate(DiPagePool *pool, DiPageTable *table, size_t n_pages) {
    if (!pool || !table) return;
    /* Release in reverse, so the first page of the table is reused first next time. */
    while (table->n > n_pages) {
        uint8_t *page = table->pages[--table->n];
        if (pool->poison) memset(page, PAGE_POISON, pool->page_bytes);
        pool->free_stack[pool->n_free++] = (uint32_t)((size_t)(page - pool->slab) / pool->page_bytes);
    }
}

void di_page_table_release(DiPagePool *pool, DiPageTable *table) { di_page_table_truncate(pool, table, 0); }

void di_page_table_free(DiPageTable *table) {
    if (!table) return;
    free(table->pages);
    table->pages = NULL;
    table->n = table->cap = 0;
}
