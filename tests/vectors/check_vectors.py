#!/usr/bin/env python3
"""Independent check of the hurray golden descriptor vectors.

For every NAME.bin / NAME.json pair in a directory this script

  (a) decodes NAME.bin with the pure-Python decoder below and compares the
      result with json.load(NAME.json) as parsed JSON values;
  (b) encodes json.load(NAME.json) with the pure-Python encoder below and
      compares the bytes with NAME.bin, byte for byte;
  (c) runs a few negative checks of the decoder on mutated copies of
      NAME.bin (in memory only).

It is a second implementation of the descriptor encoding
(docs/spec/descriptor-encoding.md), written against the format rather than
ported from src/core/codec.c, so that the two can catch each other's bugs.
Standard library only; Python 3.9 or newer.

Usage: check_vectors.py [DIRECTORY]   (default: the directory of this file)
Prints one line per vector and exits non-zero if any check fails.
"""

import json
import math
import os
import struct
import sys

# --------------------------------------------------------------- the format

MAGIC = b"HRYD"
VERSION = 1
HEADER = struct.Struct("<4sH")  # magic, version
RECORD_HEADER = struct.Struct("<HI")  # tag, payload length

NO_BUFFER = 0xFFFFFFFF  # "no buffer" on the wire; null in JSON

# Hard limits (include/hurray/common.h).
MAX_RANK = 32
MAX_BUFFERS = 1024
MAX_DEPTH = 8  # composite nesting: the root is depth 0
MAX_MEMBERS = 1024
MAX_NAME_BYTES = 255
MAX_METADATA_BYTES = 1 << 20
MAX_ENCODED_BYTES = 16 << 20

# Record tags. Bit 0 set = required: a decoder that does not know the tag
# must refuse the descriptor; an unknown tag with bit 0 clear is skipped.
T_DTYPE = 0x0011
T_SHAPE = 0x0013
T_STRIDES = 0x0015
T_BYTE_OFFSET = 0x0017
T_DENSE = 0x0021
T_COO = 0x0023
T_CSR = 0x0025
T_CSC = 0x0027
T_BSR = 0x0029
T_PAGED = 0x002B
T_COMPOSITE = 0x002D
T_PER_TENSOR = 0x0031
T_PER_CHANNEL = 0x0033
T_BLOCK = 0x0035
T_NF4 = 0x0037
T_MX = 0x0039
T_BLOCK_CODED = 0x003B
T_QUANT_STORAGE = 0x003D  # packed and two-level fields (ADR-0024)
T_QUANT_SCALES = 0x003F
T_BUFFERS = 0x0041
T_DEVICE = 0x0043
T_SHARD = 0x0045
T_STATISTICS = 0x0050
T_EXTENSION = 0x0052

LAYOUT_TAGS = frozenset((T_DENSE, T_COO, T_CSR, T_CSC, T_BSR, T_PAGED, T_COMPOSITE))
QUANT_TAGS = frozenset((T_PER_TENSOR, T_PER_CHANNEL, T_BLOCK, T_NF4, T_MX, T_BLOCK_CODED))
ROOT_ONLY_TAGS = frozenset((T_BUFFERS, T_DEVICE, T_SHARD, T_STATISTICS, T_EXTENSION))
NODE_TAGS = frozenset((T_DTYPE, T_SHAPE, T_STRIDES, T_BYTE_OFFSET))
EXTRA_QUANT_TAGS = frozenset((T_QUANT_STORAGE, T_QUANT_SCALES))
KNOWN_TAGS = NODE_TAGS | LAYOUT_TAGS | QUANT_TAGS | ROOT_ONLY_TAGS | EXTRA_QUANT_TAGS

# Wire code -> name. Dtype code 0 means "no dtype" where a dtype is optional.
DTYPES = {
    code: name
    for code, name in enumerate(
        (
            "bool", "int8", "int16", "int32", "int64",
            "uint8", "uint16", "uint32", "uint64",
            "float16", "bfloat16", "float32", "float64",
            "complex64", "complex128",
            "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
            "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn",
            "int4", "uint4",
        ),
        start=1,
    )
}
ROLES = {1: "data", 2: "scales", 3: "zero_points", 4: "values", 5: "indices",
         6: "indptr", 7: "page_pool", 8: "page_table", 9: "group_index", 10: "codebook",
         11: "super_scales"}
# Element bits per dtype name (the lanes of a packed word).
DTYPE_BITS = {"bool": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8,
              "uint16": 16, "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16,
              "float32": 32, "float64": 64, "complex64": 64, "complex128": 128,
              "float8_e4m3fn": 8, "float8_e5m2": 8, "float8_e8m0fnu": 8, "float6_e3m2fn": 6,
              "float6_e2m3fn": 6, "float4_e2m1fn": 4, "int4": 4, "uint4": 4}
SUPER_OPS = {1: "multiply", 2: "divide"}
SYNC_MODES = {0: "ready", 1: "stream", 2: "event"}
MEMORY_CLASSES = {1: "host", 2: "host_pinned", 3: "device", 4: "managed"}
MX_ELEMENTS = {1: "fp8_e4m3", 2: "fp8_e5m2", 3: "fp6_e3m2", 4: "fp6_e2m3",
               5: "fp4_e2m1", 6: "int8"}

# Block-coded formats: code -> (name, elements per block). The codes are
# ggml's type numbers (docs/spec/quantization.md, "Block-coded formats").
BLOCK_FORMATS = {3: ("ggml_q4_1", 32), 6: ("ggml_q5_0", 32), 7: ("ggml_q5_1", 32),
                 10: ("ggml_q2_k", 256), 11: ("ggml_q3_k", 256), 12: ("ggml_q4_k", 256),
                 13: ("ggml_q5_k", 256), 14: ("ggml_q6_k", 256), 15: ("ggml_q8_k", 256),
                 16: ("ggml_iq2_xxs", 256), 17: ("ggml_iq2_xs", 256), 18: ("ggml_iq3_xxs", 256),
                 19: ("ggml_iq1_s", 256), 20: ("ggml_iq4_nl", 32), 21: ("ggml_iq3_s", 256),
                 22: ("ggml_iq2_s", 256), 23: ("ggml_iq4_xs", 256), 29: ("ggml_iq1_m", 256),
                 34: ("ggml_tq1_0", 256), 35: ("ggml_tq2_0", 256), 39: ("ggml_mxfp4", 32),
                 40: ("ggml_nvfp4", 64)}
