/*
 * Shared between descriptor validation and buffer placement validation.
 */
#ifndef HURRAY_SRC_VALIDATE_INTERNAL_H
#define HURRAY_SRC_VALIDATE_INTERNAL_H

#include "hurray/descriptor.h"

/* Validates `d` and, on success, returns in *needs_out a malloc'd array of
 * buffer_count entries: the bytes each table entry must hold. The caller
 * frees it. */
HurrayStatus hurray__descriptor_buffer_needs(const HurrayDescriptor *d, uint64_t **needs_out,
                                             HurrayError *error);

#endif
