/*
 * hurray_descriptor_validate: one negative case per rule, each asserting the
 * rule's exact code, starting from a valid golden vector and breaking one
 * thing. The positive side is that every golden vector validates.
 */
#include <string.h>

#include "test_util.h"
#include "vectors.h"

static HurrayDescriptor *dense(HurrayDType dtype, uint32_t rank, const uint64_t *shape) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(dtype, rank, shape, &d, error));
  return d;
}

#define add golden_vector_add_buffer

/* Validates, expects `code`, frees. */
static void expect(HurrayDescriptor *d, HurrayStatus code) {
  assert_status(code, hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
}

static void test_golden_vectors_validate(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    expect(golden_vectors[i].build(), HURRAY_OK);
  }
}

static void test_shape_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL;
  uint64_t shape[HURRAY_MAX_RANK + 1] = {0};
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_create(HURRAY_DTYPE_INT8, HURRAY_MAX_RANK + 1,
                                                           shape, &d, error));
  assert_status(HURRAY_ERR_DTYPE, hurray_descriptor_create((HurrayDType)99, 1, shape, &d, error));
  /* Element count overflow. */
  d = dense(HURRAY_DTYPE_INT8, 2, (uint64_t[]){UINT64_MAX / 2, 3});
  add(d, HURRAY_ROLE_DATA, 1);
  expect(d, HURRAY_ERR_OVERFLOW);
  /* Storage bytes overflow (count fits, bytes do not). */
  d = dense(HURRAY_DTYPE_FLOAT64, 1, (uint64_t[]){UINT64_MAX / 4});
  add(d, HURRAY_ROLE_DATA, 1);
  expect(d, HURRAY_ERR_OVERFLOW);
}

static void test_strides_rules(void **state) {
  (void)state;
  /* Strides on a sub-byte dtype. */
  HurrayDescriptor *d = golden_vector_build("dense_int4");
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){1}, error));
  expect(d, HURRAY_ERR_STRIDES);
  /* Strides on a sparse layout. */
  d = golden_vector_build("sparse_csr");
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){4, 1}, error));
  expect(d, HURRAY_ERR_STRIDES);
  /* Negative strides reaching before the buffer. */
  d = golden_vector_build("dense_strided");
  hurray_descriptor_set_byte_offset(d, 16);
  expect(d, HURRAY_ERR_STRIDES);
  /* A byte offset on a composite. */
  d = golden_vector_build("composite_lora");
  hurray_descriptor_set_byte_offset(d, 8);
  expect(d, HURRAY_ERR_STRIDES);
  /* Strides whose extent overflows. */
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){INT64_MAX, 1}, error));
  expect(d, HURRAY_ERR_OVERFLOW);
}

static void test_buffer_table_rules(void **state) {
  (void)state;
  /* Index out of range. */
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_layout_dense(d, 1, error));
  expect(d, HURRAY_ERR_BUFFER_INDEX);
  /* Wrong role: data where scales belong. */
  d = golden_vector_build("quant_nf4");
  assert_ok(hurray_descriptor_set_quant_nf4(d, 64, 0, HURRAY_DTYPE_FLOAT32, error));
  expect(d, HURRAY_ERR_BUFFER_ROLE);
  /* An entry nothing refers to. */
  d = golden_vector_build("dense_float32");
  add(d, HURRAY_ROLE_DATA, 4);
  expect(d, HURRAY_ERR_BUFFER_UNREFERENCED);
  /* Declared size smaller than the contents. */
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_buffer_size(d, 0, 23, error));
  expect(d, HURRAY_ERR_BUFFER_TOO_SMALL);
  d = golden_vector_build("dense_strided");
  assert_ok(hurray_descriptor_set_buffer_size(d, 0, 47, error));
  expect(d, HURRAY_ERR_BUFFER_TOO_SMALL);
  /* Setters refuse bad table values outright. */
  d = golden_vector_build("dense_float32");
  assert_status(
      HURRAY_ERR_INVALID_ARGUMENT,
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 4, 3, HURRAY_SYNC_READY, NULL, error));
  assert_status(
      HURRAY_ERR_INVALID_ARGUMENT,
      hurray_descriptor_add_buffer(d, (HurrayBufferRole)42, 4, 4, HURRAY_SYNC_READY, NULL, error));
  assert_status(
      HURRAY_ERR_INVALID_ARGUMENT,
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 4, 4, (HurraySyncMode)9, NULL, error));
  hurray_descriptor_destroy(d);
}