BLOCK_FORMAT_NAMES = {code: name for code, (name, _) in BLOCK_FORMATS.items()}
BLOCK_ELEMENTS = {name: n for name, n in BLOCK_FORMATS.values()}

DEFAULT_DEVICE = {"type": 1, "id": 0, "memory_class": "host"}  # CPU:0, host memory

# Statistics: flag bit, JSON key, value kind -- in wire order.
STATISTICS = (
    (0x1, "min", "f64"),
    (0x2, "max", "f64"),
    (0x4, "nan_count", "u64"),
    (0x8, "zero_count", "u64"),
)


# ------------------------------------------------------------------- errors

class DecodeError(Exception):
    """The bytes are not a descriptor this decoder accepts."""
    status = "error"


class Truncated(DecodeError):
    status = "truncated"


class Malformed(DecodeError):
    status = "malformed"


class Unsupported(DecodeError):
    status = "unsupported"


class LimitExceeded(DecodeError):
    status = "limit"


class EncodeError(Exception):
    """The JSON value does not describe an encodable descriptor."""


# ------------------------------------------------------- scalar field kinds
#
# A record payload is a fixed sequence of fields. Each field kind knows its
# wire size, how to turn wire bytes into the JSON value and back. A field
# without a JSON key is reserved: zero on the wire, refused otherwise.

def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


class Int:
    def __init__(self, code):
        self.st = struct.Struct("<" + code)
        self.size = self.st.size

    def load(self, raw, where):
        return self.st.unpack(raw)[0]

    def dump(self, value, where):
        if not _is_int(value):
            raise EncodeError("%s: expected an integer, got %r" % (where, value))
        try:
            return self.st.pack(value)
        except struct.error:
            raise EncodeError("%s: %r does not fit the field" % (where, value))


class BufferIndex(Int):
    def __init__(self):
        Int.__init__(self, "I")

    def load(self, raw, where):
        value = Int.load(self, raw, where)
        return None if value == NO_BUFFER else value

    def dump(self, value, where):
        if value is None:
            return self.st.pack(NO_BUFFER)
        if _is_int(value) and value == NO_BUFFER:
            raise EncodeError("%s: %d is the no-buffer marker; write null" % (where, value))
        return Int.dump(self, value, where)


class Named(Int):
    """An integer code with a name table; unknown codes mean a newer writer."""

    def __init__(self, code, names, what, optional=False):
        Int.__init__(self, code)
        self.names = names
        self.codes = {name: c for c, name in names.items()}
        self.what = what
        self.optional = optional

    def load(self, raw, where):
        value = Int.load(self, raw, where)
        if self.optional and value == 0:
            return None
        if value not in self.names:
            raise Unsupported("%s: unknown %s code %d" % (where, self.what, value))
        return self.names[value]

    def dump(self, value, where):
        if value is None and self.optional:
            return self.st.pack(0)
        if not isinstance(value, str) or value not in self.codes:
            raise EncodeError("%s: unknown %s %r" % (where, self.what, value))
        return self.st.pack(self.codes[value])


class Float64:
    """IEEE binary64. JSON spells non-finite values as "nan", "inf", "-inf"."""
    size = 8
    st = struct.Struct("<d")

    def load(self, raw, where):
        value = self.st.unpack(raw)[0]
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value

    def dump(self, value, where):
        if isinstance(value, str) and value in ("nan", "inf", "-inf"):
            # JSON keeps neither the sign nor the payload of a NaN: the
            # default quiet NaN is written.
            return self.st.pack(float(value))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EncodeError("%s: expected a number, got %r" % (where, value))
        if isinstance(value, float) and not math.isfinite(value):
            raise EncodeError("%s: non-finite numbers must be written as strings" % where)
        try:
            return self.st.pack(float(value))
        except OverflowError:
            raise EncodeError("%s: %r is out of range for a double" % (where, value))


class Flag:
    """One byte holding 0 or 1."""
    size = 1

    def load(self, raw, where):
        if raw[0] > 1:
            raise Malformed("%s: unknown flag bits 0x%02x" % (where, raw[0]))
        return raw[0] == 1

    def dump(self, value, where):
        if not isinstance(value, bool):
            raise EncodeError("%s: expected true or false, got %r" % (where, value))
        return b"\x01" if value else b"\x00"


class U64Pair:
    size = 16
    st = struct.Struct("<QQ")

    def load(self, raw, where):
        return list(self.st.unpack(raw))

    def dump(self, value, where):
        if not isinstance(value, list) or len(value) != 2 or not all(map(_is_int, value)):
            raise EncodeError("%s: expected two integers, got %r" % (where, value))
        try:
            return self.st.pack(*value)
        except struct.error:
            raise EncodeError("%s: %r does not fit two u64" % (where, value))


U8, U16, U32, U64 = Int("B"), Int("H"), Int("I"), Int("Q")
I32, I64 = Int("i"), Int("q")
BUF = BufferIndex()
F64 = Float64()
DTYPE = Named("H", DTYPES, "dtype")
DTYPE_OR_NONE = Named("H", DTYPES, "dtype", optional=True)
PAD8, PAD16, PAD32 = (None, U8), (None, U16), (None, U32)


def fields_size(fields):
    return sum(kind.size for _, kind in fields)


def load_fields(fields, payload, where):
    """Payload bytes -> dict of the named fields (exact length required)."""
    want = fields_size(fields)
    if len(payload) != want:
        raise Malformed("%s: payload of %d bytes, expected %d" % (where, len(payload), want))
    out = {}
    at = 0
    for key, kind in fields:
        raw = payload[at:at + kind.size]
        at += kind.size
        if key is None:
            if any(raw):
                raise Malformed("%s: reserved bytes are not zero" % where)
        else:
            out[key] = kind.load(raw, "%s.%s" % (where, key))
    return out


def dump_fields(fields, obj, where):
    """Dict -> payload bytes; `obj` must hold exactly the named fields."""
    named = [key for key, _ in fields if key is not None]
    expect_keys(obj, named, where)
    parts = []
    for key, kind in fields:
        if key is None:
            parts.append(bytes(kind.size))
        else:
            parts.append(kind.dump(obj[key], "%s.%s" % (where, key)))
    return b"".join(parts)


def expect_keys(obj, keys, where, optional=()):
    if not isinstance(obj, dict):
        raise EncodeError("%s: expected an object, got %r" % (where, obj))
    missing = [k for k in keys if k not in obj]
    extra = [k for k in obj if k not in keys and k not in optional]
    if missing or extra:
        raise EncodeError("%s: missing keys %s, unexpected keys %s" % (where, missing, extra))


