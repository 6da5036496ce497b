/*
 * The generic dequantization kernel for the packed and two-level fields of
 * ADR-0024 (docs/spec/quantization.md §5.6): storage axes, codes and zero
 * points packed in words with a lane order, zero-point offsets, 2-D
 * blocks, group indices, codebooks, scale codebooks and super scales.
 *
 * Each logical dimension gets a code stride (in words along the packed
 * dimension) and a scale stride, and a rule for its group (itself, a block,
 * or the group index, which is checked once before anything is written).
 * A row's bases come from its multi-index; along the last dimension each
 * element adds its own steps. Memory beyond the scales is O(1), whatever
 * the shape. Scales are formed once (codebook, super scale, offset) and
 * zero points unpacked once, so the loop is: fetch code, one exact integer
 * difference or one table value, one multiplication.
 *
 * That generic loop is the reference; the specialised runs further down
 * (chosen once per call, HURRAY_PACKED_GENERIC=1 keeps the generic loop)
 * compute the same bytes a word and a scale group at a time.
 *
 * Tensors without any of these fields never come here: the SIMD kernels of
 * dequantize.c keep them.
 */
#include "packed.h"

#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "elements.h"
#include "plan.h"
#include "simd.h"

/* How a logical dimension picks its scale group. */
enum { GROUP_SELF = 0, GROUP_BLOCK = 1, GROUP_INDEX = 2 };

typedef struct PackedJob {
  uint32_t rank; /* of the logical view (NF4: 1) */
  uint64_t shape[HURRAY_MAX_RANK];
  uint64_t cstride[HURRAY_MAX_RANK]; /* words (or elements) per step of logical dim k */
  uint64_t sstride[HURRAY_MAX_RANK]; /* scales per group step of logical dim k */
  uint8_t group[HURRAY_MAX_RANK];    /* GROUP_* of dim k */
  uint64_t block[HURRAY_MAX_RANK];   /* its block size when GROUP_BLOCK */
  uint32_t *gidx;      /* group of each position, for GROUP_INDEX: a checked private copy */
  uint32_t packed_dim; /* logical dim the lanes run along; rank when unpacked */
  uint32_t lanes;
  uint8_t lane_of[32]; /* lane holding element e of a group */
  unsigned word_bytes; /* 0: ADR-0012 elements */
  unsigned bits;
  bool is_signed;
  bool use_table; /* value = table[code] * scale, else (code - zp) * scale */
  float table[256];
  const uint8_t *codes;
  float *scale;  /* formed, per flat scale index */
  int64_t *zero; /* zero + offset per flat scale index; NULL when 0 */
  uint64_t rows; /* numel / shape[rank - 1] */
  HurrayDType out_dtype;
  void *out;
  unsigned parts;
  bool split_cols;      /* fewer rows than parts (NF4's one flat row): parts split columns */
  bool fast;            /* the specialised runs below, unless HURRAY_PACKED_GENERIC=1 */
  bool small_diff;      /* every code - zero is below 2^24 in magnitude: int32 and (float) exact */
  uint8_t shift_of[32]; /* lane_of[e] * bits */
  uint8_t direct;       /* DIRECT_*: table codes decoded straight from their bytes */
  bool avx2;            /* the AVX2 loops below (the process's SIMD level, simd.h) */
  bool lane_rows;       /* codes one lane per row (AWQ): lane_tile below */
  int32_t *gidx16;      /* gidx[t] * TILE_ROWS, for the row tile's own scale tables, or NULL */
  bool fused;           /* fused_words_avx2 applies (choose_path) */
  uint64_t ngroups;     /* groups along the group-indexed dimension */
  uint32_t sign;        /* 1 << (bits - 1) for signed codes, else 0 (choose_path) */
  float pair[256][2];   /* DIRECT_NIBBLES: the values of a byte's two codes, in order */
} PackedJob;

/* HURRAY_PACKED_GENERIC=1: the reference loops only (tests compare them
 * with the rest). */
static bool packed_generic(void) {
  const char *v = getenv("HURRAY_PACKED_GENERIC");
  return v != NULL && v[0] == '1';
}

static const uint8_t *buffer_bytes(const HurrayBufferList *list, uint32_t index) {
  return hurray_buffer_data(hurray_buffer_list_get(list, index));
}

bool hurray__packed_applies(const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  if (q->kind != HURRAY_QUANT_PER_CHANNEL_AFFINE && q->kind != HURRAY_QUANT_BLOCK_AFFINE &&
      q->kind != HURRAY_QUANT_NF4) {
    return false;
  }
  /* Float8 scales alone are the general decoder's: it reads them as it
   * reads any scale, and it also takes strides and codes or zero points
   * of 64 bits, which this decoder (codes held in 32 bits, storage
   * row-major) cannot. */
  return hurray__quant_has_packed(q);
}

/* Little-endian unsigned integer of `bytes` bytes. */
static uint64_t load_le(const uint8_t *p, unsigned bytes) {
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Element `i` of `bits` bits of an ADR-0012 array (bits below 8 packed
 * low-first in a bit stream, wider ones little-endian bytes). */
static uint64_t load_element(const uint8_t *p, uint64_t i, unsigned bits) {
  if (bits >= 8) return load_le(p + i * (bits / 8), bits / 8);
  uint64_t bit = i * bits;
  unsigned v = p[bit >> 3];
  if ((bit & 7u) + bits > 8u) v |= (unsigned)p[(bit >> 3) + 1] << 8;
  return (v >> (bit & 7u)) & ((1u << bits) - 1u);
}

static int64_t sign_extend(uint64_t v, unsigned bits) {
  uint64_t sign = (uint64_t)1 << (bits - 1);
  return (int64_t)((v ^ sign) - sign);
}

/* Exact integer to binary32, rounded once to nearest even (the 64-bit
 * conversion of some targets rounds through binary64 first). */
static float i64_to_f32(int64_t v) {
  uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  float f;
  if (m < ((uint64_t)1 << 24)) {
    f = (float)m;
  } else {
    unsigned shift = 40u - (unsigned)__builtin_clzll(m); /* keeps 24 bits */
    uint64_t q = m >> shift, rest = m & (((uint64_t)1 << shift) - 1);
    uint64_t half = (uint64_t)1 << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) q++;
    f = ldexpf((float)q, (int)shift);
  }
  return v < 0 ? -f : f;
}

/* A scale or super scale as binary32. */
static float read_scale(HurrayDType t, const uint8_t *p, uint64_t i) {
  switch (t) {
    case HURRAY_DTYPE_FLOAT32: return hurray__f32_from_bits((uint32_t)load_le(p + 4 * i, 4));
    case HURRAY_DTYPE_FLOAT64: {
      uint64_t bits = load_le(p + 8 * i, 8);
      double v;
      memcpy(&v, &bits, sizeof v);
      return (float)v;
    }
    case HURRAY_DTYPE_FLOAT16: return hurray__f16_to_f32((uint16_t)load_le(p + 2 * i, 2));
    case HURRAY_DTYPE_BFLOAT16: return hurray__bf16_to_f32((uint16_t)load_le(p + 2 * i, 2));
    case HURRAY_DTYPE_FLOAT8_E8M0FNU: return hurray__e8m0_to_f32(p[i]);
    default: {
      const HurrayMinifloat *mf = hurray__minifloat_of(t);
      return mf ? hurray__minifloat_decode(mf, p[i]) : NAN;
    }
  }
}

/* The storage-order shape of an array of `rank` logical dims, and the
 * row-major strides of that storage (in elements, or in words along a
 * packed storage axis of `lanes`). stride_of[k] is the stride of logical
 * dim k. */
static void storage_strides(uint32_t rank, const uint64_t *logical, const uint8_t *axes,
                            uint32_t packed_axis, uint32_t lanes, uint64_t *stride_of) {
  uint64_t stride = 1;
  for (uint32_t m = rank; m-- > 0;) {
    uint32_t k = axes ? axes[m] : m;
    stride_of[k] = stride;
    stride *= m == packed_axis ? logical[k] / lanes : logical[k];
  }
}