/* A decoded table can carry an alignment no setter would accept. */
static void test_buffer_table_alignment_from_bytes(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  uint8_t *bytes;
  size_t len;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  /* The table is the last record: 6-byte record header, u32 count, then
   * role, sync, reserved(2), alignment(4) at offset +4 in the entry. */
  size_t alignment_at = len - 16 + 4;
  assert_int_equal(bytes[alignment_at], 64);
  bytes[alignment_at] = 48;
  HurrayDescriptor *decoded = NULL;
  assert_ok(hurray_descriptor_decode(bytes, len, &decoded, error));
  expect(decoded, HURRAY_ERR_BUFFER_TABLE);
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
}

static void test_device_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CPU, 0, HURRAY_MEMORY_DEVICE, error));
  expect(d, HURRAY_ERR_DEVICE);
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA, 0, HURRAY_MEMORY_HOST, error));
  expect(d, HURRAY_ERR_DEVICE);
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA, -1, HURRAY_MEMORY_DEVICE, error));
  expect(d, HURRAY_ERR_DEVICE);
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA_HOST, 0, HURRAY_MEMORY_HOST_PINNED,
                                         error));
  expect(d, HURRAY_OK);
}

static HurrayDescriptor *paged(HurrayDType dtype, uint64_t page_size, uint64_t num_pages) {
  /* 2 x 40 x 8 elements paged along axis 1. */
  HurrayDescriptor *d = dense(dtype, 3, (uint64_t[]){2, 40, 8});
  add(d, HURRAY_ROLE_PAGE_POOL, 1 << 16);
  add(d, HURRAY_ROLE_PAGE_TABLE, 2 * ((40 + page_size - 1) / page_size) * 4);
  assert_ok(hurray_descriptor_set_layout_paged(d, 1, page_size, num_pages, HURRAY_DTYPE_INT32, 0,
                                               1, error));
  return d;
}

static void test_quant_layout_rules(void **state) {
  (void)state;
  /* Buffer-referencing quantization on a sparse layout. */
  HurrayDescriptor *d = golden_vector_build("sparse_csr");
  assert_ok(hurray_descriptor_set_quant_nf4(d, 64, 0, HURRAY_DTYPE_FLOAT32, error));
  expect(d, HURRAY_ERR_QUANT_LAYOUT);
  /* Any quantization on a composite. */
  d = golden_vector_build("composite_lora");
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 1.0, 0, error));
  expect(d, HURRAY_ERR_QUANT_LAYOUT);
  /* Per-tensor affine is fine on a paged layout (an fp8 KV cache scale). */
  d = paged(HURRAY_DTYPE_FLOAT8_E4M3FN, 16, 8);
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 0.5, 0, error));
  expect(d, HURRAY_OK);
}

static void test_quant_dtype_rules(void **state) {
  (void)state;
  /* Affine codes must be integer or narrow float. */
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 1.0, 0, error));
  expect(d, HURRAY_ERR_QUANT_DTYPE);
  /* NF4 codes must be uint4. */
  d = golden_vector_build("quant_block_affine_q8_0");
  assert_ok(hurray_descriptor_set_quant_nf4(d, 64, 1, HURRAY_DTYPE_FLOAT16, error));
  expect(d, HURRAY_ERR_QUANT_DTYPE);
  /* MX element type must match the storage dtype. */
  d = golden_vector_build("quant_mxfp8_e4m3");
  assert_ok(hurray_descriptor_set_quant_mx(d, HURRAY_MX_FP8_E5M2, 1, 1, error));
  expect(d, HURRAY_ERR_QUANT_DTYPE);
  /* Unknown MX element type: refused by the setter. */
  d = golden_vector_build("quant_mxfp8_e4m3");
  assert_status(HURRAY_ERR_QUANT_MX_ELEMENT,
                hurray_descriptor_set_quant_mx(d, (HurrayMxElement)7, 1, 1, error));
  hurray_descriptor_destroy(d);
}

