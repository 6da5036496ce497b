/*
 * The streaming writer. Bytes go out in file order and are never revisited:
 * header, then each tensor's buffers as they arrive, then at finish the
 * index and the trailer. Only the index entries stay in memory.
 *
 * Every system call goes through the writer's HurraySys table (sys.h), so
 * tests can fail any one of them; tests/c/test_faults.c does, at every call
 * of a representative write.
 */
#define _GNU_SOURCE /* O_TMPFILE, linkat */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h> /* NAME_MAX */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "../core/name_set.h"
#include "format.h"
#include "hash.h"
#include "file_mappings.h"
#include "raw_writer.h"
#include "sys.h"

typedef struct BufferRecord {
  uint64_t offset;
  uint64_t length;
  uint64_t checksum;
} BufferRecord;

/* A tensor's index entry. Its name and encoded descriptor live in the
 * writer's `strings` arena and its buffer records in `buffer_records`, by
 * offset: one allocation per tensor each would make a file of a million
 * small tensors pay a million mallocs and frees (bench/profile_many.py). */
typedef struct TensorRecord {
  size_t name_at;
  size_t name_len;
  size_t descriptor_at;
  size_t descriptor_len;
  size_t buffers_at;
  uint32_t buffer_count;
} TensorRecord;

/* A growable byte array; `failed` latches an allocation failure. */
typedef struct Bytes {
  uint8_t *data;
  size_t len;
  size_t capacity;
  bool failed;
} Bytes;

static void bytes_put(Bytes *b, const void *src, size_t n) {
  if (b->failed || n == 0) return;
  if (b->capacity - b->len < n) {
    size_t capacity = b->capacity ? b->capacity : 4096;
    while (capacity - b->len < n) {
      if (capacity > SIZE_MAX / 2) {
        b->failed = true;
        return;
      }
      capacity *= 2;
    }
    uint8_t *grown = realloc(b->data, capacity);
    if (grown == NULL) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->capacity = capacity;
  }
  memcpy(b->data + b->len, src, n);
  b->len += n;
}

/* Small writes are gathered in a stage and go out together: a file of
 * 20,000 small tensors was 40,000 write calls (buffer and pad each), a
 * third of the save's time. Writes of STAGE_DIRECT bytes or more go
 * straight from the caller's memory, after what is staged, except a whole
 * buffer of exactly STAGE_DIRECT bytes (emit_hashed). The stage goes out
 * by regions of the file (stage_copy), and at STAGE_BYTES within a region
 * it does not gather. */
#define STAGE_BYTES ((size_t)1 << 20)
/* The stage's size: room for a whole 2 MiB region of the file, which it
 * gathers where buffers share one (emit_hashed). */
#define STAGE_CAPACITY ((size_t)HURRAY_HUGE_WRITE_STEP)
/* Not above HURRAY_WRITE_STEP: emit_hashed's 64 KiB pieces of a large
 * buffer go out directly, never through a copy into the stage, except into
 * a region being gathered. */
#define STAGE_DIRECT ((size_t)HURRAY_WRITE_STEP)

typedef struct MetadataRecord {
  char *key;
  size_t key_len;
  HurrayMetadataType type;
  uint8_t *value; /* encoded value bytes */
  size_t value_len;
} MetadataRecord;

typedef enum SinkKind { SINK_PATH, SINK_FD, SINK_CALLBACK } SinkKind;

struct HurrayWriter {
  SinkKind kind;
  const HurraySys *sys; /* every system call goes through it */
  int fd;
  HurrayWriteFn write_fn;
  void *write_ctx;
  char *target;          /* SINK_PATH: the final path */
  char *dir;             /* SINK_PATH: the target's folder, for messages */
  int dir_fd;            /* SINK_PATH: that folder, where the temp file lives */
  char *base;            /* SINK_PATH: the target's last component */
  char *temp_name;       /* SINK_PATH: the temp file's name in dir_fd while it has one */
  bool unnamed_temp;     /* SINK_PATH with O_TMPFILE */
  uint64_t position;     /* bytes written so far */
  uint64_t written_back; /* SINK_PATH: writeback started for [0, written_back) */
  bool drop_source;      /* buffers are views of read-only file mappings */
  /* Where this process maps the file an fd sink writes into
   * (file_mappings.h): a buffer there is refused before it is read. */
  HurrayFileMappings sink_mappings;
  bool keep_mode;           /* SINK_PATH: the target is a regular file whose mode... */
  mode_t target_mode;       /* ...the new file takes (permission bits only) */
  bool failed;              /* a write failed: only abort remains */
  bool statistics;          /* compute statistics for each tensor written */
  HurrayCancelFn cancel_fn; /* asked between pieces of output; NULL: never */
  void *cancel_ctx;

  TensorRecord *tensors;
  size_t tensor_count;
  size_t tensor_capacity;
  HurrayNameSet tensor_names;   /* tensor names and metadata keys each found in O(1) */
  Bytes strings;                /* names and encoded descriptors */
  BufferRecord *buffer_records; /* every tensor's, in write order */
  size_t buffer_record_count;
  size_t buffer_record_capacity;
  bool raw;                 /* a raw writer: its caller sizes its own writes */
  HurrayWritePieces pieces; /* the size of a large buffer's writes */
  uint64_t write_ns;        /* time spent in write calls, for `pieces` */
  uint8_t *stage;           /* fd and path sinks: STAGE_CAPACITY, made on first use */
  size_t staged;            /* bytes in `stage`, already counted in `position` */
  /* Not NO: the stage began at a 2 MiB boundary of the file and gathers
   * that region, which goes out once whole (stage_copy, gather_tail). */
  HurrayGather stage_region;
  uint64_t region_asked; /* 1 + the index of the 2 MiB region last asked about; 0: none */

  MetadataRecord *metadata;
  size_t metadata_count;
  size_t metadata_capacity;
  HurrayNameSet metadata_keys;

  /* The chunk checksums (io.h, HURRAY_CHUNK_BYTES) of every buffer longer
   * than a chunk, in write order: finish puts them in index order. */
  uint64_t *chunk_sums;
  size_t chunk_count;
  size_t chunk_capacity;
};

/* ------------------------------------------------------------ raw output */

/* os_errno: the errno of the failed write, 0 when the kernel reported none. */
static HurrayStatus write_failed(const HurrayWriter *w, int os_errno, const char *why,
                                 HurrayError *error) {
  if (w->kind == SINK_PATH) {
    return hurray__fail_os(error, HURRAY_ERR_IO, os_errno,
                           "write of the temporary file for %s failed: %s", w->target, why);
  }
  return hurray__fail_os(error, HURRAY_ERR_IO, os_errno, "write to fd %d failed: %s", w->fd, why);
}

static HurrayStatus check_cancel(HurrayWriter *w, HurrayError *error) {
  if (w->cancel_fn == NULL || !w->cancel_fn(w->cancel_ctx)) return HURRAY_OK;
  w->failed = true;
  return hurray__fail(error, HURRAY_ERR_CANCELLED,
                      "the write was cancelled; nothing was published");
}

/* Writes all `len` bytes: a short write is continued and EINTR retried,
 * each once the cancel hook has said to go on (a write to a pipe nobody
 * reads blocks until a signal, and the hook is how the caller stops it); a
 * write that makes no progress is an error rather than an endless loop. */
static HurrayStatus fd_write_all(HurrayWriter *w, const void *data, size_t len,
                                 HurrayError *error) {
  const uint8_t *p = data;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : len;
    uint64_t t0 = hurray__clock_ns();
    ssize_t n = w->sys->write(w->sys->ctx, w->fd, p, chunk);
    w->write_ns += hurray__clock_ns() - t0;
    if (n < 0) {
      if (errno == EINTR) {
        HURRAY_RETURN_NOT_OK(check_cancel(w, error));
        continue;
      }
      int saved = errno;
      return write_failed(w, saved, strerror(saved), error);
    }
    if (n == 0 || (size_t)n > chunk) {
      return write_failed(w, 0, n == 0 ? "no bytes written" : "more bytes written than asked",
                          error);
    }
    p += n;
    len -= (size_t)n;
    /* A signal that comes once a pipe or socket took some of the bytes
     * ends the write with a short count, not EINTR: without asking here,
     * the next write blocked with the signal already spent. */
    if (len > 0) HURRAY_RETURN_NOT_OK(check_cancel(w, error));
  }
  return HURRAY_OK;
}

/* fsync, retried when a signal interrupted it (EINTR). Any other error,
 * EIO above all, is final: after a failed writeback the kernel may drop the
 * dirty pages, and a second fsync can then succeed without them ever
 * reaching the disk. */
static int fsync_retry(const HurraySys *sys, int fd) {
  int rc;
  do {
    rc = sys->fsync(sys->ctx, fd);
  } while (rc != 0 && errno == EINTR);
  return rc;
}

/* A file that is fsynced before it is published gets its writeback
 * started every HURRAY_WRITEBACK_STEP bytes, so that the disk writes while
 * the rest is still being produced instead of all of it waiting for the
 * final fsync, as `cp` followed by `sync` waits. Measured (1 GiB,
 * bench/results/io-speed.md, section 5): with it the conversion took 0.8-0.9x
 * the time of cp + sync, without it 1.1x. Only the path sink: an fd
 * or a callback belongs to the caller, who decides when it is synced. */
static void start_writeback(HurrayWriter *w) {
  if (w->kind != SINK_PATH || w->sys->start_writeback == NULL ||
      w->position - w->written_back < HURRAY_WRITEBACK_STEP) {
    return;
  }
  (void)w->sys->start_writeback(w->sys->ctx, w->fd, (off_t)w->written_back,
                                (off_t)(w->position - w->written_back));
  w->written_back = w->position;
}

/* Writes out what is staged. A failure ends the writer (only abort, or a
 * finish that refuses, remain). */
