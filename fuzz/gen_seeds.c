/*
 * Writes the seed inputs of every fuzz target into OUTPUT_DIR/<target>/:
 *   fuzz/gen_seeds fuzz/corpus        (built as build/fuzz/gen_seeds)
 *
 * The seeds are the golden vectors (tests/c/vectors.c, the descriptors of
 * tests/vectors/NAME.bin) and the output of hurray_quantize for every
 * scheme, each with valid buffers (sparse indices and page tables filled in
 * by golden_vector_fill_indices):
 *   fuzz_descriptor_decode  the encoded descriptor;
 *   fuzz_capsule_placement  flags 0 | u16 length | descriptor | a zero spec
 *                           per buffer (exact size, aligned, as declared) |
 *                           the buffers' bytes;
 *   fuzz_dequantize         flags 0 | u16 length | descriptor | buffers;
 *   fuzz_file_reader        a small valid file per tensor, one file holding
 *   and fuzz_cli            all of them plus metadata of every type, and the
 *                           smallest valid file (no tensors); fuzz_cli also
 *                           gets a file of control-character names and a
 *                           rank-32 tensor (write_cli_seeds); both get a
 *                           file with a chunk-checksum table
 *                           (write_chunk_seed).
 * Output is deterministic; the files are committed (seed-* names), so
 * rerun this only when the vectors or the encoding change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "../src/core/checked.h"
#include "hurray/hurray.h"
#include "vectors.h"

#define MAX_SEEDS 64

typedef struct Seed {
  char name[96];
  HurrayDescriptor *d;
  HurrayBufferList *list;
} Seed;

static Seed seeds[MAX_SEEDS];
static size_t seed_count;
static const char *out_dir;

static void die(const char *what, const HurrayError *e) {
  fprintf(stderr, "gen_seeds: %s: %s\n", what, e ? e->message : "");
  exit(1);
}

static void write_bytes(const char *target, const char *name, const void *data, size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/seed-%s", out_dir, target, name);
  FILE *f = fopen(path, "wb");
  if (f == NULL || (len > 0 && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
    fprintf(stderr, "gen_seeds: cannot write %s\n", path);
    exit(1);
  }
}

static void release(void *data, void *ctx) {
  (void)ctx;
  free(data);
}

/* Buffers for `d`: deterministic bytes, then valid index contents. */
static HurrayBufferList *make_buffers(const HurrayDescriptor *d, uint32_t salt) {
  uint32_t n = hurray_descriptor_buffer_count(d);
  uint8_t *mem[HURRAY_MAX_BUFFERS] = {0};
  for (uint32_t i = 0; i < n; i++) {
    uint64_t size = hurray_descriptor_buffer_size(d, i);
    mem[i] = aligned_alloc(4096, size ? hurray__ceil_div_u64(size, 4096) * 4096 : 4096);
    if (mem[i] == NULL) die("out of memory", NULL);
    uint32_t x = 2463534242u ^ salt ^ (i * 2654435761u);
    for (uint64_t k = 0; k < size; k++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      mem[i][k] = (uint8_t)x;
    }
  }
  golden_vector_fill_indices(d, mem);
  HurrayBufferList *list = NULL;
  HurrayError e = {0};
  if (hurray_buffer_list_create(&list, &e) != HURRAY_OK) die("list", &e);
  for (uint32_t i = 0; i < n; i++) {
    HurrayBuffer *b = NULL;
    if (hurray_buffer_create(mem[i], hurray_descriptor_buffer_size(d, i), release, NULL, &b, &e) !=
            HURRAY_OK ||
        hurray_buffer_list_push(list, b, &e) != HURRAY_OK) {
      die("buffer", &e);
    }
  }
  return list;
}

static void add_seed(const char *name, HurrayDescriptor *d, HurrayBufferList *list) {
  if (seed_count == MAX_SEEDS) die("too many seeds", NULL);
  Seed *s = &seeds[seed_count++];
  snprintf(s->name, sizeof s->name, "%s", name);
  s->d = d;
  s->list = list;
}