# --------------------------------------------------- layout / quant records

COMPRESSED = [("index_dtype", DTYPE), PAD16, ("values_buffer", BUF), ("nnz", U64),
              ("indptr_buffer", BUF), ("indices_buffer", BUF)]
AFFINE = [("axis", U32), ("scale_buffer", BUF), ("scale_dtype", DTYPE),
          ("zero_point_dtype", DTYPE_OR_NONE), ("zero_point_buffer", BUF),
          ("zero_point", I64)]

# tag -> (JSON keys fixed by the tag, payload fields). COO and composite
# have variable-length payloads and are handled on their own.
FIXED_LAYOUTS = {
    T_DENSE: ({"kind": "dense"}, [("data_buffer", BUF)]),
    T_CSR: ({"kind": "sparse", "format": "csr"}, COMPRESSED),
    T_CSC: ({"kind": "sparse", "format": "csc"}, COMPRESSED),
    T_BSR: ({"kind": "sparse", "format": "bsr"}, COMPRESSED + [("block_shape", U64Pair())]),
    T_PAGED: ({"kind": "paged"},
              [("table_dtype", DTYPE), PAD16, ("axis", U32), ("page_size", U64),
               ("num_pages", U64), ("pool_buffer", BUF), ("table_buffer", BUF)]),
}
COO_HEAD = [("index_dtype", DTYPE), ("canonical", Flag()), PAD8, ("values_buffer", BUF),
            ("nnz", U64)]

QUANTS = {
    T_PER_TENSOR: ({"kind": "per_tensor_affine"}, [("scale", F64), ("zero_point", I64)]),
    T_PER_CHANNEL: ({"kind": "per_channel_affine"}, AFFINE),
    T_BLOCK: ({"kind": "block_affine"}, AFFINE + [("block_size", U64)]),
    T_NF4: ({"kind": "nf4"},
            [("block_size", U64), ("absmax_buffer", BUF), ("absmax_dtype", DTYPE), PAD16]),
    # MX scales are always float8_e8m0fnu, so the record carries no dtype.
    T_MX: ({"kind": "mx"},
           [("element", Named("B", MX_ELEMENTS, "MX element")), PAD8, PAD16, ("axis", U32),
            ("block_size", U32), ("scale_buffer", BUF)]),
    # The block size is the format's, so the record carries no block size;
    # the JSON shows it.
    T_BLOCK_CODED: ({"kind": "block_coded"},
                    [("format", Named("H", BLOCK_FORMAT_NAMES, "block format")), PAD16,
                     ("axis", U32)]),
}

BUFFER_ENTRY = [("role", Named("B", ROLES, "buffer role")),
                ("sync_mode", Named("B", SYNC_MODES, "sync mode")), PAD16,
                ("alignment", U32), ("byte_size", U64)]
DEVICE = [("type", I32), ("id", I32),
          ("memory_class", Named("B", MEMORY_CLASSES, "memory class")), PAD8, PAD16]


def tag_for(table, obj, where):
    """Finds the record tag whose fixed JSON keys match `obj`."""
    if not isinstance(obj, dict):
        raise EncodeError("%s: expected an object, got %r" % (where, obj))
    for tag, (fixed, _) in table.items():
        if all(obj.get(k) == v for k, v in fixed.items()):
            return tag
    return None


def check_zero_point_pair(quant, where):
    """Affine quantization: a zero-point buffer comes with its dtype, and
    then the inline zero point is 0."""
    if (quant["zero_point_buffer"] is None) != (quant["zero_point_dtype"] is None):
        raise Malformed("%s: zero_point_buffer and zero_point_dtype must be both set "
                        "or both absent" % where)
    if quant["zero_point_buffer"] is not None and quant["zero_point"] != 0:
        raise Malformed("%s: inline zero_point must be 0 with a zero-point buffer" % where)


# --------------------------------------- packed and two-level fields (ADR-0024)
#
# QUANT_STORAGE: u8 flags (bit 0: storage axes follow), u8 code word_bits,
# u8 code axis, u8 zero-point word_bits, u8 zero-point axis, 3 reserved,
# i64 zero_point_offset, 32 bytes code lane order, 32 bytes zero-point lane
# order (each: the lanes' entries, then zeros), then `rank` bytes of storage
# axes when flag bit 0 is set.
# QUANT_SCALES: fixed fields below.
QUANT_SCALES = [("axis2", U32), ("group_index_buffer", BUF), ("block_size2", U64),
                ("group_index_dtype", DTYPE_OR_NONE), ("super_scale_dtype", DTYPE_OR_NONE),
                ("super_op", U8), PAD8, PAD16, ("codebook_buffer", BUF),
                ("scale_codebook_buffer", BUF), ("super_scale_buffer", BUF), PAD32,
                ("super_block_size", U64), ("scale_offset", F64)]
STORAGE_KEYS = ("storage_axes", "code_packing", "zero_point_packing", "zero_point_offset")
SCALES_KEYS = ("axis2", "block_size2", "group_index_buffer", "group_index_dtype",
               "codebook_buffer", "scale_codebook_buffer", "super_scale_buffer",
               "super_scale_dtype", "super_block_size", "super_op", "scale_offset")
SCALES_DEFAULTS = {"axis2": 0, "block_size2": 0, "group_index_buffer": None,
                   "group_index_dtype": None, "codebook_buffer": None,
                   "scale_codebook_buffer": None, "super_scale_buffer": None,
                   "super_scale_dtype": None, "super_block_size": 0, "super_op": None,
                   "scale_offset": 0.0}
EXTRA_KINDS = ("per_channel_affine", "block_affine", "nf4")


def lanes_of(word_bits, dtype, where):
    bits = DTYPE_BITS.get(dtype, 0)
    if word_bits not in (8, 16, 32) or bits == 0 or bits >= word_bits or word_bits % bits:
        raise Malformed("%s: %r-bit words do not hold whole lanes of %s" % (where, word_bits,
                                                                             dtype))
    return word_bits // bits


def decode_packing(word_bits, axis, order, dtype, where):
    if word_bits == 0:
        if axis or any(order):
            raise Malformed("%s: axis or order set without word_bits" % where)
        return None
    lanes = lanes_of(word_bits, dtype, where)
    if axis >= MAX_RANK:
        raise Malformed("%s.axis: %d is too large" % (where, axis))
    if sorted(order[:lanes]) != list(range(lanes)) or any(order[lanes:]):
        raise Malformed("%s.order: not a permutation of the lanes, zero-padded" % where)
    out = {"word_bits": word_bits, "axis": axis}
    if list(order[:lanes]) != list(range(lanes)):
        out["order"] = list(order[:lanes])
    return out


