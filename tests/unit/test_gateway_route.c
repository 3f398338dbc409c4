/* test_gateway_route.c — the gateway's routing on a scripted cluster (src/gateway/gw_pool.h):
 * heartbeat answers are fed in by hand, so each decision can be checked against the balancer's
 * hand-derived choice: the decode choice (serving.md §7.2 score on the reported load plus the
 * gateway's pending admissions), the prefill tier of each request and the quota's instances,
 * the least in-flight cost among them, a dead worker skipped and rejoining (no sticky failure),
 * a model mismatch kept out, the cost model fitted from measured samples (recovering known
 * coefficients) or from counter deltas, and from /internal/prefill replies without counting a
 * prefill twice; the cache-aware choice (the worker holding the longest
 * run of the request's leading blocks, unless it is loaded past the slack); and the
 * /internal/load parser. */
#include "test.h"

#include "base/error.h"
#include "gateway/gw_load.h"
#include "gateway/gw_pool.h"

static DiGwLoad load_of(int64_t running, int64_t kv) {
    DiGwLoad l;
    memset(&l, 0, sizeof l);
    strcpy(l.role, "both");
    strcpy(l.model, "M");
    l.running = running;
    l.kv_tokens = kv;
    return l;
}

/* An idle heartbeat of every worker, each reporting the role it is configured for. */
static void feed_roles(DiGwPool *p) {
    static const char *const names[] = {"prefill", "decode", "both"};
    for (int i = 0; i < p->n; i++) {
        DiGwLoad l = load_of(0, 0);
        strcpy(l.role, names[p->w[i].role]);
        di_gw_pool_heartbeat(p, i, &l, NULL);
    }
}

static void init_pool(DiGwPool *p, const DiGwRole *roles, int n) {
    static const char *const urls[] = {"http://a:1", "http://b:2", "http://c:3", "http://d:4", "http://e:5", "http://f:6"};
    DiGwPoolConfig cfg;
    di_gw_pool_config_defaults(&cfg);
    cfg.lookahead_steps = 0;
    CHECK(di_gw_pool_init(p, &cfg, urls, roles, n, "M") == 0);
}

TEST(decode_choice_follows_the_balancer) {
    DiGwPool p;
    DiGwRole roles[] = {DI_GW_BOTH, DI_GW_BOTH};
    init_pool(&p, roles, 2);
    CHECK(!di_gw_pool_pd(&p));
    /* no heartbeat yet: nobody is in rotation */
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 10, -1), -1);
    /* test_decode_lb's hand-derived case: worker 0 holds 1 request with 100k KV, worker 1 three
     * with 3k; a 1k prompt scores max(2/2.5, 101k/52k) = 1.94 on 0, max(4/2.5, 4k/52k) = 1.6 on 1. */
    DiGwLoad l0 = load_of(1, 100000), l1 = load_of(3, 3000);
    di_gw_pool_heartbeat(&p, 0, &l0, NULL);
    di_gw_pool_heartbeat(&p, 1, &l1, NULL);
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 1000, -1), 1);
    CHECK_EQ_INT(p.w[1].pending, 1);
    CHECK_EQ_INT(p.w[1].pending_kv, 1000);
    /* pending admissions count: with 40 more on worker 1 the request count binds there (see
     * test_decode_lb: 41/21 = 1.95 > 1.94) */
    p.w[1].pending = 37;
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 1000, -1), 0);
    /* a heartbeat replaces what was pending by the reported load; requests waiting for their
     * room's KV count as pending: 37 of them bind the same way */
    di_gw_pool_decode_done(&p, 0, 1000); /* the request picked above is over */
    DiGwLoad l1w = l1;
    l1w.rooms_waiting = 37;
    di_gw_pool_heartbeat(&p, 1, &l1w, NULL);
    CHECK_EQ_INT(p.w[1].pending, 0);
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 1000, -1), 0);
    di_gw_pool_decode_done(&p, 0, 1000);
    di_gw_pool_heartbeat(&p, 1, &l1, NULL);
    /* exclude (the retry after a failure) takes the other one */
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 1000, 1), 0);
    di_gw_pool_decode_done(&p, 0, 1000);
    di_gw_pool_decode_done(&p, 0, 1000);
    CHECK_EQ_INT(p.w[0].pending, 0);
    CHECK_EQ_INT(p.w[0].pending_kv, 0);
    CHECK(di_gw_pool_pick_decode(&p, -1, -1) < 0);
    di_gw_pool_free(&p);
}

