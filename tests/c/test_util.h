/*
 * Shared helpers for the cmocka suites.
 */
#ifndef HURRAY_TEST_UTIL_H
#define HURRAY_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include "hurray/hurray.h"

/* Asserts `expr` returns `code`, printing the error message otherwise. */
#define assert_status(expected, expr)                                                   \
  do {                                                                                  \
    HurrayError err_ = {0};                                                             \
    HurrayError *error = &err_;                                                         \
    (void)error;                                                                        \
    HurrayStatus got_ = (expr);                                                         \
    if (got_ != (expected)) {                                                           \
      print_error("%s returned %s, expected %s: %s\n", #expr, hurray_status_name(got_), \
                  hurray_status_name(expected), err_.message);                          \
      fail();                                                                           \
    }                                                                                   \
    if (got_ != HURRAY_OK) {                                                            \
      assert_int_equal(err_.code, got_);                                                \
      assert_true(err_.message[0] != '\0');                                             \
    }                                                                                   \
  } while (0)

#define assert_ok(expr) assert_status(HURRAY_OK, expr)

/* The whole file at `path` in a new allocation (free it), with a NUL after
 * the *len bytes so text can be read as a string; NULL when the file cannot
 * be opened. A read that fails half-way fails the test. */
static inline uint8_t *read_file(const char *path, size_t *len) {
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  assert_true(size >= 0);
  assert_int_equal(fseek(f, 0, SEEK_SET), 0);
  uint8_t *data = malloc((size_t)size + 1);
  assert_non_null(data);
  assert_int_equal(fread(data, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  data[size] = 0;
  *len = (size_t)size;
  return data;
}

/* Creates or replaces `path` with `len` bytes, or fails the test. */
static inline void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (len > 0) assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

#endif
