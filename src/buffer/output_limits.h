/*
 * The output-size rule of hurray_check_output_size (hurray/buffer.h) for
 * an output assembled from several tensors, such as a global tensor
 * gathered from its shards: the bytes stored are their sum. Internal: not
 * exported.
 */
#ifndef HURRAY_SRC_BUFFER_OUTPUT_LIMITS_H
#define HURRAY_SRC_BUFFER_OUTPUT_LIMITS_H

#include <stdint.h>

#include "hurray/buffer.h"

/* hurray_check_output_size for an output of `output_bytes` made from
 * `stored_bytes` stored bytes. */
HurrayStatus hurray__check_output_bytes(uint64_t stored_bytes, uint64_t output_bytes,
                                        const HurrayOutputLimits *limits, HurrayError *error);

#endif