TEST(dead_worker_is_skipped_and_rejoins) {
    DiGwPool p;
    DiGwRole roles[] = {DI_GW_BOTH, DI_GW_BOTH};
    init_pool(&p, roles, 2);
    DiGwLoad idle = load_of(0, 0), busy = load_of(5, 5000);
    di_gw_pool_heartbeat(&p, 0, &idle, NULL);
    di_gw_pool_heartbeat(&p, 1, &busy, NULL);
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 100, -1), 0);
    /* one missed heartbeat keeps it in rotation, the second takes it out */
    di_gw_pool_heartbeat(&p, 0, NULL, "timeout");
    CHECK(p.w[0].healthy);
    di_gw_pool_heartbeat(&p, 0, NULL, "timeout");
    CHECK(!p.w[0].healthy);
    CHECK_STR(p.w[0].why, "timeout");
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 100, -1), 1);
    CHECK_EQ_INT(di_gw_pool_healthy(&p), 1);
    /* the next answer puts it back: the failure is not sticky */
    di_gw_pool_heartbeat(&p, 0, &idle, NULL);
    CHECK(p.w[0].healthy);
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 100, -1), 0);
    /* a refused connection takes it out at once; both out: no worker, with the cause */
    di_gw_pool_refused(&p, 0, "connection refused");
    di_gw_pool_refused(&p, 1, "connection refused");
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 100, -1), -1);
    CHECK(strstr(di_error_message(), "no worker") != NULL);
    di_gw_pool_heartbeat(&p, 1, &busy, NULL);
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 100, -1), 1);
    /* a worker serving another model never joins */
    DiGwLoad other = idle;
    strcpy(other.model, "N");
    di_gw_pool_heartbeat(&p, 0, &other, NULL);
    CHECK(!p.w[0].healthy);
    CHECK(strstr(p.w[0].why, "model 'N'") != NULL);
    di_gw_pool_free(&p);
}

