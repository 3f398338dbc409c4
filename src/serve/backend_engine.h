/* backend_engine.h — the server's backend (backend.h) over the engine's C API
 * (include/deepinfer.h "engine").
 *
 * The engine is single-threaded by contract, so the adapter owns one engine thread: it takes
 * submitted requests and aborts from queues, adds them to the engine, steps it while anything
 * runs, and turns each streamed text delta into parsed output events with the recipe's
 * streaming output parser (recipe/parse.h: reasoning, answer, DSML tool calls, JSON mode, stop
 * sequences — stop sequences apply to the answer only, recipe.md §3).
 *
 * Prompts: with the model's text (backend_text.h) the adapter renders a chat conversation, or
 * tokenizes a raw /v1/completions prompt, on the submitting (HTTP) thread, so the engine thread
 * only steps the model and an over-long prompt is refused with 400 before the request is
 * accepted, and hands the engine prompt ids.  Without it (the engine's test mock, which has its own byte-level text)
 * the engine gets the conversation as chat_json or the raw prompt text. */
#ifndef DI_SERVE_BACKEND_ENGINE_H
#define DI_SERVE_BACKEND_ENGINE_H

#include "deepinfer.h"
#include "serve/backend.h"
#include "serve/backend_text.h"

typedef struct DiEngineBackend DiEngineBackend;

typedef struct {
    const char *model_name;   /* reported by /v1/models and checked against requests */
    int64_t context_limit;    /* prompt + output tokens one request may hold */
    const DiServeText *text;  /* the model's tokenizer + template, or NULL (see above); not owned,
                               * must outlive the backend, hooks already installed on the engine */
    int block_tokens;         /* the KV block cache's block size, reported to a gateway; 0: none */
} DiEngineBackendConfig;

/* Takes ownership of `engine` (destroyed with the backend). */
DiEngineBackend *di_engine_backend_create(DiEngine *engine, const DiEngineBackendConfig *cfg);
/* Aborts what is left (each request gets its FINISH), joins the thread, destroys the engine. */
void di_engine_backend_destroy(DiEngineBackend *b);
DiBackend di_engine_backend_interface(DiEngineBackend *b);

#endif
