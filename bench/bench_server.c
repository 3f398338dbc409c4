/* bench_server.c — HTTP server overhead: generated tokens/s delivered over SSE to 64 concurrent
 * streaming clients, as a ratio to the same engine's tokens/s offline (di_engine_run, no
 * server), on the same model, measured in the same run (target >= 0.95).
 *
 * The model: until the V4.1 model core lands, a paced synthetic runner behind the engine's
 * runner interface — every forward takes STEP_MS (a decode step of a real model on CPU takes
 * tens of milliseconds), logits pick a fixed byte sequence (greedy, never EOS), so both paths
 * generate exactly the same tokens.  What differs is only what the server adds: request
 * parsing, the engine thread's parser and event encoding, SSE framing, sockets.
 * Rounds interleave offline and server runs; medians are quoted. */
#include "deepinfer.h"
#include "engine/engine.h"
#include "engine/runner.h"
#include "serve/backend_engine.h"
#include "serve/server.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STREAMS 64
#define GEN_TOKENS 96
#define STEP_MS 10
#define ROUNDS 3
#define VOCAB 257 /* bytes + EOS */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the paced synthetic runner ---------------------------------------------------------- */

static size_t paced_pages(const DiRunner *r, int64_t n) {
    (void)r;
    return (size_t)(n / 4096 + 1);
}

static int paced_forward(DiRunner *r, const DiRunnerBatch *b) {
    (void)r;
    struct timespec ts = {0, STEP_MS * 1000000L};
    nanosleep(&ts, NULL);
    int row = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        if (!b->seqs[s].want_logits) continue;
        float *logits = b->logits + (size_t)row++ * VOCAB;
        int64_t pos = b->seqs[s].start_pos + b->seqs[s].n_tokens;
        for (int v = 0; v < VOCAB; v++) logits[v] = 0.0f;
        logits['a' + pos % 26] = 10.0f; /* letters, never EOS (256) */
    }
    return 0;
}

static void paced_destroy(DiRunner *r) { free(r); }

static int byte_encode(void *ctx, const char *text, size_t len, int32_t **out, size_t *n) {
    (void)ctx;
    *out = malloc((len ? len : 1) * sizeof **out);
    if (!*out) return -1;
    for (size_t i = 0; i < len; i++) (*out)[i] = (unsigned char)text[i];
    *n = len;
    return 0;
}

static unsigned char k_bytes[256];
static void byte_piece(void *ctx, int32_t id, const char **bytes, size_t *len) {
    (void)ctx;
    *bytes = id >= 0 && id < 256 ? (const char *)&k_bytes[id] : "";
    *len = id >= 0 && id < 256 ? 1 : 0;
}

static const DiRunnerOps k_paced_ops = {paced_pages, paced_forward, paced_destroy};
static const int32_t k_eos[1] = {256};

static DiEngine *paced_engine(void) {
    DiRunner *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->ops = &k_paced_ops;
    r->vocab_size = VOCAB;
    r->page_bytes = 64;
    r->eos_ids = k_eos;
    r->n_eos_ids = 1;
    r->codec = (DiTextCodec){byte_encode, byte_piece, NULL};
    r->name = "paced synthetic runner";
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = STREAMS;
    o.state_memory_bytes = (size_t)16 << 20;
    return di_engine_create_with_runner(r, &o);
}

/* ---- offline: the engine alone --------------------------------------------------------------- */

static double offline_tokens_per_s(void) {
    DiEngine *e = paced_engine();
    if (!e) return -1;
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN_TOKENS;
    for (int i = 0; i < STREAMS; i++) {
        DiRequestInput in = {.prompt_text = "bench prompt"};
        if (di_engine_add_request(e, &in, &p, NULL, NULL, NULL) != 0) return -1;
    }
    double t0 = now_s();
    if (di_engine_run(e) != 0) return -1;
    double dt = now_s() - t0;
    di_engine_destroy(e);
    return STREAMS * (double)GEN_TOKENS / dt;
}

/* ---- through the server ---------------------------------------------------------------------- */

typedef struct {
    int port;
    long tokens; /* completion_tokens reported by the stream's final usage */
    int ok;
} Client;

static void *client_main(void *arg) {
    Client *c = arg;
    char req[512];
    const char *body = "{\"model\":\"bench\",\"prompt\":\"bench prompt\",\"max_tokens\":" "96" ",\"temperature\":0,"
                       "\"stream\":true}";
    int n = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                                      "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(body), body);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, req, (size_t)n) != n) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    ssize_t got;
    while (buf && (got = read(fd, buf + len, cap - len - 1)) > 0) {
        len += (size_t)got;
        if (len + 1 >= cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) break;
            buf = grown;
        }
    }
    close(fd);
    if (!buf) return NULL;
    buf[len] = '\0';
    const char *u = strstr(buf, "\"completion_tokens\":");
    c->tokens = u ? atol(u + 20) : 0;
    c->ok = strstr(buf, "data: [DONE]") != NULL;
    free(buf);
    return NULL;
}

static double server_tokens_per_s(int *errors) {
    DiEngineBackendConfig bc = {.model_name = "bench", .context_limit = 4096};
    DiEngine *e = paced_engine();
    DiEngineBackend *eb = e ? di_engine_backend_create(e, &bc) : NULL;
    if (!eb) return -1;
    DiBackend backend = di_engine_backend_interface(eb);
    DiServerConfig cfg;
    di_server_config_defaults(&cfg);
    cfg.port = 0;
    DiServer *srv = di_server_start(&cfg, &backend);
    if (!srv) return -1;
    Client clients[STREAMS];
    pthread_t threads[STREAMS];
    double t0 = now_s();
    for (int i = 0; i < STREAMS; i++) {
        clients[i] = (Client){.port = di_server_port(srv)};
        pthread_create(&threads[i], NULL, client_main, &clients[i]);
    }
    long tokens = 0;
    for (int i = 0; i < STREAMS; i++) {
        pthread_join(threads[i], NULL);
        tokens += clients[i].tokens;
        *errors += !clients[i].ok || clients[i].tokens != GEN_TOKENS;
    }
    double dt = now_s() - t0;
    di_server_stop(srv);
    di_engine_backend_destroy(eb);
    return (double)tokens / dt;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < 256; i++) k_bytes[i] = (unsigned char)i;
    double off[ROUNDS], on[ROUNDS];
    int errors = 0;
    for (int r = 0; r < ROUNDS; r++) {
        off[r] = offline_tokens_per_s();
        on[r] = server_tokens_per_s(&errors);
        if (off[r] <= 0 || on[r] <= 0) {
            fprintf(stderr, "bench_server: %s\n", di_last_error());
            return 1;
        }
    }
    qsort(off, ROUNDS, sizeof off[0], cmp);
    qsort(on, ROUNDS, sizeof on[0], cmp);
    double ratio = on[ROUNDS / 2] / off[ROUNDS / 2];
    printf("server overhead: %d SSE streams x %d tokens, paced synthetic runner (%d ms/step), median of %d "
           "interleaved rounds\n", STREAMS, GEN_TOKENS, STEP_MS, ROUNDS);
    printf("  engine offline %.0f tokens/s, over HTTP/SSE %.0f tokens/s, stream errors %d\n", off[ROUNDS / 2],
           on[ROUNDS / 2], errors);
    printf("  SSE / offline = %.3f (target >= 0.95): %s\n", ratio, ratio >= 0.95 && !errors ? "ok" : "BELOW TARGET");
    return 0;
}
