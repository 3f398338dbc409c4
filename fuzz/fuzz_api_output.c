/* fuzz_api_output.c — libFuzzer target of raw model text -> parsed output events -> protocol
 * encoders (serve/backend_parse.h + recipe/api_stream.h): any bytes (invalid UTF-8, partial
 * DSML markup, stray </think>, stop sequences) split anywhere, for each protocol with tools and
 * stop sequences, thinking or not.  Every stream must end with exactly one FINISH and the
 * complete response must always build. */
#include "recipe/api_request.h"
#include "recipe/api_stream.h"
#include "serve/backend_parse.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const char *const k_bodies[] = {
    "{\"model\":\"m\",\"stream\":true,\"stop\":[\"END\"],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
    "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
    "{\"model\":\"m\",\"stream\":true,\"prompt\":\"x\",\"stop\":\"END\"}",
    "{\"model\":\"m\",\"stream\":true,\"input\":\"x\",\"reasoning\":{\"effort\":\"none\"},"
    "\"tools\":[{\"type\":\"function\",\"name\":\"f\"},{\"type\":\"custom\",\"name\":\"g\"}]}",
    "{\"model\":\"m\",\"stream\":true,\"max_tokens\":5,\"stop_sequences\":[\"END\"],\"tools\":[{\"name\":\"f\","
    "\"input_schema\":{\"type\":\"object\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
};

typedef struct {
    DiApiStream *stream;
    DiApiBuf *sse;
    int finishes;
} Sink;

static void sink(void *user, const DiApiEvent *ev) {
    Sink *k = user;
    if (di_api_stream_event(k->stream, ev, k->sse) != 0) __builtin_trap(); /* the parser's events are always in order */
    k->finishes += ev->kind == DI_API_EV_FINISH;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    DiApiProtocol protocol = (DiApiProtocol)(data[0] % 4);
    DiApiRequest req;
    if (di_api_request_parse(protocol, k_bodies[protocol], strlen(k_bodies[protocol]), &req, NULL) != 0) __builtin_trap();
    DiApiBuf sse = {0};
    Sink k = {di_api_stream_create(&req, "fuzz", 0), &sse, 0};
    DiOutputEvents *o = di_output_events_new(&req, sink, &k);
    if (!k.stream || !o) __builtin_trap();
    di_output_events_ready(o, 5, 1);
    size_t start = 1;
    for (size_t i = 1; i <= size; i++) /* byte 0x01 splits chunks */
        if (i == size || data[i] == 1) {
            if (di_output_events_text(o, (const char *)data + start, i - start, 1) != 0) break;
            start = i + 1;
        }
    di_output_events_finish(o, data[0] & 4 ? DI_API_FINISH_LENGTH : DI_API_FINISH_STOP, NULL, NULL, 0);
    if (k.finishes != 1) __builtin_trap();
    json_t *resp = di_api_stream_response(k.stream);
    if (!resp) __builtin_trap();
    json_decref(resp);
    di_output_events_free(o);
    di_api_buf_free(&sse);
    di_api_stream_free(k.stream);
    di_api_request_free(&req);
    return 0;
}
