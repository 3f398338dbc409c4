/* parse.c — the streaming output state machine (see parse.h; recipe.md §3 table).
 *
 * Machinery: a stage owns an ordered list of branches (pattern, next stage, matched action) and
 * an unmatched action.  Each input byte goes to the stash and to the branches in order; the
 * first branch whose pattern completes wins: the stash before the match gets the unmatched
 * action, the match gets the matched action, and the next stage starts with fresh branches.
 * At the end of each chunk everything but the longest partial match is released with the
 * unmatched action. */
#include "recipe/parse.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

typedef enum {
    STAGE_CONTENT,   /* "Common" in recipe */
    STAGE_JSON,
    STAGE_MATCHED_JSON,
    STAGE_TOOL_CALLS,
    STAGE_TOOL_NAME,
    STAGE_ARGS,
    STAGE_PARAM_NAME,
    STAGE_PARAM_TYPE,
    STAGE_PARAM_VALUE,
    STAGE_REASONING,
    STAGE_FINISHED,
} StageKind;

typedef struct {
    StageKind kind;
    bool leading; /* CONTENT / REASONING / ARGS: first element of the stage */
    bool string;  /* PARAM_VALUE: string="true" */
} Stage;

typedef enum {
    ACT_RAW,            /* answer content */
    ACT_TO_SPACE,       /* JSON mode: one space per byte */
    ACT_SKIP_EXTRA_END_THINK,
    ACT_SKIP_AFTER_FINISHED,
    ACT_SKIP,
    ACT_STOP,
    ACT_TOOL_BEGIN,
    ACT_TOOL_NAME,
    ACT_TOOL_NAME_END,
    ACT_ARGS_LABEL,     /* append `label` to the arguments */
    ACT_ARGS_RAW,       /* append the bytes, JSON-escaped when `string` */
    ACT_ARGS_END,       /* append `label`, the call is complete */
    ACT_REASONING,
    ACT_CONTENT_LABEL,  /* append `label` to the content */
} ActionKind;

typedef struct {
    ActionKind kind;
    const char *label;
    bool string;
} Action;

/* Fixed markers (state_machine.rs constants). */
enum {
    PAT_JSON_FENCE, PAT_PLAIN_FENCE, PAT_BRACE, PAT_BRACKET, PAT_JSON_END, PAT_DSML_BEGIN,
    PAT_DSML_END, PAT_CALLS_END_V4, PAT_CALLS_END_V41, PAT_THINK_END, PAT_INVOKE, PAT_QUOTE,
    PAT_PARAMETER, PAT_TYPE_TRUE, PAT_TYPE_FALSE, N_FIXED_PATTERNS
};
static const char *const fixed_patterns[N_FIXED_PATTERNS] = {
    "```json\n", "```\n", "{", "[", "\n```", "<｜DSML｜", "</｜DSML｜", "</｜DSML｜tool_calls>",
    "</｜DSML｜ calls>", "</think>", "invoke name=\"", "\"", "parameter name=\"", "true\">", "false\">",
};

typedef struct {
    char *s;
    size_t len;
    size_t *kmp; /* failure function */
} Pattern;

typedef enum { MATCH_STRING, MATCH_NEWLINES_AND_STRING, MATCH_LEADING_NEWLINE } MatchKind;

typedef struct {
    MatchKind kind;
    const Pattern *pat;
    size_t len;           /* matched prefix of pat */
    size_t newline_count; /* NEWLINES_AND_STRING: LFs right before the prefix */
    bool leading, matched; /* LEADING_NEWLINE */
    Stage next;
    Action on_match;
} Branch;

struct DiStreamParser {
    DiParseOptions opts;
    Pattern fixed[N_FIXED_PATTERNS];
    Pattern *stops;
    size_t n_stops;
    Stage stage;
    Branch *branches;
    size_t n_branches, cap_branches;
    Action on_unmatched;
    DiStr stash; /* bytes fed in this stage and not yet applied (not NUL-terminated) */
    DiParsedMessage msg;
    bool finished;
    int failed; /* an allocation failed: the message is incomplete */
    DiParseEventFn sink; /* optional: told about every addition as it happens */
    void *sink_ctx;
};

static int pattern_init(Pattern *p, const char *s, size_t len) {
    p->s = di_malloc(len + 1, "parser pattern");
    p->kmp = di_calloc(len ? len : 1, sizeof *p->kmp, "parser pattern table");
    if (!p->s || !p->kmp) return -1;
    memcpy(p->s, s, len);
    p->s[len] = '\0';
    p->len = len;
    size_t k = 0;
    for (size_t i = 1; i < len; i++) {
        while (k > 0 && s[i] != s[k]) k = p->kmp[k - 1];
        if (s[i] == s[k]) k++;
        p->kmp[i] = k;
    }
    return 0;
}

