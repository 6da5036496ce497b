/*
 * SSE4.1, AVX2 and AVX-512 kernels (simd.h). Each function carries its own
 * target attribute, so the rest of the library keeps the baseline flags and
 * a level runs only after cpuid said the CPU has it.
 *
 * Lookups stay in registers: 4-bit codes index a 16-entry table with
 * vpermps (AVX-512: one register; AVX2: two and a blend on bit 3) or with
 * pshufb on the table's four byte planes (SSE4.1); 6-bit codes are cut out
 * of their 3-byte groups with a byte shuffle and per-lane shifts, then
 * index a 64-entry table with two vpermt2ps and a blend (AVX-512), or
 * (AVX2, 32 codes a step) pshufb on the table's byte planes with blends on
 * the top two code bits, a gather only for the last few codes of a group;
 * 8-bit integer codes widen and convert, FP8 codes become float32 bit
 * patterns by shifts, adds and blends (hurray__fp8_bits), other 8-bit tables
 * (E8M0, arbitrary) gather. Every path computes (value - zp) * scale with one
 * subtraction and one multiplication, as the scalar code does, and narrows
 * to float16 (vcvtps2ph, round to nearest even) or bfloat16 (integer
 * rounding, NaN quieted) exactly as elements.h does.
 */
#include "encoders.h"
#include "simd.h"

#if defined(__x86_64__) || defined(__i386__)

#  include <cpuid.h>
#  include <immintrin.h>

#  define T41 __attribute__((target("sse4.1")))
#  define T2 __attribute__((target("avx2,f16c")))
#  define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))

/* ---------------------------------------------------------------- AVX-512 */

T512 static inline __m512i bf16_512(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), odd), 16);
  __m512i q = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, r, q);
}

T512 static inline void store16(HurrayDType od, void *out, uint64_t k, __m512 v) {
  if (od == HURRAY_DTYPE_FLOAT32) {
    _mm512_storeu_ps((float *)out + k, v);
  } else if (od == HURRAY_DTYPE_BFLOAT16) {
    _mm256_storeu_si256((__m256i *)((uint16_t *)out + k), _mm512_cvtepi32_epi16(bf16_512(v)));
  } else {
    _mm256_storeu_si256((__m256i *)((uint16_t *)out + k),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

T512 static inline __m512 apply512(__m512 v, __m512 z, __m512 s) {
  return _mm512_mul_ps(_mm512_sub_ps(v, z), s);
}

T512 static inline __m512 nib_lookup512(__m128i c, __m512 tab) {
  return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c), tab);
}

/* A group of 4-bit codes into 16-bit values (bfloat16, float16) needs 16
 * results, not one per element: the group's 16 values are computed and
 * narrowed once, exactly as store16 narrows any element, and every element
 * then looks its code up in them (vpermw, 32 a step). Same bytes as the
 * per-element path, a fraction of the work; worth it from this many
 * elements in the group. */
#  define LUT_RUN 64

/* Elements [k, end) of one group from an even element (at + k); returns
 * where it stopped (fewer than 32 left). */
T512 static inline uint64_t lut_run512(const uint8_t *codes, uint64_t at, uint64_t k, uint64_t end,
                                       __m512 Z, __m512 S, HurrayDType od, void *out, __m512 tab) {
  __m512 v = apply512(tab, Z, S);
  __m256i lut = od == HURRAY_DTYPE_BFLOAT16
                    ? _mm512_cvtepi32_epi16(bf16_512(v))
                    : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i L = _mm512_zextsi256_si512(lut);
  const __m128i m = _mm_set1_epi8(0x0f);
  for (; k + 32 <= end; k += 32) {
    __m128i b = _mm_loadu_si128((const __m128i *)(codes + (at + k) / 2));
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    __m256i c = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    _mm512_storeu_si512((void *)((uint16_t *)out + k),
                        _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(c), L));
  }
  return k;
}

/* 16 FP8 codes as float32, bit for bit hurray__fp8_bits (simd.h): the
 * normal pattern by shift and add, subnormals converted as integers and
 * scaled, then NaN / infinity and the sign. */
T512 static inline __m512 fp8_512(__m128i b, bool e5) {
  const __m512i c = _mm512_cvtepu8_epi32(b);
  const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7f));
  const __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(c, 7), 31);
  __m512 v;
  if (!e5) {
    __m512i norm = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    v = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)),
                             _mm512_castsi512_ps(norm), sub);
    v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)), v,
                             _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  } else {
    __m512i norm = _mm512_add_epi32(_mm512_slli_epi32(mag, 21), _mm512_set1_epi32(112 << 23));
    __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-16f));
    v = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(4)),
                             _mm512_castsi512_ps(norm), sub);
    __m512i special = _mm512_mask_blend_epi32(
        _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7c)), _mm512_set1_epi32(0x7f800000),
        _mm512_set1_epi32(0x7fc00000));
    v = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7b)), v,
                             _mm512_castsi512_ps(special));
  }
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

/* One group of FP8 codes: no alignment head, nothing but the decode. */
T512 static inline void fp8_run512(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                                   uint64_t k, uint64_t end, float s, float z, HurrayDType od,
                                   void *out, bool e5) {
  const __m512 S = _mm512_set1_ps(s), Z = _mm512_set1_ps(z);
  for (; k + 16 <= end; k += 16) {
    __m128i b = _mm_loadu_si128((const __m128i *)(codes + at + k));
    store16(od, out, k, apply512(fp8_512(b, e5), Z, S));
  }
  hurray__decode_scalar_run(t, codes, at, k, end, s, z, od, out);
}

