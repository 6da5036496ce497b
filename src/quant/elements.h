/*
 * Element conversions between binary32 and the narrow types the kernels
 * read and write: float16, bfloat16, the OCP minifloats (FP8/FP6/FP4) and
 * E8M0. Everything rounds to nearest even. Written with integer bit
 * manipulation and exact power-of-two scaling, so results do not depend on
 * the compiler's floating-point settings and the loops that call them can
 * vectorize.
 */
#ifndef HURRAY_SRC_QUANT_ELEMENTS_H
#define HURRAY_SRC_QUANT_ELEMENTS_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hurray/dtype.h"

/* Every float operation here must round to binary32 (quantization.md 6):
 * with float arithmetic carried out wider (x87, or s390x under -std=c11),
 * hurray__rne below does not round at all and codes come out truncated. */
/* 16 and 32 (ISO/IEC TS 18661-3, C23: GCC with AVX512-FP16 in GNU mode)
 * evaluate float in float too; only _Float16 differs. */
#if !defined(FLT_EVAL_METHOD) || (FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != -1 && \
                                  FLT_EVAL_METHOD != 16 && FLT_EVAL_METHOD != 32)
#  error \
      "hurray's kernels need FLT_EVAL_METHOD 0 (float arithmetic in float): on 32-bit x86 build with -msse2 -mfpmath=sse (meson.build does)"
#endif

static inline uint32_t hurray__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float hurray__f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* 2^e as a float for -149 <= e <= 127, exactly. */
static inline float hurray__exp2i(int e) {
  if (e >= -126) return hurray__f32_from_bits((uint32_t)(e + 127) << 23);
  return hurray__f32_from_bits(1u << (e + 149));
}

/* Round half to even to an integer, for |t| < 2^22: adding and removing
 * 1.5 * 2^23 leaves no fraction bits, and the default rounding mode
 * (nearest even) does the rest. Callers compile without -ffast-math and
 * with -ffp-contract=off (see meson.build), so the pair is not folded. */
static inline float hurray__rne(float t) {
  const float magic = 12582912.0f;
  return (t + magic) - magic;
}

/* ------------------------------------------------------- float16, bfloat16 */

static inline float hurray__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24, exact */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return hurray__f32_from_bits(sign | 0x7f800000u | (man << 13));
  return hurray__f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t hurray__f32_to_f16(float f) {
  uint32_t x = hurray__f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x1ffu));
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: inf */
  if (x < 0x38800000u) {                                   /* below 2^-14 */
    float t = hurray__f32_from_bits(x) * 16777216.0f;      /* units of 2^-24 */
    return (uint16_t)(sign | (uint16_t)hurray__rne(t));
  }
  uint32_t r = x + 0xfffu + ((x >> 13) & 1u);
  r -= 112u << 23;
  return (uint16_t)(sign | (r >> 13));
}

