"""Tests of the `hurray` command: output, exit codes and help, on a file
written by examples/checkpoint.c. Stdlib only.

usage: test_cli.py HURRAY_BINARY CHECKPOINT_EXAMPLE_BINARY
"""

import ast
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import unittest

HURRAY = CHECKPOINT = None


def run(*args):
    return subprocess.run([HURRAY, *args], capture_output=True)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.path = os.path.join(cls.tmp.name, "demo.hurray")
        subprocess.run([CHECKPOINT, cls.path], check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_help_and_usage_errors(self):
        for flag in ("--help", "-h", "help"):
            out = run(flag)
            self.assertEqual(out.returncode, 0)
            self.assertIn(b"usage: hurray", out.stdout)
        self.assertEqual(run("ls", "--help").returncode, 0)
        for args in [
            (),
            ("bogus",),
            ("ls",),
            ("ls", "a", "b"),
            ("ls", "--json", self.path),
            ("cat", self.path),
            ("cat", "--buffer", "x", self.path, "n"),
            ("info", self.path, "a", "b"),
            ("frob", "--help"),  # it printed the help and exited 0
        ]:
            out = run(*args)
            self.assertEqual(out.returncode, 2, args)
            self.assertEqual(out.stdout, b"", args)
            self.assertIn(b"hurray", out.stderr)
        # Help and version check their write as every command does.
        if os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode):
            for flag in ("--help", "--version"):
                with open("/dev/full", "w") as full:
                    failed = subprocess.run([HURRAY, flag], stdout=full, stderr=subprocess.PIPE)
                self.assertEqual(failed.returncode, 1, flag)
                self.assertIn(b"writing to stdout failed", failed.stderr)
        version = run("--version")
        self.assertEqual(version.returncode, 0)
        self.assertRegex(version.stdout.decode(), r"hurray \d+\.\d+\.\d+ \(C ABI 3")

    def test_ls(self):
        out = run("ls", self.path)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.decode().splitlines()
        self.assertTrue(lines[0].startswith("NAME"))
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        self.assertEqual(sorted(rows), ["embed.weight", "graph.adjacency", "layers.0.proj.weight"])
        self.assertEqual(rows["embed.weight"][1], "float32")
        self.assertIn("[16, 8]", lines[1 + sorted(rows).index("embed.weight")])
        self.assertEqual(rows["embed.weight"][-1], str(16 * 8 * 4))
        proj = rows["layers.0.proj.weight"]
        self.assertEqual(proj[-3:], ["dense", "per-channel-affine", str(128 + 32)])
        self.assertEqual(rows["graph.adjacency"][-3:], ["sparse-csr", "-", str(48 + 20 + 24)])

    def test_info_text_and_json(self):
        out = run("info", self.path)
        self.assertEqual(out.returncode, 0, out.stderr)
        text = out.stdout.decode()
        self.assertIn("tensors: 3", text)
        self.assertIn("model = hurray-demo", text)
        self.assertIn("step = 1000", text)
        self.assertIn('"scale_buffer": 1', text)
        out = run("info", "--json", self.path)
        self.assertEqual(out.returncode, 0, out.stderr)
        doc = json.loads(out.stdout)
        self.assertEqual(
            doc["metadata"], {"ema": False, "loss": 0.125, "model": "hurray-demo", "step": 1000}
        )
        proj = doc["tensors"]["layers.0.proj.weight"]
        self.assertEqual(proj["quantization"]["kind"], "per_channel_affine")
        self.assertEqual([b["role"] for b in proj["buffers"]], ["data", "scales"])
        one = json.loads(run("info", "--json", self.path, "graph.adjacency").stdout)
        self.assertEqual(list(one["tensors"]), ["graph.adjacency"])
        self.assertEqual(one["tensors"]["graph.adjacency"]["layout"]["format"], "csr")
        missing = run("info", self.path, "nope")
        self.assertEqual(missing.returncode, 1)
        # The file named, as in every other message (it was the status name).
        self.assertEqual(
            missing.stderr, b"hurray: " + self.path.encode() + b': no tensor "nope" in the file\n'
        )

    def test_verify_counts_agree_with_their_nouns(self):
        # One tensor of one buffer was "OK, 1 tensors, 1 buffers verified".
        header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
        src = os.path.join(self.tmp.name, "one.safetensors")
        with open(src, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + bytes(8))
        one = os.path.join(self.tmp.name, "one.hurray")
        converted = run("convert", src, one)
        self.assertEqual(converted.returncode, 0, converted.stderr)
        out = run("verify", one)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.endswith(b": OK, 1 tensor, 1 buffer verified\n"), out.stdout)

    def test_verify_detects_corruption(self):
        out = run("verify", self.path)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"OK, 3 tensors, 6 buffers verified", out.stdout)
        data = bytearray(open(self.path, "rb").read())
        bad = os.path.join(self.tmp.name, "bad.hurray")
        data[64] ^= 0x01  # first byte of the first buffer
        open(bad, "wb").write(data)
        out = run("verify", bad)
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"checksum mismatch", out.stderr)
        data[64] ^= 0x01
        data[-1] ^= 0x01  # trailer magic
        open(bad, "wb").write(data)
        for command in ("ls", "info", "verify"):
            out = run(command, bad)
            self.assertEqual(out.returncode, 1, command)
            self.assertIn(b"truncated", out.stderr)
        self.assertEqual(run("ls", os.path.join(self.tmp.name, "missing")).returncode, 1)

    def test_verify_names_every_corrupt_tensor(self):
        # verify checks the whole file in one pass and, only when that
        # fails, tensor by tensor: every bad tensor is still named.
        names = [line.split()[0] for line in run("ls", self.path).stdout.decode().splitlines()[1:]]
        data = bytearray(open(self.path, "rb").read())
        bad_names = names[:2]
        for name in bad_names:
            raw = run("cat", self.path, name).stdout
            at = data.find(raw)
            self.assertGreater(at, 0, name)
            data[at + len(raw) // 2] ^= 0x40
        bad = os.path.join(self.tmp.name, "two-bad.hurray")
        open(bad, "wb").write(data)
        out = run("verify", bad)
        self.assertEqual(out.returncode, 1)
        self.assertEqual(out.stdout, b"")
        lines = out.stderr.decode().splitlines()
        self.assertEqual(len(lines), 2, lines)
        for name, line in zip(bad_names, lines):
            self.assertIn(f'tensor "{name}"', line)
            self.assertIn("checksum mismatch", line)

    def test_cat_raw_and_npy(self):
        raw = run("cat", self.path, "layers.0.proj.weight", "--buffer", "1")
        self.assertEqual(raw.returncode, 0, raw.stderr)
        scales = struct.unpack("<8f", raw.stdout)
        self.assertAlmostEqual(scales[3], 0.04, places=6)
        out = run("cat", "--npy", self.path, "embed.weight")
        self.assertEqual(out.returncode, 0, out.stderr)
        blob = out.stdout
        self.assertEqual(blob[:8], b"\x93NUMPY\x01\x00")
        header_len = struct.unpack("<H", blob[8:10])[0]
        self.assertEqual((10 + header_len) % 64, 0)
        header = ast.literal_eval(blob[10 : 10 + header_len].decode("latin1"))
        self.assertEqual(header, {"descr": "<f4", "fortran_order": False, "shape": (16, 8)})
        values = struct.unpack("<128f", blob[10 + header_len :])
        self.assertEqual(values[:3], (0.0, 0.25, 0.5))
        refused = run("cat", "--npy", self.path, "layers.0.proj.weight")
        self.assertEqual(refused.returncode, 1)
        self.assertIn(b"--npy needs", refused.stderr)
        self.assertEqual(run("cat", self.path, "graph.adjacency", "--buffer", "3").returncode, 1)
        self.assertEqual(run("cat", self.path, "nope").returncode, 1)

    def test_cat_checks_the_tensor_it_writes(self):
        """cat wrote a damaged tensor's bytes and exited 0."""
        name = "embed.weight"
        good = run("cat", self.path, name).stdout
        data = bytearray(open(self.path, "rb").read())
        at = data.find(good)
        self.assertGreater(at, 0)
        data[at + 5] ^= 0x10
        bad = os.path.join(self.tmp.name, "cat-bad.hurray")
        open(bad, "wb").write(data)
        for extra in ((), ("--npy",)):
            out = run("cat", *extra, bad, name)
            self.assertEqual((out.returncode, out.stdout), (1, b""), extra)
            self.assertIn(b"checksum mismatch", out.stderr)
            self.assertIn(b"--no-verify writes the bytes anyway", out.stderr)
        out = run("cat", "--no-verify", bad, name)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, bytes(data[at : at + len(good)]))
        # Another tensor of the damaged file is whole: cat writes it.
        out = run("cat", bad, "layers.0.proj.weight", "--buffer", "1")
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_cat_no_verify_writes_the_buffers_of_a_sparse_tensor_with_damaged_indices(self):
        """A column index past the matrix failed the tensor's placement
        check, and --no-verify then wrote none of its buffers, the intact
        values included."""
        name = "graph.adjacency"  # CSR: values, indptr, indices (int32)
        stored = [run("cat", self.path, name, "--buffer", str(k)).stdout for k in range(3)]
        data = bytearray(open(self.path, "rb").read())
        at = data.find(stored[2])
        self.assertGreater(at, 0)
        data[at : at + 4] = struct.pack("<i", 99)  # the first column index, of 5 columns
        bad = os.path.join(self.tmp.name, "cat-bad-index.hurray")
        open(bad, "wb").write(data)
        self.assertEqual(run("cat", bad, name, "--buffer", "0").returncode, 1)
        stored[2] = struct.pack("<i", 99) + stored[2][4:]  # as it is now stored
        for k in range(3):
            out = run("cat", "--no-verify", bad, name, "--buffer", str(k))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, stored[k])
        out = run("cat", "--no-verify", bad, name, "--buffer", "3")
        self.assertEqual(out.returncode, 1)
        self.assertIn(b"--buffer 3 is out of range", out.stderr)

    def test_cat_refuses_a_terminal_unless_forced(self):
        import pty

        args = ("cat", self.path, "layers.0.proj.weight", "--buffer", "1")
        for extra, code in (((), 2), (("--force",), 0)):
            main, tty = pty.openpty()
            try:
                p = subprocess.run([HURRAY, *args, *extra], stdout=tty, stderr=subprocess.PIPE)
            finally:
                os.close(tty)
                os.close(main)
            self.assertEqual(p.returncode, code, p.stderr)
            if code:
                self.assertIn(b"stdout is a terminal", p.stderr)

    def test_output_that_does_not_arrive_is_a_failure(self):
        """ls, info and verify exited 0 with stdout on a full disk or closed."""
        if not stat.S_ISCHR(os.stat("/dev/full").st_mode):
            self.skipTest("/dev/full is not the full device here")
        for args in (("ls", self.path), ("info", self.path), ("verify", self.path)):
            with open("/dev/full", "wb") as full:
                out = subprocess.run([HURRAY, *args], stdout=full, stderr=subprocess.PIPE)
            self.assertEqual(out.returncode, 1, args)
            self.assertIn(b"writing to stdout failed", out.stderr)
            closed = subprocess.run(
                [HURRAY, *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(),
                preexec_fn=lambda: os.close(1),
            )
            self.assertEqual(closed.returncode, 1, args)

    def test_double_dash_ends_options(self):
        names = [line.split()[0] for line in run("ls", self.path).stdout.decode().splitlines()[1:]]
        out = run("info", "--", self.path, names[0])
        self.assertEqual(out.returncode, 0, out.stderr)
        out = run("info", self.path, "-x")
        self.assertEqual(out.returncode, 2)
        self.assertIn(b"put -- before", out.stderr)
        out = run("info", self.path, "--", "-x")
        self.assertEqual(out.returncode, 1)  # a NAME now: not in the file
        for bad in ("", " 1", "99999999999999999999999"):
            out = run("cat", "--buffer", bad, self.path, names[0])
            self.assertEqual(out.returncode, 2, bad)


def run_limited(*args, timeout=20):
    """run(), but a hang fails the test instead of stalling the suite."""
    try:
        return subprocess.run([HURRAY, *args], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hurray {' '.join(args)} hung for {timeout} s")


def controls(data):
    """The control bytes a terminal would act on, other than newline."""
    return sorted({b for b in data if (b < 0x20 and b != 0x0A) or b == 0x7F})


SEEDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "fuzz",
    "corpus",
    "fuzz_cli",
)


class CliHardeningTest(unittest.TestCase):
    """Issue 14: what the CLI must not do with a hostile but valid file."""

    def test_npy_header_of_rank_32(self):
        # A valid rank-32 tensor with one empty dimension and 2**62 in the
        # others. Its .npy header (~700 bytes) once overflowed a fixed
        # 512-byte buffer; numpy refuses the shape (the dimensions other
        # than 0 multiply past int64, np.load fails), so it is refused
        # before any header is written.
        path = os.path.join(SEEDS, "seed-rank32_empty")
        out = run_limited("cat", "--npy", path, "wide")
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertEqual(out.stdout, b"")
        self.assertIn(b"beyond numpy's int64 sizes", out.stderr)

    def test_npy_refuses_what_numpy_cannot_express(self):
        # A valid empty tensor of shape (0, 2**63): numpy shapes are int64.
        path = os.path.join(SEEDS, "seed-npy_beyond_int64")
        out = run_limited("cat", "--npy", path, "beyond")
        self.assertEqual(out.returncode, 1)
        self.assertEqual(out.stdout, b"")
        self.assertTrue(out.stderr.startswith(b"hurray: " + path.encode() + b": "), out.stderr)
        self.assertIn(b"int64", out.stderr)
        raw = run_limited("cat", path, "beyond")  # raw bytes: nothing to refuse
        self.assertEqual(raw.returncode, 0, raw.stderr)

    def test_human_output_escapes_control_characters(self):
        path = os.path.join(SEEDS, "seed-hostile_names")
        for args in (("ls", path), ("info", path), ("verify", path)):
            out = run_limited(*args)
            self.assertEqual(out.returncode, 0, (args, out.stderr))
            self.assertEqual(controls(out.stdout), [], (args, out.stdout))
        ls = run_limited("ls", path).stdout.decode()
        self.assertIn("evil\\x1b[2J\\x1b]0;title\\x07\\rname\\u{202e}", ls)
        info = run_limited("info", path).stdout.decode()
        self.assertIn("key\\x1b[31m = value\\r\\x07\\x1b[0m\\x7f", info)
        self.assertIn("tensor evil\\x1b[2J", info)
        # Errors that quote a name are escaped too.
        missing = run_limited("info", path, "evil\x1b[2J")
        self.assertEqual(missing.returncode, 1)
        self.assertEqual(controls(missing.stderr), [])
        # --json keeps the exact names, as JSON escapes.
        doc = json.loads(run_limited("info", "--json", path).stdout)
        self.assertIn("evil\x1b[2J\x1b]0;title\x07\rname\u202e", doc["tensors"])
        self.assertEqual(doc["metadata"], {"key\x1b[31m": "value\r\x07\x1b[0m\x7f"})
        # A directory entry's name is the file system's, and escaped as well.
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(
                [CHECKPOINT, os.path.join(d, "a\x1b[31m.hurray")], check=True, capture_output=True
            )
            out = run_limited("ls", d)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(controls(out.stdout), [])
            self.assertIn(b"a\\x1b[31m.hurray", out.stdout)

    def test_fifo_is_refused_without_hanging(self):
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "pipe.hurray")
            os.mkfifo(fifo)
            for args in (("ls", fifo), ("info", fifo), ("verify", fifo), ("cat", fifo, "x")):
                out = run_limited(*args)
                self.assertEqual(out.returncode, 1, args)
                self.assertIn(b"not a regular file", out.stderr)
            # In a directory listing the FIFO is skipped and reported; the
            # regular files are still listed.
            subprocess.run(
                [CHECKPOINT, os.path.join(d, "part.hurray")], check=True, capture_output=True
            )
            os.mkdir(os.path.join(d, "sub.hurray"))
            out = run_limited("ls", d)
            self.assertEqual(out.returncode, 1)
            self.assertIn(b"pipe.hurray: not a regular file, skipped", out.stderr)
            self.assertIn(b"sub.hurray: not a regular file, skipped", out.stderr)
            self.assertEqual(len(out.stdout.decode().splitlines()), 4)


