"""Python's object protocols on hurray's types, as an attacker uses them: the
buffer protocol with every request flag, pickling at every protocol, the
collector's view of cycles, and a fork while another thread holds a File.
Each test failed on the code before its fix; what may crash runs in a
subprocess."""

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import hurray


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ------------------------------------------------------------ buffer protocol


def test_simple_buffer_request_of_a_matrix_is_one_dimension():
    """PyBUF_SIMPLE has no shape; ndim said 2 and a consumer that read shape
    dereferenced NULL (a segfault from the standard library's _testbuffer)."""
    r = run_python(
        """
        import numpy as np, hurray, hashlib
        from _testbuffer import ndarray, PyBUF_SIMPLE
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        t = hurray.from_numpy(a)
        nd = ndarray(t, getbuf=PyBUF_SIMPLE)
        assert nd.ndim == 1 and nd.nbytes == 48, (nd.ndim, nd.nbytes)
        assert hashlib.sha256(t).hexdigest() == hashlib.sha256(a).hexdigest()
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_fortran_contiguous_request_of_a_matrix_is_refused():
    """Row-major memory was handed out as column-major: a Fortran-order
    consumer read the matrix transposed."""
    from _testbuffer import PyBUF_F_CONTIGUOUS, PyBUF_FORMAT, ndarray

    t = hurray.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3))
    with pytest.raises(BufferError, match="Fortran"):
        ndarray(t, getbuf=PyBUF_F_CONTIGUOUS | PyBUF_FORMAT)
    # Where the orders agree (one long dimension), it is granted.
    row = hurray.from_numpy(np.arange(6, dtype=np.int32).reshape(1, 6))
    assert ndarray(row, getbuf=PyBUF_F_CONTIGUOUS | PyBUF_FORMAT).tolist() == [list(range(6))]


# ------------------------------------------------------------------ pickling


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_tensors_and_readers_refuse_every_pickle_protocol(tmp_path, protocol):
    """Protocols 0 and 1 went through copyreg and made empty objects that
    failed on first use ("Tensor is not initialised")."""
    path = tmp_path / "a.hurray"
    hurray.save(path, {"a": np.ones(3)})
    t = hurray.from_numpy(np.ones(3))
    sparse = hurray.SparseTensor.from_arrays("coo", (3,), np.ones(1), coords=[np.array([1])])
    with hurray.open(path) as f:
        for value in (t, sparse, f["a"], f._file):
            with pytest.raises(TypeError, match="cannot be copied or pickled"):
                pickle.dumps(value, protocol)


# ------------------------------------------------------------ the collector


def test_a_cycle_through_a_buffer_view_is_collected():
    """A subclass instance keeping its own tensor.buffers made a cycle
    through the buffer view the collector could not see."""

    class Keeper(hurray.Tensor):
        pass

    refs = []
    for _ in range(20):
        t = Keeper.__new__(Keeper)
        t.__init__(hurray.from_numpy(np.ones(4)).descriptor, [np.ones(4).view(np.uint8)])
        t.views = t.buffers
        refs.append(weakref.ref(t))
        del t
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_a_class_made_at_run_time_holding_its_instance_is_collected():
    """A tensor of a __slots__ = () subclass was left untracked, though its
    class, made at run time, could hold it: the class and instance leaked."""
    refs = []
    for _ in range(20):
        cls = type("Dynamic", (hurray.Tensor,), {"__slots__": ()})
        cls.instance = cls(hurray.from_numpy(np.ones(4)).descriptor, [np.ones(4).view(np.uint8)])
        refs.append(weakref.ref(cls))
        del cls
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


# ---------------------------------------------------------------------- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_thread_holds_the_file_can_use_it(tmp_path):
    """The File's lock was inherited held by a thread that does not exist in
    the child, which then waited for it forever."""
    path = tmp_path / "a.hurray"
    hurray.save(path, {f"t{i}": np.full(1 << 16, i, np.float32) for i in range(8)})
    r = run_python(
        f"""
        import os, threading, hurray, faulthandler
        f = hurray.open({str(path)!r})
        stop = False
        def busy():
            while not stop:
                f.verify()
        th = threading.Thread(target=busy)
        th.start()
        codes = []
        for _ in range(10):
            pid = os.fork()
            if pid == 0:
                faulthandler.dump_traceback_later(20, exit=True)
                ok = len(f.keys()) == 8 and f["t3"].numpy()[0] == 3
                os._exit(0 if ok else 3)
            codes.append(os.waitpid(pid, 0)[1])
        stop = True
        th.join()
        print(codes)
        """,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == str([0] * 10), r.stdout + r.stderr[-2000:]


def _blocked_in_a_call(tmp_path, *then: str) -> str:
    """A script whose File reads through fsspec's memory file system,
    calling on_call() (which a part of `then` defines) inside each of its reads."""
    pytest.importorskip("fsspec")
    path = tmp_path / "a.hurray"
    hurray.save(path, {"a": np.arange(1 << 16, dtype=np.float32)})
    head = f"""
        import os, threading, fsspec, hurray
        from fsspec.implementations.memory import MemoryFileSystem
        fsspec.filesystem("memory").pipe("/f.hurray", open({str(path)!r}, "rb").read())
        f = hurray.open("memory://f.hurray")
        inside, leave = threading.Event(), threading.Event()
        original = MemoryFileSystem.cat_file
        def cat_file(self, path, start=None, end=None, **kw):
            on_call()
            return original(self, path, start=start, end=end, **kw)
        MemoryFileSystem.cat_file = cat_file
        """
    return "".join(textwrap.dedent(part) for part in (head, *then))


# A thread of the script inside a File call, held there until `leave` is set.
_HOLDER_INSIDE = """
def on_call():
    if threading.current_thread() is not threading.main_thread():
        inside.set()
        leave.wait()
holder = threading.Thread(target=lambda: f["a"])
holder.start()
inside.wait()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_thread_given_the_ident_of_the_forked_away_holder_can_use_the_file(tmp_path):
    """A thread of the parent was inside a File call at the fork. In the
    child a new thread may get that thread's ident (glibc reuses its stack),
    and every call it made was refused as a re-entry, for good."""
    r = run_python(
        _blocked_in_a_call(
            tmp_path,
            _HOLDER_INSIDE,
            """
            pid = os.fork()
            if pid == 0:
                out = []
                def use():
                    try:
                        out.append((threading.get_ident(), f.keys()))
                    except RuntimeError as e:
                        out.append((threading.get_ident(), str(e)))
                for _ in range(8):
                    t = threading.Thread(target=use)
                    t.start()
                    t.join()
                same = [r for i, r in out if i == holder.ident]
                print("reused" if same else "not reused", same[:1], flush=True)
                os._exit(0 if all(r == ["a"] for i, r in out) else 3)
            status = os.waitpid(pid, 0)[1]
            leave.set()
            holder.join()
            print("child", status)
            """,
        ),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "child 0", r.stdout
    if "not reused" in r.stdout:
        pytest.skip("no thread of the child was given the holder's ident")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_grandchild_forked_by_a_thread_with_the_holders_ident_can_use_the_file(tmp_path):
    """Past one fork, the thread that made the latest fork was taken for the
    owner whenever it had the owner's ident: a child's thread given the
    vanished holder's ident that forked again lost the File in the
    grandchild, where it is the only thread."""
    r = run_python(
        _blocked_in_a_call(
            tmp_path,
            _HOLDER_INSIDE,
            """
            pid = os.fork()
            if pid == 0:
                out = []
                def fork_again():
                    if threading.get_ident() != holder.ident:
                        return
                    grandchild = os.fork()
                    if grandchild == 0:
                        try:
                            os._exit(0 if f.keys() == ["a"] else 3)
                        except RuntimeError:
                            os._exit(4)
                    out.append(os.waitpid(grandchild, 0)[1])
                for _ in range(8):
                    t = threading.Thread(target=fork_again)
                    t.start()
                    t.join()
                print("statuses", out, flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
            leave.set()
            holder.join()
            """,
        ),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    statuses = r.stdout.split("statuses", 1)[1].strip()
    if statuses == "[]":
        pytest.skip("no thread of the child was given the holder's ident")
    assert set(statuses.strip("[]").split(", ")) == {"0"}, r.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_in_a_child_forked_from_inside_a_call_other_threads_wait_for_it(tmp_path):
    """The thread that forked from inside a call is still in it in the
    child; another thread there found the lock of an earlier generation
    and made a fresh one, and so used the reader beside the call."""
    r = run_python(
        _blocked_in_a_call(
            tmp_path,
            """
            import time
            order, others = [], []
            def on_call():
                if not inside.is_set():
                    return
                inside.clear()
                pid = os.fork()
                if pid == 0:
                    other = threading.Thread(target=lambda: (f.keys(), order.append("other")))
                    other.start()
                    others.append(other)
                    time.sleep(0.3)  # still inside the call
                    order.append("call ends")
                    return
                os.waitpid(pid, 0)
            inside.set()
            f["a"]
            if order:  # the child, out of the call
                others[0].join(10)
                print(order, flush=True)
                os._exit(0)
            """,
        ),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "['call ends', 'other']" in r.stdout, r.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_from_inside_a_call_still_refuses_to_reenter_it(tmp_path):
    """The thread that forks from inside a File call is still inside it in
    the child: a call from there must raise, or closing the File would free
    the reader under the call it returns to."""
    r = run_python(
        _blocked_in_a_call(
            tmp_path,
            """
            def on_call():
                if not inside.is_set():
                    return
                inside.clear()
                pid = os.fork()
                if pid == 0:
                    try:
                        f.close()
                        os._exit(3)
                    except RuntimeError as e:
                        os._exit(0 if "in use by this thread" in str(e) else 4)
                print("child", os.waitpid(pid, 0)[1], flush=True)
            inside.set()
            assert f["a"].numpy()[5] == 5
            """,
        ),
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "child 0" in r.stdout.splitlines(), r.stdout


# --------------------------------------------------------------------- DLPack


@pytest.mark.parametrize("device", ["cpu", [1, 0], 1])
def test_dlpack_device_that_is_not_a_tuple_is_a_type_error(device):
    """It was SystemError: PyArg_ParseTuple was given a non-tuple."""
    t = hurray.from_numpy(np.ones(3))
    with pytest.raises(TypeError, match="dl_device must be a"):
        t.__dlpack__(dl_device=device)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_threads_of_a_child_forked_from_an_idle_file_take_turns(tmp_path):
    """A child's second thread, finding the lock taken by its first, took the
    fork for an inherited lock and made a new one: the two then ran inside
    the File together, and close() could free the reader under a read. (B
    can only finish first if it did not wait; under load it may start late
    and prove nothing, never the reverse. It waits for A to have started: a
    CI machine under load once started A more than 2 ms after B.)"""
    path = tmp_path / "big.hurray"
    hurray.save(path, {"big": np.ones(16 << 20, np.float32)})
    r = run_python(
        f"""
        import os, threading, time, hurray
        f = hurray.File({str(path)!r}, mmap=False)
        out = bytearray(64 << 20)
        def race():
            done = {{}}
            started = threading.Event()  # b's head start is counted from a's start
            def a():
                started.set()
                f.read_buffer("big", 0, out)
                done["a"] = time.perf_counter()
            def b():
                started.wait()
                time.sleep(0.005)
                f.keys()
                done["b"] = time.perf_counter()
            ta, tb = threading.Thread(target=a), threading.Thread(target=b)
            ta.start(); tb.start(); ta.join(); tb.join()
            return done["b"] >= done["a"]
        pid = os.fork()
        if pid == 0:
            os._exit(0 if all(race() for _ in range(5)) else 3)
        print(os.waitpid(pid, 0)[1])
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr[-2000:]


def test_a_subclass_may_define_how_it_pickles():
    class Saved(hurray.Tensor):
        def __reduce__(self):
            return (hurray.from_numpy, (self.numpy().copy(),))

    t = Saved(hurray.from_numpy(np.arange(3.0)).descriptor, [np.arange(3.0).view(np.uint8)])
    back = pickle.loads(pickle.dumps(t, 2))
    assert back.numpy().tolist() == [0.0, 1.0, 2.0]


def test_with_statistics_keeps_a_subclass():
    class Mine(hurray.Tensor):
        pass

    t = hurray.from_numpy(np.arange(4.0))
    s = Mine(t.descriptor, list(t.buffers)).with_statistics()
    assert type(s) is Mine
    assert (s.descriptor.statistics.min, s.descriptor.statistics.max) == (0.0, 3.0)


# ------------------------------------------------------------ lifecycle


def test_a_buffer_view_cannot_be_made_without_its_tensor():
    """type(t.buffers[0].obj)() made an empty view, and reading it
    (memoryview, numpy, bytes) dereferenced its missing tensor: SIGSEGV."""
    r = run_python(
        """
        import numpy as np, hurray
        view_type = type(hurray.from_numpy(np.arange(4, dtype=np.float32)).buffers[0].obj)
        for make in (view_type, lambda: view_type.__new__(view_type)):
            try:
                v = make()
            except TypeError as exc:
                print("refused:", exc)
            else:
                memoryview(v)
                print("made")
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("refused:") == 2, r.stdout


def test_hurray_refuses_a_subinterpreter_instead_of_hanging():
    """In a subinterpreter, releasing a Python-owned buffer took the GIL
    through PyGILState_Ensure, which knows only the main interpreter: the
    process hung. The import now fails cleanly there: in a legacy (shared
    GIL) interpreter through the module's own check, in an isolated one
    (3.12 and later) through Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED.
    _xxsubinterpreters is _interpreters from 3.13, with another API."""
    r = run_python(
        """
        import hurray  # the main interpreter keeps working
        try:
            import _interpreters  # 3.13 and later

            def run(config):
                iid = _interpreters.create(config)
                try:
                    err = _interpreters.exec(iid, "import hurray")
                finally:
                    _interpreters.destroy(iid)
                return "imported" if err is None else "refused: " + err.formatted
        except ModuleNotFoundError:
            import _xxsubinterpreters as interpreters  # 3.11, 3.12

            def run(config):
                iid = interpreters.create(isolated=config == "isolated")
                try:
                    interpreters.run_string(iid, "import hurray")
                except interpreters.RunFailedError as exc:
                    return "refused: " + str(exc)
                finally:
                    interpreters.destroy(iid)
                return "imported"

        print("legacy", run("legacy"))
        print("isolated", run("isolated"))
        import numpy as np
        t = hurray.from_numpy(np.arange(4, dtype=np.float32))
        del t
        print("main ok")
        """,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("legacy refused: ") and "ImportError" in lines[0], lines
    assert "hurray._hurray cannot be imported in a subinterpreter" in lines[0], lines
    assert lines[1].startswith("isolated refused: ") and "ImportError" in lines[1], lines
    assert "subinterpreter" in lines[1], lines
    assert lines[-1] == "main ok"


def test_a_descriptor_subclass_decoded_stays_collectable():
    """decode() on a Descriptor subclass left the instance untracked by the
    collector, like a plain descriptor; a cycle through its __dict__ was
    never collected."""

    class Mine(hurray.Descriptor):
        pass

    enc = hurray.Descriptor(
        dtype="float32", shape=(4,), buffers=[hurray.Buffer(role="data", byte_size=16)]
    ).encode()
    d = Mine.decode(enc)
    assert gc.is_tracked(d)
    d.__dict__["me"] = {"owner": d}  # what a cached_property stores
    r = weakref.ref(d)
    del d
    gc.collect()
    assert r() is None
