/* test_ep_dispatch.c — expert-parallel dispatch and combine (src/ep, ep_dispatch.h) through the
 * in-process reference transport, against the single-process moe_forward as the reference:
 * random inputs (so random routings) on random layers of the built-in tiny model, 2 to 5 ranks,
 * random plans with replicated experts, batches of 1 token (most ranks receive nothing) to 12,
 * rows sent as float32 and as FP8 (the ref numerics' default), and the layer's output must equal
 * the single process's bit for bit (memcmp).  Also: the bytes dispatched equal the count derived
 * here from the routing and the placement (each token sent once per destination rank, 4 D or
 * D + D/32 bytes a row), a replan between calls, float32 chosen and FP8 refused under the kvq
 * numerics (and a kvq job exact too), and the errors for a plan that does not fit and for a rank
 * asked to run an expert it does not hold. */
#include "test.h"

#include "base/error.h"
#include "ep/ep.h"
#include "model/model.h"
#include "model/moe.h"
#include "model/tiny.h"
#include "model/workspace.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_RANKS = 5, MAX_ROWS = 12, TRIALS = 60 };

static Model *engine_model, *worker_model;
static char dir[4096];

/* A random plan over P ranks: every expert once in a random order, then `extra` slots holding
 * random experts (replicas); R = E + extra, a multiple of P. */
static void random_plan(int L, int E, int P, int extra, DiEplbPlan *p) {
    int R = E + extra;
    *p = (DiEplbPlan){L, E, R, P, 1, 0, calloc((size_t)(L * R), 4), calloc((size_t)(L * R), 4), NULL, calloc((size_t)(L * E), 4)};
    for (int l = 0; l < L; l++) {
        int32_t *s = p->phy2log + l * R;
        for (int i = 0; i < E; i++) s[i] = i;
        for (int i = E - 1; i > 0; i--) { /* shuffle */
            int j = (int)(test_rand32() % (uint32_t)(i + 1)), t = s[i];
            s[i] = s[j];
            s[j] = t;
        }
        for (int i = E; i < R; i++) s[i] = (int32_t)(test_rand32() % (uint32_t)E);
        for (int i = 0; i < R; i++) {
            p->phy_rank[l * R + i] = p->logcnt[l * E + s[i]]++;
            if (p->logcnt[l * E + s[i]] > p->max_replicas) p->max_replicas = p->logcnt[l * E + s[i]];
        }
    }
    p->log2phy = malloc((size_t)(L * E * p->max_replicas) * 4);
    for (int i = 0; i < L * E * p->max_replicas; i++) p->log2phy[i] = -1;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < R; i++) p->log2phy[(l * E + p->phy2log[l * R + i]) * p->max_replicas + p->phy_rank[l * R + i]] = i;
}

static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)((int32_t)test_rand32() % (1 << 22)) / (float)(1 << 21);
}

/* moe_forward on engine model em with or without an executor. */
static int forward(Model *em, const MoeExecutor *exec, int L, const float *f, int64_t n, float *y, int32_t *sel) {
    const MoeExecutor *saved = em->moe_exec;
    if (model_set_moe_executor(em, exec) != 0 || workspace_acquire(em) != 0) return -1;
    /* NaN in the expert output rows, so a row combine did not fill cannot pass for the last call's */
    memset(em->ws->moe.y, 0xff, (size_t)(n * (em->d.top_k + 1) * em->d.dim) * sizeof(float));
    int rc = moe_forward(em, &em->w.layers[L], em->d.top_k, f, n, y, sel, NULL);
    workspace_release(em);
    model_set_moe_executor(em, saved);
    return rc;
}

typedef struct {
    EpWorker workers[MAX_RANKS];
    EpLocalLink ll;
    EpLink link;
    DiEp *ep;
    int n;
} Job;

