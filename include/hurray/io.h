/*
 * hurray/io.h - the hurray file: a streaming, atomic writer and a zero-copy
 * reader. The format is specified in docs/spec/file-format.md.
 *
 * A file holds named tensors (descriptor + every buffer, each buffer at a
 * 64-byte aligned offset with an xxh3-64 checksum) and typed file-level
 * metadata, indexed by a footer.
 *
 * Ownership:
 *   - hurray_writer_open* give the caller a writer; hurray_writer_finish and
 *     hurray_writer_abort both end it (free it), whatever they return.
 *   - hurray_reader_open gives the caller a reader, freed by
 *     hurray_reader_close. Descriptors and buffer lists obtained from it are
 *     the caller's and outlive the reader: a mapping stays alive until the
 *     reader is closed and the last buffer pointing into it is destroyed.
 *   - Strings and bytes returned by reader accessors are borrowed from the
 *     reader and valid until it is closed.
 * Threads: a writer is not thread-safe; use one per thread, or lock. A
 * reader may be shared: every reader call except hurray_reader_close may run
 * on several threads at once (tests/c/test_concurrency.c, run under TSan);
 * close it once, after the others are done.
 */
#ifndef HURRAY_IO_H
#define HURRAY_IO_H

#include <stdbool.h>

#include "hurray/buffer.h"
#include "hurray/common.h"
#include "hurray/descriptor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* File format version written by this library; readers accept any minor
 * version of the same major (docs/spec/file-format.md, "Compatibility"). */
#define HURRAY_FILE_FORMAT_MAJOR 1
#define HURRAY_FILE_FORMAT_MINOR 1

/* Chunk checksums (format 1.1; docs/spec/file-format.md section 7.1,
 * ADR-0025): a buffer longer than HURRAY_CHUNK_BYTES gets, besides its own
 * xxh3-64, one per HURRAY_CHUNK_BYTES of it, kept in the index in a
 * metadata entry of this key. They let hurray_reader_verify hash one large
 * buffer on every thread; readers of format 1.0 ignore them. The key is
 * reserved: the writer refuses it as a metadata key, and the reader does
 * not list the entry as metadata. */
#define HURRAY_CHUNK_CHECKSUMS_KEY "hurray.chunk_checksums"
#define HURRAY_CHUNK_BYTES ((uint64_t)4 << 20)

/* Hard limits a reader enforces before trusting any count or length. */
#define HURRAY_MAX_TENSOR_NAME_BYTES 4096u
#define HURRAY_MAX_METADATA_KEY_BYTES 4096u
#define HURRAY_MAX_INDEX_BYTES (256u << 20)
#define HURRAY_MAX_TENSORS (1u << 20)
#define HURRAY_MAX_METADATA_ENTRIES (1u << 16)

typedef enum HurrayMetadataType {
  HURRAY_METADATA_STRING = 1, /* UTF-8 */
  HURRAY_METADATA_INT = 2,    /* int64 */
  HURRAY_METADATA_FLOAT = 3,  /* float64 */
  HURRAY_METADATA_BOOL = 4,
  HURRAY_METADATA_BYTES = 5
} HurrayMetadataType;

/* ------------------------------------------------------------------ writer */

typedef struct HurrayWriter HurrayWriter;

/* Signature of a caller-supplied sink: write all `len` bytes and return
 * HURRAY_OK, or fail with a status of common.h (one it does not define
 * reaches the caller as HURRAY_ERR_IO). */
typedef HurrayStatus (*HurrayWriteFn)(void *ctx, const void *data, size_t len);

/* Writes to `path` atomically: the bytes go to an unnamed (or hidden
 * temporary) file in the same folder, and hurray_writer_finish fsyncs it
 * and renames it over `path`. Until then `path` is untouched, whatever
 * happens to the process. A regular file replaced keeps its permission
 * bits; a symbolic link is itself replaced (what it pointed to is left
 * alone); a folder, FIFO, socket or device node is refused here with
 * HURRAY_ERR_IO (os_errno EISDIR or ENXIO), since renaming over it would
 * destroy it. The writer holds the folder open (one descriptor) and names
 * the file relative to it: a folder renamed or moved meanwhile gets the
 * file under its new name. A path ending in '/' is refused (EISDIR). */
