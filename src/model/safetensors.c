/* safetensors.c — the safetensors container: header parsing and the checks that make every
 * DiTensorInfo safe to read (see safetensors.h).  The header is JSON, read with jansson; the data
 * stays in the memory map, but for the tensors a writer left off their element alignment. */
#include "model/safetensors.h"

#include "base/error.h"
#include "base/json.h"
#include "base/log.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[DI_DTYPE_COUNT] = {
    [DI_DTYPE_BOOL] = {"BOOL", 1},       [DI_DTYPE_U8] = {"U8", 1},           [DI_DTYPE_I8] = {"I8", 1},
    [DI_DTYPE_I16] = {"I16", 2},         [DI_DTYPE_U16] = {"U16", 2},         [DI_DTYPE_F16] = {"F16", 2},
    [DI_DTYPE_BF16] = {"BF16", 2},       [DI_DTYPE_I32] = {"I32", 4},         [DI_DTYPE_U32] = {"U32", 4},
    [DI_DTYPE_F32] = {"F32", 4},         [DI_DTYPE_I64] = {"I64", 8},         [DI_DTYPE_U64] = {"U64", 8},
    [DI_DTYPE_F64] = {"F64", 8},         [DI_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [DI_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [DI_DTYPE_F8_E8M0] = {"F8_E8M0", 1},
};

const char *di_dtype_name(DiDType d) { return (d >= 0 && d < DI_DTYPE_COUNT) ? dtype_table[d].name : NULL; }

size_t di_dtype_size(DiDType d) { return (d >= 0 && d < DI_DTYPE_COUNT) ? dtype_table[d].size : 0; }

int di_dtype_parse(const char *name, DiDType *out) {
    if (!name || !out) return di_errorf("di_dtype_parse: no dtype given");
    for (int i = 0; i < DI_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_table[i].name) == 0) {
            *out = (DiDType)i;
            return 0;
        }
    return di_errorf("dtype '%s' is not a safetensors dtype", name);
}

/* ---- one header entry ------------------------------------------------------------------- */

/* Reads dtype, shape and data_offsets of `name` into *t (name and file set by the caller) and
 * checks them against the data section of data_size bytes starting at data_start. */
static int parse_entry(const char *name, const json_t *v, size_t data_start, size_t data_size, DiTensorInfo *t) {
    if (!json_is_object(v)) return di_errorf("tensor '%s': expected an object, got %s", name, di_json_type_name(v));
    const char *dtype;
    if (di_json_string(v, name, "dtype", true, &dtype) < 0) return -1;
    if (di_dtype_parse(dtype, &t->dtype) < 0) return di_error_wrap("tensor '%s'", name);
    json_t *shape, *offs;
    if (di_json_array(v, name, "shape", true, &shape) < 0 || di_json_array(v, name, "data_offsets", true, &offs) < 0)
        return di_error_wrap("tensor '%s'", name);
    size_t nd = json_array_size(shape);
    if (nd > DI_TENSOR_MAX_DIMS)
        return di_errorf("tensor '%s': %zu dimensions (at most %d)", name, nd, DI_TENSOR_MAX_DIMS);
    t->ndim = (int)nd;
    size_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return di_errorf("tensor '%s': shape[%zu] is not a non-negative integer", name, i);
        t->shape[i] = (int64_t)json_integer_value(d);
        if (!di_mul_size(numel, (size_t)t->shape[i], &numel) || numel > ((size_t)1 << 60))
            return di_errorf("tensor '%s': shape has too many elements", name);
    }
    t->numel = (int64_t)numel;
    size_t nbytes;
    if (!di_mul_size(numel, di_dtype_size(t->dtype), &nbytes))
        return di_errorf("tensor '%s': byte size overflows", name);
    if (json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)))
        return di_errorf("tensor '%s': data_offsets must be [begin, end] integers", name);
    json_int_t b = json_integer_value(json_array_get(offs, 0)), e = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || e < b)
        return di_errorf("tensor '%s': data_offsets [%lld, %lld] are not ordered", name, (long long)b, (long long)e);
    if ((uint64_t)e > data_size)
        return di_errorf(
            "tensor '%s': data_offsets [%lld, %lld] end past the data section (%zu bytes; file truncated?)", name,
            (long long)b, (long long)e, data_size);
    if ((size_t)(e - b) != nbytes)
        return di_errorf("tensor '%s': %s shape product %zu x %zu bytes = %zu, but data_offsets span %lld bytes", name,
                         dtype, numel, di_dtype_size(t->dtype), nbytes, (long long)(e - b));
    t->nbytes = nbytes;
    t->offset = data_start + (size_t)b;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const DiTensorInfo *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const DiTensorInfo *)a)->name, ((const DiTensorInfo *)b)->name);
}

/* No two non-empty spans may share a byte (a corrupt or malicious header could alias tensors). */
static int check_overlaps(DiTensorInfo *t, size_t n) {
    qsort(t, n, sizeof *t, cmp_by_offset);
    size_t prev = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (t[i].nbytes == 0) continue;
        if (prev != SIZE_MAX && t[prev].offset + t[prev].nbytes > t[i].offset)
            return di_errorf("tensor '%s': data overlaps tensor '%s'", t[i].name, t[prev].name);
        prev = i;
    }
    return 0;
}

static int check_metadata(const json_t *meta) {
    if (!json_is_object(meta)) return di_errorf("__metadata__: expected an object, got %s", di_json_type_name(meta));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)meta, k, v) {
        if (!json_is_string(v)) return di_errorf("__metadata__.%s: expected a string, got %s", k, di_json_type_name(v));
    }
    return 0;
}

