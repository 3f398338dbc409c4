/* config_engram.c — the config-level name for the Engram hash multipliers of model-v41.md §5.2 (d).
 *
 * The multipliers depend only on config values (layer id, engram_compressed_vocab_size), so the
 * config computes them at load (a make-tiny model ships no table).  The numpy generator they come
 * from is re-stated once, in engram_rng.c; this file only checks arguments and delegates. */
#include "model/config.h"

#include "base/error.h"
#include "model/engram_rng.h"

#include <limits.h>
#include <stdint.h>

int di_engram_hash_multipliers(int64_t layer_id, int64_t compressed_vocab, int64_t n, int64_t *out) {
    if (!out || n <= 0 || n > INT_MAX || layer_id < 0 || compressed_vocab <= 0)
        return di_errorf("engram multipliers: invalid arguments (layer %lld, vocab %lld, n %lld)", (long long)layer_id,
                         (long long)compressed_vocab, (long long)n);
    return engram_multipliers(layer_id, compressed_vocab, (int)n, out);
}
