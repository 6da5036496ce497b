/*
 * Fault injection for the path writer. Every system call the writer makes
 * goes through its HurraySys table (src/io/sys.h); this suite swaps in a
 * table that counts the calls and fails one of them.
 *
 * 1. A dry run of a representative write (three tensors, four buffers, one
 *    of them 4096-aligned, metadata of three types, statistics on, finish)
 *    records the calls by kind.
 * 2. For every call index i of that trace and every fault that applies to
 *    the call at i, the write runs again with the fault at i, for both ways
 *    of making the temporary file (O_TMPFILE, and the named fallback) and
 *    for a target that exists and one that does not. Each run checks:
 *      - the status: HURRAY_ERR_IO with a message naming the operation and
 *        the OS error, or HURRAY_OK for the faults the writer absorbs (a
 *        short write, EINTR, EEXIST from linkat or the named file's open, a
 *        failed O_TMPFILE open, a
 *        failed fchmod, anything after the rename);
 *      - the target: byte-identical to the old file (or still absent) on
 *        failure, byte-identical to a fault-free write on success;
 *      - the folder: no temporary file left;
 *      - no descriptor leaked (ASan checks memory).
 * 3. The same with cleanup failing too: after the fault, every close and
 *    unlink fails as well. The first error must survive; a temporary file
 *    left by the failed unlink is counted, then removed.
 * 4. The folder renamed mid-write: the file is still published, or still
 *    removed.
 * The total number of fault points is printed.
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

#include "../../src/io/sys.h"
#include "scratch_dir.h"
#include "test_util.h"

/* ------------------------------------------------------------ the fake */

typedef enum Op {
  OP_ACCESS,
  OP_OPEN_FOLDER, /* openat(AT_FDCWD, folder, O_DIRECTORY) */
  OP_TMPFILE,     /* openat(folder, ".", O_TMPFILE) */
  OP_CREATE,      /* openat(folder, hidden name, O_CREAT | O_EXCL): the fallback */
  OP_FCHMOD,
  OP_WRITE,
  OP_FSYNC,
  OP_LINKAT,
  OP_RENAME,
  OP_UNLINK,
  OP_CLOSE,
  OP_STAT,
  OP_COUNT
} Op;

static const char *const op_names[OP_COUNT] = {
    "access", "open folder", "open O_TMPFILE", "create",   "fchmod", "write",
    "fsync",  "linkat",      "renameat",       "unlinkat", "close",  "stat"};

typedef enum Fault {
  FAULT_NONE,
  FAULT_ENOSPC,
  FAULT_EIO,
  FAULT_EACCES,
  FAULT_ENOENT,
  FAULT_EXDEV,
  FAULT_EINTR,             /* the writer retries: the write succeeds */
  FAULT_EEXIST,            /* linkat, create: the writer tries the next name */
  FAULT_SHORT,             /* write: half the bytes; the writer continues */
  FAULT_SHORT_THEN_ENOSPC, /* write: half the bytes, then ENOSPC (a disk filling up) */
  FAULT_ZERO,              /* write: returns 0 */
  FAULT_KIND_COUNT
} Fault;

static const char *const fault_names[FAULT_KIND_COUNT] = {
    "none",  "ENOSPC", "EIO",   "EACCES",       "ENOENT", "EXDEV",
    "EINTR", "EEXIST", "short", "short+ENOSPC", "zero"};

enum { MAX_CALLS = 256 };

typedef struct Fake {
  bool force_fallback; /* access() fails: the writer makes a named file */
  size_t fault_at;     /* call index to fail, or SIZE_MAX */
  Fault fault;
  bool cleanup_fails; /* after the fault fired, every close and unlink fails */
  /* Observed. */
  size_t calls;
  Op trace[MAX_CALLS];
  size_t len[MAX_CALLS]; /* write: bytes asked */
  size_t rename_at;      /* index of the successful rename, or SIZE_MAX */
  bool fired;
  bool enospc_next; /* FAULT_SHORT_THEN_ENOSPC: the next write fails */
} Fake;

static Fake fake;

/* Counts the call; returns the fault to apply to it (FAULT_NONE mostly). */
static Fault next_call(Op op, size_t len) {
  size_t i = fake.calls++;
  if (i < MAX_CALLS) {
    fake.trace[i] = op;
    fake.len[i] = len;
  }
  if (i == fake.fault_at) {
    fake.fired = true;
    return fake.fault;
  }
  return FAULT_NONE;
}

