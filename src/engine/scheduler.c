/* scheduler.c — planning steps: decodes first, then the prefill budget split over running and
 * waiting requests (shortest first, the oldest always served), then admission; preemption of the
 * youngest running request when state pages run out (see scheduler.h). */
#include "engine/scheduler.h"

#include "base/error.h"
#include "base/mem.h"
#include "engine/step.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int di_scheduler_init(DiScheduler *s, const DiSchedulerConfig *cfg, DiPagePool *pool, const DiRunner *runner) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->pool = pool;
    s->runner = runner;
    s->cap = 64;
    s->waiting = di_calloc((size_t)s->cap, sizeof *s->waiting, "waiting queue");
    s->running = di_calloc((size_t)s->cap, sizeof *s->running, "running list");
    s->wants = di_calloc((size_t)s->cap, sizeof *s->wants, "prefill wants");
    s->grants = di_calloc((size_t)s->cap, sizeof *s->grants, "prefill grants");
    s->candidates = di_calloc((size_t)s->cap, sizeof *s->candidates, "prefill candidates");
    if (!s->waiting || !s->running || !s->wants || !s->grants || !s->candidates) {
        di_scheduler_free(s);
        return -1;
    }
    return 0;
}

void di_scheduler_free(DiScheduler *s) {
    di_prefix_cache_free(&s->cache);
    free(s->waiting);
    free(s->running);
    free(s->wants);
    free(s->grants);
    free(s->candidates);
    memset(s, 0, sizeof *s);
}

/* The five lists share one capacity: each grows from it to the same doubled size. */
static int ensure_capacity(DiScheduler *s, int needed) {
    if (needed <= s->cap) return 0;
    size_t need = (size_t)needed, c[5];
    for (int i = 0; i < 5; i++) c[i] = (size_t)s->cap;
    if (di_grow(&s->waiting, &c[0], need, 64, sizeof *s->waiting, "waiting queue") != 0 ||
        di_grow(&s->running, &c[1], need, 64, sizeof *s->running, "running list") != 0 ||
        di_grow(&s->wants, &c[2], need, 64, sizeof *s->wants, "prefill wants") != 0 ||
        di_grow(&s->grants, &c[3], need, 64, sizeof *s->grants, "prefill grants") != 0 ||
        di_grow(&s->candidates, &c[4], need, 64, sizeof *s->candidates, "prefill candidates") != 0)
        return -1;
    s->cap = (int)c[0];
    return 0;
}

int di_scheduler_add(DiScheduler *s, DiRequest *req) {
    if (ensure_capacity(s, s->n_waiting + s->n_running + 1) != 0) return -1;
    req->state = DI_REQ_WAITING;
    s->waiting[s->n_waiting++] = req;
    return 0;
}

static void remove_at(DiRequest **list, int *n, int i) {
    memmove(&list[i], &list[i + 1], (size_t)(*n - i - 1) * sizeof *list);
    (*n)--;
}

static void remove_from(DiRequest **list, int *n, const DiRequest *req) {
    for (int i = 0; i < *n; i++)
        if (list[i] == req) {
            remove_at(list, n, i);
            return;
        }
}

/* With the KV block cache on, a request may hold a restored (bounded-replay) state, which is not
 * the exact state of its tokens: only exact_state requests feed the prefix cache then. */
bool di_scheduler_keeps_state(const DiScheduler *s, const DiRequest *req) {
    return !(s->kv && s->kv->cache) || req->exact_state;
}

void di_scheduler_return_pages(DiScheduler *s, DiRequest *req) {
    if (req->pages.n > 0 && s->runner->release_state) {
        s->runner->release_state((DiRunner *)s->runner, req->pages.pages, req->pages.n);
        di_page_table_release(s->pool, &req->pages); /* state outside the pages: nothing to cache */
        return;
    }
    /* A finished request is idle here, so its pages hold the state of exactly tokens[0, n_computed)
     * (every planned position was computed, from inputs that were all sampled by then). */
    if (req->state == DI_REQ_FINISHED && !req->state_unreliable && di_scheduler_keeps_state(s, req))
        di_prefix_cache_store(&s->cache, req->tokens, req->n_computed, &req->pages);
    else
        di_page_table_release(s->pool, &req->pages);
}

/* Return the request's pages now if no in-flight step uses them, else when it becomes idle. */
static void release_pages(DiScheduler *s, DiRequest *req) {
    if (req->inflight > 0) {
        if (!req->release_pages_pending) s->pages_releasing += req->pages.n;
        req->release_pages_pending = true;
        return;
    }
    di_scheduler_return_pages(s, req);
}

