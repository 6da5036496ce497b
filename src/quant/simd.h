/*
 * The quantization kernels' inner loops, one table of function pointers per
 * instruction-set level (scalar, SSE4.1, AVX2, AVX-512, NEON), chosen once
 * per process from cpuid and the HURRAY_SIMD environment variable
 * (docs/impl/c-ffi.md). Every level computes the same IEEE operations in
 * the same order as the scalar code (a table lookup, one subtraction, one
 * multiplication; no fused multiply-add), so the bytes never depend on the
 * level nor on the thread count.
 *
 * Adding a quantization kind: its scalar kernel goes in its own file; only
 * the hot loops shared by several kinds live here.
 */
#ifndef HURRAY_SRC_QUANT_SIMD_H
#define HURRAY_SRC_QUANT_SIMD_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "elements.h"
#include "hurray/dtype.h"

typedef enum HurraySimdLevel {
  HURRAY_SIMD_SCALAR = 0,
  HURRAY_SIMD_SSE41 = 1,
  HURRAY_SIMD_AVX2 = 2,
  HURRAY_SIMD_AVX512 = 3,
  HURRAY_SIMD_NEON = 4
} HurraySimdLevel;

/* How codes of at most 8 bits map to values before zero point and scale. */
typedef enum HurrayCodeMap {
  HURRAY_MAP_TABLE = 0, /* tab[code] */
  HURRAY_MAP_INT8 = 1,  /* (float)(int8_t)code * unit, which equals tab[code] */
  HURRAY_MAP_UINT8 = 2, /* (float)code * unit, which equals tab[code] */
  /* OCP FP8 codes whose tab[code] equals hurray__fp8_bits: the vector levels
   * build the float32 bit pattern in registers instead of gathering */
  HURRAY_MAP_E4M3 = 3,
  HURRAY_MAP_E5M2 = 4
} HurrayCodeMap;

typedef struct HurrayDecodeTable {
  float tab[256];    /* value of each code; the first 2^bits entries are used */
  unsigned bits;     /* 4 (two codes a byte, low nibble first), 6 (four codes in
                      * three bytes, least significant bits first) or 8 */
  HurrayCodeMap map; /* 8-bit codes only */
  float unit;        /* 1 or 1/64 (MX INT8), a power of two */
  /* byte b of tab[c] for c < 64, for byte-shuffle lookups of 4- and 6-bit
   * codes (hurray__decode_table_planes fills it) */
  uint8_t planes[4][64];
  /* For c < 32, tab[c] has zero low 16 bits and tab[c + 32] is tab[c] with
   * the sign bit flipped, as in both FP6 formats (3 mantissa bits at most,
   * sign in code bit 5): a 6-bit lookup then needs planes 2 and 3 of codes
   * 0..31 and the sign from the code. */
  bool fp6_shape;
} HurrayDecodeTable;

static inline void hurray__decode_table_planes(HurrayDecodeTable *t) {
  bool shape = true;
  for (unsigned c = 0; c < 64; c++) {
    uint32_t u, v;
    memcpy(&u, &t->tab[c], sizeof u);
    memcpy(&v, &t->tab[c ^ 32u], sizeof v);
    shape = shape && (u & 0xffffu) == 0 && (u ^ v) == 0x80000000u;
    for (unsigned b = 0; b < 4; b++) t->planes[b][c] = (uint8_t)(u >> (8 * b));
  }
  t->fp6_shape = shape;
}

/* The float32 bits of an FP8 code (map HURRAY_MAP_E4M3 or _E5M2) as the
 * vector kernels compute them: a normal code's exponent and mantissa move
 * into place and the bias difference (127 - 7, 127 - 15) is added; a
 * subnormal is its mantissa as an integer times 2^-9 / 2^-16 (exact, and
 * no float32 subnormal is ever an operand, so DAZ cannot change it); NaN is
 * the default quiet NaN with the code's sign. The table check in
 * dequantize.c only picks the map when every code matches. */
static inline uint32_t hurray__fp8_bits(HurrayCodeMap map, unsigned code) {
  uint32_t sign = (uint32_t)(code & 0x80u) << 24, mag = code & 0x7fu;
  if (map == HURRAY_MAP_E4M3) {
    if (mag == 0x7fu) return sign | 0x7fc00000u;
    if (mag < 8u) return sign | hurray__f32_bits((float)mag * 0x1p-9f);
    return sign | ((mag << 20) + (120u << 23));
  }
  if (mag >= 0x7cu) return sign | (mag == 0x7cu ? 0x7f800000u : 0x7fc00000u);
  if (mag < 4u) return sign | hurray__f32_bits((float)mag * 0x1p-16f);
  return sign | ((mag << 21) + (112u << 23));
}

/* Decodes codes [at, at + n) (element indices into the packed `codes`) into
 * elements 0 .. n-1 of `out` (FLOAT32, FLOAT16 or BFLOAT16, the float32
 * result rounded to nearest even): out[k] = (value(code) - zp[g]) * scale[g]
 * with g = (head + k) / block, or g = 0 when block is 0. `head` < block is
 * the position of element `at` in its group. */
