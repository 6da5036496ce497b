"""Allocations of the Python heap failing one at a time (CPython's
_testcapi.set_nomemory), in a subprocess: a failure inside the bindings is a
MemoryError, never a SystemError from a result returned with an error set."""

import subprocess
import sys
import textwrap

import pytest

_testcapi = pytest.importorskip("_testcapi")
if not hasattr(_testcapi, "set_nomemory"):
    pytest.skip("this Python has no _testcapi.set_nomemory", allow_module_level=True)

SWEEP = textwrap.dedent(
    """
    import io, sys, _testcapi
    import numpy as np
    import hurray

    def sweep(what, call):
        call(); call()  # caches warm: what fails below is the call's own
        for start in range(60):
            # Only the call runs with failing allocations: repr() of a numpy
            # array under them crashed CPython 3.13.5 itself (numpy's
            # arrayprint), with no hurray code on the stack.
            try:
                _testcapi.set_nomemory(start, start + 1)
                try:
                    result = call()
                finally:
                    _testcapi.remove_mem_hooks()
                got = "ok " + " ".join(repr(result).split())[:200]
            except BaseException as e:
                got = type(e).__name__ + ": " + str(e)[:120]
            print(what, start, got, flush=True)

    t = hurray.from_numpy(np.zeros((3, 300), np.float32))  # ints past 256 allocate
    sweep("numpy", t.numpy)
    missing, corrupt = sys.argv[1], sys.argv[2]

    def open_fails(path):
        try:
            hurray.open(path)
        except hurray.HurrayError:
            pass

    sweep("open missing", lambda: open_fails(missing))
    sweep("open corrupt", lambda: open_fails(corrupt))
    sweep("save stream", lambda: hurray.save(io.BytesIO(), {"w": np.arange(4.0)}))

    def class_of_missing():
        try:
            hurray.open(missing)
        except hurray.HurrayError as e:
            return type(e)

    first = class_of_missing()
    sweep("error class", lambda: class_of_missing() is first)
    """
)


def test_a_failed_allocation_is_a_memory_error(tmp_path):
    """Tensor.numpy() of a dimension over 256 filled its shape tuple with
    unchecked ints, and a failed open raised its exception class with a
    MemoryError already set: SystemError "returned a result with an
    exception set" instead of MemoryError."""
    corrupt = tmp_path / "corrupt.hurray"
    corrupt.write_bytes(b"\x89HRY\r\n\x1a\n" + bytes(200))
    run = subprocess.run(
        [sys.executable, "-c", SWEEP, str(tmp_path / "missing.hurray"), str(corrupt)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(lines) == 5 * 60, run.stdout[-2000:]
    # CPython 3.11's own frame clean-up under failing allocations can lose
    # the MemoryError ("returned NULL without setting an exception"); only
    # a result returned with an error set is the bindings'.
    bad = [line for line in lines if "with an exception set" in line]
    assert not bad, bad[:5]
    # A MemoryError while looking for write() was "save() needs a path, a
    # file descriptor or a writable stream" (TypeError).
    assert not [line for line in lines if line.startswith("save stream") and "TypeError" in line]
    # One while finding the errno's class replaced the class cache: later
    # errors were a second HurrayFileNotFoundError that handlers of the
    # first miss.
    assert not [line for line in lines if line.startswith("error class") and "ok False" in line]
    assert any("MemoryError" in line for line in lines if line.startswith("numpy"))
