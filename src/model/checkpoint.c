/* checkpoint.c — a V4.1 checkpoint directory: shards mapped and checked, names resolved through
 * the index, the §3.6 inventory compared, and the checked accessors of checkpoint.h.
 *
 * Ownership: the DiCheckpoint owns every DiSafetensors (and so every map); a single sorted array
 * of tensor pointers (`by_name`) gives O(log n) lookups over all shards. */
#include "model/checkpoint.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json.h"
#include "base/log.h"
#include "base/mem.h"
#include "kernels/numformats.h"
#include "model/checkpoint_inventory.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

struct DiCheckpoint {
    char *dir;
    size_t n_files;
    DiSafetensors *files;
    size_t n_tensors;
    const DiTensorInfo **by_name; /* sorted by name */
    unsigned char *used;          /* parallel to by_name */
    size_t n_warnings;
    char **warnings;
};

/* ---- helpers ----------------------------------------------------------------------------- */

static int cmp_info_ptr(const void *a, const void *b) {
    return strcmp((*(const DiTensorInfo *const *)a)->name, (*(const DiTensorInfo *const *)b)->name);
}

static ptrdiff_t index_of(const DiCheckpoint *ck, const char *name) {
    size_t lo = 0, hi = ck->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->by_name[mid]->name, name);
        if (c == 0) return (ptrdiff_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int add_warning(DiCheckpoint *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add_warning(DiCheckpoint *ck, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = di_realloc_array(ck->warnings, ck->n_warnings + 1, sizeof *w, "warnings");
    if (!w) return -1;
    ck->warnings = w;
    if (!(w[ck->n_warnings] = di_strdup(buf))) return -1;
    ck->n_warnings++;
    return 0;
}

static void format_shape(const DiTensorInfo *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (len < n) snprintf(buf + len, n - len, "]");
}

static void format_dims(int ndim, const int64_t *shape, char *buf, size_t n) {
    DiTensorInfo t = {.ndim = ndim};
    for (int i = 0; i < ndim && i < DI_TENSOR_MAX_DIMS; i++) t.shape[i] = shape[i];
    format_shape(&t, buf, n);
}

/* A shard name from the index must be a plain file name inside the directory. */
static int check_shard_name(const char *name) {
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return di_errorf(INDEX_NAME ": shard name '%s' is not a file name in the checkpoint directory", name);
    return 0;
}

/* ---- opening ----------------------------------------------------------------------------- */

static int open_file(DiCheckpoint *ck, const char *file_name) {
    char *path = di_path_join(ck->dir, file_name);
    if (!path) return -1;
    int rc = di_safetensors_open(path, &ck->files[ck->n_files]);
    free(path);
    if (rc < 0) return -1;
    const DiSafetensors *st = &ck->files[ck->n_files++];
    DI_INFO("checkpoint: mapped %s (%.1f MB, %zu tensors checked)", file_name, (double)st->map.size / 1e6,
            st->n_tensors);
    return 0;
}

/* The shard index of `file` in ck->files (opened so far), -1 when not open yet. */
static ptrdiff_t find_open_shard(const DiCheckpoint *ck, const char *dir_path_file) {
    for (size_t i = 0; i < ck->n_files; i++)
        if (strcmp(ck->files[i].map.path, dir_path_file) == 0) return (ptrdiff_t)i;
    return -1;
}

static int open_indexed(DiCheckpoint *ck, const char *index_path) {
    json_t *root = di_json_load_file(index_path);
    if (!root) return -1;
    int rc = -1;
    json_t *map;
    if (di_json_object(root, INDEX_NAME, "weight_map", true, &map) < 0) goto done;
    size_t n = json_object_size(map);
    ck->files = di_calloc(n ? n : 1, sizeof *ck->files, "shards");
    ck->by_name = di_calloc(n ? n : 1, sizeof *ck->by_name, "tensor index");
    if (!ck->files || !ck->by_name) goto done;
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        if (!json_is_string(v)) {
            di_errorf(INDEX_NAME ": weight_map.%s: expected a shard file name, got %s", name, di_json_type_name(v));
            goto done;
        }
        const char *shard = json_string_value(v);
        if (check_shard_name(shard) < 0) goto done;
        char *path = di_path_join(ck->dir, shard);
        if (!path) goto done;
        ptrdiff_t f = find_open_shard(ck, path);
        free(path);
        if (f < 0) {
            if (open_file(ck, shard) < 0) {
                di_error_wrap("tensor '%s' (weight_map)", name);
                goto done;
            }
            f = (ptrdiff_t)ck->n_files - 1;
        }
        const DiTensorInfo *t = di_safetensors_find(&ck->files[f], name);
        if (!t) {
            di_errorf("%s: tensor '%s' is named by " INDEX_NAME " but the shard does not hold it",
                      ck->files[f].map.path, name);
            goto done;
        }
        ck->by_name[ck->n_tensors++] = t;
    }
    /* Tensors a shard holds but the index does not name are invisible: say so. */
    for (size_t f = 0; f < ck->n_files; f++)
        for (size_t i = 0; i < ck->files[f].n_tensors; i++) {
            const char *tn = ck->files[f].tensors[i].name;
            json_t *m = json_object_get(map, tn);
            const char *slash = strrchr(ck->files[f].map.path, '/');
            if (!m || strcmp(json_string_value(m), slash ? slash + 1 : ck->files[f].map.path) != 0)
                if (add_warning(ck, "%s: tensor '%s' is not mapped to this shard by " INDEX_NAME " (ignored)",
                                ck->files[f].map.path, tn) < 0)
                    goto done;
        }
    json_t *meta = json_object_get(root, "metadata");
    json_t *total = meta ? json_object_get(meta, "total_size") : NULL;
    if (total && json_is_integer(total)) {
        int64_t sum = 0;
        for (size_t i = 0; i < ck->n_tensors; i++) sum += (int64_t)ck->by_name[i]->nbytes;
        if (sum != (int64_t)json_integer_value(total) &&
            add_warning(ck, INDEX_NAME ": metadata.total_size is %lld but the tensors hold %lld bytes",
                        (long long)json_integer_value(total), (long long)sum) < 0)
            goto done;
    }
    rc = 0;
done:
    if (rc < 0) di_error_wrap("%s", index_path);
    json_decref(root);
    return rc;
}

static int open_single(DiCheckpoint *ck) {
    ck->files = di_calloc(1, sizeof *ck->files, "shards");
    if (!ck->files || open_file(ck, SINGLE_NAME) < 0) return -1;
    const DiSafetensors *st = &ck->files[0];
    ck->by_name = di_calloc(st->n_tensors ? st->n_tensors : 1, sizeof *ck->by_name, "tensor index");
    if (!ck->by_name) return -1;
    for (size_t i = 0; i < st->n_tensors; i++) ck->by_name[ck->n_tensors++] = &st->tensors[i];
    return 0;
}

/* ---- inventory (§3.6) -------------------------------------------------------------------- */

static int check_entry(DiCheckpoint *ck, const DiInventoryEntry *e) {
    ptrdiff_t i = index_of(ck, e->name);
    if (i < 0)
        return di_errorf("%s: missing tensor '%s' (%s, required by config.json, §3.6)", ck->dir, e->name,
                         di_dtype_name(e->dtype));
    const DiTensorInfo *t = ck->by_name[i];
    bool shape_ok = t->ndim == e->ndim;
    for (int d = 0; shape_ok && d < e->ndim; d++) shape_ok = t->shape[d] == e->shape[d];
    if (t->dtype != e->dtype || !shape_ok) {
        char got[96], want[96];
        format_shape(t, got, sizeof got);
        format_dims(e->ndim, e->shape, want, sizeof want);
        return di_errorf("%s: tensor '%s' is %s %s, expected %s %s for this config", t->file, t->name,
                         di_dtype_name(t->dtype), got, di_dtype_name(e->dtype), want);
    }
    return 0;
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const DiInventoryEntry *)a)->name, ((const DiInventoryEntry *)b)->name);
}

