/* api_stream.h — parsed model output turned into each protocol's response and SSE stream.
 *
 * The output parser (recipe.md §3) turns decoded text into ordered events: reasoning text,
 * answer text, the start of a tool call (its name), argument JSON text, and the finish.  An
 * DiApiStream consumes those events for one request and
 *   - appends the protocol's SSE events for each to a buffer (streaming), and
 *   - accumulates the complete message (reasoning, content, tool calls, usage, finish) from
 *     which the non-streaming response body is built.
 * Shapes follow recipe.md §4.1-4.3 and the official deepseek-recipe chunk generators
 * (ChatCompletionChunkGenerator, ResponsesChunkGenerator, MessagesChunkGenerator). */
#ifndef DI_RECIPE_API_STREAM_H
#define DI_RECIPE_API_STREAM_H

#include "recipe/api_buf.h"
#include "recipe/api_request.h"

#include <stdint.h>

typedef enum {
    DI_API_EV_READY = 0,   /* prompt accepted: prompt_tokens, cache_hit_tokens */
    DI_API_EV_REASONING,   /* text: reasoning (thinking) text */
    DI_API_EV_CONTENT,     /* text: answer text */
    DI_API_EV_TOOL_BEGIN,  /* text: tool name; starts tool call number (count so far) */
    DI_API_EV_TOOL_ARGS,   /* text: more argument JSON text of the current tool call */
    DI_API_EV_FINISH,      /* finish, stop_sequence, completion/reasoning tokens */
} DiApiEventKind;

typedef enum {
    DI_API_FINISH_STOP = 0,    /* EOS (or a stop sequence when stop_sequence is set) */
    DI_API_FINISH_LENGTH,      /* max_tokens reached */
    DI_API_FINISH_TOOL_CALLS,  /* at least one tool call completed */
    DI_API_FINISH_ABORT,       /* aborted (client gone, timeout, shutdown) */
    DI_API_FINISH_ERROR,       /* the backend failed; `text` says why */
} DiApiFinish;

/* A token's bytes (maybe part of a UTF-8 character) and log probability. */
typedef struct {
    const char *bytes;
    size_t len;
    float logprob;
} DiApiTokenProb;

/* One generated token's logprob and its most likely alternatives (requests with logprobs). */
typedef struct {
    DiApiTokenProb token;
    int n_top;
    DiApiTokenProb top[DI_API_MAX_TOP_LOGPROBS];
} DiApiLogprob;

typedef struct {
    DiApiEventKind kind;
    const char *text;      /* REASONING / CONTENT / TOOL_BEGIN (name) / TOOL_ARGS / FINISH (error) */
    size_t len;
    int64_t tokens;        /* tokens this text accounts for (REASONING / CONTENT / TOOL_ARGS) */
    const DiApiLogprob *logprobs; /* those tokens' logprobs when the request asked (n_logprobs of them) */
    size_t n_logprobs;
    int64_t prompt_tokens, cache_hit_tokens;   /* READY; FINISH: cache_hit_tokens > 0 replaces READY's
                                                * (a prefix cache is consulted after READY) */
    DiApiFinish finish;                        /* FINISH */
    const char *stop_sequence;                 /* FINISH: the stop sequence matched, or NULL */
    int http_status;                           /* FINISH with ERROR: the status a client should see
                                                * if nothing was sent yet (0: 500) */
} DiApiEvent;

typedef struct {
    char *id;          /* protocol call id ("call_..."/"toolu_...") */
    char *name;
    DiApiBuf args;     /* argument JSON text */
} DiApiToolCall;

/* The accumulated message of one request. */
typedef struct {
    DiApiBuf reasoning, content;
    DiApiToolCall *calls;
    size_t n_calls;
    bool finished;
    DiApiFinish finish;
    char *stop_sequence;
    char *error;
    int64_t prompt_tokens, cache_hit_tokens, completion_tokens, reasoning_tokens;
    /* Requests with logprobs: one entry per token in the Chat Completions form {token, logprob,
     * bytes, top_logprobs}; `logprobs` holds every token, `content_logprobs` those of answer text. */
    json_t *logprobs, *content_logprobs;
} DiApiOutput;

typedef struct DiApiStream DiApiStream;

/* `id` is the response id ("chatcmpl-...", "resp_...", "msg_..."), `created` unix seconds.
 * The request must outlive the stream. */
DiApiStream *di_api_stream_create(const DiApiRequest *req, const char *id, int64_t created);
void di_api_stream_free(DiApiStream *s);

/* Consume one event; when `sse` is non-NULL append the SSE bytes it produces (the final
 * FINISH also appends the terminator: `data: [DONE]` for Chat / Completions). */
int di_api_stream_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse);

/* The complete non-streaming response body (after FINISH); a new reference. */
json_t *di_api_stream_response(const DiApiStream *s);
const DiApiOutput *di_api_stream_output(const DiApiStream *s);

/* The protocol's error body: OpenAI {"error":{"message","type","param","code"}} or Anthropic
 * {"type":"error","error":{"type","message"}}; `status` chooses the error type. */
json_t *di_api_error_body(DiApiProtocol protocol, int status, const char *message);
/* The SSE form of an error in the middle of a stream (Messages: `event: error`). */
int di_api_error_sse(DiApiProtocol protocol, const char *message, DiApiBuf *sse);

const char *di_api_finish_name(DiApiFinish finish);

#endif
