/*
 * hurray_quantize: floats in, codes + scales (+ zero points) out.
 *
 * Two drivers share the encoders:
 *   - block kinds (block affine, q8_0, q4_0, NF4, MX) finish each block's
 *     range, scale and codes while the block is still in cache, so the input
 *     is read from memory once;
 *   - per-tensor and per-channel kinds need the whole range first, so they
 *     reduce in one pass and encode in a second.
 * Work is split by flat position, so threads write disjoint bytes and the
 * result never depends on the thread count. Sub-byte codes go through a
 * small staging buffer and are packed on flush.
 */
#define _GNU_SOURCE /* MADV_POPULATE_WRITE (prefault.h) */
#include "prefault.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/error.h"
#include "elements.h"
#include "hurray/quant.h"
#include "plan.h"
#include "scheme.h"
#include "encoders.h"
#include "fresh_pages.h"
#include "simd.h"

#define STAGE 4096u /* codes staged before packing; a multiple of 4 */

/* Per-group parameters the encoders read. */
typedef struct Params {
  float *mul;   /* multiplier: 1/scale, or 2^-shared for MX */
  int32_t *zp;  /* zero point (affine kinds) */
  uint8_t *nan; /* MX: the block is non-finite, its codes are 0 */
} Params;

/* Encodes n elements; element k uses group (k * step) of `p`. */
static void encode_run(const HurrayResolvedScheme *s, const float *x, uint64_t n, Params p,
                       unsigned step, uint8_t *dst) {
  const int32_t qmin = s->qmin, qmax = s->qmax;
  if (step == 0) {
    int32_t zp = s->encoder == HURRAY_ENC_AFFINE ? p.zp[0] : 0;
    uint8_t nan = s->encoder == HURRAY_ENC_MXFP || s->encoder == HURRAY_ENC_MXINT8 ? p.nan[0] : 0;
    hurray__quant_kernels()->encode(s, x, n, p.mul[0], zp, nan, dst);
    return;
  }
  switch (s->encoder) {
    case HURRAY_ENC_AFFINE:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_affine(x[k], p.mul[k], p.zp[k], qmin, qmax);
      return;
    case HURRAY_ENC_Q8_0:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_q8_0(x[k], p.mul[k]);
      return;
    case HURRAY_ENC_Q4_0:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_q4_0(x[k], p.mul[k]);
      return;
    case HURRAY_ENC_NF4:
      for (uint64_t k = 0; k < n; k++) dst[k] = enc_nf4(x[k], p.mul[k]);
      return;
    case HURRAY_ENC_MXFP:
      for (uint64_t k = 0; k < n; k++) {
        uint8_t c = hurray__minifloat_encode(s->element, p.nan[k] ? 0.0f : x[k] * p.mul[k]);
        dst[k] = p.nan[k] ? 0 : c;
      }
      return;
    case HURRAY_ENC_MXINT8:
      for (uint64_t k = 0; k < n; k++) {
        uint8_t c = enc_mxint8(p.nan[k] ? 0.0f : x[k], p.mul[k]);
        dst[k] = p.nan[k] ? 0 : c;
      }
      return;
  }
}

/* ------------------------------------------------------------------ sink */

/* Writes codes in flat order from a 4-aligned start; packs sub-byte codes. */
typedef struct Sink {
  uint8_t *out;
  unsigned bits;
  uint64_t base; /* flat index of stage[0] */
  uint32_t fill;
  HurrayPrefault pf; /* the part's code pages not yet populated */
  uint8_t stage[STAGE];
} Sink;

/* Byte offset of the code of flat element i (codes packed from bit 0). */
static inline uint64_t code_byte(unsigned bits, uint64_t i) {
  return i / 8 * bits + i % 8 * bits / 8;
}

/* Arms the prefault (prefault.h) for the codes of flat elements
 * [first, last). */
static void prefault_init(Sink *k, uint64_t first, uint64_t last) {
  hurray__prefault_init(&k->pf, k->out + code_byte(k->bits, first),
                        k->out + code_byte(k->bits, last));
}

static void pack(unsigned bits, const uint8_t *c, uint32_t n, uint8_t *out, uint64_t base) {
  if (bits == 4) {
    uint8_t *o = out + base / 2;
    uint32_t pairs = n / 2;
    for (uint32_t k = 0; k < pairs; k++) {
      o[k] = (uint8_t)((c[2 * k] & 0x0fu) | (uint8_t)(c[2 * k + 1] << 4));
    }
    if (n & 1u) o[pairs] = c[n - 1] & 0x0fu;
    return;
  }
  /* 6-bit: four codes in three bytes, least significant bits first */
  uint8_t *o = out + base / 4 * 3;
  uint32_t quads = n / 4;
  for (uint32_t k = 0; k < quads; k++) {
    uint32_t c0 = c[4 * k] & 0x3fu, c1 = c[4 * k + 1] & 0x3fu;
    uint32_t c2 = c[4 * k + 2] & 0x3fu, c3 = c[4 * k + 3] & 0x3fu;
    uint32_t word = c0 | c1 << 6 | c2 << 12 | c3 << 18;
    o[3 * k] = (uint8_t)word;
    o[3 * k + 1] = (uint8_t)(word >> 8);
    o[3 * k + 2] = (uint8_t)(word >> 16);
  }
  uint32_t rest = n % 4;
  if (rest) {
    uint32_t word = 0;
    for (uint32_t j = 0; j < rest; j++) word |= (uint32_t)(c[4 * quads + j] & 0x3fu) << (6 * j);
    uint32_t bytes = (uint32_t)hurray__ceil_div_u64(rest * 6, 8);
    for (uint32_t j = 0; j < bytes; j++) o[3 * quads + j] = (uint8_t)(word >> (8 * j));
  }
}

