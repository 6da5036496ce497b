/*
 * hurray_validate_buffer_placement: may this list of buffers travel with
 * this descriptor? Consumers run it before touching any buffer (ADR-030 § 3).
 */
#include <stdlib.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "hurray/buffer.h"
#include "host_access.h"
#include "index_read.h"
#include "placement.h"

static bool host_addressable(HurrayMemoryClass memory_class) {
  return memory_class != HURRAY_MEMORY_DEVICE;
}

HurrayStatus hurray__require_host_ready(const HurrayDescriptor *d, const char *what,
                                        HurrayError *error) {
  if (!host_addressable(d->memory_class)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED, "%s reads host memory only", what);
  }
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    if (d->buffers[i].sync_mode != HURRAY_SYNC_READY) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "%s reads READY buffers only; buffers[%u] is %s (synchronise first)",
                          what, i, hurray__sync_mode_name(d->buffers[i].sync_mode));
    }
  }
  return HURRAY_OK;
}

/* Contents are only read when the host may touch them and nobody needs to
 * wait first. */
static bool readable(const HurrayDescriptor *d, uint32_t buffer) {
  return host_addressable(d->memory_class) && d->buffers[buffer].sync_mode == HURRAY_SYNC_READY;
}

static const uint8_t *bytes_of(const HurrayPlacedBuffer *placed, uint32_t buffer) {
  return placed[buffer].data;
}

