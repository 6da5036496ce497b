"""hurray.save / load / open: every layout and quantization kind round
trips byte for byte in both read modes; mmap reads are zero-copy into the
file mapping; tensors outlive the File; row reads, checksums, metadata,
errors, concurrent readers, and scipy.sparse through a file."""

import concurrent.futures
import gc
import io
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from _hurray_samples import COMPRESSED_DENSE, SAMPLES, bsr_dense, inside, mappings, paged  # noqa: F401

import hurray
from hurray import Buffer, Descriptor, _dtypes

MODES = [pytest.param(True, id="mmap"), pytest.param(False, id="pread")]


def build(name):
    d, arrays = SAMPLES[name]()
    return hurray.Tensor(d, arrays), arrays


def assert_same_tensor(u, t):
    assert u.descriptor == t.descriptor
    assert u._encoded == t._encoded
    assert u.buffer_count == t.buffer_count
    for i in range(t.buffer_count):
        assert bytes(u._buffer(i)) == bytes(t._buffer(i)), f"buffer {i}"


def check_values(name, u):
    """Value-level checks of a loaded tensor, independent of its bytes."""
    layout = u.descriptor.layout
    if name in ("sparse_csr", "sparse_csc"):
        assert isinstance(u, hurray.SparseTensor)
        np.testing.assert_array_equal(u.to_dense(), COMPRESSED_DENSE)
    elif name == "sparse_bsr":
        assert isinstance(u, hurray.SparseTensor)
        np.testing.assert_array_equal(u.to_dense(), bsr_dense())
    elif name == "sparse_coo":
        assert isinstance(u, hurray.SparseTensor)
        dense = u.to_dense()
        assert dense[0, 4, 5] == np.float32(1.5) and dense[3, 2, 0] == np.float32(3.25)
        assert np.count_nonzero(dense) == 3
    elif name == "paged_kv_cache":
        np.testing.assert_array_equal(u.to_dense().view(np.uint16), paged()[2].view(np.uint16))
    elif name == "composite_lora":
        assert [m.name for m in layout.members] == ["base", "lora_a", "lora_b"]
        np.testing.assert_array_equal(
            np.frombuffer(u._buffer(2), np.float32).reshape(8, 2),
            np.arange(16, dtype=np.float32).reshape(8, 2),
        )
    elif name == "dense_strided":
        np.testing.assert_array_equal(u.numpy(), [[3, 0], [4, 1], [5, 2]])


# ------------------------------------------------------------- round trips


@pytest.mark.parametrize("mmap", MODES)
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_save_load_round_trip(fast_dir, name, mmap):
    t, _ = build(name)
    path = fast_dir / "one.hurray"
    hurray.save(path, {name: t})
    loaded = hurray.load(path, mmap=mmap)
    assert list(loaded) == [name]
    assert_same_tensor(loaded[name], t)
    check_values(name, loaded[name])
    with hurray.open(path, mmap=mmap) as f:
        assert f.keys() == [name]
        assert f.descriptor(name) == t.descriptor
        assert_same_tensor(f[name], t)
        f.verify(name)
        f.verify()


@pytest.mark.parametrize("mmap", MODES)
def test_every_sample_in_one_file(fast_dir, mmap):
    tensors = {name: build(name)[0] for name in SAMPLES}
    path = fast_dir / "all.hurray"
    hurray.save(path, tensors, {"count": len(tensors)})
    with hurray.open(path, mmap=mmap, verify=True) as f:
        assert f.keys() == sorted(tensors)  # bytewise ascending
        assert len(f) == len(tensors) and list(f) == f.keys()
        assert f.metadata == {"count": len(tensors)}
        for name, t in tensors.items():
            assert name in f
            assert_same_tensor(f[name], t)
            check_values(name, f[name])
            # Every buffer of the file is 64-byte aligned, in both modes.
            u = f[name]
            for i in range(u.buffer_count):
                if u.descriptor.buffers[i].byte_size:
                    assert u._buffer_address(i) % 64 == 0


@pytest.mark.parametrize("mmap", MODES)
@pytest.mark.parametrize("dtype", hurray.DTYPES)
def test_every_dtype_round_trips_through_a_file(fast_dir, dtype, mmap):
    np_dtype = _dtypes.to_numpy(dtype)
    bits = _dtypes.BITS[dtype]
    raw = np.random.default_rng(bits).integers(
        0, 256, size=5 * 3 * np_dtype.itemsize, dtype=np.uint8
    )
    if bits < 8:
        raw = raw[:15] & ((1 << bits) - 1)
    if dtype == "bool":
        raw = raw & 1
    values = raw.view(np_dtype).reshape(5, 3)
    path = fast_dir / "dtype.hurray"
    hurray.save(path, {"x": values})
    u = hurray.load(path, mmap=mmap)["x"]
    assert u.dtype == dtype and u.shape == (5, 3)
    np.testing.assert_array_equal(u.numpy().view(np.uint8), values.view(np.uint8))


