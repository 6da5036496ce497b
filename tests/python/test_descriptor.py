"""hurray.Descriptor: every dtype, layout, quantization kind and optional
part survives encode -> decode with identical bytes; the golden vectors of
tests/vectors decode to their JSON and are rebuilt byte for byte from
Python; validate() names the broken rule with the C status name."""

import copy
import json
import math
import pathlib
import pickle
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hurray
from hurray import (
    BlockAffine,
    BlockCoded,
    Buffer,
    Composite,
    Dense,
    Descriptor,
    Device,
    Extension,
    Member,
    Mxfp,
    Nf4,
    Packing,
    Paged,
    PerChannelAffine,
    PerTensorAffine,
    Shard,
    Sparse,
    Statistics,
    _dtypes,
)
from hurray._descriptor import _FIELDS

VECTORS = pathlib.Path(__file__).resolve().parents[1] / "vectors"

MX_DTYPE = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "fp6_e3m2": "float6_e3m2fn",
    "fp6_e2m3": "float6_e2m3fn",
    "fp4_e2m1": "float4_e2m1fn",
    "int8": "int8",
}


def B(role, byte_size, alignment=64, sync_mode="ready"):
    """A buffer table entry; 64-byte alignment, as the golden vectors use."""
    return Buffer(role, byte_size, alignment, sync_mode)


def nbytes(dtype, count):
    return _dtypes.storage_bytes(dtype, count)


def assert_round_trip(d: Descriptor):
    encoded = d.encode()
    assert isinstance(encoded, bytes) and encoded[:4] == b"HRYD"
    back = Descriptor.decode(encoded)
    assert back == d
    assert hash(back) == hash(d)
    assert back.encode() == encoded  # identical bytes
    assert Descriptor.decode(bytearray(encoded)).encode() == encoded
    # Field by field, not only by encoding.
    assert back.to_dict() == d.to_dict()
    assert back.dtype == d.dtype and back.shape == d.shape
    assert back.layout == d.layout
    assert back.quantization == d.quantization
    assert back.buffers == d.buffers
    assert back.device == d.device
    assert back.statistics == d.statistics
    assert back.shard == d.shard
    assert back.extension == d.extension
    # The dict form and the C JSON rendering both lead back to the same bytes.
    assert Descriptor.from_dict(d.to_dict()).encode() == encoded
    assert Descriptor.from_dict(json.loads(d.to_json())).encode() == encoded
    return back


# ------------------------------------------------------------------ dtypes


def test_dtypes_cover_the_format():
    assert set(hurray.DTYPES) == {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e8m0fnu",
        "float6_e3m2fn",
        "float6_e2m3fn",
        "float4_e2m1fn",
        "int4",
        "uint4",
    }


@pytest.mark.parametrize("dtype", hurray.DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 3, 4)])
def test_every_dtype_round_trips(dtype, shape):
    count = math.prod(shape)
    d = Descriptor(dtype, shape, buffers=[B("data", nbytes(dtype, count))])
    d.validate()
    assert_round_trip(d)
    assert d.required_bytes() == [nbytes(dtype, count)]
    assert json.loads(d.to_json())["dtype"] == dtype


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError):
        Descriptor("float128", (2,), buffers=[B("data", 32)])


# ----------------------------------------------------------------- layouts


def dense_strided():
    return Descriptor("float64", (3, 2), strides=(1, -3), byte_offset=24, buffers=[B("data", 48)])


def sparse(fmt):
    if fmt == "coo":
        return Descriptor(
            "float32",
            (4, 5, 6),
            layout=Sparse(
                "coo", "int64", 3, values_buffer=0, index_buffers=(1, 2, 3), canonical=True
            ),
            buffers=[B("values", 12)] + [B("indices", 24)] * 3,
        )
    if fmt == "bsr":
        return Descriptor(
            "float16",
            (4, 6),
            layout=Sparse("bsr", "int64", 3, 0, 1, 2, block_shape=(2, 3)),
            buffers=[B("values", 36), B("indptr", 24), B("indices", 24)],
        )
    return Descriptor(
        "float64",
        (3, 4),
        layout=Sparse(fmt, "int32", 5, 0, 1, 2),
        buffers=[B("values", 40), B("indptr", (4 if fmt == "csr" else 5) * 4), B("indices", 20)],
    )


def paged():
    return Descriptor(
        "bfloat16",
        (2, 40, 4, 8),
        layout=Paged(1, 16, 8, "int32", 0, 1),
        buffers=[B("page_pool", 8 * 16 * 4 * 8 * 2), B("page_table", 2 * 3 * 4)],
    )


def composite():
    base = Descriptor(
        "int8", (8, 4), layout=Dense(0), quantization=PerChannelAffine(0, 1, "float32")
    )
    a = Descriptor("float32", (8, 2), layout=Dense(2))
    b = Descriptor("float32", (2, 4), layout=Dense(3))
    return Descriptor(
        "float32",
        (8, 4),
        layout=Composite((Member("base", base), Member("lora_a", a), Member("lora_b", b))),
        buffers=[B("data", 32), B("scales", 32), B("data", 64), B("data", 32)],
    )


def nested_composite():
    inner = Descriptor(
        "float32",
        (2, 2),
        layout=Composite(
            (
                Member("x", Descriptor("float32", (2, 2), layout=Dense(0))),
                Member("y", Descriptor("float32", (2, 2), layout=Dense(1))),
            )
        ),
    )
    return Descriptor(
        "float32",
        (2, 2),
        layout=Composite(
            (
                Member("pair", inner),
                Member(
                    "kv", Descriptor("float16", (1, 4, 2), layout=Paged(1, 2, 2, "int64", 2, 3))
                ),
                Member(
                    "sparse",
                    Descriptor("float32", (2, 2), layout=Sparse("csr", "int32", 1, 4, 5, 6)),
                ),
            )
        ),
        buffers=[
            B("data", 16),
            B("data", 16),
            B("page_pool", 16),
            B("page_table", 16),
            B("values", 4),
            B("indptr", 12),
            B("indices", 4),
        ],
    )


