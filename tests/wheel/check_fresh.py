"""The installed wheel, checked from a fresh venv that has numpy and the
wheel's own dependencies, and none of torch, safetensors or gguf.

usage: VENV/bin/python check_fresh.py WORKDIR [INPUT...]
Run by scripts/check_wheel.sh with PATH = VENV/bin plus the system folders.
INPUT: further .safetensors/.gguf files (written by the peers beforehand);
the hand-written ones (formats.py) are always checked. Prints one line per
check and "wheel: N passed, N failed"; exit status 1 on any failure.
"""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats  # noqa: E402

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))
    return ok


def run(*args, env=None):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env)
    return r


def one_line(text):
    return text.strip() != "" and len(text.strip().splitlines()) == 1


def first_line(r):
    return (r.stderr.strip() or r.stdout.strip()).splitlines()[:1]


def main(argv):
    work = os.path.abspath(argv[1])
    inputs = argv[2:]
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    venv_bin = os.path.dirname(sys.executable)

    # The environment: numpy, the package, no peers.
    import importlib.util

    peers = [m for m in ("torch", "safetensors", "gguf") if importlib.util.find_spec(m)]
    check("fresh venv has none of torch, safetensors, gguf", not peers, f"found {peers}")
    import numpy as np

    import hurray

    # The command pip installed, first on PATH.
    exe = shutil.which("hurray")
    check("hurray on PATH is the venv's", exe == os.path.join(venv_bin, "hurray"), str(exe))
    r = run("hurray", "--version")
    m = re.fullmatch(r"hurray (\S+) \(C ABI (\d+), file format (\d+)\.(\d+)\)\n", r.stdout)
    check(
        "hurray --version prints library, ABI and format versions",
        r.returncode == 0
        and m
        and m.group(1) == hurray.__version__
        and int(m.group(2)) == hurray.C_ABI_VERSION,
        repr(r.stdout + r.stderr),
    )
    print("     " + r.stdout.strip())

    # Every extension and the CLI link libc and friends only: nothing from
    # the build machine (libxxhash, yajl, jansson) and no libhurray.
    package = os.path.dirname(hurray.__file__)
    cli = os.path.join(package, "_bin", "hurray")
    allowed = {
        "linux-vdso.so.1",
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
        "/lib64/ld-linux-x86-64.so.2",
    }
    import glob

    artifacts = sorted(glob.glob(os.path.join(package, "**", "*.so"), recursive=True)) + [cli]
    for artifact in artifacts:
        r = run("ldd", artifact)
        libs = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
        print(f"     ldd {os.path.relpath(artifact, os.path.dirname(package))}:")
        for line in r.stdout.splitlines():
            print("       " + line.strip())
        bad = [lib for lib in libs if os.path.basename(lib) not in allowed and lib not in allowed]
        check(
            f"ldd {os.path.basename(artifact)}: no libxxhash, libyajl, libjansson, "
            "libhurray, only the C runtime",
            r.returncode == 0 and not bad,
            f"links {bad}",
        )

    # Conversions: safetensors and GGUF to hurray and back, byte for byte.
    hand_st, hand_gg = formats.write_check_files(work)
    for src in [hand_st, hand_gg, *inputs]:
        base = os.path.basename(src)
        ext = os.path.splitext(src)[1]
        h = os.path.join(work, base + ".hurray")
        back = os.path.join(work, base + ".back" + ext)
        r = run("hurray", "convert", src, h)
        if not check(f"hurray convert {base} -> .hurray", r.returncode == 0, first_line(r)):
            continue
        r = run("hurray", "verify", h)
        check(f"hurray verify {base}.hurray", r.returncode == 0 and "OK" in r.stdout, first_line(r))
        r = run("hurray", "convert", h, back)
        if not check(f"hurray convert {base}.hurray -> {ext}", r.returncode == 0, first_line(r)):
            continue
        with open(src, "rb") as a, open(back, "rb") as b:
            check(f"{base} -> hurray -> {ext} is byte-identical", a.read() == b.read())

    # The converted file as Python sees it: tensors and __metadata__.
    h = hand_st + ".hurray"
    if os.path.exists(h):
        tensors, _ = formats.safetensors_contents()
        with hurray.open(h) as f:
            got = {n: np.asarray(f[n]).tobytes() for n in tensors if n in f.keys()}
            meta = dict(f.metadata)
        check(
            "hurray.open reads the converted tensors and __metadata__",
            got == {n: t[2] for n, t in tensors.items()} and meta.get("safetensors.format") == "pt",
            str(meta),
        )

    # Bad input: one line on stderr, exit status 1, no target left behind.
    # Each cut ends inside the last tensor's data (GGUF: its 20 bytes are
    # followed by 12 bytes of alignment padding, which a reader may not need).
    for src, cut_bytes in ((hand_st, 7), (hand_gg, 12 + 7)):
        with open(src, "rb") as f:
            data = f.read()
        cut = os.path.join(work, "truncated" + os.path.splitext(src)[1])
        with open(cut, "wb") as f:
            f.write(data[: len(data) - cut_bytes])
        target = os.path.join(work, "never.hurray")
        r = run("hurray", "convert", cut, target)
        check(
            f"truncated {os.path.basename(cut)}: exit 1, one line, no target",
            r.returncode == 1 and one_line(r.stderr) and not os.path.exists(target),
            f"exit {r.returncode}, stderr {r.stderr!r}",
        )

    # convert of a format that needs Python (.npz) runs with the interpreter
    # that installed the package, even with only the system folders on PATH.
    np.savez(os.path.join(work, "a.npz"), x=np.arange(12, dtype=np.float32).reshape(3, 4))
    env = {k: v for k, v in os.environ.items() if k not in ("HURRAY_PYTHON", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    r = run(os.path.join(venv_bin, "hurray"), "convert", "a.npz", "a.hurray", env=env)
    ok = r.returncode == 0 and os.path.exists("a.hurray")
    if ok:
        with hurray.open("a.hurray") as f:
            ok = np.array_equal(np.asarray(f["x"]), np.arange(12, dtype=np.float32).reshape(3, 4))
    check("hurray convert a.npz uses the installing interpreter, not PATH's", ok, first_line(r))

    # A short Python round trip, quantized and sparse-free.
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    q = hurray.quantize(w, "q8_0")
    hurray.save(
        "py.hurray", {"w": w, "q": q, "i": np.arange(10, dtype=np.int8)}, metadata={"step": 3}
    )
    with hurray.open("py.hurray") as f:
        ok = (
            np.array_equal(np.asarray(f["w"]), w)
            and f.metadata["step"] == 3
            and np.array_equal(f["q"].dequantize(), q.dequantize())
            and np.abs(f["q"].dequantize() - w).max() < 0.05
            and np.array_equal(np.asarray(f["i"]), np.arange(10, dtype=np.int8))
        )
    check("python: save, open, quantize q8_0, dequantize", ok)
    # Every inspecting subcommand on it.
    r = run("hurray", "verify", "py.hurray")
    check("hurray verify", r.returncode == 0 and "OK" in r.stdout, first_line(r))
    r = run("hurray", "ls", "py.hurray")
    check(
        "hurray ls",
        r.returncode == 0 and all(f"\n{n} " in "\n" + r.stdout for n in "iqw"),
        first_line(r),
    )
    r = run("hurray", "info", "--json", "py.hurray", "q")
    check("hurray info --json", r.returncode == 0 and "block_affine" in r.stdout, first_line(r))
    r = subprocess.run(["hurray", "cat", "py.hurray", "i"], capture_output=True)
    check("hurray cat", r.returncode == 0 and r.stdout == np.arange(10, dtype=np.int8).tobytes())

    failed = results.count(False)
    print(f"wheel: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