TEST(prefill_tier_quota_and_least_inflight_cost) {
    DiGwPool p;
    DiGwRole roles[] = {DI_GW_PREFILL, DI_GW_PREFILL, DI_GW_PREFILL, DI_GW_PREFILL, DI_GW_DECODE, DI_GW_BOTH};
    init_pool(&p, roles, 6);
    CHECK(di_gw_pool_pd(&p));
    feed_roles(&p);
    /* PD: the decode pick never lands on a prefill worker */
    for (int k = 0; k < 8; k++) {
        int d = di_gw_pool_pick_decode(&p, 100, -1);
        CHECK(d == 4 || d == 5);
    }
    /* only the worker reporting role decode gets split requests (with its transfer address); the
     * `both` one in the decode pool takes them whole */
    char transfer[64];
    strcpy(p.w[4].load.transfer, "10.0.0.1:99");
    CHECK(di_gw_pool_decode_split(&p, 4, transfer, sizeof transfer));
    CHECK_STR(transfer, "10.0.0.1:99");
    CHECK(!di_gw_pool_decode_split(&p, 5, transfer, sizeof transfer));
    CHECK_STR(transfer, "");
        /* the quota's instances: workers take tiers in index order, quota[t] each */
    int want[DI_PREFILL_TIERS] = {0}, first = 0;
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        for (int k = 0; k < p.quota.quota[t]; k++) CHECK_EQ_INT(p.w[first + k].tier, t);
        want[t] = p.quota.quota[t];
        first += p.quota.quota[t];
    }
    CHECK_EQ_INT(first, 4);
    const int64_t ctx[DI_PREFILL_TIERS] = {1000, 20000, 100000, 300000};
    for (int t = 0; t < DI_PREFILL_TIERS; t++) {
        int tier = -1;
        double cost = 0;
        int w = di_gw_pool_pick_prefill(&p, ctx[t], 0, -1, &tier, &cost);
        CHECK_EQ_INT(tier, t);
        CHECK(w >= 0 && w < 4);
        /* its own tier's instance when the tier has one, else a lent one */
        if (want[t] > 0) CHECK_EQ_INT(p.w[w].tier, t);
        CHECK(cost > 0);
        di_gw_pool_prefill_done(&p, w, tier, cost);
        CHECK_EQ_INT(p.routed_tier[t], 1);
    }
    /* two short prompts in flight on a tier with >= 2 instances go to different ones; with one
     * instance both go there (the tier's own first) */
    int tier, a, b;
    double ca, cb;
    a = di_gw_pool_pick_prefill(&p, 500, 0, -1, &tier, &ca);
    b = di_gw_pool_pick_prefill(&p, 500, 0, -1, &tier, &cb);
    if (want[0] >= 2) CHECK(a != b);
    else CHECK_EQ_INT(a, b);
    di_gw_pool_prefill_done(&p, a, 0, ca);
    di_gw_pool_prefill_done(&p, b, 0, cb);
    CHECK_NEAR(p.w[a].prefill_inflight_ns, 0, 1e-9);
    /* a tier whose instances are all out borrows: take every tier-0 worker out */
    for (int i = 0; i < 4; i++)
        if (p.w[i].tier == 0) di_gw_pool_refused(&p, i, "down");
    int w = di_gw_pool_pick_prefill(&p, 500, 0, -1, &tier, &ca);
    CHECK(w >= 0 && p.w[w].tier != 0 && p.w[w].healthy);
    for (int i = 0; i < 4; i++) di_gw_pool_refused(&p, i, "down");
    CHECK_EQ_INT(di_gw_pool_pick_prefill(&p, 500, 0, -1, &tier, &ca), -1);
    /* a prefill worker that answers as a plain `serve` (role both) has no /internal/prefill */
    DiGwLoad both = load_of(0, 0);
    di_gw_pool_heartbeat(&p, 0, &both, NULL);
    CHECK(p.w[0].healthy);
    CHECK_EQ_INT(di_gw_pool_pick_prefill(&p, 500, 0, -1, &tier, &ca), -1);
    di_gw_pool_free(&p);
}

TEST(quota_moves_toward_demand) {
    DiGwPool p;
    DiGwRole roles[] = {DI_GW_PREFILL, DI_GW_PREFILL, DI_GW_PREFILL, DI_GW_PREFILL, DI_GW_DECODE};
    init_pool(&p, roles, 5);
    feed_roles(&p);
    /* only tier-3 requests arrive, period after period: tier 3's quota grows to all 4 */
    for (int period = 0; period < 12; period++) {
        int tier;
        double cost;
        for (int k = 0; k < 5; k++) {
            int w = di_gw_pool_pick_prefill(&p, 300000, 0, -1, &tier, &cost);
            CHECK(w >= 0);
            if (w >= 0) di_gw_pool_prefill_done(&p, w, tier, cost);
        }
        di_gw_pool_period(&p, 1.0);
    }
    CHECK_EQ_INT(p.quota.quota[3], 4);
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(p.w[i].tier, 3);
    di_gw_pool_free(&p);
}

/* The coefficients the fit tests sample from: cost(q, c) = a q^2 + b q c + d q + e c + f ns. */
#define COST_A 0.02
#define COST_B 0.01
#define COST_D 2000.0
#define COST_E 30.0
#define COST_F 400000.0

/* A prefill worker (0) and a decode worker (1); an idle load of the prefill worker to fill. */
static DiGwLoad pd_pool(DiGwPool *p) {
    DiGwRole roles[] = {DI_GW_PREFILL, DI_GW_DECODE};
    init_pool(p, roles, 2);
    DiGwLoad l = load_of(0, 0);
    strcpy(l.role, "prefill");
    return l;
}

