"""Sharded tensors: shard(), save_sharded() and load_sharded()."""

import itertools
import json
import math
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hurray


def _matrix(rows=8, cols=5, dtype=np.float32):
    return np.arange(rows * cols, dtype=dtype).reshape(rows, cols)


def _status(excinfo, name):
    assert excinfo.value.status_name == name, str(excinfo.value)
    assert excinfo.value.args[0].startswith(name + ":")  # args: KeyError's str() quotes


# ------------------------------------------------------------------ shard()


def test_shard_is_zero_copy_and_survives_save(tmp_path):
    a = _matrix()
    piece = a[2:4]
    t = hurray.shard(piece, (8, 5), (2, 0))
    assert isinstance(t, hurray.Tensor)
    assert t.descriptor.shard == hurray.Shard((8, 5), (2, 0))
    assert np.shares_memory(t.numpy(), a)
    t.numpy()[0, 0] = -1  # the same bytes, not a copy
    assert a[2, 0] == -1

    path = tmp_path / "piece.hurray"
    hurray.save(path, {"w": t})
    with hurray.open(path) as f:
        assert f.descriptor("w").shard == hurray.Shard((8, 5), (2, 0))
        np.testing.assert_array_equal(f["w"].numpy(), piece)


def test_shard_of_a_tensor_shares_its_buffers():
    t = hurray.from_numpy(_matrix())
    s = hurray.shard(t, (16, 5), (8, 0))
    assert [bytes(b) for b in s.buffers] == [bytes(b) for b in t.buffers]
    assert np.shares_memory(s.numpy(), t.numpy())
    assert t.descriptor.shard is None  # the original is untouched


def test_shard_of_sparse_tensor_stays_sparse():
    sp = hurray.SparseTensor.from_arrays(
        "csr",
        (2, 3),
        np.array([1.0, 2.0], np.float32),
        indptr=np.array([0, 1, 2], np.int32),
        indices=np.array([0, 2], np.int32),
    )
    s = hurray.shard(sp, (4, 3), (2, 0))
    assert isinstance(s, hurray.SparseTensor)
    assert s.descriptor.shard == hurray.Shard((4, 3), (2, 0))


def test_shard_with_wrong_rank_is_rejected():
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.shard(_matrix(), (8,), (0,))
    _status(excinfo, "HURRAY_ERR_SHARD_RANK")
    assert excinfo.value.status == 50


def test_shard_out_of_bounds_is_rejected():
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.shard(_matrix(2, 5), (8, 5), (7, 0))
    _status(excinfo, "HURRAY_ERR_SHARD_BOUNDS")
    assert excinfo.value.status == 51
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.shard(_matrix(2, 5), (8, 4), (0, 0))
    _status(excinfo, "HURRAY_ERR_SHARD_BOUNDS")


def test_shard_with_offsets_of_another_length_is_refused():
    with pytest.raises(ValueError):
        hurray.shard(_matrix(), (8, 5), (0,))


# ---------------------------------------------------- save and load sharded


def test_four_pieces_read_back_as_one_and_as_two(tmp_path):
    w, b = _matrix(10, 6), np.arange(7, dtype=np.int64)
    four = hurray.save_sharded(tmp_path / "four", {"w": w, "b": b}, 4, metadata={"step": 3})
    assert [os.path.basename(p) for p in four] == [
        f"part-{k:05d}-of-00004.hurray" for k in range(4)
    ]
    with hurray.open(four[1]) as f:
        assert f.metadata.keys() == {"step", "hurray.save_sharded.save"} and f.metadata["step"] == 3
        assert f.descriptor("w").shard == hurray.Shard((10, 6), (3, 0))  # 3, 3, 2, 2 rows
        assert f.descriptor("b").shard == hurray.Shard((7,), (2,))

    # As 1: the global arrays.
    whole = hurray.load_sharded(tmp_path / "four")
    assert set(whole) == {"w", "b"}
    np.testing.assert_array_equal(whole["w"], w)
    np.testing.assert_array_equal(whole["b"], b)
    np.testing.assert_array_equal(hurray.load_sharded(four, "w"), w)

    # Re-sharded as 2, read back.
    two = hurray.save_sharded(tmp_path / "two", whole, 2)
    assert len(two) == 2
    with hurray.open(two[1]) as f:
        assert f.descriptor("w").shard == hurray.Shard((10, 6), (5, 0))
        assert f.descriptor("w").shape == (5, 6)
    again = hurray.load_sharded(tmp_path / "two")
    np.testing.assert_array_equal(again["w"], w)
    np.testing.assert_array_equal(again["b"], b)

    # And as 1 file holding the whole tensor as a single piece.
    one = hurray.save_sharded(tmp_path / "one", again, 1)
    with hurray.open(one[0]) as f:
        assert f.descriptor("w").shard == hurray.Shard((10, 6), (0, 0))
    np.testing.assert_array_equal(hurray.load_sharded(one, "w"), w)


def test_pieces_along_another_axis(tmp_path):
    w = _matrix(4, 9, np.int16)
    paths = hurray.save_sharded(tmp_path, {"w": w}, 3, axis=-1)
    with hurray.open(paths[2]) as f:
        assert f.descriptor("w").shard == hurray.Shard((4, 9), (0, 6))
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w)
    np.testing.assert_array_equal(
        hurray.load_sharded(tmp_path, "w", index=(slice(1, 3), slice(2, 8))), w[1:3, 2:8]
    )


def test_pieces_of_a_piece_keep_the_global_shape(tmp_path):
    w = _matrix(8, 4)
    piece = hurray.shard(w[4:8], (8, 4), (4, 0))
    hurray.save_sharded(tmp_path / "b", {"w": piece}, 2)
    hurray.save(tmp_path / "b" / "first.hurray", {"w": hurray.shard(w[:4], (8, 4), (0, 0))})
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path / "b", "w"), w)


def test_more_parts_than_rows_gives_empty_pieces(tmp_path):
    w = _matrix(2, 3)
    paths = hurray.save_sharded(tmp_path, {"w": w}, 5)
    with hurray.open(paths[4]) as f:
        assert f.descriptor("w").shape == (0, 3)
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w)


