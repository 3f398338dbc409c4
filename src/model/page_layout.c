/* page_layout.c — packing state components into pages (see page_layout.h). */
#include "model/page_layout.h"

#include "base/error.h"

#include <stdbool.h>
#include <string.h>

static int check_component(const DiStateComponent *c, int i, size_t page_bytes) {
    const char *name = c->name ? c->name : "(unnamed)";
    if (c->row_bytes == 0 || c->row_bytes > page_bytes)
        return di_errorf("state layout: component %d (%s): row of %zu bytes must be in [1, page size %zu]", i, name,
                         c->row_bytes, page_bytes);
    if ((c->fixed_rows > 0) == (c->tokens_per_row > 0) || c->fixed_rows < 0 || c->tokens_per_row < 0)
        return di_errorf("state layout: component %d (%s): give either fixed_rows > 0 or tokens_per_row > 0", i,
                         name);
    return 0;
}

/* Pack fixed rows page after page; no row straddles a page boundary. */
static void place_fixed(DiStateLayout *l) {
    size_t page = 0, offset = 0;
    for (int i = 0; i < l->n_components; i++) {
        const DiStateComponent *c = &l->comp[i];
        if (c->fixed_rows == 0) continue;
        if (offset + c->row_bytes > l->page_bytes) page++, offset = 0;
        l->fixed_first_page[i] = page;
        l->fixed_first_offset[i] = offset;
        l->fixed_bytes += (size_t)c->fixed_rows * c->row_bytes;
        int64_t rows = c->fixed_rows;
        size_t first_fit = (l->page_bytes - offset) / c->row_bytes;
        if ((int64_t)first_fit >= rows) {
            offset += (size_t)rows * c->row_bytes;
            continue;
        }
        rows -= (int64_t)first_fit;
        size_t per_page = l->page_bytes / c->row_bytes;
        page += 1 + (size_t)((rows - 1) / (int64_t)per_page);
        offset = (size_t)((rows - 1) % (int64_t)per_page + 1) * c->row_bytes;
    }
    l->fixed_pages = offset > 0 || page > 0 ? page + (offset > 0) : 0;
}

int di_state_layout_init(DiStateLayout *l, size_t page_bytes, const DiStateComponent *components, int n) {
    if (!l || !components || n <= 0 || n > DI_STATE_MAX_COMPONENTS)
        return di_errorf("state layout: need 1..%d components, got %d", DI_STATE_MAX_COMPONENTS, n);
    if (page_bytes == 0) return di_errorf("state layout: page size must be positive");
    memset(l, 0, sizeof *l);
    l->page_bytes = page_bytes;
    l->n_components = n;
    for (int i = 0; i < n; i++) {
        if (check_component(&components[i], i, page_bytes) != 0) return -1;
        l->comp[i] = components[i];
        if (components[i].tokens_per_row > 0) {
            l->rows_per_page[i] = (int64_t)(page_bytes / components[i].row_bytes);
            l->bytes_per_token += (double)components[i].row_bytes / components[i].tokens_per_row;
        }
    }
    place_fixed(l);
    return 0;
}

size_t di_state_layout_pages(const DiStateLayout *l, int64_t n_tokens) {
    size_t pages = l->fixed_pages;
    for (int i = 0; i < l->n_components && n_tokens > 0; i++) {
        int64_t t = l->comp[i].tokens_per_row, E = l->rows_per_page[i];
        if (t > 0) pages += (size_t)((n_tokens / t + E - 1) / E);
    }
    return pages;
}

/* Chunks c >= 0 of a component (t positions per row, E rows per page) whose threshold (cE + 1) t
 * is < T, or <= T when inclusive: (cE + 1) t < T <=> cE + 1 <= ceil(T/t) - 1, and
 * (cE + 1) t <= T <=> cE + 1 <= floor(T/t). */
static int64_t chunks_before(int64_t T, int64_t t, int64_t E, bool inclusive) {
    int64_t lim = inclusive ? T / t : (T + t - 1) / t - 1;
    return lim >= 1 ? (lim - 1) / E + 1 : 0;
}

/* Page of row g of growing component k: its chunk c = g / E, ordered by (T(k, c), k). */
static size_t growing_page(const DiStateLayout *l, int k, int64_t g) {
    int64_t E = l->rows_per_page[k], c = g / E, T = (c * E + 1) * l->comp[k].tokens_per_row;
    size_t page = l->fixed_pages + (size_t)c;
    for (int j = 0; j < l->n_components; j++)
        if (j != k && l->comp[j].tokens_per_row > 0)
            page += (size_t)chunks_before(T, l->comp[j].tokens_per_row, l->rows_per_page[j], j < k);
    return page;
}

int di_state_row_place(const DiStateLayout *l, int component, int64_t row, size_t *page, size_t *offset) {
    if (!l || component < 0 || component >= l->n_components || row < 0) return -1;
    const DiStateComponent *c = &l->comp[component];
    if (c->tokens_per_row > 0) {
        *page = growing_page(l, component, row);
        *offset = (size_t)(row % l->rows_per_page[component]) * c->row_bytes;
        return 0;
    }
    if (row >= c->fixed_rows) return -1;
    size_t first_fit = (l->page_bytes - l->fixed_first_offset[component]) / c->row_bytes;
    if ((size_t)row < first_fit) {
        *page = l->fixed_first_page[component];
        *offset = l->fixed_first_offset[component] + (size_t)row * c->row_bytes;
    } else {
        size_t per_page = l->page_bytes / c->row_bytes, rest = (size_t)row - first_fit;
        *page = l->fixed_first_page[component] + 1 + rest / per_page;
        *offset = rest % per_page * c->row_bytes;
    }
    return 0;
}

uint8_t *di_state_row(const DiStateLayout *l, uint8_t *const *pages, size_t n_pages, int component, int64_t row) {
    size_t page, offset;
    if (di_state_row_place(l, component, row, &page, &offset) != 0 || page >= n_pages) return NULL;
    return pages[page] + offset;
}
