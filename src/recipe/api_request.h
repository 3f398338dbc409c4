/* api_request.h — protocol requests (OpenAI Chat Completions and Completions, OpenAI Responses,
 * Anthropic Messages) converted to one normalized request: the conversation in the shape the
 * prompt renderer takes (the `render` CLI input of architecture.md) plus sampling and parsing
 * options.  The rules follow recipe.md §4 (the official deepseek-recipe conversion); a request
 * that breaks them is rejected with the message and HTTP status the client should see.
 *
 * Why one struct for all protocols: the engine, the output parser and the server see a single
 * request type; only the first step (here) and the last (api_stream.h) know the protocol. */
#ifndef DI_RECIPE_API_REQUEST_H
#define DI_RECIPE_API_REQUEST_H

#include "recipe/parse.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DI_API_CHAT = 0,     /* POST /v1/chat/completions */
    DI_API_COMPLETIONS,  /* POST /v1/completions (raw prompt, no chat template) */
    DI_API_RESPONSES,    /* POST /v1/responses */
    DI_API_MESSAGES,     /* POST /v1/messages (Anthropic) */
} DiApiProtocol;

typedef enum { DI_TOOL_CHOICE_AUTO = 0, DI_TOOL_CHOICE_NONE, DI_TOOL_CHOICE_REQUIRED } DiApiToolChoice;

/* recipe.md §4: at most 16 stop sequences. */
#define DI_API_MAX_STOP 16
/* recipe.md §4 / ConversionOptions: the largest accepted max_tokens (both modes). */
#define DI_API_MAX_TOKENS_UPPER_BOUND 393216
/* recipe.md §4 resolve_max_tokens: defaults when the request sets none. */
#define DI_API_DEFAULT_MAX_TOKENS_CHAT 8192
#define DI_API_DEFAULT_MAX_TOKENS_THINKING 65536
#define DI_API_DEFAULT_MAX_TOKENS_THINKING_MAX 131072

/* One logit_bias entry (OpenAI: added to the token's logit before sampling). */
/* A PD prefill's progress (pd_progress; the backend fills it from engine.h DiStateProgress, the
 * same fields): its state's pages [first_final, end_final) are final and sit at byte
 * pages_at + p * page_bytes of the state_bytes the export will give at FINISH. */
typedef struct {
    int64_t n_committed;
    size_t state_bytes, pages_at, page_bytes;
    uint8_t *const *pages;
    size_t first_final, end_final;
} DiPdProgress;

typedef struct {
    int32_t token;
    float bias;
} DiApiLogitBias;

/* top_logprobs (Chat, Responses) and logprobs (Completions) are in [0, 20] (official conversion). */
#define DI_API_MAX_TOP_LOGPROBS 20
/* logit_bias values are in [-100, 100] (OpenAI). */
#define DI_API_LOGIT_BIAS_MAX 100.0

