/*
 * Packed and two-level quantization (ADR-0024): setters and getters, the
 * QUANT_STORAGE / QUANT_SCALES records (round trip and strict decoding),
 * every validation rule, required buffer sizes, and the generic kernel
 * against values computed by hand from docs/spec/quantization.md §5.6.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "vectors.h"

#define TAG_QUANT_STORAGE 0x003D
#define TAG_QUANT_SCALES 0x003F

static HurrayDescriptor *make(HurrayDType dtype, uint32_t rank, const uint64_t *shape) {
  HurrayDescriptor *d = NULL;
  HurrayError e = {0};
  assert_int_equal(hurray_descriptor_create(dtype, rank, shape, &d, &e), HURRAY_OK);
  return d;
}

static uint32_t add(HurrayDescriptor *d, HurrayBufferRole role, uint64_t size) {
  uint32_t index = 0;
  HurrayError e = {0};
  assert_int_equal(hurray_descriptor_add_buffer(d, role, size, 1, HURRAY_SYNC_READY, &index, &e),
                   HURRAY_OK);
  return index;
}

/* GPTQ-like: logical [N=2, K=16], codes stored [K, N] packed 8 per u32
 * along K, zero points uint4 [2, 2] packed along N (one u32 per row, 2 of 8
 * lanes used would not divide: so N=8 here), offset 1, g_idx. */
static HurrayDescriptor *gptq_with(bool storage_fields) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){8, 16});
  add(d, HURRAY_ROLE_DATA, 16 / 8 * 8 * 4);
  add(d, HURRAY_ROLE_SCALES, 2 * 8 * 4);
  add(d, HURRAY_ROLE_ZERO_POINTS, 2 * 4);
  add(d, HURRAY_ROLE_GROUP_INDEX, 16 * 4);
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 8, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT4, error));
  if (storage_fields) {
    assert_ok(hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){1, 0}, error));
    assert_ok(hurray_descriptor_set_quant_code_packing(d, 32, 0, NULL, error));
    assert_ok(hurray_descriptor_set_quant_zero_point_packing(d, 32, 1, NULL, error));
    assert_ok(hurray_descriptor_set_quant_zero_point_offset(d, 1, error));
  }
  assert_ok(hurray_descriptor_set_quant_group_index(d, 3, HURRAY_DTYPE_INT32, error));
  return d;
}

static HurrayDescriptor *gptq(void) { return gptq_with(true); }

/* ------------------------------------------------------- setters, getters */

static void test_setters_and_getters(void **state) {
  (void)state;
  HurrayDescriptor *d = gptq();
  const uint8_t *axes = hurray_descriptor_quant_storage_axes(d);
  assert_non_null(axes);
  assert_int_equal(axes[0], 1);
  assert_int_equal(axes[1], 0);
  uint32_t bits = 0, axis = 9;
  const uint8_t *order = NULL;
  assert_int_equal(hurray_descriptor_quant_code_packing(d, &bits, &axis, &order), 8);
  assert_int_equal(bits, 32);
  assert_int_equal(axis, 0);
  for (uint32_t j = 0; j < 8; j++) assert_int_equal(order[j], j);
  assert_int_equal(hurray_descriptor_quant_zero_point_packing(d, &bits, &axis, NULL), 8);
  assert_int_equal(axis, 1);
  assert_int_equal(hurray_descriptor_quant_zero_point_offset(d), 1);
  assert_int_equal(hurray_descriptor_quant_group_index_buffer(d), 3);
  assert_int_equal(hurray_descriptor_quant_group_index_dtype(d), HURRAY_DTYPE_INT32);
  assert_int_equal(hurray_descriptor_quant_codebook_buffer(d), HURRAY_NO_BUFFER);
  assert_int_equal(hurray_descriptor_quant_super_op(d), 0);
  assert_ok(hurray_descriptor_validate(d, error));
  /* the kind setter resets every field */
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 8, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_null(hurray_descriptor_quant_storage_axes(d));
  assert_int_equal(hurray_descriptor_quant_code_packing(d, NULL, NULL, NULL), 0);
  assert_int_equal(hurray_descriptor_quant_group_index_buffer(d), HURRAY_NO_BUFFER);
  assert_int_equal(hurray_descriptor_quant_zero_point_offset(d), 0);
  /* argument checks */
  assert_status(HURRAY_ERR_QUANT_PACKING,
                hurray_descriptor_set_quant_code_packing(d, 12, 0, NULL, error));
  assert_status(HURRAY_ERR_QUANT_PACKING,
                hurray_descriptor_set_quant_code_packing(d, 4, 0, NULL, error));
  assert_status(HURRAY_ERR_QUANT_PACKING,
                hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){0, 2}, error));
  assert_status(HURRAY_ERR_STATE,
                hurray_descriptor_set_quant_zero_point_packing(d, 32, 0, NULL, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_set_quant_super_scales(d, 1, HURRAY_DTYPE_FLOAT32, 0,
                                                         (HurraySuperScaleOp)3, 0.0, error));
  assert_ok(hurray_descriptor_set_quant_super_scales(d, 2, HURRAY_DTYPE_FLOAT16, 4,
                                                     HURRAY_SUPER_DIVIDE, -0.0, error));
  assert_int_equal(hurray_descriptor_quant_super_op(d), HURRAY_SUPER_DIVIDE);
  assert_int_equal(hurray_descriptor_quant_super_block_size(d), 4);
  assert_false(signbit(hurray_descriptor_quant_scale_offset(d)));
  /* other kinds take none of them */
  hurray_descriptor_set_quant_none(d);
  assert_status(HURRAY_ERR_STATE, hurray_descriptor_set_quant_zero_point_offset(d, 1, error));
  assert_ok(hurray_descriptor_set_quant_mx(d, HURRAY_MX_FP4_E2M1, 1, 1, error));
  assert_status(HURRAY_ERR_STATE, hurray_descriptor_set_quant_codebook(d, 1, error));
  hurray_descriptor_destroy(d);
}

