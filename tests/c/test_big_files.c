/*
 * Files past 4 GiB, as sparse files (holes: no disk, no page cache). A
 * 64-bit host reads the tensor that lies past 2^32; a 32-bit host, whose
 * size_t would wrap the offset onto the bytes at offset mod 2^32, refuses
 * with LIMIT. Each file plants decoys at the wrapped offsets: a copy of the
 * index, and 9.0s where the tensor's 1, 2, 3, 4 would wrap to.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include "scratch_dir.h"
#include "test_util.h"

#define G4 ((uint64_t)1 << 32)

/* Whether this process can address a file of `size` bytes (32-bit hosts
 * cannot past 2 GiB). */
static bool addressable(uint64_t size) { return size <= (uint64_t)PTRDIFF_MAX; }

static const float values[4] = {1, 2, 3, 4};
static const float decoys[4] = {9, 9, 9, 9};

static void put_at(int fd, uint64_t offset, const void *p, size_t len) {
  assert_int_equal(pwrite(fd, p, len, (off_t)offset), (ssize_t)len);
}

static void le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A hurray file (docs/spec/file-format.md) with one tensor "x" of `count`
 * `dtype` elements, `bytes` long, at 2^32 + 128 (holding values when 16
 * bytes long), and its index just past it; decoys at 128 and an index copy
 * at 4096. Returns the file size. */
static uint64_t craft_hurray(const char *path, HurrayDType dtype, uint64_t count, uint64_t bytes) {
  HurrayDescriptor *d = NULL;
  uint8_t *desc = NULL;
  size_t desc_len = 0;
  assert_ok(hurray_descriptor_create(dtype, 1, &count, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes, 64, HURRAY_SYNC_READY, NULL,
                                         error));
  assert_ok(hurray_descriptor_encode(d, &desc, &desc_len, error));
  hurray_descriptor_destroy(d);
  uint8_t index[256] = {0};
  size_t n = 0;
  le(index + n, 1, 2);
  index[n + 2] = 'x';
  n += 3;
  le(index + n, desc_len, 4);
  memcpy(index + n + 4, desc, desc_len);
  n += 4 + desc_len;
  le(index + n, 1, 4);
  le(index + n + 4, G4 + 128, 8);
  le(index + n + 12, bytes, 8);
  le(index + n + 20, XXH3_64bits(values, sizeof values), 8); /* a longer buffer: never verified */
  n += 28;
  hurray_free(desc);
  size_t index_len = n;
  uint64_t index_offset = (G4 + 128 + bytes + 4095) / 4096 * 4096;
  uint8_t header[64] = {0x89, 'H', 'R', 'Y', '\r', '\n', 0x1a, '\n', 1, 0, 0, 0};
  uint8_t trailer[64] = {0};
  le(trailer, index_offset, 8);
  le(trailer + 8, index_len, 8);
  le(trailer + 16, XXH3_64bits(index, index_len), 8);
  le(trailer + 24, 1, 8);
  le(trailer + 32, 0, 8);
  le(trailer + 40, 1, 2);
  le(trailer + 48, XXH3_64bits(trailer, 48), 8);
  memcpy(trailer + 56, "HRYEND\x1a\n", 8);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  assert_true(fd >= 0);
  put_at(fd, 0, header, sizeof header);
  put_at(fd, 128, decoys, sizeof decoys);
  put_at(fd, 4096, index, index_len);
  put_at(fd, G4 + 128, values, sizeof values);
  put_at(fd, index_offset, index, index_len);
  put_at(fd, index_offset + index_len, trailer, sizeof trailer);
  assert_int_equal(close(fd), 0);
  return index_offset + index_len + sizeof trailer;
}

static void expect_values(const HurrayBufferList *list) {
  const HurrayBuffer *b = hurray_buffer_list_get(list, 0);
  assert_int_equal(hurray_buffer_size(b), 16);
  assert_memory_equal(hurray_buffer_data(b), values, sizeof values);
}

static void test_hurray_file_past_4gib(void **state) {
  (void)state;
  char path[300];
  in_dir(path, sizeof path, "big.hurray");
  uint64_t size = craft_hurray(path, HURRAY_DTYPE_FLOAT32, 4, 16);
  for (int mode = 0; mode < 3; mode++) {
    HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
    options.mode = (HurrayReadMode)mode;
    HurrayReader *r = NULL;
    bool mapped = mode != HURRAY_READ_PREAD;
    if (mapped && !addressable(size)) {
      assert_status(HURRAY_ERR_LIMIT, hurray_reader_open(path, &options, &r, error));
      continue;
    }
    assert_ok(hurray_reader_open(path, &options, &r, error));
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_reader_get_tensor(r, "x", &d, &list, error));
    expect_values(list);
    assert_ok(hurray_reader_verify(r, "x", error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    hurray_reader_close(r);
  }
}

/* A buffer longer than this process can allocate, read with pread: LIMIT
 * on a 32-bit host (it wrapped to a 64-byte allocation, then the read wrote
 * 4 GiB into it). A 64-bit host would allocate 4 GiB: not run there. */
static void test_pread_buffer_past_address_space(void **state) {
  (void)state;
  if (addressable(G4 + 64)) skip();
  char path[300];
  in_dir(path, sizeof path, "big-buffer.hurray");
  craft_hurray(path, HURRAY_DTYPE_UINT8, G4 + 64, G4 + 64);
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = HURRAY_READ_PREAD;
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, &options, &r, error));
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_status(HURRAY_ERR_LIMIT, hurray_reader_get_tensor(r, "x", &d, &list, error));
  hurray_reader_close(r);
}

/* A safetensors file whose second tensor starts at data offset 2^32. */
static uint64_t craft_safetensors(const char *path) {
  char header[256];
  int len = snprintf(header, sizeof header,
                     "{\"a\":{\"dtype\":\"I8\",\"shape\":[%llu],\"data_offsets\":[0,%llu]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[%llu,%llu]}}",
                     (unsigned long long)G4, (unsigned long long)G4, (unsigned long long)G4,
                     (unsigned long long)G4 + 16);
  while (len % 8 != 0) header[len++] = ' ';
  uint8_t prefix[8];
  le(prefix, (uint64_t)len, 8);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  assert_true(fd >= 0);
  put_at(fd, 0, prefix, 8);
  put_at(fd, 8, header, (size_t)len);
  uint64_t data = 8 + (uint64_t)len;
  put_at(fd, data, decoys, sizeof decoys);
  put_at(fd, data + G4, values, sizeof values);
  assert_int_equal(close(fd), 0);
  return data + G4 + 16;
}

static void test_safetensors_past_4gib(void **state) {
  (void)state;
  char path[300];
  in_dir(path, sizeof path, "big.safetensors");
  uint64_t size = craft_safetensors(path);
  HurraySource *s = NULL;
  if (!addressable(size)) {
    assert_status(HURRAY_ERR_LIMIT,
                  hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, NULL, &s, error));
    return;
  }
  assert_ok(hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, NULL, &s, error));
  assert_int_equal(hurray_source_tensor_count(s), 2);
  assert_string_equal(hurray_source_tensor_name(s, 1), "b");
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_source_get_tensor(s, 1, &d, &list, error));
  expect_values(list);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_source_close(s);
}

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("big-files");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hurray_file_past_4gib),
      cmocka_unit_test(test_pread_buffer_past_address_space),
      cmocka_unit_test(test_safetensors_past_4gib),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
