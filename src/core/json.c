/*
 * hurray_descriptor_to_json: the readable rendering used by the golden
 * vectors (tests/vectors/NAME.json) and by the example. Keys come in a fixed
 * order and absent optional parts are omitted, so the text is as
 * deterministic as the binary encoding.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_locale.h"
#include "descriptor_internal.h"
#include "error.h"

typedef struct Text {
  char *data;
  size_t len;
  size_t capacity;
  bool failed;
} Text;

static void emit(Text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void emit(Text *t, const char *fmt, ...) {
  if (t->failed) {
    return;
  }
  for (;;) {
    va_list args;
    va_start(args, fmt);
    size_t room = t->capacity - t->len;
    int n = vsnprintf(t->data ? t->data + t->len : NULL, room, fmt, args);
    va_end(args);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < room) {
      t->len += (size_t)n;
      return;
    }
    size_t capacity = t->capacity ? t->capacity * 2 : 1024;
    while (capacity - t->len <= (size_t)n) {
      capacity *= 2;
    }
    char *grown = realloc(t->data, capacity);
    if (grown == NULL) {
      t->failed = true;
      return;
    }
    t->data = grown;
    t->capacity = capacity;
  }
}

/* The length of the UTF-8 sequence at p, or 0 where none starts (a name
 * that decodes but does not validate may hold any byte: the JSON stays
 * UTF-8, the byte written as U+FFFD). */
static size_t utf8_at(const unsigned char *p) {
  size_t n = *p < 0x80                  ? 1
             : *p >= 0xC2 && *p <= 0xDF ? 2
             : *p >= 0xE0 && *p <= 0xEF ? 3
             : *p >= 0xF0 && *p <= 0xF4 ? 4
                                        : 0;
  for (size_t k = 1; k < n; k++) {
    if (p[k] == 0) return 0; /* the string ends inside the sequence */
  }
  return n != 0 && hurray__utf8_valid((const char *)p, n) ? n : 0;
}

static void emit_string(Text *t, const char *s) {
  emit(t, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = utf8_at(p);
    if (*p == '"' || *p == '\\') {
      emit(t, "\\%c", *p);
    } else if (*p < 0x20) {
      emit(t, "\\u%04x", *p);
    } else if (n == 0) {
      emit(t, "\\ufffd");
      n = 1;
    } else {
      emit(t, "%.*s", (int)n, (const char *)p);
    }
    p += n ? n : 1;
  }
  emit(t, "\"");
}

/* JSON has no NaN or infinity; those become strings. %.17g round-trips. */
static void emit_double(Text *t, double v) {
  if (isnan(v)) {
    emit(t, "\"nan\"");
  } else if (isinf(v)) {
    emit(t, v > 0 ? "\"inf\"" : "\"-inf\"");
  } else {
    char buf[40];
    hurray__format_double(buf, sizeof buf, v);
    emit(t, "%s", buf);
  }
}

static void emit_dtype(Text *t, HurrayDType dtype) {
  const char *name = hurray_dtype_name(dtype);
  if (name == NULL) {
    emit(t, "null");
  } else {
    emit_string(t, name);
  }
}

static void emit_buffer_index(Text *t, uint32_t index) {
  if (index == HURRAY_NO_BUFFER) {
    emit(t, "null");
  } else {
    emit(t, "%u", index);
  }
}

static void emit_u64_array(Text *t, const uint64_t *v, uint32_t n) {
  emit(t, "[");
  for (uint32_t i = 0; i < n; i++) {
    emit(t, "%s%llu", i ? ", " : "", (unsigned long long)v[i]);
  }
  emit(t, "]");
}

static void indent(Text *t, int level) { emit(t, "\n%*s", level * 2, ""); }

static void emit_node(Text *t, const HurrayDescriptor *d, int level, bool root);

