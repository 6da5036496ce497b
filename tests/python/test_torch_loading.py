"""Loading into torch and numpy (issue 16): writable copy-on-write loads by
every path, a read-only mode that refuses writes, dequantize on load,
native DLPack for bfloat16 and float8, no silent raw codes, safe_open.

Everything that writes into loaded memory runs in a subprocess, so a crash
fails the test instead of killing pytest."""

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import hurray
import hurray.torch
from hurray.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
# numpy.from_dlpack takes copy= (and asks for a versioned capsule) from 2.1.
NUMPY_FROM_DLPACK_COPY = np.lib.NumpyVersion(np.__version__) >= "2.1.0"
CLI = os.environ.get("HURRAY_CLI", str(REPO / "build" / "hurray"))


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify_with_cli(path) -> None:
    if not os.path.exists(CLI):
        pytest.skip("the hurray CLI is not built (make build)")
    done = subprocess.run([CLI, "verify", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def run_python(code: str, path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def model(tmp_path):
    """A file of f32, bf16, f8 and int tensors (>1 page each)."""
    path = tmp_path / "model.hurray"
    g = torch.Generator().manual_seed(1)
    save_file(
        {
            "w32": torch.randn(64, 257, generator=g),
            "w16": torch.randn(40, 300, generator=g).to(torch.bfloat16),
            "f8": torch.randn(5000, generator=g).to(torch.float8_e4m3fn),
            "ids": torch.arange(3000, dtype=torch.int64),
        },
        path,
        metadata={"format": "pt"},
    )
    return path


# Each snippet obtains tensors by one load path and writes into them. Before
# the copy-on-write mapping, the mapped ones died with SIGSEGV.
WRITE_PATHS = {
    "load_file": """
        from hurray.torch import load_file
        for t in load_file(p).values(): t.view(torch.uint8).add_(1)
    """,
    "load_file_pread": """
        from hurray.torch import load_file
        for t in load_file(p, mmap=False).values(): t.view(torch.uint8).add_(1)
    """,
    "from_dlpack": """
        f = hurray.load(p)
        for k in f: torch.from_dlpack(f[k]).view(torch.uint8).add_(1)
    """,
    "to_torch": """
        from hurray.torch import to_torch
        f = hurray.load(p)
        for k in f: to_torch(f[k]).view(torch.uint8).add_(1)
    """,
    "numpy": """
        f = hurray.load(p)
        for k in f: f[k].numpy().view(np.uint8)[...] += 1
    """,
    "asarray": """
        f = hurray.load(p)
        for k in f: np.asarray(f[k]).view(np.uint8)[...] = 7
    """,
    "np_from_dlpack": """
        f = hurray.load(p)
        a = np.from_dlpack(f["w32"]); a += 1
    """,
    "open_get_slice": """
        with hurray.open(p) as f:
            f.get_slice("w32", 3, 9).numpy()[...] = 0
    """,
    "open_buffers": """
        with hurray.open(p) as f:
            t = f["ids"]
        np.frombuffer(t.buffers[0], np.uint8)[...] = 3
    """,
    "safe_open_pt": """
        with hurray.safe_open(p, framework="pt") as f:
            for k in f.keys():
                f.get_tensor(k).view(torch.uint8).add_(1)
                f.get_slice(k)[1:].view(torch.uint8).add_(1)
    """,
    "safe_open_np": """
        with hurray.safe_open(p, framework="np") as f:
            f.get_tensor("w32")[...] = 0
            f.get_slice("ids")[::2][...] = 0
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(WRITE_PATHS))
def test_write_into_loaded_tensor_does_not_crash_nor_touch_the_file(model, how):
    before = sha(model)
    code = (
        "import sys, numpy as np, torch, hurray\np = sys.argv[1]\n"
        + textwrap.dedent(WRITE_PATHS[how])
        + "\nprint('wrote')\n"
    )
    done = run_python(code, model)
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stderr}"
    assert "wrote" in done.stdout
    assert sha(model) == before
    verify_with_cli(model)


@pytest.mark.slow
def test_writes_are_private_to_the_process(model):
    """Two loads in one process see the file, not each other's writes."""
    code = """
        import sys, torch
        from hurray.torch import load_file
        a = load_file(sys.argv[1]); b = load_file(sys.argv[1])
        keep = b["w32"].clone()
        a["w32"].fill_(5)
        assert torch.equal(b["w32"], keep), "a write leaked into another load"
        assert bool((a["w32"] == 5).all())
        print("ok")
    """
    done = run_python(code, model)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


@pytest.mark.slow
def test_readonly_load_refuses_writes(model):
    code = """
        import sys, numpy as np, torch, hurray
        from hurray.torch import to_torch
        f = hurray.load(sys.argv[1], readonly=True)
        a = f["w32"].numpy()
        assert not a.flags.writeable
        try:
            a[0, 0] = 1
        except ValueError:
            print("numpy refused")
        b = np.from_dlpack(f["w32"])
        assert not b.flags.writeable
        try:
            b[0, 0] = 1
        except ValueError:
            print("dlpack refused")
        # The legacy capsule cannot say read-only: refused, not handed out.
        try:
            f["w32"].__dlpack__()
        except BufferError:
            print("legacy refused")
        # torch ignores DLPack's read-only flag, so to_torch copies.
        t = to_torch(f["w32"]); t.add_(1)
        print("torch copy writable")
    """
    done = run_python(code, model)
    assert done.returncode == 0, done.stderr
    for line in ("numpy refused", "dlpack refused", "legacy refused", "torch copy writable"):
        assert line in done.stdout
    verify_with_cli(model)


def test_read_only_memory_is_copied_into_torch(tmp_path):
    """Only readonly=True loads were copied: a read-only np.memmap, bytes,
    and the sparse tensors of a readonly=True load came out as writable
    torch views, and the first write died of SIGSEGV (or changed a bytes
    object). Each runs in a subprocess, as it crashed."""
    code = """
        import sys, numpy as np, scipy.sparse as sp, torch, hurray
        from hurray.torch import to_torch
        path = sys.argv[1]
        np.zeros(1024, np.float32).tofile(path + ".bin")
        m = np.memmap(path + ".bin", dtype=np.float32, mode="r")
        t = to_torch(hurray.from_numpy(m)); t.add_(1)
        assert float(m[0]) == 0.0 and float(t[0]) == 1.0
        raw = bytes(8)
        d = hurray.Descriptor("float32", (2,), buffers=[hurray.Buffer("data", 8)])
        t = to_torch(hurray.Tensor(d, [raw])); t.add_(1)
        assert raw == bytes(8)
        mat = sp.random(8, 8, density=0.3, format="csr", dtype=np.float32, random_state=0)
        hurray.save(path, {"s": hurray.SparseTensor.from_scipy(mat), "w": np.ones(3, np.float32)})
        f = hurray.load(path, readonly=True)
        s = to_torch(f["s"]); s.values().mul_(2); s.crow_indices().add_(0)
        print("ok")
    """
    done = run_python(code, str(tmp_path / "r.hurray"))
    assert done.returncode == 0 and "ok" in done.stdout, (done.returncode, done.stderr[-2000:])


def test_dimensions_past_int64_are_a_hurray_error():
    # DLPack's BufferError ("dimension too large for DLPack") leaked out.
    d = hurray.Descriptor("float32", (0, 2**63), buffers=[hurray.Buffer("data", 0, 4)])
    with pytest.raises(hurray.UnsupportedError, match="torch cannot hold"):
        hurray.torch.to_torch(hurray.Tensor(d, [b""]))


def test_views_of_hurray_buffers_keep_their_tensors_protection(tmp_path):
    # A capsule's buffers read as read-only only because the capsule cannot
    # say; a tensor re-made from them (member(), shard(), ...) stays a view.
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.ones((4, 4), np.float32)})
    t = hurray.load(path)["w"]
    handed = hurray.from_hurray(t)
    again = hurray.Tensor(handed.descriptor, list(handed.buffers))
    assert not handed._protected and not again._protected
    assert hurray.torch.to_torch(again).data_ptr() == t.numpy().ctypes.data
    ro = hurray.load(path, readonly=True)["w"]
    assert hurray.Tensor(ro.descriptor, list(ro.buffers))._protected


def test_writable_loads_stay_zero_copy(tmp_path):
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.ones((4, 4), np.float32)})
    t = hurray.load(path)["w"]
    assert hurray.torch.to_torch(t).data_ptr() == t.numpy().ctypes.data


