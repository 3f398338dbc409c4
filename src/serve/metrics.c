/* metrics.c — Prometheus counters, gauges and histograms of the server (see metrics.h).
 * Bucket bounds are seconds, chosen to resolve both a fast fake backend (sub-millisecond) and
 * a real model on CPU (seconds per token, minutes per request). */
#include "serve/metrics.h"

#include "base/error.h"
#include "base/mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const double k_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                   1,      2.5,   5,      10,    30,   60,    120,  300, 600, 1800};
#define N_BOUNDS (sizeof k_bounds / sizeof k_bounds[0])

typedef struct {
    uint64_t buckets[N_BOUNDS]; /* non-cumulative counts per bound; +Inf = count */
    uint64_t count;
    double sum;
} Histogram;

/* The latency histograms: vLLM's names with the deepinfer_ prefix. */
enum { H_TTFT, H_ITL, H_E2E, H_QUEUE, H_PREFILL, H_DECODE, N_HIST };
static const char *const k_hist[N_HIST][2] = {
    {"deepinfer_time_to_first_token_seconds", "Time from accepting a request to its first output token."},
    {"deepinfer_inter_token_latency_seconds", "Time between successive output tokens of a request."},
    {"deepinfer_e2e_request_latency_seconds", "Time from accepting a request to its end."},
    {"deepinfer_request_queue_time_seconds", "Time a request waited before it was first scheduled."},
    {"deepinfer_request_prefill_time_seconds", "Time from first scheduling to the first output token."},
    {"deepinfer_request_decode_time_seconds", "Time from the first output token to the end."},
};

/* The endpoints counted by name; anything else is "other". */
static const char *const k_endpoints[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                                          "/v1/models", "/health", "/metrics", "/openapi.json", "/version",
                                          "/tokenize", "/detokenize", "other"};
#define N_ENDPOINTS (sizeof k_endpoints / sizeof k_endpoints[0])
static const int k_statuses[] = {200, 400, 401, 404, 405, 408, 413, 429, 499, 500, 501, 503, 504};
#define N_STATUSES (sizeof k_statuses / sizeof k_statuses[0])
/* vLLM's finished_reason labels, indexed by DiApiFinish (a tool call ends the output: stop). */
static const char *const k_finish[] = {"stop", "length", "stop", "abort", "error"};
#define N_FINISH (sizeof k_finish / sizeof k_finish[0])

struct DiMetrics {
    _Atomic uint64_t requests[N_ENDPOINTS][N_STATUSES + 1]; /* last column: other statuses */
    _Atomic uint64_t finished[N_FINISH];
    _Atomic int64_t prompt_tokens, cache_hit_tokens, generated_tokens, aborted, in_flight;
    pthread_mutex_t lock;
    Histogram hist[N_HIST];
};

DiMetrics *di_metrics_create(void) {
    DiMetrics *m = di_calloc(1, sizeof *m, "metrics");
    if (m) pthread_mutex_init(&m->lock, NULL);
    return m;
}

void di_metrics_free(DiMetrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void di_metrics_request(DiMetrics *m, const char *endpoint, int status) {
    if (!m) return;
    size_t e = N_ENDPOINTS - 1, s = N_STATUSES;
    for (size_t i = 0; endpoint && i + 1 < N_ENDPOINTS; i++)
        if (strcmp(endpoint, k_endpoints[i]) == 0) e = i;
    for (size_t i = 0; i < N_STATUSES; i++)
        if (k_statuses[i] == status) s = i;
    atomic_fetch_add(&m->requests[e][s], 1);
}

void di_metrics_tokens(DiMetrics *m, int64_t prompt, int64_t cache_hit, int64_t generated) {
    if (!m) return;
    atomic_fetch_add(&m->prompt_tokens, prompt);
    atomic_fetch_add(&m->cache_hit_tokens, cache_hit);
    atomic_fetch_add(&m->generated_tokens, generated);
}

static void observe(DiMetrics *m, int which, double seconds) {
    if (!m || !(seconds >= 0)) return;
    Histogram *h = &m->hist[which];
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < N_BOUNDS; i++)
        if (seconds <= k_bounds[i]) {
            h->buckets[i]++;
            break;
        }
    h->count++;
    h->sum += seconds;
    pthread_mutex_unlock(&m->lock);
}

