/* mem.c — checked allocation (see mem.h). */
#include "base/mem.h"

#include "base/error.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Relaxed: a count, never a synchronisation point (one uncontended add per allocation). */
static atomic_llong alloc_count;

long long di_alloc_count(void) { return atomic_load_explicit(&alloc_count, memory_order_relaxed); }

static void counted(void) { atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed); }

bool di_mul_size(size_t a, size_t b, size_t *out) {
    if (b != 0 && a > SIZE_MAX / b) return false;
    *out = a * b;
    return true;
}

void *di_calloc(size_t n, size_t size, const char *what) {
    size_t bytes;
    if (!di_mul_size(n, size, &bytes)) {
        di_errorf("allocating %s: %zu x %zu bytes overflows", what ? what : "memory", n, size);
        return NULL;
    }
    counted();
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p) di_errorf("out of memory allocating %s (%zu bytes)", what ? what : "memory", bytes);
    return p;
}

void *di_malloc(size_t size, const char *what) {
    counted();
    void *p = malloc(size ? size : 1);
    if (!p) di_errorf("out of memory allocating %s (%zu bytes)", what ? what : "memory", size);
    return p;
}

void *di_realloc_array(void *ptr, size_t n, size_t size, const char *what) {
    size_t bytes;
    if (!di_mul_size(n, size, &bytes)) {
        di_errorf("resizing %s: %zu x %zu bytes overflows", what ? what : "memory", n, size);
        return NULL;
    }
    counted();
    void *p = realloc(ptr, bytes ? bytes : 1);
    if (!p) di_errorf("out of memory resizing %s to %zu bytes", what ? what : "memory", bytes);
    return p;
}

int di_grow(void *pptr, size_t *cap, size_t need, size_t first, size_t elem, const char *what) {
    if (!pptr || !cap || elem == 0) return di_errorf("growing %s: bad arguments", what ? what : "memory");
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : first ? first : 1, bytes;
    while (n < need) n = n > SIZE_MAX / 2 ? need : n * 2;
    if (!di_mul_size(n, elem, &bytes))
        return di_errorf("growing %s to %zu items of %zu bytes: the size overflows", what ? what : "memory", need, elem);
    void *old; /* pptr is a T **: copied, not cast, so no T * is read through a void * lvalue */
    memcpy(&old, pptr, sizeof old);
    void *grown = di_realloc_array(old, n, elem, what);
    if (!grown) return -1;
    memcpy(pptr, &grown, sizeof grown);
    *cap = n;
    return 0;
}

void *di_aligned_malloc(size_t n, size_t size, const char *what) {
    size_t bytes;
    if (!di_mul_size(n, size, &bytes) || bytes > SIZE_MAX - 64) {
        di_errorf("allocating %s: %zu x %zu bytes overflows", what ? what : "memory", n, size);
        return NULL;
    }
    size_t rounded = (bytes + 63) & ~(size_t)63;
    counted();
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) di_errorf("out of memory allocating %s (%zu bytes)", what ? what : "memory", bytes);
    return p;
}

void *di_aligned_calloc(size_t n, size_t size, const char *what) {
    void *p = di_aligned_malloc(n, size, what);
    size_t bytes = n * size; /* no overflow: di_aligned_malloc checked it */
    if (p) memset(p, 0, bytes > 0 ? (bytes + 63) & ~(size_t)63 : 64);
    return p;
}

void di_aligned_free(void *ptr) { free(ptr); }

char *di_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = di_malloc(n, "string");
    if (p) memcpy(p, s, n);
    return p;
}
