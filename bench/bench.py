#!/usr/bin/env python3
"""hurray vs safetensors / numpy.savez / torch.save (workloads (a), (b)) and vs
GGUF (workload (c), quantized NF4 / Q4_0), next to the machine's limits.

Run with the project's virtual environment (``make bench`` installs safetensors
and matplotlib first):

    .venv/bin/python bench/bench.py

Every measurement runs in a fresh subprocess (``bench.py --worker ...``), the
page cache is dropped before each one when that is allowed (root), and the
figures are medians over BENCH_REPS runs with min/max as the spread.

Environment:
    BENCH_SCALE  size of workloads (a) and (c) relative to 1 GiB (default 1.0)
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
EXT = {
    "hurray": ".hurray",
    "safetensors.numpy": ".safetensors",
    "safetensors.torch": ".safetensors",
    "numpy.savez": ".npz",
    "torch.save": ".pt",
}

# Workload (c): quantized. hurray quantizes in C (hurray.quantize, QTHREADS threads);
# GGUF is written and read with the `gguf` package (its quantizer is numpy, 1 thread).
# Front ends of safetensors; "the faster safetensors" is the faster of those measured.
SAFETENSORS = ("safetensors.numpy", "safetensors.torch")
QCONTENDERS = ["hurray nf4", "hurray q4_0", "gguf q4_0"]
QEXT = {"hurray nf4": ".nf4.hurray", "hurray q4_0": ".q4_0.hurray", "gguf q4_0": ".gguf"}
QSCHEME = {"hurray nf4": "nf4", "hurray q4_0": "q4_0"}
QTHREADS = 2
# Repetitions of workload (b), at least (BENCH_REPS when that is more).
MANY_REPS = 5


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
        out[done : done + take] = pool[offset : offset + take]
        done += take
        offset = 0
    return out


def workload_spec(name, scale):
    """[(tensor name, dtype name, shape)] — deterministic; element counts are
    multiples of 4 so every tensor is a whole number of uint64 words.

    "quant" (workload (c)) is (a)'s recipe (same seed, size spread, column
    choices and noise pool) with every tensor float32 and 2-D, so the last
    dimension (256..4096) is always a multiple of 32 as GGUF's Q4_0 requires."""
    rng = np.random.default_rng(7 if name in ("large", "quant") else 11)
    spec = []
    if name in ("large", "quant"):
        total = int(GiB * scale)
        n = 200
        weights = rng.uniform(0.2, 1.8, n)
        weights /= weights.sum()
        for i in range(n):
            dtype = "bfloat16" if i % 2 and name == "large" else "float32"
            item = 2 if dtype == "bfloat16" else 4
            want = max(8, int(total * weights[i]) // item)
            if i % 10 == 9 and name == "large":  # a few 1-D tensors (norms, biases, ...)
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


def touch_u8(buf):
    """Reads every stored byte once: a uint8 sum (workload (c)'s codes and scales)."""
    if isinstance(buf, np.ndarray):
        b = buf.reshape(-1).view(np.uint8)
    else:
        b = np.frombuffer(buf, dtype=np.uint8)
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
    return {
        "save_s": dt,
        "save_rss_before_mib": rss0 / 1024,
        "save_peak_mib": hwm / 1024,
        "save_growth_mib": (hwm - rss0) / 1024 if peak_ok else None,
        "input_mib": spec_bytes(spec) / MiB,
        "file_mib": os.path.getsize(path) / MiB,
    }


def _open(contender, path):
    """Names and shapes, nothing more. Returns the count (and keeps handles)."""
    if contender == "hurray":
        import hurray

        f = hurray.open(path)
        names = f.keys()
        shapes = [f.shape(n) for n in names]  # from the index; no Descriptor built
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
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
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
    gc.collect()  # the harness's own garbage (spec) is not the contender's to collect
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
    out = {
        "open_s": t_open,
        "open_names_warm_s": t_names,
        "load_s": t_load,
        "load_peak_mib": hwm / 1024,
        "load_growth_mib": (hwm - rss0) / 1024,
        "checksum": total % (1 << 61),
    }
    del d
    if contender == "hurray":  # warm: the bytes were just read
        out.update(timed_verify(path))
    return out


def w_random(contender, path, name):
    gc.collect()
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


def write_all(fd, views):
    """Writes the byte views in order with os.writev, IOV_MAX of them a call:
    the fewest system calls that write these buffers without first copying
    them together, so that the plain-write limit is the disk's and not a
    Python loop's (one os.write per array wrote 20,000 small tensors slower
    than hurray saves them)."""
    pending = [v for v in views if v.nbytes]
    iov_max = os.sysconf("SC_IOV_MAX")
    while pending:
        batch = pending[:iov_max]
        n = os.writev(fd, batch)
        del pending[: len(batch)]
        for i, v in enumerate(batch):  # a short write: requeue the rest
            if n >= v.nbytes:
                n -= v.nbytes
                continue
            pending[:0] = [v[n:], *batch[i + 1 :]]
            break


def w_plain_write(path, spec):
    arrays = make_arrays(spec)
    gc.collect()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [memoryview(a.reshape(-1).view(np.uint8)) for a in arrays.values()])
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"write_s": time.perf_counter() - t0, "bytes": spec_bytes(spec)}


def w_mmap_touch(path, mode):
    t0 = time.perf_counter()
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        a = np.frombuffer(m, dtype=np.uint8)
        if mode == "full":  # every byte, the same work as load-all's touch()
            s = touch(a)
        elif mode == "u8":  # every byte, the same uint8 sum as (c)'s load-all
            s = touch_u8(a)
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
    import torch

    import hurray

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
    return {
        "hurray_from_hurray_s": per_call(hurray.from_hurray, ht),
        "torch_from_dlpack_s": per_call(torch.from_dlpack, tt),
    }


# ------------------------------------------------- workload (c) workers


def _quantize_all(contender, arrays):
    if contender.startswith("hurray"):
        import hurray

        return {
            n: hurray.quantize(a, QSCHEME[contender], threads=QTHREADS) for n, a in arrays.items()
        }
    import gguf.quants
    from gguf import GGMLQuantizationType

    return {n: gguf.quants.quantize(a, GGMLQuantizationType.Q4_0) for n, a in arrays.items()}


def _dequantize(contender, t):
    """float32 values of one stored tensor (hurray Tensor / GGUF ReaderTensor or array)."""
    if contender.startswith("hurray"):
        return t.dequantize(threads=QTHREADS)
    import gguf.quants
    from gguf import GGMLQuantizationType

    if isinstance(t, np.ndarray):
        return gguf.quants.dequantize(t, GGMLQuantizationType.Q4_0)
    return gguf.quants.dequantize(t.data, t.tensor_type)


