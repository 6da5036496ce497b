/*
 * Every SIMD level's kernels (src/quant/simd.h) against the scalar ones,
 * byte for byte, on random tables (NaN payloads, infinities, subnormals,
 * -0) and FP6-shaped tables (zero low halves, sign in code bit 5: their
 * own AVX2 lookup), random codes of 4, 6 and 8 bits, random scales and
 * zero points, all three output dtypes, whole groups from aligned starts
 * (their own loops), partial groups, starts at any element (odd nibbles,
 * 6-bit positions not a multiple of 4), codes pointers offset by 1..63
 * bytes and outputs offset by 0..63 elements. Codes sit at the very end of
 * their allocation, so under ASan an over-read fails the test; canaries
 * around the output catch over-writes. Links the library's objects to reach
 * the internal tables of every level this CPU has, in one process.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/quant/scheme.h"
#include "../../src/quant/simd.h"
#include "hurray/quant.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static uint64_t below(uint64_t n) { return n ? next() % n : 0; }

/* A float that exercises the corners: ordinary values most of the time,
 * otherwise raw bit patterns (NaN payloads, infinities, subnormals, -0). */
static float any_float(void) {
  switch (below(8)) {
    case 0: return hurray__f32_from_bits((uint32_t)next());
    case 1: return hurray__f32_from_bits((uint32_t)(next() & 0x807fffffu)); /* subnormal */
    case 2: return below(2) ? -0.0f : 0.0f;
    case 3: return hurray__f32_from_bits(0x7f800000u | (uint32_t)(next() & 0x807fffffu));
    default: return (float)((int64_t)below(2000001) - 1000000) / (float)(1 + below(5000));
  }
}

static const HurrayQuantKernels *levels[8];
static unsigned nlevels;

static int setup(void **state) {
  (void)state;
  for (int l = HURRAY_SIMD_SSE41; l <= HURRAY_SIMD_AVX512; l++) {
    const HurrayQuantKernels *k = hurray__quant_kernels_x86((HurraySimdLevel)l);
    if (k) levels[nlevels++] = k;
  }
  if (hurray__quant_kernels_neon()) levels[nlevels++] = hurray__quant_kernels_neon();
  printf("levels compared with scalar:");
  for (unsigned i = 0; i < nlevels; i++) printf(" %s", levels[i]->name);
  printf(" (selected: %s)\n", hurray_simd_level());
  return 0;
}

/* Whether two outputs of n elements (from byte 0 of each buffer, `cap`
 * bytes in all) are the same: byte for byte, except that a compiler which
 * treats IEEE multiplication as commutative (clang swaps the operands of
 * (v - z) * s at will) may pick the other operand's NaN payload when both are
 * NaN. The spec leaves NaN payloads unspecified (quantization.md, "compare
 * NaN results as NaN"); GCC builds are held to every byte. */
static bool same_output(const uint8_t *want, const uint8_t *got, uint64_t cap, HurrayDType od) {
  unsigned item = od == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  if (memcmp(want, got, cap) == 0) return true;
#if defined(__clang__)
  for (uint64_t i = 0; i + item <= cap; i += item) {
    if (memcmp(want + i, got + i, item) == 0) continue;
    bool nan_w, nan_g;
    if (item == 4) {
      uint32_t a, b;
      memcpy(&a, want + i, 4);
      memcpy(&b, got + i, 4);
      nan_w = (a & 0x7fffffffu) > 0x7f800000u;
      nan_g = (b & 0x7fffffffu) > 0x7f800000u;
    } else {
      uint16_t a, b;
      memcpy(&a, want + i, 2);
      memcpy(&b, got + i, 2);
      /* all exponent bits set, mantissa not 0 */
      uint16_t e = od == HURRAY_DTYPE_FLOAT16 ? 0x7c00u : 0x7f80u;
      uint16_t m = od == HURRAY_DTYPE_FLOAT16 ? 0x03ffu : 0x007fu;
      nan_w = (a & e) == e && (a & m);
      nan_g = (b & e) == e && (b & m);
    }
    if (!(nan_w && nan_g)) return false;
  }
  return true;
#else
  (void)item;
  (void)od;
  return false;
#endif
}

