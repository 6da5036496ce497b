/*
 * The generic kernel for packed and two-level quantization (ADR-0024,
 * docs/spec/quantization.md §5.6).
 */
#ifndef HURRAY_QUANT_PACKED_H
#define HURRAY_QUANT_PACKED_H

#include <stdbool.h>
#include <stdint.h>

#include "hurray/buffer.h"
#include "hurray/descriptor.h"

/* True when `d` (per-channel, block affine or NF4) uses a packed or
 * two-level field or an fp8 scale dtype, which only this kernel decodes. */
bool hurray__packed_applies(const HurrayDescriptor *d);

/* hurray_dequantize for such a tensor, whose placement is validated and
 * whose output (`numel` elements of out_dtype) fits `out`. Fails with
 * HURRAY_ERR_QUANT_GROUP_INDEX, naming the entry, when a group index lies
 * outside the groups; nothing is written then. */
HurrayStatus hurray__packed_dequantize(const HurrayDescriptor *d, const HurrayBufferList *list,
                                       HurrayDType out_dtype, void *out, uint64_t numel,
                                       uint32_t threads, HurrayError *error);

#endif
