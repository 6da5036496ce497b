/*
 * Allocation failure, SQLite style. Linked against the static library with
 * -Wl,--wrap for every allocator (tests/c/meson.build), so each allocation
 * of the library and of the yajl inside it goes through the wrappers below.
 * For each operation, allocation N fails, for N = 1, 2, ... until a run
 * makes no failed allocation: every run must return NO_MEMORY (with the
 * error filled in) or succeed with the fault-free result; never crash,
 * leak or free twice (run under ASan by make test-asan).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "scratch_dir.h"
#include "test_util.h"

static long calls, fail_at;
static bool armed, failed;

static bool fail_now(void) {
  if (!armed || ++calls != fail_at) return false;
  failed = true;
  errno = ENOMEM;
  return true;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
char *__wrap_strdup(const char *s);

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fail_now() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t align, size_t n) {
  return fail_now() ? NULL : __real_aligned_alloc(align, n);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
  return fail_now() ? ENOMEM : __real_posix_memalign(p, align, n);
}
char *__wrap_strdup(const char *s) { return fail_now() ? NULL : __real_strdup(s); }

/* One operation under test: returns its status; on HURRAY_OK, `result`
 * (64 bytes) describes what it produced, compared with the fault-free run. */
typedef HurrayStatus (*Operation)(char *result, HurrayError *error);

/* Runs `op` with allocation N failing for N = 1, 2, ... */
static void sweep(const char *what, Operation op) {
  char expected[64] = {0};
  HurrayError err = {0};
  assert_int_equal(op(expected, &err), HURRAY_OK);
  long n = 1;
  for (;; n++) {
    char result[64] = {0};
    HurrayError e = {0};
    calls = 0;
    fail_at = n;
    failed = false;
    armed = true;
    HurrayStatus status = op(result, &e);
    armed = false;
    if (status != HURRAY_OK) {
      if (status != HURRAY_ERR_NO_MEMORY || e.code != status || e.message[0] == '\0') {
        fail_msg("%s, allocation %ld failing: %s: %s", what, n, hurray_status_name(status),
                 e.message);
      }
    } else if (strcmp(result, expected) != 0) {
      fail_msg("%s, allocation %ld failing: OK with '%s', not '%s'", what, n, result, expected);
    }
    if (!failed) break;
  }
  printf("%s: %ld allocations, each failed once\n", what, n - 1);
}

static const float values[6] = {1, -2, 0, 4, 5, 6};

static HurrayStatus write_file_with(const char *path, bool statistics, const char *order,
                                    HurrayError *error) {
  HurrayWriter *w = NULL;
  HurrayStatus s = hurray_writer_open(path, &w, error);
  if (s == HURRAY_OK && statistics) s = hurray_writer_set_statistics(w, true, error);
  if (s == HURRAY_OK && order != NULL) {
    s = hurray_writer_set_metadata_string(w, "gguf.__tensors__", order, error);
    /* a safetensors header that grows several times as it is written */
    char note[1000];
    memset(note, 'x', sizeof note - 1);
    note[sizeof note - 1] = 0;
    if (s == HURRAY_OK) s = hurray_writer_set_metadata_string(w, "safetensors.note", note, error);
  }
  HurrayDenseTensor t[2] = {{"a", HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){6}, values, 24},
                            {"b", HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 3}, values, 24}};
  if (s == HURRAY_OK) s = hurray_writer_write_dense_batch(w, t, 2, NULL, error);
  if (s == HURRAY_OK) return hurray_writer_finish(w, error);
  hurray_writer_abort(w);
  return s;
}

/* Statistics are written, or the write fails: never dropped. */
static HurrayStatus write_with_statistics(char *result, HurrayError *e) {
  char path[300];
  in_dir(path, sizeof path, "stats.hurray");
  HurrayStatus s = write_file_with(path, true, NULL, e);
  if (s != HURRAY_OK) return s;
  armed = false;
  HurrayReader *r = NULL;
  HurrayDescriptor *d = NULL;
  double min = 0;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  assert_ok(hurray_reader_get_descriptor(r, "b", &d, error));
  snprintf(result, 64, "min %s %g", hurray_descriptor_stat_min(d, &min) ? "present" : "missing",
           min);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
  return HURRAY_OK;
}

static void test_writer_statistics(void **state) {
  (void)state;
  sweep("writer with statistics", write_with_statistics);
}

static void names_of(HurraySource *src, char *result) {
  result[0] = 0;
  for (size_t i = 0; i < hurray_source_tensor_count(src); i++) {
    strcat(result, hurray_source_tensor_name(src, i));
    strcat(result, " ");
  }
}

/* ordered.hurray converted to `name`, in `format`; the result is the
 * target's tensor names in order. */
static HurrayStatus convert_to(const char *name, HurrayFormat format, char *result,
                               HurrayError *e) {
  char in[300], out[300];
  in_dir(in, sizeof in, "ordered.hurray");
  in_dir(out, sizeof out, name);
  HurrayStatus s = hurray_convert_file(in, out, NULL, e);
  if (s != HURRAY_OK) return s;
  armed = false;
  HurraySource *src = NULL;
  assert_ok(hurray_source_open(out, format, NULL, &src, error));
  names_of(src, result);
  hurray_source_close(src);
  return HURRAY_OK;
}

