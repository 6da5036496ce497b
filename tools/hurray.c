/*
 * hurray - inspect hurray files.
 *
 *   hurray ls FILE                      one line per tensor
 *   hurray ls DIR                       the same for every *.hurray file in
 *                                       DIR (sorted), with each piece's shard
 *   hurray info [--json] FILE [NAME]    metadata and full descriptors
 *   hurray verify FILE                  check every checksum
 *   hurray cat [--npy] [--buffer N] FILE NAME
 *                                       raw bytes of one buffer, or .npy
 *   hurray convert SRC DST [options]    to and from safetensors, GGUF, .npz,
 *                                       torch; runs the Python package
 *
 * Exit status: 0 success, 1 the file is bad or an operation failed,
 * 2 usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: hurray <command> [options] FILE [NAME]\n"
    "\n"
    "commands:\n"
    "  ls FILE                       list tensors: name, dtype, shape, layout,\n"
    "                                quantization, stored bytes and statistics\n"
    "  ls DIR                        the same for every *.hurray file in DIR (a\n"
    "                                sharded or DCP checkpoint), with each shard\n"
    "  info [--json] FILE [NAME]     print file metadata and full descriptors\n"
    "                                (all tensors, or only NAME)\n"
    "  verify FILE                   check the checksum of every buffer\n"
    "  cat [--npy] [--buffer N] FILE NAME\n"
    "                                write buffer N (default 0) of NAME to stdout;\n"
    "                                --npy writes a dense tensor as a .npy file\n"
    "  convert SRC DST [options]     convert safetensors, GGUF, .npz/.npy and torch\n"
    "                                checkpoints to and from hurray, optionally\n"
    "                                quantizing; 'hurray convert --help' for more\n"
    "\n"
    "options:\n"
    "  -h, --help                    show this help and exit\n"
    "  --version                     show the library version and exit\n"
    "\n"
    "exit status: 0 on success, 1 if the file is invalid or an operation fails,\n"
    "2 on a usage error.\n";

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "hurray: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\nTry 'hurray --help' for more information.\n");
  return EXIT_USAGE;
}

static int fail(const HurrayError *error) {
  fprintf(stderr, "hurray: %s: %s\n", hurray_status_name(error->code), error->message);
  return EXIT_FAILURE;
}

static HurrayReader *open_or_report(const char *path, HurrayError *error) {
  HurrayReader *r = NULL;
  if (hurray_reader_open(path, NULL, &r, error) != HURRAY_OK) {
    fprintf(stderr, "hurray: %s: %s\n", path, error->message);
    return NULL;
  }
  return r;
}

/* ------------------------------------------------------------ formatting */

static void print_shape(FILE *out, const HurrayDescriptor *d) {
  const uint64_t *shape = hurray_descriptor_shape(d);
  fputc('[', out);
  for (uint32_t i = 0; i < hurray_descriptor_rank(d); i++) {
    fprintf(out, "%s%" PRIu64, i ? ", " : "", shape[i]);
  }
  fputc(']', out);
}

static const char *layout_name(const HurrayDescriptor *d) {
  switch (hurray_descriptor_layout_kind(d)) {
    case HURRAY_LAYOUT_DENSE:
      return "dense";
    case HURRAY_LAYOUT_PAGED:
      return "paged";
    case HURRAY_LAYOUT_COMPOSITE:
      return "composite";
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

static const char *quant_name(const HurrayDescriptor *d) {
  static const char *const mx[] = {"?", "mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e3m2",
                                   "mxfp6-e2m3", "mxfp4-e2m1", "mxint8"};
  switch (hurray_descriptor_quant_kind(d)) {
    case HURRAY_QUANT_NONE: return "-";
    case HURRAY_QUANT_PER_TENSOR_AFFINE: return "per-tensor-affine";
    case HURRAY_QUANT_PER_CHANNEL_AFFINE: return "per-channel-affine";
    case HURRAY_QUANT_BLOCK_AFFINE: return "block-affine";
    case HURRAY_QUANT_NF4: return "nf4";
    case HURRAY_QUANT_MX: return mx[hurray_descriptor_quant_mx_element(d) <= 6 ? hurray_descriptor_quant_mx_element(d) : 0];
  }
  return "?";
}

static uint64_t stored_bytes(const HurrayDescriptor *d) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    total += hurray_descriptor_buffer_size(d, i);
  }
  return total;
}

