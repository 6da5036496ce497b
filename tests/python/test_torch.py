"""hurray.torch: torch.Tensor <-> hurray.Tensor, and safetensors-shaped files."""

import gc
import io
import math
import os
import subprocess
import sys
import tempfile
import warnings
import weakref
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp  # noqa: E402

import hurray  # noqa: E402
from hurray.torch import from_torch, load_file, save_file, to_torch  # noqa: E402

pytestmark = [
    # torch 2.13 deprecates its quantized dtypes and flags sparse CSR as beta.
    pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse .* support is in beta:UserWarning"),
    pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning"),
]

DTYPES = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
for _name in ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"):
    if isinstance(getattr(torch, _name, None), torch.dtype):
        DTYPES[_name] = getattr(torch, _name)

SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)


def random_tensor(dtype, shape, seed=0):
    """Every bit pattern of the dtype is fair game (NaNs included); bool
    holds only 0 and 1."""
    g = torch.Generator().manual_seed(seed)
    numel = math.prod(shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).to(torch.bool)
    size = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (numel * size,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def assert_same(a, b):
    """Same dtype, shape and bytes (NaN payloads included)."""
    assert a.dtype == b.dtype
    assert tuple(a.shape) == tuple(b.shape)
    assert torch.equal(raw_bytes(a), raw_bytes(b))


def no_unwritable_warning(record):
    return not [w for w in record if "not writable" in str(w.message)]


# ------------------------------------------------------------------- dense


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(DTYPES)), shape=SHAPES, seed=st.integers(0, 2**16))
def test_dense_round_trip_through_capsule_is_zero_copy(name, shape, seed):
    x = random_tensor(DTYPES[name], shape, seed)
    t = from_torch(x)
    assert t.dtype == name
    assert t.shape == tuple(shape)
    if x.numel():
        assert t._buffer_address(0) == x.data_ptr()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        y = to_torch(hurray.from_hurray(t))
    assert no_unwritable_warning(record)
    assert_same(x, y)
    if x.numel():
        assert y.data_ptr() == x.data_ptr()


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(DTYPES)),
    shape=SHAPES,
    seed=st.integers(0, 2**16),
    mmap=st.booleans(),
)
def test_dense_round_trip_through_file(name, shape, seed, mmap):
    x = random_tensor(DTYPES[name], shape, seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.hurray"
        save_file({"x": x, "twice": x.clone()}, path)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            loaded = load_file(path, mmap=mmap)
        assert no_unwritable_warning(record)
        assert sorted(loaded) == ["twice", "x"]
        assert_same(x, loaded["x"])
        assert_same(x, loaded["twice"])
        with hurray.open(path) as f:
            assert f["x"].dtype == name
        del loaded
        gc.collect()


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_maps_to_its_hurray_name_and_numpy_values(name):
    x = random_tensor(DTYPES[name], (3, 4), seed=7)
    t = from_torch(x)
    assert t.dtype == name
    assert t.descriptor.buffers[0].byte_size == x.numel() * x.element_size()
    # The hurray view of the same bytes decodes to the same values.
    view = t.numpy()
    assert view.dtype == hurray._dtypes.to_numpy(name)
    assert bytes(view.tobytes()) == bytes(raw_bytes(x).numpy().tobytes())


def test_bfloat16_and_float8_values_survive():
    values = torch.tensor([[1.5, -2.0, 0.25], [448.0, -0.0, 3.0]])
    for dtype, ml in [
        (torch.bfloat16, ml_dtypes.bfloat16),
        (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
        (torch.float8_e5m2, ml_dtypes.float8_e5m2),
    ]:
        x = values.to(dtype)
        t = from_torch(x)
        np.testing.assert_array_equal(t.numpy().astype(np.float32), x.float().numpy())
        assert t.numpy().dtype == np.dtype(ml)
        back = to_torch(t)
        assert back.dtype == dtype
        assert torch.equal(back.float(), x.float())


def test_from_torch_shares_memory_both_ways():
    x = torch.zeros(4, 3)
    t = from_torch(x)
    x[1, 2] = 42.0
    assert t.numpy()[1, 2] == 42.0
    y = to_torch(t)
    assert y.data_ptr() == x.data_ptr()
    y[0, 0] = -7.0
    assert x[0, 0].item() == -7.0


def test_hurray_tensor_keeps_torch_memory_alive():
    x = torch.arange(1000, dtype=torch.float64)
    expected = x.clone()
    t = from_torch(x)
    address = x.data_ptr()
    del x
    gc.collect()
    for _ in range(10):  # churn the allocator
        torch.ones(1000, dtype=torch.float64)
    assert t._buffer_address(0) == address
    np.testing.assert_array_equal(t.numpy(), expected.numpy())


def test_torch_tensor_keeps_hurray_tensor_alive():
    t = hurray.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4))
    ref = weakref.ref(t)
    y = to_torch(t)
    del t
    gc.collect()
    assert ref() is not None  # y's storage still holds the hurray tensor
    assert torch.equal(y, torch.arange(12, dtype=torch.int32).reshape(3, 4))
    del y
    gc.collect()
    assert ref() is None