/* Storage axes and packing live outside the descriptor's own block,
 * allocated only when set: a clone owns a copy, resetting the quantization
 * frees them (ASan sees a leak or a double free), and clearing them
 * leaves no stale value. */
static void test_storage_fields_are_owned(void **state) {
  (void)state;
  HurrayDescriptor *d = gptq(), *copy = NULL;
  assert_ok(hurray_descriptor_clone(d, &copy, error));
  hurray_descriptor_set_quant_none(d);
  assert_null(hurray_descriptor_quant_storage_axes(d));
  uint32_t word_bits = 99, axis = 99;
  const uint8_t *order = NULL;
  assert_int_equal(hurray_descriptor_quant_code_packing(d, &word_bits, &axis, &order), 0);
  assert_int_equal(word_bits, 0);
  const uint8_t *axes = hurray_descriptor_quant_storage_axes(copy);
  assert_non_null(axes);
  assert_int_equal(axes[0], 1);
  assert_int_equal(axes[1], 0);
  assert_int_equal(hurray_descriptor_quant_code_packing(copy, &word_bits, &axis, &order), 8);
  assert_int_equal(word_bits, 32);
  assert_ok(hurray_descriptor_set_quant_storage_axes(copy, NULL, error));
  assert_null(hurray_descriptor_quant_storage_axes(copy));
  assert_ok(hurray_descriptor_set_quant_code_packing(copy, 0, 0, NULL, error));
  assert_int_equal(hurray_descriptor_quant_code_packing(copy, &word_bits, &axis, &order), 0);
  assert_ok(hurray_descriptor_set_quant_zero_point_packing(copy, 0, 0, NULL, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_offset(copy, 0, error));
  /* Every storage field back at its default: the descriptor encodes as
   * one that never had them. */
  HurrayDescriptor *never = gptq_with(false);
  uint8_t *a = NULL, *b = NULL;
  size_t alen = 0, blen = 0;
  assert_ok(hurray_descriptor_encode(copy, &a, &alen, error));
  assert_ok(hurray_descriptor_encode(never, &b, &blen, error));
  assert_int_equal(alen, blen);
  assert_memory_equal(a, b, alen);
  hurray_free(a);
  hurray_free(b);
  hurray_descriptor_destroy(never);
  hurray_descriptor_destroy(copy);
  hurray_descriptor_destroy(d);
}

/* ------------------------------------------------------------------ codec */

static void round_trip(HurrayDescriptor *d) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  HurrayDescriptor *back = NULL, *copy = NULL;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  assert_ok(hurray_descriptor_decode(bytes, len, &back, error));
  assert_true(hurray_descriptor_equal(d, back));
  assert_ok(hurray_descriptor_clone(d, &copy, error));
  assert_true(hurray_descriptor_equal(d, copy));
  char *a = NULL, *b = NULL;
  assert_ok(hurray_descriptor_to_json(d, &a, error));
  assert_ok(hurray_descriptor_to_json(back, &b, error));
  assert_string_equal(a, b);
  hurray_free(a);
  hurray_free(b);
  hurray_free(bytes);
  hurray_descriptor_destroy(back);
  hurray_descriptor_destroy(copy);
}

static void test_codec_round_trip(void **state) {
  (void)state;
  static const char *const names[] = {"quant_gptq", "quant_awq", "quant_fp8_block",
                                      "quant_bnb_double", "quant_nvfp4"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    HurrayDescriptor *d = golden_vector_build(names[i]);
    assert_ok(hurray_descriptor_validate(d, error));
    round_trip(d);
    hurray_descriptor_destroy(d);
  }
  HurrayDescriptor *d = gptq();
  round_trip(d);
  hurray_descriptor_destroy(d);
}