def decode_quant_storage(payload, node, quant):
    where = "quantization"
    if len(payload) < 80:
        raise Malformed("%s: QUANT_STORAGE payload of %d bytes" % (where, len(payload)))
    flags = payload[0]
    if flags > 1 or any(payload[5:8]):
        raise Malformed("%s: reserved flag bits or bytes are not zero" % where)
    rank = len(node.get("shape", ()))
    if len(payload) != 80 + (rank if flags else 0):
        raise Malformed("%s: QUANT_STORAGE payload of %d bytes" % (where, len(payload)))
    code = decode_packing(payload[1], payload[2], payload[16:48], node.get("dtype"),
                          where + ".code_packing")
    if payload[3] and quant.get("zero_point_buffer") is None:
        raise Malformed("%s: zero_point_packing without a zero-point buffer" % where)
    zero = decode_packing(payload[3], payload[4], payload[48:80], quant.get("zero_point_dtype"),
                          where + ".zero_point_packing")
    offset = struct.unpack_from("<q", payload, 8)[0]
    if flags:
        axes = list(payload[80:])
        if sorted(axes) != list(range(rank)):
            raise Malformed("%s.storage_axes: not a permutation" % where)
        quant["storage_axes"] = axes
    if code is not None:
        quant["code_packing"] = code
    if zero is not None:
        quant["zero_point_packing"] = zero
    if offset:
        quant["zero_point_offset"] = offset
    if not flags and code is None and zero is None and not offset:
        raise Malformed("%s: QUANT_STORAGE with every field at its default" % where)


def decode_quant_scales(payload, quant):
    where = "quantization"
    raw = load_fields(QUANT_SCALES, payload, where)
    op = raw["super_op"]
    if op > 2:
        raise Unsupported("%s.super_op: unknown operation %d" % (where, op))
    sup = raw["super_scale_buffer"] is not None
    if ((raw["block_size2"] == 0 and raw["axis2"] != 0)
            or (raw["group_index_buffer"] is None) != (raw["group_index_dtype"] is None)
            or sup != (raw["super_scale_dtype"] is not None) or sup != (op != 0)
            or (not sup and raw["super_block_size"] != 0)
            or payload[48:56] == struct.pack("<d", -0.0)):
        raise Malformed("%s: QUANT_SCALES fields set without the field they belong to" % where)
    raw["super_op"] = SUPER_OPS.get(op)
    changed = {k: v for k, v in raw.items() if v != SCALES_DEFAULTS[k] or
               (k == "axis2" and raw["block_size2"])}
    if not changed:
        raise Malformed("%s: QUANT_SCALES with every field at its default" % where)
    if "super_scale_buffer" not in changed:
        changed.pop("super_block_size", None)
    quant.update(changed)


def encode_packing(value, dtype, where):
    if value is None:
        return 0, 0, bytes(32)
    expect_keys(value, ["word_bits", "axis"], where, optional=["order"])
    word_bits, axis = value["word_bits"], value["axis"]
    if not _is_int(word_bits) or not _is_int(axis) or not 0 <= axis < MAX_RANK:
        raise EncodeError("%s: bad word_bits or axis" % where)
    try:
        lanes = lanes_of(word_bits, dtype, where)
    except Malformed as exc:
        raise EncodeError(str(exc))
    order = value.get("order", list(range(lanes)))
    if sorted(order) != list(range(lanes)) or order == list(range(lanes)) and "order" in value:
        raise EncodeError("%s.order: not a non-identity permutation of %d lanes" % (where, lanes))
    return word_bits, axis, bytes(order) + bytes(32 - lanes)


def encode_quant_extra(quant, node):
    """The QUANT_STORAGE and QUANT_SCALES records of `quant` (b"" when unused)."""
    out = b""
    if any(k in quant for k in STORAGE_KEYS):
        where = "quantization"
        cw, ca, co = encode_packing(quant.get("code_packing"), node["dtype"],
                                    where + ".code_packing")
        zw, za, zo = encode_packing(quant.get("zero_point_packing"),
                                    quant.get("zero_point_dtype"), where + ".zero_point_packing")
        axes = quant.get("storage_axes")
        if axes is not None and sorted(axes) != list(range(len(node["shape"]))):
            raise EncodeError("%s.storage_axes: not a permutation" % where)
        offset = quant.get("zero_point_offset", 0)
        if "zero_point_offset" in quant and offset == 0:
            raise EncodeError("%s.zero_point_offset: 0 is written by omission" % where)
        out += record(T_QUANT_STORAGE, bytes([1 if axes is not None else 0, cw, ca, zw, za])
                      + bytes(3) + I64.dump(offset, where + ".zero_point_offset") + co + zo
                      + (bytes(axes) if axes is not None else b""))
    if any(k in quant for k in SCALES_KEYS):
        body = dict(SCALES_DEFAULTS)
        body.update({k: quant[k] for k in SCALES_KEYS if k in quant})
        codes = {name: code for code, name in SUPER_OPS.items()}
        if body["super_op"] is not None and body["super_op"] not in codes:
            raise EncodeError("quantization.super_op: unknown %r" % body["super_op"])
        body["super_op"] = codes.get(body["super_op"], 0)
        out += record(T_QUANT_SCALES, dump_fields(QUANT_SCALES, body, "quantization"))
    return out


# ------------------------------------------------------------------ decoder

class Cursor:
    """Reads a byte string front to back. Running out is `short`: Truncated
    for the record stream and the composite member list, Malformed inside an
    extension record (as src/core/codec.c reports them)."""

    def __init__(self, data, where, short=Truncated):
        self.data = data
        self.at = 0
        self.where = where
        self.short = short

    def left(self):
        return len(self.data) - self.at

    def take(self, n, what):
        if self.left() < n:
            raise self.short("%s: %s is cut short" % (self.where, what))
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def uint(self, n, what):
        return int.from_bytes(self.take(n, what), "little")


def records(data, where):
    """Yields (tag, payload) in order, checking framing and tag order as
    each record is reached."""
    cur = Cursor(data, where)
    previous = -1
    while cur.left():
        if cur.left() < RECORD_HEADER.size:
            raise Truncated("%s: record header is cut short" % where)
        tag, length = RECORD_HEADER.unpack(cur.take(RECORD_HEADER.size, "record header"))
        payload = cur.take(length, "record 0x%04x payload" % tag)
        if tag <= previous:
            raise Malformed("%s: record 0x%04x after 0x%04x; tags must increase"
                            % (where, tag, previous))
        previous = tag
        yield tag, payload


