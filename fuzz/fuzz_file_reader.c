/*
 * Fuzz target: a whole file. The input becomes an in-memory file (memfd);
 * the reader opens it in both modes, reads every tensor, row-reads the
 * first, verifies, and reads the metadata. Nothing may crash, hang or
 * allocate by an untrusted size.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hurray/hurray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(const char *path, HurrayReadMode mode) {
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = mode;
  HurrayReader *r = NULL;
  if (hurray_reader_open(path, &options, &r, NULL) != HURRAY_OK) return;
  for (size_t i = 0; i < hurray_reader_tensor_count(r); i++) {
    const char *name = hurray_reader_tensor_name(r, i);
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    if (hurray_reader_get_tensor(r, name, &d, &list, NULL) == HURRAY_OK) {
      hurray_buffer_list_destroy(list);
      hurray_descriptor_destroy(d);
    }
    if (hurray_reader_get_rows(r, name, 0, 1, &d, &list, NULL) == HURRAY_OK) {
      hurray_buffer_list_destroy(list);
      hurray_descriptor_destroy(d);
    }
  }
  (void)hurray_reader_verify(r, NULL, NULL);
  for (size_t i = 0; i < hurray_reader_metadata_count(r); i++) {
    const uint8_t *bytes;
    size_t len;
    (void)hurray_reader_metadata_bytes(r, hurray_reader_metadata_key(r, i), &bytes, &len, NULL);
  }
  hurray_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("hurray-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  exercise(path, HURRAY_READ_MMAP);
  exercise(path, HURRAY_READ_PREAD);
  close(fd);
  return 0;
}
