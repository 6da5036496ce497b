"""Native conversion speed and memory: a 1 GiB safetensors file converted
to hurray and back by the C command (`hurray convert`, no Python), against
`cp` of the same file in the same run (docs/impl/convert.md, issue 15).

    make bench-convert            # or: python bench/bench_convert.py [--gib N] [--dir D] [--runs R]

Each run times every step once, in turn (so each ratio compares figures
taken under the same load), with a warm page cache, the way cp is measured
too, after a `sync` so that no step pays for the writeback of the step
before; R runs (default 7), median with min and max reported. The C writer
fsyncs before it publishes (the atomic rename); cp does not, so the table
also gives cp followed by `sync FILE`. A step during which the page cache
was dropped (other sessions on a shared machine run cold benchmarks: the
drop_pagecache count of /proc/vmstat moved) or that read more than 16 MiB
from the disk (its rusage) timed the disk, not the copy: it is run again,
and the table says how often that happened. Peak RSS is each child's own maximum
resident set (/usr/bin/time, one extra run). The file is
written here, without torch: 16 tensors (bf16, f16, f32) and __metadata__.
Results go to bench/results/convert.md (and .json)."""

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_safetensors(path, gib):
    total = int(gib * (1 << 30))
    n = 16
    per = total // n // 4096 * 4096
    kinds = [("BF16", 2), ("F16", 2), ("F32", 4)]
    entries, at = [], 0
    for i in range(n):
        dt, size = kinds[i % 3]
        rows = per // size // 4096
        entries.append((f"model.layers.{i:02d}.weight", dt, [rows, 4096], rows * 4096 * size))
    order = {"F32": 15, "BF16": 12, "F16": 11}  # safetensors' own writer order
    entries.sort(key=lambda e: (-order[e[1]], e[0]))
    parts = ['"__metadata__":{"format":"pt"}']
    for name, dt, shape, nbytes in entries:
        parts.append(
            f'"{name}":{{"dtype":"{dt}","shape":[{shape[0]},{shape[1]}],'
            f'"data_offsets":[{at},{at + nbytes}]}}'
        )
        at += nbytes
    header = ("{" + ",".join(parts) + "}").encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        left = at
        while left:
            k = min(left, len(chunk))
            f.write(chunk[:k])
            left -= k
    return at


