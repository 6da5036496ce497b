#!/usr/bin/env python3
"""Workload (b) of bench.py alone (20,000 small float32 tensors): save once
per contender, then open (every name and shape) and load-all in
BENCH_REPS (default 5) fresh processes, hurray and safetensors.numpy
alternating, the page cache dropped before each exactly as bench.py does
(cold where that works). Same worker code as bench.py; a quick check of the
open and load-all goals without the whole `make bench`.

    .venv/bin/python bench/bench_many.py      # prints medians [min–max] and the load average

Writes results/many.json (BENCH_OUT); latest.md/json are left to `make bench`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402

KEYS = ("open_s", "open_names_warm_s", "load_s", "verify_gbps")


def main():
    reps = int(os.environ.get("BENCH_REPS", "5"))
    tmp = os.path.join(
        os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(bench.ROOT, "build"))),
        "bench-many-tmp",
    )
    outdir = os.path.abspath(os.environ.get("BENCH_OUT", os.path.join(HERE, "results")))
    os.makedirs(tmp, exist_ok=True)
    contenders = ["hurray", "safetensors.numpy"]
    res = {"reps": reps, "loadavg_start": list(os.getloadavg()), "contenders": {}}
    paths = {c: os.path.join(tmp, "many" + bench.EXT[c]) for c in contenders}
    try:
        for c in contenders:
            bench.run_worker("save", c, paths[c], "many", 1.0)
        runs = {c: [] for c in contenders}
        for _ in range(reps):
            for c in contenders:
                runs[c].append(bench.run_worker("load", c, paths[c], "many", 1.0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["cold_cache"] = bool(bench.COLD)
    res["loadavg_end"] = list(os.getloadavg())
    for c in contenders:
        res["contenders"][c] = {k: bench.summarize(runs[c], k) for k in KEYS if k in runs[c][0]}
    h, s = res["contenders"]["hurray"], res["contenders"]["safetensors.numpy"]
    for k in ("open_s", "open_names_warm_s", "load_s"):
        print(
            f"{k:18s} hurray {bench.fmt(h[k], 'ms')} ms  safetensors.numpy "
            f"{bench.fmt(s[k], 'ms')} ms  = {s[k]['median'] / h[k]['median']:.2f}x"
        )
    print(f"verify (b) {bench.fmt(h['verify_gbps'], 'gbps')} GB/s")
    print(f"cold {res['cold_cache']}, load average {res['loadavg_start']} -> {res['loadavg_end']}")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "many.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
