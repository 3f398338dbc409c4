/* server_work.c — the server's preparation workers (see server_work.h). */
#include "serve/server_work.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Nice value of a worker thread: below the HTTP and engine threads (Linux applies
 * setpriority to one thread when given its thread id). */
#define WORKER_NICE 10

struct DiWorkQueue {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    DiWork *head, *tail;
    bool quit;
    int n_threads;
    pthread_t threads[64];
};

static void *worker_main(void *arg) {
    DiWorkQueue *q = arg;
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE) != 0)
        DI_DEBUG("server workers: cannot lower their priority; they run at the default");
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->head && !q->quit) pthread_cond_wait(&q->wake, &q->lock);
        DiWork *w = q->head;
        if (!w) break; /* quit, and nothing left */
        q->head = w->next;
        if (!q->head) q->tail = NULL;
        pthread_mutex_unlock(&q->lock);
        w->next = NULL;
        w->run(w);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

DiWorkQueue *di_work_create(int n_threads) {
    if (n_threads < 1 || n_threads > 64) {
        di_errorf("server workers: %d threads, expected 1..64", n_threads);
        return NULL;
    }
    DiWorkQueue *q = di_calloc(1, sizeof *q, "server work queue");
    if (!q) return NULL;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->wake, NULL);
    for (; q->n_threads < n_threads; q->n_threads++)
        if (pthread_create(&q->threads[q->n_threads], NULL, worker_main, q) != 0) {
            di_errorf("server workers: cannot start thread %d of %d", q->n_threads + 1, n_threads);
            di_work_destroy(q);
            return NULL;
        }
    return q;
}

int di_work_submit(DiWorkQueue *q, DiWork *w) {
    if (!q || !w || !w->run) return di_errorf("server workers: NULL queue or job");
    pthread_mutex_lock(&q->lock);
    if (q->quit) {
        pthread_mutex_unlock(&q->lock);
        return di_errorf("server workers: stopping");
    }
    w->next = NULL;
    if (q->tail) q->tail->next = w;
    else q->head = w;
    q->tail = w;
    pthread_cond_signal(&q->wake);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

void di_work_stop(DiWorkQueue *q) {
    if (!q) return;
    pthread_mutex_lock(&q->lock);
    bool joined = q->quit;
    q->quit = true;
    pthread_cond_broadcast(&q->wake);
    pthread_mutex_unlock(&q->lock);
    if (joined) return;
    for (int i = 0; i < q->n_threads; i++) pthread_join(q->threads[i], NULL);
}

void di_work_destroy(DiWorkQueue *q) {
    if (!q) return;
    di_work_stop(q);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->wake);
    free(q);
}
