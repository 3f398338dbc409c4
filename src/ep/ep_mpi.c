/* ep_mpi.c — the MPI link and the expert rank's loop (deepinfer_ep.h di_ep_mpi_init ...).
 *
 * Traffic is a star: rank 0 sends each expert rank that has rows in a layer its counts (the
 * EpHeader) and then its payload, and receives its answer; expert ranks never talk to each other.
 * So instead of the all-to-all collectives of a symmetric EP group (MPI_Alltoall for the counts,
 * MPI_Alltoallv for the payload, where every rank is a source), rank 0 posts the same two
 * messages per destination as nonblocking point-to-point sends (counts first, then payload;
 * a rank with no rows gets no message at all) and one receive per answer.  That also lets every
 * wait be bounded AND say who is missing: rank 0 polls its requests (MPI_Test, sleeping 20 µs
 * between polls so an oversubscribed core is not spun away) until a deadline, and when it passes
 * names the ranks whose requests are still open; the CLI then aborts the job (MPI_Abort).  A rank
 * that dies outright makes mpirun end the job and name it (Open MPI's default), and errors on
 * MPI_COMM_WORLD return to us (MPI_ERRORS_RETURN) so they carry the rank too.
 *
 * An idle expert rank waits without a deadline (rank 0 may idle for hours in `serve`): it polls
 * for the next header with a sleep that backs off to 1 ms, and rank 0's STOP, its MPI_Abort or
 * mpirun's teardown ends it. */
#include "ep/ep.h"

#include "base/error.h"
#include "base/mem.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_HDR = 1, TAG_PAYLOAD = 2, TAG_REPLY = 3 };

typedef struct {
    double timeout_s;
    MPI_Request *req; /* [3 x size]: a header, a payload and an answer per rank and wait */
    int *req_rank;
    int n_req, size;
} MpiLink;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static int mpi_fail(int rc, const char *what, int rank) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
    return di_errorf("expert-parallel: %s rank %d: %s", what, rank, msg);
}

static int push(MpiLink *l, int rank) {
    if (l->n_req >= 3 * l->size) return di_errorf("expert-parallel: more than 3 open requests per rank");
    l->req_rank[l->n_req] = rank;
    return l->n_req++;
}

static int byte_count(int64_t bytes, int rank) {
    if (bytes < 0 || bytes > INT_MAX) return di_errorf("expert-parallel: a message of %lld bytes to rank %d (at most %d)", (long long)bytes, rank, INT_MAX);
    return 0;
}

static int mpi_post(void *ctx, int rank, const EpHeader *h, const void *payload, void *reply) {
    MpiLink *l = ctx;
    if (rank <= 0 || rank >= l->size) return di_errorf("expert-parallel: no expert rank %d of %d", rank, l->size);
    if (byte_count(h->bytes, rank) != 0 || byte_count(h->reply_bytes, rank) != 0) return -1;
    int i = push(l, rank), rc;
    if (i < 0) return -1;
    if ((rc = MPI_Isend(h, EP_HEADER_WORDS, MPI_INT64_T, rank, TAG_HDR, MPI_COMM_WORLD, &l->req[i])) != MPI_SUCCESS)
        return mpi_fail(rc, "sending the counts to", rank);
    if (h->bytes > 0) {
        if ((i = push(l, rank)) < 0) return -1;
        if ((rc = MPI_Isend(payload, (int)h->bytes, MPI_BYTE, rank, TAG_PAYLOAD, MPI_COMM_WORLD, &l->req[i])) != MPI_SUCCESS)
            return mpi_fail(rc, "sending the payload to", rank);
    }
    if (h->reply_bytes > 0) {
        if ((i = push(l, rank)) < 0) return -1;
        if ((rc = MPI_Irecv(reply, (int)h->reply_bytes, MPI_BYTE, rank, TAG_REPLY, MPI_COMM_WORLD, &l->req[i])) != MPI_SUCCESS)
            return mpi_fail(rc, "receiving the answer of", rank);
    }
    return 0;
}