static void test_quant_axis_and_block_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_per_channel_affine");
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 2, 1, HURRAY_DTYPE_FLOAT32, error));
  expect(d, HURRAY_ERR_QUANT_AXIS);
  d = golden_vector_build("quant_block_affine_q8_0");
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 2, 32, 1, HURRAY_DTYPE_FLOAT16, error));
  expect(d, HURRAY_ERR_QUANT_AXIS);
  d = golden_vector_build("quant_mxint8");
  assert_ok(hurray_descriptor_set_quant_mx(d, HURRAY_MX_INT8, 5, 1, error));
  expect(d, HURRAY_ERR_QUANT_AXIS);
  d = golden_vector_build("quant_block_affine_q8_0");
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 0, 1, HURRAY_DTYPE_FLOAT16, error));
  expect(d, HURRAY_ERR_QUANT_BLOCK_SIZE);
  d = golden_vector_build("quant_nf4");
  assert_ok(hurray_descriptor_set_quant_nf4(d, 0, 1, HURRAY_DTYPE_FLOAT32, error));
  expect(d, HURRAY_ERR_QUANT_BLOCK_SIZE);
}

/* MX blocks are fixed at 32; a decoded descriptor can claim otherwise. */
static void test_mx_block_size_from_bytes(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_mxint8");
  uint8_t *bytes;
  size_t len;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  /* Find the MX record (tag 0x0039) and set block_size (payload +8) to 16. */
  size_t at = 6;
  while (!(bytes[at] == 0x39 && bytes[at + 1] == 0)) {
    uint32_t rec_len = bytes[at + 2] | bytes[at + 3] << 8 | bytes[at + 4] << 16 |
                       (uint32_t)bytes[at + 5] << 24;
    at += 6 + rec_len;
    assert_true(at < len);
  }
  assert_int_equal(bytes[at + 6 + 8], 32);
  bytes[at + 6 + 8] = 16;
  HurrayDescriptor *decoded = NULL;
  assert_ok(hurray_descriptor_decode(bytes, len, &decoded, error));
  expect(decoded, HURRAY_ERR_QUANT_BLOCK_SIZE);
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
}