/* The strides of codes and scales per logical dimension, how each picks
 * its group, and the group index checked once (so the element loop cannot
 * meet an entry out of range). */
/* The `n` int32 entries of a group index, each checked to lie in [0,
 * groups), into `out` when it is not NULL. */
static HurrayStatus read_group_index(const uint8_t *entries, uint64_t n, uint64_t groups,
                                     uint32_t *out, HurrayError *error) {
  for (uint64_t i = 0; i < n; i++) {
    uint32_t raw = (uint32_t)load_le(entries + 4 * i, 4);
    int32_t v = (int32_t)raw;
    if (v < 0 || (uint64_t)v >= groups) {
      return hurray__fail(error, HURRAY_ERR_QUANT_GROUP_INDEX,
                          "quantization.group_index_buffer: entry %llu is %d, outside the %llu "
                          "groups [0, %llu)",
                          (unsigned long long)i, (int)v, (unsigned long long)groups,
                          (unsigned long long)groups);
    }
    if (out != NULL) out[i] = raw;
  }
  return HURRAY_OK;
}

static HurrayStatus plan_dims(PackedJob *j, const HurrayDescriptor *d,
                              const HurrayBufferList *list, HurrayError *error) {
  const HurrayQuant *q = &d->quant;
  const HurrayQuantStorage *qs = hurray__qs(q);
  bool nf4 = q->kind == HURRAY_QUANT_NF4;
  bool block = q->kind == HURRAY_QUANT_BLOCK_AFFINE;
  const uint8_t *axes = qs->has_storage_axes && !nf4 ? qs->storage_axes : NULL;
  uint32_t packed_axis = HURRAY_MAX_RANK;
  j->lanes = 1;
  j->packed_dim = j->rank;
  if (qs->code_packing.word_bits != 0) {
    packed_axis = qs->code_packing.axis;
    j->lanes = hurray__packing_lanes(&qs->code_packing, d->dtype);
    j->word_bytes = qs->code_packing.word_bits / 8u;
    j->packed_dim = axes ? axes[packed_axis] : packed_axis;
    for (uint32_t l = 0; l < j->lanes; l++) j->lane_of[qs->code_packing.order[l]] = (uint8_t)l;
  }
  storage_strides(j->rank, j->shape, axes, packed_axis, j->lanes, j->cstride);
  uint64_t slog[HURRAY_MAX_RANK];
  for (uint32_t k = 0; k < j->rank; k++) {
    slog[k] = j->shape[k];
    if (nf4 || (block && k == q->axis)) {
      j->group[k] = GROUP_BLOCK;
      j->block[k] = q->block_size;
    } else if (block && q->block_size2 != 0 && k == q->axis2) {
      j->group[k] = GROUP_BLOCK;
      j->block[k] = q->block_size2;
    }
    if (j->group[k] == GROUP_BLOCK) slog[k] = hurray__ceil_div_u64(j->shape[k], j->block[k]);
  }
  if (q->kind == HURRAY_QUANT_PER_CHANNEL_AFFINE) {
    j->sstride[q->axis] = 1; /* one scale per index along the axis, nothing else */
  } else {
    storage_strides(j->rank, slog, axes, HURRAY_MAX_RANK, 1, j->sstride);
  }
  if (q->group_index_buffer == HURRAY_NO_BUFFER) return HURRAY_OK;
  /* Copied, then checked: the caller's buffer may change under the
   * kernels (another thread), and an entry read again unchecked would
   * index the scales anywhere. */
  j->gidx = malloc(j->shape[q->axis] ? (size_t)j->shape[q->axis] * sizeof *j->gidx : 1);
  if (j->gidx == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  j->group[q->axis] = GROUP_INDEX;
  j->ngroups = slog[q->axis];
  return read_group_index(buffer_bytes(list, q->group_index_buffer), j->shape[q->axis],
                          slog[q->axis], j->gidx, error);
}

/* What position i of logical dim k adds to the code's word (or element)
 * index and to the scale index. */
static inline uint64_t code_step(const PackedJob *j, uint32_t k, uint64_t i) {
  return (k == j->packed_dim ? i / j->lanes : i) * j->cstride[k];
}

static inline uint64_t scale_step(const PackedJob *j, uint32_t k, uint64_t i) {
  uint64_t g = i;
  if (j->group[k] == GROUP_BLOCK) {
    g = i / j->block[k];
  } else if (j->group[k] == GROUP_INDEX) {
    g = j->gidx[i]; /* checked in range by plan_dims */
  }
  return g * j->sstride[k];
}

/* Zero point of the scale at flat storage index `s`, from a buffer that
 * may be packed along an axis of the scale array (storage order). */
static int64_t zero_at(const HurrayQuant *q, const uint8_t *zps, const uint64_t *sshape,
                       uint32_t srank, uint64_t s) {
  const HurrayQuantPacking *p = &hurray__qs(q)->zero_point_packing;
  HurrayDType t = q->zero_point_dtype;
  uint32_t bits = hurray_dtype_bits(t);
  bool is_signed = t == HURRAY_DTYPE_INT4 || t == HURRAY_DTYPE_INT8 || t == HURRAY_DTYPE_INT16 ||
                   t == HURRAY_DTYPE_INT32;
  uint64_t v;
  if (p->word_bits == 0) {
    v = load_element(zps, s, bits);
  } else {
    uint32_t lanes = hurray__packing_lanes(p, t);
    uint64_t word = 0, stride = 1, rest = s, along = 0;
    for (uint32_t m = srank; m-- > 0;) {
      uint64_t pos = rest % sshape[m];
      rest /= sshape[m];
      if (m == p->axis) {
        along = pos;
        pos /= lanes;
      }
      word += pos * stride;
      stride *= m == p->axis ? sshape[m] / lanes : sshape[m];
    }
    uint32_t lane = 0;
    while (p->order[lane] != along % lanes) lane++;
    v = (load_le(zps + word * (p->word_bits / 8u), p->word_bits / 8u) >> (lane * bits)) &
        (((uint64_t)1 << bits) - 1);
  }
  return is_signed ? sign_extend(v, bits) : (int64_t)v;
}

/* Scales and zero points are formed in parts on the kernel's threads,
 * before the decode starts: NVFP4 has a scale per 16 elements, and forming
 * them on the calling thread first kept its dequantize from gaining from a
 * second thread. */
typedef struct ScaleForm {
  PackedJob *j;
  const HurrayQuant *q;
  const uint8_t *scales, *sup, *zps;
  uint64_t sshape[HURRAY_MAX_RANK];
  uint32_t srank;
  uint64_t n;
  unsigned parts;
  bool by_table; /* one byte per scale (FP8, E8M0, or a scale codebook's index) */
  bool generic;  /* HURRAY_PACKED_GENERIC=1: every scale and zero point as zero_at reads it */
  float table[256];
} ScaleForm;

/* Scales [s0, s1): v (through the table or read_scale), then the super
 * scale, then the offset, as the spec orders them (quantization.md §5.6). */
static void form_scale_range(const ScaleForm *f, uint64_t s0, uint64_t s1) {
  const HurrayQuant *q = f->q;
  float *dst = f->j->scale;
  if (!f->generic && !f->by_table && f->sup == NULL && q->scale_offset == 0.0) {
    /* plain scales (GPTQ's, AWQ's): one dtype test for the range, not one
     * call of read_scale per scale */
    if (q->scale_dtype == HURRAY_DTYPE_FLOAT16) {
      for (uint64_t s = s0; s < s1; s++) {
        dst[s] = hurray__f16_to_f32((uint16_t)load_le(f->scales + 2 * s, 2));
      }
      return;
    }
    if (q->scale_dtype == HURRAY_DTYPE_BFLOAT16) {
      for (uint64_t s = s0; s < s1; s++) {
        dst[s] = hurray__bf16_to_f32((uint16_t)load_le(f->scales + 2 * s, 2));
      }
      return;
    }
  }
  const float offset = (float)q->scale_offset;
  const uint64_t sb = q->super_block_size;
  uint64_t u_index = sb ? s0 / sb : 0, in_super = sb ? s0 % sb : 0;
  float u = f->sup != NULL ? read_scale(q->super_scale_dtype, f->sup, u_index) : 1.0f;
  for (uint64_t s = s0; s < s1; s++) {
    float v = f->by_table ? f->table[f->scales[s]] : read_scale(q->scale_dtype, f->scales, s);
    if (f->sup != NULL) {
      v = q->super_op == HURRAY_SUPER_DIVIDE ? v / u : v * u;
      /* the next super scale is read only if a scale of this range uses it */
      if (sb != 0 && ++in_super == sb && s + 1 < s1) {
        in_super = 0;
        u = read_scale(q->super_scale_dtype, f->sup, ++u_index);
      }
    }
    if (q->scale_offset != 0.0) v = v + offset;
    f->j->scale[s] = v;
  }
}

/* The word holding the zero point at multi-index idx (packed along `axis`
 * in words of `lanes`; wstride: words per step of each dim). */
static uint64_t zero_word(const uint64_t *idx, const uint64_t *wstride, uint32_t rank,
                          uint32_t axis, uint32_t lanes) {
  uint64_t word = 0;
  for (uint32_t m = 0; m < rank; m++) word += (m == axis ? idx[m] / lanes : idx[m]) * wstride[m];
  return word;
}

/* Zero points [s0, s1) of a buffer packed in words, as zero_at reads them,
 * with the multi-index carried from one scale to the next: zero_at divides
 * it out of each flat index, which took GPTQ a sixth of its dequantize. */
static void form_packed_zeros(const ScaleForm *f, uint64_t s0, uint64_t s1) {
  const HurrayQuant *q = f->q;
  const HurrayQuantPacking *p = &hurray__qs(q)->zero_point_packing;
  const HurrayDType t = q->zero_point_dtype;
  const uint32_t bits = hurray_dtype_bits(t), lanes = hurray__packing_lanes(p, t);
  const unsigned bytes = p->word_bits / 8u;
  const bool is_signed = t == HURRAY_DTYPE_INT4 || t == HURRAY_DTYPE_INT8 ||
                         t == HURRAY_DTYPE_INT16 || t == HURRAY_DTYPE_INT32;
  const uint32_t rank = f->srank, axis = p->axis, last = rank - 1;
  const uint64_t mask = ((uint64_t)1 << bits) - 1;
  unsigned shift[32]; /* of the element `along % lanes` along the axis */
  for (uint32_t lane = 0; lane < lanes; lane++) shift[p->order[lane]] = lane * bits;
  uint64_t wstride[HURRAY_MAX_RANK], idx[HURRAY_MAX_RANK], stride = 1, rest = s0;
  for (uint32_t m = rank; m-- > 0;) {
    wstride[m] = stride;
    stride *= m == axis ? f->sshape[m] / lanes : f->sshape[m];
    idx[m] = rest % f->sshape[m];
    rest /= f->sshape[m];
  }
  uint64_t word = zero_word(idx, wstride, rank, axis, lanes);
  for (uint64_t s = s0; s < s1; s++) {
    uint64_t v = (load_le(f->zps + word * bytes, bytes) >> shift[idx[axis] % lanes]) & mask;
    int64_t z = is_signed ? sign_extend(v, bits) : (int64_t)v;
    f->j->zero[s] = z + q->zero_point_offset; /* both within 2^32: exact */
    if (++idx[last] < f->sshape[last]) {      /* along the last dim: words of stride 1 */
      if (last != axis || idx[last] % lanes == 0) word++;
      continue;
    }
    idx[last] = 0; /* a carry: the word from the index again */
    for (uint32_t m = last; m-- > 0;) {
      if (++idx[m] < f->sshape[m]) break;
      idx[m] = 0;
    }
    word = zero_word(idx, wstride, rank, axis, lanes);
  }
}

static void form_scale_part(void *ctx, unsigned part) {
  const ScaleForm *f = ctx;
  uint64_t s0 = f->n / f->parts * part;
  uint64_t s1 = part + 1 == f->parts ? f->n : f->n / f->parts * (part + 1);
  form_scale_range(f, s0, s1);
  if (f->j->zero == NULL) return;
  const HurrayQuant *q = f->q;
  if (!f->generic && f->zps != NULL && hurray__qs(q)->zero_point_packing.word_bits != 0 &&
      s1 > s0) {
    form_packed_zeros(f, s0, s1);
    return;
  }
  for (uint64_t s = s0; s < s1; s++) {
    int64_t z = f->zps != NULL ? zero_at(q, f->zps, f->sshape, f->srank, s) : q->zero_point;
    f->j->zero[s] = z + q->zero_point_offset; /* both within 2^32: exact */
  }
}

/* The scale array formed once (codebook, super scale, offset) and the zero
 * points, on up to `threads` threads. */
static HurrayStatus form_scales(PackedJob *j, const HurrayDescriptor *d,
                                const HurrayBufferList *list, uint32_t threads,
                                HurrayError *error) {
  const HurrayQuant *q = &d->quant;
  ScaleForm *f = calloc(1, sizeof *f);
  if (f == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for scales");
  f->j = j;
  f->q = q;
  f->generic = packed_generic();
  hurray__quant_scale_shape(d, f->sshape, &f->srank);
  f->n = 1;
  for (uint32_t m = 0; m < f->srank; m++) f->n *= f->sshape[m]; /* validated: fits */
  const uint64_t n = f->n;
  HurrayStatus st = HURRAY_OK;
  if (n > SIZE_MAX / sizeof(int64_t)) {
    st = hurray__fail(error, HURRAY_ERR_OVERFLOW, "too many scales");
    goto done;
  }
  j->scale = malloc((n ? n : 1) * sizeof(float));
  if (j->scale == NULL) {
    st = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for scales");
    goto done;
  }
  f->scales = buffer_bytes(list, q->scale_buffer);
  const uint8_t *cb = q->scale_codebook_buffer != HURRAY_NO_BUFFER
                          ? buffer_bytes(list, q->scale_codebook_buffer)
                          : NULL; /* validated: 256 float32 */
  f->sup = q->super_scale_buffer != HURRAY_NO_BUFFER ? buffer_bytes(list, q->super_scale_buffer)
                                                     : NULL;
  f->by_table = cb != NULL || hurray_dtype_bits(q->scale_dtype) == 8;
  for (unsigned c = 0; f->by_table && c < 256; c++) {
    const uint8_t byte = (uint8_t)c;
    f->table[c] = cb ? read_scale(HURRAY_DTYPE_FLOAT32, cb, c)
                     : read_scale(q->scale_dtype, &byte, 0);
  }
  bool buffered = q->zero_point_buffer != HURRAY_NO_BUFFER;
  if (!j->use_table && (buffered || q->zero_point != 0 || q->zero_point_offset != 0)) {
    j->zero = malloc((n ? n : 1) * sizeof(int64_t));
    if (j->zero == NULL) {
      st = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory");
      goto done;
    }
    f->zps = buffered ? buffer_bytes(list, q->zero_point_buffer) : NULL;
  }
  /* forming a scale costs about what decoding 16 float32 outputs does */
  f->parts = hurray__quant_threads(threads, n * 64);
  if (f->parts > n) f->parts = n ? (unsigned)n : 1;
  hurray__parallel_run(f->parts, form_scale_part, f);
done:
  free(f);
  return st;
}

static void fill_table(PackedJob *j, const HurrayDescriptor *d, const HurrayBufferList *list) {
  const HurrayQuant *q = &d->quant;
  const HurrayMinifloat *mf = hurray__minifloat_of(d->dtype);
  const uint8_t *cb = q->codebook_buffer != HURRAY_NO_BUFFER
                          ? buffer_bytes(list, q->codebook_buffer)
                          : NULL;
  j->use_table = cb != NULL || mf != NULL || q->kind == HURRAY_QUANT_NF4;
  if (!j->use_table) return;
  unsigned count = j->bits <= 8 ? 1u << j->bits : 0;
  for (unsigned c = 0; c < count; c++) {
    j->table[c] = cb   ? read_scale(HURRAY_DTYPE_FLOAT32, cb, c)
                  : mf ? hurray__minifloat_decode(mf, c)
                       : HURRAY__NF4_VALUES[c & 15u];
  }
}

static void store(const PackedJob *j, uint64_t at, float v) {
  if (j->out_dtype == HURRAY_DTYPE_FLOAT32) {
    ((float *)j->out)[at] = v;
  } else if (j->out_dtype == HURRAY_DTYPE_FLOAT16) {
    ((uint16_t *)j->out)[at] = hurray__f32_to_f16(v);
  } else {
    ((uint16_t *)j->out)[at] = hurray__f32_to_bf16(v);
  }
}

/* Where a row starts: its code and scale bases and, when the lanes run
 * along another dimension, its lane. */
typedef struct RowBase {
  uint64_t c, s;
  unsigned lane;
  /* act-order: this row's column of its tile's scale and zero-point tables
   * (decode_rows), or NULL */
  const float *gs;
  const int32_t *gz;
} RowBase;

/* Elements [t0, t1) of a row. Along the last dimension the steps advance
 * by counters, not divisions. */
static void decode_run(const PackedJob *j, uint64_t r, RowBase b, uint64_t t0, uint64_t t1) {
  uint32_t last = j->rank - 1;
  const uint64_t mask = ((uint64_t)1 << j->bits) - 1; /* bits <= 32 (validated) */
  const bool packed_last = j->packed_dim == last;
  const uint64_t cstep = j->cstride[last], sstep = j->sstride[last], block = j->block[last];
  const uint8_t grp = j->group[last];
  const uint64_t len = j->shape[last];
  uint64_t c = b.c + code_step(j, last, t0), sb = b.s + scale_step(j, last, t0);
  uint64_t in_block = grp == GROUP_BLOCK ? t0 % block : 0;
  unsigned in_word = packed_last ? (unsigned)(t0 % j->lanes) : 0;
  for (uint64_t t = t0; t < t1; t++) {
    uint64_t s = grp == GROUP_INDEX ? b.s + scale_step(j, last, t) : sb, code;
    if (j->word_bytes) {
      unsigned lane = packed_last ? j->lane_of[in_word] : b.lane;
      code = (load_le(j->codes + c * j->word_bytes, j->word_bytes) >> (lane * j->bits)) & mask;
    } else {
      code = load_element(j->codes, c, j->bits);
    }
    float v;
    if (j->use_table) {
      v = j->table[code] * j->scale[s];
    } else {
      int64_t ci = j->is_signed ? sign_extend(code, j->bits) : (int64_t)code;
      v = i64_to_f32(ci - (j->zero ? j->zero[s] : 0)) * j->scale[s];
    }
    store(j, r * len + t, v);
    if (!packed_last || ++in_word == j->lanes) {
      in_word = 0;
      c += cstep;
    }
    if (grp == GROUP_SELF || (grp == GROUP_BLOCK && ++in_block == block)) {
      in_block = 0;
      sb += sstep;
    }
  }
}

/* The specialised runs. They compute exactly what decode_run computes, in
 * the same binary32 operations, but in two passes over a tile held on the
 * stack (O(1) memory): the codes of the run, fetched a whole word at a time
 * along the lanes, and then their values, one scale (and zero point) looked
 * up per run of elements sharing it rather than per element. Which loop
 * runs is chosen from the descriptor's shape of storage, not per element:
 * words along the row (compressed-tensors, bitsandbytes, GPTQ's columns of
 * words), one lane per row (AWQ), bytes (FP8) and nibbles (NVFP4). */
#define TILE_COLS 256u

static inline uint64_t load_word(const uint8_t *p, unsigned bytes) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (bytes == 4) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  if (bytes == 1) return p[0];
#endif
  return load_le(p, bytes);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#  define PACKED_AVX2 1
#  define AVX2_FN __attribute__((target("avx2")))

/* The 8 codes of each of n8 32-bit words (4-bit lanes, any order): the
 * word shifted by each lane's shift at once. The scalar loop's
 * variable-count shifts cost GPTQ most of its time. */
AVX2_FN static void fetch_words8_avx2(const uint8_t *src, uint64_t c, uint64_t cstep,
                                      const uint8_t *sh, uint32_t mask, uint32_t n8,
                                      uint32_t *codes) {
  const __m256i shifts = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sh));
  const __m256i m = _mm256_set1_epi32((int)mask);
  for (uint32_t i = 0; i < n8; i++, c += cstep) {
    uint32_t w;
    memcpy(&w, src + c * 4, 4);
    __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)w), shifts);
    _mm256_storeu_si256((__m256i *)(codes + 8 * i), _mm256_and_si256(v, m));
  }
}

