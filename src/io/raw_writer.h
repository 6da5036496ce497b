/*
 * A HurrayWriter that publishes raw bytes atomically, for files of other
 * formats (safetensors, GGUF: src/formats/). The same temporary file,
 * fsync and rename as a hurray file; no hurray header, index or trailer.
 * Abort with hurray_writer_abort. Internal: not exported.
 */
#ifndef HURRAY_SRC_IO_RAW_WRITER_H
#define HURRAY_SRC_IO_RAW_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "hurray/io.h"

HurrayStatus hurray__raw_writer_open(const char *path, HurrayWriter **out, HurrayError *error);
/* The same with every call on the target going through `sys` (src/io/sys.h),
 * which must outlive the writer: the fault-injection tests' seam. */
struct HurraySys;
HurrayStatus hurray__raw_writer_open_sys(const char *path, const struct HurraySys *sys,
                                         HurrayWriter **out, HurrayError *error);
HurrayStatus hurray__raw_writer_write(HurrayWriter *w, const void *data, size_t len,
                                      HurrayError *error);
HurrayStatus hurray__raw_writer_pad(HurrayWriter *w, uint64_t alignment, HurrayError *error);
uint64_t hurray__raw_writer_position(const HurrayWriter *w);
HurrayStatus hurray__raw_writer_copy(HurrayWriter *w, int src_fd, uint64_t offset, uint64_t len,
                                     HurrayError *error);
HurrayStatus hurray__raw_writer_finish(HurrayWriter *w, HurrayError *error);

#endif
