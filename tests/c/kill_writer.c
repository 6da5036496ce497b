/*
 * Helper of test_kill_writer: writes one generation of a ~32 MiB file and
 * exits 0, unless SIGKILLed on the way.
 *
 *   kill_writer TARGET GENERATION [fallback]
 *
 * The file holds 64 float32 tensors "t.00" .. "t.63" of 128 x 1024 (512 KiB
 * each), whose bytes are kill_writer_byte(generation, tensor, k), and the
 * metadata "generation" = GENERATION. With "fallback" the writer is opened
 * on a system-call table whose access() fails, so it uses a named
 * temporary file instead of an unnamed O_TMPFILE one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/io/sys.h"
#include "kill_writer.h"

static int no_proc(void *ctx, const char *path, int mode) {
  (void)ctx;
  (void)path;
  (void)mode;
  errno = ENOENT;
  return -1;
}

static int fail(const char *what, const HurrayError *error) {
  fprintf(stderr, "kill_writer: %s: %s\n", what, error->message);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: kill_writer TARGET GENERATION [fallback]\n");
    return 2;
  }
  const char *target = argv[1];
  uint32_t generation = (uint32_t)strtoul(argv[2], NULL, 10);
  HurraySys sys = hurray__sys_default;
  if (argc > 3 && strcmp(argv[3], "fallback") == 0) sys.access = no_proc;

  HurrayError error = {0};
  HurrayDescriptor *d = NULL;
  if (hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2,
                               (uint64_t[]){KILL_WRITER_ROWS, KILL_WRITER_COLS}, &d, &error) ||
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, KILL_WRITER_TENSOR_BYTES, 64,
                                   HURRAY_SYNC_READY, NULL, &error)) {
    return fail("descriptor", &error);
  }
  uint8_t *data = aligned_alloc(64, KILL_WRITER_TENSOR_BYTES);
  if (data == NULL) return 1;
  HurrayWriter *w = NULL;
  if (hurray__writer_open_sys(target, &sys, &w, &error) != HURRAY_OK) return fail("open", &error);
  for (uint32_t t = 0; t < KILL_WRITER_TENSORS; t++) {
    kill_writer_fill(data, generation, t);
    HurrayBufferList *list = NULL;
    HurrayBuffer *b = NULL;
    char name[16];
    snprintf(name, sizeof name, "t.%02u", t);
    if (hurray_buffer_list_create(&list, &error) ||
        hurray_buffer_create(data, KILL_WRITER_TENSOR_BYTES, NULL, NULL, &b, &error) ||
        hurray_buffer_list_push(list, b, &error) ||
        hurray_writer_write_tensor(w, name, d, list, &error)) {
      return fail(name, &error);
    }
    hurray_buffer_list_destroy(list);
  }
  if (hurray_writer_set_metadata_int(w, "generation", generation, &error) ||
      hurray_writer_finish(w, &error)) {
    return fail("finish", &error);
  }
  hurray_descriptor_destroy(d);
  free(data);
  return 0;
}
