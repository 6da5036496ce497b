/*
 * yajl, run so that running out of memory is an error, not a crash.
 */
#ifndef HURRAY_SRC_FORMATS_YAJL_GUARD_H
#define HURRAY_SRC_FORMATS_YAJL_GUARD_H

#include <stddef.h>
#include <yajl/yajl_parse.h>

#include "hurray/common.h"

/* Parses `len` bytes of `text` with `callbacks` and `ctx`, to the end
 * (yajl_parse, then yajl_complete_parse), into *result. When *result is
 * yajl_status_error and `why` is not NULL, yajl's own description of the
 * error goes into `why` (`why_size` bytes, NUL-terminated, first line only).
 * HURRAY_ERR_NO_MEMORY, with nothing left allocated, when yajl ran out of
 * memory anywhere; the callbacks' own state is theirs to free. */
HurrayStatus hurray__yajl_parse(const yajl_callbacks *callbacks, void *ctx,
                                const unsigned char *text, size_t len, yajl_status *result,
                                char *why, size_t why_size);

#endif