static void sink_flush(Sink *k) {
  if (k->fill == 0) return;
  pack(k->bits, k->stage, k->fill, k->out, k->base);
  k->base += k->fill;
  k->fill = 0;
}

/* Encodes the segment [start, start + len) whose group parameters start at
 * `p` (advancing with the element when step is 1). */
static void emit(const HurrayResolvedScheme *s, Sink *k, const float *x, uint64_t start,
                 uint64_t len, Params p, unsigned step) {
  hurray__prefault_to(&k->pf, k->out + code_byte(k->bits, start + len));
  if (k->bits == 8) {
    encode_run(s, x + start, len, p, step, k->out + start);
    return;
  }
  uint64_t done = 0;
  while (done < len) {
    uint64_t piece = len - done;
    if (piece > STAGE - k->fill) piece = STAGE - k->fill;
    Params q = p;
    if (step) {
      q.mul += done;
      if (q.zp) q.zp += done;
      if (q.nan) q.nan += done;
    }
    encode_run(s, x + start + done, piece, q, step, k->stage + k->fill);
    k->fill += (uint32_t)piece;
    done += piece;
    if (k->fill == STAGE) sink_flush(k);
  }
}

/* ----------------------------------------------------------- group ranges */

typedef struct Range {
  float lo, hi;  /* min and max of the finite elements */
  float extreme; /* q4_0: the element of largest magnitude, first on ties */
  uint8_t nonfinite;
} Range;

static void range_reset(Range *r) {
  r->lo = INFINITY;
  r->hi = -INFINITY;
  r->extreme = 0.0f;
  r->nonfinite = 0;
}

static inline uint32_t is_nonfinite(float v) {
  return (hurray__f32_bits(v) & 0x7f800000u) == 0x7f800000u;
}

static void range_run(Range *r, const float *x, uint64_t n, bool want_extreme) {
  uint32_t bad = 0;
  hurray__quant_kernels()->range(x, n, &r->lo, &r->hi, &bad);
  r->nonfinite |= (uint8_t)bad;
  if (want_extreme) {
    float amax = fabsf(r->extreme);
    for (uint64_t k = 0; k < n; k++) {
      if (amax < fabsf(x[k])) {
        amax = fabsf(x[k]);
        r->extreme = x[k];
      }
    }
  }
}

/* Element-wise: r[k] takes x[k]. */
static void range_rows(Range *r, const float *x, uint64_t n) {
  for (uint64_t k = 0; k < n; k++) {
    float v = x[k];
    r[k].lo = v < r[k].lo ? v : r[k].lo;
    r[k].hi = v > r[k].hi ? v : r[k].hi;
    r[k].nonfinite |= (uint8_t)is_nonfinite(v);
  }
}

static void range_merge(Range *into, const Range *from) {
  into->lo = from->lo < into->lo ? from->lo : into->lo;
  into->hi = from->hi > into->hi ? from->hi : into->hi;
  into->nonfinite |= from->nonfinite;
}

/* ------------------------------------------------------------ parameters */

static float round_scale(HurrayDType dtype, float s) {
  switch (dtype) {
    case HURRAY_DTYPE_FLOAT16:
      s = s < 6.103515625e-05f ? 6.103515625e-05f : s > 65504.0f ? 65504.0f : s;
      return hurray__f16_to_f32(hurray__f32_to_f16(s));
    case HURRAY_DTYPE_BFLOAT16: {
      const float bf16_max = hurray__f32_from_bits(0x7f7f0000u);
      s = s < FLT_MIN ? FLT_MIN : s > bf16_max ? bf16_max : s;
      return hurray__bf16_to_f32(hurray__f32_to_bf16(s));
    }
    default: return s < FLT_MIN ? FLT_MIN : s > FLT_MAX ? FLT_MAX : s;
  }
}

/* A symmetric group's stored scale, stepped down where P · s would be
 * infinite in binary32 (§6.2 step 2): a group holding ±FLT_MAX has
 * s0 = FLT_MAX / P, which can round up, and then its extreme codes decoded
 * to ±Inf. A float16 scale never needs it (127 · 65504 is finite). */
static float symmetric_scale(HurrayDType dtype, int32_t levels, float s) {
  while (is_nonfinite((float)levels * s)) {
    s = dtype == HURRAY_DTYPE_BFLOAT16
            ? hurray__bf16_to_f32((uint16_t)(hurray__f32_to_bf16(s) - 1u))
            : nextafterf(s, 0.0f);
  }
  return s;
}

static void store_scale(HurrayDType dtype, void *scales, uint64_t g, float s) {
  switch (dtype) {
    case HURRAY_DTYPE_FLOAT16: ((uint16_t *)scales)[g] = hurray__f32_to_f16(s); break;
    case HURRAY_DTYPE_BFLOAT16: ((uint16_t *)scales)[g] = hurray__f32_to_bf16(s); break;
    case HURRAY_DTYPE_FLOAT8_E8M0FNU: ((uint8_t *)scales)[g] = (uint8_t)s; break;
    default: ((float *)scales)[g] = s; break;
  }
}

