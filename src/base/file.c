/* file.c — memory maps, whole-file reads and atomic writes (see file.h). */
#include "base/file.h"

#include "base/error.h"
#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int di_map_file(const char *path, DiMappedFile *out) {
    memset(out, 0, sizeof *out);
    if (!path) return di_errorf("map file: no path given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return di_errorf("cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return di_errorf("cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return di_errorf("%s is not a regular file", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return di_errorf("cannot map %s (%zu bytes): %s", path, out->size, strerror(e));
        }
        out->data = p;
    }
    close(fd);
    out->path = di_strdup(path);
    if (!out->path) {
        di_unmap_file(out);
        return -1;
    }
    return 0;
}

void di_unmap_file(DiMappedFile *file) {
    if (!file) return;
    if (file->data) munmap((void *)file->data, file->size);
    free(file->path);
    memset(file, 0, sizeof *file);
}

int di_read_stream(FILE *stream, const char *what, char **out_data, size_t *out_size) {
    *out_data = NULL;
    if (out_size) *out_size = 0;
    if (!stream) return di_errorf("cannot read %s: no stream", what);
    size_t cap = 1 << 16, len = 0;
    char *buf = di_malloc(cap, what);
    if (!buf) return -1;
    for (;;) {
        if (di_grow(&buf, &cap, len + 2, cap, 1, what) != 0) { /* room for a byte and the NUL */
            free(buf);
            return -1;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, stream);
        len += got;
        if (got == 0) break;
    }
    if (ferror(stream)) {
        free(buf);
        return di_errorf("error reading %s: %s", what, strerror(errno));
    }
    buf[len] = '\0';
    *out_data = buf;
    if (out_size) *out_size = len;
    return 0;
}

int di_read_file(const char *path, char **out_data, size_t *out_size) {
    *out_data = NULL;
    if (out_size) *out_size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return di_errorf("cannot open %s: %s", path, strerror(errno));
    int rc = di_read_stream(f, path, out_data, out_size);
    fclose(f);
    return rc;
}

int di_write_file_atomic(const char *path, const void *data, size_t size) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return di_errorf("path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return di_errorf("cannot create %s: %s", tmp, strerror(errno));
    const uint8_t *p = data;
    size_t left = size;
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return di_errorf("cannot write %s: %s", tmp, strerror(e));
        }
        p += n;
        left -= (size_t)n;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return di_errorf("cannot flush %s: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return di_errorf("cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    return 0;
}

int di_make_dirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return di_errorf("invalid directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return di_errorf("cannot create directory %s: %s", buf, strerror(errno));
            buf[i] = saved;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return di_errorf("%s is not a directory", path);
    return 0;
}

char *di_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *out = di_malloc(a + b + 2, "path");
    if (!out) return NULL;
    memcpy(out, dir, a);
    size_t pos = a;
    if (a > 0 && dir[a - 1] != '/') out[pos++] = '/';
    memcpy(out + pos, name, b + 1);
    return out;
}

int di_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}