/* A tensor the kernels could not read in place: multi-byte elements at an address that is not a
 * multiple of their size. */
static bool misaligned(const DiTensorInfo *t) {
    size_t elem = di_dtype_size(t->dtype);
    return t->nbytes > 0 && elem > 1 && (uintptr_t)t->data % elem != 0;
}

/* Copies every misaligned tensor into one buffer (each copy at a multiple of 8 bytes, the largest
 * element) and points it there; the rest stay where they are. */
static int align_tensors(DiSafetensors *st) {
    size_t total = 0;
    for (size_t i = 0; i < st->n_tensors; i++)
        if (misaligned(&st->tensors[i])) total += (st->tensors[i].nbytes + 7) / 8 * 8;
    if (total == 0) return 0;
    uint8_t *buf = di_malloc(total, "aligned tensor copies"); /* malloc: aligned for any element */
    if (!buf) return -1;
    size_t pos = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        DiTensorInfo *t = &st->tensors[i];
        if (!misaligned(t)) continue;
        memcpy(buf + pos, t->data, t->nbytes);
        t->data = buf + pos;
        pos += (t->nbytes + 7) / 8 * 8;
        st->n_copied++;
        st->copied_bytes += t->nbytes;
    }
    st->copies = buf;
    return 0;
}

/* ---- the whole file ---------------------------------------------------------------------- */

static int parse_header(const uint8_t *data, size_t size, const char *what, DiSafetensors *out) {
    if (size < 8) return di_errorf("file of %zu bytes is too short for the 8-byte header length", size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | data[i]; /* little-endian */
    if (n > DI_SAFETENSORS_MAX_HEADER)
        return di_errorf("header length %llu is larger than the %llu-byte limit", (unsigned long long)n,
                         (unsigned long long)DI_SAFETENSORS_MAX_HEADER);
    if (n > size - 8)
        return di_errorf("header length %llu runs past the end of the file (%zu bytes; truncated?)",
                         (unsigned long long)n, size);
    if (n < 2) return di_errorf("header length %llu is too short for a JSON object", (unsigned long long)n);
    out->header_len = (size_t)n;
    json_t *root = di_json_load_buffer((const char *)data + 8, (size_t)n, "header");
    if (!root) return -1;
    int rc = -1;
    if (!json_is_object(root)) {
        di_errorf("header: expected a JSON object, got %s", di_json_type_name(root));
        goto done;
    }
    size_t count = json_object_size(root), names_len = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) names_len += strlen(key) + 1;
    out->tensors = di_calloc(count ? count : 1, sizeof *out->tensors, "tensor table");
    out->names = di_malloc(names_len ? names_len : 1, "tensor names");
    if (!out->tensors || !out->names) goto done;
    size_t data_start = 8 + (size_t)n, data_size = size - data_start, pos = 0;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (check_metadata(val) < 0) goto done;
            continue;
        }
        if (!*key) {
            di_errorf("a tensor has an empty name");
            goto done;
        }
        DiTensorInfo *t = &out->tensors[out->n_tensors];
        size_t len = strlen(key) + 1;
        memcpy(out->names + pos, key, len);
        t->name = out->names + pos;
        pos += len;
        t->file = what;
        if (parse_entry(key, val, data_start, data_size, t) < 0) goto done;
        t->data = data + t->offset;
        out->n_tensors++;
    }
    if (check_overlaps(out->tensors, out->n_tensors) < 0 || align_tensors(out) < 0) goto done;
    qsort(out->tensors, out->n_tensors, sizeof *out->tensors, cmp_by_name);
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int di_safetensors_parse(const uint8_t *data, size_t size, const char *what, DiSafetensors *out) {
    if (!out) return di_errorf("di_safetensors_parse: no output given");
    memset(out, 0, sizeof *out);
    what = what ? what : "safetensors";
    if (!data && size) return di_errorf("%s: no data given", what);
    if (parse_header(data, size, what, out) < 0) {
        di_safetensors_close(out);
        return di_error_wrap("%s", what);
    }
    return 0;
}

int di_safetensors_open(const char *path, DiSafetensors *out) {
    if (!out) return di_errorf("di_safetensors_open: no output given");
    memset(out, 0, sizeof *out);
    if (!path) return di_errorf("di_safetensors_open: no path given");
    DiMappedFile map;
    if (di_map_file(path, &map) < 0) return -1;
    if (di_safetensors_parse(map.data, map.size, map.path, out) < 0) {
        di_unmap_file(&map);
        return -1;
    }
    out->map = map; /* map.path stays valid: every tensor's `file` points at it */
    if (out->n_copied)
        DI_INFO("%s: %zu tensor(s) not aligned to their element size in the file: %zu bytes copied into aligned "
                "memory, the other %zu tensor(s) stay mapped",
                path, out->n_copied, out->copied_bytes, out->n_tensors - out->n_copied);
    return 0;
}

void di_safetensors_close(DiSafetensors *st) {
    if (!st) return;
    free(st->tensors);
    free(st->names);
    free(st->copies);
    di_unmap_file(&st->map);
    memset(st, 0, sizeof *st);
}

const DiTensorInfo *di_safetensors_find(const DiSafetensors *st, const char *name) {
    if (!st || !name || !st->tensors) return NULL;
    DiTensorInfo key = {.name = name};
    return bsearch(&key, st->tensors, st->n_tensors, sizeof key, cmp_by_name);
}
