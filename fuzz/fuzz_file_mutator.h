/*
 * The structure-aware mutator of fuzz_file_reader.c (libFuzzer builds only).
 *
 * LLVMFuzzerCustomMutator picks, per call:
 *   4/8  a structural mutation: parse the file into tensors (name,
 *        descriptor bytes, buffer bytes) and metadata entries, change one
 *        thing, and write a fresh file with every checksum correct;
 *        when the input does not parse, a sealed byte-level mutation;
 *   3/8  a byte-level mutation (libFuzzer's own mutators, which include its
 *        comparison-guided ones), then re-seal: every buffer checksum the
 *        index still points at, the index checksum, the trailer checksum;
 *   1/8  a byte-level mutation left unsealed.
 * LLVMFuzzerCustomCrossOver splices the tensors and metadata of two parsed
 * files into one sealed file.
 *
 * The layout written is the one of docs/spec/file-format.md: header, buffers
 * at max(64, alignment) boundaries, the index at a multiple of 8, trailer.
 */
#ifndef HURRAY_FUZZ_FILE_MUTATOR_H
#define HURRAY_FUZZ_FILE_MUTATOR_H

#include <xxhash.h>

#include "../src/core/checked.h"

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2,
                                 size_t size2, uint8_t *out, size_t max_out_size,
                                 unsigned int seed);

#define MODEL_MAX_TENSORS 64u
#define MODEL_MAX_BUFFERS 64u
#define MODEL_MAX_METADATA 64u

static uint64_t mut_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void mut_put(uint8_t *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* xorshift, seeded by libFuzzer so runs are reproducible. */
static unsigned mut_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *state = x;
  return (unsigned)(x >> 32);
}

typedef struct Blob {
  uint8_t *p;
  size_t n;
} Blob;

static bool blob_set(Blob *b, const uint8_t *p, size_t n) {
  uint8_t *q = malloc(n ? n : 1);
  if (q == NULL) return false;
  if (n) memcpy(q, p, n);
  free(b->p);
  b->p = q;
  b->n = n;
  return true;
}

/* Runs libFuzzer's byte mutators over a blob, which may grow by `extra`. */
static bool blob_mutate(Blob *b, size_t extra) {
  size_t cap = b->n + extra;
  uint8_t *q = malloc(cap ? cap : 1);
  if (q == NULL) return false;
  if (b->n) memcpy(q, b->p, b->n);
  size_t n = cap ? LLVMFuzzerMutate(q, b->n, cap) : 0;
  free(b->p);
  b->p = q;
  b->n = n;
  return true;
}

static bool blob_resize(Blob *b, size_t n, uint64_t *rng) {
  uint8_t *q = realloc(b->p, n ? n : 1);
  if (q == NULL) return false;
  for (size_t i = b->n; i < n; i++) q[i] = (mut_rand(rng) & 3) ? 0 : (uint8_t)mut_rand(rng);
  b->p = q;
  b->n = n;
  return true;
}

typedef struct MTensor {
  Blob name, desc;
  size_t nbuf;
  Blob buf[MODEL_MAX_BUFFERS];
} MTensor;

typedef struct MMeta {
  Blob key, value;
  uint8_t type;
} MMeta;

typedef struct Model {
  uint8_t header[64];
  size_t nt, nm;
  MTensor t[MODEL_MAX_TENSORS];
  MMeta m[MODEL_MAX_METADATA];
} Model;

static void model_free(Model *m) {
  for (size_t i = 0; i < m->nt; i++) {
    free(m->t[i].name.p);
    free(m->t[i].desc.p);
    for (size_t k = 0; k < m->t[i].nbuf; k++) free(m->t[i].buf[k].p);
  }
  for (size_t i = 0; i < m->nm; i++) {
    free(m->m[i].key.p);
    free(m->m[i].value.p);
  }
  free(m);
}

/* Parses a file whose trailer and index are structurally sound (checksums
 * are not looked at). NULL when it does not parse. */