def test_sub_byte_and_bfloat16_pieces(tmp_path):
    import ml_dtypes

    q = np.arange(-8, 8, dtype=np.int8).reshape(4, 4).astype(ml_dtypes.int4)
    h = _matrix(3, 4).astype(ml_dtypes.bfloat16)
    hurray.save_sharded(tmp_path, {"q": q, "h": h}, 2)
    out = hurray.load_sharded(tmp_path)
    assert out["q"].dtype == q.dtype and out["h"].dtype == h.dtype
    np.testing.assert_array_equal(out["q"].astype(np.int8), q.astype(np.int8))
    np.testing.assert_array_equal(out["h"], h)
    np.testing.assert_array_equal(
        hurray.load_sharded(tmp_path, "q", index=(slice(1, 4),)).astype(np.int8),
        q[1:4].astype(np.int8),
    )


def test_unsharded_tensors_are_left_out(tmp_path):
    hurray.save_sharded(tmp_path, {"w": _matrix()}, 2)
    hurray.save(tmp_path / "extra.hurray", {"step": np.array(7)})
    assert set(hurray.load_sharded(tmp_path)) == {"w"}
    with pytest.raises(hurray.NotFoundError) as excinfo:
        hurray.load_sharded(tmp_path, "step")
    _status(excinfo, "HURRAY_ERR_NOT_FOUND")
    with pytest.raises(KeyError):
        hurray.load_sharded(tmp_path, "missing")


def test_whole_and_sharded_copies_of_one_name_conflict(tmp_path):
    hurray.save_sharded(tmp_path, {"w": _matrix()}, 2)
    hurray.save(tmp_path / "whole.hurray", {"w": _matrix()})
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    _status(excinfo, "HURRAY_ERR_SHARD_BOUNDS")
    assert "whole.hurray" in str(excinfo.value)


def test_empty_directory(tmp_path):
    with pytest.raises(hurray.NotFoundError):
        hurray.load_sharded(tmp_path)


# ------------------------------------------------------------ partial reads


@pytest.fixture
def fetches(monkeypatch):
    """Records (file, method, name) for every tensor fetched from a File."""
    seen = []
    getitem, get_slice = hurray.File.__getitem__, hurray.File.get_slice

    def recording_getitem(self, name):
        seen.append((os.path.basename(self.path), "getitem", name))
        return getitem(self, name)

    def recording_get_slice(self, name, start, stop):
        seen.append((os.path.basename(self.path), "get_slice", name, start, stop))
        return get_slice(self, name, start, stop)

    monkeypatch.setattr(hurray.File, "__getitem__", recording_getitem)
    monkeypatch.setattr(hurray.File, "get_slice", recording_get_slice)
    return seen


@pytest.mark.parametrize("mmap", [True, False])
def test_region_fetches_only_the_pieces_it_touches(tmp_path, fetches, mmap):
    w = _matrix(8, 5)
    hurray.save_sharded(tmp_path, {"w": w, "other": w + 1}, 4)  # 2 rows per part

    out = hurray.load_sharded(tmp_path, "w", index=(slice(2, 6), slice(1, 4)), mmap=mmap)
    np.testing.assert_array_equal(out, w[2:6, 1:4])
    assert fetches == [
        ("part-00001-of-00004.hurray", "getitem", "w"),
        ("part-00002-of-00004.hurray", "getitem", "w"),
    ]

    # Rows inside a piece: only those rows are read.
    fetches.clear()
    out = hurray.load_sharded(tmp_path, "w", index=(slice(3, 5),), mmap=mmap)
    np.testing.assert_array_equal(out, w[3:5])
    assert fetches == [
        ("part-00001-of-00004.hurray", "get_slice", "w", 1, 2),
        ("part-00002-of-00004.hurray", "get_slice", "w", 0, 1),
    ]

    # An integer index drops its axis; one piece is enough.
    fetches.clear()
    np.testing.assert_array_equal(
        hurray.load_sharded(tmp_path, "w", index=(-1, slice(None)), mmap=mmap), w[-1]
    )
    assert [f[0] for f in fetches] == ["part-00003-of-00004.hurray"]

    # An empty region fetches nothing.
    fetches.clear()
    assert hurray.load_sharded(tmp_path, "w", index=(slice(4, 4),)).shape == (0, 5)
    assert fetches == []


def test_one_file_open_at_a_time(tmp_path, monkeypatch):
    """Descriptors are read file by file, and only files with needed pieces
    are opened a second time, so a checkpoint of many parts needs one
    descriptor and one mapping at a time."""
    w = _matrix(12, 3)
    hurray.save_sharded(tmp_path, {"w": w}, 6)
    opened, live = [], [0, 0]  # (now, most)
    init, close = hurray.File.__init__, hurray.File.close

    def counting_init(self, path, **kwargs):
        init(self, path, **kwargs)
        opened.append(os.path.basename(self.path))
        live[0] += 1
        live[1] = max(live)

    def counting_close(self):
        if not self.closed:
            live[0] -= 1
        close(self)

    monkeypatch.setattr(hurray.File, "__init__", counting_init)
    monkeypatch.setattr(hurray.File, "close", counting_close)
    out = hurray.load_sharded(tmp_path, "w", index=(slice(4, 6),))
    np.testing.assert_array_equal(out, w[4:6])
    names = [f"part-{k:05d}-of-00006.hurray" for k in range(6)]
    assert opened == names + [names[2]]
    assert live == [0, 1]


def test_region_leaves_other_files_data_unread(tmp_path):
    """Stronger than counting calls: the data of pieces outside the region
    is overwritten on disk, and the region still reads back right."""
    w = _matrix(8, 5)
    paths = hurray.save_sharded(tmp_path, {"w": w}, 4)
    with hurray.open(paths[0]) as f:
        raw = bytes(f["w"].buffers[0])
    blob = bytearray(open(paths[0], "rb").read())
    at = blob.find(raw)
    assert at >= 0
    blob[at : at + len(raw)] = b"\xff" * len(raw)
    with open(paths[0], "wb") as out:
        out.write(blob)
    np.testing.assert_array_equal(
        hurray.load_sharded(tmp_path, "w", index=(slice(2, 8),), mmap=False), w[2:]
    )
    assert not np.array_equal(hurray.load_sharded(tmp_path, "w", mmap=False), w)