static HurrayStatus flush_stage(HurrayWriter *w, HurrayError *error) {
  HurrayGather region = w->stage_region;
  size_t n = w->staged;
  bool whole = n == STAGE_CAPACITY;
  w->stage_region = HURRAY_GATHER_NO;
  w->staged = 0;
  /* A region gathered for huge writes goes out in one write. Anything else
   * goes out in pieces that end on 64 KiB boundaries of the file, as a
   * probe inside one buffer does: one write over such a boundary fills a
   * folio as large as its alignment allows, which costs what a huge write
   * costs where those are dear (ADR-0026). 1 MiB writes at 1 MiB
   * boundaries made a save of 64 KiB tensors 1.7x slower on the
   * development VM once it had taken back its free memory. */
  uint64_t start = w->position - n;
  uint64_t before = w->write_ns;
  for (size_t at = 0; at < n;) {
    size_t len = n - at;
    size_t to_boundary = (size_t)(HURRAY_WRITE_STEP - (start + at) % HURRAY_WRITE_STEP);
    if (region != HURRAY_GATHER_WHOLE && len > to_boundary) len = to_boundary;
    HurrayStatus status = fd_write_all(w, w->stage + at, len, error);
    if (status != HURRAY_OK) {
      w->failed = true;
      return status;
    }
    at += len;
  }
  if (region != HURRAY_GATHER_NO) {
    hurray__write_pieces_gathered(&w->pieces, region, whole, w->write_ns - before);
  }
  if (n > 0) start_writeback(w);
  return HURRAY_OK;
}

static bool stage_ready(HurrayWriter *w) {
  return w->stage != NULL || (w->stage = malloc(STAGE_CAPACITY)) != NULL;
}

/* Asks the write-size rule about the 2 MiB region beginning at the
 * writer's position, once per region: a tail under 64 KiB that a large
 * buffer's path was told not to gather is staged next, and the stage would
 * ask again at the same place. A second ask would use up a second region of
 * a wait (the waits after a slow huge write were halved), so it gets the
 * answer the first one did. */
static HurrayGather ask_region(HurrayWriter *w) {
  uint64_t region = w->position / HURRAY_HUGE_WRITE_STEP + 1;
  if (w->region_asked == region) return HURRAY_GATHER_NO;
  w->region_asked = region;
  return hurray__write_pieces_gather(&w->pieces);
}

/* Copies [data, data + len) into the stage, which is made.
 *
 * A stage fills up to a boundary of the file and goes out there, unless a
 * direct write, a large buffer's piece or the finish needs it out first.
 * Staging that begins at a 2 MiB region's first byte asks whether to
 * gather the region (hurray__write_pieces_gather): gathered, the stage goes
 * out when the region is whole, in one 2 MiB write or as the probe.
 * Otherwise it goes out at each 1 MiB boundary (STAGE_BYTES), so that the
 * next region's first byte begins a stage and is asked about in turn.
 * Before, the stage went out whenever 1 MiB had gathered, from wherever the
 * last write ended, and a file of small tensors sat in folios as small as
 * each write's alignment allowed (a file of 64 KiB tensors was mapped at
 * 0.43x the speed of one in 2 MiB folios). */
static HurrayStatus stage_copy(HurrayWriter *w, const uint8_t *data, size_t len,
                               HurrayError *error) {
  while (len > 0) {
    if (w->stage_region == HURRAY_GATHER_NO && w->staged == 0 &&
        w->position % HURRAY_HUGE_WRITE_STEP == 0) {
      w->stage_region = ask_region(w);
    }
    size_t boundary = w->stage_region != HURRAY_GATHER_NO ? STAGE_CAPACITY : STAGE_BYTES;
    size_t room = boundary - (size_t)(w->position % boundary);
    size_t take = len < room ? len : room;
    memcpy(w->stage + w->staged, data, take);
    w->staged += take;
    w->position += take;
    data += take;
    len -= take;
    if (w->position % boundary == 0) HURRAY_RETURN_NOT_OK(flush_stage(w, error));
  }
  return HURRAY_OK;
}

/* Copies a write of at most `most` bytes into the stage; false when it
 * must go out directly (a callback sink, a longer write, or no memory for
 * the stage). */
static bool stage_put(HurrayWriter *w, const void *data, size_t len, size_t most,
                      HurrayStatus *status, HurrayError *error) {
  if (w->kind == SINK_CALLBACK || w->raw || len > most || !stage_ready(w)) return false;
  *status = check_cancel(w, error);
  if (*status == HURRAY_OK) *status = stage_copy(w, data, len, error);
  return true;
}

/* Writes [data, data + len): joined to a region being gathered, staged if
 * at most `stage_most` bytes, or else straight from the caller's memory. */
static HurrayStatus emit_upto(HurrayWriter *w, const void *data, size_t len, size_t stage_most,
                              HurrayError *error) {
  const uint8_t *p = data;
  if (len > 0 && w->stage_region != HURRAY_GATHER_NO) {
    /* The bytes up to the end of the region being gathered join it. */
    size_t take = STAGE_CAPACITY - w->staged;
    if (take > len) take = len;
    HURRAY_RETURN_NOT_OK(check_cancel(w, error));
    HURRAY_RETURN_NOT_OK(stage_copy(w, p, take, error));
    p += take;
    len -= take;
  }
  HurrayStatus staged = HURRAY_OK;
  if (len == 0 || stage_put(w, p, len, stage_most, &staged, error)) return staged;
  HURRAY_RETURN_NOT_OK(flush_stage(w, error));
  /* With a cancel hook, output goes in pieces of
   * HURRAY_WRITER_CANCEL_INTERVAL bytes with a check before each, so one
   * large buffer cannot keep a cancelled write running for long. */
  while (len > 0) {
    HURRAY_RETURN_NOT_OK(check_cancel(w, error));
    size_t piece = w->cancel_fn != NULL && len > HURRAY_WRITER_CANCEL_INTERVAL
                       ? HURRAY_WRITER_CANCEL_INTERVAL
                       : len;
    HurrayStatus status = w->kind == SINK_CALLBACK ? w->write_fn(w->write_ctx, p, piece)
                                                   : fd_write_all(w, p, piece, error);
    if (status != HURRAY_OK) {
      w->failed = true;
      if (w->kind == SINK_CALLBACK) {
        /* A code this library does not define reads as a failed write. */
        const char *name = hurray_status_name(status);
        if (strcmp(name, "HURRAY_ERR_UNKNOWN") == 0) {
          hurray__fail(error, HURRAY_ERR_IO, "write callback failed with unknown status %d",
                       (int)status);
          return HURRAY_ERR_IO;
        }
        hurray__fail(error, status, "write callback failed with %s", name);
      }
      return status;
    }
    w->position += piece;
    p += piece;
    len -= piece;
    start_writeback(w);
  }
  return HURRAY_OK;
}

static HurrayStatus emit(HurrayWriter *w, const void *data, size_t len, HurrayError *error) {
  return emit_upto(w, data, len, STAGE_DIRECT - 1, error);
}

/* Makes room for `more` elements of `size` bytes after the first `count`
 * of the array `data` (`*capacity` elements), doubling from `first`.
 * Returns the array, moved or not, or NULL when memory runs out; `data`
 * is then untouched and still the caller's. */
static void *reserve_array(void *data, size_t *capacity, size_t count, size_t more, size_t size,
                           size_t first) {
  if (data != NULL && *capacity - count >= more) return data;
  size_t grown_capacity = *capacity ? *capacity : first;
  while (grown_capacity - count < more) {
    if (grown_capacity > SIZE_MAX / 2 / size) return NULL;
    grown_capacity *= 2;
  }
  void *grown = realloc(data, grown_capacity * size);
  if (grown != NULL) *capacity = grown_capacity;
  return grown;
}

/* The chunk checksums this writer gives a buffer of `len` bytes. */
static uint64_t chunks_of(uint64_t len) { return hurray__chunks_of(len, HURRAY_CHUNK_BYTES); }

/* Room for `more` chunk checksums, made before a tensor's bytes go out:
 * refused, the tensor is refused with the writer still usable, and no
 * write is ever followed by an allocation failure. The table must fit the
 * index (at most HURRAY_MAX_INDEX_BYTES / 8 sums) and the metadata limit. */
static HurrayStatus reserve_chunks(HurrayWriter *w, uint64_t more, HurrayError *error) {
  if (more == 0) return HURRAY_OK;
  if (w->chunk_count == 0 && w->metadata_count >= HURRAY_MAX_METADATA_ENTRIES) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "a buffer of over %llu bytes needs a metadata entry for its chunk "
                        "checksums, and the file already has the %u entries it may hold",
                        (unsigned long long)HURRAY_CHUNK_BYTES, HURRAY_MAX_METADATA_ENTRIES);
  }
  uint64_t limit = HURRAY_MAX_INDEX_BYTES / 8;
  if (more > limit - w->chunk_count) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "the file's chunk checksums (one per %llu bytes of data) would not fit "
                        "the %u-byte index",
                        (unsigned long long)HURRAY_CHUNK_BYTES, HURRAY_MAX_INDEX_BYTES);
  }
  uint64_t *sums = reserve_array(w->chunk_sums, &w->chunk_capacity, w->chunk_count, (size_t)more,
                                 sizeof *sums, 256);
  if (sums == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  w->chunk_sums = sums;
  return HURRAY_OK;
}

/* Feeds [p, p + n) of a buffer to the hash of its chunks: `at` is where p
 * lies in the buffer; each chunk's sum is appended as the chunk ends. */
