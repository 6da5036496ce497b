/*
 * Scalar kernels and the one-time choice of the kernel table (simd.h).
 *
 * HURRAY_SIMD=scalar|sse4.1|avx2|avx512|neon|auto caps the level; a level
 * this CPU or build lacks falls back to the best one below it (the chosen
 * one is hurray_simd_level()). Unset, empty, "auto" or an unknown value:
 * the best level available.
 */
#include "simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "elements.h"
#include "encoders.h"
#include "hurray/common.h"
#include "hurray/quant.h"

/* ---------------------------------------------------------------- scalar */

static void scalar_decode(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                          uint64_t n, uint64_t block, uint64_t head, const float *scale,
                          const float *zp, HurrayDType out_dtype, void *out) {
  uint64_t k = 0, g = 0, left = block ? block - head : n;
  while (k < n) {
    uint64_t end = k + (left < n - k ? left : n - k);
    const float s = scale[g], z = zp[g];
    if (t->bits == 8 && out_dtype == HURRAY_DTYPE_FLOAT32) {
      const uint8_t *c = codes + at;
      float *o = out;
      for (; k < end; k++) o[k] = (t->tab[c[k]] - z) * s;
    }
    hurray__decode_scalar_run(t, codes, at, k, end, s, z, out_dtype, out);
    k = end;
    g++;
    left = block;
  }
}

static void scalar_encode_affine(const float *x, uint64_t n, float mul, int32_t zp, int32_t qmin,
                                 int32_t qmax, uint8_t *dst) {
  const float lo = (float)(qmin - zp), hi = (float)(qmax - zp);
  for (uint64_t k = 0; k < n; k++) {
    float y = x[k] * mul;
    y = y < lo ? lo : y;
    y = y > hi ? hi : y;
    dst[k] = (uint8_t)((int32_t)hurray__rne(y) + zp);
  }
}

static void scalar_range(const float *x, uint64_t n, float *lo_io, float *hi_io,
                         uint32_t *nonfinite) {
  float lo = *lo_io, hi = *hi_io;
  uint32_t bad = 0;
  for (uint64_t k = 0; k < n; k++) {
    float v = x[k];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    bad |= (hurray__f32_bits(v) & 0x7f800000u) == 0x7f800000u;
  }
  *lo_io = lo;
  *hi_io = hi;
  *nonfinite |= bad;
}

static void scalar_decode_each(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                               uint64_t n, const float *scale, const float *zp,
                               HurrayDType out_dtype, void *out) {
  hurray__decode_each_scalar(t, codes, at, 0, n, scale, zp, out_dtype, out);
}

static void scalar_encode(const HurrayResolvedScheme *s, const float *x, uint64_t n, float mul,
                          int32_t zp, uint8_t nan, uint8_t *dst) {
  hurray__encode_run0(s, x, n, mul, zp, nan, dst);
}

static const HurrayQuantKernels SCALAR = {HURRAY_SIMD_SCALAR, "scalar",      scalar_decode,
                                          scalar_decode_each, scalar_encode, scalar_encode_affine,
                                          scalar_range};

const HurrayQuantKernels *hurray__quant_kernels_scalar(void) { return &SCALAR; }

/* ------------------------------------------------------------- dispatch */

static const HurrayQuantKernels *selected = &SCALAR;
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

static int requested_level(void) {
  const char *v = getenv("HURRAY_SIMD");
  if (v == NULL) return -1;
  static const struct {
    const char *name;
    int level;
  } NAMES[] = {{"scalar", HURRAY_SIMD_SCALAR}, {"sse4.1", HURRAY_SIMD_SSE41},
               {"sse41", HURRAY_SIMD_SSE41},   {"avx2", HURRAY_SIMD_AVX2},
               {"avx512", HURRAY_SIMD_AVX512}, {"neon", HURRAY_SIMD_NEON}};
  for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
    if (strcmp(v, NAMES[i].name) == 0) return NAMES[i].level;
  }
  return -1;
}

static void select_kernels(void) {
  int want = requested_level();
  if (want == HURRAY_SIMD_SCALAR) return;
  const HurrayQuantKernels *neon = hurray__quant_kernels_neon();
  if (neon != NULL) {
    selected = neon;
    return;
  }
  for (int level = HURRAY_SIMD_AVX512; level >= HURRAY_SIMD_SSE41; level--) {
    if (want >= 0 && want != HURRAY_SIMD_NEON && level > want) continue;
    const HurrayQuantKernels *k = hurray__quant_kernels_x86((HurraySimdLevel)level);
    if (k != NULL) {
      selected = k;
      return;
    }
  }
}

const HurrayQuantKernels *hurray__quant_kernels(void) {
  pthread_once(&select_once, select_kernels);
  return selected;
}

HURRAY_API const char *hurray_simd_level(void) { return hurray__quant_kernels()->name; }
