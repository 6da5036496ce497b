/*
 * Block-coded quantization (HURRAY_QUANT_BLOCK_CODED): decoders for ggml's
 * block formats, bit for bit as docs/spec/quantization.md ("Block-coded
 * formats") defines them, which is what gguf-py's gguf.quants.dequantize
 * computes in binary32.
 */
#ifndef HURRAY_QUANT_GGML_BLOCKS_H
#define HURRAY_QUANT_GGML_BLOCKS_H

#include <stdint.h>

#include "hurray/buffer.h"
#include "hurray/descriptor.h"
#include "elements.h"

/* The IQ lattice tables (ggml_grids.c, generated). */
extern const uint8_t hurray__ggml_iq2xxs_grid[256][8];
extern const uint8_t hurray__ggml_iq2xs_grid[512][8];
extern const uint8_t hurray__ggml_iq2s_grid[1024][8];
extern const uint8_t hurray__ggml_iq3xxs_grid[256][4];
extern const uint8_t hurray__ggml_iq3s_grid[512][4];
extern const int8_t hurray__ggml_iq1s_grid[2048][8];
/* Sign multipliers: row s holds -1.0f at j where bit j of s is set, else 1.0f. */
extern const float hurray__ggml_sign8[256][8];

/* The doubled E2M1 values (ggml's kvalues_mxfp4) and IQ4_NL's code book
 * (ggml_blocks.c). */
extern const float hurray__ggml_kv_fp4[16];
extern const float hurray__ggml_kv_iq4[16];

/* E8M0 halved (ggml_e8m0_to_fp32_half): 2^(e - 128), with e = 0 and 1 as
 * the binary32 subnormals 2^-128 and 2^-127; 255 is 2^127, not NaN. */
static inline float hurray__ggml_e8m0_half(uint8_t e) {
  uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  return hurray__f32_from_bits(bits);
}

/* Unsigned E4M3 (bias 7, the sign bit ignored) halved, as gguf-py's
 * NVFP4.ue4m3_to_fp32: 0x00 and 0x7F are +0. (1 + m/8) 2^(e-7) / 2 is
 * built from its bits, exactly the value gguf-py computes: a call of
 * ldexpf per 16 elements took a third of NVFP4's decode. */
static inline float hurray__ggml_ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7f) return 0.0f;
  unsigned e = (x >> 3) & 15u, m = x & 7u;
  if (e == 0) return (float)m * 0x1p-10f;
  return hurray__f32_from_bits((e + 119u) << 23 | m << 20);
}

/* IQ1_M's four scale words, and its float16 block scale, whose bits are
 * spread over the words' top nibbles. */
static inline float hurray__ggml_iq1m_scales(const uint8_t *b, uint16_t sc[4]) {
  for (int k = 0; k < 4; k++) sc[k] = (uint16_t)(b[48 + 2 * k] | b[49 + 2 * k] << 8);
  uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                              (sc[3] & 0xf000));
  return hurray__f16_to_f32(dbits);
}

/* ggml's ksigns_iq2xs: the 7 stored sign bits plus an eighth that makes
 * the count of set bits even. */
static inline unsigned hurray__ggml_ksigns(unsigned i) {
  return i | (unsigned)(__builtin_popcount(i) & 1) << 7;
}

/* Decodes one block of `elements` floats. */
typedef void (*HurrayGgmlBlockFn)(const uint8_t *block, float *out);

/* The AVX2 decoder of `format` (ggml_blocks_x86.c), same bytes as the
 * scalar one; NULL when there is none or the build is not x86. The caller
 * checks that the CPU runs AVX2. */
HurrayGgmlBlockFn hurray__ggml_block_fn_avx2(HurrayBlockFormat format);

/* Decodes `nblocks` consecutive blocks of `format` into nblocks * elements
 * floats. `format` must be known (hurray_block_format_info). */
void hurray__ggml_decode(HurrayBlockFormat format, const uint8_t *blocks, uint64_t nblocks,
                         float *out);

/* hurray_dequantize for a block-coded tensor whose placement is already
 * validated and whose output (`numel` elements of out_dtype) fits `out`. */
HurrayStatus hurray__block_coded_dequantize(const HurrayDescriptor *d,
                                            const HurrayBufferList *list, HurrayDType out_dtype,
                                            void *out, uint64_t numel, uint32_t threads,
                                            HurrayError *error);

#endif
