/*
 * hurray/byte_source.h - where a reader takes its bytes from. A HurrayByteSource is a
 * pread-like callback with a user pointer, the size of the file it reads,
 * and optionally a batch read; hurray_reader_open_byte_source opens a reader on
 * it. The C library has no network code: a program plugs its own transport
 * in here (the Python package does, for HTTP range requests and fsspec).
 * docs/impl/c-ffi.md ("Sources"), docs/adr/ADR-0023-reader-sources.md.
 *
 * Through a source the reader makes every check it makes on a local file
 * (docs/spec/file-format.md section 10): the same code parses and validates
 * the header, the trailer and the index. Everything read through a source
 * is copied into memory the reader owns (like HURRAY_READ_PREAD): buffers
 * handed out never point into the source's memory.
 *
 * Ownership and lifetimes:
 *   - hurray_reader_open_byte_source copies the HurrayByteSource struct; the struct
 *     itself may be freed on return. From the call on, the reader owns
 *     `ctx`: it calls `release(ctx)` (when set) exactly once, when the
 *     reader is closed, or before hurray_reader_open_byte_source returns an error
 *     (any error, as long as `source` itself was not NULL).
 *   - Buffers and descriptors from the reader never borrow from `ctx`: they
 *     outlive the reader and the source.
 * Threads: a reader may be used from several threads at once (see io.h), so
 * `read` and `read_batch` may run concurrently on several threads, each on
 * the thread of the reader call that needs the bytes. They must be safe for
 * that, or the caller must not share the reader.
 */
#ifndef HURRAY_BYTE_SOURCE_H
#define HURRAY_BYTE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "hurray/common.h"
#include "hurray/io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads exactly `length` bytes at `offset` into `dst`, or fails. The reader
 * only asks for ranges inside [0, size) and never for 0 bytes. A source
 * that cannot deliver every byte reports HURRAY_ERR_TRUNCATED (the data
 * ended early) or HURRAY_ERR_IO (the transport failed), with a message in
 * `error` (which is never NULL). Returning HURRAY_OK promises that all
 * `length` bytes of `dst` were written. */
typedef HurrayStatus (*HurrayByteSourceReadFn)(void *ctx, uint64_t offset, uint64_t length,
                                               void *dst, HurrayError *error);

/* One range of a batch: `length` bytes at `offset` into `dst`. */
typedef struct HurrayByteRange {
  uint64_t offset;
  uint64_t length;
  void *dst;
} HurrayByteRange;

/* Optional: reads every range of `ranges[0..count)` (sorted by offset, not
 * overlapping, count >= 1), all or nothing as for `read`. The reader uses
 * it for the buffers of one tensor, which writers lay out next to each
 * other, so that a transport can fetch them with one request. */
typedef HurrayStatus (*HurrayByteSourceReadBatchFn)(void *ctx, const HurrayByteRange *ranges,
                                                    size_t count, HurrayError *error);

/* Optional: frees `ctx`. Called once (see Ownership above). */
typedef void (*HurrayByteSourceReleaseFn)(void *ctx);

/* The source's bytes are untrusted transport: the reader checks every whole
 * buffer it reads for get_tensor against its stored checksum (XXH3-64; a
 * buffer longer than a chunk against its chunk checksums, as
 * hurray_reader_verify does) and fails with HURRAY_ERR_CHECKSUM on a
 * mismatch. Row reads
 * (hurray_reader_get_rows) and read_buffer are not checked: checksums cover
 * whole buffers only. */
#define HURRAY_BYTE_SOURCE_VERIFY_READS 1u

typedef struct HurrayByteSource {
  uint32_t version;                       /* HURRAY_BYTE_SOURCE_VERSION */
  uint32_t flags;                         /* 0 or HURRAY_BYTE_SOURCE_VERIFY_READS */
  uint64_t size;                          /* the file's size in bytes */
  void *ctx;                              /* passed to every callback */
  HurrayByteSourceReadFn read;            /* required */
  HurrayByteSourceReadBatchFn read_batch; /* optional: NULL reads range by range */
  HurrayByteSourceReleaseFn release;      /* optional */
} HurrayByteSource;

#define HURRAY_BYTE_SOURCE_VERSION 1
#define HURRAY_BYTE_SOURCE_INIT {HURRAY_BYTE_SOURCE_VERSION, 0, 0, NULL, NULL, NULL, NULL}

/* Opens a reader that reads through `source`. `options` may be NULL; its
 * mode is ignored (a source reader always copies, as HURRAY_READ_PREAD);
 * verify_on_open reads and checks every buffer through the source. Errors
 * are those of hurray_reader_open, plus whatever the source reports, and
 * HURRAY_ERR_INVALID_ARGUMENT for an unknown version or flag or a missing
 * `read`. hurray_reader_populate and hurray_reader_read_ahead do nothing
 * on such a reader, and hurray_reader_cached_fraction reports 0. */
HURRAY_API HurrayStatus hurray_reader_open_byte_source(const HurrayByteSource *source,
                                                       const HurrayReaderOptions *options,
                                                       HurrayReader **out, HurrayError *error);

/* Fills `*out` with a source reading the `size` bytes at `data` (an
 * in-memory file). `data` is borrowed: it must stay valid and unchanged
 * until the reader opened on the source is closed. No release is set. */
HURRAY_API HurrayStatus hurray_byte_source_memory(const void *data, size_t size,
                                                  HurrayByteSource *out, HurrayError *error);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_BYTE_SOURCE_H */