def warm(path):
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def cache_drops():
    """How many times the page cache was dropped since boot (0 where
    /proc/vmstat does not say)."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("drop_pagecache "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(cmd):
    """Wall seconds, the child's ru_maxrss in MiB (which counts the
    pages of this Python process it was forked from: see rss_of), and
    whether the page cache was dropped meanwhile or the child read more
    than 16 MiB from the disk (a disturbed run)."""
    drops = cache_drops()
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    dt = time.perf_counter() - t0
    disturbed = cache_drops() != drops or usage.ru_inblock * 512 > (16 << 20)
    err = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {err.strip()}")
    return dt, usage.ru_maxrss / 1024.0, disturbed


def rss_of(cmd):
    """Peak RSS of one command alone, via /usr/bin/time (a fork of this
    Python process would count the interpreter's pages too); None without it."""
    if not os.path.exists("/usr/bin/time"):
        return None
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True, text=True)
    try:
        return int(r.stderr.strip().splitlines()[-1]) / 1024.0
    except (ValueError, IndexError):
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--dir", default=os.environ.get("BENCH_DIR", os.path.join(ROOT, "build")))
    p.add_argument("--cli", default=os.path.join(ROOT, "build", "hurray"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "convert"))
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    src = os.path.join(a.dir, "bench-convert.safetensors")
    mid = os.path.join(a.dir, "bench-convert.hurray")
    back = os.path.join(a.dir, "bench-convert-back.safetensors")
    copy = os.path.join(a.dir, "bench-convert-copy.safetensors")
    make_safetensors(src, a.gib)
    size = os.path.getsize(src)
    subprocess.run(["cat", src], stdout=subprocess.DEVNULL)  # warm the cache
    steps = {
        "cp": ["cp", src, copy],
        "cp + sync": ["sh", "-c", f'cp "{src}" "{copy}" && sync "{copy}"'],
        "safetensors -> hurray": [a.cli, "convert", src, mid, "--quiet"],
        "hurray -> safetensors": [a.cli, "convert", mid, back, "--quiet"],
        "hurray -> safetensors (--no-verify)": [
            a.cli,
            "convert",
            mid,
            back,
            "--quiet",
            "--no-verify",
        ],
    }
    load_start = os.getloadavg()
    times = {k: [] for k in steps}
    reruns = {k: 0 for k in steps}
    for _ in range(a.runs):
        # The steps of one run follow each other, so every ratio compares
        # figures taken under the same load.
        for k, cmd in steps.items():
            # Every step writes a new file: freeing a replaced 1 GiB file is
            # not what is measured (the hurray file is reused as the next
            # steps' source, so it is replaced only by its own step).
            # The step's source read back into the page cache: on a shared
            # machine others drop caches (cold benchmarks), and a step that
            # found its source evicted would time the disk, not the copy.
            # A step disturbed all the same is run again (at most 5 times).
            for attempt in range(6):
                for f in (copy, back) + ((mid,) if k.startswith("safetensors ->") else ()):
                    if os.path.exists(f):
                        os.unlink(f)
                os.sync()  # no step pays for the writeback of the one before
                warm(mid if k.startswith("hurray ->") else src)
                dt, _, disturbed = timed(cmd)
                if not disturbed or attempt == 5:
                    break
                reruns[k] += 1
            times[k].append(dt)
    load_end = os.getloadavg()
    with open(src, "rb") as x, open(back, "rb") as y:
        identical = x.read() == y.read()
    rss = {}
    for k, cmd in steps.items():
        if k != "cp + sync":
            for f in (copy, back):
                if os.path.exists(f):
                    os.unlink(f)
            rss[k] = rss_of(cmd)
    med = {k: statistics.median(v) for k, v in times.items()}
    # The round trip of each run (to hurray and back) against two copies of
    # that same run, then the median over runs.
    trip = [x + y for x, y in zip(times["safetensors -> hurray"], times["hurray -> safetensors"])]
    trip_x_cp = statistics.median(t / (2 * c) for t, c in zip(trip, times["cp"]))
    trip_cps = [t / (2 * c) for t, c in zip(trip, times["cp + sync"])]
    trip_x_cps = statistics.median(trip_cps)
    spread = {
        k: (
            min(t / c for t, c in zip(times[k], times["cp + sync"])),
            max(t / c for t, c in zip(times[k], times["cp + sync"])),
        )
        for k in steps
    }
    ratio = {
        k: (
            statistics.median(t / c for t, c in zip(times[k], times["cp"])),
            statistics.median(t / c for t, c in zip(times[k], times["cp + sync"])),
        )
        for k in steps
    }
    goal = 1.1
    lines = [
        "# Native conversion: safetensors -> hurray -> safetensors vs cp",
        "",
        f"`make bench-convert` (bench/bench_convert.py --runs {a.runs}): {a.runs} runs, each a "
        "fresh target after `sync`, warm page cache, steps interleaved.",
        f"File: {size / (1 << 30):.2f} GiB safetensors, 16 tensors (bf16/f16/f32), "
        f"__metadata__. Machine: {os.cpu_count()} CPUs, load average {load_start[0]:.1f} at the "
        f"start, {load_end[0]:.1f} at the end (a shared machine: figures vary run to run). "
        "Steps run again because the page cache was dropped during them or they read from "
        f"the disk: {sum(reruns.values())}"
        + (
            " (" + ", ".join(f"{k}: {v}" for k, v in reruns.items() if v) + ")"
            if any(reruns.values())
            else ""
        )
        + ".",
        "",
        "| step | median s | min s | max s | GiB/s | x cp | x (cp + sync) "
        "| x (cp + sync) min-max | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in steps:
        lines.append(
            f"| {k} | {med[k]:.3f} | {min(times[k]):.3f} | {max(times[k]):.3f} | "
            f"{size / med[k] / (1 << 30):.2f} | {ratio[k][0]:.2f} | {ratio[k][1]:.2f} | "
            f"{spread[k][0]:.2f}-{spread[k][1]:.2f} | "
            f"{'-' if rss.get(k) is None else f'{rss[k]:.0f}'} |"
        )
    lines += [
        f"| round trip (to hurray and back) | {statistics.median(trip):.3f} | {min(trip):.3f} | "
        f"{max(trip):.3f} | {2 * size / statistics.median(trip) / (1 << 30):.2f} | "
        f"{trip_x_cp:.2f} (of two cps) | {trip_x_cps:.2f} (of two) | "
        f"{min(trip_cps):.2f}-{max(trip_cps):.2f} | - |",
        "",
        "Ratios are the median over runs of each run's own ratio. Goal (issue 15): the round "
        f"trip in at most {goal}x the copy. **Judged against cp + sync**: the converter fsyncs "
        "the new file before its atomic rename (ADR-0011, ADR-0015), so the like-for-like copy "
        "is one that is also on the disk when it returns. Round trip: "
        f"{trip_x_cps:.2f}x (cp + sync), goal "
        f"{'**met**' if trip_x_cps <= goal else '**not met**'}; against plain cp (page cache "
        f"only, nothing durable) {trip_x_cp:.2f}x ({'met' if trip_x_cp <= goal else 'not met'} "
        "on that reading).",
        f"Back file byte-identical to the source: {identical}.",
        "",
        "The C writer fsyncs the file before the atomic rename, cp does not: the"
        " `x (cp + sync)` column compares like with like (both durable when they return;"
        " the converter also fsyncs the folder after the rename, which cp + sync does not)."
        " Both directions hash each 64 KiB piece just before writing it from the source's"
        " mapping (safetensors -> hurray computes the checksums it stores; hurray ->"
        " safetensors checks the stored ones, so a damaged source fails and the target keeps"
        " its old bytes; `--no-verify` skips the check), in writes that end on 64 KiB"
        " boundaries of the target, and start the writeback of every 8 MiB written"
        " (sync_file_range), so the final fsync has little left to wait for; where the source"
        " and target offsets agree within a page, hurray -> safetensors copies with"
        " copy_file_range after hashing.",
        "Peak RSS: one more run of each step under /usr/bin/time. The source is a read-only"
        " mapping whose pages are dropped from the process every 8 MiB once written, so the"
        " resident set stays near 8 MiB plus the program, whatever the file size.",
    ]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump(
            {
                "bytes": size,
                "runs": a.runs,
                "median_s": med,
                "all_s": times,
                "round_trip_s": trip,
                "ratio_cp": {k: v[0] for k, v in ratio.items()},
                "ratio_cp_sync": {k: v[1] for k, v in ratio.items()},
                "peak_rss_mib": rss,
                "reruns": reruns,
                "load": [load_start, load_end],
                "identical": identical,
            },
            f,
            indent=2,
        )
    print("\n".join(lines))
    for f in (src, mid, back, copy):
        if os.path.exists(f):
            os.unlink(f)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