static void json_string(FILE *out, const char *s, size_t len) {
  fputc('"', out);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

/* ---------------------------------------------------------------- commands */

static void print_u64s(FILE *out, const uint64_t *v, uint32_t n) {
  fputc('[', out);
  for (uint32_t i = 0; i < n; i++) fprintf(out, "%s%" PRIu64, i ? ", " : "", v[i]);
  fputc(']', out);
}

/* One row per tensor of the file at `path`. In a directory listing `file`
 * (the name in the directory) starts each row and each piece's shard and
 * extension type end it; a file without tensors (such as a DCP checkpoint's .metadata.hurray)
 * gets one row saying so. */
static int ls_rows(const char *path, const char *file) {
  HurrayError error = {0};
  HurrayReader *r = open_or_report(path, &error);
  if (r == NULL) return EXIT_FAILURE;
  int status = EXIT_SUCCESS;
  if (file == NULL) {
    printf("%-40s %-14s %-20s %-12s %-20s %12s  %s\n", "NAME", "DTYPE", "SHAPE", "LAYOUT",
           "QUANTIZATION", "BYTES", "STATISTICS");
  }
  if (file != NULL && hurray_reader_tensor_count(r) == 0) {
    printf("%-24s (no tensors, %zu metadata entries)\n", file, hurray_reader_metadata_count(r));
  }
  for (size_t i = 0; i < hurray_reader_tensor_count(r); i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    HurrayDescriptor *d = NULL;
    if (hurray_reader_get_descriptor(r, name, &d, &error) != HURRAY_OK) {
      fprintf(stderr, "hurray: %s: %s\n", name, error.message);
      status = EXIT_FAILURE;
      continue;
    }
    char shape[256];
    FILE *mem = fmemopen(shape, sizeof shape, "w");
    print_shape(mem, d);
    fclose(mem);
    if (file != NULL) printf("%-24s ", file);
    printf("%-40s %-14s %-20s %-12s %-20s %12" PRIu64, name,
           hurray_dtype_name(hurray_descriptor_dtype(d)), shape, layout_name(d), quant_name(d),
           stored_bytes(d));
    /* Statistics are advisory: shown as stored, never relied on. */
    double lo, hi;
    uint64_t nans, zeros;
    if (hurray_descriptor_stat_min(d, &lo)) printf("  min=%g", lo);
    if (hurray_descriptor_stat_max(d, &hi)) printf(" max=%g", hi);
    if (hurray_descriptor_stat_nan_count(d, &nans)) printf(" nan=%" PRIu64, nans);
    if (hurray_descriptor_stat_zero_count(d, &zeros)) printf(" zeros=%" PRIu64, zeros);
    if (file != NULL && hurray_descriptor_has_shard(d)) {
      uint32_t rank = hurray_descriptor_shard_rank(d);
      printf("  shard=");
      print_u64s(stdout, hurray_descriptor_shard_offsets(d), rank);
      printf("/");
      print_u64s(stdout, hurray_descriptor_shard_global_shape(d), rank);
    }
    const char *extension = hurray_descriptor_extension_name(d);
    if (file != NULL && extension != NULL) printf("  extension=%s", extension);
    printf("\n");
    hurray_descriptor_destroy(d);
  }
  hurray_reader_close(r);
  return status;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ls_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "hurray: %s: %s\n", dir, strerror(errno));
    return EXIT_FAILURE;
  }
  char **names = NULL;
  size_t count = 0, cap = 0;
  int status = EXIT_SUCCESS;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len <= 7 || strcmp(e->d_name + len - 7, ".hurray") != 0) continue;
    if (count == cap) {
      size_t grown = cap ? 2 * cap : 16;
      char **more = realloc(names, grown * sizeof *names);
      if (more == NULL) break;
      names = more;
      cap = grown;
    }
    if ((names[count] = strdup(e->d_name)) == NULL) break;
    count++;
  }
  if (e != NULL) {
    fprintf(stderr, "hurray: %s: out of memory\n", dir);
    status = EXIT_FAILURE;
  }
  closedir(d);
  if (status == EXIT_SUCCESS && count == 0) {
    fprintf(stderr, "hurray: %s: no *.hurray files in this directory\n", dir);
    status = EXIT_FAILURE;
  }
  if (status == EXIT_SUCCESS) {
    qsort(names, count, sizeof *names, compare_names);
    printf("%-24s %-40s %-14s %-20s %-12s %-20s %12s  %s\n", "FILE", "NAME", "DTYPE", "SHAPE",
           "LAYOUT", "QUANTIZATION", "BYTES", "STATISTICS / SHARD (offsets/global shape) / EXTENSION");
    for (size_t i = 0; i < count; i++) {
      size_t len = strlen(dir) + 1 + strlen(names[i]) + 1;
      char *path = malloc(len);
      if (path == NULL) {
        fprintf(stderr, "hurray: %s: out of memory\n", dir);
        status = EXIT_FAILURE;
        break;
      }
      snprintf(path, len, "%s/%s", dir, names[i]);
      if (ls_rows(path, names[i]) != EXIT_SUCCESS) status = EXIT_FAILURE;
      free(path);
    }
  }
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
  return status;
}

