/*
 * What bindings build on: the writer's cancel hook (hurray_writer_set_cancel)
 * and the errno in HurrayError.os_errno. A cancelled write stops within one
 * HURRAY_WRITER_CANCEL_INTERVAL, leaves a path target byte-identical with no
 * temporary file beside it, and a cancel that comes after the last byte
 * (before the rename) still keeps the target. The reader's hook
 * (HurrayReaderOptions.cancel, version 2) stops a long read or verify
 * within one HURRAY_READER_CANCEL_INTERVAL and hands nothing out.
 * File-system failures carry the errno of the call that failed; other
 * failures carry 0.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scratch_dir.h"
#include "test_util.h"

typedef struct Counter {
  unsigned calls;
  unsigned cancel_at; /* the call that answers true; 0: never */
} Counter;

static bool count_and_cancel(void *ctx) {
  Counter *c = ctx;
  c->calls++;
  return c->cancel_at != 0 && c->calls >= c->cancel_at;
}

typedef struct Sink {
  size_t bytes;
  size_t calls;
} Sink;

static HurrayStatus counting_sink(void *ctx, const void *data, size_t len) {
  (void)data;
  Sink *s = ctx;
  s->bytes += len;
  s->calls++;
  return HURRAY_OK;
}

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("io-hooks");
}

#define BIG ((size_t)3 * HURRAY_WRITER_CANCEL_INTERVAL + 5)

static uint8_t *big_data;

/* Writes one BIG uint8 tensor and one small one. */
static HurrayStatus write_two(HurrayWriter *w, HurrayError *e) {
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  HurrayStatus s = hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){BIG}, &d, e);
  if (s == HURRAY_OK)
    s = hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, BIG, 64, HURRAY_SYNC_READY, NULL, e);
  if (s == HURRAY_OK) s = hurray_buffer_list_create(&list, e);
  if (s == HURRAY_OK) s = hurray_buffer_create(big_data, BIG, NULL, NULL, &b, e);
  if (s == HURRAY_OK) s = hurray_buffer_set_alignment(b, 64, e);
  if (s == HURRAY_OK) {
    s = hurray_buffer_list_push(list, b, e);
    b = NULL;
  }
  if (s == HURRAY_OK) s = hurray_writer_write_tensor(w, "big", d, list, e);
  hurray_buffer_destroy(b);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  return s;
}

static int count_entries(void) {
  DIR *dp = opendir(dir);
  int n = 0;
  struct dirent *ent;
  while ((ent = readdir(dp)) != NULL) {
    if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0) n++;
  }
  closedir(dp);
  return n;
}

static void write_old(const char *path) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("old contents", f);
  fclose(f);
}

static void assert_old(const char *path) {
  char buf[64] = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_int_equal(n, strlen("old contents"));
  assert_memory_equal(buf, "old contents", n);
  assert_int_equal(count_entries(), 1);
}

/* Without a hook (or with one that never cancels) nothing changes, and a
 * large buffer is asked about once per interval. */
static void test_hook_asked_per_interval(void **state) {
  (void)state;
  Sink sink = {0};
  Counter c = {0};
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open_callback(counting_sink, &sink, &w, error));
  assert_ok(hurray_writer_set_cancel(w, count_and_cancel, &c, error));
  assert_ok(write_two(w, error));
  assert_true(c.calls >= 4); /* BIG spans four pieces */
  assert_true(sink.bytes > BIG);
  assert_ok(hurray_writer_finish(w, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_writer_set_cancel(NULL, NULL, NULL, error));
}

/* Cancelled in the middle of the big buffer: the write stops there. */
static void test_cancel_mid_buffer_keeps_target(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/target.hurray", dir);
  write_old(path);
  Counter c = {.cancel_at = 3};
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  assert_ok(hurray_writer_set_cancel(w, count_and_cancel, &c, error));
  assert_status(HURRAY_ERR_CANCELLED, write_two(w, error));
  assert_int_equal(c.calls, 3); /* not asked again once it said yes */
  assert_status(HURRAY_ERR_STATE, hurray_writer_finish(w, error));
  assert_old(path);

  /* A callback sink gets at most the pieces before the cancel. */
  Sink sink = {0};
  Counter c2 = {.cancel_at = 3};
  assert_ok(hurray_writer_open_callback(counting_sink, &sink, &w, error));
  assert_ok(hurray_writer_set_cancel(w, count_and_cancel, &c2, error));
  assert_status(HURRAY_ERR_CANCELLED, write_two(w, error));
  assert_true(sink.bytes < BIG);
  hurray_writer_abort(w);
}