static void hash_chunks(HurrayWriter *w, HurrayHashStream *chunk, uint64_t at, const uint8_t *p,
                        uint64_t n, uint64_t len) {
  while (n > 0) {
    uint64_t in = at % HURRAY_CHUNK_BYTES;
    uint64_t take = HURRAY_CHUNK_BYTES - in;
    if (take > n) take = n;
    if (in == 0) hurray__hash_stream_reset(chunk);
    hurray__hash_stream_update(chunk, p, (size_t)take);
    at += take;
    p += take;
    n -= take;
    if (at % HURRAY_CHUNK_BYTES == 0 || at == len) {
      w->chunk_sums[w->chunk_count++] = hurray__hash_stream_digest(chunk);
    }
  }
}

/* Whether the rest of a large buffer, `left` bytes at the writer's
 * position, is a tail that begins a 2 MiB region to gather in the stage
 * with what follows it (padding, small tensors, the head of the next
 * buffer), so that the region goes out in one write, or as the probe
 * (write_pieces.h). Written in 64 KiB pieces, every region that two
 * buffers share sat in small folios: half of a file of 4 MiB buffers, read
 * at 0.75x the speed of a file in 2 MiB folios (io-speed.md, section 7). */
static HurrayGather gather_tail(HurrayWriter *w, uint64_t left) {
  if (w->raw || w->position % HURRAY_HUGE_WRITE_STEP != 0 || left >= HURRAY_HUGE_WRITE_STEP ||
      !stage_ready(w)) {
    return HURRAY_GATHER_NO;
  }
  return ask_region(w);
}

/* Writes one buffer and computes its checksum (and its chunks' checksums,
 * for a buffer longer than a chunk). Into a file, in pieces of 64 KiB or
 * 2 MiB (write_pieces.h), each hashed just before it is written: one pass
 * over the source instead of a hash pass and then a copy pass. Anything
 * staged goes out before each piece is handed out, so that a piece's time
 * is its own, except a region being gathered (gather_tail), which
 * the buffer's first bytes complete. A callback gets the buffer in one
 * call, as before. */
static HurrayStatus emit_hashed(HurrayWriter *w, const void *data, uint64_t len, uint64_t *sum,
                                HurrayError *error) {
  bool chunked = chunks_of(len) > 0;
  HurrayHashStream chunk;
  if (w->kind == SINK_CALLBACK || len <= HURRAY_WRITE_STEP) {
    *sum = hurray__checksum(data, (size_t)len);
    if (chunked) hash_chunks(w, &chunk, 0, data, len, len);
    /* A whole buffer of up to 64 KiB is staged: written straight, it would
     * straddle 64 KiB boundaries of the file and leave folios of 4 to
     * 32 KiB behind. */
    return emit_upto(w, data, (size_t)len, STAGE_DIRECT, error);
  }
  HurrayHashStream hs;
  hurray__hash_stream_reset(&hs);
  const uint8_t *p = data, *kept = data;
  uint64_t at = 0;
  while (at < len) {
    uint64_t n;
    if (w->stage_region != HURRAY_GATHER_NO) {
      n = STAGE_CAPACITY - w->staged;
      if (n > len - at) n = len - at;
    } else {
      HURRAY_RETURN_NOT_OK(flush_stage(w, error));
      n = hurray__write_piece(&w->pieces, w->position, len - at, w->write_ns);
      HurrayGather gather = gather_tail(w, len - at);
      if (gather != HURRAY_GATHER_NO) {
        w->stage_region = gather;
        n = len - at;
      }
    }
    hurray__hash_stream_update(&hs, p, (size_t)n);
    if (chunked) hash_chunks(w, &chunk, at, p, n, len);
    HURRAY_RETURN_NOT_OK(emit(w, p, (size_t)n, error));
    p += n;
    at += n;
    if (w->drop_source && (uint64_t)(p - kept) >= HURRAY_DROP_STEP) {
      hurray__drop_mapped_pages(kept, (uint64_t)(p - kept));
      kept = p;
    }
  }
  *sum = hurray__hash_stream_digest(&hs);
  return HURRAY_OK;
}

void hurray__writer_drop_source_pages(HurrayWriter *w, bool on) {
  if (w != NULL) w->drop_source = on;
}

static HurrayStatus pad_to(HurrayWriter *w, uint64_t alignment, HurrayError *error) {
  static const uint8_t zeros[4096];
  uint64_t pad = (alignment - w->position % alignment) % alignment;
  while (pad > 0) {
    size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
    HURRAY_RETURN_NOT_OK(emit(w, zeros, n, error));
    pad -= n;
  }
  return HURRAY_OK;
}

/* ------------------------------------------------------------------ open */

static HurrayStatus writer_new(SinkKind kind, HurrayWriter **out, HurrayError *error) {
  HurrayWriter *w = calloc(1, sizeof *w);
  if (w == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  w->kind = kind;
  w->sys = &hurray__sys_default;
  w->fd = -1;
  w->dir_fd = -1;
  hurray__write_pieces_init(&w->pieces, hurray__write_folios_choice());
  *out = w;
  return HURRAY_OK;
}

static HurrayStatus write_header(HurrayWriter *w, HurrayError *error) {
  uint8_t header[HURRAY_FILE_HEADER_BYTES] = {0};
  memcpy(header, hurray__file_magic, 8);
  hurray__put_le(header + 8, HURRAY_FILE_FORMAT_MAJOR, 2);
  hurray__put_le(header + 10, HURRAY_FILE_FORMAT_MINOR, 2);
  return emit(w, header, sizeof header, error);
}

static HurrayStatus finish_open(HurrayWriter *w, HurrayWriter **out, HurrayError *error) {
  HurrayStatus status = write_header(w, error);
  if (status != HURRAY_OK) {
    hurray_writer_abort(w);
    return status;
  }
  *out = w;
  return HURRAY_OK;
}

/* A new file's mode before the umask: what open(2) in cp, numpy.save,
 * torch.save and safetensors gives, so a umask of 002 (a group's shared
 * model folder) yields a file the group can replace, as theirs do. */
#define NEW_FILE_MODE 0666

/* How much of the target's name a temporary name repeats: at most
 * TEMP_STEM_BYTES, cut at a UTF-8 character boundary. The rest of the
 * temporary name adds about 30 bytes, and a target named near the 255-byte
 * limit failed to be linked after the whole file had been written. */
#define TEMP_STEM_BYTES 100

static int temp_stem(const char *base) {
  size_t n = strlen(base);
  if (n <= TEMP_STEM_BYTES) return (int)n;
  n = TEMP_STEM_BYTES;
  while (n > 0 && ((unsigned char)base[n] & 0xC0) == 0x80) n--;
  return (int)n;
}

/* Writes a hidden name for the temporary file into `name` (TEMP_NAME_BYTES):
 * the target's stem, this process and a random token, so that no one
 * else's file has it and a name taken by someone else is not guessed. */
#define TEMP_NAME_BYTES (TEMP_STEM_BYTES + 64)

static void new_temp_name(const HurrayWriter *w, char *name) {
  uint32_t token = 0;
  if (getentropy(&token, sizeof token) != 0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    token = (uint32_t)now.tv_nsec ^ (uint32_t)(uintptr_t)name;
  }
  snprintf(name, TEMP_NAME_BYTES, ".%.*s.hurray-tmp-%d-%08x", temp_stem(w->base), w->base,
           (int)getpid(), (unsigned)token);
}

/* Tries new hidden names in the target's folder until `make` (O_EXCL open
 * or link) succeeds or fails otherwise than EEXIST; records the name in
 * temp_name. Returns what `make` returned last, with errno. */
static int make_temp_name(HurrayWriter *w, int (*make)(HurrayWriter *, const char *),
                          HurrayError *error, HurrayStatus *status) {
  w->temp_name = malloc(TEMP_NAME_BYTES);
  if (w->temp_name == NULL) {
    *status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    return -1;
  }
  *status = HURRAY_OK;
  for (int attempt = 0;; attempt++) {
    new_temp_name(w, w->temp_name);
    int rc = make(w, w->temp_name);
    if (rc >= 0 || errno != EEXIST || attempt >= 100) {
      if (rc < 0) {
        int saved = errno;
        free(w->temp_name);
        w->temp_name = NULL;
        errno = saved;
      }
      return rc;
    }
  }
}

/* A new target's file gets NEW_FILE_MODE less the umask from openat
 * itself, as the O_TMPFILE file does (the umask cannot be read without
 * /proc, where this fallback runs). A replaced file's is private until
 * open_temp gives it the target's bits: it is visible while written. */
static int create_named(HurrayWriter *w, const char *name) {
  w->fd = w->sys->openat(w->sys->ctx, w->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                         w->keep_mode ? 0600 : NEW_FILE_MODE);
  return w->fd;
}

/* Opens the temporary file in the target's folder. An O_TMPFILE file has no
 * name at all until finish links it, so a crash leaves nothing behind. */
static HurrayStatus open_temp(HurrayWriter *w, HurrayError *error) {
  const HurraySys *sys = w->sys;
#ifdef O_TMPFILE
  /* Publishing an unnamed file goes through /proc/self/fd; without /proc,
   * use a named temporary file from the start. Any failure of the O_TMPFILE
   * open (a file system without it, an old kernel) falls back too; a real
   * problem with the folder shows up again in the named file's open. */
  if (sys->access(sys->ctx, "/proc/self/fd", X_OK) == 0) {
    w->fd = sys->openat(sys->ctx, w->dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, NEW_FILE_MODE);
  }
  if (w->fd >= 0) {
    w->unnamed_temp = true;
    if (w->keep_mode) (void)sys->fchmod(sys->ctx, w->fd, w->target_mode);
    return HURRAY_OK;
  }
#endif
  HurrayStatus status;
  if (make_temp_name(w, create_named, error, &status) < 0) {
    if (status != HURRAY_OK) return status;
    int saved = errno;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved, "cannot create a temporary file in %s: %s",
                           w->dir, strerror(saved));
  }
  /* Best effort: a file only its owner can read is still a good file. */
  if (w->keep_mode) (void)sys->fchmod(sys->ctx, w->fd, w->target_mode);
  return HURRAY_OK;
}

