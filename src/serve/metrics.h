/* metrics.h — the server's Prometheus metrics (text exposition format 0.0.4).
 *
 * Names follow vLLM's (its `vllm:` prefix becomes `deepinfer_`), so dashboards written for
 * vLLM read them: request latency histograms (time to first token, inter-token latency,
 * end-to-end, and the queue / prefill / decode phases), requests by finish reason,
 * preemptions, the request-state pool usage (vLLM's KV-cache usage), running / waiting
 * requests, prompt and generation tokens.  Besides: HTTP requests by endpoint and status,
 * prompt-cache hits, aborted and in-flight requests, engine step time.  Counters are atomics;
 * a histogram takes a short lock per sample. */
#ifndef DI_SERVE_METRICS_H
#define DI_SERVE_METRICS_H

#include "recipe/api_buf.h"
#include "serve/backend.h"

#include <stdint.h>

typedef struct DiMetrics DiMetrics;

DiMetrics *di_metrics_create(void);
void di_metrics_free(DiMetrics *m);

/* One answered HTTP request of `endpoint` (e.g. "/v1/chat/completions") with `status`. */
void di_metrics_request(DiMetrics *m, const char *endpoint, int status);
void di_metrics_tokens(DiMetrics *m, int64_t prompt, int64_t cache_hit, int64_t generated);
void di_metrics_ttft(DiMetrics *m, double seconds);
void di_metrics_inter_token(DiMetrics *m, double seconds);
/* A generation request finished with `finish` after `e2e_seconds` since it was accepted. */
void di_metrics_finished(DiMetrics *m, DiApiFinish finish, double e2e_seconds);
/* Its phases as the backend saw them (backend.h DiBackendTimes). */
void di_metrics_phases(DiMetrics *m, double queue_s, double prefill_s, double decode_s);
void di_metrics_aborted(DiMetrics *m);
void di_metrics_in_flight(DiMetrics *m, int delta);
int64_t di_metrics_in_flight_now(const DiMetrics *m);

/* Append the exposition text; the backend's gauges and counters are passed in. */
int di_metrics_render(const DiMetrics *m, const DiBackendStats *st, DiApiBuf *out);

#endif