/* A job of n ranks on engine model em and worker model wm; wire < 0: the default format. */
static int job_open_on(Job *j, int n, int wire, Model *em, Model *wm) {
    memset(j, 0, sizeof *j);
    j->n = n;
    for (int k = 0; k < n; k++) ep_worker_init(&j->workers[k], k, wm);
    if (ep_link_local(&j->ll, j->workers, n, &j->link) != 0 || !(j->ep = ep_create(0, n, &j->link))) return -1;
    if (wire >= 0 && ep_set_wire(j->ep, (EpWire)wire) != 0) return -1;
    return ep_attach(j->ep, em, dir);
}

static int job_open(Job *j, int n, int wire) { return job_open_on(j, n, wire, engine_model, worker_model); }

static void job_close(Job *j) {
    ep_destroy(j->ep); /* removes the executor from the engine model */
    for (int k = 0; k < j->n; k++) ep_worker_free(&j->workers[k]);
}

/* Bytes the dispatch must send for this routing: per rank, a header, 12 per assignment and one
 * hidden row of row_bytes per distinct token. */
static int64_t expected_bytes(const EpPlacement *pl, int L, const int32_t *sel, int64_t n, int top_k, int n_ranks, int64_t row_bytes,
                              int *ranks_used) {
    int64_t bytes = 0;
    *ranks_used = 0;
    for (int k = 1; k < n_ranks; k++) {
        int64_t asg = 0, tok = 0;
        for (int64_t t = 0; t < n; t++) {
            int here = 0;
            for (int i = 0; i < top_k; i++) here += ep_placement_rank(pl, L, sel[t * top_k + i], t) == k;
            asg += here;
            tok += here > 0;
        }
        if (asg) bytes += (int64_t)sizeof(EpHeader) + 12 * asg + row_bytes * tok, ++*ranks_used;
    }
    return bytes;
}

TEST(dispatch_combine_equals_single_process_bit_for_bit) {
    const ModelDims *d = &engine_model->d;
    int64_t D = d->dim;
    int top_k = d->top_k, E = d->n_experts, idle_ranks = 0, replicated = 0, fp8_trials = 0, fp8_asked = 0;
    float *f = malloc((size_t)(MAX_ROWS * D) * 4), *want = malloc((size_t)(MAX_ROWS * D) * 4), *got = malloc((size_t)(MAX_ROWS * D) * 4);
    int32_t *sel = malloc((size_t)(MAX_ROWS * top_k) * 4);
    for (int trial = 0; trial < TRIALS; trial++) {
        int n_ranks = 2 + trial % (MAX_RANKS - 1), P = n_ranks - 1, L = (int)(test_rand32() % (uint32_t)d->n_layers);
        int64_t n = trial % 3 == 0 ? 1 : 1 + test_rand32() % MAX_ROWS;
        int extra = ((E + P - 1) / P * P - E) + P * (int)(test_rand32() % 3);
        EpWire wire = (trial / 4) % 2 ? EP_WIRE_FP8 : EP_WIRE_F32; /* both formats on every rank count */
        Job j;
        DiEplbPlan plan;
        random_plan(d->n_layers, E, P, extra, &plan);
        CHECK_MSG(job_open(&j, n_ranks, (int)wire) == 0 && di_ep_apply_plan(j.ep, &plan) == 0, "%s", di_error_message());
        fp8_trials += ep_traffic(j.ep)->wire == EP_WIRE_FP8;
        fp8_asked += wire == EP_WIRE_FP8;
        fill(f, n * D);
        CHECK_MSG(forward(engine_model, NULL, L, f, n, want, sel) == 0, "%s", di_error_message());
        const MoeExecutor *ep_exec = engine_model->moe_exec; /* ep_attach installed it */
        CHECK(ep_exec != NULL);
        EpTraffic before = *ep_traffic(j.ep);
        CHECK_MSG(forward(engine_model, ep_exec, L, f, n, got, NULL) == 0, "%s", di_error_message());
        CHECK_MSG(memcmp(got, want, (size_t)(n * D) * 4) == 0, "trial %d: %d ranks, layer %d, %lld tokens, %s rows: combine differs",
                  trial, n_ranks, L, (long long)n, ep_wire_name(wire));
        EpPlacement pl;
        CHECK(ep_placement_build(plan.num_layers, E, plan.num_replicas, P, 1, plan.phy2log, plan.phy_rank, &pl) == 0);
        int used;
        int64_t bytes = expected_bytes(&pl, L, sel, n, top_k, n_ranks, wire == EP_WIRE_FP8 ? D + D / 32 : 4 * D, &used);
        CHECK_EQ_INT(ep_traffic(j.ep)->dispatch_bytes - before.dispatch_bytes, bytes);
        CHECK_EQ_INT(ep_traffic(j.ep)->remote_asg - before.remote_asg, n * top_k);
        idle_ranks += used < P;
        for (int64_t t = 0; t < n; t++)
            for (int i = 0; i < top_k; i++) replicated += pl.nrep[L * E + sel[t * top_k + i]] > 1 && t % pl.nrep[L * E + sel[t * top_k + i]];
        ep_placement_free(&pl);
        di_eplb_plan_free(&plan);
        job_close(&j);
    }
    CHECK_MSG(idle_ranks > 0, "some trial left a rank without tokens");
    CHECK_MSG(replicated > 0, "some row went to a replica other than the first");
    CHECK(fp8_asked > 0 && fp8_asked < TRIALS);
    CHECK_EQ_INT(fp8_trials, fp8_asked);
    free(f);
    free(want);
    free(got);
    free(sel);
}