static void test_quant_scale_rules(void **state) {
  (void)state;
  /* Inline scale not finite or zero. */
  HurrayDescriptor *d = golden_vector_build("quant_per_tensor_affine");
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 0.0, 128, error));
  expect(d, HURRAY_ERR_QUANT_SCALE);
  d = golden_vector_build("quant_per_tensor_affine");
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 1.0 / 0.0, 128, error));
  expect(d, HURRAY_ERR_QUANT_SCALE);
  /* Scale dtype must be a float. */
  d = golden_vector_build("quant_per_channel_affine");
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_INT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT8, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_DTYPE);
  d = golden_vector_build("quant_nf4");
  assert_ok(hurray_descriptor_set_quant_nf4(d, 64, 1, HURRAY_DTYPE_UINT8, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_DTYPE);
  /* Number of scales: per-channel counts shape[axis] ... */
  d = golden_vector_build("quant_per_channel_affine");
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 1, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT8, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_COUNT);
  /* ... block-wise counts ceil(n / block) per row ... */
  d = golden_vector_build("quant_block_affine_q8_0");
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT16, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_COUNT);
  /* ... NF4 counts ceil(numel / block) ... */
  d = golden_vector_build("quant_nf4");
  assert_ok(hurray_descriptor_set_quant_nf4(d, 32, 1, HURRAY_DTYPE_FLOAT32, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_COUNT);
  /* ... MX counts ceil(n / 32) along the axis, one byte each. */
  d = golden_vector_build("quant_mxfp4_e2m1");
  assert_ok(hurray_descriptor_set_quant_mx(d, HURRAY_MX_FP4_E2M1, 0, 1, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_COUNT);
  /* Too many scales is as wrong as too few. */
  d = golden_vector_build("quant_nf4");
  assert_ok(hurray_descriptor_set_buffer_size(d, 1, 12, error));
  expect(d, HURRAY_ERR_QUANT_SCALE_COUNT);
  /* The count accessor agrees. */
  d = golden_vector_build("quant_block_affine_q4_0");
  uint64_t count = 0;
  assert_ok(hurray_descriptor_quant_scale_count(d, &count, error));
  assert_int_equal(count, 4);
  hurray_descriptor_destroy(d);
}

static void test_quant_zero_point_rules(void **state) {
  (void)state;
  /* Inline zero point outside the storage range. */
  HurrayDescriptor *d = golden_vector_build("quant_per_tensor_affine");
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 0.5, 256, error));
  expect(d, HURRAY_ERR_QUANT_ZERO_POINT);
  d = golden_vector_build("quant_block_affine_q4_0");
  assert_ok(hurray_descriptor_set_quant_zero_point(d, 16, error));
  expect(d, HURRAY_ERR_QUANT_ZERO_POINT);
  d = golden_vector_build("quant_block_affine_q4_0");
  assert_ok(hurray_descriptor_set_quant_zero_point(d, -1, error));
  expect(d, HURRAY_ERR_QUANT_ZERO_POINT);
  /* Float codes take no zero point. */
  HurrayDescriptor *f8 = dense(HURRAY_DTYPE_FLOAT8_E4M3FN, 1, (uint64_t[]){4});
  add(f8, HURRAY_ROLE_DATA, 4);
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(f8, 0.5, 1, error));
  expect(f8, HURRAY_ERR_QUANT_ZERO_POINT);
  /* Zero-point buffer dtype must be an integer. */
  d = golden_vector_build("quant_per_channel_affine");
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_FLOAT32, error));
  expect(d, HURRAY_ERR_QUANT_ZERO_POINT_DTYPE);
  /* One zero point per scale. */
  d = golden_vector_build("quant_per_channel_affine");
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT16, error));
  expect(d, HURRAY_ERR_QUANT_ZERO_POINT_COUNT);
  /* Zero points need an affine kind at all. */
  d = golden_vector_build("quant_nf4");
  assert_status(HURRAY_ERR_STATE, hurray_descriptor_set_quant_zero_point(d, 1, error));
  assert_status(HURRAY_ERR_STATE,
                hurray_descriptor_set_quant_zero_point_buffer(d, 1, HURRAY_DTYPE_INT8, error));
  hurray_descriptor_destroy(d);
}