def w_qsave(contender, path, spec):
    """Quantize (timed on its own), then write the quantized tensors (timed on
    its own, up to a durable file)."""
    arrays = make_arrays(spec)
    gc.collect()
    rss0 = status_kib("VmRSS")
    peak_ok = reset_peak()
    t0 = time.perf_counter()
    q = _quantize_all(contender, arrays)
    t_quant = time.perf_counter() - t0
    hwm_q = status_kib("VmHWM")
    gc.collect()
    rss1 = status_kib("VmRSS")
    reset_peak()
    t0 = time.perf_counter()
    if contender.startswith("hurray"):
        import hurray

        hurray.save(path, q)  # temp file, fsync, rename
    else:
        from gguf import GGMLQuantizationType, GGUFWriter

        w = GGUFWriter(path, "hurray-bench")
        for n, b in q.items():  # uint8 blocks shaped (rows, cols/32*18): the numpy-order
            w.add_tensor(
                n, b, raw_dtype=GGMLQuantizationType.Q4_0
            )  # shape; GGUF stores it reversed
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        fsync_path(path)
    t_write = time.perf_counter() - t0
    hwm_w = status_kib("VmHWM")
    if contender.startswith("hurray"):
        stored = sum(len(b) for t in q.values() for b in t.buffers)
    else:
        stored = sum(b.nbytes for b in q.values())
    # untimed: the error of one tensor, and (gguf) hurray's q4_0 == ggml's q4_0
    first = spec[0][0]
    x = arrays[first]
    y = _dequantize(contender, q[first])
    assert y.shape == x.shape and y.dtype == np.float32, (y.shape, y.dtype)
    err = float(
        np.sqrt(np.mean((y.astype(np.float64) - x) ** 2) / np.mean(x.astype(np.float64) ** 2))
    )
    out = {
        "quantize_s": t_quant,
        "write_s": t_write,
        "save_s": t_quant + t_write,
        "quantize_gbps": spec_bytes(spec) / t_quant / 1e9,
        "quantize_growth_mib": (hwm_q - rss0) / 1024 if peak_ok else None,
        "write_growth_mib": (hwm_w - rss1) / 1024 if peak_ok else None,
        "save_growth_mib": (max(hwm_q, hwm_w) - rss0) / 1024 if peak_ok else None,
        "input_mib": spec_bytes(spec) / MiB,
        "stored_mib": stored / MiB,
        "file_mib": os.path.getsize(path) / MiB,
        "rel_rms_err": err,
    }
    if contender == "gguf q4_0":
        import hurray

        h = hurray.quantize(x, "q4_0", threads=QTHREADS).dequantize(threads=QTHREADS)
        assert np.array_equal(h.view(np.uint32), y.view(np.uint32)), (
            f"hurray q4_0 and gguf Q4_0 dequantize {first} differently"
        )
        out["q4_0_equal_tensor"] = first
    return out


def _qopen(contender, path):
    if contender.startswith("hurray"):
        import hurray

        f = hurray.open(path)
        names = f.keys()
        shapes = [f.shape(n) for n in names]
    else:
        from gguf import GGUFReader

        f = GGUFReader(path)
        names = [t.name for t in f.tensors]
        shapes = [
            tuple(int(d) for d in reversed(t.shape.tolist())) for t in f.tensors
        ]  # innermost-first on disk
    return f, names, shapes


def w_qload(contender, path, spec):
    gc.collect()  # the harness's own garbage (spec) is not the contender's to collect
    rss0 = status_kib("VmRSS")
    reset_peak()
    t0 = time.perf_counter()
    f, names, shapes = _qopen(contender, path)
    t_open = time.perf_counter() - t0
    assert dict(zip(names, map(tuple, shapes))) == {n: tuple(s) for n, _, s in spec}, (
        "names/shapes differ"
    )
    del f
    t0 = time.perf_counter()  # names only, warm now
    if contender.startswith("hurray"):
        import hurray

        g = hurray.open(path)
        names2 = g.keys()
    else:
        from gguf import GGUFReader

        g = GGUFReader(path)
        names2 = [t.name for t in g.tensors]
    t_names = time.perf_counter() - t0
    assert len(names2) == len(spec)
    del g
    t0 = time.perf_counter()
    total = 0
    if contender.startswith("hurray"):
        import hurray

        d = hurray.load(path)
        for t in d.values():
            for b in t.buffers:
                total += touch_u8(b)
        tensors = list(d.values())
    else:
        from gguf import GGUFReader

        r = GGUFReader(path)
        for t in r.tensors:
            total += touch_u8(t.data)
        tensors = list(r.tensors)
    t_load = time.perf_counter() - t0
    hwm = status_kib("VmHWM")
    out = {
        "open_s": t_open,
        "open_names_warm_s": t_names,
        "load_s": t_load,
        "load_peak_mib": hwm / 1024,
        "load_growth_mib": (hwm - rss0) / 1024,
        "checksum": total % (1 << 61),
    }
    # dequantize-all (warm: the stored bytes were just read), float32 out; each
    # output is check-summed (untimed) and dropped before the next tensor
    gc.collect()
    rss1 = status_kib("VmRSS")
    reset_peak()
    t_deq, out_bytes, dsum = 0.0, 0, 0
    for t in tensors:
        t0 = time.perf_counter()
        y = _dequantize(contender, t)
        t_deq += time.perf_counter() - t0
        out_bytes += y.nbytes
        dsum += touch(y)
        del y
    hwm = status_kib("VmHWM")
    out.update(
        {
            "dequantize_s": t_deq,
            "dequantize_gbps": out_bytes / t_deq / 1e9,
            "dequantize_growth_mib": (hwm - rss1) / 1024,
            "deq_checksum": dsum % (1 << 61),
        }
    )
    del tensors
    if contender.startswith("hurray"):  # warm
        out.update(timed_verify(path))
    return out


def w_qrandom(contender, path, name):
    gc.collect()
    t0 = time.perf_counter()
    if contender.startswith("hurray"):
        import hurray

        with hurray.open(path) as f:
            t = f[name]
            for b in t.buffers:
                touch_u8(b)
    else:
        from gguf import GGUFReader

        r = GGUFReader(path)
        t = next(x for x in r.tensors if x.name == name)
        touch_u8(t.data)
    t_read = time.perf_counter() - t0
    y = _dequantize(contender, t)
    t_deq = time.perf_counter() - t0
    assert y.dtype == np.float32
    return {"random_s": t_read, "random_deq_s": t_deq}


def w_qplain_write(path, spec):
    """The limit for writing (c): hurray's q4_0 buffers (quantized before the
    clock), tensor by tensor, with os.writev + one fsync."""
    import hurray

    arrays = make_arrays(spec)
    bufs = [
        b for a in arrays.values() for b in hurray.quantize(a, "q4_0", threads=QTHREADS).buffers
    ]
    del arrays
    gc.collect()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, [memoryview(b).cast("B") for b in bufs])
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"write_s": time.perf_counter() - t0, "bytes": sum(len(b) for b in bufs)}


def preimport(contender):
    """Imports outside every timed region (module import is not file work)."""
    import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)

    if contender.startswith("hurray") or contender in QCONTENDERS:
        import hurray  # noqa: F401
    if contender in QCONTENDERS:
        import gguf  # noqa: F401
        import gguf.quants  # noqa: F401
    if contender.startswith("safetensors"):
        import safetensors.numpy  # noqa: F401
        from safetensors import safe_open  # noqa: F401
    if contender.endswith("torch") or contender == "torch.save":
        import safetensors.torch  # noqa: F401
        import torch  # noqa: F401