TEST(replan_between_calls_keeps_results) {
    const ModelDims *d = &engine_model->d;
    int64_t D = d->dim, n = 7;
    float *f = malloc((size_t)(n * D) * 4), *want = malloc((size_t)(n * D) * 4), *got = malloc((size_t)(n * D) * 4);
    Job j;
    CHECK_MSG(job_open(&j, 4, -1) == 0, "%s", di_error_message());
    CHECK_EQ_INT(ep_traffic(j.ep)->wire, EP_WIRE_FP8); /* the ref numerics' default */
    const MoeExecutor *ep_exec = engine_model->moe_exec;
    for (int round = 0; round < 4; round++) {
        DiEplbPlan plan;
        random_plan(d->n_layers, d->n_experts, 3, (d->n_experts + 2) / 3 * 3 - d->n_experts + 3 * round, &plan);
        CHECK_MSG(di_ep_apply_plan(j.ep, &plan) == 0, "%s", di_error_message());
        di_eplb_plan_free(&plan);
        for (int L = 0; L < d->n_layers; L++) {
            fill(f, n * D);
            CHECK(forward(engine_model, NULL, L, f, n, want, NULL) == 0);
            CHECK_MSG(forward(engine_model, ep_exec, L, f, n, got, NULL) == 0, "%s", di_error_message());
            CHECK_MSG(memcmp(got, want, (size_t)(n * D) * 4) == 0, "round %d layer %d differs", round, L);
        }
    }
    CHECK_EQ_INT(ep_traffic(j.ep)->plans, 4);
    job_close(&j);
    free(f);
    free(want);
    free(got);
}

TEST(plan_that_does_not_fit_is_refused) {
    const ModelDims *d = &engine_model->d;
    Job j;
    CHECK_MSG(job_open(&j, 3, -1) == 0, "%s", di_error_message());
    DiEplbPlan plan;
    random_plan(d->n_layers, d->n_experts, 3, 3 - d->n_experts % 3, &plan); /* 3 expert ranks, the job has 2 */
    CHECK(di_ep_apply_plan(j.ep, &plan) == -1);
    CHECK(strstr(di_error_message(), "expert ranks") != NULL);
    di_eplb_plan_free(&plan);
    random_plan(d->n_layers, d->n_experts, 2, d->n_experts % 2, &plan);
    plan.phy_rank[0] = 7; /* a replica index past the expert's count */
    CHECK(di_ep_apply_plan(j.ep, &plan) == -1);
    CHECK(strstr(di_error_message(), "replica") != NULL);
    CHECK(di_ep_apply_plan(j.ep, NULL) == -1);
    CHECK(di_ep_apply_plan(NULL, &plan) == -1);
    di_eplb_plan_free(&plan);
    job_close(&j);
}

