/* test_prefix_state.c — exact request states moved between engines (engine.h
 * di_engine_export_state / di_engine_import_state; the PD transfer of issue 24) on the golden
 * tiny-a checkpoint.  Engine A runs a prompt less its last token with one output token, as a
 * prefill worker does, and exports the state; engine B imports it and runs the whole prompt:
 * every logits row equals a cold run in a third engine bit for bit, and B computed only the last
 * prompt position.  Both engines have the KV block cache on (as PD workers do), A's warm with
 * the prompt's first block, so the test also checks that an exact_state request is never
 * restored from blocks (a bounded replay would change the rows).  Bad states are refused with
 * their cause. */
#include "test.h"
#include "test_golden_model.h"

#include "base/error.h"
#include "engine/engine.h"
#include "engine/runner_v41.h"
#include "model/model.h"

#include <stdint.h>

#define PAGE 4096
#define N_PROMPT 203 /* one 128-token block and a partial one */
#define GEN 4

static Model *model;
static int32_t prompt[N_PROMPT];

typedef struct {
    uint64_t id;
    float *rows; /* [GEN][V] */
    int n;
} Rows;

static void observe(void *user, uint64_t id, int64_t pos, const float *logits, int32_t vocab) {
    (void)pos;
    Rows *r = user;
    if (id != r->id || r->n >= GEN) return;
    memcpy(r->rows + (size_t)r->n++ * (size_t)vocab, logits, sizeof(float) * (size_t)vocab);
}

/* caches: 0 none; 1 the KV block cache (B = 128) and the prefix cache, as a PD worker has. */
static DiEngine *engine(int caches, size_t memory) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.draft_max = 0;
    o.async_scheduling = 1;
    o.max_prefill_chunk = 64; /* chunked: the state is the same whatever the chunking */
    o.state_memory_bytes = memory;
    if (caches) {
        o.kv_cache_ram_bytes = 64u << 20;
        o.kv_block_tokens = 128;
        o.enable_prefix_caching = 1;
    }
    DiEngine *e = di_engine_create_with_runner(di_v41_runner_create(model, 0, PAGE), &o);
    CHECK_MSG(e != NULL, "%s", di_last_error());
    return e;
}

static int run(DiEngine *e, const int32_t *ids, int n, int max_tokens, int exact, DiStreamCallback cb, void *user,
               uint64_t *id) {
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = max_tokens;
    p.ignore_eos = 1;
    DiRequestInput in = {.prompt_ids = ids, .n_prompt_ids = n, .exact_state = exact};
    if (di_engine_add_request(e, &in, &p, cb, user, id) != 0) return -1;
    return di_engine_run(e);
}

/* The export from inside the FINISH callback (the request's own pages). */
typedef struct {
    DiEngine *e;
    uint64_t id;
    void *blob;
    size_t len;
    int rc;
} Export;

static void export_at_finish(void *user, const DiStreamDelta *d) {
    Export *x = user;
    if (d->finish_reason == DI_FINISH_NONE) return;
    x->rc = di_engine_export_state(x->e, d->request_id, &x->blob, &x->len);
}

/* Engine A: warm its block cache with the whole prompt, then the exact prefill of the prompt
 * less its last token; the state exported in its FINISH callback and again afterwards (from the
 * prefix cache) must agree. */
static void *prefill_state(size_t *len) {
    DiEngine *a = engine(1, 64u << 20);
    if (!a) return NULL;
    uint64_t warm, id;
    CHECK_EQ_INT(run(a, prompt, N_PROMPT, 1, 0, NULL, NULL, &warm), 0);
    Export x = {.e = a, .rc = -2};
    CHECK_EQ_INT(run(a, prompt, N_PROMPT - 1, 1, 1, export_at_finish, &x, &id), 0);
    CHECK_MSG(x.rc == 0, "export at FINISH: %s", di_last_error());
    DiRequestOutput out;
    CHECK_EQ_INT(di_engine_get_output(a, id, &out), 0);
    CHECK_EQ_INT(out.n_cached_tokens, 0); /* not restored from the warm block */
    void *again = NULL;
    size_t again_len = 0;
    CHECK_MSG(di_engine_export_state(a, id, &again, &again_len) == 0, "export later: %s", di_last_error());
    CHECK(again && again_len == x.len && memcmp(again, x.blob, x.len) == 0);
    free(again);
    /* the warm request is not exact_state: with the block cache on, its state is not exported */
    CHECK(di_engine_export_state(a, warm, &again, &again_len) != 0);
    CHECK(strstr(di_last_error(), "no exact state") != NULL);
    di_engine_destroy(a);
    *len = x.len;
    return x.blob;
}

