/*
 * This process's mappings of files: letting go of the pages it has read,
 * and finding where it maps a given file.
 */
#ifndef HURRAY_SRC_IO_FILE_MAPPINGS_H
#define HURRAY_SRC_IO_FILE_MAPPINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "hurray/common.h"

#ifndef MADV_POPULATE_READ
#  define MADV_POPULATE_READ 22 /* Linux 5.14; older C libraries do not name it */
#endif

/* Drops the whole pages inside [p, p + len) from this process with
 * MADV_DONTNEED; a partial page at either end is kept. The pages stay in
 * the page cache, and a later read maps them again.
 *
 * Only for read-only (or shared, unmodified) file mappings: on anonymous
 * or private written memory it would zero the data. Advice only: a refusal
 * is ignored, since nothing read depends on it. */
void hurray__drop_mapped_pages(const void *p, uint64_t len);

/* Whether MADV_POPULATE_READ may be used on a file mapping: the running
 * kernel is 6.9 or later. From 5.14, where it came, to 6.8 a page whose
 * read failed (a bad sector: pread gets EIO, a read fault SIGBUS) made it
 * retry for ever (fixed by "mm/madvise: make MADV_POPULATE_(READ|WRITE)
 * handle VM_FAULT_RETRY properly", 6.9), so a verify meant to find such a
 * file would hang in the kernel instead. Decided once per process from
 * uname(2); a release this cannot read counts as too old. */
bool hurray__populate_read_usable(void);

/* The same decision for a kernel release string such as "6.8.0-45-generic"
 * (what uname reports), for tests. */
bool hurray__populate_read_usable_on(const char *release);

/* Maps the pages of [p, p + len) of a file mapping into this process with
 * one MADV_POPULATE_READ, as read faults would, one fault per folio, when
 * they are read. Pages not in the page cache are read in. Advice only:
 * where the kernel lacks it, is older than hurray__populate_read_usable
 * allows, or refuses, the reads fault as before. */
void hurray__map_file_pages(const void *p, uint64_t len);

/* The address ranges at which this process maps one file. A writer keeps
 * those of the file it writes into, so that it can refuse a buffer that
 * lies in one: writing would change the very bytes it reads (a private
 * mapping shows the file's new bytes on every page not yet copied), and
 * after a truncation reading them faults (SIGBUS). */
typedef struct HurrayFileMappings {
  uintptr_t (*ranges)[2]; /* [start, end) pairs; owned, NULL when count is 0 */
  size_t count;
} HurrayFileMappings;

/* Fills `out` (zeroed first) with the mappings of the file `fd` refers to,
 * read from /proc/self/maps at this moment; none for a descriptor that is
 * not a regular file, or where /proc cannot be read. Only memory can fail:
 * HURRAY_ERR_NO_MEMORY, with `out` empty. Free with
 * hurray__file_mappings_free. */
HurrayStatus hurray__file_mappings_of_fd(int fd, HurrayFileMappings *out, HurrayError *error);

/* True when [p, p + len) overlaps one of the ranges. */
bool hurray__file_mappings_overlap(const HurrayFileMappings *m, const void *p, uint64_t len);

/* HURRAY_OK, or HURRAY_ERR_INVALID_ARGUMENT saying that buffer `buffer` of
 * tensor `name` lies in a mapping of the file being written, when
 * [p, p + len) overlaps one of the ranges. */
HurrayStatus hurray__refuse_mapped(const HurrayFileMappings *m, const char *name, uint32_t buffer,
                                   const void *p, uint64_t len, HurrayError *error);

/* Frees what hurray__file_mappings_of_fd filled and empties `m`. */
void hurray__file_mappings_free(HurrayFileMappings *m);

#endif