/* Splits the target into folder and last component, kept for naming the
 * temporary file and for syncing the folder. */
static HurrayStatus split_target(HurrayWriter *w, HurrayError *error) {
  char *dir_copy = strdup(w->target);
  char *base_copy = strdup(w->target);
  if (dir_copy != NULL && base_copy != NULL) {
    w->dir = strdup(dirname(dir_copy));
    w->base = strdup(basename(base_copy));
  }
  free(dir_copy);
  free(base_copy);
  if (w->dir == NULL || w->base == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  return HURRAY_OK;
}

/* Opens the target's folder: the temporary file is made, named, renamed
 * and removed relative to it, and it is what gets synced after the rename. */
static HurrayStatus open_folder(HurrayWriter *w, HurrayError *error) {
  const HurraySys *sys = w->sys;
  w->dir_fd = sys->openat(sys->ctx, AT_FDCWD, w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
#ifdef O_PATH
  /* A folder its user may write and enter but not list (mode 0300, a drop
   * box) cannot be opened for reading; O_PATH serves every *at call, and
   * only the best-effort fsync of the folder is lost. */
  if (w->dir_fd < 0 && errno == EACCES) {
    w->dir_fd = sys->openat(sys->ctx, AT_FDCWD, w->dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  }
#endif
  if (w->dir_fd < 0) {
    int saved = errno;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved,
                           "cannot open the folder %s to write %s: %s", w->dir, w->base,
                           strerror(saved));
  }
  return HURRAY_OK;
}

/* Decides from what the target is now whether it can be replaced. A
 * regular file is, and the new file takes its permission bits (not its
 * owner). A symbolic link is replaced by the new file, as rename does: the
 * file it points to is left alone, and gives the new file its permission
 * bits. A folder, FIFO, socket or device is refused before anything is
 * written, and so is a link to one: a pipe or a device cannot be replaced
 * atomically, and renaming a file over one (or over /dev/stdout, a link)
 * would destroy it, as root even /dev/null. */
static HurrayStatus inspect_target(HurrayWriter *w, HurrayError *error) {
  const HurraySys *sys = w->sys;
  if (w->target[strlen(w->target) - 1] == '/') {
    /* basename() drops the slash, and the file would be published under
     * the name before it, replacing a file there: open(2) refuses such a
     * path for a new file too. */
    return hurray__fail_os(error, HURRAY_ERR_IO, EISDIR,
                           "%s ends in '/', which names a folder; a file is written to a path "
                           "without one",
                           w->target);
  }
  struct stat st;
  if (sys->stat == NULL) return HURRAY_OK;
  if (sys->stat(sys->ctx, w->target, &st, false) != 0) {
    /* A name the folder cannot hold is refused now, not by the rename
     * after the whole file was written (a file of 256 bytes' name on
     * ext4). Anything else (nothing there yet) is for the writes to say. */
    if (errno != ENAMETOOLONG) return HURRAY_OK;
    /* stat says the same of a whole path past PATH_MAX, which the writer
     * never needs whole: it works relative to the folder. */
    long most = pathconf(w->dir, _PC_NAME_MAX);
    if (strlen(w->base) <= (most > 0 ? (size_t)most : (size_t)NAME_MAX)) return HURRAY_OK;
    return hurray__fail_os(error, HURRAY_ERR_IO, ENAMETOOLONG, "cannot write %s: %s", w->target,
                           strerror(ENAMETOOLONG));
  }
  if (S_ISLNK(st.st_mode) && sys->stat(sys->ctx, w->target, &st, true) != 0) {
    return HURRAY_OK; /* a link to nothing (yet) */
  }
  if (S_ISREG(st.st_mode)) {
    w->keep_mode = true;
    w->target_mode = st.st_mode & 0777;
    return HURRAY_OK;
  }
  return hurray__fail_os(error, HURRAY_ERR_IO, S_ISDIR(st.st_mode) ? EISDIR : ENXIO,
                         "%s is not a regular file (%s): a file is written by renaming a "
                         "finished one over the target; to write into a pipe or a device, open "
                         "it and write to its descriptor",
                         w->target, hurray__file_kind(st.st_mode));
}

/* A writer on `path`'s temporary file (target, folder and base name set,
 * temporary open), through `sys`; nothing is left behind on failure. */
static HurrayStatus open_target(const char *path, const HurraySys *sys, HurrayWriter **out,
                                HurrayError *error) {
  HurrayWriter *w = NULL;
  HURRAY_RETURN_NOT_OK(writer_new(SINK_PATH, &w, error));
  w->sys = sys;
  w->target = strdup(path);
  HurrayStatus status = w->target == NULL
                            ? hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory")
                            : split_target(w, error);
  if (status == HURRAY_OK) status = inspect_target(w, error);
  if (status == HURRAY_OK) status = open_folder(w, error);
  if (status == HURRAY_OK) status = open_temp(w, error);
  if (status != HURRAY_OK) {
    hurray_writer_abort(w);
    return status;
  }
  *out = w;
  return HURRAY_OK;
}

HurrayStatus hurray__writer_open_sys(const char *path, const HurraySys *sys, HurrayWriter **out,
                                     HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (path == NULL || out == NULL || path[0] == '\0' || sys == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "a non-empty path and out are required");
  }
  HurrayWriter *w = NULL;
  HURRAY_RETURN_NOT_OK(open_target(path, sys, &w, error));
  return finish_open(w, out, error);
}

HurrayStatus hurray_writer_open(const char *path, HurrayWriter **out, HurrayError *error) {
  return hurray__writer_open_sys(path, &hurray__sys_default, out, error);
}

HurrayStatus hurray_writer_open_fd(int fd, HurrayWriter **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (fd < 0 || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "a valid fd and out are required");
  }
  /* The header is only staged here, so a closed or read-only descriptor
   * would otherwise first fail at finish, after every tensor was written. */
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) {
    return hurray__fail_os(error, HURRAY_ERR_IO, flags < 0 ? errno : EBADF, "fd %d is %s", fd,
                           flags < 0 ? "not open" : "open for reading only");
  }
  HurrayWriter *w = NULL;
  HURRAY_RETURN_NOT_OK(writer_new(SINK_FD, &w, error));
  w->fd = fd;
  HurrayStatus status = hurray__file_mappings_of_fd(fd, &w->sink_mappings, error);
  if (status != HURRAY_OK) {
    hurray_writer_abort(w);
    return status;
  }
  return finish_open(w, out, error);
}

HurrayStatus hurray_writer_open_callback(HurrayWriteFn write_fn, void *ctx, HurrayWriter **out,
                                         HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (write_fn == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "write_fn and out are required");
  }
  HurrayWriter *w = NULL;
  HURRAY_RETURN_NOT_OK(writer_new(SINK_CALLBACK, &w, error));
  w->write_fn = write_fn;
  w->write_ctx = ctx;
  return finish_open(w, out, error);
}

/* ------------------------------------------------------------- name set */

/* Name of tensor record `i` (HurrayNameOf over the writer). */
static void tensor_name_of(const void *ctx, size_t i, const char **name, size_t *len) {
  const HurrayWriter *w = ctx;
  *name = (const char *)w->strings.data + w->tensors[i].name_at;
  *len = w->tensors[i].name_len;
}

/* Key of metadata record `i`. */
static void metadata_key_of(const void *ctx, size_t i, const char **name, size_t *len) {
  const HurrayWriter *w = ctx;
  *name = w->metadata[i].key;
  *len = w->metadata[i].key_len;
}

/* The slot of `name` among the tensor names, or with `keys` the metadata
 * keys (hurray__name_set_slot). */
static size_t *name_slot(const HurrayWriter *w, HurrayNameSet *set, bool keys, const char *name,
                         size_t len) {
  return hurray__name_set_slot(set, keys ? metadata_key_of : tensor_name_of, w, name, len);
}

/* ---------------------------------------------------------------- tensors */

/* The descriptor as stored: host memory on CPU:0, every buffer READY. */
static HurrayStatus file_form(const HurrayDescriptor *d, HurrayDescriptor **out,
                              HurrayError *error) {
  HURRAY_RETURN_NOT_OK(hurray_descriptor_clone(d, out, error));
  (*out)->device_type = HURRAY_DEVICE_CPU;
  (*out)->device_id = 0;
  (*out)->memory_class = HURRAY_MEMORY_HOST;
  for (uint32_t i = 0; i < (*out)->buffer_count; i++) {
    (*out)->buffers[i].sync_mode = HURRAY_SYNC_READY;
  }
  return HURRAY_OK;
}

static HurrayStatus check_name(const char *name, const char *what, uint32_t limit,
                               HurrayError *error) {
  size_t len = name == NULL ? 0 : strlen(name);
  if (len == 0 || !hurray__utf8_valid(name, len)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "%s must be non-empty UTF-8", what);
  }
  if (len > limit) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "%s of %zu bytes exceeds the limit of %u", what,
                        len, limit);
  }
  return HURRAY_OK;
}

/* Refuses a buffer that lies in a mapping of the file being written,
 * before anything reads it. */
static HurrayStatus check_not_in_sink(const HurrayWriter *w, const char *name, uint32_t buffer,
                                      const void *data, uint64_t len, HurrayError *error) {
  return hurray__refuse_mapped(&w->sink_mappings, name, buffer, data, len, error);
}

/* Whether a bool tensor's elements are stored as 0 or 1, as the format
 * requires (descriptor-encoding.md 4.1): a byte of 2 reads as true to one
 * reader and as false to another, and C++ code that reads it as bool (torch)
 * has undefined behaviour. `data` is buffer 0 when `buffers` is NULL. */
