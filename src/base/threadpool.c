/* threadpool.c — fixed worker pool with a shared atomic task counter (see threadpool.h). */
#include "base/threadpool.h"

#include "base/error.h"
#include "base/mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct DiThreadPool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t job_ready;
    pthread_cond_t job_done;
    /* current job */
    DiTaskFn fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    int active_workers;  /* workers still inside the current job */
    unsigned long generation;
    int shutting_down;
};

typedef struct {
    DiThreadPool *pool;
    int thread_index;
} WorkerArg;

int di_default_threads(void) {
    const char *env = getenv("DEEPINFER_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end != '\0' || n < 1 || n > 1024)
            return di_errorf("DEEPINFER_NUM_THREADS='%s': expected an integer from 1 to 1024", env);
        return (int)n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

static void drain_tasks(DiThreadPool *pool, int thread_index) {
    for (;;) {
        int task = atomic_fetch_add(&pool->next_task, 1);
        if (task >= pool->n_tasks) break;
        pool->fn(pool->ctx, task, thread_index);
    }
}

static void *worker_main(void *p) {
    WorkerArg arg = *(WorkerArg *)p;
    free(p);
    DiThreadPool *pool = arg.pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->shutting_down && pool->generation == seen) pthread_cond_wait(&pool->job_ready, &pool->lock);
        if (pool->shutting_down) break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->lock);
        drain_tasks(pool, arg.thread_index);
        pthread_mutex_lock(&pool->lock);
        if (--pool->active_workers == 0) pthread_cond_signal(&pool->job_done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

DiThreadPool *di_pool_create(int n_threads) {
    if (n_threads <= 0) {
        n_threads = di_default_threads();
        if (n_threads < 0) return NULL;
    }
    DiThreadPool *pool = di_calloc(1, sizeof *pool, "thread pool");
    if (!pool) return NULL;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->job_ready, NULL);
    pthread_cond_init(&pool->job_done, NULL);
    pool->workers = di_calloc((size_t)n_threads, sizeof *pool->workers, "thread pool workers");
    if (!pool->workers) {
        free(pool);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        WorkerArg *arg = di_malloc(sizeof *arg, "worker argument");
        if (!arg) goto fail;
        arg->pool = pool;
        arg->thread_index = i;
        if (pthread_create(&pool->workers[i], NULL, worker_main, arg) != 0) {
            free(arg);
            di_errorf("cannot start worker thread %d of %d", i, n_threads);
            goto fail;
        }
        pool->active_workers = 0;
    }
    return pool;
fail:
    /* join what was started */
    pthread_mutex_lock(&pool->lock);
    pool->shutting_down = 1;
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < n_threads; i++)
        if (pool->workers[i]) pthread_join(pool->workers[i], NULL);
    free(pool->workers);
    free(pool);
    return NULL;
}

void di_pool_destroy(DiThreadPool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    pool->shutting_down = 1;
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->job_ready);
    pthread_cond_destroy(&pool->job_done);
    free(pool->workers);
    free(pool);
}

int di_pool_threads(const DiThreadPool *pool) { return pool ? pool->n_threads : 1; }

void di_pool_run(DiThreadPool *pool, int n_tasks, DiTaskFn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!pool || pool->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_tasks = n_tasks;
    atomic_store(&pool->next_task, 0);
    pool->active_workers = pool->n_threads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->job_ready);
    pthread_mutex_unlock(&pool->lock);
    drain_tasks(pool, 0);
    pthread_mutex_lock(&pool->lock);
    while (pool->active_workers > 0) pthread_cond_wait(&pool->job_done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
}