LAYOUTS = {
    "dense": lambda: Descriptor("float32", (2, 3), buffers=[B("data", 24)]),
    "dense_data_buffer_1": lambda: Descriptor(
        "float32", (2,), layout=Dense(1), quantization=None, buffers=[B("data", 4), B("data", 8)]
    ),
    "dense_strided": dense_strided,
    "dense_scalar": lambda: Descriptor("bool", (), buffers=[B("data", 1)]),
    "coo": lambda: sparse("coo"),
    "csr": lambda: sparse("csr"),
    "csc": lambda: sparse("csc"),
    "bsr": lambda: sparse("bsr"),
    "paged": paged,
    "composite": composite,
    "nested_composite": nested_composite,
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_round_trips(name):
    d = LAYOUTS[name]()
    if name != "dense_data_buffer_1":  # buffer 0 is unreferenced there
        d.validate()
    back = assert_round_trip(d)
    assert type(back.layout) is type(d.layout)


def test_composite_members_keep_their_own_descriptors():
    back = Descriptor.decode(composite().encode())
    members = {m.name: m.descriptor for m in back.layout.members}
    assert list(members) == ["base", "lora_a", "lora_b"]
    assert members["base"].quantization == PerChannelAffine(0, 1, "float32")
    assert members["lora_a"].layout == Dense(2)
    assert members["lora_b"].shape == (2, 4)
    assert members["base"].buffers == ()


# ------------------------------------------------------------ quantization


def per_channel(zero_points):
    q = PerChannelAffine(
        0,
        1,
        "float32",
        zero_point_buffer=2 if zero_points else None,
        zero_point_dtype="int8" if zero_points else None,
    )
    buffers = [B("data", 12), B("scales", 16)]
    if zero_points:
        buffers.append(B("zero_points", 4))
    return Descriptor("int8", (4, 3), quantization=q, buffers=buffers)


def mx(element):
    dtype = MX_DTYPE[element]
    return Descriptor(
        dtype,
        (2, 64),
        quantization=Mxfp(element, 1, 1),
        buffers=[B("data", nbytes(dtype, 128)), B("scales", 4)],
    )


QUANTS = {
    "per_tensor_affine": lambda: Descriptor(
        "uint8", (16,), quantization=PerTensorAffine(0.0125, 128), buffers=[B("data", 16)]
    ),
    "per_tensor_affine_int4": lambda: Descriptor(
        "int4", (5,), quantization=PerTensorAffine(-2.5, -3), buffers=[B("data", 3)]
    ),
    "per_channel_affine": lambda: per_channel(False),
    "per_channel_affine_zero_points": lambda: per_channel(True),
    "per_channel_affine_inline_zero_point": lambda: Descriptor(
        "uint8",
        (3, 4),
        quantization=PerChannelAffine(1, 1, "float16", zero_point=7),
        buffers=[B("data", 12), B("scales", 8)],
    ),
    "block_affine_q8_0": lambda: Descriptor(
        "int8",
        (2, 64),
        quantization=BlockAffine(1, 32, 1, "float16"),
        buffers=[B("data", 128), B("scales", 8)],
    ),
    "block_affine_q4_0": lambda: Descriptor(
        "uint4",
        (2, 64),
        quantization=BlockAffine(1, 32, 1, "float16", zero_point=8),
        buffers=[B("data", 64), B("scales", 8)],
    ),
    "block_affine_zero_points": lambda: Descriptor(
        "uint4",
        (4, 128),
        quantization=BlockAffine(
            1, 64, 1, "bfloat16", zero_point_buffer=2, zero_point_dtype="uint8"
        ),
        buffers=[B("data", 256), B("scales", 16), B("zero_points", 8)],
    ),
    "nf4": lambda: Descriptor(
        "uint4",
        (8, 16),
        quantization=Nf4(64, 1, "float32"),
        buffers=[B("data", 64), B("scales", 8)],
    ),
    **{f"mx_{e}": (lambda e=e: mx(e)) for e in MX_DTYPE},
}


@pytest.mark.parametrize("name", sorted(QUANTS))
def test_every_quantization_kind_round_trips(name):
    d = QUANTS[name]()
    d.validate()
    back = assert_round_trip(d)
    assert type(back.quantization) is type(d.quantization)


def test_q8_0_and_q4_0_are_the_gguf_layouts():
    q8 = json.loads(QUANTS["block_affine_q8_0"]().to_json())["quantization"]
    assert (q8["kind"], q8["block_size"], q8["scale_dtype"], q8["zero_point"]) == (
        "block_affine",
        32,
        "float16",
        0,
    )
    q4 = Descriptor.decode(QUANTS["block_affine_q4_0"]().encode())
    assert q4.dtype == "uint4"
    assert q4.quantization.zero_point == 8
    assert q4.quantization.zero_point_buffer is None


@pytest.mark.parametrize("element", sorted(MX_DTYPE))
def test_mx_element_must_match_the_storage_dtype(element):
    wrong = "int8" if element != "int8" else "float8_e4m3fn"
    d = Descriptor(
        wrong, (2, 64), quantization=Mxfp(element, 1, 1), buffers=[B("data", 128), B("scales", 4)]
    )
    with pytest.raises(hurray.ValidationError) as info:
        d.validate()
    assert info.value.status_name == "HURRAY_ERR_QUANT_DTYPE"


def test_mx_block_size_other_than_32_is_not_silently_dropped():
    q = Mxfp("fp8_e4m3", 1, 1, block_size=16)
    try:
        d = Descriptor(
            "float8_e4m3fn", (2, 64), quantization=q, buffers=[B("data", 128), B("scales", 8)]
        )
    except (ValueError, hurray.HurrayError):
        return  # refusing it at construction is fine too
    assert Descriptor.decode(d.encode()).quantization == q


def test_inline_zero_point_with_zero_point_buffer_is_not_silently_dropped():
    q = BlockAffine(
        1, 32, 1, "float16", zero_point_buffer=2, zero_point_dtype="uint8", zero_point=3
    )
    try:
        d = Descriptor(
            "uint4",
            (2, 64),
            quantization=q,
            buffers=[B("data", 64), B("scales", 8), B("zero_points", 4)],
        )
    except (ValueError, hurray.HurrayError):
        return
    assert Descriptor.decode(d.encode()).quantization == q


# ---------------------------------------------------------- optional parts


def optional_fields():
    return Descriptor(
        "float32",
        (2, 4),
        buffers=[B("data", 32, 256, "event")],
        device=Device(2, 1, "device"),
        statistics=Statistics(min=-1.5, max=3.25, nan_count=0, zero_count=2),
        shard=Shard((8, 4), (6, 0)),
        extension=Extension("example.temperature", b'{"unit":"K"}'),
    )


OPTIONAL = {
    "statistics_all": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 16)], statistics=Statistics(-1.0, 2.0, 1, 3)
    ),
    "statistics_min_only": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 16)], statistics=Statistics(min=-0.5)
    ),
    "statistics_counts_only": lambda: Descriptor(
        "float16", (4,), buffers=[B("data", 8)], statistics=Statistics(nan_count=4, zero_count=0)
    ),
    "statistics_infinite": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 16)], statistics=Statistics(float("-inf"), float("inf"))
    ),
    "shard": lambda: Descriptor(
        "int32", (2, 3), buffers=[B("data", 24)], shard=Shard((10, 3), (4, 0))
    ),
    "extension": lambda: Descriptor(
        "uint8", (3,), buffers=[B("data", 3)], extension=Extension("acme.rgb", bytes(range(256)))
    ),
    "extension_no_metadata": lambda: Descriptor(
        "uint8", (3,), buffers=[B("data", 3)], extension=Extension("acme.rgb")
    ),
    "device_cuda": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 16)], device=Device(2, 3, "device")
    ),
    "device_pinned": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 16)], device=Device(3, 0, "host_pinned")
    ),
    "device_managed": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 16)], device=Device(13, 0, "managed")
    ),
    "buffer_options": lambda: Descriptor(
        "float32", (4,), buffers=[B("data", 64, 4096, "stream")], device=Device(2, 0, "device")
    ),
    "everything": optional_fields,
}