T512 static inline void run512(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                               uint64_t k, uint64_t end, float s, float z, HurrayDType od,
                               void *out, const __m512 *T) {
  const __m512 S = _mm512_set1_ps(s), Z = _mm512_set1_ps(z);
  const unsigned bits = t->bits;
  const uint64_t align = bits == 4 ? 2 : bits == 6 ? 4 : 1;
  uint64_t head = k;
  while (head < end && (at + head) % align) head++;
  hurray__decode_scalar_run(t, codes, at, k, head, s, z, od, out);
  k = head;
  if (bits == 4 && od != HURRAY_DTYPE_FLOAT32 && end - k >= LUT_RUN) {
    k = lut_run512(codes, at, k, end, Z, S, od, out, T[0]);
  }
  if (bits == 4) {
    const __m128i m = _mm_set1_epi8(0x0f);
    for (; k + 32 <= end; k += 32) {
      __m128i b = _mm_loadu_si128((const __m128i *)(codes + (at + k) / 2));
      __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
      store16(od, out, k, apply512(nib_lookup512(_mm_unpacklo_epi8(lo, hi), T[0]), Z, S));
      store16(od, out, k + 16, apply512(nib_lookup512(_mm_unpackhi_epi8(lo, hi), T[0]), Z, S));
    }
    for (; k + 16 <= end; k += 16) {
      __m128i b = _mm_loadl_epi64((const __m128i *)(codes + (at + k) / 2));
      __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
      store16(od, out, k, apply512(nib_lookup512(_mm_unpacklo_epi8(lo, hi), T[0]), Z, S));
    }
  } else if (bits == 6) {
    const __m512i ctl = _mm512_set_epi8(
        -128, 11, 10, 9, -128, 11, 10, 9, -128, 11, 10, 9, -128, 11, 10, 9, -128, 8, 7, 6, -128, 8,
        7, 6, -128, 8, 7, 6, -128, 8, 7, 6, -128, 5, 4, 3, -128, 5, 4, 3, -128, 5, 4, 3, -128, 5,
        4, 3, -128, 2, 1, 0, -128, 2, 1, 0, -128, 2, 1, 0, -128, 2, 1, 0);
    const __m512i sh = _mm512_set_epi32(18, 12, 6, 0, 18, 12, 6, 0, 18, 12, 6, 0, 18, 12, 6, 0);
    const __m512i m = _mm512_set1_epi32(0x3f), bit5 = _mm512_set1_epi32(32);
    for (; k + 16 <= end; k += 16) {
      __m128i b = _mm_maskz_loadu_epi8(0x0fff, codes + (at + k) / 4 * 3);
      __m512i w = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(b), ctl);
      __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(w, sh), m);
      __m512 lo = _mm512_permutex2var_ps(T[0], idx, T[1]);
      __m512 hi = _mm512_permutex2var_ps(T[2], idx, T[3]);
      __m512 v = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, bit5), lo, hi);
      store16(od, out, k, apply512(v, Z, S));
    }
  } else {
    const __m512 U = _mm512_set1_ps(t->unit);
    for (; k + 16 <= end; k += 16) {
      __m128i b = _mm_loadu_si128((const __m128i *)(codes + at + k));
      __m512 v;
      if (t->map == HURRAY_MAP_INT8) {
        v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), U);
      } else if (t->map == HURRAY_MAP_UINT8) {
        v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), U);
      } else {
        v = _mm512_i32gather_ps(_mm512_cvtepu8_epi32(b), t->tab, 4);
      }
      store16(od, out, k, apply512(v, Z, S));
    }
  }
  hurray__decode_scalar_run(t, codes, at, k, end, s, z, od, out);
}

/* The values of the 16 codes from element i (i even for 4-bit codes, a
 * multiple of 4 for 6-bit ones). */
T512 static inline __m512 vals16(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t i,
                                 const __m512 *T) {
  if (t->bits == 4) {
    const __m128i m = _mm_set1_epi8(0x0f);
    __m128i b = _mm_loadl_epi64((const __m128i *)(codes + i / 2));
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return nib_lookup512(_mm_unpacklo_epi8(lo, hi), T[0]);
  }
  if (t->bits == 6) {
    const __m512i ctl = _mm512_set_epi8(
        -128, 11, 10, 9, -128, 11, 10, 9, -128, 11, 10, 9, -128, 11, 10, 9, -128, 8, 7, 6, -128, 8,
        7, 6, -128, 8, 7, 6, -128, 8, 7, 6, -128, 5, 4, 3, -128, 5, 4, 3, -128, 5, 4, 3, -128, 5,
        4, 3, -128, 2, 1, 0, -128, 2, 1, 0, -128, 2, 1, 0, -128, 2, 1, 0);
    const __m512i sh = _mm512_set_epi32(18, 12, 6, 0, 18, 12, 6, 0, 18, 12, 6, 0, 18, 12, 6, 0);
    __m128i b = _mm_maskz_loadu_epi8(0x0fff, codes + i / 4 * 3);
    __m512i w = _mm512_shuffle_epi8(_mm512_broadcast_i32x4(b), ctl);
    __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(0x3f));
    __m512 lo = _mm512_permutex2var_ps(T[0], idx, T[1]);
    __m512 hi = _mm512_permutex2var_ps(T[2], idx, T[3]);
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), lo, hi);
  }
  __m128i b = _mm_loadu_si128((const __m128i *)(codes + i));
  if (t->map == HURRAY_MAP_E4M3 || t->map == HURRAY_MAP_E5M2)
    return fp8_512(b, t->map == HURRAY_MAP_E5M2);
  const __m512 U = _mm512_set1_ps(t->unit);
  if (t->map == HURRAY_MAP_INT8)
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), U);
  if (t->map == HURRAY_MAP_UINT8)
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)), U);
  return _mm512_i32gather_ps(_mm512_cvtepu8_epi32(b), t->tab, 4);
}

T512 static void decode_each512(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                                uint64_t n, const float *scale, const float *zp, HurrayDType od,
                                void *out) {
  __m512 T[4];
  for (int i = 0; i < 4; i++) T[i] = _mm512_loadu_ps(t->tab + 16 * i);
  const uint64_t align = t->bits == 4 ? 2 : t->bits == 6 ? 4 : 1;
  uint64_t k = 0;
  while (k < n && (at + k) % align) k++;
  hurray__decode_each_scalar(t, codes, at, 0, k, scale, zp, od, out);
  for (; k + 16 <= n; k += 16) {
    __m512 v = vals16(t, codes, at + k, T);
    store16(od, out, k, apply512(v, _mm512_loadu_ps(zp + k), _mm512_loadu_ps(scale + k)));
  }
  hurray__decode_each_scalar(t, codes, at, k, n, scale, zp, od, out);
}

/* Its own function, not inlined, so that the other kinds' loops compile as
 * they did without it: GCC may emit either operand order for a vector
 * multiplication, and the order decides which NaN a product of two NaNs
 * keeps, which test_simd.c holds GCC builds to. */
__attribute__((noinline)) T512 static void decode_fp8_512(
    const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at, uint64_t n, uint64_t block,
    uint64_t head, const float *scale, const float *zp, HurrayDType out_dtype, void *out) {
  if (t->map == HURRAY_MAP_E5M2) {
    HURRAY_DECODE_GROUPS(fp8_run512, true);
  } else {
    HURRAY_DECODE_GROUPS(fp8_run512, false);
  }
}

