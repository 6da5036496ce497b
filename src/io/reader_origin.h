/*
 * Where a buffer of an MMAP-mode reader lies in its file, so the converter
 * (src/formats/convert.c) can copy the bytes file to file in the kernel
 * (copy_file_range), and what the Python bindings' load() needs. Internal:
 * not exported.
 */
#ifndef HURRAY_SRC_IO_READER_ORIGIN_H
#define HURRAY_SRC_IO_READER_ORIGIN_H

#include <stdbool.h>
#include <stdint.h>

#include "hurray/io.h"

/* The reader's open file descriptor (owned by the reader). */
int hurray__reader_fd(const HurrayReader *r);
/* True, with the file offset of `p`, when [p, p + len) lies in the
 * reader's mapping of its file. */
bool hurray__reader_offset_of(const HurrayReader *r, const void *p, uint64_t len,
                              uint64_t *offset);
/* hurray_reader_verify of every tensor on one thread, letting go of the
 * pages of the reader's mapping as it goes (the resident set stays at one
 * round of 64 MiB): for the converter, which checks a whole source up
 * front. `cancel` (may be NULL) is asked before each round: true stops
 * with HURRAY_ERR_CANCELLED. */
HurrayStatus hurray__reader_verify_flat(HurrayReader *r, HurrayCancelFn cancel, void *ctx,
                                        HurrayError *error);
/* The index record of buffer `buffer` of tensor `index`: its length and
 * stored checksum, and where its bytes lie in the reader's mapping (NULL
 * when the reader does not map its file). When the buffer has chunk
 * checksums (file format 1.1), which decide its verdict instead of the
 * stored checksum (spec 7.1), *chunk_sums points at the first of its
 * hurray__chunks_of(length, *chunk_size) little-endian sums in the index;
 * else it is NULL. False when either index is out of range. For the
 * converter, which checks a buffer while it copies it. */
bool hurray__reader_buffer_record(const HurrayReader *r, size_t index, uint32_t buffer,
                                  const uint8_t **data, uint64_t *length, uint64_t *checksum,
                                  const uint8_t **chunk_sums, uint64_t *chunk_size);
/* hurray_reader_get_tensor of tensor `index` (index order): for a loader
 * that takes every tensor in turn, with no name search and no
 * NUL-terminated copy of the names (hurray_reader_tensor_name). */
HurrayStatus hurray__reader_get_tensor_at(HurrayReader *r, size_t index,
                                          HurrayDescriptor **descriptor_out,
                                          HurrayBufferList **buffers_out, HurrayError *error);

/* hurray_reader_read_ahead on a thread of its own, so that a loader builds
 * and touches its tensors while the requests are made (a cold file of
 * 20,000 tensors: about 12 ms of requests, per page of the file). The
 * thread reads through a duplicate of the reader's descriptor, which it
 * closes when done, so `r` may be closed at any time after the call. The
 * caller owns the returned handle and passes it to exactly one of
 * hurray__reader_read_ahead_join (wait for the requests to be made) or
 * hurray__reader_read_ahead_detach (let them go on: load() returns while
 * the disk still streams). NULL when the file is cached already, or after
 * a read-ahead on the caller's thread where no thread could start; both
 * take NULL and do nothing. The thread starts with every signal blocked. */
typedef struct HurrayReadAhead HurrayReadAhead;
HurrayReadAhead *hurray__reader_read_ahead_start(HurrayReader *r);
void hurray__reader_read_ahead_join(HurrayReadAhead *ahead);
void hurray__reader_read_ahead_detach(HurrayReadAhead *ahead);

#endif