static int cmd_ls(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return ls_dir(path);
  return ls_rows(path, NULL);
}

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
      hurray_reader_metadata_string(r, key, &s, NULL);
      if (json) json_string(out, s, strlen(s));
      else fprintf(out, "%s", s);
      return;
    case HURRAY_METADATA_INT:
      hurray_reader_metadata_int(r, key, &v, NULL);
      fprintf(out, "%" PRId64, v);
      return;
    case HURRAY_METADATA_FLOAT:
      hurray_reader_metadata_float(r, key, &f, NULL);
      if (json && (f != f || f - f != 0)) fprintf(out, "\"%g\"", f);
      else fprintf(out, "%.17g", f);
      return;
    case HURRAY_METADATA_BOOL:
      hurray_reader_metadata_bool(r, key, &b, NULL);
      fprintf(out, b ? "true" : "false");
      return;
    case HURRAY_METADATA_BYTES:
      hurray_reader_metadata_bytes(r, key, &bytes, &len, NULL);
      fprintf(out, json ? "{\"bytes_hex\": \"" : "<%zu bytes> ", len);
      for (size_t k = 0; k < len; k++) fprintf(out, "%02x", bytes[k]);
      if (json) fprintf(out, "\"}");
      return;
  }
  fprintf(out, json ? "null" : "<value of unknown type %d>", (int)hurray_reader_metadata_type(r, i));
}

static int cmd_info(const char *path, const char *only, bool json) {
  HurrayError error = {0};
  HurrayReader *r = open_or_report(path, &error);
  if (r == NULL) return EXIT_FAILURE;
  if (only != NULL && hurray_reader_find(r, only, NULL, &error) != HURRAY_OK) {
    hurray_reader_close(r);
    return fail(&error);
  }
  int status = EXIT_SUCCESS;
  size_t n = hurray_reader_tensor_count(r), m = hurray_reader_metadata_count(r);
  if (json) {
    printf("{\n\"metadata\": {");
    for (size_t i = 0; i < m; i++) {
      const char *key = hurray_reader_metadata_key(r, i);
      printf("%s\n  ", i ? "," : "");
      json_string(stdout, key, strlen(key));
      printf(": ");
      print_metadata_value(stdout, r, i, true);
    }
    printf("%s},\n\"tensors\": {", m ? "\n" : "");
  } else {
    printf("file: %s\ntensors: %zu\nmetadata: %zu entries\n", path, n, m);
    for (size_t i = 0; i < m; i++) {
      printf("  %s = ", hurray_reader_metadata_key(r, i));
      print_metadata_value(stdout, r, i, false);
      printf("\n");
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
      fprintf(stderr, "hurray: %s: %s\n", name, error.message);
      status = EXIT_FAILURE;
      hurray_descriptor_destroy(d);
      continue;
    }
    if (json) {
      printf("%s\n", first ? "" : ",");
      json_string(stdout, name, strlen(name));
      printf(": %.*s", (int)strlen(text) - 1, text); /* without the final newline */
    } else {
      printf("\ntensor %s: %s ", name, hurray_dtype_name(hurray_descriptor_dtype(d)));
      print_shape(stdout, d);
      printf(", %s, quantization %s, %" PRIu64 " bytes in %u buffers\n%s", layout_name(d),
             quant_name(d), stored_bytes(d), hurray_descriptor_buffer_count(d), text);
    }
    first = false;
    hurray_free(text);
    hurray_descriptor_destroy(d);
  }
  if (json) printf("\n}\n}\n");
  hurray_reader_close(r);
  return status;
}

