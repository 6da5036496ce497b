/*
 * A scratch folder per suite, for the suites that write files: created by
 * the cmocka group setup, removed with its contents by the teardown.
 * Include after defining _GNU_SOURCE (for mkdtemp).
 */
#ifndef HURRAY_TEST_SCRATCH_DIR_H
#define HURRAY_TEST_SCRATCH_DIR_H

#include <stdio.h>
#include <stdlib.h>

/* The folder's path; valid between setup and teardown. */
static char dir[256];

static inline int scratch_dir_create(const char *suite) {
  snprintf(dir, sizeof dir, "/tmp/hurray-test-%s-XXXXXX", suite);
  return mkdtemp(dir) == NULL ? -1 : 0;
}

static inline int scratch_dir_remove(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* `name` inside the folder, into `out` of `size` bytes. */
static inline void in_dir(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", dir, name);
}

/* A release callback for buffers allocated with malloc/aligned_alloc. */
static inline void free_release(void *data, void *ctx) {
  (void)ctx;
  free(data);
}

#endif
