/* The size of a large buffer's writes, measured per file (write_pieces.h). */
#include "write_pieces.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum {
  PROBE_PENDING, /* the next whole 2 MiB region is the probe */
  PROBING,       /* the region at probe_next goes out in small writes */
  HUGE,          /* whole regions in one write */
  WAITING,       /* small writes for `wait` more regions, then a probe */
  SMALL,         /* small writes only (HURRAY_WRITE_FOLIOS=small) */
  GATHERING,     /* a gathered region is the probe, not yet written */
};

/* A huge write more than this much slower than the probe's small writes
 * sends the writer back to small ones. Measured per write on the
 * development VM (io-speed.md, section 6): 0.5-0.8 ms for 2 MiB while the
 * kernel has recently freed memory at hand, 3.7-6 ms once it has not, and
 * now and then one write of 2 ms among fast ones. */
#define SLOWER(ns, small) ((ns) > (small) + (small) / 4)
/* After a slow huge write, small writes for 1 region, then for 2, 4, ...
 * up to this many before each new probe: a slow spell that passes (seen:
 * five slow writes among hundreds of fast ones) costs little, and one that
 * lasts costs one slow write per this many regions. */
#define MAX_WAIT_REGIONS 64u

HurrayWriteFolios hurray__write_folios_choice(void) {
  const char *v = getenv("HURRAY_WRITE_FOLIOS");
  if (v != NULL && strcmp(v, "small") == 0) return HURRAY_WRITE_FOLIOS_SMALL;
  if (v != NULL && strcmp(v, "huge") == 0) return HURRAY_WRITE_FOLIOS_HUGE;
  return HURRAY_WRITE_FOLIOS_PROBE;
}

void hurray__write_pieces_init(HurrayWritePieces *p, HurrayWriteFolios choice) {
  memset(p, 0, sizeof *p);
  p->choice = choice;
  p->state = choice == HURRAY_WRITE_FOLIOS_SMALL ? SMALL : PROBE_PENDING;
  p->backoff = 1;
}

/* A 2 MiB write took `ns`: one markedly slower than the probe ends the
 * huge writes for a while. */
static void huge_took(HurrayWritePieces *p, uint64_t ns) {
  if (p->state == HUGE && SLOWER(ns, p->small_ns)) {
    p->state = WAITING;
    p->wait = p->backoff;
    if (p->backoff < MAX_WAIT_REGIONS) p->backoff *= 2;
  }
}

/* The piece handed out last took `ns` in write calls. A probe counts
 * only if it timed every byte of its region: a piece of it that was not
 * timed, or a gap, sends it back to wait for the next whole region. */
static void account(HurrayWritePieces *p, uint64_t at, uint64_t len, uint64_t ns) {
  if (p->state == PROBING) {
    if (at != p->probe_next || len > p->probe_end - at) {
      p->state = PROBE_PENDING;
      return;
    }
    p->probe_ns += ns;
    p->probe_next += len;
    if (p->probe_next == p->probe_end) {
      p->small_ns = p->probe_ns;
      p->state = HUGE;
    }
  } else if (len == HURRAY_HUGE_WRITE_STEP) {
    huge_took(p, ns);
  }
}

HurrayGather hurray__write_pieces_gather(HurrayWritePieces *p) {
  if (p->state == SMALL) return HURRAY_GATHER_NO;
  if (p->choice == HURRAY_WRITE_FOLIOS_HUGE || p->state == HUGE) return HURRAY_GATHER_WHOLE;
  if (p->state == WAITING) {
    if (p->wait > 0) {
      p->wait--;
      return HURRAY_GATHER_NO;
    }
    p->state = PROBE_PENDING;
  }
  if (p->state != PROBE_PENDING) return HURRAY_GATHER_NO;
  p->state = GATHERING;
  return HURRAY_GATHER_PROBE;
}

void hurray__write_pieces_gathered(HurrayWritePieces *p, HurrayGather kind, bool whole,
                                   uint64_t ns) {
  if (kind == HURRAY_GATHER_WHOLE && whole) huge_took(p, ns);
  if (kind == HURRAY_GATHER_PROBE && p->state == GATHERING) {
    p->state = whole ? HUGE : PROBE_PENDING;
    if (whole) p->small_ns = ns;
  }
}

static uint64_t choose(HurrayWritePieces *p, uint64_t position, uint64_t left) {
  uint64_t small = HURRAY_WRITE_STEP - position % HURRAY_WRITE_STEP;
  if (small > left) small = left;
  bool whole_region = position % HURRAY_HUGE_WRITE_STEP == 0 && left >= HURRAY_HUGE_WRITE_STEP;
  if (!whole_region || p->state == SMALL) return small;
  if (p->choice == HURRAY_WRITE_FOLIOS_HUGE || p->state == HUGE) return HURRAY_HUGE_WRITE_STEP;
  if (p->state == WAITING) {
    if (p->wait > 0) {
      p->wait--;
      return small;
    }
    p->state = PROBE_PENDING;
  }
  /* Probe a region only where bytes of the same buffer follow it: its
   * last piece is timed when the next piece is asked for. A probe whose
   * end was never timed starts again at the next whole region. */
  if (p->state != PROBING && left > HURRAY_HUGE_WRITE_STEP) {
    p->state = PROBING;
    p->probe_next = position;
    p->probe_end = position + HURRAY_HUGE_WRITE_STEP;
    p->probe_ns = 0;
  }
  return small;
}

uint64_t hurray__write_piece(HurrayWritePieces *p, uint64_t position, uint64_t left,
                             uint64_t write_clock) {
  if (p->piece_len > 0) {
    if (position == p->piece_at + p->piece_len) {
      account(p, p->piece_at, p->piece_len, write_clock - p->piece_clock);
    } else if (p->state == PROBING) {
      p->state = PROBE_PENDING;
    }
  }
  uint64_t n = choose(p, position, left);
  p->piece_at = position;
  p->piece_len = n;
  p->piece_clock = write_clock;
  return n;
}