static inline float hurray__bf16_to_f32(uint16_t b) {
  return hurray__f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t hurray__f32_to_bf16(float f) {
  uint32_t x = hurray__f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* --------------------------------------------------------- OCP minifloats */

/* One element type: E exponent bits, M mantissa bits, exponent bias, the
 * largest finite magnitude and its code (sign bit clear). */
typedef struct HurrayMinifloat {
  int ebits;
  int mbits;
  int bias;
  float max;
  uint8_t max_code;
  /* Codes (sign clear) at or above these are special: E4M3 0x7F is NaN;
   * E5M2 0x7C is Inf and above it NaN. 0 = none (FP6, FP4). */
  uint8_t inf_code;
  uint8_t nan_code;
} HurrayMinifloat;

static const HurrayMinifloat HURRAY__E4M3 = {4, 3, 7, 448.0f, 0x7e, 0, 0x7f};
static const HurrayMinifloat HURRAY__E5M2 = {5, 2, 15, 57344.0f, 0x7b, 0x7c, 0x7d};
static const HurrayMinifloat HURRAY__E3M2 = {3, 2, 3, 28.0f, 0x1f, 0, 0};
static const HurrayMinifloat HURRAY__E2M3 = {2, 3, 1, 7.5f, 0x1f, 0, 0};
static const HurrayMinifloat HURRAY__E2M1 = {2, 1, 1, 6.0f, 0x07, 0, 0};

/* The value of a code (sign bit at bit ebits + mbits). */
static inline float hurray__minifloat_decode(const HurrayMinifloat *t, unsigned code) {
  unsigned width = (unsigned)(t->ebits + t->mbits);
  unsigned mag = code & ((1u << width) - 1u);
  int negative = (code >> width) & 1u;
  float v;
  if (t->nan_code && mag >= t->nan_code) {
    v = NAN;
  } else if (t->inf_code && mag == t->inf_code) {
    v = INFINITY;
  } else {
    unsigned e = mag >> t->mbits;
    unsigned m = mag & ((1u << t->mbits) - 1u);
    if (e == 0) {
      v = (float)m * hurray__exp2i(1 - t->bias - t->mbits);
    } else {
      v = (float)((1u << t->mbits) + m) * hurray__exp2i((int)e - t->bias - t->mbits);
    }
  }
  return negative ? -v : v;
}

/* The code of finite `y`, rounded to nearest even and saturated to +-max.
 * Branch-free, so loops over it vectorize; EB, MB and BIAS are constants at
 * every use (HURRAY__MINIFLOAT_ENCODER below). */
static inline uint8_t hurray__minifloat_encode_c(float y, int EB, int MB, int BIAS,
                                                 uint32_t MAXCODE) {
  const int emin = 1 - BIAS;
  const int drop = 23 - MB;
  uint32_t x = hurray__f32_bits(y);
  uint32_t sign = (x >> 31) << (EB + MB);
  uint32_t u = x & 0x7fffffffu;
  float a = hurray__f32_from_bits(u);
  /* subnormal range: multiples of 2^(emin - MB); rounding up to 2^MB is the
   * smallest normal's code, so it needs nothing extra */
  uint32_t sub = (uint32_t)(int32_t)hurray__rne(a * hurray__exp2i(MB - emin));
  uint32_t r = u + (1u << (drop - 1)) - 1u + ((u >> drop) & 1u);
  uint32_t norm = (r >> drop) - ((uint32_t)(127 - BIAS) << MB);
  uint32_t mag = a < hurray__exp2i(emin) ? sub : norm;
  mag = mag > MAXCODE ? MAXCODE : mag;
  return (uint8_t)(sign | mag);
}

static inline uint8_t hurray__minifloat_encode(const HurrayMinifloat *t, float y) {
  return hurray__minifloat_encode_c(y, t->ebits, t->mbits, t->bias, t->max_code);
}

/* Element type of a minifloat dtype, or NULL. */
static inline const HurrayMinifloat *hurray__minifloat_of(HurrayDType dtype) {
  switch (dtype) {
    case HURRAY_DTYPE_FLOAT8_E4M3FN: return &HURRAY__E4M3;
    case HURRAY_DTYPE_FLOAT8_E5M2: return &HURRAY__E5M2;
    case HURRAY_DTYPE_FLOAT6_E3M2FN: return &HURRAY__E3M2;
    case HURRAY_DTYPE_FLOAT6_E2M3FN: return &HURRAY__E2M3;
    case HURRAY_DTYPE_FLOAT4_E2M1FN: return &HURRAY__E2M1;
    default: return NULL;
  }
}

/* E8M0: 2^(b - 127); 0xFF is NaN. */
static inline float hurray__e8m0_to_f32(uint8_t b) {
  return b == 0xff ? NAN : hurray__exp2i((int)b - 127);
}

/* The bitsandbytes NF4 code book, and the binary32 midpoints between
 * neighbours ((a + b) / 2 in binary32, written as exact hex literals: the
 * decimal literals in bitsandbytes' CUDA source round to other values for
 * four of them; docs/spec/quantization.md lists the bit patterns). */
static const float HURRAY__NF4_VALUES[16] = {-1.0f,
                                             -0.6961928009986877f,
                                             -0.5250730514526367f,
                                             -0.39491748809814453f,
                                             -0.28444138169288635f,
                                             -0.18477343022823334f,
                                             -0.09105003625154495f,
                                             0.0f,
                                             0.07958029955625534f,
                                             0.16093020141124725f,
                                             0.24611230194568634f,
                                             0.33791524171829224f,
                                             0.44070982933044434f,
                                             0.5626170039176941f,
                                             0.7229568362236023f,
                                             1.0f};

static const float HURRAY__NF4_MIDPOINTS[15] = {
    -0x1.b239bp-1f,  -0x1.38a4ep-1f,  -0x1.d709p-2f,  -0x1.5bd4ecp-2f, -0x1.e079d8p-3f,
    -0x1.1a7178p-3f, -0x1.74f0e2p-5f, 0x1.45f5fep-5f, 0x1.ec90c4p-4f,  0x1.a0cfcp-3f,
    0x1.2b05a8p-2f,  0x1.8ea7f2p-2f,  0x1.00da08p-1f, 0x1.491b5ep-1f,  0x1.b913b4p-1f};

#endif
