/* test_eplb_live.c — the live EPLB driver (cluster/eplb_live.h): it replans at the configured
 * steps (the first full window, then every period end) and hands each new plan to the apply
 * callback at that step; under a skewed (Zipf) load the plan's window moe_lb is lower than the
 * identity placement's, whose value is derived here by hand; bad input and a failing apply are
 * reported with their cause; the Prometheus text carries every layer's moe_lb and the counters. */
#include "test.h"

#include "base/error.h"
#include "cluster/eplb_live.h"

#include <stdlib.h>
#include <string.h>

enum { L = 2, E = 8, P = 4, WINDOW = 3, PERIOD = 6 };

typedef struct {
    DiEplbLive *live;
    int calls, fail;
    int64_t at[16]; /* the driver's step count at each apply */
    int replicas_ok;
} Applied;

static int apply(void *user, const DiEplbPlan *plan) {
    Applied *a = user;
    DiEplbLiveStats st;
    di_eplb_live_stats(a->live, &st, NULL);
    if (a->calls < 16) a->at[a->calls] = st.steps;
    a->calls++;
    a->replicas_ok += plan->num_layers == L && plan->num_logical == E && plan->num_gpus == P && plan->num_replicas == E + P;
    return a->fail ? di_errorf("test: the ranks refuse the plan") : 0;
}

static DiEplbLiveConfig config(Applied *a) {
    DiEplbLiveConfig c = {{L, E, 1, 1, P, 1, WINDOW, PERIOD, 0}, apply, a};
    return c;
}

/* Zipf (s = 1) over the experts, layer 1 reversed so the layers differ. */
static void zipf(int64_t *t) {
    for (int l = 0; l < L; l++)
        for (int e = 0; e < E; e++) t[l * E + e] = 1000 / (l == 0 ? e + 1 : E - e);
}

/* A driver on config(a) into a->live, t the Zipf load; -1 (a failed check) when it cannot start. */
static int start(Applied *a, int64_t *t) {
    DiEplbLiveConfig c = config(a);
    a->live = di_eplb_live_create(&c);
    CHECK_MSG(a->live != NULL, "%s", di_last_error());
    zipf(t);
    return a->live ? 0 : -1;
}

TEST(the_driver_replans_at_the_window_and_every_period) {
    Applied a = {0};
    int64_t t[L * E];
    if (start(&a, t) != 0) return;
    for (int s = 0; s < 20; s++) CHECK_EQ_INT(di_eplb_live_record(a.live, t, L, E), 0);
    /* steps 3 (the first window), 6, 12, 18 (period ends); apply runs after the step is counted */
    CHECK_EQ_INT(a.calls, 4);
    const int64_t want[4] = {3, 6, 12, 18};
    for (int i = 0; i < 4 && i < a.calls; i++) CHECK_EQ_INT(a.at[i], want[i]);
    CHECK_EQ_INT(a.replicas_ok, 4);
    DiEplbLiveStats st;
    double per_layer[L];
    CHECK_EQ_INT(di_eplb_live_stats(a.live, &st, per_layer), 0);
    CHECK_EQ_INT(st.steps, 20);
    CHECK_EQ_INT(st.replans, 4);
    CHECK(st.moved_slots > 0); /* the first plan from load moves experts off the uniform start plan */
    /* identity: rank g holds experts 2g, 2g+1; layer 0 loads 1000 500 333 250 200 166 142 125
     * -> ranks 1500, 583, 366, 267 (mean 679); layer 1 is the mirror image: same max and mean */
    CHECK_NEAR(st.moe_lb_identity, 1500.0 / 679.0, 1e-9);
    CHECK_MSG(st.moe_lb < st.moe_lb_identity * 0.8, "EPLB window moe_lb %.4f vs identity %.4f", st.moe_lb, st.moe_lb_identity);
    for (int l = 0; l < L; l++) CHECK_MSG(per_layer[l] >= 1.0 && per_layer[l] < 1.5, "layer %d: %.4f", l, per_layer[l]);
    di_eplb_live_destroy(a.live);
}

