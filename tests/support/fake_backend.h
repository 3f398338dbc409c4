/* fake_backend.h — a deterministic stand-in for the engine, for testing the HTTP server
 * only (never linked into the product).  It implements serve/backend.h with one "engine"
 * thread that, every step, advances each running request by one scripted token, so batching,
 * queueing, aborts, timeouts and streaming behave like the real engine's, with outputs a test
 * can predict from the request:
 *   - thinking mode: reasoning "Thinking about: <last user text>", then the answer;
 *   - answer: "Echo: <last user text>" (a raw-prompt completion echoes the prompt);
 *   - "count to N" in the text: the answer is "1 2 ... N" (long streams);
 *   - tools declared, tool_choice not none, "weather" in the text: a call of the first tool
 *     with arguments {"city": "Paris"} and finish reason tool_calls;
 *   - max_tokens stops with `length`; a stop sequence inside an answer token stops there.
 * Prompt tokens = 1 + bytes of the conversation JSON / 4; a prompt seen before reports half of
 * its tokens as prompt-cache hits.  Phase times: queued until its first step, "prefill" until
 * its first token; state usage = running / max_running.  /tokenize and /detokenize: byte-level ids (0..255 bytes,
 * 256 the start of a raw prompt; bytes above 127 detokenize as ?); a chat tokenizes as its
 * conversation JSON. */
#ifndef DI_TESTS_FAKE_BACKEND_H
#define DI_TESTS_FAKE_BACKEND_H

#include "serve/backend.h"

typedef struct FakeBackend FakeBackend;

typedef struct {
    int max_running;       /* batch slots; the rest queue */
    int step_us;           /* sleep per engine step */
    int64_t context_limit;
} FakeBackendConfig;

FakeBackend *fake_backend_create(const FakeBackendConfig *cfg);
/* Aborts what is left, joins the engine thread. */
void fake_backend_destroy(FakeBackend *fb);
/* The backend.h view (model "DeepSeek-V4.1-Flash"). */
DiBackend fake_backend_interface(FakeBackend *fb);

#endif
