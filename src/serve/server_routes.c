/* server_routes.c — the server's endpoints besides generation: /v1/models and
 * /v1/models/{id}, /health, /metrics, /openapi.json, /version, and vLLM's /tokenize and
 * /detokenize (same request and response shapes, so vLLM clients and benchmarks work):
 *   POST /tokenize {"model"?, "prompt", "add_special_tokens"?}            -> {"count","max_model_len","tokens"}
 *   POST /tokenize {"model"?, "messages", "tools"?, "tool_choice"?, "thinking"?, "reasoning_effort"?}
 *        (the prompt ids a chat request gets: rendered with the chat template)
 *   POST /detokenize {"model"?, "tokens"}                                  -> {"prompt"}
 * Tokenizing is proportional to the input, so both run on a worker thread (server_work.h).
 * A field these endpoints do not know is refused (400 naming it), never ignored. */
#include "serve/server_internal.h"

#include "base/error.h"
#include "deepinfer.h"
#include "serve/openapi.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *model_object(const DiServer *srv) {
    return json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", srv->backend.model_name, "object", "model", "created",
                     (json_int_t)0, "owned_by", "deepinfer", "max_model_len", (json_int_t)srv->backend.context_limit);
}

enum MHD_Result di_srv_get_models(Exchange *x) {
    return di_srv_send_json(x, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_object(x->srv)));
}

enum MHD_Result di_srv_get_model(Exchange *x) {
    if (strcmp(x->path_arg, x->srv->backend.model_name) != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist; this server serves '%s'", x->path_arg,
                 x->srv->backend.model_name);
        return di_srv_send_error(x, 404, msg);
    }
    return di_srv_send_json(x, 200, model_object(x->srv));
}

enum MHD_Result di_srv_get_metrics(Exchange *x) {
    DiBackendStats st = {0};
    x->srv->backend.stats(x->srv->backend.self, &st);
    DiApiBuf text = {0};
    const DiServerConfig *cfg = &x->srv->cfg;
    if (di_metrics_render(x->srv->metrics, &st, &text) != 0 || di_srv_pd_metrics(x->srv, &text) != 0 ||
        (cfg->extra_metrics && cfg->extra_metrics(cfg->extra_metrics_user, &text) != 0)) {
        di_api_buf_free(&text);
        return di_srv_send_error(x, 500, di_error_message());
    }
    enum MHD_Result rc = di_srv_send_bytes(x, 200, "text/plain; version=0.0.4", text.data ? text.data : "", text.len);
    di_api_buf_free(&text);
    return rc;
}

enum MHD_Result di_srv_get_health(Exchange *x) {
    bool stopping = atomic_load(&x->srv->stopping);
    return di_srv_send_json(x, stopping ? 503 : 200, json_pack("{s:s}", "status", stopping ? "stopping" : "ok"));
}

enum MHD_Result di_srv_get_openapi(Exchange *x) {
    const char *doc = di_openapi_document();
    return di_srv_send_bytes(x, 200, "application/json", doc, strlen(doc));
}

enum MHD_Result di_srv_get_version(Exchange *x) {
    return di_srv_send_json(x, 200, json_pack("{s:s}", "version", di_version()));
}

/* GET /internal/load: the load a gateway balances on (pd-protocol.md): queue and batch, the KV
 * tokens of the running requests, monotonic step / prefill / decode counters, and the latest
 * per-request prefill samples [q, c, seconds] (oldest first) with their running total; the PD
 * fields (role, block_tokens, kv_identity, transfer, rooms_*) from di_server_pd_load. */
