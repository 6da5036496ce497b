/* The walk over a tensor shared by both kernel directions, plus the
 * plumbing they share: threads and aligned buffers. */
#include "plan.h"

#include <pthread.h>
#include <stdlib.h>

#include "../core/checked.h"
#include "../core/error.h"

HurrayStatus hurray__quant_plan(HurrayQuantPlan *p, uint32_t rank, const uint64_t *shape,
                                uint32_t axis, uint64_t block, bool per_tensor,
                                HurrayError *error) {
  *p = (HurrayQuantPlan){0};
  uint64_t numel = 1;
  for (uint32_t i = 0; i < rank; i++) {
    if (!hurray__mul_u64(numel, shape[i], &numel)) {
      return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the element count does not fit in 64 bits");
    }
  }
  p->numel = numel;
  if (per_tensor || rank == 0) {
    p->walk = HURRAY_WALK_FLAT;
    p->outer = 1;
    p->along = numel;
    p->inner = 1;
    p->groups = 1;
    p->segments = hurray__ceil_div_u64(numel, HURRAY_FLAT_CHUNK);
    return HURRAY_OK;
  }
  p->outer = 1;
  p->inner = 1;
  bool fits = true;
  for (uint32_t i = 0; i < axis; i++) fits &= hurray__mul_u64(p->outer, shape[i], &p->outer);
  for (uint32_t i = axis + 1; i < rank; i++)
    fits &= hurray__mul_u64(p->inner, shape[i], &p->inner);
  if (!fits) return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the shape does not fit in 64 bits");
  p->along = shape[axis];
  p->block = block;
  if (block == 0) {
    p->groups = p->along;
    p->walk = p->inner == 1 ? HURRAY_WALK_CHANNEL_LAST : HURRAY_WALK_ROWS_CHANNEL;
    p->segments = p->inner == 1 ? p->outer : (numel ? p->outer * p->along : 0);
  } else {
    p->nblocks = hurray__ceil_div_u64(p->along, block);
    /* with a zero-sized dimension the other products can be anything */
    if (!hurray__mul_u64(p->outer, p->nblocks, &p->groups) ||
        !hurray__mul_u64(p->groups, p->inner, &p->groups)) {
      return hurray__fail(error, HURRAY_ERR_OVERFLOW, "the scale count does not fit in 64 bits");
    }
    p->walk = p->inner == 1 ? HURRAY_WALK_BLOCKS : HURRAY_WALK_ROWS_BLOCK;
    p->segments = numel == 0 ? 0 : p->inner == 1 ? p->outer * p->nblocks : p->outer * p->along;
  }
  if (numel == 0) p->segments = 0;
  return HURRAY_OK;
}

typedef struct Worker {
  void (*fn)(void *ctx, unsigned part);
  void *ctx;
  unsigned part;
} Worker;

static void *worker_main(void *arg) {
  Worker *w = arg;
  w->fn(w->ctx, w->part);
  return NULL;
}

#define HURRAY_MAX_QUANT_THREADS 64u

void hurray__parallel_run(unsigned parts, void (*fn)(void *ctx, unsigned part), void *ctx) {
  if (parts > HURRAY_MAX_QUANT_THREADS) parts = HURRAY_MAX_QUANT_THREADS;
  pthread_t ids[HURRAY_MAX_QUANT_THREADS];
  Worker workers[HURRAY_MAX_QUANT_THREADS];
  bool started[HURRAY_MAX_QUANT_THREADS] = {false};
  for (unsigned i = 1; i < parts; i++) {
    workers[i] = (Worker){fn, ctx, i};
    started[i] = pthread_create(&ids[i], NULL, worker_main, &workers[i]) == 0;
  }
  fn(ctx, 0);
  for (unsigned i = 1; i < parts; i++) {
    if (started[i]) {
      pthread_join(ids[i], NULL);
    } else {
      fn(ctx, i);
    }
  }
}

unsigned hurray__quant_threads(uint32_t threads, uint64_t bytes) {
  /* Below a few MiB, starting a thread costs more than it saves. */
  const uint64_t per_thread = 4u << 20;
  if (threads <= 1 || bytes < 2 * per_thread) return 1;
  uint64_t useful = bytes / per_thread;
  unsigned n = threads < HURRAY_MAX_QUANT_THREADS ? threads : HURRAY_MAX_QUANT_THREADS;
  return useful < n ? (unsigned)useful : n;
}

void *hurray__quant_alloc(uint64_t bytes) {
  uint64_t rounded = (bytes + 63u) & ~(uint64_t)63u;
  if (rounded < bytes || rounded > SIZE_MAX) return NULL;
  if (rounded == 0) rounded = 64;
  return aligned_alloc(64, (size_t)rounded);
}

void hurray__quant_free(void *data, void *ctx) {
  (void)ctx;
  free(data);
}
