/* backend_engine.h — the server's backend (backend.h) over the engine's C API
 * (include/deepinfer.h "engine").
 *
 * The engine is single-threaded by contract, so the adapter owns one engine thread: it takes
 * submitted requests and aborts from queues, adds them to the engine, steps it while anything
 * runs, and turns each streamed text delta into parsed output events with the recipe's
 * streaming output parser (recipe/parse.h: reasoning, answer, DSML tool calls, JSON mode, stop
 * sequences — stop sequences apply to the answer only, recipe.md §3).  Chat protocols hand the
 * engine the conversation (the render input) as chat_json; /v1/completions hands it the raw
 * prompt text. */
#ifndef DI_SERVE_BACKEND_ENGINE_H
#define DI_SERVE_BACKEND_ENGINE_H

#include "deepinfer.h"
#include "serve/backend.h"

typedef struct DiEngineBackend DiEngineBackend;

typedef struct {
    const char *model_name;   /* reported by /v1/models and checked against requests */
    int64_t context_limit;    /* prompt + output tokens one request may hold */
} DiEngineBackendConfig;

/* Takes ownership of `engine` (destroyed with the backend). */
DiEngineBackend *di_engine_backend_create(DiEngine *engine, const DiEngineBackendConfig *cfg);
/* Aborts what is left (each request gets its FINISH), joins the thread, destroys the engine. */
void di_engine_backend_destroy(DiEngineBackend *b);
DiBackend di_engine_backend_interface(DiEngineBackend *b);

#endif