static int check_inventory(DiCheckpoint *ck, const DiModelConfig *cfg) {
    DiInventory inv;
    if (di_inventory_build(cfg, &inv) < 0) return -1;
    int rc = 0;
    for (size_t i = 0; i < inv.n && rc == 0; i++) rc = check_entry(ck, &inv.entries[i]);
    if (rc == 0) {
        qsort(inv.entries, inv.n, sizeof *inv.entries, cmp_entry_name);
        bool vision = cfg->vision.num_hidden_layers > 0;
        for (size_t i = 0; i < ck->n_tensors && rc == 0; i++) {
            const DiTensorInfo *t = ck->by_name[i];
            DiInventoryEntry key;
            snprintf(key.name, sizeof key.name, "%s", t->name);
            if (bsearch(&key, inv.entries, inv.n, sizeof key, cmp_entry_name)) continue;
            if (vision && di_inventory_is_vision_name(t->name)) continue; /* §3.9, outside the text model */
            rc = add_warning(ck, "%s: tensor '%s' is not used by the text model of this config", t->file, t->name);
        }
    }
    if (rc == 0)
        DI_INFO("checkpoint: all %zu tensors of the §3.6 inventory present, %zu warnings", inv.n, ck->n_warnings);
    di_inventory_free(&inv);
    return rc;
}

