/* state_layout.h — where each piece of a request's model state lives in its pages.
 *
 * A model's per-request state is a set of components, each a table of equal-size rows
 * (model-v41.md §6.1):
 *   - fixed components have a fixed number of rows whatever the context length: a layer's
 *     sliding-window KV ring (128 rows), the compressor's pending row, the Engram history;
 *   - growing components get one row every `tokens_per_row` positions: compressed KV rows and
 *     index keys (one per 2 tokens at the m = 2 KV sources, one per token at m = 1).
 * The layout packs fixed rows into the first pages and, after them, one page per block of
 * `block_tokens` positions holding the rows of every growing component for those positions.  A
 * row never straddles two pages, so a runner addresses any row with one page lookup and a long
 * context needs no contiguous memory.  pages_for_tokens is then exact: fixed pages + one page per
 * started block.  The runner of a model builds its layout once and uses di_state_row. */
#ifndef DI_ENGINE_STATE_LAYOUT_H
#define DI_ENGINE_STATE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define DI_STATE_MAX_COMPONENTS 128

typedef struct {
    const char *name;
    size_t row_bytes;     /* > 0, <= page size */
    int64_t fixed_rows;   /* > 0 for a fixed component, else 0 */
    int tokens_per_row;   /* > 0 for a growing component, else 0 */
} DiStateComponent;

typedef struct {
    size_t page_bytes;
    int n_components;
    DiStateComponent comp[DI_STATE_MAX_COMPONENTS];
    /* fixed components: first page and rows per page (rows are packed page by page) */
    size_t fixed_first_page[DI_STATE_MAX_COMPONENTS];
    size_t fixed_first_offset[DI_STATE_MAX_COMPONENTS];
    size_t fixed_pages;
    /* growing components: byte offset of the component's rows inside a block page */
    size_t block_offset[DI_STATE_MAX_COMPONENTS];
    int64_t block_tokens; /* positions per block page (a multiple of every tokens_per_row) */
    size_t fixed_bytes;   /* sum of fixed rows' bytes (without padding) */
    double bytes_per_token; /* growing bytes per position (without padding) */
} DiStateLayout;

/* Lay out the components in pages of page_bytes; -1 with an error naming the component that
 * cannot fit (e.g. a row larger than a page, or growing rows that cannot share one page). */
int di_state_layout_init(DiStateLayout *layout, size_t page_bytes, const DiStateComponent *components, int n);

/* Pages a context of n_tokens positions needs (n_tokens >= 0). */
size_t di_state_layout_pages(const DiStateLayout *layout, int64_t n_tokens);

/* Address of row `row` of component `component` inside a request's pages (NULL when out of
 * range: a fixed row >= fixed_rows, or a page index >= n_pages). */
uint8_t *di_state_row(const DiStateLayout *layout, uint8_t *const *pages, size_t n_pages, int component, int64_t row);

#endif