/* Offset of the payload of record `tag` in an encoding, or 0. */
static size_t find_record(const uint8_t *p, size_t len, uint16_t tag, uint32_t *length) {
  size_t at = 6;
  while (at + 6 <= len) {
    uint16_t t = (uint16_t)(p[at] | p[at + 1] << 8);
    uint32_t n = (uint32_t)p[at + 2] | (uint32_t)p[at + 3] << 8 | (uint32_t)p[at + 4] << 16 |
                 (uint32_t)p[at + 5] << 24;
    if (t == tag) {
      *length = n;
      return at + 6;
    }
    at += 6 + n;
  }
  return 0;
}

/* Decodes `bytes` with byte `at` set to `value`, expecting `status`. */
static void expect_patched(const uint8_t *bytes, size_t len, size_t at, uint8_t value,
                           HurrayStatus status) {
  uint8_t *copy = malloc(len);
  assert_non_null(copy);
  memcpy(copy, bytes, len);
  copy[at] = value;
  HurrayDescriptor *out = NULL;
  assert_status(status, hurray_descriptor_decode(copy, len, &out, error));
  assert_null(out);
  free(copy);
}

static void test_codec_strict(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_awq");
  uint8_t *bytes = NULL;
  size_t len = 0;
  uint32_t n = 0;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  size_t s = find_record(bytes, len, TAG_QUANT_STORAGE, &n);
  assert_true(s != 0);
  assert_int_equal(n, 80 + 2);
  expect_patched(bytes, len, s + 0, 3, HURRAY_ERR_MALFORMED);      /* flag bit 1 */
  expect_patched(bytes, len, s + 6, 1, HURRAY_ERR_MALFORMED);      /* reserved */
  expect_patched(bytes, len, s + 1, 12, HURRAY_ERR_MALFORMED);     /* word bits */
  expect_patched(bytes, len, s + 1, 4, HURRAY_ERR_MALFORMED);      /* one lane */
  expect_patched(bytes, len, s + 16 + 1, 0, HURRAY_ERR_MALFORMED); /* order 0,0,... */
  expect_patched(bytes, len, s + 16 + 9, 1, HURRAY_ERR_MALFORMED); /* past the lanes */
  expect_patched(bytes, len, s + 2, 40, HURRAY_ERR_MALFORMED);     /* axis */
  expect_patched(bytes, len, s + 80, 0, HURRAY_ERR_MALFORMED);     /* axes 0,0 */
  expect_patched(bytes, len, s + 80, 2, HURRAY_ERR_MALFORMED);     /* axis 2 of rank 2 */
  expect_patched(bytes, len, s - 6 + 2, 81, HURRAY_ERR_MALFORMED); /* length: no axes room */
  hurray_free(bytes);
  hurray_descriptor_destroy(d);

  d = golden_vector_build("quant_bnb_double");
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  s = find_record(bytes, len, TAG_QUANT_SCALES, &n);
  assert_true(s != 0);
  assert_int_equal(n, 56);
  expect_patched(bytes, len, s + 20, 3, HURRAY_ERR_UNSUPPORTED); /* super_op */
  expect_patched(bytes, len, s + 20, 0, HURRAY_ERR_MALFORMED);   /* op without buffer... */
  expect_patched(bytes, len, s + 21, 1, HURRAY_ERR_MALFORMED);   /* reserved */
  expect_patched(bytes, len, s + 36, 1, HURRAY_ERR_MALFORMED);   /* reserved */
  expect_patched(bytes, len, s + 0, 1, HURRAY_ERR_MALFORMED);    /* axis2, no block2 */
  expect_patched(bytes, len, s + 16, 11, HURRAY_ERR_MALFORMED);  /* gidx dtype, no buffer */
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
}

static void test_codec_record_placement(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_nvfp4");
  uint8_t *bytes = NULL;
  size_t len = 0;
  uint32_t n = 0;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  size_t s = find_record(bytes, len, TAG_QUANT_SCALES, &n);
  assert_true(s != 0);
  /* scale_offset -0.0: not canonical */
  expect_patched(bytes, len, s + 55, 0x80, HURRAY_ERR_MALFORMED);
  /* every field cleared: an all-default record must be omitted */
  uint8_t *copy = malloc(len);
  assert_non_null(copy);
  memcpy(copy, bytes, len);
  memset(copy + s + 16, 0, 8);
  memset(copy + s + 24, 0xFF, 12);
  memset(copy + s + 36, 0, 20);
  HurrayDescriptor *out = NULL;
  assert_status(HURRAY_ERR_MALFORMED, hurray_descriptor_decode(copy, len, &out, error));
  free(copy);
  /* the record after an MX record, which takes none of it */
  uint8_t record[6 + 56];
  memcpy(record, bytes + s - 6, sizeof record);
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
  d = golden_vector_build("quant_mxfp4_e2m1");
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  size_t table = find_record(bytes, len, 0x0041, &n) - 6;
  copy = malloc(len + sizeof record);
  assert_non_null(copy);
  memcpy(copy, bytes, table);
  memcpy(copy + table, record, sizeof record);
  memcpy(copy + table + sizeof record, bytes + table, len - table);
  assert_status(HURRAY_ERR_MALFORMED,
                hurray_descriptor_decode(copy, len + sizeof record, &out, error));
  free(copy);
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
}