/* (float)(code - z) * sc for 8 codes, signed ones (sign = 1 << (bits - 1))
 * extended first: value_at's int32 difference, conversion and
 * multiplication. */
AVX2_FN static inline __m256 values8(__m256i c, __m256i vs, __m256i z, __m256 sc) {
  c = _mm256_sub_epi32(_mm256_xor_si256(c, vs), vs);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, z)), sc);
}

/* An act-order row's values (GPTQ's g_idx): each element's scale and zero
 * point gathered through its group's offset, 8 at a time, the same int32
 * difference, conversion and multiplication as value_at. */
AVX2_FN static void values_gidx_avx2(const uint32_t *codes, uint32_t n, const int32_t *goff,
                                     const float *sbase, const int32_t *zbase, uint32_t sign,
                                     float *dst) {
  const __m256i vs = _mm256_set1_epi32((int)sign);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i off = _mm256_loadu_si256((const __m256i *)(goff + i));
    __m256 sc = _mm256_i32gather_ps(sbase, off, 4);
    __m256i z = zbase ? _mm256_i32gather_epi32(zbase, off, 4) : _mm256_setzero_si256();
    __m256i c = _mm256_loadu_si256((const __m256i *)(codes + i));
    _mm256_storeu_ps(dst + i, values8(c, vs, z, sc));
  }
  for (; i < n; i++) {
    int32_t ci = (int32_t)(codes[i] ^ sign) - (int32_t)sign;
    dst[i] = (float)(ci - (zbase ? zbase[goff[i]] : 0)) * sbase[goff[i]];
  }
}