@pytest.mark.parametrize("name", sorted(OPTIONAL))
def test_optional_parts_round_trip(name):
    d = OPTIONAL[name]()
    d.validate()
    assert_round_trip(d)


def test_nan_statistics_round_trip():
    d = Descriptor(
        "float32",
        (4,),
        buffers=[B("data", 16)],
        statistics=Statistics(min=float("nan"), max=float("nan")),
    )
    back = Descriptor.decode(d.encode())
    assert back.encode() == d.encode()
    assert math.isnan(back.statistics.min) and math.isnan(back.statistics.max)
    assert json.loads(d.to_json())["statistics"] == {"min": "nan", "max": "nan"}


def test_descriptor_is_immutable_and_replace_makes_a_new_one():
    d = optional_fields()
    with pytest.raises(AttributeError):
        d.shape = (1,)
    e = d.replace(shape=(2, 4), statistics=None)
    assert e != d and e.statistics is None and d.statistics is not None
    assert e.replace(statistics=d.statistics) == d


def test_equality_is_by_encoding():
    a = Descriptor("float32", (2, 2), buffers=[Buffer("data", 16)])
    b = Descriptor("float32", [2, 2], buffers=(Buffer("data", 16, 1, "ready"),))
    assert a == b and hash(a) == hash(b)
    # Explicit row-major strides encode differently from none.
    assert a != Descriptor("float32", (2, 2), strides=(2, 1), buffers=[Buffer("data", 16)])
    assert a != Descriptor("float32", (2, 2), buffers=[Buffer("data", 16, 64)])
    assert a != "not a descriptor"


# ---------------------------------------------------------- golden vectors

VECTOR_NAMES = sorted(p.stem for p in VECTORS.glob("*.bin"))


def test_every_layout_and_quant_kind_has_a_vector():
    assert len(VECTOR_NAMES) >= 24
    kinds = set()
    for name in VECTOR_NAMES:
        d = Descriptor.decode((VECTORS / f"{name}.bin").read_bytes())
        kinds.add(type(d.layout).__name__)
        if isinstance(d.layout, Sparse):
            kinds.add(d.layout.format)
        if d.quantization is not None:
            kinds.add(type(d.quantization).__name__)
            if isinstance(d.quantization, Mxfp):
                kinds.add(d.quantization.element)
    assert kinds >= {
        "Dense",
        "Sparse",
        "Paged",
        "Composite",
        "coo",
        "csr",
        "csc",
        "bsr",
        "PerTensorAffine",
        "PerChannelAffine",
        "BlockAffine",
        "Nf4",
        "Mxfp",
        *MX_DTYPE,
    }


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vector_decodes_to_its_json(name):
    data = (VECTORS / f"{name}.bin").read_bytes()
    text = (VECTORS / f"{name}.json").read_text()
    d = Descriptor.decode(data)
    assert d.to_json() == text
    assert d.encode() == data
    assert Descriptor.from_dict(json.loads(text)).encode() == data
    d.validate()


def _record(tag, payload):
    return struct.pack("<HI", tag, len(payload)) + payload


@pytest.mark.parametrize(
    "extra",
    [
        _record(0x54, b"junk"),  # an unknown optional (even) record: skipped
        _record(0x43, struct.pack("<iiBBH", 1, 0, 1, 0, 0)),  # DEVICE cpu:0, the default
        _record(0x50, bytes(8)),  # STATISTICS with no flags
    ],
)
def test_non_canonical_encoding_decodes_to_the_canonical_descriptor(extra):
    # descriptor-encoding.md: such forms decode to the canonical descriptor,
    # and encoding it again gives the canonical bytes (C's decode + encode).
    canonical = (VECTORS / "dense_float32.bin").read_bytes()
    d = Descriptor.decode(canonical + extra)
    c = Descriptor.decode(canonical)
    assert d.encode() == canonical
    assert d == c and hash(d) == hash(c)