void di_metrics_ttft(DiMetrics *m, double seconds) { observe(m, H_TTFT, seconds); }
void di_metrics_inter_token(DiMetrics *m, double seconds) { observe(m, H_ITL, seconds); }

void di_metrics_finished(DiMetrics *m, DiApiFinish finish, double e2e_seconds) {
    if (!m) return;
    if ((unsigned)finish < N_FINISH) atomic_fetch_add(&m->finished[finish], 1);
    observe(m, H_E2E, e2e_seconds);
}

void di_metrics_phases(DiMetrics *m, double queue_s, double prefill_s, double decode_s) {
    observe(m, H_QUEUE, queue_s);
    observe(m, H_PREFILL, prefill_s);
    observe(m, H_DECODE, decode_s);
}

void di_metrics_aborted(DiMetrics *m) { if (m) atomic_fetch_add(&m->aborted, 1); }
void di_metrics_in_flight(DiMetrics *m, int delta) { if (m) atomic_fetch_add(&m->in_flight, delta); }
int64_t di_metrics_in_flight_now(const DiMetrics *m) { return m ? atomic_load(&((DiMetrics *)m)->in_flight) : 0; }

static int render_histogram(DiApiBuf *out, const char *name, const char *help, const Histogram *h) {
    if (di_api_buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name) != 0) return -1;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < N_BOUNDS; i++) {
        cumulative += h->buckets[i];
        if (di_api_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, k_bounds[i], (unsigned long long)cumulative) != 0)
            return -1;
    }
    return di_api_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
                             (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

static int render_requests(DiMetrics *m, DiApiBuf *out) {
    int rc = di_api_buf_puts(out, "# HELP deepinfer_requests_total HTTP requests answered, by endpoint and status.\n"
                                  "# TYPE deepinfer_requests_total counter\n");
    for (size_t e = 0; rc == 0 && e < N_ENDPOINTS; e++)
        for (size_t s = 0; rc == 0 && s <= N_STATUSES; s++) {
            uint64_t n = atomic_load(&m->requests[e][s]);
            if (!n) continue;
            if (s < N_STATUSES)
                rc = di_api_buf_printf(out, "deepinfer_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                                       k_endpoints[e], k_statuses[s], (unsigned long long)n);
            else
                rc = di_api_buf_printf(out, "deepinfer_requests_total{endpoint=\"%s\",status=\"other\"} %llu\n",
                                       k_endpoints[e], (unsigned long long)n);
        }
    if (rc == 0)
        rc = di_api_buf_puts(out, "# HELP deepinfer_request_success_total Generation requests finished, by finish reason.\n"
                                  "# TYPE deepinfer_request_success_total counter\n");
    static const char *const labels[] = {"stop", "length", "abort", "error"};
    for (size_t l = 0; rc == 0 && l < sizeof labels / sizeof labels[0]; l++) {
        uint64_t n = 0;
        for (size_t f = 0; f < N_FINISH; f++)
            if (strcmp(k_finish[f], labels[l]) == 0) n += atomic_load(&m->finished[f]);
        rc = di_api_buf_printf(out, "deepinfer_request_success_total{finished_reason=\"%s\"} %llu\n", labels[l],
                               (unsigned long long)n);
    }
    return rc;
}

/* The KV block cache's counters (serving.md §4), when the engine has one. */
static int render_kv_cache(const DiBackendStats *st, DiApiBuf *out) {
    if (!st->kv_enabled) return 0;
    return di_api_buf_printf(
        out,
        "# HELP deepinfer_kv_cache_hit_tokens_total Prompt tokens restored from the KV block cache, by tier.\n"
        "# TYPE deepinfer_kv_cache_hit_tokens_total counter\n"
        "deepinfer_kv_cache_hit_tokens_total{tier=\"ram\"} %llu\ndeepinfer_kv_cache_hit_tokens_total{tier=\"disk\"} %llu\n"
        "# HELP deepinfer_kv_cache_lookups_total Admissions that looked up the KV block cache.\n"
        "# TYPE deepinfer_kv_cache_lookups_total counter\ndeepinfer_kv_cache_lookups_total %llu\n"
        "# HELP deepinfer_kv_cache_evictions_total Blocks evicted from RAM plus segments evicted from disk.\n"
        "# TYPE deepinfer_kv_cache_evictions_total counter\ndeepinfer_kv_cache_evictions_total %llu\n"
        "# HELP deepinfer_kv_cache_disk_bytes_total Bytes the KV block cache read from and wrote to its directory.\n"
        "# TYPE deepinfer_kv_cache_disk_bytes_total counter\n"
        "deepinfer_kv_cache_disk_bytes_total{op=\"read\"} %llu\ndeepinfer_kv_cache_disk_bytes_total{op=\"write\"} %llu\n"
        "# HELP deepinfer_kv_cache_skipped_total Corrupt records and foreign files the KV block cache skipped.\n"
        "# TYPE deepinfer_kv_cache_skipped_total counter\n"
        "deepinfer_kv_cache_skipped_total{what=\"record\"} %llu\ndeepinfer_kv_cache_skipped_total{what=\"file\"} %llu\n",
        (unsigned long long)st->kv_hit_tokens_ram, (unsigned long long)st->kv_hit_tokens_disk,
        (unsigned long long)st->kv_lookups, (unsigned long long)st->kv_evictions, (unsigned long long)st->kv_bytes_read,
        (unsigned long long)st->kv_bytes_written, (unsigned long long)st->kv_records_corrupt,
        (unsigned long long)st->kv_files_skipped);
}

/* Speculative decoding: vLLM's spec_decode counters, and the accepted drafts per verify step as
 * a histogram with one bucket per draft count. */
static int render_spec(const DiBackendStats *st, DiApiBuf *out) {
    int rc = di_api_buf_printf(
        out,
        "# HELP deepinfer_spec_decode_num_drafts_total Verify steps of a request with at least one draft.\n"
        "# TYPE deepinfer_spec_decode_num_drafts_total counter\ndeepinfer_spec_decode_num_drafts_total %llu\n"
        "# HELP deepinfer_spec_decode_num_draft_tokens_total Draft tokens verified.\n"
        "# TYPE deepinfer_spec_decode_num_draft_tokens_total counter\ndeepinfer_spec_decode_num_draft_tokens_total %llu\n"
        "# HELP deepinfer_spec_decode_num_accepted_tokens_total Draft tokens accepted.\n"
        "# TYPE deepinfer_spec_decode_num_accepted_tokens_total counter\n"
        "deepinfer_spec_decode_num_accepted_tokens_total %llu\n"
        "# HELP deepinfer_spec_decode_acceptance_length Drafts accepted per verify step.\n"
        "# TYPE deepinfer_spec_decode_acceptance_length histogram\n",
        (unsigned long long)st->spec_drafts, (unsigned long long)st->spec_draft_tokens,
        (unsigned long long)st->spec_accepted_tokens);
    uint64_t cumulative = 0;
    for (int k = 0; rc == 0 && k <= DI_MAX_DRAFT; k++) {
        cumulative += st->spec_accepted_hist[k];
        rc = di_api_buf_printf(out, "deepinfer_spec_decode_acceptance_length_bucket{le=\"%d\"} %llu\n", k,
                               (unsigned long long)cumulative);
    }
    if (rc == 0)
        rc = di_api_buf_printf(out,
                               "deepinfer_spec_decode_acceptance_length_bucket{le=\"+Inf\"} %llu\n"
                               "deepinfer_spec_decode_acceptance_length_sum %llu\n"
                               "deepinfer_spec_decode_acceptance_length_count %llu\n",
                               (unsigned long long)cumulative, (unsigned long long)st->spec_accepted_tokens,
                               (unsigned long long)cumulative);
    return rc;
}

int di_metrics_render(const DiMetrics *cm, const DiBackendStats *st, DiApiBuf *out) {
    DiMetrics *m = (DiMetrics *)cm;
    if (!m || !st || !out) return di_errorf("metrics render: NULL argument");
    int rc = render_requests(m, out);
    if (rc == 0)
        rc = di_api_buf_printf(
            out,
            "# HELP deepinfer_prompt_tokens_total Prompt tokens of finished requests.\n"
            "# TYPE deepinfer_prompt_tokens_total counter\ndeepinfer_prompt_tokens_total %lld\n"
            "# HELP deepinfer_prompt_cache_hit_tokens_total Prompt tokens served from the prefix cache.\n"
            "# TYPE deepinfer_prompt_cache_hit_tokens_total counter\ndeepinfer_prompt_cache_hit_tokens_total %lld\n"
            "# HELP deepinfer_generation_tokens_total Output tokens generated.\n"
            "# TYPE deepinfer_generation_tokens_total counter\ndeepinfer_generation_tokens_total %lld\n"
            "# HELP deepinfer_requests_aborted_total Requests aborted (client gone, timeout, shutdown).\n"
            "# TYPE deepinfer_requests_aborted_total counter\ndeepinfer_requests_aborted_total %lld\n"
            "# HELP deepinfer_requests_in_flight Generation requests accepted and not yet finished.\n"
            "# TYPE deepinfer_requests_in_flight gauge\ndeepinfer_requests_in_flight %lld\n"
            "# HELP deepinfer_queue_length Requests waiting for a batch slot.\n"
            "# TYPE deepinfer_queue_length gauge\ndeepinfer_queue_length %d\n"
            "# HELP deepinfer_running_requests Requests in the running batch.\n"
            "# TYPE deepinfer_running_requests gauge\ndeepinfer_running_requests %d\n"
            "# HELP deepinfer_num_requests_waiting Requests waiting for a batch slot (vLLM's name).\n"
            "# TYPE deepinfer_num_requests_waiting gauge\ndeepinfer_num_requests_waiting %d\n"
            "# HELP deepinfer_num_requests_running Requests in the running batch (vLLM's name).\n"
            "# TYPE deepinfer_num_requests_running gauge\ndeepinfer_num_requests_running %d\n"
            "# HELP deepinfer_kv_cache_usage_perc Fraction of the request-state pool in use (0 to 1).\n"
            "# TYPE deepinfer_kv_cache_usage_perc gauge\ndeepinfer_kv_cache_usage_perc %.6g\n"
            "# HELP deepinfer_num_preemptions_total Requests preempted by the scheduler.\n"
            "# TYPE deepinfer_num_preemptions_total counter\ndeepinfer_num_preemptions_total %llu\n"
            "# HELP deepinfer_step_seconds Engine step time.\n"
            "# TYPE deepinfer_step_seconds summary\ndeepinfer_step_seconds_sum %.9g\ndeepinfer_step_seconds_count %llu\n",
            (long long)atomic_load(&m->prompt_tokens), (long long)atomic_load(&m->cache_hit_tokens),
            (long long)atomic_load(&m->generated_tokens), (long long)atomic_load(&m->aborted),
            (long long)atomic_load(&m->in_flight), st->queued, st->running, st->queued, st->running, st->state_usage,
            (unsigned long long)st->preemptions, st->step_seconds, (unsigned long long)st->steps);
    if (rc == 0) rc = render_kv_cache(st, out);
    if (rc == 0) rc = render_spec(st, out);
    pthread_mutex_lock(&m->lock);
    for (int i = 0; rc == 0 && i < N_HIST; i++) rc = render_histogram(out, k_hist[i][0], k_hist[i][1], &m->hist[i]);
    pthread_mutex_unlock(&m->lock);
    return rc;
}