/* Integer codes 8 or 4 to a 32-bit word along the row (GPTQ,
 * compressed-tensors int4 and int8), columns [t0, t0 + n) of one row, both
 * multiples of 8 and each 8 inside one scale group: code, value and store in one pass, where
 * the runs above write the codes to a tile and read them back. Same int32
 * difference, conversion and multiplication. */
AVX2_FN static void fused_words_avx2(const uint8_t *p, uint64_t wstep, unsigned lanes,
                                     const uint8_t *shift_of, uint32_t mask, uint32_t sign,
                                     uint32_t n, float *dst, const float *scale,
                                     const int64_t *zero, uint64_t s, uint64_t sstep,
                                     uint64_t block, uint64_t in_block, const int32_t *goff,
                                     const float *gs, const int32_t *gz) {
  uint8_t sh[8]; /* the shifts of the 8 codes of one step: two words of 4 lanes, or one of 8 */
  for (unsigned e = 0; e < 8; e++) sh[e] = shift_of[e % lanes];
  const __m256i shifts = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sh));
  const __m256i vm = _mm256_set1_epi32((int)mask), vs = _mm256_set1_epi32((int)sign);
  __m256 sc = _mm256_setzero_ps();
  __m256i z = _mm256_setzero_si256();
  bool reload = true;
  const uint64_t step = lanes == 4 ? 2 * wstep : wstep;
  for (uint32_t i = 0; i < n; i += 8, p += step) {
    if (goff != NULL) { /* act-order: each element's own group */
      __m256i off = _mm256_loadu_si256((const __m256i *)(goff + i));
      sc = _mm256_i32gather_ps(gs, off, 4);
      z = gz ? _mm256_i32gather_epi32(gz, off, 4) : _mm256_setzero_si256();
    } else if (reload) {
      sc = _mm256_set1_ps(scale[s]);
      z = _mm256_set1_epi32(zero ? (int32_t)zero[s] : 0);
      reload = false;
    }
    uint32_t w0, w1;
    memcpy(&w0, p, 4);
    if (lanes == 4) {
      memcpy(&w1, p + wstep, 4);
    } else {
      w1 = w0;
    }
    __m256i words = _mm256_setr_m128i(_mm_set1_epi32((int)w0), _mm_set1_epi32((int)w1));
    __m256i c = _mm256_and_si256(_mm256_srlv_epi32(words, shifts), vm);
    _mm256_storeu_ps(dst + i, values8(c, vs, z, sc));
    if (block != 0 && (in_block += 8) == block) {
      in_block = 0;
      s += sstep;
      reload = true;
    }
  }
}

