/*
 * Formatting shared by the hurray commands (tools/cli.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "cli.h"

/* hurray_escape_text into `out`: through a stack buffer, a heap one for a
 * long text, its cut-short prefix if that fails. */
static void put_text(FILE *out, const char *s, size_t len, unsigned flags) {
  char small[512];
  size_t need = hurray_escape_text(s, len, flags, small, sizeof small);
  char *big = need < sizeof small ? NULL : malloc(need + 1);
  if (big != NULL) hurray_escape_text(s, len, flags, big, need + 1);
  fputs(big != NULL ? big : small, out);
  free(big);
}

void hurray_cli_put_escaped(FILE *out, const char *s, size_t len) {
  put_text(out, s, len, HURRAY_ESCAPE_BACKSLASH);
}

void hurray_cli_puts_message(FILE *out, const char *message) {
  put_text(out, message, strlen(message), 0);
}

void hurray_cli_put_json_text(FILE *out, const char *s, size_t len) {
  /* Line by line: the newlines separate the text's lines and stay. */
  for (const char *end = s + len; s < end;) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    size_t n = (size_t)((nl != NULL ? nl : end) - s);
    put_text(out, s, n, HURRAY_ESCAPE_JSON);
    if (nl != NULL) fputc('\n', out);
    s += n + (nl != NULL);
  }
}

void hurray_cli_puts_escaped(FILE *out, const char *s) {
  if (s == NULL) s = "(null)";
  hurray_cli_put_escaped(out, s, strlen(s));
}

char *hurray_cli_escaped(const char *s) {
  char *text = NULL;
  size_t size = 0;
  FILE *mem = open_memstream(&text, &size);
  if (mem == NULL) return NULL;
  hurray_cli_puts_escaped(mem, s);
  if (fclose(mem) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

size_t hurray_cli_columns(const char *escaped) {
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)escaped; *p; p++) {
    n += (*p & 0xC0u) != 0x80u; /* every byte but a continuation byte */
  }
  return n;
}

void hurray_cli_put_padded(FILE *out, const char *escaped, int width) {
  fputs(escaped, out);
  for (size_t n = hurray_cli_columns(escaped); n < (size_t)(width > 0 ? width : 0); n++) {
    fputc(' ', out);
  }
}

void hurray_cli_json_string(FILE *out, const char *s, size_t len) {
  fputc('"', out);
  put_text(out, s, len, HURRAY_ESCAPE_JSON | HURRAY_ESCAPE_BACKSLASH);
  fputc('"', out);
}

int hurray_cli_fail_at(FILE *err, const char *what, const char *message) {
  fputs("hurray: ", err);
  hurray_cli_puts_escaped(err, what);
  fputs(": ", err);
  hurray_cli_puts_message(err, message);
  fputc('\n', err);
  return EXIT_FAILURE;
}

int hurray_cli_fail_stdout(FILE *err) {
  fprintf(err, "hurray: writing to stdout failed: %s\n",
          errno != 0 ? strerror(errno) : "write error");
  return EXIT_FAILURE;
}

/* Whether `message` holds `name` in double quotes, as the library names a
 * tensor ("tensor \"w\" buffer 0: ...", "no tensor \"w\" in the file"). */
static bool quotes_name(const char *message, const char *name) {
  size_t n = strlen(name);
  for (const char *at = message; (at = strchr(at, '"')) != NULL; at++) {
    if (strncmp(at + 1, name, n) == 0 && at[1 + n] == '"') return true;
  }
  return false;
}

int hurray_cli_fail_tensor(FILE *err, const char *path, const char *name, const char *message) {
  if (quotes_name(message, name)) return hurray_cli_fail_at(err, path, message);
  fputs("hurray: ", err);
  hurray_cli_puts_escaped(err, path);
  fputs(": tensor \"", err); /* quoted as the library quotes names, as they are */
  hurray_cli_puts_escaped(err, name);
  fputs("\": ", err);
  hurray_cli_puts_message(err, message);
  fputc('\n', err);
  return EXIT_FAILURE;
}

HurrayReader *hurray_cli_open(FILE *err, const char *path, HurrayError *error) {
  HurrayReader *r = NULL;
  if (hurray_reader_open(path, NULL, &r, error) != HURRAY_OK) {
    hurray_cli_fail_at(err, path, error->message);
    return NULL;
  }
  /* The first tensor_name call copies every name; NULL then means no
   * memory for them, and every later call succeeds. */
  if (hurray_reader_tensor_count(r) > 0 && hurray_reader_tensor_name(r, 0) == NULL) {
    hurray_cli_fail_at(err, path, "out of memory for the tensor names");
    hurray_reader_close(r);
    return NULL;
  }
  return r;
}

void hurray_cli_print_shape(FILE *out, const HurrayDescriptor *d) {
  const uint64_t *shape = hurray_descriptor_shape(d);
  fputc('[', out);
  for (uint32_t i = 0; i < hurray_descriptor_rank(d); i++) {
    fprintf(out, "%s%" PRIu64, i ? ", " : "", shape[i]);
  }
  fputc(']', out);
}