static void store_zero_point(HurrayDType dtype, uint8_t *zps, uint64_t g, int32_t zp) {
  if (dtype == HURRAY_DTYPE_INT8 || dtype == HURRAY_DTYPE_UINT8) {
    zps[g] = (uint8_t)zp;
  } else { /* 4-bit, low nibble first */
    uint8_t nib = (uint8_t)(zp & 0x0f);
    zps[g / 2] = (g & 1u) ? (uint8_t)((zps[g / 2] & 0x0fu) | (uint8_t)(nib << 4)) : nib;
  }
}

typedef struct Job {
  HurrayResolvedScheme s;
  HurrayQuantPlan plan;
  const float *x;
  uint8_t *codes;
  void *scales; /* NULL for per-tensor */
  uint8_t *zps; /* NULL unless asymmetric with a buffer */
  double inline_scale;
  int32_t inline_zp;
  /* global driver */
  Params params;
  Range *ranges; /* threads * groups */
  /* split */
  unsigned parts;
  uint64_t bounds[65]; /* unit range of each part */
  /* per-part outcome */
  HurrayStatus status[64];
  uint64_t bad_index[64];
} Job;

/* ggml's `d ? 1/d : 0`, with one addition: where 1/d overflows (d below
 * about 2^-128) ggml's conversion to an integer is undefined, and we use 0,
 * as for d == 0. */
static float finite_inverse(float d) {
  if (d == 0.0f) return 0.0f;
  float inv = 1.0f / d;
  return is_nonfinite(inv) ? 0.0f : inv;
}

/* Whether a float16 scale is infinite: ggml's Q8_0 and Q4_0 store theirs
 * unclamped, so a block of finite values with a magnitude of about
 * 127 x 65504 (Q8_0) or 8 x 65504 (Q4_0) or more would decode to infinities
 * (ggml writes them so); such input is refused instead. */
static bool f16_infinite(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }

/* The parameters of group g, from its range; writes the stored scale. For
 * MX, nan marks a non-finite block. False if the scale a finite group needs
 * is infinite in its stored form (Q8_0 and Q4_0 only: the affine kinds
 * clamp theirs, §6.2). */
static bool group_params(Job *j, uint64_t g, Range r, float *mul, int32_t *zp, uint8_t *nan) {
  const HurrayResolvedScheme *s = &j->s;
  if (r.lo > r.hi) r.lo = r.hi = 0.0f; /* a group without elements */
  /* fabsf: a block of -0.0 has amax +0, as in ggml and bitsandbytes */
  float amax = fabsf(r.lo) > fabsf(r.hi) ? fabsf(r.lo) : fabsf(r.hi);
  switch (s->encoder) {
    case HURRAY_ENC_AFFINE: {
      float scale;
      int32_t z;
      if (s->symmetric) {
        scale = symmetric_scale(s->scale_dtype, s->levels,
                                round_scale(s->scale_dtype, amax / (float)s->levels));
        z = s->zp_symmetric;
      } else {
        float lo = r.lo < 0.0f ? r.lo : 0.0f, hi = r.hi > 0.0f ? r.hi : 0.0f;
        scale = round_scale(s->scale_dtype, (hi - lo) / (float)(s->qmax - s->qmin));
        float t = lo / scale;
        t = t < -1048576.0f ? -1048576.0f : t;
        z = s->qmin - (int32_t)hurray__rne(t);
        z = z < s->qmin ? s->qmin : z > s->qmax ? s->qmax : z;
      }
      *mul = 1.0f / scale;
      *zp = z;
      if (j->scales) {
        store_scale(s->scale_dtype, j->scales, g, scale);
      } else {
        j->inline_scale = scale;
        j->inline_zp = z;
      }
      if (j->zps) store_zero_point(s->code_dtype, j->zps, g, z);
      return true;
    }
    case HURRAY_ENC_Q8_0: {
      float d = amax / 127.0f;
      *mul = finite_inverse(d);
      *zp = 0;
      uint16_t h = hurray__f32_to_f16(d);
      ((uint16_t *)j->scales)[g] = h;
      return !f16_infinite(h);
    }
    case HURRAY_ENC_Q4_0: {
      float d = r.extreme / -8.0f;
      *mul = finite_inverse(d);
      *zp = 8;
      uint16_t h = hurray__f32_to_f16(d);
      ((uint16_t *)j->scales)[g] = h;
      return !f16_infinite(h);
    }
    case HURRAY_ENC_NF4:
      /* bitsandbytes' 1/absmax; below about 2^-128 it overflows, and the
       * block is encoded as zeros (code 7), off by less than 2^-128 */
      *mul = finite_inverse(amax);
      ((float *)j->scales)[g] = amax;
      return true;
    default: { /* MX */
      if (r.nonfinite) {
        *nan = 1;
        *mul = 0.0f;
        ((uint8_t *)j->scales)[g] = 0xff;
        return true;
      }
      int e = (int)((hurray__f32_bits(amax) >> 23) & 0xffu) - 127;
      int shared = e - s->emax;
      shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
      *nan = 0;
      *mul = hurray__exp2i(-shared);
      ((uint8_t *)j->scales)[g] = (uint8_t)(shared + 127);
      return true;
    }
  }
}