/* ------------------------------------------------------------- validation */

static void expect_invalid(HurrayDescriptor *d, HurrayStatus status) {
  assert_status(status, hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
}

static HurrayDescriptor *block4x32(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){4, 32});
  add(d, HURRAY_ROLE_DATA, 64);
  add(d, HURRAY_ROLE_SCALES, 4 * 2 * 2);
  HurrayError e = {0};
  assert_int_equal(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT16, &e),
                   HURRAY_OK);
  return d;
}

static void test_validation_rules(void **state) {
  (void)state;
  HurrayDescriptor *d;
  /* storage axes not a permutation: the setter refuses them (a decoded
   * descriptor holding them is refused by the decoder), leaving none */
  d = block4x32();
  assert_status(HURRAY_ERR_QUANT_PACKING,
                hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){1, 1}, error));
  assert_ok(hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
  /* lanes not dividing the packed axis: 8 lanes along 4 rows */
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_code_packing(d, 32, 0, NULL, error));
  expect_invalid(d, HURRAY_ERR_QUANT_PACKING);
  /* packed axis beyond the rank */
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_code_packing(d, 32, 2, NULL, error));
  expect_invalid(d, HURRAY_ERR_QUANT_PACKING);
  /* lane order not a permutation: refused by the setter, nothing set */
  d = block4x32();
  assert_status(HURRAY_ERR_QUANT_PACKING,
                hurray_descriptor_set_quant_code_packing(d, 8, 1, (const uint8_t[]){1, 1}, error));
  assert_ok(hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
  /* a buffer without its dtype (the encoding requires both) */
  d = block4x32();
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_set_quant_group_index(d, 2, HURRAY_DTYPE_INVALID, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_set_quant_super_scales(d, 2, HURRAY_DTYPE_INVALID, 4,
                                                         HURRAY_SUPER_MULTIPLY, 0.0, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INVALID, error));
  assert_ok(hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
  /* NO_BUFFER clears the zero points, their dtype and packing with them:
   * the dtype was kept, and the decoder refused the encoding */
  d = block4x32();
  add(d, HURRAY_ROLE_ZERO_POINTS, 8);
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT4, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_packing(d, 8, 1, NULL, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, HURRAY_NO_BUFFER, HURRAY_DTYPE_INT8,
                                                          error));
  assert_int_equal(hurray_descriptor_quant_zero_point_dtype(d), HURRAY_DTYPE_INVALID);
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  HurrayDescriptor *back = NULL;
  assert_ok(hurray_descriptor_decode(bytes, len, &back, error));
  hurray_descriptor_destroy(back);
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
  /* strides with packed fields */
  d = make(HURRAY_DTYPE_UINT8, 2, (uint64_t[]){4, 32});
  add(d, HURRAY_ROLE_DATA, 128);
  add(d, HURRAY_ROLE_SCALES, 4 * 2 * 4);
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){32, 1}, error));
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_offset(d, 1, error));
  expect_invalid(d, HURRAY_ERR_STRIDES);
  /* zero-point offset out of range, and on float codes */
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_zero_point_offset(d, INT64_C(1) << 40, error));
  expect_invalid(d, HURRAY_ERR_QUANT_ZERO_POINT);
  d = make(HURRAY_DTYPE_FLOAT8_E4M3FN, 2, (uint64_t[]){4, 32});
  add(d, HURRAY_ROLE_DATA, 128);
  add(d, HURRAY_ROLE_SCALES, 4 * 2 * 4);
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_offset(d, 1, error));
  expect_invalid(d, HURRAY_ERR_QUANT_ZERO_POINT);
  /* 2-D blocks: axis2 == axis, axis2 beyond the rank */
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_block2(d, 1, 2, error));
  expect_invalid(d, HURRAY_ERR_QUANT_AXIS);
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_block2(d, 2, 2, error));
  expect_invalid(d, HURRAY_ERR_QUANT_AXIS);
  /* 2-D blocks change the scale count: [ceil(4/3), 2] = 4 scales, not 8 */
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_block2(d, 0, 3, error));
  expect_invalid(d, HURRAY_ERR_QUANT_SCALE_COUNT);
  /* group index: int32 only, exact size, role, block affine only */
  d = block4x32();
  add(d, HURRAY_ROLE_GROUP_INDEX, 32 * 8);
  assert_ok(hurray_descriptor_set_quant_group_index(d, 2, HURRAY_DTYPE_INT64, error));
  expect_invalid(d, HURRAY_ERR_QUANT_FIELD);
  d = block4x32();
  add(d, HURRAY_ROLE_GROUP_INDEX, 31 * 4);
  assert_ok(hurray_descriptor_set_quant_group_index(d, 2, HURRAY_DTYPE_INT32, error));
  expect_invalid(d, HURRAY_ERR_QUANT_FIELD);
  d = block4x32();
  add(d, HURRAY_ROLE_SCALES, 32 * 4);
  assert_ok(hurray_descriptor_set_quant_group_index(d, 2, HURRAY_DTYPE_INT32, error));
  expect_invalid(d, HURRAY_ERR_BUFFER_ROLE);
  d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){4, 32});
  add(d, HURRAY_ROLE_DATA, 64);
  add(d, HURRAY_ROLE_SCALES, 16);
  add(d, HURRAY_ROLE_GROUP_INDEX, 16);
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_group_index(d, 2, HURRAY_DTYPE_INT32, error));
  expect_invalid(d, HURRAY_ERR_QUANT_FIELD);
  /* codebook: 2^bits float32 exactly, unsigned codes, no zero point */
  d = block4x32();
  add(d, HURRAY_ROLE_CODEBOOK, 15 * 4);
  assert_ok(hurray_descriptor_set_quant_codebook(d, 2, error));
  expect_invalid(d, HURRAY_ERR_QUANT_FIELD);
  d = block4x32();
  add(d, HURRAY_ROLE_CODEBOOK, 16 * 4);
  assert_ok(hurray_descriptor_set_quant_zero_point(d, 3, error));
  assert_ok(hurray_descriptor_set_quant_codebook(d, 2, error));
  expect_invalid(d, HURRAY_ERR_QUANT_FIELD);
  /* scale codebook: uint8 scales, 256 entries */
  d = block4x32();
  add(d, HURRAY_ROLE_CODEBOOK, 256 * 4);
  assert_ok(hurray_descriptor_set_quant_scale_codebook(d, 2, error));
  expect_invalid(d, HURRAY_ERR_QUANT_SCALE_DTYPE);
  /* super scales: dtype, count */
  d = block4x32();
  add(d, HURRAY_ROLE_SUPER_SCALES, 4);
  assert_ok(hurray_descriptor_set_quant_super_scales(d, 2, HURRAY_DTYPE_UINT8, 0,
                                                     HURRAY_SUPER_MULTIPLY, 0.0, error));
  expect_invalid(d, HURRAY_ERR_QUANT_SCALE_DTYPE);
  d = block4x32();
  add(d, HURRAY_ROLE_SUPER_SCALES, 4);
  assert_ok(hurray_descriptor_set_quant_super_scales(d, 2, HURRAY_DTYPE_FLOAT32, 3,
                                                     HURRAY_SUPER_MULTIPLY, 0.0, error));
  expect_invalid(d, HURRAY_ERR_QUANT_SCALE_COUNT); /* 8 scales / 3 = 3 super scales */
  /* scale offset finite */
  d = block4x32();
  assert_ok(hurray_descriptor_set_quant_super_scales(d, HURRAY_NO_BUFFER, 0, 0, 0, NAN, error));
  expect_invalid(d, HURRAY_ERR_QUANT_SCALE);
  /* NF4 takes no storage axes */
  d = make(HURRAY_DTYPE_UINT4, 1, (uint64_t[]){64});
  add(d, HURRAY_ROLE_DATA, 32);
  add(d, HURRAY_ROLE_SCALES, 4);
  assert_ok(hurray_descriptor_set_quant_nf4(d, 64, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){0}, error));
  expect_invalid(d, HURRAY_ERR_QUANT_FIELD);
  /* zero-point packing along an axis its lanes do not divide */
  d = block4x32();
  add(d, HURRAY_ROLE_ZERO_POINTS, 4);
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT4, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_packing(d, 32, 0, NULL, error));
  expect_invalid(d, HURRAY_ERR_QUANT_PACKING);
}

