#!/usr/bin/env python3
"""Workload (b) of bench.py alone (20,000 small float32 tensors): save once
per contender, then open (every name and shape) and load-all in
BENCH_REPS (default 5) fresh processes, hurray and safetensors.numpy
alternating, the page cache dropped before each exactly as bench.py does
(cold where that works). Same worker code as bench.py; a quick check of the
open and load-all goals without the whole `make bench`.

Each round also measures the multi-threaded memory-read rate
(build/bench/mem_read_rate, as many threads as verify hashes on), so that
verify's GB/s is judged against the rate of its own round, not of a quieter
or busier minute.

    .venv/bin/python bench/bench_many.py      # prints medians [min–max] and the load average

BENCH_BEFORE=DIR adds the previous version of hurray as a third contender,
"hurray.before", reading the same file in the same rounds (before/after
ratios from one run): DIR is a checkout with its own .venv (DIR/.venv/bin/
python runs the workers), or a folder holding an installed `hurray` package
(put first on PYTHONPATH), e.g. from `pip install --target DIR .` of the
older commit.

Writes results/many.json (BENCH_OUT); latest.md/json are left to `make bench`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402

KEYS = (
    "open_s",
    "open_names_warm_s",
    "load_s",
    "verify_gbps",
    "verify_x_mem_read",
    "verify_each_s",
)


def before_runner(folder):
    """(python, env) that run a worker against the hurray in `folder`."""
    folder = os.path.abspath(folder)
    venv_python = os.path.join(folder, ".venv", "bin", "python")
    if os.path.exists(venv_python):
        return venv_python, None
    if os.path.exists(os.path.join(folder, "hurray", "__init__.py")):
        old = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PYTHONPATH=folder + (os.pathsep + old if old else ""))
        return sys.executable, env
    raise SystemExit(f"BENCH_BEFORE={folder}: neither .venv/bin/python nor hurray/ there")


def main():
    reps = int(os.environ.get("BENCH_REPS", "5"))
    tmp = os.path.join(
        os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(bench.ROOT, "build"))),
        "bench-many-tmp",
    )
    outdir = os.path.abspath(os.environ.get("BENCH_OUT", os.path.join(HERE, "results")))
    os.makedirs(tmp, exist_ok=True)
    contenders = ["hurray", "safetensors.numpy"]
    runners = {c: (None, None) for c in contenders}
    if os.environ.get("BENCH_BEFORE"):
        contenders.insert(1, "hurray.before")
        runners["hurray.before"] = before_runner(os.environ["BENCH_BEFORE"])
    hash_threads = int(os.environ.get("HURRAY_HASH_THREADS") or min(os.cpu_count() or 1, 8))
    res = {
        "reps": reps,
        "hash_threads": hash_threads,
        "loadavg_start": list(os.getloadavg()),
        "contenders": {},
    }
    # hurray.before reads the file this hurray wrote: the same bytes for both
    kind = {c: "hurray" if c.startswith("hurray") else c for c in contenders}
    paths = {c: os.path.join(tmp, "many" + bench.EXT[kind[c]]) for c in contenders}
    mem_read = []
    try:
        for c in contenders:
            if c != "hurray.before":
                bench.run_worker("save", c, paths[c], "many", 1.0)
        runs = {c: [] for c in contenders}
        for r in range(reps):
            mem_read.append(bench.mem_read_rate(hash_threads)["gbps"])
            for c in contenders:
                python, env = runners[c]
                out = bench.run_worker(
                    "load", kind[c], paths[c], "many", 1.0, python=python, env=env
                )
                if "verify_gbps" in out:
                    out["verify_x_mem_read"] = out["verify_gbps"] / mem_read[-1]
                runs[c].append(out)
            print(
                f"round {r + 1}/{reps}: memory read {mem_read[-1]:.1f} GB/s, verify "
                + ", ".join(
                    f"{c} {runs[c][-1]['verify_gbps']:.1f} GB/s"
                    for c in contenders
                    if "verify_gbps" in runs[c][-1]
                ),
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["cold_cache"] = bool(bench.COLD)
    res["loadavg_end"] = list(os.getloadavg())
    res["mem_read_gbps"] = {
        "median": statistics.median(mem_read),
        "min": min(mem_read),
        "max": max(mem_read),
        "n": len(mem_read),
        "runs": mem_read,
    }
    for c in contenders:
        res["contenders"][c] = {k: bench.summarize(runs[c], k) for k in KEYS if k in runs[c][0]}
    s = res["contenders"]["safetensors.numpy"]
    for c in [c for c in contenders if c.startswith("hurray")]:
        h = res["contenders"][c]
        for k in ("open_s", "open_names_warm_s", "load_s"):
            print(
                f"{c:13s} {k:18s} {bench.fmt(h[k], 'ms')} ms  safetensors.numpy "
                f"{bench.fmt(s[k], 'ms')} ms  = {s[k]['median'] / h[k]['median']:.2f}x"
            )
        print(
            f"{c:13s} verify (b) {bench.fmt(h['verify_gbps'], 'gbps')} GB/s = "
            f"{h['verify_x_mem_read']['median']:.2f}x the memory-read rate of its round "
            f"({hash_threads} threads, {bench.fmt(res['mem_read_gbps'], 'gbps')} GB/s)"
        )
        if "verify_each_s" in h:
            print(
                f"{c:13s} verify tensor by tensor {bench.fmt(h['verify_each_s'], 'us')} µs a tensor"
            )
    if "hurray.before" in contenders:
        h, b = res["contenders"]["hurray"], res["contenders"]["hurray.before"]
        print(
            "after/before: "
            + ", ".join(
                f"{k} {b[k]['median'] / h[k]['median']:.2f}x faster"
                for k in ("open_s", "open_names_warm_s", "load_s")
            )
            + f", verify {h['verify_gbps']['median'] / b['verify_gbps']['median']:.2f}x"
        )
    print(f"cold {res['cold_cache']}, load average {res['loadavg_start']} -> {res['loadavg_end']}")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "many.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
