/* block_key.h — the names of cached KV blocks (serving.md §4.3(a)).
 *
 * A prompt is cut into blocks of B tokens (B a multiple of 128, so no CSA/HCA compressor group
 * straddles two blocks); only full blocks are named.  Block i's key is a 128-bit XXH3 hash of
 * (key of block i-1, model fingerprint, tenant salt when i == 0, the block's token ids, extra
 * bytes such as image hashes).  Chaining makes a key name its whole prefix, so equal keys mean
 * equal prefixes and a longest-prefix lookup is a walk along the chain.  The salt enters only
 * block 0, yet through the chain it changes every key: two tenants with different salts never
 * share a block.  The fingerprint keeps models (or quantisations) from sharing one another's KV. */
#ifndef DI_ENGINE_KVCACHE_BLOCK_KEY_H
#define DI_ENGINE_KVCACHE_BLOCK_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t lo, hi;
} DiKvKey;

#define DI_KV_SALT_MAX 256 /* bytes of tenant salt */

typedef struct {
    DiKvKey fingerprint; /* di_kv_fingerprint of the model's identity */
    int block_tokens;    /* B: > 0, a multiple of 128 */
    uint8_t salt[DI_KV_SALT_MAX];
    size_t salt_len; /* 0: no tenant salt */
} DiKvKeyCtx;

/* The fingerprint of a model identity (any bytes: checkpoint hash, dtype, layout version). */
DiKvKey di_kv_fingerprint(const void *identity, size_t len);

/* Fill a context; errors name a bad block size or an oversized salt. */
int di_kv_key_ctx_init(DiKvKeyCtx *ctx, DiKvKey fingerprint, int block_tokens, const void *salt, size_t salt_len);

/* Key of one block: parent is NULL for block 0 (then the salt enters).  extra may be NULL when
 * extra_len is 0.  n_tokens must equal ctx->block_tokens (only full blocks are named). */
int di_kv_key_block(const DiKvKeyCtx *ctx, const DiKvKey *parent, const int32_t *tokens, int n_tokens,
                    const void *extra, size_t extra_len, DiKvKey *out);

/* Keys of every full block of tokens[0, n_tokens), at most max_keys of them: the count written
 * (n_tokens / B, capped), or -1 on bad arguments. */
int di_kv_keys_for_tokens(const DiKvKeyCtx *ctx, const int32_t *tokens, int64_t n_tokens, DiKvKey *keys,
                          int max_keys);

static inline bool di_kv_key_eq(DiKvKey a, DiKvKey b) { return a.lo == b.lo && a.hi == b.hi; }

/* 32 lowercase hex digits + NUL (logs, file names). */
void di_kv_key_hex(DiKvKey k, char out[33]);

#endif
