/* backend_engine.c — the engine behind the HTTP server (see backend_engine.h).
 *
 * Threads: submit / abort / stats run on the HTTP thread and only touch the queues and the
 * stats snapshot under `lock`; everything that calls the engine runs on the engine thread.
 * A job lives from submit until its FINISH event; the engine request it maps to is released
 * after the step that finished it. */
#include "serve/backend_engine.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "serve/backend_parse.h"

#include <stdio.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Job {
    uint64_t id;                 /* the id the server knows */
    uint64_t engine_id;
    DiEngine *engine;            /* to read the finished output (engine thread only) */
    const DiServeText *text;     /* the model's tokens (logprobs), or NULL */
    int32_t think_end;           /* </think> for a reasoning budget or a constraint, else -1 */
    bool constraint_after_think; /* the constraint (req.so_type / so_text) starts after </think> */
    DiLogitBias *logit_bias;     /* the request's logit_bias in the engine's form */
    bool added;
    bool cache_reported;         /* the prefix-cache hit of its admission passed on */
    DiApiRequest req;            /* a private copy of what the engine needs */
    char *chat_json;             /* the conversation, or NULL for a raw prompt (no model text) */
    int32_t *ids;                /* the prompt ids (with the model's text), else NULL */
    size_t n_ids;
    int64_t max_tokens;          /* resolved against the context when ids are known, else 0 */
    DiOutputEvents *out;         /* text -> parsed output events (backend_parse.h) */
    DiBackendTimes times;        /* its phases so far (the engine's clock), for the metrics */
    bool has_times;
    const void *pd_state;        /* a received exact state to import (DiApiRequest.pd_state: the
                                  * caller's, valid until FINISH; imported before the request is added) */
    size_t pd_state_len;
    int64_t n_prompt, n_cached;  /* as the engine admitted it (from its first delta) */
    int64_t n_generated;         /* tokens streamed so far */
    int64_t pd_committed;        /* a PD prefill's positions last passed to pd_progress */
    struct Job *next;
} Job;

struct DiEngineBackend {
    DiEngine *engine;
    DiEngineBackendConfig cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Job *incoming;               /* submitted, not yet added (FIFO) */
    Job *live;                   /* added to the engine (engine thread only) */
    uint64_t *aborts;            /* ids to abort */
    size_t n_aborts, cap_aborts;
    uint64_t next_id;
    bool quit;
    DiBackendStats stats;        /* snapshot written by the engine thread */
    int n_incoming;
    /* gateway load (engine thread only, copied into stats): wall time of the steps that ran a
     * prefill chunk, and the prefill-token counter before the step */
    double prefill_seconds;
    uint64_t prefill_tokens_seen;
};

/* ---- output ------------------------------------------------------------------------------ */

static bool job_done(const Job *j) { return di_output_events_done(j->out); }

/* The engine's logprobs of a delta's tokens, with each token's bytes, to the output events. */
static int pass_logprobs(Job *j, const DiStreamDelta *d) {
    for (int i = 0; i < d->n_new_tokens; i++) {
        const DiTokenLogprobs *t = &d->new_logprobs[i];
        DiApiLogprob lp = {.token.logprob = t->logprob, .n_top = t->n_top < DI_API_MAX_TOP_LOGPROBS ? t->n_top : DI_API_MAX_TOP_LOGPROBS};
        if (!(lp.token.bytes = di_serve_text_token_bytes(j->text, t->token, &lp.token.len)))
            return di_error_wrap("logprobs of token %d", t->token);
        for (int k = 0; k < lp.n_top; k++) {
            lp.top[k].logprob = t->top_logprobs[k];
            if (!(lp.top[k].bytes = di_serve_text_token_bytes(j->text, t->top_ids[k], &lp.top[k].len)))
                return di_error_wrap("logprobs of token %d", t->top_ids[k]);
        }
        if (di_output_events_logprobs(j->out, &lp, 1) != 0) return -1;
    }
    return 0;
}

/* The job's phases as the engine timed them, kept current at every delta: the parser may emit
 * FINISH from inside the text (a stop sequence) and the server reads them then. */
