/*
 * hurray_dequantize: any valid quantized tensor back to floats.
 *
 * Every kind decodes with one formula, value = (v(code) - zp) * scale in
 * binary32, where v is a 256-entry table for codes of 8 bits or fewer (the
 * integer value, the minifloat value, the NF4 code book, or the MX INT8
 * value). Kinds without zero points use zp = 0, which changes nothing:
 * v - 0 is v, NaN and -0 included.
 *
 * The spec's affine rule is f32(c - z) * s with c - z the exact integer
 * difference. f32(c) - f32(z) equals it whenever both conversions are
 * exact (one IEEE subtraction rounds the exact difference once), which
 * holds for codes of 8 bits or fewer and zero points within 2^24. Codes
 * wider than 8 bits (int16 up to uint64), or any zero point beyond 2^24 in
 * magnitude, take the exact path instead ("wide"): c and z as sign and
 * 64-bit magnitude, their difference (up to 65 bits) rounded once.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../buffer/host_access.h"
#include "../buffer/output_limits.h"
#include "../core/checked.h"
#include "../core/error.h"
#include "elements.h"
#include "ggml_blocks.h"
#include "hurray/quant.h"
#include "packed.h"
#include "plan.h"
#include "simd.h"

#define STAGE 4096u

/* Value of a code of a dtype of at most 8 bits, before scale and zero point. */
static float code_value(HurrayDType dtype, HurrayQuantKind kind, HurrayMxElement element,
                        unsigned c) {
  if (kind == HURRAY_QUANT_NF4) return HURRAY__NF4_VALUES[c & 15u];
  if (kind == HURRAY_QUANT_MX && element == HURRAY_MX_INT8) return (float)(int8_t)c / 64.0f;
  const HurrayMinifloat *mf = hurray__minifloat_of(dtype);
  if (mf) return hurray__minifloat_decode(mf, c);
  switch (dtype) {
    case HURRAY_DTYPE_INT8: return (float)(int8_t)c;
    case HURRAY_DTYPE_INT4: return (float)((int)(c & 15u) - ((c & 8u) ? 16 : 0));
    case HURRAY_DTYPE_FLOAT8_E8M0FNU: return hurray__e8m0_to_f32((uint8_t)c);
    default: return (float)c; /* uint8, uint4, bool */
  }
}

/* Reads element i of a buffer of dtype `t` as a float (scales, zero points,
 * wide codes). */
static float read_float(HurrayDType t, const uint8_t *p, uint64_t i) {
  switch (t) {
    case HURRAY_DTYPE_FLOAT32: {
      float v;
      memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case HURRAY_DTYPE_FLOAT64: {
      double v;
      memcpy(&v, p + 8 * i, 8);
      return (float)v;
    }
    case HURRAY_DTYPE_FLOAT16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return hurray__f16_to_f32(h);
    }
    case HURRAY_DTYPE_BFLOAT16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return hurray__bf16_to_f32(h);
    }
    case HURRAY_DTYPE_FLOAT8_E8M0FNU: return hurray__e8m0_to_f32(p[i]);
    case HURRAY_DTYPE_FLOAT8_E4M3FN:
    case HURRAY_DTYPE_FLOAT8_E5M2: return hurray__minifloat_decode(hurray__minifloat_of(t), p[i]);
    case HURRAY_DTYPE_INT8: return (float)(int8_t)p[i];
    case HURRAY_DTYPE_UINT8:
    case HURRAY_DTYPE_BOOL: return (float)p[i];
    case HURRAY_DTYPE_INT16: {
      int16_t v;
      memcpy(&v, p + 2 * i, 2);
      return (float)v;
    }
    case HURRAY_DTYPE_UINT16: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      return (float)v;
    }
    case HURRAY_DTYPE_INT32: {
      int32_t v;
      memcpy(&v, p + 4 * i, 4);
      return (float)v;
    }
    case HURRAY_DTYPE_UINT32: {
      uint32_t v;
      memcpy(&v, p + 4 * i, 4);
      return (float)v;
    }
    case HURRAY_DTYPE_INT64: {
      int64_t v;
      memcpy(&v, p + 8 * i, 8);
      return (float)v;
    }
    case HURRAY_DTYPE_UINT64: {
      uint64_t v;
      memcpy(&v, p + 8 * i, 8);
      return (float)v;
    }
    case HURRAY_DTYPE_INT4:
    case HURRAY_DTYPE_UINT4: {
      unsigned c = (p[i / 2] >> (4 * (i & 1u))) & 15u;
      return t == HURRAY_DTYPE_INT4 ? (float)((int)c - ((c & 8u) ? 16 : 0)) : (float)c;
    }
    default: return NAN;
  }
}