def test_save_accepts_producers_numpy_and_consumed_tensors(fast_dir):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t, _ = build("quant_per_channel_affine_zero_points")

    class Producer:
        def __hurray__(self, stream=None):
            return t.__hurray__()

    path = fast_dir / "mixed.hurray"
    hurray.save(
        path, {"numpy": a, "producer": Producer(), "consumed": hurray.from_hurray(t), "tensor": t}
    )
    out = hurray.load(path)
    np.testing.assert_array_equal(out["numpy"].numpy(), a)
    for name in ("producer", "consumed", "tensor"):
        assert_same_tensor(out[name], t)


def test_save_replaces_the_file_atomically(fast_dir):
    path = fast_dir / "atomic.hurray"
    hurray.save(path, {"a": np.zeros(3, np.float32)})
    before = path.read_bytes()
    with pytest.raises(TypeError):
        hurray.save(path, {"b": np.ones(3, np.float32)}, {"bad": [1, 2]})
    assert path.read_bytes() == before
    assert sorted(os.listdir(fast_dir)) == ["atomic.hurray"]  # no temp file left behind
    hurray.save(path, {"b": np.ones(3, np.float32)})
    assert hurray.open(path).keys() == ["b"]


def test_write_sizes_never_change_the_bytes(fast_dir, monkeypatch):
    """HURRAY_WRITE_FOLIOS only sizes the writes of large buffers (64 KiB,
    or 2 MiB per whole aligned region, probed by default): the files, hurray
    and converted alike, are the same bytes under every choice."""
    rng = np.random.default_rng(5)
    arrays = {
        "a_head": rng.integers(0, 255, 77, dtype=np.uint8),  # the big one starts unaligned
        "b_big": rng.integers(0, 255, (9 << 20) + 77, dtype=np.uint8),
        "c_more": rng.standard_normal(3 << 18).astype(np.float32),  # 3 MiB
    }
    made = {}
    for choice in ("small", "huge", "probe"):
        monkeypatch.setenv("HURRAY_WRITE_FOLIOS", choice)
        path = fast_dir / f"{choice}.hurray"
        hurray.save(path, arrays)
        back = fast_dir / f"{choice}.safetensors"
        hurray.convert(path, back)
        with hurray.open(path) as f:
            f.verify()
        made[choice] = (path.read_bytes(), back.read_bytes())
    assert made["small"] == made["huge"] == made["probe"]
    with hurray.open(fast_dir / "probe.hurray") as f:
        assert np.array_equal(np.asarray(f["b_big"]), arrays["b_big"])


def test_save_to_a_stream_and_to_a_file_descriptor(fast_dir):
    t, _ = build("quant_nf4")
    stream = io.BytesIO()
    hurray.save(stream, {"w": t}, {"k": "v"})
    (fast_dir / "stream.hurray").write_bytes(stream.getvalue())
    with open(fast_dir / "fd.hurray", "wb") as f:
        hurray.save(f.fileno(), {"w": t}, {"k": "v"})
    assert (fast_dir / "fd.hurray").read_bytes() == stream.getvalue()
    with hurray.open(fast_dir / "stream.hurray", verify=True) as f:
        assert f.metadata == {"k": "v"}
        assert_same_tensor(f["w"], t)


def test_read_buffer_into_caller_memory(fast_dir):
    t, arrays = build("quant_block_affine_zero_points")
    path = fast_dir / "rb.hurray"
    hurray.save(path, {"w": t})
    with hurray.open(path) as f:
        for i, a in enumerate(arrays):
            assert bytes(f.read_buffer("w", i)) == a.tobytes()
            out = np.zeros(a.size + 7, np.uint8)
            assert f.read_buffer("w", i, out) is out
            assert out[: a.size].tobytes() == a.tobytes()
        with pytest.raises(hurray.PlacementError):
            f.read_buffer("w", 0, bytearray(1))
        with pytest.raises((IndexError, hurray.HurrayError)):
            f.read_buffer("w", 3)
        with pytest.raises(hurray.InvalidArgumentError):
            f.read_buffer("w", 3, bytearray(64))


# ------------------------------------------------------------ zero copy


@pytest.mark.parametrize(
    "name",
    [
        "dense_float32",
        "quant_per_channel_affine_zero_points",
        "sparse_coo",
        "paged_kv_cache",
        "composite_lora",
    ],
)
def test_mmap_load_is_zero_copy_into_the_file_mapping(fast_dir, name):
    t, _ = build(name)
    path = fast_dir / "zc.hurray"
    hurray.save(path, {name: t})
    u = hurray.load(path, mmap=True)[name]
    ranges = mappings(path)
    assert ranges, "the file is not mapped"
    for i in range(u.buffer_count):
        size = len(u._buffer(i))
        assert inside(u._buffer_address(i), size, ranges), f"buffer {i} is not in the mapping"
    # A private (copy-on-write) mapping: writable views; readonly=True maps
    # the file read-only and says so.
    assert not u._buffer(0).readonly
    assert hurray.load(path, readonly=True)[name]._buffer(0).readonly
    # numpy views share that memory.
    if isinstance(u.descriptor.layout, hurray.Dense):
        view = u.codes()
        assert inside(view.__array_interface__["data"][0], 1, ranges)


