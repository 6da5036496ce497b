#!/usr/bin/env python3
"""dequantize(out=...) on one thread against np.copyto of the same output
size, in one process, best of N (each repetition times one copy and then one
dequantize, so both see the same load). The issue-19 goal: >= 0.50.

    .venv/bin/python bench/dq_out_ratio.py [MiB] [reps] [scheme ...]

MiB: float32 output size (default 256, shape (MiB * 32, 8192)); reps default
5; schemes default mxfp6_e3m2 mxfp6_e2m3. Prints the load average and the
SIMD level in use.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import numpy as np

import hurray
import hurray._hurray as ext


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    schemes = sys.argv[3:] or ["mxfp6_e3m2", "mxfp6_e2m3"]
    lib = ctypes.CDLL(ext.__file__)
    lib.hurray_simd_level.restype = ctypes.c_char_p
    x = np.random.default_rng(1).standard_normal((mib * 32, 8192), dtype=np.float32)
    dst = np.zeros_like(x)  # touched: no page faults in the timings
    print(f"load {os.getloadavg()} level {lib.hurray_simd_level().decode()}")
    for scheme in schemes:
        q = hurray.quantize(x, scheme, threads=2)
        q.dequantize(out=dst, threads=1)
        copy = deq = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            np.copyto(dst, x)
            t1 = time.perf_counter()
            q.dequantize(out=dst, threads=1)
            t2 = time.perf_counter()
            copy, deq = min(copy, t1 - t0), min(deq, t2 - t1)
        print(
            f"{scheme:14s} memcpy {x.nbytes / copy / 1e9:6.2f} GB/s  "
            f"dequantize {x.nbytes / deq / 1e9:6.2f} GB/s  ratio {copy / deq:.3f}",
            flush=True,
        )
        del q


if __name__ == "__main__":
    main()
