/*
 * The input as a file, for the fuzz targets that open paths
 * (fuzz_file_reader.c, fuzz_cli.c): one memfd for the whole run, rewritten
 * for each input, so every mapping of the previous input is gone by then.
 * The includer defines _GNU_SOURCE (memfd_create) before any include.
 */
#ifndef HURRAY_FUZZ_MEMFD_H
#define HURRAY_FUZZ_MEMFD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of the memfd named `name`, now holding exactly `data`. */
static inline const char *fuzz_memfd_input(const char *name, const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size)) {
    perror("memfd write");
    abort();
  }
  return path;
}

#endif