def test_pread_load_is_not_in_a_mapping(fast_dir):
    t, _ = build("quant_per_channel_affine_zero_points")
    path = fast_dir / "pr.hurray"
    hurray.save(path, {"w": t})
    u = hurray.load(path, mmap=False)["w"]
    ranges = mappings(path)
    for i in range(u.buffer_count):
        assert not inside(u._buffer_address(i), 1, ranges)
        assert u._buffer_address(i) % 64 == 0


@pytest.mark.parametrize("mmap", MODES)
def test_tensors_stay_valid_after_the_file_is_closed(fast_dir, mmap):
    expected = np.arange(4096, dtype=np.float64).reshape(64, 64)
    t, _ = build("quant_block_affine_q8_0")
    path = fast_dir / "close.hurray"
    hurray.save(path, {"big": expected, "q": t})
    with hurray.open(path, mmap=mmap) as f:
        big = f["big"]
        q = f["q"]
        view = big.numpy()
        deq = q.dequantize()
    assert f.closed
    with pytest.raises(ValueError):
        f["big"]
    gc.collect()
    np.testing.assert_array_equal(view, expected)
    np.testing.assert_array_equal(big.numpy(), expected)
    np.testing.assert_array_equal(q.dequantize(), deq)
    del f
    gc.collect()
    np.testing.assert_array_equal(big.numpy(), expected)
    if mmap:
        assert mappings(path)  # the mapping lives as long as the tensors
    os.unlink(path)
    gc.collect()
    np.testing.assert_array_equal(view, expected)
    del big, q
    gc.collect()
    np.testing.assert_array_equal(view, expected)  # the numpy view holds the tensor
    del view
    gc.collect()
    if mmap:
        assert not mappings(path)  # the last owner unmapped it


def test_load_returns_tensors_that_outlive_the_reader(fast_dir):
    a = np.linspace(-1, 1, 100).astype(np.float32)
    path = fast_dir / "load.hurray"
    hurray.save(path, {"a": a})
    loaded = hurray.load(path)
    gc.collect()
    np.testing.assert_array_equal(loaded["a"].numpy(), a)


@pytest.mark.parametrize(
    "readonly", [pytest.param(False, id="private"), pytest.param(True, id="shared")]
)
def test_load_reads_a_cold_file_ahead(tmp_path, monkeypatch, readonly):
    """load() asks the kernel for the whole data region at once, so the disk
    streams while the tensors are built and touched: without it a cold
    mapped load read nothing until a tensor was touched, and then one
    fault's read-ahead window at a time (cold load-all of 20,000 tensors
    0.143 s against 0.097 s). tmp_path, not /dev/shm: tmpfs pages cannot be
    dropped. Mapped loads only: one with mmap=False reads every byte
    anyway."""
    path = tmp_path / "cold.hurray"
    monkeypatch.setenv("HURRAY_WRITE_FOLIOS", "small")  # pages that can be dropped one by one
    hurray.save(path, {f"t{i}": np.full(1 << 20, i, np.uint8) for i in range(16)})
    monkeypatch.delenv("HURRAY_WRITE_FOLIOS")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        for _ in range(5):  # cold benchmarks elsewhere may drop it too; that is fine
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            with hurray.open(path) as f:
                cold = f.cached_fraction()
            if cold < 0.01:
                break
        else:
            pytest.skip(f"the page cache kept {cold:.0%} of the file")
        loaded = hurray.load(path, readonly=readonly)
        cached = 0.0
        with hurray.open(path) as f:
            for _ in range(200):  # up to 2 s
                cached = f.cached_fraction()
                if cached > 0.99:
                    break
                time.sleep(0.01)
        assert cached > 0.99
        assert [int(np.asarray(loaded[f"t{i}"])[-1]) for i in range(16)] == list(range(16))
    finally:
        os.close(fd)


# ---------------------------------------------------------------- row reads


@pytest.mark.parametrize("mmap", MODES)
def test_get_slice_reads_rows(fast_dir, mmap):
    a = np.arange(10 * 3 * 2, dtype=np.int16).reshape(10, 3, 2)
    pt, _ = build("quant_per_tensor_affine")
    opt, _ = build("optional_fields")
    path = fast_dir / "rows.hurray"
    hurray.save(path, {"a": a, "pt": pt, "opt": opt})
    with hurray.open(path, mmap=mmap) as f:
        for start, stop in [(0, 10), (0, 1), (3, 7), (9, 10), (4, 4)]:
            part = f.get_slice("a", start, stop)
            assert part.shape == (stop - start, 3, 2)
            np.testing.assert_array_equal(part.numpy(), a[start:stop])
        assert f.get_slice("a", 5, 2).shape == (0, 3, 2)
        part = f.get_slice("pt", 2, 6)
        assert part.descriptor.quantization == pt.descriptor.quantization
        np.testing.assert_array_equal(part.dequantize(), pt.dequantize()[2:6])
        part = f.get_slice("opt", 1, 2)
        assert part.descriptor.shard.offsets == (7, 0)  # moved by the row start
        assert part.descriptor.statistics is None
        np.testing.assert_array_equal(part.numpy(), opt.numpy()[1:2])
        with pytest.raises(IndexError, match="it has 10 rows"):  # a bad call, not a bad file
            f.get_slice("a", 8, 12)
        with pytest.raises(hurray.NotFoundError):
            f.get_slice("zz", 0, 1)


