/*
 * Numbers as text in the "C" locale, whatever locale the process or the
 * calling thread has set: JSON and GGUF want "1.5", and a program that
 * calls setlocale(LC_ALL, "de_DE.UTF-8") would otherwise get "1,5" from
 * printf and have strtod stop at the ".".
 */
#ifndef HURRAY_SRC_C_LOCALE_H
#define HURRAY_SRC_C_LOCALE_H

#include <stddef.h>

/* `v` as "%.17g" (which reads back to the same double) into buf; returns
 * what snprintf returns. */
int hurray__format_double(char *buf, size_t size, double v);
/* `v` in the fewest significant digits ("%.Ng", N up to 17) that read back
 * to the same double: 0.1 as "0.1", not "0.10000000000000001". For text a
 * person reads (safetensors metadata), where the descriptor JSON keeps
 * "%.17g". NaN and infinities as "%g" writes them. */
int hurray__format_double_shortest(char *buf, size_t size, double v);
/* strtod in the "C" locale. */
double hurray__parse_double(const char *s, char **end);

#endif