# ------------------------------------------------------------- dequantize


@pytest.mark.parametrize(
    "scheme", ["nf4", "mxfp4", "mxfp8_e4m3", "block_affine", "q4_0", "per_channel", "affine"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_load_file_dequantizes_to_tensor_dequantize(tmp_path, scheme, dtype):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 128)).astype(np.float32)
    path = tmp_path / "q.hurray"
    hurray.save(path, {"q": hurray.quantize(w, scheme), "plain": hurray.from_numpy(w)})
    got = load_file(path, dequantize=dtype)
    want = hurray.load(path)["q"].dequantize(
        {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16}[
            dtype
        ]
    )
    assert got["q"].dtype == dtype
    np.testing.assert_array_equal(
        got["q"].view(torch.int16 if dtype != torch.float32 else torch.int32).numpy(),
        want.view(np.int16 if dtype != torch.float32 else np.int32),
    )
    assert got["plain"].dtype == torch.float32  # unquantized tensors are untouched


def test_nf4_without_dequantize_says_how(tmp_path):
    path = tmp_path / "q.hurray"
    hurray.save(path, {"q": hurray.quantize(np.ones((8, 64), np.float32), "nf4")})
    with pytest.raises(hurray.UnsupportedError, match="dequantize="):
        load_file(path)


