/* page_layout.c — packing state components into pages (see page_layout.h). */
#include "model/page_layout.h"

#include "base/error.h"

#include <stdint.h>
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
        l->fixed_first_fit[i] = (int64_t)first_fit;
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
        l->rows_per_page[i] = (int64_t)(page_bytes / components[i].row_bytes);
        if (components[i].tokens_per_row > 0) {
            l->growing[l->n_growing++] = i;
            l->bytes_per_token += (double)components[i].row_bytes / components[i].tokens_per_row;
        }
    }
    place_fixed(l);
    return 0;
}

/* Pages come in (T, component) order, and a component's chunks in chunk order, so the first page
 * that is not complete is the earliest, over the growing components, of each one's first
 * incomplete chunk; every page before it is complete. */
size_t di_state_layout_final_pages(const DiStateLayout *l, int64_t n_tokens) {
    size_t first_open = SIZE_MAX;
    for (int i = 0; i < l->n_growing; i++) {
        int c = l->growing[i];
        int64_t E = l->rows_per_page[c], full = n_tokens > 0 ? n_tokens / l->comp[c].tokens_per_row / E : 0;
        size_t page, offset;
        if (di_state_row_place(l, c, full * E, &page, &offset) == 0 && page < first_open) first_open = page;
    }
    return first_open == SIZE_MAX ? l->fixed_pages : first_open;
}

size_t di_state_layout_pages(const DiStateLayout *l, int64_t n_tokens) {
    size_t pages = l->fixed_pages;
    for (int i = 0; i < l->n_growing && n_tokens > 0; i++) {
        int64_t t = l->comp[l->growing[i]].tokens_per_row, E = l->rows_per_page[l->growing[i]];
        pages += (size_t)((n_tokens / t + E - 1) / E);
    }
    return pages;
}