HurrayStatus hurray__check_bool_bytes(const char *name, const HurrayDescriptor *d,
                                      const HurrayBufferList *buffers, HurrayError *error);

static HurrayStatus check_bool_bytes(const char *name, const HurrayDescriptor *root,
                                     const HurrayDescriptor *node, const HurrayBufferList *buffers,
                                     const void *data, HurrayError *error) {
  if (node->layout.kind == HURRAY_LAYOUT_COMPOSITE) {
    for (uint32_t i = 0; i < node->layout.member_count; i++) {
      HURRAY_RETURN_NOT_OK(
          check_bool_bytes(name, root, node->layout.members[i].descriptor, buffers, data, error));
    }
    return HURRAY_OK;
  }
  if (node->dtype != HURRAY_DTYPE_BOOL || node->quant.kind != HURRAY_QUANT_NONE) return HURRAY_OK;
  /* The elements only, where they lie in one run: a row-major dense
   * tensor's numel bytes, a sparse tensor's stored values, from the byte
   * offset. Bytes around them, those a strided view skips and a page
   * pool's unused pages may hold anything. */
  uint64_t n = 0;
  if (node->layout.kind == HURRAY_LAYOUT_SPARSE) {
    const HurrayLayout *l = &node->layout;
    n = l->nnz * (l->format == HURRAY_SPARSE_BSR ? l->block_rows * l->block_cols : 1);
  } else if (node->layout.kind != HURRAY_LAYOUT_DENSE || node->strides != NULL ||
             hurray_descriptor_numel(node, &n, NULL) != HURRAY_OK) {
    return HURRAY_OK;
  }
  uint32_t b = node->layout.data_buffer;
  const uint8_t *p = buffers != NULL ? hurray_buffer_data(hurray_buffer_list_get(buffers, b))
                                     : data;
  p += node->byte_offset; /* validation: offset + elements lie in the buffer */
  return hurray__check_bool_run(name, p, n, error);
}

HurrayStatus hurray__check_bool_run(const char *name, const uint8_t *p, uint64_t n,
                                    HurrayError *error) {
  uint8_t any = 0;
  for (uint64_t k = 0; k < n; k++) any |= p[k];
  if ((any & 0xFE) == 0) return HURRAY_OK;
  uint64_t at = 0;
  while (p[at] <= 1) at++;
  return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                      "tensor \"%s\": bool element %llu is %u; bool elements are stored as 0 or 1",
                      name, (unsigned long long)at, p[at]);
}

HurrayStatus hurray__check_bool_bytes(const char *name, const HurrayDescriptor *d,
                                      const HurrayBufferList *buffers, HurrayError *error) {
  return check_bool_bytes(name, d, d, buffers, NULL, error);
}

/* Whether tensor `name` can join the file: room for it, a name not yet
 * used, host memory, READY buffers, buffers that match its descriptor and
 * none that lies in the file being written. */
static HurrayStatus check_tensor(HurrayWriter *w, const char *name, size_t name_len,
                                 const HurrayDescriptor *d, const HurrayBufferList *buffers,
                                 HurrayError *error) {
  if (w->tensor_count >= HURRAY_MAX_TENSORS) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "a file holds at most %u tensors",
                        HURRAY_MAX_TENSORS);
  }
  if (hurray__name_set_reserve(&w->tensor_names, w->tensor_count) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  size_t *slot = name_slot(w, &w->tensor_names, false, name, name_len);
  if (*slot != 0) {
    return hurray__fail(error, HURRAY_ERR_DUPLICATE_NAME, "tensor \"%s\" is already in the file",
                        name);
  }
  if (d->memory_class == HURRAY_MEMORY_DEVICE) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "tensor \"%s\": device memory cannot be written; copy it to the host",
                        name);
  }
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    if (d->buffers[i].sync_mode != HURRAY_SYNC_READY) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "tensor \"%s\": buffer %u is not READY; synchronise before writing",
                          name, i);
    }
  }
  /* Before validation, which reads a sparse tensor's indices. */
  for (size_t i = 0; i < hurray_buffer_list_len(buffers); i++) {
    const HurrayBuffer *b = hurray_buffer_list_get(buffers, i);
    HURRAY_RETURN_NOT_OK(check_not_in_sink(w, name, (uint32_t)i, hurray_buffer_data(b),
                                           hurray_buffer_size(b), error));
  }
  HURRAY_RETURN_NOT_OK(hurray_validate_buffer_placement(d, buffers, error));
  return check_bool_bytes(name, d, d, buffers, NULL, error);
}

/* Room for one more tensor record and `buffer_count` more buffer records. */
static HurrayStatus reserve_records(HurrayWriter *w, uint32_t buffer_count, HurrayError *error) {
  TensorRecord *tensors = reserve_array(w->tensors, &w->tensor_capacity, w->tensor_count, 1,
                                        sizeof *tensors, 16);
  if (tensors == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  w->tensors = tensors;
  BufferRecord *records = reserve_array(w->buffer_records, &w->buffer_record_capacity,
                                        w->buffer_record_count, buffer_count, sizeof *records, 16);
  if (records == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  w->buffer_records = records;
  return HURRAY_OK;
}

/* Appends tensor `name` (checked: valid, new) with `stored`, its descriptor
 * as the file keeps it: records its index entry and streams its buffers,
 * buffer i from `buffers` or, without a list, from `data` (one buffer).
 * On failure the entry is taken back; a failed write has ended the writer. */
static HurrayStatus append_tensor(HurrayWriter *w, const char *name, size_t name_len,
                                  const HurrayDescriptor *stored, const HurrayBufferList *buffers,
                                  const void *data, HurrayError *error) {
  uint8_t *encoded = NULL;
  size_t encoded_len = 0;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_encode(stored, &encoded, &encoded_len, error));
  HurrayStatus status = reserve_records(w, stored->buffer_count, error);
  TensorRecord t = {0};
  size_t strings_len = w->strings.len;
  size_t chunk_count = w->chunk_count;
  t.name_at = w->strings.len;
  t.name_len = name_len;
  bytes_put(&w->strings, name, name_len);
  t.descriptor_at = w->strings.len;
  t.descriptor_len = encoded_len;
  bytes_put(&w->strings, encoded, encoded_len);
  free(encoded);
  if (status == HURRAY_OK && w->strings.failed) {
    w->strings.failed = false; /* nothing was appended: the arena is as it was */
    status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  uint64_t chunks = 0;
  for (uint32_t i = 0; i < stored->buffer_count; i++) {
    chunks += chunks_of(stored->buffers[i].byte_size);
  }
  if (status == HURRAY_OK) status = reserve_chunks(w, chunks, error);
  t.buffers_at = w->buffer_record_count;
  t.buffer_count = stored->buffer_count;
  /* Stream the buffers: no copy, each piece hashed and then written. The
   * hash runs on this thread, not beside the write on a second one: on the
   * 2-CPU machine of bench/results/io-speed.md the overlap made converting
   * 1 GiB slower (0.92-1.07 s against 0.58-0.74 s), the two passes fighting
   * over the same pages; hashing a piece just before its write also maps
   * in the pages the write then copies from. */
  for (uint32_t i = 0; status == HURRAY_OK && i < stored->buffer_count; i++) {
    uint32_t alignment = stored->buffers[i].alignment;
    uint64_t length = stored->buffers[i].byte_size;
    const void *bytes = buffers != NULL ? hurray_buffer_data(hurray_buffer_list_get(buffers, i))
                                        : data;
    status = pad_to(w, alignment > HURRAY_FILE_ALIGNMENT ? alignment : HURRAY_FILE_ALIGNMENT,
                    error);
    if (status != HURRAY_OK) break;
    BufferRecord *b = &w->buffer_records[t.buffers_at + i];
    b->offset = w->position;
    b->length = length;
    status = emit_hashed(w, bytes, length, &b->checksum, error);
  }
  if (status != HURRAY_OK) {
    w->strings.len = strings_len;
    w->chunk_count = chunk_count;
    return status;
  }
  w->buffer_record_count += t.buffer_count;
  w->tensors[w->tensor_count] = t;
  w->tensor_count++;
  *name_slot(w, &w->tensor_names, false, name, name_len) = w->tensor_count;
  return HURRAY_OK;
}

/* What computing a tensor's statistics means for its write: a kind they do
 * not cover keeps what it came with (OK); no memory for them fails the
 * write rather than drop them silently. */
static HurrayStatus statistics_kept(HurrayStatus computed, HurrayError *error) {
  if (computed != HURRAY_ERR_NO_MEMORY) return HURRAY_OK;
  return hurray__fail(error, computed, "out of memory for statistics");
}

/* After a failed write only finish (which refuses) and abort remain
 * (io.h): a setter that answered OK there said the file would get what it
 * never will. */
static HurrayStatus check_not_failed(const HurrayWriter *w, HurrayError *error) {
  if (w->failed) {
    return hurray__fail(error, HURRAY_ERR_STATE, "an earlier write failed; abort the writer");
  }
  return HURRAY_OK;
}

HurrayStatus hurray_writer_write_tensor(HurrayWriter *w, const char *name,
                                        const HurrayDescriptor *d, const HurrayBufferList *buffers,
                                        HurrayError *error) {
  if (w == NULL || d == NULL || buffers == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "writer, descriptor and buffers are required");
  }
  HURRAY_RETURN_NOT_OK(check_not_failed(w, error));
  HURRAY_RETURN_NOT_OK(check_name(name, "tensor name", HURRAY_MAX_TENSOR_NAME_BYTES, error));
  size_t name_len = strlen(name);
  HURRAY_RETURN_NOT_OK(check_tensor(w, name, name_len, d, buffers, error));
  HurrayDescriptor *stored = NULL;
  HurrayStatus status = file_form(d, &stored, error);
  if (status == HURRAY_OK && w->statistics) {
    status = statistics_kept(hurray_compute_statistics(stored, buffers, NULL), error);
  }
  if (status == HURRAY_OK) status = append_tensor(w, name, name_len, stored, buffers, NULL, error);
  hurray_descriptor_destroy(stored);
  return status;
}

/* The natural alignment of `dtype`'s elements in memory (a power of two,
 * at most 64): what the Python bindings and the C API record for dense
 * data, so that a file does not depend on where the data sat. */
static uint32_t element_alignment(HurrayDType dtype) {
  uint32_t bits = hurray_dtype_bits(dtype);
  uint32_t alignment = bits >= 8 ? (bits / 8) & -(bits / 8) : 1;
  return alignment > 64 ? 64 : alignment;
}

/* Tensor i of a batch as a dense descriptor in `d` (reused: its single
 * buffer entry is rewritten), checked as write_tensor checks its input. */
/* A batch's failure says which of its tensors failed: `status`, with the
 * message prefixed by the tensor's number (and its name, once checked). */
static HurrayStatus batch_failure(HurrayStatus status, size_t i, const char *name,
                                  HurrayError *error) {
  if (status != HURRAY_OK && error != NULL) {
    char message[sizeof error->message];
    snprintf(message, sizeof message, "%s", error->message);
    if (name != NULL) {
      hurray__fail_os(error, status, error->os_errno, "tensor %zu (\"%s\"): %s", i, name, message);
    } else {
      hurray__fail_os(error, status, error->os_errno, "tensor %zu: %s", i, message);
    }
  }
  return status;
}

static HurrayStatus dense_form(HurrayWriter *w, const HurrayDenseTensor *t, size_t i,
                               HurrayDescriptor *d, size_t *name_len, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(batch_failure(
      check_name(t->name, "tensor name", HURRAY_MAX_TENSOR_NAME_BYTES, error), i, NULL, error));
  *name_len = strlen(t->name);
  /* The codes hurray_descriptor_create gives for the same dtype and rank. */
  if (hurray_dtype_bits(t->dtype) == 0) {
    return batch_failure(
        hurray__fail(error, HURRAY_ERR_DTYPE, "dtype: unknown code %d", (int)t->dtype), i, t->name,
        error);
  }
  if (t->rank > HURRAY_MAX_RANK) {
    return batch_failure(
        hurray__fail(error, HURRAY_ERR_LIMIT, "shape: rank %u exceeds the limit of %u", t->rank,
                     HURRAY_MAX_RANK),
        i, t->name, error);
  }
  if ((t->rank > 0 && t->shape == NULL) || (t->data == NULL && t->byte_size > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "tensor %zu (\"%s\"): a shape and data are required", i, t->name);
  }
  if (!hurray__descriptor_reserve_rank(d, t->rank)) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  d->dtype = t->dtype;
  d->rank = t->rank;
  for (uint32_t k = 0; k < t->rank; k++) d->shape[k] = t->shape[k];
  d->buffers[0].alignment = element_alignment(t->dtype);
  d->buffers[0].byte_size = t->byte_size;
  d->stat_flags = 0;
  /* The descriptor's own rules: byte_size at least what dtype and shape
   * need, and every product fits; then exactly that (the header's promise:
   * more would write bytes no element owns into the file). */
  HURRAY_RETURN_NOT_OK(batch_failure(hurray_descriptor_validate(d, error), i, t->name, error));
  uint64_t numel = 1, need = 0;
  for (uint32_t k = 0; k < t->rank; k++) numel *= t->shape[k]; /* validated: no overflow */
  (void)hurray_dtype_storage_bytes(t->dtype, numel, &need);
  if (t->byte_size != need) {
    return batch_failure(hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                                      "byte_size %llu is not the %llu bytes of the dense tensor",
                                      (unsigned long long)t->byte_size, (unsigned long long)need),
                         i, t->name, error);
  }
  HURRAY_RETURN_NOT_OK(check_not_in_sink(w, t->name, 0, t->data, t->byte_size, error));
  HURRAY_RETURN_NOT_OK(check_bool_bytes(t->name, d, d, NULL, t->data, error));
  if (w->tensor_count >= HURRAY_MAX_TENSORS) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "a file holds at most %u tensors",
                        HURRAY_MAX_TENSORS);
  }
  if (hurray__name_set_reserve(&w->tensor_names, w->tensor_count) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  if (*name_slot(w, &w->tensor_names, false, t->name, *name_len) != 0) {
    return hurray__fail(error, HURRAY_ERR_DUPLICATE_NAME, "tensor \"%s\" is already in the file",
                        t->name);
  }
  return HURRAY_OK;
}