def test_views_conjugates_and_autograd_are_resolved():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    for x in [base.t(), base[:, ::2], base[1:3], base.expand(2, 4, 6)]:
        t = from_torch(x)
        assert t.shape == tuple(x.shape)
        np.testing.assert_array_equal(t.numpy(), x.numpy())
    # A contiguous slice is still shared.
    assert from_torch(base[1:3])._buffer_address(0) == base[1:3].data_ptr()
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    np.testing.assert_array_equal(from_torch(z.conj()).numpy(), np.array([1 - 2j, 3 + 4j]))
    np.testing.assert_array_equal(from_torch(-z.conj().imag).numpy(), np.array([2.0, -4.0]))
    p = torch.nn.Parameter(torch.ones(2, 2))
    assert torch.equal(to_torch(from_torch(p)), torch.ones(2, 2))


def test_zero_dim_and_empty():
    s = torch.tensor(3.25, dtype=torch.float64)
    t = from_torch(s)
    assert t.shape == ()
    assert to_torch(t).shape == ()
    assert to_torch(t).item() == 3.25
    e = torch.empty(0, 5, dtype=torch.bfloat16)
    back = to_torch(hurray.from_hurray(from_torch(e)))
    assert back.shape == (0, 5) and back.dtype == torch.bfloat16


def test_strided_hurray_tensor_to_torch():
    base = np.arange(6, dtype=np.float32)
    raw = base.view(np.uint8)
    d = hurray.Descriptor(
        "float32", (3, 2), strides=(1, 3), buffers=[hurray.Buffer("data", raw.size, 4)]
    )
    t = hurray.Tensor(d, [raw])
    y = to_torch(t)
    assert y.data_ptr() == base.ctypes.data  # strides kept, nothing copied
    assert y.stride() == (1, 3)
    assert torch.equal(y, torch.tensor([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]))
    # torch has no negative strides: a reversed view comes back as a copy.
    d = hurray.Descriptor(
        "float32", (3,), strides=(-1,), byte_offset=8, buffers=[hurray.Buffer("data", raw.size, 4)]
    )
    y = to_torch(hurray.Tensor(d, [raw]))
    assert torch.equal(y, torch.tensor([2.0, 1.0, 0.0]))


def test_dlpack_float32_is_zero_copy():
    x = torch.randn(5, 7)
    t = from_torch(x)
    y = torch.from_dlpack(t)
    assert y.data_ptr() == x.data_ptr()
    assert torch.equal(x, y)
    # and the other direction, through hurray.from_dlpack
    u = hurray.from_dlpack(x)
    assert u._buffer_address(0) == x.data_ptr()
    np.testing.assert_array_equal(u.numpy(), x.numpy())


def test_hurray_save_takes_torch_tensors(tmp_path):
    x = torch.arange(10, dtype=torch.int16)
    hurray.save(tmp_path / "x.hurray", {"x": x})
    np.testing.assert_array_equal(hurray.load(tmp_path / "x.hurray")["x"].numpy(), x.numpy())


# --------------------------------------------------------------- quantized


@pytest.mark.parametrize(
    "qdtype,code", [(torch.qint8, "int8"), (torch.quint8, "uint8"), (torch.qint32, "int32")]
)
def test_per_tensor_quantized_round_trip(qdtype, code, tmp_path):
    zero_point = 0 if qdtype == torch.qint32 else 3
    q = torch.quantize_per_tensor(torch.randn(4, 5) * 3, 0.05, zero_point, qdtype)
    t = from_torch(q)
    d = t.descriptor
    assert d.dtype == code
    assert d.quantization == hurray.PerTensorAffine(0.05, zero_point)
    assert t._buffer_address(0) == q.data_ptr()  # the codes are shared
    np.testing.assert_allclose(t.dequantize(), q.dequantize().numpy(), rtol=1e-6)
    save_file({"q": q}, tmp_path / "q.hurray")
    for back in (to_torch(hurray.from_hurray(t)), load_file(tmp_path / "q.hurray")["q"]):
        assert back.dtype == qdtype
        assert back.qscheme() == torch.per_tensor_affine
        assert back.q_scale() == q.q_scale()
        assert back.q_zero_point() == q.q_zero_point()
        assert torch.equal(back.int_repr(), q.int_repr())


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("qdtype", [torch.qint8, torch.quint8])
def test_per_channel_quantized_round_trip(axis, qdtype, tmp_path):
    x = torch.randn(3, 4, 5)
    n = x.shape[axis]
    scales = torch.linspace(0.01, 0.2, n, dtype=torch.float64)
    zero_points = torch.arange(n, dtype=torch.int64) + (0 if qdtype == torch.qint8 else 100)
    q = torch.quantize_per_channel(x, scales, zero_points, axis, qdtype)
    t = from_torch(q)
    d = t.descriptor
    assert d.quantization == hurray.PerChannelAffine(
        axis, scale_buffer=1, scale_dtype="float64", zero_point_buffer=2, zero_point_dtype="int64"
    )
    assert [b.role for b in d.buffers] == ["data", "scales", "zero_points"]
    np.testing.assert_allclose(t.dequantize(), q.dequantize().numpy(), rtol=1e-6)
    save_file({"q": q}, tmp_path / "q.hurray")
    for back in (to_torch(hurray.from_hurray(t)), load_file(tmp_path / "q.hurray")["q"]):
        assert back.dtype == qdtype
        assert back.qscheme() == torch.per_channel_affine
        assert back.q_per_channel_axis() == axis
        assert torch.equal(back.q_per_channel_scales(), q.q_per_channel_scales())
        assert torch.equal(back.q_per_channel_zero_points(), q.q_per_channel_zero_points())
        assert torch.equal(back.int_repr(), q.int_repr())


