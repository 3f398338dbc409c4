/* threadpool.h — a fixed pool of worker threads running blocking parallel-for jobs.
 *
 * Kernels split rows over both cores, the tokenizer encodes long inputs in pieces.  A job is
 * `n_tasks` calls of fn(ctx, task, thread); di_pool_run returns when all have finished.  The
 * calling thread works too, so a pool of N threads starts N-1 workers.  Which thread runs which
 * task is not fixed, so a task must write only its own outputs: results never depend on the
 * schedule (batch invariance relies on this). */
#ifndef DI_BASE_THREADPOOL_H
#define DI_BASE_THREADPOOL_H

typedef struct DiThreadPool DiThreadPool;
typedef void (*DiTaskFn)(void *ctx, int task, int thread);

/* n_threads <= 0: DEEPINFER_NUM_THREADS if set, else the number of online CPUs. */
DiThreadPool *di_pool_create(int n_threads);
void di_pool_destroy(DiThreadPool *pool);
int di_pool_threads(const DiThreadPool *pool);
/* Run fn for task = 0..n_tasks-1 across the pool; a NULL pool runs them inline. Not reentrant. */
void di_pool_run(DiThreadPool *pool, int n_tasks, DiTaskFn fn, void *ctx);
/* The thread count a pool created with n_threads <= 0 would get (-1 with error on a bad env). */
int di_default_threads(void);

#endif
