/*
 * hurray_validate_buffer_placement: may this list of buffers travel with
 * this descriptor? Consumers run it before touching any buffer (ADR-030 § 3).
 */
#include <stdlib.h>

#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "hurray/buffer.h"

static bool host_addressable(HurrayMemoryClass memory_class) {
  return memory_class != HURRAY_MEMORY_DEVICE;
}

/* Reads entries of the page table and checks each names a pool page. */
static HurrayStatus check_page_table(const HurrayDescriptor *d, const HurrayDescriptor *node,
                                     const HurrayBufferList *list, HurrayError *error) {
  const HurrayLayout *l = &node->layout;
  if (l->kind == HURRAY_LAYOUT_COMPOSITE) {
    for (uint32_t i = 0; i < l->member_count; i++) {
      HURRAY_RETURN_NOT_OK(check_page_table(d, l->members[i].descriptor, list, error));
    }
    return HURRAY_OK;
  }
  if (l->kind != HURRAY_LAYOUT_PAGED) {
    return HURRAY_OK;
  }
  if (d->buffers[l->table_buffer].sync_mode != HURRAY_SYNC_READY) {
    return HURRAY_OK; /* contents not ready to read yet */
  }
  const HurrayBuffer *table = hurray_buffer_list_get(list, l->table_buffer);
  const uint8_t *bytes = hurray_buffer_data(table);
  bool wide = l->index_dtype == HURRAY_DTYPE_INT64;
  /* This node's own entry count (validation proved the product fits); a
   * table shared with a larger node is only read as far as this one uses. */
  uint64_t outer = 1;
  for (uint32_t i = 0; i < l->axis; i++) {
    outer *= node->shape[i];
  }
  uint64_t entries = outer * ((node->shape[l->axis] + l->page_size - 1) / l->page_size);
  for (uint64_t i = 0; i < entries; i++) {
    int64_t page;
    if (wide) {
      uint64_t v = 0;
      for (int k = 0; k < 8; k++) v |= (uint64_t)bytes[i * 8 + k] << (8 * k);
      page = (int64_t)v;
    } else {
      uint32_t v = 0;
      for (int k = 0; k < 4; k++) v |= (uint32_t)bytes[i * 4 + k] << (8 * k);
      page = (int32_t)v;
    }
    if (page < 0 || (uint64_t)page >= l->num_pages) {
      return hurray__fail(error, HURRAY_ERR_PAGE_TABLE_ENTRY,
                          "buffers[%u]: page table entry %llu is %lld, outside the pool of %llu "
                          "pages",
                          l->table_buffer, (unsigned long long)i, (long long)page,
                          (unsigned long long)l->num_pages);
    }
  }
  return HURRAY_OK;
}

HurrayStatus hurray_validate_buffer_placement(const HurrayDescriptor *d,
                                              const HurrayBufferList *list, HurrayError *error) {
  if (d == NULL || list == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor and list are required");
  }
  /* A valid descriptor guarantees each table byte_size covers its contents,
   * so the handles only need to be compared with the table. */
  HURRAY_RETURN_NOT_OK(hurray_descriptor_validate(d, error));
  HurrayStatus status = HURRAY_OK;
  size_t len = hurray_buffer_list_len(list);
  if (len != d->buffer_count) {
    return hurray__fail(error, HURRAY_ERR_BUFFER_COUNT,
                        "buffer list holds %zu buffers, the descriptor's table has %u", len,
                        d->buffer_count);
  }
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    const HurrayBufferEntry *entry = &d->buffers[i];
    const HurrayBuffer *b = hurray_buffer_list_get(list, i);
    uint64_t size = hurray_buffer_size(b);
    const void *data = hurray_buffer_data(b);
    if (size < entry->byte_size) {
      status = hurray__fail(error, HURRAY_ERR_BUFFER_SIZE,
                            "buffers[%u]: the %s buffer holds %llu bytes, the table declares %llu",
                            i, hurray__role_name(entry->role), (unsigned long long)size,
                            (unsigned long long)entry->byte_size);
    } else if ((uintptr_t)data % entry->alignment != 0) {
      status = hurray__fail(error, HURRAY_ERR_BUFFER_ALIGNMENT,
                            "buffers[%u]: pointer %p is not aligned to the %u bytes the table "
                            "requires",
                            i, data, entry->alignment);
    } else if (hurray_buffer_device_type(b) != d->device_type ||
               hurray_buffer_device_id(b) != d->device_id ||
               hurray_buffer_memory_class(b) != d->memory_class) {
      status = hurray__fail(error, HURRAY_ERR_DEVICE_MISMATCH,
                            "buffers[%u]: lives on device %d:%d (%s memory), the descriptor "
                            "says %d:%d (%s memory)",
                            i, (int)hurray_buffer_device_type(b), (int)hurray_buffer_device_id(b),
                            hurray__memory_class_name(hurray_buffer_memory_class(b)),
                            (int)d->device_type, (int)d->device_id,
                            hurray__memory_class_name(d->memory_class));
    } else if (hurray_buffer_sync_mode(b) != entry->sync_mode) {
      status = hurray__fail(error, HURRAY_ERR_SYNC_MODE_MISMATCH,
                            "buffers[%u]: sync_mode %s, the table declares %s", i,
                            hurray__sync_mode_name(hurray_buffer_sync_mode(b)),
                            hurray__sync_mode_name(entry->sync_mode));
    }
    if (status != HURRAY_OK) {
      return status;
    }
  }
  /* Contents are only read when the host may touch them and nobody needs
   * to wait first. */
  if (host_addressable(d->memory_class)) {
    return check_page_table(d, d, list, error);
  }
  return HURRAY_OK;
}
