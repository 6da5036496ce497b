/*
 * Shared helpers for the cmocka suites.
 */
#ifndef HURRAY_TEST_UTIL_H
#define HURRAY_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hurray/hurray.h"

/* Asserts `expr` returns `code`, printing the error message otherwise. */
#define assert_status(expected, expr)                                                \
  do {                                                                               \
    HurrayError err_ = {0};                                                          \
    HurrayError *error = &err_;                                                      \
    (void)error;                                                                     \
    HurrayStatus got_ = (expr);                                                      \
    if (got_ != (expected)) {                                                        \
      print_error("%s returned %s, expected %s: %s\n", #expr, hurray_status_name(got_), \
                  hurray_status_name(expected), err_.message);                       \
      fail();                                                                        \
    }                                                                                \
    if (got_ != HURRAY_OK) {                                                         \
      assert_int_equal(err_.code, got_);                                             \
      assert_true(err_.message[0] != '\0');                                          \
    }                                                                                \
  } while (0)

#define assert_ok(expr) assert_status(HURRAY_OK, expr)

#endif