def test_dequantize_refuses_integer_targets(tmp_path):
    t = hurray.quantize(np.linspace(-2, 2, 64, dtype=np.float32), "affine")
    for bad in (np.uint8, np.int8, np.int32, bool):
        with pytest.raises(TypeError, match="floating-point"):
            t.dequantize(bad)
    path = tmp_path / "q.hurray"
    hurray.save(path, {"q": t})
    with pytest.raises(TypeError):
        load_file(path, dequantize=torch.int8)


@pytest.mark.parametrize("scheme", ["affine", "nf4", "mxfp8_e4m3", "block_affine"])
def test_no_silent_raw_codes(scheme):
    t = hurray.quantize(np.linspace(-2, 2, 64, dtype=np.float32).reshape(2, 32), scheme)
    for read in (np.asarray, np.array, lambda x: x.numpy(), lambda x: x.__array__()):
        with pytest.raises(hurray.UnsupportedError, match=r"dequantize\(.*codes\(\)"):
            read(t)
    assert t.codes().shape == (2, 32)  # the codes, when asked for by name
    with pytest.raises(BufferError, match="quantized"):
        t.__dlpack__(max_version=(1, 0))


# ---------------------------------------------------------------- DLPack


@settings(max_examples=30, deadline=None)
@given(
    dtype=st.sampled_from(
        [
            torch.bfloat16,
            torch.float8_e4m3fn,
            torch.float8_e5m2,
            torch.float16,
            torch.float32,
            torch.int8,
            torch.bool,
            torch.complex64,
        ]
    ),
    shape=st.lists(st.integers(0, 6), min_size=0, max_size=3),
    seed=st.integers(0, 999),
)
def test_dlpack_reaches_torch_bit_exact(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(
        0,
        256,
        (int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size(),),
        dtype=torch.uint8,
        generator=g,
    )
    if dtype == torch.bool:
        raw = raw % 2
    x = raw.view(dtype).reshape(shape)
    t = hurray.torch.from_torch(x)
    y = torch.from_dlpack(t)
    assert y.dtype == dtype and tuple(y.shape) == tuple(shape)
    assert torch.equal(y.reshape(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8))
    if x.numel():
        assert y.data_ptr() == x.data_ptr()  # zero-copy


def test_dlpack_capsules_versioned_and_legacy():
    t = hurray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert "dltensor_versioned" in repr(t.__dlpack__(max_version=(1, 2)))
    assert "dltensor" in repr(t.__dlpack__())
    assert "versioned" not in repr(t.__dlpack__(max_version=(0, 8)))
    assert t.__dlpack_device__() == (1, 0)
    if NUMPY_FROM_DLPACK_COPY:
        copy = np.from_dlpack(t, copy=True)
        assert copy.flags.writeable and np.array_equal(copy, np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    # Strided views travel with their strides.
    s = hurray.Tensor(
        hurray.Descriptor(
            "float32", (3, 2), strides=(1, 3), buffers=[hurray.Buffer("data", 24, 4)]
        ),
        [np.arange(6, dtype=np.float32)],
    )
    assert torch.equal(torch.from_dlpack(s), torch.arange(6.0).reshape(2, 3).T)


def test_bfloat16_exports_with_a_true_message_for_what_does_not():
    with pytest.raises(BufferError, match="sub-byte"):
        hurray.from_numpy(np.zeros(4, ml_dtypes.int4)).__dlpack__(max_version=(1, 0))
    y = torch.from_dlpack(hurray.from_numpy(np.ones(3, ml_dtypes.bfloat16)))
    assert y.dtype == torch.bfloat16 and bool((y == 1).all())


# ------------------------------------------------------------ save/load


def test_load_file_is_zero_copy_and_sparse_becomes_torch_sparse(tmp_path):
    path = tmp_path / "m.hurray"
    dense = torch.randn(32, 32)
    sparse = torch.eye(5).to_sparse_csr()
    save_file({"d": dense, "s": sparse}, path)
    out = load_file(path)
    assert torch.equal(out["d"], dense)
    assert out["s"].layout == torch.sparse_csr and torch.equal(out["s"].to_dense(), torch.eye(5))
    with hurray.open(path) as f:
        address = f["d"]._buffer_address(0)
    maps = Path("/proc/self/maps").read_text()
    assert str(path) in maps  # the file is mapped...
    del address
    lo_hi = [
        tuple(int(x, 16) for x in line.split()[0].split("-"))
        for line in maps.splitlines()
        if line.endswith(str(path))
    ]
    assert any(lo <= out["d"].data_ptr() < hi for lo, hi in lo_hi)


def test_save_file_refuses_shared_tensors(tmp_path):
    w = torch.randn(4, 4)
    with pytest.raises(ValueError, match="share memory"):
        save_file({"embed": w, "lm_head": w}, tmp_path / "tied.hurray")
    with pytest.raises(ValueError, match="share memory"):
        save_file({"a": w, "row": w[1]}, tmp_path / "view.hurray")
    save_file({"a": w[:2], "b": w[2:]}, tmp_path / "disjoint.hurray")  # no overlap: fine
    assert not (tmp_path / "tied.hurray").exists()


def test_save_file_refuses_memory_shared_across_storages(tmp_path):
    """The check grouped tensors by storage: two torch.from_numpy views of
    one array are two storages over the same memory, and a sparse tensor's
    values() a tensor of its own; both were saved, and the tie was lost."""
    a = np.arange(10.0)
    with pytest.raises(ValueError, match="share memory"):
        save_file({"a": torch.from_numpy(a), "b": torch.from_numpy(a[2:])}, tmp_path / "n.hurray")
    csr = torch.randn(3, 3).to_sparse_csr()
    with pytest.raises(ValueError, match="share memory"):
        save_file({"s": csr, "v": csr.values()}, tmp_path / "s.hurray")
    # Interleaved across storages, sharing no byte: saved, as before.
    c = np.arange(6, dtype=np.complex128)
    fine = {"re": torch.from_numpy(c.real), "im": torch.from_numpy(c.imag)}
    rec = np.zeros(4, dtype=[("x", "<f4"), ("y", "<f4")])
    fine.update(x=torch.from_numpy(rec["x"]), y=torch.from_numpy(rec["y"]))
    grid = np.arange(12.0).reshape(3, 4)
    fine.update(left=torch.from_numpy(grid[:, :2]), right=torch.from_numpy(grid[:, 2:]))
    # Two sparse tensors over the same index arrays: structure, not ties.
    crow, col = csr.crow_indices(), csr.col_indices()
    fine["s1"] = torch.sparse_csr_tensor(crow, col, torch.ones(col.numel()), (3, 3))
    fine["s2"] = torch.sparse_csr_tensor(crow, col, torch.zeros(col.numel()), (3, 3))
    save_file(fine, tmp_path / "fine.hurray")
    assert torch.equal(load_file(tmp_path / "fine.hurray")["im"], fine["im"])
    save_file({"s": csr, "v": csr.values().clone()}, tmp_path / "ok.hurray")
    assert not any((tmp_path / n).exists() for n in ("n.hurray", "s.hurray"))


# -------------------------------------------------------------- safe_open


def test_safe_open_api(model):
    with hurray.safe_open(model, framework="pt", device="cpu") as f:
        assert sorted(f.keys()) == ["f8", "ids", "w16", "w32"]
        assert f.metadata() == {"format": "pt"}
        assert f.get_tensor("w16").dtype == torch.bfloat16
        sl = f.get_slice("w32")
        assert sl.get_shape() == [64, 257] and sl.get_dtype() == "F32"  # safetensors' name
        assert torch.equal(sl[2:5, ::3], f.get_tensor("w32")[2:5, ::3])
    with hurray.safe_open(model, framework="np") as f:
        assert f.get_tensor("ids")[5] == 5
    with pytest.raises(ValueError):
        hurray.safe_open(model, framework="tf")


def test_safe_open_slices_outlive_the_with_block(tmp_path):
    """safetensors' slices keep its storage: a slice taken inside `with`
    reads after it. hurray's said "I/O operation on a closed hurray file".
    The file closes once the last slice is gone, and the closed handle
    refuses everything else."""
    path = tmp_path / "w.hurray"
    hurray.save(path, {"w": np.arange(8, dtype=np.float32)})
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    for framework in ("np", "pt"):
        with hurray.safe_open(path, framework=framework) as f:
            a, b = f.get_slice("w"), f.get_slice("w")
            with pytest.raises(hurray.NotFoundError):
                f.get_slice("nope")
        for call in (f.keys, f.metadata, lambda: f.get_tensor("w"), lambda: f.get_slice("w")):
            with pytest.raises(ValueError, match="closed"):
                call()
        assert a[1:3].tolist() == [1.0, 2.0] and fds() == before + 1
        del a
        assert b[-1:].tolist() == [7.0] and fds() == before + 1
        del b
        assert fds() == before
    with hurray.safe_open(path, framework="np") as f:
        f.get_slice("w")[0:1]
    assert fds() == before


KEY_PART = st.one_of(
    st.integers(-8, 8),
    st.builds(
        slice,
        st.one_of(st.none(), st.integers(-9, 9)),
        st.one_of(st.none(), st.integers(-9, 9)),
        st.one_of(st.none(), st.integers(-4, 4).filter(lambda s: s != 0)),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=4),
    key=st.lists(KEY_PART, min_size=0, max_size=4),
    ellipsis_at=st.integers(-1, 4),
    framework=st.sampled_from(["np", "pt"]),
    dtype=st.sampled_from(["float32", "bfloat16"]),
    data=st.data(),
)
def test_safe_open_slicing_equals_numpy(
    tmp_path_factory, shape, key, ellipsis_at, framework, dtype, data
):
    array = (
        np.arange(int(np.prod(shape)), dtype=np.float32)
        .reshape(shape)
        .astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32)
    )
    path = tmp_path_factory.mktemp("so") / "a.hurray"
    hurray.save(path, {"a": hurray.from_numpy(array)})
    key = list(key)
    if 0 <= ellipsis_at <= len(key):
        key.insert(ellipsis_at, Ellipsis)
    key = tuple(key)
    try:
        want = array[key]
    except IndexError:
        with hurray.safe_open(path, framework=framework) as f, pytest.raises(IndexError):
            f.get_slice("a")[key]
        return
    with hurray.safe_open(path, framework=framework) as f:
        got = f.get_slice("a")[key]
    if framework == "np":  # an array for every key, as safetensors gives, never a scalar
        assert isinstance(got, np.ndarray), (key, type(got))
    if framework == "pt":
        got = got.float().numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got, np.float32), want.astype(np.float32))


