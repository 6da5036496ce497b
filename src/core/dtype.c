#include "hurray/dtype.h"

#include <string.h>

#include "checked.h"

static const struct {
  const char *name;
  uint32_t bits;
} dtype_table[HURRAY_DTYPE_COUNT] = {
    [HURRAY_DTYPE_INVALID] = {NULL, 0},
    [HURRAY_DTYPE_BOOL] = {"bool", 8},
    [HURRAY_DTYPE_INT8] = {"int8", 8},
    [HURRAY_DTYPE_INT16] = {"int16", 16},
    [HURRAY_DTYPE_INT32] = {"int32", 32},
    [HURRAY_DTYPE_INT64] = {"int64", 64},
    [HURRAY_DTYPE_UINT8] = {"uint8", 8},
    [HURRAY_DTYPE_UINT16] = {"uint16", 16},
    [HURRAY_DTYPE_UINT32] = {"uint32", 32},
    [HURRAY_DTYPE_UINT64] = {"uint64", 64},
    [HURRAY_DTYPE_FLOAT16] = {"float16", 16},
    [HURRAY_DTYPE_BFLOAT16] = {"bfloat16", 16},
    [HURRAY_DTYPE_FLOAT32] = {"float32", 32},
    [HURRAY_DTYPE_FLOAT64] = {"float64", 64},
    [HURRAY_DTYPE_COMPLEX64] = {"complex64", 64},
    [HURRAY_DTYPE_COMPLEX128] = {"complex128", 128},
    [HURRAY_DTYPE_FLOAT8_E4M3FN] = {"float8_e4m3fn", 8},
    [HURRAY_DTYPE_FLOAT8_E5M2] = {"float8_e5m2", 8},
    [HURRAY_DTYPE_FLOAT8_E8M0FNU] = {"float8_e8m0fnu", 8},
    [HURRAY_DTYPE_FLOAT6_E3M2FN] = {"float6_e3m2fn", 6},
    [HURRAY_DTYPE_FLOAT6_E2M3FN] = {"float6_e2m3fn", 6},
    [HURRAY_DTYPE_FLOAT4_E2M1FN] = {"float4_e2m1fn", 4},
    [HURRAY_DTYPE_INT4] = {"int4", 4},
    [HURRAY_DTYPE_UINT4] = {"uint4", 4},
};

uint32_t hurray_dtype_bits(HurrayDType dtype) {
  if ((unsigned)dtype >= HURRAY_DTYPE_COUNT) {
    return 0;
  }
  return dtype_table[dtype].bits;
}

const char *hurray_dtype_name(HurrayDType dtype) {
  if ((unsigned)dtype >= HURRAY_DTYPE_COUNT) {
    return NULL;
  }
  return dtype_table[dtype].name;
}

HurrayDType hurray_dtype_from_name(const char *name) {
  if (name == NULL) {
    return HURRAY_DTYPE_INVALID;
  }
  for (int i = 1; i < HURRAY_DTYPE_COUNT; i++) {
    if (strcmp(dtype_table[i].name, name) == 0) {
      return (HurrayDType)i;
    }
  }
  return HURRAY_DTYPE_INVALID;
}

HurrayStatus hurray_dtype_storage_bytes(HurrayDType dtype, uint64_t count, uint64_t *out) {
  uint32_t bits = hurray_dtype_bits(dtype);
  if (out == NULL) {
    return HURRAY_ERR_INVALID_ARGUMENT;
  }
  if (bits == 0) {
    return HURRAY_ERR_DTYPE;
  }
  /* Into a local first: *out is unchanged on failure. Sub-byte counts go by
   * whole groups of 8 elements, so that only a byte count past 2^64 - 1
   * overflows, not the bit count on the way (2^63 int4 are 2^62 bytes). */
  uint64_t bytes;
  if (bits % 8 == 0) {
    if (!hurray__mul_u64(count, bits / 8, &bytes)) return HURRAY_ERR_OVERFLOW;
  } else {
    bytes = count / 8 * bits + hurray__ceil_div_u64(count % 8 * bits, 8);
  }
  *out = bytes;
  return HURRAY_OK;
}