/* Statistics need the data as a buffer list; only then is one built. */
static HurrayStatus dense_statistics(HurrayDescriptor *d, const HurrayDenseTensor *t,
                                     HurrayError *error) {
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  HurrayStatus status = hurray_buffer_list_create(&list, NULL);
  if (status == HURRAY_OK) {
    status = hurray_buffer_create((void *)t->data, t->byte_size, NULL, NULL, &b, NULL);
  }
  if (status == HURRAY_OK) status = hurray_buffer_list_push(list, b, NULL);
  if (status == HURRAY_OK) {
    b = NULL;
    /* The data may sit at any address (io.h): placement checks the file's
     * alignment against it, and refused an unaligned tensor's statistics,
     * which were then dropped without a word. The statistics read each
     * element through memcpy, so the address asks for no alignment here. */
    uint32_t alignment = d->buffers[0].alignment;
    d->buffers[0].alignment = 1;
    status = hurray_compute_statistics(d, list, NULL);
    d->buffers[0].alignment = alignment;
  }
  hurray_buffer_destroy(b);
  hurray_buffer_list_destroy(list);
  return statistics_kept(status, error);
}

HurrayStatus hurray_writer_write_dense_batch(HurrayWriter *w, const HurrayDenseTensor *tensors,
                                             size_t count, size_t *written, HurrayError *error) {
  if (written != NULL) *written = 0;
  if (w == NULL || (tensors == NULL && count > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "writer and tensors are required");
  }
  HURRAY_RETURN_NOT_OK(check_not_failed(w, error));
  if (count == 0) return HURRAY_OK;
  HurrayDescriptor *d = NULL;
  HurrayStatus status = hurray_descriptor_create(HURRAY_DTYPE_UINT8, 0, NULL, &d, error);
  if (status == HURRAY_OK) {
    status = hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 0, 1, HURRAY_SYNC_READY, NULL,
                                          error);
  }
  for (size_t i = 0; status == HURRAY_OK && i < count; i++) {
    size_t name_len = 0;
    status = dense_form(w, &tensors[i], i, d, &name_len, error);
    if (status == HURRAY_OK && w->statistics) status = dense_statistics(d, &tensors[i], error);
    if (status == HURRAY_OK) {
      status = append_tensor(w, tensors[i].name, name_len, d, NULL, tensors[i].data, error);
    }
    if (status == HURRAY_OK && written != NULL) *written = i + 1;
  }
  hurray_descriptor_destroy(d);
  return status;
}

HurrayStatus hurray_writer_set_cancel(HurrayWriter *w, HurrayCancelFn fn, void *ctx,
                                      HurrayError *error) {
  if (w == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "writer is required");
  w->cancel_fn = fn;
  w->cancel_ctx = fn != NULL ? ctx : NULL;
  return HURRAY_OK;
}

HurrayStatus hurray_writer_set_statistics(HurrayWriter *w, bool enabled, HurrayError *error) {
  if (w == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "writer is required");
  HURRAY_RETURN_NOT_OK(check_not_failed(w, error));
  w->statistics = enabled;
  return HURRAY_OK;
}

/* --------------------------------------------------------------- metadata */

static HurrayStatus set_metadata(HurrayWriter *w, const char *key, HurrayMetadataType type,
                                 const void *value, size_t len, HurrayError *error) {
  if (w == NULL || (value == NULL && len > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "writer and value are required");
  }
  HURRAY_RETURN_NOT_OK(check_not_failed(w, error));
  HURRAY_RETURN_NOT_OK(check_name(key, "metadata key", HURRAY_MAX_METADATA_KEY_BYTES, error));
  if (strcmp(key, HURRAY_CHUNK_CHECKSUMS_KEY) == 0) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "metadata key \"%s\" is reserved for the file's chunk checksums", key);
  }
  if (len > HURRAY_MAX_INDEX_BYTES) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "metadata \"%s\": a %zu-byte value cannot fit the %u-byte index", key, len,
                        HURRAY_MAX_INDEX_BYTES);
  }
  size_t key_len = strlen(key);
  if (hurray__name_set_reserve(&w->metadata_keys, w->metadata_count) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  size_t *slot = name_slot(w, &w->metadata_keys, true, key, key_len);
  /* The chunk-checksum table, once due, takes one of the entries. */
  size_t room = HURRAY_MAX_METADATA_ENTRIES - (w->chunk_count > 0 ? 1 : 0);
  if (*slot == 0 && w->metadata_count >= room) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "a file holds at most %u metadata entries (%zu besides its chunk "
                        "checksums)",
                        HURRAY_MAX_METADATA_ENTRIES, room);
  }
  uint8_t *copy = malloc(len ? len : 1);
  if (copy == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  if (len) memcpy(copy, value, len);
  if (*slot != 0) { /* set again: replaced, even with another type */
    MetadataRecord *m = &w->metadata[*slot - 1];
    free(m->value);
    m->type = type;
    m->value = copy;
    m->value_len = len;
    return HURRAY_OK;
  }
  if (w->metadata_count == w->metadata_capacity) {
    size_t capacity = w->metadata_capacity ? w->metadata_capacity * 2 : 8;
    MetadataRecord *grown = realloc(w->metadata, capacity * sizeof *grown);
    if (grown == NULL) {
      free(copy);
      return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    }
    w->metadata = grown;
    w->metadata_capacity = capacity;
  }
  MetadataRecord *m = &w->metadata[w->metadata_count];
  m->key = malloc(key_len + 1);
  if (m->key == NULL) {
    free(copy);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  memcpy(m->key, key, key_len + 1);
  m->key_len = key_len;
  m->type = type;
  m->value = copy;
  m->value_len = len;
  w->metadata_count++;
  *slot = w->metadata_count;
  return HURRAY_OK;
}

HurrayStatus hurray_writer_set_metadata_string(HurrayWriter *w, const char *key, const char *value,
                                               HurrayError *error) {
  if (value == NULL || !hurray__utf8_valid(value, strlen(value))) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "metadata \"%s\": string values must be UTF-8", key ? key : "");
  }
  return set_metadata(w, key, HURRAY_METADATA_STRING, value, strlen(value), error);
}