# The golden vectors of tests/c/vectors.c, built through the Python API.
PYTHON_VECTORS = {
    "dense_float32": LAYOUTS["dense"],
    "dense_scalar_bool": LAYOUTS["dense_scalar"],
    "dense_strided": dense_strided,
    "dense_int4": lambda: Descriptor("int4", (7,), buffers=[B("data", 4)]),
    "dense_float6": lambda: Descriptor("float6_e2m3fn", (8,), buffers=[B("data", 6)]),
    "sparse_coo": lambda: sparse("coo"),
    "sparse_csr": lambda: sparse("csr"),
    "sparse_csc": lambda: sparse("csc"),
    "sparse_bsr": lambda: sparse("bsr"),
    "paged_kv_cache": paged,
    "composite_lora": composite,
    "quant_per_tensor_affine": QUANTS["per_tensor_affine"],
    "quant_per_channel_affine": QUANTS["per_channel_affine_zero_points"],
    "quant_block_affine_q8_0": QUANTS["block_affine_q8_0"],
    "quant_block_affine_q4_0": QUANTS["block_affine_q4_0"],
    "quant_block_affine_zero_points": QUANTS["block_affine_zero_points"],
    "quant_nf4": QUANTS["nf4"],
    "quant_mxfp8_e4m3": lambda: mx("fp8_e4m3"),
    "quant_mxfp8_e5m2": lambda: mx("fp8_e5m2"),
    "quant_mxfp6_e3m2": lambda: mx("fp6_e3m2"),
    "quant_mxfp6_e2m3": lambda: mx("fp6_e2m3"),
    "quant_mxfp4_e2m1": lambda: mx("fp4_e2m1"),
    "quant_mxint8": lambda: mx("int8"),
    "quant_block_coded_q4_k": lambda: Descriptor(
        "uint8",
        (3, 512),
        quantization=BlockCoded("ggml_q4_k", 1),
        buffers=[Buffer("data", 3 * 2 * 144, 64)],
    ),
    "quant_block_coded_iq2_xxs": lambda: Descriptor(
        "uint8",
        (256,),
        quantization=BlockCoded("ggml_iq2_xxs", 0),
        buffers=[Buffer("data", 66, 64)],
    ),
    "optional_fields": optional_fields,
    # packed and two-level fields (ADR-0024)
    "quant_gptq": lambda: Descriptor(
        "uint4",
        (16, 64),
        quantization=BlockAffine(
            1,
            16,
            1,
            "float16",
            zero_point_buffer=2,
            zero_point_dtype="uint4",
            storage_axes=(1, 0),
            code_packing=Packing(32, 0),
            zero_point_packing=Packing(32, 1),
            zero_point_offset=1,
            group_index_buffer=3,
            group_index_dtype="int32",
        ),
        buffers=[B("data", 512), B("scales", 128), B("zero_points", 32), B("group_index", 256)],
    ),
    "quant_awq": lambda: Descriptor(
        "uint4",
        (16, 32),
        quantization=BlockAffine(
            1,
            16,
            1,
            "float16",
            zero_point_buffer=2,
            zero_point_dtype="uint4",
            storage_axes=(1, 0),
            code_packing=Packing(32, 1, (0, 2, 4, 6, 1, 3, 5, 7)),
            zero_point_packing={"word_bits": 32, "axis": 1, "order": (0, 2, 4, 6, 1, 3, 5, 7)},
        ),
        buffers=[B("data", 256), B("scales", 64), B("zero_points", 16)],
    ),
    "quant_fp8_block": lambda: Descriptor(
        "float8_e4m3fn",
        (200, 300),
        quantization=BlockAffine(0, 128, 1, "float32", axis2=1, block_size2=128),
        buffers=[B("data", 60000), B("scales", 24)],
    ),
    "quant_bnb_double": lambda: Descriptor(
        "uint4",
        (64, 64),
        quantization=Nf4(
            64,
            1,
            "uint8",
            code_packing=Packing(8, 0, (1, 0)),
            codebook_buffer=2,
            scale_codebook_buffer=3,
            super_scale_buffer=4,
            super_scale_dtype="float32",
            super_block_size=256,
            super_op="multiply",
            scale_offset=0.03125,
        ),
        buffers=[
            B("data", 2048),
            B("scales", 64),
            B("codebook", 64),
            B("codebook", 1024),
            B("super_scales", 4),
        ],
    ),
    "quant_nvfp4": lambda: Descriptor(
        "float4_e2m1fn",
        (32, 64),
        quantization=BlockAffine(
            1,
            16,
            1,
            "float8_e4m3fn",
            super_scale_buffer=2,
            super_scale_dtype="float32",
            super_op="divide",
        ),
        buffers=[B("data", 1024), B("scales", 128), B("super_scales", 4)],
    ),
}


def test_python_vectors_cover_every_file():
    assert set(PYTHON_VECTORS) == set(VECTOR_NAMES)


@pytest.mark.parametrize("name", sorted(PYTHON_VECTORS))
def test_python_builder_reproduces_the_vector_bytes(name):
    d = PYTHON_VECTORS[name]()
    assert d.encode() == (VECTORS / f"{name}.bin").read_bytes()
    assert d.to_json() == (VECTORS / f"{name}.json").read_text()


def test_corrupt_encodings_raise_format_and_unsupported_errors():
    data = (VECTORS / "quant_per_channel_affine.bin").read_bytes()
    for cut in range(len(data)):
        with pytest.raises(hurray.HurrayError):
            Descriptor.decode(data[:cut])
    with pytest.raises(hurray.FormatError) as info:
        Descriptor.decode(data[:-1])
    assert info.value.status_name == "HURRAY_ERR_TRUNCATED"
    with pytest.raises(hurray.FormatError):
        Descriptor.decode(b"HRYE" + data[4:])
    with pytest.raises(hurray.UnsupportedError) as info:
        Descriptor.decode(data[:4] + b"\x02\x00" + data[6:])
    assert info.value.status_name == "HURRAY_ERR_UNSUPPORTED"


# -------------------------------------------------------------- validation


def broken(**changes):
    base = dict(
        dtype="int8",
        shape=(4, 3),
        quantization=PerChannelAffine(0, 1, "float32"),
        buffers=[B("data", 12), B("scales", 16)],
    )
    base.update(changes)
    return lambda: Descriptor(base.pop("dtype"), base.pop("shape"), **base)


