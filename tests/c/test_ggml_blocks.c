/*
 * Block-coded quantization: the descriptor (setter, validation, codec,
 * JSON) and the block decoders on blocks built by hand, each expected value
 * worked from docs/spec/quantization.md "Block-coded formats". The
 * bit-exact cross-check against gguf-py on random and edge blocks of every
 * type lives in tests/python/test_gguf_types.py.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

typedef struct Coded {
  HurrayDescriptor *d;
  HurrayBufferList *list;
} Coded;

/* One row of `nblocks` blocks of `format`, the bytes copied. */
static Coded coded(HurrayBlockFormat format, const uint8_t *blocks, uint32_t nblocks) {
  uint32_t elements = 0, bytes = 0;
  assert_true(hurray_block_format_info((uint32_t)format, &elements, &bytes, NULL));
  Coded c = {0};
  uint64_t shape[2] = {1, (uint64_t)elements * nblocks};
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 2, shape, &c.d, error));
  assert_ok(hurray_descriptor_add_buffer(c.d, HURRAY_ROLE_DATA, (uint64_t)bytes * nblocks, 1,
                                         HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_set_layout_dense(c.d, 0, error));
  assert_ok(hurray_descriptor_set_quant_block_coded(c.d, format, 1, error));
  assert_ok(hurray_descriptor_validate(c.d, error));
  void *copy = malloc((size_t)bytes * nblocks);
  memcpy(copy, blocks, (size_t)bytes * nblocks);
  HurrayBuffer *b = NULL;
  assert_ok(hurray_buffer_create(copy, (uint64_t)bytes * nblocks, NULL, NULL, &b, error));
  assert_ok(hurray_buffer_list_create(&c.list, error));
  assert_ok(hurray_buffer_list_push(c.list, b, error));
  return c;
}

static void coded_free(Coded c) {
  free((void *)hurray_buffer_data(hurray_buffer_list_get(c.list, 0)));
  hurray_descriptor_destroy(c.d);
  hurray_buffer_list_destroy(c.list);
}

static float *decode(HurrayBlockFormat format, const uint8_t *blocks, uint32_t nblocks) {
  uint32_t elements = 0;
  hurray_block_format_info((uint32_t)format, &elements, NULL, NULL);
  Coded c = coded(format, blocks, nblocks);
  size_t n = (size_t)elements * nblocks;
  float *y = malloc(n * sizeof *y);
  assert_ok(hurray_dequantize(c.d, c.list, HURRAY_DTYPE_FLOAT32, 1, y, n * sizeof *y, error));
  float *z = malloc(n * sizeof *z);
  assert_ok(hurray_dequantize(c.d, c.list, HURRAY_DTYPE_FLOAT32, 4, z, n * sizeof *z, error));
  assert_memory_equal(y, z, n * sizeof *y);
  free(z);
  coded_free(c);
  return y;
}

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void test_q4_1_and_q5_0(void **state) {
  (void)state;
  uint8_t b[22] = {0};
  put16(b, 0x3C00);     /* d = 1 */
  put16(b + 2, 0xC800); /* m = -8 */
  for (int l = 0; l < 16; l++) b[4 + l] = (uint8_t)(l | (15 - l) << 4);
  float *y = decode(HURRAY_BLOCK_GGML_Q4_1, b, 1);
  for (int l = 0; l < 16; l++) {
    assert_true(y[l] == (float)(l - 8));
    assert_true(y[l + 16] == (float)(7 - l));
  }
  free(y);
  memset(b, 0, sizeof b);
  put16(b, 0x3800); /* d = 0.5 */
  b[4] = 0xFF;      /* qh bits 16..31: the fifth bit of elements 16..31 */
  b[5] = 0xFF;
  y = decode(HURRAY_BLOCK_GGML_Q5_0, b, 1);
  for (int l = 0; l < 16; l++) {
    assert_true(y[l] == -8.0f);     /* (0 - 16) * 0.5 */
    assert_true(y[l + 16] == 0.0f); /* (16 - 16) * 0.5 */
  }
  free(y);
}

static void test_q6_k_and_q8_k(void **state) {
  (void)state;
  uint8_t b[292] = {0};
  for (int k = 0; k < 16; k++) b[192 + k] = 1;
  put16(b + 208, 0x3C00);
  b[0] = 0x0F;   /* ql: element 0 low nibble 15, element 64 high nibble 0 */
  b[128] = 0x03; /* qh: element 0 high bits 3 */
  float *y = decode(HURRAY_BLOCK_GGML_Q6_K, b, 1);
  assert_true(y[0] == 31.0f); /* (15 | 48) - 32 */
  assert_true(y[64] == -32.0f);
  assert_true(y[255] == -32.0f);
  free(y);
  memset(b, 0, sizeof b);
  float d = 0.25f;
  memcpy(b, &d, 4);
  for (int l = 0; l < 256; l++) b[4 + l] = (uint8_t)(l - 128);
  y = decode(HURRAY_BLOCK_GGML_Q8_K, b, 1);
  for (int l = 0; l < 256; l++) assert_true(y[l] == 0.25f * (float)(int8_t)(uint8_t)(l - 128));
  free(y);
}

