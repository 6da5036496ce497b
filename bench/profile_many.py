#!/usr/bin/env python3
"""Per-tensor overhead (issue 19): workload (b) of bench.py, 20,000 small
float32 tensors, saved, opened with every shape and loaded whole, by hurray
and safetensors.numpy in alternating fresh processes, with the plain-write
limit in the same run; and, with --profile DIR, a py-spy profile of each
hurray workload summarised as text (top frames by own and total samples).

    .venv/bin/python bench/profile_many.py [--reps 5] [--profile bench/results/profiles/after]

Every figure is the median of --reps fresh processes with min and max; the
machine is shared, so only the ratios measured in the same run mean much.
The load average is printed at the start and the end. `make bench-profile`
installs py-spy and runs it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402  (workload (b) and its helpers, one definition)

CONTENDERS = ["hurray", "safetensors.numpy"]
EXT = {"hurray": ".hurray", "safetensors.numpy": ".safetensors"}


def spec():
    return bench.workload_spec("many", 1.0)


def do_save(contender, path, arrays):
    if contender == "hurray":
        import hurray

        hurray.save(path, arrays)  # temp file, fsync, rename
    else:
        from safetensors.numpy import save_file

        save_file(arrays, path)
        bench.fsync_path(path)


def do_open(contender, path):
    """Opens and reads every name and shape; returns the handle."""
    if contender == "hurray":
        import hurray

        f = hurray.open(path)
        shapes = [f.shape(n) for n in f.keys()]
    else:
        from safetensors import safe_open

        f = safe_open(path, "numpy")
        shapes = [f.get_slice(n).get_shape() for n in f.keys()]
    assert len(shapes) == 20000
    return f


def do_load(contender, path):
    if contender == "hurray":
        import hurray

        d = hurray.load(path)
    else:
        from safetensors.numpy import load_file

        d = load_file(path)
    return sum(bench.touch(np.asarray(a)) for a in d.values())


def worker(kind, contender, path, repeat):
    bench.preimport(contender)
    arrays = bench.make_arrays(spec()) if kind in ("save", "plain_write") else None
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        if kind == "save":
            do_save(contender, path, arrays)
        elif kind == "open":
            do_open(contender, path)
        elif kind == "load":
            do_load(contender, path)
        times.append(time.perf_counter() - t0)
    return {"s": min(times) if repeat > 1 else times[0]}


def run(*args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def med(vals):
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarise_collapsed(path, top=25):
    """Top frames of a py-spy --format raw (collapsed stacks) file: own
    samples (the frame on top of the stack) and total samples (anywhere)."""
    own, total = collections.Counter(), collections.Counter()
    n = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            c = int(count)
            n += c
            frames = stack.split(";")
            own[frames[-1]] += c
            for fr in set(frames):
                total[fr] += c
    lines = [f"samples: {n}", "", f"top {top} frames by own samples (share, own, frame):"]
    for fr, c in own.most_common(top):
        lines.append(f"  {c / n:6.1%} {c:7d}  {fr}")
    lines += ["", f"top {top} frames by total samples (share, total, frame):"]
    for fr, c in total.most_common(top):
        lines.append(f"  {c / n:6.1%} {c:7d}  {fr}")
    return "\n".join(lines) + "\n"


def profile(outdir, tmp):
    """py-spy record (native frames included) of each hurray workload,
    repeated in one process so that there are enough samples."""
    pyspy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(tmp, "many.hurray")
    run("save", "hurray", path, 1)
    for kind, repeat in (("save", 15), ("open", 30), ("load", 15)):
        raw = os.path.join(outdir, f"{kind}.collapsed")
        cmd = [pyspy, "record", "--native", "--rate", "250", "--format", "raw", "-o", raw, "--"]
        cmd += [sys.executable, os.path.abspath(__file__), "--worker", kind, "hurray", path]
        subprocess.run(cmd + [str(repeat)], check=True, capture_output=True)
        with open(os.path.join(outdir, f"{kind}.txt"), "w") as f:
            f.write(f"py-spy record --native --rate 250: hurray {kind}, workload (b) x{repeat}\n")
            f.write(summarise_collapsed(raw))
        print(f"profile {kind}: {os.path.join(outdir, kind + '.txt')}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", metavar="DIR")
    ap.add_argument("--json", metavar="PATH", help="also writes PATH with .md for .json")
    ap.add_argument("--render", metavar="JSON", help="only print the table of a saved run")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)))
        return
    load0 = open("/proc/loadavg").read().strip()
    print("loadavg start:", load0, flush=True)
    with tempfile.TemporaryDirectory(dir=os.path.join(bench.ROOT, "build")) as tmp:
        if args.profile:
            profile(args.profile, tmp)
        res = {c: collections.defaultdict(list) for c in CONTENDERS}
        limit = []
        for _ in range(args.reps):
            limit.append(run("plain_write", "-", os.path.join(tmp, "raw"), 1)["s"])
            for c in CONTENDERS:
                path = os.path.join(tmp, "many" + EXT[c])
                for kind in ("save", "open", "load"):
                    res[c][kind].append(run(kind, c, path, 1)["s"])
        load1 = open("/proc/loadavg").read().strip()
    out = {"loadavg_start": load0, "loadavg_end": load1, "plain_write_s": med(limit)}
    for c in CONTENDERS:
        out[c] = {k: med(v) for k, v in res[c].items()}
    h, s = out["hurray"], out["safetensors.numpy"]
    out["reps"] = args.reps
    out["ratios"] = {
        "save_vs_safetensors": s["save"]["median"] / h["save"]["median"],
        "save_vs_plain_write": out["plain_write_s"]["median"] / h["save"]["median"],
        "open_vs_safe_open": s["open"]["median"] / h["open"]["median"],
        "load_vs_safetensors": s["load"]["median"] / h["load"]["median"],
    }
    md = render(out)
    print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        with open(os.path.splitext(args.json)[0] + ".md", "w") as f:
            f.write(md)


GOALS = {
    "save_vs_safetensors": 1.2,
    "save_vs_plain_write": 0.9,
    "open_vs_safe_open": 3.0,
    "load_vs_safetensors": 2.0,
}


def render(out):
    """The figures and the ratios against the goals of issue 19, markdown."""
    h, s = out["hurray"], out["safetensors.numpy"]
    reps = out.get("reps", h["save"]["n"])
    lines = [
        "Workload (b): 20,000 float32 tensors of 64-4096 elements, warm page cache.",
        f"Load average at start: {out['loadavg_start']}; at end: {out['loadavg_end']}.",
        "",
        f"| seconds (median of {reps} fresh processes, min-max) | hurray | safetensors.numpy |",
        "|---|---|---|",
    ]
    for kind, label in (
        ("save", "save (fsync)"),
        ("open", "open + every shape"),
        ("load", "load all + read"),
    ):
        lines.append(
            f"| {label} | {h[kind]['median']:.4f} ({h[kind]['min']:.4f}-{h[kind]['max']:.4f}) "
            f"| {s[kind]['median']:.4f} ({s[kind]['min']:.4f}-{s[kind]['max']:.4f}) |"
        )
    pw = out["plain_write_s"]
    lines += [
        f"| plain write + fsync (limit) | {pw['median']:.4f} ({pw['min']:.4f}-{pw['max']:.4f}) | |",
        "",
        "| ratio | measured | goal | |",
        "|---|---|---|---|",
    ]
    for k, v in out["ratios"].items():
        lines.append(
            f"| {k} | {v:.2f}x | >= {GOALS[k]}x | {'met' if v >= GOALS[k] else 'not met'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        kind, contender, path, repeat = sys.argv[2:6]
        if kind == "plain_write":
            print(json.dumps({"s": bench.w_plain_write(path, spec())["write_s"]}))
        else:
            print(json.dumps(worker(kind, contender, path, int(repeat))))
    else:
        main()
