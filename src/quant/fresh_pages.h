/*
 * Populating a fresh output all at once, before a kernel writes it, and
 * choosing the size of its pages.
 *
 * Anonymous memory comes in 4 KiB pages or, where the mapping is advised
 * MADV_HUGEPAGE, in 2 MiB ones. Which is cheaper depends on where the
 * kernel finds them, not on the program: on the development VM (free-page
 * reporting) a 2 MiB page freed moments before costs a fifth of its 512
 * small pages, and one the host has taken back costs twice as much
 * (ADR-0021, amendment "the page size of a fresh output"). So the choice is
 * measured on the memory itself: one 2 MiB step in small pages, then huge
 * pages for as long as a step of them is not slower than that.
 */
#ifndef HURRAY_SRC_QUANT_FRESH_PAGES_H
#define HURRAY_SRC_QUANT_FRESH_PAGES_H

#include <stdint.h>

/* From this size on a fresh output is a mapping of its own, whose pages
 * are populated whole and whose 2 MiB-aligned interior only it uses:
 * glibc maps every allocation this large anew (its largest mmap
 * threshold, on 64-bit). Below it freed heap memory is reused without a
 * fault, so a loop of outputs is cheaper left to the heap. */
#define HURRAY_FRESH_MAPPING_MIN ((uint64_t)32 << 20)

typedef enum HurrayPageChoice {
  HURRAY_PAGES_AS_IS, /* no advice: memory the caller does not own whole */
  HURRAY_PAGES_SMALL, /* 4 KiB pages (MADV_NOHUGEPAGE) */
  HURRAY_PAGES_HUGE,  /* 2 MiB pages where the kernel has them (MADV_HUGEPAGE) */
  HURRAY_PAGES_PROBE, /* huge pages while a step of them is not slower */
} HurrayPageChoice;

/* The choice for fresh outputs: HURRAY_FRESH_PAGES=small, huge or probe
 * (the default; anything else means it too), read at each call. */
HurrayPageChoice hurray__fresh_pages_choice(void);

/* Makes the whole pages inside [out, out + bytes) present and writable now,
 * for a fresh output that a kernel is about to write: MADV_POPULATE_WRITE
 * on up to `threads` threads (split as hurray__quant_threads would, at 2 MiB
 * boundaries), where the kernel's own writes would take a trap per 4 KiB
 * page (issue 19: 0.13 against 0.20 CPU seconds per 256 MiB on the
 * development VM, and faults that did not scale to 2 threads). Any choice
 * but HURRAY_PAGES_AS_IS advises the 2 MiB-aligned interior of the range,
 * so the caller must own all of it (a mapping of its own, not heap memory
 * with neighbours). Advice only: the content is unchanged, and where the
 * system lacks the advice (Linux before 5.14, other systems) nothing
 * happens and the writes fault as before. */
void hurray__prefault_write(void *out, uint64_t bytes, uint32_t threads, HurrayPageChoice choice);

#endif
