/*
 * Regressions of issue 14 ("Hardening, round two"), C layer: each test
 * failed on the code before its fix.
 *   - the reader refuses FIFOs and other non-regular files without blocking,
 *     with the errno in HurrayError.os_errno;
 *   - affine dequantization computes c - z exactly (spec quantization §5.1);
 *   - statistics of sparse tensors with duplicates describe the summed
 *     (logical) tensor (spec layouts §3, §6.1);
 *   - page-table bounds use an overflow-safe ceiling division;
 *   - a per-tensor scale is validated as the f32 it is used as;
 *   - header and trailer versions are compared as the spec says;
 *   - to_dense / dequantize refuse outputs beyond their size limit.
 * And of a later attack on the C API (session 41):
 *   - the converter opens sources as the reader does (FIFOs without
 *     blocking, errno recorded) and refuses formats the enum does not name;
 *   - outputs are NULL after any failure, argument checks included;
 *   - statistics of broadcast views are bounded, not a wrapped copy;
 *   - messages name a batch's failing tensor, keep a byte source's words,
 *     escape names from a hurray source, and a write callback's unknown
 *     code is IO.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <xxhash.h>

#include "hurray/hurray.h"
#include "scratch_dir.h"
#include "test_util.h"

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("hardening");
}

/* ------------------------------------------------------ non-regular files */

/* Opens `path` in a child process that a 10 s alarm kills, so that a
 * reader that blocks fails the test instead of hanging it. The child exits
 * with 0 when the open failed with HURRAY_ERR_IO and os_errno == expected. */
static void expect_refused_without_blocking(const char *path, int expected_errno) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(10);
    for (int mode = 0; mode < 2; mode++) {
      HurrayReaderOptions o = HURRAY_READER_OPTIONS_INIT;
      o.mode = mode ? HURRAY_READ_PREAD : HURRAY_READ_MMAP;
      HurrayReader *r = NULL;
      HurrayError e = {0};
      HurrayStatus s = hurray_reader_open(path, &o, &r, &e);
      if (s != HURRAY_ERR_IO || e.code != HURRAY_ERR_IO || e.os_errno != expected_errno ||
          r != NULL || strstr(e.message, "not a regular file") == NULL) {
        fprintf(stderr, "open %s: status %s, os_errno %d, message %s\n", path,
                hurray_status_name(s), (int)e.os_errno, e.message);
        _exit(1);
      }
    }
    /* The converter opens its sources the same way, in every format. */
    if (hurray_format_sniff(path) != HURRAY_FORMAT_UNKNOWN) _exit(2);
    for (int f = HURRAY_FORMAT_UNKNOWN; f <= HURRAY_FORMAT_GGUF; f++) {
      HurraySource *src = (HurraySource *)&src;
      HurrayError e = {0};
      HurrayStatus s = hurray_source_open(path, (HurrayFormat)f, NULL, &src, &e);
      if (s != HURRAY_ERR_IO || e.os_errno != expected_errno || src != NULL) {
        fprintf(stderr, "source %s as %s: status %s, os_errno %d, message %s\n", path,
                hurray_format_name((HurrayFormat)f), hurray_status_name(s), (int)e.os_errno,
                e.message);
        _exit(3);
      }
    }
    char target[512];
    snprintf(target, sizeof target, "%s/from-special.safetensors", dir);
    HurrayConvertOptions o = HURRAY_CONVERT_OPTIONS_INIT;
    o.source_format = HURRAY_FORMAT_SAFETENSORS;
    HurrayError e = {0};
    if (hurray_convert_file(path, target, &o, &e) != HURRAY_ERR_IO || access(target, F_OK) == 0) {
      fprintf(stderr, "convert %s: %s\n", path, e.message);
      _exit(4);
    }
    _exit(0);
  }
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  if (WIFSIGNALED(wstatus))
    fail_msg("the open of %s blocked (killed by signal %d)", path, WTERMSIG(wstatus));
  assert_true(WIFEXITED(wstatus));
  assert_int_equal(WEXITSTATUS(wstatus), 0);
}

static void test_reader_refuses_fifo_without_blocking(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/pipe.hurray", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  expect_refused_without_blocking(path, ENXIO);
  unlink(path);
}

static void test_reader_refuses_directory_and_device(void **state) {
  (void)state;
  expect_refused_without_blocking(dir, EISDIR);
  expect_refused_without_blocking("/dev/null", ENXIO);
}

static void test_converter_records_errno(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/missing.safetensors", dir);
  for (int f = HURRAY_FORMAT_UNKNOWN; f <= HURRAY_FORMAT_GGUF; f++) {
    HurraySource *src = NULL;
    HurrayError e = {0};
    assert_int_equal(hurray_source_open(path, (HurrayFormat)f, NULL, &src, &e),
                     HURRAY_ERR_NOT_FOUND);
    assert_int_equal(e.os_errno, ENOENT);
  }
}

/* An enum from a caller may hold any int: one HurrayFormat does not name is
 * refused, not read as GGUF. */
