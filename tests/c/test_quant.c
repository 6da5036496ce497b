/*
 * The quantization kernels: options, exact small cases worked by hand,
 * round trips for every scheme, thread-count independence, and the error
 * paths. The cross-checks against reference implementations (ml_dtypes,
 * bitsandbytes, torch, gguf) live in tests/python/test_quant.py.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

typedef struct Quantized {
  HurrayDescriptor *d;
  HurrayBufferList *list;
} Quantized;

static Quantized quantize_f32(const float *x, uint32_t rank, const uint64_t *shape,
                              const HurrayQuantizeOptions *o) {
  Quantized q = {0};
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; i++) n *= shape[i];
  assert_ok(hurray_quantize(x, n * sizeof *x, HURRAY_DTYPE_FLOAT32, rank, shape, o, &q.d, &q.list,
                            error));
  assert_non_null(q.d);
  assert_non_null(q.list);
  return q;
}

static void quantized_free(Quantized q) {
  hurray_descriptor_destroy(q.d);
  hurray_buffer_list_destroy(q.list);
}

static const uint8_t *buffer_bytes(const Quantized *q, size_t i) {
  return hurray_buffer_data(hurray_buffer_list_get(q->list, i));
}

static HurrayQuantizeOptions options(HurrayQuantScheme s) {
  HurrayQuantizeOptions o;
  assert_ok(hurray_quantize_options_init(&o, s, error));
  return o;
}

static void dequantize_f32(const Quantized *q, float *out, uint64_t n) {
  assert_ok(
      hurray_dequantize(q->d, q->list, HURRAY_DTYPE_FLOAT32, 1, out, n * sizeof(float), error));
}

static uint16_t read_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* -------------------------------------------------------------- options */

static void test_scheme_names_round_trip(void **state) {
  (void)state;
  for (int s = HURRAY_SCHEME_AFFINE; s <= HURRAY_SCHEME_MXINT8; s++) {
    const char *name = hurray_quant_scheme_name((HurrayQuantScheme)s);
    assert_non_null(name);
    HurrayQuantScheme back;
    assert_ok(hurray_quant_scheme_from_name(name, &back, error));
    assert_int_equal(back, s);
  }
  assert_null(hurray_quant_scheme_name((HurrayQuantScheme)0));
  assert_null(hurray_quant_scheme_name((HurrayQuantScheme)13));
  HurrayQuantScheme s;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_quant_scheme_from_name("nf5", &s, error));
  HurrayQuantizeOptions o;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize_options_init(&o, (HurrayQuantScheme)99, error));
}

static void test_option_defaults(void **state) {
  (void)state;
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_PER_CHANNEL);
  assert_int_equal(o.axis, 0);
  assert_int_equal(o.code_dtype, HURRAY_DTYPE_INT8);
  assert_int_equal(o.scale_dtype, HURRAY_DTYPE_FLOAT32);
  assert_int_equal(o.symmetric, -1);
  o = options(HURRAY_SCHEME_NF4);
  assert_int_equal(o.block_size, 64);
  assert_int_equal(o.code_dtype, HURRAY_DTYPE_UINT4);
  o = options(HURRAY_SCHEME_MXFP6_E2M3);
  assert_int_equal(o.axis, -1);
  assert_int_equal(o.block_size, 32);
  assert_int_equal(o.code_dtype, HURRAY_DTYPE_FLOAT6_E2M3FN);
  assert_int_equal(o.scale_dtype, HURRAY_DTYPE_FLOAT8_E8M0FNU);
  o = options(HURRAY_SCHEME_Q4_0);
  assert_int_equal(o.scale_dtype, HURRAY_DTYPE_FLOAT16);
}

