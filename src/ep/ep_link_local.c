/* ep_link_local.c — the in-process reference transport (ep.h): every "rank" is an EpWorker in
 * this process, answering at once.  The dispatch tests run the same messages through it that the
 * MPI link carries between processes, with no MPI in the way. */
#include "ep/ep.h"

#include "base/error.h"

#include <string.h>

static int local_post(void *ctx, int rank, const EpHeader *h, const void *payload, void *reply) {
    EpLocalLink *ll = ctx;
    if (rank <= 0 || rank >= ll->n_ranks) return di_errorf("in-process link: no expert rank %d of %d", rank, ll->n_ranks);
    const void *answer;
    bool stop;
    if (ep_worker_handle(&ll->workers[rank], h, payload, &answer, &stop) != 0) return -1;
    if (h->reply_bytes > 0) {
        if (!reply) return di_errorf("in-process link: rank %d answers %lld bytes, nowhere to put them", rank, (long long)h->reply_bytes);
        memcpy(reply, answer, (size_t)h->reply_bytes);
    }
    return 0;
}

static int local_wait(void *ctx) { return ctx ? 0 : di_errorf("in-process link: no context"); }

int ep_link_local(EpLocalLink *ll, EpWorker *workers, int n_ranks, EpLink *out) {
    if (!ll || !workers || n_ranks <= 0 || !out) return di_errorf("ep_link_local: invalid arguments");
    ll->workers = workers;
    ll->n_ranks = n_ranks;
    *out = (EpLink){local_post, local_wait, ll};
    return 0;
}