T512 static void decode512(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                           uint64_t n, uint64_t block, uint64_t head, const float *scale,
                           const float *zp, HurrayDType out_dtype, void *out) {
  __m512 T[4];
  if (t->bits == 8 && (t->map == HURRAY_MAP_E4M3 || t->map == HURRAY_MAP_E5M2)) {
    decode_fp8_512(t, codes, at, n, block, head, scale, zp, out_dtype, out);
    return;
  }
  for (int i = 0; i < 4; i++) T[i] = _mm512_loadu_ps(t->tab + 16 * i);
  HURRAY_DECODE_GROUPS(run512, T);
}

T512 static void encode_affine512(const float *x, uint64_t n, float mul, int32_t zp, int32_t qmin,
                                  int32_t qmax, uint8_t *dst) {
  const __m512 M = _mm512_set1_ps(mul);
  const __m512 LO = _mm512_set1_ps((float)(qmin - zp)), HI = _mm512_set1_ps((float)(qmax - zp));
  const __m512i ZP = _mm512_set1_epi32(zp);
  uint64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    /* max/min keep the scalar selects' results: equal operands are equal
     * values (a -0 / +0 pair rounds to the same integer), and x * mul is
     * never NaN for the finite input affine quantization requires */
    __m512 y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), M), LO), HI);
    __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(y), ZP);
    _mm_storeu_si128((__m128i *)(dst + k), _mm512_cvtepi32_epi8(q));
  }
  hurray__quant_kernels_scalar()->encode_affine(x + k, n - k, mul, zp, qmin, qmax, dst + k);
}

T512 static void range512(const float *x, uint64_t n, float *lo_io, float *hi_io,
                          uint32_t *nonfinite) {
  __m512 lo = _mm512_set1_ps(*lo_io), hi = _mm512_set1_ps(*hi_io);
  const __m512i E = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = 0;
  uint64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 v = _mm512_loadu_ps(x + k);
    lo = _mm512_min_ps(v, lo); /* v < lo ? v : lo */
    hi = _mm512_max_ps(v, hi); /* v > hi ? v : hi */
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), E), E);
  }
  float l[16], h[16];
  _mm512_storeu_ps(l, lo);
  _mm512_storeu_ps(h, hi);
  float a = *lo_io, b = *hi_io;
  for (int i = 0; i < 16; i++) {
    a = l[i] < a ? l[i] : a;
    b = h[i] > b ? h[i] : b;
  }
  *lo_io = a;
  *hi_io = b;
  *nonfinite |= bad != 0;
  hurray__quant_kernels_scalar()->range(x + k, n - k, lo_io, hi_io, nonfinite);
}

/* The scalar encoders compiled for this level (auto-vectorized, same C);
 * per-tensor affine has its own loop. */
T512 static void encode512(const HurrayResolvedScheme *s, const float *x, uint64_t n, float mul,
                           int32_t zp, uint8_t nan, uint8_t *dst) {
  if (s->encoder == HURRAY_ENC_AFFINE) {
    encode_affine512(x, n, mul, zp, s->qmin, s->qmax, dst);
    return;
  }
  hurray__encode_run0(s, x, n, mul, zp, nan, dst);
}

/* ------------------------------------------------------------------- AVX2 */

T2 static inline void store8(HurrayDType od, void *out, uint64_t k, __m256 v) {
  if (od == HURRAY_DTYPE_FLOAT32) {
    _mm256_storeu_ps((float *)out + k, v);
  } else if (od == HURRAY_DTYPE_BFLOAT16) {
    const __m256i x = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, q, nan);
    __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)((uint16_t *)out + k), p);
  } else {
    _mm_storeu_si128((__m128i *)((uint16_t *)out + k),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

T2 static inline __m256 apply256(__m256 v, __m256 z, __m256 s) {
  return _mm256_mul_ps(_mm256_sub_ps(v, z), s);
}

T2 static inline __m256 nib_lookup256(__m128i c8, const __m256 *T) {
  __m256i i = _mm256_cvtepu8_epi32(c8);
  __m256 lo = _mm256_permutevar8x32_ps(T[0], i), hi = _mm256_permutevar8x32_ps(T[1], i);
  return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
}

/* fp8_512 on 8 codes (the low 8 bytes of b). blendv looks at the sign bit
 * only: mag - 8 (- 4) is negative exactly for the subnormals. */
T2 static inline __m256 fp8_256(__m128i b, bool e5) {
  const __m256i c = _mm256_cvtepu8_epi32(b);
  const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7f));
  const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(c, 7), 31);
  __m256 v;
  if (!e5) {
    __m256i norm = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    v = _mm256_blendv_ps(_mm256_castsi256_ps(norm), sub,
                         _mm256_castsi256_ps(_mm256_sub_epi32(mag, _mm256_set1_epi32(8))));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                         _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7f))));
  } else {
    __m256i norm = _mm256_add_epi32(_mm256_slli_epi32(mag, 21), _mm256_set1_epi32(112 << 23));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-16f));
    v = _mm256_blendv_ps(_mm256_castsi256_ps(norm), sub,
                         _mm256_castsi256_ps(_mm256_sub_epi32(mag, _mm256_set1_epi32(4))));
    /* 0x7c infinity, above it NaN */
    __m256i special = _mm256_or_si256(
        _mm256_set1_epi32(0x7f800000),
        _mm256_and_si256(_mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7c)),
                         _mm256_set1_epi32(0x00400000)));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(special),
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7b))));
  }
  return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

/* fp8_run512 for AVX2. */
T2 static inline void fp8_run256(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                                 uint64_t k, uint64_t end, float s, float z, HurrayDType od,
                                 void *out, bool e5) {
  const __m256 S = _mm256_set1_ps(s), Z = _mm256_set1_ps(z);
  for (; k + 8 <= end; k += 8) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(codes + at + k));
    store8(od, out, k, apply256(fp8_256(b, e5), Z, S));
  }
  hurray__decode_scalar_run(t, codes, at, k, end, s, z, od, out);
}

T2 static inline __m128i load12(const uint8_t *p) {
  int32_t w;
  memcpy(&w, p + 8, 4);
  return _mm_insert_epi32(_mm_loadl_epi64((const __m128i *)p), w, 2);
}

/* 6-bit codes without gathers, which are slow on AMD cores: the 64-entry
 * table as four byte planes, each plane as four 16-entry pshufb tables
 * between which blends on code bits 4 and 5 choose; the planes then
 * interleave back into floats. Same table entries as the scalar lookup, so
 * the same bytes. An FP6 table (t->fp6_shape) needs two planes of two
 * tables and the sign bit from the code. */
typedef struct Fp6Lut {
  __m256i p[4][4]; /* [byte plane][codes 16j .. 16j + 15], in both lanes */
} Fp6Lut;

