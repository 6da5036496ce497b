/* This process's mappings of files (file_mappings.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED */
#include "file_mappings.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"

void hurray__drop_mapped_pages(const void *p, uint64_t len) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || len == 0) return;
  uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
  uintptr_t b = ((uintptr_t)p + (uintptr_t)len) / (uintptr_t)page * (uintptr_t)page;
  if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Whether the mapping [start, end) is of the file `want`. The line's inode
 * number has already matched; its device number is not compared, since on
 * some file systems (btrfs subvolumes, overlays) it is not the one fstat
 * gives. /proc/self/map_files/ names the mapped file itself, so stat of it
 * gives the device and inode fstat would. */
static bool maps_file(uintptr_t start, uintptr_t end, const struct stat *want) {
  char link[96];
  struct stat st;
  snprintf(link, sizeof link, "/proc/self/map_files/%" PRIxPTR "-%" PRIxPTR, start, end);
  if (stat(link, &st) != 0) return true; /* unknown: the inode matched, so guard it */
  return st.st_dev == want->st_dev && st.st_ino == want->st_ino;
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
  char line[512];
  while (ok && fgets(line, sizeof line, maps) != NULL) {
    bool whole = strchr(line, '\n') != NULL;
    uintmax_t start, end, inode;
    /* start-end perms offset dev inode [path] */
    if (sscanf(line, "%jx-%jx %*s %*x %*x:%*x %ju", &start, &end, &inode) == 3 &&
        inode == (uintmax_t)want.st_ino && inode != 0 &&
        maps_file((uintptr_t)start, (uintptr_t)end, &want)) {
      ok = add_range(out, &capacity, (uintptr_t)start, (uintptr_t)end);
    }
    /* The rest of a line longer than the buffer (a long path) is skipped. */
    while (!whole && fgets(line, sizeof line, maps) != NULL) whole = strchr(line, '\n') != NULL;
  }
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

void hurray__file_mappings_free(HurrayFileMappings *m) {
  free(m->ranges);
  m->ranges = NULL;
  m->count = 0;
}
