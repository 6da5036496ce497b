#!/usr/bin/env python3
"""Throughput of hurray's quantization kernels next to memcpy, torch, bitsandbytes,
gguf and plain numpy references.

Run with the project's virtual environment:

    .venv/bin/python bench/bench_quant.py

Every figure is a float32 GB/s: bytes of the float32 input (quantize) or of the
float32 output (dequantize) divided by the seconds of the call, 1 GB = 1e9 bytes.
Every measurement runs in a fresh subprocess (``bench_quant.py --worker ...``),
QBENCH_REPS times; the tables show medians (min/max are in quant.json). Data is
warm: the input array is built in memory (read from a tmpfs copy) before any clock
starts. Outputs are allocated by the call being measured (as a user gets them);
only the memcpy limit copies into a preallocated array.

The single-threaded gguf and numpy references run on a slice of the input
(they are slow). A fresh output's cost depends on its size (first-touch page
faults, and numpy's transparent huge pages, which come fast for 64 MiB and
stall for 256 MiB on the development VM), so hurray is also measured on the
same slice, in its own fresh process (1 thread, "hurray at the slice"), and
compared with those references at equal size; the full-size figures stay in
the main table. Each numpy reference scheme runs in a fresh process of its
own too (w_numpy), so that neither side gets pages another scheme freed.

Environment:
    QBENCH_MIB        float32 input size in MiB (default 256 -> shape (8192, 8192));
                      the shape is (QBENCH_MIB * 32, 8192)
    QBENCH_REPS       fresh-process repetitions per measurement (default 5)
    QBENCH_GGUF_MIB   slice for the gguf.quants references (default 32; numpy, slow)
    QBENCH_NP_MIB     slice for the plain numpy references (default 64)
    QBENCH_OUT        results folder (default bench/results): quant.md, quant.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MiB = 1 << 20
COLS = 8192
SEED = 20261210

SCHEMES = [
    "affine",
    "per_channel",
    "block_affine",
    "q8_0",
    "q4_0",
    "nf4",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxfp6_e3m2",
    "mxfp6_e2m3",
    "mxfp4",
    "mxint8",
]
SCHEME_KW = {
    "affine": {"dtype": "int8"},
    "per_channel": {"dtype": "int8", "axis": 0},
    "block_affine": {"dtype": "int8"},
}
LABEL = {
    "affine": "affine int8 (per tensor)",
    "per_channel": "per_channel int8 (axis 0)",
    "block_affine": "block_affine int8 (block 32)",
}

# reference name -> schemes it stands for
REF_SCHEMES = {
    "torch.quantize_per_tensor": ["affine"],
    "torch.quantize_per_channel": ["per_channel"],
    "bnb nf4": ["nf4"],
    "gguf Q8_0": ["q8_0"],
    "gguf Q4_0": ["q4_0"],
    "numpy affine": ["affine"],
    "numpy per_channel": ["per_channel"],
    "numpy block_affine": ["block_affine"],
    "numpy nf4": ["nf4"],
    **{f"numpy {s}": [s] for s in SCHEMES if s.startswith("mx")},
}

# bitsandbytes' NF4 code book (bitsandbytes/functional.py, get_4bit_type("nf4"))
NF4 = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
NF4_MID = ((NF4[:-1] + NF4[1:]) / np.float32(2)).astype(np.float32)

# MX element: (ml_dtypes name or None for int8, emax, max finite, bits)
MX = {
    "mxfp8_e4m3": ("float8_e4m3fn", 8, 448.0, 8),
    "mxfp8_e5m2": ("float8_e5m2", 15, 57344.0, 8),
    "mxfp6_e3m2": ("float6_e3m2fn", 4, 28.0, 6),
    "mxfp6_e2m3": ("float6_e2m3fn", 2, 7.5, 6),
    "mxfp4": ("float4_e2m1fn", 2, 6.0, 4),
    "mxint8": (None, 0, 127.0, 8),
}


# ------------------------------------------------------------------ data


def rows_for(mib):
    return max(1, int(round(mib * MiB / 4 / COLS)))


def make_data(path, mib):
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((rows_for(mib), COLS), dtype=np.float32)
    np.save(path, x)
    return x.nbytes


def load_data(path, mib=None):
    """The input, read into anonymous memory (and touched) before any clock starts."""
    x = np.load(path)
    if mib is not None:
        x = np.ascontiguousarray(x[: min(x.shape[0], rows_for(mib))])
    assert x.flags.c_contiguous and x.dtype == np.float32
    float(x.sum(dtype=np.float64))  # touch
    return x


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def gbps(nbytes, s):
    return nbytes / s / 1e9


# ------------------------------------------------------------------ workers


def w_memcpy(path):
    x = load_data(path)
    dst = np.empty_like(x)
    np.copyto(dst, x)  # fault the destination in
    s, _ = timed(lambda: np.copyto(dst, x))  # noqa: F821 - runs before the del
    del dst
    s_fresh, y = timed(lambda: x.copy())  # a fresh allocation, as dequantize returns
    return {
        "memcpy_gbps": gbps(x.nbytes, s),
        "copy_fresh_gbps": gbps(x.nbytes, s_fresh),
        "bytes": x.nbytes,
    }


def w_hurray_slice(path, scheme, mib):
    """hurray on the references' slice: 1 thread, quantize and dequantize
    into fresh outputs, as the slice references are timed."""
    import hurray

    x = load_data(path, mib)
    kw = SCHEME_KW.get(scheme, {})
    hurray.quantize(x[:2], scheme, **kw).dequantize()  # warm the code paths (tiny)
    s, q = timed(lambda: hurray.quantize(x, scheme, threads=1, **kw))
    out = {"bytes": x.nbytes, "q1_gbps": gbps(x.nbytes, s)}
    s, y = timed(lambda: q.dequantize(threads=1))
    out["dq1_gbps"] = gbps(y.nbytes, s)
    return out


def w_hurray(path, scheme, check):
    import hurray

    x = load_data(path)
    kw = SCHEME_KW.get(scheme, {})
    w = hurray.quantize(x[:2], scheme, threads=2, **kw)  # warm the code paths (tiny)
    w.dequantize(threads=2)
    out = {"bytes": x.nbytes}
    for t in (1, 2):
        c0 = time.process_time()
        s, q = timed(lambda: hurray.quantize(x, scheme, threads=t, **kw))
        out[f"q{t}_cpu"] = (time.process_time() - c0) / s  # CPU seconds per wall second
        out[f"q{t}_gbps"] = gbps(x.nbytes, s)
        if t == 1:
            del q
    for t in (1, 2):
        c0 = time.process_time()
        s, y = timed(lambda: q.dequantize(threads=t))
        out[f"dq{t}_cpu"] = (time.process_time() - c0) / s
        out[f"dq{t}_gbps"] = gbps(y.nbytes, s)
        if t == 1:
            y1 = y
    # Into a reused out= array: the kernel alone, like memcpy into a
    # preallocated array (the fresh-output figures above also pay page faults).
    buf = np.empty(x.shape, np.float32)
    q.dequantize(out=buf)
    for t in (1, 2):
        s, _ = timed(lambda: q.dequantize(threads=t, out=buf))
        out[f"dqo{t}_gbps"] = gbps(buf.nbytes, s)
    if check:  # untimed sanity checks
        out["threads_identical"] = bool(np.array_equal(y1.view(np.uint32), y.view(np.uint32)))
        d = y.astype(np.float64) - x
        out["rel_rmse"] = float(
            np.sqrt(np.mean(d * d)) / np.sqrt(np.mean(np.square(x, dtype=np.float64)))
        )
    return out


def w_torch(path):
    import torch

    torch.set_num_threads(2)
    x = load_data(path)
    t = torch.from_numpy(x)

    def per_tensor():  # the observer (symmetric int8) + the quantize call
        mn, mx = torch.aminmax(t)
        scale = max(float(max(-mn, mx)) / 127.0, 2.0**-126)
        return torch.quantize_per_tensor(t, scale, 0, torch.qint8)

    def per_channel():
        mn, mx = torch.aminmax(t, dim=1)
        scales = (torch.maximum(-mn, mx).double() / 127.0).clamp_min(2.0**-126)
        zps = torch.zeros(t.shape[0], dtype=torch.int64)
        return torch.quantize_per_channel(t, scales, zps, 0, torch.qint8)

    for f in (per_tensor, per_channel):  # warm up on a small slice
        f().dequantize()
    out = {"bytes": x.nbytes, "threads": torch.get_num_threads()}
    for name, f in (("per_tensor", per_tensor), ("per_channel", per_channel)):
        s, q = timed(f)
        out[f"{name}_q_gbps"] = gbps(x.nbytes, s)
        s, y = timed(q.dequantize)
        out[f"{name}_dq_gbps"] = gbps(x.nbytes, s)
        del q, y
    # the quantize call alone (scales known in advance), for the notes
    mn, mx = torch.aminmax(t)
    scale = float(max(-mn, mx)) / 127.0
    s, q = timed(lambda: torch.quantize_per_tensor(t, scale, 0, torch.qint8))
    out["per_tensor_q_only_gbps"] = gbps(x.nbytes, s)
    return out


def w_bnb(path, check):
    import bitsandbytes.functional as F
    import torch

    torch.set_num_threads(2)
    x = load_data(path)
    t = torch.from_numpy(x)
    p, st = F.quantize_4bit(t[:2], blocksize=64, quant_type="nf4")
    F.dequantize_4bit(p, st, quant_type="nf4")
    s, (p, st) = timed(lambda: F.quantize_4bit(t, blocksize=64, quant_type="nf4"))
    out = {"bytes": x.nbytes, "q_gbps": gbps(x.nbytes, s), "threads": torch.get_num_threads()}
    s, y = timed(lambda: F.dequantize_4bit(p, st, quant_type="nf4"))
    out["dq_gbps"] = gbps(x.nbytes, s)
    assert tuple(y.shape) == x.shape
    if check:
        out["agree_with_hurray"] = agree_with_hurray(
            x,
            "nf4",
            lambda xs: F.dequantize_4bit(
                *F.quantize_4bit(torch.from_numpy(xs), blocksize=64, quant_type="nf4"),
                quant_type="nf4",
            ).numpy(),
        )
    return out


def w_gguf(path, mib, check):
    import gguf
    from gguf import quants

    x = load_data(path, mib)
    out = {"bytes": x.nbytes}
    for name in ("Q8_0", "Q4_0"):
        qt = getattr(gguf.GGMLQuantizationType, name)
        quants.dequantize(quants.quantize(x[:2], qt), qt)  # warm up
        s, q = timed(lambda: quants.quantize(x, qt))
        out[f"{name}_q_gbps"] = gbps(x.nbytes, s)
        s, y = timed(lambda: quants.dequantize(q, qt))
        out[f"{name}_dq_gbps"] = gbps(x.nbytes, s)
        if check:
            out[f"{name}_agree_with_hurray"] = agree_with_hurray(
                x, name.lower(), lambda xs: quants.dequantize(quants.quantize(xs, qt), qt)
            )
    return out


def agree_with_hurray(x, scheme, roundtrip):
    """Untimed: the fraction of the first 64 rows whose dequantized float32 bits equal
    hurray's (None when hurray.quantize is not available)."""
    try:
        import hurray

        quantize = hurray.quantize
    except (ImportError, AttributeError):
        return None
    xs = x[: min(x.shape[0], 64)]
    r = np.asarray(roundtrip(xs), dtype=np.float32).reshape(xs.shape)
    h = quantize(xs, scheme, **SCHEME_KW.get(scheme, {})).dequantize()
    return float(np.mean(h.view(np.uint32) == r.view(np.uint32)))


