/* fuzz_render_json.c — libFuzzer target for the conversation JSON reader and the renderers
 * (di_render_json): any input must give a prompt or a clear error, never a crash or leak. */
#include "deepinfer.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *out = NULL;
    if (di_render_json((const char *)data, size, DI_RENDER_WITH_SEGMENTS, &out) == 0) free(out);
    return 0;
}