/* The flat index of the first element of largest magnitude among `count`
 * elements `stride` apart from `start`: what a refusal of their group names. */
static uint64_t largest_at(const float *x, uint64_t start, uint64_t count, uint64_t stride) {
  uint64_t best = start;
  for (uint64_t k = 1; k < count; k++) {
    if (fabsf(x[start + k * stride]) > fabsf(x[best])) best = start + k * stride;
  }
  return best;
}

static bool needs_finite(const HurrayResolvedScheme *s) {
  return s->encoder != HURRAY_ENC_MXFP && s->encoder != HURRAY_ENC_MXINT8;
}

static uint64_t first_nonfinite(const float *x, uint64_t n) {
  for (uint64_t k = 0; k < n; k++) {
    if (is_nonfinite(x[k])) return k;
  }
  return n;
}

/* --------------------------------------------------------- block driver */

/* Units: a block (BLOCKS walk) or the rows of one block row (ROWS_BLOCK). */
static uint64_t unit_count(const Job *j) {
  const HurrayQuantPlan *p = &j->plan;
  if (p->walk == HURRAY_WALK_BLOCKS) return p->segments;
  if (p->walk == HURRAY_WALK_ROWS_BLOCK) return p->numel ? p->outer * p->nblocks : 0;
  return p->segments;
}

static uint64_t unit_start(const Job *j, uint64_t u) {
  const HurrayQuantPlan *p = &j->plan;
  if (p->walk == HURRAY_WALK_ROWS_BLOCK) {
    uint64_t o = u / p->nblocks, b = u % p->nblocks;
    return (o * p->along + b * p->block) * p->inner;
  }
  return hurray__quant_segment(p, u).start;
}

/* The flat index one past the last element of `part`. */
static uint64_t part_end(const Job *j, unsigned part) {
  return part + 1 < j->parts ? unit_start(j, j->bounds[part + 1]) : j->plan.numel;
}

/* long: one part's scratch, its walk over the blocks and the cleanup, kept together. */
static void block_part(void *ctx, unsigned part) {
  Job *j = ctx;
  const HurrayResolvedScheme *s = &j->s;
  const HurrayQuantPlan *p = &j->plan;
  uint64_t u0 = j->bounds[part], u1 = j->bounds[part + 1];
  j->status[part] = HURRAY_OK;
  if (u0 >= u1) return;
  Sink *sink = malloc(sizeof *sink);
  bool rows = p->walk == HURRAY_WALK_ROWS_BLOCK;
  uint64_t width = rows ? p->inner : 1;
  size_t n = width <= SIZE_MAX / sizeof(Range) ? (size_t)width : 0; /* 0: past a 32-bit host */
  Range *ranges = n ? malloc(sizeof(Range) * n) : NULL;
  float *mul = n ? malloc(sizeof(float) * n) : NULL;
  int32_t *zp = n ? malloc(sizeof(int32_t) * n) : NULL;
  uint8_t *nan = n ? malloc(n) : NULL;
  if (!sink || !ranges || !mul || !zp || !nan) {
    j->status[part] = HURRAY_ERR_NO_MEMORY;
    goto done;
  }
  sink->out = j->codes;
  sink->bits = s->code_bits;
  sink->base = unit_start(j, u0);
  sink->fill = 0;
  prefault_init(sink, sink->base, part_end(j, part));
  bool finite = needs_finite(s);
  bool extreme = s->encoder == HURRAY_ENC_Q4_0;
  Params prm = {mul, zp, nan};
  /* BLOCKS walk: the segment of u + 1 follows from that of u, without the
   * division hurray__quant_segment needs (it costs as much as the block) */
  HurraySegment seg = hurray__quant_segment(p, u0);
  uint64_t block_in_row = rows ? 0 : u0 % p->nblocks;
  for (uint64_t u = u0; u < u1; u++) {
    if (!rows) {
      if (u > u0) {
        seg.start += seg.len;
        seg.g0 = u;
        block_in_row = block_in_row + 1 == p->nblocks ? 0 : block_in_row + 1;
        uint64_t left = p->along - block_in_row * p->block;
        seg.len = left < p->block ? left : p->block;
      }
      const float *x = j->x + seg.start;
      range_reset(&ranges[0]);
      range_run(&ranges[0], x, seg.len, extreme);
      if (finite && ranges[0].nonfinite) {
        j->status[part] = HURRAY_ERR_NOT_FINITE;
        j->bad_index[part] = seg.start + first_nonfinite(x, seg.len);
        goto done;
      }
      nan[0] = 0;
      if (!group_params(j, seg.g0, ranges[0], &mul[0], &zp[0], &nan[0])) {
        j->status[part] = HURRAY_ERR_NOT_FINITE;
        j->bad_index[part] = largest_at(j->x, seg.start, seg.len, 1);
        goto done;
      }
      emit(s, sink, j->x, seg.start, seg.len, prm, 0);
      continue;
    }
    uint64_t o = u / p->nblocks, b = u % p->nblocks;
    uint64_t a0 = b * p->block, a1 = a0 + p->block < p->along ? a0 + p->block : p->along;
    for (uint64_t k = 0; k < width; k++) range_reset(&ranges[k]);
    for (uint64_t a = a0; a < a1; a++) {
      range_rows(ranges, j->x + (o * p->along + a) * p->inner, width);
    }
    for (uint64_t k = 0; k < width; k++) {
      if (finite && ranges[k].nonfinite) {
        uint64_t start = (o * p->along + a0) * p->inner;
        j->status[part] = HURRAY_ERR_NOT_FINITE;
        j->bad_index[part] = start + first_nonfinite(j->x + start, (a1 - a0) * width);
        goto done;
      }
      nan[k] = 0;
      if (!group_params(j, u * width + k, ranges[k], &mul[k], &zp[k], &nan[k])) {
        j->status[part] = HURRAY_ERR_NOT_FINITE;
        j->bad_index[part] = largest_at(j->x, (o * p->along + a0) * p->inner + k, a1 - a0, width);
        goto done;
      }
    }
    for (uint64_t a = a0; a < a1; a++) {
      emit(s, sink, j->x, (o * p->along + a) * p->inner, width, prm, 1);
    }
  }
  sink_flush(sink);
done:
  free(sink);
  free(ranges);
  free(mul);
  free(zp);
  free(nan);
}