static int fail_with(Fault f) {
  static const int codes[FAULT_KIND_COUNT] = {
      [FAULT_ENOSPC] = ENOSPC, [FAULT_EIO] = EIO,
      [FAULT_EACCES] = EACCES, [FAULT_ENOENT] = ENOENT,
      [FAULT_EXDEV] = EXDEV,   [FAULT_EINTR] = EINTR,
      [FAULT_EEXIST] = EEXIST, [FAULT_SHORT_THEN_ENOSPC] = ENOSPC};
  errno = codes[f] ? codes[f] : EIO;
  return -1;
}

static bool cleanup_failing(void) { return fake.cleanup_fails && fake.fired; }

static int fake_access(void *ctx, const char *path, int mode) {
  (void)ctx;
  Fault f = next_call(OP_ACCESS, 0);
  if (fake.force_fallback) {
    errno = ENOENT;
    return -1;
  }
  if (f != FAULT_NONE) return fail_with(f);
  return access(path, mode);
}

static int fake_openat(void *ctx, int dirfd, const char *path, int flags, mode_t mode) {
  (void)ctx;
  Op op = (flags & O_TMPFILE) == O_TMPFILE ? OP_TMPFILE
          : (flags & O_CREAT)              ? OP_CREATE
                                           : OP_OPEN_FOLDER;
  Fault f = next_call(op, 0);
  if (f != FAULT_NONE) return fail_with(f);
  return openat(dirfd, path, flags, mode);
}

static int fake_fchmod(void *ctx, int fd, mode_t mode) {
  (void)ctx;
  Fault f = next_call(OP_FCHMOD, 0);
  if (f != FAULT_NONE) return fail_with(f);
  return fchmod(fd, mode);
}

static ssize_t fake_write(void *ctx, int fd, const void *data, size_t len) {
  (void)ctx;
  Fault f = next_call(OP_WRITE, len);
  if (fake.enospc_next) {
    fake.enospc_next = false;
    return fail_with(FAULT_ENOSPC);
  }
  switch (f) {
    case FAULT_NONE: return write(fd, data, len);
    case FAULT_SHORT:
    case FAULT_SHORT_THEN_ENOSPC:
      fake.enospc_next = f == FAULT_SHORT_THEN_ENOSPC;
      return write(fd, data, len / 2);
    case FAULT_ZERO: return 0;
    default: return fail_with(f);
  }
}

static int fake_fsync(void *ctx, int fd) {
  (void)ctx;
  Fault f = next_call(OP_FSYNC, 0);
  if (f != FAULT_NONE) return fail_with(f);
  return fsync(fd);
}

static int fake_linkat(void *ctx, int old_dirfd, const char *old_path, int new_dirfd,
                       const char *new_path, int flags) {
  (void)ctx;
  Fault f = next_call(OP_LINKAT, 0);
  if (f != FAULT_NONE) return fail_with(f);
  return linkat(old_dirfd, old_path, new_dirfd, new_path, flags);
}

static int fake_renameat(void *ctx, int old_dirfd, const char *old_path, int new_dirfd,
                         const char *new_path) {
  (void)ctx;
  size_t index = fake.calls;
  Fault f = next_call(OP_RENAME, 0);
  if (f != FAULT_NONE) return fail_with(f);
  int rc = renameat(old_dirfd, old_path, new_dirfd, new_path);
  if (rc == 0) fake.rename_at = index;
  return rc;
}

static int fake_unlinkat(void *ctx, int dirfd, const char *path) {
  (void)ctx;
  Fault f = next_call(OP_UNLINK, 0);
  if (cleanup_failing()) return fail_with(FAULT_EIO);
  if (f != FAULT_NONE) return fail_with(f);
  return unlinkat(dirfd, path, 0);
}

/* A failing close still releases the descriptor, as on Linux. */
static int fake_close(void *ctx, int fd) {
  (void)ctx;
  Fault f = next_call(OP_CLOSE, 0);
  int rc = close(fd);
  if (cleanup_failing()) return fail_with(FAULT_EIO);
  if (f != FAULT_NONE) return fail_with(f);
  return rc;
}

static int fake_stat(void *ctx, const char *path, struct stat *st, bool follow) {
  (void)ctx;
  Fault f = next_call(OP_STAT, 0);
  if (f != FAULT_NONE) return fail_with(f);
  return follow ? stat(path, st) : lstat(path, st);
}

