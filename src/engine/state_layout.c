/* state_layout.c — packing state components into pages (see state_layout.h). */
#include "engine/state_layout.h"

#include "base/error.h"

#include <stdbool.h>
#include <string.h>

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

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
        /* advance over its rows: the first page holds (page_bytes - offset) / row rows */
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

/* The largest block of positions (a multiple of every tokens_per_row) whose rows fit one page. */
static int place_growing(DiStateLayout *l) {
    int64_t unit = 1; /* lcm of tokens_per_row */
    bool any = false;
    for (int i = 0; i < l->n_components; i++) {
        int64_t t = l->comp[i].tokens_per_row;
        if (t == 0) continue;
        any = true;
        unit = unit / gcd64(unit, t) * t;
    }
    if (!any) return 0;
    size_t unit_bytes = 0; /* bytes of all growing rows for `unit` positions */
    for (int i = 0; i < l->n_components; i++) {
        const DiStateComponent *c = &l->comp[i];
        if (c->tokens_per_row == 0) continue;
        unit_bytes += (size_t)(unit / c->tokens_per_row) * c->row_bytes;
        l->bytes_per_token += (double)c->row_bytes / c->tokens_per_row;
    }
    if (unit_bytes > l->page_bytes)
        return di_errorf("state layout: the growing rows of %lld positions (%zu bytes) do not fit a %zu-byte page",
                         (long long)unit, unit_bytes, l->page_bytes);
    l->block_tokens = unit * (int64_t)(l->page_bytes / unit_bytes);
    size_t offset = 0;
    for (int i = 0; i < l->n_components; i++) {
        const DiStateComponent *c = &l->comp[i];
        if (c->tokens_per_row == 0) continue;
        l->block_offset[i] = offset;
        offset += (size_t)(l->block_tokens / c->tokens_per_row) * c->row_bytes;
    }
    return 0;
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
    }
    place_fixed(l);
    return place_growing(l);
}

size_t di_state_layout_pages(const DiStateLayout *l, int64_t n_tokens) {
    if (n_tokens <= 0 || l->block_tokens == 0) return l->fixed_pages;
    return l->fixed_pages + (size_t)((n_tokens + l->block_tokens - 1) / l->block_tokens);
}

uint8_t *di_state_row(const DiStateLayout *l, uint8_t *const *pages, size_t n_pages, int component, int64_t row) {
    if (component < 0 || component >= l->n_components || row < 0) return NULL;
    const DiStateComponent *c = &l->comp[component];
    size_t page, offset;
    if (c->fixed_rows > 0) {
        if (row >= c->fixed_rows) return NULL;
        size_t first_fit = (l->page_bytes - l->fixed_first_offset[component]) / c->row_bytes;
        if ((size_t)row < first_fit) {
            page = l->fixed_first_page[component];
            offset = l->fixed_first_offset[component] + (size_t)row * c->row_bytes;
        } else {
            size_t per_page = l->page_bytes / c->row_bytes, rest = (size_t)row - first_fit;
            page = l->fixed_first_page[component] + 1 + rest / per_page;
            offset = rest % per_page * c->row_bytes;
        }
    } else {
        int64_t rows_per_block = l->block_tokens / c->tokens_per_row;
        page = l->fixed_pages + (size_t)(row / rows_per_block);
        offset = l->block_offset[component] + (size_t)(row % rows_per_block) * c->row_bytes;
    }
    return page < n_pages ? pages[page] + offset : NULL;
}
