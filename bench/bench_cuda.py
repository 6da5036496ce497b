"""Loading 1 GiB onto a GPU: hurray's pinned staging against the
host-to-device copy limit and against safetensors, measured in one run.

    python bench/bench_cuda.py [--out DIR] [--dir SCRATCH] [--mib 1024]

Needs torch with CUDA and a GPU (`make bench-cuda`; no test or other bench
depends on one). Writes DIR/cuda.json and DIR/cuda.md (DIR defaults to
bench/results). Every figure is the median over fresh processes, each of
which initialises CUDA before its clock starts:

- limit: one pinned 1 GiB buffer copied to the device (cudaMemcpyAsync),
  the most any loader can reach; also the host's own rate of reading the
  page cache into pinned memory on the loader's threads (the staging
  fill), which bounds a staged load from below the bus.
- warm loads (the file in the page cache) of hurray.torch.load_file and
  safetensors.torch.load_file with device="cuda": the first call of a
  process (it pays for allocating pinned memory) and later calls (torch
  keeps the pinned buffers).
- cold loads: the page cache dropped first (needs root; skipped otherwise).
- staging settings swept (buffer size, count, threads), later calls.
- dequantize on load: NF4 codes to bfloat16 on the CPU, then staged;
  the CPU part is time the GPU spends waiting.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


# ------------------------------------------------------------ worker side


# --dry-run: CPU stand-ins for the GPU, so that the script itself can be
# checked on a machine without one; its figures mean nothing.
DRY = os.environ.get("BENCH_CUDA_DRY") == "1"
DEV = "cpu" if DRY else "cuda"


def _sync():
    import torch

    if not DRY:
        torch.cuda.synchronize()


def _pinned(n):
    import torch

    return torch.empty(n, dtype=torch.uint8, pin_memory=not DRY)


def _sink():
    import torch

    from hurray.torch import _staged

    return _staged.CpuSink() if DRY else _staged.CudaSink(torch.device("cuda"))


def _clock(fn):
    _sync()
    t0 = time.perf_counter()
    r = fn()
    _sync()
    return time.perf_counter() - t0, r


def _warm(path):
    with open(path, "rb") as f:
        while f.read(64 * MiB):
            pass


def _drop_cache():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _loader(kind):
    if kind == "hurray":
        import hurray.torch

        if DRY:
            import torch

            return lambda path, device=None, **kw: hurray.torch._load(
                path, torch.device("cpu"), True, kw.get("dequantize"), _sink()
            )
        return hurray.torch.load_file
    import safetensors.torch

    return safetensors.torch.load_file


def worker(spec):
    import torch

    torch.empty(1, device=DEV)  # CUDA initialised before any clock
    what = spec["what"]
    out = {}
    if what == "limit":
        n = spec["bytes"]
        src = _pinned(n).fill_(1)
        dst = torch.empty(n, dtype=torch.uint8, device=DEV)
        out["h2d_s"] = [_clock(lambda: dst.copy_(src, non_blocking=True))[0] for _ in range(7)]
        # The staging fill's limit: the file's bytes read into pinned memory
        # by the loader's threads, no GPU involved.
        import hurray._hurray as _h
        from hurray.torch import _staged

        f = _h._File(spec["path"])
        spans, at = [], 0
        for name in f.keys():
            t = torch.from_dlpack(f._get(name))
            spans.append((name, 0, 0, t.numel() * t.element_size(), at))
            at += t.numel() * t.element_size()
        _warm(spec["path"])
        for threads in sorted({1, 8, _staged.read_threads(), 24, 32}):
            out[f"fill_threads{threads}_s"] = [
                _clock(lambda: f._read_spans(src.numpy(), spans, threads))[0] for _ in range(3)
            ]
        out["fill_bytes"] = at
        f.close()
        # What pinned memory costs the first time (torch caches it after).
        t0 = time.perf_counter()
        _pinned(32 * MiB)
        out["pin_32MiB_first_s"] = time.perf_counter() - t0
    elif what == "load":
        load = _loader(spec["loader"])
        kw = {"dequantize": getattr(torch, spec["dequantize"])} if spec.get("dequantize") else {}
        if spec.get("cold"):
            _drop_cache()
        else:
            _warm(spec["path"])
        calls = []
        for _ in range(spec.get("calls", 1)):
            dt, r = _clock(lambda: load(spec["path"], device=DEV, **kw))
            calls.append(dt)
            del r
        out["calls_s"] = calls
        if spec.get("cpu_too"):
            cpu = []
            for _ in range(3):
                t0 = time.perf_counter()
                r = load(spec["path"], **kw)
                cpu.append(time.perf_counter() - t0)
                del r
            out["cpu_s"] = cpu
    elif what == "sweep":
        from hurray.torch import _load, _staged

        _warm(spec["path"])
        sink = _sink()
        rows = []
        for chunk_mib in (32, 64, 128):
            for depth in (2, 3):
                for threads in sorted({8, 12, _staged.read_threads()}):
                    opts = dict(chunk=chunk_mib * MiB, depth=depth, threads=threads)
                    ts = [
                        _clock(lambda: _load(spec["path"], sink.device, True, None, sink, **opts))[
                            0
                        ]
                        for _ in range(3)
                    ]
                    rows.append({"chunk_mib": chunk_mib, "depth": depth, "threads": threads,
                                 "s": ts})  # fmt: skip
        out["rows"] = rows
    elif what == "check":
        import safetensors.torch

        a = _loader("hurray")(spec["path"], device=DEV)
        b = safetensors.torch.load_file(spec["peer"], device=DEV)
        out["same"] = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    print(json.dumps(out))


# ------------------------------------------------------------ parent side


def llama_like(mib):
    """Shapes of Llama-7B layers in bfloat16, as many layers as fit in
    about `mib` MiB, topped up with an embedding slice."""
    h, f = 4096, 11008
    shapes, total, layer = {}, 0, 0
    per_layer = (4 * h * h + 3 * f * h + 2 * h) * 2
    while total + per_layer <= mib * MiB:
        p = f"model.layers.{layer}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shapes[p + "self_attn." + n + ".weight"] = (h, h)
        for n in ("gate_proj", "up_proj"):
            shapes[p + "mlp." + n + ".weight"] = (f, h)
        shapes[p + "mlp.down_proj.weight"] = (h, f)
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        total += per_layer
        layer += 1
    rows = (mib * MiB - total) // (h * 2)
    if rows:
        shapes["model.embed_tokens.weight"] = (rows, h)
    return shapes


def make_files(scratch, mib):
    import numpy as np
    import safetensors.torch
    import torch

    import hurray
    import hurray.torch

    os.makedirs(scratch, exist_ok=True)
    paths = {k: os.path.join(scratch, f"model.{k}") for k in ("hurray", "safetensors")}
    paths["quant"] = os.path.join(scratch, "model-nf4.hurray")
    g = torch.Generator().manual_seed(0)
    tensors = {
        k: torch.randn(s, generator=g, dtype=torch.float32).to(torch.bfloat16)
        for k, s in llama_like(mib).items()
    }
    hurray.torch.save_file(tensors, paths["hurray"])
    safetensors.torch.save_file(tensors, paths["safetensors"])
    q = {}
    for k, t in tensors.items():
        a = t.float().numpy()
        q[k] = hurray.quantize(a, "nf4") if a.ndim == 2 else hurray.from_numpy(a.astype(np.float32))
    hurray.save(paths["quant"], q)
    nbytes = sum(t.numel() * 2 for t in tensors.values())
    return paths, nbytes, len(tensors)


# A worker that outlives this is reported, not waited for: a device lease
# is short, and a hung CUDA call must not eat it.
WORKER_TIMEOUT_S = 120


def run_worker(spec):
    print(f"bench_cuda: {spec['what']} {spec.get('loader', '')}", file=sys.stderr, flush=True)
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {spec} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def med(xs):
    return statistics.median(xs)


def spread(xs, scale=1e3, fmt="{:.1f}"):
    return f"{fmt.format(med(xs) * scale)} ({fmt.format(min(xs) * scale)}–{fmt.format(max(xs) * scale)}, n={len(xs)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--dir", default=os.environ.get("BENCH_DIR", "/tmp/hurray-bench-cuda"))
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="CPU stand-ins: checks the script only")
    ap.add_argument(
        "--from-json",
        nargs="+",
        metavar="JSON",
        help="write cuda.md again from saved runs (the first is the main one); measure nothing",
    )
    args = ap.parse_args()
    if args.from_json:
        runs = []
        for path in args.from_json:
            with open(path) as f:
                runs.append(json.load(f))
        text = "\n".join(report(r) for r in runs)
        with open(os.path.join(args.out, "cuda.md"), "w") as f:
            f.write(text)
        print(text)
        return 0
    if args.dry_run:
        os.environ["BENCH_CUDA_DRY"] = "1"
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    import torch

    if not torch.cuda.is_available() and not args.dry_run:
        print("bench_cuda: no CUDA device here; nothing measured (no test depends on one)")
        return 0
    t_start = time.time()
    res = {
        "loadavg_start": list(os.getloadavg()),
        "gpu": "none (dry run)" if args.dry_run else torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cpus": len(os.sched_getaffinity(0)),
        "numa_nodes": len(glob.glob("/sys/devices/system/node/node[0-9]*")),
    }
    try:
        import safetensors

        res["safetensors"] = safetensors.__version__
    except ImportError:
        res["safetensors"] = None
    with open("/proc/cpuinfo") as f:
        res["cpu"] = next(
            (l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?"
        )
    paths, nbytes, count = make_files(args.dir, args.mib)
    res.update(bytes=nbytes, tensors=count, file_bytes=os.path.getsize(paths["hurray"]))
    P = args.procs
    limit = [
        run_worker({"what": "limit", "bytes": nbytes, "path": paths["hurray"]}) for _ in range(P)
    ]
    res["limit"] = limit
    res["check"] = run_worker(
        {"what": "check", "path": paths["hurray"], "peer": paths["safetensors"]}
    )
    res["warm"] = {
        k: [
            run_worker({"what": "load", "loader": k, "path": paths[k], "calls": 5})
            for _ in range(P + 2)
        ]
        for k in ("hurray", "safetensors")
    }
    can_drop = os.geteuid() == 0 and not args.dry_run
    res["cold"] = (
        {
            k: [
                run_worker({"what": "load", "loader": k, "path": paths[k], "cold": True})
                for _ in range(2)
            ]
            for k in ("hurray", "safetensors")
        }
        if can_drop
        else None
    )
    res["sweep"] = run_worker({"what": "sweep", "path": paths["hurray"]})
    res["dequantize"] = [
        run_worker(
            {
                "what": "load",
                "loader": "hurray",
                "path": paths["quant"],
                "calls": 3,
                "dequantize": "bfloat16",
                "cpu_too": True,
            }
        )  # fmt: skip
        for _ in range(2)
    ]
    res["loadavg_end"] = list(os.getloadavg())
    res["wall_s"] = time.time() - t_start
    os.makedirs(args.out, exist_ok=True)
    text = report(res)
    with open(os.path.join(args.out, "cuda.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "cuda.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def gbs(nbytes, seconds):
    return nbytes / seconds / 1e9


def report(res):
    n = res["bytes"]
    h2d = [med(w["h2d_s"]) for w in res["limit"]]
    limit = gbs(n, med(h2d))
    lines = [
        f"# Loading 1 GiB onto a GPU (bench/bench_cuda.py){': ' + res['label'] if 'label' in res else ''}",
        "",
        f"{res['gpu']}, torch {res['torch']}, safetensors {res['safetensors']}, "
        f"{res['cpus']} CPUs ({res['cpu']}), {res.get('numa_nodes', '?')} NUMA node(s); load average {res['loadavg_start'][0]:.2f} at the "
        f"start, {res['loadavg_end'][0]:.2f} at the end; {res['wall_s']:.0f} s in all.",
        f"The file: {res['tensors']} bfloat16 tensors shaped like Llama-7B layers, "
        f"{n / MiB:.0f} MiB of tensor data. Medians over fresh processes (range, n); "
        "CUDA is initialised before each clock starts."
        + (f" Measured at commit {res['commit']}." if "commit" in res else ""),
        "",
        "| figure | ms | GB/s | of the limit |",
        "|---|---:|---:|---:|",
        f"| **limit**: pinned buffer to device, one copy | {spread(h2d)} | {limit:.1f} | 1.00 |",
    ]
    fills = {}
    for k in res["limit"][0]:
        if k.startswith("fill_threads"):
            xs = [med(w[k]) for w in res["limit"]]
            fills[k] = xs
            t = k[len("fill_threads") : -2]
            lines.append(
                f"| page cache into pinned memory, {t} threads (the staging fill, no GPU) | "
                f"{spread(xs)} | {gbs(res['limit'][0]['fill_bytes'], med(xs)):.1f} | "
                f"{gbs(res['limit'][0]['fill_bytes'], med(xs)) / limit:.2f} |"
            )

    def row(label, xs):
        lines.append(
            f"| {label} | {spread(xs)} | {gbs(n, med(xs)):.1f} | {gbs(n, med(xs)) / limit:.2f} |"
        )

    verdict = {}
    for k, runs in res["warm"].items():
        first = [r["calls_s"][0] for r in runs]
        later = [med(r["calls_s"][1:]) for r in runs]
        row(f"{k}.torch.load_file(device='cuda'), warm, first call of a process", first)
        row(f"{k}.torch.load_file(device='cuda'), warm, later calls", later)
        verdict[k] = (gbs(n, med(first)) / limit, gbs(n, med(later)) / limit)
    if res.get("cold"):
        for k, runs in res["cold"].items():
            row(
                f"{k}.torch.load_file(device='cuda'), cold (page cache dropped)",
                [r["calls_s"][0] for r in runs],
            )
    dq = res["dequantize"]
    total = [med(r["calls_s"][1:]) for r in dq]
    cpu = [med(r["cpu_s"]) for r in dq]
    row("hurray NF4 file, dequantize=bfloat16 to cuda, later calls", total)
    row("the same dequantize on the CPU alone (the GPU waits this long)", cpu)
    lines += [
        "",
        f"hurray and safetensors loaded the same values: {res['check'].get('same')}.",
        "",
        "## Goal",
        "",
        "| goal | figure | verdict |",
        "|---|---|---|",
    ]
    hf, hl = verdict["hurray"]
    sf, sl = verdict.get("safetensors", (None, None))
    lines.append(
        f"| load 1 GiB to cuda >= 80% of the host-to-device limit | first call {hf:.2f}x, later "
        f"calls {hl:.2f}x of {limit:.1f} GB/s (safetensors {sf:.2f}x / {sl:.2f}x) | "
        f"{'**met**' if hl >= 0.8 else '**not met**'} |"
    )
    lines += ["", "## Staging settings (later calls, one process)", "",
              "| buffer MiB | buffers | threads | ms | of the limit |", "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in sorted(res["sweep"]["rows"], key=lambda r: med(r["s"])):
        lines.append(
            f"| {r['chunk_mib']} | {r['depth']} | {r['threads']} | {med(r['s']) * 1e3:.1f} | "
            f"{gbs(n, med(r['s'])) / limit:.2f} |"
        )
    fill = max(
        (gbs(res["limit"][0]["fill_bytes"], med(xs)) / limit for xs in fills.values()), default=None
    )
    res["goal"] = {
        "limit_GBs": limit, "first": hf, "later": hl, "safetensors": [sf, sl], "fill": fill
    }  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
