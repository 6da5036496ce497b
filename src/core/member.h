/*
 * A composite member as a tensor of its own (internal; the Python bindings'
 * Tensor.member uses it).
 */
#ifndef HURRAY_SRC_MEMBER_H
#define HURRAY_SRC_MEMBER_H

#include "hurray/descriptor.h"

/* The member called `name` of composite `d`, with every buffer reference
 * renumbered into a table of its own: the parent's buffers in order of first
 * use (layout, then quantization, then nested members, depth first), their
 * entries and the parent's device copied. `map` (room for the parent's
 * buffer count) receives the parent index of each new buffer, `*map_len`
 * their count. On success *out is owned by the caller.
 * HURRAY_ERR_NOT_FOUND when `d` has no such member. */
HurrayStatus hurray__member_extract(const HurrayDescriptor *d, const char *name,
                                    HurrayDescriptor **out, uint32_t *map, uint32_t *map_len,
                                    HurrayError *error);

#endif
