/*
 * Reading through a HurrayByteSource (include/hurray/byte_source.h): the
 * memory source gives what the file gives; a counting source shows which
 * reads open and get_tensor make (one batch per tensor); lying sources
 * (errors, invented codes, missing messages, corrupt bytes) give clear
 * errors; every bit flip of the structure gives the same status through a
 * source as through the file; release runs exactly once.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scratch_dir.h"
#include "test_util.h"
#include "vectors.h"

static uint8_t *file_bytes;
static size_t file_size;
static char file_path[300];
static size_t written_count;

static bool is_host(const HurrayDescriptor *d) {
  return hurray_descriptor_memory_class(d) == HURRAY_MEMORY_HOST;
}

static HurrayBufferList *patterned(const HurrayDescriptor *d, uint32_t seed) {
  HurrayBufferList *list = NULL;
  uint8_t *memory[64] = {0};
  assert_ok(hurray_buffer_list_create(&list, error));
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t size = hurray_descriptor_buffer_size(d, i);
    uint8_t *mem = aligned_alloc(4096, (size_t)((size + 4096) / 4096 * 4096));
    bool table = hurray_descriptor_buffer_role(d, i) == HURRAY_ROLE_PAGE_TABLE;
    for (uint64_t k = 0; k < size; k++) mem[k] = table ? 0 : (uint8_t)(seed * 31 + i * 7 + k);
    memory[i] = mem;
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(mem, size, free_release, NULL, &b, error));
    assert_ok(hurray_buffer_list_push(list, b, error));
  }
  golden_vector_fill_indices(d, memory);
  return list;
}

/* Every host golden vector in one file, kept in memory too. */
static int setup(void **state) {
  (void)state;
  if (scratch_dir_create("byte-source") != 0) return -1;
  snprintf(file_path, sizeof file_path, "%s/all.hurray", dir);
  HurrayWriter *w = NULL;
  HurrayError e = {0};
  if (hurray_writer_open(file_path, &w, &e) != HURRAY_OK) return -1;
  for (size_t i = 0; i < golden_vector_count; i++) {
    HurrayDescriptor *d = golden_vectors[i].build();
    if (is_host(d)) {
      HurrayBufferList *list = patterned(d, (uint32_t)i);
      if (hurray_writer_write_tensor(w, golden_vectors[i].name, d, list, &e) != HURRAY_OK) {
        return -1;
      }
      written_count++;
      hurray_buffer_list_destroy(list);
    }
    hurray_descriptor_destroy(d);
  }
  hurray_writer_set_metadata_string(w, "producer", "test_byte_source", &e);
  if (hurray_writer_finish(w, &e) != HURRAY_OK) return -1;
  FILE *f = fopen(file_path, "rb");
  if (f == NULL) return -1;
  fseek(f, 0, SEEK_END);
  file_size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  file_bytes = malloc(file_size);
  size_t got = fread(file_bytes, 1, file_size, f);
  fclose(f);
  return got == file_size ? 0 : -1;
}

static int teardown(void **state) {
  free(file_bytes);
  return scratch_dir_remove(state);
}

static void assert_same_tensor(HurrayReader *a, HurrayReader *b, const char *name) {
  HurrayDescriptor *da = NULL, *db = NULL;
  HurrayBufferList *la = NULL, *lb = NULL;
  assert_ok(hurray_reader_get_tensor(a, name, &da, &la, error));
  assert_ok(hurray_reader_get_tensor(b, name, &db, &lb, error));
  assert_true(hurray_descriptor_equal(da, db));
  assert_int_equal(hurray_buffer_list_len(la), hurray_buffer_list_len(lb));
  for (size_t i = 0; i < hurray_buffer_list_len(la); i++) {
    const HurrayBuffer *x = hurray_buffer_list_get(la, i), *y = hurray_buffer_list_get(lb, i);
    assert_int_equal(hurray_buffer_size(x), hurray_buffer_size(y));
    assert_memory_equal(hurray_buffer_data(x), hurray_buffer_data(y), hurray_buffer_size(x));
    assert_int_equal((uintptr_t)hurray_buffer_data(y) % 64, 0);
  }
  hurray_buffer_list_destroy(la);
  hurray_buffer_list_destroy(lb);
  hurray_descriptor_destroy(da);
  hurray_descriptor_destroy(db);
}

