"""safetensors and GGUF files written by hand from the formats' specs, with
numpy and struct only: the inputs of the fresh-venv check (check_fresh.py),
where neither the safetensors nor the gguf package is installed.

The layouts are those the reference writers produce, so that a converter
that writes canonical files gives back these bytes exactly:
  safetensors (github.com/huggingface/safetensors, docs "format"): u64 LE
    header length N, N bytes of compact JSON ({"__metadata__": {...}} first,
    then every tensor as {"dtype", "shape", "data_offsets"}), padded with
    spaces to a multiple of 8; then the data. safetensors' serializer orders
    the tensors by dtype (widest first, in its enum order) then by name, and
    lays the data out in that order with no gaps.
  GGUF v3 (github.com/ggml-org/ggml, docs/gguf.md): magic, version, tensor
    and KV counts; the KV pairs; the tensor infos (dims innermost first,
    ggml type, offset from the data section); padding to general.alignment
    (32) before the data and after every tensor.
peer_inputs.py checks these writers against the safetensors and gguf
packages, byte for byte, where they are installed.
"""

import json
import struct

import numpy as np

# safetensors' Dtype enum, in declaration order (its sort order).
_ST_DTYPE_ORDER = [
    "BOOL",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
    "U8",
    "I8",
    "F8_E5M2",
    "F8_E4M3",
    "F8_E8M0",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "F64",
    "I64",
    "U64",
]


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype string, shape list, raw little-endian bytes)}."""
    order = sorted(tensors, key=lambda n: (-_ST_DTYPE_ORDER.index(tensors[n][0]), n))
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        dtype, shape, data = tensors[name]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(tensors[name][2])


# ggml_type values (ggml.h) and GGUF value types (gguf.md).
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
_SCALAR = {GGUF_UINT32: "<I", GGUF_INT32: "<i", GGUF_FLOAT32: "<f", GGUF_BOOL: "<?"}
GGUF_ALIGNMENT = 32


def _gguf_string(text):
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _gguf_value(vtype, value, sub_type=None):
    if vtype == GGUF_STRING:
        return _gguf_string(value)
    if vtype == GGUF_ARRAY:
        out = struct.pack("<IQ", sub_type, len(value))
        return out + b"".join(_gguf_value(sub_type, v) for v in value)
    return struct.pack(_SCALAR[vtype], value)


def write_gguf(path, kvs, tensors):
    """kvs: [(key, GGUF type, value[, array sub-type])], in file order.
    tensors: [(name, ggml type, dims innermost first, raw bytes)]."""
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, value, *sub in kvs:
        out += _gguf_string(key) + struct.pack("<I", vtype)
        out += _gguf_value(vtype, value, *sub)
    offset = 0
    for name, ggml_type, dims, data in tensors:
        out += _gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += len(data) + (-len(data) % GGUF_ALIGNMENT)
    out += b"\0" * (-len(out) % GGUF_ALIGNMENT)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % GGUF_ALIGNMENT)
    with open(path, "wb") as f:
        f.write(out)


# ------------------------------------------------------------------ contents


def _rng():
    return np.random.default_rng(20261201)


def safetensors_contents():
    """(tensors, metadata) of the check file: bf16, f16, f32, int8 and both
    fp8 dtypes (raw bit patterns, NaN codes left out), and __metadata__."""
    rng = _rng()
    f32 = rng.standard_normal((2, 3)).astype("<f4")
    bf16 = (rng.standard_normal((4, 8)).astype("<f4").view("<u4") >> 16).astype("<u2")
    f16 = rng.standard_normal((3, 5)).astype("<f2")
    i8 = rng.integers(-128, 128, 7).astype("i1")
    e4m3 = rng.integers(0, 0x7F, 16).astype("u1")  # 0x7f / 0xff are NaN
    e4m3[::2] |= 0x80
    e5m2 = rng.integers(0, 0x7C, (2, 4)).astype("u1")  # below inf / NaN
    tensors = {
        "model.embed.weight": ("BF16", [4, 8], bf16.tobytes()),
        "model.norm.weight": ("F16", [3, 5], f16.tobytes()),
        "model.proj.bias": ("F32", [2, 3], f32.tobytes()),
        "model.codes": ("I8", [7], i8.tobytes()),
        "model.fp8.e4m3": ("F8_E4M3", [16], e4m3.tobytes()),
        "model.fp8.e5m2": ("F8_E5M2", [2, 4], e5m2.tobytes()),
    }
    return tensors, {"format": "pt"}


def _f16_scales(rng, n):
    return (rng.random(n) * 0.02 + 0.001).astype("<f2")


def q8_0_blocks(rng, n_blocks):
    """n_blocks blocks of ggml's block_q8_0: f16 scale, 32 int8 codes."""
    out = bytearray()
    for d in _f16_scales(rng, n_blocks):
        out += d.tobytes() + rng.integers(-127, 128, 32).astype("i1").tobytes()
    return bytes(out)


def q4_0_blocks(rng, n_blocks):
    """n_blocks blocks of ggml's block_q4_0: f16 scale, 16 bytes of nibbles."""
    out = bytearray()
    for d in _f16_scales(rng, n_blocks):
        out += d.tobytes() + rng.integers(0, 256, 16).astype("u1").tobytes()
    return bytes(out)


def gguf_contents():
    """(kvs, tensors) of the check file: Q8_0, Q4_0, F16 and F32 tensors and
    KV pairs of several types, general.architecture first as gguf writes it."""
    rng = _rng()
    kvs = [
        ("general.architecture", GGUF_STRING, "llama"),
        ("general.name", GGUF_STRING, "hurray wheel check"),
        ("llama.context_length", GGUF_UINT32, 64),
        ("llama.rope.freq_base", GGUF_FLOAT32, 10000.0),
        ("tokenizer.ggml.tokens", GGUF_ARRAY, ["<s>", "</s>", "a", "b"], GGUF_STRING),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, [3, 3, 1, 1], GGUF_INT32),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, True),
    ]
    tensors = [
        ("token_embd.weight", GGML_Q8_0, [64, 2], q8_0_blocks(rng, 4)),
        ("blk.0.attn_q.weight", GGML_Q4_0, [32, 3], q4_0_blocks(rng, 3)),
        (
            "blk.0.ffn_norm.weight",
            GGML_F16,
            [8, 2],
            rng.standard_normal(16).astype("<f2").tobytes(),
        ),
        ("output_norm.weight", GGML_F32, [5], rng.standard_normal(5).astype("<f4").tobytes()),
    ]
    return kvs, tensors


def write_check_files(folder):
    """Writes hand.safetensors and hand.gguf into folder; returns their paths."""
    import os

    st = os.path.join(folder, "hand.safetensors")
    gg = os.path.join(folder, "hand.gguf")
    write_safetensors(st, *safetensors_contents())
    write_gguf(gg, *gguf_contents())
    return st, gg
