/* page_layout.h — the one paged-state layout engine: where each row of a request's state lives
 * in fixed-size pages.  The model's state (state.c) and the engine's mock runner both lay out
 * through it; it sits in model/ because that is the lowest layer both reach.
 *
 * A state is a list of components, each a table of equal-size rows (model-v41.md §6.1):
 *   - fixed components have the same number of rows at any context length (window rings, DSpark
 *     rings, compressor pending rows, the Engram history);
 *   - growing components gain one row every `tokens_per_row` positions, so a context of n
 *     positions holds floor(n / tokens_per_row) rows (compressed-KV entries at ratio m).
 * Fixed rows are packed page after page first.  Then each growing component fills its own pages,
 * floor(page / row) rows each; chunk c of component i (its rows cE .. cE+E-1) is first needed at
 * context length T(i, c) = (cE + 1) * tokens_per_row, and chunk pages are ordered by (T, i).  So
 * the pages a context of n positions needs are always a prefix of one fixed order, pages_for(n) is
 * non-decreasing and growing a context only appends pages, whatever the components' ratios.  No
 * row straddles two pages: any row is one page lookup plus an offset. */
#ifndef DI_MODEL_PAGE_LAYOUT_H
#define DI_MODEL_PAGE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define DI_STATE_MAX_COMPONENTS 128

typedef struct {
    const char *name;
    size_t row_bytes;   /* > 0, <= page size */
    int64_t fixed_rows; /* > 0 for a fixed component, else 0 */
    int tokens_per_row; /* > 0 for a growing component, else 0 */
} DiStateComponent;

typedef struct {
    size_t page_bytes;
    int n_components;
    DiStateComponent comp[DI_STATE_MAX_COMPONENTS];
    size_t fixed_first_page[DI_STATE_MAX_COMPONENTS];   /* fixed: page and offset of row 0, */
    size_t fixed_first_offset[DI_STATE_MAX_COMPONENTS];
    int64_t fixed_first_fit[DI_STATE_MAX_COMPONENTS];   /*   rows that fit that first page */
    int64_t rows_per_page[DI_STATE_MAX_COMPONENTS];     /* rows of a whole page (growing: a chunk) */
    int growing[DI_STATE_MAX_COMPONENTS], n_growing;     /* the growing components, in order */
    size_t fixed_pages;
    size_t fixed_bytes;     /* sum of fixed rows' bytes (without padding) */
    double bytes_per_token; /* growing bytes per position (without padding) */
} DiStateLayout;

/* Lay out the components in pages of page_bytes; -1 with an error naming the component that
 * cannot fit (a row larger than a page, neither or both of fixed_rows and tokens_per_row). */
int di_state_layout_init(DiStateLayout *layout, size_t page_bytes, const DiStateComponent *components, int n);

/* Pages a context of n_tokens positions needs (the fixed pages alone for n_tokens <= 0). */
size_t di_state_layout_pages(const DiStateLayout *layout, int64_t n_tokens);

/* The end of the growing pages that a context of n_tokens positions has filled for good: pages
 * [fixed_pages, result) hold only rows of complete chunks, which no later position writes (a
 * growing row is written once, when its positions are all computed), so they may be copied out
 * while the context still grows (PD streaming).  fixed_pages when none is complete. */
size_t di_state_layout_final_pages(const DiStateLayout *layout, int64_t n_tokens);

/* Chunks c >= 0 of a growing component (t positions per row, E rows per page) whose threshold
 * (cE + 1) t is < T, or <= T when inclusive: (cE + 1) t < T <=> cE + 1 <= ceil(T/t) - 1, and
 * (cE + 1) t <= T <=> cE + 1 <= floor(T/t). */
static inline int64_t di_state_chunks_before(int64_t T, int64_t t, int64_t E, int inclusive) {
    int64_t lim = inclusive ? T / t : (T + t - 1) / t - 1;
    return lim >= 1 ? (lim - 1) / E + 1 : 0;
}

/* Page index and byte offset of row `row` of a component; -1 when out of range (a fixed row >=
 * fixed_rows, a negative row or component).  Inline: the forward asks it for every state row it
 * reads, and a growing row's page is its chunk c = row / E after every chunk of the other
 * components with a smaller (T, index). */
static inline int di_state_row_place(const DiStateLayout *l, int component, int64_t row, size_t *page, size_t *offset) {
    if (!l || component < 0 || component >= l->n_components || row < 0) return -1;
    const DiStateComponent *c = &l->comp[component];
    int64_t E = l->rows_per_page[component];
    if (c->tokens_per_row > 0) {
        int64_t chunk = row / E, T = (chunk * E + 1) * c->tokens_per_row;
        size_t pg = l->fixed_pages + (size_t)chunk;
        for (int i = 0; i < l->n_growing; i++) {
            int j = l->growing[i];
            if (j != component)
                pg += (size_t)di_state_chunks_before(T, l->comp[j].tokens_per_row, l->rows_per_page[j], j < component);
        }
        *page = pg;
        *offset = (size_t)(row - chunk * E) * c->row_bytes;
        return 0;
    }
    if (row >= c->fixed_rows) return -1;
    int64_t first_fit = l->fixed_first_fit[component];
    if (row < first_fit) {
        *page = l->fixed_first_page[component];
        *offset = l->fixed_first_offset[component] + (size_t)row * c->row_bytes;
    } else {
        int64_t rest = row - first_fit, q = rest / E;
        *page = l->fixed_first_page[component] + 1 + (size_t)q;
        *offset = (size_t)(rest - q * E) * c->row_bytes;
    }
    return 0;
}

/* Address of a row inside a request's pages (NULL when out of range or page >= n_pages). */
static inline uint8_t *di_state_row(const DiStateLayout *l, uint8_t *const *pages, size_t n_pages, int component,
                                    int64_t row) {
    size_t page, offset;
    if (di_state_row_place(l, component, row, &page, &offset) != 0 || page >= n_pages) return NULL;
    return pages[page] + offset;
}

#endif