static const HurraySys fake_sys = {
    .ctx = &fake,
    .access = fake_access,
    .openat = fake_openat,
    .fchmod = fake_fchmod,
    .write = fake_write,
    .fsync = fake_fsync,
    .linkat = fake_linkat,
    .renameat = fake_renameat,
    .unlinkat = fake_unlinkat,
    .close = fake_close,
    .stat = fake_stat,
};

static void fake_reset(bool force_fallback, size_t fault_at, Fault fault, bool cleanup_fails) {
  memset(&fake, 0, sizeof fake);
  fake.force_fallback = force_fallback;
  fake.fault_at = fault_at;
  fake.fault = fault;
  fake.cleanup_fails = cleanup_fails;
  fake.rename_at = SIZE_MAX;
}

/* ------------------------------------------------------- the workload */

static char target[300];
static uint8_t *expected_bytes; /* a fault-free write's file */
static size_t expected_len;
static const char old_content[] = "the old checkpoint, byte for byte\n";

static int setup(void **state) {
  (void)state;
  if (scratch_dir_create("faults") < 0) return -1;
  snprintf(target, sizeof target, "%s/model.hurray", dir);
  return 0;
}

static int teardown(void **state) {
  free(expected_bytes);
  return scratch_dir_remove(state);
}

static HurrayBuffer *filled_buffer(size_t size, uint8_t seed) {
  uint8_t *mem = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  assert_non_null(mem);
  for (size_t k = 0; k < size; k++) mem[k] = (uint8_t)(seed + k * 7 + (k >> 9));
  HurrayBuffer *b = NULL;
  assert_ok(hurray_buffer_create(mem, size, free_release, NULL, &b, error));
  return b;
}

/* Three tensors (one quantized with a scale buffer, one 4096-aligned after
 * an odd-sized one, so padding is written), three metadata entries, with
 * statistics. Returns the first failure, its message in *err. */
static HurrayStatus run_workload(HurrayWriter *w, HurrayError *err) {
  HurrayStatus status = HURRAY_OK;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_writer_set_statistics(w, true, error));

  /* "a": float32 [33, 17], 2244 bytes (data ends off a 64-byte boundary). */
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){33, 17}, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 33 * 17 * 4, 64, HURRAY_SYNC_READY,
                                         NULL, error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, filled_buffer(33 * 17 * 4, 1), error));
  status = hurray_writer_write_tensor(w, "a", d, list, err);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  if (status != HURRAY_OK) return status;

  /* "q": int8 [4, 12] per-channel affine: codes + scales. */
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){4, 12}, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 48, 64, HURRAY_SYNC_READY, NULL, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_SCALES, 16, 64, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, filled_buffer(48, 2), error));
  float scales[4] = {0.5f, 0.25f, 0.125f, 2.0f};
  HurrayBuffer *sb = filled_buffer(16, 0);
  memcpy((void *)hurray_buffer_data(sb), scales, sizeof scales);
  assert_ok(hurray_buffer_list_push(list, sb, error));
  status = hurray_writer_write_tensor(w, "q", d, list, err);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  if (status != HURRAY_OK) return status;

  /* "big": uint8 [70000], 4096-aligned: a long zero pad, then one write. */
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){70000}, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 70000, 4096, HURRAY_SYNC_READY, NULL,
                                         error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, filled_buffer(70000, 3), error));
  status = hurray_writer_write_tensor(w, "big", d, list, err);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  if (status != HURRAY_OK) return status;

  assert_ok(hurray_writer_set_metadata_string(w, "producer", "test_faults", error));
  assert_ok(hurray_writer_set_metadata_int(w, "step", 1234, error));
  assert_ok(hurray_writer_set_metadata_bytes(w, "blob", "\x01\x02\x03", 3, error));
  return HURRAY_OK;
}

/* One complete write through `sys` (NULL: the public API). On a failure in
 * write_tensor, finish must refuse with STATE and clean up; the first
 * failure is returned, its message in *err. */
static HurrayStatus write_target(const HurraySys *sys, HurrayError *err) {
  HurrayWriter *w = NULL;
  HurrayStatus status = sys != NULL ? hurray__writer_open_sys(target, sys, &w, err)
                                    : hurray_writer_open(target, &w, err);
  if (status != HURRAY_OK) {
    assert_null(w);
    return status;
  }
  status = run_workload(w, err);
  if (status != HURRAY_OK) {
    HurrayError later = {0};
    assert_int_equal(hurray_writer_finish(w, &later), HURRAY_ERR_STATE);
    return status;
  }
  return hurray_writer_finish(w, err);
}

