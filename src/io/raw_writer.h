/*
 * A HurrayWriter that publishes raw bytes atomically, for files of other
 * formats (safetensors, GGUF: src/formats/). The same temporary file,
 * fsync and rename as a hurray file; no hurray header, index or trailer.
 * Abort with hurray_writer_abort. Internal: not exported.
 */
#ifndef HURRAY_SRC_IO_RAW_WRITER_H
#define HURRAY_SRC_IO_RAW_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hurray/io.h"
#include "write_pieces.h"

/* A file written to be published (fsynced, then renamed) has its writeback
 * started every this many bytes (writer.c, start_writeback). */
#define HURRAY_WRITEBACK_STEP ((uint64_t)8 << 20)
/* Pages of a read-only source mapping are let go after this many bytes of
 * it were written (flat resident set). */
#define HURRAY_DROP_STEP ((uint64_t)8 << 20)

/* The buffers `w` will be given are views of read-only file mappings
 * (the converter's sources): their pages may be let go once written. */
void hurray__writer_drop_source_pages(HurrayWriter *w, bool on);

HurrayStatus hurray__raw_writer_open(const char *path, HurrayWriter **out, HurrayError *error);
/* The same with every call on the target going through `sys` (src/io/sys.h),
 * which must outlive the writer: the fault-injection tests' seam. */
struct HurraySys;
HurrayStatus hurray__raw_writer_open_sys(const char *path, const struct HurraySys *sys,
                                         HurrayWriter **out, HurrayError *error);
HurrayStatus hurray__raw_writer_write(HurrayWriter *w, const void *data, size_t len,
                                      HurrayError *error);
/* The length of the next write of a large buffer with `left` bytes to go,
 * from the writer's current position (write_pieces.h). */
uint64_t hurray__raw_writer_piece(HurrayWriter *w, uint64_t left);
HurrayStatus hurray__raw_writer_pad(HurrayWriter *w, uint64_t alignment, HurrayError *error);
uint64_t hurray__raw_writer_position(const HurrayWriter *w);
HurrayStatus hurray__raw_writer_copy(HurrayWriter *w, int src_fd, uint64_t offset, uint64_t len,
                                     HurrayError *error);
HurrayStatus hurray__raw_writer_finish(HurrayWriter *w, HurrayError *error);

/* INVALID_ARGUMENT naming the first bool element of tensor `name` that is
 * neither 0 nor 1 (docs/spec/file-format.md: writers store bools as 0 or
 * 1): the hurray writer's check, which a foreign target makes too, so that
 * no conversion publishes what a conversion back refuses. */
HurrayStatus hurray__check_bool_bytes(const char *name, const HurrayDescriptor *d,
                                      const HurrayBufferList *buffers, HurrayError *error);

/* The same check over `n` bool elements stored one byte each from `p`
 * (the Python converter's targets that numpy and torch write). */
HurrayStatus hurray__check_bool_run(const char *name, const uint8_t *p, uint64_t n,
                                    HurrayError *error);

#endif