/* Context-independent summary of §6: fixed state per request and the persistent KV per token
 * (measured over 2^20 tokens, so every power-of-two ratio divides it). */
static void log_state_cost(const DiModelConfig *cfg) {
    DiStateBytes s0, s1;
    const int64_t L = (int64_t)1 << 20;
    if (di_config_state_bytes(cfg, 0, true, &s0) < 0 || di_config_state_bytes(cfg, L, true, &s1) < 0) return;
    DI_INFO("memory: per request %.2f MB fixed state + %.1f bytes/token of compressed KV and index keys (packed, §6)",
            (double)s0.total / 1e6, (double)(s1.total - s0.total) / (double)L);
}

DiCheckpoint *di_checkpoint_open(const char *dir, const DiModelConfig *cfg) {
    if (!dir || !*dir) {
        di_errorf("di_checkpoint_open: no directory given");
        return NULL;
    }
    DiCheckpoint *ck = di_calloc(1, sizeof *ck, "checkpoint");
    if (!ck) return NULL;
    ck->dir = di_strdup(dir);
    char *index_path = di_path_join(dir, INDEX_NAME);
    int rc = (!ck->dir || !index_path) ? -1 : 0;
    if (rc == 0) {
        if (di_file_exists(index_path))
            rc = open_indexed(ck, index_path);
        else {
            char *single = di_path_join(dir, SINGLE_NAME);
            bool have_single = single && di_file_exists(single);
            free(single);
            rc = have_single
                     ? open_single(ck)
                     : di_errorf("%s: no " INDEX_NAME " and no " SINGLE_NAME " (not a checkpoint directory?)", dir);
        }
    }
    free(index_path);
    if (rc == 0) {
        qsort(ck->by_name, ck->n_tensors, sizeof *ck->by_name, cmp_info_ptr);
        ck->used = di_calloc(ck->n_tensors ? ck->n_tensors : 1, 1, "tensor use flags");
        if (!ck->used) rc = -1;
    }
    if (rc == 0 && cfg) rc = check_inventory(ck, cfg);
    if (rc < 0) {
        di_checkpoint_close(ck);
        return NULL;
    }
    for (size_t i = 0; i < ck->n_warnings; i++) DI_WARN("%s", ck->warnings[i]);
    DI_INFO("checkpoint: %s: %zu files, %zu tensors, %.1f MB mapped", dir, ck->n_files, ck->n_tensors,
            (double)di_checkpoint_mapped_bytes(ck) / 1e6);
    if (cfg) log_state_cost(cfg);
    return ck;
}

void di_checkpoint_close(DiCheckpoint *ck) {
    if (!ck) return;
    for (size_t i = 0; i < ck->n_files; i++) di_safetensors_close(&ck->files[i]);
    for (size_t i = 0; i < ck->n_warnings; i++) free(ck->warnings[i]);
    free(ck->warnings);
    free(ck->files);
    free(ck->by_name);
    free(ck->used);
    free(ck->dir);
    free(ck);
}

/* ---- lookups and checked accessors ------------------------------------------------------ */

const DiTensorInfo *di_checkpoint_lookup(const DiCheckpoint *ck, const char *name) {
    if (!ck || !name) return NULL;
    ptrdiff_t i = index_of(ck, name);
    return i < 0 ? NULL : ck->by_name[i];
}

const DiTensorInfo *di_checkpoint_find(DiCheckpoint *ck, const char *name) {
    if (!ck || !name) {
        di_errorf("di_checkpoint_find: no checkpoint or name given");
        return NULL;
    }
    ptrdiff_t i = index_of(ck, name);
    if (i < 0) {
        di_errorf("%s: no tensor '%s'", ck->dir, name);
        return NULL;
    }
    ck->used[i] = 1;
    return ck->by_name[i];
}