static void test_memory_source_reads_like_the_file(void **state) {
  (void)state;
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = HURRAY_READ_PREAD;
  HurrayReader *file = NULL, *mem = NULL;
  assert_ok(hurray_reader_open(file_path, &options, &file, error));
  HurrayByteSource source;
  assert_ok(hurray_byte_source_memory(file_bytes, file_size, &source, error));
  source.flags = HURRAY_BYTE_SOURCE_VERIFY_READS;
  options.verify_on_open = true;
  assert_ok(hurray_reader_open_byte_source(&source, &options, &mem, error));
  assert_int_equal(hurray_reader_tensor_count(mem), written_count);
  for (size_t i = 0; i < hurray_reader_tensor_count(file); i++) {
    assert_string_equal(hurray_reader_tensor_name(file, i), hurray_reader_tensor_name(mem, i));
    assert_same_tensor(file, mem, hurray_reader_tensor_name(file, i));
    assert_ok(hurray_reader_verify(mem, hurray_reader_tensor_name(mem, i), error));
  }
  const char *producer = NULL;
  assert_ok(hurray_reader_metadata_string(mem, "producer", &producer, error));
  assert_string_equal(producer, "test_byte_source");
  double cached = 1.0;
  assert_ok(hurray_reader_cached_fraction(mem, &cached, error));
  assert_true(cached == 0.0);
  assert_ok(hurray_reader_populate(mem, 2, error));
  HurrayDescriptor *d = NULL;
  HurrayBufferList *rows = NULL;
  assert_ok(hurray_reader_get_rows(mem, "dense_float32", 1, 1, &d, &rows, error));
  hurray_buffer_list_destroy(rows);
  hurray_descriptor_destroy(d);
  hurray_reader_close(mem);
  hurray_reader_close(file);
}

/* ---------------------------------------------------------- counting */

typedef struct Counter {
  int reads, batches, releases;
  uint64_t bytes;
  int fail_at; /* the read (1-based) that fails; 0: none */
  HurrayStatus fail_with;
  bool fail_silently; /* no message */
  bool corrupt_after_open;
  bool opened;
} Counter;

static HurrayStatus counting_read(void *ctx, uint64_t offset, uint64_t length, void *dst,
                                  HurrayError *error) {
  Counter *c = ctx;
  c->reads++;
  c->bytes += length;
  if (c->fail_at != 0 && c->reads == c->fail_at) {
    if (c->fail_silently) return c->fail_with;
    error->code = c->fail_with;
    snprintf(error->message, sizeof error->message, "the test source lies");
    return c->fail_with;
  }
  assert_true(offset + length <= file_size);
  memcpy(dst, file_bytes + offset, (size_t)length);
  if (c->corrupt_after_open && c->opened) ((uint8_t *)dst)[length / 2] ^= 0x10;
  return HURRAY_OK;
}

static HurrayStatus counting_batch(void *ctx, const HurrayByteRange *ranges, size_t count,
                                   HurrayError *error) {
  Counter *c = ctx;
  c->batches++;
  for (size_t i = 0; i < count; i++) {
    if (i > 0) assert_true(ranges[i].offset >= ranges[i - 1].offset + ranges[i - 1].length);
    c->reads--; /* a batch counts as one request, not as reads */
    HurrayStatus s = counting_read(ctx, ranges[i].offset, ranges[i].length, ranges[i].dst, error);
    if (s != HURRAY_OK) return s;
  }
  return HURRAY_OK;
}

static void counting_release(void *ctx) { ((Counter *)ctx)->releases++; }

static HurrayByteSource counting_source(Counter *c, bool batch) {
  HurrayByteSource s = HURRAY_BYTE_SOURCE_INIT;
  s.size = file_size;
  s.ctx = c;
  s.read = counting_read;
  s.read_batch = batch ? counting_batch : NULL;
  s.release = counting_release;
  return s;
}