static void test_converter_refuses_unknown_formats(void **state) {
  (void)state;
  char target[512], source[512];
  snprintf(target, sizeof target, "%s/f9.bin", dir);
  snprintf(source, sizeof source, "%s/f9.safetensors", dir);
  write_file(source, "\x02\0\0\0\0\0\0\0{}", 10);
  HurrayError e = {0};
  HurrayTarget *t = (HurrayTarget *)&t;
  assert_int_equal(hurray_target_open(target, (HurrayFormat)9, &t, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(t);
  assert_non_null(strstr(e.message, "unknown value 9"));
  HurraySource *src = (HurraySource *)&src;
  assert_int_equal(hurray_source_open(source, (HurrayFormat)-1, NULL, &src, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(src);
  for (int side = 0; side < 2; side++) {
    HurrayConvertOptions o = HURRAY_CONVERT_OPTIONS_INIT;
    if (side) o.target_format = (HurrayFormat)9;
    else o.source_format = (HurrayFormat)9;
    assert_int_equal(hurray_convert_file(source, target, &o, &e), HURRAY_ERR_INVALID_ARGUMENT);
    assert_int_equal(access(target, F_OK), -1);
  }
  unlink(source);
}

/* Every output pointer is NULL after a failure, argument checks included,
 * so that a caller may free whatever it holds. */
static void test_outputs_cleared_when_arguments_refused(void **state) {
  (void)state;
  HurrayError e = {0};
  HurrayWriter *w = (HurrayWriter *)&w;
  assert_int_equal(hurray_writer_open(NULL, &w, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(w);
  w = (HurrayWriter *)&w;
  assert_int_equal(hurray_writer_open("", &w, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(w);
  assert_non_null(strstr(e.message, "non-empty path"));
  w = (HurrayWriter *)&w;
  assert_int_equal(hurray_writer_open_fd(-1, &w, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(w);
  w = (HurrayWriter *)&w;
  assert_int_equal(hurray_writer_open_callback(NULL, NULL, &w, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(w);
  HurrayDescriptor *d = (HurrayDescriptor *)&d;
  assert_int_equal(hurray_descriptor_clone(NULL, &d, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(d);
  uint8_t *bytes = (uint8_t *)&bytes;
  size_t len = 7;
  assert_int_equal(hurray_descriptor_encode(NULL, &bytes, &len, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(bytes);
  assert_int_equal(len, 0);
  char *json = (char *)&json;
  assert_int_equal(hurray_descriptor_to_json(NULL, &json, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(json);
  HurrayTarget *t = (HurrayTarget *)&t;
  assert_int_equal(hurray_target_open(NULL, HURRAY_FORMAT_GGUF, &t, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(t);
  HurraySource *src = (HurraySource *)&src;
  assert_int_equal(hurray_source_open_memory("", 0, HURRAY_FORMAT_HURRAY, &src, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(src);

  char path[512];
  snprintf(path, sizeof path, "%s/meta.hurray", dir);
  assert_ok(hurray_writer_open(path, &w, NULL));
  assert_ok(hurray_writer_set_metadata_int(w, "n", 1, NULL));
  assert_ok(hurray_writer_finish(w, NULL));
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, NULL));
  const char *text = (const char *)&text;
  assert_int_equal(hurray_reader_metadata_string(r, "n", &text, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(text);
  const uint8_t *raw = (const uint8_t *)&raw;
  assert_int_equal(hurray_reader_metadata_bytes(r, "absent", &raw, NULL, &e),
                   HURRAY_ERR_NOT_FOUND);
  assert_null(raw);
  assert_int_equal(hurray_reader_metadata_int(r, "n", NULL, &e), HURRAY_ERR_INVALID_ARGUMENT);
  hurray_reader_close(r);
  unlink(path);
}

/* A batch's failure names the tensor it stopped at. */
static void test_batch_errors_name_the_tensor(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/batch.hurray", dir);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, NULL));
  const float x = 1.0f;
  const uint64_t shape[2] = {(uint64_t)1 << 62, 8};
  HurrayDenseTensor tensors[3] = {{"fine", HURRAY_DTYPE_FLOAT32, 0, NULL, &x, 4},
                                  {"big", HURRAY_DTYPE_FLOAT32, 2, shape, &x, 4},
                                  {"", HURRAY_DTYPE_FLOAT32, 0, NULL, &x, 4}};
  HurrayError e = {0};
  size_t written = 9;
  assert_int_equal(hurray_writer_write_dense_batch(w, tensors, 2, &written, &e),
                   HURRAY_ERR_OVERFLOW);
  assert_int_equal(written, 1);
  assert_non_null(strstr(e.message, "tensor 1 (\"big\"): "));
  hurray_writer_abort(w);
  assert_ok(hurray_writer_open(path, &w, NULL));
  assert_int_equal(hurray_writer_write_dense_batch(w, tensors + 2, 1, &written, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(e.message, "tensor 0: "));
  hurray_writer_abort(w);
}

static HurrayStatus write_with_invented_status(void *ctx, const void *data, size_t len) {
  (void)ctx, (void)data, (void)len;
  return (HurrayStatus)12345;
}

/* A write callback's code that common.h does not define reaches the caller
 * as HURRAY_ERR_IO. */
static void test_write_callback_unknown_status_is_io(void **state) {
  (void)state;
  HurrayWriter *w = NULL;
  HurrayError e = {0};
  HurrayStatus s = hurray_writer_open_callback(write_with_invented_status, NULL, &w, &e);
  if (s == HURRAY_OK) s = hurray_writer_finish(w, &e);
  else assert_null(w);
  assert_int_equal(s, HURRAY_ERR_IO);
  assert_int_equal(e.code, HURRAY_ERR_IO);
  assert_non_null(strstr(e.message, "unknown status 12345"));
}

static HurrayStatus read_failing_with_message_only(void *ctx, uint64_t offset, uint64_t length,
                                                   void *dst, HurrayError *error) {
  (void)ctx, (void)offset, (void)length, (void)dst;
  snprintf(error->message, sizeof error->message, "the cable is unplugged");
  return HURRAY_ERR_IO;
}

/* A byte source need only write a message: its words reach the caller. */
static void test_byte_source_message_kept(void **state) {
  (void)state;
  HurrayByteSource source = HURRAY_BYTE_SOURCE_INIT;
  source.size = 4096;
  source.read = read_failing_with_message_only;
  HurrayReader *r = (HurrayReader *)&r;
  HurrayError e = {0};
  assert_int_equal(hurray_reader_open_byte_source(&source, NULL, &r, &e), HURRAY_ERR_IO);
  assert_null(r);
  assert_non_null(strstr(e.message, "the cable is unplugged"));
}

/* hurray_source_get_tensor's messages are one line with names escaped, for
 * a hurray source as for the others. */
static void test_source_messages_escape_names(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/escape.hurray", dir);
  const float x = 1.0f;
  HurrayDenseTensor t = {"w\x1b[31mRED\nsecond line", HURRAY_DTYPE_FLOAT32, 0, NULL, &x, 4};
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, NULL));
  assert_ok(hurray_writer_write_dense_batch(w, &t, 1, NULL, NULL));
  assert_ok(hurray_writer_finish(w, NULL));
  size_t len = 0;
  uint8_t *bytes = read_file(path, &len);
  const uint8_t one[4] = {0, 0, 0x80, 0x3f};
  uint8_t *at = memmem(bytes, len, one, 4);
  assert_non_null(at);
  at[0] = 1; /* the data, so the checksum no longer matches */
  write_file(path, bytes, len);
  free(bytes);
  HurraySource *src = NULL;
  assert_ok(hurray_source_open(path, HURRAY_FORMAT_HURRAY, NULL, &src, NULL));
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayError e = {0};
  assert_int_equal(hurray_source_get_tensor(src, 0, &d, &list, &e), HURRAY_ERR_CHECKSUM);
  assert_null(strchr(e.message, '\n'));
  assert_null(strchr(e.message, '\x1b'));
  hurray_source_close(src);
  unlink(path);
}

static void test_reader_records_errno(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/missing.hurray", dir);
  HurrayReader *r = NULL;
  HurrayError e = {0};
  assert_int_equal(hurray_reader_open(path, NULL, &r, &e), HURRAY_ERR_NOT_FOUND);
  assert_int_equal(e.os_errno, ENOENT);
  /* Any later failure that is not the operating system's clears it. */
  assert_int_equal(hurray_reader_open(NULL, NULL, &r, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_int_equal(e.os_errno, 0);
  /* The struct keeps its size: programs built against the older header
   * (a 512-byte message) stay compatible. */
  assert_int_equal(sizeof(HurrayError), 516);
  assert_int_equal(offsetof(HurrayError, message), 4);
}

/* ------------------------------------------------------------ helpers */

/* A list of buffers holding copies of the given byte strings, 64-aligned. */
static HurrayBufferList *make_list(size_t n, const void *const *data, const size_t *sizes) {
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, NULL));
  for (size_t i = 0; i < n; i++) {
    void *copy = aligned_alloc(64, sizes[i] ? (sizes[i] + 63) / 64 * 64 : 64);
    assert_non_null(copy);
    if (sizes[i] > 0) memcpy(copy, data[i], sizes[i]);
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(copy, sizes[i], free_release, NULL, &b, NULL));
    assert_ok(hurray_buffer_list_push(list, b, NULL));
  }
  return list;
}

static HurrayDescriptor *make_dense(HurrayDType dtype, uint32_t rank, const uint64_t *shape,
                                    uint64_t bytes) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(dtype, rank, shape, &d, NULL));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes, 64, HURRAY_SYNC_READY, NULL, NULL));
  assert_ok(hurray_descriptor_set_layout_dense(d, 0, NULL));
  return d;
}

static void dequantize_into(const HurrayDescriptor *d, const HurrayBufferList *list, float *out,
                            uint64_t n) {
  HurrayError e = {0};
  HurrayStatus s = hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, n * sizeof *out, &e);
  if (s != HURRAY_OK) fail_msg("dequantize: %s: %s", hurray_status_name(s), e.message);
}

/* ---------------------------------------------- affine: c - z is exact */

/* The example: int32 code 2^24 + 1, zero point 3, scale 1. The
 * exact difference 16777214 is a binary32 value; f32(c) - f32(z) rounds
 * the code first (to 2^24) and gives 16777213. */
static void test_affine_int32_difference_is_exact(void **state) {
  (void)state;
  const int32_t codes[2] = {(1 << 24) + 1, -(1 << 24) - 3};
  const uint64_t shape[2] = {1, 2};
  /* per-tensor, inline zero point */
  {
    HurrayDescriptor *d = make_dense(HURRAY_DTYPE_INT32, 2, shape, sizeof codes);
    assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 1.0, 3, NULL));
    HurrayBufferList *list = make_list(1, (const void *[]){codes}, (size_t[]){sizeof codes});
    float out[2];
    dequantize_into(d, list, out, 2);
    assert_true(out[0] == 16777214.0f);
    assert_true(out[1] == -16777222.0f); /* -(2^24 + 6), exact */
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  /* per-channel (axis 0, one channel) and block affine (block 2), each
   * with an inline and with a buffered zero point */
  for (int kind = 0; kind < 2; kind++) {
    for (int buffered = 0; buffered < 2; buffered++) {
      HurrayDescriptor *d = make_dense(HURRAY_DTYPE_INT32, 2, shape, sizeof codes);
      const float scale = 1.0f;
      const int32_t zp = 3;
      assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_SCALES, 4, 64, HURRAY_SYNC_READY, NULL,
                                             NULL));
      if (kind == 0) {
        assert_ok(
            hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_FLOAT32, NULL));
      } else {
        assert_ok(
            hurray_descriptor_set_quant_block_affine(d, 1, 2, 1, HURRAY_DTYPE_FLOAT32, NULL));
      }
      HurrayBufferList *list;
      if (buffered) {
        assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_ZERO_POINTS, 4, 64,
                                               HURRAY_SYNC_READY, NULL, NULL));
        assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT32, NULL));
        list = make_list(3, (const void *[]){codes, &scale, &zp}, (size_t[]){sizeof codes, 4, 4});
      } else {
        assert_ok(hurray_descriptor_set_quant_zero_point(d, 3, NULL));
        list = make_list(2, (const void *[]){codes, &scale}, (size_t[]){sizeof codes, 4});
      }
      assert_ok(hurray_descriptor_validate(d, NULL));
      float out[2];
      dequantize_into(d, list, out, 2);
      assert_true(out[0] == 16777214.0f);
      assert_true(out[1] == -16777222.0f);
      hurray_buffer_list_destroy(list);
      hurray_descriptor_destroy(d);
    }
  }
}

/* 64-bit codes: c - z needs up to 65 bits. It is computed exactly and
 * rounded once (to nearest, ties to even). */
static void test_affine_64bit_difference_is_exact(void **state) {
  (void)state;
  const uint64_t shape[1] = {4};
  /* int64 codes, per-channel zero points from an int64 buffer */
  {
    const int64_t codes[4] = {INT64_MAX, INT64_MIN, (INT64_C(1) << 53) + 1,
                              (INT64_C(1) << 40) + 1};
    const int64_t zps[4] = {INT64_MIN, INT64_MAX, -1, INT64_C(1) << 40};
    const float scales[4] = {1, 1, 1, 1};
    HurrayDescriptor *d = make_dense(HURRAY_DTYPE_INT64, 1, shape, sizeof codes);
    assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_SCALES, 16, 64, HURRAY_SYNC_READY, NULL,
                                           NULL));
    assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_ZERO_POINTS, 32, 64, HURRAY_SYNC_READY,
                                           NULL, NULL));
    assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_FLOAT32, NULL));
    assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT64, NULL));
    HurrayBufferList *list = make_list(3, (const void *[]){codes, scales, zps},
                                       (size_t[]){sizeof codes, sizeof scales, sizeof zps});
    float out[4];
    dequantize_into(d, list, out, 4);
    assert_true(out[0] == 18446744073709551616.0f);  /* 2^64 - 1 rounds to 2^64 */
    assert_true(out[1] == -18446744073709551616.0f); /* -(2^64 - 1) */
    assert_true(out[2] == 9007199254740994.0f);      /* 2^53 + 2, exact */
    assert_true(out[3] == 1.0f);                     /* f32(c) - f32(z) would be 0 */
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  /* uint64 codes, inline zero point */
  {
    const uint64_t codes[4] = {UINT64_MAX, 7, (UINT64_C(1) << 63) + (UINT64_C(1) << 39) + 8,
                               (UINT64_C(1) << 24) + 8};
    HurrayDescriptor *d = make_dense(HURRAY_DTYPE_UINT64, 1, shape, sizeof codes);
    assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 1.0, 7, NULL));
    HurrayBufferList *list = make_list(1, (const void *[]){codes}, (size_t[]){sizeof codes});
    float out[4];
    dequantize_into(d, list, out, 4);
    assert_true(out[0] == 18446744073709551616.0f);
    assert_true(out[1] == 0.0f && !signbit(out[1])); /* +0 */
    /* 2^63 + 2^39 + 1 is just above the halfway point 2^63 + 2^39: up */
    assert_true(out[2] == 9223372036854775808.0f + 1099511627776.0f);
    assert_true(out[3] == 16777216.0f); /* 2^24 + 1 ties to even */
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
}

