/*
 * hurray/dtype.h - element types.
 *
 * Values are the wire codes of docs/spec/descriptor-encoding.md and never
 * change. Sub-byte types (6- and 4-bit) are packed LSB-first: element i
 * occupies bits [i*b, (i+1)*b) of a little-endian bit stream, so for 4-bit
 * types element 2k sits in the low nibble of byte k (ADR-0012).
 */
#ifndef HURRAY_DTYPE_H
#define HURRAY_DTYPE_H

#include "hurray/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum HurrayDType {
  HURRAY_DTYPE_INVALID = 0,
  HURRAY_DTYPE_BOOL = 1,
  HURRAY_DTYPE_INT8 = 2,
  HURRAY_DTYPE_INT16 = 3,
  HURRAY_DTYPE_INT32 = 4,
  HURRAY_DTYPE_INT64 = 5,
  HURRAY_DTYPE_UINT8 = 6,
  HURRAY_DTYPE_UINT16 = 7,
  HURRAY_DTYPE_UINT32 = 8,
  HURRAY_DTYPE_UINT64 = 9,
  HURRAY_DTYPE_FLOAT16 = 10,
  HURRAY_DTYPE_BFLOAT16 = 11,
  HURRAY_DTYPE_FLOAT32 = 12,
  HURRAY_DTYPE_FLOAT64 = 13,
  HURRAY_DTYPE_COMPLEX64 = 14,
  HURRAY_DTYPE_COMPLEX128 = 15,
  HURRAY_DTYPE_FLOAT8_E4M3FN = 16,
  HURRAY_DTYPE_FLOAT8_E5M2 = 17,
  HURRAY_DTYPE_FLOAT8_E8M0FNU = 18,
  HURRAY_DTYPE_FLOAT6_E3M2FN = 19,
  HURRAY_DTYPE_FLOAT6_E2M3FN = 20,
  HURRAY_DTYPE_FLOAT4_E2M1FN = 21,
  HURRAY_DTYPE_INT4 = 22,
  HURRAY_DTYPE_UINT4 = 23
} HurrayDType;

#define HURRAY_DTYPE_COUNT 24 /* one past the largest code */

/* Bits per element (1 byte for bool), or 0 for an unknown dtype. */
HURRAY_API uint32_t hurray_dtype_bits(HurrayDType dtype);

/* Canonical lower-case name ("float8_e4m3fn", "int4"), or NULL if unknown.
 * Names follow numpy / ml_dtypes spelling. The string is static. */
HURRAY_API const char *hurray_dtype_name(HurrayDType dtype);

/* Inverse of hurray_dtype_name; HURRAY_DTYPE_INVALID if the name is unknown. */
HURRAY_API HurrayDType hurray_dtype_from_name(const char *name);

/* Bytes needed to store `count` packed elements of `dtype`, rounded up to
 * whole bytes. HURRAY_ERR_OVERFLOW if it does not fit in uint64_t,
 * HURRAY_ERR_DTYPE if dtype is unknown. */
HURRAY_API HurrayStatus hurray_dtype_storage_bytes(HurrayDType dtype, uint64_t count,
                                                   uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_DTYPE_H */
