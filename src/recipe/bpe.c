/* bpe.c — byte-level BPE merging (see bpe.h): the merge table, the flat and heap merge loops,
 * and the piece cache. */
#include "recipe/bpe.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- id vectors --------------------------------------------------------------------- */

static int idvec_reserve(DiIdVec *vec, size_t extra) {
    if (extra > ((size_t)-1) / 8 - vec->n) return di_errorf("token id list too long");
    return di_grow(&vec->v, &vec->cap, vec->n + extra, 64, sizeof *vec->v, "token ids");
}

int di_idvec_push(DiIdVec *vec, int32_t id) {
    if (vec->n == vec->cap && idvec_reserve(vec, 1) != 0) return -1;
    vec->v[vec->n++] = id;
    return 0;
}

int di_idvec_append(DiIdVec *vec, const int32_t *ids, size_t n) {
    if (n == 0) return 0;
    if (idvec_reserve(vec, n) != 0) return -1;
    memcpy(vec->v + vec->n, ids, n * sizeof *ids);
    vec->n += n;
    return 0;
}

void di_idvec_free(DiIdVec *vec) {
    free(vec->v);
    memset(vec, 0, sizeof *vec);
}

/* ---- merge table -------------------------------------------------------------------- */

static inline uint64_t pair_key(int32_t left, int32_t right) {
    /* +1 keeps 0 free as the empty-slot marker; ids are non-negative int32. */
    return (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
}

static inline size_t pair_slot(uint64_t key, size_t mask) {
    /* The murmur3 64-bit finalizer: every key bit reaches the low bits the mask keeps. */
    uint64_t h = key;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return (size_t)h & mask;
}

int di_bpe_init(DiBpe *bpe, size_t n_merges) {
    memset(bpe, 0, sizeof *bpe);
    for (int b = 0; b < 256; b++) bpe->byte_id[b] = -1;
    size_t cap = 1024;
    while (cap < 2 * n_merges + 2) {
        if (cap > ((size_t)-1) / 64) return di_errorf("too many merges (%zu)", n_merges);
        cap *= 2;
    }
    bpe->slots = di_calloc(cap, sizeof *bpe->slots, "merge table");
    if (!bpe->slots) return -1;
    bpe->mask = cap - 1;
    return 0;
}

void di_bpe_free(DiBpe *bpe) {
    free(bpe->slots);
    bpe->slots = NULL;
    bpe->n_merges = 0;
}

int di_bpe_add_merge(DiBpe *bpe, int32_t left, int32_t right, int32_t result, uint32_t rank) {
    if (left < 0 || right < 0 || result < 0) return di_errorf("merge with a negative id");
    uint64_t key = pair_key(left, right);
    size_t i = pair_slot(key, bpe->mask);
    while (bpe->slots[i].key != 0 && bpe->slots[i].key != key) i = (i + 1) & bpe->mask;
    if (bpe->slots[i].key == 0) {
        if (2 * (bpe->n_merges + 1) > bpe->mask + 1) return di_errorf("merge table full");
        bpe->n_merges++;
    }
    bpe->slots[i] = (DiMergeSlot){key, rank, result};
    return 0;
}

bool di_bpe_lookup(const DiBpe *bpe, int32_t left, int32_t right, uint32_t *rank, int32_t *result) {
    uint64_t key = pair_key(left, right);
    for (size_t i = pair_slot(key, bpe->mask);; i = (i + 1) & bpe->mask) {
        const DiMergeSlot *s = &bpe->slots[i];
        if (s->key == key) {
            *rank = s->rank;
            *result = s->result;
            return true;
        }
        if (s->key == 0) return false;
    }
}

/* ---- flat merge loop (short pieces) -------------------------------------------------- */

#define NO_RANK UINT32_MAX

static int encode_flat(const DiBpe *bpe, const uint8_t *piece, size_t n, DiIdVec *out) {
    int32_t ids[DI_BPE_FLAT_MAX], results[DI_BPE_FLAT_MAX];
    uint32_t ranks[DI_BPE_FLAT_MAX];
    for (size_t i = 0; i < n; i++) ids[i] = bpe->byte_id[piece[i]];
    for (size_t i = 0; i + 1 < n; i++)
        if (!di_bpe_lookup(bpe, ids[i], ids[i + 1], &ranks[i], &results[i])) ranks[i] = NO_RANK;
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (ranks[i] < ranks[best]) best = i; /* strict: the leftmost wins a tie */
        if (ranks[best] == NO_RANK) break;
        ids[best] = results[best];
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof *ids);
        if (n - best >= 3) { /* pairs after the merged one shift left too */
            memmove(ranks + best + 1, ranks + best + 2, (n - best - 3) * sizeof *ranks);
            memmove(results + best + 1, results + best + 2, (n - best - 3) * sizeof *results);
        }
        n--;
        if (best + 1 < n && !di_bpe_lookup(bpe, ids[best], ids[best + 1], &ranks[best], &results[best]))
            ranks[best] = NO_RANK;
        if (best > 0 && !di_bpe_lookup(bpe, ids[best - 1], ids[best], &ranks[best - 1], &results[best - 1]))
            ranks[best - 1] = NO_RANK;
    }
    return di_idvec_append(out, ids, n);
}

/* ---- heap merge loop (long pieces) --------------------------------------------------- */

