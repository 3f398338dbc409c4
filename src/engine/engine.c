/* engine.c — the offline engine: the public API of deepinfer.h's engine section over a model
 * runner, the step loop (sync, or async with a worker thread) and output processing (stop checks,
 * detokenising, streaming).
 *
 * One step, async mode (engine-features.md §3.2):  plan step n+1 while step n computes, wait for
 * step n, launch step n+1, then deliver step n's outputs while step n+1 computes.  Sync mode:
 * plan, compute, deliver.  Both run the same planner, executor and output code, and sampling
 * is keyed by (seed, position), so the streams are identical. */
#include "engine/engine.h"

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "engine/kv_blocks.h"
#include "engine/constraint.h"
#include "engine/spec_probe.h"
#include "engine/pages.h"
#include "engine/request.h"
#include "engine/runner_mock.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/worker.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define DEFAULT_MAX_NUM_SEQS 64
#define DEFAULT_MAX_BATCH_TOKENS 512
#define DEFAULT_STATE_MEMORY ((size_t)256 << 20)

struct DiEngine {
    DiRunner *runner;
    DiTextHooks text;
    DiEngineOptions opts;
    bool async;
    DiPagePool *pool;
    DiScheduler sched;
    const DiKernelBackend *be; /* the samplers' kernels: the runner's, else chosen at creation */
    DiSampler **samplers; /* one per pool thread */
    int n_samplers;
    DiThreadPool *threads; /* the step's sampling, and the runner's forward (DiRunnerOps.use_threads) */
    DiStepExecutor exec;
    DiSpecControl spec;   /* the draft-length policy (draft_max > 0) */
    DiSpecVerifier **verifiers; /* one per pool thread (draft_max > 0) */
    float *draft_logits;  /* [max_num_seqs][draft block][vocab] (draft_max > 0) */
    DiWorker worker;
    DiStep steps[2];
    int next_step;
    DiStep *inflight; /* async: the step the worker is computing */
    DiRequest **requests; /* every request not yet released, in arrival order */
    int n_requests, cap_requests;
    uint64_t next_id, seed_counter;
    bool seeded; /* opts.seed came from the caller, not the clock */
    DiEngineMetrics m;
    char *model_dir;
    DiKvBlocks kv; /* the KV block cache (kv.cache NULL: off) */
    DiConstraints *constraints; /* structured outputs: grammar vocabulary and compiled grammars */
};

/* ---- options ------------------------------------------------------------------------------ */

void di_engine_options_init(DiEngineOptions *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_num_seqs = DEFAULT_MAX_NUM_SEQS;
    o->max_batch_tokens = DEFAULT_MAX_BATCH_TOKENS;
    o->state_memory_bytes = DEFAULT_STATE_MEMORY;
    o->async_scheduling = -1;
    o->batch_invariant = -1;
    o->enable_prefix_caching = -1;
    o->draft_max = -1;
    o->draft_schedule = -1;
}

int di_engine_resolve_batch_invariant(int opt) {
    if (opt == 0 || opt == 1) return opt;
    if (opt != -1) return di_errorf("engine options: batch_invariant must be -1, 0 or 1, got %d", opt);
    int on;
    return di_env_batch_invariant(&on) == 0 ? on : -1;
}

static int check_options(const DiEngineOptions *o) {
    if (o->max_num_seqs < 1 || o->max_num_seqs > 65536)
        return di_errorf("engine options: max_num_seqs must be in [1, 65536], got %d", o->max_num_seqs);
    if (o->max_batch_tokens < 1)
        return di_errorf("engine options: max_batch_tokens must be >= 1, got %d", o->max_batch_tokens);
    if (o->max_prefill_chunk < 0)
        return di_errorf("engine options: max_prefill_chunk must be >= 0, got %d", o->max_prefill_chunk);
    if (o->async_scheduling < -1 || o->async_scheduling > 1)
        return di_errorf("engine options: async_scheduling must be -1, 0 or 1, got %d", o->async_scheduling);
    if (o->enable_prefix_caching < -1 || o->enable_prefix_caching > 1)
        return di_errorf("engine options: enable_prefix_caching must be -1, 0 or 1, got %d", o->enable_prefix_caching);
    if (o->draft_max < -1 || o->draft_max > DI_MAX_DRAFT)
        return di_errorf("engine options: draft_max must be -1 or in [0, %d], got %d", DI_MAX_DRAFT, o->draft_max);
    if (o->draft_schedule < -1 || o->draft_schedule > 1)
        return di_errorf("engine options: draft_schedule must be -1, 0 (fixed) or 1 (confidence), got %d",
                         o->draft_schedule);
    if (o->prefix_cache_bytes > o->state_memory_bytes)
        return di_errorf("engine options: prefix_cache_bytes (%zu) exceeds state_memory_bytes (%zu)", o->prefix_cache_bytes,
                         o->state_memory_bytes);
    return 0;
}

/* ---- creation ----------------------------------------------------------------------------- */

/* Resolve draft_max and draft_schedule (defaults from the environment) against the runner. */
static int resolve_speculation(DiEngineOptions *o, const DiRunner *runner) {
    bool drafter = runner->ops->draft && runner->ops->commit && runner->draft_block > 0;
    if (o->draft_max == -1) {
        if (di_env_draft_max(&o->draft_max) != 0) return -1;
        if (!drafter) o->draft_max = 0; /* the default asks for speculation only where it exists */
    } else if (o->draft_max > 0 && !drafter) {
        return di_errorf("engine options: draft_max %d: the model (%s) has no drafter", o->draft_max,
                         runner->name ? runner->name : "runner");
    }
    if (o->draft_max > runner->draft_block) o->draft_max = runner->draft_block; /* a maximum */
    if (o->draft_schedule == -1 && di_env_draft_varlen(&o->draft_schedule) != 0) return -1;
    return 0;
}

