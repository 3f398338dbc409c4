/* test_prefix_cache.c — prompt caching (engine/prefix_cache.h): the cache's own rules (longest
 * extended entry, at least one position left to compute, replacement, LRU eviction within its
 * budget and for the pool), and the engine over the mock runner: the next turn of a
 * conversation starts from the previous turn's cached state, a long prompt repeated (or diverging
 * only at its last token) from the copy taken before its last token, and each generates exactly
 * what the independent reference generates from scratch, in sync and async mode, with freed pages
 * poisoned (so reading a state that was never written shows); cached states give way to new
 * requests instead of making them wait or preempting them. */
#include "test.h"
#include "test_engine_helpers.h"

#include "base/error.h"
#include "engine/prefix_cache.h"
#include "engine/runner_mock.h"

/* ---- the cache alone ------------------------------------------------------------------------ */

typedef struct {
    DiRunner *runner;
    DiPagePool *pool;
    DiPrefixCache cache;
} Fixture;

static Fixture fixture(size_t pool_pages, size_t max_pages) {
    Fixture f;
    f.runner = di_mock_runner_create(MOCK_VOCAB, MOCK_SEED);
    f.pool = di_page_pool_create(f.runner->page_bytes, pool_pages, false);
    di_prefix_cache_init(&f.cache, f.pool, f.runner, max_pages);
    return f;
}

static void fixture_free(Fixture *f) {
    di_prefix_cache_free(&f->cache);
    CHECK_EQ_INT(di_page_pool_used(f->pool), 0);
    di_page_pool_destroy(f->pool);
    f->runner->ops->destroy(f->runner);
}

static size_t pages_for(const Fixture *f, int64_t n) { return f->runner->ops->pages_for_tokens(f->runner, n); }

/* A state of n positions in fresh pages (as a finished request would hand over), stored. */
static void store(Fixture *f, const int32_t *tokens, int64_t n, size_t extra_pages) {
    DiPageTable t = {0};
    CHECK_EQ_INT(di_page_table_reserve(f->pool, &t, pages_for(f, n) + extra_pages), 0);
    di_prefix_cache_store(&f->cache, tokens, n, &t);
    CHECK_EQ_INT(t.n, 0); /* taken or returned, never left with the caller */
    di_page_table_free(&t);
}

static int32_t conv[400];

static void fill_conv(void) {
    for (int i = 0; i < 400; i++) conv[i] = (int32_t)((i * 37 + 11) % MOCK_VOCAB);
}

TEST(the_longest_entry_the_tokens_extend_is_found_and_taken_whole) {
    fill_conv();
    Fixture f = fixture(64, 64);
    store(&f, conv, 10, 2); /* extra pages beyond the state are given back */
    store(&f, conv, 40, 0);
    int32_t other[40];
    memcpy(other, conv, sizeof other);
    other[5] ^= 1;
    store(&f, other, 40, 0);
    CHECK_EQ_INT(f.cache.n_entries, 3);
    CHECK_EQ_INT(f.cache.pages, 2 * pages_for(&f, 40) + pages_for(&f, 10));
    CHECK_EQ_INT(di_page_pool_used(f.pool), f.cache.pages);

    int hit = di_prefix_cache_find(&f.cache, conv, 100);
    CHECK(hit >= 0 && f.cache.entries[hit].n_tokens == 40 && f.cache.entries[hit].tokens[5] == conv[5]);
    /* max_tokens bounds the entry: a request must compute at least its last position */
    hit = di_prefix_cache_find(&f.cache, conv, 39);
    CHECK(hit >= 0 && f.cache.entries[hit].n_tokens == 10);
    CHECK_EQ_INT(di_prefix_cache_find(&f.cache, conv, 9), -1);
    int32_t stranger[50] = {7};
    CHECK_EQ_INT(di_prefix_cache_find(&f.cache, stranger, 50), -1);

    hit = di_prefix_cache_find(&f.cache, conv, 100);
    DiPageTable t = {0};
    CHECK_EQ_INT(di_prefix_cache_take(&f.cache, hit, &t), 40);
    CHECK_EQ_INT(t.n, pages_for(&f, 40));
    CHECK_EQ_INT(f.cache.n_entries, 2);
    CHECK_EQ_INT(f.cache.hits, 1);
    CHECK_EQ_INT(f.cache.hit_tokens, 40);
    di_page_table_release(f.pool, &t);
    di_page_table_free(&t);
    fixture_free(&f);
}