char *hurray_cli_shape_string(const HurrayDescriptor *d) {
  char *text = NULL;
  size_t size = 0;
  FILE *mem = open_memstream(&text, &size);
  if (mem == NULL) return NULL;
  hurray_cli_print_shape(mem, d);
  if (fclose(mem) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

const char *hurray_cli_layout_name(const HurrayDescriptor *d) {
  switch (hurray_descriptor_layout_kind(d)) {
    case HURRAY_LAYOUT_DENSE: return "dense";
    case HURRAY_LAYOUT_PAGED: return "paged";
    case HURRAY_LAYOUT_COMPOSITE: return "composite";
    case HURRAY_LAYOUT_SPARSE:
      switch (hurray_descriptor_sparse_format(d)) {
        case HURRAY_SPARSE_COO: return "sparse-coo";
        case HURRAY_SPARSE_CSR: return "sparse-csr";
        case HURRAY_SPARSE_CSC: return "sparse-csc";
        case HURRAY_SPARSE_BSR: return "sparse-bsr";
      }
  }
  return "?";
}

const char *hurray_cli_quant_name(const HurrayDescriptor *d) {
  static const char *const mx[] = {"?",          "mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e3m2",
                                   "mxfp6-e2m3", "mxfp4-e2m1", "mxint8"};
  switch (hurray_descriptor_quant_kind(d)) {
    case HURRAY_QUANT_NONE: return "-";
    case HURRAY_QUANT_PER_TENSOR_AFFINE: return "per-tensor-affine";
    case HURRAY_QUANT_PER_CHANNEL_AFFINE: return "per-channel-affine";
    case HURRAY_QUANT_BLOCK_AFFINE: return "block-affine";
    case HURRAY_QUANT_NF4: return "nf4";
    case HURRAY_QUANT_MX: {
      unsigned e = (unsigned)hurray_descriptor_quant_mx_element(d);
      return mx[e <= 6 ? e : 0];
    }
    case HURRAY_QUANT_BLOCK_CODED: {
      const char *name = "block-coded";
      hurray_block_format_info((uint32_t)hurray_descriptor_quant_block_format(d), NULL, NULL,
                               &name);
      return name;
    }
  }
  return "?";
}

uint64_t hurray_cli_stored_bytes(const HurrayDescriptor *d) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t size = hurray_descriptor_buffer_size(d, i);
    total = size > UINT64_MAX - total ? UINT64_MAX : total + size;
  }
  return total;
}

/* ------------------------------------------------------------------ npy */

static HurrayStatus cli_error(HurrayError *error, HurrayStatus code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static HurrayStatus cli_error(HurrayError *error, HurrayStatus code, const char *fmt, ...) {
  if (error != NULL) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error->message, sizeof error->message, fmt, args);
    va_end(args);
    error->code = code;
  }
  return code;
}

HurrayStatus hurray_cli_npy_header(const HurrayDescriptor *d, const char *descr, uint64_t itemsize,
                                   char **header, size_t *len, HurrayError *error) {
  *header = NULL;
  *len = 0;
  const uint64_t *shape = hurray_descriptor_shape(d);
  uint32_t rank = hurray_descriptor_rank(d);
  /* numpy's dimensions and byte sizes are npy_intp (int64), and it refuses
   * a shape whose dimensions other than 0 multiply, times the item size,
   * past that, even an empty one: np.load of (2^32, 2^32, 0) fails, so such
   * a .npy is not written. */
  uint64_t numel = 1;
  bool empty = false;
  for (uint32_t i = 0; i < rank; i++) {
    if (shape[i] > (uint64_t)INT64_MAX) {
      return cli_error(error, HURRAY_ERR_LIMIT,
                       "dimension %u (%" PRIu64 ") is beyond numpy's int64 shapes", i, shape[i]);
    }
    if (shape[i] == 0) {
      empty = true;
    } else if (numel > (uint64_t)INT64_MAX / shape[i]) {
      return cli_error(error, HURRAY_ERR_LIMIT, "%s",
                       "the element count is beyond numpy's int64 sizes");
    } else {
      numel *= shape[i];
    }
  }
  if ((!empty && itemsize == 0) || (itemsize != 0 && numel > (uint64_t)INT64_MAX / itemsize)) {
    return cli_error(error, HURRAY_ERR_LIMIT, "%s", "the byte size is beyond numpy's int64 sizes");
  }
  char *dict = NULL;
  size_t dict_len = 0;
  FILE *mem = open_memstream(&dict, &dict_len);
  if (mem == NULL) return cli_error(error, HURRAY_ERR_NO_MEMORY, "%s", "out of memory");
  fprintf(mem, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (uint32_t i = 0; i < rank; i++) {
    fprintf(mem, "%" PRIu64 ",%s", shape[i], i + 1 < rank ? " " : "");
  }
  fputs("), }", mem);
  if (fclose(mem) != 0) {
    free(dict);
    return cli_error(error, HURRAY_ERR_NO_MEMORY, "%s", "out of memory");
  }
  /* magic (6) + version (2) + u16 length (2) + dict + '\n', padded with
   * spaces before the newline to a multiple of 64, as numpy writes it. */
  size_t total = 10 + dict_len + 1;
  size_t padded = total / 64 * 64 + (total % 64 ? 64 : 0);
  if (padded - 10 > UINT16_MAX) {
    free(dict);
    return cli_error(error, HURRAY_ERR_LIMIT, "%s", "the .npy header would exceed 65535 bytes");
  }
  char *h = malloc(padded);
  if (h == NULL) {
    free(dict);
    return cli_error(error, HURRAY_ERR_NO_MEMORY, "%s", "out of memory");
  }
  memcpy(h, "\x93NUMPY\x01\x00", 8);
  size_t header_len = padded - 10;
  h[8] = (char)(header_len & 0xFF);
  h[9] = (char)(header_len >> 8);
  memcpy(h + 10, dict, dict_len);
  memset(h + 10 + dict_len, ' ', padded - 1 - (10 + dict_len));
  h[padded - 1] = '\n';
  free(dict);
  *header = h;
  *len = padded;
  return HURRAY_OK;
}