class CliOtherFormatsTest(unittest.TestCase):
    """A file of a format `hurray convert` reads, given to ls, is named as
    such (a .npy file had no hint)."""

    def test_other_formats_get_a_convert_hint(self):
        npy_header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
        npy_header += b" " * (-(10 + len(npy_header) + 1) % 64) + b"\n"
        samples = {
            "a.npy": (
                b"\x93NUMPY\x01\x00" + struct.pack("<H", len(npy_header)) + npy_header + bytes(8),
                b"a numpy .npy file",
            ),
            "a.gguf": (b"GGUF\x03\x00\x00\x00" + bytes(16), b"a GGUF file"),
            "a.npz": (b"PK\x03\x04" + bytes(26), b"a zip archive (.npz, or a torch checkpoint)"),
        }
        with tempfile.TemporaryDirectory() as d:
            for name, (data, said) in samples.items():
                path = os.path.join(d, name)
                with open(path, "wb") as f:
                    f.write(data)
                out = run("ls", path)
                self.assertEqual(out.returncode, 1, out.stderr)
                self.assertIn(b"it looks like " + said + b"; `hurray convert` reads it", out.stderr)


class CliDirectoryTest(unittest.TestCase):
    """`hurray ls DIR`: every *.hurray file of a directory (a sharded or DCP
    checkpoint), sorted, each row starting with the file's name."""

    def test_ls_directory(self):
        with tempfile.TemporaryDirectory() as d:
            for name in ("part-b.hurray", "part-a.hurray"):
                subprocess.run([CHECKPOINT, os.path.join(d, name)], check=True, capture_output=True)
            with open(os.path.join(d, "notes.txt"), "w") as f:
                f.write("not a hurray file")
            out = run("ls", d)
            self.assertEqual(out.returncode, 0, out.stderr)
            lines = out.stdout.decode().splitlines()
            self.assertEqual(lines[0].split()[:3], ["FILE", "NAME", "DTYPE"])
            rows = [line.split() for line in lines[1:]]
            self.assertEqual([r[0] for r in rows], ["part-a.hurray"] * 3 + ["part-b.hurray"] * 3)
            embed = [r for r in rows if r[1] == "embed.weight"]
            self.assertEqual(len(embed), 2)
            self.assertEqual(embed[0][2], "float32")
            self.assertEqual(embed[0][-1], str(16 * 8 * 4))
            # A broken file fails the listing but the others are still listed.
            with open(os.path.join(d, "part-c.hurray"), "wb") as f:
                f.write(b"not hurray")
            out = run("ls", d)
            self.assertEqual(out.returncode, 1)
            self.assertIn(b"part-c.hurray", out.stderr)
            self.assertEqual(len(out.stdout.decode().splitlines()), 7)
        with tempfile.TemporaryDirectory() as d:
            out = run("ls", d)
            self.assertEqual(out.returncode, 1)
            self.assertIn(b"no *.hurray files", out.stderr)

    def test_ls_directory_columns_fit_long_file_names(self):
        # The FILE column was 24 wide: save_sharded's 26-byte names pushed
        # every row out of line with the header.
        with tempfile.TemporaryDirectory() as d:
            for name in ("part-00000-of-00002.hurray", "a-much-longer-shard-name-00001.hurray"):
                subprocess.run([CHECKPOINT, os.path.join(d, name)], check=True, capture_output=True)
            lines = run("ls", d).stdout.decode().splitlines()
            at = lines[0].index("NAME")
            self.assertTrue(all(line[at - 1] == " " and line[at] != " " for line in lines), lines)