/* values_int's small_diff loop, 8 at a time: the same int32 difference,
 * conversion and multiplication. */
AVX2_FN static void values_small_avx2(const uint32_t *codes, uint32_t n, uint32_t sign, int32_t z,
                                      float sc, float *dst) {
  const __m256i vs = _mm256_set1_epi32((int)sign), vz = _mm256_set1_epi32(z);
  const __m256 vsc = _mm256_set1_ps(sc);
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i c = _mm256_loadu_si256((const __m256i *)(codes + i));
    _mm256_storeu_ps(dst + i, values8(c, vs, vz, vsc));
  }
  for (; i < n; i++) dst[i] = (float)((int32_t)(codes[i] ^ sign) - (int32_t)sign - z) * sc;
}
#endif

/* Words along the row, `lanes` codes each; `bytes` constant at the call so
 * the load folds. The shifts are copied to the stack: the job's bytes could
 * alias the code stores, and the compiler would reload them each time. */
static inline void fetch_lanes(const PackedJob *j, uint64_t c, unsigned e, uint64_t cstep,
                               unsigned bytes, uint32_t mask, uint32_t n, uint32_t *codes) {
  const unsigned lanes = j->lanes;
  const uint8_t *src = j->codes;
  uint8_t sh[32];
  memcpy(sh, j->shift_of, sizeof sh);
  uint32_t i = 0;
  if (e != 0) { /* the rest of a word the run starts inside */
    uint64_t w = load_word(src + c * bytes, bytes);
    for (; e < lanes && i < n; e++) codes[i++] = (uint32_t)(w >> sh[e]) & mask;
    c += cstep;
  }
#ifdef PACKED_AVX2
  if (lanes == 8 && bytes == 4 && j->avx2) {
    uint32_t n8 = (n - i) / 8;
    fetch_words8_avx2(src, c, cstep, sh, mask, n8, codes + i);
    i += 8 * n8;
    c += n8 * cstep;
  }
#endif
  if (lanes == 8) {
    for (; i + 8 <= n; i += 8, c += cstep) {
      uint64_t w = load_word(src + c * bytes, bytes);
      for (unsigned k = 0; k < 8; k++) codes[i + k] = (uint32_t)(w >> sh[k]) & mask;
    }
  } else if (lanes == 4) {
    for (; i + 4 <= n; i += 4, c += cstep) {
      uint64_t w = load_word(src + c * bytes, bytes);
      for (unsigned k = 0; k < 4; k++) codes[i + k] = (uint32_t)(w >> sh[k]) & mask;
    }
  } else if (lanes == 2) {
    for (; i + 2 <= n; i += 2, c += cstep) {
      uint64_t w = load_word(src + c * bytes, bytes);
      codes[i] = (uint32_t)(w >> sh[0]) & mask;
      codes[i + 1] = (uint32_t)(w >> sh[1]) & mask;
    }
  }
  while (i < n) {
    uint64_t w = load_word(src + c * bytes, bytes);
    for (e = 0; e < lanes && i < n; e++) codes[i++] = (uint32_t)(w >> sh[e]) & mask;
    c += cstep;
  }
}

static void fetch_codes(const PackedJob *j, RowBase b, uint64_t t0, uint32_t n, uint32_t *codes) {
  const uint32_t last = j->rank - 1;
  const uint64_t cstep = j->cstride[last];
  const unsigned bits = j->bits;
  const uint32_t mask = bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1u;
  if (j->word_bytes && j->packed_dim == last) {
    uint64_t c = b.c + t0 / j->lanes * cstep;
    unsigned e = (unsigned)(t0 % j->lanes);
    if (j->word_bytes == 4) {
      fetch_lanes(j, c, e, cstep, 4, mask, n, codes);
    } else if (j->word_bytes == 1) {
      fetch_lanes(j, c, e, cstep, 1, mask, n, codes);
    } else {
      fetch_lanes(j, c, e, cstep, j->word_bytes, mask, n, codes);
    }
  } else if (j->word_bytes) {
    const unsigned sh = b.lane * bits, bytes = j->word_bytes;
    const uint8_t *p = j->codes + (b.c + t0 * cstep) * bytes;
    if (bytes == 4) {
      for (uint32_t i = 0; i < n; i++)
        codes[i] = (uint32_t)(load_word(p + i * cstep * 4, 4) >> sh) & mask;
    } else {
      for (uint32_t i = 0; i < n; i++) {
        codes[i] = (uint32_t)(load_word(p + i * cstep * bytes, bytes) >> sh) & mask;
      }
    }
  } else if (bits == 8) {
    const uint8_t *p = j->codes + b.c + t0 * cstep;
    if (cstep == 1) {
      for (uint32_t i = 0; i < n; i++) codes[i] = p[i];
    } else {
      for (uint32_t i = 0; i < n; i++) codes[i] = p[i * cstep];
    }
  } else if (bits == 4 && cstep == 1) {
    uint64_t c = b.c + t0;
    uint32_t i = 0;
    if ((c & 1u) && n) codes[i++] = j->codes[c++ >> 1] >> 4;
    const uint8_t *p = j->codes + (c >> 1);
    for (; i + 1 < n; i += 2, p++) {
      codes[i] = *p & 15u;
      codes[i + 1] = *p >> 4;
    }
    if (i < n) codes[i] = *p & 15u;
  } else {
    uint64_t c = b.c + t0 * cstep;
    for (uint32_t i = 0; i < n; i++, c += cstep)
      codes[i] = (uint32_t)load_element(j->codes, c, bits);
  }
}

/* Values of n codes sharing scale `sc` and zero point `z` (integer codes). */
static inline void values_int(const PackedJob *j, const uint32_t *codes, uint32_t n, float sc,
                              int64_t z, float *dst) {
  const unsigned bits = j->bits;
  if (j->small_diff) {
    const int32_t z32 = (int32_t)z;
#ifdef PACKED_AVX2
    if (j->avx2) {
      values_small_avx2(codes, n, j->sign, z32, sc, dst);
      return;
    }
#endif
    if (j->is_signed) {
      const uint32_t sign = 1u << (bits - 1);
      for (uint32_t i = 0; i < n; i++) {
        int32_t ci = (int32_t)(codes[i] ^ sign) - (int32_t)sign;
        dst[i] = (float)(ci - z32) * sc;
      }
    } else {
      for (uint32_t i = 0; i < n; i++) dst[i] = (float)((int32_t)codes[i] - z32) * sc;
    }
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    int64_t ci = j->is_signed ? sign_extend(codes[i], bits) : (int64_t)codes[i];
    dst[i] = i64_to_f32(ci - z) * sc;
  }
}