T2 static inline void fp6_lut(const HurrayDecodeTable *t, Fp6Lut *L) {
  for (int b = 0; b < 4; b++) {
    for (int j = 0; j < 4; j++) {
      L->p[b][j] = _mm256_broadcastsi128_si256(
          _mm_loadu_si128((const __m128i *)(t->planes[b] + 16 * j)));
    }
  }
}

/* The 32 codes in the 24 bytes at p, one a byte. Byte 4q + r holds code
 * 4 G[q] + r, G = {0, 2, 4, 6, 1, 3, 5, 7}: the in-lane unpacks of
 * fp6_vals32 then put element 8m + i at float i of vector m. */
T2 static inline __m256i fp6_codes32(const uint8_t *p) {
  /* reads the 24 bytes and no more: lane 1 from byte 8 */
  __m256i raw = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p)),
      _mm_loadu_si128((const __m128i *)(p + 8)), 1);
  /* dword g: the 3 bytes of codes 4g .. 4g + 3 (group 4 starts at lane 1's byte 4) */
  const __m256i spread = _mm256_setr_epi8(0, 1, 2, -128, 3, 4, 5, -128, 6, 7, 8, -128, 9, 10, 11,
                                          -128, 4, 5, 6, -128, 7, 8, 9, -128, 10, 11, 12, -128, 13,
                                          14, 15, -128);
  __m256i d = _mm256_shuffle_epi8(raw, spread);
  /* the third and fourth codes (bits 12..23) to the high half, then the
   * second code of each half (bits 6..11) to the half's high byte */
  __m256i w = _mm256_blend_epi16(d, _mm256_slli_epi32(d, 4), 0xaa);
  __m256i c = _mm256_or_si256(
      _mm256_and_si256(w, _mm256_set1_epi16(0x3f)),
      _mm256_and_si256(_mm256_slli_epi16(w, 2), _mm256_set1_epi16(0x3f00)));
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

/* Byte plane P of each code: bit 7 of b4 / b5 is code bit 4 / 5. */
T2 static inline __m256i fp6_plane(const __m256i *P, __m256i c, __m256i b4, __m256i b5) {
  __m256i x = _mm256_blendv_epi8(_mm256_shuffle_epi8(P[0], c), _mm256_shuffle_epi8(P[1], c), b4);
  __m256i y = _mm256_blendv_epi8(_mm256_shuffle_epi8(P[2], c), _mm256_shuffle_epi8(P[3], c), b4);
  return _mm256_blendv_epi8(x, y, b5);
}

/* v[m]: the values of elements 8m .. 8m + 7 of the 32 codes at p. `fp6`
 * is t->fp6_shape, a constant at each call so the loops specialise. */
T2 static inline void fp6_vals32(const Fp6Lut *L, bool fp6, const uint8_t *p, __m256 *v) {
  __m256i c = fp6_codes32(p);
  /* codes are below 64, so the 16-bit shifts move no bit across bytes */
  __m256i b4 = _mm256_slli_epi16(c, 3), b5 = _mm256_slli_epi16(c, 2);
  __m256i x2, x3, lo01 = _mm256_setzero_si256(), hi01 = lo01;
  if (fp6) {
    x2 = _mm256_blendv_epi8(_mm256_shuffle_epi8(L->p[2][0], c), _mm256_shuffle_epi8(L->p[2][1], c),
                            b4);
    x3 = _mm256_blendv_epi8(_mm256_shuffle_epi8(L->p[3][0], c), _mm256_shuffle_epi8(L->p[3][1], c),
                            b4);
    x3 = _mm256_xor_si256(x3, _mm256_and_si256(b5, _mm256_set1_epi8(-128)));
  } else {
    x2 = fp6_plane(L->p[2], c, b4, b5);
    x3 = fp6_plane(L->p[3], c, b4, b5);
    __m256i x0 = fp6_plane(L->p[0], c, b4, b5), x1 = fp6_plane(L->p[1], c, b4, b5);
    lo01 = _mm256_unpacklo_epi8(x0, x1);
    hi01 = _mm256_unpackhi_epi8(x0, x1);
  }
  __m256i lo23 = _mm256_unpacklo_epi8(x2, x3), hi23 = _mm256_unpackhi_epi8(x2, x3);
  v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo01, lo23));
  v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo01, lo23));
  v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(hi01, hi23));
  v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(hi01, hi23));
}

/* lut_run512 for AVX2: the group's 16 narrowed values (store8, as for any
 * element) split into a plane of low and one of high bytes, each looked up
 * with pshufb, then interleaved back into 16-bit values. */