/* A period refits: the five coefficients, recovered to 0.1%. */
static void check_full_fit(DiGwPool *p, double a, double b, double d, double e, double f) {
    di_gw_pool_period(p, 0.5);
    CHECK_EQ_INT(p->fit_kind, DI_GW_FIT_FULL);
    CHECK_NEAR(p->cost.a, a, a * 1e-3);
    CHECK_NEAR(p->cost.b, b, b * 1e-3);
    CHECK_NEAR(p->cost.d, d, d * 1e-3);
    CHECK_NEAR(p->cost.e, e, e * 1e-3);
    CHECK_NEAR(p->cost.f, f, f * 1e-3);
}

/* Samples from cost(q, c) = a q^2 + b q c + d q + e c + f (ns) into worker loads. */
TEST(cost_model_is_fitted_from_measured_samples) {
    DiGwPool p;
    DiGwLoad l = pd_pool(&p);
    const double a = COST_A, b = COST_B, d = COST_D, e = COST_E, f = COST_F;
    int64_t total = 0;
    for (int round = 0; round < 4; round++) {
        l.n_samples = 0;
        for (int k = 0; k < 10; k++) {
            int64_t q = 128 << (k % 6), c = (int64_t)(round * 4 + k % 4) * 1024;
            double ns = a * q * q + b * q * c + d * q + e * c + f;
            l.sample_q[l.n_samples] = q;
            l.sample_c[l.n_samples] = c;
            l.sample_s[l.n_samples++] = ns * 1e-9;
        }
        total += 10;
        l.samples_total = total;
        di_gw_pool_heartbeat(&p, 0, &l, NULL);
        /* the same answer again (nothing new) adds no sample */
        di_gw_pool_heartbeat(&p, 0, &l, NULL);
    }
    CHECK_EQ_INT(p.fit_total, 40);
    check_full_fit(&p, a, b, d, e, f);
    /* the pick's predicted cost is the fitted one */
    int tier;
    double cost;
    CHECK_EQ_INT(di_gw_pool_pick_prefill(&p, 1024, 0, -1, &tier, &cost), 0);
    CHECK_NEAR(cost, a * 1024 * 1024 + d * 1024 + f, 1.0);
    di_gw_pool_free(&p);
}

TEST(cost_model_falls_back_to_counter_deltas) {
    DiGwPool p;
    DiGwRole roles[] = {DI_GW_BOTH};
    init_pool(&p, roles, 1);
    /* no prefix is ever cached (c = 0): the five coefficients are not determined; the counters
     * say 200 tokens took 0.2 s between two heartbeats: d = 1e6 ns per token */
    DiGwLoad l = load_of(0, 0);
    l.prefill_tokens = 100;
    l.prefill_seconds = 0.1;
    for (int k = 0; k < 6; k++) {
        l.sample_q[k] = 10 + k;
        l.sample_c[k] = 0;
        l.sample_s[k] = 1e-3 * (10 + k);
    }
    l.n_samples = 6;
    l.samples_total = 6;
    di_gw_pool_heartbeat(&p, 0, &l, NULL); /* the first answer: a base, no delta */
    di_gw_pool_period(&p, 0.5);
    CHECK_EQ_INT(p.fit_kind, DI_GW_FIT_NONE);
    l.prefill_tokens = 300;
    l.prefill_seconds = 0.3;
    di_gw_pool_heartbeat(&p, 0, &l, NULL);
    di_gw_pool_period(&p, 0.5);
    CHECK_EQ_INT(p.fit_kind, DI_GW_FIT_LINEAR);
    CHECK_NEAR(p.cost.d, 1e6, 1e-3);
    CHECK_NEAR(p.cost.a + p.cost.b + p.cost.e + p.cost.f, 0, 0);
    di_gw_pool_free(&p);
}