static void pattern_free(Pattern *p) {
    free(p->s);
    free(p->kmp);
}

static inline size_t kmp_next(const Pattern *p, size_t len, unsigned char byte) {
    if (len == 0) return (unsigned char)p->s[0] == byte; /* the common case: no partial match */
    while (len > 0 && (len >= p->len || (unsigned char)p->s[len] != byte)) len = p->kmp[len - 1];
    if (len < p->len && (unsigned char)p->s[len] == byte) len++;
    return len;
}

/* Feed one byte; true when the pattern just completed. */
static bool branch_feed(Branch *b, unsigned char byte) {
    switch (b->kind) {
    case MATCH_STRING:
        b->len = kmp_next(b->pat, b->len, byte);
        return b->len == b->pat->len;
    case MATCH_NEWLINES_AND_STRING:
        if (b->len == 0 && byte == '\n') {
            b->newline_count++;
        } else {
            size_t next = kmp_next(b->pat, b->len, byte);
            if (next <= b->len) b->newline_count = 0; /* the run of LFs no longer precedes a match */
            b->len = next;
        }
        return b->len == b->pat->len;
    case MATCH_LEADING_NEWLINE:
        if (b->leading) b->matched = byte == '\n';
        b->leading = false;
        return b->matched;
    }
    return false;
}

static size_t branch_matching_len(const Branch *b) {
    switch (b->kind) {
    case MATCH_STRING: return b->len;
    case MATCH_NEWLINES_AND_STRING: return b->len + b->newline_count;
    case MATCH_LEADING_NEWLINE: return b->matched ? 1 : 0;
    }
    return 0;
}

