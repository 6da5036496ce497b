/*
 * hurray__cgroup_memory_limit: the smallest memory limit on the process's
 * cgroup path, from fake /proc/self/cgroup files and cgroup trees (v1 and
 * v2, limits set above the group, "max", files missing).
 */
#define _DEFAULT_SOURCE /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/io/memory_limit.h"

static char root[256];

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

static int make_root(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/hurray-cgroup-XXXXXX", tmp != NULL ? tmp : "/tmp");
  return mkdtemp(root) != NULL ? 0 : -1;
}

static int remove_root(void **state) {
  (void)state;
  char command[300];
  snprintf(command, sizeof command, "rm -rf '%s'", root);
  return system(command) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_v2_takes_the_smallest_limit_on_the_path),
      cmocka_unit_test(test_v1_reads_the_memory_hierarchy_only),
      cmocka_unit_test(test_unreadable_lists_mean_no_limit),
  };
  return cmocka_run_group_tests(tests, make_root, remove_root);
}
