"""The spec is complete enough to read hurray files: tests/spec_reader/
check_files.py, a reader written from docs/spec alone, reads what the
library writes, byte for byte, and gives damaged files the library's
verdict and error code."""

import hashlib
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import hurray

xxhash = pytest.importorskip("xxhash")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spec_reader"))
import check_files  # noqa: E402

xxh3 = xxhash.xxh3_64_intdigest
TRAILER_MAGIC = b"HRYEND\x1a\n"


def _written(folder):
    """({name: path} of files the library writes, one feature or more each;
    {name: {tensor: the array the writer was given}} for some of them)."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    made = {}

    def save(name, tensors, **kw):
        made[name] = folder / f"{name}.hurray"
        hurray.save(made[name], tensors, **kw)

    save("empty", {})
    save("metadata", {"x": np.ones(3)}, metadata={"s": "héllo", "i": -5, "f": 0.5, "b": True})
    save("scalars", {"x": np.array(3.5, np.float32), "y": np.array(7, np.int64)})
    save("empty_shapes", {"a": np.zeros(0, np.float32), "b": np.zeros((3, 0, 2), np.int16)})
    plain = {
        n: (rng.standard_normal((5, 7)) * 10).astype(n)
        for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
        + ("float16", "float32", "float64", "complex64", "complex128")
    }
    plain["bool"] = rng.integers(0, 2, (5, 7)).astype(bool)
    for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"):
        plain[n] = rng.standard_normal((3, 5)).astype(getattr(ml_dtypes, n))
    save("dtypes", plain)
    save(
        "chunked",  # buffers past one chunk (4 MiB) carry chunk checksums (format 1.1)
        {
            "big": rng.standard_normal((5 << 18) + 123).astype(np.float32),
            "exactly_one_chunk": np.ones(4 << 20, np.uint8),
            "small": np.arange(10, dtype=np.int32),
        },
    )
    save("many", {f"t{i}": np.full(i % 5, i, np.int32) for i in range(3000)})
    save("unicode", {"Ünïcødé": np.arange(3.0), "日本語": np.ones(2, np.int8), "😀": np.zeros(1)})
    w = rng.standard_normal((64, 96)).astype(np.float32)
    save("quantized", {s: hurray.quantize(w, s) for s in hurray.QUANT_SCHEMES})
    save("statistics", {"x": w, "n": np.array([np.nan, 0, 1], np.float32)}, statistics=True)
    save("strided", {"t": w.T, "s": w[::2, ::3]})
    try:
        import scipy.sparse
    except ImportError:  # the dependency floors run without scipy
        pass
    else:
        m = scipy.sparse.random(50, 60, density=0.1, format="csr", dtype=np.float32, random_state=1)
        save(
            "sparse",
            {
                "csr": hurray.SparseTensor.from_scipy(m),
                "csc": hurray.SparseTensor.from_scipy(m.tocsc()),
                "coo": hurray.SparseTensor.from_scipy(m.tocoo()),
                "bsr": hurray.SparseTensor.from_scipy(m.tobsr(blocksize=(5, 6))),
            },
        )
    pool = np.arange(24, dtype=np.float32)
    table = np.array([[0, 1], [3, 2]], np.int32)
    paged = hurray.Descriptor(
        "float32",
        (2, 4, 3),
        layout=hurray.Paged(
            axis=1, page_size=2, num_pages=4, pool_buffer=0, table_buffer=1, table_dtype="int32"
        ),
        buffers=[
            hurray.Buffer("page_pool", pool.nbytes),
            hurray.Buffer("page_table", table.nbytes),
        ],
    )
    one = np.zeros(4096 + 100, np.uint8)
    aligned = one[(-one.ctypes.data) % 4096 :][:100]
    save(
        "layouts",
        {
            "paged": hurray.Tensor(paged, [pool, table]),
            "aligned": hurray.Tensor(
                hurray.Descriptor(
                    "uint8", (100,), buffers=[hurray.Buffer("data", 100, alignment=4096)]
                ),
                [aligned],
            ),
            "piece": hurray.shard(
                hurray.from_numpy(np.ones((8, 4), np.float32)), global_shape=(16, 4), offsets=(8, 0)
            ),
        },
    )
    for i, part in enumerate(hurray.save_sharded(folder / "sharded", {"w": w, "b": np.ones(9)}, 2)):
        made[f"part{i}"] = Path(part)
    made["stream"] = folder / "stream.hurray"
    with open(made["stream"], "wb") as f:
        hurray.save(f, {"x": np.arange(5, dtype=np.int16)})
    return made, {"dtypes": plain}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return _written(tmp_path_factory.mktemp("spec-reader"))


def test_the_spec_reader_reads_every_file_the_library_writes(written):
    written, given = written
    for name, path in written.items():
        summary, reader = check_files.check_file(str(path), want_data=True)
        try:
            assert summary["ok"], (name, summary)
            loaded = hurray.load(path)
            assert set(summary["tensors"]) == set(loaded), name
            compared = 0
            for tensor, info in summary["tensors"].items():
                if "_bytes" in info:
                    start, length = info["_bytes"]
                    mine = bytes(reader.m[start : start + length])
                    theirs = np.ascontiguousarray(np.asarray(loaded[tensor])).tobytes()
                    assert mine == theirs, (name, tensor)
                    if tensor in given.get(name, {}):  # what the writer was given
                        assert mine == np.ascontiguousarray(given[name][tensor]).tobytes()
                    compared += 1
            assert compared or not loaded or name in ("quantized", "sparse", "layouts"), name
            with hurray.open(path) as f:
                assert set(summary["metadata"]) == set(f.metadata), name
            _assert_least_padding(reader, summary, name)
        finally:
            reader.close()


def _assert_least_padding(reader, summary, name):
    """file-format.md section 4: buffers in file order, each at the first
    offset its alignment allows after the previous one, zero padding, and
    the index at the next multiple of 8."""
    placed = sorted(
        (b["offset"], b["length"], b["alignment"])
        for t in summary["tensors"].values()
        for b in t["buffers"]
    )
    at = 64
    for offset, length, alignment in placed:
        step = max(64, alignment)
        assert offset == -(-at // step) * step, (name, offset, at)
        assert not any(reader.m[at:offset]), (name, at, offset)
        at = max(at, offset + length)
    assert reader.index_offset == -(-at // 8) * 8, name


# ------------------------------------------------------------ damaged files


def _parts(path):
    """(data region, entries, metadata) of a file, through the spec reader."""
    r = check_files.Reader(str(path))
    try:
        r.read_structure()
        r.parse_index()
        entries = [[bytes(n), bytes(d), [list(x) for x in recs]] for n, d, recs in r.tensors]
        metadata = [[bytes(k), t, bytes(v)] for k, t, v in r.metadata]
        return bytes(r.m[: r.index_offset]), entries, metadata
    finally:
        r.close()


def _rebuild(data, entries, metadata, *, minor=1, flags=0, extra=b""):
    """A file of `data` with an index and trailer written as file-format.md
    sections 5 and 6 say, checksums recomputed."""
    index = b""
    for name, descriptor, records in entries:
        index += struct.pack("<H", len(name)) + name
        index += struct.pack("<I", len(descriptor)) + descriptor
        index += struct.pack("<I", len(records))
        index += b"".join(struct.pack("<QQQ", *r) for r in records)
    for key, kind, value in metadata:
        index += struct.pack("<H", len(key)) + key + struct.pack("<BI", kind, len(value)) + value
    index += extra
    data += b"\0" * (-len(data) % 8)
    trailer = struct.pack(
        "<QQQQQHHI",
        len(data),
        len(index),
        xxh3(index),
        len(entries),
        len(metadata),
        1,
        minor,
        flags,
    )
    return data + index + trailer + struct.pack("<Q", xxh3(trailer)) + TRAILER_MAGIC


def _flip(blob, at, bit=1):
    b = bytearray(blob)
    b[at] ^= bit
    return bytes(b)


def _damaged(written):
    """(case, bytes, the error code the spec gives)."""
    raw = written["metadata"].read_bytes()
    data, entries, metadata = _parts(written["metadata"])
    index_at = len(data) + (-len(data) % 8)
    first = entries[0]

    def entry(name=None, records=None, descriptor=None):
        return [
            name if name is not None else first[0],
            descriptor if descriptor is not None else first[1],
            records if records is not None else [list(r) for r in first[2]],
        ]

    def record(field, delta):
        records = [list(r) for r in first[2]]
        records[0][field] += delta
        return [entry(records=records)]

    cases = [
        ("magic", _flip(raw, 1), "BAD_MAGIC"),
        ("reserved header byte", _flip(raw, 20), "MALFORMED"),
        ("major version 3", _flip(raw, 8, 2), "UNSUPPORTED"),
        ("index byte", _flip(raw, index_at + 5), "CHECKSUM"),
        ("buffer byte", _flip(raw, first[2][0][0] + 3), "CHECKSUM"),
        ("trailer checksum", _flip(raw, len(raw) - 16), "CHECKSUM"),
        ("trailer magic", _flip(raw, len(raw) - 3), "TRUNCATED"),
        ("one byte short", raw[:-1], "TRUNCATED"),
        ("one byte long", raw + b"\0", "TRUNCATED"),
        ("under 128 bytes", raw[:100], "TRUNCATED"),
        ("rebuilt as is", _rebuild(data, entries, metadata), "OK"),
        ("minor version 0", _rebuild(data, entries, metadata, minor=0), "MALFORMED"),
        ("trailer flags", _rebuild(data, entries, metadata, flags=1), "MALFORMED"),
        ("bytes after the index", _rebuild(data, entries, metadata, extra=b"\0"), "MALFORMED"),
        ("record checksum", _rebuild(data, record(2, 1), metadata), "CHECKSUM"),
        ("offset off 64", _rebuild(data, record(0, 8), metadata), "BUFFER_ALIGNMENT"),
        ("offset in the header", _rebuild(data, record(0, -first[2][0][0]), metadata), "RANGE"),
        ("length", _rebuild(data, record(1, 1), metadata), "RANGE"),
        ("empty name", _rebuild(data, [entry(name=b"")], metadata), "MALFORMED"),
        ("name not UTF-8", _rebuild(data, [entry(name=b"\xff")], metadata), "MALFORMED"),
        ("name with NUL", _rebuild(data, [entry(name=b"a\0b")], metadata), "MALFORMED"),
        ("name of 4097 bytes", _rebuild(data, [entry(name=b"x" * 4097)], metadata), "LIMIT"),
        ("name of 4096 bytes", _rebuild(data, [entry(name=b"x" * 4096)], metadata), "OK"),
        ("shared buffer", _rebuild(data, [entry(b"a"), entry(b"b")], metadata), "OVERLAP"),
        ("names out of order", _rebuild(data, [entry(b"b"), entry(b"a")], metadata), "MALFORMED"),
        ("name twice", _rebuild(data, [entry(b"a"), entry(b"a")], metadata), "DUPLICATE_NAME"),
        (
            "descriptor version 2",
            _rebuild(data, [entry(descriptor=first[1][:4] + b"\2\0" + first[1][6:])], metadata),
            "UNSUPPORTED",
        ),  # fmt: skip
        (
            "descriptor cut short",
            _rebuild(data, [entry(descriptor=first[1][:-1])], metadata),
            "TRUNCATED",
        ),  # fmt: skip
        (
            "unknown odd descriptor tag",
            _rebuild(data, [entry(descriptor=first[1] + struct.pack("<HI", 0x5F, 0))], metadata),
            "UNSUPPORTED",
        ),  # fmt: skip
        (
            "unknown even descriptor tag",
            _rebuild(
                data, [entry(descriptor=first[1] + struct.pack("<HI", 0x5E, 3) + b"abc")], metadata
            ),
            "OK",
        ),  # fmt: skip
    ]

    def with_metadata(key, kind, value):
        return sorted(metadata + [[key, kind, value]], key=lambda m: m[0])

    # The buffer table of a one-buffer descriptor (descriptor-encoding.md):
    # tag 0x41, payload of a u32 count and one 16-byte entry whose bytes 4-7
    # are the alignment.
    table_at = first[1].index(struct.pack("<HII", 0x41, 20, 1)) + 10
    at_4096 = bytearray(first[1])
    at_4096[table_at + 4 : table_at + 8] = struct.pack("<I", 4096)
    assert first[2][0][0] % 4096, "the first buffer must not sit at a multiple of 4096"
    cases += [
        (
            "alignment 4096 at an offset of 64",
            _rebuild(data, [entry(descriptor=bytes(at_4096))], metadata),
            "BUFFER_ALIGNMENT",
        ),  # fmt: skip
    ]
    cases += [
        ("bool of 2", _rebuild(data, entries, with_metadata(b"zz", 4, b"\2")), "MALFORMED"),
        (
            "int of 7 bytes",
            _rebuild(data, entries, with_metadata(b"zz", 2, b"\0" * 7)),
            "MALFORMED",
        ),
        (
            "string not UTF-8",
            _rebuild(data, entries, with_metadata(b"zz", 1, b"\xff")),
            "MALFORMED",
        ),
        ("unknown type", _rebuild(data, entries, with_metadata(b"zz", 77, b"xyz")), "OK"),
        (
            "key twice",
            _rebuild(data, entries, with_metadata(metadata[0][0], 1, b"x")),
            "DUPLICATE_NAME",
        ),  # fmt: skip
        (
            "key equal to a tensor name",
            _rebuild(data, entries, with_metadata(first[0], 1, b"v")),
            "OK",
        ),  # fmt: skip
    ]
    big = written["chunked"].read_bytes()
    data, entries, metadata = _parts(written["chunked"])
    at = next(i for i, m in enumerate(metadata) if m[1] == 6)
    table = metadata[at][2]

    def with_table(value):
        return [m if i != at else [m[0], 6, value] for i, m in enumerate(metadata)]

    big_record = next(e for e in entries if e[0] == b"big")[2][0]
    cases += [
        ("chunked buffer byte", _flip(big, big_record[0] + (5 << 20)), "CHECKSUM"),
        ("chunk checksum", _rebuild(data, entries, with_table(_flip(table, 9))), "CHECKSUM"),
        ("chunk count", _rebuild(data, entries, with_table(table[:-8])), "MALFORMED"),
        ("chunk table gone", _rebuild(data, entries, metadata[:at] + metadata[at + 1 :]), "OK"),
    ]
    return cases


def test_damaged_files_get_the_verdict_the_spec_gives(written, tmp_path):
    for case, blob, code in _damaged(written[0]):
        path = tmp_path / f"{hashlib.sha1(case.encode()).hexdigest()[:12]}.hurray"
        path.write_bytes(blob)
        summary, reader = check_files.check_file(str(path), want_data=True)
        reader.close()
        mine = "OK" if summary["ok"] else summary["code"]
        try:
            with hurray.open(path, verify=True):
                pass
            hurray.load(path)
            library = "OK"
        except hurray.HurrayError as e:
            library = e.status_name.removeprefix("HURRAY_ERR_")
        assert (mine, library) == (code, code), (case, summary.get("error"))