TEST(an_imported_state_continues_bit_identically_to_a_cold_run) {
    size_t row_bytes = (size_t)GEN * (size_t)model->d.vocab * sizeof(float);
    float *cold = calloc(1, row_bytes), *pd = calloc(1, row_bytes);
    Rows rc = {.rows = cold}, rp = {.rows = pd};
    DiEngine *c = engine(0, 64u << 20);
    size_t len = 0;
    void *blob = prefill_state(&len);
    DiEngine *b = engine(1, 64u << 20);
    if (!c || !b || !blob || !cold || !pd) goto out;
    di_engine_set_logits_observer(c, observe, &rc);
    CHECK_EQ_INT(run(c, prompt, N_PROMPT, GEN, 0, NULL, NULL, &rc.id), 0);
    int64_t n = 0;
    CHECK_MSG(di_engine_import_state(b, blob, len, &n) == 0, "import: %s", di_last_error());
    CHECK_EQ_INT(n, N_PROMPT - 1);
    di_engine_set_logits_observer(b, observe, &rp);
    uint64_t id;
    CHECK_EQ_INT(run(b, prompt, N_PROMPT, GEN, 1, NULL, NULL, &rp.id), 0);
    id = rp.id;
    CHECK_EQ_INT(rc.n, GEN);
    CHECK_EQ_INT(rp.n, GEN);
    CHECK_MSG(memcmp(cold, pd, row_bytes) == 0, "logits after the imported state differ from the cold run");
    DiRequestOutput out;
    CHECK_EQ_INT(di_engine_get_output(b, id, &out), 0);
    CHECK_EQ_INT(out.n_cached_tokens, N_PROMPT - 1);
out:
    free(blob);
    free(cold);
    free(pd);
    if (c) di_engine_destroy(c);
    if (b) di_engine_destroy(b);
}

static void refused(DiEngine *e, const void *blob, size_t len, const char *why) {
    int64_t n = 0;
    CHECK(di_engine_import_state(e, blob, len, &n) != 0);
    CHECK_MSG(strstr(di_last_error(), why) != NULL, "expected '%s' in: %s", why, di_last_error());
}

TEST(bad_or_unplaceable_states_are_refused_with_their_cause) {
    size_t len = 0;
    uint8_t *blob = prefill_state(&len);
    if (!blob) return;
    DiEngine *b = engine(1, 64u << 20);
    if (b) {
        refused(b, blob, len - 1, "bytes, its header says");
        refused(b, blob, 10, "shorter than its header");
        blob[0] ^= 1;
        refused(b, blob, len, "not a deepinfer state");
        blob[0] ^= 1;
        int32_t first, bad = -1; /* the first token, after the 32-byte header */
        memcpy(&first, blob + 32, sizeof first);
        memcpy(blob + 32, &bad, sizeof bad);
        refused(b, blob, len, "outside the vocabulary");
        memcpy(blob + 32, &first, sizeof first);
        int64_t n = 0;
        CHECK_MSG(di_engine_import_state(b, blob, len, &n) == 0 && n == N_PROMPT - 1, "%s", di_last_error());
        di_engine_destroy(b);
    }
    DiEngine *off = engine(0, 64u << 20); /* prefix cache off */
    if (off) refused(off, blob, len, "prefix cache is off");
    if (off) di_engine_destroy(off);
    DiRunner *probe = di_v41_runner_create(model, 0, PAGE);
    size_t pages = probe->ops->pages_for_tokens(probe, N_PROMPT - 1), page = probe->page_bytes;
    probe->ops->destroy(probe);
    DiEngine *small = engine(1, page * (pages - 1)); /* one page too few */
    if (small) refused(small, blob, len, "exceed the prefix cache");
    if (small) di_engine_destroy(small);
    free(blob);
}

int main(void) {
    if (!(model = test_golden_tiny_a(MODE_REF))) {
        printf("loading golden tiny-a: %s\n0 passed, 1 failed\n", di_last_error());
        return 1;
    }
    test_rng_state = 7;
    for (int k = 0; k < N_PROMPT; k++) prompt[k] = (int32_t)(test_rand32() % (uint32_t)model->d.vocab);
    RUN_TEST(an_imported_state_continues_bit_identically_to_a_cold_run);
    RUN_TEST(bad_or_unplaceable_states_are_refused_with_their_cause);
    model_free(model);
    return TEST_SUMMARY();
}