static void add_branch(DiStreamParser *p, MatchKind kind, const Pattern *pat, Stage next, Action act) {
    /* cap_branches is sized at creation for the largest stage (CONTENT with every stop). */
    Branch *b = &p->branches[p->n_branches++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->pat = pat;
    b->leading = true;
    b->next = next;
    b->on_match = act;
}

static Stage stage_of(StageKind kind, bool leading) { return (Stage){kind, leading, false}; }
static Action act(ActionKind kind) { return (Action){kind, NULL, false}; }
static Action act_label(ActionKind kind, const char *label) { return (Action){kind, label, false}; }

static void add_string(DiStreamParser *p, int pat, Stage next, Action a) {
    add_branch(p, MATCH_STRING, &p->fixed[pat], next, a);
}

static void add_stops(DiStreamParser *p) {
    for (size_t i = 0; i < p->n_stops; i++)
        add_branch(p, MATCH_STRING, &p->stops[i], stage_of(STAGE_FINISHED, false), act(ACT_STOP));
}

static void add_tool_call_begin(DiStreamParser *p) {
    add_branch(p, MATCH_NEWLINES_AND_STRING, &p->fixed[PAT_DSML_BEGIN], stage_of(STAGE_TOOL_CALLS, false),
               act(ACT_SKIP));
}

/* The branches and unmatched action of each stage: the table of recipe.md §3. */
static void enter_stage(DiStreamParser *p, Stage stage) {
    const DiParseOptions *o = &p->opts;
    p->stage = stage;
    p->n_branches = 0;
    p->stash.len = 0;
    switch (stage.kind) {
    case STAGE_CONTENT:
        if (o->parse_json_output) {
            add_string(p, PAT_JSON_FENCE, stage_of(STAGE_JSON, false), act(ACT_SKIP));
            add_string(p, PAT_PLAIN_FENCE, stage_of(STAGE_JSON, false), act(ACT_SKIP));
            add_string(p, PAT_BRACE, stage_of(STAGE_JSON, false), act_label(ACT_CONTENT_LABEL, "{"));
            add_string(p, PAT_BRACKET, stage_of(STAGE_JSON, false), act_label(ACT_CONTENT_LABEL, "["));
        } else
            add_stops(p);
        if (o->parse_tool_calls) add_tool_call_begin(p);
        if (stage.leading)
            add_branch(p, MATCH_LEADING_NEWLINE, NULL, stage_of(STAGE_CONTENT, true), act(ACT_SKIP));
        add_string(p, PAT_THINK_END, stage_of(STAGE_CONTENT, false), act(ACT_SKIP_EXTRA_END_THINK));
        p->on_unmatched = act(o->parse_json_output ? ACT_TO_SPACE : ACT_RAW);
        break;
    case STAGE_JSON:
        add_stops(p);
        add_string(p, PAT_JSON_END, stage_of(STAGE_MATCHED_JSON, false), act(ACT_SKIP));
        p->on_unmatched = act(ACT_RAW);
        break;
    case STAGE_MATCHED_JSON:
        if (o->parse_tool_calls) add_tool_call_begin(p);
        p->on_unmatched = act(ACT_TO_SPACE);
        break;
    case STAGE_TOOL_CALLS:
        add_string(p, PAT_INVOKE, stage_of(STAGE_TOOL_NAME, false), act(ACT_TOOL_BEGIN));
        add_string(p, PAT_CALLS_END_V4, stage_of(STAGE_FINISHED, false), act(ACT_SKIP));
        add_string(p, PAT_CALLS_END_V41, stage_of(STAGE_FINISHED, false), act(ACT_SKIP));
        p->on_unmatched = act(ACT_SKIP);
        break;
    case STAGE_TOOL_NAME:
        add_string(p, PAT_QUOTE, stage_of(STAGE_ARGS, true), act(ACT_TOOL_NAME_END));
        p->on_unmatched = act(ACT_TOOL_NAME);
        break;
    case STAGE_ARGS:
        add_string(p, PAT_PARAMETER, stage_of(STAGE_PARAM_NAME, false),
                   act_label(ACT_ARGS_LABEL, stage.leading ? "{\"" : ", \""));
        add_string(p, PAT_DSML_END, stage_of(STAGE_TOOL_CALLS, false),
                   act_label(ACT_ARGS_END, stage.leading ? "{}" : "}"));
        p->on_unmatched = act(ACT_SKIP);
        break;
    case STAGE_PARAM_NAME:
        add_string(p, PAT_QUOTE, stage_of(STAGE_PARAM_TYPE, false), act_label(ACT_ARGS_LABEL, "\": "));
        p->on_unmatched = (Action){ACT_ARGS_RAW, NULL, false};
        break;
    case STAGE_PARAM_TYPE:
        add_string(p, PAT_TYPE_TRUE, (Stage){STAGE_PARAM_VALUE, false, true}, act_label(ACT_ARGS_LABEL, "\""));
        add_string(p, PAT_TYPE_FALSE, (Stage){STAGE_PARAM_VALUE, false, false}, act(ACT_SKIP));
        p->on_unmatched = act(ACT_SKIP);
        break;
    case STAGE_PARAM_VALUE:
        add_string(p, PAT_DSML_END, stage_of(STAGE_ARGS, false),
                   stage.string ? act_label(ACT_ARGS_LABEL, "\"") : act(ACT_SKIP));
        p->on_unmatched = (Action){ACT_ARGS_RAW, NULL, stage.string};
        break;
    case STAGE_REASONING:
        if (o->parse_tool_calls) add_tool_call_begin(p);
        if (stage.leading)
            add_branch(p, MATCH_LEADING_NEWLINE, NULL, stage_of(STAGE_REASONING, true), act(ACT_SKIP));
        add_branch(p, MATCH_NEWLINES_AND_STRING, &p->fixed[PAT_THINK_END], stage_of(STAGE_CONTENT, true),
                   act(ACT_SKIP));
        p->on_unmatched = act(ACT_REASONING);
        break;
    case STAGE_FINISHED:
        p->on_unmatched = act(ACT_SKIP_AFTER_FINISHED);
        break;
    }
}

static void flag_invalid(DiParsedMessage *m, int which) {
    bool *flag = which == 1 ? &m->extra_end_of_thinking : &m->content_after_finished;
    if (*flag) return;
    *flag = true;
    m->invalid_order[m->n_invalid++] = which;
}

static DiParsedToolCall *current_call(DiStreamParser *p) {
    return p->msg.n_calls ? &p->msg.calls[p->msg.n_calls - 1] : NULL;
}

static int begin_call(DiStreamParser *p) {
    DiParsedMessage *m = &p->msg;
    if (di_grow(&m->calls, &m->cap_calls, m->n_calls + 1, 4, sizeof *m->calls, "parsed tool calls") != 0) return -1;
    memset(&m->calls[m->n_calls++], 0, sizeof m->calls[0]);
    return 0;
}

/* Apply an action to `len` bytes of output text (the message only; see apply). */
static int apply_action(DiStreamParser *p, Action a, const char *bytes, size_t len) {
    DiParsedMessage *m = &p->msg;
    DiParsedToolCall *call = current_call(p);
    bool was_space_run = m->in_space_run;
    m->in_space_run = a.kind == ACT_TO_SPACE;
    switch (a.kind) {
    case ACT_RAW: return di_str_append(&m->content, bytes, len);
    case ACT_TO_SPACE:
        /* JSON mode: each run of text around the JSON becomes one space, as deepseek-recipe
         * 0.2.0 does for a run it sees whole; a run split over chunks stays one space, so the
         * result does not depend on the split (recipe.md §3 leaves the replacement open). */
        return was_space_run ? 0 : di_str_append(&m->content, " ", 1);
    case ACT_SKIP_EXTRA_END_THINK: flag_invalid(m, 1); return 0;
    case ACT_SKIP_AFTER_FINISHED: flag_invalid(m, 2); return 0;
    case ACT_SKIP: return 0;
    case ACT_TOOL_NAME_END:
        if (call) call->name_done = true;
        return 0;
    case ACT_STOP: m->stopped = true; return 0;
    case ACT_TOOL_BEGIN: return begin_call(p);
    case ACT_TOOL_NAME: return call ? di_str_append(&call->name, bytes, len) : 0;
    case ACT_ARGS_LABEL: return call ? di_str_appends(&call->arguments, a.label) : 0;
    case ACT_ARGS_RAW:
        if (!call) return 0;
        return a.string ? di_json_escape_append(&call->arguments, bytes, len)
                        : di_str_append(&call->arguments, bytes, len);
    case ACT_ARGS_END:
        if (!call) return 0;
        call->complete = true;
        m->n_complete_calls++;
        return di_str_appends(&call->arguments, a.label);
    case ACT_REASONING: return di_str_append(&m->reasoning, bytes, len);
    case ACT_CONTENT_LABEL: return di_str_appends(&m->content, a.label);
    }
    return 0;
}

/* Tell the event sink what an action added to the message (one action adds to one part). */
static int notify(DiStreamParser *p, size_t content0, size_t reasoning0, const DiParsedToolCall *call,
                  size_t args0, bool name_done0) {
    const DiParsedMessage *m = &p->msg;
    if (m->reasoning.len > reasoning0)
        return p->sink(p->sink_ctx, DI_PARSE_EV_REASONING, m->reasoning.data + reasoning0, m->reasoning.len - reasoning0);
    if (m->content.len > content0)
        return p->sink(p->sink_ctx, DI_PARSE_EV_CONTENT, m->content.data + content0, m->content.len - content0);
    if (call && call->name_done && !name_done0)
        return p->sink(p->sink_ctx, DI_PARSE_EV_TOOL_BEGIN, call->name.data ? call->name.data : "", call->name.len);
    if (call && call->arguments.len > args0)
        return p->sink(p->sink_ctx, DI_PARSE_EV_TOOL_ARGS, call->arguments.data + args0, call->arguments.len - args0);
    return 0;
}

/* Apply an action to `len` bytes of output text and report what it added. */
static int apply(DiStreamParser *p, Action a, const char *bytes, size_t len) {
    const DiParsedMessage *m = &p->msg;
    size_t content0 = m->content.len, reasoning0 = m->reasoning.len;
    const DiParsedToolCall *before = current_call(p);
    size_t args0 = before ? before->arguments.len : 0;
    bool name_done0 = before && before->name_done;
    if (apply_action(p, a, bytes, len) != 0) return -1;
    if (!p->sink) return 0;
    const DiParsedToolCall *call = current_call(p);
    if (call != before) { /* a new call began: nothing of it is reported before its name ends */
        args0 = 0;
        name_done0 = false;
    }
    if (notify(p, content0, reasoning0, call, args0, name_done0) != 0)
        return di_errorf("output parser: the event consumer failed");
    return 0;
}

/* Apply the unmatched action to the first `n` stashed bytes and drop them from the stash. */
static int release(DiStreamParser *p, size_t n) {
    if (n == 0) return 0;
    if (apply(p, p->on_unmatched, p->stash.data, n) != 0) return -1;
    memmove(p->stash.data, p->stash.data + n, p->stash.len - n);
    p->stash.len -= n;
    return 0;
}

/* One input byte; the stash has room for it (reserved per chunk). */
static int feed_byte(DiStreamParser *p, unsigned char byte) {
    p->stash.data[p->stash.len++] = (char)byte;
    for (size_t i = 0; i < p->n_branches; i++) {
        Branch *b = &p->branches[i];
        if (!branch_feed(b, byte)) continue;
        size_t match_len = branch_matching_len(b);
        Stage next = b->next;
        Action on_match = b->on_match;
        size_t before = p->stash.len - match_len;
        if (before > 0 && apply(p, p->on_unmatched, p->stash.data, before) != 0) return -1;
        if (match_len > 0 && apply(p, on_match, p->stash.data + before, match_len) != 0) return -1;
        enter_stage(p, next);
        return 0;
    }
    return 0;
}

int di_stream_parser_feed(DiStreamParser *p, const char *text, size_t len) {
    if (!p || (!text && len)) return di_errorf("output parser: invalid argument");
    if (p->finished) return di_errorf("output parser: feed after finish");
    if (p->failed) return di_errorf("output parser: an earlier feed failed");
    if (di_str_reserve(&p->stash, len) != 0) goto fail;
    for (size_t i = 0; i < len; i++)
        if (feed_byte(p, (unsigned char)text[i]) != 0) goto fail;
    size_t held = 0;
    for (size_t i = 0; i < p->n_branches; i++) {
        size_t n = branch_matching_len(&p->branches[i]);
        if (n > held) held = n;
    }
    if (held < p->stash.len && release(p, p->stash.len - held) != 0) goto fail;
    return 0;
fail:
    p->failed = 1;
    return di_error_wrap("output parser");
}

int di_stream_parser_finish(DiStreamParser *p) {
    if (!p) return di_errorf("output parser: invalid argument");
    if (p->finished) return 0;
    if (p->failed) return di_errorf("output parser: an earlier feed failed");
    p->finished = true;
    if (release(p, p->stash.len) != 0) return di_error_wrap("output parser");
    return 0;
}

const DiParsedMessage *di_stream_parser_message(const DiStreamParser *p) { return p ? &p->msg : NULL; }

int di_stream_parser_set_sink(DiStreamParser *p, DiParseEventFn fn, void *ctx) {
    if (!p) return di_errorf("output parser: NULL parser");
    p->sink = fn;
    p->sink_ctx = ctx;
    return 0;
}

void di_parse_options_default(DiParseOptions *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->parse_tool_calls = true;
}

static Stage initial_stage(const DiParseOptions *o) {
    if (o->starts_in_tool_calls) return stage_of(STAGE_TOOL_CALLS, false);
    switch (o->start) {
    case DI_PARSE_START_REASONING: return stage_of(STAGE_REASONING, true);
    case DI_PARSE_CONTINUE_REASONING: return stage_of(STAGE_REASONING, false);
    case DI_PARSE_CONTINUE_CONTENT: return stage_of(STAGE_CONTENT, false);
    case DI_PARSE_START_CONTENT: break;
    }
    return stage_of(STAGE_CONTENT, true);
}

DiStreamParser *di_stream_parser_new(const DiParseOptions *opts) {
    if (!opts || (!opts->stop_sequences && opts->n_stop_sequences)) {
        di_errorf("output parser: invalid options");
        return NULL;
    }
    DiStreamParser *p = di_calloc(1, sizeof *p, "output parser");
    if (!p) return NULL;
    p->opts = *opts;
    p->opts.stop_sequences = NULL; /* borrowed; copied into p->stops below */
    for (int i = 0; i < N_FIXED_PATTERNS; i++)
        if (pattern_init(&p->fixed[i], fixed_patterns[i], strlen(fixed_patterns[i])) != 0) goto fail;
    if (opts->n_stop_sequences) {
        p->stops = di_calloc(opts->n_stop_sequences, sizeof *p->stops, "stop sequences");
        if (!p->stops) goto fail;
    }
    for (size_t i = 0; i < opts->n_stop_sequences; i++) {
        const char *s = opts->stop_sequences[i];
        if (!s) {
            di_errorf("output parser: stop sequence %zu is NULL", i);
            goto fail;
        }
        if (!*s) continue; /* empty sequences are discarded (state_machine.rs) */
        if (pattern_init(&p->stops[p->n_stops++], s, strlen(s)) != 0) goto fail;
    }
    p->cap_branches = 8 + p->n_stops;
    p->branches = di_calloc(p->cap_branches, sizeof *p->branches, "parser branches");
    if (!p->branches) goto fail;
    enter_stage(p, initial_stage(&p->opts));
    return p;
fail:
    di_stream_parser_free(p);
    return NULL;
}

void di_stream_parser_free(DiStreamParser *p) {
    if (!p) return;
    for (int i = 0; i < N_FIXED_PATTERNS; i++) pattern_free(&p->fixed[i]);
    for (size_t i = 0; i < p->n_stops; i++) pattern_free(&p->stops[i]);
    free(p->stops);
    free(p->branches);
    di_str_free(&p->stash);
    di_str_free(&p->msg.reasoning);
    di_str_free(&p->msg.content);
    for (size_t i = 0; i < p->msg.n_calls; i++) {
        di_str_free(&p->msg.calls[i].name);
        di_str_free(&p->msg.calls[i].arguments);
    }
    free(p->msg.calls);
    free(p);
}