typedef void (*HurrayDecodeFn)(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                               uint64_t n, uint64_t block, uint64_t head, const float *scale,
                               const float *zp, HurrayDType out_dtype, void *out);

/* The same with a group per element: out[k] uses scale[k] and zp[k]. */
typedef void (*HurrayDecodeEachFn)(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                                   uint64_t n, const float *scale, const float *zp,
                                   HurrayDType out_dtype, void *out);

struct HurrayResolvedScheme;

/* Encodes n elements that share one group (hurray__encode_run0 in
 * encoders.h, the scalar definition). */
typedef void (*HurrayEncodeFn)(const struct HurrayResolvedScheme *s, const float *x, uint64_t n,
                               float mul, int32_t zp, uint8_t nan, uint8_t *dst);

/* dst[k] = clamp(rne(x[k] * mul), qmin - zp, qmax - zp) + zp, as one byte
 * (the affine encoder of quantize.c, docs/spec/quantization.md). */
typedef void (*HurrayEncodeAffineFn)(const float *x, uint64_t n, float mul, int32_t zp,
                                     int32_t qmin, int32_t qmax, uint8_t *dst);

/* Folds x[0..n) into *lo / *hi (v < lo ? v : lo, v > hi ? v : hi; NaN never
 * moves them) and ORs 1 into *nonfinite for a NaN or infinity. */
typedef void (*HurrayRangeFn)(const float *x, uint64_t n, float *lo, float *hi,
                              uint32_t *nonfinite);

typedef struct HurrayQuantKernels {
  HurraySimdLevel level;
  const char *name; /* "scalar", "sse4.1", "avx2", "avx512", "neon" */
  HurrayDecodeFn decode;
  HurrayDecodeEachFn decode_each;
  HurrayEncodeFn encode;
  HurrayEncodeAffineFn encode_affine;
  HurrayRangeFn range;
} HurrayQuantKernels;

/* The table for this process (selected once, thread-safe). */
const HurrayQuantKernels *hurray__quant_kernels(void);

/* The levels' tables; NULL where this build or this CPU lacks the level. */
const HurrayQuantKernels *hurray__quant_kernels_scalar(void);
const HurrayQuantKernels *hurray__quant_kernels_x86(HurraySimdLevel level);
const HurrayQuantKernels *hurray__quant_kernels_neon(void);

/* The scalar value of one code: shared by every level for heads and tails. */
static inline uint32_t hurray__code_at(unsigned bits, const uint8_t *codes, uint64_t i) {
  if (bits == 8) return codes[i];
  if (bits == 4) return (codes[i / 2] >> (4 * (i & 1u))) & 15u;
  uint64_t bit = i * 6;
  unsigned lo = codes[bit / 8], hi = (bit % 8 > 2) ? codes[bit / 8 + 1] : 0;
  return ((lo | hi << 8) >> (bit % 8)) & 0x3fu;
}

/* Stores element k of `out` from its float32 value. */
static inline void hurray__store_one(HurrayDType out_dtype, void *out, uint64_t k, float v) {
  if (out_dtype == HURRAY_DTYPE_FLOAT32) {
    ((float *)out)[k] = v;
  } else if (out_dtype == HURRAY_DTYPE_BFLOAT16) {
    ((uint16_t *)out)[k] = hurray__f32_to_bf16(v);
  } else {
    ((uint16_t *)out)[k] = hurray__f32_to_f16(v);
  }
}

/* Decodes elements [k, end) of a run with one scale and zero point. */
static inline void hurray__decode_scalar_run(const HurrayDecodeTable *t, const uint8_t *codes,
                                             uint64_t at, uint64_t k, uint64_t end, float s,
                                             float z, HurrayDType out_dtype, void *out) {
  for (; k < end; k++) {
    hurray__store_one(out_dtype, out, k,
                      (t->tab[hurray__code_at(t->bits, codes, at + k)] - z) * s);
  }
}

/* decode_each's scalar loop, for heads and tails. */
static inline void hurray__decode_each_scalar(const HurrayDecodeTable *t, const uint8_t *codes,
                                              uint64_t at, uint64_t k, uint64_t end,
                                              const float *scale, const float *zp,
                                              HurrayDType out_dtype, void *out) {
  for (; k < end; k++) {
    hurray__store_one(out_dtype, out, k,
                      (t->tab[hurray__code_at(t->bits, codes, at + k)] - zp[k]) * scale[k]);
  }
}

/* The loop over groups every level shares: RUN(t, codes, at, k, end, s, z,
 * out_dtype, out, ...) decodes elements [k, end) of one group. */
#define HURRAY_DECODE_GROUPS(RUN, ...)                                             \
  do {                                                                             \
    uint64_t k_ = 0, g_ = 0, left_ = block ? block - head : n;                     \
    while (k_ < n) {                                                               \
      uint64_t end_ = k_ + (left_ < n - k_ ? left_ : n - k_);                      \
      RUN(t, codes, at, k_, end_, scale[g_], zp[g_], out_dtype, out, __VA_ARGS__); \
      k_ = end_;                                                                   \
      g_++;                                                                        \
      left_ = block;                                                               \
    }                                                                              \
  } while (0)

#endif