/* 8-bit codes with a zero-point buffer whose entries binary32 cannot hold
 * exactly (the descriptor allows any integer zero-point dtype). */
static void test_affine_wide_zero_point_is_exact(void **state) {
  (void)state;
  const int8_t codes[2] = {1, -1};
  const int64_t zps[1] = {-((INT64_C(1) << 24) + 1)}; /* f32 would make it -2^24 */
  const float scales[1] = {1};
  const uint64_t shape[2] = {1, 2};
  HurrayDescriptor *d = make_dense(HURRAY_DTYPE_INT8, 2, shape, sizeof codes);
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_SCALES, 4, 64, HURRAY_SYNC_READY, NULL, NULL));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_ZERO_POINTS, 8, 64, HURRAY_SYNC_READY,
                                         NULL, NULL));
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_FLOAT32, NULL));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT64, NULL));
  HurrayBufferList *list = make_list(3, (const void *[]){codes, scales, zps},
                                     (size_t[]){sizeof codes, 4, 8});
  float out[2];
  dequantize_into(d, list, out, 2);
  assert_true(out[0] == 16777218.0f); /* 2^24 + 2, exact */
  assert_true(out[1] == 16777216.0f); /* 2^24, exact */
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* ------------------------------------ statistics of broadcast (strided) views */

