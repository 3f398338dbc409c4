/* server_harness.c — the HTTP server over a test backend, for the server tests only:
 * --backend fake (default): the scripted fake backend (fake_backend.h);
 * --backend mock-engine: the real engine adapter (serve/backend_engine.h) over the engine's
 *   mock model (di_engine_create_mock: byte-level text from a hash, not a language model).
 * Prints "port N" once listening, serves until SIGTERM / SIGINT, then stops gracefully and
 * prints "stopped".  Options mirror `deepinfer serve` limits plus the fake engine's pace. */
#include "fake_backend.h"

#include "base/error.h"
#include "serve/backend_engine.h"
#include "serve/server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
    fprintf(stderr, "usage: server_harness [--port N] [--api-key K] [--max-queue N] [--max-running N] "
                    "[--step-us N] [--max-body N] [--request-timeout S] [--grace S] [--context N] "
                    "[--backend fake|mock-engine] [--idle-timeout S] [--read-timeout S] [--workers N] "
                    "[--max-connections N]\n");
    return 2;
}

int main(int argc, char **argv) {
    DiServerConfig cfg;
    di_server_config_defaults(&cfg);
    cfg.port = 0;
    FakeBackendConfig fcfg = {.max_running = 64, .step_us = 1000, .context_limit = 8192};
    const char *which = "fake";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (strcmp(a, "--port") == 0) cfg.port = atoi(v);
        else if (strcmp(a, "--api-key") == 0) cfg.api_key = v;
        else if (strcmp(a, "--max-queue") == 0) cfg.max_queue = atoi(v);
        else if (strcmp(a, "--max-running") == 0) fcfg.max_running = atoi(v);
        else if (strcmp(a, "--step-us") == 0) fcfg.step_us = atoi(v);
        else if (strcmp(a, "--max-body") == 0) cfg.max_body_bytes = (size_t)atol(v);
        else if (strcmp(a, "--request-timeout") == 0) cfg.request_timeout_s = atof(v);
        else if (strcmp(a, "--grace") == 0) cfg.shutdown_grace_s = atof(v);
        else if (strcmp(a, "--context") == 0) fcfg.context_limit = atol(v);
        else if (strcmp(a, "--backend") == 0) which = v;
        else if (strcmp(a, "--idle-timeout") == 0) cfg.idle_timeout_s = (unsigned)atoi(v);
        else if (strcmp(a, "--read-timeout") == 0) cfg.read_timeout_s = atof(v);
        else if (strcmp(a, "--workers") == 0) cfg.workers = atoi(v);
        else if (strcmp(a, "--max-connections") == 0) cfg.max_connections = (unsigned)atoi(v);
        else return usage();
        i++;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* every thread inherits the mask; sigwait below */
    signal(SIGPIPE, SIG_IGN);
    FakeBackend *fb = NULL;
    DiEngineBackend *eb = NULL;
    DiBackend backend;
    if (strcmp(which, "mock-engine") == 0) {
        DiEngineOptions opts;
        di_engine_options_init(&opts);
        opts.max_num_seqs = fcfg.max_running;
        DiEngine *engine = di_engine_create_mock(512, 7, &opts);
        DiEngineBackendConfig ecfg = {.model_name = "DeepSeek-V4.1-Flash", .context_limit = fcfg.context_limit};
        eb = engine ? di_engine_backend_create(engine, &ecfg) : NULL;
        if (!eb) {
            fprintf(stderr, "server_harness: %s\n", di_error_message());
            return 1;
        }
        backend = di_engine_backend_interface(eb);
    } else if (strcmp(which, "fake") == 0) {
        fb = fake_backend_create(&fcfg);
        if (!fb) {
            fprintf(stderr, "server_harness: %s\n", di_error_message());
            return 1;
        }
        backend = fake_backend_interface(fb);
    } else {
        return usage();
    }
    DiServer *srv = di_server_start(&cfg, &backend);
    if (!srv) {
        fprintf(stderr, "server_harness: %s\n", di_error_message());
        fake_backend_destroy(fb);
        di_engine_backend_destroy(eb);
        return 1;
    }
    printf("port %d\n", di_server_port(srv));
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    di_server_stop(srv);
    fake_backend_destroy(fb);
    di_engine_backend_destroy(eb);
    printf("stopped\n");
    return 0;
}
