"""Files of many small tensors (issue 19): save() hands plain arrays to C in
batches (hurray_writer_write_dense_batch), open reads names, shapes and
dtypes in place from the index, load() reads every tensor in one C call, and
a plain dense Tensor exports its elements through the buffer protocol."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from _file_edits import descriptor_at as _descriptor_at
from _file_edits import reseal as _reseal

import hurray
from hurray import _dtypes

# numpy 1.x arrays have at most 32 dimensions (numpy 2: 64), so an array past
# the format's limit of 32 exists only from numpy 2 on.
_NEEDS_NUMPY_2_RANKS = pytest.mark.skipif(
    np.lib.NumpyVersion(np.__version__) < "2.0.0",
    reason="numpy < 2 has no arrays of more than 32 dimensions",
)


def _rank_33():
    return {"deep": np.zeros((1,) * 33)}


# Every dtype save() hands to C as it is: byte-sized, with a numpy type.
PLAIN = [name for name in hurray.DTYPES if not _dtypes.is_packed(name)]


def _sample(name, shape, seed=0):
    dtype = _dtypes.to_numpy(name)
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    raw = rng.integers(0, 256, count * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        raw = raw & 1
    return raw.view(dtype).reshape(shape)  # NaN payloads included: compared as bytes


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", PLAIN)
def test_every_dtype_round_trips_through_the_batch(tmp_path, name):
    arrays = {
        "matrix": _sample(name, (3, 5), 1),
        "scalar": _sample(name, (), 2),
        "empty": _sample(name, (0, 4), 3),
        "strided": _sample(name, (6, 8), 4)[::2, 1::3],  # not contiguous: copied first
        "column": np.asfortranarray(_sample(name, (4, 3), 5)),
    }
    path = tmp_path / "a.hurray"
    hurray.save(path, arrays)
    loaded = hurray.load(path)
    with hurray.open(path) as f:
        for key, value in arrays.items():
            assert _same(loaded[key], value), key
            assert f.shape(key) == value.shape
            assert f.dtype(key) == name
    # The batch writes exactly what the Tensor path writes.
    reference = tmp_path / "b.hurray"
    hurray.save(
        reference, {k: hurray.from_numpy(np.array(v, order="C")) for k, v in arrays.items()}
    )
    assert path.read_bytes() == reference.read_bytes()


def test_unaligned_and_big_endian_inputs(tmp_path):
    raw = np.arange(17, dtype=np.uint8).tobytes()
    unaligned = np.frombuffer(raw, dtype=np.int32, count=4, offset=1)
    assert unaligned.ctypes.data % 4 != 0
    path = tmp_path / "a.hurray"
    hurray.save(path, {"u": unaligned})
    assert _same(hurray.load(path)["u"], unaligned.copy())
    # Big-endian arrays take the Tensor path, which refuses them as before.
    with pytest.raises(ValueError, match="no hurray equivalent"):
        hurray.save(path, {"big": np.arange(5, dtype=">f8")})


@pytest.mark.parametrize("dtype", ["float64", "float32", "int16", "float16"])
def test_unaligned_inputs_get_their_statistics(tmp_path, dtype):
    """statistics=True gave an unaligned array none, without a word: the
    batch writer's statistics checked the file's alignment against the
    caller's address, which io.h says may be any."""
    raw = bytearray(8 * 4 + 1)
    unaligned = np.frombuffer(raw, dtype=dtype, offset=1, count=4)
    assert unaligned.ctypes.data % unaligned.itemsize != 0
    unaligned[:] = [1, -2, 0, 5]
    path = tmp_path / "s.hurray"
    hurray.save(path, {"u": unaligned, "a": unaligned.copy()}, statistics=True)
    with hurray.open(path) as f:
        want = f["a"].descriptor.statistics
        assert want is not None and (want.min, want.max, want.zero_count) == (-2, 5, 1)
        assert f["u"].descriptor.statistics == want