/* Logits rows one step may need: one per sequence, or with drafts as many as the step's tokens. */
static int step_rows(const DiEngineOptions *o) {
    if (o->draft_max == 0) return o->max_num_seqs;
    int64_t by_seqs = (int64_t)o->max_num_seqs * (1 + o->draft_max);
    int64_t by_tokens = o->max_batch_tokens > o->max_num_seqs ? o->max_batch_tokens : o->max_num_seqs;
    return (int)(by_seqs < by_tokens ? by_seqs : by_tokens);
}

/* Seconds the start-up step-cost probe may spend starting new sizes (the tiny model measures
 * every size well within it; a large one measures the small sizes). */
#define COST_PROBE_BUDGET_S 0.25

/* The confidence schedule's step-cost curve from timed verify batches (spec_probe.h). */
static int probe_step_cost(DiEngine *e) {
    DiSpecProbe probe = {e->runner, e->pool, e->steps[0].logits, step_rows(&e->opts), 1 + e->opts.draft_max,
                         COST_PROBE_BUDGET_S};
    return di_spec_probe_cost(&probe, &e->spec) < 0 ? -1 : 0;
}

int di_engine_spec_cost_points(const DiEngine *e, double *rows, double *seconds, int cap) {
    if (!e || !rows || !seconds || cap < 0) return di_errorf("spec cost points: NULL argument");
    return e->opts.draft_max > 0 ? di_spec_cost_points(&e->spec.cost, rows, seconds, cap) : 0;
}

static int make_pool(DiEngine *e, bool poison) {
    size_t page = e->runner->page_bytes;
    size_t n_pages = e->opts.state_memory_bytes / ((page + 63) & ~(size_t)63);
    if (n_pages == 0)
        return di_errorf("engine options: state_memory_bytes %zu is less than one %zu-byte state page",
                         e->opts.state_memory_bytes, page);
    DiPagePool *pool = di_page_pool_create(page, n_pages, poison);
    if (!pool) return -1;
    di_prefix_cache_free(&e->sched.cache); /* empty: the pool is only remade before any request */
    di_page_pool_destroy(e->pool);
    e->pool = pool;
    e->sched.pool = pool;
    size_t cache_pages = 0; /* prefix cache off unless enabled (default off: see deepinfer.h) */
    if (e->opts.enable_prefix_caching == 1)
        cache_pages = e->opts.prefix_cache_bytes ? e->opts.prefix_cache_bytes / di_page_pool_page_bytes(pool) : n_pages;
    if (e->opts.enable_prefix_caching == 1 && cache_pages == 0)
        return di_errorf("engine options: prefix_cache_bytes %zu is less than one %zu-byte state page",
                         e->opts.prefix_cache_bytes, di_page_pool_page_bytes(pool));
    di_prefix_cache_init(&e->sched.cache, pool, e->runner, cache_pages);
    return 0;
}

/* A runner's built-in codec as text hooks (ctx is the runner). */
static int codec_encode(const void *ctx, const char *text, size_t len, int32_t **ids, size_t *n_ids) {
    const DiRunner *r = ctx;
    return r->codec.encode(r->codec.ctx, text, len, ids, n_ids);
}

static const char *codec_token_bytes(const void *ctx, int32_t id, size_t *len) {
    const DiRunner *r = ctx;
    const char *bytes = NULL;
    *len = 0;
    r->codec.piece(r->codec.ctx, id, &bytes, len);
    return bytes;
}

static void text_from_codec(DiEngine *e) {
    const DiRunner *r = e->runner;
    if (!r->codec.encode && !r->codec.piece) return;
    e->text = (DiTextHooks){r->codec.encode ? codec_encode : NULL, r->codec.piece ? codec_token_bytes : NULL, NULL,
                            NULL, r, -1};
}

/* Sampled requests' verification: a verifier per pool thread, and room for the draft
 * distributions of a step (vocabulary-sized rows: for the release's vocabulary and 64
 * requests of 5 drafts, 165 MB). */
static int make_verifiers(DiEngine *e) {
    size_t rows = (size_t)e->opts.max_num_seqs * (size_t)e->runner->draft_block;
    e->draft_logits = di_aligned_calloc(rows * (size_t)e->runner->vocab_size, sizeof *e->draft_logits, "draft logits");
    e->verifiers = di_calloc((size_t)e->n_samplers, sizeof *e->verifiers, "spec verifiers");
    if (!e->draft_logits || !e->verifiers) return -1;
    for (int i = 0; i < e->n_samplers; i++)
        if (!(e->verifiers[i] = di_spec_verifier_create(e->runner->vocab_size, e->be))) return -1;
    return 0;
}

/* The samplers' kernels, chosen once here: the model's table when the runner has one, so that
 * sampling follows the model's DEEPINFER_KERNELS choice; else the knob's own choice. */
static int resolve_kernels(DiEngine *e) {
    if (e->runner->be) return e->be = e->runner->be, 0;
    if (di_backend_cpu_from_env(&e->be) != 0) return di_error_wrap("engine: kernels");
    return 0;
}

