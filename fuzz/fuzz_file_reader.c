/*
 * Fuzz target: a whole file. The input becomes an in-memory file (a memfd);
 * it is opened in MMAP and in PREAD mode (or through the memory byte source,
 * for inputs of odd size), every tensor is read (descriptor,
 * buffers, first and last row, each buffer by pread), verified, and, when
 * small, materialised (to_dense, dequantize); every metadata entry is read
 * through its typed getter. Nothing may crash, hang, leak or allocate by an
 * untrusted size, and the two modes must agree on every status and every
 * byte (compared for the first four tensors of a file); a reader opened with
 * verify_on_open (for one input in four) must succeed exactly when the
 * plain open and a whole-file verify do.
 *
 * Checksums: a mutated file almost never carries valid xxh3 checksums, so
 * byte-level fuzzing alone stops at the trailer. In libFuzzer builds
 * (HURRAY_LIBFUZZER) this file therefore also defines
 * LLVMFuzzerCustomMutator and LLVMFuzzerCustomCrossOver: most mutations
 * re-seal the checksums they break (buffer, index and trailer), some work
 * on the parsed structure (a descriptor, a buffer's bytes, names, metadata,
 * whole entries) and write a fresh, correctly sealed file, and one in eight
 * leaves the bytes unsealed so the checksum checks stay covered. Inputs on
 * disk are therefore ordinary files: replaying one needs no fuzzer-side
 * transformation, and every crash input is a real file that crashes the
 * library.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hurray/hurray.h"
#include "fuzz_check.h"
#include "fuzz_memfd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The size of the file being read. */
static size_t input_size;

/* Tensors up to this many elements are also materialised. */
#define MATERIALISE_MAX_NUMEL (1u << 12)

static bool same_lists(const HurrayBufferList *a, const HurrayBufferList *b) {
  if (hurray_buffer_list_len(a) != hurray_buffer_list_len(b)) return false;
  for (size_t i = 0; i < hurray_buffer_list_len(a); i++) {
    const HurrayBuffer *x = hurray_buffer_list_get(a, i), *y = hurray_buffer_list_get(b, i);
    if (hurray_buffer_size(x) != hurray_buffer_size(y)) return false;
    if (hurray_buffer_size(x) > 0 &&
        memcmp(hurray_buffer_data(x), hurray_buffer_data(y), (size_t)hurray_buffer_size(x)) != 0) {
      return false;
    }
  }
  return true;
}

static void materialise(const HurrayDescriptor *d, const HurrayBufferList *list) {
  uint64_t numel = 0, bytes = 0;
  if (hurray_descriptor_numel(d, &numel, NULL) != HURRAY_OK || numel > MATERIALISE_MAX_NUMEL) {
    return;
  }
  if (hurray_dtype_storage_bytes(hurray_descriptor_dtype(d), numel, &bytes) == HURRAY_OK) {
    void *dense = malloc(bytes ? (size_t)bytes : 1);
    CHECK(dense != NULL);
    (void)hurray_tensor_to_dense(d, list, dense, bytes, NULL);
    free(dense);
  }
  if (hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE) {
    float *out = malloc(numel ? (size_t)numel * sizeof *out : 1);
    CHECK(out != NULL);
    (void)hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, out, numel * sizeof *out, NULL);
    free(out);
  }
}

/* Reads rows [start, start + 1) in both modes (rp may be NULL: MMAP only);
 * both must agree. */
static void rows(HurrayReader *rm, HurrayReader *rp, const char *name, uint64_t start) {
  if (rp == NULL) {
    HurrayDescriptor *d = NULL;
    HurrayBufferList *l = NULL;
    if (hurray_reader_get_rows(rm, name, start, 1, &d, &l, NULL) == HURRAY_OK) {
      hurray_buffer_list_destroy(l);
      hurray_descriptor_destroy(d);
    }
    return;
  }
  HurrayDescriptor *dm = NULL, *dp = NULL;
  HurrayBufferList *lm = NULL, *lp = NULL;
  HurrayStatus sm = hurray_reader_get_rows(rm, name, start, 1, &dm, &lm, NULL);
  HurrayStatus sp = hurray_reader_get_rows(rp, name, start, 1, &dp, &lp, NULL);
  CHECK(sm == sp);
  if (sm == HURRAY_OK) {
    CHECK(hurray_descriptor_equal(dm, dp));
    CHECK(same_lists(lm, lp));
  }
  hurray_buffer_list_destroy(lm);
  hurray_buffer_list_destroy(lp);
  hurray_descriptor_destroy(dm);
  hurray_descriptor_destroy(dp);
}