static void add_quantized(void) {
  enum { ROWS = 4, COLS = 64 };
  static float src[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; i++) src[i] = (float)((i * 37) % 101 - 50) / 8.0f;
  for (int scheme = HURRAY_SCHEME_AFFINE; scheme <= HURRAY_SCHEME_MXINT8; scheme++) {
    for (int variant = 0; variant < 2; variant++) {
      HurrayQuantizeOptions o;
      HurrayError e = {0};
      if (hurray_quantize_options_init(&o, (HurrayQuantScheme)scheme, &e) != HURRAY_OK) {
        die("options", &e);
      }
      const char *suffix = "";
      if (variant == 1) {
        if (scheme == HURRAY_SCHEME_AFFINE) {
          o.code_dtype = HURRAY_DTYPE_UINT4;
          suffix = "_uint4";
        } else if (scheme == HURRAY_SCHEME_PER_CHANNEL || scheme == HURRAY_SCHEME_BLOCK_AFFINE) {
          o.symmetric = 0;
          o.code_dtype = HURRAY_DTYPE_UINT8;
          o.scale_dtype = HURRAY_DTYPE_FLOAT16;
          suffix = "_asymmetric";
        } else {
          continue;
        }
      }
      HurrayDescriptor *d = NULL;
      HurrayBufferList *list = NULL;
      if (hurray_quantize(src, sizeof src, HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){ROWS, COLS}, &o,
                          &d, &list, &e) != HURRAY_OK) {
        die(hurray_quant_scheme_name((HurrayQuantScheme)scheme), &e);
      }
      char name[96];
      snprintf(name, sizeof name, "quantize_%s%s",
               hurray_quant_scheme_name((HurrayQuantScheme)scheme), suffix);
      add_seed(name, d, list);
    }
  }
}

/* flags | u16 length | descriptor | [zero specs] | buffers */
static void write_list_seed(const char *target, const Seed *s, bool specs) {
  uint8_t *desc = NULL;
  size_t len = 0;
  HurrayError e = {0};
  if (hurray_descriptor_encode(s->d, &desc, &len, &e) != HURRAY_OK) die("encode", &e);
  if (len > 0xFFFF) die("descriptor too long for a seed", NULL);
  size_t n = hurray_buffer_list_len(s->list), total = 3 + len + (specs ? 4 * n : 0);
  for (size_t i = 0; i < n; i++) total += hurray_buffer_size(hurray_buffer_list_get(s->list, i));
  uint8_t *out = calloc(1, total), *p = out;
  if (out == NULL) die("out of memory", NULL);
  *p++ = 0;
  *p++ = (uint8_t)len;
  *p++ = (uint8_t)(len >> 8);
  memcpy(p, desc, len);
  p += len + (specs ? 4 * n : 0);
  for (size_t i = 0; i < n; i++) {
    const HurrayBuffer *b = hurray_buffer_list_get(s->list, i);
    if (hurray_buffer_size(b) > 0) memcpy(p, hurray_buffer_data(b), hurray_buffer_size(b));
    p += hurray_buffer_size(b);
  }
  write_bytes(target, s->name, out, total);
  free(out);
  hurray_free(desc);
}

static void write_file_seed_to(const char *target, const char *name, const Seed *from,
                               size_t count, bool metadata) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/seed-%s", out_dir, target, name);
  HurrayWriter *w = NULL;
  HurrayError e = {0};
  if (hurray_writer_open(path, &w, &e) != HURRAY_OK) die(path, &e);
  size_t written = 0;
  for (size_t i = 0; i < count; i++) {
    /* The writer refuses some (device memory): those have no file seed. */
    if (hurray_writer_write_tensor(w, from[i].name, from[i].d, from[i].list, &e) == HURRAY_OK) {
      written++;
    }
  }
  if (metadata) {
    static const uint8_t blob[3] = {0, 1, 2};
    if (hurray_writer_set_metadata_string(w, "format", "pt", &e) != HURRAY_OK ||
        hurray_writer_set_metadata_int(w, "step", -3, &e) != HURRAY_OK ||
        hurray_writer_set_metadata_float(w, "lr", 0.5, &e) != HURRAY_OK ||
        hurray_writer_set_metadata_bool(w, "final", true, &e) != HURRAY_OK ||
        hurray_writer_set_metadata_bytes(w, "blob", blob, sizeof blob, &e) != HURRAY_OK) {
      die("metadata", &e);
    }
  }
  if (count > 0 && written == 0) {
    hurray_writer_abort(w);
    return;
  }
  if (hurray_writer_finish(w, &e) != HURRAY_OK) die("finish", &e);
}

