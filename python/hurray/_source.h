/*
 * Python objects as byte sources (include/hurray/byte_source.h): the C
 * reader calls back into Python for its bytes, taking the GIL for each
 * call. Used by hurray.open("https://...") and fsspec URLs
 * (python/hurray/_remote.py).
 */
#ifndef HURRAY_PY_SOURCE_H
#define HURRAY_PY_SOURCE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include "hurray/byte_source.h"

/* Opens a reader on `source`, an object with `size` (int),
 * `readinto(offset, memoryview)` and optionally
 * `read_batch([(offset, memoryview), ...])`, each filling every byte or
 * raising. `verify` sets HURRAY_BYTE_SOURCE_VERIFY_READS. Call with the GIL
 * held; it is released while the reader opens. The reader holds a
 * reference to `source` until it is closed. Returns the status; on
 * failure `error` says why (a Python exception raised by the source is
 * cleared here: the source keeps it, see _remote.py). */
HurrayStatus hy_open_source_reader(PyObject *source, bool verify, HurrayReader **out,
                                   HurrayError *error);

#endif
