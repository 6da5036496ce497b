/*
 * Fuzz target: the `hurray` command-line tool over a whole file. The input
 * becomes an in-memory file (a memfd) and the commands of tools/cli_*.c run
 * on it exactly as `hurray` runs them, with stdout and stderr captured in
 * memory streams: ls, info, info --json, verify, cat --npy of the first
 * four tensors and the last one (each cat opens the file again, so all of
 * them would make large inputs slow), info NAME and raw cat of the first
 * tensor's first buffer.
 *
 * Besides no crash, hang, leak or undefined behaviour, it checks what the
 * tool promises:
 *  - human output (ls, info, every diagnostic) carries no control character
 *    but '\n': names, keys and strings from the file are escaped;
 *  - info --json carries none at all outside its own newlines;
 *  - a successful cat --npy writes a well-formed .npy 1.0 header (magic,
 *    length, 64-byte padding, a dict ending in '\n') followed by exactly
 *    the tensor's bytes;
 *  - every command exits with 0 or 1.
 *
 * The mutator is the checksum-resealing one of fuzz_file_reader.c
 * (fuzz_file_mutator.h), so mutated files get past the checksums.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../tools/cli.h"
#include "hurray/hurray.h"
#include "fuzz_check.h"
#include "fuzz_memfd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_CAT_TENSORS 4

typedef struct Capture {
  char *text;
  size_t len;
  FILE *f;
} Capture;

static void capture_open(Capture *c) {
  c->text = NULL;
  c->len = 0;
  c->f = open_memstream(&c->text, &c->len);
  CHECK(c->f != NULL);
}

static void capture_close(Capture *c) {
  CHECK(fclose(c->f) == 0);
  c->f = NULL;
}

static void capture_free(Capture *c) {
  free(c->text);
  c->text = NULL;
}

static void check_no_controls(const Capture *c) {
  for (size_t i = 0; i < c->len; i++) {
    unsigned char b = (unsigned char)c->text[i];
    if ((b < 0x20 && b != '\n') || b == 0x7F) {
      fprintf(stderr, "control byte 0x%02x at %zu of:\n%.*s\n", b, i, (int)c->len, c->text);
      abort();
    }
  }
}

/* Runs one human-output command and checks both streams. */
#define RUN_HUMAN(call)                                \
  do {                                                 \
    Capture out_, err_;                                \
    capture_open(&out_);                               \
    capture_open(&err_);                               \
    FILE *out = out_.f, *err = err_.f;                 \
    int rc_ = (call);                                  \
    capture_close(&out_);                              \
    capture_close(&err_);                              \
    CHECK(rc_ == EXIT_SUCCESS || rc_ == EXIT_FAILURE); \
    check_no_controls(&out_);                          \
    check_no_controls(&err_);                          \
    capture_free(&out_);                               \
    capture_free(&err_);                               \
  } while (0)

static uint64_t le(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void cat_npy(const char *path, HurrayReader *r, const char *name) {
  Capture out, err;
  capture_open(&out);
  capture_open(&err);
  int rc = hurray_cli_cat(out.f, err.f, path, name, 0, true, false);
  capture_close(&out);
  capture_close(&err);
  CHECK(rc == EXIT_SUCCESS || rc == EXIT_FAILURE);
  check_no_controls(&err);
  if (rc == EXIT_SUCCESS) {
    const unsigned char *p = (const unsigned char *)out.text;
    CHECK(out.len >= 10 && memcmp(p, "\x93NUMPY\x01\x00", 8) == 0);
    size_t header_len = (size_t)le(p + 8, 2);
    CHECK((10 + header_len) % 64 == 0 && 10 + header_len <= out.len);
    CHECK(p[10 + header_len - 1] == '\n' && p[10] == '{');
    HurrayDescriptor *d = NULL;
    CHECK(hurray_reader_get_descriptor(r, name, &d, NULL) == HURRAY_OK);
    uint64_t numel = 0, bytes = 0;
    CHECK(hurray_descriptor_numel(d, &numel, NULL) == HURRAY_OK);
    CHECK(hurray_dtype_storage_bytes(hurray_descriptor_dtype(d), numel, &bytes) == HURRAY_OK);
    CHECK(out.len - 10 - header_len == bytes);
    hurray_descriptor_destroy(d);
  }
  capture_free(&out);
  capture_free(&err);
}

static void exercise(const char *path) {
  RUN_HUMAN(hurray_cli_ls(out, err, path));
  RUN_HUMAN(hurray_cli_info(out, err, path, NULL, false));
  RUN_HUMAN(hurray_cli_verify(out, err, path));
  {
    Capture out, err;
    capture_open(&out);
    capture_open(&err);
    int rc = hurray_cli_info(out.f, err.f, path, NULL, true);
    capture_close(&out);
    capture_close(&err);
    CHECK(rc == EXIT_SUCCESS || rc == EXIT_FAILURE);
    check_no_controls(&out);
    check_no_controls(&err);
    capture_free(&out);
    capture_free(&err);
  }
  HurrayReader *r = NULL;
  if (hurray_reader_open(path, NULL, &r, NULL) != HURRAY_OK) return;
  size_t n = hurray_reader_tensor_count(r);
  for (size_t i = 0; i < n; i++) {
    if (i >= MAX_CAT_TENSORS && i + 1 < n) i = n - 1;
    const char *name = hurray_reader_tensor_name(r, i);
    cat_npy(path, r, name);
    if (i == 0) {
      RUN_HUMAN(hurray_cli_info(out, err, path, name, false));
      Capture out, err;
      capture_open(&out);
      capture_open(&err);
      int rc = hurray_cli_cat(out.f, err.f, path, name, 0, false, true);
      capture_close(&out);
      capture_close(&err);
      CHECK(rc == EXIT_SUCCESS || rc == EXIT_FAILURE);
      check_no_controls(&err);
      capture_free(&out);
      capture_free(&err);
    }
  }
  hurray_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_memfd_input("hurray-fuzz-cli", data, size);
  exercise(path);
  return 0;
}

#ifdef HURRAY_LIBFUZZER
#  include "fuzz_file_mutator.h"
#endif
