/*
 * The body shared by fuzz_safetensors.c and fuzz_gguf.c: the input is a
 * whole file of FUZZ_FORMAT. It is parsed from memory; every tensor is read
 * as a hurray tensor (views, GGUF blocks re-laid out) and written to a
 * hurray file through a discarding callback writer, with every metadata
 * entry. When it parses, it is also written back in its own format through
 * a HurrayTarget (a file under /dev/shm or TMPDIR), that file must parse
 * with the same tensors (bytes equal) and, converted once more, give the
 * same bytes again (the writer is a fixed point). Nothing may crash, leak,
 * hang or allocate by an untrusted size.
 */
#ifndef HURRAY_FUZZ_FORMATS_COMMON_H
#define HURRAY_FUZZ_FORMATS_COMMON_H

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hurray/hurray.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static HurrayStatus discard(void *ctx, const void *data, size_t len) {
  (void)ctx;
  (void)data;
  (void)len;
  return HURRAY_OK;
}

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc((size_t)n + 1);
  CHECK(p != NULL && fread(p, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return p;
}

/* Writes every tensor and metadata entry of `s` to a foreign target at
 * `path`; HURRAY_OK, or the status the target refused with (its message in
 * `why`, when given). */
static HurrayStatus rewrite_why(HurraySource *s, const char *path, HurrayError *why) {
  HurrayError local = {0};
  HurrayError *e_out = why != NULL ? why : &local;
  HurrayError e = {0};
  HurrayTarget *t = NULL;
  CHECK(hurray_target_open(path, FUZZ_FORMAT, &t, &e) == HURRAY_OK);
  HurrayStatus st = HURRAY_OK;
  for (size_t i = 0; st == HURRAY_OK && i < hurray_source_metadata_count(s); i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    CHECK(hurray_source_metadata(s, i, &key, &type, &value, &len, &e) == HURRAY_OK);
    st = hurray_target_set_metadata(t, key, type, value, len, &e);
  }
  for (size_t i = 0; st == HURRAY_OK && i < hurray_source_tensor_count(s); i++) {
    HurrayDescriptor *d = NULL;
    HurrayBufferList *l = NULL;
    st = hurray_source_get_tensor(s, i, &d, &l, &e);
    if (st == HURRAY_OK)
      st = hurray_target_add_tensor(t, hurray_source_tensor_name(s, i), d, l, &e);
  }
  if (st == HURRAY_OK) st = hurray_target_finish(t, &e);
  else hurray_target_abort(t);
  *e_out = e;
  return st;
}

static HurrayStatus rewrite(HurraySource *s, const char *path) {
  return rewrite_why(s, path, NULL);
}

/* What a target refuses to publish though the source parses: a tensor GGUF
 * cannot hold (rank 0, UNSUPPORTED), a bool element other than 0 or 1, a
 * GGUF tensor name past ggml's 63 bytes. */
static bool refused_to_publish(HurrayStatus st, const HurrayError *e) {
  return st == HURRAY_ERR_UNSUPPORTED ||
         (st == HURRAY_ERR_INVALID_ARGUMENT && (strstr(e->message, "bool element") != NULL ||
                                                strstr(e->message, "GGUF readers") != NULL));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  HurrayError e = {0};
  HurraySource *s = NULL;
  if (hurray_source_open_memory(data, size, FUZZ_FORMAT, &s, &e) != HURRAY_OK) {
    CHECK(e.message[0] != '\0' && strchr(e.message, '\n') == NULL);
    return 0;
  }
  HurrayWriter *w = NULL;
  CHECK(hurray_writer_open_callback(discard, NULL, &w, &e) == HURRAY_OK);
  bool all_supported = true;
  for (size_t i = 0; i < hurray_source_tensor_count(s); i++) {
    CHECK(hurray_source_tensor_name(s, i) != NULL && hurray_source_tensor_type(s, i) != NULL);
    (void)hurray_source_tensor_bytes(s, i);
    if (hurray_source_check_tensor(s, i, &e) != HURRAY_OK) {
      all_supported = false;
      continue;
    }
    HurrayDescriptor *d = NULL;
    HurrayBufferList *l = NULL;
    if (hurray_source_get_tensor(s, i, &d, &l, &e) != HURRAY_OK) {
      all_supported = false;
      continue;
    }
    (void)hurray_writer_write_tensor(w, hurray_source_tensor_name(s, i), d, l, &e);
    /* Quantized tensors (GGUF's block-coded types above all) dequantize:
     * the kernels see the fuzzed blocks. */
    uint64_t numel = 0;
    if (hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE &&
        hurray_descriptor_numel(d, &numel, NULL) == HURRAY_OK && numel <= (1u << 16)) {
      float *out = malloc(numel ? (size_t)numel * sizeof *out : 1);
      CHECK(out != NULL);
      CHECK(hurray_dequantize(d, l, HURRAY_DTYPE_FLOAT32, 1, out, numel * sizeof *out, &e) ==
            HURRAY_OK);
      free(out);
    }
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(l);
  }
  for (size_t i = 0; i < hurray_source_metadata_count(s); i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    CHECK(hurray_source_metadata(s, i, &key, &type, &value, &len, &e) == HURRAY_OK);
    switch (type) {
      case HURRAY_METADATA_STRING:
        (void)hurray_writer_set_metadata_string(w, key, value, &e);
        break;
      case HURRAY_METADATA_INT:
        (void)hurray_writer_set_metadata_int(w, key, *(const int64_t *)value, &e);
        break;
      case HURRAY_METADATA_FLOAT:
        (void)hurray_writer_set_metadata_float(w, key, *(const double *)value, &e);
        break;
      case HURRAY_METADATA_BOOL:
        (void)hurray_writer_set_metadata_bool(w, key, *(const bool *)value, &e);
        break;
      default: (void)hurray_writer_set_metadata_bytes(w, key, value, len, &e); break;
    }
  }
  (void)hurray_writer_finish(w, &e);

  if (all_supported) {
    static char a[256], b[256];
    if (a[0] == '\0') {
      const char *dir = access("/dev/shm", W_OK) == 0
                            ? "/dev/shm"
                            : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
      snprintf(a, sizeof a, "%s/hurray-fuzz-%d-a%s", dir, (int)getpid(), FUZZ_SUFFIX);
      snprintf(b, sizeof b, "%s/hurray-fuzz-%d-b%s", dir, (int)getpid(), FUZZ_SUFFIX);
    }
    HurrayError why = {0};
    HurrayStatus rw = rewrite_why(s, a, &why);
    CHECK(rw == HURRAY_OK || refused_to_publish(rw, &why));
    if (rw == HURRAY_OK) {
      HurraySource *s2 = NULL;
      HurrayStatus st = hurray_source_open(a, FUZZ_FORMAT, NULL, &s2, &e);
      if (st != HURRAY_OK) fprintf(stderr, "re-read: %s\n", e.message);
      CHECK(st == HURRAY_OK);
      CHECK(hurray_source_tensor_count(s2) == hurray_source_tensor_count(s));
      for (size_t i = 0; i < hurray_source_tensor_count(s2); i++) {
        const char *name = hurray_source_tensor_name(s2, i);
        size_t j = 0;
        while (j < hurray_source_tensor_count(s) && strcmp(hurray_source_tensor_name(s, j), name))
          j++;
        CHECK(j < hurray_source_tensor_count(s));
        HurrayDescriptor *d1 = NULL, *d2 = NULL;
        HurrayBufferList *l1 = NULL, *l2 = NULL;
        CHECK(hurray_source_get_tensor(s, j, &d1, &l1, &e) == HURRAY_OK);
        CHECK(hurray_source_get_tensor(s2, i, &d2, &l2, &e) == HURRAY_OK);
        CHECK(hurray_buffer_list_len(l1) == hurray_buffer_list_len(l2));
        for (size_t k = 0; k < hurray_buffer_list_len(l1); k++) {
          const HurrayBuffer *x = hurray_buffer_list_get(l1, k),
                             *y = hurray_buffer_list_get(l2, k);
          CHECK(hurray_buffer_size(x) == hurray_buffer_size(y));
          CHECK(hurray_buffer_size(x) == 0 ||
                memcmp(hurray_buffer_data(x), hurray_buffer_data(y), hurray_buffer_size(x)) == 0);
        }
        hurray_descriptor_destroy(d1);
        hurray_descriptor_destroy(d2);
        hurray_buffer_list_destroy(l1);
        hurray_buffer_list_destroy(l2);
      }
      CHECK(rewrite(s2, b) == HURRAY_OK);
      hurray_source_close(s2);
      size_t na, nb;
      char *pa = read_all(a, &na), *pb = read_all(b, &nb);
      CHECK(na == nb && memcmp(pa, pb, na) == 0);
      free(pa);
      free(pb);
      unlink(a);
      unlink(b);
    }
  }
  hurray_source_close(s);
  return 0;
}

#endif