/* An integer of any integer dtype, int64 and uint64 included, as sign and
 * magnitude. */
typedef struct Wide {
  bool neg;
  uint64_t mag;
} Wide;

static Wide wide_s(int64_t v) {
  Wide w = {v < 0, v < 0 ? 0 - (uint64_t)v : (uint64_t)v};
  return w;
}

static Wide wide_u(uint64_t v) {
  Wide w = {false, v};
  return w;
}

/* Element i of an integer buffer of dtype `t` (packed for 4-bit dtypes). */
static Wide read_wide(HurrayDType t, const uint8_t *p, uint64_t i) {
  switch (t) {
    case HURRAY_DTYPE_INT8: return wide_s((int8_t)p[i]);
    case HURRAY_DTYPE_UINT8:
    case HURRAY_DTYPE_BOOL: return wide_u(p[i]);
    case HURRAY_DTYPE_INT16: {
      int16_t v;
      memcpy(&v, p + 2 * i, 2);
      return wide_s(v);
    }
    case HURRAY_DTYPE_UINT16: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      return wide_u(v);
    }
    case HURRAY_DTYPE_INT32: {
      int32_t v;
      memcpy(&v, p + 4 * i, 4);
      return wide_s(v);
    }
    case HURRAY_DTYPE_UINT32: {
      uint32_t v;
      memcpy(&v, p + 4 * i, 4);
      return wide_u(v);
    }
    case HURRAY_DTYPE_INT64: {
      int64_t v;
      memcpy(&v, p + 8 * i, 8);
      return wide_s(v);
    }
    case HURRAY_DTYPE_UINT64: {
      uint64_t v;
      memcpy(&v, p + 8 * i, 8);
      return wide_u(v);
    }
    case HURRAY_DTYPE_INT4:
    case HURRAY_DTYPE_UINT4: {
      unsigned c = (p[i / 2] >> (4 * (i & 1u))) & 15u;
      return t == HURRAY_DTYPE_INT4 ? wide_s((int)c - ((c & 8u) ? 16 : 0)) : wide_u(c);
    }
    default: return wide_u(0);
  }
}

/* The magnitude high * 2^64 + m rounded once to binary32, to nearest with
 * ties to even. Rounded here in integers rather than by a conversion of a
 * 64-bit integer, which some environments (valgrind's emulation among
 * them) perform through binary64, rounding twice. */
static float magnitude_f32(uint64_t m, bool high) {
  if (!high && m < ((uint64_t)1 << 24)) return (float)m;
  unsigned bits = high ? 65u : 64u - (unsigned)__builtin_clzll(m);
  unsigned shift = bits - 24u; /* 1..41 */
  uint64_t q = (m >> shift) | (high ? (uint64_t)1 << (64u - shift) : 0);
  uint64_t rest = m & (((uint64_t)1 << shift) - 1), half = (uint64_t)1 << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) q++;
  return ldexpf((float)q, (int)shift); /* q <= 2^24: exact, and so is the scaling */
}