def test_safe_open_numpy_slices_with_every_axis_indexed_are_arrays(tmp_path):
    """safetensors' framework="np" gives a 0-d array for a key of ints only;
    hurray gave numpy's scalar (np.float32), which has no .flags and is
    not writable into."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_file({"x": a}, str(tmp_path / "x.safetensors"))
    hurray.save(tmp_path / "x.hurray", {"x": a})
    for key in [(1, 2), (-1, -1), (0, slice(1, 2)), 2]:
        with safe_open(str(tmp_path / "x.safetensors"), "np") as f:
            want = f.get_slice("x")[key]
        with hurray.safe_open(tmp_path / "x.hurray", "np") as f:
            got = f.get_slice("x")[key]
        assert type(got) is type(want) is np.ndarray, key
        assert got.shape == want.shape and got.tolist() == want.tolist(), key


@pytest.mark.slow
def test_cold_load_populates_and_matches(model):
    """From a cold page cache load_file pre-faults the mapping with
    concurrent populate calls (ADR-0021): same values, writable, file
    untouched, and the file is then in the page cache."""
    fd = os.open(model, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    with hurray.open(model) as f:
        cold = f.cached_fraction()
    code = """
        import sys, torch, hurray
        from hurray.torch import load_file
        got = load_file(sys.argv[1])
        want = {k: torch.from_dlpack(v).clone() for k, v in hurray.load(sys.argv[1]).items()}
        assert got.keys() == want.keys()
        for k in got:
            assert torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8)), k
            got[k].view(torch.uint8).add_(1)
        print("ok")
    """
    done = run_python(code, model)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
    with hurray.open(model) as f:
        assert f.cached_fraction() > 0.99
    if cold >= 0.5:
        pytest.skip(f"the page cache kept {cold:.0%} of the file (tmpfs?): cold path not taken")
    verify_with_cli(model)


def test_safe_open_device_none_is_the_cpu_and_cuda_without_cuda_is_refused(tmp_path):
    """device=None is safetensors' default (the CPU); it was a TypeError.
    device="cuda" without CUDA failed at the first get_tensor with torch's
    AssertionError ("Torch not compiled with CUDA enabled")."""
    path = tmp_path / "d.hurray"
    hurray.save(path, {"w": np.arange(4, dtype=np.float32)})
    with hurray.safe_open(path, framework="pt", device=None) as f:
        assert f.get_tensor("w").device.type == "cpu"
    assert hurray.torch.load_file(path, device=None)["w"].device.type == "cpu"
    if torch.cuda.is_available():
        return
    for device in ("cuda", "cuda:0", 0):
        with pytest.raises(hurray.UnsupportedError, match="torch sees no CUDA device"):
            hurray.safe_open(path, framework="pt", device=device)


def test_safe_open_slices_of_what_torch_cannot_slice_are_refused(tmp_path):
    """get_slice(...)[...] of a sparse or per-channel quantized tensor raised
    torch's NotImplementedError or RuntimeError ("Sparse CSR tensors do not
    have strides"); get_tensor reads them whole."""
    path = tmp_path / "s.hurray"
    csr = torch.eye(4).to_sparse_csr()
    per_channel = torch.quantize_per_channel(
        torch.rand(3, 4), torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 2]), 0, torch.quint8
    )
    hurray.torch.save_file({"csr": csr, "pc": per_channel}, path)
    with hurray.safe_open(path, framework="pt") as f:
        for name, kind in (("csr", "sparse_csr tensor"), ("pc", "per-channel quantized tensor")):
            # It sent the reader to framework='np', which refuses both too.
            with pytest.raises(
                hurray.UnsupportedError,
                match=f"torch cannot slice a {kind}; read it whole with get_tensor$",
            ):
                f.get_slice(name)[0:2]
            assert tuple(f.get_tensor(name).shape) == ((3, 4) if name == "pc" else (4, 4))