/* Every open request done, or an error naming the ranks still open at the deadline. */
static int mpi_wait(void *ctx) {
    MpiLink *l = ctx;
    double deadline = now_s() + l->timeout_s;
    for (long spins = 0;; spins++) {
        int done = 1;
        for (int i = 0; i < l->n_req; i++) {
            if (l->req[i] == MPI_REQUEST_NULL) continue;
            int flag = 0, rc = MPI_Test(&l->req[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mpi_fail(rc, "talking to", l->req_rank[i]);
            done &= flag;
        }
        if (done) {
            l->n_req = 0;
            return 0;
        }
        if (now_s() > deadline) break;
        if (spins > 50) nap_us(20);
    }
    char ranks[256] = "";
    size_t len = 0;
    for (int i = 0, last = -1; i < l->n_req && len + 16 < sizeof ranks; i++)
        if (l->req[i] != MPI_REQUEST_NULL && l->req_rank[i] != last)
            len += (size_t)snprintf(ranks + len, sizeof ranks - len, "%s%d", len ? ", " : "", last = l->req_rank[i]);
    return di_errorf("expert-parallel: rank %s did not answer within %.0f s (it died or hangs); ending the job", ranks, l->timeout_s);
}

/* ---- the job ---------------------------------------------------------------------------- */

typedef struct {
    MpiLink link;
    int rank, size;
} MpiJob;

static MpiJob job; /* one MPI job per process (MPI_Init is once per process too) */

DiEp *di_ep_mpi_init(double timeout_s) {
    if (!(timeout_s > 0) || timeout_s > 1e6) {
        di_errorf("expert-parallel: timeout %g s (need 0 < t <= 1e6)", timeout_s);
        return NULL;
    }
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (inited || job.size) {
        di_errorf("expert-parallel: MPI is already initialised in this process");
        return NULL;
    }
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        di_errorf("expert-parallel: MPI_Init_thread failed");
        return NULL;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        di_errorf("expert-parallel: this MPI gives thread level %d, serialized calls from the engine thread need %d", provided,
                  MPI_THREAD_SERIALIZED);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.size);
    job.link = (MpiLink){timeout_s, di_calloc((size_t)job.size * 3, sizeof(MPI_Request), "MPI requests"),
                         di_calloc((size_t)job.size * 3, sizeof(int), "MPI request ranks"), 0, job.size};
    EpLink link = {mpi_post, mpi_wait, &job.link};
    DiEp *ep = job.link.req && job.link.req_rank ? ep_create(job.rank, job.size, &link) : NULL;
    if (!ep) {
        di_error_wrap("expert-parallel: rank %d of %d", job.rank, job.size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return ep;
}

int di_ep_rank(const DiEp *ep) { return ep_rank(ep); }
int di_ep_size(const DiEp *ep) { return ep_n_ranks(ep); }

/* Wait for one message from rank 0: no deadline when idle (the header), the link's for the
 * payload that follows it. */
static int recv_from_root(void *buf, int count, MPI_Datatype type, int tag, double timeout_s) {
    MPI_Request req;
    int rc = MPI_Irecv(buf, count, type, 0, tag, MPI_COMM_WORLD, &req), flag = 0;
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "receiving from", 0);
    double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
    for (long nap = 1; !flag; nap = nap < 1000 ? nap * 2 : 1000) {
        if ((rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS) return mpi_fail(rc, "receiving from", 0);
        if (flag) break;
        if (deadline > 0 && now_s() > deadline) {
            MPI_Cancel(&req);
            return di_errorf("expert-parallel: rank 0 sent a header but no payload within %.0f s", timeout_s);
        }
        nap_us(nap);
    }
    return 0;
}

static int serve_loop(EpWorker *w) {
    uint8_t *payload = NULL;
    size_t cap = 0;
    int rc = 0;
    for (bool stop = false; !stop && rc == 0;) {
        EpHeader h;
        if ((rc = recv_from_root(&h, EP_HEADER_WORDS, MPI_INT64_T, TAG_HDR, 0)) != 0) break;
        if (h.bytes < 0 || h.bytes > INT_MAX || h.reply_bytes < 0 || h.reply_bytes > INT_MAX) {
            rc = di_errorf("expert-parallel: a header announcing %lld / %lld bytes", (long long)h.bytes, (long long)h.reply_bytes);
            break;
        }
        if ((size_t)h.bytes > cap) {
            uint8_t *p = realloc(payload, (size_t)h.bytes);
            if (!p) {
                rc = di_errorf("out of memory for a payload of %lld bytes", (long long)h.bytes);
                break;
            }
            payload = p;
            cap = (size_t)h.bytes;
        }
        if (h.bytes > 0 && (rc = recv_from_root(payload, (int)h.bytes, MPI_BYTE, TAG_PAYLOAD, job.link.timeout_s)) != 0) break;
        const void *reply;
        if ((rc = ep_worker_handle(w, &h, payload, &reply, &stop)) != 0) break;
        if (h.reply_bytes > 0) {
            int e = MPI_Send(reply, (int)h.reply_bytes, MPI_BYTE, 0, TAG_REPLY, MPI_COMM_WORLD);
            if (e != MPI_SUCCESS) rc = mpi_fail(e, "answering", 0);
        }
    }
    free(payload);
    return rc;
}

int di_ep_serve(DiEp *ep) {
    if (!ep || ep_rank(ep) < 1) return di_errorf("di_ep_serve: only an expert rank (rank >= 1) serves");
    EpWorker w;
    ep_worker_init(&w, ep_rank(ep), NULL);
    int rc = serve_loop(&w);
    ep_worker_free(&w);
    if (rc != 0) {
        fprintf(stderr, "deepinfer: expert-parallel rank %d: %s\n", job.rank, di_error_message());
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    ep_destroy(ep);
    MPI_Finalize();
    return 0;
}

static void print_figures(const DiEp *ep, const EpRankStats *st) {
    for (int k = 0; k < ep_n_ranks(ep); k++)
        fprintf(stderr, "expert-parallel: rank %d: peak RSS %.1f MB, RSS %.1f MB%s, %lld layers served, %.1f MB given back\n", k,
                (double)st[k].hwm_kb / 1024, (double)st[k].rss_kb / 1024, k == 0 ? " (engine)" : "", (long long)st[k].layers_served,
                (double)st[k].released_bytes / 1e6);
    const EpTraffic *t = ep_traffic(ep);
    double rows = (double)t->remote_asg, tok = t->tokens ? (double)t->tokens : 1;
    double min = rows * (double)t->hidden * 4, min8 = rows * (double)ep_wire_row_bytes(EP_WIRE_FP8, t->hidden);
    fprintf(stderr,
            "expert-parallel: %lld MoE layer calls, %lld tokens, %lld remote (token, expert) rows; dispatch format %s (%lld bytes a "
            "row); bytes per token per layer: dispatch %.0f, combine %.0f; minimum (remote rows x hidden x 4) %.0f: dispatch %.3fx, "
            "combine %.3fx; fp8 minimum (remote rows x hidden x 33/32) %.0f: dispatch %.3fx; %lld replans\n",
            (long long)t->calls, (long long)t->tokens, (long long)t->remote_asg, ep_wire_name(t->wire),
            (long long)ep_wire_row_bytes(t->wire, t->hidden), (double)t->dispatch_bytes / tok, (double)t->combine_bytes / tok,
            min / tok, min > 0 ? (double)t->dispatch_bytes / min : 0, min > 0 ? (double)t->combine_bytes / min : 0, min8 / tok,
            min8 > 0 ? (double)t->dispatch_bytes / min8 : 0, (long long)t->plans);
}

int di_ep_finish(DiEp *ep, int failed) {
    if (!ep) return di_errorf("di_ep_finish: no context given");
    if (ep_rank(ep) != 0) return di_errorf("di_ep_finish: only rank 0 finishes the job");
    if (failed) {
        fprintf(stderr, "deepinfer: expert-parallel: rank 0 failed, aborting the job\n");
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    EpRankStats *st = di_calloc((size_t)ep_n_ranks(ep), sizeof *st, "rank figures");
    int rc = st ? ep_stop(ep, st) : -1; /* even before any INIT: a STOP ends an expert rank's loop */
    if (rc != 0) {
        fprintf(stderr, "deepinfer: %s\n", di_error_message());
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (di_ep_current_plan(ep)) print_figures(ep, st);
    free(st);
    ep_forget_model(ep); /* freed with the engine before this call */
    ep_destroy(ep);
    free(job.link.req);
    free(job.link.req_rank);
    MPI_Finalize();
    return rc;
}

int ep_model_hook(Model *m, const char *dir, void *ctx) { return ep_attach(ctx, m, dir); }