/* -------------------------------------------------------- global driver */

static void reduce_part(void *ctx, unsigned part) {
  Job *j = ctx;
  const HurrayQuantPlan *p = &j->plan;
  Range *r = j->ranges + (uint64_t)part * p->groups;
  for (uint64_t g = 0; g < p->groups; g++) range_reset(&r[g]);
  for (uint64_t u = j->bounds[part]; u < j->bounds[part + 1]; u++) {
    HurraySegment seg = hurray__quant_segment(p, u);
    if (seg.step) {
      range_rows(r + seg.g0, j->x + seg.start, seg.len);
    } else {
      range_run(&r[seg.g0], j->x + seg.start, seg.len, false);
    }
  }
}

static void encode_part(void *ctx, unsigned part) {
  Job *j = ctx;
  const HurrayQuantPlan *p = &j->plan;
  uint64_t u0 = j->bounds[part], u1 = j->bounds[part + 1];
  j->status[part] = HURRAY_OK;
  if (u0 >= u1) return;
  Sink *sink = malloc(sizeof *sink);
  if (sink == NULL) {
    j->status[part] = HURRAY_ERR_NO_MEMORY;
    return;
  }
  sink->out = j->codes;
  sink->bits = j->s.code_bits;
  sink->base = unit_start(j, u0);
  sink->fill = 0;
  prefault_init(sink, sink->base, part_end(j, part));
  for (uint64_t u = u0; u < u1; u++) {
    HurraySegment seg = hurray__quant_segment(p, u);
    Params at = {j->params.mul + seg.g0, j->params.zp + seg.g0, NULL};
    emit(&j->s, sink, j->x, seg.start, seg.len, at, seg.step);
  }
  sink_flush(sink);
  free(sink);
}

/* Splits [0, units) into parts whose first element sits at a flat index
 * divisible by 4, so packed codes of two parts never share a byte. */
/* Whether a part may start at unit `u` without sharing a byte with the part
 * before it: packed codes (down to 2 bits: 4 a byte) and 4-bit zero points
 * (2 a byte; unit u's first group is u, or u x inner by rows) are written
 * by read-modify-write, which two threads must not do to one byte. */
static bool part_may_start(const Job *j, uint64_t u) {
  if (unit_start(j, u) % 4 != 0) return false;
  if (j->zps == NULL || hurray_dtype_bits(j->s.code_dtype) >= 8) return true;
  uint64_t group = j->plan.walk == HURRAY_WALK_ROWS_BLOCK ? u * j->plan.inner : u;
  return group % 2 == 0;
}

static void split(Job *j, unsigned parts) {
  uint64_t units = unit_count(j);
  j->parts = parts;
  j->bounds[0] = 0;
  for (unsigned i = 1; i < parts; i++) {
    uint64_t b = units / parts * i;
    uint64_t limit = b + 64 < units ? b + 64 : units;
    while (b < limit && !part_may_start(j, b)) b++;
    if (b < j->bounds[i - 1] || b == limit) b = j->bounds[i - 1];
    j->bounds[i] = b;
  }
  j->bounds[parts] = units;
}

static HurrayStatus not_finite(const Job *j, uint64_t at, HurrayError *error) {
  const char *scheme = hurray_quant_scheme_name(j->s.scheme);
  if (!is_nonfinite(j->x[at])) { /* group_params: its block's scale overflowed */
    double most = (j->s.encoder == HURRAY_ENC_Q8_0 ? 127.0 : 8.0) * 65504.0;
    return hurray__fail(error, HURRAY_ERR_NOT_FINITE,
                        "element %llu (%g) is too large for %s: its block's float16 scale "
                        "would be infinite (%s holds magnitudes up to about %.4g)",
                        (unsigned long long)at, (double)j->x[at], scheme, scheme, most);
  }
  return hurray__fail(error, HURRAY_ERR_NOT_FINITE,
                      "element %llu is NaN or infinite; %s quantization needs finite input",
                      (unsigned long long)at, scheme);
}

