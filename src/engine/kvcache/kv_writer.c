/* kv_writer.c — bounded job queue and its I/O thread (see kv_writer.h).
 *
 * A singly linked FIFO under one mutex; `busy` covers the job the thread is running, so flush
 * returns only when the queue is empty and nothing is in flight. */
#include "engine/kvcache/kv_writer.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Job {
    struct Job *next;
    DiKvKey key;
    int kind; /* 0: load */
    size_t len;
    unsigned char data[]; /* the record's payload */
} Job;

struct DiKvWriter {
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    pthread_t thread;
    DiKvSegStore *store;
    DiKvLoadFn load;
    void *load_arg;
    Job *head, *tail;
    int n_jobs, max_jobs;
    size_t bytes, max_bytes;
    double refresh_s;
    bool busy, stopping;
    DiKvWriterStats st;
};

static void *run(void *arg) {
    DiKvWriter *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->head && !w->stopping) {
            if (w->refresh_s <= 0) {
                pthread_cond_wait(&w->wake, &w->mu);
                continue;
            }
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            double t = until.tv_nsec * 1e-9 + w->refresh_s;
            until.tv_sec += (time_t)t;
            until.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
            if (pthread_cond_timedwait(&w->wake, &w->mu, &until) != ETIMEDOUT || w->head || w->stopping) continue;
            w->busy = true; /* idle for refresh_s: look at the directory */
            pthread_mutex_unlock(&w->mu);
            int rc = di_kv_seg_refresh(w->store);
            pthread_mutex_lock(&w->mu);
            w->busy = false;
            if (rc == 0) w->st.refreshes++;
            if (rc != 0 && w->st.refreshes == 0) DI_WARN("kv writer: %s", di_error_message());
            if (!w->head) pthread_cond_broadcast(&w->idle);
        }
        if (!w->head) break; /* stopping with an empty queue */
        Job *j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        w->n_jobs--;
        w->bytes -= j->len;
        w->busy = true;
        pthread_mutex_unlock(&w->mu);
        int rc = 0;
        if (j->kind == 0)
            w->load(w->load_arg, j->key);
        else
            rc = di_kv_seg_append(w->store, j->key, j->kind, j->data, j->len);
        pthread_mutex_lock(&w->mu);
        if (j->kind == 0)
            w->st.loads++;
        else if (rc == 0)
            w->st.written++;
        else
            w->st.failed++; /* the store logged the cause once */
        free(j);
        w->busy = false;
        if (!w->head) pthread_cond_broadcast(&w->idle);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

DiKvWriter *di_kv_writer_start(DiKvSegStore *store, int max_jobs, size_t max_bytes, double refresh_s, DiKvLoadFn load,
                               void *load_arg) {
    if (!store || max_jobs <= 0 || max_bytes == 0 || !(refresh_s >= 0 && refresh_s <= 86400)) {
        di_errorf("kv writer: needs a segment store, max_jobs > 0 (got %d), max_bytes > 0 (got %zu) and "
                  "refresh_s in [0, 86400] (got %g)", max_jobs, max_bytes, refresh_s);
        return NULL;
    }
    DiKvWriter *w = di_calloc(1, sizeof *w, "kv writer");
    if (!w) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->idle, NULL);
    w->store = store, w->max_jobs = max_jobs, w->max_bytes = max_bytes, w->load = load, w->load_arg = load_arg;
    w->refresh_s = refresh_s;
    int e = pthread_create(&w->thread, NULL, run, w);
    if (e != 0) {
        di_errorf("kv writer: cannot start its thread: %s", strerror(e));
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->wake);
        pthread_cond_destroy(&w->idle);
        free(w);
        return NULL;
    }
    return w;
}

static int enqueue(DiKvWriter *w, DiKvKey key, int kind, const void *data, size_t len) {
    pthread_mutex_lock(&w->mu);
    bool full = w->n_jobs >= w->max_jobs || len > w->max_bytes - w->bytes;
    pthread_mutex_unlock(&w->mu);
    Job *j = full ? NULL : malloc(sizeof *j + len); /* allocate outside the lock */
    pthread_mutex_lock(&w->mu);
    full = !j || w->n_jobs >= w->max_jobs || len > w->max_bytes - w->bytes || w->stopping;
    if (full) {
        w->st.dropped++;
        pthread_mutex_unlock(&w->mu);
        free(j);
        return 0;
    }
    j->next = NULL, j->key = key, j->kind = kind, j->len = len;
    if (len) memcpy(j->data, data, len);
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    w->n_jobs++;
    w->bytes += len;
    if (kind) w->st.queued++; /* prefetches are counted by the cache */
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    return 1;
}

int di_kv_writer_submit(DiKvWriter *w, DiKvKey key, int kind, const void *data, size_t len) {
    if (!w || (len > 0 && !data)) return di_errorf("kv writer: bad arguments to submit");
    if (kind != DI_KV_KIND_BLOCK && kind != DI_KV_KIND_UNIT_TAIL) return di_errorf("kv writer: unknown record kind %d", kind);
    return enqueue(w, key, kind, data, len);
}

int di_kv_writer_prefetch(DiKvWriter *w, DiKvKey key) {
    if (!w || !w->load) return di_errorf("kv writer: prefetch needs a writer with a loader");
    return enqueue(w, key, 0, NULL, 0);
}

void di_kv_writer_flush(DiKvWriter *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    while (w->head || w->busy) pthread_cond_wait(&w->idle, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void di_kv_writer_stats(DiKvWriter *w, DiKvWriterStats *out) {
    if (!w || !out) return;
    pthread_mutex_lock(&w->mu);
    *out = w->st;
    pthread_mutex_unlock(&w->mu);
}

void di_kv_writer_stop(DiKvWriter *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    if (di_kv_seg_seal(w->store) != 0) DI_WARN("kv writer: %s", di_error_message());
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->idle);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
