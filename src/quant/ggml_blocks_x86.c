/*
 * AVX2 decoders for the ggml block formats whose scalar loops the compiler
 * cannot vectorize well at the baseline flags (Q5_0/Q5_1: a fifth bit per
 * element from a 32-bit mask; Q2_K and TQ2_0: 2-bit fields; TQ1_0: trits
 * by byte multiplication; the IQ lattices: a table row of 8 per group;
 * the 4-bit code books of MXFP4, NVFP4 and IQ4_NL: a table lookup per code). Each computes
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

/* ------------------------------------------- 4-bit code books (FP4, IQ4) */

/* The 16-entry table at the 8 indices in idx (0..15): two in-register
 * permutes, one for each half of the table, chosen by bit 3. */
T2 static inline __m256 lut16(__m256i idx, __m256 lo, __m256 hi) {
  __m256 a = _mm256_permutevar8x32_ps(lo, idx), b = _mm256_permutevar8x32_ps(hi, idx);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/* y[0..16) = d * table[low nibbles of q[0..8)] then of the high nibbles,
 * or y[0..32) from 16 bytes (`sixteen`), as the scalar loops lay them out. */
T2 static inline void store_nibbles(float *y, const uint8_t *q, int sixteen, __m256 d,
                                    const float *table) {
  const __m256 lo = _mm256_loadu_ps(table), hi = _mm256_loadu_ps(table + 8);
  const __m128i m4 = _mm_set1_epi8(15);
  __m128i v = sixteen ? _mm_loadu_si128((const __m128i *)q) : _mm_loadl_epi64((const __m128i *)q);
  __m128i l = _mm_and_si128(v, m4), h = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
  int half = sixteen ? 16 : 8;
  _mm256_storeu_ps(y, _mm256_mul_ps(d, lut16(_mm256_cvtepu8_epi32(l), lo, hi)));
  _mm256_storeu_ps(y + half, _mm256_mul_ps(d, lut16(_mm256_cvtepu8_epi32(h), lo, hi)));
  if (sixteen) {
    l = _mm_srli_si128(l, 8);
    h = _mm_srli_si128(h, 8);
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, lut16(_mm256_cvtepu8_epi32(l), lo, hi)));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, lut16(_mm256_cvtepu8_epi32(h), lo, hi)));
  }
}

T2 static void mxfp4_avx2(const uint8_t *b, float *y) {
  store_nibbles(y, b + 1, 1, _mm256_set1_ps(hurray__ggml_e8m0_half(b[0])), hurray__ggml_kv_fp4);
}

T2 static void nvfp4_avx2(const uint8_t *b, float *y) {
  for (int k = 0; k < 4; k++) {
    store_nibbles(y + 16 * k, b + 4 + 8 * k, 0, _mm256_set1_ps(hurray__ggml_ue4m3_half(b[k])),
                  hurray__ggml_kv_fp4);
  }
}

T2 static void iq4_nl_avx2(const uint8_t *b, float *y) {
  store_nibbles(y, b + 2, 1, _mm256_set1_ps(h2f(b)), hurray__ggml_kv_iq4);
}

/* ------------------------------------------------------------ IQ types */

/* The IQ decoders multiply each grid value by the group's scale and then by
 * its +-1.0f sign, (db * g) * s as the scalar loops do; eight at a time
 * here, the row of grid bytes widened in one step where the scalar loop
 * converts them one by one. Into a reused float32 out= of 16 MiB on one
 * thread they went from 0.34-0.55 of a memcpy of the same size to 0.73
 * (IQ1_M) - 1.64 (IQ1_S) (2-CPU Intel VM, bench/out_ratio.py's pairs). */
static inline uint16_t le16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline __m128i load8(const void *p) { return _mm_loadl_epi64((const __m128i *)p); }

/* Two grid rows of 4 bytes as 8 (IQ3). */
static inline __m128i load4x2(const uint8_t *a, const uint8_t *b) {
  return _mm_setr_epi32((int)le32(a), (int)le32(b), 0, 0);
}

/* y[j] = (db * (float)g[j]) * sg[j] for 8 unsigned grid bytes g. */
T2 static inline void store8_grid(float *y, __m128i g, __m256 db, const float *sg) {
  __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(g));
  _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_mul_ps(db, v), _mm256_loadu_ps(sg)));
}

/* y[j] = dl * ((float)row[j] + delta) for 8 signed grid bytes (IQ1). */
T2 static inline void store8_iq1(float *y, const int8_t *row, __m256 dl, __m256 delta) {
  __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(row)));
  _mm256_storeu_ps(y, _mm256_mul_ps(dl, _mm256_add_ps(v, delta)));
}

#  define SIGN8(s) hurray__ggml_sign8[(s) & 255u]

T2 static void iq2_xxs_avx2(const uint8_t *b, float *y) {
  float d = h2f(b);
  for (int i = 0; i < 8; i++) {
    uint32_t a0 = le32(b + 2 + 8 * i), a1 = le32(b + 6 + 8 * i);
    __m256 db = _mm256_set1_ps(d * (0.5f + (float)(a1 >> 28)) * 0.25f);
    for (int l = 0; l < 4; l++) {
      store8_grid(y + 32 * i + 8 * l, load8(hurray__ggml_iq2xxs_grid[(a0 >> (8 * l)) & 255]), db,
                  SIGN8(hurray__ggml_ksigns((a1 >> (7 * l)) & 127)));
    }
  }
}

T2 static void iq2_xs_avx2(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *sc = b + 66;
  for (int g = 0; g < 32; g++) {
    uint16_t q = le16(b + 2 + 2 * g);
    float db = d * (0.5f + (float)((sc[g >> 2] >> (4 * ((g >> 1) & 1))) & 15)) * 0.25f;
    store8_grid(y + 8 * g, load8(hurray__ggml_iq2xs_grid[q & 511]), _mm256_set1_ps(db),
                SIGN8(hurray__ggml_ksigns(q >> 9)));
  }
}

