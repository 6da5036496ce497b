/*
 * Writer memory and speed: writes TOTAL_MIB of data as TENSORS distinct,
 * already-resident tensors and reports how much the process's peak RSS grew
 * while writing (the writer streams, so this should not depend on the file
 * size), the write throughput, and the same bytes written with plain
 * write(2) + fsync as the machine's own limit.
 *
 *   write_peak_rss DIR [TOTAL_MIB=2048] [TENSORS=64] [MAX_DELTA_MIB]
 *
 * With MAX_DELTA_MIB it exits 1 when the peak grew by more (used as a test).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "hurray/hurray.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long peak_rss_kib(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

#define CHECK(expr)                                             \
  do {                                                          \
    if ((expr) != HURRAY_OK) {                                  \
      fprintf(stderr, "%s failed: %s\n", #expr, error.message); \
      return 2;                                                 \
    }                                                           \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [TOTAL_MIB] [TENSORS] [MAX_DELTA_MIB]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  size_t total_mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 2048;
  size_t tensors = argc > 3 ? strtoul(argv[3], NULL, 10) : 64;
  long max_delta_mib = argc > 4 ? strtol(argv[4], NULL, 10) : -1;
  size_t each = total_mib * (1u << 20) / tensors / 64 * 64;
  HurrayError error = {0};

  /* The input: every tensor resident in its own allocation. */
  uint8_t **inputs = calloc(tensors, sizeof *inputs);
  for (size_t i = 0; i < tensors; i++) {
    inputs[i] = aligned_alloc(64, each);
    if (inputs[i] == NULL) {
      fprintf(stderr, "cannot allocate the input\n");
      return 2;
    }
    memset(inputs[i], (int)(i + 1), each);
  }
  long baseline = peak_rss_kib();

  char path[1024], raw_path[1024];
  snprintf(path, sizeof path, "%s/bench-write.hurray", dir);
  snprintf(raw_path, sizeof raw_path, "%s/bench-write.raw", dir);
  HurrayDescriptor *d = NULL;
  CHECK(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){each}, &d, &error));
  CHECK(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, each, 64, HURRAY_SYNC_READY, NULL,
                                     &error));
  double start = now();
  HurrayWriter *w = NULL;
  CHECK(hurray_writer_open(path, &w, &error));
  for (size_t i = 0; i < tensors; i++) {
    HurrayBufferList *list = NULL;
    HurrayBuffer *b = NULL;
    CHECK(hurray_buffer_list_create(&list, &error));
    CHECK(hurray_buffer_create(inputs[i], each, NULL, NULL, &b, &error));
    CHECK(hurray_buffer_list_push(list, b, &error));
    char name[64];
    snprintf(name, sizeof name, "layers.%zu.weight", i);
    CHECK(hurray_writer_write_tensor(w, name, d, list, &error));
    hurray_buffer_list_destroy(list);
  }
  CHECK(hurray_writer_finish(w, &error));
  double hurray_seconds = now() - start;
  long delta_kib = peak_rss_kib() - baseline;

  /* The same bytes through write(2) + fsync: what the disk allows. */
  start = now();
  int fd = open(raw_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (size_t i = 0; i < tensors; i++) {
    size_t done = 0;
    while (done < each) {
      ssize_t n = write(fd, inputs[i] + done, each - done);
      if (n <= 0) return 2;
      done += (size_t)n;
    }
  }
  fsync(fd);
  close(fd);
  double raw_seconds = now() - start;
  unlink(raw_path);

  HurrayReader *r = NULL;
  start = now();
  CHECK(hurray_reader_open(path, NULL, &r, &error));
  double open_seconds = now() - start;
  start = now();
  CHECK(hurray_reader_verify(r, NULL, &error));
  double verify_seconds = now() - start;
  hurray_reader_close(r);
  unlink(path);

  double mib = (double)(each * tensors) / (1 << 20);
  printf("data: %.0f MiB in %zu tensors\n", mib, tensors);
  printf("peak RSS: input %.1f MiB, growth while writing %.1f MiB\n", baseline / 1024.0,
         delta_kib / 1024.0);
  printf("hurray write + fsync + rename: %.2f s, %.0f MiB/s\n", hurray_seconds,
         mib / hurray_seconds);
  printf("plain write(2) + fsync:        %.2f s, %.0f MiB/s (ratio hurray/plain %.2f)\n",
         raw_seconds, mib / raw_seconds, (mib / hurray_seconds) / (mib / raw_seconds));
  printf("open: %.3f ms; verify (xxh3 over the mapping): %.0f MiB/s\n", open_seconds * 1e3,
         mib / verify_seconds);
  hurray_descriptor_destroy(d);
  for (size_t i = 0; i < tensors; i++) free(inputs[i]);
  free(inputs);
  if (max_delta_mib >= 0 && delta_kib > max_delta_mib * 1024) {
    fprintf(stderr, "peak RSS grew by %.1f MiB, over the %ld MiB bound\n", delta_kib / 1024.0,
            max_delta_mib);
    return 1;
  }
  return 0;
}