TEST(load_parser_checks_every_field) {
    const char *good = "{\"role\":\"decode\",\"model\":\"M\",\"queued\":1,\"running\":2,\"kv_tokens\":300,\"steps\":4,"
                       "\"step_seconds\":0.5,\"prefill_tokens\":10,\"prefill_seconds\":0.25,\"decode_tokens\":7,"
                       "\"block_tokens\":256,\"kv_identity\":null,\"transfer\":\"127.0.0.1:9\",\"rooms_waiting\":0,"
                       "\"rooms_pinned_blocks\":0,\"prefill_samples_total\":3,\"prefill_samples\":[[4,0,0.001],[5,256,0.002]]}";
    DiGwLoad l;
    CHECK(di_gw_load_parse(good, strlen(good), &l) == 0);
    CHECK_STR(l.role, "decode");
    CHECK_STR(l.transfer, "127.0.0.1:9");
    CHECK_EQ_INT(l.running, 2);
    CHECK_EQ_INT(l.kv_tokens, 300);
    CHECK_EQ_INT(l.n_samples, 2);
    CHECK_EQ_INT(l.sample_c[1], 256);
    CHECK_NEAR(l.prefill_seconds, 0.25, 0);
    /* the pdworker's shape: block_tokens and kv_identity null without a KV cache */
    const char *pd = "{\"role\":\"prefill\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                     "\"block_tokens\":null,\"kv_identity\":null,\"transfer\":null}";
    CHECK(di_gw_load_parse(pd, strlen(pd), &l) == 0);
    CHECK_EQ_INT(l.block_tokens, 0);
    CHECK_STR(l.transfer, "");
    const char *bad[] = {"", "[]", "{\"role\":\"x\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0}",
                         "{\"role\":\"both\",\"model\":\"M\",\"queued\":-1,\"running\":0,\"kv_tokens\":0}",
                         "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0}",
                         "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                         "\"prefill_samples_total\":1,\"prefill_samples\":[[0,0,1]]}",
                         "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                         "\"prefill_samples_total\":0,\"prefill_samples\":[[1,0,1]]}",
                         /* a count the pool's sums would overflow on (running + queued + pending) */
                         "{\"role\":\"both\",\"model\":\"M\",\"queued\":9223372036854775807,\"running\":1,\"kv_tokens\":0}",
                         "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                         "\"prefill_samples_total\":1,\"prefill_samples\":[[1,9223372036854775807,1]]}"};
    const char *field[] = {"JSON", "JSON", "role", "queued", "kv_tokens", "prefill_samples[0]", "prefill_samples_total",
                           "queued", "prefill_samples[0]"};
    /* a block cache's identity and the keys it holds, sorted for the lookup */
    const char *cached = "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                         "\"block_tokens\":256,\"kv_identity\":\"00000000000000ab00000000000000CD\","
                         "\"prefix_keys\":[\"ffffffffffffffff\",\"0000000000000010\",\"00000000000000aa\"]}";
    CHECK(di_gw_load_parse(cached, strlen(cached), &l) == 0);
    CHECK(l.has_identity && l.identity_hi == 0xab && l.identity_lo == 0xcd);
    CHECK_EQ_INT(l.n_prefix_keys, 3);
    CHECK(l.prefix_keys[0] == 0x10 && l.prefix_keys[2] == UINT64_MAX);
    CHECK(di_gw_load_has_key(&l, 0xaa) && di_gw_load_has_key(&l, UINT64_MAX) && !di_gw_load_has_key(&l, 0xab));
    const char *bad_prefix[] = {"{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                                "\"kv_identity\":\"xyz\"}",
                                "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                                "\"prefix_keys\":[\"00000000000000aa\",\"12\"]}",
                                "{\"role\":\"both\",\"model\":\"M\",\"queued\":0,\"running\":0,\"kv_tokens\":0,"
                                "\"prefix_keys\":{}}"};
    const char *prefix_field[] = {"kv_identity", "prefix_keys[1]", "prefix_keys"};
    for (size_t i = 0; i < sizeof bad_prefix / sizeof bad_prefix[0]; i++) {
        CHECK(di_gw_load_parse(bad_prefix[i], strlen(bad_prefix[i]), &l) != 0);
        CHECK_MSG(strstr(di_error_message(), prefix_field[i]) != NULL, "case %zu: %s", i, di_error_message());
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(di_gw_load_parse(bad[i], strlen(bad[i]), &l) != 0);
        CHECK_MSG(strstr(di_error_message(), field[i]) != NULL, "case %zu: %s", i, di_error_message());
    }
}