/* Every file seed serves both file targets. */
static void write_file_seed(const char *name, const Seed *from, size_t count, bool metadata) {
  write_file_seed_to("fuzz_file_reader", name, from, count, metadata);
  write_file_seed_to("fuzz_cli", name, from, count, metadata);
}

/* Seeds of the CLI target only: what the tool once got wrong. A tensor and
 * metadata named and valued with terminal controls (escape sequences, CR,
 * BEL, a bidi override), and a valid rank-32 tensor with one empty
 * dimension and 2^62 elsewhere, whose .npy header once overflowed a stack
 * buffer. */
static void write_cli_seeds(void) {
  HurrayError e = {0};
  static const uint64_t scalar_shape[1] = {2};
  HurrayDescriptor *d = NULL;
  if (hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, scalar_shape, &d, &e) != HURRAY_OK ||
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 8, 64, HURRAY_SYNC_READY, NULL, &e) !=
          HURRAY_OK ||
      hurray_descriptor_set_layout_dense(d, 0, &e) != HURRAY_OK) {
    die("hostile descriptor", &e);
  }
  Seed hostile = {.d = d, .list = make_buffers(d, 7)};
  snprintf(hostile.name, sizeof hostile.name, "%s",
           "evil\x1b[2J\x1b]0;title\x07\rname\xe2\x80\xae");
  char path[1024];
  snprintf(path, sizeof path, "%s/fuzz_cli/seed-hostile_names", out_dir);
  HurrayWriter *w = NULL;
  if (hurray_writer_open(path, &w, &e) != HURRAY_OK ||
      hurray_writer_write_tensor(w, hostile.name, hostile.d, hostile.list, &e) != HURRAY_OK ||
      hurray_writer_set_metadata_string(w, "key\x1b[31m", "value\r\x07\x1b[0m\x7f", &e) !=
          HURRAY_OK ||
      hurray_writer_finish(w, &e) != HURRAY_OK) {
    die(path, &e);
  }
  hurray_buffer_list_destroy(hostile.list);
  hurray_descriptor_destroy(d);

  uint64_t shape[HURRAY_MAX_RANK];
  for (uint32_t i = 0; i < HURRAY_MAX_RANK; i++) shape[i] = i == 0 ? 0 : (uint64_t)1 << 62;
  d = NULL;
  if (hurray_descriptor_create(HURRAY_DTYPE_FLOAT64, HURRAY_MAX_RANK, shape, &d, &e) !=
          HURRAY_OK ||
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 0, 64, HURRAY_SYNC_READY, NULL, &e) !=
          HURRAY_OK ||
      hurray_descriptor_set_layout_dense(d, 0, &e) != HURRAY_OK) {
    die("rank-32 descriptor", &e);
  }
  Seed wide = {.d = d, .list = make_buffers(d, 8)};
  snprintf(wide.name, sizeof wide.name, "%s", "wide");
  write_file_seed_to("fuzz_cli", "rank32_empty", &wide, 1, false);
  hurray_buffer_list_destroy(wide.list);
  hurray_descriptor_destroy(d);

  /* Valid, empty, and beyond what numpy's int64 shapes can say. */
  const uint64_t huge[2] = {0, (uint64_t)1 << 63};
  d = NULL;
  if (hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2, huge, &d, &e) != HURRAY_OK ||
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 0, 64, HURRAY_SYNC_READY, NULL, &e) !=
          HURRAY_OK ||
      hurray_descriptor_set_layout_dense(d, 0, &e) != HURRAY_OK) {
    die("npy-unrepresentable descriptor", &e);
  }
  Seed beyond = {.d = d, .list = make_buffers(d, 9)};
  snprintf(beyond.name, sizeof beyond.name, "%s", "beyond");
  write_file_seed_to("fuzz_cli", "npy_beyond_int64", &beyond, 1, false);
  hurray_buffer_list_destroy(beyond.list);
  hurray_descriptor_destroy(d);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* A file with a chunk-checksum table (format 1.1) small enough for a
 * corpus: the writer's chunks are 4 MiB, so this one is made by hand with
 * the smallest chunk a reader takes (64 KiB): one tensor of 64 KiB and a
 * byte, written without a table, then the table appended to its index as
 * its only metadata entry, and the trailer made anew. */