def test_batches_interleave_with_tensors_in_order(tmp_path):
    """More than one batch (8192 a call), Tensors and sparse tensors between
    plain arrays: everything lands, under its own name."""
    scipy_sparse = pytest.importorskip("scipy.sparse")
    arrays = {}
    for i in range(9000):
        arrays[f"p.{i:05d}"] = np.full((i % 7,), i, dtype=np.int32)
        if i % 2500 == 0:
            arrays[f"t.{i:05d}"] = hurray.from_numpy(np.arange(i % 5 + 1, dtype=np.float32))
            arrays[f"s.{i:05d}"] = scipy_sparse.random(
                4, 5, density=0.5, format="csr", random_state=i
            )
    path = tmp_path / "a.hurray"
    hurray.save(path, arrays)
    got = hurray.load(path)
    assert sorted(got) == sorted(arrays)
    for i in range(0, 9000, 97):
        assert _same(got[f"p.{i:05d}"], arrays[f"p.{i:05d}"])
    assert type(got["s.02500"]).__name__ == "SparseTensor"
    assert np.allclose(got["s.02500"].to_scipy().toarray(), arrays["s.02500"].toarray())


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"": np.zeros(2)}, hurray.InvalidArgumentError),
        ({"a\0b": np.zeros(2)}, ValueError),
        ({"\udc80": np.zeros(2)}, ValueError),
        ({3: np.zeros(2)}, TypeError),
        ({"x" * 5000: np.zeros(2)}, hurray.LimitError),
        pytest.param(
            _rank_33,
            (hurray.HurrayError, TypeError, ValueError),
            marks=_NEEDS_NUMPY_2_RANKS,
            id="bad5-error5",
        ),
    ],
)
def test_bad_input_fails_cleanly_and_leaves_the_target(tmp_path, bad, error):
    if callable(bad):
        bad = bad()
    path = tmp_path / "a.hurray"
    hurray.save(path, {"old": np.arange(3)})
    before = path.read_bytes()
    tensors = {f"ok.{i}": np.arange(i) for i in range(100)}
    tensors.update(bad)
    tensors.update({f"z.{i}": np.arange(i) for i in range(100)})
    with pytest.raises(error):
        hurray.save(path, tensors)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["a.hurray"]


def test_twenty_thousand_tensors_keys_shapes_dtypes(tmp_path):
    rng = np.random.default_rng(11)
    arrays = {}
    for i in range(20000):
        n = int(rng.integers(0, 40))
        dtype = (np.float32, np.int16, ml_dtypes.bfloat16, np.uint8)[i % 4]
        arrays[f"t.{i:05d}"] = np.arange(n, dtype=np.float32).astype(dtype).reshape(n, 1)[:, :]
    path = tmp_path / "many.hurray"
    hurray.save(path, arrays)
    with hurray.open(path) as f:
        keys = f.keys()
        assert keys == sorted(arrays)
        assert len(f) == 20000 and "t.00007" in f and "nope" not in f
        for name in keys:
            assert f.shape(name) == arrays[name].shape
            assert f.dtype(name) == _dtypes.from_numpy(arrays[name].dtype)
        with pytest.raises(hurray.NotFoundError):
            f.shape("nope")
        with pytest.raises(TypeError):
            f.dtype(7)
    for mmap in (True, False):
        got = hurray.load(path, mmap=mmap)
        assert list(got) == keys
        for name in keys[::101]:
            assert _same(got[name], arrays[name])