/* A zero-point order set for 2 lanes (uint8 in 16-bit words) is 1,0,0,0
 * once the zero points become uint4 (4 lanes): the setter kept it, so
 * validate must see it is no longer a permutation. */
static void test_zero_point_order_stale_after_dtype_change(void **state) {
  (void)state;
  HurrayDescriptor *d = make(HURRAY_DTYPE_INT8, 2, (uint64_t[]){4, 8});
  add(d, HURRAY_ROLE_DATA, 32);
  uint32_t scales = add(d, HURRAY_ROLE_SCALES, 16), zeros = add(d, HURRAY_ROLE_ZERO_POINTS, 2);
  assert_ok(
      hurray_descriptor_set_quant_per_channel_affine(d, 0, scales, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, zeros, HURRAY_DTYPE_UINT8, error));
  assert_ok(
      hurray_descriptor_set_quant_zero_point_packing(d, 16, 0, (const uint8_t[]){1, 0}, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, zeros, HURRAY_DTYPE_UINT4, error));
  const uint8_t *order = NULL;
  assert_int_equal(hurray_descriptor_quant_zero_point_packing(d, NULL, NULL, &order), 4);
  assert_memory_equal(order, ((const uint8_t[]){1, 0, 0, 0}), 4);
  assert_status(HURRAY_ERR_QUANT_PACKING, hurray_descriptor_validate(d, error));
  /* The same descriptor with a permutation of the 4 lanes is valid. */
  assert_ok(hurray_descriptor_set_quant_zero_point_packing(d, 16, 0, (const uint8_t[]){1, 0, 3, 2},
                                                           error));
  assert_ok(hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
}

static void test_required_bytes(void **state) {
  (void)state;
  HurrayDescriptor *d = gptq();
  uint64_t need = 0;
  static const uint64_t want[] = {64, 64, 8, 64};
  for (uint32_t i = 0; i < 4; i++) {
    assert_ok(hurray_descriptor_buffer_required_bytes(d, i, &need, error));
    assert_int_equal(need, want[i]);
  }
  uint64_t count = 0;
  assert_ok(hurray_descriptor_quant_scale_count(d, &count, error));
  assert_int_equal(count, 16);
  hurray_descriptor_destroy(d);
  d = golden_vector_build("quant_fp8_block");
  assert_ok(hurray_descriptor_quant_scale_count(d, &count, error));
  assert_int_equal(count, 6);
  hurray_descriptor_destroy(d);
}

/* ----------------------------------------------------------------- kernel */

static HurrayBufferList *list_of(void *const *data, const uint64_t *sizes, size_t n) {
  HurrayBufferList *list = NULL;
  HurrayError e = {0};
  assert_int_equal(hurray_buffer_list_create(&list, &e), HURRAY_OK);
  for (size_t i = 0; i < n; i++) {
    HurrayBuffer *b = NULL;
    assert_int_equal(hurray_buffer_create(data[i], sizes[i], NULL, NULL, &b, &e), HURRAY_OK);
    assert_int_equal(hurray_buffer_list_push(list, b, &e), HURRAY_OK);
  }
  return list;
}

static void test_kernel_gptq(void **state) {
  (void)state;
  /* logical [8, 16]: w[n][k] = code(k, n) with code = (k + n) % 16 stored
   * at word [k / 8][n], lane k % 8; zero points z[g][n] = n % 4 stored
   * minus the offset 1 would be n % 4 - 1: store (n + 3) % 16 and offset 1
   * gives zero (n + 4) % 16. Scales s[g][n] = (g + 1) * 0.5 + n. */
  uint32_t words[2 * 8] = {0}, zeros[2] = {0};
  float scales[2 * 8];
  int32_t gidx[16];
  for (uint32_t k = 0; k < 16; k++) {
    for (uint32_t n = 0; n < 8; n++) words[(k / 8) * 8 + n] |= ((k + n) % 16u) << (4 * (k % 8));
    gidx[k] = (int32_t)((k * 7) % 2); /* a non-trivial g_idx */
  }
  for (uint32_t g = 0; g < 2; g++) {
    for (uint32_t n = 0; n < 8; n++) {
      zeros[g] |= ((n + 3) % 16u) << (4 * n);
      scales[g * 8 + n] = (float)(g + 1) * 0.5f + (float)n;
    }
  }
  HurrayDescriptor *d = gptq();
  void *data[] = {words, scales, zeros, gidx};
  uint64_t sizes[] = {sizeof words, sizeof scales, sizeof zeros, sizeof gidx};
  HurrayBufferList *list = list_of(data, sizes, 4);
  float out[8 * 16];
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  for (uint32_t n = 0; n < 8; n++) {
    for (uint32_t k = 0; k < 16; k++) {
      uint32_t g = (uint32_t)gidx[k];
      int64_t diff = (int64_t)((k + n) % 16) - (int64_t)((n + 3) % 16 + 1);
      float want = (float)diff * scales[g * 8 + n];
      assert_true(out[n * 16 + k] == want);
    }
  }
  /* to_dense copied the words as stored, with OK: codes in another order */
  uint8_t dense[8 * 16 / 2];
  assert_status(HURRAY_ERR_UNSUPPORTED,
                hurray_tensor_to_dense(d, list, dense, sizeof dense, error));
  HurrayError e0 = {0};
  hurray_tensor_to_dense(d, list, dense, sizeof dense, &e0);
  assert_non_null(strstr(e0.message, "storage axes, code packing"));
  HurrayDescriptor *copy = NULL;
  assert_ok(hurray_descriptor_clone(d, &copy, error));
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_compute_statistics(copy, list, error));
  hurray_descriptor_destroy(copy);
  /* a group index out of range names the entry and writes nothing */
  gidx[5] = 2;
  memset(out, 0x7F, sizeof out);
  assert_status(HURRAY_ERR_QUANT_GROUP_INDEX,
                hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  HurrayError e = {0};
  hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, &e);
  assert_non_null(strstr(e.message, "group_index_buffer: entry 5 is 2"));
  assert_int_equal(((uint8_t *)out)[0], 0x7F);
  gidx[5] = -1;
  assert_status(HURRAY_ERR_QUANT_GROUP_INDEX,
                hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_kernel_awq_order_and_signed(void **state) {
  (void)state;
  /* int4 codes [1, 8], one int32 word, lane order 0,2,4,6,1,3,5,7: lane j
   * holds element order[j]; element e has value e - 4 (signed). */
  static const uint8_t order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  uint32_t word = 0;
  for (uint32_t j = 0; j < 8; j++) word |= ((uint32_t)((int)order[j] - 4) & 15u) << (4 * j);
  float scale = 0.25f;
  HurrayDescriptor *d = make(HURRAY_DTYPE_INT4, 2, (uint64_t[]){1, 8});
  add(d, HURRAY_ROLE_DATA, 4);
  add(d, HURRAY_ROLE_SCALES, 4);
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, 8, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_code_packing(d, 32, 1, order, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_offset(d, -2, error));
  void *data[] = {&word, &scale};
  uint64_t sizes[] = {4, 4};
  HurrayBufferList *list = list_of(data, sizes, 2);
  float out[8];
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  for (int e = 0; e < 8; e++) assert_true(out[e] == (float)(e - 4 + 2) * 0.25f);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_kernel_fp8_two_d_blocks(void **state) {
  (void)state;
  /* [3, 5] of E4M3 1.0 (0x38), blocks 2 x 2: scales [2, 3] = 1..6 */
  uint8_t codes[15];
  memset(codes, 0x38, sizeof codes);
  float scales[6] = {1, 2, 3, 4, 5, 6};
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT8_E4M3FN, 2, (uint64_t[]){3, 5});
  add(d, HURRAY_ROLE_DATA, 15);
  add(d, HURRAY_ROLE_SCALES, 24);
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 0, 2, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_block2(d, 1, 2, error));
  void *data[] = {codes, scales};
  uint64_t sizes[] = {15, 24};
  HurrayBufferList *list = list_of(data, sizes, 2);
  float out[15];
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  for (int r = 0; r < 3; r++) {
    for (int c = 0; c < 5; c++) assert_true(out[r * 5 + c] == scales[(r / 2) * 3 + c / 2]);
  }
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_kernel_double_quant_and_super_divide(void **state) {
  (void)state;
  /* NF4 kind, 4 elements, block 2: bytes high nibble first; codebook
   * cb[c] = c; absmax codes {1, 2} through scale codebook sc[i] = i / 2,
   * super scale 3 (one per 1 scale), offset 0.5: absmax = {2, 3.5}. */
  uint8_t bytes[2] = {0x12, 0x34}; /* elements 1, 2, 3, 4 */
  uint8_t absmax[2] = {1, 2};
  float cb[16], sc[256], super[2] = {3.0f, 3.0f};
  for (int i = 0; i < 16; i++) cb[i] = (float)i;
  for (int i = 0; i < 256; i++) sc[i] = (float)i / 2.0f;
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 1, (uint64_t[]){4});
  add(d, HURRAY_ROLE_DATA, 2);
  add(d, HURRAY_ROLE_SCALES, 2);
  add(d, HURRAY_ROLE_CODEBOOK, sizeof cb);
  add(d, HURRAY_ROLE_CODEBOOK, sizeof sc);
  add(d, HURRAY_ROLE_SUPER_SCALES, sizeof super);
  assert_ok(hurray_descriptor_set_quant_nf4(d, 2, 1, HURRAY_DTYPE_UINT8, error));
  assert_ok(hurray_descriptor_set_quant_code_packing(d, 8, 0, (const uint8_t[]){1, 0}, error));
  assert_ok(hurray_descriptor_set_quant_codebook(d, 2, error));
  assert_ok(hurray_descriptor_set_quant_scale_codebook(d, 3, error));
  assert_ok(hurray_descriptor_set_quant_super_scales(d, 4, HURRAY_DTYPE_FLOAT32, 1,
                                                     HURRAY_SUPER_MULTIPLY, 0.5, error));
  void *data[] = {bytes, absmax, cb, sc, super};
  uint64_t sizes[] = {2, 2, sizeof cb, sizeof sc, sizeof super};
  HurrayBufferList *list = list_of(data, sizes, 5);
  float out[4];
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  assert_true(out[0] == 1 * 2.0f && out[1] == 2 * 2.0f);
  assert_true(out[2] == 3 * 3.5f && out[3] == 4 * 3.5f);
  /* the same with DIVIDE: absmax = {0.5 / 3 + 0.5, 1 / 3 + 0.5} in binary32 */
  assert_ok(hurray_descriptor_set_quant_super_scales(d, 4, HURRAY_DTYPE_FLOAT32, 1,
                                                     HURRAY_SUPER_DIVIDE, 0.5, error));
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, sizeof out, error));
  volatile float three = 3.0f;
  float a0 = 0.5f / three + 0.5f, a1 = 1.0f / three + 0.5f;
  assert_true(out[0] == 1 * a0 && out[3] == 4 * a1);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* The specialised runs of the kernel against its generic loop
 * (HURRAY_PACKED_GENERIC=1), byte for byte: a GPTQ layout with a partial
 * last group, a scrambled g_idx and a random lane order, large enough
 * (8.5 MB of float32) to be split over two threads; then the small kernel
 * tests above again through the generic loop. */
