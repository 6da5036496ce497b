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

/* The size of one write(2) of a large buffer into a file, ending on a
 * multiple of itself in the file: the size of the pipe through which
 * copy_file_range and cp move pages. Measured (bench/results/io-speed.md,
 * sections 4 and 5; 1 GiB, ext4, Linux 6.18, a VM): 64 KiB writes run at
 * the speed of cp + sync; 256 KiB ones too, except right after another
 * 1 GiB file was written (3-5 s instead of 0.8); 2 MiB and larger ones fill
 * huge page-cache folios, whose first write is several times slower on
 * this VM (a whole 64 MiB tensor in one write: 1.8-3.5x cp + sync).
 * The price: a just-written file sits in 64 KiB folios, which a mapping
 * reads at 0.65x memory speed against 0.95x for 2 MiB ones. Measured again
 * in section 6: 2 MiB steps save as fast on a quiet guest, but 1.3x slower
 * once it has reported its free memory to the host. */
#define HURRAY_WRITE_STEP ((uint64_t)64 << 10)
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
HurrayStatus hurray__raw_writer_pad(HurrayWriter *w, uint64_t alignment, HurrayError *error);
uint64_t hurray__raw_writer_position(const HurrayWriter *w);
HurrayStatus hurray__raw_writer_copy(HurrayWriter *w, int src_fd, uint64_t offset, uint64_t len,
                                     HurrayError *error);
HurrayStatus hurray__raw_writer_finish(HurrayWriter *w, HurrayError *error);

#endif
