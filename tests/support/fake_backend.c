/* fake_backend.c — the scripted test backend (see fake_backend.h). */
#include "fake_backend.h"

#include "base/error.h"
#include "base/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SEEN_PROMPTS 4096

typedef struct {
    DiApiEventKind kind;
    char *text;
} Token;

typedef struct Job {
    uint64_t id;
    DiBackendEmit emit;
    void *user;
    Token *tokens;
    size_t n_tokens, cap_tokens, next;
    int64_t max_tokens, emitted, prompt_tokens, cache_hit;
    char *stop[DI_API_MAX_STOP];
    size_t n_stop;
    bool ready_sent, aborted, has_tool;
    double t_submit, t_scheduled, t_first; /* its phases (times hook) */
    struct Job *next_job;
} Job;

struct FakeBackend {
    FakeBackendConfig cfg;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    Job *jobs; /* FIFO: the first max_running are running */
    int n_jobs;
    uint64_t next_id, steps;
    double step_seconds;
    bool quit;
    pthread_t thread;
    uint64_t seen[SEEN_PROMPTS];
};

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int add_token(Job *j, DiApiEventKind kind, const char *text, size_t len) {
    if (j->n_tokens == j->cap_tokens) { /* geometric growth: long scripts stay linear */
        size_t cap = j->cap_tokens ? 2 * j->cap_tokens : 16;
        Token *grown = di_realloc_array(j->tokens, cap, sizeof *grown, "fake tokens");
        if (!grown) return -1;
        j->tokens = grown;
        j->cap_tokens = cap;
    }
    Token *t = j->tokens;
    t[j->n_tokens].kind = kind;
    t[j->n_tokens].text = strndup(text, len);
    if (!t[j->n_tokens].text) return di_errorf("fake backend: out of memory");
    j->n_tokens++;
    return 0;
}

/* Split text into word tokens (each keeps its leading space), like a BPE tokenizer would. */
static int add_words(Job *j, DiApiEventKind kind, const char *text) {
    const char *p = text;
    while (*p) {
        const char *q = p + 1;
        while (*q && *q != ' ' && *q != '\n') q++;
        if (add_token(j, kind, p, (size_t)(q - p)) != 0) return -1;
        p = q;
    }
    return 0;
}