/* ------------------------------------------------------------- checks */

static void prepare_target(bool exists) {
  unlink(target);
  if (exists) {
    FILE *f = fopen(target, "wb");
    assert_non_null(f);
    fputs(old_content, f);
    fclose(f);
  }
}

static void assert_target_is(const void *bytes, size_t len, const char *what) {
  size_t got_len = 0;
  uint8_t *got = read_file(target, &got_len);
  if (got == NULL) fail_msg("%s: the target is missing", what);
  if (got_len != len || memcmp(got, bytes, len) != 0) {
    free(got);
    fail_msg("%s: the target differs from the expected %zu bytes", what, len);
  }
  free(got);
}

/* Removes and counts every file in the folder other than the target; a
 * file that is not a recognisable temporary file fails the test. */
static int remove_leftovers(void) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int count = 0;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        strcmp(e->d_name, "model.hurray") == 0) {
      continue;
    }
    if (strncmp(e->d_name, ".model.hurray.hurray-tmp-", 25) != 0) {
      fail_msg("unexpected file in the folder: %s", e->d_name);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
    count++;
  }
  closedir(d);
  return count;
}

static int open_fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  while (readdir(d) != NULL) n++;
  closedir(d);
  return n;
}

/* What an operation's failure message must contain. */
static const char *op_word(Op op) {
  switch (op) {
    case OP_OPEN_FOLDER: return "folder";
    case OP_CREATE: return "temporary file";
    case OP_WRITE: return "write";
    case OP_FSYNC: return "fsync";
    case OP_LINKAT: return "link";
    case OP_RENAME: return "rename";
    case OP_CLOSE: return "close";
    default: return op_names[op];
  }
}

/* The faults worth trying on call `i` of a trace. */
static size_t faults_for(const Fake *trace, size_t i, bool fallback, Fault *out) {
  size_t n = 0;
  switch (trace->trace[i]) {
    case OP_ACCESS:
      if (!fallback) out[n++] = FAULT_ENOENT;
      break;
    case OP_OPEN_FOLDER:
    case OP_TMPFILE:
      out[n++] = FAULT_EIO;
      out[n++] = FAULT_EACCES;
      break;
    case OP_CREATE:
      out[n++] = FAULT_ENOSPC;
      out[n++] = FAULT_EACCES;
      out[n++] = FAULT_EEXIST;
      break;
    case OP_FCHMOD: out[n++] = FAULT_EIO; break;
    case OP_WRITE:
      out[n++] = FAULT_ENOSPC;
      out[n++] = FAULT_EIO;
      out[n++] = FAULT_EINTR;
      out[n++] = FAULT_ZERO;
      if (trace->len[i] >= 2) {
        out[n++] = FAULT_SHORT;
        out[n++] = FAULT_SHORT_THEN_ENOSPC;
      }
      break;
    case OP_FSYNC:
      out[n++] = FAULT_EIO;
      out[n++] = FAULT_ENOSPC;
      out[n++] = FAULT_EINTR;
      break;
    case OP_LINKAT:
      out[n++] = FAULT_EIO;
      out[n++] = FAULT_ENOSPC;
      out[n++] = FAULT_EEXIST;
      break;
    case OP_RENAME:
      out[n++] = FAULT_EIO;
      out[n++] = FAULT_EXDEV;
      out[n++] = FAULT_EACCES;
      break;
    case OP_CLOSE: out[n++] = FAULT_EIO; break;
    case OP_STAT:
      out[n++] = FAULT_EIO;
      out[n++] = FAULT_EACCES;
      break;
    default: break;
  }
  return n;
}

/* Whether the writer must absorb fault `f` at call `i` and publish anyway. */
static bool absorbed(const Fake *trace, size_t i, Fault f) {
  if (trace->rename_at != SIZE_MAX && i > trace->rename_at) return true; /* already published */
  if (f == FAULT_EINTR || f == FAULT_EEXIST || f == FAULT_SHORT) return true;
  switch (trace->trace[i]) {
    case OP_ACCESS:
    case OP_FCHMOD: return true;                   /* fallback path / a 0600 file */
    case OP_TMPFILE: return true;                  /* the writer falls back to a named file */
    case OP_OPEN_FOLDER: return f == FAULT_EACCES; /* opened again with O_PATH */
    case OP_STAT: return true; /* read as "no such file": only the old mode is not kept */
    default: return false;
  }
}

