"""Where a fresh dequantize output's memory comes from, measured (issue 19).

Each figure is one fresh process that maps a prepared NF4 tensor (and
bitsandbytes' packed form of the same data), then times one dequantize into
a fresh output under one allocation policy, reporting wall GB/s, CPU
seconds per wall second and minor faults. The policies and bnb are
interleaved round by round so a change of load hits them alike.

    .venv/bin/python bench/probe_outbuf.py [--mib 256] [--rounds 5] [policy ...]

Policies current_small, current_huge and current_probe are t.dequantize
with HURRAY_FRESH_PAGES set so. Not a test and not part of `make bench`: a probe for choosing the policy in
python/hurray/_outbuf.py. Prints a table with the median and best of each.
PROBE_PREWARM_GIB=G makes each worker touch and unmap G GiB right before its
clock, so that its fresh pages come from memory the host already backs (on a
VM with free-page reporting, memory freed more than a few seconds ago is
handed back to the host and costs a host fault again).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
COLS = 4096


def prepare(d, mib):
    import numpy as np

    import hurray

    rows = int(mib * MiB / 4 / COLS)
    x = np.random.default_rng(1).standard_normal((rows, COLS), dtype=np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    hurray.save(os.path.join(d, "q.hy"), {"w": hurray.quantize(x, "nf4", threads=2)})
    try:
        import bitsandbytes.functional as F
        import torch

        p, st = F.quantize_4bit(torch.from_numpy(x), blocksize=64, quant_type="nf4")
        torch.save({"p": p, "st": st.as_dict()}, os.path.join(d, "bnb.pt"))
    except ImportError:
        pass


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _prewarm():
    gib = float(os.environ.get("PROBE_PREWARM_GIB", "0"))
    if gib:
        import mmap

        import numpy as np

        from hurray import _hurray

        m = mmap.mmap(-1, int(gib * (1 << 30)), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        _hurray._prefault(np.frombuffer(m, np.uint8), False, 2)
        m.close()


def _run(fn, nbytes):
    _prewarm()
    f0, c0, t0 = _faults(), time.process_time(), time.perf_counter()
    y = fn()
    s = time.perf_counter() - t0
    cpu = time.process_time() - c0
    return y, {
        "gbps": nbytes / s / 1e9,
        "cpu": cpu / s,
        "cpu_s": cpu,
        "faults": _faults() - f0,
    }


def worker(d, policy, threads):
    import numpy as np

    if policy.startswith("bnb"):
        import bitsandbytes.functional as F
        import torch

        torch.set_num_threads(threads)
        saved = torch.load(os.path.join(d, "bnb.pt"), weights_only=False)
        st = F.QuantState.from_dict(saved["st"], device=torch.device("cpu"))
        p = saved["p"]
        shape = tuple(st.shape)
        nbytes = 4 * int(np.prod(shape))
        small = F.quantize_4bit(torch.ones(2, 64), blocksize=64, quant_type="nf4")
        F.dequantize_4bit(*small, quant_type="nf4")  # warm the code path
        if (
            policy == "bnb_after_q"
        ):  # as bench_quant.py's w_bnb: quantize (its temporaries freed) first
            x = torch.from_numpy(np.load(os.path.join(d, "x.npy")))
            p, st = F.quantize_4bit(x, blocksize=64, quant_type="nf4")
            del x
        y, r = _run(lambda: F.dequantize_4bit(p, st, quant_type="nf4"), nbytes)
        assert tuple(y.shape) == shape
        return r

    import hurray
    from hurray import _hurray

    f = hurray.open(os.path.join(d, "q.hy"))
    t = f["w"]
    f.populate()
    shape = tuple(t.descriptor.shape)
    nbytes = 4 * int(np.prod(shape))
    hurray.quantize(np.ones((2, 64), np.float32), "nf4").dequantize(threads=threads)  # warm

    for choice in ("small", "huge", "probe"):  # t.dequantize with HURRAY_FRESH_PAGES=choice
        if policy == "current_" + choice:
            os.environ["HURRAY_FRESH_PAGES"] = choice
            policy = "current"
    if policy == "after_q":  # as bench_quant.py's w_hurray: quantize first
        t = hurray.quantize(np.load(os.path.join(d, "x.npy")), "nf4", threads=threads)
        policy = "current"

    def current():  # whatever t.dequantize does in this checkout
        return t.dequantize(threads=threads)

    def mapped(populate):
        import mmap

        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (mmap.MAP_POPULATE if populate else 0)
        m = mmap.mmap(-1, nbytes, flags=flags)
        out = np.frombuffer(m, np.float32).reshape(shape)
        t._dequantize(out.reshape(-1).view(np.uint8), "float32", threads)
        return out

    def par_populate():  # populate the halves from `threads` Python threads, then decode
        import mmap
        from concurrent.futures import ThreadPoolExecutor

        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(m, np.uint8)
        step = -(-nbytes // threads // 4096) * 4096
        with ThreadPoolExecutor(threads) as pool:
            list(
                pool.map(
                    lambda i: _hurray._prefault(raw[i : i + step], False), range(0, nbytes, step)
                )
            )
        t._dequantize(raw, "float32", threads)
        return raw.view(np.float32).reshape(shape)

    def thp_populate():  # a mapping advised MADV_HUGEPAGE, populated per thread
        import mmap

        os.environ["HURRAY_FRESH_PAGES"] = "huge"
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(m, np.uint8)
        _hurray._prefault(raw, True, threads)
        t._dequantize(raw, "float32", threads)
        return raw.view(np.float32).reshape(shape)

    def np_empty():  # numpy's own allocation (huge-page advice at this size)
        out = np.empty(shape, np.float32)
        t._dequantize(out.reshape(-1).view(np.uint8), "float32", threads)
        return out

    if policy == "torch_empty":
        import torch

    def torch_empty():  # what bnb writes into: torch's CPU allocator, then our kernel
        out = torch.empty(shape, dtype=torch.float32).numpy()
        t._dequantize(out.reshape(-1).view(np.uint8), "float32", threads)
        return out

    def reused():  # the kernel alone into memory faulted before the clock
        out = np.empty(shape, np.float32)
        out.fill(0)
        return _run(
            lambda: t._dequantize(out.reshape(-1).view(np.uint8), "float32", threads), nbytes
        )[1]

    def copy_fresh():  # numpy copy of the same byte count into fresh memory
        src = np.ones(shape, np.float32)
        return _run(src.copy, nbytes)[1]

    fns = {
        "current": current,
        "map": lambda: mapped(False),
        "map_populate": lambda: mapped(True),
        "par_populate": par_populate,
        "np_empty": np_empty,
        "thp_populate": thp_populate,
        "torch_empty": torch_empty,
    }
    if policy == "reused":
        return reused()
    if policy == "copy_fresh":
        return copy_fresh()
    _, r = _run(fns[policy], nbytes)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dir")
    ap.add_argument("policies", nargs="*")
    a = ap.parse_args()
    policies = a.policies or [
        "current",
        "map",
        "map_populate",
        "par_populate",
        "torch_empty",
        "bnb",
        "reused",
    ]
    threads = [int(x) for x in a.threads.split(",")]
    d = a.dir or tempfile.mkdtemp(prefix="probe_outbuf_")
    if not os.path.exists(os.path.join(d, "q.hy")):
        prepare(d, a.mib)
    res = {}
    for _ in range(a.rounds):
        for p in policies:
            for th in threads:
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", d, p, str(th)],
                    capture_output=True,
                    text=True,
                )
                if out.returncode != 0:
                    print(out.stderr, file=sys.stderr)
                    continue
                res.setdefault((p, th), []).append(json.loads(out.stdout))
    print(f"load average {os.getloadavg()}; {a.rounds} fresh processes each; {a.mib} MiB f32 out")
    print(
        "| policy | threads | GB/s median | GB/s best | CPU/wall median | CPU s median (best) "
        "| minor faults |"
    )
    print("|---|---|---|---|---|---|---|")
    for (p, th), rs in res.items():
        g = [r["gbps"] for r in rs]
        print(
            f"| {p} | {th} | {statistics.median(g):.2f} | {max(g):.2f} | "
            f"{statistics.median(r['cpu'] for r in rs):.2f} | "
            f"{statistics.median(r['cpu_s'] for r in rs):.3f} ({min(r['cpu_s'] for r in rs):.3f}) | "
            f"{int(statistics.median(r['faults'] for r in rs))} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        main()