static void random_table(HurrayDecodeTable *t, unsigned bits) {
  t->bits = bits;
  t->map = HURRAY_MAP_TABLE;
  t->unit = 1.0f;
  unsigned pick = bits == 8 ? (unsigned)below(4) : 0;
  if (bits == 6 && below(2)) {
    /* the FP6 shape (fp6_shape): zero low halves, tab[c + 32] = -tab[c];
     * either the real E3M2 or E2M3 values or random high halves (NaN,
     * infinities, subnormals included) */
    unsigned kind = (unsigned)below(4);
    for (unsigned c = 0; c < 256; c++) {
      if (kind < 2) {
        t->tab[c] = hurray__minifloat_decode(kind ? &HURRAY__E2M3 : &HURRAY__E3M2, c & 63u);
      } else if (c % 64 < 32) {
        t->tab[c] = hurray__f32_from_bits((uint32_t)next() << 16);
      } else {
        t->tab[c] = hurray__f32_from_bits(hurray__f32_bits(t->tab[c - 32]) ^ 0x80000000u);
      }
    }
    hurray__decode_table_planes(t);
    assert_true(t->fp6_shape);
    return;
  }
  for (unsigned c = 0; c < 256; c++) {
    if (pick == 1) {
      t->map = HURRAY_MAP_INT8;
      t->tab[c] = (float)(int8_t)c;
    } else if (pick == 2) {
      t->map = HURRAY_MAP_INT8;
      t->unit = 1.0f / 64.0f;
      t->tab[c] = (float)(int8_t)c / 64.0f;
    } else if (pick == 3) {
      t->map = HURRAY_MAP_UINT8;
      t->tab[c] = (float)c;
    } else {
      t->tab[c] = any_float();
    }
  }
  hurray__decode_table_planes(t);
}

static uint64_t code_bytes(unsigned bits, uint64_t count) {
  return bits == 8 ? count : bits == 4 ? (count + 1) / 2 : (count * 6 + 7) / 8;
}

