/* trace.c — Mooncake JSONL traces and synthetic Zipf/Poisson workloads (see trace.h). */
#include "cluster/sim/trace.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/mem.h"
#include "cluster/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void di_sim_trace_free(DiSimTrace *t) {
    if (!t) return;
    free(t->reqs);
    free(t->block_ids);
    memset(t, 0, sizeof *t);
}

/* Growable arrays of requests and block ids; request block pointers are fixed up at the end. */
typedef struct {
    DiSimTrace t;
    size_t cap_reqs, cap_blocks;
    size_t *block_start; /* per request offset into block_ids, until fix-up */
} Builder;

static int push_request(Builder *b, const DiSimRequest *r, size_t block_start) {
    size_t cap = b->cap_reqs, cap_starts = b->cap_reqs; /* two arrays, one capacity */
    if (di_grow(&b->t.reqs, &cap, b->t.n + 1, 1024, sizeof *b->t.reqs, "trace requests") != 0 ||
        di_grow(&b->block_start, &cap_starts, b->t.n + 1, 1024, sizeof *b->block_start, "trace block offsets") != 0)
        return -1;
    b->cap_reqs = cap;
    b->block_start[b->t.n] = block_start;
    b->t.reqs[b->t.n++] = *r;
    return 0;
}

static int push_block(Builder *b, uint64_t id) {
    if (di_grow(&b->t.block_ids, &b->cap_blocks, b->t.n_block_ids + 1, 16384, sizeof *b->t.block_ids, "trace block ids") != 0)
        return -1;
    b->t.block_ids[b->t.n_block_ids++] = id;
    return 0;
}

static void finish(Builder *b, DiSimTrace *out) {
    for (size_t i = 0; i < b->t.n; i++) b->t.reqs[i].blocks = b->t.block_ids + b->block_start[i];
    free(b->block_start);
    *out = b->t;
}

static void abandon(Builder *b) {
    free(b->block_start);
    di_sim_trace_free(&b->t);
}

/* One JSONL line -> request. */
static int parse_line(Builder *b, const char *line, size_t len, size_t lineno, double prev_ms) {
    json_error_t jerr;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o) return di_errorf("line %zu:%d: invalid JSON: %s", lineno, jerr.column, jerr.text);
    char ctx[48];
    snprintf(ctx, sizeof ctx, "line %zu", lineno);
    double ts;
    int64_t in, outl;
    json_t *ids;
    int rc = -1;
    if (di_json_number(o, ctx, "timestamp", true, &ts) != 0 || di_json_int(o, ctx, "input_length", true, &in) != 0 ||
        di_json_int(o, ctx, "output_length", true, &outl) != 0 || di_json_array(o, ctx, "hash_ids", true, &ids) != 0)
        goto done;
    if (!isfinite(ts) || ts < prev_ms) {
        di_errorf("%s: timestamp %g is not finite or goes back in time (previous %g)", ctx, ts, prev_ms);
        goto done;
    }
    if (in <= 0 || in > (1LL << 31) || outl < 0 || outl > (1LL << 31)) {
        di_errorf("%s: input_length must be in 1..2^31 and output_length in 0..2^31 (got %lld, %lld)", ctx,
                  (long long)in, (long long)outl);
        goto done;
    }
    size_t nb = json_array_size(ids), start = b->t.n_block_ids;
    if (nb > (size_t)(in + DI_SIM_BLOCK_TOKENS - 1) / DI_SIM_BLOCK_TOKENS) {
        di_errorf("%s: %zu hash_ids for %lld tokens (one per %d-token block expected)", ctx, nb, (long long)in,
                  DI_SIM_BLOCK_TOKENS);
        goto done;
    }
    for (size_t k = 0; k < nb; k++) {
        json_t *v = json_array_get(ids, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            di_errorf("%s: hash_ids[%zu]: expected a non-negative integer, got %s", ctx, k, di_json_type_name(v));
            goto done;
        }
        if (push_block(b, (uint64_t)json_integer_value(v)) != 0) goto done;
    }
    DiSimRequest r = {ts / 1000.0, in, outl, NULL, (int)nb};
    rc = push_request(b, &r, start);
done:
    json_decref(o);
    return rc;
}

int di_sim_trace_parse(const char *data, size_t size, const char *what, DiSimTrace *out) {
    if (!out) return di_errorf("trace: NULL output");
    memset(out, 0, sizeof *out);
    if (!data && size) return di_errorf("trace: NULL data");
    Builder b;
    memset(&b, 0, sizeof b);
    size_t lineno = 0, pos = 0;
    double prev_ms = 0.0;
    while (pos < size) {
        const char *nl = memchr(data + pos, '\n', size - pos);
        size_t len = nl ? (size_t)(nl - (data + pos)) : size - pos;
        lineno++;
        int blank = 1;
        for (size_t k = 0; k < len && blank; k++) blank = data[pos + k] == ' ' || data[pos + k] == '\r' || data[pos + k] == '\t';
        if (!blank) {
            if (parse_line(&b, data + pos, len, lineno, prev_ms) != 0) {
                abandon(&b);
                return di_error_wrap("%s", what ? what : "trace");
            }
            prev_ms = b.t.reqs[b.t.n - 1].arrival_s * 1000.0;
        }
        pos += len + 1;
    }
    if (b.t.n == 0) {
        abandon(&b);
        return di_errorf("%s: no requests", what ? what : "trace");
    }
    finish(&b, out);
    return 0;
}