enum MHD_Result di_srv_get_load(Exchange *x) {
    DiServer *srv = x->srv;
    DiBackendStats st = {0};
    srv->backend.stats(srv->backend.self, &st);
    json_t *samples = json_array();
    uint64_t total = st.prefill_samples_total, n = total < DI_BACKEND_PREFILL_SAMPLES ? total : DI_BACKEND_PREFILL_SAMPLES;
    for (uint64_t i = total - n; samples && i < total; i++) {
        size_t k = (size_t)(i % DI_BACKEND_PREFILL_SAMPLES);
        json_array_append_new(samples, json_pack("[I, I, f]", (json_int_t)st.prefill_samples[k].q,
                                                 (json_int_t)st.prefill_samples[k].c, st.prefill_samples[k].seconds));
    }
    json_t *load = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:f, s:I, s:f, s:I, s:i, s:n, s:n, s:i, s:i, s:I, s:o*}",
                             "role", "both", "model", srv->backend.model_name,
                             "queued", st.queued, "running", st.running, "kv_tokens", (json_int_t)st.kv_tokens,
                             "steps", (json_int_t)st.steps, "step_seconds", st.step_seconds, "prefill_tokens",
                             (json_int_t)st.prefill_tokens, "prefill_seconds", st.prefill_seconds, "decode_tokens",
                             (json_int_t)st.decode_tokens, "block_tokens", st.block_tokens, "kv_identity", "transfer",
                             "rooms_waiting", 0, "rooms_pinned_blocks", 0, "prefill_samples_total",
                             (json_int_t)total, "prefill_samples", samples);
    if (!load) return di_srv_send_error(x, 500, "out of memory");
    if (di_server_pd_load(srv, load) != 0) { /* the PD fields: role, block_tokens, kv_identity, ... */
        json_decref(load);
        return di_srv_send_error(x, 500, di_error_message());
    }
    return di_srv_send_json(x, 200, load);
}

/* ---- /tokenize and /detokenize (on a worker) ---------------------------------------------- */

/* Set the error message and return `status`: a refusal of a worker handler. */
static int refuse(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(int status, const char *fmt, ...) {
    char msg[DI_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    di_errorf("%s", msg);
    return status;
}

/* The body as a JSON object whose keys are all in `known` (NULL-terminated) and whose model,
 * when given, is the served one.  NULL with *status and the cause. */
static json_t *body_object(Exchange *x, const char *const *known, int *status) {
    *status = 400;
    json_error_t jerr;
    json_t *body = json_loadb(x->body.data ? x->body.data : "", x->body.len, 0, &jerr);
    if (!body || !json_is_object(body)) {
        json_decref(body);
        di_errorf("Invalid request body: expected a JSON object (%s)", body ? "got another JSON value" : jerr.text);
        return NULL;
    }
    const char *key;
    json_t *value;
    json_object_foreach(body, key, value) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key) != 0) i++;
        if (!known[i]) {
            di_errorf("Unsupported field '%.100s' for %s", key, x->endpoint);
            json_decref(body);
            return NULL;
        }
    }
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model)) {
        const char *name = json_string_value(model);
        if (!name) {
            json_decref(body);
            di_errorf("Invalid model: expected a string");
            return NULL;
        }
        if (strcmp(name, x->srv->backend.model_name) != 0) {
            di_errorf("The model '%.200s' does not exist; this server serves '%s'", name, x->srv->backend.model_name);
            json_decref(body);
            *status = 404;
            return NULL;
        }
    }
    return body;
}

/* A chat tokenize body -> the DiApiRequest a chat completion would get (its conversation):
 * the chat parser validates the fields (the caller admitted only those tokenize honours). */
static int chat_request(Exchange *x, json_t *body, DiApiRequest *req, int *status) {
    *status = 400;
    json_t *add_special = json_object_get(body, "add_special_tokens");
    if (add_special && !json_is_false(add_special))
        return di_errorf("Invalid add_special_tokens: the chat template places BOS itself, so only false is accepted "
                         "with messages");
    json_t *chat = json_deep_copy(body);
    char *text = NULL;
    if (chat) {
        json_object_del(chat, "add_special_tokens");
        json_object_set_new(chat, "model", json_string(x->srv->backend.model_name));
        text = json_dumps(chat, JSON_COMPACT);
        json_decref(chat);
    }
    if (!text) {
        *status = 500;
        return di_errorf("out of memory");
    }
    int rc = di_api_request_parse(DI_API_CHAT, text, strlen(text), req, status);
    free(text);
    return rc;
}