static void one_decode_case(unsigned iter) {
  static const unsigned BITS[3] = {4, 6, 8};
  static const HurrayDType OUT[3] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16,
                                     HURRAY_DTYPE_BFLOAT16};
  HurrayDecodeTable *t = malloc(sizeof *t);
  assert_non_null(t);
  unsigned bits = BITS[below(3)];
  random_table(t, bits);
  if (bits == 8 && iter % 3 == 1) {
    /* an FP8 table in place of a random one, chosen without drawing from
     * the generator so that the other iterations' cases stay as they were */
    t->map = iter % 2 ? HURRAY_MAP_E4M3 : HURRAY_MAP_E5M2;
    const HurrayMinifloat *mf = iter % 2 ? &HURRAY__E4M3 : &HURRAY__E5M2;
    for (unsigned c = 0; c < 256; c++) t->tab[c] = hurray__minifloat_decode(mf, c);
    t->unit = 1.0f;
  }
  uint64_t at = below(4) ? below(200) : 0;
  uint64_t n = below(5) ? below(700) : below(40);
  static const uint64_t BLOCKS[6] = {0, 32, 64, 16, 1, 0};
  uint64_t block = below(3) ? BLOCKS[below(6)] : 1 + below(100);
  /* head 0 often: whole groups from an aligned start take their own loop */
  uint64_t head = block && below(3) ? below(block) : 0;
  uint64_t groups = block ? (head + n) / block + 1 : 1;
  HurrayDType od = OUT[below(3)];
  unsigned item = od == HURRAY_DTYPE_FLOAT32 ? 4 : 2;

  uint64_t cb = code_bytes(bits, at + n), shift = 1 + below(63);
  uint8_t *cbase = malloc(shift + cb + 1);
  assert_non_null(cbase);
  uint8_t *codes = cbase + shift;
  for (uint64_t i = 0; i < cb; i++) codes[i] = (uint8_t)next();
  /* codes end exactly at the end of a fresh allocation: */
  uint8_t *tight = malloc(cb ? cb : 1);
  assert_non_null(tight);
  memcpy(tight, codes, cb);

  float *scale = malloc(groups * sizeof(float)), *zp = malloc(groups * sizeof(float));
  assert_non_null(scale);
  assert_non_null(zp);
  for (uint64_t g = 0; g < groups; g++) {
    scale[g] = below(4) ? (float)(1 + below(1000)) / 4096.0f : any_float();
    zp[g] = below(2) ? 0.0f : below(2) ? (float)((int)below(256) - 128) : any_float();
  }
  uint64_t off = below(64), cap = (off + n + 16) * item;
  uint8_t *want = malloc(cap), *got = malloc(cap);
  assert_non_null(want);
  assert_non_null(got);
  memset(want, 0xa5, cap);
  hurray__quant_kernels_scalar()->decode(t, tight, at, n, block, head, scale, zp, od,
                                         want + off * item);
  for (unsigned l = 0; l < nlevels; l++) {
    memset(got, 0xa5, cap);
    const uint8_t *src = (l & 1u) ? codes : tight;
    levels[l]->decode(t, src, at, n, block, head, scale, zp, od, got + off * item);
    if (!same_output(want, got, cap, od)) {
      uint64_t i = 0;
      while (want[i] == got[i]) i++;
      fail_msg(
          "iteration %u, level %s: bits %u map %d at %llu n %llu block %llu head %llu "
          "out %s: byte %llu differs (element %lld)",
          iter, levels[l]->name, bits, (int)t->map, (unsigned long long)at, (unsigned long long)n,
          (unsigned long long)block, (unsigned long long)head, hurray_dtype_name(od),
          (unsigned long long)i, (long long)(i / item) - (long long)off);
    }
  }
  /* a group per element */
  float *es = malloc((n + 1) * sizeof(float)), *ez = malloc((n + 1) * sizeof(float));
  assert_non_null(es);
  assert_non_null(ez);
  for (uint64_t k = 0; k < n; k++) {
    es[k] = below(4) ? (float)(1 + below(1000)) / 4096.0f : any_float();
    ez[k] = below(2) ? (float)((int)below(256) - 128) : any_float();
  }
  memset(want, 0xa5, cap);
  hurray__quant_kernels_scalar()->decode_each(t, tight, at, n, es, ez, od, want + off * item);
  for (unsigned l = 0; l < nlevels; l++) {
    memset(got, 0xa5, cap);
    levels[l]->decode_each(t, (l & 1u) ? codes : tight, at, n, es, ez, od, got + off * item);
    if (!same_output(want, got, cap, od)) {
      uint64_t i = 0;
      while (want[i] == got[i]) i++;
      fail_msg(
          "iteration %u, level %s, decode_each: bits %u map %d at %llu n %llu out %s: "
          "element %lld differs",
          iter, levels[l]->name, bits, (int)t->map, (unsigned long long)at, (unsigned long long)n,
          hurray_dtype_name(od), (long long)(i / item) - (long long)off);
    }
  }
  free(es);
  free(ez);
  free(want);
  free(got);
  free(scale);
  free(zp);
  free(tight);
  free(cbase);
  free(t);
}

static void test_decode_matches_scalar(void **state) {
  (void)state;
  for (unsigned iter = 0; iter < 4000; iter++) one_decode_case(iter);
}

/* Every float16 and bfloat16 rounding case: out = (tab[c] - 0) * 1 for
 * tables that hold float32 values around each half-way point. */