DiEngine *di_engine_create_with_runner(DiRunner *runner, const DiEngineOptions *opts) {
    if (!runner || !runner->ops || !runner->ops->forward || !runner->ops->pages_for_tokens || runner->vocab_size <= 0 ||
        runner->page_bytes == 0) {
        di_errorf("engine: the model runner is incomplete (NULL, no operations, no vocabulary or no page size)");
        if (runner && runner->ops && runner->ops->destroy) runner->ops->destroy(runner);
        return NULL;
    }
    DiEngine *e = di_calloc(1, sizeof *e, "engine");
    if (!e) {
        runner->ops->destroy(runner);
        return NULL;
    }
    e->runner = runner;
    e->text.bos_id = -1;
    text_from_codec(e);
    if (opts) e->opts = *opts;
    else di_engine_options_init(&e->opts);
    if (e->opts.state_memory_bytes == 0) e->opts.state_memory_bytes = DEFAULT_STATE_MEMORY;
    int invariant = di_engine_resolve_batch_invariant(e->opts.batch_invariant);
    if (check_options(&e->opts) != 0 || invariant < 0 || resolve_speculation(&e->opts, runner) != 0 ||
        resolve_kernels(e) != 0)
        goto fail;
    e->opts.batch_invariant = invariant;
    e->async = e->opts.async_scheduling != 0 && e->opts.draft_max == 0;
    e->opts.async_scheduling = e->async;
    e->seeded = e->opts.seed != 0; /* a caller's seed promises reproducible runs */
    if (e->opts.seed == 0) e->opts.seed = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)e << 16);
    DiSchedulerConfig cfg = {e->opts.max_num_seqs, e->opts.max_batch_tokens, e->opts.max_prefill_chunk,
                             e->opts.draft_max, e->opts.draft_schedule == 0};
    if (di_scheduler_init(&e->sched, &cfg, NULL, runner) != 0 || make_pool(e, false) != 0) goto fail;
    if (di_kv_blocks_open(&e->kv, &e->opts, runner) != 0) goto fail;
    e->opts.kv_cache_dir = NULL; /* the caller's string: the cache keeps its own copy */
    e->sched.kv = &e->kv;
    if (!(e->constraints = di_constraints_create(runner))) goto fail;
    e->threads = di_pool_create(0); /* DEEPINFER_NUM_THREADS, else every online CPU */
    if (!e->threads) goto fail;
    e->n_samplers = di_pool_threads(e->threads);
    /* Only the thread executing a step drives the pool: the runner's forward, then sampling. */
    if (runner->ops->use_threads) runner->ops->use_threads(runner, e->threads);
    if (runner->ops->reserve_rows && runner->ops->reserve_rows(runner, e->opts.max_batch_tokens) != 0) goto fail;
    e->samplers = di_calloc((size_t)e->n_samplers, sizeof *e->samplers, "samplers");
    if (!e->samplers) goto fail;
    for (int i = 0; i < e->n_samplers; i++)
        if (!(e->samplers[i] = di_sampler_create(runner->vocab_size, e->be))) goto fail;
    for (int i = 0; i < 2; i++)
        if (di_step_init(&e->steps[i], e->opts.max_num_seqs, step_rows(&e->opts), runner->vocab_size,
                         e->opts.draft_max > 0 ? runner->draft_block : 0) != 0)
            goto fail;
    if (e->opts.draft_max > 0 &&
        di_spec_control_init(&e->spec, e->opts.draft_schedule == 1, e->opts.max_num_seqs, runner->draft_block) != 0)
        goto fail;
    if (e->opts.draft_max > 0 && make_verifiers(e) != 0) goto fail;
    if (e->opts.draft_max > 0 && e->spec.confidence && probe_step_cost(e) != 0) goto fail;
    e->exec = (DiStepExecutor){runner, e->samplers, e->n_samplers > 1 ? e->threads : NULL, invariant == 1,
                               e->opts.draft_max > 0 ? &e->spec : NULL, e->verifiers, e->draft_logits, NULL, NULL, NULL, NULL, false, 0};
    if (di_env_test_fail_seed(&e->exec.fail_seed_set, &e->exec.fail_seed) != 0) goto fail;
    if (e->async && di_worker_start(&e->worker, &e->exec) != 0) goto fail;
    e->next_id = 1;
    e->m.page_bytes = di_page_pool_page_bytes(e->pool);
    e->m.pages_total = di_page_pool_total(e->pool);
    e->m.spec_draft_max = e->opts.draft_max;
    return e;
fail:
    di_error_wrap("creating the engine");
    di_engine_destroy(e);
    return NULL;
}

DiEngine *di_engine_create_mock(int32_t vocab_size, uint64_t model_seed, const DiEngineOptions *opts) {
    DiRunner *runner = di_mock_runner_create(vocab_size, model_seed);
    if (!runner) return NULL;
    DiEngine *e = di_engine_create_with_runner(runner, opts);
    if (e) di_mock_text_hooks(&e->text);
    return e;
}

DiEngine *di_engine_create_mock_drafter(int32_t vocab_size, uint64_t model_seed, int32_t draft_block, double agree_rate,
                                        const DiEngineOptions *opts) {
    DiRunner *runner = di_mock_runner_create(vocab_size, model_seed);
    if (!runner) return NULL;
    if (di_mock_runner_set_drafter(runner, draft_block, agree_rate) != 0) {
        runner->ops->destroy(runner);
        return NULL;
    }
    DiEngine *e = di_engine_create_with_runner(runner, opts);
    if (e) di_mock_text_hooks(&e->text);
    return e;
}

int di_engine_set_model_dir(DiEngine *e, const char *dir) {
    if (!e || !dir) return di_errorf("set model dir: NULL engine or directory");
    char *copy = di_strdup(dir);
    if (!copy) return -1;
    free(e->model_dir);
    e->model_dir = copy;
    return 0;
}

const char *di_engine_model_dir(const DiEngine *e) { return e ? e->model_dir : NULL; }

DiKvCache *di_engine_kv_cache(const DiEngine *e, DiKvKey *fingerprint, int *block_tokens, size_t *block_bytes) {
    if (!e || !e->kv.cache || !fingerprint || !block_tokens || !block_bytes) return NULL;
    *fingerprint = e->kv.fingerprint;
    *block_tokens = e->kv.block_tokens;
    *block_bytes = e->kv.block_bytes;
    return e->kv.cache;
}