static void test_fp4_blocks(void **state) {
  (void)state;
  static const float kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  uint8_t b[36] = {0};
  b[0] = 128; /* 2^(128-127) halved: 1, times the doubled E2M1 value */
  for (int l = 0; l < 16; l++) b[1 + l] = (uint8_t)(l | (15 - l) << 4);
  float *y = decode(HURRAY_BLOCK_GGML_MXFP4, b, 1);
  for (int l = 0; l < 16; l++) {
    assert_true(y[l] == kv[l]);
    assert_true(y[l + 16] == kv[15 - l]);
  }
  free(y);
  b[0] = 0; /* 2^-128: a binary32 subnormal, still exact */
  y = decode(HURRAY_BLOCK_GGML_MXFP4, b, 1);
  assert_true(y[1] == ldexpf(1.0f, -128));
  free(y);
  b[0] = 255; /* 2^127, not NaN: 12 * 2^127 overflows to Inf */
  y = decode(HURRAY_BLOCK_GGML_MXFP4, b, 1);
  assert_true(y[7] == ldexpf(1.0f, 127) * 12.0f && isinf(y[7]));
  free(y);

  memset(b, 0, sizeof b);
  b[0] = 0x38;                                     /* E4M3 1.0, halved */
  b[1] = 0x7F;                                     /* +0 by definition */
  b[2] = 0x01;                                     /* 2^-9, halved */
  b[3] = 0xFF;                                     /* sign bit ignored: 1.875 * 2^8, halved */
  for (int k = 0; k < 4; k++) b[4 + 8 * k] = 0x07; /* element 16k: kv 12, element 16k+8: 0 */
  y = decode(HURRAY_BLOCK_GGML_NVFP4, b, 1);
  assert_true(y[0] == 6.0f);
  assert_true(y[16] == 0.0f && !signbit(y[16]));
  assert_true(y[32] == 12.0f * ldexpf(1.0f, -10));
  assert_true(y[48] == 12.0f * 240.0f);
  assert_true(y[8] == 0.0f);
  free(y);
}

static void test_ternary_and_iq4(void **state) {
  (void)state;
  uint8_t b[66] = {0};
  memset(b, 0xE4, 64);   /* 2-bit fields 0, 1, 2, 3 */
  put16(b + 64, 0x4000); /* d = 2 */
  float *y = decode(HURRAY_BLOCK_GGML_TQ2_0, b, 1);
  for (int e = 0; e < 256; e++) assert_true(y[e] == 2.0f * (float)(((e >> 5) & 3) - 1));
  free(y);
  static const float kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};
  uint8_t n[18] = {0};
  put16(n, 0x3C00);
  for (int l = 0; l < 16; l++) n[2 + l] = (uint8_t)(l | (15 - l) << 4);
  y = decode(HURRAY_BLOCK_GGML_IQ4_NL, n, 1);
  for (int l = 0; l < 16; l++) assert_true(y[l] == kv[l] && y[l + 16] == kv[15 - l]);
  free(y);
}

static void test_iq2_xxs_signs_and_nan(void **state) {
  (void)state;
  uint8_t b[66] = {0};
  put16(b, 0x3C00);
  /* sub-block 0: grid rows 0 (all 8), scale nibble 15, first sign index 1
   * (ksigns 0x81: elements 0 and 7 negative) */
  uint32_t a1 = 15u << 28 | 1u;
  memcpy(b + 6, &a1, 4);
  float *y = decode(HURRAY_BLOCK_GGML_IQ2_XXS, b, 1);
  /* db = (1 * (0.5 + 15)) * 0.25 = 3.875; 3.875 * 8 = 31 */
  assert_true(y[0] == -31.0f && y[7] == -31.0f);
  for (int j = 1; j < 7; j++) assert_true(y[j] == 31.0f);
  free(y);
  /* A NaN scale keeps its sign through the -1 multiply, as numpy's does. */
  put16(b, 0x7E00);
  y = decode(HURRAY_BLOCK_GGML_IQ2_XXS, b, 1);
  assert_int_equal(bits(y[0]), 0x7fc00000u);
  assert_int_equal(bits(y[1]), 0x7fc00000u);
  free(y);
}