/* Reads tensor `name` every way there is. The PREAD reader rp is compared
 * for the first few tensors of a file only (and rows in it only for the
 * first), which keeps large inputs cheap. */
static void tensor(HurrayReader *rm, HurrayReader *rp, const char *name, size_t index) {
  HurrayDescriptor *dm = NULL, *dp = NULL, *only = NULL;
  HurrayBufferList *lm = NULL, *lp = NULL;
  HurrayStatus s_only = hurray_reader_get_descriptor(rm, name, &only, NULL);
  if (index >= 4) rp = NULL;
  HurrayStatus sm = hurray_reader_get_tensor(rm, name, &dm, &lm, NULL);
  if (rp != NULL) {
    HurrayStatus sp = hurray_reader_get_tensor(rp, name, &dp, &lp, NULL);
    CHECK(sm == sp);
    if (sm == HURRAY_OK) {
      CHECK(hurray_descriptor_equal(dm, dp));
      CHECK(same_lists(lm, lp));
    }
  }
  if (sm == HURRAY_OK) {
    CHECK(s_only == HURRAY_OK && hurray_descriptor_equal(only, dm));
    materialise(dm, lm);
  }
  uint64_t rows_total = 0;
  if (s_only == HURRAY_OK && hurray_descriptor_rank(only) > 0) {
    rows_total = hurray_descriptor_shape(only)[0];
  }
  hurray_descriptor_destroy(only);
  hurray_buffer_list_destroy(lm);
  hurray_buffer_list_destroy(lp);
  hurray_descriptor_destroy(dm);
  hurray_descriptor_destroy(dp);

  rows(rm, index == 0 ? rp : NULL, name, 0);
  if (rows_total > 1) rows(rm, NULL, name, rows_total - 1);

  /* Each buffer (and one past the last) by pread into caller memory. */
  for (uint32_t k = 0; k < 1025; k++) {
    uint8_t probe;
    HurrayStatus s = hurray_reader_read_buffer(rm, name, k, &probe, 0, NULL);
    if (s == HURRAY_ERR_INVALID_ARGUMENT) break; /* past the last buffer */
    if (s == HURRAY_OK) continue;                /* an empty buffer */
    CHECK(s == HURRAY_ERR_BUFFER_SIZE);
    /* The real length is bounded by the file (the reader checked the
     * range on open), so a destination of the file's size is enough. */
    size_t cap = input_size ? input_size : 1;
    uint8_t *dst = malloc(cap);
    CHECK(dst != NULL);
    s = hurray_reader_read_buffer(rm, name, k, dst, cap, NULL);
    CHECK(s == HURRAY_OK || s == HURRAY_ERR_BUFFER_SIZE);
    /* The same buffer as spans: its first byte agrees, a span past any
     * end is refused, an empty one reads nothing. */
    size_t ti = 0;
    CHECK(hurray_reader_find(rm, name, &ti, NULL) == HURRAY_OK);
    uint8_t first = 0;
    HurrayReadSpan spans[2] = {{ti, k, 0, 0, NULL}, {ti, k, 0, 1, &first}};
    HurrayStatus spanned = hurray_reader_read_spans(rm, spans, 2, 2, NULL);
    CHECK(spanned == HURRAY_OK || spanned == HURRAY_ERR_RANGE || spanned == HURRAY_ERR_TRUNCATED ||
          spanned == HURRAY_ERR_IO);
    if (spanned == HURRAY_OK && s == HURRAY_OK) CHECK(first == dst[0]);
    spans[1].offset = UINT64_MAX;
    CHECK(hurray_reader_read_spans(rm, spans, 2, 2, NULL) == HURRAY_ERR_RANGE);
    free(dst);
  }
  HurrayStatus verified = hurray_reader_verify(rm, name, NULL);
  if (rp != NULL) CHECK(verified == hurray_reader_verify(rp, name, NULL));
}

