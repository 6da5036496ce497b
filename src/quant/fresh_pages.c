/* Fresh output memory: populated ahead of the kernel, page size measured
 * (fresh_pages.h). */
#define _GNU_SOURCE /* MADV_POPULATE_WRITE (prefault.h) */
#include "prefault.h"

#include "fresh_pages.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan.h"

#define HUGE_STEP ((uintptr_t)2 << 20)

HurrayPageChoice hurray__fresh_pages_choice(void) {
  const char *v = getenv("HURRAY_FRESH_PAGES");
  if (v != NULL && strcmp(v, "small") == 0) return HURRAY_PAGES_SMALL;
  if (v != NULL && strcmp(v, "huge") == 0) return HURRAY_PAGES_HUGE;
  return HURRAY_PAGES_PROBE;
}

#if defined(__linux__)

static void populate(uintptr_t a, uintptr_t b) {
  if (b > a) (void)madvise((void *)a, (size_t)(b - a), MADV_POPULATE_WRITE);
}

static void advise(uintptr_t a, uintptr_t b, bool huge) {
#  if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  if (b > a) (void)madvise((void *)a, (size_t)(b - a), huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#  else
  (void)a;
  (void)b;
  (void)huge;
#  endif
}

static double seconds(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return 0;
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The whole 2 MiB steps inside [a, b), as [*h0, *h1); false when there are
 * fewer than `min` of them. */
static bool huge_steps(uintptr_t a, uintptr_t b, uintptr_t min, uintptr_t *h0, uintptr_t *h1) {
  *h0 = (a + HUGE_STEP - 1) & ~(HUGE_STEP - 1);
  *h1 = b & ~(HUGE_STEP - 1);
  return *h1 > *h0 && *h1 - *h0 >= min * HUGE_STEP;
}

static void populate_steps(uintptr_t a, uintptr_t b) {
  for (; a < b; a += HUGE_STEP) populate(a, a + HUGE_STEP < b ? a + HUGE_STEP : b);
}

/* A part's advice, given on the calling thread before any part is
 * populated: a madvise hint takes the process's mmap lock for writing, so
 * a thread that gave one waited for the other threads' populate calls,
 * which hold it for reading (2 threads ran at 1.2 CPUs instead of 1.9). */
static void advise_part(uintptr_t a, uintptr_t b, HurrayPageChoice choice) {
  uintptr_t h0, h1;
  bool probe = choice == HURRAY_PAGES_PROBE;
  if (choice == HURRAY_PAGES_AS_IS || !huge_steps(a, b, probe ? 2 : 1, &h0, &h1)) return;
  if (probe) { /* the timed first step: small pages */
    advise(h0, h0 + HUGE_STEP, false);
    h0 += HUGE_STEP;
  }
  advise(h0, h1, choice != HURRAY_PAGES_SMALL);
}

/* [h0, h1), advised by advise_part, is whole 2 MiB steps, at least two.
 * The first step (small pages) is timed; huge steps follow while none
 * takes longer. The first slow one ends them: the rest gets small pages,
 * populated a step at a time so that another thread's advice waits for
 * one step at most. One step of the wrong size is what the measurement
 * costs (about 1.5 ms on the development VM); a run of huge steps can turn
 * slow midway, when the memory freed moments before runs out. */
static void populate_probed(uintptr_t h0, uintptr_t h1) {
  double t = seconds();
  populate(h0, h0 + HUGE_STEP);
  double small = seconds() - t;
  for (uintptr_t at = h0 + HUGE_STEP; at < h1;) {
    t = seconds();
    populate(at, at + HUGE_STEP);
    at += HUGE_STEP;
    if (seconds() - t > small) {
      advise(at, h1, false);
      populate_steps(at, h1);
      return;
    }
  }
}

static void populate_part(uintptr_t a, uintptr_t b, HurrayPageChoice choice) {
  uintptr_t h0, h1;
  if (choice != HURRAY_PAGES_PROBE || !huge_steps(a, b, 2, &h0, &h1)) {
    populate(a, b);
    return;
  }
  populate(a, h0);
  populate_probed(h0, h1);
  populate(h1, b);
}

typedef struct Prefault {
  uintptr_t first, last; /* whole pages only */
  uintptr_t unit;        /* parts start and end on multiples of it */
  unsigned parts;
  HurrayPageChoice choice;
} Prefault;

static uintptr_t part_start(const Prefault *f, unsigned part) {
  if (part == 0) return f->first;
  if (part == f->parts) return f->last;
  uintptr_t at = f->first + (f->last - f->first) / f->parts * part;
  at &= ~(f->unit - 1);
  return at < f->first ? f->first : at;
}

static void prefault_part(void *ctx, unsigned part) {
  const Prefault *f = ctx;
  populate_part(part_start(f, part), part_start(f, part + 1), f->choice);
}

void hurray__prefault_write(void *out, uint64_t bytes, uint32_t threads, HurrayPageChoice choice) {
  uintptr_t a, b;
  if (bytes > UINTPTR_MAX - (uintptr_t)out ||
      !hurray__whole_pages(out, (uint8_t *)out + bytes, &a, &b)) {
    return;
  }
  long size = sysconf(_SC_PAGESIZE);
  uintptr_t page = size > 0 ? (uintptr_t)size : 4096u;
  Prefault f = {a, b, choice == HURRAY_PAGES_AS_IS ? page : HUGE_STEP,
                hurray__quant_threads(threads, bytes), choice};
  uintptr_t units = (b - a) / f.unit;
  if (units == 0) units = 1;
  if (f.parts > units) f.parts = (unsigned)units;
  for (unsigned part = 0; part < f.parts; part++) {
    advise_part(part_start(&f, part), part_start(&f, part + 1), choice);
  }
  hurray__parallel_run(f.parts, prefault_part, &f);
}

#else

void hurray__prefault_write(void *out, uint64_t bytes, uint32_t threads, HurrayPageChoice choice) {
  (void)out;
  (void)bytes;
  (void)threads;
  (void)choice;
}

#endif
