/* metrics.h — the server's Prometheus metrics (text exposition format 0.0.4): request
 * counters by endpoint and status, token counters (prompt, generated, prompt-cache hits),
 * queue / running gauges, aborted requests, and histograms of time to first token and
 * inter-token latency.  Counters are atomics; a histogram takes a short lock per sample. */
#ifndef DI_SERVE_METRICS_H
#define DI_SERVE_METRICS_H

#include "recipe/api_buf.h"

#include <stdint.h>

typedef struct DiMetrics DiMetrics;

DiMetrics *di_metrics_create(void);
void di_metrics_free(DiMetrics *m);

/* One finished HTTP request of `endpoint` (e.g. "/v1/chat/completions") with `status`. */
void di_metrics_request(DiMetrics *m, const char *endpoint, int status);
void di_metrics_tokens(DiMetrics *m, int64_t prompt, int64_t cache_hit, int64_t generated);
void di_metrics_ttft(DiMetrics *m, double seconds);
void di_metrics_inter_token(DiMetrics *m, double seconds);
void di_metrics_aborted(DiMetrics *m);
void di_metrics_in_flight(DiMetrics *m, int delta);
int64_t di_metrics_in_flight_now(const DiMetrics *m);

/* Append the exposition text; gauges that live elsewhere are passed in. */
int di_metrics_render(const DiMetrics *m, int queued, int running, uint64_t steps, double step_seconds, DiApiBuf *out);

#endif
