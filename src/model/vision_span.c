/* vision_span.c — an image's span in the token sequence (vision-v41.md §7.1-§7.2, vit.h): the
 * token types of its positions and the rows that replace their token embeddings (the learned
 * delimiters and the aligner rows in row-major cell order). */
#include "model/vit.h"

#include "base/error.h"

#include <string.h>

int64_t vit_span_len(int64_t gh, int64_t gw) {
    if (gh < 1 || gw < 1 || gh > (1 << 20) || gw > (1 << 20)) return -1;
    return gh * (gw + 1) + 2;
}

int vit_span(const VisionModel *vm, const float *embeds, int64_t gh, int64_t gw, int32_t *types, float *rows) {
    int64_t len = vit_span_len(gh, gw);
    if (!types || len < 0 || (rows && (!vm || !embeds))) return di_errorf("image span: invalid arguments (%lld x %lld grid)", (long long)gh, (long long)gw);
    int64_t D = rows ? vm->d.text_dim : 0, p = 0, s = 0;
    size_t bytes = (size_t)D * sizeof(float);
    types[p] = VIT_TYPE_START;
    if (rows) memcpy(rows + p * D, vm->image_start, bytes);
    p++;
    for (int64_t a = 0; a < gh; a++) {
        for (int64_t b = 0; b < gw; b++, p++, s++) {
            types[p] = VIT_TYPE_IMAGE;
            if (rows) memcpy(rows + p * D, embeds + s * D, bytes);
        }
        types[p] = VIT_TYPE_NEWLINE;
        if (rows) memcpy(rows + p * D, vm->image_newline, bytes);
        p++;
    }
    types[p] = VIT_TYPE_END;
    if (rows) memcpy(rows + p * D, vm->image_end, bytes);
    return 0;
}