BROKEN = {
    "HURRAY_ERR_QUANT_AXIS": (
        hurray.ValidationError,
        broken(quantization=PerChannelAffine(2, 1, "float32")),
    ),
    "HURRAY_ERR_BUFFER_INDEX": (
        hurray.ValidationError,
        broken(quantization=PerChannelAffine(0, 5, "float32")),
    ),
    "HURRAY_ERR_BUFFER_ROLE": (
        hurray.ValidationError,
        broken(buffers=[B("data", 12), B("indices", 16)]),
    ),
    "HURRAY_ERR_BUFFER_TOO_SMALL": (
        hurray.ValidationError,
        broken(buffers=[B("data", 11), B("scales", 16)]),
    ),
    "HURRAY_ERR_BUFFER_UNREFERENCED": (
        hurray.ValidationError,
        broken(buffers=[B("data", 12), B("scales", 16), B("zero_points", 4)]),
    ),
    "HURRAY_ERR_QUANT_SCALE_COUNT": (
        hurray.ValidationError,
        broken(buffers=[B("data", 12), B("scales", 20)]),
    ),
    "HURRAY_ERR_QUANT_SCALE_DTYPE": (
        hurray.ValidationError,
        broken(quantization=PerChannelAffine(0, 1, "int32")),
    ),
    "HURRAY_ERR_QUANT_DTYPE": (
        hurray.ValidationError,
        broken(dtype="float32", buffers=[B("data", 48), B("scales", 16)]),
    ),
    "HURRAY_ERR_QUANT_BLOCK_SIZE": (
        hurray.ValidationError,
        broken(quantization=BlockAffine(1, 0, 1, "float16")),
    ),
    "HURRAY_ERR_QUANT_SCALE": (
        hurray.ValidationError,
        lambda: Descriptor(
            "uint8", (4,), quantization=PerTensorAffine(float("inf")), buffers=[B("data", 4)]
        ),
    ),
    "HURRAY_ERR_QUANT_ZERO_POINT": (
        hurray.ValidationError,
        lambda: Descriptor(
            "int4", (4,), quantization=PerTensorAffine(1.0, 8), buffers=[B("data", 2)]
        ),
    ),
    "HURRAY_ERR_QUANT_ZERO_POINT_COUNT": (
        hurray.ValidationError,
        broken(
            quantization=PerChannelAffine(0, 1, "float32", 2, "int8"),
            buffers=[B("data", 12), B("scales", 16), B("zero_points", 3)],
        ),
    ),
    "HURRAY_ERR_QUANT_LAYOUT": (
        hurray.ValidationError,
        lambda: Descriptor(
            "int8",
            (3, 4),
            layout=Sparse("csr", "int32", 2, 0, 1, 2),
            quantization=PerChannelAffine(0, 3, "float32"),
            buffers=[B("values", 2), B("indptr", 16), B("indices", 8), B("scales", 12)],
        ),
    ),
    "HURRAY_ERR_SPARSE_INDEX_DTYPE": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (3, 4),
            layout=Sparse("csr", "float32", 2, 0, 1, 2),
            buffers=[B("values", 8), B("indptr", 16), B("indices", 8)],
        ),
    ),
    "HURRAY_ERR_SPARSE_RANK": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (12,),
            layout=Sparse("csr", "int32", 2, 0, 1, 2),
            buffers=[B("values", 8), B("indptr", 52), B("indices", 8)],
        ),
    ),
    "HURRAY_ERR_SPARSE_NNZ": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (2, 2),
            layout=Sparse("csr", "int32", 5, 0, 1, 2),
            buffers=[B("values", 20), B("indptr", 12), B("indices", 20)],
        ),
    ),
    "HURRAY_ERR_SPARSE_BLOCK": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (4, 6),
            layout=Sparse("bsr", "int32", 1, 0, 1, 2, block_shape=(3, 3)),
            buffers=[B("values", 36), B("indptr", 12), B("indices", 4)],
        ),
    ),
    "HURRAY_ERR_PAGED_AXIS": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (2, 4),
            layout=Paged(2, 2, 4),
            buffers=[B("page_pool", 64), B("page_table", 16)],
        ),
    ),
    "HURRAY_ERR_PAGED_PAGE_SIZE": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (2, 4),
            layout=Paged(1, 0, 4),
            buffers=[B("page_pool", 64), B("page_table", 16)],
        ),
    ),
    "HURRAY_ERR_PAGED_TABLE_DTYPE": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (2, 4),
            layout=Paged(1, 2, 4, "uint8"),
            buffers=[B("page_pool", 32), B("page_table", 4)],
        ),
    ),
    "HURRAY_ERR_COMPOSITE_MEMBER": (
        hurray.ValidationError,
        lambda: Descriptor("float32", (4,), layout=Composite(), buffers=[]),
    ),
    "HURRAY_ERR_COMPOSITE_NAME": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32",
            (2,),
            layout=Composite(
                (
                    Member("a", Descriptor("float32", (2,), layout=Dense(0))),
                    Member("a", Descriptor("float32", (2,), layout=Dense(1))),
                )
            ),
            buffers=[B("data", 8), B("data", 8)],
        ),
    ),
    "HURRAY_ERR_STRIDES": (
        hurray.ValidationError,
        lambda: Descriptor("int4", (2, 4), strides=(4, 1), buffers=[B("data", 4)]),
    ),
    "HURRAY_ERR_STATISTICS": (
        hurray.ValidationError,
        lambda: Descriptor(
            "float32", (4,), statistics=Statistics(min=2.0, max=1.0), buffers=[B("data", 16)]
        ),
    ),
    "HURRAY_ERR_SHARD_RANK": (
        hurray.ValidationError,
        lambda: Descriptor("float32", (4,), shard=Shard((8, 8), (0, 0)), buffers=[B("data", 16)]),
    ),
    "HURRAY_ERR_SHARD_BOUNDS": (
        hurray.ValidationError,
        lambda: Descriptor("float32", (4,), shard=Shard((8,), (6,)), buffers=[B("data", 16)]),
    ),
    "HURRAY_ERR_EXTENSION": (
        hurray.ValidationError,
        lambda: Descriptor("float32", (4,), extension=Extension(""), buffers=[B("data", 16)]),
    ),
    "HURRAY_ERR_DEVICE": (
        hurray.ValidationError,
        lambda: Descriptor("float32", (4,), device=Device(1, 0, "device"), buffers=[B("data", 16)]),
    ),
}


@pytest.mark.parametrize("status", sorted(BROKEN))
def test_validate_names_the_broken_rule(status):
    cls, build = BROKEN[status]
    d = build()
    with pytest.raises(cls) as info:
        d.validate()
    exc = info.value
    assert isinstance(exc, hurray.HurrayError)
    assert exc.status_name == status
    assert str(exc).startswith(status + ":")
    assert isinstance(exc.status, int) and exc.status > 0
    # A descriptor that fails validation still round-trips byte for byte.
    assert Descriptor.decode(d.encode()).encode() == d.encode()


