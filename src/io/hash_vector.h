/*
 * The body of one xxh3 vector unit (hash_avx2.c, hash_avx512.c): each of
 * those sets its target and XXH_VECTOR, includes xxhash.h, and then this
 * with HURRAY_HASH_UNIT set to its suffix and HURRAY_HASH_UNIT_FN to the
 * attribute its compiler needs on every function (clang: the target; GCC:
 * nothing, the pragma covers the file). Everything xxhash.h defines stays
 * static to that file (XXH_INLINE_ALL), so each unit has its own copy of
 * the stripe loop, compiled for its own instructions.
 */
#ifndef HURRAY_HASH_UNIT
#  error "define HURRAY_HASH_UNIT before including hash_vector.h"
#endif

#include <stdint.h>

#define HURRAY_HASH_CAT2(a, b) a##b
#define HURRAY_HASH_CAT(a, b) HURRAY_HASH_CAT2(a, b)
#define HURRAY_HASH_NAME(what) \
  HURRAY_HASH_CAT(HURRAY_HASH_CAT(hurray__xxh3_, HURRAY_HASH_UNIT), what)

uint64_t HURRAY_HASH_NAME(_one)(const void *data, size_t len);
void HURRAY_HASH_NAME(_update)(XXH3_state_t *state, const void *data, size_t len);
uint64_t HURRAY_HASH_NAME(_digest)(const XXH3_state_t *state);

HURRAY_HASH_UNIT_FN uint64_t HURRAY_HASH_NAME(_one)(const void *data, size_t len) {
  return XXH3_64bits(data, len);
}

/* The streaming form (hash.h, HurrayHashStream): the state's layout does
 * not depend on the vector unit, only the code that folds stripes does. */
HURRAY_HASH_UNIT_FN void HURRAY_HASH_NAME(_update)(XXH3_state_t *state, const void *data,
                                                   size_t len) {
  (void)XXH3_64bits_update(state, data, len);
}

HURRAY_HASH_UNIT_FN uint64_t HURRAY_HASH_NAME(_digest)(const XXH3_state_t *state) {
  return XXH3_64bits_digest(state);
}
