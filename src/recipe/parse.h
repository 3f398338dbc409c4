/* parse.h — the streaming output parser (recipe.md §3): decoded model text in, reasoning,
 * answer content, DSML tool calls (both dialects) with JSON arguments, JSON-mode output and stop
 * sequences out.
 *
 * It is the state machine of deepseek-recipe `stream/state_machine.rs`: each stage has an
 * ordered list of patterns matched incrementally (KMP); bytes that may still become a marker
 * are held back, everything else is applied at once.  So the result is identical however the
 * text is split into chunks, and partial markers never leak into content. */
#ifndef DI_RECIPE_PARSE_H
#define DI_RECIPE_PARSE_H

#include "recipe/render_json.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    DI_PARSE_START_CONTENT = 0,      /* answer, leading newlines dropped (non-thinking) */
    DI_PARSE_START_REASONING,        /* new reasoning, leading newlines dropped (thinking) */
    DI_PARSE_CONTINUE_REASONING,     /* prefix continuation inside reasoning (newlines kept) */
    DI_PARSE_CONTINUE_CONTENT,       /* prefix continuation inside the answer (newlines kept) */
} DiParseStart;

typedef struct {
    bool parse_tool_calls;       /* tools present and tool_choice != none; default true */
    bool starts_in_tool_calls;   /* tool_choice required: the prompt opened the block */
    bool parse_json_output;      /* response_format json_object */
    DiParseStart start;
    const char *const *stop_sequences; /* borrowed for di_output_parse_init only */
    size_t n_stop_sequences;
} DiParseOptions;

typedef struct {
    DiStr name;
    DiStr arguments; /* JSON text built incrementally: {"k": <raw>, "s": "<escaped>"} */
    bool name_done; /* the closing quote of the name was seen (protocols emit the call from here) */
    bool complete;
} DiParsedToolCall;

typedef struct {
    DiStr reasoning;
    DiStr content;
    DiParsedToolCall *calls;
    size_t n_calls, cap_calls;
    size_t n_complete_calls;
    bool stopped;               /* a stop sequence matched */
    bool extra_end_of_thinking; /* a stray </think> in the answer was dropped */
    bool content_after_finished; /* text after the tool block / stop sequence was dropped */
    int invalid_order[2];       /* the two flags in the order they first occurred (0 = none) */
    int n_invalid;
    bool in_space_run;          /* JSON mode: the last output was a replaced run (one space each) */
} DiParsedMessage;

typedef struct DiStreamParser DiStreamParser;

void di_parse_options_default(DiParseOptions *opts);
DiStreamParser *di_stream_parser_new(const DiParseOptions *opts);
void di_stream_parser_free(DiStreamParser *p);
/* Feed any piece of the output (need not end on a UTF-8 or marker boundary). */
int di_stream_parser_feed(DiStreamParser *p, const char *text, size_t len);
/* End of stream: held bytes are applied.  Further feeds are errors. */
int di_stream_parser_finish(DiStreamParser *p);
/* The message so far (complete after finish). */
const DiParsedMessage *di_stream_parser_message(const DiStreamParser *p);

/* Streaming: every addition to the message, in order, as the deltas a protocol sends
 * (recipe.md §3 "protocol projection").  TOOL_BEGIN carries the whole name and comes when the
 * name ends; TOOL_ARGS are pieces of the current call's argument JSON.  The concatenated
 * events equal the final message, however the input was split.  A non-zero return from the
 * callback fails the feed (e.g. the client went away). */
typedef enum {
    DI_PARSE_EV_REASONING = 0,
    DI_PARSE_EV_CONTENT,
    DI_PARSE_EV_TOOL_BEGIN,
    DI_PARSE_EV_TOOL_ARGS,
} DiParseEventKind;
typedef int (*DiParseEventFn)(void *ctx, DiParseEventKind kind, const char *text, size_t len);
int di_stream_parser_set_sink(DiStreamParser *p, DiParseEventFn fn, void *ctx);

#endif