TEST(the_same_tokens_replace_an_entry_and_the_budget_evicts_least_recent_first) {
    fill_conv();
    size_t per = 0;
    {
        Fixture probe = fixture(4, 0);
        per = pages_for(&probe, 100);
        fixture_free(&probe);
    }
    Fixture f = fixture(64, 2 * per); /* room for two 100-position states */
    store(&f, conv, 100, 0);
    store(&f, conv, 100, 0);
    CHECK_EQ_INT(f.cache.n_entries, 1);
    int32_t b[100], c[100];
    for (int i = 0; i < 100; i++) b[i] = (conv[i] + 1) % MOCK_VOCAB, c[i] = (conv[i] + 2) % MOCK_VOCAB;
    store(&f, b, 100, 0);
    CHECK(di_prefix_cache_find(&f.cache, conv, 200) >= 0); /* conv is now the more recently used */
    store(&f, c, 100, 0);                                  /* over budget: b goes */
    CHECK_EQ_INT(f.cache.n_entries, 2);
    CHECK(di_prefix_cache_find(&f.cache, b, 200) < 0);
    CHECK(di_prefix_cache_find(&f.cache, conv, 200) >= 0);
    CHECK(di_prefix_cache_find(&f.cache, c, 200) >= 0);
    CHECK_EQ_INT(f.cache.evicted, 1);
    CHECK(f.cache.pages <= f.cache.max_pages);
    /* a state larger than the whole budget is not kept (and evicts nothing) */
    CHECK(pages_for(&f, 400) > f.cache.max_pages);
    store(&f, conv, 400, 0);
    int longest = di_prefix_cache_find(&f.cache, conv, 400);
    CHECK(longest >= 0 && f.cache.entries[longest].n_tokens == 100);
    CHECK_EQ_INT(f.cache.n_entries, 2);
    fixture_free(&f);
}

TEST(making_room_for_the_pool_spares_the_entry_being_used) {
    fill_conv();
    Fixture f = fixture(16, 16);
    size_t per = pages_for(&f, 30);
    int32_t seqs[4][30];
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 30; i++) seqs[s][i] = (conv[i] + s) % MOCK_VOCAB;
    int stored = 0;
    for (int s = 0; s < 4 && di_page_pool_free(f.pool) >= per; s++, stored++) store(&f, seqs[s], 30, 0);
    CHECK(stored >= 2);
    int keep = di_prefix_cache_find(&f.cache, seqs[0], 30); /* the oldest entry */
    CHECK(keep >= 0);
    CHECK(di_prefix_cache_make_room(&f.cache, di_page_pool_total(f.pool) - per, &keep));
    CHECK_EQ_INT(f.cache.n_entries, 1);
    CHECK_EQ_INT(keep, 0);
    CHECK_EQ_INT(f.cache.entries[keep].tokens[0], seqs[0][0]);
    /* asking for more than evicting everything else can give fails, keeping the entry */
    CHECK(!di_prefix_cache_make_room(&f.cache, di_page_pool_total(f.pool), &keep));
    CHECK_EQ_INT(f.cache.n_entries, 1);
    fixture_free(&f);
}

TEST(a_disabled_cache_keeps_nothing) {
    fill_conv();
    Fixture f = fixture(16, 0);
    store(&f, conv, 30, 0);
    CHECK_EQ_INT(f.cache.n_entries, 0);
    CHECK_EQ_INT(di_page_pool_used(f.pool), 0);
    CHECK_EQ_INT(di_prefix_cache_find(&f.cache, conv, 30), -1);
    fixture_free(&f);
}

/* ---- the engine ---------------------------------------------------------------------------- */