static void emit_layout(Text *t, const HurrayDescriptor *d, int level) {
  const HurrayLayout *l = &d->layout;
  emit(t, "{");
  switch (l->kind) {
    case HURRAY_LAYOUT_DENSE:
      emit(t, "\"kind\": \"dense\", \"data_buffer\": ");
      emit_buffer_index(t, l->data_buffer);
      break;
    case HURRAY_LAYOUT_SPARSE:
      emit(t, "\"kind\": \"sparse\", \"format\": \"%s\", \"index_dtype\": ",
           hurray__sparse_format_name(l->format));
      emit_dtype(t, l->index_dtype);
      emit(t, ", \"nnz\": %llu, \"values_buffer\": ", (unsigned long long)l->nnz);
      emit_buffer_index(t, l->data_buffer);
      if (l->format == HURRAY_SPARSE_COO) {
        emit(t, ", \"index_buffers\": [");
        for (uint32_t i = 0; i < d->rank; i++) {
          emit(t, "%s", i ? ", " : "");
          emit_buffer_index(t, l->coo_index_buffers[i]);
        }
        emit(t, "], \"canonical\": %s", l->canonical ? "true" : "false");
      } else {
        emit(t, ", \"indptr_buffer\": ");
        emit_buffer_index(t, l->indptr_buffer);
        emit(t, ", \"indices_buffer\": ");
        emit_buffer_index(t, l->indices_buffer);
        if (l->format == HURRAY_SPARSE_BSR) {
          emit(t, ", \"block_shape\": [%llu, %llu]", (unsigned long long)l->block_rows,
               (unsigned long long)l->block_cols);
        }
      }
      break;
    case HURRAY_LAYOUT_PAGED:
      emit(t,
           "\"kind\": \"paged\", \"axis\": %u, \"page_size\": %llu, \"num_pages\": %llu, "
           "\"table_dtype\": ",
           l->axis, (unsigned long long)l->page_size, (unsigned long long)l->num_pages);
      emit_dtype(t, l->index_dtype);
      emit(t, ", \"pool_buffer\": ");
      emit_buffer_index(t, l->data_buffer);
      emit(t, ", \"table_buffer\": ");
      emit_buffer_index(t, l->table_buffer);
      break;
    case HURRAY_LAYOUT_COMPOSITE:
      emit(t, "\"kind\": \"composite\", \"members\": [");
      for (uint32_t i = 0; i < l->member_count; i++) {
        emit(t, "%s", i ? "," : "");
        indent(t, level + 2);
        emit(t, "{\"name\": ");
        emit_string(t, l->members[i].name);
        emit(t, ", \"descriptor\": ");
        emit_node(t, l->members[i].descriptor, level + 2, false);
        emit(t, "}");
      }
      indent(t, level + 1);
      emit(t, "]");
      break;
  }
  emit(t, "}");
}

static void emit_packing(Text *t, const char *name, const HurrayQuantPacking *p,
                         HurrayDType dtype) {
  if (p->word_bits == 0) return;
  emit(t, ", \"%s\": {\"word_bits\": %u, \"axis\": %u", name, p->word_bits, p->axis);
  uint32_t lanes = hurray__packing_lanes(p, dtype);
  if (!hurray__packing_is_identity(p, lanes)) {
    emit(t, ", \"order\": [");
    for (uint32_t j = 0; j < lanes; j++) emit(t, "%s%u", j ? ", " : "", p->order[j]);
    emit(t, "]");
  }
  emit(t, "}");
}