static void note_times(Job *j) {
    DiRequestOutput out;
    if (di_engine_get_output(j->engine, j->engine_id, &out) != 0 || out.time_in_queue_s <= 0) return;
    double ttft = out.time_to_first_token_s > 0 ? out.time_to_first_token_s : out.total_time_s;
    j->times.queue_s = out.time_in_queue_s;
    j->times.prefill_s = ttft > out.time_in_queue_s ? ttft - out.time_in_queue_s : 0;
    j->times.decode_s = out.total_time_s > ttft ? out.total_time_s - ttft : 0;
    j->has_times = true;
}

static void on_delta(void *user, const DiStreamDelta *d) {
    Job *j = user;
    if (job_done(j)) return; /* e.g. the abort we issue after a stop sequence */
    note_times(j);
    DiRequestOutput out;
    if (!j->cache_reported && di_engine_get_output(j->engine, j->engine_id, &out) == 0) {
        di_output_events_cache_hits(j->out, out.n_cached_tokens); /* admitted by now: it has output */
        j->cache_reported = true;
        j->n_prompt = out.n_prompt_ids;
        j->n_cached = out.n_cached_tokens;
    }
    if (d->n_new_tokens > 0) j->n_generated += d->n_new_tokens;
    if (d->new_logprobs && j->req.logprobs >= 0 && pass_logprobs(j, d) != 0) {
        di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, di_error_message(), 500);
        return;
    }
    if (di_output_events_text(j->out, d->new_text, d->new_text_len, d->n_new_tokens) != 0) return;
    if (d->finish_reason == DI_FINISH_NONE) return;
    if (d->finish_reason == DI_FINISH_ERROR) { /* this request alone failed: its cause, not "shutting down" */
        const char *why = di_engine_request_error(j->engine, j->engine_id);
        char msg[512];
        snprintf(msg, sizeof msg, "the request failed during generation: %s", why ? why : di_error_message());
        di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, msg, 500);
        return;
    }
    DiApiFinish f = d->finish_reason == DI_FINISH_LENGTH  ? DI_API_FINISH_LENGTH
                    : d->finish_reason == DI_FINISH_ABORT ? DI_API_FINISH_ABORT
                                                          : DI_API_FINISH_STOP;
    if (j->req.pd_export && f != DI_API_FINISH_ABORT) { /* a PD prefill: its state, while its pages hold it */
        void *blob = NULL;
        size_t len = 0;
        int rc = di_engine_export_state(j->engine, j->engine_id, &blob, &len);
        j->req.pd_export(j->req.pd_user, rc == 0 ? blob : NULL, rc == 0 ? len : 0, rc == 0 ? NULL : di_error_message());
    }
    const char *stop = NULL;
    if (j->req.protocol == DI_API_COMPLETIONS && f == DI_API_FINISH_STOP && di_engine_get_output(j->engine, j->engine_id, &out) == 0 &&
        out.stop_string >= 0 && (size_t)out.stop_string < j->req.n_stop)
        stop = j->req.stop[out.stop_string]; /* a raw prompt's stop string, matched by the engine */
    di_output_events_finish(j->out, f, stop, NULL, 0);
}

/* ---- the engine thread ----------------------------------------------------------------- */

static void free_job(Job *j) {
    di_output_events_free(j->out);
    free(j->chat_json);
    free(j->ids);
    free(j->logit_bias);
    di_api_request_free(&j->req);
    free(j);
}

static void sampling_of(const Job *j, int64_t max_tokens, DiSamplingParams *p) {
    di_sampling_params_init(p);
    p->temperature = (float)j->req.temperature;
    p->top_p = (float)j->req.top_p;
    p->presence_penalty = (float)j->req.presence_penalty;
    p->frequency_penalty = (float)j->req.frequency_penalty;
    p->has_seed = j->req.has_seed;
    p->seed = j->req.seed;
    p->max_tokens = (int)max_tokens;
    p->top_k = j->req.top_k;
    p->min_p = (float)j->req.min_p;
    p->repetition_penalty = (float)j->req.repetition_penalty;
    /* a default limit lowered to the context left may fall below min_tokens: the limit wins */
    p->min_tokens = (int)(j->req.min_tokens < max_tokens ? j->req.min_tokens : max_tokens);
    p->ignore_eos = j->req.ignore_eos;
    p->logprobs = j->req.logprobs;
    p->logit_bias = j->logit_bias;
    p->n_logit_bias = (int)j->req.n_logit_bias;
    p->stop_token_ids = j->req.stop_token_ids;
    p->n_stop_token_ids = (int)j->req.n_stop_token_ids;
    if (j->req.thinking && j->req.thinking_budget_tokens >= 0) {
        p->has_thinking_budget = 1;
        p->thinking_budget = (int)(j->req.thinking_budget_tokens < max_tokens ? j->req.thinking_budget_tokens : max_tokens);
        p->think_end_id = j->think_end;
    }
    p->constraint_type = j->req.so_type;
    p->constraint = j->req.so_text;
    if (j->constraint_after_think) {
        p->constraint_after_think = 1;
        p->think_end_id = j->think_end;
    }
    if (j->req.protocol == DI_API_COMPLETIONS && j->req.n_stop) { /* a raw prompt: the engine matches the stop strings itself */
        p->stop = (const char *const *)j->req.stop;
        p->n_stop = (int)j->req.n_stop;
    }
}

