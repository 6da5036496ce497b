"""A file shrunk in place (by `cp`, a truncating writer, ...) under an open
hurray.File: asking File.verify() whether it is sound must answer with an
error, not die of SIGBUS. Each case runs in a subprocess, as a crash would
otherwise take pytest with it."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hurray

_CHILD = textwrap.dedent(
    """
    import os, sys, hurray
    path, mode, name = sys.argv[1], sys.argv[2], sys.argv[3] or None
    f = hurray.open(path, **({"readonly": True} if mode == "readonly" else {}))
    os.truncate(path, 100)
    try:
        f.verify(name)
    except hurray.FormatError as exc:
        print("refused", exc.status_name, exc)
    else:
        print("passed")
    """
)


@pytest.mark.parametrize("name", ["", "w"])
@pytest.mark.parametrize("mode", ["private", "readonly"])
def test_verify_of_a_file_truncated_since_open_is_an_error(tmp_path, mode, name):
    """verify(name) looked the name up in the index, at the end the shrink
    cut off, before it checked the size: SIGBUS."""
    path = tmp_path / "m.hurray"
    hurray.save(path, {"w": np.arange(1 << 16, dtype=np.float32)})
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), mode, name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.startswith("refused HURRAY_ERR_TRUNCATED"), r.stdout
    assert "truncated or rewritten in place" in r.stdout


def test_verify_with_pread_of_a_file_cut_after_its_buffers_is_an_error(tmp_path):
    """With mmap=False the index is copied at open and the buffers read
    with pread: a file whose trailer was cut off since (every buffer still
    intact) passed verify(), though it no longer opens."""
    path = tmp_path / "m.hurray"
    hurray.save(path, {"w": np.arange(1 << 16, dtype=np.float32)})
    f = hurray.open(path, mmap=False)
    os.truncate(path, os.path.getsize(path) - 100)
    with pytest.raises(hurray.FormatError, match="truncated or rewritten in place") as info:
        f.verify()
    assert info.value.status_name == "HURRAY_ERR_TRUNCATED"
    with pytest.raises(hurray.FormatError):
        hurray.open(path)


_REWRITE_CHILD = textwrap.dedent(
    """
    import os, sys, hurray
    path, mode, other = sys.argv[1], sys.argv[2], sys.argv[3]
    f = hurray.open(path, **({"readonly": True} if mode == "readonly" else {}))
    names = f.keys()
    if other:
        with open(other, "rb") as src, open(path, "r+b") as dst:
            dst.write(src.read())
    else:
        with open(path, "r+b") as dst:
            dst.seek(os.path.getsize(path) - 2048)
            dst.write(bytes([0xA5]) * 2048)
    print("keys", f.keys() == names)
    print("shape", f.shape(names[-1]))
    print("sum", float(f[names[-1]].numpy().sum()))
    try:
        f.verify()
    except hurray.ChecksumError as exc:
        print("verify", exc.status_name)
    else:
        print("verify passed")
    """
)


@pytest.mark.parametrize("mode", ["private", "readonly"])
@pytest.mark.parametrize("how", ["index", "another file"])
def test_a_file_rewritten_in_place_at_its_size_is_no_crash(tmp_path, mode, how):
    """The index was read in place from a shared mapping after it had been
    checked at open: written over (by `cp` of another file at least as
    large, or its last bytes alone), keys() and verify() followed lengths
    of 2^62 and names past the index (SIGSEGV). The index is now read into
    the reader's own memory, so the names and layout stay those of the file
    opened, and only the buffers' bytes follow the file."""
    path = tmp_path / "m.hurray"
    tensors = {f"w{i}": np.arange(1 << 14, dtype=np.float32) for i in range(20)}
    hurray.save(path, tensors)
    other = ""
    if how == "another file":
        other = str(tmp_path / "other.hurray")
        hurray.save(other, {f"layer.{i}": np.ones(5 << 12, np.float32) for i in range(19)})
        assert os.path.getsize(other) >= os.path.getsize(path)
    r = subprocess.run(
        [sys.executable, "-c", _REWRITE_CHILD, str(path), mode, other],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    lines = r.stdout.splitlines()
    assert lines[:2] == ["keys True", "shape (16384,)"], r.stdout
    if how == "index":
        expected = float(np.arange(1 << 14, dtype=np.float32).sum())
        assert lines[2:] == [f"sum {expected}", "verify passed"], r.stdout
    else:
        assert lines[3] == "verify HURRAY_ERR_CHECKSUM", r.stdout


def test_file_path_is_the_path_opened(tmp_path):
    """File() asked a PathLike for its path twice (to open, then for
    File.path): one that answers differently each time left f.path naming
    another file than the one opened."""
    for name in ("a", "b"):
        hurray.save(tmp_path / f"{name}.hurray", {name: np.ones(2, np.float32)})

    class Shifting:
        answers = iter(["a", "b"])

        def __fspath__(self):
            return str(tmp_path / f"{next(self.answers)}.hurray")

    f = hurray.open(Shifting())
    assert f.keys() == ["a"] and f.path == str(tmp_path / "a.hurray")
