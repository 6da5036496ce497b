/* Scheme names, defaults, and turning options into a resolved scheme. */
#include "scheme.h"

#include <string.h>

#include "../core/error.h"

static const char *const SCHEME_NAMES[] = {
    NULL,         "affine",     "per_channel", "block_affine", "q8_0",  "q4_0",  "nf4",
    "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2",  "mxfp6_e2m3",   "mxfp4", "mxint8"};

#define SCHEME_COUNT (sizeof SCHEME_NAMES / sizeof SCHEME_NAMES[0])

const char *hurray_quant_scheme_name(HurrayQuantScheme scheme) {
  if ((unsigned)scheme == 0 || (unsigned)scheme >= SCHEME_COUNT) return NULL;
  return SCHEME_NAMES[scheme];
}

HurrayStatus hurray_quant_scheme_from_name(const char *name, HurrayQuantScheme *out,
                                           HurrayError *error) {
  if (name == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "name and out must not be NULL");
  }
  for (unsigned i = 1; i < SCHEME_COUNT; i++) {
    if (strcmp(name, SCHEME_NAMES[i]) == 0) {
      *out = (HurrayQuantScheme)i;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                      "unknown quantization scheme '%.64s' (known: affine, per_channel, "
                      "block_affine, q8_0, q4_0, nf4, mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, "
                      "mxfp6_e2m3, mxfp4, mxint8)",
                      name);
}

static bool is_mx(HurrayQuantScheme s) {
  return s >= HURRAY_SCHEME_MXFP8_E4M3 && s <= HURRAY_SCHEME_MXINT8;
}

static bool is_affine(HurrayQuantScheme s) {
  return s == HURRAY_SCHEME_AFFINE || s == HURRAY_SCHEME_PER_CHANNEL ||
         s == HURRAY_SCHEME_BLOCK_AFFINE;
}

HurrayStatus hurray_quantize_options_init(HurrayQuantizeOptions *o, HurrayQuantScheme scheme,
                                          HurrayError *error) {
  if (o == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "options is NULL");
  if (hurray_quant_scheme_name(scheme) == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "unknown quantization scheme %d",
                        (int)scheme);
  }
  *o = (HurrayQuantizeOptions){0};
  o->version = HURRAY_QUANTIZE_OPTIONS_VERSION;
  o->scheme = scheme;
  o->axis = scheme == HURRAY_SCHEME_PER_CHANNEL ? 0 : -1;
  o->block_size = scheme == HURRAY_SCHEME_NF4                                             ? 64
                  : scheme == HURRAY_SCHEME_AFFINE || scheme == HURRAY_SCHEME_PER_CHANNEL ? 0
                                                                                          : 32;
  o->symmetric = -1;
  o->threads = 1;
  static const HurrayDType MX_CODES[] = {HURRAY_DTYPE_FLOAT8_E4M3FN, HURRAY_DTYPE_FLOAT8_E5M2,
                                         HURRAY_DTYPE_FLOAT6_E3M2FN, HURRAY_DTYPE_FLOAT6_E2M3FN,
                                         HURRAY_DTYPE_FLOAT4_E2M1FN, HURRAY_DTYPE_INT8};
  switch (scheme) {
    case HURRAY_SCHEME_Q8_0:
      o->code_dtype = HURRAY_DTYPE_INT8;
      o->scale_dtype = HURRAY_DTYPE_FLOAT16;
      break;
    case HURRAY_SCHEME_Q4_0:
      o->code_dtype = HURRAY_DTYPE_UINT4;
      o->scale_dtype = HURRAY_DTYPE_FLOAT16;
      break;
    case HURRAY_SCHEME_NF4:
      o->code_dtype = HURRAY_DTYPE_UINT4;
      o->scale_dtype = HURRAY_DTYPE_FLOAT32;
      break;
    default:
      if (is_mx(scheme)) {
        o->code_dtype = MX_CODES[scheme - HURRAY_SCHEME_MXFP8_E4M3];
        o->scale_dtype = HURRAY_DTYPE_FLOAT8_E8M0FNU;
      } else {
        o->code_dtype = HURRAY_DTYPE_INT8;
        o->scale_dtype = scheme == HURRAY_SCHEME_AFFINE ? HURRAY_DTYPE_FLOAT64
                                                        : HURRAY_DTYPE_FLOAT32;
      }
      break;
  }
  return HURRAY_OK;
}