static bool is_integer_code(HurrayDType t) {
  switch (t) {
    case HURRAY_DTYPE_INT8:
    case HURRAY_DTYPE_UINT8:
    case HURRAY_DTYPE_INT16:
    case HURRAY_DTYPE_UINT16:
    case HURRAY_DTYPE_INT32:
    case HURRAY_DTYPE_UINT32:
    case HURRAY_DTYPE_INT64:
    case HURRAY_DTYPE_UINT64:
    case HURRAY_DTYPE_INT4:
    case HURRAY_DTYPE_UINT4: return true;
    default: return false;
  }
}

static float wide_diff(Wide a, Wide b) {
  bool bneg = !b.neg; /* a - b = a + (-b) */
  float m;
  bool neg;
  if (b.mag == 0 || a.neg == bneg) {
    uint64_t sum = a.mag + b.mag;
    m = magnitude_f32(sum, sum < a.mag);
    neg = a.neg;
  } else if (a.mag >= b.mag) {
    m = magnitude_f32(a.mag - b.mag, false);
    neg = a.neg;
  } else {
    m = magnitude_f32(b.mag - a.mag, false);
    neg = bneg;
  }
  if (m == 0.0f) return 0.0f;
  return neg ? -m : m;
}

typedef struct Job {
  HurrayQuantPlan plan;
  HurrayDType code_dtype;
  unsigned code_bits;
  const uint8_t *codes;
  HurrayDecodeTable dt;
  const HurrayQuantKernels *kernels;
  float *scale; /* per group (NULL when `staged`) */
  float *zp;    /* per group (NULL when `staged`) */
  /* The block walk reads scales and zero points a few hundred groups at a
   * time into the stack instead (read_groups): a tensor's worth of floats
   * would be written and read back once more per call, 8 bytes a block. */
  bool staged;
  const uint8_t *scale_src;
  HurrayDType scale_dtype;
  const uint8_t *zp_src; /* NULL: every group's zero point is zp_const */
  HurrayDType zp_dtype;
  float zp_const;
  Wide *zpw; /* per group, on the exact path only (NULL otherwise) */
  HurrayDType out_dtype;
  void *out;
  unsigned out_item;
  unsigned parts;
} Job;

static void decode_floats(float *v, uint64_t n, const float *scale, const float *zp, unsigned step,
                          float *out) {
  for (uint64_t k = 0; k < n; k++) {
    uint64_t g = step ? k : 0;
    out[k] = (v[k] - zp[g]) * scale[g];
  }
}

static void narrow(HurrayDType dtype, const float *in, uint64_t n, uint16_t *out) {
  if (dtype == HURRAY_DTYPE_FLOAT16) {
    for (uint64_t k = 0; k < n; k++) out[k] = hurray__f32_to_f16(in[k]);
  } else {
    for (uint64_t k = 0; k < n; k++) out[k] = hurray__f32_to_bf16(in[k]);
  }
}

static void *out_at(const Job *j, uint64_t at) { return (uint8_t *)j->out + at * j->out_item; }

/* Decodes flat elements [at, at + n) whose groups follow `seg` rules, from
 * group g0 on; n is at most STAGE. */
static void decode_piece(Job *j, uint64_t at, uint64_t n, uint64_t g0, unsigned step,
                         uint8_t *cstage, float *fstage) {
  const float *scale = j->scale + g0, *zp = j->zp + g0;
  if (j->zpw == NULL && j->code_bits <= 8) {
    if (step == 0) {
      j->kernels->decode(&j->dt, j->codes, at, n, 0, 0, scale, zp, j->out_dtype, out_at(j, at));
    } else {
      j->kernels->decode_each(&j->dt, j->codes, at, n, scale, zp, j->out_dtype, out_at(j, at));
    }
    return;
  }
  bool f32 = j->out_dtype == HURRAY_DTYPE_FLOAT32;
  float *dst = f32 ? (float *)j->out + at : fstage;
  if (j->zpw != NULL) {
    const Wide *zpw = j->zpw + g0;
    for (uint64_t k = 0; k < n; k++) {
      uint64_t g = step ? k : 0;
      dst[k] = wide_diff(read_wide(j->code_dtype, j->codes, at + k), zpw[g]) * scale[g];
    }
  } else {
    float *v = (float *)(void *)cstage;
    for (uint64_t k = 0; k < n; k++) v[k] = read_float(j->code_dtype, j->codes, at + k);
    decode_floats(v, n, scale, zp, step, dst);
  }
  if (!f32) narrow(j->out_dtype, fstage, n, (uint16_t *)j->out + at);
}