static void test_sparse_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("sparse_csr");
  assert_ok(hurray_descriptor_set_layout_compressed(d, HURRAY_SPARSE_CSR, HURRAY_DTYPE_UINT32, 5,
                                                    0, 1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_INDEX_DTYPE);
  d = golden_vector_build("sparse_coo");
  assert_ok(hurray_descriptor_set_layout_coo(d, HURRAY_DTYPE_FLOAT32, 3, 0, (uint32_t[]){1, 2, 3},
                                             true, error));
  expect(d, HURRAY_ERR_SPARSE_INDEX_DTYPE);
  /* A dimension the index dtype cannot address. */
  d = dense(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){(uint64_t)INT32_MAX + 2, 1});
  add(d, HURRAY_ROLE_VALUES, 0);
  add(d, HURRAY_ROLE_INDPTR, 1);
  add(d, HURRAY_ROLE_INDICES, 0);
  assert_ok(hurray_descriptor_set_layout_compressed(d, HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT32, 0, 0,
                                                    1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_INDEX_DTYPE);
  /* CSR/CSC/BSR are rank 2; COO needs rank >= 1. */
  d = golden_vector_build("sparse_coo");
  assert_ok(hurray_descriptor_set_layout_compressed(d, HURRAY_SPARSE_CSC, HURRAY_DTYPE_INT64, 3, 0,
                                                    1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_RANK);
  d = dense(HURRAY_DTYPE_FLOAT32, 0, NULL);
  add(d, HURRAY_ROLE_VALUES, 4);
  assert_ok(hurray_descriptor_set_layout_coo(d, HURRAY_DTYPE_INT64, 1, 0, NULL, false, error));
  expect(d, HURRAY_ERR_SPARSE_RANK);
  /* More stored elements than the shape holds. */
  d = golden_vector_build("sparse_csr");
  assert_ok(hurray_descriptor_set_layout_compressed(d, HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT32, 13,
                                                    0, 1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_NNZ);
  d = golden_vector_build("sparse_bsr");
  assert_ok(hurray_descriptor_set_layout_bsr(d, HURRAY_DTYPE_INT64, 5, 2, 3, 0, 1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_NNZ);
  /* Blocks must tile the shape. */
  d = golden_vector_build("sparse_bsr");
  assert_ok(hurray_descriptor_set_layout_bsr(d, HURRAY_DTYPE_INT64, 3, 3, 3, 0, 1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_BLOCK);
  d = golden_vector_build("sparse_bsr");
  assert_ok(hurray_descriptor_set_layout_bsr(d, HURRAY_DTYPE_INT64, 3, 0, 3, 0, 1, 2, error));
  expect(d, HURRAY_ERR_SPARSE_BLOCK);
  /* Sparse buffers resolve, with their roles and sizes. */
  d = golden_vector_build("sparse_coo");
  assert_ok(hurray_descriptor_set_layout_coo(d, HURRAY_DTYPE_INT64, 3, 0, (uint32_t[]){1, 2, 4},
                                             true, error));
  expect(d, HURRAY_ERR_BUFFER_INDEX);
  d = golden_vector_build("sparse_csc");
  assert_ok(hurray_descriptor_set_layout_compressed(d, HURRAY_SPARSE_CSC, HURRAY_DTYPE_INT32, 5, 0,
                                                    2, 1, error));
  expect(d, HURRAY_ERR_BUFFER_ROLE);
  d = golden_vector_build("sparse_csc");
  assert_ok(hurray_descriptor_set_buffer_size(d, 1, 16, error));
  expect(d, HURRAY_ERR_BUFFER_TOO_SMALL);
}

static void test_paged_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("paged_kv_cache");
  assert_ok(hurray_descriptor_set_layout_paged(d, 4, 16, 8, HURRAY_DTYPE_INT32, 0, 1, error));
  expect(d, HURRAY_ERR_PAGED_AXIS);
  d = golden_vector_build("paged_kv_cache");
  assert_ok(hurray_descriptor_set_layout_paged(d, 1, 0, 8, HURRAY_DTYPE_INT32, 0, 1, error));
  expect(d, HURRAY_ERR_PAGED_PAGE_SIZE);
  d = paged(HURRAY_DTYPE_INT4, 1, 8); /* a page of 8 nibbles is fine ... */
  expect(d, HURRAY_OK);
  HurrayDescriptor *odd = dense(HURRAY_DTYPE_INT4, 2, (uint64_t[]){3, 1});
  add(odd, HURRAY_ROLE_PAGE_POOL, 64);
  add(odd, HURRAY_ROLE_PAGE_TABLE, 12);
  assert_ok(hurray_descriptor_set_layout_paged(odd, 0, 1, 4, HURRAY_DTYPE_INT32, 0, 1, error));
  expect(odd, HURRAY_ERR_PAGED_PAGE_SIZE); /* ... one nibble a page is not */
  d = golden_vector_build("paged_kv_cache");
  assert_ok(hurray_descriptor_set_layout_paged(d, 1, 16, 8, HURRAY_DTYPE_UINT16, 0, 1, error));
  expect(d, HURRAY_ERR_PAGED_TABLE_DTYPE);
  /* Pool too small for num_pages. */
  d = golden_vector_build("paged_kv_cache");
  assert_ok(hurray_descriptor_set_layout_paged(d, 1, 16, 9, HURRAY_DTYPE_INT32, 0, 1, error));
  expect(d, HURRAY_ERR_BUFFER_TOO_SMALL);
  /* Page table with int64 entries needs twice the bytes. */
  d = golden_vector_build("paged_kv_cache");
  assert_ok(hurray_descriptor_set_layout_paged(d, 1, 16, 8, HURRAY_DTYPE_INT64, 0, 1, error));
  expect(d, HURRAY_ERR_BUFFER_TOO_SMALL);
}

static void test_composite_rules(void **state) {
  (void)state;
  /* No members. */
  HurrayDescriptor *d = dense(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){4});
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  expect(d, HURRAY_ERR_COMPOSITE_MEMBER);
  /* A member with a buffer table of its own is refused (and freed). */
  d = golden_vector_build("composite_lora");
  HurrayDescriptor *m = golden_vector_build("dense_float32");
  assert_status(HURRAY_ERR_COMPOSITE_MEMBER, hurray_descriptor_add_member(d, "x", m, error));
  /* Members only go into composites. */
  HurrayDescriptor *plain = golden_vector_build("dense_float32");
  m = dense(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){1});
  assert_status(HURRAY_ERR_STATE, hurray_descriptor_add_member(plain, "x", m, error));
  hurray_descriptor_destroy(plain);
  /* A cycle is refused without destroying anything. */
  HurrayDescriptor *outer = golden_vector_build("composite_lora");
  HurrayDescriptor *inner = dense(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){1});
  assert_ok(hurray_descriptor_set_layout_composite(inner, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_add_member(inner, "self", inner, error));
  hurray_descriptor_destroy(inner);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_add_member(outer, "self", outer, error));
  expect(outer, HURRAY_OK);
  /* Duplicate, empty and non-UTF-8 names. */
  m = dense(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){8, 2});
  assert_ok(hurray_descriptor_set_layout_dense(m, 2, error));
  assert_ok(hurray_descriptor_add_member(d, "lora_a", m, error));
  expect(d, HURRAY_ERR_COMPOSITE_NAME);
  const char *bad_names[] = {"", "\xff\xfe", "\xc0\xaf", "\xed\xa0\x80"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    d = golden_vector_build("composite_lora");
    m = dense(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){8, 2});
    assert_ok(hurray_descriptor_set_layout_dense(m, 2, error));
    assert_ok(hurray_descriptor_add_member(d, bad_names[i], m, error));
    expect(d, HURRAY_ERR_COMPOSITE_NAME);
  }
  /* A member's own rules apply, with the member named in the message. */
  d = golden_vector_build("composite_lora");
  m = dense(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){8, 2});
  assert_ok(hurray_descriptor_set_layout_dense(m, 7, error));
  assert_ok(hurray_descriptor_add_member(d, "broken", m, error));
  HurrayError err = {0};
  assert_int_equal(hurray_descriptor_validate(d, &err), HURRAY_ERR_BUFFER_INDEX);
  assert_non_null(strstr(err.message, "members[\"broken\"].layout.data_buffer"));
  hurray_descriptor_destroy(d);
}