def test_bad_index(tmp_path):
    hurray.save_sharded(tmp_path, {"w": _matrix()}, 2)
    with pytest.raises(ValueError):
        hurray.load_sharded(tmp_path, "w", index=(slice(0, 8, 2),))
    with pytest.raises(IndexError):
        hurray.load_sharded(tmp_path, "w", index=(0, 0, 0))
    with pytest.raises(IndexError):
        hurray.load_sharded(tmp_path, "w", index=(8,))
    with pytest.raises(TypeError):
        hurray.load_sharded(tmp_path, "w", index=([0, 1],))


# ------------------------------------------------------------ broken tilings


def test_missing_part_is_a_gap(tmp_path):
    paths = hurray.save_sharded(tmp_path, {"w": _matrix(8, 5)}, 4)
    os.remove(paths[2])
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    _status(excinfo, "HURRAY_ERR_SHARD_BOUNDS")
    assert excinfo.value.status == 51
    message = str(excinfo.value)
    assert "[4:6, 0:5]" in message and "10 of the 40 elements" in message
    assert "part-00001-of-00004.hurray" in message
    # A region the gap does not touch is refused too: the tiling is checked whole.
    with pytest.raises(hurray.ValidationError):
        hurray.load_sharded(tmp_path, "w", index=(slice(0, 2),))


def test_overlapping_pieces(tmp_path):
    w = _matrix(8, 5)
    hurray.save_sharded(tmp_path, {"w": w}, 4)
    hurray.save(tmp_path / "stray.hurray", {"w": hurray.shard(w[3:5], (8, 5), (3, 0))})
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    _status(excinfo, "HURRAY_ERR_SHARD_BOUNDS")
    message = str(excinfo.value)
    assert "overlap" in message and "stray.hurray" in message
    assert "part-00001-of-00004.hurray" in message and "[3:4, 0:5]" in message


def test_overlap_in_the_other_axis(tmp_path):
    w = _matrix(4, 6)
    hurray.save(tmp_path / "a.hurray", {"w": hurray.shard(w[:, :4], (4, 6), (0, 0))})
    hurray.save(tmp_path / "b.hurray", {"w": hurray.shard(w[:, 2:], (4, 6), (0, 2))})
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    assert "[0:4, 2:4]" in str(excinfo.value)


def test_overlap_with_equal_volume_is_not_mistaken_for_a_tiling(tmp_path):
    """Two pieces on the same rows and none on others: the volumes add up."""
    w = _matrix(4, 5)
    hurray.save(tmp_path / "a.hurray", {"w": hurray.shard(w[:2], (4, 5), (0, 0))})
    hurray.save(tmp_path / "b.hurray", {"w": hurray.shard(w[:2], (4, 5), (0, 0))})
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    assert "overlap" in str(excinfo.value)


def test_disagreeing_global_shapes(tmp_path):
    w = _matrix(8, 5)
    hurray.save(tmp_path / "a.hurray", {"w": hurray.shard(w[:4], (8, 5), (0, 0))})
    hurray.save(tmp_path / "b.hurray", {"w": hurray.shard(w[4:], (9, 5), (4, 0))})
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    _status(excinfo, "HURRAY_ERR_SHARD_BOUNDS")
    message = str(excinfo.value)
    assert "global shape" in message and "(8, 5)" in message and "(9, 5)" in message

    hurray.save(tmp_path / "b.hurray", {"w": hurray.shard(w[4:].reshape(-1), (40,), (20,))})
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    _status(excinfo, "HURRAY_ERR_SHARD_RANK")


def test_disagreeing_dtypes(tmp_path):
    w = _matrix(8, 5)
    hurray.save(tmp_path / "a.hurray", {"w": hurray.shard(w[:4], (8, 5), (0, 0))})
    hurray.save(
        tmp_path / "b.hurray", {"w": hurray.shard(w[4:].astype(np.float64), (8, 5), (4, 0))}
    )
    with pytest.raises(hurray.ValidationError) as excinfo:
        hurray.load_sharded(tmp_path, "w")
    _status(excinfo, "HURRAY_ERR_DTYPE")


def test_quantized_and_sparse_pieces_are_unsupported(tmp_path):
    codes = hurray.from_numpy(np.arange(10, dtype=np.int8).reshape(2, 5))
    quantized = hurray.Tensor(
        codes.descriptor.replace(quantization=hurray.PerTensorAffine(0.5)), list(codes.buffers)
    )
    hurray.save(tmp_path / "q.hurray", {"w": hurray.shard(quantized, (2, 5), (0, 0))})
    with pytest.raises(hurray.UnsupportedError) as excinfo:
        hurray.load_sharded(tmp_path / "q.hurray", "w")
    _status(excinfo, "HURRAY_ERR_UNSUPPORTED")
    assert "quantized" in str(excinfo.value)

    sp = hurray.SparseTensor.from_arrays(
        "csr",
        (2, 5),
        np.array([1.0], np.float32),
        indptr=np.array([0, 1, 1], np.int32),
        indices=np.array([3], np.int32),
    )
    hurray.save(tmp_path / "s.hurray", {"w": hurray.shard(sp, (2, 5), (0, 0))})
    with pytest.raises(hurray.UnsupportedError) as excinfo:
        hurray.load_sharded([tmp_path / "s.hurray"], "w")
    assert "sparse" in str(excinfo.value)
    with pytest.raises(hurray.UnsupportedError):
        hurray.save_sharded(tmp_path / "out", {"w": sp}, 2)


def test_save_sharded_arguments(tmp_path):
    with pytest.raises(ValueError):
        hurray.save_sharded(tmp_path, {"w": _matrix()}, 0)
    with pytest.raises(ValueError):
        hurray.save_sharded(tmp_path, {"w": _matrix()}, 2, axis=2)
    with pytest.raises(ValueError):
        hurray.save_sharded(tmp_path, {"s": np.float32(1.0)}, 2)
    assert not list(tmp_path.iterdir())  # nothing written when an argument is wrong