def decode_text(raw, where):
    """Name bytes -> str. Invalid UTF-8 survives as lone surrogates and is
    refused by check_names once the whole descriptor has decoded, so that
    any other error in the bytes is reported first."""
    if b"\x00" in raw:
        raise Malformed("%s: contains a NUL byte" % where)
    return raw.decode("utf-8", "surrogateescape")


def check_names(node, where="descriptor"):
    names = [(where + ".extension.name", node.get("extension", {}).get("name", ""))]
    for i, member in enumerate(node["layout"].get("members", ())):
        names.append(("%s.layout.members[%d].name" % (where, i), member["name"]))
        check_names(member["descriptor"], "%s.layout.members[%d]" % (where, i))
    for what, name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise Malformed("%s: not valid UTF-8" % what)


def decode_u64_list(payload, where, signed=False):
    if len(payload) % 8:
        raise Malformed("%s: payload of %d bytes is not a multiple of 8" % (where, len(payload)))
    count = len(payload) // 8
    if count > MAX_RANK:
        raise LimitExceeded("%s: rank %d exceeds %d" % (where, count, MAX_RANK))
    return list(struct.unpack("<%d%s" % (count, "q" if signed else "Q"), payload))


def decode_layout(tag, payload, rank, depth):
    if tag in FIXED_LAYOUTS:
        fixed, fields = FIXED_LAYOUTS[tag]
        layout = dict(fixed)
        layout.update(load_fields(fields, payload, "layout"))
        return layout
    if tag == T_COO:
        head = fields_size(COO_HEAD)
        if len(payload) != head + 4 * rank:
            raise Malformed("layout.coo: payload of %d bytes for rank %d" % (len(payload), rank))
        layout = {"kind": "sparse", "format": "coo"}
        layout.update(load_fields(COO_HEAD, payload[:head], "layout.coo"))
        layout["index_buffers"] = [BUF.load(payload[i:i + 4], "layout.index_buffers")
                                   for i in range(head, len(payload), 4)]
        return layout
    # T_COMPOSITE: u32 count, then per member u16 name length, name,
    # u32 node length, node. Nothing may follow the last member.
    if depth + 1 > MAX_DEPTH:
        raise LimitExceeded("layout.members: nested deeper than %d" % MAX_DEPTH)
    cur = Cursor(payload, "layout.members")
    count = cur.uint(4, "member count")
    if count > MAX_MEMBERS:
        raise LimitExceeded("layout.members: %d members exceed %d" % (count, MAX_MEMBERS))
    members = []
    for i in range(count):
        where = "layout.members[%d]" % i
        name_len = cur.uint(2, "name length")
        if name_len > MAX_NAME_BYTES:
            raise LimitExceeded("%s: name of %d bytes exceeds %d" % (where, name_len,
                                                                     MAX_NAME_BYTES))
        name = decode_text(cur.take(name_len, "name"), where + ".name")
        node = cur.take(cur.uint(4, "node length"), "node")
        members.append({"name": name,
                        "descriptor": decode_node(node, False, depth + 1, where)})
    if cur.left():
        raise Malformed("layout.members: %d trailing bytes" % cur.left())
    return {"kind": "composite", "members": members}


def decode_quant(tag, payload):
    fixed, fields = QUANTS[tag]
    quant = dict(fixed)
    quant.update(load_fields(fields, payload, "quantization"))
    if tag in (T_PER_CHANNEL, T_BLOCK):
        check_zero_point_pair(quant, "quantization")
    if tag == T_BLOCK_CODED:
        quant["block_size"] = BLOCK_ELEMENTS[quant["format"]]
    return quant


def decode_buffers(payload):
    if len(payload) < 4:
        raise Malformed("buffers: payload of %d bytes has no count" % len(payload))
    count = int.from_bytes(payload[:4], "little")
    if count > MAX_BUFFERS:
        raise LimitExceeded("buffers: %d entries exceed %d" % (count, MAX_BUFFERS))
    size = fields_size(BUFFER_ENTRY)
    if len(payload) != 4 + size * count:
        raise Malformed("buffers: payload of %d bytes for %d entries" % (len(payload), count))
    return [load_fields(BUFFER_ENTRY, payload[4 + i * size:4 + (i + 1) * size],
                        "buffers[%d]" % i) for i in range(count)]


def decode_shard(payload):
    if len(payload) < 4:
        raise Malformed("shard: payload of %d bytes has no rank" % len(payload))
    rank = int.from_bytes(payload[:4], "little")
    if rank > MAX_RANK:
        raise LimitExceeded("shard: rank %d exceeds %d" % (rank, MAX_RANK))
    if len(payload) != 4 + 16 * rank:
        raise Malformed("shard: payload of %d bytes for rank %d" % (len(payload), rank))
    values = struct.unpack("<%dQ" % (2 * rank), payload[4:])
    return {"global_shape": list(values[:rank]), "offsets": list(values[rank:])}


def decode_statistics(payload):
    if len(payload) < 8:
        raise Malformed("statistics: payload of %d bytes has no header" % len(payload))
    flags = payload[0]
    if flags & ~0xF:
        raise Malformed("statistics: unknown flag bits 0x%02x" % flags)
    if any(payload[1:8]):
        raise Malformed("statistics: reserved bytes are not zero")
    present = [(key, kind) for bit, key, kind in STATISTICS if flags & bit]
    if len(payload) != 8 + 8 * len(present):
        raise Malformed("statistics: payload of %d bytes for flags 0x%x" % (len(payload), flags))
    stats = {}
    for i, (key, kind) in enumerate(present):
        raw = payload[8 + 8 * i:16 + 8 * i]
        stats[key] = (F64 if kind == "f64" else U64).load(raw, "statistics." + key)
    return stats


def decode_extension(payload):
    cur = Cursor(payload, "extension", short=Malformed)
    name_len = cur.uint(2, "name length")
    if name_len > MAX_NAME_BYTES:
        raise LimitExceeded("extension.name: %d bytes exceeds %d" % (name_len, MAX_NAME_BYTES))
    name_raw = cur.take(name_len, "name")
    meta_len = cur.uint(4, "metadata length")
    if meta_len > MAX_METADATA_BYTES:
        raise LimitExceeded("extension.metadata: %d bytes exceeds %d"
                            % (meta_len, MAX_METADATA_BYTES))
    if cur.left() != meta_len:
        raise Malformed("extension: %d metadata bytes declared, %d present"
                        % (meta_len, cur.left()))
    name = decode_text(name_raw, "extension.name")
    return {"name": name, "metadata_hex": cur.take(meta_len, "metadata").hex()}


