"""Nothing leaks: reference counts return to their baseline after capsule
and file round trips (also on the failure paths), and memory stays flat
across 10,000 save/load/capsule cycles.

Memory is measured two ways after a warm-up: tracemalloc (Python
allocations, including the extension's PyMem ones) and the resident set
size from /proc/self/statm (which also sees libhurray's malloc and the file
mappings). Files go to /dev/shm when it exists, so that the fsync of every
save costs little; without it the file cycles drop to 2,000 (a save on a
real disk costs ~10 ms in fsync alone).
"""

import ctypes
import gc
import os
import sys
import time
import tracemalloc

import numpy as np
import pytest
from _hurray_samples import aligned

import hurray
from hurray import Buffer, Descriptor, PerChannelAffine

ON_TMPFS = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
FILE_CYCLES = 10_000 if ON_TMPFS else 2_000
CAPSULE_CYCLES = 10_000
WARMUP = 500

needs_statm = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm"
)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def quantized():
    codes = aligned(np.arange(-6, 6, dtype=np.int8).view(np.uint8))
    scales = aligned(np.array([0.5, 0.25, 2.0, 0.125], np.float32).view(np.uint8))
    zps = aligned(np.array([0, 1, -2, 3], np.int8).view(np.uint8))
    d = Descriptor(
        "int8",
        (4, 3),
        quantization=PerChannelAffine(0, 1, "float32", 2, "int8"),
        buffers=[Buffer("data", 12), Buffer("scales", 16), Buffer("zero_points", 4)],
    )
    return d, [codes, scales, zps]


class Growth:
    """tracemalloc and RSS growth across a block, after gc."""

    def __enter__(self):
        gc.collect()
        self.traced0 = tracemalloc.get_traced_memory()[0]
        self.rss0 = rss_bytes()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        gc.collect()
        self.seconds = time.perf_counter() - self.t0
        self.traced = tracemalloc.get_traced_memory()[0] - self.traced0
        self.rss = rss_bytes() - self.rss0


@pytest.fixture
def traced():
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------- refcounts


def test_capsule_round_trip_returns_the_source_refcount():
    a = np.arange(32, dtype=np.float32)
    base = sys.getrefcount(a)
    for _ in range(100):
        t = hurray.from_numpy(a)
        u = hurray.from_hurray(t)
        capsule = u.__hurray__()  # re-exported by a consumer
        w = hurray.Tensor._from_capsule(capsule)
        assert np.shares_memory(np.asarray(w), a)
        unconsumed = t.__hurray__()
        del t, u, w, capsule, unconsumed
    gc.collect()
    assert sys.getrefcount(a) == base


def test_multi_buffer_tensor_returns_every_source_refcount():
    d, arrays = quantized()
    bases = [sys.getrefcount(a) for a in arrays]
    for _ in range(100):
        t = hurray.Tensor(d, arrays)
        views = [np.asarray(b) for b in t.buffers]
        u = hurray.from_hurray(t)
        del t, views, u
    gc.collect()
    assert [sys.getrefcount(a) for a in arrays] == bases


def test_failed_constructions_and_consumptions_release_everything():
    d, arrays = quantized()
    bases = [sys.getrefcount(a) for a in arrays]
    for _ in range(100):
        with pytest.raises(hurray.PlacementError):
            hurray.Tensor(d, arrays[:2])  # list length
        with pytest.raises(hurray.PlacementError):
            hurray.Tensor(d, [arrays[0], arrays[1][:4], arrays[2]])  # too small
        with pytest.raises(hurray.ValidationError):
            hurray.Tensor(d.replace(quantization=PerChannelAffine(0, 7, "float32")), arrays)
    gc.collect()
    assert [sys.getrefcount(a) for a in arrays] == bases

    t = hurray.Tensor(d, arrays)
    base = sys.getrefcount(t)
    for _ in range(100):
        capsule = t.__hurray__()
        ctypes.c_uint32.from_address(ctypes.pythonapi.PyCapsule_GetContext(capsule)).value = 2
        try:
            hurray.from_hurray(capsule)
        except hurray.UnsupportedError:
            pass
        del capsule
    gc.collect()
    assert sys.getrefcount(t) == base


ctypes.pythonapi.PyCapsule_GetContext.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetContext.argtypes = [ctypes.py_object]


def test_file_round_trip_returns_the_source_refcount(fast_dir):
    a = np.arange(64, dtype=np.float64).reshape(8, 8)
    d, arrays = quantized()
    base = sys.getrefcount(a)
    bases = [sys.getrefcount(x) for x in arrays]
    path = fast_dir / "rc.hurray"
    for i in range(50):
        t = hurray.from_numpy(a)
        hurray.save(path, {"a": t, "raw": a, "q": hurray.Tensor(d, arrays)})
        for mmap in (True, False):
            with hurray.open(path, mmap=mmap) as f:
                np.testing.assert_array_equal(f["a"].numpy(), a)
                f.get_slice("a", 2, 4)
            loaded = hurray.load(path, mmap=mmap)
            del loaded
        del t
    gc.collect()
    assert sys.getrefcount(a) == base
    assert [sys.getrefcount(x) for x in arrays] == bases