@pytest.mark.parametrize("mmap", MODES)
def test_get_slice_reads_packed_rows_that_start_on_a_byte(fast_dir, mmap):
    """Every row read of a 1-D int4 tensor (or one with 3 int4 a row) was
    refused, the whole tensor too, because a row is not a whole number of
    bytes; only a first row that starts inside a byte needs refusing."""
    one = hurray.Tensor(
        hurray.Descriptor("int4", (5,), buffers=[hurray.Buffer("data", 3)]),
        [np.array([0x21, 0x43, 0x05], np.uint8)],
    )
    rows = hurray.Tensor(
        hurray.Descriptor("int4", (3, 3), buffers=[hurray.Buffer("data", 5)]),
        [np.array([0x21, 0x43, 0x65, 0x07, 0x01], np.uint8)],
    )
    path = fast_dir / "packed.hurray"
    hurray.save(path, {"one": one, "rows": rows})
    with hurray.open(path, mmap=mmap) as f:
        for start, stop in [(0, 5), (0, 1), (2, 4), (4, 5), (2, 2), (1, 1), (5, 5), (3, 1)]:
            part = f.get_slice("one", start, stop)  # no rows from anywhere, as a[5:5]
            np.testing.assert_array_equal(part.numpy(), one.numpy()[start:stop])
        for start, stop in [(0, 3), (0, 1), (2, 3)]:
            np.testing.assert_array_equal(
                f.get_slice("rows", start, stop).numpy(), rows.numpy()[start:stop]
            )
        with pytest.raises(hurray.UnsupportedError, match="row 1 of packed int4"):
            f.get_slice("one", 1, 3)
        with pytest.raises(hurray.UnsupportedError, match="row 1 of packed int4"):
            f.get_slice("rows", 1, 2)


@pytest.mark.parametrize(
    "name", ["sparse_csr", "quant_per_channel_affine", "paged_kv_cache", "dense_strided"]
)
def test_get_slice_refuses_what_rows_cannot_cut(fast_dir, name):
    t, _ = build(name)
    path = fast_dir / "norows.hurray"
    hurray.save(path, {"x": t})
    with hurray.open(path) as f:
        with pytest.raises(hurray.UnsupportedError):
            f.get_slice("x", 0, 1)


def test_get_slice_reads_only_the_rows_in_pread_mode(fast_dir):
    rows = np.arange(1000 * 256, dtype=np.float32).reshape(1000, 256)
    path = fast_dir / "wide.hurray"
    hurray.save(path, {"w": rows})
    with hurray.open(path, mmap=False) as f:
        part = f.get_slice("w", 500, 502)
        assert len(part._buffer(0)) == 2 * 256 * 4
        np.testing.assert_array_equal(part.numpy(), rows[500:502])


# ---------------------------------------------------------------- checksums