# plain numpy references (single thread, the same rules as hurray's kernels; MX
# inputs are finite here, so the NaN/Inf block rule is not implemented)


def np_sym_int8_q(x, group):
    """Symmetric int8 affine; each row of x.reshape(-1, group) is one scale group."""
    b = x.reshape(-1, group)
    amax = np.max(np.abs(b), axis=1)
    scale = np.clip(amax / np.float32(127), np.float32(2.0**-126), np.finfo(np.float32).max)
    inv = np.float32(1) / scale
    y = b * inv[:, None]
    np.rint(y, out=y)
    np.clip(y, -128, 127, out=y)
    return y.astype(np.int8), scale


def np_sym_int8_dq(q, shape):
    codes, scale = q
    return (codes.astype(np.float32) * scale[:, None]).reshape(shape)


def np_nf4_q(x):
    b = x.reshape(-1, 64)
    amax = np.max(np.abs(b), axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(1) / amax, np.float32(0)).astype(np.float32)
    y = b * inv[:, None]
    codes = np.searchsorted(NF4_MID, y, side="left").astype(np.uint8)  # count of T < y
    packed = codes.reshape(-1)[0::2] | (codes.reshape(-1)[1::2] << 4)
    return packed, amax


def np_nf4_dq(q, shape):
    packed, amax = q
    codes = np.empty((packed.size, 2), dtype=np.uint8)
    codes[:, 0] = packed & 0xF
    codes[:, 1] = packed >> 4
    return (NF4[codes.reshape(-1, 64)] * amax[:, None]).reshape(shape)