def test_safe_open_dtype_names_are_safetensors_names(tmp_path):
    """get_slice(n).get_dtype() gave hurray's "float32" where safetensors'
    gives "F32": a script that switched its import and compared dtypes
    broke. A tensor safetensors cannot hold keeps hurray's name."""
    import ml_dtypes
    import safetensors.numpy

    arrays = {
        "a": np.ones(3, np.float32),
        "b": np.ones(4, ml_dtypes.bfloat16),
        "f8": np.ones(2, ml_dtypes.float8_e4m3fn),
        "i": np.ones(2, np.int64),
    }
    hurray.save(
        tmp_path / "m.hurray", {**arrays, "q": hurray.quantize(np.ones(64, np.float32), "q8_0")}
    )
    safetensors.numpy.save_file(arrays, str(tmp_path / "m.safetensors"))
    with safetensors.safe_open(str(tmp_path / "m.safetensors"), "np") as theirs:
        with hurray.safe_open(tmp_path / "m.hurray", framework="np") as ours:
            for name in arrays:
                assert ours.get_slice(name).get_dtype() == theirs.get_slice(name).get_dtype()
            assert ours.get_slice("q").get_dtype() == "int8"  # codes: no safetensors form


# ------------------------------------------------------------ negative strides


def test_dlpack_of_a_negative_stride_reaches_torch_as_a_copy(tmp_path):
    """DLPack allows negative strides and the export passed them on:
    torch.from_dlpack(t) aborted the process (an uncaught c10::Error). With
    copy=None they now leave as a row-major copy; copy=False still exports
    the view, for consumers that take one (numpy)."""
    code = textwrap.dedent(
        """
        import sys, numpy as np, torch, hurray
        d = hurray.Descriptor("float32", (2, 3), strides=(3, -1), byte_offset=8,
                              buffers=[hurray.Buffer("data", 24, 4)])
        t = hurray.Tensor(d, [np.arange(6, dtype=np.float32)])
        print(torch.from_dlpack(t).tolist())
        if sys.argv[1] == "1":  # numpy.from_dlpack has copy= (2.1 and later)
            v = np.from_dlpack(t, copy=False)
            print(v.strides, v.tolist())
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(int(NUMPY_FROM_DLPACK_COPY))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    lines = r.stdout.splitlines()
    assert lines[0] == "[[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]"
    if NUMPY_FROM_DLPACK_COPY:
        assert lines[1] == "(12, -4) [[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]"


@pytest.mark.parametrize(
    "shape, strides, values",
    [((1, 3), (-3, 1), np.arange(3, dtype=np.float32)), ((2, 0), (-1, 1), np.zeros(0, np.float32))],
)
def test_a_negative_stride_on_a_dimension_of_size_0_or_1_loads_into_torch(
    tmp_path, shape, strides, values
):
    """numpy calls such an array contiguous, so np.ascontiguousarray kept
    it, and torch.from_numpy raised its own ValueError on the stride."""
    d = hurray.Descriptor(
        "float32", shape, strides=strides, buffers=[hurray.Buffer("data", values.nbytes, 4)]
    )
    t = hurray.Tensor(d, [values])
    path = tmp_path / "e.hurray"
    hurray.save(path, {"e": t})
    want = t.to_dense()
    for got in (
        hurray.torch.to_torch(t),
        load_file(path)["e"],
        hurray.safe_open(path, "pt").get_tensor("e"),
    ):
        assert tuple(got.shape) == shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_safe_open_pt_flips_dtypes_torch_cannot_flip(tmp_path):
    """get_slice(name)[::-1] called torch's flip, which has no kernel for
    float8 or uint16/32/64: a bare NotImplementedError."""
    path = tmp_path / "x.hurray"
    arrays = {
        "f8": np.array([1, 2, 3], dtype=ml_dtypes.float8_e4m3fn),
        "u16": np.array([1, 2, 3], dtype=np.uint16),
        "u64": np.array([[1, 2], [3, 2**63]], dtype=np.uint64),
    }
    hurray.save(path, arrays)
    dtypes = {"f8": torch.float8_e4m3fn, "u16": torch.uint16, "u64": torch.uint64}
    width = {1: torch.uint8, 2: torch.int16, 8: torch.int64}
    with hurray.safe_open(path, "pt") as f:
        for name, a in arrays.items():
            got = f.get_slice(name)[::-1]
            assert got.dtype == dtypes[name]
            raw = got.contiguous().view(width[got.element_size()]).numpy().tobytes()
            assert raw == np.ascontiguousarray(a[::-1]).tobytes(), name


# ------------------------------------------------------------ older torch


@pytest.mark.parametrize(
    "refusal",
    [
        BufferError("a DLPack 0.x capsule cannot say the memory is read-only"),
        RuntimeError("Unsupported code 10"),
    ],
)
def test_what_an_older_torch_cannot_take_by_dlpack_goes_through_numpy(
    tmp_path, monkeypatch, refusal
):
    """torch before 2.9 asks __dlpack__ without max_version, so read-only
    memory has no capsule for it (BufferError); before 2.10 it knows no
    float8 codes (RuntimeError). to_torch and load_file passed those
    errors on; they now take the numpy route. The older torch is stood in
    for by a from_dlpack that refuses."""
    path = tmp_path / "m.hurray"
    arrays = {
        "f8": np.array([1, -2, 0.5], dtype=ml_dtypes.float8_e4m3fn),
        "bf16": np.array([1, -2, 0.5], dtype=ml_dtypes.bfloat16),
        "i32": np.arange(6, dtype=np.int32).reshape(2, 3),
    }
    hurray.save(path, arrays)

    def from_dlpack(obj, *args, **kwargs):
        raise refusal

    monkeypatch.setattr(torch, "from_dlpack", from_dlpack)
    loaded = (
        {k: hurray.torch.to_torch(v) for k, v in hurray.load(path, readonly=True).items()},
        load_file(path),
        load_file(path, mmap=False),
    )
    for tensors in loaded:
        for name, a in arrays.items():
            got = tensors[name]
            width = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[got.element_size()]
            raw = got.view(width).numpy().tobytes()
            assert raw == a.tobytes(), name
            got.view(width)[0] = 0  # writable, and not the file's memory
    assert hurray.load(path)["i32"].numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
