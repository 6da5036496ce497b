/*
 * Fault injection for conversions to a foreign target (hurray ->
 * safetensors): every system call on the target goes through a HurraySys
 * table (src/io/sys.h, hurray__convert_file_sys), and this suite fails each
 * one in turn. The source's tensor data sits at 64 modulo 4096 in the hurray
 * file and at 8 + header length in the safetensors file, so the converter
 * writes it from the source mapping in target-aligned steps (write_data in
 * src/formats/convert.c): many write(2) calls, each a fault point.
 *
 * For every call index of a dry run and every fault, the conversion runs
 * again over an existing target and checks: a failure leaves the target
 * byte-identical to the old file, a success (faults the writer absorbs:
 * short writes, EINTR, anything after the rename) gives the fault-free
 * result; no temporary file is left; a failed write or fsync before the
 * rename is reported.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/formats/convert_sys.h"
#include "../../src/io/sys.h"
#include "hurray/convert.h"
#include "scratch_dir.h"
#include "test_util.h"

typedef enum Fault { F_NONE, F_ENOSPC, F_EIO, F_EINTR, F_SHORT, F_ZERO, F_COUNT } Fault;
static const char *const fault_names[F_COUNT] = {"none",  "ENOSPC", "EIO",
                                                 "EINTR", "short",  "zero"};

enum { MAX_CALLS = 1024 };

static struct {
  size_t fault_at;
  Fault fault;
  size_t calls, writes;
  char op[MAX_CALLS]; /* 'w' write, 's' fsync, 'r' rename, 'o' other */
  size_t rename_at;
} fake;

static Fault next(char op) {
  size_t i = fake.calls++;
  if (i < MAX_CALLS) fake.op[i] = op;
  return i == fake.fault_at ? fake.fault : F_NONE;
}

static int fail_errno(Fault f) {
  errno = f == F_ENOSPC ? ENOSPC : f == F_EINTR ? EINTR : EIO;
  return -1;
}

static int f_access(void *c, const char *p, int m) {
  (void)c;
  Fault f = next('o');
  return f != F_NONE ? fail_errno(f) : access(p, m);
}
static int f_openat(void *c, int dfd, const char *p, int fl, mode_t m) {
  (void)c;
  Fault f = next('o');
  return f != F_NONE ? fail_errno(f) : openat(dfd, p, fl, m);
}
static int f_fchmod(void *c, int fd, mode_t m) {
  (void)c;
  Fault f = next('o');
  return f != F_NONE ? fail_errno(f) : fchmod(fd, m);
}
static ssize_t f_write(void *c, int fd, const void *d, size_t n) {
  (void)c;
  fake.writes++;
  switch (next('w')) {
    case F_NONE: return write(fd, d, n);
    case F_SHORT: return write(fd, d, n / 2);
    case F_ZERO: return 0;
    default: return fail_errno(fake.fault);
  }
}
static int f_fsync(void *c, int fd) {
  (void)c;
  Fault f = next('s');
  return f != F_NONE ? fail_errno(f) : fsync(fd);
}
static int f_linkat(void *c, int a, const char *b, int d, const char *e, int fl) {
  (void)c;
  Fault f = next('o');
  return f != F_NONE ? fail_errno(f) : linkat(a, b, d, e, fl);
}
static int f_renameat(void *c, int ad, const char *a, int bd, const char *b) {
  (void)c;
  size_t i = fake.calls;
  Fault f = next('r');
  if (f != F_NONE) return fail_errno(f);
  int rc = renameat(ad, a, bd, b);
  if (rc == 0) fake.rename_at = i;
  return rc;
}
static int f_unlinkat(void *c, int dfd, const char *p) {
  (void)c;
  next('o');
  return unlinkat(dfd, p, 0);
}
static int f_close(void *c, int fd) {
  (void)c;
  next('o');
  return close(fd);
}

static const HurraySys fake_sys = {
    .access = f_access,
    .openat = f_openat,
    .fchmod = f_fchmod,
    .write = f_write,
    .fsync = f_fsync,
    .linkat = f_linkat,
    .renameat = f_renameat,
    .unlinkat = f_unlinkat,
    .close = f_close,
};

static char src_st[300], src_hr[300], target[300];
static uint8_t *reference;
static size_t reference_len;

static int setup(void **state) {
  (void)state;
  if (scratch_dir_create("convert-faults") != 0) return -1;
  in_dir(src_st, sizeof src_st, "src.safetensors");
  in_dir(src_hr, sizeof src_hr, "src.hurray");
  in_dir(target, sizeof target, "out.safetensors");
  /* Two tensors, 1 MiB and 300000 bytes: many 64 KiB target steps. */
  const char *h =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[262144],\"data_offsets\":[0,1048576]},"
      "\"b\":{\"dtype\":\"U8\",\"shape\":[300000],\"data_offsets\":[1048576,1348576]}}";
  size_t hl = (strlen(h) + 7) / 8 * 8, data = 1348576;
  uint8_t *f = malloc(8 + hl + data);
  if (f == NULL) return -1;
  for (int k = 0; k < 8; k++) f[k] = (uint8_t)((uint64_t)hl >> (8 * k));
  memset(f + 8, ' ', hl);
  memcpy(f + 8, h, strlen(h));
  uint32_t x = 12345;
  for (size_t i = 0; i < data; i++)
    f[8 + hl + i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
  write_file(src_st, f, 8 + hl + data);
  free(f);
  HurrayError err = {0};
  if (hurray_convert_file(src_st, src_hr, NULL, &err) != HURRAY_OK) return -1;
  if (hurray_convert_file(src_hr, target, NULL, &err) != HURRAY_OK) return -1;
  reference = read_file(target, &reference_len);
  return reference == NULL ? -1 : 0;
}

static int teardown(void **state) {
  free(reference);
  return scratch_dir_remove(state);
}

static size_t temp_files(void) {
  size_t n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (strstr(e->d_name, "hurray-tmp") != NULL) n++;
  }
  if (d != NULL) closedir(d);
  return n;
}