static HurrayStatus run_global(Job *j, unsigned parts, HurrayError *error) {
  const HurrayQuantPlan *p = &j->plan;
  uint64_t bytes;
  if (!hurray__mul_u64(p->groups, (uint64_t)parts * sizeof(Range), &bytes) || bytes > SIZE_MAX) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "too many scale groups");
  }
  j->ranges = malloc(bytes ? (size_t)bytes : 1);
  j->params.mul = malloc(p->groups ? p->groups * sizeof(float) : 1);
  j->params.zp = malloc(p->groups ? p->groups * sizeof(int32_t) : 1);
  if (!j->ranges || !j->params.mul || !j->params.zp) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for %llu scale groups",
                        (unsigned long long)p->groups);
  }
  split(j, parts);
  hurray__parallel_run(parts, reduce_part, j);
  for (unsigned t = 1; t < parts; t++) {
    for (uint64_t g = 0; g < p->groups; g++) {
      range_merge(&j->ranges[g], &j->ranges[(uint64_t)t * p->groups + g]);
    }
  }
  for (uint64_t g = 0; g < p->groups; g++) {
    if (j->ranges[g].nonfinite) {
      /* find the first offending element in flat order */
      return not_finite(j, first_nonfinite(j->x, p->numel), error);
    }
    uint8_t unused = 0;
    /* Only the affine kinds take this walk, and they clamp their scales. */
    (void)group_params(j, g, j->ranges[g], &j->params.mul[g], &j->params.zp[g], &unused);
  }
  hurray__parallel_run(parts, encode_part, j);
  for (unsigned t = 0; t < parts; t++) {
    if (j->status[t] != HURRAY_OK) {
      return hurray__fail(error, j->status[t], "no memory for the staging buffer");
    }
  }
  return HURRAY_OK;
}

static HurrayStatus run_blocks(Job *j, unsigned parts, HurrayError *error) {
  split(j, parts);
  hurray__parallel_run(parts, block_part, j);
  for (unsigned t = 0; t < parts; t++) {
    if (j->status[t] == HURRAY_ERR_NOT_FINITE) {
      return not_finite(j, j->bad_index[t], error);
    }
    if (j->status[t] != HURRAY_OK) {
      return hurray__fail(error, j->status[t], "no memory for the kernel's work space");
    }
  }
  return HURRAY_OK;
}

/* ------------------------------------------------------------ descriptor */

static HurrayStatus add_owned_buffer(HurrayBufferList *list, void *data, uint64_t size,
                                     HurrayError *error) {
  HurrayBuffer *b = NULL;
  HURRAY_RETURN_NOT_OK(hurray_buffer_create(data, size, hurray__quant_free, NULL, &b, error));
  HurrayStatus st = hurray_buffer_set_alignment(b, 64, error);
  if (st != HURRAY_OK) {
    hurray_buffer_destroy(b);
    return st;
  }
  return hurray_buffer_list_push(list, b, error);
}

static HurrayStatus describe(const Job *j, uint32_t rank, const uint64_t *shape,
                             uint64_t code_bytes, uint64_t scale_bytes, uint64_t zp_bytes,
                             HurrayDescriptor **out, HurrayError *error) {
  const HurrayResolvedScheme *s = &j->s;
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_create(s->code_dtype, rank, shape, &d, error));
  HurrayStatus st = hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, code_bytes, 64,
                                                 HURRAY_SYNC_READY, NULL, error);
  if (st == HURRAY_OK) st = hurray_descriptor_set_layout_dense(d, 0, error);
  if (st == HURRAY_OK && j->scales) {
    st = hurray_descriptor_add_buffer(d, HURRAY_ROLE_SCALES, scale_bytes, 64, HURRAY_SYNC_READY,
                                      NULL, error);
  }
  if (st == HURRAY_OK && j->zps) {
    st = hurray_descriptor_add_buffer(d, HURRAY_ROLE_ZERO_POINTS, zp_bytes, 64, HURRAY_SYNC_READY,
                                      NULL, error);
  }
  if (st == HURRAY_OK) {
    switch (s->scheme) {
      case HURRAY_SCHEME_AFFINE:
        st = hurray_descriptor_set_quant_per_tensor_affine(d, j->inline_scale, j->inline_zp,
                                                           error);
        break;
      case HURRAY_SCHEME_PER_CHANNEL:
        st = hurray_descriptor_set_quant_per_channel_affine(d, s->axis, 1, s->scale_dtype, error);
        break;
      case HURRAY_SCHEME_NF4:
        st = hurray_descriptor_set_quant_nf4(d, s->block, 1, s->scale_dtype, error);
        break;
      case HURRAY_SCHEME_BLOCK_AFFINE:
      case HURRAY_SCHEME_Q8_0:
      case HURRAY_SCHEME_Q4_0:
        st = hurray_descriptor_set_quant_block_affine(d, s->axis, s->block, 1, s->scale_dtype,
                                                      error);
        break;
      default: {
        static const HurrayMxElement ELEMENTS[] = {HURRAY_MX_FP8_E4M3, HURRAY_MX_FP8_E5M2,
                                                   HURRAY_MX_FP6_E3M2, HURRAY_MX_FP6_E2M3,
                                                   HURRAY_MX_FP4_E2M1, HURRAY_MX_INT8};
        st = hurray_descriptor_set_quant_mx(d, ELEMENTS[s->scheme - HURRAY_SCHEME_MXFP8_E4M3],
                                            s->axis, 1, error);
        break;
      }
    }
  }
  if (st == HURRAY_OK && s->scheme != HURRAY_SCHEME_AFFINE && s->encoder == HURRAY_ENC_AFFINE) {
    st = j->zps ? hurray_descriptor_set_quant_zero_point_buffer(d, 2, s->code_dtype, error)
                : hurray_descriptor_set_quant_zero_point(d, s->zp_symmetric, error);
  }
  if (st == HURRAY_OK && s->scheme == HURRAY_SCHEME_Q4_0) {
    st = hurray_descriptor_set_quant_zero_point(d, 8, error);
  }
  if (st == HURRAY_OK) st = hurray_descriptor_validate(d, error);
  if (st != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return st;
  }
  *out = d;
  return HURRAY_OK;
}