HURRAY_API HurrayStatus hurray_writer_open(const char *path, HurrayWriter **out,
                                           HurrayError *error);
/* Writes sequentially to an open descriptor (a file, a pipe, a socket);
 * never seeks, never closes it. Not atomic: the caller owns the outcome.
 * A closed descriptor, or one open for reading only, is HURRAY_ERR_IO
 * (os_errno EBADF) here, not at the first write.
 * Where `fd` is a regular file, a buffer that lies in this process's
 * mapping of that file (as mapped when the writer opens) is refused with
 * HURRAY_ERR_INVALID_ARGUMENT before it is read: writing would change the
 * bytes being read, and after a truncation reading them faults. A pipe or
 * socket whose reader has gone raises SIGPIPE, as any write(2) does: the
 * library leaves signal dispositions to the program, so one that writes to
 * pipes ignores SIGPIPE and gets HURRAY_ERR_IO (os_errno EPIPE) instead. */
HURRAY_API HurrayStatus hurray_writer_open_fd(int fd, HurrayWriter **out, HurrayError *error);
/* Writes sequentially through `write_fn(ctx, ...)`, e.g. onto a FILE*. */
HURRAY_API HurrayStatus hurray_writer_open_callback(HurrayWriteFn write_fn, void *ctx,
                                                    HurrayWriter **out, HurrayError *error);

/* Appends tensor `name`: checks the placement of `buffers` against `d`, then
 * writes every buffer (its table byte_size bytes) straight from its memory
 * and records its checksum. Buffers must be host-addressable and READY. The
 * stored descriptor is `d` moved to CPU:0 host memory with READY buffers.
 * Neither `d` nor `buffers` is taken; both may be freed on return. Memory
 * use does not grow with the data: only the index entry is kept. The
 * bytes are read twice (hashed, then written), so they must not change
 * during the call: a change gives a file whose checksums fail to verify.
 * HURRAY_ERR_DUPLICATE_NAME if `name` was already written. */
HURRAY_API HurrayStatus hurray_writer_write_tensor(HurrayWriter *w, const char *name,
                                                   const HurrayDescriptor *d,
                                                   const HurrayBufferList *buffers,
                                                   HurrayError *error);

/* One plain dense tensor of a batch (hurray_writer_write_dense_batch):
 * row-major elements of `dtype` in `shape`, `byte_size` bytes at `data`.
 * Everything is borrowed for the call only. */
typedef struct HurrayDenseTensor {
  const char *name;      /* NUL-terminated UTF-8, 1 to HURRAY_MAX_TENSOR_NAME_BYTES bytes */
  HurrayDType dtype;     /* any dtype; sub-byte dtypes packed as docs/spec/layouts.md says */
  uint32_t rank;         /* 0 (a scalar) to HURRAY_MAX_RANK */
  const uint64_t *shape; /* `rank` sizes; may be NULL when rank is 0 */
  const void *data;      /* any address (no alignment asked); may be NULL when byte_size is 0 */
  uint64_t byte_size;    /* exactly the dense size dtype and shape give */
} HurrayDenseTensor;

/* Appends `count` plain dense tensors, in order, in one call: the
 * descriptor of each (dense layout, one DATA buffer with its dtype's
 * natural alignment, CPU:0 host memory, READY) is built here from dtype and
 * shape, so the file holds what write_tensor would have written for the
 * same descriptor and one buffer, byte for byte. Per tensor it costs no
 * allocation beyond its index entry, and small buffers leave in large
 * writes: the way to save many small tensors.
 *
 * Tensors are checked (name, dtype, rank, byte_size against dtype and
 * shape, a name not yet in the file or earlier in the batch) one at a
 * time, just before each is written. On failure *written (when not NULL)
 * is the number of tensors appended before the failing one, which is
 * named in the error; those stay in the file. A failed check leaves the
 * writer usable, like write_tensor's; a failed write ends it (only
 * finish, which then refuses, or abort remain). Neither `tensors` nor
 * anything it points to is kept. Statistics (hurray_writer_set_statistics)
 * are computed as write_tensor computes them. Since library 0.1. */
HURRAY_API HurrayStatus hurray_writer_write_dense_batch(HurrayWriter *w,
                                                        const HurrayDenseTensor *tensors,
                                                        size_t count, size_t *written,
                                                        HurrayError *error);