TEST(rank_refuses_an_expert_it_does_not_hold) {
    const ModelDims *d = &engine_model->d;
    Job j;
    CHECK_MSG(job_open(&j, 3, EP_WIRE_F32) == 0, "%s", di_error_message()); /* the payload below is float32 */
    const DiEplbPlan *plan = di_ep_current_plan(j.ep);
    CHECK(plan != NULL);
    int e = plan->phy2log[plan->num_replicas - 1]; /* a slot of rank 2 ... */
    int e1 = -1;
    for (int x = 0; x < d->n_experts && e1 < 0; x++) /* ... and an expert rank 2 does not hold */
        if (!ep_placement_holds(&j.workers[2].pl, 2, 0, x)) e1 = x;
    CHECK(ep_placement_holds(&j.workers[2].pl, 2, 0, e));
    CHECK(e1 >= 0);
    int64_t D = d->dim;
    uint8_t *payload = calloc(1, (size_t)(12 + 4 * D));
    memcpy(payload + 4, &e1, 4);
    EpHeader h = {EP_CMD_LAYER, 0, 1, 1, 12 + 4 * D, 4 * D};
    const void *reply;
    bool stop;
    CHECK(ep_worker_handle(&j.workers[2], &h, payload, &reply, &stop) == -1);
    CHECK(strstr(di_error_message(), "does not place on rank 2") != NULL);
    memcpy(payload + 4, &e, 4);
    CHECK_MSG(ep_worker_handle(&j.workers[2], &h, payload, &reply, &stop) == 0, "%s", di_error_message());
    h.bytes -= 4; /* a truncated payload */
    CHECK(ep_worker_handle(&j.workers[2], &h, payload, &reply, &stop) == -1);
    free(payload);
    job_close(&j);
}

/* Rank 0 sized for more rows than the expert ranks were told at INIT (the engine reserves its
 * batch after load): a rank grows its workspace for a bigger layer. */
TEST(expert_rank_grows_for_a_bigger_call) {
    const ModelDims *d = &engine_model->d;
    int64_t D = d->dim, n = 1024;
    float *f = malloc((size_t)(n * D) * 4), *want = malloc((size_t)(n * D) * 4), *got = malloc((size_t)(n * D) * 4);
    Job j;
    CHECK_MSG(job_open(&j, 2, -1) == 0, "%s", di_error_message());
    const MoeExecutor *ep_exec = engine_model->moe_exec;
    CHECK_MSG(model_reserve_rows(engine_model, n) == 0, "%s", di_error_message());
    fill(f, n * D);
    CHECK(forward(engine_model, NULL, 1, f, n, want, NULL) == 0);
    CHECK_MSG(forward(engine_model, ep_exec, 1, f, n, got, NULL) == 0, "%s", di_error_message());
    CHECK(memcmp(got, want, (size_t)(n * D) * 4) == 0);
    CHECK(worker_model->ws->rows >= n);
    job_close(&j);
    free(f);
    free(want);
    free(got);
}

TEST(single_rank_installs_no_executor) {
    Job j;
    CHECK_MSG(job_open(&j, 1, -1) == 0, "%s", di_error_message());
    CHECK(engine_model->moe_exec == NULL);
    CHECK_EQ_INT(di_ep_expert_ranks(j.ep), 1);
    job_close(&j);
}

