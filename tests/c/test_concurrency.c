/*
 * Concurrency: several threads reading one file through one shared reader
 * (MMAP and PREAD), several readers on the same file at once, a file
 * replaced by rename while it is mapped (the old mapping keeps working,
 * also while threads read it), and quantize/dequantize and placement checks
 * running on many threads at once. Every thread checks every byte it reads
 * against what was written.
 *
 * `make test-tsan` runs this suite under ThreadSanitizer; the plain and
 * ASan runs of the C suite run it too. HURRAY_TEST_LIGHT=1 (set by
 * `make test-valgrind`) runs fewer rounds.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scratch_dir.h"
#include "test_util.h"
#include "vectors.h"

#define THREADS 6
#define TENSORS 8

static unsigned rounds = 40;

static int setup(void **state) {
  (void)state;
  if (getenv("HURRAY_TEST_LIGHT") != NULL) rounds = 4;
  return scratch_dir_create("concurrency");
}

/* Element k of tensor t of file generation g. */
static float value(uint32_t g, uint32_t t, uint64_t k) {
  return (float)(g * 1000003u + t * 7919u) + (float)(k % 4096) * 0.25f;
}

static uint64_t rows_of(uint32_t t) { return 3 + 5 * t; }
#define COLS 17

static void tensor_name(char *out, size_t size, uint32_t t) {
  snprintf(out, size, "layer.%u.weight", t);
}

/* Writes generation g: TENSORS dense float32 tensors, a sparse CSR golden
 * vector with valid indices, and metadata. */
static void write_generation(const char *path, uint32_t g) {
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  for (uint32_t t = 0; t < TENSORS; t++) {
    uint64_t shape[2] = {rows_of(t), COLS}, n = shape[0] * shape[1];
    HurrayDescriptor *d = NULL;
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2, shape, &d, error));
    assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, n * 4, 64, HURRAY_SYNC_READY, NULL,
                                           error));
    float *data = aligned_alloc(64, (n * 4 + 63) / 64 * 64);
    for (uint64_t k = 0; k < n; k++) data[k] = value(g, t, k);
    HurrayBuffer *b = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_buffer_create(data, n * 4, free_release, NULL, &b, error));
    assert_ok(hurray_buffer_list_create(&list, error));
    assert_ok(hurray_buffer_list_push(list, b, error));
    char name[64];
    tensor_name(name, sizeof name, t);
    assert_ok(hurray_writer_write_tensor(w, name, d, list, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  HurrayDescriptor *d = golden_vector_build("sparse_csr");
  uint8_t *memory[8] = {0};
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t size = hurray_descriptor_buffer_size(d, i);
    memory[i] = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
    memset(memory[i], (int)(g + i), (size_t)size);
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(memory[i], size, free_release, NULL, &b, error));
    assert_ok(hurray_buffer_list_push(list, b, error));
  }
  golden_vector_fill_indices(d, memory);
  assert_ok(hurray_writer_write_tensor(w, "sparse", d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  assert_ok(hurray_writer_set_metadata_int(w, "generation", g, error));
  assert_ok(hurray_writer_finish(w, error));
}

/* Checks a dense tensor's buffer against generation g. */
static void check_tensor(const HurrayDescriptor *d, const HurrayBufferList *list, uint32_t g,
                         uint32_t t, uint64_t first_row) {
  uint64_t rows = hurray_descriptor_shape(d)[0];
  const float *data = hurray_buffer_data(hurray_buffer_list_get(list, 0));
  for (uint64_t k = 0; k < rows * COLS; k++) {
    if (data[k] != value(g, t, first_row * COLS + k)) {
      fail_msg("tensor %u element %llu of generation %u is %g", t, (unsigned long long)k, g,
               (double)data[k]);
    }
  }
}

/* Everything a thread does with a reader of generation g, `rounds` times:
 * whole tensors, rows, pread of buffers and spans, verify, metadata, dense copies of
 * the sparse tensor. Reads always leave the caller owning what it got. */
static void read_everything(HurrayReader *r, uint32_t g, unsigned seed) {
  for (unsigned round = 0; round < rounds; round++) {
    uint32_t t = (seed + round) % TENSORS;
    char name[64];
    tensor_name(name, sizeof name, t);
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_reader_get_tensor(r, name, &d, &list, error));
    check_tensor(d, list, g, t, 0);
    /* The first row again, read by two threads of read_spans. */
    size_t index = 0;
    float row0[COLS];
    assert_ok(hurray_reader_find(r, name, &index, error));
    HurrayReadSpan span = {index, 0, 0, sizeof row0, row0};
    assert_ok(hurray_reader_read_spans(r, &span, 1, 2, error));
    assert_memory_equal(row0, hurray_buffer_data(hurray_buffer_list_get(list, 0)), sizeof row0);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);

    uint64_t row = round % rows_of(t);
    assert_ok(hurray_reader_get_rows(r, name, row, 1, &d, &list, error));
    check_tensor(d, list, g, t, row);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);

    float first[COLS];
    assert_status(HURRAY_ERR_BUFFER_SIZE,
                  hurray_reader_read_buffer(r, name, 0, first, sizeof first, error));
    if (round % 8 == 0) assert_ok(hurray_reader_verify(r, name, error));

    int64_t generation = -1;
    assert_ok(hurray_reader_metadata_int(r, "generation", &generation, error));
    assert_int_equal(generation, g);

    assert_ok(hurray_reader_get_tensor(r, "sparse", &d, &list, error));
    double dense[12];
    assert_ok(hurray_tensor_to_dense(d, list, dense, sizeof dense, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
}

typedef struct Job {
  HurrayReader *shared; /* NULL: open a reader of one's own */
  const char *path;
  HurrayReadMode mode;
  uint32_t generation;
  unsigned seed;
} Job;

static void *reader_thread(void *arg) {
  Job *job = arg;
  HurrayReader *r = job->shared;
  if (r == NULL) {
    HurrayReaderOptions o = HURRAY_READER_OPTIONS_INIT;
    o.mode = job->mode;
    assert_ok(hurray_reader_open(job->path, &o, &r, error));
  }
  read_everything(r, job->generation, job->seed);
  if (job->shared == NULL) hurray_reader_close(r);
  return NULL;
}

static void run_threads(Job *jobs, size_t n) {
  pthread_t ids[THREADS];
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(pthread_create(&ids[i], NULL, reader_thread, &jobs[i]), 0);
  }
  for (size_t i = 0; i < n; i++) assert_int_equal(pthread_join(ids[i], NULL), 0);
}

