/*
 * The reader. Opening reads the trailer and the index and checks every
 * structural rule of docs/spec/file-format.md; tensor data is only touched
 * by get_tensor (pread mode), verify and read_buffer. Every count and length
 * from the file is bounded by the file's real size or a hard limit before
 * it sizes anything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "../buffer/placement.h"
#include "format.h"
#include "hash.h"
#include "hurray/byte_source.h"
#include "file_mappings.h"
#include "memory_limit.h"
#include "reader_origin.h"
#include "sys.h"

/* A read-only mapping of the whole file, shared by the reader and every
 * buffer handed out; unmapped when the last of them lets go. */
typedef struct Mapping {
  void *base;
  size_t len;
  atomic_size_t refs;
} Mapping;

static void mapping_unref(Mapping *m) {
  if (atomic_fetch_sub(&m->refs, 1) == 1) {
    munmap(m->base, m->len);
    free(m);
  }
}

static void release_mapped(void *data, void *ctx) {
  (void)data;
  mapping_unref(ctx);
}

static void release_owned(void *data, void *ctx) {
  (void)ctx;
  free(data);
}

/* A tensor's index entry, decoded on demand from the index (entry_at):
 * every pointer is into the index, which open has checked whole. The name
 * is not NUL-terminated (print it with "%.*s"). */
typedef struct TensorEntry {
  const char *name;
  size_t name_len;
  const uint8_t *descriptor;
  size_t descriptor_len;
  const uint8_t *buffers; /* buffer_count records of (offset, length, checksum) */
  uint32_t buffer_count;
  size_t index; /* in index order (entry_at's; not set by parse_tensors) */
} TensorEntry;

typedef struct MetadataEntry {
  const char *key;
  size_t key_len;
  HurrayMetadataType type;
  const uint8_t *value;
  size_t value_len;
} MetadataEntry;

struct HurrayReader {
  int fd;          /* -1 for a source reader */
  bool has_source; /* bytes come from `source`, not from `fd` */
  HurrayByteSource source;
  uint64_t file_size;
  HurrayReadMode mode;
  Mapping *mapping;    /* MMAP and MMAP_PRIVATE modes */
  uint8_t *index_copy; /* PREAD mode */
  const uint8_t *index;
  uint64_t index_offset;
  uint64_t index_length;
  /* Where each tensor's entry starts in the index (an index is at most
   * HURRAY_MAX_INDEX_BYTES): 4 bytes a tensor is all that open keeps per
   * tensor; names, descriptors and buffer records stay in the index, in the
   * mapping or in index_copy. */
  uint32_t *entries;
  size_t tensor_count;
  MetadataEntry *metadata;
  size_t metadata_count;
  char *arena; /* NUL-terminated metadata keys and string values */
  /* The chunk-checksum table (format 1.1, spec 7.1), NULL when the file
   * has none: the sums of chunks of chunk_size bytes, in the index. */
  const uint8_t *chunk_sums;
  uint64_t chunk_size;
  /* The sums of tensors [0, k * CHUNK_MARK_STRIDE) at chunk_marks[k]: where
   * a tensor's sums start is found with at most CHUNK_MARK_STRIDE - 1
   * entries walked, so that verifying every tensor one by one (the
   * converter does) stays linear in the tensor count. */
  uint64_t *chunk_marks;
  /* NUL-terminated copies of the tensor names, made on the first
   * hurray_reader_tensor_name call (under names_lock): name i at
   * names + name_at[i]. The bindings read names in place instead. */
  pthread_mutex_t names_lock;
  _Atomic(char *) names;
  uint32_t *name_at;
  long online_cpus;      /* sysconf's, read at open: how many threads verify may use */
  HurrayCancelFn cancel; /* HurrayReaderOptions.cancel; NULL: never cancelled */
  void *cancel_ctx;
  _Atomic uint64_t unasked_bytes; /* read since `cancel` was last asked */
  /* How verify reads the file, learnt by its claims and kept from call to
   * call (claim_by_pread): verifying tensor by tensor would otherwise
   * time a mapping in every call. */
  atomic_bool verify_by_pread;
  _Atomic uint64_t verify_pread_bytes; /* read by pread since the first verify */
};

static TensorEntry entry_at(const HurrayReader *r, size_t i) {
  const uint8_t *p = r->index + r->entries[i];
  TensorEntry t;
  t.index = i;
  t.name_len = (size_t)hurray__get_le(p, 2);
  t.name = (const char *)p + 2;
  p += 2 + t.name_len;
  t.descriptor_len = (size_t)hurray__get_le(p, 4);
  t.descriptor = p + 4;
  p += 4 + t.descriptor_len;
  t.buffer_count = (uint32_t)hurray__get_le(p, 4);
  t.buffers = p + 4;
  return t;
}

static bool is_mapped(const HurrayReader *r) {
  return r->mode == HURRAY_READ_MMAP || r->mode == HURRAY_READ_MMAP_PRIVATE;
}

static uint64_t buffer_field(const TensorEntry *t, uint32_t i, size_t field) {
  return hurray__get_le(t->buffers + 24 * (size_t)i + 8 * field, 8);
}

static HurrayStatus pread_all(int fd, void *dst, uint64_t len, uint64_t offset,
                              HurrayError *error) {
  uint8_t *p = dst;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
    ssize_t n = pread(fd, p, chunk, (off_t)offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      int saved = errno;
      return hurray__fail_os(error, HURRAY_ERR_IO, saved, "read failed: %s", strerror(saved));
    }
    if (n == 0) {
      return hurray__fail(error, HURRAY_ERR_TRUNCATED, "file ended during a read at %llu",
                          (unsigned long long)offset);
    }
    p += n;
    len -= (uint64_t)n;
    offset += (uint64_t)n;
  }
  return HURRAY_OK;
}

/* Reads through the source, which is untrusted code: its status is
 * normalised, and an error it left without a message gets one. */
/* What a source's read returned, as the reader reports it. The source
 * wrote into `mine`, the reader's own struct: the caller's `error` is
 * written only on failure (never on success, conventions.md). */
static HurrayStatus source_status(HurrayStatus status, uint64_t offset, uint64_t length,
                                  HurrayError *mine, HurrayError *error) {
  if (status == HURRAY_OK) return HURRAY_OK;
  /* A source reports a transport failure; any other code it may invent
   * would claim something about the file it cannot know. */
  HurrayStatus code = status == HURRAY_ERR_TRUNCATED || status == HURRAY_ERR_NO_MEMORY ||
                              status == HURRAY_ERR_CANCELLED
                          ? status
                          : HURRAY_ERR_IO;
  if (mine->message[0] == '\0') {
    hurray__fail(mine, code, "source: read of %llu bytes at %llu failed",
                 (unsigned long long)length, (unsigned long long)offset);
  }
  mine->code = code;
  if (error != NULL) *error = *mine;
  return code;
}

/* Reads `len` bytes at `offset` of the file: pread, or the source. */
static HurrayStatus read_once(HurrayReader *r, void *dst, uint64_t len, uint64_t offset,
                              HurrayError *error) {
  if (!r->has_source) return pread_all(r->fd, dst, len, offset, error);
  uint64_t end;
  if (!hurray__add_u64(offset, len, &end) || end > r->file_size) {
    return hurray__fail(error, HURRAY_ERR_TRUNCATED, "file ended during a read at %llu",
                        (unsigned long long)offset);
  }
  if (len == 0) return HURRAY_OK;
  HurrayError mine = {0};
  return source_status(r->source.read(r->source.ctx, offset, len, dst, &mine), offset, len, &mine,
                       error);
}

static HurrayStatus cancelled(HurrayError *error) {
  return hurray__fail(error, HURRAY_ERR_CANCELLED, "cancelled by the caller's hook");
}

/* Counts `n` more bytes read, and asks the caller's hook (which must be
 * set) once the bytes since it was last asked reach the interval. */
static bool cancel_due(HurrayReader *r, uint64_t n) {
  uint64_t unasked = atomic_fetch_add_explicit(&r->unasked_bytes, n, memory_order_relaxed) + n;
  if (unasked < HURRAY_READER_CANCEL_INTERVAL) return false;
  atomic_store_explicit(&r->unasked_bytes, 0, memory_order_relaxed);
  return r->cancel(r->cancel_ctx);
}

/* Whether the caller's hook asks to stop before `n` more bytes are read:
 * asked once the bytes read through pread or a source since it was last
 * asked (in any call, on any thread) reach HURRAY_READER_CANCEL_INTERVAL,
 * so that loading thousands of tensors stops as soon as one large read. */
static bool stop_before_reading(HurrayReader *r, uint64_t n) {
  return r->cancel != NULL && cancel_due(r, n);
}

/* read_once in pieces of at most HURRAY_READER_CANCEL_INTERVAL, each
 * counted by stop_before_reading first. */
static HurrayStatus read_at(HurrayReader *r, void *dst, uint64_t len, uint64_t offset,
                            HurrayError *error) {
  if (r->cancel == NULL) return read_once(r, dst, len, offset, error);
  uint8_t *p = dst;
  do {
    uint64_t n = len < HURRAY_READER_CANCEL_INTERVAL ? len : HURRAY_READER_CANCEL_INTERVAL;
    if (stop_before_reading(r, n)) return cancelled(error);
    HURRAY_RETURN_NOT_OK(read_once(r, p, n, offset, error));
    p += n;
    offset += n;
    len -= n;
  } while (len > 0);
  return HURRAY_OK;
}

/* ------------------------------------------------------------------ index */

typedef struct Cursor {
  const uint8_t *p;
  size_t left;
} Cursor;

static bool cursor_take(Cursor *c, size_t n, const uint8_t **at) {
  if (c->left < n) return false;
  *at = c->p;
  c->p += n;
  c->left -= n;
  return true;
}

static int compare_names(const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c != 0 ? c : (alen > blen) - (alen < blen);
}

typedef struct Range {
  uint64_t start;
  uint64_t end;
  size_t tensor;
} Range;

static int compare_ranges(const void *pa, const void *pb) {
  const Range *a = pa, *b = pb;
  return (a->start > b->start) - (a->start < b->start);
}

#define CORRUPT(code, ...) hurray__fail(error, code, __VA_ARGS__)

/* Reads a u16-length-prefixed UTF-8 name: copied NUL-terminated into the
 * arena, or with a NULL arena left in place. */
static HurrayStatus take_name(Cursor *c, char **arena, uint32_t limit, const char *what,
                              size_t index, const char **name_out, size_t *len_out,
                              HurrayError *error) {
  const uint8_t *at;
  if (!cursor_take(c, 2, &at)) {
    return CORRUPT(HURRAY_ERR_MALFORMED, "index: %s %zu is cut short", what, index);
  }
  size_t len = (size_t)hurray__get_le(at, 2);
  if (len == 0 || len > limit) {
    return CORRUPT(len == 0 ? HURRAY_ERR_MALFORMED : HURRAY_ERR_LIMIT,
                   "index: %s %zu has length %zu (1 to %u allowed)", what, index, len, limit);
  }
  if (!cursor_take(c, len, &at)) {
    return CORRUPT(HURRAY_ERR_MALFORMED, "index: %s %zu is cut short", what, index);
  }
  if (!hurray__utf8_valid((const char *)at, len)) {
    return CORRUPT(HURRAY_ERR_MALFORMED, "index: %s %zu is not UTF-8", what, index);
  }
  *len_out = len;
  if (arena == NULL) {
    *name_out = (const char *)at;
    return HURRAY_OK;
  }
  memcpy(*arena, at, len);
  (*arena)[len] = '\0';
  *name_out = *arena;
  *arena += len + 1;
  return HURRAY_OK;
}

/* No two buffers of the index (`total_buffers` in all) may share a byte. */
static HurrayStatus check_no_overlap(const HurrayReader *r, size_t total_buffers,
                                     HurrayError *error) {
  /* The range table is bounded by the index size (24 index bytes per
   * buffer). */
  Range *ranges = malloc((total_buffers ? total_buffers : 1) * sizeof *ranges);
  if (ranges == NULL) return CORRUPT(HURRAY_ERR_NO_MEMORY, "out of memory");
  size_t n = 0;
  for (size_t i = 0; i < r->tensor_count; i++) {
    const TensorEntry entry = entry_at(r, i), *t = &entry;
    for (uint32_t k = 0; k < t->buffer_count; k++) {
      uint64_t length = buffer_field(t, k, 1);
      if (length > 0) {
        ranges[n].start = buffer_field(t, k, 0);
        ranges[n].end = ranges[n].start + length;
        ranges[n].tensor = i;
        n++;
      }
    }
  }
  /* A writer lays buffers out in index order, so the table is usually
   * sorted already: one pass finds out, and qsort runs only when not. */
  bool sorted = true;
  for (size_t i = 1; sorted && i < n; i++) sorted = ranges[i - 1].start <= ranges[i].start;
  if (!sorted) qsort(ranges, n, sizeof *ranges, compare_ranges);
  HurrayStatus status = HURRAY_OK;
  for (size_t i = 1; i < n; i++) {
    if (ranges[i].start < ranges[i - 1].end) {
      TensorEntry a = entry_at(r, ranges[i - 1].tensor), b = entry_at(r, ranges[i].tensor);
      status = CORRUPT(HURRAY_ERR_OVERLAP,
                       "index: buffers of \"%.*s\" and \"%.*s\" overlap at %llu", (int)a.name_len,
                       a.name, (int)b.name_len, b.name, (unsigned long long)ranges[i].start);
      break;
    }
  }
  free(ranges);
  return status;
}

/* Checks every tensor entry in one pass over the index, keeping only where
 * each starts. Names are compared in place with the previous one. */
static HurrayStatus parse_tensors(HurrayReader *r, Cursor *c, HurrayError *error) {
  size_t total_buffers = 0;
  const char *previous = NULL;
  size_t previous_len = 0;
  for (size_t i = 0; i < r->tensor_count; i++) {
    TensorEntry entry, *t = &entry;
    r->entries[i] = (uint32_t)(c->p - r->index);
    HURRAY_RETURN_NOT_OK(take_name(c, NULL, HURRAY_MAX_TENSOR_NAME_BYTES, "tensor name", i,
                                   &t->name, &t->name_len, error));
    int n = (int)t->name_len;
    if (i > 0) {
      int order = compare_names(previous, previous_len, t->name, t->name_len);
      if (order == 0) {
        return CORRUPT(HURRAY_ERR_DUPLICATE_NAME, "index: tensor \"%.*s\" appears twice", n,
                       t->name);
      }
      if (order > 0) {
        return CORRUPT(HURRAY_ERR_MALFORMED, "index: tensor \"%.*s\" is out of order", n, t->name);
      }
    }
    previous = t->name;
    previous_len = t->name_len;
    const uint8_t *at;
    if (!cursor_take(c, 4, &at)) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "index: tensor \"%.*s\" is cut short", n, t->name);
    }
    uint64_t descriptor_len = hurray__get_le(at, 4);
    if (descriptor_len > HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES) {
      return CORRUPT(HURRAY_ERR_LIMIT,
                     "index: tensor \"%.*s\" descriptor of %llu bytes exceeds %u", n, t->name,
                     (unsigned long long)descriptor_len, HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES);
    }
    if (!cursor_take(c, (size_t)descriptor_len, &t->descriptor) || !cursor_take(c, 4, &at)) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "index: tensor \"%.*s\" descriptor is cut short", n,
                     t->name);
    }
    t->descriptor_len = (size_t)descriptor_len;
    uint64_t buffer_count = hurray__get_le(at, 4);
    if (buffer_count > HURRAY_MAX_BUFFERS) {
      return CORRUPT(HURRAY_ERR_LIMIT, "index: tensor \"%.*s\" claims %llu buffers", n, t->name,
                     (unsigned long long)buffer_count);
    }
    if (!cursor_take(c, 24 * (size_t)buffer_count, &t->buffers)) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "index: tensor \"%.*s\" buffer list is cut short", n,
                     t->name);
    }
    t->buffer_count = (uint32_t)buffer_count;
    for (uint32_t k = 0; k < t->buffer_count; k++) {
      uint64_t offset = buffer_field(t, k, 0), length = buffer_field(t, k, 1), end;
      if (offset % HURRAY_FILE_ALIGNMENT != 0) {
        return CORRUPT(HURRAY_ERR_BUFFER_ALIGNMENT,
                       "index: tensor \"%.*s\" buffer %u starts at %llu, not a multiple of 64", n,
                       t->name, k, (unsigned long long)offset);
      }
      if (offset < HURRAY_FILE_HEADER_BYTES || !hurray__add_u64(offset, length, &end) ||
          end > r->index_offset) {
        return CORRUPT(HURRAY_ERR_RANGE,
                       "index: tensor \"%.*s\" buffer %u [%llu, +%llu) lies outside the data "
                       "region [64, %llu)",
                       n, t->name, k, (unsigned long long)offset, (unsigned long long)length,
                       (unsigned long long)r->index_offset);
      }
    }
    total_buffers += t->buffer_count;
  }
  return check_no_overlap(r, total_buffers, error);
}

