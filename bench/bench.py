#!/usr/bin/env python3
"""hurray vs safetensors / numpy.savez / torch.save, next to the machine's limits.

Run with the project's virtual environment (``make bench`` installs safetensors
and matplotlib first):

    .venv/bin/python bench/bench.py

Every measurement runs in a fresh subprocess (``bench.py --worker ...``), the
page cache is dropped before each one when that is allowed (root), and the
figures are medians over BENCH_REPS runs with min/max as the spread.

Environment:
    BENCH_SCALE  size of workload (a) relative to 1 GiB (default 1.0)
    BENCH_REPS   fresh-process repetitions per measurement (default 3)
    BENCH_DIR    scratch folder (default build); files go to BENCH_DIR/bench-py-tmp
    BENCH_OUT    results folder (default bench/results)
"""
from __future__ import annotations

import gc
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
GiB = 1 << 30

CONTENDERS = ["hurray", "safetensors.numpy", "safetensors.torch", "numpy.savez", "torch.save"]
EXT = {"hurray": ".hurray", "safetensors.numpy": ".safetensors", "safetensors.torch": ".safetensors",
       "numpy.savez": ".npz", "torch.save": ".pt"}


# ----------------------------------------------------------------- workloads

def _pools():
    """64 MiB of deterministic float32 noise and the same as bfloat16 bits."""
    import ml_dtypes
    rng = np.random.default_rng(20261129)
    f32 = rng.standard_normal(16 * MiB, dtype=np.float32)
    bf16 = (f32.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)
    return f32, bf16


def _fill(pool, n, offset):
    out = np.empty(n, dtype=pool.dtype)
    done = 0
    offset %= pool.size
    while done < n:
        take = min(n - done, pool.size - offset)
        out[done:done + take] = pool[offset:offset + take]
        done += take
        offset = 0
    return out


