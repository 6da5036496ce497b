/*
 * The "C" locale for number text (c_locale.h). uselocale changes the
 * calling thread's locale only, so switching around one call is safe while
 * other threads format in theirs.
 */
#define _GNU_SOURCE /* newlocale, uselocale */
#include "c_locale.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Made once and never freed or changed: no mutable state after the once. */
static locale_t c_numeric;
static pthread_once_t c_numeric_once = PTHREAD_ONCE_INIT;

static void make_c_numeric(void) { c_numeric = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* The thread's previous locale, after switching to "C"; (locale_t)0 when
 * "C" could not be made (then the numbers follow the current locale). */
static locale_t enter_c(void) {
  pthread_once(&c_numeric_once, make_c_numeric);
  return c_numeric != (locale_t)0 ? uselocale(c_numeric) : (locale_t)0;
}

static void leave_c(locale_t previous) {
  if (previous != (locale_t)0) uselocale(previous);
}

int hurray__format_double(char *buf, size_t size, double v) {
  locale_t previous = enter_c();
  int n = snprintf(buf, size, "%.17g", v);
  leave_c(previous);
  return n;
}

int hurray__format_double_shortest(char *buf, size_t size, double v) {
  locale_t previous = enter_c();
  int n = 0;
  for (int digits = 1; digits <= 17; digits++) {
    n = snprintf(buf, size, "%.*g", digits, v);
    double back = strtod(buf, NULL);
    if (n < 0 || (size_t)n >= size || memcmp(&back, &v, sizeof v) == 0 || v != v) break;
  }
  leave_c(previous);
  return n;
}

double hurray__parse_double(const char *s, char **end) {
  locale_t previous = enter_c();
  double v = strtod(s, end);
  leave_c(previous);
  return v;
}