static void test_narrowing_every_exponent(void **state) {
  (void)state;
  HurrayDecodeTable *t = malloc(sizeof *t);
  assert_non_null(t);
  t->bits = 8;
  t->map = HURRAY_MAP_TABLE;
  t->unit = 1.0f;
  uint8_t codes[256];
  for (unsigned c = 0; c < 256; c++) codes[c] = (uint8_t)c;
  const float one = 1.0f, zero = 0.0f;
  uint16_t want[256], got[256];
  for (uint32_t hi = 0; hi < 0x10000u; hi += 1) {
    for (unsigned c = 0; c < 256; c++) {
      /* the upper half picks sign/exponent/high mantissa, the low bits
       * sweep the rounding cases of both formats */
      static const uint32_t LOW[8] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001};
      uint32_t low = c < 8 ? LOW[c] : (uint32_t)next() & 0xffffu;
      t->tab[c] = hurray__f32_from_bits(hi << 16 | low);
    }
    for (unsigned od = 0; od < 2; od++) {
      HurrayDType dt = od ? HURRAY_DTYPE_BFLOAT16 : HURRAY_DTYPE_FLOAT16;
      hurray__quant_kernels_scalar()->decode(t, codes, 0, 256, 0, 0, &one, &zero, dt, want);
      for (unsigned l = 0; l < nlevels; l++) {
        levels[l]->decode(t, codes, 0, 256, 0, 0, &one, &zero, dt, got);
        if (!same_output((const uint8_t *)want, (const uint8_t *)got, sizeof want, dt)) {
          unsigned i = 0;
          while (want[i] == got[i]) i++;
          fail_msg("level %s, %s of 0x%08x: 0x%04x, scalar 0x%04x", levels[l]->name,
                   hurray_dtype_name(dt), hurray__f32_bits(t->tab[i]), got[i], want[i]);
        }
      }
    }
  }
  free(t);
}

/* The FP8 maps: the table dequantize builds (elements.h) is what the
 * vector levels compute, every code; and every code under every E8M0
 * scale (0xFF NaN, 0 and 1 giving float32 subnormals, 254 overflowing to
 * infinity), zero points 0 and -0, all output dtypes, blocks of 32 with a
 * partial first and last block, starts at any byte. */
static void test_fp8_every_code_every_scale(void **state) {
  (void)state;
  static const HurrayDType OUT[3] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16,
                                     HURRAY_DTYPE_BFLOAT16};
  HurrayDecodeTable *t = malloc(sizeof *t);
  assert_non_null(t);
  enum { N = 256 * 3 + 40 };
  uint8_t *codes = malloc(N + 64);
  float *scale = malloc(64 * sizeof(float)), *zp = malloc(64 * sizeof(float));
  uint8_t *want = malloc(N * 4 + 64), *got = malloc(N * 4 + 64);
  assert_non_null(codes);
  assert_non_null(scale);
  assert_non_null(zp);
  assert_non_null(want);
  assert_non_null(got);
  /* every code in every 256 consecutive elements, at every position mod 32 */
  for (unsigned i = 0; i < N + 64; i++) codes[i] = (uint8_t)(i * 97u + i / 256u);
  for (unsigned f = 0; f < 2; f++) {
    const HurrayMinifloat *mf = f ? &HURRAY__E5M2 : &HURRAY__E4M3;
    t->bits = 8;
    t->unit = 1.0f;
    t->map = f ? HURRAY_MAP_E5M2 : HURRAY_MAP_E4M3;
    for (unsigned c = 0; c < 256; c++) {
      t->tab[c] = hurray__minifloat_decode(mf, c);
      assert_int_equal(hurray__f32_bits(t->tab[c]), hurray__fp8_bits(t->map, c));
    }
    hurray__decode_table_planes(t);
    for (unsigned e = 0; e < 256; e++) {
      for (unsigned g = 0; g < 64; g++) {
        scale[g] = hurray__e8m0_to_f32((uint8_t)e);
        zp[g] = (g % 7 == 3) ? -0.0f : 0.0f;
      }
      HurrayDType od = OUT[e % 3];
      unsigned item = od == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
      uint64_t at = e % 41, n = N - e % 29, head = e % 32;
      uint64_t cap = n * item;
      hurray__quant_kernels_scalar()->decode(t, codes, at, n, 32, head, scale, zp, od, want);
      for (unsigned l = 0; l < nlevels; l++) {
        memset(got, 0xa5, cap + 64);
        levels[l]->decode(t, codes, at, n, 32, head, scale, zp, od, got);
        if (!same_output(want, got, cap, od) || got[cap] != 0xa5) {
          uint64_t i = 0;
          while (i < cap && want[i] == got[i]) i++;
          fail_msg("%s scale 0x%02x level %s out %s at %llu head %llu: element %llu differs",
                   f ? "e5m2" : "e4m3", e, levels[l]->name, hurray_dtype_name(od),
                   (unsigned long long)at, (unsigned long long)head,
                   (unsigned long long)(i / item));
        }
      }
      /* a group per element, as decode_each sees it */
      hurray__quant_kernels_scalar()->decode_each(t, codes, at, 64, scale, zp, od, want);
      for (unsigned l = 0; l < nlevels; l++) {
        memset(got, 0xa5, 64 * item + 64);
        levels[l]->decode_each(t, codes, at, 64, scale, zp, od, got);
        if (!same_output(want, got, 64 * item, od)) {
          fail_msg("%s scale 0x%02x level %s decode_each out %s differs", f ? "e5m2" : "e4m3", e,
                   levels[l]->name, hurray_dtype_name(od));
        }
      }
    }
  }
  free(codes);
  free(scale);
  free(zp);
  free(want);
  free(got);
  free(t);
}

