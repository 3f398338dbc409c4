/* segment_store.h — L3 of the KV cache: block records in append-only segment files in one
 * directory, which may be a local SSD or a shared mount (3FS, CephFS, NFS) used by several
 * engine processes at once (serving.md §4.3(d),(e)).
 *
 * Files.  Each process writes only its own segment, named
 *     kv-<hour>-<writer id>-<n>.open   while it is written (its writer holds flock LOCK_EX on it;
 *                                      created as a hidden file, renamed once locked with its header)
 *     kv-<hour>-<writer id>-<n>.kvs    once sealed: footer index appended, then renamed (publish)
 * where <hour> is the wall-clock hour bucket of its records.  No file is ever rewritten in place;
 * other processes only read, or unlink whole files.  A segment starts with a 4 KiB file header;
 * records follow at 4 KiB-aligned offsets:
 *     [magic | version | kind | key (16 B) | len | seq | crc32c] padded to 4 KiB, payload, padding
 * crc32c covers the header (its crc field as zero) and the payload; seq counts 1, 2, ... within
 * a segment.  A sealed file ends with a footer: (key, offset, len, seq) per record and a trailer
 * with its own crc32c, so an index is rebuilt from footers without reading payloads.
 *
 * Safety.  Readers verify everything they serve: a record is returned only when its magic,
 * version, key, length, seq and crc32c all check, at read time (bits can rot after indexing).
 * A segment without a valid footer (a crashed writer's .open, a truncated .kvs) is rebuilt by
 * scanning; a bad record is skipped by resynchronising at the next 4 KiB boundary.  A live
 * writer's .open file is scanned too (its records are complete once their crc checks), but its
 * incomplete tail is not counted as damage.  Files that are not segments, or whose header does
 * not check, are skipped, counted and logged once.
 *
 * Retention.  Whole segments go: past the TTL (hour bucket end + ttl <= now), then oldest first
 * while the directory exceeds the size cap.  So a record stays at least ttl and less than ttl +
 * one hour (DI_KV_SEG_BUCKET_S, the granularity); a TTL finer than that is refused.  Any process may drop any sealed or orphaned
 * segment; unlink is safe under readers (POSIX keeps an open file readable).  A writer's hidden
 * temporary left by a crash is removed once unlocked and ten minutes old.
 *
 * Threads.  All calls lock the store; the payload I/O of di_kv_seg_append and di_kv_seg_get
 * runs unlocked.  Append and seal must be called from one thread at a time (kv_writer.c's). */
#ifndef DI_ENGINE_KVCACHE_SEGMENT_STORE_H
#define DI_ENGINE_KVCACHE_SEGMENT_STORE_H

#include "engine/kvcache/block_key.h"

#include <stddef.h>
#include <stdint.h>

#define DI_KV_SEG_ALIGN 4096
#define DI_KV_SEG_BUCKET_S 3600 /* wall-clock seconds of one segment's records: the TTL's granularity */
#define DI_KV_SEG_MAX_RECORD ((uint64_t)1 << 30) /* payload bytes */

enum { DI_KV_KIND_BLOCK = 1, DI_KV_KIND_UNIT_TAIL = 2 };

typedef struct {
    const char *dir;        /* created if missing */
    uint64_t cap_bytes;     /* 0: no size cap */
    uint64_t ttl_s;         /* 0: keep forever, else >= DI_KV_SEG_BUCKET_S */
    uint64_t segment_bytes; /* roll the open segment past this size; 0: cap/8 (64 KiB..256 MiB), 64 MiB without cap */
    double (*clock)(void *arg); /* wall-clock seconds; NULL: the real clock (tests pass their own) */
    void *clock_arg;
} DiKvSegOptions;

typedef struct {
    uint64_t records;          /* indexed now */
    uint64_t disk_bytes;       /* of the segments in the directory */
    uint64_t records_written, bytes_written;
    uint64_t reads, bytes_read;
    uint64_t records_corrupt;  /* failed a check at scan or read time, torn tails included */
    uint64_t files_skipped;    /* foreign or unreadable files */
    uint64_t segments_expired, segments_evicted, bytes_evicted;
    uint64_t write_errors;
} DiKvSegStats;

typedef struct DiKvSegStore DiKvSegStore;

/* Open (creating the directory) and index every segment in it.  NULL with the cause when the
 * directory cannot be created or read, or an option is out of range (the error names it). */
DiKvSegStore *di_kv_seg_open(const DiKvSegOptions *opts);
/* Seal this process's segment (an empty one is removed) and free everything. */
void di_kv_seg_close(DiKvSegStore *s);

/* Append one record.  0 written, -1 on error (disk full, unwritable): the cause is recorded and
 * logged once, and appends are refused for a minute instead of failing slowly every time. */
int di_kv_seg_append(DiKvSegStore *s, DiKvKey key, int kind, const void *data, size_t len);
/* Seal the open segment now (tests, shutdown); a later append starts a new one. */
int di_kv_seg_seal(DiKvSegStore *s);

/* Indexed? (the record is verified only when read) */
int di_kv_seg_contains(DiKvSegStore *s, DiKvKey key);
/* Read and verify a record: 1 with a malloc'd copy (*data, free it) and its kind, 0 when absent
 * or damaged (then it leaves the index and records_corrupt counts it), -1 on bad arguments. */
int di_kv_seg_get(DiKvSegStore *s, DiKvKey key, void **data, size_t *len, int *kind);

/* Pick up what other processes wrote or removed since the last look, then apply the TTL and
 * size cap.  0, or -1 when the directory cannot be listed. */
int di_kv_seg_refresh(DiKvSegStore *s);

void di_kv_seg_stats(DiKvSegStore *s, DiKvSegStats *out);

/* CRC32C (Castagnoli) of a buffer, continuing from crc (0 to start), via ISA-L. */
uint32_t di_kv_crc32c(uint32_t crc, const void *data, size_t len);

#endif
