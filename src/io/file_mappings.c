/* This process's mappings of files (file_mappings.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED */
#include "file_mappings.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "../core/error.h"

void hurray__drop_mapped_pages(const void *p, uint64_t len) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || len == 0) return;
  uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
  uintptr_t b = ((uintptr_t)p + (uintptr_t)len) / (uintptr_t)page * (uintptr_t)page;
  if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

bool hurray__populate_read_usable_on(const char *release) {
  unsigned major = 0, minor = 0;
  if (release == NULL || sscanf(release, "%u.%u", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 9);
}

bool hurray__populate_read_usable(void) {
  /* 0: not asked yet, 1: no, 2: yes. Every thread computes the same. */
  static atomic_int usable;
  int known = atomic_load_explicit(&usable, memory_order_relaxed);
  if (known == 0) {
    struct utsname u;
    known = uname(&u) == 0 && hurray__populate_read_usable_on(u.release) ? 2 : 1;
    atomic_store_explicit(&usable, known, memory_order_relaxed);
  }
  return known == 2;
}

void hurray__map_file_pages(const void *p, uint64_t len) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || len == 0 || !hurray__populate_read_usable()) return;
  uintptr_t a = (uintptr_t)p / (uintptr_t)page * (uintptr_t)page;
  uintptr_t b = (uintptr_t)p + (uintptr_t)len;
  /* Read faults only: a write fault would copy every page of a private
   * mapping. */
  (void)madvise((void *)a, b - a, MADV_POPULATE_READ);
}

/* The file a descriptor names, for comparing with the paths the maps
 * list: its /proc/self/fd link, or "" when that cannot be read. */
static void fd_path(int fd, char *out, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, out, size - 1);
  out[n > 0 ? (size_t)n : 0] = '\0';
}

/* Whether the mapping [start, end), listed with device major:minor and
 * `path`, is of the file `want` (whose inode number it already has).
 * /proc/self/map_files/ names the mapped file itself, so stat of it gives
 * what fstat gave; only a privileged process may follow those links. Else
 * the listed device decides, and where it differs from fstat's (btrfs
 * subvolumes, some overlays list another device number) the path. */
static bool maps_file(uintptr_t start, uintptr_t end, unsigned major_, unsigned minor_,
                      const char *path, const struct stat *want, const char *want_path) {
  char link[96];
  struct stat st;
  snprintf(link, sizeof link, "/proc/self/map_files/%" PRIxPTR "-%" PRIxPTR, start, end);
  if (stat(link, &st) == 0) return st.st_dev == want->st_dev && st.st_ino == want->st_ino;
  if (makedev(major_, minor_) == want->st_dev) return true;
  return want_path[0] != '\0' && strcmp(path, want_path) == 0;
}

static bool add_range(HurrayFileMappings *m, size_t *capacity, uintptr_t start, uintptr_t end) {
  if (m->count == *capacity) {
    size_t more = *capacity ? *capacity * 2 : 8;
    void *grown = realloc(m->ranges, more * sizeof *m->ranges);
    if (grown == NULL) return false;
    m->ranges = grown;
    *capacity = more;
  }
  m->ranges[m->count][0] = start;
  m->ranges[m->count][1] = end;
  m->count++;
  return true;
}

HurrayStatus hurray__file_mappings_of_fd(int fd, HurrayFileMappings *out, HurrayError *error) {
  memset(out, 0, sizeof *out);
  struct stat want;
  if (fstat(fd, &want) != 0 || !S_ISREG(want.st_mode)) return HURRAY_OK;
  FILE *maps = fopen("/proc/self/maps", "re");
  if (maps == NULL) return HURRAY_OK;
  size_t capacity = 0;
  bool ok = true;
  char want_path[PATH_MAX];
  fd_path(fd, want_path, sizeof want_path);
  /* A line is the address range, permissions, offset, device, inode and
   * path; longer than this only with a path the kernel would not list
   * whole either, and then its path never matches. */
  static const size_t line_size = PATH_MAX + 128;
  char *line = malloc(line_size);
  if (line == NULL) ok = false;
  while (ok && fgets(line, (int)line_size, maps) != NULL) {
    bool whole = strchr(line, '\n') != NULL;
    uintmax_t start, end, inode;
    unsigned major_, minor_;
    int path_at = 0;
    if (sscanf(line, "%jx-%jx %*s %*x %x:%x %ju %n", &start, &end, &major_, &minor_, &inode,
               &path_at) == 5 &&
        inode == (uintmax_t)want.st_ino && inode != 0) {
      char *path = line + path_at;
      path[strcspn(path, "\n")] = '\0';
      if (maps_file((uintptr_t)start, (uintptr_t)end, major_, minor_, path, &want, want_path)) {
        ok = add_range(out, &capacity, (uintptr_t)start, (uintptr_t)end);
      }
    }
    /* The rest of an overlong line is skipped. */
    while (!whole && fgets(line, (int)line_size, maps) != NULL) whole = strchr(line, '\n') != NULL;
  }
  free(line);
  fclose(maps);
  if (!ok) {
    hurray__file_mappings_free(out);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  return HURRAY_OK;
}

bool hurray__file_mappings_overlap(const HurrayFileMappings *m, const void *p, uint64_t len) {
  if (len == 0) return false; /* nothing is read */
  uintptr_t a = (uintptr_t)p;
  uintptr_t b = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + (uintptr_t)len;
  for (size_t i = 0; i < m->count; i++) {
    if (a < m->ranges[i][1] && m->ranges[i][0] < b) return true;
  }
  return false;
}

HurrayStatus hurray__refuse_mapped(const HurrayFileMappings *m, const char *name, uint32_t buffer,
                                   const void *p, uint64_t len, HurrayError *error) {
  if (!hurray__file_mappings_overlap(m, p, len)) return HURRAY_OK;
  return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                      "tensor \"%s\": buffer %u lies in a mapping of the file being written; "
                      "writing would change the bytes it reads (or, once the file was "
                      "truncated, fault on them): write to a path instead, which makes a new "
                      "file and renames it over the old one",
                      name, buffer);
}

void hurray__file_mappings_free(HurrayFileMappings *m) {
  free(m->ranges);
  m->ranges = NULL;
  m->count = 0;
}