/* `lut`: the code table's first 16 entries on the caller's stack, which the
 * output stores cannot alias (the job's table could be reloaded each time). */
static inline void values_run(const PackedJob *j, const float *lut, const uint32_t *codes,
                              uint32_t n, uint64_t s, float *dst) {
  const float sc = j->scale[s];
  if (j->use_table && j->bits <= 4) {
    for (uint32_t i = 0; i < n; i++) dst[i] = lut[codes[i]] * sc;
  } else if (j->use_table) {
    for (uint32_t i = 0; i < n; i++) dst[i] = j->table[codes[i]] * sc;
  } else {
    values_int(j, codes, n, sc, j->zero ? j->zero[s] : 0, dst);
  }
}

/* One element with its own scale index (per-element groups). */
static inline float value_at(const PackedJob *j, uint32_t code, uint64_t s) {
  if (j->use_table) return j->table[code] * j->scale[s];
  int64_t z = j->zero ? j->zero[s] : 0;
  if (j->small_diff) {
    const uint32_t sign = j->sign;
    int32_t ci = (int32_t)(code ^ sign) - (int32_t)sign;
    return (float)(ci - (int32_t)z) * j->scale[s];
  }
  int64_t ci = j->is_signed ? sign_extend(code, j->bits) : (int64_t)code;
  return i64_to_f32(ci - z) * j->scale[s];
}

/* The direct runs: table codes of a byte each (FP8) or two to a byte (NF4,
 * FP4, NVFP4), contiguous along the row, are looked up straight from their
 * bytes, with no tile of codes in between, and a byte of two codes through
 * a table of value pairs. Into a reused float32 out= on one thread, NVFP4
 * went from 0.32-0.41 of a memcpy of the same size to 0.73-0.77, and
 * bitsandbytes NF4/FP4 with double quantization from 0.46-0.53 to
 * 0.76-0.85 (2-CPU Intel VM, interleaved with the memcpy). */
enum { DIRECT_NONE = 0, DIRECT_BYTES = 1, DIRECT_NIBBLES = 2 };

/* n values from nibble position `pos` of `bytes` (byte pos / 2, the first
 * or second code of it), all of scale sc. */
static inline void nibble_values(const PackedJob *j, const uint8_t *bytes, uint64_t pos,
                                 uint32_t n, float sc, float *dst) {
  const float(*pair)[2] = j->pair;
  uint32_t i = 0;
  if ((pos & 1u) && n) dst[i++] = pair[bytes[pos++ >> 1]][1] * sc;
  const uint8_t *p = bytes + (pos >> 1);
  for (; i + 2 <= n; i += 2, p++) {
    const float *v = pair[*p];
    dst[i] = v[0] * sc;
    dst[i + 1] = v[1] * sc;
  }
  if (i < n) dst[i] = pair[*p][0] * sc;
}

static void direct_run(const PackedJob *j, RowBase b, uint64_t t0, uint32_t n, float *dst) {
  const uint32_t last = j->rank - 1;
  const uint64_t sstep = j->sstride[last];
  const uint64_t block = j->group[last] == GROUP_BLOCK ? j->block[last] : UINT64_MAX;
  /* element-packed codes count positions from the buffer's start, words
   * from the row's first word */
  const uint8_t *base = j->word_bytes ? j->codes + b.c : j->codes;
  const uint64_t pos0 = j->word_bytes ? 0 : b.c;
  for (uint32_t i = 0; i < n;) {
    uint64_t t = t0 + i, in = block - t % block;
    uint32_t k = in < n - i ? (uint32_t)in : n - i;
    float sc = j->scale[b.s + (block == UINT64_MAX ? 0 : t / block * sstep)];
    if (j->direct == DIRECT_BYTES) {
      const uint8_t *p = base + pos0 + t;
      for (uint32_t e = 0; e < k; e++) dst[i + e] = j->table[p[e]] * sc;
    } else {
      nibble_values(j, base, pos0 + t, k, sc, dst + i);
    }
    i += k;
  }
}

/* The values of a row's n codes from t0 on, into the output. */
static void run_values(const PackedJob *j, uint64_t r, RowBase b, uint64_t t0, uint32_t n,
                       const uint32_t *codes) {
  float tmp[TILE_COLS];
  const uint32_t last = j->rank - 1;
  const uint64_t len = j->shape[last], sstep = j->sstride[last];
  float *dst = j->out_dtype == HURRAY_DTYPE_FLOAT32 ? (float *)j->out + r * len + t0 : tmp;
  float lut[16];
  memcpy(lut, j->table, sizeof lut);
  uint32_t i = 0;
  switch (j->group[last]) {
    case GROUP_BLOCK: {
      const uint64_t block = j->block[last];
      while (i < n) {
        uint64_t t = t0 + i, in = block - t % block;
        uint32_t k = in < n - i ? (uint32_t)in : n - i;
        values_run(j, lut, codes + i, k, b.s + t / block * sstep, dst + i);
        i += k;
      }
      break;
    }
    case GROUP_INDEX: /* act-order g_idx jumps every element: one lookup each, inline */
#ifdef PACKED_AVX2
      if (b.gs != NULL) {
        values_gidx_avx2(codes, n, j->gidx16 + t0, b.gs, b.gz, j->sign, dst);
        break;
      }
#endif
      for (; i < n; i++) {
        uint64_t sidx = b.s + (uint64_t)j->gidx[t0 + i] * sstep;
        dst[i] = value_at(j, codes[i], sidx);
      }
      break;
    default:
      if (sstep == 0) {
        values_run(j, lut, codes, n, b.s, dst);
      } else {
        for (; i < n; i++) dst[i] = value_at(j, codes[i], b.s + (t0 + i) * sstep);
      }
      break;
  }
  if (dst == tmp) {
    for (i = 0; i < n; i++) store(j, r * len + t0 + i, tmp[i]);
  }
}

static void fast_run(const PackedJob *j, uint64_t r, RowBase b, uint64_t t0, uint64_t t1) {
  const uint32_t n = (uint32_t)(t1 - t0);
#ifdef PACKED_AVX2
  const uint32_t last = j->rank - 1;
  const bool index = j->group[last] == GROUP_INDEX;
  if (j->fused && j->out_dtype == HURRAY_DTYPE_FLOAT32 && n % 8 == 0 && t0 % 8 == 0 &&
      (!index || b.gs != NULL)) {
    const uint64_t block = j->group[last] == GROUP_BLOCK ? j->block[last] : 0;
    const uint64_t cstep = j->cstride[last], sstep = j->sstride[last];
    fused_words_avx2(j->codes + (b.c + t0 / j->lanes * cstep) * 4, cstep * 4, j->lanes,
                     j->shift_of, (1u << j->bits) - 1u, j->sign, n,
                     (float *)j->out + r * j->shape[last] + t0, j->scale, j->zero,
                     b.s + (block ? t0 / block * sstep : 0), sstep, block, block ? t0 % block : 0,
                     index ? j->gidx16 + t0 : NULL, b.gs, b.gz);
    return;
  }
#endif
  if (j->direct != DIRECT_NONE) {
    float tmp[TILE_COLS];
    const uint64_t len = j->shape[j->rank - 1];
    float *dst = j->out_dtype == HURRAY_DTYPE_FLOAT32 ? (float *)j->out + r * len + t0 : tmp;
    direct_run(j, b, t0, n, dst);
    if (dst == tmp) {
      for (uint32_t i = 0; i < n; i++) store(j, r * len + t0 + i, tmp[i]);
    }
    return;
  }
  uint32_t codes[TILE_COLS];
  fetch_codes(j, b, t0, n, codes);
  run_values(j, r, b, t0, n, codes);
}

