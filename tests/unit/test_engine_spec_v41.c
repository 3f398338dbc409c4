/* test_engine_spec_v41.c — the engine's speculative decoding over the V4.1 runner on make-tiny
 * checkpoints: random weights (drafts nearly always rejected) and make-tiny --planted (drafts
 * agree with the target, so they are accepted).  For many prompts, every draft length 1..5 and
 * both schedules, greedy outputs equal those of plain decoding (the same engine with draft_max
 * 0, itself checked against a direct model_forward loop by test_engine_v41), with requests
 * arriving over time beside prefill chunks; seeded sampling (T 0.8, rejection sampling) with
 * fixed lengths gives the same tokens in that crowd as alone; the planted model accepts drafts
 * and the random one almost none. */
#include "test.h"

#include "deepinfer.h"

#include "base/error.h"
#include "base/log.h"
#include "model/tiny.h"

#include <ftw.h>
#include <stdio.h>
#include <unistd.h>

#define N_REQ 6
#define GEN 20
#define MAX_PROMPT 24

static char dir[256];
static int32_t prompts[N_REQ][MAX_PROMPT];
static int n_prompt[N_REQ];
static int32_t plain[N_REQ][GEN]; /* greedy, draft_max 0 */

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* Run every request (crowd: arriving two per step, budget 24 tokens, chunks of at most 7, 4 at a
 * time; else one at a time, whole prompts) and copy the outputs; fills the speculation
 * counters.  -1 when the engine fails. */
static int run(int draft_max, int schedule, int sampled, int crowd, int32_t out[N_REQ][GEN], DiEngineMetrics *m) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.draft_max = draft_max;
    o.draft_schedule = schedule;
    if (crowd) {
        o.max_batch_tokens = 24;
        o.max_prefill_chunk = 7;
        o.max_num_seqs = 4;
    } else {
        o.max_num_seqs = 1;
    }
    DiEngine *e = di_engine_create(dir, &o);
    if (!e) return -1;
    uint64_t ids[N_REQ];
    int added = 0, active = 1, rc = 0;
    while (rc == 0 && (added < N_REQ || active > 0)) {
        for (int b = 0; b < 2 && added < N_REQ; b++, added++) {
            DiSamplingParams p;
            di_sampling_params_init(&p);
            p.temperature = sampled ? 0.8f : 0.0f;
            p.max_tokens = GEN;
            p.ignore_eos = 1;
            p.has_seed = 1;
            p.seed = 77 + (uint64_t)added;
            DiRequestInput in = {.prompt_ids = prompts[added], .n_prompt_ids = n_prompt[added]};
            rc |= di_engine_add_request(e, &in, &p, NULL, NULL, &ids[added]);
        }
        if (rc == 0) rc = di_engine_step(e, &active);
    }
    for (int r = 0; rc == 0 && r < N_REQ; r++) {
        DiRequestOutput res;
        rc = di_engine_get_output(e, ids[r], &res);
        if (rc == 0 && res.n_tokens != GEN) rc = di_errorf("request %d: %d tokens", r, res.n_tokens);
        if (rc == 0) memcpy(out[r], res.token_ids, sizeof(int32_t) * GEN);
    }
    di_engine_get_metrics(e, m);
    di_engine_destroy(e);
    return rc;
}

/* Greedy: every length and schedule gives plain decoding's tokens; seeded sampling with fixed
 * lengths: the crowd gives the tokens of one at a time.  Returns the accepted drafts of the
 * greedy fixed schedule at length 5 and the drafts it verified. */
static void check_lossless(const char *what, uint64_t *accepted, uint64_t *verified) {
    DiEngineMetrics m;
    CHECK_MSG(run(0, 0, 0, 1, plain, &m) == 0, "%s: %s", what, di_last_error());
    for (int len = 1; len <= 5; len++) {
        for (int sched = 0; sched <= 1; sched++) {
            int32_t got[N_REQ][GEN];
            int rc = run(len, sched, 0, 1, got, &m);
            CHECK_MSG(rc == 0, "%s: %s", what, di_last_error());
            CHECK_MSG(rc == 0 && memcmp(got, plain, sizeof got) == 0, "%s: greedy, draft_max %d, %s", what, len,
                      sched ? "confidence" : "fixed");
            if (len == 5 && sched == 0) {
                *accepted = m.spec_num_accepted_tokens;
                *verified = m.spec_num_draft_tokens;
            }
        }
        int32_t alone[N_REQ][GEN], crowd[N_REQ][GEN];
        int rc = run(len, 0, 1, 0, alone, &m);
        if (rc == 0) rc = run(len, 0, 1, 1, crowd, &m);
        CHECK_MSG(rc == 0 && memcmp(alone, crowd, sizeof alone) == 0, "%s: T 0.8, draft_max %d, fixed: %s", what, len,
                  rc ? di_last_error() : "crowd differs");
    }
}

static int remove_entry(const char *path, const struct stat *st, int kind, struct FTW *walk) {
    (void)st;
    (void)kind;
    (void)walk;
    return remove(path);
}

/* make-tiny's directory, depth first. */
static void remove_dir(void) { nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

TEST(random_weights_reject_and_stay_lossless) {
    CHECK(di_tiny_write(dir, "tiny", DI_TINY_DEFAULT_SEED, 0) >= 0);
    uint64_t accepted = 0, verified = 0;
    check_lossless("random", &accepted, &verified);
    CHECK_MSG(verified > 0 && accepted * 10 < verified, "accepted %llu of %llu", (unsigned long long)accepted,
              (unsigned long long)verified);
    remove_dir();
}

TEST(planted_drafts_are_accepted_and_lossless) {
    CHECK(di_tiny_write_planted(dir, "tiny", DI_TINY_DEFAULT_SEED, 0) >= 0);
    uint64_t accepted = 0, verified = 0;
    check_lossless("planted", &accepted, &verified);
    CHECK_MSG(verified > 0 && accepted * 10 >= verified * 9, "accepted %llu of %llu", (unsigned long long)accepted,
              (unsigned long long)verified);
    remove_dir();
}

int main(void) {
    di_log_set_level(DI_LOG_ERROR);
    snprintf(dir, sizeof dir, "/tmp/di_test_engine_spec_v41_%d", (int)getpid());
    uint64_t rng = 41;
    for (int r = 0; r < N_REQ; r++) {
        n_prompt[r] = 1 + (int)(rng_next(&rng) % MAX_PROMPT);
        for (int k = 0; k < n_prompt[r]; k++) prompts[r][k] = (int32_t)(rng_next(&rng) % 256);
    }
    RUN_TEST(random_weights_reject_and_stay_lossless);
    RUN_TEST(planted_drafts_are_accepted_and_lossless);
    return TEST_SUMMARY();
}
