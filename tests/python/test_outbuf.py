"""Fresh dequantize outputs (python/hurray/_outbuf.py): large ones come from a
private anonymous mapping rather than numpy's huge-page heap; the array must
behave like any other."""

import gc
import mmap
import pickle
import sys

import numpy as np
import pytest

import hurray
from hurray import _outbuf


@pytest.mark.parametrize("threads", [1, 2])
def test_large_dequantize_matches_out_and_owns_its_mapping(threads):
    x = np.random.default_rng(3).standard_normal((4096, 2560), dtype=np.float32)  # 40 MiB
    q = hurray.quantize(x, "affine", dtype="int8")
    y = q.dequantize(threads=threads)
    ref = np.empty_like(x)
    q.dequantize(out=ref)
    assert y.shape == x.shape and y.dtype == np.float32
    assert y.flags.c_contiguous and y.flags.writeable and y.flags.aligned
    assert y.ctypes.data % 4096 == 0
    assert np.array_equal(y.view(np.uint32), ref.view(np.uint32))
    view = y[10:20]
    del y, q
    gc.collect()
    assert np.array_equal(view, ref[10:20])  # the mapping outlives the first owner
    view[0, 0] = 1.5
    assert np.array_equal(pickle.loads(pickle.dumps(view)), view)


def test_small_and_empty_outputs_are_plain_arrays():
    a = _outbuf.empty((3, 4), np.float16)
    assert a.shape == (3, 4) and a.dtype == np.float16 and a.flags.owndata
    z = _outbuf.empty((0, 7), np.float32)
    assert z.shape == (0, 7)
    mid = _outbuf.empty((2, 1 << 20), np.float32)  # 8 MiB: the heap, reused across calls
    assert mid.flags.owndata
    big = _outbuf.empty((10, 1 << 20), np.float32, threads=2)  # 40 MiB: a mapping
    assert big.shape == (10, 1 << 20) and big.flags.writeable and not big.flags.owndata
    big[...] = 2.0
    assert float(big.sum()) == 20.0 * (1 << 20)


def _resident_pages(a: np.ndarray) -> int:
    """Resident pages of a page-aligned array's memory (mincore)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pages = -(-a.nbytes // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    rc = libc.mincore(ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(a.nbytes), vec)
    assert rc == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec)


def _has_populate_write() -> bool:
    import ctypes

    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    m = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    a = np.frombuffer(m, np.uint8)
    ok = libc.madvise(ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(mmap.PAGESIZE), 23) == 0
    del a
    m.close()
    return ok


@pytest.mark.skipif(not _has_populate_write(), reason="needs MADV_POPULATE_WRITE (Linux 5.14)")
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_large_outputs_are_populated_on_every_thread_count(threads):
    # Issue 19: with more than one thread the pages were left to fault one
    # trap at a time inside the kernel, and 2 threads ran slower than 1.
    big = _outbuf.empty((10, 1 << 20), np.float32, threads=threads)  # 40 MiB: a mapping
    assert _resident_pages(big) * mmap.PAGESIZE == big.nbytes


def test_prefault_keeps_content_and_checks_threads():
    from hurray import _hurray

    a = np.arange(3 << 20, dtype=np.uint8)  # 3 MiB, heap memory with neighbours
    ref = a.copy()
    for threads in (0, 1, 2, 5):
        _hurray._prefault(a[1:-1], False, threads)  # unaligned both ends
    assert np.array_equal(a, ref)
    _hurray._prefault(a[:0], False, 2)
    with pytest.raises((ValueError, OverflowError)):
        _hurray._prefault(a, False, -1)
    with pytest.raises(OverflowError):
        _hurray._prefault(a, False, 1 << 20)
    with pytest.raises(TypeError):
        _hurray._prefault(bytes(10), False, 1)  # read-only


def _anon_huge_kib(a: np.ndarray) -> int:
    """AnonHugePages (KiB) of the mapping that holds a's memory, from smaps."""
    at = a.ctypes.data
    found = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
                found = lo <= at < hi
            elif found and head == "AnonHugePages:":
                return int(line.split()[1])
    raise AssertionError("mapping not found in smaps")


@pytest.mark.skipif(not _has_populate_write(), reason="needs MADV_POPULATE_WRITE (Linux 5.14)")
@pytest.mark.parametrize("choice", ["small", "huge", "probe", "unknown"])
@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_page_choice_keeps_results_and_small_means_no_huge_pages(
    monkeypatch, choice, threads
):
    # The page size of a fresh output is chosen per call (HURRAY_FRESH_PAGES,
    # default: measured); whatever it is, the array is whole, present and
    # equal to a dequantize into a reused out=.
    monkeypatch.setenv("HURRAY_FRESH_PAGES", choice)
    x = np.random.default_rng(5).standard_normal((4096, 2560), dtype=np.float32)  # 40 MiB
    q = hurray.quantize(x, "block_affine", dtype="int8")
    y = q.dequantize(threads=threads)
    ref = np.empty_like(x)
    q.dequantize(out=ref)
    assert np.array_equal(y.view(np.uint32), ref.view(np.uint32))
    assert _resident_pages(y) * mmap.PAGESIZE == y.nbytes
    if choice == "small":
        assert _anon_huge_kib(y) == 0


@pytest.mark.parametrize("choice", ["small", "huge", "probe"])
def test_large_code_buffers_are_the_same_whatever_their_pages(monkeypatch, choice):
    # Code buffers of 32 MiB and more are populated whole, in pages of the
    # chosen (or measured) size, before the encoders run; smaller ones a
    # chunk ahead of them. Blocks are independent, so the codes of the whole
    # equal those of its two halves, each below the size.
    monkeypatch.setenv("HURRAY_FRESH_PAGES", choice)
    x = np.random.default_rng(11).standard_normal((2048, 17 << 10), dtype=np.float32)  # 34 Mi
    half = x.shape[0] // 2
    parts = [
        hurray.quantize(x[s], "block_affine", dtype="int8")
        for s in (slice(0, half), slice(half, None))
    ]
    for threads in (1, 2):
        whole = hurray.quantize(x, "block_affine", dtype="int8", threads=threads)
        assert whole.codes().nbytes >= 32 << 20
        assert np.array_equal(whole.codes(), np.concatenate([p.codes() for p in parts]))
        assert np.array_equal(whole.scales(), np.concatenate([p.scales() for p in parts]))
