/* engram_map_file.c — the Engram compressed-token map from a JSON file (see engram_map_file.h). */
#include "model/engram_map_file.h"

#include "base/error.h"
#include "base/json.h"
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>

static int read_ids(const json_t *arr, const char *path, int32_t **out, size_t *out_n) {
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n == 0)
        return di_errorf("%s: expected a non-empty JSON array of compressed ids (or an object with \"token_map\")", path);
    int32_t *map = di_malloc(n * sizeof *map, "engram token map");
    if (!map) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            free(map);
            return di_errorf("%s: token_map[%zu] is not a compressed id (a non-negative 32-bit integer)", path, i);
        }
        map[i] = (int32_t)json_integer_value(v);
    }
    *out = map;
    *out_n = n;
    return 0;
}

int model_load_engram_token_map_file(Model *m, const char *path) {
    if (!m || !path) return di_errorf("engram token map: no model or path");
    json_t *root = di_json_load_file(path);
    if (!root) return -1;
    const json_t *arr = root;
    int64_t declared = -1;
    int rc = 0;
    if (json_is_object(root)) {
        json_t *field = NULL;
        rc = di_json_array(root, path, "token_map", true, &field);
        if (rc == 0) rc = di_json_int(root, path, "compressed_vocab_size", false, &declared) < 0 ? -1 : 0;
        arr = field;
    }
    int32_t *map = NULL;
    size_t n = 0;
    if (rc == 0) rc = read_ids(arr, path, &map, &n);
    if (rc == 0 && declared >= 0 && declared != m->d.engram_compressed_vocab)
        rc = di_errorf("%s: compressed_vocab_size %lld, but config engram_compressed_vocab_size is %d", path,
                       (long long)declared, m->d.engram_compressed_vocab);
    if (rc == 0 && n < (size_t)m->d.vocab) rc = di_errorf("%s: %zu entries, the vocabulary has %d", path, n, m->d.vocab);
    if (rc == 0) rc = model_set_engram_token_map(m, map, (int64_t)n);
    free(map);
    json_decref(root);
    return rc;
}
