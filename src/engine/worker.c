/* worker.c — a single worker thread with a one-slot job hand-off (mutex + condition variable). */
#include "engine/worker.h"

#include "base/error.h"

#include <string.h>

static void *worker_main(void *arg) {
    DiWorker *w = arg;
    pthread_mutex_lock(&w->mutex);
    for (;;) {
        while (!w->quit && !(w->busy && w->job)) pthread_cond_wait(&w->cond, &w->mutex);
        if (w->quit) break;
        DiStep *job = w->job;
        pthread_mutex_unlock(&w->mutex);
        di_step_execute(w->exec, job);
        pthread_mutex_lock(&w->mutex);
        w->job = NULL;
        w->busy = false;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->mutex);
    return NULL;
}

int di_worker_start(DiWorker *w, const DiStepExecutor *exec) {
    memset(w, 0, sizeof *w);
    w->exec = exec;
    if (pthread_mutex_init(&w->mutex, NULL) != 0) return di_errorf("async worker: mutex init failed");
    if (pthread_cond_init(&w->cond, NULL) != 0) {
        pthread_mutex_destroy(&w->mutex);
        return di_errorf("async worker: condition variable init failed");
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->mutex);
        return di_errorf("async worker: cannot start the thread");
    }
    w->started = true;
    return 0;
}

void di_worker_submit(DiWorker *w, DiStep *step) {
    pthread_mutex_lock(&w->mutex);
    w->job = step;
    w->busy = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mutex);
}

void di_worker_wait(DiWorker *w) {
    pthread_mutex_lock(&w->mutex);
    while (w->busy) pthread_cond_wait(&w->cond, &w->mutex);
    pthread_mutex_unlock(&w->mutex);
}

void di_worker_stop(DiWorker *w) {
    if (!w->started) return;
    di_worker_wait(w);
    pthread_mutex_lock(&w->mutex);
    w->quit = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mutex);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mutex);
    w->started = false;
}