/* The static initializer is the affine defaults, version included. */
static void test_options_init_macro_matches_function(void **state) {
  (void)state;
  HurrayQuantizeOptions a = HURRAY_QUANTIZE_OPTIONS_INIT, b = options(HURRAY_SCHEME_AFFINE);
  assert_int_equal(a.version, HURRAY_QUANTIZE_OPTIONS_VERSION);
  assert_int_equal(b.version, HURRAY_QUANTIZE_OPTIONS_VERSION);
  assert_int_equal(a.scheme, b.scheme);
  assert_int_equal(a.axis, b.axis);
  assert_int_equal(a.block_size, b.block_size);
  assert_int_equal(a.code_dtype, b.code_dtype);
  assert_int_equal(a.scale_dtype, b.scale_dtype);
  assert_int_equal(a.symmetric, b.symmetric);
  assert_int_equal(a.threads, b.threads);
  float x[4] = {1, 2, 3, 4};
  Quantized q = quantize_f32(x, 1, (uint64_t[]){4}, &a);
  quantized_free(q);
}

/* An options struct not made by the macro or the function (version 0) or
 * from a newer header is refused, not misread. */
static void test_unknown_options_version_is_refused(void **state) {
  (void)state;
  float x[4] = {0};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *l = NULL;
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_AFFINE);
  o.version = 0;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 1,
                                                             (uint64_t[]){4}, &o, &d, &l, error));
  o.version = HURRAY_QUANTIZE_OPTIONS_VERSION + 1;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 1,
                                                             (uint64_t[]){4}, &o, &d, &l, error));
  assert_null(d);
  assert_null(l);
}

/* The source size is checked against the shape before anything is read:
 * one byte short is refused (ASan would flag the read otherwise), a longer
 * source is fine, and an empty tensor needs no bytes at all. */
static void test_source_size_is_checked(void **state) {
  (void)state;
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_BLOCK_AFFINE);
  uint64_t shape[2] = {2, 32};
  float *x = malloc(64 * sizeof *x);
  for (int i = 0; i < 64; i++) x[i] = (float)i;
  HurrayDescriptor *d = (HurrayDescriptor *)1;
  HurrayBufferList *l = (HurrayBufferList *)1;
  HurrayError e = {0};
  assert_int_equal(
      hurray_quantize(x, 64 * sizeof *x - 1, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, &e),
      HURRAY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(e.message, "255 bytes"));
  assert_null(d);
  assert_null(l);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, 127, HURRAY_DTYPE_FLOAT16, 2, shape, &o, &d, &l, error));
  assert_ok(hurray_quantize(x, 128, HURRAY_DTYPE_FLOAT16, 2, shape, &o, &d, &l, error));
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(l);
  assert_ok(
      hurray_quantize(x, 64 * sizeof *x + 64, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(l);
  o = options(HURRAY_SCHEME_AFFINE);
  assert_ok(
      hurray_quantize(NULL, 0, HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){0, 32}, &o, &d, &l, error));
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(l);
  free(x);
}

static void test_bad_options_are_refused(void **state) {
  (void)state;
  float x[64] = {0};
  uint64_t shape[2] = {2, 32};
  HurrayDescriptor *d = (HurrayDescriptor *)1;
  HurrayBufferList *l = (HurrayBufferList *)1;
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_Q8_0);
  o.axis = 0;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  assert_null(d);
  assert_null(l);
  o = options(HURRAY_SCHEME_MXFP4);
  o.block_size = 16;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  o = options(HURRAY_SCHEME_BLOCK_AFFINE);
  o.block_size = 0;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  o = options(HURRAY_SCHEME_PER_CHANNEL);
  o.axis = 2;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  o = options(HURRAY_SCHEME_PER_CHANNEL);
  o.code_dtype = HURRAY_DTYPE_INT16;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  o = options(HURRAY_SCHEME_PER_CHANNEL);
  o.scale_dtype = HURRAY_DTYPE_INT8;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  o = options(HURRAY_SCHEME_NF4);
  o.code_dtype = HURRAY_DTYPE_INT4;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  o = options(HURRAY_SCHEME_AFFINE);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT64, 2, shape, &o, &d, &l, error));
  /* quant.h allows 1, 0 and -1; 7 was taken as 1 */
  for (int i = 0; i < 2; i++) {
    o = options(i == 0 ? HURRAY_SCHEME_AFFINE : HURRAY_SCHEME_BLOCK_AFFINE);
    o.symmetric = i == 0 ? 7 : -2;
    assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                  hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, error));
  }
  /* rank 0 has no axis */
  o = options(HURRAY_SCHEME_MXINT8);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 0, NULL, &o, &d, &l, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, NULL, &d, &l, error));
}

