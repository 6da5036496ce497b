/*
 * The size of the writes a large buffer goes out in, which decides the
 * page-cache folios the file then sits in until it is evicted.
 *
 * A write of 2 MiB at a 2 MiB boundary fills one 2 MiB folio, which any
 * later mapping of the file (verify, a warm load) maps with one fault; the
 * 64 KiB folios of 64 KiB writes take 32 faults for the same bytes and read
 * at about 0.65x memory speed (bench/results/io-speed.md, section 6). But
 * which write is cheaper depends on where the kernel finds the memory, not
 * on the program: on the development VM (free-page reporting) 2 MiB writes
 * cost the same as 64 KiB ones on a quiet guest and 1.3x more once the guest
 * has reported its free memory to the host. So the choice is measured on the
 * file being written, as fresh_pages.h does for anonymous memory: the first
 * whole 2 MiB region of a large buffer goes out in 64 KiB writes and is
 * timed, then each later region in one write, for as long as one of those
 * is not markedly slower. After one that is, 64 KiB writes for 1, 2, 4 ...
 * up to 64 regions, then a new probe. Only the size of the writes changes,
 * never the bytes (ADR-0026). The writer also gathers a region that buffers
 * share, or that its stage of small writes begins, and writes it by the
 * same rule (hurray__write_pieces_gather); the raw writer does not.
 *
 * Internal: the writer (writer.c) and the converter's raw writer use it.
 */
#ifndef HURRAY_SRC_IO_WRITE_PIECES_H
#define HURRAY_SRC_IO_WRITE_PIECES_H

#include <stdbool.h>
#include <stdint.h>

/* The small write: the size of the pipe through which copy_file_range and
 * cp move pages, which runs at the speed of cp + sync wherever measured
 * (bench/results/io-speed.md, sections 2, 4 and 5). */
#define HURRAY_WRITE_STEP ((uint64_t)64 << 10)
/* The large write: one PMD-mappable folio. */
#define HURRAY_HUGE_WRITE_STEP ((uint64_t)2 << 20)

typedef enum HurrayWriteFolios {
  HURRAY_WRITE_FOLIOS_SMALL, /* 64 KiB writes only */
  HURRAY_WRITE_FOLIOS_HUGE,  /* 2 MiB writes wherever a whole aligned region goes out */
  HURRAY_WRITE_FOLIOS_PROBE, /* 2 MiB writes while they are not slower (the default) */
} HurrayWriteFolios;

/* HURRAY_WRITE_FOLIOS=small, huge or probe (the default; anything else
 * means it too), read when a writer opens. */
HurrayWriteFolios hurray__write_folios_choice(void);

/* The state of one file's writes. Plain data, no resources. */
typedef struct HurrayWritePieces {
  HurrayWriteFolios choice;
  int state;            /* write_pieces.c */
  uint64_t probe_next;  /* the region timed in small writes: its next byte */
  uint64_t probe_end;   /* and its end */
  uint64_t probe_ns;    /* its time so far */
  uint64_t small_ns;    /* the whole region's time, once probed */
  uint32_t wait;        /* regions of small writes left before the next probe */
  uint32_t backoff;     /* the wait after the next slow huge write */
  uint64_t piece_at;    /* the piece last handed out, not yet accounted */
  uint64_t piece_len;   /* 0: none */
  uint64_t piece_clock; /* the write clock when it was handed out */
} HurrayWritePieces;

void hurray__write_pieces_init(HurrayWritePieces *p, HurrayWriteFolios choice);

/* The length of the next write of a large buffer, at file offset
 * `position` with `left` bytes of it still to go (> 0): at most `left`,
 * ending on a 64 KiB or 2 MiB boundary of the file. `write_clock` is the
 * caller's running total of nanoseconds spent in write calls: the piece
 * handed out before is timed by its difference, if the file has grown by
 * exactly that piece since. */
uint64_t hurray__write_piece(HurrayWritePieces *p, uint64_t position, uint64_t left,
                             uint64_t write_clock);

/* What the writer does with a 2 MiB region that buffers share: where a
 * buffer's tail, or a stage of small writes, begins a region, it, what
 * follows it and the head of the next buffer can be gathered in the
 * writer's stage. */
typedef enum HurrayGather {
  HURRAY_GATHER_NO,    /* not gathered: the tail goes out in 64 KiB pieces */
  HURRAY_GATHER_WHOLE, /* gathered, then one 2 MiB write */
  HURRAY_GATHER_PROBE, /* gathered, then 64 KiB writes, timed as the probe */
} HurrayGather;

/* The decision for the region a tail or a stage begins, asked once per
 * such region.
 * A region not gathered counts as one region of small writes in a wait; a
 * probe is then due, and it can be made on a gathered region as well as
 * inside one buffer, so that files of buffers under 4 MiB (which seldom
 * hold a whole region followed by more of the same buffer) are probed too. */
HurrayGather hurray__write_pieces_gather(HurrayWritePieces *p);

/* The gathered region went out: `whole` when the region was complete (a
 * region cut short by the end of the file is not), in `ns` nanoseconds of
 * write calls. A whole probe region sets the probe's time; a 2 MiB write
 * markedly slower than it sends the writer back to small writes, as
 * hurray__write_piece does. */
void hurray__write_pieces_gathered(HurrayWritePieces *p, HurrayGather kind, bool whole,
                                   uint64_t ns);

#endif