static void test_composite_depth(void **state) {
  (void)state;
  for (uint32_t levels = HURRAY_MAX_COMPOSITE_DEPTH; levels <= HURRAY_MAX_COMPOSITE_DEPTH + 1;
       levels++) {
    HurrayDescriptor *node = dense(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){1});
    for (uint32_t i = 0; i < levels; i++) {
      HurrayDescriptor *parent = dense(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){1});
      assert_ok(hurray_descriptor_set_layout_composite(parent, error));
      assert_ok(hurray_descriptor_add_member(parent, "m", node, error));
      node = parent;
    }
    add(node, HURRAY_ROLE_DATA, 4);
    expect(node, levels <= HURRAY_MAX_COMPOSITE_DEPTH ? HURRAY_OK : HURRAY_ERR_COMPOSITE_DEPTH);
  }
}

static void test_statistics_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  hurray_descriptor_set_stat_nan_count(d, 7);
  expect(d, HURRAY_ERR_STATISTICS);
  d = golden_vector_build("dense_float32");
  hurray_descriptor_set_stat_zero_count(d, 7);
  expect(d, HURRAY_ERR_STATISTICS);
  d = golden_vector_build("dense_float32");
  hurray_descriptor_set_stat_zero_count(d, 4);
  hurray_descriptor_set_stat_nan_count(d, 3);
  expect(d, HURRAY_ERR_STATISTICS);
  d = golden_vector_build("dense_float32");
  hurray_descriptor_set_stat_min(d, 2.0);
  hurray_descriptor_set_stat_max(d, 1.0);
  expect(d, HURRAY_ERR_STATISTICS);
}