/* ---------------------------------------------------- exact, by hand */

/* The kernel reads its buffers on the host: device memory, or a buffer its
 * producer says to wait on first, is refused as to_dense refuses it (it read
 * a device pointer as host memory). */
static void test_dequantize_reads_host_memory_ready_only(void **state) {
  (void)state;
  float x[32] = {1.0f, -2.0f}, y[32];
  uint64_t shape[1] = {32};
  /* int8 codes, per-tensor affine, whose one buffer waits on an event */
  static int8_t codes[32] __attribute__((aligned(64)));
  int event = 0;
  Quantized q = {0};
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 1, shape, &q.d, error));
  assert_ok(
      hurray_descriptor_add_buffer(q.d, HURRAY_ROLE_DATA, 32, 64, HURRAY_SYNC_EVENT, NULL, error));
  assert_ok(hurray_descriptor_set_layout_dense(q.d, 0, error));
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(q.d, 0.5, 0, error));
  HurrayBuffer *b = NULL;
  assert_ok(hurray_buffer_create(codes, sizeof codes, NULL, NULL, &b, error));
  assert_ok(hurray_buffer_set_alignment(b, 64, error));
  assert_ok(hurray_buffer_set_sync(b, HURRAY_SYNC_EVENT, &event, error));
  assert_ok(hurray_buffer_list_create(&q.list, error));
  assert_ok(hurray_buffer_list_push(q.list, b, error));
  assert_ok(hurray_validate_buffer_placement(q.d, q.list, error));
  HurrayError e = {0};
  assert_int_equal(hurray_dequantize(q.d, q.list, HURRAY_DTYPE_FLOAT32, 1, y, sizeof y, &e),
                   HURRAY_ERR_UNSUPPORTED);
  assert_non_null(strstr(e.message, "READY"));
  quantized_free(q);

  HurrayQuantizeOptions o = options(HURRAY_SCHEME_Q8_0);
  q = quantize_f32(x, 1, shape, &o);
  assert_ok(hurray_descriptor_set_device(q.d, HURRAY_DEVICE_CUDA, 0, HURRAY_MEMORY_DEVICE, error));
  for (size_t i = 0; i < hurray_buffer_list_len(q.list); i++) {
    assert_ok(hurray_buffer_set_device(hurray_buffer_list_get_mutable(q.list, i),
                                       HURRAY_DEVICE_CUDA, 0, HURRAY_MEMORY_DEVICE, error));
  }
  assert_int_equal(hurray_dequantize(q.d, q.list, HURRAY_DTYPE_FLOAT32, 1, y, sizeof y, &e),
                   HURRAY_ERR_UNSUPPORTED);
  assert_non_null(strstr(e.message, "host memory"));
  quantized_free(q);
}

static void test_q8_0_block_by_hand(void **state) {
  (void)state;
  float x[32] = {0};
  x[0] = 12.7f;  /* amax: d = 0.1, id = 10 */
  x[1] = -0.25f; /* -2.5 rounds away from zero: -3 */
  x[2] = 0.35f;  /* 3.5 (in float32, just above) -> 4 */
  x[3] = 0.04f;  /* 0.4 -> 0 */
  uint64_t shape[1] = {32};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_Q8_0);
  Quantized q = quantize_f32(x, 1, shape, &o);
  const int8_t *codes = (const int8_t *)buffer_bytes(&q, 0);
  assert_int_equal(codes[0], 127);
  assert_int_equal(codes[1], -3);
  assert_int_equal(codes[2], 4);
  assert_int_equal(codes[3], 0);
  /* float16(0.1) = 0x2E66 */
  assert_int_equal(read_u16(buffer_bytes(&q, 1)), 0x2e66);
  assert_int_equal(hurray_descriptor_quant_kind(q.d), HURRAY_QUANT_BLOCK_AFFINE);
  assert_int_equal(hurray_descriptor_quant_scale_dtype(q.d), HURRAY_DTYPE_FLOAT16);
  quantized_free(q);
}