void di_scheduler_settle(DiScheduler *s, DiRequest *req) {
    if (req->inflight > 0 || !req->release_pages_pending) return;
    s->pages_releasing -= req->pages.n;
    req->release_pages_pending = false;
    /* a request re-admitted while its old pages were pending would hold fresh ones: never, since
     * admission waits for an idle request (see admit) */
    di_scheduler_return_pages(s, req);
}

void di_scheduler_finish(DiScheduler *s, DiRequest *req) {
    if (req->state == DI_REQ_WAITING) remove_from(s->waiting, &s->n_waiting, req);
    else if (req->state == DI_REQ_RUNNING) remove_from(s->running, &s->n_running, req);
    req->state = DI_REQ_FINISHED;
    release_pages(s, req);
}

/* Back to the front of the waiting queue, to be prefilled again over its tokens (prefill_end). */
static void preempt(DiScheduler *s, int running_index) {
    DiRequest *req = s->running[running_index];
    remove_at(s->running, &s->n_running, running_index);
    memmove(&s->waiting[1], &s->waiting[0], (size_t)s->n_waiting * sizeof *s->waiting);
    s->waiting[0] = req;
    s->n_waiting++;
    req->state = DI_REQ_WAITING;
    req->n_computed = 0;
    req->n_preemptions++;
    s->preemptions++;
    release_pages(s, req);
}

/* The youngest running request younger than running[index] and not planned in this step; -1 if
 * none (older requests are never preempted for a younger one). */
static int pick_victim(const DiScheduler *s, int index) {
    for (int i = s->n_running - 1; i > index; i--)
        if (s->running[i]->planned_epoch != s->epoch) return i;
    return -1;
}

typedef enum { GOT_PAGES, WAIT_FOR_PAGES, PREEMPTED_SELF } PageOutcome;

/* Make the request hold pages for `n_tokens` positions, preempting younger requests if needed. */
static PageOutcome secure_pages(DiScheduler *s, int index, int64_t n_tokens) {
    DiRequest *req = s->running[index];
    size_t need = s->runner->ops->pages_for_tokens(s->runner, n_tokens);
    for (;;) {
        size_t missing = need > req->pages.n ? need - req->pages.n : 0;
        if (missing > di_page_pool_free(s->pool)) di_prefix_cache_make_room(&s->cache, missing, NULL);
        if (missing <= di_page_pool_free(s->pool)) {
            if (di_page_table_reserve(s->pool, &req->pages, need) == 0) return GOT_PAGES;
            return WAIT_FOR_PAGES; /* allocation of the table array failed; try next step */
        }
        if (missing <= di_page_pool_free(s->pool) + s->pages_releasing) return WAIT_FOR_PAGES;
        int victim = pick_victim(s, index);
        if (victim < 0) break;
        preempt(s, victim);
    }
    preempt(s, index);
    return PREEMPTED_SELF;
}

/* Prompt caching also keeps the state just before a prompt's last token (prefix_cache.h): the
 * same prompt again, or a chat's next turn whose history re-renders differently after the
 * assistant tag (reasoning dropped), restarts there.  The chunk that would compute that position
 * ends at it (the last token then runs in the next step) and the step copies the state.  Short
 * prompts are not worth the extra step. */
#define SNAPSHOT_MIN_TOKENS 32

static bool cut_for_snapshot(const DiScheduler *s, const DiRequest *req, int64_t start, int64_t *chunk) {
    int64_t at = req->n_prompt - 1;
    /* a chunk that ends exactly at `at` (a prompt of k * chunk + 1 tokens) needs no cut but
     * still takes the copy: its last token runs in the next step anyway */
    if (s->cache.max_pages == 0 || !di_scheduler_keeps_state(s, req) || req->snapshot_planned || at < SNAPSHOT_MIN_TOKENS || start >= at || start + *chunk < at)
        return false;
    *chunk = at - start;
    return true;
}

/* Pages for the snapshot of the step's last sequence (planned by cut_for_snapshot), if the pool
 * has them free; without them the snapshot is skipped (the cut chunk is still correct). */