/* ------------------------------------------------------------------ entry */

/* The source may sit at any byte address (a caller's buffer, a slice of a
 * file): elements are read through memcpy, never as a misaligned pointer. */
typedef struct Widen {
  const uint8_t *src;
  float *dst;
  uint64_t n;
  unsigned parts;
  HurrayDType dtype;
} Widen;

static void widen_part(void *ctx, unsigned part) {
  Widen *w = ctx;
  uint64_t a = w->n / w->parts * part,
           b = part + 1 == w->parts ? w->n : w->n / w->parts * (part + 1);
  if (w->dtype == HURRAY_DTYPE_FLOAT32) {
    memcpy(w->dst + a, w->src + 4 * a, (size_t)(b - a) * 4);
    return;
  }
  for (uint64_t k = a; k < b; k++) {
    uint16_t h;
    memcpy(&h, w->src + 2 * k, 2);
    w->dst[k] = w->dtype == HURRAY_DTYPE_BFLOAT16 ? hurray__bf16_to_f32(h) : hurray__f16_to_f32(h);
  }
}

static HurrayStatus check_arguments(const void *src, uint64_t src_size, HurrayDType src_dtype,
                                    uint32_t rank, const uint64_t *shape,
                                    const HurrayQuantizeOptions *options,
                                    HurrayDescriptor **descriptor_out,
                                    HurrayBufferList **buffers_out, uint64_t *numel,
                                    HurrayError *error) {
  if (descriptor_out) *descriptor_out = NULL;
  if (buffers_out) *buffers_out = NULL;
  if (options == NULL || descriptor_out == NULL || buffers_out == NULL ||
      (rank > 0 && shape == NULL)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "options, shape and both outputs must not be NULL");
  }
  if (options->version != HURRAY_QUANTIZE_OPTIONS_VERSION) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "options: unknown version %u",
                        options->version);
  }
  if (src_dtype != HURRAY_DTYPE_FLOAT32 && src_dtype != HURRAY_DTYPE_FLOAT16 &&
      src_dtype != HURRAY_DTYPE_BFLOAT16) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "quantize reads float32, float16 or bfloat16, not %s",
                        hurray_dtype_name(src_dtype) ? hurray_dtype_name(src_dtype) : "?");
  }
  if (rank > HURRAY_MAX_RANK) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "rank %u exceeds the limit of %u", rank,
                        (unsigned)HURRAY_MAX_RANK);
  }
  *numel = 1;
  for (uint32_t i = 0; i < rank; i++) {
    if (!hurray__mul_u64(*numel, shape[i], numel)) {
      return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the element count does not fit in 64 bits");
    }
  }
  if (src == NULL && *numel > 0) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "src is NULL");
  }
  uint64_t src_need;
  if (!hurray__mul_u64(*numel, src_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2, &src_need)) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the source size does not fit in 64 bits");
  }
  if (src_size < src_need) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "src holds %llu bytes; the shape needs %llu", (unsigned long long)src_size,
                        (unsigned long long)src_need);
  }
  return HURRAY_OK;
}

/* Sizes of the outputs, and the outputs themselves (zeroed zero points). */
typedef struct Outputs {
  uint64_t code_bytes, scale_bytes, zp_bytes;
  void *codes, *scales, *zps;
} Outputs;

static HurrayStatus allocate_outputs(Job *j, uint64_t numel, Outputs *o, HurrayError *error) {
  bool per_tensor = j->s.scheme == HURRAY_SCHEME_AFFINE;
  HurrayStatus st = hurray_dtype_storage_bytes(j->s.code_dtype, numel, &o->code_bytes);
  if (st == HURRAY_OK && !per_tensor) {
    st = hurray_dtype_storage_bytes(j->s.scale_dtype, j->plan.groups, &o->scale_bytes);
  }
  bool zp_buffer = j->s.encoder == HURRAY_ENC_AFFINE && !j->s.symmetric && !per_tensor;
  if (st == HURRAY_OK && zp_buffer) {
    st = hurray_dtype_storage_bytes(j->s.code_dtype, j->plan.groups, &o->zp_bytes);
  }
  if (st != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW,
                        "the tensor's byte size does not fit in 64 bits");
  }
  if (zp_buffer) {
    o->zps = hurray__quant_alloc(o->zp_bytes);
    if (o->zps == NULL)
      return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for zero points");
    memset(o->zps, 0, (size_t)o->zp_bytes);
  }
  o->codes = hurray__quant_alloc(o->code_bytes);
  if (!per_tensor) o->scales = hurray__quant_alloc(o->scale_bytes);
  if (o->codes == NULL || (!per_tensor && o->scales == NULL)) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory for %llu code bytes",
                        (unsigned long long)o->code_bytes);
  }
  return HURRAY_OK;
}