static HurrayStatus bad_option(HurrayError *error, const char *scheme, const char *what) {
  return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "%s: %s", scheme, what);
}

/* The affine schemes' code range, symmetry, zero point and scale dtype. */
static HurrayStatus resolve_affine(const HurrayQuantizeOptions *o, const char *name,
                                   HurrayResolvedScheme *r, HurrayError *error) {
  switch (o->code_dtype) {
    case HURRAY_DTYPE_INT8:
      r->qmin = -128;
      r->qmax = 127;
      break;
    case HURRAY_DTYPE_UINT8:
      r->qmin = 0;
      r->qmax = 255;
      break;
    case HURRAY_DTYPE_INT4:
      r->qmin = -8;
      r->qmax = 7;
      break;
    case HURRAY_DTYPE_UINT4:
      r->qmin = 0;
      r->qmax = 15;
      break;
    default: return bad_option(error, name, "codes must be int8, uint8, int4 or uint4");
  }
  if (o->symmetric < -1 || o->symmetric > 1) {
    return bad_option(error, name, "symmetric must be 1, 0 or -1 (the default)");
  }
  bool is_signed = r->qmin < 0;
  r->symmetric = o->symmetric < 0 ? is_signed : o->symmetric != 0;
  r->levels = (r->qmax - r->qmin) / 2; /* 127 or 7 */
  r->zp_symmetric = is_signed ? 0 : r->levels + 1;
  if (o->scheme == HURRAY_SCHEME_AFFINE) {
    if (o->scale_dtype != HURRAY_DTYPE_FLOAT64 && o->scale_dtype != HURRAY_DTYPE_FLOAT32) {
      return bad_option(error, name, "the per-tensor scale is stored inline (float32 value)");
    }
    r->scale_dtype = HURRAY_DTYPE_FLOAT32;
  } else if (o->scale_dtype != HURRAY_DTYPE_FLOAT32 && o->scale_dtype != HURRAY_DTYPE_FLOAT16 &&
             o->scale_dtype != HURRAY_DTYPE_BFLOAT16) {
    return bad_option(error, name, "scales must be float32, float16 or bfloat16");
  }
  if (o->scheme == HURRAY_SCHEME_BLOCK_AFFINE) r->block = o->block_size;
  if (o->scheme == HURRAY_SCHEME_PER_CHANNEL) r->block = 0;
  return HURRAY_OK;
}

/* Options a scheme fixes, set to anything else: refused, never ignored. */
static HurrayStatus check_fixed_options(const HurrayQuantizeOptions *o,
                                        const HurrayQuantizeOptions *def, const char *name,
                                        HurrayError *error) {
  bool ggml = o->scheme == HURRAY_SCHEME_Q8_0 || o->scheme == HURRAY_SCHEME_Q4_0;
  if (ggml || is_mx(o->scheme) || o->scheme == HURRAY_SCHEME_NF4) {
    if (o->code_dtype != def->code_dtype) {
      return bad_option(error, name, "the code dtype is fixed by the scheme");
    }
    if (o->scale_dtype != def->scale_dtype) {
      return bad_option(error, name, "the scale dtype is fixed by the scheme");
    }
  }
  if ((ggml || is_mx(o->scheme)) && o->block_size != 32) {
    return bad_option(error, name, "the block size is fixed at 32");
  }
  if ((o->scheme == HURRAY_SCHEME_AFFINE || o->scheme == HURRAY_SCHEME_PER_CHANNEL) &&
      o->block_size != 0) {
    return bad_option(error, name, "it has no blocks, so no block size");
  }
  if (!is_affine(o->scheme) && o->symmetric != -1) {
    return bad_option(error, name,
                      "its zero point is fixed by the scheme, so no symmetric choice");
  }
  return HURRAY_OK;
}