static HurrayStatus parse_metadata(HurrayReader *r, Cursor *c, char **arena, HurrayError *error) {
  for (size_t i = 0; i < r->metadata_count; i++) {
    MetadataEntry *m = &r->metadata[i];
    HURRAY_RETURN_NOT_OK(take_name(c, arena, HURRAY_MAX_METADATA_KEY_BYTES, "metadata key", i,
                                   &m->key, &m->key_len, error));
    if (i > 0) {
      int order = compare_names(r->metadata[i - 1].key, r->metadata[i - 1].key_len, m->key,
                                m->key_len);
      if (order >= 0) {
        return CORRUPT(order == 0 ? HURRAY_ERR_DUPLICATE_NAME : HURRAY_ERR_MALFORMED,
                       "index: metadata key \"%s\" is %s", m->key,
                       order == 0 ? "duplicated" : "out of order");
      }
    }
    const uint8_t *at;
    if (!cursor_take(c, 5, &at)) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "index: metadata \"%s\" is cut short", m->key);
    }
    m->type = (HurrayMetadataType)at[0];
    uint64_t len = hurray__get_le(at + 1, 4);
    if (!cursor_take(c, (size_t)len, &m->value)) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "index: metadata \"%s\" value is cut short", m->key);
    }
    m->value_len = (size_t)len;
    bool ok = true;
    switch (m->type) {
      case HURRAY_METADATA_INT:
      case HURRAY_METADATA_FLOAT: ok = len == 8; break;
      case HURRAY_METADATA_BOOL: ok = len == 1 && m->value[0] <= 1; break;
      case HURRAY_METADATA_STRING:
        ok = hurray__utf8_valid((const char *)m->value, m->value_len);
        if (ok) {
          /* Strings are handed out NUL-terminated, from the arena. */
          memcpy(*arena, m->value, m->value_len);
          (*arena)[m->value_len] = '\0';
          m->value = (const uint8_t *)*arena;
          *arena += m->value_len + 1;
        }
        break;
      case HURRAY_METADATA_BYTES: break;
      default: break; /* a newer minor version's type: kept, readable as bytes */
    }
    if (!ok) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "index: metadata \"%s\" has a malformed value", m->key);
    }
  }
  return HURRAY_OK;
}

#define CHUNK_MARK_STRIDE 64

static uint64_t entry_chunks(const HurrayReader *r, size_t i) {
  const TensorEntry t = entry_at(r, i);
  uint64_t total = 0;
  for (uint32_t b = 0; b < t.buffer_count; b++) {
    total += hurray__chunks_of(buffer_field(&t, b, 1), r->chunk_size);
  }
  return total;
}

/* The number of chunk sums of entries [0, count), in index order. */
static uint64_t chunks_before(const HurrayReader *r, size_t count) {
  size_t from = count / CHUNK_MARK_STRIDE * CHUNK_MARK_STRIDE;
  uint64_t total = r->chunk_marks[count / CHUNK_MARK_STRIDE];
  for (size_t i = from; i < count; i++) total += entry_chunks(r, i);
  return total;
}

/* Takes the chunk-checksum table (type 6) out of the metadata list, where
 * it is the file's own, not the user's, and checks it against the buffer
 * records (spec 7.1, check 34): its size must be exactly one sum for each
 * chunk of each buffer longer than a chunk. */
static HurrayStatus take_chunk_table(HurrayReader *r, HurrayError *error) {
  static const char key[] = HURRAY_CHUNK_CHECKSUMS_KEY;
  /* Every entry is looked at: a type-6 entry under another key is refused
   * wherever it sorts, after the table too. */
  size_t i = r->metadata_count;
  for (size_t k = 0; k < r->metadata_count; k++) {
    const MetadataEntry *m = &r->metadata[k];
    if ((int)m->type != HURRAY_METADATA_CHUNK_CHECKSUMS) continue;
    if (m->key_len != sizeof key - 1 || memcmp(m->key, key, sizeof key - 1) != 0) {
      return CORRUPT(HURRAY_ERR_MALFORMED,
                     "index: metadata \"%s\" has type 6, which only \"%s\" may have", m->key, key);
    }
    i = k;
  }
  if (i < r->metadata_count) {
    const MetadataEntry *m = &r->metadata[i];
    uint64_t size = m->value_len >= 8 ? hurray__get_le(m->value, 8) : 0;
    bool power = size != 0 && (size & (size - 1)) == 0;
    if (!power || size < ((uint64_t)1 << HURRAY_CHUNK_LOG2_MIN) ||
        size > ((uint64_t)1 << HURRAY_CHUNK_LOG2_MAX) || (m->value_len - 8) % 8 != 0) {
      return CORRUPT(HURRAY_ERR_MALFORMED,
                     "index: the chunk checksums' chunk size %llu is not a power of two from "
                     "2^%d to 2^%d, or their %zu bytes are not 8 + 8 per chunk",
                     (unsigned long long)size, HURRAY_CHUNK_LOG2_MIN, HURRAY_CHUNK_LOG2_MAX,
                     m->value_len);
    }
    r->chunk_size = size;
    uint64_t stored = (m->value_len - 8) / 8;
    r->chunk_sums = m->value + 8;
    r->chunk_marks = malloc((r->tensor_count / CHUNK_MARK_STRIDE + 1) * sizeof *r->chunk_marks);
    if (r->chunk_marks == NULL) return CORRUPT(HURRAY_ERR_NO_MEMORY, "out of memory");
    uint64_t expected = 0;
    for (size_t t = 0; t < r->tensor_count; t++) {
      if (t % CHUNK_MARK_STRIDE == 0) r->chunk_marks[t / CHUNK_MARK_STRIDE] = expected;
      expected += entry_chunks(r, t);
    }
    if (r->tensor_count % CHUNK_MARK_STRIDE == 0) {
      r->chunk_marks[r->tensor_count / CHUNK_MARK_STRIDE] = expected;
    }
    if (expected != stored) {
      return CORRUPT(HURRAY_ERR_MALFORMED,
                     "index: %llu chunk checksums of %llu bytes, but the buffers have %llu "
                     "chunks",
                     (unsigned long long)stored, (unsigned long long)size,
                     (unsigned long long)expected);
    }
    memmove(&r->metadata[i], &r->metadata[i + 1],
            (r->metadata_count - i - 1) * sizeof *r->metadata);
    r->metadata_count--;
  }
  return HURRAY_OK;
}

/* What a file that is not a hurray file seems to be, from its first 8
 * bytes (and the 9th), as a hint for the message: the formats hurray
 * converts from are the likely mix-ups. "" when nothing is recognised. */
static const char *other_format_hint(HurrayReader *r, const uint8_t first[8]) {
  static const char gguf[] = ": it looks like a GGUF file; `hurray convert` reads it";
  static const char st[] = ": it looks like a safetensors file; `hurray convert` reads it";
  static const char zip[] =
      ": it looks like a zip archive (.npz, or a torch checkpoint); `hurray convert` reads it";
  static const char npy[] = ": it looks like a numpy .npy file; `hurray convert` reads it";
  if (memcmp(first, "GGUF", 4) == 0) return gguf;
  if (memcmp(first, "PK\x03\x04", 4) == 0) return zip;
  if (memcmp(first, "\x93NUMPY", 6) == 0) return npy;
  /* safetensors: a little-endian header length, then the JSON header. */
  uint64_t len = hurray__get_le(first, 8);
  uint8_t brace = 0;
  HurrayError ignored = {0};
  if (len >= 2 && r->file_size >= 9 && len <= r->file_size - 8 &&
      read_at(r, &brace, 1, 8, &ignored) == HURRAY_OK && brace == '{') {
    return st;
  }
  return "";
}

/* The fixed header: magic, a major version this library reads, reserved
 * bytes zero. Its minor version goes to *minor for the trailer check. */
static HurrayStatus read_header(HurrayReader *r, uint64_t *major, uint64_t *minor,
                                HurrayError *error) {
  uint8_t header[HURRAY_FILE_HEADER_BYTES];
  if (r->file_size >= 8) {
    HURRAY_RETURN_NOT_OK(read_at(r, header, 8, 0, error));
    if (memcmp(header, hurray__file_magic, 8) != 0) {
      return CORRUPT(HURRAY_ERR_BAD_MAGIC, "not a hurray file (bad magic)%s",
                     other_format_hint(r, header));
    }
  }
  if (r->file_size < HURRAY_FILE_HEADER_BYTES + HURRAY_FILE_TRAILER_BYTES) {
    return CORRUPT(HURRAY_ERR_TRUNCATED, "file of %llu bytes is shorter than header and trailer",
                   (unsigned long long)r->file_size);
  }
  HURRAY_RETURN_NOT_OK(read_at(r, header, sizeof header, 0, error));
  *major = hurray__get_le(header + 8, 2);
  *minor = hurray__get_le(header + 10, 2);
  if (*major != HURRAY_FILE_FORMAT_MAJOR) {
    return CORRUPT(HURRAY_ERR_UNSUPPORTED, "file format %llu.%llu; this library reads %d.x",
                   (unsigned long long)*major, (unsigned long long)*minor,
                   HURRAY_FILE_FORMAT_MAJOR);
  }
  for (size_t i = 12; i < HURRAY_FILE_HEADER_BYTES; i++) {
    if (header[i] != 0) {
      return CORRUPT(HURRAY_ERR_MALFORMED, "header: reserved byte %zu is not zero", i);
    }
  }
  return HURRAY_OK;
}

/* The trailer: present, intact, agreeing with the header, and an index
 * range and counts that the file and the limits allow. Sets the reader's
 * index range and counts; the trailer's bytes stay in `trailer`. */
static HurrayStatus read_trailer(HurrayReader *r, uint64_t major, uint64_t minor,
                                 uint8_t trailer[HURRAY_FILE_TRAILER_BYTES], HurrayError *error) {
  HURRAY_RETURN_NOT_OK(read_at(r, trailer, HURRAY_FILE_TRAILER_BYTES,
                               r->file_size - HURRAY_FILE_TRAILER_BYTES, error));
  if (memcmp(trailer + TRAILER_MAGIC, hurray__trailer_magic, 8) != 0) {
    return CORRUPT(HURRAY_ERR_TRUNCATED,
                   "no trailer at the end: the file is truncated or was never finished");
  }
  if (hurray__checksum(trailer, TRAILER_CHECKSUM) !=
      hurray__get_le(trailer + TRAILER_CHECKSUM, 8)) {
    return CORRUPT(HURRAY_ERR_CHECKSUM, "trailer checksum mismatch");
  }
  if (hurray__get_le(trailer + TRAILER_MAJOR, 2) != major ||
      hurray__get_le(trailer + TRAILER_MINOR, 2) != minor ||
      hurray__get_le(trailer + TRAILER_FLAGS, 4) != 0) {
    return CORRUPT(HURRAY_ERR_MALFORMED, "trailer version or flags disagree with the header");
  }
  r->index_offset = hurray__get_le(trailer + TRAILER_INDEX_OFFSET, 8);
  r->index_length = hurray__get_le(trailer + TRAILER_INDEX_LENGTH, 8);
  uint64_t tensor_count = hurray__get_le(trailer + TRAILER_TENSOR_COUNT, 8);
  uint64_t metadata_count = hurray__get_le(trailer + TRAILER_METADATA_COUNT, 8);
  if (r->index_length > HURRAY_MAX_INDEX_BYTES) {
    return CORRUPT(HURRAY_ERR_LIMIT, "index of %llu bytes exceeds the limit of %u",
                   (unsigned long long)r->index_length, HURRAY_MAX_INDEX_BYTES);
  }
  uint64_t index_end;
  if (r->index_offset < HURRAY_FILE_HEADER_BYTES || r->index_offset % 8 != 0) {
    return CORRUPT(
        HURRAY_ERR_RANGE, "index offset %llu is %s", (unsigned long long)r->index_offset,
        r->index_offset < HURRAY_FILE_HEADER_BYTES ? "inside the header" : "not a multiple of 8");
  }
  if (!hurray__add_u64(r->index_offset, r->index_length, &index_end) ||
      index_end != r->file_size - HURRAY_FILE_TRAILER_BYTES) {
    return CORRUPT(HURRAY_ERR_RANGE,
                   "index [%llu, +%llu) does not end where the trailer starts (%llu)",
                   (unsigned long long)r->index_offset, (unsigned long long)r->index_length,
                   (unsigned long long)(r->file_size - HURRAY_FILE_TRAILER_BYTES));
  }
  if (tensor_count > HURRAY_MAX_TENSORS || metadata_count > HURRAY_MAX_METADATA_ENTRIES) {
    return CORRUPT(HURRAY_ERR_LIMIT, "index claims %llu tensors and %llu metadata entries",
                   (unsigned long long)tensor_count, (unsigned long long)metadata_count);
  }
  /* The smallest entries are 11 and 8 bytes: counts the index cannot hold
   * are refused before anything is sized by them. */
  if (tensor_count * 11 + metadata_count * 8 > r->index_length) {
    return CORRUPT(HURRAY_ERR_MALFORMED,
                   "index of %llu bytes cannot hold %llu tensors and %llu metadata entries",
                   (unsigned long long)r->index_length, (unsigned long long)tensor_count,
                   (unsigned long long)metadata_count);
  }
  r->tensor_count = (size_t)tensor_count;
  r->metadata_count = (size_t)metadata_count;
  return HURRAY_OK;
}

/* A file's index is read in pieces of this size and each is hashed while
 * it is still in the CPU's cache, instead of hashing the whole copy once
 * more from memory. A byte source reads it in one request. */
#define INDEX_READ_PIECE ((uint64_t)256 << 10)

/* Reads the index into memory of the reader's own, in every mode, and its
 * checksum into `*sum`; maps the whole file in the MMAP modes. The index is
 * never read in place from the mapping: its offsets and lengths are checked
 * once, at open, and a file rewritten in place under a shared mapping would
 * change them after that check (a length of 2^62 handed to the hash, a
 * name running off the index). ADR-0030 measures the copy. */
static HurrayStatus load_index(HurrayReader *r, uint64_t *sum, HurrayError *error) {
  r->index_copy = malloc(r->index_length ? (size_t)r->index_length : 1);
  if (r->index_copy == NULL) return CORRUPT(HURRAY_ERR_NO_MEMORY, "out of memory");
  r->index = r->index_copy;
  uint64_t piece = r->has_source ? r->index_length : INDEX_READ_PIECE;
  HurrayHashStream stream;
  hurray__hash_stream_reset(&stream);
  for (uint64_t at = 0; at < r->index_length; at += piece) {
    uint64_t n = r->index_length - at < piece ? r->index_length - at : piece;
    HURRAY_RETURN_NOT_OK(read_at(r, r->index_copy + at, n, r->index_offset + at, error));
    hurray__hash_stream_update(&stream, r->index_copy + at, (size_t)n);
  }
  *sum = hurray__hash_stream_digest(&stream);
  if (!is_mapped(r)) return HURRAY_OK;
  if (!hurray__fits_object(r->file_size)) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "file of %llu bytes does not fit this process's address space; "
                        "open it with HURRAY_READ_PREAD",
                        (unsigned long long)r->file_size);
  }
  r->mapping = malloc(sizeof *r->mapping);
  if (r->mapping == NULL) return CORRUPT(HURRAY_ERR_NO_MEMORY, "out of memory");
  /* Private and writable: writes copy the page (never reach the file, never
   * fault); the shared read-only mapping is kept for who asks for it. */
  bool private_map = r->mode == HURRAY_READ_MMAP_PRIVATE;
  void *base = mmap(NULL, (size_t)r->file_size, private_map ? PROT_READ | PROT_WRITE : PROT_READ,
                    private_map ? MAP_PRIVATE : MAP_SHARED, r->fd, 0);
  if (base == MAP_FAILED) {
    int saved = errno;
    free(r->mapping);
    r->mapping = NULL;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved, "mmap failed: %s", strerror(saved));
  }
  r->mapping->base = base;
  r->mapping->len = (size_t)r->file_size;
  atomic_init(&r->mapping->refs, 1);
  return HURRAY_OK;
}

/* Checks the index's checksum (`sum`, of the bytes read) and parses it
 * into the tensor and metadata tables. */