/* A zero stride repeats one stored element over a whole dimension: the
 * statistics count every logical element, and a view whose logical size
 * the default output limits refuse is refused (it once wrapped the size of
 * a row-major copy and wrote past it). */
static void test_statistics_of_broadcast_views(void **state) {
  (void)state;
  const float values[4] = {0.0f, -2.0f, NAN, 5.0f};
  const int64_t strides[2] = {0, 1};
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2, (const uint64_t[]){3, 4}, &d, NULL));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, sizeof values, 4, HURRAY_SYNC_READY,
                                         NULL, NULL));
  assert_ok(hurray_descriptor_set_strides(d, strides, NULL));
  HurrayBufferList *list = make_list(1, (const void *[]){values}, (size_t[]){sizeof values});
  assert_ok(hurray_compute_statistics(d, list, NULL));
  double lo, hi;
  uint64_t nan_count, zero_count;
  assert_true(hurray_descriptor_stat_min(d, &lo) && lo == -2.0);
  assert_true(hurray_descriptor_stat_max(d, &hi) && hi == 5.0);
  assert_true(hurray_descriptor_stat_nan_count(d, &nan_count) && nan_count == 3);
  assert_true(hurray_descriptor_stat_zero_count(d, &zero_count) && zero_count == 3);
  hurray_descriptor_destroy(d);

  /* 2^31 x 2^31 float32 elements from 4 stored bytes: 2^64 bytes. */
  const uint64_t huge[2] = {(uint64_t)1 << 31, (uint64_t)1 << 31};
  const int64_t zero[2] = {0, 0};
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2, huge, &d, NULL));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 4, 4, HURRAY_SYNC_READY, NULL, NULL));
  assert_ok(hurray_descriptor_set_strides(d, zero, NULL));
  HurrayError e = {0};
  assert_int_equal(hurray_compute_statistics(d, list, &e), HURRAY_ERR_LIMIT);
  assert_false(hurray_descriptor_stat_min(d, &lo));

  /* The writer's statistics option keeps such a tensor as it came. */
  char path[512];
  snprintf(path, sizeof path, "%s/broadcast.hurray", dir);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, NULL));
  assert_ok(hurray_writer_set_statistics(w, true, NULL));
  assert_ok(hurray_writer_write_tensor(w, "b", d, list, NULL));
  assert_ok(hurray_writer_finish(w, NULL));
  unlink(path);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* ------------------------------------------------ outputs over the inputs */