static void test_encode_affine_matches_scalar(void **state) {
  (void)state;
  static const int32_t RANGES[4][2] = {{-128, 127}, {0, 255}, {-8, 7}, {0, 15}};
  for (unsigned iter = 0; iter < 3000; iter++) {
    uint64_t n = below(600), off = below(64);
    float *x = malloc((off + n + 1) * sizeof(float));
    uint8_t *want = malloc(n + 64), *got = malloc(n + 64);
    assert_non_null(x);
    assert_non_null(want);
    assert_non_null(got);
    for (uint64_t k = 0; k < n; k++) {
      float v = any_float();
      x[off + k] = (hurray__f32_bits(v) & 0x7f800000u) == 0x7f800000u ? 1e30f : v;
    }
    unsigned r = (unsigned)below(4);
    int32_t qmin = RANGES[r][0], qmax = RANGES[r][1];
    int32_t zp = qmin + (int32_t)below((uint64_t)(qmax - qmin + 1));
    float mul = below(4) ? (float)(1 + below(100000)) / 64.0f
                         : hurray__exp2i((int)below(250) - 124);
    memset(want, 0x5a, n + 64);
    hurray__quant_kernels_scalar()->encode_affine(x + off, n, mul, zp, qmin, qmax, want);
    for (unsigned l = 0; l < nlevels; l++) {
      memset(got, 0x5a, n + 64);
      levels[l]->encode_affine(x + off, n, mul, zp, qmin, qmax, got);
      if (memcmp(want, got, n + 64) != 0) {
        uint64_t i = 0;
        while (want[i] == got[i]) i++;
        fail_msg("iteration %u level %s: code %llu is %u, scalar %u (x %a mul %a zp %d)", iter,
                 levels[l]->name, (unsigned long long)i, got[i], want[i], (double)x[off + i],
                 (double)mul, zp);
      }
    }
    free(x);
    free(want);
    free(got);
  }
}

