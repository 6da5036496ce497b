/*
 * Helpers shared by the fuzz targets that build a HurrayBufferList out of
 * fuzz bytes (fuzz_capsule_placement.c, fuzz_dequantize.c).
 *
 * Inputs of both targets start the same way:
 *   u8 flags | u16 descriptor length L (little-endian) | L descriptor bytes | rest
 * L is clamped to what the input holds. What `rest` means is up to the
 * target; buffer contents come from a Stream over it and are zero once it
 * runs dry, so short inputs still make full-sized buffers.
 */
#ifndef HURRAY_FUZZ_UTIL_H
#define HURRAY_FUZZ_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

/* No buffer a target builds is larger than this, and no target builds more
 * than FUZZ_MAX_TOTAL bytes of buffers; larger declared sizes get a short
 * buffer (which placement must refuse) instead of an allocation. */
#define FUZZ_MAX_BUFFER (1u << 20)
#define FUZZ_MAX_TOTAL (8u << 20)
/* Tensors are materialised only up to this many elements. */
#define FUZZ_MAX_NUMEL (1u << 20)

typedef struct Stream {
  const uint8_t *p;
  size_t left;
} Stream;

static inline uint8_t stream_u8(Stream *s) {
  if (s->left == 0) return 0;
  s->left--;
  return *s->p++;
}

/* Copies up to n bytes into dst and zero-fills the rest. */
static inline void stream_fill(Stream *s, uint8_t *dst, size_t n) {
  size_t k = n < s->left ? n : s->left;
  if (k > 0) memcpy(dst, s->p, k);
  if (n > k) memset(dst + k, 0, n - k);
  s->p += k;
  s->left -= k;
}

/* Splits the common prefix; returns the decoded descriptor or NULL. */
static inline HurrayDescriptor *fuzz_take_descriptor(const uint8_t *data, size_t size,
                                                     uint8_t *flags, Stream *rest) {
  if (size < 3) return NULL;
  *flags = data[0];
  size_t len = (size_t)data[1] | (size_t)data[2] << 8;
  if (len > size - 3) len = size - 3;
  rest->p = data + 3 + len;
  rest->left = size - 3 - len;
  HurrayDescriptor *d = NULL;
  if (hurray_descriptor_decode(data + 3, len, &d, NULL) != HURRAY_OK) return NULL;
  return d;
}

/* Frees the allocation a (possibly misaligned) buffer lives in. */
static inline void fuzz_release(void *data, void *block) {
  (void)data;
  free(block);
}

/* The memory of one buffer: `size` bytes starting `misalign` bytes past an
 * address aligned to `alignment` (a power of two up to 4096), filled from
 * the stream. Its handle frees it. NULL on failure (the list is then
 * incomplete, which placement reports). */
static inline HurrayBuffer *fuzz_make_buffer(Stream *s, uint64_t size, uint32_t alignment,
                                             uint32_t misalign) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096) alignment = 64;
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  size_t bytes = ((size_t)size + misalign + alignment) / alignment * alignment;
  void *block = aligned_alloc(alignment, bytes);
  if (block == NULL) return NULL;
  uint8_t *data = (uint8_t *)block + misalign;
  memset(block, 0, misalign);
  stream_fill(s, data, (size_t)size);
  /* On failure create has already released the block. */
  HurrayBuffer *b = NULL;
  if (hurray_buffer_create(data, size, fuzz_release, block, &b, NULL) != HURRAY_OK) {
    return NULL;
  }
  return b;
}

#endif