# ----------------------------------------------------------------- property


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(0, 12),
    cols=st.integers(0, 12),
    parts=st.integers(1, 6),
    reparts=st.integers(1, 6),
    axis=st.integers(0, 1),
    reaxis=st.integers(0, 1),
    data=st.data(),
)
def test_any_split_reads_back(rows, cols, parts, reparts, axis, reaxis, data):
    w = np.random.default_rng(rows * 13 + cols).standard_normal((rows, cols)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        first = hurray.save_sharded(os.path.join(tmp, "a"), {"w": w}, parts, axis=axis)
        assert len(first) == parts
        whole = hurray.load_sharded(os.path.join(tmp, "a"), "w")
        np.testing.assert_array_equal(whole, w)
        hurray.save_sharded(os.path.join(tmp, "b"), {"w": whole}, reparts, axis=reaxis)
        np.testing.assert_array_equal(hurray.load_sharded(os.path.join(tmp, "b"), "w"), w)
        r0 = data.draw(st.integers(0, rows))
        r1 = data.draw(st.integers(r0, rows))
        c0 = data.draw(st.integers(-cols - 2, cols + 2))
        c1 = data.draw(st.integers(-cols - 2, cols + 2))
        region = (slice(r0, r1), slice(c0, c1))
        np.testing.assert_array_equal(
            hurray.load_sharded(os.path.join(tmp, "b"), "w", index=region), w[region]
        )


def _brute_overlap(boxes):
    def meet(a, b):
        return all(max(a[0][k], b[0][k]) < min(a[1][k], b[1][k]) for k in range(len(a[0])))

    live = [i for i, (lo, hi) in enumerate(boxes) if all(h > o for o, h in zip(lo, hi))]
    return any(meet(boxes[i], boxes[j]) for n, i in enumerate(live) for j in live[n + 1 :])


@pytest.mark.parametrize("seed", range(40))
def test_overlapping_pair_agrees_with_comparing_every_pair(seed):
    """overlapping_pair became a grid count with a sweep for irregular cuts
    (empty chunks and high-rank tilings made the old sweep quadratic); both
    paths must find an overlap exactly when one exists."""
    from hurray._shards import overlapping_pair

    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    boxes = []
    for _ in range(int(rng.integers(2, 30))):
        lo = tuple(int(v) for v in rng.integers(0, 6 if seed % 2 else 60, rank))
        hi = tuple(o + int(v) for o, v in zip(lo, rng.integers(0, 4, rank)))
        boxes.append((lo, hi))
    pair = overlapping_pair(boxes)
    assert (pair is not None) == _brute_overlap(boxes)
    if pair is not None:
        i, j = pair
        assert i != j and _brute_overlap([boxes[i], boxes[j]])


def test_a_high_rank_tiling_of_many_pieces_has_no_overlap():
    from hurray._shards import overlapping_pair

    boxes = [
        (tuple(bits), tuple(b + 1 for b in bits)) for bits in itertools.product((0, 1), repeat=12)
    ]
    assert overlapping_pair(boxes) is None
    assert overlapping_pair(boxes + [boxes[77]]) is not None
    assert overlapping_pair(boxes + [((0,) * 12, (0,) * 12)] * 5000) is None  # empty: no overlap


@pytest.mark.parametrize("seed", range(60))
def test_tiles_exactly_agrees_with_counting_every_element(seed):
    """The corner count that accepts a tiling in linear time says yes
    exactly when each element of the shape is covered once."""
    from hurray._shards import tiles_exactly

    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(1, 5, rank))
    # Cut the shape into a grid, merge some neighbours, then maybe break it.
    cuts = [sorted({0, d, *(int(c) for c in rng.integers(0, d + 1, 2))}) for d in shape]
    boxes = [
        (tuple(c[i] for c, i in zip(cuts, cell)), tuple(c[i + 1] for c, i in zip(cuts, cell)))
        for cell in itertools.product(*(range(len(c) - 1) for c in cuts))
    ]
    for _ in range(int(rng.integers(0, 3))):
        lo = tuple(int(rng.integers(0, d)) for d in shape)
        hi = tuple(int(rng.integers(o + 1, d + 1)) for o, d in zip(lo, shape))
        boxes[int(rng.integers(len(boxes)))] = (lo, hi)
    if seed % 3 == 0:
        boxes.pop()
    count = np.zeros(shape, np.int64)
    for lo, hi in boxes:
        count[tuple(slice(o, h) for o, h in zip(lo, hi))] += 1
    assert tiles_exactly(boxes, shape) == bool((count == 1).all())


def _strips(half):
    """Rows across the left half and columns down the right: a tiling whose
    boxes every axis sees deep, so a sweep compares most pairs."""
    left = [((i, 0), (i + 1, half)) for i in range(half)]
    return left + [((0, half + j), (half, half + j + 1)) for j in range(half)]


def test_an_irregular_tiling_is_accepted_without_comparing_pairs(tmp_path, monkeypatch):
    """Pieces cut one way on the left and the other on the right made the
    overlap sweep compare most pairs: 8,000 pieces took 16 s, and a crafted
    folder of tens of thousands hung load_sharded. A tiling is now
    recognised by its corners; pairs are compared only to say what is wrong,
    and only so many."""
    from hurray import _shards

    half = 40
    w = _matrix(half, 2 * half)
    for n, (lo, hi) in enumerate(_strips(half)):
        piece = w[lo[0] : hi[0], lo[1] : hi[1]]
        hurray.save(tmp_path / f"p{n:03d}.hurray", {"w": hurray.shard(piece, w.shape, lo)})
    compared = []
    intersect = _shards._intersect
    monkeypatch.setattr(_shards, "_intersect", lambda a, b: compared.append(1) or intersect(a, b))
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w)
    assert len(compared) <= 2 * half  # placing each piece; no pair compared

    boxes = _strips(2000)
    assert _shards.tiles_exactly(boxes, (2000, 4000))
    boxes[-1] = ((0, 3998), (2000, 4000))  # overlaps its neighbour
    assert not _shards.tiles_exactly(boxes, (2000, 4000))
    del compared[:]
    with pytest.raises(_shards._TooIrregular):
        _shards.overlapping_pair(boxes)
    assert len(compared) == _shards._SWEEP_PAIRS