/* find + exact dtype and shape check. */
static const DiTensorInfo *find_checked(DiCheckpoint *ck, const char *name, DiDType dtype, int ndim,
                                        const int64_t *shape) {
    const DiTensorInfo *t = di_checkpoint_find(ck, name);
    if (!t) return NULL;
    bool ok = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char got[96], want[96];
        format_shape(t, got, sizeof got);
        format_dims(ndim, shape, want, sizeof want);
        di_errorf("%s: tensor '%s' is %s %s, expected %s %s", t->file, name, di_dtype_name(t->dtype), got,
                  di_dtype_name(dtype), want);
        return NULL;
    }
    return t; /* aligned to its element size: safetensors.c copies the tensors a file leaves off it */
}

int di_checkpoint_tensor(DiCheckpoint *ck, const char *name, DiDType dtype, int ndim, const int64_t *shape,
                         const void **data) {
    if (!ck || !name || !data || (ndim > 0 && !shape) || ndim < 0 || ndim > DI_TENSOR_MAX_DIMS)
        return di_errorf("di_checkpoint_tensor: invalid arguments for '%s'", name ? name : "(null)");
    const DiTensorInfo *t = find_checked(ck, name, dtype, ndim, shape);
    if (!t) return -1;
    *data = t->data;
    return 0;
}

int di_checkpoint_vector(DiCheckpoint *ck, const char *name, int64_t n, DiDType dtype, const void **data) {
    if (n <= 0)
        return di_errorf("di_checkpoint_vector: '%s': invalid length %lld", name ? name : "(null)", (long long)n);
    return di_checkpoint_tensor(ck, name, dtype, 1, &n, data);
}

/* `X.weight` -> `X.scale` (§3.2). */
static int scale_name(const char *weight_name, char *buf, size_t n) {
    size_t len = strlen(weight_name);
    if (len < 7 || strcmp(weight_name + len - 7, ".weight") != 0 || len - 7 + 7 > n)
        return di_errorf("'%s': a quantised weight name must end in '.weight'", weight_name);
    memcpy(buf, weight_name, len - 7);
    memcpy(buf + len - 7, ".scale", 7);
    return 0;
}

int di_checkpoint_matrix(DiCheckpoint *ck, const char *weight_name, int64_t rows, int64_t cols, DiMatrix *out) {
    if (!ck || !weight_name || !out) return di_errorf("di_checkpoint_matrix: no checkpoint, name or output given");
    if (rows <= 0 || cols <= 0)
        return di_errorf("di_checkpoint_matrix: '%s': invalid shape [%lld, %lld]", weight_name, (long long)rows,
                         (long long)cols);
    memset(out, 0, sizeof *out);
    const DiTensorInfo *w = di_checkpoint_find(ck, weight_name);
    if (!w) return -1;
    int64_t shape[2] = {rows, cols}, sshape[2];
    DiDType want = w->dtype;
    switch (w->dtype) {
    case DI_DTYPE_F32: out->format = DI_MAT_F32; break;
    case DI_DTYPE_BF16: out->format = DI_MAT_BF16; break;
    case DI_DTYPE_F8_E4M3:
        out->format = DI_MAT_FP8_BLOCK;
        sshape[0] = (rows + 31) / 32;
        sshape[1] = (cols + 31) / 32;
        break;
    case DI_DTYPE_I8:
        if (cols % 32 != 0)
            return di_errorf("%s: tensor '%s': FP4 matrix needs cols divisible by 32, asked for %lld", w->file,
                             weight_name, (long long)cols);
        out->format = DI_MAT_FP4_ROW32;
        shape[1] = cols / 2;
        sshape[0] = rows;
        sshape[1] = cols / 32;
        break;
    default:
        return di_errorf("%s: tensor '%s' has dtype %s, not a weight matrix format (F32, BF16, F8_E4M3, I8)", w->file,
                         weight_name, di_dtype_name(w->dtype));
    }
    if (!find_checked(ck, weight_name, want, 2, shape)) return -1;
    out->rows = rows;
    out->cols = cols;
    out->data = w->data;
    if (out->format == DI_MAT_FP8_BLOCK || out->format == DI_MAT_FP4_ROW32) {
        char sname[256];
        if (scale_name(weight_name, sname, sizeof sname) < 0) return -1;
        const DiTensorInfo *s = find_checked(ck, sname, DI_DTYPE_F8_E8M0, 2, sshape);
        if (!s) return -1;
        out->scale = s->data;
    }
    return di_matrix_validate(out, weight_name);
}

