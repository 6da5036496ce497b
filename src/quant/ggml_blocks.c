/*
 * Decoders for ggml's block formats (block-coded quantization).
 *
 * Each decoder follows docs/spec/quantization.md "Block-coded formats"
 * operation by operation: every intermediate is a binary32 value rounded
 * once, in the order the spec gives, so the output equals gguf-py's
 * numpy dequantize bit for bit (NaN and Inf scales included). That is why
 * a sign is applied by multiplying with +-1.0f rather than negating (the
 * two differ on NaN), why (d * a) * b is never folded to d * (a * b), and
 * why this file is built with FP contraction off (meson.build).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/error.h"
#include "elements.h"
#include "ggml_blocks.h"
#include "plan.h"
#include "simd.h"

#define QK_K 256

static inline uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline float h2f(const uint8_t *p) { return hurray__f16_to_f32(le16(p)); }

/* Signs are applied by multiplying with the +-1.0f of hurray__ggml_sign8,
 * loaded from memory: written as a select, the compiler turns x * sign into
 * a conditional negation, which flips the sign of a NaN where the
 * multiplication (and numpy) keeps it. */
#define SIGNS(s) hurray__ggml_sign8[(s) & 255u]

/* The doubled E2M1 values (ggml's kvalues_mxfp4) and IQ4_NL's code book. */
const float hurray__ggml_kv_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
const float hurray__ggml_kv_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

/* ---------------------------------------------------------- 32-element */

static void q4_1(const uint8_t *b, float *y) {
  float d = h2f(b), m = h2f(b + 2);
  for (int l = 0; l < 16; l++) {
    y[l] = d * (float)(b[4 + l] & 15) + m;
    y[l + 16] = d * (float)(b[4 + l] >> 4) + m;
  }
}

/* Byte j of the result is bit j of b (bit spreading without a loop of
 * variable shifts, which the vector units lack). */
static inline uint64_t spread8(uint64_t b) {
  b = (b | b << 28) & 0x0000000F0000000Full;
  b = (b | b << 14) & 0x0003000300030003ull;
  return (b | b << 7) & 0x0101010101010101ull;
}

/* The 5-bit codes of Q5_0/Q5_1: low nibbles as Q4, fifth bits from qh. */
static inline void q5_codes(const uint8_t *qs, uint32_t qh, uint8_t q[32]) {
  uint8_t hb[32];
  for (int k = 0; k < 4; k++) {
    uint64_t x = spread8((qh >> (8 * k)) & 255u);
    for (int j = 0; j < 8; j++) hb[8 * k + j] = (uint8_t)(x >> (8 * j));
  }
  for (int l = 0; l < 16; l++) {
    q[l] = (uint8_t)((qs[l] & 15) | hb[l] << 4);
    q[l + 16] = (uint8_t)((qs[l] >> 4) | hb[l + 16] << 4);
  }
}

static void q5_0(const uint8_t *b, float *y) {
  float d = h2f(b);
  uint8_t q[32];
  q5_codes(b + 6, le32(b + 2), q);
  for (int l = 0; l < 32; l++) y[l] = d * (float)((int)q[l] - 16);
}

static void q5_1(const uint8_t *b, float *y) {
  float d = h2f(b), m = h2f(b + 2);
  uint8_t q[32];
  q5_codes(b + 8, le32(b + 4), q);
  for (int l = 0; l < 32; l++) y[l] = d * (float)q[l] + m;
}

static void iq4_nl(const uint8_t *b, float *y) {
  float d = h2f(b);
  for (int l = 0; l < 16; l++) {
    y[l] = d * hurray__ggml_kv_iq4[b[2 + l] & 15];
    y[l + 16] = d * hurray__ggml_kv_iq4[b[2 + l] >> 4];
  }
}

static void mxfp4(const uint8_t *b, float *y) {
  float d = hurray__ggml_e8m0_half(b[0]);
  for (int l = 0; l < 16; l++) {
    y[l] = d * hurray__ggml_kv_fp4[b[1 + l] & 15];
    y[l + 16] = d * hurray__ggml_kv_fp4[b[1 + l] >> 4];
  }
}

static void nvfp4(const uint8_t *b, float *y) {
  for (int k = 0; k < 4; k++) {
    float d = hurray__ggml_ue4m3_half(b[k]);
    const uint8_t *q = b + 4 + 8 * k;
    for (int l = 0; l < 8; l++) {
      y[16 * k + l] = d * hurray__ggml_kv_fp4[q[l] & 15];
      y[16 * k + l + 8] = d * hurray__ggml_kv_fp4[q[l] >> 4];
    }
  }
}

