/*
 * What the materialising functions (hurray/buffer.h, hurray/quant.h) ask
 * of an output: a size within limits (how large a tensor's logical form may
 * be, compared with what it stores), and memory apart from the tensor's.
 */
#include "../core/checked.h"
#include "../core/error.h"
#include "hurray/buffer.h"
#include "output_limits.h"

HurrayStatus hurray__check_output_bytes(uint64_t stored_bytes, uint64_t output_bytes,
                                        const HurrayOutputLimits *limits, HurrayError *error) {
  static const HurrayOutputLimits defaults = HURRAY_OUTPUT_LIMITS_INIT;
  if (limits == NULL) limits = &defaults;
  if (limits->version != HURRAY_OUTPUT_LIMITS_VERSION) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "output limits: unknown version %u",
                        limits->version);
  }
  if (output_bytes > limits->max_output_bytes) {
    return hurray__fail(
        error, HURRAY_ERR_LIMIT, "the output would take %llu bytes, more than the limit of %llu",
        (unsigned long long)output_bytes, (unsigned long long)limits->max_output_bytes);
  }
  if (limits->max_expansion == 0 || output_bytes <= limits->expansion_floor_bytes) {
    return HURRAY_OK;
  }
  uint64_t allowed;
  if (!hurray__mul_u64(stored_bytes, limits->max_expansion, &allowed)) allowed = UINT64_MAX;
  if (output_bytes > allowed) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "the output would take %llu bytes, more than %u times the %llu bytes "
                        "the tensor stores (and more than %llu): an expansion this large needs "
                        "an explicit output limit",
                        (unsigned long long)output_bytes, limits->max_expansion,
                        (unsigned long long)stored_bytes,
                        (unsigned long long)limits->expansion_floor_bytes);
  }
  return HURRAY_OK;
}

HurrayStatus hurray_check_output_size(const HurrayDescriptor *d, uint64_t output_bytes,
                                      const HurrayOutputLimits *limits, HurrayError *error) {
  if (d == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "d must not be NULL");
  uint64_t stored = 0;
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    if (!hurray__add_u64(stored, hurray_descriptor_buffer_size(d, i), &stored)) {
      stored = UINT64_MAX;
      break;
    }
  }
  return hurray__check_output_bytes(stored, output_bytes, limits, error);
}

HurrayStatus hurray__check_output_apart(const HurrayBufferList *list, const void *out,
                                        uint64_t out_bytes, HurrayError *error) {
  uintptr_t lo = (uintptr_t)out;
  if (out_bytes == 0 || out_bytes > UINTPTR_MAX - lo) return HURRAY_OK;
  for (size_t i = 0; i < hurray_buffer_list_len(list); i++) {
    const HurrayBuffer *b = hurray_buffer_list_get(list, i);
    uintptr_t start = (uintptr_t)hurray_buffer_data(b);
    uint64_t size = hurray_buffer_size(b);
    if (start == 0 || size == 0 || size > UINTPTR_MAX - start) continue;
    if (lo < start + size && start < lo + out_bytes) {
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "out overlaps buffer %zu of the tensor: writing the output would "
                          "change what is still to be read; use separate memory",
                          i);
    }
  }
  return HURRAY_OK;
}
