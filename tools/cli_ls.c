/*
 * hurray ls FILE | DIR (tools/cli.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void print_u64s(FILE *out, const uint64_t *v, uint32_t n) {
  fputc('[', out);
  for (uint32_t i = 0; i < n; i++) fprintf(out, "%s%" PRIu64, i ? ", " : "", v[i]);
  fputc(']', out);
}

/* Statistics are advisory: shown as stored, never relied on. */
static void print_statistics(FILE *out, const HurrayDescriptor *d) {
  double lo, hi;
  uint64_t nans, zeros;
  const char *gap = "  "; /* before the first statistic, then one space */
  if (hurray_descriptor_stat_min(d, &lo)) {
    fprintf(out, "%smin=%g", gap, lo);
    gap = " ";
  }
  if (hurray_descriptor_stat_max(d, &hi)) {
    fprintf(out, "%smax=%g", gap, hi);
    gap = " ";
  }
  if (hurray_descriptor_stat_nan_count(d, &nans)) {
    fprintf(out, "%snan=%" PRIu64, gap, nans);
    gap = " ";
  }
  if (hurray_descriptor_stat_zero_count(d, &zeros)) fprintf(out, "%szeros=%" PRIu64, gap, zeros);
}

/* One row per tensor of the file at `path`. In a directory listing `file`
 * (the name in the directory) starts each row and each piece's shard and
 * extension type end it; a file without tensors (such as a DCP checkpoint's
 * .metadata.hurray) gets one row saying so. */
static int ls_rows(FILE *out, FILE *err, const char *path, const char *file, int file_width) {
  HurrayError error = {0};
  HurrayReader *r = hurray_cli_open(err, path, &error);
  if (r == NULL) return EXIT_FAILURE;
  int status = EXIT_SUCCESS;
  char *file_text = file != NULL ? hurray_cli_escaped(file) : NULL;
  if (file != NULL && file_text == NULL) {
    hurray_reader_close(r);
    return hurray_cli_fail_at(err, path, "out of memory");
  }
  if (file == NULL) {
    fprintf(out, "%-40s %-14s %-20s %-12s %-20s %12s  %s\n", "NAME", "DTYPE", "SHAPE", "LAYOUT",
            "QUANTIZATION", "BYTES", "STATISTICS");
  }
  if (file != NULL && hurray_reader_tensor_count(r) == 0) {
    hurray_cli_put_padded(out, file_text, file_width);
    fprintf(out, " (no tensors, %zu metadata entries)\n", hurray_reader_metadata_count(r));
  }
  for (size_t i = 0; i < hurray_reader_tensor_count(r); i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    HurrayDescriptor *d = NULL;
    if (hurray_reader_get_descriptor(r, name, &d, &error) != HURRAY_OK) {
      hurray_cli_fail_tensor(err, path, name, error.message);
      status = EXIT_FAILURE;
      continue;
    }
    char *shape = hurray_cli_shape_string(d);
    char *name_text = hurray_cli_escaped(name);
    if (shape == NULL || name_text == NULL) {
      free(shape);
      free(name_text);
      hurray_descriptor_destroy(d);
      status = hurray_cli_fail_at(err, path, "out of memory");
      break;
    }
    if (file != NULL) {
      hurray_cli_put_padded(out, file_text, file_width);
      fputc(' ', out);
    }
    hurray_cli_put_padded(out, name_text, 40);
    fprintf(out, " %-14s %-20s %-12s %-20s %12" PRIu64,
            hurray_dtype_name(hurray_descriptor_dtype(d)), shape, hurray_cli_layout_name(d),
            hurray_cli_quant_name(d), hurray_cli_stored_bytes(d));
    free(shape);
    free(name_text);
    print_statistics(out, d);
    if (file != NULL && hurray_descriptor_has_shard(d)) {
      uint32_t rank = hurray_descriptor_shard_rank(d);
      fprintf(out, "  shard=");
      print_u64s(out, hurray_descriptor_shard_offsets(d), rank);
      fprintf(out, "/");
      print_u64s(out, hurray_descriptor_shard_global_shape(d), rank);
    }
    const char *extension = hurray_descriptor_extension_name(d);
    if (file != NULL && extension != NULL) {
      fputs("  extension=", out);
      hurray_cli_puts_escaped(out, extension);
    }
    fputc('\n', out);
    hurray_descriptor_destroy(d);
  }
  free(file_text);
  hurray_reader_close(r);
  return status;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ls_dir(FILE *out, FILE *err, const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return hurray_cli_fail_at(err, dir, strerror(errno));
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
  if (e != NULL) status = hurray_cli_fail_at(err, dir, "out of memory");
  closedir(d);
  if (status == EXIT_SUCCESS && count == 0) {
    status = hurray_cli_fail_at(err, dir, "no *.hurray files in this directory");
  }
  if (status == EXIT_SUCCESS) {
    qsort(names, count, sizeof *names, compare_names);
    /* Wide enough for every name: save_sharded's part-00000-of-00004.hurray
     * is 26 bytes, which pushed each of its rows out of line. */
    int width = 24;
    for (size_t i = 0; i < count; i++) {
      char *text = hurray_cli_escaped(names[i]);
      size_t columns = text != NULL ? hurray_cli_columns(text) : 0;
      if (columns > (size_t)width && columns < 4096) width = (int)columns;
      free(text);
    }
    fprintf(out, "%-*s %-40s %-14s %-20s %-12s %-20s %12s  %s\n", width, "FILE", "NAME", "DTYPE",
            "SHAPE", "LAYOUT", "QUANTIZATION", "BYTES",
            "STATISTICS / SHARD (offsets/global shape) / EXTENSION");
    for (size_t i = 0; i < count; i++) {
      size_t len = strlen(dir) + 1 + strlen(names[i]) + 1;
      char *path = malloc(len);
      if (path == NULL) {
        status = hurray_cli_fail_at(err, dir, "out of memory");
        break;
      }
      snprintf(path, len, "%s/%s", dir, names[i]);
      /* A FIFO, socket, device or directory named *.hurray is no shard:
       * reading a FIFO would wait for a writer forever. stat() itself never
       * blocks; the reader refuses such files too (without blocking), this
       * only makes the message say what was skipped. */
      struct stat st;
      if (stat(path, &st) != 0) {
        hurray_cli_fail_at(err, path, strerror(errno));
        status = EXIT_FAILURE;
      } else if (!S_ISREG(st.st_mode)) {
        hurray_cli_fail_at(err, path, "not a regular file, skipped");
        status = EXIT_FAILURE;
      } else if (ls_rows(out, err, path, names[i], width) != EXIT_SUCCESS) {
        status = EXIT_FAILURE;
      }
      free(path);
    }
  }
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
  return status;
}

int hurray_cli_ls(FILE *out, FILE *err, const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return ls_dir(out, err, path);
  return ls_rows(out, err, path, NULL, 0);
}
