"""Threads with the GIL released: several Python threads reading one
hurray.File (tensors, row slices, raw buffers, verify) and quantizing and
dequantizing at the same time. The C calls release the GIL, so the threads
really overlap; every result must equal the single-threaded one."""

import subprocess
import sys
import threading

import numpy as np
import pytest

import hurray

THREADS = 6
ROUNDS = 20
SCHEMES = [
    "affine",
    "per_channel",
    "block_affine",
    "q8_0",
    "q4_0",
    "nf4",
    "mxfp8_e4m3",
    "mxfp4",
    "mxint8",
]


def run_threads(fn, n=THREADS):
    """Runs fn(i) on n threads started together; re-raises the first error."""
    barrier = threading.Barrier(n)
    errors, results = [], [None] * n

    def work(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    rng = np.random.default_rng(7)
    arrays = {f"layer.{i}": rng.standard_normal((24 + i, 40)).astype(np.float32) for i in range(6)}
    quantized = {
        f"q.{s}": hurray.quantize(rng.standard_normal((16, 64)).astype(np.float32), s)
        for s in SCHEMES
    }
    path = tmp_path_factory.mktemp("threads") / "model.hurray"
    hurray.save(path, {**arrays, **quantized}, metadata={"step": 9})
    expected = {name: t.dequantize() for name, t in quantized.items()}
    return path, arrays, expected


@pytest.mark.parametrize("mmap", [True, False])
def test_threads_read_one_file(sample, mmap):
    path, arrays, expected = sample
    with hurray.open(path, mmap=mmap) as f:

        def work(i):
            names = sorted(arrays)
            for r in range(ROUNDS):
                name = names[(i + r) % len(names)]
                np.testing.assert_array_equal(np.asarray(f[name]), arrays[name])
                row = (i + r) % arrays[name].shape[0]
                np.testing.assert_array_equal(
                    np.asarray(f.get_slice(name, row, row + 1)), arrays[name][row : row + 1]
                )
                raw = f.read_buffer(name, 0)
                assert bytes(raw) == arrays[name].tobytes()
                qname = sorted(expected)[(i + r) % len(expected)]
                np.testing.assert_array_equal(f[qname].dequantize(), expected[qname])
                if r % 5 == 0:
                    f.verify()
            return True

        assert all(run_threads(work))


def test_threads_open_their_own_readers(sample):
    path, arrays, _ = sample

    def work(i):
        for r in range(ROUNDS // 2):
            with hurray.open(path, mmap=(i + r) % 2 == 0, verify=r == 0) as f:
                name = sorted(arrays)[(i + r) % len(arrays)]
                np.testing.assert_array_equal(np.asarray(f[name]), arrays[name])
        return True

    assert all(run_threads(work))


def test_quantize_and_dequantize_on_threads_match_single_threaded():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    single = {}
    for s in SCHEMES:
        t = hurray.quantize(x, s)
        single[s] = ([bytes(memoryview(b)) for b in t.buffers], t.dequantize())

    def work(i):
        for r in range(len(SCHEMES)):
            s = SCHEMES[(i + r) % len(SCHEMES)]
            t = hurray.quantize(x, s, threads=1 + i % 3)
            assert [bytes(memoryview(b)) for b in t.buffers] == single[s][0]
            np.testing.assert_array_equal(t.dequantize(threads=1 + i % 2), single[s][1])
        return True

    assert all(run_threads(work))


def test_file_closed_while_tensors_are_used_on_threads(sample):
    """Tensors read from a file outlive it, also while threads use them."""
    path, arrays, expected = sample
    f = hurray.open(path)
    tensors = {name: f[name] for name in arrays}
    quantized = {name: f[name] for name in expected}
    f.close()

    def work(i):
        for name, t in tensors.items():
            np.testing.assert_array_equal(np.asarray(t), arrays[name])
        for name, t in quantized.items():
            np.testing.assert_array_equal(t.dequantize(), expected[name])
        return True

    assert all(run_threads(work))


_INDEX_FLIPPER = """
import sys, threading, time
import numpy as np, hurray
from hurray import Buffer, Descriptor, Paged, Tensor

kind = sys.argv[1]
if kind == "paged":
    pages, page_size, cols = 4096, 4, 64
    pool = np.ones((pages * page_size, cols), np.float32)
    index = np.arange(pages, dtype=np.int64)
    t = Tensor(
        Descriptor("float32", [pages * page_size, cols], layout=Paged(0, page_size, pages, "int64"),
                   buffers=[Buffer("page_pool", pool.nbytes), Buffer("page_table", index.nbytes)]),
        [pool, index],
    )
    bad = 1 << 40
else:
    n = 2048
    nnz = n * 64
    if kind == "csr":
        t = hurray.SparseTensor.from_arrays(
            "csr", (n, n), np.ones(nnz, np.float32),
            indptr=np.arange(0, nnz + 1, 64, dtype=np.int32),
            indices=np.tile(np.arange(64, dtype=np.int32), n),
        )
        index = t.parts()["indices"]
    else:
        rows = np.repeat(np.arange(n, dtype=np.int64), 64)
        cols = np.tile(np.arange(64, dtype=np.int64), n)
        t = hurray.SparseTensor.from_arrays("coo", (n, n), np.ones(nnz, np.float32),
                                            coords=np.stack([rows, cols]))
        index = t.parts()["coords"][1]
    bad = 1 << 30
calls = [t.to_dense] if kind == "paged" else [t.to_dense, t.with_statistics]
stop = False

def flip():
    while not stop:
        index[-1] = bad
        index[-1] = 0

threading.Thread(target=flip, daemon=True).start()
refused, until = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    for call in calls:
        try:
            call()
        except hurray.PlacementError:
            refused += 1
stop = True
print("refused", refused)
"""


@pytest.mark.parametrize("kind", ["csr", "coo", "paged"])
def test_index_buffers_written_by_another_thread_during_a_read_are_caught(kind):
    """Placement checks the index buffers (the caller's memory, writable)
    and the walk then read them again unchecked, with the GIL released:
    another thread flipping one entry out of range made to_dense() write or
    copy far outside its buffers (SIGSEGV within about a second). Each
    entry is now checked where it is used, too. Timing decides which check
    sees the bad value, so this runs for a while, in a child."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", _INDEX_FLIPPER, kind, "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.startswith("refused"), r.stdout


def test_a_format_source_refuses_a_call_while_another_thread_reads_it(tmp_path):
    """hurray._formats.Source.get() reads with the GIL released; close()
    from another thread freed the source under it (SIGSEGV). A HurraySource
    is for one thread at a time: the second call is refused."""
    path = tmp_path / "m.hurray"
    hurray.save(path, {f"t{i}": np.random.rand(1 << 20).astype(np.float32) for i in range(4)})
    code = f"""
import threading, time, hurray, hurray._formats as F
refused = 0
for round in range(60):
    s = F.Source({str(path)!r}, verify=True)
    started = threading.Event()
    def getter():
        started.set()
        try:
            for k in range(4):
                hurray.from_hurray(s.get(k))
        except ValueError:  # closed between two gets
            pass
    th = threading.Thread(target=getter)
    th.start()
    started.wait()
    time.sleep(0.0002 * (round % 10))
    while True:
        try:
            s.close()
            break
        except RuntimeError as exc:
            assert "in use by another thread" in str(exc), exc
            refused += 1
            time.sleep(0.001)
    th.join()
print("survived", refused > 0)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "survived True", r.stdout
