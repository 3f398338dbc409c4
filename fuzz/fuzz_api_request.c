/* fuzz_api_request.c — libFuzzer target of the protocol request parsers
 * (recipe/api_request.h).  The first byte picks the protocol, the rest is the HTTP body.
 * An accepted request is also run through its encoder (a short output) so that whatever the
 * parser lets through is something the rest of the server can carry. */
#include "recipe/api_request.h"
#include "recipe/api_stream.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    DiApiProtocol protocol = (DiApiProtocol)(data[0] % 4);
    DiApiRequest req;
    int status = 0;
    if (di_api_request_parse(protocol, (const char *)data + 1, size - 1, &req, &status) != 0) {
        if (status < 400 || status > 499) __builtin_trap(); /* a rejection is always a 4xx */
        return 0;
    }
    (void)di_api_resolve_max_tokens(&req, 100, 4096);
    (void)di_api_last_user_text(&req);
    DiApiStream *s = di_api_stream_create(&req, "fuzz", 0);
    DiApiBuf sse = {0};
    DiApiEvent evs[] = {
        {.kind = DI_API_EV_READY, .prompt_tokens = 10, .cache_hit_tokens = 2},
        {.kind = DI_API_EV_REASONING, .text = "r", .len = 1, .tokens = 1},
        {.kind = DI_API_EV_CONTENT, .text = "c", .len = 1, .tokens = 1},
        {.kind = DI_API_EV_TOOL_BEGIN, .text = "f", .len = 1},
        {.kind = DI_API_EV_TOOL_ARGS, .text = "{}", .len = 2, .tokens = 1},
        {.kind = DI_API_EV_FINISH, .finish = DI_API_FINISH_STOP},
    };
    for (size_t i = 0; s && i < sizeof evs / sizeof evs[0]; i++)
        if (di_api_stream_event(s, &evs[i], req.stream ? &sse : NULL) != 0) __builtin_trap();
    json_t *resp = s ? di_api_stream_response(s) : NULL;
    if (s && !resp) __builtin_trap();
    json_decref(resp);
    di_api_buf_free(&sse);
    di_api_stream_free(s);
    di_api_request_free(&req);
    return 0;
}