static int cmd_verify(const char *path) {
  HurrayError error = {0};
  HurrayReader *r = open_or_report(path, &error);
  if (r == NULL) return EXIT_FAILURE;
  size_t buffers = 0;
  int status = EXIT_SUCCESS;
  for (size_t i = 0; i < hurray_reader_tensor_count(r); i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    HurrayDescriptor *d = NULL;
    if (hurray_reader_verify(r, name, &error) != HURRAY_OK ||
        hurray_reader_get_descriptor(r, name, &d, &error) != HURRAY_OK) {
      fprintf(stderr, "hurray: %s: %s\n", path, error.message);
      status = EXIT_FAILURE;
      continue;
    }
    buffers += hurray_descriptor_buffer_count(d);
    hurray_descriptor_destroy(d);
  }
  if (status == EXIT_SUCCESS) {
    printf("%s: OK, %zu tensors, %zu buffers verified\n", path, hurray_reader_tensor_count(r),
           buffers);
  }
  hurray_reader_close(r);
  return status;
}

/* numpy's spelling of the dtypes it has; NULL where numpy has none. */
static const char *npy_descr(HurrayDType t) {
  switch (t) {
    case HURRAY_DTYPE_BOOL: return "|b1";
    case HURRAY_DTYPE_INT8: return "|i1";
    case HURRAY_DTYPE_INT16: return "<i2";
    case HURRAY_DTYPE_INT32: return "<i4";
    case HURRAY_DTYPE_INT64: return "<i8";
    case HURRAY_DTYPE_UINT8: return "|u1";
    case HURRAY_DTYPE_UINT16: return "<u2";
    case HURRAY_DTYPE_UINT32: return "<u4";
    case HURRAY_DTYPE_UINT64: return "<u8";
    case HURRAY_DTYPE_FLOAT16: return "<f2";
    case HURRAY_DTYPE_FLOAT32: return "<f4";
    case HURRAY_DTYPE_FLOAT64: return "<f8";
    case HURRAY_DTYPE_COMPLEX64: return "<c8";
    case HURRAY_DTYPE_COMPLEX128: return "<c16";
    default: return NULL;
  }
}

static void write_npy_header(const HurrayDescriptor *d, const char *descr) {
  char dict[512];
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
  const uint64_t *shape = hurray_descriptor_shape(d);
  for (uint32_t i = 0; i < hurray_descriptor_rank(d); i++) {
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%" PRIu64 ",%s", shape[i],
                    i + 1 < hurray_descriptor_rank(d) ? " " : "");
  }
  len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
  /* Pad with spaces so magic + header length + dict + '\n' is a multiple of 64. */
  size_t total = 10 + (size_t)len + 1;
  size_t padded = (total + 63) / 64 * 64;
  fwrite("\x93NUMPY\x01\x00", 1, 8, stdout);
  uint16_t header_len = (uint16_t)(padded - 10);
  fputc(header_len & 0xFF, stdout);
  fputc(header_len >> 8, stdout);
  fwrite(dict, 1, (size_t)len, stdout);
  for (size_t i = total; i < padded; i++) fputc(' ', stdout);
  fputc('\n', stdout);
}