static void test_half_outputs(void **state) {
  (void)state;
  uint8_t b[66] = {0};
  memset(b, 0xE4, 64);
  put16(b + 64, 0x4000);
  Coded c = coded(HURRAY_BLOCK_GGML_TQ2_0, b, 1);
  uint16_t h[256];
  assert_ok(hurray_dequantize(c.d, c.list, HURRAY_DTYPE_FLOAT16, 1, h, sizeof h, error));
  assert_int_equal(h[0], 0xC000);  /* -2 */
  assert_int_equal(h[96], 0x4400); /* 4 */
  assert_ok(hurray_dequantize(c.d, c.list, HURRAY_DTYPE_BFLOAT16, 1, h, sizeof h, error));
  assert_int_equal(h[0], 0xC000);
  assert_int_equal(h[96], 0x4080);
  coded_free(c);
}

static void test_descriptor_rules(void **state) {
  (void)state;
  uint8_t b[144] = {0};
  Coded c = coded(HURRAY_BLOCK_GGML_Q4_K, b, 1);
  assert_int_equal(hurray_descriptor_quant_kind(c.d), HURRAY_QUANT_BLOCK_CODED);
  assert_int_equal(hurray_descriptor_quant_block_format(c.d), HURRAY_BLOCK_GGML_Q4_K);
  assert_int_equal(hurray_descriptor_quant_block_size(c.d), 256);
  uint64_t scales = 1;
  assert_ok(hurray_descriptor_quant_scale_count(c.d, &scales, error));
  assert_int_equal(scales, 0);
  uint64_t need = 0;
  assert_ok(hurray_descriptor_buffer_required_bytes(c.d, 0, &need, error));
  assert_int_equal(need, 144);

  uint8_t *enc = NULL;
  size_t len = 0;
  assert_ok(hurray_descriptor_encode(c.d, &enc, &len, error));
  HurrayDescriptor *back = NULL;
  assert_ok(hurray_descriptor_decode(enc, len, &back, error));
  assert_true(hurray_descriptor_equal(c.d, back));
  hurray_descriptor_destroy(back);
  char *json = NULL;
  assert_ok(hurray_descriptor_to_json(c.d, &json, error));
  assert_non_null(strstr(json, "\"kind\": \"block_coded\", \"format\": \"ggml_q4_k\""));
  hurray_free(json);
  /* An unknown format in the record is a newer writer's: unsupported. */
  for (size_t i = 0; i + 8 <= len; i++) {
    if (enc[i] == 0x3B && enc[i + 1] == 0 && enc[i + 2] == 8) {
      enc[i + 6] = 99;
      break;
    }
  }
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_descriptor_decode(enc, len, &back, error));
  hurray_free(enc);

  /* to_dense and statistics have no per-element codes to walk (the buffer
   * holds 144 bytes, not 256 uint8 elements) */
  uint8_t dense[256];
  assert_status(HURRAY_ERR_UNSUPPORTED,
                hurray_tensor_to_dense(c.d, c.list, dense, sizeof dense, error));
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_compute_statistics(c.d, c.list, error));
  coded_free(c);

  uint64_t shape[2] = {2, 256};
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, shape, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 288, 1, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_set_quant_block_coded(d, HURRAY_BLOCK_GGML_Q4_K, 1, error));
  assert_status(HURRAY_ERR_QUANT_DTYPE, hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 2, shape, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 287, 1, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_set_quant_block_coded(d, HURRAY_BLOCK_GGML_Q4_K, 1, error));
  assert_status(HURRAY_ERR_BUFFER_TOO_SMALL, hurray_descriptor_validate(d, error));
  assert_ok(hurray_descriptor_set_quant_block_coded(d, HURRAY_BLOCK_GGML_Q4_K, 0, error));
  assert_status(HURRAY_ERR_QUANT_AXIS, hurray_descriptor_validate(d, error));
  assert_status(HURRAY_ERR_UNSUPPORTED,
                hurray_descriptor_set_quant_block_coded(d, (HurrayBlockFormat)9, 1, error));
  hurray_descriptor_destroy(d);
  uint64_t odd[1] = {300};
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, odd, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1000, 1, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_set_quant_block_coded(d, HURRAY_BLOCK_GGML_Q4_K, 0, error));
  assert_status(HURRAY_ERR_QUANT_BLOCK_SIZE, hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);

  const char *name = NULL;
  assert_true(hurray_block_format_info(HURRAY_BLOCK_GGML_IQ1_M, NULL, NULL, &name));
  assert_string_equal(name, "ggml_iq1_m");
  assert_int_equal(hurray_block_format_from_name("ggml_iq1_m"), HURRAY_BLOCK_GGML_IQ1_M);
  assert_int_equal(hurray_block_format_from_name("q4_k"), 0);
  assert_false(hurray_block_format_info(9, NULL, NULL, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_q4_1_and_q5_0),
      cmocka_unit_test(test_q6_k_and_q8_k),
      cmocka_unit_test(test_fp4_blocks),
      cmocka_unit_test(test_ternary_and_iq4),
      cmocka_unit_test(test_iq2_xxs_signs_and_nan),
      cmocka_unit_test(test_half_outputs),
      cmocka_unit_test(test_descriptor_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
