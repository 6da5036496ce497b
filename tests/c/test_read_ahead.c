/*
 * The read-ahead's internals: the cgroup memory limit that caps it, from
 * fake /proc/self/cgroup files and cgroup trees (v1 and v2, limits set
 * above the group, "max", files missing), and the thread that makes its
 * requests while a loader builds tensors.
 */
#define _GNU_SOURCE /* mkdtemp, posix_fadvise */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/io/memory_limit.h"
#include "../../src/io/reader_origin.h"
#include "scratch_dir.h"
#include "test_util.h"
#include "write_bytes.h"

static char root[300];

/* Writes `text` to ROOT/`relative`, making the folders on the way. */
static void put(const char *relative, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", root, relative);
  for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
    if (*p != '/') continue;
    *p = '\0';
    (void)mkdir(path, 0700);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static uint64_t limit_of(const char *list_text) {
  put("self-cgroup", list_text);
  char list[512];
  snprintf(list, sizeof list, "%s/self-cgroup", root);
  return hurray__cgroup_memory_limit(list, root);
}

static void test_v2_takes_the_smallest_limit_on_the_path(void **state) {
  (void)state;
  put("a/b/c/memory.max", "max\n");
  put("a/b/memory.max", "3000000\n");
  put("a/memory.max", "5000000\n");
  assert_int_equal(limit_of("0::/a/b/c\n"), 3000000);
  put("a/b/c/memory.max", "2000000\n");
  assert_int_equal(limit_of("0::/a/b/c\n"), 2000000);
  /* No limit anywhere: "max" and missing files. */
  put("x/memory.max", "max\n");
  assert_int_equal(limit_of("0::/x/y\n"), UINT64_MAX);
  /* The group at the root of a namespace (path "/"). */
  put("memory.max", "7000000\n");
  assert_int_equal(limit_of("0::/\n"), 7000000);
}

static void test_v1_reads_the_memory_hierarchy_only(void **state) {
  (void)state;
  put("memory/p/q/memory.limit_in_bytes", "9223372036854771712\n");
  put("memory/p/memory.limit_in_bytes", "4000000\n");
  put("cpu/p/q/memory.limit_in_bytes", "1\n"); /* not the memory hierarchy */
  assert_int_equal(limit_of("5:cpu,cpuacct:/p/q\n4:memory:/p/q\n1:name=systemd:/\n"), 4000000);
  assert_int_equal(limit_of("3:cpuset,memory:/p/q\n"), 4000000);
  assert_int_equal(limit_of("3:cpuset:/p/q\n"), UINT64_MAX);
}

static void test_unreadable_lists_mean_no_limit(void **state) {
  (void)state;
  char missing[512];
  snprintf(missing, sizeof missing, "%s/no-such-file", root);
  assert_int_equal(hurray__cgroup_memory_limit(missing, root), UINT64_MAX);
  assert_int_equal(limit_of("garbage without colons\n\n::\n"), UINT64_MAX);
  /* This process: at most the machine's memory, and more than nothing. */
  uint64_t here = hurray__memory_limit();
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  assert_true(here > 0);
  if (pages > 0 && page > 0) assert_true(here <= (uint64_t)pages * (uint64_t)page);
}

/* A file of one `bytes`-long tensor in the scratch folder, on disk (so
 * that its pages can be dropped), opened read-only. */
static int synced_file(char *path, size_t size, const char *name, size_t bytes) {
  in_dir(path, size, name);
  write_bytes_tensor(path, bytes, true);
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(fdatasync(fd), 0);
  return fd;
}

/* Drops the file from the cache, starts the read-ahead on a fresh reader
 * (closed before the join when `close_first`: the thread owns a
 * descriptor of its own, so load() may let it go on after the reader is
 * gone; before, it read the closed reader's fields, a use after free under
 * ASan), joins it and waits up to 2 s for the whole file to be cached.
 * Tries 5 times; true when the cache could not be dropped (tmpfs, or pages
 * valgrind keeps mapped) or when it was filled again. */
static bool read_ahead_fills_the_cache(const char *path, int fd, bool close_first) {
  bool dropped = false, filled = false;
  for (int attempt = 0; attempt < 5 && !filled; attempt++) {
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    HurrayReader *r = NULL;
    assert_ok(hurray_reader_open(path, NULL, &r, error));
    double cached = -1;
    assert_ok(hurray_reader_cached_fraction(r, &cached, error));
    if (cached <= 0.01) {
      dropped = true;
      HurrayReadAhead *ahead = hurray__reader_read_ahead_start(r);
      if (close_first) {
        hurray_reader_close(r);
        r = NULL;
      }
      hurray__reader_read_ahead_join(ahead);
      if (r == NULL) assert_ok(hurray_reader_open(path, NULL, &r, error));
      for (int wait = 0; wait < 200 && cached < 0.99; wait++) {
        assert_ok(hurray_reader_cached_fraction(r, &cached, error));
        if (cached < 0.99) usleep(10000);
      }
      filled = cached > 0.99;
    }
    hurray_reader_close(r);
  }
  return !dropped || filled;
}

/* The thread reads the whole region in, also after the reader is closed.
 * On a cached file no thread starts. */
static void test_read_ahead_thread_fills_the_cache(void **state) {
  (void)state;
  char path[300];
  int fd = synced_file(path, sizeof path, "thread.hurray", 16u << 20);
  assert_true(read_ahead_fills_the_cache(path, fd, false));
  assert_true(read_ahead_fills_the_cache(path, fd, true));
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  assert_null(hurray__reader_read_ahead_start(r)); /* cached: nothing to do */
  hurray__reader_read_ahead_join(NULL);
  hurray_reader_close(r);
  close(fd);
}

/* Detached, the thread closes its descriptor when it is done: the process
 * holds no more descriptors than before within a few seconds. */
static void test_detached_read_ahead_closes_its_descriptor(void **state) {
  (void)state;
  char path[300];
  int fd = synced_file(path, sizeof path, "detached.hurray", 4u << 20);
  int probe = dup(fd); /* the lowest free descriptor number */
  close(probe);
  for (int round = 0; round < 8; round++) {
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    HurrayReader *r = NULL;
    assert_ok(hurray_reader_open(path, NULL, &r, error));
    hurray__reader_read_ahead_detach(hurray__reader_read_ahead_start(r));
    hurray_reader_close(r);
  }
  int lowest = -1;
  for (int wait = 0; wait < 500 && lowest != probe; wait++) { /* up to 5 s */
    lowest = dup(fd);
    close(lowest);
    if (lowest != probe) usleep(10000);
  }
  assert_int_equal(lowest, probe);
  close(fd);
}

static int setup(void **state) {
  (void)state;
  if (scratch_dir_create("read-ahead") != 0) return -1;
  snprintf(root, sizeof root, "%s/cgroup", dir);
  return mkdir(root, 0700);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_v2_takes_the_smallest_limit_on_the_path),
      cmocka_unit_test(test_v1_reads_the_memory_hierarchy_only),
      cmocka_unit_test(test_unreadable_lists_mean_no_limit),
      cmocka_unit_test(test_read_ahead_thread_fills_the_cache),
      cmocka_unit_test(test_detached_read_ahead_closes_its_descriptor),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