static void test_q4_0_block_by_hand(void **state) {
  (void)state;
  float x[32] = {0};
  x[0] = -4.0f; /* the extreme: d = -4 / -8 = 0.5, id = 2; -8 + 8.5 -> 0 */
  x[1] = 4.0f;  /* same magnitude, later: 8 + 8.5 -> 16, capped at 15 */
  x[2] = 1.0f;  /* 2 + 8.5 -> 10 */
  uint64_t shape[1] = {32};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_Q4_0);
  Quantized q = quantize_f32(x, 1, shape, &o);
  const uint8_t *codes = buffer_bytes(&q, 0);
  /* element 2k in the low nibble of byte k */
  assert_int_equal(codes[0] & 15, 0);
  assert_int_equal(codes[0] >> 4, 15);
  assert_int_equal(codes[1] & 15, 10);
  assert_int_equal(codes[1] >> 4, 8);                      /* zero: 0 + 8.5 -> 8 */
  assert_int_equal(read_u16(buffer_bytes(&q, 1)), 0x3800); /* float16(0.5) */
  assert_int_equal(hurray_descriptor_quant_zero_point(q.d), 8);
  float y[32];
  dequantize_f32(&q, y, 32);
  assert_true(y[0] == -4.0f);
  assert_true(y[1] == 3.5f);
  assert_true(y[2] == 1.0f);
  quantized_free(q);
}

static void test_nf4_block_by_hand(void **state) {
  (void)state;
  /* absmax 2, so y = x / 2 exactly: 1 -> 15, -1 -> 0, 0 -> 7, 0.5 -> 12
   * (0.4407 is nearer than 0.5626), a table value -> its code, a midpoint
   * -> the lower code; then a block of zeros -> 7, 7 */
  float x[8] = {2.0f, -2.0f, 0.0f, 1.0f, 0.07958029955625534f * 2, 0.03979014977812767f * 2,
                0.0f, 0.0f};
  uint64_t shape[1] = {8};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_NF4);
  o.block_size = 6;
  Quantized q = quantize_f32(x, 1, shape, &o);
  const uint8_t *codes = buffer_bytes(&q, 0);
  assert_int_equal(codes[0], 0x0f);
  assert_int_equal(codes[1], 0xc7);
  assert_int_equal(codes[2], 0x78);
  assert_int_equal(codes[3], 0x77);
  const float *absmax = (const float *)buffer_bytes(&q, 1);
  assert_true(absmax[0] == 2.0f);
  assert_true(absmax[1] == 0.0f);
  float y[8];
  dequantize_f32(&q, y, 8);
  assert_true(y[3] == 0.44070982933044434f * 2);
  assert_true(y[6] == 0.0f);
  quantized_free(q);
}

/* One MXFP4 block worked from the OCP rules: amax 6 -> floor(log2 6) = 2,
 * shared = 2 - emax(2) = 0, scale byte 127; 2.5 ties to 2 (even), 5 ties to
 * 4 (even), 7 saturates to 6. */
static void test_mxfp4_block_by_hand(void **state) {
  (void)state;
  float x[32] = {0};
  x[0] = 6.0f;
  x[1] = 2.5f;
  x[2] = -5.0f;
  x[3] = 0.25f; /* ties to 0 */
  x[4] = 0.75f; /* ties to 1.0 (even mantissa) */
  uint64_t shape[1] = {32};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_MXFP4);
  Quantized q = quantize_f32(x, 1, shape, &o);
  assert_int_equal(buffer_bytes(&q, 1)[0], 127);
  const uint8_t *c = buffer_bytes(&q, 0);
  assert_int_equal(c[0] & 15, 0x7);       /* 6 */
  assert_int_equal(c[0] >> 4, 0x4);       /* 2 */
  assert_int_equal(c[1] & 15, 0x8 | 0x6); /* -4 */
  assert_int_equal(c[1] >> 4, 0x0);       /* 0 */
  assert_int_equal(c[2] & 15, 0x2);       /* 1.0 */
  quantized_free(q);

  x[0] = 7.0f; /* floor(log2 7) = 2: the same scale, and 7 saturates to 6 */
  q = quantize_f32(x, 1, shape, &o);
  assert_int_equal(buffer_bytes(&q, 1)[0], 127);
  assert_int_equal(buffer_bytes(&q, 0)[0] & 15, 0x7);
  quantized_free(q);
}

