"""Layouts end to end: sparse (scipy and torch), paged, composite and
extension tensors through a file (both read modes) and through the
__hurray__ capsule, compared with the dense tensors they represent;
statistics written by save(..., statistics=True) and shown by `hurray ls`;
and malformed contents refused with PlacementError naming the rule."""

import io
import json
import os
import pathlib
import subprocess
import tempfile
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hurray
from hurray import (
    Buffer,
    Composite,
    Dense,
    Descriptor,
    Extension,
    Member,
    Paged,
    PerChannelAffine,
    Sparse,
    Statistics,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("HURRAY_CLI", str(REPO / "build" / "hurray"))
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason=f"no hurray CLI at {CLI}")

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def workdir():
    """One folder for the module, on /dev/shm when there is one (fsync is
    cheap there); hypothesis examples overwrite files in it."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="hurray-layouts-", dir=base) as path:
        yield pathlib.Path(path)


def round_trips(t, folder, name="x"):
    """(how, tensor) for the capsule and for a file read with mmap and with
    pread. Every file gets a fresh name: a mapping keeps the old one alive."""
    yield "capsule", hurray.from_hurray(t)
    path = pathlib.Path(tempfile.mkstemp(suffix=".hurray", dir=folder)[1])
    hurray.save(path, {name: t})
    for mmap in (True, False):
        with hurray.open(path, mmap=mmap) as f:
            yield f"file(mmap={mmap})", f[name]
    loaded = hurray.load(path)
    assert set(loaded) == {name}
    yield "load", loaded[name]
    path.unlink()


def assert_same_parts(u, t):
    """Same descriptor and byte-identical buffers."""
    assert u.descriptor == t.descriptor
    assert u.buffer_count == t.buffer_count
    for i in range(t.buffer_count):
        assert bytes(u._buffer(i)) == bytes(t._buffer(i)), f"buffer {i}"


def status(excinfo, name):
    assert excinfo.value.status_name == name, str(excinfo.value)
    assert excinfo.value.args[0].startswith(name + ":")  # args: KeyError's str() quotes


def aligned_copy(data, alignment=64):
    """Writable uint8 copy of `data` at an address that is a multiple of
    `alignment` (what a buffer table may ask for)."""
    data = np.frombuffer(bytes(data), np.uint8)
    block = np.zeros(data.size + alignment, np.uint8)
    start = (-block.ctypes.data) % alignment
    out = np.ndarray((data.size,), np.uint8, buffer=block, offset=start)
    out[:] = data
    return out


def cli(*args):
    out = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


# ================================================================== scipy


def random_dense(rng, rows, cols, density, empty_rows, dtype=np.float64):
    values = rng.standard_normal((rows, cols)) + 3.0  # never a stored zero by chance
    dense = np.where(rng.random((rows, cols)) < density, values, 0.0).astype(dtype)
    if rows:
        dense[rng.random(rows) < empty_rows] = 0
    return dense


def with_index_dtype(m, index_dtype):
    """The scipy matrix with its index arrays in `index_dtype`."""
    if m.format == "coo":
        if hasattr(m, "coords"):
            # (the row/col setters keep scipy's dtype: set both at once)
            m.coords = tuple(c.astype(index_dtype) for c in m.coords)
        else:  # scipy < 1.13: row and col are plain attributes
            m.row, m.col = m.row.astype(index_dtype), m.col.astype(index_dtype)
    else:
        m.indices = m.indices.astype(index_dtype)
        m.indptr = m.indptr.astype(index_dtype)
    return m


def check_sparse_trips(t, dense, index_dtype, fmt, folder):
    parts = t.parts()
    assert t.descriptor.layout.format == fmt
    assert t.descriptor.layout.index_dtype == np.dtype(index_dtype).name
    np.testing.assert_array_equal(t.to_dense(), dense)
    for how, u in round_trips(t, folder):
        assert isinstance(u, hurray.SparseTensor), how
        assert_same_parts(u, t)
        np.testing.assert_array_equal(u.to_dense(), dense, err_msg=how)
        back = u.to_scipy()
        assert back.format == fmt, how
        np.testing.assert_array_equal(back.toarray(), dense, err_msg=how)
        for key, value in u.parts().items():
            if key in ("values", "indptr", "indices"):
                np.testing.assert_array_equal(value, parts[key], err_msg=f"{how} {key}")
                assert value.dtype == parts[key].dtype
            elif key == "coords":
                for a, b in zip(value, parts[key]):
                    np.testing.assert_array_equal(a, b)
                    assert a.dtype == b.dtype


@SETTINGS
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 9),
    density=st.sampled_from([0.0, 0.2, 0.6, 1.0]),
    empty_rows=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**32 - 1),
    fmt=st.sampled_from(["coo", "csr", "csc"]),
    index_dtype=st.sampled_from([np.int32, np.int64]),
    value_dtype=st.sampled_from([np.float32, np.float64, np.int16]),
)
def test_scipy_round_trip(
    workdir, rows, cols, density, empty_rows, seed, fmt, index_dtype, value_dtype
):
    rng = np.random.default_rng(seed)
    dense = random_dense(rng, rows, cols, density, empty_rows, value_dtype)
    m = with_index_dtype(getattr(sp, f"{fmt}_matrix")(dense), index_dtype)
    t = hurray.SparseTensor.from_scipy(m)
    if fmt == "coo":
        assert t.descriptor.layout.canonical == bool(m.has_canonical_format)
    check_sparse_trips(t, dense, index_dtype, fmt, workdir)


@SETTINGS
@given(
    block=st.sampled_from([(1, 1), (2, 3), (3, 2), (2, 2)]),
    brows=st.integers(1, 4),
    bcols=st.integers(1, 4),
    density=st.sampled_from([0.0, 0.3, 1.0]),
    seed=st.integers(0, 2**32 - 1),
    index_dtype=st.sampled_from([np.int32, np.int64]),
)
def test_scipy_bsr_round_trip(workdir, block, brows, bcols, density, seed, index_dtype):
    rng = np.random.default_rng(seed)
    rows, cols = brows * block[0], bcols * block[1]
    # Whole blocks present or absent, and some empty block rows.
    mask = np.kron(rng.random((brows, bcols)) < density, np.ones(block, bool))
    dense = np.where(mask, rng.standard_normal((rows, cols)) + 3.0, 0.0).astype(np.float32)
    m = with_index_dtype(sp.bsr_matrix(dense, blocksize=block), index_dtype)
    t = hurray.SparseTensor.from_scipy(m)
    assert t.descriptor.layout.block_shape == block
    assert t.descriptor.layout.nnz == m.indices.size
    check_sparse_trips(t, dense, index_dtype, "bsr", workdir)


@pytest.mark.parametrize("fmt", ["coo", "csr", "bsr"])
def test_to_scipy_of_values_scipy_cannot_hold_is_unsupported(fmt):
    """scipy.sparse has no float16: to_scipy raised scipy's ValueError
    (COO, BSR), or gave a csr_matrix whose first toarray() failed."""
    values = np.ones((1, 2, 2) if fmt == "bsr" else 2, np.float16)
    index = dict(indices=np.array([1], np.int32), indptr=np.array([0, 1], np.int32))
    t = {
        "coo": lambda: hurray.SparseTensor.from_arrays(
            "coo", (2, 2), values, coords=[np.array([0, 1]), np.array([1, 0])]
        ),
        "csr": lambda: hurray.SparseTensor.from_arrays(
            "csr", (2, 2), values, indptr=np.array([0, 1, 2]), indices=np.array([1, 0])
        ),
        "bsr": lambda: hurray.SparseTensor.from_arrays(
            "bsr", (2, 4), values, block_shape=(2, 2), **index
        ),
    }[fmt]()
    with pytest.raises(hurray.UnsupportedError, match="scipy.sparse holds no float16"):
        t.to_scipy()
    assert np.asarray(t.to_dense()).dtype == np.float16


@pytest.mark.parametrize("fmt", ["coo", "csr", "csc", "bsr"])
def test_scipy_all_empty_matrix(workdir, fmt):
    dense = np.zeros((4, 6), np.float32)
    m = getattr(sp, f"{fmt}_matrix")(dense)
    t = hurray.SparseTensor.from_scipy(m)
    assert t.descriptor.layout.nnz == 0
    check_sparse_trips(t, dense, m.indices.dtype if fmt != "coo" else m.row.dtype, fmt, workdir)
    stats = t.with_statistics().descriptor.statistics
    assert stats == Statistics(min=0.0, max=0.0, nan_count=0, zero_count=24)


def test_scipy_coo_duplicates_sum(workdir):
    """A COO with a position stored twice (not canonical) sums it, like
    scipy, in to_dense after every trip."""
    m = sp.coo_matrix(
        (np.array([1.5, 2.0, 0.25], np.float32), (np.array([2, 0, 2]), np.array([1, 3, 1]))),
        shape=(3, 4),
    )
    assert not m.has_canonical_format
    t = hurray.SparseTensor.from_scipy(m)
    assert t.descriptor.layout.canonical is False
    check_sparse_trips(t, m.toarray(), np.int32, "coo", workdir)
    assert t.to_dense()[2, 1] == 1.75


def test_float16_duplicates_have_no_sum():
    """to_dense in C has no float16 sum: a duplicated float16 position is
    refused (coalesce first), a unique one is placed as stored."""
    t = hurray.SparseTensor.from_arrays(
        "coo", (2, 2), np.array([1, 2], np.float16), coords=[np.array([0, 0]), np.array([1, 1])]
    )
    with pytest.raises(hurray.UnsupportedError) as excinfo:
        t.to_dense()
    status(excinfo, "HURRAY_ERR_UNSUPPORTED")
    u = hurray.SparseTensor.from_arrays(
        "coo", (2, 2), np.array([1, 2], np.float16), coords=[np.array([0, 1]), np.array([1, 1])]
    )
    np.testing.assert_array_equal(u.to_dense(), np.array([[0, 1], [0, 2]], np.float16))


# ================================================================== torch

try:
    import torch

    from hurray.torch import from_torch, to_torch
except ImportError:  # pragma: no cover
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def torch_sparse(dense, fmt, index_dtype):
    x = torch.from_numpy(dense)
    if fmt == "coo":
        return x.to_sparse()
    if fmt == "bsr":
        s = x.to_sparse_bsr((2, 3))
        return torch.sparse_bsr_tensor(
            s.crow_indices().to(index_dtype),
            s.col_indices().to(index_dtype),
            s.values(),
            s.shape,
            check_invariants=True,
        )
    if fmt == "csr":
        s = x.to_sparse_csr()
        return torch.sparse_csr_tensor(
            s.crow_indices().to(index_dtype),
            s.col_indices().to(index_dtype),
            s.values(),
            s.shape,
            check_invariants=True,
        )
    s = x.to_sparse_csc()
    return torch.sparse_csc_tensor(
        s.ccol_indices().to(index_dtype),
        s.row_indices().to(index_dtype),
        s.values(),
        s.shape,
        check_invariants=True,
    )


TORCH_LAYOUT = {"coo": "sparse_coo", "csr": "sparse_csr", "csc": "sparse_csc", "bsr": "sparse_bsr"}


@needs_torch
@pytest.mark.parametrize(
    "fmt,index_dtype",
    [
        ("coo", "int64"),
        ("csr", "int32"),
        ("csr", "int64"),
        ("csc", "int32"),
        ("csc", "int64"),
        ("bsr", "int32"),
        ("bsr", "int64"),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torch_sparse_round_trip(workdir, fmt, index_dtype, seed):
    rng = np.random.default_rng(seed)
    dense = random_dense(rng, 6, 9, [0.0, 0.3, 0.8][seed], 0.3, np.float32)
    x = torch_sparse(dense, fmt, getattr(torch, index_dtype))
    h = from_torch(x)
    assert isinstance(h, hurray.SparseTensor)
    assert h.descriptor.layout.format == fmt
    assert h.descriptor.layout.index_dtype == index_dtype
    again = hurray.SparseTensor.from_torch(x).descriptor
    # (declared alignments follow the addresses, which may differ)
    assert (again.dtype, again.shape, again.layout) == (
        h.descriptor.dtype,
        h.descriptor.shape,
        h.descriptor.layout,
    )
    np.testing.assert_array_equal(h.to_dense(), dense)
    for how, u in round_trips(h, workdir):
        assert_same_parts(u, h)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # read-only mapped memory
            back = to_torch(u)
            also = u.to_torch()
        assert back.layout == getattr(torch, TORCH_LAYOUT[fmt]), how
        assert also.layout == back.layout
        assert torch.equal(back.to_dense(), x.to_dense()), how
        assert torch.equal(also.to_dense(), x.to_dense()), how
        np.testing.assert_array_equal(u.to_dense(), dense, err_msg=how)
        if fmt in ("csr", "bsr"):
            assert back.crow_indices().dtype == getattr(torch, index_dtype)
        elif fmt == "csc":
            assert back.ccol_indices().dtype == getattr(torch, index_dtype)
        else:
            assert back.is_coalesced()


def _scipy_holds_n_d_coo() -> bool:
    import scipy

    return tuple(int(x) for x in scipy.__version__.split(".")[:2]) >= (1, 13)


@needs_torch
def test_torch_coo_of_rank_3(workdir):
    """hurray COO holds one index buffer per dimension, so torch's n-D COO
    travels too (and to scipy 1.13 and later as a coo_array)."""
    dense = np.zeros((3, 4, 5), np.float32)
    dense[0, 1, 2], dense[2, 3, 4], dense[1, 0, 0] = 1.5, -2.0, 7.0
    x = torch.from_numpy(dense).to_sparse()
    h = from_torch(x)
    assert h.descriptor.layout.index_buffers == (1, 2, 3)
    for how, u in round_trips(h, workdir):
        np.testing.assert_array_equal(u.to_dense(), dense, err_msg=how)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.equal(to_torch(u).to_dense(), x.to_dense()), how
        if _scipy_holds_n_d_coo():
            np.testing.assert_array_equal(u.to_scipy().toarray(), dense, err_msg=how)
        else:
            with pytest.raises(hurray.UnsupportedError):
                u.to_scipy()


# ================================================================== paged


def paged_kv(rng, seqs, tokens, heads, dim, page_size, spare, table_dtype):
    """A KV cache [seqs, tokens, heads, dim] over a pool [num_pages, page_size,
    heads, dim] with `spare` pages nobody uses, pages handed out shuffled."""
    blocks = -(-tokens // page_size)
    num_pages = seqs * blocks + spare
    pool = rng.standard_normal((num_pages, page_size, heads, dim)).astype(np.float16)
    table = rng.permutation(num_pages)[: seqs * blocks].reshape(seqs, blocks).astype(table_dtype)
    d = Descriptor(
        "float16",
        (seqs, tokens, heads, dim),
        layout=Paged(1, page_size, num_pages, np.dtype(table_dtype).name, 0, 1),
        buffers=[Buffer("page_pool", pool.nbytes), Buffer("page_table", table.nbytes)],
    )
    t = hurray.Tensor(d, [pool.reshape(-1).view(np.uint8), table.reshape(-1).view(np.uint8)])
    # The logical tensor, by hand: token j of sequence s is row j % page_size
    # of pool page table[s, j // page_size].
    expected = np.empty((seqs, tokens, heads, dim), np.float16)
    for s in range(seqs):
        for j in range(tokens):
            expected[s, j] = pool[table[s, j // page_size], j % page_size]
    return t, pool, table, expected


@SETTINGS
@given(
    seqs=st.integers(1, 3),
    tokens=st.integers(1, 20),
    heads=st.integers(1, 3),
    dim=st.integers(1, 4),
    page_size=st.integers(1, 8),
    spare=st.integers(0, 3),
    table_dtype=st.sampled_from([np.int32, np.int64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_paged_kv_cache_round_trip(
    workdir, seqs, tokens, heads, dim, page_size, spare, table_dtype, seed
):
    t, pool, table, expected = paged_kv(
        np.random.default_rng(seed), seqs, tokens, heads, dim, page_size, spare, table_dtype
    )
    np.testing.assert_array_equal(t.to_dense(), expected)
    for how, u in round_trips(t, workdir):
        assert_same_parts(u, t)
        np.testing.assert_array_equal(u.to_dense(), expected, err_msg=how)
        # The whole pool travels, the spare pages included.
        assert u.descriptor.layout.num_pages == pool.shape[0]
        assert bytes(u._buffer(0)) == pool.tobytes()
        assert bytes(u._buffer(1)) == table.tobytes()


def test_paged_pool_is_kept_whole_in_the_file(workdir):
    t, pool, table, expected = paged_kv(np.random.default_rng(7), 2, 13, 2, 4, 4, 5, np.int32)
    path = workdir / "kv.hurray"
    hurray.save(path, {"kv": t})
    with hurray.open(path) as f:
        d = f.descriptor("kv")
        assert d.buffers[0].byte_size == pool.nbytes
        assert bytes(f.read_buffer("kv", 0)) == pool.tobytes()
        np.testing.assert_array_equal(f["kv"].to_dense(), expected)
    if os.access(CLI, os.X_OK):
        info = json.loads(cli("info", "--json", path, "kv"))["tensors"]["kv"]
        assert info["layout"]["num_pages"] == pool.shape[0]
        assert info["buffers"][0]["byte_size"] == pool.nbytes


# ============================================================== composite


def composite_tensor():
    """A composite of a per-channel quantized weight (int8 codes, float32
    scales, int8 zero points; buffers 1-3) and a dense bias (buffer 0)."""
    rng = np.random.default_rng(3)
    bias = rng.standard_normal((2, 5)).astype(np.float32)
    codes = rng.integers(-128, 128, (4, 6)).astype(np.int8)
    scales = np.array([0.5, 0.25, 2.0, 0.125], np.float32)
    zps = np.array([0, 1, -2, 3], np.int8)
    d = Descriptor(
        "float32",
        (4, 6),
        layout=Composite(
            (
                Member("bias", Descriptor("float32", (2, 5), layout=Dense(0))),
                Member(
                    "weight",
                    Descriptor(
                        "int8",
                        (4, 6),
                        layout=Dense(1),
                        quantization=PerChannelAffine(
                            0, 2, "float32", zero_point_buffer=3, zero_point_dtype="int8"
                        ),
                    ),
                ),
            )
        ),
        buffers=[
            Buffer("data", bias.nbytes),
            Buffer("data", codes.nbytes),
            Buffer("scales", scales.nbytes),
            Buffer("zero_points", zps.nbytes),
        ],
    )
    arrays = [a.reshape(-1).view(np.uint8) for a in (bias, codes, scales, zps)]
    real = (codes.astype(np.float64) - zps[:, None]) * scales[:, None]
    return hurray.Tensor(d, arrays), bias, codes, real.astype(np.float32)


def test_composite_members_zero_copy(workdir):
    t, bias, codes, real = composite_tensor()
    with pytest.raises(hurray.UnsupportedError):
        t.to_dense()
    for how, u in [("original", t)] + list(round_trips(t, workdir)):
        assert_same_parts(u, t)
        w = u.member("weight")
        b = u.member("bias")
        # Renumbered into tables of their own...
        assert w.buffer_count == 3 and b.buffer_count == 1
        assert w.descriptor.layout == Dense(0)
        assert w.descriptor.quantization.scale_buffer == 1
        assert w.descriptor.quantization.zero_point_buffer == 2
        # ... over the parent's memory, not copies.
        assert [w._buffer_address(i) for i in range(3)] == [
            u._buffer_address(i) for i in (1, 2, 3)
        ], how
        assert b._buffer_address(0) == u._buffer_address(0), how
        np.testing.assert_array_equal(b.numpy(), bias, err_msg=how)
        np.testing.assert_array_equal(w.codes(), codes, err_msg=how)
        np.testing.assert_allclose(w.dequantize(), real, rtol=1e-6, err_msg=how)
        with pytest.raises(hurray.NotFoundError) as excinfo:
            u.member("nope")
        status(excinfo, "HURRAY_ERR_NOT_FOUND")
    with pytest.raises(hurray.UnsupportedError):
        hurray.from_numpy(bias).member("bias")


def test_composite_member_outlives_parent():
    t, bias, codes, real = composite_tensor()
    w = t.member("weight")
    del t
    np.testing.assert_allclose(w.dequantize(), real, rtol=1e-6)


def nested(levels):
    """`levels` composites, one inside the other, around a dense leaf."""
    node = Descriptor("float32", (2,), layout=Dense(0))
    for _ in range(levels - 1):
        node = Descriptor("float32", (2,), layout=Composite((Member("m", node),)))
    return Descriptor(
        "float32", (2,), layout=Composite((Member("m", node),)), buffers=[Buffer("data", 8)]
    )


def test_composite_depth_limit():
    t = hurray.Tensor(nested(8), [np.arange(2, dtype=np.float32)])
    inner = t
    for _ in range(8):
        inner = inner.member("m")
    np.testing.assert_array_equal(inner.numpy(), [0, 1])
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.Tensor(nested(9), [np.arange(2, dtype=np.float32)])
    status(excinfo, "HURRAY_ERR_COMPOSITE_DEPTH")


def test_composite_members_are_values():
    """A cycle cannot be built from Python: descriptors are immutable values,
    and one used twice is two copies, not a shared node."""
    leaf = Descriptor("float32", (2,), layout=Dense(0))
    d = Descriptor(
        "float32",
        (2,),
        layout=Composite((Member("a", leaf), Member("b", leaf))),
        buffers=[Buffer("data", 8)],
    )
    with pytest.raises(AttributeError):
        d.layout = Composite((Member("self", d),))
    with pytest.raises(AttributeError):  # frozen dataclasses
        d.layout.members[0].descriptor = d
    t = hurray.Tensor(d, [np.arange(2, dtype=np.float32)])
    assert t.member("a").descriptor == t.member("b").descriptor


# ============================================================== extensions

ext_names = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=20,
)


@needs_cli
@SETTINGS
@given(name=ext_names, metadata=st.binary(max_size=300), sparse=st.booleans())
def test_extension_preserved_byte_exact(workdir, name, metadata, sparse):
    if sparse:
        base = hurray.SparseTensor.from_arrays(
            "csr",
            (2, 3),
            np.array([1, 2], np.float32),
            indptr=np.array([0, 1, 2], np.int32),
            indices=np.array([2, 0], np.int32),
        )
    else:
        base = hurray.from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3))
    ext = Extension(name, metadata)
    t = hurray.Tensor(base.descriptor.replace(extension=ext), list(base.buffers))
    for how, u in round_trips(t, workdir, name="t"):
        assert u.descriptor.extension == ext, how
        assert u.descriptor.extension.metadata == metadata
    path = workdir / "ext.hurray"
    hurray.save(path, {"t": t})
    info = json.loads(cli("info", "--json", path))
    rendered = info["tensors"]["t"]["extension"]
    assert rendered["name"] == name
    assert rendered["metadata_hex"] == metadata.hex()
    assert bytes.fromhex(rendered["metadata_hex"]) == metadata


# ============================================================== statistics


def expected_stats(values, numel=None, unstored=0):
    flat = np.asarray(values, np.float64).reshape(-1)
    finite = flat[~np.isnan(flat)]
    if unstored:
        finite = np.append(finite, 0.0)
    return Statistics(
        min=float(finite.min()) if finite.size else None,
        max=float(finite.max()) if finite.size else None,
        nan_count=int(np.isnan(flat).sum()),
        zero_count=int((flat == 0).sum()) + unstored,
    )


@SETTINGS
@given(
    values=st.lists(
        st.one_of(st.floats(allow_nan=True, width=32), st.just(0.0), st.just(-0.0)),
        min_size=1,
        max_size=40,
    )
)
def test_save_statistics_float32(workdir, values):
    a = np.array(values, np.float32)
    path = workdir / "stats.hurray"
    hurray.save(path, {"a": a}, statistics=True)
    with hurray.open(path) as f:
        assert f.descriptor("a").statistics == expected_stats(a)
    assert hurray.from_numpy(a).with_statistics().descriptor.statistics == expected_stats(a)


@needs_cli
def test_save_statistics_kinds_and_ls(workdir):
    f32 = np.array([[1.5, np.nan, 0.0], [-2.0, -0.0, 7.25]], np.float32)
    i16 = np.array([-32768, 0, 32767, 5], np.int16)
    f16 = np.array([1.0, -0.5, 65504, np.nan, 0], np.float16)
    bf16 = np.array([1.0, -2.5, 0.0, 3.140625], ml_dtypes.bfloat16)
    csr = sp.csr_matrix(np.array([[0, 4.0, 0, 0], [0, 0, 0, 0], [-1.0, 0, 0, 2.5]]))
    coo = hurray.SparseTensor.from_arrays(
        "coo",
        (3, 3),
        np.array([5, 7], np.int32),
        coords=[np.array([0, 2]), np.array([1, 2])],
        canonical=True,
    )
    kv, *_ = paged_kv(np.random.default_rng(1), 1, 4, 1, 2, 2, 0, np.int32)
    comp, *_ = composite_tensor()
    fp8 = np.array([1, 2], ml_dtypes.float8_e4m3fn)
    path = workdir / "kinds.hurray"
    hurray.save(
        path,
        {
            "f32": f32,
            "i16": i16,
            "f16": f16,
            "bf16": bf16,
            "csr": csr,
            "coo": coo,
            "kv": kv,
            "comp": comp,
            "fp8": fp8,
        },
        statistics=True,
    )
    with hurray.open(path) as f:
        s = {name: f.descriptor(name).statistics for name in f}
    assert s["f32"] == Statistics(-2.0, 7.25, 1, 2)
    assert s["i16"] == Statistics(-32768.0, 32767.0, 0, 1)
    assert s["f16"] == Statistics(-0.5, 65504.0, 1, 1)
    assert s["bf16"] == Statistics(-2.5, 3.140625, 0, 1)
    # Sparse: unstored elements are zeros, so numel - zero_count = nnz.
    assert s["csr"] == Statistics(-1.0, 4.0, 0, 9)
    assert 12 - s["csr"].zero_count == csr.nnz
    assert s["coo"] == Statistics(0.0, 7.0, 0, 7)
    # Kinds statistics do not cover are written without.
    assert s["kv"] is None and s["comp"] is None and s["fp8"] is None

    lines = {line.split()[0]: line for line in cli("ls", path).splitlines()[1:]}
    assert "min=-2 max=7.25 nan=1 zeros=2" in lines["f32"]
    assert "min=-32768 max=32767 nan=0 zeros=1" in lines["i16"]
    assert "min=-1 max=4 nan=0 zeros=9" in lines["csr"]
    assert "min=0 max=7 nan=0 zeros=7" in lines["coo"]
    assert "min=" not in lines["kv"] and "min=" not in lines["fp8"]

    # Off by default: nothing is computed.
    plain = workdir / "plain.hurray"
    hurray.save(plain, {"f32": f32, "csr": csr})
    with hurray.open(plain) as f:
        assert f.descriptor("f32").statistics is None
        assert f.descriptor("csr").statistics is None
    assert "min=" not in cli("ls", plain)


def test_with_statistics_keeps_buffers():
    a = np.array([3, 0, -1], np.int64)
    t = hurray.from_numpy(a)
    s = t.with_statistics()
    assert s.descriptor.statistics == Statistics(-1.0, 3.0, 0, 1)
    assert s._buffer_address(0) == t._buffer_address(0)
    assert t.descriptor.statistics is None
    with pytest.raises(hurray.UnsupportedError):
        paged_kv(np.random.default_rng(0), 1, 2, 1, 1, 1, 0, np.int32)[0].with_statistics()


def test_statistics_of_coo_duplicates_match_to_dense():
    t = hurray.SparseTensor.from_arrays(
        "coo", (2, 2), np.array([1.0, 2.0], np.float32), coords=[np.array([0, 0]), np.array([0, 0])]
    )
    dense = t.to_dense()
    np.testing.assert_array_equal(dense, [[3, 0], [0, 0]])
    assert t.with_statistics().descriptor.statistics == expected_stats(dense)


def test_statistics_of_strided_dense():
    d = Descriptor("float64", (3, 2), strides=(1, -3), byte_offset=24, buffers=[Buffer("data", 48)])
    t = hurray.Tensor(d, [np.array([0.0, 1, 2, 3, -4, np.nan])])
    assert t.with_statistics().descriptor.statistics == expected_stats(t.to_dense())


# ========================================================= malformed input


def csr_parts(indptr, indices, dtype=np.int32):
    return dict(indptr=np.array(indptr, dtype), indices=np.array(indices, dtype))


MALFORMED = {
    # name: (builder of a valid tensor, how to break it in place, status)
    "coo_index_out_of_range": (
        lambda: hurray.SparseTensor.from_arrays(
            "coo", (3, 4), np.ones(2, np.float32), coords=[np.array([0, 2]), np.array([1, 3])]
        ),
        lambda p: p["coords"][1].__setitem__(1, 4),
        "HURRAY_ERR_SPARSE_INDEX_BOUNDS",
    ),
    "coo_negative_index": (
        lambda: hurray.SparseTensor.from_arrays(
            "coo",
            (3, 4),
            np.ones(2, np.float32),
            coords=[np.array([0, 2], np.int64), np.array([1, 3], np.int64)],
        ),
        lambda p: p["coords"][0].__setitem__(0, -1),
        "HURRAY_ERR_SPARSE_INDEX_BOUNDS",
    ),
    "csr_index_out_of_range": (
        lambda: hurray.SparseTensor.from_arrays(
            "csr", (3, 4), np.ones(3, np.float32), **csr_parts([0, 1, 1, 3], [3, 0, 2])
        ),
        lambda p: p["indices"].__setitem__(2, 4),
        "HURRAY_ERR_SPARSE_INDEX_BOUNDS",
    ),
    "csc_index_out_of_range": (
        lambda: hurray.SparseTensor.from_arrays(
            "csc", (3, 4), np.ones(3, np.float32), **csr_parts([0, 1, 1, 3, 3], [2, 0, 1])
        ),
        lambda p: p["indices"].__setitem__(0, 3),
        "HURRAY_ERR_SPARSE_INDEX_BOUNDS",
    ),
    "bsr_index_out_of_range": (
        lambda: hurray.SparseTensor.from_arrays(
            "bsr",
            (4, 6),
            np.ones((2, 2, 3), np.float32),
            block_shape=(2, 3),
            **csr_parts([0, 1, 2], [1, 0], np.int64),
        ),
        lambda p: p["indices"].__setitem__(0, 2),
        "HURRAY_ERR_SPARSE_INDEX_BOUNDS",
    ),
    "indptr_decreasing": (
        lambda: hurray.SparseTensor.from_arrays(
            "csr", (3, 4), np.ones(3, np.float32), **csr_parts([0, 1, 1, 3], [3, 0, 2])
        ),
        lambda p: p["indptr"].__setitem__(1, 2),
        "HURRAY_ERR_SPARSE_INDPTR",
    ),
    "indptr_not_ending_at_nnz": (
        lambda: hurray.SparseTensor.from_arrays(
            "csr", (3, 4), np.ones(3, np.float32), **csr_parts([0, 1, 1, 3], [3, 0, 2])
        ),
        lambda p: p["indptr"].__setitem__(3, 2),
        "HURRAY_ERR_SPARSE_INDPTR",
    ),
    "indptr_not_starting_at_zero": (
        lambda: hurray.SparseTensor.from_arrays(
            "csc", (3, 4), np.ones(3, np.float32), **csr_parts([0, 1, 1, 3, 3], [2, 0, 1])
        ),
        lambda p: p["indptr"].__setitem__(0, 1),
        "HURRAY_ERR_SPARSE_INDPTR",
    ),
    "canonical_coo_unsorted": (
        lambda: hurray.SparseTensor.from_arrays(
            "coo",
            (3, 4),
            np.ones(3, np.float32),
            coords=[np.array([0, 1, 1]), np.array([3, 0, 2])],
            canonical=True,
        ),
        lambda p: p["coords"][0].__setitem__(0, 2),
        "HURRAY_ERR_SPARSE_ORDER",
    ),
    "canonical_coo_duplicate": (
        lambda: hurray.SparseTensor.from_arrays(
            "coo",
            (3, 4),
            np.ones(3, np.float32),
            coords=[np.array([0, 1, 1]), np.array([3, 0, 2])],
            canonical=True,
        ),
        lambda p: p["coords"][1].__setitem__(2, 0),
        "HURRAY_ERR_SPARSE_ORDER",
    ),
    "page_table_beyond_pool": (
        lambda: paged_kv(np.random.default_rng(5), 2, 6, 1, 2, 4, 1, np.int32)[0],
        None,
        "HURRAY_ERR_PAGE_TABLE_ENTRY",
    ),
}


def index_arrays(t):
    """Writable numpy views of t's index buffers (zero-copy)."""
    d = t.descriptor
    if isinstance(d.layout, Paged):
        return {
            "table": np.frombuffer(t._buffer(d.layout.table_buffer), np.dtype(d.layout.table_dtype))
        }
    return t.parts()