int di_engine_set_text_hooks(DiEngine *e, const DiTextHooks *hooks) {
    if (!e || !hooks) return di_errorf("set text hooks: NULL engine or hooks");
    if (e->n_requests > 0) return di_errorf("set text hooks: the engine already has requests");
    if (hooks->bos_id >= e->runner->vocab_size)
        return di_errorf("set text hooks: bos_id %d is outside the vocabulary [0, %d)", hooks->bos_id,
                         e->runner->vocab_size);
    e->text = *hooks;
    return 0;
}

void di_engine_set_logits_observer(DiEngine *e, DiLogitsObserver observer, void *user) {
    if (!e) return;
    e->exec.observer = observer;
    e->exec.observer_user = user;
}

int di_engine_expert_load_shape(const DiEngine *e, int *layers, int *experts) {
    DiExpertLoad load;
    if (!e || !layers || !experts) return di_errorf("engine expert load: NULL argument");
    DiRunner *r = e->exec.runner;
    if (!r->ops->expert_load || r->ops->expert_load(r, &load) != 0)
        return di_errorf("engine expert load: model %s has no routed experts to count", r->name ? r->name : "(unnamed)");
    *layers = load.layers;
    *experts = load.experts;
    return 0;
}

int di_engine_set_expert_load_observer(DiEngine *e, DiExpertLoadObserver observer, void *user) {
    int layers, experts;
    if (di_engine_expert_load_shape(e, &layers, &experts) != 0) return -1;
    if (e->n_requests > 0 || e->inflight) return di_errorf("engine expert load: the observer can only change before the first request");
    e->exec.load_observer = observer;
    e->exec.load_observer_user = user;
    di_step_clear_expert_load(e->exec.runner); /* forwards before now (the start-up probe) are no step's */
    return 0;
}

int di_engine_set_page_poisoning(DiEngine *e, int on) {
    if (!e) return di_errorf("engine: NULL");
    if (e->n_requests > 0) return di_errorf("engine: page poisoning can only change before the first request");
    return make_pool(e, on != 0);
}

void di_engine_destroy(DiEngine *e) {
    if (!e) return;
    if (e->async) di_worker_stop(&e->worker);
    for (int i = 0; i < e->n_requests; i++) {
        if (e->pool) di_scheduler_return_pages(&e->sched, e->requests[i]);
        di_constraints_detach(e->constraints, e->requests[i]);
        di_request_free(e->requests[i]);
    }
    free(e->requests);
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < e->steps[i].n_seqs; k++) { /* snapshots of a step never processed */
            di_page_table_release(e->pool, &e->steps[i].seqs[k].snapshot);
            di_page_table_free(&e->steps[i].seqs[k].snapshot);
        }
        di_step_free(&e->steps[i]);
    }
    if (e->exec.spec) di_spec_control_free(e->exec.spec);
    for (int i = 0; e->verifiers && i < e->n_samplers; i++) di_spec_verifier_destroy(e->verifiers[i]);
    free(e->verifiers);
    di_aligned_free(e->draft_logits);
    for (int i = 0; i < e->n_samplers; i++) di_sampler_destroy(e->samplers[i]);
    free(e->samplers);
    di_pool_destroy(e->threads);
    di_scheduler_free(&e->sched);
    di_kv_blocks_close(&e->kv); /* drains the queued disk writes */
    di_page_pool_destroy(e->pool);
    if (e->runner && e->runner->ops->destroy) e->runner->ops->destroy(e->runner);
    di_constraints_destroy(e->constraints); /* after the requests: they hold its grammars */
    free(e->model_dir);
    free(e);
}

int32_t di_engine_vocab_size(const DiEngine *e) { return e ? e->runner->vocab_size : -1; }