static Model *model_parse(const uint8_t *data, size_t size) {
  if (size < 128) return NULL;
  const uint8_t *trailer = data + size - 64;
  uint64_t io = mut_le(trailer, 8), il = mut_le(trailer + 8, 8);
  uint64_t tc = mut_le(trailer + 24, 8), mc = mut_le(trailer + 32, 8);
  if (io < 64 || io > size - 64 || il != size - 64 - io || tc > MODEL_MAX_TENSORS ||
      mc > MODEL_MAX_METADATA) {
    return NULL;
  }
  Model *m = calloc(1, sizeof *m);
  if (m == NULL) return NULL;
  memcpy(m->header, data, 64);
  const uint8_t *p = data + io, *end = data + io + il;
#define NEED(k)                                     \
  do {                                              \
    if ((size_t)(end - p) < (size_t)(k)) goto fail; \
  } while (0)
  for (; m->nt < tc; m->nt++) {
    MTensor *t = &m->t[m->nt];
    NEED(2);
    size_t nl = (size_t)mut_le(p, 2);
    p += 2;
    NEED(nl);
    if (!blob_set(&t->name, p, nl)) goto fail;
    p += nl;
    NEED(4);
    size_t dl = (size_t)mut_le(p, 4);
    p += 4;
    NEED(dl);
    if (!blob_set(&t->desc, p, dl)) goto fail;
    p += dl;
    NEED(4);
    size_t bc = (size_t)mut_le(p, 4);
    p += 4;
    if (bc > MODEL_MAX_BUFFERS) goto fail;
    NEED(24 * bc);
    for (; t->nbuf < bc; t->nbuf++) {
      uint64_t off = mut_le(p, 8), len = mut_le(p + 8, 8);
      p += 24;
      if (off > size || len > size - off) goto fail;
      if (!blob_set(&t->buf[t->nbuf], data + off, (size_t)len)) goto fail;
    }
  }
  for (; m->nm < mc; m->nm++) {
    MMeta *e = &m->m[m->nm];
    NEED(2);
    size_t kl = (size_t)mut_le(p, 2);
    p += 2;
    NEED(kl);
    if (!blob_set(&e->key, p, kl)) goto fail;
    p += kl;
    NEED(5);
    e->type = p[0];
    size_t vl = (size_t)mut_le(p + 1, 4);
    p += 5;
    NEED(vl);
    if (!blob_set(&e->value, p, vl)) goto fail;
    p += vl;
  }
#undef NEED
  return m;
fail:
  /* Count the entry being parsed so its blobs are freed too. */
  if (m->nt < MODEL_MAX_TENSORS && m->nt < tc) m->nt++;
  else if (m->nm < MODEL_MAX_METADATA && m->nm < mc) m->nm++;
  model_free(m);
  return NULL;
}

static int blob_cmp(const Blob *a, const Blob *b) {
  size_t n = a->n < b->n ? a->n : b->n;
  int c = n ? memcmp(a->p, b->p, n) : 0;
  return c != 0 ? c : (a->n > b->n) - (a->n < b->n);
}

static int tensor_cmp(const void *a, const void *b) {
  return blob_cmp(&((const MTensor *)a)->name, &((const MTensor *)b)->name);
}

static int meta_cmp(const void *a, const void *b) {
  return blob_cmp(&((const MMeta *)a)->key, &((const MMeta *)b)->key);
}

/* The file alignment of buffer k: max(64, what the descriptor d asks for). */
static uint64_t buffer_alignment(const HurrayDescriptor *d, size_t k) {
  uint64_t a = 64;
  if (d != NULL) {
    uint32_t want = hurray_descriptor_buffer_alignment(d, (uint32_t)k);
    if (want > a && want <= 4096 && (want & (want - 1)) == 0) a = want;
  }
  return a;
}