static void shared_reader(HurrayReadMode mode, const char *file) {
  char path[512];
  in_dir(path, sizeof path, file);
  write_generation(path, 1);
  HurrayReaderOptions o = HURRAY_READER_OPTIONS_INIT;
  o.mode = mode;
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, &o, &r, error));
  Job jobs[THREADS];
  for (unsigned i = 0; i < THREADS; i++) jobs[i] = (Job){r, path, mode, 1, i};
  run_threads(jobs, THREADS);
  assert_ok(hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
}

static void test_threads_share_one_mmap_reader(void **state) {
  (void)state;
  shared_reader(HURRAY_READ_MMAP, "shared-mmap.hurray");
}

static void test_threads_share_one_pread_reader(void **state) {
  (void)state;
  shared_reader(HURRAY_READ_PREAD, "shared-pread.hurray");
}

static void test_readers_on_one_file(void **state) {
  (void)state;
  char path[512];
  in_dir(path, sizeof path, "many-readers.hurray");
  write_generation(path, 2);
  Job jobs[THREADS];
  for (unsigned i = 0; i < THREADS; i++) {
    jobs[i] = (Job){NULL, path, i % 2 ? HURRAY_READ_PREAD : HURRAY_READ_MMAP, 2, i};
  }
  run_threads(jobs, THREADS);
}

/* Buffers handed out by one thread and destroyed by another: the mapping's
 * reference count is the only thing they share. */
typedef struct Handoff {
  HurrayDescriptor *d[TENSORS];
  HurrayBufferList *list[TENSORS];
} Handoff;

static void *destroy_thread(void *arg) {
  Handoff *h = arg;
  for (uint32_t t = 0; t < TENSORS; t++) {
    check_tensor(h->d[t], h->list[t], 3, t, 0);
    hurray_buffer_list_destroy(h->list[t]);
    hurray_descriptor_destroy(h->d[t]);
  }
  return NULL;
}

static void *replace_thread(void *arg) {
  const char *path = arg;
  for (uint32_t g = 4; g < 4 + (rounds > 8 ? 8 : rounds); g++) write_generation(path, g);
  return NULL;
}

static void test_replace_by_rename_while_mapped(void **state) {
  (void)state;
  char path[512];
  in_dir(path, sizeof path, "replaced.hurray");
  write_generation(path, 3);
  HurrayReader *old = NULL;
  assert_ok(hurray_reader_open(path, NULL, &old, error));
  Handoff handoffs[THREADS];
  for (unsigned i = 0; i < THREADS; i++) {
    for (uint32_t t = 0; t < TENSORS; t++) {
      char name[64];
      tensor_name(name, sizeof name, t);
      assert_ok(
          hurray_reader_get_tensor(old, name, &handoffs[i].d[t], &handoffs[i].list[t], error));
    }
  }

  /* Replace the file (atomically, by rename) again and again while threads
   * read the old mapping through the old reader. */
  pthread_t replacer, ids[THREADS];
  assert_int_equal(pthread_create(&replacer, NULL, replace_thread, path), 0);
  Job jobs[THREADS];
  for (unsigned i = 0; i < THREADS; i++) {
    jobs[i] = (Job){old, path, HURRAY_READ_MMAP, 3, i};
    assert_int_equal(pthread_create(&ids[i], NULL, reader_thread, &jobs[i]), 0);
  }
  for (unsigned i = 0; i < THREADS; i++) assert_int_equal(pthread_join(ids[i], NULL), 0);
  assert_int_equal(pthread_join(replacer, NULL), 0);

  /* The old reader still verifies against the old contents; the path now
   * holds the last generation. */
  assert_ok(hurray_reader_verify(old, NULL, error));
  HurrayReader *now = NULL;
  assert_ok(hurray_reader_open(path, NULL, &now, error));
  int64_t generation = -1;
  assert_ok(hurray_reader_metadata_int(now, "generation", &generation, error));
  assert_int_equal(generation, 4 + (rounds > 8 ? 8 : rounds) - 1);
  hurray_reader_close(now);

  /* Close the old reader: the handed-out buffers keep the old mapping
   * alive, and other threads check and release them. */
  hurray_reader_close(old);
  for (unsigned i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_create(&ids[i], NULL, destroy_thread, &handoffs[i]), 0);
  }
  for (unsigned i = 0; i < THREADS; i++) assert_int_equal(pthread_join(ids[i], NULL), 0);
}