static void test_mx_nan_block_gets_nan_scale(void **state) {
  (void)state;
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i / 8.0f;
  x[40] = INFINITY;
  uint64_t shape[1] = {64};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_MXFP8_E4M3);
  Quantized q = quantize_f32(x, 1, shape, &o);
  const uint8_t *scales = buffer_bytes(&q, 1);
  assert_int_not_equal(scales[0], 0xff);
  assert_int_equal(scales[1], 0xff);
  for (int i = 32; i < 64; i++) assert_int_equal(buffer_bytes(&q, 0)[i], 0);
  float y[64];
  dequantize_f32(&q, y, 64);
  for (int i = 0; i < 32; i++) assert_false(isnan(y[i]));
  for (int i = 32; i < 64; i++) assert_true(isnan(y[i]));
  quantized_free(q);
}

static void test_non_finite_refused_with_index(void **state) {
  (void)state;
  float x[100];
  for (int i = 0; i < 100; i++) x[i] = (float)i;
  x[77] = NAN;
  uint64_t shape[2] = {10, 10};
  const HurrayQuantScheme schemes[] = {HURRAY_SCHEME_AFFINE,       HURRAY_SCHEME_PER_CHANNEL,
                                       HURRAY_SCHEME_BLOCK_AFFINE, HURRAY_SCHEME_Q8_0,
                                       HURRAY_SCHEME_Q4_0,         HURRAY_SCHEME_NF4};
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    HurrayQuantizeOptions o = options(schemes[i]);
    HurrayDescriptor *d;
    HurrayBufferList *l;
    HurrayError e = {0};
    assert_int_equal(hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, &e),
                     HURRAY_ERR_NOT_FINITE);
    assert_non_null(strstr(e.message, "element 77"));
    assert_null(d);
  }
}

/* ---------------------------------------------------------- round trips */

static float *random_floats(uint64_t n, unsigned seed) {
  float *x = malloc(n * sizeof(float));
  assert_non_null(x);
  uint64_t s = seed * 2654435761u + 1;
  for (uint64_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = ((float)(s >> 40) / (float)(1u << 24) - 0.5f) * 8.0f;
  }
  return x;
}

/* Every scheme, along every axis of a rank-3 tensor with ragged blocks:
 * the tensor validates, and dequantize stays within the scheme's error. */
static void test_every_scheme_round_trips(void **state) {
  (void)state;
  uint64_t shape[3] = {3, 37, 45};
  uint64_t n = 3 * 37 * 45;
  float *x = random_floats(n, 1);
  float *y = malloc(n * sizeof(float));
  for (int s = HURRAY_SCHEME_AFFINE; s <= HURRAY_SCHEME_MXINT8; s++) {
    for (int axis = -1; axis < 3; axis++) {
      HurrayQuantizeOptions o = options((HurrayQuantScheme)s);
      if (s == HURRAY_SCHEME_Q8_0 || s == HURRAY_SCHEME_Q4_0) {
        if (axis != -1) continue;
      } else if (axis >= 0) {
        o.axis = axis;
      }
      if (s == HURRAY_SCHEME_BLOCK_AFFINE) o.block_size = 8;
      Quantized q = quantize_f32(x, 3, shape, &o);
      assert_ok(hurray_descriptor_validate(q.d, error));
      assert_ok(hurray_validate_buffer_placement(q.d, q.list, error));
      dequantize_f32(&q, y, n);
      /* values lie in [-4, 4). MX's floor rule saturates the top of each
       * block (448 of a possible 512 for E4M3, 6 of 8 for E2M1), so those
       * bounds are looser; the exact checks are in tests/python. */
      bool mx_float = s >= HURRAY_SCHEME_MXFP8_E4M3 && s <= HURRAY_SCHEME_MXFP4;
      float bound = mx_float || s == HURRAY_SCHEME_NF4 ? 1.1f
                    : s == HURRAY_SCHEME_Q4_0          ? 0.55f
                    : s == HURRAY_SCHEME_MXINT8        ? 0.05f
                                                       : 0.02f;
      for (uint64_t i = 0; i < n; i++) {
        if (fabsf(y[i] - x[i]) > bound) {
          print_error("%s axis %d: element %llu: %g -> %g\n",
                      hurray_quant_scheme_name((HurrayQuantScheme)s), axis, (unsigned long long)i,
                      x[i], y[i]);
          fail();
        }
      }
      quantized_free(q);
    }
  }
  free(x);
  free(y);
}

