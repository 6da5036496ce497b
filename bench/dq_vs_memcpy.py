"""Dequantize into a reused out= on one thread against np.copyto of the same
output size, in one process (issue 19's "every kind >= 0.50 of memcpy").

bench_quant.py measures memcpy and each scheme in separate processes, which on
a shared machine lets the load drift between the two; this script interleaves
them, best of REPS each, so the ratio is what to read, not the GB/s.

    .venv/bin/python bench/dq_vs_memcpy.py [scheme ...]   (default: the MX FP8 ones)

Env: DQ_MIB (output MiB, default 256), DQ_REPS (default 5).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import hurray

MiB = 1 << 20
COLS = 8192


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def main(argv):
    schemes = argv or ["mxfp8_e4m3", "mxfp8_e5m2"]
    mib = int(os.environ.get("DQ_MIB", "256"))
    reps = int(os.environ.get("DQ_REPS", "5"))
    rows = max(1, mib * MiB // 4 // COLS)
    rng = np.random.default_rng(20261210)  # bench_quant.py's seed and data
    x = rng.standard_normal((rows, COLS), dtype=np.float32)
    src = np.empty_like(x)
    dst = np.empty_like(x)
    np.copyto(src, x)
    np.copyto(dst, x)  # fault both in
    print(f"simd {hurray_level()}  output {x.nbytes / MiB:.0f} MiB  best of {reps}")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    for scheme in schemes:
        kw = {"dtype": "int8"} if scheme in ("affine", "block_affine") else {}
        q = hurray.quantize(x, scheme, threads=2, **kw)
        out = np.empty(x.shape, np.float32)
        q.dequantize(out=out, threads=1)
        ratios, dq_s, mc_s = [], [], []
        for _ in range(reps):
            # alternate so both see the same load
            m = best(lambda: np.copyto(dst, src), 1)
            d = best(lambda: q.dequantize(out=out, threads=1), 1)  # noqa: B023
            mc_s.append(m)
            dq_s.append(d)
            ratios.append(m / d)
        m, d = min(mc_s), min(dq_s)
        print(
            f"{scheme:14s} memcpy {x.nbytes / m / 1e9:6.2f} GB/s  dequantize "
            f"{x.nbytes / d / 1e9:6.2f} GB/s  ratio best/best {m / d:.2f}  "
            f"median pair {np.median(ratios):.2f}"
        )


def hurray_level():
    import hurray._hurray as ext

    return ext._simd_level()


if __name__ == "__main__":
    main(sys.argv[1:])
