/*
 * hurray info [--json] FILE [NAME] and hurray verify FILE (tools/cli.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void print_metadata_value(FILE *out, const HurrayReader *r, size_t i, bool json) {
  const char *key = hurray_reader_metadata_key(r, i);
  const char *s;
  int64_t v;
  double f;
  bool b;
  const uint8_t *bytes;
  size_t len;
  switch (hurray_reader_metadata_type(r, i)) {
    case HURRAY_METADATA_STRING:
      if (hurray_reader_metadata_string(r, key, &s, NULL) != HURRAY_OK) break;
      if (json) hurray_cli_json_string(out, s, strlen(s));
      else hurray_cli_puts_escaped(out, s);
      return;
    case HURRAY_METADATA_INT:
      if (hurray_reader_metadata_int(r, key, &v, NULL) != HURRAY_OK) break;
      fprintf(out, "%" PRId64, v);
      return;
    case HURRAY_METADATA_FLOAT:
      if (hurray_reader_metadata_float(r, key, &f, NULL) != HURRAY_OK) break;
      /* Typed, as bytes are: a bare "nan" would read as the string "nan". */
      if (json && (f != f || f - f != 0)) {
        fprintf(out, "{\"float\": \"%s\"}", f != f ? "nan" : f > 0 ? "inf" : "-inf");
      } else {
        /* A float that prints as an integer ("5", "-0") gets a ".0" in
         * JSON, which would read it as the int metadata 5 (and 0). */
        char text[40];
        snprintf(text, sizeof text, "%.17g", f);
        fputs(text, out);
        if (json && strpbrk(text, ".e") == NULL) fputs(".0", out);
      }
      return;
    case HURRAY_METADATA_BOOL:
      if (hurray_reader_metadata_bool(r, key, &b, NULL) != HURRAY_OK) break;
      fputs(b ? "true" : "false", out);
      return;
    case HURRAY_METADATA_BYTES:
      if (hurray_reader_metadata_bytes(r, key, &bytes, &len, NULL) != HURRAY_OK) break;
      fprintf(out, json ? "{\"bytes_hex\": \"" : "<%zu bytes> ", len);
      for (size_t k = 0; k < len; k++) fprintf(out, "%02x", bytes[k]);
      if (json) fputs("\"}", out);
      return;
  }
  if (json) fputs("null", out);
  else fprintf(out, "<value of unknown type %d>", (int)hurray_reader_metadata_type(r, i));
}

int hurray_cli_info(FILE *out, FILE *err, const char *path, const char *only, bool json) {
  HurrayError error = {0};
  HurrayReader *r = hurray_cli_open(err, path, &error);
  if (r == NULL) return EXIT_FAILURE;
  if (only != NULL && hurray_reader_find(r, only, NULL, &error) != HURRAY_OK) {
    hurray_reader_close(r);
    return hurray_cli_fail_at(err, path, error.message);
  }
  int status = EXIT_SUCCESS;
  size_t n = hurray_reader_tensor_count(r), m = hurray_reader_metadata_count(r);
  if (json) {
    fputs("{\n\"metadata\": {", out);
    for (size_t i = 0; i < m; i++) {
      const char *key = hurray_reader_metadata_key(r, i);
      fprintf(out, "%s\n  ", i ? "," : "");
      hurray_cli_json_string(out, key, strlen(key));
      fputs(": ", out);
      print_metadata_value(out, r, i, true);
    }
    fprintf(out, "%s},\n\"tensors\": {", m ? "\n" : "");
  } else {
    fputs("file: ", out);
    hurray_cli_puts_escaped(out, path);
    fprintf(out, "\ntensors: %zu\nmetadata: %zu entries\n", n, m);
    for (size_t i = 0; i < m; i++) {
      fputs("  ", out);
      hurray_cli_puts_escaped(out, hurray_reader_metadata_key(r, i));
      fputs(" = ", out);
      print_metadata_value(out, r, i, false);
      fputc('\n', out);
    }
  }
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    if (only != NULL && strcmp(name, only) != 0) continue;
    HurrayDescriptor *d = NULL;
    char *text = NULL;
    if (hurray_reader_get_descriptor(r, name, &d, &error) != HURRAY_OK ||
        hurray_descriptor_to_json(d, &text, &error) != HURRAY_OK) {
      hurray_cli_fail_tensor(err, path, name, error.message);
      status = EXIT_FAILURE;
      hurray_descriptor_destroy(d);
      continue;
    }
    size_t text_len = strlen(text);
    if (text_len > 0 && text[text_len - 1] == '\n') text_len--;
    if (json) {
      fprintf(out, "%s\n", first ? "" : ",");
      hurray_cli_json_string(out, name, strlen(name));
      fputs(": ", out);
      hurray_cli_put_json_text(out, text, text_len);
    } else {
      fputs("\ntensor ", out);
      hurray_cli_puts_escaped(out, name);
      fprintf(out, ": %s ", hurray_dtype_name(hurray_descriptor_dtype(d)));
      hurray_cli_print_shape(out, d);
      fprintf(out, ", %s, quantization %s, %" PRIu64 " bytes in %u buffers\n",
              hurray_cli_layout_name(d), hurray_cli_quant_name(d), hurray_cli_stored_bytes(d),
              hurray_descriptor_buffer_count(d));
      /* The JSON escapes C0 controls already, not DEL, C1 or bidi controls. */
      hurray_cli_put_json_text(out, text, text_len);
      fputc('\n', out);
    }
    first = false;
    hurray_free(text);
    hurray_descriptor_destroy(d);
  }
  if (json) fputs("\n}\n}\n", out);
  hurray_reader_close(r);
  return status;
}

int hurray_cli_verify(FILE *out, FILE *err, const char *path) {
  HurrayError error = {0};
  HurrayReader *r = hurray_cli_open(err, path, &error);
  if (r == NULL) return EXIT_FAILURE;
  size_t buffers = 0;
  int status = EXIT_SUCCESS;
  /* One call over the whole file hashes on every thread; one call per
   * tensor hashed each small tensor on one thread, and asked the CPU count
   * each time (20,000 tensors of 8 KiB: 180 ms against 20 ms). Only a
   * file that fails is checked tensor by tensor, to name every bad one. */
  bool whole_ok = hurray_reader_verify(r, NULL, &error) == HURRAY_OK;
  HurrayError whole_error = error;
  for (size_t i = 0; i < hurray_reader_tensor_count(r); i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    HurrayDescriptor *d = NULL;
    if ((!whole_ok && hurray_reader_verify(r, name, &error) != HURRAY_OK) ||
        hurray_reader_get_descriptor(r, name, &d, &error) != HURRAY_OK) {
      hurray_cli_fail_at(err, path, error.message);
      status = EXIT_FAILURE;
      continue;
    }
    buffers += hurray_descriptor_buffer_count(d);
    hurray_descriptor_destroy(d);
  }
  if (!whole_ok && status == EXIT_SUCCESS) {
    /* The file changed between the two passes, or failed as a whole only
     * (truncated since it was opened). */
    hurray_cli_fail_at(err, path, whole_error.message);
    status = EXIT_FAILURE;
  }
  if (status == EXIT_SUCCESS) {
    hurray_cli_puts_escaped(out, path);
    size_t tensors = hurray_reader_tensor_count(r);
    fprintf(out, ": OK, %zu tensor%s, %zu buffer%s verified\n", tensors, tensors == 1 ? "" : "s",
            buffers, buffers == 1 ? "" : "s");
  }
  hurray_reader_close(r);
  return status;
}