/* A PD decode request's received state into the engine's prefix cache, where its admission finds
 * it; refused (no room, ...) the request prefills locally, which is exact too. */
static void import_state(DiEngineBackend *b, Job *j) {
    int64_t n = 0;
    int rc = di_engine_import_state(b->engine, j->pd_state, j->pd_state_len, &n);
    if (rc != 0) DI_WARN("engine backend: a received state was not imported, prefilling locally: %s", di_error_message());
    j->pd_state = NULL;
    pthread_mutex_lock(&b->lock);
    if (rc == 0) b->stats.pd_states_imported++;
    else b->stats.pd_state_import_failures++;
    pthread_mutex_unlock(&b->lock);
}

/* Add a job to the engine; on refusal its FINISH carries the cause (400: the client's input). */
static void add_job(DiEngineBackend *b, Job *j) {
    j->engine = b->engine;
    if (j->pd_state) import_state(b, j);
    if (j->ids) { /* rendered at submit, its limit already resolved */
        DiRequestInput in = {.prompt_ids = j->ids, .n_prompt_ids = (int)j->n_ids, .cache_salt = j->req.cache_salt,
                             .exact_state = j->req.pd_exact};
        DiSamplingParams sp;
        sampling_of(j, j->max_tokens, &sp);
        if (di_engine_add_request(b->engine, &in, &sp, on_delta, j, &j->engine_id) != 0) {
            di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, di_error_message(), 400);
            return;
        }
        j->added = true;
        di_output_events_ready(j->out, (int64_t)j->n_ids, 0);
        return;
    }
    DiRequestInput in = {
        .prompt_text = j->chat_json ? NULL : j->req.prompt, .chat_json = j->chat_json, .cache_salt = j->req.cache_salt,
        .exact_state = j->req.pd_exact};
    DiSamplingParams sp;
    /* The prompt length is known only once the engine has rendered and tokenized it: add with
     * the requested (or default) limit, then re-add with the limit resolved against the
     * context (recipe.md §4 resolve_max_tokens) when that is lower. */
    int64_t limit = di_api_resolve_max_tokens(&j->req, 0, INT64_MAX / 4);
    for (int attempt = 0; attempt < 2; attempt++) {
        sampling_of(j, limit, &sp);
        if (di_engine_add_request(b->engine, &in, &sp, on_delta, j, &j->engine_id) != 0) {
            di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, di_error_message(), 400);
            return;
        }
        DiRequestOutput out;
        di_engine_get_output(b->engine, j->engine_id, &out);
        int64_t resolved = di_api_resolve_max_tokens(&j->req, out.n_prompt_ids, b->cfg.context_limit);
        if (resolved == limit) {
            j->added = true;
            di_output_events_ready(j->out, out.n_prompt_ids, 0);
            return;
        }
        char why[DI_ERROR_MAX];
        snprintf(why, sizeof why, "%s", resolved < 0 ? di_error_message() : "");
        DiOutputEvents *keep = j->out;
        j->out = NULL; /* the release delivers FINISH(ABORT): not this request's end */
        di_engine_release(b->engine, j->engine_id);
        j->out = keep;
        if (resolved < 0) {
            di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, why, 400);
            return;
        }
        limit = resolved;
    }
    di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, "internal error: the output limit did not settle", 500);
}

/* A finished job's prefill (q new tokens on a c-token cached prefix, its prefill seconds) into
 * the stats' sample ring, for a gateway's cost-model fit.  Under b->lock. */
