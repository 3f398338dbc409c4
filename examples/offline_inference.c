/* offline_inference.c — batch generation with the C API: create an engine, add requests with a
 * streaming callback, run to completion, read outputs and metrics.
 *
 *   make && gcc -std=c11 -Iinclude examples/offline_inference.c build/libdeepinfer.a \
 *        -ljansson -lutf8proc -lxxhash -lmicrohttpd -lucp -lucs -lm -lpthread -o build/offline_inference
 *   build/offline_inference [--mock] [MODEL_DIR]
 *
 * MODEL_DIR defaults to $DEEPINFER_HF_MODEL_DIR (else the built-in tiny model).  --mock runs the
 * engine over its deterministic test mock (not a language model), usable before the model lands. */
#include "deepinfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *prompts[] = {
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
};
#define N_PROMPTS (sizeof prompts / sizeof prompts[0])

/* The model's tokenizer as the engine's text hooks: the engine never calls the tokenizer itself
 * (it sits below the recipe layer), the application hands it these. */
static int hook_encode(const void *ctx, const char *text, size_t len, int32_t **ids, size_t *n) {
    return di_tokenizer_encode((const DiTokenizer *)ctx, text, len, ids, n);
}
static const char *hook_token_bytes(const void *ctx, int32_t id, size_t *len) {
    return di_tokenizer_token_bytes((const DiTokenizer *)ctx, id, len);
}
static int hook_is_special(const void *ctx, int32_t id) { return di_tokenizer_is_added((const DiTokenizer *)ctx, id) == 1; }

static DiTokenizer *attach_tokenizer(DiEngine *engine) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", di_engine_model_dir(engine));
    /* a file without the V4 control tokens (a V3 tokenizer.json) gets the V4.1 table on top */
    DiTokenizer *tok = di_tokenizer_load_table(path, DI_ADDED_TABLE_FILE);
    if (tok && di_tokenizer_special_id(tok, "</think>") < 0) {
        di_tokenizer_free(tok);
        tok = di_tokenizer_load_table(path, DI_ADDED_TABLE_V41);
    }
    if (!tok) return NULL;
    int32_t bos = di_tokenizer_special_id(tok, "<｜begin▁of▁sentence｜>"); /* -1 when absent: no BOS */
    DiTextHooks hooks = {hook_encode, hook_token_bytes, hook_is_special, NULL, tok, bos};
    if (di_engine_set_text_hooks(engine, &hooks) != 0) {
        di_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

/* Streaming: print each request's new text as it arrives, tagged with its id. */
static void on_delta(void *user, const DiStreamDelta *d) {
    (void)user;
    if (d->new_text_len > 0) printf("[%llu] %.*s\n", (unsigned long long)d->request_id, (int)d->new_text_len, d->new_text);
    if (d->finish_reason != DI_FINISH_NONE)
        printf("[%llu] finished: %s\n", (unsigned long long)d->request_id, di_finish_reason_name(d->finish_reason));
}

int main(int argc, char **argv) {
    int mock = 0;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mock") == 0) mock = 1;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: %s [--mock] [MODEL_DIR]\n", argv[0]);
            return 0;
        } else model = argv[i];
    }
    DiEngineOptions opts;
    di_engine_options_init(&opts);
    DiEngine *engine = mock ? di_engine_create_mock(512, 0, &opts) : di_engine_create(model, &opts);
    if (!engine) {
        fprintf(stderr, "offline_inference: %s\n", di_last_error());
        return 1;
    }
    DiTokenizer *tok = NULL; /* the mock has byte-level text built in */
    if (!mock && !(tok = attach_tokenizer(engine))) {
        fprintf(stderr, "offline_inference: tokenizer: %s\n", di_last_error());
        di_engine_destroy(engine);
        return 1;
    }
    DiSamplingParams params;
    di_sampling_params_init(&params);
    params.temperature = 0.8f;
    params.top_p = 0.95f;
    uint64_t ids[N_PROMPTS];
    for (size_t i = 0; i < N_PROMPTS; i++) {
        DiRequestInput input = {.prompt_text = prompts[i]};
        if (di_engine_add_request(engine, &input, &params, on_delta, NULL, &ids[i]) != 0) {
            fprintf(stderr, "offline_inference: %s\n", di_last_error());
            di_engine_destroy(engine);
            di_tokenizer_free(tok);
            return 1;
        }
    }
    if (di_engine_run(engine) != 0) {
        fprintf(stderr, "offline_inference: %s\n", di_last_error());
        di_engine_destroy(engine);
        di_tokenizer_free(tok);
        return 1;
    }
    printf("\nGenerated Outputs:\n------------------------------------------------------------\n");
    for (size_t i = 0; i < N_PROMPTS; i++) {
        DiRequestOutput out;
        di_engine_get_output(engine, ids[i], &out);
        printf("Prompt:    \"%s\"\nOutput:    \"%s\"  (%d tokens, %s, seed %llu)\n", prompts[i], out.text,
               out.n_tokens, di_finish_reason_name(out.finish_reason), (unsigned long long)out.seed);
        printf("------------------------------------------------------------\n");
        di_engine_release(engine, ids[i]);
    }
    DiEngineMetrics m;
    di_engine_get_metrics(engine, &m);
    printf("steps %llu, prefill tokens %llu, decode tokens %llu, state pages peak %zu of %zu (%zu bytes each)\n",
           (unsigned long long)m.steps, (unsigned long long)m.prefill_tokens, (unsigned long long)m.decode_tokens,
           m.pages_peak, m.pages_total, m.page_bytes);
    di_engine_destroy(engine);
    di_tokenizer_free(tok); /* after the engine: its hooks use the tokenizer */
    return 0;
}
