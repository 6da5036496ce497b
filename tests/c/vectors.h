/*
 * The golden vectors: named descriptors built through the public builder.
 * tests/vectors/NAME.bin holds each one's encoding and NAME.json its JSON
 * rendering; test_codec checks both against these builders, and
 * gen_vectors rewrites the files when the encoding changes on purpose.
 */
#ifndef HURRAY_TEST_VECTORS_H
#define HURRAY_TEST_VECTORS_H

#include "hurray/hurray.h"

typedef struct GoldenVector {
  const char *name;
  HurrayDescriptor *(*build)(void);
} GoldenVector;

extern const GoldenVector golden_vectors[];
extern const size_t golden_vector_count;

/* Builds the vector called `name`; aborts if there is none. */
HurrayDescriptor *golden_vector_build(const char *name);

/* Gives the index buffers of a (top-level) sparse or paged descriptor valid
 * contents: page table entries 0, index pointers spreading nnz evenly over
 * the rows, in-range indices unique within a row, and canonical COO
 * coordinates (the first nnz positions in row-major order), and group
 * indices of block-affine quantization p / block_size; bool elements 0 or
 * 1 (writers refuse other bytes). `buffers[i]`
 * is the memory of buffer i. Other buffers are left alone. */
void golden_vector_fill_indices(const HurrayDescriptor *d, uint8_t *const *buffers);

/* Test helpers the builders use, shared with the suites. */
/* Appends a buffer table entry of `size` bytes, 64-byte aligned, READY;
 * aborts on failure. */
void golden_vector_add_buffer(HurrayDescriptor *d, HurrayBufferRole role, uint64_t size);
/* Stores `v` as index entry `i` of `base`, little-endian, 4 or 8 bytes wide
 * as `dtype` (INT32 or INT64) says. */
void golden_vector_put_index(uint8_t *base, HurrayDType dtype, uint64_t i, uint64_t v);

#endif