def test_counting_corners_holds_a_bounded_number_of_them():
    """Boxes of rank 10 whose corners never cancel kept 2**10 corners each:
    16,000 chunks of a 1.7 MB DCP metadata file held 1.6 GB. Past a budget
    of corners the overlap search decides instead."""
    import tracemalloc

    from hurray import _shards

    n, cols = 600, 10
    shape = (n,) + (2,) * 8 + (cols,)
    boxes = [((k,) + (0,) * 9, (k + 1,) + (2,) * 8 + (cols - k % 2,)) for k in range(n)]
    boxes += [((1,) + c + (cols - 1,), (2,) + tuple(x + 1 for x in c) + (cols,))
              for c in itertools.product(range(2), repeat=8)]  # fmt: skip
    missing = n // 2 - 1  # the rows that end one short, less row 1's cells above
    boxes.append(((3,) + (0,) * 8 + (cols - 1,), (3 + missing,) + (2,) * 8 + (cols,)))
    assert sum(math.prod(h - lo for lo, h in zip(*b)) for b in boxes) == math.prod(shape)
    tracemalloc.start()
    try:
        fault = _shards.tiling_fault(boxes, shape)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fault is not None and fault.overlap is not None
    assert peak < 16 << 20, peak  # 58 MB before


def test_a_high_rank_tiling_cut_on_few_axes_is_recognised_by_its_corners():
    """Above rank 10 the corner count gave up, and the bounded sweep then
    refused a correct rank-12 checkpoint cut irregularly on two axes. Axes
    every piece spans whole are left out of the count."""
    from hurray import _shards

    pad = (0,) * 10, (1,) * 10
    boxes = [(lo + pad[0], hi + pad[1]) for lo, hi in _strips(2000)]
    assert _shards.tiles_exactly(boxes, (2000, 4000) + (1,) * 10)
    cut_everywhere = [
        (tuple(b), tuple(x + 1 for x in b)) for b in itertools.product((0, 1), repeat=11)
    ]
    assert _shards.tiles_exactly(cut_everywhere, (2,) * 11) is None
    assert _shards.overlapping_pair(cut_everywhere, budget=None) is None


def test_pieces_cut_too_irregularly_to_place_the_fault_are_still_refused(tmp_path, monkeypatch):
    from hurray import _shards

    monkeypatch.setattr(_shards, "_SWEEP_PAIRS", 10)
    half = 40  # a grid of 40 x 41 cells: too many for 80 pieces, so the sweep
    w = _matrix(half, 2 * half)
    boxes = _strips(half)
    boxes[-1] = ((0, 2 * half - 2), (half, 2 * half))
    for n, (lo, hi) in enumerate(boxes):
        piece = w[lo[0] : hi[0], lo[1] : hi[1]]
        hurray.save(tmp_path / f"p{n:03d}.hurray", {"w": hurray.shard(piece, w.shape, lo)})
    with pytest.raises(hurray.ValidationError, match="cut too irregularly to say where"):
        hurray.load_sharded(tmp_path, "w")


def test_parts_of_two_saves_are_not_assembled(tmp_path):
    """A save_sharded that failed after its first part left the new part 0
    beside the old parts 1 and 2: load_sharded returned a mix of the two
    saves, without an error. Each call now marks its parts with one id."""
    hurray.save_sharded(tmp_path, {"w": np.full(6, 1.0)}, parts=3)
    first = hurray.save_sharded(tmp_path / "second", {"w": np.full(6, 2.0)}, parts=3)
    os.replace(first[0], tmp_path / os.path.basename(first[0]))  # the one part published
    with pytest.raises(hurray.ValidationError, match="different saves") as info:
        hurray.load_sharded(tmp_path, "w")
    _status(info, "HURRAY_ERR_SHARD_BOUNDS")
    # The id travels as metadata beside the caller's, which stays as given.
    paths = hurray.save_sharded(tmp_path / "third", {"w": np.arange(6.0)}, 2, metadata={"k": 1})
    with hurray.open(paths[0]) as f:
        assert f.metadata["k"] == 1 and len(f.metadata["hurray.save_sharded.save"]) == 16
    assert hurray.load_sharded(tmp_path / "third", "w").tolist() == list(range(6))


@pytest.mark.parametrize("shape", [(6,), (8,)])
def test_a_save_between_the_two_passes_is_not_mixed_in(tmp_path, monkeypatch, shape):
    """load_sharded checks the parts' save ids in pass 1, then opens the
    parts again in pass 2 to fetch values. A save_sharded that replaced the
    folder in between went unseen: the result mixed two saves' values with
    no error (or, with a new shape, a numpy ValueError)."""
    from hurray import _shards

    hurray.save_sharded(tmp_path, {"w": np.full(6, 1.0)}, parts=3)
    opened = []
    real_file = _shards.File

    def file_then_resave(path, **kwargs):
        opened.append(path)
        if len(opened) == 4:  # pass 2's first open: another process saves meanwhile
            hurray.save_sharded(tmp_path, {"w": np.full(shape, 2.0)}, parts=3)
        return real_file(path, **kwargs)

    monkeypatch.setattr(_shards, "File", file_then_resave)
    with pytest.raises(hurray.ValidationError, match="was replaced while load_sharded") as info:
        hurray.load_sharded(tmp_path, "w")
    _status(info, "HURRAY_ERR_SHARD_BOUNDS")
    monkeypatch.setattr(_shards, "File", real_file)
    assert hurray.load_sharded(tmp_path, "w").tolist() == [2.0] * shape[0]


def test_pieces_cut_further_by_separate_calls_are_assembled(tmp_path):
    """One save_sharded call per rank, each cutting that rank's piece into
    its own folder, gives the pieces of one tensor two ids: they are one
    checkpoint, and load_sharded assembles them (the mix check looks within
    a folder only)."""
    w = np.arange(16.0)
    for r in range(2):
        local = hurray.shard(w[8 * r : 8 * r + 8], global_shape=(16,), offsets=(8 * r,))
        hurray.save_sharded(tmp_path / f"rank{r}", {"w": local}, 2)
    paths = sorted(str(p) for p in tmp_path.glob("rank*/*.hurray"))
    assert hurray.load_sharded(paths, "w").tolist() == w.tolist()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"parts": 2**63}, ValueError, "parts must be from 1 to 99999"),
        ({"parts": 0}, ValueError, "parts must be from 1 to 99999"),
        ({"parts": True}, TypeError, "parts must be an int"),
        ({"parts": 2, "axis": 1.5}, TypeError, "axis must be an int"),
        ({"parts": 2, "axis": True}, TypeError, "axis must be an int"),
    ],
)
def test_save_sharded_refuses_odd_part_counts_and_axes(tmp_path, kwargs, error, message):
    """parts=2**63 was a bare MemoryError from numpy; axis=1.5 and True were
    taken as 1."""
    with pytest.raises(error, match=message):
        hurray.save_sharded(tmp_path, {"w": _matrix()}, **kwargs)
    assert os.listdir(tmp_path) == []