typedef struct Totals {
  size_t points;
  size_t failed_cleanly;
  size_t absorbed;
  size_t leftovers;
  size_t by_op[OP_COUNT];
} Totals;

static Totals totals;

/* Runs the dry run for a mode and returns its trace. */
/* The calls depend on whether the target exists (a regular file's mode is
 * given to the new one), so each state has its own trace. */
static Fake dry_run(bool fallback, bool exists) {
  prepare_target(exists);
  fake_reset(fallback, SIZE_MAX, FAULT_NONE, false);
  HurrayError err = {0};
  HurrayStatus status = write_target(&fake_sys, &err);
  if (status != HURRAY_OK) fail_msg("dry run failed: %s", err.message);
  assert_true(fake.calls <= MAX_CALLS);
  assert_true(fake.rename_at != SIZE_MAX);
  assert_target_is(expected_bytes, expected_len, "dry run");
  assert_int_equal(remove_leftovers(), 0);
  size_t by_kind[OP_COUNT] = {0};
  for (size_t i = 0; i < fake.calls; i++) by_kind[fake.trace[i]]++;
  printf("dry run (%s, target %s): %zu system calls:", fallback ? "named fallback" : "O_TMPFILE",
         exists ? "present" : "absent", fake.calls);
  for (int k = 0; k < OP_COUNT; k++) {
    if (by_kind[k]) printf(" %s %zu", op_names[k], by_kind[k]);
  }
  printf("\n");
  return fake;
}

static void run_one(const Fake *trace, bool fallback, bool exists, size_t i, Fault f,
                    bool cleanup_fails) {
  char what[160];
  snprintf(what, sizeof what, "%s, target %s, call %zu (%s), fault %s%s",
           fallback ? "fallback" : "O_TMPFILE", exists ? "present" : "absent", i,
           op_names[trace->trace[i]], fault_names[f], cleanup_fails ? ", cleanup fails" : "");
  prepare_target(exists);
  int fds_before = open_fd_count();
  fake_reset(fallback, i, f, cleanup_fails);
  HurrayError err = {0};
  HurrayStatus status = write_target(&fake_sys, &err);
  if (!fake.fired) fail_msg("%s: the fault never fired", what);
  if (open_fd_count() != fds_before) fail_msg("%s: a file descriptor leaked", what);
  totals.points++;
  totals.by_op[trace->trace[i]]++;
  if (absorbed(trace, i, f)) {
    if (status != HURRAY_OK)
      fail_msg("%s: expected success, got %s: %s", what, hurray_status_name(status), err.message);
    assert_target_is(expected_bytes, expected_len, what);
    if (remove_leftovers() != 0) fail_msg("%s: a temporary file was left", what);
    totals.absorbed++;
    return;
  }
  if (status != HURRAY_ERR_IO) {
    fail_msg("%s: expected HURRAY_ERR_IO, got %s: %s", what, hurray_status_name(status),
             err.message);
  }
  assert_int_equal(err.code, HURRAY_ERR_IO);
  const char *word = op_word(trace->trace[i]);
  if (strstr(err.message, word) == NULL) {
    fail_msg("%s: the message does not name the operation (%s): %s", what, word, err.message);
  }
  const char *reason = f == FAULT_ZERO                ? "no bytes written"
                       : f == FAULT_SHORT_THEN_ENOSPC ? strerror(ENOSPC)
                                                      : (fail_with(f), strerror(errno));
  if (strstr(err.message, reason) == NULL) {
    fail_msg("%s: the message does not give the cause (%s): %s", what, reason, err.message);
  }
  if (exists) {
    assert_target_is(old_content, strlen(old_content), what);
  } else if (access(target, F_OK) == 0) {
    fail_msg("%s: the target appeared", what);
  }
  int left = remove_leftovers();
  if (left != 0 && !cleanup_fails) fail_msg("%s: %d temporary file(s) left", what, left);
  totals.leftovers += (size_t)left;
  totals.failed_cleanly++;
}