/* ------------------------------------------------------------- K-quants */

static void q2_k(const uint8_t *b, float *y) {
  const uint8_t *sc = b, *qs = b + 16;
  float d = h2f(b + 80), dmin = h2f(b + 82);
  float dl[16], ml[16];
  for (int j = 0; j < 16; j++) {
    dl[j] = d * (float)(sc[j] & 15);
    ml[j] = dmin * (float)(sc[j] >> 4);
  }
  for (int j = 0; j < 8; j++) { /* sub-block of 32: qs half j/4, shift 2 (j % 4) */
    const uint8_t *q = qs + 32 * (j >> 2);
    int shift = 2 * (j & 3);
    for (int half = 0; half < 2; half++) {
      float s = dl[2 * j + half], m = ml[2 * j + half];
      const uint8_t *qq = q + 16 * half;
      float *o = y + 32 * j + 16 * half;
      for (int l = 0; l < 16; l++) o[l] = s * (float)((qq[l] >> shift) & 3) - m;
    }
  }
}

static void q3_k(const uint8_t *b, float *y) {
  const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
  float d = h2f(b + 108);
  float dl[16];
  for (int k = 0; k < 16; k++) {
    int lo = k < 8 ? sc[k] & 15 : sc[k - 8] >> 4;
    int hi = (sc[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
    dl[k] = d * (float)((lo | hi << 4) - 32);
  }
  /* Sub-block j (32 elements): 2-bit codes from qs half j/4 at shift
   * 2 (j % 4), minus 4 where bit j of hmask is clear. */
  for (int j = 0; j < 8; j++) {
    const uint8_t *q = qs + 32 * (j >> 2);
    int shift = 2 * (j & 3);
    int v[32];
    for (int l = 0; l < 32; l++) v[l] = ((q[l] >> shift) & 3) - (((hm[l] >> j) & 1) ^ 1) * 4;
    for (int half = 0; half < 2; half++) {
      float s = dl[2 * j + half];
      for (int l = 0; l < 16; l++) y[32 * j + 16 * half + l] = s * (float)v[16 * half + l];
    }
  }
}

/* The 6-bit scales and mins of Q4_K and Q5_K. */
static void k_scale_min(const uint8_t *s, int sc[8], int mn[8]) {
  for (int i = 0; i < 4; i++) {
    sc[i] = s[i] & 63;
    mn[i] = s[4 + i] & 63;
    sc[4 + i] = (s[8 + i] & 15) | ((s[i] >> 2) & 0x30);
    mn[4 + i] = (s[8 + i] >> 4) | ((s[4 + i] >> 2) & 0x30);
  }
}

static void q4_k(const uint8_t *b, float *y) {
  float d = h2f(b), dmin = h2f(b + 2);
  int sc[8], mn[8];
  k_scale_min(b + 4, sc, mn);
  const uint8_t *qs = b + 16;
  for (int j = 0; j < 8; j++) {
    float dl = d * (float)sc[j], dm = dmin * (float)mn[j];
    const uint8_t *q = qs + 32 * (j >> 1);
    int shift = 4 * (j & 1);
    for (int l = 0; l < 32; l++) y[32 * j + l] = dl * (float)((q[l] >> shift) & 15) - dm;
  }
}

static void q5_k(const uint8_t *b, float *y) {
  float d = h2f(b), dmin = h2f(b + 2);
  int sc[8], mn[8];
  k_scale_min(b + 4, sc, mn);
  const uint8_t *qh = b + 16, *qs = b + 48;
  for (int j = 0; j < 8; j++) {
    float dl = d * (float)sc[j], dm = dmin * (float)mn[j];
    const uint8_t *q = qs + 32 * (j >> 1);
    int shift = 4 * (j & 1);
    for (int l = 0; l < 32; l++) {
      int v = ((q[l] >> shift) & 15) | ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dl * (float)v - dm;
    }
  }
}

static void q6_k(const uint8_t *b, float *y) {
  const int8_t *sc = (const int8_t *)(b + 192);
  float d = h2f(b + 208);
  float dl[16];
  for (int k = 0; k < 16; k++) dl[k] = d * (float)sc[k];
  /* Each half (128 elements): quarter k takes low (k = 0, 1) or high
   * (k = 2, 3) nibbles of ql[32 (k % 2) + l] and bits 2k..2k+1 of qh[l]. */
  for (int h = 0; h < 2; h++) {
    const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
    for (int k = 0; k < 4; k++) {
      const uint8_t *lo = ql + 32 * (k & 1);
      int nshift = 4 * (k >> 1), hshift = 2 * k;
      int v[32];
      for (int l = 0; l < 32; l++) {
        v[l] = (((lo[l] >> nshift) & 15) | ((qh[l] >> hshift) & 3) << 4) - 32;
      }
      float *o = y + 128 * h + 32 * k;
      float s0 = dl[8 * h + 2 * k], s1 = dl[8 * h + 2 * k + 1];
      for (int l = 0; l < 16; l++) o[l] = s0 * (float)v[l];
      for (int l = 0; l < 16; l++) o[16 + l] = s1 * (float)v[16 + l];
    }
  }
}

static void q8_k(const uint8_t *b, float *y) {
  float d = hurray__f32_from_bits(le32(b));
  const int8_t *qs = (const int8_t *)(b + 4);
  for (int l = 0; l < QK_K; l++) y[l] = d * (float)qs[l];
}

/* ------------------------------------------------------------ ternary */

static void tq1_0(const uint8_t *b, float *y) {
  static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
  const uint8_t *qs = b, *qh = b + 48;
  float d = h2f(b + 52);
  /* A trit is the top of (byte * 3^p mod 256) * 3, over 256. */
#define TRIT(v, p) ((int)(((unsigned)(uint8_t)((v) * pow3[p]) * 3u) >> 8) - 1)
  for (int p = 0; p < 5; p++) {
    for (int l = 0; l < 32; l++) y[p * 32 + l] = d * (float)TRIT(qs[l], p);
    for (int l = 0; l < 16; l++) y[160 + p * 16 + l] = d * (float)TRIT(qs[32 + l], p);
  }
  for (int p = 0; p < 4; p++) {
    for (int l = 0; l < 4; l++) y[240 + p * 4 + l] = d * (float)TRIT(qh[l], p);
  }
#undef TRIT
}

static void tq2_0(const uint8_t *b, float *y) {
  float d = h2f(b + 64);
  for (int h = 0; h < 2; h++) {
    for (int s = 0; s < 4; s++) {
      for (int l = 0; l < 32; l++) {
        y[h * 128 + s * 32 + l] = d * (float)(((b[h * 32 + l] >> (2 * s)) & 3) - 1);
      }
    }
  }
}

/* ------------------------------------------------------------ IQ types */

static void iq2_xxs(const uint8_t *b, float *y) {
  float d = h2f(b);
  for (int i = 0; i < 8; i++) {
    uint32_t a0 = le32(b + 2 + 8 * i), a1 = le32(b + 6 + 8 * i);
    float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
    for (int l = 0; l < 4; l++) {
      const uint8_t *g = hurray__ggml_iq2xxs_grid[(a0 >> (8 * l)) & 255];
      const float *sg = SIGNS(hurray__ggml_ksigns((a1 >> (7 * l)) & 127));
      for (int j = 0; j < 8; j++) y[32 * i + 8 * l + j] = db * (float)g[j] * sg[j];
    }
  }
}

static void iq2_xs(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *sc = b + 66;
  for (int g = 0; g < 32; g++) {
    uint16_t q = le16(b + 2 + 2 * g);
    float db = d * (0.5f + (float)((sc[g >> 2] >> (4 * ((g >> 1) & 1))) & 15)) * 0.25f;
    const uint8_t *row = hurray__ggml_iq2xs_grid[q & 511];
    const float *sg = SIGNS(hurray__ggml_ksigns(q >> 9));
    for (int j = 0; j < 8; j++) y[8 * g + j] = db * (float)row[j] * sg[j];
  }
}

static void iq2_s(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
  for (int g = 0; g < 32; g++) {
    unsigned idx = qs[g] | ((qh[g >> 2] >> (2 * (g & 3))) & 3u) << 8;
    float db = d * (0.5f + (float)((sc[g >> 2] >> (4 * ((g >> 1) & 1))) & 15)) * 0.25f;
    const uint8_t *row = hurray__ggml_iq2s_grid[idx];
    const float *sg = SIGNS(signs[g]);
    for (int j = 0; j < 8; j++) y[8 * g + j] = db * (float)row[j] * sg[j];
  }
}

static void iq3_xxs(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2;
  for (int i = 0; i < 8; i++) {
    uint32_t a = le32(b + 66 + 4 * i);
    float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
    for (int l = 0; l < 4; l++) {
      const float *sg = SIGNS(hurray__ggml_ksigns((a >> (7 * l)) & 127));
      const uint8_t *g0 = hurray__ggml_iq3xxs_grid[qs[8 * i + 2 * l]];
      const uint8_t *g1 = hurray__ggml_iq3xxs_grid[qs[8 * i + 2 * l + 1]];
      float *o = y + 32 * i + 8 * l;
      for (int j = 0; j < 4; j++) {
        o[j] = db * (float)g0[j] * sg[j];
        o[j + 4] = db * (float)g1[j] * sg[j + 4];
      }
    }
  }
}

static void iq3_s(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
  for (int i = 0; i < 8; i++) {
    float db = d * (float)(1 + 2 * ((sc[i >> 1] >> (4 * (i & 1))) & 15));
    for (int p = 0; p < 4; p++) { /* 8 elements: grid rows g and g + 1, sign byte 4i + p */
      int g = 8 * i + 2 * p;
      const uint8_t *r0 = hurray__ggml_iq3s_grid[qs[g] | ((qh[g >> 3] >> (g & 7)) & 1u) << 8];
      const uint8_t *r1 =
          hurray__ggml_iq3s_grid[qs[g + 1] | ((qh[(g + 1) >> 3] >> ((g + 1) & 7)) & 1u) << 8];
      const float *sg = SIGNS(signs[4 * i + p]);
      float *o = y + 32 * i + 8 * p;
      for (int j = 0; j < 4; j++) {
        o[j] = db * (float)r0[j] * sg[j];
        o[j + 4] = db * (float)r1[j] * sg[j + 4];
      }
    }
  }
}

static void iq1_s(const uint8_t *b, float *y) {
  float d = h2f(b);
  const uint8_t *qs = b + 2;
  for (int i = 0; i < 8; i++) {
    uint16_t qh = le16(b + 34 + 2 * i);
    float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
    float delta = (qh & 0x8000) ? -0.125f : 0.125f;
    for (int l = 0; l < 4; l++) {
      const int8_t *row = hurray__ggml_iq1s_grid[qs[4 * i + l] | ((qh >> (3 * l)) & 7u) << 8];
      for (int j = 0; j < 8; j++) y[32 * i + 8 * l + j] = dl * ((float)row[j] + delta);
    }
  }
}

static void iq1_m(const uint8_t *b, float *y) {
  const uint8_t *qs = b, *qh = b + 32;
  uint16_t sc[4];
  float d = hurray__ggml_iq1m_scales(b, sc);
  for (int g = 0; g < 32; g++) {
    int k = g >> 1;
    float dl = d * (float)(2 * ((sc[k >> 2] >> (3 * (k & 3))) & 7) + 1);
    unsigned h = (qh[g >> 1] >> (4 * (g & 1))) & 15u;
    float delta = (h & 8) ? -0.125f : 0.125f;
    const int8_t *row = hurray__ggml_iq1s_grid[qs[g] | (h & 7u) << 8];
    for (int j = 0; j < 8; j++) y[8 * g + j] = dl * ((float)row[j] + delta);
  }
}

static void iq4_xs(const uint8_t *b, float *y) {
  float d = h2f(b);
  uint16_t sh = le16(b + 2);
  const uint8_t *sl = b + 4, *qs = b + 8;
  for (int i = 0; i < 8; i++) {
    int ls = (((sl[i >> 1] >> (4 * (i & 1))) & 15) | ((sh >> (2 * i)) & 3) << 4) - 32;
    float dl = d * (float)ls;
    for (int l = 0; l < 16; l++) {
      y[32 * i + l] = dl * hurray__ggml_kv_iq4[qs[16 * i + l] & 15];
      y[32 * i + l + 16] = dl * hurray__ggml_kv_iq4[qs[16 * i + l] >> 4];
    }
  }
}

/* ------------------------------------------------------------- driver */

typedef HurrayGgmlBlockFn BlockFn;

static BlockFn scalar_block_fn(HurrayBlockFormat f) {
  switch (f) {
    case HURRAY_BLOCK_GGML_Q4_1: return q4_1;
    case HURRAY_BLOCK_GGML_Q5_0: return q5_0;
    case HURRAY_BLOCK_GGML_Q5_1: return q5_1;
    case HURRAY_BLOCK_GGML_Q2_K: return q2_k;
    case HURRAY_BLOCK_GGML_Q3_K: return q3_k;
    case HURRAY_BLOCK_GGML_Q4_K: return q4_k;
    case HURRAY_BLOCK_GGML_Q5_K: return q5_k;
    case HURRAY_BLOCK_GGML_Q6_K: return q6_k;
    case HURRAY_BLOCK_GGML_Q8_K: return q8_k;
    case HURRAY_BLOCK_GGML_IQ2_XXS: return iq2_xxs;
    case HURRAY_BLOCK_GGML_IQ2_XS: return iq2_xs;
    case HURRAY_BLOCK_GGML_IQ3_XXS: return iq3_xxs;
    case HURRAY_BLOCK_GGML_IQ1_S: return iq1_s;
    case HURRAY_BLOCK_GGML_IQ4_NL: return iq4_nl;
    case HURRAY_BLOCK_GGML_IQ3_S: return iq3_s;
    case HURRAY_BLOCK_GGML_IQ2_S: return iq2_s;
    case HURRAY_BLOCK_GGML_IQ4_XS: return iq4_xs;
    case HURRAY_BLOCK_GGML_IQ1_M: return iq1_m;
    case HURRAY_BLOCK_GGML_TQ1_0: return tq1_0;
    case HURRAY_BLOCK_GGML_TQ2_0: return tq2_0;
    case HURRAY_BLOCK_GGML_MXFP4: return mxfp4;
    case HURRAY_BLOCK_GGML_NVFP4: return nvfp4;
  }
  return NULL;
}

/* The process's SIMD level (HURRAY_SIMD caps it) picks the AVX2 decoder
 * where there is one. */
static BlockFn block_fn(HurrayBlockFormat f) {
  HurraySimdLevel level = hurray__quant_kernels()->level;
  if (level == HURRAY_SIMD_AVX2 || level == HURRAY_SIMD_AVX512) {
    BlockFn fast = hurray__ggml_block_fn_avx2(f);
    if (fast != NULL) return fast;
  }
  return scalar_block_fn(f);
}

void hurray__ggml_decode(HurrayBlockFormat format, const uint8_t *blocks, uint64_t nblocks,
                         float *out) {
  BlockFn fn = block_fn(format);
  uint32_t elements = 0, bytes = 0;
  if (fn == NULL || !hurray_block_format_info((uint32_t)format, &elements, &bytes, NULL)) return;
  for (uint64_t i = 0; i < nblocks; i++) fn(blocks + i * bytes, out + i * elements);
}

typedef struct Job {
  BlockFn fn;
  const uint8_t *blocks;
  uint64_t nblocks;
  uint32_t elements, bytes;
  HurrayDType out_dtype;
  void *out;
  unsigned parts;
} Job;

#define STAGE_BLOCKS 16u /* 4096 floats of the largest block */

static void run_part(void *ctx, unsigned part) {
  const Job *j = ctx;
  uint64_t b0 = j->nblocks / j->parts * part;
  uint64_t b1 = part + 1 == j->parts ? j->nblocks : j->nblocks / j->parts * (part + 1);
  if (j->out_dtype == HURRAY_DTYPE_FLOAT32) {
    float *out = (float *)j->out;
    for (uint64_t b = b0; b < b1; b++) j->fn(j->blocks + b * j->bytes, out + b * j->elements);
    return;
  }
  float stage[STAGE_BLOCKS * QK_K];
  uint16_t *out = (uint16_t *)j->out;
  for (uint64_t b = b0; b < b1; b += STAGE_BLOCKS) {
    uint64_t n = b1 - b < STAGE_BLOCKS ? b1 - b : STAGE_BLOCKS;
    for (uint64_t k = 0; k < n; k++)
      j->fn(j->blocks + (b + k) * j->bytes, stage + k * j->elements);
    uint16_t *o = out + b * j->elements;
    uint64_t m = n * j->elements;
    if (j->out_dtype == HURRAY_DTYPE_FLOAT16) {
      for (uint64_t k = 0; k < m; k++) o[k] = hurray__f32_to_f16(stage[k]);
    } else {
      for (uint64_t k = 0; k < m; k++) o[k] = hurray__f32_to_bf16(stage[k]);
    }
  }
}

HurrayStatus hurray__block_coded_dequantize(const HurrayDescriptor *d,
                                            const HurrayBufferList *list, HurrayDType out_dtype,
                                            void *out, uint64_t numel, uint32_t threads,
                                            HurrayError *error) {
  Job j = {0};
  HurrayBlockFormat format = hurray_descriptor_quant_block_format(d);
  j.fn = block_fn(format);
  if (j.fn == NULL || !hurray_block_format_info((uint32_t)format, &j.elements, &j.bytes, NULL)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED, "unknown block format %d", (int)format);
  }
  /* Placement validation proved the data buffer holds every block. */
  j.blocks = hurray_buffer_data(hurray_buffer_list_get(list, hurray_descriptor_data_buffer(d))) +
             hurray_descriptor_byte_offset(d);
  j.nblocks = numel / j.elements;
  j.out_dtype = out_dtype;
  j.out = out;
  j.parts = hurray__quant_threads(threads, numel * (out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2));
  if (j.nblocks < j.parts) j.parts = j.nblocks ? (unsigned)j.nblocks : 1;
  hurray__parallel_run(j.parts, run_part, &j);
  return HURRAY_OK;
}