/* The per-group encoders of every scheme (auto-vectorized per level). */
static void test_encode_matches_scalar(void **state) {
  (void)state;
  for (int scheme = HURRAY_SCHEME_AFFINE; scheme <= HURRAY_SCHEME_MXINT8; scheme++) {
    HurrayQuantizeOptions o;
    assert_int_equal(hurray_quantize_options_init(&o, (HurrayQuantScheme)scheme, NULL), HURRAY_OK);
    HurrayResolvedScheme rs;
    assert_int_equal(hurray__resolve_scheme(&o, 2, &rs, NULL), HURRAY_OK);
    bool mx = rs.encoder == HURRAY_ENC_MXFP || rs.encoder == HURRAY_ENC_MXINT8;
    for (unsigned iter = 0; iter < 400; iter++) {
      uint64_t n = below(300), off = below(64);
      float *x = malloc((off + n + 1) * sizeof(float));
      uint8_t *want = malloc(n + 64), *got = malloc(n + 64);
      assert_non_null(x);
      assert_non_null(want);
      assert_non_null(got);
      for (uint64_t k = 0; k < n; k++) {
        float v = any_float();
        x[off + k] = (hurray__f32_bits(v) & 0x7f800000u) == 0x7f800000u ? 3.0f : v;
      }
      float mul = below(3) ? (float)(1 + below(100000)) / 1024.0f
                           : hurray__exp2i((int)below(250) - 124);
      if (below(8) == 0) mul = 0.0f;
      int32_t zp = rs.encoder == HURRAY_ENC_AFFINE
                       ? rs.qmin + (int32_t)below((uint64_t)(rs.qmax - rs.qmin + 1))
                       : 0;
      uint8_t nan = mx && below(4) == 0;
      memset(want, 0x5a, n + 64);
      hurray__quant_kernels_scalar()->encode(&rs, x + off, n, mul, zp, nan, want);
      for (unsigned l = 0; l < nlevels; l++) {
        memset(got, 0x5a, n + 64);
        levels[l]->encode(&rs, x + off, n, mul, zp, nan, got);
        if (memcmp(want, got, n + 64) != 0) {
          uint64_t i = 0;
          while (want[i] == got[i]) i++;
          fail_msg("%s, iteration %u level %s: code %llu is %u, scalar %u",
                   hurray_quant_scheme_name((HurrayQuantScheme)scheme), iter, levels[l]->name,
                   (unsigned long long)i, got[i], want[i]);
        }
      }
      free(x);
      free(want);
      free(got);
    }
  }
}

static void test_range_matches_scalar(void **state) {
  (void)state;
  for (unsigned iter = 0; iter < 3000; iter++) {
    uint64_t n = below(600), off = below(64);
    float *x = malloc((off + n + 1) * sizeof(float));
    assert_non_null(x);
    bool specials = below(2);
    for (uint64_t k = 0; k < n; k++) {
      float v = any_float();
      if (!specials && (hurray__f32_bits(v) & 0x7f800000u) == 0x7f800000u) v = 1.0f;
      x[off + k] = v;
    }
    float lo0 = below(2) ? INFINITY : any_float(), hi0 = below(2) ? -INFINITY : any_float();
    if (lo0 != lo0) lo0 = INFINITY;
    if (hi0 != hi0) hi0 = -INFINITY;
    float wlo = lo0, whi = hi0;
    uint32_t wbad = 0;
    hurray__quant_kernels_scalar()->range(x + off, n, &wlo, &whi, &wbad);
    for (unsigned l = 0; l < nlevels; l++) {
      float lo = lo0, hi = hi0;
      uint32_t bad = 0;
      levels[l]->range(x + off, n, &lo, &hi, &bad);
      /* equal as numbers: the sign of a zero extreme may differ, and no
       * caller can tell (docs/spec/quantization.md uses |lo|, |hi| and
       * comparisons with 0 only) */
      if (!(lo == wlo && hi == whi && bad == wbad)) {
        fail_msg("iteration %u level %s: [%a, %a] bad %u, scalar [%a, %a] bad %u", iter,
                 levels[l]->name, (double)lo, (double)hi, bad, (double)wlo, (double)whi, wbad);
      }
    }
    free(x);
  }
}

static void test_level_name(void **state) {
  (void)state;
  const char *name = hurray_simd_level();
  assert_non_null(name);
  const char *env = getenv("HURRAY_SIMD");
  if (env && strcmp(env, "scalar") == 0) assert_string_equal(name, "scalar");
  assert_true(strcmp(name, "scalar") == 0 || strcmp(name, "sse4.1") == 0 ||
              strcmp(name, "avx2") == 0 || strcmp(name, "avx512") == 0 ||
              strcmp(name, "neon") == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_level_name),
      cmocka_unit_test(test_decode_matches_scalar),
      cmocka_unit_test(test_narrowing_every_exponent),
      cmocka_unit_test(test_fp8_every_code_every_scale),
      cmocka_unit_test(test_encode_affine_matches_scalar),
      cmocka_unit_test(test_encode_matches_scalar),
      cmocka_unit_test(test_range_matches_scalar),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