static void note_prefill_sample(DiEngineBackend *b, const Job *j) {
    if (!j->has_times || !(j->times.prefill_s > 0) || j->n_prompt <= j->n_cached) return;
    size_t slot = (size_t)(b->stats.prefill_samples_total % DI_BACKEND_PREFILL_SAMPLES);
    b->stats.prefill_samples[slot].q = j->n_prompt - j->n_cached;
    b->stats.prefill_samples[slot].c = j->n_cached;
    b->stats.prefill_samples[slot].seconds = j->times.prefill_s;
    b->stats.prefill_samples_total++;
}

static void refresh_stats(DiEngineBackend *b) {
    DiEngineMetrics m;
    if (di_engine_get_metrics(b->engine, &m) != 0) return;
    int64_t kv_tokens = 0;
    for (const Job *j = b->live; j; j = j->next)
        if (j->added && !job_done(j)) kv_tokens += j->n_prompt + j->n_generated;
    pthread_mutex_lock(&b->lock);
    b->stats.kv_tokens = kv_tokens;
    b->stats.prefill_tokens = m.prefill_tokens;
    b->stats.decode_tokens = m.decode_tokens;
    b->stats.prefill_seconds = b->prefill_seconds;
    b->stats.block_tokens = b->cfg.block_tokens;
    b->stats.queued = m.requests_waiting + b->n_incoming;
    b->stats.running = m.requests_running;
    b->stats.steps = m.steps;
    b->stats.step_seconds = m.time_forward_s + m.time_sample_s + m.time_schedule_s + m.time_output_s + m.time_draft_s;
    b->stats.preemptions = m.preemptions;
    b->stats.spec_drafts = m.spec_num_drafts;
    b->stats.spec_draft_tokens = m.spec_num_draft_tokens;
    b->stats.spec_accepted_tokens = m.spec_num_accepted_tokens;
    memcpy(b->stats.spec_accepted_hist, m.spec_accepted_hist, sizeof m.spec_accepted_hist);
    /* prefix-cache pages give way to requests (vLLM counts its cached blocks as free too) */
    size_t busy = m.pages_used > m.pages_cached ? m.pages_used - m.pages_cached : 0;
    b->stats.state_usage = m.pages_total ? (double)busy / (double)m.pages_total : 0;
    b->stats.kv_enabled = m.kv_cache_enabled != 0;
    b->stats.kv_lookups = m.kv_lookups;
    b->stats.kv_hit_tokens_ram = m.kv_hit_tokens_ram;
    b->stats.kv_hit_tokens_disk = m.kv_hit_tokens_disk;
    b->stats.kv_evictions = m.kv_evictions;
    b->stats.kv_bytes_read = m.kv_bytes_read;
    b->stats.kv_bytes_written = m.kv_bytes_written;
    b->stats.kv_records_corrupt = m.kv_records_corrupt;
    b->stats.kv_files_skipped = m.kv_files_skipped;
    pthread_mutex_unlock(&b->lock);
}

/* Abort the live job with server id `id`, if any. */
static void abort_job(DiEngineBackend *b, uint64_t id) {
    for (Job *j = b->live; j; j = j->next)
        if (j->id == id && !job_done(j)) {
            if (j->added) di_engine_abort(b->engine, j->engine_id); /* delivers FINISH(ABORT) */
            di_output_events_finish(j->out, DI_API_FINISH_ABORT, NULL, NULL, 0);
        }
}

