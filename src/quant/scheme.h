/* A quantization scheme with its options checked and its defaults filled:
 * everything the kernels need to know, in one struct. */
#ifndef HURRAY_SRC_QUANT_SCHEME_H
#define HURRAY_SRC_QUANT_SCHEME_H

#include <stdbool.h>
#include <stdint.h>

#include "elements.h"
#include "hurray/quant.h"

typedef enum HurrayEncoder {
  HURRAY_ENC_AFFINE = 0, /* affine, per_channel, block_affine */
  HURRAY_ENC_Q8_0,
  HURRAY_ENC_Q4_0,
  HURRAY_ENC_NF4,
  HURRAY_ENC_MXFP,
  HURRAY_ENC_MXINT8
} HurrayEncoder;

typedef struct HurrayResolvedScheme {
  HurrayQuantScheme scheme;
  HurrayEncoder encoder;
  HurrayDType code_dtype;
  HurrayDType scale_dtype; /* FLOAT32 for the inline per-tensor scale */
  unsigned code_bits;      /* 4, 6 or 8 */
  uint32_t axis;
  uint64_t block; /* 0: per-tensor or per-channel */
  /* affine and ggml kinds */
  int32_t qmin, qmax;
  int32_t levels;       /* 127 or 7: the symmetric denominator */
  int32_t zp_symmetric; /* 0, 128 or 8 */
  bool symmetric;
  /* MX */
  int emax;
  const HurrayMinifloat *element; /* NULL for MXINT8 */
} HurrayResolvedScheme;

HurrayStatus hurray__resolve_scheme(const HurrayQuantizeOptions *options, uint32_t rank,
                                    HurrayResolvedScheme *out, HurrayError *error);

#endif