def worker(argv):
    kind = argv[0]
    if kind in ("save", "load", "random", "qsave", "qload", "qrandom"):
        preimport(argv[1])
    if kind == "save":
        contender, path, wl, scale = argv[1], argv[2], argv[3], float(argv[4])
        res = w_save(contender, path, workload_spec(wl, scale))
    elif kind == "load":
        contender, path, wl, scale = argv[1], argv[2], argv[3], float(argv[4])
        res = w_load(contender, path, workload_spec(wl, scale))
    elif kind == "random":
        res = w_random(argv[1], argv[2], argv[3])
    elif kind == "qsave":
        res = w_qsave(argv[1], argv[2], workload_spec("quant", float(argv[3])))
    elif kind == "qload":
        res = w_qload(argv[1], argv[2], workload_spec("quant", float(argv[3])))
    elif kind == "qrandom":
        res = w_qrandom(argv[1], argv[2], argv[3])
    elif kind == "qplain_write":
        res = w_qplain_write(argv[1], workload_spec("quant", float(argv[2])))
    elif kind == "plain_write":
        res = w_plain_write(argv[1], workload_spec(argv[2], float(argv[3])))
    elif kind == "mmap_touch":
        res = w_mmap_touch(argv[1], argv[2])
    elif kind == "memcpy":
        res = w_memcpy()
    elif kind == "capsule":
        res = w_capsule()
    else:
        raise SystemExit(f"unknown worker {kind}")
    print(json.dumps(res))


# ------------------------------------------------------------------ driver

COLD = None


