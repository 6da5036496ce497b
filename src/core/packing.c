#include "packing.h"

#include <string.h>

void hurray__unpack_bits(uint32_t bits, const uint8_t *packed, size_t packed_len, uint64_t count,
                         uint8_t *codes) {
  const unsigned mask = (1u << bits) - 1u;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t bit = i * bits;
    uint64_t byte = bit >> 3;
    unsigned off = (unsigned)(bit & 7u);
    unsigned lo = byte < packed_len ? packed[byte] : 0u;
    unsigned hi = byte + 1 < packed_len ? packed[byte + 1] : 0u;
    codes[i] = (uint8_t)(((lo | hi << 8) >> off) & mask);
  }
}

void hurray__pack_bits(uint32_t bits, const uint8_t *codes, uint64_t count, uint8_t *out) {
  const unsigned mask = (1u << bits) - 1u;
  uint64_t len = (count * bits + 7u) / 8u;
  if (len == 0) return; /* out may be NULL */
  memset(out, 0, (size_t)len);
  for (uint64_t i = 0; i < count; i++) {
    uint64_t bit = i * bits;
    uint64_t byte = bit >> 3;
    unsigned off = (unsigned)(bit & 7u);
    unsigned v = (codes[i] & mask) << off;
    out[byte] |= (uint8_t)v;
    if (off + bits > 8u) out[byte + 1] |= (uint8_t)(v >> 8);
  }
}
