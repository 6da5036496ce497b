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