static void test_asymmetric_unsigned_codes(void **state) {
  (void)state;
  /* a channel of [1, 3]: lo = 0, hi = 3, scale = 3/255, zp = 0 */
  float x[8] = {1.0f, 2.0f, 3.0f, 1.5f, -1.0f, -2.0f, -0.5f, -1.5f};
  uint64_t shape[2] = {2, 4};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_PER_CHANNEL);
  o.code_dtype = HURRAY_DTYPE_UINT8;
  Quantized q = quantize_f32(x, 2, shape, &o);
  assert_int_equal(hurray_buffer_list_len(q.list), 3);
  const uint8_t *zp = buffer_bytes(&q, 2);
  assert_int_equal(zp[0], 0);
  assert_int_equal(zp[1], 255); /* all negative: hi = 0 maps to 255 */
  assert_int_equal(buffer_bytes(&q, 0)[2], 255);
  float y[8];
  dequantize_f32(&q, y, 8);
  for (int i = 0; i < 8; i++) assert_true(fabsf(y[i] - x[i]) <= 3.0f / 255 / 2 * 1.0001f);
  quantized_free(q);

  /* uint4 zero points pack two to a byte */
  o.code_dtype = HURRAY_DTYPE_UINT4;
  q = quantize_f32(x, 2, shape, &o);
  assert_int_equal(buffer_bytes(&q, 2)[0], 0x0 | 0xf0);
  quantized_free(q);
}

static void test_threads_give_identical_bytes(void **state) {
  (void)state;
  uint64_t shape[2] = {1024, 3000}; /* 12 MiB of float32 */
  uint64_t n = shape[0] * shape[1];
  float *x = random_floats(n, 7);
  float *y1 = malloc(n * sizeof(float)), *y4 = malloc(n * sizeof(float));
  const HurrayQuantScheme schemes[] = {HURRAY_SCHEME_AFFINE, HURRAY_SCHEME_PER_CHANNEL,
                                       HURRAY_SCHEME_NF4, HURRAY_SCHEME_MXFP6_E3M2,
                                       HURRAY_SCHEME_Q4_0};
  for (size_t k = 0; k < sizeof schemes / sizeof schemes[0]; k++) {
    HurrayQuantizeOptions o = options(schemes[k]);
    if (schemes[k] == HURRAY_SCHEME_PER_CHANNEL) o.axis = 1;
    Quantized a = quantize_f32(x, 2, shape, &o);
    o.threads = 4;
    Quantized b = quantize_f32(x, 2, shape, &o);
    assert_true(hurray_descriptor_equal(a.d, b.d));
    for (size_t i = 0; i < hurray_buffer_list_len(a.list); i++) {
      const HurrayBuffer *ba = hurray_buffer_list_get(a.list, i),
                         *bb = hurray_buffer_list_get(b.list, i);
      assert_int_equal(hurray_buffer_size(ba), hurray_buffer_size(bb));
      assert_memory_equal(hurray_buffer_data(ba), hurray_buffer_data(bb), hurray_buffer_size(ba));
    }
    assert_ok(hurray_dequantize(a.d, a.list, HURRAY_DTYPE_FLOAT32, 1, y1, n * 4, error));
    assert_ok(hurray_dequantize(a.d, a.list, HURRAY_DTYPE_FLOAT32, 4, y4, n * 4, error));
    assert_memory_equal(y1, y4, n * 4);
    quantized_free(a);
    quantized_free(b);
  }
  free(x);
  free(y1);
  free(y4);
}