T2 static void iq2_s_avx2(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
  for (int g = 0; g < 32; g++) {
    unsigned idx = qs[g] | ((qh[g >> 2] >> (2 * (g & 3))) & 3u) << 8;
    float db = d * (0.5f + (float)((sc[g >> 2] >> (4 * ((g >> 1) & 1))) & 15)) * 0.25f;
    store8_grid(y + 8 * g, load8(hurray__ggml_iq2s_grid[idx]), _mm256_set1_ps(db),
                SIGN8(signs[g]));
  }
}

T2 static void iq3_xxs_avx2(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2;
  for (int i = 0; i < 8; i++) {
    uint32_t a = le32(b + 66 + 4 * i);
    __m256 db = _mm256_set1_ps(d * (0.5f + (float)(a >> 28)) * 0.5f);
    for (int l = 0; l < 4; l++) {
      __m128i g = load4x2(hurray__ggml_iq3xxs_grid[qs[8 * i + 2 * l]],
                          hurray__ggml_iq3xxs_grid[qs[8 * i + 2 * l + 1]]);
      store8_grid(y + 32 * i + 8 * l, g, db, SIGN8(hurray__ggml_ksigns((a >> (7 * l)) & 127)));
    }
  }
}

T2 static void iq3_s_avx2(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
  for (int i = 0; i < 8; i++) {
    __m256 db = _mm256_set1_ps(d * (float)(1 + 2 * ((sc[i >> 1] >> (4 * (i & 1))) & 15)));
    for (int p = 0; p < 4; p++) {
      int g = 8 * i + 2 * p;
      __m128i rows = load4x2(
          hurray__ggml_iq3s_grid[qs[g] | ((qh[g >> 3] >> (g & 7)) & 1u) << 8],
          hurray__ggml_iq3s_grid[qs[g + 1] | ((qh[(g + 1) >> 3] >> ((g + 1) & 7)) & 1u) << 8]);
      store8_grid(y + 32 * i + 8 * p, rows, db, SIGN8(signs[4 * i + p]));
    }
  }
}

T2 static void iq1_s_avx2(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2;
  for (int i = 0; i < 8; i++) {
    uint16_t qh = le16(b + 34 + 2 * i);
    __m256 dl = _mm256_set1_ps(d * (float)(2 * ((qh >> 12) & 7) + 1));
    __m256 delta = _mm256_set1_ps((qh & 0x8000) ? -0.125f : 0.125f);
    for (int l = 0; l < 4; l++) {
      store8_iq1(y + 32 * i + 8 * l,
                 hurray__ggml_iq1s_grid[qs[4 * i + l] | ((qh >> (3 * l)) & 7u) << 8], dl, delta);
    }
  }
}

T2 static void iq1_m_avx2(const uint8_t *b, float *y) {
  const uint8_t *qs = b, *qh = b + 32;
  uint16_t sc[4];
  float d = hurray__ggml_iq1m_scales(b, sc);
  const __m256 minus = _mm256_set1_ps(-0.125f), plus = _mm256_set1_ps(0.125f);
  for (int k = 0; k < 16; k++) { /* two groups of 8 share a scale and a qh byte */
    __m256 dl = _mm256_set1_ps(d * (float)(2 * ((sc[k >> 2] >> (3 * (k & 3))) & 7) + 1));
    unsigned h0 = qh[k] & 15u, h1 = qh[k] >> 4;
    store8_iq1(y + 16 * k, hurray__ggml_iq1s_grid[qs[2 * k] | (h0 & 7u) << 8], dl,
               (h0 & 8) ? minus : plus);
    store8_iq1(y + 16 * k + 8, hurray__ggml_iq1s_grid[qs[2 * k + 1] | (h1 & 7u) << 8], dl,
               (h1 & 8) ? minus : plus);
  }
}

HurrayGgmlBlockFn hurray__ggml_block_fn_avx2(HurrayBlockFormat format) {
  switch (format) {
    case HURRAY_BLOCK_GGML_TQ1_0: return tq1_0_avx2;
    case HURRAY_BLOCK_GGML_Q5_0: return q5_0_avx2;
    case HURRAY_BLOCK_GGML_Q5_1: return q5_1_avx2;
    case HURRAY_BLOCK_GGML_Q2_K: return q2_k_avx2;
    case HURRAY_BLOCK_GGML_TQ2_0: return tq2_0_avx2;
    case HURRAY_BLOCK_GGML_IQ2_XXS: return iq2_xxs_avx2;
    case HURRAY_BLOCK_GGML_IQ2_XS: return iq2_xs_avx2;
    case HURRAY_BLOCK_GGML_IQ2_S: return iq2_s_avx2;
    case HURRAY_BLOCK_GGML_IQ3_XXS: return iq3_xxs_avx2;
    case HURRAY_BLOCK_GGML_IQ3_S: return iq3_s_avx2;
    case HURRAY_BLOCK_GGML_IQ1_S: return iq1_s_avx2;
    case HURRAY_BLOCK_GGML_IQ1_M: return iq1_m_avx2;
    case HURRAY_BLOCK_GGML_MXFP4: return mxfp4_avx2;
    case HURRAY_BLOCK_GGML_NVFP4: return nvfp4_avx2;
    case HURRAY_BLOCK_GGML_IQ4_NL: return iq4_nl_avx2;
    default: return NULL;
  }
}

#else

HurrayGgmlBlockFn hurray__ggml_block_fn_avx2(HurrayBlockFormat format) {
  (void)format;
  return NULL;
}

#endif