static void reserve_snapshot(DiScheduler *s, DiStep *step, DiRequest *req) {
    DiStepSeq *seq = &step->seqs[step->n_seqs - 1];
    size_t need = s->runner->ops->pages_for_tokens(s->runner, seq->start_pos + seq->n_tokens);
    req->snapshot_planned = true;
    if (need <= s->cache.max_pages && need <= di_page_pool_free(s->pool) &&
        di_page_table_reserve(s->pool, &seq->snapshot, need) != 0) {
        di_page_table_release(s->pool, &seq->snapshot);
        di_page_table_free(&seq->snapshot);
    }
}

/* The most of `pending` positions one request may compute in this step. */
static int64_t chunk_limit(const DiScheduler *s, int64_t pending, int budget) {
    int64_t chunk = pending < budget ? pending : budget;
    if (s->cfg.max_prefill_chunk > 0 && chunk > s->cfg.max_prefill_chunk) chunk = s->cfg.max_prefill_chunk;
    return chunk;
}

/* Drafts a decoding request may verify in this step: the configured maximum, less what would
 * pass max_tokens (anchor + accepted drafts + 1 are emitted) or the step's token budget; with
 * fixed lengths the budget never shortens them (-1: wait for a step with room). */
static int32_t draft_room(const DiScheduler *s, const DiRequest *req, int budget) {
    /* the anchor must be a generated token: a prompt's last token (a chunked prefill's last chunk
     * of one) samples the first output plain, as an unchunked prefill does */
    if (req->n_computed < req->n_prompt) return 0;
    int64_t room = s->cfg.draft_max;
    int64_t left = (int64_t)req->params.max_tokens - req->n_output_scheduled - 1;
    if (left < room) room = left;
    if (s->cfg.draft_fixed && room > s->cfg.max_batch_tokens - 1) room = s->cfg.max_batch_tokens - 1;
    if (budget - 1 < room) {
        if (s->cfg.draft_fixed) return -1;
        room = budget - 1;
    }
    return room > 0 ? (int32_t)room : 0;
}

/* Where a request's prefill ends.  With speculation a recompute after preemption stops before
 * the last generated token: that token is the anchor of the request's next verify block, as it
 * was before the preemption.  Sampling the token after it in the prefill would draw it by the
 * plain rule instead of the verify block's and move every later anchor, so a fixed-length seeded
 * request would give other tokens than it does unpreempted. */
static int64_t prefill_end(const DiScheduler *s, const DiRequest *req) {
    int64_t known = di_request_known_tokens(req);
    return s->cfg.draft_max > 0 && known > req->n_prompt ? known - 1 : known;
}

static int plan_running(DiScheduler *s, DiStep *step, int *budget, bool decodes) {
    for (int i = 0; i < s->n_running && step->n_seqs < s->cfg.max_num_seqs && *budget > 0; i++) {
        DiRequest *req = s->running[i];
        if (req->planned_epoch == s->epoch) continue;
        if (req->n_output_scheduled >= req->params.max_tokens) continue;
        int64_t pending = di_request_known_tokens(req) - req->n_computed;
        if (pending <= 0 || (pending == 1) != decodes) continue;
        if (!decodes && req->grant_epoch != s->epoch) continue; /* not among this step's prefills */
        int64_t chunk = chunk_limit(s, decodes ? pending : prefill_end(s, req) - req->n_computed, *budget);
        if (!decodes && chunk > req->prefill_grant) chunk = req->prefill_grant;
        if (chunk <= 0) continue;
        bool snapshot = cut_for_snapshot(s, req, req->n_computed, &chunk);
        int32_t drafts = decodes ? draft_room(s, req, *budget) : 0;
        if (drafts < 0) continue;
        PageOutcome got = secure_pages(s, i, req->n_computed + chunk + drafts);
        if (got == PREEMPTED_SELF) {
            i--; /* the list shifted */
            continue;
        }
        if (got == WAIT_FOR_PAGES) continue;
        /* preemption only removes requests after i, so index i is still req */
        bool sample = req->n_computed + chunk == di_request_known_tokens(req);
        if (di_step_add(step, req, req->n_computed, (int32_t)chunk, sample, drafts) != 0) return -1;
        if (snapshot) reserve_snapshot(s, step, req);
        req->planned_epoch = s->epoch;
        req->inflight++;
        req->n_computed += chunk;
        if (sample) req->n_output_scheduled++;
        *budget -= (int)chunk + drafts;
    }
    return 0;
}

/* Admission through the prefix cache: the longest cached state the request's tokens extend,
 * leaving at least one of the `end` positions to compute (it may be sampled), copied when the
 * pool has room for a copy, else taken.  1 when the request holds its pages, 0 when it must wait. */
