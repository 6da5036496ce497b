/*
 * The element encoders of hurray_quantize (docs/spec/quantization.md), and
 * the loop over a run of elements that share one group. The loop is a
 * static inline function so that each SIMD level (simd_x86.c) compiles the
 * very same C under its own target attribute: the compiler vectorizes it
 * wider, and the results stay those of the C (no contraction, no
 * reassociation: -ffp-contract=off, no -ffast-math).
 */
#ifndef HURRAY_SRC_QUANT_ENCODERS_H
#define HURRAY_SRC_QUANT_ENCODERS_H

#include <stdint.h>
#include <string.h>

#include "elements.h"
#include "scheme.h"

/* Inlined into each level's function even though they are big: that is
 * what compiles them for the level. */
#define HURRAY__ENC_INLINE static inline __attribute__((always_inline))

/* --------------------------------------------------------------- encoders */

HURRAY__ENC_INLINE uint8_t enc_affine(float x, float mul, int32_t zp, int32_t qmin, int32_t qmax) {
  float y = x * mul;
  float lo = (float)(qmin - zp), hi = (float)(qmax - zp);
  y = y < lo ? lo : y;
  y = y > hi ? hi : y;
  return (uint8_t)((int32_t)hurray__rne(y) + zp);
}

/* C's roundf (half away from zero), exactly: y - trunc(y) is exact here. */
HURRAY__ENC_INLINE uint8_t enc_q8_0(float x, float mul) {
  float y = x * mul;
  y = y < -128.0f ? -128.0f : y;
  y = y > 127.0f ? 127.0f : y;
  float t = (float)(int32_t)y;
  float f = y - t;
  t += f >= 0.5f ? 1.0f : 0.0f;
  t -= f <= -0.5f ? 1.0f : 0.0f;
  return (uint8_t)(int32_t)t;
}

/* ggml: (int8_t)(x * id + 8.5f), capped at 15. */
HURRAY__ENC_INLINE uint8_t enc_q4_0(float x, float mul) {
  float y = x * mul;
  y = y + 8.5f;
  y = y < 0.0f ? 0.0f : y;
  int32_t i = (int32_t)y;
  return (uint8_t)(i > 15 ? 15 : i);
}

HURRAY__ENC_INLINE uint8_t enc_nf4(float x, float mul) {
  float y = x * mul;
  uint8_t c = 0;
  for (int j = 0; j < 15; j++) c += y > HURRAY__NF4_MIDPOINTS[j];
  return c;
}

HURRAY__ENC_INLINE uint8_t enc_mxint8(float x, float mul) {
  float y = x * mul * 64.0f;
  y = y < -127.0f ? -127.0f : y;
  y = y > 127.0f ? 127.0f : y;
  return (uint8_t)(int32_t)hurray__rne(y);
}

/* One loop per element type, with the format's constants folded in (the
 * tables are per translation unit, so compare fields, not addresses). */
#define MX_LOOP(EB, MB, BIAS, MAXCODE)                                      \
  for (uint64_t k = 0; k < n; k++) {                                        \
    dst[k] = hurray__minifloat_encode_c(x[k] * mul, EB, MB, BIAS, MAXCODE); \
  }

HURRAY__ENC_INLINE void hurray__encode_mx_run(const HurrayMinifloat *t, const float *x, uint64_t n,
                                              float mul, uint8_t *dst) {
  if (t->ebits == 4) {
    MX_LOOP(4, 3, 7, 0x7eu)
  } else if (t->ebits == 5) {
    MX_LOOP(5, 2, 15, 0x7bu)
  } else if (t->ebits == 3) {
    MX_LOOP(3, 2, 3, 0x1fu)
  } else if (t->mbits == 3) {
    MX_LOOP(2, 3, 1, 0x1fu)
  } else {
    MX_LOOP(2, 1, 1, 0x07u)
  }
}

/* Encodes n elements that share one group: multiplier `mul`, zero point
 * `zp` (affine kinds), `nan` (MX: a non-finite block, all codes 0). */
HURRAY__ENC_INLINE void hurray__encode_run0(const HurrayResolvedScheme *s, const float *x,
                                            uint64_t n, float mul, int32_t zp, uint8_t nan,
                                            uint8_t *dst) {
  const int32_t qmin = s->qmin, qmax = s->qmax;
  switch (s->encoder) {
    case HURRAY_ENC_AFFINE:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_affine(x[k], mul, zp, qmin, qmax);
      return;
    case HURRAY_ENC_Q8_0:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_q8_0(x[k], mul);
      return;
    case HURRAY_ENC_Q4_0:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_q4_0(x[k], mul);
      return;
    case HURRAY_ENC_NF4:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_nf4(x[k], mul);
      return;
    case HURRAY_ENC_MXFP:
      if (nan) {
        memset(dst, 0, n);
        return;
      }
      hurray__encode_mx_run(s->element, x, n, mul, dst);
      return;
    case HURRAY_ENC_MXINT8:
      if (nan) {
        memset(dst, 0, n);
        return;
      }
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_mxint8(x[k], mul);
      return;
  }
}

#endif
