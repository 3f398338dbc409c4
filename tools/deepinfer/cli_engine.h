/* cli_engine.h — what `deepinfer generate` and `deepinfer chat` share: the model directory as
 * architecture.md resolves it, the model's tokenizer as the engine's text hooks, the Engram
 * compressed-token map (model-v41.md §5.2 a) handed to the engine, the sampling flags, and the
 * rendering of a conversation to prompt ids with the V4.1 encoding.  One place, so the two
 * commands cannot drift apart. */
#ifndef DI_TOOLS_CLI_ENGINE_H
#define DI_TOOLS_CLI_ENGINE_H

#include "deepinfer.h"
#include "engine/engine.h"

#include <jansson.h>
#include <stdbool.h>

typedef struct {
    char dir[4096];       /* the resolved model directory */
    bool builtin;         /* the built-in tiny model (synthetic Engram map allowed) */
    DiTokenizer *tok;     /* DIR/tokenizer.json, NULL when the directory has none */
    int32_t *engram_map;  /* handed to the engine; NULL: the engine's own rule */
    int64_t engram_map_len;
    DiEngine *engine;
} CliModel;

/* Speculative decoding flags (DiEngineOptions.draft_max, draft_schedule; -1: the defaults). */
typedef struct {
    int max, schedule;
} CliDraft;

#define CLI_DRAFT_DEFAULTS {-1, -1}

/* An integer in [lo, hi] (the whole string); 0, or -1 when it is not one. */
int cli_parse_long(const char *s, long lo, long hi, long *out);

/* --draft-max N (0..16) and --draft-schedule fixed|confidence, for generate, chat and serve.
 * Returns 1 when `opt` is one of them (*bad set when the value is invalid), 0 otherwise. */
int cli_draft_flag(const char *opt, const char *val, CliDraft *d, int *bad);
extern const char cli_draft_help[];

/* Resolve --model (NULL: $DEEPINFER_HF_MODEL_DIR, else the built-in tiny model), load its
 * tokenizer and Engram map (engram_opt: --engram-map FILE | "synthetic" | NULL) and, unless
 * want_engine is false, create the engine with the text hooks installed and the draft settings
 * (NULL: defaults).  -1 with the cause. */
int cli_model_open(CliModel *m, const char *model_opt, const char *engram_opt, bool want_engine, const CliDraft *draft);
/* A hook every later cli_model_open's engine calls on its model at load (engine.h DiModelHook;
 * NULL: none): `--expert-parallel` attaches the MPI expert ranks there. */
void cli_set_model_hook(DiModelHook hook, void *ctx);
void cli_model_close(CliModel *m);

/* The Engram map of a tokenizer.json as one JSON line {"ids": n, "keys": k, "map": [...]}. */
int cli_print_engram_map(const char *tokenizer_json);

/* Sampling flags shared by generate and chat: --max-tokens --temperature --top-k --top-p
 * --min-p --seed --ignore-eos(value 0|1).  Returns 1 when `opt` is one of them (*bad set when
 * the value is invalid), 0 otherwise. */
int cli_sampling_flag(const char *opt, const char *val, DiSamplingParams *p, int *bad);
/* The CLI's sampling defaults: greedy, seed 0 (reproducible), max_tokens as given. */
void cli_sampling_defaults(DiSamplingParams *p, int max_tokens);
/* The help lines of those flags. */
extern const char cli_sampling_help[];

/* {"role": role, "content": content}; NULL with an error when content is not valid UTF-8. */
json_t *cli_message(const char *role, const char *content);

/* messages (a JSON array of {"role", "content"[, "reasoning_content"]}) -> prompt ids with the
 * V4.1 encoding, thinking or chat mode, the assistant turn opened.  *ids: free(). */
int cli_render_ids(const DiTokenizer *tok, json_t *messages, bool thinking, int32_t **ids, size_t *n_ids);

/* Streams one request's output: ids (space-separated) or text to stdout; in chat mode the text
 * goes through the output parser (recipe.md §3): the answer to stdout, the reasoning to stderr,
 * so stdout holds the answer alone. */
typedef struct {
    bool ids, chat;
    int n_ids;
    struct DiStreamParser *parser;
} CliPrinter;

int cli_printer_init(CliPrinter *p, bool ids, bool chat, bool thinking);
/* The engine's stream callback (user = the CliPrinter). */
void cli_printer_on_delta(void *user, const DiStreamDelta *d);
/* End of output: a final newline; in chat mode the parsed reasoning and answer (owned by the
 * printer, valid until cli_printer_free; NULL when not chat). */
int cli_printer_finish(CliPrinter *p, const char **reasoning, const char **content);
void cli_printer_free(CliPrinter *p);

double cli_now_s(void);

/* For a server command: block SIGTERM and SIGINT in *set (threads started after inherit the
 * mask; the command sigwait()s on it) and ignore SIGPIPE. */
#include <signal.h>
void cli_block_stop_signals(sigset_t *set);

#endif