def test_per_channel_from_hurray_with_float32_scales_and_inline_zero_point():
    codes = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    scales = np.array([0.5, 0.25, 2.0], dtype=np.float32)
    d = hurray.Descriptor(
        "int8",
        (3, 4),
        quantization=hurray.PerChannelAffine(0, scale_buffer=1, scale_dtype="float32"),
        buffers=[hurray.Buffer("data", 12, 1), hurray.Buffer("scales", 12, 4)],
    )
    t = hurray.Tensor(d, [codes.view(np.uint8).reshape(-1), scales.view(np.uint8)])
    q = to_torch(t)
    assert q.q_per_channel_axis() == 0
    assert q.q_per_channel_zero_points().tolist() == [0, 0, 0]
    assert torch.equal(q.int_repr(), torch.from_numpy(codes))
    np.testing.assert_allclose(q.dequantize().numpy(), t.dequantize())


def _per_channel(q, dtype="int8", extra=()):
    codes = np.arange(1, 13, dtype=np.int8).reshape(3, 4)
    scales = np.array([0.5, 0.25, 2.0], dtype=np.float32)
    buffers = [hurray.Buffer("data", 12, 1), hurray.Buffer("scales", 12, 4)]
    arrays = [codes.view(np.uint8).reshape(-1), scales.view(np.uint8)]
    if q.zero_point_buffer is not None:
        buffers.append(hurray.Buffer("zero_points", 3, 1))
        arrays.append(np.array([1, 2, 3], np.int8).view(np.uint8))
    for role, array in extra:
        buffers.append(hurray.Buffer(role, array.nbytes, array.itemsize))
        arrays.append(array.view(np.uint8))
    return hurray.Tensor(hurray.Descriptor(dtype, (3, 4), quantization=q, buffers=buffers), arrays)


_PC = hurray.PerChannelAffine


@pytest.mark.parametrize(
    "t, field",
    [
        (
            _per_channel(_PC(0, 1, "float32", zero_point=2, zero_point_offset=5)),
            "zero_point_offset",
        ),
        (
            _per_channel(
                _PC(
                    0,
                    1,
                    "float32",
                    zero_point_buffer=2,
                    zero_point_dtype="int8",
                    zero_point_offset=5,
                )
            ),
            "zero_point_offset",
        ),
        (_per_channel(_PC(0, 1, "float32", scale_offset=1.5)), "scale_offset"),
        (
            _per_channel(
                _PC(
                    0,
                    1,
                    "float32",
                    super_scale_buffer=2,
                    super_scale_dtype="float32",
                    super_op="multiply",
                ),
                extra=[("super_scales", np.array([10.0], np.float32))],
            ),
            "super_scale_buffer",
        ),
        (
            _per_channel(
                _PC(0, 1, "float32", codebook_buffer=2),
                "uint8",
                [("codebook", -np.arange(256, dtype=np.float32))],
            ),
            "codebook_buffer",
        ),
    ],
)
def test_per_channel_fields_torch_has_no_place_for_are_refused(t, field, tmp_path):
    """to_torch and load_file read the scales, zero points and axis and
    dropped every other field: an offset, super scales or a code book came
    back as a torch tensor of other values, with no error."""
    want = t.dequantize()
    with pytest.raises(hurray.UnsupportedError, match=f"torch's per-channel .* no .*{field}"):
        to_torch(t)
    path = tmp_path / "pc.hurray"
    hurray.save(path, {"w": t})
    with pytest.raises(hurray.UnsupportedError, match=field):
        load_file(path)
    got = load_file(path, dequantize=torch.float32)["w"]
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("zero_point", [1000, -1])
def test_a_zero_point_outside_the_code_range_is_refused_for_torch(zero_point):
    """int32 zero points beside uint8 codes: torch took them and then failed
    every operation on the tensor ("zero_point 1000 is above upper bound")."""
    q = _PC(0, 1, "float32", zero_point_buffer=2, zero_point_dtype="int32")
    d = hurray.Descriptor(
        "uint8",
        (3, 4),
        quantization=q,
        buffers=[
            hurray.Buffer("data", 12, 1),
            hurray.Buffer("scales", 12, 4),
            hurray.Buffer("zero_points", 12, 4),
        ],
    )
    zero_points = np.array([0, zero_point, 0], np.int32)
    t = hurray.Tensor(
        d, [np.arange(12, dtype=np.uint8), np.ones(3, np.float32), zero_points.view(np.uint8)]
    )
    assert t.dequantize()[1, 0] == 4 - zero_point  # hurray computes with any
    with pytest.raises(hurray.UnsupportedError, match=f"zero point {zero_point} lies outside"):
        to_torch(t)


# ------------------------------------------------------------------ sparse


def _sparse_cases():
    g = torch.Generator().manual_seed(1)
    dense = torch.randn(6, 8, generator=g) * (torch.rand(6, 8, generator=g) < 0.3)
    blocky = torch.zeros(6, 8)
    blocky[0:2, 2:4] = torch.randn(2, 2, generator=g)
    blocky[4:6, 0:2] = torch.randn(2, 2, generator=g)
    return {
        "coo": dense.to_sparse(),
        "coo_3d": (
            torch.randn(3, 4, 5, generator=g) * (torch.rand(3, 4, 5, generator=g) < 0.2)
        ).to_sparse(),
        "coo_1d": torch.tensor([0.0, 2.0, 0.0, -1.0]).to_sparse(),
        "coo_empty": torch.zeros(3, 3).to_sparse(),
        "coo_uncoalesced": torch.sparse_coo_tensor(
            [[0, 1, 0], [1, 0, 1]], [1.0, 2.0, 3.0], (2, 2), check_invariants=True
        ),
        "coo_bf16": dense.to(torch.bfloat16).to_sparse(),
        "csr": dense.to_sparse_csr(),
        "csr_int32": torch.sparse_csr_tensor(
            torch.tensor([0, 1, 3], dtype=torch.int32),
            torch.tensor([2, 0, 1], dtype=torch.int32),
            torch.tensor([1.0, 2.0, 3.0]),
            (2, 3),
        ),
        "csr_int64_values": dense.to(torch.int64).to_sparse_csr(),
        "csc": dense.to_sparse_csc(),
        "bsr": blocky.to_sparse_bsr((2, 2)),
        "bsr_rect": blocky.to_sparse_bsr((2, 4)),
    }