/* Groups [g, g + n) of a buffer of dtype `t` as floats (read_float, with
 * the dtype's switch outside the loop for the usual scale dtypes). */
static void read_floats(HurrayDType t, const uint8_t *p, uint64_t g, uint64_t n, float *out) {
  switch (t) {
    case HURRAY_DTYPE_FLOAT8_E8M0FNU:
      for (uint64_t i = 0; i < n; i++) out[i] = hurray__e8m0_to_f32(p[g + i]);
      return;
    case HURRAY_DTYPE_FLOAT32: memcpy(out, p + 4 * g, (size_t)n * 4); return;
    default:
      for (uint64_t i = 0; i < n; i++) out[i] = read_float(t, p, g + i);
      return;
  }
}

#define GROUP_STAGE 256u

/* Blocks along a contiguous axis tile the flat range, so a part is one run
 * of elements: hand the kernel a row at a time (at most GROUP_STAGE groups
 * when staged), and it walks the blocks inside it without a division per
 * 32-element block. */
static void decode_blocks(Job *j, uint64_t s0, uint64_t s1) {
  const HurrayQuantPlan *p = &j->plan;
  uint64_t f = hurray__quant_segment(p, s0).start;
  HurraySegment last = hurray__quant_segment(p, s1 - 1);
  uint64_t end = last.start + last.len;
  uint64_t o = f / p->along, a = f % p->along;
  float sc[GROUP_STAGE], zz[GROUP_STAGE];
  /* elements in GROUP_STAGE whole blocks, or "no limit" if that overflows */
  uint64_t span = p->block <= UINT64_MAX / GROUP_STAGE ? p->block * GROUP_STAGE : UINT64_MAX;
  while (f < end) {
    uint64_t n = p->along - a < end - f ? p->along - a : end - f;
    uint64_t g = o * p->nblocks + a / p->block, head = a % p->block;
    if (!j->staged) {
      j->kernels->decode(&j->dt, j->codes, f, n, p->block, head, j->scale + g, j->zp + g,
                         j->out_dtype, out_at(j, f));
      f += n;
    } else {
      while (n > 0) {
        /* up to the end of the GROUP_STAGE-th block from here */
        uint64_t m = span - head < n ? span - head : n;
        uint64_t ng = (head + m - 1) / p->block + 1;
        read_floats(j->scale_dtype, j->scale_src, g, ng, sc);
        if (j->zp_src) {
          read_floats(j->zp_dtype, j->zp_src, g, ng, zz);
        } else {
          for (uint64_t i = 0; i < ng; i++) zz[i] = j->zp_const;
        }
        j->kernels->decode(&j->dt, j->codes, f, m, p->block, head, sc, zz, j->out_dtype,
                           out_at(j, f));
        f += m;
        n -= m;
        g += ng;
        head = 0;
      }
    }
    a = 0;
    o++;
  }
}

static void decode_part(void *ctx, unsigned part) {
  Job *j = ctx;
  const HurrayQuantPlan *p = &j->plan;
  uint64_t s0 = p->segments / j->parts * part;
  uint64_t s1 = part + 1 == j->parts ? p->segments : p->segments / j->parts * (part + 1);
  /* 4-byte aligned: the wide-code path stages floats in it */
  _Alignas(4) uint8_t cstage[STAGE * sizeof(float)];
  float fstage[STAGE];
  if (s0 >= s1) return;
  if (p->walk == HURRAY_WALK_BLOCKS && j->code_bits <= 8 && j->zpw == NULL) {
    decode_blocks(j, s0, s1);
    return;
  }
  for (uint64_t u = s0; u < s1; u++) {
    HurraySegment seg = hurray__quant_segment(p, u);
    for (uint64_t done = 0; done < seg.len;) {
      uint64_t n = seg.len - done < STAGE ? seg.len - done : STAGE;
      decode_piece(j, seg.start + done, n, seg.g0 + (seg.step ? done : 0), seg.step, cstage,
                   fstage);
      done += n;
    }
  }
}