typedef struct {
    int32_t id, prev, next; /* id < 0: merged into its left neighbour */
} Symbol;

typedef struct {
    uint32_t rank, pos;
    int32_t result;
} Candidate;

static inline bool cand_before(const Candidate *a, const Candidate *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(Candidate *heap, size_t *n, Candidate c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = c;
}

static Candidate heap_pop(Candidate *heap, size_t *n) {
    Candidate top = heap[0], last = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && cand_before(&heap[child + 1], &heap[child])) child++;
        if (!cand_before(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (*n > 0) heap[i] = last;
    return top;
}

static void push_pair(const DiBpe *bpe, const Symbol *sym, int32_t pos, Candidate *heap, size_t *n_heap) {
    int32_t next = sym[pos].next;
    Candidate c;
    if (next >= 0 && di_bpe_lookup(bpe, sym[pos].id, sym[next].id, &c.rank, &c.result)) {
        c.pos = (uint32_t)pos;
        heap_push(heap, n_heap, c);
    }
}

static int encode_heap(const DiBpe *bpe, const uint8_t *piece, size_t n, DiIdVec *out, DiBpeScratch *scratch) {
    if (n > INT32_MAX / 4) return di_errorf("piece of %zu bytes is too long", n);
    /* Each merge pushes at most two candidates: n-1 initial + 2(n-1) later. */
    size_t need = n * sizeof(Symbol) + 3 * n * sizeof(Candidate);
    if (need > scratch->cap) {
        void *buf = di_malloc(need, "BPE scratch");
        if (!buf) return -1;
        free(scratch->buf);
        scratch->buf = buf;
        scratch->cap = need;
    }
    Symbol *sym = scratch->buf;
    Candidate *heap = (Candidate *)(sym + n);
    size_t n_heap = 0;
    for (size_t i = 0; i < n; i++)
        sym[i] = (Symbol){bpe->byte_id[piece[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
    for (size_t i = 0; i + 1 < n; i++) push_pair(bpe, sym, (int32_t)i, heap, &n_heap);
    while (n_heap > 0) {
        Candidate c = heap_pop(heap, &n_heap);
        int32_t pos = (int32_t)c.pos, next = sym[pos].next;
        uint32_t rank;
        int32_t result;
        /* Skip candidates made stale by an earlier merge of either symbol. */
        if (sym[pos].id < 0 || next < 0) continue;
        if (!di_bpe_lookup(bpe, sym[pos].id, sym[next].id, &rank, &result) || rank != c.rank ||
            result != c.result)
            continue;
        sym[pos].id = result;
        sym[pos].next = sym[next].next;
        if (sym[next].next >= 0) sym[sym[next].next].prev = pos;
        sym[next].id = -1;
        if (sym[pos].prev >= 0) push_pair(bpe, sym, sym[pos].prev, heap, &n_heap);
        push_pair(bpe, sym, pos, heap, &n_heap);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if (di_idvec_push(out, sym[i].id) != 0) return -1;
    return 0;
}

void di_bpe_scratch_free(DiBpeScratch *scratch) {
    free(scratch->buf);
    scratch->buf = NULL;
    scratch->cap = 0;
}

int di_bpe_encode_piece(const DiBpe *bpe, const uint8_t *piece, size_t len, DiIdVec *out,
                        DiBpeScratch *scratch, bool force_heap) {
    if (len == 0) return 0;
    if (len <= DI_BPE_FLAT_MAX && !force_heap) return encode_flat(bpe, piece, len, out);
    return encode_heap(bpe, piece, len, out, scratch);
}

/* ---- piece cache -------------------------------------------------------------------- */

int di_bpe_cache_init(DiBpeCache *cache, size_t text_bytes) {
    size_t n = 1024;
    while (n < 16384 && n * 32 < text_bytes) n *= 2;
    cache->slots = di_calloc(n, sizeof *cache->slots, "BPE piece cache");
    cache->mask = n - 1;
    return cache->slots ? 0 : -1;
}

void di_bpe_cache_free(DiBpeCache *cache) {
    free(cache->slots);
    cache->slots = NULL;
}

int di_bpe_encode_cached(const DiBpe *bpe, const uint8_t *piece, size_t len, DiIdVec *out,
                         DiBpeScratch *scratch, DiBpeCache *cache) {
    if (!cache || len > DI_BPE_CACHE_BYTES || len == 0)
        return di_bpe_encode_piece(bpe, piece, len, out, scratch, false);
    uint64_t hash = XXH3_64bits(piece, len);
    DiBpeCacheSlot *slot = &cache->slots[hash & cache->mask];
    if (slot->len == len && slot->hash == hash && memcmp(slot->bytes, piece, len) == 0)
        return di_idvec_append(out, slot->ids, slot->n_ids);
    size_t before = out->n;
    if (di_bpe_encode_piece(bpe, piece, len, out, scratch, false) != 0) return -1;
    size_t n_ids = out->n - before;
    if (n_ids <= DI_BPE_CACHE_IDS) {
        slot->hash = hash;
        slot->len = (uint8_t)len;
        slot->n_ids = (uint8_t)n_ids;
        memcpy(slot->bytes, piece, len);
        memcpy(slot->ids, out->v + before, n_ids * sizeof *out->v);
    }
    return 0;
}