static uint16_t to_half_by_hand(float f) {
  /* exact for the values used below: multiples of 2^-8 in [-8, 8) */
  if (f == 0.0f) return signbit(f) ? 0x8000 : 0;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  f = fabsf(f);
  int e = 0;
  float m = frexpf(f, &e); /* f = m * 2^e, m in [0.5, 1) */
  uint16_t mant = (uint16_t)((m * 2.0f - 1.0f) * 1024.0f);
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | mant);
}

static void test_half_and_bfloat16_inputs_match_float32(void **state) {
  (void)state;
  enum { N = 256 };
  float x[N];
  uint16_t h[N], b[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)(i - 128) / 16.0f;
    h[i] = to_half_by_hand(x[i]);
    uint32_t bits;
    memcpy(&bits, &x[i], 4);
    b[i] = (uint16_t)(bits >> 16); /* exact: few mantissa bits */
  }
  uint64_t shape[2] = {8, 32};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_MXFP8_E4M3);
  Quantized a = quantize_f32(x, 2, shape, &o);
  Quantized qh = {0}, qb = {0};
  assert_ok(
      hurray_quantize(h, sizeof h, HURRAY_DTYPE_FLOAT16, 2, shape, &o, &qh.d, &qh.list, error));
  assert_ok(
      hurray_quantize(b, sizeof b, HURRAY_DTYPE_BFLOAT16, 2, shape, &o, &qb.d, &qb.list, error));
  assert_memory_equal(buffer_bytes(&a, 0), buffer_bytes(&qh, 0), N);
  assert_memory_equal(buffer_bytes(&a, 0), buffer_bytes(&qb, 0), N);
  assert_memory_equal(buffer_bytes(&a, 1), buffer_bytes(&qh, 1), 8);
  /* and float16 / bfloat16 outputs are the float32 results rounded */
  float y[N];
  uint16_t yh[N];
  dequantize_f32(&a, y, N);
  assert_ok(hurray_dequantize(a.d, a.list, HURRAY_DTYPE_FLOAT16, 1, yh, sizeof yh, error));
  for (int i = 0; i < N; i++) assert_int_equal(yh[i], to_half_by_hand(y[i]));
  quantized_free(a);
  quantized_free(qh);
  quantized_free(qb);
}

static void test_empty_and_rank0(void **state) {
  (void)state;
  uint64_t shape[2] = {0, 64};
  for (int s = HURRAY_SCHEME_AFFINE; s <= HURRAY_SCHEME_MXINT8; s++) {
    HurrayQuantizeOptions o = options((HurrayQuantScheme)s);
    Quantized q = quantize_f32(NULL, 2, shape, &o);
    assert_ok(hurray_dequantize(q.d, q.list, HURRAY_DTYPE_FLOAT32, 1, NULL, 0, error));
    quantized_free(q);
  }
  float x = -2.5f, y = 0;
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_AFFINE);
  Quantized q = quantize_f32(&x, 0, NULL, &o);
  dequantize_f32(&q, &y, 1);
  assert_true(fabsf(y + 2.5f) < 1e-6f); /* code -127 times amax / 127 */
  quantized_free(q);
  o = options(HURRAY_SCHEME_NF4);
  q = quantize_f32(&x, 0, NULL, &o);
  dequantize_f32(&q, &y, 1);
  assert_true(y == -2.5f); /* code 0 (-1.0) times absmax */
  quantized_free(q);
}

/* ----------------------------------------------------- dequantize errors */

