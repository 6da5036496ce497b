/*
 * What the materialising functions ask of an output. Internal: not
 * exported.
 */
#ifndef HURRAY_SRC_BUFFER_OUTPUT_LIMITS_H
#define HURRAY_SRC_BUFFER_OUTPUT_LIMITS_H

#include <stdint.h>

#include "hurray/buffer.h"

/* The output-size rule of hurray_check_output_size (hurray/buffer.h) for
 * an output assembled from several tensors, such as a global tensor
 * gathered from its shards: the bytes stored are their sum.
 * hurray_check_output_size for an output of `output_bytes` made from
 * `stored_bytes` stored bytes. */
HurrayStatus hurray__check_output_bytes(uint64_t stored_bytes, uint64_t output_bytes,
                                        const HurrayOutputLimits *limits, HurrayError *error);

/* INVALID_ARGUMENT when the `out_bytes` at `out` overlap a buffer of
 * `list`: the kernels read their codes, scales, group indices and sparse
 * indices while they write, so an output over them would change what they
 * read next (and a group index or sparse index changed after it was
 * checked sends reads or writes out of bounds). */
HurrayStatus hurray__check_output_apart(const HurrayBufferList *list, const void *out,
                                        uint64_t out_bytes, HurrayError *error);

#endif