def np_mx_q(x, scheme):
    import ml_dtypes

    name, emax, vmax, bits = MX[scheme]
    b = x.reshape(-1, 32)
    amax = np.max(np.abs(b), axis=1)
    e = ((amax.view(np.uint32) >> 23) & 0xFF).astype(np.int32) - 127
    shared = np.clip(e - emax, -127, 127)
    mul = np.ldexp(np.float32(1), -shared).astype(np.float32)
    y = b * mul[:, None]
    if name is None:
        y *= np.float32(64)
        np.rint(y, out=y)
        np.clip(y, -127, 127, out=y)
        codes = y.astype(np.int8)
    else:
        np.clip(y, -vmax, vmax, out=y)
        codes = y.astype(getattr(ml_dtypes, name))
    u = codes.view(np.uint8).reshape(-1)
    if bits == 4:
        u = u[0::2] | (u[1::2] << 4)
    elif bits == 6:
        u = u.reshape(-1, 4)
        p = np.empty((u.shape[0], 3), dtype=np.uint8)
        p[:, 0] = u[:, 0] | (u[:, 1] << 6)
        p[:, 1] = (u[:, 1] >> 2) | (u[:, 2] << 4)
        p[:, 2] = (u[:, 2] >> 4) | (u[:, 3] << 2)
        u = p
    return u, (shared + 127).astype(np.uint8)


