/*
 * Writes a small checkpoint with several kinds of tensor and typed
 * metadata, then opens it and reads one tensor back without copying.
 *
 *   checkpoint OUT.hurray
 *
 * Uses only the installed header and library:
 *   cc checkpoint.c $(pkg-config --cflags --libs hurray)
 */
#include <hurray/hurray.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    HurrayStatus status_ = (expr);                                                               \
    if (status_ != HURRAY_OK) {                                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #expr, hurray_status_name(status_), error.message); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static HurrayError error;

static void release(void *data, void *ctx) {
  (void)ctx;
  free(data);
}

/* A list holding one 64-byte aligned allocation per size, filled by `fill`. */
static HurrayBufferList *buffers(size_t count, const size_t *sizes,
                                 void (*fill)(size_t index, void *data, size_t size)) {
  HurrayBufferList *list = NULL;
  CHECK(hurray_buffer_list_create(&list, &error));
  for (size_t i = 0; i < count; i++) {
    void *data = aligned_alloc(64, (sizes[i] + 63) / 64 * 64 + 64);
    fill(i, data, sizes[i]);
    HurrayBuffer *b = NULL;
    CHECK(hurray_buffer_create(data, sizes[i], release, NULL, &b, &error));
    CHECK(hurray_buffer_list_push(list, b, &error));
  }
  return list;
}

static void fill_embedding(size_t index, void *data, size_t size) {
  (void)index;
  float *f = data;
  for (size_t i = 0; i < size / sizeof(float); i++) f[i] = (float)i * 0.25f;
}

static void fill_quantized(size_t index, void *data, size_t size) {
  if (index == 0) {
    int8_t *q = data;
    for (size_t i = 0; i < size; i++) q[i] = (int8_t)(i % 255 - 127);
  } else {
    float *s = data;
    for (size_t i = 0; i < size / sizeof(float); i++) s[i] = 0.01f * (float)(i + 1);
  }
}

/* CSR of a 4x5 matrix with 6 stored values. */
static void fill_csr(size_t index, void *data, size_t size) {
  static const double values[] = {1, 2, 3, 4, 5, 6};
  static const int32_t indptr[] = {0, 2, 3, 3, 6};
  static const int32_t indices[] = {0, 4, 2, 0, 1, 3};
  const void *src[] = {values, indptr, indices};
  memcpy(data, src[index], size);
}

static HurrayDescriptor *descriptor(HurrayDType dtype, uint32_t rank, const uint64_t *shape) {
  HurrayDescriptor *d = NULL;
  CHECK(hurray_descriptor_create(dtype, rank, shape, &d, &error));
  return d;
}

static void add(HurrayDescriptor *d, HurrayBufferRole role, uint64_t size) {
  CHECK(hurray_descriptor_add_buffer(d, role, size, 64, HURRAY_SYNC_READY, NULL, &error));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT.hurray\n", argv[0]);
    return 2;
  }
  const char *path = argv[1];
  HurrayWriter *w = NULL;
  CHECK(hurray_writer_open(path, &w, &error));

  /* A dense float32 embedding table. */
  HurrayDescriptor *emb = descriptor(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){16, 8});
  add(emb, HURRAY_ROLE_DATA, 16 * 8 * 4);
  HurrayBufferList *emb_buffers = buffers(1, (size_t[]){16 * 8 * 4}, fill_embedding);
  CHECK(hurray_writer_write_tensor(w, "embed.weight", emb, emb_buffers, &error));

  /* An int8 weight quantized per output channel: codes and scales. */
  HurrayDescriptor *q = descriptor(HURRAY_DTYPE_INT8, 2, (uint64_t[]){8, 16});
  add(q, HURRAY_ROLE_DATA, 128);
  add(q, HURRAY_ROLE_SCALES, 8 * 4);
  CHECK(hurray_descriptor_set_quant_per_channel_affine(q, 0, 1, HURRAY_DTYPE_FLOAT32, &error));
  HurrayBufferList *q_buffers = buffers(2, (size_t[]){128, 32}, fill_quantized);
  CHECK(hurray_writer_write_tensor(w, "layers.0.proj.weight", q, q_buffers, &error));

  /* A CSR sparse matrix: values, row pointers, column indices. */
  HurrayDescriptor *csr = descriptor(HURRAY_DTYPE_FLOAT64, 2, (uint64_t[]){4, 5});
  add(csr, HURRAY_ROLE_VALUES, 6 * 8);
  add(csr, HURRAY_ROLE_INDPTR, 5 * 4);
  add(csr, HURRAY_ROLE_INDICES, 6 * 4);
  CHECK(hurray_descriptor_set_layout_compressed(csr, HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT32, 6, 0,
                                                1, 2, &error));
  HurrayBufferList *csr_buffers = buffers(3, (size_t[]){48, 20, 24}, fill_csr);
  CHECK(hurray_writer_write_tensor(w, "graph.adjacency", csr, csr_buffers, &error));

  CHECK(hurray_writer_set_metadata_string(w, "model", "hurray-demo", &error));
  CHECK(hurray_writer_set_metadata_int(w, "step", 1000, &error));
  CHECK(hurray_writer_set_metadata_float(w, "loss", 0.125, &error));
  CHECK(hurray_writer_set_metadata_bool(w, "ema", false, &error));
  CHECK(hurray_writer_finish(w, &error)); /* fsync + atomic rename */

  /* The writer copied nothing; the caller's buffers are still its own. */
  hurray_buffer_list_destroy(emb_buffers);
  hurray_buffer_list_destroy(q_buffers);
  hurray_buffer_list_destroy(csr_buffers);
  hurray_descriptor_destroy(emb);
  hurray_descriptor_destroy(q);
  hurray_descriptor_destroy(csr);

  /* Read back: the scales come from the mapping, no copy. */
  HurrayReader *r = NULL;
  CHECK(hurray_reader_open(path, NULL, &r, &error));
  CHECK(hurray_reader_verify(r, NULL, &error));
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  CHECK(hurray_reader_get_tensor(r, "layers.0.proj.weight", &d, &list, &error));
  hurray_reader_close(r); /* the buffers stay valid */
  const int8_t *codes = hurray_buffer_data(hurray_buffer_list_get(list, 0));
  const float *scales = hurray_buffer_data(hurray_buffer_list_get(list, 1));
  printf("wrote %s: 3 tensors, 4 metadata entries\n", path);
  printf("layers.0.proj.weight[0, 0:4] dequantized:");
  for (int i = 0; i < 4; i++) printf(" %.2f", (double)((float)codes[i] * scales[0]));
  printf("\n");
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  return 0;
}