static DiEngine *cache_engine(int async, int cache, size_t memory, int budget) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.async_scheduling = async;
    o.max_batch_tokens = budget;
    o.max_num_seqs = 8;
    o.state_memory_bytes = memory;
    o.enable_prefix_caching = cache;
    DiEngine *e = poisoned_mock_engine(&o);
    CHECK(e != NULL);
    return e;
}

/* Run one request to completion; its output must equal the reference; returns cached tokens. */
static int run_checked(DiEngine *e, const int32_t *prompt, int n, const DiSamplingParams *p, int32_t *out_tokens) {
    uint64_t id;
    DiRequestInput in = {.prompt_ids = prompt, .n_prompt_ids = n};
    CHECK_EQ_INT(di_engine_add_request(e, &in, p, NULL, NULL, &id), 0);
    CHECK_MSG(di_engine_run(e) == 0, "%s", di_last_error());
    DiRequestOutput res;
    CHECK_EQ_INT(di_engine_get_output(e, id, &res), 0);
    int32_t ref[64];
    DiFinishReason why;
    int n_ref = reference_generate(prompt, n, p, p->seed, ref, &why);
    CHECK_EQ_INT(res.n_tokens, n_ref);
    CHECK_MSG(res.n_tokens == n_ref && memcmp(res.token_ids, ref, sizeof(int32_t) * (size_t)n_ref) == 0,
              "tokens differ from the reference (%d cached)", res.n_cached_tokens);
    if (out_tokens) memcpy(out_tokens, res.token_ids, sizeof(int32_t) * (size_t)res.n_tokens);
    int cached = res.n_cached_tokens;
    CHECK_EQ_INT(di_engine_release(e, id), 0);
    return cached;
}

TEST(the_next_turn_starts_from_the_cached_state_and_generates_the_same_tokens) {
    fill_conv();
    for (int async = 0; async <= 1; async++) {
        DiEngine *e = cache_engine(async, 1, 1 << 20, 16); /* budget 16: prompts span several chunks */
        if (!e) continue;
        int32_t turn[400];
        int n = 37;
        memcpy(turn, conv, sizeof(int32_t) * (size_t)n);
        int expected_hits = 0;
        for (int t = 0; t < 4; t++) {
            DiSamplingParams p = seeded(9, 100 + (uint64_t)t);
            int32_t gen[16];
            int cached = run_checked(e, turn, n, &p, gen);
            if (t == 0) CHECK_EQ_INT(cached, 0);
            else {
                /* the previous turn's state: its prompt and all but (sync) its last output token */
                CHECK_MSG(cached >= n - 5 - 9 && cached < n, "turn %d (async %d): %d of %d cached", t, async, cached, n);
                expected_hits++;
            }
            /* next turn: this prompt + the answer + a new message of five tokens */
            memcpy(turn + n, gen, sizeof gen[0] * 9);
            n += 9;
            for (int k = 0; k < 5; k++, n++) turn[n] = conv[(n * 7) % 400];
        }
        DiEngineMetrics m;
        di_engine_get_metrics(e, &m);
        CHECK_EQ_INT(m.prefix_cache_enabled, 1);
        CHECK_EQ_INT(m.prefix_cache_lookups, 4);
        CHECK_EQ_INT(m.prefix_cache_hits, expected_hits);
        CHECK(m.prefix_cache_hit_tokens > 0);
        CHECK_EQ_INT(m.pages_used, m.pages_cached); /* only the cache holds pages now */
        /* every turn's final state (hits copy, the pool has room) and every turn's copy from
         * before its last prompt token */
        CHECK_EQ_INT(m.prefix_cache_entries, 4 + 4);
        di_engine_destroy(e);
    }
}