def test_file_object_and_loaded_tensors_are_freed(fast_dir):
    import weakref

    path = fast_dir / "wr.hurray"
    hurray.save(path, {"a": np.zeros(4)})
    f = hurray.open(path)
    t = f["a"]
    refs = [weakref.ref(f), weakref.ref(t)]
    del f, t
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_plain_tensors_stay_out_of_the_collector_until_they_can_close_a_cycle(fast_dir):
    """A loaded or constructed Tensor holds no Python object the collector
    could follow (only its type), so it is untracked, and a million loaded
    ones are not walked by every later collection. Once it caches a
    descriptor it is tracked again, and a cycle through that cache is still
    collected. A subclass that adds a __dict__ or slots stays tracked."""
    import weakref

    path = fast_dir / "gc.hurray"
    hurray.save(path, {"a": np.zeros(4, np.float32), "b": np.ones((2, 3))})
    loaded = hurray.load(path)
    made = hurray.Tensor(loaded["a"].descriptor.encode(), [np.zeros(4, np.float32)])
    with hurray.open(path) as f:
        one = f["b"]
    assert not any(gc.is_tracked(t) for t in (loaded["b"], made, one))

    assert loaded["a"].descriptor.shape == (4,)  # caches the Python Descriptor
    assert gc.is_tracked(loaded["a"])

    t = loaded.pop("b")
    cycle = [t]
    t._descriptor_cache = cycle  # the one attribute that can point back
    assert gc.is_tracked(t)
    gone = weakref.ref(t)
    del t, cycle
    gc.collect()
    assert gone() is None

    class WithDict(hurray.Tensor):
        pass

    class WithSlot(hurray.Tensor):
        __slots__ = ("x",)

    for cls in (WithDict, WithSlot):
        s = cls(made._encoded, [np.zeros(4, np.float32)])
        assert gc.is_tracked(s), cls
        s.x = s
        gone = weakref.ref(s)
        del s
        gc.collect()
        assert gone() is None, cls


# ------------------------------------------------------ memory stability


def capsule_cycle(a, d, arrays, i):
    u = hurray.Tensor._from_capsule(hurray.from_numpy(a).__hurray__())
    dropped = u.__hurray__()  # never consumed
    q = hurray.from_hurray(hurray.Tensor(d, arrays))
    if i % 10 == 0:
        assert Descriptor.decode(q._encoded).encode() == q._encoded
    del u, dropped, q


def file_cycle(path, a, d, arrays, i):
    hurray.save(path, {"a": a, "q": hurray.Tensor(d, arrays)}, {"i": i})
    loaded = hurray.load(path, mmap=bool(i % 2))
    assert loaded["q"].buffer_count == 3
    if i % 10 == 0:
        with hurray.open(path) as f:
            assert f.metadata["i"] == i
            assert f.get_slice("a", 1, 2).shape == (1, 4)
    del loaded


@pytest.mark.slow
@needs_statm
def test_memory_is_flat_across_capsule_cycles(traced):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    d, arrays = quantized()
    for i in range(WARMUP):
        capsule_cycle(a, d, arrays, i)
    with Growth() as g:
        for i in range(CAPSULE_CYCLES):
            capsule_cycle(a, d, arrays, i)
    print(
        f"capsule cycles: {CAPSULE_CYCLES} in {g.seconds:.1f}s, "
        f"tracemalloc {g.traced} B, RSS {g.rss} B"
    )
    assert g.traced < 1 << 20
    assert g.rss < 16 << 20


@pytest.mark.slow
@needs_statm
def test_memory_is_flat_across_file_cycles(fast_dir, traced):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    d, arrays = quantized()
    path = fast_dir / "cycle.hurray"
    for i in range(WARMUP):
        file_cycle(path, a, d, arrays, i)
    with Growth() as g:
        for i in range(FILE_CYCLES):
            file_cycle(path, a, d, arrays, i)
    print(
        f"file cycles: {FILE_CYCLES} in {g.seconds:.1f}s on "
        f"{'tmpfs' if ON_TMPFS else 'disk'}, tracemalloc {g.traced} B, RSS {g.rss} B"
    )
    assert g.traced < 1 << 20
    assert g.rss < 16 << 20
    # Every mapping of the file was released with its tensors.
    from _hurray_samples import mappings

    assert not mappings(path)


@pytest.mark.slow
@needs_statm
def test_memory_is_flat_across_failure_paths(traced):
    d, arrays = quantized()
    t = hurray.Tensor(d, arrays)
    bad = d.replace(quantization=PerChannelAffine(0, 7, "float32"))

    def cycle():
        try:
            hurray.Tensor(d, arrays[:2])
        except hurray.PlacementError:
            pass
        try:
            hurray.Tensor(bad, arrays)
        except hurray.ValidationError:
            pass
        capsule = t.__hurray__()
        hurray.Tensor._from_capsule(capsule)
        try:
            hurray.Tensor._from_capsule(capsule)
        except hurray.InvalidArgumentError:
            pass
        try:
            Descriptor.decode(d.encode()[:-3])
        except hurray.FormatError:
            pass

    for _ in range(WARMUP):
        cycle()
    with Growth() as g:
        for _ in range(5_000):
            cycle()
    print(f"failure cycles: 5000 in {g.seconds:.1f}s, tracemalloc {g.traced} B, RSS {g.rss} B")
    assert g.traced < 1 << 20
    assert g.rss < 16 << 20