def decode_node(data, root, depth, where):
    """One node's records -> the JSON form of that (sub)descriptor."""
    node = {}
    layout = quant = None
    for tag, payload in records(data, where):
        if tag not in KNOWN_TAGS:
            if tag & 1:
                raise Unsupported("%s: unknown required record 0x%04x" % (where, tag))
            continue  # unknown optional record: skipped
        if tag in ROOT_ONLY_TAGS and not root:
            raise Malformed("%s: record 0x%04x is only allowed at the top level" % (where, tag))
        if tag == T_DTYPE:
            node["dtype"] = load_fields([("dtype", DTYPE)], payload, "dtype")["dtype"]
        elif tag == T_SHAPE:
            node["shape"] = decode_u64_list(payload, "shape")
        elif tag == T_STRIDES:
            strides = decode_u64_list(payload, "strides", signed=True)
            if len(strides) != len(node.get("shape", ())):
                raise Malformed("strides: %d entries for rank %d"
                                % (len(strides), len(node.get("shape", ()))))
            node["strides"] = strides
        elif tag == T_BYTE_OFFSET:
            offset = load_fields([("v", U64)], payload, "byte_offset")["v"]
            if offset:
                node["byte_offset"] = offset
        elif tag in LAYOUT_TAGS:
            if layout is not None:
                raise Malformed("%s: more than one layout record" % where)
            layout = decode_layout(tag, payload, len(node.get("shape", ())), depth)
        elif tag in QUANT_TAGS:
            if quant is not None:
                raise Malformed("%s: more than one quantization record" % where)
            quant = decode_quant(tag, payload)
        elif tag in EXTRA_QUANT_TAGS:
            if quant is None or quant["kind"] not in EXTRA_KINDS:
                raise Malformed("%s: record 0x%04x needs a per-channel, block affine or nf4 "
                                "record before it" % (where, tag))
            if tag == T_QUANT_STORAGE:
                decode_quant_storage(payload, node, quant)
            else:
                decode_quant_scales(payload, quant)
        elif tag == T_BUFFERS:
            node["buffers"] = decode_buffers(payload)
        elif tag == T_DEVICE:
            node["device"] = load_fields(DEVICE, payload, "device")
        elif tag == T_SHARD:
            node["shard"] = decode_shard(payload)
        elif tag == T_STATISTICS:
            stats = decode_statistics(payload)
            if stats:
                node["statistics"] = stats
        elif tag == T_EXTENSION:
            node["extension"] = decode_extension(payload)
    for key, present in (("dtype", "dtype" in node), ("shape", "shape" in node),
                         ("layout", layout is not None),
                         ("buffers", not root or "buffers" in node)):
        if not present:
            raise Malformed("%s: node lacks its %s record" % (where, key))
    node["layout"] = layout
    if quant is not None:
        node["quantization"] = quant
    if root:
        node.setdefault("device", dict(DEFAULT_DEVICE))
    return node


def decode(data):
    """Encoded descriptor bytes -> the JSON form (a dict)."""
    if len(data) > MAX_ENCODED_BYTES:
        raise LimitExceeded("%d bytes exceed %d" % (len(data), MAX_ENCODED_BYTES))
    if len(data) < HEADER.size:
        raise Truncated("%d bytes is shorter than the header" % len(data))
    magic, version = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise Malformed("bad magic %r" % magic)
    if version != VERSION:
        raise Unsupported("encoding version %d (this decoder reads %d)" % (version, VERSION))
    node = decode_node(data[HEADER.size:], True, 0, "descriptor")
    # The C decoder leaves UTF-8 to hurray_descriptor_validate; JSON text
    # cannot carry invalid UTF-8, so this decoder refuses it.
    check_names(node)
    return node


# ------------------------------------------------------------------ encoder

def record(tag, payload):
    return RECORD_HEADER.pack(tag, len(payload)) + payload


def encode_u64_list(values, where, signed=False, limit=MAX_RANK):
    if not isinstance(values, list) or not all(map(_is_int, values)):
        raise EncodeError("%s: expected a list of integers, got %r" % (where, values))
    if len(values) > limit:
        raise EncodeError("%s: %d entries exceed %d" % (where, len(values), limit))
    kind = I64 if signed else U64
    return b"".join(kind.dump(v, "%s[%d]" % (where, i)) for i, v in enumerate(values))


def encode_text(text, where):
    if not isinstance(text, str):
        raise EncodeError("%s: expected a string, got %r" % (where, text))
    raw = text.encode("utf-8")
    if b"\x00" in raw or len(raw) > MAX_NAME_BYTES:
        raise EncodeError("%s: %r is not a valid name" % (where, text))
    return U16.dump(len(raw), where) + raw


def encode_layout(layout, rank, depth):
    tag = tag_for(FIXED_LAYOUTS, layout, "layout")
    if tag is not None:
        fixed, fields = FIXED_LAYOUTS[tag]
        body = {k: v for k, v in layout.items() if k not in fixed}
        return record(tag, dump_fields(fields, body, "layout"))
    if layout.get("kind") == "sparse" and layout.get("format") == "coo":
        head = [key for key, _ in COO_HEAD if key is not None]
        expect_keys(layout, ["kind", "format", "index_buffers"] + head, "layout")
        buffers = layout["index_buffers"]
        if not isinstance(buffers, list) or len(buffers) != rank:
            raise EncodeError("layout.index_buffers: need one entry per dimension (%d)" % rank)
        payload = dump_fields(COO_HEAD, {k: layout[k] for k in head}, "layout")
        payload += b"".join(BUF.dump(b, "layout.index_buffers") for b in buffers)
        return record(T_COO, payload)
    if layout.get("kind") == "composite":
        expect_keys(layout, ["kind", "members"], "layout")
        members = layout["members"]
        if not isinstance(members, list) or len(members) > MAX_MEMBERS:
            raise EncodeError("layout.members: expected a list of at most %d" % MAX_MEMBERS)
        if depth + 1 > MAX_DEPTH:
            raise EncodeError("layout.members: nested deeper than %d" % MAX_DEPTH)
        parts = [U32.dump(len(members), "layout.members")]
        for i, member in enumerate(members):
            where = "layout.members[%d]" % i
            expect_keys(member, ["name", "descriptor"], where)
            node = encode_node(member["descriptor"], False, depth + 1, where)
            parts += [encode_text(member["name"], where + ".name"),
                      U32.dump(len(node), where), node]
        return record(T_COMPOSITE, b"".join(parts))
    raise EncodeError("layout: unknown kind %r" % layout)