static void test_counting_source(void **state) {
  (void)state;
  Counter c = {0};
  HurrayByteSource s = counting_source(&c, true);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open_byte_source(&s, NULL, &r, error));
  /* Open reads the magic, the header, the trailer and the index: nothing
   * else. */
  uint64_t index_length = 0;
  memcpy(&index_length, file_bytes + file_size - 64 + 8, 8);
  assert_int_equal(c.reads, 4);
  assert_int_equal(c.bytes, 8 + 64 + 64 + index_length);
  c.opened = true;
  for (size_t i = 0; i < hurray_reader_tensor_count(r); i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    int reads = c.reads, batches = c.batches;
    uint64_t bytes = c.bytes;
    assert_ok(hurray_reader_get_tensor(r, name, &d, &list, error));
    uint64_t want = 0;
    for (size_t k = 0; k < hurray_buffer_list_len(list); k++) {
      want += hurray_buffer_size(hurray_buffer_list_get(list, k));
    }
    assert_int_equal(c.reads, reads);
    assert_int_equal(c.batches, batches + (want > 0 ? 1 : 0));
    assert_int_equal(c.bytes - bytes, want);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  assert_int_equal(c.releases, 0);
  hurray_reader_close(r);
  assert_int_equal(c.releases, 1);

  /* Without read_batch, one read per non-empty buffer. */
  Counter single = {0};
  s = counting_source(&single, false);
  assert_ok(hurray_reader_open_byte_source(&s, NULL, &r, error));
  int reads = single.reads;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_reader_get_tensor(r, "dense_float32", &d, &list, error));
  assert_int_equal(single.reads, reads + 1);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
  assert_int_equal(single.releases, 1);
}

/* conventions.md: a call that succeeds leaves the caller's error struct as
 * it was. Reads through a source reset it before asking the source. */
static void test_success_leaves_the_error_struct_alone(void **state) {
  (void)state;
  for (int batch = 0; batch < 2; batch++) {
    Counter c = {0};
    HurrayByteSource s = counting_source(&c, batch);
    HurrayReader *r = NULL;
    assert_ok(hurray_reader_open_byte_source(&s, NULL, &r, error));
    HurrayError earlier = {0};
    earlier.code = HURRAY_ERR_NOT_FOUND;
    snprintf(earlier.message, sizeof earlier.message, "an earlier failure");
    HurrayError e = earlier;
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    assert_int_equal(hurray_reader_get_tensor(r, "dense_float32", &d, &list, &e), HURRAY_OK);
    assert_int_equal(hurray_reader_verify(r, "dense_float32", &e), HURRAY_OK);
    assert_int_equal(hurray_reader_verify(r, NULL, &e), HURRAY_OK);
    assert_int_equal(e.code, HURRAY_ERR_NOT_FOUND);
    assert_string_equal(e.message, earlier.message);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    hurray_reader_close(r);
  }
}

/* --------------------------------------------------------------- lying */

static void test_lying_sources(void **state) {
  (void)state;
  HurrayReader *r = NULL;
  /* An error with a message keeps it; TRUNCATED stays TRUNCATED. */
  for (int at = 1; at <= 4; at++) {
    Counter c = {.fail_at = at, .fail_with = HURRAY_ERR_TRUNCATED};
    HurrayByteSource s = counting_source(&c, true);
    assert_status(HURRAY_ERR_TRUNCATED, hurray_reader_open_byte_source(&s, NULL, &r, error));
    assert_null(r);
    assert_int_equal(c.releases, 1);
  }
  /* Invented codes become IO; a missing message gets one. */
  HurrayStatus invented[] = {HURRAY_ERR_CHECKSUM, HURRAY_ERR_NOT_FOUND, (HurrayStatus)12345};
  for (size_t i = 0; i < 3; i++) {
    for (int silent = 0; silent <= 1; silent++) {
      Counter c = {.fail_at = 3, .fail_with = invented[i], .fail_silently = silent};
      HurrayByteSource s = counting_source(&c, true);
      HurrayError e = {0};
      assert_int_equal(hurray_reader_open_byte_source(&s, NULL, &r, &e), HURRAY_ERR_IO);
      assert_int_equal(e.code, HURRAY_ERR_IO);
      assert_true(e.message[0] != '\0');
      assert_int_equal(c.releases, 1);
    }
  }
  /* A failure inside get_tensor's batch. */
  Counter c = {0};
  HurrayByteSource s = counting_source(&c, true);
  assert_ok(hurray_reader_open_byte_source(&s, NULL, &r, error));
  c.fail_at = c.reads; /* a batch read leaves `reads` as it was (counting_batch) */
  c.fail_with = HURRAY_ERR_IO;
  c.fail_silently = true;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_status(HURRAY_ERR_IO, hurray_reader_get_tensor(r, "dense_float32", &d, &list, error));
  assert_null(d);
  assert_null(list);
  hurray_reader_close(r);

  /* Corrupt bytes: caught by the checksums when the source asks for it. */
  Counter bad = {.corrupt_after_open = true};
  s = counting_source(&bad, true);
  s.flags = HURRAY_BYTE_SOURCE_VERIFY_READS;
  assert_ok(hurray_reader_open_byte_source(&s, NULL, &r, error));
  bad.opened = true;
  assert_status(HURRAY_ERR_CHECKSUM,
                hurray_reader_get_tensor(r, "dense_float32", &d, &list, error));
  assert_status(HURRAY_ERR_CHECKSUM, hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
  Counter unchecked = {.corrupt_after_open = true};
  s = counting_source(&unchecked, true);
  assert_ok(hurray_reader_open_byte_source(&s, NULL, &r, error));
  unchecked.opened = true;
  assert_ok(hurray_reader_get_tensor(r, "dense_float32", &d, &list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
}

static void test_bad_arguments_release_once(void **state) {
  (void)state;
  HurrayReader *r = NULL;
  Counter c = {0};
  HurrayByteSource s = counting_source(&c, true);
  s.version = 99;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_reader_open_byte_source(&s, NULL, &r, error));
  s = counting_source(&c, true);
  s.flags = 0x80;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_reader_open_byte_source(&s, NULL, &r, error));
  s = counting_source(&c, true);
  s.read = NULL;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_reader_open_byte_source(&s, NULL, &r, error));
  s = counting_source(&c, true);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_reader_open_byte_source(&s, NULL, NULL, error));
  HurrayReaderOptions bad = HURRAY_READER_OPTIONS_INIT;
  bad.version = 77;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_reader_open_byte_source(&s, &bad, &r, error));
  assert_int_equal(c.releases, 5);
  assert_int_equal(c.reads, 0);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_reader_open_byte_source(NULL, NULL, &r, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_byte_source_memory(NULL, 5, &s, error));
  /* An empty memory file and a size past the end of the data. */
  assert_ok(hurray_byte_source_memory(NULL, 0, &s, error));
  assert_status(HURRAY_ERR_TRUNCATED, hurray_reader_open_byte_source(&s, NULL, &r, error));
}

