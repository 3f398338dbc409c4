/* prefix_cache.h — the states of finished requests, kept so that a later request whose prompt
 * starts with the same tokens skips recomputing them (prompt caching).
 *
 * Why whole states.  A V4.1 request's state at position n (runner.h: window rings, compressor
 * pending rows, Engram history, compressed KV and index keys) is a function of tokens[0, n) alone
 * and lives entirely in its pages, but it cannot be cut back to an earlier position: the window
 * ring and the compressor have already moved on.  So an entry is one exact state, reusable by a
 * request whose tokens extend the entry's tokens; the typical hit is the next turn of a
 * conversation, whose prompt is the previous prompt + answer + the new message.  The scheduler
 * also stores a copy of a long prompt's state just before its last token (the same prompt again,
 * or a next turn that re-renders the history differently after the assistant tag).  Entries are the
 * finished requests' own pages, handed over without a copy.  A hit copies the state into the
 * new request's pages when the pool has room, so the entry stays for the next request with the
 * same prefix; when memory is short the new request takes the entry's pages instead.  An entry
 * can also come from another engine: a PD decode worker imports the exact state a prefill worker
 * serialised (below), so its request continues as a cold run would.  With the KV block cache on,
 * only exact_state requests' states are kept (with kv_cache_replay approx a block restore's state
 * is a replay's approximation).
 *
 * Memory.  Entries hold pages of the engine's pool, at most max_pages of them (least recently
 * stored or used evicted first), and the scheduler evicts entries before it makes a request wait
 * or preempts one: the cache only ever uses memory nobody else needs. */
#ifndef DI_ENGINE_PREFIX_CACHE_H
#define DI_ENGINE_PREFIX_CACHE_H

#include "engine/pages.h"
#include "engine/runner.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int32_t *tokens;   /* the positions the state holds */
    int64_t n_tokens;
    DiPageTable pages; /* exactly pages_for_tokens(n_tokens) pages */
    uint64_t last_use;
} DiPrefixEntry;

typedef struct {
    DiPagePool *pool;
    const DiRunner *runner;
    size_t max_pages; /* 0: the cache is off */
    size_t pages;     /* held by entries now */
    DiPrefixEntry *entries;
    int n_entries, cap_entries;
    uint64_t clock;
    uint64_t stored, evicted, lookups, hits, hit_tokens;
} DiPrefixCache;

void di_prefix_cache_init(DiPrefixCache *c, DiPagePool *pool, const DiRunner *runner, size_t max_pages);
/* Return every entry's pages to the pool and free the entries. */
void di_prefix_cache_free(DiPrefixCache *c);

/* Keep the state of tokens[0, n_tokens) that `pages` holds.  The cache takes the pages it needs
 * (the table is left empty; pages beyond pages_for_tokens(n_tokens) go back to the pool), evicting
 * older entries to stay within max_pages.  An entry with the same tokens is replaced.  When the
 * cache is off, the state is empty or larger than max_pages, or memory for the entry runs out,
 * the pages simply go back to the pool.  Never fails. */
void di_prefix_cache_store(DiPrefixCache *c, const int32_t *tokens, int64_t n_tokens, DiPageTable *pages);

/* The entry with the most tokens that are a prefix of tokens[0, max_tokens): its index, or -1.
 * (The caller counts lookups; di_prefix_cache_take counts hits and hit tokens.) */
int di_prefix_cache_find(DiPrefixCache *c, const int32_t *tokens, int64_t max_tokens);

/* Evict least recently used entries other than *keep (-1: none) until the pool has free_wanted
 * free pages; *keep is updated as entries move.  False when the cache ran out of entries first. */
bool di_prefix_cache_make_room(DiPrefixCache *c, size_t free_wanted, int *keep);

/* Move entry `index`'s pages into `pages` (which must be empty) and drop the entry; returns the
 * number of positions the state holds. */
int64_t di_prefix_cache_take(DiPrefixCache *c, int index, DiPageTable *pages);

/* Copy entry `index`'s state into the first pages of `pages` (which must hold at least as many)
 * and keep the entry for later requests; returns the number of positions the state holds. */
int64_t di_prefix_cache_copy(DiPrefixCache *c, int index, DiPageTable *pages);

/* ---- serialised states (a PD prefill worker hands its state to a decode worker) ----------------
 * A state as bytes: a 40-byte header {"DIPS", version, page_bytes, n_tokens, n_pages}, the
 * tokens (int32, padded to 8 bytes), then the pages' bytes in page-table order.  Nothing else
 * is needed: the state of tokens[0, n) lives entirely in its pages (runner.h), the drafter's
 * context and the Engram history included; the reader checks page size and page count against
 * its own runner (the PD registration has already matched the model fingerprint). */

/* The size of a serialised state of n_tokens positions and the offset of its first page in it
 * (page p at *pages_at + p * page bytes): what a PD prefill streams into before the whole state
 * exists.  -1 with the cause. */
int di_prefix_state_size(const DiPrefixCache *c, int64_t n_tokens, size_t *total, size_t *pages_at);

/* Serialise the state of tokens[0, n_tokens) held by `pages` (at least pages_for_tokens(n_tokens)
 * of them) into a fresh heap buffer.  -1 with the cause. */
int di_prefix_state_write(const DiPrefixCache *c, const int32_t *tokens, int64_t n_tokens, uint8_t *const *pages,
                          size_t n_pages, void **blob, size_t *len);
/* Keep a serialised state as an entry (pages from the pool, evicting older entries; never a
 * running request's pages).  -1 with the cause: a malformed or foreign state, the cache off,
 * or no room for it; *n_tokens is the positions it holds. */
int di_prefix_cache_import(DiPrefixCache *c, const void *blob, size_t len, int64_t *n_tokens);

#endif
