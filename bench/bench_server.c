/* bench_server.c — HTTP server overhead: generated tokens/s delivered over SSE to 64 concurrent
 * streaming clients, as a ratio to the same engine's tokens/s offline (di_engine_run, no
 * server), on the same model, measured in the same run (target >= 0.95).
 *
 * The model: the built-in tiny V4.1 model with its tokenizer (what `deepinfer serve` serves by
 * default).  Both paths tokenize the same /v1/completions prompts (BOS + BPE) and decode
 * greedily, so they generate exactly the same tokens (checked); what differs is only what the
 * server adds: request parsing, the engine thread's output parser and event encoding, SSE
 * framing, sockets.
 * Rounds interleave offline and server runs; medians are quoted. */
#include "deepinfer.h"
#include "serve/backend_engine.h"
#include "serve/backend_text.h"
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
#define GEN_TOKENS 48
#define ROUNDS 5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the model ------------------------------------------------------------------------------ */

/* The built-in tiny V4.1 model (generated on first use) with its tokenizer, as `deepinfer serve`
 * opens it.  *text must outlive the engine. */
static DiEngine *tiny_engine(DiServeText **text) {
    DiEngineOptions o;
    di_engine_options_init(&o);
    o.max_num_seqs = STREAMS;
    DiEngine *e = di_engine_create(NULL, &o);
    *text = e ? di_serve_text_open(di_engine_model_dir(e)) : NULL;
    if (!*text || di_serve_text_install(*text, e) != 0) {
        di_engine_destroy(e);
        di_serve_text_close(*text);
        *text = NULL;
        return NULL;
    }
    return e;
}

static void prompt_of(int i, char *buf, size_t n) { snprintf(buf, n, "bench prompt %d", i); }

/* ---- offline: the engine alone --------------------------------------------------------------- */

static double offline_tokens_per_s(long *tokens_out) {
    DiServeText *text = NULL;
    DiEngine *e = tiny_engine(&text);
    if (!e) return -1;
    DiSamplingParams p;
    di_sampling_params_init(&p);
    p.temperature = 0;
    p.max_tokens = GEN_TOKENS;
    uint64_t ids[STREAMS];
    int rc = 0;
    double t0 = now_s();
    for (int i = 0; i < STREAMS && rc == 0; i++) { /* tokenizing is part of the work, as in the server */
        char prompt[64];
        prompt_of(i, prompt, sizeof prompt);
        int32_t *pids = NULL;
        size_t n = 0;
        rc = di_serve_text_encode_prompt(text, prompt, &pids, &n);
        DiRequestInput in = {.prompt_ids = pids, .n_prompt_ids = (int)n};
        if (rc == 0) rc = di_engine_add_request(e, &in, &p, NULL, NULL, &ids[i]);
        free(pids);
    }
    if (rc == 0) rc = di_engine_run(e);
    double dt = now_s() - t0;
    long tokens = 0;
    for (int i = 0; i < STREAMS && rc == 0; i++) {
        DiRequestOutput out;
        if (di_engine_get_output(e, ids[i], &out) == 0) tokens += out.n_tokens;
    }
    di_engine_destroy(e);
    di_serve_text_close(text);
    *tokens_out = tokens;
    return rc == 0 ? (double)tokens / dt : -1;
}

/* ---- through the server ---------------------------------------------------------------------- */

typedef struct {
    int port, index;
    long tokens; /* completion_tokens reported by the stream's final usage */
    int ok;
} Client;

static void *client_main(void *arg) {
    Client *c = arg;
    char req[512], body[256], prompt[64];
    prompt_of(c->index, prompt, sizeof prompt);
    snprintf(body, sizeof body, "{\"model\":\"bench\",\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,"
             "\"stream\":true,\"stream_options\":{\"include_usage\":true}}", prompt, GEN_TOKENS);
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

static double server_tokens_per_s(long *tokens_out, int *errors) {
    DiServeText *text = NULL;
    DiEngine *e = tiny_engine(&text);
    DiEngineBackendConfig bc = {.model_name = "bench", .context_limit = 4096, .text = text};
    DiEngineBackend *eb = e ? di_engine_backend_create(e, &bc) : NULL;
    if (!eb) {
        di_engine_destroy(e);
        di_serve_text_close(text);
        return -1;
    }
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
        clients[i] = (Client){.port = di_server_port(srv), .index = i};
        pthread_create(&threads[i], NULL, client_main, &clients[i]);
    }
    long tokens = 0;
    for (int i = 0; i < STREAMS; i++) {
        pthread_join(threads[i], NULL);
        tokens += clients[i].tokens;
        *errors += !clients[i].ok || clients[i].tokens < 1;
    }
    double dt = now_s() - t0;
    di_server_stop(srv);
    di_engine_backend_destroy(eb);
    di_serve_text_close(text);
    *tokens_out = tokens;
    return (double)tokens / dt;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    double off[ROUNDS], on[ROUNDS];
    int errors = 0;
    long off_tokens = 0, on_tokens = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* Alternate which path goes first, so drift and warm-up do not favour one. */
        if (r % 2 == 0) off[r] = offline_tokens_per_s(&off_tokens);
        on[r] = server_tokens_per_s(&on_tokens, &errors);
        if (r % 2 == 1) off[r] = offline_tokens_per_s(&off_tokens);
        /* Greedy on the same prompt ids: both paths must generate exactly the same tokens. */
        if (off_tokens != on_tokens) {
            fprintf(stderr, "bench_server: offline generated %ld tokens, the server %ld\n", off_tokens, on_tokens);
            errors++;
        }
        if (off[r] <= 0 || on[r] <= 0) {
            fprintf(stderr, "bench_server: %s\n", di_last_error());
            return 1;
        }
    }
    /* The ratio of each round's adjacent pair, then their median: the shared machine's load
     * drifts between rounds more than the server's overhead. */
    double ratios[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        ratios[r] = on[r] / off[r];
        fprintf(stderr, "round %d: offline %.0f, SSE %.0f tokens/s, ratio %.3f\n", r, off[r], on[r], ratios[r]);
    }
    qsort(off, ROUNDS, sizeof off[0], cmp);
    qsort(on, ROUNDS, sizeof on[0], cmp);
    qsort(ratios, ROUNDS, sizeof ratios[0], cmp);
    double ratio = ratios[ROUNDS / 2];
    printf("server overhead: %d SSE streams x <= %d tokens (%ld generated), built-in tiny V4.1 model, greedy, "
           "median of %d interleaved rounds\n", STREAMS, GEN_TOKENS, on_tokens, ROUNDS);
    printf("  engine offline %.0f tokens/s, over HTTP/SSE %.0f tokens/s, stream errors %d\n", off[ROUNDS / 2],
           on[ROUNDS / 2], errors);
    printf("  SSE / offline = %.3f, median of the per-round ratios (target >= 0.95): %s\n", ratio, ratio >= 0.95 && !errors ? "ok" : "BELOW TARGET");
    return 0;
}