/* Codes of rows b[0..m) that are lanes of the same words (AWQ: 8 rows to
 * a word along the output dimension, one word per element), fetched a word
 * at a time for all of them: row by row, each word was loaded once per
 * row, a cache line a load, since the words of one row lie a row of words
 * apart. */
#define LINE_ROWS 16u

#ifdef PACKED_AVX2
/* Eight words at a time into a vector, then each row's lane of all eight
 * with one shift. */
AVX2_FN static void fetch_lane_rows_avx2(const uint8_t *p, uint64_t step, const unsigned *sh,
                                         uint32_t m, uint32_t mask, uint32_t n8, uint32_t *codes,
                                         uint32_t stride) {
  const __m256i vm = _mm256_set1_epi32((int)mask);
  for (uint32_t i = 0; i < n8; i++, p += 8 * step) {
    uint32_t w[8];
    for (unsigned k = 0; k < 8; k++) memcpy(&w[k], p + k * step, 4);
    __m256i v = _mm256_loadu_si256((const __m256i *)w);
    for (uint32_t q = 0; q < m; q++) {
      __m256i x = _mm256_srl_epi32(v, _mm_cvtsi32_si128((int)sh[q]));
      _mm256_storeu_si256((__m256i *)(codes + q * stride + 8 * i), _mm256_and_si256(x, vm));
    }
  }
}
#endif

static void fetch_lane_rows(const PackedJob *j, const RowBase *b, uint32_t m, uint64_t t0,
                            uint32_t n, uint32_t *codes, uint32_t stride) {
  const uint64_t step = j->cstride[j->rank - 1] * 4;
  const uint32_t mask = (1u << j->bits) - 1u;
  unsigned sh[LINE_ROWS];
  for (uint32_t q = 0; q < m; q++) sh[q] = b[q].lane * j->bits;
  const uint8_t *p = j->codes + (b[0].c + t0 * j->cstride[j->rank - 1]) * 4;
  uint32_t i = 0;
#ifdef PACKED_AVX2
  if (j->avx2) {
    fetch_lane_rows_avx2(p, step, sh, m, mask, n / 8, codes, stride);
    i = n / 8 * 8;
    p += i * step;
  }
#endif
  for (; i < n; i++, p += step) {
    uint32_t w = (uint32_t)load_word(p, 4);
    for (uint32_t q = 0; q < m; q++) codes[q * stride + i] = (w >> sh[q]) & mask;
  }
}

/* How many rows from base[0] on (at most `left`) share their words. */
static uint32_t word_rows(const RowBase *base, uint32_t left) {
  uint32_t m = 1;
  while (m < left && m < LINE_ROWS && base[m].c == base[0].c) m++;
  return m;
}

/* Codes one lane per row (AWQ) decode in tiles of 128 rows by 256
 * columns. The words of a tile's rows at one column lie side by side (128
 * rows of 4-bit lanes are 16 words, one cache line) and the words of one
 * row a row of words apart: in tiles of 16 rows, every line was read once
 * per 8 rows, and the 256 lines a tile spans fell into a few cache sets and
 * were evicted in between. Into a reused out= on one thread AWQ went from
 * 0.32-0.38 of a memcpy to 0.54-0.60 (tiles of 128 x 32 and 64 x 128 were
 * slower: a short run of a row costs its setup). The tile's codes (128 KiB)
 * are on the heap, one allocation per part. */
#define LANE_TILE_ROWS 128u

static void lane_tile(const PackedJob *j, uint64_t r, const RowBase *base, unsigned n, uint64_t t,
                      uint32_t cols, uint32_t *codes) {
  for (unsigned i = 0; i < n;) {
    uint32_t m = word_rows(base + i, n - i);
    fetch_lane_rows(j, base + i, m, t, cols, codes + i * TILE_COLS, TILE_COLS);
    i += m;
  }
  for (unsigned i = 0; i < n; i++) run_values(j, r + i, base[i], t, cols, codes + i * TILE_COLS);
}

/* Rows and columns in tiles: codes stored transposed (GPTQ, AWQ) put a
 * row's neighbours in the next row's cache lines, so a tile of rows reuses
 * each line it loads. */
#define TILE_ROWS 16u

/* The scales and zero points of every group for rows base[0..n), group-
 * major, and each row's column of them. */
static void fill_gather_tile(const PackedJob *j, RowBase *base, unsigned n, float *ts,
                             int32_t *tz) {
  const uint64_t sstep = j->sstride[j->rank - 1];
  for (unsigned q = 0; q < n; q++) {
    for (uint64_t g = 0; g < j->ngroups; g++) {
      uint64_t s = base[q].s + g * sstep; /* a scale of row q: g < the groups */
      ts[g * TILE_ROWS + q] = j->scale[s];
      if (tz != NULL) tz[g * TILE_ROWS + q] = (int32_t)j->zero[s]; /* small_diff: fits */
    }
    base[q].gs = ts + q;
    base[q].gz = tz != NULL ? tz + q : NULL;
  }
}

/* Part `part` covers rows [r0, r1) and, when the parts split columns
 * (fewer rows than parts), columns [c0, c1) of each; either way every
 * element is computed by itself, so the result is the same for any count. */
static void decode_rows(void *ctx, unsigned part) {
  PackedJob *j = ctx;
  uint32_t last = j->rank - 1;
  uint64_t len = j->shape[last], idx[HURRAY_MAX_RANK] = {0};
  uint64_t r0 = 0, r1 = j->rows, c0 = 0, c1 = len;
  if (j->split_cols) {
    c0 = len / j->parts * part;
    c1 = part + 1 == j->parts ? len : len / j->parts * (part + 1);
  } else {
    r0 = j->rows / j->parts * part;
    r1 = part + 1 == j->parts ? j->rows : j->rows / j->parts * (part + 1);
  }
  uint64_t rest = r0;
  for (uint32_t k = last; k-- > 0;) { /* multi-index of row r0 */
    idx[k] = rest % j->shape[k];
    rest /= j->shape[k];
  }
  /* without memory for the lane tile, the rows decode one by one */
  uint32_t *lane_codes = j->lane_rows
                             ? malloc((size_t)LANE_TILE_ROWS * TILE_COLS * sizeof *lane_codes)
                             : NULL;
  const unsigned tile_rows = lane_codes != NULL ? LANE_TILE_ROWS : TILE_ROWS;
  float *tile_s = NULL; /* act-order: the row tile's scales and zero points (fill_gather_tile) */
  int32_t *tile_z = NULL;
  if (j->gidx16 != NULL && lane_codes == NULL) {
    tile_s = malloc((size_t)j->ngroups * TILE_ROWS * sizeof *tile_s);
    if (j->zero != NULL) tile_z = malloc((size_t)j->ngroups * TILE_ROWS * sizeof *tile_z);
    if (tile_s == NULL || (j->zero != NULL && tile_z == NULL)) {
      free(tile_s);
      free(tile_z);
      tile_s = NULL;
      tile_z = NULL;
    }
  }
  RowBase base[LANE_TILE_ROWS];
  for (uint64_t r = r0; r < r1; r += tile_rows) {
    unsigned n = r1 - r < tile_rows ? (unsigned)(r1 - r) : tile_rows;
    for (unsigned i = 0; i < n; i++) {
      RowBase *b = &base[i];
      b->c = b->s = 0;
      b->gs = NULL;
      b->gz = NULL;
      for (uint32_t k = 0; k < last; k++) {
        b->c += code_step(j, k, idx[k]);
        b->s += scale_step(j, k, idx[k]);
      }
      b->lane = j->packed_dim < last ? j->lane_of[idx[j->packed_dim] % j->lanes] : 0;
      for (uint32_t k = last; k-- > 0;) {
        if (++idx[k] < j->shape[k]) break;
        idx[k] = 0;
      }
    }
    if (tile_s != NULL) fill_gather_tile(j, base, n, tile_s, tile_z);
    for (uint64_t t = c0; t < c1; t += TILE_COLS) {
      uint64_t t1 = c1 - t < TILE_COLS ? c1 : t + TILE_COLS;
      if (lane_codes != NULL) {
        lane_tile(j, r, base, n, t, (uint32_t)(t1 - t), lane_codes);
        continue;
      }
      for (unsigned i = 0; i < n; i++) {
        if (j->fast) {
          fast_run(j, r + i, base[i], t, t1);
        } else {
          decode_run(j, r + i, base[i], t, t1);
        }
      }
    }
  }
  free(lane_codes);
  free(tile_s);
  free(tile_z);
}