/* Writes the model as a sealed file; 0 when it does not fit. */
static size_t model_write(Model *m, bool sort, uint8_t *out, size_t max) {
  if (sort) {
    qsort(m->t, m->nt, sizeof m->t[0], tensor_cmp);
    qsort(m->m, m->nm, sizeof m->m[0], meta_cmp);
  }
  size_t at = 64;
  if (max < 128) return 0;
  memcpy(out, m->header, 64);
  uint64_t offsets[MODEL_MAX_TENSORS][MODEL_MAX_BUFFERS];
  for (size_t i = 0; i < m->nt; i++) {
    HurrayDescriptor *d = NULL;
    if (hurray_descriptor_decode(m->t[i].desc.p, m->t[i].desc.n, &d, NULL) != HURRAY_OK) d = NULL;
    for (size_t k = 0; k < m->t[i].nbuf; k++) {
      uint64_t a = buffer_alignment(d, k);
      size_t start = (size_t)(hurray__ceil_div_u64(at, a) * a);
      const Blob *b = &m->t[i].buf[k];
      if (start > max || b->n > max - start) {
        hurray_descriptor_destroy(d);
        return 0;
      }
      memset(out + at, 0, start - at);
      if (b->n) memcpy(out + start, b->p, b->n);
      offsets[i][k] = start;
      at = start + b->n;
    }
    hurray_descriptor_destroy(d);
  }
  size_t io = (size_t)(hurray__ceil_div_u64(at, 8) * 8);
  if (io > max) return 0;
  memset(out + at, 0, io - at);
  at = io;
#define PUT(ptr, len)                        \
  do {                                       \
    if ((len) > max - at) return 0;          \
    if (len) memcpy(out + at, (ptr), (len)); \
    at += (len);                             \
  } while (0)
#define PUT_LE(v, n)              \
  do {                            \
    if ((n) > max - at) return 0; \
    mut_put(out + at, (v), (n));  \
    at += (n);                    \
  } while (0)
  for (size_t i = 0; i < m->nt; i++) {
    const MTensor *t = &m->t[i];
    PUT_LE(t->name.n, 2);
    PUT(t->name.p, t->name.n);
    PUT_LE(t->desc.n, 4);
    PUT(t->desc.p, t->desc.n);
    PUT_LE(t->nbuf, 4);
    for (size_t k = 0; k < t->nbuf; k++) {
      PUT_LE(offsets[i][k], 8);
      PUT_LE(t->buf[k].n, 8);
      PUT_LE(XXH3_64bits(t->buf[k].p, t->buf[k].n), 8);
    }
  }
  for (size_t i = 0; i < m->nm; i++) {
    const MMeta *e = &m->m[i];
    PUT_LE(e->key.n, 2);
    PUT(e->key.p, e->key.n);
    PUT_LE(e->type, 1);
    PUT_LE(e->value.n, 4);
    PUT(e->value.p, e->value.n);
  }
#undef PUT
#undef PUT_LE
  if (64 > max - at) return 0;
  uint8_t *tr = out + at;
  memset(tr, 0, 64);
  mut_put(tr + 0, io, 8);
  mut_put(tr + 8, at - io, 8);
  mut_put(tr + 16, XXH3_64bits(out + io, at - io), 8);
  mut_put(tr + 24, m->nt, 8);
  mut_put(tr + 32, m->nm, 8);
  memcpy(tr + 40, m->header + 8, 4); /* major, minor: as the header says */
  mut_put(tr + 48, XXH3_64bits(tr, 48), 8);
  static const uint8_t magic[8] = {'H', 'R', 'Y', 'E', 'N', 'D', 0x1A, '\n'};
  memcpy(tr + 56, magic, 8);
  return at + 64;
}

/* Recomputes every checksum that still has something to cover. */
static void reseal(uint8_t *data, size_t size) {
  if (size < 128) return;
  uint8_t *trailer = data + size - 64;
  uint64_t io = mut_le(trailer, 8), il = mut_le(trailer + 8, 8);
  uint64_t tc = mut_le(trailer + 24, 8);
  if (io >= 64 && io <= size - 64 && il <= size - 64 - io) {
    uint8_t *p = data + io, *end = data + io + il;
    for (uint64_t i = 0; i < tc && i < 4096; i++) {
      if (end - p < 2) break;
      size_t nl = (size_t)mut_le(p, 2);
      if ((size_t)(end - p) < 2 + nl + 4) break;
      p += 2 + nl;
      size_t dl = (size_t)mut_le(p, 4);
      if ((size_t)(end - p) < 4 + dl + 4) break;
      p += 4 + dl;
      size_t bc = (size_t)mut_le(p, 4);
      p += 4;
      for (size_t k = 0; k < bc && end - p >= 24; k++, p += 24) {
        uint64_t off = mut_le(p, 8), len = mut_le(p + 8, 8);
        if (off <= size && len <= size - off) {
          mut_put(p + 16, XXH3_64bits(data + off, (size_t)len), 8);
        }
      }
    }
    mut_put(trailer + 16, XXH3_64bits(data + io, (size_t)il), 8);
  }
  mut_put(trailer + 48, XXH3_64bits(trailer, 48), 8);
}