def test_save_sharded_takes_str_names_as_save_does(tmp_path):
    """Names went through str(): {b'w': ..., 7: ...} wrote tensors "b'w'"
    and "7", where save() refuses them."""
    with pytest.raises(TypeError, match="tensor names must be str, not bytes"):
        hurray.save_sharded(tmp_path, {b"w": _matrix(), 7: _matrix()}, parts=2)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "shape, offsets", [((8.9, 5), (0, 0)), (("8", "5"), (0, 0)), ((8, 5), (0.5, 0))]
)
def test_shard_takes_integers_as_they_are(shape, offsets):
    """int() truncated 8.9 to 8 and 0.5 to 0, and parsed "8"."""
    with pytest.raises(TypeError, match="must be an integer"):
        hurray.shard(_matrix(), shape, offsets)
    piece = hurray.shard(_matrix(), (np.int64(8), 5), (np.int32(0), 0))
    assert piece.descriptor.shard.global_shape == (8, 5)


def test_bsr_block_shape_takes_integers_as_they_are():
    with pytest.raises(TypeError, match="cannot be interpreted as an integer"):
        hurray.SparseTensor.from_arrays(
            "bsr",
            (4, 4),
            np.ones((1, 2, 2)),
            indptr=np.array([0, 1, 1]),
            indices=np.array([0]),
            block_shape=(2.5, 2),
        )


def test_a_part_replaced_between_the_passes_is_seen_without_a_save_id(tmp_path):
    """Pieces written by shard() + save() carry no save id: a part replaced
    between pass 1 and pass 2 by one of the same shape and offsets but other
    values was read, and load_sharded mixed old and new values, no error."""
    from hurray import _shards
    from hurray._files import File

    w = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    a, b = tmp_path / "a.hurray", tmp_path / "b.hurray"
    hurray.save(a, {"w": hurray.shard(w[:32], (64, 8), (0, 0))})
    hurray.save(b, {"w": hurray.shard(w[32:], (64, 8), (32, 0))})
    opened = []

    def open_file(path):
        opened.append(path)
        if len(opened) == 3:  # pass 2 begins
            hurray.save(b, {"w": hurray.shard(-w[32:], (64, 8), (32, 0))})
        return File(path)

    with pytest.raises(hurray.ValidationError, match="b.hurray was replaced while load_sharded"):
        _shards._load([str(a), str(b)], "w", None, open_file)
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w")[32:], -w[32:])


def test_a_broken_link_among_the_parts_is_named(tmp_path):
    """A *.hurray entry that is a broken symbolic link was passed over, and
    the error spoke only of a region no piece covers."""
    w = np.arange(40, dtype=np.float32).reshape(10, 4)
    paths = hurray.save_sharded(tmp_path, {"w": w}, parts=2)
    os.rename(paths[1], str(paths[1]) + ".moved")
    os.symlink(str(paths[1]) + ".gone", paths[1])
    with pytest.raises(hurray.HurrayIOError, match="is a broken symbolic link"):
        hurray.load_sharded(tmp_path, "w")
    os.unlink(paths[1])
    os.rename(str(paths[1]) + ".moved", paths[1])
    os.makedirs(tmp_path / "x.hurray")  # a folder named so is not a part, and no error
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w)


def test_verify_checks_the_pieces_fetched(tmp_path):
    """load_sharded had no way to check checksums: a flipped bit in a part
    came back as a wrong value. verify=True checks each piece it fetches."""
    w = np.arange(64, dtype=np.float32).reshape(16, 4)
    paths = hurray.save_sharded(tmp_path, {"w": w}, parts=2)
    raw = bytearray(open(paths[1], "rb").read())
    at = raw.find(w[8:].tobytes()[:16])
    raw[at + 5] ^= 0x10
    open(paths[1], "wb").write(bytes(raw))
    assert not np.array_equal(hurray.load_sharded(tmp_path, "w"), w)  # unchecked, as load()
    for kw in ({}, {"index": (slice(9, 10),)}, {"mmap": False}):
        # Naming the part: "tensor "w" buffer 0: checksum mismatch" said
        # which tensor, not which of the parts.
        with pytest.raises(hurray.ChecksumError, match=f"^HURRAY_ERR_CHECKSUM: {paths[1]}: tensor"):
            hurray.load_sharded(tmp_path, "w", verify=True, **kw)
    np.testing.assert_array_equal(  # the sound part alone
        hurray.load_sharded(tmp_path, "w", index=(slice(0, 8),), verify=True), w[:8]
    )
    raw[-10] ^= 0x01  # the trailer: found as the part is opened
    open(paths[1], "wb").write(bytes(raw))
    with pytest.raises(hurray.ChecksumError, match=f"{paths[1]}: trailer checksum mismatch"):
        hurray.load_sharded(tmp_path, "w")