static HurrayStatus run(size_t at, Fault f, HurrayError *err) {
  memset(&fake, 0, sizeof fake);
  fake.fault_at = at;
  fake.fault = f;
  fake.rename_at = SIZE_MAX;
  return hurray__convert_file_sys(src_hr, target, NULL, &fake_sys, err);
}

static void test_data_goes_through_write(void **state) {
  (void)state;
  HurrayError err = {0};
  assert_int_equal(run(SIZE_MAX, F_NONE, &err), HURRAY_OK);
  /* length, header, then the data in 64 KiB target steps (not one
   * copy_file_range, which bypasses write). */
  assert_true(fake.writes >= 20);
  assert_true(fake.rename_at != SIZE_MAX);
  size_t len = 0;
  uint8_t *got = read_file(target, &len);
  assert_true(len == reference_len && memcmp(got, reference, len) == 0);
  /* Byte-identical to the safetensors file it came from. */
  size_t slen;
  uint8_t *orig = read_file(src_st, &slen);
  assert_true(slen == len && memcmp(orig, got, len) == 0);
  free(orig);
  free(got);
}

static void test_every_fault(void **state) {
  (void)state;
  static const uint8_t old[] = "an old target that a failed conversion must keep";
  HurrayError err = {0};
  assert_int_equal(run(SIZE_MAX, F_NONE, &err), HURRAY_OK);
  size_t total = fake.calls, rename_at = fake.rename_at, points = 0;
  char ops[MAX_CALLS];
  memcpy(ops, fake.op, sizeof ops);
  assert_true(total < MAX_CALLS);
  for (size_t i = 0; i < total; i++) {
    for (int f = F_ENOSPC; f < F_COUNT; f++) {
      if ((f == F_SHORT || f == F_ZERO) && ops[i] != 'w') continue;
      write_file(target, old, sizeof old);
      memset(&err, 0, sizeof err);
      HurrayStatus s = run(i, (Fault)f, &err);
      size_t len = 0;
      uint8_t *got = read_file(target, &len);
      bool must_fail = i < rename_at && (ops[i] == 'w' || ops[i] == 's') &&
                       (f == F_ENOSPC || f == F_EIO || f == F_ZERO);
      if (must_fail && s == HURRAY_OK) {
        fail_msg("call %zu (%c) with %s: reported success", i, ops[i], fault_names[f]);
      }
      if (s == HURRAY_OK) {
        assert_true(len == reference_len && memcmp(got, reference, len) == 0);
      } else {
        assert_true(err.message[0] != '\0');
        if (len != sizeof old || memcmp(got, old, len) != 0) {
          fail_msg("call %zu (%c) with %s: target changed (%s)", i, ops[i], fault_names[f],
                   err.message);
        }
      }
      free(got);
      assert_int_equal(temp_files(), 0);
      points++;
    }
  }
  printf("convert fault points: %zu (%zu calls)\n", points, total);
}

static struct {
  size_t calls, cancel_at; /* cancel_at: the call (1-based) that says cancel */
} hook;

static bool cancel_hook(void *ctx) {
  (void)ctx;
  return ++hook.calls == hook.cancel_at;
}

static HurrayStatus run_cancelled(size_t at, uint32_t version, HurrayError *err) {
  memset(&fake, 0, sizeof fake);
  fake.fault_at = SIZE_MAX;
  fake.rename_at = SIZE_MAX;
  hook.calls = 0;
  hook.cancel_at = at;
  HurrayConvertOptions o = HURRAY_CONVERT_OPTIONS_INIT;
  o.version = version;
  o.cancel = cancel_hook;
  return hurray__convert_file_sys(src_hr, target, &o, &fake_sys, err);
}

/* The cancel hook (options version 2) is asked between tensors and while
 * the target is written, up to the last moment before the rename: a yes at
 * any of those leaves the old target and no temporary file. Version 1
 * options end before the hook, which is then never called. */
static void test_cancel_at_every_point(void **state) {
  (void)state;
  static const uint8_t old[] = "an old target that a cancelled conversion must keep";
  HurrayError err = {0};
  assert_int_equal(run_cancelled(0, HURRAY_CONVERT_OPTIONS_VERSION, &err), HURRAY_OK);
  size_t asked = hook.calls;
  assert_true(asked >= 3);
  for (size_t k = 1; k <= asked; k++) {
    write_file(target, old, sizeof old);
    memset(&err, 0, sizeof err);
    assert_int_equal(run_cancelled(k, HURRAY_CONVERT_OPTIONS_VERSION, &err), HURRAY_ERR_CANCELLED);
    size_t len = 0;
    uint8_t *got = read_file(target, &len);
    assert_true(len == sizeof old && memcmp(got, old, len) == 0);
    free(got);
    assert_int_equal(temp_files(), 0);
  }
  assert_int_equal(run_cancelled(1, 1, &err), HURRAY_OK);
  assert_int_equal(hook.calls, 0);
  assert_int_equal(run_cancelled(1, HURRAY_CONVERT_OPTIONS_VERSION + 1, &err),
                   HURRAY_ERR_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_data_goes_through_write),
      cmocka_unit_test(test_every_fault),
      cmocka_unit_test(test_cancel_at_every_point),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