static HurrayStatus parse_index(HurrayReader *r, uint64_t stored_checksum, uint64_t sum,
                                HurrayError *error) {
  if (sum != stored_checksum) {
    return CORRUPT(HURRAY_ERR_CHECKSUM, "index checksum mismatch");
  }
  r->entries = malloc((r->tensor_count ? r->tensor_count : 1) * sizeof *r->entries);
  r->metadata = calloc(r->metadata_count ? r->metadata_count : 1, sizeof *r->metadata);
  if (r->entries == NULL || r->metadata == NULL) {
    return CORRUPT(HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  Cursor c = {r->index, (size_t)r->index_length};
  HURRAY_RETURN_NOT_OK(parse_tensors(r, &c, error));
  /* Keys and string values are copied NUL-terminated: the rest of the
   * index (the metadata entries) bounds their size. */
  r->arena = malloc(c.left + 2 * r->metadata_count + 1);
  if (r->arena == NULL) return CORRUPT(HURRAY_ERR_NO_MEMORY, "out of memory");
  char *arena = r->arena;
  HURRAY_RETURN_NOT_OK(parse_metadata(r, &c, &arena, error));
  if (c.left != 0) {
    return CORRUPT(HURRAY_ERR_MALFORMED, "index: %zu bytes after the last entry", c.left);
  }
  return take_chunk_table(r, error);
}

static HurrayReader *reader_new(void) {
  HurrayReader *r = calloc(1, sizeof *r);
  if (r != NULL && pthread_mutex_init(&r->names_lock, NULL) != 0) {
    free(r);
    return NULL;
  }
  if (r != NULL) {
    atomic_init(&r->names, NULL);
    atomic_init(&r->unasked_bytes, 0);
    atomic_init(&r->verify_by_pread, false);
    atomic_init(&r->verify_pread_bytes, 0);
    r->online_cpus = sysconf(_SC_NPROCESSORS_ONLN);
  }
  return r;
}

/* Header, trailer, then the index: every structural rule of the spec. */
static HurrayStatus read_structure(HurrayReader *r, HurrayError *error) {
  uint64_t major = 0, minor = 0;
  uint8_t trailer[HURRAY_FILE_TRAILER_BYTES];
  HURRAY_RETURN_NOT_OK(read_header(r, &major, &minor, error));
  HURRAY_RETURN_NOT_OK(read_trailer(r, major, minor, trailer, error));
  uint64_t sum = 0;
  HURRAY_RETURN_NOT_OK(load_index(r, &sum, error));
  return parse_index(r, hurray__get_le(trailer + TRAILER_INDEX_CHECKSUM, 8), sum, error);
}

/* Versions 1 (without the cancel fields) and 2. */
static bool options_version_known(const HurrayReaderOptions *options) {
  return options->version >= 1 && options->version <= HURRAY_READER_OPTIONS_VERSION;
}

/* The cancel hook of version 2 options; a version 1 struct has none. */
static void set_cancel(HurrayReader *r, const HurrayReaderOptions *options) {
  if (options->version >= 2 && options->cancel != NULL) {
    r->cancel = options->cancel;
    r->cancel_ctx = options->cancel_ctx;
  }
}

HurrayStatus hurray_reader_open(const char *path, const HurrayReaderOptions *options,
                                HurrayReader **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "path and out are required");
  }
  HurrayReaderOptions defaults = HURRAY_READER_OPTIONS_INIT;
  if (options == NULL) {
    options = &defaults;
  } else if (!options_version_known(options)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "reader options: unknown version %u (this library has 1 to %u)",
                        options->version, HURRAY_READER_OPTIONS_VERSION);
  } else if (options->mode != HURRAY_READ_MMAP && options->mode != HURRAY_READ_PREAD &&
             options->mode != HURRAY_READ_MMAP_PRIVATE) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader options: unknown mode %d",
                        (int)options->mode);
  }
  HurrayReader *r = reader_new();
  if (r == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  r->mode = options->mode;
  set_cancel(r, options);
  struct stat st;
  HurrayStatus status = hurray__open_regular(path, &r->fd, &st, error);
  if (status != HURRAY_OK) {
    free(r);
    return status;
  }
  r->file_size = (uint64_t)st.st_size;
  status = read_structure(r, error);
  if (status == HURRAY_OK && options->verify_on_open) {
    status = hurray_reader_verify(r, NULL, error);
  }
  if (status != HURRAY_OK) {
    hurray_reader_close(r);
    return status;
  }
  *out = r;
  return HURRAY_OK;
}

/* ---------------------------------------------------------------- sources */

HurrayStatus hurray_reader_open_byte_source(const HurrayByteSource *source,
                                            const HurrayReaderOptions *options, HurrayReader **out,
                                            HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (source == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "source is required");
  }
  HurrayStatus status = HURRAY_OK;
  if (out == NULL || source->version != HURRAY_BYTE_SOURCE_VERSION || source->read == NULL ||
      (source->flags & ~HURRAY_BYTE_SOURCE_VERIFY_READS) != 0) {
    status = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "source: version %u (this library knows %d), flags %#x, read %s, or "
                          "no out pointer",
                          source->version, HURRAY_BYTE_SOURCE_VERSION, source->flags,
                          source->read != NULL ? "set" : "missing");
  } else if (options != NULL && !options_version_known(options)) {
    status = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "options: unknown version %u",
                          options->version);
  }
  HurrayReader *r = status == HURRAY_OK ? reader_new() : NULL;
  if (status == HURRAY_OK && r == NULL) {
    status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  if (status != HURRAY_OK) {
    if (source->release != NULL) source->release(source->ctx);
    return status;
  }
  r->fd = -1;
  r->has_source = true;
  r->source = *source;
  r->mode = HURRAY_READ_PREAD; /* copies: nothing to map */
  if (options != NULL) set_cancel(r, options);
  r->file_size = source->size;
  status = read_structure(r, error);
  if (status == HURRAY_OK && options != NULL && options->verify_on_open) {
    status = hurray_reader_verify(r, NULL, error);
  }
  if (status != HURRAY_OK) {
    hurray_reader_close(r); /* releases the source */
    return status;
  }
  *out = r;
  return HURRAY_OK;
}

static HurrayStatus memory_read(void *ctx, uint64_t offset, uint64_t length, void *dst,
                                HurrayError *error) {
  (void)error; /* the reader keeps every read inside [0, size) */
  memcpy(dst, (const uint8_t *)ctx + offset, (size_t)length);
  return HURRAY_OK;
}

HurrayStatus hurray_byte_source_memory(const void *data, size_t size, HurrayByteSource *out,
                                       HurrayError *error) {
  if (out == NULL || (data == NULL && size > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "data and out are required");
  }
  HurrayByteSource source = HURRAY_BYTE_SOURCE_INIT;
  source.size = size;
  source.ctx = (void *)(uintptr_t)data; /* only ever read */
  source.read = memory_read;
  *out = source;
  return HURRAY_OK;
}

void hurray_reader_close(HurrayReader *r) {
  if (r == NULL) return;
  if (r->mapping != NULL) mapping_unref(r->mapping);
  if (r->fd >= 0) close(r->fd);
  if (r->has_source && r->source.release != NULL) r->source.release(r->source.ctx);
  free(r->index_copy);
  free(r->entries);
  free(r->metadata);
  free(r->chunk_marks);
  free(r->arena);
  free(atomic_load(&r->names));
  free(r->name_at);
  pthread_mutex_destroy(&r->names_lock);
  free(r);
}

/* ---------------------------------------------------------------- lookup */

size_t hurray_reader_tensor_count(const HurrayReader *r) { return r->tensor_count; }

/* The NUL-terminated copies of every name, made once. The reader is const
 * to its callers; the copies are a cache behind it. */
static const char *tensor_names(const HurrayReader *r) {
  char *names = atomic_load_explicit(&r->names, memory_order_acquire);
  if (names != NULL) return names;
  HurrayReader *w = (HurrayReader *)r;
  pthread_mutex_lock(&w->names_lock);
  names = atomic_load_explicit(&r->names, memory_order_acquire);
  if (names == NULL) {
    /* Each name is at most its entry's bytes, plus its NUL. */
    size_t bytes = (size_t)r->index_length + r->tensor_count + 1;
    uint32_t *at = malloc((r->tensor_count ? r->tensor_count : 1) * sizeof *at);
    names = malloc(bytes);
    if (at == NULL || names == NULL) {
      free(at);
      free(names);
      names = NULL;
    } else {
      size_t used = 0;
      for (size_t i = 0; i < r->tensor_count; i++) {
        TensorEntry t = entry_at(r, i);
        at[i] = (uint32_t)used;
        memcpy(names + used, t.name, t.name_len);
        names[used + t.name_len] = '\0';
        used += t.name_len + 1;
      }
      w->name_at = at;
      atomic_store_explicit(&w->names, names, memory_order_release);
    }
  }
  pthread_mutex_unlock(&w->names_lock);
  return names;
}

const char *hurray_reader_tensor_name(const HurrayReader *r, size_t index) {
  if (r == NULL || index >= r->tensor_count) return NULL;
  const char *names = tensor_names(r);
  return names != NULL ? names + r->name_at[index] : NULL; /* NULL: out of memory */
}

const char *hurray_reader_tensor_name_view(const HurrayReader *r, size_t index, size_t *len) {
  if (r == NULL || index >= r->tensor_count) {
    if (len != NULL) *len = 0;
    return NULL;
  }
  TensorEntry t = entry_at(r, index);
  if (len != NULL) *len = t.name_len;
  return t.name;
}

HurrayStatus hurray_reader_find(const HurrayReader *r, const char *name, size_t *index_out,
                                HurrayError *error) {
  if (r == NULL || name == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader and name are required");
  }
  size_t len = strlen(name), lo = 0, hi = r->tensor_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const uint8_t *entry = r->index + r->entries[mid];
    int order = compare_names((const char *)entry + 2, (size_t)hurray__get_le(entry, 2), name,
                              len);
    if (order == 0) {
      if (index_out != NULL) *index_out = mid;
      return HURRAY_OK;
    }
    if (order < 0) lo = mid + 1;
    else hi = mid;
  }
  return hurray__fail(error, HURRAY_ERR_NOT_FOUND, "no tensor \"%s\" in the file", name);
}

static HurrayStatus entry_for(HurrayReader *r, const char *name, TensorEntry *out,
                              HurrayError *error) {
  size_t index;
  HURRAY_RETURN_NOT_OK(hurray_reader_find(r, name, &index, error));
  *out = entry_at(r, index);
  return HURRAY_OK;
}

/* Decodes and validates the descriptor, and checks the index agrees with
 * its buffer table. */
static HurrayStatus entry_descriptor(const TensorEntry *t, HurrayDescriptor **out,
                                     HurrayError *error) {
  HurrayDescriptor *d = NULL;
  HurrayStatus status = hurray_descriptor_decode(t->descriptor, t->descriptor_len, &d, error);
  if (status == HURRAY_OK) status = hurray_descriptor_validate(d, error);
  if (status == HURRAY_OK && d->buffer_count != t->buffer_count) {
    status = hurray__fail(error, HURRAY_ERR_MALFORMED,
                          "tensor \"%.*s\": index lists %u buffers, its descriptor %u",
                          (int)t->name_len, t->name, t->buffer_count, d->buffer_count);
  }
  /* Every length (file-format.md 10.3, step 3), then every alignment (step
   * 4): a buffer wrong both ways is MALFORMED, as a reader following the
   * spec's order reports it. */
  for (uint32_t i = 0; status == HURRAY_OK && i < t->buffer_count; i++) {
    if (buffer_field(t, i, 1) != d->buffers[i].byte_size) {
      status = hurray__fail(error, HURRAY_ERR_MALFORMED,
                            "tensor \"%.*s\" buffer %u: %llu bytes stored, descriptor declares "
                            "%llu",
                            (int)t->name_len, t->name, i,
                            (unsigned long long)buffer_field(t, i, 1),
                            (unsigned long long)d->buffers[i].byte_size);
    }
  }
  for (uint32_t i = 0; status == HURRAY_OK && i < t->buffer_count; i++) {
    uint32_t alignment = d->buffers[i].alignment;
    if (buffer_field(t, i, 0) % (alignment > HURRAY_FILE_ALIGNMENT ? alignment : 1) != 0) {
      status = hurray__fail(error, HURRAY_ERR_BUFFER_ALIGNMENT,
                            "tensor \"%.*s\" buffer %u: stored at %llu, not a multiple of its "
                            "alignment %u",
                            (int)t->name_len, t->name, i,
                            (unsigned long long)buffer_field(t, i, 0), alignment);
    }
  }
  if (status != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return status;
  }
  *out = d;
  return HURRAY_OK;
}

HurrayStatus hurray_reader_get_descriptor(HurrayReader *r, const char *name,
                                          HurrayDescriptor **descriptor_out, HurrayError *error) {
  if (descriptor_out != NULL) *descriptor_out = NULL;
  if (descriptor_out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor_out is required");
  }
  TensorEntry t;
  HURRAY_RETURN_NOT_OK(entry_for(r, name, &t, error));
  return entry_descriptor(&t, descriptor_out, error);
}

HurrayStatus hurray_reader_tensor_shape(const HurrayReader *r, size_t index, HurrayDType *dtype,
                                        uint32_t *rank, uint64_t shape[HURRAY_MAX_RANK],
                                        HurrayError *error) {
  if (r == NULL || dtype == NULL || rank == NULL || shape == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader and outputs are required");
  }
  if (index >= r->tensor_count) {
    return hurray__fail(error, HURRAY_ERR_NOT_FOUND, "no tensor %zu: the file holds %zu", index,
                        r->tensor_count);
  }
  TensorEntry t = entry_at(r, index);
  if (hurray__descriptor_peek_shape(t.descriptor, t.descriptor_len, dtype, rank, shape)) {
    return HURRAY_OK;
  }
  /* Not the usual form: the full decoder reads it, or says what is wrong. */
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(entry_descriptor(&t, &d, error));
  *dtype = d->dtype;
  *rank = d->rank;
  memcpy(shape, d->shape, d->rank * sizeof *shape);
  hurray_descriptor_destroy(d);
  return HURRAY_OK;
}

/* HURRAY_OK when a buffer of `length` bytes (`size` once rounded up to its
 * alignment) can be one allocation of this process; on a 32-bit host a
 * file's buffer past 2 GiB cannot. */
static HurrayStatus addressable(uint64_t size, uint64_t length, HurrayError *error) {
  if (hurray__fits_object(size)) return HURRAY_OK;
  return hurray__fail(error, HURRAY_ERR_LIMIT,
                      "buffer of %llu bytes does not fit this process's address space",
                      (unsigned long long)length);
}

/* `length` bytes at file `offset`, read into a fresh allocation aligned to
 * `alignment` (and at least to the file's); the caller frees *out. */
static HurrayStatus read_aligned(HurrayReader *r, uint64_t offset, uint64_t length,
                                 uint32_t alignment, void **out, HurrayError *error) {
  size_t align = alignment > HURRAY_FILE_ALIGNMENT ? alignment : HURRAY_FILE_ALIGNMENT;
  uint64_t size = hurray__ceil_div_u64(length, align) * align; /* length <= file size */
  HURRAY_RETURN_NOT_OK(addressable(size, length, error));
  void *mem = aligned_alloc(align, size ? (size_t)size : align);
  if (mem == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  HurrayStatus status = read_at(r, mem, length, offset, error);
  if (status != HURRAY_OK) {
    free(mem);
    return status;
  }
  *out = mem;
  return HURRAY_OK;
}

/* A handle for `length` bytes at file `offset`: a view of the mapping, or
 * a fresh aligned allocation filled with pread. */
static HurrayStatus make_buffer(HurrayReader *r, uint64_t offset, uint64_t length,
                                uint32_t alignment, HurrayBuffer **out, HurrayError *error) {
  if (is_mapped(r)) {
    atomic_fetch_add(&r->mapping->refs, 1);
    HURRAY_RETURN_NOT_OK(hurray_buffer_create((uint8_t *)r->mapping->base + offset, length,
                                              release_mapped, r->mapping, out, error));
  } else {
    void *mem = NULL;
    HURRAY_RETURN_NOT_OK(read_aligned(r, offset, length, alignment, &mem, error));
    HURRAY_RETURN_NOT_OK(hurray_buffer_create(mem, length, release_owned, NULL, out, error));
  }
  HurrayStatus status = hurray_buffer_set_alignment(*out, alignment, error);
  if (status != HURRAY_OK) {
    hurray_buffer_destroy(*out);
    *out = NULL;
  }
  return status;
}

/* The last step of every read: placement is validated before the caller
 * sees anything; on any failure both parts are freed. `d` is valid already
 * (entry_descriptor, or get_rows for its slice). */
static HurrayStatus hand_out(HurrayStatus status, HurrayDescriptor *d, HurrayBufferList *list,
                             HurrayDescriptor **descriptor_out, HurrayBufferList **buffers_out,
                             HurrayError *error) {
  if (status == HURRAY_OK) status = hurray__validate_placement_of_valid(d, list, error);
  if (status != HURRAY_OK) {
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    return status;
  }
  *descriptor_out = d;
  *buffers_out = list;
  return HURRAY_OK;
}

/* The first step of every read: clears the outputs, finds the entry and
 * decodes its validated descriptor (owned by the caller of this helper). */
static HurrayStatus begin_read(HurrayReader *r, const char *name,
                               HurrayDescriptor **descriptor_out, HurrayBufferList **buffers_out,
                               TensorEntry *t, HurrayDescriptor **d, HurrayError *error) {
  if (descriptor_out != NULL) *descriptor_out = NULL;
  if (buffers_out != NULL) *buffers_out = NULL;
  if (descriptor_out == NULL || buffers_out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "outputs are required");
  }
  HURRAY_RETURN_NOT_OK(entry_for(r, name, t, error));
  return entry_descriptor(t, d, error);
}

