/*
 * HurrayBuffer and HurrayBufferList: ownership of a tensor's allocations.
 *
 * The one invariant everything here protects: a release callback runs
 * exactly once per handle, whichever path ends the handle's life.
 */
#include "hurray/buffer.h"

#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "placement.h"

struct HurrayBuffer {
  void *data;
  uint64_t byte_size;
  uint32_t alignment;
  HurraySyncMode sync_mode;
  void *sync_handle;
  int32_t device_type;
  int32_t device_id;
  HurrayMemoryClass memory_class;
  HurrayReleaseFn release;
  void *release_ctx;
};

/* Most tensors have one to three buffers: their handles live in the list
 * itself, and a longer list moves them to memory of its own. A million
 * loaded tensors then cost one allocation less each (issue 19). */
#define LIST_INLINE 3

struct HurrayBufferList {
  HurrayBuffer **items; /* inline_items, or `capacity` entries owned */
  size_t len;
  size_t capacity;
  HurrayBuffer *inline_items[LIST_INLINE];
};

static void release_data(void *data, HurrayReleaseFn release, void *release_ctx) {
  if (release != NULL) {
    release(data, release_ctx);
  }
}

HurrayPlacedBuffer hurray__placed_host(const void *data, uint64_t byte_size) {
  return (HurrayPlacedBuffer){data, byte_size,          HURRAY_DEVICE_CPU,
                              0,    HURRAY_MEMORY_HOST, HURRAY_SYNC_READY};
}

HurrayStatus hurray_buffer_create(void *data, uint64_t byte_size, HurrayReleaseFn release,
                                  void *release_ctx, HurrayBuffer **out, HurrayError *error) {
  if (out == NULL || (data == NULL && byte_size > 0)) {
    release_data(data, release, release_ctx);
    if (out != NULL) {
      *out = NULL;
    }
    return hurray__fail(
        error, HURRAY_ERR_INVALID_ARGUMENT,
        out == NULL ? "out must not be NULL" : "data must not be NULL for a non-empty buffer");
  }
  *out = NULL;
  HurrayBuffer *b = malloc(sizeof *b);
  if (b == NULL) {
    release_data(data, release, release_ctx);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  HurrayPlacedBuffer host = hurray__placed_host(data, byte_size);
  b->data = data;
  b->byte_size = byte_size;
  b->alignment = 1;
  b->sync_mode = host.sync_mode;
  b->sync_handle = NULL;
  b->device_type = host.device_type;
  b->device_id = host.device_id;
  b->memory_class = host.memory_class;
  b->release = release;
  b->release_ctx = release_ctx;
  *out = b;
  return HURRAY_OK;
}

void hurray_buffer_destroy(HurrayBuffer *buffer) {
  if (buffer == NULL) {
    return;
  }
  release_data(buffer->data, buffer->release, buffer->release_ctx);
  free(buffer);
}

HurrayStatus hurray_buffer_set_alignment(HurrayBuffer *buffer, uint32_t alignment,
                                         HurrayError *error) {
  if (buffer == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "buffer must not be NULL");
  }
  if (!hurray__is_pow2_u64(alignment) || alignment > HURRAY_MAX_ALIGNMENT) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "alignment %u is not a power of two up to %u", alignment,
                        HURRAY_MAX_ALIGNMENT);
  }
  if ((uintptr_t)buffer->data % alignment != 0) {
    return hurray__fail(error, HURRAY_ERR_BUFFER_ALIGNMENT,
                        "pointer %p is not aligned to %u bytes", buffer->data, alignment);
  }
  buffer->alignment = alignment;
  return HURRAY_OK;
}

HurrayStatus hurray_buffer_set_sync(HurrayBuffer *buffer, HurraySyncMode sync_mode,
                                    void *sync_handle, HurrayError *error) {
  if (buffer == NULL || !hurray__sync_mode_known(sync_mode)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "a buffer and a known sync_mode are required");
  }
  if ((sync_mode == HURRAY_SYNC_EVENT) && sync_handle == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "sync_mode EVENT needs the event the consumer waits on");
  }
  buffer->sync_mode = sync_mode;
  buffer->sync_handle = sync_mode == HURRAY_SYNC_READY ? NULL : sync_handle;
  return HURRAY_OK;
}