/* Every byte written, the cancel comes at the last check (after the fsync,
 * before the rename): the target is still untouched. */
static void test_cancel_before_rename(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/target.hurray", dir);
  write_old(path);
  /* The checks inside the big buffer come one per write, and the write
   * sizes are measured per file (write_pieces.h): fixed here, so that both
   * writes ask the same number of times. */
  assert_int_equal(setenv("HURRAY_WRITE_FOLIOS", "small", 1), 0);
  /* First count the checks of a full write, then cancel at the last. */
  Counter probe = {0};
  Sink sink = {0};
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  assert_ok(hurray_writer_set_cancel(w, count_and_cancel, &probe, error));
  assert_ok(write_two(w, error));
  assert_ok(hurray_writer_finish(w, error));
  (void)sink;
  write_old(path);
  Counter c = {.cancel_at = probe.calls};
  assert_ok(hurray_writer_open(path, &w, error));
  assert_ok(hurray_writer_set_cancel(w, count_and_cancel, &c, error));
  assert_ok(write_two(w, error));
  assert_status(HURRAY_ERR_CANCELLED, hurray_writer_finish(w, error));
  assert_int_equal(unsetenv("HURRAY_WRITE_FOLIOS"), 0);
  assert_old(path);
  assert_string_equal(hurray_status_name(HURRAY_ERR_CANCELLED), "HURRAY_ERR_CANCELLED");
}

/* A file of write_two's tensors at dir/read.hurray. */
static void write_read_file(char *path, size_t size) {
  snprintf(path, size, "%s/read.hurray", dir);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  assert_ok(write_two(w, error));
  assert_ok(hurray_writer_finish(w, error));
}

static HurrayReaderOptions cancelling(HurrayReadMode mode, Counter *c) {
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = mode;
  options.cancel = count_and_cancel;
  options.cancel_ctx = c;
  return options;
}

/* dir/read.hurray, written afresh, opened in `mode` with `c` as its hook. */
static HurrayReader *open_counted(char *path, size_t size, HurrayReadMode mode, Counter *c) {
  write_read_file(path, size);
  HurrayReaderOptions options = cancelling(mode, c);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, &options, &r, error));
  return r;
}

/* Through pread, the hook is asked before each 16 MiB read: three times
 * for a buffer of BIG bytes; a cancel at the second hands nothing out. */
static void test_reader_cancel_during_read(void **state) {
  (void)state;
  char path[300];
  Counter c = {0};
  HurrayReader *r = open_counted(path, sizeof path, HURRAY_READ_PREAD, &c);
  assert_int_equal(c.calls, 0); /* open reads the index alone */
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_reader_get_tensor(r, "big", &d, &list, error));
  assert_int_equal(c.calls, 3);
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(list);
  c = (Counter){.cancel_at = 2};
  d = (HurrayDescriptor *)&c; /* must come back NULL */
  list = (HurrayBufferList *)&c;
  assert_status(HURRAY_ERR_CANCELLED, hurray_reader_get_tensor(r, "big", &d, &list, error));
  assert_null(d);
  assert_null(list);
  assert_int_equal(c.calls, 2);
  hurray_reader_close(r);
}

/* verify asks before each round, and through pread every interval too;
 * verify_on_open too. With several hashing threads the calling thread
 * alone asks, for the bytes they all read. A mapped reader reads by pread
 * where the page cache makes mapping dear (reader.c), so it is asked at
 * least about its one round. */
