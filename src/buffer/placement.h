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

#endif