def encode_quant(quant, node):
    tag = tag_for(QUANTS, quant, "quantization")
    if tag is None:
        raise EncodeError("quantization: unknown kind %r (omit the key for none)" % quant)
    fixed, fields = QUANTS[tag]
    extra_keys = STORAGE_KEYS + SCALES_KEYS
    body = {k: v for k, v in quant.items() if k not in fixed and k not in extra_keys}
    if quant["kind"] not in EXTRA_KINDS and any(k in quant for k in extra_keys):
        raise EncodeError("quantization: %s takes no packed or two-level fields" % quant["kind"])
    if tag == T_BLOCK_CODED:
        size = body.pop("block_size", None)
        if size != BLOCK_ELEMENTS.get(body.get("format")):
            raise EncodeError("quantization.block_size: %r is not the format's" % size)
    payload = dump_fields(fields, body, "quantization")
    if tag in (T_PER_CHANNEL, T_BLOCK):
        try:
            check_zero_point_pair(body, "quantization")
        except Malformed as exc:
            raise EncodeError(str(exc))
    return record(tag, payload) + encode_quant_extra(quant, node)


def encode_statistics(stats):
    if not isinstance(stats, dict) or not stats:
        raise EncodeError("statistics: expected a non-empty object (omit it when empty)")
    expect_keys(stats, [], "statistics", optional=[key for _, key, _ in STATISTICS])
    flags = 0
    values = b""
    for bit, key, kind in STATISTICS:
        if key in stats:
            flags |= bit
            values += (F64 if kind == "f64" else U64).dump(stats[key], "statistics." + key)
    return record(T_STATISTICS, bytes([flags]) + bytes(7) + values)


def encode_extension(ext):
    expect_keys(ext, ["name", "metadata_hex"], "extension")
    try:
        metadata = bytes.fromhex(ext["metadata_hex"])
    except (TypeError, ValueError):
        raise EncodeError("extension.metadata_hex: not a hex string")
    if len(metadata) > MAX_METADATA_BYTES:
        raise EncodeError("extension.metadata: too large")
    return record(T_EXTENSION, encode_text(ext["name"], "extension.name")
                  + U32.dump(len(metadata), "extension") + metadata)


def encode_node(node, root, depth, where):
    optional = ["strides", "byte_offset", "quantization"]
    required = ["dtype", "shape", "layout"]
    if root:
        required += ["buffers", "device"]
        optional += ["statistics", "shard", "extension"]
    expect_keys(node, required, where, optional)

    shape = node["shape"]
    out = [record(T_DTYPE, DTYPE.dump(node["dtype"], "dtype")),
           record(T_SHAPE, encode_u64_list(shape, "shape"))]
    if "strides" in node:
        if not isinstance(node["strides"], list) or len(node["strides"]) != len(shape):
            raise EncodeError("strides: need one entry per dimension (%d)" % len(shape))
        out.append(record(T_STRIDES, encode_u64_list(node["strides"], "strides", signed=True)))
    if node.get("byte_offset", 0) != 0:  # an offset of 0 is written by omission
        out.append(record(T_BYTE_OFFSET, U64.dump(node["byte_offset"], "byte_offset")))
    out.append(encode_layout(node["layout"], len(shape), depth))
    if "quantization" in node:
        out.append(encode_quant(node["quantization"], node))
    if root:
        buffers = node["buffers"]
        if not isinstance(buffers, list) or len(buffers) > MAX_BUFFERS:
            raise EncodeError("buffers: expected a list of at most %d entries" % MAX_BUFFERS)
        out.append(record(T_BUFFERS, U32.dump(len(buffers), "buffers") + b"".join(
            dump_fields(BUFFER_ENTRY, b, "buffers[%d]" % i) for i, b in enumerate(buffers))))
        device = dump_fields(DEVICE, node["device"], "device")
        if device != dump_fields(DEVICE, DEFAULT_DEVICE, "device"):  # CPU:0 host is implied
            out.append(record(T_DEVICE, device))
        if "shard" in node:
            shard = node["shard"]
            expect_keys(shard, ["global_shape", "offsets"], "shard")
            if not isinstance(shard["global_shape"], list) or not isinstance(
                    shard["offsets"], list) or len(shard["global_shape"]) != len(
                    shard["offsets"]):
                raise EncodeError("shard: global_shape and offsets must be equal-length lists")
            out.append(record(T_SHARD, U32.dump(len(shard["offsets"]), "shard")
                              + encode_u64_list(shard["global_shape"], "shard.global_shape")
                              + encode_u64_list(shard["offsets"], "shard.offsets")))
        if "statistics" in node:
            out.append(encode_statistics(node["statistics"]))
        if "extension" in node:
            out.append(encode_extension(node["extension"]))
    return b"".join(out)


def encode(descriptor):
    """The JSON form (a dict) -> encoded descriptor bytes."""
    data = HEADER.pack(MAGIC, VERSION) + encode_node(descriptor, True, 0, "descriptor")
    if len(data) > MAX_ENCODED_BYTES:
        raise EncodeError("encoding of %d bytes exceeds %d" % (len(data), MAX_ENCODED_BYTES))
    return data


# ---------------------------------------------------------------- comparing

def load_json(path):
    # The C renderer prints doubles with %.17g, so -0.0 reads "-0"; keep its
    # sign instead of letting it become the integer 0. (Integer fields are
    # printed with %llu / %lld / %d, which never produce "-0".)
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f, parse_int=lambda s: -0.0 if s == "-0" else int(s))


