/*
 * AVX2 decoders for the ggml block formats whose scalar loops the compiler
 * cannot vectorize well at the baseline flags (Q5_0/Q5_1: a fifth bit per
 * element from a 32-bit mask; Q2_K and TQ2_0: 2-bit fields; TQ1_0: trits
 * by byte multiplication). Each computes
 * the scalar decoder's operations in the same order on the same binary32
 * values, so the bytes are identical (tests/python/test_simd_levels.py and
 * test_gguf_types.py check every level against the scalar path and gguf-py).
 * The target is AVX2 without FMA, so no multiply-add can be fused.
 */
#include "ggml_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#  include <stdint.h>
#  include <string.h>

#  include "elements.h"

#  define T2 __attribute__((target("avx2,f16c")))

static inline float h2f(const uint8_t *p) {
  return hurray__f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* 8 int8 codes (the low 8 bytes of v) times d, one rounding each. */
T2 static inline void store8_scaled(float *y, __m128i v, __m256 d) {
  _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))));
}

/* 32 int8 codes times d. */
T2 static inline void store32_scaled(float *y, __m256i q, __m256 d) {
  __m128i a = _mm256_castsi256_si128(q), b = _mm256_extracti128_si256(q, 1);
  store8_scaled(y, a, d);
  store8_scaled(y + 8, _mm_srli_si128(a, 8), d);
  store8_scaled(y + 16, b, d);
  store8_scaled(y + 24, _mm_srli_si128(b, 8), d);
}

/* 8 uint8 codes times d, minus m (Q2_K) or plus m (Q5_1): two roundings, in
 * the scalar order. */
T2 static inline void store8_affine(float *y, __m128i v, __m256 d, __m256 m, int add) {
  __m256 p = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
  _mm256_storeu_ps(y, add ? _mm256_add_ps(p, m) : _mm256_sub_ps(p, m));
}

/* Byte l of the result is 0x10 when bit l of qh is set, else 0. */
T2 static inline __m256i fifth_bits(uint32_t qh) {
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                        2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), pick);
  __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

/* The 32 five-bit codes of a Q5 block: elements 0-15 the low nibbles of
 * qs, 16-31 the high ones, each with its fifth bit. */
T2 static inline __m256i q5_codes(const uint8_t *qs, uint32_t qh) {
  __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
  __m256i nib = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
  return _mm256_or_si256(nib, fifth_bits(qh));
}

static inline uint32_t le32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v; /* x86 is little-endian */
}

T2 static void q5_0_avx2(const uint8_t *b, float *y) {
  __m256i q = _mm256_sub_epi8(q5_codes(b + 6, le32(b + 2)), _mm256_set1_epi8(16));
  store32_scaled(y, q, _mm256_set1_ps(h2f(b)));
}

T2 static void q5_1_avx2(const uint8_t *b, float *y) {
  __m256 d = _mm256_set1_ps(h2f(b)), m = _mm256_set1_ps(h2f(b + 2));
  __m256i q = q5_codes(b + 8, le32(b + 4));
  __m128i a = _mm256_castsi256_si128(q), c = _mm256_extracti128_si256(q, 1);
  store8_affine(y, a, d, m, 1);
  store8_affine(y + 8, _mm_srli_si128(a, 8), d, m, 1);
  store8_affine(y + 16, c, d, m, 1);
  store8_affine(y + 24, _mm_srli_si128(c, 8), d, m, 1);
}

T2 static void q2_k_avx2(const uint8_t *b, float *y) {
  const uint8_t *sc = b, *qs = b + 16;
  float d = h2f(b + 80), dmin = h2f(b + 82);
  const __m128i m3 = _mm_set1_epi8(3);
  for (int j = 0; j < 8; j++) { /* sub-block of 32: qs half j/4, shift 2 (j % 4) */
    const uint8_t *q = qs + 32 * (j >> 2);
    int shift = 2 * (j & 3);
    for (int half = 0; half < 2; half++) {
      uint8_t s8 = sc[2 * j + half];
      __m256 s = _mm256_set1_ps(d * (float)(s8 & 15));
      __m256 m = _mm256_set1_ps(dmin * (float)(s8 >> 4));
      __m128i v = _mm_loadu_si128((const __m128i *)(q + 16 * half));
      v = _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(shift)), m3);
      float *o = y + 32 * j + 16 * half;
      store8_affine(o, v, s, m, 0);
      store8_affine(o + 8, _mm_srli_si128(v, 8), s, m, 0);
    }
  }
}

T2 static void tq2_0_avx2(const uint8_t *b, float *y) {
  __m256 d = _mm256_set1_ps(h2f(b + 64));
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  for (int h = 0; h < 2; h++) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(b + 32 * h));
    for (int s = 0; s < 4; s++) {
      __m256i q = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * s)), m3);
      store32_scaled(y + h * 128 + s * 32, _mm256_sub_epi8(q, one), d);
    }
  }
}

/* 16 trits times d: trit p of byte v is the top of (v * 3^p mod 256) * 3,
 * over 256, minus one (exact in 16-bit lanes). */
T2 static inline void store16_trits(float *y, __m128i bytes, int pow, __m256 d) {
  __m256i v = _mm256_cvtepu8_epi16(bytes);
  __m256i x = _mm256_and_si256(_mm256_mullo_epi16(v, _mm256_set1_epi16((short)pow)),
                               _mm256_set1_epi16(255));
  __m256i t = _mm256_sub_epi16(_mm256_srli_epi16(_mm256_mullo_epi16(x, _mm256_set1_epi16(3)), 8),
                               _mm256_set1_epi16(1));
  __m128i lo = _mm256_castsi256_si128(t), hi = _mm256_extracti128_si256(t, 1);
  _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(lo))));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(hi))));
}

T2 static void tq1_0_avx2(const uint8_t *b, float *y) {
  static const int pow3[5] = {1, 3, 9, 27, 81};
  const uint8_t *qs = b, *qh = b + 48;
  float df = h2f(b + 52);
  __m256 d = _mm256_set1_ps(df);
  __m128i q0 = _mm_loadu_si128((const __m128i *)qs);
  __m128i q1 = _mm_loadu_si128((const __m128i *)(qs + 16));
  __m128i q2 = _mm_loadu_si128((const __m128i *)(qs + 32));
  for (int p = 0; p < 5; p++) {
    store16_trits(y + p * 32, q0, pow3[p], d);
    store16_trits(y + p * 32 + 16, q1, pow3[p], d);
    store16_trits(y + 160 + p * 16, q2, pow3[p], d);
  }
  for (int p = 0; p < 4; p++) {
    for (int l = 0; l < 4; l++) {
      int t = (int)(((unsigned)(uint8_t)(qh[l] * pow3[p]) * 3u) >> 8) - 1;
      y[240 + p * 4 + l] = df * (float)t;
    }
  }
}

HurrayGgmlBlockFn hurray__ggml_block_fn_avx2(HurrayBlockFormat format) {
  switch (format) {
    case HURRAY_BLOCK_GGML_TQ1_0: return tq1_0_avx2;
    case HURRAY_BLOCK_GGML_Q5_0: return q5_0_avx2;
    case HURRAY_BLOCK_GGML_Q5_1: return q5_1_avx2;
    case HURRAY_BLOCK_GGML_Q2_K: return q2_k_avx2;
    case HURRAY_BLOCK_GGML_TQ2_0: return tq2_0_avx2;
    default: return NULL;
  }
}

#else

HurrayGgmlBlockFn hurray__ggml_block_fn_avx2(HurrayBlockFormat format) {
  (void)format;
  return NULL;
}

#endif