int di_checkpoint_matrix_as(DiCheckpoint *ck, const char *weight_name, int64_t rows, int64_t cols, DiMatFormat format,
                            DiOwnedMatrix *out) {
    if (!out) return di_errorf("di_checkpoint_matrix_as: no output given");
    memset(out, 0, sizeof *out);
    if (format != DI_MAT_F32 && format != DI_MAT_BF16)
        return di_errorf("di_checkpoint_matrix_as: '%s': can only convert to F32 or BF16", weight_name ? weight_name : "");
    DiMatrix src;
    if (di_checkpoint_matrix(ck, weight_name, rows, cols, &src) < 0) return -1;
    size_t elem = format == DI_MAT_F32 ? 4 : 2, n;
    if (!di_mul_size((size_t)rows * (size_t)cols, elem, &n)) return di_errorf("%s: matrix too large", weight_name);
    float *row = di_malloc((size_t)cols * sizeof(float), "conversion row");
    uint8_t *dst = di_malloc(n, weight_name);
    int rc = (row && dst) ? 0 : -1;
    for (int64_t r = 0; rc == 0 && r < rows; r++) {
        rc = di_matrix_row(&src, r, row);
        for (int64_t c = 0; rc == 0 && c < cols; c++) {
            float v = row[c];
            uint16_t h = di_f32_to_bf16(v);
            if (!isfinite(v) || (format == DI_MAT_BF16 && di_bf16_to_f32(h) != v))
                rc = di_errorf("%s: tensor '%s' element [%lld, %lld] = %g is not exactly representable in %s",
                               di_checkpoint_lookup(ck, weight_name)->file, weight_name, (long long)r, (long long)c,
                               (double)v, format == DI_MAT_F32 ? "F32" : "BF16");
            else if (format == DI_MAT_F32)
                memcpy(dst + ((size_t)r * (size_t)cols + (size_t)c) * 4, &v, 4);
            else
                memcpy(dst + ((size_t)r * (size_t)cols + (size_t)c) * 2, &h, 2);
        }
    }
    free(row);
    if (rc < 0) {
        free(dst);
        return -1;
    }
    out->owned = dst;
    out->m = (DiMatrix){.format = format, .rows = rows, .cols = cols, .data = dst};
    return 0;
}

void di_owned_matrix_free(DiOwnedMatrix *m) {
    if (!m) return;
    free(m->owned);
    memset(m, 0, sizeof *m);
}

int di_checkpoint_engram_table(DiCheckpoint *ck, const char *prefix, int64_t rows, int64_t head_dim,
                               const uint8_t **codes, const uint8_t **scales) {
    if (!ck || !prefix || !codes || !scales) return di_errorf("di_checkpoint_engram_table: missing argument");
    if (rows <= 0 || head_dim <= 0 || head_dim % 32 != 0)
        return di_errorf("%s: invalid Engram table shape [%lld, %lld] (head_dim must be a multiple of 32)", prefix,
                         (long long)rows, (long long)head_dim);
    char name[256];
    int64_t shape[2] = {rows, head_dim}, sshape[2] = {rows, head_dim / 32};
    snprintf(name, sizeof name, "%s.weight", prefix);
    const DiTensorInfo *w = find_checked(ck, name, DI_DTYPE_F8_E4M3, 2, shape);
    if (!w) return -1;
    snprintf(name, sizeof name, "%s.scale", prefix);
    const DiTensorInfo *s = find_checked(ck, name, DI_DTYPE_F8_E8M0, 2, sshape);
    if (!s) return -1;
    *codes = w->data;
    *scales = s->data;
    return 0;
}

/* ---- enumeration and accounting --------------------------------------------------------- */

size_t di_checkpoint_n_tensors(const DiCheckpoint *ck) { return ck ? ck->n_tensors : 0; }

const DiTensorInfo *di_checkpoint_tensor_at(const DiCheckpoint *ck, size_t i) {
    return (ck && i < ck->n_tensors) ? ck->by_name[i] : NULL;
}

size_t di_checkpoint_n_files(const DiCheckpoint *ck) { return ck ? ck->n_files : 0; }

const char *di_checkpoint_dir(const DiCheckpoint *ck) { return ck ? ck->dir : NULL; }

int64_t di_checkpoint_mapped_bytes(const DiCheckpoint *ck) {
    int64_t sum = 0;
    for (size_t i = 0; ck && i < ck->n_files; i++) sum += (int64_t)ck->files[i].map.size;
    return sum;
}

/* The pages of [p, p + n) inside one of ck's shard maps: whole pages only (*lo, *hi), or the
 * pages it touches at all (outer).  False when the range is not in a map. */
