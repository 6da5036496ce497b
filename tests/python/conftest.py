import os
import pathlib
import shutil
import sys
import tempfile

import pytest

# Tests import the installed package (make python), never the source tree,
# so that the C extension is the one built by `pip install .`.
here = os.path.dirname(os.path.abspath(__file__))
repo_python = os.path.join(os.path.dirname(os.path.dirname(here)), "python")
sys.path[:] = [p for p in sys.path if os.path.abspath(p) != repo_python]


@pytest.fixture
def fast_dir(tmp_path):
    """A fresh folder, on /dev/shm when it exists (fsync is cheap there)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="hurray-test-", dir="/dev/shm")
        try:
            yield pathlib.Path(path)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path