TEST(bad_input_and_a_failing_apply_are_errors_with_their_cause) {
    Applied a = {0};
    int64_t t[L * E];
    if (start(&a, t) != 0) return;
    CHECK_EQ_INT(di_eplb_live_record(a.live, t, L, E - 1), -1);
    CHECK(strstr(di_last_error(), "2 layers x 7 experts") != NULL);
    t[3] = -1;
    CHECK_EQ_INT(di_eplb_live_record(a.live, t, L, E), -1);
    CHECK(strstr(di_last_error(), "negative count") != NULL);
    zipf(t);
    a.fail = 1;
    CHECK_EQ_INT(di_eplb_live_record(a.live, t, L, E), 0);
    CHECK_EQ_INT(di_eplb_live_record(a.live, t, L, E), 0);
    CHECK_EQ_INT(di_eplb_live_record(a.live, t, L, E), -1); /* step 3 replans; the ranks refuse */
    CHECK(strstr(di_last_error(), "refuse the plan") != NULL);
    DiEplbLiveStats st;
    di_eplb_live_stats(a.live, &st, NULL);
    CHECK_EQ_INT(st.apply_failures, 1);
    CHECK_EQ_INT(st.steps, 3); /* the refused inputs were not recorded */
    di_eplb_live_destroy(a.live);
    DiEplbLiveConfig bad = config(&a);
    bad.policy.window_steps = PERIOD + 1;
    CHECK(di_eplb_live_create(&bad) == NULL);
    CHECK(strstr(di_last_error(), "must not exceed the period") != NULL);
    CHECK(di_eplb_live_create(NULL) == NULL);
}

TEST(the_metrics_text_names_every_layer_and_the_counters) {
    Applied a = {0};
    int64_t t[L * E];
    if (start(&a, t) != 0) return;
    for (int s = 0; s < 7; s++) di_eplb_live_record(a.live, t, L, E);
    DiApiBuf buf = {0};
    CHECK_EQ_INT(di_eplb_live_metrics(a.live, &buf), 0);
    const char *text = buf.data ? buf.data : "";
    CHECK(strstr(text, "# TYPE deepinfer_moe_lb gauge\n") != NULL);
    CHECK(strstr(text, "deepinfer_moe_lb{layer=\"0\"} ") != NULL);
    CHECK(strstr(text, "deepinfer_moe_lb{layer=\"1\"} ") != NULL);
    CHECK(strstr(text, "deepinfer_moe_lb{layer=\"2\"}") == NULL);
    CHECK(strstr(text, "deepinfer_eplb_replans_total 2\n") != NULL);
    CHECK(strstr(text, "deepinfer_eplb_steps_total 7\n") != NULL);
    CHECK(strstr(text, "deepinfer_eplb_ranks 4\n") != NULL);
    CHECK(strstr(text, "deepinfer_moe_lb_identity 2.209131\n") != NULL);
    /* the layers are mirror images under mirrored loads: both quantiles are that one value */
    const char *q50 = strstr(text, "deepinfer_moe_lb_layers{quantile=\"0.5\"} "), *l0 = strstr(text, "deepinfer_moe_lb{layer=\"0\"} ");
    CHECK(q50 && l0 && strstr(text, "deepinfer_moe_lb_layers{quantile=\"0.99\"} ") != NULL);
    if (q50 && l0) CHECK_NEAR(strtod(strchr(q50, '}') + 2, NULL), strtod(strchr(l0, '}') + 2, NULL), 1e-6);
    di_api_buf_free(&buf);
    di_eplb_live_destroy(a.live);
}

int main(void) {
    RUN_TEST(the_driver_replans_at_the_window_and_every_period);
    RUN_TEST(bad_input_and_a_failing_apply_are_errors_with_their_cause);
    RUN_TEST(the_metrics_text_names_every_layer_and_the_counters);
    return TEST_SUMMARY();
}