/* Every page table entry names a page of the pool. */
static HurrayStatus check_page_table(const HurrayDescriptor *d, const HurrayDescriptor *node,
                                     const HurrayPlacedBuffer *placed, HurrayError *error) {
  const HurrayLayout *l = &node->layout;
  if (!readable(d, l->table_buffer)) return HURRAY_OK;
  const uint8_t *table = bytes_of(placed, l->table_buffer);
  bool wide = l->index_dtype == HURRAY_DTYPE_INT64;
  /* This node's own entry count (validation proved the product fits); a
   * table shared with a larger node is only read as far as this one uses. */
  uint64_t outer = 1;
  for (uint32_t i = 0; i < l->axis; i++) outer *= node->shape[i];
  uint64_t entries = outer * hurray__ceil_div_u64(node->shape[l->axis], l->page_size);
  for (uint64_t i = 0; i < entries; i++) {
    int64_t page = hurray__index_at(table, wide, i);
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

static HurrayStatus check_indices(const HurrayDescriptor *d, uint32_t buffer, bool wide,
                                  uint64_t count, uint64_t bound, const char *what,
                                  const HurrayPlacedBuffer *placed, HurrayError *error) {
  if (!readable(d, buffer)) return HURRAY_OK;
  const uint8_t *p = bytes_of(placed, buffer);
  for (uint64_t k = 0; k < count; k++) {
    int64_t v = hurray__index_at(p, wide, k);
    if (v < 0 || (uint64_t)v >= bound) {
      return hurray__fail(error, HURRAY_ERR_SPARSE_INDEX_BOUNDS,
                          "buffers[%u]: %s %llu is %lld, outside [0, %llu)", buffer, what,
                          (unsigned long long)k, (long long)v, (unsigned long long)bound);
    }
  }
  return HURRAY_OK;
}

/* Index bounds, index pointers running 0..nnz without decreasing, and the
 * order a canonical COO promises. */
static HurrayStatus check_sparse(const HurrayDescriptor *d, const HurrayDescriptor *node,
                                 const HurrayPlacedBuffer *placed, HurrayError *error) {
  const HurrayLayout *l = &node->layout;
  bool wide = l->index_dtype == HURRAY_DTYPE_INT64;
  if (l->format == HURRAY_SPARSE_COO) {
    for (uint32_t dim = 0; dim < node->rank; dim++) {
      HURRAY_RETURN_NOT_OK(check_indices(d, l->coo_index_buffers[dim], wide, l->nnz,
                                         node->shape[dim], "coordinate", placed, error));
    }
    if (!l->canonical) return HURRAY_OK;
    for (uint32_t dim = 0; dim < node->rank; dim++) {
      if (!readable(d, l->coo_index_buffers[dim])) return HURRAY_OK;
    }
    for (uint64_t k = 1; k < l->nnz; k++) {
      int order = 0;
      for (uint32_t dim = 0; dim < node->rank && order == 0; dim++) {
        const uint8_t *p = bytes_of(placed, l->coo_index_buffers[dim]);
        int64_t a = hurray__index_at(p, wide, k - 1), b = hurray__index_at(p, wide, k);
        order = (a > b) - (a < b);
      }
      if (order >= 0) {
        return hurray__fail(
            error, HURRAY_ERR_SPARSE_ORDER, "layout.canonical: COO entry %llu is %s entry %llu",
            (unsigned long long)k, order == 0 ? "a duplicate of" : "out of order after",
            (unsigned long long)(k - 1));
      }
    }
    return HURRAY_OK;
  }
  bool csc = l->format == HURRAY_SPARSE_CSC, bsr = l->format == HURRAY_SPARSE_BSR;
  uint64_t major = csc ? node->shape[1] : node->shape[0];
  uint64_t minor = csc ? node->shape[0] : node->shape[1];
  if (bsr) {
    major /= l->block_rows;
    minor /= l->block_cols;
  }
  if (readable(d, l->indptr_buffer)) {
    const uint8_t *p = bytes_of(placed, l->indptr_buffer);
    int64_t previous = 0;
    for (uint64_t k = 0; k <= major; k++) {
      int64_t v = hurray__index_at(p, wide, k);
      bool bad = k == 0 ? v != 0 : v < previous;
      if (bad || (k == major && (uint64_t)v != l->nnz)) {
        return hurray__fail(error, HURRAY_ERR_SPARSE_INDPTR,
                            "buffers[%u]: index pointer %llu is %lld; pointers must start at 0, "
                            "never decrease and end at nnz = %llu",
                            l->indptr_buffer, (unsigned long long)k, (long long)v,
                            (unsigned long long)l->nnz);
      }
      previous = v;
    }
  }
  return check_indices(d, l->indices_buffer, wide, l->nnz, minor,
                       csc   ? "row index"
                       : bsr ? "block column index"
                             : "column index",
                       placed, error);
}

static HurrayStatus check_contents(const HurrayDescriptor *d, const HurrayDescriptor *node,
                                   const HurrayPlacedBuffer *placed, HurrayError *error) {
  const HurrayLayout *l = &node->layout;
  switch (l->kind) {
    case HURRAY_LAYOUT_COMPOSITE:
      for (uint32_t i = 0; i < l->member_count; i++) {
        HURRAY_RETURN_NOT_OK(check_contents(d, l->members[i].descriptor, placed, error));
      }
      return HURRAY_OK;
    case HURRAY_LAYOUT_PAGED: return check_page_table(d, node, placed, error);
    case HURRAY_LAYOUT_SPARSE: return check_sparse(d, node, placed, error);
    case HURRAY_LAYOUT_DENSE: return HURRAY_OK;
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
  return hurray__validate_placement_of_valid(d, list, error);
}

/* Placed buffers are gathered on the stack up to this many (most tensors
 * have one to three); a longer table takes an allocation. */
#define PLACED_ON_STACK 16

HurrayStatus hurray__validate_placement_of_valid(const HurrayDescriptor *d,
                                                 const HurrayBufferList *list,
                                                 HurrayError *error) {
  size_t len = hurray_buffer_list_len(list);
  if (len != d->buffer_count) {
    return hurray__fail(error, HURRAY_ERR_BUFFER_COUNT,
                        "buffer list holds %zu buffers, the descriptor's table has %u", len,
                        d->buffer_count);
  }
  HurrayPlacedBuffer on_stack[PLACED_ON_STACK];
  HurrayPlacedBuffer *placed = len <= PLACED_ON_STACK
                                   ? on_stack
                                   : malloc(len * sizeof *placed); /* len <= table max */
  if (placed == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < len; i++) {
    const HurrayBuffer *b = hurray_buffer_list_get(list, i);
    placed[i] = (HurrayPlacedBuffer){hurray_buffer_data(b),         hurray_buffer_size(b),
                                     hurray_buffer_device_type(b),  hurray_buffer_device_id(b),
                                     hurray_buffer_memory_class(b), hurray_buffer_sync_mode(b)};
  }
  HurrayStatus status = hurray__validate_placed_of_valid(d, placed, error);
  if (placed != on_stack) free(placed);
  return status;
}

HurrayStatus hurray__validate_placed_of_valid(const HurrayDescriptor *d,
                                              const HurrayPlacedBuffer *placed,
                                              HurrayError *error) {
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    const HurrayBufferEntry *entry = &d->buffers[i];
    const HurrayPlacedBuffer *b = &placed[i];
    if (b->byte_size < entry->byte_size) {
      return hurray__fail(error, HURRAY_ERR_BUFFER_SIZE,
                          "buffers[%u]: the %s buffer holds %llu bytes, the table declares %llu",
                          i, hurray__role_name(entry->role), (unsigned long long)b->byte_size,
                          (unsigned long long)entry->byte_size);
    }
    if ((uintptr_t)b->data % entry->alignment != 0) {
      return hurray__fail(error, HURRAY_ERR_BUFFER_ALIGNMENT,
                          "buffers[%u]: pointer %p is not aligned to the %u bytes the table "
                          "requires",
                          i, b->data, entry->alignment);
    }
    if (b->device_type != d->device_type || b->device_id != d->device_id ||
        b->memory_class != d->memory_class) {
      return hurray__fail(error, HURRAY_ERR_DEVICE_MISMATCH,
                          "buffers[%u]: lives on device %d:%d (%s memory), the descriptor "
                          "says %d:%d (%s memory)",
                          i, (int)b->device_type, (int)b->device_id,
                          hurray__memory_class_name(b->memory_class), (int)d->device_type,
                          (int)d->device_id, hurray__memory_class_name(d->memory_class));
    }
    if (b->sync_mode != entry->sync_mode) {
      return hurray__fail(
          error, HURRAY_ERR_SYNC_MODE_MISMATCH, "buffers[%u]: sync_mode %s, the table declares %s",
          i, hurray__sync_mode_name(b->sync_mode), hurray__sync_mode_name(entry->sync_mode));
    }
  }
  return check_contents(d, d, placed, error);
}
