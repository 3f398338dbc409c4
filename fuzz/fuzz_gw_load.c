/* fuzz_gw_load.c — libFuzzer target for the gateway's parser of a worker's /internal/load
 * answer (src/gateway/gw_load.h): any byte string gives a checked load or a clean error. */
#include "gateway/gw_load.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DiGwLoad load;
    if (di_gw_load_parse((const char *)data, size, &load) == 0 && load.n_samples > DI_GW_LOAD_SAMPLES) abort();
    return 0;
}