def np_mx_dq(q, shape, scheme):
    import ml_dtypes

    name, _, _, bits = MX[scheme]
    packed, sbyte = q
    if bits == 4:
        u = np.empty((packed.size, 2), dtype=np.uint8)
        u[:, 0] = packed & 0xF
        u[:, 1] = packed >> 4
    elif bits == 6:
        p = packed.reshape(-1, 3)
        u = np.empty((p.shape[0], 4), dtype=np.uint8)
        u[:, 0] = p[:, 0] & 0x3F
        u[:, 1] = (p[:, 0] >> 6) | ((p[:, 1] & 0xF) << 2)
        u[:, 2] = (p[:, 1] >> 4) | ((p[:, 2] & 0x3) << 4)
        u[:, 3] = p[:, 2] >> 2
    else:
        u = packed
    codes = u.reshape(-1, 32).view(np.int8 if name is None else getattr(ml_dtypes, name))
    scale = np.ldexp(np.float32(1), sbyte.astype(np.int32) - 127).astype(np.float32)
    if name is None:
        scale *= np.float32(2.0**-6)
    return (codes.astype(np.float32) * scale[:, None]).reshape(shape)


NP_REFS = {
    "affine": (lambda x: np_sym_int8_q(x, x.size), np_sym_int8_dq),
    "per_channel": (lambda x: np_sym_int8_q(x, x.shape[-1]), np_sym_int8_dq),  # axis 0 of 2-D
    "block_affine": (lambda x: np_sym_int8_q(x, 32), np_sym_int8_dq),
    "nf4": (np_nf4_q, np_nf4_dq),
    **{
        s: ((lambda x, s=s: np_mx_q(x, s)), (lambda q, shape, s=s: np_mx_dq(q, shape, s)))
        for s in MX
    },
}


def w_numpy(path, mib, check, scheme):
    """One numpy reference scheme, alone in a fresh process, like "hurray at
    the slice": run after other schemes in the same process, a fresh output
    reused the pages the earlier ones had just freed (already faulted in),
    which made its dequantize up to 4x faster than in a fresh process
    (per_channel, 64 MiB: 0.4-0.6 GB/s alone, 2.0-2.6 after affine)."""
    x = load_data(path, mib)
    out = {"bytes": x.nbytes}
    fq, fdq = NP_REFS[scheme]
    fdq(fq(x[:2]), x[:2].shape)  # warm up (imports ml_dtypes for the MX kinds)
    s, q = timed(lambda: fq(x))
    out[f"{scheme}_q_gbps"] = gbps(x.nbytes, s)
    s, _ = timed(lambda: fdq(q, x.shape))
    out[f"{scheme}_dq_gbps"] = gbps(x.nbytes, s)
    if check:  # untimed: does the reference do hurray's work?
        out[f"{scheme}_agree_with_hurray"] = agree_with_hurray(
            x, scheme, lambda xs: fdq(fq(xs), xs.shape)
        )
    return out


def worker(argv):
    kind, path = argv[0], argv[1]
    if kind == "memcpy":
        res = w_memcpy(path)
    elif kind == "hurray":
        res = w_hurray(path, argv[2], argv[3] == "1")
    elif kind == "hurray_slice":
        res = w_hurray_slice(path, argv[2], float(argv[3]))
    elif kind == "torch":
        res = w_torch(path)
    elif kind == "bnb":
        res = w_bnb(path, argv[2] == "1")
    elif kind == "gguf":
        res = w_gguf(path, float(argv[2]), argv[3] == "1")
    elif kind == "numpy":
        res = w_numpy(path, float(argv[2]), argv[3] == "1", argv[4])
    else:
        raise SystemExit(f"unknown worker {kind}")
    print(json.dumps(res))


# ------------------------------------------------------------------ driver