HurrayStatus hurray_writer_set_metadata_int(HurrayWriter *w, const char *key, int64_t value,
                                            HurrayError *error) {
  uint8_t bytes[8];
  hurray__put_le(bytes, (uint64_t)value, 8);
  return set_metadata(w, key, HURRAY_METADATA_INT, bytes, 8, error);
}

HurrayStatus hurray_writer_set_metadata_float(HurrayWriter *w, const char *key, double value,
                                              HurrayError *error) {
  uint64_t bits;
  memcpy(&bits, &value, 8);
  uint8_t bytes[8];
  hurray__put_le(bytes, bits, 8);
  return set_metadata(w, key, HURRAY_METADATA_FLOAT, bytes, 8, error);
}

HurrayStatus hurray_writer_set_metadata_bool(HurrayWriter *w, const char *key, bool value,
                                             HurrayError *error) {
  uint8_t byte = value ? 1 : 0;
  return set_metadata(w, key, HURRAY_METADATA_BOOL, &byte, 1, error);
}

HurrayStatus hurray_writer_set_metadata_bytes(HurrayWriter *w, const char *key, const void *value,
                                              size_t len, HurrayError *error) {
  return set_metadata(w, key, HURRAY_METADATA_BYTES, value, len, error);
}

/* ----------------------------------------------------------------- finish */

static void bytes_le(Bytes *b, uint64_t v, size_t n) {
  uint8_t tmp[8];
  hurray__put_le(tmp, v, n);
  bytes_put(b, tmp, n);
}

static int compare_names(const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c != 0 ? c : (alen > blen) - (alen < blen);
}

static int compare_tensors(const void *pa, const void *pb, void *strings) {
  const TensorRecord *a = pa, *b = pb;
  const char *base = strings;
  return compare_names(base + a->name_at, a->name_len, base + b->name_at, b->name_len);
}

static int compare_metadata(const void *pa, const void *pb) {
  const MetadataRecord *a = pa, *b = pb;
  return compare_names(a->key, a->key_len, b->key, b->key_len);
}

/* The index goes out as it is encoded, a piece of INDEX_PIECE bytes at a
 * time, hashed on the way: built whole first, it was the largest single
 * allocation of a save (109 MiB for a million tensors, fresh pages all). */
#define INDEX_PIECE ((size_t)1 << 20)

typedef struct IndexOut {
  HurrayWriter *w;
  Bytes piece;
  HurrayHashStream hash;
  uint64_t len; /* emitted so far */
  HurrayStatus status;
  HurrayError *error;
} IndexOut;

static void index_emit_piece(IndexOut *o) {
  if (o->status != HURRAY_OK) return;
  if (o->piece.failed) {
    o->status = hurray__fail(o->error, HURRAY_ERR_NO_MEMORY, "out of memory building the index");
    return;
  }
  if (o->len + o->piece.len > HURRAY_MAX_INDEX_BYTES) {
    o->status = hurray__fail(o->error, HURRAY_ERR_LIMIT, "the index exceeds the limit of %u bytes",
                             HURRAY_MAX_INDEX_BYTES);
    return;
  }
  hurray__hash_stream_update(&o->hash, o->piece.data, o->piece.len);
  o->len += o->piece.len;
  o->status = emit(o->w, o->piece.data, o->piece.len, o->error);
  o->piece.len = 0;
}

static void index_put(IndexOut *o, const void *data, size_t n) {
  bytes_put(&o->piece, data, n);
  if (o->piece.len >= INDEX_PIECE) index_emit_piece(o);
}

static void index_le(IndexOut *o, uint64_t v, size_t n) {
  uint8_t tmp[8];
  hurray__put_le(tmp, v, n);
  index_put(o, tmp, n);
}

static void put_metadata(IndexOut *o, const char *key, size_t key_len, uint8_t type,
                         const uint8_t *value, size_t value_len) {
  index_le(o, key_len, 2);
  index_put(o, key, key_len);
  index_le(o, type, 1);
  index_le(o, value_len, 4);
  index_put(o, value, value_len);
}

/* The chunk-checksum table's value (spec 7.1): the chunk size, then the
 * sums of every chunked buffer in index order (tensors sorted, buffers in
 * record order), from w->chunk_sums, which holds them in write order. */
static bool chunk_table(const HurrayWriter *w, Bytes *value) {
  size_t *first = malloc(w->buffer_record_count * sizeof *first);
  if (first == NULL) return false;
  size_t at = 0;
  for (size_t i = 0; i < w->buffer_record_count; i++) {
    first[i] = at;
    at += (size_t)chunks_of(w->buffer_records[i].length);
  }
  bytes_le(value, HURRAY_CHUNK_BYTES, 8);
  for (size_t i = 0; i < w->tensor_count; i++) {
    const TensorRecord *t = &w->tensors[i];
    for (uint32_t k = 0; k < t->buffer_count; k++) {
      size_t b = t->buffers_at + k;
      uint64_t n = chunks_of(w->buffer_records[b].length);
      for (uint64_t c = 0; c < n; c++) bytes_le(value, w->chunk_sums[first[b] + c], 8);
    }
  }
  free(first);
  return !value->failed;
}

/* Every tensor entry, then the metadata entries with the chunk table at
 * its key's place among the sorted keys (spec 7). */
static void put_index_entries(HurrayWriter *w, IndexOut *o, const Bytes *chunks) {
  for (size_t i = 0; i < w->tensor_count && o->status == HURRAY_OK; i++) {
    const TensorRecord *t = &w->tensors[i];
    const BufferRecord *buffers = w->buffer_records + t->buffers_at;
    index_le(o, t->name_len, 2);
    index_put(o, w->strings.data + t->name_at, t->name_len);
    index_le(o, t->descriptor_len, 4);
    index_put(o, w->strings.data + t->descriptor_at, t->descriptor_len);
    index_le(o, t->buffer_count, 4);
    for (uint32_t k = 0; k < t->buffer_count; k++) {
      index_le(o, buffers[k].offset, 8);
      index_le(o, buffers[k].length, 8);
      index_le(o, buffers[k].checksum, 8);
    }
  }
  static const char chunk_key[] = HURRAY_CHUNK_CHECKSUMS_KEY;
  size_t chunk_key_len = sizeof chunk_key - 1;
  bool table_due = chunks->len > 0;
  for (size_t i = 0; i <= w->metadata_count && o->status == HURRAY_OK; i++) {
    const MetadataRecord *m = i < w->metadata_count ? &w->metadata[i] : NULL;
    if (table_due &&
        (m == NULL || compare_names(chunk_key, chunk_key_len, m->key, m->key_len) < 0)) {
      put_metadata(o, chunk_key, chunk_key_len, HURRAY_METADATA_CHUNK_CHECKSUMS, chunks->data,
                   chunks->len);
      table_due = false;
    }
    if (m != NULL) put_metadata(o, m->key, m->key_len, (uint8_t)m->type, m->value, m->value_len);
  }
  index_emit_piece(o);
}

static HurrayStatus write_index_and_trailer(HurrayWriter *w, HurrayError *error) {
  /* Sorted names let readers binary-search without building a table. */
  if (w->tensor_count > 1) {
    qsort_r(w->tensors, w->tensor_count, sizeof *w->tensors, compare_tensors, w->strings.data);
  }
  if (w->metadata_count > 1) {
    qsort(w->metadata, w->metadata_count, sizeof *w->metadata, compare_metadata);
  }
  Bytes chunks = {0};
  if (w->chunk_count > 0 && !chunk_table(w, &chunks)) {
    free(chunks.data);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory building the index");
  }
  size_t metadata_count = w->metadata_count + (chunks.len > 0 ? 1 : 0);
  HurrayStatus status = pad_to(w, 8, error);
  uint64_t index_offset = w->position;
  IndexOut out = {.w = w, .status = status, .error = error};
  hurray__hash_stream_reset(&out.hash);
  if (status == HURRAY_OK) {
    put_index_entries(w, &out, &chunks);
    status = out.status;
  }
  free(chunks.data);
  free(out.piece.data);
  if (status == HURRAY_OK) {
    uint8_t trailer[HURRAY_FILE_TRAILER_BYTES] = {0};
    hurray__put_le(trailer + TRAILER_INDEX_OFFSET, index_offset, 8);
    hurray__put_le(trailer + TRAILER_INDEX_LENGTH, out.len, 8);
    hurray__put_le(trailer + TRAILER_INDEX_CHECKSUM, hurray__hash_stream_digest(&out.hash), 8);
    hurray__put_le(trailer + TRAILER_TENSOR_COUNT, w->tensor_count, 8);
    hurray__put_le(trailer + TRAILER_METADATA_COUNT, metadata_count, 8);
    hurray__put_le(trailer + TRAILER_MAJOR, HURRAY_FILE_FORMAT_MAJOR, 2);
    hurray__put_le(trailer + TRAILER_MINOR, HURRAY_FILE_FORMAT_MINOR, 2);
    hurray__put_le(trailer + TRAILER_CHECKSUM, hurray__checksum(trailer, TRAILER_CHECKSUM), 8);
    memcpy(trailer + TRAILER_MAGIC, hurray__trailer_magic, 8);
    status = emit(w, trailer, sizeof trailer, error);
  }
  return status;
}

