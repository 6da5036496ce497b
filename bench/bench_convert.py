"""Native conversion speed and memory: a 1 GiB safetensors file converted
to hurray and back by the C command (`hurray convert`, no Python), against
`cp` of the same file in the same run (docs/impl/convert.md, issue 15).

    make bench-convert            # or: python bench/bench_convert.py [--gib N] [--dir D] [--runs R]

Each step runs R times (median reported) with a warm page cache, the way cp
is measured too, after a `sync` so that no step pays for the writeback of
the step before. The C writer fsyncs before it publishes (the atomic
rename); cp does not, so the table also gives cp followed by `sync FILE`.
Peak RSS is the child's maximum resident set (getrusage). The file is
written here, without torch: 16 tensors (bf16, f16, f32) and __metadata__.
Results go to bench/results/convert.md (and .json)."""
import argparse
import json
import os
import resource
import shutil
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
        parts.append(f'"{name}":{{"dtype":"{dt}","shape":[{shape[0]},{shape[1]}],'
                     f'"data_offsets":[{at},{at + nbytes}]}}')
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


def timed(cmd):
    """Wall seconds and the child's peak RSS in MiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, max(peak, before) / 1024.0


def rss_of(cmd):
    """Peak RSS of one command alone, via /usr/bin/time if present."""
    if shutil.which("/usr/bin/time") is None:
        return None
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True, text=True)
    try:
        return int(r.stderr.strip().splitlines()[-1]) / 1024.0
    except (ValueError, IndexError):
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=3)
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
        "hurray -> safetensors (--no-verify)": [a.cli, "convert", mid, back, "--quiet",
                                                "--no-verify"],
    }
    times = {k: [] for k in steps}
    for _ in range(a.runs):
        for k, cmd in steps.items():
            # Every step writes a new file: freeing a replaced 1 GiB file is
            # not what is measured (the hurray file is reused as the next
            # steps' source, so it is replaced only by its own step).
            for f in (copy, back) + ((mid,) if k.startswith("safetensors ->") else ()):
                if os.path.exists(f):
                    os.unlink(f)
            os.sync()  # no step pays for the writeback of the one before
            times[k].append(timed(cmd)[0])
    with open(src, "rb") as x, open(back, "rb") as y:
        identical = x.read() == y.read()
    rss = {k: rss_of(cmd) for k, cmd in steps.items() if not k.startswith("cp + sync")}
    med = {k: statistics.median(v) for k, v in times.items()}
    rt = med["safetensors -> hurray"] + med["hurray -> safetensors"]
    rows = []
    for k in steps:
        rows.append((k, med[k], min(times[k]), size / med[k] / (1 << 30), med[k] / med["cp"],
                     med[k] / med["cp + sync"], rss.get(k)))
    load = os.getloadavg()
    lines = [
        "# Native conversion: safetensors -> hurray -> safetensors vs cp",
        "",
        f"`make bench-convert` (bench/bench_convert.py, {a.runs} runs, median; warm page cache).",
        f"File: {size / (1 << 30):.2f} GiB safetensors, 16 tensors (bf16/f16/f32), "
        f"__metadata__. Machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} "
        f"at the end (a shared machine: figures vary run to run).",
        "",
        "| step | median s | best s | GiB/s | x cp | x (cp + sync) | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for k, m, b, gbs, xcp, xcps, r in rows:
        lines.append(f"| {k} | {m:.3f} | {b:.3f} | {gbs:.2f} | {xcp:.2f} | {xcps:.2f} | "
                     f"{'-' if r is None else f'{r:.0f}'} |")
    lines += [
        "",
        f"Round trip (to hurray and back): {rt:.3f} s = {rt / med['cp']:.2f} x cp, "
        f"{rt / (2 * med['cp']):.2f} x two cps, {rt / (2 * med['cp + sync']):.2f} x two "
        "(cp + sync).",
        f"Back file byte-identical to the source: {identical}.",
        "",
        "The C writer fsyncs the file before the atomic rename, cp does not: the"
        " `x (cp + sync)` column compares like with like. hurray -> safetensors also"
        " checks every buffer's xxh3 checksum first (the default; `--no-verify` skips it).",
        "Peak RSS: the source is a read-only mapping whose pages are dropped from the"
        " process once written, so it stays near the largest tensor (64 MiB here), not"
        " the file size (the 0.25 GiB run gives 18 MiB with 16 MiB tensors).",
    ]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump({"bytes": size, "runs": a.runs, "median_s": med, "all_s": times,
                   "peak_rss_mib": rss, "identical": identical}, f, indent=2)
    print("\n".join(lines))
    for f in (src, mid, back, copy):
        if os.path.exists(f):
            os.unlink(f)
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