def workload_spec(name, scale):
    """[(tensor name, dtype name, shape)] — deterministic; element counts are
    multiples of 4 so every tensor is a whole number of uint64 words."""
    rng = np.random.default_rng(7 if name == "large" else 11)
    spec = []
    if name == "large":
        total = int(GiB * scale)
        n = 200
        weights = rng.uniform(0.2, 1.8, n)
        weights /= weights.sum()
        for i in range(n):
            dtype = "bfloat16" if i % 2 else "float32"
            item = 2 if dtype == "bfloat16" else 4
            want = max(8, int(total * weights[i]) // item)
            if i % 10 == 9:  # a few 1-D tensors (norms, biases, ...)
                shape = (max(4, want // 4 * 4),)
            else:
                cols = int(rng.choice([256, 512, 768, 1024, 2048, 4096]))
                shape = (max(1, want // cols), cols)
            spec.append((f"layers.{i:03d}.weight", dtype, shape))
    else:
        for i in range(20000):
            n = int(rng.integers(16, 1025)) * 4  # 64..4096 elements
            spec.append((f"t.{i:05d}", "float32", (n,)))
    return spec


def make_arrays(spec):
    f32, bf16 = _pools()
    out = {}
    for i, (name, dtype, shape) in enumerate(spec):
        pool = bf16 if dtype == "bfloat16" else f32
        out[name] = _fill(pool, int(np.prod(shape)), i * 7919 * 64).reshape(shape)
    return out


def spec_bytes(spec):
    return sum(int(np.prod(s)) * (2 if d == "bfloat16" else 4) for _, d, s in spec)


# ------------------------------------------------------------------ helpers

def touch(a):
    """Reads every byte once (a uint64 sum over the bytes)."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    if b.size % 8 == 0:
        return int(np.add.reduce(b.view(np.uint64)))
    return int(np.add.reduce(b, dtype=np.uint64))


def as_u8(t):
    """A numpy uint8 view of a torch tensor (works for bfloat16 too)."""
    return t.contiguous().view(-1).view(__import__("torch").uint8).numpy()


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak():
    """Resets VmHWM to the current RSS (Linux >= 4.0); False if not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_caches():
    try:
        subprocess.run(["sync"], check=False)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def to_torch(arrays):
    import torch
    out = {}
    for k, a in arrays.items():
        if a.dtype.itemsize == 2 and a.dtype.kind == "V" or str(a.dtype) == "bfloat16":
            out[k] = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        else:
            out[k] = torch.from_numpy(a)
    return out


# ------------------------------------------------------------------ workers

def w_save(contender, path, spec):
    arrays = make_arrays(spec)
    if contender in ("safetensors.torch", "torch.save"):
        payload = to_torch(arrays)
    else:
        payload = arrays
    gc.collect()
    rss0 = status_kib("VmRSS")
    peak_ok = reset_peak()
    t0 = time.perf_counter()
    if contender == "hurray":
        import hurray
        hurray.save(path, payload)  # temp file, fsync, rename
    elif contender == "safetensors.numpy":
        from safetensors.numpy import save_file
        save_file(payload, path)
        fsync_path(path)
    elif contender == "safetensors.torch":
        from safetensors.torch import save_file
        save_file(payload, path)
        fsync_path(path)
    elif contender == "numpy.savez":
        np.savez(path, **payload)
        fsync_path(path)
    elif contender == "torch.save":
        import torch
        torch.save(payload, path)
        fsync_path(path)
    dt = time.perf_counter() - t0
    hwm = status_kib("VmHWM")
    return {"save_s": dt, "save_rss_before_mib": rss0 / 1024, "save_peak_mib": hwm / 1024,
            "save_growth_mib": (hwm - rss0) / 1024 if peak_ok else None,
            "input_mib": spec_bytes(spec) / MiB, "file_mib": os.path.getsize(path) / MiB}


def _open(contender, path):
    """Names and shapes, nothing more. Returns the count (and keeps handles)."""
    if contender == "hurray":
        import hurray
        f = hurray.open(path)
        names = f.keys()
        shapes = [f.descriptor(n).shape for n in names]
    elif contender.startswith("safetensors"):
        from safetensors import safe_open
        f = safe_open(path, "numpy" if contender.endswith("numpy") else "pt")
        names = list(f.keys())
        shapes = [f.get_slice(n).get_shape() for n in names]
    elif contender == "numpy.savez":
        f = np.load(path)
        names = f.files
        shapes = []
        for n in names:  # the .npy header of each member, no data
            with f.zip.open(n + ".npy") as fp:
                version = np.lib.format.read_magic(fp)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shapes.append(read(fp)[0])
    else:
        import torch
        f = torch.load(path, weights_only=True, mmap=True)
        names = list(f.keys())
        shapes = [tuple(v.shape) for v in f.values()]
    return f, names, shapes


def _open_names(contender, path):
    if contender == "hurray":
        import hurray
        f = hurray.open(path)
        return f, f.keys(), None
    if contender.startswith("safetensors"):
        from safetensors import safe_open
        f = safe_open(path, "numpy" if contender.endswith("numpy") else "pt")
        return f, list(f.keys()), None
    if contender == "numpy.savez":
        f = np.load(path)
        return f, f.files, None
    import torch
    f = torch.load(path, weights_only=True, mmap=True)
    return f, list(f.keys()), None


def w_load(contender, path, spec):
    rss0 = status_kib("VmRSS")
    reset_peak()
    t0 = time.perf_counter()
    f, names, shapes = _open(contender, path)
    t_open = time.perf_counter() - t0
    assert len(names) == len(spec)
    t0 = time.perf_counter()  # names only, warm now: the index is cached
    g, names2, _ = _open_names(contender, path)
    t_names = time.perf_counter() - t0
    del g
    del f
    t0 = time.perf_counter()
    total = 0
    if contender == "hurray":
        import hurray
        d = hurray.load(path)
        for t in d.values():
            total += touch(np.asarray(t))
    elif contender == "safetensors.numpy":
        from safetensors.numpy import load_file
        d = load_file(path)
        for a in d.values():
            total += touch(a)
    elif contender == "safetensors.torch":
        from safetensors.torch import load_file
        d = load_file(path)
        for t in d.values():
            total += touch(as_u8(t))
    elif contender == "numpy.savez":
        z = np.load(path)
        d = {}
        for n in z.files:
            d[n] = z[n]
            total += touch(d[n])
    else:
        import torch
        d = torch.load(path, weights_only=True, mmap=True)
        for t in d.values():
            total += touch(as_u8(t))
    t_load = time.perf_counter() - t0
    hwm = status_kib("VmHWM")
    out = {"open_s": t_open, "open_names_warm_s": t_names, "load_s": t_load, "load_peak_mib": hwm / 1024,
           "load_growth_mib": (hwm - rss0) / 1024, "checksum": total % (1 << 61)}
    del d
    if contender == "hurray":  # warm: the bytes were just read
        import hurray
        with hurray.open(path) as f:
            t0 = time.perf_counter()
            f.verify()
            out["verify_s"] = time.perf_counter() - t0
        out["verify_gbps"] = os.path.getsize(path) / out["verify_s"] / 1e9
    return out


def w_random(contender, path, name):
    t0 = time.perf_counter()
    if contender == "hurray":
        import hurray
        with hurray.open(path) as f:
            touch(np.asarray(f[name]))
    elif contender.startswith("safetensors"):
        from safetensors import safe_open
        fw = "numpy" if contender.endswith("numpy") else "pt"
        with safe_open(path, fw) as f:
            t = f.get_tensor(name)
            touch(t if fw == "numpy" else as_u8(t))
    elif contender == "numpy.savez":
        with np.load(path) as z:
            touch(z[name])
    else:
        import torch
        d = torch.load(path, weights_only=True, mmap=True)
        touch(as_u8(d[name]))
    return {"random_s": time.perf_counter() - t0}


def w_plain_write(path, spec):
    arrays = make_arrays(spec)
    gc.collect()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for a in arrays.values():
            mv = memoryview(a.reshape(-1).view(np.uint8))
            while mv:
                n = os.write(fd, mv)
                mv = mv[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"write_s": time.perf_counter() - t0, "bytes": spec_bytes(spec)}


def w_mmap_touch(path, full):
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        a = np.frombuffer(m, dtype=np.uint8)
        if full:  # every byte, the same work as load-all's touch()
            s = touch(a)
        else:  # one byte per 4096-byte page
            s = int(a[::4096].sum())
        del a
        m.close()
    return {"s": time.perf_counter() - t0, "sum": s}


def w_memcpy():
    src = np.ones(256 * MiB, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return {"s": min(times), "gbps": src.nbytes / min(times) / 1e9}


def w_capsule(iters=5000):
    import hurray
    import torch
    arr = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    ht = hurray.from_numpy(arr)
    tt = torch.from_numpy(arr)

    def per_call(fn, x):
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(x)
            best.append((time.perf_counter() - t0) / iters)
        return statistics.median(best)
    for _ in range(1000):
        hurray.from_hurray(ht)
        torch.from_dlpack(tt)
    return {"hurray_from_hurray_s": per_call(hurray.from_hurray, ht),
            "torch_from_dlpack_s": per_call(torch.from_dlpack, tt)}


def preimport(contender):
    """Imports outside every timed region (module import is not file work)."""
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
    if contender == "hurray":
        import hurray  # noqa: F401
    if contender.startswith("safetensors"):
        import safetensors.numpy  # noqa: F401
        from safetensors import safe_open  # noqa: F401
    if contender.endswith("torch") or contender == "torch.save":
        import torch  # noqa: F401
        import safetensors.torch  # noqa: F401


def worker(argv):
    kind = argv[0]
    if kind in ("save", "load", "random"):
        preimport(argv[1])
    if kind == "save":
        contender, path, wl, scale = argv[1], argv[2], argv[3], float(argv[4])
        res = w_save(contender, path, workload_spec(wl, scale))
    elif kind == "load":
        contender, path, wl, scale = argv[1], argv[2], argv[3], float(argv[4])
        res = w_load(contender, path, workload_spec(wl, scale))
    elif kind == "random":
        res = w_random(argv[1], argv[2], argv[3])
    elif kind == "plain_write":
        res = w_plain_write(argv[1], workload_spec(argv[2], float(argv[3])))
    elif kind == "mmap_touch":
        res = w_mmap_touch(argv[1], argv[2] == "full")
    elif kind == "memcpy":
        res = w_memcpy()
    elif kind == "capsule":
        res = w_capsule()
    else:
        raise SystemExit(f"unknown worker {kind}")
    print(json.dumps(res))


# ------------------------------------------------------------------ driver

COLD = None


def run_worker(*args):
    global COLD
    dropped = drop_caches()
    if COLD is None:
        COLD = dropped
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def summarize(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def main():
    scale = float(os.environ.get("BENCH_SCALE", "1.0"))
    reps = int(os.environ.get("BENCH_REPS", "3"))
    # A folder of its own under BENCH_DIR (removed at the end; BENCH_DIR is left alone).
    tmp = os.path.join(os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(ROOT, "build"))),
                       "bench-py-tmp")
    outdir = os.path.abspath(os.environ.get("BENCH_OUT", os.path.join(HERE, "results")))
    os.makedirs(tmp, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)
    started = time.time()
    res = {"config": {"scale": scale, "reps": reps, "dir": tmp, "cpus": os.cpu_count(),
                      "python": platform.python_version(), "machine": platform.machine()},
           "limits": {}, "workloads": {}}
    try:
        import hurray, safetensors, torch  # noqa: E401
        res["config"]["versions"] = {"numpy": np.__version__, "torch": torch.__version__,
                                     "safetensors": safetensors.__version__,
                                     "hurray": getattr(hurray, "__version__", "checkout")}
    except ImportError as e:
        raise SystemExit(f"missing dependency: {e} (run `make bench`)")

    log = lambda *a: print(f"[{time.time() - started:6.1f}s]", *a, flush=True)  # noqa: E731
    res["limits"]["memcpy"] = summarize([run_worker("memcpy") for _ in range(reps)], "gbps")
    log("memcpy", res["limits"]["memcpy"])
    caps = [run_worker("capsule") for _ in range(reps)]
    res["capsule"] = {k: summarize(caps, k) for k in caps[0]}
    log("capsule", res["capsule"])

    for wl in ("large", "many"):
        spec = workload_spec(wl, scale if wl == "large" else 1.0)
        nbytes = spec_bytes(spec)
        wres = {"tensors": len(spec), "bytes": nbytes,
                "scale": scale if wl == "large" else 1.0, "limits": {}, "contenders": {}}
        raw = os.path.join(tmp, f"{wl}.raw")
        pw, mt, mf = [], [], []
        for _ in range(reps):
            pw.append(run_worker("plain_write", raw, wl, wres["scale"]))
            mt.append(run_worker("mmap_touch", raw, "page"))
            mf.append(run_worker("mmap_touch", raw, "full"))
        os.unlink(raw)
        wres["limits"] = {"plain_write_s": summarize(pw, "write_s"),
                          "mmap_page_touch_s": summarize(mt, "s"),
                          "mmap_full_touch_s": summarize(mf, "s")}
        log(wl, "limits", {k: round(v["median"], 4) for k, v in wres["limits"].items()})
        rng = np.random.default_rng(99)
        picks = [spec[int(rng.integers(len(spec)))][0] for _ in range(reps)]
        for c in CONTENDERS:
            path = os.path.join(tmp, wl + EXT[c])
            saves, loads, rands = [], [], []
            for r in range(reps):
                saves.append(run_worker("save", c, path, wl, wres["scale"]))
                loads.append(run_worker("load", c, path, wl, wres["scale"]))
                rands.append(run_worker("random", c, path, picks[r]))
            os.unlink(path)
            cres = {}
            for runs in (saves, loads, rands):
                for k in runs[0]:
                    if k != "checksum":
                        cres[k] = summarize(runs, k)
            sums = {l["checksum"] for l in loads}
            cres["checksum_agree"] = len(sums) == 1
            wres["contenders"][c] = cres
            wres.setdefault("checksums", {})[c] = sums.pop() if len(sums) == 1 else None
            log(wl, c, "save", round(cres["save_s"]["median"], 3), "open",
                round(cres["open_s"]["median"], 4), "load", round(cres["load_s"]["median"], 3))
        res["workloads"][wl] = wres
    shutil.rmtree(tmp, ignore_errors=True)
    res["config"]["cold_cache"] = bool(COLD)
    res["config"]["runtime_s"] = time.time() - started
    c_out = os.path.join(outdir, "c_write_peak_rss.txt")
    res["c_bench"] = open(c_out).read() if os.path.exists(c_out) else None

    with open(os.path.join(outdir, "latest.json"), "w") as f:
        json.dump(res, f, indent=2)
    md = render_md(res)
    with open(os.path.join(outdir, "latest.md"), "w") as f:
        f.write(md)
    render_png(res, os.path.join(outdir, "latest.png"))
    print(md)
    log("done")


# ------------------------------------------------------------------ reports

def fmt(s, unit="s"):
    if s is None:
        return "n/a"
    m, lo, hi = s["median"], s["min"], s["max"]
    if unit == "ms":
        return f"{m * 1e3:.2f} ({lo * 1e3:.2f}–{hi * 1e3:.2f})"
    if unit == "us":
        return f"{m * 1e6:.2f} ({lo * 1e6:.2f}–{hi * 1e6:.2f})"
    if unit == "mib":
        return f"{m:.0f} ({lo:.0f}–{hi:.0f})"
    return f"{m:.3f} ({lo:.3f}–{hi:.3f})"


def med(s):
    return None if s is None else s["median"]


def goals(res):
    out = []
    a = res["workloads"]["large"]
    b = res["workloads"]["many"]

    def verdict(ok):
        return "**MET**" if ok else "**NOT MET**"
    for wl_name, w in (("(a) large", a), ("(b) many", b)):
        h = w["contenders"]["hurray"]
        st = min(med(w["contenders"][c]["save_s"]) for c in ("safetensors.numpy", "safetensors.torch"))
        ratio_limit = med(w["limits"]["plain_write_s"]) / med(h["save_s"])
        ratio_st = st / med(h["save_s"])
        out.append(f"- Save {wl_name}: hurray reaches {ratio_limit:.2f}x of the plain-write limit "
                   f"(goal >= 0.9x) and is {ratio_st:.2f}x faster than the faster safetensors "
                   f"(goal >= 1.5x): {verdict(ratio_limit >= 0.9 and ratio_st >= 1.5)}")
    for wl_name, w in (("(a) large", a), ("(b) many", b)):
        g = med(w["contenders"]["hurray"]["save_growth_mib"])
        out.append(f"- Peak RSS during save {wl_name}: grows by {g:.1f} MiB over the resident "
                   f"input ({w['bytes'] / MiB:.0f} MiB) (goal <= +64 MiB): {verdict(g <= 64)}")
    ho = med(b["contenders"]["hurray"]["open_s"])
    so = med(b["contenders"]["safetensors.numpy"]["open_s"])
    out.append(f"- Open of (b): hurray {ho * 1e3:.2f} ms vs safe_open {so * 1e3:.2f} ms = "
               f"{so / ho:.2f}x faster (goal >= 2x): {verdict(so / ho >= 2)}")
    for wl_name, w in (("(a) large", a), ("(b) many", b)):
        hl = med(w["contenders"]["hurray"]["load_s"])
        lim = med(w["limits"]["mmap_page_touch_s"])
        full = med(w["limits"]["mmap_full_touch_s"])
        out.append(f"- Load-all {wl_name}: {hl:.3f} s = {hl / lim:.2f}x the mmap page-touch limit "
                   f"(goal <= 1.2x): {verdict(hl / lim <= 1.2)}; like-for-like against an mmap "
                   f"read of every byte with the same uint64 sum: {hl / full:.2f}x "
                   f"({verdict(hl / full <= 1.2)} on that reading)")
    vs = [med(w["contenders"]["hurray"]["verify_gbps"]) for w in (a, b)]
    out.append(f"- Verification throughput (warm): (a) {vs[0]:.1f} GB/s, (b) {vs[1]:.1f} GB/s "
               f"(goal >= 10 GB/s): {verdict(min(vs) >= 10)}")
    hc = med(res["capsule"]["hurray_from_hurray_s"])
    tc = med(res["capsule"]["torch_from_dlpack_s"])
    out.append(f"- Capsule round trip: hurray.from_hurray {hc * 1e6:.2f} µs vs torch.from_dlpack "
               f"{tc * 1e6:.2f} µs = {hc / tc:.2f}x (goal <= 2x): {verdict(hc / tc <= 2)}")
    return out


def render_md(res):
    cfg = res["config"]
    L = []
    L.append("# hurray benchmark — latest results\n")
    L.append(f"Generated by `make bench` (`bench/bench.py`). Scale of workload (a): "
             f"**{cfg['scale']}** (BENCH_SCALE; 1.0 = 1 GiB). Repetitions: **{cfg['reps']}** fresh "
             f"processes per figure; cells show median (min–max). Machine: {cfg['cpus']} CPUs, "
             f"{cfg['machine']}, Python {cfg['python']}; versions {cfg.get('versions')}. "
             f"Total runtime of bench.py: {cfg['runtime_s']:.0f} s.\n")
    if cfg["cold_cache"]:
        L.append("Cache: **cold** — `sync; echo 3 > /proc/sys/vm/drop_caches` ran before every "
                 "measured process (saves, opens, load-all, random reads, mmap limits). Exceptions: "
                 "hurray verification runs right after load-all in the same process (**warm**), "
                 "and memcpy / capsule figures are pure memory operations.\n")
    else:
        L.append("Cache: **warm** page cache (dropping caches needs root and was refused).\n")
    mc = res["limits"]["memcpy"]
    L.append(f"memcpy limit (np.copyto of 256 MiB, best of 5 per process): {mc['median']:.2f} GB/s "
             f"(min {mc['min']:.2f}, max {mc['max']:.2f}).\n")
    for wl, w in res["workloads"].items():
        lim = w["limits"]
        title = ("(a) large — mixed float32/bfloat16, 200 tensors" if wl == "large"
                 else "(b) many — 20,000 small float32 tensors (64–4096 elements)")
        L.append(f"## Workload {title}\n")
        L.append(f"{w['tensors']} tensors, {w['bytes'] / MiB:.1f} MiB of tensor data "
                 f"(scale {w['scale']}).\n")
        L.append(f"Limits: plain `os.write` + fsync {fmt(lim['plain_write_s'])} s "
                 f"({w['bytes'] / med(lim['plain_write_s']) / MiB:.0f} MiB/s); mmap page touch "
                 f"(1 byte / 4096) {fmt(lim['mmap_page_touch_s'])} s; mmap read of every byte "
                 f"(same uint64 sum as load-all) {fmt(lim['mmap_full_touch_s'])} s.\n")
        sts = min(med(w["contenders"][c]["save_s"]) for c in ("safetensors.numpy", "safetensors.torch"))
        sto = med(w["contenders"]["safetensors.numpy"]["open_s"])
        stl = min(med(w["contenders"][c]["load_s"]) for c in ("safetensors.numpy", "safetensors.torch"))
        L.append("| contender | save s | save MiB/s | save / plain-write limit | save speedup vs best "
                 "safetensors | save peak RSS growth MiB | open ms | open speedup vs safe_open | "
                 "open names-only ms (warm) | load-all s | load-all / mmap page-touch | load-all / mmap full read | load-all "
                 "speedup vs best safetensors | random tensor ms | load peak RSS growth MiB | file MiB |")
        L.append("|" + "---|" * 16)
        for c, r in w["contenders"].items():
            s, o, l = med(r["save_s"]), med(r["open_s"]), med(r["load_s"])
            L.append(
                f"| {c} | {fmt(r['save_s'])} | {w['bytes'] / s / MiB:.0f} | "
                f"{med(lim['plain_write_s']) / s:.2f}x | {sts / s:.2f}x | {fmt(r['save_growth_mib'], 'mib')} | "
                f"{fmt(r['open_s'], 'ms')} | {sto / o:.2f}x | {fmt(r['open_names_warm_s'], 'ms')} | "
                f"{fmt(r['load_s'])} | "
                f"{l / med(lim['mmap_page_touch_s']):.2f}x | {l / med(lim['mmap_full_touch_s']):.2f}x | "
                f"{stl / l:.2f}x | {fmt(r['random_s'], 'ms')} | {fmt(r['load_growth_mib'], 'mib')} | "
                f"{med(r['file_mib']):.1f} |")
        h = w["contenders"]["hurray"]
        L.append(f"\nhurray `File.verify()` (warm): {fmt(h['verify_s'])} s = "
                 f"{med(h['verify_gbps']):.1f} GB/s (min {h['verify_gbps']['min']:.1f}, "
                 f"max {h['verify_gbps']['max']:.1f}).\n")
        agree = all(r["checksum_agree"] for r in w["contenders"].values())
        same = len({v for v in w["checksums"].values()}) == 1
        L.append(f"Data check: every contender's load-all byte sum "
                 f"{'agrees' if agree and same else 'DISAGREES'} across runs and contenders.\n")
    cap = res["capsule"]
    L.append("## Capsule round trip\n")
    L.append(f"`hurray.from_hurray(t)` on a 4 MiB float32 hurray.Tensor: "
             f"{fmt(cap['hurray_from_hurray_s'], 'us')} µs per call; `torch.from_dlpack(t)` on a "
             f"torch tensor over the same data: {fmt(cap['torch_from_dlpack_s'], 'us')} µs per call "
             f"(ratio {med(cap['hurray_from_hurray_s']) / med(cap['torch_from_dlpack_s']):.2f}x).\n")
    L.append("## Goals\n")
    L.extend(goals(res))
    L.append("")
    L.append("## Notes\n")
    L.append("- Every save time includes an fsync of the result: hurray.save does its own (temp "
             "file, fsync, rename); for the others the harness fsyncs the file after save returns.")
    L.append("- Save peak RSS growth = VmHWM after the save minus VmRSS just before it, with VmHWM "
             "reset through /proc/self/clear_refs after the input was built (the input itself is "
             "resident and excluded).")
    L.append("- Load peak RSS growth counts mapped file pages that were touched, so zero-copy "
             "readers (hurray, torch mmap) show the file size there too, as do copying readers.")
    L.append("- \"open\" (cold, fresh process) = opening the file and getting every name and "
             "shape: hurray File.keys() + File.descriptor(n).shape, safe_open keys() + "
             "get_slice(n).get_shape(). \"open names-only\" is a second, warm open in the same "
             "process that lists the names only (shows what the per-name shape lookup costs).")
    L.append("- numpy.savez is used for both workloads (one .npz, uncompressed); its open reads "
             "the zip directory and each member's .npy header. bfloat16 arrays round-trip through "
             ".npz as raw 2-byte void ('|V2'), which is enough for the byte-level touch.")
    L.append("- safetensors.numpy handles bfloat16 (ml_dtypes) in this safetensors version; "
             "safetensors.torch is measured too, with torch tensors over the same numpy buffers. "
             "\"open vs safe_open\" uses safe_open(framework='numpy').")
    L.append("- torch.save is loaded with torch.load(weights_only=True, mmap=True); its open "
             "figure is that call plus the shapes.")
    L.append("- Out of scope here: workload (c), quantized NF4/Q4_0 tensors vs GGUF.")
    if res.get("c_bench"):
        L.append("\n## C writer benchmark (build/bench/write_peak_rss)\n")
        L.append("```\n" + res["c_bench"].strip() + "\n```")
    return "\n".join(L) + "\n"


def render_png(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    metrics = [("save_s", "save"), ("open_s", "open"), ("load_s", "load-all"),
               ("random_s", "random tensor")]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    for ax, (wl, w) in zip(axes, res["workloads"].items()):
        names = list(w["contenders"])
        width = 0.8 / len(names)
        x = np.arange(len(metrics))
        for i, c in enumerate(names):
            r = w["contenders"][c]
            m = np.array([r[k]["median"] for k, _ in metrics])
            lo = m - np.array([r[k]["min"] for k, _ in metrics])
            hi = np.array([r[k]["max"] for k, _ in metrics]) - m
            ax.bar(x + i * width - 0.4 + width / 2, m, width, yerr=[lo, hi], label=c, capsize=2)
        lim = w["limits"]
        ax.hlines(lim["plain_write_s"]["median"], -0.45, 0.45, colors="k", linestyles="--",
                  label="plain write + fsync limit")
        ax.hlines(lim["mmap_page_touch_s"]["median"], 1.55, 2.45, colors="r", linestyles="--",
                  label="mmap page-touch limit")
        ax.hlines(lim["mmap_full_touch_s"]["median"], 1.55, 2.45, colors="m", linestyles=":",
                  label="mmap full-read limit")
        ax.set_xticks(x, [n for _, n in metrics])
        ax.set_yscale("log")
        ax.set_ylabel("seconds (median, min–max bars; log)")
        ax.set_title(f"{wl}: {w['tensors']} tensors, {w['bytes'] / MiB:.0f} MiB")
        ax.legend(fontsize=7)
    cache = "cold" if res["config"]["cold_cache"] else "warm"
    fig.suptitle(f"hurray vs others — scale {res['config']['scale']}, {res['config']['reps']} "
                 f"fresh-process runs, {cache} page cache")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
    else:
        main()