static void sweep(bool fallback, bool cleanup_fails) {
  size_t before = totals.points;
  for (int exists = 0; exists <= 1; exists++) {
    Fake trace = dry_run(fallback, exists != 0);
    for (size_t i = 0; i < trace.calls; i++) {
      Fault faults[8];
      size_t n = faults_for(&trace, i, fallback, faults);
      for (size_t k = 0; k < n; k++) {
        if (cleanup_fails && absorbed(&trace, i, faults[k])) continue;
        run_one(&trace, fallback, exists != 0, i, faults[k], cleanup_fails);
      }
    }
  }
  printf("%s%s: %zu fault points\n", fallback ? "named fallback" : "O_TMPFILE",
         cleanup_fails ? ", cleanup failing too" : "", totals.points - before);
}

/* -------------------------------------------------------------- tests */

static void test_reference_write(void **state) {
  (void)state;
  prepare_target(false);
  HurrayError err = {0};
  HurrayStatus status = write_target(NULL, &err);
  if (status != HURRAY_OK) fail_msg("reference write failed: %s", err.message);
  expected_bytes = read_file(target, &expected_len);
  assert_non_null(expected_bytes);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(target, NULL, &r, error));
  assert_int_equal(hurray_reader_tensor_count(r), 3);
  assert_ok(hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
  assert_int_equal(remove_leftovers(), 0);
}

static void test_every_fault_o_tmpfile(void **state) {
  (void)state;
  sweep(false, false);
}

static void test_every_fault_fallback(void **state) {
  (void)state;
  sweep(true, false);
}

static void test_every_fault_with_failing_cleanup(void **state) {
  (void)state;
  size_t leftovers_before = totals.leftovers;
  sweep(false, true);
  sweep(true, true);
  printf(
      "with failing cleanup: %zu temporary file(s) left by a failed unlink (expected: the "
      "fallback path and after linkat)\n",
      totals.leftovers - leftovers_before);
}

/* A new file's mode is 0666 less the umask whichever way the temporary
 * file is made (open(2) applies the umask to an O_TMPFILE file; the
 * named fallback applies it itself), and a replaced file's mode is kept
 * either way. */
static void test_new_and_replaced_file_modes(void **state) {
  (void)state;
  const mode_t masks[] = {077, 027, 022, 002};
  mode_t saved = umask(022);
  for (int fallback = 0; fallback < 2; fallback++) {
    for (int m = 0; m < 4; m++) {
      umask(masks[m]);
      prepare_target(false);
      fake_reset(fallback, SIZE_MAX, FAULT_NONE, false);
      HurrayError err = {0};
      assert_int_equal(write_target(&fake_sys, &err), HURRAY_OK);
      struct stat st;
      assert_int_equal(stat(target, &st), 0);
      assert_int_equal(st.st_mode & 0777, 0666 & ~masks[m]);
      assert_int_equal(chmod(target, 0604), 0);
      fake_reset(fallback, SIZE_MAX, FAULT_NONE, false);
      assert_int_equal(write_target(&fake_sys, &err), HURRAY_OK);
      assert_int_equal(stat(target, &st), 0);
      assert_int_equal(st.st_mode & 0777, 0604);
    }
  }
  umask(saved);
  assert_int_equal(remove_leftovers(), 0);
}

/* Names in `folder` other than . and ..: one, `only`, or fails. */
static void assert_folder_holds_only(const char *folder, const char *only, const char *what) {
  DIR *d = opendir(folder);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
        strcmp(e->d_name, only) != 0) {
      fail_msg("%s: %s was left in the folder", what, e->d_name);
    }
  }
  closedir(d);
}

/* The target's folder is renamed while the file is being written. The
 * writer holds the folder open, so the finished file is published into it
 * under its new name, as a file open(2)ed there would be; and when the
 * rename onto the target fails (a folder took its name), the temporary
 * file is still found and removed. Either way nothing is left behind. */
/* Cancels only when asked right after the faulted call, before any other
 * system call: the writer must ask between an EINTR and its retry. */
static bool cancel_right_after_the_fault(void *ctx) {
  (void)ctx;
  return fake.fired && fake.calls == fake.fault_at + 1;
}

/* A signal interrupting a write lets the cancel hook stop the save, both
 * when the write fails with EINTR and when it returns short (a pipe or
 * socket that took some of the bytes): a write to a pipe nobody reads
 * blocks until a signal comes, and was tried again without asking, so
 * Ctrl-C never stopped it. */