def flip_byte_of(path, needle: bytes, offset: int = 0):
    data = bytearray(path.read_bytes())
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0, "needle must occur exactly once"
    data[at + offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("mmap", MODES)
def test_verify_detects_a_flipped_data_byte(fast_dir, mmap):
    good = np.arange(64, dtype=np.float32)
    marker = np.frombuffer(b"HURRAY-MARKER-" * 8, np.uint8)
    path = fast_dir / "flip.hurray"
    hurray.save(path, {"good": good, "marked": marker})
    hurray.open(path).verify()
    flip_byte_of(path, b"HURRAY-MARKER-" * 8, 20)
    with hurray.open(path, mmap=mmap) as f:
        f.verify("good")  # the other tensor is intact
        with pytest.raises(hurray.ChecksumError) as info:
            f.verify("marked")
        assert info.value.status_name == "HURRAY_ERR_CHECKSUM"
        with pytest.raises(hurray.ChecksumError):
            f.verify()
        # Without verification the damaged bytes are read as they are.
        assert bytes(f["marked"]._buffer(0))[20] == (b"HURRAY-MARKER-" * 8)[20] ^ 0xFF
        np.testing.assert_array_equal(f["good"].numpy(), good)
    with pytest.raises(hurray.ChecksumError):
        hurray.open(path, mmap=mmap, verify=True)
    with pytest.raises(hurray.ChecksumError):
        hurray.load(path, mmap=mmap, verify=True)


def test_verify_checks_every_buffer_of_a_multi_buffer_tensor(fast_dir):
    codes = np.frombuffer(b"CODES-CODES-CODES-CODES!", np.int8).reshape(4, 6)
    scales = np.frombuffer(b"SCALES-SCALES-SC", np.float32).copy()
    scales[:] = [0.5, 1.0, 2.0, 4.0]
    d = Descriptor(
        "int8",
        (4, 6),
        quantization=hurray.PerChannelAffine(0, 1, "float32"),
        buffers=[Buffer("data", 24), Buffer("scales", 16)],
    )
    path = fast_dir / "mb.hurray"
    hurray.save(path, {"q": hurray.Tensor(d, [codes.copy(), scales])})
    data = bytearray(path.read_bytes())
    at = data.find(scales.tobytes())
    assert at >= 0
    data[at + 3] ^= 0x01  # a scale, not the codes
    path.write_bytes(bytes(data))
    with pytest.raises(hurray.ChecksumError, match="1"):
        hurray.open(path).verify("q")


@pytest.mark.parametrize("mmap", MODES)
def test_verify_names_the_damaged_chunk_of_a_long_buffer(fast_dir, mmap, monkeypatch):
    """A buffer longer than 4 MiB carries one checksum per 4 MiB chunk (format
    1.1); verify checks those whichever way it reads (through a mapping on
    every thread) and names the chunk. The table is not metadata."""
    monkeypatch.setenv("HURRAY_HASH_THREADS", "2")
    chunk = 4 << 20
    big = np.random.default_rng(25).integers(0, 256, 2 * chunk + 77, dtype=np.uint8)
    path = fast_dir / "chunks.hurray"
    hurray.save(path, {"big": big, "small": np.arange(5)}, metadata={"k": 1})
    raw = bytearray(path.read_bytes())
    assert raw[10:12] == b"\x01\x00"  # minor version 1
    with hurray.open(path, mmap=mmap) as f:
        assert f.metadata == {"k": 1}
        f.verify()
    at = raw.find(big[chunk : chunk + 64].tobytes())
    raw[at + 100] ^= 0x01  # inside the second chunk
    path.write_bytes(bytes(raw))
    with hurray.open(path, mmap=mmap) as f:
        f.verify("small")
        with pytest.raises(hurray.ChecksumError) as info:
            f.verify()
    assert f"in bytes [{chunk}, {2 * chunk})" in str(info.value)


def test_chunk_checksum_key_is_reserved(fast_dir):
    with pytest.raises(hurray.InvalidArgumentError, match="reserved"):
        hurray.save(
            fast_dir / "r.hurray", {"a": np.arange(3)}, metadata={"hurray.chunk_checksums": 1}
        )
    assert not (fast_dir / "r.hurray").exists()


# ---------------------------------------------------------------- metadata


def test_metadata_of_every_type(fast_dir):
    metadata = {
        "str": "héllo ✓",
        "empty_str": "",
        "int": 42,
        "negative": -7,
        "int64_max": 2**63 - 1,
        "int64_min": -(2**63),
        "float": 3.5,
        "neg_zero": -0.0,
        "inf": float("inf"),
        "nan": float("nan"),
        "true": True,
        "false": False,
        "bytes": bytes(range(256)),
        "empty_bytes": b"",
        "bytearray": bytearray(b"ab"),
        "memoryview": memoryview(b"cd"),
    }
    path = fast_dir / "meta.hurray"
    hurray.save(path, {"x": np.zeros(1)}, metadata)
    got = hurray.open(path).metadata
    assert list(got) == sorted(metadata)
    for key, value in metadata.items():
        if key == "nan":
            assert isinstance(got[key], float) and math.isnan(got[key])
            continue
        if isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        assert got[key] == value and type(got[key]) is type(value), key
    assert math.copysign(1.0, got["neg_zero"]) == -1.0


def test_no_metadata_and_no_tensors(fast_dir):
    path = fast_dir / "empty.hurray"
    hurray.save(path, {})
    with hurray.open(path) as f:
        assert f.keys() == [] and f.metadata == {} and len(f) == 0
        f.verify()
    assert hurray.load(path) == {}


@pytest.mark.parametrize(
    "value, error",
    [(2**64, OverflowError), ([1], TypeError), (None, TypeError), ({"a": 1}, TypeError)],
)
def test_unsupported_metadata_values_are_refused(fast_dir, value, error):
    path = fast_dir / "badmeta.hurray"
    with pytest.raises(error):
        hurray.save(path, {"x": np.zeros(1)}, {"k": value})
    assert not path.exists()


def test_metadata_keys_must_be_strings(fast_dir):
    with pytest.raises(TypeError):
        hurray.save(fast_dir / "k.hurray", {"x": np.zeros(1)}, {1: 1})


# ------------------------------------------------------------------ errors


def test_missing_tensor_is_not_found_and_a_key_error(fast_dir):
    path = fast_dir / "nf.hurray"
    hurray.save(path, {"a": np.zeros(2)})
    with hurray.open(path) as f:
        with pytest.raises(hurray.NotFoundError) as info:
            f["missing"]
        assert info.value.status_name == "HURRAY_ERR_NOT_FOUND"
        with pytest.raises(KeyError):
            f["missing"]
        with pytest.raises(hurray.NotFoundError):
            f.descriptor("missing")
        with pytest.raises(hurray.NotFoundError):
            f.verify("missing")
        assert "missing" not in f and "a" in f and 3 not in f
        assert f.get("missing") is None and f.get("missing", 5) == 5
        assert f.get("a") is not None


def test_missing_file(fast_dir):
    # A file-system failure, not a missing key (issue 14): an OSError
    # subclass with errno and path, and still a HurrayError.
    with pytest.raises(FileNotFoundError) as info:
        hurray.open(fast_dir / "nope.hurray")
    assert isinstance(info.value, hurray.HurrayIOError)
    assert not isinstance(info.value, KeyError)
    with pytest.raises(IsADirectoryError):
        hurray.open(fast_dir)  # a folder, not a file


def test_truncated_and_corrupt_files_are_format_errors(fast_dir):
    t, _ = build("quant_mx_fp4_e2m1")
    path = fast_dir / "whole.hurray"
    hurray.save(path, {"w": t, "b": np.arange(100, dtype=np.float32)})
    data = path.read_bytes()
    bad = fast_dir / "bad.hurray"
    for cut in sorted({0, 1, 8, 31, 64, len(data) // 2, len(data) - 17, len(data) - 1}):
        bad.write_bytes(data[:cut])
        with pytest.raises(hurray.FormatError) as info:
            hurray.open(bad)
        assert info.value.status_name == "HURRAY_ERR_TRUNCATED", cut
        with pytest.raises(hurray.FormatError):
            hurray.load(bad, mmap=False)
    bad.write_bytes(b"X" + data[1:])
    with pytest.raises(hurray.FormatError) as info:
        hurray.open(bad)
    assert info.value.status_name == "HURRAY_ERR_BAD_MAGIC"
    bad.write_bytes(b"not a hurray file at all" * 10)
    with pytest.raises(hurray.FormatError):
        hurray.open(bad)


def test_duplicate_names_are_refused(fast_dir):
    # A dict cannot hold a name twice; the extension entry point can.
    a = hurray.from_numpy(np.zeros(2))
    path = fast_dir / "dup.hurray"
    with pytest.raises(hurray.DuplicateNameError) as info:
        hurray._hurray.save(os.fspath(path), [("a", a), ("a", a)], None)
    assert info.value.status_name == "HURRAY_ERR_DUPLICATE_NAME"
    assert not path.exists()


def test_empty_tensor_name_is_refused(fast_dir):
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.save(fast_dir / "e.hurray", {"": np.zeros(1)})


def test_tensors_not_on_the_host_cannot_be_built():
    with pytest.raises(hurray.PlacementError) as info:
        hurray.Tensor(
            Descriptor(
                "float32",
                (2,),
                buffers=[Buffer("data", 8)],
                device=hurray.Device(3, 0, "host_pinned"),
            ),
            [np.zeros(2, np.float32)],
        )
    assert info.value.status_name == "HURRAY_ERR_DEVICE_MISMATCH"


# ------------------------------------------------------------- concurrency


@pytest.mark.parametrize("mmap", MODES)
def test_eight_threads_read_one_file(fast_dir, mmap):
    tensors = {name: build(name)[0] for name in SAMPLES}
    rows = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    tensors["rows"] = hurray.from_numpy(rows)
    expected = {
        name: [bytes(t._buffer(i)) for i in range(t.buffer_count)] for name, t in tensors.items()
    }
    path = fast_dir / "mt.hurray"
    hurray.save(path, tensors)

    with hurray.open(path, mmap=mmap) as f:

        def work(seed):
            rng = np.random.default_rng(seed)
            names = list(expected)
            checked = 0
            for _ in range(60):
                name = names[rng.integers(len(names))]
                u = f[name]
                got = [bytes(u._buffer(i)) for i in range(u.buffer_count)]
                assert got == expected[name], name
                assert f.descriptor(name) == tensors[name].descriptor
                start = int(rng.integers(0, 250))
                np.testing.assert_array_equal(
                    f.get_slice("rows", start, start + 6).numpy(), rows[start : start + 6]
                )
                checked += 1
            f.verify()
            return checked

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(work, range(8)))
    assert results == [60] * 8


def test_close_while_threads_read_is_safe(fast_dir):
    path = fast_dir / "mtc.hurray"
    a = np.arange(1024, dtype=np.int64)
    hurray.save(path, {"a": a})
    f = hurray.open(path)

    def work(_):
        outcomes = set()
        for _ in range(200):
            try:
                np.testing.assert_array_equal(f["a"].numpy(), a)
                outcomes.add("read")
            except ValueError:  # closed underneath: a clean error
                outcomes.add("closed")
        return outcomes

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(work, i) for i in range(8)]
        f.close()
        results = [fut.result() for fut in futures]
    assert all(r <= {"read", "closed"} for r in results)


# ------------------------------------------------------- scipy through files


@pytest.mark.parametrize("mmap", MODES)
@pytest.mark.parametrize("fmt", ["coo", "csr", "csc", "bsr"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_scipy_sparse_round_trip_through_a_file(fast_dir, fmt, index_dtype, mmap):
    import scipy.sparse as sp

    rng = np.random.default_rng(11)
    dense = rng.normal(size=(6, 8)) * (rng.random((6, 8)) < 0.3)
    dense[0, 1], dense[5, 7], dense[2, 3] = 1.5, -2.0, 4.0
    m = {"coo": sp.coo_matrix, "csr": sp.csr_matrix, "csc": sp.csc_matrix}.get(
        fmt, lambda x: sp.bsr_matrix(x, blocksize=(2, 4))
    )(dense)
    if fmt == "coo":
        m.row, m.col = m.row.astype(index_dtype), m.col.astype(index_dtype)
    else:
        m.indptr, m.indices = m.indptr.astype(index_dtype), m.indices.astype(index_dtype)
    index = m.row if fmt == "coo" else m.indices  # scipy may narrow the index dtype
    s = hurray.SparseTensor.from_scipy(m)
    assert s.descriptor.layout.format == fmt
    assert s.descriptor.layout.index_dtype == index.dtype.name
    path = fast_dir / f"{fmt}.hurray"
    hurray.save(path, {"direct": m, "tensor": s})
    loaded = hurray.load(path, mmap=mmap)
    for name in ("direct", "tensor"):
        u = loaded[name]
        assert isinstance(u, hurray.SparseTensor)
        assert u.descriptor == s.descriptor
        back = u.to_scipy()
        assert back.format == fmt
        assert back.shape == m.shape
        if fmt == "bsr":
            assert back.blocksize == (2, 4)
        np.testing.assert_array_equal(back.toarray(), dense)
        np.testing.assert_array_equal(u.to_dense(), dense)
        parts = u.parts()
        np.testing.assert_array_equal(parts["values"], m.data)


def test_scipy_sparse_of_other_formats_is_stored_as_csr(fast_dir):
    import scipy.sparse as sp

    m = sp.random(5, 7, density=0.3, format="lil", dtype=np.float32, random_state=3)
    path = fast_dir / "lil.hurray"
    hurray.save(path, {"m": m})
    u = hurray.load(path)["m"]
    assert u.descriptor.layout.format == "csr"
    np.testing.assert_array_equal(u.to_scipy().toarray(), m.toarray())


def test_empty_numpy_array_saves(fast_dir):
    # 16 empty arrays alive at once: their (distinct) pointers are not all
    # 64-aligned, so the bug shows deterministically.
    arrays = {f"e{i}": np.zeros((0, 3), np.float32) for i in range(16)}
    hurray.save(fast_dir / "empty.hurray", arrays)
    loaded = hurray.load(fast_dir / "empty.hurray")
    assert all(t.shape == (0, 3) for t in loaded.values())


def test_empty_scipy_matrix_saves(fast_dir):
    import scipy.sparse as sp

    matrices = {f"e{i}": sp.csr_matrix((4, 5), dtype=np.float32) for i in range(16)}
    hurray.save(fast_dir / "empty.hurray", matrices)
    loaded = hurray.load(fast_dir / "empty.hurray")
    assert all(t.to_scipy().nnz == 0 for t in loaded.values())


def test_membership_in_a_closed_file_raises(tmp_path):
    """'a' in f returned False once f was closed, as if the tensor were not
    there; every other use of a closed file raises."""
    path = tmp_path / "a.hurray"
    hurray.save(path, {"a": np.ones(2)})
    f = hurray.open(path)
    assert "a" in f and "b" not in f and "a\0" not in f
    f.close()
    with pytest.raises(ValueError, match="closed"):
        "a" in f


def test_get_slice_takes_row_numbers_from_zero(tmp_path):
    path = tmp_path / "a.hurray"
    hurray.save(path, {"a": np.arange(10.0)})
    with hurray.open(path) as f:
        assert f.get_slice("a", np.int64(2), 4).numpy().tolist() == [2.0, 3.0]
        with pytest.raises(IndexError, match="count from 0"):
            f.get_slice("a", -1, 10)  # was OverflowError
        with pytest.raises(TypeError):
            f.get_slice("a", None, 2)  # was "unsupported operand type(s) for -"


def _unreadable_files(folder):
    """(name, path, status) of files whose checksums all match but whose
    tensor "w" no read hands out: a stored buffer in sync mode "stream", a
    descriptor of encoding version 2, CSR index pointers starting at 1, a
    page table entry outside the pool."""
    from _file_edits import descriptor_at, reseal, rewrite_buffer

    def saved(name, tensor):
        path = folder / f"{name}.hurray"
        hurray.save(path, {"a": np.arange(3.0), "w": tensor})
        return path, bytearray(path.read_bytes())

    out = []
    dense = hurray.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    path, blob = saved("stream", dense)
    start, length = descriptor_at(blob, "w")
    d = dense.descriptor
    streamed = Descriptor(d.dtype, d.shape, buffers=[Buffer("data", 24, 64, "stream")])
    assert len(streamed.encode()) == length
    blob[start : start + length] = streamed.encode()
    reseal(blob)
    out.append(("stream", path, blob, "HURRAY_ERR_SYNC_MODE_MISMATCH"))
    path, blob = saved("version2", dense)
    start, _ = descriptor_at(blob, "w")
    blob[start + 4 : start + 6] = (2).to_bytes(2, "little")
    reseal(blob)
    out.append(("version2", path, blob, "HURRAY_ERR_UNSUPPORTED"))
    path, blob = saved("indptr", build("sparse_csr")[0])
    rewrite_buffer(blob, "w", 1, np.array([1, 2, 3, 5], np.int32).tobytes())
    out.append(("indptr", path, blob, "HURRAY_ERR_SPARSE_INDPTR"))
    d, arrays = SAMPLES["paged_kv_cache"]()
    path, blob = saved("paged", hurray.Tensor(d, arrays))
    rewrite_buffer(blob, "w", 1, np.array([[5, 0, 3], [7, 2, 8]], np.int32).tobytes())
    out.append(("paged", path, blob, "HURRAY_ERR_PAGE_TABLE_ENTRY"))
    for _, path, blob, _ in out:
        path.write_bytes(bytes(blob))
    return [(name, path, status) for name, path, _, status in out]


@pytest.mark.parametrize("mode", ["mmap", "pread", "private"])
def test_verify_fails_where_reading_the_tensor_fails(fast_dir, mode):
    """verify said OK for these files: their checksums match, and it did not
    decode the descriptors or validate placement, the steps every read
    takes (file-format.md 10.3). It now fails as the read does, in every
    mode, and the CLI too."""
    kw = {"mmap": dict(), "pread": dict(mmap=False), "private": dict(readonly=False)}[mode]
    for name, path, status in _unreadable_files(fast_dir):
        with hurray.open(path, **kw) as f:
            f.verify("a")
            with pytest.raises(hurray.HurrayError) as read:
                f.get("w")
            assert read.value.status_name == status, name
            for args in ((), ("w",)):
                with pytest.raises(hurray.HurrayError) as checked:
                    f.verify(*args)
                assert checked.value.status_name == status, name
                assert 'tensor "w"' in str(checked.value), name
        with pytest.raises(hurray.HurrayError) as opened:
            hurray.open(path, verify=True, **kw)
        assert opened.value.status_name == status, name
        if mode == "mmap":
            cli = subprocess.run(
                [sys.executable, "-m", "hurray", "verify", str(path)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert cli.returncode == 1 and 'tensor "w"' in cli.stderr, (name, cli)


@pytest.mark.parametrize("threads", ["1", "2", "4"])
def test_verify_of_many_tensors_names_the_first_unreadable_one(fast_dir, monkeypatch, threads):
    """verify checks the descriptors and placement of a file of thousands of
    tensors on several threads; whichever thread finds a fault, the error
    names the first unreadable tensor in index order, as one thread would."""
    from _file_edits import descriptor_at, reseal

    monkeypatch.setenv("HURRAY_HASH_THREADS", threads)
    path = fast_dir / "many.hurray"
    names = [f"t{i:05d}" for i in range(4000)]
    hurray.save(path, {n: np.full((2, 3), i, np.float32) for i, n in enumerate(names)})
    clean = bytearray(path.read_bytes())
    d = hurray.open(path).get(names[0]).descriptor
    streamed = Descriptor(d.dtype, d.shape, buffers=[Buffer("data", 24, 64, "stream")]).encode()

    def broken(*which):
        blob = bytearray(clean)
        for n in which:
            start, length = descriptor_at(blob, n)
            assert len(streamed) == length
            blob[start : start + length] = streamed
        reseal(blob)
        path.write_bytes(bytes(blob))

    for which, named in (
        (("t03500", "t01500"), "t01500"),
        (("t03999",), "t03999"),
        (("t00000", "t02001"), "t00000"),
    ):
        broken(*which)
        with hurray.open(path) as f:
            with pytest.raises(hurray.HurrayError) as checked:
                f.verify()
        assert checked.value.status_name == "HURRAY_ERR_SYNC_MODE_MISMATCH"
        assert f'tensor "{named}"' in str(checked.value), which
    path.write_bytes(bytes(clean))
    with hurray.open(path) as f:
        f.verify()


@pytest.mark.parametrize("target", [True, False])
def test_save_to_a_bool_is_a_type_error_not_a_file_descriptor(target):
    """bool is an int: save(True, ...) wrote the file to stdout (fd 1), and
    save(False, ...) to fd 0. A child runs it, its stdout a pipe."""
    code = (
        "import hurray, numpy as np\n"
        f"try:\n    hurray.save({target!r}, {{'a': np.ones(2)}})\n"
        "except TypeError as e:\n    print('TypeError', e)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert r.stdout == b"TypeError save() needs a path, a file descriptor or a writable stream\n"


def test_repr_counts_tensors_in_words(tmp_path):
    """A file of one tensor was shown as "(1 tensors)"."""
    path = tmp_path / "a.hurray"
    hurray.save(path, {"a": np.zeros(2)})
    f = hurray.open(path)
    assert repr(f).endswith("(1 tensor)>")
    f.close()
    assert repr(f).endswith("(closed)>")
    hurray.save(path, {"a": np.zeros(2), "b": np.zeros(2)})
    with hurray.open(path) as f:
        assert repr(f).endswith("(2 tensors)>")