/* Release and free the jobs that finished. */
static void reap(DiEngineBackend *b) {
    for (Job **p = &b->live; *p;) {
        Job *j = *p;
        if (!job_done(j)) {
            p = &j->next;
            continue;
        }
        if (j->added) di_engine_release(b->engine, j->engine_id);
        *p = j->next;
        pthread_mutex_lock(&b->lock);
        note_prefill_sample(b, j);
        pthread_mutex_unlock(&b->lock);
        free_job(j);
    }
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A step that ran prefill tokens counts its wall time as prefill time (engine thread). */
static void note_step_time(DiEngineBackend *b, double seconds) {
    DiEngineMetrics m;
    if (di_engine_get_metrics(b->engine, &m) != 0) return;
    if (m.prefill_tokens > b->prefill_tokens_seen) b->prefill_seconds += seconds;
    b->prefill_tokens_seen = m.prefill_tokens;
}

/* PD prefills: where each running one's state stands, when a step moved it on. */
static void report_progress(DiEngineBackend *b) {
    for (Job *j = b->live; j; j = j->next) {
        if (!j->req.pd_progress || !j->added || job_done(j)) continue;
        DiStateProgress p;
        if (di_engine_state_progress(b->engine, j->engine_id, &p) != 0 || p.n_committed <= j->pd_committed) continue;
        j->pd_committed = p.n_committed;
        DiPdProgress pp = {p.n_committed, p.state_bytes, p.pages_at, p.page_bytes, p.pages, p.first_final, p.end_final};
        j->req.pd_progress(j->req.pd_user, &pp);
    }
}

static void *engine_main(void *arg) {
    DiEngineBackend *b = arg;
    int active = 0;
    for (;;) {
        pthread_mutex_lock(&b->lock);
        while (!b->quit && !b->incoming && !b->n_aborts && active == 0) pthread_cond_wait(&b->wake, &b->lock);
        Job *incoming = b->incoming;
        b->incoming = NULL;
        b->n_incoming = 0;
        size_t n_aborts = b->n_aborts;
        uint64_t *aborts = n_aborts ? di_calloc(n_aborts, sizeof *aborts, "aborts") : NULL;
        if (aborts) memcpy(aborts, b->aborts, n_aborts * sizeof *aborts);
        b->n_aborts = 0;
        bool quit = b->quit;
        pthread_mutex_unlock(&b->lock);
        while (incoming) {
            Job *j = incoming;
            incoming = j->next;
            j->next = b->live;
            b->live = j;
            add_job(b, j);
        }
        for (size_t i = 0; i < n_aborts; i++) abort_job(b, aborts[i]);
        free(aborts);
        if (quit)
            for (Job *j = b->live; j; j = j->next) abort_job(b, j->id);
        reap(b);
        if (quit) break;
        active = 0;
        for (Job *j = b->live; j; j = j->next) active += !job_done(j);
        double t0 = active ? mono_now() : 0;
        if (active && di_engine_step(b->engine, &active) != 0) {
            char msg[DI_ERROR_MAX];
            snprintf(msg, sizeof msg, "engine step failed: %s", di_error_message());
            DI_ERROR("%s", msg);
            for (Job *j = b->live; j; j = j->next) {
                if (j->added && !job_done(j)) di_engine_abort(b->engine, j->engine_id);
                di_output_events_finish(j->out, DI_API_FINISH_ERROR, NULL, msg, 500);
            }
            active = 0;
        }
        if (t0 > 0) note_step_time(b, mono_now() - t0);
        report_progress(b);
        reap(b);
        refresh_stats(b);
    }
    return NULL;
}

/* ---- backend.h interface ----------------------------------------------------------------- */

/* The job's prompt: ids and their resolved output limit with the model's text, else the text
 * the engine renders itself.  -1 with *http_status 400 for the client's input. */
static int prepare_prompt(DiEngineBackend *b, const DiApiRequest *req, Job *j, int *http_status) {
    if (!b->cfg.text) {
        if (req->prompt && !(j->req.prompt = di_strdup(req->prompt))) return -1;
        if (req->conversation && !(j->chat_json = json_dumps(req->conversation, JSON_COMPACT)))
            return di_errorf("engine backend: out of memory serializing the conversation");
        return 0;
    }
    int rc = req->conversation ? di_serve_text_render(b->cfg.text, req->conversation, &j->ids, &j->n_ids)
             : req->prompt     ? di_serve_text_encode_prompt(b->cfg.text, req->prompt, &j->ids, &j->n_ids)
                               : di_errorf("engine backend: the request has neither a conversation nor a prompt");
    if (rc != 0) {
        *http_status = 400;
        return -1;
    }
    if (j->n_ids == 0 || j->n_ids > (size_t)INT32_MAX / 2) {
        *http_status = 400;
        return di_errorf("the prompt has %zu tokens", j->n_ids);
    }
    j->max_tokens = di_api_resolve_max_tokens(&j->req, (int64_t)j->n_ids, b->cfg.context_limit);
    if (j->max_tokens < 0) {
        *http_status = 400;
        return -1;
    }
    if (j->max_tokens > INT32_MAX) j->max_tokens = INT32_MAX;
    return 0;
}

/* A PD prefill runs the prompt less its last token, one output token: the state it leaves is the
 * one a decode worker continues from by computing that last token itself (and sampling from it
 * as a cold run does). */
static int pd_prefix(DiEngineBackend *b, Job *j, int *http_status) {
    *http_status = !b->cfg.text ? 501 : 400;
    if (!b->cfg.text) return di_errorf("a PD prefill needs the model's tokenizer (this engine is the test mock)");
    if (j->n_ids < 2) return di_errorf("a PD prefill needs a prompt of at least 2 tokens, this one has %zu", j->n_ids);
    j->n_ids--;
    j->max_tokens = 1;
    return 0;
}

/* Compile the constraint the engine enforces (here, not in the step loop) and record it. */
static int resolve_prepared(DiEngineBackend *b, const DiApiRequest *req, Job *j, int type, const char *text) {
    if (di_engine_prepare_constraint(b->engine, type, text) != 0) return -1;
    DiParseStart start = di_api_parse_start(req);
    if (start == DI_PARSE_CONTINUE_CONTENT || start == DI_PARSE_CONTINUE_REASONING)
        return di_errorf("Invalid request: a structured output cannot continue an assistant prefix");
    if (start == DI_PARSE_START_REASONING) {
        j->think_end = b->cfg.text ? di_serve_text_think_end(b->cfg.text) : -1;
        if (j->think_end < 0) return di_errorf("Invalid request: a structured output in thinking mode needs the model's </think> token");
        j->constraint_after_think = true;
    }
    j->req.so_type = type;
    j->req.so_text = text ? di_strdup(text) : NULL;
    return !text || j->req.so_text ? 0 : -1;
}

/* What the engine enforces of the request's output constraint (api_constraint.c), in
 * j->req.so_type / so_text: vLLM's structured_outputs, else the official conversion's json,
 * regex or tool calls.  Tool calls are enforced where something is promised (a strict tool, a
 * required / named call: DSML calls whose arguments match the schemas); non-strict tools with
 * auto stay free.  -1 (400) naming the problem. */
static int resolve_constraint(DiEngineBackend *b, const DiApiRequest *req, Job *j) {
    int type = req->so_type;
    const char *text = req->so_text, *kind = req->constraint_kind;
    char *spec = NULL;
    if (!type && strcmp(kind, "json") == 0 && !(req->constraint && *req->constraint)) {
        /* "" is any JSON value to the official conversion, but its JSON-mode output parser shows
         * only objects and arrays (a scalar becomes a space): enforce OpenAI's json_object */
        type = DI_CONSTRAINT_JSON_OBJECT;
        text = NULL;
    } else if (!type && strcmp(kind, "json") == 0) {
        type = DI_CONSTRAINT_JSON_SCHEMA;
        text = req->constraint;
    } else if (!type && strcmp(kind, "regex") == 0) {
        type = DI_CONSTRAINT_REGEX;
        text = req->constraint;
    } else if (!type && (strcmp(kind, "tool_call_required") == 0 ||
                         (strcmp(kind, "tool_call") == 0 && req->constraint && strstr(req->constraint, "\"strict\":true")))) {
        if (!(spec = di_api_dsml_spec(req))) return -1;
        type = DI_CONSTRAINT_DSML_TOOLS;
        text = spec;
    }
    if (!type) return 0;
    int rc = resolve_prepared(b, req, j, type, text);
    free(spec);
    return rc;
}

/* A private copy of the fields the engine thread reads (the request belongs to the server),
 * checked against the model: a 400 names the field the model cannot honour. */
static int copy_request(DiEngineBackend *b, const DiApiRequest *req, Job *j, int *http_status) {
    j->text = b->cfg.text;
    j->think_end = -1;
    j->req.protocol = req->protocol;
    j->req.thinking = req->thinking;
    memcpy(j->req.reasoning_effort, req->reasoning_effort, sizeof j->req.reasoning_effort);
    j->req.max_tokens = req->max_tokens;
    j->req.temperature = req->temperature;
    j->req.top_p = req->top_p;
    j->req.presence_penalty = req->presence_penalty;
    j->req.frequency_penalty = req->frequency_penalty;
    j->req.has_seed = req->has_seed;
    j->req.seed = req->seed;
    j->req.logprobs = req->logprobs;
    j->req.top_k = req->top_k;
    j->req.min_p = req->min_p;
    j->req.repetition_penalty = req->repetition_penalty;
    j->req.min_tokens = req->min_tokens;
    j->req.ignore_eos = req->ignore_eos;
    j->req.thinking_budget_tokens = req->thinking_budget_tokens;
    j->req.pd_exact = req->pd_exact || req->pd_export || req->pd_state;
    j->req.pd_export = req->pd_export;
    j->req.pd_progress = req->pd_export ? req->pd_progress : NULL;
    j->req.pd_user = req->pd_user;
    *http_status = 400;
    if (req->logprobs >= 0 && !b->cfg.text)
        return di_errorf("Invalid logprobs: this backend has no tokenizer to spell the tokens");
    if (req->thinking && req->thinking_budget_tokens >= 0 &&
        (j->think_end = b->cfg.text ? di_serve_text_think_end(b->cfg.text) : -1) < 0)
        return di_errorf("Invalid thinking.budget_tokens: the model's tokenizer has no </think> token");
    if (resolve_constraint(b, req, j) != 0) return -1;
    int32_t vocab = di_engine_vocab_size(b->engine);
    for (size_t i = 0; i < req->n_logit_bias; i++)
        if (req->logit_bias[i].token >= vocab)
            return di_errorf("Invalid logit_bias: token id %d is outside the vocabulary [0, %d)",
                             req->logit_bias[i].token, vocab);
    for (size_t i = 0; i < req->n_stop_token_ids; i++)
        if (req->stop_token_ids[i] >= vocab)
            return di_errorf("Invalid stop_token_ids: token id %d is outside the vocabulary [0, %d)",
                             req->stop_token_ids[i], vocab);
    *http_status = 500;
    j->pd_state = req->pd_state_len ? req->pd_state : NULL; /* not copied: it may be gigabytes */
    j->pd_state_len = req->pd_state_len;
    if (req->cache_salt && !(j->req.cache_salt = di_strdup(req->cache_salt))) return -1;
    if (req->n_stop_token_ids) {
        size_t bytes = req->n_stop_token_ids * sizeof *j->req.stop_token_ids;
        if (!(j->req.stop_token_ids = di_malloc(bytes, "stop_token_ids"))) return -1;
        memcpy(j->req.stop_token_ids, req->stop_token_ids, bytes);
        j->req.n_stop_token_ids = req->n_stop_token_ids;
    }
    if (req->n_logit_bias) {
        if (!(j->logit_bias = di_calloc(req->n_logit_bias, sizeof *j->logit_bias, "logit_bias"))) return -1;
        for (size_t i = 0; i < req->n_logit_bias; i++)
            j->logit_bias[i] = (DiLogitBias){req->logit_bias[i].token, req->logit_bias[i].bias};
        j->req.n_logit_bias = req->n_logit_bias;
    }
    return 0;
}

static int be_submit(void *self, const DiApiRequest *req, DiBackendEmit emit, void *user, uint64_t *out_id,
                     int *http_status) {
    DiEngineBackend *b = self;
    *http_status = 500;
    if (!req || !emit || !out_id) return di_errorf("engine backend: bad submit arguments");
    Job *j = di_calloc(1, sizeof *j, "engine job");
    if (!j) return -1;
    if (copy_request(b, req, j, http_status) != 0) {
        free_job(j);
        return -1;
    }
    bool ok = true;
    for (size_t i = 0; i < req->n_stop && ok; i++) ok = (j->req.stop[j->req.n_stop++] = di_strdup(req->stop[i])) != NULL;
    if (!ok || !(j->out = di_output_events_new(req, emit, user))) {
        free_job(j);
        return di_error_wrap("engine backend: preparing the request");
    }
    if (prepare_prompt(b, req, j, http_status) != 0 || (req->pd_export && pd_prefix(b, j, http_status) != 0)) {
        free_job(j);
        return -1;
    }
    pthread_mutex_lock(&b->lock);
    if (b->quit) {
        pthread_mutex_unlock(&b->lock);
        free_job(j);
        *http_status = 503;
        return di_errorf("the engine is shutting down");
    }
    j->id = ++b->next_id;
    Job **tail = &b->incoming;
    while (*tail) tail = &(*tail)->next;
    *tail = j;
    b->n_incoming++;
    b->stats.queued++;
    *out_id = j->id;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    return 0;
}

static void be_abort(void *self, uint64_t id) {
    DiEngineBackend *b = self;
    pthread_mutex_lock(&b->lock);
    if (di_grow(&b->aborts, &b->cap_aborts, b->n_aborts + 1, 64, sizeof *b->aborts, "abort queue") != 0) {
        /* keep the old queue; the request still ends at its deadline */
        pthread_mutex_unlock(&b->lock);
        DI_WARN("engine backend: cannot queue an abort: %s", di_error_message());
        return;
    }
    b->aborts[b->n_aborts++] = id;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
}

/* Called from inside a job's FINISH event, so on the engine thread: b->live is ours to read. */
static int be_times(void *self, uint64_t id, DiBackendTimes *out) {
    DiEngineBackend *b = self;
    for (Job *j = b->live; j; j = j->next)
        if (j->id == id && j->has_times) {
            *out = j->times;
            return 0;
        }
    return -1;
}

static int be_tokenize(void *self, const DiApiRequest *req, bool add_special, int32_t **ids, size_t *n_ids,
                       int *http_status) {
    DiEngineBackend *b = self;
    *http_status = 501;
    if (!b->cfg.text) return di_errorf("this server's model has no tokenizer (the engine's test mock)");
    *http_status = 400;
    if (req->conversation) return di_serve_text_render(b->cfg.text, req->conversation, ids, n_ids);
    if (req->prompt) return di_serve_text_encode(b->cfg.text, req->prompt, add_special, ids, n_ids);
    return di_errorf("nothing to tokenize: give a prompt or messages");
}

static int be_detokenize(void *self, const int32_t *ids, size_t n_ids, char **text, int *http_status) {
    DiEngineBackend *b = self;
    *http_status = 501;
    if (!b->cfg.text) return di_errorf("this server's model has no tokenizer (the engine's test mock)");
    *http_status = 400;
    return di_serve_text_decode(b->cfg.text, ids, n_ids, text);
}

static int be_kv(void *self, DiBackendKv *out) {
    DiEngineBackend *b = self;
    memset(out, 0, sizeof *out);
    out->cache = di_engine_kv_cache(b->engine, &out->fingerprint, &out->block_tokens, &out->block_bytes);
    out->page_bytes = di_engine_page_bytes(b->engine);
    return out->cache ? 0 : di_errorf("the engine's KV block cache is off");
}

static void be_stats(void *self, DiBackendStats *out) {
    DiEngineBackend *b = self;
    pthread_mutex_lock(&b->lock);
    *out = b->stats;
    pthread_mutex_unlock(&b->lock);
}

DiEngineBackend *di_engine_backend_create(DiEngine *engine, const DiEngineBackendConfig *cfg) {
    if (!engine || !cfg || !cfg->model_name || cfg->context_limit < 2) {
        di_errorf("engine backend: an engine, a model name and a context limit >= 2 are required");
        return NULL;
    }
    DiEngineBackend *b = di_calloc(1, sizeof *b, "engine backend");
    if (!b) return NULL;
    b->engine = engine;
    b->cfg = *cfg;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->wake, NULL);
    if (pthread_create(&b->thread, NULL, engine_main, b) != 0) {
        pthread_mutex_destroy(&b->lock);
        pthread_cond_destroy(&b->wake);
        free(b);
        di_errorf("engine backend: cannot start the engine thread");
        return NULL;
    }
    return b;
}

void di_engine_backend_destroy(DiEngineBackend *b) {
    if (!b) return;
    pthread_mutex_lock(&b->lock);
    b->quit = true;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    pthread_join(b->thread, NULL);
    while (b->incoming) { /* submitted after the thread's last look: they still get a FINISH */
        Job *j = b->incoming;
        b->incoming = j->next;
        di_output_events_finish(j->out, DI_API_FINISH_ABORT, NULL, NULL, 0);
        free_job(j);
    }
    di_engine_destroy(b->engine);
    free(b->aborts);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
    free(b);
}

DiBackend di_engine_backend_interface(DiEngineBackend *b) {
    DiBackend i = {.self = b,
                   .model_name = b ? b->cfg.model_name : NULL,
                   .context_limit = b ? b->cfg.context_limit : 0,
                   .submit = be_submit,
                   .abort = be_abort,
                   .stats = be_stats,
                   .tokenize = be_tokenize,
                   .detokenize = be_detokenize,
                   .times = be_times,
                   .kv = be_kv};
    return i;
}
