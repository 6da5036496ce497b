"""A thread the system refuses (RLIMIT_NPROC, a cgroup's pids.max, no memory
for a stack) makes the C kernels do the work on the calling thread. The
Python-side pools failed instead: `hurray convert --quantize` with threads
ended in "internal error: RuntimeError: can't start new thread", and
hurray.torch.load_file(..., dequantize=...) raised it. Thread.start is made
to fail here as it does under those limits."""

import threading

import numpy as np
import pytest

import hurray
from hurray._threads import map_on_threads
from hurray.convert import convert


def _refuse_threads(monkeypatch):
    """Every new thread's start fails, as CPython's does under RLIMIT_NPROC."""

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)


@pytest.fixture
def threads_refused(monkeypatch):
    _refuse_threads(monkeypatch)


@pytest.mark.parametrize("refused", [False, True])
def test_map_on_threads_runs_every_item_once_in_order(monkeypatch, refused):
    if refused:
        _refuse_threads(monkeypatch)
    seen = []
    lock = threading.Lock()

    def square(x):
        with lock:
            seen.append(x)
        return x * x

    assert map_on_threads(square, range(100), 4) == [x * x for x in range(100)]
    assert sorted(seen) == list(range(100))


def test_map_on_threads_raises_the_first_failure_and_drops_the_rest():
    ran = []

    def fail_at_3(x):
        ran.append(x)
        if x == 3:
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 3"):
        map_on_threads(fail_at_3, range(1000), 1)
    assert ran == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="item 3"):
        map_on_threads(fail_at_3, range(1000), 4)


def test_convert_quantize_on_threads_when_no_thread_starts(tmp_path, threads_refused):
    src = tmp_path / "m.hurray"
    w = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    hurray.save(src, {"layer.weight": w})
    report = convert(src, tmp_path / "q.hurray", quantize="nf4", threads=4, quiet=True)
    assert report.rows[0].quantized and report.rows[0].max_abs_error > 0
    with hurray.open(tmp_path / "q.hurray") as f:
        f.verify()
        assert f["layer.weight"].descriptor.quantization is not None


def test_torch_load_file_dequantizes_when_no_thread_starts(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import hurray.torch as ht

    src = tmp_path / "m.hurray"
    rng = np.random.default_rng(0)
    hurray.save(
        src,
        {f"l{i}.weight": rng.standard_normal((64, 64)).astype(np.float32) for i in range(8)},
    )
    q = tmp_path / "q.hurray"
    convert(src, q, quantize="q8_0", quiet=True)
    expected = ht.load_file(q, dequantize=torch.float32)
    _refuse_threads(monkeypatch)
    got = ht.load_file(q, dequantize=torch.float32)
    assert sorted(got) == sorted(expected)
    for name in got:
        assert torch.equal(got[name], expected[name]), name