def run_worker(*args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:]
        return {"error": " | ".join(tail)[-400:] or f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def summarize(runs, key):
    vals = [
        r[key]
        for r in runs
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
    ]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize_all(runs):
    keys = []
    for r in runs:
        keys += [k for k in r if k not in keys]
    out = {}
    for k in keys:
        if k == "error":
            errs = [r["error"] for r in runs if "error" in r]
            out["errors"] = errs
        elif all(isinstance(r.get(k), bool) for r in runs if k in r):
            out[k] = all(r[k] for r in runs if k in r)
        else:
            out[k] = summarize(runs, k)
    return out


def med(d, key):
    v = d.get(key) if d else None
    return v["median"] if isinstance(v, dict) else None


def slice_mib(scheme, np_mib, gguf_mib):
    """The size of the single-threaded references of `scheme` (numpy, else gguf)."""
    return np_mib if scheme in NP_REFS else gguf_mib


def main():
    mib = float(os.environ.get("QBENCH_MIB", "256"))
    reps = int(os.environ.get("QBENCH_REPS", "5"))
    gguf_mib = min(mib, float(os.environ.get("QBENCH_GGUF_MIB", "32")))
    np_mib = min(mib, float(os.environ.get("QBENCH_NP_MIB", "64")))
    outdir = os.path.abspath(os.environ.get("QBENCH_OUT", os.path.join(HERE, "results")))
    os.makedirs(outdir, exist_ok=True)
    started = time.time()
    log = lambda *a: print(f"[{time.time() - started:6.1f}s]", *a, flush=True)  # noqa: E731

    versions = {"numpy": np.__version__, "python": platform.python_version()}
    from importlib import metadata

    for mod in ("ml_dtypes", "torch", "bitsandbytes", "gguf", "hurray"):
        try:
            versions[mod] = metadata.version(mod)
        except metadata.PackageNotFoundError:
            versions[mod] = "not installed"
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="hurray-qbench-", suffix=".npy", dir=shm)
    os.close(fd)
    try:
        nbytes = make_data(path, mib)
        rows = rows_for(mib)
        log(f"input float32 ({rows}, {COLS}) = {nbytes / MiB:.0f} MiB, {reps} reps")
        res = {
            "config": {
                "mib": mib,
                "shape": [rows, COLS],
                "bytes": nbytes,
                "reps": reps,
                "gguf_slice_mib": gguf_mib,
                "gguf_slice_shape": [rows_for(gguf_mib), COLS],
                "numpy_slice_mib": np_mib,
                "numpy_slice_shape": [rows_for(np_mib), COLS],
                "seed": SEED,
                "cpus": os.cpu_count(),
                "machine": platform.machine(),
                "processor": _cpu_name(),
                "versions": versions,
                "cache": "warm",
                "loadavg_start": _loadavg(),
                "simd_level": _simd_level(),
            },
            "memcpy": None,
            "hurray": {},
            "references": {},
        }

        # Repetitions are interleaved (every measurement once, then again, ...), so that a
        # burst of other work on the machine spreads over many figures instead of spoiling
        # every run of one of them; medians then shrug it off.
        raw = {
            k: []
            for k in (
                "memcpy",
                "torch",
                "bnb",
                "gguf",
                "numpy",
                *("hurray " + s for s in SCHEMES),
                *("hurray slice " + s for s in SCHEMES),
            )
        }
        for r in range(reps):
            check = int(r == 0)
            raw["memcpy"].append(run_worker("memcpy", path))
            for scheme in SCHEMES:
                raw["hurray " + scheme].append(run_worker("hurray", path, scheme, check))
            raw["torch"].append(run_worker("torch", path))
            raw["bnb"].append(run_worker("bnb", path, check))
            raw["gguf"].append(run_worker("gguf", path, gguf_mib, check))
            for scheme in NP_REFS:  # one fresh process each, as hurray at the slice
                raw["numpy"].append(run_worker("numpy", path, np_mib, check, scheme))
            for scheme in SCHEMES:
                raw["hurray slice " + scheme].append(
                    run_worker("hurray_slice", path, scheme, slice_mib(scheme, np_mib, gguf_mib))
                )
            errs = sorted({k for k, v in raw.items() if "error" in v[-1]})
            log(f"round {r + 1}/{reps} done" + (f"; errors in {errs}" if errs else ""))
        res["memcpy"] = summarize_all(raw["memcpy"])
        log("memcpy", round(med(res["memcpy"], "memcpy_gbps") or 0, 2), "GB/s")
        for scheme in SCHEMES:
            res["hurray"][scheme] = h = summarize_all(raw["hurray " + scheme])
            h["slice"] = summarize_all(raw["hurray slice " + scheme])
            h["slice"]["mib"] = slice_mib(scheme, np_mib, gguf_mib)
            if h.get("errors"):
                log("hurray", scheme, "ERROR", h["errors"][0])
            else:
                log(
                    "hurray",
                    scheme,
                    {
                        k: round(med(h, k), 2)
                        for k in ("q1_gbps", "q2_gbps", "dq1_gbps", "dq2_gbps")
                    },
                )
    finally:
        os.unlink(path)

    refs = res["references"]
    tsum = summarize_all(raw["torch"])
    for name, key in (
        ("torch.quantize_per_tensor", "per_tensor"),
        ("torch.quantize_per_channel", "per_channel"),
    ):
        refs[name] = {
            "q": tsum.get(f"{key}_q_gbps"),
            "dq": tsum.get(f"{key}_dq_gbps"),
            "threads": 2,
            "mib": mib,
            "errors": tsum.get("errors"),
        }
    refs["torch.quantize_per_tensor"]["q_only"] = tsum.get("per_tensor_q_only_gbps")
    bsum = summarize_all(raw["bnb"])
    refs["bnb nf4"] = {
        "q": bsum.get("q_gbps"),
        "dq": bsum.get("dq_gbps"),
        "threads": 2,
        "mib": mib,
        "errors": bsum.get("errors"),
        "agree_with_hurray": bsum.get("agree_with_hurray"),
    }
    gsum = summarize_all(raw["gguf"])
    for n in ("Q8_0", "Q4_0"):
        refs[f"gguf {n}"] = {
            "q": gsum.get(f"{n}_q_gbps"),
            "dq": gsum.get(f"{n}_dq_gbps"),
            "threads": 1,
            "mib": gguf_mib,
            "errors": gsum.get("errors"),
            "agree_with_hurray": gsum.get(f"{n}_agree_with_hurray"),
        }
    nsum = summarize_all(raw["numpy"])
    for s in NP_REFS:
        refs[f"numpy {s}"] = {
            "q": nsum.get(f"{s}_q_gbps"),
            "dq": nsum.get(f"{s}_dq_gbps"),
            "threads": 1,
            "mib": np_mib,
            "errors": nsum.get("errors"),
            "agree_with_hurray": nsum.get(f"{s}_agree_with_hurray"),
        }
    res["config"]["runtime_s"] = time.time() - started
    res["config"]["loadavg_end"] = _loadavg()

    with open(os.path.join(outdir, "quant.json"), "w") as f:
        json.dump(res, f, indent=2)
    md = render_md(res)
    with open(os.path.join(outdir, "quant.md"), "w") as f:
        f.write(md)
    print(md)
    log("done")