def test_invalid_setter_arguments_fail_at_construction():
    with pytest.raises(hurray.InvalidArgumentError) as info:
        Descriptor("float32", (4,), buffers=[B("data", 16, alignment=3)])
    assert info.value.status_name == "HURRAY_ERR_INVALID_ARGUMENT"
    with pytest.raises(ValueError):
        Descriptor("float32", (2, 4), strides=(1,), buffers=[B("data", 32)])
    with pytest.raises(ValueError):
        Descriptor("float32", (4,), buffers=[B("weights", 16)])
    with pytest.raises(ValueError):
        Descriptor("float32", (1,) * 33, buffers=[B("data", 4)])


def test_error_classes_are_one_hierarchy():
    for cls in (
        hurray.ValidationError,
        hurray.PlacementError,
        hurray.FormatError,
        hurray.UnsupportedError,
        hurray.ChecksumError,
        hurray.LimitError,
        hurray.NotFoundError,
        hurray.DuplicateNameError,
        hurray.HurrayIOError,
        hurray.InvalidArgumentError,
        hurray.HurrayMemoryError,
    ):
        assert issubclass(cls, hurray.HurrayError)
    assert issubclass(hurray.NotFoundError, KeyError)
    assert issubclass(hurray.InvalidArgumentError, ValueError)
    assert issubclass(hurray.HurrayIOError, OSError)
    assert issubclass(hurray.HurrayMemoryError, MemoryError)


# ------------------------------------------------------------- hypothesis

shapes = st.lists(st.integers(0, 6), min_size=0, max_size=5).map(tuple)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dtype=st.sampled_from(hurray.DTYPES),
    shape=shapes,
    alignment=st.sampled_from([1, 2, 8, 64, 4096]),
    slack=st.integers(0, 16),
    sync=st.sampled_from(["ready", "stream", "event"]),
)
def test_dense_descriptors_round_trip(dtype, shape, alignment, slack, sync):
    size = nbytes(dtype, math.prod(shape)) + slack
    d = Descriptor(dtype, shape, buffers=[B("data", size, alignment, sync)])
    d.validate()
    back = assert_round_trip(d)
    assert back.numel == math.prod(shape)
    assert d.required_bytes() == [nbytes(dtype, math.prod(shape))]


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from([t for t in hurray.DTYPES if _dtypes.BITS[t] >= 8]),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple),
    data=st.data(),
)
def test_strided_dense_descriptors_round_trip(dtype, shape, data):
    strides = tuple(data.draw(st.integers(-20, 20)) for _ in shape)
    itemsize = _dtypes.BITS[dtype] // 8
    low = sum(min(0, s * (n - 1)) for s, n in zip(strides, shape))
    high = sum(max(0, s * (n - 1)) for s, n in zip(strides, shape))
    offset = -low * itemsize
    size = (high - low + 1) * itemsize
    d = Descriptor(dtype, shape, strides=strides, byte_offset=offset, buffers=[B("data", size)])
    d.validate()
    assert_round_trip(d)


@settings(max_examples=100, deadline=None)
@given(
    dtype=st.sampled_from(hurray.DTYPES),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple),
)
def test_dense_numpy_tensor_descriptor_matches(dtype, shape):
    np_dtype = _dtypes.to_numpy(dtype)
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=math.prod(shape) * np_dtype.itemsize, dtype=np.uint8)
    values = raw.view(np_dtype).reshape(shape)
    if _dtypes.is_packed(dtype):
        values = (
            (raw[: math.prod(shape)] & ((1 << _dtypes.BITS[dtype]) - 1))
            .view(np_dtype)
            .reshape(shape)
        )
    t = hurray.from_numpy(values)
    d = t.descriptor
    assert (d.dtype, d.shape) == (dtype, shape)
    assert d.buffers[0].byte_size == nbytes(dtype, math.prod(shape))
    assert Descriptor.decode(t._encoded) == d


@pytest.mark.parametrize("vector", sorted(p.name for p in VECTORS.glob("*.bin")))
def test_to_dict_is_the_json_rendering_and_from_dict_inverts_it(vector):
    # docs/impl/python-bindings.md: to_dict() is to_json() as a dict. It used
    # to differ for composite members, sparse layouts and extension metadata.
    raw = (VECTORS / vector).read_bytes()
    d = Descriptor.decode(raw)
    assert d.to_dict() == json.loads(d.to_json())
    assert Descriptor.from_dict(d.to_dict()).encode() == raw


@pytest.mark.parametrize("fmt", [1, b"ggml_q4_k", int])
def test_a_block_format_that_is_not_a_str_is_a_type_error(fmt):
    """It was SystemError ("returned NULL without setting an exception"):
    the builder refused the field without saying why."""
    with pytest.raises(TypeError, match="quantization.format must be a str"):
        Descriptor(
            "uint8",
            (3, 512),
            quantization=BlockCoded(fmt, 1),
            buffers=[Buffer("data", 3 * 2 * 144, 64)],
        )
    spec = Descriptor(
        "uint8",
        (3, 512),
        quantization=BlockCoded("ggml_q4_k", 1),
        buffers=[Buffer("data", 3 * 2 * 144, 64)],
    ).to_dict()
    spec["quantization"]["format"] = fmt
    with pytest.raises(TypeError, match="quantization.format must be a str"):
        Descriptor.from_dict(spec)


# A record's integers are read once, when the record is made, so only the
# descriptor's own arguments (shape, strides, byte_offset) run Python code
# while it is built.
@pytest.mark.parametrize("where", ["shape", "byte_offset"])
def test_a_descriptor_is_not_initialised_again_from_inside_its_init(where):
    """An __index__ that ran __init__ on the same descriptor left it with
    the inner call's fields and the outer call's encoding; and, since the
    builder reads the parts it was given as borrowed references, a nested
    __init__ that replaced them freed the record being read (a segfault). A
    nested __init__ is now refused; the descriptor stays uninitialised, and
    a later __init__ succeeds."""
    target = Descriptor.__new__(Descriptor)
    refused = []

    class Reenter:
        def __index__(self):
            if not refused:
                with pytest.raises(RuntimeError, match="being initialised") as info:
                    Descriptor.__init__(target, "int8", (2,), buffers=[Buffer("data", 2, 1)])
                refused.append(info.value)
            return 16 if where == "shape" else 0

    shape = (Reenter(),) if where == "shape" else (16,)
    offset = Reenter() if where == "byte_offset" else 0
    Descriptor.__init__(
        target, "float32", shape, byte_offset=offset, buffers=[Buffer("data", 64, 4)]
    )
    assert len(refused) == 1
    assert target == Descriptor("float32", (16,), buffers=[Buffer("data", 64, 4)])
    with pytest.raises(RuntimeError, match="already initialised"):
        Descriptor.__init__(target, "int8", (2,), buffers=[Buffer("data", 2, 1)])