const char *di_finish_reason_name(DiFinishReason r) {
    switch (r) {
    case DI_FINISH_STOP: return "stop";
    case DI_FINISH_LENGTH: return "length";
    case DI_FINISH_ABORT: return "abort";
    case DI_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

/* ---- requests ----------------------------------------------------------------------------- */

static DiRequest *find_request(const DiEngine *e, uint64_t id) {
    for (int i = 0; i < e->n_requests; i++)
        if (e->requests[i]->id == id && !e->requests[i]->released) return e->requests[i];
    return NULL;
}

static int prompt_ids_from_input(DiEngine *e, const DiRequestInput *in, int32_t **out_ids, int *out_n) {
    int kinds = (in->prompt_ids != NULL || in->n_prompt_ids != 0) + (in->prompt_text != NULL) + (in->chat_json != NULL);
    if (kinds != 1) return di_errorf("request input: give exactly one of prompt_ids, prompt_text, chat_json");
    size_t n = 0;
    *out_ids = NULL;
    if (in->chat_json) {
        if (!e->text.render_chat)
            return di_errorf("request input: chat messages need the prompt renderer, which this engine was not "
                             "given (di_engine_set_text_hooks); render the conversation and pass prompt_ids");
        if (e->text.render_chat(e->text.ctx, in->chat_json, out_ids, &n) != 0)
            return di_error_wrap("request input: rendering the conversation");
    } else if (in->prompt_text) {
        if (!e->text.encode)
            return di_errorf("request input: text prompts need the model's tokenizer, which this engine was not "
                             "given (di_engine_set_text_hooks); pass prompt_ids");
        int32_t *ids = NULL;
        if (e->text.encode(e->text.ctx, in->prompt_text, strlen(in->prompt_text), &ids, &n) != 0)
            return di_error_wrap("request input: tokenizing the prompt");
        int bos = e->text.bos_id >= 0;
        *out_ids = di_calloc(n + (size_t)bos + 1, sizeof **out_ids, "prompt ids");
        if (*out_ids) {
            if (bos) (*out_ids)[0] = e->text.bos_id;
            if (n) memcpy(*out_ids + bos, ids, n * sizeof *ids);
            n += (size_t)bos;
        }
        free(ids);
        if (!*out_ids) return -1;
    }
    if (in->chat_json || in->prompt_text) {
        if (n > (size_t)INT32_MAX / 2) {
            free(*out_ids);
            return di_errorf("request input: prompt of %zu tokens is too long", n);
        }
        *out_n = (int)n;
        return 0;
    }
    if (!in->prompt_ids || in->n_prompt_ids < 0)
        return di_errorf("request input: prompt_ids is NULL or n_prompt_ids (%d) negative", in->n_prompt_ids);
    *out_ids = di_calloc((size_t)(in->n_prompt_ids ? in->n_prompt_ids : 1), sizeof **out_ids, "prompt ids");
    if (!*out_ids) return -1;
    memcpy(*out_ids, in->prompt_ids, (size_t)in->n_prompt_ids * sizeof **out_ids);
    *out_n = in->n_prompt_ids;
    return 0;
}

static int check_prompt(const DiEngine *e, const int32_t *ids, int n, const DiSamplingParams *p) {
    if (n <= 0) return di_errorf("request input: the prompt is empty");
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->runner->vocab_size)
            return di_errorf("request input: prompt token %d at index %d is outside the vocabulary [0, %d)", ids[i],
                             i, e->runner->vocab_size);
    if ((int64_t)n + p->max_tokens > INT32_MAX)
        return di_errorf("request input: prompt (%d tokens) + max_tokens (%d) is too long", n, p->max_tokens);
    size_t pages = e->runner->ops->pages_for_tokens(e->runner, (int64_t)n + p->max_tokens);
    if (pages > di_page_pool_total(e->pool))
        return di_errorf("request input: prompt (%d tokens) + max_tokens (%d) needs %zu state pages of %zu bytes, "
                         "the engine has %zu (state_memory_bytes %zu)",
                         n, p->max_tokens, pages, di_page_pool_page_bytes(e->pool), di_page_pool_total(e->pool),
                         e->opts.state_memory_bytes);
    return 0;
}

static int remember(DiEngine *e, DiRequest *req) {
    size_t cap = (size_t)e->cap_requests;
    if (di_grow(&e->requests, &cap, (size_t)e->n_requests + 1, 64, sizeof *e->requests, "request list") != 0) return -1;
    e->cap_requests = (int)cap;
    e->requests[e->n_requests++] = req;
    return 0;
}

int di_engine_add_request(DiEngine *e, const DiRequestInput *in, const DiSamplingParams *params,
                          DiStreamCallback callback, void *user, uint64_t *out_id) {
    if (!e || !in) return di_errorf("add request: NULL engine or input");
    DiSamplingParams defaults;
    if (!params) {
        di_sampling_params_init(&defaults);
        params = &defaults;
    }
    if (di_sampling_params_check(params, e->runner->vocab_size) != 0) return di_error_wrap("add request");
    int32_t *ids = NULL;
    int n = 0;
    if (prompt_ids_from_input(e, in, &ids, &n) != 0) return di_error_wrap("add request");
    if (check_prompt(e, ids, n, params) != 0) {
        free(ids);
        return di_error_wrap("add request");
    }
    uint64_t seed = params->seed;
    if (!params->has_seed) {
        uint64_t counter = e->seed_counter++;
        seed = XXH3_64bits_withSeed(&counter, sizeof counter, e->opts.seed);
    }
    if (in->cache_salt && in->cache_salt[0] && !e->kv.cache) {
        free(ids);
        return di_errorf("add request: cache_salt is set but the KV block cache is off (kv_cache_ram_bytes / "
                         "kv_cache_dir), so no salt would separate this request's cached state");
    }
    DiRequest *req = di_request_create(e->next_id, ids, n, params, seed, callback, user);
    free(ids);
    if (!req) return di_error_wrap("add request");
    req->reproducible = params->has_seed || e->seeded;
    req->exact_state = in->exact_state != 0;
    if (di_kv_blocks_set_salt(req, in->cache_salt) != 0) {
        di_request_free(req);
        return di_error_wrap("add request");
    }
    if (di_constraints_attach(e->constraints, &e->text, req) != 0 || remember(e, req) != 0 ||
        di_scheduler_add(&e->sched, req) != 0) {
        if (e->n_requests > 0 && e->requests[e->n_requests - 1] == req) e->n_requests--;
        di_constraints_detach(e->constraints, req);
        di_request_free(req);
        return di_error_wrap("add request");
    }
    req->t_arrival = di_now_seconds();
    di_kv_blocks_prefetch(&e->kv, req);
    e->next_id++;
    e->m.requests_added++;
    if (out_id) *out_id = req->id;
    return 0;
}

int di_engine_prepare_constraint(DiEngine *e, int type, const char *constraint) {
    if (!e) return di_errorf("prepare constraint: NULL engine");
    return di_constraints_prepare(e->constraints, &e->text, type, constraint);
}

/* ---- exact states between engines (PD, prefix_cache.h) ---------------------------------------- */

/* Whether the step in flight computes for req (its pages are being written). */
static bool computing(const DiEngine *e, const DiRequest *req) {
    for (int i = 0; e->inflight && i < e->inflight->n_seqs; i++)
        if (e->inflight->seqs[i].req == req) return true;
    return false;
}

int di_engine_export_state(DiEngine *e, uint64_t id, void **blob, size_t *len) {
    if (!e || !blob || !len) return di_errorf("export state: NULL argument");
    DiRequest *req = find_request(e, id);
    if (!req) return di_errorf("export state: no request with id %llu", (unsigned long long)id);
    if (req->state != DI_REQ_FINISHED || req->finish_reason == DI_FINISH_ABORT || req->state_unreliable ||
        !di_scheduler_keeps_state(&e->sched, req) || req->n_computed <= 0)
        return di_errorf("export state: request %llu has no exact state (unfinished, aborted, failed, restored "
                         "from KV blocks without exact_state, or empty)", (unsigned long long)id);
    if (e->runner->release_state)
        return di_errorf("export state: the model (%s) keeps request state outside its pages", e->runner->name ? e->runner->name : "runner");
    if (computing(e, req)) return di_errorf("export state: request %llu is still being computed", (unsigned long long)id);
    if (req->pages.n > 0) /* inside its FINISH callback: the pages hold tokens[0, n_computed) */
        return di_prefix_state_write(&e->sched.cache, req->tokens, req->n_computed, req->pages.pages, req->pages.n, blob, len);
    int hit = di_prefix_cache_find(&e->sched.cache, req->tokens, req->n_computed);
    if (hit < 0 || e->sched.cache.entries[hit].n_tokens != req->n_computed)
        return di_errorf("export state: request %llu's state is no longer held (the prefix cache is off or evicted it)",
                         (unsigned long long)id);
    const DiPrefixEntry *en = &e->sched.cache.entries[hit];
    return di_prefix_state_write(&e->sched.cache, en->tokens, en->n_tokens, en->pages.pages, en->pages.n, blob, len);
}

int di_engine_state_progress(DiEngine *e, uint64_t id, DiStateProgress *out) {
    if (!e || !out) return di_errorf("state progress: NULL argument");
    DiRequest *req = find_request(e, id);
    if (!req) return di_errorf("state progress: no request with id %llu", (unsigned long long)id);
    *out = (DiStateProgress){.n_committed = req->n_computed, .n_prompt = req->n_prompt,
                             .page_bytes = di_page_pool_page_bytes(e->pool), .pages = req->pages.pages};
    for (int i = 0; e->inflight && i < e->inflight->n_seqs; i++) /* async: its rows are being written */
        if (e->inflight->seqs[i].req == req) out->n_committed = e->inflight->seqs[i].start_pos;
    if (req->n_prompt <= 0 || di_prefix_state_size(&e->sched.cache, req->n_prompt, &out->state_bytes, &out->pages_at) != 0)
        return -1;
    if (e->runner->ops->final_pages && out->n_committed > 0 && !e->runner->release_state && req->pages.n > 0) {
        e->runner->ops->final_pages(e->runner, out->n_committed, &out->first_final, &out->end_final);
        if (out->end_final > req->pages.n) out->end_final = req->pages.n;
        if (out->first_final > out->end_final) out->first_final = out->end_final;
    }
    return 0;
}

int di_engine_import_state(DiEngine *e, const void *blob, size_t len, int64_t *n_tokens) {
    if (!e || !blob || !n_tokens) return di_errorf("import state: NULL argument");
    if (e->runner->release_state)
        return di_errorf("import state: the model (%s) keeps request state outside its pages", e->runner->name ? e->runner->name : "runner");
    return di_prefix_cache_import(&e->sched.cache, blob, len, n_tokens);
}

size_t di_engine_page_bytes(const DiEngine *e) { return e ? di_page_pool_page_bytes(e->pool) : 0; }

/* ---- output processing -------------------------------------------------------------------- */

static void deliver(DiRequest *req) {
    bool final = req->finish_reason != DI_FINISH_NONE;
    size_t hold = req->longest_stop > 0 ? req->longest_stop - 1 : 0;
    size_t ready = di_text_stream_ready(&req->text, hold, final);
    int n_new = req->n_output - req->n_output_streamed;
    size_t text_new = ready - req->text.delivered;
    if (req->callback && (n_new > 0 || text_new > 0 || final)) {
        DiStreamDelta d = {
            .request_id = req->id,
            .new_token_ids = req->tokens + req->n_prompt + req->n_output_streamed,
            .n_new_tokens = n_new,
            .new_text = req->text.text ? req->text.text + req->text.delivered : "",
            .new_text_len = text_new,
            .new_logprobs = req->logprobs ? req->logprobs + req->n_output_streamed : NULL,
            .finish_reason = req->finish_reason,
        };
        req->n_output_streamed = req->n_output;
        req->text.delivered = ready;
        req->callback(req->user, &d); /* may call di_engine_abort / di_engine_release */
        return;
    }
    req->n_output_streamed = req->n_output;
    req->text.delivered = ready;
}

static void finish(DiEngine *e, DiRequest *req, DiFinishReason reason) {
    di_text_stream_flush(&req->text);
    req->finish_reason = reason;
    req->t_finish = di_now_seconds();
    di_scheduler_finish(&e->sched, req);
    if (reason == DI_FINISH_ABORT || reason == DI_FINISH_ERROR) e->m.requests_aborted++;
    else e->m.requests_finished++;
}

static bool contains(const int32_t *ids, int n, int32_t token) {
    for (int i = 0; i < n; i++)
        if (ids[i] == token) return true;
    return false;
}

/* Accept the token sampled at `pos`: stop checks, text, finish by length. */
static void confirm_token(DiEngine *e, DiRequest *req, int64_t pos) {
    int32_t token = req->tokens[pos];
    req->n_output++;
    if (req->n_output == 1) req->t_first_token = di_now_seconds();
    if (req->logprobs) req->cumulative_logprob += req->logprobs[pos - req->n_prompt].logprob;
    bool eos = !req->params.ignore_eos && contains(e->runner->eos_ids, e->runner->n_eos_ids, token);
    if (eos || contains(req->params.stop_token_ids, req->params.n_stop_token_ids, token)) {
        req->stop_token = token; /* the token stays in token_ids; its text is not added */
        finish(e, req, DI_FINISH_STOP);
        return;
    }
    if (e->text.token_bytes && !(e->text.is_special && e->text.is_special(e->text.ctx, token))) {
        size_t len = 0;
        const char *bytes = e->text.token_bytes(e->text.ctx, token, &len);
        if (!bytes) len = 0;
        size_t before = req->text.len;
        if (len > 0 && di_text_stream_append(&req->text, bytes, len) != 0) {
            finish(e, req, DI_FINISH_ABORT); /* out of memory for the text: stop this request */
            return;
        }
        if (req->params.n_stop > 0 && req->n_output >= req->params.min_tokens) {
            size_t from = before > req->longest_stop - 1 ? before - (req->longest_stop - 1) : 0;
            int hit = di_text_stream_find_stop(&req->text, req->params.stop, req->params.n_stop, from);
            if (hit >= 0) {
                req->stop_string = hit;
                finish(e, req, DI_FINISH_STOP);
                return;
            }
        }
    }
    if (req->n_output >= req->params.max_tokens) finish(e, req, DI_FINISH_LENGTH);
}

static void forget(DiEngine *e, DiRequest *req) {
    for (int i = 0; i < e->n_requests; i++)
        if (e->requests[i] == req) {
            memmove(&e->requests[i], &e->requests[i + 1], (size_t)(e->n_requests - i - 1) * sizeof *e->requests);
            e->n_requests--;
            break;
        }
    di_constraints_detach(e->constraints, req);
    di_request_free(req);
}

/* The KV block cache keeps every block the step completed (its pages are still the request's:
 * pages of a finished or preempted request are returned only once its steps are processed). */
static void capture_blocks(DiEngine *e, const DiStep *step) {
    if (!e->kv.cache || step->status != 0) return;
    for (int i = 0; i < step->n_seqs; i++)
        if (!step->seqs[i].failed)
            di_kv_blocks_capture(&e->kv, step->seqs[i].req, step->seqs[i].start_pos + step->seqs[i].n_tokens);
}

/* A verify step's accepted drafts are committed positions (the state holds them, even when the
 * request stopped before them) and planned outputs: the planner counted the anchor only. */
static void count_verify(DiEngine *e, const DiStepSeq *s) {
    DiRequest *req = s->req;
    req->n_computed += s->n_accepted;
    req->n_output_scheduled += s->n_accepted;
    req->spec_drafts++;
    req->spec_draft_tokens += (uint64_t)s->n_drafts;
    req->spec_accepted += (uint64_t)s->n_accepted;
    e->m.spec_num_drafts++;
    e->m.spec_num_draft_tokens += (uint64_t)s->n_drafts;
    e->m.spec_num_accepted_tokens += (uint64_t)s->n_accepted;
    e->m.spec_accepted_hist[s->n_accepted]++;
}

/* A request that failed inside a successful step ends alone, with its cause. */
static void fail_request(DiEngine *e, DiRequest *req, const char *why) {
    req->state_unreliable = true; /* never cache a state whose step did not complete for it */
    if (req->state == DI_REQ_FINISHED) return;
    if (!req->error) req->error = strdup(why ? why : "request failed");
    finish(e, req, DI_FINISH_ERROR);
    deliver(req);
}

static int process_step(DiEngine *e, DiStep *step) {
    double t0 = di_now_seconds();
    int rc = 0;
    if (step->status != 0) {
        rc = di_errorf("%s", step->error);
        for (int i = 0; i < step->n_seqs; i++) {
            DiRequest *req = step->seqs[i].req;
            req->state_unreliable = true; /* a failed forward may have half-written it: never cache it */
            if (req->state == DI_REQ_FINISHED) continue;
            finish(e, req, DI_FINISH_ABORT);
            deliver(req);
        }
    } else {
        /* Before the outputs: once a request's output reaches its caller, the blocks the step
         * completed are in the cache (a PD prefill worker reads them right after its FINISH). */
        capture_blocks(e, step);
        for (int i = 0; i < step->n_seqs; i++) {
            const DiStepSeq *s = &step->seqs[i];
            DiRequest *req = s->req;
            if (s->failed) { /* this request alone: the others go on */
                fail_request(e, req, s->error);
                continue;
            }
            if (s->n_drafts > 0) count_verify(e, s);
            e->m.spec_num_grammar_truncated += s->grammar_truncated;
            if (!s->sample || req->state == DI_REQ_FINISHED) continue; /* a token after a stop is dropped */
            int64_t pos = s->start_pos + s->n_tokens;
            for (int j = 0; j <= s->n_accepted && req->state != DI_REQ_FINISHED; j++) confirm_token(e, req, pos + j);
            deliver(req);
        }
    }
    for (int i = 0; i < step->n_seqs; i++) { /* prefix-cache snapshots the step took */
        DiStepSeq *s = &step->seqs[i];
        if (s->snapshot.n == 0) continue;
        if (step->status == 0 && !s->failed)
            di_prefix_cache_store(&e->sched.cache, s->req->tokens, s->start_pos + s->n_tokens, &s->snapshot);
        di_page_table_release(e->pool, &s->snapshot);
        di_page_table_free(&s->snapshot);
    }
    for (int i = 0; i < step->n_seqs; i++) {
        DiRequest *req = step->seqs[i].req;
        req->inflight--;
        di_scheduler_settle(&e->sched, req);
        if (req->released && req->inflight == 0) forget(e, req);
    }
    e->m.steps++;
    e->m.prefill_tokens += (uint64_t)step->n_prefill_tokens;
    e->m.decode_tokens += (uint64_t)step->n_decode_tokens;
    e->m.time_forward_s += step->time_forward_s;
    e->m.time_sample_s += step->time_sample_s;
    e->m.time_draft_s += step->time_draft_s;
    e->m.time_output_s += di_now_seconds() - t0;
    return rc;
}

/* ---- stepping ----------------------------------------------------------------------------- */

static int count_unfinished(const DiEngine *e) { return e->sched.n_waiting + e->sched.n_running; }

int di_engine_step(DiEngine *e, int *out_active) {
    if (!e) return di_errorf("engine step: NULL engine");
    double t0 = di_now_seconds();
    DiStep *plan = &e->steps[e->next_step];
    if (di_scheduler_plan(&e->sched, plan) != 0) return di_error_wrap("engine step: planning");
    double t1 = di_now_seconds();
    e->m.time_schedule_s += t1 - t0;
    int rc = 0;
    if (e->async) {
        DiStep *done = e->inflight;
        if (done) {
            di_worker_wait(&e->worker);
            e->m.time_wait_s += di_now_seconds() - t1;
            e->inflight = NULL;
        }
        if (done && plan->n_seqs == 0) {
            /* Nothing fitted while the step in flight held its requests' pages (a small pool):
             * process it first, which returns them, then plan again. */
            rc = process_step(e, done);
            done = NULL;
            if (rc == 0 && di_scheduler_plan(&e->sched, plan) != 0) return di_error_wrap("engine step: planning");
        }
        if (plan->n_seqs > 0) {
            di_worker_submit(&e->worker, plan);
            e->inflight = plan;
            e->next_step ^= 1;
        }
        if (done) rc = process_step(e, done);
    } else if (plan->n_seqs > 0) {
        di_step_execute(&e->exec, plan);
        rc = process_step(e, plan);
    }
    int active = count_unfinished(e) + (e->inflight != NULL);
    if (rc == 0 && plan->n_seqs == 0 && !e->inflight && active > 0)
        rc = di_errorf("engine step: no progress possible (%d waiting, %d running, %zu of %zu state pages free)",
                       e->sched.n_waiting, e->sched.n_running, di_page_pool_free(e->pool),
                       di_page_pool_total(e->pool));
    if (out_active) *out_active = active;
    return rc;
}

int di_engine_run(DiEngine *e) {
    if (!e) return di_errorf("engine run: NULL engine");
    int active = 1;
    while (active > 0)
        if (di_engine_step(e, &active) != 0) return -1;
    return 0;
}

/* ---- abort, outputs, metrics -------------------------------------------------------------- */

int di_engine_abort(DiEngine *e, uint64_t id) {
    if (!e) return di_errorf("abort: NULL engine");
    DiRequest *req = find_request(e, id);
    if (!req) return di_errorf("abort: no request with id %llu", (unsigned long long)id);
    if (req->state == DI_REQ_FINISHED) return 0;
    finish(e, req, DI_FINISH_ABORT);
    deliver(req);
    return 0;
}

int di_engine_release(DiEngine *e, uint64_t id) {
    if (!e) return di_errorf("release: NULL engine");
    DiRequest *req = find_request(e, id);
    if (!req) return di_errorf("release: no request with id %llu", (unsigned long long)id);
    if (req->state != DI_REQ_FINISHED) {
        finish(e, req, DI_FINISH_ABORT);
        deliver(req);
    }
    req->released = true;
    if (req->inflight == 0) forget(e, req);
    return 0;
}

const char *di_engine_request_error(DiEngine *e, uint64_t id) {
    if (!e) return di_errorf("request error: NULL engine"), NULL;
    DiRequest *req = find_request(e, id);
    if (!req) return di_errorf("request error: no request with id %llu", (unsigned long long)id), NULL;
    if (req->error) return req->error;
    return req->finish_reason == DI_FINISH_ERROR ? "request failed (no memory for its message)" : "";
}

int di_engine_get_output(DiEngine *e, uint64_t id, DiRequestOutput *out) {
    if (!e || !out) return di_errorf("get output: NULL engine or output");
    DiRequest *req = find_request(e, id);
    if (!req) return di_errorf("get output: no request with id %llu", (unsigned long long)id);
    memset(out, 0, sizeof *out);
    out->request_id = req->id;
    out->prompt_ids = req->tokens;
    out->n_prompt_ids = req->n_prompt;
    out->token_ids = req->tokens + req->n_prompt;
    out->n_tokens = req->n_output;
    out->text = req->text.text ? req->text.text : "";
    out->text_len = req->text.len;
    out->logprobs = req->logprobs;
    out->cumulative_logprob = req->cumulative_logprob;
    out->finish_reason = req->finish_reason;
    out->stop_token = req->stop_token;
    out->stop_string = req->stop_string;
    out->seed = req->seed;
    out->n_preemptions = req->n_preemptions;
    out->n_cached_tokens = req->n_cached_tokens;
    out->time_to_first_token_s = req->n_output > 0 ? req->t_first_token - req->t_arrival : 0;
    out->total_time_s = (req->finish_reason ? req->t_finish : di_now_seconds()) - req->t_arrival;
    out->time_in_queue_s = req->t_scheduled > 0 ? req->t_scheduled - req->t_arrival : 0;
    out->spec_num_drafts = req->spec_drafts;
    out->spec_num_draft_tokens = req->spec_draft_tokens;
    out->spec_num_accepted_tokens = req->spec_accepted;
    return 0;
}

int di_engine_get_metrics(const DiEngine *e, DiEngineMetrics *out) {
    if (!e || !out) return di_errorf("get metrics: NULL engine or output");
    *out = e->m;
    out->preemptions = e->sched.preemptions;
    out->requests_waiting = e->sched.n_waiting;
    out->requests_running = e->sched.n_running;
    out->page_bytes = di_page_pool_page_bytes(e->pool);
    out->pages_total = di_page_pool_total(e->pool);
    out->pages_used = di_page_pool_used(e->pool);
    out->pages_peak = di_page_pool_peak(e->pool);
    out->state_bytes_used = out->pages_used * out->page_bytes;
    const DiPrefixCache *c = &e->sched.cache;
    out->prefix_cache_enabled = c->max_pages > 0;
    out->prefix_cache_lookups = c->lookups;
    out->prefix_cache_hits = c->hits;
    out->prefix_cache_hit_tokens = c->hit_tokens;
    out->prefix_cache_entries = (size_t)c->n_entries;
    out->pages_cached = c->pages;
    di_kv_blocks_metrics(&e->kv, out);
    return 0;
}
