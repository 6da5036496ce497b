/*
 * An open-addressing set of record indices, keyed by the records' names:
 * each name found in O(1), so that no count of tensors or metadata keys an
 * input can hold makes a writer or a converter quadratic. The set keeps no
 * names itself; `name_of` reads record i's name from the caller's records.
 * Internal: not exported.
 */
#ifndef HURRAY_SRC_CORE_NAME_SET_H
#define HURRAY_SRC_CORE_NAME_SET_H

#include <stddef.h>
#include <stdint.h>

#include "hurray/common.h"

typedef struct HurrayNameSet {
  size_t *slots; /* record index + 1; 0: empty */
  /* The low 32 bits of the hash of each occupied slot's name: a probe
   * compares these before it reads a record and its name (two cache misses
   * each, which at a million tensors were a quarter of a save), and growing
   * places entries again without hashing a single name. */
  uint32_t *tags;
  size_t slot_count; /* a power of two, at least twice the records (0: none yet) */
  /* Drawn when the set first grows: names an input chooses so that their
   * hashes share low bits would otherwise make every probe walk one long
   * run (a quadratic save or conversion from a few MB of names). */
  uint64_t seed;
} HurrayNameSet;

/* Record `index`'s name (`*len` bytes, not NUL-terminated) from `ctx`. */
typedef void (*HurrayNameOf)(const void *ctx, size_t index, const char **name, size_t *len);

/* Room for one more record when the set holds `count`: grows the slots (the
 * set starts zeroed). HURRAY_ERR_NO_MEMORY, the set unchanged, on failure. */
HurrayStatus hurray__name_set_reserve(HurrayNameSet *set, size_t count);

/* The slot where `name` is (holding its record index + 1) or would go (0,
 * its tag set already: the caller stores index + 1 there, or leaves it).
 * The set must have been reserved. */
size_t *hurray__name_set_slot(HurrayNameSet *set, HurrayNameOf name_of, const void *ctx,
                              const char *name, size_t len);

/* `name`'s record index + 1, or 0: a lookup that writes nothing, so
 * several threads may look up at once. */
size_t hurray__name_set_find(const HurrayNameSet *set, HurrayNameOf name_of, const void *ctx,
                             const char *name, size_t len);

void hurray__name_set_free(HurrayNameSet *set);

#endif