/* What one checksum covers: a whole buffer (`chunk` NULL), or one chunk of
 * it, [start, start + length) of the buffer, whose sum is at `chunk` in
 * the chunk-checksum table. */
typedef struct VerifyRef {
  TensorEntry t;
  uint32_t buffer;
  uint64_t start;
  uint64_t length;
  const uint8_t *chunk;
} VerifyRef;

static uint64_t ref_expected(const VerifyRef *ref) {
  return ref->chunk != NULL ? hurray__get_le(ref->chunk, 8)
                            : buffer_field(&ref->t, ref->buffer, 2);
}

static HurrayStatus mismatch(const VerifyRef *ref, uint64_t sum, HurrayError *error) {
  if (ref->chunk != NULL) {
    return hurray__fail(error, HURRAY_ERR_CHECKSUM,
                        "tensor \"%.*s\" buffer %u: checksum mismatch in bytes [%llu, %llu) "
                        "(stored %016llx, data %016llx)",
                        (int)ref->t.name_len, ref->t.name, ref->buffer,
                        (unsigned long long)ref->start,
                        (unsigned long long)(ref->start + ref->length),
                        (unsigned long long)ref_expected(ref), (unsigned long long)sum);
  }
  return hurray__fail(error, HURRAY_ERR_CHECKSUM,
                      "tensor \"%.*s\" buffer %u: checksum mismatch (stored %016llx, data "
                      "%016llx)",
                      (int)ref->t.name_len, ref->t.name, ref->buffer,
                      (unsigned long long)ref_expected(ref), (unsigned long long)sum);
}

static int compare_source_ranges(const void *pa, const void *pb) {
  const HurrayByteRange *a = pa, *b = pb;
  return (a->offset > b->offset) - (a->offset < b->offset);
}

/* A tensor through a source: every buffer allocated first, then one batch
 * read (one request, for a transport that merges neighbours), then, for
 * an untrusted transport, each buffer checked against its checksum. */
static HurrayStatus source_buffers(HurrayReader *r, const TensorEntry *t,
                                   const HurrayDescriptor *d, HurrayBufferList *list,
                                   HurrayError *error) {
  HurrayByteRange *ranges = malloc((t->buffer_count ? t->buffer_count : 1) * sizeof *ranges);
  if (ranges == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  HurrayStatus status = HURRAY_OK;
  size_t n = 0;
  for (uint32_t i = 0; status == HURRAY_OK && i < t->buffer_count; i++) {
    uint64_t length = buffer_field(t, i, 1);
    uint32_t alignment = d->buffers[i].alignment;
    size_t align = alignment > HURRAY_FILE_ALIGNMENT ? alignment : HURRAY_FILE_ALIGNMENT;
    /* length <= the data region, checked at open; the source's claimed
     * size bounds it, not memory: see docs/security.md. */
    uint64_t size64 = hurray__ceil_div_u64(length, align) * align;
    status = addressable(size64, length, error);
    if (status != HURRAY_OK) break;
    void *mem = aligned_alloc(align, size64 ? (size_t)size64 : align);
    HurrayBuffer *b = NULL;
    if (mem == NULL) {
      status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory for %llu bytes",
                            (unsigned long long)length);
      break;
    }
    /* On failure create has already released mem. */
    status = hurray_buffer_create(mem, length, release_owned, NULL, &b, error);
    if (status != HURRAY_OK) break;
    status = hurray_buffer_set_alignment(b, alignment, error);
    if (status == HURRAY_OK) status = hurray_buffer_list_push(list, b, error);
    else hurray_buffer_destroy(b);
    if (status == HURRAY_OK && length > 0) {
      ranges[n].offset = buffer_field(t, i, 0);
      ranges[n].length = length;
      ranges[n].dst = mem;
      n++;
    }
  }
  if (status == HURRAY_OK && n > 0) {
    qsort(ranges, n, sizeof *ranges, compare_source_ranges);
    if (r->source.read_batch != NULL) {
      HurrayError mine = {0};
      status = source_status(
          r->source.read_batch(r->source.ctx, ranges, n, &mine), ranges[0].offset,
          ranges[n - 1].offset + ranges[n - 1].length - ranges[0].offset, &mine, error);
    } else {
      for (size_t k = 0; status == HURRAY_OK && k < n; k++) {
        status = read_at(r, ranges[k].dst, ranges[k].length, ranges[k].offset, error);
      }
    }
  }
  free(ranges);
  if (status != HURRAY_OK || (r->source.flags & HURRAY_BYTE_SOURCE_VERIFY_READS) == 0) {
    return status;
  }
  /* A buffer longer than a chunk against its chunk checksums, as verify
   * checks it in every mode, so that a read and verify agree. */
  const uint8_t *chunk = r->chunk_sums != NULL ? r->chunk_sums + 8 * chunks_before(r, t->index)
                                               : NULL;
  for (uint32_t i = 0; i < t->buffer_count; i++) {
    const uint8_t *data = hurray_buffer_data(hurray_buffer_list_get(list, i));
    uint64_t length = buffer_field(t, i, 1);
    uint64_t pieces = chunk != NULL ? hurray__chunks_of(length, r->chunk_size) : 0;
    for (uint64_t k = 0; k < (pieces > 0 ? pieces : 1); k++) {
      uint64_t start = pieces > 0 ? k * r->chunk_size : 0;
      uint64_t span = pieces > 0 && length - start > r->chunk_size ? r->chunk_size
                                                                   : length - start;
      VerifyRef ref = {*t, i, start, span, pieces > 0 ? chunk : NULL};
      if (pieces > 0) chunk += 8;
      uint64_t sum = hurray__checksum(data + start, (size_t)span);
      if (sum != ref_expected(&ref)) return mismatch(&ref, sum, error);
    }
  }
  return HURRAY_OK;
}

/* get_tensor once the entry is found and its descriptor `d` decoded
 * (owned here from now on). */
static HurrayStatus get_entry(HurrayReader *r, const TensorEntry *t, HurrayDescriptor *d,
                              HurrayDescriptor **descriptor_out, HurrayBufferList **buffers_out,
                              HurrayError *error) {
  HurrayBufferList *list = NULL;
  HurrayStatus status = hurray_buffer_list_create(&list, error);
  if (status == HURRAY_OK && r->has_source) {
    status = source_buffers(r, t, d, list, error);
    return hand_out(status, d, list, descriptor_out, buffers_out, error);
  }
  for (uint32_t i = 0; status == HURRAY_OK && i < t->buffer_count; i++) {
    HurrayBuffer *b = NULL;
    status = make_buffer(r, buffer_field(t, i, 0), buffer_field(t, i, 1), d->buffers[i].alignment,
                         &b, error);
    if (status == HURRAY_OK) status = hurray_buffer_list_push(list, b, error);
  }
  return hand_out(status, d, list, descriptor_out, buffers_out, error);
}

HurrayStatus hurray_reader_get_tensor(HurrayReader *r, const char *name,
                                      HurrayDescriptor **descriptor_out,
                                      HurrayBufferList **buffers_out, HurrayError *error) {
  TensorEntry entry;
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(begin_read(r, name, descriptor_out, buffers_out, &entry, &d, error));
  return get_entry(r, &entry, d, descriptor_out, buffers_out, error);
}

HurrayStatus hurray__reader_get_tensor_at(HurrayReader *r, size_t index,
                                          HurrayDescriptor **descriptor_out,
                                          HurrayBufferList **buffers_out, HurrayError *error) {
  if (descriptor_out != NULL) *descriptor_out = NULL;
  if (buffers_out != NULL) *buffers_out = NULL;
  if (r == NULL || descriptor_out == NULL || buffers_out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader and outputs are required");
  }
  if (index >= r->tensor_count) {
    return hurray__fail(error, HURRAY_ERR_NOT_FOUND, "no tensor %zu: the file holds %zu", index,
                        r->tensor_count);
  }
  TensorEntry entry = entry_at(r, index);
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(entry_descriptor(&entry, &d, error));
  return get_entry(r, &entry, d, descriptor_out, buffers_out, error);
}

HurrayStatus hurray_reader_read_buffer(HurrayReader *r, const char *name, uint32_t buffer_index,
                                       void *dst, uint64_t dst_size, HurrayError *error) {
  if (r == NULL || dst == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader and dst are required");
  }
  TensorEntry entry, *t = &entry;
  HURRAY_RETURN_NOT_OK(entry_for(r, name, t, error));
  if (buffer_index >= t->buffer_count) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "tensor \"%s\" has %u buffers", name,
                        t->buffer_count);
  }
  uint64_t length = buffer_field(t, buffer_index, 1);
  if (dst_size < length) {
    return hurray__fail(error, HURRAY_ERR_BUFFER_SIZE,
                        "tensor \"%s\" buffer %u needs %llu bytes, dst has %llu", name,
                        buffer_index, (unsigned long long)length, (unsigned long long)dst_size);
  }
  return read_at(r, dst, length, buffer_field(t, buffer_index, 0), error);
}

/* Runs fn on each of n jobs (job i at base + i * size, n <= 64): job 0 on
 * this thread, the others on threads of their own; a job whose thread
 * cannot start runs inline. */
static void run_jobs(void *(*fn)(void *), void *base, size_t size, unsigned n) {
  pthread_t ids[64];
  bool joined[64] = {false};
  for (unsigned i = 1; i < n; i++) {
    void *job = (char *)base + (size_t)i * size;
    joined[i] = pthread_create(&ids[i], NULL, fn, job) == 0;
    if (!joined[i]) fn(job);
  }
  fn(base);
  for (unsigned i = 1; i < n; i++) {
    if (joined[i]) pthread_join(ids[i], NULL);
  }
}

/* ------------------------------------------------------------ read spans */

/* The bytes of a span list, split evenly: thread `part` reads bytes
 * [from, to) of the spans laid end to end. */
typedef struct SpanPart {
  HurrayReader *r;
  const HurrayReadSpan *spans;
  size_t count;
  uint64_t from, to;
  size_t failed; /* index of the span that failed, or count */
  HurrayStatus status;
  HurrayError error;
} SpanPart;

static void *read_span_part(void *arg) {
  SpanPart *p = arg;
  uint64_t at = 0; /* where span k starts in the concatenation */
  p->failed = p->count;
  p->status = HURRAY_OK;
  for (size_t k = 0; k < p->count && at < p->to; k++) {
    const HurrayReadSpan *s = &p->spans[k];
    uint64_t lo = p->from > at ? p->from - at : 0;
    uint64_t hi = p->to - at < s->length ? p->to - at : s->length;
    at += s->length;
    if (lo >= hi) continue;
    TensorEntry t = entry_at(p->r, s->tensor);
    p->status = read_at(p->r, (uint8_t *)s->dst + lo, hi - lo,
                        buffer_field(&t, s->buffer, 0) + s->offset + lo, &p->error);
    if (p->status != HURRAY_OK) {
      p->failed = k;
      break;
    }
  }
  return NULL;
}

HurrayStatus hurray_reader_read_spans(HurrayReader *r, const HurrayReadSpan *spans, size_t count,
                                      unsigned threads, HurrayError *error) {
  if (r == NULL || (spans == NULL && count > 0) || threads == 0 || threads > 64) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "read_spans needs a reader, the spans and 1 to 64 threads");
  }
  uint64_t total = 0;
  for (size_t k = 0; k < count; k++) {
    const HurrayReadSpan *s = &spans[k];
    if (s->tensor >= r->tensor_count) {
      return hurray__fail(error, HURRAY_ERR_NOT_FOUND, "span %zu: no tensor number %zu (%zu)", k,
                          s->tensor, r->tensor_count);
    }
    TensorEntry t = entry_at(r, s->tensor);
    if (s->buffer >= t.buffer_count) {
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "span %zu: tensor \"%.*s\" has %u buffers, not buffer %u", k,
                          (int)t.name_len, t.name, t.buffer_count, s->buffer);
    }
    uint64_t end, length = buffer_field(&t, s->buffer, 1);
    if (!hurray__add_u64(s->offset, s->length, &end) || end > length) {
      return hurray__fail(error, HURRAY_ERR_RANGE,
                          "span %zu: bytes [%llu, +%llu) beyond tensor \"%.*s\" buffer %u of %llu "
                          "bytes",
                          k, (unsigned long long)s->offset, (unsigned long long)s->length,
                          (int)t.name_len, t.name, s->buffer, (unsigned long long)length);
    }
    if (s->dst == NULL && s->length > 0) {
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "span %zu: dst is NULL", k);
    }
    if (!hurray__add_u64(total, s->length, &total)) {
      return hurray__fail(error, HURRAY_ERR_RANGE, "spans of more than 2^64 bytes");
    }
  }
  /* A source is untrusted code that was never promised concurrent calls. */
  if (r->has_source) threads = 1;
  /* Parts under 1 MiB cost more in thread starts than they gain. */
  uint64_t most = total / (1u << 20) + 1;
  if (threads > most) threads = (unsigned)most;
  SpanPart parts[64];
  uint64_t per = (total + threads - 1) / threads;
  for (unsigned i = 0; i < threads; i++) {
    uint64_t from = per * i, to = per * (i + 1);
    parts[i] = (SpanPart){.r = r,
                          .spans = spans,
                          .count = count,
                          .from = from < total ? from : total,
                          .to = to < total ? to : total};
  }
  run_jobs(read_span_part, parts, sizeof parts[0], threads);
  unsigned first = 0;
  for (unsigned i = 1; i < threads; i++) {
    if (parts[i].failed < parts[first].failed) first = i;
  }
  if (parts[first].status == HURRAY_OK) return HURRAY_OK;
  if (error != NULL) *error = parts[first].error;
  return parts[first].status;
}

HurrayStatus hurray_reader_get_rows(HurrayReader *r, const char *name, uint64_t row_start,
                                    uint64_t row_count, HurrayDescriptor **descriptor_out,
                                    HurrayBufferList **buffers_out, HurrayError *error) {
  TensorEntry entry, *t = &entry;
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(begin_read(r, name, descriptor_out, buffers_out, t, &d, error));
  HurrayStatus status = HURRAY_OK;
  uint64_t numel = 0, row_bits = 0, end = 0, end_bits = 0;
  if (d->layout.kind != HURRAY_LAYOUT_DENSE || d->strides != NULL || d->rank == 0 ||
      (d->quant.kind != HURRAY_QUANT_NONE && d->quant.kind != HURRAY_QUANT_PER_TENSOR_AFFINE)) {
    status = hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "tensor \"%s\": row reads need a dense, row-major tensor of rank >= 1 "
                          "with at most per-tensor quantization",
                          name);
  } else if (!hurray__add_u64(row_start, row_count, &end) || end > d->shape[0]) {
    status = hurray__fail(error, HURRAY_ERR_RANGE, "tensor \"%s\": rows [%llu, +%llu) beyond %llu",
                          name, (unsigned long long)row_start, (unsigned long long)row_count,
                          (unsigned long long)d->shape[0]);
  } else {
    numel = 1;
    for (uint32_t i = 1; i < d->rank; i++) numel *= d->shape[i]; /* validated: no overflow */
    /* Packed rows that end inside a byte are read from the byte their
     * first row starts at; the bits of the slice's last byte past its end
     * are the unused bits readers ignore (layouts.md). Bit counts of a
     * file's tensor fit 64 bits: its bytes lie in the file. */
    if (!hurray__mul_u64(numel, hurray_dtype_bits(d->dtype), &row_bits) ||
        !hurray__mul_u64(row_bits, end, &end_bits)) {
      status = hurray__fail(error, HURRAY_ERR_LIMIT, "tensor \"%s\": over 2^64 bits", name);
    } else if (row_count > 0 && (row_start * row_bits) % 8 != 0) {
      status = hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                            "tensor \"%s\": row %llu of packed %s does not start on a byte "
                            "boundary (%llu bits a row)",
                            name, (unsigned long long)row_start, hurray_dtype_name(d->dtype),
                            (unsigned long long)row_bits);
    }
  }
  if (status != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return status;
  }
  uint32_t data = d->layout.data_buffer;
  uint64_t offset = buffer_field(t, data, 0) + d->byte_offset + row_start * row_bits / 8;
  /* No rows: none of the bytes, wherever row_start falls (a[5:5]). */
  uint64_t length = row_count == 0 ? 0 : (end_bits + 7) / 8 - row_start * row_bits / 8;
  /* The slice keeps the largest alignment its start still honours. */
  uint32_t alignment = d->buffers[data].alignment;
  while (alignment > 1 && offset % alignment != 0) alignment /= 2;
  d->shape[0] = row_count;
  d->byte_offset = 0;
  d->buffers[data].byte_size = length;
  d->buffers[data].alignment = alignment;
  hurray_descriptor_clear_statistics(d);
  if (d->shard != NULL) d->shard->offsets[0] += row_start;
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  status = hurray_buffer_list_create(&list, error);
  if (status == HURRAY_OK) status = make_buffer(r, offset, length, alignment, &b, error);
  if (status == HURRAY_OK) status = hurray_buffer_list_push(list, b, error);
  /* The slice is a descriptor of its own, which hand_out takes as valid. */
  if (status == HURRAY_OK) status = hurray_descriptor_validate(d, error);
  return hand_out(status, d, list, descriptor_out, buffers_out, error);
}

