/* scheduler.h — continuous batching: which requests run in the next step, and how much of each.
 *
 * Requests move waiting -> running (prefilling, then decoding) -> finished.  Each step is one
 * mixed batch under a token budget (max_batch_tokens): first one token for every decoding request
 * (oldest first), then prefill chunks.  The budget left is split over the requests that want
 * prefill, running ones and the waiting ones that could be admitted (di_prefill_split): the
 * oldest always gets an equal share, the rest goes to the shortest remaining prompts first, and no
 * chunk exceeds max_prefill_chunk.  So a short prompt arriving behind a long one being prefilled
 * gets its first token in the next step instead of after the whole long prompt, and a stream of
 * short prompts cannot stop a long one.  New requests are admitted in queue order while the
 * budget, the sequence limit and free state pages allow (chunked prefill: a prompt longer than
 * its share is spread over several steps).
 *
 * Memory: before a request computes positions [a, b) it must hold pages_for_tokens(b) pages.
 * When the pool runs dry the youngest running request not in this step is preempted: its pages go
 * back to the pool and it returns to the front of the waiting queue, to be prefilled again over
 * prompt + generated tokens (recompute; sampling is keyed by position, so its output is
 * unchanged).  Admission never preempts.  Cached states of finished requests (prefix_cache.h)
 * give way first: they are evicted before a request waits for pages or another is preempted, and
 * a new request whose tokens extend a cached state starts from it, prefilling only the rest.
 * With the KV block cache instead (kv_blocks.h), admission restores the longest cached run of
 * leading blocks into the request's fresh pages and prefills from the replay start.  A request whose pages are still used by an in-flight
 * step keeps them until that step is processed (async mode).
 *
 * In async mode the plan is made while the previous step computes: a decoding request whose next
 * input token is still being sampled is planned with a placeholder (n_output_scheduled counts
 * it); at most max_tokens outputs are ever planned; a request that stops early has at most one
 * extra token computed and dropped. */
#ifndef DI_ENGINE_SCHEDULER_H
#define DI_ENGINE_SCHEDULER_H

#include "engine/kv_blocks.h"
#include "engine/pages.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/step.h"

typedef struct {
    int max_num_seqs;
    int max_batch_tokens;
    int max_prefill_chunk;
    /* Speculative decoding (0: off): each decoding request is planned with up to this many
     * drafts (fewer near max_tokens or the end of the budget), and holds pages and budget for
     * 1 + that many positions; the executor drafts and verifies (step.h).  Steps are then
     * planned only after the previous one was processed (the engine runs them synchronously):
     * the next positions depend on how many drafts were accepted. */
    int draft_max;
    /* Fixed draft lengths (the deterministic mode): a decoding request gets its drafts whatever
     * the load, or waits for a step with room for them, so the positions where its drafts are
     * verified (and with them a seeded sample) never depend on what runs beside it. */
    bool draft_fixed;
} DiSchedulerConfig;

/* One prefill candidate of di_prefill_split. */
typedef struct {
    int64_t remaining; /* positions it has left to prefill (orders the split) */
    int want;          /* the most it may take in this step */
    int index;         /* set by di_prefill_split */
} DiPrefillWant;

typedef struct {
    DiSchedulerConfig cfg;
    DiPagePool *pool;
    const DiRunner *runner;
    DiRequest **waiting; /* FIFO: waiting[0] is admitted first */
    int n_waiting;
    DiRequest **running; /* admission order: oldest first */
    int n_running;
    int cap;             /* capacity of each list */
    size_t pages_releasing; /* pages of idle-pending requests, free once their step is processed */
    uint64_t preemptions;
    DiPrefixCache cache;    /* finished requests' states (max_pages 0: off), see prefix_cache.h */
    DiKvBlocks *kv;         /* the KV block cache (NULL or off: none), see kv_blocks.h */
    uint64_t epoch;      /* step counter, to know who is in the step being planned */
    DiPrefillWant *wants; /* scratch of the prefill split, `cap` each */
    int *grants;
    DiRequest **candidates;
} DiScheduler;

int di_scheduler_init(DiScheduler *s, const DiSchedulerConfig *cfg, DiPagePool *pool, const DiRunner *runner);
void di_scheduler_free(DiScheduler *s);

/* Queue a new request (its pages must fit the pool on their own: checked by the caller). */
int di_scheduler_add(DiScheduler *s, DiRequest *req);
/* Take a request out of the waiting/running lists (it finished or was aborted) and return its
 * pages, now or, when in flight, once idle. */
void di_scheduler_finish(DiScheduler *s, DiRequest *req);
/* After a step was processed: return the pages of requests that became idle. */
void di_scheduler_settle(DiScheduler *s, DiRequest *req);
/* Give a request's pages back to the pool now (the runner's release hook first); a finished
 * request's state goes to the prefix cache instead when the cache is on. */
void di_scheduler_return_pages(DiScheduler *s, DiRequest *req);
/* Whether the request's states may go to the prefix cache: exact ones only (with the KV block
 * cache on, a restored state is a bounded replay's approximation). */
bool di_scheduler_keeps_state(const DiScheduler *s, const DiRequest *req);
/* Split `budget` prefill tokens over n candidates, wants[0] the oldest: grant[i] tokens to
 * candidate i.  The oldest gets min(want, budget / n, at least 1); the rest goes to the smallest
 * `remaining` first (ties: the older), each up to its want.  wants is reordered (scratch). */
void di_prefill_split(DiPrefillWant *wants, int n, int budget, int *grant);
/* Plan the next step into `step` (reset first).  -1 only on allocation failure. */
int di_scheduler_plan(DiScheduler *s, DiStep *step);

#endif