/* After the rename: makes the new directory entry durable. Best effort by
 * design: the target has already been replaced, so failing here would
 * report an error for a file that is in place and complete (the spec, §12.3
 * step 6). */
static void sync_directory(HurrayWriter *w) { (void)fsync_retry(w->sys, w->dir_fd); }

/* The asynchronous signals that end a process by default. They are held
 * back (this thread only) from the moment the finished file gets a name
 * until it has the target's, a few system calls: a Ctrl-C in between would
 * leave the hidden name behind. They are delivered right after. */
static void hold_signals(sigset_t *old) {
  sigset_t set;
  sigemptyset(&set);
  static const int held[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM, SIGUSR1, SIGUSR2};
  for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) sigaddset(&set, held[i]);
  pthread_sigmask(SIG_BLOCK, &set, old);
}

static int link_unnamed(HurrayWriter *w, const char *name) {
  char proc_path[64];
  snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", w->fd);
  return w->sys->linkat(w->sys->ctx, AT_FDCWD, proc_path, w->dir_fd, name, AT_SYMLINK_FOLLOW);
}

/* Names the finished file (an unnamed temp file is linked under a hidden
 * name), closes it and renames it over the target; on failure abort
 * removes the hidden name (temp_name). */
static HurrayStatus name_and_rename(HurrayWriter *w, HurrayError *error) {
  const HurraySys *sys = w->sys;
  if (w->unnamed_temp) {
    /* Link the unnamed file under a hidden name, then rename over the
     * target: linkat cannot replace an existing file, rename can. Not
     * linked, the file vanishes with its descriptor. */
    HurrayStatus status;
    if (make_temp_name(w, link_unnamed, error, &status) < 0) {
      if (status != HURRAY_OK) return status;
      int saved = errno;
      return hurray__fail_os(error, HURRAY_ERR_IO, saved,
                             "cannot link the finished file for %s: %s", w->target,
                             strerror(saved));
    }
  }
  /* Close before the rename, and check it: on some file systems (NFS)
   * close is where a write error is finally reported. The descriptor is
   * gone whatever close returns, so it is never closed twice. */
  int fd = w->fd;
  w->fd = -1;
  if (sys->close(sys->ctx, fd) != 0) {
    int saved = errno;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved,
                           "close of the temporary file for %s failed: %s", w->target,
                           strerror(saved));
  }
  if (sys->renameat(sys->ctx, w->dir_fd, w->temp_name, w->dir_fd, w->base) != 0) {
    int saved = errno;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved,
                           "cannot rename the finished file onto %s: %s", w->target,
                           strerror(saved));
  }
  return HURRAY_OK;
}

/* Gives the finished temp file the target's name, atomically. Every step
 * before the rename may fail and leave the target untouched; abort then
 * removes whatever temporary name the file has (temp_name). */
static HurrayStatus publish(HurrayWriter *w, HurrayError *error) {
  const HurraySys *sys = w->sys;
  if (fsync_retry(sys, w->fd) != 0) {
    int saved = errno;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved,
                           "fsync of the temporary file for %s failed: %s", w->target,
                           strerror(saved));
  }
  /* The last moment a cancel can keep the target untouched. */
  HURRAY_RETURN_NOT_OK(check_cancel(w, error));
  sigset_t old_mask;
  if (w->unnamed_temp) hold_signals(&old_mask);
  HurrayStatus s = name_and_rename(w, error);
  if (w->unnamed_temp) pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  HURRAY_RETURN_NOT_OK(s);
  free(w->temp_name);
  w->temp_name = NULL; /* nothing left to clean up */
  sync_directory(w);
  return HURRAY_OK;
}

/* Ends a hurray file (index and trailer) or a raw one (the caller wrote
 * the whole format), publishes a path target, and frees the writer. */
static HurrayStatus finish(HurrayWriter *w, bool hurray_index, HurrayError *error) {
  if (w == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "writer is required");
  }
  HurrayStatus status = w->failed      ? hurray__fail(error, HURRAY_ERR_STATE,
                                                      "an earlier write failed; nothing was published")
                        : hurray_index ? write_index_and_trailer(w, error)
                                       : HURRAY_OK;
  if (status == HURRAY_OK) status = flush_stage(w, error);
  if (status == HURRAY_OK && w->kind == SINK_PATH) {
    status = publish(w, error);
  }
  hurray_writer_abort(w); /* frees; removes a temp file only if one is left */
  return status;
}

HurrayStatus hurray_writer_finish(HurrayWriter *w, HurrayError *error) {
  return finish(w, true, error);
}

void hurray_writer_abort(HurrayWriter *w) {
  if (w == NULL) return;
  if (w->kind == SINK_PATH) {
    /* Errors are ignored: there is nothing more to undo, and the caller's
     * error already says what went wrong first. */
    if (w->fd >= 0) (void)w->sys->close(w->sys->ctx, w->fd);
    if (w->temp_name != NULL) (void)w->sys->unlinkat(w->sys->ctx, w->dir_fd, w->temp_name);
    if (w->dir_fd >= 0) (void)w->sys->close(w->sys->ctx, w->dir_fd);
  }
  for (size_t i = 0; i < w->metadata_count; i++) {
    free(w->metadata[i].key);
    free(w->metadata[i].value);
  }
  free(w->tensors);
  free(w->strings.data);
  free(w->buffer_records);
  free(w->stage);
  free(w->metadata);
  free(w->chunk_sums);
  hurray__name_set_free(&w->tensor_names);
  hurray__name_set_free(&w->metadata_keys);
  free(w->target);
  free(w->dir);
  free(w->base);
  free(w->temp_name);
  hurray__file_mappings_free(&w->sink_mappings);
  free(w);
}

/* ------------------------------------------------- raw atomic files */
/* The same temporary file and publication for files of other formats
 * (safetensors, GGUF: src/formats/), so that they get the atomicity of
 * hurray files: no hurray header, index or trailer. */

HurrayStatus hurray__raw_writer_open(const char *path, HurrayWriter **out, HurrayError *error) {
  return hurray__raw_writer_open_sys(path, &hurray__sys_default, out, error);
}

HurrayStatus hurray__raw_writer_open_sys(const char *path, const HurraySys *sys,
                                         HurrayWriter **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (path == NULL || sys == NULL || out == NULL || path[0] == '\0') {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "path and out are required");
  }
  HURRAY_RETURN_NOT_OK(open_target(path, sys, out, error));
  (*out)->raw = true;
  return HURRAY_OK;
}

HurrayStatus hurray__raw_writer_write(HurrayWriter *w, const void *data, size_t len,
                                      HurrayError *error) {
  return emit(w, data, len, error);
}

uint64_t hurray__raw_writer_piece(HurrayWriter *w, uint64_t left) {
  return hurray__write_piece(&w->pieces, w->position, left, w->write_ns);
}

HurrayStatus hurray__raw_writer_pad(HurrayWriter *w, uint64_t alignment, HurrayError *error) {
  return pad_to(w, alignment, error);
}

uint64_t hurray__raw_writer_position(const HurrayWriter *w) { return w->position; }

/* Copies `len` bytes at `offset` of `src_fd` in the kernel when it can
 * (copy_file_range: no trip through user memory, a reflink on file systems
 * that share extents), else with pread and write in 8 MiB steps. */
HurrayStatus hurray__raw_writer_copy(HurrayWriter *w, int src_fd, uint64_t offset, uint64_t len,
                                     HurrayError *error) {
  HURRAY_RETURN_NOT_OK(flush_stage(w, error)); /* the kernel copy writes to the fd itself */
  bool kernel = true;
  /* With a cancel hook, the kernel copies in steps it is asked between. */
  uint64_t most = w->cancel_fn != NULL ? 4 * (uint64_t)HURRAY_WRITER_CANCEL_INTERVAL : 1u << 30;
  while (len > 0) {
    size_t chunk = len > most ? (size_t)most : (size_t)len;
    if (kernel) {
      HURRAY_RETURN_NOT_OK(check_cancel(w, error));
      off64_t in_off = (off64_t)offset;
      ssize_t n = copy_file_range(src_fd, &in_off, w->fd, NULL, chunk, 0);
      if (n > 0) {
        offset += (uint64_t)n;
        len -= (uint64_t)n;
        w->position += (uint64_t)n;
        start_writeback(w);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP &&
          errno != EBADF && errno != EPERM) {
        int saved = errno;
        w->failed = true;
        return write_failed(w, saved, strerror(saved), error);
      }
      kernel = false; /* unsupported here, or the source ended early: plain copy */
    }
    static const size_t step = 8u << 20;
    uint8_t *buf = malloc(step);
    if (buf == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    while (len > 0) {
      size_t want = len > step ? step : (size_t)len;
      ssize_t n = pread(src_fd, buf, want, (off_t)offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int saved = errno;
        free(buf);
        w->failed = true;
        return hurray__fail_os(error, n == 0 ? HURRAY_ERR_TRUNCATED : HURRAY_ERR_IO,
                               n == 0 ? 0 : saved, "reading the source for %s: %s", w->target,
                               n == 0 ? "it ends early" : strerror(saved));
      }
      HurrayStatus s = emit(w, buf, (size_t)n, error);
      if (s != HURRAY_OK) {
        free(buf);
        return s;
      }
      offset += (uint64_t)n;
      len -= (uint64_t)n;
    }
    free(buf);
  }
  return HURRAY_OK;
}

HurrayStatus hurray__raw_writer_finish(HurrayWriter *w, HurrayError *error) {
  return finish(w, false, error);
}