/* A both worker's idle-ish load holding the blocks keys[0, n) (ascending, as the parser sorts). */
static DiGwLoad holding(int64_t running, const uint64_t *keys, int n) {
    DiGwLoad l = load_of(running, running * 100);
    l.has_identity = true;
    l.block_tokens = 256;
    for (int i = 0; i < n; i++) l.prefix_keys[i] = keys[i];
    l.n_prefix_keys = n;
    return l;
}

TEST(cache_aware_choice_prefers_the_longest_prefix_within_the_slack) {
    DiGwPool p;
    DiGwRole roles[] = {DI_GW_BOTH, DI_GW_BOTH, DI_GW_BOTH};
    init_pool(&p, roles, 3); /* cache_slack 4 */
    const uint64_t k01[] = {0x11, 0x22}, k012[] = {0x11, 0x22, 0x33, 0x99};
    const uint64_t req[] = {0x11, 0x22, 0x33, 0x44}, other[] = {0x11, 0x55};
    DiGwLoad l0 = holding(0, NULL, 0), l1 = holding(1, k01, 2), l2 = holding(2, k012, 4);
    di_gw_pool_heartbeat(&p, 0, &l0, NULL);
    di_gw_pool_heartbeat(&p, 1, &l1, NULL);
    di_gw_pool_heartbeat(&p, 2, &l2, NULL);
    /* the identity to hash with is reported */
    uint64_t lo = 1, hi = 1;
    int b = 0;
    CHECK(di_gw_pool_kv_identity(&p, &lo, &hi, &b) && b == 256 && lo == 0 && hi == 0);
    /* no keys: the balancer alone, the idle worker 0 */
    CHECK_EQ_INT(di_gw_pool_pick_decode(&p, 100, -1), 0);
    di_gw_pool_decode_done(&p, 0, 100);
    CHECK_EQ_INT(p.cache_picks, 0);
    /* worker 2 holds 3 leading blocks (the 4th, 0x44, nobody), worker 1 two: 2 it is, although
     * it is the busiest (2 running <= 0 + 4) */
    CHECK_EQ_INT(di_gw_pool_pick_decode_cached(&p, 1200, -1, req, 4), 2);
    di_gw_pool_decode_done(&p, 2, 1200);
    CHECK_EQ_INT(p.cache_picks, 1);
    /* a tie on one block between 1 and 2: the balancer among those two, the less loaded 1 */
    CHECK_EQ_INT(di_gw_pool_pick_decode_cached(&p, 600, -1, other, 2), 1);
    di_gw_pool_decode_done(&p, 1, 600);
    CHECK_EQ_INT(p.cache_picks, 2);
    /* the retry excludes 2: the longest left is 1's */
    CHECK_EQ_INT(di_gw_pool_pick_decode_cached(&p, 1200, 2, req, 4), 1);
    di_gw_pool_decode_done(&p, 1, 1200);
    /* 2 loaded past the slack (5 pending on 2 running > 0 + 4): the balancer over all, worker 0 */
    p.w[2].pending = 5;
    CHECK_EQ_INT(di_gw_pool_pick_decode_cached(&p, 1200, -1, req, 4), 0);
    di_gw_pool_decode_done(&p, 0, 1200);
    CHECK_EQ_INT(p.cache_picks, 3);
    p.w[2].pending = 0;
    /* a holder out of rotation is not chosen: 2 leaves, 1 holds the longest left */
    di_gw_pool_heartbeat(&p, 2, NULL, "connection refused");
    di_gw_pool_heartbeat(&p, 2, NULL, "connection refused");
    CHECK_EQ_INT(di_gw_pool_pick_decode_cached(&p, 1200, -1, req, 4), 1);
    di_gw_pool_decode_done(&p, 1, 1200);
    /* keys nobody holds: the balancer */
    const uint64_t none[] = {0x77};
    CHECK_EQ_INT(di_gw_pool_pick_decode_cached(&p, 100, -1, none, 1), 0);
    di_gw_pool_decode_done(&p, 0, 100);
    CHECK_EQ_INT(p.cache_picks, 4);
    CHECK(di_gw_pool_pick_decode_cached(&p, 100, -1, NULL, 3) < 0); /* keys promised, none given */
    di_gw_pool_free(&p);
}

