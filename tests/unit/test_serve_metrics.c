/* test_serve_metrics.c — the speculative-decoding part of /metrics: vLLM's three spec_decode
 * counters and the accepted-length histogram, rendered from hand-made backend stats and read
 * back line by line (cumulative buckets, +Inf = count, sum = accepted drafts). */
#include "test.h"

#include "serve/metrics.h"

/* The value on the line that starts with `prefix` (followed by a space), -1 when absent. */
static long long value_after(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, prefix, n) == 0 && line[n] == ' ') return atoll(line + n + 1);
    return -1;
}

TEST(spec_decode_counters_and_acceptance_histogram) {
    DiMetrics *m = di_metrics_create();
    DiBackendStats st = {0};
    /* 7 verify steps: 2 accepted nothing, 1 accepted one draft, 4 accepted three: 14 accepted */
    st.spec_drafts = 7;
    st.spec_draft_tokens = 25;
    st.spec_accepted_tokens = 14;
    st.spec_accepted_hist[0] = 2;
    st.spec_accepted_hist[1] = 1;
    st.spec_accepted_hist[3] = 4;
    DiApiBuf out = {0};
    CHECK_EQ_INT(di_metrics_render(m, &st, &out), 0);
    const char *t = out.data;
    CHECK(t != NULL);
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_num_drafts_total"), 7);
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_num_draft_tokens_total"), 25);
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_num_accepted_tokens_total"), 14);
    CHECK(strstr(t, "# TYPE deepinfer_spec_decode_acceptance_length histogram\n") != NULL);
    const int cumulative[5] = {2, 3, 3, 7, 7};
    for (int k = 0; k < 5; k++) {
        char name[96];
        snprintf(name, sizeof name, "deepinfer_spec_decode_acceptance_length_bucket{le=\"%d\"}", k);
        CHECK_EQ_INT((int)value_after(t, name), cumulative[k]);
    }
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_acceptance_length_bucket{le=\"16\"}"), 7);
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_acceptance_length_bucket{le=\"+Inf\"}"), 7);
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_acceptance_length_sum"), 14);
    CHECK_EQ_INT((int)value_after(t, "deepinfer_spec_decode_acceptance_length_count"), 7);
    di_api_buf_free(&out);
    di_metrics_free(m);
}

int main(void) {
    RUN_TEST(spec_decode_counters_and_acceptance_histogram);
    return TEST_SUMMARY();
}
