/*
 * Letting go of the pages of a read-only file mapping that this process
 * has read, so that walking a large file keeps the resident set flat.
 */
#ifndef HURRAY_SRC_IO_MAPPED_PAGES_H
#define HURRAY_SRC_IO_MAPPED_PAGES_H

#include <stdint.h>

/* Drops the whole pages inside [p, p + len) from this process with
 * MADV_DONTNEED; a partial page at either end is kept. The pages stay in
 * the page cache, and a later read maps them again.
 *
 * Only for read-only (or shared, unmodified) file mappings: on anonymous
 * or private written memory it would zero the data. Advice only: a refusal
 * is ignored, since nothing read depends on it. */
void hurray__drop_mapped_pages(const void *p, uint64_t len);

#endif
