/*
 * Reading int32/int64 index entries (page tables, sparse indices) from
 * buffer memory, little-endian, whatever the host's alignment rules.
 */
#ifndef HURRAY_SRC_INDEX_READ_H
#define HURRAY_SRC_INDEX_READ_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline int64_t hurray__index_at(const uint8_t *base, bool wide, uint64_t i) {
  if (wide) {
    uint64_t v = 0;
    for (int k = 0; k < 8; k++) v |= (uint64_t)base[i * 8 + (uint64_t)k] << (8 * k);
    return (int64_t)v;
  }
  uint32_t v = 0;
  for (int k = 0; k < 4; k++) v |= (uint32_t)base[i * 4 + (uint64_t)k] << (8 * k);
  return (int32_t)v;
}

#endif
