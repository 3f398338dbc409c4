/* bpe.h — byte-level BPE merging of one pre-tokenized piece (recipe.md §1.2 steps 2-4).
 *
 * A piece starts as one symbol per byte (every byte is a single-token vocab entry in a
 * GPT-2 byte-level vocabulary); then the adjacent pair with the lowest merge rank is merged,
 * the leftmost on ties, until no adjacent pair has a rank.  Merges are stored by id pair, so
 * the byte->char mapping of tokenizer.json never appears at encode time.
 *
 * Short pieces (nearly all) use a flat array and a linear scan per merge; long ones (a 100 kB
 * run of one character is legal input) use a heap and a linked list, O(n log n), exactly like
 * HF tokenizers' Word::merge_all.  Both give the same result (tested).  A small direct-mapped
 * cache of piece -> ids, owned by one encoding call, skips repeated pieces. */
#ifndef DI_RECIPE_BPE_H
#define DI_RECIPE_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable array of token ids. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} DiIdVec;

int di_idvec_push(DiIdVec *vec, int32_t id);
int di_idvec_append(DiIdVec *vec, const int32_t *ids, size_t n);
void di_idvec_free(DiIdVec *vec);

/* One slot of the merge table: 16 bytes, so a probe touches one cache line. */
typedef struct {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    uint32_t rank;
    int32_t result;
} DiMergeSlot;

typedef struct {
    int32_t byte_id[256]; /* the single-byte token of each byte value */
    DiMergeSlot *slots;   /* open addressing, linear probing */
    size_t mask;          /* capacity - 1 */
    size_t n_merges;
} DiBpe;

/* Room for n_merges merges (load factor <= 1/2). */
int di_bpe_init(DiBpe *bpe, size_t n_merges);
void di_bpe_free(DiBpe *bpe);
/* Add merge (left, right) -> result with the given rank; a repeated pair takes the later
 * rank, as HF tokenizers' merge map does. */
int di_bpe_add_merge(DiBpe *bpe, int32_t left, int32_t right, int32_t result, uint32_t rank);
/* The rank and result of (left, right); false when the pair does not merge. */
bool di_bpe_lookup(const DiBpe *bpe, int32_t left, int32_t right, uint32_t *rank, int32_t *result);

/* Per-call working memory (reused across pieces; free with di_bpe_scratch_free). */
typedef struct {
    void *buf;
    size_t cap;
} DiBpeScratch;
void di_bpe_scratch_free(DiBpeScratch *scratch);

/* Append the ids of `piece` to `out`.  Pieces of more than DI_BPE_FLAT_MAX bytes take the
 * heap path; force_heap takes it for every piece (tests). */
#define DI_BPE_FLAT_MAX 64
int di_bpe_encode_piece(const DiBpe *bpe, const uint8_t *piece, size_t len, DiIdVec *out,
                        DiBpeScratch *scratch, bool force_heap);

/* Direct-mapped piece cache: pieces of up to DI_BPE_CACHE_BYTES bytes whose result has up to
 * DI_BPE_CACHE_IDS ids. */
#define DI_BPE_CACHE_SLOTS 4096
#define DI_BPE_CACHE_BYTES 24
#define DI_BPE_CACHE_IDS 6
typedef struct {
    uint64_t hash;
    uint8_t len, n_ids;
    uint8_t bytes[DI_BPE_CACHE_BYTES];
    int32_t ids[DI_BPE_CACHE_IDS];
} DiBpeCacheSlot;
typedef struct {
    DiBpeCacheSlot *slots; /* DI_BPE_CACHE_SLOTS entries */
} DiBpeCache;

int di_bpe_cache_init(DiBpeCache *cache);
void di_bpe_cache_free(DiBpeCache *cache);
/* di_bpe_encode_piece through the cache (cache may be NULL). */
int di_bpe_encode_cached(const DiBpe *bpe, const uint8_t *piece, size_t len, DiIdVec *out,
                         DiBpeScratch *scratch, DiBpeCache *cache);

#endif
