/* safetensors.h — one safetensors file, memory-mapped and fully checked, copied only where the
 * format lets a tensor start off its element alignment.
 *
 * Format (golden-v41/README.md §2): 8-byte little-endian header length N, N bytes of JSON
 * (`name -> {"dtype", "shape", "data_offsets": [begin, end]}` plus an optional "__metadata__"
 * object of strings), then the raw little-endian row-major data; offsets are relative to the
 * first byte after the header.  Every tensor is checked before anyone sees it: dtype known,
 * shape product x element size == the data_offsets span, span inside the file, no two spans
 * overlapping, header length sane.  A bad file is an error naming the file and the tensor.
 *
 * Alignment.  The format puts no alignment on data_offsets, and a writer that does not order its
 * tensors by element size leaves a BF16 / F32 tensor at an odd address (Hugging Face's reader
 * accepts such a file).  The kernels read through typed pointers, so each such tensor (element
 * size > 1, data not a multiple of it) is copied into aligned memory the DiSafetensors owns
 * (di_safetensors_open logs the byte count at info level); every other tensor stays in the map.
 * So every DiTensorInfo's data is aligned to its element size. */
#ifndef DI_MODEL_SAFETENSORS_H
#define DI_MODEL_SAFETENSORS_H

#include "base/file.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DI_TENSOR_MAX_DIMS 8
/* A header larger than this is refused before it is parsed (the release's largest is a few MB;
 * the reference Rust reader uses the same 100 MB bound). */
#define DI_SAFETENSORS_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

/* The safetensors dtype strings (§3.3 plus the common ones a reader must at least name). */
typedef enum {
    DI_DTYPE_BOOL = 0,
    DI_DTYPE_U8,
    DI_DTYPE_I8, /* also: packed FP4 E2M1, two codes per byte (§3.3) */
    DI_DTYPE_I16,
    DI_DTYPE_U16,
    DI_DTYPE_F16,
    DI_DTYPE_BF16,
    DI_DTYPE_I32,
    DI_DTYPE_U32,
    DI_DTYPE_F32,
    DI_DTYPE_I64,
    DI_DTYPE_U64,
    DI_DTYPE_F64,
    DI_DTYPE_F8_E4M3,
    DI_DTYPE_F8_E5M2,
    DI_DTYPE_F8_E8M0, /* UE8M0 power-of-two scales */
    DI_DTYPE_COUNT
} DiDType;

/* "F8_E4M3" etc.; NULL for an out-of-range value. */
const char *di_dtype_name(DiDType dtype);
/* Bytes per element (1, 2, 4 or 8). */
size_t di_dtype_size(DiDType dtype);
/* Parse a dtype string; -1 (with error) when unknown. */
int di_dtype_parse(const char *name, DiDType *out);

typedef struct {
    const char *name; /* owned by the file / checkpoint */
    DiDType dtype;
    int ndim;
    int64_t shape[DI_TENSOR_MAX_DIMS];
    int64_t numel;    /* product of shape (1 for a scalar) */
    const void *data; /* inside the memory map */
    size_t nbytes;
    size_t offset;    /* absolute file offset of the first byte */
    const char *file; /* path of the file holding it */
} DiTensorInfo;

typedef struct {
    DiMappedFile map;
    size_t header_len; /* N */
    size_t n_tensors;
    DiTensorInfo *tensors; /* sorted by name */
    char *names;           /* storage of every tensor name */
    void *copies;          /* the aligned copies of the tensors the map leaves misaligned, or NULL */
    size_t n_copied, copied_bytes;
} DiSafetensors;

/* Map and check a file (misaligned tensors copied, see above). On error *out is empty and the
 * message names the file (and tensor). */
int di_safetensors_open(const char *path, DiSafetensors *out);
/* Check a file image already in memory (fuzzing, tests).  `what` names it in errors; the
 * tensors point into `data` (which must outlive *out) or, where misaligned there, to copies. */
int di_safetensors_parse(const uint8_t *data, size_t size, const char *what, DiSafetensors *out);
void di_safetensors_close(DiSafetensors *st);
/* Binary search by name; NULL when absent (no error recorded). */
const DiTensorInfo *di_safetensors_find(const DiSafetensors *st, const char *name);

#endif