/* Under the kvq numerics the experts multiply by unquantised rows: float32 is the default, FP8
 * is refused by rank 0 and by an expert rank, and such a job is bit-exact too. */
TEST(kvq_sends_float32_and_refuses_fp8) {
    Model *em = model_load(dir, MODE_KVQ), *wm = model_load(dir, MODE_KVQ);
    CHECK_MSG(em && wm, "%s", di_error_message());
    if (!em || !wm) return;
    Job j;
    CHECK(job_open_on(&j, 3, EP_WIRE_FP8, em, wm) == -1);
    CHECK_MSG(strstr(di_error_message(), "exact only under the ref numerics") != NULL, "%s", di_error_message());
    job_close(&j);
    size_t len = strlen(dir);
    uint8_t *msg = malloc(EP_INIT_WORDS * 8 + len);
    int64_t words[EP_INIT_WORDS] = {MODE_KVQ, 16, 0, EP_WIRE_FP8};
    memcpy(msg, words, sizeof words);
    memcpy(msg + sizeof words, dir, len);
    EpHeader h = {EP_CMD_INIT, 0, 0, 0, (int64_t)(sizeof words + len), 0};
    EpWorker w;
    ep_worker_init(&w, 1, wm);
    const void *reply;
    bool stop;
    CHECK(ep_worker_handle(&w, &h, msg, &reply, &stop) == -1);
    CHECK_MSG(strstr(di_error_message(), "exact only under the ref numerics") != NULL, "%s", di_error_message());
    words[3] = 7; /* no such format */
    memcpy(msg, words, sizeof words);
    CHECK(ep_worker_handle(&w, &h, msg, &reply, &stop) == -1);
    CHECK(strstr(di_error_message(), "dispatch format 7") != NULL);
    ep_worker_free(&w);
    free(msg);
    CHECK_MSG(job_open_on(&j, 3, -1, em, wm) == 0, "%s", di_error_message());
    CHECK_EQ_INT(ep_traffic(j.ep)->wire, EP_WIRE_F32);
    int64_t D = em->d.dim, n = 9;
    float *f = malloc((size_t)(n * D) * 4), *want = malloc((size_t)(n * D) * 4), *got = malloc((size_t)(n * D) * 4);
    const MoeExecutor *ep_exec = em->moe_exec;
    for (int L = 0; L < em->d.n_layers; L++) {
        fill(f, n * D);
        CHECK(forward(em, NULL, L, f, n, want, NULL) == 0);
        CHECK_MSG(forward(em, ep_exec, L, f, n, got, NULL) == 0, "%s", di_error_message());
        CHECK_MSG(memcmp(got, want, (size_t)(n * D) * 4) == 0, "kvq layer %d differs", L);
    }
    job_close(&j);
    free(f);
    free(want);
    free(got);
    model_free(em);
    model_free(wm);
}

int main(void) {
    if (di_tiny_default_dir(dir, sizeof dir) != 0 || di_tiny_ensure(dir) != 0) {
        fprintf(stderr, "tiny model: %s\n", di_error_message());
        return 1;
    }
    engine_model = model_load(dir, MODE_REF);
    worker_model = model_load(dir, MODE_REF);
    if (!engine_model || !worker_model) {
        fprintf(stderr, "cannot load %s: %s\n", dir, di_error_message());
        return 1;
    }
    RUN_TEST(dispatch_combine_equals_single_process_bit_for_bit);
    RUN_TEST(replan_between_calls_keeps_results);
    RUN_TEST(plan_that_does_not_fit_is_refused);
    RUN_TEST(rank_refuses_an_expert_it_does_not_hold);
    RUN_TEST(expert_rank_grows_for_a_bigger_call);
    RUN_TEST(single_rank_installs_no_executor);
    RUN_TEST(kvq_sends_float32_and_refuses_fp8);
    model_free(engine_model);
    model_free(worker_model);
    return TEST_SUMMARY();
}