def test_tensor_buffer_protocol(tmp_path):
    arrays = {
        "f": np.arange(12, dtype=np.float32).reshape(3, 4),
        "c": np.arange(3, dtype=np.complex128),
        "b": np.array([True, False, True]),
        "s": np.array(7, dtype=np.int64),
        "bf": np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16),
    }
    path = tmp_path / "a.hurray"
    hurray.save(path, arrays)
    for readonly in (False, True):
        got = hurray.load(path, readonly=readonly)
        for name, value in arrays.items():
            a = np.asarray(got[name])
            assert _same(a, value)
            assert a.flags.writeable is (not readonly)
        m = memoryview(got["f"])
        assert m.format == "f" and m.shape == (3, 4) and m.readonly is readonly
        assert bytes(m) == arrays["f"].tobytes()
        with pytest.raises(BufferError):
            memoryview(got["bf"])  # no PEP 3118 format: numpy goes through __array__
        if readonly:
            with pytest.raises(ValueError):
                np.asarray(got["f"])[0, 0] = 1
        del m
    # A quantized tensor is no buffer: numpy's refusal explains.
    q = hurray.quantize(np.ones((4, 32), np.float32), "q8_0")
    with pytest.raises(BufferError):
        memoryview(q)
    with pytest.raises(hurray.UnsupportedError):
        np.asarray(q)
    # The export keeps the tensor (and its mapping) alive.
    t = hurray.load(path)["f"]
    a = np.asarray(t)
    del t
    import gc

    gc.collect()
    assert a.sum() == 66


# ------------------------------------------------- corrupted index, lazily


@pytest.fixture
def small_file(tmp_path):
    path = tmp_path / "c.hurray"
    hurray.save(path, {f"t.{i}": np.arange(i + 1, dtype=np.float32) for i in range(50)})
    return path


def test_bad_dtype_in_the_index_is_an_error_where_asked(small_file, tmp_path):
    blob = bytearray(small_file.read_bytes())
    start, _ = _descriptor_at(blob, "t.7")
    # The dtype record comes first: tag 0x0011, length 2, then the code.
    assert struct.unpack_from("<HI", blob, start + 6) == (0x11, 2)
    struct.pack_into("<H", blob, start + 12, 200)
    _reseal(blob)
    bad = tmp_path / "bad.hurray"
    bad.write_bytes(bytes(blob))
    with hurray.open(bad) as f:  # open checks structure only: fine
        assert len(f.keys()) == 50
        assert f.shape("t.8") == (9,)
        with pytest.raises(hurray.UnsupportedError, match="dtype"):
            f.shape("t.7")
        with pytest.raises(hurray.UnsupportedError):
            f.dtype("t.7")
        with pytest.raises(hurray.UnsupportedError):
            f["t.7"]
    with pytest.raises(hurray.UnsupportedError):
        hurray.load(bad)


def test_lying_shape_is_refused_when_the_tensor_is_read(small_file, tmp_path):
    blob = bytearray(small_file.read_bytes())
    start, _ = _descriptor_at(blob, "t.3")
    assert struct.unpack_from("<HI", blob, start + 14) == (0x13, 8)
    struct.pack_into("<Q", blob, start + 20, 1 << 40)
    _reseal(blob)
    bad = tmp_path / "bad.hurray"
    bad.write_bytes(bytes(blob))
    with hurray.open(bad) as f:
        # shape() reads the record as it stands (docs/security.md) ...
        assert f.shape("t.3") == (1 << 40,)
        # ... and reading the tensor validates the whole descriptor.
        with pytest.raises(hurray.HurrayError):
            f["t.3"]
        with pytest.raises(hurray.HurrayError):
            f.descriptor("t.3")
    with pytest.raises(hurray.HurrayError):
        hurray.load(bad)


def test_unresealed_index_damage_fails_at_open(small_file, tmp_path):
    blob = bytearray(small_file.read_bytes())
    start, _ = _descriptor_at(blob, "t.3")
    blob[start + 20] ^= 0xFF
    bad = tmp_path / "bad.hurray"
    bad.write_bytes(bytes(blob))
    with pytest.raises(hurray.ChecksumError):
        hurray.open(bad)