with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # torch: "sparse CSR is in beta"
    SPARSE = _sparse_cases()


@pytest.mark.parametrize("case", sorted(SPARSE))
def test_sparse_round_trip(case, tmp_path):
    x = SPARSE[case]
    t = from_torch(x)
    assert isinstance(t, hurray.SparseTensor)
    layout = t.descriptor.layout
    assert (
        layout.format
        == {
            torch.sparse_coo: "coo",
            torch.sparse_csr: "csr",
            torch.sparse_csc: "csc",
            torch.sparse_bsr: "bsr",
        }[x.layout]
    )
    expected = x.to_dense()
    np.testing.assert_array_equal(
        t.to_dense().astype(np.float64), expected.to(torch.float64).numpy()
    )
    save_file({"s": x}, tmp_path / "s.hurray")
    with hurray.open(tmp_path / "s.hurray") as f:
        stored = f.descriptor("s")
        assert (stored.dtype, stored.shape, stored.layout) == (t.dtype, t.shape, layout)
    for back in (
        to_torch(t),
        to_torch(hurray.from_hurray(t)),
        load_file(tmp_path / "s.hurray")["s"],
        load_file(tmp_path / "s.hurray", mmap=True)["s"],
    ):
        assert back.layout == x.layout
        assert back.dtype == x.dtype
        assert back.shape == x.shape
        assert torch.equal(back.to_dense(), expected)
        if x.layout == torch.sparse_coo:
            assert back.is_coalesced()
            assert torch.equal(back.indices(), x.coalesce().indices())
        if x.layout == torch.sparse_bsr:
            assert back.values().shape[1:] == x.values().shape[1:]


def test_sparse_parts_are_shared():
    x = SPARSE["csr"]
    t = from_torch(x)
    assert t._buffer_address(0) == x.values().data_ptr()
    assert t._buffer_address(1) == x.crow_indices().data_ptr()
    assert t._buffer_address(2) == x.col_indices().data_ptr()
    assert t.descriptor.layout.index_dtype == "int64"
    assert from_torch(SPARSE["csr_int32"]).descriptor.layout.index_dtype == "int32"
    coo = SPARSE["coo"].coalesce()
    t = from_torch(coo)
    assert t.descriptor.layout.canonical
    assert t._buffer_address(0) == coo.values().data_ptr()
    assert t._buffer_address(1) == coo.indices()[0].data_ptr()
    assert t._buffer_address(2) == coo.indices()[1].data_ptr()


def test_scipy_matrix_to_torch():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    m = scipy_sparse.random(5, 7, density=0.3, format="csr", random_state=3, dtype=np.float32)
    y = to_torch(hurray.SparseTensor.from_scipy(m))
    assert y.layout == torch.sparse_csr
    np.testing.assert_array_equal(y.to_dense().numpy(), m.toarray())
    y = to_torch(hurray.SparseTensor.from_scipy(m.tocoo()))
    assert y.layout == torch.sparse_coo
    np.testing.assert_array_equal(y.to_dense().numpy(), m.toarray())


def test_out_of_range_sparse_indices_never_reach_torch():
    # Placement validation refuses the tensor before anything can hand it on.
    with pytest.raises(hurray.PlacementError) as info:
        hurray.SparseTensor.from_arrays(
            "coo", (2, 2), np.array([1.0, 2.0]), coords=[np.array([0, 5]), np.array([1, 0])]
        )
    assert info.value.status_name == "HURRAY_ERR_SPARSE_INDEX_BOUNDS"


@pytest.mark.parametrize(
    "bad", ["falling indptr", "huge indptr", "coordinate out of range", "canonical duplicate"]
)
def test_sparse_indices_changed_after_the_tensor_was_made_are_checked_by_to_torch(bad):
    """from_arrays keeps int64 index arrays zero-copy; changed afterwards,
    to_dense and to_scipy refused them (PlacementError) while to_torch gave
    numpy's ValueError, a 1.46 TiB MemoryError or torch's RuntimeError."""
    values = np.array([1.0, 2.0], np.float32)
    if bad in ("falling indptr", "huge indptr"):
        indptr, indices = np.array([0, 1, 2], np.int64), np.array([0, 1], np.int64)
        t = hurray.SparseTensor.from_arrays("csr", (2, 2), values, indptr=indptr, indices=indices)
        indptr[1:] = [2, 1] if bad == "falling indptr" else [10**11, 2 * 10**11]
        expected = hurray.PlacementError
    else:
        rows, cols = np.array([0, 1], np.int64), np.array([1, 0], np.int64)
        t = hurray.SparseTensor.from_arrays(
            "coo", (2, 2), values, coords=[rows, cols], canonical=True
        )
        if bad == "coordinate out of range":
            rows[1] = 99
            expected = hurray.PlacementError
        else:
            rows[1], cols[1] = 0, 1  # (0, 1) twice, still flagged canonical
            expected = hurray.HurrayError
    with pytest.raises(expected):
        to_torch(t)
    if expected is hurray.PlacementError:
        with pytest.raises(expected):
            t.to_dense()