T2 static inline uint64_t lut_run256(const uint8_t *codes, uint64_t at, uint64_t k, uint64_t end,
                                     __m256 Z, __m256 S, HurrayDType od, void *out,
                                     const __m256 *T) {
  uint16_t lut[16];
  store8(od, lut, 0, apply256(T[0], Z, S));
  store8(od, lut, 8, apply256(T[1], Z, S));
  const __m128i a = _mm_loadu_si128((const __m128i *)lut);
  const __m128i b = _mm_loadu_si128((const __m128i *)(lut + 8));
  const __m128i low = _mm_set1_epi16(0xff);
  const __m256i PL = _mm256_broadcastsi128_si256(
      _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)));
  const __m256i PH = _mm256_broadcastsi128_si256(
      _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
  const __m128i m = _mm_set1_epi8(0x0f);
  for (; k + 32 <= end; k += 32) {
    __m128i w = _mm_loadu_si128((const __m128i *)(codes + (at + k) / 2));
    __m128i lo = _mm_and_si128(w, m), hi = _mm_and_si128(_mm_srli_epi16(w, 4), m);
    /* lane 0: codes 0..15, lane 1: codes 16..31 */
    __m256i c = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    __m256i l = _mm256_shuffle_epi8(PL, c), h = _mm256_shuffle_epi8(PH, c);
    __m256i r0 = _mm256_unpacklo_epi8(l, h); /* codes 0..7 | 16..23 */
    __m256i r1 = _mm256_unpackhi_epi8(l, h); /* codes 8..15 | 24..31 */
    _mm256_storeu_si256((__m256i *)((uint16_t *)out + k), _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256((__m256i *)((uint16_t *)out + k + 16),
                        _mm256_permute2x128_si256(r0, r1, 0x31));
  }
  return k;
}

T2 static inline void run256(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                             uint64_t k, uint64_t end, float s, float z, HurrayDType od, void *out,
                             const __m256 *T) {
  const __m256 S = _mm256_set1_ps(s), Z = _mm256_set1_ps(z);
  const unsigned bits = t->bits;
  const uint64_t align = bits == 4 ? 2 : bits == 6 ? 4 : 1;
  uint64_t head = k;
  while (head < end && (at + head) % align) head++;
  hurray__decode_scalar_run(t, codes, at, k, head, s, z, od, out);
  k = head;
  if (bits == 4 && od != HURRAY_DTYPE_FLOAT32 && end - k >= LUT_RUN) {
    k = lut_run256(codes, at, k, end, Z, S, od, out, T);
  }
  if (bits == 4) {
    const __m128i m = _mm_set1_epi8(0x0f);
    for (; k + 32 <= end; k += 32) {
      __m128i b = _mm_loadu_si128((const __m128i *)(codes + (at + k) / 2));
      __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
      __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
      store8(od, out, k, apply256(nib_lookup256(c0, T), Z, S));
      store8(od, out, k + 8, apply256(nib_lookup256(_mm_srli_si128(c0, 8), T), Z, S));
      store8(od, out, k + 16, apply256(nib_lookup256(c1, T), Z, S));
      store8(od, out, k + 24, apply256(nib_lookup256(_mm_srli_si128(c1, 8), T), Z, S));
    }
    for (; k + 8 <= end; k += 8) {
      uint32_t w;
      memcpy(&w, codes + (at + k) / 2, 4);
      __m128i b = _mm_cvtsi32_si128((int)w);
      __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
      store8(od, out, k, apply256(nib_lookup256(_mm_unpacklo_epi8(lo, hi), T), Z, S));
    }
  } else if (bits == 6) {
    const __m256i c0 = _mm256_setr_epi8(0, 1, 2, -128, 0, 1, 2, -128, 0, 1, 2, -128, 0, 1, 2, -128,
                                        3, 4, 5, -128, 3, 4, 5, -128, 3, 4, 5, -128, 3, 4, 5,
                                        -128);
    const __m256i c1 = _mm256_setr_epi8(6, 7, 8, -128, 6, 7, 8, -128, 6, 7, 8, -128, 6, 7, 8, -128,
                                        9, 10, 11, -128, 9, 10, 11, -128, 9, 10, 11, -128, 9, 10,
                                        11, -128);
    const __m256i sh = _mm256_setr_epi32(0, 6, 12, 18, 0, 6, 12, 18);
    const __m256i m = _mm256_set1_epi32(0x3f);
    for (; k + 16 <= end; k += 16) {
      __m256i b = _mm256_broadcastsi128_si256(load12(codes + (at + k) / 4 * 3));
      __m256i i0 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, c0), sh), m);
      __m256i i1 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, c1), sh), m);
      store8(od, out, k, apply256(_mm256_i32gather_ps(t->tab, i0, 4), Z, S));
      store8(od, out, k + 8, apply256(_mm256_i32gather_ps(t->tab, i1, 4), Z, S));
    }
  } else {
    const __m256 U = _mm256_set1_ps(t->unit);
    for (; k + 8 <= end; k += 8) {
      __m128i b = _mm_loadl_epi64((const __m128i *)(codes + at + k));
      __m256 v;
      if (t->map == HURRAY_MAP_INT8) {
        v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), U);
      } else if (t->map == HURRAY_MAP_UINT8) {
        v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), U);
      } else {
        v = _mm256_i32gather_ps(t->tab, _mm256_cvtepu8_epi32(b), 4);
      }
      store8(od, out, k, apply256(v, Z, S));
    }
  }
  hurray__decode_scalar_run(t, codes, at, k, end, s, z, od, out);
}

/* run256 for 6-bit codes: 32 a step through the byte planes, the rest of
 * the group (fewer than 32) by run256. */
T2 static inline void run6_256(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                               uint64_t k, uint64_t end, float s, float z, HurrayDType od,
                               void *out, const __m256 *T, const Fp6Lut *L, bool fp6) {
  uint64_t head = k;
  while (head < end && (at + head) % 4) head++;
  hurray__decode_scalar_run(t, codes, at, k, head, s, z, od, out);
  const __m256 S = _mm256_set1_ps(s), Z = _mm256_set1_ps(z);
  for (k = head; k + 32 <= end; k += 32) {
    __m256 v[4];
    fp6_vals32(L, fp6, codes + (at + k) / 4 * 3, v);
    for (int m = 0; m < 4; m++) store8(od, out, k + 8 * (uint64_t)m, apply256(v[m], Z, S));
  }
  run256(t, codes, at, k, end, s, z, od, out, T);
}

/* Whole groups of a multiple of 32 elements from a multiple of 4 (the MX
 * layout): no heads or tails to look for. `fp6` and `od` are constants at
 * each call. Returns the elements done. */
T2 static inline uint64_t fp6_groups256(const Fp6Lut *L, bool fp6, const uint8_t *codes,
                                        uint64_t at, uint64_t n, uint64_t block,
                                        const float *scale, const float *zp, HurrayDType od,
                                        void *out) {
  uint64_t k = 0;
  for (uint64_t g = 0; n - k >= block; g++) {
    const __m256 S = _mm256_set1_ps(scale[g]), Z = _mm256_set1_ps(zp[g]);
    for (uint64_t end = k + block; k < end; k += 32) {
      __m256 v[4];
      fp6_vals32(L, fp6, codes + (at + k) / 4 * 3, v);
      for (int m = 0; m < 4; m++) store8(od, out, k + 8 * (uint64_t)m, apply256(v[m], Z, S));
    }
  }
  return k;
}

T2 static void decode6_256(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                           uint64_t n, uint64_t block, uint64_t head, const float *scale,
                           const float *zp, HurrayDType out_dtype, void *out, const __m256 *T) {
  Fp6Lut L;
  fp6_lut(t, &L);
  const bool fp6 = t->fp6_shape;
  if (block != 0 && block % 32 == 0 && head == 0 && at % 4 == 0) {
    uint64_t done;
    if (out_dtype == HURRAY_DTYPE_FLOAT32) { /* store8 specialised for float32 in this copy */
      done = fp6 ? fp6_groups256(&L, true, codes, at, n, block, scale, zp, out_dtype, out)
                 : fp6_groups256(&L, false, codes, at, n, block, scale, zp, out_dtype, out);
    } else {
      done = fp6 ? fp6_groups256(&L, true, codes, at, n, block, scale, zp, out_dtype, out)
                 : fp6_groups256(&L, false, codes, at, n, block, scale, zp, out_dtype, out);
    }
    uint64_t g = done / block;
    at += done;
    n -= done;
    scale += g;
    zp += g;
    out = (uint8_t *)out + done * (out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2);
  }
  if (fp6) {
    HURRAY_DECODE_GROUPS(run6_256, T, &L, true);
  } else {
    HURRAY_DECODE_GROUPS(run6_256, T, &L, false);
  }
}