static int script(Job *j, const DiApiRequest *req) {
    const char *text = di_api_last_user_text(req);
    char buf[512];
    if (req->thinking) {
        snprintf(buf, sizeof buf, "Thinking about: %.400s", text);
        if (add_words(j, DI_API_EV_REASONING, buf) != 0) return -1;
    }
    const char *count = strstr(text, "count to ");
    bool tools = req->n_tools > 0 && req->tool_choice != DI_TOOL_CHOICE_NONE && strstr(text, "weather");
    if (count) {
        int n = atoi(count + 9);
        for (int i = 1; i <= n && i <= 100000; i++) {
            snprintf(buf, sizeof buf, i == 1 ? "%d" : " %d", i);
            if (add_token(j, DI_API_EV_CONTENT, buf, strlen(buf)) != 0) return -1;
        }
    } else if (tools) {
        json_t *tool = json_array_get(json_object_get(req->conversation, "tools"), 0);
        const char *name = json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
        if (add_words(j, DI_API_EV_CONTENT, "Let me check.") != 0 ||
            add_token(j, DI_API_EV_TOOL_BEGIN, name, strlen(name)) != 0 ||
            add_token(j, DI_API_EV_TOOL_ARGS, "{\"city\"", 7) != 0 || add_token(j, DI_API_EV_TOOL_ARGS, ": ", 2) != 0 ||
            add_token(j, DI_API_EV_TOOL_ARGS, "\"Paris\"}", 8) != 0)
            return -1;
        j->has_tool = true;
    } else {
        snprintf(buf, sizeof buf, req->prompt ? "%.400s" : "Echo: %.400s", text);
        if (add_words(j, DI_API_EV_CONTENT, buf) != 0) return -1;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void free_job(Job *j) {
    for (size_t i = 0; i < j->n_tokens; i++) free(j->tokens[i].text);
    for (size_t i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->tokens);
    free(j);
}

static int fb_submit(void *self, const DiApiRequest *req, DiBackendEmit emit, void *user, uint64_t *out_id,
                     int *http_status) {
    FakeBackend *fb = self;
    *http_status = 400;
    if (!req || !emit || !out_id) return di_errorf("fake backend: bad submit arguments");
    /* Scripted words, not tokens of a vocabulary: what is asked of tokens is refused by name,
     * as the engine backend does without a tokenizer, never answered with nothing. */
    if (req->logprobs >= 0) return di_errorf("Invalid logprobs: this backend has no tokenizer to spell the tokens");
    if (req->n_logit_bias) return di_errorf("Invalid logit_bias: this backend has no token vocabulary");
    if (req->n_stop_token_ids) return di_errorf("Invalid stop_token_ids: this backend has no token vocabulary");
    if (req->thinking && req->thinking_budget_tokens >= 0)
        return di_errorf("Invalid thinking.budget_tokens: this backend has no </think> token");
    char *conv = req->conversation ? json_dumps(req->conversation, JSON_COMPACT | JSON_SORT_KEYS) : di_strdup(req->prompt);
    if (!conv) return di_errorf("fake backend: out of memory");
    int64_t prompt_tokens = 1 + (int64_t)strlen(conv) / 4;
    uint64_t h = fnv1a(conv);
    free(conv);
    int64_t max_tokens = di_api_resolve_max_tokens(req, prompt_tokens, fb->cfg.context_limit);
    if (max_tokens < 0) return -1;
    Job *j = di_calloc(1, sizeof *j, "fake job");
    if (!j) return -1;
    j->emit = emit;
    j->user = user;
    j->t_submit = now_s();
    j->max_tokens = max_tokens;
    j->prompt_tokens = prompt_tokens;
    for (size_t i = 0; i < req->n_stop; i++) j->stop[j->n_stop++] = di_strdup(req->stop[i]);
    if (script(j, req) != 0) {
        free_job(j);
        *http_status = 500;
        return -1;
    }
    pthread_mutex_lock(&fb->lock);
    bool seen = false;
    for (int i = 0; i < SEEN_PROMPTS && fb->seen[i]; i++) seen = seen || fb->seen[i] == h;
    if (!seen) fb->seen[fb->next_id % SEEN_PROMPTS] = h;
    j->cache_hit = seen ? prompt_tokens / 2 : 0;
    j->id = ++fb->next_id;
    Job **tail = &fb->jobs;
    while (*tail) tail = &(*tail)->next_job;
    *tail = j;
    fb->n_jobs++;
    *out_id = j->id;
    pthread_cond_signal(&fb->wake);
    pthread_mutex_unlock(&fb->lock);
    return 0;
}

static void fb_abort(void *self, uint64_t id) {
    FakeBackend *fb = self;
    pthread_mutex_lock(&fb->lock);
    for (Job *j = fb->jobs; j; j = j->next_job)
        if (j->id == id) j->aborted = true;
    pthread_cond_signal(&fb->wake);
    pthread_mutex_unlock(&fb->lock);
}

/* Byte-level text for /tokenize and /detokenize: ids 0..255 are bytes, FAKE_BOS the start
 * of a raw prompt; a chat is its conversation JSON. */
#define FAKE_BOS 256

static int fb_tokenize(void *self, const DiApiRequest *req, bool add_special, int32_t **ids, size_t *n_ids,
                       int *http_status) {
    (void)self;
    *http_status = 500;
    char *text = req->conversation ? json_dumps(req->conversation, JSON_COMPACT | JSON_SORT_KEYS) : di_strdup(req->prompt);
    if (!text) return di_errorf("fake backend: out of memory");
    size_t len = strlen(text), bos = req->conversation || add_special;
    int32_t *out = di_malloc((len + 1) * sizeof *out, "fake ids");
    if (out) {
        out[0] = FAKE_BOS;
        for (size_t i = 0; i < len; i++) out[bos + i] = (unsigned char)text[i];
        *ids = out;
        *n_ids = len + bos;
    }
    free(text);
    return out ? 0 : -1;
}

static int fb_detokenize(void *self, const int32_t *ids, size_t n_ids, char **text, int *http_status) {
    (void)self;
    *http_status = 400;
    DiApiBuf buf = {0};
    for (size_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] > FAKE_BOS) {
            di_api_buf_free(&buf);
            return di_errorf("token id %d (at %zu) is not in the vocabulary (0..%d)", (int)ids[i], i, FAKE_BOS);
        }
        char c = ids[i] < 0x80 ? (char)ids[i] : '?'; /* ASCII only: the text must be UTF-8 */
        int rc = ids[i] == FAKE_BOS ? di_api_buf_puts(&buf, "<s>") : di_api_buf_append(&buf, &c, 1);
        if (rc != 0) {
            di_api_buf_free(&buf);
            return *http_status = 500, -1;
        }
    }
    *text = di_strdup(buf.data ? buf.data : "");
    di_api_buf_free(&buf);
    return *text ? 0 : (*http_status = 500, -1);
}

/* From inside a FINISH event (the fake's thread, fb->lock not held there). */
static int fb_times(void *self, uint64_t id, DiBackendTimes *out) {
    FakeBackend *fb = self;
    int rc = -1;
    double t = now_s();
    pthread_mutex_lock(&fb->lock);
    for (Job *j = fb->jobs; j; j = j->next_job)
        if (j->id == id && j->t_scheduled > 0) {
            double first = j->t_first > 0 ? j->t_first : t;
            out->queue_s = j->t_scheduled - j->t_submit;
            out->prefill_s = first - j->t_scheduled;
            out->decode_s = t - first;
            rc = 0;
        }
    pthread_mutex_unlock(&fb->lock);
    return rc;
}

static void fb_stats(void *self, DiBackendStats *out) {
    FakeBackend *fb = self;
    pthread_mutex_lock(&fb->lock);
    out->running = fb->n_jobs < fb->cfg.max_running ? fb->n_jobs : fb->cfg.max_running;
    out->queued = fb->n_jobs - out->running;
    out->steps = fb->steps;
    out->step_seconds = fb->step_seconds;
    out->state_usage = (double)out->running / fb->cfg.max_running; /* one state per running request */
    pthread_mutex_unlock(&fb->lock);
}

