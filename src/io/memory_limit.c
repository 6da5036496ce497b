#define _GNU_SOURCE /* fopen's "e" (O_CLOEXEC) */
#include "memory_limit.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef PATH_MAX
#  define PATH_MAX 4096
#endif

/* The number a limit file starts with; UINT64_MAX for "max" or none. */
static uint64_t read_limit(const char *file) {
  FILE *f = fopen(file, "re");
  if (f == NULL) return UINT64_MAX;
  unsigned long long value = 0;
  int got = fscanf(f, "%llu", &value);
  fclose(f);
  return got == 1 ? (uint64_t)value : UINT64_MAX;
}

/* The smallest `name` in folder `dir` and in each folder above it, up to
 * and including the first `top` bytes of `dir` (the hierarchy's root):
 * a parent's limit binds its children too. `dir` is cut as it goes. */
static uint64_t smallest_up(char *dir, size_t top, const char *name) {
  uint64_t least = UINT64_MAX;
  for (;;) {
    char file[PATH_MAX];
    int n = snprintf(file, sizeof file, "%s/%s", dir, name);
    if (n > 0 && (size_t)n < sizeof file) {
      uint64_t value = read_limit(file);
      if (value < least) least = value;
    }
    char *slash = strrchr(dir, '/');
    if (slash == NULL || (size_t)(slash - dir) < top) break;
    *slash = '\0';
  }
  return least;
}

/* Whether the comma-separated `list` names `item`. */
static bool lists(const char *list, const char *item) {
  size_t len = strlen(item);
  for (const char *p = list; *p != '\0';) {
    const char *end = strchr(p, ',');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, item, len) == 0) return true;
    if (end == NULL) break;
    p = end + 1;
  }
  return false;
}

uint64_t hurray__cgroup_memory_limit(const char *cgroup_list, const char *root) {
  FILE *f = fopen(cgroup_list, "re");
  if (f == NULL) return UINT64_MAX;
  uint64_t least = UINT64_MAX;
  char line[PATH_MAX];
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    /* hierarchy-ID:controller-list:cgroup-path */
    char *first = strchr(line, ':');
    char *second = first != NULL ? strchr(first + 1, ':') : NULL;
    if (second == NULL) continue;
    *first = '\0';
    *second = '\0';
    const char *controllers = first + 1, *path = second + 1;
    bool v2 = strcmp(line, "0") == 0 && *controllers == '\0';
    if (!v2 && !lists(controllers, "memory")) continue;
    const char *hierarchy = v2 ? "" : "/memory";
    if (strcmp(path, "/") == 0) path = "";
    char dir[PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s%s%s", root, hierarchy, path);
    if (n < 0 || (size_t)n >= sizeof dir) continue;
    size_t top = strlen(root) + strlen(hierarchy); /* the hierarchy's root */
    uint64_t value = smallest_up(dir, top, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (value < least) least = value;
  }
  fclose(f);
  return least;
}

uint64_t hurray__memory_limit(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t physical = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
  uint64_t cgroup = hurray__cgroup_memory_limit("/proc/self/cgroup", "/sys/fs/cgroup");
  return cgroup < physical ? cgroup : physical;
}