/* The values of the 8 codes from element i (alignment as for vals16). */
T2 static inline __m256 vals8(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t i,
                              const __m256 *T) {
  if (t->bits == 4) {
    const __m128i m = _mm_set1_epi8(0x0f);
    uint32_t w;
    memcpy(&w, codes + i / 2, 4);
    __m128i b = _mm_cvtsi32_si128((int)w);
    __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    return nib_lookup256(_mm_unpacklo_epi8(lo, hi), T);
  }
  if (t->bits == 6) {
    const __m256i c0 = _mm256_setr_epi8(0, 1, 2, -128, 0, 1, 2, -128, 0, 1, 2, -128, 0, 1, 2, -128,
                                        3, 4, 5, -128, 3, 4, 5, -128, 3, 4, 5, -128, 3, 4, 5,
                                        -128);
    const __m256i sh = _mm256_setr_epi32(0, 6, 12, 18, 0, 6, 12, 18);
    const uint8_t *p = codes + i / 4 * 3;
    uint16_t w2;
    uint32_t w4;
    memcpy(&w4, p, 4);
    memcpy(&w2, p + 4, 2);
    __m128i b = _mm_insert_epi16(_mm_cvtsi32_si128((int)w4), w2, 2);
    __m256i idx = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_shuffle_epi8(_mm256_broadcastsi128_si256(b), c0), sh),
        _mm256_set1_epi32(0x3f));
    return _mm256_i32gather_ps(t->tab, idx, 4);
  }
  __m128i b = _mm_loadl_epi64((const __m128i *)(codes + i));
  if (t->map == HURRAY_MAP_E4M3 || t->map == HURRAY_MAP_E5M2)
    return fp8_256(b, t->map == HURRAY_MAP_E5M2);
  const __m256 U = _mm256_set1_ps(t->unit);
  if (t->map == HURRAY_MAP_INT8)
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), U);
  if (t->map == HURRAY_MAP_UINT8)
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), U);
  return _mm256_i32gather_ps(t->tab, _mm256_cvtepu8_epi32(b), 4);
}

/* decode_each256's 6-bit loop: elements [k, n) from a multiple of 4
 * (at + k), 32 a step; returns where it stopped. */
T2 static inline uint64_t fp6_each256(const Fp6Lut *L, bool fp6, const uint8_t *codes, uint64_t at,
                                      uint64_t k, uint64_t n, const float *scale, const float *zp,
                                      HurrayDType od, void *out) {
  for (; k + 32 <= n; k += 32) {
    __m256 v[4];
    fp6_vals32(L, fp6, codes + (at + k) / 4 * 3, v);
    for (int m = 0; m < 4; m++) {
      uint64_t e = k + 8 * (uint64_t)m;
      store8(od, out, e, apply256(v[m], _mm256_loadu_ps(zp + e), _mm256_loadu_ps(scale + e)));
    }
  }
  return k;
}

T2 static void decode_each256(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                              uint64_t n, const float *scale, const float *zp, HurrayDType od,
                              void *out) {
  __m256 T[2] = {_mm256_loadu_ps(t->tab), _mm256_loadu_ps(t->tab + 8)};
  const uint64_t align = t->bits == 4 ? 2 : t->bits == 6 ? 4 : 1;
  uint64_t k = 0;
  while (k < n && (at + k) % align) k++;
  hurray__decode_each_scalar(t, codes, at, 0, k, scale, zp, od, out);
  if (t->bits == 6) {
    Fp6Lut L6;
    fp6_lut(t, &L6);
    if (t->fp6_shape) {
      k = fp6_each256(&L6, true, codes, at, k, n, scale, zp, od, out);
    } else {
      k = fp6_each256(&L6, false, codes, at, k, n, scale, zp, od, out);
    }
  }
  for (; k + 8 <= n; k += 8) {
    __m256 v = vals8(t, codes, at + k, T);
    store8(od, out, k, apply256(v, _mm256_loadu_ps(zp + k), _mm256_loadu_ps(scale + k)));
  }
  hurray__decode_each_scalar(t, codes, at, k, n, scale, zp, od, out);
}

/* Its own function, not inlined, so that the other kinds' loops compile as
 * they did without it: GCC may emit either operand order for a vector
 * multiplication, and the order decides which NaN a product of two NaNs
 * keeps, which test_simd.c holds GCC builds to. */
__attribute__((noinline)) T2 static void decode_fp8_256(const HurrayDecodeTable *t,
                                                        const uint8_t *codes, uint64_t at,
                                                        uint64_t n, uint64_t block, uint64_t head,
                                                        const float *scale, const float *zp,
                                                        HurrayDType out_dtype, void *out) {
  if (t->map == HURRAY_MAP_E5M2) {
    HURRAY_DECODE_GROUPS(fp8_run256, true);
  } else {
    HURRAY_DECODE_GROUPS(fp8_run256, false);
  }
}

T2 static void decode256(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at, uint64_t n,
                         uint64_t block, uint64_t head, const float *scale, const float *zp,
                         HurrayDType out_dtype, void *out) {
  if (t->bits == 8 && (t->map == HURRAY_MAP_E4M3 || t->map == HURRAY_MAP_E5M2)) {
    decode_fp8_256(t, codes, at, n, block, head, scale, zp, out_dtype, out);
    return;
  }
  __m256 T[2] = {_mm256_loadu_ps(t->tab), _mm256_loadu_ps(t->tab + 8)};
  if (t->bits == 6) {
    decode6_256(t, codes, at, n, block, head, scale, zp, out_dtype, out, T);
    return;
  }
  HURRAY_DECODE_GROUPS(run256, T);
}

T2 static void encode_affine256(const float *x, uint64_t n, float mul, int32_t zp, int32_t qmin,
                                int32_t qmax, uint8_t *dst) {
  const __m256 M = _mm256_set1_ps(mul);
  const __m256 LO = _mm256_set1_ps((float)(qmin - zp)), HI = _mm256_set1_ps((float)(qmax - zp));
  const __m256i ZP = _mm256_set1_epi32(zp), BYTES = _mm256_set1_epi32(0xff);
  uint64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m256 y0 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), M), LO), HI);
    __m256 y1 = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8), M), LO), HI);
    /* (uint8_t) keeps the low byte: mask, then pack without saturating */
    __m256i q0 = _mm256_and_si256(_mm256_add_epi32(_mm256_cvtps_epi32(y0), ZP), BYTES);
    __m256i q1 = _mm256_and_si256(_mm256_add_epi32(_mm256_cvtps_epi32(y1), ZP), BYTES);
    __m256i w = _mm256_packus_epi32(q0, q1); /* lanes: q0lo q1lo | q0hi q1hi */
    __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    /* b: q0[0..3] q1[0..3] q0[4..7] q1[4..7] */
    b = _mm_shuffle_epi32(b, _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128((__m128i *)(dst + k), b);
  }
  hurray__quant_kernels_scalar()->encode_affine(x + k, n - k, mul, zp, qmin, qmax, dst + k);
}

