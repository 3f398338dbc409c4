/* test_kv_cache.c — the KV cache's naming and RAM tier (serving.md §4.4): chained block keys
 * (determinism, prefix property, salt and fingerprint isolation, against a one-shot serialisation
 * of the documented format), the block index, L2 LRU order, references and pins, the keys L2
 * reports (in use first, then hottest first, bounded), and
 * longest-prefix lookup ("A+B then A+C then A+D", the DeepSeek guide's example). */
#include "test.h"

#include "base/error.h"
#include "engine/kvcache/block_key.h"
#include "engine/kvcache/key_map.h"
#include "engine/kvcache/kv_cache.h"
#include "engine/kvcache/ram_pool.h"
#include "engine/kvcache/segment_store.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

enum { B = 256 };

static void fill_tokens(int32_t *t, int n, int32_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((seed * 7919 + i * 104729) % 129280);
}

static DiKvKeyCtx ctx_with(const char *salt, const char *model) {
    DiKvKeyCtx c;
    if (di_kv_key_ctx_init(&c, di_kv_fingerprint(model, strlen(model)), B, salt, salt ? strlen(salt) : 0) != 0)
        abort();
    return c;
}

/* The documented serialisation built in one buffer and hashed in one call. */
static DiKvKey reference_key(const DiKvKeyCtx *c, const DiKvKey *parent, const int32_t *tok) {
    uint8_t buf[48 + DI_KV_SALT_MAX + 4 * B + 8], *p = buf;
    uint64_t head[6] = {parent ? 1u : 0u, parent ? parent->lo : 0, parent ? parent->hi : 0, c->fingerprint.lo,
                        c->fingerprint.hi, parent ? 0 : c->salt_len};
    for (int i = 0; i < 6; i++)
        for (int b = 0; b < 8; b++) *p++ = (uint8_t)(head[i] >> (8 * b));
    if (!parent) memcpy(p, c->salt, c->salt_len), p += c->salt_len;
    for (int i = 0; i < B; i++)
        for (int b = 0; b < 4; b++) *p++ = (uint8_t)((uint32_t)tok[i] >> (8 * b));
    for (int b = 0; b < 8; b++) *p++ = 0; /* extra_len = 0 */
    XXH128_hash_t h = XXH3_128bits(buf, (size_t)(p - buf));
    return (DiKvKey){h.low64, h.high64};
}

TEST(block_keys_follow_the_format_and_chain) {
    int32_t tok[3 * B + 100];
    fill_tokens(tok, 3 * B + 100, 1);
    DiKvKeyCtx c = ctx_with("tenant-a", "v41-flash");
    DiKvKey k[8], again[8];
    CHECK_EQ_INT(di_kv_keys_for_tokens(&c, tok, 3 * B + 100, k, 8), 3); /* the partial block is not named */
    CHECK_EQ_INT(di_kv_keys_for_tokens(&c, tok, 3 * B + 100, again, 8), 3);
    for (int i = 0; i < 3; i++) {
        CHECK(di_kv_key_eq(k[i], again[i]));
        CHECK(di_kv_key_eq(k[i], reference_key(&c, i ? &k[i - 1] : NULL, tok + i * B)));
    }
    CHECK(!di_kv_key_eq(k[0], k[1]) && !di_kv_key_eq(k[1], k[2]));
    /* a block's key names its prefix: the same block after a different block 0 differs */
    int32_t other[2 * B];
    fill_tokens(other, B, 2);
    memcpy(other + B, tok + B, B * sizeof *tok);
    DiKvKey o[2];
    CHECK_EQ_INT(di_kv_keys_for_tokens(&c, other, 2 * B, o, 2), 2);
    CHECK(!di_kv_key_eq(o[1], k[1]));
    CHECK_EQ_INT(di_kv_keys_for_tokens(&c, tok, 3 * B, k, 2), 2); /* max_keys caps */
    /* extra bytes (an image hash) change the key */
    DiKvKey e;
    CHECK_EQ_INT(di_kv_key_block(&c, NULL, tok, B, "img", 3, &e), 0);
    CHECK(!di_kv_key_eq(e, k[0]));
}

