/*
 * Placement validation for a caller that has already validated the
 * descriptor: the reader validates each entry's descriptor before it places
 * buffers by it (alignments, which buffers to read), and validating it again
 * per tensor was a third of `verify` on a file of small tensors.
 */
#ifndef HURRAY_SRC_PLACEMENT_H
#define HURRAY_SRC_PLACEMENT_H

#include "hurray/buffer.h"
#include "hurray/descriptor.h"

/* hurray_validate_buffer_placement without its first step: `d` must be a
 * descriptor hurray_descriptor_validate accepted and nobody changed since. */
HurrayStatus hurray__validate_placement_of_valid(const HurrayDescriptor *d,
                                                 const HurrayBufferList *list, HurrayError *error);

/* What placement validation looks at in one buffer: a handle's data, size
 * and properties, or those of bytes a caller holds without a handle (the
 * reader's check of every tensor of a mapped file: a handle per buffer cost
 * an allocation and two atomic operations on the mapping's count). */
typedef struct HurrayPlacedBuffer {
  const void *data;
  uint64_t byte_size;
  int32_t device_type;
  int32_t device_id;
  HurrayMemoryClass memory_class;
  HurraySyncMode sync_mode;
} HurrayPlacedBuffer;

/* Host memory described as hurray_buffer_create describes it (buffer.c). */
HurrayPlacedBuffer hurray__placed_host(const void *data, uint64_t byte_size);

/* hurray__validate_placement_of_valid over placed[0 .. d->buffer_count):
 * the caller vouches for the count. */
HurrayStatus hurray__validate_placed_of_valid(const HurrayDescriptor *d,
                                              const HurrayPlacedBuffer *placed,
                                              HurrayError *error);

#endif