static void metadata(HurrayReader *rm, HurrayReader *rp) {
  CHECK(hurray_reader_metadata_count(rm) == hurray_reader_metadata_count(rp));
  for (size_t i = 0; i < hurray_reader_metadata_count(rm); i++) {
    const char *key = hurray_reader_metadata_key(rm, i);
    CHECK(key != NULL && strcmp(key, hurray_reader_metadata_key(rp, i)) == 0);
    CHECK(hurray_reader_metadata_type(rm, i) == hurray_reader_metadata_type(rp, i));
    const uint8_t *bm = NULL, *bp = NULL;
    size_t lm = 0, lp = 0;
    HurrayStatus sm = hurray_reader_metadata_bytes(rm, key, &bm, &lm, NULL);
    HurrayStatus sp = hurray_reader_metadata_bytes(rp, key, &bp, &lp, NULL);
    CHECK(sm == sp);
    if (sm == HURRAY_OK) CHECK(lm == lp && (lm == 0 || memcmp(bm, bp, lm) == 0));
    const char *str = NULL;
    if (hurray_reader_metadata_string(rm, key, &str, NULL) == HURRAY_OK) {
      CHECK(str != NULL);
      (void)strlen(str);
    }
    int64_t iv;
    double fv;
    bool bv;
    (void)hurray_reader_metadata_int(rm, key, &iv, NULL);
    (void)hurray_reader_metadata_float(rm, key, &fv, NULL);
    (void)hurray_reader_metadata_bool(rm, key, &bv, NULL);
  }
}

/* The copied-mode reader: PREAD for even sizes, the memory byte source
 * (include/hurray/byte_source.h) over the same bytes for odd ones, so the
 * source path meets every input the file path meets, and must agree. */
static HurrayStatus open_copied(const char *path, const uint8_t *data, size_t size,
                                const HurrayReaderOptions *op, HurrayReader **rp) {
  if (size % 2 == 0) return hurray_reader_open(path, op, rp, NULL);
  HurrayByteSource source;
  CHECK(hurray_byte_source_memory(data, size, &source, NULL) == HURRAY_OK);
  return hurray_reader_open_byte_source(&source, op, rp, NULL);
}

static void exercise(const char *path, const uint8_t *data, size_t size) {
  HurrayReaderOptions om = HURRAY_READER_OPTIONS_INIT, op = HURRAY_READER_OPTIONS_INIT,
                      ov = HURRAY_READER_OPTIONS_INIT;
  op.mode = HURRAY_READ_PREAD;
  ov.verify_on_open = true;
  HurrayReader *rm = NULL, *rp = NULL, *rv = NULL;
  HurrayStatus sm = hurray_reader_open(path, &om, &rm, NULL);
  HurrayStatus sp = open_copied(path, data, size, &op, &rp);
  CHECK(sm == sp);
  /* verify_on_open for a quarter of the inputs (it re-reads everything). */
  bool check_open_verify = input_size % 4 == 0;
  HurrayStatus sv = HURRAY_OK;
  if (check_open_verify) {
    sv = hurray_reader_open(path, &ov, &rv, NULL);
    hurray_reader_close(rv);
  }
  if (sm != HURRAY_OK) {
    CHECK(!check_open_verify || sv == sm);
    return;
  }
  CHECK(hurray_reader_tensor_count(rm) == hurray_reader_tensor_count(rp));
  for (size_t i = 0; i < hurray_reader_tensor_count(rm); i++) {
    const char *name = hurray_reader_tensor_name(rm, i);
    size_t found = SIZE_MAX;
    CHECK(name != NULL && strcmp(name, hurray_reader_tensor_name(rp, i)) == 0);
    CHECK(hurray_reader_find(rm, name, &found, NULL) == HURRAY_OK && found == i);
    tensor(rm, rp, name, i);
  }
  size_t at = SIZE_MAX;
  HurrayStatus absent = hurray_reader_find(rm, "\x7f no such tensor", &at, NULL);
  CHECK(absent == HURRAY_ERR_NOT_FOUND ||
        (absent == HURRAY_OK &&
         strcmp(hurray_reader_tensor_name(rm, at), "\x7f no such tensor") == 0));
  metadata(rm, rp);
  HurrayStatus verified = hurray_reader_verify(rm, NULL, NULL);
  CHECK(verified == hurray_reader_verify(rp, NULL, NULL));
  CHECK(!check_open_verify || sv == verified);
  hurray_reader_close(rm);
  hurray_reader_close(rp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_memfd_input("hurray-fuzz", data, size);
  input_size = size;
  exercise(path, data, size);
  return 0;
}

#ifdef HURRAY_LIBFUZZER
#  include "fuzz_file_mutator.h"
#endif