static int claim_from_prefix_cache(DiScheduler *s, DiRequest *req, int64_t end, int budget, int grant,
                                   int64_t *start, int64_t *chunk, bool *snapshot) {
    int hit = di_prefix_cache_find(&s->cache, req->tokens, end - 1);
    *start = hit >= 0 ? s->cache.entries[hit].n_tokens : 0;
    size_t have = hit >= 0 ? s->cache.entries[hit].pages.n : 0;
    *chunk = chunk_limit(s, end - *start, budget);
    if (*chunk > grant) *chunk = grant;
    *snapshot = cut_for_snapshot(s, req, *start, chunk);
    size_t need = s->runner->ops->pages_for_tokens(s->runner, *start + *chunk);
    if (hit >= 0 && need <= di_page_pool_free(s->pool)) { /* room for a copy: the entry stays */
        if (di_page_table_reserve(s->pool, &req->pages, need) != 0) return -1;
        *start = di_prefix_cache_copy(&s->cache, hit, &req->pages);
    } else {
        /* admission by free pages (cached states give way), never by preemption */
        if (need - have > di_page_pool_free(s->pool) && !di_prefix_cache_make_room(&s->cache, need - have, &hit))
            return 0;
        if (hit >= 0) *start = di_prefix_cache_take(&s->cache, hit, &req->pages);
        if (di_page_table_reserve(s->pool, &req->pages, need) != 0) return -1;
    }
    s->cache.lookups += s->cache.max_pages > 0;
    if (req->n_preemptions == 0) req->n_cached_tokens = (int)*start;
    return 1;
}

/* Admission through the KV block cache (kv_blocks.h): restore the longest cached run of blocks,
 * then prefill from the replay start.  1 when the request holds its pages, 0 when it must wait. */
static int claim_from_blocks(DiScheduler *s, DiRequest *req, int64_t end, int budget, int grant, int64_t *start,
                             int64_t *chunk) {
    bool wait = false;
    int64_t restored = di_kv_blocks_restore(s->kv, s->pool, req, end - 1, &wait);
    if (restored < 0) return -1;
    if (wait) return 0;
    *start = restored > 0 ? req->replay_start : 0;
    *chunk = chunk_limit(s, end - *start, budget);
    if (*chunk > grant) *chunk = grant;
    size_t need = s->runner->ops->pages_for_tokens(s->runner, *start + *chunk);
    if (need > req->pages.n && need - req->pages.n > di_page_pool_free(s->pool)) {
        di_page_table_release(s->pool, &req->pages); /* restored again when it is admitted */
        req->replay_start = req->replay_end = 0;
        return 0;
    }
    if (di_page_table_reserve(s->pool, &req->pages, need) != 0) return -1;
    if (req->n_preemptions == 0) req->n_cached_tokens = (int)restored;
    return 1;
}

/* Admit waiting requests in queue order.  by_grant: each takes at most its prefill grant and the
 * first without one stops admission (FIFO); otherwise they share what the grants left unused. */
static int admit(DiScheduler *s, DiStep *step, int *budget, bool by_grant) {
    while (s->n_waiting > 0 && step->n_seqs < s->cfg.max_num_seqs && *budget > 0) {
        DiRequest *req = s->waiting[0];
        /* a preempted request still used by an in-flight step waits until it is idle (FIFO) */
        if (req->inflight > 0 || req->release_pages_pending) break;
        if (by_grant && (req->grant_epoch != s->epoch || req->prefill_grant <= 0)) break;
        int64_t known = di_request_known_tokens(req), end = prefill_end(s, req), start = 0, chunk = 0;
        int grant = by_grant ? req->prefill_grant : INT_MAX;
        bool snapshot = false;
        int claimed = s->kv && s->kv->cache && !req->exact_state ? claim_from_blocks(s, req, end, *budget, grant, &start, &chunk)
                                            : claim_from_prefix_cache(s, req, end, *budget, grant, &start, &chunk, &snapshot);
        if (claimed < 0) return -1;
        if (claimed == 0) break;
        if (req->t_scheduled == 0) req->t_scheduled = di_now_seconds();
        remove_at(s->waiting, &s->n_waiting, 0);
        s->running[s->n_running++] = req;
        req->state = DI_REQ_RUNNING;
        bool sample = start + chunk == known;
        if (di_step_add(step, req, start, (int32_t)chunk, sample, 0) != 0) return -1;
        if (snapshot) reserve_snapshot(s, step, req);
        req->planned_epoch = s->epoch;
        req->inflight++;
        req->n_computed = start + chunk;
        if (sample) req->n_output_scheduled++;
        *budget -= (int)chunk;
    }
    return 0;
}