# -------------------------------------------------------------- unsupported


def _nf4_tensor():
    codes = np.arange(32, dtype=np.uint8).reshape(-1) % 16
    packed = hurray._dtypes.pack("uint4", codes.view(ml_dtypes.uint4))
    absmax = np.array([1.0], dtype=np.float32)
    d = hurray.Descriptor(
        "uint4",
        (32,),
        quantization=hurray.Nf4(64, absmax_buffer=1),
        buffers=[hurray.Buffer("data", packed.size, 1), hurray.Buffer("scales", 4, 4)],
    )
    return hurray.Tensor(d, [packed, absmax.view(np.uint8)])


@pytest.mark.parametrize(
    "ml", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn]
)
def test_sub_byte_tensor_to_torch_is_unsupported(ml):
    t = hurray.from_numpy(np.zeros((2, 4), dtype=ml))
    with pytest.raises(hurray.UnsupportedError, match="dequantize"):
        to_torch(t)


def test_nf4_to_torch_is_unsupported_and_dequantize_works():
    t = _nf4_tensor()
    with pytest.raises(hurray.UnsupportedError, match="dequantize"):
        to_torch(t)
    assert t.dequantize().shape == (32,)


def test_block_affine_and_paged_to_torch_are_unsupported():
    codes = np.zeros(8, dtype=np.int8)
    scales = np.ones(2, dtype=np.float16)
    d = hurray.Descriptor(
        "int8",
        (8,),
        quantization=hurray.BlockAffine(0, 4, scale_buffer=1),
        buffers=[hurray.Buffer("data", 8, 1), hurray.Buffer("scales", 4, 2)],
    )
    with pytest.raises(hurray.UnsupportedError, match="dequantize"):
        to_torch(hurray.Tensor(d, [codes.view(np.uint8), scales.view(np.uint8)]))
    pool = np.arange(8, dtype=np.float32)
    table = np.array([1, 0, 3, 2], dtype=np.int32)
    d = hurray.Descriptor(
        "float32",
        (2, 4),
        layout=hurray.Paged(1, 2, 4),
        buffers=[hurray.Buffer("page_pool", 32, 4), hurray.Buffer("page_table", 16, 4)],
    )
    paged = hurray.Tensor(d, [pool.view(np.uint8), table.view(np.uint8)])
    with pytest.raises(hurray.UnsupportedError, match="to_dense"):
        to_torch(paged)


def test_from_torch_rejects_what_hurray_cannot_hold():
    rejected = [
        torch.zeros(2, dtype=torch.complex32),
        torch.zeros(2, device="meta"),
        torch.eye(4).to_sparse_bsc((2, 2)),
        torch.sparse_coo_tensor([[0, 1]], torch.ones(2, 3), (2, 3)),  # hybrid COO
        torch.zeros(2, 3, 3).to_sparse_csr(),  # batched CSR
        torch.quantize_per_tensor(torch.zeros(4), 0.1, 0, torch.quint4x2),
    ]
    if hasattr(torch, "float8_e4m3fnuz"):
        rejected.append(torch.zeros(2).to(torch.float8_e4m3fnuz))
    for x in rejected:
        with pytest.raises(hurray.UnsupportedError):
            from_torch(x)
    float_qparams = torch.quantize_per_channel(
        torch.randn(2, 3), torch.ones(2, dtype=torch.float64), torch.zeros(2), 0, torch.quint8
    )
    assert float_qparams.qscheme() == torch.per_channel_affine_float_qparams
    with pytest.raises(hurray.UnsupportedError, match="dequantize"):
        from_torch(float_qparams)
    with pytest.raises(TypeError):
        from_torch(np.zeros(3))
    with pytest.raises(TypeError):
        to_torch(torch.zeros(3))


def test_unsupported_device_message_says_what_to_do():
    with pytest.raises(hurray.UnsupportedError, match=r"\.cpu\(\)"):
        from_torch(torch.zeros(2, device="meta"))


# ------------------------------------------------------------------- files


def test_linear_state_dict_round_trip_with_metadata(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8)
    path = tmp_path / "model.hurray"
    save_file(model.state_dict(), path, metadata={"format": "pt", "epoch": 3})
    with hurray.open(path) as f:
        assert f.metadata == {"format": "pt", "epoch": 3}
        assert sorted(f.keys()) == ["bias", "weight"]
        assert f.descriptor("weight").shape == (8, 16)
    loaded = load_file(path)
    assert sorted(loaded) == ["bias", "weight"]
    for name, value in model.state_dict().items():
        assert loaded[name].dtype == value.dtype
        assert torch.equal(loaded[name], value)
    clone = torch.nn.Linear(16, 8)
    clone.load_state_dict(loaded)
    x = torch.randn(4, 16)
    assert torch.equal(clone(x), model(x))


