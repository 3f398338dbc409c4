/* gw_load.c — parsing a worker's /internal/load answer (see gw_load.h). */
#include "gateway/gw_load.h"

#include "base/error.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A count; an optional one may be missing or null (0).  Counts are at most DI_GW_LOAD_MAX_COUNT,
 * so the pool's sums of a few of them (running + queued + pending + rooms_waiting) cannot
 * overflow whatever a worker sends. */
static int get_count(json_t *obj, const char *key, bool required, int64_t *out) {
    json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v || (!required && json_is_null(v))) return required ? di_errorf("load: missing '%s'", key) : 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > DI_GW_LOAD_MAX_COUNT)
        return di_errorf("load: '%s' must be an integer in [0, 2^48]", key);
    *out = json_integer_value(v);
    return 0;
}

static int get_seconds(json_t *obj, const char *key, bool required, double *out) {
    json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v) return required ? di_errorf("load: missing '%s'", key) : 0;
    double s = json_number_value(v);
    if (!json_is_number(v) || !isfinite(s) || s < 0) return di_errorf("load: '%s' must be seconds >= 0", key);
    *out = s;
    return 0;
}

/* A string field into buf; a missing or null one (when allowed) is "". */
static int get_string(json_t *obj, const char *key, bool nullable, char *buf, size_t size) {
    json_t *v = json_object_get(obj, key);
    buf[0] = 0;
    if ((!v || json_is_null(v)) && nullable) return 0;
    if (!json_is_string(v)) return di_errorf("load: '%s' must be a string", key);
    if (json_string_length(v) >= size) return di_errorf("load: '%s' is longer than %zu bytes", key, size - 1);
    memcpy(buf, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int parse_samples(json_t *obj, DiGwLoad *out) {
    if (get_count(obj, "prefill_samples_total", false, &out->samples_total) != 0) return -1;
    json_t *arr = json_object_get(obj, "prefill_samples");
    if (!arr) return 0;
    if (!json_is_array(arr)) return di_errorf("load: 'prefill_samples' must be an array");
    size_t n = json_array_size(arr), first = n > DI_GW_LOAD_SAMPLES ? n - DI_GW_LOAD_SAMPLES : 0;
    for (size_t i = first; i < n; i++) {
        json_t *s = json_array_get(arr, i), *q = json_array_get(s, 0), *c = json_array_get(s, 1), *t = json_array_get(s, 2);
        double secs = json_number_value(t);
        if (!json_is_array(s) || json_array_size(s) != 3 || !json_is_integer(q) || !json_is_integer(c) ||
            json_integer_value(q) <= 0 || json_integer_value(c) < 0 || json_integer_value(q) > DI_GW_LOAD_MAX_COUNT ||
            json_integer_value(c) > DI_GW_LOAD_MAX_COUNT || !json_is_number(t) || !isfinite(secs) || secs <= 0)
            return di_errorf("load: prefill_samples[%zu] must be [0 < q <= 2^48, 0 <= c <= 2^48, seconds > 0]", i);
        out->sample_q[out->n_samples] = json_integer_value(q);
        out->sample_c[out->n_samples] = json_integer_value(c);
        out->sample_s[out->n_samples] = secs;
        out->n_samples++;
    }
    if ((int64_t)out->n_samples > out->samples_total)
        return di_errorf("load: %d prefill samples but prefill_samples_total %lld", out->n_samples,
                         (long long)out->samples_total);
    return 0;
}

/* n lowercase or uppercase hex digits (n <= 16) into *out; -1 when s is not exactly that. */
static int parse_hex64(const char *s, size_t n, uint64_t *out) {
    *out = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        *out = *out << 4 | (uint64_t)d;
    }
    return s[n] ? -1 : 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* kv_identity (32 hex digits or null) and prefix_keys (16 hex digits each; beyond
 * DI_GW_LOAD_PREFIX_KEYS the first, hottest, are kept). */
static int parse_prefix(json_t *obj, DiGwLoad *out) {
    char hex[40];
    if (get_string(obj, "kv_identity", true, hex, sizeof hex) != 0) return -1;
    if (hex[0]) {
        if (strlen(hex) != 32 || parse_hex64(hex + 16, 16, &out->identity_lo) != 0) /* di_kv_key_hex: hi first */
            return di_errorf("load: 'kv_identity' must be 32 hex digits");
        hex[16] = 0;
        if (parse_hex64(hex, 16, &out->identity_hi) != 0) return di_errorf("load: 'kv_identity' must be 32 hex digits");
        out->has_identity = true;
    }
    json_t *arr = json_object_get(obj, "prefix_keys");
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr)) return di_errorf("load: 'prefix_keys' must be an array");
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n && out->n_prefix_keys < DI_GW_LOAD_PREFIX_KEYS; i++) {
        json_t *k = json_array_get(arr, i);
        if (!json_is_string(k) || json_string_length(k) != 16 ||
            parse_hex64(json_string_value(k), 16, &out->prefix_keys[out->n_prefix_keys]) != 0)
            return di_errorf("load: prefix_keys[%zu] must be 16 hex digits", i);
        out->n_prefix_keys++;
    }
    qsort(out->prefix_keys, (size_t)out->n_prefix_keys, sizeof out->prefix_keys[0], cmp_u64);
    return 0;
}

bool di_gw_load_has_key(const DiGwLoad *l, uint64_t key_lo) {
    return l && l->n_prefix_keys > 0 &&
           bsearch(&key_lo, l->prefix_keys, (size_t)l->n_prefix_keys, sizeof key_lo, cmp_u64) != NULL;
}

int di_gw_load_parse(const char *data, size_t len, DiGwLoad *out) {
    if (!out || (!data && len)) return di_errorf("load: NULL argument");
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *obj = json_loadb(data ? data : "", len, 0, &jerr);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return di_errorf("load: expected a JSON object (%s)", obj ? "got another value" : jerr.text);
    }
    int rc = get_string(obj, "role", false, out->role, sizeof out->role);
    if (rc == 0 && strcmp(out->role, "prefill") && strcmp(out->role, "decode") && strcmp(out->role, "both"))
        rc = di_errorf("load: unknown role '%s'", out->role);
    if (rc == 0) rc = get_string(obj, "model", false, out->model, sizeof out->model);
    if (rc == 0) rc = get_string(obj, "transfer", true, out->transfer, sizeof out->transfer);
    if (rc == 0) rc = get_count(obj, "queued", true, &out->queued);
    if (rc == 0) rc = get_count(obj, "running", true, &out->running);
    if (rc == 0) rc = get_count(obj, "kv_tokens", true, &out->kv_tokens);
    if (rc == 0) rc = get_count(obj, "rooms_waiting", false, &out->rooms_waiting);
    if (rc == 0) rc = get_count(obj, "steps", false, &out->steps);
    if (rc == 0) rc = get_count(obj, "prefill_tokens", false, &out->prefill_tokens);
    if (rc == 0) rc = get_count(obj, "decode_tokens", false, &out->decode_tokens);
    if (rc == 0) rc = get_count(obj, "block_tokens", false, &out->block_tokens);
    if (rc == 0) rc = get_seconds(obj, "step_seconds", false, &out->step_seconds);
    if (rc == 0) rc = get_seconds(obj, "prefill_seconds", false, &out->prefill_seconds);
    if (rc == 0) rc = parse_samples(obj, out);
    if (rc == 0) rc = parse_prefix(obj, out);
    json_decref(obj);
    return rc;
}