/* Quantize and dequantize the same input on many threads at once (each call
 * single-threaded, and a multi-threaded one alongside): every result equals
 * the one computed alone. Placement and to_dense run concurrently on one
 * shared, read-only tensor. */
typedef struct QuantJob {
  const float *x;
  const uint64_t *shape;
  HurrayQuantScheme scheme;
  const HurrayDescriptor *ref_d;
  const HurrayBufferList *ref_list;
  const float *ref_y;
  uint32_t threads;
} QuantJob;

static void *quant_thread(void *arg) {
  QuantJob *q = arg;
  uint64_t n = q->shape[0] * q->shape[1];
  float *y = malloc(n * sizeof *y);
  for (unsigned round = 0; round < (rounds > 10 ? 10 : rounds); round++) {
    HurrayQuantizeOptions o;
    assert_ok(hurray_quantize_options_init(&o, q->scheme, error));
    o.threads = q->threads;
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_quantize(q->x, n * sizeof *q->x, HURRAY_DTYPE_FLOAT32, 2, q->shape, &o, &d,
                              &list, error));
    assert_true(hurray_descriptor_equal(d, q->ref_d));
    for (size_t i = 0; i < hurray_buffer_list_len(list); i++) {
      const HurrayBuffer *a = hurray_buffer_list_get(list, i);
      const HurrayBuffer *b = hurray_buffer_list_get(q->ref_list, i);
      assert_memory_equal(hurray_buffer_data(a), hurray_buffer_data(b), hurray_buffer_size(a));
    }
    assert_ok(
        hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, q->threads, y, n * sizeof *y, error));
    assert_memory_equal(y, q->ref_y, n * sizeof *y);
    /* The shared reference, read-only, from every thread at once. */
    assert_ok(hurray_validate_buffer_placement(q->ref_d, q->ref_list, error));
    assert_ok(hurray_dequantize(q->ref_d, q->ref_list, HURRAY_DTYPE_FLOAT32, 1, y, n * sizeof *y,
                                error));
    assert_memory_equal(y, q->ref_y, n * sizeof *y);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  free(y);
  return NULL;
}

static void test_quantize_on_many_threads(void **state) {
  (void)state;
  uint64_t shape[2] = {64, 256}, n = shape[0] * shape[1];
  float *x = malloc(n * sizeof *x), *ref_y = malloc(n * sizeof *ref_y);
  for (uint64_t k = 0; k < n; k++) x[k] = (float)((k * 7919) % 2001) / 100.0f - 10.0f;
  const HurrayQuantScheme schemes[] = {HURRAY_SCHEME_AFFINE, HURRAY_SCHEME_PER_CHANNEL,
                                       HURRAY_SCHEME_Q4_0,   HURRAY_SCHEME_NF4,
                                       HURRAY_SCHEME_MXFP4,  HURRAY_SCHEME_MXFP6_E3M2};
  for (size_t s = 0; s < sizeof schemes / sizeof schemes[0]; s++) {
    HurrayQuantizeOptions o;
    assert_ok(hurray_quantize_options_init(&o, schemes[s], error));
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(
        hurray_quantize(x, n * sizeof *x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &list, error));
    assert_ok(
        hurray_dequantize(d, list, HURRAY_DTYPE_FLOAT32, 1, ref_y, n * sizeof *ref_y, error));
    QuantJob jobs[THREADS];
    pthread_t ids[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
      jobs[i] = (QuantJob){x, shape, schemes[s], d, list, ref_y, i == 0 ? 4 : 1};
      assert_int_equal(pthread_create(&ids[i], NULL, quant_thread, &jobs[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) assert_int_equal(pthread_join(ids[i], NULL), 0);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  free(x);
  free(ref_y);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_share_one_mmap_reader),
      cmocka_unit_test(test_threads_share_one_pread_reader),
      cmocka_unit_test(test_readers_on_one_file),
      cmocka_unit_test(test_replace_by_rename_while_mapped),
      cmocka_unit_test(test_quantize_on_many_threads),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