def test_load_file_tensors_are_writable_by_default(tmp_path):
    # Run in a child: if load_file handed out views of the read-only mapping,
    # the write below would kill the process rather than fail an assert.
    path = tmp_path / "x.hurray"
    save_file({"x": torch.ones(3)}, path)
    script = (
        "import sys, torch\n"
        "from hurray.torch import load_file\n"
        "x = load_file(sys.argv[1])['x']\n"
        "x.add_(1)\n"
        "print(x.tolist())\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "[2.0, 2.0, 2.0]"
    # The file is untouched, whichever way it is read.
    assert load_file(path)["x"].tolist() == [1.0, 1.0, 1.0]
    assert load_file(path, mmap=True)["x"].tolist() == [1.0, 1.0, 1.0]


def test_load_file_moves_to_device(tmp_path):
    path = tmp_path / "x.hurray"
    save_file({"x": torch.arange(4.0)}, path)
    meta = load_file(path, device="meta")["x"]
    assert meta.device.type == "meta" and meta.shape == (4,)
    cpu = load_file(path, device=torch.device("cpu"))["x"]
    assert cpu.device.type == "cpu" and cpu.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_save_file_checks_its_arguments(tmp_path):
    with pytest.raises(TypeError):
        save_file({"x": np.zeros(3)}, tmp_path / "x.hurray")
    with pytest.raises(TypeError):
        save_file([("x", torch.zeros(3))], tmp_path / "x.hurray")
    with pytest.raises(hurray.UnsupportedError):
        save_file({"x": torch.zeros(3, dtype=torch.complex32)}, tmp_path / "x.hurray")
    assert not (tmp_path / "x.hurray").exists()


# ------------------------------------- session 41: torch edge cases


def test_sparse_rows_in_any_order_load_into_torch(tmp_path):
    """CSR/BSR whose indices are unsorted or repeated within a row are valid
    files (layouts.md §3); to_torch raised torch's RuntimeError because torch
    needs sorted, distinct indices. They are sorted and summed now."""
    csr = torch.sparse_csr_tensor(
        torch.tensor([0, 3, 3, 4]),
        torch.tensor([2, 0, 2, 1]),
        torch.tensor([1.0, 2.0, 4.0, 8.0]),
        (3, 3),
        check_invariants=False,
    )
    dense = torch.tensor([[2.0, 0.0, 5.0], [0.0, 0.0, 0.0], [0.0, 8.0, 0.0]])
    hurray.torch.save_file({"m": csr}, tmp_path / "m.hurray")
    back = hurray.torch.load_file(tmp_path / "m.hurray")["m"]
    assert back.layout == torch.sparse_csr and torch.equal(back.to_dense(), dense)
    assert back.col_indices().tolist() == [0, 2, 1]
    # int8 repeats wrap as hurray's to_dense and numpy wrap them
    t = hurray.SparseTensor.from_arrays(
        "csr",
        (1, 2),
        np.array([100, 100], np.int8),
        indptr=np.array([0, 2]),
        indices=np.array([1, 1]),
    )
    assert t.to_torch().to_dense().tolist() == [[0, -56]] == t.to_dense().tolist()
    # scipy's own BSR from a dense matrix has unsorted block columns
    m = sp.bsr_matrix(np.arange(16.0).reshape(4, 4) % 3, blocksize=(2, 1))
    back = hurray.SparseTensor.from_scipy(m).to_torch()
    assert np.array_equal(back.to_dense().numpy(), m.toarray())
    f16 = hurray.SparseTensor.from_arrays(
        "csr",
        (1, 2),
        np.ones(2, np.float16),
        indptr=np.array([0, 2]),
        indices=np.array([1, 1]),
    )
    with pytest.raises(hurray.UnsupportedError, match="no sum"):
        f16.to_torch()


def test_from_torch_takes_a_size_one_dimension_with_any_stride():
    """torch.tensor([1+2j]).imag is contiguous with stride 2: viewing its
    bytes raised torch's RuntimeError."""
    for t in (torch.tensor([1 + 2j]).imag, torch.arange(10.0).as_strided((1,), (5,), 3)):
        back = hurray.torch.to_torch(hurray.torch.from_torch(t))
        assert torch.equal(back, t.contiguous())


def test_nested_tensors_are_unsupported():
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    with pytest.raises(hurray.UnsupportedError, match="nested"):
        hurray.torch.from_torch(nested)
    with pytest.raises(hurray.UnsupportedError, match="nested"):
        hurray.torch.save_file({"n": nested}, "/nonexistent/never-written.hurray")


def test_save_file_to_the_open_file_a_view_is_mapped_from_is_refused(tmp_path):
    """from_torch copied a transposed view out of the mapping after open(p,
    "wb") had truncated the file: SIGBUS. The check now runs first."""
    p = tmp_path / "w.hurray"
    hurray.torch.save_file({"w": torch.arange(12.0).reshape(3, 4)}, p)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import hurray, hurray.torch, torch
w = hurray.torch.load_file({str(p)!r})["w"]
for view in (w.t(), w[:, ::2], w.conj()):
    with open({str(p)!r}, "r+b") as f:
        try:
            hurray.torch.save_file({{"w": view}}, f)
        except hurray.InvalidArgumentError as e:
            assert "mapping of the file being written" in str(e), e
        else:
            raise SystemExit("saved")
print("ok")
""",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_load_file_device_and_save_file_metadata_arguments():
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # torch.device raises a C++ exception, which does not unwind when
        # libstdc++ cannot intercept __cxa_throw (make test-python-asan).
        pytest.skip("torch's C++ exceptions abort under the preloaded ASan runtime")
    # None is the CPU, as in safetensors.torch.load_file and safe_open; it
    # was a TypeError from load_file alone.
    assert hurray.torch._device(None) == torch.device("cpu")
    with pytest.raises(TypeError, match="device must be"):
        hurray.torch._device(True)
    with pytest.raises(TypeError, match="device must be"):
        hurray.torch._device(1.0)
    with pytest.raises(ValueError, match="device 'gpu'"):
        hurray.torch._device("gpu")
    with pytest.raises(ValueError, match="device -1"):
        hurray.torch._device(-1)
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        hurray.torch.save_file({"a": torch.ones(1)}, io.BytesIO(), metadata=[("k", "v")])


def test_tensors_without_memory_of_their_own_are_refused(tmp_path):
    """A functional tensor's .numpy() hands out memory that is not its data:
    from_torch saved garbage ([1.5e16, 3e-41, 0]) without a word, and
    save_file failed with torch's RuntimeError. A fake tensor was a bare
    RuntimeError too."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # torch refuses the data pointer with a C++ exception, which a
        # preloaded ASan runtime cannot let unwind (make test-python-asan).
        pytest.skip("torch's C++ exceptions abort under a preloaded ASan runtime")
    from torch._subclasses.fake_tensor import FakeTensorMode

    functional = torch._to_functional_tensor(torch.arange(3.0))
    with FakeTensorMode():
        fake = torch.ones(3)
    for t in (functional, fake):
        with pytest.raises(hurray.UnsupportedError, match="memory of their own"):
            from_torch(t)
        with pytest.raises(hurray.UnsupportedError, match="memory of their own"):
            save_file({"t": t}, tmp_path / "t.hurray")
    assert not (tmp_path / "t.hurray").exists()


@pytest.mark.parametrize("through", ["from_hurray", "from_dlpack"])
@pytest.mark.parametrize("memory", ["readonly mapping", "bytes"])
def test_read_only_memory_stays_protected_through_a_capsule(tmp_path, through, memory):
    """A tensor taken from hurray's own capsule lost its producer's
    protection: to_torch gave a view of a PROT_READ mapping (a write was
    SIGSEGV) or of a bytes object (a write changed immutable bytes). The
    capsule's context now says read-only, and to_torch copies."""
    if memory == "bytes":
        data = bytes(4096)
        t = hurray.Tensor(
            hurray.Descriptor("float32", (1024,), buffers=[hurray.Buffer("data", 4096, 4)]),
            [data],
        )
    else:
        hurray.save(tmp_path / "ro.hurray", {"w": np.ones(1024, np.float32)})
        f = hurray.open(tmp_path / "ro.hurray", readonly=True)
        t = f["w"]
    taken = getattr(hurray, through)(t)
    assert taken._protected
    y = to_torch(taken)
    assert y.data_ptr() != t._buffer_address(0)
    y[0] = 5.0
    assert t.numpy()[0] != 5.0
    mutable = hurray.Tensor(
        hurray.Descriptor("float32", (4,), buffers=[hurray.Buffer("data", 16, 4)]),
        [np.zeros(4, np.float32)],
    )
    shared = hurray.from_hurray(mutable)
    assert not shared._protected  # writable memory stays a view
    assert to_torch(shared).data_ptr() == mutable._buffer_address(0)


def test_a_converter_source_tensor_is_protected(tmp_path):
    """The converter's sources (hurray._formats) hand out views of a
    read-only mapping through the same capsule: to_torch gave a view whose
    first write was SIGSEGV. Their capsules say read-only too."""
    from hurray import _formats

    hurray.save(tmp_path / "a.hurray", {"w": np.ones(1024, np.float32)})
    src = _formats.Source(str(tmp_path / "a.hurray"))
    try:
        t = hurray.from_hurray(src.get(0))
        assert t._protected
        y = to_torch(t)
        assert y.data_ptr() != t._buffer_address(0)
        y[0] = 5.0
        assert t.numpy()[0] == 1.0
    finally:
        src.close()


def test_int32_codes_whose_difference_wraps_in_torch_are_refused(tmp_path):
    """torch's per-tensor qint32 dequantize subtracts the zero point in
    int32: codes [2**30, 3] with zero point -2**30 came out as
    [-2147483648, 1073741824] through to_torch and load_file, silently. Such
    a tensor is refused; one whose differences fit is converted as before."""
    d = hurray.Descriptor(
        "int32",
        (2,),
        quantization=hurray.PerTensorAffine(1.0, -(2**30)),
        buffers=[hurray.Buffer("data", 8, 4)],
    )
    wraps = hurray.Tensor(d, [np.array([2**30, 3], np.int32)])
    assert wraps.dequantize().tolist() == [2.0**31, 2.0**30]  # float32
    with pytest.raises(hurray.UnsupportedError, match="past int32"):
        to_torch(wraps)
    hurray.save(tmp_path / "q.hurray", {"q": wraps})
    with pytest.raises(hurray.UnsupportedError, match="past int32"):
        load_file(tmp_path / "q.hurray")
    got = load_file(tmp_path / "q.hurray", dequantize=torch.float32)["q"]
    assert got.tolist() == [2.0**31, 2.0**30]
    fits = hurray.Tensor(d, [np.array([5, -3], np.int32)])
    assert to_torch(fits).dequantize().tolist() == fits.dequantize().tolist()


def test_torch_copies_are_held_to_the_output_limit(tmp_path):
    """to_dense() and dequantize() refuse to expand a few stored bytes past
    max(64 MiB, 64x the stored bytes); the torch paths that copy did not: a
    287-byte file loaded as a 512 MiB tensor (negative strides, which torch
    lacks), a 1-byte int8 tensor broadcast to 2**29 codes became a 512 Mi
    qint8 tensor, and load_file(dequantize=) allocated the whole output
    (or raised torch's RuntimeError past memory)."""
    from hurray import Buffer, Descriptor, PerTensorAffine, Tensor

    rows = 2**25
    d = Descriptor(
        "float32", (rows, 4), strides=(0, -1), byte_offset=12, buffers=[Buffer("data", 16)]
    )
    neg = Tensor(d, [np.arange(4, dtype=np.float32)])
    with pytest.raises(hurray.LimitError):
        neg.to_dense()
    with pytest.raises(hurray.LimitError):
        to_torch(neg)
    q = Descriptor(
        "int8",
        (2**29,),
        strides=(0,),
        quantization=PerTensorAffine(scale=0.5, zero_point=0),
        buffers=[Buffer("data", 1)],
    )
    codes = Tensor(q, [np.ones(1, np.int8)])
    with pytest.raises(hurray.LimitError):
        codes.dequantize()
    with pytest.raises(hurray.LimitError):
        to_torch(codes)
    path = tmp_path / "b.hurray"
    hurray.save(path, {"neg": neg, "q": codes})
    assert os.path.getsize(path) < 4096
    with pytest.raises(hurray.LimitError):
        load_file(path)
    with pytest.raises(hurray.LimitError):
        load_file(path, dequantize=torch.float32)
    # Within the limit they still copy: 64 elements from 16 bytes.
    small = Tensor(
        Descriptor(
            "float32", (16, 4), strides=(0, -1), byte_offset=12, buffers=[Buffer("data", 16)]
        ),
        [np.arange(4, dtype=np.float32)],
    )
    assert to_torch(small).tolist() == [[3.0, 2.0, 1.0, 0.0]] * 16


def test_to_torch_copy_of_read_only_memory_is_held_to_the_output_limit(tmp_path):
    """to_torch copies a tensor over read-only memory (torch has no
    read-only tensors), and that copy had no limit: a 265-byte file with
    strides (0, 0) gave a 256 MiB tensor where to_dense() raises."""
    from hurray import Buffer, Descriptor, Tensor

    n = 8192
    d = Descriptor("float32", (n, n), strides=(0, 0), buffers=[Buffer("data", 4, 4)])
    hurray.save(tmp_path / "b.hurray", {"x": Tensor(d, [np.ones(1, np.float32)])})
    with hurray.open(tmp_path / "b.hurray", readonly=True) as f:
        with pytest.raises(hurray.LimitError):
            f["x"].to_dense()
        with pytest.raises(hurray.LimitError):
            to_torch(f["x"])
    over_bytes = Tensor(d, [np.frombuffer(b"\0\0\x80\x3f", np.uint8)])
    with pytest.raises(hurray.LimitError):
        to_torch(over_bytes)
    small = Tensor(
        Descriptor("float32", (16, 4), strides=(0, 0), buffers=[Buffer("data", 4, 4)]),
        [np.frombuffer(b"\0\0\x80\x3f", np.uint8)],
    )
    out = to_torch(small)  # within the limit: a writable copy
    out += 1
    assert out.tolist() == [[2.0] * 4] * 16


def test_from_torch_sorts_an_uncoalesced_float8_coo_tensor(tmp_path):
    """torch cannot coalesce float8 (it would sum duplicates): its
    NotImplementedError escaped save_file and from_torch. The coordinates
    are sorted here instead, and a repeated one is UnsupportedError."""
    f8 = torch.float8_e4m3fn
    values = torch.tensor([1.0, 2.0, 3.0]).to(f8)
    s = torch.sparse_coo_tensor(torch.tensor([[3, 0, 2], [1, 0, 4]]), values, (4, 5))
    assert not s.is_coalesced()
    save_file({"s": s}, tmp_path / "s.hurray")
    got = load_file(tmp_path / "s.hurray")["s"]
    assert got.is_coalesced()
    assert got.dtype == f8  # torch cannot densify float8 sparse tensors
    assert got._indices().tolist() == [[0, 2, 3], [0, 4, 1]]
    assert got._values().float().tolist() == [2.0, 3.0, 1.0]
    dup = torch.sparse_coo_tensor(torch.tensor([[1, 1]]), values[:2], (4,))
    with pytest.raises(hurray.UnsupportedError, match="repeats a coordinate"):
        from_torch(dup)
    hybrid = torch.sparse_coo_tensor(torch.tensor([[1, 0]]), torch.ones(2, 3).to(f8), (4, 3))
    with pytest.raises(hurray.UnsupportedError, match="hybrid sparse COO"):
        from_torch(hybrid)


def test_a_tensor_subclass_defined_elsewhere_goes_through_from_torch():
    """hurray.from_dlpack and as_tensor picked torch's route by the class's
    module name: a Parameter subclass of the user's went to numpy's DLPack
    import (BufferError for requires_grad, RuntimeError for bfloat16)."""

    class MyParam(torch.nn.Parameter):
        pass

    for dtype in (torch.float32, torch.bfloat16):
        p = MyParam(torch.arange(4, dtype=torch.float32).to(dtype))  # requires_grad=True
        for make in (hurray.from_dlpack, hurray.as_tensor):
            t = make(p)
            assert t.dtype == str(dtype).replace("torch.", "")
            assert to_torch(t).float().tolist() == [0.0, 1.0, 2.0, 3.0]
