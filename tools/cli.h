/*
 * The commands of the `hurray` tool (tools/hurray.c), callable on their own
 * so that a fuzz harness (fuzz/fuzz_cli.c) can drive them with the output
 * going to any FILE* (a memstream, /dev/null).
 *
 * Every command writes its result to `out`, its diagnostics to `err`, and
 * returns the process exit status (EXIT_SUCCESS, or EXIT_FAILURE when the
 * file is bad or an operation failed). No command keeps state between calls.
 *
 * Human output (everything but `info --json` and `cat`) prints names, keys,
 * strings and paths through hurray_cli_put_escaped: bytes from a file never
 * reach a terminal as control characters.
 */
#ifndef HURRAY_TOOLS_CLI_H
#define HURRAY_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "hurray/hurray.h"

int hurray_cli_ls(FILE *out, FILE *err, const char *path);
int hurray_cli_info(FILE *out, FILE *err, const char *path, const char *only, bool json);
int hurray_cli_verify(FILE *out, FILE *err, const char *path);
/* Writes nothing unless NAME's checksums match, when `verify`. */
int hurray_cli_cat(FILE *out, FILE *err, const char *path, const char *name, long buffer_index,
                   bool npy, bool verify);

/* ------------------------------------------------- shared by the commands */

/* Writes s[0, len) so that a terminal shows it and obeys none of it:
 * hurray_escape_text with HURRAY_ESCAPE_BACKSLASH, the library's one
 * escaping (C0, DEL, C1 and bidirectional controls and bytes that are not
 * UTF-8 become \n, \r, \t, \xNN or \u{NNNN}; a backslash \\). */
void hurray_cli_put_escaped(FILE *out, const char *s, size_t len);
/* The same for JSON text, whose backslashes are its own escapes: the
 * code points above become \uNNNN (a byte that is not UTF-8 \ufffd),
 * hurray_escape_text with HURRAY_ESCAPE_JSON; newlines, which separate its
 * lines, stay. */
void hurray_cli_put_json_text(FILE *out, const char *s, size_t len);
/* A library message that quotes names: escaped the way the library escapes
 * its own messages (hurray_escape_text without HURRAY_ESCAPE_BACKSLASH), so
 * one the library escaped already prints unchanged. */
void hurray_cli_puts_message(FILE *out, const char *message);
/* The same as hurray_cli_put_escaped for a NUL-terminated string; NULL prints as "(null)". */
void hurray_cli_puts_escaped(FILE *out, const char *s);
/* The escaped form of a NUL-terminated string in a malloc'd string, for
 * padding to a width; NULL when out of memory. */
char *hurray_cli_escaped(const char *s);
/* The columns an escaped (so valid UTF-8) string takes: its code points,
 * one column each (a wide CJK character takes two on most terminals). */
size_t hurray_cli_columns(const char *escaped);
/* An escaped string, then spaces up to `width` columns: printf's %-*s pads
 * by bytes, which put rows with non-ASCII names out of line. */
void hurray_cli_put_padded(FILE *out, const char *escaped, int width);

/* A JSON string literal of s[0, len): quotes and backslashes escaped, the
 * code points hurray_cli_put_escaped escapes as \uNNNN, a byte that is not
 * UTF-8 as \ufffd (hurray_escape_text, HURRAY_ESCAPE_JSON and _BACKSLASH). */
void hurray_cli_json_string(FILE *out, const char *s, size_t len);

/* Opens `path` with default options; on failure prints "hurray: PATH:
 * MESSAGE" to err and returns NULL. */
HurrayReader *hurray_cli_open(FILE *err, const char *path, HurrayError *error);
/* Prints "hurray: WHAT: MESSAGE" (both escaped) and returns EXIT_FAILURE. */
int hurray_cli_fail_at(FILE *err, const char *what, const char *message);
/* The same for tensor `name` of the file at `path`: "hurray: PATH: tensor
 * "NAME": MESSAGE", so that a listing of several files names the damaged one. */
int hurray_cli_fail_tensor(FILE *err, const char *path, const char *name, const char *message);

/* Prints "hurray: writing to stdout failed: REASON" (errno's text, or
 * "write error" when the stream set no errno) and returns EXIT_FAILURE. */
int hurray_cli_fail_stdout(FILE *err);

void hurray_cli_print_shape(FILE *out, const HurrayDescriptor *d);
/* The shape as "[a, b, ...]" in a malloc'd string (NULL when out of memory). */
char *hurray_cli_shape_string(const HurrayDescriptor *d);
const char *hurray_cli_layout_name(const HurrayDescriptor *d);
const char *hurray_cli_quant_name(const HurrayDescriptor *d);
/* Sum of the buffer table's sizes, saturating at UINT64_MAX. */
uint64_t hurray_cli_stored_bytes(const HurrayDescriptor *d);

/* The .npy (format 1.0) header of a dense row-major tensor of numpy dtype
 * `descr`: magic, version, length and the padded dict, in a malloc'd block
 * of *len bytes. HURRAY_ERR_LIMIT when numpy cannot express the shape (a
 * dimension or the byte size beyond INT64_MAX) or the header would exceed
 * format 1.0's 65535 bytes. */
HurrayStatus hurray_cli_npy_header(const HurrayDescriptor *d, const char *descr, uint64_t itemsize,
                                   char **header, size_t *len, HurrayError *error);

#endif
