/* worker.h — the thread that executes steps in async mode, so the main thread can plan the next
 * step and deliver the previous step's outputs meanwhile (engine-features.md §3.2).  One step is
 * in flight at a time; submit hands it over, wait returns when it has finished.  The mutex hand-off
 * orders all memory: what the main thread wrote before submit is visible to the step, and what
 * the step wrote is visible after wait. */
#ifndef DI_ENGINE_WORKER_H
#define DI_ENGINE_WORKER_H

#include "engine/step.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct {
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    const DiStepExecutor *exec;
    DiStep *job;  /* submitted, not yet finished */
    bool busy, quit, started;
} DiWorker;

int di_worker_start(DiWorker *w, const DiStepExecutor *exec);
void di_worker_submit(DiWorker *w, DiStep *step);
/* Block until the submitted step has finished (no-op when none). */
void di_worker_wait(DiWorker *w);
void di_worker_stop(DiWorker *w);

#endif