/* An output that overlaps a buffer of the tensor is refused before anything
 * is written: the kernels read while they write (a group index read again
 * after the output overwrote it indexed the scales anywhere). */
static void test_outputs_over_the_inputs_are_refused(void **state) {
  (void)state;
  float room[16] = {0};
  int8_t *codes = (int8_t *)room; /* 4 codes in the first float of room */
  for (int i = 0; i < 4; i++) codes[i] = (int8_t)(i + 1);
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 1, (const uint64_t[]){4}, &d, NULL));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 4, 1, HURRAY_SYNC_READY, NULL, NULL));
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  assert_ok(hurray_buffer_list_create(&list, NULL));
  assert_ok(hurray_buffer_create(codes, 4, NULL, NULL, &b, NULL)); /* over room, not a copy */
  assert_ok(hurray_buffer_list_push(list, b, NULL));
  HurrayError e = {0};
  assert_int_equal(hurray_tensor_to_dense(d, list, room, 4, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(e.message, "overlaps buffer 0"));
  int8_t apart[4];
  assert_ok(hurray_tensor_to_dense(d, list, apart, 4, NULL));
  assert_int_equal(apart[3], 4);
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 0.5, 0, NULL));
  assert_int_equal(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, room, sizeof room, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_int_equal(codes[3], 4); /* nothing written */
  float values[4];
  assert_ok(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, values, sizeof values, NULL));
  assert_true(values[3] == 2.0f);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* ------------------------------- sparse statistics with duplicate entries */