/* Points j->x at float32 input: `src` itself, or *widened, a float32 copy. */
static HurrayStatus widen_input(Job *j, const void *src, HurrayDType src_dtype, uint64_t numel,
                                uint64_t input_bytes, unsigned parts, float **widened,
                                HurrayError *error) {
  /* float32 is read in place when it is aligned as float; anything else is
   * staged into aligned float32 first. */
  if (numel == 0 || (src_dtype == HURRAY_DTYPE_FLOAT32 && (uintptr_t)src % _Alignof(float) == 0)) {
    j->x = src;
    return HURRAY_OK;
  }
  *widened = input_bytes <= SIZE_MAX ? malloc((size_t)input_bytes) : NULL;
  if (*widened == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory to widen the input to float32");
  }
  Widen w = {src, *widened, numel, parts, src_dtype};
  hurray__parallel_run(parts, widen_part, &w);
  j->x = *widened;
  return HURRAY_OK;
}

/* Hands the outputs to a new descriptor and buffer list; what it takes
 * leaves `o` (set to NULL there), the rest the caller frees. */
static HurrayStatus package(const Job *j, uint32_t rank, const uint64_t *shape, Outputs *o,
                            HurrayDescriptor **descriptor_out, HurrayBufferList **buffers_out,
                            HurrayError *error) {
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HURRAY_RETURN_NOT_OK(
      describe(j, rank, shape, o->code_bytes, o->scale_bytes, o->zp_bytes, &d, error));
  HurrayStatus st = hurray_buffer_list_create(&list, error);
  if (st == HURRAY_OK) {
    st = add_owned_buffer(list, o->codes, o->code_bytes, error);
    o->codes = NULL;
  }
  if (st == HURRAY_OK && o->scales) {
    st = add_owned_buffer(list, o->scales, o->scale_bytes, error);
    o->scales = NULL;
  }
  if (st == HURRAY_OK && o->zps) {
    st = add_owned_buffer(list, o->zps, o->zp_bytes, error);
    o->zps = NULL;
  }
  if (st != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(list);
    return st;
  }
  *descriptor_out = d;
  *buffers_out = list;
  return HURRAY_OK;
}

HurrayStatus hurray_quantize(const void *src, uint64_t src_size, HurrayDType src_dtype,
                             uint32_t rank, const uint64_t *shape,
                             const HurrayQuantizeOptions *options,
                             HurrayDescriptor **descriptor_out, HurrayBufferList **buffers_out,
                             HurrayError *error) {
  uint64_t numel = 0;
  HURRAY_RETURN_NOT_OK(check_arguments(src, src_size, src_dtype, rank, shape, options,
                                       descriptor_out, buffers_out, &numel, error));
  Job *j = calloc(1, sizeof *j);
  if (j == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "no memory");
  Outputs o = {0, 0, 0, NULL, NULL, NULL};
  float *widened = NULL;
  HurrayStatus st = hurray__resolve_scheme(options, rank, &j->s, error);
  if (st == HURRAY_OK) {
    /* NF4 blocks run over the flattened tensor. */
    st = j->s.scheme == HURRAY_SCHEME_NF4
             ? hurray__quant_plan(&j->plan, 1, &numel, 0, j->s.block, false, error)
             : hurray__quant_plan(&j->plan, rank, shape, j->s.axis, j->s.block,
                                  j->s.scheme == HURRAY_SCHEME_AFFINE, error);
  }
  if (st == HURRAY_OK) st = allocate_outputs(j, numel, &o, error);
  uint64_t input_bytes;
  if (!hurray__mul_u64(numel, 4, &input_bytes)) input_bytes = UINT64_MAX;
  unsigned parts = hurray__quant_threads(options->threads, input_bytes);
  if (st == HURRAY_OK) {
    st = widen_input(j, src, src_dtype, numel, input_bytes, parts, &widened, error);
  }
  /* Large code buffers are populated whole, in measured page sizes
   * (fresh_pages.h); smaller ones a chunk ahead of the encoder (prefault.h). */
  if (st == HURRAY_OK && o.code_bytes >= HURRAY_FRESH_MAPPING_MIN) {
    hurray__prefault_write(o.codes, o.code_bytes, parts, hurray__fresh_pages_choice());
  }
  if (st == HURRAY_OK) {
    j->codes = o.codes;
    j->scales = o.scales;
    j->zps = o.zps;
    j->inline_scale = 1.0;
    j->inline_zp = j->s.zp_symmetric;
    bool blocks = j->plan.walk == HURRAY_WALK_BLOCKS || j->plan.walk == HURRAY_WALK_ROWS_BLOCK;
    st = blocks ? run_blocks(j, parts, error) : run_global(j, parts, error);
  }
  if (st == HURRAY_OK) st = package(j, rank, shape, &o, descriptor_out, buffers_out, error);
  free(o.codes);
  free(o.scales);
  free(o.zps);
  free(widened);
  free(j->ranges);
  free(j->params.mul);
  free(j->params.zp);
  free(j);
  return st;
}