/* When on, write_tensor computes min, max, NaN count and zero count of
 * each tensor it can (hurray_compute_statistics) in one pass over the data
 * and stores them in the written descriptor; tensors it cannot keep the
 * statistics they came with. Off by default. After a failed write this and
 * the metadata setters below refuse with HURRAY_ERR_STATE. */
HURRAY_API HurrayStatus hurray_writer_set_statistics(HurrayWriter *w, bool enabled,
                                                     HurrayError *error);

/* File-level metadata; keys are UTF-8. Setting a key again replaces it.
 * HURRAY_CHUNK_CHECKSUMS_KEY is reserved (HURRAY_ERR_INVALID_ARGUMENT). */
HURRAY_API HurrayStatus hurray_writer_set_metadata_string(HurrayWriter *w, const char *key,
                                                          const char *value, HurrayError *error);
HURRAY_API HurrayStatus hurray_writer_set_metadata_int(HurrayWriter *w, const char *key,
                                                       int64_t value, HurrayError *error);
HURRAY_API HurrayStatus hurray_writer_set_metadata_float(HurrayWriter *w, const char *key,
                                                         double value, HurrayError *error);
HURRAY_API HurrayStatus hurray_writer_set_metadata_bool(HurrayWriter *w, const char *key,
                                                        bool value, HurrayError *error);
HURRAY_API HurrayStatus hurray_writer_set_metadata_bytes(HurrayWriter *w, const char *key,
                                                         const void *value, size_t len,
                                                         HurrayError *error);

/* Cancellation. `fn(ctx)` returning true abandons the write: the call in
 * progress fails with HURRAY_ERR_CANCELLED, nothing more is written, and
 * only hurray_writer_finish (which then fails with HURRAY_ERR_STATE, leaving
 * a path target untouched) or hurray_writer_abort remain. The writer asks
 * on its own thread before every piece of output it emits (each header,
 * buffer, padding, index and trailer write, and every
 * HURRAY_WRITER_CANCEL_INTERVAL bytes inside a large buffer) and, for a
 * path, once more after the fsync and before the file is renamed into
 * place; and whenever a write to the file descriptor is cut short (EINTR,
 * or fewer bytes than asked, which a signal gives once a pipe or socket
 * took some), before it goes on: a write to a pipe nobody reads blocks
 * until a signal comes. Language bindings use it to honour Ctrl-C. NULL `fn`
 * removes the hook; `ctx` is borrowed and must outlive the writer. */
typedef bool (*HurrayCancelFn)(void *ctx);
#define HURRAY_WRITER_CANCEL_INTERVAL ((size_t)16 << 20)
HURRAY_API HurrayStatus hurray_writer_set_cancel(HurrayWriter *w, HurrayCancelFn fn, void *ctx,
                                                 HurrayError *error);

/* Writes the index and trailer; for a path, fsyncs and renames into place.
 * Frees the writer in every case; on failure the target path is untouched. */
HURRAY_API HurrayStatus hurray_writer_finish(HurrayWriter *w, HurrayError *error);

/* Discards everything written and frees the writer; `path` is untouched.
 * NULL is a no-op. */
HURRAY_API void hurray_writer_abort(HurrayWriter *w);

/* ------------------------------------------------------------------ reader */

typedef struct HurrayReader HurrayReader;

typedef enum HurrayReadMode {
  HURRAY_READ_MMAP = 0,  /* zero-copy: buffers point into a shared read-only mapping */
  HURRAY_READ_PREAD = 1, /* buffers are read with pread into owned, 64-byte aligned memory */
  /* Zero-copy and writable: a private (copy-on-write) mapping, PROT_READ |
   * PROT_WRITE, MAP_PRIVATE. Pages stay shared with the page cache until
   * written; a write copies that one page into memory of this process and
   * never reaches the file. Writing into HURRAY_READ_MMAP buffers is a
   * crash (SIGSEGV); here it is allowed. As with any mapping, a file that
   * another process truncates while mapped makes access to the lost pages
   * raise SIGBUS: replace files by rename (the writer does), never by
   * truncation. Since library 0.1 (options version 1 accepts it). */
  HURRAY_READ_MMAP_PRIVATE = 2
} HurrayReadMode;

/* Version 2 added `cancel` and `cancel_ctx`; a version 1 struct (without
 * them) is still accepted and means no cancellation. */
