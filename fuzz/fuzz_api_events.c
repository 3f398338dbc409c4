/* fuzz_api_events.c — libFuzzer target of the output encoders (recipe/api_stream.h): an
 * arbitrary sequence of output events (kinds, texts with any bytes, token counts, finish
 * reasons) for each protocol, streaming and not.  Events out of order must be refused with
 * an error, never crash; the complete response must always build. */
#include "recipe/api_request.h"
#include "recipe/api_stream.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static const char *const k_bodies[] = {
    "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
    "{\"model\":\"m\",\"stream\":true,\"prompt\":\"x\"}",
    "{\"model\":\"m\",\"stream\":true,\"input\":\"x\"}",
    "{\"model\":\"m\",\"stream\":true,\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    DiApiProtocol protocol = (DiApiProtocol)(data[0] % 4);
    bool streaming = data[1] & 1;
    DiApiRequest req;
    if (di_api_request_parse(protocol, k_bodies[protocol], strlen(k_bodies[protocol]), &req, NULL) != 0)
        __builtin_trap();
    DiApiStream *s = di_api_stream_create(&req, "fuzz", 0);
    DiApiBuf sse = {0};
    size_t i = 2;
    while (i + 3 <= size) {
        DiApiEvent ev = {.kind = (DiApiEventKind)(data[i] % 6), .tokens = data[i + 1] % 4};
        size_t len = data[i + 2] % 16;
        i += 3;
        if (len > size - i) len = size - i;
        ev.text = (const char *)data + i;
        ev.len = len;
        i += len;
        ev.finish = (DiApiFinish)(data[i - 1 - (len ? 0 : 0)] % 5);
        ev.prompt_tokens = 8;
        ev.cache_hit_tokens = data[i - 1] % 9;
        if (di_api_stream_event(s, &ev, streaming ? &sse : NULL) != 0) continue;
    }
    json_t *resp = di_api_stream_response(s);
    json_decref(resp);
    di_api_buf_free(&sse);
    di_api_stream_free(s);
    di_api_request_free(&req);
    return 0;
}