def run_worker(*args, python=None, env=None):
    """One worker in a fresh process, the cache dropped first; `python` and
    `env` (bench_many's BENCH_BEFORE) run it against another hurray."""
    global COLD
    dropped = drop_caches()
    if COLD is None:
        COLD = dropped
    cmd = [python or sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def mem_read_rate(threads, path=None):
    """build/bench/mem_read_rate: `threads` threads read 1 GiB of memory
    (best of 5 passes, in a fresh process); with `path`, the file's cached
    pages read in place (mapped afresh each pass, faults included)."""
    exe = os.path.join(ROOT, "build", "bench", "mem_read_rate")
    args = [exe, "--file", path, str(threads)] if path else [exe, "1024", str(threads)]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def hash_threads():
    return int(os.environ.get("HURRAY_HASH_THREADS") or min(os.cpu_count() or 1, 8))


VERIFY_CALLS = 3


def timed_verify(path):
    """File.verify() of a warm file, best of VERIFY_CALLS calls (each maps
    the file afresh), as the memory-read rate it is held to is the best of
    5 passes; the first call is kept too. Then one pass tensor by tensor
    (`File.verify(name)` for every name, as a caller that wants every bad
    tensor named does), in microseconds a tensor. Right after, the same
    file's pages read in place on as many threads: the most any reader of
    the file's mapping gets from the folios the cache holds it in."""
    import hurray

    size = os.path.getsize(path)
    times = []
    for _ in range(VERIFY_CALLS):
        with hurray.open(path) as f:
            t0 = time.perf_counter()
            f.verify()
            times.append(time.perf_counter() - t0)
    with hurray.open(path) as f:
        names = list(f.keys())
        t0 = time.perf_counter()
        for name in names:
            f.verify(name)
        each = (time.perf_counter() - t0) / max(len(names), 1)
    return {
        "verify_s": min(times),
        "verify_gbps": size / min(times) / 1e9,
        "verify_first_gbps": size / times[0] / 1e9,
        "verify_each_s": each,
        "inplace_gbps": mem_read_rate(hash_threads(), path)["gbps"],
    }


def summarize(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    if not vals:
        return None
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        # In run order: with the contenders taking turns, value i of two
        # contenders came from the same repetition (paired ratios).
        "values": vals,
    }


def run_quant(tmp, scale, reps, log):
    """Workload (c): the same float32 checkpoint quantized to NF4 and Q4_0 by
    hurray, and to Q4_0 by gguf, each written, opened, read and dequantized."""
    spec = workload_spec("quant", scale)
    wres = {
        "tensors": len(spec),
        "bytes": spec_bytes(spec),
        "scale": scale,
        "threads": QTHREADS,
        "limits": {},
        "contenders": {},
    }
    raw = os.path.join(tmp, "quant.raw")
    pw, mt, mf = [], [], []
    for _ in range(reps):
        pw.append(run_worker("qplain_write", raw, scale))
        mt.append(run_worker("mmap_touch", raw, "page"))
        mf.append(run_worker("mmap_touch", raw, "u8"))
    os.unlink(raw)
    wres["limits"] = {
        "plain_write_s": summarize(pw, "write_s"),
        "plain_write_bytes": pw[0]["bytes"],
        "mmap_page_touch_s": summarize(mt, "s"),
        "mmap_full_touch_s": summarize(mf, "s"),
    }
    log(
        "quant",
        "limits",
        {k: round(v["median"], 4) for k, v in wres["limits"].items() if isinstance(v, dict)},
    )
    rng = np.random.default_rng(99)
    picks = [spec[int(rng.integers(len(spec)))][0] for _ in range(reps)]
    paths = {c: os.path.join(tmp, "quant" + QEXT[c]) for c in QCONTENDERS}
    qruns = {c: ([], [], []) for c in QCONTENDERS}
    for r in range(reps):  # taking turns, as in (a) and (b)
        for c in QCONTENDERS:
            saves, loads, rands = qruns[c]
            saves.append(run_worker("qsave", c, paths[c], scale))
            loads.append(run_worker("qload", c, paths[c], scale))
            rands.append(run_worker("qrandom", c, paths[c], picks[r]))
    for c in QCONTENDERS:
        os.unlink(paths[c])
        saves, loads, rands = qruns[c]
        cres = {}
        for runs in (saves, loads, rands):
            for k in runs[0]:
                if k not in ("checksum", "deq_checksum", "q4_0_equal_tensor"):
                    cres[k] = summarize(runs, k)
        if "q4_0_equal_tensor" in saves[0]:
            cres["q4_0_equal_tensor"] = saves[0]["q4_0_equal_tensor"]
        sums = {l["checksum"] for l in loads}
        dsums = {l["deq_checksum"] for l in loads}
        cres["checksum_agree"] = len(sums) == 1 and len(dsums) == 1
        wres["contenders"][c] = cres
        wres.setdefault("checksums", {})[c] = sums.pop() if len(sums) == 1 else None
        wres.setdefault("deq_checksums", {})[c] = dsums.pop() if len(dsums) == 1 else None
        log(
            "quant",
            c,
            "quantize",
            round(cres["quantize_s"]["median"], 3),
            "write",
            round(cres["write_s"]["median"], 3),
            "open",
            round(cres["open_s"]["median"], 4),
            "load",
            round(cres["load_s"]["median"], 3),
            "dequantize",
            round(cres["dequantize_s"]["median"], 3),
        )
    return wres


def main():
    # 0.5: the whole `make bench` within 15 minutes (bench/README.md, bench-run.json)
    scale = float(os.environ.get("BENCH_SCALE", "0.5"))
    # numpy.savez, torch.save and safetensors.torch cost 60% of the run in torch
    # imports and slow saves, and safetensors.torch was never the faster
    # safetensors front end: BENCH_CONTENDERS=all brings them back.
    picked = os.environ.get("BENCH_CONTENDERS", "hurray,safetensors.numpy")
    contenders = (
        CONTENDERS if picked == "all" else [c for c in CONTENDERS if c in picked.split(",")]
    )
    reps = int(os.environ.get("BENCH_REPS", "3"))
    # A folder of its own under BENCH_DIR (removed at the end; BENCH_DIR is left alone).
    tmp = os.path.join(
        os.path.abspath(os.environ.get("BENCH_DIR", os.path.join(ROOT, "build"))), "bench-py-tmp"
    )
    outdir = os.path.abspath(os.environ.get("BENCH_OUT", os.path.join(HERE, "results")))
    os.makedirs(tmp, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)
    started = time.time()
    res = {
        "config": {
            "scale": scale,
            "reps": reps,
            "contenders": contenders,
            "dir": tmp,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "loadavg_start": list(os.getloadavg()),
        },
        "limits": {},
        "workloads": {},
    }
    try:
        from importlib.metadata import version

        import gguf  # noqa: F401 - only that it is installed; its version comes from metadata
        import safetensors
        import torch

        import hurray

        res["config"]["versions"] = {
            "numpy": np.__version__,
            "torch": torch.__version__,
            "safetensors": safetensors.__version__,
            "gguf": version("gguf"),
            "hurray": getattr(hurray, "__version__", "checkout"),
        }
    except ImportError as e:
        raise SystemExit(f"missing dependency: {e} (run `make bench`)")

    log = lambda *a: print(f"[{time.time() - started:6.1f}s]", *a, flush=True)  # noqa: E731
    res["limits"]["memcpy"] = summarize([run_worker("memcpy") for _ in range(reps)], "gbps")
    log("memcpy", res["limits"]["memcpy"])
    # The memory-read rate verify is held to (issue 19): one thread, and as
    # many as verify hashes on (HURRAY_HASH_THREADS, default the CPUs up to 8).
    res["config"]["hash_threads"] = hash_threads()
    for label, n in (("mem_read_1", 1), ("mem_read", hash_threads())):
        res["limits"][label] = summarize([mem_read_rate(n) for _ in range(reps)], "gbps")
        log(label, n, "threads", res["limits"][label])
    caps = [run_worker("capsule") for _ in range(reps)]
    res["capsule"] = {k: summarize(caps, k) for k in caps[0]}
    log("capsule", res["capsule"])

    for wl in ("large", "many"):
        spec = workload_spec(wl, scale if wl == "large" else 1.0)
        nbytes = spec_bytes(spec)
        wres = {
            "tensors": len(spec),
            "bytes": nbytes,
            "scale": scale if wl == "large" else 1.0,
            "limits": {},
            "contenders": {},
        }
        # (b)'s processes take a second or less each, and its ratios are the
        # noisiest (per-tensor work against a disk that varies): more runs.
        wreps = max(reps, MANY_REPS) if wl == "many" else reps
        raw = os.path.join(tmp, f"{wl}.raw")
        pw, mt, mf = [], [], []
        rng = np.random.default_rng(99)
        picks = [spec[int(rng.integers(len(spec)))][0] for _ in range(wreps)]
        paths = {c: os.path.join(tmp, wl + EXT[c]) for c in contenders}
        runs = {c: ([], [], []) for c in contenders}
        # The contenders take turns within each repetition, so that every
        # contender's runs meet the disk in the same states: run in blocks,
        # one contender after the other, the ratios between them moved with
        # the virtual disk's slow and fast periods (load-all of (b) by
        # safetensors 0.20-0.46 s within ten minutes, hurray 0.09-0.12 s).
        for r in range(wreps):
            # The plain-write limit runs right before each of hurray's saves,
            # so that both meet the disk in the same state: measured in a
            # phase of its own, the limit and the save differed by the
            # writeback left over from whatever ran before each phase.
            pw.append(run_worker("plain_write", raw, wl, wres["scale"]))
            for c in contenders:
                saves, loads, rands = runs[c]
                saves.append(run_worker("save", c, paths[c], wl, wres["scale"]))
                loads.append(run_worker("load", c, paths[c], wl, wres["scale"]))
                rands.append(run_worker("random", c, paths[c], picks[r]))
            mt.append(run_worker("mmap_touch", raw, "page"))  # the plain write's file
            mf.append(run_worker("mmap_touch", raw, "full"))
        os.unlink(raw)
        wres["limits"] = {
            "plain_write_s": summarize(pw, "write_s"),
            "mmap_page_touch_s": summarize(mt, "s"),
            "mmap_full_touch_s": summarize(mf, "s"),
        }
        log(wl, "limits", {k: round(v["median"], 4) for k, v in wres["limits"].items()})
        for c in contenders:
            os.unlink(paths[c])
            saves, loads, rands = runs[c]
            cres = {}
            for one in (saves, loads, rands):
                for k in one[0]:
                    if k != "checksum":
                        cres[k] = summarize(one, k)
            sums = {l["checksum"] for l in loads}
            cres["checksum_agree"] = len(sums) == 1
            wres["contenders"][c] = cres
            wres.setdefault("checksums", {})[c] = sums.pop() if len(sums) == 1 else None
            log(
                wl,
                c,
                "save",
                round(cres["save_s"]["median"], 3),
                "open",
                round(cres["open_s"]["median"], 4),
                "load",
                round(cres["load_s"]["median"], 3),
            )
        res["workloads"][wl] = wres
    res["workloads"]["quant"] = run_quant(tmp, scale, reps, log)
    shutil.rmtree(tmp, ignore_errors=True)
    res["config"]["cold_cache"] = bool(COLD)
    res["config"]["runtime_s"] = time.time() - started
    res["config"]["loadavg_end"] = list(os.getloadavg())
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
    if unit == "gbps":
        return f"{m:.1f} ({lo:.1f}–{hi:.1f})"
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
        st = min(med(w["contenders"][c]["save_s"]) for c in SAFETENSORS if c in w["contenders"])
        ratio_limit = med(w["limits"]["plain_write_s"]) / med(h["save_s"])
        ratio_st = st / med(h["save_s"])
        out.append(
            f"- Save {wl_name}: hurray reaches {ratio_limit:.2f}x of the plain-write limit "
            f"(goal >= 0.9x) and is {ratio_st:.2f}x faster than the faster safetensors "
            f"(goal >= 1.5x): {verdict(ratio_limit >= 0.9 and ratio_st >= 1.5)}"
        )
    for wl_name, w in (("(a) large", a), ("(b) many", b)):
        g = med(w["contenders"]["hurray"]["save_growth_mib"])
        out.append(
            f"- Peak RSS during save {wl_name}: grows by {g:.1f} MiB over the resident "
            f"input ({w['bytes'] / MiB:.0f} MiB) (goal <= +64 MiB): {verdict(g <= 64)}"
        )
    ho = med(b["contenders"]["hurray"]["open_s"])
    so = med(b["contenders"]["safetensors.numpy"]["open_s"])
    out.append(
        f"- Open of (b): hurray {ho * 1e3:.2f} ms vs safe_open {so * 1e3:.2f} ms = "
        f"{so / ho:.2f}x faster (goal >= 2x): {verdict(so / ho >= 2)}"
    )
    for wl_name, w in (("(a) large", a), ("(b) many", b)):
        hl = med(w["contenders"]["hurray"]["load_s"])
        lim = med(w["limits"]["mmap_page_touch_s"])
        full = med(w["limits"]["mmap_full_touch_s"])
        out.append(
            f"- Load-all {wl_name}: {hl:.3f} s = {hl / lim:.2f}x the mmap page-touch limit "
            f"(goal <= 1.2x): {verdict(hl / lim <= 1.2)}; like-for-like against an mmap "
            f"read of every byte with the same uint64 sum: {hl / full:.2f}x "
            f"({verdict(hl / full <= 1.2)} on that reading)"
        )
    vs = [med(w["contenders"]["hurray"]["verify_gbps"]) for w in (a, b)]
    out.append(
        f"- Verification throughput (warm): (a) {vs[0]:.1f} GB/s, (b) {vs[1]:.1f} GB/s "
        f"(goal >= 10 GB/s): {verdict(min(vs) >= 10)}"
    )
    if "mem_read" in res["limits"]:
        mr = med(res["limits"]["mem_read"])
        parts = [f"{n} {v:.1f} GB/s = {v / mr:.2f}x" for n, v in (("(a)", vs[0]), ("(b)", vs[1]))]
        out.append(
            "- Verify at memory speed (issue 19): " + ", ".join(parts) + f" of the "
            f"{res['config']['hash_threads']}-thread memory-read rate ({mr:.1f} GB/s) "
            f"(goal >= 0.9x): {verdict(min(vs) >= 0.9 * mr)}"
        )
    if "quant" in res["workloads"]:
        out.extend(quant_goals(res["workloads"]["quant"], verdict))
    hc = med(res["capsule"]["hurray_from_hurray_s"])
    tc = med(res["capsule"]["torch_from_dlpack_s"])
    out.append(
        f"- Capsule round trip: hurray.from_hurray {hc * 1e6:.2f} µs vs torch.from_dlpack "
        f"{tc * 1e6:.2f} µs = {hc / tc:.2f}x (goal <= 2x): {verdict(hc / tc <= 2)}"
    )
    return out


def quant_goals(c, verdict):
    """Workload (c) rows: the same thresholds as above, GGUF in safetensors' place."""
    out = []
    lim = c["limits"]
    g = c["contenders"]["gguf q4_0"]
    hs = {k: c["contenders"][k] for k in ("hurray nf4", "hurray q4_0")}
    parts, ok = [], True
    for k, h in hs.items():
        rl = med(lim["plain_write_s"]) / med(h["write_s"])
        rg = med(g["write_s"]) / med(h["write_s"])
        parts.append(f"{k} {rl:.2f}x of the plain-write limit, {rg:.2f}x faster than GGUFWriter")
        ok = ok and rl >= 0.9 and rg >= 1.5
    out.append(
        "- Save (c) quantized, write of already-quantized tensors: "
        + "; ".join(parts)
        + f" (goals >= 0.9x and >= 1.5x): {verdict(ok)}"
    )
    parts, ok = [], True
    for k, h in hs.items():
        gr = med(h["write_growth_mib"])
        parts.append(f"{k} {gr:.1f} MiB")
        ok = ok and gr <= 64
    out.append(
        "- Peak RSS during save (c), write phase, over the resident quantized tensors: "
        + ", ".join(parts)
        + f" (goal <= +64 MiB): {verdict(ok)}"
    )
    parts, ok = [], True
    for k, h in hs.items():
        r = med(g["open_s"]) / med(h["open_s"])
        parts.append(f"{k} {med(h['open_s']) * 1e3:.2f} ms = {r:.2f}x faster")
        ok = ok and r >= 2
    out.append(
        f"- Open of (c) against GGUFReader ({med(g['open_s']) * 1e3:.2f} ms): "
        + ", ".join(parts)
        + f" (the (b) open goal's >= 2x): {verdict(ok)}"
    )
    parts, ok, ok_full = [], True, True
    for k, h in hs.items():
        r = med(h["load_s"]) / med(lim["mmap_page_touch_s"])
        rf = med(h["load_s"]) / med(lim["mmap_full_touch_s"])
        parts.append(f"{k} {med(h['load_s']):.3f} s = {r:.2f}x (full-read {rf:.2f}x)")
        ok, ok_full = ok and r <= 1.2, ok_full and rf <= 1.2
    out.append(
        "- Load-all (c) against the mmap page-touch limit: "
        + "; ".join(parts)
        + f" (goal <= 1.2x): {verdict(ok)}; like-for-like against an mmap read of every "
        f"byte with the same uint8 sum: {verdict(ok_full)} on that reading"
    )
    vs = [med(h["verify_gbps"]) for h in hs.values()]
    out.append(
        f"- Verification throughput (c) (warm): nf4 {vs[0]:.1f} GB/s, q4_0 {vs[1]:.1f} GB/s "
        f"(goal >= 10 GB/s): {verdict(min(vs) >= 10)}"
    )
    q = [med(g["quantize_s"]) / med(h["quantize_s"]) for h in hs.values()]
    d = [med(g["dequantize_s"]) / med(h["dequantize_s"]) for h in hs.values()]
    sv = [med(g["save_s"]) / med(h["save_s"]) for h in hs.values()]
    out.append(
        f"- (c), no goal set, for reference: quantize {q[0]:.1f}x (nf4) / {q[1]:.1f}x (q4_0), "
        f"quantize + write {sv[0]:.2f}x / {sv[1]:.2f}x, and dequantize-all {d[0]:.1f}x / "
        f"{d[1]:.1f}x faster than gguf (hurray {c['threads']} threads, gguf.quants numpy "
        f"1 thread)."
    )
    return out


def verify_table(res):
    """Issue 19's goal: File.verify() (warm, every buffer hashed with xxh3 on
    the hashing threads) against the memory-read rate measured in this run."""
    lim = res["limits"]
    if "mem_read" not in lim:
        return []
    mr = med(lim["mem_read"])
    n = res["config"].get("hash_threads")
    L = [
        f"Memory-read rate (build/bench/mem_read_rate, 1 GiB, best of 5 passes per process): "
        f"1 thread {fmt(lim['mem_read_1'], 'gbps')} GB/s, {n} threads {fmt(lim['mem_read'], 'gbps')} "
        f"GB/s.\n",
        f"| verify (warm, `File.verify()`, best of {VERIFY_CALLS} calls) | GB/s | × memory-read "
        "rate | goal | status | the first call, GB/s | the file read in place, GB/s "
        "| verify × in place | tensor by tensor, µs a tensor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [(wl, w["contenders"]["hurray"]) for wl, w in res["workloads"].items() if wl != "quant"]
    if "quant" in res["workloads"]:
        rows += [
            (f"quant {k}", h)
            for k, h in res["workloads"]["quant"]["contenders"].items()
            if k.startswith("hurray")
        ]
    for name, h in rows:
        if "verify_gbps" not in h:
            continue
        v = med(h["verify_gbps"])
        ip = h.get("inplace_gbps")
        L.append(
            f"| {name} | {fmt(h['verify_gbps'], 'gbps')} | {v / mr:.2f}× | ≥ 0.9× | "
            f"{'met' if v >= 0.9 * mr else 'not met'} | "
            + (f"{fmt(h['verify_first_gbps'], 'gbps')} | " if "verify_first_gbps" in h else "– | ")
            + (f"{fmt(ip, 'gbps')} | {v / med(ip):.2f}× |" if ip else "– | – |")
            + (f" {fmt(h['verify_each_s'], 'us')} |" if "verify_each_s" in h else " – |")
        )
    L += [
        "",
        f"Verify is the best of {VERIFY_CALLS} calls in each worker, right after its load-all, "
        "as the memory-read rate is the best of 5 passes; the first call is shown beside it "
        "(on the development VM it ranged from 0.65x to 1.0x of the best from one run to the "
        "next; io-speed.md, section 7).\n",
        "The file read in place: build/bench/mem_read_rate --file on the same file right "
        "after the verify, in the same worker (mapped afresh as verify maps it, faults "
        "included, best of 5 passes): how fast the folios the page cache holds the file in "
        "can be read at all; see bench/results/verify.md. Tensor by tensor: one pass of "
        "`File.verify(name)` over every name, after the whole-file calls, in microseconds "
        "a tensor.",
    ]
    L.append("")
    return L


def issue19_goals():
    """Issue 19's goals as a table (bench/goals19.py), from latest.json just
    written and the other parts' last results (goals.md is redone at the end
    of `make bench`, once every part has run)."""
    import goals19

    outdir = os.path.abspath(os.environ.get("BENCH_OUT", os.path.join(HERE, "results")))
    return ["## Issue 19 goals\n", *goals19.render(outdir).splitlines()[2:], ""]


def render_md(res):
    cfg = res["config"]
    L = []
    L.append("# hurray benchmark — latest results\n")
    L.append(
        f"Generated by `make bench` (`bench/bench.py`). Scale of workloads (a) and (c): "
        f"**{cfg['scale']}** (BENCH_SCALE; 1.0 = 1 GiB). Repetitions: **{cfg['reps']}** fresh "
        f"processes per figure (workload (b): {max(cfg['reps'], MANY_REPS)}), the contenders "
        f"taking turns within each repetition; cells show median (min–max). Machine: "
        f"{cfg['cpus']} CPUs, "
        f"{cfg['machine']}, Python {cfg['python']}; versions {cfg.get('versions')}. "
        f"Total runtime of bench.py: {cfg['runtime_s']:.0f} s.\n"
    )
    if "loadavg_start" in cfg:
        L.append(
            f"Load average (1/5/15 min) at the start {[round(x, 2) for x in cfg['loadavg_start']]}, "
            f"at the end {[round(x, 2) for x in cfg['loadavg_end']]} (anything else running on "
            f"the machine shows up here and as spread).\n"
        )
    if cfg["cold_cache"]:
        L.append(
            "Cache: **cold** — `sync; echo 3 > /proc/sys/vm/drop_caches` ran before every "
            "measured process (saves, opens, load-all, random reads, mmap limits). Exceptions: "
            "hurray verification and (c)'s dequantize-all run right after load-all in the same "
            "process (**warm**), and memcpy / capsule figures are pure memory operations.\n"
        )
    else:
        L.append("Cache: **warm** page cache (dropping caches needs root and was refused).\n")
    mc = res["limits"]["memcpy"]
    L.append(
        f"memcpy limit (np.copyto of 256 MiB, best of 5 per process): {mc['median']:.2f} GB/s "
        f"(min {mc['min']:.2f}, max {mc['max']:.2f}).\n"
    )
    L.extend(verify_table(res))
    for wl, w in res["workloads"].items():
        if wl == "quant":
            L.extend(render_quant_md(w))
            continue
        lim = w["limits"]
        title = (
            "(a) large — mixed float32/bfloat16, 200 tensors"
            if wl == "large"
            else "(b) many — 20,000 small float32 tensors (64–4096 elements)"
        )
        L.append(f"## Workload {title}\n")
        L.append(
            f"{w['tensors']} tensors, {w['bytes'] / MiB:.1f} MiB of tensor data "
            f"(scale {w['scale']}).\n"
        )
        L.append(
            f"Limits: plain `os.writev` + fsync {fmt(lim['plain_write_s'])} s "
            f"({w['bytes'] / med(lim['plain_write_s']) / MiB:.0f} MiB/s); mmap page touch "
            f"(1 byte / 4096) {fmt(lim['mmap_page_touch_s'])} s; mmap read of every byte "
            f"(same uint64 sum as load-all) {fmt(lim['mmap_full_touch_s'])} s.\n"
        )
        sts = min(med(w["contenders"][c]["save_s"]) for c in SAFETENSORS if c in w["contenders"])
        sto = med(w["contenders"]["safetensors.numpy"]["open_s"])
        stl = min(med(w["contenders"][c]["load_s"]) for c in SAFETENSORS if c in w["contenders"])
        L.append(
            "| contender | save s | save MiB/s | save / plain-write limit | save speedup vs best "
            "safetensors | save peak RSS growth MiB | open ms | open speedup vs safe_open | "
            "open names-only ms (warm) | load-all s | load-all / mmap page-touch | load-all / mmap full read | load-all "
            "speedup vs best safetensors | random tensor ms | load peak RSS growth MiB | file MiB |"
        )
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
                f"{med(r['file_mib']):.1f} |"
            )
        h = w["contenders"]["hurray"]
        L.append(
            f"\nhurray `File.verify()` (warm): {fmt(h['verify_s'])} s = "
            f"{med(h['verify_gbps']):.1f} GB/s (min {h['verify_gbps']['min']:.1f}, "
            f"max {h['verify_gbps']['max']:.1f}).\n"
        )
        agree = all(r["checksum_agree"] for r in w["contenders"].values())
        same = len({v for v in w["checksums"].values()}) == 1
        L.append(
            f"Data check: every contender's load-all byte sum "
            f"{'agrees' if agree and same else 'DISAGREES'} across runs and contenders.\n"
        )
    cap = res["capsule"]
    L.append("## Capsule round trip\n")
    L.append(
        f"`hurray.from_hurray(t)` on a 4 MiB float32 hurray.Tensor: "
        f"{fmt(cap['hurray_from_hurray_s'], 'us')} µs per call; `torch.from_dlpack(t)` on a "
        f"torch tensor over the same data: {fmt(cap['torch_from_dlpack_s'], 'us')} µs per call "
        f"(ratio {med(cap['hurray_from_hurray_s']) / med(cap['torch_from_dlpack_s']):.2f}x).\n"
    )
    L.append("## Goals\n")
    L.extend(goals(res))
    L.append("")
    L.extend(issue19_goals())
    L.append("## Notes\n")
    L.append(
        "- Every save time includes an fsync of the result: hurray.save does its own (temp "
        "file, fsync, rename); for the others the harness fsyncs the file after save returns."
    )
    L.append(
        "- Save peak RSS growth = VmHWM after the save minus VmRSS just before it, with VmHWM "
        "reset through /proc/self/clear_refs after the input was built (the input itself is "
        "resident and excluded)."
    )
    L.append(
        "- Load peak RSS growth counts mapped file pages that were touched, so zero-copy "
        "readers (hurray, torch mmap) show the file size there too, as do copying readers."
    )
    L.append(
        '- "open" (cold, fresh process) = opening the file and getting every name and '
        "shape: hurray File.keys() + File.shape(n) (read from the index; no Descriptor "
        "object is built), safe_open keys() + get_slice(n).get_shape(), GGUFReader(path) + "
        'each tensor\'s name and shape. "open names-only" is a second, warm open in the '
        "same process that lists the names only (shows what the per-name shape lookup costs)."
    )
    L.append(
        f"- Contenders of (a) and (b): {', '.join(cfg.get('contenders', CONTENDERS))} "
        "(BENCH_CONTENDERS; `all` adds the others, left out of `make bench` to fit its "
        "15 minutes). The notes below cover every contender."
    )
    L.append(
        "- numpy.savez is used for both workloads (one .npz, uncompressed); its open reads "
        "the zip directory and each member's .npy header. bfloat16 arrays round-trip through "
        ".npz as raw 2-byte void ('|V2'), which is enough for the byte-level touch."
    )
    L.append(
        "- safetensors.numpy handles bfloat16 (ml_dtypes) in this safetensors version; "
        "safetensors.torch is measured too, with torch tensors over the same numpy buffers. "
        "\"open vs safe_open\" uses safe_open(framework='numpy')."
    )
    L.append(
        "- torch.save is loaded with torch.load(weights_only=True, mmap=True); its open "
        "figure is that call plus the shapes."
    )
    L.append(
        '- Workload (c): "quantize" and "write" are timed separately in the same '
        "process: quantize = float32 arrays in memory to quantized tensors in memory "
        f"(hurray.quantize in C with threads={QTHREADS}; gguf.quants.quantize, numpy, one "
        "thread); write = those already-quantized tensors to a durable file (hurray.save "
        'fsyncs itself; GGUFWriter + an fsync by the harness). "save" = their sum. '
        "Quantize peak RSS growth includes the quantized tensors it produces (about the "
        "file size); write peak RSS growth is measured over them (reset after quantize). "
        "Load-all touches every stored byte (codes and scales) with a uint8 sum; the mmap "
        "full-read limit of (c) uses the same sum. Dequantize-all runs after load-all in "
        f"the same process (warm): hurray Tensor.dequantize(threads={QTHREADS}) per tensor vs "
        "gguf.quants.dequantize(t.data, t.tensor_type) (numpy, one thread); GB/s are "
        "bytes of float32 output / seconds, 1 GB = 1e9 B. The (c) plain-write limit writes "
        "hurray's q4_0 buffers (codes + scales, the same byte count as either hurray file's "
        "payload) with os.writev + fsync."
    )
    if res.get("c_bench"):
        L.append("\n## C writer benchmark (build/bench/write_peak_rss)\n")
        L.append("```\n" + res["c_bench"].strip() + "\n```")
    return "\n".join(L) + "\n"


def render_quant_md(w):
    L = []
    lim = w["limits"]
    C = w["contenders"]
    g = C["gguf q4_0"]
    L.append("## Workload (c) quantized — the float32 checkpoint as NF4 and Q4_0, vs GGUF\n")
    L.append(
        f"{w['tensors']} float32 2-D tensors, {w['bytes'] / MiB:.1f} MiB of float32 input "
        f"(scale {w['scale']}; (a)'s recipe with every tensor float32 and 2-D, last dimension "
        f"256–4096). Contenders: hurray.quantize (C, threads={w['threads']}) + hurray.save, as "
        "NF4 (block 64, float32 absmax) and as Q4_0 (ggml's rule, block 32, float16 scale); "
        "gguf.quants.quantize(..., Q4_0) (numpy) + gguf.GGUFWriter, read with "
        "gguf.GGUFReader.\n"
    )
    pwb = lim["plain_write_bytes"]
    L.append(
        f"Limits: plain `os.writev` + fsync of {pwb / MiB:.1f} MiB of quantized bytes "
        f"{fmt(lim['plain_write_s'])} s ({pwb / med(lim['plain_write_s']) / MiB:.0f} MiB/s); "
        f"mmap page touch (1 byte / 4096) {fmt(lim['mmap_page_touch_s'])} s; mmap read of "
        f"every byte (same uint8 sum as load-all) {fmt(lim['mmap_full_touch_s'])} s.\n"
    )
    L.append("Save side (quantize and write timed separately; save = quantize + write):\n")
    L.append(
        "| contender | quantize s | quantize GB/s (float32 in) | quantize speedup vs gguf | "
        "quantize peak RSS growth MiB | write s | write MiB/s (file) | write / plain-write "
        "limit | write speedup vs gguf | write peak RSS growth MiB | save s | save speedup vs "
        "gguf | file MiB | rel. RMS error (first tensor) |"
    )
    L.append("|" + "---|" * 14)
    for c, r in C.items():
        q, wr, sv = med(r["quantize_s"]), med(r["write_s"]), med(r["save_s"])
        L.append(
            f"| {c} | {fmt(r['quantize_s'])} | {med(r['quantize_gbps']):.2f} | "
            f"{med(g['quantize_s']) / q:.2f}x | {fmt(r['quantize_growth_mib'], 'mib')} | "
            f"{fmt(r['write_s'])} | {med(r['file_mib']) / wr:.0f} | "
            f"{med(lim['plain_write_s']) / wr:.2f}x | {med(g['write_s']) / wr:.2f}x | "
            f"{fmt(r['write_growth_mib'], 'mib')} | {fmt(r['save_s'])} | "
            f"{med(g['save_s']) / sv:.2f}x | {med(r['file_mib']):.1f} | "
            f"{med(r['rel_rms_err']):.4f} |"
        )
    L.append("\nRead side (open, load-all and random tensor cold; dequantize-all warm):\n")
    L.append(
        "| contender | open ms | open speedup vs GGUFReader | open names-only ms (warm) | "
        "load-all s | load-all / mmap page-touch | load-all / mmap full read | load-all "
        "speedup vs gguf | load peak RSS growth MiB | random tensor ms | random tensor → "
        "float32 ms | dequantize-all s | dequantize GB/s (float32 out) | dequantize speedup "
        "vs gguf | dequantize peak RSS growth MiB |"
    )
    L.append("|" + "---|" * 15)
    for c, r in C.items():
        o, ld, dq = med(r["open_s"]), med(r["load_s"]), med(r["dequantize_s"])
        L.append(
            f"| {c} | {fmt(r['open_s'], 'ms')} | {med(g['open_s']) / o:.2f}x | "
            f"{fmt(r['open_names_warm_s'], 'ms')} | {fmt(r['load_s'])} | "
            f"{ld / med(lim['mmap_page_touch_s']):.2f}x | {ld / med(lim['mmap_full_touch_s']):.2f}x | "
            f"{med(g['load_s']) / ld:.2f}x | {fmt(r['load_growth_mib'], 'mib')} | "
            f"{fmt(r['random_s'], 'ms')} | {fmt(r['random_deq_s'], 'ms')} | "
            f"{fmt(r['dequantize_s'])} | {med(r['dequantize_gbps']):.2f} | "
            f"{med(g['dequantize_s']) / dq:.2f}x | {fmt(r['dequantize_growth_mib'], 'mib')} |"
        )
    vs = ", ".join(
        f"{c} {med(r['verify_gbps']):.1f} GB/s" for c, r in C.items() if "verify_gbps" in r
    )
    L.append(f"\nhurray `File.verify()` (warm): {vs}.\n")
    agree = all(r["checksum_agree"] for r in C.values())
    ds = w["deq_checksums"]
    same_q4 = ds["hurray q4_0"] is not None and ds["hurray q4_0"] == ds["gguf q4_0"]
    eq_t = g.get("q4_0_equal_tensor")
    L.append(
        f"Data checks: every contender's stored-byte sum and dequantized-output sum "
        f"{'agree' if agree else 'DISAGREE'} across its runs. The dequantized float32 "
        f"output of every tensor (uint64 sum over its bytes) of hurray q4_0 "
        f"{'**equals**' if same_q4 else '**DIFFERS FROM**'} that of gguf q4_0, as it must "
        f"(hurray's q4_0 reproduces ggml's rule; the bytes differ only in how the nibbles are "
        f"ordered within a block); the gguf worker also asserts bit-identical dequantized values "
        f'against hurray.quantize(..., "q4_0") on `{eq_t}`. NF4 is a different code '
        f"(its error is in the table).\n"
    )
    L.append("Reading (c):\n")
    L.extend(quant_interpretation(w))
    L.append("")
    return L


def quant_interpretation(w):
    C = w["contenders"]
    g, hq, hn = C["gguf q4_0"], C["hurray q4_0"], C["hurray nf4"]
    lim = w["limits"]
    out = []
    out.append(
        f"- Quantize: hurray's C kernels ({w['threads']} threads) turn the float32 checkpoint "
        f"into Q4_0 {med(g['quantize_s']) / med(hq['quantize_s']):.1f}x and into NF4 "
        f"{med(g['quantize_s']) / med(hn['quantize_s']):.1f}x faster than gguf's numpy "
        f"quantizer (one thread); part of that is the thread count (bench_quant.py compares "
        f"at equal threads). Quantize takes "
        f"{med(hq['quantize_s']) / med(hq['write_s']):.1f}x (hurray q4_0), "
        f"{med(hn['quantize_s']) / med(hn['write_s']):.1f}x (hurray nf4) and "
        f"{med(g['quantize_s']) / med(g['write_s']):.1f}x (gguf) as long as the write; "
        f"quantize + write together: hurray q4_0 "
        f"{med(g['save_s']) / med(hq['save_s']):.2f}x, nf4 "
        f"{med(g['save_s']) / med(hn['save_s']):.2f}x faster than gguf."
    )
    out.append(
        f"- Write: the quantized payload is ~{med(hq['file_mib']):.0f} MiB (4.5 bits per "
        f"weight for both formats); hurray writes it at "
        f"{med(lim['plain_write_s']) / med(hq['write_s']):.2f}x (q4_0) / "
        f"{med(lim['plain_write_s']) / med(hn['write_s']):.2f}x (nf4) of the plain-write "
        f"limit, GGUFWriter at {med(lim['plain_write_s']) / med(g['write_s']):.2f}x"
        + (
            "; all three are at the disk + fsync limit."
            if min(med(lim["plain_write_s"]) / med(r["write_s"]) for r in (hq, hn, g)) >= 0.85
            else "."
        )
    )
    out.append(
        f"- Open: hurray (index only) {med(hq['open_s']) * 1e3:.2f} ms vs GGUFReader "
        f"{med(g['open_s']) * 1e3:.2f} ms (GGUFReader parses every key/value and tensor "
        f"record and builds a numpy view per tensor up front)."
    )
    out.append(
        f"- Load-all (codes + scales, cold): hurray q4_0 {med(hq['load_s']):.3f} s, nf4 "
        f"{med(hn['load_s']):.3f} s, gguf {med(g['load_s']):.3f} s, against an mmap read "
        f"of the same number of bytes in {med(lim['mmap_full_touch_s']):.3f} s."
    )
    out.append(
        f"- Dequantize-all: hurray q4_0 {med(hq['dequantize_gbps']):.2f} GB/s and nf4 "
        f"{med(hn['dequantize_gbps']):.2f} GB/s of float32 vs gguf "
        f"{med(g['dequantize_gbps']):.2f} GB/s "
        f"({med(g['dequantize_s']) / med(hq['dequantize_s']):.1f}x for q4_0); a random "
        f"tensor to float32 (cold) takes {med(hq['random_deq_s']) * 1e3:.1f} ms (hurray "
        f"q4_0) vs {med(g['random_deq_s']) * 1e3:.1f} ms (gguf)."
    )
    out.append(
        f"- Accuracy on the first tensor (relative RMS error): NF4 "
        f"{med(hn['rel_rms_err']):.4f}, Q4_0 {med(hq['rel_rms_err']):.4f} (hurray and gguf "
        f"Q4_0 are the same values), at the same file size."
    )
    return out


def _png_bars(ax, w, metrics, write_at, mmap_at):
    """Median bars with min-max whiskers per contender, and the machine's
    limits as dashed lines over the bars at `write_at` (the write limit)
    and `mmap_at` (the two mmap limits)."""
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
    for key, at, color, style, label in (
        ("plain_write_s", write_at, "k", "--", "plain write + fsync limit"),
        ("mmap_page_touch_s", mmap_at, "r", "--", "mmap page-touch limit"),
        ("mmap_full_touch_s", mmap_at, "m", ":", "mmap full-read limit"),
    ):
        ax.hlines(
            lim[key]["median"], at - 0.45, at + 0.45, colors=color, linestyles=style, label=label
        )
    ax.set_yscale("log")
    ax.set_ylabel("seconds (median, min–max bars; log)")
    return x


def _png_quant(ax, w):
    metrics = [
        ("quantize_s", "quantize"),
        ("write_s", "write"),
        ("open_s", "open"),
        ("load_s", "load-all"),
        ("dequantize_s", "dequantize-all"),
        ("random_deq_s", "random → f32"),
    ]
    x = _png_bars(ax, w, metrics, write_at=1, mmap_at=3)
    ax.set_xticks(x, [n for _, n in metrics], fontsize=8)
    ax.set_title(
        f"quant (c): {w['tensors']} tensors, {w['bytes'] / MiB:.0f} MiB float32 → NF4 / Q4_0"
    )
    ax.legend(fontsize=7)


def render_png(res, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [
        ("save_s", "save"),
        ("open_s", "open"),
        ("load_s", "load-all"),
        ("random_s", "random tensor"),
    ]
    nwl = len(res["workloads"])
    fig, axes = plt.subplots(1, nwl, figsize=(7 * nwl, 5.5))
    for ax, (wl, w) in zip(axes, res["workloads"].items()):
        if wl == "quant":
            _png_quant(ax, w)
            continue
        x = _png_bars(ax, w, metrics, write_at=0, mmap_at=2)
        ax.set_xticks(x, [n for _, n in metrics])
        ax.set_title(f"{wl}: {w['tensors']} tensors, {w['bytes'] / MiB:.0f} MiB")
        ax.legend(fontsize=7)
    cache = "cold" if res["config"]["cold_cache"] else "warm"
    fig.suptitle(
        f"hurray vs others — (a)/(c) scale {res['config']['scale']}, {res['config']['reps']} "
        f"fresh-process runs, {cache} page cache"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
    else:
        main()