def difference(got, want, where="$"):
    """None when `got` (decoded) equals `want` (from JSON), else a reason.
    Types are compared strictly (true is not 1), except that a double with
    an integral value may appear in the JSON as an integer (%.17g)."""
    if isinstance(got, float) and _is_int(want):
        want = float(want)
    if isinstance(got, float) and isinstance(want, float):
        if got == want and math.copysign(1.0, got) == math.copysign(1.0, want):
            return None
        return "%s: decoded %r, JSON has %r" % (where, got, want)
    if type(got) is not type(want):
        return "%s: decoded %r, JSON has %r" % (where, got, want)
    if isinstance(got, dict):
        if set(got) != set(want):
            return "%s: decoded keys %s, JSON keys %s" % (where, sorted(got), sorted(want))
        for key in got:
            reason = difference(got[key], want[key], "%s.%s" % (where, key))
            if reason:
                return reason
        return None
    if isinstance(got, list):
        if len(got) != len(want):
            return "%s: decoded %d entries, JSON has %d" % (where, len(got), len(want))
        for i, (a, b) in enumerate(zip(got, want)):
            reason = difference(a, b, "%s[%d]" % (where, i))
            if reason:
                return reason
        return None
    if got != want:
        return "%s: decoded %r, JSON has %r" % (where, got, want)
    return None


def first_mismatch(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "first difference at byte %d (0x%02x vs 0x%02x)" % (i, x, y)
    return "lengths %d vs %d" % (len(a), len(b))


# ----------------------------------------------------------- negative checks

def top_records(data):
    """(tag, offset of payload, length) of each top-level record."""
    out = []
    at = HEADER.size
    while at + RECORD_HEADER.size <= len(data):
        tag, length = RECORD_HEADER.unpack_from(data, at)
        out.append((tag, at + RECORD_HEADER.size, length))
        at += RECORD_HEADER.size + length
    return out


def patched(data, offset, new):
    return data[:offset] + new + data[offset + len(new):]


def mutations(data):
    """Yields (description, mutated bytes, expected outcome) where the
    outcome is an error class, or "same" for "decodes to the same value"."""
    yield "version 2", patched(data, 4, struct.pack("<H", 2)), Unsupported
    yield "bad magic", patched(data, 0, b"HRYE"), Malformed
    yield "one byte short", data[:-1], Truncated
    yield "empty node", data[:HEADER.size], Malformed
    yield "unknown odd tag", data + record(0x7F01, b"\x00" * 4), Unsupported
    yield "unknown even tag", data + record(0x7F00, b"\xAB" * 5), "same"
    recs = top_records(data)
    yield "tags out of order", data + record(recs[0][0], data[recs[0][1]:recs[0][1] + 2]), Malformed
    for tag, at, length in recs:
        if tag == T_DTYPE:
            yield "dtype code 250", patched(data, at, struct.pack("<H", 250)), Unsupported
            yield "dtype code 0", patched(data, at, struct.pack("<H", 0)), Unsupported
        if tag == T_BUFFERS and length >= 20:
            entry = at + 4
            yield "buffer role 12", patched(data, entry, b"\x0c"), Unsupported
            yield "buffer sync mode 3", patched(data, entry + 1, b"\x03"), Unsupported
            yield "buffer reserved byte", patched(data, entry + 2, b"\x01"), Malformed
        if tag in LAYOUT_TAGS:
            # one extra byte inside the layout record's payload
            end = at + length
            yield ("layout record too long",
                   patched(data, at - 4, struct.pack("<I", length + 1))[:end] + b"\x00"
                   + data[end:], Malformed)
        if tag == T_MX:
            yield "MX element 7", patched(data, at, b"\x07"), Unsupported
        if tag == T_QUANT_STORAGE:
            yield "storage reserved byte", patched(data, at + 5, b"\x01"), Malformed
            yield "storage flag bit 1", patched(data, at, bytes([data[at] | 2])), Malformed
            yield "storage one byte short", patched(data, at - 4, struct.pack(
                "<I", length - 1))[:at + length - 1] + data[at + length:], Malformed
        if tag == T_QUANT_SCALES:
            yield "super_op 3", patched(data, at + 20, b"\x03"), Unsupported
            yield "scales reserved byte", patched(data, at + 21, b"\x01"), Malformed
        if tag == T_BLOCK_CODED:
            yield "block format 9", patched(data, at, b"\x09"), Unsupported
            yield "block-coded reserved", patched(data, at + 2, b"\x01"), Malformed


def negative_checks(data, expected):
    count = 0
    for what, mutated, outcome in mutations(data):
        count += 1
        try:
            result = decode(mutated)
        except DecodeError as exc:
            if outcome == "same" or not isinstance(exc, outcome):
                return count, "%s: decoder said %s (%s)" % (what, exc.status, exc)
            continue
        if outcome != "same":
            return count, "%s: decoder accepted it, expected %s" % (what, outcome.status)
        reason = difference(result, expected)
        if reason:
            return count, "%s: %s" % (what, reason)
    return count, None


# --------------------------------------------------------------------- main

def check_vector(directory, name):
    try:
        with open(os.path.join(directory, name + ".bin"), "rb") as f:
            data = f.read()
        expected = load_json(os.path.join(directory, name + ".json"))
    except (OSError, ValueError) as exc:
        return "cannot read: %s" % exc, 0
    try:
        decoded = decode(data)
    except DecodeError as exc:
        return "decode: %s: %s" % (exc.status, exc), 0
    reason = difference(decoded, expected)
    if reason:
        return "decode: %s" % reason, 0
    try:
        encoded = encode(expected)
    except EncodeError as exc:
        return "encode: %s" % exc, 0
    if encoded != data:
        return "encode: %d bytes differ from the %d of the .bin; %s" % (
            len(encoded), len(data), first_mismatch(encoded, data)), 0
    count, reason = negative_checks(data, expected)
    if reason:
        return "negative check %s" % reason, count
    return None, count


def main(argv):
    if len(argv) > 2:
        print("usage: %s [DIRECTORY]" % argv[0], file=sys.stderr)
        return 2
    directory = argv[1] if len(argv) == 2 else os.path.dirname(os.path.abspath(__file__))
    try:
        files = os.listdir(directory)
    except OSError as exc:
        print("FAIL cannot list %s: %s" % (directory, exc))
        return 1
    names = sorted({os.path.splitext(f)[0] for f in files
                    if f.endswith(".bin") or f.endswith(".json")})
    if not names:
        print("FAIL no vectors in %s" % directory)
        return 1
    failures = 0
    width = max(len(n) for n in names)
    for name in names:
        missing = [ext for ext in (".bin", ".json") if name + ext not in files]
        if missing:
            reason, count = "no %s file" % " or ".join(missing), 0
        else:
            reason, count = check_vector(directory, name)
        if reason:
            failures += 1
            print("FAIL %-*s  %s" % (width, name, reason))
        else:
            print("OK   %-*s  decode, encode, %d negative checks" % (width, name, count))
    print("%d vectors, %d failed" % (len(names), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