HurrayStatus hurray__resolve_scheme(const HurrayQuantizeOptions *o, uint32_t rank,
                                    HurrayResolvedScheme *r, HurrayError *error) {
  *r = (HurrayResolvedScheme){0};
  const char *name = hurray_quant_scheme_name(o->scheme);
  if (name == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "unknown quantization scheme %d",
                        (int)o->scheme);
  }
  HurrayQuantizeOptions def;
  HURRAY_RETURN_NOT_OK(hurray_quantize_options_init(&def, o->scheme, error));
  r->scheme = o->scheme;
  r->code_dtype = o->code_dtype;
  r->scale_dtype = o->scale_dtype;
  r->block = o->block_size;

  bool needs_axis = o->scheme != HURRAY_SCHEME_AFFINE && o->scheme != HURRAY_SCHEME_NF4;
  if (needs_axis) {
    if (rank == 0) {
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "%s needs an axis, and a rank-0 tensor has none (use affine or nf4)",
                          name);
    }
    int64_t axis = o->axis < 0 ? (int64_t)o->axis + rank : o->axis;
    if (axis < 0 || axis >= (int64_t)rank) {
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "%s: axis %d is out of range for rank %u", name, (int)o->axis, rank);
    }
    r->axis = (uint32_t)axis;
  }

  bool ggml = o->scheme == HURRAY_SCHEME_Q8_0 || o->scheme == HURRAY_SCHEME_Q4_0;
  HURRAY_RETURN_NOT_OK(check_fixed_options(o, &def, name, error));
  if (ggml && r->axis != rank - 1) {
    return bad_option(error, name, "blocks run along the last axis (GGUF rows)");
  }
  if ((o->scheme == HURRAY_SCHEME_BLOCK_AFFINE || o->scheme == HURRAY_SCHEME_NF4) &&
      o->block_size == 0) {
    return bad_option(error, name, "block_size must be at least 1");
  }

  switch (o->scheme) {
    case HURRAY_SCHEME_Q8_0: r->encoder = HURRAY_ENC_Q8_0; break;
    case HURRAY_SCHEME_Q4_0: r->encoder = HURRAY_ENC_Q4_0; break;
    case HURRAY_SCHEME_NF4: r->encoder = HURRAY_ENC_NF4; break;
    case HURRAY_SCHEME_MXINT8: r->encoder = HURRAY_ENC_MXINT8; break;
    default: r->encoder = is_mx(o->scheme) ? HURRAY_ENC_MXFP : HURRAY_ENC_AFFINE; break;
  }
  if (is_mx(o->scheme)) {
    static const int EMAX[] = {8, 15, 4, 2, 2, 0};
    r->emax = EMAX[o->scheme - HURRAY_SCHEME_MXFP8_E4M3];
    r->element = hurray__minifloat_of(r->code_dtype);
  }

  if (is_affine(o->scheme)) {
    HURRAY_RETURN_NOT_OK(resolve_affine(o, name, r, error));
  } else if (ggml) {
    r->qmin = o->scheme == HURRAY_SCHEME_Q8_0 ? -128 : 0;
    r->qmax = o->scheme == HURRAY_SCHEME_Q8_0 ? 127 : 15;
    r->zp_symmetric = o->scheme == HURRAY_SCHEME_Q8_0 ? 0 : 8;
    r->symmetric = true;
  }
  if (o->scheme == HURRAY_SCHEME_AFFINE) r->block = 0;
  r->code_bits = hurray_dtype_bits(r->code_dtype);
  return HURRAY_OK;
}