typedef struct HurrayReaderOptions {
  uint32_t version; /* HURRAY_READER_OPTIONS_VERSION */
  HurrayReadMode mode;
  bool verify_on_open; /* check every buffer's checksum before returning */
  /* Cancellation, as for a writer (hurray_writer_set_cancel): `cancel(ctx)`
   * returning true makes the reader call in progress fail with
   * HURRAY_ERR_CANCELLED, handing nothing out. The reader asks before each
   * round of a verify (verify_on_open included; a round is at most 4096
   * buffers or 1 GiB of pieces, and a buffer without chunk checksums is one
   * piece), and whenever the bytes it has read through pread or a byte
   * source's `read` since it last asked reach HURRAY_READER_CANCEL_INTERVAL,
   * counted across calls and threads, before the read that crosses it. A
   * mapped read copies nothing and is not interrupted, nor is a byte
   * source's `read_batch` (its transport answers for itself). The hook runs
   * on the thread that reads: the caller's, or one of the worker threads of
   * hurray_reader_read_spans; never on one of verify's hashing threads. A
   * verify reads by pread on all of them (wherever mapping the file would
   * cost more, and always for HURRAY_READ_PREAD): their bytes count, and
   * the caller's thread, which hashes too, asks before its next read once
   * they reach the interval, and about every millisecond once it has no
   * part left and waits for the others. NULL: never cancelled. `cancel_ctx` is
   * borrowed and must outlive the reader. */
  HurrayCancelFn cancel;
  void *cancel_ctx;
} HurrayReaderOptions;

#define HURRAY_READER_OPTIONS_VERSION 2
#define HURRAY_READER_OPTIONS_INIT \
  {HURRAY_READER_OPTIONS_VERSION, HURRAY_READ_MMAP, false, NULL, NULL}
#define HURRAY_READER_CANCEL_INTERVAL ((uint64_t)16 << 20)

/* Opens `path` (`options` may be NULL for the defaults). Reads only the
 * trailer and the index: the cost is O(number of tensors), and no tensor
 * data is touched unless verify_on_open is set. Every malformed file gives
 * a specific error (docs/spec/file-format.md, "Reader obligations"). */
HURRAY_API HurrayStatus hurray_reader_open(const char *path, const HurrayReaderOptions *options,
                                           HurrayReader **out, HurrayError *error);

/* Closes the reader. Buffers obtained from it stay valid. NULL is a no-op. */
HURRAY_API void hurray_reader_close(HurrayReader *r);

/* Tensors, in the index's order (bytewise ascending names). Open reads
 * the index into one copy of its own in every mode (never read in place
 * from a mapping, so a file rewritten in place cannot change what open
 * checked: ADR-0030) and keeps 4 bytes a tensor besides; entries are
 * decoded from it when asked for.
 * tensor_name makes NUL-terminated copies of every name on its first call
 * (thread-safe; NULL past the count or when memory runs out); tensor_name_view
 * gives the name in place, *len bytes of UTF-8 without a NUL, and copies
 * nothing: what a binding that builds its own strings should use. Both are
 * borrowed until the reader is closed. */
HURRAY_API size_t hurray_reader_tensor_count(const HurrayReader *r);
HURRAY_API const char *hurray_reader_tensor_name(const HurrayReader *r, size_t index);
HURRAY_API const char *hurray_reader_tensor_name_view(const HurrayReader *r, size_t index,
                                                      size_t *len);
/* Binary search; HURRAY_ERR_NOT_FOUND if absent. */
HURRAY_API HurrayStatus hurray_reader_find(const HurrayReader *r, const char *name,
                                           size_t *index_out, HurrayError *error);

/* Decodes tensor `name`'s descriptor, validates it and the placement of its
 * buffers, and returns both (caller-owned). In MMAP mode every buffer points
 * into the mapping; in PREAD mode each is read into its own allocation. */
HURRAY_API HurrayStatus hurray_reader_get_tensor(HurrayReader *r, const char *name,
                                                 HurrayDescriptor **descriptor_out,
                                                 HurrayBufferList **buffers_out,
                                                 HurrayError *error);