def test_a_dcp_folder_must_hold_its_finished_save(tmp_path):
    """load_sharded of a torch.distributed.checkpoint folder ignored its
    .metadata.hurray: it assembled a rank file of another save, or a save
    that never finished, which the DCP reader and the converter refuse.
    (Two save_sharded calls of other tensors may share a folder.)"""
    from hurray import _shards

    w = np.arange(32, dtype=np.float32).reshape(8, 4)

    def rank_file(path, rows, save):
        meta = {_shards.DCP_FORMAT_KEY: _shards.DCP_FORMAT, _shards.DCP_SAVE_ID_KEY: save}
        hurray.save(path, {"w": hurray.shard(w[rows], (8, 4), (rows.start, 0))}, meta)

    rank_file(tmp_path / "rank-00000.hurray", slice(0, 4), "s1")
    rank_file(tmp_path / "rank-00001.hurray", slice(4, 8), "s1")
    with pytest.raises(hurray.ValidationError, match="did not finish"):
        hurray.load_sharded(tmp_path, "w")
    ranks = ["rank-00000.hurray", "rank-00001.hurray"]
    hurray.save(
        tmp_path / _shards.DCP_METADATA_FILE,
        {},
        {
            _shards.DCP_SAVE_ID_KEY: "s1",
            "hurray.dcp.metadata": json.dumps({"files": ranks + ["rank-00002.hurray"]}),
        },
    )
    with pytest.raises(
        hurray.ValidationError, match="lists rank files that are missing: rank-00002"
    ):
        hurray.load_sharded(tmp_path, "w")  # all it holds are there, yet tensors would be missing
    hurray.save(
        tmp_path / _shards.DCP_METADATA_FILE,
        {},
        {_shards.DCP_SAVE_ID_KEY: "s1", "hurray.dcp.metadata": json.dumps({"files": ranks})},
    )
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w)
    hurray.save(tmp_path / "notes.hurray", {"n": np.zeros(1)})  # sorts first, carries no id
    with pytest.raises(hurray.ValidationError, match="notes.hurray is not of the save"):
        hurray.load_sharded(tmp_path, "w")
    os.unlink(tmp_path / "notes.hurray")
    os.unlink(tmp_path / _shards.DCP_METADATA_FILE)
    hurray.save(tmp_path / "notes.hurray", {"n": np.zeros(1)})  # a save that did not finish
    with pytest.raises(hurray.ValidationError, match="did not finish"):
        hurray.load_sharded(tmp_path, "w")  # though the first part is no rank file
    os.unlink(tmp_path / "notes.hurray")
    hurray.save(
        tmp_path / _shards.DCP_METADATA_FILE,
        {},
        {_shards.DCP_SAVE_ID_KEY: "s1", "hurray.dcp.metadata": json.dumps({"files": ranks})},
    )
    hurray.save(tmp_path / "rank-00001.hurray", {"w": hurray.shard(w[4:], (8, 4), (4, 0))})
    with pytest.raises(hurray.ValidationError, match="rank-00001.hurray is not of the save"):
        hurray.load_sharded(tmp_path, "w")  # a rank file without an id
    rank_file(tmp_path / "rank-00001.hurray", slice(4, 8), "s1")
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w)
    hurray.save(
        tmp_path / _shards.DCP_METADATA_FILE,
        {},
        {_shards.DCP_SAVE_ID_KEY: "s1", "hurray.dcp.metadata": "[" * 100_000},
    )
    with pytest.raises(hurray.ValidationError, match="holds no list of its rank files"):
        hurray.load_sharded(tmp_path, "w")  # was a RecursionError
    hurray.save(
        tmp_path / _shards.DCP_METADATA_FILE,
        {},
        {_shards.DCP_SAVE_ID_KEY: "s1", "hurray.dcp.metadata": json.dumps({"files": ranks})},
    )
    hurray.convert(tmp_path, tmp_path.parent / "whole.safetensors", quiet=True)
    os.unlink(tmp_path / "rank-00001.hurray")  # a download cut short: the converter refuses too
    with pytest.raises(hurray.ConversionError, match="missing: rank-00001.hurray"):
        hurray.convert(tmp_path, tmp_path.parent / "part.safetensors", quiet=True)
    assert not (tmp_path.parent / "part.safetensors").exists()
    rank_file(tmp_path / "rank-00000.hurray", slice(0, 4), "s2")  # a later save, stopped
    with pytest.raises(hurray.ValidationError, match="rank-00000.hurray is not of the save"):
        hurray.load_sharded(tmp_path, "w")
    rank_file(tmp_path / "rank-00001.hurray", slice(4, 8), "s2")
    with pytest.raises(hurray.ValidationError, match="not of the save .metadata.hurray describes"):
        hurray.load_sharded(tmp_path, "w")
    # Listed files are taken as given: the folder's rules are for folders.
    np.testing.assert_array_equal(
        hurray.load_sharded(sorted(str(p) for p in tmp_path.glob("rank-*.hurray")), "w"), w
    )


def test_two_save_sharded_calls_of_other_tensors_share_a_folder(tmp_path):
    """The folder rule for DCP saves leaves this alone: only the pieces of
    one tensor must carry one save id."""
    a, b = np.arange(12.0).reshape(6, 2), np.arange(20.0).reshape(10, 2)
    hurray.save_sharded(tmp_path, {"a": a}, parts=2)
    hurray.save_sharded(tmp_path, {"b": b}, parts=3)
    got = hurray.load_sharded(tmp_path)
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)


def test_a_save_that_fails_part_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """save_sharded wrote each part onto its final name in turn: a full disk
    at the second part left the first one replaced, and neither save
    loadable. The parts are now renamed into place only once all are
    written; a failure removes what was written, and a folder made for the
    save."""
    import errno

    import hurray._shards as shards

    folder = tmp_path / "ckpt"
    old = np.arange(100, dtype=np.float32)
    hurray.save_sharded(folder, {"a": old}, parts=2)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real_save, calls = shards.save, []

    def full_disk(path, *args, **kwargs):
        calls.append(os.path.basename(path))
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return real_save(path, *args, **kwargs)

    monkeypatch.setattr(shards, "save", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        hurray.save_sharded(folder, {"a": np.ones(600, np.float32)}, parts=2)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert np.array_equal(hurray.load_sharded(folder, "a"), old)
    fresh = tmp_path / "fresh"
    calls.clear()
    with pytest.raises(OSError, match="No space left on device"):
        hurray.save_sharded(fresh / "a" / "b", {"a": np.ones(600, np.float32)}, parts=2)
    assert not fresh.exists()  # every folder it made
    monkeypatch.setattr(shards, "save", real_save)
    paths = hurray.save_sharded(folder, {"a": np.ones(600, np.float32)}, parts=2)
    assert sorted(p.name for p in folder.iterdir()) == [os.path.basename(p) for p in paths]
    assert np.array_equal(hurray.load_sharded(folder, "a"), np.ones(600, np.float32))


def test_ctrl_c_while_the_parts_are_renamed_leaves_one_whole_save(tmp_path, monkeypatch):
    """A SIGINT between two renames into place raised at once and left the
    new parts beside the old ones: neither save loaded ("come from
    different saves"). The renames and the folder's fsync now finish first;
    the KeyboardInterrupt comes after, over the new save, whole."""
    import signal

    folder = tmp_path / "ckpt"
    old = np.arange(40, dtype=np.float32).reshape(10, 4)
    hurray.save_sharded(folder, {"w": old}, parts=4)
    real_replace, renames = os.replace, []

    def replace(src, dst):
        renames.append(dst)
        if len(renames) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        hurray.save_sharded(folder, {"w": old + 100}, parts=4)
    monkeypatch.setattr(os, "replace", real_replace)
    assert len(renames) == 4
    assert sorted(p.name for p in folder.iterdir()) == [
        f"part-{k:05d}-of-00004.hurray" for k in range(4)
    ]
    assert np.array_equal(hurray.load_sharded(folder, "w"), old + 100)


@pytest.mark.parametrize("how", ["rename refused", "a folder in its place", "no hard links"])
def test_a_rename_that_fails_part_way_puts_the_earlier_parts_back(tmp_path, monkeypatch, how):
    """A part that could not be renamed into place (another user's part in a
    sticky folder, a folder where a part goes) left the parts before it
    replaced and the earlier save unloadable, and raised a bare OSError.
    The earlier parts are now put back and the error is a HurrayIOError
    naming the part."""
    import errno

    folder = tmp_path / "ckpt"
    old = np.arange(60, dtype=np.float32).reshape(6, 10)
    hurray.save_sharded(folder, {"w": old}, parts=3)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    last = folder / "part-00002-of-00003.hurray"
    real_replace, real_link = os.replace, os.link
    if how == "a folder in its place":
        last.unlink()
        last.mkdir()
        before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    elif how == "rename refused":

        def replace(src, dst):
            if os.fspath(dst) == str(last) and ".old" not in os.fspath(src):
                raise PermissionError(errno.EPERM, "Operation not permitted", os.fspath(dst))
            return real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace)
    else:

        def link(*args, **kwargs):  # a file system without hard links
            raise PermissionError(errno.EPERM, "Operation not permitted")

        def replace(src, dst):
            if os.fspath(dst) == str(last) and ".old" not in os.fspath(src):
                raise OSError(errno.EIO, "Input/output error", os.fspath(dst))
            return real_replace(src, dst)

        monkeypatch.setattr(os, "link", link)
        monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(hurray.HurrayIOError, match="cannot put part 2 in place") as info:
        hurray.save_sharded(folder, {"w": old + 100}, parts=3)
    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(os, "link", real_link)
    assert isinstance(info.value, OSError) and info.value.errno is not None
    assert info.value.filename == str(last)
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert after == before  # no new part, and no hidden file left
    if how != "a folder in its place":
        assert np.array_equal(hurray.load_sharded(folder, "w"), old)