/* ---- the prefill budget --------------------------------------------------------------------- */

static int by_remaining_then_age(const void *a, const void *b) {
    const DiPrefillWant *x = a, *y = b;
    if (x->remaining != y->remaining) return x->remaining < y->remaining ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

void di_prefill_split(DiPrefillWant *wants, int n, int budget, int *grant) {
    for (int i = 0; i < n; i++) {
        grant[i] = 0;
        wants[i].index = i;
    }
    if (n <= 0 || budget <= 0) return;
    int share = budget / n > 0 ? budget / n : 1;
    grant[0] = wants[0].want < share ? wants[0].want : share;
    budget -= grant[0];
    wants[0].want -= grant[0];
    wants[0].remaining -= grant[0];
    qsort(wants, (size_t)n, sizeof *wants, by_remaining_then_age);
    for (int k = 0; k < n && budget > 0; k++) {
        int take = wants[k].want < budget ? wants[k].want : budget;
        grant[wants[k].index] += take;
        budget -= take;
    }
}

/* Add a prefill candidate wanting up to `want` of its `remaining` positions in this step. */
static void add_candidate(DiScheduler *s, int n, DiRequest *req, int64_t remaining, int want) {
    s->candidates[n] = req;
    s->wants[n] = (DiPrefillWant){remaining, want, n};
}

/* This step's prefill candidates, oldest first: running requests with more than one position to
 * compute, then waiting ones in queue order while a sequence slot is left and the pages of their
 * first chunk look free after the running ones' next chunks.  The page count is an estimate that
 * only decides who shares the budget (admission decides for real): counting a request that cannot
 * be admitted would hold back the others' chunks for nothing. */
static int collect_prefills(DiScheduler *s, const DiStep *step, int budget) {
    const DiRunnerOps *ops = s->runner->ops;
    int slots = s->cfg.max_num_seqs - step->n_seqs, n = 0;
    size_t avail = di_page_pool_free(s->pool) + s->cache.pages;
    for (int i = 0; i < s->n_running && n < slots; i++) {
        DiRequest *req = s->running[i];
        int64_t pending = di_request_known_tokens(req) - req->n_computed;
        if (req->planned_epoch == s->epoch || req->n_output_scheduled >= req->params.max_tokens || pending <= 1)
            continue;
        int want = (int)chunk_limit(s, prefill_end(s, req) - req->n_computed, budget);
        size_t need = ops->pages_for_tokens(s->runner, req->n_computed + want);
        size_t more = need > req->pages.n ? need - req->pages.n : 0;
        avail -= more < avail ? more : avail;
        add_candidate(s, n++, req, pending, want);
    }
    for (int i = 0; i < s->n_waiting && n < slots; i++) {
        DiRequest *req = s->waiting[i];
        if (req->inflight > 0 || req->release_pages_pending) break;
        int64_t end = prefill_end(s, req);
        int want = (int)chunk_limit(s, end, budget);
        size_t need = ops->pages_for_tokens(s->runner, want);
        if (need > avail) break;
        avail -= need;
        add_candidate(s, n++, req, end, want);
    }
    return n;
}

/* Prefill chunks: the budget the decodes left, split by di_prefill_split; then whatever a
 * candidate could not use (it waits for pages) goes to further waiting requests. */
static int plan_prefills(DiScheduler *s, DiStep *step, int *budget) {
    int n = collect_prefills(s, step, *budget);
    di_prefill_split(s->wants, n, *budget, s->grants);
    for (int i = 0; i < n; i++) {
        s->candidates[i]->prefill_grant = s->grants[i];
        s->candidates[i]->grant_epoch = s->epoch;
    }
    if (plan_running(s, step, budget, false) != 0) return -1;
    if (admit(s, step, budget, true) != 0) return -1;
    return admit(s, step, budget, false);
}

int di_scheduler_plan(DiScheduler *s, DiStep *step) {
    di_step_reset(step);
    s->epoch++;
    int budget = s->cfg.max_batch_tokens;
    if (plan_running(s, step, &budget, true) != 0) return -1;
    return plan_prefills(s, step, &budget);
}
