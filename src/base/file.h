/* file.h — files as the model and tools need them: read-only memory maps for checkpoints
 * (never copy a multi-GB shard), whole small files, and crash-safe writes (temp + rename) so an
 * interrupted writer never leaves a half-written file under the final name. */
#ifndef DI_BASE_FILE_H
#define DI_BASE_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;
    char *path;
} DiMappedFile;

int di_map_file(const char *path, DiMappedFile *out);
void di_unmap_file(DiMappedFile *file);

/* Read a whole file into a NUL-terminated heap buffer (free with free()). */
int di_read_file(const char *path, char **out_data, size_t *out_size);
/* Read an open stream (stdin for the CLI commands) to its end the same way; `what` names it in errors. */
int di_read_stream(FILE *stream, const char *what, char **out_data, size_t *out_size);
/* Write via "<path>.tmp.<pid>" then rename; fsyncs the file. */
int di_write_file_atomic(const char *path, const void *data, size_t size);
/* mkdir -p */
int di_make_dirs(const char *path);
/* Join a directory and a file name into a fresh heap string. */
char *di_path_join(const char *dir, const char *name);
int di_file_exists(const char *path);

#endif