def safetensors_bytes(tensors, metadata=None):
    """A safetensors file of {name: (dtype, shape, raw bytes)}, by hand."""
    header, data = ({"__metadata__": metadata} if metadata else {}), b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_tensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n :]
    return {
        k: (v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]])
        for k, v in header.items()
    }


class NativeConvertTest(unittest.TestCase):
    """safetensors, GGUF and hurray convert in C: no Python is run, so these
    work with no interpreter anywhere (PATH without one, HURRAY_PYTHON
    naming none: an exec would fail loudly)."""

    def convert(self, *args):
        env = dict(os.environ, PATH="/nonexistent", HURRAY_PYTHON="/nonexistent/python3")
        return subprocess.run([HURRAY, "convert", *args], capture_output=True, env=env)

    def test_a_signal_leaves_the_target_and_no_temporary_file(self):
        # convert.md: Ctrl-C, SIGTERM and SIGHUP exit 128 + the signal with
        # "hurray convert: interrupted" and the target as it was, on the C
        # path too (it died of the signal, and once in a few hundred runs
        # left the hidden temporary name between link and rename).
        import signal
        import time

        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "big.safetensors"), os.path.join(d, "out.hurray")
            count = 64 << 20  # 256 MiB of float32: long enough to be interrupted
            header = json.dumps(
                {"w": {"dtype": "F32", "shape": [count], "data_offsets": [0, 4 * count]}}
            ).encode()
            header += b" " * (-len(header) % 8)
            with open(src, "wb") as f:
                f.write(struct.pack("<Q", len(header)) + header)
                chunk = b"\x01\x02\x03\x04" * (4 << 20)
                for _ in range(4 * count // len(chunk)):
                    f.write(chunk)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                with open(dst, "wb") as f:
                    f.write(b"old")
                p = subprocess.Popen(
                    [HURRAY, "convert", src, dst],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=dict(os.environ, PATH="/nonexistent", HURRAY_PYTHON="/nonexistent/py"),
                )
                deadline = time.monotonic() + 30
                while p.poll() is None and time.monotonic() < deadline:
                    try:
                        with open(f"/proc/{p.pid}/maps") as maps:
                            if "big.safetensors" in maps.read():  # converting now
                                break
                    except OSError:
                        break
                    time.sleep(0.001)
                p.send_signal(sig)
                _, err = p.communicate(timeout=120)
                with open(dst, "rb") as f:
                    head = f.read(8)
                if p.returncode == 0:  # it finished first: the whole new file
                    self.assertEqual(head[:4], b"\x89HRY")
                else:
                    self.assertEqual(p.returncode, 128 + sig, err)
                    self.assertIn(b"hurray convert: interrupted", err)
                    self.assertEqual(head, b"old")
                self.assertEqual(sorted(os.listdir(d)), ["big.safetensors", "out.hurray"])

    def test_native_formats_convert_without_python(self):
        with tempfile.TemporaryDirectory() as d:
            st = os.path.join(d, "a.safetensors")
            with open(st, "wb") as f:
                f.write(
                    safetensors_bytes(
                        {
                            "w": ("F32", (2, 32), struct.pack("<64f", *range(64))),
                            "b": ("I64", (3,), struct.pack("<3q", 1, -2, 3)),
                        }
                    )
                )
            steps = [
                (st, "b.hurray"),
                ("b.hurray", "c.safetensors"),
                ("b.hurray", "d.gguf"),
                ("d.gguf", "e.hurray"),
                ("e.hurray", "f.hurray"),
            ]
            for src, dst in steps:
                src, dst = os.path.join(d, src), os.path.join(d, dst)
                out = self.convert(src, dst)
                self.assertEqual(out.returncode, 0, (src, dst, out.stderr))
                self.assertIn(b"(native)", out.stdout)
                self.assertNotIn(b"Python", out.stderr)
            self.assertEqual(
                safetensors_tensors(st), safetensors_tensors(os.path.join(d, "c.safetensors"))
            )
            # --stats on another target is noted, not handed to Python.
            out = self.convert("--stats", st, os.path.join(d, "g.safetensors"))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(b"--stats applies to .hurray targets", out.stdout)
            out = self.convert("-q", "--stats", "--no-verify", st, os.path.join(d, "h.hurray"))
            self.assertEqual((out.returncode, out.stdout), (0, b""), out.stderr)
            ls = run("ls", os.path.join(d, "h.hurray"))
            self.assertEqual(ls.returncode, 0, ls.stderr)
            # "--" ends the options, as the help says; it handed every
            # conversion to Python.
            out = self.convert("-q", "--", st, os.path.join(d, "i.hurray"))
            self.assertEqual((out.returncode, out.stdout), (0, b""), out.stderr)
            # What only Python does (.npz) does try it, and says so.
            out = self.convert(st, os.path.join(d, "x.npz"))
            self.assertEqual(out.returncode, 1)
            self.assertIn(b"/nonexistent/python3", out.stderr)

    def test_a_report_that_does_not_arrive_says_the_target_was_written(self):
        """With stdout on a full disk the native path said only "writing to
        stdout failed" and exited 1, as if the conversion had failed; the
        target was written. It now says so, as the Python converter does."""
        if not stat.S_ISCHR(os.stat("/dev/full").st_mode):
            self.skipTest("/dev/full is not the full device here")
        with tempfile.TemporaryDirectory() as d:
            st = os.path.join(d, "a.safetensors")
            with open(st, "wb") as f:
                f.write(safetensors_bytes({"w": ("F32", (2, 2), bytes(16))}))
            dst = os.path.join(d, "b.hurray")
            env = dict(os.environ, PATH="/nonexistent", HURRAY_PYTHON="/nonexistent/python3")
            with open("/dev/full", "wb") as full:
                out = subprocess.run(
                    [HURRAY, "convert", st, dst], stdout=full, stderr=subprocess.PIPE, env=env
                )
            self.assertEqual(out.returncode, 1)
            said = out.stderr.decode()
            self.assertIn(
                f"hurray convert: {dst} was written, but printing its report failed", said
            )
            self.assertNotIn("writing to stdout failed", said)  # said once
            self.assertEqual(run("verify", dst).returncode, 0)

    def test_a_file_size_limit_is_a_failure_not_a_kill(self):
        """Past RLIMIT_FSIZE the native convert was killed by SIGXFSZ: exit
        153, no message, and (without O_TMPFILE) its temporary file left."""
        import resource

        with tempfile.TemporaryDirectory() as d:
            st = os.path.join(d, "a.safetensors")
            with open(st, "wb") as f:
                f.write(safetensors_bytes({"w": ("F32", (256, 1024), bytes(1 << 20))}))
            before = sorted(os.listdir(d))
            for target in ("b.hurray", "b.gguf", "b.safetensors"):

                def limit():
                    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, 256 << 10))

                out = subprocess.run(
                    [HURRAY, "convert", st, os.path.join(d, target)],
                    capture_output=True,
                    preexec_fn=limit,
                )
                self.assertEqual(out.returncode, 1, (target, out.returncode, out.stderr))
                self.assertIn(b"hurray convert: ", out.stderr)
                self.assertEqual(sorted(os.listdir(d)), before, target)

    def test_metadata_left_behind_is_named(self):
        """The native path dropped metadata the target cannot hold and said
        nothing; the Python converter names the keys."""
        with tempfile.TemporaryDirectory() as d:
            st = os.path.join(d, "a.safetensors")
            meta = {f"k{i}": "v" for i in range(4)}
            meta["\x1b[31mred"] = "v"
            with open(st, "wb") as f:
                f.write(safetensors_bytes({"w": ("F32", (2,), bytes(8))}, meta))
            out = self.convert(st, os.path.join(d, "a.gguf"))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(b"(native)\nnote: 5 metadata keys not carried (GGUF", out.stdout)
            self.assertIn(
                b": safetensors.\\x1b[31mred, safetensors.k0, safetensors.k1 (+2 more)\n",
                out.stdout,
            )
            self.assertNotIn(b"\x1b", out.stdout)
            # Going to safetensors or hurray, every key is kept: no note.
            for target in ("b.safetensors", "b.hurray"):
                out = self.convert(st, os.path.join(d, target))
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertNotIn(b"note:", out.stdout)
            out = self.convert("-q", st, os.path.join(d, "c.gguf"))
            self.assertEqual((out.returncode, out.stdout), (0, b""), out.stderr)


# Run by pytest (no arguments): the binaries of the meson build tree.
if HURRAY is None:
    _build = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build"
    )
    HURRAY = os.environ.get("HURRAY_CLI", os.path.join(_build, "hurray"))
    CHECKPOINT = os.environ.get("HURRAY_CHECKPOINT_EXAMPLE", os.path.join(_build, "checkpoint"))


if __name__ == "__main__":
    HURRAY, CHECKPOINT = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
