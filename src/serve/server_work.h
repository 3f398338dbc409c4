/* server_work.h — the server's preparation workers: a few threads that run queued jobs.
 *
 * Parsing a request body and tokenizing its prompt cost time in proportion to the body (an
 * 8 MB prompt takes seconds to tokenize).  On the HTTP thread that would freeze every other
 * connection's bytes, on the engine thread every running stream's next token, so the server
 * hands them to these threads.  They run at a lower scheduling priority than the HTTP and
 * engine threads: on a busy CPU the streams' latency comes before a new request's preparation.
 * Jobs are intrusive (a DiWork embedded in the caller's object), so queueing never allocates. */
#ifndef DI_SERVE_SERVER_WORK_H
#define DI_SERVE_SERVER_WORK_H

typedef struct DiWork DiWork;
struct DiWork {
    void (*run)(DiWork *w); /* called once on a worker thread */
    DiWork *next;
};

typedef struct DiWorkQueue DiWorkQueue;

/* n_threads in 1..64.  NULL with the cause. */
DiWorkQueue *di_work_create(int n_threads);
/* Queue w (FIFO).  -1 once the queue is stopped (w is not run). */
int di_work_submit(DiWorkQueue *q, DiWork *w);
/* Run what is queued, join the threads; later submits fail.  Idempotent. */
void di_work_stop(DiWorkQueue *q);
/* Stop, then free the queue. */
void di_work_destroy(DiWorkQueue *q);

#endif
