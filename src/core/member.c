#include "member.h"

#include "descriptor_internal.h"
#include "error.h"

typedef struct Renumber {
  const HurrayDescriptor *parent;
  uint32_t *map;
  uint32_t len;
} Renumber;

/* Points *ref at its new index, taking the next one on first use. */
static HurrayStatus renumber(Renumber *r, uint32_t *ref, HurrayError *error) {
  if (*ref == HURRAY_NO_BUFFER) return HURRAY_OK;
  if (*ref >= r->parent->buffer_count) {
    return hurray__fail(error, HURRAY_ERR_BUFFER_INDEX, "member buffer %u is not in the table",
                        *ref);
  }
  for (uint32_t i = 0; i < r->len; i++) {
    if (r->map[i] == *ref) {
      *ref = i;
      return HURRAY_OK;
    }
  }
  r->map[r->len] = *ref;
  *ref = r->len++;
  return HURRAY_OK;
}

static HurrayStatus walk(Renumber *r, HurrayDescriptor *d, HurrayError *error) {
  HurrayLayout *l = &d->layout;
  HurrayQuant *q = &d->quant;
  HurrayStatus s = renumber(r, &l->data_buffer, error);
  if (l->kind == HURRAY_LAYOUT_SPARSE && l->format == HURRAY_SPARSE_COO) {
    for (uint32_t i = 0; s == HURRAY_OK && i < d->rank; i++) {
      s = renumber(r, &l->coo_index_buffers[i], error);
    }
  } else if (l->kind == HURRAY_LAYOUT_SPARSE) {
    if (s == HURRAY_OK) s = renumber(r, &l->indptr_buffer, error);
    if (s == HURRAY_OK) s = renumber(r, &l->indices_buffer, error);
  } else if (l->kind == HURRAY_LAYOUT_PAGED && s == HURRAY_OK) {
    s = renumber(r, &l->table_buffer, error);
  }
  if (s == HURRAY_OK && q->kind != HURRAY_QUANT_NONE &&
      q->kind != HURRAY_QUANT_PER_TENSOR_AFFINE) {
    s = renumber(r, &q->scale_buffer, error);
    if (s == HURRAY_OK) s = renumber(r, &q->zero_point_buffer, error);
  }
  for (uint32_t i = 0; s == HURRAY_OK && l->kind == HURRAY_LAYOUT_COMPOSITE && i < l->member_count;
       i++) {
    s = walk(r, l->members[i].descriptor, error);
  }
  return s;
}

HurrayStatus hurray__member_extract(const HurrayDescriptor *d, const char *name,
                                    HurrayDescriptor **out, uint32_t *map, uint32_t *map_len,
                                    HurrayError *error) {
  if (d == NULL || name == NULL || out == NULL || map == NULL || map_len == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "all arguments are required");
  }
  uint32_t index = 0;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_find_member(d, name, &index, error));
  HurrayDescriptor *m = NULL;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_clone(d->layout.members[index].descriptor, &m, error));
  Renumber r = {d, map, 0};
  HurrayStatus s = walk(&r, m, error);
  for (uint32_t i = 0; s == HURRAY_OK && i < r.len; i++) {
    const HurrayBufferEntry *b = &d->buffers[map[i]];
    s = hurray_descriptor_add_buffer(m, b->role, b->byte_size, b->alignment, b->sync_mode, NULL,
                                     error);
  }
  if (s == HURRAY_OK) {
    s = hurray_descriptor_set_device(m, d->device_type, d->device_id, d->memory_class, error);
  }
  if (s != HURRAY_OK) {
    hurray_descriptor_destroy(m);
    return s;
  }
  *out = m;
  *map_len = r.len;
  return HURRAY_OK;
}