TEST(an_identical_or_diverging_prompt_does_not_reuse_a_state_it_cannot_extend) {
    fill_conv();
    DiEngine *e = cache_engine(0, 1, 1 << 20, 64);
    if (!e) return;
    DiSamplingParams p = seeded(4, 7);
    CHECK_EQ_INT(run_checked(e, conv, 20, &p, NULL), 0);
    /* the same prompt: the cached state (prompt + 3 outputs) is longer than it */
    CHECK_EQ_INT(run_checked(e, conv, 20, &p, NULL), 0);
    /* a prompt that differs inside the cached positions */
    int32_t diverged[40];
    memcpy(diverged, conv, sizeof diverged);
    diverged[3] = (diverged[3] + 1) % MOCK_VOCAB;
    CHECK_EQ_INT(run_checked(e, diverged, 40, &p, NULL), 0);
    DiEngineMetrics m;
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.prefix_cache_hits, 0);
    di_engine_destroy(e);
}

TEST(a_long_prompt_leaves_its_state_before_the_last_token_for_the_same_or_a_diverging_prompt) {
    fill_conv();
    for (int async = 0; async <= 1; async++) {
        DiEngine *e = cache_engine(async, 1, 1 << 20, 16);
        if (!e) continue;
        DiSamplingParams p = seeded(5, 21);
        int n = 50; /* >= the 32 tokens that make a prompt worth the copy */
        CHECK_EQ_INT(run_checked(e, conv, n, &p, NULL), 0);
        /* the same prompt again: everything but its last token comes from the cache */
        CHECK_EQ_INT(run_checked(e, conv, n, &p, NULL), n - 1);
        /* a prompt that agrees up to the last token and then goes elsewhere (a chat whose
         * earlier answer re-renders without its reasoning) */
        int32_t other[70];
        memcpy(other, conv, sizeof(int32_t) * (size_t)(n - 1));
        for (int k = n - 1; k < 70; k++) other[k] = conv[(k * 3 + 1) % 400];
        CHECK_EQ_INT(run_checked(e, other, 70, &p, NULL), n - 1);
        /* a short prompt is not worth the extra step: its identical repeat recomputes */
        CHECK_EQ_INT(run_checked(e, conv + 100, 20, &p, NULL), 0);
        CHECK_EQ_INT(run_checked(e, conv + 100, 20, &p, NULL), 0);
        DiEngineMetrics m;
        di_engine_get_metrics(e, &m);
        CHECK_EQ_INT(m.prefix_cache_hits, 2);
        CHECK_EQ_INT(m.pages_used, m.pages_cached);
        di_engine_destroy(e);
    }
}

/* A prompt of k chunks + 1 token: the chunk before the last token ends exactly there, so the
 * copy needs no cut of its own (the 513- and 1,025-token prompts at the serve budget of 512). */
TEST(a_prompt_one_token_past_whole_chunks_leaves_its_state_for_a_repeat) {
    fill_conv();
    for (int async = 0; async <= 1; async++) {
        DiEngine *e = cache_engine(async, 1, 1 << 20, 16);
        if (!e) continue;
        const int lengths[] = {33, 49, 65, 34, 48};
        for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
            int n = lengths[i];
            const int32_t *prompt = conv + 7 * i; /* distinct prompts: no hit from the previous one */
            DiSamplingParams p = seeded(4, 30 + i);
            CHECK_EQ_INT(run_checked(e, prompt, n, &p, NULL), 0);
            int cached = run_checked(e, prompt, n, &p, NULL);
            CHECK_MSG(cached == n - 1, "%d-token prompt (async %d): %d cached, %d expected", n, async, cached, n - 1);
        }
        di_engine_destroy(e);
    }
}

TEST(cached_states_give_way_to_new_requests_without_preemption) {
    fill_conv();
    /* room for about three requests' states: caching many finished requests must not starve
     * the running ones */
    DiRunner *probe = di_mock_runner_create(MOCK_VOCAB, MOCK_SEED);
    size_t per = probe->ops->pages_for_tokens(probe, 60 + 8);
    size_t memory = probe->page_bytes * (3 * per + 1);
    probe->ops->destroy(probe);
    for (int cache = 0; cache <= 1; cache++) {
        DiEngine *e = cache_engine(1, cache, memory, 64);
        if (!e) continue;
        for (int r = 0; r < 12; r++) {
            int32_t prompt[60];
            for (int i = 0; i < 60; i++) prompt[i] = conv[(i + r * 13) % 400];
            DiSamplingParams p = seeded(8, (uint64_t)r);
            run_checked(e, prompt, 60, &p, NULL);
        }
        DiEngineMetrics m;
        di_engine_get_metrics(e, &m);
        CHECK_EQ_INT(m.preemptions, 0);
        CHECK_EQ_INT(m.pages_used, m.pages_cached);
        if (cache) CHECK(m.prefix_cache_entries >= 1 && m.pages_cached <= m.pages_total);
        else CHECK_EQ_INT(m.pages_used, 0);
        di_engine_destroy(e);
    }
}

