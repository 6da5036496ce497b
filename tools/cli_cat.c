/*
 * hurray cat [--npy] [--buffer N] [--no-verify] FILE NAME (tools/cli.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* numpy's spelling of the dtypes it has; NULL where numpy has none. */
static const char *npy_descr(HurrayDType t) {
  switch (t) {
    case HURRAY_DTYPE_BOOL: return "|b1";
    case HURRAY_DTYPE_INT8: return "|i1";
    case HURRAY_DTYPE_INT16: return "<i2";
    case HURRAY_DTYPE_INT32: return "<i4";
    case HURRAY_DTYPE_INT64: return "<i8";
    case HURRAY_DTYPE_UINT8: return "|u1";
    case HURRAY_DTYPE_UINT16: return "<u2";
    case HURRAY_DTYPE_UINT32: return "<u4";
    case HURRAY_DTYPE_UINT64: return "<u8";
    case HURRAY_DTYPE_FLOAT16: return "<f2";
    case HURRAY_DTYPE_FLOAT32: return "<f4";
    case HURRAY_DTYPE_FLOAT64: return "<f8";
    case HURRAY_DTYPE_COMPLEX64: return "<c8";
    case HURRAY_DTYPE_COMPLEX128: return "<c16";
    default: return NULL;
  }
}

static int buffer_out_of_range(FILE *err, const char *name, size_t count, long buffer_index) {
  fputs("hurray: ", err);
  hurray_cli_puts_escaped(err, name);
  fprintf(err, " has %zu buffers; --buffer %ld is out of range\n", count, buffer_index);
  return EXIT_FAILURE;
}

/* The piece of a buffer raw_buffer reads at a time. */
#define RAW_PIECE ((uint64_t)1 << 20)

/* --no-verify without --npy: buffer `buffer_index` as it is stored, read
 * in pieces, whatever its bytes say. A damaged index buffer of a sparse
 * tensor fails the tensor's placement check, which refused every one of
 * its buffers, the intact values too; only the descriptor is checked. */
static int raw_buffer(FILE *out, FILE *err, HurrayReader *r, const char *path, const char *name,
                      long buffer_index) {
  HurrayError error = {0};
  HurrayDescriptor *d = NULL;
  size_t tensor = 0;
  if (hurray_reader_get_descriptor(r, name, &d, &error) != HURRAY_OK ||
      hurray_reader_find(r, name, &tensor, &error) != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return hurray_cli_fail_tensor(err, path, name, error.message);
  }
  uint32_t count = hurray_descriptor_buffer_count(d);
  if (buffer_index < 0 || (uint64_t)buffer_index >= count) {
    hurray_descriptor_destroy(d);
    return buffer_out_of_range(err, name, count, buffer_index);
  }
  uint64_t size = hurray_descriptor_buffer_size(d, (uint32_t)buffer_index);
  hurray_descriptor_destroy(d);
  uint8_t *piece = malloc(size < RAW_PIECE ? (size ? (size_t)size : 1) : (size_t)RAW_PIECE);
  if (piece == NULL) return hurray_cli_fail_at(err, path, "out of memory");
  int status = EXIT_SUCCESS;
  for (uint64_t at = 0; at < size && status == EXIT_SUCCESS; at += RAW_PIECE) {
    HurrayReadSpan span = {.tensor = tensor,
                           .buffer = (uint32_t)buffer_index,
                           .offset = at,
                           .length = size - at < RAW_PIECE ? size - at : RAW_PIECE,
                           .dst = piece};
    if (hurray_reader_read_spans(r, &span, 1, 1, &error) != HURRAY_OK) {
      status = hurray_cli_fail_at(err, path, error.message);
    } else if (fwrite(piece, 1, (size_t)span.length, out) != span.length) {
      status = hurray_cli_fail_stdout(err);
    }
  }
  if (status == EXIT_SUCCESS && fflush(out) != 0) status = hurray_cli_fail_stdout(err);
  free(piece);
  return status;
}

