/* key_map.c — open-addressing map of block keys (see key_map.h). */
#include "engine/kvcache/key_map.h"

#include "base/error.h"
#include "base/mem.h"

#include <stdlib.h>

int di_kv_map_init(DiKvMap *m, size_t expected) {
    if (!m) return di_errorf("kv map: no map");
    size_t n = 16;
    while (n < 2 * expected) n *= 2;
    m->slots = di_calloc(n, sizeof *m->slots, "kv block index");
    if (!m->slots) return -1;
    m->mask = n - 1;
    m->size = 0;
    return 0;
}

void di_kv_map_free(DiKvMap *m) {
    if (!m) return;
    free(m->slots);
    m->slots = NULL;
    m->mask = m->size = 0;
}

static size_t home(const DiKvMap *m, DiKvKey k) { return (size_t)k.lo & m->mask; }

int di_kv_map_get(const DiKvMap *m, DiKvKey key, uint32_t *value) {
    if (!m || !m->slots) return 0;
    for (size_t s = home(m, key);; s = (s + 1) & m->mask) {
        if (!m->slots[s].used) return 0;
        if (di_kv_key_eq(m->slots[s].key, key)) {
            if (value) *value = m->slots[s].value;
            return 1;
        }
    }
}

static void place(DiKvMap *m, DiKvKey key, uint32_t value) {
    size_t s = home(m, key);
    while (m->slots[s].used) s = (s + 1) & m->mask;
    m->slots[s] = (DiKvMapSlot){key, value, 1};
    m->size++;
}

static int grow(DiKvMap *m) {
    size_t old_n = m->mask + 1;
    DiKvMapSlot *old = m->slots;
    m->slots = di_calloc(old_n * 2, sizeof *m->slots, "kv block index");
    if (!m->slots) {
        m->slots = old;
        return -1;
    }
    m->mask = old_n * 2 - 1;
    m->size = 0;
    for (size_t i = 0; i < old_n; i++)
        if (old[i].used) place(m, old[i].key, old[i].value);
    free(old);
    return 0;
}

int di_kv_map_put(DiKvMap *m, DiKvKey key, uint32_t value) {
    if (!m || !m->slots) return di_errorf("kv map: not initialised");
    for (size_t s = home(m, key); m->slots[s].used; s = (s + 1) & m->mask)
        if (di_kv_key_eq(m->slots[s].key, key)) {
            m->slots[s].value = value;
            return 0;
        }
    if (2 * (m->size + 1) > m->mask + 1 && grow(m) != 0) return -1;
    place(m, key, value);
    return 0;
}

int di_kv_map_remove(DiKvMap *m, DiKvKey key) {
    if (!m || !m->slots) return 0;
    size_t s = home(m, key);
    for (;; s = (s + 1) & m->mask) {
        if (!m->slots[s].used) return 0;
        if (di_kv_key_eq(m->slots[s].key, key)) break;
    }
    size_t hole = s;
    for (size_t j = (hole + 1) & m->mask; m->slots[j].used; j = (j + 1) & m->mask) {
        size_t h = home(m, m->slots[j].key);
        /* j may move into the hole unless its home lies cyclically in (hole, j] */
        int stays = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
        if (!stays) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].used = 0;
    m->size--;
    return 1;
}