/* A non-canonical COO vector of 4 elements storing `nnz` values, all at
 * position 1, of dtype `t` (item bytes each). Returns the statistics
 * hurray_compute_statistics gives and checks them against to_dense. */
static void coo_duplicate_stats(HurrayDType t, size_t item, const void *values, uint64_t nnz,
                                double *min, double *max, void *dense_out) {
  const uint64_t shape[1] = {4};
  int64_t index[8];
  for (uint64_t k = 0; k < nnz; k++) index[k] = 1;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(t, 1, shape, &d, NULL));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_VALUES, nnz * item, 64, HURRAY_SYNC_READY,
                                         NULL, NULL));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_INDICES, nnz * 8, 64, HURRAY_SYNC_READY,
                                         NULL, NULL));
  assert_ok(hurray_descriptor_set_layout_coo(d, HURRAY_DTYPE_INT64, nnz, 0, (uint32_t[]){1}, false,
                                             NULL));
  HurrayBufferList *list = make_list(2, (const void *[]){values, index},
                                     (size_t[]){nnz * item, nnz * 8});
  assert_ok(hurray_compute_statistics(d, list, NULL));
  assert_true(hurray_descriptor_stat_min(d, min));
  assert_true(hurray_descriptor_stat_max(d, max));
  assert_ok(hurray_tensor_to_dense(d, list, dense_out, 4 * item, NULL));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_sparse_statistics_sum_duplicates_like_to_dense(void **state) {
  (void)state;
  double lo, hi;
  { /* int8: 100 + 100 + 50 = 250 wraps to -6 */
    const int8_t v[3] = {100, 100, 50};
    int8_t dense[4];
    coo_duplicate_stats(HURRAY_DTYPE_INT8, 1, v, 3, &lo, &hi, dense);
    assert_int_equal(dense[1], -6);
    assert_true(lo == -6.0 && hi == 0.0);
  }
  { /* uint8: 200 + 100 = 300 wraps to 44 */
    const uint8_t v[2] = {200, 100};
    uint8_t dense[4];
    coo_duplicate_stats(HURRAY_DTYPE_UINT8, 1, v, 2, &lo, &hi, dense);
    assert_int_equal(dense[1], 44);
    assert_true(lo == 0.0 && hi == 44.0);
  }
  { /* int64: INT64_MAX + 1 wraps to INT64_MIN */
    const int64_t v[2] = {INT64_MAX, 1};
    int64_t dense[4];
    coo_duplicate_stats(HURRAY_DTYPE_INT64, 8, v, 2, &lo, &hi, dense);
    assert_true(dense[1] == INT64_MIN);
    assert_true(lo == (double)INT64_MIN && hi == 0.0);
  }
  { /* float32: 1e8 + 1 + 1 rounds to 1e8 at each step in binary32 */
    const float v[3] = {1e8f, 1.0f, 1.0f};
    float dense[4];
    coo_duplicate_stats(HURRAY_DTYPE_FLOAT32, 4, v, 3, &lo, &hi, dense);
    assert_true(dense[1] == 1e8f);
    assert_true(lo == 0.0 && hi == (double)1e8f);
  }
}

/* ------------------------------------------ page tables: ceil(n / page) */

/* Shape [2^64 - 2^59], page size 2^60: 16 page-table entries. The
 * hand-written (n + page - 1) / page wrapped to 0 entries, so placement
 * checked none and accepted entries outside a pool of zero pages. */
static void test_page_table_bounds_use_safe_ceiling(void **state) {
  (void)state;
  const uint64_t length = UINT64_MAX - (UINT64_C(1) << 59) + 1;
  const uint64_t page = UINT64_C(1) << 60;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, &length, &d, NULL));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_PAGE_POOL, 0, 64, HURRAY_SYNC_READY, NULL,
                                         NULL));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_PAGE_TABLE, 16 * 4, 64, HURRAY_SYNC_READY,
                                         NULL, NULL));
  assert_ok(hurray_descriptor_set_layout_paged(d, 0, page, 0, HURRAY_DTYPE_INT32, 0, 1, NULL));
  assert_ok(hurray_descriptor_validate(d, NULL));
  int32_t table[16] = {0};
  HurrayBufferList *list = make_list(2, (const void *[]){"", table}, (size_t[]){0, sizeof table});
  HurrayError e = {0};
  assert_int_equal(hurray_validate_buffer_placement(d, list, &e), HURRAY_ERR_PAGE_TABLE_ENTRY);
  uint8_t out[1];
  assert_int_equal(hurray_tensor_to_dense(d, list, out, sizeof out, NULL),
                   HURRAY_ERR_PAGE_TABLE_ENTRY);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* ------------------------------- the per-tensor scale is used as float32 */