/* raw_buffer, then closes `r`. */
static int raw_bytes(FILE *out, FILE *err, HurrayReader *r, const char *path, const char *name,
                     long buffer_index) {
  int status = raw_buffer(out, err, r, path, name, buffer_index);
  hurray_reader_close(r);
  return status;
}

int hurray_cli_cat(FILE *out, FILE *err, const char *path, const char *name, long buffer_index,
                   bool npy, bool verify) {
  HurrayError error = {0};
  HurrayReader *r = hurray_cli_open(err, path, &error);
  if (r == NULL) return EXIT_FAILURE;
  if (!verify && !npy) return raw_bytes(out, err, r, path, name, buffer_index); /* closes r */
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  int status = EXIT_SUCCESS;
  /* Bytes on stdout are used as they come: a damaged tensor's bytes would
   * pass for data. verify and convert check; so does cat, one tensor. */
  HurrayStatus checked = verify ? hurray_reader_verify(r, name, &error) : HURRAY_OK;
  if (checked == HURRAY_ERR_CHECKSUM) {
    fputs("hurray: ", err);
    hurray_cli_puts_escaped(err, path);
    fputs(": ", err);
    hurray_cli_puts_message(err, error.message);
    fputs("; the file is damaged (--no-verify writes the bytes anyway)\n", err);
    status = EXIT_FAILURE;
  } else if (checked != HURRAY_OK ||
             hurray_reader_get_tensor(r, name, &d, &list, &error) != HURRAY_OK) {
    status = hurray_cli_fail_tensor(err, path, name, error.message);
  } else if (buffer_index < 0 || (size_t)buffer_index >= hurray_buffer_list_len(list)) {
    status = buffer_out_of_range(err, name, hurray_buffer_list_len(list), buffer_index);
  } else {
    const HurrayBuffer *b = hurray_buffer_list_get(list, (size_t)buffer_index);
    const char *descr = npy_descr(hurray_descriptor_dtype(d));
    uint64_t size = hurray_buffer_size(b);
    char *header = NULL;
    size_t header_len = 0;
    if (npy) {
      uint64_t numel = 0, bytes = 0;
      if (hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_DENSE ||
          hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE ||
          hurray_descriptor_strides(d) != NULL || hurray_descriptor_byte_offset(d) != 0 ||
          descr == NULL || buffer_index != 0) {
        fputs("hurray: --npy needs an unquantized, dense, row-major tensor of a numpy dtype; ",
              err);
        hurray_cli_puts_escaped(err, name);
        fprintf(err, " is %s %s (use raw output instead)\n", hurray_cli_layout_name(d),
                hurray_dtype_name(hurray_descriptor_dtype(d)));
        status = EXIT_FAILURE;
      } else if (hurray_cli_npy_header(d, descr, hurray_dtype_bits(hurray_descriptor_dtype(d)) / 8,
                                       &header, &header_len, &error) != HURRAY_OK) {
        status = hurray_cli_fail_at(err, path, error.message);
      } else if (hurray_descriptor_numel(d, &numel, &error) != HURRAY_OK ||
                 hurray_dtype_storage_bytes(hurray_descriptor_dtype(d), numel, &bytes) !=
                     HURRAY_OK) {
        status = hurray_cli_fail_tensor(err, path, name,
                                        "the tensor's byte size does not fit in 64 bits");
      } else if (bytes > size) {
        /* Validation guarantees the buffer holds the tensor; belt and braces. */
        status = hurray_cli_fail_tensor(err, path, name,
                                        "the data buffer is smaller than the tensor");
      } else {
        /* The buffer may hold padding past the tensor: a .npy holds exactly
         * the tensor's bytes. */
        size = bytes;
      }
    }
    if (status == EXIT_SUCCESS) {
      if ((header_len > 0 && fwrite(header, 1, header_len, out) != header_len) ||
          (size > 0 && fwrite(hurray_buffer_data(b), 1, (size_t)size, out) != size) ||
          fflush(out) != 0) {
        status = hurray_cli_fail_stdout(err);
      }
    }
    free(header);
  }
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
  return status;
}
