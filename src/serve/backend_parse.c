/* backend_parse.c — parsed output events from model text (see backend_parse.h). */
#include "serve/backend_parse.h"

#include "base/error.h"
#include "base/mem.h"
#include "recipe/parse.h"

#include <stdlib.h>
#include <string.h>

struct DiOutputEvents {
    DiBackendEmit emit;
    void *user;
    DiStreamParser *parser;      /* NULL: raw prompt, every byte is answer */
    char *stop[DI_API_MAX_STOP];
    size_t n_stop;
    size_t sent_reasoning, sent_content, sent_calls, sent_args;
    bool sent_name, done;
    int64_t pending_tokens;
    DiApiLogprob *pending_lp;    /* logprobs of the pending tokens (requests with logprobs) */
    size_t n_pending_lp, cap_pending_lp;
    int64_t cache_hit_tokens; /* known after READY (the engine admits later); sent with FINISH */
};

static void emit_text(DiOutputEvents *o, DiApiEventKind kind, const char *text, size_t len) {
    if (!len && kind != DI_API_EV_TOOL_BEGIN) return;
    DiApiEvent ev = {.kind = kind, .text = text, .len = len, .tokens = o->pending_tokens,
                     .logprobs = o->pending_lp, .n_logprobs = o->n_pending_lp};
    o->pending_tokens = 0;
    o->n_pending_lp = 0;
    o->emit(o->user, &ev);
}

static void emit_finish(DiOutputEvents *o, DiApiFinish finish, const char *stop, const char *error, int status) {
    if (o->done) return;
    DiApiEvent ev = {.kind = DI_API_EV_FINISH, .finish = finish, .stop_sequence = stop, .tokens = o->pending_tokens,
                     .text = error, .len = error ? strlen(error) : 0, .http_status = status,
                     .cache_hit_tokens = o->cache_hit_tokens, .logprobs = o->pending_lp,
                     .n_logprobs = o->n_pending_lp};
    o->pending_tokens = 0;
    o->n_pending_lp = 0;
    o->done = true;
    o->emit(o->user, &ev);
}

/* The part of `s` after the first `from` bytes (NULL when there is none). */
static const char *tail(const DiStr *s, size_t from) { return s->len > from ? s->data + from : NULL; }

/* Emit what the parser added since the last call. */
static void emit_parsed(DiOutputEvents *o) {
    const DiParsedMessage *m = di_stream_parser_message(o->parser);
    emit_text(o, DI_API_EV_REASONING, tail(&m->reasoning, o->sent_reasoning), m->reasoning.len - o->sent_reasoning);
    o->sent_reasoning = m->reasoning.len;
    emit_text(o, DI_API_EV_CONTENT, tail(&m->content, o->sent_content), m->content.len - o->sent_content);
    o->sent_content = m->content.len;
    while (o->sent_calls < m->n_calls) {
        const DiParsedToolCall *c = &m->calls[o->sent_calls];
        if (!o->sent_name) {
            if (!c->name_done) return; /* a call is announced once its name is complete (recipe.md §3) */
            emit_text(o, DI_API_EV_TOOL_BEGIN, c->name.len ? c->name.data : "", c->name.len);
            o->sent_name = true;
        }
        emit_text(o, DI_API_EV_TOOL_ARGS, tail(&c->arguments, o->sent_args), c->arguments.len - o->sent_args);
        o->sent_args = c->arguments.len;
        if (!c->complete) return;
        o->sent_calls++;
        o->sent_name = false;
        o->sent_args = 0;
    }
}

/* The stop sequence that matched: the parser only says that one did, so look for each in the
 * text of the chunk that stopped it (a match may also straddle chunks: then the first). */
static const char *matched_stop(const DiOutputEvents *o, const char *text, size_t len) {
    for (size_t i = 0; i < o->n_stop; i++)
        if (text && memmem(text, len, o->stop[i], strlen(o->stop[i]))) return o->stop[i];
    return o->n_stop ? o->stop[0] : NULL;
}

