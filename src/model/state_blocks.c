/* state_blocks.c — a paged state's cacheable rows as blocks of positions (state.h), for the
 * engine's KV block cache (serving.md §4, engine-features.md §2.4-2.5).
 *
 * What a block of B positions [p0, p0 + B) keeps is what a later request cannot rebuild from a
 * short replay: for every KV source slot, in slot order, its entries floor(p0/m) ..
 * floor((p0 + B)/m) - 1, each the compressed-KV row (head_dim floats) then the index-key row
 * (idx_head_dim floats), exactly the bytes of the pages.  B must be a multiple of 128 and of
 * every ratio, so no compressor group straddles two blocks and no pending row is ever cached.
 * The window rings, DSpark rings, pending rows and Engram history are not exported: the bounded
 * replay rebuilds them. */
#include "model/state.h"

#include "base/error.h"

#include <string.h>

/* Ratio of KV source slot k: its entries component's positions per row. */
static int slot_ratio(const StateLayout *l, int k) { return l->pages.comp[l->c_entries0 + k].tokens_per_row; }

static int n_slots(const StateLayout *l) { return l->pages.n_components - l->c_entries0; }

size_t state_block_bytes(const StateLayout *l, int block_tokens) {
    if (!l || block_tokens <= 0 || block_tokens % 128) return 0;
    size_t bytes = 0, entry = (size_t)l->entry_floats * sizeof(float);
    for (int k = 0; k < n_slots(l); k++) {
        int m = slot_ratio(l, k);
        if (m <= 0 || block_tokens % m) return 0;
        bytes += (size_t)(block_tokens / m) * entry;
    }
    return bytes;
}

/* Copy the block's entries between the pages and buf (to_buf: export). */
static int copy_block(const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens,
                      uint8_t *buf, bool to_buf) {
    if (!l || !pages || !buf || state_block_bytes(l, block_tokens) == 0 || first < 0 || first % block_tokens)
        return di_errorf("state block: invalid arguments (first %lld, %d positions)", (long long)first, block_tokens);
    if (state_pages_for_tokens(l, first + block_tokens) > (int64_t)n_pages)
        return di_errorf("state block: %zu pages cannot hold %lld positions", n_pages, (long long)(first + block_tokens));
    size_t entry = (size_t)l->entry_floats * sizeof(float);
    for (int k = 0; k < n_slots(l); k++) {
        int m = slot_ratio(l, k);
        for (int64_t g = first / m; g < (first + block_tokens) / m; g++, buf += entry) {
            uint8_t *row = di_state_row(&l->pages, pages, n_pages, l->c_entries0 + k, g);
            if (!row) return di_errorf("state block: entry %lld of KV source %d outside the pages", (long long)g, k);
            memcpy(to_buf ? buf : row, to_buf ? row : buf, entry);
        }
    }
    return 0;
}

int state_export_block(const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens, void *out) {
    return copy_block(l, pages, n_pages, first, block_tokens, out, true);
}

int state_import_block(const StateLayout *l, uint8_t *const *pages, size_t n_pages, int64_t first, int block_tokens,
                       const void *in) {
    return copy_block(l, pages, n_pages, first, block_tokens, (uint8_t *)(uintptr_t)in, false);
}