static void test_dequantize_refusals(void **state) {
  (void)state;
  float x[32] = {1.0f};
  uint64_t shape[1] = {32};
  HurrayQuantizeOptions o = options(HURRAY_SCHEME_Q8_0);
  Quantized q = quantize_f32(x, 1, shape, &o);
  float y[32];
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_dequantize(q.d, q.list, HURRAY_DTYPE_FLOAT32, 1, y, sizeof y - 4, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_dequantize(q.d, q.list, HURRAY_DTYPE_INT8, 1, y, sizeof y, error));
  /* a scale buffer one byte short is caught by placement validation */
  HurrayDescriptor *d2 = NULL;
  assert_ok(hurray_descriptor_clone(q.d, &d2, error));
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  HurrayBuffer *codes = NULL, *scales = NULL;
  assert_ok(hurray_buffer_create((void *)buffer_bytes(&q, 0), 32, NULL, NULL, &codes, error));
  assert_ok(hurray_buffer_create((void *)buffer_bytes(&q, 1), 1, NULL, NULL, &scales, error));
  assert_ok(hurray_buffer_list_push(list, codes, error));
  assert_ok(hurray_buffer_list_push(list, scales, error));
  HurrayError e = {0};
  assert_int_not_equal(hurray_dequantize(d2, list, HURRAY_DTYPE_FLOAT32, 1, y, sizeof y, &e),
                       HURRAY_OK);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d2);
  quantized_free(q);

  /* not quantized */
  HurrayDescriptor *plain = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, shape, &plain, error));
  assert_ok(hurray_descriptor_add_buffer(plain, HURRAY_ROLE_DATA, 128, 1, HURRAY_SYNC_READY, NULL,
                                         error));
  assert_ok(hurray_buffer_list_create(&list, error));
  HurrayBuffer *data = NULL;
  assert_ok(hurray_buffer_create(x, 128, NULL, NULL, &data, error));
  assert_ok(hurray_buffer_list_push(list, data, error));
  assert_status(HURRAY_ERR_UNSUPPORTED,
                hurray_dequantize(plain, list, HURRAY_DTYPE_FLOAT32, 1, y, sizeof y, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(plain);
}

/* Strided int8 codes (a transposed view) dequantize like their dense copy. */
static void test_dequantize_strided_codes(void **state) {
  (void)state;
  int8_t codes[6] = {1, 2, 3, 4, 5, 6}; /* stored 2x3, viewed as 3x2 */
  uint64_t shape[2] = {3, 2};
  int64_t strides[2] = {1, 3};
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, shape, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 6, 1, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_set_strides(d, strides, error));
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 0.5, 1, error));
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  HurrayBuffer *b = NULL;
  assert_ok(hurray_buffer_create(codes, 6, NULL, NULL, &b, error));
  assert_ok(hurray_buffer_list_push(list, b, error));
  float y[6];
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, y, sizeof y, error));
  const float expected[6] = {0.0f, 1.5f, 0.5f, 2.0f, 1.0f, 2.5f};
  for (int i = 0; i < 6; i++) assert_true(y[i] == expected[i]);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scheme_names_round_trip),
      cmocka_unit_test(test_option_defaults),
      cmocka_unit_test(test_bad_options_are_refused),
      cmocka_unit_test(test_options_init_macro_matches_function),
      cmocka_unit_test(test_unknown_options_version_is_refused),
      cmocka_unit_test(test_source_size_is_checked),
      cmocka_unit_test(test_dequantize_reads_host_memory_ready_only),
      cmocka_unit_test(test_q8_0_block_by_hand),
      cmocka_unit_test(test_q4_0_block_by_hand),
      cmocka_unit_test(test_nf4_block_by_hand),
      cmocka_unit_test(test_mxfp4_block_by_hand),
      cmocka_unit_test(test_mx_nan_block_gets_nan_scale),
      cmocka_unit_test(test_non_finite_refused_with_index),
      cmocka_unit_test(test_every_scheme_round_trips),
      cmocka_unit_test(test_asymmetric_unsigned_codes),
      cmocka_unit_test(test_threads_give_identical_bytes),
      cmocka_unit_test(test_half_and_bfloat16_inputs_match_float32),
      cmocka_unit_test(test_empty_and_rank0),
      cmocka_unit_test(test_dequantize_refusals),
      cmocka_unit_test(test_dequantize_strided_codes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