typedef struct {
    DiApiProtocol protocol;
    char *model;
    /* The render input: {"encoding","messages":[...],"tools":[...],"thinking_mode",
     * "reasoning_effort","drop_thinking"}, plus "tool_choice":"required" and
     * "response_format":{"type":"json_object"} when they apply.  NULL for DI_API_COMPLETIONS. */
    json_t *conversation;
    char *prompt;                 /* DI_API_COMPLETIONS only: the raw prompt text */
    bool stream;
    bool include_usage;           /* Chat: stream_options.include_usage */
    bool thinking;                /* thinking mode on */
    char reasoning_effort[8];     /* "" (default), "low", "high", "xhigh", "max" */
    int64_t max_tokens;           /* 0 when the request set none (see di_api_resolve_max_tokens) */
    double temperature;           /* resolved: 1.0 in thinking mode */
    double top_p;
    double presence_penalty, frequency_penalty;
    bool has_seed;
    uint64_t seed;
    char *cache_salt;             /* vLLM cache_salt: the tenant's KV block-cache salt (NULL: none) */
    /* Output and vLLM's extra sampling fields (README "Request parameters"). */
    int logprobs;                 /* -1: none; n >= 0: each token's logprob and its n best */
    int top_k;                    /* 0: off */
    double min_p;                 /* 0: off */
    double repetition_penalty;    /* 1: off */
    int64_t min_tokens;           /* EOS suppressed until this many tokens */
    bool ignore_eos;
    DiApiLogitBias *logit_bias;   /* token id -> bias in [-100, 100]; ids checked by the backend */
    size_t n_logit_bias;
    int32_t *stop_token_ids;      /* vLLM stop_token_ids: generation ends at any of them; ids
                                   * checked against the vocabulary by the backend */
    size_t n_stop_token_ids;
    char *stop[DI_API_MAX_STOP];
    size_t n_stop;
    DiApiToolChoice tool_choice;
    size_t n_tools;               /* tools left after tool_choice */
    bool json_mode;               /* response_format / text.format json_object */
    int64_t thinking_budget_tokens; /* thinking.budget_tokens (Messages, Chat): reasoning tokens
                                     * before the end of thinking is forced; -1 = none */
    bool disable_parallel_tool_use;
    json_t *echo;                 /* Responses: request settings echoed in the response object */
    json_t *custom_tools;         /* Responses: names of custom (free-text input) tools, or NULL */
    /* The output constraint as the official conversion derives it (its output_constraint,
     * api_constraint.c): kind "" (none), "json", "regex", "tool_call" or "tool_call_required",
     * and its text (compact JSON schema, "" for any JSON value; the regex; the tool list). */
    char constraint_kind[24];
    char *constraint;
    /* vLLM's structured_outputs extra: a DiConstraintType (0: none) and its text. */
    int so_type;
    char *so_text;
    /* PD workers (issue 24; set by the server, never parsed from a body, not owned, not freed).
     * pd_exact: the request's state must be exact (engine DiRequestInput.exact_state).
     * pd_export (a prefill worker's run): run the prompt less its last token, one output token,
     * and hand the exact state to pd_export(pd_user, blob, len, error) on the backend's thread
     * before FINISH (blob a heap buffer the callee owns; NULL with the cause in error).
     * pd_progress (optional, with pd_export): after each step that moved the run on, where its
     * state stands (its page pointers valid during the call only), on the backend's thread, so that the final pages stream while the prefill runs.
     * pd_state (a decode worker's request): a state received for it, imported into the engine
     * before the request is added; it must stay valid until FINISH. */
    bool pd_exact;
    void (*pd_export)(void *user, void *blob, size_t len, const char *error);
    void (*pd_progress)(void *user, const DiPdProgress *progress);
    void *pd_user;
    const void *pd_state;
    size_t pd_state_len;
} DiApiRequest;

/* Parse and validate a request body of `protocol`.  On failure returns -1 with the message
 * (di_error_message()) and sets *http_status (400 for a bad request, 413 for an over-long one,
 * 404 for an unknown model is NOT decided here: the server checks the model name). */
int di_api_request_parse(DiApiProtocol protocol, const char *body, size_t len, DiApiRequest *out,
                         int *http_status);
void di_api_request_free(DiApiRequest *req);

/* The max_tokens to run with once the prompt length is known (recipe.md §4 resolve_max_tokens):
 * the requested value, else the default of the mode, lowered to the context left, at least 1.
 * -1 with an error when prompt + requested max_tokens (or the prompt alone) exceeds the context. */
/* Where the model's output begins (the output parser's start): inside the last message when
 * it is an assistant prefix in thinking mode (its content, or its reasoning when it has no
 * content yet; as the official conversion decides), else at new reasoning (thinking mode) or
 * at the answer. */
DiParseStart di_api_parse_start(const DiApiRequest *req);

/* The DSML tool-call spec the engine enforces for a tool constraint (DI_CONSTRAINT_DSML_TOOLS,
 * grammar.h di_grammar_compile_dsml), as malloc'd JSON: the encoding's tag names, the tool
 * list, a required call pre-opened (the renderer pre-fills the block for tool_choice required /
 * named, recipe.md §2.8 example 13).  NULL naming the problem when req has no tool constraint. */
char *di_api_dsml_spec(const DiApiRequest *req);

int64_t di_api_resolve_max_tokens(const DiApiRequest *req, int64_t prompt_tokens, int64_t context_limit);

/* The text of the last user turn (what a test backend answers to); "" when none. */
const char *di_api_last_user_text(const DiApiRequest *req);

const char *di_api_protocol_name(DiApiProtocol protocol);

#endif