def test_a_member_whose_descriptor_failed_to_initialise_is_refused():
    """A Descriptor whose __init__ failed keeps the parts it was given; used
    as a composite member, it was built from them while Python code could
    initialise it and free them."""
    failed = Descriptor.__new__(Descriptor)
    with pytest.raises(TypeError):
        Descriptor.__init__(failed, "float32", (4,), layout=hurray.Paged("x", 1, 1, "int32", 0, 1))
    with pytest.raises(ValueError, match="member's Descriptor is not initialised"):
        Descriptor(
            "float32",
            (4,),
            layout=hurray.Composite((hurray.Member("m", failed),)),
            buffers=[Buffer("data", 16)],
        )


_GOOD = {"dtype": "float32", "shape": [2], "layout": {"kind": "dense", "data_buffer": 0}}


@pytest.mark.parametrize(
    "spec, what",
    [
        (None, "a descriptor"),
        (5, "a descriptor"),
        ({**_GOOD, "statistics": "x"}, "statistics"),
        ({**_GOOD, "layout": 3}, "layout"),
        ({**_GOOD, "quantization": [1]}, "quantization"),
        ({**_GOOD, "buffers": [5]}, "a buffer"),
        ({**_GOOD, "device": "cpu"}, "device"),
        ({**_GOOD, "shard": "x"}, "shard"),
        ({**_GOOD, "extension": 1}, "extension"),
        ({**_GOOD, "layout": {"kind": "composite", "members": [5]}}, "a member"),
        (
            {**_GOOD, "layout": {"kind": "composite", "members": [{"name": "a", "descriptor": 5}]}},
            "a descriptor",
        ),
    ],
)
def test_from_dict_of_a_wrong_type_is_a_type_error_naming_the_field(spec, what):
    """These were AttributeError ('NoneType' object has no attribute 'get')
    or a TypeError about ** arguments."""
    with pytest.raises(TypeError, match=f"^{what} must be a dict, not "):
        Descriptor.from_dict(spec)


@pytest.mark.parametrize("value", [5, np.ones(3)])
def test_from_scipy_of_something_else_is_a_type_error(value):
    with pytest.raises(TypeError, match="from_scipy takes a scipy.sparse array"):
        hurray.SparseTensor.from_scipy(value)


def test_a_sparse_tensor_class_over_a_dense_layout_says_so():
    """SparseTensor(...) and SparseTensor._from_capsule take any layout;
    parts() and to_scipy() then failed with AttributeError ('Dense' object
    has no attribute 'format')."""
    t = hurray.from_numpy(np.ones(3))
    for s in (
        hurray.SparseTensor(t.descriptor, list(t.buffers)),
        hurray.SparseTensor._from_capsule(t.__hurray__()),
    ):
        with pytest.raises(TypeError, match="layout is Dense, not Sparse"):
            s.parts()


@pytest.mark.parametrize("scheme", ["nf4", "q4_0", "mxfp4", "q8_0", "mxfp6_e3m2"])
def test_to_dense_of_a_quantized_dense_tensor_gives_its_codes(scheme):
    """Byte-sized codes came back as codes, 4- and 6-bit ones raised an
    UnsupportedError pointing to numpy(), which refuses quantized tensors."""
    t = hurray.quantize(np.linspace(-1, 1, 4 * 64, dtype=np.float32).reshape(4, 64), scheme)
    dense = t.to_dense()
    assert dense.shape == (4, 64)
    np.testing.assert_array_equal(dense.view(np.uint8), t.codes().view(np.uint8))


def test_to_dense_of_codes_stored_transposed_is_refused():
    """to_dense copied codes stored with storage_axes (1, 0) as they lay,
    transposed, and said OK; dequantize reads them right."""
    codes = np.array([0, 10, 1, 11, 2, 12], np.int8)  # stored [3][2]: logical [2][3]
    q = hurray.PerChannelAffine(0, 1, "float32", storage_axes=(1, 0))
    d = Descriptor(
        "int8", (2, 3), quantization=q, buffers=[Buffer("data", 6, 1), Buffer("scales", 8, 4)]
    )
    t = hurray.Tensor(d, [codes.view(np.uint8), np.ones(2, np.float32)])
    np.testing.assert_array_equal(t.dequantize(), [[0, 1, 2], [10, 11, 12]])
    with pytest.raises(hurray.UnsupportedError, match="storage axes, code packing"):
        t.to_dense()


@pytest.mark.parametrize("shape", [(0, 2**40, 2**40), (2**40, 0, 2**40), (2**40, 2**40, 0)])
def test_a_zero_dimension_anywhere_makes_zero_elements(shape):
    # descriptor-encoding.md 9.2: the product of the dimensions decides; the
    # C check multiplied left to right and stopped at the overflow before
    # the 0, so (2^40, 2^40, 0) was refused and (0, 2^40, 2^40) was not.
    d = Descriptor("float32", shape, buffers=[Buffer("data", 0)])
    d.validate()
    assert d.numel == 0


def test_a_record_keeps_no_mutable_object_of_the_caller():
    """A record kept a list or a dict as given: emptying the caller's dict
    later changed what the descriptor's quantization showed, though the C
    descriptor was right, and the record could not be hashed. Lists become
    tuples, a packing dict a Packing, a bytearray bytes."""
    packing, axes = {"word_bits": 32, "axis": 1}, [0, 1]
    q = hurray.BlockAffine(1, 128, 1, code_packing=packing, storage_axes=axes)
    d = Descriptor(
        "uint4", (4, 256), quantization=q, buffers=[Buffer("data", 512), Buffer("scales", 16)]
    )
    packing.clear()
    axes.clear()
    assert d.quantization.code_packing == hurray.Packing(32, 1)
    assert d.quantization.storage_axes == (0, 1)
    assert d.quantization == Descriptor.decode(d.encode()).quantization
    hash(q)
    shard = hurray.Shard(global_shape=[8], offsets=[0])
    assert shard.global_shape == (8,) and hash(shard) == hash(hurray.Shard((8,), (0,)))
    assert hurray.Extension("x", bytearray(b"ab")).metadata == b"ab"
    assert hurray.Extension("x", memoryview(b"ab")).metadata == b"ab"
    with pytest.raises(TypeError, match="unexpected keyword argument 'lanes'"):
        hurray.BlockAffine(1, 128, 1, code_packing={"word_bits": 32, "lanes": 8})