/* The packed and two-level fields (ADR-0024), each only when not default. */
static void emit_quant_extra(Text *t, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  const HurrayQuantStorage *qs = hurray__qs(q);
  if (qs->has_storage_axes) {
    emit(t, ", \"storage_axes\": [");
    for (uint32_t k = 0; k < d->rank; k++) emit(t, "%s%u", k ? ", " : "", qs->storage_axes[k]);
    emit(t, "]");
  }
  emit_packing(t, "code_packing", &qs->code_packing, d->dtype);
  emit_packing(t, "zero_point_packing", &qs->zero_point_packing, q->zero_point_dtype);
  if (q->zero_point_offset != 0) {
    emit(t, ", \"zero_point_offset\": %lld", (long long)q->zero_point_offset);
  }
  if (q->block_size2 != 0 || q->axis2 != 0) {
    emit(t, ", \"axis2\": %u, \"block_size2\": %llu", q->axis2,
         (unsigned long long)q->block_size2);
  }
  if (q->group_index_buffer != HURRAY_NO_BUFFER) {
    emit(t, ", \"group_index_buffer\": ");
    emit_buffer_index(t, q->group_index_buffer);
    emit(t, ", \"group_index_dtype\": ");
    emit_dtype(t, q->group_index_dtype);
  }
  if (q->codebook_buffer != HURRAY_NO_BUFFER) {
    emit(t, ", \"codebook_buffer\": ");
    emit_buffer_index(t, q->codebook_buffer);
  }
  if (q->scale_codebook_buffer != HURRAY_NO_BUFFER) {
    emit(t, ", \"scale_codebook_buffer\": ");
    emit_buffer_index(t, q->scale_codebook_buffer);
  }
  if (q->super_scale_buffer != HURRAY_NO_BUFFER) {
    emit(t, ", \"super_scale_buffer\": ");
    emit_buffer_index(t, q->super_scale_buffer);
    emit(t, ", \"super_scale_dtype\": ");
    emit_dtype(t, q->super_scale_dtype);
    if (q->super_block_size != 0) {
      emit(t, ", \"super_block_size\": %llu", (unsigned long long)q->super_block_size);
    }
    emit(t, ", \"super_op\": \"%s\"",
         q->super_op == HURRAY_SUPER_MULTIPLY ? "multiply"
         : q->super_op == HURRAY_SUPER_DIVIDE ? "divide"
                                              : "?");
  }
  if (q->scale_offset != 0.0) {
    emit(t, ", \"scale_offset\": ");
    emit_double(t, q->scale_offset);
  }
}

static void emit_quant(Text *t, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  emit(t, "{\"kind\": \"%s\"", hurray__quant_kind_name(q->kind));
  switch (q->kind) {
    case HURRAY_QUANT_NONE: break;
    case HURRAY_QUANT_PER_TENSOR_AFFINE:
      emit(t, ", \"scale\": ");
      emit_double(t, q->scale);
      emit(t, ", \"zero_point\": %lld", (long long)q->zero_point);
      break;
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
    case HURRAY_QUANT_BLOCK_AFFINE:
      emit(t, ", \"axis\": %u", q->axis);
      if (q->kind == HURRAY_QUANT_BLOCK_AFFINE) {
        emit(t, ", \"block_size\": %llu", (unsigned long long)q->block_size);
      }
      emit(t, ", \"scale_buffer\": ");
      emit_buffer_index(t, q->scale_buffer);
      emit(t, ", \"scale_dtype\": ");
      emit_dtype(t, q->scale_dtype);
      emit(t, ", \"zero_point_buffer\": ");
      emit_buffer_index(t, q->zero_point_buffer);
      emit(t, ", \"zero_point_dtype\": ");
      emit_dtype(t, q->zero_point_dtype);
      emit(t, ", \"zero_point\": %lld", (long long)q->zero_point);
      break;
    case HURRAY_QUANT_NF4:
      emit(t, ", \"block_size\": %llu, \"absmax_buffer\": ", (unsigned long long)q->block_size);
      emit_buffer_index(t, q->scale_buffer);
      emit(t, ", \"absmax_dtype\": ");
      emit_dtype(t, q->scale_dtype);
      break;
    case HURRAY_QUANT_MX:
      emit(t, ", \"element\": \"%s\", \"axis\": %u, \"block_size\": %llu, \"scale_buffer\": ",
           hurray__mx_element_name(q->mx_element), q->axis, (unsigned long long)q->block_size);
      emit_buffer_index(t, q->scale_buffer);
      break;
    case HURRAY_QUANT_BLOCK_CODED: {
      const char *name = "?";
      hurray_block_format_info((uint32_t)q->block_format, NULL, NULL, &name);
      emit(t, ", \"format\": \"%s\", \"axis\": %u, \"block_size\": %llu", name, q->axis,
           (unsigned long long)q->block_size);
      break;
    }
  }
  emit_quant_extra(t, d);
  emit(t, "}");
}

