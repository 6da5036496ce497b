import os
import pathlib
import shutil
import signal
import sys
import tempfile

import pytest

# Several tests send SIGINT to a child Python and expect KeyboardInterrupt.
# A pytest started with SIGINT ignored (in the background by a shell without
# job control: `sh -c 'make test &'`, `nohup ... &`) would hand "ignored" on
# to every child, since it survives exec; a handler of our own is reset to
# the default in the child instead.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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