static void write_chunk_seed(void) {
  enum { CHUNK = 1 << 16, SIZE = CHUNK + 1 };
  static uint8_t data[SIZE];
  for (size_t i = 0; i < SIZE; i++) data[i] = (uint8_t)(i * 131 + 7);
  char path[1024];
  snprintf(path, sizeof path, "%s/fuzz_file_reader/seed-chunks.tmp", out_dir);
  HurrayWriter *w = NULL;
  HurrayError e = {0};
  uint64_t shape[1] = {SIZE};
  HurrayDenseTensor t = {"w", HURRAY_DTYPE_UINT8, 1, shape, data, SIZE};
  if (hurray_writer_open(path, &w, &e) != HURRAY_OK ||
      hurray_writer_write_dense_batch(w, &t, 1, NULL, &e) != HURRAY_OK ||
      hurray_writer_finish(w, &e) != HURRAY_OK) {
    die("chunk seed", &e);
  }
  FILE *f = fopen(path, "rb");
  static uint8_t file[SIZE + 4096];
  size_t len = f != NULL ? fread(file, 1, sizeof file, f) : 0;
  if (f == NULL || len == sizeof file || len < 128) die("chunk seed: read back", NULL);
  fclose(f);
  remove(path);
  static const char key[] = HURRAY_CHUNK_CHECKSUMS_KEY;
  uint8_t entry[2 + sizeof key - 1 + 1 + 4 + 24];
  uint8_t *p = entry;
  put_le(p, sizeof key - 1, 2);
  memcpy(p + 2, key, sizeof key - 1);
  p += 2 + sizeof key - 1;
  p[0] = 6;
  put_le(p + 1, 24, 4);
  put_le(p + 5, CHUNK, 8);
  put_le(p + 13, XXH3_64bits(data, CHUNK), 8);
  put_le(p + 21, XXH3_64bits(data + CHUNK, SIZE - CHUNK), 8);
  uint8_t trailer[64];
  memcpy(trailer, file + len - 64, 64);
  uint64_t index_offset = get_le(trailer, 8), index_length = get_le(trailer + 8, 8);
  static uint8_t out[sizeof file + sizeof entry];
  memcpy(out, file, len - 64);
  memcpy(out + len - 64, entry, sizeof entry);
  index_length += sizeof entry;
  put_le(trailer + 8, index_length, 8);
  put_le(trailer + 16, XXH3_64bits(out + index_offset, (size_t)index_length), 8);
  put_le(trailer + 32, 1, 8); /* metadata_count */
  put_le(trailer + 48, XXH3_64bits(trailer, 48), 8);
  memcpy(out + len - 64 + sizeof entry, trailer, 64);
  write_bytes("fuzz_file_reader", "chunks", out, len + sizeof entry);
  write_bytes("fuzz_cli", "chunks", out, len + sizeof entry);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT_DIR (e.g. fuzz/corpus)\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  for (size_t i = 0; i < golden_vector_count; i++) {
    HurrayDescriptor *d = golden_vectors[i].build();
    add_seed(golden_vectors[i].name, d, make_buffers(d, (uint32_t)i));
  }
  add_quantized();

  for (size_t i = 0; i < seed_count; i++) {
    uint8_t *desc = NULL;
    size_t len = 0;
    HurrayError e = {0};
    if (hurray_descriptor_encode(seeds[i].d, &desc, &len, &e) != HURRAY_OK) die("encode", &e);
    write_bytes("fuzz_descriptor_decode", seeds[i].name, desc, len);
    hurray_free(desc);
    write_list_seed("fuzz_capsule_placement", &seeds[i], true);
    write_list_seed("fuzz_dequantize", &seeds[i], false);
    write_file_seed(seeds[i].name, &seeds[i], 1, false);
  }
  write_file_seed("all", seeds, seed_count, true);
  write_file_seed("empty", seeds, 0, false);
  write_file_seed("metadata_only", seeds, 0, true);
  write_cli_seeds();
  write_chunk_seed();

  for (size_t i = 0; i < seed_count; i++) {
    hurray_buffer_list_destroy(seeds[i].list);
    hurray_descriptor_destroy(seeds[i].d);
  }
  printf("wrote %zu seeds per target into %s\n", seed_count, out_dir);
  return 0;
}