T2 static void range256(const float *x, uint64_t n, float *lo_io, float *hi_io,
                        uint32_t *nonfinite) {
  __m256 lo = _mm256_set1_ps(*lo_io), hi = _mm256_set1_ps(*hi_io);
  const __m256i E = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  uint64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256 v = _mm256_loadu_ps(x + k);
    lo = _mm256_min_ps(v, lo);
    hi = _mm256_max_ps(v, hi);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), E), E));
  }
  float l[8], h[8];
  _mm256_storeu_ps(l, lo);
  _mm256_storeu_ps(h, hi);
  float a = *lo_io, b = *hi_io;
  for (int i = 0; i < 8; i++) {
    a = l[i] < a ? l[i] : a;
    b = h[i] > b ? h[i] : b;
  }
  *lo_io = a;
  *hi_io = b;
  *nonfinite |= !_mm256_testz_si256(bad, bad);
  hurray__quant_kernels_scalar()->range(x + k, n - k, lo_io, hi_io, nonfinite);
}

/* The scalar encoders compiled for this level (auto-vectorized, same C);
 * per-tensor affine has its own loop. */
T2 static void encode256(const HurrayResolvedScheme *s, const float *x, uint64_t n, float mul,
                         int32_t zp, uint8_t nan, uint8_t *dst) {
  if (s->encoder == HURRAY_ENC_AFFINE) {
    encode_affine256(x, n, mul, zp, s->qmin, s->qmax, dst);
    return;
  }
  hurray__encode_run0(s, x, n, mul, zp, nan, dst);
}

/* ----------------------------------------------------------------- SSE4.1 */

T41 static inline void store4(HurrayDType od, void *out, uint64_t k, __m128 v) {
  if (od == HURRAY_DTYPE_FLOAT32) {
    _mm_storeu_ps((float *)out + k, v);
  } else if (od == HURRAY_DTYPE_BFLOAT16) {
    const __m128i x = _mm_castps_si128(v);
    __m128i odd = _mm_and_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(1));
    __m128i r = _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(x, _mm_set1_epi32(0x7fff)), odd), 16);
    __m128i q = _mm_or_si128(_mm_srli_epi32(x, 16), _mm_set1_epi32(0x40));
    __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7fffffff)),
                                  _mm_set1_epi32(0x7f800000));
    r = _mm_blendv_epi8(r, q, nan);
    _mm_storel_epi64((__m128i *)((uint16_t *)out + k), _mm_packus_epi32(r, r));
  } else {
    float f[4];
    _mm_storeu_ps(f, v);
    for (int i = 0; i < 4; i++) ((uint16_t *)out)[k + i] = hurray__f32_to_f16(f[i]);
  }
}

T41 static inline __m128 apply128(__m128 v, __m128 z, __m128 s) {
  return _mm_mul_ps(_mm_sub_ps(v, z), s);
}

/* fp8_256 on 4 codes (the low 4 bytes of b). */
T41 static inline __m128 fp8_128(__m128i b, bool e5) {
  const __m128i c = _mm_cvtepu8_epi32(b);
  const __m128i mag = _mm_and_si128(c, _mm_set1_epi32(0x7f));
  const __m128i sign = _mm_slli_epi32(_mm_srli_epi32(c, 7), 31);
  __m128 v;
  if (!e5) {
    __m128i norm = _mm_add_epi32(_mm_slli_epi32(mag, 20), _mm_set1_epi32(120 << 23));
    __m128 sub = _mm_mul_ps(_mm_cvtepi32_ps(mag), _mm_set1_ps(0x1p-9f));
    v = _mm_blendv_ps(_mm_castsi128_ps(norm), sub,
                      _mm_castsi128_ps(_mm_sub_epi32(mag, _mm_set1_epi32(8))));
    v = _mm_blendv_ps(v, _mm_castsi128_ps(_mm_set1_epi32(0x7fc00000)),
                      _mm_castsi128_ps(_mm_cmpeq_epi32(mag, _mm_set1_epi32(0x7f))));
  } else {
    __m128i norm = _mm_add_epi32(_mm_slli_epi32(mag, 21), _mm_set1_epi32(112 << 23));
    __m128 sub = _mm_mul_ps(_mm_cvtepi32_ps(mag), _mm_set1_ps(0x1p-16f));
    v = _mm_blendv_ps(_mm_castsi128_ps(norm), sub,
                      _mm_castsi128_ps(_mm_sub_epi32(mag, _mm_set1_epi32(4))));
    __m128i special = _mm_or_si128(
        _mm_set1_epi32(0x7f800000),
        _mm_and_si128(_mm_cmpgt_epi32(mag, _mm_set1_epi32(0x7c)), _mm_set1_epi32(0x00400000)));
    v = _mm_blendv_ps(v, _mm_castsi128_ps(special),
                      _mm_castsi128_ps(_mm_cmpgt_epi32(mag, _mm_set1_epi32(0x7b))));
  }
  return _mm_or_ps(v, _mm_castsi128_ps(sign));
}