/* -------------------------------------------------------------- populate */

/* One read-ahead request per 128 KiB: the kernel reads at most
 * max(read_ahead_kb, max_sectors_kb) of one WILLNEED request
 * (force_page_cache_ra) and drops the rest, and that is 128 KiB on many
 * devices. One request for the whole range (the first try, removed in
 * f206715a) read its first 8 MiB here and no more. */
#define READ_AHEAD_PIECE ((uint64_t)128 << 10)

/* Asks the kernel to read bytes [0, len) of `fd` into the page cache,
 * without waiting for them: the requests queue up (up to the device's
 * queue depth), so the disk streams while the caller works. Advice only. */
static void read_ahead_range(int fd, uint64_t len) {
  for (uint64_t at = 0; at < len; at += READ_AHEAD_PIECE) {
    uint64_t n = len - at < READ_AHEAD_PIECE ? len - at : READ_AHEAD_PIECE;
    (void)posix_fadvise(fd, (off_t)at, (off_t)n, POSIX_FADV_WILLNEED);
  }
}

typedef struct PopulateJob {
  uint8_t *start;
  size_t len;
  int err; /* errno of a failed madvise, else 0 */
} PopulateJob;

static void *populate_range(void *arg) {
  PopulateJob *job = arg;
  /* Read faults only: MAP_POPULATE or a write would break copy-on-write
   * and copy every page of a private mapping. */
  if (job->len > 0 && madvise(job->start, job->len, MADV_POPULATE_READ) != 0) {
    job->err = errno;
  }
  return NULL;
}

HurrayStatus hurray_reader_populate(HurrayReader *r, unsigned threads, HurrayError *error) {
  if (r == NULL || threads == 0 || threads > 64) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "populate needs a reader and 1 to 64 threads");
  }
  if (!is_mapped(r) || !hurray__populate_read_usable()) {
    /* A kernel before 6.9 could retry a failed page read for ever
     * (file_mappings.h): its read-ahead only, and the reads fault. */
    if (r->fd >= 0) read_ahead_range(r->fd, r->index_offset);
    return HURRAY_OK;
  }
  /* The data region, from the (page-aligned) start of the mapping. */
  uint8_t *base = r->mapping->base;
  size_t len = (size_t)r->index_offset;
  /* Huge pages first: the page-cache misses of the populate below then
   * read the file into 2 MiB folios, which this and every later mapping of
   * the file map with one PMD each instead of 512 PTEs (fewer faults, fewer
   * TLB misses for whoever reads the tensors; ADR-0021). */
  (void)madvise(base, len, MADV_HUGEPAGE);
  (void)madvise(base, len, MADV_SEQUENTIAL);
  /* Not read_ahead_range, though it made a cold torch load of 512 MiB
   * 0.24 s instead of 0.26-0.41: its pages land in 4 KiB folios, and none
   * of the file was then mapped with PMDs (502 MiB with this). */
  (void)madvise(base, len, MADV_WILLNEED);
  long page_size = sysconf(_SC_PAGESIZE);
  size_t page = page_size > 0 ? (size_t)page_size : 4096;
  size_t pages = (len + page - 1) / page;
  if (threads > pages) threads = pages > 0 ? (unsigned)pages : 1;
  PopulateJob jobs[64];
  size_t per = (pages + threads - 1) / threads * page;
  for (unsigned i = 0; i < threads; i++) {
    size_t from = per * i;
    jobs[i].start = base + (from < len ? from : len);
    jobs[i].len = from >= len ? 0 : (len - from < per ? len - from : per);
    jobs[i].err = 0;
  }
  run_jobs(populate_range, jobs, sizeof jobs[0], threads);
  /* Back to normal read-ahead for whatever touches the mapping later. */
  (void)madvise(base, len, MADV_NORMAL);
  for (unsigned i = 0; i < threads; i++) {
    if (jobs[i].err == EINVAL || jobs[i].err == ENOSYS) return HURRAY_OK; /* old kernel */
    if (jobs[i].err != 0) {
      return hurray__fail_os(error, HURRAY_ERR_IO, jobs[i].err,
                             "populating the mapping failed: %s (was the file truncated?)",
                             strerror(jobs[i].err));
    }
  }
  return HURRAY_OK;
}

/* cachestat(2), Linux 6.5: the same number on every architecture with the
 * generic syscall table; older C libraries do not name it. */
#if !defined(SYS_cachestat) && \
    (defined(__x86_64__) || defined(__aarch64__) || (defined(__riscv) && __riscv_xlen == 64))
#  define SYS_cachestat 451
#endif

/* cachestat walks every page-cache entry of its range: for 1 GiB cached
 * by read() (mostly 2 MiB folios) one call took 150 us, for 1 GiB in
 * 4 KiB folios 9-40 ms (measured here). So beyond CACHESTAT_WINDOWS *
 * CACHESTAT_WINDOW_PAGES pages the share comes from that many windows
 * spread evenly, one call each: 25 us with nothing cached, 30 us after
 * read(), 90 us in 4 KiB folios, where sampling 1024 pages with mincore
 * took 1.2 ms whatever the state. */
#define CACHESTAT_WINDOWS 64
#define CACHESTAT_WINDOW_PAGES 16

/* The share of the `pages` pages of size `page` from the start of `fd` in
 * the page cache, from cachestat(2). False where there is no answer (a
 * kernel before 6.5: ENOSYS; a seccomp filter that does not know the call:
 * EPERM), and with HURRAY_CACHESTAT=0 in the environment (tests compare the
 * two ways). */
static bool cachestat_share(int fd, size_t pages, size_t page, double *share) {
#ifdef SYS_cachestat
  const char *knob = getenv("HURRAY_CACHESTAT");
  if (knob != NULL && strcmp(knob, "0") == 0) return false;
  bool whole = pages <= (size_t)CACHESTAT_WINDOWS * CACHESTAT_WINDOW_PAGES;
  unsigned windows = whole ? 1 : CACHESTAT_WINDOWS;
  uint64_t cached = 0, asked = 0;
  for (unsigned i = 0; i < windows; i++) {
    /* Window i starts at page i * pages / windows: the last one ends by
     * the region's end since pages >= windows * window pages. */
    uint64_t first = whole ? 0 : (uint64_t)i * pages / windows;
    uint64_t count = whole ? pages : CACHESTAT_WINDOW_PAGES;
    struct {
      uint64_t off, len;
    } range = {first * page, count * page};
    struct {
      uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
    } stat;
    if (syscall(SYS_cachestat, (unsigned)fd, &range, &stat, 0u) != 0) return false;
    cached += stat.nr_cache < count ? stat.nr_cache : count;
    asked += count;
  }
  *share = (double)cached / (double)asked;
  return true;
#else
  (void)fd;
  (void)pages;
  (void)page;
  (void)share;
  return false;
#endif
}

HurrayStatus hurray_reader_cached_fraction(HurrayReader *r, double *out, HurrayError *error) {
  if (r == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader and out are required");
  }
  *out = 0.0;
  if (r->has_source) return HURRAY_OK; /* no page cache behind a source */
  /* A PREAD reader of a file that a 32-bit host cannot map: unknown, 0. */
  if (!hurray__fits_object(r->index_offset)) return HURRAY_OK;
  size_t len = (size_t)r->index_offset;
  long page_size = sysconf(_SC_PAGESIZE);
  size_t page = page_size > 0 ? (size_t)page_size : 4096;
  size_t pages = (len + page - 1) / page;
  if (pages == 0) {
    *out = 1.0;
    return HURRAY_OK;
  }
  if (cachestat_share(r->fd, pages, page, out)) return HURRAY_OK;
  /* A PREAD reader has no mapping: a temporary one, never touched. */
  void *base = is_mapped(r) ? r->mapping->base : mmap(NULL, len, PROT_READ, MAP_SHARED, r->fd, 0);
  if (base == MAP_FAILED) {
    int saved = errno;
    return hurray__fail_os(error, HURRAY_ERR_IO, saved, "mmap failed: %s", strerror(saved));
  }
  /* A sample of at most 1024 pages spread evenly: mincore costs about as
   * much per page as a page fault, which would make the check as slow as
   * what it decides about (40 ms for 1 GiB, measured). */
  size_t samples = pages < 1024 ? pages : 1024;
  size_t resident = 0;
  HurrayStatus status = HURRAY_OK;
  for (size_t i = 0; i < samples; i++) {
    size_t at = (size_t)((unsigned long long)i * pages / samples);
    unsigned char v = 0;
    if (mincore((uint8_t *)base + at * page, 1, &v) != 0) {
      int saved = errno;
      status = hurray__fail_os(error, HURRAY_ERR_IO, saved, "mincore failed: %s", strerror(saved));
      break;
    }
    resident += v & 1;
  }
  if (!is_mapped(r)) munmap(base, len);
  if (status == HURRAY_OK) *out = (double)resident / (double)samples;
  return status;
}

/* Reading ahead a range that is already cached costs a page-cache lookup
 * per page and reads nothing: 2 ms for 512 MiB, where a load of it warm
 * takes 0.1 ms before its first touch. */
#define READ_AHEAD_CACHED_ENOUGH 0.95

/* Whether the data region is worth reading ahead: it is in a file, and
 * less than READ_AHEAD_CACHED_ENOUGH of it is cached. */
static bool worth_reading_ahead(HurrayReader *r) {
  if (r->has_source || r->fd < 0) return false; /* no page cache behind a source */
  double cached = 0.0;
  HurrayError ignored = {0};
  return hurray_reader_cached_fraction(r, &cached, &ignored) != HURRAY_OK ||
         cached < READ_AHEAD_CACHED_ENOUGH;
}

/* How much of the data region to read ahead: at most an eighth of the
 * memory this process may fill (its cgroup's limit, if lower than the
 * machine's). On a larger file, pages read this early would be evicted
 * before the loader reaches them. */
static uint64_t read_ahead_length(const HurrayReader *r) {
  uint64_t memory = hurray__memory_limit();
  uint64_t cap = memory != UINT64_MAX ? memory / 8 : (uint64_t)1 << 30;
  return r->index_offset < cap ? r->index_offset : cap;
}