TEST(a_hit_under_memory_pressure_takes_the_entry_instead_of_copying_it) {
    fill_conv();
    DiRunner *probe = di_mock_runner_create(MOCK_VOCAB, MOCK_SEED);
    /* the first turn's two states (final, and before its last prompt token) leave too little
     * room for a copy of the final one */
    size_t pages = probe->ops->pages_for_tokens(probe, 68) + probe->ops->pages_for_tokens(probe, 59) + 2;
    size_t memory = probe->page_bytes * pages;
    probe->ops->destroy(probe);
    DiEngine *e = cache_engine(0, 1, memory, 64);
    if (!e) return;
    DiSamplingParams p = seeded(8, 5);
    int32_t turn[80], gen[8];
    memcpy(turn, conv, sizeof(int32_t) * 60);
    CHECK_EQ_INT(run_checked(e, turn, 60, &p, gen), 0);
    DiEngineMetrics m;
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.prefix_cache_entries, 2);
    memcpy(turn + 60, gen, sizeof gen);
    for (int k = 68; k < 73; k++) turn[k] = conv[k * 5 % 400];
    CHECK_EQ_INT(run_checked(e, turn, 73, &p, NULL), 60 + 7); /* sync: all but the last output */
    di_engine_get_metrics(e, &m);
    CHECK_EQ_INT(m.prefix_cache_hits, 1);
    CHECK_EQ_INT(m.preemptions, 0);
    CHECK_EQ_INT(m.pages_used, m.pages_cached);
    di_engine_destroy(e);
}

TEST(bad_prefix_cache_options_are_errors) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.enable_prefix_caching = 2;
    CHECK(di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o) == NULL);
    CHECK(strstr(di_last_error(), "enable_prefix_caching") != NULL);
    di_engine_options_init(&o);
    o.state_memory_bytes = 1 << 20;
    o.prefix_cache_bytes = 2 << 20;
    CHECK(di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o) == NULL);
    CHECK(strstr(di_last_error(), "prefix_cache_bytes") != NULL);
    o.enable_prefix_caching = 1;
    o.prefix_cache_bytes = 100; /* less than one page: a budget that could never hold a state */
    CHECK(di_engine_create_mock(MOCK_VOCAB, MOCK_SEED, &o) == NULL);
    CHECK(strstr(di_last_error(), "less than one") != NULL);
}

int main(void) {
    RUN_TEST(the_longest_entry_the_tokens_extend_is_found_and_taken_whole);
    RUN_TEST(the_same_tokens_replace_an_entry_and_the_budget_evicts_least_recent_first);
    RUN_TEST(making_room_for_the_pool_spares_the_entry_being_used);
    RUN_TEST(a_disabled_cache_keeps_nothing);
    RUN_TEST(the_next_turn_starts_from_the_cached_state_and_generates_the_same_tokens);
    RUN_TEST(an_identical_or_diverging_prompt_does_not_reuse_a_state_it_cannot_extend);
    RUN_TEST(a_long_prompt_leaves_its_state_before_the_last_token_for_the_same_or_a_diverging_prompt);
    RUN_TEST(a_prompt_one_token_past_whole_chunks_leaves_its_state_for_a_repeat);
    RUN_TEST(cached_states_give_way_to_new_requests_without_preemption);
    RUN_TEST(a_hit_under_memory_pressure_takes_the_entry_instead_of_copying_it);
    RUN_TEST(bad_prefix_cache_options_are_errors);
    return TEST_SUMMARY();
}
