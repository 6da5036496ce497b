/*
 * How the quantization kernels walk a tensor: as runs of consecutive
 * row-major elements ("segments"), each tied to its scale groups. Shared by
 * quantize.c and dequantize.c so both directions agree on which scale each
 * element uses.
 *
 * The tensor is viewed as [outer, along, inner] around the quantization
 * axis. A segment covers `len` elements from flat index `start`; element k
 * of it uses group g0 + k * step, with step 0 (one group) or 1 (one group
 * per element, consecutive).
 */
#ifndef HURRAY_SRC_QUANT_PLAN_H
#define HURRAY_SRC_QUANT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "hurray/common.h"
#include "hurray/descriptor.h"

typedef enum HurrayWalk {
  HURRAY_WALK_FLAT = 0,         /* one group for everything (per-tensor) */
  HURRAY_WALK_BLOCKS = 1,       /* blocks of K along a contiguous axis: a segment per block */
  HURRAY_WALK_ROWS_BLOCK = 2,   /* blocks along a strided axis: a segment per row, step 1 */
  HURRAY_WALK_ROWS_CHANNEL = 3, /* per-channel, strided axis: a segment per row, step 0 */
  HURRAY_WALK_CHANNEL_LAST = 4  /* per-channel along the last axis: a segment per row, step 1 */
} HurrayWalk;

#define HURRAY_FLAT_CHUNK 8192u

typedef struct HurrayQuantPlan {
  HurrayWalk walk;
  uint64_t numel;
  uint64_t outer, along, inner;
  uint64_t block;    /* K for block kinds, else 0 */
  uint64_t nblocks;  /* ceil(along / K) for block kinds */
  uint64_t groups;   /* number of scales */
  uint64_t segments; /* number of segments */
} HurrayQuantPlan;

typedef struct HurraySegment {
  uint64_t start, len, g0;
  unsigned step;
} HurraySegment;

/* Plans a walk. `axis` < rank (ignored for FLAT and for flat NF4 blocks,
 * where the caller passes rank 1 and shape {numel}); `block` = 0 means
 * per-channel, `per_tensor` overrides both. OVERFLOW if the sizes do not
 * fit. */
HurrayStatus hurray__quant_plan(HurrayQuantPlan *plan, uint32_t rank, const uint64_t *shape,
                                uint32_t axis, uint64_t block, bool per_tensor,
                                HurrayError *error);

static inline HurraySegment hurray__quant_segment(const HurrayQuantPlan *p, uint64_t s) {
  HurraySegment g;
  switch (p->walk) {
    case HURRAY_WALK_FLAT:
      g.start = s * HURRAY_FLAT_CHUNK;
      g.len = p->numel - g.start < HURRAY_FLAT_CHUNK ? p->numel - g.start : HURRAY_FLAT_CHUNK;
      g.g0 = 0;
      g.step = 0;
      break;
    case HURRAY_WALK_BLOCKS: {
      uint64_t o = s / p->nblocks, b = s % p->nblocks;
      g.start = o * p->along + b * p->block;
      g.len = p->along - b * p->block < p->block ? p->along - b * p->block : p->block;
      g.g0 = s;
      g.step = 0;
      break;
    }
    case HURRAY_WALK_ROWS_BLOCK: {
      uint64_t o = s / p->along, a = s % p->along;
      g.start = s * p->inner;
      g.len = p->inner;
      g.g0 = (o * p->nblocks + a / p->block) * p->inner;
      g.step = 1;
      break;
    }
    case HURRAY_WALK_ROWS_CHANNEL:
      g.start = s * p->inner;
      g.len = p->inner;
      g.g0 = s % p->along;
      g.step = 0;
      break;
    default: /* HURRAY_WALK_CHANNEL_LAST */
      g.start = s * p->along;
      g.len = p->along;
      g.g0 = 0;
      g.step = 1;
      break;
  }
  return g;
}

/* Runs fn(ctx, part) for part = 0 .. parts-1, on up to `parts` threads (the
 * caller's included). Falls back to running them in turn if a thread cannot
 * be started, so the outcome never depends on it. */
void hurray__parallel_run(unsigned parts, void (*fn)(void *ctx, unsigned part), void *ctx);

/* How many threads to use for `bytes` of work when the caller allows
 * `threads`: small jobs stay on the calling thread. */
unsigned hurray__quant_threads(uint32_t threads, uint64_t bytes);

/* 64-byte aligned allocation of at least one byte, and its release callback
 * for hurray_buffer_create. */
void *hurray__quant_alloc(uint64_t bytes);
void hurray__quant_free(void *data, void *ctx);

#endif