DiOutputEvents *di_output_events_new(const DiApiRequest *req, DiBackendEmit emit, void *user) {
    if (!req || !emit) {
        di_errorf("output events: a request and an emit callback are required");
        return NULL;
    }
    DiOutputEvents *o = di_calloc(1, sizeof *o, "output events");
    if (!o) return NULL;
    o->emit = emit;
    o->user = user;
    for (size_t i = 0; i < req->n_stop; i++)
        if (!(o->stop[o->n_stop++] = di_strdup(req->stop[i]))) goto fail;
    if (req->conversation) {
        DiParseOptions po;
        di_parse_options_default(&po);
        po.parse_tool_calls = req->n_tools > 0 && req->tool_choice != DI_TOOL_CHOICE_NONE;
        po.starts_in_tool_calls = req->tool_choice == DI_TOOL_CHOICE_REQUIRED;
        po.parse_json_output = req->json_mode;
        po.start = di_api_parse_start(req);
        po.stop_sequences = (const char *const *)o->stop;
        po.n_stop_sequences = o->n_stop;
        if (!(o->parser = di_stream_parser_new(&po))) goto fail;
    }
    return o;
fail:
    di_output_events_free(o);
    di_error_wrap("output events");
    return NULL;
}

void di_output_events_free(DiOutputEvents *o) {
    if (!o) return;
    di_stream_parser_free(o->parser);
    free(o->pending_lp);
    for (size_t i = 0; i < o->n_stop; i++) free(o->stop[i]);
    free(o);
}

bool di_output_events_done(const DiOutputEvents *o) { return !o || o->done; }

void di_output_events_ready(DiOutputEvents *o, int64_t prompt_tokens, int64_t cache_hit_tokens) {
    if (!o || o->done) return;
    DiApiEvent ev = {.kind = DI_API_EV_READY, .prompt_tokens = prompt_tokens, .cache_hit_tokens = cache_hit_tokens};
    o->emit(o->user, &ev);
}

int di_output_events_text(DiOutputEvents *o, const char *text, size_t len, int64_t tokens) {
    if (!o) return di_errorf("output events: NULL");
    if (o->done) return 1;
    if (len && !text) return di_errorf("output events: NULL text of length %zu", len);
    o->pending_tokens += tokens;
    if (!o->parser) {
        emit_text(o, DI_API_EV_CONTENT, text, len);
        return 0;
    }
    if (!len) return 0;
    if (di_stream_parser_feed(o->parser, text, len) != 0) {
        emit_finish(o, DI_API_FINISH_ERROR, NULL, di_error_message(), 500);
        return -1;
    }
    emit_parsed(o);
    if (!di_stream_parser_message(o->parser)->stopped) return 0;
    emit_finish(o, DI_API_FINISH_STOP, matched_stop(o, text, len), NULL, 0);
    return 1;
}

void di_output_events_finish(DiOutputEvents *o, DiApiFinish finish, const char *stop, const char *error, int status) {
    if (!o || o->done) return;
    if (o->parser && finish != DI_API_FINISH_ERROR) {
        if (di_stream_parser_finish(o->parser) == 0) emit_parsed(o);
        if (di_stream_parser_message(o->parser)->stopped) { /* a stop sequence held back until the end */
            finish = DI_API_FINISH_STOP;
            if (!stop) stop = matched_stop(o, NULL, 0);
        }
    }
    emit_finish(o, finish, stop, error, status);
}

void di_output_events_cache_hits(DiOutputEvents *o, int64_t cache_hit_tokens) {
    if (o && cache_hit_tokens >= 0) o->cache_hit_tokens = cache_hit_tokens;
}

int di_output_events_logprobs(DiOutputEvents *o, const DiApiLogprob *lp, size_t n) {
    if (!o || (n && !lp)) return di_errorf("output events: bad logprobs arguments");
    if (o->done || !n) return 0;
    if (di_grow(&o->pending_lp, &o->cap_pending_lp, o->n_pending_lp + n, 16, sizeof *lp, "pending logprobs") != 0) return -1;
    memcpy(o->pending_lp + o->n_pending_lp, lp, n * sizeof *lp);
    o->n_pending_lp += n;
    return 0;
}