def test_random_index_damage_never_crashes(tmp_path):
    """Every byte of the index flipped in turn (checksums resealed), in a
    child process: open, keys, shape, dtype and load either work or raise a
    HurrayError (or OSError); nothing crashes or hangs. Dense, scalar,
    quantized and sparse entries, so shape() takes both of its paths."""
    scipy_sparse = pytest.importorskip("scipy.sparse")
    small_file = tmp_path / "src.hurray"
    hurray.save(
        small_file,
        {
            "a": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b": np.int8(3) * np.ones((), np.int8),
            "q": hurray.quantize(np.ones((2, 32), np.float32), "q8_0"),
            "s": scipy_sparse.random(3, 4, density=0.5, format="csr", random_state=1),
        },
    )
    script = textwrap.dedent(
        f"""
        import ctypes, ctypes.util, struct, sys
        import hurray
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from _file_edits import index_range as _index_range, reseal as _reseal
        src = open({str(small_file)!r}, "rb").read()
        offset, length = _index_range(src)
        path = {str(tmp_path / "fuzz.hurray")!r}
        outcomes = {{"ok": 0, "error": 0}}
        for i in range(offset, offset + length):
            for flip in (0x01, 0x80, 0xFF):
                blob = bytearray(src)
                blob[i] ^= flip
                _reseal(blob)
                open(path, "wb").write(blob)
                try:
                    with hurray.open(path) as f:
                        for name in f.keys():
                            for call in (f.shape, f.dtype):
                                try:
                                    call(name)
                                except hurray.HurrayError:
                                    pass
                    d = hurray.load(path)
                    for t in d.values():
                        try:
                            t.numpy().sum()
                        except hurray.HurrayError:
                            pass
                    outcomes["ok"] += 1
                except (hurray.HurrayError, OSError):
                    outcomes["error"] += 1
        print(outcomes)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'error'" in done.stdout


def test_shape_and_dtype_in_any_order_after_any_lookup(tmp_path):
    """shape()/dtype() try the entry after the last one found before a
    binary search: every order, repeats, misses and a reopen agree with the
    descriptors, and a closed file still refuses."""
    rng = np.random.default_rng(7)
    arrays = {
        f"t{i:03d}": np.zeros(tuple(int(d) for d in rng.integers(1, 4, size=i % 4)), np.float32)
        for i in range(200)
    }
    arrays["t050"] = np.zeros((2, 3), np.int8)
    path = tmp_path / "order.hurray"
    hurray.save(path, arrays)
    names = sorted(arrays)
    orders = [names, names[::-1], list(rng.permutation(names)), [names[0]] * 3 + names[:5]]
    with hurray.open(path) as f:
        for order in orders:
            for n in order:
                assert f.shape(n) == arrays[n].shape
                assert f.dtype(n) == str(arrays[n].dtype)
        assert f.shape("t049") == arrays["t049"].shape
        for miss in ("t0495", "t050x", "", "zzz", "a"):  # next to a hit, and far away
            with pytest.raises(hurray.NotFoundError):
                f.shape(miss)
            assert f.shape("t051") == arrays["t051"].shape  # after a miss
        with pytest.raises(ValueError):
            f.shape("t0\x0050")
        with pytest.raises(TypeError):
            f.shape(50)
    with pytest.raises(ValueError):
        f.shape("t000")
    with pytest.raises(ValueError):
        f.dtype("t000")


def test_shape_tuples_are_untracked_and_shape_races_close(tmp_path):
    """shape() takes no lock (it holds the GIL, and close frees the reader
    under the GIL too): its tuples are left out of the garbage collector,
    and threads listing shapes while another closes the file see shapes or
    ValueError, never a freed reader. In a subprocess: a bug would crash."""
    import gc

    arrays = {f"t{i:04d}": np.zeros((i % 5 + 1, 2), np.float32) for i in range(2000)}
    path = tmp_path / "race.hurray"
    hurray.save(path, arrays)
    with hurray.open(path) as f:
        shape = f.shape("t0003")
        assert shape == (4, 2) and not gc.is_tracked(shape)
    code = f"""
import threading, hurray
for _ in range(20):
    f = hurray.open({str(path)!r})
    names = f.keys()
    bad = []
    def walk():
        try:
            for _ in range(50):
                for n in names:
                    if f.shape(n) != (int(n[1:]) % 5 + 1, 2):
                        bad.append(n)
        except ValueError:
            pass
    threads = [threading.Thread(target=walk) for _ in range(3)]
    for t in threads:
        t.start()
    loaded = hurray.load({str(path)!r})
    f.close()
    for t in threads:
        t.join()
    assert not bad and len(loaded) == 2000, bad[:3]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