def break_in_place(name, t):
    _, breaker, _ = MALFORMED[name]
    arrays = index_arrays(t)
    if breaker is None:  # the page table: one entry names a page past the pool
        arrays["table"][-1] = t.descriptor.layout.num_pages
    else:
        breaker(arrays)


def malformed_arrays(name, t=None):
    """The broken tensor's descriptor and buffers as fresh, writable arrays
    (broken copies of t's, or of a newly built valid tensor's)."""
    t = MALFORMED[name][0]() if t is None else t
    buffers = [aligned_copy(b) for b in t.buffers]
    cls = hurray.SparseTensor if isinstance(t.descriptor.layout, Sparse) else hurray.Tensor
    break_in_place(name, cls(t.descriptor, buffers))  # writes through to `buffers`
    return t.descriptor, buffers


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_at_construction(name):
    d, buffers = malformed_arrays(name)
    with pytest.raises(hurray.PlacementError) as excinfo:
        hurray.Tensor(d, buffers)
    status(excinfo, MALFORMED[name][2])
    assert (
        excinfo.value.status
        == {
            "HURRAY_ERR_PAGE_TABLE_ENTRY": 66,
            "HURRAY_ERR_SPARSE_INDEX_BOUNDS": 67,
            "HURRAY_ERR_SPARSE_INDPTR": 68,
            "HURRAY_ERR_SPARSE_ORDER": 69,
        }[MALFORMED[name][2]]
    )


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_through_capsule_and_to_dense(name):
    """Contents broken after construction (the buffers are writable, shared
    memory) are caught by the capsule consumer and by to_dense."""
    t = MALFORMED[name][0]()
    t.to_dense()
    break_in_place(name, t)
    with pytest.raises(hurray.PlacementError) as excinfo:
        hurray.from_hurray(t)
    status(excinfo, MALFORMED[name][2])
    with pytest.raises(hurray.PlacementError) as excinfo:
        t.to_dense()
    status(excinfo, MALFORMED[name][2])
    with pytest.raises(hurray.PlacementError) as excinfo:
        t.with_statistics()  # placement first, even for kinds it does not cover
    status(excinfo, MALFORMED[name][2])
    with pytest.raises(hurray.PlacementError) as excinfo:
        hurray.save(io.BytesIO(), {"t": t})
    status(excinfo, MALFORMED[name][2])


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_in_a_file(workdir, name):
    """A file whose index bytes were changed after writing: the reader
    validates contents before handing the tensor out (checksums are only
    checked on request)."""
    t = MALFORMED[name][0]()
    d, broken = malformed_arrays(name, t)
    path = workdir / f"{name}.hurray"
    hurray.save(path, {"t": t})
    data = bytearray(path.read_bytes())
    # One tensor: its buffers follow the 64-byte header in order, each at a
    # multiple of max(64, alignment) (docs/spec/file-format.md, section 4).
    at = 64
    for i, (old, new) in enumerate(zip(t.buffers, broken)):
        step = max(64, d.buffers[i].alignment)
        at = -(-at // step) * step
        assert data[at : at + len(old)] == bytes(old), f"buffer {i} is not where expected"
        data[at : at + len(old)] = new.tobytes()
        at += len(old)
    path.write_bytes(bytes(data))
    for mmap in (True, False):
        with hurray.open(path, mmap=mmap) as f:
            assert f.descriptor("t") == d  # the descriptor alone is fine
            with pytest.raises(hurray.PlacementError) as excinfo:
                f["t"]
            status(excinfo, MALFORMED[name][2])
        with pytest.raises(hurray.ChecksumError):
            hurray.open(path, mmap=mmap, verify=True)["t"]


HURRAY_LIB = os.environ.get("HURRAY_LIB")


@pytest.mark.skipif(not HURRAY_LIB, reason="HURRAY_LIB is not set")
@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_from_a_c_producer(name):
    """A capsule made with the C API alone, carrying broken contents."""
    import _hurray_ctypes as hc

    d, broken = malformed_arrays(name)
    producer = hc.Producer(d.encode(), [hc.aligned_copy(b) for b in broken], alignment=1)
    with pytest.raises(hurray.PlacementError) as excinfo:
        hurray.from_hurray(producer)
    status(excinfo, MALFORMED[name][2])


@pytest.mark.parametrize("fmt", ["coo", "csr", "csc"])
@pytest.mark.parametrize("name", ["int4", "uint4", "float4_e2m1fn", "float6_e3m2fn"])
def test_sub_byte_sparse_to_dense_is_done_in_c(fmt, name):
    """Sparse sub-byte values are densified by hurray_tensor_to_dense (it
    refused them before, and Python scattered them with numpy)."""
    dtype = np.dtype(getattr(ml_dtypes, name))
    dense = np.zeros((5, 7), dtype=np.float32)
    dense[0, 1], dense[2, 3], dense[4, 6], dense[3, 0] = 1, -2, 3, 0.5
    if name == "uint4":
        dense = np.abs(dense)
    want = dense.astype(dtype)
    m = getattr(sp.coo_matrix(dense), "to" + fmt)()
    if fmt == "coo":
        t = hurray.SparseTensor.from_arrays(
            "coo", m.shape, m.data.astype(dtype), coords=[m.row, m.col]
        )
    else:
        t = hurray.SparseTensor.from_arrays(
            fmt, m.shape, m.data.astype(dtype), indptr=m.indptr, indices=m.indices
        )
    got = t.to_dense()
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_sub_byte_float_sparse_duplicates_have_no_sum():
    # int4 and uint4 sum modulo 16 (test_int4_duplicates_sum_modulo_16);
    # the narrow floats have no sum the spec defines.
    values = np.array([1, 2], dtype=ml_dtypes.float4_e2m1fn)
    t = hurray.SparseTensor.from_arrays(
        "coo", (2, 2), values, coords=[np.array([0, 0]), np.array([1, 1])]
    )
    with pytest.raises(hurray.UnsupportedError, match="stored twice"):
        t.to_dense()


def test_member_renumbering_of_sparse_and_nested_members():
    """Buffers are renumbered in order of first use, layout before
    quantization, nested members depth first (src/core/member.c)."""
    cols = np.array([1, 0], np.int32)
    values = np.array([5, 7], np.float32)
    rows = np.array([0, 1], np.int32)
    coo = Descriptor(
        "float32", (2, 2), layout=Sparse("coo", "int32", 2, values_buffer=1, index_buffers=(2, 0))
    )
    inner = Descriptor(
        "float32",
        (2,),
        layout=Composite(
            (
                Member("x", Descriptor("int32", (2,), layout=Dense(3))),
                Member("y", Descriptor("float32", (2,), layout=Dense(4))),
            )
        ),
    )
    d = Descriptor(
        "float32",
        (2, 2),
        layout=Composite((Member("s", coo), Member("c", inner))),
        buffers=[
            Buffer("indices", 8, 4),
            Buffer("values", 8, 4),
            Buffer("indices", 8, 4),
            Buffer("data", 8, 4),
            Buffer("data", 8, 4),
        ],
    )
    t = hurray.Tensor(
        d,
        [
            cols.view(np.uint8),
            values.view(np.uint8),
            rows.view(np.uint8),
            rows.view(np.uint8),
            values.view(np.uint8),
        ],
    )
    s = t.member("s")
    assert s.descriptor.layout.values_buffer == 0
    assert s.descriptor.layout.index_buffers == (1, 2)
    assert [s._buffer_address(i) for i in range(3)] == [t._buffer_address(i) for i in (1, 2, 0)]
    np.testing.assert_array_equal(s.to_dense(), [[0, 5], [7, 0]])
    c = t.member("c")
    assert [m.descriptor.layout for m in c.descriptor.layout.members] == [Dense(0), Dense(1)]
    assert [c._buffer_address(i) for i in range(2)] == [t._buffer_address(i) for i in (3, 4)]
    np.testing.assert_array_equal(c.member("x").numpy(), rows)
    np.testing.assert_array_equal(c.member("y").numpy(), values)


# ----------------------------------------- from_arrays: indices as given


def test_from_arrays_refuses_indices_a_cast_would_change():
    """Indices were cast to int32 with astype: 2**32 + 1 wrapped to 1 and
    floats were truncated, so entries landed where the caller did not put
    them."""
    with pytest.raises(TypeError, match="must be integers, not float64"):
        hurray.SparseTensor.from_arrays("coo", (3,), np.ones(2), coords=[np.array([0.5, 2.7])])
    with pytest.raises(ValueError, match="does not fit int64"):
        hurray.SparseTensor.from_arrays(
            "coo", (3,), np.ones(1), coords=[np.array([2**63], np.uint64)]
        )
    # A uint64 index past int32 is kept exactly, and refused as out of range.
    with pytest.raises(hurray.HurrayError, match="4294967297"):
        hurray.SparseTensor.from_arrays(
            "csr",
            (2, 3),
            np.ones(1, np.float32),
            indptr=np.array([0, 1, 1], np.uint64),
            indices=np.array([2**32 + 1], np.uint64),
        ).to_dense()
    # Unsigned indices that fit are stored as the signed type they fit.
    t = hurray.SparseTensor.from_arrays(
        "coo", (2, 3), np.array([5.0]), coords=[np.array([1], np.uint32), np.array([2], np.uint8)]
    )
    assert t.descriptor.layout.index_dtype == "int32"
    assert t.to_dense().tolist() == [[0, 0, 0], [0, 0, 5]]


def test_from_arrays_refuses_values_that_do_not_match_the_indices():
    """nnz was taken from len(values): a second coordinate with one value
    was dropped, and 2-D values were read as if flattened."""
    with pytest.raises(ValueError, match=r"shape \(1,\); 2 entries need \(2,\)"):
        hurray.SparseTensor.from_arrays(
            "coo", (3, 3), np.ones(1), coords=[np.array([0, 1]), np.array([0, 1])]
        )
    with pytest.raises(ValueError, match=r"2 entries need \(2,\)"):
        hurray.SparseTensor.from_arrays(
            "coo", (3, 3), np.ones((2, 1)), coords=[np.array([0, 1]), np.array([0, 1])]
        )
    with pytest.raises(ValueError, match="one length"):
        hurray.SparseTensor.from_arrays(
            "coo", (3, 3), np.ones(2), coords=[np.array([0, 1]), np.array([0])]
        )
    with pytest.raises(ValueError, match=r"1 entries need \(1, 2, 2\)"):
        hurray.SparseTensor.from_arrays(
            "bsr",
            (4, 4),
            np.ones((1, 2, 1)),
            indptr=np.array([0, 1, 1]),
            indices=np.array([0]),
            block_shape=(2, 2),
        )


@pytest.mark.parametrize("shape", [(7,), (3, 4, 5)])
def test_from_scipy_reads_coo_arrays_of_any_rank(shape):
    """scipy's coo_array has coords of any rank; only row and col were read."""
    if not hasattr(sp, "coo_array"):
        pytest.skip("scipy without coo_array")
    dense = np.zeros(shape)
    dense.flat[[1, 5, -1]] = [1.5, -2.0, 3.0]
    try:
        matrix = sp.coo_array(dense)
    except (ValueError, TypeError):
        pytest.skip("this scipy's coo_array is 2-D only")
    if matrix.shape != dense.shape:  # scipy < 1.13 made a (1, 7) of the (7,)
        pytest.skip(f"this scipy's coo_array is 2-D only (it made {matrix.shape})")
    t = hurray.SparseTensor.from_scipy(matrix)
    assert np.array_equal(t.to_dense(), dense)


def test_from_arrays_still_takes_empty_lists_and_flat_blocks():
    """Kept from before the index checks: an empty list is float64 to numpy,
    and BSR blocks were accepted flat."""
    t = hurray.SparseTensor.from_arrays("coo", (3, 3), [], coords=[[], []])
    assert t.to_dense().tolist() == [[0.0] * 3] * 3
    t = hurray.SparseTensor.from_arrays("csr", (2, 2), [], indptr=[0, 0, 0], indices=[])
    assert t.to_dense().shape == (2, 2)
    flat = hurray.SparseTensor.from_arrays(
        "bsr",
        (4, 4),
        np.arange(8.0),
        indptr=np.array([0, 1, 2]),
        indices=np.array([1, 0]),
        block_shape=(2, 2),
    )
    want = sp.bsr_matrix(
        (np.arange(8.0).reshape(2, 2, 2), [1, 0], [0, 1, 2]), shape=(4, 4)
    ).toarray()
    assert np.array_equal(flat.to_dense(), want)


def test_big_endian_int64_indices_are_not_wrapped_to_int32():
    # ">i8" == np.int64 is false: such arrays were taken as narrow and cast
    # to int32, wrapping 2**32 + 1 to 1 and placing the entry in column 1.
    col = np.array([2**32 + 1], ">i8")
    with pytest.raises(hurray.PlacementError, match="SPARSE_INDEX_BOUNDS"):
        hurray.SparseTensor.from_arrays(
            "coo", (1, 4), np.ones(1, np.float32), coords=[np.zeros(1, ">i8"), col]
        )
    ok = hurray.SparseTensor.from_arrays(
        "csr",
        (2, 4),
        np.ones(2, np.float32),
        indptr=np.array([0, 1, 2], ">i8"),
        indices=np.array([3, 0], ">i8"),
    )
    assert ok.to_dense().tolist() == [[0, 0, 0, 1], [1, 0, 0, 0]]


def test_to_scipy_checks_indices_changed_after_construction():
    # from_arrays keeps the caller's arrays (zero-copy); scipy checks no
    # index, and its toarray() wrote far outside the matrix (SIGSEGV).
    indices = np.array([0, 1, 2], np.int32)
    t = hurray.SparseTensor.from_arrays(
        "csr",
        (3, 3),
        np.ones(3, np.float32),
        indptr=np.array([0, 1, 2, 3], np.int32),
        indices=indices,
    )
    assert t.to_scipy().toarray().tolist() == np.eye(3).tolist()
    indices[0] = 50_000_000
    with pytest.raises(hurray.PlacementError, match="SPARSE_INDEX_BOUNDS"):
        t.to_scipy()


@pytest.mark.parametrize(
    "dtype, values, want",
    [("int4", [7, 7, -8], [[0, -2, -8, 0]]), ("uint4", [15, 3, 9], [[0, 2, 9, 0]])],
)
def test_int4_duplicates_sum_modulo_16(dtype, values, want):
    # layouts.md: integer sums wrap modulo 2^bits; int4 and uint4 duplicates
    # were refused as if they had no sum.
    import ml_dtypes

    s = hurray.SparseTensor.from_arrays(
        "coo",
        (1, 4),
        np.array(values, getattr(ml_dtypes, dtype)),
        coords=[np.zeros(3, np.int64), np.array([1, 1, 2])],
    )
    assert s.to_dense().astype(np.int8).tolist() == want


def test_messages_point_at_what_works():
    s = hurray.SparseTensor.from_arrays("coo", (2, 2), np.array([5], np.int8), coords=[[0], [1]])
    plain = hurray.Tensor(s.descriptor, list(s.buffers))
    # "hurray.as_tensor gives each layout its own class": it returned a
    # plain Tensor unchanged, without parts() or to_scipy()
    assert isinstance(hurray.as_tensor(plain), hurray.SparseTensor)
    member = hurray.Descriptor("float32", (2,), layout=hurray.Dense(0))
    c = hurray.Descriptor(
        "float32",
        (1,),
        layout=hurray.Composite((hurray.Member("a", member),)),
        buffers=[hurray.Buffer("data", 8)],
    )
    with pytest.raises(
        hurray.UnsupportedError, match="use member"
    ):  # was to_dense(), which refuses
        hurray.Tensor(c, [np.zeros(8, np.uint8)]).numpy()


def test_to_scipy_of_an_n_d_coo():
    # from_scipy took N-D coo_arrays, to_scipy refused them back.
    coords = [np.array([0, 1]), np.array([1, 0]), np.array([2, 2])]
    t = hurray.SparseTensor.from_arrays("coo", (2, 2, 3), np.ones(2, np.float32), coords=coords)
    import scipy

    if tuple(int(x) for x in scipy.__version__.split(".")[:2]) < (1, 13):
        with pytest.raises(hurray.UnsupportedError, match="holds 2-D COO only"):
            t.to_scipy()
        return
    m = t.to_scipy()
    assert m.shape == (2, 2, 3)
    assert np.array_equal(m.toarray(), t.to_dense())