static const uint8_t *buffer_bytes(const HurrayBufferList *list, uint32_t index) {
  return hurray_buffer_data(hurray_buffer_list_get(list, index));
}

HurrayStatus hurray_dequantize(const HurrayDescriptor *d, const HurrayBufferList *list,
                               HurrayDType out_dtype, uint32_t threads, void *out,
                               uint64_t out_size, HurrayError *error) {
  return hurray_dequantize_with(d, list, out_dtype, threads, NULL, out, out_size, error);
}

/* Arguments, kind, layout and output size; `need` is the output's bytes. */
static HurrayStatus check_request(const HurrayDescriptor *d, const HurrayBufferList *list,
                                  HurrayDType out_dtype, const void *out, uint64_t out_size,
                                  const HurrayOutputLimits *limits, uint64_t *numel,
                                  uint64_t *need, HurrayError *error) {
  if (d == NULL || list == NULL || (out == NULL && out_size > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "d, list and out must not be NULL");
  }
  if (out_dtype != HURRAY_DTYPE_FLOAT32 && out_dtype != HURRAY_DTYPE_FLOAT16 &&
      out_dtype != HURRAY_DTYPE_BFLOAT16) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "dequantize writes float32, float16 or bfloat16, not %s",
                        hurray_dtype_name(out_dtype) ? hurray_dtype_name(out_dtype) : "?");
  }
  HURRAY_RETURN_NOT_OK(hurray_validate_buffer_placement(d, list, error));
  HURRAY_RETURN_NOT_OK(hurray__require_host_ready(d, "dequantize", error));
  HurrayLayoutKind layout = hurray_descriptor_layout_kind(d);
  if (hurray_descriptor_quant_kind(d) == HURRAY_QUANT_NONE) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED, "the tensor is not quantized");
  }
  if (layout != HURRAY_LAYOUT_DENSE && layout != HURRAY_LAYOUT_PAGED) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "dequantize handles dense and paged layouts; materialise sparse "
                        "tensors first");
  }
  HURRAY_RETURN_NOT_OK(hurray_descriptor_numel(d, numel, error));
  unsigned out_item = out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  if (!hurray__mul_u64(*numel, out_item, need)) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the output size does not fit in 64 bits");
  }
  HURRAY_RETURN_NOT_OK(hurray_check_output_size(d, *need, limits, error));
  if (out_size < *need) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "out holds %llu bytes; the tensor needs %llu",
                        (unsigned long long)out_size, (unsigned long long)*need);
  }
  return hurray__check_output_apart(list, out, *need, error);
}

/* Codes: straight from the buffer when dense and contiguous, otherwise
 * gathered into *dense (strided and paged tensors have byte-sized codes). */
