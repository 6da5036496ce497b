/*
 * Internal helpers for filling a caller's HurrayError.
 */
#ifndef HURRAY_SRC_ERROR_H
#define HURRAY_SRC_ERROR_H

#include "hurray/common.h"

/* Records `code` and a printf-style message in `error` (which may be NULL)
 * and returns `code`, so callers can write `return hurray__fail(...)`. */
HurrayStatus hurray__fail(HurrayError *error, HurrayStatus code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The same for a failure of the operating system: also records `os_errno`
 * (the caller's saved errno) in error->os_errno. hurray__fail sets it to 0. */
HurrayStatus hurray__fail_os(HurrayError *error, HurrayStatus code, int os_errno, const char *fmt,
                             ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#define HURRAY_RETURN_NOT_OK(expr)        \
  do {                                    \
    HurrayStatus hurray__status = (expr); \
    if (hurray__status != HURRAY_OK) {    \
      return hurray__status;              \
    }                                     \
  } while (0)

#endif