/* The dtype (of the stored elements: the codes' if quantized) and the
 * logical shape of tensor `index` (0 to tensor_count - 1; hurray_reader_find
 * gives a name's), into caller memory: read in place from the index, with
 * no allocation and no full decode, so listing a million tensors stays
 * cheap. Only the form of the descriptor's dtype and shape records is
 * checked here; the rest of the descriptor is validated when it or its
 * tensor is read (get_descriptor, get_tensor), which may still refuse it
 * (docs/security.md). HURRAY_ERR_NOT_FOUND past the count. */
HURRAY_API HurrayStatus hurray_reader_tensor_shape(const HurrayReader *r, size_t index,
                                                   HurrayDType *dtype, uint32_t *rank,
                                                   uint64_t shape[HURRAY_MAX_RANK],
                                                   HurrayError *error);

/* Only the descriptor (caller-owned), validated; touches no data. */
HURRAY_API HurrayStatus hurray_reader_get_descriptor(HurrayReader *r, const char *name,
                                                     HurrayDescriptor **descriptor_out,
                                                     HurrayError *error);

/* Reads buffer `buffer_index` of tensor `name` into caller memory `dst` of
 * `dst_size` bytes (at least the buffer's length), with pread. */
HURRAY_API HurrayStatus hurray_reader_read_buffer(HurrayReader *r, const char *name,
                                                  uint32_t buffer_index, void *dst,
                                                  uint64_t dst_size, HurrayError *error);

/* One piece of a stored buffer to read: bytes [offset, offset + length) of
 * buffer `buffer` of tensor number `tensor` (0 to tensor_count - 1, as
 * hurray_reader_tensor_name; hurray_reader_find gives a name's) into caller
 * memory `dst`, which must hold `length` bytes. */
typedef struct HurrayReadSpan {
  size_t tensor;
  uint32_t buffer;
  uint64_t offset;
  uint64_t length;
  void *dst;
} HurrayReadSpan;

/* Reads `count` spans with pread, on `threads` threads (1 to 64; the bytes
 * are split evenly, so one large span is read by several threads): the
 * loader's way of filling a staging buffer, e.g. pinned memory that a GPU
 * copies from, at the page cache's speed rather than one thread's. Every
 * span is checked against its buffer before anything is read; a reader
 * over a byte source (hurray_reader_open_byte_source) reads on the calling thread
 * only. On failure the bytes of `dst` are unspecified and the error is the
 * one of the first failing span in the order given. The reader must not be
 * closed during the call; other calls on it may run concurrently. */
HURRAY_API HurrayStatus hurray_reader_read_spans(HurrayReader *r, const HurrayReadSpan *spans,
                                                 size_t count, unsigned threads,
                                                 HurrayError *error);

/* Rows [row_start, row_start + row_count) along dimension 0 of a dense,
 * row-major tensor (unquantized or per-tensor affine), touching only those
 * bytes. The returned descriptor has shape[0] = row_count, no statistics,
 * and its shard offset moved by row_start. Of a packed sub-byte dtype,
 * row_start must begin on a byte (HURRAY_ERR_UNSUPPORTED otherwise); the
 * slice's last byte may hold bits of the next row, which readers ignore. */
HURRAY_API HurrayStatus hurray_reader_get_rows(HurrayReader *r, const char *name,
                                               uint64_t row_start, uint64_t row_count,
                                               HurrayDescriptor **descriptor_out,
                                               HurrayBufferList **buffers_out, HurrayError *error);

/* Faults in every page of the file's tensor data in one call per thread
 * (madvise MADV_POPULATE_READ, after MADV_HUGEPAGE, MADV_SEQUENTIAL and
 * MADV_WILLNEED: pages read from the disk land in 2 MiB folios), so
 * that touching the buffers afterwards takes no page faults: read faults
 * only, so a private mapping stays shared with the page cache. `threads`
 * (1 to 64) splits the range for concurrent reads on a cold cache. In PREAD
 * mode it only asks the kernel to read ahead (as hurray_reader_read_ahead,
 * without its cap or its check of the cache).
 * HURRAY_ERR_IO if the kernel refuses, e.g. when the file was truncated
 * after open (the pages past the new end would raise SIGBUS if touched).
 * Kernels before 6.9 get the read-ahead of PREAD mode only: before 5.14
 * they have no MADV_POPULATE_READ, and until 6.8 it could retry a page
 * whose read failed (a bad sector) for ever. See
 * docs/adr/ADR-0021-torch-loading.md. */