/* The GGUF target keeps gguf.__tensors__'s order (parsed as JSON by yajl). */
static HurrayStatus convert_to_gguf(char *result, HurrayError *e) {
  return convert_to("ordered.gguf", HURRAY_FORMAT_GGUF, result, e);
}

/* The safetensors target pads its header to 8 bytes: out of memory, the
 * padding loop spun forever (an append is a no-op then). */
static HurrayStatus convert_to_safetensors(char *result, HurrayError *e) {
  return convert_to("ordered.safetensors", HURRAY_FORMAT_SAFETENSORS, result, e);
}

static void test_convert_json_metadata(void **state) {
  (void)state;
  sweep("hurray to GGUF, tensor order from JSON", convert_to_gguf);
  sweep("hurray to safetensors", convert_to_safetensors);
}

/* A safetensors header goes through yajl. */
static HurrayStatus read_safetensors(char *result, HurrayError *e) {
  static const char file[] =
      "\x4f\0\0\0\0\0\0\0"
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"__metadata__\":{\"k\":"
      "\"v\"}}"
      "\0\0\x80\x3f\0\0\0\x40";
  HurraySource *src = NULL;
  HurrayStatus s = hurray_source_open_memory(file, sizeof file - 1, HURRAY_FORMAT_SAFETENSORS,
                                             &src, e);
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  if (s == HURRAY_OK) s = hurray_source_get_tensor(src, 0, &d, &list, e);
  if (s == HURRAY_OK) {
    float f[2]; /* the file's bytes may sit at any address */
    memcpy(f, hurray_buffer_data(hurray_buffer_list_get(list, 0)), sizeof f);
    snprintf(result, 64, "%s = %g %g", hurray_source_tensor_name(src, 0), f[0], f[1]);
  }
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(list);
  hurray_source_close(src);
  return s;
}

static void test_safetensors_header(void **state) {
  (void)state;
  sweep("safetensors header", read_safetensors);
}

/* Buffers read through a byte source are allocated, then handed to
 * hurray_buffer_create, which releases them itself when it fails. The
 * bytes of source.hurray, read by setup. */
static uint8_t *file_bytes;
static size_t file_len;

static HurrayStatus read_byte_source(char *result, HurrayError *e) {
  HurrayByteSource source;
  HurrayReader *r = NULL;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayStatus s = hurray_byte_source_memory(file_bytes, file_len, &source, e);
  if (s == HURRAY_OK) s = hurray_reader_open_byte_source(&source, NULL, &r, e);
  if (s == HURRAY_OK) s = hurray_reader_get_tensor(r, "b", &d, &list, e);
  if (s == HURRAY_OK) {
    const float *f = hurray_buffer_data(hurray_buffer_list_get(list, 0));
    snprintf(result, 64, "%g %g %g", f[0], f[1], f[5]);
  }
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(list);
  hurray_reader_close(r);
  return s;
}

static void test_byte_source_reader(void **state) {
  (void)state;
  sweep("byte-source reader", read_byte_source);
}

/* A hurray source names its tensors through the reader's copies of the
 * names; without memory for them it must fail (at open), not name a tensor
 * NULL, verify every tensor or look up a NULL name. */
static HurrayStatus read_hurray_source(char *result, HurrayError *e) {
  char path[300];
  in_dir(path, sizeof path, "source.hurray");
  HurraySource *src = NULL;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayStatus s = hurray_source_open(path, HURRAY_FORMAT_HURRAY, NULL, &src, e);
  const char *name = s == HURRAY_OK ? hurray_source_tensor_name(src, 1) : NULL;
  if (s == HURRAY_OK) s = hurray_source_get_descriptor(src, 1, &d, e);
  hurray_descriptor_destroy(d);
  d = NULL;
  if (s == HURRAY_OK) s = hurray_source_get_tensor(src, 1, &d, &list, e);
  if (s == HURRAY_OK) {
    snprintf(result, 64, "%s: rank %u", name != NULL ? name : "(no name)",
             hurray_descriptor_rank(d));
  }
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(list);
  hurray_source_close(src);
  return s;
}

static void test_hurray_source(void **state) {
  (void)state;
  sweep("hurray source", read_hurray_source);
}

/* The inputs, written with no allocation failing: source.hurray (its bytes
 * kept for the byte source) and ordered.hurray, whose metadata the targets
 * read. */
static int setup(void **state) {
  (void)state;
  char source[300], ordered[300];
  HurrayError err = {0};
  if (scratch_dir_create("oom") != 0) return -1;
  in_dir(source, sizeof source, "source.hurray");
  in_dir(ordered, sizeof ordered, "ordered.hurray");
  if (write_file_with(source, false, NULL, &err) != HURRAY_OK ||
      write_file_with(ordered, false, "[\"b\", \"a\"]", &err) != HURRAY_OK) {
    return -1;
  }
  file_bytes = read_file(source, &file_len);
  return file_bytes != NULL ? 0 : -1;
}

static int teardown(void **state) {
  free(file_bytes);
  return scratch_dir_remove(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_writer_statistics),  cmocka_unit_test(test_convert_json_metadata),
      cmocka_unit_test(test_safetensors_header), cmocka_unit_test(test_byte_source_reader),
      cmocka_unit_test(test_hurray_source),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
