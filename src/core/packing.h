/*
 * Sub-byte element packing, the one implementation (include/hurray/dtype.h
 * states the rule: element i occupies bits [i*b, (i+1)*b) of a little-endian
 * bit stream). Internal: the Python bindings unpack codes for numpy with it.
 */
#ifndef HURRAY_SRC_PACKING_H
#define HURRAY_SRC_PACKING_H

#include <stddef.h>
#include <stdint.h>

/* Unpacks `count` elements of `bits` bits (1..7) from the `packed_len`
 * bytes at `packed` into one byte each at `codes` (`count` bytes). Bytes
 * past `packed_len` read as zero, so a short input never reads beyond it. */
void hurray__unpack_bits(uint32_t bits, const uint8_t *packed, size_t packed_len, uint64_t count,
                         uint8_t *codes);

/* The inverse: `count` codes (masked to `bits`) into `out`, which must hold
 * (count * bits + 7) / 8 bytes; the padding bits of the last byte are zero. */
void hurray__pack_bits(uint32_t bits, const uint8_t *codes, uint64_t count, uint8_t *out);

#endif