def test_record_fields_are_read_once_when_the_record_is_made():
    """A generator or map object given to a record was kept as given and
    used up by the first build: a composite encoded with 2 members listed
    none, and replace() dropped the members and a shard's lists. A
    stateful __index__ was read again at every build, so a composite
    encoded a member differently from the member it showed."""
    from hurray import Composite, Dense, Member, Shard

    m = Descriptor("float32", (3,))
    d = Descriptor(
        "float32",
        (3,),
        layout=Composite(Member(n, m) for n in ["a", "b"]),
        buffers=[Buffer("data", 12)],
    )
    assert [x.name for x in d.layout.members] == ["a", "b"]
    assert d.replace(byte_offset=0) == d
    s = Descriptor(
        "float32", (3,), buffers=[Buffer("data", 12)], shard=Shard(map(int, "6"), map(int, "3"))
    )
    assert s.shard == Shard((6,), (3,)) and s.replace(byte_offset=0) == s

    class Flip:
        calls = 0

        def __index__(self):
            Flip.calls += 1
            return 0 if Flip.calls == 1 else 7

    member = Descriptor("float32", (3,), layout=Dense(Flip()))
    assert member.layout.data_buffer == 0
    outer = Descriptor(
        "float32", (3,), layout=Composite((Member("a", member),)), buffers=[Buffer("data", 12)]
    )
    assert outer.layout.members[0].descriptor == member
    assert outer.to_dict()["layout"]["members"][0]["descriptor"]["layout"]["data_buffer"] == 0


def test_root_parts_of_the_wrong_type_are_a_type_error():
    """statistics={"min": 1.0} (or a Dense record), device=Statistics() and
    extension=Member(...) were read field by field where names matched, and
    dropped or misread, while the descriptor still showed them."""
    from hurray import Dense, Member, Statistics

    b = [Buffer("data", 12)]
    for kwargs, message in (
        ({"statistics": {"min": 1.0}}, "statistics must be a hurray.Statistics, not dict"),
        ({"statistics": Dense(3)}, "statistics must be a hurray.Statistics, not hurray.Dense"),
        ({"device": Statistics()}, "device must be a hurray.Device, not hurray.Statistics"),
        (
            {"extension": Member("x", None)},
            "extension must be a hurray.Extension, not hurray.Member",
        ),
    ):
        with pytest.raises(TypeError, match=message):
            Descriptor("float32", (3,), buffers=b, **kwargs)


def test_a_dense_layout_without_a_data_buffer_is_not_buffer_0():
    """Dense(None) and Dense(2**32 - 1), C's NO_BUFFER, were built as data
    buffer 0: the descriptor validated and a tensor read buffer 0, and an
    invalid descriptor C decoded came back valid from replace()."""
    from hurray import Dense

    for data_buffer in (None, 2**32 - 1):
        d = Descriptor("float32", (3,), layout=Dense(data_buffer), buffers=[Buffer("data", 12)])
        with pytest.raises(hurray.ValidationError, match="data_buffer"):
            d.validate()


def test_decode_of_a_list_with_a_bad_name_is_a_validation_error():
    """decode() takes any iterable of ints, but on a member name that is not
    UTF-8 it decoded the caller's object again: TypeError for a list,
    nothing left of an iterator."""
    from hurray import Composite, Dense, Member

    m = Descriptor("float32", (2,), layout=Dense(0))
    good = Descriptor(
        "float32", (2,), layout=Composite((Member("q", m),)), buffers=[Buffer("data", 8)]
    ).encode()
    bad = good.replace(b"q", b"\xff")
    for arg in (bad, list(bad), iter(bad)):
        with pytest.raises(hurray.ValidationError, match="not valid UTF-8"):
            Descriptor.decode(arg)


def test_codes_of_an_empty_block_coded_tensor_numpy_cannot_shape():
    """codes() of a valid block-coded tensor with no elements but a
    dimension past numpy's index type raised numpy's ValueError, where
    numpy() and to_dense() say UnsupportedError."""
    from hurray import BlockCoded, Tensor

    d = Descriptor(
        "uint8",
        (2**63 + 2, 0),
        quantization=BlockCoded("ggml_q4_1", 1),
        buffers=[Buffer("data", 0)],
    )
    with pytest.raises(hurray.UnsupportedError, match="numpy cannot hold"):
        Tensor(d, [b""]).codes()


class _SkipsInit(Descriptor):
    def __init__(self, *args, **kwargs):
        pass  # never calls Descriptor.__init__


@pytest.mark.parametrize("make", [_SkipsInit, lambda: Descriptor.__new__(Descriptor)])
def test_a_descriptor_never_initialised_is_a_value_error_everywhere(make):
    """A subclass that skips Descriptor.__init__ (or __new__ alone) raised a
    bare RuntimeError from the C methods and AttributeError ('_encoded',
    'dtype') from the fields and the Python methods; a Tensor in that state
    gave ValueError. Now every use is that ValueError, and repr says so."""
    d = make()
    assert repr(d) == f"<{type(d).__name__}, not initialised>"
    uses = {
        "encode": d.encode,
        "validate": d.validate,
        "to_json": d.to_json,
        "to_dict": d.to_dict,
        "required_bytes": d.required_bytes,
        "replace": d.replace,
        "numel": lambda: d.numel,
        "==": lambda: d == d,
        "hash": lambda: hash(d),
        "pickle": lambda: pickle.dumps(d),
        "copy": lambda: copy.copy(d),
        "Tensor": lambda: hurray.Tensor(d, []),
    }
    for field in _FIELDS:  # every field Descriptor() takes
        uses[field] = lambda f=field: getattr(d, f)
    for use in uses.values():
        with pytest.raises(ValueError, match="Descriptor is not initialised"):
            use()


def test_a_tensor_never_initialised_has_a_repr():
    assert repr(hurray.Tensor.__new__(hurray.Tensor)) == "<Tensor, not initialised>"