/* Makes the buffers of tensor `t` what its descriptor declares (count and
 * sizes), when the descriptor decodes, so mutated descriptors get past the
 * index's size checks and reach validation and placement. */
static void fit_buffers(MTensor *t, uint64_t *rng) {
  HurrayDescriptor *d = NULL;
  if (hurray_descriptor_decode(t->desc.p, t->desc.n, &d, NULL) != HURRAY_OK) return;
  uint32_t count = hurray_descriptor_buffer_count(d);
  if (count <= MODEL_MAX_BUFFERS) {
    while (t->nbuf > count) {
      t->nbuf--;
      free(t->buf[t->nbuf].p);
      t->buf[t->nbuf].p = NULL;
      t->buf[t->nbuf].n = 0;
    }
    while (t->nbuf < count) t->nbuf++;
    for (uint32_t k = 0; k < count; k++) {
      uint64_t want = hurray_descriptor_buffer_size(d, k);
      if (want <= (1u << 16)) blob_resize(&t->buf[k], (size_t)want, rng);
    }
  }
  hurray_descriptor_destroy(d);
}

static bool mutate_model(Model *m, uint64_t *rng) {
  unsigned r = mut_rand(rng);
  MTensor *t = m->nt ? &m->t[mut_rand(rng) % m->nt] : NULL;
  switch (r % 12) {
    case 0:
    case 1:
    case 2: /* a descriptor */
      if (t == NULL) return false;
      if (!blob_mutate(&t->desc, 64)) return false;
      if (mut_rand(rng) % 4 != 0) fit_buffers(t, rng);
      return true;
    case 3:
    case 4: { /* a buffer's bytes (sparse indices, page tables, codes) */
      if (t == NULL || t->nbuf == 0) return false;
      Blob *b = &t->buf[mut_rand(rng) % t->nbuf];
      size_t n = b->n;
      if (n == 0) return false;
      if (!blob_mutate(b, 0)) return false;
      if (mut_rand(rng) % 4 != 0) blob_resize(b, n, rng);
      return true;
    }
    case 5: /* a name */
      if (t == NULL) return false;
      return blob_mutate(&t->name, 8);
    case 6: { /* metadata: an entry's key, type or value, or a new entry */
      if (m->nm == 0 || mut_rand(rng) % 4 == 0) {
        if (m->nm >= MODEL_MAX_METADATA) return false;
        MMeta *e = &m->m[m->nm++];
        memset(e, 0, sizeof *e);
        uint8_t key[2] = {(uint8_t)('a' + mut_rand(rng) % 26),
                          (uint8_t)('a' + mut_rand(rng) % 26)};
        uint8_t value[8] = {0};
        if (mut_rand(rng) % 4 == 0) {
          /* A chunk-checksum table (format 1.1): the reserved key, type 6,
           * a chunk size of 64 KiB and room for a few sums. */
          static const char chunk_key[] = HURRAY_CHUNK_CHECKSUMS_KEY;
          uint8_t table[8 + 8 * 4] = {0};
          table[2] = 1; /* 1 << 16 */
          e->type = 6;
          return blob_set(&e->key, (const uint8_t *)chunk_key, sizeof chunk_key - 1) &&
                 blob_set(&e->value, table, 8 + 8 * (mut_rand(rng) % 5));
        }
        e->type = (uint8_t)(1 + mut_rand(rng) % 6);
        return blob_set(&e->key, key, 1 + mut_rand(rng) % 2) &&
               blob_set(&e->value, value, e->type == 4 ? 1 : 8);
      }
      MMeta *e = &m->m[mut_rand(rng) % m->nm];
      switch (mut_rand(rng) % 3) {
        case 0: return blob_mutate(&e->key, 8);
        case 1: e->type = (uint8_t)mut_rand(rng); return true;
        default: return blob_mutate(&e->value, 16);
      }
    }
    case 7: { /* a copy of a tensor under a new name */
      if (t == NULL || m->nt >= MODEL_MAX_TENSORS) return false;
      MTensor *c = &m->t[m->nt];
      memset(c, 0, sizeof *c);
      m->nt++;
      if (!blob_set(&c->name, t->name.p, t->name.n) || !blob_set(&c->desc, t->desc.p, t->desc.n)) {
        return false;
      }
      uint8_t suffix = (uint8_t)('0' + mut_rand(rng) % 10);
      blob_resize(&c->name, c->name.n + 1, rng);
      c->name.p[c->name.n - 1] = suffix;
      for (size_t k = 0; k < t->nbuf; k++) {
        if (!blob_set(&c->buf[k], t->buf[k].p, t->buf[k].n)) return false;
        c->nbuf++;
      }
      return true;
    }
    case 8: { /* drop a tensor or a metadata entry */
      if (t != NULL && (m->nm == 0 || mut_rand(rng) % 2)) {
        free(t->name.p);
        free(t->desc.p);
        for (size_t k = 0; k < t->nbuf; k++) free(t->buf[k].p);
        *t = m->t[--m->nt];
        return true;
      }
      if (m->nm == 0) return false;
      MMeta *e = &m->m[mut_rand(rng) % m->nm];
      free(e->key.p);
      free(e->value.p);
      *e = m->m[--m->nm];
      return true;
    }
    case 9: /* one buffer more or fewer than the descriptor has */
      if (t == NULL) return false;
      if (t->nbuf > 0 && mut_rand(rng) % 2) {
        t->nbuf--;
        free(t->buf[t->nbuf].p);
        t->buf[t->nbuf].p = NULL;
        t->buf[t->nbuf].n = 0;
        return true;
      }
      if (t->nbuf >= MODEL_MAX_BUFFERS) return false;
      return blob_resize(&t->buf[t->nbuf++], mut_rand(rng) % 64, rng);
    case 10: { /* another tensor's descriptor */
      if (m->nt < 2) return false;
      MTensor *u = &m->t[mut_rand(rng) % m->nt];
      if (u == t) return false;
      if (!blob_set(&t->desc, u->desc.p, u->desc.n)) return false;
      if (mut_rand(rng) % 2) fit_buffers(t, rng);
      return true;
    }
    default: { /* the header's version and reserved bytes */
      size_t at = 8 + mut_rand(rng) % 56;
      m->header[at] = (uint8_t)mut_rand(rng);
      return true;
    }
  }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  uint64_t rng = 0x9E3779B97F4A7C15ull ^ seed;
  unsigned r = mut_rand(&rng) % 8;
  if (r < 4) {
    Model *m = model_parse(data, size);
    if (m != NULL) {
      size_t n = 0;
      if (mutate_model(m, &rng)) {
        uint8_t *out = malloc(max_size ? max_size : 1);
        if (out != NULL) {
          n = model_write(m, mut_rand(&rng) % 16 != 0, out, max_size);
          if (n > 0) memcpy(data, out, n);
          free(out);
        }
      }
      model_free(m);
      if (n > 0) return n;
    }
  }
  size_t n = LLVMFuzzerMutate(data, size, max_size);
  if (r != 7) reseal(data, n);
  return n;
}

size_t LLVMFuzzerCustomCrossOver(const uint8_t *data1, size_t size1, const uint8_t *data2,
                                 size_t size2, uint8_t *out, size_t max_out_size,
                                 unsigned int seed) {
  uint64_t rng = 0xD1B54A32D192ED03ull ^ seed;
  Model *a = model_parse(data1, size1), *b = model_parse(data2, size2);
  size_t n = 0;
  if (a != NULL && b != NULL) {
    /* Move some of b's entries into a (names may now repeat: fine). */
    for (size_t i = 0; i < b->nt && a->nt < MODEL_MAX_TENSORS; i++) {
      if (mut_rand(&rng) % 2) continue;
      a->t[a->nt++] = b->t[i];
      b->t[i] = b->t[--b->nt];
      i--;
    }
    for (size_t i = 0; i < b->nm && a->nm < MODEL_MAX_METADATA; i++) {
      if (mut_rand(&rng) % 2) continue;
      a->m[a->nm++] = b->m[i];
      b->m[i] = b->m[--b->nm];
      i--;
    }
    n = model_write(a, true, out, max_out_size);
  }
  if (a != NULL) model_free(a);
  if (b != NULL) model_free(b);
  return n;
}

#endif