static void test_reader_cancel_during_verify(void **state) {
  (void)state;
  char path[300];
  Counter c = {0};
  assert_int_equal(setenv("HURRAY_HASH_THREADS", "1", 1), 0);
  HurrayReader *r = open_counted(path, sizeof path, HURRAY_READ_PREAD, &c);
  assert_ok(hurray_reader_verify(r, NULL, error));
  unsigned full = c.calls;
  assert_true(full >= 1 + BIG / HURRAY_READER_CANCEL_INTERVAL);
  c = (Counter){.cancel_at = 2};
  assert_status(HURRAY_ERR_CANCELLED, hurray_reader_verify(r, NULL, error));
  assert_int_equal(c.calls, 2);
  hurray_reader_close(r);

  HurrayReaderOptions options = cancelling(HURRAY_READ_PREAD, &c);
  options.verify_on_open = true;
  c = (Counter){.cancel_at = full};
  r = (HurrayReader *)&c;
  assert_status(HURRAY_ERR_CANCELLED, hurray_reader_open(path, &options, &r, error));
  assert_null(r);

  assert_int_equal(setenv("HURRAY_HASH_THREADS", "2", 1), 0);
  options = cancelling(HURRAY_READ_PREAD, &c);
  c = (Counter){0};
  assert_ok(hurray_reader_open(path, &options, &r, error));
  assert_ok(hurray_reader_verify(r, NULL, error));
  assert_true(c.calls >= 2);
  c = (Counter){.cancel_at = 2};
  assert_status(HURRAY_ERR_CANCELLED, hurray_reader_verify(r, NULL, error));
  assert_int_equal(c.calls, 2);
  hurray_reader_close(r);

  options = cancelling(HURRAY_READ_MMAP, &c);
  c = (Counter){0};
  assert_ok(hurray_reader_open(path, &options, &r, error));
  assert_ok(hurray_reader_verify(r, NULL, error));
  assert_true(c.calls >= 1);
  c = (Counter){.cancel_at = 1};
  assert_status(HURRAY_ERR_CANCELLED, hurray_reader_verify(r, NULL, error));
  assert_int_equal(c.calls, 1);
  hurray_reader_close(r);
  assert_int_equal(unsetenv("HURRAY_HASH_THREADS"), 0);
}

/* A version 1 struct has no cancel fields: they are not read. */
static void test_reader_options_version_1(void **state) {
  (void)state;
  char path[300];
  write_read_file(path, sizeof path);
  Counter c = {.cancel_at = 1};
  HurrayReaderOptions options = cancelling(HURRAY_READ_PREAD, &c);
  options.version = 1;
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, &options, &r, error));
  assert_ok(hurray_reader_verify(r, NULL, error));
  assert_int_equal(c.calls, 0);
  hurray_reader_close(r);
  options.version = HURRAY_READER_OPTIONS_VERSION + 1;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_reader_open(path, &options, &r, error));
  options.version = 0;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_reader_open(path, &options, &r, error));
}

static void test_os_errno(void **state) {
  (void)state;
  char path[300];
  HurrayError e = {0};
  HurrayReader *r = NULL;
  snprintf(path, sizeof path, "%s/missing.hurray", dir);
  assert_int_equal(hurray_reader_open(path, NULL, &r, &e), HURRAY_ERR_NOT_FOUND);
  assert_int_equal(e.os_errno, ENOENT);
  memset(&e, 0, sizeof e);
  assert_int_equal(hurray_reader_open(dir, NULL, &r, &e), HURRAY_ERR_IO);
  assert_int_equal(e.os_errno, EISDIR);
  HurrayWriter *w = NULL;
  snprintf(path, sizeof path, "%s/no/such/folder.hurray", dir);
  memset(&e, 0, sizeof e);
  assert_int_equal(hurray_writer_open(path, &w, &e), HURRAY_ERR_IO);
  assert_int_equal(e.os_errno, ENOENT);
  /* A folder as the target is refused at open, before anything is written. */
  snprintf(path, sizeof path, "%s/adir", dir);
  assert_int_equal(mkdir(path, 0755), 0);
  memset(&e, 0, sizeof e);
  assert_int_equal(hurray_writer_open(path, &w, &e), HURRAY_ERR_IO);
  assert_int_equal(e.os_errno, EISDIR);
  rmdir(path);
  /* A failure that is not the operating system's leaves 0, even in a
   * reused error. */
  assert_int_equal(hurray_writer_set_cancel(NULL, NULL, NULL, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_int_equal(e.os_errno, 0);
}

int main(void) {
  big_data = aligned_alloc(64, (BIG + 63) / 64 * 64);
  memset(big_data, 0, BIG);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hook_asked_per_interval),
      cmocka_unit_test(test_cancel_mid_buffer_keeps_target),
      cmocka_unit_test(test_cancel_before_rename),
      cmocka_unit_test(test_reader_cancel_during_read),
      cmocka_unit_test(test_reader_cancel_during_verify),
      cmocka_unit_test(test_reader_options_version_1),
      cmocka_unit_test(test_os_errno),
  };
  int rc = cmocka_run_group_tests(tests, setup, scratch_dir_remove);
  free(big_data);
  return rc;
}