static HurrayStatus locate_codes(Job *j, const HurrayDescriptor *d, const HurrayBufferList *list,
                                 uint64_t numel, uint8_t **dense, HurrayError *error) {
  if (hurray_descriptor_layout_kind(d) == HURRAY_LAYOUT_DENSE &&
      hurray_descriptor_strides(d) == NULL) {
    j->codes = buffer_bytes(list, hurray_descriptor_data_buffer(d)) +
               hurray_descriptor_byte_offset(d);
    return HURRAY_OK;
  }
  uint64_t bytes;
  if (hurray_dtype_storage_bytes(j->code_dtype, numel, &bytes) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the code size does not fit in 64 bits");
  }
  *dense = hurray__quant_alloc(bytes);
  if (*dense == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for the codes");
  /* The codes are never larger than the output just checked. */
  static const HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED;
  HURRAY_RETURN_NOT_OK(hurray_tensor_to_dense_with(d, list, &unlimited, *dense, bytes, error));
  j->codes = *dense;
  return HURRAY_OK;
}

static bool same_bits(float a, float b) { return hurray__f32_bits(a) == hurray__f32_bits(b); }

/* The value table, and whether it is a plain integer conversion the
 * kernels can compute instead of looking up. */
static void fill_table(Job *j, HurrayQuantKind kind, HurrayMxElement element) {
  HurrayDecodeTable *t = &j->dt;
  for (unsigned c = 0; c < 256; c++) t->tab[c] = code_value(j->code_dtype, kind, element, c);
  t->bits = j->code_bits;
  t->map = HURRAY_MAP_TABLE;
  t->unit = 1.0f;
  hurray__decode_table_planes(t);
  if (j->code_bits != 8) return;
  static const float UNITS[2] = {1.0f, 1.0f / 64.0f};
  for (unsigned u = 0; u < 2 && t->map == HURRAY_MAP_TABLE; u++) {
    bool s8 = true, u8 = true;
    for (unsigned c = 0; c < 256; c++) {
      s8 = s8 && same_bits(t->tab[c], (float)(int8_t)c * UNITS[u]);
      u8 = u8 && same_bits(t->tab[c], (float)c * UNITS[u]);
    }
    t->map = s8 ? HURRAY_MAP_INT8 : u8 ? HURRAY_MAP_UINT8 : HURRAY_MAP_TABLE;
    t->unit = UNITS[u];
  }
  if (t->map == HURRAY_MAP_TABLE) t->unit = 1.0f;
  static const HurrayCodeMap FP8[2] = {HURRAY_MAP_E4M3, HURRAY_MAP_E5M2};
  for (unsigned f = 0; f < 2 && t->map == HURRAY_MAP_TABLE; f++) {
    bool same = true;
    for (unsigned c = 0; c < 256 && same; c++) {
      same = hurray__f32_bits(t->tab[c]) == hurray__fp8_bits(FP8[f], c);
    }
    if (same) t->map = FP8[f];
  }
}

static HurrayStatus plan_walk(Job *j, const HurrayDescriptor *d, HurrayQuantKind kind,
                              uint64_t numel, HurrayError *error) {
  uint32_t rank = hurray_descriptor_rank(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  uint32_t axis = hurray_descriptor_quant_axis(d);
  uint64_t block = hurray_descriptor_quant_block_size(d);
  switch (kind) {
    case HURRAY_QUANT_PER_TENSOR_AFFINE:
      return hurray__quant_plan(&j->plan, rank, shape, 0, 0, true, error);
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
      return hurray__quant_plan(&j->plan, rank, shape, axis, 0, false, error);
    case HURRAY_QUANT_NF4: return hurray__quant_plan(&j->plan, 1, &numel, 0, block, false, error);
    case HURRAY_QUANT_MX:
      return hurray__quant_plan(&j->plan, rank, shape, axis, HURRAY_MX_BLOCK_SIZE, false, error);
    default: return hurray__quant_plan(&j->plan, rank, shape, axis, block, false, error);
  }
}

static bool is_affine(HurrayQuantKind kind) {
  return kind == HURRAY_QUANT_PER_TENSOR_AFFINE || kind == HURRAY_QUANT_PER_CHANNEL_AFFINE ||
         kind == HURRAY_QUANT_BLOCK_AFFINE;
}

/* Whether the exact path is needed: integer codes wider than 8 bits, or a
 * zero point that binary32 does not hold exactly (see the top of the file). */
static bool needs_exact(const Job *j, const HurrayDescriptor *d, const HurrayBufferList *list,
                        HurrayQuantKind kind) {
  if (!is_affine(kind)) return false;
  if (is_integer_code(j->code_dtype) && j->code_bits > 8) return true;
  uint32_t zb = hurray_descriptor_quant_zero_point_buffer(d);
  if (kind == HURRAY_QUANT_PER_TENSOR_AFFINE || zb == HURRAY_NO_BUFFER) {
    int64_t z = hurray_descriptor_quant_zero_point(d);
    return z > (1 << 24) || z < -(1 << 24);
  }
  const uint8_t *zps = buffer_bytes(list, zb);
  HurrayDType zp_dtype = hurray_descriptor_quant_zero_point_dtype(d);
  for (uint64_t g = 0; g < j->plan.groups; g++) {
    if (read_wide(zp_dtype, zps, g).mag > (1u << 24)) return true;
  }
  return false;
}

static void load_wide_zero_points(Job *j, const HurrayDescriptor *d, const HurrayBufferList *list,
                                  HurrayQuantKind kind, uint64_t groups) {
  uint32_t zb = hurray_descriptor_quant_zero_point_buffer(d);
  if (kind == HURRAY_QUANT_PER_TENSOR_AFFINE || zb == HURRAY_NO_BUFFER) {
    Wide z = wide_s(hurray_descriptor_quant_zero_point(d));
    for (uint64_t g = 0; g < groups; g++) j->zpw[g] = z;
  } else {
    const uint8_t *zps = buffer_bytes(list, zb);
    HurrayDType zp_dtype = hurray_descriptor_quant_zero_point_dtype(d);
    for (uint64_t g = 0; g < j->plan.groups; g++) j->zpw[g] = read_wide(zp_dtype, zps, g);
  }
}

static void load_scales(Job *j, const HurrayDescriptor *d, const HurrayBufferList *list,
                        HurrayQuantKind kind, uint64_t groups) {
  if (kind == HURRAY_QUANT_PER_TENSOR_AFFINE) {
    j->scale[0] = (float)hurray_descriptor_quant_scale(d);
    j->zp[0] = (float)hurray_descriptor_quant_zero_point(d);
    return;
  }
  /* placement validation proved the scale and zero-point buffers hold
   * exactly `groups` entries */
  bool affine = is_affine(kind);
  const uint8_t *scales = buffer_bytes(list, hurray_descriptor_quant_scale_buffer(d));
  HurrayDType scale_dtype = hurray_descriptor_quant_scale_dtype(d);
  for (uint64_t g = 0; g < j->plan.groups; g++) j->scale[g] = read_float(scale_dtype, scales, g);
  uint32_t zp_buffer = hurray_descriptor_quant_zero_point_buffer(d);
  if (affine && zp_buffer != HURRAY_NO_BUFFER) {
    const uint8_t *zps = buffer_bytes(list, zp_buffer);
    HurrayDType zp_dtype = hurray_descriptor_quant_zero_point_dtype(d);
    for (uint64_t g = 0; g < j->plan.groups; g++) j->zp[g] = read_float(zp_dtype, zps, g);
  } else {
    float z = affine ? (float)hurray_descriptor_quant_zero_point(d) : 0.0f;
    for (uint64_t g = 0; g < groups; g++) j->zp[g] = z;
  }
}

/* Scales and zero points per group, as floats (and as wide integers on the
 * exact path). */
static HurrayStatus load_groups(Job *j, const HurrayDescriptor *d, const HurrayBufferList *list,
                                HurrayQuantKind kind, HurrayError *error) {
  uint64_t groups = j->plan.groups ? j->plan.groups : 1;
  if (groups > SIZE_MAX / sizeof(Wide)) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "too many scales");
  }
  bool affine = is_affine(kind), exact = needs_exact(j, d, list, kind);
  if (j->plan.walk == HURRAY_WALK_BLOCKS && j->code_bits <= 8 &&
      kind != HURRAY_QUANT_PER_TENSOR_AFFINE && !exact) {
    /* the same values load_scales would store, read where they are used */
    j->staged = true;
    j->scale_src = buffer_bytes(list, hurray_descriptor_quant_scale_buffer(d));
    j->scale_dtype = hurray_descriptor_quant_scale_dtype(d);
    uint32_t zb = hurray_descriptor_quant_zero_point_buffer(d);
    if (affine && zb != HURRAY_NO_BUFFER) {
      j->zp_src = buffer_bytes(list, zb);
      j->zp_dtype = hurray_descriptor_quant_zero_point_dtype(d);
    }
    j->zp_const = affine ? (float)hurray_descriptor_quant_zero_point(d) : 0.0f;
    return HURRAY_OK;
  }
  j->scale = malloc(groups * sizeof(float));
  j->zp = malloc(groups * sizeof(float));
  if (j->scale == NULL || j->zp == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for %llu scales",
                        (unsigned long long)groups);
  }
  if (exact) {
    j->zpw = malloc(groups * sizeof *j->zpw);
    if (j->zpw == NULL) {
      return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for %llu zero points",
                          (unsigned long long)groups);
    }
    load_wide_zero_points(j, d, list, kind, groups);
  }
  load_scales(j, d, list, kind, groups);
  return HURRAY_OK;
}