static void test_an_interrupted_write_asks_the_cancel_hook(void **state) {
  (void)state;
  Fake trace = dry_run(false, true);
  size_t first_write = SIZE_MAX;
  for (size_t i = 0; i < trace.calls && first_write == SIZE_MAX; i++) {
    if (trace.trace[i] == OP_WRITE && trace.len[i] >= 2) first_write = i;
  }
  assert_true(first_write != SIZE_MAX);
  const Fault interruptions[] = {FAULT_EINTR, FAULT_SHORT};
  for (size_t k = 0; k < sizeof interruptions / sizeof interruptions[0]; k++) {
    prepare_target(true);
    fake_reset(false, first_write, interruptions[k], false);
    HurrayWriter *w = NULL;
    HurrayError err = {0};
    assert_ok(hurray__writer_open_sys(target, &fake_sys, &w, error));
    assert_ok(hurray_writer_set_cancel(w, cancel_right_after_the_fault, NULL, error));
    /* The writer stages this small workload: its writes come from finish. */
    assert_ok(run_workload(w, &err));
    assert_int_equal(hurray_writer_finish(w, &err), HURRAY_ERR_CANCELLED);
    assert_true(fake.fired);
    assert_target_is(old_content, strlen(old_content), fault_names[interruptions[k]]);
    assert_int_equal(remove_leftovers(), 0);
  }
}

static void test_folder_renamed_mid_write(void **state) {
  (void)state;
  char sub[300], moved[300], path[400], moved_target[400];
  in_dir(sub, sizeof sub, "sub");
  in_dir(moved, sizeof moved, "moved");
  snprintf(path, sizeof path, "%s/model.hurray", sub);
  snprintf(moved_target, sizeof moved_target, "%s/model.hurray", moved);
  for (int fallback = 0; fallback < 2; fallback++) {
    for (int blocked = 0; blocked < 2; blocked++) {
      char what[100];
      snprintf(what, sizeof what, "%s, %s", fallback ? "named fallback" : "O_TMPFILE",
               blocked ? "a folder at the target" : "published");
      assert_int_equal(mkdir(sub, 0700), 0);
      fake_reset(fallback, SIZE_MAX, FAULT_NONE, false);
      HurrayWriter *w = NULL;
      assert_ok(hurray__writer_open_sys(path, &fake_sys, &w, error));
      assert_ok(run_workload(w, error));
      assert_int_equal(rename(sub, moved), 0);
      if (blocked) assert_int_equal(mkdir(moved_target, 0700), 0);
      HurrayError err = {0};
      HurrayStatus status = hurray_writer_finish(w, &err);
      if (blocked) {
        if (status != HURRAY_ERR_IO || strstr(err.message, "rename") == NULL) {
          fail_msg("%s: expected a rename failure, got %s: %s", what, hurray_status_name(status),
                   err.message);
        }
        assert_int_equal(rmdir(moved_target), 0);
      } else {
        if (status != HURRAY_OK) fail_msg("%s: %s", what, err.message);
        size_t len = 0;
        uint8_t *got = read_file(moved_target, &len);
        assert_non_null(got);
        if (len != expected_len || memcmp(got, expected_bytes, len) != 0) {
          fail_msg("%s: the published file differs", what);
        }
        free(got);
      }
      assert_folder_holds_only(moved, "model.hurray", what);
      unlink(moved_target);
      assert_int_equal(rmdir(moved), 0);
    }
  }
}

static void test_summary(void **state) {
  (void)state;
  printf(
      "fault points covered: %zu (%zu failed with HURRAY_ERR_IO and the target untouched, "
      "%zu absorbed and published)\n",
      totals.points, totals.failed_cleanly, totals.absorbed);
  printf("by call:");
  for (int k = 0; k < OP_COUNT; k++) {
    if (totals.by_op[k]) printf(" %s %zu", op_names[k], totals.by_op[k]);
  }
  printf("\n");
  assert_true(totals.points > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_write),
      cmocka_unit_test(test_every_fault_o_tmpfile),
      cmocka_unit_test(test_every_fault_fallback),
      cmocka_unit_test(test_every_fault_with_failing_cleanup),
      cmocka_unit_test(test_new_and_replaced_file_modes),
      cmocka_unit_test(test_an_interrupted_write_asks_the_cancel_hook),
      cmocka_unit_test(test_folder_renamed_mid_write),
      cmocka_unit_test(test_summary),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