TEST(salt_and_fingerprint_isolate_every_block) {
    int32_t tok[4 * B];
    fill_tokens(tok, 4 * B, 3);
    DiKvKeyCtx a = ctx_with("tenant-a", "m"), b = ctx_with("tenant-b", "m"), none = ctx_with(NULL, "m"),
               other_model = ctx_with("tenant-a", "m2");
    DiKvKey ka[4], kb[4], kn[4], km[4];
    di_kv_keys_for_tokens(&a, tok, 4 * B, ka, 4);
    di_kv_keys_for_tokens(&b, tok, 4 * B, kb, 4);
    di_kv_keys_for_tokens(&none, tok, 4 * B, kn, 4);
    di_kv_keys_for_tokens(&other_model, tok, 4 * B, km, 4);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            CHECK(!di_kv_key_eq(ka[i], kb[j]));
            CHECK(!di_kv_key_eq(ka[i], kn[j]));
            CHECK(!di_kv_key_eq(ka[i], km[j]));
        }
    /* the salt enters block 0 only: given the same parent, block 1 does not depend on it */
    DiKvKey x, y;
    di_kv_key_block(&a, &ka[0], tok + B, B, NULL, 0, &x);
    di_kv_key_block(&b, &ka[0], tok + B, B, NULL, 0, &y);
    CHECK(di_kv_key_eq(x, y) && di_kv_key_eq(x, ka[1]));
}

TEST(block_key_arguments_are_checked) {
    DiKvKeyCtx c;
    DiKvKey fp = di_kv_fingerprint("m", 1), k;
    CHECK_EQ_INT(di_kv_key_ctx_init(&c, fp, 100, NULL, 0), -1);
    CHECK(strstr(di_error_message(), "multiple of 128") != NULL);
    CHECK_EQ_INT(di_kv_key_ctx_init(&c, fp, 0, NULL, 0), -1);
    char big[DI_KV_SALT_MAX + 1] = {0};
    CHECK_EQ_INT(di_kv_key_ctx_init(&c, fp, 128, big, sizeof big), -1);
    CHECK(strstr(di_error_message(), "salt") != NULL);
    CHECK_EQ_INT(di_kv_key_ctx_init(&c, fp, 128, NULL, 3), -1);
    CHECK_EQ_INT(di_kv_key_ctx_init(&c, fp, 128, NULL, 0), 0);
    int32_t tok[256] = {0};
    CHECK_EQ_INT(di_kv_key_block(&c, NULL, tok, 256, NULL, 0, &k), -1); /* not a full block of 128 */
    CHECK_EQ_INT(di_kv_key_block(&c, NULL, tok, 128, NULL, 5, &k), -1);
    CHECK_EQ_INT(di_kv_keys_for_tokens(&c, NULL, 10, &k, 1), -1);
    char hex[33];
    di_kv_key_hex((DiKvKey){0x1, 0xabcdef}, hex);
    CHECK_STR(hex, "0000000000abcdef0000000000000001");
}

