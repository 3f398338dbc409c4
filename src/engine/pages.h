/* pages.h — the state page pool and per-request page tables.
 *
 * All per-request model state lives in pages of one fixed size carved from a single allocation,
 * so memory is reused without fragmentation (any free page serves any request) and a long context
 * needs no contiguous buffer.  A page table is a request's list of pages, in order.  Accounting
 * is exact: a page is either on the free stack or in exactly one table, and the pool counts both
 * (tests check used == sum of table lengths and that every page comes back).
 *
 * With poisoning on, a page is filled with 0xA5 when it is freed, so a runner that reads state it
 * never wrote after a page was reused sees garbage and the mock-runner tests catch it. */
#ifndef DI_ENGINE_PAGES_H
#define DI_ENGINE_PAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct DiPagePool DiPagePool;

typedef struct {
    uint8_t **pages; /* page addresses, in order */
    size_t n, cap;
} DiPageTable;

/* page_bytes > 0 (rounded up to a multiple of 64), n_pages > 0. */
DiPagePool *di_page_pool_create(size_t page_bytes, size_t n_pages, bool poison);
void di_page_pool_destroy(DiPagePool *pool);

size_t di_page_pool_page_bytes(const DiPagePool *pool);
size_t di_page_pool_total(const DiPagePool *pool);
size_t di_page_pool_free(const DiPagePool *pool);
size_t di_page_pool_used(const DiPagePool *pool);
size_t di_page_pool_peak(const DiPagePool *pool);

/* Grow the table to n_pages pages (no-op when it has them).  All or nothing: returns -1 with an
 * error (and changes nothing) when the pool has too few free pages. */
int di_page_table_reserve(DiPagePool *pool, DiPageTable *table, size_t n_pages);
/* Return every page of the table to the pool; the table is empty (and reusable) afterwards. */
void di_page_table_release(DiPagePool *pool, DiPageTable *table);
/* Return the pages after the first n_pages to the pool (no-op when the table has no more). */
void di_page_table_truncate(DiPagePool *pool, DiPageTable *table, size_t n_pages);
/* Free the table's own array (its pages must have been released). */
void di_page_table_free(DiPageTable *table);

#endif