/* long: the node's JSON fields in output order, one short block each, read top to bottom. */
static void emit_node(Text *t, const HurrayDescriptor *d, int level, bool root) {
  emit(t, "{");
  indent(t, level + 1);
  emit(t, "\"dtype\": ");
  emit_dtype(t, d->dtype);
  emit(t, ",");
  indent(t, level + 1);
  emit(t, "\"shape\": ");
  emit_u64_array(t, d->shape, d->rank);
  if (d->strides != NULL) {
    emit(t, ",");
    indent(t, level + 1);
    emit(t, "\"strides\": [");
    for (uint32_t i = 0; i < d->rank; i++) {
      emit(t, "%s%lld", i ? ", " : "", (long long)d->strides[i]);
    }
    emit(t, "]");
  }
  if (d->byte_offset != 0) {
    emit(t, ",");
    indent(t, level + 1);
    emit(t, "\"byte_offset\": %llu", (unsigned long long)d->byte_offset);
  }
  emit(t, ",");
  indent(t, level + 1);
  emit(t, "\"layout\": ");
  emit_layout(t, d, level);
  if (d->quant.kind != HURRAY_QUANT_NONE) {
    emit(t, ",");
    indent(t, level + 1);
    emit(t, "\"quantization\": ");
    emit_quant(t, d);
  }
  if (root) {
    emit(t, ",");
    indent(t, level + 1);
    emit(t, "\"buffers\": [");
    for (uint32_t i = 0; i < d->buffer_count; i++) {
      const HurrayBufferEntry *b = &d->buffers[i];
      emit(t, "%s", i ? "," : "");
      indent(t, level + 2);
      emit(t, "{\"role\": \"%s\", \"byte_size\": %llu, \"alignment\": %u, \"sync_mode\": \"%s\"}",
           hurray__role_name(b->role), (unsigned long long)b->byte_size, b->alignment,
           hurray__sync_mode_name(b->sync_mode));
    }
    if (d->buffer_count > 0) {
      indent(t, level + 1);
    }
    emit(t, "],");
    indent(t, level + 1);
    emit(t, "\"device\": {\"type\": %d, \"id\": %d, \"memory_class\": \"%s\"}",
         (int)d->device_type, (int)d->device_id, hurray__memory_class_name(d->memory_class));
    if (d->stat_flags != 0) {
      emit(t, ",");
      indent(t, level + 1);
      emit(t, "\"statistics\": {");
      const char *sep = "";
      if (d->stat_flags & HURRAY_STAT_MIN) {
        emit(t, "\"min\": ");
        emit_double(t, d->stat_min);
        sep = ", ";
      }
      if (d->stat_flags & HURRAY_STAT_MAX) {
        emit(t, "%s\"max\": ", sep);
        emit_double(t, d->stat_max);
        sep = ", ";
      }
      if (d->stat_flags & HURRAY_STAT_NAN_COUNT) {
        emit(t, "%s\"nan_count\": %llu", sep, (unsigned long long)d->stat_nan_count);
        sep = ", ";
      }
      if (d->stat_flags & HURRAY_STAT_ZERO_COUNT) {
        emit(t, "%s\"zero_count\": %llu", sep, (unsigned long long)d->stat_zero_count);
      }
      emit(t, "}");
    }
    if (d->shard != NULL) {
      emit(t, ",");
      indent(t, level + 1);
      emit(t, "\"shard\": {\"global_shape\": ");
      emit_u64_array(t, d->shard->global, d->shard_rank);
      emit(t, ", \"offsets\": ");
      emit_u64_array(t, d->shard->offsets, d->shard_rank);
      emit(t, "}");
    }
    if (d->extension_name != NULL) {
      emit(t, ",");
      indent(t, level + 1);
      emit(t, "\"extension\": {\"name\": ");
      emit_string(t, d->extension_name);
      emit(t, ", \"metadata_hex\": \"");
      for (size_t i = 0; i < d->extension_metadata_len; i++) {
        emit(t, "%02x", d->extension_metadata[i]);
      }
      emit(t, "\"}");
    }
  }
  indent(t, level);
  emit(t, "}");
}

HurrayStatus hurray_descriptor_to_json(const HurrayDescriptor *d, char **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (d == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor and out are required");
  }
  Text t = {0};
  emit_node(&t, d, 0, true);
  emit(&t, "\n");
  if (t.failed) {
    free(t.data);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory while rendering JSON");
  }
  *out = t.data;
  return HURRAY_OK;
}