/* Whether table codes can be read straight from their bytes: contiguous
 * along the row, one to a byte or two (element-packed low nibble first, or
 * bytes of two lanes in either order), one scale per run of a block or per
 * row. */
static void choose_direct(PackedJob *j) {
  const uint32_t last = j->rank - 1;
  const uint8_t grp = j->group[last];
  j->direct = DIRECT_NONE;
  if (!j->fast || !j->use_table || j->cstride[last] != 1) return;
  if (!(grp == GROUP_BLOCK || (grp == GROUP_SELF && j->sstride[last] == 0))) return;
  const bool words = j->word_bytes == 1 && j->lanes == 2 && j->packed_dim == last;
  if (j->word_bytes == 0 && j->bits == 8) {
    j->direct = DIRECT_BYTES;
  } else if (j->bits == 4 && (j->word_bytes == 0 || words)) {
    const unsigned lo = words ? j->shift_of[0] : 0, hi = words ? j->shift_of[1] : 4;
    for (unsigned x = 0; x < 256; x++) {
      j->pair[x][0] = j->table[(x >> lo) & 15u];
      j->pair[x][1] = j->table[(x >> hi) & 15u];
    }
    j->direct = DIRECT_NIBBLES;
  }
}

/* Act-order (a group index along the row) gathers each element's scale and
 * zero point from a table of its row tile's groups (fill_gather_tile), up
 * to this many groups (tables of 256 KiB), else the plain loop runs. Its
 * rows' groups lie a row of scales apart, in a few cache sets: gathered
 * from the whole arrays they missed the L1 cache, where the tile's tables
 * stay in it (GPTQ act-order into a reused out= on one thread went from
 * 0.34-0.40 of a memcpy to 0.41-0.45 in alternating runs, before the fused
 * loop of fused_words_avx2). */
#define GATHER_TILE_GROUPS 4096u

/* gidx16, the group index scaled to the tile tables' rows. */
static void choose_gather(PackedJob *j) {
  const uint32_t last = j->rank - 1;
  if (!j->fast || !j->avx2 || j->use_table || !j->small_diff || j->group[last] != GROUP_INDEX ||
      j->ngroups > GATHER_TILE_GROUPS) {
    return;
  }
  j->gidx16 = malloc(j->shape[last] ? (size_t)j->shape[last] * sizeof *j->gidx16 : 1);
  for (uint64_t t = 0; j->gidx16 != NULL && t < j->shape[last]; t++) {
    j->gidx16[t] = (int32_t)(j->gidx[t] * TILE_ROWS);
  }
}

/* Whether the specialised runs apply, once per call. HURRAY_PACKED_GENERIC=1
 * keeps the generic loop (the tests compare the two byte for byte). */
static void choose_path(PackedJob *j, const HurrayDescriptor *d) {
  j->fast = !packed_generic() && (!j->use_table || j->bits <= 8);
  for (uint32_t e = 0; e < j->lanes && e < 32; e++)
    j->shift_of[e] = (uint8_t)(j->lane_of[e] * j->bits);
  choose_direct(j);
  j->sign = j->is_signed ? 1u << (j->bits - 1) : 0u;
  j->avx2 = hurray__quant_kernels()->level >= HURRAY_SIMD_AVX2 &&
            hurray__quant_kernels()->level != HURRAY_SIMD_NEON;
  j->lane_rows = j->fast && j->direct == DIRECT_NONE && j->word_bytes == 4 && j->bits <= 8 &&
                 j->packed_dim < j->rank - 1;
  /* |code| < 2^16 and |zero + offset| < 2^23 keep the difference below 2^24. */
  j->small_diff = j->bits <= 16;
  if (j->small_diff && j->zero != NULL) {
    uint64_t sshape[HURRAY_MAX_RANK], n = 1;
    uint32_t srank;
    hurray__quant_scale_shape(d, sshape, &srank);
    for (uint32_t m = 0; m < srank; m++) n *= sshape[m];
    for (uint64_t s = 0; s < n && j->small_diff; s++) {
      j->small_diff = j->zero[s] > -((int64_t)1 << 23) && j->zero[s] < ((int64_t)1 << 23);
    }
  }
  choose_gather(j);
  const uint32_t last = j->rank - 1;
  const uint8_t grp = j->group[last];
  j->fused = j->avx2 && j->fast && j->direct == DIRECT_NONE && !j->use_table && j->small_diff &&
             j->word_bytes == 4 && (j->lanes == 8 || j->lanes == 4) && j->packed_dim == last &&
             (grp == GROUP_INDEX   ? j->gidx16 != NULL
              : grp == GROUP_BLOCK ? j->block[last] % 8 == 0
                                   : j->sstride[last] == 0);
}

HurrayStatus hurray__packed_dequantize(const HurrayDescriptor *d, const HurrayBufferList *list,
                                       HurrayDType out_dtype, void *out, uint64_t numel,
                                       uint32_t threads, HurrayError *error) {
  if (numel == 0) {
    /* Nothing to decode, but a group index is still the tensor's: an entry
     * outside its groups fails here as it would with elements (spec §5.6;
     * G from the axis alone, which may be the one non-zero dimension). */
    const HurrayQuant *q = &d->quant;
    if (q->kind != HURRAY_QUANT_BLOCK_AFFINE || q->group_index_buffer == HURRAY_NO_BUFFER) {
      return HURRAY_OK;
    }
    uint64_t len = d->shape[q->axis], groups = len == 0 ? 0 : (len - 1) / q->block_size + 1;
    return read_group_index(buffer_bytes(list, q->group_index_buffer), len, groups, NULL, error);
  }
  PackedJob *j = calloc(1, sizeof *j);
  if (j == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory");
  const HurrayQuant *q = &d->quant;
  if (q->kind == HURRAY_QUANT_NF4) {
    j->rank = 1;
    j->shape[0] = numel;
  } else {
    j->rank = d->rank;
    memcpy(j->shape, d->shape, d->rank * sizeof d->shape[0]);
  }
  HurrayDType t = d->dtype;
  j->bits = hurray_dtype_bits(t);
  j->is_signed = t == HURRAY_DTYPE_INT4 || t == HURRAY_DTYPE_INT8 || t == HURRAY_DTYPE_INT16 ||
                 t == HURRAY_DTYPE_INT32;
  j->codes = buffer_bytes(list, d->layout.data_buffer) + d->byte_offset;
  j->out_dtype = out_dtype;
  j->out = out;
  j->rows = numel / j->shape[j->rank - 1];
  fill_table(j, d, list);
  HurrayStatus st = plan_dims(j, d, list, error);
  if (st == HURRAY_OK) st = form_scales(j, d, list, threads, error);
  if (st == HURRAY_OK) choose_path(j, d);
  if (st == HURRAY_OK) {
    uint64_t bytes = numel * (out_dtype == HURRAY_DTYPE_FLOAT32 ? 4u : 2u);
    j->parts = hurray__quant_threads(threads, bytes);
    uint64_t len = j->shape[j->rank - 1];
    if (j->rows < j->parts) {
      j->split_cols = true;
      if (len < j->parts) j->parts = (unsigned)len;
    }
    hurray__parallel_run(j->parts, decode_rows, j);
  }
  free(j->scale);
  free(j->zero);
  free(j->gidx);
  free(j->gidx16);
  free(j);
  return st;
}