static void test_per_tensor_scale_validated_as_float32(void **state) {
  (void)state;
  const uint64_t shape[1] = {2};
  const double bad[] = {1e39, -1e39, 1e-50, 3.5e38};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    HurrayDescriptor *d = make_dense(HURRAY_DTYPE_INT8, 1, shape, 2);
    assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, bad[i], 0, NULL));
    assert_int_equal(hurray_descriptor_validate(d, NULL), HURRAY_ERR_QUANT_SCALE);
    hurray_descriptor_destroy(d);
  }
  /* The largest float64 that rounds to FLT_MAX, and the smallest that
   * rounds to the least subnormal, are fine. */
  const double good[] = {3.4028235677973362e38, 1.401298464324817e-45 * 0.5000001, -1e-40};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    HurrayDescriptor *d = make_dense(HURRAY_DTYPE_INT8, 1, shape, 2);
    assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, good[i], 0, NULL));
    assert_ok(hurray_descriptor_validate(d, NULL));
    const int8_t codes[2] = {1, -1};
    HurrayBufferList *list = make_list(1, (const void *[]){codes}, (size_t[]){2});
    float out[2];
    dequantize_into(d, list, out, 2);
    assert_true(isfinite(out[0]) && out[0] != 0.0f);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
}

/* ------------------------------------------ header and trailer versions */

/* Rewrites the versions of `src` into `dst` (resealing the trailer) and
 * returns what opening it gives. */
static HurrayStatus open_with_versions(const uint8_t *src, size_t len, const char *dst,
                                       uint16_t header_minor, uint16_t trailer_minor) {
  uint8_t *data = malloc(len);
  assert_non_null(data);
  memcpy(data, src, len);
  data[10] = (uint8_t)header_minor;
  data[11] = (uint8_t)(header_minor >> 8);
  uint8_t *trailer = data + len - 64;
  trailer[42] = (uint8_t)trailer_minor;
  trailer[43] = (uint8_t)(trailer_minor >> 8);
  uint64_t sum = XXH3_64bits(trailer, 48);
  for (int i = 0; i < 8; i++) trailer[48 + i] = (uint8_t)(sum >> (8 * i));
  write_file(dst, data, len);
  free(data);
  HurrayReader *r = NULL;
  HurrayStatus s = hurray_reader_open(dst, NULL, &r, NULL);
  hurray_reader_close(r);
  return s;
}

/* versioning.md and file-format.md agree: any minor of the major is read,
 * and the header's and trailer's minors must be equal. */
static void test_header_and_trailer_minor_versions_must_agree(void **state) {
  (void)state;
  char path[512], other[512];
  snprintf(path, sizeof path, "%s/versions.hurray", dir);
  snprintf(other, sizeof other, "%s/versions-changed.hurray", dir);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, NULL));
  assert_ok(hurray_writer_set_metadata_int(w, "k", 1, NULL));
  assert_ok(hurray_writer_finish(w, NULL));
  size_t len = 0;
  uint8_t *data = read_file(path, &len);
  assert_non_null(data);
  assert_int_equal(open_with_versions(data, len, other, 0, 0), HURRAY_OK);
  assert_int_equal(open_with_versions(data, len, other, 7, 7), HURRAY_OK);
  assert_int_equal(open_with_versions(data, len, other, 65535, 65535), HURRAY_OK);
  assert_int_equal(open_with_versions(data, len, other, 7, 0), HURRAY_ERR_MALFORMED);
  assert_int_equal(open_with_versions(data, len, other, 0, 7), HURRAY_ERR_MALFORMED);
  free(data);
}

/* ------------------------------------------------- output-size limits */

/* The example: a stride-0 8192 x 8192 float32 tensor stored in 4
 * bytes (a 265-byte file) asked to_dense for 256 MiB. */
static HurrayDescriptor *stride0(HurrayDType dtype, uint64_t item) {
  const uint64_t shape[2] = {8192, 8192};
  const int64_t strides[2] = {0, 0};
  HurrayDescriptor *d = make_dense(dtype, 2, shape, item);
  assert_ok(hurray_descriptor_set_strides(d, strides, NULL));
  return d;
}