static int cmd_cat(const char *path, const char *name, long buffer_index, bool npy) {
  HurrayError error = {0};
  HurrayReader *r = open_or_report(path, &error);
  if (r == NULL) return EXIT_FAILURE;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  int status = EXIT_SUCCESS;
  if (hurray_reader_get_tensor(r, name, &d, &list, &error) != HURRAY_OK) {
    status = fail(&error);
  } else if (buffer_index < 0 || (size_t)buffer_index >= hurray_buffer_list_len(list)) {
    fprintf(stderr, "hurray: %s has %zu buffers; --buffer %ld is out of range\n", name,
            hurray_buffer_list_len(list), buffer_index);
    status = EXIT_FAILURE;
  } else {
    const HurrayBuffer *b = hurray_buffer_list_get(list, (size_t)buffer_index);
    const char *descr = npy_descr(hurray_descriptor_dtype(d));
    if (npy) {
      if (hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_DENSE ||
          hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE ||
          hurray_descriptor_strides(d) != NULL || hurray_descriptor_byte_offset(d) != 0 ||
          descr == NULL || buffer_index != 0) {
        fprintf(stderr,
                "hurray: --npy needs an unquantized, dense, row-major tensor of a numpy dtype; "
                "%s is %s %s (use raw output instead)\n",
                name, layout_name(d), hurray_dtype_name(hurray_descriptor_dtype(d)));
        status = EXIT_FAILURE;
      } else {
        write_npy_header(d, descr);
      }
    }
    if (status == EXIT_SUCCESS) {
      uint64_t size = hurray_buffer_size(b);
      if (fwrite(hurray_buffer_data(b), 1, (size_t)size, stdout) != size || fflush(stdout) != 0) {
        fprintf(stderr, "hurray: writing to stdout failed: %s\n", strerror(errno));
        status = EXIT_FAILURE;
      }
    }
  }
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
  return status;
}

/* hurray, safetensors and GGUF convert natively (hurray_convert_file):
 * no Python. Returns -1 when the conversion is not one of those (another
 * format, an option only the Python converter has, or a tensor that needs
 * a change of form, e.g. dequantizing into safetensors): the caller then
 * hands over to Python. Nothing is written in that case. */
static int try_native_convert(int argc, char **argv) {
  const char *src = NULL, *dst = NULL;
  bool quiet = false, stats = false, verify = true;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0) quiet = true;
    else if (strcmp(argv[i], "--stats") == 0) stats = true;
    else if (strcmp(argv[i], "--no-verify") == 0) verify = false;
    else if (argv[i][0] == '-' && argv[i][1] != '\0') return -1; /* Python's options */
    else if (src == NULL) src = argv[i];
    else if (dst == NULL) dst = argv[i];
    else return -1;
  }
  if (src == NULL || dst == NULL) return -1;
  HurrayFormat sf = hurray_format_from_path(src), tf = hurray_format_from_path(dst);
  if (sf == HURRAY_FORMAT_UNKNOWN || tf == HURRAY_FORMAT_UNKNOWN) return -1;
  if (stats && tf != HURRAY_FORMAT_HURRAY) return -1; /* Python notes it is ignored */
  HurrayConvertOptions options = HURRAY_CONVERT_OPTIONS_INIT;
  options.verify_checksums = verify;
  options.statistics = stats;
  HurrayError error = {0};
  HurrayStatus status = hurray_convert_file(src, dst, &options, &error);
  if (status == HURRAY_ERR_UNSUPPORTED && getenv("HURRAY_CONVERT_NATIVE_ONLY") == NULL) {
    return -1; /* dst untouched; Python can change the tensors' form */
  }
  if (status != HURRAY_OK) {
    char *nl = strchr(error.message, '\n');
    if (nl != NULL) *nl = '\0';
    fprintf(stderr, "hurray convert: %s\n", error.message);
    return EXIT_FAILURE;
  }
  if (!quiet) {
    printf("%s -> %s: %s (native)\n", hurray_format_name(sf), hurray_format_name(tf), dst);
  }
  return EXIT_SUCCESS;
}

/* convert reads formats that need their own ecosystems (torch pickles,
 * GGUF, safetensors), so it lives in the Python package: this command
 * hands over to `PYTHON -m hurray convert`, keeping one `hurray` tool with
 * one set of subcommands. PYTHON is HURRAY_PYTHON (the `hurray` command pip
 * installs sets it to the interpreter that installed the package), else the
 * interpreter this build was configured with, else python3 from PATH. */