/* `out` at an address its element type cannot be stored at (a caller's
 * byte buffer): decode into aligned memory, then copy the bytes over. */
static HurrayStatus dequantize_staged(const HurrayDescriptor *d, const HurrayBufferList *list,
                                      HurrayDType out_dtype, uint32_t threads,
                                      const HurrayOutputLimits *limits, void *out, uint64_t need,
                                      HurrayError *error) {
  void *staged = hurray__quant_alloc(need);
  if (staged == NULL)
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory to stage the output");
  HurrayStatus st = hurray_dequantize_with(d, list, out_dtype, threads, limits, staged, need,
                                           error);
  if (st == HURRAY_OK) memcpy(out, staged, (size_t)need);
  hurray__quant_free(staged, NULL);
  return st;
}

HurrayStatus hurray_dequantize_with(const HurrayDescriptor *d, const HurrayBufferList *list,
                                    HurrayDType out_dtype, uint32_t threads,
                                    const HurrayOutputLimits *limits, void *out, uint64_t out_size,
                                    HurrayError *error) {
  uint64_t numel = 0, need = 0;
  HURRAY_RETURN_NOT_OK(
      check_request(d, list, out_dtype, out, out_size, limits, &numel, &need, error));
  unsigned out_item = out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  if (need > 0 && (uintptr_t)out % out_item != 0)
    return dequantize_staged(d, list, out_dtype, threads, limits, out, need, error);
  HurrayQuantKind kind = hurray_descriptor_quant_kind(d);
  if (kind == HURRAY_QUANT_BLOCK_CODED) {
    return hurray__block_coded_dequantize(d, list, out_dtype, out, numel, threads, error);
  }
  if (hurray__packed_applies(d)) {
    return hurray__packed_dequantize(d, list, out_dtype, out, numel, threads, error);
  }
  Job *j = calloc(1, sizeof *j);
  if (j == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory");
  uint8_t *dense = NULL;
  j->code_dtype = hurray_descriptor_dtype(d);
  j->code_bits = hurray_dtype_bits(j->code_dtype);
  j->out_dtype = out_dtype;
  j->out = out;
  j->out_item = out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  j->kernels = hurray__quant_kernels();
  HurrayStatus st = locate_codes(j, d, list, numel, &dense, error);
  if (st == HURRAY_OK && j->code_bits <= 8) {
    fill_table(j, kind, hurray_descriptor_quant_mx_element(d));
  }
  if (st == HURRAY_OK) st = plan_walk(j, d, kind, numel, error);
  if (st == HURRAY_OK) st = load_groups(j, d, list, kind, error);
  if (st == HURRAY_OK) {
    j->parts = hurray__quant_threads(threads, need);
    if (j->plan.segments < j->parts) j->parts = j->plan.segments ? (unsigned)j->plan.segments : 1;
    hurray__parallel_run(j->parts, decode_part, j);
  }
  free(j->scale);
  free(j->zp);
  free(j->zpw);
  free(dense);
  free(j);
  return st;
}
