/* api_stream_internal.h — the state shared by the per-protocol encoders of api_stream.c,
 * api_stream_responses.c and api_stream_messages.c.  Not a public header. */
#ifndef DI_RECIPE_API_STREAM_INTERNAL_H
#define DI_RECIPE_API_STREAM_INTERNAL_H

#include "recipe/api_stream.h"

typedef enum { BLOCK_NONE = 0, BLOCK_REASONING, BLOCK_TEXT, BLOCK_TOOL, BLOCK_CUSTOM_TOOL } BlockKind;

struct DiApiStream {
    const DiApiRequest *req;
    char *id;
    int64_t created;
    DiApiOutput out;
    bool started;        /* the opening events have been sent */
    BlockKind open;      /* the block / output item being streamed */
    int block_index;     /* its index (Messages content index, Responses output_index) */
    int n_blocks;        /* blocks / items opened so far */
    int64_t seq;         /* Responses sequence_number */
    json_t *items;       /* Responses: finished output items, in order */
    size_t custom_sent;  /* Responses custom tool call: bytes of its input already sent */
    json_t *ev_logprobs; /* the current event's token logprobs (Chat form), or NULL */
    size_t lp_offset;    /* Completions: text_offset of the next token */
};

/* Append "data: <json>\n\n" (and "event: <name>\n" first when name is non-NULL); steals `payload`. */
int di_api_sse_send(DiApiBuf *sse, const char *event_name, json_t *payload);

/* Per-protocol event handlers; `sse` may be NULL (non-streaming: accumulate only). */
int di_api_chat_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse);
int di_api_responses_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse);
int di_api_messages_event(DiApiStream *s, const DiApiEvent *ev, DiApiBuf *sse);
json_t *di_api_chat_response(const DiApiStream *s);
json_t *di_api_responses_response(const DiApiStream *s, const char *status);
json_t *di_api_messages_response(const DiApiStream *s);

/* A fresh tool-call id "call_<index>_<24 random alphanumerics>" (the official spelling). */
char *di_api_new_call_id(size_t index);
/* The JSON string of a text slice (NULL on allocation failure). */
json_t *di_api_text(const char *text, size_t len);

/* api_stream_logprobs.c: DiApiLogprob -> Chat-form entries; entries -> the Completions form
 * (text offsets continue from *text_offset); the event's logprobs into s->ev_logprobs and the
 * output's lists. */
json_t *di_api_logprob_entries(const DiApiLogprob *lp, size_t n);
json_t *di_api_completions_logprobs(const json_t *entries, size_t *text_offset);
int di_api_logprobs_accumulate(DiApiStream *s, const DiApiEvent *ev);

#endif