HurrayStatus hurray_buffer_set_device(HurrayBuffer *buffer, int32_t device_type, int32_t device_id,
                                      HurrayMemoryClass memory_class, HurrayError *error) {
  if (buffer == NULL || !hurray__memory_class_known(memory_class)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "a buffer and a known memory_class are required");
  }
  buffer->device_type = device_type;
  buffer->device_id = device_id;
  buffer->memory_class = memory_class;
  return HURRAY_OK;
}

void *hurray_buffer_data(const HurrayBuffer *buffer) { return buffer->data; }
uint64_t hurray_buffer_size(const HurrayBuffer *buffer) { return buffer->byte_size; }
uint32_t hurray_buffer_alignment(const HurrayBuffer *buffer) { return buffer->alignment; }
HurraySyncMode hurray_buffer_sync_mode(const HurrayBuffer *buffer) { return buffer->sync_mode; }
void *hurray_buffer_sync_handle(const HurrayBuffer *buffer) { return buffer->sync_handle; }
int32_t hurray_buffer_device_type(const HurrayBuffer *buffer) { return buffer->device_type; }
int32_t hurray_buffer_device_id(const HurrayBuffer *buffer) { return buffer->device_id; }
HurrayMemoryClass hurray_buffer_memory_class(const HurrayBuffer *buffer) {
  return buffer->memory_class;
}

/* ------------------------------------------------------------------ list */

HurrayStatus hurray_buffer_list_create(HurrayBufferList **out, HurrayError *error) {
  if (out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "out must not be NULL");
  }
  *out = calloc(1, sizeof **out);
  if (*out == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  (*out)->items = (*out)->inline_items;
  (*out)->capacity = LIST_INLINE;
  return HURRAY_OK;
}

HurrayStatus hurray_buffer_list_push(HurrayBufferList *list, HurrayBuffer *buffer,
                                     HurrayError *error) {
  HurrayStatus status;
  if (list == NULL || buffer == NULL) {
    status = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "list and buffer are required");
    goto fail;
  }
  if (list->len >= HURRAY_MAX_BUFFERS) {
    status = hurray__fail(error, HURRAY_ERR_LIMIT, "a buffer list holds at most %u buffers",
                          HURRAY_MAX_BUFFERS);
    goto fail;
  }
  if (list->len == list->capacity) {
    size_t capacity = list->capacity * 2;
    bool inline_items = list->items == list->inline_items;
    HurrayBuffer **grown = realloc(inline_items ? NULL : list->items, capacity * sizeof *grown);
    if (grown == NULL) {
      status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
      goto fail;
    }
    if (inline_items) memcpy(grown, list->inline_items, sizeof list->inline_items);
    list->items = grown;
    list->capacity = capacity;
  }
  list->items[list->len++] = buffer;
  return HURRAY_OK;

fail:
  hurray_buffer_destroy(buffer);
  return status;
}

size_t hurray_buffer_list_len(const HurrayBufferList *list) {
  return list == NULL ? 0 : list->len;
}

const HurrayBuffer *hurray_buffer_list_get(const HurrayBufferList *list, size_t index) {
  return (list == NULL || index >= list->len) ? NULL : list->items[index];
}

HurrayBuffer *hurray_buffer_list_get_mutable(HurrayBufferList *list, size_t index) {
  return (list == NULL || index >= list->len) ? NULL : list->items[index];
}

void hurray_buffer_list_destroy(HurrayBufferList *list) {
  if (list == NULL) {
    return;
  }
  for (size_t i = 0; i < list->len; i++) {
    hurray_buffer_destroy(list->items[i]);
  }
  if (list->items != list->inline_items) free(list->items);
  free(list);
}