static uint32_t lcg(uint64_t *x) {
  *x = *x * 6364136223846793005u + 1442695040888963407u;
  return (uint32_t)(*x >> 33);
}

static void test_kernel_fast_matches_generic(void **state) {
  enum { N = 520, K = 4104, G = 128, NG = (K + G - 1) / G };
  static const uint8_t order[8] = {3, 0, 7, 5, 1, 6, 2, 4};
  uint64_t x = 42;
  uint32_t *words = calloc((size_t)K / 8 * N, 4), *zeros = calloc((size_t)NG * N / 8, 4);
  float *scales = malloc((size_t)NG * N * 4);
  int32_t *gidx = malloc(K * 4);
  float *want = malloc((size_t)N * K * 4), *got = malloc((size_t)N * K * 4);
  assert_true(words && zeros && scales && gidx && want && got);
  for (size_t i = 0; i < (size_t)K / 8 * N; i++) words[i] = lcg(&x) ^ (lcg(&x) << 16);
  for (size_t i = 0; i < (size_t)NG * N / 8; i++) zeros[i] = lcg(&x) ^ (lcg(&x) << 16);
  for (size_t i = 0; i < (size_t)NG * N; i++) scales[i] = (float)(lcg(&x) % 1000) / 256.0f - 2.0f;
  for (int k = 0; k < K; k++) gidx[k] = (int32_t)(lcg(&x) % NG);
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){N, K});
  add(d, HURRAY_ROLE_DATA, (uint64_t)K / 8 * N * 4);
  add(d, HURRAY_ROLE_SCALES, (uint64_t)NG * N * 4);
  add(d, HURRAY_ROLE_ZERO_POINTS, (uint64_t)NG * N / 8 * 4);
  add(d, HURRAY_ROLE_GROUP_INDEX, K * 4);
  assert_ok(hurray_descriptor_set_quant_block_affine(d, 1, G, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT4, error));
  assert_ok(hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){1, 0}, error));
  assert_ok(hurray_descriptor_set_quant_code_packing(d, 32, 0, order, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_packing(d, 32, 1, NULL, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_offset(d, 1, error));
  assert_ok(hurray_descriptor_set_quant_group_index(d, 3, HURRAY_DTYPE_INT32, error));
  void *data[] = {words, scales, zeros, gidx};
  uint64_t sizes[] = {(uint64_t)K / 8 * N * 4, (uint64_t)NG * N * 4, (uint64_t)NG * N / 8 * 4,
                      K * 4};
  HurrayBufferList *list = list_of(data, sizes, 4);
  uint64_t bytes = (uint64_t)N * K * 4;
  for (int pass = 0; pass < 2; pass++) { /* scrambled g_idx, then sorted */
    setenv("HURRAY_PACKED_GENERIC", "1", 1);
    assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, want, bytes, error));
    unsetenv("HURRAY_PACKED_GENERIC");
    for (uint32_t threads = 1; threads <= 3; threads++) {
      memset(got, 0, bytes);
      assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, threads, got, bytes, error));
      assert_memory_equal(got, want, bytes);
    }
    for (int k = 0; k < K; k++) gidx[k] = k / G;
  }
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  free(words);
  free(zeros);
  free(scales);
  free(gidx);
  free(want);
  free(got);
  setenv("HURRAY_PACKED_GENERIC", "1", 1);
  test_kernel_gptq(state);
  test_kernel_awq_order_and_signed(state);
  test_kernel_fp8_two_d_blocks(state);
  test_kernel_double_quant_and_super_divide(state);
  unsetenv("HURRAY_PACKED_GENERIC");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_setters_and_getters),
      cmocka_unit_test(test_storage_fields_are_owned),
      cmocka_unit_test(test_codec_round_trip),
      cmocka_unit_test(test_codec_strict),
      cmocka_unit_test(test_codec_record_placement),
      cmocka_unit_test(test_validation_rules),
      cmocka_unit_test(test_zero_point_order_stale_after_dtype_change),
      cmocka_unit_test(test_required_bytes),
      cmocka_unit_test(test_kernel_gptq),
      cmocka_unit_test(test_kernel_awq_order_and_signed),
      cmocka_unit_test(test_kernel_fp8_two_d_blocks),
      cmocka_unit_test(test_kernel_double_quant_and_super_divide),
      cmocka_unit_test(test_kernel_fast_matches_generic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