static void test_shard_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_shard(d, 1, (uint64_t[]){4}, (uint64_t[]){0}, error));
  expect(d, HURRAY_ERR_SHARD_RANK);
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_shard(d, 2, (uint64_t[]){4, 3}, (uint64_t[]){3, 0}, error));
  expect(d, HURRAY_ERR_SHARD_BOUNDS);
  d = golden_vector_build("dense_float32");
  assert_ok(
      hurray_descriptor_set_shard(d, 2, (uint64_t[]){4, 3}, (uint64_t[]){UINT64_MAX, 0}, error));
  expect(d, HURRAY_ERR_SHARD_BOUNDS);
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_shard(d, 2, (uint64_t[]){2, 3}, (uint64_t[]){0, 0}, error));
  expect(d, HURRAY_OK);
}

static void test_extension_rules(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_extension(d, "", NULL, 0, error));
  expect(d, HURRAY_ERR_EXTENSION);
  d = golden_vector_build("dense_float32");
  assert_ok(hurray_descriptor_set_extension(d, "bad\xc3", NULL, 0, error));
  expect(d, HURRAY_ERR_EXTENSION);
  d = golden_vector_build("dense_float32");
  char long_name[HURRAY_MAX_NAME_BYTES + 2];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_set_extension(d, long_name, NULL, 0, error));
  hurray_descriptor_destroy(d);
}

/* Messages name the offending field. */
static void test_messages_name_the_field(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_per_channel_affine");
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 3, 1, HURRAY_DTYPE_FLOAT32, error));
  HurrayError err = {0};
  assert_int_equal(hurray_descriptor_validate(d, &err), HURRAY_ERR_QUANT_AXIS);
  assert_non_null(strstr(err.message, "quantization.axis"));
  hurray_descriptor_destroy(d);
  /* A NULL error struct is allowed everywhere. */
  assert_int_equal(hurray_descriptor_validate(NULL, NULL), HURRAY_ERR_INVALID_ARGUMENT);
  /* Every status has a stable name. */
  assert_string_equal(hurray_status_name(HURRAY_ERR_SHARD_BOUNDS), "HURRAY_ERR_SHARD_BOUNDS");
  assert_string_equal(hurray_status_name((HurrayStatus)999), "HURRAY_ERR_UNKNOWN");
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_golden_vectors_validate),
      cmocka_unit_test(test_shape_rules),
      cmocka_unit_test(test_strides_rules),
      cmocka_unit_test(test_buffer_table_rules),
      cmocka_unit_test(test_buffer_table_alignment_from_bytes),
      cmocka_unit_test(test_device_rules),
      cmocka_unit_test(test_quant_layout_rules),
      cmocka_unit_test(test_quant_dtype_rules),
      cmocka_unit_test(test_quant_axis_and_block_rules),
      cmocka_unit_test(test_mx_block_size_from_bytes),
      cmocka_unit_test(test_quant_scale_rules),
      cmocka_unit_test(test_quant_zero_point_rules),
      cmocka_unit_test(test_sparse_rules),
      cmocka_unit_test(test_paged_rules),
      cmocka_unit_test(test_composite_rules),
      cmocka_unit_test(test_composite_depth),
      cmocka_unit_test(test_statistics_rules),
      cmocka_unit_test(test_shard_rules),
      cmocka_unit_test(test_extension_rules),
      cmocka_unit_test(test_messages_name_the_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
