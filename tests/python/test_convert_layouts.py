"""The converter's seams with the C library and its layout registry:
_formats.target_form (the C writer's own decision of a GGUF or safetensors
type and size), the errors _formats raises (the same classes and message
form as _hurray's), and hurray.convert.layouts."""

import numpy as np
import pytest

import hurray
from hurray import _formats
from hurray.convert import layouts


def rnd(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_target_form_is_the_c_writers_decision():
    q8 = hurray.quantize(rnd((4, 64)), "q8_0")
    q4 = hurray.quantize(rnd((4, 64)), "q4_0")
    assert _formats.target_form("gguf", "w", q8.descriptor.encode()) == ("Q8_0", 4 * 2 * 34)
    assert _formats.target_form("gguf", "w", q4.descriptor.encode()) == ("Q4_0", 4 * 2 * 18)
    dense = hurray.Descriptor("bfloat16", (3, 5))
    assert _formats.target_form("gguf", "d", dense.encode()) == ("BF16", 30)
    assert _formats.target_form("safetensors", "d", dense.encode()) == ("BF16", 30)
    nf4 = hurray.quantize(rnd((4, 64)), "nf4")
    with pytest.raises(hurray.UnsupportedError, match="no exact GGUF type") as info:
        _formats.target_form("gguf", "w", nf4.descriptor.encode())
    # The same message form and attributes as every other hurray error.
    assert str(info.value).startswith("HURRAY_ERR_UNSUPPORTED: tensor 'w'")
    assert info.value.status_name == "HURRAY_ERR_UNSUPPORTED"
    # A rank-0 tensor is GGUF's n_dims 0 (GGUF -> hurray -> GGUF kept it
    # only one way); a rank-5 one has no GGUF form.
    assert _formats.target_form("gguf", "s", hurray.Descriptor("float32", ()).encode()) == (
        "F32",
        4,
    )
    with pytest.raises(hurray.UnsupportedError, match="rank 5; GGUF tensors have at most 4"):
        _formats.target_form("gguf", "s", hurray.Descriptor("float32", (1,) * 5).encode())


def test_formats_errors_are_the_hurray_classes(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{]")
    with pytest.raises(hurray.FormatError) as info:
        _formats.Source(str(bad))
    assert info.value.status_name.startswith("HURRAY_ERR_")
    assert str(info.value).startswith(info.value.status_name + ": ")


def test_layout_registry_names_and_gguf_types():
    assert [(l.name, l.gguf_type) for l in layouts.gguf_layouts()] == [
        ("q8_0", "Q8_0"),
        ("q4_0", "Q4_0"),
    ]
    for scheme, name in [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("nf4", "nf4"), ("mxfp4", "mxfp4")]:
        assert layouts.describe(hurray.quantize(rnd((2, 64)), scheme).descriptor) == name
    d = hurray.quantize(rnd((2, 64)), "block_affine", block_size=16).descriptor
    assert layouts.describe(d) == "block_affine(int8, 16)"
    assert layouts.describe(hurray.Descriptor("float16", (2,))) == "float16"


@pytest.mark.parametrize(
    "field, value",
    [
        ("scale_offset", 0.5),
        ("zero_point_offset", 1),
        ("storage_axes", (1, 0)),
        ("code_packing", hurray.Packing(32, 1)),
        ("axis2", 0),
    ],
)
def test_a_q4_0_like_tensor_with_other_fields_set_is_not_labelled_q4_0(field, value):
    """The label looked at block size, axis, scale dtype and zero point
    only: a compressed-tensors int4 group-32 layer (packed codes, a group
    index) was "q4_0", so --quantize q4_0 kept it as it was and the GGUF
    writer, which checks every field, refused it."""
    q = hurray.quantize(rnd((4, 64)), "q4_0").descriptor.quantization
    names = ["axis", "block_size", "scale_buffer", *q._field_defaults]
    changed = {**{k: getattr(q, k) for k in names}, field: value}
    if field == "axis2":
        changed.update(block_size2=2)
    d = hurray.Descriptor("uint4", (4, 64), quantization=hurray.BlockAffine(**changed))
    assert layouts.describe(d) == "block_affine(uint4, 32)"


def test_a_registered_layout_is_recognised_first_in_order():
    d = hurray.quantize(rnd((2, 64)), "block_affine", block_size=16).descriptor
    extra = layouts.Layout("b16", lambda d: "b16" if d.quantization.block_size == 16 else None)
    layouts.LAYOUTS.insert(0, extra)
    try:
        assert layouts.describe(d) == "b16"
    finally:
        layouts.LAYOUTS.remove(extra)
    assert layouts.describe(d) == "block_affine(int8, 16)"
