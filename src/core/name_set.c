/*
 * The name set of name_set.h. Names are hashed with XXH3, as the file's
 * checksums are.
 */
#define _GNU_SOURCE
#include "name_set.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <xxhash.h>

/* A seed no input can predict: the kernel's, else the set's address and the
 * clock (still unknown to a file's author). */
static uint64_t draw_seed(const HurrayNameSet *set) {
  uint64_t seed;
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return XXH3_64bits_withSeed(&ts, sizeof ts, (uint64_t)(uintptr_t)set);
}

static uint32_t tag_of(const HurrayNameSet *set, const char *name, size_t len) {
  return (uint32_t)XXH3_64bits_withSeed(name, len, set->seed);
}

HurrayStatus hurray__name_set_reserve(HurrayNameSet *set, size_t count) {
  if (set->slot_count != 0 && (count + 1) * 2 <= set->slot_count) return HURRAY_OK;
  if (set->slot_count == 0) set->seed = draw_seed(set);
  size_t slot_count = set->slot_count ? set->slot_count * 2 : 64;
  size_t *slots = calloc(slot_count, sizeof *slots);
  uint32_t *tags = calloc(slot_count, sizeof *tags);
  if (slots == NULL || tags == NULL) {
    free(slots);
    free(tags);
    return HURRAY_ERR_NO_MEMORY;
  }
  /* Positions come from the tag: the mask never reaches past bit 31. */
  for (size_t k = 0; k < set->slot_count; k++) {
    if (set->slots[k] == 0) continue;
    size_t h = set->tags[k] & (slot_count - 1);
    while (slots[h] != 0) h = (h + 1) & (slot_count - 1);
    slots[h] = set->slots[k];
    tags[h] = set->tags[k];
  }
  free(set->slots);
  free(set->tags);
  set->slots = slots;
  set->tags = tags;
  set->slot_count = slot_count;
  return HURRAY_OK;
}

/* The position of `name`'s slot, or of the empty slot where it would go. */
static size_t probe(const HurrayNameSet *set, HurrayNameOf name_of, const void *ctx,
                    const char *name, size_t len, uint32_t tag) {
  size_t mask = set->slot_count - 1;
  size_t h = tag & mask;
  for (;;) {
    size_t v = set->slots[h];
    if (v == 0) return h;
    if (set->tags[h] == tag) {
      const char *other;
      size_t other_len;
      name_of(ctx, v - 1, &other, &other_len);
      if (other_len == len && memcmp(other, name, len) == 0) return h;
    }
    h = (h + 1) & mask;
  }
}

size_t *hurray__name_set_slot(HurrayNameSet *set, HurrayNameOf name_of, const void *ctx,
                              const char *name, size_t len) {
  uint32_t tag = tag_of(set, name, len);
  size_t h = probe(set, name_of, ctx, name, len, tag);
  if (set->slots[h] == 0) set->tags[h] = tag;
  return &set->slots[h];
}

size_t hurray__name_set_find(const HurrayNameSet *set, HurrayNameOf name_of, const void *ctx,
                             const char *name, size_t len) {
  if (set->slot_count == 0) return 0;
  uint32_t tag = tag_of(set, name, len);
  return set->slots[probe(set, name_of, ctx, name, len, tag)];
}

void hurray__name_set_free(HurrayNameSet *set) {
  free(set->slots);
  free(set->tags);
  memset(set, 0, sizeof *set);
}
