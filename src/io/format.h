/*
 * Constants and byte helpers of the file format (docs/spec/file-format.md),
 * shared by the writer and the reader.
 */
#ifndef HURRAY_SRC_IO_FORMAT_H
#define HURRAY_SRC_IO_FORMAT_H

#include <stdint.h>
#include <string.h>

#include "hurray/io.h"

#define HURRAY_FILE_HEADER_BYTES 64u
#define HURRAY_FILE_TRAILER_BYTES 64u
#define HURRAY_FILE_ALIGNMENT 64u

/* "\x89HRY\r\n\x1a\n": a high byte, then CRLF and ^Z, so text-mode mangling
 * and truncated transfers show up, as in PNG. */
static const uint8_t hurray__file_magic[8] = {0x89, 'H', 'R', 'Y', '\r', '\n', 0x1A, '\n'};
static const uint8_t hurray__trailer_magic[8] = {'H', 'R', 'Y', 'E', 'N', 'D', 0x1A, '\n'};

/* The metadata type of the chunk-checksum table (format 1.1, spec 7.1):
 * u64 chunk size, then the xxh3-64 of each chunk of every buffer longer
 * than it, in index order. Not a HurrayMetadataType: the reader keeps the
 * entry to itself. Chunk sizes a reader accepts: 2^16 to 2^40. */
#define HURRAY_METADATA_CHUNK_CHECKSUMS 6
#define HURRAY_CHUNK_LOG2_MIN 16
#define HURRAY_CHUNK_LOG2_MAX 40

/* How many chunk checksums a buffer of `len` bytes has with chunks of
 * `chunk_size` bytes: none when it fits in one chunk (its own checksum
 * covers it as one), else one per chunk, the last possibly shorter. */
static inline uint64_t hurray__chunks_of(uint64_t len, uint64_t chunk_size) {
  return len > chunk_size ? (len - 1) / chunk_size + 1 : 0;
}

/* Trailer field offsets. */
enum {
  TRAILER_INDEX_OFFSET = 0,
  TRAILER_INDEX_LENGTH = 8,
  TRAILER_INDEX_CHECKSUM = 16,
  TRAILER_TENSOR_COUNT = 24,
  TRAILER_METADATA_COUNT = 32,
  TRAILER_MAJOR = 40,
  TRAILER_MINOR = 42,
  TRAILER_FLAGS = 44,
  TRAILER_CHECKSUM = 48,
  TRAILER_MAGIC = 56
};

static inline void hurray__put_le(uint8_t *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (uint8_t)(v >> (8 * i));
  }
}

static inline uint64_t hurray__get_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    v |= (uint64_t)p[i] << (8 * i);
  }
  return v;
}

/* xxh3-64 with seed 0 over `len` bytes. */
uint64_t hurray__checksum(const void *data, size_t len);
/* The same sum, on the code path for bytes the caller has just brought
 * into the CPU's cache (a scratch it filled with pread): AVX-512 where the
 * CPU has it, which is slower than AVX2 on bytes that come from memory
 * (hash_avx512.c). */
uint64_t hurray__checksum_cached(const void *data, size_t len);

#endif