#ifndef HURRAY_DEFAULT_PYTHON
#define HURRAY_DEFAULT_PYTHON "python3"
#endif

/* What `-m hurray` does, except that it leaves the current directory off
 * sys.path (a hurray/ folder there must not run) and that an interpreter
 * without the package fails with one line saying what to do. */
static const char convert_bootstrap[] =
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'): del sys.path[0]\n"
    "try:\n"
    "    import hurray\n"
    "except ImportError as e:\n"
    "    sys.exit('hurray convert: %s cannot import the hurray Python package (%s); '\n"
    "             'install it there (pip install . in the hurray source tree), or set '\n"
    "             'HURRAY_PYTHON to a Python that has it' % (sys.executable, e))\n"
    "import runpy\n"
    "runpy.run_module('hurray', run_name='__main__', alter_sys=True)\n";

static int run_convert(int argc, char **argv) {
  int native = try_native_convert(argc, argv);
  if (native >= 0) return native;
  const char *python = getenv("HURRAY_PYTHON");
  if (python == NULL || python[0] == '\0') {
    python = access(HURRAY_DEFAULT_PYTHON, X_OK) == 0 ? HURRAY_DEFAULT_PYTHON : "python3";
  }
  char **args = calloc((size_t)argc + 3, sizeof *args);
  if (args == NULL) {
    fprintf(stderr, "hurray: out of memory\n");
    return EXIT_FAILURE;
  }
  args[0] = (char *)python;
  args[1] = "-c";
  args[2] = (char *)convert_bootstrap;
  for (int i = 1; i < argc; i++) args[i + 2] = argv[i];
  execvp(python, args);
  fprintf(stderr,
          "hurray convert: cannot run the Python interpreter '%s' (%s); set HURRAY_PYTHON to "
          "a Python that has the hurray package\n",
          python, strerror(errno));
  free(args);
  return EXIT_FAILURE;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[1];
  if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 ||
      strcmp(command, "help") == 0) {
    fputs(usage_text, stdout);
    return EXIT_SUCCESS;
  }
  if (strcmp(command, "--version") == 0) {
    printf("hurray %s (C ABI %u, file format %d.%d)\n", hurray_version_string(),
           hurray_abi_version(), HURRAY_FILE_FORMAT_MAJOR, HURRAY_FILE_FORMAT_MINOR);
    return EXIT_SUCCESS;
  }
  if (strcmp(command, "convert") == 0) return run_convert(argc, argv);
  bool json = false, npy = false;
  long buffer_index = 0;
  const char *positional[3] = {NULL, NULL, NULL};
  int npos = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage_text, stdout);
      return EXIT_SUCCESS;
    } else if (strcmp(argv[i], "--json") == 0 && strcmp(command, "info") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--npy") == 0 && strcmp(command, "cat") == 0) {
      npy = true;
    } else if (strcmp(argv[i], "--buffer") == 0 && strcmp(command, "cat") == 0) {
      char *end = NULL;
      if (i + 1 >= argc || (buffer_index = strtol(argv[i + 1], &end, 10), *end != '\0')) {
        return usage_error("--buffer needs a number%s", "");
      }
      i++;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      return usage_error("unknown option '%s'", argv[i]);
    } else if (npos < 3) {
      positional[npos++] = argv[i];
    } else {
      return usage_error("too many arguments starting at '%s'", argv[i]);
    }
  }
  if (strcmp(command, "ls") == 0 || strcmp(command, "verify") == 0) {
    if (npos != 1) return usage_error("%s takes exactly one FILE", command);
    return command[0] == 'l' ? cmd_ls(positional[0]) : cmd_verify(positional[0]);
  }
  if (strcmp(command, "info") == 0) {
    if (npos < 1 || npos > 2) return usage_error("info takes FILE [NAME]%s", "");
    return cmd_info(positional[0], positional[1], json);
  }
  if (strcmp(command, "cat") == 0) {
    if (npos != 2) return usage_error("cat takes FILE NAME%s", "");
    return cmd_cat(positional[0], positional[1], buffer_index, npy);
  }
  return usage_error("unknown command '%s'", command);
}