def _loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(v) for v in f.read().split()[:3]]
    except OSError:
        return None


def _simd_level():
    """The kernels' instruction-set level (hurray_simd_level; HURRAY_SIMD forces it)."""
    try:
        import hurray._hurray as ext

        return ext._simd_level()
    except (ImportError, AttributeError):
        return "unknown"


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ------------------------------------------------------------------ report


def f2(v):
    return "n/a" if v is None else (f"{v:.2f}" if v < 100 else f"{v:.0f}")


def best_ref(res, scheme, direction):
    best = None
    for name, schemes in REF_SCHEMES.items():
        if scheme not in schemes:
            continue
        r = res["references"].get(name)
        v = r and r.get(direction) and r[direction]["median"]
        if v and (best is None or v > best[1]):
            best = (name, v, r["threads"], r["mib"])
    return best


def hurray_at(res, scheme, direction, threads, mib):
    """hurray's median GB/s to set against a reference run at `threads` on
    `mib` MiB: the figure on the same slice where one was measured (1
    thread), else the full-size one at that thread count. -> (GB/s, mib)."""
    h = res["hurray"].get(scheme, {})
    sl = h.get("slice") or {}
    if threads == 1 and mib != res["config"]["mib"] and sl.get("mib") == mib:
        v = med(sl, f"{direction}1_gbps")
        if v:
            return v, mib
    return med(h, f"{direction}{threads}_gbps"), res["config"]["mib"]