static bool map_pages(const DiCheckpoint *ck, const void *p, size_t n, bool outer, uintptr_t *lo, uintptr_t *hi) {
    uintptr_t a = (uintptr_t)p, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < ck->n_files; i++) {
        const DiMappedFile *f = &ck->files[i].map;
        uintptr_t base = (uintptr_t)f->data;
        if (!f->data || a < base || n > f->size || a - base > f->size - n) continue;
        *lo = outer ? a / page * page : (a + page - 1) / page * page;
        *hi = outer ? (a + n + page - 1) / page * page : (a + n) / page * page;
        return *hi > *lo;
    }
    return false;
}

int64_t di_checkpoint_release_pages(const DiCheckpoint *ck, const void *p, size_t n) {
    if (!ck || (!p && n)) return di_errorf("di_checkpoint_release_pages: invalid arguments");
    uintptr_t lo, hi;
    if (!map_pages(ck, p, n, false, &lo, &hi)) return 0; /* whole pages only: a neighbour's stay */
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) return di_errorf("madvise(MADV_DONTNEED): %s", strerror(errno));
    return (int64_t)(hi - lo);
}

int64_t di_checkpoint_prefault_pages(const DiCheckpoint *ck, const void *p, size_t n) {
    if (!ck || (!p && n)) return di_errorf("di_checkpoint_prefault_pages: invalid arguments");
    uintptr_t lo, hi, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (!map_pages(ck, p, n, true, &lo, &hi)) return 0;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) == 0) return (int64_t)(hi - lo);
#endif
    volatile uint8_t sink = 0; /* an older kernel: read one byte per page */
    for (uintptr_t q = lo; q < hi; q += page) sink ^= *(const volatile uint8_t *)q;
    (void)sink;
    return (int64_t)(hi - lo);
}

int64_t di_checkpoint_tensor_bytes(const DiCheckpoint *ck) {
    int64_t sum = 0;
    for (size_t i = 0; ck && i < ck->n_tensors; i++) sum += (int64_t)ck->by_name[i]->nbytes;
    return sum;
}

size_t di_checkpoint_n_warnings(const DiCheckpoint *ck) { return ck ? ck->n_warnings : 0; }

const char *di_checkpoint_warning(const DiCheckpoint *ck, size_t i) {
    return (ck && i < ck->n_warnings) ? ck->warnings[i] : NULL;
}

size_t di_checkpoint_report_unused(const DiCheckpoint *ck, bool log) {
    size_t n = 0;
    for (size_t i = 0; ck && i < ck->n_tensors; i++) {
        if (ck->used[i] || di_inventory_is_vision_name(ck->by_name[i]->name)) continue;
        n++;
        if (log) DI_WARN("%s: tensor '%s' was never used by the model", ck->by_name[i]->file, ck->by_name[i]->name);
    }
    return n;
}

int di_checkpoint_memory(const DiCheckpoint *ck, const DiModelConfig *cfg, int64_t context_len, int64_t n_requests,
                         DiMemoryReport *out) {
    if (!ck || !cfg || !out) return di_errorf("di_checkpoint_memory: missing argument");
    if (n_requests < 0) return di_errorf("di_checkpoint_memory: negative request count");
    memset(out, 0, sizeof *out);
    if (di_config_state_bytes(cfg, context_len, true, &out->per_request) < 0) return -1;
    out->weights = di_checkpoint_tensor_bytes(ck);
    out->total = out->weights + n_requests * out->per_request.total;
    return 0;
}

int di_checkpoint_log_memory(const DiCheckpoint *ck, const DiModelConfig *cfg, int64_t context_len,
                             int64_t n_requests) {
    DiMemoryReport m;
    if (di_checkpoint_memory(ck, cfg, context_len, n_requests, &m) < 0) return -1;
    DI_INFO(
        "memory: weights %.1f MB mapped + %lld request(s) x %.2f MB state at %lld tokens (window %.2f, compressed KV "
        "%.2f, index keys %.2f, DSpark %.2f MB) = %.1f MB resident",
        (double)m.weights / 1e6, (long long)n_requests, (double)m.per_request.total / 1e6, (long long)context_len,
        (double)m.per_request.window_rings / 1e6, (double)m.per_request.compressed_kv / 1e6,
        (double)m.per_request.index_keys / 1e6,
        (double)(m.per_request.dspark_rings + m.per_request.dspark_inputs) / 1e6, (double)m.total / 1e6);
    return 0;
}