static int tokenize(Exchange *x, json_t **reply) {
    static const char *const known[] = {"model", "prompt", "add_special_tokens", "messages", "tools", "tool_choice",
                                        "thinking", "reasoning_effort", NULL};
    DiServer *srv = x->srv;
    if (!srv->backend.tokenize) return refuse(501, "This server's backend cannot tokenize");
    int status;
    json_t *body = body_object(x, known, &status);
    if (!body) return status;
    json_t *prompt = json_object_get(body, "prompt"), *messages = json_object_get(body, "messages");
    json_t *add_special = json_object_get(body, "add_special_tokens");
    DiApiRequest req = {0};
    bool have_req = false;
    int rc = -1;
    status = 400;
    if (!prompt == !messages) {
        di_errorf("Give exactly one of prompt (a string) and messages (a chat)");
    } else if (add_special && !json_is_boolean(add_special)) {
        di_errorf("Invalid add_special_tokens: expected a boolean");
    } else if (messages) {
        rc = chat_request(x, body, &req, &status);
        have_req = rc == 0;
    } else if (!json_is_string(prompt)) {
        di_errorf("Invalid prompt: expected a string");
    } else {
        const char *extra[] = {"tools", "tool_choice", "thinking", "reasoning_effort"};
        for (size_t i = 0; i < 4; i++)
            if (json_object_get(body, extra[i])) {
                json_decref(body);
                return refuse(400, "Invalid %s: only with messages", extra[i]);
            }
        req.protocol = DI_API_COMPLETIONS;
        req.prompt = (char *)json_string_value(prompt);
        rc = 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (rc == 0)
        rc = srv->backend.tokenize(srv->backend.self, &req, add_special ? json_is_true(add_special) : true, &ids, &n,
                                   &status);
    if (have_req) di_api_request_free(&req);
    json_decref(body);
    if (rc != 0) return status;
    json_t *tokens = json_array();
    for (size_t i = 0; tokens && i < n; i++)
        if (json_array_append_new(tokens, json_integer(ids[i])) != 0) tokens = (json_decref(tokens), NULL);
    free(ids);
    *reply = tokens ? json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len",
                                (json_int_t)srv->backend.context_limit, "tokens", tokens)
                    : NULL;
    return *reply ? 200 : refuse(500, "out of memory");
}

static int detokenize(Exchange *x, json_t **reply) {
    static const char *const known[] = {"model", "tokens", NULL};
    DiServer *srv = x->srv;
    if (!srv->backend.detokenize) return refuse(501, "This server's backend cannot detokenize");
    int status;
    json_t *body = body_object(x, known, &status);
    if (!body) return status;
    json_t *tokens = json_object_get(body, "tokens");
    if (!json_is_array(tokens)) {
        json_decref(body);
        return refuse(400, "Invalid tokens: expected an array of token ids");
    }
    size_t n = json_array_size(tokens);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(body);
        return refuse(500, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(tokens, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            free(ids);
            json_decref(body);
            return refuse(400, "Invalid tokens[%zu]: expected a token id (an integer >= 0)", i);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(body);
    char *text = NULL;
    status = 400;
    int rc = srv->backend.detokenize(srv->backend.self, ids, n, &text, &status);
    free(ids);
    if (rc != 0) return status;
    *reply = json_pack("{s:s}", "prompt", text);
    free(text);
    return *reply ? 200 : refuse(500, "out of memory");
}

enum MHD_Result di_srv_tokenize(Exchange *x) { return di_srv_defer(x, tokenize); }
enum MHD_Result di_srv_detokenize(Exchange *x) { return di_srv_defer(x, detokenize); }
