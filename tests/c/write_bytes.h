/*
 * A file of one uint8 tensor, for the suites that check what the reader
 * does with the page cache. Include after test_util.h and scratch_dir.h.
 */
#ifndef HURRAY_TEST_WRITE_BYTES_H
#define HURRAY_TEST_WRITE_BYTES_H

#include <stdbool.h>
#include <string.h>

/* Writes tensor "x" of `bytes` bytes to `path`. With `small_folios`, in
 * 64 KiB pieces (HURRAY_WRITE_FOLIOS=small): a 2 MiB folio stays cached
 * whole while any of its pages is mapped, and the tests drop pages one by
 * one. */
static inline void write_bytes_tensor(const char *path, uint64_t bytes, bool small_folios) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){bytes}, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes, 64, HURRAY_SYNC_READY, NULL,
                                         error));
  uint8_t *mem = aligned_alloc(64, (size_t)bytes);
  assert_non_null(mem);
  memset(mem, 0x5A, (size_t)bytes);
  HurrayBuffer *b = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_create(mem, bytes, free_release, NULL, &b, error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, b, error));
  if (small_folios) assert_int_equal(setenv("HURRAY_WRITE_FOLIOS", "small", 1), 0);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  assert_ok(hurray_writer_write_tensor(w, "x", d, list, error));
  assert_ok(hurray_writer_finish(w, error));
  if (small_folios) assert_int_equal(unsetenv("HURRAY_WRITE_FOLIOS"), 0);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

#endif