int di_sim_trace_load(const char *path, DiSimTrace *out) {
    if (!path || !out) return di_errorf("trace: NULL argument");
    DiMappedFile f;
    if (di_map_file(path, &f) != 0) return di_error_wrap("loading trace");
    int rc = di_sim_trace_parse((const char *)f.data, f.size, path, out);
    di_unmap_file(&f);
    return rc;
}

/* ---- synthetic workloads ---------------------------------------------------------------- */

/* Inverse-CDF sampling of a Zipf(s) rank in 0..n-1 from a precomputed CDF. */
static int zipf_draw(const double *cdf, int n, DiRng *r) {
    double u = di_rng_uniform(r) * cdf[n - 1];
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] > u) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static int64_t draw_context(DiRng *r, const double mix[4]) {
    static const double lo_of[4] = {256, 16384, 65536, 262144}, hi_of[4] = {16384, 65536, 262144, 1048576};
    double u = di_rng_uniform(r), acc = 0.0;
    int t = 3;
    for (int k = 0; k < 4; k++) {
        acc += mix[k];
        if (u < acc) {
            t = k;
            break;
        }
    }
    double lo = lo_of[t], hi = hi_of[t];
    int64_t n = (int64_t)(lo * pow(hi / lo, di_rng_uniform(r)));
    return n < (int64_t)hi ? n : (int64_t)hi - 1;
}

static int check_synth(const DiSimSynthConfig *c) {
    if (c->requests == 0 || c->requests > 10000000)
        return di_errorf("synthetic workload: requests must be in 1..10^7, got %zu", c->requests);
    if (!(c->rate_per_s > 0.0) || !isfinite(c->rate_per_s))
        return di_errorf("synthetic workload: rate must be positive, got %g", c->rate_per_s);
    if (c->prefixes <= 0 || c->prefixes > (1 << 20)) return di_errorf("synthetic workload: prefixes must be in 1..2^20");
    if (!(c->zipf_s >= 0.0) || c->zipf_s > 10.0) return di_errorf("synthetic workload: zipf exponent must be in 0..10");
    if (!(c->prefix_fraction >= 0.0 && c->prefix_fraction <= 1.0))
        return di_errorf("synthetic workload: prefix fraction must be in 0..1");
    if (!(c->mean_output >= 1.0) || !isfinite(c->mean_output) || c->mean_output > 1e7)
        return di_errorf("synthetic workload: mean output must be in 1..10^7");
    double sum = 0.0;
    for (int t = 0; t < 4; t++) {
        if (!(c->tier_mix[t] >= 0.0) || !isfinite(c->tier_mix[t]))
            return di_errorf("synthetic workload: tier mix entries must be finite and >= 0");
        sum += c->tier_mix[t];
    }
    if (sum > 1e300) return di_errorf("synthetic workload: tier mix too large");
    return 0;
}

int di_sim_trace_synthetic(const DiSimSynthConfig *c, DiSimTrace *out) {
    if (!c || !out) return di_errorf("synthetic workload: NULL argument");
    memset(out, 0, sizeof *out);
    if (check_synth(c) != 0) return -1;
    double mix[4] = {0.70, 0.20, 0.08, 0.02}, sum = c->tier_mix[0] + c->tier_mix[1] + c->tier_mix[2] + c->tier_mix[3];
    if (sum > 0.0)
        for (int t = 0; t < 4; t++) mix[t] = c->tier_mix[t] / sum;
    double *cdf = di_calloc((size_t)c->prefixes, sizeof(double), "Zipf CDF");
    if (!cdf) return -1;
    for (int k = 0; k < c->prefixes; k++) cdf[k] = (k ? cdf[k - 1] : 0.0) + pow(k + 1, -c->zipf_s);
    Builder b;
    memset(&b, 0, sizeof b);
    DiRng r = di_rng_seed(c->seed);
    double t = 0.0;
    uint64_t unique = 1ULL << 40; /* ids of unshared blocks; shared ones are (doc << 20) | block */
    for (size_t i = 0; i < c->requests; i++) {
        t += di_rng_exponential(&r, 1.0 / c->rate_per_s);
        int64_t n = draw_context(&r, mix);
        int nb = (int)((n + DI_SIM_BLOCK_TOKENS - 1) / DI_SIM_BLOCK_TOKENS);
        int doc = zipf_draw(cdf, c->prefixes, &r), shared = (int)(c->prefix_fraction * (double)(n / DI_SIM_BLOCK_TOKENS));
        size_t start = b.t.n_block_ids;
        for (int k = 0; k < nb; k++)
            if (push_block(&b, k < shared ? ((uint64_t)doc << 20) | (uint64_t)k : unique++) != 0) goto fail;
        DiSimRequest req = {t, n, 1 + (int64_t)di_rng_exponential(&r, c->mean_output - 1.0), NULL, nb};
        if (push_request(&b, &req, start) != 0) goto fail;
    }
    free(cdf);
    finish(&b, out);
    return 0;
fail:
    free(cdf);
    abandon(&b);
    return di_error_wrap("synthetic workload");
}