T41 static inline void run128(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                              uint64_t k, uint64_t end, float s, float z, HurrayDType od,
                              void *out, const __m128i *P) {
  const __m128 S = _mm_set1_ps(s), Z = _mm_set1_ps(z);
  if (t->bits == 4) {
    if (k < end && ((at + k) & 1u)) {
      hurray__decode_scalar_run(t, codes, at, k, k + 1, s, z, od, out);
      k++;
    }
    const __m128i m = _mm_set1_epi8(0x0f);
    for (; k + 16 <= end; k += 16) {
      __m128i b = _mm_loadl_epi64((const __m128i *)(codes + (at + k) / 2));
      __m128i c = _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
      __m128i b0 = _mm_shuffle_epi8(P[0], c), b1 = _mm_shuffle_epi8(P[1], c);
      __m128i b2 = _mm_shuffle_epi8(P[2], c), b3 = _mm_shuffle_epi8(P[3], c);
      __m128i l01 = _mm_unpacklo_epi8(b0, b1), h01 = _mm_unpackhi_epi8(b0, b1);
      __m128i l23 = _mm_unpacklo_epi8(b2, b3), h23 = _mm_unpackhi_epi8(b2, b3);
      store4(od, out, k, apply128(_mm_castsi128_ps(_mm_unpacklo_epi16(l01, l23)), Z, S));
      store4(od, out, k + 4, apply128(_mm_castsi128_ps(_mm_unpackhi_epi16(l01, l23)), Z, S));
      store4(od, out, k + 8, apply128(_mm_castsi128_ps(_mm_unpacklo_epi16(h01, h23)), Z, S));
      store4(od, out, k + 12, apply128(_mm_castsi128_ps(_mm_unpackhi_epi16(h01, h23)), Z, S));
    }
  } else if (t->bits == 8 && (t->map == HURRAY_MAP_INT8 || t->map == HURRAY_MAP_UINT8)) {
    const __m128 U = _mm_set1_ps(t->unit);
    const bool sign = t->map == HURRAY_MAP_INT8;
    for (; k + 4 <= end; k += 4) {
      int32_t w;
      memcpy(&w, codes + at + k, 4);
      __m128i b = _mm_cvtsi32_si128(w);
      __m128i i = sign ? _mm_cvtepi8_epi32(b) : _mm_cvtepu8_epi32(b);
      store4(od, out, k, apply128(_mm_mul_ps(_mm_cvtepi32_ps(i), U), Z, S));
    }
  } else if (t->bits == 8 && (t->map == HURRAY_MAP_E4M3 || t->map == HURRAY_MAP_E5M2)) {
    const bool e5 = t->map == HURRAY_MAP_E5M2;
    for (; k + 4 <= end; k += 4) {
      int32_t w;
      memcpy(&w, codes + at + k, 4);
      store4(od, out, k, apply128(fp8_128(_mm_cvtsi32_si128(w), e5), Z, S));
    }
  }
  hurray__decode_scalar_run(t, codes, at, k, end, s, z, od, out);
}

T41 static void decode128(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                          uint64_t n, uint64_t block, uint64_t head, const float *scale,
                          const float *zp, HurrayDType out_dtype, void *out) {
  __m128i P[4];
  for (int i = 0; i < 4; i++) P[i] = _mm_loadu_si128((const __m128i *)t->planes[i]);
  HURRAY_DECODE_GROUPS(run128, P);
}

T41 static void encode_affine128(const float *x, uint64_t n, float mul, int32_t zp, int32_t qmin,
                                 int32_t qmax, uint8_t *dst) {
  const __m128 M = _mm_set1_ps(mul);
  const __m128 LO = _mm_set1_ps((float)(qmin - zp)), HI = _mm_set1_ps((float)(qmax - zp));
  const __m128i ZP = _mm_set1_epi32(zp);
  const __m128i PICK = _mm_setr_epi8(0, 4, 8, 12, -128, -128, -128, -128, -128, -128, -128, -128,
                                     -128, -128, -128, -128);
  uint64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    __m128 y = _mm_min_ps(_mm_max_ps(_mm_mul_ps(_mm_loadu_ps(x + k), M), LO), HI);
    __m128i q = _mm_shuffle_epi8(_mm_add_epi32(_mm_cvtps_epi32(y), ZP), PICK);
    int32_t w = _mm_cvtsi128_si32(q);
    memcpy(dst + k, &w, 4);
  }
  hurray__quant_kernels_scalar()->encode_affine(x + k, n - k, mul, zp, qmin, qmax, dst + k);
}

T41 static void range128(const float *x, uint64_t n, float *lo_io, float *hi_io,
                         uint32_t *nonfinite) {
  __m128 lo = _mm_set1_ps(*lo_io), hi = _mm_set1_ps(*hi_io);
  const __m128i E = _mm_set1_epi32(0x7f800000);
  __m128i bad = _mm_setzero_si128();
  uint64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    __m128 v = _mm_loadu_ps(x + k);
    lo = _mm_min_ps(v, lo);
    hi = _mm_max_ps(v, hi);
    bad = _mm_or_si128(bad, _mm_cmpeq_epi32(_mm_and_si128(_mm_castps_si128(v), E), E));
  }
  float l[4], h[4];
  _mm_storeu_ps(l, lo);
  _mm_storeu_ps(h, hi);
  float a = *lo_io, b = *hi_io;
  for (int i = 0; i < 4; i++) {
    a = l[i] < a ? l[i] : a;
    b = h[i] > b ? h[i] : b;
  }
  *lo_io = a;
  *hi_io = b;
  *nonfinite |= !_mm_testz_si128(bad, bad);
  hurray__quant_kernels_scalar()->range(x + k, n - k, lo_io, hi_io, nonfinite);
}

/* The scalar encoders compiled for this level (auto-vectorized, same C);
 * per-tensor affine has its own loop. */
T41 static void encode128(const HurrayResolvedScheme *s, const float *x, uint64_t n, float mul,
                          int32_t zp, uint8_t nan, uint8_t *dst) {
  if (s->encoder == HURRAY_ENC_AFFINE) {
    encode_affine128(x, n, mul, zp, s->qmin, s->qmax, dst);
    return;
  }
  hurray__encode_run0(s, x, n, mul, zp, nan, dst);
}

/* SSE4.1 has no per-lane shifts or gathers worth it: the scalar loop. */
static void decode_each_sse41(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at,
                              uint64_t n, const float *scale, const float *zp, HurrayDType od,
                              void *out) {
  hurray__decode_each_scalar(t, codes, at, 0, n, scale, zp, od, out);
}

/* ------------------------------------------------------------------ tables */

static const HurrayQuantKernels SSE41 = {HURRAY_SIMD_SSE41, "sse4.1",  decode128,
                                         decode_each_sse41, encode128, encode_affine128,
                                         range128};
static const HurrayQuantKernels AVX2 = {
    HURRAY_SIMD_AVX2, "avx2", decode256, decode_each256, encode256, encode_affine256, range256};
static const HurrayQuantKernels AVX512 = {
    HURRAY_SIMD_AVX512, "avx512",         decode512, decode_each512,
    encode512,          encode_affine512, range512};

/* F16C through cpuid itself: some compilers' __builtin_cpu_supports do not
 * know the name. (AVX2 being usable already means the OS saves the YMM
 * state F16C needs.) */
static bool has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

const HurrayQuantKernels *hurray__quant_kernels_x86(HurraySimdLevel level) {
  __builtin_cpu_init();
  switch (level) {
    case HURRAY_SIMD_AVX512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx2") && has_f16c()
                 ? &AVX512
                 : NULL;
    case HURRAY_SIMD_AVX2: return __builtin_cpu_supports("avx2") && has_f16c() ? &AVX2 : NULL;
    case HURRAY_SIMD_SSE41: return __builtin_cpu_supports("sse4.1") ? &SSE41 : NULL;
    default: return NULL;
  }
}

#else

const HurrayQuantKernels *hurray__quant_kernels_x86(HurraySimdLevel level) {
  (void)level;
  return NULL;
}

#endif