static void finish(Job *j, DiApiFinish reason, const char *stop) {
    DiApiEvent ev = {.kind = DI_API_EV_FINISH, .finish = reason, .stop_sequence = stop};
    j->emit(j->user, &ev);
}

/* Advance one job by one token; true when it finished. */
static bool step_job(Job *j) {
    if (j->aborted) {
        finish(j, DI_API_FINISH_ABORT, NULL);
        return true;
    }
    if (!j->ready_sent) { /* its first step: scheduled */
        j->t_scheduled = now_s();
        DiApiEvent ev = {.kind = DI_API_EV_READY, .prompt_tokens = j->prompt_tokens, .cache_hit_tokens = j->cache_hit};
        j->emit(j->user, &ev);
        j->ready_sent = true;
        return false;
    }
    if (j->next >= j->n_tokens) {
        finish(j, DI_API_FINISH_STOP, NULL);
        return true;
    }
    if (j->emitted >= j->max_tokens) {
        finish(j, DI_API_FINISH_LENGTH, NULL);
        return true;
    }
    Token *t = &j->tokens[j->next++];
    if (!j->emitted++) j->t_first = now_s();
    DiApiEvent ev = {.kind = t->kind, .text = t->text, .len = strlen(t->text), .tokens = 1};
    if (t->kind == DI_API_EV_CONTENT)
        for (size_t i = 0; i < j->n_stop; i++) {
            char *at = strstr(t->text, j->stop[i]);
            if (!at) continue;
            ev.len = (size_t)(at - t->text);
            j->emit(j->user, &ev);
            finish(j, DI_API_FINISH_STOP, j->stop[i]);
            return true;
        }
    j->emit(j->user, &ev);
    return false;
}

static void *engine_main(void *arg) {
    FakeBackend *fb = arg;
    pthread_mutex_lock(&fb->lock);
    for (;;) {
        while (!fb->jobs && !fb->quit) pthread_cond_wait(&fb->wake, &fb->lock);
        if (fb->quit && !fb->jobs) break;
        if (fb->quit)
            for (Job *j = fb->jobs; j; j = j->next_job) j->aborted = true;
        /* Take the running batch: the first max_running jobs (aborted ones anywhere). */
        Job *batch[4096];
        int n = 0, slot = 0;
        for (Job *j = fb->jobs; j && n < 4096; j = j->next_job, slot++)
            if (slot < fb->cfg.max_running || j->aborted) batch[n++] = j;
        pthread_mutex_unlock(&fb->lock);
        double t0 = now_s();
        bool done[4096];
        for (int i = 0; i < n; i++) done[i] = step_job(batch[i]);
        if (fb->cfg.step_us > 0) usleep((useconds_t)fb->cfg.step_us);
        pthread_mutex_lock(&fb->lock);
        fb->steps++;
        fb->step_seconds += now_s() - t0;
        for (int i = 0; i < n; i++) {
            if (!done[i]) continue;
            for (Job **p = &fb->jobs; *p; p = &(*p)->next_job)
                if (*p == batch[i]) {
                    *p = batch[i]->next_job;
                    break;
                }
            fb->n_jobs--;
            free_job(batch[i]);
        }
    }
    pthread_mutex_unlock(&fb->lock);
    return NULL;
}

FakeBackend *fake_backend_create(const FakeBackendConfig *cfg) {
    if (!cfg || cfg->max_running < 1 || cfg->context_limit < 16) {
        di_errorf("fake backend: max_running >= 1 and context_limit >= 16 required");
        return NULL;
    }
    FakeBackend *fb = di_calloc(1, sizeof *fb, "fake backend");
    if (!fb) return NULL;
    fb->cfg = *cfg;
    pthread_mutex_init(&fb->lock, NULL);
    pthread_cond_init(&fb->wake, NULL);
    if (pthread_create(&fb->thread, NULL, engine_main, fb) != 0) {
        free(fb);
        di_errorf("fake backend: cannot start its thread");
        return NULL;
    }
    return fb;
}

void fake_backend_destroy(FakeBackend *fb) {
    if (!fb) return;
    pthread_mutex_lock(&fb->lock);
    fb->quit = true;
    pthread_cond_signal(&fb->wake);
    pthread_mutex_unlock(&fb->lock);
    pthread_join(fb->thread, NULL);
    pthread_mutex_destroy(&fb->lock);
    pthread_cond_destroy(&fb->wake);
    free(fb);
}

DiBackend fake_backend_interface(FakeBackend *fb) {
    DiBackend b = {.self = fb,
                   .model_name = "DeepSeek-V4.1-Flash",
                   .context_limit = fb ? fb->cfg.context_limit : 0,
                   .submit = fb_submit,
                   .abort = fb_abort,
                   .stats = fb_stats,
                   .tokenize = fb_tokenize,
                   .detokenize = fb_detokenize,
                   .times = fb_times};
    return b;
}
