/* block_key.c — chained XXH3-128 block keys (see block_key.h).
 *
 * Every field enters the hash with its length or a tag in front, so no two different
 * (parent, salt, tokens, extra) tuples serialise to the same byte stream.  Token ids enter as
 * little-endian int32, so keys are the same on every host (they name files shared by a cluster). */
#include "engine/kvcache/block_key.h"

#include "base/error.h"

#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

DiKvKey di_kv_fingerprint(const void *identity, size_t len) {
    XXH128_hash_t h = XXH3_128bits(len ? identity : "", len);
    return (DiKvKey){h.low64, h.high64};
}

int di_kv_key_ctx_init(DiKvKeyCtx *ctx, DiKvKey fingerprint, int block_tokens, const void *salt, size_t salt_len) {
    if (!ctx) return di_errorf("kv block key: no context");
    if (block_tokens <= 0 || block_tokens % 128 != 0)
        return di_errorf("kv block key: block_tokens must be a positive multiple of 128, got %d", block_tokens);
    if (salt_len > DI_KV_SALT_MAX)
        return di_errorf("kv block key: salt of %zu bytes exceeds the %d-byte limit", salt_len, DI_KV_SALT_MAX);
    if (salt_len > 0 && !salt) return di_errorf("kv block key: salt_len %zu with no salt", salt_len);
    memset(ctx, 0, sizeof *ctx);
    ctx->fingerprint = fingerprint;
    ctx->block_tokens = block_tokens;
    if (salt_len) memcpy(ctx->salt, salt, salt_len);
    ctx->salt_len = salt_len;
    return 0;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int di_kv_key_block(const DiKvKeyCtx *ctx, const DiKvKey *parent, const int32_t *tokens, int n_tokens,
                    const void *extra, size_t extra_len, DiKvKey *out) {
    if (!ctx || !out || !tokens) return di_errorf("kv block key: missing context, tokens or output");
    if (n_tokens != ctx->block_tokens)
        return di_errorf("kv block key: a block has %d tokens, got %d", ctx->block_tokens, n_tokens);
    if (extra_len > 0 && !extra) return di_errorf("kv block key: extra_len %zu with no extra bytes", extra_len);
    XXH3_state_t st;
    if (XXH3_128bits_reset(&st) != XXH_OK) return di_errorf("kv block key: XXH3 reset failed");
    uint8_t head[8 + 32 + 8];
    /* tag 1 = chained block, 0 = block 0 (then salt follows) */
    put_u64(head, parent ? 1 : 0);
    put_u64(head + 8, parent ? parent->lo : 0);
    put_u64(head + 16, parent ? parent->hi : 0);
    put_u64(head + 24, ctx->fingerprint.lo);
    put_u64(head + 32, ctx->fingerprint.hi);
    put_u64(head + 40, parent ? 0 : ctx->salt_len);
    XXH3_128bits_update(&st, head, sizeof head);
    if (!parent && ctx->salt_len) XXH3_128bits_update(&st, ctx->salt, ctx->salt_len);
    uint8_t buf[4 * 128];
    for (int i = 0; i < n_tokens; i += 128) { /* n_tokens is a multiple of 128 */
        for (int j = 0; j < 128; j++) {
            uint32_t t = (uint32_t)tokens[i + j];
            buf[4 * j] = (uint8_t)t, buf[4 * j + 1] = (uint8_t)(t >> 8);
            buf[4 * j + 2] = (uint8_t)(t >> 16), buf[4 * j + 3] = (uint8_t)(t >> 24);
        }
        XXH3_128bits_update(&st, buf, sizeof buf);
    }
    uint8_t len8[8];
    put_u64(len8, extra_len);
    XXH3_128bits_update(&st, len8, sizeof len8);
    if (extra_len) XXH3_128bits_update(&st, extra, extra_len);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    *out = (DiKvKey){h.low64, h.high64};
    return 0;
}

int di_kv_keys_for_tokens(const DiKvKeyCtx *ctx, const int32_t *tokens, int64_t n_tokens, DiKvKey *keys,
                          int max_keys) {
    if (!ctx || (n_tokens > 0 && !tokens) || n_tokens < 0 || max_keys < 0 || (max_keys > 0 && !keys))
        return di_errorf("kv block keys: bad arguments");
    int64_t full = n_tokens / ctx->block_tokens;
    int n = full < max_keys ? (int)full : max_keys;
    for (int i = 0; i < n; i++)
        if (di_kv_key_block(ctx, i ? &keys[i - 1] : NULL, tokens + (int64_t)i * ctx->block_tokens,
                            ctx->block_tokens, NULL, 0, &keys[i]) != 0)
            return -1;
    return n;
}

void di_kv_key_hex(DiKvKey k, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}