HURRAY_API HurrayStatus hurray_reader_populate(HurrayReader *r, unsigned threads,
                                               HurrayError *error);

/* Asks the kernel to start reading the file's tensor data into the page
 * cache, and returns without waiting for it (posix_fadvise WILLNEED, one
 * request per 128 KiB, so that the disk works through a deep queue while
 * the caller builds and touches tensors): for a loader about to touch every
 * tensor of a cold file. It reads at most the first eighth of the memory
 * the process may fill (physical memory, or its cgroup's limit if lower),
 * and nothing when 95% of the data is cached already (estimated as
 * hurray_reader_cached_fraction does). It may block while the device's
 * request queue is full. See docs/adr/ADR-0028-load-reads-ahead.md.
 * Advice only: HURRAY_OK unless `r` is NULL; nothing for a reader over a
 * byte source. */
HURRAY_API HurrayStatus hurray_reader_read_ahead(HurrayReader *r, HurrayError *error);

/* The fraction (0 to 1) of the file's tensor data now in the page cache,
 * from cachestat(2) where the kernel has it (Linux 6.5; HURRAY_CACHESTAT=0
 * turns it off), else from mincore over up to 1024 pages spread evenly
 * (exact for smaller files); no page is touched or read. Loaders use it to
 * choose between mapping (warm) and parallel reads (cold): see
 * docs/adr/ADR-0021-torch-loading.md. */
HURRAY_API HurrayStatus hurray_reader_cached_fraction(HurrayReader *r, double *out,
                                                      HurrayError *error);

/* Checks tensor `name`, or every tensor when `name` is NULL, as a read of
 * it would, and its checksums: every checksum first (HURRAY_ERR_CHECKSUM
 * names the first mismatch), then each tensor's descriptor and buffer
 * placement (file-format.md 10.3; the read's own status, the message naming
 * the tensor, the first failing one in index order). So a file that
 * verifies can be read whole. Through a mapping, a file of thousands of
 * tensors has those checks spread over the hashing threads too. A buffer longer
 * than a chunk is checked against its chunk checksums in every mode (on
 * every hashing thread), others against their own. Each part is read
 * through the mapping or with pread, whichever the page cache makes
 * cheaper (docs/adr/ADR-0031-verify-maps-or-copies.md); read with pread, a
 * bad sector is HURRAY_ERR_IO and a file cut short HURRAY_ERR_TRUNCATED,
 * where a mapping's read fault is a SIGBUS, and the first buffer in index
 * order that fails to read or to match is the one reported.
 * With HURRAY_READ_MMAP_PRIVATE it reads the file, not the private
 * mapping (a temporary shared read-only mapping, or pread), so pages
 * written by the caller do not count: it checks the file. */
HURRAY_API HurrayStatus hurray_reader_verify(HurrayReader *r, const char *name,
                                             HurrayError *error);

/* File-level metadata, in bytewise ascending key order. */
HURRAY_API size_t hurray_reader_metadata_count(const HurrayReader *r);
HURRAY_API const char *hurray_reader_metadata_key(const HurrayReader *r, size_t index);
HURRAY_API HurrayMetadataType hurray_reader_metadata_type(const HurrayReader *r, size_t index);
/* Typed getters by key: HURRAY_ERR_NOT_FOUND if absent,
 * HURRAY_ERR_INVALID_ARGUMENT if the stored type differs. String and bytes
 * values are borrowed (strings NUL-terminated). The bytes getter also
 * returns the raw value of a type this library does not know (written by a
 * newer minor version). */
HURRAY_API HurrayStatus hurray_reader_metadata_string(const HurrayReader *r, const char *key,
                                                      const char **out, HurrayError *error);
HURRAY_API HurrayStatus hurray_reader_metadata_int(const HurrayReader *r, const char *key,
                                                   int64_t *out, HurrayError *error);
HURRAY_API HurrayStatus hurray_reader_metadata_float(const HurrayReader *r, const char *key,
                                                     double *out, HurrayError *error);
HURRAY_API HurrayStatus hurray_reader_metadata_bool(const HurrayReader *r, const char *key,
                                                    bool *out, HurrayError *error);
HURRAY_API HurrayStatus hurray_reader_metadata_bytes(const HurrayReader *r, const char *key,
                                                     const uint8_t **out, size_t *len_out,
                                                     HurrayError *error);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_IO_H */
