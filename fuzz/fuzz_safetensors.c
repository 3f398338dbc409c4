/* fuzz_safetensors.c — libFuzzer target for the safetensors header parser (safetensors.h): any
 * byte string must either parse into tensors whose spans lie inside the input, or fail with an
 * error message; never crash, hang or read out of bounds.  Run: make fuzz &&
 * build-fuzz/fuzz_safetensors -max_total_time=60 */
#include "base/error.h"
#include "model/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    DiSafetensors st;
    if (di_safetensors_parse(data, size, "fuzz", &st) == 0) {
        for (size_t i = 0; i < st.n_tensors; i++) {
            const DiTensorInfo *t = &st.tensors[i];
            /* the checks promise every span is inside the buffer: touch its first and last byte */
            if (t->nbytes) {
                volatile uint8_t first = ((const uint8_t *)t->data)[0];
                volatile uint8_t last = ((const uint8_t *)t->data)[t->nbytes - 1];
                (void)first;
                (void)last;
            }
            if (t->offset + t->nbytes > size) abort();
            if (di_safetensors_find(&st, t->name) != t) abort();
        }
        di_safetensors_close(&st);
    } else if (!di_error_message()[0]) {
        abort(); /* a failure must say why */
    }
    return 0;
}