/* Every byte of the header, the index and the trailer flipped, and every
 * truncation there (every fifth of the index): the same status through the memory source as
 * through the file (one parser, one set of checks). */
static void test_same_checks_as_the_file(void **state) {
  (void)state;
  uint64_t index_offset = 0;
  memcpy(&index_offset, file_bytes + file_size - 64, 8);
  uint8_t *copy = malloc(file_size);
  char path[320];
  snprintf(path, sizeof path, "%s/mutated.hurray", dir);
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = HURRAY_READ_PREAD;
  size_t checked = 0;
  for (size_t pos = 0; pos < file_size; pos++) {
    if (pos >= 64 && pos < index_offset) continue;
    /* Every byte of the header and the trailer, every 5th of the index. */
    if (pos >= index_offset && pos < file_size - 64 && pos % 5 != 0) continue;
    for (int truncate = 0; truncate <= 1; truncate++) {
      size_t size = file_size;
      memcpy(copy, file_bytes, file_size);
      if (truncate) size = pos;
      else copy[pos] ^= 0x04;
      FILE *f = fopen(path, "wb");
      assert_non_null(f);
      assert_int_equal(fwrite(copy, 1, size, f), size);
      fclose(f);
      HurrayError fe = {0}, me = {0};
      HurrayReader *a = NULL, *b = NULL;
      HurrayStatus from_file = hurray_reader_open(path, &options, &a, &fe);
      HurrayByteSource s;
      assert_ok(hurray_byte_source_memory(copy, size, &s, error));
      HurrayStatus from_source = hurray_reader_open_byte_source(&s, &options, &b, &me);
      if (from_file != from_source) {
        print_error("byte %zu (%s): file %s (%s), source %s (%s)\n", pos,
                    truncate ? "cut" : "flipped", hurray_status_name(from_file), fe.message,
                    hurray_status_name(from_source), me.message);
        fail();
      }
      hurray_reader_close(a);
      hurray_reader_close(b);
      checked++;
    }
  }
  assert_true(checked > 256);
  free(copy);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_source_reads_like_the_file),
      cmocka_unit_test(test_counting_source),
      cmocka_unit_test(test_success_leaves_the_error_struct_alone),
      cmocka_unit_test(test_lying_sources),
      cmocka_unit_test(test_bad_arguments_release_once),
      cmocka_unit_test(test_same_checks_as_the_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
