/* mem.h — checked allocation.  Sizes are multiplied with overflow checks and every failure
 * records an error naming what was being allocated, so an out-of-memory condition reaches the
 * user as a message instead of a crash. */
#ifndef DI_BASE_MEM_H
#define DI_BASE_MEM_H

#include <stdbool.h>
#include <stddef.h>

/* n * size bytes, zeroed; NULL (with error) on overflow or exhaustion. `what` names the object. */
void *di_calloc(size_t n, size_t size, const char *what);
void *di_malloc(size_t size, const char *what);
/* Resize to n * size bytes; on failure the old block is left untouched and NULL is returned. */
void *di_realloc_array(void *ptr, size_t n, size_t size, const char *what);
/* Grows the array *(T **)pptr of *cap items of `elem` bytes to hold at least `need`: the capacity
 * doubles from *cap (from `first` when *cap is 0) until it fits, so appends cost O(1) amortised.
 * A no-op when need <= *cap.  -1 with an error naming `what` when the size overflows or memory
 * runs out; then the array and *cap are left untouched. */
int di_grow(void *pptr, size_t *cap, size_t need, size_t first, size_t elem, const char *what);
/* 64-byte aligned (SIMD loads, cache lines), zeroed. Free with di_aligned_free. */
void *di_aligned_calloc(size_t n, size_t size, const char *what);
/* The same, not zeroed: scratch that is written before it is read. */
void *di_aligned_malloc(size_t n, size_t size, const char *what);
void di_aligned_free(void *ptr);
char *di_strdup(const char *s);
/* Heap allocations made through these functions since the process started (every thread):
 * the benchmarks and tests count the model's allocations per decode step with it. */
long long di_alloc_count(void);

/* a * b without overflow; false when it would overflow. */
bool di_mul_size(size_t a, size_t b, size_t *out);

#endif
