"""Issue 19's dequantize goal for a tensor of any kind: dequantize into a
reused float32 out= on one thread against np.copyto of the same size, in the
same process and interleaved (the load of a shared machine drifts between
separate runs), best of each. Goal: >= GOAL of memcpy.

Used by bench_zoo_float.py, bench_zoo_int4.py and bench_gguf_types.py, whose
kinds bench_quant.py's Goals table does not cover; goals19.py gathers them.
"""

from __future__ import annotations

import os
import time

import numpy as np

GOAL = 0.50


def _once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def out_vs_memcpy(t, reps: int) -> dict:
    """{"out_1t_gbps", "memcpy_gbps", "ratio", "met", "load1"} for hurray
    tensor t (load1: the 1-minute load average after the pairs)."""
    out = np.empty(t.dequantize(threads=1).shape, np.float32)
    src = np.ones_like(out)
    dst = np.empty_like(out)
    np.copyto(dst, src)  # fault both in
    t.dequantize(out=out, threads=1)
    mc, dq = [], []
    for _ in range(max(reps, 3)):
        mc.append(_once(lambda: np.copyto(dst, src)))
        dq.append(_once(lambda: t.dequantize(out=out, threads=1)))
    m, d = min(mc), min(dq)
    return {
        "out_1t_gbps": out.nbytes / d / 1e9,
        "memcpy_gbps": out.nbytes / m / 1e9,
        "ratio": m / d,
        "met": m / d >= GOAL,
        "load1": os.getloadavg()[0],
    }


def cell(row: dict) -> str:
    """The table cell: ratio and verdict."""
    return f"{row['ratio']:.2f} {'met' if row['met'] else '**not met**'}"