def test_sharded_file_system_errors_are_hurray_io_errors(tmp_path):
    """save_sharded onto or under a regular file raised the builtin
    FileExistsError / NotADirectoryError, and load_sharded of a folder with a
    broken link or a FIFO named *.hurray a HurrayIOError without errno or
    filename."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    for target, builtin in ((plain, FileExistsError), (plain / "sub", NotADirectoryError)):
        with pytest.raises(hurray.HurrayIOError) as info:
            hurray.save_sharded(target, {"w": np.ones(4, np.float32)}, parts=2)
        assert isinstance(info.value, builtin), type(info.value)
        assert info.value.status_name == "HURRAY_ERR_IO"
    folder = tmp_path / "ckpt"
    hurray.save_sharded(folder, {"w": np.ones(4, np.float32)}, parts=2)
    (folder / "extra.hurray").symlink_to(tmp_path / "missing")
    with pytest.raises(hurray.HurrayFileNotFoundError) as info:
        hurray.load_sharded(folder)
    assert (info.value.errno, info.value.filename) == (2, str(folder / "extra.hurray"))
    (folder / "extra.hurray").unlink()
    os.mkfifo(folder / "extra.hurray")
    with pytest.raises(hurray.HurrayIOError, match="not a regular file") as info:
        hurray.load_sharded(folder)
    assert info.value.filename == str(folder / "extra.hurray") and info.value.errno


def test_an_error_naming_a_path_that_is_not_utf8_keeps_its_class(tmp_path):
    """_hurray._error parsed its message as strict UTF-8: a folder name from
    os.listdir that is not UTF-8 (a surrogate escape) turned the
    HurrayFileExistsError into a UnicodeEncodeError."""
    name = os.fsdecode(b"\xff.hurray")
    target = os.path.join(os.fsdecode(bytes(tmp_path)), name)
    with open(target, "wb") as f:
        f.write(b"not a folder")
    with pytest.raises(hurray.HurrayFileExistsError) as info:
        hurray.save_sharded(target, {"x": np.arange(8, dtype=np.float32)}, 2)
    assert info.value.errno == 17 and info.value.filename == target
    assert "\\udcff" in str(info.value)  # shown escaped
    exc = hurray._hurray._error("HURRAY_ERR_IO", "x \udcff", 2, "p")
    assert isinstance(exc, hurray.HurrayFileNotFoundError)


def test_load_sharded_of_a_folder_it_cannot_list_is_an_os_error(tmp_path, monkeypatch):
    """glob read a folder the caller may not list as an empty one:
    NotFoundError "no *.hurray files" (a KeyError), not PermissionError."""
    hurray.save_sharded(tmp_path / "parts", {"x": np.arange(8, dtype=np.float32)}, 2)

    def refused(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "listdir", refused)
    with pytest.raises(hurray.HurrayPermissionError) as info:
        hurray.load_sharded(tmp_path / "parts", "x")
    assert info.value.errno == 13 and info.value.filename == str(tmp_path / "parts")
    monkeypatch.undo()
    # Hidden names (an interrupted save's staged parts) are still no parts.
    (tmp_path / "parts" / ".part-00000-of-00002.hurray.0123").write_bytes(b"x")
    assert hurray.load_sharded(tmp_path / "parts", "x").tolist() == list(range(8))


def test_save_sharded_errors_name_the_part_not_its_staged_file(tmp_path, monkeypatch):
    """The error of a part that could not be written named the hidden staged
    file (".part-00000-of-00002.hurray.<id>"), which is gone by then."""
    import errno

    from hurray import _shards

    def full(path, *args, **kwargs):
        raise hurray._hurray._error("HURRAY_ERR_IO", "no space", errno.ENOSPC, os.fspath(path))

    monkeypatch.setattr(_shards, "save", full)
    with pytest.raises(hurray.HurrayIOError) as info:
        hurray.save_sharded(tmp_path, {"x": np.arange(8, dtype=np.float32)}, 2)
    want = os.path.join(str(tmp_path), "part-00000-of-00002.hurray")
    assert info.value.errno == errno.ENOSPC and info.value.filename == want
    assert want in str(info.value)
    assert os.listdir(tmp_path) == []