static void test_to_dense_refuses_amplification(void **state) {
  (void)state;
  HurrayDescriptor *d = stride0(HURRAY_DTYPE_FLOAT32, 4);
  assert_ok(hurray_descriptor_validate(d, NULL));
  const float one = 1.0f;
  HurrayBufferList *list = make_list(1, (const void *[]){&one}, (size_t[]){4});
  HurrayError e = {0};
  /* Refused before the output is even looked at. */
  assert_int_equal(hurray_tensor_to_dense(d, list, NULL, 0, &e), HURRAY_ERR_LIMIT);
  assert_non_null(strstr(e.message, "268435456 bytes"));
  assert_int_equal(hurray_tensor_to_dense_with(d, list, NULL, NULL, 0, NULL), HURRAY_ERR_LIMIT);
  assert_int_equal(hurray_check_output_size(d, 256u << 20, NULL, NULL), HURRAY_ERR_LIMIT);
  /* Opting out, or an absolute limit large enough, gets past the check
   * (to the size of `out`, here too small). */
  HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED;
  assert_int_equal(hurray_tensor_to_dense_with(d, list, &unlimited, NULL, 0, NULL),
                   HURRAY_ERR_BUFFER_SIZE);
  HurrayOutputLimits absolute = {HURRAY_OUTPUT_LIMITS_VERSION, 0, 0, 256u << 20};
  assert_int_equal(hurray_tensor_to_dense_with(d, list, &absolute, NULL, 0, NULL),
                   HURRAY_ERR_BUFFER_SIZE);
  absolute.max_output_bytes = (256u << 20) - 1;
  assert_int_equal(hurray_tensor_to_dense_with(d, list, &absolute, NULL, 0, NULL),
                   HURRAY_ERR_LIMIT);
  HurrayOutputLimits bad = {99, 0, 0, 0};
  assert_int_equal(hurray_tensor_to_dense_with(d, list, &bad, NULL, 0, NULL),
                   HURRAY_ERR_INVALID_ARGUMENT);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_dequantize_refuses_amplification(void **state) {
  (void)state;
  HurrayDescriptor *d = stride0(HURRAY_DTYPE_INT8, 1);
  assert_ok(hurray_descriptor_set_quant_per_tensor_affine(d, 0.5, 0, NULL));
  assert_ok(hurray_descriptor_validate(d, NULL));
  const int8_t code = 3;
  HurrayBufferList *list = make_list(1, (const void *[]){&code}, (size_t[]){1});
  assert_int_equal(hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, NULL, 0, NULL),
                   HURRAY_ERR_LIMIT);
  assert_int_equal(hurray_dequantize_with(d, list, HURRAY_DTYPE_FLOAT16, 1, NULL, NULL, 0, NULL),
                   HURRAY_ERR_LIMIT);
  HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED;
  assert_int_equal(
      hurray_dequantize_with(d, list, HURRAY_DTYPE_FLOAT32, 1, &unlimited, NULL, 0, NULL),
      HURRAY_ERR_INVALID_ARGUMENT); /* out too small, past the limit check */
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* The default rule, at its edges: max(64 MiB, 64 x stored). */
static void test_default_output_limit_edges(void **state) {
  (void)state;
  const uint64_t shape[1] = {2u << 20};
  HurrayDescriptor *d = make_dense(HURRAY_DTYPE_UINT8, 1, shape, 2u << 20); /* 2 MiB stored */
  assert_ok(hurray_check_output_size(d, 64u << 20, NULL, NULL));
  assert_ok(hurray_check_output_size(d, 128u << 20, NULL, NULL));
  assert_int_equal(hurray_check_output_size(d, (128u << 20) + 1, NULL, NULL), HURRAY_ERR_LIMIT);
  HurrayDescriptor *tiny = make_dense(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, 1);
  assert_ok(hurray_check_output_size(tiny, 64u << 20, NULL, NULL));
  assert_int_equal(hurray_check_output_size(tiny, (64u << 20) + 1, NULL, NULL), HURRAY_ERR_LIMIT);
  HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED;
  assert_ok(hurray_check_output_size(tiny, UINT64_MAX, &unlimited, NULL));
  hurray_descriptor_destroy(tiny);
  hurray_descriptor_destroy(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reader_refuses_fifo_without_blocking),
      cmocka_unit_test(test_reader_refuses_directory_and_device),
      cmocka_unit_test(test_reader_records_errno),
      cmocka_unit_test(test_converter_records_errno),
      cmocka_unit_test(test_converter_refuses_unknown_formats),
      cmocka_unit_test(test_outputs_cleared_when_arguments_refused),
      cmocka_unit_test(test_statistics_of_broadcast_views),
      cmocka_unit_test(test_outputs_over_the_inputs_are_refused),
      cmocka_unit_test(test_batch_errors_name_the_tensor),
      cmocka_unit_test(test_write_callback_unknown_status_is_io),
      cmocka_unit_test(test_byte_source_message_kept),
      cmocka_unit_test(test_source_messages_escape_names),
      cmocka_unit_test(test_affine_int32_difference_is_exact),
      cmocka_unit_test(test_affine_64bit_difference_is_exact),
      cmocka_unit_test(test_affine_wide_zero_point_is_exact),
      cmocka_unit_test(test_sparse_statistics_sum_duplicates_like_to_dense),
      cmocka_unit_test(test_page_table_bounds_use_safe_ceiling),
      cmocka_unit_test(test_per_tensor_scale_validated_as_float32),
      cmocka_unit_test(test_header_and_trailer_minor_versions_must_agree),
      cmocka_unit_test(test_to_dense_refuses_amplification),
      cmocka_unit_test(test_dequantize_refuses_amplification),
      cmocka_unit_test(test_default_output_limit_edges),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