def mark(ok):
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def render_goals(res, mc):
    """Issue 19's goals, one row per scheme: dequantize into a reused out= on
    one thread >= 50% of memcpy; dequantize faster than every reference at
    the reference's thread count; per-tensor affine quantize and dequantize
    >= 1.0x torch's fbgemm (torch.quantize_per_tensor, observer included)."""
    L = [
        f"## Goals (SIMD level `{res['config'].get('simd_level', 'unknown')}`)\n",
        "| scheme | out= / memcpy, 1 thr (goal >= 0.50) | | slowest hurray / reference "
        "dequantize, equal threads (goal > 1.0) | | affine vs fbgemm: quantize, dequantize "
        "(goal >= 1.0) | |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SCHEMES:
        h = res["hurray"].get(s, {})
        o1 = med(h, "dqo1_gbps")
        r1 = o1 / mc if o1 and mc else None
        d = {1: med(h, "dq1_gbps"), 2: med(h, "dq2_gbps")}
        q = {1: med(h, "q1_gbps"), 2: med(h, "q2_gbps")}
        worst = None
        for name, schemes in REF_SCHEMES.items():
            r = res["references"].get(name)
            v = r and r.get("dq") and r["dq"]["median"]
            if s not in schemes or not v:
                continue
            mine, mib = hurray_at(res, s, "dq", r["threads"], r["mib"])
            if not mine:
                continue
            ratio = mine / v
            if worst is None or ratio < worst[0]:
                worst = (ratio, name, r["threads"], mib)
        cells = [LABEL.get(s, s), f2(r1), mark(None if r1 is None else r1 >= 0.5)]
        if worst:
            size = f"both {worst[3]:.0f} MiB"
            cells += [
                f"{f2(worst[0])}x ({worst[1]}, {worst[2]} thr, {size})",
                mark(worst[0] > 1.0),
            ]
        else:
            cells += ["no reference", "n/a"]
        t = res["references"].get("torch.quantize_per_tensor")
        if s == "affine" and t and t.get("q") and t.get("dq"):
            rq = q[t["threads"]] / t["q"]["median"] if q.get(t["threads"]) else None
            rd = d[t["threads"]] / t["dq"]["median"] if d.get(t["threads"]) else None
            cells += [
                f"{f2(rq)}x, {f2(rd)}x ({t['threads']} thr)",
                mark(None if rq is None or rd is None else rq >= 1.0 and rd >= 1.0),
            ]
        else:
            cells += ["—", ""]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    return L


def render_md(res):
    cfg = res["config"]
    mc = med(res["memcpy"], "memcpy_gbps")
    fresh = med(res["memcpy"], "copy_fresh_gbps")
    L = ["# hurray quantization kernels — throughput\n"]
    L.append(
        f"Generated by `bench/bench_quant.py`. Input: float32 randn, shape "
        f"({cfg['shape'][0]}, {cfg['shape'][1]}) = {cfg['bytes'] / MiB:.0f} MiB (QBENCH_MIB), seed "
        f"{cfg['seed']}. GB/s = bytes of float32 (input of quantize, output of dequantize) / "
        f"seconds, 1 GB = 1e9 B. Every figure is the **median of {cfg['reps']}** fresh processes "
        f"(QBENCH_REPS); min/max in `quant.json`. **Warm**: the input is in memory (built and "
        f"touched before the clock); outputs are allocated by the call being timed. Machine: "
        f"{cfg['cpus']} CPUs ({cfg['processor']}), versions {cfg['versions']}. Runtime "
        f"{cfg['runtime_s']:.0f} s. Load average (1/5/15 min) at the start {cfg.get('loadavg_start')}, "
        f"at the end {cfg.get('loadavg_end')}: anything else running on the machine shows up "
        f"as spread (min–max in `quant.json`).\n"
    )
    L.append(
        f"memcpy limit: `np.copyto` of the {cfg['bytes'] / MiB:.0f} MiB into a preallocated array "
        f"(1 thread): **{f2(mc)} GB/s**; `x.copy()` into a fresh allocation (page faults "
        f"included, like a dequantize's output): {f2(fresh)} GB/s.\n"
    )
    L.append(
        "| scheme | quantize GB/s 1 thr | quantize 2 thr | dequantize GB/s 1 thr | dequantize 2 thr "
        "| dequantize into out= 1 / 2 thr | dequantize into out= / memcpy (1 / 2 thr) "
        "| best reference quantize: GB/s | hurray / ref quantize "
        "| best reference dequantize: GB/s | hurray / ref dequantize |"
    )
    L.append("|" + "---|" * 11)
    for s in SCHEMES:
        h = res["hurray"].get(s, {})
        if h.get("errors") and med(h, "q1_gbps") is None:
            L.append(f"| {LABEL.get(s, s)} | error: {h['errors'][0][:80]} |" + " |" * 9)
            continue
        q1, q2, d1, d2 = (med(h, k) for k in ("q1_gbps", "q2_gbps", "dq1_gbps", "dq2_gbps"))
        o1, o2 = med(h, "dqo1_gbps"), med(h, "dqo2_gbps")
        cells = [
            LABEL.get(s, s),
            f2(q1),
            f2(q2),
            f2(d1),
            f2(d2),
            f"{f2(o1)} / {f2(o2)}",
            f"{f2(o1 / mc if o1 and mc else None)} / {f2(o2 / mc if o2 and mc else None)}",
        ]
        for direction in ("q", "dq"):
            b = best_ref(res, s, direction)
            if b is None:
                cells += ["—", "—"]
                continue
            name, v, thr, mib = b
            note = f"{thr} thr" + ("" if mib == cfg["mib"] else f", {mib:.0f} MiB slice")
            mine, at = hurray_at(res, s, direction, thr, mib)
            same = "" if at == cfg["mib"] else f" (hurray at the slice: {f2(mine)})"
            cells += [f"{name} ({note}): {f2(v)}", f"{f2(mine / v if mine else None)}x{same}"]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append(
        "hurray / ref compares hurray at the reference's thread count (1 thread against numpy "
        "and gguf, 2 threads against torch and bitsandbytes) and at the reference's size: "
        "against a reference run on a slice, hurray's figure on the same slice (its own fresh "
        "process, 1 thread; the size of a fresh output changes what its page faults cost), "
        "the full-size columns otherwise.\n"
    )
    L += render_goals(res, mc)

    L.append("## References\n")
    L.append(
        "| reference | stands for | threads | data | quantize GB/s (min–max) | dequantize GB/s (min–max) |"
    )
    L.append("|---|---|---|---|---|---|")
    for name, r in res["references"].items():

        def mm(d):
            return "n/a" if not d else f"{f2(d['median'])} ({f2(d['min'])}–{f2(d['max'])})"

        data = f"{r['mib']:.0f} MiB" + (" slice, scaled" if r["mib"] != cfg["mib"] else "")
        err = f" — errors: {r['errors'][0][:80]}" if r.get("errors") else ""
        L.append(
            f"| {name}{err} | {', '.join(REF_SCHEMES[name])} | {r['threads']} | {data} | "
            f"{mm(r['q'])} | {mm(r['dq'])} |"
        )
    L.append("")
    L.append("## Checks\n")
    for s in SCHEMES:
        h = res["hurray"].get(s, {})
        if "rel_rmse" in h and h["rel_rmse"]:
            cpu = " / ".join(f2(med(h, k)) for k in ("q1_cpu", "q2_cpu", "dq1_cpu", "dq2_cpu"))
            L.append(
                f"- {s}: dequantize 1 thread == 2 threads bit for bit: "
                f"{h.get('threads_identical')}; relative RMS error {h['rel_rmse']['median']:.3g}; "
                f"CPU use (process CPU s per wall s) quantize 1 / 2 thr, dequantize 1 / 2 thr: {cpu}"
            )
    for name, r in res["references"].items():
        a = r.get("agree_with_hurray")
        if a:
            L.append(
                f"- {name}: dequantized values equal to hurray's on the first 64 rows: "
                f"{a['median'] * 100:.4g}%"
            )
    L.append("")
    L.append("## Notes\n")
    tq = res["references"]["torch.quantize_per_tensor"]
    L.append(
        "- torch references run with `torch.set_num_threads(2)`; their quantize time includes the "
        "observer (`torch.aminmax`, per tensor or per row) that computes the symmetric int8 scale(s), "
        "as hurray computes its scales itself"
        + (
            f"; `torch.quantize_per_tensor` alone (scale known): {f2(tq['q_only']['median'])} GB/s."
            if tq.get("q_only")
            else "."
        )
    )
    L.append(
        "- bitsandbytes: `quantize_4bit` / `dequantize_4bit`, nf4, blocksize 64, CPU tensors, "
        "with `torch.set_num_threads(2)`."
    )
    L.append(
        f"- gguf.quants (pure numpy) runs on the first {cfg['gguf_slice_mib']:.0f} MiB "
        f"({cfg['gguf_slice_shape'][0]} rows) and the plain numpy references on the first "
        f"{cfg['numpy_slice_mib']:.0f} MiB ({cfg['numpy_slice_shape'][0]} rows) of the same input, "
        f"because they are slow; their GB/s are the slice's bytes / seconds, a rate comparable "
        f"with the full-size figures (both sizes are far beyond the last-level cache at the "
        f"defaults)."
    )
    L.append(
        "- numpy references (1 thread, each scheme in a fresh process of its own, as hurray at "
        "the slice; run one after another in one process, a later scheme's output reused pages "
        "an earlier one had just freed, already faulted in) follow hurray's rules: affine kinds "
        "= symmetric int8 "
        "(per tensor, per row = axis 0, blocks of 32 along the last axis), float32 scale "
        "amax/127, rint(x * (1/scale)); nf4 = blocks of 64, searchsorted over the 15 "
        "midpoints, nibble packing; MX = per block of 32 the shared scale from the float32 "
        "exponent of amax, `ml_dtypes` cast of the clipped scaled values (mxint8: rint(y*64) "
        "clipped), 4-bit and 6-bit packing; MX's NaN/Inf block rule is left out (the input "
        'is finite). "Checks" above says how often their dequantized values equal hurray\'s.'
    )
    L.append(
        "- memcpy reads and writes the float32 bytes once; a dequantize writes the same float32 "
        "bytes but reads only 1/4 (int8, fp8) to 1/8 (4-bit) of them plus scales, so a "
        "store-bound kernel writing into warm memory could come close to the memcpy figure. "
        "A dequantize returns a fresh array, though, and pays its page faults: the `x.copy()` "
        "figure above (fresh destination) is the practical ceiling here, and a dequantize well "
        "below it is limited by its decode arithmetic."
    )
    L.append(
        '- "CPU use" in Checks is process CPU time / wall time of the call (user + system, all '
        "threads): about 1 for a 1-thread call that was not preempted, up to 2 when both "
        "threads stay busy; a 1-thread figure well under 1 means other work on the machine took "
        "the CPU during that call."
    )
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
    else:
        main()
