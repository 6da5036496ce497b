/*
 * The file kill_writer writes, shared with test_kill_writer, which checks it.
 */
#ifndef HURRAY_TEST_KILL_WRITER_H
#define HURRAY_TEST_KILL_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hurray/hurray.h"

#define KILL_WRITER_TENSORS 64u
#define KILL_WRITER_ROWS 128u
#define KILL_WRITER_COLS 1024u
#define KILL_WRITER_TENSOR_BYTES ((size_t)KILL_WRITER_ROWS * KILL_WRITER_COLS * 4u)

/* Byte k of tensor t in generation g: differs between generations, so a
 * file cannot pass for another generation's. */
static inline uint8_t kill_writer_byte(uint32_t generation, uint32_t tensor, size_t k) {
  return (uint8_t)(generation * 29u + tensor * 13u + k + (k >> 10));
}

/* Fills tensor t of generation g, a row of 1024 bytes at a time: byte
 * k = 1024 r + j is (g*29 + t*13 + r + j) mod 256, a slice of a ramp. */
static inline void kill_writer_fill(uint8_t *data, uint32_t generation, uint32_t tensor) {
  uint8_t ramp[256 + 1024];
  for (size_t i = 0; i < sizeof ramp; i++) ramp[i] = (uint8_t)i;
  for (size_t r = 0; r < KILL_WRITER_TENSOR_BYTES / 1024; r++) {
    uint8_t start = (uint8_t)(generation * 29u + tensor * 13u + r);
    memcpy(data + 1024 * r, ramp + start, 1024);
  }
}

#endif