TEST(prefill_replies_feed_the_cost_fit_once) {
    DiGwPool p;
    DiGwLoad l = pd_pool(&p);
    const double a = COST_A, b = COST_B, d = COST_D, e = COST_E, f = COST_F;
    l.n_samples = l.samples_total = 1; /* before any reply, a heartbeat's sample is taken */
    l.sample_q[0] = 512;
    l.sample_c[0] = 0;
    l.sample_s[0] = (a * 512 * 512 + d * 512 + f) * 1e-9;
    di_gw_pool_heartbeat(&p, 0, &l, NULL);
    CHECK_EQ_INT(p.fit_total, 1);
    for (int k = 0; k < 40; k++) {
        int64_t q = 128 << (k % 6), c = (int64_t)(k % 7) * 1024;
        CHECK_EQ_INT(di_gw_pool_prefill_sample(&p, 0, q, c, (a * q * q + b * q * c + d * q + e * c + f) * 1e-9), 0);
    }
    CHECK_EQ_INT(p.fit_total, 41);
    CHECK_EQ_INT(p.reply_samples_total, 40);
    /* its next heartbeat reports those prefills again: not taken twice */
    l.n_samples = 16;
    l.samples_total = 41;
    for (int k = 0; k < 16; k++) l.sample_q[k] = 1, l.sample_c[k] = 0, l.sample_s[k] = 1; /* would spoil the fit */
    di_gw_pool_heartbeat(&p, 0, &l, NULL);
    CHECK_EQ_INT(p.fit_total, 41);
    check_full_fit(&p, a, b, d, e, f);
    /* the decode worker's samples still come by heartbeat */
    DiGwLoad dl = load_of(0, 0);
    strcpy(dl.role, "decode");
    dl.n_samples = dl.samples_total = 1;
    dl.sample_q[0] = 1;
    dl.sample_c[0] = 1000;
    dl.sample_s[0] = (d + e * 1000 + b * 1000 + a + f) * 1e-9;
    di_gw_pool_heartbeat(&p, 1, &dl, NULL);
    CHECK_EQ_INT(p.fit_total, 42);
    /* bad samples are refused, naming the rule */
    CHECK_EQ_INT(di_gw_pool_prefill_sample(&p, 0, 0, 0, 1), -1);
    CHECK(strstr(di_error_message(), "q > 0") != NULL);
    CHECK_EQ_INT(di_gw_pool_prefill_sample(&p, 0, 5, -1, 1), -1);
    CHECK_EQ_INT(di_gw_pool_prefill_sample(&p, 0, 5, 0, 0.0 / 0.0), -1);
    CHECK_EQ_INT(di_gw_pool_prefill_sample(&p, 0, 5, 0, 0), -1);
    CHECK_EQ_INT(di_gw_pool_prefill_sample(&p, 2, 5, 0, 1), -1);
    CHECK_EQ_INT(p.fit_total, 42);
    di_gw_pool_free(&p);
}

int main(void) {
    RUN_TEST(decode_choice_follows_the_balancer);
    RUN_TEST(dead_worker_is_skipped_and_rejoins);
    RUN_TEST(prefill_tier_quota_and_least_inflight_cost);
    RUN_TEST(quota_moves_toward_demand);
    RUN_TEST(cost_model_is_fitted_from_measured_samples);
    RUN_TEST(cost_model_falls_back_to_counter_deltas);
    RUN_TEST(load_parser_checks_every_field);
    RUN_TEST(cache_aware_choice_prefers_the_longest_prefix_within_the_slack);
    RUN_TEST(prefill_replies_feed_the_cost_fit_once);
    return TEST_SUMMARY();
}
