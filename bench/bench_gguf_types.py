#!/usr/bin/env python3
"""Dequantize throughput of every GGUF quantized type: hurray's C kernels
against gguf-py's numpy gguf.quants.dequantize, in the same run.

    .venv/bin/python bench/bench_gguf_types.py      (part of make bench-quant)

Each type gets random valid blocks (finite float16 scales, random codes) in a
GGUF file written by gguf-py, converted to .hurray; hurray dequantizes the
memory-mapped tensor into a new float32 array (the call a user makes), on
one thread and on every core; gguf-py dequantizes the same bytes (the same
size, so that neither runs from a cache the other cannot use). Figures
are float32 output GB/s (1 GB = 1e9 bytes), the best of GBENCH_REPS runs
(the machine is shared; the best run is the least disturbed). The goal is
hurray on one thread >= 10x gguf-py (numpy is single-threaded too).

Environment:
    GBENCH_MIB    float32 output per type in MiB (default 16)
    GBENCH_REPS   repetitions (default 5)
    GBENCH_OUT    results folder (default bench/results): gguf_types.{md,json}
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from out_ratio import cell, out_vs_memcpy  # noqa: E402

import hurray  # noqa: E402

try:
    import gguf
    from gguf import GGMLQuantizationType as GQ
    from gguf import quants as gq
except ImportError:  # pragma: no cover
    sys.exit("bench_gguf_types.py needs the gguf package (make python installs it)")

from test_gguf_types import QUANT, random_blocks, reference, sizes, write_gguf  # noqa: E402

MiB = 1 << 20
GOAL = 10.0


def best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    mib = int(os.environ.get("GBENCH_MIB", "16"))
    ref_mib = mib
    reps = int(os.environ.get("GBENCH_REPS", "5"))
    out_dir = os.environ.get("GBENCH_OUT", os.path.join(HERE, "results"))
    cores = os.cpu_count() or 1
    rows = []
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in QUANT:
            elements, size = sizes(kind)
            row_elems = 4096 if elements <= 256 else elements
            n_rows = max(1, mib * MiB // 4 // row_elems)
            ref_rows = n_rows
            # one row of random blocks, tiled: the kernels do not care
            one = random_blocks(kind, 16, row_elems // elements, rng)
            raw = np.tile(one, (n_rows // 16 + 1, 1))[:n_rows]
            src = os.path.join(tmp, f"{kind}.gguf")
            dst = os.path.join(tmp, f"{kind}.hurray")
            write_gguf(src, {"w": (kind, raw)}, kv=False)
            hurray.convert(src, dst, quiet=True)
            t = hurray.load(dst)["w"]
            ref_raw = np.ascontiguousarray(raw[:ref_rows])
            # the same bytes give the same floats (checked on the reference slice)
            got = t.dequantize()[:ref_rows]
            assert np.array_equal(got.view(np.uint32), reference(kind, ref_raw).view(np.uint32)), (
                kind
            )
            out_bytes = raw.shape[0] * row_elems * 4
            ref_bytes = ref_rows * row_elems * 4
            t1 = best(lambda t=t: t.dequantize(threads=1), reps)
            tn = best(lambda t=t: t.dequantize(threads=cores), reps)
            if kind == "Q8_K":  # gguf-py has no Q8_K dequantizer: the numpy definition
                tr = best(lambda: reference(kind, ref_raw), max(1, reps // 2))
            else:
                tr = best(lambda: gq.dequantize(ref_raw, GQ[kind]), max(1, reps // 2))
            g1, gn, gr = out_bytes / t1 / 1e9, out_bytes / tn / 1e9, ref_bytes / tr / 1e9
            rows.append(
                {
                    "type": kind,
                    "hurray_1t_gbs": g1,
                    "hurray_all_gbs": gn,
                    "gguf_py_gbs": gr,
                    "speedup_1t": g1 / gr,
                    "speedup_all": gn / gr,
                    "met": g1 / gr >= GOAL,
                    "out": out_vs_memcpy(t, reps),
                }
            )
            print(
                f"{kind:8s} hurray 1 thread {g1:7.2f} GB/s, {cores} threads {gn:7.2f} GB/s, "
                f"gguf-py {gr:6.3f} GB/s: {g1 / gr:6.1f}x / {gn / gr:6.1f}x",
                flush=True,
            )
            del t
    os.makedirs(out_dir, exist_ok=True)
    meta = {
        "machine": platform.machine(),
        "cores": cores,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gguf": getattr(gguf, "__version__", "?"),
        "hurray_mib": mib,
        "gguf_py_mib": ref_mib,
        "reps": reps,
        "goal": GOAL,
    }
    with open(os.path.join(out_dir, "gguf_types.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [
        "# GGUF dequantize: hurray (C) vs gguf-py (numpy)",
        "",
        f"float32 output GB/s, best of {reps}, {mib} MiB of output from the same blocks for "
        f"both; {cores} cores, numpy {np.__version__}. "
        f"Goal: hurray on one thread >= {GOAL:.0f}x gguf-py.",
        "",
        "out= / memcpy: dequantize into a reused float32 array on one thread against np.copyto of "
        "the same size, interleaved in one process, best of each (bench/out_ratio.py): issue 19's "
        "goal, every kind >= 0.50.",
        "",
        "| type | hurray 1 thread | hurray all cores | gguf-py | speedup (1 thread) "
        "| speedup (all) | goal | out= / memcpy, 1 thread (goal >= 0.50) |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['type']} | {r['hurray_1t_gbs']:.2f} | {r['hurray_all_gbs']:.2f} | "
            f"{r['gguf_py_gbs']:.3f} | {r['speedup_1t']:.1f}x | {r['speedup_all']:.1f}x | "
            f"{'met' if r['met'] else 'NOT met'} | {cell(r['out'])} |"
        )
    lines.append("")
    lines.append(
        "Q8_K: gguf-py has no dequantizer; its reference is ggml's definition in numpy "
        "(tests/python/test_gguf_types.py)."
    )
    with open(os.path.join(out_dir, "gguf_types.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out_dir}/gguf_types.md")


if __name__ == "__main__":
    main()