TEST(crc32c_matches_the_standard_check_value) {
    CHECK_EQ_INT(di_kv_crc32c(0, "123456789", 9), 0xE3069283u); /* RFC 3720 / Castagnoli check */
    CHECK_EQ_INT(di_kv_crc32c(di_kv_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    CHECK_EQ_INT(di_kv_crc32c(0, "", 0), 0);
}

TEST(block_index_agrees_with_a_plain_array) {
    DiKvMap m;
    CHECK_EQ_INT(di_kv_map_init(&m, 4), 0);
    enum { N = 20000 };
    static DiKvKey keys[N];
    for (int i = 0; i < N; i++) {
        keys[i] = (DiKvKey){((uint64_t)test_rand32() << 32 | test_rand32()) & 0xfff0ffffffffffffull, (uint64_t)i};
        CHECK_EQ_INT(di_kv_map_put(&m, keys[i], (uint32_t)i), 0);
    }
    for (int i = 0; i < N; i += 2) CHECK_EQ_INT(di_kv_map_remove(&m, keys[i]), 1);
    CHECK_EQ_INT(di_kv_map_remove(&m, keys[0]), 0);
    CHECK_EQ_INT(m.size, N / 2);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint32_t v = 0;
        int found = di_kv_map_get(&m, keys[i], &v);
        if (found != (i % 2) || (found && v != (uint32_t)i)) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    di_kv_map_free(&m);
}

static DiKvKey K(uint64_t i) { return (DiKvKey){i * 0x9E3779B97F4A7C15ull, i}; }

TEST(ram_pool_evicts_least_recently_used_unreferenced_blocks) {
    DiKvRamPool p;
    CHECK_EQ_INT(di_kv_ram_init(&p, 300), 0);
    char buf[100] = {0};
    for (int i = 1; i <= 3; i++) CHECK_EQ_INT(di_kv_ram_put(&p, K(i), buf, 100), 1);
    di_kv_ram_touch(&p, K(1));                       /* order, coldest first: 2 3 1 */
    CHECK_EQ_INT(di_kv_ram_put(&p, K(4), buf, 100), 1); /* evicts 2 */
    CHECK(!di_kv_ram_contains(&p, K(2)) && di_kv_ram_contains(&p, K(1)));
    const void *d;
    size_t n;
    CHECK_EQ_INT(di_kv_ram_acquire(&p, K(3), &d, &n), 1); /* referenced: never evicted */
    CHECK_EQ_INT(n, 100);
    CHECK_EQ_INT(di_kv_ram_pin(&p, K(1)), 0);
    CHECK_EQ_INT(di_kv_ram_put(&p, K(5), buf, 100), 1); /* only 4 is evictable */
    CHECK(!di_kv_ram_contains(&p, K(4)) && di_kv_ram_contains(&p, K(3)) && di_kv_ram_contains(&p, K(1)));
    CHECK_EQ_INT(di_kv_ram_acquire(&p, K(5), NULL, NULL), 1);
    CHECK_EQ_INT(di_kv_ram_put(&p, K(6), buf, 100), 0); /* everything is referenced or pinned */
    CHECK_EQ_INT(p.bytes, 300);
    CHECK_EQ_INT(di_kv_ram_put(&p, K(7), buf, 301), 0); /* larger than the pool */
    CHECK_EQ_INT(di_kv_ram_put(&p, K(8), buf, 0), -1); /* empty blocks would escape the byte cap */
    CHECK(strstr(di_error_message(), "empty block") != NULL);
    CHECK_EQ_INT(di_kv_ram_release(&p, K(5)), 0);
    CHECK_EQ_INT(di_kv_ram_release(&p, K(5)), -1); /* not referenced any more */
    CHECK_EQ_INT(di_kv_ram_unpin(&p, K(1)), 0);
    CHECK_EQ_INT(di_kv_ram_unpin(&p, K(1)), -1);
    CHECK_EQ_INT(di_kv_ram_pin(&p, K(99)), -1);
    CHECK_EQ_INT(p.evictions, 2);
    di_kv_ram_free(&p);
    CHECK_EQ_INT(di_kv_ram_init(&p, 0), -1);
}

TEST(ram_pool_drop_removes_only_unused_blocks) {
    DiKvRamPool p;
    CHECK_EQ_INT(di_kv_ram_init(&p, 300), 0);
    char buf[100] = {0};
    for (int i = 1; i <= 3; i++) CHECK_EQ_INT(di_kv_ram_put(&p, K(i), buf, 100), 1);
    CHECK_EQ_INT(di_kv_ram_pin(&p, K(1)), 0);
    CHECK_EQ_INT(di_kv_ram_acquire(&p, K(2), NULL, NULL), 1);
    CHECK_EQ_INT(di_kv_ram_drop(&p, K(1)), 0); /* pinned */
    CHECK_EQ_INT(di_kv_ram_drop(&p, K(2)), 0); /* referenced */
    CHECK_EQ_INT(di_kv_ram_drop(&p, K(3)), 1);
    CHECK_EQ_INT(di_kv_ram_drop(&p, K(3)), 0); /* absent */
    CHECK(!di_kv_ram_contains(&p, K(3)) && di_kv_ram_contains(&p, K(1)) && di_kv_ram_contains(&p, K(2)));
    CHECK_EQ_INT(p.bytes, 200);
    CHECK_EQ_INT(p.evictions, 0);
    CHECK_EQ_INT(di_kv_ram_put(&p, K(4), buf, 100), 1); /* the dropped block's room is free */
    CHECK_EQ_INT(di_kv_ram_unpin(&p, K(1)), 0);
    CHECK_EQ_INT(di_kv_ram_drop(&p, K(1)), 1);
    di_kv_ram_free(&p);
}

TEST(ram_pool_reports_its_keys_in_use_then_hottest_first) {
    DiKvRamPool p;
    CHECK_EQ_INT(di_kv_ram_init(&p, 1000), 0);
    uint8_t buf[100] = {0};
    for (int i = 1; i <= 4; i++) CHECK_EQ_INT(di_kv_ram_put(&p, K(i), buf, 100), 1);
    di_kv_ram_touch(&p, K(2));                             /* hottest first: 2 4 3 1 */
    CHECK_EQ_INT(di_kv_ram_acquire(&p, K(3), NULL, NULL), 1); /* in use: reported first */
    DiKvKey out[8];
    CHECK_EQ_INT(di_kv_ram_keys(&p, out, 8), 4);
    CHECK(di_kv_key_eq(out[0], K(3)) && di_kv_key_eq(out[1], K(2)) && di_kv_key_eq(out[2], K(4)) &&
          di_kv_key_eq(out[3], K(1)));
    CHECK_EQ_INT(di_kv_ram_keys(&p, out, 2), 2); /* bounded */
    CHECK(di_kv_key_eq(out[1], K(2)));
    CHECK_EQ_INT(di_kv_ram_drop(&p, K(4)), 1); /* a dropped block is not reported */
    CHECK_EQ_INT(di_kv_ram_keys(&p, out, 8), 3);
    CHECK_EQ_INT(di_kv_ram_keys(&p, NULL, 1), -1);
    CHECK_EQ_INT(di_kv_ram_keys(&p, out, -1), -1);
    di_kv_ram_free(&p);
}

TEST(ram_pool_release_chain_evicts_deepest_blocks_first) {
    DiKvRamPool p;
    CHECK_EQ_INT(di_kv_ram_init(&p, 400), 0);
    char buf[100] = {0};
    DiKvKey chain[3] = {K(10), K(11), K(12)};
    for (int i = 0; i < 3; i++) {
        di_kv_ram_put(&p, chain[i], buf, 100);
        di_kv_ram_acquire(&p, chain[i], NULL, NULL);
    }
    CHECK_EQ_INT(di_kv_ram_put(&p, K(20), buf, 100), 1);
    CHECK_EQ_INT(di_kv_ram_release_chain(&p, chain, 3), 0); /* order now: 20, 12, 11, 10 */
    di_kv_ram_put(&p, K(21), buf, 100);
    CHECK(!di_kv_ram_contains(&p, K(20)));
    di_kv_ram_put(&p, K(22), buf, 100);
    CHECK(!di_kv_ram_contains(&p, K(12)) && di_kv_ram_contains(&p, K(11)) && di_kv_ram_contains(&p, K(10)));
    di_kv_ram_put(&p, K(23), buf, 100);
    CHECK(!di_kv_ram_contains(&p, K(11)) && di_kv_ram_contains(&p, K(10)));
    di_kv_ram_free(&p);
}

/* Store every block of tokens in the cache, payload = the key's bytes. */
static void store_all(DiKvCache *c, const DiKvKeyCtx *ctx, const int32_t *tok, int n_tok) {
    DiKvKey k[16];
    int n = di_kv_keys_for_tokens(ctx, tok, n_tok, k, 16);
    for (int i = 0; i < n; i++) di_kv_cache_store(c, k[i], &k[i], sizeof k[i]);
}

static int hit_blocks(DiKvCache *c, const DiKvKeyCtx *ctx, const int32_t *tok, int n_tok) {
    DiKvKey k[16];
    int n = di_kv_keys_for_tokens(ctx, tok, n_tok, k, 16);
    return di_kv_cache_lookup(c, k, n, NULL);
}

TEST(longest_prefix_lookup_a_b_then_a_c_then_a_d) {
    DiKvCacheOptions o = {.ram_bytes = 1 << 20, .block_tokens = B};
    DiKvCache *c = di_kv_cache_open(&o);
    CHECK(c != NULL);
    if (!c) return;
    DiKvKeyCtx ctx = ctx_with("t", "m"), other = ctx_with("u", "m");
    int32_t ab[3 * B], ac[3 * B], ad[3 * B]; /* A = 2 blocks, then B, C or D */
    fill_tokens(ab, 3 * B, 5);
    memcpy(ac, ab, sizeof ab), memcpy(ad, ab, sizeof ab);
    fill_tokens(ac + 2 * B, B, 6);
    fill_tokens(ad + 2 * B, B, 7);
    CHECK_EQ_INT(hit_blocks(c, &ctx, ab, 3 * B), 0);
    store_all(c, &ctx, ab, 3 * B);
    CHECK_EQ_INT(hit_blocks(c, &ctx, ac, 3 * B), 2); /* A hits, C does not */
    store_all(c, &ctx, ac, 3 * B);
    CHECK_EQ_INT(hit_blocks(c, &ctx, ad, 3 * B), 2);
    CHECK_EQ_INT(hit_blocks(c, &ctx, ab, 3 * B), 3);
    CHECK_EQ_INT(hit_blocks(c, &ctx, ac, 3 * B + 100), 3);
    CHECK_EQ_INT(hit_blocks(c, &other, ab, 3 * B), 0); /* another tenant's salt */
    DiKvCacheStats st;
    di_kv_cache_stats(c, &st);
    CHECK_EQ_INT(st.lookups, 6);
    CHECK_EQ_INT(st.hit_blocks[0], 2 + 2 + 3 + 3);
    CHECK_EQ_INT(st.hit_tokens[0], 10 * B);
    CHECK_EQ_INT(st.hit_blocks[1], 0);
    CHECK_EQ_INT(st.ram_blocks, 4); /* A (2 blocks), B, C */
    /* a read returns the stored bytes; a short buffer is an error naming both sizes */
    DiKvKey k[3], got;
    size_t len;
    di_kv_keys_for_tokens(&ctx, ad, 3 * B, k, 3);
    CHECK_EQ_INT(di_kv_cache_read(c, k[1], &got, sizeof got, &len), 1);
    CHECK(len == sizeof got && di_kv_key_eq(got, k[1]));
    CHECK_EQ_INT(di_kv_cache_read(c, k[2], &got, sizeof got, &len), 0);
    CHECK_EQ_INT(di_kv_cache_read(c, k[1], &got, 3, &len), -1);
    CHECK(strstr(di_error_message(), "16 bytes") != NULL);
    di_kv_cache_close(c);
    o.block_tokens = 100;
    CHECK(di_kv_cache_open(&o) == NULL);
    o.block_tokens = B, o.ram_bytes = 0;
    CHECK(di_kv_cache_open(&o) == NULL);
    CHECK(strstr(di_error_message(), "ram_bytes") != NULL);
}

int main(void) {
    RUN_TEST(block_keys_follow_the_format_and_chain);
    RUN_TEST(salt_and_fingerprint_isolate_every_block);
    RUN_TEST(block_key_arguments_are_checked);
    RUN_TEST(crc32c_matches_the_standard_check_value);
    RUN_TEST(block_index_agrees_with_a_plain_array);
    RUN_TEST(ram_pool_evicts_least_recently_used_unreferenced_blocks);
    RUN_TEST(ram_pool_drop_removes_only_unused_blocks);
    RUN_TEST(ram_pool_reports_its_keys_in_use_then_hottest_first);
    RUN_TEST(ram_pool_release_chain_evicts_deepest_blocks_first);
    RUN_TEST(longest_prefix_lookup_a_b_then_a_c_then_a_d);
    return TEST_SUMMARY();
}