HurrayStatus hurray_reader_read_ahead(HurrayReader *r, HurrayError *error) {
  if (r == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader is required");
  if (worth_reading_ahead(r)) read_ahead_range(r->fd, read_ahead_length(r));
  return HURRAY_OK;
}

/* What the read-ahead thread owns: a descriptor of its own, so that it may
 * outlive the reader, and the length to ask for. */
typedef struct ReadAheadJob {
  int fd;
  uint64_t len;
} ReadAheadJob;

struct HurrayReadAhead {
  pthread_t thread;
};

static void *read_ahead_thread(void *arg) {
  ReadAheadJob *job = arg;
  read_ahead_range(job->fd, job->len);
  close(job->fd);
  free(job);
  return NULL;
}

/* Starts the thread with every signal blocked: a detached thread lives on
 * after the call, and a signal the kernel gave it would not interrupt the
 * main thread's wait, where Python runs its handlers. */
static bool start_read_ahead_thread(pthread_t *thread, ReadAheadJob *job) {
  sigset_t all, old;
  sigfillset(&all);
  if (pthread_sigmask(SIG_BLOCK, &all, &old) != 0) return false;
  bool started = pthread_create(thread, NULL, read_ahead_thread, job) == 0;
  (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
  return started;
}

HurrayReadAhead *hurray__reader_read_ahead_start(HurrayReader *r) {
  if (!worth_reading_ahead(r)) return NULL; /* no thread for a cached file */
  uint64_t len = read_ahead_length(r);
  HurrayReadAhead *ahead = malloc(sizeof *ahead);
  ReadAheadJob *job = malloc(sizeof *job);
  int fd = ahead != NULL && job != NULL ? fcntl(r->fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (fd >= 0) {
    *job = (ReadAheadJob){.fd = fd, .len = len};
    if (start_read_ahead_thread(&ahead->thread, job)) return ahead;
    close(fd);
  }
  free(job);
  free(ahead);
  read_ahead_range(r->fd, len);
  return NULL;
}

void hurray__reader_read_ahead_join(HurrayReadAhead *ahead) {
  if (ahead == NULL) return;
  (void)pthread_join(ahead->thread, NULL);
  free(ahead);
}

void hurray__reader_read_ahead_detach(HurrayReadAhead *ahead) {
  if (ahead == NULL) return;
  (void)pthread_detach(ahead->thread);
  free(ahead);
}

/* ---------------------------------------------------------------- verify */

#define SOURCE_VERIFY_CHUNK ((uint64_t)16 << 20)

/* Through pread, a buffer is read and hashed in pieces of 1 MiB, or of
 * 64 KiB when it is shorter than 1 MiB: a scratch under malloc's mmap
 * threshold (128 KiB) is heap memory used again, where one of the
 * buffer's size is fresh pages faulted in for every buffer (verifying one
 * 256 KiB tensor took 217 us with it, 45 with 64 KiB pieces). Longer
 * buffers keep 1 MiB pieces, whose fresh pages are paid once for many
 * bytes: with 64 KiB ones a PREAD reader verified 4 MiB buffers at
 * 7.1 GB/s instead of 8.7. */
#define PREAD_VERIFY_CHUNK ((uint64_t)1 << 20)
#define PREAD_VERIFY_SMALL_CHUNK ((uint64_t)64 << 10)

/* One buffer through a source without read_batch, or through pread where
 * its length does not fit a size_t, or in a round read again one buffer at
 * a time after a read failed on a hashing thread (verify_round). */
static HurrayStatus checksum_range(HurrayReader *r, uint64_t offset, uint64_t length,
                                   uint64_t *out, HurrayError *error) {
  XXH3_state_t *state = XXH3_createState();
  /* 16 MiB at a time through a source, where each read may be a network
   * request; no more than the buffer needs. */
  uint64_t step = r->has_source                  ? SOURCE_VERIFY_CHUNK
                  : length >= PREAD_VERIFY_CHUNK ? PREAD_VERIFY_CHUNK
                                                 : PREAD_VERIFY_SMALL_CHUNK;
  uint8_t *chunk = malloc(length < step ? (length ? (size_t)length : 1) : (size_t)step);
  HurrayStatus status = HURRAY_OK;
  if (state == NULL || chunk == NULL) {
    status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  } else {
    XXH3_64bits_reset(state);
    while (status == HURRAY_OK && length > 0) {
      uint64_t n = length > step ? step : length;
      status = read_at(r, chunk, n, offset, error);
      XXH3_64bits_update(state, chunk, (size_t)n);
      offset += n;
      length -= n;
    }
    *out = XXH3_64bits_digest(state);
  }
  XXH3_freeState(state);
  free(chunk);
  return status;
}

/* The data region as the file holds it, for hashing: the reader's own
 * mapping in MMAP mode; in MMAP_PRIVATE mode a temporary shared read-only
 * mapping (the private one may hold the caller's writes, and pread would
 * copy every byte once more), unless the verify is `small`: then copying
 * costs less than mapping and unmapping the view. NULL in PREAD mode, which never maps the
 * data (a file cut short under it is an error, not a SIGBUS), or when the
 * mapping fails: then pread. */
static const uint8_t *file_view(HurrayReader *r, bool small, bool *temporary) {
  *temporary = false;
  if (r->mode == HURRAY_READ_MMAP) return r->mapping->base;
  if (r->mode != HURRAY_READ_MMAP_PRIVATE || small) return NULL;
  void *base = mmap(NULL, (size_t)r->index_offset, PROT_READ, MAP_SHARED, r->fd, 0);
  if (base == MAP_FAILED) return NULL;
  *temporary = true;
  return base;
}

/* Below this many bytes a verify through a private reader reads the
 * bytes with pread instead of mapping a view (mmap, faults, madvise,
 * munmap for every call). Tensor by tensor from Python, which is how a
 * caller that wants every bad tensor named verifies: 8 KiB tensors took
 * 20 us each through a view and 4 by pread, 64 KiB ones 30 and 14; at
 * 256 KiB the two were even, at 1 MiB the view was faster (130 us against
 * 160). Hashing this little runs on one thread anyway (hash.c). */
#define VERIFY_SMALL_BYTES ((uint64_t)256 << 10)

/* Whether entries[first, first + count) hold under VERIFY_SMALL_BYTES;
 * stops counting as soon as they do not, so a file of a million tensors
 * costs a few hundred entries here. */
static bool verify_is_small(const HurrayReader *r, size_t first, size_t count) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < count; i++) {
    const TensorEntry entry = entry_at(r, first + i);
    for (uint32_t b = 0; b < entry.buffer_count; b++) {
      bytes += buffer_field(&entry, b, 1);
      if (bytes >= VERIFY_SMALL_BYTES) return false;
    }
  }
  return true;
}

/* A round of hashing ends at this many buffers (bounds the job list for
 * files of a million tensors) or this many bytes per hashing thread (bounds
 * what a round maps in, while keeping every thread busy). */
#define VERIFY_BATCH 4096
#define VERIFY_ROUND_BYTES_PER_THREAD (64u << 20)
/* Large pieces do not count toward that size, but a round ends at this
 * many bytes of every size, so that a cancel hook, asked between rounds
 * of a mapped file, is asked at least once per gigabyte hashed. */
#define VERIFY_ROUND_MAX_BYTES ((uint64_t)1 << 30)

/* Buffers of at least this many bytes are let go of by the thread that
 * hashed them, so that unmapping a large buffer runs in parallel with the
 * hashing of the others; smaller ones are let go of a round at a time.
 * Each MADV_DONTNEED of a multi-threaded process flushes the TLB of every
 * CPU running one of its threads: one per 256 KiB claim (650 calls for a
 * file of 20,000 small tensors) took three quarters of the verify. */
#define VERIFY_DROP_ON_THREAD_BYTES ((size_t)4 << 20)

/* A stretch of a view whose pages are to be let go of. */
typedef struct ViewSpan {
  uintptr_t lo, hi;
} ViewSpan;

static int compare_view_spans(const void *pa, const void *pb) {
  const ViewSpan *a = pa, *b = pb;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Two stretches closer than this are let go of as one: the pages between
 * them (padding, or a few small buffers of another round, which fault in
 * again from the cache when hashed) cost less than a call. */
#define VIEW_SPAN_GAP ((uintptr_t)64 << 10)

/* Lets go of the pages of spans[0..count) (sorted here) with one madvise
 * per stretch of the file they cover. Jobs come in index order, which is
 * sorted by name, while a writer lays buffers out in the order it was given
 * them: "layers.10" sorts between "layers.1" and "layers.2". A round of a
 * checkpoint's small tensors is then spread over a few long stretches of
 * the file; one madvise per buffer (14,000 per verify of 20,000 tensors)
 * made verify 0.46x of a plain read of the mapping. A page at the edge of a
 * stretch that a neighbouring buffer also uses is kept (only whole pages
 * inside are dropped). */
static void drop_spans(ViewSpan *spans, size_t count) {
  if (count == 0) return;
  bool sorted = true;
  for (size_t k = 1; k < count && sorted; k++) sorted = spans[k].lo >= spans[k - 1].lo;
  if (!sorted) qsort(spans, count, sizeof *spans, compare_view_spans);
  ViewSpan run = spans[0];
  for (size_t k = 1; k <= count; k++) {
    if (k < count && spans[k].lo <= run.hi + VIEW_SPAN_GAP) {
      if (spans[k].hi > run.hi) run.hi = spans[k].hi;
      continue;
    }
    hurray__drop_mapped_pages((const void *)run.lo, run.hi - run.lo);
    if (k < count) run = spans[k];
  }
}

/* Pages of a view waiting to be let go of: a round's, let go of while the
 * next round hashes (the `meanwhile` of the hashing pool, hash.h), so that
 * unmapping them costs no CPU time the hashing threads wait for. Each
 * madvise then interrupts the other hashing threads to flush their TLBs,
 * which is why the spans are joined first. */
typedef struct ViewDrops {
  ViewSpan *spans;
  size_t count, cap;
} ViewDrops;

static bool job_in(const HurrayHashJob *job, size_t min, size_t max) {
  return job->len > 0 && job->len >= min && job->len < max;
}

static ViewSpan job_span(const HurrayHashJob *job) {
  ViewSpan span = {(uintptr_t)job->data, (uintptr_t)job->data + job->len};
  return span;
}

/* Adds the round's pieces under VERIFY_DROP_ON_THREAD_BYTES (the larger
 * ones were let go of by their hashing threads); with no memory for them,
 * lets go of their pages now, one call each. */
static void view_drops_add(ViewDrops *d, const HurrayHashJob *jobs, size_t count) {
  if (d->count + count > d->cap) {
    size_t cap = d->count + count > 2 * d->cap ? d->count + count : 2 * d->cap;
    ViewSpan *grown = realloc(d->spans, cap * sizeof *grown);
    if (grown != NULL) {
      d->spans = grown;
      d->cap = cap;
    }
  }
  for (size_t k = 0; k < count; k++) {
    if (!job_in(&jobs[k], 0, VERIFY_DROP_ON_THREAD_BYTES)) continue;
    if (d->count < d->cap) {
      d->spans[d->count++] = job_span(&jobs[k]);
    } else {
      hurray__drop_mapped_pages(jobs[k].data, jobs[k].len);
    }
  }
}

static void view_drops_run(void *ctx) {
  ViewDrops *d = ctx;
  drop_spans(d->spans, d->count);
  d->count = 0;
}

/* A claim of the hashing pool, just hashed: its pieces of
 * VERIFY_DROP_ON_THREAD_BYTES and more are let go of by the thread that
 * hashed them, in parallel with the hashing of the others. The pool claims
 * large pieces up to 64 MiB at a time, so that these calls (and the TLB
 * flushes they send to the other threads) are few: one per 4 MiB claim
 * made 1 GiB verify at 0.88-0.94x of a plain read of the mapping on the
 * 2-CPU VM, 64 MiB claims at 0.97-1.00x (hash.c). A claim holds at most 16
 * such pieces unless one is larger than 64 MiB; more are let go of in
 * several calls. */
#define CLAIM_SPANS 16

/* Pieces of at least this many bytes are mapped with one call before they
 * are hashed (the `before` of the hashing pool) rather than by a page
 * fault per folio as they are read. A file just written sits in 64 KiB
 * folios where its writer found 2 MiB ones dear (ADR-0026), 16,384 faults
 * a GiB: verify of 256 buffers of 4 MiB went from 0.86x to 0.98x of the
 * 2-thread memory-read rate (medians of 8 interleaved pairs of fresh
 * processes, 2-CPU VM), of one 1 GiB buffer's 4 MiB chunks from 0.87x to
 * 0.96x, and of a file read back (2 MiB folios) from 1.18x to 1.36x; cold,
 * at the disk's 2 GB/s, nothing changed. A piece over
 * VERIFY_MAP_MAX_BYTES (a large buffer of a file without chunk checksums)
 * is left to its faults: mapped whole before its first byte is hashed, a
 * piece larger than memory would be read from the disk twice. */
#define VERIFY_MAP_BYTES HURRAY_HASH_CLAIM_BYTES
#define VERIFY_MAP_MAX_BYTES ((size_t)64 << 20)

/* Smaller pieces are claimed up to 1 MiB together, in file order
 * (hash_in_file_order): a claim whose pieces lie together, with gaps under
 * VIEW_SPAN_GAP, is mapped with one call over its stretch once that is at
 * least half of VERIFY_MAP_BYTES. 16,384 just-written buffers of 64 KiB,
 * hashed out of name order: 0.653x to 0.699x and 0.667x to 0.692x of the
 * memory-read rate (medians of 8 interleaved pairs, two runs), read back
 * 1.125x to 1.144x. (Before the rounds were hashed in file order a claim
 * jumped about the file, and a call per claim cost more than it saved.)
 * Sets [*lo, *hi) and returns true for such a claim. */
static bool small_pieces_together(const HurrayHashJob *jobs, size_t count, uintptr_t *lo,
                                  uintptr_t *hi) {
  if (count < 2) return false;
  *lo = *hi = (uintptr_t)jobs[0].data;
  for (size_t k = 0; k < count; k++) {
    uintptr_t at = (uintptr_t)jobs[k].data;
    if (jobs[k].len >= VERIFY_MAP_BYTES) return false;
    if (k > 0 && (at < *hi || at - *hi > VIEW_SPAN_GAP)) return false;
    *hi = at + jobs[k].len;
  }
  return *hi - *lo >= VERIFY_MAP_BYTES / 2 && *hi - *lo <= VERIFY_MAP_MAX_BYTES;
}

/* Maps the pieces of a claim that are to be mapped before they are hashed,
 * but for the first `probed` bytes of the first stretch (first_stretch),
 * which claim_by_pread mapped already. */
static void map_claim(const HurrayHashJob *jobs, size_t count, size_t probed) {
  uintptr_t lo, hi;
  if (small_pieces_together(jobs, count, &lo, &hi)) {
    if (hi - lo > probed) hurray__map_file_pages((const void *)(lo + probed), hi - lo - probed);
    return;
  }
  for (size_t k = 0; k < count; k++) {
    if (job_in(&jobs[k], VERIFY_MAP_BYTES, VERIFY_MAP_MAX_BYTES + 1)) {
      hurray__map_file_pages((const uint8_t *)jobs[k].data + probed, jobs[k].len - probed);
      probed = 0;
    }
  }
}

static void drop_large_pieces(void *ctx, const HurrayHashJob *jobs, size_t count) {
  (void)ctx;
  ViewSpan spans[CLAIM_SPANS];
  size_t n = 0;
  for (size_t k = 0; k < count; k++) {
    if (!job_in(&jobs[k], VERIFY_DROP_ON_THREAD_BYTES, SIZE_MAX)) continue;
    if (n == CLAIM_SPANS) {
      drop_spans(spans, n);
      n = 0;
    }
    spans[n++] = job_span(&jobs[k]);
  }
  drop_spans(spans, n);
}

/* A file is read for hashing claim by claim (hash.c), through its mapping
 * or with pread, whichever the folios the page cache holds it in make
 * cheaper. Through a mapping, every folio costs page-table entries to map
 * and to let go of: on the 2-CPU VM (AMD EPYC, 45.7 GB/s 2-thread memory
 * read) 1 GiB was read in place at 42.8 GB/s in 2 MiB folios (a file read
 * back with read()), 21.5 in 64 KiB ones (a file just written, ADR-0026)
 * and 9.7 in 4 KiB ones (read ahead by a cold load). pread copies every
 * byte once more, into a scratch that stays in the core's cache, at a cost
 * that hardly depends on the folios: xxh3 over 512 KiB pieces reached
 * 43.5, 35.1 and 18.3 GB/s on 2 threads. 256 KiB gave 40.9 and 34.5 for
 * the first two, 1 MiB 31.0 for the second. A reader without a mapping
 * (HURRAY_READ_PREAD, or a verify too small to map a view for) reads every
 * claim with pread. */
#define VERIFY_READ_BYTES ((size_t)512 << 10)

/* Neighbouring buffers of a claim closer than this are read with one
 * pread, the bytes between them (padding) with them. */
#define VERIFY_READ_GAP ((uint64_t)64 << 10)

/* What the hashing threads of one round of a file share. */
typedef struct FileHash {
  HurrayReader *r;
  const uint8_t *view; /* the data region mapped (verify_entries), or NULL */
  int read;            /* a VerifyRead: how claims of `view` are read */
  ViewDrops *drops;    /* pages of `view` to let go of, or NULL */
  pthread_t caller;    /* the only thread that asks the reader's cancel hook */
  bool cancelled;      /* written by `caller` only */
  atomic_bool failed;  /* a read failed (hash_round_of_file reads again) */
  atomic_bool stop;    /* failed or cancelled: no more reads or hashing */
} FileHash;

/* Asks the reader's cancel hook, on the calling thread, once the bytes
 * read by pread since it was last asked reach the interval. */
static bool file_hash_ask_cancel(FileHash *h) {
  if (!cancel_due(h->r, 0)) return false;
  h->cancelled = true;
  atomic_store_explicit(&h->stop, true, memory_order_relaxed);
  return true;
}

/* The pool's `idle` hook: the calling thread, out of claims, still asks
 * for the bytes the other threads read (a last claim can be 64 MiB, and a
 * buffer without chunk sums any length). */
static void file_hash_idle(void *ctx) {
  FileHash *h = ctx;
  if (!atomic_load_explicit(&h->stop, memory_order_relaxed)) (void)file_hash_ask_cancel(h);
}

/* Whether to stop before reading `n` more bytes: a read failed, or the
 * reader's cancel hook says so. The bytes every hashing thread reads count
 * toward HURRAY_READER_CANCEL_INTERVAL, but only the calling thread asks
 * the hook (io.h: never a hashing thread of the pool), before its own next
 * read once they reach it, or while it waits (file_hash_idle). */
static bool file_hash_stop_before(FileHash *h, uint64_t n) {
  if (atomic_load_explicit(&h->stop, memory_order_relaxed)) return true;
  if (h->r->cancel == NULL) return false;
  atomic_fetch_add_explicit(&h->r->unasked_bytes, n, memory_order_relaxed);
  return pthread_equal(pthread_self(), h->caller) && file_hash_ask_cancel(h);
}

/* A job longer than the scratch, read and hashed a scratch at a time;
 * sets *stopped instead if it stopped first (file_hash_stop_before). */
static HurrayStatus hash_long_job(FileHash *h, HurrayHashJob *job, uint8_t *scratch, size_t cap,
                                  bool *stopped, HurrayError *error) {
  HurrayHashStream stream;
  hurray__hash_stream_reset_cached(&stream);
  for (uint64_t done = 0; done < job->len;) {
    size_t n = job->len - done < cap ? (size_t)(job->len - done) : cap;
    if (file_hash_stop_before(h, n)) {
      *stopped = true;
      return HURRAY_OK;
    }
    HURRAY_RETURN_NOT_OK(pread_all(h->r->fd, scratch, n, job->at + done, error));
    hurray__hash_stream_update(&stream, scratch, n);
    done += n;
  }
  job->sum = hurray__hash_stream_digest(&stream);
  return HURRAY_OK;
}

/* Hashes jobs[0..count), whose bytes lie at `at` in the file, with pread.
 * Neighbours that fit in the scratch together are read with one pread;
 * jobs come in file order (hash_in_file_order), but any order is hashed
 * correctly, at a pread each. */
static void hash_from_file(FileHash *h, HurrayHashJob *jobs, size_t count, void *scratch,
                           size_t cap) {
  uint8_t fallback[16 << 10];
  if (scratch == NULL || cap == 0) {
    scratch = fallback;
    cap = sizeof fallback;
  }
  uint8_t *buf = scratch;
  for (size_t k = 0; k < count;) {
    HurrayError error = {0};
    HurrayStatus status;
    bool stopped = false;
    uint64_t at = jobs[k].at;
    if (jobs[k].len > cap) {
      status = hash_long_job(h, &jobs[k], buf, cap, &stopped, &error);
      k++;
    } else {
      uint64_t hi = at + jobs[k].len;
      size_t end = k + 1;
      while (end < count && jobs[end].len <= cap && jobs[end].at >= hi &&
             jobs[end].at - hi <= VERIFY_READ_GAP && jobs[end].at + jobs[end].len - at <= cap) {
        hi = jobs[end].at + jobs[end].len;
        end++;
      }
      if (file_hash_stop_before(h, hi - at)) return;
      status = pread_all(h->r->fd, buf, hi - at, at, &error);
      for (; status == HURRAY_OK && k < end; k++) {
        jobs[k].sum = hurray__checksum_cached(buf + (jobs[k].at - at), jobs[k].len);
      }
    }
    if (stopped) return;
    if (status != HURRAY_OK) {
      atomic_store_explicit(&h->failed, true, memory_order_relaxed);
      atomic_store_explicit(&h->stop, true, memory_order_relaxed);
      return;
    }
  }
}

/* A claim read through the mapping first maps its first VERIFY_PROBE_BYTES
 * with one MADV_POPULATE_READ, timed. Over VERIFY_PROBE_NS (in proportion,
 * for a shorter stretch) the folios are small: that claim and the ones
 * after it read by pread, and once every VERIFY_PROBE_SPACING bytes read so
 * a claim looks again, since a file may sit in large folios in part (a
 * writer whose cheap 2 MiB folios ran out partway, ADR-0026) and a cold
 * file's pages arrive as it is read. Mapping 4 MiB took 3-14 us in 2 MiB
 * folios, 290 us in 64 KiB ones and 361 in 4 KiB ones (means over 1 GiB,
 * 2-CPU VM): 30 us for 2 MiB leaves a factor of four either side. A look
 * every 8 claims instead cost a file of 64 KiB buffers just written a
 * tenth of its rate: each mapped a whole 1 MiB claim for nothing. */
#define VERIFY_PROBE_BYTES ((size_t)2 << 20)
#define VERIFY_PROBE_NS 30000.0
#define VERIFY_PROBE_SPACING ((uint64_t)64 << 20)

/* The first stretch of a claim that map_claim maps with one call. */
static bool first_stretch(const HurrayHashJob *jobs, size_t count, uintptr_t *lo, uintptr_t *hi) {
  if (small_pieces_together(jobs, count, lo, hi)) return true;
  for (size_t k = 0; k < count; k++) {
    if (job_in(&jobs[k], VERIFY_MAP_BYTES, VERIFY_MAP_MAX_BYTES + 1)) {
      *lo = (uintptr_t)jobs[k].data;
      *hi = *lo + jobs[k].len;
      return true;
    }
  }
  return false;
}

/* Whether the claim jobs[0..count) reads by pread: the choice so far, or
 * what a timed mapping of its first stretch says (a claim with none to map
 * keeps the choice). Sets *probed to the bytes of that stretch it mapped. */
static bool claim_by_pread(FileHash *h, const HurrayHashJob *jobs, size_t count, size_t *probed) {
  HurrayReader *r = h->r;
  *probed = 0;
  bool by_pread = atomic_load_explicit(&r->verify_by_pread, memory_order_relaxed);
  if (by_pread) {
    uint64_t bytes = 0;
    for (size_t k = 0; k < count; k++) bytes += jobs[k].len;
    uint64_t before = atomic_fetch_add_explicit(&r->verify_pread_bytes, bytes,
                                                memory_order_relaxed);
    if (before / VERIFY_PROBE_SPACING == (before + bytes) / VERIFY_PROBE_SPACING) return true;
  }
  uintptr_t lo, hi;
  if (!first_stretch(jobs, count, &lo, &hi)) return by_pread;
  size_t n = hi - lo < VERIFY_PROBE_BYTES ? (size_t)(hi - lo) : VERIFY_PROBE_BYTES;
  uint64_t start = hurray__clock_ns();
  hurray__map_file_pages((const void *)lo, n);
  double took = (double)(hurray__clock_ns() - start);
  *probed = n;
  by_pread = took * (double)VERIFY_PROBE_BYTES > VERIFY_PROBE_NS * (double)n;
  atomic_store_explicit(&r->verify_by_pread, by_pread, memory_order_relaxed);
  return by_pread;
}

/* HURRAY_VERIFY_READ=map or =pread makes every claim of a mapped file read
 * that way (tests and benchmarks; read at each round); unset or anything
 * else, each claim chooses. */
typedef enum VerifyRead { VERIFY_READ_EITHER, VERIFY_READ_MAP, VERIFY_READ_PREAD } VerifyRead;

static VerifyRead verify_read_knob(void) {
  const char *knob = getenv("HURRAY_VERIFY_READ");
  if (knob == NULL) return VERIFY_READ_EITHER;
  if (strcmp(knob, "map") == 0) return VERIFY_READ_MAP;
  if (strcmp(knob, "pread") == 0) return VERIFY_READ_PREAD;
  return VERIFY_READ_EITHER;
}

/* The pool's `hash` hook for a file (ctx: its FileHash). */
static void hash_claim_of_file(void *ctx, HurrayHashJob *jobs, size_t count, void *scratch,
                               size_t cap) {
  FileHash *h = ctx;
  if (atomic_load_explicit(&h->stop, memory_order_relaxed)) return;
  size_t probed = 0;
  bool by_pread = h->view == NULL || h->read == VERIFY_READ_PREAD ||
                  (h->read == VERIFY_READ_EITHER && claim_by_pread(h, jobs, count, &probed));
  if (by_pread) {
    hash_from_file(h, jobs, count, scratch, cap);
    return;
  }
  map_claim(jobs, count, probed);
  hurray__hash_claim(jobs, count);
}

static void drop_pending_pages(void *ctx) {
  FileHash *h = ctx;
  view_drops_run(h->drops);
}

/* Through a source with read_batch: the buffers of up to 64 MiB at a time
 * read with one batch into one scratch allocation (a transport merges
 * neighbours into few requests), then hashed. Larger buffers are hashed
 * piecewise by checksum_range. */
#define SOURCE_BATCH_BYTES ((uint64_t)64 << 20)

static HurrayStatus source_batch_hash(HurrayReader *r, HurrayHashJob *jobs, const VerifyRef *refs,
                                      const size_t *which, size_t n, uint64_t total,
                                      HurrayError *error) {
  uint8_t *scratch = malloc(total ? (size_t)total : 1);
  HurrayByteRange *ranges = malloc((n ? n : 1) * sizeof *ranges);
  HurrayStatus status = HURRAY_OK;
  if (scratch == NULL || ranges == NULL) {
    status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  size_t m = 0;
  uint64_t at = 0;
  for (size_t i = 0; status == HURRAY_OK && i < n; i++) {
    const VerifyRef *ref = &refs[which[i]];
    uint64_t length = ref->length;
    jobs[which[i]].data = scratch + at;
    jobs[which[i]].len = (size_t)length;
    if (length > 0) {
      ranges[m].offset = buffer_field(&ref->t, ref->buffer, 0) + ref->start;
      ranges[m].length = length;
      ranges[m].dst = scratch + at;
      m++;
    }
    at += length;
  }
  if (status == HURRAY_OK && m > 0) {
    qsort(ranges, m, sizeof *ranges, compare_source_ranges);
    HurrayError mine = {0};
    status = source_status(r->source.read_batch(r->source.ctx, ranges, m, &mine), ranges[0].offset,
                           total, &mine, error);
  }
  if (status == HURRAY_OK) {
    for (size_t i = 0; i < n; i++) {
      jobs[which[i]].sum = hurray__checksum(jobs[which[i]].data, jobs[which[i]].len);
    }
  }
  free(ranges);
  free(scratch);
  return status;
}

static HurrayStatus verify_round_source(HurrayReader *r, HurrayHashJob *jobs,
                                        const VerifyRef *refs, size_t n, HurrayError *error) {
  size_t *which = malloc((n ? n : 1) * sizeof *which);
  if (which == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  HurrayStatus status = HURRAY_OK;
  size_t pending = 0;
  uint64_t total = 0;
  for (size_t k = 0; status == HURRAY_OK && k < n; k++) {
    uint64_t offset = buffer_field(&refs[k].t, refs[k].buffer, 0) + refs[k].start;
    uint64_t length = refs[k].length;
    if (length > SOURCE_VERIFY_CHUNK) {
      status = checksum_range(r, offset, length, &jobs[k].sum, error);
      continue;
    }
    if (total + length > SOURCE_BATCH_BYTES) {
      status = source_batch_hash(r, jobs, refs, which, pending, total, error);
      pending = 0;
      total = 0;
    }
    which[pending++] = k;
    total += length;
  }
  if (status == HURRAY_OK && pending > 0) {
    status = source_batch_hash(r, jobs, refs, which, pending, total, error);
  }
  free(which);
  return status;
}

/* A job's place in the file, for hashing a round in file order. */
typedef struct JobPlace {
  uint64_t at;
  size_t job;
} JobPlace;

/* hash_in_file_order's scratch: VERIFY_BATCH of each. */
typedef struct FileOrder {
  JobPlace *places;
  HurrayHashJob *sorted;
} FileOrder;

static int compare_job_places(const void *pa, const void *pb) {
  const JobPlace *a = pa, *b = pb;
  return (a->at > b->at) - (a->at < b->at);
}

/* Hashes jobs[0..n) in the order their bytes lie in the file, with
 * `order`'s scratch. The index lists tensors by name, and a writer lays
 * them out in the order it was given them ("layers.10" sorts between
 * "layers.1" and "layers.2"), so a round in index order jumps about the
 * file: neighbours could not be mapped or read together, every jump starts
 * the hardware prefetcher afresh, and xxh3's own prefetch past a buffer's
 * end fetches bytes hashed much later (File.verify() of 16,384 such
 * buffers of 64 KiB through the mapping: 19.6-19.9 GB/s, against 19.1-19.4
 * in index order, 5 of 5 pairs). The sums land in jobs[] as if hashed
 * there. */
static void hash_in_file_order(HurrayHashJob *jobs, size_t n, unsigned threads,
                               const HurrayHashHooks *hooks, const FileOrder *order) {
  bool in_order = true;
  for (size_t k = 1; k < n && in_order; k++) in_order = jobs[k].at >= jobs[k - 1].at;
  if (in_order) {
    hurray__hash_many_with(jobs, n, threads, hooks);
    return;
  }
  JobPlace *places = order->places;
  HurrayHashJob *sorted = order->sorted;
  for (size_t k = 0; k < n; k++) places[k] = (JobPlace){jobs[k].at, k};
  qsort(places, n, sizeof *places, compare_job_places);
  for (size_t k = 0; k < n; k++) sorted[k] = jobs[places[k].job];
  hurray__hash_many_with(sorted, n, threads, hooks);
  for (size_t k = 0; k < n; k++) jobs[places[k].job].sum = sorted[k].sum;
}

/* Hashes refs[0..n) of a file on `threads` threads, each claim through
 * `view` (the data region mapped, or NULL) or by pread. Sets *read_failed
 * when a read by pread failed: the sums are then incomplete. */
static HurrayStatus hash_round_of_file(HurrayReader *r, const uint8_t *view, ViewDrops *drops,
                                       unsigned threads, HurrayHashJob *jobs,
                                       const FileOrder *order, const VerifyRef *refs, size_t n,
                                       bool *read_failed, HurrayError *error) {
  uint64_t total = 0;
  for (size_t k = 0; k < n; k++) {
    jobs[k].at = buffer_field(&refs[k].t, refs[k].buffer, 0) + refs[k].start;
    jobs[k].data = view != NULL ? view + jobs[k].at : NULL;
    jobs[k].len = (size_t)refs[k].length;
    total += refs[k].length;
  }
  FileHash h = {
      .r = r, .view = view, .drops = drops, .read = verify_read_knob(), .caller = pthread_self()};
  atomic_init(&h.failed, false);
  atomic_init(&h.stop, false);
  /* No more scratch than the round reads: a verify of one small tensor
   * (tensor by tensor from Python) then takes a few kilobytes of heap. */
  HurrayHashHooks hooks = {
      .ctx = &h,
      .hash = hash_claim_of_file,
      .scratch_bytes = total < VERIFY_READ_BYTES ? (size_t)(total > 0 ? total : 1)
                                                 : VERIFY_READ_BYTES,
      .idle = r->cancel != NULL ? file_hash_idle : NULL,
  };
  /* The pages stay in the page cache; the process lets go of them, so
   * that verifying a file larger than memory keeps the resident set to two
   * rounds plus one claim per thread. A hashing thread lets go of the
   * pieces of 4 MiB and more of each claim it just hashed; the smaller
   * ones of a round are let go of together while the next round hashes (or
   * by the caller, after the last). */
  if (drops != NULL) {
    hooks.done = drop_large_pieces;
    hooks.meanwhile = drop_pending_pages;
  }
  hash_in_file_order(jobs, n, threads, &hooks, order);
  if (drops != NULL) view_drops_add(drops, jobs, n);
  if (h.cancelled) return cancelled(error);
  *read_failed = atomic_load(&h.failed);
  return HURRAY_OK;
}

/* Whether every ref's length fits a HurrayHashJob (a size_t): on a 32-bit
 * build a buffer of 4 GiB or more without chunk checksums does not, and is
 * hashed through checksum_range. */
static bool refs_fit_jobs(const VerifyRef *refs, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (refs[k].length > SIZE_MAX) return false;
  }
  return true;
}

/* Hashes one round of buffers on the thread pool (or through a source)
 * and reports the first mismatch in index order, so that the error is the
 * same whatever thread found it. `cancel` is asked first (and by pread or
 * through a source without read_batch, the reader's own hook every
 * HURRAY_READER_CANCEL_INTERVAL bytes). A read that failed on a hashing
 * thread stops the others; the round is then read again here, buffer by
 * buffer in index order, so that the failure reported (or the sums, if it
 * does not happen again) does not depend on the threads or their timing. */
static HurrayStatus verify_round(HurrayReader *r, const uint8_t *view, ViewDrops *drops,
                                 unsigned threads, HurrayCancelFn cancel, void *ctx,
                                 HurrayHashJob *jobs, const FileOrder *order,
                                 const VerifyRef *refs, size_t n, HurrayError *error) {
  if (cancel != NULL && cancel(ctx)) return cancelled(error);
  bool one_by_one = false;
  if (!r->has_source && refs_fit_jobs(refs, n)) {
    HURRAY_RETURN_NOT_OK(
        hash_round_of_file(r, view, drops, threads, jobs, order, refs, n, &one_by_one, error));
  } else if (r->has_source && r->source.read_batch != NULL) {
    HurrayError local = {0};
    HURRAY_RETURN_NOT_OK(verify_round_source(r, jobs, refs, n, error != NULL ? error : &local));
  } else {
    one_by_one = true;
  }
  /* One by one, each sum is compared as soon as it is known: a damaged
   * buffer before an unreadable one in index order is the one named, as
   * it is when the two fall in different rounds (rounds are cut by the
   * thread count). */
  for (size_t k = 0; one_by_one && k < n; k++) {
    HURRAY_RETURN_NOT_OK(
        checksum_range(r, buffer_field(&refs[k].t, refs[k].buffer, 0) + refs[k].start,
                       refs[k].length, &jobs[k].sum, error));
    if (jobs[k].sum != ref_expected(&refs[k])) return mismatch(&refs[k], jobs[k].sum, error);
  }
  for (size_t k = 0; k < n; k++) {
    if (jobs[k].sum != ref_expected(&refs[k])) return mismatch(&refs[k], jobs[k].sum, error);
  }
  return HURRAY_OK;
}

/* Verifies entries[0..count) in rounds. `drop_pages` lets go of each
 * round's pages of the reader's own mapping too (the converter); pages of a
 * temporary view are always let go. */
/* Reading a mapping of a file shrunk in place since open touches pages past
 * its end: SIGBUS, which kills the process that asked whether the file is
 * sound. Catches the shrink that happened before this call. A file read
 * with pread is checked too: its index was copied at open, so a file cut
 * short after its last buffer (its trailer gone) read every buffer intact
 * and passed, though it no longer opens. */
static HurrayStatus check_not_shrunk(const HurrayReader *r, HurrayError *error) {
  struct stat st;
  if (r->fd >= 0 && fstat(r->fd, &st) == 0 && (uint64_t)st.st_size < r->file_size) {
    return hurray__fail(error, HURRAY_ERR_TRUNCATED,
                        "the file is %llu bytes now, %llu when it was opened: it was truncated or "
                        "rewritten in place since; open it again",
                        (unsigned long long)st.st_size, (unsigned long long)r->file_size);
  }
  return HURRAY_OK;
}

static HurrayStatus verify_entries(HurrayReader *r, size_t first, size_t count, bool drop_pages,
                                   unsigned threads, HurrayCancelFn cancel, void *ctx,
                                   HurrayError *error) {
  HURRAY_RETURN_NOT_OK(check_not_shrunk(r, error));
  HurrayHashJob *jobs = malloc(VERIFY_BATCH * sizeof *jobs);
  FileOrder order = {malloc(VERIFY_BATCH * sizeof *order.places),
                     malloc(VERIFY_BATCH * sizeof *order.sorted)};
  VerifyRef *refs = malloc(VERIFY_BATCH * sizeof *refs);
  bool temporary = false;
  const uint8_t *view = NULL;
  HurrayStatus status = HURRAY_OK;
  if (jobs == NULL || order.places == NULL || order.sorted == NULL || refs == NULL) {
    status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  } else {
    bool small = r->mode == HURRAY_READ_MMAP_PRIVATE && verify_is_small(r, first, count);
    view = file_view(r, small, &temporary);
  }
  ViewDrops pending = {NULL, 0, 0};
  ViewDrops *drops = view != NULL && (temporary || (drop_pages && r->mode == HURRAY_READ_MMAP))
                         ? &pending
                         : NULL;
  /* A buffer with chunk checksums is checked chunk by chunk whichever way
   * it is read (through a mapping, on every thread), so that every mode
   * gives a file the same verdict. */
  bool by_chunk = r->chunk_sums != NULL;
  const uint8_t *chunk = by_chunk ? r->chunk_sums + 8 * chunks_before(r, first) : NULL;
  size_t n = 0;
  uint64_t bytes = 0, all_bytes = 0;
  for (size_t i = 0; status == HURRAY_OK && i < count; i++) {
    const TensorEntry entry = entry_at(r, first + i);
    for (uint32_t b = 0; status == HURRAY_OK && b < entry.buffer_count; b++) {
      uint64_t length = buffer_field(&entry, b, 1);
      uint64_t pieces = by_chunk ? hurray__chunks_of(length, r->chunk_size) : 0;
      uint64_t step = pieces > 0 ? r->chunk_size : length;
      for (uint64_t k = 0; status == HURRAY_OK && k < (pieces > 0 ? pieces : 1); k++) {
        refs[n].t = entry;
        refs[n].buffer = b;
        refs[n].start = k * step;
        refs[n].length = pieces > 0 && length - k * step < step ? length - k * step : step;
        refs[n].chunk = pieces > 0 ? chunk : NULL;
        if (pieces > 0) chunk += 8;
        /* Only what waits for the round's end to be let go of counts
         * toward the round's size: large pieces are let go of by the
         * thread that hashed them, and every round ends with threads
         * idle while the last pieces are hashed. */
        if (refs[n].length < VERIFY_DROP_ON_THREAD_BYTES) bytes += refs[n].length;
        all_bytes += refs[n].length;
        if (++n == VERIFY_BATCH || bytes >= (uint64_t)threads * VERIFY_ROUND_BYTES_PER_THREAD ||
            all_bytes >= VERIFY_ROUND_MAX_BYTES) {
          status = verify_round(r, view, drops, threads, cancel, ctx, jobs, &order, refs, n,
                                error);
          n = 0;
          bytes = all_bytes = 0;
        }
      }
    }
  }
  if (status == HURRAY_OK && n > 0) {
    status = verify_round(r, view, drops, threads, cancel, ctx, jobs, &order, refs, n, error);
  }
  /* A fault of a later round maps a whole 2 MiB folio again, pages that
   * earlier rounds had let go of included, and a drop of part of it splits
   * the mapping and keeps the rest: a file of small tensors in 2 MiB folios
   * verified out of file order ended with megabytes of it still mapped.
   * The reader's own mapping is therefore let go of whole once at the end,
   * the last round's pages with it; a temporary view lets go of the last
   * round's, then is unmapped. */
  if (drops != NULL && temporary) view_drops_run(drops);
  if (drops != NULL && !temporary) hurray__drop_mapped_pages(view, (size_t)r->index_offset);
  free(pending.spans);
  if (temporary) munmap((void *)view, (size_t)r->index_offset);
  free(jobs);
  free(order.places);
  free(order.sorted);
  free(refs);
  return status;
}

/* Marks in `read` the buffers whose contents placement validation reads
 * for `node`: a sparse layout's index pointers and indices, a page table. */
static void mark_read_buffers(const HurrayDescriptor *node, bool *read) {
  const HurrayLayout *l = &node->layout;
  switch (l->kind) {
    case HURRAY_LAYOUT_COMPOSITE:
      for (uint32_t i = 0; i < l->member_count; i++) {
        mark_read_buffers(l->members[i].descriptor, read);
      }
      break;
    case HURRAY_LAYOUT_PAGED: read[l->table_buffer] = true; break;
    case HURRAY_LAYOUT_SPARSE:
      if (l->format == HURRAY_SPARSE_COO) {
        for (uint32_t dim = 0; dim < node->rank; dim++) read[l->coo_index_buffers[dim]] = true;
      } else {
        read[l->indptr_buffer] = true;
        read[l->indices_buffer] = true;
      }
      break;
    case HURRAY_LAYOUT_DENSE: break;
  }
}

/* Stands in for the bytes of a buffer whose contents placement validation
 * does not read (mark_read_buffers): only its address is looked at, which
 * has every alignment a table may ask for. */
static _Alignas(HURRAY_MAX_ALIGNMENT) const uint8_t unread_bytes[1];

/* Placement validation of entry `t`, whose descriptor `d` is valid, as a
 * read would run it, without handles: the bytes are where the mapping has
 * them; else the buffers validation reads are read, and the rest stand in
 * (a sparse tensor's values or a page pool may be gigabytes, and through a
 * URL each read is a download). */
static HurrayStatus check_placement(HurrayReader *r, const TensorEntry *t,
                                    const HurrayDescriptor *d, HurrayError *error) {
  enum { ON_STACK = 16 };
  HurrayPlacedBuffer placed_on_stack[ON_STACK];
  bool read_on_stack[ON_STACK] = {false};
  uint32_t n = t->buffer_count; /* == d->buffer_count (entry_descriptor) */
  bool small = n <= ON_STACK;
  HurrayPlacedBuffer *placed = small ? placed_on_stack : malloc(n * sizeof *placed);
  bool *read = small ? read_on_stack : calloc(n, sizeof *read); /* read[i]: owned bytes */
  HurrayStatus status = placed == NULL || read == NULL
                            ? hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory")
                            : HURRAY_OK;
  if (status == HURRAY_OK && !is_mapped(r)) mark_read_buffers(d, read);
  uint32_t placed_count = 0;
  for (; status == HURRAY_OK && placed_count < n; placed_count++) {
    uint32_t i = placed_count;
    uint64_t offset = buffer_field(t, i, 0), length = buffer_field(t, i, 1);
    void *data = (void *)unread_bytes;
    if (is_mapped(r)) {
      data = (uint8_t *)r->mapping->base + offset;
    } else if (read[i]) {
      data = NULL;
      status = read_aligned(r, offset, length, d->buffers[i].alignment, &data, error);
    }
    placed[i] = hurray__placed_host(data, length);
  }
  if (status == HURRAY_OK) status = hurray__validate_placed_of_valid(d, placed, error);
  for (uint32_t i = 0; i < placed_count; i++) {
    if (read[i]) free((void *)placed[i].data);
  }
  if (!small) {
    free(placed);
    free(read);
  }
  return status;
}

/* Steps 2-5 of reading entry `t` (file-format.md 10.3), without handing
 * anything out. */
static HurrayStatus check_entry(HurrayReader *r, const TensorEntry *t, HurrayError *error) {
  HurrayDescriptor *d = NULL;
  HurrayStatus status = entry_descriptor(t, &d, error);
  if (status == HURRAY_OK) status = check_placement(r, t, d, error);
  if (status != HURRAY_OK && error != NULL && strstr(error->message, "tensor \"") == NULL) {
    /* Placement's messages name a buffer, not its tensor. */
    char said[sizeof error->message];
    memcpy(said, error->message, sizeof said);
    hurray__fail(error, status, "tensor \"%.*s\": %s", (int)t->name_len, t->name, said);
  }
  hurray_descriptor_destroy(d);
  return status;
}

/* Entries [first, first + count), checked by one thread up to the first
 * that fails. */
typedef struct CheckPart {
  HurrayReader *r;
  size_t first, count;
  HurrayStatus status;
  HurrayError error;
} CheckPart;

static void *check_part(void *arg) {
  CheckPart *p = arg;
  for (size_t i = p->first; p->status == HURRAY_OK && i < p->first + p->count; i++) {
    const TensorEntry t = entry_at(p->r, i);
    p->status = check_entry(p->r, &t, &p->error);
  }
  return NULL;
}

/* Below this many entries a thread of its own costs more than it saves. */
#define CHECK_ENTRIES_PER_THREAD 1024

/* check_entry on each of entries [first, first + count), on several threads
 * when the file is mapped (a pread or a byte source would read through one
 * descriptor or source from several threads at once); the error is the
 * first failing entry's in file order, as one thread would report it. */
static HurrayStatus check_entries(HurrayReader *r, size_t first, size_t count, unsigned threads,
                                  HurrayError *error) {
  CheckPart parts[64];
  if (!is_mapped(r)) threads = 1;
  if (threads > 64) threads = 64;
  if (threads > count / CHECK_ENTRIES_PER_THREAD)
    threads = (unsigned)(count / CHECK_ENTRIES_PER_THREAD);
  if (threads == 0) threads = 1;
  for (unsigned i = 0; i < threads; i++) {
    size_t from = first + count * i / threads;
    parts[i] = (CheckPart){r, from, first + count * (i + 1) / threads - from, HURRAY_OK, {0}};
  }
  run_jobs(check_part, parts, sizeof *parts, threads);
  for (unsigned i = 0; i < threads; i++) {
    if (parts[i].status != HURRAY_OK) {
      if (error != NULL) *error = parts[i].error;
      return parts[i].status;
    }
  }
  return HURRAY_OK;
}

/* Every checksum of entries [first, first + count), then every step of
 * reading each of them, so that a file verify passes can be read whole. */
static HurrayStatus verify_readable(HurrayReader *r, size_t first, size_t count,
                                    HurrayError *error) {
  unsigned threads = hurray__hash_threads_of(r->online_cpus);
  HURRAY_RETURN_NOT_OK(
      verify_entries(r, first, count, false, threads, r->cancel, r->cancel_ctx, error));
  return check_entries(r, first, count, threads, error);
}

HurrayStatus hurray_reader_verify(HurrayReader *r, const char *name, HurrayError *error) {
  if (r == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader is required");
  if (name != NULL) {
    size_t index;
    /* The index lies at the file's end, the first part a shrink cuts. */
    HURRAY_RETURN_NOT_OK(check_not_shrunk(r, error));
    HURRAY_RETURN_NOT_OK(hurray_reader_find(r, name, &index, error));
    return verify_readable(r, index, 1, error);
  }
  return verify_readable(r, 0, r->tensor_count, error);
}

HurrayStatus hurray__reader_verify_flat(HurrayReader *r, HurrayCancelFn cancel, void *ctx,
                                        HurrayError *error) {
  /* One thread: in the converter the check runs just before a copy that
   * keeps the CPUs busy, and on the 2-CPU machine of
   * bench/results/io-speed.md two hashing threads made hurray -> safetensors
   * slower (median 1.19 s against 0.96 s). */
  return verify_entries(r, 0, r->tensor_count, true, 1, cancel, ctx, error);
}

/* -------------------------------------------------------------- metadata */

size_t hurray_reader_metadata_count(const HurrayReader *r) { return r->metadata_count; }

const char *hurray_reader_metadata_key(const HurrayReader *r, size_t index) {
  return index < r->metadata_count ? r->metadata[index].key : NULL;
}

HurrayMetadataType hurray_reader_metadata_type(const HurrayReader *r, size_t index) {
  return index < r->metadata_count ? r->metadata[index].type : (HurrayMetadataType)0;
}

/* `destination` is the getter's output, only checked for NULL here. */
static HurrayStatus metadata_lookup(const HurrayReader *r, const char *key,
                                    HurrayMetadataType type, const void *destination,
                                    const MetadataEntry **out, HurrayError *error) {
  if (r == NULL || key == NULL || destination == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "reader, key and out are required");
  }
  size_t len = strlen(key), lo = 0, hi = r->metadata_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int order = compare_names(r->metadata[mid].key, r->metadata[mid].key_len, key, len);
    if (order == 0) {
      HurrayMetadataType stored = r->metadata[mid].type;
      bool unknown = stored < HURRAY_METADATA_STRING || stored > HURRAY_METADATA_BYTES;
      if (stored != type && !(type == HURRAY_METADATA_BYTES && unknown)) {
        return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                            "metadata \"%s\" has type %d, not %d", key, (int)r->metadata[mid].type,
                            (int)type);
      }
      *out = &r->metadata[mid];
      return HURRAY_OK;
    }
    if (order < 0) lo = mid + 1;
    else hi = mid;
  }
  return hurray__fail(error, HURRAY_ERR_NOT_FOUND, "no metadata \"%s\"", key);
}

HurrayStatus hurray_reader_metadata_string(const HurrayReader *r, const char *key,
                                           const char **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  const MetadataEntry *m;
  HURRAY_RETURN_NOT_OK(metadata_lookup(r, key, HURRAY_METADATA_STRING, out, &m, error));
  *out = (const char *)m->value;
  return HURRAY_OK;
}

HurrayStatus hurray_reader_metadata_int(const HurrayReader *r, const char *key, int64_t *out,
                                        HurrayError *error) {
  const MetadataEntry *m;
  HURRAY_RETURN_NOT_OK(metadata_lookup(r, key, HURRAY_METADATA_INT, out, &m, error));
  *out = (int64_t)hurray__get_le(m->value, 8);
  return HURRAY_OK;
}

HurrayStatus hurray_reader_metadata_float(const HurrayReader *r, const char *key, double *out,
                                          HurrayError *error) {
  const MetadataEntry *m;
  HURRAY_RETURN_NOT_OK(metadata_lookup(r, key, HURRAY_METADATA_FLOAT, out, &m, error));
  uint64_t bits = hurray__get_le(m->value, 8);
  memcpy(out, &bits, 8);
  return HURRAY_OK;
}

HurrayStatus hurray_reader_metadata_bool(const HurrayReader *r, const char *key, bool *out,
                                         HurrayError *error) {
  const MetadataEntry *m;
  HURRAY_RETURN_NOT_OK(metadata_lookup(r, key, HURRAY_METADATA_BOOL, out, &m, error));
  *out = m->value[0] != 0;
  return HURRAY_OK;
}

HurrayStatus hurray_reader_metadata_bytes(const HurrayReader *r, const char *key,
                                          const uint8_t **out, size_t *len_out,
                                          HurrayError *error) {
  if (out != NULL) *out = NULL;
  const MetadataEntry *m;
  HURRAY_RETURN_NOT_OK(metadata_lookup(r, key, HURRAY_METADATA_BYTES, out, &m, error));
  *out = m->value;
  if (len_out != NULL) *len_out = m->value_len;
  return HURRAY_OK;
}

/* ------------------------------------------------ origins (converter) */

int hurray__reader_fd(const HurrayReader *r) { return r->fd; }

bool hurray__reader_offset_of(const HurrayReader *r, const void *p, uint64_t len,
                              uint64_t *offset) {
  if (r->mapping == NULL || p == NULL) return false;
  const uint8_t *base = r->mapping->base, *q = p;
  if (q < base || (uint64_t)(q - base) > r->mapping->len ||
      len > r->mapping->len - (uint64_t)(q - base)) {
    return false;
  }
  *offset = (uint64_t)(q - base);
  return true;
}

bool hurray__reader_buffer_record(const HurrayReader *r, size_t index, uint32_t buffer,
                                  const uint8_t **data, uint64_t *length, uint64_t *checksum,
                                  const uint8_t **chunk_sums, uint64_t *chunk_size) {
  if (r == NULL || index >= r->tensor_count) return false;
  const TensorEntry entry = entry_at(r, index), *t = &entry;
  if (buffer >= t->buffer_count) return false;
  uint64_t offset = buffer_field(t, buffer, 0);
  *length = buffer_field(t, buffer, 1);
  *checksum = buffer_field(t, buffer, 2);
  *chunk_sums = NULL;
  *chunk_size = r->chunk_size;
  if (r->chunk_sums != NULL && hurray__chunks_of(*length, r->chunk_size) > 0) {
    uint64_t before = chunks_before(r, index);
    for (uint32_t b = 0; b < buffer; b++) {
      before += hurray__chunks_of(buffer_field(t, b, 1), r->chunk_size);
    }
    *chunk_sums = r->chunk_sums + 8 * before;
  }
  /* The index was checked against the file when the reader opened it. */
  *data = r->mapping != NULL && offset <= r->mapping->len && *length <= r->mapping->len - offset
              ? r->mapping->base + offset
              : NULL;
  return true;
}
