/*
 * NEON kernels (simd.h) for AArch64, where Advanced SIMD is always present.
 * 4-bit codes look their value up with tbl on the table's four byte planes,
 * 8-bit integer codes widen and convert; the rest, and narrowing to float16
 * or bfloat16, go through the scalar code. Same operations in the same
 * order as the scalar kernels, so the same bytes.
 */
#include "simd.h"

#if defined(__aarch64__)

#  include <arm_neon.h>

static inline void store4n(HurrayDType od, void *out, uint64_t k, float32x4_t v) {
  if (od == HURRAY_DTYPE_FLOAT32) {
    vst1q_f32((float *)out + k, v);
    return;
  }
  float f[4];
  vst1q_f32(f, v);
  for (int i = 0; i < 4; i++) hurray__store_one(od, out, k + (uint64_t)i, f[i]);
}

static inline float32x4_t apply_n(float32x4_t v, float32x4_t z, float32x4_t s) {
  return vmulq_f32(vsubq_f32(v, z), s);
}

static inline void run_n(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at, uint64_t k,
                         uint64_t end, float s, float z, HurrayDType od, void *out,
                         const uint8x16_t *P) {
  const float32x4_t S = vdupq_n_f32(s), Z = vdupq_n_f32(z);
  if (t->bits == 4) {
    if (k < end && ((at + k) & 1u)) {
      hurray__decode_scalar_run(t, codes, at, k, k + 1, s, z, od, out);
      k++;
    }
    for (; k + 16 <= end; k += 16) {
      uint8x8_t b = vld1_u8(codes + (at + k) / 2);
      uint8x8_t lo = vand_u8(b, vdup_n_u8(0x0f)), hi = vshr_n_u8(b, 4);
      uint8x8x2_t z2 = vzip_u8(lo, hi);
      uint8x16_t c = vcombine_u8(z2.val[0], z2.val[1]);
      uint8x16_t b0 = vqtbl1q_u8(P[0], c), b1 = vqtbl1q_u8(P[1], c);
      uint8x16_t b2 = vqtbl1q_u8(P[2], c), b3 = vqtbl1q_u8(P[3], c);
      uint8x16x2_t p01 = vzipq_u8(b0, b1), p23 = vzipq_u8(b2, b3);
      uint16x8x2_t lo4 = vzipq_u16(vreinterpretq_u16_u8(p01.val[0]),
                                   vreinterpretq_u16_u8(p23.val[0]));
      uint16x8x2_t hi4 = vzipq_u16(vreinterpretq_u16_u8(p01.val[1]),
                                   vreinterpretq_u16_u8(p23.val[1]));
      store4n(od, out, k, apply_n(vreinterpretq_f32_u16(lo4.val[0]), Z, S));
      store4n(od, out, k + 4, apply_n(vreinterpretq_f32_u16(lo4.val[1]), Z, S));
      store4n(od, out, k + 8, apply_n(vreinterpretq_f32_u16(hi4.val[0]), Z, S));
      store4n(od, out, k + 12, apply_n(vreinterpretq_f32_u16(hi4.val[1]), Z, S));
    }
  } else if (t->bits == 8 && (t->map == HURRAY_MAP_INT8 || t->map == HURRAY_MAP_UINT8)) {
    const float32x4_t U = vdupq_n_f32(t->unit);
    for (; k + 8 <= end; k += 8) {
      uint8x8_t b = vld1_u8(codes + at + k);
      int32x4_t i0, i1;
      if (t->map == HURRAY_MAP_INT8) {
        int16x8_t w = vmovl_s8(vreinterpret_s8_u8(b));
        i0 = vmovl_s16(vget_low_s16(w));
        i1 = vmovl_s16(vget_high_s16(w));
      } else {
        uint16x8_t w = vmovl_u8(b);
        i0 = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w)));
        i1 = vreinterpretq_s32_u32(vmovl_u16(vget_high_u16(w)));
      }
      store4n(od, out, k, apply_n(vmulq_f32(vcvtq_f32_s32(i0), U), Z, S));
      store4n(od, out, k + 4, apply_n(vmulq_f32(vcvtq_f32_s32(i1), U), Z, S));
    }
  }
  hurray__decode_scalar_run(t, codes, at, k, end, s, z, od, out);
}

static void decode_neon(const HurrayDecodeTable *t, const uint8_t *codes, uint64_t at, uint64_t n,
                        uint64_t block, uint64_t head, const float *scale, const float *zp,
                        HurrayDType out_dtype, void *out) {
  uint8x16_t P[4];
  for (int i = 0; i < 4; i++) P[i] = vld1q_u8(t->planes[i]);
  HURRAY_DECODE_GROUPS(run_n, P);
}

static HurrayQuantKernels NEON;

const HurrayQuantKernels *hurray__quant_kernels_neon(void) {
  const HurrayQuantKernels *scalar = hurray__quant_kernels_scalar();
  NEON = (HurrayQuantKernels){HURRAY_SIMD_NEON,    "neon",         decode_neon,
                              scalar->decode_each, scalar->encode, scalar->encode_affine,
                              scalar->range};
  return &NEON;
}

#else

const HurrayQuantKernels *hurray__quant_kernels_neon(void) { return NULL; }

#endif
